"""A ternary Transformer body: BitNet b1.58 layers for training, 2-bit packing, integer inference.

S. Ma, H. Wang et al., "The Era of 1-bit LLMs: All Large Language Models are in 1.58 Bits"
(2024, arXiv:2402.17764): every Linear inside the Transformer blocks computes with

    weights      W_t = round(W / gamma) clipped to {-1, 0, +1},  gamma = mean |W|  (absmean, per tensor)
    activations  x_q = round(x * s) clipped to [-128, 127],       s = 127 / max |x|  (absmax, per token)
    output       y = (x_q W_t^T) * gamma / s

and trains float latent weights through the rounding with the straight-through estimator (the
gradient of y = x W^T with the dequantised values in place of x and W). The product x_q W_t^T
is a sum of integers: in float32 it is exact whenever it stays below 2^24 (127 x fan-in does,
for any fan-in under 132,000), so the training forward computes bit for bit what an integer
kernel computes, and a packed export decodes the same tokens (tests/test_ternary.py).

What stays in higher precision, as in BitNet b1.58, and why: the token input (code or table),
which carries the token's identity; the LayerNorms, a few parameters that set the scale the
absmax quantiser reads; rotary positions and the attention softmax, which have no weights; and
the output head, whose V logits choose the token. (The frozen-code paper's ternary system is
this split: a fixed input code, a ternary body, a higher-precision head.)
"""

import torch
import torch.nn as nn
from torch.nn import functional as F

from tablefree import kernel

EPS = 1e-5  # keeps gamma and s finite for an all-zero weight or activation


def absmean_ternary(weight):
    """W (out, in) -> W_t (out, in) with values in {-1, 0, 1} (same dtype) and gamma, a 0-d tensor."""
    gamma = weight.abs().mean().clamp(min=EPS)
    return (weight / gamma).round().clamp(-1, 1), gamma


def absmax_int8(x):
    """x (..., in) -> x_q (..., in) with integer values in [-128, 127] (same dtype) and s (..., 1)."""
    scale = 127.0 / torch.linalg.vector_norm(x, float("inf"), dim=-1, keepdim=True).clamp_(min=EPS)  # max |x|
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
    """nn.Linear whose forward is BitNet b1.58's ternary product; the weight stays float for AdamW."""

    def forward(self, x):
        y = TernaryProduct.apply(x, self.weight)
        return y if self.bias is None else y + self.bias


def pack_ternary(w_t):
    """{-1, 0, 1} (out, in) -> uint8 (out, ceil(in / 4)): 2 bits a weight, 0 -> 00, +1 -> 01,
    -1 -> 10, four to a byte with the first weight in the lowest two bits."""
    codes = (w_t.to(torch.int8) % 3).to(torch.uint8)  # 0, 1, 2 for 0, +1, -1
    codes = F.pad(codes, (0, -codes.size(-1) % 4)).view(*codes.shape[:-1], -1, 4)
    return codes[..., 0] | codes[..., 1] << 2 | codes[..., 2] << 4 | codes[..., 3] << 6


def unpack_ternary(packed, in_features):
    """The inverse of pack_ternary: uint8 (out, ceil(in / 4)) -> int8 (out, in) in {-1, 0, 1}."""
    codes = torch.stack([(packed >> shift) & 3 for shift in (0, 2, 4, 6)], dim=-1).flatten(-2)[..., :in_features]
    if (codes == 3).any():
        raise ValueError("a packed ternary weight holds the unused code 11; the file is corrupt")
    return codes.to(torch.int8) - 3 * (codes == 2).to(torch.int8)  # 2 -> -1


class PackedTernaryLinear(nn.Module):
    """A BitLinear for inference, from its packed weights: int8 activations, int32 sums of
    integer products, then one float rescale per row: the same numbers BitLinear computes in float.

    The weights stay at 2 bits in memory and multiply in the C kernel (tablefree/kernel.py) when
    `lib` is given; else they are unpacked to int8 (1 byte each, never a float copy) and multiply
    in torch._int_mm, kept (out, in) as nn.Linear's and handed over transposed (on our 2-core CPU
    that was faster than a contiguous (in, out) copy). Both are exact, so both give one answer."""

    def __init__(self, packed, in_features, gamma, bias=None, lib=None):
        super().__init__()
        self.in_features, self.out_features, self.lib = in_features, packed.size(0), lib
        w_t = unpack_ternary(packed, in_features)  # (out, in) int8, checked
        if lib is None:
            self.register_buffer("weight", w_t)
        else:
            self.register_buffer("codes", kernel.repack(w_t))  # (out, in rounded up to 128 / 4) uint8
        self.register_buffer("gamma", gamma.float())
        self.gamma_value = self.gamma.item()  # for the C call, read once
        self.bias = bias

    def ternary(self):
        """W_t, int8 (out, in) in {-1, 0, 1}."""
        return self.weight if self.lib is None else kernel.unrepack(self.codes, self.in_features)

    def forward(self, x):
        if self.lib is not None:  # all of the below in one C call, bit for bit (tests/test_kernel.py)
            y = kernel.linear(self.lib, x.float(), self.codes, self.in_features, self.gamma_value)
        else:
            x_q, scale = absmax_int8(x.float())
            y = torch._int_mm(x_q.to(torch.int8).flatten(0, -2), self.weight.T)  # (N, out) int32 sums, exactly
            y = y.view(*x.shape[:-1], -1) * (self.gamma / scale)  # int32 x float32 -> float32, one rounding
        return y if self.bias is None else y + self.bias
