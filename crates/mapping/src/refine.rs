//! Local refinement by pair swaps (Kernighan-Lin style): move a task next to a partner by
//! swapping it with a task that sits there, whenever that lowers the cost.

use crate::Arch;
use crate::Graph;

/// Improves `leaf_of` (task -> leaf) in place. Candidates for task a are the tasks on the
/// leaves that share the innermost tree node with one of a's partners.
pub fn swaps(graph: &Graph, arch: &Arch, leaf_of: &mut [usize]) {
    let n = graph.n();
    let mut task_at = vec![usize::MAX; arch.num_leaves()];
    for (t, &l) in leaf_of.iter().enumerate() {
        task_at[l] = t;
    }
    // The delta of moving task t from leaf `from` to leaf `to`, ignoring partner `skip`.
    let delta = |t: usize, from: usize, to: usize, skip: usize, leaf_of: &[usize]| -> f64 {
        graph
            .neighbors(t)
            .filter(|&(u, _)| u != skip)
            .map(|(u, w)| w * (arch.dist(to, leaf_of[u]) - arch.dist(from, leaf_of[u])))
            .sum()
    };
    // Bounded work: a few passes, each scanning each task's heaviest partners.
    for _pass in 0..6 {
        let mut improved = 0.0;
        for a in 0..n {
            let mut partners: Vec<(usize, f64)> = graph.neighbors(a).collect();
            partners.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
            partners.truncate(4);
            for (p, _) in partners {
                let sa = leaf_of[a];
                let node = &arch.nodes[arch.leaf_parent(leaf_of[p])];
                if node.lo <= sa && sa < node.hi {
                    continue; // already as close as the innermost node allows
                }
                let mut best = (-1e-9, usize::MAX);
                let end = node.hi.min(node.lo + 16);
                for (leaf, &b) in task_at.iter().enumerate().take(end).skip(node.lo) {
                    if b == a || b == p || b == usize::MAX {
                        continue;
                    }
                    let d = delta(a, sa, leaf, b, leaf_of) + delta(b, leaf, sa, a, leaf_of);
                    if d < best.0 {
                        best = (d, b);
                    }
                }
                if best.1 != usize::MAX {
                    let b = best.1;
                    let (la, lb) = (leaf_of[a], leaf_of[b]);
                    leaf_of[a] = lb;
                    leaf_of[b] = la;
                    task_at[lb] = a;
                    task_at[la] = b;
                    improved -= best.0;
                }
            }
        }
        if improved <= 1e-9 {
            break;
        }
    }
}
