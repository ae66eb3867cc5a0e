/* Bcast, Gather(v), Scatter, Allgather, Alltoall(v), Barrier, Comm_split/dup/free. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, errors;
#define CHECK(cond, ...) do { if (!(cond)) { if (errors++ < 5) { fprintf(stderr, "rank %d: ", rank); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } } while (0)

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int sizes[] = {1, 100, 5000, 300000, 1 << 20};
    for (unsigned s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int n = sizes[s], root = s % size;
        int *b = malloc(n * sizeof(int));
        for (int i = 0; i < n; i++) b[i] = rank == root ? i ^ n : -1;
        MPI_Bcast(b, n, MPI_INT, root, MPI_COMM_WORLD);
        for (int i = 0; i < n; i++) if (b[i] != (i ^ n)) { CHECK(0, "Bcast n=%d root=%d i=%d", n, root, i); break; }
        free(b);
        /* Alltoall: block for d from r holds r*1000+d. */
        int blk = n / size > 0 ? (n / size < 100000 ? n / size : 100000) : 1;
        int *sb = malloc((size_t)blk * size * sizeof(int)), *rb = malloc((size_t)blk * size * sizeof(int));
        for (int d = 0; d < size; d++) for (int i = 0; i < blk; i++) sb[d * blk + i] = rank * 1000 + d + i;
        MPI_Alltoall(sb, blk, MPI_INT, rb, blk, MPI_INT, MPI_COMM_WORLD);
        for (int r = 0; r < size; r++)
            for (int i = 0; i < blk; i++)
                if (rb[r * blk + i] != r * 1000 + rank + i) { CHECK(0, "Alltoall blk=%d from %d", blk, r); r = size; break; }
        free(sb); free(rb);
    }
    /* Gather / Scatter / Allgather. */
    int mine[3] = {rank, rank * rank, -rank}, all[3 * 64];
    MPI_Gather(mine, 3, MPI_INT, all, 3, MPI_INT, 1 % size, MPI_COMM_WORLD);
    if (rank == 1 % size) for (int r = 0; r < size; r++) CHECK(all[3 * r + 1] == r * r, "Gather from %d", r);
    MPI_Allgather(mine, 3, MPI_INT, all, 3, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++) CHECK(all[3 * r + 2] == -r, "Allgather from %d", r);
    int sc[64], got = -1;
    for (int r = 0; r < size; r++) sc[r] = 10 * r + 3;
    MPI_Scatter(sc, 1, MPI_INT, &got, 1, MPI_INT, 0, MPI_COMM_WORLD);
    CHECK(got == 10 * rank + 3, "Scatter got %d", got);
    /* Gatherv: rank r sends r+1 chars. */
    char v[64], gv[64 * 65];
    int rc[64], dis[64], off = 0;
    for (int r = 0; r < size; r++) { rc[r] = r + 1; dis[r] = off; off += r + 1; }
    memset(v, 'a' + rank, sizeof v);
    MPI_Gatherv(v, rank + 1, MPI_CHAR, gv, rc, dis, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank == 0) for (int r = 0; r < size; r++) CHECK(gv[dis[r] + r] == 'a' + r, "Gatherv from %d", r);
    /* Alltoallv: rank r sends d+1 ints to d. */
    int scount[64], sdis[64], rcount[64], rdis[64], so = 0, ro = 0;
    for (int d = 0; d < size; d++) { scount[d] = d + 1; sdis[d] = so; so += d + 1; rcount[d] = rank + 1; rdis[d] = ro; ro += rank + 1; }
    int *avs = malloc(so * sizeof(int)), *avr = malloc(ro * sizeof(int));
    for (int d = 0; d < size; d++) for (int i = 0; i < scount[d]; i++) avs[sdis[d] + i] = rank * 100 + d;
    MPI_Alltoallv(avs, scount, sdis, MPI_INT, avr, rcount, rdis, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++) CHECK(avr[rdis[r] + rank] == r * 100 + rank, "Alltoallv from %d", r);
    free(avs); free(avr);
    /* Split into even/odd with reversed keys, then dup and use both. */
    MPI_Comm half, copy;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half);
    int hr, hs;
    MPI_Comm_rank(half, &hr);
    MPI_Comm_size(half, &hs);
    CHECK(hs == (size + 1 - rank % 2) / 2, "split size %d", hs);
    int sum = rank, hsum;
    MPI_Allreduce(&sum, &hsum, 1, MPI_INT, MPI_SUM, half);
    int want = 0;
    for (int r = rank % 2; r < size; r += 2) want += r;
    CHECK(hsum == want, "split allreduce got %d want %d", hsum, want);
    MPI_Comm_dup(half, &copy);
    int token = hr == 0 ? 42 : -1;
    MPI_Bcast(&token, 1, MPI_INT, 0, copy);
    CHECK(token == 42, "Bcast on dup");
    if (hs > 1) {
        /* Messages on the dup must not match receives on the original. */
        if (hr == 0) {
            int x = 1, y = 2;
            MPI_Send(&x, 1, MPI_INT, 1, 5, copy);
            MPI_Send(&y, 1, MPI_INT, 1, 5, half);
        } else if (hr == 1) {
            int x = 0, y = 0;
            MPI_Recv(&y, 1, MPI_INT, 0, 5, half, MPI_STATUS_IGNORE);
            MPI_Recv(&x, 1, MPI_INT, 0, 5, copy, MPI_STATUS_IGNORE);
            CHECK(x == 1 && y == 2, "context isolation x=%d y=%d", x, y);
        }
    }
    MPI_Comm none;
    MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? MPI_UNDEFINED : 1, 0, &none);
    CHECK((rank == 0) == (none == MPI_COMM_NULL), "MPI_UNDEFINED color");
    if (none != MPI_COMM_NULL) MPI_Comm_free(&none);
    MPI_Comm_free(&copy);
    MPI_Comm_free(&half);
    CHECK(half == MPI_COMM_NULL, "Comm_free sets MPI_COMM_NULL");
    MPI_Barrier(MPI_COMM_WORLD);
    int total;
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("coll %s\n", total ? "FAILED" : "ok");
    MPI_Finalize();
    return total != 0;
}
