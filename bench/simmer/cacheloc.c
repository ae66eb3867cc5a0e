/* SIMMer's cache locality benchmark: the first two pairs (ranks 0-3) carry the heavy traffic
 * (on a cluster: inter-node) and work on the data they receive; the other pairs compute on
 * private data and exchange little. LOAD scales the computation per step.
 * Usage: cacheloc LOAD [ITERATIONS=100] [HEAVY_BYTES=1048576] [LIGHT_BYTES=4096] */
#include "common.h"

int main(int argc, char **argv)
{
    bench_init(&argc, &argv);
    int load = argc > 1 ? atoi(argv[1]) : 0, iters = argc > 2 ? atoi(argv[2]) : 100;
    int heavy = argc > 3 ? atoi(argv[3]) : 1 << 20, light = argc > 4 ? atoi(argv[4]) : 4096;
    if (load < 1 || iters < 1 || heavy < 8 || light < 8 || nranks < 2 || nranks % 2) {
        if (me == 0) fprintf(stderr, "usage: cacheloc LOAD>=1 [ITERATIONS] [HEAVY_BYTES] [LIGHT_BYTES], even number of ranks\n");
        MPI_Finalize();
        return 2;
    }
    int partner = me ^ 1, talker = me < 4;
    int bytes = talker ? heavy : light;
    for (int r = 0; r < nranks; r++) expect(r, r ^ 1, (uint64_t)(r < 4 ? heavy : light) * iters);
    double *s = xmalloc(bytes), *d = xmalloc(bytes), *priv = xmalloc(256 << 10);
    size_t nd = (size_t)bytes / sizeof(double), np = (256 << 10) / sizeof(double);
    volatile double sum = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    for (int i = 0; i < iters; i++) {
        MPI_Sendrecv(s, bytes, MPI_CHAR, partner, 0, d, bytes, MPI_CHAR, partner, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        /* Talkers work on what arrived; the others on their own array. */
        double *data = talker ? d : priv;
        size_t n = talker ? nd : np;
        for (int l = 0; l < load; l++)
            for (size_t k = 0; k < n; k++) sum += data[k] * 1.0000001;
        for (size_t k = 0; k < nd; k++) s[k] = sum;
    }
    double el = now() - t0;
    free(s);
    free(d);
    free(priv);
    char params[128];
    snprintf(params, sizeof params, "load=%d iters=%d heavy=%d light=%d", load, iters, heavy, light);
    bench_finish("cacheloc", params, el);
    return 0;
}
