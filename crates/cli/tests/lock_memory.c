/* Two threads share a heap buffer for 1 s while the agent re-arms it, then the program
 * locks 16 KiB with mlock (as real-time and some HPC codes do, often with mlockall) and goes
 * on for 1 s more; every page must hold what its owner last wrote. A locked page must not
 * fault, and the agent cannot drop one: it steps back and says so. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "now.h"

#define SHARED (8 << 20)
static unsigned char *buf;
static double start;

static void *work(void *arg) {
    unsigned long id = (unsigned long)arg, sum = 0;
    for (unsigned round = 1; now() - start < 2.0; round++) {
        for (size_t i = id * (SHARED / 2); i < (id + 1) * (SHARED / 2); i += 4096)
            buf[i] = (unsigned char)(round | 1);
        for (size_t i = 0; i < SHARED; i += 4096)
            sum += buf[i];
    }
    return (void *)sum;
}

int main(void) {
    buf = calloc(1, SHARED);
    static unsigned char locked[16 << 10];
    pthread_t t[2];
    start = now();
    for (unsigned long k = 0; k < 2; k++)
        pthread_create(&t[k], NULL, work, (void *)k);
    struct timespec second = {1, 0};
    nanosleep(&second, NULL);
    if (mlock(locked, sizeof locked) != 0)
        perror("mlock (the agent steps back all the same)");
    for (int k = 0; k < 2; k++)
        pthread_join(t[k], NULL);
    for (size_t i = 0; i < SHARED; i += 4096)
        if ((buf[i] & 1) == 0) {
            printf("page %zu lost its data\n", i / 4096);
            return 1;
        }
    printf("done\n");
    return 0;
}
