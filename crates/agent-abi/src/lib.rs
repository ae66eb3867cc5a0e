//! What huddle's preloaded agent (crates/agent) and its detector (crates/detect) share, and
//! nothing else, so that the agent's library builds only this beside libc:
//!
//! - [`ring`]: the shared-memory ring file through which the agent reports faults and
//!   counters, and through which the detector hands it its re-arm floor;
//! - [`env`](mod@env): the `HUDDLE_AGENT_*` variables that configure the agent;
//! - [`maps`]: lines of /proc/PID/maps, parsed without allocating, as both read them;
//! - [`busy`]: whether two threads of a process or more are busy, as both judge it;
//! - [`is_mpi_launcher`]: the MPI launchers and daemons, where the agent stays inert.

#![warn(missing_docs)]

pub mod busy;
pub mod maps;
pub mod ring;

/// Whether an executable's file name (`mpirun.openmpi`, `hydra_pmi_proxy`) names an MPI
/// launcher or launcher daemon: the part before the first dot is one of theirs. They start
/// and wait for the ranks and compute nothing, so the agent stays inert in them (and in the
/// children they fork before those exec a rank): there it only delayed each rank's launch.
pub fn is_mpi_launcher(name: &[u8]) -> bool {
    let stem = name.split(|&c| c == b'.').next().unwrap_or_default();
    const LAUNCHERS: [&[u8]; 7] = [
        b"mpirun",
        b"mpiexec",
        b"orterun",
        b"prterun",
        b"orted",
        b"prted",
        b"hydra_pmi_proxy",
    ];
    LAUNCHERS.iter().any(|l| stem.eq_ignore_ascii_case(l))
}

#[cfg(test)]
mod tests {
    use super::is_mpi_launcher;

    #[test]
    fn launchers_and_their_daemons_are_told_from_programs() {
        for l in [
            "mpirun",
            "mpirun.openmpi",
            "mpiexec.hydra",
            "mpiexec.mpich",
            "orterun",
            "orted",
            "prted",
            "hydra_pmi_proxy",
        ] {
            assert!(is_mpi_launcher(l.as_bytes()), "{l}");
        }
        for p in [
            "lmp",
            "gmx",
            "hpcc",
            "sorted",
            "mpirunner",
            "traffic",
            "python3.11",
            "",
        ] {
            assert!(!is_mpi_launcher(p.as_bytes()), "{p}");
        }
    }
}

/// The environment variables the agent reads (the detector sets them: `detect::agent_env`).
pub mod env {
    /// Every variable the agent reads starts with this; the detector replaces them all but
    /// [`USER_SETTINGS`].
    pub const PREFIX: &str = "HUDDLE_AGENT_";
    /// The variables a user sets (the detector has no option for them), which reach the
    /// agent as they are.
    pub const USER_SETTINGS: [&str; 2] = [MOVE, HUGE];
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
    /// "0": take dropped private pages out with mremap, not with UFFDIO_MOVE (the way of
    /// kernels before Linux 6.8, tested on newer ones with this).
    pub const MOVE: &str = "HUDDLE_AGENT_MOVE";
    /// "0": take a sampled transparent huge page out 4 KiB at a time (which splits it), not
    /// whole (the agent's huge module).
    pub const HUGE: &str = "HUDDLE_AGENT_HUGE";
    /// "1": re-arm only while two threads of the process or more are busy (another source
    /// counts the traffic between processes: the PMPI agent's, for MPI ranks).
    pub const THREADS_ONLY: &str = "HUDDLE_AGENT_THREADS_ONLY";
}
