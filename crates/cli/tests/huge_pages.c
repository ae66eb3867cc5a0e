/* A program that asks for transparent huge pages (MADV_HUGEPAGE on a 32-MiB array, as
 * programs with big arrays do), fills the array, says how much of it the kernel gave in huge
 * pages, then lets two threads share it for 1.5 s (with the argument `alone`: one thread
 * works on all of it for 3 s), checks every word and says how much is still in huge pages. Under
 * the agent the array must get its huge pages as in a plain run (the agent registers such a
 * mapping only once the program has filled it), and keep them while the agent re-arms them
 * whole; only pages the agent asks about one at a time (where threads share) are split. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "now.h"

#define BYTES (32UL << 20)
#define HUGE (2UL << 20)
#define WORDS (BYTES / 8)

static uint64_t *a;
static double start;
static int alone;

/* AnonHugePages of the mapping holding `p`, from /proc/self/smaps (KiB; -1 if not found). */
static long huge_kib(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int inside = 0;
    long kib = -1;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        /* A mapping's first line starts "lo-hi "; its fields ("Key: value") never parse so. */
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        if (inside && sscanf(line, "AnonHugePages: %ld kB", &kib) == 1)
            break;
    }
    if (f)
        fclose(f);
    return kib;
}

static void *work(void *arg) {
    uint64_t id = (uint64_t)(uintptr_t)arg;
    /* Each thread adds to its half and reads the other's, page by page. */
    for (uint64_t round = 1; now() - start < (alone ? 3.0 : 1.5); round++) {
        for (size_t i = id * (WORDS / 2); i < (id + 1) * (WORDS / 2); i += 512)
            a[i] += 1;
        if (alone) {
            /* The other half too, and no reading across. */
            for (size_t i = (1 - id) * (WORDS / 2); i < (2 - id) * (WORDS / 2); i += 512)
                a[i] += 1;
            continue;
        }
        uint64_t sum = 0;
        for (size_t i = (1 - id) * (WORDS / 2); i < (2 - id) * (WORDS / 2); i += 512)
            sum += a[i];
        if (sum == 0)
            return (void *)1;
    }
    return NULL;
}

int main(int argc, char **argv) {
    alone = argc > 1 && strcmp(argv[1], "alone") == 0;
    uint8_t *raw = mmap(NULL, BYTES + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        perror("mmap");
        return 2;
    }
    a = (uint64_t *)(((uintptr_t)raw + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
    madvise(a, BYTES, MADV_HUGEPAGE);
    for (size_t i = 0; i < WORDS; i++)
        a[i] = i;
    printf("huge pages after the fill: %ld KiB\n", huge_kib(a));
    fflush(stdout);
    start = now();
    pthread_t t[2];
    int threads = alone ? 1 : 2;
    for (uintptr_t k = 0; k < (uintptr_t)threads; k++)
        pthread_create(&t[k], NULL, work, (void *)k);
    for (int k = 0; k < threads; k++) {
        void *r;
        pthread_join(t[k], &r);
        if (r != NULL) {
            fprintf(stderr, "huge_pages: a half read as zeros\n");
            return 1;
        }
    }
    /* Every word is its index plus the rounds its thread added, the same for a whole half
     * (each round adds 1 to every 512th word only): check the untouched words exactly. */
    for (size_t i = 0; i < WORDS; i++)
        if (i % 512 != 0 && a[i] != i) {
            fprintf(stderr, "huge_pages: word %zu is %llu\n", i, (unsigned long long)a[i]);
            return 1;
        }
    printf("huge pages at the end: %ld KiB\nall words held\n", huge_kib(a));
    return 0;
}
