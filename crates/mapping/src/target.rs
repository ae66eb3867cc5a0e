//! What tasks are mapped onto: one machine or a cluster, and which of its PUs are allowed.

use crate::MapError;
use topology::{Cluster, Level, LevelCosts, Machine};

/// A machine or a cluster of machines, with the PUs a mapping may use. PUs are numbered
/// globally (node after node); on a single machine the global index is the PU logical index.
#[derive(Clone, Debug)]
pub struct Target {
    cluster: Cluster,
    single: bool,
    allowed: Vec<bool>,
    /// Rank of each PU among the allowed PUs of its core (0 = first hardware thread).
    smt_rank: Vec<usize>,
}

impl Target {
    /// One machine; PUs marked not allowed in the model (cpuset, affinity) are excluded.
    pub fn machine(machine: Machine) -> Target {
        let mut t = Target::cluster(
            Cluster::uniform(machine, 1).expect("a one-node cluster is always valid"),
        );
        t.single = true;
        t
    }

    /// Several machines; ranks are placed on nodes, then on PUs.
    pub fn cluster(cluster: Cluster) -> Target {
        let allowed = cluster
            .machines
            .iter()
            .flat_map(|m| m.pus.iter().map(|p| p.allowed))
            .collect();
        let mut t = Target {
            cluster,
            single: false,
            allowed,
            smt_rank: Vec::new(),
        };
        t.rank_threads();
        t
    }

    /// Keeps only the PUs a location selects (hwloc syntax, applied to every node).
    pub fn restrict(&mut self, location: &str) -> Result<(), MapError> {
        let mut keep = vec![false; self.allowed.len()];
        for (node, m) in self.cluster.machines.iter().enumerate() {
            for pu in topology::parse_location(m, location)? {
                keep[self.cluster.global(node, pu.0)] = true;
            }
        }
        for (a, k) in self.allowed.iter_mut().zip(keep) {
            *a &= k;
        }
        self.rank_threads();
        Ok(())
    }

    fn rank_threads(&mut self) {
        self.smt_rank = vec![0; self.allowed.len()];
        for (node, m) in self.cluster.machines.iter().enumerate() {
            let mut seen: std::collections::HashMap<Option<u32>, usize> = Default::default();
            for (i, pu) in m.pus.iter().enumerate() {
                let g = self.cluster.global(node, i);
                if !self.allowed[g] {
                    continue;
                }
                // A PU without a core object is its own core.
                let key = pu.core.or(Some(u32::MAX - i as u32));
                let r = seen.entry(key).or_insert(0);
                self.smt_rank[g] = *r;
                *r += 1;
            }
        }
    }

    /// True when built by [`Target::cluster`] (even of one machine), false for
    /// [`Target::machine`] and [`Target::node_target`].
    pub fn is_cluster(&self) -> bool {
        !self.single
    }

    /// Number of machines (1 for a single machine).
    pub fn num_nodes(&self) -> usize {
        self.cluster.machines.len()
    }

    /// The machines, in node order.
    pub fn machines(&self) -> &[Machine] {
        &self.cluster.machines
    }

    /// Number of slots: every machine's PUs, allowed or not.
    pub fn num_pus(&self) -> usize {
        self.allowed.len()
    }

    /// Whether a mapping may use this slot; false for a slot out of range.
    pub fn is_allowed(&self, global: usize) -> bool {
        self.allowed.get(global).copied().unwrap_or(false)
    }

    /// The allowed PUs as slots (global indexes over the cluster's machines, each machine's
    /// logical PUs in order), ascending. [`Target::os_index`] gives a slot's OS index; a
    /// `topology::Machine`'s own `allowed_pus` are logical indexes of that machine.
    pub fn allowed_slots(&self) -> Vec<usize> {
        (0..self.allowed.len())
            .filter(|&g| self.allowed[g])
            .collect()
    }

    /// The level costs [`Target::distance`] and the cost model use.
    pub fn costs(&self) -> &LevelCosts {
        &self.cluster.costs
    }

    /// Sets the level costs (the cluster's and every machine's).
    pub fn set_costs(&mut self, costs: LevelCosts) {
        for m in &mut self.cluster.machines {
            m.costs = costs.clone();
        }
        self.cluster.costs = costs;
    }

    /// The finest level two PUs (global indexes) share.
    pub fn level(&self, a: usize, b: usize) -> Level {
        self.cluster.level(a, b)
    }

    /// Communication cost between two slots under [`Target::costs`].
    pub fn distance(&self, a: usize, b: usize) -> f64 {
        self.cluster.distance(a, b)
    }

    /// The node (machine index) a slot is on; 0 on a single machine.
    pub fn node_of(&self, global: usize) -> usize {
        self.cluster.locate(global).0
    }

    /// The slot of PU `pu` (logical index) on node `node`.
    pub fn global(&self, node: usize, pu: usize) -> usize {
        self.cluster.global(node, pu)
    }

    /// The PU model behind a global index.
    pub fn pu(&self, global: usize) -> &topology::Pu {
        let (node, pu) = self.cluster.locate(global);
        &self.cluster.machines[node].pus[pu]
    }

    /// OS index (kernel CPU number on its own machine) of a slot's PU.
    pub fn os_index(&self, global: usize) -> u32 {
        self.pu(global).os_index
    }

    /// Rank of a slot among the allowed PUs of its core (0 = first hardware thread); 0 for a
    /// PU that is not allowed. Panics if the slot is out of range.
    pub fn smt_rank(&self, global: usize) -> usize {
        self.smt_rank[global]
    }

    /// The PUs `n` tasks occupy, as a sorted multiset of global indexes: every core's first
    /// allowed hardware thread before any second one (cores in tree order, so the chosen
    /// cores are close together), and when oversubscribed every allowed PU gets n / P tasks,
    /// the first n mod P in that same order one more.
    /// With `share_cores`, PUs are taken in plain logical order (hardware threads of a core
    /// together).
    pub fn slots_for(
        &self,
        n: usize,
        oversubscribe: bool,
        share_cores: bool,
    ) -> Result<Vec<usize>, MapError> {
        let mut order = self.allowed_slots();
        if order.is_empty() {
            return Err(MapError::NoSlots);
        }
        let p = order.len();
        if n > p && !oversubscribe {
            return Err(MapError::TooManyTasks { tasks: n, slots: p });
        }
        if !share_cores {
            order.sort_by_key(|&g| (self.smt_rank[g], g));
        }
        let (base, extra) = (n / p, n % p);
        let mut slots = Vec::with_capacity(n);
        for (i, &g) in order.iter().enumerate() {
            let k = base + usize::from(i < extra);
            slots.extend(std::iter::repeat_n(g, k));
        }
        slots.sort_unstable();
        Ok(slots)
    }
}

impl Target {
    /// One node of the target as a machine target, keeping its allowed PUs.
    pub fn node_target(&self, node: usize) -> Target {
        let m = &self.cluster.machines[node];
        let mut t = Target::machine(m.clone());
        for pu in 0..m.num_pus() {
            t.allowed[pu] = self.allowed[self.cluster.global(node, pu)];
        }
        t.set_costs(self.cluster.costs.clone());
        t.rank_threads();
        t
    }

    /// Allowed PUs of one node.
    pub fn node_capacity(&self, node: usize) -> usize {
        let m = &self.cluster.machines[node];
        (0..m.num_pus())
            .filter(|&pu| self.allowed[self.cluster.global(node, pu)])
            .count()
    }
}
