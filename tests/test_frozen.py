"""Frozen sign-PCA codes against slow references. Run: python -m pytest tests/test_frozen.py"""

import itertools

import numpy as np
import pytest
import torch

import train
from codes import pack_bits, sign_pca, sign_project, unpack_bits
from conftest import TINY
from model import GPT, GPTConfig, param_counts
from tablefree.checkpoint import build_model, load_checkpoint, read_code_source
from tablefree.common import UserError
from tablefree.configurator import resolve
from tablefree.diagnostics import average_ranks, code_quality


def table(V, d, seed=0):
    """A source table with a few strong directions, like a trained embedding's."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(V, 4, generator=g) @ torch.randn(4, d, generator=g) * 3 + torch.randn(V, d, generator=g)


def reference_sign_pca(source, dim):
    """The same code by another road: numpy's eigendecomposition of the covariance X^T X, in float64.

    Returns the projections (V, D) with each eigenvector signed by its largest-magnitude loading."""
    x = source.double().numpy()
    x = x - x.mean(axis=0)
    values, vectors = np.linalg.eigh(x.T @ x)  # ascending
    top = vectors[:, np.argsort(values)[::-1][:dim]].T  # (D, d)
    top = top * np.sign(top[np.arange(dim), np.abs(top).argmax(axis=1)])[:, None]
    return x @ top.T


@pytest.mark.parametrize("V,d,dim", [(300, 40, 32), (64, 96, 63), (500, 24, 24)])
def test_sign_pca_bits_equal_a_float64_reference(V, d, dim):
    source = table(V, d)
    bits, mean, components = sign_pca(source, dim)
    projections = reference_sign_pca(source, dim)
    clear = np.abs(projections) > 1e-9  # a projection this close to 0 may round either way
    assert bits.shape == (V, dim) and bits.dtype == torch.uint8
    assert np.array_equal(bits.numpy()[clear], (projections > 0)[clear])
    assert clear.mean() > 0.99
    assert torch.equal(sign_project(source, mean, components), bits)  # a new row is coded the same way


def test_exact_zero_projections_are_zero_bits():
    source = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 0.0]])  # the middle row projects to exactly 0
    bits, _, _ = sign_pca(source, 1)
    assert bits.flatten().tolist() == [1, 0, 0]  # the largest loading is made positive, so row 0 is 1


def test_the_code_is_deterministic_whatever_the_svd_signs():
    source = table(200, 32)
    bits, _, components = sign_pca(source, 16)
    assert torch.equal(sign_pca(source, 16)[0], bits)
    negated, _, same = sign_pca(-source, 16)  # the SVD of -S may sign its vectors either way; the rule fixes them
    assert torch.allclose(same, components) and torch.equal(negated, 1 - bits)
    loadings = components.gather(1, components.abs().argmax(dim=1, keepdim=True))
    assert (loadings > 0).all()
    assert torch.equal(sign_pca(source.float(), 16)[0], bits)  # the input precision does not matter: float64 inside


def test_pack_unpack_round_trip_and_storage():
    for dim in (1, 7, 8, 9, 160, 512):
        bits = torch.randint(0, 2, (33, dim), dtype=torch.uint8)
        packed = pack_bits(bits)
        assert packed.shape == (33, -(-dim // 8)) and packed.dtype == torch.uint8
        assert torch.equal(unpack_bits(packed, dim), bits)
    assert pack_bits(torch.tensor([[1, 0, 0, 0, 0, 0, 1, 1, 1]], dtype=torch.uint8)).tolist() == [[0b10000011, 0b10000000]]
    model = GPT(GPTConfig(vocab_size=1024, n_layer=1, n_head=4, n_embd=160, block_size=8, input="frozen",
                          codes_from="test"), source=table(1024, 160))
    assert model.wte.packed.numel() * model.wte.packed.element_size() == 1024 * 160 // 8  # V x D / 8 bytes
    assert list(model.wte.parameters()) == [] and param_counts(model)["input"] == 0


def test_code_quality_against_brute_force():
    source = table(40, 12)
    bits = sign_pca(source, 10)[0]
    q = code_quality(bits, source, pairs=500)
    pairs = list(itertools.combinations(range(40), 2))
    hamming = [int((bits[i] != bits[j]).sum()) for i, j in pairs]
    assert q["min_hamming"] == min(hamming) and q["min_hamming_over"] == "all pairs"
    assert q["mean_hamming"] == pytest.approx(np.mean(hamming))
    assert q["distinct"] == len({tuple(row.tolist()) for row in bits})
    ones = bits.double().mean(dim=0)
    assert q["bit_balance"]["min"] == pytest.approx(float(ones.min())) and q["bit_balance"]["max"] == pytest.approx(float(ones.max()))
    assert q["spearman"] > 0.3  # similar source rows get similar codes
    x = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0])
    slow = [1 + sum(v < xi for v in x) + (sum(v == xi for v in x) - 1) / 2 for xi in x]  # rank, ties averaged
    assert np.array_equal(average_ranks(x), slow)


def test_a_checkpoint_carries_the_codes_as_bits(data_dir, tmp_path):
    common = ["--data_dir", str(data_dir), "--dataset=tiny", *TINY, "--max_iters=3", "--eval_interval=3"]
    train.train(resolve(train.DEFAULTS, [*common, "--input=learned", f"--out_dir={tmp_path / 'learned'}"]))
    train.train(resolve(train.DEFAULTS, [*common, "--input=frozen", f"--codes_from={tmp_path / 'learned'}",
                                         f"--out_dir={tmp_path / 'frozen'}"]))
    source = read_code_source(tmp_path / "learned", 300)
    ckpt = load_checkpoint(tmp_path / "frozen")
    wte = build_model(ckpt).wte
    bits = sign_pca(source, 32)[0]
    assert torch.equal(unpack_bits(wte.packed, 32), bits)
    assert [k for k in ckpt["model"] if k.startswith("wte.")] == ["wte.packed"]  # the source gives the rest
    assert ckpt["code_quality"]["V"] == 300 and ckpt["model_config"]["codes_from"] == str(tmp_path / "learned")
    idx = torch.arange(300)[None]
    assert torch.equal(wte(idx)[0], bits.float())  # n_embd 32 = D: the lift is the identity


def test_codes_from_a_run_stopped_early_say_so_and_go_on(data_dir, tmp_path, capsys):
    """A learned run interrupted before its max_iters (its checkpoint at an evaluation before the end): the
    frozen run says at which step of how many, in one line, and derives its codes from that table."""
    common = ["--data_dir", str(data_dir), "--dataset=tiny", *TINY, "--eval_interval=2"]
    train.train(resolve(train.DEFAULTS, [*common, "--input=learned", "--max_iters=2", "--lr_decay_iters=6",
                                         f"--out_dir={tmp_path / 'learned'}"]))
    ckpt = torch.load(tmp_path / "learned" / "ckpt.pt", weights_only=True)
    ckpt["settings"]["max_iters"] = 6  # as a run stopped at step 2 of 6 leaves it (its crc32 made again)
    from tablefree.common import save_checkpoint
    save_checkpoint(ckpt, tmp_path / "learned")
    capsys.readouterr()
    train.train(resolve(train.DEFAULTS, [*common, "--input=frozen", "--max_iters=2", f"--codes_from={tmp_path / 'learned'}",
                                         f"--out_dir={tmp_path / 'frozen'}"]))
    said = capsys.readouterr().out
    assert f"notice: --codes_from {tmp_path / 'learned'} stopped at step 2 of its 6: the codes come from its table" in said
    assert (tmp_path / "frozen" / "ckpt.pt").exists()


def test_bad_sources_are_one_line_errors(data_dir, tmp_path):
    torch.save(torch.zeros(299, 8), tmp_path / "short.pt")
    with pytest.raises(UserError, match="has 299 rows but the vocabulary has 300 tokens"):
        read_code_source(tmp_path / "short.pt", 300)
    torch.save(torch.zeros(300), tmp_path / "flat.pt")
    with pytest.raises(UserError, match="is not a 2-D float table"):
        read_code_source(tmp_path / "flat.pt", 300)
    with pytest.raises(ValueError, match="set it for input='frozen' and only then"):
        GPTConfig(input="frozen")
    with pytest.raises(ValueError, match="cannot take 32 principal components of a 50 x 8 table"):
        GPT(GPTConfig(vocab_size=50, n_layer=1, n_head=2, n_embd=32, input="frozen", codes_from="x"), source=torch.randn(50, 8))
