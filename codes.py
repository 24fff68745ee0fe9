"""Fixed token codes: the table-free input interface, as pure functions.

A vocabulary of V tokens needs only K = ceil(log2 V) bits to give every token a distinct
address. A. Bochkov, "Language Models Without a Trainable Input Embedding Table: Learning from
Fixed Minimal Binary Token Codes" (2026, arXiv:2605.09751), and its 1.7B-class follow-up, "Do
Language Models Need a Trainable Input Embedding Table? Fixed Minimal Token Codes at 1.7B-Class
Scale" (A. Bochkov, 2026), feed the Transformer that address instead of a learned vector:

    binary:  c(t)  = bin_K(t)                  the K-bit binary expansion of the id
    affine:  c'(t) = A c(t) XOR b              A in GL(K, 2), b in {0,1}^K, fixed at random
    lift:    x(t)  = R c(t)                    R = [I_K; I_K; ...], n_embd x K, no parameters

(The papers write these formulas in their method section without equation numbers.)

Kronecker Embeddings (2026, arXiv:2605.29459; reference package `kronecker-embeddings` 0.1.1)
code each token by its bytes b_1 .. b_L instead of its id, eq. 1 of the paper:

    kappa(t) = z( vec( sum_p e_{b_p} (x) e_p ) / sqrt(L) )   a 256 x pos_dim grid, D = 256 pos_dim

and learn one projection D -> n_embd; z() is a per-token z-normalisation.

Frozen sign-PCA codes (the 1.7B-class follow-up's companion system: "one frozen table of
512-bit codes ... derived once from a pretrained embedding by principal-component projection
and sign binarisation") take an existing V x d table S instead of the id, our recipe where the
paper gives none:

    frozen:  c(t) = [ (S_t - mean(S)) P^T > 0 ]    P: the top D right singular vectors of the
                                                   centred S, each signed so that its largest-
                                                   magnitude loading is positive (deterministic)

Everything here is a pure function of its arguments: no I/O, no globals, and tensors stay on
the device of the ids they were computed from. Bit order throughout is most significant bit
first, so c(t) reads like the written binary number: c(5) = [0, ..., 0, 1, 0, 1].
"""

import random

import torch

LIFT_MODES = ("tile", "interleave")


def code_bits(vocab_size: int) -> int:
    """K = ceil(log2 V), the fewest bits that give V tokens distinct codes (V >= 2)."""
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be at least 2 to need a code, got {vocab_size}")
    return (vocab_size - 1).bit_length()  # exact integer ceil(log2 V), no float rounding


def binary_code(idx: torch.Tensor, bits: int) -> torch.Tensor:
    """c(t) = bin_K(t), computed on the fly with shifts (no table).

    idx: integer tensor of any shape (...,) holding ids in [0, 2^K).
    Returns uint8 (..., K), most significant bit first: c_j = (t >> (K - 1 - j)) & 1.
    """
    shifts = torch.arange(bits - 1, -1, -1, device=idx.device)  # (K,) = K-1, ..., 0
    return ((idx.long().unsqueeze(-1) >> shifts) & 1).to(torch.uint8)  # (..., K)


def gf2_rank(rows: list[int]) -> int:
    """Rank over GF(2) of a matrix given as row bitmasks, by Gaussian elimination."""
    basis = {}  # leading bit -> a reduced row with that leading bit
    for row in rows:
        while row:
            lead = row.bit_length() - 1
            if lead not in basis:
                basis[lead] = row
                break
            row ^= basis[lead]  # clear the leading bit; the row is dependent if this reaches 0
    return len(basis)


def random_affine(bits: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A random A in GL(K, 2) with A 1 = 1, and b = 0 or 1 (all zeros or all ones), from `seed`.

    A 1 = 1 and a constant b send the two constant codes (ids 0 and 2^K - 1) to the two constant
    codes and every other code to a non-constant one, so the ids that enter the model as a
    constant vector are the same as for 'binary', and the tokenizer leaves both unused
    (tokenizer.reserved_ids; docs/inputs.md). A 1 = 1 says each row has an odd number of ones:
    each row is K - 1 fair bits and a last bit that makes the count odd, and singular draws
    (rank < K over GF(2)) are rejected, which samples such A uniformly.
    Returns A: uint8 (K, K) and b: uint8 (K,), on the current default device.
    """
    rng = random.Random(seed)
    while True:
        rows = [odd_row(rng.getrandbits(bits)) for _ in range(bits)]
        if gf2_rank(rows) == bits:
            break
    shift = (1 << bits) - 1 if rng.getrandbits(1) else 0
    A = torch.tensor([[(row >> (bits - 1 - j)) & 1 for j in range(bits)] for row in rows],
                     dtype=torch.uint8)
    b = torch.tensor([(shift >> (bits - 1 - j)) & 1 for j in range(bits)], dtype=torch.uint8)
    return A, b


def odd_row(row: int) -> int:
    """row with its lowest bit set so that its number of ones is odd (the other bits kept)."""
    return row ^ (bin(row).count("1") % 2 == 0)


def parity(x: torch.Tensor) -> torch.Tensor:
    """Number of set bits mod 2 of each entry of a non-negative int64 tensor (< 2^63)."""
    for shift in (32, 16, 8, 4, 2, 1):  # fold the word in half until bit 0 holds the XOR of all
        x = x ^ (x >> shift)
    return x & 1


def affine_code(idx: torch.Tensor, A: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """c'(t) = A bin_K(t) XOR b over GF(2), computed on the fly from the ids (no table).

    Row i of A, read as a K-bit mask m_i (same bit order as binary_code), gives
    c'_i = parity(t AND m_i) XOR b_i, so no matmul is needed and any device works.
    idx: integer (...,), A: 0/1 (K, K), b: 0/1 (K,). Returns uint8 (..., K).
    """
    bits = A.shape[0]
    weights = 2 ** torch.arange(bits - 1, -1, -1, device=A.device)  # (K,) place value of c_j
    row_masks = A.long() @ weights  # (K,) m_i = sum_j A_ij 2^(K-1-j)
    products = idx.long().unsqueeze(-1) & row_masks  # (..., K)
    return (parity(products) ^ b.long()).to(torch.uint8)  # (..., K)


def constant_ids(code, vocab_size: int, chunk: int = 1 << 16) -> torch.Tensor:
    """The ids in [0, V) whose code is all zeros or all ones: int64 (N,).

    Lifted (every bit copied to at least one dimension) such a code is a constant vector, which
    LayerNorm maps to 0: the model cannot see the token, and at a row's first position the
    residual stays constant through every block while each norm's backward multiplies the
    gradient by 1 / sqrt(eps), which overflows in a deep model (docs/inputs.md).
    code: ids (N,) -> 0/1 (N, K), e.g. a fixed-code input's `code`; read `chunk` ids at a time."""
    found = []
    for ids in torch.arange(vocab_size).split(chunk):
        bits = code(ids)  # (chunk, K)
        found.append(ids[bits.amin(dim=-1) == bits.amax(dim=-1)])
    return torch.cat(found)


def lift_index(bits: int, n_embd: int, mode: str = "tile") -> torch.Tensor:
    """Which code bit feeds each of the n_embd model dimensions: x_j = c_{index[j]}.

    tile       index[j] = j mod K          R = [I_K; I_K; ...], the papers' lift; when K does
                                           not divide n_embd the last copy is cut short.
    interleave index[j] = floor(j K / n)   each bit repeated ~n/K times in a row, as in the
                                           earlier released checkpoints; when K does not divide
                                           n_embd some bits get one more copy than others.
    Either way every bit appears at least once (n_embd >= K), so the lift is injective.
    Returns int64 (n_embd,).
    """
    if n_embd < bits:
        raise ValueError(f"n_embd={n_embd} is narrower than the {bits}-bit code; "
                         f"use n_embd >= {bits}")
    j = torch.arange(n_embd)
    if mode == "tile":
        return j % bits
    if mode == "interleave":
        return j * bits // n_embd
    raise ValueError(f"unknown lift mode {mode!r}; choose one of {LIFT_MODES}")


def code_values(code: torch.Tensor, values: str = "01") -> torch.Tensor:
    """Map 0/1 bits to model inputs: '01' keeps them (the papers': no scaling); 'pm1' is 2c - 1."""
    if values == "01":
        return code.float()
    if values == "pm1":
        return 2.0 * code.float() - 1.0
    raise ValueError(f"unknown code values {values!r}; choose '01' or 'pm1'")



def utf8_safe_truncate(data: bytes, max_bytes: int) -> bytes:
    """At most max_bytes of data, never cutting a UTF-8 character in two (as the reference).

    Longer data is cut at the longest of max_bytes .. max_bytes - 3 bytes that decodes as UTF-8;
    if none does (data that is not UTF-8 there, e.g. part of a character), the result is empty."""
    if len(data) <= max_bytes:
        return data
    for end in range(max_bytes, max(max_bytes - 4, -1), -1):
        try:
            data[:end].decode("utf-8")
            return data[:end]
        except UnicodeDecodeError:
            continue
    return b""


def byte_buffer(vocab: list[bytes], pos_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every token's bytes cut to pos_dim: uint8 (V, pos_dim) zero-padded, and int64 (V,) lengths.

    vocab[t] is token t's raw bytes (a token may hold part of a UTF-8 character: never decode
    it to text, which would map different tokens to the same U+FFFD)."""
    kept = [utf8_safe_truncate(token, pos_dim) for token in vocab]
    buffer = torch.zeros(len(vocab), pos_dim, dtype=torch.uint8)
    for t, token in enumerate(kept):
        buffer[t, :len(token)] = torch.tensor(list(token), dtype=torch.uint8)
    return buffer, torch.tensor([len(token) for token in kept], dtype=torch.long)


def kronecker_values(lengths: torch.Tensor, pos_dim: int,
                     eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """The two values a z-normalised code takes: on its L hot cells and on the other D - L.

    Before normalisation a code holds s = 1/sqrt(L) on L cells and 0 elsewhere, so its mean is
    m = L s / D and its Bessel variance is (L (s - m)^2 + (D - L) m^2) / (D - 1). Returns float32
    (hot, cold) of the shape of lengths: hot = (s - m) / (std + eps), cold = -m / (std + eps);
    both 0 for an empty token (L = 0), whose code is all zeros."""
    D = 256 * pos_dim
    L = lengths.float()
    s = L.clamp(min=1).rsqrt()
    m = L * s / D
    std = ((L * (s - m) ** 2 + (D - L) * m ** 2) / (D - 1)).sqrt() + eps
    return (s - m) / std * (L > 0), -m / std


def sign_pca(source: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The frozen code's derivation from a source table: (bits, mean, components).

    source: float (V, d), computed in float64. mean: float64 (d,); components: float64 (D, d),
    the top D = dim right singular vectors of source - mean, each multiplied by the sign of
    its largest-magnitude loading (the first such loading on a tie) so that the SVD's arbitrary
    signs do not reach the code. bits: uint8 (V, D), 1 where the projection is > 0 (an exact
    zero is 0). With mean and components a new word's code follows from its source row alone
    (sign_project): the source table codes words it never saw as it coded the others.
    """
    rows, width = source.shape
    if not 1 <= dim <= min(width, rows - 1):
        raise ValueError(f"cannot take {dim} principal components of a {rows} x {width} table; "
                         f"give --code_dim={min(width, rows - 1)} or less")
    source = source.double()
    mean = source.mean(dim=0)  # (d,)
    _, _, vh = torch.linalg.svd(source - mean, full_matrices=False)  # (min(V, d), d), by size
    components = vh[:dim]  # (D, d)
    largest = components.abs().argmax(dim=1, keepdim=True)  # (D, 1)
    components = components * components.gather(1, largest).sign()
    return sign_project(source, mean, components), mean, components


def sign_project(rows: torch.Tensor, mean: torch.Tensor, components: torch.Tensor) -> torch.Tensor:
    """Sign bits of rows (N, d) projected on components (D, d) after centring: uint8 (N, D)."""
    return ((rows.double() - mean) @ components.T > 0).to(torch.uint8)


def pack_bits(bits: torch.Tensor) -> torch.Tensor:
    """0/1 uint8 (..., D) -> uint8 (..., ceil(D / 8)), eight bits a byte, first bit highest."""
    pad = -bits.size(-1) % 8
    bits = torch.cat([bits, bits.new_zeros(*bits.shape[:-1], pad)], dim=-1)
    weights = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8, device=bits.device)
    return (bits.view(*bits.shape[:-1], -1, 8) * weights).sum(dim=-1, dtype=torch.uint8)


def byte_bits(device=None, dtype=torch.uint8) -> torch.Tensor:
    """(256, 8): the bits of every byte value, most significant first (pack_bits' order)."""
    values = torch.arange(256, device=device).unsqueeze(-1)  # (256, 1)
    return ((values >> torch.arange(7, -1, -1, device=device)) & 1).to(dtype)


def unpack_bits(packed: torch.Tensor, dim: int, table: torch.Tensor = None) -> torch.Tensor:
    """The inverse of pack_bits: uint8 (..., ceil(D / 8)) -> 0/1 uint8 (..., D), a lookup a byte in
    byte_bits (or in table, another (256, 8) of the same order: CodeHead's signs)."""
    table = byte_bits(packed.device) if table is None else table
    return table[packed.long()].flatten(-2)[..., :dim]  # (..., ceil(D / 8), 8) -> (..., D)
