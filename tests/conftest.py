"""Shared fixtures: every test in a temporary working directory, a tiny prepared corpus,
tiny-model training settings, and slow reference constructions of the codes that the fast
paths in codes.py are checked against."""

import struct
import zipfile
from pathlib import Path

import pytest
import torch

import prepare
from codes import code_bits

TINY = ["--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=32", "--batch_size=8", "--gradient_accumulation_steps=2",
        "--learning_rate=3e-3", "--warmup_iters=2", "--min_lr=3e-4", "--eval_iters=4", "--log_interval=1",
        "--device=cpu", "--compile=False"]


ROOT = Path(__file__).resolve().parent.parent  # the checkout: its scripts and configs, never its out/ or data/


@pytest.fixture(autouse=True)
def away_from_the_checkout(tmp_path, monkeypatch):
    """Each test runs in its own empty folder, so a default such as out_dir='out' or
    data_dir='data' can never read or write the checkout's working state."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    text = root / "tiny.txt"
    text.write_text("".join(f"The {w} of the king is {v}, and the queen's {w} is {v} too.\n"
                            for w in ("crown", "horse", "sword", "castle") for v in ("gold", "grey", "old", "bright")) * 40)
    prepare.prepare(prepare.parse_args(["--input", str(text), "--name", "tiny", "--out_dir", str(root), "--vocab_size", "300", "--quiet"]))
    return root


def reference_codebook(vocab_size, A=None, b=None):
    """Every token's code, uint8 (V, K): Python's binary formatting, then c' = A c + b mod 2."""
    K = code_bits(vocab_size)
    book = torch.tensor([[int(bit) for bit in format(t, f"0{K}b")] for t in range(vocab_size)])
    if A is not None:
        book = (book @ A.long().T + b.long()) % 2
    return book.to(torch.uint8)


def reference_lift(bits, n_embd, mode):
    """R as a float (n_embd, K) 0/1 matrix, built from its definition: x = R c."""
    if mode == "tile":  # [I_K; I_K; ...], the last copy cut short
        return torch.cat([torch.eye(bits)] * (n_embd // bits + 1))[:n_embd]
    R = torch.zeros(n_embd, bits)
    for j in range(n_embd):  # interleave: dimension j carries bit floor(j K / n_embd)
        R[j, j * bits // n_embd] = 1
    return R


def reference_kronecker_code(token_bytes, lengths, eps=1e-6):
    """kappa by its plain definition, one dense D = 256 * pos_dim row per token: float32 (..., D).

    token_bytes: uint8 (..., pos_dim), lengths: int (...,). Cell byte * pos_dim + p is 1/sqrt(L)
    for each p < L (byte-major, as the reference package), then the row is z-normalised with the
    Bessel-corrected std plus eps."""
    pos_dim = token_bytes.size(-1)
    positions = torch.arange(pos_dim)  # (pos_dim,)
    hot = positions < lengths.unsqueeze(-1)  # (..., pos_dim)
    cells = token_bytes.long() * pos_dim + positions  # (..., pos_dim) flat index of (byte, position)
    scale = lengths.clamp(min=1).float().rsqrt().unsqueeze(-1)  # (..., 1)
    code = torch.zeros(*token_bytes.shape[:-1], 256 * pos_dim)
    code.scatter_add_(-1, cells, hot.float() * scale)  # distinct positions never share a cell
    mean = code.mean(dim=-1, keepdim=True)
    return (code - mean) / ((code - mean).std(dim=-1, keepdim=True) + eps)


def flip_tensor_byte(path, offset=100):
    """Flip one byte inside the largest tensor a torch.save'd file holds, in place: the zip stays
    whole (torch's reader does not check its records' crc32), only the weights change."""
    with zipfile.ZipFile(path) as archive:
        record = max((r for r in archive.infolist() if "/data/" in r.filename), key=lambda r: r.file_size)
    data = bytearray(Path(path).read_bytes())
    name_length, extra_length = struct.unpack("<HH", data[record.header_offset + 26:record.header_offset + 30])
    data[record.header_offset + 30 + name_length + extra_length + offset] ^= 0x01  # the record's bytes, stored
    Path(path).write_bytes(bytes(data))
