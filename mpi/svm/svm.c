/* huddle svm: home-based lazy release consistency (HLRC) over MPI, with the hybrid model for
 * processes that share a node.  Written in C rather than Rust + shim because nearly every
 * protocol step is an MPI call or runs inside the SIGSEGV handler; see docs/svm.md.
 *
 * Memory: each node has one shared-memory copy of the pool ("data", mapped twice per process:
 * the application view with per-process protections and a read-write alias the protocol and
 * MPI use), a twin area and a metadata area (versions, page locks, lock records, write-notice
 * logs, barrier slots).  Both areas are exposed through MPI windows.
 *
 * Protocols (SVM_PROTOCOL): ni   = one-sided MPI (fetch = Get + version check, direct diffs =
 * Put of runs, locks = Compare_and_swap, notices read from the writer's log with Get);
 * base = request/reply served by a protocol thread at the home. */
#define _GNU_SOURCE
#include "svm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define MAXP 64
#define IVCAP 65536
#define TAG_REQ 7101
#define TAG_REPLY 7102
#define TAG_GRANT 7103
#define TAG_BAR 7104

enum { REQ_FETCH = 1, REQ_DIFF, REQ_NOTICES, REQ_HOME, REQ_LOCK, REQ_FWD, REQ_STOP };
enum { PROT_NO = 0, PROT_RD = 1, PROT_WR = 2 };
enum { HOME_BLOCK, HOME_CYCLIC, HOME_FIRST };

struct notice { uint64_t page, ver; };
struct req { int32_t type, from; uint64_t a, b, c; };
struct slot_hdr { uint64_t w, nint; }; /* notices written, intervals closed */

/* ---- configuration and identity ---- */
static int P, me, mynode, nnodes, lrank, lsize, slots, ni_mode = 1, home_policy = HOME_BLOCK;
static int node_of[MAXP], lrank_of[MAXP], leader_of_node[MAXP];
static pid_t pid_of[MAXP];
static MPI_Comm comm, nodecomm;
static int we_init_mpi;
#define MAXALLOC 4096
static size_t alloc_first[MAXALLOC], alloc_n[MAXALLOC], nalloc;
static size_t PG, npages, pool_bytes, log_entries, next_page;
static double timeout_s = 60, t_init;
static int poll_us = 20;
/* More processes on this machine than CPUs: lock waiters in ni mode sleep between tries. */
static int oversubscribed;

/* ---- memory ---- */
static char *view, *data, *twin, *meta;
static size_t meta_bytes, off_ver, off_nodever, off_dir, off_plock, off_twinok, off_locks, off_bar,
    off_logs, slot_bytes, lockrec_bytes;
static MPI_Win win_data, win_meta;

/* ---- per-process protocol state ---- */
static uint8_t *prot, *dirty;
static int32_t *home;     /* -2 unallocated, -1 first touch unresolved */
static uint64_t *need;    /* version of the home copy this process must see */
static uint32_t *dlist;   /* dirty pages of the open interval */
static size_t ndirty;
static uint32_t vt[MAXP]; /* intervals of each process seen */
static uint64_t pos_seen[MAXP];
static char *scratch, *fetchbuf, *msgbuf;
static size_t msgcap;

/* base-mode lock ownership (shared between main and protocol thread) */
static pthread_mutex_t lk_mu = PTHREAD_MUTEX_INITIALIZER;
static uint8_t lk_held[SVM_LOCKS];
static int32_t lk_next[SVM_LOCKS], lk_last[SVM_LOCKS];
static uint64_t lk_seq[SVM_LOCKS], lk_last_seq[SVM_LOCKS]; /* my requests; at the home: the last one */
static uint32_t lk_vt[SVM_LOCKS][MAXP];

/* ---- threads, watchdog, stats ---- */
static pthread_t thr;
static volatile int thr_stop;
static int64_t wait_since_us; /* 0 = not waiting */
static volatile int wait_rank = -1;
static const char *volatile wait_what;
static struct svm_stats st;
static struct svm_fault_profile prof; /* where page-fault time goes (svmbench) */
static uint64_t bar_epoch;
static struct sigaction old_segv;
static int initialized, debug;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fatal(const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "svm: rank %d: %s\n", me, buf);
    fflush(stderr);
    /* MPICH's hydra proxy reads the ranks' output from pipes; an abort right away can tear the job
     * down before it forwarded this line (seen once in CI: the job stopped, the reason was lost) */
    struct timespec forward = {0, 200 * 1000000L};
    nanosleep(&forward, NULL);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

static void wait_begin(const char *what, int rank) {
    wait_what = what;
    wait_rank = rank;
    __atomic_store_n(&wait_since_us, (int64_t)(now() * 1e6), __ATOMIC_RELEASE);
}
static void wait_end(void) { __atomic_store_n(&wait_since_us, 0, __ATOMIC_RELEASE); }

static void backoff(unsigned *n) {
    if (*n < 64) {
        sched_yield();
    } else {
        struct timespec ts = {0, (*n < 1024 ? *n : 1024) * 1000L};
        nanosleep(&ts, NULL);
    }
    (*n)++;
}

/* ---- who may call MPI (ni) ----
 * With MPI_THREAD_MULTIPLE, Open MPI's osc ucx has one UCX worker for both threads, guarded by a
 * UCX spinlock.  When the protocol thread polls while the main thread is inside MPI on the same
 * core (Open MPI binds each rank to one core), the poller spins on a lock whose holder cannot run
 * until the scheduler takes the poller off the core: a page fetch then cost 25-100 us instead of
 * one round trip (perf: 30-40 % of the protocol thread in pthread_spin_lock under
 * ucp_worker_progress).  So in ni mode both threads take mpi_mu, a sleeping mutex, around their
 * MPI calls: a thread that finds the other inside MPI sleeps in the kernel until it is out.
 * The main thread never holds it across a wait for another process (its wait loops lock once per
 * MPI call), so the poller still gets in between and keeps the process's whole MPI progressing
 * (a peer may wait for a message that only a full progress call sends, e.g. a barrier message
 * over TCP: a poller that skipped rounds while the main thread was busy stalled namespace-host
 * runs for 20-40 s).  base mode does not use it: there the protocol thread also receives
 * requests, which must not wait for the main thread. */
static pthread_mutex_t mpi_mu = PTHREAD_MUTEX_INITIALIZER;
static inline void mpi_enter(void) {
    if (ni_mode) pthread_mutex_lock(&mpi_mu);
}
static inline void mpi_leave(void) {
    if (ni_mode) pthread_mutex_unlock(&mpi_mu);
}

/* ---- metadata accessors ---- */
#define VER(x) ((uint64_t *)(meta + off_ver))[x]
#define NODEVER(x) ((uint64_t *)(meta + off_nodever))[x]
#define DIR(x) ((uint64_t *)(meta + off_dir))[x]
#define PLOCK(x) ((uint32_t *)(meta + off_plock))[x]
#define TWINOK(x) ((uint8_t *)(meta + off_twinok))[x]
#define LOCKREC(l) (meta + off_locks + (size_t)(l) * lockrec_bytes)
#define BAR_ARRIVE(s) ((uint64_t *)(meta + off_bar))[s]
#define BAR_RELEASE ((uint64_t *)(meta + off_bar))[MAXP]
#define BAR_GVT ((uint32_t *)(meta + off_bar + (MAXP + 1) * 8))
#define SLOT(s) (meta + off_logs + (size_t)(s) * slot_bytes)
#define SLOT_HDR(s) ((struct slot_hdr *)SLOT(s))
#define SLOT_IV(s) ((uint64_t *)(SLOT(s) + sizeof(struct slot_hdr)))
#define SLOT_LOG(s) ((struct notice *)(SLOT(s) + sizeof(struct slot_hdr) + IVCAP * 8))
#define D_SLOT(s) (off_logs + (size_t)(s) * slot_bytes)
#define D_IV(s) (D_SLOT(s) + sizeof(struct slot_hdr))
#define D_LOG(s) (D_IV(s) + IVCAP * 8)

static int is_local(int rank) { return node_of[rank] == mynode; }

static void plock(size_t x) {
    unsigned n = 0;
    while (__atomic_exchange_n(&PLOCK(x), 1, __ATOMIC_ACQUIRE)) backoff(&n);
}
static void punlock(size_t x) { __atomic_store_n(&PLOCK(x), 0, __ATOMIC_RELEASE); }

static void set_prot(size_t x, int p) {
    if (prot[x] == p) return;
    int mp = p == PROT_NO ? PROT_NONE : p == PROT_RD ? PROT_READ : PROT_READ | PROT_WRITE;
    if (mprotect(view + x * PG, PG, mp)) fatal("mprotect page %zu: %s", x, strerror(errno));
    prot[x] = p;
}

/* ---- diffs (word = 4 bytes) ---- */
size_t svm__diff_create(uint32_t *cur, uint32_t *tw, uint32_t *out, size_t nwords, uint32_t *runs) {
    size_t nr = 0, i = 0;
    while (i < nwords) {
        /* skip equal 64-byte blocks fast; only a hint: a word a peer changes after this check
         * still differs from the twin and goes out with that peer's own release */
        if (i % 16 == 0 && i + 16 <= nwords && !memcmp(cur + i, tw + i, 64)) {
            i += 16;
            continue;
        }
        uint32_t v = __atomic_load_n(&cur[i], __ATOMIC_RELAXED);
        if (v == tw[i]) {
            i++;
            continue;
        }
        size_t s = i;
        while (i < nwords) {
            v = __atomic_load_n(&cur[i], __ATOMIC_RELAXED);
            if (v == tw[i]) break;
            tw[i] = v;
            out[i] = v;
            i++;
        }
        runs[2 * nr] = (uint32_t)s;
        runs[2 * nr + 1] = (uint32_t)(i - s);
        nr++;
    }
    return nr;
}

void svm__diff_apply(uint32_t *page, const uint32_t *runs, size_t nr, const uint32_t *vals) {
    for (size_t r = 0; r < nr; r++) {
        memcpy(page + runs[2 * r], vals, runs[2 * r + 1] * 4);
        vals += runs[2 * r + 1];
    }
}

/* Merge a fresh home copy into the node copy, keeping words this node changed since the twin. */
static void merge_page(size_t x, const uint32_t *fresh) {
    uint32_t *c = (uint32_t *)(data + x * PG), *t = (uint32_t *)(twin + x * PG);
    size_t nw = PG / 4;
    if (!__atomic_load_n(&TWINOK(x), __ATOMIC_ACQUIRE)) {
        memcpy(c, fresh, PG);
        return;
    }
    for (size_t i = 0; i < nw; i++) {
        uint32_t cur = __atomic_load_n(&c[i], __ATOMIC_RELAXED);
        if (cur == t[i] && cur != fresh[i])
            __atomic_compare_exchange_n(&c[i], &cur, fresh[i], 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
        t[i] = fresh[i];
    }
}

/* ---- base-mode request/reply ---- */
static void send_req3(int to, int type, uint64_t a, uint64_t b, uint64_t c, const void *payload, size_t plen) {
    size_t len = sizeof(struct req) + plen;
    char *buf = plen ? msgbuf : NULL, small[sizeof(struct req)];
    if (!buf) buf = small;
    struct req r = {type, me, a, b, c};
    memcpy(buf, &r, sizeof r);
    if (plen && payload != buf + sizeof r) memcpy(buf + sizeof r, payload, plen);
    if (MPI_Send(buf, (int)len, MPI_BYTE, to, TAG_REQ, comm) != MPI_SUCCESS) fatal("send to rank %d failed", to);
}

static void send_req(int to, int type, uint64_t a, uint64_t b, const void *payload, size_t plen) {
    send_req3(to, type, a, b, 0, payload, plen);
}

/* Waits for a request.  In base mode it yields the core between tests: the protocol thread
 * shares this rank's core (mpirun binds a rank to one) and may have to serve a request before
 * the reply we wait for can come; a main thread spinning in MPI_Test kept it off the core (and,
 * under Open MPI, spinning on the progress lock the main thread holds) until the time slice
 * ended: milliseconds per request.  In ni mode nothing here waits for our protocol thread, but
 * peers' one-sided reads wait for this process's MPI progress (UCX emulates them with active
 * messages), so it keeps testing: yielding there tripled the fault latency of a peer. */
static void wait_request(MPI_Request *rq, MPI_Status *st) {
    int done = 0;
    for (;;) {
        mpi_enter();
        MPI_Test(rq, &done, st);
        mpi_leave();
        if (done) return;
        if (!ni_mode) sched_yield();
    }
}

static void recv_reply(int from, void *buf, size_t len, const char *what) {
    wait_begin(what, from);
    MPI_Request rq;
    MPI_Irecv(buf, (int)len, MPI_BYTE, from, TAG_REPLY, comm, &rq);
    wait_request(&rq, MPI_STATUS_IGNORE);
    wait_end();
}

/* ---- page versions, homes, fetches ---- */
static uint64_t ver_inc(int h, size_t x) {
    uint64_t one = 1, old = 0;
    if (!ni_mode) return __atomic_add_fetch(&VER(x), 1, __ATOMIC_ACQ_REL); /* h is on this node */
    mpi_enter();
    MPI_Fetch_and_op(&one, &old, MPI_UINT64_T, h, off_ver + x * 8, MPI_SUM, win_meta);
    MPI_Win_flush(h, win_meta);
    mpi_leave();
    return old + 1;
}

static int resolve_home(size_t x) {
    int m = (int)(x % (size_t)P);
    uint64_t mine = (uint64_t)me + 1, zero = 0, res = 0;
    wait_begin("first-touch directory", m);
    if (ni_mode) {
        mpi_enter();
        MPI_Compare_and_swap(&mine, &zero, &res, MPI_UINT64_T, m, off_dir + x * 8, win_meta);
        MPI_Win_flush(m, win_meta);
        mpi_leave();
    } else {
        send_req(m, REQ_HOME, x, mine, NULL, 0);
        recv_reply(m, &res, 8, "first-touch directory");
    }
    wait_end();
    home[x] = res == 0 ? me : (int)res - 1;
    return home[x];
}

/* Remote fetch (ni), one round trip: the home's version and the page are read together.  A diff
 * is remotely complete (flushed) before the home's version is incremented, and the write notice
 * carrying that version is published only after the increment, so once this process knows
 * need[x] the home's version is already >= need[x] and a page read issued now contains that diff.
 * The version read is then only a check, so a plain MPI_Get does (MPI_Fetch_and_op on window
 * memory goes through the target's progress engine with both MPIs here, tens of us).  The two
 * reads are not ordered, so the copy is known to hold need[x], not the version read: *have is
 * need[x].  Should the check ever fail (a home that has not seen the diff yet), the version is
 * polled atomically first and the page read after it, as the thesis's fetch with retry does. */
#ifndef SVM_ORDERED_FETCH /* 1: always poll the version first (two round trips), for svmbench */
#define SVM_ORDERED_FETCH 0
#endif
static int ni_fetch(int h, size_t x, char *dst, uint64_t *have, int ordered) {
    uint64_t v = 0;
    double t0 = now();
    if (!ordered) {
        mpi_enter();
        MPI_Get(&v, 8, MPI_BYTE, h, off_ver + x * 8, 8, MPI_BYTE, win_meta);
        MPI_Get(dst, (int)PG, MPI_BYTE, h, x * PG, (int)PG, MPI_BYTE, win_data);
        MPI_Win_flush(h, win_data);
        MPI_Win_flush(h, win_meta);
        mpi_leave();
        prof.get += now() - t0;
        *have = need[x];
        return v >= need[x];
    }
    mpi_enter();
    MPI_Fetch_and_op(NULL, &v, MPI_UINT64_T, h, off_ver + x * 8, MPI_NO_OP, win_meta);
    MPI_Win_flush(h, win_meta);
    mpi_leave();
    prof.version += now() - t0;
    if (v < need[x]) return 0;
    t0 = now();
    mpi_enter();
    MPI_Get(dst, (int)PG, MPI_BYTE, h, x * PG, (int)PG, MPI_BYTE, win_data);
    MPI_Win_flush(h, win_data);
    mpi_leave();
    prof.get += now() - t0;
    *have = v; /* read after the version: holds at least v */
    return 1;
}

static void fetch_page(size_t x) {
    int h = home[x];
    plock(x);
    if (__atomic_load_n(&NODEVER(x), __ATOMIC_ACQUIRE) >= need[x]) {
        punlock(x);
        return;
    }
    uint64_t v = 0;
    unsigned n = 0;
    /* No twin (no process of this node wrote the page since its last fetch or diff; none can
     * start to while this process holds the page lock): the home copy is read straight into the
     * node copy, no merge.  The home's content is never older than the node copy's, so this is
     * safe even if the version check then fails and the read is retried. */
    const char *fresh = __atomic_load_n(&TWINOK(x), __ATOMIC_ACQUIRE) ? fetchbuf : NULL;
    wait_begin("page fetch", h);
    for (int ordered = SVM_ORDERED_FETCH;; ordered = 1) {
        if (ni_mode) {
            if (ni_fetch(h, x, fresh ? fetchbuf : data + x * PG, &v, ordered)) break;
            prof.retries++;
        } else {
            double t0 = now();
            send_req(h, REQ_FETCH, x, need[x], NULL, 0);
            recv_reply(h, msgbuf, 8 + PG, "page fetch");
            prof.get += now() - t0;
            memcpy(&v, msgbuf, 8);
            if (v >= need[x]) {
                fresh = msgbuf + 8;
                break;
            }
            wait_begin("page fetch", h);
        }
        backoff(&n); /* the home has not seen the diff yet: retry (version check) */
    }
    wait_end();
    double t0 = now();
    if (fresh) merge_page(x, (const uint32_t *)fresh);
    if (v > __atomic_load_n(&NODEVER(x), __ATOMIC_ACQUIRE)) __atomic_store_n(&NODEVER(x), v, __ATOMIC_RELEASE);
    punlock(x);
    prof.merge += now() - t0;
    st.fetches++;
}

static void handle_fault(size_t x, int write) {
    double t0 = now();
    st.faults++;
    if (home[x] == -1) resolve_home(x);
    int h = home[x];
    if (!is_local(h) && __atomic_load_n(&NODEVER(x), __ATOMIC_ACQUIRE) < need[x]) fetch_page(x);
    if (write) {
        if (!is_local(h) && !__atomic_load_n(&TWINOK(x), __ATOMIC_ACQUIRE)) {
            plock(x);
            if (!TWINOK(x)) {
                memcpy(twin + x * PG, data + x * PG, PG);
                __atomic_store_n(&TWINOK(x), 1, __ATOMIC_RELEASE);
            }
            punlock(x);
        }
        if (!dirty[x]) {
            dirty[x] = 1;
            dlist[ndirty++] = (uint32_t)x;
        }
        double t1 = now();
        set_prot(x, PROT_WR);
        prof.mprotect += now() - t1;
    } else {
        double t1 = now();
        set_prot(x, PROT_RD);
        prof.mprotect += now() - t1;
    }
    prof.faults++;
    st.data_wait += now() - t0;
    prof.handler += now() - t0;
}

static void chain_segv(int sig, siginfo_t *si, void *uc) {
    if (old_segv.sa_flags & SA_SIGINFO) {
        if (old_segv.sa_sigaction) old_segv.sa_sigaction(sig, si, uc);
        return;
    }
    if (old_segv.sa_handler == SIG_IGN) return;
    if (old_segv.sa_handler == SIG_DFL) {
        signal(sig, SIG_DFL); /* returning re-executes the access and dies with the default action */
        return;
    }
    old_segv.sa_handler(sig);
}

static void on_segv(int sig, siginfo_t *si, void *ucv) {
    char *a = si->si_addr;
    if (initialized && a >= view && a < view + pool_bytes) {
        size_t x = (size_t)(a - view) / PG;
        ucontext_t *uc = ucv;
        int write = (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;
        if (home[x] != -2 && !(write ? prot[x] == PROT_WR : prot[x] != PROT_NO)) {
            int e = errno;
            handle_fault(x, write);
            errno = e;
            return;
        }
        if (getenv("SVM_DEBUG"))
            fprintf(stderr, "svm: rank %d: fault at %p page %zu write=%d prot=%d home=%d not handled\n", me, (void *)a, x,
                    write, prot[x], home[x]);
    }
    chain_segv(sig, si, ucv);
}

/* System calls on shared pages: make the range accessible before the kernel touches it. */
static void prepare_range(const void *buf, size_t len, int write) {
    if (!initialized || !len) return;
    const char *b = buf, *e = b + len;
    if (e <= view || b >= view + pool_bytes) return;
    if (b < view) b = view;
    if (e > view + pool_bytes) e = view + pool_bytes;
    for (size_t x = (size_t)(b - view) / PG; x <= (size_t)(e - 1 - view) / PG; x++) {
        if (home[x] == -2) continue;
        if (write ? prot[x] != PROT_WR : prot[x] == PROT_NO) handle_fault(x, write);
    }
}
ssize_t read(int fd, void *buf, size_t n) {
    prepare_range(buf, n, 1);
    return syscall(SYS_read, fd, buf, n);
}
ssize_t pread(int fd, void *buf, size_t n, off_t off) {
    prepare_range(buf, n, 1);
    return syscall(SYS_pread64, fd, buf, n, off);
}
ssize_t write(int fd, const void *buf, size_t n) {
    prepare_range(buf, n, 0);
    return syscall(SYS_write, fd, buf, n);
}
ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    prepare_range(buf, n, 0);
    return syscall(SYS_pwrite64, fd, buf, n, off);
}

/* ---- release: diffs to homes, versions, write notices ---- */
static uint64_t send_diff(size_t x) {
    int h = home[x];
    uint32_t *runs = (uint32_t *)(msgbuf + sizeof(struct req));
    plock(x);
    size_t nr = svm__diff_create((uint32_t *)(data + x * PG), (uint32_t *)(twin + x * PG), (uint32_t *)scratch,
                                 PG / 4, runs);
    size_t words = 0;
    wait_begin("diff to home", h);
    if (ni_mode) {
        mpi_enter();
        for (size_t r = 0; r < nr; r++) { /* direct diffs: each run straight into the home page */
            size_t o = runs[2 * r] * 4, l = runs[2 * r + 1] * 4;
            MPI_Put(scratch + o, (int)l, MPI_BYTE, h, x * PG + o, (int)l, MPI_BYTE, win_data);
            words += runs[2 * r + 1];
        }
        if (nr) MPI_Win_flush(h, win_data);
        mpi_leave();
        punlock(x);
        wait_end();
        st.diffs++;
        st.diff_bytes += words * 4;
        return ver_inc(h, x);
    }
    uint32_t *vals = runs + 2 * nr;
    for (size_t r = 0; r < nr; r++) {
        memcpy(vals, scratch + runs[2 * r] * 4, runs[2 * r + 1] * 4);
        vals += runs[2 * r + 1];
        words += runs[2 * r + 1];
    }
    send_req(h, REQ_DIFF, x, nr, msgbuf + sizeof(struct req), (2 * nr + words) * 4);
    uint64_t v;
    recv_reply(h, &v, 8, "diff to home");
    punlock(x);
    st.diffs++;
    st.diff_bytes += words * 4;
    return v;
}

static void release(void) {
    double t0 = now();
    if (!ndirty) return;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    int s = lrank;
    struct slot_hdr *hd = SLOT_HDR(s);
    struct notice *log = SLOT_LOG(s);
    for (size_t i = 0; i < ndirty; i++) {
        size_t x = dlist[i];
        int h = home[x];
        uint64_t v = is_local(h) ? ver_inc(h, x) : send_diff(x);
        log[hd->w % log_entries] = (struct notice){x, v};
        hd->w++;
        dirty[x] = 0;
        if (prot[x] == PROT_WR) set_prot(x, PROT_RD);
        st.notices++;
    }
    ndirty = 0;
    vt[me]++;
    SLOT_IV(s)[vt[me] % IVCAP] = hd->w;
    __atomic_store_n(&hd->nint, vt[me], __ATOMIC_RELEASE);
    if (ni_mode) {
        mpi_enter();
        MPI_Win_sync(win_meta);
        mpi_leave();
    }
    st.protocol += now() - t0;
}

/* ---- acquire: read the write notices the synchronisation brings, invalidate ---- */
static void apply_notice(const struct notice *n) {
    size_t x = n->page;
    if (x >= npages) fatal("corrupt write notice (page %zu)", x);
    if (home[x] >= 0 && is_local(home[x])) return; /* the home copy is this node's copy */
    if (n->ver > need[x]) need[x] = n->ver;
    if (__atomic_load_n(&NODEVER(x), __ATOMIC_ACQUIRE) < need[x]) set_prot(x, PROT_NO);
}

static void fetch_notices(int q, uint32_t upto) {
    int s = lrank_of[q];
    uint64_t start = pos_seen[q], end = 0;
    struct slot_hdr hd;
    wait_begin("write notices", q);
    if (ni_mode) {
        mpi_enter();
        MPI_Get(&end, 8, MPI_BYTE, q, D_IV(s) + (upto % IVCAP) * 8, 8, MPI_BYTE, win_meta);
        MPI_Win_flush(q, win_meta);
        size_t cnt = end - start;
        if (cnt > log_entries) mpi_leave(), fatal("write-notice log of rank %d overflowed; raise SVM_LOG_ENTRIES", q);
        struct notice *buf = (struct notice *)msgbuf;
        size_t first = start % log_entries, n1 = cnt < log_entries - first ? cnt : log_entries - first;
        if (n1) MPI_Get(buf, (int)(n1 * 16), MPI_BYTE, q, D_LOG(s) + first * 16, (int)(n1 * 16), MPI_BYTE, win_meta);
        if (cnt > n1) MPI_Get(buf + n1, (int)((cnt - n1) * 16), MPI_BYTE, q, D_LOG(s), (int)((cnt - n1) * 16), MPI_BYTE, win_meta);
        MPI_Win_flush(q, win_meta);
        MPI_Get(&hd, sizeof hd, MPI_BYTE, q, D_SLOT(s), sizeof hd, MPI_BYTE, win_meta);
        MPI_Win_flush(q, win_meta);
        mpi_leave();
        if (hd.w > start + log_entries || hd.nint >= (uint64_t)upto + IVCAP)
            fatal("write-notice log of rank %d overflowed while reading; raise SVM_LOG_ENTRIES", q);
        wait_end();
        for (size_t i = 0; i < cnt; i++) apply_notice(&buf[i]);
        st.notices += cnt;
    } else {
        send_req(q, REQ_NOTICES, start, upto, NULL, 0);
        recv_reply(q, msgbuf, msgcap, "write notices");
        uint64_t cnt;
        memcpy(&cnt, msgbuf, 8);
        if (cnt == UINT64_MAX) fatal("write-notice log of rank %d overflowed; raise SVM_LOG_ENTRIES", q);
        end = start + cnt;
        for (size_t i = 0; i < cnt; i++) apply_notice((struct notice *)(msgbuf + 8) + i);
        st.notices += cnt;
    }
    pos_seen[q] = end;
}

static void acquire_from(const uint32_t *lv) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    for (int q = 0; q < P; q++) {
        if (lv[q] <= vt[q]) continue;
        if (!is_local(q)) fetch_notices(q, lv[q]); /* node peers' writes are already in our copy */
        vt[q] = lv[q];
    }
}

/* ---- locks ---- */
void svm_lock(int l) {
    if (l < 0 || l >= SVM_LOCKS) fatal("svm_lock(%d): lock out of range 0..%d", l, SVM_LOCKS - 1);
    double t0 = now();
    int h = l % P;
    uint32_t lv[MAXP];
    if (ni_mode) {
        uint64_t mine = (uint64_t)me + 1, zero = 0, res;
        unsigned n = 0;
        wait_begin("lock", h);
        for (;;) {
            mpi_enter();
            MPI_Compare_and_swap(&mine, &zero, &res, MPI_UINT64_T, h, off_locks + (size_t)l * lockrec_bytes, win_meta);
            MPI_Win_flush(h, win_meta);
            mpi_leave();
            if (res == 0) break;
            wait_rank = (int)res - 1; /* the holder is who we wait for */
            if (oversubscribed) {
                /* The holder needs a CPU to finish and release, and each try needs the home's
                 * MPI progress (RMA is emulated): waiters that only yield hand the CPU to other
                 * waiters.  taskq np=8 on 2 CPUs: lock time 2.8-4.1 s yielding, 0.6-0.8 s
                 * sleeping 16 us doubling to 4 ms; with a CPU each, yielding stays faster. */
                struct timespec ts = {0, (16L << (n < 8 ? n : 8)) * 1000L};
                nanosleep(&ts, NULL);
                n++;
            } else {
                backoff(&n);
            }
        }
        mpi_enter();
        MPI_Get(lv, P * 4, MPI_BYTE, h, off_locks + (size_t)l * lockrec_bytes + 8, P * 4, MPI_BYTE, win_meta);
        MPI_Win_flush(h, win_meta);
        mpi_leave();
        wait_end();
    } else {
        pthread_mutex_lock(&lk_mu);
        lk_held[l] = 1;
        uint64_t seq = ++lk_seq[l];
        pthread_mutex_unlock(&lk_mu);
        send_req3(h, REQ_LOCK, (uint64_t)l, (uint64_t)me, seq, NULL, 0);
        wait_begin("lock", h);
        MPI_Request rq;
        MPI_Status stt;
        char buf[8 + MAXP * 4];
        MPI_Irecv(buf, sizeof buf, MPI_BYTE, MPI_ANY_SOURCE, TAG_GRANT, comm, &rq);
        wait_request(&rq, &stt);
        wait_end();
        memcpy(lv, buf + 8, P * 4);
    }
    acquire_from(lv);
    st.acquires++;
    st.lock += now() - t0;
}

void svm_unlock(int l) {
    if (l < 0 || l >= SVM_LOCKS) fatal("svm_unlock(%d): lock out of range 0..%d", l, SVM_LOCKS - 1);
    release();
    double t0 = now();
    int h = l % P;
    if (ni_mode) {
        uint64_t zero = 0, old;
        mpi_enter();
        MPI_Put(vt, P * 4, MPI_BYTE, h, off_locks + (size_t)l * lockrec_bytes + 8, P * 4, MPI_BYTE, win_meta);
        MPI_Win_flush(h, win_meta);
        MPI_Fetch_and_op(&zero, &old, MPI_UINT64_T, h, off_locks + (size_t)l * lockrec_bytes, MPI_REPLACE, win_meta);
        MPI_Win_flush(h, win_meta);
        mpi_leave();
        if (old != (uint64_t)me + 1) fatal("svm_unlock(%d): lock not held by this process", l);
    } else {
        pthread_mutex_lock(&lk_mu);
        if (!lk_held[l]) {
            pthread_mutex_unlock(&lk_mu);
            fatal("svm_unlock(%d): lock not held by this process", l);
        }
        lk_held[l] = 0;
        memcpy(lk_vt[l], vt, sizeof vt);
        int nx = lk_next[l];
        lk_next[l] = -1;
        char buf[8 + MAXP * 4];
        if (nx >= 0) {
            memcpy(buf, &l, 4);
            memcpy(buf + 8, vt, P * 4);
            MPI_Send(buf, 8 + P * 4, MPI_BYTE, nx, TAG_GRANT, comm);
        }
        pthread_mutex_unlock(&lk_mu);
    }
    st.protocol += now() - t0;
}

/* ---- hierarchical barrier: node (shared memory) -> node leaders (MPI) -> node ---- */
void svm_barrier(void) {
    release();
    double t0 = now();
    uint64_t e = ++bar_epoch;
    uint32_t gvt[MAXP];
    unsigned n = 0;
    __atomic_store_n(&BAR_GVT[me], vt[me], __ATOMIC_RELAXED);
    __atomic_store_n(&BAR_ARRIVE(lrank), e, __ATOMIC_RELEASE);
    if (lrank == 0) {
        for (int s = 1; s < lsize; s++) {
            int q = -1;
            for (int r = 0; r < P; r++)
                if (node_of[r] == mynode && lrank_of[r] == s) q = r;
            wait_begin("barrier", q);
            while (__atomic_load_n(&BAR_ARRIVE(s), __ATOMIC_ACQUIRE) < e) backoff(&n);
        }
        for (int r = 0; r < P; r++) gvt[r] = __atomic_load_n(&BAR_GVT[r], __ATOMIC_RELAXED);
        if (nnodes > 1) {
            int root = leader_of_node[0];
            if (me == root) {
                for (int k = 1; k < nnodes; k++) {
                    uint32_t in[MAXP];
                    MPI_Request rq;
                    wait_begin("barrier", leader_of_node[k]);
                    mpi_enter();
                    MPI_Irecv(in, P * 4, MPI_BYTE, leader_of_node[k], TAG_BAR, comm, &rq);
                    mpi_leave();
                    wait_request(&rq, MPI_STATUS_IGNORE);
                    for (int r = 0; r < P; r++)
                        if (node_of[r] == k) gvt[r] = in[r];
                }
                mpi_enter(); /* small: eager, does not wait for the receiver */
                for (int k = 1; k < nnodes; k++) MPI_Send(gvt, P * 4, MPI_BYTE, leader_of_node[k], TAG_BAR, comm);
                mpi_leave();
            } else {
                MPI_Request rq;
                mpi_enter();
                MPI_Send(gvt, P * 4, MPI_BYTE, root, TAG_BAR, comm);
                wait_begin("barrier", root);
                MPI_Irecv(gvt, P * 4, MPI_BYTE, root, TAG_BAR, comm, &rq);
                mpi_leave();
                wait_request(&rq, MPI_STATUS_IGNORE);
            }
        }
        for (int r = 0; r < P; r++) __atomic_store_n(&BAR_GVT[r], gvt[r], __ATOMIC_RELAXED);
        __atomic_store_n(&BAR_RELEASE, e, __ATOMIC_RELEASE);
    } else {
        int leader = leader_of_node[mynode];
        wait_begin("barrier", leader);
        while (__atomic_load_n(&BAR_RELEASE, __ATOMIC_ACQUIRE) < e) backoff(&n);
        for (int r = 0; r < P; r++) gvt[r] = __atomic_load_n(&BAR_GVT[r], __ATOMIC_RELAXED);
    }
    wait_end();
    double t1 = now();
    st.barrier += t1 - t0;
    acquire_from(gvt);
    st.protocol += now() - t1;
}

/* ---- protocol thread: base-mode request service, MPI progress for ni, watchdog ---- */
static int pid_dead(pid_t p) {
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)p);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 1;
    ssize_t k = syscall(SYS_read, fd, buf, sizeof buf - 1);
    close(fd);
    if (k <= 0) return 1;
    buf[k] = 0;
    char *c = strrchr(buf, ')');
    return c && (c[2] == 'Z' || c[2] == 'X');
}

static void serve(char *buf, int len, int from) {
    struct req r;
    memcpy(&r, buf, sizeof r);
    if (debug) fprintf(stderr, "svm: rank %d serves %d from %d (%lu, %lu)\n", me, r.type, from, (unsigned long)r.a, (unsigned long)r.b);
    switch (r.type) {
    case REQ_FETCH: {
        char *out = malloc(8 + PG);
        if (!out) fatal("out of memory");
        uint64_t v = __atomic_load_n(&VER(r.a), __ATOMIC_ACQUIRE);
        memcpy(out, &v, 8);
        memcpy(out + 8, data + r.a * PG, PG);
        MPI_Send(out, (int)(8 + PG), MPI_BYTE, from, TAG_REPLY, comm);
        free(out);
        break;
    }
    case REQ_DIFF: {
        uint32_t *runs = (uint32_t *)(buf + sizeof r);
        svm__diff_apply((uint32_t *)(data + r.a * PG), runs, r.b, runs + 2 * r.b);
        uint64_t v = __atomic_add_fetch(&VER(r.a), 1, __ATOMIC_ACQ_REL);
        MPI_Send(&v, 8, MPI_BYTE, from, TAG_REPLY, comm);
        break;
    }
    case REQ_NOTICES: {
        struct slot_hdr *hd = SLOT_HDR(lrank);
        uint64_t end = SLOT_IV(lrank)[r.b % IVCAP], cnt = end - r.a;
        if (cnt > log_entries || cnt * 16 + 8 > msgcap || hd->w > r.a + log_entries) cnt = UINT64_MAX;
        char *out = malloc(msgcap);
        if (!out) fatal("out of memory");
        memcpy(out, &cnt, 8);
        size_t k = cnt == UINT64_MAX ? 0 : cnt;
        for (size_t i = 0; i < k; i++) ((struct notice *)(out + 8))[i] = SLOT_LOG(lrank)[(r.a + i) % log_entries];
        MPI_Send(out, (int)(8 + k * 16), MPI_BYTE, from, TAG_REPLY, comm);
        free(out);
        break;
    }
    case REQ_HOME: {
        uint64_t zero = 0;
        __atomic_compare_exchange_n(&DIR(r.a), &zero, r.b, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
        MPI_Send(&zero, 8, MPI_BYTE, from, TAG_REPLY, comm); /* 0 = granted, else home + 1 */
        break;
    }
    case REQ_LOCK: { /* at the lock's home: forward to the last requester */
        int l = (int)r.a, prev = lk_last[l];
        uint64_t prev_seq = lk_last_seq[l];
        lk_last[l] = (int)r.b;
        lk_last_seq[l] = r.c;
        if (prev < 0) {
            char g[8 + MAXP * 4] = {0};
            memcpy(g, &l, 4);
            MPI_Send(g, 8 + P * 4, MPI_BYTE, (int)r.b, TAG_GRANT, comm);
        } else {
            send_req3(prev, REQ_FWD, r.a, r.b, prev_seq, NULL, 0);
        }
        break;
    }
    case REQ_FWD: { /* at the last owner: grant now, or when it releases */
        int l = (int)r.a;
        pthread_mutex_lock(&lk_mu);
        /* r.c < my latest request: the forwarded tenure is over (I asked again after releasing) */
        if (r.c < lk_seq[l] || (!lk_held[l] && lk_next[l] < 0)) {
            char g[8 + MAXP * 4];
            memcpy(g, &l, 4);
            memcpy(g + 8, lk_vt[l], P * 4);
            MPI_Send(g, 8 + P * 4, MPI_BYTE, (int)r.b, TAG_GRANT, comm);
        } else {
            lk_next[l] = (int)r.b;
        }
        pthread_mutex_unlock(&lk_mu);
        break;
    }
    default:
        fatal("bad protocol request %d from rank %d", r.type, from);
    }
    (void)len;
}

static void *protocol_thread(void *arg) {
    (void)arg;
    size_t cap = msgcap + sizeof(struct req);
    char *buf = malloc(cap);
    if (!buf) fatal("out of memory");
    double last_check = now();
    /* In base mode the poll period is the protocol's stand-in for interrupt latency: keep the
     * kernel's default 50 us timer slack from tripling a 20 us sleep.  (In ni mode the polls only
     * add progress while the main thread is out of MPI; polling 3x as often there made the main
     * thread's faults wait for the MPI mutex more often.) */
    if (!ni_mode) prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    while (!thr_stop) {
        int flag = 0;
        MPI_Status s;
        if (!ni_mode) {
            MPI_Iprobe(MPI_ANY_SOURCE, TAG_REQ, comm, &flag, &s);
        } else {
            /* bounded wait: a main thread stuck in MPI (a peer stopped answering) must not keep
             * the watchdog below from running; its own MPI calls make the progress meanwhile */
            struct timespec dl;
            clock_gettime(CLOCK_REALTIME, &dl);
            dl.tv_nsec += 50 * 1000000L;
            if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
            if (!pthread_mutex_timedlock(&mpi_mu, &dl)) {
                MPI_Iprobe(MPI_ANY_SOURCE, TAG_REQ, comm, &flag, &s);
                pthread_mutex_unlock(&mpi_mu);
            }
            flag = 0; /* ni: polled for progress only; nobody sends requests */
        }
        if (flag) {
            int len;
            MPI_Get_count(&s, MPI_BYTE, &len);
            MPI_Recv(buf, (int)cap, MPI_BYTE, s.MPI_SOURCE, TAG_REQ, comm, MPI_STATUS_IGNORE);
            serve(buf, len, s.MPI_SOURCE);
            continue;
        }
        struct timespec ts = {0, poll_us * 1000L};
        nanosleep(&ts, NULL);
        double t = now();
        if (t - last_check < 0.05) continue;
        last_check = t;
        for (int r = 0; r < P; r++)
            if (r != me && is_local(r) && pid_dead(pid_of[r]))
                fatal("rank %d (pid %d, same node) died; stopping", r, (int)pid_of[r]);
        double since = __atomic_load_n(&wait_since_us, __ATOMIC_ACQUIRE) * 1e-6;
        if (since > 0 && t - since > timeout_s)
            fatal("rank %d did not respond within %.0f s (waiting for %s); stopping", wait_rank, timeout_s,
                  wait_what ? wait_what : "?");
    }
    free(buf);
    return NULL;
}

/* ---- init / finalize / allocation ---- */
static size_t env_size(const char *name, size_t def, size_t min, size_t max) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || x < min || x > max) {
        fprintf(stderr, "svm: %s=%s: expected an integer in %zu..%zu\n", name, v, min, max);
        return (size_t)-1;
    }
    return (size_t)x;
}

static char *map_shm(const char *tag, const char *what, size_t bytes, int create) {
    char name[128];
    snprintf(name, sizeof name, "/huddle-svm-%s-%s-%d", tag, what, mynode);
    int fd = shm_open(name, create ? O_CREAT | O_EXCL | O_RDWR : O_RDWR, 0600);
    if (fd < 0) return NULL;
    if (create && ftruncate(fd, (off_t)bytes)) {
        close(fd);
        return NULL;
    }
    char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

static int data_fd = -1;

/* Open MPI's default one-sided component on a machine without InfiniBand (osc rdma emulating
 * atomics on the vader BTL) crashes in compare-and-swap to the calling process
 * (mca_btl_vader_emu_acswap, Open MPI 4.1), which the ni protocol's locks use, and osc pt2pt
 * refuses MPI_THREAD_MULTIPLE; osc ucx works but, unless asked for, steps aside when UCX finds no
 * InfiniBand device.  So when the user has not chosen a component (mpirun --mca osc X and
 * OMPI_MCA_osc both arrive as this environment variable), svm asks for ucx before MPI_Init. */
static int choose_osc(void) {
#ifdef OPEN_MPI
    const char *chosen = getenv("OMPI_MCA_osc");
    if (chosen && *chosen) return 0;
    setenv("OMPI_MCA_osc", "ucx", 1);
    return 1;
#else
    return 0;
#endif
}

/* Says once (rank 0) which one-sided component svm chose, or that it could not choose. */
static void report_osc(int chose, int we_init) {
#ifdef OPEN_MPI
    const char *chosen = getenv("OMPI_MCA_osc");
    if (!we_init && !chosen) {
        fprintf(stderr, "svm: MPI was initialised before svm_init with Open MPI's default one-sided "
                        "component, whose compare-and-swap can crash over shared memory; set OMPI_MCA_osc=ucx\n");
        return;
    }
    if (!chose) return;
    /* a component's variables exist only while the component is loaded */
    int prov, idx, loaded = 0;
    if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &prov) == MPI_SUCCESS) {
        loaded = MPI_T_cvar_get_index("osc_ucx_priority", &idx) == MPI_SUCCESS;
        MPI_T_finalize();
    }
    if (loaded)
        fprintf(stderr, "svm: Open MPI one-sided component: ucx (chosen by svm because the default, "
                        "osc rdma, crashes in compare-and-swap over shared memory; OMPI_MCA_osc overrides)\n");
    else
        fprintf(stderr, "svm: Open MPI has no usable osc ucx component; one-sided calls will fail "
                        "(set OMPI_MCA_osc, see docs/svm.md)\n");
#else
    (void)chose;
    (void)we_init;
#endif
}

int svm_init(int *argc, char ***argv) {
    int inited, prov;
    MPI_Initialized(&inited);
    int chose_osc = !inited && choose_osc();
    if (!inited) {
        if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &prov) != MPI_SUCCESS) return -1;
        we_init_mpi = 1;
    } else {
        MPI_Query_thread(&prov);
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &P);
    if (me == 0) report_osc(chose_osc, we_init_mpi);
    if (prov < MPI_THREAD_MULTIPLE) {
        if (me == 0) fprintf(stderr, "svm: the MPI library does not provide MPI_THREAD_MULTIPLE\n");
        return -1;
    }
    if (P > MAXP) {
        if (me == 0) fprintf(stderr, "svm: %d processes: at most %d supported\n", P, MAXP);
        return -1;
    }
    const char *proto = getenv("SVM_PROTOCOL"), *hp = getenv("SVM_HOME");
    int bad = 0;
    if (proto && strcmp(proto, "ni") && strcmp(proto, "base")) {
        if (me == 0) fprintf(stderr, "svm: SVM_PROTOCOL=%s: expected ni or base\n", proto);
        bad = 1;
    }
    debug = getenv("SVM_DEBUG") != NULL;
    ni_mode = !proto || !strcmp(proto, "ni");
    if (hp && strcmp(hp, "block") && strcmp(hp, "cyclic") && strcmp(hp, "firsttouch")) {
        if (me == 0) fprintf(stderr, "svm: SVM_HOME=%s: expected block, cyclic or firsttouch\n", hp);
        bad = 1;
    }
    home_policy = !hp || !strcmp(hp, "block") ? HOME_BLOCK : !strcmp(hp, "cyclic") ? HOME_CYCLIC : HOME_FIRST;
    PG = env_size("SVM_PAGE_SIZE", 4096, 4096, 1 << 22);
    if (PG != (size_t)-1 && PG % 4096) {
        fprintf(stderr, "svm: SVM_PAGE_SIZE=%zu: must be a multiple of 4096\n", PG);
        PG = (size_t)-1;
    }
    size_t pool_mb = env_size("SVM_POOL_MB", 256, 1, 1 << 16);
    log_entries = env_size("SVM_LOG_ENTRIES", 1 << 18, 1024, 1 << 26);
    size_t tmo = env_size("SVM_TIMEOUT", 60, 1, 86400), node_size = env_size("SVM_NODE_SIZE", 0, 0, MAXP);
    size_t pu = env_size("SVM_POLL_US", 20, 0, 100000);
    if (PG == (size_t)-1 || pool_mb == (size_t)-1 || log_entries == (size_t)-1 || tmo == (size_t)-1 ||
        node_size == (size_t)-1 || pu == (size_t)-1)
        bad = 1;
    if (bad) return -1;
    timeout_s = (double)tmo;
    poll_us = (int)pu;
    pool_bytes = pool_mb << 20;
    pool_bytes -= pool_bytes % PG;
    npages = pool_bytes / PG;

    /* nodes: real shared-memory domains, or SVM_NODE_SIZE consecutive ranks (to test the
     * inter-node protocol on one machine) */
    if (node_size)
        MPI_Comm_split(comm, me / (int)node_size, me, &nodecomm);
    else
        MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &nodecomm);
    MPI_Comm_rank(nodecomm, &lrank);
    MPI_Comm_size(nodecomm, &lsize);
    {
        MPI_Comm host; /* the physical machine, whatever SVM_NODE_SIZE says */
        int on_host;
        MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
        MPI_Comm_size(host, &on_host);
        MPI_Comm_free(&host);
        oversubscribed = on_host > sysconf(_SC_NPROCESSORS_ONLN);
    }
    int is_leader = lrank == 0, leader_rank = me;
    MPI_Bcast(&leader_rank, 1, MPI_INT, 0, nodecomm);
    int leaders[MAXP];
    MPI_Allgather(&leader_rank, 1, MPI_INT, leaders, 1, MPI_INT, comm);
    nnodes = 0;
    for (int r = 0; r < P; r++) {
        int k;
        for (k = 0; k < nnodes; k++)
            if (leader_of_node[k] == leaders[r]) break;
        if (k == nnodes) leader_of_node[nnodes++] = leaders[r];
        node_of[r] = k;
    }
    mynode = node_of[me];
    MPI_Allgather(&lrank, 1, MPI_INT, lrank_of, 1, MPI_INT, comm);
    int mypid = getpid(), pids[MAXP];
    MPI_Allgather(&mypid, 1, MPI_INT, pids, 1, MPI_INT, comm);
    for (int r = 0; r < P; r++) pid_of[r] = pids[r];
    MPI_Allreduce(&lsize, &slots, 1, MPI_INT, MPI_MAX, comm);

    /* metadata layout (identical on every node) */
    lockrec_bytes = 8 + MAXP * 4;
    off_ver = 0;
    off_nodever = off_ver + npages * 8;
    off_dir = off_nodever + npages * 8;
    off_plock = off_dir + npages * 8;
    off_twinok = off_plock + npages * 4;
    off_locks = (off_twinok + npages + 63) & ~(size_t)63;
    off_bar = off_locks + SVM_LOCKS * lockrec_bytes;
    off_logs = (off_bar + (MAXP + 1) * 8 + MAXP * 4 + 63) & ~(size_t)63;
    slot_bytes = sizeof(struct slot_hdr) + IVCAP * 8 + log_entries * 16;
    meta_bytes = off_logs + (size_t)slots * slot_bytes;

    char tag[64];
    long tagv[2] = {getpid(), (long)time(NULL)};
    MPI_Bcast(tagv, 2, MPI_LONG, 0, comm);
    snprintf(tag, sizeof tag, "%ld-%ld", tagv[0], tagv[1]);
    int ok = 1;
    if (is_leader) {
        char name[128];
        snprintf(name, sizeof name, "/huddle-svm-%s-data-%d", tag, mynode);
        data_fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        ok = data_fd >= 0 && !ftruncate(data_fd, (off_t)pool_bytes);
        ok = ok && map_shm(tag, "twin", pool_bytes, 1) && map_shm(tag, "meta", meta_bytes, 1);
    }
    MPI_Barrier(nodecomm);
    if (!is_leader) {
        char name[128];
        snprintf(name, sizeof name, "/huddle-svm-%s-data-%d", tag, mynode);
        data_fd = shm_open(name, O_RDWR, 0600);
        ok = data_fd >= 0;
    }
    twin = map_shm(tag, "twin", pool_bytes, 0);
    meta = map_shm(tag, "meta", meta_bytes, 0);
    if (data_fd >= 0)
        data = mmap(NULL, pool_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, data_fd, 0);
    ok = ok && twin && meta && data && data != MAP_FAILED;
    MPI_Barrier(nodecomm);
    if (is_leader) {
        const char *w[3] = {"data", "twin", "meta"};
        for (int i = 0; i < 3; i++) {
            char name[128];
            snprintf(name, sizeof name, "/huddle-svm-%s-%s-%d", tag, w[i], mynode);
            shm_unlink(name);
        }
    }
    int all_ok;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
    if (!all_ok) {
        if (!ok) fprintf(stderr, "svm: rank %d: cannot create node shared memory (/dev/shm): %s\n", me, strerror(errno));
        return -1;
    }

    /* the application view: same address everywhere */
    for (int attempt = 0;; attempt++) {
        uintptr_t addr = 0;
        if (me == 0) {
            void *p = mmap(NULL, pool_bytes, PROT_NONE, MAP_SHARED | MAP_NORESERVE, data_fd, 0);
            addr = p == MAP_FAILED ? 0 : (uintptr_t)p;
        }
        MPI_Bcast(&addr, sizeof addr, MPI_BYTE, 0, comm);
        void *p = (void *)addr;
        if (me != 0 && addr)
            p = mmap((void *)addr, pool_bytes, PROT_NONE, MAP_SHARED | MAP_NORESERVE | MAP_FIXED_NOREPLACE, data_fd, 0);
        ok = addr && p == (void *)addr;
        MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
        if (all_ok) {
            view = p;
            break;
        }
        if (me != 0 && p != MAP_FAILED && p) munmap(p, pool_bytes);
        if (attempt == 16) { /* rank 0 keeps failed candidates mapped so that it picks another */
            if (me == 0) fprintf(stderr, "svm: no common address range of %zu MiB in all processes\n", pool_mb);
            return -1;
        }
    }

    prot = calloc(npages, 1);
    dirty = calloc(npages, 1);
    home = malloc(npages * 4);
    need = calloc(npages, 8);
    dlist = malloc(npages * 4);
    msgcap = (PG / 4 / 2 + 1) * 8 + PG * 2 + 64;
    if (msgcap < 8 + log_entries * 16) msgcap = 8 + log_entries * 16;
    msgbuf = malloc(msgcap + sizeof(struct req));
    scratch = malloc(PG);
    fetchbuf = malloc(PG);
    if (!prot || !dirty || !home || !need || !dlist || !msgbuf || !scratch || !fetchbuf) return -1;
    for (size_t x = 0; x < npages; x++) home[x] = -2;
    for (int l = 0; l < SVM_LOCKS; l++) lk_next[l] = lk_last[l] = -1;

    MPI_Win_create(data, pool_bytes, 1, MPI_INFO_NULL, comm, &win_data);
    MPI_Win_create(meta, meta_bytes, 1, MPI_INFO_NULL, comm, &win_meta);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, win_data);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, win_meta);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
    if (pthread_create(&thr, NULL, protocol_thread, NULL)) return -1;
    initialized = 1;
    memset(&st, 0, sizeof st);
    t_init = now();
    MPI_Barrier(comm);
    return 0;
}

int svm_finalize(void) {
    if (!initialized) return -1;
    svm_barrier();
    if (getenv("SVM_STATS")) {
        struct svm_stats s;
        svm_get_stats(&s);
        fprintf(stderr,
                "svm-stats rank=%d protocol=%s total=%.6f data_wait=%.6f lock=%.6f barrier=%.6f protocol_time=%.6f "
                "faults=%lu fetches=%lu diffs=%lu diff_bytes=%lu notices=%lu acquires=%lu\n",
                me, svm_protocol(), s.total, s.data_wait, s.lock, s.barrier, s.protocol, s.faults, s.fetches, s.diffs,
                s.diff_bytes, s.notices, s.acquires);
    }
    MPI_Barrier(comm); /* nobody sends protocol requests any more */
    thr_stop = 1;
    pthread_join(thr, NULL);
    initialized = 0;
    MPI_Win_unlock_all(win_data);
    MPI_Win_unlock_all(win_meta);
    MPI_Win_free(&win_data);
    MPI_Win_free(&win_meta);
    sigaction(SIGSEGV, &old_segv, NULL);
    munmap(view, pool_bytes);
    munmap(data, pool_bytes);
    munmap(twin, pool_bytes);
    munmap(meta, meta_bytes);
    close(data_fd);
    if (we_init_mpi) MPI_Finalize();
    return 0;
}

int svm_rank(void) { return me; }
int svm_size(void) { return P; }
const char *svm_protocol(void) { return ni_mode ? "ni" : "base"; }
int svm__nodes(void) { return nnodes; }
void svm__fault_profile(struct svm_fault_profile *out, int reset) {
    *out = prof;
    if (reset) memset(&prof, 0, sizeof prof);
}
void svm__mpi_enter(void) { mpi_enter(); }
void svm__raw_get(void *dst, size_t bytes, int rank, size_t off) {
    mpi_enter();
    MPI_Get(dst, (int)bytes, MPI_BYTE, rank, off, (int)bytes, MPI_BYTE, win_data);
    MPI_Win_flush(rank, win_data);
    mpi_leave();
}
size_t svm__offset(const void *p) { return (size_t)((const char *)p - view); }
void svm__mpi_leave(void) { mpi_leave(); }
int svm__node_of(int rank) { return rank >= 0 && rank < P ? node_of[rank] : -1; }

void svm_get_stats(struct svm_stats *out) {
    *out = st;
    out->total = now() - t_init;
}

void *svm_malloc(size_t bytes) {
    if (!initialized) return NULL;
    unsigned long long b[2] = {bytes, bytes}, r[2];
    b[1] = ~b[1];
    MPI_Allreduce(b, r, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm);
    if (r[0] != bytes || ~r[1] != bytes) fatal("svm_malloc: processes disagree on the size (%zu here)", bytes);
    size_t n = (bytes + PG - 1) / PG;
    if (!n) n = 1;
    if (n > npages - next_page) return NULL; /* pool exhausted: SVM_POOL_MB */
    if (nalloc == MAXALLOC) fatal("svm_malloc: more than %d allocations", MAXALLOC);
    size_t first = next_page;
    next_page += n;
    alloc_first[nalloc] = first;
    alloc_n[nalloc++] = n;
    for (size_t i = 0; i < n; i++)
        home[first + i] = home_policy == HOME_BLOCK    ? (int)(i * (size_t)P / n)
                          : home_policy == HOME_CYCLIC ? (int)(i % (size_t)P)
                                                       : -1;
    int p0 = home_policy == HOME_FIRST ? PROT_NO : PROT_RD;
    if (p0 != PROT_NO && mprotect(view + first * PG, n * PG, PROT_READ)) fatal("mprotect: %s", strerror(errno));
    for (size_t i = 0; i < n; i++) prot[first + i] = (uint8_t)p0;
    return view + first * PG;
}

void svm_free(void *p) {
    if (!initialized || !p) return;
    char *c = p;
    size_t k;
    for (k = 0; k < nalloc; k++)
        if (view + alloc_first[k] * PG == c && alloc_n[k]) break;
    if (k == nalloc) fatal("svm_free(%p): not a live svm_malloc pointer", p);
    svm_barrier(); /* collective; the pages are not reused (see docs/svm.md) */
    for (size_t x = alloc_first[k]; x < alloc_first[k] + alloc_n[k]; x++) {
        set_prot(x, PROT_NO);
        home[x] = -2;
    }
    alloc_n[k] = 0;
}
