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
#endif
