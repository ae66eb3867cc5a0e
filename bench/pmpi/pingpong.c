/* PMPI agent overhead: ping-pong latency between ranks 0 and 1 (each half round trip crosses
 * one wrapped MPI_Send and one wrapped MPI_Recv), and the cost of trivial calls on
 * MPI_COMM_SELF (a barrier: the time-split bookkeeping; a 1-int allreduce: plus the
 * communicator lookup and traffic model). Run it with and without the agent preloaded.
 * Usage: pingpong [ITERATIONS=200000] [BYTES=8] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int me, n;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int iters = argc > 1 ? atoi(argv[1]) : 200000, bytes = argc > 2 ? atoi(argv[2]) : 8;
    if (n != 2 || iters < 10 || bytes < 0) {
        if (me == 0) fprintf(stderr, "usage: pingpong [ITERATIONS>=10] [BYTES] with exactly 2 ranks\n");
        MPI_Finalize();
        return 2;
    }
    char *buf = calloc(bytes ? bytes : 1, 1);
    if (!buf) MPI_Abort(MPI_COMM_WORLD, 3);
    int warm = iters / 10;
    double t0 = 0;
    for (int i = 0; i < warm + iters; i++) {
        if (i == warm) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = now();
        }
        if (me == 0) {
            MPI_Send(buf, bytes, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(buf, bytes, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, bytes, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, bytes, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
        }
    }
    double half_us = (now() - t0) / iters / 2 * 1e6;
    MPI_Barrier(MPI_COMM_WORLD);
    /* Trivial calls, rank 0 alone. */
    double bar_ns = 0, red_ns = 0;
    if (me == 0) {
        int x = 1, y;
        int calls = iters * 5;
        t0 = now();
        for (int i = 0; i < calls; i++) MPI_Barrier(MPI_COMM_SELF);
        bar_ns = (now() - t0) / calls * 1e9;
        t0 = now();
        for (int i = 0; i < calls; i++) MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_SELF);
        red_ns = (now() - t0) / calls * 1e9;
        printf("pingpong bytes=%d iters=%d half_rtt_us=%.4f self_barrier_ns=%.1f self_allreduce_ns=%.1f\n", bytes,
               iters, half_us, bar_ns, red_ns);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
