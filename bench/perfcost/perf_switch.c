/* What perf page-fault events cost a program that switches context a lot (MPI ranks that
 * yield while they wait, oversubscribed OpenMP threads), with nothing else of huddle:
 * 4 threads each call sched_yield 10^6 times, under
 *   mode 0: no event;
 *   mode 1: per-task events with inherit, one per CPU, as huddle's detector opens them;
 *   mode 2: per-CPU system-wide events (pid -1), the alternative that needs privilege.
 * Prints the wall time. bench/perfcost/run alternates the modes and pairs them. */
#define _GNU_SOURCE
#include <linux/perf_event.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void *yielder(void *arg)
{
    (void)arg;
    for (long i = 0; i < 1000000; i++) sched_yield();
    return NULL;
}

/* The page-fault event as huddle's detector describes it, mapped with a 64-page ring. */
static void open_event(pid_t pid, int cpu, int inherit)
{
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_PAGE_FAULTS;
    a.sample_period = 1;
    a.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR | PERF_SAMPLE_CPU;
    a.inherit = inherit;
    a.task = 1;
    a.comm = 1;
    a.use_clockid = 1;
    a.clockid = CLOCK_MONOTONIC;
    int fd = (int)syscall(SYS_perf_event_open, &a, pid, cpu, -1, 0);
    if (fd < 0) {
        perror("perf_switch: perf_event_open");
        exit(1);
    }
    if (mmap(NULL, (1 + 64) * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED) {
        perror("perf_switch: mmap");
        exit(1);
    }
}

int main(int argc, char **argv)
{
    int mode = argc > 1 ? atoi(argv[1]) : -1;
    if (mode < 0 || mode > 2) {
        fprintf(stderr, "usage: perf_switch 0|1|2 (none, per-task inherited, per-CPU system-wide)\n");
        return 2;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    for (int c = 0; c < ncpu; c++) {
        if (mode == 1) open_event(0, c, 1);
        if (mode == 2) open_event(-1, c, 0);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, yielder, NULL);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%.4f\n", (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    return 0;
}
