/* Internal entry points of the svm library, exported for tests and benchmarks only. */
#ifndef HUDDLE_SVM_INTERNAL_H
#define HUDDLE_SVM_INTERNAL_H
#include <stddef.h>
#include <stdint.h>
#include "huddle/svm.h"

/* Word-level (4-byte) diff of cur against its twin: writes runs as (first word, length) pairs,
 * copies the changed words into out at the same offsets, updates the twin; returns the runs. */
size_t svm__diff_create(uint32_t *cur, uint32_t *twin, uint32_t *out, size_t nwords, uint32_t *runs);
/* Applies runs whose changed words are packed one after another in vals. */
void svm__diff_apply(uint32_t *page, const uint32_t *runs, size_t nruns, const uint32_t *vals);
/* Nodes as the library grouped the processes (shared-memory domains or SVM_NODE_SIZE). */
int svm__nodes(void);
int svm__node_of(int rank);
/* Time (seconds) the fault handler spent per step since the last reset: version check (ordered
 * fallback only), page read (with the version read in the same round trip), merge into the node
 * copy, mprotect, and the whole handler; faults handled and fetches that had to be retried. */
struct svm_fault_profile {
    double version, get, merge, mprotect, handler;
    unsigned long faults, retries;
};
void svm__fault_profile(struct svm_fault_profile *out, int reset);
/* Brackets for MPI calls the program makes itself while svm runs (ni): the library's own MPI calls
 * and its protocol thread's polls take the same sleeping lock, so that the two threads are never
 * inside MPI together (svm.c, "who may call MPI").  svmbench wraps its raw-MPI baselines in them
 * so that both sides of a comparison run alike. */
void svm__mpi_enter(void);
void svm__mpi_leave(void);
/* A plain MPI_Get + MPI_Win_flush from the library's own data window (node shared memory, the
 * window svm fetches pages from): off is a byte offset in the pool, as svm__offset gives it. */
void svm__raw_get(void *dst, size_t bytes, int rank, size_t off);
size_t svm__offset(const void *p);
#endif
