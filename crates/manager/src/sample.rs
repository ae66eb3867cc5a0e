//! Step 1 of the loop: where the program's live tasks run now, where they may run, and
//! which of them work. Read from /proc once an interval.

use crate::idle::IdleTracker;
use crate::observer::ObservedTask;
use crate::procs;
use mapping::{Slot, Target};
use matrix::CommMatrix;
use rundata::Placement;
use std::collections::HashMap;
use std::path::Path;
use topology::OsCpu;

/// The live tasks at one tick, in snapshot order, with what the loop decides on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sampled {
    /// Indices (in the observer's snapshot) of the tasks that are alive.
    pub live: Vec<usize>,
    /// The slot each runs on (the one it is pinned to, else the PU it last ran on).
    pub current: Vec<usize>,
    /// The slots each may run on (its affinity mask); never empty.
    pub masks: Vec<Vec<usize>>,
    /// Where each live task was seen, for the report.
    pub placements: Vec<Placement>,
}

impl Sampled {
    /// Keeps the tasks whose entry in `keep` is true (same order as `live`).
    pub fn keep_where(&mut self, keep: &[bool]) {
        keep_where(&mut self.live, keep);
        keep_where(&mut self.current, keep);
        keep_where(&mut self.masks, keep);
    }

    /// The thread ids of the live tasks.
    pub fn tids(&self, tasks: &[ObservedTask]) -> Vec<u32> {
        self.live.iter().map(|&i| tasks[i].tid).collect()
    }
}

/// Keeps the items of `v` whose entry in `keep` is true (missing entries keep).
fn keep_where<T>(v: &mut Vec<T>, keep: &[bool]) {
    let mut k = keep.iter();
    v.retain(|_| *k.next().unwrap_or(&true));
}

/// Reads the tasks' state each tick and remembers what the report needs of it (CPU time).
pub struct Sampler {
    os_to_slot: HashMap<OsCpu, Slot>,
    /// The slot a task is taken to run on when nothing says where it runs.
    first_allowed: Slot,
    ticks_per_s: f64,
    cpu_ticks: HashMap<u32, u64>,
    idle: IdleTracker,
}

impl Sampler {
    /// A sampler for tasks on `target`'s PUs (their OS indexes turned into its slots), with
    /// nothing sampled yet.
    pub fn new(target: &Target) -> Sampler {
        Sampler {
            os_to_slot: (0..target.num_pus())
                .map(|g| (target.os_cpu(Slot(g)), Slot(g)))
                .collect(),
            first_allowed: target.allowed_slots().first().copied().unwrap_or(Slot(0)),
            ticks_per_s: procs::ticks_per_second(),
            cpu_ticks: HashMap::new(),
            idle: IdleTracker::default(),
        }
    }

    /// The live tasks of the snapshot (`matrix` rows, `tasks`) at `t` seconds. `pinned`: the
    /// slot the loop pinned each thread id to, which stands for where a sleeping task runs.
    pub fn sample(
        &mut self,
        t: f64,
        matrix: &CommMatrix,
        tasks: &[ObservedTask],
        pinned: &HashMap<u32, Slot>,
    ) -> Sampled {
        let live: Vec<usize> = (0..tasks.len().min(matrix.n()))
            .filter(|&i| {
                Path::new(&format!("/proc/{}/task/{}", tasks[i].pid, tasks[i].tid)).exists()
            })
            .collect();
        let mut s = Sampled {
            live,
            ..Sampled::default()
        };
        for &i in &s.live {
            let task = &tasks[i];
            // A whole process's stat sums its threads' CPU time (and names its leader's CPU).
            let stat_path = if task.whole_process {
                format!("/proc/{}/stat", task.pid)
            } else {
                format!("/proc/{}/task/{}/stat", task.pid, task.tid)
            };
            let stat = procs::read_stat(Path::new(&stat_path));
            if let Some(st) = &stat {
                self.cpu_ticks.insert(task.tid, st.cpu_ticks);
                self.idle
                    .observe(task.tid, t, st.cpu_ticks as f64 / self.ticks_per_s);
                s.placements.push(Placement {
                    t,
                    task: i,
                    pu: st.processor,
                });
            }
            let mask: Vec<Slot> = crate::actuate::get_affinity(task.tid)
                .unwrap_or_default()
                .cpus()
                .filter_map(|os| self.os_to_slot.get(&os).copied())
                .collect();
            // Where /proc says it ran last; failing that, somewhere it may run.
            let here = stat
                .and_then(|st| self.os_to_slot.get(&OsCpu(st.processor)).copied())
                .or_else(|| mask.first().copied())
                .unwrap_or(self.first_allowed);
            // A task pinned to one PU is there (or will be at its next wake-up), whatever CPU
            // /proc says it last ran on: a sleeping task keeps reporting the old one.
            let slot = match mask.as_slice() {
                [only] => *only,
                _ => pinned.get(&task.tid).copied().unwrap_or(here),
            };
            s.current.push(slot.0);
            s.masks.push(if mask.is_empty() {
                vec![slot.0]
            } else {
                mask.into_iter().map(|s| s.0).collect()
            });
        }
        self.idle.retain(&s.tids(tasks));
        s
    }

    /// Leaves out the tasks that have not run lately (a launcher waiting for its workers):
    /// policies that map the matrix keep them where they are.
    pub fn leave_idle_out(&self, s: &mut Sampled, tasks: &[ObservedTask], t: f64) {
        let busy: Vec<bool> = s
            .tids(tasks)
            .iter()
            .map(|&tid| !self.idle.is_idle(tid, t))
            .collect();
        s.keep_where(&busy);
    }

    /// The share of a CPU each sampled task used over about the last `window` seconds
    /// ([`IdleTracker::share_lately`]), in `s.live` order.
    pub fn shares_lately(
        &self,
        s: &Sampled,
        tasks: &[ObservedTask],
        t: f64,
        window: f64,
    ) -> Vec<f64> {
        (s.tids(tasks).iter())
            .map(|&tid| self.idle.share_lately(tid, t, window))
            .collect()
    }

    /// CPU seconds task `tid` had used when last sampled (0 if never).
    pub fn cpu_seconds(&self, tid: u32) -> f64 {
        self.cpu_ticks.get(&tid).copied().unwrap_or(0) as f64 / self.ticks_per_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use topology::Machine;

    fn me() -> ObservedTask {
        // SAFETY: gettid and getpid have no preconditions.
        let (tid, pid) = unsafe { (libc::gettid() as u32, libc::getpid() as u32) };
        ObservedTask {
            tid,
            pid,
            comm: "test".into(),
            first_seen: 0.0,
            whole_process: false,
        }
    }

    #[test]
    fn a_pinned_thread_is_where_its_mask_says() {
        let machine = Machine::from_system().unwrap();
        let target = Target::machine(machine);
        let allowed = target.allowed_slots();
        let last = *allowed.last().unwrap();
        // A thread of our own, pinned to the last allowed PU, and one that has ended.
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let os = target.os_cpu(last);
        let worker = std::thread::spawn(move || {
            let mut task = me();
            task.comm = "worker".into();
            crate::actuate::set_affinity(task.tid, &topology::CpuSet::from(os)).unwrap();
            tx.send(task).unwrap();
            done_rx.recv().unwrap();
        });
        let worker_task = rx.recv().unwrap();
        // CPU time of our own, a few clock ticks of it.
        let end = std::time::Instant::now() + std::time::Duration::from_millis(50);
        while std::time::Instant::now() < end {}
        let gone = ObservedTask {
            tid: u32::MAX - 1,
            ..me()
        };
        let tasks = vec![me(), worker_task, gone];
        let mut sampler = Sampler::new(&target);
        let s = sampler.sample(0.5, &CommMatrix::zeros(3), &tasks, &HashMap::new());
        done_tx.send(()).unwrap();
        worker.join().unwrap();
        assert_eq!(s.live, vec![0, 1], "the task that is not there is left out");
        assert_eq!(s.current[1], last.0);
        assert_eq!(s.masks[1], vec![last.0]);
        assert_eq!(
            s.masks[0].len(),
            allowed.len(),
            "the test thread may run anywhere"
        );
        assert!(allowed.contains(&Slot(s.current[0])));
        assert_eq!(s.placements.len(), 2);
        assert!(
            sampler.cpu_seconds(tasks[0].tid) > 0.0,
            "the test has used CPU"
        );
        assert_eq!(sampler.cpu_seconds(12345678), 0.0);
    }

    #[test]
    fn rows_beyond_the_matrix_are_not_sampled() {
        let target = Target::machine(Machine::from_system().unwrap());
        let tasks = vec![me(), me()];
        let s = Sampler::new(&target).sample(0.0, &CommMatrix::zeros(1), &tasks, &HashMap::new());
        assert_eq!(s.live, vec![0]);
    }

    #[test]
    fn keep_where_filters_every_column_alike() {
        let mut s = Sampled {
            live: vec![3, 4, 5],
            current: vec![0, 1, 0],
            masks: vec![vec![0], vec![1], vec![0, 1]],
            placements: Vec::new(),
        };
        s.keep_where(&[true, false, true]);
        assert_eq!(s.live, vec![3, 5]);
        assert_eq!(s.current, vec![0, 0]);
        assert_eq!(s.masks, vec![vec![0], vec![0, 1]]);
    }

    #[test]
    fn a_task_that_never_ran_is_left_out_once_its_window_passed() {
        let target = Target::machine(Machine::from_system().unwrap());
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let task = ObservedTask {
            tid: sleeper.id(),
            pid: sleeper.id(),
            comm: "sleep".into(),
            first_seen: 0.0,
            whole_process: false,
        };
        let tasks = vec![task, me()];
        let mut sampler = Sampler::new(&target);
        let m = CommMatrix::zeros(2);
        let mut kept = Vec::new();
        for t in [0.0, crate::idle::WINDOW_S + 0.5] {
            // The test thread burns some CPU between the two samples.
            let end = std::time::Instant::now() + std::time::Duration::from_millis(100);
            while std::time::Instant::now() < end {}
            let mut s = sampler.sample(t, &m, &tasks, &HashMap::new());
            sampler.leave_idle_out(&mut s, &tasks, t);
            kept.push(s.live);
        }
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
        assert_eq!(
            kept[1],
            vec![1],
            "the sleeper is idle, the test thread ran: {kept:?}"
        );
    }
}
