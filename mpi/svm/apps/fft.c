/* FFT: 2-D complex FFT of an m x m matrix: row FFTs, a transpose through shared memory (all to
 * all, several writers per page), row FFTs again.  Checked against a sequential run. */
#include "common.h"
#include <complex.h>

static void fft1(double complex *a, int n) { /* iterative radix-2 */
    for (int i = 1, j = 0; i < n; i++) {
        int bit = n >> 1;
        for (; j & bit; bit >>= 1) j ^= bit;
        j ^= bit;
        if (i < j) { double complex t = a[i]; a[i] = a[j]; a[j] = t; }
    }
    for (int len = 2; len <= n; len <<= 1) {
        double complex w = cexp(-2 * M_PI * I / len);
        for (int i = 0; i < n; i += len) {
            double complex u = 1;
            for (int k = 0; k < len / 2; k++) {
                double complex x = a[i + k], y = a[i + k + len / 2] * u;
                a[i + k] = x + y;
                a[i + k + len / 2] = x - y;
                u *= w;
            }
        }
    }
}
static double complex init(int i, int j) { return sin(0.1 * i + 0.37 * j) + I * cos(0.05 * i * j); }

int main(int argc, char **argv) {
    app_init(&argc, &argv);
    int sz = app_size(argc, argv), m = sz == 0 ? 64 : sz == 1 ? 256 : 512;
    double complex *A = svm_malloc(sizeof(double complex) * m * m), *B = svm_malloc(sizeof(double complex) * m * m);
    int lo = R * m / N, hi = (R + 1) * m / N;
    for (int i = lo; i < hi; i++)
        for (int j = 0; j < m; j++) A[i * m + j] = init(i, j);
    timed_begin();
    for (int i = lo; i < hi; i++) fft1(A + i * m, m);
    svm_barrier();
    for (int i = lo; i < hi; i++) /* B = A^T: row i of B gathers column i of A */
        for (int j = 0; j < m; j++) B[i * m + j] = A[j * m + i];
    for (int i = lo; i < hi; i++) fft1(B + i * m, m);
    svm_barrier();
    /* sequential reference on rank 0 */
    int ok = 1;
    double err = 0;
    if (R == 0) {
        double complex *a = malloc(sizeof *a * m * m), *b = malloc(sizeof *b * m * m);
        for (int i = 0; i < m; i++) {
            for (int j = 0; j < m; j++) a[i * m + j] = init(i, j);
            fft1(a + i * m, m);
        }
        for (int i = 0; i < m; i++) {
            for (int j = 0; j < m; j++) b[i * m + j] = a[j * m + i];
            fft1(b + i * m, m);
        }
        for (int k = 0; k < m * m; k++) err = fmax(err, cabs(b[k] - B[k]));
        ok = err <= 1e-9 * m;
        free(a);
        free(b);
    }
    char d[64];
    snprintf(d, sizeof d, "m=%d maxerr=%.2e", m, err);
    return app_report("fft", ok, d);
}
