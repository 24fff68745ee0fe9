/* decode.c: positions through the model, for tablefree/run.c (which includes this file after reading
   the model from its file). forward() takes new positions at once: a prompt's rows go through one layer
   after another, MAX_ROWS at a time through every Linear together (a layer's weights stay in the cache
   for all of them), a decoding step is one row; only the last row's logits are made, since only they
   choose the next token. The KV cache (--kv_cache):
     sums (the default)  each key and value as the qkv product's integer sums in int16 and its row's scale;
                         the float32 vector remade from them as the product made it (sums x scale, + bias;
                         a key then rotated): the same bits as f32 in half the bytes (a head's sums past
                         32,767 are halved until they fit, and rounded then)
     f32                 keys and values in float32
     f16                 in float16: half f32's bytes, each key and value rounded once
     i8                  int8 with a scale for each position's head: a quarter of the bytes, each key and
                         value within 1 / 254 of its vector's largest
   Every loop over the vocabulary or the weights is split across the threads; no result depends on
   how many there are (each row, head and block of tokens is summed by one thread in one order). */

#define MAX_ROWS 64  /* a prompt goes through a layer in runs of up to this many positions */

typedef struct {  /* the activations of up to MAX_ROWS positions, and the cache of every position so far */
    float *x;                  /* (positions, n_embd): the residual stream of every new position */
    float *h, *y;              /* (rows, n_embd) */
    float *qkv, *mlp;          /* (rows, 3 n_embd), (rows, hidden) */
    float *att;                /* (rows, n_head, positions): each query's scores */
    float *z, *logits, *lut;   /* the code head's projection (D), the logits (V padded to 32), its tables */
    int16_t *lut16;            /* its tables in int16 (--head_tables i16: sums_i16), and whether they are used */
    int tables16;
    int32_t *qkv_sums;         /* (rows, 3 n_embd): the qkv product's integer sums, */
    float *qkv_scale;          /* (rows): and each row's scale, qkv = sums x scale (+ bias) */
    void *k_cache, *v_cache;   /* (n_layer, n_head, positions, head_dim): keys (rotated, but sums), values */
    float *k_scale, *v_scale;  /* (n_layer, n_head, positions): an int8 vector's scale; sums: its row's */
    float *k_wide, *v_wide;    /* sums: one layer's keys and values remade, (n_head, positions, head_dim), for a prompt */
    int cache;                 /* CACHE_F32, CACHE_F16, CACHE_I8 or CACHE_SUMS */
    float *cos, *sin;          /* (positions, head_dim / 2) */
    int positions, pos;
} State;

enum { CACHE_F32, CACHE_F16, CACHE_I8, CACHE_SUMS };  /* --kv_cache f32, f16, i8, sums */

/* The element type (kernel.c's) a cache holds its keys and values in: a constant where the cache is. */
static inline int cache_type(int cache) { return cache == CACHE_F16 ? F16 : cache == CACHE_I8 ? I8 : cache == CACHE_SUMS ? I16 : F32; }
static int element_size(int type) { return type == F32 ? 4 : type == I8 ? 1 : 2; }

static void new_state(State *s, const Config *c, int positions, int cache_kind, int tables16) {
    int C = c->n_embd, hs = C / c->n_head, R = MAX_ROWS;
    size_t per_type = (size_t)c->n_layer * positions * C, scales = (size_t)c->n_layer * c->n_head * positions;
    s->positions = positions, s->pos = 0, s->cache = cache_kind, s->tables16 = tables16;
    s->qkv_sums = xcalloc((size_t)R * 3 * C, 4), s->qkv_scale = xcalloc(R, 4);
    s->x = xcalloc((size_t)positions * C, 4);  /* calloc's pages: only a prompt's rows become resident */
    s->h = xcalloc((size_t)R * C, 4), s->y = xcalloc((size_t)R * C, 4);
    s->qkv = xcalloc((size_t)R * 3 * C, 4), s->mlp = xcalloc((size_t)R * c->hidden, 4);
    s->att = xcalloc((size_t)R * c->n_head * positions, 4);
    s->z = xcalloc(c->bits + 8, 4), s->logits = xcalloc((c->vocab + 31) / 32 * 32, 4);
    s->lut = xcalloc((size_t)(c->bits / 8 + 1) * 32, 4), s->lut16 = xcalloc((size_t)(c->bits / 8 + 1) * 32, 2);
    s->k_cache = xcalloc(per_type, element_size(cache_type(cache_kind)));
    s->v_cache = xcalloc(per_type, element_size(cache_type(cache_kind)));
    if (cache_kind == CACHE_SUMS) s->k_wide = xcalloc((size_t)positions * C, 4), s->v_wide = xcalloc((size_t)positions * C, 4);
    s->k_scale = xcalloc(scales, 4), s->v_scale = xcalloc(scales, 4);
    s->cos = xcalloc((size_t)positions * hs / 2, 4), s->sin = xcalloc((size_t)positions * hs / 2, 4);
    for (int p = 0; p < positions; p++)  /* model.Rotary: theta_i = base^(-2i / hs), in float32 */
        for (int i = 0; i < hs / 2; i++) {
            float inv_freq = powf(c->rope_base, -(float)(2 * i) / (float)hs), angle = (float)p * inv_freq;
            s->cos[p * hs / 2 + i] = cosf(angle), s->sin[p * hs / 2 + i] = sinf(angle);
        }
}

static float pairwise8(const float *part) {
    return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

/* The mean and the variance as eight running sums each (element i into sum i % 8), added pairwise at the
   end: eight chains, where one sum waits on its own last add every step (the compiler makes them one
   register on x86); the same order in every build. */
static void layernorm(float *out, const float *x, const float *w, const float *b, int n) {
    float sum[8] = {0}, squares[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) sum[k] += x[i + k];
    for (; i < n; i++) sum[i % 8] += x[i];
    float mean = pairwise8(sum) / n;
    for (i = 0; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) squares[k] += (x[i + k] - mean) * (x[i + k] - mean);
    for (; i < n; i++) squares[i % 8] += (x[i] - mean) * (x[i] - mean);
    float var = pairwise8(squares);
    float inv = 1.0f / sqrtf(var / n + 1e-5f);
    for (i = 0; i < n; i++) out[i] = (x[i] - mean) * inv * w[i] + (b ? b[i] : 0.0f);
}

/* y = t(x) for rows rows; kept_sums, kept_scale: where the integer sums and row scales are left, or NULL */
static void run_ternary(const Ternary *t, const float *x, float *y, int rows, int32_t *kept_sums, float *kept_scale) {
    ternary_linear(x, t->w, t->gamma, y, rows, t->in, t->padded, t->out, kept_sums, kept_scale);
    if (t->bias)
        for (int r = 0; r < rows; r++)
            for (int o = 0; o < t->out; o++) y[(int64_t)r * t->out + o] += t->bias[o];
}

static int bit(uint64_t value, int K, int j) { return (value >> (K - 1 - j)) & 1; }  /* MSB first */

static int parity(uint64_t v) {  /* the sum of v's bits mod 2: halves folded together */
    for (int shift = 32; shift; shift /= 2) v ^= v >> shift;
    return (int)(v & 1);
}

static void embed(const Model *m, int token, float *x) {
    const Config *c = &m->c;
    int C = c->n_embd, K = c->bits;
    if (c->input == LEARNED) {
        for (int j = 0; j < C; j++) x[j] = half_to_float(m->table[(int64_t)token * C + j]);
        return;
    }
    if (c->input == KRONECKER) {  /* codes.kronecker_values: the z-normalised code's two values */
        int L = m->lengths[token], D = 256 * c->pos_dim;
        float s = 1.0f / sqrtf((float)(L > 1 ? L : 1)), mean = L * s / D;
        float std = sqrtf((L * (s - mean) * (s - mean) + (D - L) * mean * mean) / (D - 1)) + 1e-6f;
        float hot = L > 0 ? (s - mean) / std : 0.0f, cold = -mean / std;
        for (int j = 0; j < C; j++) x[j] = cold * m->cells_sum[j];
        for (int p = 0; p < L; p++) {
            const uint16_t *row = m->cells + ((int64_t)m->token_bytes[(int64_t)token * c->pos_dim + p] * c->pos_dim + p) * C;
            for (int j = 0; j < C; j++) x[j] += (hot - cold) * half_to_float(row[j]);
        }
        return;
    }
    uint8_t code[MAX_BITS];  /* the K (or D) bits of the token's code */
    for (int j = 0; j < K; j++) {
        if (c->input == BINARY) code[j] = bit(token, K, j);
        else if (c->input == AFFINE) code[j] = parity((uint64_t)token & m->masks[j]) ^ m->affine_b[j];
        else code[j] = (m->codes[((int64_t)(token / 32) * ((K + 7) / 8) + j / 8) * 32 + token % 32] >> (7 - j % 8)) & 1;
    }
    for (int j = 0; j < C; j++) {  /* codes.lift_index: tile j mod K, or interleave floor(j K / n) */
        int b = code[c->interleave ? (int)((int64_t)j * K / C) : j % K];
        x[j] = c->pm1 ? 2.0f * b - 1.0f : (float)b;
    }
}

/* model.apply_rotary on one head's vector r (hs): dimension i is turned with i + hs / 2. */
static void rotate(float *r, const float *cos, const float *sin, int hs) {
    for (int i = 0; i < hs / 2; i++) {
        float a = r[i], b = r[i + hs / 2];
        r[i] = a * cos[i] - b * sin[i], r[i + hs / 2] = a * sin[i] + b * cos[i];
    }
}

/* One head's n float32 values into the cache at element `at`, as kind: float32, float16 (rounded to
   nearest), or int8: v / scale rounded, scale = max(max |v|, 1e-5) / 127, put in *scale. */
static void store(void *cache, int64_t at, const float *v, int n, int kind, float *scale) {
    if (kind == F32) {
        memcpy((float *)cache + at, v, 4 * (size_t)n);
        return;
    }
    if (kind == I8) {  /* as the ternary Linears quantize their inputs (kernel.c) */
        *scale = 1.0f / quantize_row(v, (int8_t *)cache + at, n, n);
        return;
    }
    uint16_t *out = (uint16_t *)cache + at;
    int i = 0;
#if X86
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(v + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; i++) out[i] = float_to_half(v[i]);
}

/* One head's n integer sums into an int16 cache at element `at`, the row's scale into *scale: shifted right
   (rounded) until each fits, the scale doubled as often. Unshifted, sums x scale is the float32 value. */
static void store_sums(int16_t *cache, int64_t at, const int32_t *sums, int n, float row_scale, float *scale) {
    int32_t most = 0;
    for (int i = 0; i < n; i++) most = sums[i] > most ? sums[i] : -sums[i] > most ? -sums[i] : most;
    int shift = 0;
    while (most >> shift > 32767) shift++;  /* |sums| <= 128 x the input width: a few halvings at most */
    for (int i = 0; i < n; i++) cache[at + i] = (int16_t)(shift ? (sums[i] + (1 << (shift - 1))) >> shift : sums[i]);
    *scale = ldexpf(row_scale, shift);
}

typedef struct {  /* one head's cache: keys and values (positions, hs), their scales (positions) */
    const void *k, *v;
    const float *k_scale, *v_scale;  /* int8: each vector's, applied to its score; sums: each row's; else NULL */
    const float *k_bias, *v_bias;    /* sums: the product's bias for this head's keys and values (hs), or NULL */
    const float *cos, *sin;          /* sums: the rotation's tables (positions, hs / 2): keys are rotated remade */
} Head;

/* x, rounded to float32 here: gcc and clang may otherwise fuse a product into the add after it (one FMA,
   one rounding) where run_ternary rounds the product, then adds its bias. */
static inline float rounded(float x) {
#if defined(__GNUC__)
    __asm__("" : "+m"(x));
#endif
    return x;
}

#if X86
static inline __m256 rounded8(__m256 x) {  /* rounded(), eight lanes */
    __asm__("" : "+x"(x));
    return x;
}
#endif

/* Dimension i of a sums cache's row as the float32 the product made: sums x scale, rounded, then + bias
   (bias NULL: none); remade8: dimensions i .. i + 7. */
static inline float remade_at(const int16_t *sums, float scale, const float *bias, int i) {
    float v = (float)sums[i] * scale;
    return bias ? rounded(v) + bias[i] : v;
}

#if X86
INLINE __m256 remade8(const int16_t *sums, float scale, const float *bias, int i) {
    __m256 v = _mm256_mul_ps(load8(sums, i, I16), _mm256_set1_ps(scale));
    return bias ? _mm256_add_ps(rounded8(v), _mm256_loadu_ps(bias + i)) : v;
}
#endif

/* A sums cache's row (hs) as the float32 vector the product made. */
static void remake(const int16_t *sums, float scale, const float *bias, float *out, int hs) {
    int i = 0;
#if X86
    for (; i + 8 <= hs; i += 8) _mm256_storeu_ps(out + i, remade8(sums, scale, bias, i));
#endif
    for (; i < hs; i++) out[i] = remade_at(sums, scale, bias, i);
}

/* Keys t .. t + n - 1 of a sums cache into out (n, hs) as the float32 cache holds them: remade, rotated. */
static void remake_keys(const Head *head, int64_t t, int n, int hs, float *out) {
    for (int u = 0; u < n; u++) {
        remake((const int16_t *)head->k + (t + u) * hs, head->k_scale[t + u], head->k_bias, out + u * hs, hs);
        rotate(out + u * hs, head->cos + (t + u) * hs / 2, head->sin + (t + u) * hs / 2, hs);
    }
}

/* Value t's dimension i as float32: a sums cache's int16 times its scale, then its bias, as the float32
   cache's value was made (run_ternary: the product's y = sums x scale, then y + bias). */
static inline float value_at(const Head *head, int64_t t, int i, int hs, int type) {
    if (type != I16) return weight(head->v, t * hs + i, type);
    return remade_at((const int16_t *)head->v + t * hs, head->v_scale[t], head->v_bias, i);
}

static void scale_by(float *att, const float *scale, int T) {  /* att[t] *= scale[t]: an int8 cache's scales */
    for (int t = 0; t < T; t++) att[t] *= scale[t];
}

#define KEYS 8  /* keys a pass scores, and 8-lane runs of y it adds: eight FMA chains hide FMA's latency */
#if X86
/* out[j] = the sum of a[j]'s eight lanes, j < 4, in hsum8's order (halves, pairs, the last two). */
INLINE void add_lanes4(const __m256 *a, float *out) {
    __m128 h[4];
    for (int j = 0; j < 4; j++) h[j] = _mm_add_ps(_mm256_castps256_ps128(a[j]), _mm256_extractf128_ps(a[j], 1));
    _mm_storeu_ps(out, _mm_hadd_ps(_mm_hadd_ps(h[0], h[1]), _mm_hadd_ps(h[2], h[3])));
}

/* q . k for the keys at rows t .. t + KEYS - 1 (n of them valid; the rest of out is left alone), in hs / 8 * 8
   dimensions: KEYS FMA chains side by side (one chain would wait on itself each step), then each key's
   eight lanes added in hsum8's order (halves, pairs, the last two), so a score is the same bits whichever
   keys it was computed with. */
INLINE void scores(const float *q, const void *kc, int64_t t, int n, int hs, int kind, float *out) {
    int64_t row[KEYS];
    __m256 a[KEYS];
    for (int k = 0; k < KEYS; k++) row[k] = (t + (k < n ? k : 0)) * hs, a[k] = _mm256_setzero_ps();  /* a missing key reads the first again */
    for (int i = 0; i + 8 <= hs; i += 8) {
        __m256 v = _mm256_loadu_ps(q + i);
        for (int k = 0; k < KEYS; k++) a[k] = _mm256_fmadd_ps(v, load8(kc, row[k] + i, kind), a[k]);
    }
    for (int k = 0; k < n; k += 4) {  /* four keys' lanes at a time */
        float sums[4];
        add_lanes4(a + k, sums);
        for (int j = 0; j < 4 && k + j < n; j++) out[k + j] = sums[j];
    }
}

/* value_at for dimensions i .. i + 7. */
INLINE __m256 value8(const Head *head, int64_t t, int i, int hs, int type) {
    if (type != I16) return load8(head->v, t * hs + i, type);
    return remade8((const int16_t *)head->v + t * hs, head->v_scale[t], head->v_bias, i);
}

/* y[i .. i + 8 chunks - 1] = sum_t att[t] v_t[i ..] over the T cached values, chunks <= KEYS: one FMA chain
   per eight dimensions, each value's bytes read once, added in order of t (the plain loop's order). */
INLINE void add_values(const Head *head, const float *att, int T, int hs, int i, int chunks, int type, float *y) {
    __m256 acc[KEYS];
    for (int k = 0; k < chunks; k++) acc[k] = _mm256_setzero_ps();
    for (int t = 0; t < T; t++) {
        __m256 a = _mm256_set1_ps(att[t]);
        for (int k = 0; k < chunks; k++) acc[k] = _mm256_fmadd_ps(a, value8(head, t, i + 8 * k, hs, type), acc[k]);
    }
    for (int k = 0; k < chunks; k++) _mm256_storeu_ps(y + i + 8 * k, acc[k]);
}
#endif

/* att[t] = e^(scale att[t] - top) for t < T, top the largest of the scaled scores (softmax's numerators);
   returns their sum. x86: eight at a time, e^x by exp8 (within 2 ulp of expf; C's expf is a call a key). */
static float exponentiate(float *att, int T, float scale) {
    float top = -INFINITY, total = 0;
    int t = 0;
#if X86
    __m256 most = _mm256_set1_ps(-INFINITY), sum = _mm256_setzero_ps();
    for (; t + 8 <= T; t += 8) {
        __m256 a = _mm256_mul_ps(_mm256_loadu_ps(att + t), _mm256_set1_ps(scale));
        _mm256_storeu_ps(att + t, a), most = _mm256_max_ps(most, a);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, most);
    for (int k = 0; k < 8; k++) top = fmaxf(top, lanes[k]);
#endif
    for (int u = t; u < T; u++) att[u] *= scale, top = fmaxf(top, att[u]);
    t = 0;
#if X86
    for (; t + 8 <= T; t += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(att + t), _mm256_set1_ps(top)));
        _mm256_storeu_ps(att + t, e), sum = _mm256_add_ps(sum, e);
    }
    total = hsum8(sum);
#endif
    for (; t < T; t++) att[t] = expf(att[t] - top), total += att[t];
    return total;
}

/* One query (hs) of one head against its cached positions 0 .. T - 1 (rows of hs, one after another), in
   the cache's kind: y (hs) = softmax(q . k_t / sqrt(hs)) v. An int8 cache's scales come in once a
   position: a score times its key's, a softmax numerator times its value's. A sums cache's keys are remade
   KEYS at a time into float32, its values eight dimensions at a time as they are added: the float32
   cache's numbers, in the same order. x86: the scores KEYS keys at a
   time, and y eight dimensions a chain, 8 KEYS of them in registers while every value is added in, in
   order of t (the plain loop's order: each y[i] = sum_t att[t] v_t[i] added from t = 0, the x86 path with
   FMAs). */
INLINE void attend(const float *q, const Head *head, float *att, float *y, int T, int hs, int cache) {
    int type = cache_type(cache), kind = cache == CACHE_SUMS ? F32 : type;  /* the keys' type as scored: sums remade */
    int whole = X86 ? hs / 8 * 8 : 0;  /* the dimensions the x86 path takes; the plain loops the rest */
    float remade[KEYS * hs];
    for (int t = 0; t < T; t += KEYS) {  /* KEYS keys at a time: a sums cache's remade first, in float32 */
        int n = T - t < KEYS ? T - t : KEYS;
        const void *kc = cache == CACHE_SUMS ? remade : head->k;
        int64_t at = cache == CACHE_SUMS ? 0 : t;  /* the first key's row in kc */
        if (cache == CACHE_SUMS) remake_keys(head, t, n, hs, remade);
        for (int u = 0; u < n; u++) att[t + u] = 0.0f;
#if X86
        scores(q, kc, at, n, hs, kind, att + t);
#endif
        for (int u = 0; u < n && whole < hs; u++)
            for (int i = whole; i < hs; i++) att[t + u] += q[i] * weight(kc, (at + u) * hs + i, kind);
    }
    if (kind == I8) scale_by(att, head->k_scale, T);
    float total = exponentiate(att, T, 1.0f / sqrtf((float)hs));
    if (type == I8) scale_by(att, head->v_scale, T);
    int i = 0;
#if X86
    for (; i + 8 * KEYS <= whole; i += 8 * KEYS) add_values(head, att, T, hs, i, KEYS, type, y);
    for (; i + 32 <= whole; i += 32) add_values(head, att, T, hs, i, 4, type, y);
    for (; i < whole; i += 8) add_values(head, att, T, hs, i, 1, type, y);
#endif
    for (; i < hs; i++) {
        y[i] = 0.0f;
        for (int t = 0; t < T; t++) y[i] += att[t] * value_at(head, t, i, hs, type);
    }
    for (i = 0; i < hs; i++) y[i] /= total;
}

/* Consecutive query rows of one head (a prompt's): row j's query at q + j q_stride, its scores at att +
   j att_stride, its output at y + j y_stride; row j attends to its first T + j positions. */
typedef struct {
    const float *q;
    int64_t q_stride;
    float *att;
    int64_t att_stride;
    float *y;
    int64_t y_stride;
    int T;
} Rows;

#if X86
#ifdef __AVX512F__
#define QUERIES 8  /* a prompt's rows of one head attended together: their eight sums in AVX-512's 32 registers */
#ifdef __AVX512VL__
#define SPAN 3     /* and three keys, or three runs of eight dimensions, at a time: 24 sums of 32 ymm registers */
#else
#define SPAN 1     /* AVX-512 without VL: 16 ymm registers */
#endif
#else
#define QUERIES 4
#define SPAN 2     /* eight sums of 16 registers */
#endif
/* Row j's scores against keys t .. t + n - 1 (n <= SPAN), each key's bytes loaded once for every row and
   each row's query once for the n keys: one FMA chain a row and key, reduced as scores() does. */
INLINE void score_keys(const Rows *r, const void *kc, int t, int n, int hs, int type) {
    __m256 acc[SPAN][QUERIES];
    for (int u = 0; u < n; u++)
        for (int j = 0; j < QUERIES; j++) acc[u][j] = _mm256_setzero_ps();
    for (int i = 0; i < hs; i += 8) {
        __m256 k[SPAN];
        for (int u = 0; u < n; u++) k[u] = load8(kc, (int64_t)(t + u) * hs + i, type);
        for (int j = 0; j < QUERIES; j++) {
            __m256 q = _mm256_loadu_ps(r->q + j * r->q_stride + i);
            for (int u = 0; u < n; u++) acc[u][j] = _mm256_fmadd_ps(q, k[u], acc[u][j]);
        }
    }
    for (int u = 0; u < n; u++)
        for (int j = 0; j < QUERIES; j += 4) {
            float sums[4];
            add_lanes4(acc[u] + j, sums);
            for (int w = 0; w < 4; w++)
                if (t + u < r->T + j + w) r->att[(j + w) * r->att_stride + t + u] = sums[w];
        }
}

/* Every row's output in dimensions i .. i + 8 n - 1 (n <= SPAN): each value's bytes loaded once for every
   row, each row's weight once for the n runs of eight; added in order of t, as attend() adds. */
INLINE void add_rows(const Rows *r, const Head *head, int i, int n, int last, int hs, int type) {
    __m256 acc[SPAN][QUERIES];
    for (int u = 0; u < n; u++)
        for (int j = 0; j < QUERIES; j++) acc[u][j] = _mm256_setzero_ps();
    for (int t = 0; t < last; t++) {
        __m256 v[SPAN];
        for (int u = 0; u < n; u++) v[u] = value8(head, t, i + 8 * u, hs, type);
        for (int j = 0; j < QUERIES; j++) {
            __m256 a = _mm256_set1_ps(r->att[j * r->att_stride + t]);
            for (int u = 0; u < n; u++) acc[u][j] = _mm256_fmadd_ps(a, v[u], acc[u][j]);
        }
    }
    for (int u = 0; u < n; u++)
        for (int j = 0; j < QUERIES; j++) _mm256_storeu_ps(r->y + j * r->y_stride + i + 8 * u, acc[u][j]);
}

/* attend() for QUERIES rows at once (hs % 8 == 0): each key and value is loaded once for all of them (from
   L2, where one head's cache outgrows L1, at about one load a cycle) where attend() loads it again for
   every row, and SPAN keys or runs of values at a time. The same sums in the same order as attend's: the
   same bits (a row's positions past its own add zeros to its values' sums, and their scores are not kept). */
INLINE void attend_rows(const Rows *r, const Head *head, int hs, int cache) {
    const void *kc = head->k;
    int type = cache_type(cache);  /* never a sums cache: a prompt's is remade first */
    int last = r->T + QUERIES - 1, t = 0, i = 0;  /* the last row's positions */
    float total[QUERIES];
    for (; t + SPAN <= last; t += SPAN) score_keys(r, kc, t, SPAN, hs, type);
    for (; t < last; t++) score_keys(r, kc, t, 1, hs, type);
    for (int j = 0; j < QUERIES; j++) {
        float *att = r->att + j * r->att_stride;
        if (type == I8) scale_by(att, head->k_scale, r->T + j);
        total[j] = exponentiate(att, r->T + j, 1.0f / sqrtf((float)hs));
        if (type == I8) scale_by(att, head->v_scale, r->T + j);
        for (int u = r->T + j; u < last; u++) att[u] = 0.0f;
    }
    for (; i + 8 * SPAN <= hs; i += 8 * SPAN) add_rows(r, head, i, SPAN, last, hs, type);
    for (; i < hs; i += 8) add_rows(r, head, i, 1, last, hs, type);
    for (int j = 0; j < QUERIES; j++)
        for (i = 0; i < hs; i++) r->y[j * r->y_stride + i] /= total[j];
}
#else
#define QUERIES 1
#endif

/* n rows (n <= QUERIES) of one head against its cache in the cache's kind: attend_rows where there are
   QUERIES of them, else attend() row by row. */
INLINE void attend_group(const Rows *r, int n, const Head *head, int hs, int cache) {
#if X86
    if (n == QUERIES && hs % 8 == 0) {
        attend_rows(r, head, hs, cache);
        return;
    }
#endif
    for (int j = 0; j < n; j++) attend(r->q + j * r->q_stride, head, r->att + j * r->att_stride, r->y + j * r->y_stride, r->T + j, hs, cache);
}

/* Head h of layer's cache; bias: the qkv product's (3 n_embd), or NULL. */
static Head cache_head(const Config *c, const State *s, int layer, int h, const float *bias) {
    int C = c->n_embd, hs = C / c->n_head, type = cache_type(s->cache), sums = s->cache == CACHE_SUMS;
    int64_t head = (int64_t)layer * c->n_head + h, at = head * s->positions * hs * element_size(type);
    const float *k_scale = s->k_scale + head * s->positions, *v_scale = s->v_scale + head * s->positions;
    return (Head){(const char *)s->k_cache + at, (const char *)s->v_cache + at, type == F32 || type == F16 ? NULL : k_scale,
                  type == F32 || type == F16 ? NULL : v_scale, sums && bias ? bias + C + h * hs : NULL,
                  sums && bias ? bias + 2 * C + h * hs : NULL, s->cos, s->sin};
}

/* Causal attention of rows new positions (pos ..) after their keys and values join the cache; bias: the
   qkv product's (3 n_embd), or NULL. wide: a sums cache read through k_wide and v_wide (a prompt's),
   whose positions from `remade` on are remade here (those before it were, by the layer's earlier runs). */
static void attention(const Config *c, State *s, int layer, int pos, int rows, const float *bias, int wide,
                      int remade) {
    int C = c->n_embd, nh = c->n_head, hs = C / nh;
    int64_t per_head = (int64_t)s->positions * hs;
    int type = cache_type(s->cache);
    #pragma omp parallel for collapse(2) if (rows > 1)  /* a prompt's rows and heads side by side */
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < nh; h++) {
            float *q = s->qkv + (int64_t)r * 3 * C, *k = q + C, *v = q + 2 * C;
            const int32_t *sums = s->qkv_sums + (int64_t)r * 3 * C;
            const float *cos = s->cos + (pos + r) * hs / 2, *sin = s->sin + (pos + r) * hs / 2;
            rotate(q + h * hs, cos, sin, hs);
            int64_t head = (int64_t)layer * nh + h, at = head * per_head + (int64_t)(pos + r) * hs;
            int64_t scale = head * s->positions + pos + r;
            if (s->cache == CACHE_SUMS) {  /* the sums before the bias and the rotation (remade when read) */
                store_sums(s->k_cache, at, sums + C + h * hs, hs, s->qkv_scale[r], s->k_scale + scale);
                store_sums(s->v_cache, at, sums + 2 * C + h * hs, hs, s->qkv_scale[r], s->v_scale + scale);
            } else {
                rotate(k + h * hs, cos, sin, hs);
                store(s->k_cache, at, k + h * hs, hs, type, s->k_scale + scale);
                store(s->v_cache, at, v + h * hs, hs, type, s->v_scale + scale);
            }
        }
    int T = pos + rows;
    if (wide) {  /* a prompt's groups of rows each read every key and value: remade once, for all of them */
        #pragma omp parallel for
        for (int h = 0; h < nh; h++) {
            Head from = cache_head(c, s, layer, h, bias);
            remake_keys(&from, remade, T - remade, hs, s->k_wide + h * per_head + (int64_t)remade * hs);
            for (int t = remade; t < T; t++)
                remake((const int16_t *)from.v + t * hs, from.v_scale[t], from.v_bias, s->v_wide + h * per_head + t * hs, hs);
        }
    }
    int groups = (rows + QUERIES - 1) / QUERIES;
    #pragma omp parallel for collapse(2) schedule(static, 1)  /* dealt in turn: later rows have more positions */
    for (int g = 0; g < groups; g++)
        for (int h = 0; h < nh; h++) {  /* groups of rows and heads side by side, each row its own row of scores */
            int r = g * QUERIES, n = rows - r < QUERIES ? rows - r : QUERIES;
            Rows rs = {s->qkv + (int64_t)r * 3 * C + h * hs, 3 * C, s->att + ((int64_t)r * nh + h) * s->positions,
                       nh * s->positions, s->y + (int64_t)r * C + h * hs, C, pos + r + 1};
            Head hd = wide ? (Head){.k = s->k_wide + h * per_head, .v = s->v_wide + h * per_head} : cache_head(c, s, layer, h, bias);
            switch (wide ? CACHE_F32 : s->cache) {  /* each kind its own copy of the loops, the loads inlined */
            case CACHE_SUMS: attend_group(&rs, n, &hd, hs, CACHE_SUMS); break;
            case CACHE_F16: attend_group(&rs, n, &hd, hs, CACHE_F16); break;
            case CACHE_I8: attend_group(&rs, n, &hd, hs, CACHE_I8); break;
            default: attend_group(&rs, n, &hd, hs, CACHE_F32);
            }
        }
}

/* The int16 tables from lut's float ones: each entry times one scale, rounded; the scale the largest
   power of two at which the largest entries of all 2 D / 8 tables, rounded up, add to at most 32,767
   (the most any token's sum can reach). Returns 1 / scale: a power of two, so sum / scale is exact. */
static float quantize_tables(const float *lut, int16_t *tables, int bytes) {
    float bound = 0;
    for (int t = 0; t < 2 * bytes; t++) {
        float most = 0;
        for (int n = 0; n < 16; n++) most = fmaxf(most, fabsf(lut[16 * t + n]));
        bound += most;
    }
    int e;
    frexp(bound > 0 ? (32767.0 - bytes) / bound : 1.0, &e);  /* (32767 - bytes) / bound = m 2^e, m in [0.5, 1) */
    float scale = ldexpf(1.0f, e < 100 ? e - 1 : 99);         /* at most 2^99: 1 / scale stays a float too */
    for (int j = 0; j < bytes; j++)
        for (int n = 0; n < 16; n++) {  /* lut: the low nibble's table, then the high one's */
            put(tables, j, 0, n, (int16_t)lrintf(lut[32 * j + 16 + n] * scale));
            put(tables, j, 1, n, (int16_t)lrintf(lut[32 * j + n] * scale));
        }
    return 1.0f / scale;
}

static int lowest_bit(unsigned n) {  /* the index of n's lowest set bit, n > 0 */
    int i = 0;
    while (!(n >> i & 1)) i++;
    return i;
}

/* The code head's logits from h (n_embd): z = W h / sqrt(D), then logit(t) = z . c(t) + b(t) with
   c(t) = +-1 read as bits: 2 sum_{bit set} z - sum z, four bits at a time from 16-entry tables of
   partial sums, a block of 32 tokens at a time; never a V x D float table. The codes are streamed
   once a step, so the block two ahead is fetched while this one is summed. */
static void code_logits(const Model *m, State *s, const float *h) {
    const Config *c = &m->c;
    int D = c->bits, bytes = D / 8, V = c->vocab, blocks = (V + 31) / 32;
    half_matvec(h, m->head_w, s->z, c->n_embd, D);
    float total = 0, unit = 1.0f;  /* unit: what one step of an int16 table is worth */
    for (int j = 0; j < D; j++) total += (s->z[j] /= sqrtf((float)D));
    for (int j = 0; j < bytes; j++)  /* per byte: the sums of z over the bits set in each nibble value */
        for (int half = 0; half < 2; half++) {  /* 0: the low nibble, code bits 8 j + 4 .. 7; 1: the high one */
            float *table = s->lut + j * 32 + 16 * half;
            table[0] = 0;
            for (int n = 1; n < 16; n++) table[n] = table[n & (n - 1)] + s->z[8 * j + 4 * (1 - half) + 3 - lowest_bit(n)];
        }
    if (s->tables16) unit = quantize_tables(s->lut, s->lut16, bytes);
    const float *bias = m->head_b;
    float two = 2.0f * unit;  /* a power of two: sum * two is exact, however the compiler fuses what follows */
    #pragma omp parallel for schedule(static)
    for (int b = 0; b < blocks; b++) {
        const uint8_t *block = m->codes + (int64_t)b * bytes * 32;
        float *logits = s->logits + 32 * b;
#if X86
        for (int k = 0; k < 32 * bytes; k += 64) _mm_prefetch((const char *)block + 64 * bytes + k, _MM_HINT_T0);
#endif
        if (s->tables16) sums_i16(block, bytes, s->lut16, logits);
        else sums_f32(block, bytes, s->lut, logits);
        int end = 32 * b + 32 < V ? 32 * b + 32 : V;
        for (int i = 32 * b; i < end; i++) s->logits[i] = s->logits[i] * two - total + bias[i];  /* 2 sum - total + b */
    }
}

/* Layer l for rows positions at x (rows <= MAX_ROWS), the first at position pos; wide, remade: attention's. */
static void layer_rows(const Model *m, State *s, int l, float *x, int pos, int rows, int wide, int remade) {
    const Config *c = &m->c;
    const Layer *L = &m->layers[l];
    int C = c->n_embd;
    // attention layernorm, then q, k, v for every row at once (one ternary matrix product)
    #pragma omp parallel for if (rows > 1)  /* a prompt's rows side by side (one thread would leave the others waiting) */
    for (int r = 0; r < rows; r++) layernorm(s->h + (int64_t)r * C, x + (int64_t)r * C, L->ln1_w, L->ln1_b, C);
    run_ternary(&L->qkv, s->h, s->qkv, rows, s->qkv_sums, s->qkv_scale);
    // rotary positions, the keys and values into the cache, each row's heads over the cache
    attention(c, s, l, pos, rows, L->qkv.bias, wide, remade);
    // the output projection, then the residual connection back into x
    run_ternary(&L->proj, s->y, s->h, rows, NULL, NULL);
    for (int64_t j = 0; j < (int64_t)rows * C; j++) x[j] += s->h[j];
    // MLP layernorm, up, exact GELU (erf), down, and the residual connection
    #pragma omp parallel for if (rows > 1)
    for (int r = 0; r < rows; r++) layernorm(s->h + (int64_t)r * C, x + (int64_t)r * C, L->ln2_w, L->ln2_b, C);
    run_ternary(&L->fc, s->h, s->mlp, rows, NULL, NULL);
    gelu(s->mlp, (int64_t)rows * c->hidden);
    run_ternary(&L->down, s->mlp, s->h, rows, NULL, NULL);
    for (int64_t j = 0; j < (int64_t)rows * C; j++) x[j] += s->h[j];
}

/* The logits after rows new tokens (ids) at positions s->pos ..: the last row's, where logits is set.
   model.GPT.forward with a cache, a step at a time; x, h and the rest hold (rows, width) row after row.
   A prompt goes through each layer MAX_ROWS rows at a time before the next layer: the layer's weights
   are read from the cache for every run, not from memory, and a sums cache's keys are remade once. */
static void forward(const Model *m, State *s, const int *ids, int rows, int logits) {
    const Config *c = &m->c;
    int C = c->n_embd, wide = s->cache == CACHE_SUMS && rows > 1;
    // the input: each token's code (or table row) as its first activations
    for (int r = 0; r < rows; r++) embed(m, ids[r], s->x + (int64_t)r * C);
    for (int l = 0; l < c->n_layer; l++)  // forward all the layers
        for (int r = 0; r < rows; r += MAX_ROWS)  /* the first run remakes the positions cached before it too */
            layer_rows(m, s, l, s->x + (int64_t)r * C, s->pos + r, rows - r < MAX_ROWS ? rows - r : MAX_ROWS, wide,
                       r ? s->pos + r : 0);
    s->pos += rows;
    if (!logits) return;
    // the final layernorm of the last row, then the head: the code head, or a float16 matrix
    float *last = s->h;
    layernorm(last, s->x + (int64_t)(rows - 1) * C, m->lnf_w, m->lnf_b, C);
    if (c->head == CODES) code_logits(m, s, last);
    else half_matvec(last, c->head == TIED ? m->table : m->head_w, s->logits, C, c->vocab);
}
