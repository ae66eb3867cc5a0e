/* One MPI benchmark source, compiled with huddle-cc, mpicc.openmpi and mpicc.mpich and run
 * with the same pinning by bench/msg/run. Prints "test size value" lines:
 *   pp_lat  one-way latency (us) of a ping-pong between ranks 0 and 1
 *   pp_bw   streaming bandwidth (MB/s, 1e6 B/s) rank 0 -> 1, windows of 32 Isends, 1 ack
 *   bcast, allreduce (doubles, SUM), alltoall (size = bytes per block): time per call (us)
 *   memcpy  this machine's memcpy bandwidth (MB/s) with rank 0's buffers (rank 0 only)
 *   pp_bw and memcpy at 64 MiB: both from DRAM (windows of 4)
 *   pp_bw_memcpy at 64 MiB: median over batches of (stream / a memcpy timed right after it,
 *           by rank 0 between the same barriers): DRAM bandwidth here drifts with the
 *           neighbours' load within seconds, so each stream is judged by its own memcpy
 * Each value is the median of 7 timed batches. Plain MPI. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCHES 7
static int rank, size;

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v) { qsort(v, BATCHES, sizeof *v, cmp); return v[BATCHES / 2]; }
static int iters_for(long bytes, int cap) {
    long it = (64l << 20) / (bytes > 0 ? bytes : 1);
    if (it > cap) it = cap;
    return it < 4 ? 4 : (int)it;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const long max = 4l << 20;
    char *a = malloc(max * size), *b = malloc(max * size);
    memset(a, 1, max * size);
    memset(b, 2, max * size);
    long sizes[] = {0, 1, 8, 64, 512, 4096, 32768, 262144, 1 << 20, 4 << 20};
    int ns = sizeof sizes / sizeof *sizes;
    double t[BATCHES];
    for (int s = 0; s < ns; s++) {
        long n = sizes[s];
        int it = iters_for(2 * n, 2000);
        for (int k = 0; k < BATCHES; k++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int i = 0; i < it; i++) {
                if (rank == 0) {
                    MPI_Send(a, n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                    MPI_Recv(b, n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else if (rank == 1) {
                    MPI_Recv(b, n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(a, n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
                }
            }
            t[k] = (MPI_Wtime() - t0) / it / 2 * 1e6;
        }
        if (rank == 0) printf("pp_lat %ld %.3f\n", n, median(t));
    }
    for (int s = 1; s < ns; s++) {
        long n = sizes[s];
        const int win = 32;
        int it = iters_for(win * n, 200);
        MPI_Request rq[32];
        for (int k = 0; k < BATCHES; k++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int i = 0; i < it; i++) {
                if (rank == 0) {
                    for (int w = 0; w < win; w++) MPI_Isend(a, n, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &rq[w]);
                    MPI_Waitall(win, rq, MPI_STATUSES_IGNORE);
                    MPI_Recv(b, 0, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else if (rank == 1) {
                    for (int w = 0; w < win; w++) MPI_Irecv(b, n, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &rq[w]);
                    MPI_Waitall(win, rq, MPI_STATUSES_IGNORE);
                    MPI_Send(a, 0, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
                }
            }
            double sec = MPI_Wtime() - t0;
            t[k] = (double)n * win * it / sec / 1e6;
        }
        if (rank == 0) printf("pp_bw %ld %.1f\n", n, median(t));
    }
    for (int s = 2; s < ns; s++) {
        long n = sizes[s];
        int it = iters_for(n * size, 1000);
        const char *names[] = {"bcast", "allreduce", "alltoall"};
        for (int c = 0; c < 3; c++) {
            for (int k = 0; k < BATCHES; k++) {
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = MPI_Wtime();
                for (int i = 0; i < it; i++) {
                    if (c == 0) MPI_Bcast(a, n, MPI_BYTE, i % size, MPI_COMM_WORLD);
                    else if (c == 1) MPI_Allreduce(a, b, n / 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
                    else MPI_Alltoall(a, n, MPI_BYTE, b, n, MPI_BYTE, MPI_COMM_WORLD);
                }
                t[k] = (MPI_Wtime() - t0) / it * 1e6;
            }
            double m = median(t);
            double worst;
            MPI_Allreduce(&m, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (rank == 0) printf("%s %ld %.3f\n", names[c], n, worst);
        }
    }
    if (rank == 0) {
        for (int s = 6; s < ns; s++) {
            long n = sizes[s];
            int it = iters_for(n, 5000);
            for (int k = 0; k < BATCHES; k++) {
                double t0 = MPI_Wtime();
                for (int i = 0; i < it; i++) { memcpy(b, a, n); a[i % n] ^= b[(i * 7) % n]; }
                t[k] = (double)n * it / (MPI_Wtime() - t0) / 1e6;
            }
            printf("memcpy %ld %.1f\n", n, median(t));
        }
    }
    /* 64 MiB: larger than every cache here, so both the stream and memcpy run from DRAM (the
     * usual meaning of a machine's memcpy bandwidth); windows of 4 messages. */
    {
        const long big = 64l << 20;
        const int win = 4;
        char *A = malloc(big), *B = malloc(big);
        memset(A, 3, big);
        memset(B, 4, big);
        MPI_Request rq[4];
        double paired[BATCHES];
        for (int k = 0; k < BATCHES; k++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            if (rank == 0) {
                for (int w = 0; w < win; w++) MPI_Isend(A, (int)big, MPI_BYTE, 1, 4, MPI_COMM_WORLD, &rq[w]);
                MPI_Waitall(win, rq, MPI_STATUSES_IGNORE);
                MPI_Recv(B, 0, MPI_BYTE, 1, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                for (int w = 0; w < win; w++) MPI_Irecv(B, (int)big, MPI_BYTE, 0, 4, MPI_COMM_WORLD, &rq[w]);
                MPI_Waitall(win, rq, MPI_STATUSES_IGNORE);
                MPI_Send(A, 0, MPI_BYTE, 0, 5, MPI_COMM_WORLD);
            }
            t[k] = (double)big * win / (MPI_Wtime() - t0) / 1e6;
            if (rank == 0) {
                double t1 = MPI_Wtime();
                memcpy(B, A, big);
                A[k] ^= B[k * 7];
                paired[k] = t[k] / ((double)big / (MPI_Wtime() - t1) / 1e6);
            }
        }
        if (rank == 0) printf("pp_bw %ld %.1f\n", big, median(t));
        if (rank == 0) printf("pp_bw_memcpy %ld %.3f\n", big, median(paired));
        if (rank == 0) {
            for (int k = 0; k < BATCHES; k++) {
                double t0 = MPI_Wtime();
                memcpy(B, A, big);
                A[k] ^= B[k * 7];
                t[k] = (double)big / (MPI_Wtime() - t0) / 1e6;
            }
            printf("memcpy %ld %.1f\n", big, median(t));
        }
        free(A);
        free(B);
    }
    free(a);
    free(b);
    MPI_Finalize();
    return 0;
}
