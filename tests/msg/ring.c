/* A token around the ring with blocking and nonblocking calls, then a Sendrecv shift. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int rank, size, errors = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    const int laps = 200;
    long token = 0;
    for (int lap = 0; lap < laps; lap++) {
        if (rank == 0) {
            token++;
            MPI_Send(&token, 1, MPI_LONG, next, lap, MPI_COMM_WORLD);
            MPI_Recv(&token, 1, MPI_LONG, prev, lap, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Request r;
            MPI_Irecv(&token, 1, MPI_LONG, prev, lap, MPI_COMM_WORLD, &r);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
            token++;
            MPI_Isend(&token, 1, MPI_LONG, next, lap, MPI_COMM_WORLD, &r);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
        }
    }
    if (rank == 0 && token != (long)laps * size) errors++;
    /* Shift a 1 MiB block right with Sendrecv: each rank must get its left neighbour's. */
    int n = 1 << 18;
    int *out = malloc(n * sizeof(int)), *in = malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) out[i] = rank * n + i;
    MPI_Status st;
    MPI_Sendrecv(out, n, MPI_INT, next, 9, in, n, MPI_INT, prev, 9, MPI_COMM_WORLD, &st);
    for (int i = 0; i < n; i++)
        if (in[i] != prev * n + i) { errors++; break; }
    if (st.MPI_SOURCE != prev) errors++;
    int total;
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("ring %s (token %ld after %d laps of %d ranks)\n", total ? "FAILED" : "ok", token, laps, size);
    free(out);
    free(in);
    MPI_Finalize();
    return total != 0;
}
