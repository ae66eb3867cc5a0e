//! Online communication detection in the manner of CDSM (Diener et al., 2015), in user space.
//!
//! A fault on memory block `b` (address >> log2(block size)) by task `t` adds one to
//! `M[t][q]` and `M[q][t]` for every other task `q` among the four most recent accessors of
//! `b`, then records `t` there ([`sharers::SharerTable`]). Fault events come from
//! `perf_event_open` software page-fault samples ([`perf`]): per-CPU ring buffers,
//! inherited by every thread and child of the target, period 1, with TID, TIME, ADDR and
//! CPU. Normally a task faults once per page; the agent (`crates/agent`, preloaded into the
//! target) re-arms a budgeted random sample of pages so that detection goes on and follows
//! phase changes, and reports the faults it resolves itself through a shared ring
//! (`agent_abi::ring`) - the event source used when perf is unavailable.
//!
//! Keys: within a process the virtual address; for shared mappings (device, inode, offset)
//! from /proc/PID/maps, so that processes sharing memory meet in the same block.
//!
//! # Use from an online manager
//!
//! ```no_run
//! use detect::{Config, Session, Target};
//! use std::time::Duration;
//! let mut s = Session::start(
//!     Target::Spawn { program: "./app".into(), args: vec![] },
//!     &Config::default(),
//! )?;
//! while s.try_wait().is_none() {
//!     s.wait(Duration::from_millis(50)); // returns early when a ring fills up
//!     s.poll();                          // drain every source, update the matrix
//!     let rows = s.active_tasks(0.1);   // tasks worth mapping, in order of appearance
//!     let m = s.matrix_of(&rows);        // matrix::CommMatrix, symmetric
//!     let tasks = s.tasks();             // tid, pid, comm, first_seen_ms
//!     // ... map, migrate, then age the history so new patterns can take over:
//!     s.age();                           // M -= M >> 2
//!     let _ = (m, tasks, s.stats());     // faults/s, lost records, table memory, re-arms
//! }
//! s.poll(); // the events still buffered after the target ended
//! # Ok::<(), detect::DetectError>(())
//! ```
//!
//! `poll` is O(events) and allocation-free in steady state, so calling it every 50 ms to
//! 2 s (the CDSM mapping interval) is fine; call it more often (or after `wait`) when the
//! program first-touches memory fast, so the per-CPU rings (`Config::ring_pages`) do not
//! overflow. Lost records are counted in `Stats::perf_lost`, never hidden.

#![warn(missing_docs)]

pub mod active;
pub mod agent_env;
pub mod budget;
pub mod document;
pub mod edges;
pub mod ids;
pub mod owners;
pub mod perf;
pub mod procmaps;
pub mod procs;
pub mod session;
pub mod sharers;
pub mod signals;
mod spawn;
pub mod watch;

pub use session::{
    resolve_program, AgentConfig, Config, DetectError, Granularity, Session, SourceStatus, Stats,
    Target, TargetExit, TaskInfo, DEFAULT_AGENT_INTERVAL_MS, DEFAULT_REARM_FLOOR,
    DEFAULT_REARM_RATE, DEFAULT_STEADY_FLOOR,
};
