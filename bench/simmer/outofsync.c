/* SIMMer's out-of-sync communication benchmark: pairs (0,1), (2,3)...; in each half step one
 * side posts a large MPI_Isend and computes before completing it while the other receives and
 * then computes; then the roles swap. Above the eager limit the data waits at the sender while
 * it computes, and the receiver waits with it (64 KB to 4 MB in the thesis).
 * Usage: outofsync BYTES [ITERATIONS=50] [UNITS=5000] */
#include "common.h"

int main(int argc, char **argv)
{
    bench_init(&argc, &argv);
    long bytes = argc > 1 ? atol(argv[1]) : -1;
    int iters = argc > 2 ? atoi(argv[2]) : 50;
    long units = argc > 3 ? atol(argv[3]) : 5000;
    if (bytes < 0 || bytes > (1L << 30) || iters < 1 || units < 0 || nranks < 2 || nranks % 2) {
        if (me == 0) fprintf(stderr, "usage: outofsync BYTES [ITERATIONS] [UNITS], even number of ranks\n");
        MPI_Finalize();
        return 2;
    }
    int partner = me ^ 1;
    for (int r = 0; r < nranks; r++) expect(r, r ^ 1, (uint64_t)bytes * iters);
    char *s = xmalloc(bytes), *d = xmalloc(bytes);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    for (int i = 0; i < iters; i++) {
        for (int phase = 0; phase < 2; phase++) {
            if ((me & 1) == phase) {
                MPI_Request r;
                MPI_Isend(s, (int)bytes, MPI_CHAR, partner, phase, MPI_COMM_WORLD, &r);
                compute(units);
                MPI_Wait(&r, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(d, (int)bytes, MPI_CHAR, partner, phase, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                compute(units);
            }
        }
    }
    double el = now() - t0;
    free(s);
    free(d);
    char params[128];
    snprintf(params, sizeof params, "bytes=%ld iters=%d units=%ld", bytes, iters, units);
    bench_finish("outofsync", params, el);
    return 0;
}
