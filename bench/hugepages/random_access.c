/* A program that relies on huge pages: THREADS threads (OpenMP) increment random words of a
 * 512-MiB array, a TLB miss per access on 4-KiB pages. With `huge` it asks for transparent
 * huge pages (MADV_HUGEPAGE), as programs with big arrays do. Prints the timed loop's
 * seconds and how much of the array was in huge pages at its end (smaps_rollup). */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define WORDS (64UL << 20)

static long anon_huge_kib(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: random_access ROUNDS huge|small\n");
        return 2;
    }
    int rounds = atoi(argv[1]);
    size_t bytes = WORDS * sizeof(uint64_t);
    /* 2-MiB aligned, so that every 2 MiB of it can be one huge page. */
    uint8_t *raw = mmap(NULL, bytes + (2 << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    uint64_t *a = (uint64_t *)(((uintptr_t)raw + (2 << 20) - 1) & ~(uintptr_t)((2 << 20) - 1));
    if (strcmp(argv[2], "huge") == 0)
        madvise(a, bytes, MADV_HUGEPAGE);
    for (uint64_t i = 0; i < WORDS; i++)
        a[i] = i;
    double t0 = omp_get_wtime();
    uint64_t sum = 0;
#pragma omp parallel reduction(+ : sum)
    {
        uint64_t x = 88172645463325252ULL + (uint64_t)omp_get_thread_num();
        for (int r = 0; r < rounds; r++)
            for (uint64_t k = 0; k < WORDS / 8; k++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                sum += __atomic_fetch_add(&a[x & (WORDS - 1)], 1, __ATOMIC_RELAXED);
            }
    }
    double loop = omp_get_wtime() - t0;
    printf("loop %.3f s, huge pages %ld KiB, sum %llu\n", loop, anon_huge_kib(), (unsigned long long)sum);
    return 0;
}
