/* huddle bank- and controller-aware allocator (crates/alloc). Link: pkg-config huddle-alloc.
 *
 * Modes fall back in this order, each including the ones before it:
 *   HUDDLE_ALLOC_EXACT      the requested (controller, bank) only;
 *   HUDDLE_ALLOC_CONTROLLER then the controller's other banks, most free memory first;
 *   HUDDLE_ALLOC_ANY        then the other controllers (most free first) and their banks;
 *   HUDDLE_ALLOC_SPLIT      then a contiguous block that may span banks and controllers.
 * Failures return NULL or -1 and set errno (EINVAL bad argument, ENOMEM no memory there,
 * EPERM no privilege for /proc/self/pagemap, ENOENT no pagemap, ESRCH thread not bound,
 * ENOTSUP no published mapping for this CPU); huddle_last_error() gives the message.
 * mapping names: "tilepro64", "sandybridge-ddr3-1ch", "haswell-ddr3-2ch",
 * "skylake-ddr4-2ch", "xor:bank=13^17,14^18;controller=6",
 * "synthetic:controllers=4,banks=8,chunk=4096[,run=K,source=virtual|physical]". */
#ifndef HUDDLE_ALLOC_H
#define HUDDLE_ALLOC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct huddle_pool huddle_pool;
enum { HUDDLE_ALLOC_EXACT, HUDDLE_ALLOC_CONTROLLER, HUDDLE_ALLOC_ANY, HUDDLE_ALLOC_SPLIT };
huddle_pool *huddle_pool_create(size_t bytes, const char *mapping); /* NULL: this machine's */
void  huddle_pool_destroy(huddle_pool *p);
int   huddle_pool_controllers(const huddle_pool *p);
int   huddle_pool_banks(const huddle_pool *p);               /* banks per controller */
void *huddle_alloc(huddle_pool *p, size_t bytes, int controller, int bank, int mode);
void  huddle_free(huddle_pool *p, void *ptr);
int   huddle_where(const huddle_pool *p, const void *ptr, int *controller, int *bank);
int   huddle_bind_thread(huddle_pool *p, int controller, int bank);
void *huddle_alloc_bound(huddle_pool *p, size_t bytes);

/* Extension: the calling thread's last error message ("" if none). */
const char *huddle_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* HUDDLE_ALLOC_H */
