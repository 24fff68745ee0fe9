"""A trained ternary body for inference: 2-bit packing and the integer Linear that runs it.

BitNet b1.58's training layer (BitLinear: the absmean weights, the absmax activations, the
straight-through gradient) is in model.py; this file is what comes after training: W_t packed at
2 bits a weight (four to a byte), and PackedTernaryLinear, which computes from the packed weights
the same numbers BitLinear computes in float (int8 activations, int32 sums, one rescale a row),
in the C kernel (tablefree/kernel.py) or in torch._int_mm.
"""

import torch
import torch.nn as nn
from torch.nn import functional as F

from model import absmax_int8
from tablefree import kernel

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
