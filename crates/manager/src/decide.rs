//! Step 2 of the loop: what the policy proposes for the live tasks, and whether moving to it
//! is worth it (the controller's threshold and confirmation, or the repairs that need none).

use crate::control::{self, Controller, Verdict};
use crate::observer::ObservedTask;
use crate::policy::{Context, Policy, Proposal};
use mapping::{Slot, Target};
use matrix::CommMatrix;
use std::collections::HashMap;
use topology::OsCpu;

/// Default for [`Decider`]'s `min_traffic`: communication (matrix total over live tasks)
/// required before the first decision, since the first faults are mostly first-touch
/// initialisation, not the program's pattern. With the per-task minimum below it sets the bar
/// for six tasks or fewer. The real layouts with 4 threads
/// (bench/layouts' first remap: c and f halo, stencil and pipeline, 3-s runs, two sets of 3
/// and 4 alternating rounds, 2026-11-27): first correct remap within 1 s in 9 of 18 and 8 of
/// 24 runs at 32, in 16 of 18 and 17 of 24 at 24; no wrong remap at either.
pub const DEFAULT_MIN_TRAFFIC: f64 = 24.0;
/// ... and at least this much per mapped task: with less, chance decides which of equally
/// strong links look weakest. pipeline x8 threads, 8 runs each, alternating (2026-11-25):
/// at 18 per task the first remap came at 1.02-1.13 s, one of them wrong (two chain links cut)
/// and never mended; at 12, at 0.73-0.92 s, three wrong and all mended by 1.82 s (first
/// correct remap: median 0.87 s). A wrong early remap still beats floating (about 3.5 links
/// cut on average), and the controller's confirmation interval guards each move, so acting
/// sooner wins. 12 and 64 against 6 and 32 (2026-11-26): bench/manager's threads patterns, 5
/// runs each, first correct remap (median) pairs 0.81 -> 0.51 s, ring 0.82 -> 0.52, distant
/// pairs 0.82 -> 0.51, pipeline 0.81 -> 0.52 (two of five first remaps wrong at 6, none at
/// 12; all five mended); the real layouts (bench/layouts' first_remap, 3 alternating
/// rounds, 8 s): halo x4 4.16/3.81 s and one run with none -> 2.91/2.01/2.86 s, halo x8
/// 7.41/6.71 s and one with none -> 4.61/3.76/3.21 s, pipeline x8 2.01/2.21 s and one with
/// none -> 0.90/1.01/2.39 s (the last after a wrong first remap at 1.01 s). A halo edge gives
/// about 10 events a second once found, so the minimum, not the agent, set its first remap.
/// 4 against 6 (2026-11-28, after the 50-ms confirming tick; the 8-thread rows of
/// bench/layouts' first remap, c and f halo, stencil, pipeline, 3-s runs, alternating, two
/// sets of 6 rounds): first correct remap within 1 s in 27 and 25 of 36 runs at 4, 19 and 19
/// of 36 at 6; median 0.71 s against 0.91 s; wrong remaps before it 5 + 14 against 11 + 10;
/// runs with none within 3 s 5 against 4 (the C halo's at 4: a wrong first split it did not
/// mend in time). With the 2026-11-27 set (17 against 13 of 24) that is 69 against 51 of
/// 96. bench/manager's heap patterns x8 threads, 2 alternating sets of 4 runs: first correct
/// remap (medians) 0.27-0.49 s against 0.43-0.58 s, the placements they end on the same.
pub const MIN_TRAFFIC_PER_TASK: f64 = 4.0;

/// The live tasks as the decision sees them, all in the same order.
pub struct Live<'a> {
    /// Their communication (symmetric), see [`live_matrix`].
    pub matrix: &'a CommMatrix,
    /// The tasks, one per matrix row.
    pub tasks: &'a [ObservedTask],
    /// The slot each runs on now.
    pub current: &'a [usize],
    /// The slots each may run on now.
    pub masks: &'a [Vec<usize>],
}

/// A proposal, judged.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    /// Move the tasks to `slots` (else keep them where they are).
    pub migrate: bool,
    /// The proposed slot of each live task.
    pub slots: Vec<usize>,
    /// Pin only the tasks whose slot changes ([`Proposal::only_moved`]).
    pub only_moved: bool,
    /// The kernel CPU each live task runs on now (its [`Live::current`] slot).
    pub current_os: Vec<OsCpu>,
    /// The kernel CPU of each live task's proposed slot: what it is pinned to.
    pub proposed_os: Vec<OsCpu>,
    /// Expected cost of the live placement over the tasks' masks ([`expected_cost`]).
    pub cost_now: f64,
    /// Cost of the proposal under the shared cost model (`mapping::cost::evaluate_matrix`).
    pub cost_new: f64,
    /// (cost_now - cost_new) / cost_now.
    pub gain: f64,
    /// Why it migrates or keeps: the policy's reason, a repair's, or the controller's.
    pub reason: String,
    /// The interval the decision was taken in.
    pub interval_ms: u64,
}

/// What came of one tick.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Too little traffic to decide on yet.
    Filling,
    /// The policy proposed nothing.
    Nothing,
    /// The policy proposed a placement; whether to move to it is in the choice.
    Judged(Choice),
}

/// The policy and the controller, and the previous proposal to confirm the next one by.
pub struct Decider {
    /// What to aim for.
    pub policy: Box<dyn Policy>,
    /// Whether a proposal is worth moving to, and the interval to the next tick.
    pub controller: Controller,
    min_traffic: f64,
    /// The previous tick's proposal: (task ids, slots).
    last_proposal: Option<(Vec<u32>, Vec<usize>)>,
}

impl Decider {
    /// `min_traffic`: see [`DEFAULT_MIN_TRAFFIC`].
    pub fn new(policy: Box<dyn Policy>, controller: Controller, min_traffic: f64) -> Decider {
        Decider {
            policy,
            controller,
            min_traffic,
            last_proposal: None,
        }
    }

    /// Whether the policy maps the matrix (then idle tasks are left out, and it waits for
    /// enough traffic).
    pub fn needs_traffic(&self) -> bool {
        self.policy.needs_traffic()
    }

    /// On a flat target ([`Target::is_flat`]) with policies that place by the matrix: pins the
    /// tasks of `live` that float where they run ([`pin_in_place`]), with no traffic to wait
    /// for, since no placement of them costs less than another. None when each is pinned to
    /// a PU of its own, they outnumber the PUs, one runs alone, or the policy does not map
    /// the matrix.
    pub fn pin_flat(&mut self, t: f64, target: &Target, live: &Live) -> Option<Choice> {
        if !self.policy.places_by_traffic() {
            return None;
        }
        let slots = pin_in_place(target, live)?;
        let reason = format!(
            "{} tasks running, at most one per PU, on PUs all equally far apart: pinned where \
             they ran without waiting for traffic (no placement of them costs less than another)",
            live.tasks.len()
        );
        let proposal = Proposal {
            slots,
            reason,
            self_judged: true,
            only_moved: false,
        };
        Some(self.judge(t, target, live, proposal))
    }

    /// Asks the policy for a placement of the live tasks at `t` seconds and judges it.
    pub fn decide(&mut self, t: f64, target: &Target, live: &Live) -> Outcome {
        let needed = self
            .min_traffic
            .max(MIN_TRAFFIC_PER_TASK * live.tasks.len() as f64);
        if self.policy.needs_traffic() && live.matrix.total() < needed {
            self.controller.filling(live.matrix.total());
            return Outcome::Filling;
        }
        let proposal = if live.tasks.is_empty() {
            None
        } else {
            self.policy.propose(&Context {
                matrix: live.matrix,
                target,
                current: live.current,
                tasks: live.tasks,
            })
        };
        let Some(proposal) = proposal else {
            self.controller.hold();
            return Outcome::Nothing;
        };
        Outcome::Judged(self.judge(t, target, live, proposal))
    }

    fn judge(&mut self, t: f64, target: &Target, live: &Live, proposal: Proposal) -> Choice {
        let cost_now = expected_cost(live.matrix, target, live.masks);
        let cost_new = mapping::cost::evaluate_matrix(live.matrix, target, &proposal.slots).cost;
        let gain = (cost_now - cost_new) / cost_now.max(1e-12);
        let current_os = target.os_cpus(live.current);
        // The mapping in force, for the controller: a floating task's CPU of the moment is
        // none (the scheduler moves it on), so a proposal that only matches where floating
        // tasks happen to run is not "already live".
        let in_force: Vec<OsCpu> = live
            .masks
            .iter()
            .zip(&current_os)
            .map(|(m, &cpu)| if m.len() == 1 { cpu } else { FLOATING })
            .collect();
        let proposed_os = target.os_cpus(&proposal.slots);
        let interval_ms = self.controller.interval_ms;
        // The previous proposal, costed on this matrix (same tasks only).
        let tids: Vec<u32> = live.tasks.iter().map(|task| task.tid).collect();
        let previous_cost = match &self.last_proposal {
            Some((previous, slots)) if *previous == tids => {
                Some(mapping::cost::evaluate_matrix(live.matrix, target, slots).cost)
            }
            _ => None,
        };
        self.last_proposal = Some((tids, proposal.slots.clone()));
        let pus = target.allowed_slots().len();
        let proposed_masks: Vec<[usize; 1]> = proposal.slots.iter().map(|&s| [s]).collect();
        let stacked_now = control::stacked(live.masks, pus)
            .filter(|_| control::stacked(&proposed_masks, pus).is_none());
        let mut reason = proposal.reason.clone();
        let verdict = if let Some((slot, k)) = stacked_now {
            // A repair, not an optimisation: no threshold, no confirmation interval.
            reason = format!(
                "{k} busy tasks are pinned to PU {} while a balanced placement has at most {}: rebalanced ({})",
                target.os_cpu(Slot(slot)),
                live.tasks.len().div_ceil(pus.max(1)),
                proposal.reason
            );
            self.controller.accept(t, &in_force);
            Verdict::Migrate { gain }
        } else if let Some(slot) = pinned_outside(live.masks, target) {
            // Also a repair: the PU is another huddle manager's now (crate::claims), and
            // two busy tasks of two programs would share it at any predicted gain.
            reason = format!(
                "a task is pinned to PU {}, which this manager may not use now (another huddle \
                 manager on this machine pins there): moved ({})",
                target.os_cpu(Slot(slot)),
                proposal.reason
            );
            self.controller.accept(t, &in_force);
            Verdict::Migrate { gain }
        } else if !proposal.self_judged
            && cost_new <= cost_now * (1.0 + 1e-9)
            && (cost_now - cost_new) < self.controller.threshold * cost_now
            && control::floating_to_pin(live.masks, &proposal.slots, pus)
        {
            // Below the threshold the controller would keep them floating; pinned, they
            // keep their caches ([`control::floating_to_pin`]).
            reason = format!(
                "{} busy tasks floated over the PUs: pinned one per PU at no more \
                 communication cost ({})",
                live.tasks.len(),
                proposal.reason
            );
            self.controller.accept(t, &in_force);
            Verdict::Migrate { gain }
        } else if !proposal.self_judged {
            self.controller.decide(
                t,
                &in_force,
                cost_now,
                &proposed_os,
                cost_new,
                previous_cost,
            )
        } else if proposed_os == current_os
            && (proposal.only_moved
                || live
                    .masks
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
            self.controller.accept(t, &in_force);
            Verdict::Migrate { gain }
        };
        let (migrate, gain, reason) = match verdict {
            Verdict::Migrate { gain } => (true, gain, reason),
            Verdict::Keep { reason } => (false, gain, reason),
        };
        Choice {
            migrate,
            slots: proposal.slots,
            only_moved: proposal.only_moved,
            current_os,
            proposed_os,
            cost_now,
            cost_new,
            gain,
            reason,
            interval_ms,
        }
    }
}

/// Where to pin the live tasks on a flat `target` ([`Target::is_flat`], the caller's to
/// check) when some of them float, or two are pinned to one PU, and they are no more than its
/// PUs: each where it runs now (a task pinned already stays), the second of two on one PU on
/// a free one. None otherwise. Two on one PU happen without anyone choosing it: a thread or
/// process started by one huddle pinned inherits its PU (a lone OpenMP master pinned at
/// 0.1 s, its worker created after it: layout-f stencil x2 ran 2.8 times as long as plain,
/// both threads on one PU to the end, with no traffic to wake the other repairs; 2026-11-27).
/// A lone task is not pinned: alone it has nothing to gain, and what it starts next would
/// inherit its PU (mpirun pinned at 0.1 s put LAMMPS's 4 ranks, forked after, on one PU until
/// traffic let a repair spread them at 0.6 s; 2026-11-27).
/// On the 16-core lent machine (one L3) binding LAMMPS's 16 ranks from exec ran 12 % faster
/// than the OS over 3000 steps while huddle, waiting for traffic, pinned them at 0.66 s and
/// gained nothing (bench/results/device.md, 2026-11-27).
pub fn pin_in_place(target: &Target, live: &Live) -> Option<Vec<usize>> {
    let allowed: Vec<usize> = target.allowed_slots().iter().map(|s| s.0).collect();
    let n = live.tasks.len();
    let all_pinned = live.masks.iter().all(|m| m.len() == 1);
    let stacked = || {
        let mut pus: Vec<usize> = live.masks.iter().map(|m| m[0]).collect();
        pus.sort_unstable();
        pus.dedup();
        pus.len() < n
    };
    if n < 2 || n > allowed.len() || (all_pinned && !stacked()) {
        return None;
    }
    let mut taken = vec![false; target.num_pus()];
    let mut slots: Vec<Option<usize>> = vec![None; n];
    // Pinned tasks first, then floating ones where they run.
    let pinned = |i: usize| live.masks[i].len() == 1;
    for first in [true, false] {
        for i in (0..n).filter(|&i| pinned(i) == first) {
            let s = live.current[i];
            if target.is_allowed(Slot(s)) && !taken[s] {
                taken[s] = true;
                slots[i] = Some(s);
            }
        }
    }
    let mut free = allowed.into_iter().filter(|&s| !taken[s]);
    Some(
        slots
            .into_iter()
            .map(|s| {
                s.or_else(|| free.next())
                    .expect("no more tasks than allowed PUs")
            })
            .collect(),
    )
}

/// No kernel CPU: what a floating task is mapped to in the mapping in force.
const FLOATING: OsCpu = OsCpu(u32::MAX);

/// The slot of the first task pinned to one PU that `target` does not allow.
fn pinned_outside(masks: &[Vec<usize>], target: &Target) -> Option<usize> {
    masks.iter().find_map(|m| match m.as_slice() {
        [s] if !target.is_allowed(Slot(*s)) => Some(*s),
        _ => None,
    })
}

/// The matrix restricted to the tasks `idx`, symmetrized.
pub fn live_matrix(matrix: &CommMatrix, idx: &[usize]) -> CommMatrix {
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

#[cfg(test)]
mod tests {
    use super::*;
    use topology::Machine;

    /// Four PUs: two L2s of two PUs each, one package.
    fn four_pus() -> Target {
        Target::machine(Machine::from_synthetic("pack:1 l2:2 core:2 pu:1").unwrap())
    }

    fn tasks(n: usize) -> Vec<ObservedTask> {
        (0..n as u32)
            .map(|k| ObservedTask {
                tid: 100 + k,
                pid: 100,
                comm: "w".into(),
                first_seen: 0.0,
                whole_process: false,
            })
            .collect()
    }

    /// Pairs (0, 2) and (1, 3) talk.
    fn two_pairs(w: f64) -> CommMatrix {
        let mut m = CommMatrix::zeros(4);
        for (a, b) in [(0, 2), (1, 3)] {
            m.set(a, b, w);
            m.set(b, a, w);
        }
        m
    }

    fn comm() -> Decider {
        Decider::new(
            crate::policy::parse("comm", 1, None).unwrap(),
            Controller::default(),
            DEFAULT_MIN_TRAFFIC,
        )
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

    #[test]
    fn the_live_matrix_keeps_the_live_rows_symmetrized() {
        let mut m = CommMatrix::zeros(3);
        m.set(0, 2, 4.0);
        m.set(2, 0, 2.0);
        m.set(0, 1, 9.0);
        let sub = live_matrix(&m, &[0, 2]);
        assert_eq!(sub.n(), 2);
        assert_eq!(sub.get(0, 1), sub.get(1, 0));
        assert_eq!(sub.get(0, 1) + sub.get(1, 0), 6.0);
    }

    #[test]
    fn too_little_traffic_is_filling() {
        let target = four_pus();
        let (t, m) = (tasks(4), two_pairs(5.0));
        let masks = vec![vec![0, 1, 2, 3]; 4];
        let live = Live {
            matrix: &m,
            tasks: &t,
            current: &[0, 1, 2, 3],
            masks: &masks,
        };
        // 10 events < max(24, 6 per task).
        assert_eq!(comm().decide(0.1, &target, &live), Outcome::Filling);
    }

    /// Partners apart and pinned: the first proposal waits for the next tick's confirmation,
    /// which then migrates to partners on one L2.
    #[test]
    fn a_gain_is_confirmed_by_the_next_tick_then_taken() {
        let target = four_pus();
        let (t, m) = (tasks(4), two_pairs(100.0));
        // 0 and 2 on different L2s, 1 and 3 too.
        let current = [0, 1, 2, 3];
        let masks: Vec<Vec<usize>> = current.iter().map(|&s| vec![s]).collect();
        let live = Live {
            matrix: &m,
            tasks: &t,
            current: &current,
            masks: &masks,
        };
        let mut d = comm();
        let Outcome::Judged(first) = d.decide(0.1, &target, &live) else {
            panic!("a proposal");
        };
        assert!(!first.migrate, "waits for confirmation: {first:?}");
        let Outcome::Judged(second) = d.decide(0.2, &target, &live) else {
            panic!("a proposal");
        };
        assert!(second.migrate, "{second:?}");
        assert!(second.gain > 0.05 && second.cost_new < second.cost_now);
        let l2 = |s: usize| s / 2;
        assert_eq!(l2(second.slots[0]), l2(second.slots[2]), "{second:?}");
        assert_eq!(l2(second.slots[1]), l2(second.slots[3]), "{second:?}");
        assert_eq!(second.current_os, [0, 1, 2, 3].map(OsCpu));
    }

    /// Four floating tasks on two PUs that happen to run where the proposal puts them
    /// (partners together): that is no placement in force, so the confirmed proposal is
    /// taken, not kept as "already live" (a node manager of the tests' 2-PU namespace hosts
    /// kept its ranks floating for a whole job so).
    #[test]
    fn floating_tasks_where_the_proposal_puts_them_are_still_pinned() {
        let target = Target::machine(Machine::from_synthetic("pack:1 core:2 pu:1").unwrap());
        let (t, m) = (tasks(4), two_pairs(100.0));
        let masks = vec![vec![0, 1]; 4];
        let mut d = comm();
        let apart = Live {
            matrix: &m,
            tasks: &t,
            current: &[0, 0, 1, 1],
            masks: &masks,
        };
        let Outcome::Judged(first) = d.decide(0.1, &target, &apart) else {
            panic!("a proposal");
        };
        assert!(!first.migrate, "waits for confirmation: {first:?}");
        assert_eq!(first.slots[0], first.slots[2], "{first:?}");
        let together = Live {
            current: &first.slots,
            ..apart
        };
        let Outcome::Judged(second) = d.decide(0.2, &target, &together) else {
            panic!("a proposal");
        };
        assert!(second.migrate, "{second:?}");
        assert_eq!(second.slots, first.slots);
    }

    /// The `comm` policy's first judged choice for tasks pinned one PU each at `current`.
    fn first_choice(target: &Target, m: &CommMatrix, current: &[usize]) -> Choice {
        let t = tasks(current.len());
        let masks: Vec<Vec<usize>> = current.iter().map(|&s| vec![s]).collect();
        let live = Live {
            matrix: m,
            tasks: &t,
            current,
            masks: &masks,
        };
        let Outcome::Judged(c) = comm().decide(0.1, target, &live) else {
            panic!("a proposal");
        };
        c
    }

    #[test]
    fn busy_tasks_stacked_on_one_pu_are_rebalanced_at_once() {
        // All four pinned to PU 0.
        let c = first_choice(&four_pus(), &two_pairs(100.0), &[0, 0, 0, 0]);
        assert!(c.migrate, "no confirmation for a repair: {c:?}");
        assert!(c.reason.contains("rebalanced"), "{}", c.reason);
    }

    /// Partners pinned on PUs another manager took since (crate::claims): moved to the
    /// others at once, though the move gains nothing on communication.
    #[test]
    fn tasks_on_another_managers_pus_move_at_once() {
        let mut target = four_pus();
        target.keep_only(&[Slot(2), Slot(3)]);
        let mut m = CommMatrix::zeros(2);
        m.set(0, 1, 500.0);
        m.set(1, 0, 500.0);
        // On one L2 (0 and 1) as they would be on the other (2 and 3): no gain.
        let c = first_choice(&target, &m, &[0, 1]);
        assert!(
            c.migrate && c.reason.contains("another huddle manager"),
            "{c:?}"
        );
        assert_eq!(c.gain, 0.0, "{c:?}");
        let mut slots = c.slots.clone();
        slots.sort_unstable();
        assert_eq!(slots, [2, 3]);
        // On the whole machine the same tasks stay.
        let c = first_choice(&four_pus(), &m, &[0, 1]);
        assert!(!c.migrate, "{c:?}");
    }

    #[test]
    fn floating_partners_are_pinned_without_a_gain() {
        // Two PUs with their own L2s: two tasks floating cost as much as pinned apart.
        let target = Target::machine(Machine::from_synthetic("pack:1 l2:2 core:1 pu:1").unwrap());
        let t = tasks(2);
        let mut m = CommMatrix::zeros(2);
        m.set(0, 1, 500.0);
        m.set(1, 0, 500.0);
        let masks = vec![vec![0, 1]; 2];
        let live = Live {
            matrix: &m,
            tasks: &t,
            current: &[0, 1],
            masks: &masks,
        };
        let Outcome::Judged(c) = comm().decide(0.1, &target, &live) else {
            panic!("a proposal");
        };
        assert!(c.migrate && c.reason.contains("floated"), "{c:?}");
        assert_ne!(c.slots[0], c.slots[1]);
    }

    #[test]
    fn a_static_placement_already_pinned_is_kept() {
        let target = four_pus();
        let t = tasks(2);
        let m = CommMatrix::zeros(2);
        let mut d = Decider::new(
            crate::policy::parse("static:compact", 1, None).unwrap(),
            Controller::default(),
            DEFAULT_MIN_TRAFFIC,
        );
        let masks = vec![vec![0, 1, 2, 3]; 2];
        let live = Live {
            matrix: &m,
            tasks: &t,
            current: &[0, 1],
            masks: &masks,
        };
        let Outcome::Judged(first) = d.decide(0.1, &target, &live) else {
            panic!("static proposes without traffic");
        };
        assert!(first.migrate, "applied at once: {first:?}");
        // Pinned where the policy put them: nothing more to do.
        let pinned: Vec<Vec<usize>> = first.slots.iter().map(|&s| vec![s]).collect();
        let live = Live {
            masks: &pinned,
            current: &first.slots,
            ..live
        };
        let Outcome::Judged(second) = d.decide(0.2, &target, &live) else {
            panic!("a proposal");
        };
        assert!(!second.migrate, "{second:?}");
        assert!(second.reason.contains("already live"), "{}", second.reason);
    }

    #[test]
    fn the_observe_policy_proposes_nothing() {
        let target = four_pus();
        let (t, m) = (tasks(4), two_pairs(100.0));
        let masks = vec![vec![0, 1, 2, 3]; 4];
        let mut d = Decider::new(
            crate::policy::parse("none", 1, None).unwrap(),
            Controller::default(),
            DEFAULT_MIN_TRAFFIC,
        );
        let live = Live {
            matrix: &m,
            tasks: &t,
            current: &[0, 1, 2, 3],
            masks: &masks,
        };
        assert_eq!(d.decide(0.1, &target, &live), Outcome::Nothing);
    }

    /// On a flat machine (four cores, one cache shared by all) floating tasks are pinned
    /// where they run, with no traffic: a pinned task keeps its PU, the second of two on one
    /// PU goes to a free one, pinned or not; nothing when each has a PU of its own, they
    /// outnumber the PUs, or one runs alone.
    #[test]
    fn floating_tasks_on_a_flat_machine_are_pinned_in_place_without_traffic() {
        let flat = Target::machine(Machine::from_synthetic("pack:1 l3:1 core:4 pu:1").unwrap());
        assert!(flat.is_flat());
        let all = vec![0, 1, 2, 3];
        let none = CommMatrix::zeros(3);
        let t = tasks(3);
        let live = |current: &'static [usize], masks: &'static [Vec<usize>]| Live {
            matrix: &none,
            tasks: &t,
            current,
            masks,
        };
        let floating: &'static [Vec<usize>] = Box::leak(vec![all.clone(); 3].into_boxed_slice());
        assert_eq!(
            pin_in_place(&flat, &live(&[1, 1, 3], floating)),
            Some(vec![1, 0, 3])
        );
        let one_pinned: &'static [Vec<usize>] =
            Box::leak(vec![vec![2], all.clone(), all.clone()].into_boxed_slice());
        assert_eq!(
            pin_in_place(&flat, &live(&[2, 2, 0], one_pinned)),
            Some(vec![2, 1, 0]),
            "the pinned task keeps PU 2"
        );
        let pinned: &'static [Vec<usize>] =
            Box::leak(vec![vec![0], vec![1], vec![2]].into_boxed_slice());
        assert_eq!(pin_in_place(&flat, &live(&[0, 1, 2], pinned)), None);
        // A thread created by a pinned one shares its PU: it goes to a free one.
        let inherited: &'static [Vec<usize>] =
            Box::leak(vec![vec![1], vec![1], vec![2]].into_boxed_slice());
        assert_eq!(
            pin_in_place(&flat, &live(&[1, 1, 2], inherited)),
            Some(vec![1, 0, 2])
        );
        let five = tasks(5);
        let five_floating = vec![all.clone(); 5];
        let over = Live {
            matrix: &CommMatrix::zeros(5),
            tasks: &five,
            current: &[0, 1, 2, 3, 0],
            masks: &five_floating,
        };
        assert_eq!(pin_in_place(&flat, &over), None, "more tasks than PUs");
        let one = tasks(1);
        let lone = Live {
            matrix: &CommMatrix::zeros(1),
            tasks: &one,
            current: &[2],
            masks: std::slice::from_ref(&all),
        };
        assert_eq!(pin_in_place(&flat, &lone), None, "a lone task");
        // Through the decider: a migration with no traffic at all, applied as chosen.
        let choice = comm()
            .pin_flat(0.1, &flat, &live(&[1, 1, 3], floating))
            .expect("pinned");
        assert!(choice.migrate, "{choice:?}");
        assert_eq!(choice.slots, vec![1, 0, 3]);
        assert!(!choice.only_moved);
        // A policy that does not map the matrix pins nothing.
        let mut none_policy = Decider::new(
            crate::policy::parse("none", 1, None).unwrap(),
            Controller::default(),
            DEFAULT_MIN_TRAFFIC,
        );
        assert!(none_policy
            .pin_flat(0.1, &flat, &live(&[1, 1, 3], floating))
            .is_none());
    }
}
