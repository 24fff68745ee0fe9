"""A ternary Linear over 2-bit weights in C (AVX2), built with gcc at first use; torch is the fallback.

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
import torch.nn as nn
import torch.nn.functional as F

SOURCE = r"""
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <omp.h>

/* Rows lo .. hi - 1 of out for this OpenMP thread: one contiguous run each, so each core streams
   its own part of the weights and the hardware prefetcher sees one sequence. */
static void my_rows(int out, int *lo, int *hi) {
    int threads = omp_get_num_threads(), t = omp_get_thread_num(), per = (out + threads - 1) / threads;
    *lo = t * per < out ? t * per : out;
    *hi = *lo + per < out ? *lo + per : out;
}

/* y[n][o] = sum_i W[o][i] x[n][i]; w: (out, in / 4) repacked bytes, x: (N, in) int8, in % 128 == 0.
   Per 128 weights: four maddubs of (W + 1) in {0, 1, 2} by x in [-128, 127] give int16 pairs of
   magnitude <= 2 * 2 * 128 = 512; the four are added in int16 (<= 2,048, far from 32,767), then one
   madd widens them into the int32 sums. sum(x) per row is computed once, then subtracted. */
void ternary_matmul(const int8_t *x, const uint8_t *w, int32_t *y, int N, int in, int out) {
    const __m256i mask = _mm256_set1_epi8(3), ones16 = _mm256_set1_epi16(1);
    int32_t *xsum = malloc(sizeof(int32_t) * N);
    for (int n = 0; n < N; n++) {
        int32_t s = 0;
        for (int i = 0; i < in; i++) s += x[(int64_t)n * in + i];
        xsum[n] = s;
    }
    #pragma omp parallel
    {
        int lo, hi;
        my_rows(out, &lo, &hi);
        for (int o = lo; o < hi; o++) {
            const uint8_t *row = w + (int64_t)o * (in / 4);
            for (int n = 0; n < N; n++) {
                const int8_t *xs = x + (int64_t)n * in;
                __m256i acc = _mm256_setzero_si256();
                for (int b = 0; b < in; b += 128) {
                    __m256i packed = _mm256_loadu_si256((const __m256i *)(row + b / 4));
                    __m256i pairs = _mm256_setzero_si256();
                    for (int s = 0; s < 4; s++) {  /* weights b + 32 s .. b + 32 s + 31, each W + 1 */
                        __m256i q = _mm256_and_si256(_mm256_srli_epi16(packed, 2 * s), mask);
                        __m256i v = _mm256_loadu_si256((const __m256i *)(xs + b + 32 * s));
                        pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(q, v));
                    }
                    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones16));
                }
                __m128i h = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
                h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
                h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
                y[(int64_t)n * out + o] = _mm_cvtsi128_si32(h) - xsum[n];  /* sum (W + 1) x - sum x */
            }
        }
    }
    free(xsum);
}

/* The whole BitLinear at once: x (N, in) float32 -> y (N, out) float32 = (x_q W^T) gamma / s, with
   x_q = round(x s) clamped to [-128, 127] and s = 127 / max(max |x|, 1e-5) per row: the operations
   of ternary.absmax_int8 and PackedTernaryLinear.forward, in their order and float32 rounding. */
void ternary_linear(const float *x, const uint8_t *w, float gamma, float *y, int N, int in, int in_padded, int out) {
    int8_t *xq = malloc((size_t)N * in_padded);
    int32_t *sums = malloc(sizeof(int32_t) * (size_t)N * out);
    float *scale = malloc(sizeof(float) * N);
    const __m256 sign = _mm256_set1_ps(-0.0f), low = _mm256_set1_ps(-128.0f), high = _mm256_set1_ps(127.0f);
    for (int n = 0; n < N; n++) {
        const float *row = x + (int64_t)n * in;
        int8_t *q = xq + (int64_t)n * in_padded;
        __m256 m8 = _mm256_setzero_ps();  /* max |x|, eight lanes at a time, then the tail */
        int i = 0;
        for (; i + 8 <= in; i += 8) m8 = _mm256_max_ps(m8, _mm256_andnot_ps(sign, _mm256_loadu_ps(row + i)));
        float lanes[8], m = 0.0f;
        _mm256_storeu_ps(lanes, m8);
        for (int k = 0; k < 8; k++) m = fmaxf(m, lanes[k]);
        for (; i < in; i++) m = fmaxf(m, fabsf(row[i]));
        scale[n] = (1.0f / fmaxf(m, 1e-5f)) * 127.0f;  /* torch computes 127 / t as t.reciprocal() * 127 */
        const __m256 s8 = _mm256_set1_ps(scale[n]);
        for (i = 0; i + 8 <= in; i += 8) {  /* round (ties to even, as torch.round), clamp, narrow to int8 */
            __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(row + i), s8), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            __m256i k32 = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, low), high));
            __m128i k16 = _mm_packs_epi32(_mm256_castsi256_si128(k32), _mm256_extracti128_si256(k32, 1));
            _mm_storel_epi64((__m128i *)(q + i), _mm_packs_epi16(k16, k16));
        }
        for (; i < in_padded; i++) q[i] = i < in ? (int8_t)fminf(fmaxf(nearbyintf(row[i] * scale[n]), -128.0f), 127.0f) : 0;
    }
    ternary_matmul(xq, w, sums, N, in_padded, out);
    for (int n = 0; n < N; n++) {
        float factor = gamma / scale[n];
        for (int o = 0; o < out; o++) y[(int64_t)n * out + o] = (float)sums[(int64_t)n * out + o] * factor;
    }
    free(xq), free(sums), free(scale);
}

/* Eight weights as float32: from float32, or from bfloat16 (its 16 bits are a float32's top half). */
static inline __m256 load8(const void *w, int64_t i, int bf16) {
    if (!bf16) return _mm256_loadu_ps((const float *)w + i);
    __m128i halves = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16));
}

/* One row through a float Linear: y (out) = W (out, in) x (in), in % 8 == 0, W float32 or bfloat16,
   x and y float32, sums in float32. At batch 1 every weight is read once and used once, so the
   speed is the memory's: four rows at a time share each load of x, and the next four rows are
   prefetched while these are summed, non-temporally (used once, they need not evict the KV
   cache or the activations). Inlined twice, so each copy has bf16 fixed. */
static inline __attribute__((always_inline)) void matvec(const float *x, const void *w, float *y, int in,
                                                         int out, int bf16) {
    #pragma omp parallel
    {
        int lo, hi, size = bf16 ? 2 : 4;
        my_rows(out, &lo, &hi);
        int o = lo;
        for (; o + 4 <= hi; o += 4) {
            int64_t r = (int64_t)o * in;  /* the first of the four rows */
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int i = 0; i < in; i += 8) {
                for (int k = 4; k < 8; k++) _mm_prefetch((const char *)w + (r + k * (int64_t)in + i) * size, _MM_HINT_NTA);
                __m256 v = _mm256_loadu_ps(x + i);
                a0 = _mm256_fmadd_ps(load8(w, r + i, bf16), v, a0);
                a1 = _mm256_fmadd_ps(load8(w, r + in + i, bf16), v, a1);
                a2 = _mm256_fmadd_ps(load8(w, r + 2 * in + i, bf16), v, a2);
                a3 = _mm256_fmadd_ps(load8(w, r + 3 * in + i, bf16), v, a3);
            }
            __m256 acc[4] = {a0, a1, a2, a3};
            for (int k = 0; k < 4; k++) {
                __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc[k]), _mm256_extractf128_ps(acc[k], 1));
                h = _mm_hadd_ps(h, h);
                y[o + k] = _mm_cvtss_f32(_mm_hadd_ps(h, h));
            }
        }
        for (; o < hi; o++) {  /* the last rows when this thread's count is not a multiple of 4 */
            __m256 a = _mm256_setzero_ps();
            for (int i = 0; i < in; i += 8) a = _mm256_fmadd_ps(load8(w, (int64_t)o * in + i, bf16), _mm256_loadu_ps(x + i), a);
            __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
            h = _mm_hadd_ps(h, h);
            y[o] = _mm_cvtss_f32(_mm_hadd_ps(h, h));
        }
    }
}

void float_matvec(const float *x, const float *w, float *y, int in, int out) { matvec(x, w, y, in, out, 0); }
void bf16_matvec(const float *x, const uint16_t *w, float *y, int in, int out) { matvec(x, w, y, in, out, 1); }
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
            done = subprocess.run([gcc, "-O3", "-mavx2", "-mfma", "-fopenmp", "-shared", "-fPIC", str(source), "-o",
                                   str(built), "-lm"], capture_output=True, text=True)
            if done.returncode:
                return None, f"torch._int_mm (int8 weights in memory): gcc failed ({done.stderr.strip()[:100]})"
            os.replace(built, library)  # whole or not at all, for a concurrent first use
    lib = ctypes.CDLL(str(library))
    lib.ternary_matmul.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_int] * 3
    lib.ternary_linear.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float, ctypes.c_void_p] + [ctypes.c_int] * 4
    for name in ("float_matvec", "bf16_matvec"):
        getattr(lib, name).argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 2
    return lib, "C kernel (AVX2, 2 bits a weight in memory)"


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
                       packed.size(1) * 4, packed.size(0))
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
