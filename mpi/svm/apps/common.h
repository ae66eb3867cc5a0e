/* Shared helpers of the svm applications: size flag, timing, result line with the breakdown. */
#include <huddle/svm.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int R, N;
static double t_start;
static struct svm_stats s_start;

static double wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
/* 0 = --small (tests), 1 = default, 2 = --large */
static int app_size(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--small")) return 0;
        if (!strcmp(argv[i], "--large")) return 2;
    }
    return 1;
}
static void app_init(int *argc, char ***argv) {
    if (svm_init(argc, argv)) exit(2);
    R = svm_rank();
    N = svm_size();
}
static void timed_begin(void) {
    svm_barrier();
    svm_get_stats(&s_start);
    t_start = wall();
}
/* Ends the timed section; rank 0 prints one line: app, result check, time split. */
static int app_report(const char *app, int ok, const char *detail) {
    svm_barrier();
    double t = wall() - t_start;
    struct svm_stats s;
    svm_get_stats(&s);
    double dw = s.data_wait - s_start.data_wait, lk = s.lock - s_start.lock, br = s.barrier - s_start.barrier,
           pr = s.protocol - s_start.protocol;
    double *all = svm_malloc((size_t)N * 8 * sizeof(double));
    double mine[8] = {t, dw, lk, br, pr, (double)(s.faults - s_start.faults), (double)(s.fetches - s_start.fetches),
                      (double)(s.diffs - s_start.diffs)};
    memcpy(all + (size_t)R * 8, mine, sizeof mine);
    svm_barrier();
    if (R == 0) {
        double a[8] = {0};
        for (int q = 0; q < N; q++)
            for (int k = 0; k < 8; k++) a[k] += all[q * 8 + k] / (k < 5 ? N : 1);
        printf("%s %s np=%d protocol=%s time=%.4f compute=%.4f data_wait=%.4f lock=%.4f barrier=%.4f protocol_time=%.4f "
               "faults=%.0f fetches=%.0f diffs=%.0f %s\n",
               ok ? "ok" : "FAIL", app, N, svm_protocol(), a[0], a[0] - a[1] - a[2] - a[3] - a[4], a[1], a[2], a[3], a[4],
               a[5], a[6], a[7], detail);
    }
    svm_finalize();
    return ok ? 0 : 1;
}
