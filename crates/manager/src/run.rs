//! The loop: observe, propose, decide, act, record.

use crate::actuate::{self, PinError};
use crate::control::{Controller, Verdict};
use crate::idle::IdleTracker;
use crate::policy::Policy;
use crate::procs;
use mapping::Target;
use matrix::CommMatrix;
use report::{Decision, Placement, RunData, RunInfo, Sample, Snapshot, TaskRecord};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// One task as the observer knows it, in the order tasks appeared.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskInfo {
    pub tid: u32,
    pub pid: u32,
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
    Code(i32),
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
    fn snapshot(&self) -> (CommMatrix, Vec<TaskInfo>);
    /// Ages the matrix after a migration (M -= M >> 2) so new behaviour shows quickly.
    fn age(&mut self);
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
}

/// Whose program it is: what huddle's signals mean, and what is left when huddle stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// `huddle run`: huddle started the program. SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to
    /// huddle are passed on to it (see [`install_signal_forwarding`]); the loop ends when the
    /// program does, and its last placement stays until then.
    Launched,
    /// `huddle attach`: the program is someone else's. It is never sent a signal; SIGINT,
    /// SIGTERM, SIGHUP and SIGQUIT sent to huddle end the loop (see
    /// [`install_detach_signals`]), and every affinity mask huddle changed is put back (see
    /// [`crate::ledger`]) however the loop ends.
    Attached,
}

/// Why the loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The program ended.
    Ended,
    /// `max_seconds` passed.
    TimeUp,
    /// An attached program was let go because huddle got this signal.
    Signal(i32),
}

/// Options of one managed run.
pub struct Config {
    pub ownership: Ownership,
    pub policy: Box<dyn Policy>,
    pub controller: Controller,
    /// Pages per task moved per interval with --move-pages (0 = off). Only used when the
    /// allowed PUs span several NUMA nodes.
    pub page_budget: usize,
    /// One-line live status on stderr.
    pub status_line: bool,
    /// Stop managing after this long even if the program runs on (attach mode).
    pub max_seconds: Option<f64>,
    /// Communication (matrix total over live tasks) required before the first decision:
    /// the first faults are mostly first-touch initialisation, not the program's pattern.
    pub min_traffic: f64,
    pub command: Vec<String>,
    pub machine_description: String,
}

/// Default for [`Config::min_traffic`].
pub const DEFAULT_MIN_TRAFFIC: f64 = 64.0;
/// ... and at least this much per mapped task: with less, chance decides which of equally
/// strong links look weakest. pipeline x8 threads, 8 runs each, alternating (2026-11-25):
/// at 18 per task the first remap came at 1.02-1.13 s, one of them wrong (two chain links cut)
/// and never mended; at 12, at 0.73-0.92 s, three wrong and all mended by 1.82 s (first
/// correct remap: median 0.87 s). A wrong early remap still beats floating (about 3.5 links
/// cut on average), so acting sooner wins. (The mapper's own share of wrong cuts was mended in
/// crates/mapping/src/drb.rs: its bisection grew from the heaviest stage.)
pub const MIN_TRAFFIC_PER_TASK: f64 = 12.0;

/// A pending signal huddle should pass on to the program (set from a signal handler).
pub static FORWARD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
/// A signal that tells huddle to let an attached program go (set from a signal handler).
static DETACH: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Live tasks of the snapshot: their indices in the matrix.
fn live(matrix: &CommMatrix, tasks: &[TaskInfo]) -> Vec<usize> {
    (0..tasks.len())
        .filter(|&i| i < matrix.n())
        .filter(|&i| {
            std::path::Path::new(&format!("/proc/{}/task/{}", tasks[i].pid, tasks[i].tid)).exists()
        })
        .collect()
}

/// Keeps the items of `v` whose entry in `keep` is true.
fn keep_where<T>(v: &mut Vec<T>, keep: &[bool]) {
    let mut k = keep.iter();
    v.retain(|_| *k.next().unwrap_or(&true));
}

/// The matrix restricted to the tasks `idx`, symmetrized.
fn restrict(matrix: &CommMatrix, idx: &[usize]) -> CommMatrix {
    let mut sub = CommMatrix::zeros(idx.len());
    for (a, &i) in idx.iter().enumerate() {
        for (b, &j) in idx.iter().enumerate() {
            if a != b {
                sub.set(a, b, matrix.get(i, j));
            }
        }
    }
    sub.symmetrized()
}

/// Runs the loop until the program ends (or `max_seconds`), then returns everything the
/// report needs. Acting failures (a thread that exits, EPERM) are recorded, never fatal.
pub fn manage(obs: &mut dyn Observer, target: &Target, cfg: Config) -> RunData {
    manage_until(obs, target, cfg).0
}

/// [`manage`], also saying why the loop ended. With [`Ownership::Attached`] the program's
/// affinity masks are as they were before (see [`crate::ledger`]) when this returns.
pub fn manage_until(obs: &mut dyn Observer, target: &Target, mut cfg: Config) -> (RunData, Stop) {
    let start = Instant::now();
    let mut ledger = match cfg.ownership {
        Ownership::Launched => crate::ledger::Ledger::launched(),
        Ownership::Attached => crate::ledger::Ledger::attached(obs.pid()),
    };
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let huddle_cpu0 = procs::own_cpu_seconds();
    let tick = procs::ticks_per_second();
    let mut data = RunData::default();
    let mut pinned: HashMap<u32, usize> = HashMap::new(); // tid -> slot
                                                          // The previous interval's proposal: (task ids, slots).
    let mut last_proposal: Option<(Vec<u32>, Vec<usize>)> = None;
    let mut cpu_ticks: HashMap<u32, u64> = HashMap::new();
    let mut idle = IdleTracker::default();
    let mut total_events = 0u64;
    let mut last_snapshot = -1.0f64;
    let mut last_remap: Option<(f64, f64)> = None;
    let mut notes: Vec<String> = Vec::new();
    let os_to_slot: HashMap<u32, usize> = (0..target.num_pus())
        .map(|g| (target.os_index(g), g))
        .collect();
    let nodes: std::collections::BTreeSet<(usize, Option<u32>)> = target
        .allowed_pus()
        .into_iter()
        .map(|g| (target.node_of(g), target.pu(g).numa))
        .collect();
    let mut mover = (cfg.page_budget > 0 && nodes.len() > 1)
        .then(|| crate::pages::PageMover::new(cfg.page_budget));
    if cfg.page_budget > 0 && mover.is_none() {
        notes.push(
            "--move-pages: the allowed PUs share one NUMA node, so no page has to move".into(),
        );
    }
    let mut stop = Stop::Ended;
    let exit = loop {
        // Events are drained after every slice; a slice ends early when a buffer fills, and
        // lasts at most 100 ms so exits and signals are handled promptly.
        let wake = Instant::now() + Duration::from_millis(cfg.controller.interval_ms);
        let mut exit = None;
        let mut events = 0;
        let mut detach = 0;
        while Instant::now() < wake && exit.is_none() {
            match cfg.ownership {
                Ownership::Launched => forward_signal(obs.pid()),
                Ownership::Attached => {
                    detach = DETACH.swap(0, std::sync::atomic::Ordering::SeqCst);
                    if detach != 0 {
                        break;
                    }
                }
            }
            if let Some(paused) = detect::signals::take_pause() {
                obs.set_paused(paused);
            }
            exit = obs.try_wait();
            if exit.is_some() || !obs.alive() {
                // Ended: no wait for more events (what is left is drained below).
                break;
            }
            let left = wake.saturating_duration_since(Instant::now());
            obs.wait(left.min(Duration::from_millis(100)));
            events += obs.poll();
        }
        events += obs.poll();
        if detach != 0 {
            // No decision after the signal: the program is let go as it is.
            stop = Stop::Signal(detach);
            total_events += events;
            break None;
        }
        let t = start.elapsed().as_secs_f64();
        let interval_s = cfg.controller.interval_ms as f64 / 1000.0;
        total_events += events;
        let (matrix, tasks) = obs.snapshot();
        let mut live_idx = live(&matrix, &tasks);

        // Where each live task runs now, and where it may run (its affinity mask).
        let mut current = Vec::with_capacity(live_idx.len());
        let mut masks = Vec::with_capacity(live_idx.len());
        for &i in &live_idx {
            let task = &tasks[i];
            // A whole process's stat sums its threads' CPU time (and names its leader's CPU).
            let stat_path = if task.whole_process {
                format!("/proc/{}/stat", task.pid)
            } else {
                format!("/proc/{}/task/{}/stat", task.pid, task.tid)
            };
            let stat = procs::read_stat(std::path::Path::new(&stat_path));
            if let Some(st) = &stat {
                cpu_ticks.insert(task.tid, st.cpu_ticks);
                idle.observe(task.tid, t, st.cpu_ticks as f64 / tick);
                data.placements.push(Placement {
                    t,
                    task: i,
                    pu: st.processor,
                });
            }
            let here = stat
                .and_then(|s| os_to_slot.get(&s.processor).copied())
                .unwrap_or(0);
            let mut mask: Vec<usize> = actuate::get_affinity(task.tid)
                .unwrap_or_default()
                .iter()
                .filter_map(|os| os_to_slot.get(os).copied())
                .collect();
            // A task pinned to one PU is there (or will be at its next wake-up), whatever CPU
            // /proc says it last ran on: a sleeping task keeps reporting the old one.
            let slot = match mask.as_slice() {
                [only] => *only,
                _ => pinned.get(&task.tid).copied().unwrap_or(here),
            };
            current.push(slot);
            if mask.is_empty() {
                mask.push(slot);
            }
            masks.push(mask);
        }
        data.samples.push(Sample {
            t,
            events,
            lost: obs.lost(),
            events_per_s: events as f64 / interval_s.max(1e-3),
            tasks: live_idx.len(),
        });
        if t - last_snapshot >= 1.0 && matrix.n() > 0 {
            data.snapshots.push(Snapshot {
                t,
                matrix: matrix.symmetrized().to_rows(),
            });
            last_snapshot = t;
        }

        // Policies that map the matrix leave idle tasks out (they keep the PUs they have).
        let live_tids: Vec<u32> = live_idx.iter().map(|&i| tasks[i].tid).collect();
        idle.retain(&live_tids);
        if cfg.policy.needs_traffic() {
            let busy: Vec<bool> = live_tids.iter().map(|&tid| !idle.is_idle(tid, t)).collect();
            keep_where(&mut live_idx, &busy);
            keep_where(&mut current, &busy);
            keep_where(&mut masks, &busy);
        }
        let sub = restrict(&matrix, &live_idx);
        let live_tasks: Vec<TaskInfo> = live_idx.iter().map(|&i| tasks[i].clone()).collect();
        let needed = cfg
            .min_traffic
            .max(MIN_TRAFFIC_PER_TASK * live_idx.len() as f64);
        let enough = !cfg.policy.needs_traffic() || sub.total() >= needed;
        let proposal = if enough && !live_idx.is_empty() {
            let ctx = crate::policy::Context {
                matrix: &sub,
                target,
                current: &current,
                tasks: &live_tasks,
            };
            cfg.policy.propose(&ctx)
        } else {
            None
        };
        if let Some(proposal) = proposal {
            let cost_now = expected_cost(&sub, target, &masks);
            let cost_new = mapping::cost::evaluate_matrix(&sub, target, &proposal.slots).cost;
            let cur_os: Vec<u32> = current.iter().map(|&g| target.os_index(g)).collect();
            let new_os: Vec<u32> = proposal.slots.iter().map(|&g| target.os_index(g)).collect();
            let interval_ms = cfg.controller.interval_ms;
            // The last interval's proposal, costed on this matrix (same tasks only).
            let live_tids: Vec<u32> = live_idx.iter().map(|&i| tasks[i].tid).collect();
            let previous_cost = match &last_proposal {
                Some((tids, slots)) if *tids == live_tids => {
                    Some(mapping::cost::evaluate_matrix(&sub, target, slots).cost)
                }
                _ => None,
            };
            last_proposal = Some((live_tids, proposal.slots.clone()));
            let pus = target.allowed_pus().len();
            let new_masks: Vec<[usize; 1]> = proposal.slots.iter().map(|&s| [s]).collect();
            let stacked_now = crate::control::stacked(&masks, pus)
                .filter(|_| crate::control::stacked(&new_masks, pus).is_none());
            let mut reason = proposal.reason.clone();
            let verdict = if let Some((slot, k)) = stacked_now {
                // A repair, not an optimisation: no threshold, no confirmation interval.
                reason = format!(
                    "{k} busy tasks are pinned to PU {} while a balanced placement has at most {}: rebalanced ({})",
                    target.os_index(slot),
                    live_idx.len().div_ceil(pus.max(1)),
                    proposal.reason
                );
                cfg.controller.accept(t, &cur_os);
                Verdict::Migrate {
                    gain: (cost_now - cost_new) / cost_now.max(1e-12),
                }
            } else if !proposal.self_judged
                && cost_new <= cost_now * (1.0 + 1e-9)
                && (cost_now - cost_new) < cfg.controller.threshold * cost_now
                && crate::control::floating_to_pin(&masks, &proposal.slots, pus)
            {
                // Below the threshold the controller would keep them floating; pinned, they
                // keep their caches ([`crate::control::floating_to_pin`]).
                reason = format!(
                    "{} busy tasks floated over the PUs: pinned one per PU at no more \
                     communication cost ({})",
                    live_idx.len(),
                    proposal.reason
                );
                cfg.controller.accept(t, &cur_os);
                Verdict::Migrate {
                    gain: (cost_now - cost_new) / cost_now.max(1e-12),
                }
            } else if !proposal.self_judged {
                cfg.controller
                    .decide(t, &cur_os, cost_now, &new_os, cost_new, previous_cost)
            } else if new_os == cur_os
                && (proposal.only_moved
                    || masks
                        .iter()
                        .zip(&proposal.slots)
                        .all(|(m, &s)| m.as_slice() == [s]))
            {
                // Live: where the tasks run (SIMMer moves single ranks), or, for a placement
                // applied as chosen, every task pinned there.
                Verdict::Keep {
                    reason: "the policy's placement is already live".into(),
                }
            } else {
                cfg.controller.accept(t, &cur_os);
                Verdict::Migrate {
                    gain: (cost_now - cost_new) / cost_now.max(1e-12),
                }
            };
            let (action, gain, reason) = match verdict {
                Verdict::Migrate { gain } => {
                    for (k, &i) in live_idx.iter().enumerate() {
                        let task = &tasks[i];
                        // SIMMer moves only the tasks it named; the others keep running
                        // where the scheduler puts them.
                        if proposal.only_moved && proposal.slots[k] == current[k] {
                            continue;
                        }
                        let pinned_now = if task.whole_process {
                            ledger.pin_process(task.pid, &[new_os[k]])
                        } else {
                            ledger.pin_thread(task.pid, task.tid, &[new_os[k]])
                        };
                        match pinned_now {
                            Ok(()) => {
                                pinned.insert(task.tid, proposal.slots[k]);
                            }
                            Err(PinError::Gone(_)) => {}
                            Err(e) => push_note(&mut notes, e.to_string()),
                        }
                        if let (Some(m), Some(node)) =
                            (mover.as_mut(), numa_os_index(target, proposal.slots[k]))
                        {
                            let ranges = if task.whole_process {
                                actuate::private_ranges(task.pid)
                            } else {
                                crate::pages::ranges_of(&obs.owned_pages(i), page_size())
                            };
                            m.follow(task.tid, task.pid, node, ranges);
                        }
                    }
                    obs.age();
                    last_remap = Some((t, gain));
                    ("migrate", gain, reason)
                }
                Verdict::Keep { reason } => {
                    ("keep", (cost_now - cost_new) / cost_now.max(1e-12), reason)
                }
            };
            data.decisions.push(Decision {
                t,
                interval_ms,
                action: action.into(),
                cost_current: cost_now,
                cost_new,
                predicted_gain: gain,
                mapping: if action == "migrate" { new_os } else { cur_os },
                tasks: live_idx.clone(),
                reason,
            });
        } else if !enough {
            cfg.controller.filling(sub.total());
        } else {
            cfg.controller.hold();
        }
        if let Some(m) = mover.as_mut() {
            for e in m.step() {
                push_note(&mut notes, e);
            }
        }
        if cfg.status_line {
            let remap = last_remap.map_or("no remap yet".to_string(), |(at, g)| {
                format!(
                    "last remap {:.1}s ago ({:.0}% predicted gain)",
                    t - at,
                    g * 100.0
                )
            });
            eprint!(
                "\rhuddle: {} tasks, {:.0} events/s, {remap}\x1b[K",
                live_idx.len(),
                events as f64 / interval_s.max(1e-3)
            );
        }
        if let Some(e) = exit {
            break Some(e);
        }
        if !obs.alive() {
            break obs.try_wait();
        }
        if cfg.max_seconds.is_some_and(|m| t >= m) {
            stop = Stop::TimeUp;
            break None;
        }
    };
    if cfg.status_line {
        eprintln!();
    }
    if cfg.ownership == Ownership::Attached {
        let restored = ledger.restore();
        let why = match stop {
            Stop::Ended => "the program ended".to_string(),
            Stop::TimeUp => "--seconds passed".to_string(),
            Stop::Signal(s) => format!("huddle got {}", signal_name(s)),
        };
        push_note(
            &mut notes,
            format!(
                "detached ({why}): the program was not signalled; {} of the {} threads huddle pinned had their affinity mask put back{}",
                restored.threads,
                ledger.changed(),
                if ledger.changed() > restored.threads {
                    " (the others had ended, or had set their own mask since)"
                } else {
                    ""
                }
            ),
        );
        for f in restored.failures {
            push_note(&mut notes, format!("affinity not put back: {f}"));
        }
    }

    total_events += obs.flush();
    let (matrix, tasks) = obs.snapshot();
    let mpi_ranks = obs.mpi_ranks();
    let duration = start.elapsed().as_secs_f64();
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
            cpu_s: cpu_ticks.get(&task.tid).copied().unwrap_or(0) as f64 / tick,
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
    cfg.policy.finish();
    notes.extend(cfg.policy.notes());
    notes.extend(obs.notes());
    data.info = RunInfo {
        schema: report::SCHEMA.into(),
        command: cfg.command.clone(),
        pid: obs.pid(),
        started_unix,
        duration_s: duration,
        exit_code: match exit {
            Some(Exit::Code(c)) => Some(c),
            _ => None,
        },
        exit_signal: match exit {
            Some(Exit::Signal(s)) => Some(s),
            _ => None,
        },
        policy: cfg.policy.name(),
        machine: cfg.machine_description.clone(),
        allowed_pus: target
            .allowed_pus()
            .iter()
            .map(|&g| target.os_index(g))
            .collect(),
        threshold: cfg.controller.threshold,
        huddle_cpu_s: procs::own_cpu_seconds() - huddle_cpu0,
        agent_cpu_s: obs.agent_cpu_s(),
        rearmed_pages: obs.rearmed_pages(),
        pages_moved: mover.as_ref().map_or(0, |m| m.moved),
        pages_not_moved: mover.as_ref().map_or(0, |m| m.failed),
        target_cpu_s: data.tasks.iter().map(|t| t.cpu_s).sum(),
        detection_source: obs.source(),
        events: total_events,
        lost_events: obs.lost(),
        notes,
    };
    (data, stop)
}

/// "SIGTERM" for 15, and so on for the signals huddle handles.
pub fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGQUIT => "SIGQUIT".into(),
        other => format!("signal {other}"),
    }
}

/// The expected communication cost of tasks that may each run anywhere in their mask: for
/// each pair, the mean distance over the two masks, as if the scheduler spread each task
/// uniformly over its mask. With no more tasks than PUs in their masks, the mean leaves out
/// the pairs where both would share one PU: the scheduler does not stack two busy tasks while
/// a PU is free, and counting that chance as cheap communication made floating look cheaper
/// than any pinning (15/16 of it on 16 PUs; bench/device, 2026-11-25). A task pinned to one PU
/// has a one-PU mask, so for a pinned program this is the shared cost model's cost. The mean
/// is computed once per distinct pair of masks (most unpinned tasks share one).
pub fn expected_cost(m: &CommMatrix, target: &Target, masks: &[Vec<usize>]) -> f64 {
    let pus: std::collections::BTreeSet<usize> = masks.iter().flatten().copied().collect();
    let spread = masks.len() <= pus.len();
    let mut cache: HashMap<(&[usize], &[usize]), f64> = HashMap::new();
    let mut total = 0.0;
    for i in 0..m.n() {
        for j in i + 1..m.n() {
            let w = (m.get(i, j) + m.get(j, i)) / 2.0;
            if w == 0.0 {
                continue;
            }
            let key = (masks[i].as_slice(), masks[j].as_slice());
            let d = *cache.entry(key).or_insert_with(|| {
                let all = || {
                    key.0
                        .iter()
                        .flat_map(|&a| key.1.iter().map(move |&b| (a, b)))
                };
                let apart = all().filter(|(a, b)| a != b).count();
                let (sum, count): (f64, usize) = if spread && apart > 0 {
                    let sum = all()
                        .filter(|(a, b)| a != b)
                        .map(|(a, b)| target.distance(a, b))
                        .sum();
                    (sum, apart)
                } else {
                    let sum = all().map(|(a, b)| target.distance(a, b)).sum();
                    (sum, key.0.len() * key.1.len())
                };
                sum / count as f64
            });
            total += w * d;
        }
    }
    total
}

fn push_note(notes: &mut Vec<String>, note: String) {
    if !notes.contains(&note) {
        notes.push(note);
    }
}

/// OS index of the NUMA node of a slot (None without NUMA information).
fn numa_os_index(target: &Target, slot: usize) -> Option<i32> {
    let node = target.pu(slot).numa?;
    let m = &target.machines()[target.node_of(slot)];
    m.numa_nodes.get(node as usize).map(|n| n.os_index as i32)
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64
}

/// Passes a signal huddle received (from kill, not from the terminal) on to the program.
fn forward_signal(pid: u32) {
    let sig = FORWARD.swap(0, std::sync::atomic::Ordering::SeqCst);
    if sig != 0 {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            libc::kill(pid as libc::pid_t, sig);
        }
    }
}

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // A signal the terminal sent reached the whole foreground process group, the program
    // included; only signals sent to huddle alone (kill, si_code <= 0) are passed on.
    // SAFETY: the kernel passes a valid siginfo to SA_SIGINFO handlers.
    let from_user = info.is_null() || unsafe { (*info).si_code } <= 0;
    if from_user {
        FORWARD.store(sig, std::sync::atomic::Ordering::SeqCst);
    }
}

extern "C" fn on_detach(sig: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // From a terminal or from kill alike: the program is not ours to signal.
    DETACH.store(sig, std::sync::atomic::Ordering::SeqCst);
}

type Handler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

fn install(handler: Handler) {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: the handler only stores into an atomic, which is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Installs the forwarding handler for SIGINT, SIGTERM, SIGHUP and SIGQUIT
/// ([`Ownership::Launched`]).
pub fn install_signal_forwarding() {
    install(on_signal);
}

/// Makes SIGINT, SIGTERM, SIGHUP and SIGQUIT end the loop of [`Ownership::Attached`]
/// instead of huddle: it then puts the program's masks back and returns. Install it before
/// anything else, so that a signal during start-up is not lost either.
pub fn install_detach_signals() {
    install(on_detach);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idle;
    use std::process::{Child, Command};
    use topology::Machine;

    /// Real processes as tasks, with a fixed matrix: checks the loop and the actuation, not
    /// detection (which has its own tests).
    struct Fixed {
        pids: Vec<u32>,
        /// Our own children among them (the test reaps them).
        children: Vec<Child>,
        matrix: CommMatrix,
        aged: usize,
        /// Tasks whose owned pages the loop asked for.
        asked: std::cell::RefCell<Vec<usize>>,
    }

    impl Fixed {
        fn new(children: Vec<Child>, matrix: CommMatrix) -> Fixed {
            let mut f = Fixed::foreign(children.iter().map(Child::id).collect(), matrix);
            f.children = children;
            f
        }

        /// Processes that are not ours.
        fn foreign(pids: Vec<u32>, matrix: CommMatrix) -> Fixed {
            Fixed {
                pids,
                children: Vec::new(),
                matrix,
                aged: 0,
                asked: Default::default(),
            }
        }
    }

    /// Our children end with the test, panics included.
    impl Drop for Fixed {
        fn drop(&mut self) {
            for c in &mut self.children {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    impl Observer for Fixed {
        fn pid(&self) -> u32 {
            self.pids[0]
        }
        fn poll(&mut self) -> u64 {
            10
        }
        fn snapshot(&self) -> (CommMatrix, Vec<TaskInfo>) {
            let tasks = self
                .pids
                .iter()
                .map(|&p| TaskInfo {
                    tid: p,
                    pid: p,
                    comm: "sleep".into(),
                    first_seen: 0.0,
                    whole_process: false,
                })
                .collect();
            (self.matrix.clone(), tasks)
        }
        fn age(&mut self) {
            self.aged += 1;
        }
        fn owned_pages(&self, task: usize) -> Vec<u64> {
            self.asked.borrow_mut().push(task);
            // Up to 32 pages of the task's private memory.
            let page = page_size();
            actuate::private_ranges(self.pids[task])
                .iter()
                .flat_map(|&(a, b)| (a..b).step_by(page as usize))
                .take(32)
                .collect()
        }
        fn lost(&self) -> u64 {
            0
        }
        fn source(&self) -> String {
            "fixed matrix (test)".into()
        }
        fn notes(&self) -> Vec<String> {
            Vec::new()
        }
        fn try_wait(&mut self) -> Option<Exit> {
            None
        }
        fn alive(&self) -> bool {
            true
        }
    }

    #[test]
    fn floating_tasks_cost_the_mean_over_their_masks() {
        let target = Target::machine(Machine::from_synthetic("pack:1 l2:2 core:1 pu:1").unwrap());
        // The two PUs have their own L2s and share the package.
        let d = target.distance(0, 1);
        assert_eq!(target.level(0, 1), topology::Level::Package);
        let mut m = CommMatrix::zeros(2);
        m.set(0, 1, 10.0);
        m.set(1, 0, 10.0);
        // Pinned apart, pinned together, both floating over both PUs: two busy tasks on two
        // PUs run apart, as if pinned apart.
        assert_eq!(expected_cost(&m, &target, &[vec![0], vec![1]]), 10.0 * d);
        assert_eq!(expected_cost(&m, &target, &[vec![1], vec![1]]), 0.0);
        assert_eq!(
            expected_cost(&m, &target, &[vec![0, 1], vec![0, 1]]),
            10.0 * d
        );
        // Three tasks on two PUs: two of them share a PU part of the time.
        let mut three = CommMatrix::zeros(3);
        three.set(0, 1, 10.0);
        three.set(1, 0, 10.0);
        let all = vec![0, 1];
        assert_eq!(
            expected_cost(&three, &target, &[all.clone(), all.clone(), all]),
            10.0 * d / 2.0
        );
        // Equal to the shared cost model for single-PU masks.
        let shared = mapping::cost::evaluate_matrix(&m, &target, &[0, 1]).cost;
        assert_eq!(expected_cost(&m, &target, &[vec![0], vec![1]]), shared);
    }

    /// The `comm` policy with defaults, stopping after `seconds`.
    fn comm_config(seconds: f64) -> Config {
        Config {
            ownership: Ownership::Launched,
            policy: crate::policy::parse("comm", 1).unwrap(),
            controller: Controller::default(),
            page_budget: 0,
            status_line: false,
            max_seconds: Some(seconds),
            min_traffic: DEFAULT_MIN_TRAFFIC,
            command: vec!["sleep".into()],
            machine_description: "this machine".into(),
        }
    }

    /// `n` idle child processes standing in for a program's tasks.
    fn sleepers(n: usize) -> Vec<Child> {
        (0..n)
            .map(|_| Command::new("sleep").arg("30").spawn().unwrap())
            .collect()
    }

    /// `n` busy child processes (a shell loop each).
    fn spinners(n: usize) -> Vec<Child> {
        (0..n)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .spawn()
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn idle_tasks_are_left_out_of_the_mapping() {
        let machine = Machine::from_system().unwrap();
        let target = Target::machine(machine);
        // Task 0 sleeps (a launcher waiting for its workers); tasks 1 and 2 run.
        let mut children = sleepers(1);
        children.extend(spinners(2));
        // The sleeper has the heaviest traffic (it initialised everyone's memory).
        let mut m = CommMatrix::zeros(3);
        for (a, b, w) in [(0, 1, 500.0), (0, 2, 500.0), (1, 2, 100.0)] {
            m.set(a, b, w);
            m.set(b, a, w);
        }
        let mut obs = Fixed::new(children, m);
        let data = manage(&mut obs, &target, comm_config(2.2));
        let late: Vec<&Decision> = data
            .decisions
            .iter()
            .filter(|d| d.t > idle::WINDOW_S + 0.2)
            .collect();
        assert!(!late.is_empty(), "decisions go on: {:?}", data.decisions);
        for d in late {
            assert_eq!(d.tasks, vec![1, 2], "the idle task is not mapped: {d:?}");
        }
    }

    /// An attached program: pinned while huddle holds it, its masks put back when huddle
    /// lets go, after --seconds or on a detach signal, and no signal sent to it.
    #[test]
    fn an_attached_program_gets_its_masks_back() {
        let machine = Machine::from_system().unwrap();
        assert!(
            machine.allowed_pus().count() >= 2,
            "needs two PUs (the test machine has two)"
        );
        let target = Target::machine(machine);
        for by_signal in [false, true] {
            let mut obs = Fixed::new(sleepers(3), CommMatrix::zeros(3));
            let ids: Vec<u32> = obs.children.iter().map(Child::id).collect();
            let before: Vec<Vec<u32>> = ids
                .iter()
                .map(|&id| actuate::get_affinity(id).unwrap())
                .collect();
            let mut cfg = comm_config(if by_signal { 30.0 } else { 0.6 });
            cfg.ownership = Ownership::Attached;
            cfg.policy = crate::policy::parse("static:compact", 1).unwrap();
            let watcher = {
                let ids = ids.clone();
                std::thread::spawn(move || {
                    // Until every task is pinned to one PU, then (by_signal) "SIGTERM".
                    let end = Instant::now() + Duration::from_secs(10);
                    while Instant::now() < end {
                        let pinned = ids
                            .iter()
                            .all(|&id| actuate::get_affinity(id).is_some_and(|m| m.len() == 1));
                        if pinned {
                            if by_signal {
                                DETACH.store(libc::SIGTERM, std::sync::atomic::Ordering::SeqCst);
                            }
                            return true;
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    false
                })
            };
            let (data, stop) = manage_until(&mut obs, &target, cfg);
            assert!(
                watcher.join().unwrap(),
                "pinned meanwhile: {:?}",
                data.decisions
            );
            let want = if by_signal {
                Stop::Signal(libc::SIGTERM)
            } else {
                Stop::TimeUp
            };
            assert_eq!(stop, want);
            for (k, &id) in ids.iter().enumerate() {
                assert_eq!(actuate::get_affinity(id).unwrap(), before[k], "task {k}");
            }
            for c in &mut obs.children {
                assert!(c.try_wait().unwrap().is_none(), "the program runs on");
            }
            assert!(
                data.info
                    .notes
                    .iter()
                    .any(|n| n.starts_with("detached") && n.contains("3 of the 3 threads")),
                "{:?}",
                data.info.notes
            );
        }
    }

    /// Two busy partners floating over two PUs: no placement costs less, and they are
    /// pinned one per PU all the same (control::floating_to_pin).
    #[test]
    fn floating_busy_partners_are_pinned_one_per_pu() {
        let machine = Machine::from_system().unwrap();
        assert!(
            machine.allowed_pus().count() >= 2,
            "needs two PUs (the test machine has two)"
        );
        let target = Target::machine(machine);
        let children = spinners(2);
        let mut m = CommMatrix::zeros(2);
        m.set(0, 1, 500.0);
        m.set(1, 0, 500.0);
        let mut obs = Fixed::new(children, m);
        let data = manage(&mut obs, &target, comm_config(1.0));
        let pin = data
            .decisions
            .iter()
            .find(|d| d.action == "migrate")
            .unwrap_or_else(|| panic!("no migration: {:?}", data.decisions));
        assert!(pin.reason.contains("floated"), "{pin:?}");
        assert_ne!(pin.mapping[0], pin.mapping[1], "one per PU: {pin:?}");
    }

    #[test]
    fn waits_for_enough_traffic_before_deciding() {
        let machine = Machine::from_system().unwrap();
        let target = Target::machine(machine);
        let children = sleepers(2);
        let mut m = CommMatrix::zeros(2);
        m.set(0, 1, 10.0);
        m.set(1, 0, 10.0);
        let mut obs = Fixed::new(children, m);
        let data = manage(&mut obs, &target, comm_config(0.4));
        assert!(
            data.decisions.is_empty(),
            "10 events < 64: {:?}",
            data.decisions
        );
    }

    #[test]
    fn a_static_baseline_pins_every_task_without_traffic() {
        let machine = Machine::from_system().unwrap();
        if machine.allowed_pus().count() < 2 {
            panic!("needs two PUs (the test machine has two): pinning is what this tests");
        }
        let target = Target::machine(machine);
        let mut obs = Fixed::new(sleepers(3), CommMatrix::zeros(3));
        let mut cfg = comm_config(0.5);
        cfg.policy = crate::policy::parse("static:compact", 1).unwrap();
        let data = manage(&mut obs, &target, cfg);
        let masks: Vec<Option<Vec<u32>>> = obs
            .children
            .iter()
            .map(|c| actuate::get_affinity(c.id()))
            .collect();
        assert!(
            masks
                .iter()
                .all(|m| m.as_ref().is_some_and(|m| m.len() == 1)),
            "every task pinned: {masks:?} {:?}",
            data.decisions
        );
        let moves = data.decisions.iter().filter(|d| d.action == "migrate");
        assert_eq!(moves.count(), 1, "mapped once: {:?}", data.decisions);
    }

    /// Run as another user by `pinning_someone_elses_tasks_is_a_note` (the pids in the
    /// environment belong to root): exits 0 when the loop ran on and noted the EPERM.
    #[test]
    #[ignore = "helper process for pinning_someone_elses_tasks_is_a_note"]
    fn denied_helper() {
        let Some(pids) = std::env::var_os("HUDDLE_TEST_DENIED") else {
            return;
        };
        let pids: Vec<u32> = pids
            .to_string_lossy()
            .split(',')
            .map(|p| p.parse().unwrap())
            .collect();
        let target = Target::machine(Machine::from_system().unwrap());
        let mut cfg = comm_config(0.6);
        cfg.policy = crate::policy::parse("static:compact", 1).unwrap();
        let n = pids.len();
        let mut all_talk = CommMatrix::zeros(n);
        for i in 0..n {
            for j in (0..n).filter(|&j| j != i) {
                all_talk.set(i, j, 1000.0);
            }
        }
        let data = manage(&mut Fixed::foreign(pids, all_talk), &target, cfg);
        let noted = data.info.notes.iter().any(|n| n.contains("EPERM"));
        let tried = data.decisions.iter().any(|d| d.action == "migrate");
        println!("notes {:?} decisions {:?}", data.info.notes, data.decisions);
        std::process::exit(if noted && tried { 0 } else { 1 });
    }

    #[test]
    fn pinning_someone_elses_tasks_is_a_note() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0
            || Command::new("setpriv").arg("--help").output().is_err()
        {
            eprintln!("needs root and setpriv to act as another user");
            return;
        }
        let mut victims = sleepers(2);
        let pids: Vec<String> = victims.iter().map(|c| c.id().to_string()).collect();
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "run::tests::denied_helper",
                "--nocapture",
            ])
            .env("HUDDLE_TEST_DENIED", pids.join(","))
            .output()
            .unwrap();
        for c in &mut victims {
            c.kill().unwrap();
            c.wait().unwrap();
        }
        assert!(
            out.status.success(),
            "the loop went on and noted EPERM: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }

    /// --move-pages on a model with two NUMA nodes (PUs 0 and 1, one per node): the threads
    /// that moved have the pages they touched last queued for their new node. On a one-node
    /// machine node 1 does not exist and those moves fail; they are counted, not fatal.
    #[test]
    fn moved_threads_take_their_pages_along() {
        if actuate::get_affinity(0).is_some_and(|m| !m.contains(&1)) {
            eprintln!("needs CPUs 0 and 1");
            return;
        }
        let target = Target::machine(Machine::from_synthetic("numa:2 core:1 pu:1").unwrap());
        // Children with a touched heap, so their pages are in memory.
        let children: Vec<Child> = (0..4)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "x=$(head -c 300000 /dev/zero | tr '\\0' a); sleep 30"])
                    .spawn()
                    .unwrap()
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(300));
        for (k, c) in children.iter().enumerate() {
            actuate::set_affinity(c.id(), &[(k / 2) as u32]).unwrap();
        }
        let mut m = CommMatrix::zeros(4);
        for (a, b) in [(0, 2), (1, 3)] {
            m.set(a, b, 100.0);
            m.set(b, a, 100.0);
        }
        let mut obs = Fixed::new(children, m);
        let mut cfg = comm_config(0.8);
        cfg.page_budget = 8;
        let data = manage(&mut obs, &target, cfg);
        let migration = data
            .decisions
            .iter()
            .find(|d| d.action == "migrate")
            .unwrap_or_else(|| panic!("the partners move together: {:?}", data.decisions));
        let mut asked = obs.asked.borrow().clone();
        asked.sort();
        assert_eq!(
            asked,
            vec![0, 1, 2, 3],
            "every migrated thread's pages: {migration:?}"
        );
        // Two tasks went to node 1: their pages moved (two-node machine) or failed to.
        let node1 = migration.mapping.iter().filter(|&&pu| pu == 1).count();
        assert_eq!(node1, 2, "{migration:?}");
        let tried = data.info.pages_moved + data.info.pages_not_moved;
        assert!(tried > 0, "{:?} {:?}", data.info.notes, data.info);
        assert!(
            data.info.pages_moved > 0 || data.info.notes.iter().any(|n| n.contains("node 1")),
            "{:?}",
            data.info.notes
        );
    }

    #[test]
    fn one_numa_node_moves_no_page() {
        let target = Target::machine(Machine::from_synthetic("pack:1 core:2 pu:1").unwrap());
        let mut obs = Fixed::new(sleepers(2), CommMatrix::zeros(2));
        let mut cfg = comm_config(0.2);
        cfg.page_budget = 8;
        let data = manage(&mut obs, &target, cfg);
        assert!(
            data.info.notes.iter().any(|n| n.contains("one NUMA node")),
            "{:?}",
            data.info.notes
        );
        assert!(obs.asked.borrow().is_empty());
    }

    #[test]
    fn moves_partners_together_and_records_it() {
        let machine = Machine::from_system().unwrap();
        let pus: Vec<u32> = machine
            .allowed_pus()
            .map(|p| machine.pus[p].os_index)
            .collect();
        if pus.len() < 2 {
            panic!("needs two PUs (the test machine has two): pinning is what this tests");
        }
        let target = Target::machine(machine);
        let children = sleepers(4);
        // Worst start: partners (0,2) and (1,3) on different PUs.
        for (k, c) in children.iter().enumerate() {
            actuate::set_affinity(c.id(), &[pus[k / 2]]).unwrap();
        }
        let mut m = CommMatrix::zeros(4);
        for (a, b) in [(0, 2), (1, 3)] {
            m.set(a, b, 100.0);
            m.set(b, a, 100.0);
        }
        let mut obs = Fixed::new(children, m);
        let data = manage(&mut obs, &target, comm_config(0.6));
        let aff = |k: usize| actuate::get_affinity(obs.children[k].id()).unwrap();
        assert_eq!(
            aff(0),
            aff(2),
            "partners 0 and 2 share a PU: {:?}",
            data.decisions
        );
        assert_eq!(
            aff(1),
            aff(3),
            "partners 1 and 3 share a PU: {:?}",
            data.decisions
        );
        assert_eq!(aff(0).len(), 1);
        let migrations: Vec<&Decision> = data
            .decisions
            .iter()
            .filter(|d| d.action == "migrate")
            .collect();
        assert_eq!(
            migrations.len(),
            1,
            "one migration, then the loop holds: {:?}",
            data.decisions
        );
        assert!(migrations[0].predicted_gain > 0.9);
        assert_eq!(obs.aged, 1, "the matrix ages after the migration");
        assert!(data.decisions.len() >= 2);
        assert_eq!(data.tasks.len(), 4);
        assert!(!data.placements.is_empty());
    }
}
