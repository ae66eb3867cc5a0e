/* huddle PMPI agent: preload it (LD_PRELOAD) into an unmodified MPI program to record, per
 * rank, the bytes and messages sent to every peer (in MPI_COMM_WORLD ranks), the time spent
 * inside blocking MPI calls and outside them, the compute time while own nonblocking sends are
 * still pending, and cache misses where the CPU exposes a counter. The numbers live on a
 * node-local shared-memory board that huddle's manager reads while the program runs (layout:
 * docs/pmpi.md; reader: crates/simmer/src/board.rs); at MPI_Finalize rank 0 writes the rank
 * matrix (bytes sent, row = sender) in huddle's CSV format.
 *
 * Built once per MPI implementation (the ABI differs): build/mpi/<impl>/libhuddle_pmpi.so.
 * Assumes one thread calls MPI at a time for the time split; byte counts are atomic.
 *
 * Every wrapper answers to both names, MPI_X and PMPI_X, and calls the MPI library's own
 * PMPI_X, found below this library with dlsym(RTLD_NEXT). The PMPI_X name is what sees
 * Fortran: Open MPI's Fortran bindings (mpif.h, use mpi, use mpi_f08) call PMPI_Send and
 * the like directly, below the MPI_ names, while MPICH's call MPI_Send. A call that passes
 * through two wrappers (a binding's MPI_Send into our PMPI_Send) is counted once: `depth`. */
#define _GNU_SOURCE
#include <mpi.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

/* ---- the MPI library's own entry points ---- */
static void *resolve(const char *name)
{
    void *fn = dlsym(RTLD_NEXT, name);
    if (!fn) {
        /* Only reached from an MPI call, so an MPI library is loaded: it is not the one the
         * agent was built for. Nothing sensible can be returned to the program. */
        fprintf(stderr, "huddle-pmpi: %s not found below the agent (%s): is this the MPI it was built for?\n", name,
                dlerror());
        abort();
    }
    return fn;
}

/* REAL(Send) is the library's PMPI_Send, looked up at the first call of each site. */
#define REAL(NAME)                                                                                        \
    (__extension__({                                                                                      \
        static __typeof__(PMPI_##NAME) *fn_;                                                              \
        __typeof__(PMPI_##NAME) *f_ = __atomic_load_n(&fn_, __ATOMIC_RELAXED);                            \
        if (!f_) {                                                                                        \
            f_ = (__typeof__(PMPI_##NAME) *)resolve("PMPI_" #NAME);                                       \
            __atomic_store_n(&fn_, f_, __ATOMIC_RELAXED);                                                 \
        }                                                                                                 \
        f_;                                                                                               \
    }))

/* The wrapper MPI_NAME also answers to PMPI_NAME (the calls of Open MPI's Fortran bindings). */
#define ALSO_PMPI(NAME) __typeof__(MPI_##NAME) PMPI_##NAME __attribute__((alias("MPI_" #NAME)));

/* ---- board layout: include/huddle/board.h, shared with the reader ---- */
#define BOARD_MAGIC 0x4452414f42445548ULL /* "HUDBOARD" read as a little-endian u64 */
#include "../../include/huddle/board.h"

static struct {
    int active;            /* MPI_Init done and not finalized */
    int rank, size;
    uint64_t *slot;        /* this rank's slot (board or private memory) */
    uint64_t *bytes_to, *msgs_to;
    void *map;
    size_t map_len;
    int on_board;          /* slot lives in the shared board file */
    char board_path[4096];
    int board_named;       /* HUDDLE_BOARD was set: the board belongs to the manager */
    int board_created;     /* this rank created (or re-initialized) the board: the node's first */
    int perf_fd;
    uint64_t last_cache_read;
    int keyval;
    int multiple;          /* MPI_THREAD_MULTIPLE granted */
    int timesplit;         /* keep the time split (HUDDLE_PMPI_TIMESPLIT=0: off) */
    uint64_t pend_mark;    /* start of the current compute-with-pending-sends interval */
    int manager_started;   /* this rank started the node's manager */
    int forward;           /* the report directory is not seen here: hand the report over on stderr */
    char local_report[3100]; /* with forward: the node-local directory the manager reports into */
    char node_report[3000];  /* HUDDLE_NODE_REPORT with %j and %s expanded; empty: none */
    char manager_report[3100]; /* where the node manager this rank started reports; empty: none */
} g = {.perf_fd = -1, .keyval = MPI_KEYVAL_INVALID};

/* initial-exec: a preloaded library may use static TLS, and it avoids __tls_get_addr calls. */
static __thread int depth __attribute__((tls_model("initial-exec"))); /* >0 inside a wrapped call: inner MPI calls are not recorded twice */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

/* The time split reads the clock twice per blocking call. CLOCK_MONOTONIC_COARSE (the
 * default; HUDDLE_PMPI_CLOCK=precise selects CLOCK_MONOTONIC) costs a fraction of a precise
 * read; it advances once per kernel tick, and since call boundaries fall at random phases of
 * the tick, the sum of many measured intervals is unbiased (docs/pmpi.md). */
static clockid_t time_clock = CLOCK_MONOTONIC_COARSE;

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(time_clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void put(int field, uint64_t v) { __atomic_store_n(&g.slot[field], v, __ATOMIC_RELAXED); }
static inline uint64_t get(int field) { return __atomic_load_n(&g.slot[field], __ATOMIC_RELAXED); }

/* ---- pending nonblocking sends: an open-addressing set of request handles ---- */
static uint64_t *pend_keys; /* 0 = empty slot */
static size_t pend_cap, pend_count;

static inline uint64_t req_key(MPI_Request r)
{
    uint64_t k = 0;
    memcpy(&k, &r, sizeof r < sizeof k ? sizeof r : sizeof k);
    return k;
}

static inline size_t hash_key(uint64_t k) { return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 17); }

static int pend_insert(uint64_t k)
{
    if (k == 0) return 0;
    if ((pend_count + 1) * 2 > pend_cap) {
        size_t ncap = pend_cap ? pend_cap * 2 : 64;
        uint64_t *nk = calloc(ncap, sizeof *nk);
        if (!nk) return 0;
        for (size_t i = 0; i < pend_cap; i++) {
            if (!pend_keys[i]) continue;
            size_t j = hash_key(pend_keys[i]) & (ncap - 1);
            while (nk[j]) j = (j + 1) & (ncap - 1);
            nk[j] = pend_keys[i];
        }
        free(pend_keys);
        pend_keys = nk;
        pend_cap = ncap;
    }
    size_t i = hash_key(k) & (pend_cap - 1);
    while (pend_keys[i]) {
        if (pend_keys[i] == k) return 0;
        i = (i + 1) & (pend_cap - 1);
    }
    pend_keys[i] = k;
    pend_count++;
    return 1;
}

#ifndef HUDDLE_PMPI_BYTES_ONLY /* completions remove pending sends */
/* Removes k if present (backward-shift deletion keeps probe chains intact). */
static int pend_remove(uint64_t k)
{
    if (k == 0 || pend_count == 0) return 0;
    size_t mask = pend_cap - 1, i = hash_key(k) & mask;
    while (pend_keys[i] != k) {
        if (!pend_keys[i]) return 0;
        i = (i + 1) & mask;
    }
    pend_keys[i] = 0;
    pend_count--;
    for (size_t j = (i + 1) & mask; pend_keys[j]; j = (j + 1) & mask) {
        size_t home = hash_key(pend_keys[j]) & mask;
        /* move j back to the hole i when its home is not in (i, j] cyclically */
        if ((j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j))) {
            pend_keys[i] = pend_keys[j];
            pend_keys[j] = 0;
            i = j;
        }
    }
    return 1;
}
#endif

static void lock_table(void) { if (g.multiple) pthread_mutex_lock(&table_lock); }
static void unlock_table(void) { if (g.multiple) pthread_mutex_unlock(&table_lock); }

/* ---- cache misses through perf_event_open (absent in VMs without a PMU) ---- */
static void cache_open(void)
{
    const char *off = getenv("HUDDLE_PMPI_CACHE");
    if (off && strcmp(off, "0") == 0) {
        put(S_CACHE_STATE, CACHE_UNAVAILABLE);
        return;
    }
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_HARDWARE;
    a.config = PERF_COUNT_HW_CACHE_MISSES;
    a.exclude_hv = 1;
    int fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) {
        put(S_CACHE_STATE, CACHE_UNAVAILABLE);
        return;
    }
    g.perf_fd = fd;
    put(S_CACHE_STATE, CACHE_COUNTING);
}

static void cache_read(uint64_t t)
{
    g.last_cache_read = t;
    if (g.perf_fd < 0) return;
    uint64_t v;
    if (read(g.perf_fd, &v, sizeof v) == (ssize_t)sizeof v) put(S_CACHE_MISSES, v);
}

/* ---- time split: blocking calls vs outside ---- */
static inline uint64_t enter(void)
{
    if (depth++ != 0 || !g.active || !g.timesplit) return 0;
    uint64_t t = now_ns();
    put(S_COMPUTE, get(S_COMPUTE) + (t - get(S_PHASE_START)));
    if (pend_count > 0) put(S_PENDING_COMPUTE, get(S_PENDING_COMPUTE) + (t - g.pend_mark));
    put(S_IN_CALL, 1);
    put(S_PHASE_START, t);
    return t;
}

static inline void leave(uint64_t t0)
{
    if (--depth != 0 || t0 == 0) return;
    uint64_t t = now_ns();
    put(S_BLOCKING, get(S_BLOCKING) + (t - t0));
    put(S_BLOCKING_CALLS, get(S_BLOCKING_CALLS) + 1);
    put(S_PHASE_START, t);
    put(S_IN_CALL, 0);
    if (pend_count > 0) {
        g.pend_mark = t;
        put(S_PENDING_SINCE, t);
    } else {
        put(S_PENDING_SINCE, 0);
    }
    put(S_UPDATED, t);
    if (t - g.last_cache_read > 50000000ull) { /* every 50 ms at most: read() costs a syscall */
        cache_read(t);
        put(S_CPU, (uint64_t)sched_getcpu());
        put(S_TID, (uint64_t)syscall(SYS_gettid));
    }
}

/* A pending send was posted (outside a blocking call). */
static void pending_add(MPI_Request r)
{
    lock_table();
    int was_empty = pend_count == 0;
    if (pend_insert(req_key(r)) && was_empty && depth == 0) {
        g.pend_mark = now_ns();
        put(S_PENDING_SINCE, g.pend_mark);
    }
    put(S_PENDING_SENDS, pend_count);
    unlock_table();
}

#ifndef HUDDLE_PMPI_BYTES_ONLY /* the completion wrappers' helpers */
/* Requests in keys[] completed; inside_blocking says whether enter() already closed the
 * compute interval. */
static void pending_done(const uint64_t *keys, const int *idx, int n, int inside_blocking)
{
    lock_table();
    size_t before = pend_count;
    for (int i = 0; i < n; i++) pend_remove(keys[idx ? idx[i] : i]);
    if (before > 0 && pend_count == 0 && !inside_blocking && depth == 0 && g.active) {
        uint64_t t = now_ns();
        put(S_PENDING_COMPUTE, get(S_PENDING_COMPUTE) + (t - g.pend_mark));
        put(S_PENDING_SINCE, 0);
    }
    put(S_PENDING_SENDS, pend_count);
    unlock_table();
}

/* Copies request handles before a completion call nulls them; NULL when nothing is pending. */
#define KEYS_ON_STACK 64
static uint64_t *snapshot(int n, const MPI_Request *reqs, uint64_t *stackbuf)
{
    if (pend_count == 0 || n <= 0) return NULL;
    uint64_t *k = n <= KEYS_ON_STACK ? stackbuf : malloc((size_t)n * sizeof *k);
    if (!k) return NULL;
    for (int i = 0; i < n; i++) k[i] = req_key(reqs[i]);
    return k;
}
static void snapshot_free(uint64_t *k, uint64_t *stackbuf) { if (k && k != stackbuf) free(k); }
#endif

/* ---- communicator rank translation to MPI_COMM_WORLD, cached as an attribute ---- */
struct cinfo {
    int inter;     /* intercommunicator: destinations name the remote group */
    int me, size;  /* own rank and (remote) size */
    int *world;    /* rank -> world rank; NULL for MPI_COMM_WORLD */
};
static struct cinfo world_info;
static MPI_Comm last_comm = MPI_COMM_NULL;
static struct cinfo *last_info;

static int cinfo_delete(MPI_Comm c, int key, void *val, void *extra)
{
    (void)c; (void)key; (void)extra;
    struct cinfo *ci = val;
    if (ci == last_info) {
        last_info = NULL;
        last_comm = MPI_COMM_NULL;
    }
    free(ci->world);
    free(ci);
    return MPI_SUCCESS;
}

static const struct cinfo *comm_info(MPI_Comm c)
{
    if (c == MPI_COMM_WORLD) return &world_info;
    if (!g.multiple && c == last_comm && last_info) return last_info; /* single-threaded cache */
    if (g.keyval == MPI_KEYVAL_INVALID || c == MPI_COMM_NULL) return NULL;
    void *v = NULL;
    int flag = 0;
    if (PMPI_Comm_get_attr(c, g.keyval, &v, &flag) == MPI_SUCCESS && flag) {
        if (!g.multiple) {
            last_comm = c;
            last_info = v;
        }
        return v;
    }
    struct cinfo *ci = calloc(1, sizeof *ci);
    if (!ci) return NULL;
    MPI_Group grp, wgrp;
    PMPI_Comm_test_inter(c, &ci->inter);
    PMPI_Comm_rank(c, &ci->me);
    if (ci->inter) {
        PMPI_Comm_remote_size(c, &ci->size);
        PMPI_Comm_remote_group(c, &grp);
    } else {
        PMPI_Comm_size(c, &ci->size);
        PMPI_Comm_group(c, &grp);
    }
    PMPI_Comm_group(MPI_COMM_WORLD, &wgrp);
    int *from = malloc((size_t)ci->size * sizeof *from);
    ci->world = malloc((size_t)ci->size * sizeof *ci->world);
    if (!from || !ci->world) {
        free(from); free(ci->world); free(ci);
        PMPI_Group_free(&grp); PMPI_Group_free(&wgrp);
        return NULL;
    }
    for (int i = 0; i < ci->size; i++) from[i] = i;
    PMPI_Group_translate_ranks(grp, ci->size, from, wgrp, ci->world);
    free(from);
    PMPI_Group_free(&grp);
    PMPI_Group_free(&wgrp);
    PMPI_Comm_set_attr(c, g.keyval, ci);
    if (!g.multiple) {
        last_comm = c;
        last_info = ci;
    }
    return ci;
}

static inline int to_world(const struct cinfo *ci, int r)
{
    if (r < 0 || r >= ci->size) return -1;
    int w = ci->world ? ci->world[r] : r;
    return (w >= 0 && w < g.size) ? w : -1; /* MPI_UNDEFINED (another world, spawn) */
}

static inline uint64_t type_bytes(MPI_Datatype t, int count)
{
    int sz = 0;
    if (count <= 0 || PMPI_Type_size(t, &sz) != MPI_SUCCESS || sz <= 0) return 0;
    return (uint64_t)count * (uint64_t)sz;
}

static inline void add_to(int w, uint64_t bytes)
{
    if (w < 0) return;
    __atomic_fetch_add(&g.bytes_to[w], bytes, __ATOMIC_RELAXED);
    __atomic_fetch_add(&g.msgs_to[w], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&g.slot[S_SENT_BYTES], bytes, __ATOMIC_RELAXED);
    __atomic_fetch_add(&g.slot[S_SENT_MSGS], 1, __ATOMIC_RELAXED);
}

/* A point-to-point send of count x type to dest in comm. */
static inline void count_send(int dest, int count, MPI_Datatype t, MPI_Comm c)
{
    if (!g.active || depth != 0 || dest == MPI_PROC_NULL) return;
    const struct cinfo *ci = comm_info(c);
    if (ci) add_to(to_world(ci, dest), type_bytes(t, count));
}

/* Collective traffic, logical model (docs/pmpi.md): `bytes(j)` goes from this rank to comm
 * rank j for each j in the set the collective defines. Intercommunicator collectives are not
 * counted. */
static const struct cinfo *coll_info(MPI_Comm c)
{
    if (!g.active || depth != 1) return NULL; /* depth 1: inside our own wrapper only */
    const struct cinfo *ci = comm_info(c);
    return (ci && !ci->inter) ? ci : NULL;
}

static void to_all_others(const struct cinfo *ci, uint64_t bytes)
{
    for (int j = 0; j < ci->size; j++)
        if (j != ci->me) add_to(to_world(ci, j), bytes);
}

/* ---- board setup ---- */
static void warn(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "huddle-pmpi: rank %d: ", g.rank);
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
}

/* HUDDLE_NODE=1: a node manager (`huddle node`) manages each node's ranks (docs/cluster.md). */
static int node_mode(void)
{
    const char *v = getenv("HUDDLE_NODE");
    return v && strcmp(v, "1") == 0;
}

/* This host's name as a file-name part: characters other than [A-Za-z0-9._-] become '_'. */
static void host_name(char *out, size_t len)
{
    if (len == 0) return;
    out[0] = 0;
    if (gethostname(out, len - 1) != 0) snprintf(out, len, "unknown");
    out[len - 1] = 0;
    for (char *c = out; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '.' || *c == '-' || *c == '_'))
            *c = '_';
    if (!out[0] || strcmp(out, ".") == 0 || strcmp(out, "..") == 0) snprintf(out, len, "unknown");
}

/* The private directory for boards: $XDG_RUNTIME_DIR/huddle or /tmp/huddle-$UID, mode 0700,
 * owned by us. Returns 0 and fills dir, or -1 after a warning. */
static int board_dir(char *dir, size_t len)
{
    const char *x = getenv("XDG_RUNTIME_DIR");
    struct stat st;
    if (x && *x && stat(x, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(dir, len, "%s/huddle", x);
    else
        snprintf(dir, len, "/tmp/huddle-%u", (unsigned)getuid());
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        warn("cannot create board directory %s: %s", dir, strerror(errno));
        return -1;
    }
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077)) {
        warn("board directory %s is not a private directory of this user (want mode 0700)%s", dir, "");
        return -1;
    }
    return 0;
}

static void slot_init(uint64_t *slot)
{
    g.slot = slot;
    g.bytes_to = (uint64_t *)((char *)slot + SLOT_FIXED);
    g.msgs_to = g.bytes_to + g.size;
    uint64_t t = now_ns();
    put(S_PID, (uint64_t)getpid());
    put(S_RANK, (uint64_t)g.rank);
    put(S_INIT, t);
    put(S_PHASE_START, t);
    put(S_UPDATED, t);
    put(S_CPU, (uint64_t)sched_getcpu());
    put(S_TID, (uint64_t)syscall(SYS_gettid));
    char *host = (char *)slot + HOSTNAME_OFFSET;
    gethostname(host, HOSTNAME_SIZE - 1);
    host[HOSTNAME_SIZE - 1] = 0;
    __atomic_store_n(&slot[S_STATE], STATE_RUNNING, __ATOMIC_RELEASE);
}

static size_t slot_size(int n) { return ((size_t)SLOT_FIXED + 16u * (size_t)n + 63u) & ~(size_t)63u; }

static void board_open(uint64_t stamp)
{
    size_t ssz = slot_size(g.size), len = HEADER_SIZE + ssz * (size_t)g.size;
    const char *name = getenv("HUDDLE_BOARD");
    char dir[3000];
    g.board_named = name && *name;
    /* With node managers, one board per node even where the board directory is shared by
     * several nodes (a shared /tmp, or namespace hosts on one machine): the name carries the
     * host's name. */
    char host[HOSTNAME_SIZE + 1] = "";
    if (node_mode()) {
        host[0] = '-';
        host_name(host + 1, sizeof host - 1);
    }
    if (g.board_named && strchr(name, '/')) {
        size_t nl = strlen(name), sl = strlen(".board");
        if (host[0] && nl > sl && strcmp(name + nl - sl, ".board") == 0)
            snprintf(g.board_path, sizeof g.board_path, "%.*s%s.board", (int)(nl - sl), name, host);
        else
            snprintf(g.board_path, sizeof g.board_path, "%s%s", name, host);
    } else if (board_dir(dir, sizeof dir) == 0) {
        if (g.board_named)
            snprintf(g.board_path, sizeof g.board_path, "%s/%s%s.board", dir, name, host);
        else
            snprintf(g.board_path, sizeof g.board_path, "%s/job-%016llx%s.board", dir, (unsigned long long)stamp, host);
    } else {
        g.board_path[0] = 0;
    }
    void *map = MAP_FAILED;
    if (g.board_path[0]) {
        int fd = open(g.board_path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        struct stat st;
        if (fd < 0) {
            warn("cannot open board %s: %s", g.board_path, strerror(errno));
        } else if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid()) {
            warn("board %s is not a regular file of this user%s", g.board_path, "");
        } else {
            fchmod(fd, 0600);
            flock(fd, LOCK_EX); /* ranks of this job on this node initialize it once */
            fstat(fd, &st);     /* the size as the rank before us left it */
            uint64_t hdr[8] = {0};
            ssize_t got = pread(fd, hdr, sizeof hdr, 0);
            int fresh = got != (ssize_t)sizeof hdr || hdr[H_MAGIC] != BOARD_MAGIC || hdr[H_VERSION] != BOARD_VERSION ||
                        hdr[H_WORLD] != (uint64_t)g.size || hdr[H_STAMP] != stamp || (size_t)st.st_size != len;
            int ok = 1;
            if (fresh) ok = ftruncate(fd, 0) == 0 && ftruncate(fd, (off_t)len) == 0;
            if (ok) map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (!ok || map == MAP_FAILED) {
                warn("cannot size or map board %s: %s", g.board_path, strerror(errno));
                map = MAP_FAILED;
            } else if (fresh) {
                g.board_created = 1;
                uint64_t *h = map;
                h[H_VERSION] = BOARD_VERSION;
                h[H_HEADER_SIZE] = HEADER_SIZE;
                h[H_WORLD] = (uint64_t)g.size;
                h[H_SLOT_SIZE] = ssz;
                h[H_STAMP] = stamp;
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                h[H_CREATED] = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
                __atomic_store_n(&h[H_MAGIC], BOARD_MAGIC, __ATOMIC_RELEASE); /* readers check it last */
            }
            flock(fd, LOCK_UN);
        }
        if (fd >= 0) close(fd);
    }
    if (map != MAP_FAILED) {
        g.map = map;
        g.map_len = len;
        g.on_board = 1;
        slot_init((uint64_t *)((char *)map + HEADER_SIZE + ssz * (size_t)g.rank));
        return;
    }
    /* No board: keep counting in private memory so the rank matrix is still written. */
    g.board_path[0] = 0;
    void *mem = calloc(1, ssz);
    static uint64_t dummy[SLOT_FIXED / 8 + 2];
    slot_init(mem ? mem : dummy);
    if (!mem) g.size = 0; /* no memory for per-peer counters: count nothing rather than overflow */
}

static void at_exit(void)
{
    if (!g.active) return;
    g.active = 0;
    put(S_STATE, STATE_NO_FINALIZE);
    put(S_UPDATED, now_ns());
    fprintf(stderr,
            "huddle-pmpi: rank %d exited without calling MPI_Finalize: no rank matrix written%s%s\n",
            g.rank, g.on_board ? "; its counters stay on the board " : "", g.on_board ? g.board_path : "");
}

/* ---- the node manager (HUDDLE_NODE=1): started by the rank that created the node's board ---- */

/* The huddle binary: HUDDLE_BIN (set by `huddle run`), else `huddle` in PATH. */
static int find_huddle(char *out, size_t len)
{
    const char *bin = getenv("HUDDLE_BIN");
    if (bin && *bin) {
        snprintf(out, len, "%s", bin);
        return access(out, X_OK) == 0;
    }
    const char *path = getenv("PATH");
    if (!path) return 0;
    const char *p = path;
    while (*p) {
        const char *end = strchr(p, ':');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n > 0 && n + 8 < len) {
            snprintf(out, len, "%.*s/huddle", (int)n, p);
            if (access(out, X_OK) == 0) return 1;
        }
        if (!end) break;
        p = end + 1;
    }
    return 0;
}

extern char **environ;

/* ---- node reports through the launcher's stderr (no shared file system) ----
 * `huddle run` puts DIR/.huddle-launch-TOKEN into the report directory and TOKEN into
 * HUDDLE_NODE_TOKEN. A node that does not see that file does not see the launch node's DIR:
 * its manager reports into a node-local directory, and at MPI_Finalize the rank that started
 * it writes the files to its stderr as framed lines, which mpirun/orted or srun/slurmstepd
 * forward to the launch node, where huddle run rebuilds them in DIR (crates/relay has the
 * format and the reader). Without a token (HUDDLE_NODE=1 set by hand) nobody reads such
 * lines: the report goes to DIR as before. */
#define FRAME_MARKER "@huddle-node"
/* Raw bytes per line: 768 characters of base64, a line under 1 KiB with the longest header
 * (host 63, file name 64 characters). Longer lines were cut and mixed with another node's
 * under srun (slurmstepd forwards in pieces of about 1 KiB: files lost in tests/node-slurm.sh
 * with 3-KiB lines, none with these). */
#define FRAME_CHUNK 576
#define FRAME_NAME_MAX 64
#define HANDOVER_WAIT_MS 3000  /* longest wait for the node manager's report at MPI_Finalize */
#define FRAME_FILE_MAX (16u << 20)

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return; /* stderr gone: nothing to hand the report to */
        p += w;
        n -= (size_t)w;
    }
}

static int token_ok(const char *t)
{
    size_t n = 0;
    for (; t[n]; n++)
        if (!((t[n] >= '0' && t[n] <= '9') || (t[n] >= 'a' && t[n] <= 'f'))) return 0;
    return n > 0 && n <= 64;
}

/* Writes `in` to `out` with Slurm's %j (SLURM_JOB_ID) and %s (SLURM_STEP_ID) expanded and %%
 * made %, so that the steps of one batch script can give each its own report directory.
 * Returns 0, or -1 with `why` set: a pattern whose variable is not set, or too long. */
static int expand_slurm_pattern(const char *in, char *out, size_t len, const char **why)
{
    size_t o = 0;
    for (const char *c = in; *c; c++) {
        const char *add = NULL;
        char one[2] = {*c, 0};
        if (*c == '%' && (c[1] == 'j' || c[1] == 's')) {
            add = getenv(c[1] == 'j' ? "SLURM_JOB_ID" : "SLURM_STEP_ID");
            if (!add || !*add) {
                *why = c[1] == 'j' ? "it has %j but SLURM_JOB_ID is not set (not under srun)"
                                   : "it has %s but SLURM_STEP_ID is not set (not under srun)";
                return -1;
            }
            c++;
        } else if (*c == '%' && c[1] == '%') {
            add = "%";
            c++;
        } else {
            add = one;
        }
        size_t n = strlen(add);
        if (o + n >= len) {
            *why = "it is too long";
            return -1;
        }
        memcpy(out + o, add, n);
        o += n;
    }
    out[o] = 0;
    return 0;
}

/* mkdir -p, mode 0700 for what it makes (a report directory per step, DIR/job-%j/step-%s,
 * whose parent is new too); errors are left to whoever uses the directory. */
static void mkdir_parents(const char *path)
{
    char p[4096];
    snprintf(p, sizeof p, "%s", path);
    for (char *c = p + 1; *c; c++)
        if (*c == '/') {
            *c = 0;
            mkdir(p, 0700);
            *c = '/';
        }
    mkdir(p, 0700);
}

/* Fills g.node_report from HUDDLE_NODE_REPORT; on a bad pattern, rank 0 says why and no
 * report is written (the node managers still run). */
static void read_node_report(void)
{
    const char *report = getenv("HUDDLE_NODE_REPORT"), *why = NULL;
    g.node_report[0] = 0;
    if (!report || !*report) return;
    if (expand_slurm_pattern(report, g.node_report, sizeof g.node_report, &why) != 0) {
        g.node_report[0] = 0;
        if (g.rank == 0)
            fprintf(stderr, "huddle-pmpi: HUDDLE_NODE_REPORT=%s: %s: no node reports\n", report, why);
    }
}

/* Decides g.forward: a token was given and its marker is not at HUDDLE_NODE_REPORT. A marker
 * missed on a shared directory (a late NFS view) only makes the report take the longer way;
 * a random token cannot be found where the directory is another one. */
static void choose_report_route(void)
{
    const char *report = g.node_report, *token = getenv("HUDDLE_NODE_TOKEN");
    if (!node_mode() || !*report || !token || !token_ok(token)) return;
    char marker[4400], dir[3000];
    snprintf(marker, sizeof marker, "%s/.huddle-launch-%s", report, token);
    if (access(marker, F_OK) == 0) return;
    if (board_dir(dir, sizeof dir) != 0) return; /* no private local directory: DIR it is */
    snprintf(g.local_report, sizeof g.local_report, "%s/report-%s", dir, token);
    g.forward = 1;
}

static const char b64_digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static size_t base64(const unsigned char *in, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) | (i + 2 < n ? in[i + 2] : 0);
        out[o++] = b64_digits[v >> 18 & 63];
        out[o++] = b64_digits[v >> 12 & 63];
        out[o++] = i + 1 < n ? b64_digits[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? b64_digits[v & 63] : '=';
    }
    return o;
}

/* One framed line on stderr. Where stderr is a pipe (the launcher's daemon reads it), first
 * let the reader empty it (bounded by `until`): then each read takes whole lines, and a line
 * is not split among other ranks' output on the way to the launch node. */
static void frame_line(const char *line, size_t n, uint64_t until)
{
    struct stat st;
    if (fstat(2, &st) == 0 && S_ISFIFO(st.st_mode)) {
        int queued = 0;
        while (ioctl(2, FIONREAD, &queued) == 0 && queued > 0 && now_ns() < until) {
            struct timespec ts = {0, 50000}; /* 50 us: the reader usually takes a line within that */
            nanosleep(&ts, NULL);
        }
    }
    write_all(2, line, n);
}

/* Sends file `path` under `name` (node-HOST/NAME or rank-matrix.csv); 1 when it was sent. */
static int frame_file(const char *token, const char *name, const char *path, uint64_t until)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0) return 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > FRAME_FILE_MAX) {
        close(fd);
        return 0;
    }
    unsigned char buf[FRAME_CHUNK];
    char line[1024];
    uint64_t hash = 0xcbf29ce484222325ull, size = 0, seq = 0;
    for (;;) {
        size_t got = 0;
        while (got < sizeof buf) {
            ssize_t r = read(fd, buf + got, sizeof buf - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (size_t)r;
        }
        if (got == 0) break;
        for (size_t i = 0; i < got; i++) hash = (hash ^ buf[i]) * 0x100000001b3ull;
        int h = snprintf(line, sizeof line, "%s %s data %s %llu ", FRAME_MARKER, token, name, (unsigned long long)seq);
        if (h <= 0 || (size_t)h + 4 * ((got + 2) / 3) + 1 > sizeof line) break; /* cannot happen: names are short */
        size_t n = (size_t)h + base64(buf, got, line + h);
        line[n++] = '\n';
        frame_line(line, n, until);
        size += got;
        seq++;
        if (got < sizeof buf) break;
    }
    close(fd);
    int n = snprintf(line, sizeof line, "%s %s file %s %llu %016llx %llu\n", FRAME_MARKER, token, name,
                     (unsigned long long)size, (unsigned long long)hash, (unsigned long long)seq);
    if (n > 0 && n < (int)sizeof line) frame_line(line, (size_t)n, until);
    return 1;
}

/* The node manager's state from its node.json (written atomically): done, failed, or
 * running (with its pid); "" without the file. */
static const char *manager_state(const char *node_json, pid_t *pid)
{
    /* Whole: with many ranks on a node the rank list may come before "state". */
    int fd = open(node_json, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) return "";
    char *text = fstat(fd, &st) == 0 && st.st_size > 0 && st.st_size < (16 << 20) ? malloc((size_t)st.st_size + 1) : NULL;
    ssize_t n = text ? read(fd, text, (size_t)st.st_size) : -1;
    close(fd);
    if (n <= 0) {
        free(text);
        return "";
    }
    text[n] = 0;
    const char *p = strstr(text, "\"pid\":"), *state = "running";
    if (p) *pid = (pid_t)atol(p + 6);
    if (strstr(text, "\"state\": \"done\""))
        state = "done";
    else if (strstr(text, "\"state\": \"failed\""))
        state = "failed";
    free(text);
    return state;
}

/* Waits (at most HANDOVER_WAIT_MS) for the node manager that reports into NODE_JSON's
 * directory to finish: "done" or "failed" as it says, "gone" if it died (SIGKILL) meanwhile,
 * "running" if still busy at the bound, "none" if it never wrote one. */
/* A node manager killed with SIGKILL leaves its CPU claim behind (huddle's manager::claims:
 * DEFAULT_DIR/PID, DEFAULT_DIR = /dev/shm/huddle-cpu-claims), which only a later manager on
 * this node would sweep. Removed here as the managers remove their own: under the directory's
 * lock, the directory and its lock file too where no other manager's claim is left. A lock
 * file replaced meanwhile (another last one out) is left to its holder. */
#define CLAIMS_DIR "/dev/shm/huddle-cpu-claims"
static void drop_dead_claim(pid_t pid)
{
    char path[64];
    int fd = open(CLAIMS_DIR "/.lock", O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return;
    struct stat held, now;
    if (flock(fd, LOCK_EX) != 0 || fstat(fd, &held) != 0 || stat(CLAIMS_DIR "/.lock", &now) != 0 ||
        held.st_ino != now.st_ino) {
        close(fd);
        return;
    }
    snprintf(path, sizeof path, CLAIMS_DIR "/%d", (int)pid);
    unlink(path);
    int others = 0;
    DIR *d = opendir(CLAIMS_DIR);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        others += e->d_name[0] >= '0' && e->d_name[0] <= '9';
    if (d) closedir(d);
    if (d && !others) {
        unlink(CLAIMS_DIR "/.lock");
        rmdir(CLAIMS_DIR);
    }
    close(fd);
}

static const char *wait_for_manager(const char *node_json, unsigned *waited_ms)
{
    uint64_t t0 = now_ns(), deadline = t0 + HANDOVER_WAIT_MS * 1000000ull;
    const char *state = "none";
    for (;;) {
        pid_t pid = 0;
        const char *s = manager_state(node_json, &pid);
        if (*s) state = s;
        if (strcmp(state, "done") == 0 || strcmp(state, "failed") == 0) break;
        if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) {
            state = "gone";
            drop_dead_claim(pid);
            break;
        }
        if (now_ns() >= deadline) break;
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    *waited_ms = (unsigned)((now_ns() - t0) / 1000000ull);
    return state;
}

/* At MPI_Finalize, where the report directory is seen by the node (no hand-over): the rank
 * that started the node manager waits for it to finish its report, so that the end of the
 * step cannot cut it short (Slurm's proctrack/cgroup kills what is left in a step's cgroup,
 * the node manager included, once the tasks have ended). */
static void wait_for_report(void)
{
    char host[HOSTNAME_SIZE], path[3300];
    host_name(host, sizeof host);
    snprintf(path, sizeof path, "%s/node-%s/node.json", g.manager_report, host);
    unsigned waited_ms = 0;
    if (strcmp(wait_for_manager(path, &waited_ms), "running") == 0)
        fprintf(stderr, "huddle-pmpi: rank %d: the node manager of %s was still busy after %u ms: the end of the job may stop it before its report in %s/node-%s is finished\n",
                g.rank, host, waited_ms, g.manager_report, host);
}

/* At MPI_Finalize, after every rank of this node finalized: waits (bounded) for the node
 * manager to finish its report, sends the report's files on stderr, then removes them. A
 * manager that died (SIGKILL) is not waited for; one still busy after the bound is left to
 * finish, its files on this node (named on stderr). */
static void hand_over_report(void)
{
    const char *token = getenv("HUDDLE_NODE_TOKEN");
    char host[HOSTNAME_SIZE], node[HOSTNAME_SIZE + 8], dir[3300], path[3700], name[600];
    host_name(host, sizeof host);
    snprintf(node, sizeof node, "node-%s", host);
    snprintf(dir, sizeof dir, "%s/%s", g.local_report, node);
    snprintf(path, sizeof path, "%s/node.json", dir);
    unsigned waited_ms = 0;
    const char *state = wait_for_manager(path, &waited_ms);
    fflush(stderr);
    /* The sending gets its own bound for the pacing; the writes themselves go on after it. */
    uint64_t until = now_ns() + 2000000000ull;
    int files = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strlen(e->d_name) > FRAME_NAME_MAX) continue; /* temporary files, . and .. */
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(name, sizeof name, "%s/%s", node, e->d_name);
        files += frame_file(token, name, path, until);
    }
    char line[512];
    int n = snprintf(line, sizeof line, "%s %s done %s %d %s %u\n", FRAME_MARKER, token, node, files, state, waited_ms);
    if (n > 0 && n < (int)sizeof line) frame_line(line, (size_t)n, until);
    if (strcmp(state, "running") == 0) {
        fprintf(stderr, "huddle-pmpi: rank %d: the node manager of %s was still busy after %u ms: what it writes later stays in %s\n",
                g.rank, host, waited_ms, dir);
    } else if (d) {
        rewinddir(d);
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
        rmdir(dir);
        rmdir(g.local_report); /* the last node of the job on a shared /tmp removes it */
    }
    if (d) closedir(d);
}

/* Starts `huddle node --board BOARD [--job-report DIR] --quiet [HUDDLE_NODE_ARGS...]`,
 * detached from this rank: double fork and setsid, so that it is nobody's child in the job
 * (the launcher neither waits for it nor kills it with the rank's session), standard input
 * from /dev/null, output to DIR/node-HOST/node.log (else /dev/null), no file descriptor of
 * the rank inherited, default signal dispositions, and without LD_PRELOAD (this library
 * would pull libmpi into it) or HUDDLE_NODE*. Everything is prepared before fork: the
 * children only make system calls. */
static void start_node_manager(void)
{
    char bin[4096];
    if (!find_huddle(bin, sizeof bin)) {
        const char *b = getenv("HUDDLE_BIN");
        fprintf(stderr,
                "huddle-pmpi: rank %d: HUDDLE_NODE=1 but %s%s is not an executable huddle: no node manager, this node's ranks run unmanaged\n",
                g.rank, b && *b ? "HUDDLE_BIN=" : "no huddle in PATH", b && *b ? b : "");
        return;
    }
    char host[HOSTNAME_SIZE];
    host_name(host, sizeof host);
    const char *report = g.forward ? g.local_report : g.node_report;
    int logfd = -1;
    if (*report) {
        char dir[4200];
        mkdir_parents(report); /* or there already: huddle node checks it */
        snprintf(dir, sizeof dir, "%s/node-%s/node.json", report, host);
        if (!getenv("HUDDLE_NODE_TOKEN") && access(dir, F_OK) == 0) {
            /* Set by hand, the directory may hold another job's or step's report (the steps
             * of a batch script): kept, and this node is managed without a report. (Given to
             * `huddle run --report`, the directory is this job's: an earlier one's files go.) */
            fprintf(stderr,
                    "huddle-pmpi: rank %d: %s/node-%s holds an earlier job's report, kept: this node's manager writes none (give each step its own directory, e.g. HUDDLE_NODE_REPORT=DIR/step-%%s)\n",
                    g.rank, report, host);
            report = "";
        }
    }
    if (*report) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/node-%s", report, host);
        mkdir(dir, 0700);
        snprintf(dir, sizeof dir, "%s/node-%s/node.log", report, host);
        logfd = open(dir, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    }
    if (logfd < 0) logfd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    int infd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    enum { MAX_ARGS = 72 };
    char *argv[MAX_ARGS + 1];
    int n = 0;
    argv[n++] = bin;
    argv[n++] = "node";
    argv[n++] = "--board";
    argv[n++] = g.board_path;
    if (*report) {
        argv[n++] = "--job-report";
        argv[n++] = (char *)report;
    }
    argv[n++] = "--quiet";
    const char *extra = getenv("HUDDLE_NODE_ARGS");
    char *copy = extra ? strdup(extra) : NULL, *save = NULL;
    for (char *t = copy ? strtok_r(copy, " \t\n", &save) : NULL; t && n < MAX_ARGS; t = strtok_r(NULL, " \t\n", &save))
        argv[n++] = t;
    argv[n] = NULL;
    size_t ne = 0;
    while (environ && environ[ne]) ne++;
    char **envp = calloc(ne + 1, sizeof *envp);
    if (envp) {
        size_t k = 0;
        for (size_t i = 0; i < ne; i++)
            if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0 && strncmp(environ[i], "HUDDLE_NODE", 11) != 0)
                envp[k++] = environ[i];
        envp[k] = NULL;
    }
    pid_t child = envp && infd >= 0 && logfd >= 0 ? fork() : -1;
    if (child == 0) {
        setsid();
        if (fork() != 0) _exit(0);
        dup2(infd, 0);
        dup2(logfd, 1);
        dup2(logfd, 2);
#ifdef SYS_close_range
        if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
#endif
            for (int fd = 3; fd < 65536; fd++) close(fd);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        for (int s = 1; s < NSIG; s++)
            if (s != SIGKILL && s != SIGSTOP) sigaction(s, &dfl, NULL);
        execve(bin, argv, envp);
        _exit(127);
    }
    if (child > 0) {
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR) {
        }
        g.manager_started = 1;
        snprintf(g.manager_report, sizeof g.manager_report, "%s", report);
        if (g.forward) {
            /* Tells the launch node to expect this node's report, so that one that never
             * comes (this rank killed) is named there. */
            char line[256];
            int n = snprintf(line, sizeof line, "%s %s start node-%s\n", FRAME_MARKER, getenv("HUDDLE_NODE_TOKEN"), host);
            if (n > 0 && n < (int)sizeof line) write_all(2, line, (size_t)n);
        }
    } else {
        fprintf(stderr, "huddle-pmpi: rank %d: cannot start the node manager %s: %s\n", g.rank, bin, strerror(errno));
    }
    free(envp);
    free(copy);
    if (infd >= 0) close(infd);
    if (logfd >= 0) close(logfd);
}

static void after_init(int provided)
{
    PMPI_Comm_rank(MPI_COMM_WORLD, &g.rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &g.size);
    const char *clk = getenv("HUDDLE_PMPI_CLOCK");
    if (clk && strcmp(clk, "precise") == 0) time_clock = CLOCK_MONOTONIC;
    g.multiple = provided == MPI_THREAD_MULTIPLE;
    /* Only the simmer policy reads the time split; the rest of huddle reads bytes alone, and
     * the split's clock reads and pending-send bookkeeping were most of the agent's cost per
     * call (docs/pmpi.md). Off, S_TID stays the thread that called MPI_Init. */
    const char *split = getenv("HUDDLE_PMPI_TIMESPLIT");
    g.timesplit = !(split && strcmp(split, "0") == 0);
#ifdef HUDDLE_PMPI_BYTES_ONLY
    g.timesplit = 0; /* its receive, probe and completion wrappers are not built */
#endif
    world_info.me = g.rank;
    world_info.size = g.size;
    /* One stamp per job, chosen by rank 0: names the default board and tells stale boards. */
    uint64_t stamp = 0;
    if (g.rank == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        stamp = ((uint64_t)getpid() << 40) ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)ts.tv_nsec;
    }
    REAL(Bcast)(&stamp, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    board_open(stamp);
    read_node_report();
    choose_report_route();
    if (g.board_created && node_mode()) start_node_manager();
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, cinfo_delete, &g.keyval, NULL);
    cache_open();
    cache_read(now_ns());
    atexit(at_exit);
    g.active = 1;
}

int MPI_Init(int *argc, char ***argv)
{
    int rc = REAL(Init)(argc, argv);
    if (rc == MPI_SUCCESS) after_init(MPI_THREAD_SINGLE);
    return rc;
}
ALSO_PMPI(Init)

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int rc = REAL(Init_thread)(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) after_init(*provided);
    return rc;
}
ALSO_PMPI(Init_thread)

/* Rank 0 gathers every row and writes the CSV atomically (temporary file, then rename). */
static void write_rank_matrix(void)
{
    int n = g.size;
    uint64_t *all = NULL;
    int ready = 1;
    const char *where = getenv("HUDDLE_RANK_MATRIX");
    int skip = where && strcmp(where, "none") == 0; /* rank 0's word counts: the Bcast below */
    if (g.rank == 0 && !skip) {
        all = malloc((size_t)n * (size_t)n * sizeof *all + 1);
        ready = all != NULL;
    } else if (g.rank == 0) {
        ready = 0;
    }
    /* Rank 0 says first whether it can take the rows, so that no rank waits in vain. */
    REAL(Bcast)(&ready, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!ready) {
        if (g.rank == 0 && !skip) fprintf(stderr, "huddle-pmpi: no memory to gather the %dx%d rank matrix\n", n, n);
        return;
    }
    REAL(Gather)(g.bytes_to, n, MPI_UINT64_T, all, n, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (g.rank != 0) return;
    const char *env = getenv("HUDDLE_RANK_MATRIX");
    char path[4200];
    int deflt = !(env && *env);
    /* DIR/rank-matrix.csv where DIR is not seen here: written locally, then handed over. */
    int forward = 0;
    const char *report = g.node_report;
    if (g.forward && !deflt && *report) {
        snprintf(path, sizeof path, "%s/rank-matrix.csv", report);
        if (strcmp(path, env) == 0) {
            forward = 1;
            mkdir(g.local_report, 0700);
            snprintf(path, sizeof path, "%s/rank-matrix.csv", g.local_report);
            env = path;
        }
    }
    size_t bl = strlen(g.board_path), sl = strlen(".board");
    if (!deflt && env != path)
        snprintf(path, sizeof path, "%s", env);
    else if (g.on_board && bl > sl && strcmp(g.board_path + bl - sl, ".board") == 0)
        snprintf(path, sizeof path, "%.*s.csv", (int)(bl - sl), g.board_path);
    else if (g.on_board)
        snprintf(path, sizeof path, "%s.csv", g.board_path);
    else
        snprintf(path, sizeof path, "huddle-rank-matrix-%d.csv", (int)getpid());
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    int ok = f != NULL;
    for (int i = 0; ok && i < n; i++)
        for (int j = 0; j < n; j++)
            if (fprintf(f, "%llu%c", (unsigned long long)all[(size_t)i * n + j], j + 1 < n ? ',' : '\n') < 0) ok = 0;
    if (f && fclose(f) != 0) ok = 0;
    if (ok && rename(tmp, path) != 0) ok = 0;
    if (!ok) {
        fprintf(stderr, "huddle-pmpi: cannot write the rank matrix to %s: %s\n", path, strerror(errno));
        unlink(tmp);
    } else if (deflt) {
        fprintf(stderr, "huddle-pmpi: rank matrix (%d ranks, bytes sent, row = sender) written to %s\n", n, path);
    } else if (forward) {
        fflush(stderr);
        frame_file(getenv("HUDDLE_NODE_TOKEN"), "rank-matrix.csv", path, now_ns() + 2000000000ull);
        unlink(path);
        rmdir(g.local_report); /* unless this node's manager reports there */
    }
    free(all);
}

int MPI_Finalize(void)
{
    if (g.active && depth == 0) {
        uint64_t t = now_ns();
        if (g.timesplit) put(S_COMPUTE, get(S_COMPUTE) + (t - get(S_PHASE_START)));
        put(S_PHASE_START, t);
        cache_read(t);
        put(S_UPDATED, t);
        g.active = 0;
        write_rank_matrix();
        put(S_STATE, STATE_FINALIZED);
        if (g.on_board && (!g.board_named || g.forward)) {
            /* Nobody else reads a default board: the node's first rank removes it once every
             * rank on the node has written its final numbers. Then the node manager ends, and
             * the rank that started it hands its report over where DIR is not seen. */
            MPI_Comm node;
            if (PMPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
                int nr = 0;
                PMPI_Comm_rank(node, &nr);
                REAL(Barrier)(node);
                if (nr == 0 && !g.board_named) unlink(g.board_path);
                PMPI_Comm_free(&node);
            }
            if (g.forward && g.manager_started) hand_over_report();
        }
        if (!g.forward && g.manager_started && g.manager_report[0]) wait_for_report();
        if (g.keyval != MPI_KEYVAL_INVALID) PMPI_Comm_free_keyval(&g.keyval);
        if (g.perf_fd >= 0) close(g.perf_fd);
        g.perf_fd = -1;
    }
    return REAL(Finalize)();
}
ALSO_PMPI(Finalize)

/* ---- point-to-point ---- */
#define BLOCKING_SEND(NAME)                                                                   \
    int MPI_##NAME(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm c) \
    {                                                                                         \
        uint64_t t0 = enter();                                                                \
        int rc = REAL(NAME)(buf, count, t, dest, tag, c);                                     \
        depth--;                                                                              \
        if (rc == MPI_SUCCESS) count_send(dest, count, t, c);                                 \
        depth++;                                                                              \
        leave(t0);                                                                            \
        return rc;                                                                            \
    }                                                                                         \
    ALSO_PMPI(NAME)
BLOCKING_SEND(Send)
BLOCKING_SEND(Ssend)
BLOCKING_SEND(Bsend)
BLOCKING_SEND(Rsend)

#define NONBLOCKING_SEND(NAME)                                                                                \
    int MPI_##NAME(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm c, MPI_Request *r) \
    {                                                                                                         \
        int outer = depth == 0;                                                                               \
        depth++;                                                                                              \
        int rc = REAL(NAME)(buf, count, t, dest, tag, c, r);                                                  \
        depth--;                                                                                              \
        if (rc == MPI_SUCCESS && outer && g.active) {                                                         \
            count_send(dest, count, t, c);                                                                    \
            if (g.timesplit) pending_add(*r);                                                                 \
        }                                                                                                     \
        return rc;                                                                                            \
    }                                                                                                         \
    ALSO_PMPI(NAME)
NONBLOCKING_SEND(Isend)
NONBLOCKING_SEND(Issend)
NONBLOCKING_SEND(Ibsend)
NONBLOCKING_SEND(Irsend)

/* Receives, probes and completions count no bytes; they are wrapped for the time split only.
 * Without it they go straight to the library: HPCC's RandomAccess polls MPI_Test in its
 * update loop, so even depth++ and a request-key copy per call showed (docs/pmpi.md). The
 * bytes-only build (libhuddle_pmpi_bytes.so, -DHUDDLE_PMPI_BYTES_ONLY) does not define them
 * at all: even the forwarding hop was 1.3 % of an HPCC rank's CPU (perf, 2026-11-26). */
#ifndef HUDDLE_PMPI_BYTES_ONLY
int MPI_Recv(void *buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Status *st)
{
    if (!g.timesplit) return REAL(Recv)(buf, count, t, src, tag, c, st);
    uint64_t t0 = enter();
    int rc = REAL(Recv)(buf, count, t, src, tag, c, st);
    leave(t0);
    return rc;
}
ALSO_PMPI(Recv)

int MPI_Probe(int src, int tag, MPI_Comm c, MPI_Status *st)
{
    if (!g.timesplit) return REAL(Probe)(src, tag, c, st);
    uint64_t t0 = enter();
    int rc = REAL(Probe)(src, tag, c, st);
    leave(t0);
    return rc;
}
ALSO_PMPI(Probe)
#endif

int MPI_Sendrecv(const void *sbuf, int scount, MPI_Datatype stype, int dest, int stag, void *rbuf, int rcount,
                 MPI_Datatype rtype, int src, int rtag, MPI_Comm c, MPI_Status *st)
{
    uint64_t t0 = enter();
    int rc = REAL(Sendrecv)(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, src, rtag, c, st);
    depth--;
    if (rc == MPI_SUCCESS) count_send(dest, scount, stype, c);
    depth++;
    leave(t0);
    return rc;
}
ALSO_PMPI(Sendrecv)

int MPI_Sendrecv_replace(void *buf, int count, MPI_Datatype t, int dest, int stag, int src, int rtag, MPI_Comm c,
                         MPI_Status *st)
{
    uint64_t t0 = enter();
    int rc = REAL(Sendrecv_replace)(buf, count, t, dest, stag, src, rtag, c, st);
    depth--;
    if (rc == MPI_SUCCESS) count_send(dest, count, t, c);
    depth++;
    leave(t0);
    return rc;
}
ALSO_PMPI(Sendrecv_replace)

/* ---- completion (time split only; Request_free ends a pending send's bookkeeping) ---- */
#ifndef HUDDLE_PMPI_BYTES_ONLY
int MPI_Wait(MPI_Request *r, MPI_Status *st)
{
    if (!g.timesplit) return REAL(Wait)(r, st);
    uint64_t key = req_key(*r);
    uint64_t t0 = enter();
    int rc = REAL(Wait)(r, st);
    if (pend_count) pending_done(&key, NULL, 1, 1);
    leave(t0);
    return rc;
}
ALSO_PMPI(Wait)

int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status sts[])
{
    if (!g.timesplit) return REAL(Waitall)(n, reqs, sts);
    uint64_t buf[KEYS_ON_STACK];
    uint64_t *keys = snapshot(n, reqs, buf);
    uint64_t t0 = enter();
    int rc = REAL(Waitall)(n, reqs, sts);
    if (keys) pending_done(keys, NULL, n, 1);
    leave(t0);
    snapshot_free(keys, buf);
    return rc;
}
ALSO_PMPI(Waitall)

int MPI_Waitany(int n, MPI_Request reqs[], int *index, MPI_Status *st)
{
    if (!g.timesplit) return REAL(Waitany)(n, reqs, index, st);
    uint64_t buf[KEYS_ON_STACK];
    uint64_t *keys = snapshot(n, reqs, buf);
    uint64_t t0 = enter();
    int rc = REAL(Waitany)(n, reqs, index, st);
    if (keys && *index != MPI_UNDEFINED && *index >= 0 && *index < n) pending_done(keys, index, 1, 1);
    leave(t0);
    snapshot_free(keys, buf);
    return rc;
}
ALSO_PMPI(Waitany)

int MPI_Waitsome(int n, MPI_Request reqs[], int *outcount, int indices[], MPI_Status sts[])
{
    if (!g.timesplit) return REAL(Waitsome)(n, reqs, outcount, indices, sts);
    uint64_t buf[KEYS_ON_STACK];
    uint64_t *keys = snapshot(n, reqs, buf);
    uint64_t t0 = enter();
    int rc = REAL(Waitsome)(n, reqs, outcount, indices, sts);
    if (keys && *outcount != MPI_UNDEFINED && *outcount > 0) pending_done(keys, indices, *outcount, 1);
    leave(t0);
    snapshot_free(keys, buf);
    return rc;
}
ALSO_PMPI(Waitsome)

int MPI_Test(MPI_Request *r, int *flag, MPI_Status *st)
{
    if (!g.timesplit) return REAL(Test)(r, flag, st);
    uint64_t key = req_key(*r);
    depth++;
    int rc = REAL(Test)(r, flag, st);
    depth--;
    if (pend_count && *flag) pending_done(&key, NULL, 1, 0);
    return rc;
}
ALSO_PMPI(Test)

int MPI_Testall(int n, MPI_Request reqs[], int *flag, MPI_Status sts[])
{
    if (!g.timesplit) return REAL(Testall)(n, reqs, flag, sts);
    uint64_t buf[KEYS_ON_STACK];
    uint64_t *keys = snapshot(n, reqs, buf);
    depth++;
    int rc = REAL(Testall)(n, reqs, flag, sts);
    depth--;
    if (keys && *flag) pending_done(keys, NULL, n, 0);
    snapshot_free(keys, buf);
    return rc;
}
ALSO_PMPI(Testall)

int MPI_Testany(int n, MPI_Request reqs[], int *index, int *flag, MPI_Status *st)
{
    if (!g.timesplit) return REAL(Testany)(n, reqs, index, flag, st);
    uint64_t buf[KEYS_ON_STACK];
    uint64_t *keys = snapshot(n, reqs, buf);
    depth++;
    int rc = REAL(Testany)(n, reqs, index, flag, st);
    depth--;
    if (keys && *flag && *index != MPI_UNDEFINED && *index >= 0 && *index < n) pending_done(keys, index, 1, 0);
    snapshot_free(keys, buf);
    return rc;
}
ALSO_PMPI(Testany)

int MPI_Testsome(int n, MPI_Request reqs[], int *outcount, int indices[], MPI_Status sts[])
{
    if (!g.timesplit) return REAL(Testsome)(n, reqs, outcount, indices, sts);
    uint64_t buf[KEYS_ON_STACK];
    uint64_t *keys = snapshot(n, reqs, buf);
    depth++;
    int rc = REAL(Testsome)(n, reqs, outcount, indices, sts);
    depth--;
    if (keys && *outcount != MPI_UNDEFINED && *outcount > 0) pending_done(keys, indices, *outcount, 0);
    snapshot_free(keys, buf);
    return rc;
}
ALSO_PMPI(Testsome)

int MPI_Request_free(MPI_Request *r)
{
    uint64_t key = req_key(*r);
    depth++;
    int rc = REAL(Request_free)(r);
    depth--;
    if (pend_count) pending_done(&key, NULL, 1, 0);
    return rc;
}
ALSO_PMPI(Request_free)
#endif

/* ---- collectives: blocking, traffic by the logical model of docs/pmpi.md ---- */
int MPI_Barrier(MPI_Comm c)
{
    uint64_t t0 = enter();
    int rc = REAL(Barrier)(c);
    leave(t0);
    return rc;
}
ALSO_PMPI(Barrier)

/* Root sends count x type to every other rank. */
int MPI_Bcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm c)
{
    uint64_t t0 = enter();
    int rc = REAL(Bcast)(buf, count, t, root, c);
    const struct cinfo *ci = coll_info(c);
    if (rc == MPI_SUCCESS && ci && ci->me == root) to_all_others(ci, type_bytes(t, count));
    leave(t0);
    return rc;
}
ALSO_PMPI(Bcast)

/* Every non-root rank sends its count x type to the root. */
int MPI_Reduce(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op, int root, MPI_Comm c)
{
    uint64_t t0 = enter();
    int rc = REAL(Reduce)(s, r, count, t, op, root, c);
    const struct cinfo *ci = coll_info(c);
    if (rc == MPI_SUCCESS && ci && ci->me != root) add_to(to_world(ci, root), type_bytes(t, count));
    leave(t0);
    return rc;
}
ALSO_PMPI(Reduce)

/* Every rank sends its contribution (count x type) to every other rank. */
int MPI_Allreduce(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c)
{
    uint64_t t0 = enter();
    int rc = REAL(Allreduce)(s, r, count, t, op, c);
    const struct cinfo *ci = coll_info(c);
    if (rc == MPI_SUCCESS && ci) to_all_others(ci, type_bytes(t, count));
    leave(t0);
    return rc;
}
ALSO_PMPI(Allreduce)

int MPI_Gather(const void *s, int scount, MPI_Datatype stype, void *r, int rcount, MPI_Datatype rtype, int root,
               MPI_Comm c)
{
    uint64_t t0 = enter();
    int rc = REAL(Gather)(s, scount, stype, r, rcount, rtype, root, c);
    const struct cinfo *ci = coll_info(c);
    if (rc == MPI_SUCCESS && ci && ci->me != root) add_to(to_world(ci, root), type_bytes(stype, scount));
    leave(t0);
    return rc;
}
ALSO_PMPI(Gather)

int MPI_Gatherv(const void *s, int scount, MPI_Datatype stype, void *r, const int rcounts[], const int displs[],
                MPI_Datatype rtype, int root, MPI_Comm c)
{
    uint64_t t0 = enter();
    int rc = REAL(Gatherv)(s, scount, stype, r, rcounts, displs, rtype, root, c);
    const struct cinfo *ci = coll_info(c);
    if (rc == MPI_SUCCESS && ci && ci->me != root) add_to(to_world(ci, root), type_bytes(stype, scount));
    leave(t0);
    return rc;
}
ALSO_PMPI(Gatherv)

/* Root sends scount x stype to every other rank. */
int MPI_Scatter(const void *s, int scount, MPI_Datatype stype, void *r, int rcount, MPI_Datatype rtype, int root,
                MPI_Comm c)
{
    uint64_t t0 = enter();
    int rc = REAL(Scatter)(s, scount, stype, r, rcount, rtype, root, c);
    const struct cinfo *ci = coll_info(c);
    if (rc == MPI_SUCCESS && ci && ci->me == root) to_all_others(ci, type_bytes(stype, scount));
    leave(t0);
    return rc;
}
ALSO_PMPI(Scatter)

int MPI_Scatterv(const void *s, const int scounts[], const int displs[], MPI_Datatype stype, void *r, int rcount,
                 MPI_Datatype rtype, int root, MPI_Comm c)
{
    uint64_t t0 = enter();
    int rc = REAL(Scatterv)(s, scounts, displs, stype, r, rcount, rtype, root, c);
    const struct cinfo *ci = coll_info(c);
    if (rc == MPI_SUCCESS && ci && ci->me == root)
        for (int j = 0; j < ci->size; j++)
            if (j != root && scounts[j] > 0) add_to(to_world(ci, j), type_bytes(stype, scounts[j]));
    leave(t0);
    return rc;
}
ALSO_PMPI(Scatterv)

/* Every rank sends its block to every other rank (MPI_IN_PLACE: the block is rcount x rtype). */
int MPI_Allgather(const void *s, int scount, MPI_Datatype stype, void *r, int rcount, MPI_Datatype rtype, MPI_Comm c)
{
    uint64_t t0 = enter();
    int rc = REAL(Allgather)(s, scount, stype, r, rcount, rtype, c);
    const struct cinfo *ci = coll_info(c);
    if (rc == MPI_SUCCESS && ci)
        to_all_others(ci, s == MPI_IN_PLACE ? type_bytes(rtype, rcount) : type_bytes(stype, scount));
    leave(t0);
    return rc;
}
ALSO_PMPI(Allgather)

int MPI_Allgatherv(const void *s, int scount, MPI_Datatype stype, void *r, const int rcounts[], const int displs[],
                   MPI_Datatype rtype, MPI_Comm c)
{
    uint64_t t0 = enter();
    int rc = REAL(Allgatherv)(s, scount, stype, r, rcounts, displs, rtype, c);
    const struct cinfo *ci = coll_info(c);
    if (rc == MPI_SUCCESS && ci)
        to_all_others(ci, s == MPI_IN_PLACE ? type_bytes(rtype, rcounts[ci->me]) : type_bytes(stype, scount));
    leave(t0);
    return rc;
}
ALSO_PMPI(Allgatherv)

/* Every rank sends block j to rank j. */
int MPI_Alltoall(const void *s, int scount, MPI_Datatype stype, void *r, int rcount, MPI_Datatype rtype, MPI_Comm c)
{
    uint64_t t0 = enter();
    int rc = REAL(Alltoall)(s, scount, stype, r, rcount, rtype, c);
    const struct cinfo *ci = coll_info(c);
    if (rc == MPI_SUCCESS && ci)
        to_all_others(ci, s == MPI_IN_PLACE ? type_bytes(rtype, rcount) : type_bytes(stype, scount));
    leave(t0);
    return rc;
}
ALSO_PMPI(Alltoall)

int MPI_Alltoallv(const void *s, const int scounts[], const int sdispls[], MPI_Datatype stype, void *r,
                  const int rcounts[], const int rdispls[], MPI_Datatype rtype, MPI_Comm c)
{
    uint64_t t0 = enter();
    int rc = REAL(Alltoallv)(s, scounts, sdispls, stype, r, rcounts, rdispls, rtype, c);
    const struct cinfo *ci = coll_info(c);
    if (rc == MPI_SUCCESS && ci) {
        const int *counts = s == MPI_IN_PLACE ? rcounts : scounts;
        MPI_Datatype t = s == MPI_IN_PLACE ? rtype : stype;
        for (int j = 0; j < ci->size; j++)
            if (j != ci->me && counts[j] > 0) add_to(to_world(ci, j), type_bytes(t, counts[j]));
    }
    leave(t0);
    return rc;
}
ALSO_PMPI(Alltoallv)

/* Rank i sends rank j the part of its vector that j keeps: rcounts[j] x type. */
int MPI_Reduce_scatter(const void *s, void *r, const int rcounts[], MPI_Datatype t, MPI_Op op, MPI_Comm c)
{
    uint64_t t0 = enter();
    int rc = REAL(Reduce_scatter)(s, r, rcounts, t, op, c);
    const struct cinfo *ci = coll_info(c);
    if (rc == MPI_SUCCESS && ci)
        for (int j = 0; j < ci->size; j++)
            if (j != ci->me && rcounts[j] > 0) add_to(to_world(ci, j), type_bytes(t, rcounts[j]));
    leave(t0);
    return rc;
}
ALSO_PMPI(Reduce_scatter)

int MPI_Reduce_scatter_block(const void *s, void *r, int rcount, MPI_Datatype t, MPI_Op op, MPI_Comm c)
{
    uint64_t t0 = enter();
    int rc = REAL(Reduce_scatter_block)(s, r, rcount, t, op, c);
    const struct cinfo *ci = coll_info(c);
    if (rc == MPI_SUCCESS && ci) to_all_others(ci, type_bytes(t, rcount));
    leave(t0);
    return rc;
}
ALSO_PMPI(Reduce_scatter_block)

/* Prefix reductions: rank i's contribution goes to every higher rank. */
static void to_higher(const struct cinfo *ci, uint64_t bytes)
{
    for (int j = ci->me + 1; j < ci->size; j++) add_to(to_world(ci, j), bytes);
}

int MPI_Scan(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c)
{
    uint64_t t0 = enter();
    int rc = REAL(Scan)(s, r, count, t, op, c);
    const struct cinfo *ci = coll_info(c);
    if (rc == MPI_SUCCESS && ci) to_higher(ci, type_bytes(t, count));
    leave(t0);
    return rc;
}
ALSO_PMPI(Scan)

int MPI_Exscan(const void *s, void *r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c)
{
    uint64_t t0 = enter();
    int rc = REAL(Exscan)(s, r, count, t, op, c);
    const struct cinfo *ci = coll_info(c);
    if (rc == MPI_SUCCESS && ci) to_higher(ci, type_bytes(t, count));
    leave(t0);
    return rc;
}
ALSO_PMPI(Exscan)
