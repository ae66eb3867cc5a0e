/* Rank 1 dies (SIGSEGV) while rank 0 waits for it: the launcher must end the job. */
#include <mpi.h>
#include <signal.h>
int main(int argc, char **argv)
{
    int me, v = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == 1) raise(SIGSEGV);
    if (me == 0) MPI_Recv(&v, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Finalize();
    return 0;
}
