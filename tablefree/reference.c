/* reference.c: a packed ternary tablefree GPT decoded in plain C, to read beside model.py.

   This is the decoder to learn from; run.c (with decode.c and kernel.c) is the one to run: it computes
   the same model with 2-bit rows read in place, int8 activations and VNNI sums, an int16 KV cache of the
   qkv product's integer sums, prompts a layer at a time and threads. Here every step is a plain loop over
   floats, in model.py's order, one position at a time, and each names the Python it mirrors.

   It reads the flat file run.c reads (tablefree/runtime.py writes it beside a packed export, as
   model.ternary.bin): every input kind (learned, binary, affine, kronecker, frozen) and head (untied,
   tied, the code head) run.c decodes, with a ternary body (BitNet b1.58). A float body has no flat file:
   run.c decodes none either (sample.py runs it in torch).

   Build: cc -O3 -o reference tablefree/reference.c -lm        (C99, no intrinsics, no OpenMP)
   Run:   reference model.bin --ids 15,42,7 [--max_new_tokens N] [--temperature T] [--seed S]
                    [--print_ids] [--logits FILE]
   The new tokens' bytes go to stdout (--print_ids: their ids, one a line); --logits FILE writes each
   step's logits (float32, V a step), as run.c's --logits does. An error is one line on stderr, exit 1. */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what, const char *detail) {
    fprintf(stderr, "reference: error: %s%s\n", what, detail ? detail : "");
    exit(1);
}

static void *alloc(size_t n) {  /* zeroed memory, or the one-line error */
    void *p = calloc(n ? n : 1, 1);
    if (!p) die("out of memory", NULL);
    return p;
}

// ----------------------------------------------------------------------------
// The file (tablefree/runtime.py): a 120-byte header with the config, a directory of named tensors
// (48-byte name, uint64 offset, uint64 bytes), then the tensors; a checksum over all of it.

enum { LEARNED, BINARY, AFFINE, KRONECKER, FROZEN };  /* model.INPUTS' order */
enum { UNTIED, TIED, CODES };                          /* runtime.HEAD_KINDS' order */

typedef struct {  /* runtime.config_fields: GPTConfig as 13 int32, then rope_base */
    int32_t n_layer, n_head, n_embd, hidden, vocab, block_size;
    int32_t input, head, bits;     /* bits: binary, affine: K; frozen: D */
    int32_t interleave, pm1, pos_dim, bias;
    float rope_base;
} Config;

typedef struct {
    Config c;
    uint8_t *data;     /* the whole file, read into memory */
    uint64_t size;
    int n_entries;
} File;

static uint64_t u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static void read_file(File *f, const char *path) {
    FILE *in = fopen(path, "rb");
    if (!in) die("cannot open ", path);
    fseek(in, 0, SEEK_END);
    long size = ftell(in);
    fseek(in, 0, SEEK_SET);
    if (size < 120 || size % 8) die("not a runtime file (too short, or not whole 8-byte words): ", path);
    f->size = (uint64_t)size;
    f->data = alloc(f->size);
    if (fread(f->data, 1, f->size, in) != f->size) die("cannot read ", path);
    fclose(in);
    if (memcmp(f->data, "TFRUN\0\0\0", 8) != 0) die("not a runtime file (no TFRUN magic): ", path);
    int32_t version;
    memcpy(&version, f->data + 8, 4);
    if (version != 3) die("a runtime file of another version; write it again: ", path);
    /* runtime.checksum: sum of word_i (2 i + 1) mod 2^64, the checksum's own word (at byte 80) as 0 */
    uint64_t sum = 0, saved = u64(f->data + 80);
    for (uint64_t i = 0; i < f->size / 8; i++) sum += (i == 10 ? 0 : u64(f->data + 8 * i)) * (2 * i + 1);
    if (sum != saved) die("the runtime file is damaged (its checksum differs); delete it, and sample.py --engine c "
                          "writes it again from its .ternary.pt: ", path);
    memcpy(&f->c, f->data + 16, sizeof(Config));
    memcpy(&f->n_entries, f->data + 88, 4);  /* after the payload (72) and the checksum (80) */
    if (f->n_entries < 0 || 120 + 64 * (uint64_t)f->n_entries > f->size) die("a damaged directory in ", path);
}

static void *tensor(const File *f, const char *name, uint64_t bytes) {  /* the named tensor, of bytes bytes */
    for (int i = 0; i < f->n_entries; i++) {
        const uint8_t *entry = f->data + 120 + 64 * i;
        if (strncmp((const char *)entry, name, 48) != 0) continue;
        uint64_t offset = u64(entry + 48), size = u64(entry + 56);
        if (size != bytes || offset > f->size || size > f->size - offset) die("a tensor of the wrong size: ", name);
        return f->data + offset;
    }
    die("the runtime file has no tensor ", name);
    return NULL;
}

// ----------------------------------------------------------------------------
// The model's tensors, in model.GPT's names

typedef struct {  /* a BitLinear: 2-bit weights in kernel.repack's layout, gamma, the optional bias */
    const uint8_t *w;
    float gamma;
    const float *bias;
    int in, padded, out;  /* padded: in rounded up to 128 */
} Ternary;

typedef struct {
    const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;  /* the biases NULL without config.bias */
    Ternary qkv, proj, fc, down;                  /* attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj */
} Layer;

typedef struct {
    Config c;
    Layer *layers;
    const float *lnf_w, *lnf_b;
    const uint16_t *table;        /* learned, tied: wte.weight (V, n_embd) float16 */
    const uint8_t *A, *b;         /* affine: A (K, K) and b (K), 0/1 */
    const uint8_t *codes;         /* frozen: its D bits a token, in blocks of 32 tokens (runtime.blocked) */
    const uint16_t *cells;        /* kronecker: the projection W^T (256 pos_dim, n_embd) float16 */
    const uint8_t *token_bytes;   /* kronecker: (V, pos_dim) */
    const int32_t *lengths;       /* kronecker: (V) */
    const uint16_t *head_w;       /* untied: lm_head.weight (V, n_embd); codes: lm_head.proj (D, n_embd) */
    const float *head_b;          /* codes: lm_head.bias (V) */
    const uint32_t *tok_offsets;  /* token t's bytes: tok_bytes[tok_offsets[t] .. tok_offsets[t + 1]] */
    const uint8_t *tok_bytes;
} Model;

static Ternary ternary(const File *f, const char *layer, int in, int out) {
    char name[64];
    Ternary t = {.in = in, .padded = (in + 127) / 128 * 128, .out = out};
    snprintf(name, sizeof name, "%s.w", layer), t.w = tensor(f, name, (uint64_t)out * t.padded / 4);
    snprintf(name, sizeof name, "%s.gamma", layer), t.gamma = *(const float *)tensor(f, name, 4);
    snprintf(name, sizeof name, "%s.bias", layer), t.bias = f->c.bias ? tensor(f, name, 4ull * out) : NULL;
    return t;
}

static void load(Model *m, const File *f) {
    Config c = m->c = f->c;
    int C = c.n_embd, V = c.vocab, K = c.bits;
    if (c.n_layer < 1 || C < 2 || c.n_head < 1 || C % c.n_head || (C / c.n_head) % 2 || V < 2 || c.hidden < 1 ||
        c.block_size < 1 || c.input < LEARNED || c.input > FROZEN || c.head < UNTIED || c.head > CODES ||
        ((c.input == BINARY || c.input == AFFINE) && (K < 1 || K > 62)) || (c.input == FROZEN && K < 1) ||
        (c.input == KRONECKER && (c.pos_dim < 1 || c.pos_dim > 256)) || (c.head == CODES && c.input != FROZEN))
        die("the runtime file's config is not one this decoder reads", NULL);
    int need = 1;  /* ceil(log2 V): a shorter K would give two ids one code (codes.code_bits) */
    while ((1ll << need) < V) need++;
    if (((c.input == BINARY || c.input == AFFINE) && K < need) || (c.input == FROZEN && (K > C || K > V - 1)))
        die("the runtime file's config gives a code whose bits do not fit its vocabulary and width", NULL);
    uint64_t nC = 4ull * C;
    m->layers = alloc(sizeof(Layer) * c.n_layer);
    for (int l = 0; l < c.n_layer; l++) {
        char name[64];
        Layer *L = &m->layers[l];
        snprintf(name, sizeof name, "h.%d.ln_1.weight", l), L->ln1_w = tensor(f, name, nC);
        snprintf(name, sizeof name, "h.%d.ln_2.weight", l), L->ln2_w = tensor(f, name, nC);
        snprintf(name, sizeof name, "h.%d.ln_1.bias", l), L->ln1_b = c.bias ? tensor(f, name, nC) : NULL;
        snprintf(name, sizeof name, "h.%d.ln_2.bias", l), L->ln2_b = c.bias ? tensor(f, name, nC) : NULL;
        snprintf(name, sizeof name, "h.%d.attn.c_attn", l), L->qkv = ternary(f, name, C, 3 * C);
        snprintf(name, sizeof name, "h.%d.attn.c_proj", l), L->proj = ternary(f, name, C, C);
        snprintf(name, sizeof name, "h.%d.mlp.c_fc", l), L->fc = ternary(f, name, C, c.hidden);
        snprintf(name, sizeof name, "h.%d.mlp.c_proj", l), L->down = ternary(f, name, c.hidden, C);
    }
    m->lnf_w = tensor(f, "ln_f.weight", nC);
    m->lnf_b = c.bias ? tensor(f, "ln_f.bias", nC) : NULL;
    if (c.input == LEARNED || c.head == TIED) m->table = tensor(f, "input.table", 2ull * V * C);
    if (c.input == AFFINE) m->A = tensor(f, "input.A", (uint64_t)K * K), m->b = tensor(f, "input.b", K);
    if (c.input == FROZEN) m->codes = tensor(f, "input.codes", (uint64_t)(V + 31) / 32 * 32 * ((K + 7) / 8));
    if (c.input == KRONECKER) {
        m->cells = tensor(f, "input.cells", 2ull * 256 * c.pos_dim * C);
        m->token_bytes = tensor(f, "input.bytes", (uint64_t)V * c.pos_dim);
        m->lengths = tensor(f, "input.lengths", 4ull * V);
        for (int t = 0; t < V; t++)
            if (m->lengths[t] < 0 || m->lengths[t] > c.pos_dim) die("the runtime file's token lengths are damaged", NULL);
    }
    if (c.head == UNTIED) m->head_w = tensor(f, "head.weight", 2ull * V * C);
    if (c.head == CODES) m->head_w = tensor(f, "head.proj", 2ull * K * C), m->head_b = tensor(f, "head.bias", 4ull * V);
    m->tok_offsets = tensor(f, "tokens.offsets", 4ull * (V + 1));
    for (int t = 0; t < V; t++)
        if (m->tok_offsets[t + 1] < m->tok_offsets[t]) die("the runtime file's token table is damaged", NULL);
    m->tok_bytes = tensor(f, "tokens.bytes", m->tok_offsets[V]);
}

// ----------------------------------------------------------------------------
// The arithmetic: float16, LayerNorm, BitNet's ternary Linear, GELU

static float half_to_float(uint16_t h) {  /* IEEE float16 -> float32, exactly */
    int sign = h >> 15, e = (h >> 10) & 31, m = h & 0x3ff;
    float f = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 0x400), e - 25);
    return sign ? -f : f;
}

/* nn.LayerNorm(n, eps=1e-5): (x - mean) / sqrt(var + eps) w + b, var the biased variance */
static void layernorm(float *out, const float *x, const float *w, const float *b, int n) {
    float mean = 0, var = 0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    float inv = 1.0f / sqrtf(var / n + 1e-5f);
    for (int i = 0; i < n; i++) out[i] = (x[i] - mean) * inv * w[i] + (b ? b[i] : 0.0f);
}

/* model.BitLinear (BitNet b1.58) on one row: s = 127 / max |x| (absmax_int8), x_q = round(x s) clamped to
   [-128, 127]; y = (x_q . W_t) gamma / s + bias, W_t in {-1, 0, 1}. Weight o, input i is 2 bits: input i
   lies in block i / 128, and its byte o's (i % 32) of that block's 32, shifted 2 (i % 128 / 32) (kernel.repack:
   the code W_t + 1). */
static void bitlinear(const Ternary *t, const float *x, float *y) {
    float largest = 1e-5f;  /* the clamp of absmax_int8 */
    for (int i = 0; i < t->in; i++) largest = fmaxf(largest, fabsf(x[i]));
    float s = (1.0f / largest) * 127.0f;  /* torch: 127 / m as m.reciprocal() * 127 */
    int q[t->in];  /* x_q; nearbyintf rounds half to even, as torch.round */
    for (int i = 0; i < t->in; i++) q[i] = (int)fminf(fmaxf(nearbyintf(x[i] * s), -128.0f), 127.0f);
    for (int o = 0; o < t->out; o++) {
        const uint8_t *row = t->w + (int64_t)o * t->padded / 4;
        int32_t sum = 0;  /* x_q . W_t: integers, exact */
        for (int i = 0; i < t->in; i++) {
            int code = (row[i / 128 * 32 + i % 32] >> (2 * (i % 128 / 32))) & 3;
            sum += q[i] * (code - 1);
        }
        y[o] = (float)sum * (t->gamma / s) + (t->bias ? t->bias[o] : 0.0f);
    }
}

/* y (rows) = W x for a float16 matrix W (rows, n): the untied or tied head, the code head's projection */
static void half_matvec(const uint16_t *W, const float *x, float *y, int n, int rows) {
    for (int r = 0; r < rows; r++) {
        float sum = 0;
        for (int i = 0; i < n; i++) sum += half_to_float(W[(int64_t)r * n + i]) * x[i];
        y[r] = sum;
    }
}

static float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }  /* F.gelu: exact */

// ----------------------------------------------------------------------------
// The input: what token t enters the blocks as (model.py's inputs, codes.py's codes)

static void embed(const Model *m, int t, float *x) {
    const Config *c = &m->c;
    int C = c->n_embd, K = c->bits;
    if (c->input == LEARNED) {  /* nn.Embedding: row t of the table */
        for (int j = 0; j < C; j++) x[j] = half_to_float(m->table[(int64_t)t * C + j]);
        return;
    }
    if (c->input == KRONECKER) {  /* KroneckerInput: x = W kappa(t), kappa z-normalised (codes.kronecker_values) */
        int L = m->lengths[t], D = 256 * c->pos_dim;
        float s = 1.0f / sqrtf((float)(L > 1 ? L : 1)), mean = L * s / D;  /* L cells hold s before z() */
        float std = sqrtf((L * (s - mean) * (s - mean) + (D - L) * mean * mean) / (D - 1)) + 1e-6f;
        for (int j = 0; j < C; j++) x[j] = 0;
        for (int d = 0; d < D; d++) {  /* cell d = 256-byte value b at position p: d = b pos_dim + p */
            int b = d / c->pos_dim, p = d % c->pos_dim;
            int hot = p < L && m->token_bytes[(int64_t)t * c->pos_dim + p] == b;
            float kappa = ((hot ? s : 0.0f) - mean) / std;
            for (int j = 0; j < C; j++) x[j] += kappa * half_to_float(m->cells[(int64_t)d * C + j]);
        }
        return;
    }
    uint8_t code[4096];  /* the token's K (or D) bits, most significant first */
    if (K > 4096) die("a code of more than 4,096 bits", NULL);
    for (int j = 0; j < K; j++) {
        if (c->input == BINARY) code[j] = (t >> (K - 1 - j)) & 1;  /* codes.binary_code */
        else if (c->input == AFFINE) {  /* codes.affine_code: c' = A c XOR b over GF(2) */
            int bit = m->b[j];
            for (int i = 0; i < K; i++) bit ^= m->A[j * K + i] & ((t >> (K - 1 - i)) & 1);
            code[j] = (uint8_t)bit;
        } else {  /* frozen: bit j of row t, bytes of 32 tokens side by side (runtime.blocked) */
            int bytes = (K + 7) / 8;
            code[j] = (m->codes[((int64_t)(t / 32) * bytes + j / 8) * 32 + t % 32] >> (7 - j % 8)) & 1;
        }
    }
    for (int j = 0; j < C; j++) {  /* codes.lift_index: tile (x_j = c_{j mod K}) or interleave; code_values */
        int bit = code[c->interleave ? (int)((int64_t)j * K / C) : j % K];
        x[j] = c->pm1 ? 2.0f * bit - 1.0f : (float)bit;
    }
}

// ----------------------------------------------------------------------------
// The forward pass: model.GPT.forward for one new position, with a float32 KV cache

typedef struct {
    float *x, *h, *qkv, *att, *y, *mlp, *z, *logits;  /* one position's activations */
    float *k, *v;        /* the cache: (n_layer, block_size, n_embd) each */
    float *cos, *sin;    /* model.Rotary: (block_size, hs / 2) */
} State;

static void new_state(State *s, const Config *c) {
    int C = c->n_embd, hs = C / c->n_head;
    s->x = alloc(4ull * C), s->h = alloc(4ull * C), s->qkv = alloc(12ull * C), s->y = alloc(4ull * C);
    s->att = alloc(4ull * c->block_size), s->mlp = alloc(4ull * c->hidden);
    s->z = alloc(4ull * (c->bits > 0 ? c->bits : 1)), s->logits = alloc(4ull * c->vocab);
    s->k = alloc(4ull * c->n_layer * c->block_size * C), s->v = alloc(4ull * c->n_layer * c->block_size * C);
    s->cos = alloc(2ull * c->block_size * hs), s->sin = alloc(2ull * c->block_size * hs);
    for (int p = 0; p < c->block_size; p++)  /* theta_i = base^(-2i / hs): RoFormer's, as Rotary computes it */
        for (int i = 0; i < hs / 2; i++) {
            float angle = (float)p * powf(c->rope_base, -(float)(2 * i) / hs);
            s->cos[p * hs / 2 + i] = cosf(angle), s->sin[p * hs / 2 + i] = sinf(angle);
        }
}

/* model.apply_rotary: dimension i of a head turns with i + hs / 2 by its position's angle */
static void rotate(float *r, const float *cos, const float *sin, int hs) {
    for (int i = 0; i < hs / 2; i++) {
        float a = r[i], b = r[i + hs / 2];
        r[i] = a * cos[i] - b * sin[i], r[i + hs / 2] = a * sin[i] + b * cos[i];
    }
}

/* the logits (s->logits, V) after token at position pos */
static void forward(const Model *m, State *s, int token, int pos) {
    const Config *c = &m->c;
    int C = c->n_embd, nh = c->n_head, hs = C / nh;
    embed(m, token, s->x);  // x = self.wte(idx): the fixed code (or the table's row)
    for (int l = 0; l < c->n_layer; l++) {  // for block in self.h: x = block(x)
        const Layer *L = &m->layers[l];
        float *keys = s->k + (int64_t)l * c->block_size * C, *values = s->v + (int64_t)l * c->block_size * C;
        // Block: x = x + self.attn(self.ln_1(x))
        layernorm(s->h, s->x, L->ln1_w, L->ln1_b, C);
        bitlinear(&L->qkv, s->h, s->qkv);  // qkv = self.c_attn(x): q, k, v side by side, heads within each
        for (int h = 0; h < nh; h++) {  // q, k = apply_rotary(qkv[:2], rope)
            rotate(s->qkv + h * hs, s->cos + pos * hs / 2, s->sin + pos * hs / 2, hs);
            rotate(s->qkv + C + h * hs, s->cos + pos * hs / 2, s->sin + pos * hs / 2, hs);
        }
        memcpy(keys + (int64_t)pos * C, s->qkv + C, 4ull * C);  // the cache keeps this position's k and v
        memcpy(values + (int64_t)pos * C, s->qkv + 2 * C, 4ull * C);
        for (int h = 0; h < nh; h++) {  // F.scaled_dot_product_attention(q, k, v, is_causal=True)
            const float *q = s->qkv + h * hs;
            float top = -INFINITY, total = 0;
            for (int t = 0; t <= pos; t++) {  // softmax(q . k_t / sqrt(hs)) over positions 0 .. pos
                float score = 0;
                for (int i = 0; i < hs; i++) score += q[i] * keys[(int64_t)t * C + h * hs + i];
                s->att[t] = score / sqrtf((float)hs);
                top = fmaxf(top, s->att[t]);
            }
            for (int t = 0; t <= pos; t++) total += (s->att[t] = expf(s->att[t] - top));
            for (int i = 0; i < hs; i++) {  // y = att @ v, head by head back side by side
                float sum = 0;
                for (int t = 0; t <= pos; t++) sum += s->att[t] * values[(int64_t)t * C + h * hs + i];
                s->y[h * hs + i] = sum / total;
            }
        }
        bitlinear(&L->proj, s->y, s->h);  // self.c_proj(y)
        for (int j = 0; j < C; j++) s->x[j] += s->h[j];
        // Block: x = x + self.mlp(self.ln_2(x)); MLP: c_proj(gelu(c_fc(x)))
        layernorm(s->h, s->x, L->ln2_w, L->ln2_b, C);
        bitlinear(&L->fc, s->h, s->mlp);
        for (int j = 0; j < c->hidden; j++) s->mlp[j] = gelu(s->mlp[j]);
        bitlinear(&L->down, s->mlp, s->h);
        for (int j = 0; j < C; j++) s->x[j] += s->h[j];
    }
    layernorm(s->h, s->x, m->lnf_w, m->lnf_b, C);  // x = self.ln_f(x)
    if (c->head == CODES) {  // CodeHead: z = W x / sqrt(D); logit(t) = z . (2 c(t) - 1) + b(t)
        int D = c->bits, bytes = D / 8;
        half_matvec(m->head_w, s->h, s->z, C, D);
        for (int j = 0; j < D; j++) s->z[j] /= sqrtf((float)D);
        for (int t = 0; t < c->vocab; t++) {
            float sum = 0;
            for (int j = 0; j < D; j++) {
                int bit = (m->codes[((int64_t)(t / 32) * bytes + j / 8) * 32 + t % 32] >> (7 - j % 8)) & 1;
                sum += bit ? s->z[j] : -s->z[j];
            }
            s->logits[t] = sum + m->head_b[t];
        }
    } else  // self.lm_head(x): the untied head, or the tied table
        half_matvec(c->head == TIED ? m->table : m->head_w, s->h, s->logits, C, c->vocab);
}

// ----------------------------------------------------------------------------
// Choosing the next token: the argmax at temperature 0, else a draw from softmax(logits / T)

static uint64_t rng_state;
static float uniform(void) {  /* xorshift64*: a float in [0, 1) */
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (float)((rng_state * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f;
}

static int choose(const float *logits, int V, float temperature) {
    int best = 0;
    for (int t = 1; t < V; t++)
        if (logits[t] > logits[best]) best = t;
    if (temperature == 0.0f) return best;
    double total = 0, *p = alloc(sizeof(double) * V);
    for (int t = 0; t < V; t++) total += (p[t] = exp((double)(logits[t] - logits[best]) / temperature));
    double r = uniform() * total;
    int t = 0;
    for (; t < V - 1 && (r -= p[t]) > 0; t++) {}
    free(p);
    return t;
}

// ----------------------------------------------------------------------------
// main: the flags, the prompt, then one position at a time

static long number(const char *text, const char *flag, long low, long high) {
    char *end;
    long v = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < low || v > high) die("a whole number out of range for ", flag);
    return v;
}

int main(int argc, char **argv) {
    if (argc < 2) die("usage: reference model.bin --ids 15,42,7 [--max_new_tokens N] [--temperature T] "
                      "[--seed S] [--print_ids] [--logits FILE]", NULL);
    const char *ids_text = NULL, *logits_path = NULL;
    long max_new = 256;
    float temperature = 0.0f;
    int print_ids = 0;
    rng_state = 1337;
    for (int i = 2; i < argc; i++) {
        int more = i + 1 < argc;
        if (!strcmp(argv[i], "--print_ids")) print_ids = 1;
        else if (!strcmp(argv[i], "--ids") && more) ids_text = argv[++i];
        else if (!strcmp(argv[i], "--logits") && more) logits_path = argv[++i];
        else if (!strcmp(argv[i], "--max_new_tokens") && more) max_new = number(argv[++i], "--max_new_tokens", 1, 1 << 24);
        else if (!strcmp(argv[i], "--seed") && more) rng_state = (uint64_t)number(argv[++i], "--seed", 1, 1L << 62);
        else if (!strcmp(argv[i], "--temperature") && more) {
            char *end;
            temperature = strtof(argv[++i], &end);
            if (*end != '\0' || !(temperature >= 0.0f) || isinf(temperature)) die("--temperature must be a finite number >= 0", NULL);
        } else die("unknown flag or a flag without its value: ", argv[i]);
    }
    File f;
    Model m;
    State s;
    read_file(&f, argv[1]);
    load(&m, &f);
    const Config *c = &m.c;
    if (!ids_text) die("give the prompt's token ids: --ids 15,42,7", NULL);
    int *ids = alloc(sizeof(int) * c->block_size), n = 0;
    for (const char *p = ids_text; *p;) {  /* comma-separated ids, each below V */
        char *end;
        long id = strtol(p, &end, 10);
        if (end == p || id < 0 || id >= c->vocab || n == c->block_size || (*end && *end != ',')) die("bad --ids: ", ids_text);
        ids[n++] = (int)id;
        p = *end ? end + 1 : end;
    }
    if (n == 0) die("give at least one prompt id", NULL);
    if (n + max_new > c->block_size) max_new = c->block_size - n;  /* the model sees at most block_size */
    FILE *logits_out = logits_path ? fopen(logits_path, "wb") : NULL;
    if (logits_path && !logits_out) die("cannot write ", logits_path);
    new_state(&s, c);
    for (int pos = 0; pos < n - 1; pos++) forward(&m, &s, ids[pos], pos);  // the prompt, position by position
    int token = ids[n - 1];
    for (long step = 0; step < max_new; step++) {
        forward(&m, &s, token, n - 1 + (int)step);
        if (logits_out && fwrite(s.logits, 4, c->vocab, logits_out) != (size_t)c->vocab) die("cannot write ", logits_path);
        token = choose(s.logits, c->vocab, temperature);
        if (print_ids) printf("%d\n", token);
        else fwrite(m.tok_bytes + m.tok_offsets[token], 1, m.tok_offsets[token + 1] - m.tok_offsets[token], stdout);
        fflush(stdout);
    }
    if (logits_out) fclose(logits_out);
    return 0;
}
