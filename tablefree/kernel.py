"""A ternary Linear over 2-bit weights in C (AVX2), built at first use; torch is the fallback.

    y (N, out) int32 = x_q (N, in) int8 @ W_t^T,  W_t in {-1, 0, +1} kept at 2 bits a weight
    ternary_linear: the whole BitLinear (quantise x per row, those sums, one rescale) in one call

Why C: torch has no 2-bit matmul, so the pure-torch path (ternary.PackedTernaryLinear without it) keeps W_t
as int8, four times the packed file, and decodes through torch._int_mm. This kernel reads the
2-bit codes directly. It is integer-exact: AVX2's maddubs multiplies unsigned bytes (here
W_t + 1, in {0, 1, 2}) by signed bytes (x_q) and adds pairs into int16, at most 2 x 2 x 128 =
512; four of those are added in int16 (at most 2,048, far from 32,767), then go on into int32
sums (bitnet.cpp's int16 accumulation over a whole row can overflow; this cannot below
2^31 / 256 = 8M inputs). Subtracting sum(x_q) turns
sum((W_t + 1) x_q) into sum(W_t x_q). tests/test_kernel.py checks it equals torch._int_mm exactly,
and the fused layer equals PackedTernaryLinear's torch path bit for bit (the same float32
operations in the same order: one call instead of a dozen small torch operations a Linear).

The layout (repack): each row is padded to a multiple of 128 weights; every 128 weights are 32
bytes, byte k holding weights k, k + 32, k + 64 and k + 96 at bits 0, 2, 4 and 6, each as
W_t + 1, so one 32-byte load and four shifts give four runs of 32 consecutive weights.

Chosen in one place, `kernel()`: the C kernel when a C compiler builds its AVX2 paths for this CPU, else
None (callers fall back to torch); `describe()` says which, in one line, at load.
"""

import ctypes
import os
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from tablefree.build import X86, build, flag_sets
from tablefree.common import UserError

SOURCE = Path(__file__).parent / "kernel.c"  # also #included by run.c, the runtime

BLOCK = 128  # weights per 32 repacked bytes
_LOADED = {}  # the one loaded library (or the reason there is none), per process


def repack(w_t):
    """W_t (out, in) in {-1, 0, 1} -> uint8 (out, in_padded / 4) in the kernel's layout."""
    out, n = w_t.shape
    codes = F.pad(w_t.to(torch.int8) + 1, (0, -n % BLOCK)).to(torch.uint8)  # (out, in_padded) in 0 .. 2; the
    # padding's code 0 (W = -1) meets only the activations' zero padding, so it adds nothing
    codes = codes.view(out, -1, 4, 32)  # (out, blocks, shift, byte)
    return (codes[:, :, 0] | codes[:, :, 1] << 2 | codes[:, :, 2] << 4 | codes[:, :, 3] << 6).view(out, -1)


def unrepack(codes, in_features):
    """The inverse of repack: uint8 (out, in_padded / 4) -> int8 W_t (out, in_features)."""
    fields = torch.stack([(codes.view(codes.size(0), -1, 32) >> shift) & 3 for shift in (0, 2, 4, 6)], dim=2)
    return (fields.view(codes.size(0), -1)[:, :in_features].to(torch.int8) - 1)


def kernel():
    """The compiled library, or None (with the reason in describe()) when it cannot be had."""
    if "lib" not in _LOADED:
        _LOADED["lib"], _LOADED["why"] = _build()
    return _LOADED["lib"]


def describe():
    kernel()
    return _LOADED["why"]


def _build():
    """(ctypes library, one line) or (None, why not): an x86 CPU's build (tablefree/build.py), cached by source.
    Elsewhere torch's int8 matmul, vectorized for that CPU, is faster than the kernel's plain C loops."""
    if os.environ.get("TABLEFREE_KERNEL", "1") == "0":
        return None, "torch._int_mm (int8 weights in memory): TABLEFREE_KERNEL=0"
    if torch.backends.cpu.get_cpu_capability() not in X86:
        return None, "torch._int_mm (int8 weights in memory): this CPU has no AVX2"
    try:  # build.py's x86 flag sets only, with OpenMP first
        library, how = build(SOURCE, "the 2-bit kernel", "torch's int8 path serves instead", shared=True,
                             sets=[flags for flags in flag_sets() if "-mavx2" in flags])
    except UserError as e:
        return None, f"torch._int_mm (int8 weights in memory): {e}"
    lib = ctypes.CDLL(str(library))
    lib.ternary_matmul.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_int] * 3
    lib.ternary_linear.argtypes = ([ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float, ctypes.c_void_p] + [ctypes.c_int] * 4
                                   + [ctypes.c_void_p] * 2)  # the sums and scales kept: none here
    for name in ("float_matvec", "bf16_matvec"):
        getattr(lib, name).argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 2
    return lib, f"C kernel ({how}; 2 bits a weight in memory)"


def matmul(lib, x_q, packed, in_features):
    """x_q (N, in) int8 @ W_t^T -> (N, out) int32, W_t given as repack()'s bytes."""
    padded = packed.size(1) * 4
    x_q = F.pad(x_q, (0, padded - in_features)).contiguous() if padded != in_features else x_q.contiguous()
    y = torch.empty(x_q.size(0), packed.size(0), dtype=torch.int32)
    lib.ternary_matmul(x_q.data_ptr(), packed.data_ptr(), y.data_ptr(), x_q.size(0), padded, packed.size(0))
    return y


def linear(lib, x, packed, in_features, gamma):
    """The whole ternary Linear in C: x float32 (..., in) -> (..., out) float32, as PackedTernaryLinear
    computes it in torch (absmax_int8, the integer sums, one rescale), bit for bit."""
    x = x.contiguous()
    y = torch.empty(*x.shape[:-1], packed.size(0), dtype=torch.float32)
    lib.ternary_linear(x.data_ptr(), packed.data_ptr(), gamma, y.data_ptr(), x.numel() // in_features, in_features,
                       packed.size(1) * 4, packed.size(0), None, None)
    return y


class KernelLinear(nn.Linear):
    """nn.Linear whose one-row inference on the CPU, float32 or bfloat16, runs in the C matvec
    (about twice torch's speed at batch 1 on our 2-core CPU: torch's matrix-vector product keeps
    to one core); everything else (batches, training, other dtypes and devices) is nn.Linear's.
    Same parameters, same state dict; the sums come in another order (and bfloat16 ones in
    float32), so outputs agree with nn.Linear's to rounding, not bit for bit."""

    lib = None  # the kernels' library, set by fast_linears on the class (a module holding it could not be deep-copied)

    def forward(self, x):
        w = self.weight
        if (x.numel() != self.in_features or self.in_features % 8 or x.device.type != "cpu" or torch.is_grad_enabled()
                or w.dtype not in (torch.float32, torch.bfloat16) or x.dtype != w.dtype or not w.is_contiguous()):
            return super().forward(x)
        x32, y = x.float().contiguous(), torch.empty(*x.shape[:-1], self.out_features)  # x32 held: C reads it
        matvec = self.lib.float_matvec if w.dtype == torch.float32 else self.lib.bf16_matvec
        matvec(x32.data_ptr(), w.data_ptr(), y.data_ptr(), self.in_features, self.out_features)
        y = y.to(x.dtype)
        return y if self.bias is None else y + self.bias


def fast_linears(model):
    """Let every nn.Linear of model take the C path for one-row float32 or bfloat16 inference (KernelLinear),
    where the kernel can be had; the model is otherwise unchanged. Returns model."""
    lib = kernel()
    if lib is not None:
        KernelLinear.lib = lib
        for module in model.modules():
            if type(module) is nn.Linear:
                module.__class__ = KernelLinear
    return model
