/* Threads with 1 MiB of static TLS each (a Fortran OpenMP program's THREADPRIVATE arrays
 * live there: NPB SP class A has 504 KiB) that share a static array for 2 s. glibc puts a
 * thread's static TLS at the top of the stack it is given, so an agent whose helper stacks
 * were smaller could not start its helpers and re-armed nothing. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "now.h"

#define THREADS 4
#define SHARED (4 << 20)

static __thread unsigned char scratch[1 << 20];
static unsigned char shared[SHARED];
static double start;

static void *work(void *arg) {
    unsigned long id = (unsigned long)arg, sum = 0;
    memset(scratch, (int)id, sizeof scratch);
    /* Every thread writes its quarter and reads all of it, page by page. */
    for (unsigned round = 0; now() - start < 2.0; round++) {
        for (size_t i = id * (SHARED / THREADS); i < (id + 1) * (SHARED / THREADS); i += 4096)
            shared[i] = (unsigned char)round;
        for (size_t i = 0; i < SHARED; i += 4096)
            sum += shared[i] + scratch[i % sizeof scratch];
    }
    return (void *)sum;
}

int main(void) {
    pthread_t t[THREADS];
    start = now();
    for (unsigned long k = 0; k < THREADS; k++)
        if (pthread_create(&t[k], NULL, work, (void *)k) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    for (int k = 0; k < THREADS; k++)
        pthread_join(t[k], NULL);
    printf("done\n");
    return 0;
}
