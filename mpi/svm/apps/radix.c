/* Radix sort (8-bit digits, 4 passes): per-process histograms in shared memory, prefix sums,
 * permutation into the shared destination.  Checked against qsort. */
#include "common.h"
#include <stdint.h>

static int cmp(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}
static uint32_t key(size_t i) {
    uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull;
    z ^= z >> 29;
    z *= 0xbf58476d1ce4e5b9ull;
    return (uint32_t)(z >> 32);
}
int main(int argc, char **argv) {
    app_init(&argc, &argv);
    int sz = app_size(argc, argv);
    size_t n = sz == 0 ? 1 << 15 : sz == 1 ? 1 << 18 : 1 << 20;
    uint32_t *src = svm_malloc(n * 4), *dst = svm_malloc(n * 4);
    uint32_t *hist = svm_malloc((size_t)N * 256 * 4);
    size_t lo = R * n / N, hi = (R + 1) * n / N;
    for (size_t i = lo; i < hi; i++) src[i] = key(i);
    timed_begin();
    for (int pass = 0; pass < 4; pass++) {
        int sh = pass * 8;
        uint32_t h[256] = {0}, off[256];
        for (size_t i = lo; i < hi; i++) h[(src[i] >> sh) & 255]++;
        memcpy(hist + (size_t)R * 256, h, sizeof h);
        svm_barrier();
        size_t base = 0;
        for (int d = 0; d < 256; d++) {
            for (int q = 0; q < N; q++) {
                if (q == R) off[d] = (uint32_t)base;
                base += hist[q * 256 + d];
            }
        }
        for (size_t i = lo; i < hi; i++) dst[off[(src[i] >> sh) & 255]++] = src[i];
        svm_barrier();
        uint32_t *t = src;
        src = dst;
        dst = t;
    }
    int ok = 1;
    if (R == 0) {
        uint32_t *s = malloc(n * 4);
        for (size_t i = 0; i < n; i++) s[i] = key(i);
        qsort(s, n, 4, cmp);
        ok = memcmp(s, src, n * 4) == 0;
        free(s);
    }
    char d[64];
    snprintf(d, sizeof d, "keys=%zu", n);
    return app_report("radix", ok, d);
}
