/* Litmus and reliability tests for the svm library.  Usage: litmus TEST [ARG]; exits 0 on
 * success, prints "FAIL ..." and exits 1 otherwise. */
#define _GNU_SOURCE
#include <huddle/svm.h>
#include "svm_internal.h"
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int R, N, failed;
#define CHECK(c, ...)                                                                                                  \
    do {                                                                                                               \
        if (!(c)) {                                                                                                    \
            fprintf(stderr, "FAIL rank %d: ", R);                                                                      \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fprintf(stderr, "\n");                                                                                     \
            failed = 1;                                                                                                \
        }                                                                                                              \
    } while (0)

/* Message passing through a lock: a writer fills data then sets a flag, both under the lock;
 * every reader that sees the flag must see all the data. */
static void t_mp_lock(void) {
    int *d = svm_malloc(4 * 8192); /* several pages */
    int *flag = svm_malloc(64);
    svm_barrier();
    for (int round = 1; round <= 20; round++) {
        int writer = round % N;
        if (R == writer) {
            svm_lock(3);
            for (int i = 0; i < 8192; i++) d[i] = round * 100000 + i;
            *flag = round;
            svm_unlock(3);
        } else {
            for (;;) {
                svm_lock(3);
                int f = *flag;
                int bad = -1;
                if (f == round)
                    for (int i = 0; i < 8192; i++)
                        if (d[i] != round * 100000 + i) {
                            bad = i;
                            break;
                        }
                svm_unlock(3);
                CHECK(bad < 0, "mp_lock round %d: d[%d] stale after seeing the flag", round, bad);
                if (f == round || bad >= 0) break;
                usleep(100);
            }
        }
        svm_barrier();
    }
}

/* Writes before a barrier are visible to every process after it, including the page's home. */
static void t_barrier(void) {
    size_t n = 16 * 1024;
    int *a = svm_malloc(n * sizeof(int));
    for (int it = 0; it < 10; it++) {
        for (size_t i = R; i < n; i += N) a[i] = it * 7 + (int)i;
        svm_barrier();
        size_t bad = n;
        for (size_t i = 0; i < n; i++)
            if (a[i] != it * 7 + (int)i) {
                bad = i;
                break;
            }
        CHECK(bad == n, "barrier it %d: a[%zu]=%d", it, bad, bad < n ? a[bad] : 0);
        svm_barrier();
    }
}

/* No lost update: every process increments shared counters under contended locks. */
static void t_counter(int iters) {
    long *c = svm_malloc(8 * sizeof(long));
    svm_barrier();
    for (int i = 0; i < iters; i++) {
        int k = i % 4;
        svm_lock(k);
        c[k]++;
        c[4 + k] += R + 1;
        svm_unlock(k);
    }
    svm_barrier();
    long tot = 0, wsum = 0;
    for (int k = 0; k < 4; k++) tot += c[k], wsum += c[4 + k];
    CHECK(tot == (long)iters * N, "counter: %ld increments, expected %ld", tot, (long)iters * N);
    CHECK(wsum == (long)iters * N * (N + 1) / 2, "counter: weighted sum %ld", wsum);
}

/* False sharing: all processes write interleaved words of the same pages concurrently; the
 * home merges the diffs word by word. */
static void t_false_sharing(void) {
    int *a = svm_malloc(3 * 4096);
    for (int it = 1; it <= 5; it++) {
        for (int i = R; i < 3 * 1024; i += N) a[i] = it * 1000 + i;
        svm_barrier();
        for (int i = 0; i < 3 * 1024; i++) {
            if (a[i] != it * 1000 + i) {
                CHECK(0, "false sharing it %d: a[%d]=%d expected %d", it, i, a[i], it * 1000 + i);
                break;
            }
        }
        svm_barrier();
    }
}

/* read() into a shared buffer on a page that is not writable (and not valid) here. */
static void t_syscall(void) {
    char *buf = svm_malloc(3 * 4096);
    char path[] = "/tmp/svm-litmus-XXXXXX";
    int fd = -1;
    if (R == 0) {
        fd = mkstemp(path);
        CHECK(fd >= 0, "mkstemp");
        for (int i = 0; i < 3 * 4096; i++) {
            char c = (char)('a' + i % 26);
            CHECK(write(fd, &c, 1) == 1, "write");
        }
    }
    if (R == N - 1) memset(buf + 4096, 'z', 100); /* another process dirties the middle page */
    svm_barrier();
    if (R == 0) {
        lseek(fd, 0, SEEK_SET);
        ssize_t k = read(fd, buf + 10, 3 * 4096 - 20);
        CHECK(k == 3 * 4096 - 20, "read returned %zd", k);
        close(fd);
        unlink(path);
    }
    svm_barrier();
    for (int i = 10; i < 3 * 4096 - 10; i++)
        if (buf[i] != (char)('a' + (i - 10) % 26)) {
            CHECK(0, "syscall: buf[%d]=%d", i, buf[i]);
            break;
        }
    if (R == 1 % N) {
        int fd2 = open("/dev/null", O_WRONLY);
        CHECK(write(fd2, buf, 3 * 4096) == 3 * 4096, "write() from shared buffer");
        close(fd2);
    }
}

/* Randomized stress: random locked increments of random cells plus partitioned writes;
 * checksums compared with what every process knows it did. */
static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}
static void t_stress(int iters) {
    int cells = 4096 + 512, nlocks = 16;
    long *c = svm_malloc(cells * sizeof(long));
    long *mine = calloc(cells, sizeof(long));
    uint64_t s = 0x9e3779b97f4a7c15ull * (R + 1);
    svm_barrier();
    for (int it = 0; it < iters; it++) {
        int op = (int)(rng(&s) % 10);
        if (op < 8) {
            int k = (int)(rng(&s) % cells);
            long d = (long)(rng(&s) % 1000);
            svm_lock(k % nlocks);
            c[k] += d;
            svm_unlock(k % nlocks);
            mine[k] += d;
        } else if (op == 8) {
            int l = (int)(rng(&s) % nlocks);
            svm_lock(l); /* read-only critical section: sums must be consistent under the lock */
            long x = 0;
            for (int k = l; k < cells; k += nlocks) x += c[k];
            svm_unlock(l);
            CHECK(x >= 0, "stress: negative sum");
        }
        if (it % 97 == 0) svm_barrier();
    }
    long *all = svm_malloc((size_t)N * cells * sizeof(long));
    memcpy(all + (size_t)R * cells, mine, cells * sizeof(long));
    svm_barrier();
    long bad = -1;
    for (int k = 0; k < cells; k++) {
        long e = 0;
        for (int q = 0; q < N; q++) e += all[(size_t)q * cells + k];
        if (e != c[k]) {
            bad = k;
            break;
        }
    }
    CHECK(bad < 0, "stress: cell %ld checksum mismatch", bad);
    free(mine);
}

/* One process stops answering (SIGSTOP) or dies (SIGKILL) in the middle: the others must stop
 * with an error naming it, not hang and not read stale data. */
static void t_die(const char *how) {
    int *a = svm_malloc(N * 4096);
    svm_barrier();
    if (R == 1) {
        svm_lock(5);
        a[1024] = 1;
        raise(strcmp(how, "kill") ? SIGSTOP : SIGKILL);
    }
    sleep(1);
    svm_lock(5); /* held by the stopped process */
    svm_unlock(5);
    svm_barrier();
    fprintf(stderr, "FAIL rank %d: survived a dead peer\n", R);
    exit(1);
}

/* Node grouping (run without SVM_NODE_SIZE): processes with the same host name form one node
 * and processes on different hosts different nodes; with expect > 0 there must be that many. */
static void t_nodes(int expect) {
    char *names = svm_malloc((size_t)N * 64);
    char h[64] = {0};
    if (gethostname(h, sizeof h - 1)) CHECK(0, "gethostname failed");
    memcpy(names + (size_t)R * 64, h, 64);
    svm_barrier();
    int hosts = 0;
    for (int q = 0; q < N; q++) {
        int first = 1;
        for (int p = 0; p < q; p++) first &= strcmp(names + (size_t)p * 64, names + (size_t)q * 64) != 0;
        hosts += first;
        int same_host = !strcmp(names + (size_t)q * 64, h), same_node = svm__node_of(q) == svm__node_of(R);
        CHECK(same_host == same_node, "rank %d on host %s is %s node (%d) as rank %d on %s (node %d)", q,
              names + (size_t)q * 64, same_node ? "in the same" : "in another", svm__node_of(q), R, h, svm__node_of(R));
    }
    CHECK(hosts == svm__nodes(), "%d host names but %d svm nodes", hosts, svm__nodes());
    CHECK(expect <= 0 || svm__nodes() == expect, "%d svm nodes, expected %d", svm__nodes(), expect);
    if (R == 0) {
        printf("nodes=%d:", svm__nodes());
        for (int q = 0; q < N; q++) printf(" %d@%s/node%d", q, names + (size_t)q * 64, svm__node_of(q));
        printf("\n");
    }
    svm_barrier();
}

int main(int argc, char **argv) {
    if (svm_init(&argc, &argv)) return 2;
    R = svm_rank();
    N = svm_size();
    const char *t = argc > 1 ? argv[1] : "all";
    int all = !strcmp(t, "all");
    if (all || !strcmp(t, "mp_lock")) t_mp_lock();
    if (all || !strcmp(t, "barrier")) t_barrier();
    if (all || !strcmp(t, "counter")) t_counter(argc > 2 && !all ? atoi(argv[2]) : 100);
    if (all || !strcmp(t, "false_sharing")) t_false_sharing();
    if (all || !strcmp(t, "syscall")) t_syscall();
    if (all || !strcmp(t, "stress")) t_stress(argc > 2 && !all ? atoi(argv[2]) : 500);
    if (!strcmp(t, "die")) t_die(argc > 2 ? argv[2] : "stop");
    if (!strcmp(t, "nodes")) t_nodes(argc > 2 ? atoi(argv[2]) : 0);
    svm_finalize();
    if (failed) return 1;
    if (R == 0) printf("ok %s np=%d protocol=%s\n", t, N, svm_protocol());
    return 0;
}
