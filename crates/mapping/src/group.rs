//! Bottom-up grouping along the machine tree (EagerMap's greedy grouping, TreeMatch's
//! grouping by arity).
//!
//! Stage h forms one group of units for every tree node of height h: tasks first, then
//! groups of groups, until one group holds everything. A unit fits a tree node only if it was
//! formed for a node of the same shape (the same nested arity), so irregular trees (forbidden
//! PUs, uneven nodes) work too. The final group is then laid out top-down.

use crate::arch::{Arch, LEAF};
use crate::Graph;
use std::collections::HashMap;

/// How each stage forms its groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Seed each group with the heaviest unit left, then add the unit with the most traffic
    /// to the group (EagerMap).
    Greedy,
    /// Merge along the heaviest edges first while groups fit the arity, as TreeMatch does;
    /// groups that do not fill up are completed greedily.
    TreeMatch,
}

struct Unit {
    shape: usize,
    /// Task (shape 0) or the units laid out on the tree node's children, in child order.
    task: usize,
    parts: Vec<usize>,
}

/// Returns the leaf of each task.
pub fn map(graph: &Graph, arch: &Arch, strategy: Strategy) -> Vec<usize> {
    let n = graph.n();
    // Shapes: 0 is a leaf; a node's shape is the interned list of its children's shapes.
    let mut shape_ids: HashMap<Vec<usize>, usize> = HashMap::new();
    let mut shape = vec![0usize; arch.nodes.len()];
    let mut order: Vec<usize> = (0..arch.nodes.len()).collect();
    order.sort_by_key(|&x| arch.nodes[x].height);
    for &x in &order {
        let key: Vec<usize> = arch.nodes[x]
            .children
            .iter()
            .map(|&c| if c >= LEAF { 0 } else { shape[c] })
            .collect();
        let next = shape_ids.len() + 1;
        shape[x] = *shape_ids.entry(key).or_insert(next);
    }

    let mut units: Vec<Unit> = (0..n)
        .map(|t| Unit {
            shape: 0,
            task: t,
            parts: Vec::new(),
        })
        .collect();
    let mut live = vec![true; n];
    let mut owner: Vec<usize> = (0..n).collect();
    let mut root_unit = 0;
    let max_h = arch.nodes.iter().map(|x| x.height).max().unwrap_or(0);
    for h in 1..=max_h {
        let nodes: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&x| arch.nodes[x].height == h)
            .collect();
        let adj = contract(graph, &owner, units.len());
        let formed = match strategy {
            Strategy::TreeMatch => by_heaviest_edges(arch, &nodes, &shape, &units, &live, &adj),
            Strategy::Greedy => None,
        };
        let groups = formed
            .unwrap_or_else(|| grow(arch, &nodes, &shape, &units, &mut live.clone(), &adj, &[]));
        for (x, members) in nodes.iter().zip(groups) {
            let id = units.len();
            // Lay members onto the node's children by shape.
            let mut free = members;
            let mut parts = Vec::with_capacity(free.len());
            for &c in &arch.nodes[*x].children {
                let want = if c >= LEAF { 0 } else { shape[c] };
                let k = free
                    .iter()
                    .position(|&u| units[u].shape == want)
                    .expect("a group holds one unit per child shape");
                parts.push(free.swap_remove(k));
            }
            for &u in &parts {
                live[u] = false;
            }
            units.push(Unit {
                shape: shape[*x],
                task: usize::MAX,
                parts,
            });
            live.push(true);
            if *x == arch.root() {
                root_unit = id;
            }
        }
        // Point every task at its new top unit.
        for (id, u) in units.iter().enumerate().skip(n) {
            if live[id] {
                for &p in &u.parts {
                    mark(&units, p, id, &mut owner);
                }
            }
        }
    }
    let mut leaf_of = vec![0; n];
    lay_out(arch, &units, root_unit, arch.root(), &mut leaf_of);
    leaf_of
}

fn mark(units: &[Unit], u: usize, top: usize, owner: &mut [usize]) {
    if units[u].shape == 0 {
        owner[units[u].task] = top;
    } else {
        for &p in &units[u].parts {
            mark(units, p, top, owner);
        }
    }
}

fn lay_out(arch: &Arch, units: &[Unit], unit: usize, node: usize, leaf_of: &mut [usize]) {
    for (&c, &u) in arch.nodes[node].children.iter().zip(&units[unit].parts) {
        if c >= LEAF {
            leaf_of[units[u].task] = c - LEAF;
        } else {
            lay_out(arch, units, u, c, leaf_of);
        }
    }
}

/// Traffic between the current top units, in compressed rows indexed by unit id (each row
/// sorted by neighbour).
struct Adj {
    start: Vec<usize>,
    list: Vec<(usize, f64)>,
}

impl std::ops::Index<usize> for Adj {
    type Output = [(usize, f64)];
    fn index(&self, u: usize) -> &[(usize, f64)] {
        &self.list[self.start[u]..self.start[u + 1]]
    }
}

fn contract(graph: &Graph, owner: &[usize], num_units: usize) -> Adj {
    // Bucket every edge end by the unit that owns it (counting sort on the unit id)...
    let mut start = vec![0usize; num_units + 1];
    for (i, &a) in owner.iter().enumerate() {
        for (j, _) in graph.neighbors(i) {
            if owner[j] != a {
                start[a + 1] += 1;
            }
        }
    }
    for u in 0..num_units {
        start[u + 1] += start[u];
    }
    let mut fill = start.clone();
    let mut ends = vec![(0usize, 0.0f64); start[num_units]];
    for (i, &a) in owner.iter().enumerate() {
        for (j, w) in graph.neighbors(i) {
            let b = owner[j];
            if b != a {
                ends[fill[a]] = (b, w);
                fill[a] += 1;
            }
        }
    }
    // ...then add up the ends that reach the same unit.
    let mut at = vec![usize::MAX; num_units];
    let mut out = Adj {
        start: Vec::with_capacity(num_units + 1),
        list: Vec::with_capacity(ends.len()),
    };
    out.start.push(0);
    for u in 0..num_units {
        let first = out.list.len();
        for &(b, w) in &ends[start[u]..start[u + 1]] {
            if at[b] == usize::MAX {
                at[b] = out.list.len();
                out.list.push((b, w));
            } else {
                out.list[at[b]].1 += w;
            }
        }
        let row = &mut out.list[first..];
        for &(b, _) in row.iter() {
            at[b] = usize::MAX;
        }
        row.sort_unstable_by_key(|e| e.0);
        out.start.push(out.list.len());
    }
    out
}

/// Greedy growth: for each node (largest first), seed with the heaviest free unit of a
/// needed shape, then repeatedly add the free unit of a still-needed shape with the most
/// traffic to the group. `preset` holds groups already formed (they are skipped).
fn grow(
    arch: &Arch,
    nodes: &[usize],
    shape: &[usize],
    units: &[Unit],
    live: &mut [bool],
    adj: &Adj,
    preset: &[Option<Vec<usize>>],
) -> Vec<Vec<usize>> {
    // Free units of each shape, heaviest first.
    let mut pool: HashMap<usize, Vec<usize>> = HashMap::new();
    for (id, u) in units.iter().enumerate() {
        if live[id] {
            pool.entry(u.shape).or_default().push(id);
        }
    }
    let strength = |u: usize| adj[u].iter().map(|e| e.1).sum::<f64>();
    for list in pool.values_mut() {
        let mut keyed: Vec<(f64, usize)> = list.iter().map(|&u| (strength(u), u)).collect();
        keyed.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        *list = keyed.into_iter().map(|k| k.1).collect();
    }
    let mut cursor: HashMap<usize, usize> = HashMap::new();
    let mut by_size: Vec<usize> = (0..nodes.len()).collect();
    by_size.sort_by_key(|&k| std::cmp::Reverse(arch.nodes[nodes[k]].hi - arch.nodes[nodes[k]].lo));
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    let mut gain: Vec<(usize, f64)> = Vec::new();
    let mut at = vec![usize::MAX; units.len()];
    for k in by_size {
        if let Some(Some(g)) = preset.get(k) {
            out[k] = g.clone();
            continue;
        }
        let x = nodes[k];
        let mut need: Vec<usize> = arch.nodes[x]
            .children
            .iter()
            .map(|&c| if c >= LEAF { 0 } else { shape[c] })
            .collect();
        let mut group = Vec::with_capacity(need.len());
        // Traffic of each unit to the group so far: entries in `gain`, found through `at`.
        for &(u, _) in &gain {
            at[u] = usize::MAX;
        }
        gain.clear();
        while !need.is_empty() {
            // The most-connected free unit of a needed shape, else the heaviest one.
            let best = gain
                .iter()
                .filter(|&&(u, _)| live[u] && need.contains(&units[u].shape))
                .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
                .map(|&(u, _)| u);
            let pick = match best {
                Some(u) => u,
                None => {
                    let s = need[0];
                    let list = pool.get(&s).map(Vec::as_slice).unwrap_or(&[]);
                    let c = cursor.entry(s).or_insert(0);
                    while *c < list.len() && !live[list[*c]] {
                        *c += 1;
                    }
                    match list.get(*c) {
                        Some(&u) => u,
                        None => unreachable!("the tree has as many units of each shape as slots"),
                    }
                }
            };
            live[pick] = false;
            if let Some(pos) = need.iter().position(|&s| s == units[pick].shape) {
                need.swap_remove(pos);
            }
            for &(v, w) in &adj[pick] {
                if live[v] {
                    if at[v] == usize::MAX {
                        at[v] = gain.len();
                        gain.push((v, 0.0));
                    }
                    gain[at[v]].1 += w;
                }
            }
            group.push(pick);
        }
        out[k] = group;
    }
    out
}

/// TreeMatch-style grouping when every node of the stage has the same shape and all its
/// children share one shape: merge units along the heaviest edges while the merged group
/// fits the arity; full groups are kept, the rest are completed by greedy growth.
fn by_heaviest_edges(
    arch: &Arch,
    nodes: &[usize],
    shape: &[usize],
    units: &[Unit],
    live: &[bool],
    adj: &Adj,
) -> Option<Vec<Vec<usize>>> {
    let first = *nodes.first()?;
    let child_shape = |c: usize| if c >= LEAF { 0 } else { shape[c] };
    let cs = child_shape(*arch.nodes[first].children.first()?);
    let uniform = nodes.iter().all(|&x| {
        shape[x] == shape[first] && arch.nodes[x].children.iter().all(|&c| child_shape(c) == cs)
    });
    if !uniform {
        return None;
    }
    let k = arch.nodes[first].children.len();
    let members: Vec<usize> = (0..units.len())
        .filter(|&u| live[u] && units[u].shape == cs)
        .collect();
    let mut index = vec![usize::MAX; units.len()];
    for (i, &u) in members.iter().enumerate() {
        index[u] = i;
    }
    let mut edges: Vec<(f64, usize, usize)> = Vec::new();
    for (i, &u) in members.iter().enumerate() {
        for &(v, w) in &adj[u] {
            let j = index[v];
            if j != usize::MAX && i < j {
                edges.push((w, i, j));
            }
        }
    }
    // A total order: the unstable sort gives the same sequence as a stable one.
    edges.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
    // Union-find with group sizes.
    let mut parent: Vec<usize> = (0..members.len()).collect();
    let mut size = vec![1usize; members.len()];
    fn find(p: &mut [usize], mut x: usize) -> usize {
        while p[x] != x {
            p[x] = p[p[x]];
            x = p[x];
        }
        x
    }
    for &(_, i, j) in &edges {
        let (a, b) = (find(&mut parent, i), find(&mut parent, j));
        if a != b && size[a] + size[b] <= k {
            parent[b] = a;
            size[a] += size[b];
        }
    }
    let mut groups: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, &u) in members.iter().enumerate() {
        let r = find(&mut parent, i);
        groups.entry(r).or_default().push(u);
    }
    let mut full: Vec<Vec<usize>> = groups.into_values().filter(|g| g.len() == k).collect();
    full.sort();
    full.truncate(nodes.len());
    let mut still_live = live.to_vec();
    for g in &full {
        for &u in g {
            still_live[u] = false;
        }
    }
    let mut preset: Vec<Option<Vec<usize>>> = full.into_iter().map(Some).collect();
    preset.resize(nodes.len(), None);
    Some(grow(
        arch,
        nodes,
        shape,
        units,
        &mut still_live,
        adj,
        &preset,
    ))
}
