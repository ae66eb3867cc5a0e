//! What tasks are mapped onto: one machine or a cluster, and which of its PUs are allowed.

use crate::MapError;
use topology::{Cluster, Level, LevelCosts, LogicalPu, Machine, OsCpu};

/// A PU of a [`Target`] by its global index: the PUs of the target's machines numbered node
/// after node, each machine's in logical order (on a single machine, the logical index).
/// Tasks are mapped onto slots; a placement ([`crate::Mapping::slots`]) keeps their bare
/// numbers, for the algorithms' inner loops. The target is where a slot turns into a
/// machine's [`LogicalPu`] ([`Target::locate`]) or a kernel CPU ([`Target::os_cpu`]), and
/// back ([`Target::slot`], [`Target::slot_by_os`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot(pub usize);

/// A machine or a cluster of machines, with the PUs a mapping may use, numbered as
/// [`Slot`]s.
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

    /// Keeps only these slots among the allowed ones (the others become not allowed).
    pub fn keep_only(&mut self, slots: &[Slot]) {
        let mut keep = vec![false; self.allowed.len()];
        for s in slots {
            if let Some(k) = keep.get_mut(s.0) {
                *k = true;
            }
        }
        for (a, k) in self.allowed.iter_mut().zip(keep) {
            *a &= k;
        }
        self.rank_threads();
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
    pub fn is_allowed(&self, slot: Slot) -> bool {
        self.allowed.get(slot.0).copied().unwrap_or(false)
    }

    /// The allowed PUs, ascending. [`Target::os_cpu`] gives a slot's kernel CPU; a
    /// `topology::Machine`'s own `allowed_pus` are [`LogicalPu`]s of that machine.
    pub fn allowed_slots(&self) -> Vec<Slot> {
        self.allowed_indexes().into_iter().map(Slot).collect()
    }

    /// [`Target::allowed_slots`] as bare numbers, for placements.
    fn allowed_indexes(&self) -> Vec<usize> {
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

    /// The finest level two slots share, by bare number (a [`Slot`]'s, as placements hold
    /// them: the cost model asks this of every pair).
    pub fn level(&self, a: usize, b: usize) -> Level {
        self.cluster.level(a, b)
    }

    /// Communication cost between two slots (bare numbers, as [`Target::level`]) under
    /// [`Target::costs`].
    pub fn distance(&self, a: usize, b: usize) -> f64 {
        self.cluster.distance(a, b)
    }

    /// Whether every two allowed slots are equally far apart ([`Target::distance`]): one
    /// machine whose PUs share nothing closer than what all of them share (one L3, no SMT,
    /// as on small VMs). Then no placement of at most one task per PU costs less than
    /// another, whatever the tasks' communication.
    pub fn is_flat(&self) -> bool {
        let slots = self.allowed_indexes();
        let Some(first) = slots.get(1).map(|&b| self.distance(slots[0], b)) else {
            return true;
        };
        slots
            .iter()
            .enumerate()
            .all(|(i, &a)| slots[i + 1..].iter().all(|&b| self.distance(a, b) == first))
    }

    /// The node (machine index) a slot is on; 0 on a single machine.
    pub fn node_of(&self, slot: Slot) -> usize {
        self.cluster.locate(slot.0).0
    }

    /// The node a slot is on and the PU it is there: the inverse of [`Target::slot`]. Panics
    /// if the slot is out of range.
    pub fn locate(&self, slot: Slot) -> (usize, LogicalPu) {
        assert!(slot.0 < self.allowed.len(), "slot {} out of range", slot.0);
        let (node, pu) = self.cluster.locate(slot.0);
        (node, LogicalPu(pu))
    }

    /// The slot of PU `pu` on node `node`. Panics if `node` is out of range.
    pub fn slot(&self, node: usize, pu: LogicalPu) -> Slot {
        Slot(self.cluster.global(node, pu.0))
    }

    /// The PU model behind a slot.
    pub fn pu(&self, slot: Slot) -> &topology::Pu {
        let (node, pu) = self.locate(slot);
        self.cluster.machines[node].pu(pu)
    }

    /// The kernel CPU (on its own machine) of a slot's PU.
    pub fn os_cpu(&self, slot: Slot) -> OsCpu {
        let (node, pu) = self.locate(slot);
        self.cluster.machines[node].os_cpu(pu)
    }

    /// The kernel CPU of each slot of a placement (bare slot numbers, as
    /// [`crate::Mapping::slots`]).
    pub fn os_cpus(&self, placement: &[usize]) -> Vec<OsCpu> {
        placement.iter().map(|&g| self.os_cpu(Slot(g))).collect()
    }

    /// The slot of kernel CPU `os` on node `node`, if that machine has it. Panics if `node`
    /// is out of range.
    pub fn slot_by_os(&self, node: usize, os: OsCpu) -> Option<Slot> {
        let pu = self.cluster.machines[node].pu_by_os(os)?;
        Some(self.slot(node, pu))
    }

    /// Rank of a slot (bare number) among the allowed PUs of its core (0 = first hardware
    /// thread); 0 for a PU that is not allowed. Panics if the slot is out of range.
    pub fn smt_rank(&self, slot: usize) -> usize {
        self.smt_rank[slot]
    }

    /// The PUs `n` tasks occupy, as a sorted multiset of bare slot numbers: every core's first
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
        let mut order = self.allowed_indexes();
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

#[cfg(test)]
mod tests {
    use super::*;
    use topology::Cluster;

    #[test]
    fn a_target_is_flat_when_every_two_allowed_pus_are_equally_far_apart() {
        let synthetic = |d: &str| Target::machine(Machine::from_synthetic(d).unwrap());
        assert!(synthetic("pack:1 l3:1 core:4 pu:1").is_flat());
        assert!(
            !synthetic("pack:1 core:2 pu:2").is_flat(),
            "SMT siblings are closer"
        );
        assert!(!synthetic("pack:2 core:2 pu:1").is_flat(), "two packages");
        let mut two_packages = synthetic("pack:2 core:2 pu:1");
        two_packages.restrict("package:0").unwrap();
        assert!(two_packages.is_flat(), "one package's two cores");
        two_packages.restrict("pu:0").unwrap();
        assert!(two_packages.is_flat(), "a single PU");
        let one = Machine::from_synthetic("pack:1 core:2 pu:1").unwrap();
        assert!(
            !Target::cluster(Cluster::uniform(one, 2).unwrap()).is_flat(),
            "two nodes"
        );
    }

    #[test]
    fn slots_convert_to_machines_pus_and_kernel_cpus_and_back() {
        let mut m = Machine::from_synthetic("pack:2 core:2 pu:1").unwrap();
        // OS numbering that differs from the logical order, as on many real machines.
        for (pu, os) in m.pus.iter_mut().zip([0, 2, 1, 3]) {
            pu.os_index = os;
        }
        let t = Target::cluster(Cluster::uniform(m, 2).unwrap());
        assert_eq!(t.locate(Slot(6)), (1, LogicalPu(2)));
        assert_eq!(t.slot(1, LogicalPu(2)), Slot(6));
        assert_eq!(t.os_cpu(Slot(6)), OsCpu(1));
        assert_eq!(t.os_cpus(&[0, 1, 5]), [OsCpu(0), OsCpu(2), OsCpu(2)]);
        assert_eq!(t.slot_by_os(1, OsCpu(1)), Some(Slot(6)));
        assert_eq!(t.slot_by_os(0, OsCpu(9)), None);
        for s in t.allowed_slots() {
            let (node, pu) = t.locate(s);
            assert_eq!(t.slot(node, pu), s);
            assert_eq!(t.slot_by_os(node, t.os_cpu(s)), Some(s));
        }
    }
}
