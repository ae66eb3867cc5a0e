/* A program that checks its own memory while the huddle agent drops and restores its pages.
 *
 * Threads own word-sized cells in private anonymous memory and in static arrays (.bss, and
 * .data, which the agent adopts) and keep a running value in each; every pass re-reads
 * every cell it owns and compares. Meanwhile they also do what real programs do to memory
 * the agent may have dropped: discard pages themselves (MADV_DONTNEED must then read as
 * zeros, never as the agent's saved copy), move a mapping (mremap), unmap and map again,
 * map over their own .bss (MAP_FIXED), grow and shrink the brk heap, read(2) from a pipe
 * into it (a fault inside a system call), fork a child that checks what it inherited and
 * exits while its own agent re-arms, and fork and exec. At the end the program registers a
 * userfaultfd of its own on its static data, which the agent must make way for. Exit status
 * 0 when every check held, 1 with a line on stderr naming the first that did not.
 *
 * Usage: agent_torture SECONDS
 * With AGENT_TORTURE_HUGE=1 the threads' heap arrays ask for transparent huge pages
 * (MADV_HUGEPAGE, 2-MiB aligned), which the agent re-arms whole, and the first change comes
 * after a second.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "now.h"

#define THREADS 4
#define PAGES 512 /* per thread: 2 MiB */
#define PAGE 4096
#define WORDS (PAGES * PAGE / 8)
#define MOVING 64 /* pages of the mapping that mremap moves */

#define SWORDS (64 * PAGE / 8) /* static words per thread and array: 64 pages */

/* Static data, where Fortran COMMON blocks and C globals live: .bss (no initialiser) and
 * .data (initialised, a private file mapping until the agent adopts it). */
static uint64_t sbss[THREADS][SWORDS] __attribute__((aligned(PAGE)));
static uint64_t sdata[THREADS][SWORDS] __attribute__((aligned(PAGE))) = {{1}};
/* The values each thread expects in its static words (malloc'd). */
static uint64_t *swant[THREADS][2];
static pthread_mutex_t brk_lock = PTHREAD_MUTEX_INITIALIZER;

static double seconds;
static volatile int failed;

static void fail(const char *what, int t, size_t i, uint64_t got, uint64_t want) {
    if (!__sync_lock_test_and_set(&failed, 1))
        fprintf(stderr, "agent_torture: thread %d: %s at word %zu: %#llx, expected %#llx\n", t,
                what, i, (unsigned long long)got, (unsigned long long)want);
}

/* In a fork child of this multithreaded program: no stdio (another thread may have held its
 * lock at the fork), one write(2), and out. */
static void child_fail(int t, const char *where, size_t i, const uint64_t *got, const uint64_t *want) {
    char line[300];
    int n = snprintf(line, sizeof line,
                     "agent_torture: thread %d: its fork child saw other contents in %s at word %zu (%p): %#llx, expected %#llx (at %p)\n",
                     t, where, i, (const void *)got, (unsigned long long)*got, (unsigned long long)*want, (const void *)want);
    if (n > 0 && write(2, line, (size_t)n) < 0)
        _exit(3);
    _exit(1);
}

static uint64_t *fresh(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    return p;
}

/* fresh(), but 2-MiB aligned and asking for huge pages where AGENT_TORTURE_HUGE is set. */
static uint64_t *fresh_maybe_huge(size_t bytes) {
    const size_t huge = 2UL << 20;
    if (!getenv("AGENT_TORTURE_HUGE"))
        return fresh(bytes);
    char *raw = (char *)fresh(bytes + huge);
    char *p = (char *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
    if (p > raw)
        munmap(raw, (size_t)(p - raw));
    munmap(p + bytes, (size_t)(raw + huge - p));
    madvise(p, bytes, MADV_HUGEPAGE);
    return (uint64_t *)p;
}

static void *worker(void *arg) {
    int t = (int)(intptr_t)arg;
    size_t bytes = (size_t)WORDS * 8;
    uint64_t *a = fresh_maybe_huge(bytes);
    uint64_t *want = malloc(bytes); /* the expected values, in malloc'd (also dropped) memory */
    for (size_t i = 0; i < WORDS; i++)
        a[i] = want[i] = ((uint64_t)t << 56) ^ i;
    /* A mapping of its own: `a` is split by the unmap case below, and mremap must not span
     * several mappings. */
    size_t mbytes = MOVING * PAGE;
    uint64_t *m = fresh(mbytes);
    uint64_t moves = 0;
    for (size_t i = 0; i < mbytes / 8; i++)
        m[i] = ~(uint64_t)i;
    uint64_t *st[2] = {sbss[t], sdata[t]};
    for (int k = 0; k < 2; k++) {
        swant[t][k] = malloc(SWORDS * 8);
        for (size_t i = 0; i < SWORDS; i++)
            st[k][i] = swant[t][k][i] = ((uint64_t)(t + 8 * k) << 56) ^ i;
    }
    double begin = now(), end = begin + seconds;
    for (unsigned pass = 1; !failed && now() < end; pass++) {
        for (size_t i = 0; i < WORDS; i++) {
            if (a[i] != want[i]) {
                fail("lost update", t, i, a[i], want[i]);
                break;
            }
            a[i] = want[i] = want[i] * 6364136223846793005ULL + pass;
        }
        for (int k = 0; k < 2; k++)
            for (size_t i = 0; i < SWORDS; i++) {
                if (st[k][i] != swant[t][k][i]) {
                    fail(k ? "lost update in .data" : "lost update in .bss", t, i, st[k][i], swant[t][k][i]);
                    break;
                }
                st[k][i] = swant[t][k][i] = swant[t][k][i] * 2862933555777941757ULL + pass;
            }
        /* Every 4th pass changes the memory (the agent re-arms nothing for a while after
         * each change); AGENT_TORTURE_CASE=N repeats one case at every pass (debugging). */
        const char *only = getenv("AGENT_TORTURE_CASE");
        if (!only && pass % 4 != 0)
            continue;
        /* Huge pages: no change in the first second, which any case would split (the agent
         * registers the array once filled, and then re-arms it whole). */
        if (getenv("AGENT_TORTURE_HUGE") && now() < begin + 1.0)
            continue;
        /* AGENT_TORTURE_SKIP=N,M,... leaves those cases out (known races, see the test that
         * sets it). */
        const char *skip = getenv("AGENT_TORTURE_SKIP");
        unsigned which = only ? (unsigned)atoi(only) : pass / 4 % 8;
        int skipped = 0;
        for (const char *c = skip; c && *c; c = strchr(c, ',') ? strchr(c, ',') + 1 : NULL)
            skipped |= (unsigned)atoi(c) == which;
        if (skipped)
            continue;
        switch (which) {
        case 0: { /* the program discards a page itself: it must read zeros afterwards */
            size_t p = (pass * 7) % PAGES, w = p * PAGE / 8;
            madvise((char *)a + p * PAGE, PAGE, MADV_DONTNEED);
            for (size_t i = w; i < w + PAGE / 8; i++) {
                if (a[i] != 0)
                    fail("discarded page not zero", t, i, a[i], 0);
                want[i] = 0;
            }
            break;
        }
        case 1: { /* a mapping moves, and keeps its contents */
            uint64_t *b = mremap(m, mbytes, mbytes, MREMAP_MAYMOVE | MREMAP_FIXED, fresh(mbytes));
            if (b == MAP_FAILED) {
                perror("mremap");
                exit(2);
            }
            m = b;
            for (size_t i = 0; i < mbytes / 8; i++) {
                if (m[i] != ~(uint64_t)i + moves)
                    fail("moved mapping changed", t, i, m[i], ~(uint64_t)i + moves);
                m[i]++;
            }
            moves++;
            break;
        }
        case 2: { /* a system call writes into the memory */
            int fd[2];
            size_t p = (pass * 13) % PAGES, w = p * PAGE / 8;
            if (pipe(fd) != 0) {
                perror("pipe");
                exit(2);
            }
            uint64_t block[PAGE / 8];
            for (size_t i = 0; i < PAGE / 8; i++)
                block[i] = want[w + i] = ~want[w + i];
            if (write(fd[1], block, sizeof block) != (ssize_t)sizeof block ||
                read(fd[0], &a[w], sizeof block) != (ssize_t)sizeof block) {
                perror("pipe I/O");
                exit(2);
            }
            close(fd[0]);
            close(fd[1]);
            break;
        }
        case 3: { /* a child inherits the memory, checks it for a while (its own agent
                   * re-arms meanwhile) and exits in the middle of that */
            pid_t c = fork();
            if (c == 0) {
                double stop = now() + 0.05;
                do {
                    for (size_t i = 0; i < WORDS; i++)
                        if (a[i] != want[i])
                            child_fail(t, "the heap", i, &a[i], &want[i]);
                    for (int k = 0; k < 2; k++)
                        for (size_t i = 0; i < SWORDS; i++)
                            if (st[k][i] != swant[t][k][i])
                                child_fail(t, k ? ".data" : ".bss", i, &st[k][i], &swant[t][k][i]);
                } while (now() < stop);
                _exit(0);
            }
            int st = 0;
            waitpid(c, &st, 0);
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                fail("child saw other contents", t, 0, 0, 0);
            break;
        }
        case 4: { /* unmap one page and map a fresh one there: zeros again */
            size_t p = (pass * 3) % PAGES, w = p * PAGE / 8;
            char *at = (char *)a + p * PAGE;
            munmap(at, PAGE);
            if (mmap(at, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                     0) != at) {
                perror("mmap fixed");
                exit(2);
            }
            for (size_t i = w; i < w + PAGE / 8; i++) {
                if (a[i] != 0)
                    fail("remapped page not zero", t, i, a[i], 0);
                want[i] = 0;
            }
            break;
        }
        case 5: { /* map a fresh page over its own .bss (MAP_FIXED): zeros there */
            size_t p = pass % (SWORDS * 8 / PAGE), w = p * PAGE / 8;
            char *at = (char *)sbss[t] + p * PAGE;
            if (mmap(at, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                     0) != at) {
                perror("mmap over .bss");
                exit(2);
            }
            for (size_t i = w; i < w + PAGE / 8; i++) {
                if (sbss[t][i] != 0)
                    fail("page mapped over .bss not zero", t, i, sbss[t][i], 0);
                swant[t][0][i] = 0;
            }
            break;
        }
        case 6: { /* grow the brk heap, fill it, shrink it back (nothing else moves brk here) */
            pthread_mutex_lock(&brk_lock);
            uint64_t *b = sbrk(16 * PAGE);
            if (b != (void *)-1) {
                for (size_t i = 0; i < 16 * PAGE / 8; i++)
                    b[i] = i ^ pass;
                for (size_t i = 0; i < 16 * PAGE / 8; i++)
                    if (b[i] != (i ^ pass))
                        fail("brk memory changed", t, i, b[i], i ^ pass);
                sbrk(-16 * PAGE);
            }
            pthread_mutex_unlock(&brk_lock);
            break;
        }
        case 7: { /* fork and exec */
            pid_t c = fork();
            if (c == 0) {
                execl("/bin/true", "true", (char *)NULL);
                _exit(3);
            }
            int status = 0;
            waitpid(c, &status, 0);
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                fail("fork and exec of /bin/true failed", t, 0, (uint64_t)status, 0);
            break;
        }
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    seconds = argc > 1 ? atof(argv[1]) : 2;
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++)
        pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    /* A userfaultfd of the program's own on its .bss: registering must succeed (the agent
     * steps back), and the static data must still hold what the threads left there. */
    int uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
    if (uffd >= 0) {
        struct uffdio_api api = {.api = UFFD_API};
        struct uffdio_register reg = {
            .range = {.start = (uint64_t)(uintptr_t)sbss[0], .len = sizeof sbss[0]},
            .mode = UFFDIO_REGISTER_MODE_MISSING,
        };
        if (ioctl(uffd, UFFDIO_API, &api) != 0 || ioctl(uffd, UFFDIO_REGISTER, &reg) != 0)
            fail("the program's own userfaultfd registration failed", 0, 0, 0, 0);
        close(uffd);
    }
    for (int t = 0; t < THREADS; t++)
        for (int k = 0; k < 2; k++) {
            uint64_t *st = k ? sdata[t] : sbss[t];
            for (size_t i = 0; i < SWORDS; i++)
                if (st[i] != swant[t][k][i]) {
                    fail("static data changed after the threads ended", t, i, st[i], swant[t][k][i]);
                    break;
                }
        }
    if (!failed)
        printf("agent_torture: all checks held\n");
    return failed;
}
