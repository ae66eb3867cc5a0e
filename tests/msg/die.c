/* A rank that dies: rank 1 kills itself (argv[1] = "kill") or exits without MPI_Finalize
 * ("exit") while the others wait for a message from it. The job must end with an error. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int rank, x = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
        if (argc > 1 && strcmp(argv[1], "exit") == 0) exit(0);
        kill(getpid(), SIGKILL);
    }
    MPI_Recv(&x, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("rank %d: received from a dead rank?\n", rank);
    MPI_Finalize();
    return 0;
}
