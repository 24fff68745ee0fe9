"""A GPT whose token input is a learned table, a fixed code, or a fixed code of its bytes.

One file: it imports torch and codes.py (the codes as pure functions) and nothing else, so what a
model computes can be read here alone. It reads bottom-up: rotary positions, the KV cache, the
ternary Linear, attention, MLP, block, the token inputs, the sampling rule, GPTConfig, GPT.
The input interface is chosen by one field, GPTConfig.input, in one place, make_input:

    learned    nn.Embedding(V, n_embd), the usual trainable table (the baseline)
    binary     x(t) = R bin_K(t), K = ceil(log2 V) bits tiled to n_embd, no parameters
    affine     x(t) = R (A bin_K(t) XOR b), A in GL(K, 2) fixed at random, no parameters
    kronecker  x(t) = W kappa(bytes of t), a fixed byte x position code, W learned (n_embd x D)
    frozen     x(t) = R c(t), c(t) the D sign bits of a learned table's principal components

The binary and affine codes are those of A. Bochkov, "Language Models Without a Trainable Input
Embedding Table: Learning from Fixed Minimal Binary Token Codes" (2026, arXiv:2605.09751); the
byte code is Kronecker Embeddings' (2026, arXiv:2605.29459); the frozen sign-PCA code is the
recipe the 1.7B-class follow-up describes for its ternary system; codes.py has the formulas.
The body's Linears are float, or ternary (GPTConfig.body = 'ternary': BitNet b1.58, BitLinear
below; tablefree/ternary.py packs a trained one to 2 bits and attaches a C kernel for inference).
Everything after the input is the same GPT in every variant, with an untied trainable head (or
for frozen, GPTConfig.head = 'codes': its codes read back as the output, CodeHead): GPT-2's
pre-norm blocks and initialisation (Radford et al. 2019, "Language Models are Unsupervised
Multitask Learners"), with rotary positions instead of a position table.
"""

import inspect
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

from codes import (affine_code, binary_code, byte_bits, byte_buffer, code_bits, code_values,
                   kronecker_values, lift_index, pack_bits, random_affine, sign_pca, unpack_bits)

BODIES = ("float", "ternary")
HEADS = ("untied", "codes")


class Rotary(nn.Module):
    """Rotary position embedding: positions rotate q and k, no parameters.

    J. Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding" (2021,
    arXiv:2104.09864): the efficient form of eq. 34 with theta_i = base^(-2i/hs), i = 0 .. hs/2 - 1
    (eq. 15). Dimension i is paired with i + hs/2 (GPT-NeoX's layout) rather than with its
    neighbour: the same rotation up to a fixed permutation of q's and k's dimensions."""

    def __init__(self, head_dim, block_size, base):
        super().__init__()
        inv_freq = base ** (-torch.arange(0, head_dim, 2).float() / head_dim)  # (hs/2,)
        angles = torch.outer(torch.arange(block_size).float(), inv_freq)  # (block_size, hs/2)
        # derived from the config, so not saved in checkpoints
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, start, T):
        """cos and sin for positions start .. start+T-1, each (T, hs/2)."""
        return self.cos[start:start + T], self.sin[start:start + T]


def apply_rotary(x, rope):
    """Rotate each (x1, x2) pair of halves of x (..., T, hs) by its position's angle."""
    cos, sin = (r.type_as(x) for r in rope)  # (T, hs/2), broadcast over the leading dimensions
    x1, x2 = x.chunk(2, dim=-1)  # (..., T, hs/2) each
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class LayerKV:
    """Keys and values one attention layer has already seen, for incremental decoding."""

    def __init__(self, max_len):
        self.max_len = max_len
        self.k = self.v = None  # (B, nh, max_len, hs), allocated on first use
        self.pos = 0  # positions stored so far

    def append(self, k, v):
        """Store k, v (B, nh, T, hs); return all keys and values (B, nh, pos, hs) and the mask."""
        B, nh, T, hs = k.size()
        if self.k is None:
            self.k = k.new_zeros(B, nh, self.max_len, hs)
            self.v = v.new_zeros(B, nh, self.max_len, hs)
        start, self.pos = self.pos, self.pos + T
        self.k[:, :, start:self.pos] = k
        self.v[:, :, start:self.pos] = v
        # query i sits at position start + i and may see keys 0 .. start + i; one new query sees all
        mask = None
        if T > 1:
            mask = torch.ones(T, self.pos, dtype=torch.bool, device=k.device).tril(diagonal=start)
        return self.k[:, :, :self.pos], self.v[:, :, :self.pos], mask


# -----------------------------------------------------------------------------
# The ternary body (body='ternary'): BitNet b1.58's Linear. S. Ma, H. Wang et al., "The Era of
# 1-bit LLMs: All Large Language Models are in 1.58 Bits" (2024, arXiv:2402.17764):
#
#   weights      W_t = round(W / gamma) clipped to {-1, 0, +1}, gamma = mean |W|   (absmean, per W)
#   activations  x_q = round(x * s) clipped to [-128, 127],      s = 127 / max |x| (absmax, per x)
#   output       y = (x_q W_t^T) * gamma / s
#
# The float latent weights train through the rounding with the straight-through estimator. x_q W_t^T
# is a sum of integers, exact in float32 below 2^24 (127 x fan-in is, for any fan-in under 132,000),
# so this forward computes bit for bit what an integer kernel computes, and a packed export decodes
# the same tokens (tablefree/ternary.py packs and runs it; tests/test_ternary.py). What stays float,
# as in BitNet b1.58: the token input, the LayerNorms, rotary positions, attention's softmax, the
# head.

EPS = 1e-5  # keeps gamma and s finite for an all-zero weight or activation


def absmean_ternary(weight):
    """W (out, in) -> W_t (out, in) with values in {-1, 0, 1} (same dtype) and gamma (0-d)."""
    gamma = weight.abs().mean().clamp(min=EPS)
    return (weight / gamma).round().clamp(-1, 1), gamma


def absmax_int8(x):
    """x (..., in) -> x_q (..., in) with integer values in [-128, 127] (same dtype), s (..., 1)."""
    largest = torch.linalg.vector_norm(x, float("inf"), dim=-1, keepdim=True)  # max |x|, (..., 1)
    scale = 127.0 / largest.clamp_(min=EPS)
    return (x * scale).round_().clamp_(-128, 127), scale


class TernaryProduct(torch.autograd.Function):
    """y = (x_q W_t^T) gamma / s forward; the straight-through gradient of y = x W^T backward."""

    @staticmethod
    def forward(ctx, x, weight):
        x_q, scale = absmax_int8(x)
        w_t, gamma = absmean_ternary(weight)
        ctx.save_for_backward(x_q, scale, w_t, gamma)
        return F.linear(x_q, w_t) * (gamma / scale)  # (..., out): integer sums, one rescale per row

    @staticmethod
    def backward(ctx, grad):
        x_q, scale, w_t, gamma = ctx.saved_tensors
        grad_x = grad @ (w_t * gamma).to(grad.dtype)  # (..., in): through the dequantised weight
        x_deq = (x_q / scale).to(grad.dtype)
        grad_w = grad.flatten(0, -2).T @ x_deq.flatten(0, -2)  # (out, in)
        return grad_x, grad_w


class BitLinear(nn.Linear):
    """nn.Linear whose forward is BitNet b1.58's ternary product; the weight stays float (AdamW)."""

    def forward(self, x):
        y = TernaryProduct.apply(x, self.weight)
        return y if self.bias is None else y + self.bias


def body_linear(config, n_in, n_out):
    """Every Linear inside the blocks: float, or BitNet b1.58's for body='ternary'."""
    return (BitLinear if config.body == "ternary" else nn.Linear)(n_in, n_out, bias=config.bias)


class CausalSelfAttention(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.c_attn = body_linear(config, config.n_embd, 3 * config.n_embd)
        self.c_proj = body_linear(config, config.n_embd, config.n_embd)
        self.n_head = config.n_head
        self.dropout = config.dropout

    def forward(self, x, rope, kv=None):
        B, T, C = x.size()
        qkv = self.c_attn(x).view(B, T, 3, self.n_head, C // self.n_head)
        qkv = qkv.permute(2, 0, 3, 1, 4)  # (3, B, nh, T, hs)
        q, k = apply_rotary(qkv[:2], rope)  # (B, nh, T, hs) each, rotated together
        v = qkv[2]  # (B, nh, T, hs)
        if kv is None:  # training and full recompute: flash attention where available
            dropout = self.dropout if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        else:  # incremental decoding: attend over the cached past plus these T positions
            k, v, mask = kv.append(k, v)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C), heads side by side
        return F.dropout(self.c_proj(y), self.dropout, self.training)


class MLP(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.c_fc = body_linear(config, config.n_embd, config.mlp_hidden())
        self.c_proj = body_linear(config, config.mlp_hidden(), config.n_embd)
        self.dropout = config.dropout

    def forward(self, x):
        return F.dropout(self.c_proj(F.gelu(self.c_fc(x))), self.dropout, self.training)


class Block(nn.Module):
    """Pre-norm decoder block."""

    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x, rope, kv=None):
        x = x + self.attn(self.ln_1(x), rope, kv)
        x = x + self.mlp(self.ln_2(x))
        return x


# -----------------------------------------------------------------------------
# The token inputs: one nn.Module per kind, each mapping ids (B, T) to (B, T, n_embd).
# make_input is the one place the kind is chosen; nothing else branches on it.

INPUTS = ("learned", "binary", "affine", "kronecker", "frozen")  # the one list of input interfaces


class BinaryCodeInput(nn.Module):
    """x(t) = R bin_K(t): the papers' fixed minimal code, lifted to n_embd. No parameters."""

    def __init__(self, config, bits=None):
        super().__init__()
        self.bits = bits or code_bits(config.vocab_size) + config.extra_bits  # K (frozen: its D)
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

    Kronecker Embeddings (2026, arXiv:2605.29459), as the package `kronecker-embeddings` 0.1.1:
    W a bias-free Linear(D, n_embd), D = 256 * pos_dim, from N(0, 1/sqrt(D)). Stored: a (V,
    pos_dim) byte buffer, never a (V, D) table. A z-normalised code holds `hot` on its L cells
    and `cold` elsewhere, so W kappa = (hot - cold) * (W's columns at the L cells, summed) +
    cold * W 1: an embedding bag over W^T's rows, kept as `cells` (D, n_embd) so they are
    contiguous, the cells past a token's length weighted 0.
    """

    def __init__(self, config, vocab):
        super().__init__()
        if vocab is not None and len(vocab) != config.vocab_size:
            raise ValueError(f"the tokenizer has {len(vocab)} tokens but vocab_size is "
                             f"{config.vocab_size}")
        longest = max((len(b) for b in vocab), default=0) if vocab is not None else 0
        most = max(32, longest)  # 32: the package's default, whatever the tokens
        if vocab is not None and config.pos_dim > most:
            raise ValueError(f"pos_dim={config.pos_dim} is more than the longest token's {longest} "
                             f"bytes (and the package's default 32): the positions past it are "
                             f"always empty; give --pos_dim={most} or less")
        self.pos_dim, D = config.pos_dim, 256 * config.pos_dim
        W = torch.randn(config.n_embd, D) / math.sqrt(D)
        self.cells = nn.Parameter(W.t().contiguous())  # (D, n_embd): W^T
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
        live = positions < lengths.unsqueeze(-1)  # (B, T, pos_dim): the token's L cells
        cells = self.token_bytes[idx].long() * self.pos_dim + positions  # (B, T, pos_dim)
        hot, cold = kronecker_values(lengths, self.pos_dim)  # (B, T) each
        # a cell past the token's length gets weight 0 (its row 0 adds exactly nothing)
        weights = (hot - cold).unsqueeze(-1) * live  # (B, T, pos_dim)
        x = F.embedding_bag(cells.masked_fill(~live, 0).view(B * T, -1), self.cells, mode="sum",
                            per_sample_weights=weights.view(B * T, -1))  # (B * T, n_embd)
        x = x + cold.view(B * T, 1) * self.cells.sum(dim=0)  # every cell holds at least `cold`
        return x.view(B, T, -1)  # (B, T, n_embd)


def frozen_dim(config):
    """D, the frozen code's bits per token: code_dim, at most n_embd and V - 1. A model narrower
    than code_dim keeps its n_embd leading components, so the lift never has to drop bits."""
    return min(config.code_dim, config.n_embd, config.vocab_size - 1)


class FrozenCodeInput(BinaryCodeInput):
    """x(t) = R c(t), c(t) the frozen sign-PCA code of token t (codes.sign_pca). No parameters.

    The codes are stored bit-packed, V x ceil(D / 8) bytes, and unpacked on the fly. Nothing else
    is kept: the source table (config.codes_from) gives the same codes again, which is how
    extension checks it and codes a new word as the old ones were (tablefree/extension.py)."""

    def __init__(self, config, source=None):
        dim = frozen_dim(config)
        super().__init__(config, bits=dim)
        V = config.vocab_size
        packed = torch.zeros(V, -(-dim // 8), dtype=torch.uint8)  # a placeholder a state dict fills
        if source is not None:
            if source.dim() != 2 or source.size(0) != V:
                raise ValueError(f"the frozen codes' source table is {tuple(source.shape)} but the "
                                 f"vocabulary has {V} tokens; derive them from a {V} x d table (a "
                                 f"learned run on this dataset)")
            packed = pack_bits(sign_pca(source, dim)[0])  # (V, D) bits -> bytes
        self.register_buffer("packed", packed)  # (V, ceil(D / 8)) uint8

    def code(self, idx):
        return unpack_bits(self.packed[idx], self.bits)  # (B, T, D) uint8


CODE_CHUNK = 8192  # code rows unpacked at a time: 16 MB of float32 at D = 512, whatever V


class CodeHead(nn.Module):
    """logits = z C^T / sqrt(D) + b (head='codes'): the frozen code read back as the output.

    C (V, D) is the frozen input's own sign code as +-1, the bits FrozenCodeInput reads, so one
    frozen table serves input and output, as in the frozen-code paper (whose model replaces
    Gemma's tied table); z = W ln_f(h) is a learned n_embd -> D projection and b a learned bias
    per token. No V x n_embd trainable matrix: the trainable head is n_embd x D + V. b is learned
    (our choice; the QLNI SHADOW models fix it at unigram log-frequencies): it follows the data a
    model is trained or fine-tuned on, and a model needs no token counts to be built. C is
    unpacked CODE_CHUNK rows at a time, never as a whole V x D float table."""

    def __init__(self, config):
        super().__init__()
        self.dim = frozen_dim(config)
        self.proj = nn.Linear(config.n_embd, self.dim, bias=False)  # W
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))  # b

    def signs(self, packed, dtype):
        """Bit-packed codes (N, ceil(D / 8)) -> (N, D) of -1 and +1."""
        return unpack_bits(packed, self.dim, table=2 * byte_bits(packed.device, dtype) - 1)

    def forward(self, x, packed):
        z = self.proj(x) / math.sqrt(self.dim)  # (B, T, D)
        # (B, T, CODE_CHUNK) each, never a whole V x D float table
        logits = [z @ self.signs(rows, z.dtype).T for rows in packed.split(CODE_CHUNK)]
        return torch.cat(logits, dim=-1) + self.bias  # (B, T, V)


def make_input(config, vocab=None, source=None):
    """The one place the input interface is chosen; each maps idx (B, T) -> (B, T, n_embd).

    For a new model, vocab: every token's bytes, which 'kronecker' codes; source: the V x d
    table 'frozen' derives its codes from. Both None when a state dict will fill the buffers."""
    if config.input == "learned":
        return nn.Embedding(config.vocab_size, config.n_embd)  # the usual trainable table
    if config.input == "binary":
        return BinaryCodeInput(config)
    if config.input == "affine":
        return AffineCodeInput(config)
    if config.input == "kronecker":
        return KroneckerInput(config, vocab)
    if config.input == "frozen":
        return FrozenCodeInput(config, source)
    raise ValueError(f"unknown input {config.input!r}; choose one of {INPUTS}")


# -----------------------------------------------------------------------------
# Choosing the next token: greedy, or a draw at a temperature from the k likeliest tokens (top-k)
# and/or the nucleus (top-p: A. Holtzman et al., "The Curious Case of Neural Text Degeneration",
# 2020, arXiv:1904.09751: the smallest set of likeliest tokens whose probability reaches p).

def nucleus(probs, top_p):
    """probs (B, V) with every token outside the top_p nucleus set to 0: sorted by probability,
    a token is kept while the mass of the tokens before it is below top_p (so the likeliest one
    always is)."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep = sorted_probs.cumsum(dim=-1) - sorted_probs < top_p  # (B, V), in sorted order
    return torch.zeros_like(probs).scatter(-1, order, sorted_probs * keep)


def choose(logits, temperature, top_k=None, top_p=None, generator=None):
    """The next ids (B, 1) for logits (B, V) float32: argmax at temperature 0, else a draw."""
    if temperature < torch.finfo(torch.float32).tiny:  # 0, or too small to divide by: the limit
        return logits.argmax(dim=-1, keepdim=True)
    # shifted first, so that (l - max) / T <= 0 for any T > 0, however small: never inf - inf
    logits = (logits - logits.max(dim=-1, keepdim=True).values) / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]  # (B, 1)
        logits = logits.masked_fill(logits < kth, -float("inf"))
    probs = F.softmax(logits, dim=-1)  # (B, V)
    if top_p is not None:
        probs = nucleus(probs, top_p)  # multinomial renormalises
    return torch.multinomial(probs, 1, generator=generator)


@dataclass
class GPTConfig:
    block_size: int = 1024  # context length in tokens
    vocab_size: int = 65536  # V; fixed codes use K = ceil(log2 V) bits
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    mlp_width: int = 0  # the MLP's hidden width; 0 is GPT-2's 4 * n_embd
    dropout: float = 0.0
    bias: bool = False  # biases in Linear and LayerNorm layers
    input: str = "binary"  # one of INPUTS (see the module docstring)
    code_seed: int = 0  # seed of A and b for 'affine'
    lift: str = "tile"  # 'tile' (the papers' R = [I_K; I_K; ...]) or 'interleave'
    code_values: str = "01"  # '01': the papers' bits, unscaled; 'pm1': 2c - 1
    extra_bits: int = 0  # 'binary', 'affine': K = ceil(log2 V) + extra_bits, free codes for new ids
    tie_weights: bool = False  # share the input table with the head; 'learned' only
    head: str = "untied"  # 'untied': a trainable V x n_embd matrix; 'codes': CodeHead
    rope_base: float = 10000.0  # rotary base, RoFormer's
    pos_dim: int = 16  # 'kronecker': bytes kept per token (the paper's runs; the package's: 32)
    code_dim: int = 512  # 'frozen': sign bits per token (the paper's 512), at most n_embd and V - 1
    codes_from: str = ""  # 'frozen': the V x d table its codes are derived from
    body: str = "float"  # the blocks' Linears: 'float', or 'ternary' (BitNet b1.58)

    def __post_init__(self):
        """Refuse what no model can be (the settings' ranges: configurator.check_settings)."""
        for key, choices in (("input", INPUTS), ("body", BODIES), ("head", HEADS)):
            if getattr(self, key) not in choices:
                raise ValueError(f"unknown {key} {getattr(self, key)!r}; choose one of {choices}")
        if self.n_embd % self.n_head or (self.n_embd // self.n_head) % 2:
            raise ValueError(f"n_embd={self.n_embd} must split into n_head={self.n_head} heads "
                             f"of even size (rotary)")
        if self.head == "codes" and self.input != "frozen":
            raise ValueError(f"head='codes' reads back the frozen input's codes; "
                             f"input={self.input!r} has none")
        if self.tie_weights and self.input != "learned":
            raise ValueError(f"tie_weights needs a trainable input table; input={self.input!r} "
                             f"has none, set tie_weights=False")
        if (self.input == "frozen") != bool(self.codes_from):
            raise ValueError(f"codes_from names the table frozen codes are derived from (a "
                             f"learned run's directory or a V x d tensor file): set it for "
                             f"input='frozen' and only then, not input={self.input!r} with "
                             f"codes_from={self.codes_from!r}")
        if self.extra_bits and self.input not in ("binary", "affine"):
            raise ValueError(f"extra_bits (free codes for new ids) widens the binary and affine "
                             f"codes, not input={self.input!r}")
        if self.input in ("binary", "affine"):
            bits = code_bits(self.vocab_size) + self.extra_bits
            if bits > 62:
                raise ValueError(f"vocab_size={self.vocab_size} needs {bits}-bit codes; "
                                 f"at most 2^62 tokens fit int64 ids")
            lift_index(bits, self.n_embd, self.lift)  # raises if n_embd < K or the lift is unknown
        if self.input in ("binary", "affine", "frozen"):
            code_values(torch.zeros(1), self.code_values)  # raises on unknown code values

    def mlp_hidden(self):
        return self.mlp_width or 4 * self.n_embd


def check_ids(idx, vocab_size):
    """Refuse ids outside [0, V): a fixed code would otherwise silently alias them."""
    if ((idx < 0) | (idx >= vocab_size)).any():  # one host sync; the details only on failure
        bad = idx.min().item() if idx.min() < 0 else idx.max().item()
        raise ValueError(f"token id {bad} is outside the vocabulary [0, {vocab_size}); "
                         f"re-tokenize the data or build the model with a larger vocab_size")


class GPT(nn.Module):

    def __init__(self, config, vocab=None, source=None):
        super().__init__()
        self.config = config
        self.wte = make_input(config, vocab, source)  # vocab, source: what a new input is made of
        self.rotary = Rotary(config.n_embd // config.n_head, config.block_size, config.rope_base)
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
        if config.head == "codes":
            self.lm_head = CodeHead(config)
        else:
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.wte.weight
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2: scale residual projections by depth
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None, cache=None, all_positions=False):
        """idx (B, T) token ids -> logits (B, T, V) and mean cross-entropy against targets.

        Without targets only the last position's logits are computed (B, 1, V), as sampling
        needs, unless all_positions (scoring text). `cache` is a list of LayerKV from
        new_cache(), for incremental decoding.
        """
        B, T = idx.size()
        if not torch.compiler.is_compiling():  # a data-dependent check would break the graph
            check_ids(idx, self.config.vocab_size)
        start = cache[0].pos if cache else 0
        if start + T > self.config.block_size:
            raise ValueError(f"{start + T} positions exceed block_size={self.config.block_size}")
        rope = self.rotary(start, T)
        x = self.wte(idx).to(self.ln_f.weight.dtype)  # (B, T, n_embd), in a cast model's dtype
        x = self.drop(x)
        for i, block in enumerate(self.h):
            x = block(x, rope, cache[i] if cache else None)
        x = self.ln_f(x)
        if targets is None:
            return self.head(x if all_positions else x[:, -1:, :]), None  # (B, T or 1, V)
        logits = self.head(x)  # (B, T, V)
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1),
                               ignore_index=-1)  # in float32 even under autocast
        return logits, loss

    def head(self, x):
        """(B, T, n_embd) -> (B, T, V) logits; the code head reads the input's codes."""
        return self.lm_head(x, self.wte.packed) if self.config.head == "codes" else self.lm_head(x)

    def new_cache(self):
        return [LayerKV(self.config.block_size) for _ in self.h]

    @torch.inference_mode()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, use_cache=True,
                 generator=None, top_p=None):
        """Extend idx (B, T) one token at a time, yielding each new (B, 1) as it is chosen.

        temperature 0 is greedy; else a draw, from the top_k likeliest and/or the top_p nucleus.
        The context of each prediction is a window of at most block_size tokens, idx[:, start:];
        when a new token would overflow it, the window restarts from the last block_size // 2
        tokens. With the cache each step runs only the newest token (the whole window at a
        restart); without it each step recomputes the window (the reference path). Both see the
        same windows, so choose the same tokens."""
        block_size = self.config.block_size
        start = max(0, idx.size(1) - block_size)  # where the context window begins
        cache = None
        for _ in range(max_new_tokens):
            if idx.size(1) - start > block_size:  # the window is full: restart it
                start, cache = idx.size(1) - block_size // 2, None
            if not use_cache:
                logits, _ = self(idx[:, start:])
            elif cache is None:
                cache = self.new_cache()
                logits, _ = self(idx[:, start:], cache=cache)
            else:
                logits, _ = self(idx[:, -1:], cache=cache)
            logits = logits[:, -1, :].float()  # (B, V)
            if not torch.isfinite(logits).all():  # a damaged model: no token can be chosen from nan
                raise ValueError(f"the model's logits are not finite after {idx.size(1)} tokens; "
                                 f"the weights are damaged or diverged")
            next_id = choose(logits, temperature, top_k, top_p, generator)  # (B, 1)
            idx = torch.cat((idx, next_id), dim=1)
            yield next_id

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type,
                             input_lr_scale=1.0):
        """AdamW with decay on matrices only (not biases or norms); fused kernels if supported.
        input_lr_scale != 1 puts the input's trainable weights (a table, a projection; a tied head
        with its table) in a group of their own, "lr_scale" times the schedule's rate."""
        params = [p for p in self.parameters() if p.requires_grad]
        own = {id(p) for p in self.wte.parameters()} if input_lr_scale != 1 else set()
        matrices = [p for p in params if p.dim() >= 2 and id(p) not in own]
        others = [p for p in params if p.dim() < 2 and id(p) not in own]  # biases, norms
        groups = [{"params": matrices, "weight_decay": weight_decay},
                  {"params": others, "weight_decay": 0.0}]
        if own:
            groups.append({"params": [p for p in params if id(p) in own],
                           "weight_decay": weight_decay, "lr_scale": input_lr_scale})
        has_fused = "fused" in inspect.signature(torch.optim.AdamW).parameters
        fused = device_type in ("cuda", "cpu") and has_fused
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=fused)


def param_counts(model):
    """A GPT's element counts by part: trainable parameters, plus the fixed input code stored."""
    def trainable(module):
        return sum(p.numel() for p in module.parameters() if p.requires_grad)
    wte = model.wte
    return {
        "input": trainable(wte),
        # the fixed code's values stored (affine's A and b, frozen's packed bits, ...)
        "input_fixed": sum(b.numel() for name, b in wte.named_buffers()
                           if name in wte.state_dict()),
        "body": trainable(model.h) + trainable(model.ln_f),
        "head": 0 if model.config.tie_weights else trainable(model.lm_head),
        "trainable": trainable(model),
    }
