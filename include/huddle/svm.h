/* huddle svm: page-based shared virtual memory over MPI (home-based lazy release consistency).
 * Consistency model, environment variables and limits: docs/svm.md. */
#ifndef HUDDLE_SVM_H
#define HUDDLE_SVM_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

int   svm_init(int *argc, char ***argv);   /* initialises MPI too if the program has not; 0 = ok */
int   svm_finalize(void);
int   svm_rank(void);
int   svm_size(void);
void *svm_malloc(size_t bytes);             /* collective; same address in every process */
void  svm_free(void *p);                    /* collective */
void  svm_lock(int lock);                   /* acquire; 0 <= lock < SVM_LOCKS */
void  svm_unlock(int lock);                 /* release */
void  svm_barrier(void);

#define SVM_LOCKS 1024

/* Per-process time breakdown (seconds) and counters since svm_init, for benchmarks. */
struct svm_stats {
    double total, data_wait, lock, barrier, protocol; /* compute = total - the other four */
    unsigned long faults, fetches, diffs, diff_bytes, notices, acquires;
};
void svm_get_stats(struct svm_stats *out);
const char *svm_protocol(void);             /* "ni" or "base" */

#ifdef __cplusplus
}
#endif
#endif
