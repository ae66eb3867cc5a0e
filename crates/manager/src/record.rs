//! Step 4 of the loop: what the report keeps of each tick (event rates, a matrix snapshot a
//! second, placements, decisions), the live status line, and the run's summary at the end.

use crate::decide::Choice;
use crate::observer::{Exit, Observer};
use crate::procs;
use crate::sample::{Sampled, Sampler};
use matrix::CommMatrix;
use rundata::{Decision, RunData, RunInfo, Sample, Snapshot, TaskRecord};
use std::time::Instant;

/// What the summary needs that the loop's parts hold.
pub struct Closing {
    /// The program's command line, for the report.
    pub command: Vec<String>,
    /// The policy's name ([`crate::policy::Policy::name`]).
    pub policy: String,
    /// How the machine model was obtained, and its size.
    pub machine_description: String,
    /// PU OS indexes the program could be placed on.
    pub allowed_pus: Vec<u32>,
    /// The controller's threshold, a fraction (0.05 = 5 %).
    pub threshold: f64,
    /// Pages moved and not moved with --move-pages.
    pub pages: (u64, u64),
    /// The loop's own notes, then the policy's (the observer's are added here).
    pub notes: Vec<String>,
}

/// What the report keeps, gathered tick by tick on the run's clock (seconds since
/// [`Recorder::new`]), with huddle's own CPU time from then.
pub struct Recorder {
    start: Instant,
    started_unix: f64,
    huddle_cpu0: f64,
    data: RunData,
    last_snapshot: Option<f64>,
    events: u64,
    /// Time and predicted gain of the last migration.
    last_remap: Option<(f64, f64)>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    /// Starts the run's clock.
    pub fn new() -> Recorder {
        Recorder {
            start: Instant::now(),
            started_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            huddle_cpu0: procs::own_cpu_seconds(),
            data: RunData::default(),
            last_snapshot: None,
            events: 0,
            last_remap: None,
        }
    }

    /// Seconds since the run started.
    pub fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Events processed outside a tick (after the last one).
    pub fn count_events(&mut self, events: u64) {
        self.events += events;
    }

    /// One tick at `t`: `events` processed in an interval of `interval_s`, the snapshot's
    /// `matrix` (kept once a second), and where the live tasks were.
    pub fn tick(
        &mut self,
        t: f64,
        events: u64,
        lost: u64,
        interval_s: f64,
        matrix: &CommMatrix,
        s: &Sampled,
    ) {
        self.events += events;
        self.data.placements.extend(s.placements.iter().cloned());
        self.data.samples.push(Sample {
            t,
            events,
            lost,
            events_per_s: events as f64 / interval_s.max(1e-3),
            tasks: s.live.len(),
        });
        if self.last_snapshot.is_none_or(|last| t - last >= 1.0) && matrix.n() > 0 {
            self.data.snapshots.push(Snapshot {
                t,
                matrix: matrix.symmetrized().to_rows(),
            });
            self.last_snapshot = Some(t);
        }
    }

    /// A judged proposal for the live tasks `live` (snapshot indices).
    pub fn decision(&mut self, t: f64, live: &[usize], c: &Choice) {
        if c.migrate {
            self.last_remap = Some((t, c.gain));
        }
        self.data.decisions.push(Decision {
            t,
            interval_ms: c.interval_ms,
            action: if c.migrate { "migrate" } else { "keep" }.into(),
            cost_current: c.cost_now,
            cost_new: c.cost_new,
            predicted_gain: c.gain,
            mapping: if c.migrate {
                &c.proposed_os
            } else {
                &c.current_os
            }
            .iter()
            .map(|os| os.0)
            .collect(),
            tasks: live.to_vec(),
            reason: c.reason.clone(),
        });
    }

    /// The one-line live status (stderr, rewritten in place).
    pub fn status_line(&self, t: f64, tasks: usize, events_per_s: f64) -> String {
        let remap = self
            .last_remap
            .map_or("no remap yet".to_string(), |(at, g)| {
                format!(
                    "last remap {:.1}s ago ({:.0}% predicted gain)",
                    t - at,
                    g * 100.0
                )
            });
        format!("huddle: {tasks} tasks, {events_per_s:.0} events/s, {remap}")
    }

    /// Everything the report needs, once the loop is over and the observer flushed: its
    /// last snapshot, each task's CPU time from the sampler, and the summary.
    pub fn finish(
        self,
        obs: &mut dyn Observer,
        sampler: &Sampler,
        exit: Option<Exit>,
        closing: Closing,
    ) -> RunData {
        let (matrix, tasks) = obs.snapshot();
        let mpi_ranks = obs.mpi_ranks();
        let duration = self.elapsed();
        let mut data = self.data;
        data.tasks = tasks
            .iter()
            .enumerate()
            .map(|(i, task)| TaskRecord {
                index: i,
                tid: task.tid,
                pid: task.pid,
                comm: task.comm.clone(),
                first_seen_s: task.first_seen,
                last_seen_s: duration,
                cpu_s: sampler.cpu_seconds(task.tid),
                mpi_rank: mpi_ranks.get(i).copied().flatten(),
            })
            .collect();
        data.matrix = Some(matrix.symmetrized());
        data.matrix_faults = obs.fault_matrix().map(|m| m.symmetrized());
        data.matrix_sources = obs.cell_sources().map(|rows| {
            rows.into_iter()
                .map(|r| r.into_iter().map(String::from).collect())
                .collect()
        });
        let mut notes = closing.notes;
        notes.extend(obs.notes());
        data.info = RunInfo {
            schema: rundata::SCHEMA.into(),
            command: closing.command,
            pid: obs.pid(),
            started_unix: self.started_unix,
            duration_s: duration,
            exit_code: match exit {
                Some(Exit::Code(c)) => Some(c),
                _ => None,
            },
            exit_signal: match exit {
                Some(Exit::Signal(s)) => Some(s),
                _ => None,
            },
            policy: closing.policy,
            machine: closing.machine_description,
            allowed_pus: closing.allowed_pus,
            threshold: closing.threshold,
            huddle_cpu_s: procs::own_cpu_seconds() - self.huddle_cpu0,
            agent_cpu_s: obs.agent_cpu_s(),
            rearmed_pages: obs.rearmed_pages(),
            pages_moved: closing.pages.0,
            pages_not_moved: closing.pages.1,
            target_cpu_s: data.tasks.iter().map(|t| t.cpu_s).sum(),
            detection_source: obs.source(),
            events: self.events,
            lost_events: obs.lost(),
            notes,
        };
        data
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use topology::OsCpu;

    fn choice(migrate: bool) -> Choice {
        Choice {
            migrate,
            slots: vec![1, 0],
            only_moved: false,
            current_os: vec![OsCpu(0), OsCpu(1)],
            proposed_os: vec![OsCpu(1), OsCpu(0)],
            cost_now: 4.0,
            cost_new: 1.0,
            gain: 0.75,
            reason: "why".into(),
            interval_ms: 150,
        }
    }

    fn sampled(n: usize) -> Sampled {
        Sampled {
            live: (0..n).collect(),
            current: vec![0; n],
            masks: vec![vec![0]; n],
            placements: vec![rundata::Placement {
                t: 0.0,
                task: 0,
                pu: 0,
            }],
        }
    }

    #[test]
    fn a_snapshot_is_kept_once_a_second_and_every_tick_is_sampled() {
        let mut r = Recorder::new();
        let m = CommMatrix::zeros(2);
        for t in [0.1, 0.5, 1.0, 1.2, 2.3] {
            r.tick(t, 10, 0, 0.1, &m, &sampled(2));
        }
        // An empty snapshot (no task yet) is not kept.
        r.tick(3.5, 0, 0, 0.1, &CommMatrix::zeros(0), &sampled(0));
        let times: Vec<f64> = r.data.snapshots.iter().map(|s| s.t).collect();
        assert_eq!(times, vec![0.1, 1.2, 2.3]);
        assert_eq!(r.data.samples.len(), 6);
        assert_eq!(r.data.samples[0].events_per_s, 100.0);
        assert_eq!(r.data.samples[0].tasks, 2);
        assert_eq!(r.data.placements.len(), 6);
        assert_eq!(r.events, 50);
    }

    #[test]
    fn a_decision_records_the_mapping_it_leaves_live() {
        let mut r = Recorder::new();
        assert!(r.status_line(0.5, 2, 10.0).contains("no remap yet"));
        r.decision(1.0, &[3, 4], &choice(false));
        r.decision(2.0, &[3, 4], &choice(true));
        let d = &r.data.decisions;
        assert_eq!(
            (d[0].action.as_str(), d[0].mapping.clone()),
            ("keep", vec![0, 1])
        );
        assert_eq!(
            (d[1].action.as_str(), d[1].mapping.clone()),
            ("migrate", vec![1, 0])
        );
        assert_eq!(d[1].tasks, vec![3, 4]);
        assert_eq!(d[1].interval_ms, 150);
        let line = r.status_line(2.5, 2, 10.0);
        assert!(
            line.contains("last remap 0.5s ago (75% predicted gain)"),
            "{line}"
        );
    }
}
