/* MPI_ERRORS_RETURN returns error classes for wrong arguments and truncation; with argv[1] =
 * "fatal", MPI_ERRORS_ARE_FATAL aborts the job on an invalid rank. Plain MPI. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, size, errors;
static int class_of(int rc) { int c; MPI_Error_class(rc, &c); return c; }
#define EXPECT(call, want) do { int rc_ = (call); if (class_of(rc_) != (want)) { errors++; fprintf(stderr, "rank %d: %s returned %d, want %s\n", rank, #call, rc_, #want); } } while (0)

#ifdef HUDDLE_MSG
/* Two threads in MPI at once (beyond MPI_THREAD_SERIALIZED): the second call must fail, not
 * corrupt the library. Rank 1's helper thread blocks in MPI_Recv until rank 0 sends, which
 * rank 0 does only once rank 1 has made its overlapping call and dropped a marker file. */
static volatile int in_recv;
static void *blocked_recv(void *arg) {
    int v;
    in_recv = 1;
    *(int *)arg = MPI_Recv(&v, 1, MPI_INT, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return NULL;
}
static void overlapping_calls(void) {
    char marker[64];
    snprintf(marker, sizeof marker, "/tmp/huddle-errors-%d", (int)getppid());
    if (rank == 0) {
        for (int i = 0; i < 30000 && access(marker, F_OK) != 0; i++) usleep(1000);
        unlink(marker);
        int v = 7;
        MPI_Send(&v, 1, MPI_INT, 1, 9, MPI_COMM_WORLD);
    } else if (rank == 1) {
        int rc = -1, n;
        pthread_t t;
        pthread_create(&t, NULL, blocked_recv, &rc);
        while (!in_recv) usleep(1000);
        /* Once the helper is inside MPI_Recv (which waits for the marker), calls must fail. */
        int got = MPI_SUCCESS;
        for (int i = 0; i < 10000 && got == MPI_SUCCESS; i++) {
            got = MPI_Comm_size(MPI_COMM_WORLD, &n);
            if (got == MPI_SUCCESS) usleep(1000);
        }
        EXPECT(got, MPI_ERR_OTHER);
        fclose(fopen(marker, "w"));
        pthread_join(t, NULL);
        if (rc != MPI_SUCCESS) { errors++; fprintf(stderr, "rank 1: blocked MPI_Recv returned %d\n", rc); }
    }
}
#endif

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
    if (size >= 2) overlapping_calls();
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
