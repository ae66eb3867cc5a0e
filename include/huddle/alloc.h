/* huddle bank- and controller-aware allocator (crates/alloc). Link: pkg-config huddle-alloc.
 *
 * Modes fall back in this order, each including the ones before it:
 *   HUDDLE_ALLOC_EXACT      the requested (controller, bank) only;
 *   HUDDLE_ALLOC_CONTROLLER then the controller's other banks, most free memory first;
 *   HUDDLE_ALLOC_ANY        then the other controllers (most free first) and their banks;
 *   HUDDLE_ALLOC_SPLIT      then a contiguous block that may span banks and controllers.
 * Failures return NULL or -1 and set errno (EINVAL bad argument, ENOMEM no memory there,
 * EPERM no privilege for /proc/self/pagemap, ENOENT no pagemap, ESRCH thread not bound,
 * ENOTSUP a block larger than a line-granule mapping's chunk asked for in one bank);
 * huddle_last_error() gives the message.
 * mapping names: "tilepro64", "sandybridge-ddr3-1ch", "haswell-ddr3-2ch", "skylake-ddr4-2ch",
 * "zenplus-ddr4-1r", "zenplus-ddr4-2r", "zen2-ddr4-1r", "zen2-ddr4-2r", "zen3-ddr4-1r",
 * "zen3-ddr4-2r", "zen4-ddr5-1r", "numa", "xor:bank=13^17,14^18;controller=6",
 * "synthetic:controllers=4,banks=8,chunk=4096[,run=K,source=virtual|physical]".
 * Physical mappings place whole pages by default (granule=page: functions that read bits inside
 * a page are dropped, so any block from 1 byte to a page lands in one (controller, bank));
 * "skylake-ddr4-2ch:granule=line" keeps them (128-byte blocks, nothing larger in one bank).
 * NULL picks this machine's: $HUDDLE_ALLOC_MAPPING, else the CPU's preset, else "numa". */
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
size_t huddle_pool_chunk_size(const huddle_pool *p);        /* smallest block handed out */
const char *huddle_pool_mapping(const huddle_pool *p);      /* mapping name, valid with the pool */
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
