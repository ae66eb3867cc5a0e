//! The built-in communication patterns and what each needs of the task count.

use crate::WorkloadError;
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// Who shares memory with whom. Names are the CLI spellings (`Display` / `FromStr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(into = "String")]
pub enum Pattern {
    /// Task 2k with 2k+1.
    Pairs,
    /// Task i with i-1 and i+1 (mod N).
    Ring,
    /// Task i with i+N/2 (mod N): compact placement puts partners far apart.
    DistantPairs,
    /// Groups of 8 consecutive tasks, all-to-all inside each group.
    Clusters,
    /// Every task with every other task.
    AllToAll,
    /// Stage i writes, stage i+1 reads (one direction, no wrap-around).
    Pipeline,
    /// Task 0 sends work to every other task and reads their results.
    MasterWorker,
    /// Each task only touches its own memory.
    Private,
    /// Tasks write different 256 B blocks of the same pages; nobody reads another's data.
    FalseSharing,
    /// `pairs` for the first half of the run, then `distant-pairs`.
    PhaseChange,
}

/// Size of a cluster in [`Pattern::Clusters`].
pub const CLUSTER_SIZE: usize = 8;

/// Most tasks a workload runs (the control block holds an N×N counter matrix per phase).
pub const MAX_TASKS: usize = 1024;

impl Pattern {
    pub const ALL: [Pattern; 10] = [
        Pattern::Pairs,
        Pattern::Ring,
        Pattern::DistantPairs,
        Pattern::Clusters,
        Pattern::AllToAll,
        Pattern::Pipeline,
        Pattern::MasterWorker,
        Pattern::Private,
        Pattern::FalseSharing,
        Pattern::PhaseChange,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Pattern::Pairs => "pairs",
            Pattern::Ring => "ring",
            Pattern::DistantPairs => "distant-pairs",
            Pattern::Clusters => "clusters",
            Pattern::AllToAll => "all-to-all",
            Pattern::Pipeline => "pipeline",
            Pattern::MasterWorker => "master-worker",
            Pattern::Private => "private",
            Pattern::FalseSharing => "false-sharing",
            Pattern::PhaseChange => "phase-change",
        }
    }

    /// Whether tasks read data that other tasks wrote (false for private and false-sharing).
    pub fn communicates(self) -> bool {
        !matches!(self, Pattern::Private | Pattern::FalseSharing)
    }

    /// The patterns run one after the other: one for most, two for phase-change.
    pub fn phases(self) -> Vec<Pattern> {
        match self {
            Pattern::PhaseChange => vec![Pattern::Pairs, Pattern::DistantPairs],
            p => vec![p],
        }
    }

    /// Checks that `n` tasks make sense for this pattern.
    pub fn check_tasks(self, n: usize) -> Result<(), WorkloadError> {
        let bad = |reason: String| {
            Err(WorkloadError::Tasks {
                pattern: self,
                n,
                reason,
            })
        };
        let min = match self {
            Pattern::Private => 1,
            Pattern::PhaseChange => 4,
            Pattern::Clusters => CLUSTER_SIZE,
            _ => 2,
        };
        if n < min {
            return bad(format!("needs at least {min} tasks"));
        }
        if n > MAX_TASKS {
            return bad(format!("at most {MAX_TASKS} tasks are supported"));
        }
        let multiple = match self {
            Pattern::Pairs | Pattern::DistantPairs | Pattern::PhaseChange => 2,
            Pattern::Clusters => CLUSTER_SIZE,
            _ => 1,
        };
        if !n.is_multiple_of(multiple) {
            return bad(format!("needs a multiple of {multiple} tasks"));
        }
        Ok(())
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<Pattern> for String {
    fn from(p: Pattern) -> String {
        p.name().to_string()
    }
}

impl FromStr for Pattern {
    type Err = WorkloadError;

    fn from_str(s: &str) -> Result<Pattern, WorkloadError> {
        let key = s.trim().to_ascii_lowercase().replace('_', "-");
        Pattern::ALL
            .into_iter()
            .find(|p| p.name() == key)
            .ok_or_else(|| WorkloadError::UnknownPattern(s.to_string()))
    }
}

/// The valid names, comma-separated (for error messages and help).
pub fn pattern_names() -> String {
    Pattern::ALL.map(Pattern::name).join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in Pattern::ALL {
            assert_eq!(p.name().parse::<Pattern>().unwrap(), p);
            assert_eq!(p.to_string(), p.name());
        }
        assert_eq!(
            "Distant_Pairs".parse::<Pattern>().unwrap(),
            Pattern::DistantPairs
        );
        let e = "stars".parse::<Pattern>().unwrap_err().to_string();
        assert!(
            e.contains("'stars'") && e.contains("distant-pairs, clusters"),
            "{e}"
        );
    }

    #[test]
    fn task_counts_are_checked() {
        assert!(Pattern::Pairs.check_tasks(1).is_err());
        let e = Pattern::Pairs.check_tasks(5).unwrap_err().to_string();
        assert!(e.contains("multiple of 2"), "{e}");
        let e = Pattern::Clusters.check_tasks(12).unwrap_err().to_string();
        assert!(e.contains("multiple of 8"), "{e}");
        assert!(Pattern::Clusters.check_tasks(16).is_ok());
        assert!(Pattern::PhaseChange.check_tasks(2).is_err());
        assert!(Pattern::Private.check_tasks(1).is_ok());
        assert!(Pattern::Ring.check_tasks(3).is_ok());
        assert!(Pattern::AllToAll.check_tasks(1).is_err());
        assert!(Pattern::Private.check_tasks(0).is_err());
        let e = Pattern::Ring
            .check_tasks(MAX_TASKS + 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most 1024"), "{e}");
    }
}
