/* Fork children that exec while their own agent has pages out. At execve the kernel reads
 * the exec'ing thread's robust futex list head (glibc keeps it in the thread's descriptor,
 * at the top of its stack mapping) after it has ended every other thread, the child's agent
 * helpers too. Each child of a second thread moves its stack 64 KiB down and watches its
 * descriptor's page in /proc/self/pagemap, for up to 0.3 s, without touching it (raw
 * system calls only: glibc's wrappers read the descriptor); once the page is not present
 * (its agent took it out), or the time is over, it calls execve. A child that has not
 * exited within 10 s hung in execve: it is killed and the program fails.
 *
 * Usage: exec_child [CHILDREN]   Exit status 0 when every child exited 0; prints how many
 * children exec'd with the page out.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "now.h"

static int children = 8;
static int failed;

static char *const true_argv[] = {"true", NULL};
static char *const no_env[] = {NULL};
/* Children that saw their descriptor's page out before exec (each tells through a pipe). */
static int exec_with_page_out;
static int tell[2];

/* The child's part, on a stack 64 KiB below the descriptor: no stack guard, no TLS, no
 * wrapper that reads the descriptor (syscall() touches errno only on failure). */
__attribute__((noinline, optimize("no-stack-protector"))) static void watch_then_exec(uint64_t head) {
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
    syscall(SYS_write, tell[1], out ? "o" : "i", 1);
    syscall(SYS_execve, "/bin/true", true_argv, no_env);
    syscall(SYS_exit_group, 3);
}

static void *forker(void *arg) {
    (void)arg;
    for (int k = 0; k < children && !failed; k++) {
        void *head = NULL;
        size_t len = 0;
        syscall(SYS_get_robust_list, 0, &head, &len);
        pid_t c = fork();
        if (c == 0)
            watch_then_exec((uint64_t)(uintptr_t)head);
        if (c < 0) {
            perror("fork");
            exit(2);
        }
        int status = 0;
        double deadline = now() + 10;
        while (waitpid(c, &status, WNOHANG) == 0) {
            if (now() > deadline) {
                fprintf(stderr, "exec_child: child %d of %d hung in execve; killed\n", k + 1,
                        children);
                kill(c, SIGKILL);
                waitpid(c, &status, 0);
                failed = 1;
                return NULL;
            }
            usleep(10000);
        }
        char told = 0;
        if (read(tell[0], &told, 1) == 1 && told == 'o')
            exec_with_page_out++;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "exec_child: child %d of %d ended with status %#x\n", k + 1, children,
                    status);
            failed = 1;
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1)
        children = atoi(argv[1]);
    /* Forked from a second thread: its descriptor lives in a stack mapping the agent may
     * take pages out of (the main thread's does too, but where depends on the loader). */
    if (pipe2(tell, O_CLOEXEC | O_NONBLOCK) != 0) {
        perror("pipe2");
        return 2;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, forker, NULL) != 0) {
        perror("pthread_create");
        return 2;
    }
    pthread_join(t, NULL);
    if (!failed)
        printf("exec_child: %d children exec'd and exited, %d with their descriptor's page out\n",
               children, exec_with_page_out);
    return failed;
}
