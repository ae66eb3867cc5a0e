/* layout-c: an OpenMP workload laid out like a real HPC code, whose thread-to-thread
 * communication is known exactly (see README.md beside this file).
 *
 *   layout-c PATTERN [--seconds S | --iterations K] [--out-dir DIR]
 *   PATTERN = halo | stencil | transpose | pipeline; threads from OMP_NUM_THREADS.
 *
 * All big data is static: three 16 MiB fields in .bss and the weight table in .data; the
 * master thread initialises everything before the parallel region, so the first touch of every
 * page is the master's and the detector has to find the owners from the main loop alone.
 * The arithmetic (and its order) matches layout.f90 line for line, so both print the same
 * checksum. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NF (1L << 21)      /* doubles per field: 16 MiB, 4096 pages */
#define H 512              /* halo: doubles per cell (one page), the halo width */
#define NCELL (NF / H)     /* halo: cells in the 1-D chain */
#define NX 2048            /* stencil: NY rows of NX doubles, row-major (a row is 4 pages) */
#define NY 1024
#define NM 1024            /* transpose: NM x NM complex matrix, (re, im) interleaved */
#define MAXT 256

enum { HALO, STENCIL, TRANSPOSE, PIPELINE };
static const char *names[] = {"halo", "stencil", "transpose", "pipeline"};

/* The fields. No initialiser, so .bss; page-aligned so that every block boundary that is a
 * multiple of 512 doubles is a page boundary (true of all blocks at T = 2, 4, 8). */
static double u[NF] __attribute__((aligned(4096)));
static double v[NF] __attribute__((aligned(4096)));
/* Source term (twiddles for transpose): each thread reads only its own block. */
static double f[NF] __attribute__((aligned(4096)));

/* Raw weights per pattern, normalised by the master at start (that write also keeps GCC from
 * folding the table into the code, which it may do with a never-written static). In .data. */
static double coef[4][6] = {
    {4, 1, 1, 2, 0, 0}, /* halo: centre, left cell, right cell, source */
    {4, 1, 1, 1, 1, 2}, /* stencil: centre, north, south, west, east, source */
    {2, 1, 1, 0, 0, 0}, /* transpose: keep A, B * twiddle, twiddle (the source) */
    {6, 1, 1, 0, 0, 0}, /* pipeline: linear, cubic, source */
};

/* Written by the master only, read by everyone after a barrier. */
static int finished;
static long iters;
static pid_t tids[MAXT];

static uint64_t now_ns(clockid_t clk) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Block k of n items split over p owners. */
static long lo(long n, long k, long p) { return n * k / p; }

/* Stencil thread grid px x py (px rows of tiles): the most square factorisation, px <= py. */
static void grid(int T, int *px, int *py) {
    *px = 1;
    for (int d = 1; d * d <= T; d++)
        if (T % d == 0) *px = d;
    *py = T / *px;
}

/* Pipeline buffer length: equal for every stage and a whole number of pages. */
static long pipe_len(int T) { return NF / T / H * H; }

/* Deterministic values in [-0.5, 0.5), not periodic within the three fields, and exact in any
 * language: the top 20 bits of a 32-bit multiplicative hash, scaled by a power of 2. */
static double init_value(long k) {
    return (double)(((k * 2654435761L) & 0xffffffffL) >> 12) / (double)(1L << 20) - 0.5;
}

/* (a) halo: 3-point stencil over a chain of cells of H doubles, reflective at the ends. The
 * first and last cell of a block read a whole cell (H doubles) of the neighbour's block. */
static void step_halo(int t, int T, const double *src, double *dst) {
    const double *w = coef[HALO];
    for (long c = lo(NCELL, t, T); c < lo(NCELL, t + 1, T); c++) {
        const double *l = &src[(c > 0 ? c - 1 : c) * H], *m = &src[c * H];
        const double *r = &src[(c < NCELL - 1 ? c + 1 : c) * H], *s = &f[c * H];
        double *o = &dst[c * H];
        for (long k = 0; k < H; k++)
            o[k] = ((w[0] * m[k] + w[1] * l[k]) + w[2] * r[k]) + w[3] * s[k];
    }
}

/* (b) stencil: 5-point, tile (ti, tj) of the px x py grid; reflective at the grid's edges.
 * Reads one row segment from the tiles above/below and one column from left/right. */
static void step_stencil(int t, int T, const double *src, double *dst) {
    const double *w = coef[STENCIL];
    int px, py;
    grid(T, &px, &py);
    long y0 = lo(NY, t / py, px), y1 = lo(NY, t / py + 1, px);
    long x0 = lo(NX, t % py, py), x1 = lo(NX, t % py + 1, py);
    for (long y = y0; y < y1; y++) {
        const double *c = &src[y * NX];
        const double *n = y > 0 ? c - NX : c, *s = y < NY - 1 ? c + NX : c;
        for (long x = x0; x < x1; x++) {
            double we = x > 0 ? c[x - 1] : c[x], ea = x < NX - 1 ? c[x + 1] : c[x];
            dst[y * NX + x] = ((((w[0] * c[x] + w[1] * n[x]) + w[2] * s[x]) + w[3] * we) +
                               w[4] * ea) + w[5] * f[y * NX + x];
        }
    }
}

/* (c) transpose, as in a 2-D FFT: A = u, B = v, both NM x NM complex; thread t owns rows
 * [i0, i1) of both. B = A^T reads column block t of A, a piece of every thread's rows; then
 * each thread mixes its rows of A with B * twiddle and the twiddle (own rows only). */
#define RE(a, i, j) (a)[2 * ((i) * NM + (j))]
#define IM(a, i, j) (a)[2 * ((i) * NM + (j)) + 1]
static void step_transpose(int t, int T) {
    const double *w = coef[TRANSPOSE];
    long i0 = lo(NM, t, T), i1 = lo(NM, t + 1, T);
    for (long jb = 0; jb < NM; jb += 16) /* 16 rows of A at a time: reuse its cache lines */
        for (long i = i0; i < i1; i++)
            for (long j = jb; j < jb + 16; j++) {
                RE(v, i, j) = RE(u, j, i);
                IM(v, i, j) = IM(u, j, i);
            }
#pragma omp barrier /* all of A read before anyone writes it */
    for (long i = i0; i < i1; i++)
        for (long j = 0; j < NM; j++) {
            double br = RE(v, i, j), bi = IM(v, i, j), zr = RE(f, i, j), zi = IM(f, i, j);
            RE(u, i, j) = (w[0] * RE(u, i, j) + w[1] * (br * zr - bi * zi)) + w[2] * zr;
            IM(u, i, j) = (w[0] * IM(u, i, j) + w[1] * (br * zi + bi * zr)) + w[2] * zi;
        }
}

/* (d) pipeline: stage t maps the buffer stage t-1 wrote last iteration into its own buffer
 * (stage 0 feeds back its own). Buffer t = elements [t L, (t+1) L) of the field. */
static void step_pipeline(int t, int T, const double *src, double *dst) {
    const double *w = coef[PIPELINE];
    long L = pipe_len(T);
    const double *in = &src[(t > 0 ? t - 1 : 0) * L], *s = &f[t * L];
    double *out = &dst[t * L];
    for (long k = 0; k < L; k++) {
        double x = in[k];
        out[k] = (w[0] * x + w[1] * ((x * x) * x)) + w[2] * s[k];
    }
}

static void step(int p, int t, int T, long it) {
    /* Double buffering: even iterations read u and write v, odd ones the reverse. */
    const double *src = it % 2 ? v : u;
    double *dst = it % 2 ? u : v;
    switch (p) {
    case HALO: step_halo(t, T, src, dst); break;
    case STENCIL: step_stencil(t, T, src, dst); break;
    case TRANSPOSE: step_transpose(t, T); break;
    case PIPELINE: step_pipeline(t, T, src, dst); break;
    }
}

/* gt[i][j] = bytes i read of j's blocks plus bytes j read of i's, over `iters` iterations,
 * counted in whole 64-byte cache lines (what moves between caches): from the decomposition
 * above. A strided read of one double per row costs a line (8 doubles) per row. */
static void ground_truth(int p, int T, long iters, uint64_t *gt) {
    uint64_t rd[MAXT][MAXT] = {{0}}; /* rd[i][j]: doubles i reads of j per iteration */
    int px, py;
    grid(T, &px, &py);
    for (int t = 0; t < T; t++) {
        switch (p) {
        case HALO: /* one cell from each neighbour */
            if (t > 0) rd[t][t - 1] += H;
            if (t < T - 1) rd[t][t + 1] += H;
            break;
        case STENCIL: { /* row segment from north/south, column (a line a row) from west/east */
            int ti = t / py, tj = t % py;
            long rows = lo(NY, ti + 1, px) - lo(NY, ti, px);
            long cols = lo(NX, tj + 1, py) - lo(NX, tj, py);
            if (ti > 0) rd[t][t - py] += cols;
            if (ti < px - 1) rd[t][t + py] += cols;
            if (tj > 0) rd[t][t - 1] += 8 * rows;
            if (tj < py - 1) rd[t][t + 1] += 8 * rows;
            break;
        }
        case TRANSPOSE: /* rows(t) x rows(s) complex numbers of A from each other thread s */
            for (int s = 0; s < T; s++)
                if (s != t)
                    rd[t][s] += 2 * (lo(NM, t + 1, T) - lo(NM, t, T)) * (lo(NM, s + 1, T) - lo(NM, s, T));
            break;
        case PIPELINE: /* the whole upstream buffer */
            if (t > 0) rd[t][t - 1] += pipe_len(T);
            break;
        }
    }
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++)
            gt[i * T + j] = (rd[i][j] + rd[j][i]) * sizeof(double) * (uint64_t)iters;
}

/* Digest of the bits of every field, in memory order: two polynomial (Horner) hashes of the
 * 32-bit halves modulo 2^31 - 1, whose products fit in 63 bits, so that layout.f90 computes
 * the same with signed 64-bit integers and no overflow. */
static uint64_t checksum(void) {
    const double *fields[] = {u, v, f};
    const uint64_t P = 2147483647, B1 = 16807, B2 = 48271;
    uint64_t h1 = 0, h2 = 0;
    for (int a = 0; a < 3; a++)
        for (long k = 0; k < NF; k++) {
            uint64_t bits;
            memcpy(&bits, &fields[a][k], sizeof bits);
            uint64_t half[2] = {bits & 0xffffffffu, bits >> 32};
            for (int i = 0; i < 2; i++) {
                h1 = (h1 * B1 + half[i]) % P;
                h2 = (h2 * B2 + half[i]) % P;
            }
        }
    return h1 << 32 | h2;
}

static void usage(void) {
    fprintf(stderr, "usage: layout-c halo|stencil|transpose|pipeline [--seconds S | --iterations K] [--out-dir DIR]\n");
    exit(2);
}

static FILE *open_out(const char *dir, const char *name, char *path, size_t len) {
    snprintf(path, len, "%s/%s", dir, name);
    FILE *fp = fopen(path, "w");
    if (!fp) {
        fprintf(stderr, "layout-c: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    return fp;
}

int main(int argc, char **argv) {
    int p = -1;
    double seconds = 3;
    long fixed = 0; /* --iterations K, else run for `seconds` */
    const char *dir = ".";
    for (int a = 0; a < 4; a++)
        if (argc > 1 && !strcmp(argv[1], names[a])) p = a;
    if (p < 0) usage();
    for (int a = 2; a < argc; a += 2) {
        if (a + 1 >= argc) usage();
        const char *opt = argv[a], *val = argv[a + 1];
        if (!strcmp(opt, "--seconds") && (seconds = atof(val)) > 0) continue;
        if (!strcmp(opt, "--iterations") && (fixed = atol(val)) > 0) continue;
        if (!strcmp(opt, "--out-dir")) dir = val;
        else usage();
    }
    int T = omp_get_max_threads();
    if (T < 1 || T > MAXT) {
        fprintf(stderr, "layout-c: 1 to %d threads (OMP_NUM_THREADS), not %d\n", MAXT, T);
        return 2;
    }

    /* Serial initialisation by the master thread: the weights, then every page of every field. */
    for (int r = 0; r < 4; r++) {
        double sum = 0;
        for (int k = 0; k < 6; k++) sum += fabs(coef[r][k]);
        for (int k = 0; k < 6; k++) coef[r][k] = coef[r][k] / sum;
    }
    for (long k = 0; k < NF; k++) {
        u[k] = init_value(k);
        v[k] = init_value(k + NF);
        f[k] = init_value(k + 2 * NF);
    }

    uint64_t start = 0, end = 0, start_unix = 0;
#pragma omp parallel num_threads(T)
    {
        int t = omp_get_thread_num();
        if (omp_get_num_threads() != T) {
            fprintf(stderr, "layout-c: got %d threads, not %d\n", omp_get_num_threads(), T);
            exit(1);
        }
        tids[t] = (pid_t)syscall(SYS_gettid);
#pragma omp barrier
#pragma omp master
        {
            start = now_ns(CLOCK_MONOTONIC);
            start_unix = now_ns(CLOCK_REALTIME);
        }
#pragma omp barrier
        for (long it = 0;; it++) {
            step(p, t, T, it);
#pragma omp barrier
            /* Thread 0 alone decides whether that was the last iteration, so all do the same count. */
#pragma omp master
            {
                iters = it + 1;
                end = now_ns(CLOCK_MONOTONIC);
                finished = fixed ? iters >= fixed : (double)(end - start) >= seconds * 1e9;
            }
#pragma omp barrier
            if (finished) break;
        }
    }
    double secs = (double)(end - start) / 1e9;

    uint64_t *gt = calloc((size_t)T * T, sizeof *gt), cross = 0;
    ground_truth(p, T, iters, gt);
    char gt_path[4096], json_path[4096];
    FILE *fp = open_out(dir, "ground-truth.csv", gt_path, sizeof gt_path);
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++) {
            fprintf(fp, "%" PRIu64 "%c", gt[i * T + j], j == T - 1 ? '\n' : ',');
            if (j > i) cross += gt[i * T + j];
        }
    fclose(fp);

    uint64_t sum = checksum();
    fp = open_out(dir, "workload.json", json_path, sizeof json_path);
    fprintf(fp, "{\n  \"schema\": \"huddle.workload/1\",\n  \"pattern\": \"%s\",\n  \"phases\": [\"%s\"],\n"
                "  \"mode\": \"threads\",\n  \"layout\": \"static\",\n  \"tasks\": %d,\n  \"pid\": %d,\n  \"tids\": [",
            names[p], names[p], T, (int)getpid());
    for (int t = 0; t < T; t++) fprintf(fp, "%s%d", t ? ", " : "", (int)tids[t]);
    fprintf(fp, "],\n  \"iterations\": %ld,\n  \"phase_iterations\": [%ld],\n  \"seconds\": %.6f,\n"
                "  \"iterations_per_second_per_task\": %.3f,\n  \"iterations_per_second_total\": %.3f,\n"
                "  \"read_bytes_per_second\": %.3f,\n  \"checksum\": \"%016" PRIx64 "\",\n  \"read_errors\": 0,\n"
                "  \"phase_switch_s\": null,\n  \"start_monotonic_ns\": %" PRIu64 ",\n"
                "  \"phase_switch_monotonic_ns\": null,\n  \"start_unix_ns\": %" PRIu64 ",\n"
                "  \"files\": [\"%s\", \"%s\"]\n}\n",
            iters, iters, secs, iters / secs, iters * T / secs, cross / secs, sum, start, start_unix,
            gt_path, json_path);
    fclose(fp);
    printf("pattern=%s threads=%d iterations=%ld checksum=%016" PRIx64 "\n", names[p], T, iters, sum);
    free(gt);
    return 0;
}
