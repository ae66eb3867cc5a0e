//! The target as the algorithms see it: a tree whose leaves are the chosen slots (one leaf
//! per task, a PU appears several times when oversubscribed) and whose inner nodes carry the
//! cost that two leaves pay when that node is their deepest common ancestor.
//!
//! It is built from the shared model alone (`Target::level` on neighbouring slots), so
//! nested objects of equal level (a group inside a machine, a die inside a package) fold
//! into one node: they cost the same.

use crate::Target;

#[derive(Clone, Debug)]
pub struct Node {
    /// Leaves covered, half-open.
    pub lo: usize,
    pub hi: usize,
    pub cost: f64,
    /// Child inner nodes and leaves, in leaf order. A child `c` is a leaf when `c >= LEAF`.
    pub children: Vec<usize>,
    pub parent: Option<usize>,
    /// Height above the leaves (nodes whose children are all leaves have height 1).
    pub height: usize,
}

/// Children at or above this value are leaves (`c - LEAF` is the leaf index).
pub const LEAF: usize = usize::MAX / 2;

#[derive(Clone, Debug)]
pub struct Arch {
    pub nodes: Vec<Node>,
    slots: Vec<usize>,
    leaf_parent: Vec<usize>,
}

impl Arch {
    /// `slots`: sorted global PU indexes, one per leaf.
    pub fn build(target: &Target, slots: &[usize]) -> Arch {
        let mut a = Arch {
            nodes: Vec::new(),
            slots: slots.to_vec(),
            leaf_parent: vec![0; slots.len()],
        };
        // Level between each leaf and the next: the tree splits where it is highest.
        let gaps: Vec<topology::Level> =
            slots.windows(2).map(|w| target.level(w[0], w[1])).collect();
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

    pub fn num_leaves(&self) -> usize {
        self.slots.len()
    }

    /// Global PU index of a leaf.
    pub fn slot(&self, leaf: usize) -> usize {
        self.slots[leaf]
    }

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
    pub fn dist(&self, a: usize, b: usize) -> f64 {
        if a == b {
            return 0.0;
        }
        let mut n = self.leaf_parent[a];
        loop {
            let node = &self.nodes[n];
            if node.lo <= b && b < node.hi {
                return node.cost;
            }
            match node.parent {
                Some(p) => n = p,
                None => return node.cost,
            }
        }
    }

    /// The innermost node holding a leaf.
    pub fn leaf_parent(&self, leaf: usize) -> usize {
        self.leaf_parent[leaf]
    }
}
