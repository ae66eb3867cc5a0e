//! Several machines joined by a network: the network is the level above each machine.
//! PUs are numbered globally, node after node, so mappers see one flat list of slots.

use crate::{Level, LevelCosts, Machine, TopologyError};
use std::path::PathBuf;

/// Machines joined by a network. A global PU index (a slot) runs over every machine's PUs,
/// machine after machine, each in logical order; PUs on different machines share
/// [`Level::Network`].
#[derive(Clone, Debug)]
pub struct Cluster {
    /// The machines in node order: node k is `machines[k]`.
    pub machines: Vec<Machine>,
    /// Global index of each machine's first PU.
    offsets: Vec<usize>,
    /// Level costs [`Cluster::distance`] uses: the first machine's unless replaced.
    pub costs: LevelCosts,
}

impl Cluster {
    /// `nodes` copies of one machine.
    pub fn uniform(machine: Machine, nodes: usize) -> Result<Cluster, TopologyError> {
        if nodes == 0 {
            return Err(TopologyError::BadCluster(
                "a cluster needs at least one node".into(),
            ));
        }
        Cluster::new(vec![machine; nodes])
    }

    /// One machine per XML file, in order.
    pub fn from_xml_files(files: &[PathBuf]) -> Result<Cluster, TopologyError> {
        if files.is_empty() {
            return Err(TopologyError::BadCluster("no node XML files given".into()));
        }
        Cluster::new(
            files
                .iter()
                .map(|f| Machine::from_xml(f))
                .collect::<Result<_, _>>()?,
        )
    }

    /// The machines as nodes 0, 1, ... in order, with the first machine's level costs (the
    /// defaults when there is none). Accepts an empty list (a cluster of no PU); never fails
    /// at present.
    pub fn new(machines: Vec<Machine>) -> Result<Cluster, TopologyError> {
        let mut offsets = Vec::with_capacity(machines.len());
        let mut total = 0;
        for m in &machines {
            offsets.push(total);
            total += m.num_pus();
        }
        let costs = machines
            .first()
            .map(|m| m.costs.clone())
            .unwrap_or_default();
        Ok(Cluster {
            machines,
            offsets,
            costs,
        })
    }

    /// Number of PUs over all machines, allowed or not (0 for no machine).
    pub fn num_pus(&self) -> usize {
        self.offsets
            .last()
            .map_or(0, |&o| o + self.machines.last().map_or(0, |m| m.num_pus()))
    }

    /// (node, PU logical index inside the node) of a global PU index.
    pub fn locate(&self, global: usize) -> (usize, usize) {
        let node = self.offsets.partition_point(|&o| o <= global) - 1;
        (node, global - self.offsets[node])
    }

    /// Global index of PU `pu` (logical index) of machine `node`: the inverse of
    /// [`Cluster::locate`]. Panics if `node` is out of range; `pu` is not checked.
    pub fn global(&self, node: usize, pu: usize) -> usize {
        self.offsets[node] + pu
    }

    /// The finest level two PUs (global indexes) share: [`Level::Network`] on different
    /// machines, else the machine's own [`Machine::level`].
    pub fn level(&self, a: usize, b: usize) -> Level {
        let ((na, pa), (nb, pb)) = (self.locate(a), self.locate(b));
        if na != nb {
            Level::Network
        } else {
            self.machines[na].level(pa, pb)
        }
    }

    /// Communication cost between two PUs (global indexes) under the cluster's level costs.
    pub fn distance(&self, a: usize, b: usize) -> f64 {
        self.costs.get(self.level(a, b))
    }
}
