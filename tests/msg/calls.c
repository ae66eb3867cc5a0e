/* The calls and datatypes the other tests leave out: Initialized (before and after Init),
 * Init_thread, Wtick, Test, Testall, Waitany, Iprobe, Get_count giving MPI_UNDEFINED,
 * LONG_LONG and UNSIGNED_LONG, Gather with MPI_IN_PLACE at a root other than 0,
 * Comm_split's key order, and errors of request calls going to the handler of the request's
 * communicator. `calls abort`: rank 1 calls MPI_Abort(MPI_COMM_WORLD, 3) while the others
 * wait in a barrier. Plain MPI: `tests/msg/run --peers` runs it under Open MPI too. */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int rank = -1, size, errors;
#define CHECK(cond, ...) do { if (!(cond)) { if (errors++ < 8) { fprintf(stderr, "calls rank %d: ", rank); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } } while (0)

static int class_of(int rc) { int c; MPI_Error_class(rc, &c); return c; }

int main(int argc, char **argv) {
    int flag = -1, provided = -1;
    MPI_Initialized(&flag);
    CHECK(flag == 0, "MPI_Initialized before MPI_Init gave %d", flag);
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    CHECK(provided == MPI_THREAD_FUNNELED, "Init_thread provided %d", provided);
    MPI_Initialized(&flag);
    CHECK(flag == 1, "MPI_Initialized after MPI_Init gave %d", flag);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 1 && strcmp(argv[1], "abort") == 0) {
        if (rank == 1) MPI_Abort(MPI_COMM_WORLD, 3);
        MPI_Barrier(MPI_COMM_WORLD);
        fprintf(stderr, "calls rank %d: the barrier ended although rank 1 aborted\n", rank);
        return 0;
    }
    double tick = MPI_Wtick(), t0 = MPI_Wtime(), t1;
    CHECK(tick > 0 && tick <= 1e-3, "Wtick %g", tick);
    do t1 = MPI_Wtime(); while (t1 == t0);
    CHECK(t1 > t0, "Wtime went back");

    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    MPI_Status st;
    /* Test and Testall on receives nothing can match yet: the sends follow a barrier. */
    long long ll = (1LL << 40) + rank, got_ll = 0;
    unsigned long ul = ULONG_MAX - rank, got_ul = 0;
    MPI_Request r[4];
    MPI_Irecv(&got_ll, 1, MPI_LONG_LONG, prev, 1, MPI_COMM_WORLD, &r[0]);
    MPI_Irecv(&got_ul, 1, MPI_UNSIGNED_LONG, prev, 2, MPI_COMM_WORLD, &r[1]);
    flag = -1;
    MPI_Test(&r[0], &flag, &st);
    CHECK(flag == 0 && r[0] != MPI_REQUEST_NULL, "Test of an unmatched receive: flag %d", flag);
    MPI_Testall(2, r, &flag, MPI_STATUSES_IGNORE);
    CHECK(flag == 0 && r[1] != MPI_REQUEST_NULL, "Testall of unmatched receives: flag %d", flag);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Isend(&ll, 1, MPI_LONG_LONG, next, 1, MPI_COMM_WORLD, &r[2]);
    MPI_Isend(&ul, 1, MPI_UNSIGNED_LONG, next, 2, MPI_COMM_WORLD, &r[3]);
    /* Waitany: each receive once, then MPI_UNDEFINED when only null requests are left. */
    int i1 = -1, i2 = -1, i3 = -1;
    MPI_Waitany(2, r, &i1, &st);
    MPI_Waitany(2, r, &i2, &st);
    MPI_Waitany(2, r, &i3, &st);
    CHECK((i1 == 0 && i2 == 1) || (i1 == 1 && i2 == 0), "Waitany gave %d then %d", i1, i2);
    CHECK(i3 == MPI_UNDEFINED, "Waitany over null requests gave %d", i3);
    CHECK(r[0] == MPI_REQUEST_NULL && r[1] == MPI_REQUEST_NULL, "Waitany left a request");
    CHECK(got_ll == (1LL << 40) + prev, "LONG_LONG got %lld", got_ll);
    CHECK(got_ul == ULONG_MAX - prev, "UNSIGNED_LONG got %lu", got_ul);
    do MPI_Testall(2, &r[2], &flag, MPI_STATUSES_IGNORE); while (!flag);
    CHECK(r[2] == MPI_REQUEST_NULL && r[3] == MPI_REQUEST_NULL, "Testall left a request");
    MPI_Test(&r[2], &flag, &st);
    CHECK(flag == 1, "Test of a null request: flag %d", flag);

    /* Iprobe: nothing with tag 7 before the barrier; after it, 6 bytes from prev. */
    MPI_Iprobe(MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &flag, &st);
    CHECK(flag == 0, "Iprobe found a message nobody sent");
    MPI_Barrier(MPI_COMM_WORLD);
    char six[6] = "abcde", in[6];
    MPI_Request sq;
    MPI_Isend(six, 6, MPI_CHAR, next, 7, MPI_COMM_WORLD, &sq);
    do MPI_Iprobe(MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &flag, &st); while (!flag);
    CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 7, "Iprobe: source %d tag %d", st.MPI_SOURCE, st.MPI_TAG);
    int count = -1;
    MPI_Get_count(&st, MPI_CHAR, &count);
    CHECK(count == 6, "Get_count CHAR %d", count);
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(count == MPI_UNDEFINED, "Get_count INT of 6 bytes gave %d", count);
    MPI_Recv(in, 6, MPI_CHAR, prev, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(memcmp(in, six, 6) == 0, "Iprobe'd message content");
    MPI_Wait(&sq, MPI_STATUS_IGNORE);

    /* Reductions on the two 64-bit types. */
    long long part = (1LL << 40) * (rank + 1), sum = 0;
    MPI_Allreduce(&part, &sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    CHECK(sum == (1LL << 40) * size * (size + 1) / 2, "LONG_LONG SUM %lld", sum);
    unsigned long mine_ul = ULONG_MAX - rank, least = 0;
    MPI_Allreduce(&mine_ul, &least, 1, MPI_UNSIGNED_LONG, MPI_MIN, MPI_COMM_WORLD);
    CHECK(least == ULONG_MAX - (unsigned long)(size - 1), "UNSIGNED_LONG MIN %lu", least);

    /* Gather in place at the last rank: its own block stays where it is. */
    int root = size - 1, mine[3] = {rank, rank * rank, -rank}, all[3 * 64];
    if (rank == root) {
        for (int k = 0; k < 3 * size; k++) all[k] = -7;
        memcpy(&all[3 * root], mine, sizeof mine);
        MPI_Gather(MPI_IN_PLACE, 0, MPI_INT, all, 3, MPI_INT, root, MPI_COMM_WORLD);
        for (int q = 0; q < size; q++)
            CHECK(all[3 * q] == q && all[3 * q + 1] == q * q && all[3 * q + 2] == -q,
                  "Gather in place: block of %d is %d %d %d", q, all[3 * q], all[3 * q + 1], all[3 * q + 2]);
    } else {
        MPI_Gather(mine, 3, MPI_INT, NULL, 0, MPI_INT, root, MPI_COMM_WORLD);
    }

    /* Comm_split orders by key, ties by old rank. */
    MPI_Comm rev, same;
    int hr;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &rev);
    MPI_Comm_rank(rev, &hr);
    CHECK(hr == (size - 1 - rank) / 2, "split with key -rank: new rank %d", hr);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, 0, &same);
    MPI_Comm_rank(same, &hr);
    CHECK(hr == rank / 2, "split with equal keys: new rank %d", hr);
    MPI_Comm_free(&rev);
    MPI_Comm_free(&same);

    /* A truncated receive on a communicator with MPI_ERRORS_RETURN returns the error from
     * Wait (`calls waitall`: from Waitall), although MPI_COMM_WORLD keeps
     * MPI_ERRORS_ARE_FATAL. One truncation per job: after one, Open MPI 4.1 never completes
     * a second truncated receive (MPI leaves the state after an error to the
     * implementation), and `tests/msg/run --peers` runs this file under it too. */
    int waitall = argc > 1 && strcmp(argv[1], "waitall") == 0;
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    int two[2] = {1, 2}, one = 0;
    MPI_Request rq[2];
    MPI_Irecv(&one, 1, MPI_INT, prev, 9, dup, &rq[0]);
    MPI_Isend(two, 2, MPI_INT, next, 9, dup, &rq[1]);
    if (!waitall) {
        int rc = MPI_Wait(&rq[0], &st);
        CHECK(class_of(rc) == MPI_ERR_TRUNCATE, "Wait on a truncated receive returned %d", rc);
    } else {
        /* The receive alone: other requests of a failed Waitall may be left pending. */
        MPI_Status sts[1];
        int rc = MPI_Waitall(1, rq, sts);
        CHECK(rc == MPI_ERR_IN_STATUS && class_of(sts[0].MPI_ERROR) == MPI_ERR_TRUNCATE,
              "Waitall with a truncated receive returned %d (status error %d)", rc, sts[0].MPI_ERROR);
    }
    MPI_Wait(&rq[1], MPI_STATUS_IGNORE);
    MPI_Comm_free(&dup);

    int total;
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("calls %s\n", total ? "FAILED" : "ok");
    MPI_Finalize();
    return total != 0;
}
