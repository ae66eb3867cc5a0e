/* svm microbenchmarks against raw MPI on the same transport, in one run (rank 0 measures,
 * rank 1 is the remote home).  Prints markdown table rows. */
#define _GNU_SOURCE
#include "svm_internal.h"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>

/* The floor of fault-based access detection, without svm's protocol: SIGSEGV on a private
 * PROT_NONE page, a handler that makes it readable with mprotect, and the access again.
 * Measured before svm_init (MPI and UCX install their own SIGSEGV handlers). */
static size_t floor_pg;
static void floor_handler(int sig, siginfo_t *si, void *uc) {
    (void)sig, (void)uc;
    mprotect((void *)((size_t)si->si_addr & ~(floor_pg - 1)), floor_pg, PROT_READ);
}
static double mono(void) { /* MPI_Wtime is not for use before MPI_Init */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static int dcmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
static double pct(double *v, int n, int p) { qsort(v, n, sizeof *v, dcmp); return v[(long)n * p / 100]; }

static double median(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) { double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
    return v[n / 2];
}

int main(int argc, char **argv) {
    size_t pg = getenv("SVM_PAGE_SIZE") ? strtoul(getenv("SVM_PAGE_SIZE"), NULL, 10) : 4096;
    int pages = 256, reps = 5;
    double flr[8];
    {
        struct sigaction sa, old;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = floor_handler;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigaction(SIGSEGV, &sa, &old);
        floor_pg = pg;
        char *fl = mmap(NULL, pages * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        memset(fl, 1, pages * pg);
        for (int rep = 0; rep < reps; rep++) {
            mprotect(fl, pages * pg, PROT_NONE);
            double t0 = mono();
            for (int i = 0; i < pages; i++) (void)((volatile char *)fl)[i * pg];
            flr[rep] = (mono() - t0) / pages;
        }
        munmap(fl, pages * pg);
        sigaction(SIGSEGV, &old, NULL);
    }
    if (svm_init(&argc, &argv)) return 2;
    int r = svm_rank(), n = svm_size();
    if (n < 2) { fprintf(stderr, "svmbench: needs 2 processes\n"); return 2; }
    char *a = svm_malloc(pages * pg * 2); /* block homes: the second half lives at rank 1 */
    char *raw = malloc(pages * pg), *dst = malloc(pg);
    memset(raw, 1, pages * pg);
    MPI_Win w;
    MPI_Win_create(raw, pages * pg, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &w);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, w);
    double *fa = malloc(reps * pages * sizeof *fa), *ga = malloc(reps * pages * sizeof *ga);
    double fault[8], get[8], gsvm[8], lk[8], fao[8], sb[8], mb[8];
    struct svm_fault_profile fp, sum = {0};
    for (int rep = 0; rep < reps; rep++) {
        /* 1. fault-to-usable: rank 1 writes the pages it is home of, rank 0 reads each once */
        char *p = a + pages * pg;
        if (r == 1) for (int i = 0; i < pages; i++) p[i * pg] = (char)rep + 1;
        svm_barrier();
        if (r == 0) {
            svm__fault_profile(&fp, 1);
            double t0 = MPI_Wtime();
            long s = 0;
            double t00 = t0;
            for (int i = 0; i < pages; i++) { s += p[i * pg]; double t1 = MPI_Wtime(); fa[rep * pages + i] = t1 - t0; t0 = t1; }
            fault[rep] = (t0 - t00) / pages;
            svm__fault_profile(&fp, 1);
            sum.version += fp.version, sum.get += fp.get, sum.merge += fp.merge, sum.mprotect += fp.mprotect;
            sum.handler += fp.handler, sum.faults += fp.faults, sum.retries += fp.retries;
            if (s != (long)pages * (rep + 1)) { fprintf(stderr, "svmbench: stale data\n"); return 1; }
            /* raw MPI_Get + flush of the same size from a malloc'd window, timed one by one (for the
             * medians: robust on a loaded machine), then as a loop (for the means), then the same
             * from svm's own data window; wrapped like svm's own MPI calls (svm__mpi_enter) */
            t0 = MPI_Wtime();
            for (int i = 0; i < pages; i++) { svm__mpi_enter(); MPI_Get(dst, (int)pg, MPI_BYTE, 1, i * pg, (int)pg, MPI_BYTE, w); MPI_Win_flush(1, w); svm__mpi_leave(); double t1 = MPI_Wtime(); ga[rep * pages + i] = t1 - t0; t0 = t1; }
            t0 = MPI_Wtime();
            for (int i = 0; i < pages; i++) { svm__mpi_enter(); MPI_Get(dst, (int)pg, MPI_BYTE, 1, i * pg, (int)pg, MPI_BYTE, w); MPI_Win_flush(1, w); svm__mpi_leave(); }
            get[rep] = (MPI_Wtime() - t0) / pages;
            t0 = MPI_Wtime();
            for (int i = 0; i < pages; i++) svm__raw_get(dst, pg, 1, svm__offset(p + i * pg));
            gsvm[rep] = (MPI_Wtime() - t0) / pages;
        }
        svm_barrier();
        /* 2. lock acquire (home rank 1, uncontended) vs MPI_Fetch_and_op on rank 1 */
        if (r == 0) {
            int k = 200;
            double t = 0;
            for (int i = 0; i < k; i++) { double t0 = MPI_Wtime(); svm_lock(1); t += MPI_Wtime() - t0; svm_unlock(1); }
            lk[rep] = t / k;
            long one = 1, old;
            double t0 = MPI_Wtime();
            for (int i = 0; i < k; i++) { svm__mpi_enter(); MPI_Fetch_and_op(&one, &old, MPI_LONG, 1, 0, MPI_SUM, w); MPI_Win_flush(1, w); svm__mpi_leave(); }
            fao[rep] = (MPI_Wtime() - t0) / k;
        }
        svm_barrier();
        /* 3. barrier without shared writes vs MPI_Barrier */
        int k = 100;
        double t0 = MPI_Wtime();
        for (int i = 0; i < k; i++) svm_barrier();
        sb[rep] = (MPI_Wtime() - t0) / k;
        t0 = MPI_Wtime();
        for (int i = 0; i < k; i++) MPI_Barrier(MPI_COMM_WORLD);
        mb[rep] = (MPI_Wtime() - t0) / k;
    }
    /* 4. diff creation and application (local, 1/8 of the words changed in runs of 4) */
    size_t np = 2048, nw = pg / 4;
    uint32_t *cur = malloc(np * pg), *tw = malloc(np * pg), *out = malloc(pg), *runs = malloc((nw + 2) * 8), *home = malloc(np * pg);
    double cre = 0, app = 0;
    if (r == 0) {
        for (size_t i = 0; i < np * nw; i++) cur[i] = tw[i] = (uint32_t)i;
        double best_c = 1e9, best_a = 1e9;
        for (int rep = 0; rep < reps; rep++) {
            for (size_t i = 0; i < np * nw; i += 32) for (int j = 0; j < 4; j++) cur[i + j] += 1 + rep;
            double tc = 0, ta = 0;
            for (size_t p = 0; p < np; p++) {
                double t0 = MPI_Wtime();
                size_t nr = svm__diff_create(cur + p * nw, tw + p * nw, out, nw, runs);
                double t1 = MPI_Wtime();
                uint32_t *vals = runs + 2 * nr, *v = vals; /* pack as the base protocol does */
                for (size_t k = 0; k < nr; k++) { memcpy(v, out + runs[2 * k], runs[2 * k + 1] * 4); v += runs[2 * k + 1]; }
                double t2 = MPI_Wtime();
                svm__diff_apply(home + p * nw, runs, nr, vals);
                ta += MPI_Wtime() - t2;
                tc += t1 - t0;
            }
            if (tc < best_c) best_c = tc;
            if (ta < best_a) best_a = ta;
        }
        cre = np * pg / best_c / 1e9;
        app = np * pg / best_a / 1e9;
    }
    if (r == 0) {
        double f = median(fault, reps), g = median(get, reps), l = median(lk, reps), o = median(fao, reps),
               s = median(sb, reps), m = median(mb, reps);
        const char *pr = svm_protocol();
        printf("| %s | page fault to usable (%zu B) vs MPI_Get of %zu B | %.1f us | %.1f us | %.2fx | <= 1.5x |\n", pr, pg, pg, f * 1e6, g * 1e6, f / g);
        if (sum.faults) {
            double k = 1e6 / sum.faults, total = 0;
            for (int i = 0; i < reps; i++) total += fault[i];
            printf("| %s | where a fault's time goes (mean of %lu): version poll %.1f us, page read %.1f us, merge %.1f us, "
                   "mprotect %.1f us, rest of handler %.1f us, signal delivery and return %.1f us; retries %lu | %.1f us | %.1f us | | |\n",
                   pr, sum.faults, sum.version * k, sum.get * k, sum.merge * k, sum.mprotect * k,
                   (sum.handler - sum.version - sum.get - sum.merge - sum.mprotect) * k, total / reps * 1e6 - sum.handler * k,
                   sum.retries, total / reps * 1e6, g * 1e6);
        }
        double gs = median(gsvm, reps);
        printf("| %s | MPI_Get of %zu B from svm's own window (node shared memory) vs from a malloc'd window | %.1f us | %.1f us | %.2fx | |\n", pr, pg, gs * 1e6, g * 1e6, gs / g);
        double fl50 = median(flr, reps), f50 = pct(fa, reps * pages, 50), g50 = pct(ga, reps * pages, 50);
        printf("| %s | page fault to usable vs MPI_Get, median of %d single accesses (p90: %.1f us vs %.1f us) | %.1f us | %.1f us | %.2fx | <= 1.5x |\n", pr, reps * pages,
               pct(fa, reps * pages, 90) * 1e6, pct(ga, reps * pages, 90) * 1e6, f50 * 1e6, g50 * 1e6, f50 / g50);
        printf("| %s | floor without svm: SIGSEGV + mprotect on a private page, no fetch (floor + MPI_Get = %.2fx) | %.1f us | %.1f us | %.2fx | |\n", pr,
               (fl50 + g50) / g50, fl50 * 1e6, g50 * 1e6, fl50 / g50);
        printf("| %s | lock acquire (remote home, uncontended) vs MPI_Fetch_and_op | %.1f us | %.1f us | %.2fx | <= 2x |\n", pr, l * 1e6, o * 1e6, l / o);
        printf("| %s | barrier (np=%d, no shared writes) vs MPI_Barrier | %.1f us | %.1f us | %.2fx | |\n", pr, n, s * 1e6, m * 1e6, s / m);
        printf("| %s | diff creation / application throughput (%zu B pages, 1/8 of words changed) | %.2f GB/s | %.2f GB/s | | >= 2 GB/s |\n", pr, pg, cre, app);
    }
    MPI_Win_unlock_all(w);
    MPI_Win_free(&w);
    free(raw), free(dst), free(cur), free(tw), free(out), free(runs), free(home);
    svm_finalize();
    return 0;
}
