//! When to migrate, as CDSM's loop does it, plus the guards a long run needs.
//!
//! - Interval: starts at 100 ms, grows by 50 ms while the mapping stays, halves when it
//!   changes, always within 50 ms..2 s. It does not grow while a proposal waits for its
//!   confirmation: that wait is one interval, not a sign that the mapping is good.
//! - Threshold: migrate only when the candidate's predicted cost is at least `threshold`
//!   (default 5 %) below the live mapping's, under the same cost model and matrix.
//! - No ping-pong: a mapping the loop migrated away from is not taken again for
//!   `return_window_s` (default 10 s), whatever its predicted gain.
//! - Confirmation: a proposal is acted on only when the previous tick's proposal, costed
//!   on the current matrix, would also cut the cost by the threshold. So a first proposal
//!   waits for the next tick, and a move the newer matrix no longer supports is not made. An
//!   early matrix holds few events: one bench run in five had put pipeline x8 on a mapping
//!   twice the ground truth's cost by acting on the first proposal (at 0.47 s).
//! - The tick that confirms comes [`MIN_MS`] after the proposal, not a whole interval (CDSM's
//!   own interval starts at 50 ms). bench/layouts' 12 first-remap rows (c and f; halo,
//!   stencil, pipeline; 4 and 8 threads), 3-s runs, two sets of 4 alternating rounds
//!   (2026-11-28): first correct remap within 1 s in 25 and 28 of 48 runs with the whole
//!   interval, 31 and 32 of 48 at 50 ms; medians 0.89 and 0.89 s against 0.85 and 0.86 s;
//!   wrong remaps before the correct one 13 and 5 against 13 and 7.

use std::collections::VecDeque;
use topology::OsCpu;

/// The interval the loop starts with, in ms.
pub const START_MS: u64 = 100;
/// How much the interval grows (ms) at each tick the mapping stays.
pub const STEP_MS: u64 = 50;
/// The shortest interval, in ms (the floor of halving).
pub const MIN_MS: u64 = 50;
/// The longest interval, in ms (the ceiling of growing).
pub const MAX_MS: u64 = 2000;
/// Default minimum predicted cost reduction before a migration, a fraction (5 %).
pub const DEFAULT_THRESHOLD: f64 = 0.05;
/// Default time, in seconds, during which a mapping migrated away from is not taken again.
pub const DEFAULT_RETURN_WINDOW_S: f64 = 10.0;
/// How many abandoned mappings are remembered.
const MEMORY: usize = 8;

/// What to do with a candidate mapping.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Move to the candidate.
    Migrate {
        /// Predicted cost reduction, (current - candidate) / current, a fraction; can be 0 or
        /// negative for a repair that [`crate::decide`] makes without the threshold.
        gain: f64,
    },
    /// Stay on the live mapping.
    Keep {
        /// Why, in words for the report.
        reason: String,
    },
}

/// Decides whether to migrate and how long to wait for the next tick (see the module
/// documentation). Times are seconds of the run's clock; mappings are PU OS indexes per task.
#[derive(Clone, Debug)]
pub struct Controller {
    /// Time to the next tick, in ms; the controller keeps it within [`MIN_MS`]..=[`MAX_MS`].
    pub interval_ms: u64,
    /// Minimum predicted cost reduction before a migration, a fraction (0.05 = 5 %).
    pub threshold: f64,
    /// Seconds after leaving a mapping during which it is not taken again.
    pub return_window_s: f64,
    /// (mapping, time it was left).
    abandoned: VecDeque<(Vec<OsCpu>, f64)>,
    /// The matrix total at the last tick that had too little traffic to decide on.
    filled: f64,
    /// The last tick's proposal waits to be confirmed: the next tick comes sooner.
    awaiting: bool,
}

impl Default for Controller {
    fn default() -> Self {
        Controller::new(DEFAULT_THRESHOLD)
    }
}

impl Controller {
    /// A controller at [`START_MS`] with `threshold` (a fraction) and
    /// [`DEFAULT_RETURN_WINDOW_S`], remembering no mapping.
    pub fn new(threshold: f64) -> Controller {
        Controller {
            interval_ms: START_MS,
            threshold,
            return_window_s: DEFAULT_RETURN_WINDOW_S,
            abandoned: VecDeque::new(),
            filled: 0.0,
            awaiting: false,
        }
    }

    /// Judges a candidate mapping against the live one at time `now` (seconds) and adapts
    /// the interval. `current`/`candidate`: each task's kernel CPU.
    /// `previous_cost`: the cost, on the current matrix, of the previous interval's proposal
    /// (None when there was none, or for another set of tasks).
    pub fn decide(
        &mut self,
        now: f64,
        current: &[OsCpu],
        current_cost: f64,
        candidate: &[OsCpu],
        candidate_cost: f64,
        previous_cost: Option<f64>,
    ) -> Verdict {
        let (verdict, awaits_confirmation) = self.judge(
            now,
            current,
            current_cost,
            candidate,
            candidate_cost,
            previous_cost,
        );
        match verdict {
            Verdict::Migrate { .. } => self.accept(now, current),
            Verdict::Keep { .. } if awaits_confirmation => {}
            Verdict::Keep { .. } => self.hold(),
        }
        self.awaiting = awaits_confirmation;
        verdict
    }

    /// How long to wait for the next tick, in ms: the interval, or [`MIN_MS`] while a
    /// proposal waits to be confirmed (see the module documentation).
    pub fn wait_ms(&self) -> u64 {
        if self.awaiting {
            self.interval_ms.min(MIN_MS)
        } else {
            self.interval_ms
        }
    }

    /// The mapping stays as it is (kept, or nothing was proposed): the interval grows.
    pub fn hold(&mut self) {
        self.awaiting = false;
        self.interval_ms = (self.interval_ms + STEP_MS).min(MAX_MS);
    }

    /// The matrix holds `total` events, too few to decide on. While it grows the interval
    /// stays: growing it (100, 150, 200 ... ms) put the tick after the traffic arrived up to
    /// 0.4 s late, and the confirming tick later still (first remaps at 1.77 s on pairs x8,
    /// bench/manager 2026-11-24). A program whose matrix does not grow backs off as before,
    /// and once it grows again the interval is back at [`START_MS`]: a program whose master
    /// initialises its data shows no traffic for its first few hundred ms, and the interval
    /// grown meanwhile (150-200 ms) delayed both the first proposal and its confirmation
    /// (layout-c pipeline x8, layout-f halo x8, 2026-11-27).
    pub fn filling(&mut self, total: f64) {
        self.awaiting = false;
        if total <= self.filled {
            self.hold();
        } else {
            self.interval_ms = self.interval_ms.min(START_MS);
        }
        self.filled = total;
    }

    /// Records a migration away from `current` that a policy decided by its own rules: the
    /// interval halves and `current` joins the mappings not to return to.
    pub fn accept(&mut self, now: f64, current: &[OsCpu]) {
        self.awaiting = false;
        self.interval_ms = (self.interval_ms / 2).max(MIN_MS);
        if self.abandoned.len() == MEMORY {
            self.abandoned.pop_front();
        }
        self.abandoned.push_back((current.to_vec(), now));
    }

    fn judge(
        &self,
        now: f64,
        current: &[OsCpu],
        current_cost: f64,
        candidate: &[OsCpu],
        candidate_cost: f64,
        previous_cost: Option<f64>,
    ) -> (Verdict, bool) {
        // The flag: the move is kept back only to be confirmed.
        let keep = |reason| (Verdict::Keep { reason }, false);
        let wait = |reason| (Verdict::Keep { reason }, true);
        if candidate == current {
            return keep("the live mapping is already the best found".into());
        }
        if current_cost <= 0.0 {
            return keep("no communication cost to reduce".into());
        }
        let gain = (current_cost - candidate_cost) / current_cost;
        if gain < self.threshold {
            return keep(format!(
                "predicted gain {:.1}% is below the {:.1}% threshold",
                gain * 100.0,
                self.threshold * 100.0
            ));
        }
        match previous_cost {
            None => {
                return wait("a first proposal waits for the next tick to be confirmed".into());
            }
            Some(p) if (current_cost - p) / current_cost < self.threshold => {
                return wait(format!(
                    "the last interval's proposal would gain only {:.1}% on this matrix: \
                     the matrix is still settling",
                    (current_cost - p) / current_cost * 100.0
                ));
            }
            Some(_) => {}
        }
        if let Some((_, left)) = self.abandoned.iter().rev().find(|(m, _)| m == candidate) {
            if now - left < self.return_window_s {
                return keep(format!(
                    "refusing to return within {:.0} s to a mapping left at {left:.1} s",
                    self.return_window_s
                ));
            }
        }
        (Verdict::Migrate { gain }, false)
    }
}

/// A PU that holds more of the tasks pinned to a single PU (`masks`: each task's allowed
/// slots) than a balanced placement of all `masks.len()` tasks over `pus` PUs would, and how
/// many it holds. The mapping puts partners together but never stacks busy tasks: a live
/// placement that does (tasks mapped before the idle tracker knew which were busy, or pinned
/// by someone else) costs nothing in the model while its tasks share one PU's time.
pub fn stacked<T: AsRef<[usize]>>(masks: &[T], pus: usize) -> Option<(usize, usize)> {
    if masks.is_empty() || pus == 0 {
        return None;
    }
    let limit = masks.len().div_ceil(pus);
    let mut count = std::collections::BTreeMap::new();
    for m in masks {
        if let [pu] = m.as_ref() {
            *count.entry(*pu).or_insert(0usize) += 1;
        }
    }
    count.into_iter().find(|&(_, k)| k > limit)
}

/// Busy tasks of which some float (a mask of more than one PU), no more of them than PUs, and
/// a candidate that gives each a PU of its own: pinning them there is worth doing even where
/// it gains no communication, since it spares them the scheduler's migrations. LAMMPS with 16
/// ranks on 16 cores of one L3 ran in 0.87 of its unbound time when bound one rank per core,
/// while huddle, which left them floating, ran in 0.97 (bench/device, 2026-11-25).
pub fn floating_to_pin<T: AsRef<[usize]>>(masks: &[T], candidate: &[usize], pus: usize) -> bool {
    let distinct: std::collections::BTreeSet<&usize> = candidate.iter().collect();
    masks.len() <= pus
        && masks.iter().any(|m| m.as_ref().len() > 1)
        && distinct.len() == candidate.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(cpus: &[u32]) -> Vec<OsCpu> {
        cpus.iter().map(|&c| OsCpu(c)).collect()
    }

    #[test]
    fn floating_tasks_are_pinned_only_one_per_pu_and_not_when_oversubscribed() {
        let all = vec![0, 1, 2, 3];
        // Two floating tasks, a PU each: pin.
        assert!(floating_to_pin(&[all.clone(), all.clone()], &[0, 2], 4));
        // Both on one PU: not this rule's business.
        assert!(!floating_to_pin(&[all.clone(), all.clone()], &[1, 1], 4));
        // Already pinned: nothing floats.
        assert!(!floating_to_pin(&[vec![0], vec![1]], &[2, 3], 4));
        // More tasks than PUs: some must share, the communication model decides.
        assert!(!floating_to_pin(
            &[all.clone(), all.clone(), all],
            &[0, 1, 2],
            2
        ));
    }

    #[test]
    fn stacked_tasks_are_found_and_balanced_ones_are_not() {
        // Two busy tasks pinned to PU 0 of two: stacked.
        assert_eq!(stacked(&[vec![0], vec![0]], 2), Some((0, 2)));
        // One per PU, or free to run anywhere: not.
        assert_eq!(stacked(&[vec![0], vec![1]], 2), None);
        assert_eq!(stacked(&[vec![0], vec![0, 1]], 2), None);
        // Five tasks on two PUs: three on one is balanced, four is not.
        let three = [vec![0], vec![0], vec![0], vec![1], vec![1]];
        assert_eq!(stacked(&three, 2), None);
        let four = [vec![1], vec![1], vec![1], vec![1], vec![0]];
        assert_eq!(stacked(&four, 2), Some((1, 4)));
        assert_eq!(stacked::<Vec<usize>>(&[], 2), None);
    }

    #[test]
    fn interval_grows_while_stable_and_halves_on_change() {
        let mut c = Controller::default();
        assert_eq!(c.interval_ms, 100);
        for _ in 0..3 {
            c.decide(0.0, &os(&[0, 1]), 10.0, &os(&[0, 1]), 10.0, Some(10.0));
        }
        assert_eq!(c.interval_ms, 250);
        c.hold();
        assert_eq!(c.interval_ms, 300);
        assert!(matches!(
            c.decide(1.0, &os(&[0, 1]), 10.0, &os(&[1, 0]), 5.0, Some(5.0)),
            Verdict::Migrate { .. }
        ));
        assert_eq!(c.interval_ms, 150);
        for _ in 0..100 {
            c.decide(2.0, &os(&[1, 0]), 5.0, &os(&[1, 0]), 5.0, Some(5.0));
        }
        assert_eq!(c.interval_ms, MAX_MS);
        for t in 0..20 {
            // Alternating candidates, each migration halves; never below the floor.
            let (a, b) = if t % 2 == 0 {
                (os(&[0, 1]), os(&[1, 0]))
            } else {
                (os(&[1, 0]), os(&[0, 1]))
            };
            c.return_window_s = 0.0;
            c.decide(100.0 + t as f64, &a, 10.0, &b, 1.0, Some(1.0));
        }
        assert_eq!(c.interval_ms, MIN_MS);
    }

    #[test]
    fn small_gains_do_not_migrate() {
        let mut c = Controller::new(0.05);
        assert!(matches!(
            c.decide(0.0, &os(&[0, 1]), 100.0, &os(&[1, 0]), 96.0, Some(96.0)),
            Verdict::Keep { .. }
        ));
        assert_eq!(
            c.decide(0.0, &os(&[0, 1]), 100.0, &os(&[1, 0]), 95.0, Some(95.0)),
            Verdict::Migrate { gain: 0.05 }
        );
        assert!(matches!(
            c.decide(0.0, &os(&[0, 1]), 0.0, &os(&[1, 0]), 0.0, Some(0.0)),
            Verdict::Keep { .. }
        ));
    }

    #[test]
    fn a_proposal_is_acted_on_once_the_next_interval_confirms_it() {
        let mut c = Controller::new(0.05);
        let (a, b) = (os(&[0, 0, 1, 1]), os(&[0, 1, 0, 1]));
        // First proposal: wait.
        let v = c.decide(0.1, &a, 100.0, &b, 50.0, None);
        assert!(
            matches!(&v, Verdict::Keep { reason } if reason.contains("first")),
            "{v:?}"
        );
        // The matrix moved: last interval's proposal would now gain only 2 %.
        let v = c.decide(0.2, &a, 100.0, &b, 50.0, Some(98.0));
        assert!(
            matches!(&v, Verdict::Keep { reason } if reason.contains("settling")),
            "{v:?}"
        );
        // Waiting for confirmation is not holding a good mapping: the interval stayed, and
        // the confirming tick comes sooner.
        assert_eq!(c.interval_ms, START_MS);
        assert_eq!(c.wait_ms(), MIN_MS);
        // It would still gain the threshold: the move is confirmed.
        assert!(matches!(
            c.decide(0.3, &a, 100.0, &b, 50.0, Some(95.0)),
            Verdict::Migrate { .. }
        ));
        // After the move, the halved interval as before.
        assert_eq!(c.wait_ms(), START_MS / 2);
    }

    #[test]
    fn only_a_waiting_proposal_shortens_the_wait() {
        let mut c = Controller::new(0.05);
        let (a, b) = (os(&[0, 1]), os(&[1, 0]));
        assert_eq!(c.wait_ms(), START_MS);
        c.decide(0.1, &a, 100.0, &b, 50.0, None);
        assert_eq!(c.wait_ms(), MIN_MS);
        // The next tick had too little traffic, or nothing to propose: the interval again.
        c.filling(10.0);
        assert_eq!(c.wait_ms(), START_MS);
        c.decide(0.2, &a, 100.0, &b, 50.0, None);
        c.hold();
        assert_eq!(c.wait_ms(), START_MS + STEP_MS);
        // Below the threshold: nothing waits.
        c.decide(0.3, &a, 100.0, &b, 99.0, None);
        assert_eq!(c.wait_ms(), START_MS + 2 * STEP_MS);
    }

    #[test]
    fn the_interval_stays_while_the_matrix_fills_grows_once_it_stops_and_restarts_with_it() {
        let mut c = Controller::new(0.05);
        for total in [3.0, 10.0, 40.0, 90.0] {
            c.filling(total);
            assert_eq!(c.interval_ms, START_MS, "filling at {total}");
        }
        c.filling(90.0);
        c.filling(90.0);
        assert_eq!(
            c.interval_ms,
            START_MS + 2 * STEP_MS,
            "no new traffic: backs off"
        );
        c.filling(0.0);
        assert_eq!(
            c.interval_ms,
            START_MS + 3 * STEP_MS,
            "an aged, emptier matrix too"
        );
        c.filling(5.0);
        assert_eq!(c.interval_ms, START_MS, "traffic again: the starting pace");
    }

    #[test]
    fn never_returns_to_a_mapping_it_just_left() {
        let mut c = Controller::new(0.05);
        let (a, b) = (os(&[0, 0, 1, 1]), os(&[0, 1, 0, 1]));
        assert!(matches!(
            c.decide(1.0, &a, 100.0, &b, 50.0, Some(50.0)),
            Verdict::Migrate { .. }
        ));
        // The matrix changed and now `a` looks better again: refused inside the window...
        let v = c.decide(2.0, &b, 100.0, &a, 10.0, Some(10.0));
        assert!(
            matches!(&v, Verdict::Keep { reason } if reason.contains("refusing")),
            "{v:?}"
        );
        // ... and allowed once the window has passed.
        assert!(matches!(
            c.decide(12.0, &b, 100.0, &a, 10.0, Some(10.0)),
            Verdict::Migrate { .. }
        ));
    }
}
