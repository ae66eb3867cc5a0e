/* Ocean-like red-black SOR on an (n+2) x (n+2) grid, rows partitioned in blocks; a residual
 * summed under a lock every few iterations.  Red-black order makes it bitwise equal to the
 * sequential run. */
#include "common.h"

static int n, iters;
static void sweep(double *g, int color, int lo, int hi) {
    const double w = 1.5;
    for (int i = lo; i < hi; i++)
        for (int j = 1 + ((i + color) & 1); j <= n; j += 2) {
            double *p = g + (size_t)i * (n + 2) + j;
            double r = 0.25 * (p[-1] + p[1] + p[-(n + 2)] + p[n + 2] - 0.01) - p[0];
            p[0] += w * r;
        }
}
static void init(double *g, int lo, int hi) {
    for (int i = lo; i < hi; i++)
        for (int j = 0; j < n + 2; j++)
            g[(size_t)i * (n + 2) + j] = (i == 0 || j == 0 || i == n + 1 || j == n + 1) ? sin(i * 0.1) + cos(j * 0.05) : 0;
}
int main(int argc, char **argv) {
    app_init(&argc, &argv);
    int sz = app_size(argc, argv);
    n = sz == 0 ? 62 : sz == 1 ? 254 : 510;
    iters = sz == 0 ? 20 : 60;
    double *g = svm_malloc(sizeof(double) * (n + 2) * (n + 2)), *res = svm_malloc(sizeof(double) * 2);
    int lo = 1 + R * n / N, hi = 1 + (R + 1) * n / N;
    init(g, R == 0 ? 0 : lo, R == N - 1 ? n + 2 : hi);
    timed_begin();
    for (int it = 0; it < iters; it++) {
        sweep(g, 0, lo, hi);
        svm_barrier();
        sweep(g, 1, lo, hi);
        svm_barrier();
        if (it % 10 == 9) {
            double s = 0;
            for (int i = lo; i < hi; i++)
                for (int j = 1; j <= n; j++) s += fabs(g[(size_t)i * (n + 2) + j]);
            svm_lock(0);
            res[it / 10 % 2] += s;
            svm_unlock(0);
        }
    }
    int ok = 1;
    double err = 0;
    if (R == 0) {
        double *s = malloc(sizeof(double) * (n + 2) * (n + 2));
        init(s, 0, n + 2);
        for (int it = 0; it < iters; it++) {
            sweep(s, 0, 1, n + 1);
            sweep(s, 1, 1, n + 1);
        }
        for (size_t k = 0; k < (size_t)(n + 2) * (n + 2); k++) err = fmax(err, fabs(s[k] - g[k]));
        ok = err == 0 && res[0] > 0;
        free(s);
    }
    char d[64];
    snprintf(d, sizeof d, "n=%d iters=%d maxerr=%.2e", n, iters, err);
    return app_report("ocean", ok, d);
}
