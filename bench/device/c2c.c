/* Core-to-core latency: for every pair of CPUs, two threads pinned on them bounce one cache
 * line (a counter each side increments in turn); prints the mean round trip in ns as a CSV
 * matrix, one row per CPU of this process's affinity mask. Shows cache domains that the
 * topology a virtual machine reports may hide (vCPUs on different L3s of the host).
 * Usage: c2c [round trips per pair, default 20000] */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Alignas(64) _Atomic long line;
static long trips;

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (pthread_setaffinity_np(pthread_self(), sizeof s, &s) != 0) {
        fprintf(stderr, "c2c: cannot pin to CPU %d\n", cpu);
        exit(1);
    }
}

static void *pong(void *arg) {
    pin(*(int *)arg);
    for (long k = 0; k < trips; k++) {
        while (atomic_load_explicit(&line, memory_order_acquire) != 2 * k + 1) {
        }
        atomic_store_explicit(&line, 2 * k + 2, memory_order_release);
    }
    return NULL;
}

static double round_trip_ns(int a, int b) {
    pthread_t t;
    atomic_store(&line, 0);
    if (pthread_create(&t, NULL, pong, &b) != 0) {
        perror("c2c: pthread_create");
        exit(1);
    }
    pin(a);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long k = 0; k < trips; k++) {
        atomic_store_explicit(&line, 2 * k + 1, memory_order_release);
        while (atomic_load_explicit(&line, memory_order_acquire) != 2 * k + 2) {
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    pthread_join(t, NULL);
    return ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / trips;
}

int main(int argc, char **argv) {
    trips = argc > 1 ? atol(argv[1]) : 20000;
    cpu_set_t all;
    if (trips <= 0 || sched_getaffinity(0, sizeof all, &all) != 0) {
        fprintf(stderr, "usage: c2c [round trips per pair > 0]\n");
        return 2;
    }
    int cpus[CPU_SETSIZE], n = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all))
            cpus[n++] = c;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++)
            printf(j ? ",%.0f" : "%.0f", i == j ? 0.0 : round_trip_ns(cpus[i], cpus[j]));
        printf("\n");
        fflush(stdout);
    }
    return 0;
}
