/* no-perf COMMAND [ARG...]: runs COMMAND with perf_event_open refused (EACCES), as the kernels
 * of Debian (perf_event_paranoid 3) and Ubuntu (4) refuse it to every user but root. A
 * seccomp filter, inherited by everything COMMAND starts; nothing else changes. The node
 * tests start node managers through it to check that they go on without page faults. */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#else
#error "no-perf: add this architecture's AUDIT_ARCH"
#endif

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: no-perf COMMAND [ARG...]\n");
        return 2;
    }
    struct sock_filter filter[] = {
        /* Another architecture's system call numbers mean other calls: refuse them all. */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_perf_event_open, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EACCES),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof filter / sizeof filter[0], .filter = filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        fprintf(stderr, "no-perf: cannot install the seccomp filter: %s\n", strerror(errno));
        return 1;
    }
    execv(argv[1], argv + 1);
    fprintf(stderr, "no-perf: %s: %s\n", argv[1], strerror(errno));
    return 127;
}
