//! Whether two threads of a process or more are busy, judged from their CPU times: the rule
//! the agent applies in threads-only mode (it re-arms only then) and the detector applies to
//! a process's faults where another source counts the traffic between processes (the PMPI
//! agent, for MPI ranks). MPI's own helper threads (progress, PMIx) sleep and do not count.

/// How often the threads are judged (ns).
pub const CHECK_NS: u64 = 250_000_000;
/// Threads followed at most (the rest are not judged).
pub const TRACKED: usize = 256;

/// CPU times of the threads at the last check, and how many were busy since the one before.
#[derive(Clone, Copy)]
pub struct Threads {
    seen: [(u32, u64); TRACKED],
    n: usize,
    /// Threads found busy at the last check.
    pub busy: u32,
    /// When the last check was (ns of the caller's clock; 0: never).
    pub checked_ns: u64,
}

impl Threads {
    /// The threads' CPU times `now` ((tid, ns)) at `at`: counts those that ran a fifth of the
    /// time since the last check or more (a thread not there last time is not judged yet).
    pub fn update(&mut self, now: &[(u32, u64)], at: u64) -> u32 {
        let elapsed = at.saturating_sub(self.checked_ns);
        let mut busy = 0;
        for &(tid, cpu) in now {
            if let Some(&(_, before)) = self.seen[..self.n].iter().find(|s| s.0 == tid) {
                busy += (cpu.saturating_sub(before) * 5 >= elapsed) as u32;
            }
        }
        let n = now.len().min(TRACKED);
        self.seen[..n].copy_from_slice(&now[..n]);
        self.n = n;
        self.checked_ns = at;
        self.busy = busy;
        busy
    }
}

impl Default for Threads {
    fn default() -> Self {
        Threads {
            seen: [(0, 0); TRACKED],
            n: 0,
            busy: 0,
            checked_ns: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_threads_are_those_that_ran_a_fifth_of_the_time() {
        let mut t = Threads::default();
        assert_eq!(
            t.update(&[(10, 0), (11, 0), (12, 0)], 0),
            0,
            "nothing to compare"
        );
        // 250 ms later: 10 ran 250 ms, 11 ran 50 ms (a fifth), 12 ran 10 ms; 13 is new.
        let now = [
            (10, 250_000_000),
            (11, 50_000_000),
            (12, 10_000_000),
            (13, 90_000_000),
        ];
        assert_eq!(t.update(&now, 250_000_000), 2);
        assert_eq!(t.busy, 2);
        // One thread left busy.
        let now = [(10, 500_000_000), (11, 50_000_000), (13, 90_000_000)];
        assert_eq!(t.update(&now, 500_000_000), 1);
    }
}
