/* decode.c: positions through the model, for tablefree/run.c (which includes this file after reading
   the model from its file). forward() takes a run of new positions at once: a prompt is n rows through
   every Linear together (the weights read once for all of them), a decoding step is one row; only
   the last row's logits are made, since only they choose the next token. The KV cache holds
   float32, or float16 (--kv_cache f16: half the bytes each step reads, keys and values rounded once).
   Every loop over the vocabulary or the weights is split across the threads; no result depends on
   how many there are (each row, head and block of tokens is summed by one thread in one order). */

#define MAX_ROWS 64  /* a prompt goes through in runs of up to this many positions */

typedef struct {  /* the activations of up to MAX_ROWS positions, and the cache of every position so far */
    float *x, *h, *y;          /* (rows, n_embd) */
    float *qkv, *mlp;          /* (rows, 3 n_embd), (rows, hidden) */
    float *att;                /* (rows, n_head, positions): each query's scores */
    float *z, *logits, *lut;   /* the code head's projection (D), the logits (V padded to 32), its tables */
    int16_t *lut16;            /* its tables in int16 (--head_tables i16: sums_i16), and whether they are used */
    int tables16;
    void *k_cache, *v_cache;   /* (n_layer, n_head, positions, head_dim): keys after the rotation, values */
    int half;                  /* the cache in float16 */
    float *cos, *sin;          /* (positions, head_dim / 2) */
    int positions, pos;
} State;

static void new_state(State *s, const Config *c, int positions, int half, int tables16) {
    int C = c->n_embd, hs = C / c->n_head, R = MAX_ROWS;
    size_t cache = (size_t)c->n_layer * positions * C * (half ? 2 : 4);
    s->positions = positions, s->pos = 0, s->half = half, s->tables16 = tables16;
    s->x = xcalloc((size_t)R * C, 4), s->h = xcalloc((size_t)R * C, 4), s->y = xcalloc((size_t)R * C, 4);
    s->qkv = xcalloc((size_t)R * 3 * C, 4), s->mlp = xcalloc((size_t)R * c->hidden, 4);
    s->att = xcalloc((size_t)R * c->n_head * positions, 4);
    s->z = xcalloc(c->bits + 8, 4), s->logits = xcalloc((c->vocab + 31) / 32 * 32, 4);
    s->lut = xcalloc((size_t)(c->bits / 8 + 1) * 32, 4), s->lut16 = xcalloc((size_t)(c->bits / 8 + 1) * 32, 2);
    s->k_cache = xcalloc(cache, 1), s->v_cache = xcalloc(cache, 1);
    s->cos = xcalloc((size_t)positions * hs / 2, 4), s->sin = xcalloc((size_t)positions * hs / 2, 4);
    for (int p = 0; p < positions; p++)  /* model.Rotary: theta_i = base^(-2i / hs), in float32 */
        for (int i = 0; i < hs / 2; i++) {
            float inv_freq = powf(c->rope_base, -(float)(2 * i) / (float)hs), angle = (float)p * inv_freq;
            s->cos[p * hs / 2 + i] = cosf(angle), s->sin[p * hs / 2 + i] = sinf(angle);
        }
}

static void layernorm(float *out, const float *x, const float *w, const float *b, int n) {
    float mean = 0, var = 0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    float inv = 1.0f / sqrtf(var / n + 1e-5f);
    for (int i = 0; i < n; i++) out[i] = (x[i] - mean) * inv * w[i] + (b ? b[i] : 0.0f);
}

static void run_ternary(const Ternary *t, const float *x, float *y, int rows) {
    ternary_linear(x, t->w, t->gamma, y, rows, t->in, t->padded, t->out);
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

/* n float32 values into the cache at element `at`, as float32 or float16 (rounded to nearest). */
static void store(void *cache, int64_t at, const float *v, int n, int half) {
    if (!half) {
        memcpy((float *)cache + at, v, 4 * (size_t)n);
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

/* One query (hs) of one head against its cached positions 0 .. T - 1 (rows of hs, one after another),
   float32 or float16 (kind): y (hs) = softmax(q . k_t / sqrt(hs)) v. x86: eight dimensions a step. */
INLINE void attend(const float *q, const void *kc, const void *vc, float *att, float *y, int T, int hs, int kind) {
    float top = -INFINITY, total = 0, scale = 1.0f / sqrtf((float)hs);
    int whole = X86 ? hs / 8 * 8 : 0;  /* the dimensions the x86 path takes; the plain loops the rest */
    for (int t = 0; t < T; t++) {
        int64_t at = (int64_t)t * hs;
        float score = 0.0f;
#if X86
        __m256 acc = _mm256_setzero_ps();
        for (int i = 0; i < whole; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(kc, at + i, kind), acc);
        score = hsum8(acc);
#endif
        for (int i = whole; i < hs; i++) score += q[i] * weight(kc, at + i, kind);
        att[t] = score * scale, top = fmaxf(top, att[t]);
    }
    for (int t = 0; t < T; t++) att[t] = expf(att[t] - top), total += att[t];
    memset(y, 0, 4 * (size_t)hs);
    for (int t = 0; t < T; t++) {  /* along each cached value's row: contiguous */
        int64_t at = (int64_t)t * hs;
#if X86
        __m256 a = _mm256_set1_ps(att[t]);
        for (int i = 0; i < whole; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, load8(vc, at + i, kind), _mm256_loadu_ps(y + i)));
#endif
        for (int i = whole; i < hs; i++) y[i] += att[t] * weight(vc, at + i, kind);
    }
    for (int i = 0; i < hs; i++) y[i] /= total;
}

/* Causal attention of rows new positions (s->pos ..) after their keys and values join the cache. */
static void attention(const Config *c, State *s, int layer, int rows) {
    int C = c->n_embd, nh = c->n_head, hs = C / nh;
    int64_t per_head = (int64_t)s->positions * hs, size = s->half ? 2 : 4;
    for (int r = 0; r < rows; r++) {
        float *q = s->qkv + (int64_t)r * 3 * C, *k = q + C, *v = q + 2 * C;
        const float *cos = s->cos + (s->pos + r) * hs / 2, *sin = s->sin + (s->pos + r) * hs / 2;
        for (int h = 0; h < nh; h++) {
            rotate(q + h * hs, cos, sin, hs), rotate(k + h * hs, cos, sin, hs);
            int64_t at = ((int64_t)layer * nh + h) * per_head + (int64_t)(s->pos + r) * hs;
            store(s->k_cache, at, k + h * hs, hs, s->half), store(s->v_cache, at, v + h * hs, hs, s->half);
        }
    }
    #pragma omp parallel for collapse(2) schedule(static)
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < nh; h++) {  /* the rows and heads side by side, each with its own row of scores */
            const float *q = s->qkv + (int64_t)r * 3 * C + h * hs;
            float *att = s->att + ((int64_t)r * nh + h) * s->positions, *y = s->y + (int64_t)r * C + h * hs;
            int64_t at = ((int64_t)layer * nh + h) * per_head * size;
            const char *kc = (const char *)s->k_cache + at, *vc = (const char *)s->v_cache + at;
            if (s->half) attend(q, kc, vc, att, y, s->pos + r + 1, hs, F16);
            else attend(q, kc, vc, att, y, s->pos + r + 1, hs, F32);
        }
}

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
    for (int k = 0; k < 2; k++) {  /* tokens 16 k .. 16 k + 15, widened to int32, then float */
        __m512i sum = _mm512_add_epi32(_mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(high, k)),
                                       _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(low, k)));
        _mm512_storeu_ps(out + 16 * k, _mm512_cvtepi32_ps(sum));
    }
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

/* The logits after rows new tokens (ids) at positions s->pos ..: the last row's, where logits is set.
   model.GPT.forward with a cache, a step at a time; x, h and the rest hold (rows, width) row after row. */
static void forward(const Model *m, State *s, const int *ids, int rows, int logits) {
    const Config *c = &m->c;
    int C = c->n_embd, H = c->hidden;
    const float sqrt_half = 0.70710678118654752f;  /* 1 / sqrt(2), for the exact GELU */
    // the input: each token's code (or table row) as its first activations
    for (int r = 0; r < rows; r++) embed(m, ids[r], s->x + (int64_t)r * C);
    for (int l = 0; l < c->n_layer; l++) {  // forward all the layers
        const Layer *L = &m->layers[l];
        // attention layernorm, then q, k, v for every row at once (one ternary matrix product)
        for (int r = 0; r < rows; r++) layernorm(s->h + (int64_t)r * C, s->x + (int64_t)r * C, L->ln1_w, L->ln1_b, C);
        run_ternary(&L->qkv, s->h, s->qkv, rows);
        // rotary positions, the keys and values into the cache, each row's heads over the cache
        attention(c, s, l, rows);
        // the output projection, then the residual connection back into x
        run_ternary(&L->proj, s->y, s->h, rows);
        for (int64_t j = 0; j < (int64_t)rows * C; j++) s->x[j] += s->h[j];
        // MLP layernorm, up, exact GELU (erf), down, and the residual connection
        for (int r = 0; r < rows; r++) layernorm(s->h + (int64_t)r * C, s->x + (int64_t)r * C, L->ln2_w, L->ln2_b, C);
        run_ternary(&L->fc, s->h, s->mlp, rows);
        #pragma omp parallel for schedule(static)  /* erff is the costliest serial loop left */
        for (int64_t j = 0; j < (int64_t)rows * H; j++) s->mlp[j] = 0.5f * s->mlp[j] * (1.0f + erff(s->mlp[j] * sqrt_half));
        run_ternary(&L->down, s->mlp, s->h, rows);
        for (int64_t j = 0; j < (int64_t)rows * C; j++) s->x[j] += s->h[j];
    }
    s->pos += rows;
    if (!logits) return;
    // the final layernorm of the last row, then the head: the code head, or a float16 matrix
    float *last = s->h + (int64_t)(rows - 1) * C;
    layernorm(last, s->x + (int64_t)(rows - 1) * C, m->lnf_w, m->lnf_b, C);
    if (c->head == CODES) code_logits(m, s, last);
    else half_matvec(last, c->head == TIED ? m->table : m->head_w, s->logits, C, c->vocab);
}
