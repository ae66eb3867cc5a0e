/* Shared by SIMMer's synthetic benchmarks: fixed units of computation (so a core with less
 * effective capability takes longer), timing, and the known traffic matrix written for the
 * PMPI agent's accuracy check (env BENCH_EXPECTED=path: rank 0 writes the bytes each rank sends
 * each other rank, row = sender, under the agent's documented model). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int me, nranks;
static uint64_t *expected;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One unit is about a microsecond of floating-point work on a 2020s core. */
static inline double compute(long units)
{
    volatile double x = 1.0;
    for (long i = 0; i < units * 250; i++) x = x * 1.0000001 + 1e-9;
    return x;
}

static void *xmalloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    if (!p) {
        fprintf(stderr, "benchmark: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    return p;
}

static void bench_init(int *argc, char ***argv)
{
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    expected = xmalloc((size_t)nranks * nranks * sizeof *expected);
}

static void expect(int from, int to, uint64_t bytes)
{
    if (from >= 0 && to >= 0 && from < nranks && to < nranks) expected[(size_t)from * nranks + to] += bytes;
}

/* Reduces the elapsed time to rank 0 (MAX), prints one line, writes the expected matrix. */
static void bench_finish(const char *name, const char *params, double elapsed)
{
    double worst = 0;
    for (int i = 1; i < nranks; i++) expect(i, 0, sizeof(double)); /* the MPI_Reduce below */
    MPI_Reduce(&elapsed, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    const char *path = getenv("BENCH_EXPECTED");
    if (me == 0) {
        printf("%s %s ranks=%d time_s=%.4f\n", name, params, nranks, worst);
        if (path && *path) {
            FILE *f = fopen(path, "w");
            if (!f) {
                perror(path);
            } else {
                for (int i = 0; i < nranks; i++)
                    for (int j = 0; j < nranks; j++)
                        fprintf(f, "%llu%c", (unsigned long long)expected[(size_t)i * nranks + j],
                                j + 1 < nranks ? ',' : '\n');
                fclose(f);
            }
        }
    }
    free(expected);
    MPI_Finalize();
}
