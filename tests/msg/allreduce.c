/* Allreduce and Reduce with every operator of the subset, several sizes, MPI_IN_PLACE, and
 * results checked against the value each rank can compute alone. Plain MPI. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int rank, size, errors;
#define CHECK(cond, ...) do { if (!(cond)) { if (errors++ < 5) { fprintf(stderr, "rank %d: ", rank); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } } while (0)

struct di { double v; int i; };
struct ii { int v; int i; };

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    /* 100003 and 600000 doubles take the ring (uneven and even blocks). */
    int counts[] = {1, 7, 1000, 100003, 600000};
    for (unsigned c = 0; c < sizeof counts / sizeof *counts; c++) {
        int n = counts[c];
        double *d = malloc(n * sizeof(double)), *dr = malloc(n * sizeof(double));
        long *l = malloc(n * sizeof(long)), *lr = malloc(n * sizeof(long));
        for (int i = 0; i < n; i++) { d[i] = rank + i * 0.5; l[i] = (long)(rank + 1) << (i % 40); }
        MPI_Allreduce(d, dr, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < n; i++) {
            double want = size * (size - 1) / 2.0 + size * i * 0.5;
            if (dr[i] != want) { CHECK(0, "SUM double n=%d i=%d got %g want %g", n, i, dr[i], want); break; }
        }
        MPI_Allreduce(d, dr, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        CHECK(dr[n - 1] == size - 1 + (n - 1) * 0.5, "MAX double n=%d", n);
        MPI_Allreduce(l, lr, n, MPI_LONG, MPI_BOR, MPI_COMM_WORLD);
        long bor = 0;
        for (int r = 0; r < size; r++) bor |= (long)(r + 1);
        CHECK(lr[0] == bor, "BOR long n=%d got %ld want %ld", n, lr[0], bor);
        MPI_Allreduce(MPI_IN_PLACE, l, n, MPI_LONG, MPI_BAND, MPI_COMM_WORLD);
        long band = -1;
        for (int r = 0; r < size; r++) band &= (long)(r + 1);
        CHECK(l[0] == band, "BAND in place n=%d got %ld want %ld", n, l[0], band);
        MPI_Reduce(d, dr, n, MPI_DOUBLE, MPI_MIN, size - 1, MPI_COMM_WORLD);
        if (rank == size - 1) CHECK(dr[n - 1] == (n - 1) * 0.5, "Reduce MIN at last rank n=%d", n);
        free(d); free(dr); free(l); free(lr);
    }
    int ip = rank + 1, prod;
    MPI_Allreduce(&ip, &prod, 1, MPI_INT, MPI_PROD, MPI_COMM_WORLD);
    int want = 1;
    for (int r = 1; r <= size; r++) want *= r;
    CHECK(prod == want, "PROD int got %d want %d", prod, want);
    /* MINLOC/MAXLOC: ranks tie on even values so the smaller index must win. */
    struct di in[2] = {{(double)(rank / 2), rank}, {(double)(rank % 3), rank}}, out[2];
    MPI_Allreduce(in, out, 2, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD);
    CHECK(out[0].v == 0 && out[0].i == 0, "MINLOC double_int got (%g,%d)", out[0].v, out[0].i);
    MPI_Allreduce(in, out, 2, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
    CHECK(out[0].v == (size - 1) / 2 && out[0].i == ((size - 1) / 2) * 2, "MAXLOC double_int got (%g,%d)", out[0].v, out[0].i);
    struct ii a = {100 - rank * rank, rank}, b;
    MPI_Allreduce(&a, &b, 1, MPI_2INT, MPI_MINLOC, MPI_COMM_WORLD);
    CHECK(b.v == 100 - (size - 1) * (size - 1) && b.i == size - 1, "MINLOC 2int got (%d,%d)", b.v, b.i);
    MPI_Allreduce(&a, &b, 1, MPI_2INT, MPI_MAXLOC, MPI_COMM_WORLD);
    CHECK(b.v == 100 && b.i == 0, "MAXLOC 2int got (%d,%d)", b.v, b.i);
    unsigned long long u = 1ull << rank, ur;
    MPI_Allreduce(&u, &ur, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    CHECK(ur == (1ull << size) - 1, "SUM uint64");
    float f = 1.5f, fr;
    MPI_Allreduce(&f, &fr, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(fr == 1.5f * size, "SUM float");
    int total;
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("allreduce %s\n", total ? "FAILED" : "ok");
    MPI_Finalize();
    return total != 0;
}
