/* run.c: decode a packed ternary tablefree GPT without torch.

   The file is tablefree/runtime.py's flat copy of a packed export (tools/export.py): a header, a
   directory of named tensors, then their bytes, mapped into memory and read in place. What it computes
   is model.py's GPT with a ternary body (tablefree/ternary.py), with a KV cache (decode.c):

     input   binary / affine: the id's K bits (affine: A c XOR b), lifted to n_embd; frozen: its D bits,
             read from the bit table; kronecker: W kappa(bytes of t); learned: a float16 table row
     blocks  LayerNorm, ternary qkv (int8 activations x 2-bit weights: kernel.c), rotary, causal
             attention over the cache, ternary output; LayerNorm, ternary MLP with exact GELU
     head    untied or tied: a float16 matrix-vector product; codes: z = W ln_f(h) / sqrt(D), then
             logit(t) = z . c(t) + b(t) with c(t) = +-1 read as bits: 2 sum_{bit set} z - sum z,
             four bits at a time from 16-entry tables of partial sums (never a V x D float table);
             in int16 by default (the logits within about 1e-3 of their range; --head_tables f32 or --exact:
             float32, within 1e-4 of torch's)

   The prompt goes through one layer after another in runs of up to 64 positions (matrix products: each
   weight read once a run, a layer's from the cache), then one position a step. The KV cache keeps each
   key and value as the integer sums the qkv product made it from, in int16 (decode.c: the float32
   cache's numbers in half its bytes; --kv_cache f32, f16 or i8 instead). This file: the file format, the
   model's tensors, choosing tokens, the thread count (Pace) and the loop; decode.c: the model's
   arithmetic; kernel.c: the kernels.

   Build: cc -O3 -o run run.c -lm                      any C99 compiler, any CPU: the plain loops, one thread
          gcc -O3 -fopenmp -mavx2 -mfma -mf16c [-mavx512f -mavx512bw] -o run run.c -lm
                                                        x86 paths and every core (tablefree/runtime.py builds the
                                                        best the compiler and the CPU allow, at first use)
   Run:   run model.bin --ids 15,42,7 [--max_new_tokens N] [--temperature T] [--top_k K] [--top_p P]
              [--seed S] [--stop ID] [--kv_cache sums|f32|f16|i8] [--head_tables f32|i16] [--exact] [--logits FILE]
              [--print_ids]
   The new tokens' bytes go to stdout as they are chosen (--print_ids: their ids, one a line); one
   line of timing and memory to stderr at the end (the prompt's rate, then decoding's: the steps after
   it). Every error is one line on stderr, exit status 1: every number on the command line is parsed
   whole and bounded, and every size in the file is checked against the file (its checksum covers the
   header and the directory too) before anything is read. */

#if defined(__linux__)
#define _GNU_SOURCE  /* mmap, clock_gettime, and Linux's sched_setaffinity (pin_threads) */
#include <sched.h>
#else
#define _POSIX_C_SOURCE 200809L  /* mmap, clock_gettime: POSIX beside C99 */
#endif
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kernel.c"

/* What a damaged runtime file's error says to do: sample.py writes one wherever it is missing */
#define AGAIN "; delete it, and sample.py --engine c writes it again from its .ternary.pt"

static void die(const char *what, const char *detail) {
    fprintf(stderr, "run: error: %s%s\n", what, detail ? detail : "");
    exit(1);
}

// ----------------------------------------------------------------------------
// The file: "TFRUN" magic, version, the config, the directory, the tensors (64-byte aligned)

#define MAGIC "TFRUN\0\0\0"
#define VERSION 3      /* 3: codes in blocks of 32 tokens (2: of 8); since 2 the checksum covers the whole file */
enum { LEARNED, BINARY, AFFINE, KRONECKER, FROZEN };  /* input kinds, in model.INPUTS' order */
enum { UNTIED, TIED, CODES };                          /* head kinds, in runtime.HEAD_KINDS' order */
#define MAX_BITS 4096                                  /* K or D: a code's bits */
#define MAX_NEW (1 << 24)                              /* --max_new_tokens: the ids buffer stays under 64 MB */

typedef struct {  /* runtime.config_fields: 13 int32, then rope_base */
    int32_t n_layer, n_head, n_embd, hidden, vocab, block_size;
    int32_t input, head;     /* the kinds above */
    int32_t bits;            /* binary, affine: K; frozen: D; else 0 */
    int32_t interleave, pm1, pos_dim, bias;
    float rope_base;
} Config;

typedef struct {  /* the file's first 120 bytes: runtime.HEADER */
    char magic[8];
    int32_t version, unused;
    Config c;                 /* at byte 16 */
    uint64_t payload, sum;    /* the payload's bytes; the checksum (at byte 80: counted as zero) */
    int32_t n_entries;        /* the directory's length */
    char reserved[28];
} Header;
typedef char header_is_120_bytes[sizeof(Header) == 120 && offsetof(Header, sum) == 80 ? 1 : -1];  /* C99's static assert */

typedef struct {  /* one directory entry */
    char name[48];
    uint64_t offset, nbytes;
} Entry;

typedef struct {
    Config c;
    const uint8_t *data;  /* the mapped file */
    size_t size;
    const Entry *entries;
    int n_entries;
} File;

/* runtime.py's checksum: sum_i w_i (2 i + 1) mod 2^64 over the file's uint64 words, its own word as 0. */
static uint64_t checksum(const uint8_t *p, size_t n) {
    uint64_t h = 0, w;
    for (size_t i = 0; i < n / 8; i++) memcpy(&w, p + 8 * i, 8), h += w * (2 * i + 1);
    return h;
}

/* n zeroed elements at a 64-byte boundary (kernel.c's line_start says why); never freed: the model and
   the state live as long as the run. calloc's pages become resident only when written. */
static void *xcalloc(size_t n, size_t size) {
    if (size && n > (SIZE_MAX - 63) / size) die("out of memory", NULL);
    void *block = calloc(n * size + 63, 1);
    if (!block) die("out of memory", NULL);
    return line_start(block);
}

static void open_file(File *f, const char *path) {
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) die("cannot open ", path);
    f->size = st.st_size;
    if (f->size < 128) die("not a tablefree runtime file (too short): ", path);
    f->data = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->data == MAP_FAILED) die("cannot map ", path);
    Header h;
    memcpy(&h, f->data, sizeof h);
    if (memcmp(h.magic, MAGIC, 8)) die("not a tablefree runtime file (no TFRUN header): ", path);
    if (h.version != VERSION) die("a runtime file of another version; write it again from its .ternary.pt: ", path);
    f->c = h.c, f->n_entries = h.n_entries;
    if (f->n_entries < 1 || f->n_entries > 100000)
        die("the runtime file is damaged (its tensor count is out of range)" AGAIN ": ", path);
    size_t start = (sizeof h + (size_t)f->n_entries * sizeof(Entry) + 63) / 64 * 64;
    if (start > f->size || h.payload != f->size - start || f->size % 8)
        die("the runtime file is truncated or damaged (its size is not the one its header gives)" AGAIN ": ", path);
    uint64_t sum_word = offsetof(Header, sum) / 8;  /* its own word counted as zero */
    if (checksum(f->data, f->size) - h.sum * (2 * sum_word + 1) != h.sum)
        die("the runtime file's bytes are not the ones it was written with (checksum differs)" AGAIN ": ", path);
    f->entries = (const Entry *)(f->data + sizeof h);
    for (int i = 0; i < f->n_entries; i++) {  /* every tensor inside the payload, every name terminated */
        const Entry *e = &f->entries[i];
        if (!memchr(e->name, 0, sizeof e->name) || e->offset < start || e->nbytes > f->size ||
            e->offset > f->size - e->nbytes)
            die("the runtime file is damaged (a tensor lies outside it)" AGAIN ": ", path);
    }
}

/* The tensor called name, which must be nbytes long. */
static const void *tensor(const File *f, const char *name, uint64_t nbytes) {
    for (int i = 0; i < f->n_entries; i++) {
        if (strncmp(f->entries[i].name, name, sizeof(f->entries[i].name))) continue;
        if (f->entries[i].nbytes != nbytes)  /* open_file checked that it lies inside the file */
            die("the runtime file does not fit its config: wrong size of ", name);
        return f->data + f->entries[i].offset;
    }
    die("the runtime file lacks ", name);
    return NULL;
}

// ----------------------------------------------------------------------------
// The model: weights (pointers into the file) and the state of one decoding

typedef struct {  /* a ternary Linear: kernel.c's layout, one scale, a bias or NULL */
    const uint8_t *w;
    float gamma;
    const float *bias;
    int in, padded, out;
} Ternary;

typedef struct {
    const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    Ternary qkv, proj, fc, down;
} Layer;

typedef struct {
    Config c;
    Layer *layers;
    const float *lnf_w, *lnf_b;
    const uint16_t *table;        /* learned: (V, n_embd) float16; the tied head too */
    uint64_t *masks;              /* affine: row i of A as a K-bit mask (codes.affine_code) */
    const uint8_t *affine_b;      /* affine: b (K) */
    const uint8_t *codes;         /* frozen: (V / 32, D / 8, 32): each byte position of 32 tokens side by side */
    const uint16_t *cells;        /* kronecker: W^T (256 pos_dim, n_embd) float16 */
    float *cells_sum;             /* kronecker: the sum of its rows (n_embd) */
    const uint8_t *token_bytes;   /* kronecker: (V, pos_dim) */
    const int32_t *lengths;       /* kronecker: (V) */
    const uint16_t *head_w;       /* untied: (V, n_embd) float16; codes: the projection (D, n_embd) */
    const float *head_b;          /* codes: the bias (V) */
    const uint32_t *tok_offsets;  /* (V + 1): token t's bytes are tok_bytes[off[t] .. off[t + 1]] */
    const uint8_t *tok_bytes;
} Model;

static Ternary ternary(const File *f, const char *layer, int in, int out) {
    char name[48];
    Ternary t = {.in = in, .padded = (in + 127) / 128 * 128, .out = out};
    snprintf(name, sizeof name, "%s.w", layer);
    t.w = tensor(f, name, (uint64_t)out * t.padded / 4);
    snprintf(name, sizeof name, "%s.gamma", layer);
    t.gamma = *(const float *)tensor(f, name, 4);
    snprintf(name, sizeof name, "%s.bias", layer);
    t.bias = f->c.bias ? tensor(f, name, 4ull * out) : NULL;
    return t;
}

static void load_model(Model *m, const File *f) {
    Config c = m->c = f->c;
    int C = c.n_embd, V = c.vocab;
    /* the bounds keep every size below 2^62 and every index in an int: no product overflows */
    int id_bits = c.input == BINARY || c.input == AFFINE;  /* K bits of the id: 1 .. 62 (a uint64 mask) */
    if (c.n_layer < 1 || c.n_layer > 4096 || C < 8 || C > 65536 || C % 8 || c.n_head < 1 || C % c.n_head ||
        (C / c.n_head) % 2 || V < 2 || V > (1 << 26) || c.hidden < 8 || c.hidden > (1 << 20) || c.hidden % 8 ||
        c.block_size < 1 || c.block_size > (1 << 24) || c.input < LEARNED || c.input > FROZEN || c.head < UNTIED ||
        c.head > CODES || c.bits < 0 || c.bits > (id_bits ? 62 : MAX_BITS) || ((id_bits || c.input == FROZEN) && c.bits < 1) ||
        (c.input == KRONECKER && (c.pos_dim < 1 || c.pos_dim > 256)) || (unsigned)c.interleave > 1 ||
        (unsigned)c.pm1 > 1 || (unsigned)c.bias > 1 || !(c.rope_base > 0) || !isfinite(c.rope_base))
        die("the runtime file's config is not one this runtime decodes", NULL);
    int id_need = 1;  /* ceil(log2 V): the bits an id's code needs; a shorter K would give two ids one code */
    while ((1ll << id_need) < V) id_need++;
    if ((id_bits && c.bits < id_need) || (c.input == FROZEN && (c.bits > C || c.bits > V - 1)))
        die("the runtime file's config gives a code whose bits do not fit its vocabulary and width", NULL);
    uint64_t nC = 4ull * C;
    m->layers = xcalloc(c.n_layer, sizeof(Layer));
    for (int l = 0; l < c.n_layer; l++) {
        char name[48];
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
    int K = c.bits;
    if (c.input == LEARNED || c.head == TIED) m->table = tensor(f, "input.table", 2ull * V * C);
    if (c.input == AFFINE) {
        const uint8_t *A = tensor(f, "input.A", (uint64_t)K * K);
        m->affine_b = tensor(f, "input.b", K);
        m->masks = xcalloc(K, sizeof(uint64_t));
        for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++) m->masks[i] |= (uint64_t)A[i * K + j] << (K - 1 - j);
    }
    if (c.input == FROZEN) m->codes = tensor(f, "input.codes", (uint64_t)(V + 31) / 32 * 32 * ((K + 7) / 8));
    if (c.input == KRONECKER) {
        int D = 256 * c.pos_dim;
        m->cells = tensor(f, "input.cells", 2ull * D * C);
        m->token_bytes = tensor(f, "input.bytes", (uint64_t)V * c.pos_dim);
        m->lengths = tensor(f, "input.lengths", 4ull * V);
        for (int t = 0; t < V; t++)
            if (m->lengths[t] < 0 || m->lengths[t] > c.pos_dim)
                die("the runtime file's token lengths are damaged" AGAIN, NULL);
        m->cells_sum = xcalloc(C, sizeof(float));
        for (int d = 0; d < D; d++)
            for (int j = 0; j < C; j++) m->cells_sum[j] += half_to_float(m->cells[(int64_t)d * C + j]);
    }
    if (c.head == UNTIED) m->head_w = tensor(f, "head.weight", 2ull * V * C);
    if (c.head == CODES) {
        if (c.input != FROZEN || K % 8) die("the runtime file's code head needs frozen codes of whole bytes", NULL);
        m->head_w = tensor(f, "head.proj", 2ull * K * C);
        m->head_b = tensor(f, "head.bias", 4ull * V);
    }
    m->tok_offsets = tensor(f, "tokens.offsets", 4ull * (V + 1));
    for (int t = 0; t < V; t++)  /* each token's bytes inside tokens.bytes, which tensor() then sizes */
        if (m->tok_offsets[t + 1] < m->tok_offsets[t]) die("the runtime file's token table is damaged" AGAIN, NULL);
    if (m->tok_offsets[0]) die("the runtime file's token table is damaged" AGAIN, NULL);
    m->tok_bytes = tensor(f, "tokens.bytes", m->tok_offsets[V]);
}

#include "decode.c"

// ----------------------------------------------------------------------------
// Choosing the next token (model.py's choose: the same rules) and the decoding loop (GPT.generate's windows)

static uint64_t rng_state;
static float uniform(void) {  /* xorshift64*: a float in [0, 1) */
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (float)((rng_state * 2685821657736338717ULL) >> 40) / 16777216.0f;
}

typedef struct { float p; int id; } Prob;
static int by_probability(const void *a, const void *b) {
    float d = ((const Prob *)b)->p - ((const Prob *)a)->p;
    return d > 0 ? 1 : d < 0 ? -1 : ((const Prob *)a)->id - ((const Prob *)b)->id;
}

/* Heaps of Prob in by_probability's order (the likelier first, the lower id of equals): with likeliest
   set the likeliest is on top, else the least likely. Sorting all V (262,144 at the paper's vocabulary)
   for every token cost 30 ms a step; top-k and the nucleus need only their own few in order. */
static int comes_first(Prob a, Prob b) { return a.p > b.p || (a.p == b.p && a.id < b.id); }

static void sift_down(Prob *heap, int n, int i, int likeliest) {
    for (int c; (c = 2 * i + 1) < n; i = c) {
        if (c + 1 < n && comes_first(heap[c + 1], heap[c]) == likeliest) c++;  /* the child that belongs on top */
        if (comes_first(heap[c], heap[i]) != likeliest) return;
        Prob swap = heap[i];
        heap[i] = heap[c], heap[c] = swap;
    }
}

/* The k likeliest of work's n tokens to its front, in order: a heap of the k kept so far, the least
   likely on top, which a likelier token replaces. */
static void keep_likeliest(Prob *work, int n, int k) {
    for (int i = k / 2 - 1; i >= 0; i--) sift_down(work, k, i, 0);
    for (int t = k; t < n; t++)
        if (comes_first(work[t], work[0])) work[0] = work[t], sift_down(work, k, 0, 0);
    qsort(work, k, sizeof(Prob), by_probability);
}

/* The nucleus of work's n tokens: the likeliest, in order, while the mass before each is below share of
   total; a heap of all n, the likeliest on top, taken off one at a time into the back. Returns where the
   nucleus starts; *kept: its size. */
static Prob *take_nucleus(Prob *work, int n, float share, float total, int *kept) {
    for (int i = n / 2 - 1; i >= 0; i--) sift_down(work, n, i, 1);
    float before = 0;
    int m = 0;
    while (m < n && before / total < share) {  /* the m-th likeliest to work[n - 1 - m] */
        Prob top = work[0];
        work[0] = work[n - 1 - m], work[n - 1 - m] = top;
        sift_down(work, n - 1 - m, 0, 1);
        before += top.p, m++;
    }
    for (int i = 0; i < m / 2; i++) {  /* the likeliest first */
        Prob swap = work[n - m + i];
        work[n - m + i] = work[n - 1 - i], work[n - 1 - i] = swap;
    }
    *kept = m;
    return work + n - m;
}

/* The id of the largest logit (the lowest id of equals), or -1 if a logit is not finite: one pass,
   split across the threads. x86: a chunk of 64 at a time, its largest value and whether all are finite
   (x - x is 0 for a finite x, NaN for an infinite or NaN one) eight lanes at a time, then the chunk
   searched in order only where it beats the best so far (rarely, after the first chunks). */
static int argmax(const float *logits, int V) {
    int best = 0, bad = 0;
    #pragma omp parallel
    {
        int lo, hi, mine, t, mine_bad = 0;
        my_rows(V, &lo, &hi);
        mine = t = lo;
        float top = lo < hi ? logits[lo] : 0.0f;
#if X86
        float most[8];
        __m256 check = _mm256_setzero_ps();
        for (t = lo; t + 64 <= hi; t += 64) {
            __m256 m = _mm256_loadu_ps(logits + t);
            for (int k = 0; k < 64; k += 8) {
                __m256 x = _mm256_loadu_ps(logits + t + k);
                m = _mm256_max_ps(m, x), check = _mm256_add_ps(check, _mm256_sub_ps(x, x));
            }
            _mm256_storeu_ps(most, m);
            int beats = 0;
            for (int k = 0; k < 8; k++) beats |= most[k] > top;
            for (int k = 0; beats && k < 64; k++)
                if (logits[t + k] > top) top = logits[t + k], mine = t + k;
        }
        mine_bad = _mm256_movemask_ps(_mm256_cmp_ps(check, check, _CMP_UNORD_Q)) != 0;
#endif
        for (; t < hi; t++) {
            mine_bad |= !isfinite(logits[t]);
            if (logits[t] > top) top = logits[t], mine = t;
        }
        #pragma omp critical
        {
            bad |= mine_bad;
            if (lo < hi && (logits[mine] > logits[best] || (logits[mine] == logits[best] && mine < best))) best = mine;
        }
    }
    return bad ? -1 : best;
}

static int choose(const float *logits, int V, int best, float temperature, int top_k, float top_p, Prob *work) {
    if (temperature == 0.0f) return best;
    float top = logits[best], total = 0;  /* (l - top) / T <= 0 for any T > 0, however small: no inf - inf */
    for (int t = 0; t < V; t++) work[t] = (Prob){(logits[t] - top) / temperature, t};  /* in the order of e^that */
    Prob *kept = work;  /* the tokens to draw from, likeliest first where top-k or top-p is set */
    int keep = top_k > 0 && top_k < V ? top_k : V;
    if (keep < V) keep_likeliest(work, V, keep);  /* by the exponents: only the k kept need e^x (V of them: 1 ms) */
    for (int i = 0; i < keep; i++) work[i].p = expf(work[i].p), total += work[i].p;
    if (top_p > 0.0f && keep < V) {  /* the nucleus of the k: a token is kept while the mass before it is below top_p */
        float before = 0;
        int n = 0;
        while (n < keep && before / total < top_p) before += work[n++].p;
        keep = n, total = before;
    } else if (top_p > 0.0f) {       /* of all V */
        kept = take_nucleus(work, V, top_p, total, &keep);
        total = 0;
        for (int i = 0; i < keep; i++) total += kept[i].p;
    }
    float r = uniform() * total, sum = 0;
    for (int i = 0; i < keep; i++)
        if ((sum += kept[i].p) > r) return kept[i].id;
    return kept[keep - 1].id;
}

/* The thread count of the next decoding step. A token is one lock-step pass through about a hundred
   parallel loops; when another process holds a core, one of our threads waits for the scheduler at
   each of them and the token with it (5-10x slower on 2 cores, not the third a lost core costs). So
   the runtime times its own steps: an estimate of a step's seconds at each count (a running mean at
   the count in use, the latest step at another), and now and then one step at a neighbouring count,
   one fewer and one more in turn: at the second step, then after PROBE steps, twice as long after
   each probe that loses (a probe at a bad count costs up to ten steps), again after PROBE once one
   wins. It decodes at the fastest, and leaves a count as soon as its mean grows past another's
   estimate (a probe that won by luck: the next waits twice as long). No result depends on the count. */
#define PROBE 32
typedef struct {
    int most, now, turn;  /* OMP_NUM_THREADS; the count in use; which neighbour the next probe tries */
    int next, wait;       /* the step of the next probe, and the steps from one to the next */
    double *cost;         /* (most + 1): seconds a step, 0 where not yet tried */
} Pace;

static int pace_next(Pace *p, int step) {
    if (step != p->next || p->most == 1) return p->now;
    int down = p->now > 1, up = p->now < p->most;
    p->turn = !p->turn;
    return (p->turn && down) || !up ? p->now - 1 : p->now + 1;
}

static void pace_record(Pace *p, int threads, double seconds, int step) {
    double *c = &p->cost[threads];
    *c = threads == p->now && *c > 0 ? 0.75 * *c + 0.25 * seconds : seconds;
    if (threads != p->now) {  /* a probe: it wins, or the next one waits twice as long */
        p->wait = *c < p->cost[p->now] ? PROBE : (p->wait < 16 * PROBE ? 2 * p->wait : p->wait);
        if (*c < p->cost[p->now]) p->now = threads;
        p->next = step + p->wait;
        return;
    }
    int best = p->now;  /* the count in use grew slower than another's last step: to the fastest, */
    for (int n = 1; n <= p->most; n++)
        if (p->cost[n] > 0 && p->cost[n] < p->cost[best]) best = n;
    if (best != p->now) {  /* and the win that chose the count left counts as a loss */
        p->now = best, p->wait = p->wait < 16 * PROBE ? 2 * p->wait : p->wait;
        p->next = step + p->wait;
    }
}

/* A prompt's threads each on a CPU of their own (Linux with OpenMP). Left free, the threads of a prompt's
   products move between the CPUs, and a 512-token prompt ran 20% slower on a 2-core Zen 4 (dev/LOG.md,
   2026-12-05); but pinned beside a busy process, a thread cannot leave the busy CPU. So a prompt of a
   run or more is pinned only when this is the machine's one runnable task (/proc/stat's procs_running,
   the least of eight reads over 2 ms: a process that only wakes now and then, such as the one that
   started this, is not load), and its threads are freed after it. pin 0 frees the `threads` threads;
   returns whether it pinned. */
#if defined(__linux__) && defined(_OPENMP)
static int machine_idle(void) {
    int least = 1 << 30;
    for (int read = 0; read < 8; read++) {
        FILE *stat = fopen("/proc/stat", "r");
        char line[256];
        while (stat && fgets(line, sizeof line, stat))
            if (!strncmp(line, "procs_running ", 14) && atoi(line + 14) < least) least = atoi(line + 14);
        if (stat) fclose(stat);
        nanosleep(&(struct timespec){0, 250000}, NULL);
    }
    return least <= 1;
}

static int pin_threads(int pin, int threads) {
    static cpu_set_t all;  /* the CPUs this process may use, as it started */
    static int saved;
    if (!saved && sched_getaffinity(0, sizeof all, &all)) return 0;
    saved = 1;
    if (pin && !machine_idle()) return 0;
    int cpus = CPU_COUNT(&all);
    #pragma omp parallel num_threads(threads)
    {
        cpu_set_t set = all;
        if (pin) {  /* thread k on the k-th CPU of the set */
            int want = omp_get_thread_num() % cpus;
            CPU_ZERO(&set);
            for (int c = 0, seen = 0; c < CPU_SETSIZE; c++)
                if (CPU_ISSET(c, &all) && seen++ == want) {
                    CPU_SET(c, &set);
                    break;
                }
        }
        sched_setaffinity(0, sizeof set, &set);
    }
    return pin;
}
#else
static int pin_threads(int pin, int threads) {  /* elsewhere: never pinned */
    (void)pin, (void)threads;
    return 0;
}
#endif

/* This process's peak resident memory: VmHWM, which starts anew at exec (getrusage's ru_maxrss keeps
   the parent's from before it, on Linux). */
static double peak_rss_mb(void) {
    FILE *status = fopen("/proc/self/status", "r");
    char line[256];
    double kb = 0;
    while (status && fgets(line, sizeof line, status))
        if (!strncmp(line, "VmHWM:", 6)) kb = atof(line + 6);
    if (status) fclose(status);
    return kb / 1024.0;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Positions from .. to - 1 of ids through the model (the last position's logits made), starting with `most`
   threads; returns the count it ended with. Where probe is set, a long run (a prompt on a machine that may
   be busy) times itself as the decoding steps do: its first MAX_ROWS positions at `most` threads, a short
   second run (16 positions: little lost where it is slower) at one fewer, the rest together at whichever
   cost less a position. */
static int feed(const Model *m, State *s, const int *ids, int from, int to, int most, int probe) {
    double cost[2] = {0, 0};  /* seconds a position at `most` threads, at one fewer */
    int threads = most;
    probe = probe && most > 1;
    for (int run = 0, rows; from < to; from += rows, run++) {
        rows = probe && run < 2 && to - from > MAX_ROWS ? MAX_ROWS : to - from;
        if (probe && run == 1) threads = most - 1, rows = rows < 16 ? rows : 16;  /* the probe */
        if (probe && run == 2) threads = cost[1] < cost[0] ? most - 1 : most;
        omp_set_num_threads(threads);
        double t = now();
        forward(m, s, ids + from, rows, from + rows == to);
        if (run < 2) cost[run] = (now() - t) / rows;
    }
    return threads;
}

/* A command-line number, parsed whole (no trailing text, no overflow, no nan) and within [lo, hi]. */
static long long int_flag(const char *flag, const char *v, long long lo, long long hi) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "run: error: %s must be a whole number from %lld to %lld, not '%s'\n", flag, lo, hi, v);
        exit(1);
    }
    return x;
}

static float float_flag(const char *flag, const char *v, double lo, double hi) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno == ERANGE || !(x >= lo && x <= hi)) {
        fprintf(stderr, "run: error: %s must be a number from %g to %g, not '%s'\n", flag, lo, hi, v);
        exit(1);
    }
    return (float)x;
}

static uint64_t seed_flag(const char *v) {  /* 0 .. 2^64 - 1 */
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (end == v || *end || errno || strchr(v, '-')) die("--seed must be a whole number from 0 to 2^64 - 1, not ", v);
    return x;
}

int main(int argc, char **argv) {
    if (argc < 2) die("usage: run model.bin --ids 1,2,3 [--max_new_tokens N] [--temperature T] [--top_k K] "
                      "[--top_p P] [--seed S] [--stop ID] [--kv_cache sums|f32|f16|i8] [--head_tables f32|i16] [--exact] "
                      "[--logits FILE] [--print_ids]", NULL);
    int max_new = 256, top_k = 0, print_ids = 0, n_ids = 0, cap = 0, stop = -1, made = 0;
    float temperature = 1.0f, top_p = 0.0f;
    const char *logits_path = NULL, *ids_text = NULL;
    int cache = -1, tables16 = -1, exact = 0;  /* --kv_cache's kind, --head_tables i16 (-1: not given), --exact */
    const char *kinds[] = {"f32", "f16", "i8", "sums"};  /* by CACHE_F32 .. CACHE_SUMS */
    const char *kind_names[] = {"float32", "float16", "int8", "int16 sums"};
    rng_state = 1337;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--print_ids")) { print_ids = 1; continue; }
        if (!strcmp(a, "--exact")) { exact = 1; continue; }
        if (strncmp(a, "--", 2)) die("unexpected argument (the options begin with --): ", a);
        if (!v) die("a value is missing after ", a);
        if (!strcmp(a, "--ids")) ids_text = v;
        else if (!strcmp(a, "--max_new_tokens")) max_new = (int)int_flag(a, v, 0, MAX_NEW);
        else if (!strcmp(a, "--temperature")) temperature = float_flag(a, v, 0.0, 1e30);
        else if (!strcmp(a, "--top_k")) top_k = (int)int_flag(a, v, 0, 1 << 30);
        else if (!strcmp(a, "--top_p")) top_p = float_flag(a, v, 0.0, 1.0);
        else if (!strcmp(a, "--seed")) rng_state = seed_flag(v) * 2 + 1;
        else if (!strcmp(a, "--logits")) logits_path = v;
        else if (!strcmp(a, "--stop")) stop = (int)int_flag(a, v, -1, 1 << 30);
        else if (!strcmp(a, "--kv_cache")) {
            cache = -1;
            for (int k = CACHE_F32; k <= CACHE_SUMS; k++)
                if (!strcmp(v, kinds[k])) cache = k;
            if (cache < 0) die("--kv_cache must be sums, f32, f16 or i8, not ", v);
        }
        else if (!strcmp(a, "--head_tables") && (!strcmp(v, "f32") || !strcmp(v, "i16"))) tables16 = !strcmp(v, "i16");
        else if (!strcmp(a, "--head_tables")) die("--head_tables must be f32 or i16, not ", v);
        else die("unknown option ", a);
        i++;
    }
    if (!ids_text) die("give the prompt's token ids: --ids 1,2,3", NULL);
    File f;
    open_file(&f, argv[1]);
    Model m = {{0}};
    load_model(&m, &f);
    if (tables16 == 1 && m.c.head != CODES) die("--head_tables i16 is for a code head; this model's head is a float matrix", NULL);
    if (exact && ((cache >= 0 && cache != CACHE_F32) || tables16 == 1))
        die("--exact keeps float32 everywhere; drop --kv_cache and --head_tables", NULL);
    /* the defaults: the keys' and values' sums in the cache (the float32 cache's bits), and a code head's int16
       tables (the logits within 1e-3 of their range) */
    cache = cache >= 0 ? cache : exact ? CACHE_F32 : CACHE_SUMS, tables16 = tables16 == -1 ? m.c.head == CODES && !exact : tables16;
    int V = m.c.vocab, block = m.c.block_size;
    int *ids = NULL;
    for (const char *p = ids_text; *p;) {
        char *end;
        long id = strtol(p, &end, 10);
        if (end == p || id < 0 || id >= V) die("--ids must be comma-separated token ids below the vocabulary size", NULL);
        if (n_ids == cap && !(ids = realloc(ids, sizeof(int) * (cap = 2 * cap + 64)))) die("out of memory", NULL);
        ids[n_ids++] = (int)id;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') die("--ids must be comma-separated token ids below the vocabulary size", NULL);
    }
    if (n_ids == 0) die("--ids holds no token", NULL);
    if (n_ids > MAX_NEW) die("--ids holds more than 2^24 tokens", NULL);
    State s;
    new_state(&s, &m.c, (long long)n_ids + max_new < block ? n_ids + max_new : block, cache, tables16);
    Prob *work = xcalloc(V, sizeof(Prob));
    FILE *logits_out = logits_path ? fopen(logits_path, "wb") : NULL;
    if (logits_path && !logits_out) die("cannot write ", logits_path);
    Pace pace = {.most = omp_get_max_threads(), .next = 2, .wait = PROBE};
    pace.now = pace.most, pace.cost = xcalloc(pace.most + 1, sizeof(double));
    int start = n_ids > block ? n_ids - block : 0, fed = start;  /* the window, and how much of it is in the cache */
    int prompt = n_ids - start, decoded = 0, threads_used = 0;
    double t0 = now(), prompt_s = 0, decode_s = 0;
    for (int step = 0; step < max_new; step++) {
        double t = now();
        int threads = step ? pace_next(&pace, step) : pace.most;
        if (n_ids - start > block) start = n_ids - block / 2, s.pos = 0, fed = start;  /* the window restarts */
        int pinned = step == 0 && n_ids - fed >= MAX_ROWS && pin_threads(1, pace.most);
        threads = feed(&m, &s, ids, fed, n_ids, threads, !pinned);  /* the new positions: the prompt, or one; an
                                                                       idle machine's prompt needs no probe */
        if (pinned) pin_threads(0, pace.most);
        if (step == 0) pace.now = threads;                /* decoding starts at the prompt's choice */
        fed = n_ids;
        if (logits_out) fwrite(s.logits, sizeof(float), V, logits_out);
        int best = argmax(s.logits, V);
        if (best < 0) die("the model's logits are not finite; the weights are damaged", NULL);
        int next = choose(s.logits, V, best, temperature, top_k, top_p, work);
        double spent = now() - t;
        if (step == 0) prompt_s = spent;
        else pace_record(&pace, threads, spent, step), decode_s += spent, decoded++, threads_used += threads;
        if (next == stop) break;
        if (n_ids == cap && !(ids = realloc(ids, sizeof(int) * (cap = 2 * cap + 64)))) die("out of memory", NULL);
        ids[n_ids++] = next, made++;
        if (print_ids) printf("%d\n", next);
        else fwrite(m.tok_bytes + m.tok_offsets[next], 1, m.tok_offsets[next + 1] - m.tok_offsets[next], stdout);
        fflush(stdout);
    }
    fprintf(stderr, "run: %d tokens in %.3f s (the prompt's %d tokens and the first new one in %.1f ms: %.1f prompt "
            "tokens/s), decoding %.1f tokens/s; peak RSS %.1f MB; %d threads (%.2f a step on average); KV cache %s%s\n",
            made, now() - t0, prompt, 1000 * prompt_s, prompt / prompt_s, decoded ? decoded / decode_s : 0.0,
            peak_rss_mb(), pace.most, decoded ? (double)threads_used / decoded : (double)pace.most, kind_names[cache],
            m.c.head != CODES ? "" : tables16 ? "; code head tables int16" : "; code head tables float32");
    if (logits_out) fclose(logits_out);
    return 0;
}
