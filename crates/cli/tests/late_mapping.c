/* A program whose only shared memory appears 1.5 s after it starts, after the agent's
 * first second of frequent scans: 8 MiB MAP_SHARED|MAP_ANONYMOUS, written over and over
 * until 3.5 s. Its pages can be re-armed only if the agent notices the new mapping. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "now.h"

int main(void) {
    double start = now();
    struct timespec wait = {1, 500000000};
    nanosleep(&wait, NULL);
    size_t len = 8 << 20;
    volatile unsigned char *p =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    unsigned long sum = 0;
    for (unsigned char round = 1; now() - start < 3.5; round++)
        for (size_t i = 0; i < len; i += 4096) {
            p[i] = round;
            sum += p[i];
        }
    printf("done %lu\n", sum);
    return 0;
}
