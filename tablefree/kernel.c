/* tablefree's C kernels: the ternary Linear over 2-bit weights and float matrix-vector products.
   tablefree/kernel.py builds them into a library for the torch path (its docstring has the layout and why
   the sums are exact); tablefree/run.c, the torch-free runtime, includes this file.

   Every kernel here and in decode.c is plain C99 first: what it computes, to read, built by any C compiler
   for any CPU (`cc -O3 run.c -lm`). Where the compiler targets AVX2 with FMA and F16C (gcc or clang
   -mavx2 -mfma -mf16c; AVX-512 adds wider paths) the hot loops take an x86 path instead, each beside
   its plain loop and tested equal to it (tests/test_portable.py: the same tokens, the same integer
   sums, float sums to rounding). -DTABLEFREE_PLAIN keeps the plain loops on any CPU. OpenMP splits the
   loops over the cores where the compiler has it (-fopenmp); without it everything runs on one thread
   and gives the same results (no sum depends on the thread count). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && !defined(TABLEFREE_PLAIN)
#define X86 1
#include <immintrin.h>
#else
#define X86 0
#endif
#if X86 && defined(__AVX512VNNI__) && defined(__AVX512VL__)  /* -mavx512vnni -mavx512vl: Ice Lake, Zen 4 and later */
#define VNNI 1
#else
#define VNNI 0
#endif

#ifdef _OPENMP
#include <omp.h>
#else  /* one thread: the pragmas are ignored, and these say so to the code that asks */
static int omp_get_num_threads(void) { return 1; }
static int omp_get_thread_num(void) { return 0; }
static int omp_get_max_threads(void) { return 1; }
static void omp_set_num_threads(int n) { (void)n; }
#endif

#if defined(__GNUC__)  /* gcc and clang: each kind's copy of a generic loop is made with its kind fixed */
#define INLINE static inline __attribute__((always_inline))
#else
#define INLINE static inline
#endif

/* Rows lo .. hi - 1 of out for this OpenMP thread: one contiguous run each, so each core streams
   its own part of the weights and the hardware prefetcher sees one sequence. */
static void my_rows(int out, int *lo, int *hi) {
    int threads = omp_get_num_threads(), t = omp_get_thread_num(), per = (out + threads - 1) / threads;
    *lo = t * per < out ? t * per : out;
    *hi = *lo + per < out ? *lo + per : out;
}

// ----------------------------------------------------------------------------
// float16 by hand (IEEE binary16: 1 sign, 5 exponent, 10 fraction bits), as F16C's instructions convert

static float half_to_float(uint16_t h) {  /* exact: every float16 is a float32 */
#if X86
    return _cvtsh_ss(h);
#else
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 31, m = h & 0x3ff, bits;
    float f;
    if (e == 0) {  /* zero or subnormal: m 2^-24 */
        f = ldexpf((float)m, -24);
        return sign ? -f : f;
    }
    bits = sign | (e == 31 ? 0x7f800000u | m << 13 : (e + 112) << 23 | m << 13);  /* inf / NaN, or normal */
    memcpy(&f, &bits, 4);
    return f;
#endif
}

static uint16_t float_to_half(float f) {  /* rounded to nearest, ties to even; overflow to inf */
#if X86
    return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, e = (x >> 23) & 255, m = x & 0x7fffff;
    int E = (int)e - 127 + 15;  /* the float16 exponent field */
    if (e == 255) return (uint16_t)(sign | 0x7c00 | (m ? 0x200 | m >> 13 : 0));  /* inf, or a quiet NaN */
    if (E >= 31) return (uint16_t)(sign | 0x7c00);
    if (E <= 0) {  /* a subnormal float16 (or 0): the 24-bit significand shifted to units of 2^-24 */
        if (E < -10) return (uint16_t)sign;
        uint32_t full = m | 0x800000, shift = (uint32_t)(14 - E), half = full >> shift;
        uint32_t rest = full & ((1u << shift) - 1), mid = 1u << (shift - 1);
        return (uint16_t)(sign | (half + (rest > mid || (rest == mid && (half & 1)))));
    }
    uint32_t half = (uint32_t)E << 10 | m >> 13, rest = m & 0x1fff;  /* a carry may reach inf: right */
    return (uint16_t)(sign | (half + (rest > 0x1000 || (rest == 0x1000 && (half & 1)))));
#endif
}

// ----------------------------------------------------------------------------
// The ternary Linear: int8 activations x 2-bit weights, integer sums

#if X86
static inline int32_t hsum_epi32(__m256i v) {  /* the sum of a register's eight int32 */
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1)));
}
#endif

/* sum_i (W[o][i] + 1) x[i] for one row of weights (in / 4 repacked bytes) and x (in) int8, in % 128 == 0:
   byte k of each 32 holds weights k, k + 32, k + 64, k + 96 at bits 0, 2, 4, 6, each as W + 1 in {0, 1, 2}.
   |sum| <= 2 * 128 * in < 2^31 for in < 2^22. The caller subtracts sum(x), computed once a row of x.
   x86: per 128 weights four maddubs of (W + 1) by x give int16 pairs of magnitude <= 2 * 2 * 128 = 512;
   the four are added in int16 (<= 2,048, far from 32,767), then one madd widens them into int32. */
static inline int32_t ternary_dot(const uint8_t *row, const int8_t *xs, int in) {
#if VNNI  /* vpdpbusd adds the four u8 x s8 products of each int32 lane into it: one instruction, no int16 step;
             four sums side by side (one would wait on itself each step), added at the end: integers, exact */
    const __m256i mask = _mm256_set1_epi8(3);
    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int b = 0; b < in; b += 128) {
        __m256i packed = _mm256_loadu_si256((const __m256i *)(row + b / 4));
        for (int s = 0; s < 4; s++)
            acc[s] = _mm256_dpbusd_epi32(acc[s], _mm256_and_si256(_mm256_srli_epi16(packed, 2 * s), mask),
                                         _mm256_loadu_si256((const __m256i *)(xs + b + 32 * s)));
    }
    return hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(acc[0], acc[1]), _mm256_add_epi32(acc[2], acc[3])));
#elif X86
    const __m256i mask = _mm256_set1_epi8(3), ones16 = _mm256_set1_epi16(1);
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
    return hsum_epi32(acc);
#else
    int32_t sum = 0;
    for (int b = 0; b < in; b += 128)
        for (int k = 0; k < 32; k++)
            for (int s = 0; s < 4; s++) sum += ((row[b / 4 + k] >> (2 * s)) & 3) * xs[b + 32 * s + k];
    return sum;
#endif
}

#if VNNI
#define ROWS 8  /* rows of x a prompt's product takes at once: eight int32 sums of 32 AVX-512 registers */
/* out[r] = the sum of a[r]'s eight lanes, r < 8: three rounds of pairwise adds, then the two halves (a
   third of the instructions eight hsum_epi32 take). */
static inline void add_lanes8(const __m256i *a, int32_t *out) {
    __m256i h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]), _mm256_hadd_epi32(a[2], a[3]));
    __m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(a[4], a[5]), _mm256_hadd_epi32(a[6], a[7]));
    _mm256_storeu_si256((__m256i *)out, _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20),
                                                          _mm256_permute2x128_si256(h0, h1, 0x31)));
}

/* ternary_dot for ROWS rows of x at once (row r at xs + r * stride): out[r] = sum_i (W[o][i] + 1) x_r[i].
   A prompt's matrix product: each 32 weights are unpacked once and multiplied into every row, from
   registers, where ternary_dot unpacks them again for every row; vpdpbusd adds straight into int32. */
static inline void ternary_rows(const uint8_t *row, const int8_t *xs, int64_t stride, int in, int32_t *out) {
    const __m256i mask = _mm256_set1_epi8(3);
    __m256i acc[ROWS];
    for (int r = 0; r < ROWS; r++) acc[r] = _mm256_setzero_si256();
    for (int b = 0; b < in; b += 128) {
        __m256i packed = _mm256_loadu_si256((const __m256i *)(row + b / 4));
        for (int i = b; i < b + 128; i += 32) {  /* weights i .. i + 31, each W + 1 */
            __m256i q = _mm256_and_si256(_mm256_srli_epi16(packed, (i - b) / 16), mask);
            for (int r = 0; r < ROWS; r++)
                acc[r] = _mm256_dpbusd_epi32(acc[r], q, _mm256_loadu_si256((const __m256i *)(xs + r * stride + i)));
        }
    }
    add_lanes8(acc, out);
}
#elif X86
#define ROWS 4  /* sixteen AVX2 registers: four rows' int32 sums and int16 pairs (eight spill: measured slower) */
/* ternary_dot for four rows of x at once (row r at xs + r * stride), as above but without vpdpbusd: the
   int16 pairs add up over four blocks of 128 weights (16 maddubs, |sum| <= 16 * 512 = 8,192 < 32,767)
   before they widen into int32. */
static inline void ternary_rows(const uint8_t *row, const int8_t *xs, int64_t stride, int in, int32_t *out) {
    const __m256i mask = _mm256_set1_epi8(3), ones16 = _mm256_set1_epi16(1);
    const int8_t *x0 = xs, *x1 = xs + stride, *x2 = xs + 2 * stride, *x3 = xs + 3 * stride;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;  /* int32 sums: twelve registers in all */
    for (int b = 0; b < in;) {
        __m256i p0 = _mm256_setzero_si256(), p1 = p0, p2 = p0, p3 = p0;  /* int16 pairs */
        for (int end = b + 512 < in ? b + 512 : in; b < end; b += 128) {
            __m256i packed = _mm256_loadu_si256((const __m256i *)(row + b / 4));
            for (int i = b; i < b + 128; i += 32) {  /* weights i .. i + 31, each W + 1 */
                __m256i q = _mm256_and_si256(_mm256_srli_epi16(packed, (i - b) / 16), mask);
                p0 = _mm256_add_epi16(p0, _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)(x0 + i))));
                p1 = _mm256_add_epi16(p1, _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)(x1 + i))));
                p2 = _mm256_add_epi16(p2, _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)(x2 + i))));
                p3 = _mm256_add_epi16(p3, _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)(x3 + i))));
            }
        }
        a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(p0, ones16)), a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(p1, ones16));
        a2 = _mm256_add_epi32(a2, _mm256_madd_epi16(p2, ones16)), a3 = _mm256_add_epi32(a3, _mm256_madd_epi16(p3, ones16));
    }
    out[0] = hsum_epi32(a0), out[1] = hsum_epi32(a1), out[2] = hsum_epi32(a2), out[3] = hsum_epi32(a3);
}
#endif

/* sums[n][o] = sum_i W[o][i] x[n][i] (sums: (N, out)) for every row n of x (N, in) and the rows o = lo ..
   hi - 1 of W, given xsum[n] = sum_i x[n][i]. Rows of x ROWS at a time on the x86 path: their ROWS in bytes
   stay in L1 while the rows of W stream past (each byte used for ROWS rows); then one at a time. */
static void ternary_block(const int8_t *x, const uint8_t *w, const int32_t *xsum, int32_t *sums, int N, int in,
                          int out, int lo, int hi) {
    int n = 0;
#if X86
    for (int32_t some[ROWS]; n + ROWS <= N; n += ROWS)
        for (int o = lo; o < hi; o++) {
            ternary_rows(w + (int64_t)o * (in / 4), x + (int64_t)n * in, in, in, some);
            for (int r = 0; r < ROWS; r++) sums[(int64_t)(n + r) * out + o] = some[r] - xsum[n + r];
        }
#endif
    for (; n < N; n++)
        for (int o = lo; o < hi; o++)
            sums[(int64_t)n * out + o] = ternary_dot(w + (int64_t)o * (in / 4), x + (int64_t)n * in, in) - xsum[n];
}

static int32_t *row_sums(const int8_t *x, int N, int in) {  /* sum(x) per row (N), malloc'd */
    int32_t *xsum = malloc(sizeof(int32_t) * N);
    for (int n = 0; n < N; n++) {
        int32_t s = 0;
        for (int i = 0; i < in; i++) s += x[(int64_t)n * in + i];
        xsum[n] = s;
    }
    return xsum;
}

/* y[n][o] = sum_i W[o][i] x[n][i]; w: (out, in / 4) repacked bytes, x: (N, in) int8, in % 128 == 0;
   each thread its own rows of W, each row read once for all N rows of x. */
void ternary_matmul(const int8_t *x, const uint8_t *w, int32_t *y, int N, int in, int out) {
    int32_t *xsum = row_sums(x, N, in);
    #pragma omp parallel
    {
        int lo, hi;
        my_rows(out, &lo, &hi);
        ternary_block(x, w, xsum, y, N, in, out, lo, hi);
    }
    free(xsum);
}

/* One row x (in) to int8 q (in_padded, zeros past in): q = round(x s) clamped to [-128, 127], s = 127 /
   max(max |x|, 1e-5), rounded half to even as torch.round; returns s. */
static float quantize_row(const float *x, int8_t *q, int in, int in_padded) {
    float m = 0.0f;
    int i = 0;
#if X86
    const __m256 sign = _mm256_set1_ps(-0.0f), low = _mm256_set1_ps(-128.0f), high = _mm256_set1_ps(127.0f);
    __m256 m8 = _mm256_setzero_ps();  /* max |x|, eight lanes at a time, then the tail */
    for (; i + 8 <= in; i += 8) m8 = _mm256_max_ps(m8, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
    float lanes[8];
    _mm256_storeu_ps(lanes, m8);
    for (int k = 0; k < 8; k++) m = fmaxf(m, lanes[k]);
#endif
    for (; i < in; i++) m = fmaxf(m, fabsf(x[i]));
    float scale = (1.0f / fmaxf(m, 1e-5f)) * 127.0f;  /* torch computes 127 / t as t.reciprocal() * 127 */
    i = 0;
#if X86
    const __m256 s8 = _mm256_set1_ps(scale);
    for (; i + 8 <= in; i += 8) {  /* round, clamp, narrow to int8 */
        __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), s8), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256i k32 = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, low), high));
        __m128i k16 = _mm_packs_epi32(_mm256_castsi256_si128(k32), _mm256_extracti128_si256(k32, 1));
        _mm_storel_epi64((__m128i *)(q + i), _mm_packs_epi16(k16, k16));
    }
#endif
    for (; i < in_padded; i++) q[i] = i < in ? (int8_t)fminf(fmaxf(nearbyintf(x[i] * scale), -128.0f), 127.0f) : 0;
    return scale;
}

/* The first 64-byte boundary, a cache line's, at or after block (NULL stays NULL): where a buffer of
   n + 63 bytes holds n aligned ones. malloc's 16-byte boundary split every other 32-byte load of the int8
   rows across two lines (two loads' work): a 512-token prompt ran 1.2x slower whenever the rows landed so
   (dev/LOG.md, 2026-12-05). */
static void *line_start(void *block) {
    return block ? (void *)(((uintptr_t)block + 63) & ~(uintptr_t)63) : NULL;
}

/* The whole BitLinear at once: x (N, in) float32 -> y (N, out) float32 = (x_q W^T) gamma / s, with
   x_q = round(x s) clamped to [-128, 127] and s = 127 / max(max |x|, 1e-5) per row: the operations
   of ternary.absmax_int8 and PackedTernaryLinear.forward, in their order and float32 rounding. Where
   kept_sums and kept_scale are not NULL, the integer sums (N, out) and each row's gamma / s (N) are left
   there (either may be NULL): y = sums x scale, which decode.c's KV cache keeps in int16 for the values. */
void ternary_linear(const float *x, const uint8_t *w, float gamma, float *y, int N, int in, int in_padded, int out,
                    int32_t *kept_sums, float *kept_scale) {
    void *block = malloc((size_t)N * in_padded + 63);
    int8_t *xq = line_start(block);  /* in_padded % 128 == 0: every row aligned too */
    float *scale = kept_scale ? kept_scale : malloc(sizeof(float) * N);
    #pragma omp parallel for if (N > 1)  /* a prompt's rows side by side; each row's factor, once */
    for (int n = 0; n < N; n++)
        scale[n] = gamma / quantize_row(x + (int64_t)n * in, xq + (int64_t)n * in_padded, in, in_padded);
    int32_t *xsum = row_sums(xq, N, in_padded);
    int32_t *sums = kept_sums ? kept_sums : malloc(sizeof(int32_t) * (size_t)N * out);
    #pragma omp parallel  /* as ternary_matmul, then each thread rescales the sums it made */
    {
        int lo, hi;
        my_rows(out, &lo, &hi);
        ternary_block(xq, w, xsum, sums, N, in_padded, out, lo, hi);
        for (int n = 0; n < N; n++)
            for (int o = lo; o < hi; o++) y[(int64_t)n * out + o] = (float)sums[(int64_t)n * out + o] * scale[n];
    }
    free(block), free(xsum);
    if (!kept_sums) free(sums);
    if (!kept_scale) free(scale);
}

// ----------------------------------------------------------------------------
// Float matrix-vector products (an untied or tied head, the code head's projection; the torch path's Linears)

/* a float matrix's element type; I8, I16: integers whose scales are kept apart (the KV cache's) */
enum { F32 = 0, BF16 = 1, F16 = 2, I8 = 3, I16 = 4 };

static inline float weight(const void *w, int64_t i, int kind) {  /* element i as float32: bfloat16 is its top half */
    if (kind == F32) return ((const float *)w)[i];
    if (kind == I8) return (float)((const int8_t *)w)[i];
    if (kind == I16) return (float)((const int16_t *)w)[i];
    uint16_t bits = ((const uint16_t *)w)[i];
    if (kind == F16) return half_to_float(bits);
    uint32_t wide = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &wide, 4);
    return f;
}

#if X86
static inline __m256 load8(const void *w, int64_t i, int kind) {  /* eight weights as float32 */
    if (kind == F32) return _mm256_loadu_ps((const float *)w + i);
    if (kind == I8) return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)((const int8_t *)w + i))));
    __m128i halves = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
    if (kind == F16) return _mm256_cvtph_ps(halves);
    if (kind == I16) return _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(halves));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(halves), 16));
}

static inline float hsum8(__m256 v) {  /* the sum of a register's eight floats: halves, pairs, the last two */
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_hadd_ps(h, h);
    return _mm_cvtss_f32(_mm_hadd_ps(h, h));
}
#endif

/* One row through a float Linear: y (out) = W (out, in) x (in), in % 8 == 0, W float32, bfloat16 or
   float16, x and y float32, sums in float32. At batch 1 every weight is read once and used once, so the
   speed is the memory's. x86: four rows at a time share each load of x, and the next four rows are
   prefetched while these are summed, non-temporally (used once, they need not evict the KV cache or
   the activations); eight lanes a row, added up at the end (the plain loop adds in order: the two
   differ by rounding). */
INLINE void matvec(const float *x, const void *w, float *y, int in, int out, int kind) {
    #pragma omp parallel
    {
        int lo, hi, o;
        my_rows(out, &lo, &hi);
        o = lo;
#if X86
        int size = kind == F32 ? 4 : 2;
        for (; o + 4 <= hi; o += 4) {
            int64_t r = (int64_t)o * in;  /* the first of the four rows */
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int i = 0; i < in; i += 8) {
                for (int k = 4; k < 8; k++) _mm_prefetch((const char *)w + (r + k * (int64_t)in + i) * size, _MM_HINT_NTA);
                __m256 v = _mm256_loadu_ps(x + i);
                a0 = _mm256_fmadd_ps(load8(w, r + i, kind), v, a0);
                a1 = _mm256_fmadd_ps(load8(w, r + in + i, kind), v, a1);
                a2 = _mm256_fmadd_ps(load8(w, r + 2 * in + i, kind), v, a2);
                a3 = _mm256_fmadd_ps(load8(w, r + 3 * in + i, kind), v, a3);
            }
            y[o] = hsum8(a0), y[o + 1] = hsum8(a1), y[o + 2] = hsum8(a2), y[o + 3] = hsum8(a3);
        }
        for (; o < hi; o++) {  /* the last rows when this thread's count is not a multiple of 4: summed as the others */
            __m256 a = _mm256_setzero_ps();
            for (int i = 0; i < in; i += 8) a = _mm256_fmadd_ps(load8(w, (int64_t)o * in + i, kind), _mm256_loadu_ps(x + i), a);
            y[o] = hsum8(a);
        }
#endif
        for (; o < hi; o++) {  /* the plain loop (x86: no rows are left) */
            float sum = 0.0f;
            for (int i = 0; i < in; i++) sum += weight(w, (int64_t)o * in + i, kind) * x[i];
            y[o] = sum;
        }
    }
}

void float_matvec(const float *x, const float *w, float *y, int in, int out) { matvec(x, w, y, in, out, F32); }
void bf16_matvec(const float *x, const uint16_t *w, float *y, int in, int out) { matvec(x, w, y, in, out, BF16); }
void half_matvec(const float *x, const uint16_t *w, float *y, int in, int out) { matvec(x, w, y, in, out, F16); }

// ----------------------------------------------------------------------------
// The code head's sums (decode.c's code_logits)

/* The code head reads a token's D code bits a byte at a time: for code byte j, its low nibble picks one of
   16 partial sums of z (lut[32 j .. 32 j + 15]), its high nibble one of 16 more (lut[32 j + 16 ..]).
   nibble_sum adds both to sum for token i of a block of 32 (block: each byte position's 32 bytes side
   by side), in that order: the order every path keeps. */
static inline float nibble_sum(const uint8_t *block, int j, int i, const float *lut, float sum) {
    uint8_t byte = block[32 * j + i];
    sum += lut[32 * j + (byte & 15)];
    return sum + lut[32 * j + 16 + (byte >> 4)];
}

#if X86
/* Eight tokens' nibble_sum at once (bytes: 8 of them, side by side), a nibble picking its sum from 16
   in two registers (the 8s bit choosing which). */
static inline __m256 nibbles8(const uint8_t *bytes, const float *table, __m256 sum) {
    __m256i byte = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)bytes));
    __m256i n[2] = {_mm256_and_si256(byte, _mm256_set1_epi32(15)), _mm256_srli_epi32(byte, 4)};
    for (int k = 0; k < 2; k++) {
        __m256 first = _mm256_permutevar8x32_ps(_mm256_loadu_ps(table + 16 * k), n[k]);
        __m256 second = _mm256_permutevar8x32_ps(_mm256_loadu_ps(table + 16 * k + 8), n[k]);
        sum = _mm256_add_ps(sum, _mm256_blendv_ps(first, second, _mm256_castsi256_ps(_mm256_slli_epi32(n[k], 28))));
    }
    return sum;
}
#endif

#if X86 && defined(__AVX512F__)
/* The same for sixteen tokens: with AVX-512 one register holds a 16-entry table. */
static inline __m512 nibbles16(const uint8_t *bytes, const float *table, __m512 sum) {
    __m512i byte = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)bytes));
    sum = _mm512_add_ps(sum, _mm512_permutexvar_ps(_mm512_and_si512(byte, _mm512_set1_epi32(15)), _mm512_loadu_ps(table)));
    return _mm512_add_ps(sum, _mm512_permutexvar_ps(_mm512_srli_epi32(byte, 4), _mm512_loadu_ps(table + 16)));
}
#endif

/* The 32 tokens of one block of codes (bytes of each, side by side): out[i] = sum of z over token i's
   set bits, from lut's float32 tables. The even and the odd bytes add into two sums, so each add need
   not wait for the one before; then even + odd: the same order in every path, at any vector width. */
static void sums_f32(const uint8_t *block, int bytes, const float *lut, float *out) {
    int j;
#if X86 && defined(__AVX512F__)
    for (int k = 0; k < 32; k += 16) {
        __m512 even = _mm512_setzero_ps(), odd = even;
        for (j = 0; j + 2 <= bytes; j += 2) {
            even = nibbles16(block + 32 * j + k, lut + 32 * j, even);
            odd = nibbles16(block + 32 * j + 32 + k, lut + 32 * j + 32, odd);
        }
        if (j < bytes) even = nibbles16(block + 32 * j + k, lut + 32 * j, even);
        _mm512_storeu_ps(out + k, _mm512_add_ps(even, odd));
    }
#elif X86
    for (int k = 0; k < 32; k += 8) {
        __m256 even = _mm256_setzero_ps(), odd = even;
        for (j = 0; j + 2 <= bytes; j += 2) {
            even = nibbles8(block + 32 * j + k, lut + 32 * j, even);
            odd = nibbles8(block + 32 * j + 32 + k, lut + 32 * j + 32, odd);
        }
        if (j < bytes) even = nibbles8(block + 32 * j + k, lut + 32 * j, even);
        _mm256_storeu_ps(out + k, _mm256_add_ps(even, odd));
    }
#else
    for (int i = 0; i < 32; i++) {
        float even = 0.0f, odd = 0.0f;
        for (j = 0; j + 2 <= bytes; j += 2)
            even = nibble_sum(block, j, i, lut, even), odd = nibble_sum(block, j + 1, i, lut, odd);
        if (j < bytes) even = nibble_sum(block, j, i, lut, even);
        out[i] = even + odd;
    }
#endif
}

/* The same from int16 tables (--head_tables i16): per code byte two tables of 16 entries, the high
   nibble's sums (k = 0), then the low one's (k = 1). The tables are scaled so that no token's sum can
   pass 32,767 (quantize_tables): integer adds are exact, so every path gives the same integers. With
   AVX-512 BW one register holds both tables and one permute looks up 32 tokens (the high nibble is its
   own index, the low one's is the byte with 16 set: the permute reads only an index's low 5 bits); with
   AVX2 a byte shuffle looks up 16 bytes in each 128-bit lane, so each table is kept as two byte tables
   (its entries' low bytes, then their high bytes: put), joined again into int16 by the unpacks. */
static inline void put(int16_t *tables, int j, int k, int n, int16_t q) {  /* byte j, table k, entry n */
#if X86 && !defined(__AVX512BW__)
    uint8_t *split = (uint8_t *)(tables + 32 * j + 16 * k);
    split[n] = (uint16_t)q & 255, split[16 + n] = (uint16_t)q >> 8;
#else
    tables[32 * j + 16 * k + n] = q;
#endif
}

static void sums_i16(const uint8_t *block, int bytes, const int16_t *tables, float *out) {
#if X86 && defined(__AVX512BW__)
    __m512i high = _mm512_setzero_si512(), low = high;
    for (int j = 0; j < bytes; j++) {
        __m512i byte = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(block + 32 * j)));
        __m512i table = _mm512_loadu_si512(tables + 32 * j);
        high = _mm512_add_epi16(high, _mm512_permutexvar_epi16(_mm512_srli_epi16(byte, 4), table));
        low = _mm512_add_epi16(low, _mm512_permutexvar_epi16(_mm512_or_si512(byte, _mm512_set1_epi16(16)), table));
    }
    /* tokens 0 .. 15, then 16 .. 31, widened to int32, then float; the lane is an immediate: a constant */
    __m512i first = _mm512_add_epi32(_mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(high, 0)),
                                     _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(low, 0)));
    __m512i second = _mm512_add_epi32(_mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(high, 1)),
                                      _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(low, 1)));
    _mm512_storeu_ps(out, _mm512_cvtepi32_ps(first));
    _mm512_storeu_ps(out + 16, _mm512_cvtepi32_ps(second));
#elif X86
    const __m256i m15 = _mm256_set1_epi8(15);
    __m256i first = _mm256_setzero_si256(), second = first;  /* tokens 0 .. 7 and 16 .. 23; 8 .. 15 and 24 .. 31 */
    for (int j = 0; j < bytes; j++) {
        __m256i byte = _mm256_loadu_si256((const __m256i *)(block + 32 * j));
        __m256i nibble[2] = {_mm256_and_si256(_mm256_srli_epi16(byte, 4), m15), _mm256_and_si256(byte, m15)};
        for (int k = 0; k < 2; k++) {
            const __m128i *split = (const __m128i *)(tables + 32 * j + 16 * k);
            __m256i lows = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128(split)), nibble[k]);
            __m256i highs = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128(split + 1)), nibble[k]);
            first = _mm256_add_epi16(first, _mm256_unpacklo_epi8(lows, highs));
            second = _mm256_add_epi16(second, _mm256_unpackhi_epi8(lows, highs));
        }
    }
    __m128i parts[4] = {_mm256_castsi256_si128(first), _mm256_castsi256_si128(second),
                        _mm256_extracti128_si256(first, 1), _mm256_extracti128_si256(second, 1)};
    for (int k = 0; k < 4; k++) _mm256_storeu_ps(out + 8 * k, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(parts[k])));
#else
    for (int i = 0; i < 32; i++) {
        int32_t sum = 0;  /* |sum| <= 32,767 by the tables' scale */
        for (int j = 0; j < bytes; j++)
            sum += tables[32 * j + (block[32 * j + i] >> 4)] + tables[32 * j + 16 + (block[32 * j + i] & 15)];
        out[i] = (float)sum;
    }
#endif
}

// ----------------------------------------------------------------------------
// The MLP's activation

#if X86
/* e^x for eight floats (Cephes' expf: x = n ln 2 + r, |r| <= ln 2 / 2, e^r by a degree-7 polynomial, 2^n put in
   the exponent; within 2 ulp, x clamped to [-87.3, 88.7]: 0 and inf are reached as float32 reaches them). */
static inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  /* ln 2 in two parts: r exact enough */
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    const float c[5] = {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
    for (int k = 0; k < 5; k++) y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(c[k]));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(two_n));
}

/* erf(x) for eight floats as torch's CPU kernels compute it (ATen's Vectorized<float>::erf, Abramowitz and
   Stegun 7.1.26): erf |x| = 1 - t (a1 + a2 t + ... + a5 t^4) e^{-x^2}, t = 1 / (1 + 0.3275911 |x|), error
   at most 1.5e-7; the sign put back. */
static inline __m256 erf8(__m256 x) {
    const __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0f)), one = _mm256_set1_ps(1.0f);
    __m256 a = _mm256_xor_ps(x, sign);
    __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), a, one));
    __m256 r = _mm256_set1_ps(1.061405429f);
    const float c[4] = {-1.453152027f, 1.421413741f, -0.284496736f, 0.254829592f};
    for (int k = 0; k < 4; k++) r = _mm256_fmadd_ps(r, t, _mm256_set1_ps(c[k]));
    __m256 e = exp8(_mm256_xor_ps(_mm256_mul_ps(x, x), _mm256_set1_ps(-0.0f)));
    return _mm256_xor_ps(_mm256_fmadd_ps(_mm256_xor_ps(_mm256_mul_ps(e, t), _mm256_set1_ps(-0.0f)), r, one), sign);
}
#endif

/* The exact GELU, x Phi(x) = x (1 + erf(x / sqrt 2)) / 2 (model.py's nn.GELU()), on x (n) in place: C's erff,
   or on the x86 path eight at a time by torch's own vectorized erf (erf8). Each value alone: any thread count
   gives the same bits. */
static void gelu(float *x, int64_t n) {
    const float sqrt_half = 0.70710678118654752f;
    #pragma omp parallel for schedule(static) if (n >= 16384)  /* one position's 3,072: less than a fork costs */
    for (int64_t b = 0; b < (n + 7) / 8; b++) {
        int64_t j = 8 * b;
#if X86
        if (j + 8 <= n) {
            __m256 v = _mm256_loadu_ps(x + j);
            __m256 phi = _mm256_add_ps(_mm256_set1_ps(1.0f), erf8(_mm256_mul_ps(v, _mm256_set1_ps(sqrt_half))));
            _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_mul_ps(v, _mm256_set1_ps(0.5f)), phi));
            continue;
        }
#endif
        for (; j < n && j < 8 * b + 8; j++) x[j] = 0.5f * x[j] * (1.0f + erff(x[j] * sqrt_half));
    }
}
