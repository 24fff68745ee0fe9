"""The token input interfaces: one nn.Module per kind, each mapping ids (B, T) to (B, T, n_embd).

make_input(config) is the one place the kind is chosen (GPT.__init__ calls it); nothing else
in the code branches on it. The codes themselves are pure functions in codes.py.
"""

import math

import torch
import torch.nn as nn
from torch.nn import functional as F

from codes import (affine_code, binary_code, byte_buffer, code_bits, code_values, kronecker_values, lift_index,
                   random_affine)

INPUTS = ("learned", "binary", "affine", "kronecker")  # the one list of input interfaces


class BinaryCodeInput(nn.Module):
    """x(t) = R bin_K(t): the papers' fixed minimal code, lifted to n_embd. No parameters."""

    def __init__(self, config):
        super().__init__()
        self.bits = code_bits(config.vocab_size)  # K
        self.values = config.code_values  # '01' or 'pm1'
        # which bit feeds each model dimension; derived from the config, so not saved
        lift = lift_index(self.bits, config.n_embd, config.lift)  # (n_embd,)
        self.register_buffer("lift", lift, persistent=False)

    def code(self, idx):
        return binary_code(idx, self.bits)  # (B, T, K) uint8

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


def make_input(config, vocab=None):
    """The one place the input interface is chosen; each maps idx (B, T) -> (B, T, n_embd).

    vocab: every token's bytes, which 'kronecker' codes; None when a state dict will fill them."""
    if config.input == "learned":
        return nn.Embedding(config.vocab_size, config.n_embd)
    if config.input == "binary":
        return BinaryCodeInput(config)
    if config.input == "affine":
        return AffineCodeInput(config)
    return KroneckerInput(config, vocab)
