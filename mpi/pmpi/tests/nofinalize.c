/* Exits without MPI_Finalize after some traffic: the agent must say so, and nothing hangs. */
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    int me, n, v = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n > 1) MPI_Sendrecv_replace(&v, 1, MPI_INT, (me + 1) % n, 0, (me + n - 1) % n, 0, MPI_COMM_WORLD,
                                    MPI_STATUS_IGNORE);
    MPI_Barrier(MPI_COMM_WORLD);
    return 0;
}
