//! The target as the algorithms see it: a tree whose leaves are the chosen slots (one leaf
//! per task, a PU appears several times when oversubscribed) and whose inner nodes carry the
//! cost that two leaves pay when that node is their deepest common ancestor.
//!
//! It is built from the shared model alone (`Target::level` on neighbouring slots), so
//! nested objects of equal level (a group inside a machine, a die inside a package) fold
//! into one node: they cost the same.

use crate::Target;

/// One inner node of an [`Arch`] tree.
#[derive(Clone, Debug)]
pub struct Node {
    /// First leaf covered.
    pub lo: usize,
    /// One past the last leaf covered (leaves `lo..hi`).
    pub hi: usize,
    /// Cost two leaves pay when this is their deepest common node (the target's level cost).
    pub cost: f64,
    /// Child inner nodes and leaves, in leaf order. A child `c` is a leaf when `c >= LEAF`.
    pub children: Vec<usize>,
    /// The parent node (index into [`Arch::nodes`]); None for the root.
    pub parent: Option<usize>,
    /// Height above the leaves (nodes whose children are all leaves have height 1).
    pub height: usize,
}

/// Children at or above this value are leaves (`c - LEAF` is the leaf index).
pub const LEAF: usize = usize::MAX / 2;

/// The chosen slots as a tree: one leaf per slot (per task), inner nodes where the level
/// between neighbouring slots rises. See the module documentation.
#[derive(Clone, Debug)]
pub struct Arch {
    /// Inner nodes; the root is 0 and every parent comes before its children.
    pub nodes: Vec<Node>,
    slots: Vec<usize>,
    leaf_parent: Vec<usize>,
    /// `span_max[k * stride + i]`: the highest level (as an index into `level_cost`) among
    /// the gaps `i .. i + 2^k` between neighbouring leaves (rows of `stride` entries, unused
    /// tails 0). The deepest common node of leaves a < b is the node that splits at the
    /// highest gap between them, so [`Arch::dist`] is two lookups in this table instead of a
    /// walk up the tree.
    span_max: Vec<u8>,
    stride: usize,
    /// Cost of each level; 16 entries so that any 4-bit index is in range.
    level_cost: [f64; 16],
}

impl Arch {
    /// `slots`: sorted global PU indexes, one per leaf; must not be empty.
    pub fn build(target: &Target, slots: &[usize]) -> Arch {
        let costs = target.costs();
        let mut a = Arch {
            nodes: Vec::new(),
            slots: slots.to_vec(),
            leaf_parent: vec![0; slots.len()],
            span_max: Vec::new(),
            stride: slots.len().saturating_sub(1),
            level_cost: [0.0; 16],
        };
        for l in topology::Level::ALL {
            a.level_cost[l as usize] = costs.get(l);
        }
        // Level between each leaf and the next: the tree splits where it is highest.
        let gaps: Vec<topology::Level> =
            slots.windows(2).map(|w| target.level(w[0], w[1])).collect();
        let m = gaps.len();
        a.span_max = gaps.iter().map(|&l| l as u8).collect();
        let mut width = 1;
        while 2 * width <= m {
            let prev = a.span_max.len() - m;
            for i in 0..m {
                let x = if i + 2 * width <= m {
                    a.span_max[prev + i].max(a.span_max[prev + i + width])
                } else {
                    0
                };
                a.span_max.push(x);
            }
            width *= 2;
        }
        if slots.len() == 1 {
            a.nodes.push(Node {
                lo: 0,
                hi: 1,
                cost: 0.0,
                children: vec![LEAF],
                parent: None,
                height: 1,
            });
        } else {
            a.split(target, &gaps, 0, slots.len(), None);
        }
        a
    }

    fn split(
        &mut self,
        target: &Target,
        gaps: &[topology::Level],
        lo: usize,
        hi: usize,
        parent: Option<usize>,
    ) -> usize {
        let top = gaps[lo..hi - 1]
            .iter()
            .copied()
            .max()
            .unwrap_or(topology::Level::Pu);
        let id = self.nodes.len();
        self.nodes.push(Node {
            lo,
            hi,
            cost: target.costs().get(top),
            children: Vec::new(),
            parent,
            height: 1,
        });
        let mut children = Vec::new();
        let mut start = lo;
        for k in lo..hi {
            if k + 1 == hi || gaps[k] == top {
                if k + 1 == start + 1 {
                    self.leaf_parent[start] = id;
                    children.push(LEAF + start);
                } else {
                    children.push(self.split(target, gaps, start, k + 1, Some(id)));
                }
                start = k + 1;
            }
        }
        let height = 1 + children
            .iter()
            .filter(|&&c| c < LEAF)
            .map(|&c| self.nodes[c].height)
            .max()
            .unwrap_or(0);
        self.nodes[id].children = children;
        self.nodes[id].height = height;
        id
    }

    /// Number of leaves: the number of slots it was built from.
    pub fn num_leaves(&self) -> usize {
        self.slots.len()
    }

    /// Global PU index of a leaf.
    pub fn slot(&self, leaf: usize) -> usize {
        self.slots[leaf]
    }

    /// Index of the root in [`Arch::nodes`]: always 0.
    pub fn root(&self) -> usize {
        0
    }

    /// Leaves under a child entry (a node or a single leaf).
    pub fn size(&self, child: usize) -> usize {
        if child >= LEAF {
            1
        } else {
            self.nodes[child].hi - self.nodes[child].lo
        }
    }

    /// Height of a child entry (leaves 0).
    pub fn height(&self, child: usize) -> usize {
        if child >= LEAF {
            0
        } else {
            self.nodes[child].height
        }
    }

    /// Cost between two leaves: the cost of their deepest common node (0 for the same leaf).
    #[inline]
    pub fn dist(&self, a: usize, b: usize) -> f64 {
        let (lo, hi) = (a.min(b), a.max(b));
        if lo == hi {
            return 0.0;
        }
        // The gaps lo .. hi: two (possibly overlapping) power-of-two spans cover them.
        let k = (hi - lo).ilog2() as usize;
        let row = k * self.stride;
        let top = self.span_max[row + lo].max(self.span_max[row + hi - (1 << k)]);
        self.level_cost[(top & 15) as usize]
    }

    /// The innermost node holding a leaf.
    pub fn leaf_parent(&self, leaf: usize) -> usize {
        self.leaf_parent[leaf]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use topology::Machine;

    /// The cost of the deepest common node, found by walking up the tree.
    fn dist_by_walk(arch: &Arch, a: usize, b: usize) -> f64 {
        if a == b {
            return 0.0;
        }
        let mut n = arch.leaf_parent(a);
        loop {
            let node = &arch.nodes[n];
            if node.lo <= b && b < node.hi {
                return node.cost;
            }
            match node.parent {
                Some(p) => n = p,
                None => return node.cost,
            }
        }
    }

    fn check_all_pairs(t: &Target, n: usize, over: bool, what: &str) {
        let slots = t.slots_for(n, over, false).unwrap();
        let arch = Arch::build(t, &slots);
        for a in 0..n {
            for b in 0..n {
                assert_eq!(
                    arch.dist(a, b),
                    dist_by_walk(&arch, a, b),
                    "{what}: {a} {b}"
                );
            }
        }
    }

    #[test]
    fn dist_is_the_cost_of_the_deepest_common_node_on_shared_topologies() {
        let dir = std::env::var_os("HUDDLE_SHARED")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared")
            })
            .join("data/topologies");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_none_or(|x| x != "xml") {
                continue;
            }
            let Ok(m) = Machine::from_xml(&p) else {
                continue;
            };
            let t = Target::machine(m);
            let pus = t.allowed_slots().len();
            for n in [pus / 3 + 1, pus, pus * 2 + 1] {
                check_all_pairs(&t, n, n > pus, &p.display().to_string());
            }
        }
    }

    #[test]
    fn dist_is_the_cost_of_the_deepest_common_node() {
        for (desc, n, over) in [
            ("pack:2 l3:2 core:4 pu:2", 32, false),
            ("pack:2 l3:2 core:4 pu:2", 11, false),
            ("pack:3 numa:2 core:3 pu:2", 36, false),
            ("pack:2 core:3 pu:2", 29, true),
            ("core:1 pu:1", 1, false),
            ("group:2 pack:3 l3:2 core:5 pu:1", 60, false),
        ] {
            let t = Target::machine(Machine::from_synthetic(desc).unwrap());
            check_all_pairs(&t, n, over, desc);
        }
    }
}
