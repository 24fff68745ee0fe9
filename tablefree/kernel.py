"""A ternary Linear over 2-bit weights in C (AVX2), built with gcc at first use; torch is the fallback.

    y (N, out) int32 = x_q (N, in) int8 @ W_t^T,  W_t in {-1, 0, +1} kept at 2 bits a weight
    ternary_linear: the whole BitLinear (quantise x per row, those sums, one rescale) in one call

Why C: torch has no 2-bit matmul, so the pure-torch path (ternary.PackedTernaryLinear without it) keeps W_t
as int8, four times the packed file, and decodes through torch._int_mm. This kernel reads the
2-bit codes directly. It is integer-exact: AVX2's maddubs multiplies unsigned bytes (here
W_t + 1, in {0, 1, 2}) by signed bytes (x_q) and adds pairs into int16, at most 2 x 2 x 128 =
512, far from overflow; the pairs go on into int32 sums (bitnet.cpp's int16 accumulation over a
whole row can overflow; this cannot below 2^31 / 256 = 8M inputs). Subtracting sum(x_q) turns
sum((W_t + 1) x_q) into sum(W_t x_q). tests/test_kernel.py checks it equals torch._int_mm exactly,
and the fused layer equals PackedTernaryLinear's torch path bit for bit (the same float32
operations in the same order: one call instead of a dozen small torch operations a Linear).

The layout (repack): each row is padded to a multiple of 128 weights; every 128 weights are 32
bytes, byte k holding weights k, k + 32, k + 64 and k + 96 at bits 0, 2, 4 and 6, each as
W_t + 1, so one 32-byte load and four shifts give four runs of 32 consecutive weights.

Chosen in one place, `kernel()`: the C kernel when gcc is present and the CPU has AVX2, else
None (callers fall back to torch); `describe()` says which, in one line, at load.
"""

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

SOURCE = r"""
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

/* y[n][o] = sum_i W[o][i] x[n][i]; w: (out, in / 4) repacked bytes, x: (N, in) int8, in % 128 == 0 */
void ternary_matmul(const int8_t *x, const uint8_t *w, int32_t *y, int N, int in, int out) {
    const __m256i mask = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
    #pragma omp parallel for schedule(static)
    for (int o = 0; o < out; o++) {
        const uint8_t *row = w + (int64_t)o * (in / 4);
        for (int n = 0; n < N; n++) {
            const int8_t *xs = x + (int64_t)n * in;
            __m256i acc = _mm256_setzero_si256(), xsum = _mm256_setzero_si256();
            for (int b = 0; b < in; b += 128) {
                __m256i packed = _mm256_loadu_si256((const __m256i *)(row + b / 4));
                for (int s = 0; s < 4; s++) {  /* weights b + 32 s .. b + 32 s + 31, each W + 1 */
                    __m256i q = _mm256_and_si256(_mm256_srli_epi16(packed, 2 * s), mask);
                    __m256i v = _mm256_loadu_si256((const __m256i *)(xs + b + 32 * s));
                    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q, v), ones));
                    xsum = _mm256_add_epi32(xsum, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), v), ones));
                }
            }
            __m256i d = _mm256_sub_epi32(acc, xsum);  /* sum (W + 1) x - sum x = sum W x */
            __m128i h = _mm_add_epi32(_mm256_castsi256_si128(d), _mm256_extracti128_si256(d, 1));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
            y[(int64_t)n * out + o] = _mm_cvtsi128_si32(h);
        }
    }
}

/* The whole BitLinear at once: x (N, in) float32 -> y (N, out) float32 = (x_q W^T) gamma / s, with
   x_q = round(x s) clamped to [-128, 127] and s = 127 / max(max |x|, 1e-5) per row: the operations
   of ternary.absmax_int8 and PackedTernaryLinear.forward, in their order and float32 rounding.
   xq: scratch (N, in_padded) int8, sums: scratch (N, out) int32. */
void ternary_linear(const float *x, const uint8_t *w, float gamma, float *y, int8_t *xq, int32_t *sums,
                    int N, int in, int in_padded, int out) {
    float scale[N];
    for (int n = 0; n < N; n++) {
        const float *row = x + (int64_t)n * in;
        float m = 0.0f;
        for (int i = 0; i < in; i++) m = fmaxf(m, fabsf(row[i]));
        scale[n] = (1.0f / fmaxf(m, 1e-5f)) * 127.0f;  /* torch computes 127 / t as t.reciprocal() * 127 */
        for (int i = 0; i < in_padded; i++) {
            float q = i < in ? nearbyintf(row[i] * scale[n]) : 0.0f;  /* ties to even, as torch.round */
            xq[(int64_t)n * in_padded + i] = (int8_t)fminf(fmaxf(q, -128.0f), 127.0f);
        }
    }
    ternary_matmul(xq, w, sums, N, in_padded, out);
    for (int n = 0; n < N; n++) {
        float factor = gamma / scale[n];
        for (int o = 0; o < out; o++) y[(int64_t)n * out + o] = (float)sums[(int64_t)n * out + o] * factor;
    }
}
"""

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
    """(ctypes library, one line) or (None, why not): gcc, AVX2, then a build cached by source hash."""
    if os.environ.get("TABLEFREE_KERNEL", "1") == "0":
        return None, "torch._int_mm (int8 weights in memory): TABLEFREE_KERNEL=0"
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        return None, "torch._int_mm (int8 weights in memory): this CPU has no AVX2"
    gcc = shutil.which("gcc")
    if gcc is None:
        return None, "torch._int_mm (int8 weights in memory): no gcc to build the 2-bit kernel"
    digest = hashlib.sha256(SOURCE.encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tablefree"
    library = cache / f"ternary-{digest}.so"
    if not library.exists():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            source, built = Path(tmp) / "ternary.c", Path(tmp) / "ternary.so"
            source.write_text(SOURCE)
            done = subprocess.run([gcc, "-O3", "-mavx2", "-fopenmp", "-shared", "-fPIC", str(source), "-o", str(built), "-lm"],
                                  capture_output=True, text=True)
            if done.returncode:
                return None, f"torch._int_mm (int8 weights in memory): gcc failed ({done.stderr.strip()[:100]})"
            os.replace(built, library)  # whole or not at all, for a concurrent first use
    lib = ctypes.CDLL(str(library))
    lib.ternary_matmul.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_int] * 3
    lib.ternary_linear.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float] + [ctypes.c_void_p] * 3 + \
        [ctypes.c_int] * 4
    return lib, "C kernel (AVX2, 2 bits a weight in memory)"


def matmul(lib, x_q, packed, in_features):
    """x_q (N, in) int8 @ W_t^T -> (N, out) int32, W_t given as repack()'s bytes."""
    padded = packed.size(1) * 4
    x_q = F.pad(x_q, (0, padded - in_features)).contiguous() if padded != in_features else x_q.contiguous()
    y = torch.empty(x_q.size(0), packed.size(0), dtype=torch.int32)
    lib.ternary_matmul(x_q.data_ptr(), packed.data_ptr(), y.data_ptr(), x_q.size(0), padded, packed.size(0))
    return y


def linear(lib, x, packed, in_features, gamma):
    """The whole ternary Linear in C: x float32 (N, in) -> (N, out) float32, as PackedTernaryLinear
    computes it in torch (absmax_int8, the integer sums, one rescale), bit for bit."""
    x = x.contiguous()
    N, out, padded = x.size(0), packed.size(0), packed.size(1) * 4
    y = torch.empty(N, out, dtype=torch.float32)
    xq, sums = torch.empty(N, padded, dtype=torch.int8), torch.empty(N, out, dtype=torch.int32)
    lib.ternary_linear(x.data_ptr(), packed.data_ptr(), float(gamma), y.data_ptr(), xq.data_ptr(), sums.data_ptr(),
                       N, in_features, padded, out)
    return y
