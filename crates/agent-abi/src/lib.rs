//! What huddle's preloaded agent (crates/agent) and its detector (crates/detect) share, and
//! nothing else, so that the agent's library builds only this beside libc:
//!
//! - [`ring`]: the shared-memory ring file through which the agent reports faults and
//!   counters, and through which the detector hands it its re-arm floor;
//! - [`env`](mod@env): the `HUDDLE_AGENT_*` variables that configure the agent;
//! - [`maps`]: lines of /proc/PID/maps, parsed without allocating, as both read them;
//! - [`busy`]: whether two threads of a process or more are busy, as both judge it.

#![warn(missing_docs)]

pub mod busy;
pub mod maps;
pub mod ring;

/// The environment variables the agent reads (the detector sets them: `detect::agent_env`).
pub mod env {
    /// Every variable the agent reads starts with this; the detector replaces them all.
    pub const PREFIX: &str = "HUDDLE_AGENT_";
    /// The private directory for the ring file (without it the agent does nothing).
    pub const DIR: &str = "HUDDLE_AGENT_DIR";
    /// Fraction of eligible pages re-armed per second.
    pub const RATE: &str = "HUDDLE_AGENT_RATE";
    /// Pages re-armed per second at least.
    pub const FLOOR: &str = "HUDDLE_AGENT_FLOOR";
    /// The re-arm thread's period.
    pub const INTERVAL_MS: &str = "HUDDLE_AGENT_INTERVAL_MS";
    /// "0": leave private anonymous memory alone.
    pub const PRIVATE: &str = "HUDDLE_AGENT_PRIVATE";
    /// "0": save dropped private pages by copy, not with UFFDIO_MOVE.
    pub const MOVE: &str = "HUDDLE_AGENT_MOVE";
    /// "1": re-arm only while two threads of the process or more are busy (another source
    /// counts the traffic between processes: the PMPI agent's, for MPI ranks).
    pub const THREADS_ONLY: &str = "HUDDLE_AGENT_THREADS_ONLY";
}
