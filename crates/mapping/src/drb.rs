//! Dual recursive bipartitioning (the method of Scotch and CDSM): split the machine tree in
//! two halves, split the tasks into two parts of the same sizes with the least traffic
//! between them, and recurse. Every pair cut at a tree node pays that node's cost, which is
//! at least what it would pay lower down, so minimising each cut is the right local goal.
//!
//! Each bisection grows side 0 greedily from a few start tasks, refines each result by
//! Fiduccia-Mattheyses passes of pair swaps (sizes stay exact), and keeps the smallest cut.
//! Several starts, as graph-growing partitioners use them, because pair swaps cannot leave
//! some local minima: grown from the heaviest stage of a chain (a middle one), side 0 takes
//! a middle stretch and the chain is cut twice, and undoing that takes two swaps at once
//! whose first step alone looks bad. Grown from an end, the chain is cut once.

use crate::arch::{Arch, LEAF};
use crate::Graph;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Returns the leaf of each task.
pub fn map(graph: &Graph, arch: &Arch) -> Vec<usize> {
    let n = graph.n();
    let mut st = State {
        graph,
        side: vec![NONE; n],
        leaf_of: vec![0; n],
        strength: (0..n).map(|i| graph.strength(i)).collect(),
        score: vec![0.0; n],
        locked: vec![false; n],
    };
    // Every part keeps this order (heaviest first), which growing starts from.
    let mut tasks: Vec<usize> = (0..n).collect();
    tasks.sort_by(|&x, &y| st.strength[y].total_cmp(&st.strength[x]).then(x.cmp(&y)));
    st.recurse(arch, vec![arch.root()], tasks);
    st.leaf_of
}

const NONE: u8 = 2;

/// `SIGN[s][side of u]`: how an edge to u counts in the gain of moving a task off side s.
const SIGN: [[f64; 3]; 2] = [[-1.0, 1.0, 0.0], [1.0, -1.0, 0.0]];

struct State<'a> {
    graph: &'a Graph,
    /// 0 or 1 for tasks of the part being split, NONE for the others.
    side: Vec<u8>,
    leaf_of: Vec<usize>,
    strength: Vec<f64>,
    /// Per task of the part being split: its traffic into side 0 while growing, its FM gain
    /// while refining (heap entries whose key differs from it are stale).
    score: Vec<f64>,
    /// Tasks already moved in the current FM pass.
    locked: Vec<bool>,
}

#[derive(PartialEq)]
struct Key(f64, usize);
impl Eq for Key {}
impl PartialOrd for Key {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Key {
    fn cmp(&self, o: &Self) -> Ordering {
        self.0.total_cmp(&o.0).then(o.1.cmp(&self.1))
    }
}

impl State<'_> {
    /// Maps `tasks` (heaviest first) onto the tree entries `part` (nodes or leaves with as
    /// many leaves).
    fn recurse(&mut self, arch: &Arch, mut part: Vec<usize>, tasks: Vec<usize>) {
        while part.len() == 1 {
            let e = part[0];
            if e >= LEAF {
                if let Some(&t) = tasks.first() {
                    self.leaf_of[t] = e - LEAF;
                }
                return;
            }
            part = arch.nodes[e].children.clone();
        }
        // Leaves of one node: every pair among them costs the same, any order will do.
        if part.iter().all(|&e| e >= LEAF) {
            for (&e, &t) in part.iter().zip(&tasks) {
                self.leaf_of[t] = e - LEAF;
            }
            return;
        }
        // Split the entries where the leaf counts come closest to halves.
        let sizes: Vec<usize> = part.iter().map(|&e| arch.size(e)).collect();
        let total: usize = sizes.iter().sum();
        let (mut acc, mut cut, mut best) = (0, 1, usize::MAX);
        for (k, s) in sizes.iter().enumerate().take(part.len() - 1) {
            acc += s;
            let diff = acc.abs_diff(total - acc);
            if diff < best {
                best = diff;
                cut = k + 1;
            }
        }
        let size_a: usize = sizes[..cut].iter().sum();
        let (a, b) = self.bisect(&tasks, size_a);
        let right = part.split_off(cut);
        self.recurse(arch, part, a);
        self.recurse(arch, right, b);
    }

    fn bisect(&mut self, tasks: &[usize], size_a: usize) -> (Vec<usize>, Vec<usize>) {
        for &t in tasks {
            self.side[t] = 1;
        }
        // Starts: the heaviest task, and both ends of a longest shortest path found by two
        // breadth-first sweeps from it (a pseudo-peripheral pair; for a chain, its two ends).
        let Some(&heaviest) = tasks.first() else {
            return (Vec::new(), Vec::new());
        };
        let far = self.farthest(tasks, heaviest);
        let other_end = self.farthest(tasks, far);
        let mut starts = vec![heaviest];
        for s in [far, other_end] {
            if !starts.contains(&s) {
                starts.push(s);
            }
        }
        let mut best: Option<(f64, Vec<u8>)> = None;
        for &start in &starts {
            for &t in tasks {
                self.side[t] = 1;
            }
            self.grow(tasks, size_a, start);
            for _ in 0..8 {
                if self.fm_pass(tasks) <= 1e-9 {
                    break;
                }
            }
            let cut = self.cut(tasks);
            // Ties keep the earlier start, so the heaviest start wins unless beaten.
            if best.as_ref().is_none_or(|(c, _)| cut < *c - 1e-9 * c.abs()) {
                best = Some((cut, tasks.iter().map(|&t| self.side[t]).collect()));
            }
        }
        let sides = best.map(|(_, s)| s).unwrap_or_default();
        // Both parts keep the heaviest-first order of `tasks`.
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for (&t, &s) in tasks.iter().zip(&sides) {
            if s == 0 {
                a.push(t);
            } else {
                b.push(t);
            }
        }
        for &t in tasks {
            self.side[t] = NONE;
        }
        (a, b)
    }

    /// Traffic between side 0 and side 1 of the part being split.
    fn cut(&self, tasks: &[usize]) -> f64 {
        let mut cut = 0.0;
        for &t in tasks {
            if self.side[t] == 0 {
                for (u, w) in self.graph.neighbors(t) {
                    if self.side[u] == 1 {
                        cut += w;
                    }
                }
            }
        }
        cut
    }

    /// The task of the part (every task in `tasks` has a side) that a breadth-first search
    /// from `from` reaches last: the farthest in hops, inside `from`'s connected component.
    fn farthest(&mut self, tasks: &[usize], from: usize) -> usize {
        // `locked` marks visited tasks; fm_pass resets it before use.
        for &t in tasks {
            self.locked[t] = false;
        }
        let mut queue = std::collections::VecDeque::from([from]);
        self.locked[from] = true;
        let mut last = from;
        while let Some(v) = queue.pop_front() {
            last = v;
            for (u, _) in self.graph.neighbors(v) {
                if self.side[u] != NONE && !self.locked[u] {
                    self.locked[u] = true;
                    queue.push_back(u);
                }
            }
        }
        last
    }

    /// Moves `size_a` tasks to side 0, starting with `start`, then always the one with the
    /// most traffic into side 0 (the heaviest task left when none has any). `tasks` is in
    /// that fallback order.
    fn grow(&mut self, tasks: &[usize], size_a: usize, start: usize) {
        let by_strength = tasks;
        let mut next_seed = 0;
        let mut first = Some(start);
        // Traffic into side 0; heap entries are only pushed after it is set.
        for &t in tasks {
            self.score[t] = 0.0;
        }
        let mut heap = BinaryHeap::new();
        let mut taken = 0;
        while taken < size_a {
            let pick = loop {
                match heap.pop() {
                    Some(Key(g, v)) if self.side[v] == 1 && self.score[v] == g => break Some(v),
                    Some(_) => continue,
                    None => break None,
                }
            };
            let v = match first.take().or(pick) {
                Some(v) => v,
                None => {
                    while self.side[by_strength[next_seed]] != 1 {
                        next_seed += 1;
                    }
                    by_strength[next_seed]
                }
            };
            self.side[v] = 0;
            taken += 1;
            for (u, w) in self.graph.neighbors(v) {
                if self.side[u] == 1 {
                    self.score[u] += w;
                    heap.push(Key(self.score[u], u));
                }
            }
        }
    }

    /// One pass of pair swaps, keeping the best prefix; returns the cut reduction.
    fn fm_pass(&mut self, tasks: &[usize]) -> f64 {
        let mut init: [Vec<Key>; 2] = [Vec::new(), Vec::new()];
        for &t in tasks {
            let s = self.side[t];
            // Traffic to the other side less traffic to its own (none outside the part),
            // without a branch on the neighbour's side.
            let sign = &SIGN[s as usize];
            let mut g = 0.0;
            for (u, w) in self.graph.neighbors(t) {
                g += w * sign[self.side[u] as usize];
            }
            self.score[t] = g;
            self.locked[t] = false;
            init[s as usize].push(Key(g, t));
        }
        let mut heaps = init.map(BinaryHeap::from);
        let mut moves = Vec::new();
        let (mut cum, mut best, mut best_len) = (0.0f64, 0.0f64, 0usize);
        loop {
            let (score, locked) = (&self.score, &self.locked);
            let mut pop = |s: usize| loop {
                match heaps[s].pop() {
                    Some(Key(g, v)) if !locked[v] && score[v] == g => return Some(v),
                    Some(_) => continue,
                    None => return None,
                }
            };
            let (Some(a), Some(b)) = (pop(0), pop(1)) else {
                break;
            };
            let wab: f64 = self
                .graph
                .neighbors(a)
                .filter(|&(u, _)| u == b)
                .map(|(_, w)| w)
                .sum();
            cum += self.score[a] + self.score[b] - 2.0 * wab;
            for v in [a, b] {
                self.locked[v] = true;
                let from = self.side[v];
                self.side[v] = 1 - from;
                for (u, w) in self.graph.neighbors(v) {
                    if self.side[u] == NONE || self.locked[u] {
                        continue;
                    }
                    let g = &mut self.score[u];
                    *g += if self.side[u] == from {
                        2.0 * w
                    } else {
                        -2.0 * w
                    };
                    heaps[self.side[u] as usize].push(Key(*g, u));
                }
            }
            moves.push((a, b));
            if cum > best + 1e-12 {
                best = cum;
                best_len = moves.len();
            } else if moves.len() - best_len > 64 {
                break;
            }
        }
        for &(a, b) in &moves[best_len..] {
            self.side[a] = 0;
            self.side[b] = 1;
        }
        best
    }
}
