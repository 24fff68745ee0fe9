"""The torch-free runtime (tablefree/run.c): its flat file, its build, and a call to it.

A packed export (tools/export.py's model.ternary.pt) is a torch zip; run.c reads a flat copy of it
instead, written once beside it (model.ternary.bin) and mapped into memory as it is:

    0    the header (HEADER, run.c's Header): "TFRUN\\0\\0\\0", int32 version, 4 bytes of padding;
         at 16 the config (config_fields: 13 int32, then rope_base as float32); at 72 uint64 payload
         bytes, uint64 checksum of the whole file (checksum: this word as 0), int32 tensor count; 28 bytes
    120  the directory: per tensor a 48-byte name, uint64 offset (from the file's start), uint64 bytes
    ...  the payload, from the next multiple of 64: the tensors, each at a multiple of 64

The tensors are the packed file's, renamed, in the dtypes run.c reads: norms and biases float32,
float matrices (a learned table, an untied head, the code head's projection, Kronecker's
projection) float16 as exported, frozen codes as their bits in blocks of 32 tokens (blocked), and
each ternary weight in kernel.c's 2-bit layout (kernel.repack). Decoding moves into the file too: every token's bytes (tokens.offsets,
tokens.bytes), so run.c prints text. Encoding a prompt stays in Python (tiktoken): a BPE encoder in
C would be a second tokenizer to keep equal to the first, for a few prompt tokens.
"""

import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from codes import code_bits
from model import INPUTS, GPTConfig, frozen_dim
from tablefree import kernel
from tablefree.build import build
from tablefree.common import UserError, check_output, raw_bytes, write_atomic
from tablefree.ternary import unpack_ternary
from tablefree.tokenizer import bytes_of_token, load_encoding

MAGIC = b"TFRUN\0\0\0"  # the flat file's first 8 bytes
VERSION = 3  # 3: codes in blocks of 32 tokens (2: of 8); since 2 the checksum covers the header and directory too
HEADER = struct.Struct("<8si4x56sQQi28x")  # magic, version, the config's 56 bytes, payload, checksum, tensor count
SUM_OFFSET = struct.calcsize("<8si4x56sQ")  # 80: where the checksum sits, after magic, version, config, payload
SOURCE = Path(__file__).parent / "run.c"
INCLUDED = [SOURCE.with_name("decode.c"), SOURCE.with_name("kernel.c")]  # the files run.c #includes
HEAD_KINDS = ("untied", "tied", "codes")  # run.c's order of head kinds (of input kinds: model.INPUTS')
# run.c's names for the packed file's tensors, by input and by head; float matrices are float16, as exported
INPUT_TENSORS = {"learned": {"input.table": "wte.weight"}, "affine": {"input.A": "wte.A", "input.b": "wte.b"},
                 "frozen": {"input.codes": "wte.packed"},
                 "kronecker": {"input.cells": "wte.cells", "input.bytes": "wte.token_bytes"}}
HEAD_TENSORS = {"untied": {"head.weight": "lm_head.weight"}, "tied": {"input.table": "wte.weight"},
                "codes": {"head.proj": "lm_head.proj.weight", "head.bias": "lm_head.bias"}}


def head_kind(c):
    return "codes" if c.head == "codes" else "tied" if c.tie_weights else "untied"


def config_fields(c):
    """run.c's Config for GPTConfig c: 13 int32, then rope_base as float32."""
    K = code_bits(c.vocab_size) + c.extra_bits
    bits = {"binary": K, "affine": K, "frozen": frozen_dim(c)}.get(c.input, 0)  # K, or frozen's D
    ints = [c.n_layer, c.n_head, c.n_embd, c.mlp_hidden(), c.vocab_size, c.block_size, INPUTS.index(c.input),
            HEAD_KINDS.index(head_kind(c)), bits, c.lift == "interleave", c.code_values == "pm1", c.pos_dim, c.bias]
    return struct.pack("<13if", *ints, c.rope_base)  # 56 bytes


def tensors(contents):
    """{run.c's name: the tensor it reads} for a packed export's contents (packed.packed_ternary)."""
    c, model = GPTConfig(**contents["model_config"]), contents["model"]
    out = {name: t.float() for name, t in model.items() if name.startswith(("h.", "ln_f."))}  # norms, biases
    for name, layer in contents["ternary"].items():
        w_t = unpack_ternary(layer["packed"], layer["in_features"])
        out[f"{name}.w"], out[f"{name}.gamma"] = kernel.repack(w_t), layer["gamma"].float().reshape(1)
    names = {**INPUT_TENSORS.get(c.input, {}), **HEAD_TENSORS[head_kind(c)]}
    out.update({ours: model[theirs] for ours, theirs in names.items()})
    if c.input == "kronecker":
        out["input.lengths"] = model["wte.lengths"].int()
    if c.input == "frozen":
        out["input.codes"] = blocked(out["input.codes"])
    return out


def blocked(packed):
    """Bit-packed codes (V, B) in run.c's layout: blocks of 32 tokens, each byte position's 32 bytes
    side by side ((V / 32, B, 32), V padded with zero rows), so one load gives a register's 32, 16 or 8
    tokens' bytes."""
    padded = torch.cat([packed, packed.new_zeros(-packed.size(0) % 32, packed.size(1))])
    return padded.view(-1, 32, packed.size(1)).transpose(1, 2).contiguous()


def token_table(state, vocab_size):
    """(offsets int32 (V + 1), bytes uint8): every token's bytes, for decoding in C; none without a tokenizer."""
    enc = load_encoding(state) if state.get("ranks") else None
    pieces = [bytes_of_token(enc, t) if enc else b"" for t in range(vocab_size)]
    offsets = np.cumsum([0, *map(len, pieces)], dtype=np.int64)
    return torch.from_numpy(offsets.astype(np.int32)), torch.frombuffer(bytearray(b"".join(pieces) or b"\0"),
                                                                       dtype=torch.uint8)[:offsets[-1]]


def write_flat(contents, path):
    """Write the flat file of a packed export's contents at path, atomically."""
    arrays = tensors(contents)
    c = GPTConfig(**contents["model_config"])
    arrays["tokens.offsets"], arrays["tokens.bytes"] = token_table(contents["tokenizer"], c.vocab_size)
    arrays["source.sha256"] = torch.frombuffer(bytearray(contents.get("sha256", "").encode().ljust(64, b"\0")),
                                               dtype=torch.uint8)
    blobs = {name: raw_bytes(t).tobytes() for name, t in arrays.items()}
    start = -(-(HEADER.size + 64 * len(blobs)) // 64) * 64
    directory, payload, offset = [], bytearray(), start
    for name, blob in blobs.items():
        directory.append(struct.pack("<48sQQ", name.encode(), offset + len(payload), len(blob)))
        payload += blob + bytes(-len(blob) % 64)
    header = HEADER.pack(MAGIC, VERSION, config_fields(c), len(payload), 0, len(blobs))
    flat = bytearray((header + b"".join(directory)).ljust(start, b"\0") + payload)
    struct.pack_into("<Q", flat, SUM_OFFSET, checksum(flat))  # computed with its own word still 0
    write_atomic(path, bytes(flat))


def checksum(data):
    """run.c's checksum of a file (a multiple of 8 bytes): sum_i w_i (2 i + 1) mod 2^64 over its
    little-endian uint64 words. Any one flipped bit changes it (the weights are odd); not a
    defence against a forger, a check against damage."""
    words = np.frombuffer(data, dtype="<u8")
    return int((words * (2 * np.arange(len(words), dtype=np.uint64) + 1)).sum(dtype=np.uint64))


def written_from(path):
    """The packed file's sha256 a flat file at path was written from ('' if none or unreadable)."""
    try:
        with open(path, "rb") as f:
            magic, version, _, _, _, count = HEADER.unpack(f.read(HEADER.size))
            if magic != MAGIC or version != VERSION:
                return ""
            for name, offset, size in struct.iter_unpack("<48sQQ", f.read(64 * count)):
                if name.rstrip(b"\0") == b"source.sha256":
                    f.seek(offset)
                    return f.read(size).rstrip(b"\0").decode()
    except (OSError, struct.error, UnicodeDecodeError):
        pass
    return ""


def flat_file(path, ckpt):
    """The flat file of the packed export at path (ckpt: its contents), beside it: written on first
    use, and again when the export has changed since."""
    if "ternary" not in ckpt:
        raise UserError(f"{path} is not a packed ternary export; the C runtime decodes those: "
                        f"python -m tools.export --ckpt <a ternary run>, then --ckpt <its model.ternary.pt>")
    flat = Path(path).with_suffix(".bin")
    if not ckpt.get("sha256") or written_from(flat) != ckpt["sha256"]:
        write_flat(ckpt, check_output(flat, "--ckpt", ours=(MAGIC,)))  # never over a file of the user's or a dataset's
    return flat


def binary(source=SOURCE, what="the C runtime", instead="sample with --engine torch"):
    """The executable of a C program (the runtime: run.c, which includes decode.c and kernel.c; or
    another, as experiments/bandwidth.c), built at first use: the best the compiler and this CPU
    allow (tablefree/build.py), on any CPU with any C compiler."""
    return build(source, what, instead, INCLUDED if Path(source) == SOURCE else ())[0]


def generate(flat, ids, max_new_tokens, temperature=0.0, top_k=0, top_p=1.0, seed=1337, stop=None, report=None):
    """Yield the ids run.c chooses after the prompt ids, as it chooses them; its failure is a UserError
    (its own one-line error). Its closing line (tokens/s, peak memory) goes to report(line), or to
    stderr."""
    command = [str(binary()), str(flat), "--ids", ",".join(map(str, ids)), "--max_new_tokens", str(max_new_tokens),
               "--temperature", repr(float(temperature)), "--top_k", str(top_k or 0),
               "--top_p", repr(float(top_p) if top_p < 1 else 0.0), "--seed", str(seed), "--print_ids",
               *(["--stop", str(stop)] if stop is not None else [])]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        for line in process.stdout:
            yield int(line)
        err = process.stderr.read()
    if process.returncode:
        raise UserError(err.strip().splitlines()[-1].removeprefix("run: error: ") if err.strip() else
                        f"the C runtime stopped with status {process.returncode}")
    (report or (lambda line: print(line, file=sys.stderr)))(err.strip())
