//! SIMMer's three rules as a decision function. Input: per-rank metrics over one sampling
//! window (deltas of the PMPI board), the protocol-processing picture of the same window, the
//! current rank -> PU placement and the machine model. Output: decisions (move a rank, swap
//! two ranks, or move the protocol processing instead), each with the symptom behind it.
//!
//! The rules (thresholds in [`Thresholds`], documented in docs/pmpi.md):
//! 1. Communication idleness: idleness = time blocked in MPI / time computing. The most idle
//!    rank should share its core with the protocol processing, so it swaps with the rank on
//!    the protocol core when its idleness is `idleness_ratio` times that rank's.
//! 2. Out-of-sync communication: a rank computes with its own sends still pending while the
//!    partner it sends most to waits. Partners belong on cores of equal effective capability
//!    (1 - protocol share, divided among the ranks sharing the PU); the lower rank of the pair
//!    leads and moves the one on the weaker core to the strongest free core (or swaps it with
//!    an uninvolved rank there).
//! 3. Cache locality: a communicating rank with `cache_ratio` times the cache misses per
//!    compute second of another rank that sits nearer the protocol core swaps with it.
//!
//! Conflicts: rules run in the order out-of-sync, idleness, cache locality, and a rank takes
//! part in at most one decision per window. Hysteresis: a decision is acted on once the same
//! decision was proposed in `confirm_windows` consecutive windows with confidence at least
//! `min_confidence`; ranks it moved (and the protocol processing, when it moved) are left in
//! place for `cooldown_windows` windows.

use crate::board::{BoardSnapshot, RankSlot, SlotState};
use crate::protocol::ProtocolLoad;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use topology::{Machine, OsCpu};

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Thresholds {
    /// Rule 1: the most idle rank's idleness must be at least this multiple of the idleness
    /// of the rank on the protocol core.
    pub idleness_ratio: f64,
    /// Rule 1: and at least this much (blocked/compute) in absolute terms.
    pub min_idleness: f64,
    /// Rule 2: share of the window a rank computes with own sends pending.
    pub oos_compute_share: f64,
    /// Rule 2: share of the window its partner waits in blocking calls.
    pub oos_wait_share: f64,
    /// Rule 2: smallest effective-capability difference worth a move (fraction of a core).
    pub capability_gap: f64,
    /// Rule 3: cache-miss-rate multiple between the far rank and the near rank.
    pub cache_ratio: f64,
    /// Rule 3: cache misses in the window for full confidence.
    pub confident_misses: u64,
    /// Blocking calls per rank in the window for full confidence in its time split.
    pub confident_calls: u64,
    /// The protocol core must be known with at least this confidence (rules 1 and 3).
    pub min_protocol_confidence: f64,
    /// Decisions below this confidence wait.
    pub min_confidence: f64,
    pub confirm_windows: u32,
    pub cooldown_windows: u32,
    /// Move the protocol processing (IRQ affinity / RPS) instead of ranks where allowed.
    pub prefer_steering: bool,
}

impl Default for Thresholds {
    fn default() -> Thresholds {
        Thresholds {
            idleness_ratio: 2.0,
            min_idleness: 0.25,
            oos_compute_share: 0.2,
            oos_wait_share: 0.2,
            capability_gap: 0.05,
            cache_ratio: 2.0,
            confident_misses: 10_000,
            confident_calls: 20,
            min_protocol_confidence: 0.5,
            min_confidence: 0.6,
            confirm_windows: 2,
            cooldown_windows: 3,
            prefer_steering: false,
        }
    }
}

/// One rank over one window: deltas of its board slot, and where it runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankWindow {
    pub rank: usize,
    /// Logical index of the PU it runs on.
    pub pu: usize,
    pub blocking_ns: u64,
    pub compute_ns: u64,
    pub pending_compute_ns: u64,
    pub blocking_calls: u64,
    pub cache_misses: Option<u64>,
    /// Bytes sent to each world rank during the window.
    pub bytes_to: Vec<u64>,
}

impl RankWindow {
    /// The window between two snapshots of one rank's slot.
    pub fn between(prev: &RankSlot, cur: &RankSlot, pu: usize) -> RankWindow {
        let d = |a: u64, b: u64| b.saturating_sub(a);
        RankWindow {
            rank: cur.rank,
            pu,
            blocking_ns: d(prev.blocking_ns, cur.blocking_ns),
            compute_ns: d(prev.compute_ns, cur.compute_ns),
            pending_compute_ns: d(prev.pending_compute_ns, cur.pending_compute_ns),
            blocking_calls: d(prev.blocking_calls, cur.blocking_calls),
            cache_misses: match (prev.cache_misses, cur.cache_misses) {
                (Some(a), Some(b)) => Some(b.saturating_sub(a)),
                _ => None,
            },
            bytes_to: cur
                .bytes_to
                .iter()
                .enumerate()
                .map(|(j, &b)| d(prev.bytes_to.get(j).copied().unwrap_or(0), b))
                .collect(),
        }
    }

    /// Time blocked per unit of compute (compute below 1 us counts as 1 us).
    pub fn idleness(&self) -> f64 {
        self.blocking_ns as f64 / (self.compute_ns.max(1000)) as f64
    }

    fn miss_rate(&self) -> Option<f64> {
        self.cache_misses
            .map(|m| m as f64 / (self.compute_ns.max(1000) as f64 / 1e9))
    }
}

/// The protocol processing as the rules see it, on PU logical indexes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProtocolView {
    pub core: Option<usize>,
    pub confidence: f64,
    /// Protocol share of each PU's time (index = PU logical index).
    pub share: Vec<f64>,
}

impl ProtocolView {
    pub fn from_load(load: &ProtocolLoad, machine: &Machine) -> ProtocolView {
        let mut share = vec![0.0; machine.num_pus()];
        for c in &load.cpus {
            if let Some(pu) = machine.pu_by_os(OsCpu(c.cpu)).map(|p| p.0) {
                share[pu] = c.protocol_share;
            }
        }
        ProtocolView {
            core: load
                .protocol_cpu
                .and_then(|c| machine.pu_by_os(OsCpu(c)).map(|p| p.0)),
            confidence: load.confidence,
            share,
        }
    }
}

pub struct Input<'a> {
    pub machine: &'a Machine,
    /// Ranks on this node.
    pub ranks: Vec<RankWindow>,
    pub protocol: ProtocolView,
    pub window_ns: u64,
    /// IRQ affinity or RPS can be changed here (root, a steerable device).
    pub can_steer: bool,
}

impl<'a> Input<'a> {
    /// The input for the window between two board snapshots: ranks present in both and alive,
    /// placed on the PU their slot says they last ran on (CPU OS index -> logical PU).
    pub fn from_snapshots(
        machine: &'a Machine,
        prev: &BoardSnapshot,
        cur: &BoardSnapshot,
        load: &ProtocolLoad,
        can_steer: bool,
    ) -> Input<'a> {
        let ranks = cur
            .ranks
            .iter()
            .filter(|r| r.alive && r.state == SlotState::Running)
            .filter_map(|r| {
                let p = prev.rank(r.rank)?;
                let pu = machine.pu_by_os(OsCpu(r.cpu))?.0;
                Some(RankWindow::between(p, r, pu))
            })
            .collect();
        Input {
            machine,
            ranks,
            protocol: ProtocolView::from_load(load, machine),
            window_ns: cur.taken_ns.saturating_sub(prev.taken_ns),
            can_steer,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Symptom {
    OutOfSync,
    CommunicationIdleness,
    CacheLocality,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Action {
    /// Pin `rank` to PU `to_pu` (logical index).
    Move { rank: usize, to_pu: usize },
    /// Exchange the PUs of two ranks (a < b).
    Swap { a: usize, b: usize },
    /// Move the protocol processing (IRQ affinity / RPS) to PU `to_pu`.
    SteerProtocol { to_pu: usize },
}

impl Action {
    fn swap(a: usize, b: usize) -> Action {
        Action::Swap {
            a: a.min(b),
            b: a.max(b),
        }
    }

    /// Ranks the action moves; the protocol processing counts as rank usize::MAX.
    fn ranks(&self) -> Vec<usize> {
        match *self {
            Action::Move { rank, .. } => vec![rank],
            Action::Swap { a, b } => vec![a, b],
            Action::SteerProtocol { .. } => vec![PROTOCOL],
        }
    }
}

const PROTOCOL: usize = usize::MAX;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RuleDecision {
    pub action: Action,
    pub symptom: Symptom,
    pub confidence: f64,
    /// The numbers behind it, for the report.
    pub evidence: String,
}

/// A symptom seen without a placement remedy (reported, not acted on).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Observation {
    pub symptom: Symptom,
    pub ranks: Vec<usize>,
    pub evidence: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Outcome {
    /// Act on these now.
    pub decisions: Vec<RuleDecision>,
    /// Proposed but held back (confidence, confirmation or cooldown), with why.
    pub held: Vec<(RuleDecision, String)>,
    pub observations: Vec<Observation>,
}

/// What the rules propose for one window, before hysteresis. Pure.
pub fn propose(input: &Input, t: &Thresholds) -> (Vec<RuleDecision>, Vec<Observation>) {
    let mut out = Vec::new();
    let mut obs = Vec::new();
    let mut used: BTreeSet<usize> = BTreeSet::new();
    out_of_sync(input, t, &mut out, &mut obs, &mut used);
    idleness(input, t, &mut out, &mut used);
    cache_locality(input, t, &mut out, &mut used);
    (out, obs)
}

fn evidence_weight(calls: u64, t: &Thresholds) -> f64 {
    (calls as f64 / t.confident_calls.max(1) as f64).min(1.0)
}

fn protocol_core(input: &Input, t: &Thresholds) -> Option<usize> {
    input
        .protocol
        .core
        .filter(|_| input.protocol.confidence >= t.min_protocol_confidence)
}

fn ranks_on<'a>(input: &'a Input<'_>, pu: usize) -> impl Iterator<Item = &'a RankWindow> + 'a {
    input.ranks.iter().filter(move |r| r.pu == pu)
}

/// Effective capability of a PU: what is left after protocol processing, shared among the
/// ranks on it (a free PU counts as if one rank were added).
fn capability(input: &Input, pu: usize) -> f64 {
    let share = input.protocol.share.get(pu).copied().unwrap_or(0.0);
    let n = ranks_on(input, pu).count().max(1);
    (1.0 - share).max(0.0) / n as f64
}

fn push(out: &mut Vec<RuleDecision>, used: &mut BTreeSet<usize>, d: RuleDecision) {
    used.extend(d.action.ranks());
    out.push(d);
}

fn idleness(
    input: &Input,
    t: &Thresholds,
    out: &mut Vec<RuleDecision>,
    used: &mut BTreeSet<usize>,
) {
    let Some(p) = protocol_core(input, t) else {
        return;
    };
    // The rank on the protocol core that computes most (it suffers most from sharing it).
    let Some(q) = ranks_on(input, p)
        .filter(|r| !used.contains(&r.rank))
        .max_by_key(|r| r.compute_ns)
    else {
        return;
    };
    let Some(m) = input
        .ranks
        .iter()
        .filter(|r| r.pu != p && !used.contains(&r.rank))
        .max_by(|a, b| a.idleness().total_cmp(&b.idleness()))
    else {
        return;
    };
    let (im, iq) = (m.idleness(), q.idleness());
    if im < t.min_idleness || im < t.idleness_ratio * iq.max(1e-9) {
        return;
    }
    let confidence = input.protocol.confidence
        * evidence_weight(m.blocking_calls, t).min(evidence_weight(q.blocking_calls, t).max(0.5));
    let evidence = format!(
        "rank {} idleness {:.2} (blocked/compute) vs {:.2} for rank {} on protocol core PU {} ({:.1}% protocol time)",
        m.rank,
        im,
        iq,
        q.rank,
        p,
        100.0 * input.protocol.share.get(p).copied().unwrap_or(0.0)
    );
    let action = if t.prefer_steering && input.can_steer && !used.contains(&PROTOCOL) {
        Action::SteerProtocol { to_pu: m.pu }
    } else {
        Action::swap(m.rank, q.rank)
    };
    push(
        out,
        used,
        RuleDecision {
            action,
            symptom: Symptom::CommunicationIdleness,
            confidence,
            evidence,
        },
    );
}

fn out_of_sync(
    input: &Input,
    t: &Thresholds,
    out: &mut Vec<RuleDecision>,
    obs: &mut Vec<Observation>,
    used: &mut BTreeSet<usize>,
) {
    let w = input.window_ns.max(1) as f64;
    let by_rank: BTreeMap<usize, &RankWindow> = input.ranks.iter().map(|r| (r.rank, r)).collect();
    // Senders computing with pending sends, most affected first.
    let mut senders: Vec<&RankWindow> = input
        .ranks
        .iter()
        .filter(|r| r.pending_compute_ns as f64 / w >= t.oos_compute_share)
        .collect();
    senders.sort_by(|a, b| {
        b.pending_compute_ns
            .cmp(&a.pending_compute_ns)
            .then(a.rank.cmp(&b.rank))
    });
    for s in senders {
        if used.contains(&s.rank) {
            continue;
        }
        // Its main partner on this node, if that partner waits.
        let Some((peer, _)) = s
            .bytes_to
            .iter()
            .enumerate()
            .filter(|&(j, &b)| j != s.rank && b > 0 && by_rank.contains_key(&j))
            .max_by_key(|&(_, &b)| b)
        else {
            continue;
        };
        let p = by_rank[&peer];
        if used.contains(&p.rank) || (p.blocking_ns as f64 / w) < t.oos_wait_share {
            continue;
        }
        let leader = s.rank.min(p.rank);
        let (cs, cp) = (capability(input, s.pu), capability(input, p.pu));
        let evidence = format!(
            "rank {} computed {:.0}% of the window with sends pending while rank {} waited {:.0}%; capabilities {:.2} (PU {}) vs {:.2} (PU {}); leader rank {}",
            s.rank,
            100.0 * s.pending_compute_ns as f64 / w,
            p.rank,
            100.0 * p.blocking_ns as f64 / w,
            cs,
            s.pu,
            cp,
            p.pu,
            leader
        );
        if (cs - cp).abs() < t.capability_gap {
            obs.push(Observation {
                symptom: Symptom::OutOfSync,
                ranks: vec![s.rank, p.rank],
                evidence: format!("{evidence}: equal capabilities, so placement is not the cause (no asynchronous progress for pending sends?)"),
            });
            continue;
        }
        let (weak, strong_cap) = if cs < cp { (s, cp) } else { (p, cs) };
        let confidence =
            evidence_weight(s.blocking_calls, t) * evidence_weight(p.blocking_calls, t);
        // The strongest free PU, else an uninvolved rank on a strong PU.
        let pair = [s.rank, p.rank];
        let free = input
            .machine
            .allowed_pus()
            .map(|p| p.0)
            .filter(|&u| ranks_on(input, u).next().is_none())
            .map(|u| (u, capability(input, u)))
            .filter(|&(_, c)| c > capability(input, weak.pu) + t.capability_gap)
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
        let steer_to = free.map(|f| f.0).or_else(|| {
            input
                .machine
                .allowed_pus()
                .map(|p| p.0)
                .filter(|&u| u != s.pu && u != p.pu)
                .max_by(|&a, &b| capability(input, a).total_cmp(&capability(input, b)))
        });
        let weak_is_protocol = input.protocol.core == Some(weak.pu);
        let action = if t.prefer_steering
            && input.can_steer
            && weak_is_protocol
            && !used.contains(&PROTOCOL)
        {
            steer_to.map(|u| Action::SteerProtocol { to_pu: u })
        } else if let Some((u, _)) = free {
            Some(Action::Move {
                rank: weak.rank,
                to_pu: u,
            })
        } else {
            input
                .ranks
                .iter()
                .filter(|x| !pair.contains(&x.rank) && !used.contains(&x.rank))
                .filter(|x| capability(input, x.pu) >= strong_cap - t.capability_gap)
                .max_by(|a, b| {
                    capability(input, a.pu)
                        .total_cmp(&capability(input, b.pu))
                        .then(b.rank.cmp(&a.rank))
                })
                .map(|x| Action::swap(weak.rank, x.rank))
        };
        match action {
            Some(action) => push(
                out,
                used,
                RuleDecision {
                    action,
                    symptom: Symptom::OutOfSync,
                    confidence,
                    evidence,
                },
            ),
            None => obs.push(Observation {
                symptom: Symptom::OutOfSync,
                ranks: pair.to_vec(),
                evidence: format!("{evidence}: no stronger PU to move rank {} to", weak.rank),
            }),
        }
    }
}

fn cache_locality(
    input: &Input,
    t: &Thresholds,
    out: &mut Vec<RuleDecision>,
    used: &mut BTreeSet<usize>,
) {
    let Some(p) = protocol_core(input, t) else {
        return;
    };
    let m = input.machine;
    let received = |r: usize| -> u64 {
        input
            .ranks
            .iter()
            .map(|x| x.bytes_to.get(r).copied().unwrap_or(0))
            .sum()
    };
    let communicates = |r: &RankWindow| r.bytes_to.iter().sum::<u64>() + received(r.rank) > 0;
    // The communicating rank with the highest miss rate.
    let Some(c) = input
        .ranks
        .iter()
        .filter(|r| !used.contains(&r.rank) && r.miss_rate().is_some() && communicates(r))
        .max_by(|a, b| {
            a.miss_rate()
                .unwrap_or(0.0)
                .total_cmp(&b.miss_rate().unwrap_or(0.0))
        })
    else {
        return;
    };
    let rc = c.miss_rate().unwrap_or(0.0);
    let dc = m.distance(c.pu, p);
    // A rank nearer the protocol core with few misses: nearest first, then fewest misses.
    let Some(d) = input
        .ranks
        .iter()
        .filter(|r| r.rank != c.rank && !used.contains(&r.rank))
        .filter(|r| m.distance(r.pu, p) < dc)
        .filter(|r| r.miss_rate().is_some_and(|x| x * t.cache_ratio <= rc))
        .min_by(|a, b| {
            m.distance(a.pu, p).total_cmp(&m.distance(b.pu, p)).then(
                a.miss_rate()
                    .unwrap_or(0.0)
                    .total_cmp(&b.miss_rate().unwrap_or(0.0)),
            )
        })
    else {
        return;
    };
    let confidence = input.protocol.confidence
        * (c.cache_misses.unwrap_or(0) as f64 / t.confident_misses.max(1) as f64).min(1.0);
    let evidence = format!(
        "rank {} (PU {}, {} from protocol core PU {}) has {:.0} cache misses per compute second, rank {} (PU {}, {}) has {:.0}",
        c.rank,
        c.pu,
        m.level(c.pu, p),
        p,
        rc,
        d.rank,
        d.pu,
        m.level(d.pu, p),
        d.miss_rate().unwrap_or(0.0)
    );
    let action = if t.prefer_steering && input.can_steer && !used.contains(&PROTOCOL) {
        // Bring the protocol processing next to the rank instead: the nearest other PU.
        match m
            .allowed_pus()
            .map(|p| p.0)
            .filter(|&u| u != c.pu)
            .min_by(|&a, &b| {
                m.distance(a, c.pu)
                    .total_cmp(&m.distance(b, c.pu))
                    .then(a.cmp(&b))
            }) {
            Some(u) if m.distance(u, c.pu) < dc => Action::SteerProtocol { to_pu: u },
            _ => Action::swap(c.rank, d.rank),
        }
    } else {
        Action::swap(c.rank, d.rank)
    };
    push(
        out,
        used,
        RuleDecision {
            action,
            symptom: Symptom::CacheLocality,
            confidence,
            evidence,
        },
    );
}

/// The rules with memory: confirmation over consecutive windows and cooldown after moves.
#[derive(Clone, Debug)]
pub struct Rules {
    pub thresholds: Thresholds,
    window: u64,
    streak: BTreeMap<(Symptom, Action), u32>,
    frozen_until: BTreeMap<usize, u64>,
}

impl Rules {
    pub fn new(thresholds: Thresholds) -> Rules {
        Rules {
            thresholds,
            window: 0,
            streak: BTreeMap::new(),
            frozen_until: BTreeMap::new(),
        }
    }

    /// One window: propose, then apply confidence, confirmation and cooldown.
    pub fn step(&mut self, input: &Input) -> Outcome {
        self.window += 1;
        let t = &self.thresholds;
        let (proposed, observations) = propose(input, t);
        let mut outcome = Outcome {
            observations,
            ..Default::default()
        };
        let mut seen = BTreeMap::new();
        for d in proposed {
            let key = (d.symptom, d.action.clone());
            if d.confidence < t.min_confidence {
                outcome
                    .held
                    .push((d, format!("confidence below {}", t.min_confidence)));
                continue;
            }
            if let Some(r) = d
                .action
                .ranks()
                .into_iter()
                .find(|r| self.frozen_until.get(r).is_some_and(|&w| w >= self.window))
            {
                let who = if r == PROTOCOL {
                    "the protocol processing".to_string()
                } else {
                    format!("rank {r}")
                };
                outcome
                    .held
                    .push((d, format!("{who} moved recently (cooldown)")));
                continue;
            }
            let n = self.streak.get(&key).copied().unwrap_or(0) + 1;
            seen.insert(key, n);
            if n < t.confirm_windows {
                outcome.held.push((
                    d,
                    format!("seen in {n} of {} consecutive windows", t.confirm_windows),
                ));
            } else {
                outcome.decisions.push(d);
            }
        }
        for d in &outcome.decisions {
            seen.remove(&(d.symptom, d.action.clone()));
            for r in d.action.ranks() {
                self.frozen_until
                    .insert(r, self.window + self.thresholds.cooldown_windows as u64);
            }
        }
        self.streak = seen;
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn rank(rank: usize, pu: usize, blocking_ms: u64, compute_ms: u64, n: usize) -> RankWindow {
        RankWindow {
            rank,
            pu,
            blocking_ns: blocking_ms * MS,
            compute_ns: compute_ms * MS,
            pending_compute_ns: 0,
            blocking_calls: 100,
            cache_misses: None,
            bytes_to: vec![0; n],
        }
    }

    fn view(m: &Machine, core: Option<usize>, share: f64) -> ProtocolView {
        let mut s = vec![0.0; m.num_pus()];
        if let Some(c) = core {
            s[c] = share;
        }
        ProtocolView {
            core,
            confidence: 1.0,
            share: s,
        }
    }

    fn input(m: &Machine, ranks: Vec<RankWindow>, core: Option<usize>) -> Input<'_> {
        Input {
            machine: m,
            ranks,
            protocol: view(m, core, 0.3),
            window_ns: 1000 * MS,
            can_steer: false,
        }
    }

    fn flat(n: usize) -> Machine {
        Machine::from_synthetic(&format!("core:{n} pu:1")).unwrap()
    }

    #[test]
    fn idleness_swaps_most_idle_rank_onto_protocol_core() {
        let m = flat(4);
        // Rank 0 computes hard on the protocol core (PU 0); rank 3 mostly waits.
        let ranks = vec![
            rank(0, 0, 50, 950, 4),
            rank(1, 1, 200, 800, 4),
            rank(2, 2, 300, 700, 4),
            rank(3, 3, 700, 300, 4),
        ];
        let (d, _) = propose(&input(&m, ranks, Some(0)), &Thresholds::default());
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].action, Action::Swap { a: 0, b: 3 });
        assert_eq!(d[0].symptom, Symptom::CommunicationIdleness);
        assert!(
            d[0].evidence.contains("rank 3 idleness 2.33"),
            "{}",
            d[0].evidence
        );
    }

    #[test]
    fn idleness_needs_asymmetry_and_a_protocol_core() {
        let m = flat(4);
        let even: Vec<RankWindow> = (0..4).map(|r| rank(r, r, 400, 600, 4)).collect();
        assert!(propose(&input(&m, even, Some(0)), &Thresholds::default())
            .0
            .is_empty());
        let skew = vec![rank(0, 0, 50, 950, 4), rank(1, 1, 700, 300, 4)];
        assert!(
            propose(&input(&m, skew.clone(), None), &Thresholds::default())
                .0
                .is_empty()
        );
        // A protocol core known with low confidence does not count either.
        let mut i = input(&m, skew, Some(0));
        i.protocol.confidence = 0.2;
        assert!(propose(&i, &Thresholds::default()).0.is_empty());
    }

    #[test]
    fn idleness_alternative_steers_the_protocol_to_the_idle_rank() {
        let m = flat(4);
        let ranks = vec![rank(0, 0, 50, 950, 4), rank(3, 3, 700, 300, 4)];
        let mut i = input(&m, ranks, Some(0));
        i.can_steer = true;
        let t = Thresholds {
            prefer_steering: true,
            ..Default::default()
        };
        let (d, _) = propose(&i, &t);
        assert_eq!(d[0].action, Action::SteerProtocol { to_pu: 3 });
        // Not allowed to steer: falls back to moving ranks.
        i.can_steer = false;
        assert_eq!(propose(&i, &t).0[0].action, Action::Swap { a: 0, b: 3 });
    }

    fn oos_pair(m: &Machine, sender_pu: usize, receiver_pu: usize) -> Vec<RankWindow> {
        let mut s = rank(0, sender_pu, 100, 900, 4);
        s.pending_compute_ns = 600 * MS;
        s.bytes_to[1] = 4 << 20;
        let mut r = rank(1, receiver_pu, 600, 400, 4);
        r.bytes_to[0] = 1 << 20;
        let _ = m;
        vec![s, r]
    }

    #[test]
    fn out_of_sync_moves_the_partner_on_the_weaker_core_to_a_free_core() {
        let m = flat(4);
        // Receiver on the protocol core (capability 0.7), sender on PU 1 (1.0); PUs 2, 3 free.
        let (d, obs) = propose(
            &input(&m, oos_pair(&m, 1, 0), Some(0)),
            &Thresholds::default(),
        );
        assert!(obs.is_empty());
        assert_eq!(d[0].symptom, Symptom::OutOfSync);
        assert_eq!(d[0].action, Action::Move { rank: 1, to_pu: 2 });
        assert!(d[0].evidence.contains("leader rank 0"));
    }

    #[test]
    fn out_of_sync_on_equal_cores_is_observed_not_acted_on() {
        let m = flat(4);
        let (d, obs) = propose(
            &input(&m, oos_pair(&m, 1, 2), Some(0)),
            &Thresholds::default(),
        );
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(obs.len(), 1);
        assert!(obs[0].evidence.contains("equal capabilities"));
    }

    #[test]
    fn out_of_sync_swaps_when_no_core_is_free() {
        let m = flat(3);
        let mut ranks = oos_pair(&m, 1, 0);
        ranks.push(rank(2, 2, 10, 990, 4)); // uninvolved, on a full-capability PU
        let (d, _) = propose(&input(&m, ranks, Some(0)), &Thresholds::default());
        assert_eq!(d[0].action, Action::Swap { a: 1, b: 2 });
        // It takes priority over idleness: rank 1 is not used twice.
        assert_eq!(d.len(), 1, "{d:?}");
    }

    #[test]
    fn cache_locality_brings_the_missing_communicator_near_the_protocol_core() {
        // Two packages with a shared L3 each; the protocol core is PU 0 (package 0).
        let m = Machine::from_synthetic("pack:2 l3:1 core:2 pu:1").unwrap();
        let mut c = rank(0, 2, 300, 700, 4); // on package 1, communicates, many misses
        c.cache_misses = Some(5_000_000);
        c.bytes_to[1] = 1 << 20;
        let mut near = rank(1, 1, 300, 700, 4); // shares the L3 with PU 0, few misses
        near.cache_misses = Some(100_000);
        let mut far = rank(2, 3, 300, 700, 4);
        far.cache_misses = Some(10_000);
        let mut i = input(&m, vec![c, near, far], Some(0));
        i.protocol.share = vec![0.3, 0.0, 0.0, 0.0];
        let (d, _) = propose(&i, &Thresholds::default());
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].symptom, Symptom::CacheLocality);
        assert_eq!(d[0].action, Action::Swap { a: 0, b: 1 });
        assert!(
            d[0].evidence.contains("rank 1 (PU 1, l3)"),
            "{}",
            d[0].evidence
        );
        // Alternative: steer the protocol processing next to rank 0 (PU 3 shares its L3).
        i.can_steer = true;
        let t = Thresholds {
            prefer_steering: true,
            ..Default::default()
        };
        assert_eq!(
            propose(&i, &t).0[0].action,
            Action::SteerProtocol { to_pu: 3 }
        );
    }

    #[test]
    fn cache_locality_needs_counters_and_a_hierarchy() {
        // One cache domain (like this VM): no PU is nearer the protocol core.
        let m = flat(4);
        let mut c = rank(0, 2, 300, 700, 4);
        c.cache_misses = Some(5_000_000);
        c.bytes_to[1] = 1;
        let mut d = rank(1, 1, 300, 700, 4);
        d.cache_misses = Some(1000);
        let (p, _) = propose(
            &input(&m, vec![c.clone(), d.clone()], Some(0)),
            &Thresholds::default(),
        );
        assert!(
            p.iter().all(|x| x.symptom != Symptom::CacheLocality),
            "{p:?}"
        );
        // No counters (cache_misses None): nothing.
        let m2 = Machine::from_synthetic("pack:2 l3:1 core:2 pu:1").unwrap();
        c.cache_misses = None;
        d.cache_misses = None;
        let (p, _) = propose(&input(&m2, vec![c, d], Some(0)), &Thresholds::default());
        assert!(p.is_empty(), "{p:?}");
    }

    #[test]
    fn hysteresis_confirms_then_cools_down() {
        let m = flat(4);
        let ranks = vec![rank(0, 0, 50, 950, 4), rank(3, 3, 700, 300, 4)];
        let mut pol = Rules::new(Thresholds::default());
        let o1 = pol.step(&input(&m, ranks.clone(), Some(0)));
        assert!(o1.decisions.is_empty());
        assert!(o1.held[0].1.contains("seen in 1 of 2"));
        let o2 = pol.step(&input(&m, ranks.clone(), Some(0)));
        assert_eq!(o2.decisions.len(), 1);
        // Suppose the manager did not (or could not) swap: the same proposal is now in cooldown.
        let o3 = pol.step(&input(&m, ranks.clone(), Some(0)));
        assert!(o3.decisions.is_empty());
        assert!(o3.held[0].1.contains("cooldown"), "{:?}", o3.held);
        // A symptom that disappears resets its streak.
        let mut pol = Rules::new(Thresholds::default());
        pol.step(&input(&m, ranks.clone(), Some(0)));
        pol.step(&input(
            &m,
            vec![rank(0, 0, 400, 600, 4), rank(3, 3, 400, 600, 4)],
            Some(0),
        ));
        assert!(pol.step(&input(&m, ranks, Some(0))).decisions.is_empty());
    }

    #[test]
    fn low_confidence_is_held() {
        let m = flat(4);
        let mut a = rank(0, 0, 50, 950, 4);
        let mut b = rank(3, 3, 700, 300, 4);
        a.blocking_calls = 2;
        b.blocking_calls = 2;
        let mut pol = Rules::new(Thresholds {
            confirm_windows: 1,
            ..Default::default()
        });
        let o = pol.step(&input(&m, vec![a, b], Some(0)));
        assert!(o.decisions.is_empty());
        assert!(o.held[0].1.contains("confidence"));
    }

    #[test]
    fn input_from_snapshots_places_ranks_by_their_cpu() {
        let m = flat(2);
        let slot = |rank: usize, cpu: u32, b: u64, state: SlotState| RankSlot {
            rank,
            state,
            pid: 1,
            alive: true,
            hostname: String::new(),
            cpu,
            tid: 1,
            blocking_ns: b,
            compute_ns: 2 * b,
            pending_compute_ns: 0,
            blocking_calls: 1,
            pending_sends: 0,
            cache_misses: None,
            cache_counter: crate::board::CacheCounter::Unavailable,
            in_blocking_call: false,
            init_ns: 0,
            updated_ns: 0,
            sent_bytes: 0,
            sent_msgs: 0,
            bytes_to: vec![0; 3],
            msgs_to: vec![0; 3],
        };
        let snap = |t: u64, b: u64| BoardSnapshot {
            world_size: 3,
            stamp: 1,
            taken_ns: t,
            ranks: vec![
                slot(0, 1, b, SlotState::Running),
                slot(1, 0, b, SlotState::Running),
                slot(2, 0, b, SlotState::Finalized),
            ],
        };
        let load = ProtocolLoad {
            seconds: 1.0,
            cpus: vec![],
            protocol_cpu: Some(1),
            confidence: 0.9,
            net_irq_lines: vec![],
        };
        let i = Input::from_snapshots(&m, &snap(0, 10), &snap(1000, 30), &load, false);
        assert_eq!(i.window_ns, 1000);
        assert_eq!(i.ranks.len(), 2, "the finalized rank is left out");
        assert_eq!(
            (i.ranks[0].rank, i.ranks[0].pu, i.ranks[0].blocking_ns),
            (0, 1, 20)
        );
        assert_eq!(i.ranks[1].pu, 0);
        assert_eq!(i.protocol.core, Some(1));
    }

    #[test]
    fn window_from_board_slots() {
        let slot = |b: u64, c: u64, bytes: Vec<u64>| RankSlot {
            rank: 1,
            state: crate::board::SlotState::Running,
            pid: 1,
            alive: true,
            hostname: String::new(),
            cpu: 0,
            tid: 1,
            blocking_ns: b,
            compute_ns: c,
            pending_compute_ns: 0,
            blocking_calls: b / 10,
            pending_sends: 0,
            cache_misses: Some(c),
            cache_counter: crate::board::CacheCounter::Counting,
            in_blocking_call: false,
            init_ns: 0,
            updated_ns: 0,
            sent_bytes: 0,
            sent_msgs: 0,
            msgs_to: vec![0; bytes.len()],
            bytes_to: bytes,
        };
        let w = RankWindow::between(
            &slot(100, 1000, vec![1, 2]),
            &slot(300, 1500, vec![5, 2]),
            7,
        );
        assert_eq!(
            (w.blocking_ns, w.compute_ns, w.blocking_calls, w.pu),
            (200, 500, 20, 7)
        );
        assert_eq!(w.bytes_to, vec![4, 0]);
        assert_eq!(w.cache_misses, Some(500));
    }
}
