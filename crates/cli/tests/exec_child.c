/* Threads and fork children that end while their agent has pages out. When a thread execs,
 * the kernel reads its robust futex list head after it has ended every other thread, the
 * agent's helpers too; when a thread exits, the kernel clears its TID word (what
 * pthread_join waits on) and will not wait for a fault then. glibc keeps both in the
 * thread's descriptor, at the top of its stack mapping. Each thread here moves its stack
 * 64 KiB down and watches its descriptor's page in /proc/self/pagemap, for up to 0.3 s,
 * without touching it (raw system calls only: glibc's wrappers read the descriptor); once
 * the page is not present (its agent took it out), or the time is over, it ends:
 *   exec (default): fork children of a second thread call execve(/bin/true);
 *   exit:           threads call exit(2) and the main thread joins them;
 *   robust:         threads lock a robust mutex of their own (in .bss, a page each), hold
 *                   it 0.3 s (the agent looks at the robust lists every 0.1 s), watch the
 *                   mutex's page instead, and call exit(2) holding it; the kernel walks the
 *                   thread's robust list at exit to mark the mutex's owner dead, and the
 *                   main thread's lock must then answer EOWNERDEAD.
 *   robust-return:  threads lock a robust mutex of their own, watch its page at once (up to
 *                   0.3 s, so the agent may take it out before it looks at the robust
 *                   lists), and end by returning (glibc's thread exit, destructors and
 *                   all) holding it; the main thread's lock must answer EOWNERDEAD.
 * A child or thread not ended within 10 s hung: the program says so and fails.
 *
 * Usage: exec_child [COUNT [exec|exit|robust|robust-return]]
 * Exit status 0 when all ended; prints how many saw the page they watched out first.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "now.h"

static int count = 8;
static int failed;

static char *const true_argv[] = {"true", NULL};
static char *const no_env[] = {NULL};
/* Each child or thread tells through this pipe whether it saw its page out ('o') or not. */
static int tell[2];
static int ended_with_page_out;

/* Watches the page of `head` until it is not present or 0.3 s are over, and tells which.
 * On a stack 64 KiB below the descriptor: no stack guard, no TLS, no wrapper that reads
 * the descriptor (syscall() touches errno only on failure). */
__attribute__((noinline, optimize("no-stack-protector"))) static void watch(uint64_t head) {
    char below[64 << 10];
    below[0] = 0;
    __asm__ volatile("" : : "r"(below) : "memory"); /* the frame stays */
    long fd = syscall(SYS_openat, AT_FDCWD, "/proc/self/pagemap", O_RDONLY);
    double until = now() + 0.3;
    int out = 0;
    while (fd >= 0 && !out && now() < until) {
        uint64_t entry = 0;
        long off = (long)(head / 4096 * 8);
        out = syscall(SYS_pread64, fd, &entry, 8, off) == 8 && !(entry >> 63);
    }
    syscall(SYS_close, fd);
    syscall(SYS_write, tell[1], out ? "o" : "i", 1);
}

static uint64_t my_robust_head(void) {
    void *head = NULL;
    size_t len = 0;
    syscall(SYS_get_robust_list, 0, &head, &len);
    return (uint64_t)(uintptr_t)head;
}

static void count_told(void) {
    char told = 0;
    if (read(tell[0], &told, 1) == 1 && told == 'o')
        ended_with_page_out++;
}

__attribute__((noinline, optimize("no-stack-protector"))) static void watch_then_exec(uint64_t head) {
    watch(head);
    syscall(SYS_execve, "/bin/true", true_argv, no_env);
    syscall(SYS_exit_group, 3);
}

static void *forker(void *arg) {
    (void)arg;
    for (int k = 0; k < count && !failed; k++) {
        uint64_t head = my_robust_head();
        pid_t c = fork();
        if (c == 0)
            watch_then_exec(head);
        if (c < 0) {
            perror("fork");
            exit(2);
        }
        int status = 0;
        double deadline = now() + 10;
        while (waitpid(c, &status, WNOHANG) == 0) {
            if (now() > deadline) {
                fprintf(stderr, "exec_child: child %d of %d hung in execve; killed\n", k + 1, count);
                kill(c, SIGKILL);
                waitpid(c, &status, 0);
                failed = 1;
                return NULL;
            }
            usleep(10000);
        }
        count_told();
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "exec_child: child %d of %d ended with status %#x\n", k + 1, count,
                    status);
            failed = 1;
        }
    }
    return NULL;
}

__attribute__((noinline, optimize("no-stack-protector"))) static void *watch_then_exit(void *arg) {
    (void)arg;
    watch(my_robust_head());
    syscall(SYS_exit, 0);
    return NULL;
}

/* One robust mutex per page: a thread's own page is only its mutex. */
static struct {
    pthread_mutex_t m;
    char rest[4096 - sizeof(pthread_mutex_t)];
} robust[64] __attribute__((aligned(4096)));

__attribute__((noinline, optimize("no-stack-protector"))) static void *lock_watch_exit(void *arg) {
    pthread_mutex_t *m = arg;
    pthread_mutex_lock(m);
    struct timespec held = {0, 300 * 1000 * 1000};
    syscall(SYS_nanosleep, &held, NULL);
    watch((uint64_t)(uintptr_t)m);
    syscall(SYS_exit, 0);
    return NULL;
}

__attribute__((noinline)) static void *lock_watch_return(void *arg) {
    pthread_mutex_t *m = arg;
    pthread_mutex_lock(m);
    watch((uint64_t)(uintptr_t)m);
    return NULL;
}

/* Threads that end holding a robust mutex: the next lock must say its owner died. */
static void robust_mode(void *(*thread)(void *)) {
    if (count > 64)
        count = 64;
    /* Every mutex made first, and time for the agent to see their pages as memory in use. */
    for (int k = 0; k < count; k++) {
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
        pthread_mutex_init(&robust[k].m, &a);
    }
    struct timespec settle = {0, 300 * 1000 * 1000};
    nanosleep(&settle, NULL);
    for (int k = 0; k < count && !failed; k++) {
        pthread_t t;
        if (pthread_create(&t, NULL, thread, &robust[k].m) != 0) {
            perror("pthread_create");
            exit(2);
        }
        pthread_join(t, NULL);
        count_told();
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += 10;
        int r = pthread_mutex_timedlock(&robust[k].m, &deadline);
        if (r != EOWNERDEAD) {
            fprintf(stderr, "exec_child: the robust mutex of thread %d of %d: %s, not its "
                            "owner's death\n", k + 1, count, strerror(r));
            failed = 1;
        }
    }
}

int main(int argc, char **argv) {
    if (argc > 1)
        count = atoi(argv[1]);
    int exit_mode = argc > 2 && strcmp(argv[2], "exit") == 0;
    int robust_exit = argc > 2 && strcmp(argv[2], "robust") == 0;
    int robust_return = argc > 2 && strcmp(argv[2], "robust-return") == 0;
    int robust_threads = robust_exit || robust_return;
    if (pipe2(tell, O_CLOEXEC | O_NONBLOCK) != 0) {
        perror("pipe2");
        return 2;
    }
    if (robust_threads) {
        robust_mode(robust_exit ? lock_watch_exit : lock_watch_return);
    } else if (exit_mode) {
        for (int k = 0; k < count && !failed; k++) {
            pthread_t t;
            if (pthread_create(&t, NULL, watch_then_exit, NULL) != 0) {
                perror("pthread_create");
                return 2;
            }
            struct timespec deadline;
            clock_gettime(CLOCK_REALTIME, &deadline);
            deadline.tv_sec += 10;
            if (pthread_timedjoin_np(t, NULL, &deadline) != 0) {
                fprintf(stderr, "exec_child: thread %d of %d never seen ended (its TID word "
                                "stayed set)\n", k + 1, count);
                failed = 1;
            }
            count_told();
        }
    } else {
        /* Forked from a second thread: its descriptor lives in a stack mapping the agent
         * may take pages out of (the main thread's does too, but where depends on the
         * loader). */
        pthread_t t;
        if (pthread_create(&t, NULL, forker, NULL) != 0) {
            perror("pthread_create");
            return 2;
        }
        pthread_join(t, NULL);
    }
    if (!failed)
        printf("exec_child: %d %s ended, %d with their %s page out\n", count,
               exit_mode || robust_threads ? "threads" : "children", ended_with_page_out,
               robust_threads ? "mutex's" : "descriptor's");
    return failed;
}
