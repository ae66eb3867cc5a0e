/* Benchmarks of huddle-alloc (crates/alloc), written after chapter 2 of the seed:
 *   allocbench latency MAPPING N          alloc/free latency: huddle_alloc vs malloc vs numa_alloc_onnode
 *   allocbench stream MAPPING MB RUNS     STREAM-like Add per thread, rows of one chunk (2D arrays)
 *   allocbench composite MAPPING MB RUNS ITERS  lock-step bubble passes between two barriers
 * The last two compare bank-private, controller-local and default (malloc) allocation and print
 * markdown tables with mean and standard deviation over RUNS runs. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <numa.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <huddle/alloc.h>

#define THREADS 2
enum kind { BANK_PRIVATE, CONTROLLER_LOCAL, DEFAULT_MALLOC, KINDS };
static const char *kind_name[KINDS] = {"bank-private", "controller-local", "default (malloc)"};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void die(const char *what) {
    fprintf(stderr, "allocbench: %s: %s\n", what, huddle_last_error());
    exit(1);
}

static void stats(const double *v, int n, double *mean, double *sd) {
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += v[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) q += (v[i] - *mean) * (v[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

/* ---- latency ---- */
static int latency(const char *mapping, int n) {
    double t0 = now();
    huddle_pool *p = huddle_pool_create((size_t)n * 4096 * 2, mapping);
    if (!p) die("pool");
    double create = now() - t0;
    int banks = huddle_pool_banks(p);
    void **v = malloc(sizeof(void *) * n);
    /* round 0 is cold (malloc's heap and numa's mappings fault in), round 1 reuses memory */
    double ta[2][3], tf[2][3];
    for (int round = 0; round < 2; round++) {
        double *A = ta[round], *F = tf[round];
        int got = 0;
        t0 = now();
        for (int i = 0; i < n; i++) {
            v[i] = huddle_alloc(p, 4096, 0, i % banks, HUDDLE_ALLOC_CONTROLLER);
            if (v[i]) got++;
        }
        A[0] = now() - t0;
        t0 = now();
        for (int i = 0; i < n; i++) huddle_free(p, v[i]);
        F[0] = now() - t0;
        if (got != n) fprintf(stderr, "allocbench: only %d of %d huddle allocations\n", got, n);
        t0 = now();
        for (int i = 0; i < n; i++) v[i] = malloc(4096);
        A[1] = now() - t0;
        t0 = now();
        for (int i = 0; i < n; i++) free(v[i]);
        F[1] = now() - t0;
        t0 = now();
        for (int i = 0; i < n; i++) v[i] = numa_alloc_onnode(4096, 0);
        A[2] = now() - t0;
        t0 = now();
        for (int i = 0; i < n; i++) numa_free(v[i], 4096);
        F[2] = now() - t0;
    }
    printf("Pool of %d MiB (`%s`): created, locked and sorted in %.3f s (%.1f ms per 100 MiB).\n\n",
           n * 2 * 4096 >> 20, mapping, create, create * 1e3 / ((double)n * 2 * 4096 / (100 << 20)));
    printf("| 4 KiB requests, %d in a row | round | alloc ns/op | free ns/op | alloc ratio to malloc | free ratio to malloc |\n", n);
    printf("|---|---|---|---|---|---|\n");
    const char *names[3] = {"huddle_alloc (controller mode, cycling banks)", "malloc / free",
                            "numa_alloc_onnode / numa_free"};
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 3; i++)
            printf("| %s | %s | %.0f | %.0f | %.2f | %.2f |\n", names[i], round ? "warm" : "cold",
                   ta[round][i] * 1e9 / n, tf[round][i] * 1e9 / n, ta[round][i] / ta[round][1],
                   tf[round][i] / tf[round][1]);
    printf("\nhuddle_alloc pops the head of a per-(controller, bank) list under one mutex on memory "
           "that the pool faulted in and locked at creation; malloc's cold round pays the page "
           "faults of fresh heap pages; numa_alloc_onnode is an mmap + mbind per call (and a fault "
           "on first touch, not measured here).\n");
    /* SPLIT mode cost against request size (the seed's Fig. 2.3: 8 kB about 0.007 s,
     * 8 MB about 0.7 s on TILEPro64). Larger than a chunk, so the exact, controller and any
     * steps search first and fail, then the contiguous first-fit scan runs. */
    printf("\n| SPLIT request | alloc us | free us | chunks |\n|---|---|---|---|\n");
    size_t sizes[4] = {8 << 10, 64 << 10, 1 << 20, 8 << 20};
    for (int i = 0; i < 4; i++) {
        const int reps = 20;
        double a = 0, f = 0;
        for (int r = 0; r < reps; r++) {
            t0 = now();
            void *m = huddle_alloc(p, sizes[i], 0, 0, HUDDLE_ALLOC_SPLIT);
            a += now() - t0;
            if (!m) die("split allocation");
            t0 = now();
            huddle_free(p, m);
            f += now() - t0;
        }
        printf("| %zu KiB | %.1f | %.1f | %zu |\n", sizes[i] >> 10, a * 1e6 / reps, f * 1e6 / reps, sizes[i] / 4096);
    }
    free(v);
    huddle_pool_destroy(p);
    return 0;
}

/* ---- row-structured arrays (the seed's 2D arrays) ---- */
struct rows { char **row; size_t n; };

static void rows_alloc(struct rows *r, huddle_pool *p, size_t chunk, size_t n, enum kind k, int bank) {
    r->n = n;
    r->row = malloc(sizeof(char *) * n);
    int banks = huddle_pool_banks(p);
    for (size_t i = 0; i < n; i++) {
        if (k == BANK_PRIVATE)
            r->row[i] = huddle_alloc(p, chunk, 0, bank, HUDDLE_ALLOC_EXACT);
        else if (k == CONTROLLER_LOCAL)
            r->row[i] = huddle_alloc(p, chunk, 0, (int)(i % banks), HUDDLE_ALLOC_EXACT);
        else
            r->row[i] = aligned_alloc(chunk, chunk);
        if (!r->row[i]) die("row allocation (pool too small for this footprint?)");
        memset(r->row[i], 0, chunk);
    }
}

static void rows_free(struct rows *r, huddle_pool *p, enum kind k) {
    for (size_t i = 0; i < r->n; i++) {
        if (k == DEFAULT_MALLOC) free(r->row[i]);
        else huddle_free(p, r->row[i]);
    }
    free(r->row);
}

struct job {
    int id;
    size_t chunk, rows;
    struct rows a, b, c;
    pthread_barrier_t *bar;
    int iters;
    double seconds;
};

/* ---- STREAM-like Add: c = a + b over rows, per thread ---- */
static void *stream_thread(void *arg) {
    struct job *j = arg;
    pin(j->id);
    size_t per = j->chunk / sizeof(double);
    pthread_barrier_wait(j->bar);
    double t0 = now();
    for (int it = 0; it < j->iters; it++)
        for (size_t r = 0; r < j->rows; r++) {
            double *a = (double *)j->a.row[r], *b = (double *)j->b.row[r], *c = (double *)j->c.row[r];
            for (size_t x = 0; x < per; x++) c[x] = a[x] + b[x];
        }
    j->seconds = now() - t0;
    pthread_barrier_wait(j->bar);
    return NULL;
}

/* ---- composite: per iteration, barrier, one bubble pass over the thread's keys, barrier ---- */
static void *composite_thread(void *arg) {
    struct job *j = arg;
    pin(j->id);
    size_t per = j->chunk / sizeof(int32_t);
    uint64_t seed = 0x9e3779b97f4a7c15ULL * (j->id + 1);
    for (size_t r = 0; r < j->rows; r++)
        for (size_t x = 0; x < per; x++) {
            seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
            ((int32_t *)j->a.row[r])[x] = (int32_t)seed;
        }
    for (int it = 0; it < j->iters; it++) {
        pthread_barrier_wait(j->bar); /* start together */
        int32_t prev_last = INT32_MIN;
        for (size_t r = 0; r < j->rows; r++) {
            int32_t *k = (int32_t *)j->a.row[r];
            /* carry the bubble across the row boundary (2D array, 1D order) */
            if (r > 0 && prev_last > k[0]) {
                int32_t *pk = (int32_t *)j->a.row[r - 1];
                pk[per - 1] = k[0];
                k[0] = prev_last;
            }
            for (size_t x = 0; x + 1 < per; x++)
                if (k[x] > k[x + 1]) {
                    int32_t t = k[x];
                    k[x] = k[x + 1];
                    k[x + 1] = t;
                }
            prev_last = k[per - 1];
        }
        pthread_barrier_wait(j->bar); /* finish together: lock step */
    }
    return NULL;
}

static int compare(const char *which, const char *mapping, size_t mb, int runs, int iters) {
    huddle_pool *p = huddle_pool_create((size_t)1 << 30, mapping);
    if (!p) die("pool");
    size_t chunk = 4096; /* the physical pool's chunk: 2^lowest bank bit capped at the page */
    int is_stream = strcmp(which, "stream") == 0;
    size_t rows = (mb << 20) / chunk;
    /* All three allocations live at once and the runs interleave them (run 1 of each kind,
     * then run 2, ...), so that load from other processes hits every kind alike. */
    double *val = malloc(sizeof(double) * runs * KINDS);
    double mean[KINDS], sd[KINDS];
    struct job j[KINDS][THREADS];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, THREADS + 1);
    for (int k = 0; k < KINDS; k++)
        for (int t = 0; t < THREADS; t++) {
            j[k][t] = (struct job){.id = t, .chunk = chunk, .rows = rows, .bar = &bar, .iters = is_stream ? 3 : iters};
            rows_alloc(&j[k][t].a, p, chunk, rows, k, t);
            if (is_stream) {
                rows_alloc(&j[k][t].b, p, chunk, rows, k, t);
                rows_alloc(&j[k][t].c, p, chunk, rows, k, t);
            }
        }
    for (int run = 0; run < runs; run++)
        for (int k = 0; k < KINDS; k++) {
            pthread_t th[THREADS];
            for (int t = 0; t < THREADS; t++)
                pthread_create(&th[t], NULL, is_stream ? stream_thread : composite_thread, &j[k][t]);
            double t0 = now();
            for (int it = 0; it < (is_stream ? 1 : iters); it++) {
                pthread_barrier_wait(&bar);
                pthread_barrier_wait(&bar);
            }
            double wall = now() - t0;
            for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
            if (is_stream) { /* MB/s per thread, averaged over threads: 3 arrays touched per Add */
                double bw = 0;
                for (int t = 0; t < THREADS; t++)
                    bw += 3.0 * rows * chunk * j[k][t].iters / j[k][t].seconds / 1e6;
                val[k * runs + run] = bw / THREADS;
            } else {
                val[k * runs + run] = wall;
            }
        }
    for (int k = 0; k < KINDS; k++) {
        stats(val + k * runs, runs, &mean[k], &sd[k]);
        for (int t = 0; t < THREADS; t++) {
            rows_free(&j[k][t].a, p, k);
            if (is_stream) {
                rows_free(&j[k][t].b, p, k);
                rows_free(&j[k][t].c, p, k);
            }
        }
    }
    pthread_barrier_destroy(&bar);
    if (is_stream)
        printf("| allocation (%d threads, %zu MiB per array per thread) | Add MB/s per thread, mean | std dev | ratio to default |\n",
               THREADS, mb);
    else
        printf("| allocation (%d threads, %zu MiB keys per thread, %d iterations) | seconds per run, mean | std dev | ratio to default |\n",
               THREADS, mb, iters);
    printf("|---|---|---|---|\n");
    for (int k = 0; k < KINDS; k++)
        printf("| %s | %.4g | %.3g | %.3f |\n", kind_name[k], mean[k], sd[k], mean[k] / mean[DEFAULT_MALLOC]);
    free(val);
    huddle_pool_destroy(p);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 4 && strcmp(argv[1], "latency") == 0) return latency(argv[2], atoi(argv[3]));
    if (argc >= 5 && strcmp(argv[1], "stream") == 0)
        return compare("stream", argv[2], (size_t)atol(argv[3]), atoi(argv[4]), 1);
    if (argc >= 6 && strcmp(argv[1], "composite") == 0)
        return compare("composite", argv[2], (size_t)atol(argv[3]), atoi(argv[4]), atoi(argv[5]));
    fprintf(stderr, "usage: allocbench latency MAPPING N | stream MAPPING MB RUNS | composite MAPPING MB RUNS ITERS\n");
    return 2;
}
