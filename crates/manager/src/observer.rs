//! What the loop reads: the [`Observer`] a detection source implements, the tasks it
//! reports, and how the program ended. Shared by the loop ([`crate::run`]), the policies and
//! the observers ([`crate::observe`], [`crate::node`]), so that none of them imports another.

use matrix::CommMatrix;
use std::time::Duration;

/// One task as the observer knows it, in the order tasks appeared.
#[derive(Clone, Debug, PartialEq)]
pub struct ObservedTask {
    /// Thread id; the process id for a whole-process task (the task's key either way).
    pub tid: u32,
    /// Process id.
    pub pid: u32,
    /// The task's name as the kernel gives it (comm), for the report.
    pub comm: String,
    /// Seconds since the run started.
    pub first_seen: f64,
    /// The task is a whole process (`--processes`): its CPU time and its pinning cover all
    /// its threads.
    pub whole_process: bool,
}

/// How the program ended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Exit {
    /// It exited with this status.
    Code(i32),
    /// This signal (its number) ended it.
    Signal(i32),
}

/// Where communication comes from: a detection session on a launched or attached program.
pub trait Observer {
    /// The program's main process.
    fn pid(&self) -> u32;
    /// Processes pending events; returns how many were processed.
    fn poll(&mut self) -> u64;
    /// Blocks up to `timeout`, returning early when events pile up (a ring buffer reached
    /// its watermark), so the loop sleeps long without losing events.
    fn wait(&self, timeout: Duration) {
        std::thread::sleep(timeout);
    }
    /// Processes everything still buffered, once the program has ended.
    fn flush(&mut self) -> u64 {
        self.poll()
    }
    /// The matrix over every task seen so far, and those tasks, in the same order.
    fn snapshot(&self) -> (CommMatrix, Vec<ObservedTask>);
    /// Ages the matrix after a migration (M -= M >> 2) so new behaviour shows quickly.
    fn age(&mut self);
    /// Records lost so far (dropped by the kernel, or by an agent whose ring was full).
    fn lost(&self) -> u64;
    /// What the events come from, for the report.
    fn source(&self) -> String;
    /// Messages the report should show (fallbacks, missing privileges).
    fn notes(&self) -> Vec<String>;
    /// Where each cell of the (symmetrized) matrix came from ("faults", "mpi", "" for none),
    /// where the observer merges several sources.
    fn cell_sources(&self) -> Option<Vec<Vec<&'static str>>> {
        None
    }
    /// The page-fault matrix alone, where the snapshot merges it with another source.
    fn fault_matrix(&self) -> Option<CommMatrix> {
        None
    }
    /// For each task of the snapshot, the MPI rank whose MPI-calling thread it is.
    fn mpi_ranks(&self) -> Vec<Option<usize>> {
        Vec::new()
    }
    /// The program's exit, once it has ended (None while it runs, or when attached).
    fn try_wait(&mut self) -> Option<Exit>;
    /// Whether the program is still there (for attached programs that are not our child).
    fn alive(&self) -> bool;
    /// CPU seconds of helper threads the observer put into the program (0 when none).
    fn agent_cpu_s(&self) -> f64 {
        0.0
    }
    /// Pages the agents re-armed for extra faults so far (0 without agents).
    fn rearmed_pages(&self) -> u64 {
        0
    }
    /// Page addresses (in the task's process, ascending) that task `task` (an index of the
    /// snapshot) was seen touching last; empty when not recorded.
    fn owned_pages(&self, _task: usize) -> Vec<u64> {
        Vec::new()
    }
    /// Pauses or resumes the extra faults (huddle got SIGUSR1 / SIGUSR2).
    fn set_paused(&mut self, _paused: bool) {}
    /// Puts the fault agents to sleep or wakes them (`detect::Session::set_dormant`).
    fn set_dormant(&mut self, _dormant: bool) {}
    /// Whether the fault agents are dormant.
    fn dormant(&self) -> bool {
        false
    }
}
