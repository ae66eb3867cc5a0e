//! Which processes have two threads or more at work.
//!
//! Where another source counts the traffic between processes (the PMPI agent, for MPI
//! ranks), a process's faults matter only for what its own threads share. An MPI rank
//! usually has one working thread and a few helpers (progress, PMIx) that sleep; counting
//! its threads would call it multithreaded for good, and the helpers fault now and then
//! (an Open MPI rank of HPCC: a helper's few faults every few hundred ms), so neither the
//! thread count nor recent faults tell. Their CPU times do, by the rule the agent applies
//! in threads-only mode (agent_abi::busy), read from /proc/PID/task/TID/stat at most every
//! CHECK_NS per process, and only for processes that fault.

use crate::ids::IdMap;
use crate::procs;
use agent_abi::busy::{Threads, CHECK_NS, TRACKED};

/// The threads' CPU times of each process that faulted, at its last check.
#[derive(Default)]
pub struct BusyProcesses {
    procs: IdMap<Box<Threads>>,
}

impl BusyProcesses {
    /// Whether two threads of process `pid` or more were busy at its last check, checking
    /// again first if that was CHECK_NS before `now` (ns, CLOCK_MONOTONIC) or more. A
    /// process's first check has nothing to compare with: not busy until the next.
    pub fn two_busy(&mut self, pid: u32, now: u64) -> bool {
        let threads = self.procs.entry(pid).or_default();
        if threads.checked_ns == 0 || now.saturating_sub(threads.checked_ns) >= CHECK_NS {
            threads.update(&cpu_times(pid), now);
        }
        threads.busy >= 2
    }

    /// Forgets a process (it exited).
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
    }
}

/// (tid, CPU ns) of the threads of `pid`, huddle's agent helpers left out; empty once the
/// process is gone.
fn cpu_times(pid: u32) -> Vec<(u32, u64)> {
    let ns_per_tick = 1e9 / procs::ticks_per_second();
    procs::threads(pid)
        .into_iter()
        .filter_map(|tid| {
            let stat = procs::read_stat(std::path::Path::new(&format!(
                "/proc/{pid}/task/{tid}/stat"
            )))?;
            (stat.comm != "huddle-agent")
                .then_some((tid, (stat.cpu_ticks as f64 * ns_per_tick) as u64))
        })
        .take(TRACKED)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::monotonic_ns as now;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// Threads that sleep until `go`, then spin until `stop`.
    fn workers(
        n: usize,
        go: &Arc<AtomicBool>,
        stop: &Arc<AtomicBool>,
    ) -> Vec<std::thread::JoinHandle<()>> {
        (0..n)
            .map(|_| {
                let (go, stop) = (go.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !go.load(Ordering::Relaxed) {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect()
    }

    #[test]
    fn two_spinning_threads_make_a_process_busy_and_a_sleeping_one_is_not() {
        let pid = std::process::id();
        let mut b = BusyProcesses::default();
        assert!(
            !b.two_busy(pid, now()),
            "nothing to compare at the first check"
        );
        // The workers wait (sleeping) through the next check, so that they are known to it: a
        // thread that was not there at the last check is not judged.
        let (go, stop) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let threads = workers(2, &go, &stop);
        std::thread::sleep(std::time::Duration::from_millis(300));
        // Not asserted: other tests of this binary may spin meanwhile (see below for a
        // process that sleeps).
        b.two_busy(pid, now());
        // Spinning for 600 ms, judged as if CHECK_NS had passed (each needs a fifth of that,
        // 50 ms of CPU), so that a loaded machine passes too.
        go.store(true, Ordering::Relaxed);
        let checked = b.procs[&pid].checked_ns;
        std::thread::sleep(std::time::Duration::from_millis(600));
        let busy = b.two_busy(pid, checked + CHECK_NS);
        stop.store(true, Ordering::Relaxed);
        threads.into_iter().for_each(|h| h.join().unwrap());
        assert!(busy, "two spinners busy");
        // Within CHECK_NS of the last check the answer is not read again.
        assert!(b.two_busy(pid, checked + 2 * CHECK_NS - 1));
        b.forget(pid);
        assert!(!b.two_busy(pid, now()));
        // A process that sleeps is never busy.
        let mut sleeper = std::process::Command::new("sleep")
            .arg("2")
            .spawn()
            .unwrap();
        let mut other = BusyProcesses::default();
        let t0 = now();
        assert!(!other.two_busy(sleeper.id(), t0));
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(!other.two_busy(sleeper.id(), t0 + CHECK_NS));
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        // A process that is gone: no threads, never busy.
        let mut fresh = BusyProcesses::default();
        assert!(!fresh.two_busy(u32::MAX - 1, 1));
        assert!(!fresh.two_busy(u32::MAX - 1, 1 + CHECK_NS));
    }
}
