//! `--policy simmer`: SIMMer's rules (crates/simmer) driving the manager.
//!
//! Each interval is one window: the PMPI agent's board (per-rank blocking/compute time,
//! pending-send compute, cache misses) and the protocol-processing sample are compared with
//! the previous window's, and `simmer::policy::Rules::step` (its own confirmation and
//! cooldown) says what to do. Moves and swaps of ranks become new slots for the tasks of those
//! ranks' processes; moving the protocol processing instead steers receive processing (RPS)
//! of the network interfaces, and the previous setting is put back when the run ends.

use super::{Context, Policy, Proposal};
use simmer::board::{Board, BoardSnapshot};
use simmer::policy::{Action, Input, Thresholds};
use simmer::protocol::{self, NetSample, ProcSource, Steering};
use std::path::PathBuf;
use topology::{CpuSet, LogicalPu, Machine, OsCpu};

/// The `simmer` policy. Each tick it compares the board and the protocol-processing sample
/// with the previous tick's, and turns the rules' decisions into slots (moves and swaps of the
/// ranks' tasks) or into receive steering (writes each interface's rx-0 `rps_cpus` under /sys;
/// root only). [`Policy::finish`] puts the steering back and removes the board file.
pub struct Simmer {
    board: PathBuf,
    machine: Machine,
    rules: simmer::policy::Rules,
    source: ProcSource,
    steering: Steering,
    prev: Option<(BoardSnapshot, NetSample)>,
    /// RPS settings changed, with their values before huddle changed them.
    steered: Vec<(String, CpuSet)>,
    notes: Vec<String>,
    decisions: usize,
    windows: usize,
    held: usize,
    /// The latest symptom seen or decision held back, for the report.
    last_seen: Option<String>,
}

impl Simmer {
    /// `board` is where the PMPI agent of the program's ranks publishes (HUDDLE_BOARD);
    /// decisions are acted on from `min_confidence` (SIMMer's default: 0.6).
    pub fn new(board: PathBuf, machine: Machine, min_confidence: f64) -> Simmer {
        Simmer {
            board,
            machine,
            rules: simmer::policy::Rules::new(Thresholds {
                min_confidence,
                ..Thresholds::default()
            }),
            source: ProcSource::system(),
            steering: Steering::system(),
            prev: None,
            steered: Vec::new(),
            notes: Vec::new(),
            decisions: 0,
            windows: 0,
            held: 0,
            last_seen: None,
        }
    }

    fn note(&mut self, n: String) {
        if !self.notes.contains(&n) {
            self.notes.push(n);
        }
    }

    /// One window's input, or None while there is no previous window (or no board yet).
    fn window(&mut self) -> Option<(BoardSnapshot, NetSample, BoardSnapshot, NetSample)> {
        let cur = match Board::open(&self.board).and_then(|b| b.snapshot()) {
            Ok(s) => s,
            Err(e) => {
                self.note(format!(
                    "simmer: no board yet at {} ({e})",
                    self.board.display()
                ));
                return None;
            }
        };
        let net = match self.source.sample() {
            Ok(n) => n,
            Err(e) => {
                self.note(format!("simmer: protocol sampling failed: {e}"));
                return None;
            }
        };
        let prev = self.prev.replace((cur.clone(), net.clone()))?;
        Some((prev.0, prev.1, cur, net))
    }

    /// Steers receive processing of every interface to the PU; remembers what it was.
    fn steer(&mut self, os: OsCpu) -> Result<(), String> {
        let target = CpuSet::from(os);
        let mut done = 0;
        for iface in protocol::discover_net_names(std::path::Path::new("/")) {
            match self.steering.set_rps_cpus(&iface, 0, &target) {
                Ok(before) => {
                    if !self.steered.iter().any(|(i, _)| *i == iface) {
                        self.steered.push((iface, before));
                    }
                    done += 1;
                }
                Err(e) => self.note(format!("simmer: could not steer {iface}: {e}")),
            }
        }
        if done == 0 {
            return Err("no interface accepted the new receive-processing CPU".into());
        }
        Ok(())
    }
}

impl Policy for Simmer {
    fn name(&self) -> String {
        "simmer".into()
    }

    fn needs_traffic(&self) -> bool {
        false
    }

    fn propose(&mut self, ctx: &Context) -> Option<Proposal> {
        let (prev, prev_net, cur, cur_net) = self.window()?;
        let load = protocol::load(&prev_net, &cur_net);
        // SAFETY: geteuid has no preconditions. Steering writes /proc and /sys: root only.
        let can_steer = unsafe { libc::geteuid() } == 0;
        let input = Input::from_snapshots(&self.machine, &prev, &cur, &load, can_steer);
        let outcome = self.rules.step(&input);
        self.windows += 1;
        self.held += outcome.held.len();
        if let Some((d, why)) = outcome.held.last() {
            self.last_seen = Some(format!(
                "{:?} held back at confidence {:.2} ({why}): {}",
                d.symptom, d.confidence, d.evidence
            ));
        } else if let Some(o) = outcome.observations.last() {
            self.last_seen = Some(format!(
                "{:?} seen on ranks {:?}: {}",
                o.symptom, o.ranks, o.evidence
            ));
        }
        if outcome.decisions.is_empty() {
            return None;
        }
        let pid_of = |rank: usize| cur.rank(rank).map(|r| r.pid);
        let tasks_of = |pid: Option<u32>| -> Vec<usize> {
            (0..ctx.tasks.len())
                .filter(|&k| Some(ctx.tasks[k].pid) == pid)
                .collect()
        };
        let mut slots = ctx.current.to_vec();
        let mut reasons = Vec::new();
        for d in &outcome.decisions {
            match d.action {
                Action::Move { rank, to_pu } => {
                    let tasks = tasks_of(pid_of(rank));
                    if tasks.is_empty() {
                        self.note(format!("simmer: rank {rank} has no task huddle watches: a move of it was not acted on"));
                        continue;
                    }
                    // SIMMer speaks the machine's logical PUs; the target is that machine.
                    let slot = ctx.target.slot(0, LogicalPu(to_pu));
                    for k in tasks {
                        slots[k] = slot.0;
                    }
                }
                Action::Swap { a, b } => {
                    let (ta, tb) = (tasks_of(pid_of(a)), tasks_of(pid_of(b)));
                    let (Some(&ka), Some(&kb)) = (ta.first(), tb.first()) else {
                        self.note(format!("simmer: rank {a} or {b} has no task huddle watches: a swap of them was not acted on"));
                        continue;
                    };
                    let (sa, sb) = (ctx.current[ka], ctx.current[kb]);
                    ta.iter().for_each(|&k| slots[k] = sb);
                    tb.iter().for_each(|&k| slots[k] = sa);
                }
                Action::SteerProtocol { to_pu } => {
                    let os = self.machine.os_cpu(LogicalPu(to_pu));
                    if let Err(e) = self.steer(os) {
                        self.note(format!("simmer: {e}"));
                        continue;
                    }
                }
            }
            self.decisions += 1;
            reasons.push(format!(
                "{:?} (confidence {:.2}): {:?}; {}",
                d.symptom, d.confidence, d.action, d.evidence
            ));
        }
        if reasons.is_empty() {
            return None;
        }
        Some(Proposal {
            slots,
            reason: reasons.join(" | "),
            self_judged: true,
            only_moved: true,
        })
    }

    fn notes(&self) -> Vec<String> {
        let mut n = self.notes.clone();
        n.push(format!(
            "simmer: {} windows compared, {} decisions acted on, {} held back",
            self.windows, self.decisions, self.held
        ));
        if let Some(l) = &self.last_seen {
            n.push(format!("simmer: last {l}"));
        }
        n
    }

    fn finish(&mut self) {
        for (iface, before) in std::mem::take(&mut self.steered) {
            if let Err(e) = self.steering.set_rps_cpus(&iface, 0, &before) {
                self.note(format!(
                    "simmer: could not restore {iface} receive processing: {e}"
                ));
            }
        }
        // The manager named the board, so it removes it.
        let _ = std::fs::remove_file(&self.board);
    }
}
