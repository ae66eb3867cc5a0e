/* Threads that move their mappings about (mremap onto a fresh mapping) while the huddle
 * agent has some of their pages out, so that the kernel's events about them queue out of
 * the order of the changes. Each of 8 threads owns a 64-page mapping with a known value in
 * every word, checks it, moves it, and checks it again after the move:
 *
 * - even threads map a fresh destination, go on checking for 30 ms (long enough for the
 *   agent's next scan of the maps to register the destination), then mremap onto it: the
 *   kernel moves the mapping and then, before queueing the REMAP event, waits until the
 *   agent has read the UNMAP event of the destination;
 * - odd threads check for 10 ms, then mremap onto a mapping made just then, which is often
 *   the range an even thread has just left: their REMAP then queues before the even
 *   thread's, though it came after it.
 *
 * Before the agent checked where a REMAP's holes went (vault::remap_slots), the even
 * thread's late REMAP carried the odd thread's pages out with it, and the odd thread read
 * zeros after its move (29 of 30 runs of 3 s with two busy loops beside it).
 *
 * Usage: mremap_race SECONDS. Exit status 0 when every check held, 1 with a line on stderr
 * naming the first that did not. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "now.h"

#define THREADS 8
#define PAGE 4096
#define PAGES 64
#define WORDS (PAGES * PAGE / 8)

static double seconds;
static volatile int failed;

static uint64_t *fresh(void) {
    void *p = mmap(NULL, PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    return p;
}

/* Word i holds ~i + moves; false (and the first failure reported) where one does not. */
static int intact(int t, const uint64_t *m, uint64_t moves, const char *what) {
    for (size_t i = 0; i < WORDS; i++)
        if (m[i] != ~(uint64_t)i + moves) {
            if (!__sync_lock_test_and_set(&failed, 1))
                fprintf(stderr, "mremap_race: thread %d: %s at word %zu (page %zu): %#llx, expected %#llx\n",
                        t, what, i, i * 8 / PAGE, (unsigned long long)m[i],
                        (unsigned long long)(~(uint64_t)i + moves));
            return 0;
        }
    return 1;
}

static void *worker(void *arg) {
    int t = (int)(intptr_t)arg;
    uint64_t *m = fresh(), moves = 0;
    for (size_t i = 0; i < WORDS; i++)
        m[i] = ~(uint64_t)i;
    double end = now() + seconds;
    while (!failed && now() < end) {
        uint64_t *to = t % 2 == 0 ? fresh() : NULL;
        double until = now() + (t % 2 == 0 ? 0.030 : 0.010);
        while (!failed && now() < until)
            intact(t, m, moves, "mapping changed in place");
        if (!to)
            to = fresh();
        m = mremap(m, PAGES * PAGE, PAGES * PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, to);
        if (m == MAP_FAILED) {
            perror("mremap");
            exit(2);
        }
        if (!intact(t, m, moves, "moved mapping changed"))
            break;
        for (size_t i = 0; i < WORDS; i++)
            m[i]++;
        moves++;
    }
    return (void *)(uintptr_t)moves;
}

int main(int argc, char **argv) {
    seconds = argc > 1 ? atof(argv[1]) : 3;
    pthread_t th[THREADS];
    unsigned long moves = 0;
    for (int t = 0; t < THREADS; t++)
        pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    for (int t = 0; t < THREADS; t++) {
        void *r;
        pthread_join(th[t], &r);
        moves += (uintptr_t)r;
    }
    if (failed)
        return 1;
    printf("all checks held, %lu moves\n", moves);
    return 0;
}
