/* Known time split: rank 0 posts a 4 MB MPI_Isend to rank 1, computes for 300 ms (wall clock)
 * with that send pending, then waits for it and sends a small message that rank 1 has been
 * blocked on all along. The board must show >= 250 ms of compute-with-pending-sends on rank 0
 * and >= 150 ms blocked on rank 1 (lower bounds only, with room for rank 1 being scheduled late
 * after the barrier on a loaded machine). */
#include <mpi.h>
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
    int me, n, small = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    char *big = calloc(4 << 20, 1);
    if (!big || n < 2) MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == 0) {
        MPI_Request r;
        MPI_Isend(big, 4 << 20, MPI_CHAR, 1, 0, MPI_COMM_WORLD, &r);
        volatile double x = 0;
        double t0 = now();
        while (now() - t0 < 0.3) x += 1.0;
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        MPI_Send(&small, 1, MPI_INT, 1, 1, MPI_COMM_WORLD);
    } else if (me == 1) {
        MPI_Recv(big, 4 << 20, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Recv(&small, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    free(big);
    MPI_Finalize();
    return 0;
}
