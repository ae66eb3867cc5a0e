//! The one cost model every algorithm, report and test uses.
//!
//! For a matrix M and a mapping s (task -> PU):
//! `cost = sum over pairs i < j of w(i, j) * d(s(i), s(j))`, where `w(i, j) = (M[i][j] +
//! M[j][i]) / 2` (for the symmetric matrices detection writes, simply `M[i][j]`) and `d` is
//! the cost of the finest level the two PUs share, from the machine's
//! [`topology::LevelCosts`] (defaults pu 0, core 1, l1 1, l2 2, l3 4, numa 8, package 10,
//! machine 12, network 40; `--costs` overrides). Beside the cost it reports the traffic that
//! stays inside each level, so `levels` sums to the matrix total.

use crate::{Graph, Target};
use matrix::CommMatrix;
use topology::Level;

/// A mapping's score under the shared cost model.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// Sum over task pairs of w(i, j) times the cost of their PUs' finest shared level.
    pub cost: f64,
    /// (level, traffic whose finest shared level is this one) for every level, nearest first.
    pub levels: Vec<(Level, f64)>,
}

/// Scores a mapping (global PU index per task) of a communication graph.
pub fn evaluate(graph: &Graph, target: &Target, slots: &[usize]) -> Evaluation {
    let mut per = [0.0f64; Level::ALL.len()];
    for (i, j, w) in graph.edges() {
        per[target.level(slots[i], slots[j]) as usize] += w;
    }
    let costs = target.costs();
    let cost = Level::ALL
        .iter()
        .map(|&l| per[l as usize] * costs.get(l))
        .sum();
    Evaluation {
        cost,
        levels: Level::ALL.iter().map(|&l| (l, per[l as usize])).collect(),
    }
}

/// The same model straight from a matrix, pair by pair (the reference the tests check the
/// sparse path against).
pub fn evaluate_matrix(m: &CommMatrix, target: &Target, slots: &[usize]) -> Evaluation {
    let mut per = [0.0f64; Level::ALL.len()];
    for i in 0..m.n() {
        for j in i + 1..m.n() {
            let w = (m.get(i, j) + m.get(j, i)) / 2.0;
            per[target.level(slots[i], slots[j]) as usize] += w;
        }
    }
    let costs = target.costs();
    Evaluation {
        cost: Level::ALL
            .iter()
            .map(|&l| per[l as usize] * costs.get(l))
            .sum(),
        levels: Level::ALL.iter().map(|&l| (l, per[l as usize])).collect(),
    }
}
