/* Water-nsquared-like N-body: O(n^2/2) pair forces per step, each process accumulating into a
 * private array and then adding it into the shared forces under per-group locks, as Water does;
 * positions updated by the owners.  Checked against a sequential run (relative tolerance). */
#include "common.h"

#define GROUPS 16
static int n, steps;
static void pair(const double *x, double *f, int i, int j) {
    double d[3], r2 = 1e-3;
    for (int k = 0; k < 3; k++) d[k] = x[3 * i + k] - x[3 * j + k], r2 += d[k] * d[k];
    double inv = 1.0 / r2, s = inv * inv * inv * (inv * inv * inv - 0.5) * inv;
    for (int k = 0; k < 3; k++) f[3 * i + k] += s * d[k], f[3 * j + k] -= s * d[k];
}
static void init(double *x, double *v, int lo, int hi) {
    for (int i = lo; i < hi; i++)
        for (int k = 0; k < 3; k++) x[3 * i + k] = (i * (k + 3) % 17) * 0.9 + k * 0.13 + i * 0.011, v[3 * i + k] = 0;
}
static void move(double *x, double *v, const double *f, int lo, int hi) {
    for (int i = lo; i < hi; i++)
        for (int k = 0; k < 3; k++) v[3 * i + k] += 1e-4 * f[3 * i + k], x[3 * i + k] += 1e-4 * v[3 * i + k];
}
int main(int argc, char **argv) {
    app_init(&argc, &argv);
    int sz = app_size(argc, argv);
    n = sz == 0 ? 256 : sz == 1 ? 1024 : 2048;
    steps = sz == 0 ? 2 : 3;
    double *x = svm_malloc(sizeof(double) * 3 * n), *v = svm_malloc(sizeof(double) * 3 * n),
           *f = svm_malloc(sizeof(double) * 3 * n);
    double *pf = malloc(sizeof(double) * 3 * n);
    int lo = R * n / N, hi = (R + 1) * n / N;
    init(x, v, lo, hi);
    timed_begin();
    for (int s = 0; s < steps; s++) {
        memset(pf, 0, sizeof(double) * 3 * n);
        for (int i = lo; i < hi; i++) memset(f + 3 * i, 0, 24);
        svm_barrier();
        for (int i = R; i < n; i += N) /* cyclic rows balance the triangle */
            for (int j = i + 1; j < n; j++) pair(x, pf, i, j);
        for (int g0 = 0; g0 < GROUPS; g0++) {
            int g = (g0 + R) % GROUPS, a = g * n / GROUPS, b = (g + 1) * n / GROUPS;
            svm_lock(g);
            for (int k = 3 * a; k < 3 * b; k++) f[k] += pf[k];
            svm_unlock(g);
        }
        svm_barrier();
        move(x, v, f, lo, hi);
        svm_barrier();
    }
    int ok = 1;
    double err = 0;
    if (R == 0) {
        double *sx = malloc(sizeof(double) * 3 * n), *sv = malloc(sizeof(double) * 3 * n), *sf = malloc(sizeof(double) * 3 * n);
        init(sx, sv, 0, n);
        for (int s = 0; s < steps; s++) {
            memset(sf, 0, sizeof(double) * 3 * n);
            for (int i = 0; i < n; i++)
                for (int j = i + 1; j < n; j++) pair(sx, sf, i, j);
            move(sx, sv, sf, 0, n);
        }
        for (int k = 0; k < 3 * n; k++) err = fmax(err, fabs(sx[k] - x[k]) / (fabs(sx[k]) + 1e-12));
        ok = err < 1e-9;
        free(sx), free(sv), free(sf);
    }
    free(pf);
    char d[64];
    snprintf(d, sizeof d, "molecules=%d steps=%d relerr=%.2e", n, steps, err);
    return app_report("water", ok, d);
}
