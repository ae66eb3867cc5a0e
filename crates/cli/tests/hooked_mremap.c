/* A program whose mremap drops the new address, as UCX's memory hooks (libucm) do: they
 * patch libc's mremap for the whole process, the agent's calls included. The agent adopts
 * this program's .data at start (an anonymous copy moved over it with MREMAP_FIXED); through
 * this mremap the copy went to address 0 instead. Checks that nothing is mapped below
 * 64 KiB and that the initialised data is intact, then touches it for a while so that the
 * agent re-arms it.
 * Usage: hooked_mremap   Exit status 0 when all held; prints "all checks held". */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The hook: like ucm_mremap, the fifth argument is not passed on. */
void *mremap(void *old, size_t old_size, size_t new_size, int flags, ...) {
    return (void *)syscall(SYS_mremap, old, old_size, new_size, flags, NULL);
}

/* Initialised, so in .data (a private file mapping the agent adopts). */
static uint64_t data[8192] = {1, 2, 3};

int main(void) {
    FILE *maps = fopen("/proc/self/maps", "r");
    if (!maps) {
        perror("/proc/self/maps");
        return 2;
    }
    unsigned long start, end;
    int low = 0;
    char line[512];
    while (fgets(line, sizeof line, maps))
        if (sscanf(line, "%lx-%lx", &start, &end) == 2 && start < 0x10000) {
            fprintf(stderr, "hooked_mremap: mapped below 64 KiB: %s", line);
            low = 1;
        }
    fclose(maps);
    if (data[0] != 1 || data[1] != 2 || data[2] != 3 || data[3] != 0) {
        fprintf(stderr, "hooked_mremap: .data changed: %lu %lu %lu %lu\n", (unsigned long)data[0],
                (unsigned long)data[1], (unsigned long)data[2], (unsigned long)data[3]);
        return 1;
    }
    /* A second of writes and reads over .data, checked each pass. */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint64_t pass = 1;; pass++) {
        for (size_t k = 3; k < sizeof data / sizeof *data; k += 512) data[k] = pass * k;
        for (size_t k = 3; k < sizeof data / sizeof *data; k += 512)
            if (data[k] != pass * k) {
                fprintf(stderr, "hooked_mremap: lost update at word %zu\n", k);
                return 1;
            }
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec >= 1) break;
    }
    if (low) return 1;
    printf("hooked_mremap: all checks held\n");
    return 0;
}
