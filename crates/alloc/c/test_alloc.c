/* C-side test of the huddle-alloc ABI, built through `pkg-config huddle-alloc`.
 * Usage: test_alloc            (as root: also checks a physical TILEPro64-mapped pool)
 *        test_alloc --unprivileged  (expects the physical pool to fail with EPERM) */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <huddle/alloc.h>

static int failures;
#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (!(cond)) {                                                    \
            failures++;                                                   \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                 \
            fprintf(stderr, "\n");                                        \
        }                                                                 \
    } while (0)

struct worker { huddle_pool *p; int controller, bank, ok; };

static void *bound_worker(void *arg) {
    struct worker *w = arg;
    w->ok = huddle_bind_thread(w->p, w->controller, w->bank) == 0;
    for (int i = 0; i < 16 && w->ok; i++) {
        char *m = huddle_alloc_bound(w->p, 4096);
        int c = -1, b = -1;
        w->ok = m && huddle_where(w->p, m, &c, &b) == 0 && c == w->controller && b == w->bank;
        if (m) memset(m, i, 4096);
    }
    return NULL;
}

static void synthetic_pool(void) {
    huddle_pool *p = huddle_pool_create(4 << 20, "synthetic:controllers=4,banks=8,chunk=4096");
    CHECK(p != NULL, "%s", huddle_last_error());
    if (!p) return;
    CHECK(huddle_pool_controllers(p) == 4 && huddle_pool_banks(p) == 8, "geometry");
    /* Every (controller, bank) hands out memory that lies there. */
    for (int c = 0; c < 4; c++)
        for (int b = 0; b < 8; b++) {
            void *m = huddle_alloc(p, 100, c, b, HUDDLE_ALLOC_EXACT);
            int wc = -1, wb = -1;
            CHECK(m && huddle_where(p, m, &wc, &wb) == 0 && wc == c && wb == b,
                  "(%d,%d) -> (%d,%d)", c, b, wc, wb);
            huddle_free(p, m);
        }
    /* Errors: NULL/-1 and errno, never a crash. */
    errno = 0;
    CHECK(huddle_alloc(p, 10, 4, 0, HUDDLE_ALLOC_EXACT) == NULL && errno == EINVAL, "bad controller");
    errno = 0;
    CHECK(huddle_alloc(p, 10, 0, 0, 7) == NULL && errno == EINVAL, "bad mode");
    CHECK(strstr(huddle_last_error(), "mode 7") != NULL, "message: %s", huddle_last_error());
    errno = 0;
    CHECK(huddle_alloc_bound(p, 10) == NULL && errno == ESRCH, "unbound thread");
    int local = 0;
    errno = 0;
    CHECK(huddle_where(p, &local, NULL, NULL) == -1 && errno == EINVAL, "foreign pointer");
    errno = 0;
    huddle_free(p, &local);
    CHECK(errno == EINVAL, "free of a foreign pointer sets EINVAL");
    CHECK(huddle_pool_controllers(NULL) == -1 && huddle_where(NULL, &local, NULL, NULL) == -1, "NULL pool");
    /* A split allocation spans banks and comes back whole. */
    char *big = huddle_alloc(p, 64 << 10, 0, 0, HUDDLE_ALLOC_SPLIT);
    CHECK(big != NULL, "split: %s", huddle_last_error());
    if (big) {
        memset(big, 1, 64 << 10);
        huddle_free(p, big);
    }
    CHECK(huddle_alloc(p, 64 << 10, 0, 0, HUDDLE_ALLOC_ANY) == NULL && errno == ENOMEM,
          "64 KiB cannot lie in one bank of this map");
    /* Threads bound to their own banks. */
    pthread_t t[4];
    struct worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){p, i, 7 - i, 0};
        pthread_create(&t[i], NULL, bound_worker, &w[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CHECK(w[i].ok, "thread %d bound to (%d,%d)", i, i, 7 - i);
    }
    huddle_pool_destroy(p);
    errno = 0;
    CHECK(huddle_pool_create(1 << 20, "bogus") == NULL && errno == EINVAL, "unknown mapping");
    CHECK(strstr(huddle_last_error(), "unknown address mapping 'bogus'") != NULL, "%s", huddle_last_error());
    CHECK(huddle_pool_create(0, "synthetic:banks=2") == NULL && errno == EINVAL, "zero size");
}

static void physical_pool(int unprivileged) {
    errno = 0;
    huddle_pool *p = huddle_pool_create(8 << 20, "tilepro64");
    if (unprivileged) {
        CHECK(p == NULL && errno == EPERM, "errno %d", errno);
        CHECK(strstr(huddle_last_error(), "CAP_SYS_ADMIN") != NULL, "%s", huddle_last_error());
        printf("unprivileged: %s\n", huddle_last_error());
        huddle_pool_destroy(p);
        return;
    }
    CHECK(p != NULL, "%s", huddle_last_error());
    if (!p) return;
    CHECK(huddle_pool_controllers(p) == 4 && huddle_pool_banks(p) == 8, "TILEPro64 geometry");
    int found = 0;
    for (int b = 0; b < 8; b++) {
        void *m = huddle_alloc(p, 4096, 0, b, HUDDLE_ALLOC_EXACT);
        int c = -1, wb = -1;
        if (m) {
            found++;
            CHECK(huddle_where(p, m, &c, &wb) == 0 && c == 0 && wb == b, "bank %d", b);
        }
    }
    /* Guest-physical addresses stay below 2^34 on this VM: all in controller 0. */
    CHECK(found > 0, "no bank of controller 0 had memory");
    huddle_pool_destroy(p);

    /* A page in a chosen bank of a published x86 mapping (its default page granule): every
     * (controller, bank) of a 64 MiB pool serves 1 byte, 64 bytes and a page exactly there. */
    p = huddle_pool_create(64 << 20, "skylake-ddr4-2ch");
    CHECK(p != NULL, "%s", huddle_last_error());
    if (!p) return;
    CHECK(huddle_pool_chunk_size(p) == 4096, "chunk %zu", huddle_pool_chunk_size(p));
    size_t sizes[] = {1, 64, 4096};
    for (int c = 0; c < huddle_pool_controllers(p); c++)
        for (int b = 0; b < huddle_pool_banks(p); b++)
            for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
                void *m = huddle_alloc(p, sizes[i], c, b, HUDDLE_ALLOC_EXACT);
                int wc = -1, wb = -1;
                CHECK(m != NULL, "%zu bytes at (%d, %d): %s", sizes[i], c, b, huddle_last_error());
                CHECK(m && huddle_where(p, m, &wc, &wb) == 0 && wc == c && wb == b, "%zu at (%d, %d)", sizes[i], c, b);
                huddle_free(p, m);
            }
    huddle_pool_destroy(p);

    /* Line granule: a page cannot lie in one bank; the error says why (ENOTSUP). */
    p = huddle_pool_create(4 << 20, "skylake-ddr4-2ch:granule=line");
    CHECK(p != NULL, "%s", huddle_last_error());
    if (!p) return;
    errno = 0;
    CHECK(huddle_alloc(p, 4096, 0, 0, HUDDLE_ALLOC_EXACT) == NULL && errno == ENOTSUP &&
              strstr(huddle_last_error(), "every 128 bytes"),
          "errno %d: %s", errno, huddle_last_error());
    huddle_pool_destroy(p);

    /* This machine's mapping: a usable pool on any CPU (the numa fallback where none is published). */
    p = huddle_pool_create(4 << 20, NULL);
    CHECK(p != NULL && huddle_pool_mapping(p) != NULL, "%s", huddle_last_error());
    if (!p) return;
    printf("this machine's mapping: %s (%d controllers x %d banks)\n", huddle_pool_mapping(p),
           huddle_pool_controllers(p), huddle_pool_banks(p));
    void *m = huddle_alloc(p, 4096, 0, 0, HUDDLE_ALLOC_CONTROLLER);
    CHECK(m != NULL, "%s", huddle_last_error());
    huddle_free(p, m);
    huddle_pool_destroy(p);
}

int main(int argc, char **argv) {
    int unprivileged = argc > 1 && strcmp(argv[1], "--unprivileged") == 0;
    if (!unprivileged) synthetic_pool();
    physical_pool(unprivileged);
    if (failures) {
        fprintf(stderr, "test_alloc: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_alloc: ok%s\n", unprivileged ? " (unprivileged)" : "");
    return 0;
}
