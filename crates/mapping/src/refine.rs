//! Local refinement by pair swaps (Kernighan-Lin style): move a task next to a partner by
//! swapping it with a task that sits there, whenever that lowers the cost.

use crate::Arch;
use crate::Graph;

/// Partners a task tries to move next to: its heaviest ones.
const PARTNERS: usize = 4;
/// Leaves scanned in a partner's innermost tree node.
const SCAN: usize = 16;
/// Passes over the tasks whose surroundings changed (the first pass visits every task).
const PASSES: usize = 6;

/// The heaviest partners of every task (ties: lower index first), computed once per graph and
/// shared by every seed that is refined.
pub struct Partners {
    start: Vec<usize>,
    list: Vec<usize>,
    /// Total traffic of each task.
    strength: Vec<f64>,
}

impl Partners {
    /// Up to `PARTNERS` heaviest neighbours of every task of `graph`.
    pub fn new(graph: &Graph) -> Partners {
        let mut start = Vec::with_capacity(graph.n() + 1);
        let mut list = Vec::with_capacity(graph.n() * PARTNERS);
        let mut buf: Vec<(usize, f64)> = Vec::new();
        start.push(0);
        for a in 0..graph.n() {
            buf.clear();
            buf.extend(graph.neighbors(a));
            buf.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
            list.extend(buf.iter().take(PARTNERS).map(|&(p, _)| p));
            start.push(list.len());
        }
        let strength = (0..graph.n()).map(|a| graph.strength(a)).collect();
        Partners {
            start,
            list,
            strength,
        }
    }

    fn of(&self, a: usize) -> &[usize] {
        &self.list[self.start[a]..self.start[a + 1]]
    }
}

/// Improves `leaf_of` (task -> leaf) in place. Candidates for task a are the tasks on the
/// leaves that share the innermost tree node with one of a's heaviest partners.
///
/// The first pass visits every task; later passes only the tasks whose evaluation may have
/// changed: the two tasks of a swap, their partners, and the partners of the tasks sharing
/// the innermost nodes they moved between. The visiting order is fixed, so the result
/// depends on the inputs alone.
pub fn swaps(graph: &Graph, arch: &Arch, partners: &Partners, leaf_of: &mut [usize]) {
    let n = graph.n();
    let mut task_at = vec![usize::MAX; arch.num_leaves()];
    for (t, &l) in leaf_of.iter().enumerate() {
        task_at[l] = t;
    }
    // What each task pays now: sum over its partners of traffic x distance.
    let pays = |t: usize, leaf_of: &[usize]| -> f64 {
        let lt = leaf_of[t];
        graph
            .neighbors(t)
            .map(|(u, w)| w * arch.dist(lt, leaf_of[u]))
            .sum()
    };
    let mut cur: Vec<f64> = (0..n).map(|t| pays(t, leaf_of)).collect();
    // The least a task can pay per unit of traffic at each leaf: the cheapest node above it.
    let mut near = vec![f64::INFINITY; arch.nodes.len()];
    for (x, node) in arch.nodes.iter().enumerate() {
        // Parents come before their children.
        let up = node.parent.map_or(f64::INFINITY, |p| near[p]);
        near[x] = node.cost.min(up);
    }
    // Partners of the task being moved that sit inside the target node: (leaf, traffic).
    let mut inside: Vec<(usize, f64)> = Vec::new();
    let mut dirty = vec![true; n];
    let mut any = true;
    for _pass in 0..PASSES {
        if !any {
            break;
        }
        any = false;
        for a in 0..n {
            if !std::mem::take(&mut dirty[a]) {
                continue;
            }
            // Innermost nodes already scanned from the current leaf of a without a swap, each
            // with the partner that scan skipped (the only candidate there not yet tried).
            let mut tried = [(usize::MAX, usize::MAX); PARTNERS];
            for (k, &p) in partners.of(a).iter().enumerate() {
                let sa = leaf_of[a];
                let x = arch.leaf_parent(leaf_of[p]);
                let node = &arch.nodes[x];
                if node.lo <= sa && sa < node.hi {
                    continue; // already as close as the innermost node allows
                }
                let end = node.hi.min(node.lo + SCAN);
                // Scanning this node again would evaluate the same swaps on the same
                // placement; only the partner the earlier scan skipped is new.
                let again = tried[..k].iter().position(|&(y, _)| y == x);
                let single = match again {
                    Some(j) => {
                        let q = std::mem::replace(&mut tried[j].1, usize::MAX);
                        if q == usize::MAX || leaf_of[q] >= end {
                            continue;
                        }
                        Some(q)
                    }
                    None => {
                        tried[k] = (x, p);
                        None
                    }
                };
                // Anywhere inside the node, a pays the same to partners outside it; only
                // partners inside need a leaf each. `base`: what a would pay outside, less
                // what it pays now.
                let mut base = -cur[a];
                inside.clear();
                for (u, w) in graph.neighbors(a) {
                    let lu = leaf_of[u];
                    if node.lo <= lu && lu < node.hi {
                        inside.push((lu, w));
                    } else {
                        base += w * arch.dist(node.lo, lu);
                    }
                }
                let mut best = (-1e-9, usize::MAX);
                let near_sa = near[arch.leaf_parent(sa)];
                let range = match single {
                    Some(q) => leaf_of[q]..leaf_of[q] + 1,
                    None => node.lo..end,
                };
                for leaf in range {
                    let b = task_at[leaf];
                    if b == p || b == usize::MAX {
                        continue;
                    }
                    let mut wab = 0.0;
                    let mut da = base;
                    for &(lu, w) in &inside {
                        if lu == leaf {
                            wab = w;
                        } else {
                            da += w * arch.dist(leaf, lu);
                        }
                    }
                    let back = wab * arch.dist(sa, leaf);
                    da += back;
                    // b would move to sa: what it would pay there, less what it pays now.
                    // At sa it pays at least `near_sa` per unit of traffic to anyone but a;
                    // skip b when even that bound gains nothing.
                    let floor = (partners.strength[b] - wab) * near_sa;
                    let slack = 1e-12 * (floor.abs() + cur[b].abs());
                    if da + floor + back - cur[b] - slack >= best.0 {
                        continue;
                    }
                    let mut there = 0.0;
                    for (u, w) in graph.neighbors(b) {
                        if u != a {
                            there += w * arch.dist(sa, leaf_of[u]);
                        }
                    }
                    let db = there + back - cur[b];
                    let d = da + db;
                    if d < best.0 {
                        best = (d, b);
                    }
                }
                if best.1 == usize::MAX {
                    continue;
                }
                let b = best.1;
                let (la, lb) = (sa, leaf_of[b]);
                leaf_of[a] = lb;
                leaf_of[b] = la;
                task_at[lb] = a;
                task_at[la] = b;
                tried = [(usize::MAX, usize::MAX); PARTNERS];
                any = true;
                for (t, from, to, other) in [(a, la, lb, b), (b, lb, la, a)] {
                    for (u, w) in graph.neighbors(t) {
                        if u != other {
                            let lu = leaf_of[u];
                            cur[u] += w * (arch.dist(lu, to) - arch.dist(lu, from));
                        }
                    }
                }
                cur[a] = pays(a, leaf_of);
                cur[b] = pays(b, leaf_of);
                // Whatever may now evaluate differently is visited again (later in this
                // pass when its index is higher, in the next pass otherwise).
                for l in [la, lb] {
                    let x = &arch.nodes[arch.leaf_parent(l)];
                    for &t in &task_at[x.lo..x.hi.min(x.lo + SCAN)] {
                        if t != usize::MAX {
                            dirty[t] = true;
                            for (u, _) in graph.neighbors(t) {
                                dirty[u] = true;
                            }
                        }
                    }
                }
            }
        }
    }
}
