/* MPI_ERRORS_RETURN returns error classes for wrong arguments and truncation; with argv[1] =
 * "fatal", MPI_ERRORS_ARE_FATAL aborts the job on an invalid rank. Plain MPI. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int rank, size, errors;
static int class_of(int rc) { int c; MPI_Error_class(rc, &c); return c; }
#define EXPECT(call, want) do { int rc_ = (call); if (class_of(rc_) != (want)) { errors++; fprintf(stderr, "rank %d: %s returned %d, want %s\n", rank, #call, rc_, #want); } } while (0)

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int buf[10] = {0};
    if (argc > 1 && strcmp(argv[1], "fatal") == 0) {
        if (rank == 0) MPI_Send(buf, 1, MPI_INT, size + 3, 0, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Finalize();
        return 0;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    EXPECT(MPI_Send(buf, 1, MPI_INT, size, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    EXPECT(MPI_Send(buf, 1, MPI_INT, 0, -5, MPI_COMM_WORLD), MPI_ERR_TAG);
    EXPECT(MPI_Send(buf, -1, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_COUNT);
    EXPECT(MPI_Bcast(buf, 1, MPI_INT, size + 1, MPI_COMM_WORLD), MPI_ERR_ROOT);
    EXPECT(MPI_Allreduce(buf, buf + 5, 1, MPI_INT, MPI_MINLOC, MPI_COMM_WORLD), MPI_ERR_OP);
#ifdef HUDDLE_MSG
    EXPECT(MPI_Send(buf, 1, (MPI_Datatype)999, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    EXPECT(MPI_Send(buf, 1, MPI_INT, 0, 0, (MPI_Comm)77), MPI_ERR_COMM);
#endif
    if (size >= 2 && rank < 2) {
        if (rank == 0) {
            MPI_Send(buf, 10, MPI_INT, 1, 3, MPI_COMM_WORLD);
        } else {
            MPI_Status st;
            EXPECT(MPI_Recv(buf, 5, MPI_INT, 0, 3, MPI_COMM_WORLD, &st), MPI_ERR_TRUNCATE);
        }
    }
    int total;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("errors %s\n", total ? "FAILED" : "ok");
    MPI_Finalize();
    return total != 0;
}
