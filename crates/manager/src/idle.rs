//! Which tasks are idle: they are left out of the mapping, so that they take no PU's share
//! of the balance.
//!
//! Mapping algorithms give every task an equal share of the PUs. A task that does not run
//! (a launcher thread waiting for its workers, a rank blocked for good) still took one:
//! `pipeline` x8 threads on the 2-PU VM was mapped 5 + 4 with the workload's idle main
//! thread among the 9 tasks, so one PU ran 5 workers and the other 3 (2026-11-23, 10 paired
//! 3 s runs, `huddle run` against `huddle run --policy none`: median 0.923 of the
//! throughput). An idle task is not pinned by the mapping and keeps the PUs it has.

use std::collections::{HashMap, VecDeque};

/// A task that used less than this share of one CPU over the last [`WINDOW_S`] is idle.
pub const IDLE_SHARE: f64 = 0.02;
/// The window CPU use is measured over, once a task has been watched that long.
pub const WINDOW_S: f64 = 1.0;
/// How long a task must have been watched before it can be judged idle. Shorter than the
/// window: the first mapping comes before a second has passed, and with a launcher's idle
/// threads counted as busy it split the tasks by count and stacked busy ranks on one PU
/// (LAMMPS, 2 Open MPI ranks on 2 PUs: 89 s against 3.3 s plain, bench/apps).
pub const MIN_WATCH_S: f64 = 0.25;

/// CPU time samples per task over the last window.
#[derive(Default)]
pub struct IdleTracker {
    samples: HashMap<u32, VecDeque<(f64, f64)>>,
}

impl IdleTracker {
    /// Task `tid` had used `cpu_s` seconds of CPU at time `t` (seconds).
    pub fn observe(&mut self, tid: u32, t: f64, cpu_s: f64) {
        let s = self.samples.entry(tid).or_default();
        s.push_back((t, cpu_s));
        // Keep one sample at least WINDOW_S old, to measure the window against.
        while s.len() > 2 && s[1].0 <= t - WINDOW_S {
            s.pop_front();
        }
    }

    /// Whether `tid`, observed at `t`, used under IDLE_SHARE of a CPU over the last window
    /// (or since it was first seen, when that is shorter). A task watched for less than
    /// MIN_WATCH_S is not idle: it may just have started.
    pub fn is_idle(&self, tid: u32, t: f64) -> bool {
        let Some(s) = self.samples.get(&tid) else {
            return false;
        };
        let (Some(&(t0, cpu0)), Some(&(t1, cpu1))) = (s.front(), s.back()) else {
            return false;
        };
        t0 <= t - MIN_WATCH_S && t1 > t0 && (cpu1 - cpu0) < IDLE_SHARE * (t1 - t0)
    }

    /// The share of one CPU `tid` used over about the last `window` seconds before `t` (from
    /// its newest sample back to the newest one at least `window` older, or the oldest; a task
    /// sampled once: what it used since it started, over `window`); 0 if never seen. Above 0:
    /// it ran lately. Unlike [`IdleTracker::is_idle`] this forgets at once a launcher that
    /// initialised and now waits.
    pub fn share_lately(&self, tid: u32, t: f64, window: f64) -> f64 {
        let Some(s) = self.samples.get(&tid) else {
            return 0.0;
        };
        let Some(&(newest_t, newest)) = s.back() else {
            return 0.0;
        };
        if s.len() == 1 {
            return newest / window;
        }
        let (then_t, then) = s
            .iter()
            .rev()
            .skip(1)
            .find(|&&(ts, _)| ts <= t - window)
            .or(s.front())
            .copied()
            .unwrap_or((newest_t, newest));
        if newest_t > then_t {
            (newest - then) / (newest_t - then_t)
        } else {
            0.0
        }
    }

    /// Forgets tasks not in `live` (they exited).
    pub fn retain(&mut self, live: &[u32]) {
        self.samples.retain(|tid, _| live.contains(tid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launcher_that_now_waits_has_not_run_lately_though_not_idle_yet() {
        let mut t = IdleTracker::default();
        for k in 0..=4 {
            let now = k as f64 * 0.05;
            // The launcher initialises for 0.1 s, then waits; the worker runs throughout.
            t.observe(1, now, now.min(0.1));
            t.observe(2, now, now);
        }
        assert!(!t.is_idle(1, 0.2), "busy within the last second");
        assert_eq!(t.share_lately(1, 0.2, 0.1), 0.0);
        assert!(t.share_lately(1, 0.1, 0.1) > 0.0);
        assert!(t.share_lately(2, 0.2, 0.1) > 0.0);
        assert_eq!(t.share_lately(3, 0.2, 0.1), 0.0, "never seen");
        t.observe(4, 0.2, 0.01);
        assert!(
            t.share_lately(4, 0.2, 0.1) > 0.0,
            "sampled once, after it ran"
        );
        assert!(
            (t.share_lately(2, 0.2, 0.1) - 1.0).abs() < 1e-9,
            "a whole CPU"
        );
        assert_eq!(t.share_lately(1, 0.2, 0.1), 0.0);
        assert!(
            (t.share_lately(4, 0.2, 0.1) - 0.1).abs() < 1e-9,
            "0.01 s over the window"
        );
    }

    #[test]
    fn a_task_is_idle_only_after_a_quiet_quarter_second() {
        let mut t = IdleTracker::default();
        for k in 0..=20 {
            let now = k as f64 * 0.1;
            t.observe(1, now, 0.5); // used 0.5 s before, nothing since
            t.observe(2, now, 0.3 * now); // 30 % of a CPU
            t.observe(3, now, 0.01 * now); // 1 % of a CPU
            if k < 3 {
                assert!(!t.is_idle(1, now), "not watched long enough yet at {now}");
                assert!(!t.is_idle(3, now), "not watched long enough yet at {now}");
            } else {
                assert!(t.is_idle(3, now), "quiet since it was first seen, at {now}");
            }
        }
        assert!(t.is_idle(1, 2.0));
        assert!(!t.is_idle(2, 2.0));
        assert!(t.is_idle(3, 2.0), "1 % of a CPU is under IDLE_SHARE");
        assert!(!t.is_idle(4, 2.0), "never seen: not idle");
        // It runs again: busy at once, since the window is measured from a second ago.
        t.observe(1, 2.1, 0.6);
        assert!(!t.is_idle(1, 2.1));
        t.retain(&[2]);
        assert!(!t.is_idle(1, 2.1));
        assert!(!t.samples.contains_key(&3));
    }
}
