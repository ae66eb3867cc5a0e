/* What a first touch of fresh memory costs: STREAMS anonymous mappings of PAGES pages each,
 * written one byte a page, the streams interleaved (as a master initialising u, v and f in
 * one loop), a fresh set of mappings each round. Prints the best round's time per page.
 * Under huddle's agent the mappings are registered with userfaultfd (missing mode) by the
 * time the next round starts, so those first touches go through the agent's fault thread. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: first_touch PAGES STREAMS ROUNDS\n");
        return 2;
    }
    size_t pages = strtoul(argv[1], 0, 10);
    int streams = atoi(argv[2]), rounds = atoi(argv[3]);
    if (pages == 0 || streams < 1 || streams > 8 || rounds < 1) {
        fprintf(stderr, "first_touch: PAGES > 0, STREAMS 1..8, ROUNDS > 0\n");
        return 2;
    }
    size_t len = pages * 4096;
    double best = 1e9;
    for (int r = 0; r < rounds; r++) {
        char *m[8];
        for (int s = 0; s < streams; s++) {
            m[s] = mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (m[s] == MAP_FAILED) {
                perror("first_touch: mmap");
                return 1;
            }
        }
        double t = now();
        for (size_t i = 0; i < pages; i++)
            for (int s = 0; s < streams; s++) m[s][i * 4096] = (char)(s + 1);
        t = now() - t;
        if (t < best) best = t;
        for (int s = 0; s < streams; s++) munmap(m[s], len);
    }
    printf("%.3f\n", best / (pages * streams) * 1e6);
    return 0;
}
