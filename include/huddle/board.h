/* The PMPI agent's board layout: the one definition shared by its writer (huddle_pmpi.c) and
 * its reader (crates/simmer/build.rs turns every `NAME = VALUE` line of the enums below into a Rust
 * constant).  Field indexes are u64 units; the layout is described in docs/pmpi.md.  Keep one
 * `NAME = VALUE,` per line: the reader's parser is that simple. */
#ifndef HUDDLE_PMPI_BOARD_H
#define HUDDLE_PMPI_BOARD_H

enum huddle_board_layout {
    BOARD_VERSION = 2,
    HEADER_SIZE = 128,          /* bytes */
    HOSTNAME_OFFSET = 152,      /* bytes into a slot: hostname, 64 bytes, NUL-terminated */
    HOSTNAME_SIZE = 64,
    SLOT_FIXED = 216,           /* bytes before the per-peer arrays */
};

/* Header fields. */
enum huddle_board_header {
    H_MAGIC = 0,
    H_VERSION = 1,
    H_HEADER_SIZE = 2,
    H_WORLD = 3,
    H_SLOT_SIZE = 4,
    H_STAMP = 5,
    H_CREATED = 6,
};

/* Slot fields. */
enum huddle_board_slot {
    S_STATE = 0,
    S_PID = 1,
    S_RANK = 2,
    S_CPU = 3,
    S_UPDATED = 4,
    S_INIT = 5,
    S_BLOCKING = 6,
    S_COMPUTE = 7,
    S_PENDING_COMPUTE = 8,
    S_BLOCKING_CALLS = 9,
    S_PENDING_SENDS = 10,
    S_CACHE_MISSES = 11,
    S_CACHE_STATE = 12,
    S_SENT_BYTES = 13,
    S_SENT_MSGS = 14,
    S_IN_CALL = 15,
    S_PHASE_START = 16,
    S_PENDING_SINCE = 17,
    S_TID = 18,                 /* thread of the last blocking MPI call, every 50 ms at most */
};

enum huddle_board_state {
    STATE_EMPTY = 0,
    STATE_RUNNING = 1,
    STATE_FINALIZED = 2,
    STATE_NO_FINALIZE = 3,
};

enum huddle_board_cache {
    CACHE_NOT_TRIED = 0,
    CACHE_COUNTING = 1,
    CACHE_UNAVAILABLE = 2,
};

#endif
