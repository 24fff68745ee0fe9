"""Fixed token codes against brute-force references. Run: python -m pytest tests/test_codes.py"""

import pytest
import torch

from codes import affine_code, binary_code, code_bits, code_values, constant_ids, gf2_rank, lift_index, random_affine
from conftest import reference_codebook, reference_lift


def test_code_bits_is_ceil_log2():
    assert [code_bits(v) for v in (2, 3, 4, 5, 65, 50257, 65535, 65536, 65537)] == [1, 2, 2, 3, 7, 16, 16, 16, 17]
    with pytest.raises(ValueError, match="at least 2"):
        code_bits(1)


def test_binary_code_matches_python_formatting():
    ids = torch.tensor([[0, 5], [65535, 40961]])  # any shape
    code = binary_code(ids, 16)
    assert code.shape == (2, 2, 16) and code.dtype == torch.uint8
    for t, c in zip(ids.flatten().tolist(), code.view(-1, 16).tolist()):
        assert "".join(map(str, c)) == format(t, "016b")  # most significant bit first


def test_binary_and_affine_codes_are_injective_at_k16():
    A, b = random_affine(16, seed=0)
    ids = torch.arange(65536)
    for book in (binary_code(ids, 16), affine_code(ids, A, b)):
        assert book.shape == (65536, 16)
        assert torch.unique(book, dim=0).shape[0] == 65536


def brute_force_rank(rows, bits):
    """Rank over GF(2) = log2 of the number of distinct vectors the rows span."""
    span = {0}
    for row in rows:
        span |= {s ^ row for s in span}
    return len(span).bit_length() - 1


def test_gf2_rank_matches_brute_force():
    g = torch.Generator().manual_seed(0)
    for _ in range(300):
        bits = int(torch.randint(1, 7, (1,), generator=g))
        rows = torch.randint(0, 2 ** bits, (bits,), generator=g).tolist()
        assert gf2_rank(rows) == brute_force_rank(rows, bits)
    assert gf2_rank([0b01, 0b10, 0b11]) == 2


def test_random_affine_is_invertible_and_reproducible():
    A, b = random_affine(16, seed=3)
    rows = [int("".join(map(str, r)), 2) for r in A.tolist()]
    assert gf2_rank(rows) == 16
    # invertible over GF(2) <=> the integer determinant is odd
    assert round(torch.linalg.det(A.double()).item()) % 2 == 1
    A2, b2 = random_affine(16, seed=3)
    A3, b3 = random_affine(16, seed=4)
    assert torch.equal(A, A2) and torch.equal(b, b2)
    assert not (torch.equal(A, A3) and torch.equal(b, b3))


def test_affine_code_equals_matrix_reference():
    A, b = random_affine(10, seed=1)
    ids = torch.arange(1024).view(32, 32)
    reference = (binary_code(ids, 10).long() @ A.long().T) % 2 ^ b.long()  # c' = A c XOR b
    assert torch.equal(affine_code(ids, A, b), reference.to(torch.uint8))


def test_on_the_fly_codes_equal_the_reference_codebook():
    A, b = random_affine(code_bits(1000), seed=2)
    ids = torch.randint(0, 1000, (4, 7))
    assert torch.equal(binary_code(ids, 10), reference_codebook(1000)[ids])
    assert torch.equal(affine_code(ids, A, b), reference_codebook(1000, A, b)[ids])


@pytest.mark.parametrize("mode", ["tile", "interleave"])
@pytest.mark.parametrize("n_embd", [16, 48, 50, 1024])
def test_lift_covers_every_bit_and_has_rank_k(mode, n_embd):
    R = torch.nn.functional.one_hot(lift_index(16, n_embd, mode), 16).float()  # (n_embd, 16)
    assert R.shape == (n_embd, 16) and torch.equal(R.sum(dim=1), torch.ones(n_embd))
    assert (R.sum(dim=0) >= 1).all()  # no bit is dropped, so the lift stays injective
    book = binary_code(torch.arange(65536), 16).float()  # (V, K)
    lifted = book @ R.T  # (V, n_embd) = x(t) for every token
    assert torch.linalg.matrix_rank(lifted.T @ lifted) == 16  # rank(X) = rank(X^T X) <= K
    first_copy = R.argmax(dim=0)  # (K,) a model dimension carrying each bit
    assert torch.equal(lifted[:, first_copy], book)  # the code is read back: injective


def test_lift_index_equals_the_reference_lift():
    for bits, n_embd in [(4, 12), (4, 10), (16, 1024), (10, 160), (7, 50)]:
        for mode in ("tile", "interleave"):
            index = lift_index(bits, n_embd, mode)
            assert torch.equal(torch.nn.functional.one_hot(index, bits).float(), reference_lift(bits, n_embd, mode))
    assert lift_index(4, 10, "tile").tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]  # last copy cut short
    assert lift_index(4, 10, "interleave").tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 3, 3]


def test_lift_refuses_narrow_models_and_unknown_modes():
    with pytest.raises(ValueError, match="narrower than the 16-bit code"):
        lift_index(16, 8)
    with pytest.raises(ValueError, match="unknown lift mode"):
        lift_index(16, 32, "spiral")


def test_code_values():
    bits = torch.tensor([0, 1], dtype=torch.uint8)
    assert code_values(bits).tolist() == [0.0, 1.0]
    assert code_values(bits, "pm1").tolist() == [-1.0, 1.0]


def test_every_small_affine_map_is_a_permutation():
    for seed in range(20):
        A, b = random_affine(4, seed)
        images = sorted(int("".join(map(str, c)), 2) for c in reference_codebook(16, A, b).tolist())
        assert images == list(range(16))
    # 1,344 of GL(4, 2)'s 20,160 matrices fix the all-ones vector: 200 draws give many distinct ones
    assert len({tuple(random_affine(4, s)[0].flatten().tolist()) for s in range(200)}) > 150


@pytest.mark.parametrize("bits", [3, 10])
def test_affine_maps_fix_the_constant_codes_and_only_them(bits):
    """A 1 = 1 and b constant: the ids with a constant code are 0 and 2^K - 1, as for binary, for
    every seed; the 1,344 such matrices at K = 4 are all drawn (a uniform draw over them)."""
    ids = torch.arange(2 ** bits)
    for seed in range(20):
        A, b = random_affine(bits, seed)
        assert A.sum(dim=1).remainder(2).tolist() == [1] * bits and b.unique().numel() == 1
        assert constant_ids(lambda t: affine_code(t, A, b), 2 ** bits).tolist() == [0, 2 ** bits - 1]
        assert sorted(int("".join(map(str, c)), 2) for c in affine_code(ids, A, b).tolist()) == ids.tolist()
    assert constant_ids(lambda t: binary_code(t, bits), 2 ** bits).tolist() == [0, 2 ** bits - 1]
    assert constant_ids(lambda t: binary_code(t, bits), 2 ** bits - 1).tolist() == [0]  # 2^K - 1 is not an id


@pytest.mark.parametrize("kind", ["binary", "affine"])
def test_extra_bits_give_new_ids_codes_of_their_own(kind):
    from model import GPT, GPTConfig
    from tablefree.extension import add_tokens
    config = dict(vocab_size=300, n_layer=1, n_head=2, n_embd=32, block_size=8, input=kind)
    wide, plain = GPT(GPTConfig(**config, extra_bits=2)).wte, GPT(GPTConfig(**config)).wte
    assert (wide.bits, plain.bits) == (11, 9) and not list(wide.parameters())  # still no parameters
    every = wide.code(torch.arange(2 ** 11))  # (2048, 11): all the ids 11 bits can name
    assert len({tuple(c.tolist()) for c in every}) == 2 ** 11  # injective
    if kind == "binary":  # the old ids' bits unchanged, behind two leading zeros (most significant first)
        old = torch.arange(300)
        assert torch.equal(wide.code(old)[:, 2:], plain.code(old)) and not wide.code(old)[:, :2].any()
    note = add_tokens(GPT(GPTConfig(**config, extra_bits=2)), [[1, 2]] * 1000, [b"ab"] * 1000)
    assert note == {"free_codes": 2048 - 300, "aliased": 0}  # 1,000 new words, none sharing a code
    with pytest.raises(ValueError, match="extra_bits .* widens the binary and affine codes"):
        GPTConfig(**{**config, "input": "learned"}, extra_bits=1)
