/* SIMMer's communication idleness benchmark: ranks work in pairs (0,1), (2,3), ...; pair k
 * computes base * (1 + (ratio - 1) * k / (pairs - 1)) units between exchanges, so the pair
 * computing least waits most. Idleness ratio = most / least computation (1 to 4 in the thesis).
 * Usage: idleness RATIO [ITERATIONS=200] [BYTES=65536] [BASE_UNITS=2000] */
#include "common.h"

int main(int argc, char **argv)
{
    bench_init(&argc, &argv);
    double ratio = argc > 1 ? atof(argv[1]) : 0;
    int iters = argc > 2 ? atoi(argv[2]) : 200, bytes = argc > 3 ? atoi(argv[3]) : 65536;
    long base = argc > 4 ? atol(argv[4]) : 2000;
    if (ratio < 1 || iters < 1 || bytes < 0 || base < 0 || nranks < 2 || nranks % 2) {
        if (me == 0) fprintf(stderr, "usage: idleness RATIO>=1 [ITERATIONS] [BYTES] [BASE_UNITS], even number of ranks\n");
        MPI_Finalize();
        return 2;
    }
    int pairs = nranks / 2, pair = me / 2, partner = me ^ 1;
    long work = (long)(base * (1 + (ratio - 1) * (pairs > 1 ? (double)pair / (pairs - 1) : 1)));
    for (int r = 0; r < nranks; r++) expect(r, r ^ 1, (uint64_t)bytes * iters);
    char *s = xmalloc(bytes), *d = xmalloc(bytes);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    for (int i = 0; i < iters; i++) {
        compute(work);
        MPI_Sendrecv(s, bytes, MPI_CHAR, partner, 0, d, bytes, MPI_CHAR, partner, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    double el = now() - t0;
    free(s);
    free(d);
    char params[128];
    snprintf(params, sizeof params, "ratio=%g iters=%d bytes=%d base=%ld", ratio, iters, bytes, base);
    bench_finish("idleness", params, el);
    return 0;
}
