//! huddle's locality-aware intra-node message passing.
//!
//! Ranks of one job are processes on one machine that share a segment ([`shm`]) created by
//! `huddle launch` ([`launch`]). Each ordered pair of ranks has a byte ring; how a message
//! travels (one record, pipelined fragments, or one process_vm_readv copy) depends on the
//! pair's locality class and the rule table ([`rules`]). [`engine`] is the point-to-point
//! engine, [`coll`] the topology-aware collectives, and [`ffi`] exports the MPI C subset
//! declared in include/huddle/msg/mpi.h.

pub mod coll;
pub mod engine;
pub mod ffi;
pub mod launch;
pub mod ops;
pub mod rules;
pub mod shm;
pub mod tune;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum MsgError {
    #[error("{0} failed: {1}")]
    Sys(&'static str, std::io::Error),
    #[error("bad job description: {0}")]
    BadJob(String),
    #[error("shared segment from HUDDLE_MSG_FD is unusable: {0}")]
    BadSegment(String),
    #[error("rule table: {0}")]
    BadRules(String),
    #[error("the job is stopping: rank {rank} failed (code {code})")]
    Aborted { rank: i32, code: i32 },
    #[error("cannot start {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    /// Measuring for the rule table went wrong (a measuring job, or its points file).
    #[error("tune-msg: {0}")]
    Tune(String),
}
