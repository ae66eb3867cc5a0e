//! Ground-truth workloads: programs whose communication is known by construction.
//!
//! `run(&Spec)` starts N real OS threads or child processes (in task order 0..N-1) that share
//! memory according to a [`Pattern`]: every round each task writes its slots of the regions it
//! shares, waits at a barrier, then reads the slots its partners wrote and checks every word.
//! The [`Report`] carries the exact bytes each task read of each other task's data (counted as
//! the reads happen), the TIDs/PIDs in task order, the throughput, and a checksum of the data
//! read that depends only on the arguments, never on timing or on how many rounds ran.
//! [`ground_truth`] gives the shape (bytes per round) without running anything.

mod layout;
mod pattern;
mod run;
mod shm;
mod task;

pub use layout::{
    ground_truth, moved_between_tasks, Layout, Phase, Slot, FALSE_SHARING_BLOCK, MAX_REGION_BYTES,
};
pub use pattern::{pattern_names, Pattern, CLUSTER_SIZE, MAX_TASKS};
pub use run::{run, Mode, Report, Spec, DEFAULT_REGION_BYTES, DEFAULT_SECONDS, MAX_SECONDS};
pub use task::CONTENT_KEYS;

/// Why a workload could not run, or failed while running.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("unknown pattern '{0}' (valid: {names})", names = pattern_names())]
    UnknownPattern(String),
    #[error("{pattern} with {n} tasks: {reason}")]
    Tasks {
        pattern: Pattern,
        n: usize,
        reason: String,
    },
    #[error("region size {bytes} bytes: {reason}")]
    Bytes { bytes: u64, reason: String },
    #[error("time budget {0} s: must be a number of seconds between 0 and {MAX_SECONDS}")]
    Seconds(f64),
    #[error("pin list: {0}")]
    Pin(String),
    #[error("task {task} could not be pinned to CPUs {cpus:?}: {error}")]
    PinFailed {
        task: usize,
        cpus: Vec<u32>,
        error: std::io::Error,
    },
    #[error("{what}: {error}")]
    Io {
        what: &'static str,
        error: std::io::Error,
    },
    /// A task died or panicked; the report holds what was done until then.
    #[error("{reason}")]
    TaskFailed { reason: String, report: Box<Report> },
}

impl WorkloadError {
    /// True when the arguments are at fault (exit code 2), false for runtime failures.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            WorkloadError::UnknownPattern(_)
                | WorkloadError::Tasks { .. }
                | WorkloadError::Bytes { .. }
                | WorkloadError::Seconds(_)
                | WorkloadError::Pin(_)
                | WorkloadError::PinFailed { .. }
        )
    }
}
