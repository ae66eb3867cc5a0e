/* Seconds on the monotonic clock, for the test programs of crates/cli/tests. */
#ifndef HUDDLE_TESTS_NOW_H
#define HUDDLE_TESTS_NOW_H
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}
#endif
