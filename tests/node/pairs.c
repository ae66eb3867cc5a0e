/* A job whose communication is known by construction, for tests/node-managers.sh.
 *
 *   pairs PER ITERS BYTES
 *
 * Ranks are placed in blocks of PER per node (the launcher's default, by slot). Inside a
 * block, local index i exchanges BYTES with local index PER-1-i at every iteration: with
 * PER = 4, ranks 0<->3 and 1<->2 on the first node, 4<->7 and 5<->6 on the second, a pairing
 * that neither a blocked (0,1 | 2,3) nor a cyclic (0,2 | 1,3) order of two PUs gets right.
 * Every 64 iterations all ranks join one small allreduce (a little traffic between nodes).
 * Rank 0 prints one line whose checksum depends on every byte every rank received, so a run
 * that lost or reordered data prints another line. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* With PAIRS_INIT_DIR set (tests/node-slurm.sh), each rank of a Slurm step leaves an empty file
 * JOB.STEP.TASK.PID.pre before MPI_Init and JOB.STEP.TASK.PID.post after it: a task with the
 * first and not the second died inside MPI_Init (tests/node/common.sh, nt_ompi_init_crash).
 * The pid tells apart the jobs of a Slurm that was restarted (job ids begin again). */
static void mark(const char *when)
{
    const char *dir = getenv("PAIRS_INIT_DIR"), *job = getenv("SLURM_JOB_ID"),
               *step = getenv("SLURM_STEP_ID"), *task = getenv("SLURM_PROCID");
    if (!dir || !job || !step || !task) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%s.%s.%d.%s", dir, job, step, task, (int)getpid(), when);
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
}

int main(int argc, char **argv)
{
    mark("pre");
    MPI_Init(&argc, &argv);
    mark("post");
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 4) {
        if (rank == 0) fprintf(stderr, "usage: pairs PER ITERS BYTES\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int per = atoi(argv[1]), iters = atoi(argv[2]);
    long bytes = atol(argv[3]);
    if (per < 2 || per % 2 || size % per || iters < 1 || bytes < 8) {
        if (rank == 0) fprintf(stderr, "pairs: PER must be even and divide %d ranks; ITERS >= 1; BYTES >= 8\n", size);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int base = rank / per * per, partner = base + (per - 1 - (rank - base));
    size_t n = (size_t)bytes / 8;
    uint64_t *out = malloc(n * 8), *in = malloc(n * 8);
    if (!out || !in) MPI_Abort(MPI_COMM_WORLD, 1);
    uint64_t sum = 0;
    for (int it = 0; it < iters; it++) {
        for (size_t k = 0; k < n; k++) out[k] = (uint64_t)rank * 1000003u + (uint64_t)it * 7919u + k;
        MPI_Sendrecv(out, (int)n, MPI_UINT64_T, partner, it, in, (int)n, MPI_UINT64_T, partner, it, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        for (size_t k = 0; k < n; k += 61) sum = sum * 31 + in[k];
        if (it % 64 == 63) {
            uint64_t s = sum, all = 0;
            MPI_Allreduce(&s, &all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
            sum += all;
        }
    }
    uint64_t total = 0;
    MPI_Reduce(&sum, &total, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("pairs np=%d per=%d iters=%d bytes=%ld checksum=%016llx\n", size, per, iters, bytes, (unsigned long long)total);
    free(out);
    free(in);
    MPI_Finalize();
    return 0;
}
