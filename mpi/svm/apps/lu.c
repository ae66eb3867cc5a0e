/* Blocked LU (no pivoting, diagonally dominant matrix); blocks owned cyclically.  Checked
 * against the same factorisation run sequentially. */
#include "common.h"

static int n, b, nb;
static double initv(int i, int j) { return i == j ? 2.0 * n : 1.0 / (1 + i + 2 * j) + ((i * 7 + j * 3) % 11) * 0.01; }
#define BLK(M, I, J) ((M) + ((size_t)(I) * nb + (J)) * b * b) /* block-contiguous layout */
static int owner(int I, int J) { return (I * nb + J) % N; }

static void factor_diag(double *d) {
    for (int k = 0; k < b; k++)
        for (int i = k + 1; i < b; i++) {
            d[i * b + k] /= d[k * b + k];
            for (int j = k + 1; j < b; j++) d[i * b + j] -= d[i * b + k] * d[k * b + j];
        }
}
static void lower_solve(const double *d, double *a) { /* a = a * U^-1 (block below diagonal) */
    for (int i = 0; i < b; i++)
        for (int k = 0; k < b; k++) {
            a[i * b + k] /= d[k * b + k];
            for (int j = k + 1; j < b; j++) a[i * b + j] -= a[i * b + k] * d[k * b + j];
        }
}
static void upper_solve(const double *d, double *a) { /* a = L^-1 * a (block right of diagonal) */
    for (int k = 0; k < b; k++)
        for (int i = k + 1; i < b; i++)
            for (int j = 0; j < b; j++) a[i * b + j] -= d[i * b + k] * a[k * b + j];
}
static void update(double *c, const double *l, const double *u) {
    for (int i = 0; i < b; i++)
        for (int k = 0; k < b; k++)
            for (int j = 0; j < b; j++) c[i * b + j] -= l[i * b + k] * u[k * b + j];
}
static void lu(double *M, int par) {
    for (int K = 0; K < nb; K++) {
        if (!par || owner(K, K) == R) factor_diag(BLK(M, K, K));
        if (par) svm_barrier();
        for (int I = K + 1; I < nb; I++) {
            if (!par || owner(I, K) == R) lower_solve(BLK(M, K, K), BLK(M, I, K));
            if (!par || owner(K, I) == R) upper_solve(BLK(M, K, K), BLK(M, K, I));
        }
        if (par) svm_barrier();
        for (int I = K + 1; I < nb; I++)
            for (int J = K + 1; J < nb; J++)
                if (!par || owner(I, J) == R) update(BLK(M, I, J), BLK(M, I, K), BLK(M, K, J));
        if (par) svm_barrier();
    }
}
static void fill(double *M, int par) {
    for (int I = 0; I < nb; I++)
        for (int J = 0; J < nb; J++)
            if (!par || owner(I, J) == R)
                for (int i = 0; i < b; i++)
                    for (int j = 0; j < b; j++) BLK(M, I, J)[i * b + j] = initv(I * b + i, J * b + j);
}
int main(int argc, char **argv) {
    app_init(&argc, &argv);
    int sz = app_size(argc, argv);
    n = sz == 0 ? 128 : sz == 1 ? 384 : 768;
    b = 32;
    nb = n / b;
    double *M = svm_malloc(sizeof(double) * n * n);
    fill(M, 1);
    timed_begin();
    lu(M, 1);
    int ok = 1;
    double err = 0;
    if (R == 0) {
        double *s = malloc(sizeof(double) * n * n);
        fill(s, 0);
        lu(s, 0);
        for (size_t k = 0; k < (size_t)n * n; k++) err = fmax(err, fabs(s[k] - M[k]));
        ok = err == 0; /* same operations in the same order: bitwise equal */
        free(s);
    }
    char d[64];
    snprintf(d, sizeof d, "n=%d block=%d maxerr=%.2e", n, b, err);
    return app_report("lu", ok, d);
}
