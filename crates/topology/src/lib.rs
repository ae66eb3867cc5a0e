//! huddle's machine model.
//!
//! hwloc discovers the machine (running system, XML export or synthetic description); this
//! crate copies what huddle needs out of hwloc once, into plain vectors, so that every other
//! part can ask "how far apart are PU a and PU b" in O(tree depth) without touching hwloc.
//!
//! The tree holds the CPU-side hierarchy (machine, groups, packages, dies, L3/L2/L1 caches,
//! cores, PUs) in depth-first order; NUMA nodes hang off the tree node whose CPUs they are
//! local to, as in hwloc 2. Every tree node covers a contiguous range of PUs in logical order,
//! which is what makes the deepest-common-ancestor query cheap.

#![warn(missing_docs)]

mod cluster;
mod load;
mod location;

pub use cluster::Cluster;
pub use cpuset::{CpuSet, CpuSetError, NodeSet, OsCpu};
pub use load::{Source, MAX_PUS};
pub use location::parse_location;

use serde::Serialize;
use std::fmt;

/// What went wrong while building a model or resolving a location. Each message names the
/// input at fault, in one line.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// An hwloc XML file that cannot be read or is not a topology hwloc accepts.
    #[error("{path}: {reason}")]
    BadFile {
        /// The file's path, as given.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A synthetic description refused by huddle's checks (syntax, unknown level, a zero
    /// count, more than [`MAX_PUS`] PUs) or by hwloc.
    #[error("synthetic description '{desc}': {reason}")]
    BadSynthetic {
        /// The description, as given.
        desc: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A location string that does not parse, names an object that does not exist, or
    /// selects no PU.
    #[error("location '{location}': {reason}")]
    BadLocation {
        /// The location string, as given.
        location: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A `level=cost,...` specification refused by [`LevelCosts::parse`].
    #[error("level costs '{spec}': {reason}")]
    BadCosts {
        /// The specification, as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A cluster that cannot be built (no node given).
    #[error("cluster: {0}")]
    BadCluster(String),
    /// Both an XML file and a synthetic description given to [`Machine::load`].
    #[error("give either an XML file or a synthetic description, not both")]
    TwoSources,
    /// hwloc failed to discover the running system; the text is hwloc's error.
    #[error("hwloc could not discover this machine: {0}")]
    Discovery(String),
}

/// The kinds of tree node huddle keeps. Instruction caches, I/O and Misc objects are dropped:
/// they say nothing about where communicating tasks should sit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjKind {
    /// The whole machine: the root of the tree.
    Machine,
    /// An hwloc Group: objects hwloc gathers by locality (e.g. a sub-NUMA cluster).
    Group,
    /// A processor package (socket).
    Package,
    /// A die inside a package.
    Die,
    /// A level-5 data or unified cache.
    L5,
    /// A level-4 data or unified cache.
    L4,
    /// A level-3 data or unified cache.
    L3,
    /// A level-2 data or unified cache.
    L2,
    /// A level-1 data or unified cache.
    L1,
    /// A core: one or more hardware threads.
    Core,
    /// A processing unit (hardware thread); always a leaf.
    Pu,
}

impl ObjKind {
    /// The name hwloc's location syntax and `huddle topo` use for this kind.
    pub fn name(self) -> &'static str {
        match self {
            ObjKind::Machine => "machine",
            ObjKind::Group => "group",
            ObjKind::Package => "package",
            ObjKind::Die => "die",
            ObjKind::L5 => "l5",
            ObjKind::L4 => "l4",
            ObjKind::L3 => "l3",
            ObjKind::L2 => "l2",
            ObjKind::L1 => "l1",
            ObjKind::Core => "core",
            ObjKind::Pu => "pu",
        }
    }
}

/// The sharing levels that communication costs are defined on, from nearest to farthest.
/// The level of a pair of PUs is the finest resource they share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// The same PU (two tasks time-share it).
    Pu,
    /// Two hardware threads of one core.
    Core,
    /// The same L1 cache, not the same core.
    L1,
    /// The same L2 cache, nothing nearer.
    L2,
    /// Any last-level cache above L2 (L3, L4, L5).
    L3,
    /// The same NUMA node (local memory), no cache; only with more than one NUMA node.
    Numa,
    /// The same package or die, no cache or NUMA node.
    Package,
    /// The same machine, across packages or groups.
    Machine,
    /// Different machines of a cluster.
    Network,
}

impl Level {
    /// Every level, nearest first; `level as usize` is its index here.
    pub const ALL: [Level; 9] = [
        Level::Pu,
        Level::Core,
        Level::L1,
        Level::L2,
        Level::L3,
        Level::Numa,
        Level::Package,
        Level::Machine,
        Level::Network,
    ];

    /// Lowercase name, as [`LevelCosts::parse`] reads it and `Display` writes it.
    pub fn name(self) -> &'static str {
        match self {
            Level::Pu => "pu",
            Level::Core => "core",
            Level::L1 => "l1",
            Level::L2 => "l2",
            Level::L3 => "l3",
            Level::Numa => "numa",
            Level::Package => "package",
            Level::Machine => "machine",
            Level::Network => "network",
        }
    }

    fn from_kind(kind: ObjKind) -> Level {
        match kind {
            ObjKind::Pu => Level::Pu,
            ObjKind::Core => Level::Core,
            ObjKind::L1 => Level::L1,
            ObjKind::L2 => Level::L2,
            ObjKind::L3 | ObjKind::L4 | ObjKind::L5 => Level::L3,
            ObjKind::Package | ObjKind::Die => Level::Package,
            ObjKind::Group | ObjKind::Machine => Level::Machine,
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Cost of communicating across each level. Defaults follow the usual ratio of access
/// latencies (L1 ~1 ns, L2 ~4 ns, L3 ~15 ns, local DRAM ~80 ns, remote ~130 ns, network
/// ~1.5 us), compressed so that a network hop is about 20 L2 hops; the mapping algorithms
/// only need the order and rough ratios. Override with [`LevelCosts::parse`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LevelCosts {
    costs: [f64; 9],
}

impl Default for LevelCosts {
    fn default() -> Self {
        LevelCosts {
            //      pu   core l1   l2   l3   numa pkg  mach  net
            costs: [0.0, 1.0, 1.0, 2.0, 4.0, 8.0, 10.0, 12.0, 40.0],
        }
    }
}

/// The largest cost a level may have: with a matrix's cells summing to at most 1e300 (see the
/// matrix crate) no cost can overflow.
pub const MAX_LEVEL_COST: f64 = 1e6;

impl LevelCosts {
    /// Cost per unit of traffic whose finest shared level is `level` (a relative weight, no
    /// unit; between 0 and [`MAX_LEVEL_COST`]).
    pub fn get(&self, level: Level) -> f64 {
        self.costs[level as usize]
    }

    /// Parses `level=cost,...` (e.g. `l3=5,network=100`), starting from the defaults.
    /// Costs must be finite, non-negative and must not fall from a nearer level to a farther one.
    pub fn parse(spec: &str) -> Result<LevelCosts, TopologyError> {
        let bad = |reason: String| TopologyError::BadCosts {
            spec: spec.to_string(),
            reason,
        };
        let mut out = LevelCosts::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, value) = item
                .split_once('=')
                .ok_or_else(|| bad(format!("'{item}' is not level=cost")))?;
            let level = Level::ALL
                .into_iter()
                .find(|l| l.name() == name.trim())
                .ok_or_else(|| bad(format!("unknown level '{}'", name.trim())))?;
            let cost: f64 = value
                .trim()
                .parse()
                .map_err(|_| bad(format!("'{}' is not a number", value.trim())))?;
            if !(0.0..=MAX_LEVEL_COST).contains(&cost) {
                return Err(bad(format!(
                    "cost of {level} must be between 0 and {MAX_LEVEL_COST:e}"
                )));
            }
            out.costs[level as usize] = cost;
        }
        if out.costs.windows(2).any(|w| w[1] < w[0]) {
            return Err(bad(
                "costs must not decrease from nearer to farther levels".into()
            ));
        }
        Ok(out)
    }
}

/// One NUMA node (memory controller domain).
#[derive(Clone, Debug, Serialize)]
pub struct NumaNode {
    /// The kernel's NUMA node number.
    pub os_index: u32,
    /// hwloc's logical index; also this node's index in [`Machine::numa_nodes`].
    pub logical_index: u32,
    /// Local memory in bytes, when the source says.
    pub memory: Option<u64>,
    /// The tree node whose PUs are local to this memory (index into [`Machine::nodes`]).
    #[serde(skip)]
    pub attached_to: u32,
}

/// One node of the CPU-side tree.
#[derive(Clone, Debug)]
pub struct Node {
    /// What kind of hwloc object this node is.
    pub kind: ObjKind,
    /// hwloc's logical index among objects of the same kind (and, for groups, same depth).
    pub logical_index: u32,
    /// hwloc's OS index of the object; None when hwloc has none (unknown or irrelevant).
    pub os_index: Option<u32>,
    /// The nearest kept ancestor (index into [`Machine::nodes`]); None for the root.
    pub parent: Option<u32>,
    /// Child nodes (indexes into [`Machine::nodes`]), in ascending PU order.
    pub children: Vec<u32>,
    /// Depth in huddle's tree (root = 0).
    pub depth: u16,
    /// Cache size in bytes for caches.
    pub cache_size: Option<u64>,
    /// PUs covered, as a half-open range of PU logical indexes.
    pub pu_range: (u32, u32),
    /// NUMA nodes attached here (indexes into [`Machine::numa_nodes`]).
    pub numa: Vec<u32>,
}

/// A PU of one machine by hwloc's logical index, which is also its index in
/// [`Machine::pus`]. Its own type so that it is not taken for a cluster-wide slot
/// (`mapping::Slot`) or a kernel CPU number ([`OsCpu`]): [`Machine::os_cpu`] and
/// [`Machine::pu_by_os`] convert between it and OS indexes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogicalPu(pub usize);

/// One processing unit (hardware thread), with the logical index of each enclosing object.
#[derive(Clone, Debug, Serialize)]
pub struct Pu {
    /// The kernel's CPU number (as `taskset -c` takes it).
    pub os_index: u32,
    /// hwloc's logical index; also this PU's index in [`Machine::pus`].
    pub logical_index: u32,
    /// Logical index of the enclosing core; None without one.
    pub core: Option<u32>,
    /// Logical index of the enclosing L1 cache; None without one.
    pub l1: Option<u32>,
    /// Logical index of the enclosing L2 cache; None without one.
    pub l2: Option<u32>,
    /// Logical index of the enclosing L3 cache (L4 and L5 are not recorded); None without one.
    pub l3: Option<u32>,
    /// Logical index of the local NUMA node: the lowest one attached to the nearest ancestor
    /// that has any; None when no ancestor has one.
    pub numa: Option<u32>,
    /// Logical index of the enclosing package; None without one.
    pub package: Option<u32>,
    /// False when the process may not run here (cpuset, cgroup or affinity mask).
    pub allowed: bool,
    /// The tree node of this PU.
    #[serde(skip)]
    pub node: u32,
}

/// The model of one machine.
#[derive(Clone, Debug)]
pub struct Machine {
    /// Where the model was loaded from.
    pub source: Source,
    /// The CPU-side tree in depth-first order; index 0 is the root (the machine).
    pub nodes: Vec<Node>,
    /// Every PU, allowed or not, indexed by logical index.
    pub pus: Vec<Pu>,
    /// Every NUMA node, indexed by logical index.
    pub numa_nodes: Vec<NumaNode>,
    /// NUMA relative latencies (row-major, NUMA logical order) when the source has them.
    pub numa_distances: Option<Vec<Vec<u64>>>,
    /// CPUs' worth of time the cgroup allows (cpu.max quota / period), if limited.
    pub cpu_quota: Option<f64>,
    /// Level costs [`Machine::distance`] uses; the defaults unless replaced.
    pub costs: LevelCosts,
}

impl Machine {
    /// Number of PUs in the model, allowed or not.
    pub fn num_pus(&self) -> usize {
        self.pus.len()
    }

    /// The PUs this process may use, in logical order.
    pub fn allowed_pus(&self) -> impl Iterator<Item = LogicalPu> + '_ {
        self.pus
            .iter()
            .enumerate()
            .filter(|(_, p)| p.allowed)
            .map(|(i, _)| LogicalPu(i))
    }

    /// The model of a PU. Panics if it is out of range.
    pub fn pu(&self, pu: LogicalPu) -> &Pu {
        &self.pus[pu.0]
    }

    /// The kernel's CPU number of a PU. Panics if it is out of range.
    pub fn os_cpu(&self, pu: LogicalPu) -> OsCpu {
        OsCpu(self.pus[pu.0].os_index)
    }

    /// The PU with this OS index, if the model has one.
    pub fn pu_by_os(&self, os: OsCpu) -> Option<LogicalPu> {
        self.pus
            .iter()
            .position(|p| p.os_index == os.0)
            .map(LogicalPu)
    }

    /// The finest level two PUs share, by bare logical index (a [`LogicalPu`]'s number: the
    /// cost model's inner loops ask this of every pair). Panics if an index is out of range:
    /// indexes come from the model itself.
    pub fn level(&self, a: usize, b: usize) -> Level {
        if a == b {
            return Level::Pu;
        }
        let pb = b as u32;
        let mut node = &self.nodes[self.pus[a].node as usize];
        while !(node.pu_range.0 <= pb && pb < node.pu_range.1) {
            // The root covers every PU, so this always ends.
            node = &self.nodes[node.parent.expect("root covers all PUs") as usize];
        }
        // A die or group has no level of its own: sharing one means at least sharing what
        // holds it (a group of two L3s inside a package is package-near, not machine-far).
        while matches!(node.kind, ObjKind::Die | ObjKind::Group) {
            match node.parent {
                Some(p) => node = &self.nodes[p as usize],
                None => break,
            }
        }
        let by_tree = Level::from_kind(node.kind);
        // Two PUs of one NUMA node share local memory, which is nearer than their common
        // ancestor's kind may say (a package with its memory controller, whose dies split
        // it; an SNC group). A single machine-wide NUMA node distinguishes nothing.
        let numa = self.pus[a].numa;
        if self.numa_nodes.len() > 1
            && numa.is_some()
            && numa == self.pus[b].numa
            && by_tree > Level::Numa
        {
            Level::Numa
        } else {
            by_tree
        }
    }

    /// Communication cost between two PUs (bare logical indexes, as [`Machine::level`]) under
    /// this model's level costs.
    pub fn distance(&self, a: usize, b: usize) -> f64 {
        self.costs.get(self.level(a, b))
    }

    /// Number of tree nodes of each kind, plus NUMA nodes.
    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for n in &self.nodes {
            match n.kind {
                ObjKind::Machine => c.machine += 1,
                ObjKind::Group => c.group += 1,
                ObjKind::Package => c.package += 1,
                ObjKind::Die => c.die += 1,
                ObjKind::L5 | ObjKind::L4 => c.l4 += 1,
                ObjKind::L3 => c.l3 += 1,
                ObjKind::L2 => c.l2 += 1,
                ObjKind::L1 => c.l1 += 1,
                ObjKind::Core => c.core += 1,
                ObjKind::Pu => c.pu += 1,
            }
        }
        c.numa = self.numa_nodes.len();
        c
    }

    /// Tree nodes of one kind, in logical order.
    pub fn nodes_of(&self, kind: ObjKind) -> impl Iterator<Item = &Node> + '_ {
        let mut v: Vec<&Node> = self.nodes.iter().filter(|n| n.kind == kind).collect();
        v.sort_by_key(|n| n.logical_index);
        v.into_iter()
    }

    /// Approximate heap size of the model in bytes (the 16 384-PU budget is checked on it).
    pub fn heap_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Node>()
            + self
                .nodes
                .iter()
                .map(|n| n.children.capacity() * 4 + n.numa.capacity() * 4)
                .sum::<usize>()
            + self.pus.capacity() * std::mem::size_of::<Pu>()
    }
}

/// Per-level object counts, as `huddle topo --json` reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Machine objects (1 for a model of one machine).
    pub machine: usize,
    /// Group objects.
    pub group: usize,
    /// Packages.
    pub package: usize,
    /// Dies.
    pub die: usize,
    /// NUMA nodes.
    pub numa: usize,
    /// L4 and L5 caches together.
    pub l4: usize,
    /// L3 caches.
    pub l3: usize,
    /// L2 caches.
    pub l2: usize,
    /// L1 data or unified caches.
    pub l1: usize,
    /// Cores.
    pub core: usize,
    /// PUs, allowed or not.
    pub pu: usize,
}

#[cfg(test)]
mod tests;
