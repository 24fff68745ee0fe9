/* bandwidth.c: how fast this machine's memory is read, with the threads a decoder uses (issue 56).

   An array far larger than the last-level cache (default 1 GiB of float32, every element 1.0) is
   summed by OMP_NUM_THREADS threads, each its own contiguous share, with AVX2 loads into four
   accumulators (a load a cycle: the loop is bound by memory, not by the adds) and each line fetched
   4 KB ahead (one thread streams 15% faster so on a Zen 4, as run.c's code head does); the best of the
   repetitions is the machine's read bandwidth, the ceiling a decoder that streams its weights
   once a token can reach. Prints: GB/s (10^9 bytes a second), the bytes read once, the threads, and the sum
   (the element count, exactly: the array was read whole).

   Build: gcc -O3 -mavx2 -fopenmp bandwidth.c -o bandwidth      (experiments/bandwidth.py does)
   Run:   bandwidth [MiB] [repetitions] */

#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    long mib = argc > 1 ? atol(argv[1]) : 1024, reps = argc > 2 ? atol(argv[2]) : 5;
    if (mib < 1 || mib > (1L << 11) || reps < 1 || reps > 1000) {
        fprintf(stderr, "bandwidth: error: give MiB from 1 to 2048 and repetitions from 1 to 1000\n");
        return 1;
    }
    size_t n = (size_t)mib << 18;  /* floats: 4 bytes each, a multiple of 32 */
    float *a = aligned_alloc(64, n * sizeof(float));
    if (!a) {
        fprintf(stderr, "bandwidth: error: cannot allocate %ld MiB\n", mib);
        return 1;
    }
    #pragma omp parallel for schedule(static)  /* first touch by the thread that reads it later */
    for (size_t i = 0; i < n; i++) a[i] = 1.0f;
    double best = 0, sum = 0;
    for (long r = 0; r < reps; r++) {
        double t0 = now(), total = 0;
        #pragma omp parallel reduction(+:total)
        {
            int threads = omp_get_num_threads(), me = omp_get_thread_num();
            size_t blocks = n / 32, from = blocks * me / threads, to = blocks * (me + 1) / threads;
            __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;  /* 32 floats a step, 4 chains */
            for (size_t block = from; block < to; block++) {
                const float *p = a + 32 * block;
                _mm_prefetch((const char *)(p + 1024), _MM_HINT_T0), _mm_prefetch((const char *)(p + 1040), _MM_HINT_T0);
                s0 = _mm256_add_ps(s0, _mm256_load_ps(p)), s1 = _mm256_add_ps(s1, _mm256_load_ps(p + 8));
                s2 = _mm256_add_ps(s2, _mm256_load_ps(p + 16)), s3 = _mm256_add_ps(s3, _mm256_load_ps(p + 24));
            }
            float lanes[8];  /* exact: each lane sums at most n / 32 ones, below 2^24 for n < 2^29 */
            _mm256_storeu_ps(lanes, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
            for (int i = 0; i < 8; i++) total += lanes[i];
        }
        double seconds = now() - t0, rate = n * sizeof(float) / seconds / 1e9;
        if (rate > best) best = rate;
        sum = total;
    }
    printf("%.3f GB/s %zu bytes %d threads sum %.0f\n", best, n * sizeof(float), omp_get_max_threads(), sum);
    free(a);
    return 0;
}
