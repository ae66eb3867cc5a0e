/* Known traffic for the PMPI agent's tests: every pattern below sends an amount that this
 * program also adds, by plain arithmetic, to an expected matrix (row = sender, world ranks,
 * bytes). Rank 0 writes that matrix to argv[1]; the test compares it with what the agent wrote
 * to $HUDDLE_RANK_MATRIX. argv[2] (optional): "p2p" runs only point-to-point patterns, "all"
 * (default) adds the collectives under the model of docs/pmpi.md. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n, me;
static uint64_t *expect;

static void exp_add(int from, int to, uint64_t bytes) { expect[(size_t)from * n + to] += bytes; }

static char *buffer(size_t bytes)
{
    char *b = calloc(bytes ? bytes : 1, 1);
    if (!b) {
        fprintf(stderr, "traffic: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    return b;
}

/* Ring with MPI_Sendrecv: rank r sends 1000 * (r + 1) bytes to r + 1. */
static void ring(void)
{
    for (int r = 0; r < n; r++) exp_add(r, (r + 1) % n, 1000u * (r + 1));
    char *s = buffer(1000u * n), *d = buffer(1000u * n);
    MPI_Sendrecv(s, 1000 * (me + 1), MPI_CHAR, (me + 1) % n, 1, d, 1000 * n, MPI_CHAR, (me + n - 1) % n, 1,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    free(s);
    free(d);
}

/* All pairs, nonblocking, MPI_Waitall: i sends (i + 1) * (j + 2) ints to j (including j == i). */
static void all_pairs(void)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) exp_add(i, j, 4u * (i + 1) * (j + 2));
    MPI_Request *rq = malloc(2 * (size_t)n * sizeof *rq);
    int **in = malloc((size_t)n * sizeof *in), **out = malloc((size_t)n * sizeof *out);
    if (!rq || !in || !out) MPI_Abort(MPI_COMM_WORLD, 3);
    for (int j = 0; j < n; j++) {
        in[j] = (int *)buffer(4u * (j + 1) * (me + 2));
        MPI_Irecv(in[j], (j + 1) * (me + 2), MPI_INT, j, 2, MPI_COMM_WORLD, &rq[j]);
    }
    for (int j = 0; j < n; j++) {
        out[j] = (int *)buffer(4u * (me + 1) * (j + 2));
        MPI_Isend(out[j], (me + 1) * (j + 2), MPI_INT, j, 2, MPI_COMM_WORLD, &rq[n + j]);
    }
    MPI_Waitall(2 * n, rq, MPI_STATUSES_IGNORE);
    for (int j = 0; j < n; j++) {
        free(in[j]);
        free(out[j]);
    }
    free(in);
    free(out);
    free(rq);
}

/* Pairs (0,1), (2,3)...: blocking Ssend then Recv, 3 doubles-of-3 (a derived type, 72 bytes);
 * then an Isend completed with MPI_Test, then a Sendrecv_replace of 7 shorts; a send to
 * MPI_PROC_NULL counts nothing. */
static void pairs(void)
{
    MPI_Datatype triple;
    MPI_Type_contiguous(3, MPI_DOUBLE, &triple);
    MPI_Type_commit(&triple);
    for (int i = 0; i + 1 < n; i += 2) {
        exp_add(i, i + 1, 72 + 5 + 14);
        exp_add(i + 1, i, 72 + 5 + 14);
    }
    double d[9] = {0};
    char c[5] = {0};
    short sh[7] = {0};
    int partner = (me % 2 == 0) ? me + 1 : me - 1;
    if (partner < n) {
        if (me % 2 == 0) {
            MPI_Ssend(d, 3, triple, partner, 3, MPI_COMM_WORLD);
            MPI_Recv(d, 3, triple, partner, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(d, 3, triple, partner, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(d, 3, triple, partner, 3, MPI_COMM_WORLD);
        }
        MPI_Request r[2];
        char cin[5];
        MPI_Irecv(cin, 5, MPI_CHAR, partner, 4, MPI_COMM_WORLD, &r[0]);
        MPI_Isend(c, 5, MPI_CHAR, partner, 4, MPI_COMM_WORLD, &r[1]);
        int done = 0;
        while (!done) MPI_Testall(2, r, &done, MPI_STATUSES_IGNORE);
        MPI_Sendrecv_replace(sh, 7, MPI_SHORT, partner, 5, partner, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Send(d, 9, MPI_DOUBLE, MPI_PROC_NULL, 6, MPI_COMM_WORLD);
    MPI_Type_free(&triple);
}

/* A sub-communicator whose ranks differ from the world's: split by parity, ordered by
 * descending world rank; each member sends 100 + world rank bytes to the next member. */
static void subcomm(void)
{
    for (int parity = 0; parity < 2; parity++) {
        int members[1024], m = 0;
        for (int w = n - 1; w >= 0; w--)
            if (w % 2 == parity) members[m++] = w;
        for (int k = 0; m > 1 && k < m; k++) exp_add(members[k], members[(k + 1) % m], 100u + members[k]);
    }
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, me % 2, -me, &sub);
    int sr, ss;
    MPI_Comm_rank(sub, &sr);
    MPI_Comm_size(sub, &ss);
    if (ss > 1) {
        char *s = buffer(100u + me), *d = buffer(100u + n);
        MPI_Request r;
        MPI_Irecv(d, 100 + n, MPI_CHAR, (sr + ss - 1) % ss, 7, sub, &r);
        MPI_Send(s, 100 + me, MPI_CHAR, (sr + 1) % ss, 7, sub);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        free(s);
        free(d);
    }
    MPI_Comm_free(&sub);
}

/* Collectives under the documented logical model. */
static void collectives(void)
{
    int root = n > 1 ? 1 : 0;
    int big = 64;
    int *a = (int *)buffer(4u * big * (size_t)n), *b = (int *)buffer(4u * big * (size_t)n);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (i == j) continue;
            if (i == root) exp_add(i, j, 400);      /* Bcast 100 ints from root */
            if (j == 0) exp_add(i, j, 20);          /* Reduce 5 ints to 0 */
            exp_add(i, j, 80);                      /* Allreduce 10 doubles */
            exp_add(i, j, 12);                      /* Alltoall 3 ints */
            exp_add(i, j, 8);                       /* Allgather 2 ints */
            if (j == root) exp_add(i, j, 24);       /* Gather 6 ints to root */
            if (i == 0) exp_add(i, j, 4u * (j + 1)); /* Scatterv j+1 ints from 0 */
            if (j > i) exp_add(i, j, 16);           /* Scan 2 doubles */
        }
    MPI_Bcast(a, 100, MPI_INT, root, MPI_COMM_WORLD);
    MPI_Reduce(a, b, 5, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, a, 10, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Alltoall(a, 3, MPI_INT, b, 3, MPI_INT, MPI_COMM_WORLD);
    MPI_Allgather(a, 2, MPI_INT, b, 2, MPI_INT, MPI_COMM_WORLD);
    MPI_Gather(a, 6, MPI_INT, b, 6, MPI_INT, root, MPI_COMM_WORLD);
    int counts[1024], displs[1024];
    for (int j = 0; j < n; j++) {
        counts[j] = j + 1;
        displs[j] = j * big;
    }
    MPI_Scatterv(a, counts, displs, MPI_INT, b, me + 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Scan(a, b, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    free(a);
    free(b);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc < 2 || n > 1024) {
        if (me == 0) fprintf(stderr, "usage: traffic EXPECTED.csv [p2p|all] (at most 1024 ranks)\n");
        MPI_Finalize();
        return 2;
    }
    expect = calloc((size_t)n * n, sizeof *expect);
    if (!expect) MPI_Abort(MPI_COMM_WORLD, 3);
    ring();
    all_pairs();
    pairs();
    subcomm();
    if (argc < 3 || strcmp(argv[2], "p2p") != 0) collectives();
    if (me == 0) {
        FILE *f = fopen(argv[1], "w");
        if (!f) {
            perror(argv[1]);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                fprintf(f, "%llu%c", (unsigned long long)expect[(size_t)i * n + j], j + 1 < n ? ',' : '\n');
        fclose(f);
    }
    free(expect);
    MPI_Finalize();
    return 0;
}
