/* Lock-heavy task queue: ranges are split and pushed onto a shared stack under one lock,
 * leaves are summed into shared per-bucket totals under bucket locks.  Checked against the
 * sequential sum (exact integers). */
#include "common.h"
#include <stdint.h>
#include <unistd.h>

struct queue { long top, done, nodes; long lo[4096], hi[4096]; };
static uint64_t fval(long i) { return (uint64_t)(i * i + 7 * i) % 1000003u; }
int main(int argc, char **argv) {
    app_init(&argc, &argv);
    int sz = app_size(argc, argv);
    long total = sz == 0 ? 100000 : sz == 1 ? 2000000 : 8000000, grain = total / (sz == 0 ? 64 : 256);
    struct queue *q = svm_malloc(sizeof *q);
    uint64_t *sum = svm_malloc(8 * 64);
    if (R == 0) {
        svm_lock(0);
        q->lo[0] = 0, q->hi[0] = total, q->top = 1;
        svm_unlock(0);
    }
    timed_begin();
    for (;;) {
        long lo = -1, hi = -1, finished;
        svm_lock(0);
        finished = q->done == total;
        if (q->top > 0) {
            q->top--;
            lo = q->lo[q->top], hi = q->hi[q->top];
            q->nodes++;
        }
        svm_unlock(0);
        if (finished) break;
        if (lo < 0) {
            usleep(50);
            continue;
        }
        if (hi - lo > grain) { /* split and push both halves */
            long mid = (lo + hi) / 2;
            svm_lock(0);
            if (q->top + 2 > 4096) {
                svm_unlock(0);
                fprintf(stderr, "taskq: stack overflow\n");
                exit(1);
            }
            q->lo[q->top] = lo, q->hi[q->top++] = mid;
            q->lo[q->top] = mid, q->hi[q->top++] = hi;
            svm_unlock(0);
            continue;
        }
        uint64_t s = 0;
        for (long i = lo; i < hi; i++) s += fval(i);
        int b = (int)(lo / grain) % 64;
        svm_lock(1 + b % 8);
        sum[b] += s;
        svm_unlock(1 + b % 8);
        svm_lock(0);
        q->done += hi - lo;
        svm_unlock(0);
    }
    int ok = 1;
    uint64_t got = 0, want = 0;
    if (R == 0) {
        for (int b = 0; b < 64; b++) got += sum[b];
        for (long i = 0; i < total; i++) want += fval(i);
        ok = got == want;
    }
    char d[96];
    snprintf(d, sizeof d, "items=%ld tasks=%ld sum=%llu", total, R == 0 ? q->nodes : 0, (unsigned long long)got);
    return app_report("taskq", ok, d);
}
