"""The token input interfaces: one nn.Module per kind, each mapping ids (B, T) to (B, T, n_embd).

make_input(config) is the one place the kind is chosen (GPT.__init__ calls it); nothing else
in the code branches on it. The codes themselves are pure functions in codes.py.
"""

import hashlib
import math

import torch
import torch.nn as nn
from torch.nn import functional as F

from codes import (affine_code, binary_code, byte_buffer, code_bits, code_quality, code_values, kronecker_values,
                   lift_index, pack_bits, random_affine, sign_pca, sign_project, unpack_bits)

INPUTS = ("learned", "binary", "affine", "kronecker", "frozen")  # the one list of input interfaces


def mean_rows(table, pieces):
    """One new row per new token: the mean of its pieces' rows of table (V, n). (M, n)"""
    return torch.stack([table[list(p)].mean(dim=0) for p in pieces])


class LearnedInput(nn.Embedding):
    """The usual trainable table, nn.Embedding(V, n_embd): the baseline."""

    def add_tokens(self, pieces, new_bytes, source):
        """New words' rows start as the mean of their pieces' rows."""
        self.weight = nn.Parameter(torch.cat([self.weight, mean_rows(self.weight, pieces)]))
        self.num_embeddings = self.weight.size(0)
        return {}


class BinaryCodeInput(nn.Module):
    """x(t) = R bin_K(t): the papers' fixed minimal code, lifted to n_embd. No parameters."""

    def __init__(self, config, bits=None):
        super().__init__()
        self.bits = bits or code_bits(config.vocab_size)  # K
        self.vocab_size = config.vocab_size
        self.values = config.code_values  # '01' or 'pm1'
        # which bit feeds each model dimension; derived from the config, so not saved
        lift = lift_index(self.bits, config.n_embd, config.lift)  # (n_embd,)
        self.register_buffer("lift", lift, persistent=False)

    def code(self, idx):
        return binary_code(idx, self.bits)  # (B, T, K) uint8

    def add_tokens(self, pieces, new_bytes, source):
        """New words are coded by their ids, free, while codes last: the trained model reads K
        bits, so of V + M ids only 2^K have a code of their own; past it id t reads only its low
        K bits and gets the code of t mod 2^K, an old token's (V = 2^K leaves no free code)."""
        free = 2 ** self.bits - self.vocab_size
        self.vocab_size += len(pieces)
        return {"free_codes": free, "aliased": max(0, len(pieces) - free)}

    def forward(self, idx):
        return code_values(self.code(idx)[..., self.lift], self.values)  # (B, T, n_embd) float32


class AffineCodeInput(BinaryCodeInput):
    """x(t) = R (A bin_K(t) XOR b), computed from the id on the fly. No parameters.

    A and b are drawn from config.code_seed and kept as persistent buffers, so a checkpoint
    carries the exact code it was trained with.
    """

    def __init__(self, config):
        super().__init__(config)
        A, b = random_affine(self.bits, config.code_seed)
        self.register_buffer("A", A)  # (K, K) uint8, invertible over GF(2)
        self.register_buffer("b", b)  # (K,) uint8

    def code(self, idx):
        return affine_code(idx, self.A, self.b)  # (B, T, K) uint8


class KroneckerInput(nn.Module):
    """x(t) = W kappa(t): the byte x position code of token t's bytes, one learned projection.

    Kronecker Embeddings (2026, arXiv:2605.29459), exactly as the reference package
    `kronecker-embeddings` 0.1.1: W is a bias-free Linear(D, n_embd), D = 256 * pos_dim, drawn
    from N(0, 1/sqrt(D)). Only a (V, pos_dim) byte buffer is stored, never a (V, D) table, and
    no (B, T, D) code is built either: a z-normalised code holds `hot` on its L cells and `cold`
    on the rest, so W kappa = (hot - cold) * (sum of W's columns at the L cells) + cold * W 1,
    an embedding bag over W's columns plus a constant (tested against the dense definition).
    """

    def __init__(self, config, vocab):
        super().__init__()
        if vocab is not None and len(vocab) != config.vocab_size:
            raise ValueError(f"the tokenizer has {len(vocab)} tokens but vocab_size is {config.vocab_size}")
        self.pos_dim = config.pos_dim
        D = 256 * config.pos_dim
        self.weight = nn.Parameter(torch.randn(config.n_embd, D) / math.sqrt(D))  # (n_embd, D)
        # the bytes of every token; persistent, so a checkpoint carries its own code
        token_bytes, lengths = byte_buffer(vocab, config.pos_dim) if vocab is not None else (
            torch.zeros(config.vocab_size, config.pos_dim, dtype=torch.uint8),  # from a state dict
            torch.zeros(config.vocab_size, dtype=torch.long))
        self.register_buffer("token_bytes", token_bytes)  # (V, pos_dim) uint8
        self.register_buffer("lengths", lengths)  # (V,) int64

    def add_tokens(self, pieces, new_bytes, source):
        """New words are coded by their bytes, free: the projection W is shared by every token."""
        token_bytes, lengths = byte_buffer(new_bytes, self.pos_dim)
        self.token_bytes = torch.cat([self.token_bytes, token_bytes.to(self.token_bytes.device)])
        self.lengths = torch.cat([self.lengths, lengths.to(self.lengths.device)])
        return {}

    def forward(self, idx):
        B, T = idx.size()
        positions = torch.arange(self.pos_dim, device=idx.device)  # (pos_dim,)
        lengths = self.lengths[idx]  # (B, T)
        cells = self.token_bytes[idx].long() * self.pos_dim + positions  # (B, T, pos_dim)
        hot, cold = kronecker_values(lengths, self.pos_dim)  # (B, T) each
        weights = (hot - cold).unsqueeze(-1) * (positions < lengths.unsqueeze(-1))  # (B, T, pos_dim)
        x = F.embedding_bag(cells.view(B * T, -1), self.weight.t(), per_sample_weights=weights.view(B * T, -1),
                            mode="sum")  # (B * T, n_embd)
        x = x + cold.view(B * T, 1) * self.weight.sum(dim=1)  # every cell holds at least `cold`
        return x.view(B, T, -1)  # (B, T, n_embd)


def frozen_dim(config):
    """D, the frozen code's bits per token: code_dim, at most n_embd and V - 1. A model narrower
    than code_dim keeps its n_embd leading components, so the lift never has to drop bits."""
    return min(config.code_dim, config.n_embd, config.vocab_size - 1)


def source_digest(source):
    """sha256 of a source table as float64, row-major, little-endian: uint8 (32,)."""
    data = source.double().contiguous().numpy().astype("<f8").tobytes()
    return torch.tensor(list(hashlib.sha256(data).digest()), dtype=torch.uint8)


class FrozenCodeInput(BinaryCodeInput):
    """x(t) = R c(t), c(t) the frozen sign-PCA code of token t (codes.sign_pca). No parameters.

    The codes are stored bit-packed, V x ceil(D / 8) bytes, and unpacked on the fly. The
    derivation is kept beside them, in persistent buffers and so in every checkpoint: the
    source's mean (d,) and signed components (D, d), which code a new word from its source row
    (codes.sign_project; the sign rule, projection > 0 is 1, is the only other part), and the
    source table's sha256 and shape, which name the table the codes were derived from.
    """

    def __init__(self, config, source=None):
        dim = frozen_dim(config)
        super().__init__(config, bits=dim)
        V = config.vocab_size
        if source is None:  # placeholders that a state dict fills
            packed, mean, components = torch.zeros(V, -(-dim // 8), dtype=torch.uint8), torch.zeros(0), torch.zeros(dim, 0)
            digest, shape = torch.zeros(32, dtype=torch.uint8), torch.zeros(2, dtype=torch.long)
        else:
            if source.dim() != 2 or source.size(0) != V:
                raise ValueError(f"the frozen codes' source table is {tuple(source.shape)} but the vocabulary has "
                                 f"{V} tokens; derive them from a {V} x d table (a learned run on this dataset)")
            bits, mean, components = sign_pca(source, dim)  # (V, D), (d,), (D, d)
            packed, digest, shape = pack_bits(bits), source_digest(source), torch.tensor(source.shape)
            self.quality = code_quality(bits, source)  # reported by train.py, not saved with the weights
        self.register_buffer("packed", packed)  # (V, ceil(D / 8)) uint8
        self.register_buffer("mean", mean.double())  # (d,) float64
        self.register_buffer("components", components.double())  # (D, d) float64
        self.register_buffer("source_sha256", digest)  # (32,) uint8
        self.register_buffer("source_shape", shape)  # (2,) int64: V, d

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # the source's width d is not part of the config: the derivation's shapes come with it
        for name in ("mean", "components"):
            if prefix + name in state_dict:
                setattr(self, name, torch.empty_like(state_dict[prefix + name], device=getattr(self, name).device))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def code(self, idx):
        return unpack_bits(self.packed[idx], self.bits)  # (B, T, D) uint8

    def add_tokens(self, pieces, new_bytes, source):
        """A new word's code: its source row, the mean of its pieces' rows of the source table
        (checked against the recorded sha256), projected with the saved mean and components."""
        if source is None or not torch.equal(source_digest(source), self.source_sha256.cpu()):
            raise ValueError("the frozen codes' source table is missing or is not the one they were derived "
                             "from (sha256 differs); give the original table")
        bits = sign_project(mean_rows(source.double(), pieces), self.mean.cpu(), self.components.cpu())  # (M, D)
        self.packed = torch.cat([self.packed, pack_bits(bits).to(self.packed.device)])
        self.vocab_size += len(pieces)
        return {}


def make_input(config, vocab=None, source=None):
    """The one place the input interface is chosen; each maps idx (B, T) -> (B, T, n_embd).

    For a new model, vocab: every token's bytes, which 'kronecker' codes; source: the V x d
    table 'frozen' derives its codes from. Both None when a state dict will fill the buffers."""
    if config.input == "learned":
        return LearnedInput(config.vocab_size, config.n_embd)
    if config.input == "binary":
        return BinaryCodeInput(config)
    if config.input == "affine":
        return AffineCodeInput(config)
    if config.input == "frozen":
        return FrozenCodeInput(config, source)
    return KroneckerInput(config, vocab)
