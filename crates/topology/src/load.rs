//! Loading a [`Machine`] through hwloc: the running system, an XML export, or a synthetic
//! description. Inputs are checked before hwloc sees them so that errors name the problem
//! (hwloc itself only answers "invalid").

use crate::{LevelCosts, Machine, Node, NumaNode, ObjKind, Pu, TopologyError};
use hwlocality::object::types::ObjectType;
use hwlocality::object::TopologyObject;
use hwlocality::topology::Topology;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Largest synthetic machine huddle builds: four times the 16 384-PU target, so a typo such
/// as `pu:20000000` fails at once instead of exhausting memory.
pub const MAX_PUS: u64 = 65_536;

/// Where a model came from.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "lowercase")]
pub enum Source {
    /// The running system ([`Machine::from_system`]).
    System,
    /// An hwloc XML export, read from this path.
    Xml(PathBuf),
    /// An hwloc synthetic description, as given.
    Synthetic(String),
}

impl Machine {
    /// The machine this process runs on, restricted to what the process may use: hwloc drops
    /// PUs outside the cgroup/cpuset; PUs outside the affinity mask stay in the tree but are
    /// marked not allowed, so mappings avoid them.
    pub fn from_system() -> Result<Machine, TopologyError> {
        let topo = without_unused_plugins(|| {
            Topology::builder()
                .without_component(CPUID_COMPONENT)
                .map_err(|e| e.to_string())?
                .build()
                .map_err(|e| e.to_string())
        })
        .map_err(TopologyError::Discovery)?;
        let mut m = extract(&topo, Source::System);
        let affinity = cpuset::affinity(0);
        let allowed_by_hwloc = topo.allowed_cpuset();
        for pu in &mut m.pus {
            let in_mask = affinity
                .as_ref()
                .is_none_or(|mask| mask.contains(pu.os_index));
            pu.allowed = in_mask && allowed_by_hwloc.is_set(pu.os_index as usize);
        }
        m.cpu_quota = cgroup_cpu_quota();
        Ok(m)
    }

    /// A machine from an hwloc XML export (as written by `lstopo file.xml`).
    pub fn from_xml(path: &Path) -> Result<Machine, TopologyError> {
        let bad = |reason: &str| TopologyError::BadFile {
            path: path.display().to_string(),
            reason: reason.to_string(),
        };
        let text = inputfile::read(path).map_err(|e| match e {
            inputfile::InputError::Directory => bad("is a directory, expected an hwloc XML file"),
            e => bad(&e.to_string()),
        })?;
        if text.iter().all(u8::is_ascii_whitespace) {
            return Err(bad("empty file, expected an hwloc XML topology"));
        }
        if !text.windows(9).any(|w| w == b"<topology") {
            return Err(bad("not an hwloc XML topology (no <topology> element)"));
        }
        let xml = std::str::from_utf8(&text).map_err(|_| bad("not UTF-8 text"))?;
        let topo = Topology::builder()
            .from_xml(xml)
            .and_then(|b| {
                b.build()
                    .map_err(|_| hwlocality::topology::builder::StringInputError::Invalid)
            })
            .map_err(|_| bad("malformed hwloc XML (hwloc rejected it)"))?;
        Ok(extract(&topo, Source::Xml(path.to_path_buf())))
    }

    /// A machine from an hwloc synthetic description such as `pack:2 l3:2 core:4 pu:2`.
    pub fn from_synthetic(desc: &str) -> Result<Machine, TopologyError> {
        check_synthetic(desc)?;
        let topo = Topology::builder()
            .from_synthetic(desc)
            .and_then(|b| {
                b.build()
                    .map_err(|_| hwlocality::topology::builder::StringInputError::Invalid)
            })
            .map_err(|_| TopologyError::BadSynthetic {
                desc: desc.to_string(),
                reason: "hwloc rejected it (expected levels like 'pack:2 core:4 pu:2')".into(),
            })?;
        Ok(extract(&topo, Source::Synthetic(desc.to_string())))
    }

    /// Loads from exactly one of the three sources, as every CLI command offers them.
    pub fn load(xml: Option<&Path>, synthetic: Option<&str>) -> Result<Machine, TopologyError> {
        match (xml, synthetic) {
            (Some(p), None) => Machine::from_xml(p),
            (None, Some(d)) => Machine::from_synthetic(d),
            (None, None) => Machine::from_system(),
            (Some(_), Some(_)) => Err(TopologyError::TwoSources),
        }
    }

    /// This machine with `costs` in place of its level costs.
    pub fn with_costs(mut self, costs: LevelCosts) -> Machine {
        self.costs = costs;
        self
    }
}

/// hwloc plugins whose discoveries huddle's model never holds: I/O devices (PCI, GPUs, OpenCL,
/// displays; hwloc drops I/O objects by default anyway) and libxml2 (the running system is not
/// read from XML). hwloc loads every plugin when a topology is first built; loading the four
/// Debian ships (pci, opencl, gl, xml_libxml) took 3.3 of the 7 ms `huddle topo` spent here
/// (docs/detect.md), on every `huddle run`.
const UNUSED_PLUGINS: &str = "hwloc_pci,hwloc_opencl,hwloc_gl,hwloc_cuda,hwloc_nvml,hwloc_rsmi,\
hwloc_levelzero,hwloc_xml_libxml";
const PLUGINS_BLACKLIST: &str = "HWLOC_PLUGINS_BLACKLIST";

/// hwloc's x86 component: beside the Linux one it only adds CPUID attributes (vendor, model)
/// that the model never reads, and to read them it binds huddle's thread to every PU in turn
/// (2 sched_setaffinity calls here, one per PU). Left out, `huddle topo --json` is the same
/// and the load 0.6-0.8 ms shorter on this 2-PU machine (docs/detect.md).
const CPUID_COMPONENT: &str = "x86";

/// Runs `load` with hwloc told to skip [`UNUSED_PLUGINS`]. hwloc reads that only from the
/// environment, so the variable is set for the load and removed right after, and only while
/// this process has a single thread (setenv beside another thread's getenv is undefined) and
/// the user has not set it: no program huddle starts inherits it (Open MPI's own hwloc needs
/// the PCI plugin to find which network cards are near which cores).
fn without_unused_plugins<T>(load: impl FnOnce() -> T) -> T {
    let skip = std::env::var_os(PLUGINS_BLACKLIST).is_none() && single_threaded();
    if skip {
        std::env::set_var(PLUGINS_BLACKLIST, UNUSED_PLUGINS);
    }
    let loaded = load();
    if skip {
        std::env::remove_var(PLUGINS_BLACKLIST);
    }
    loaded
}

/// This process has one thread (false where /proc cannot tell).
fn single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task").is_ok_and(|tasks| tasks.count() == 1)
}

/// Level names hwloc's synthetic parser understands (it matches prefixes case-insensitively).
fn known_synthetic_level(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    let n = n.trim_end_matches(|c: char| c.is_ascii_digit() && !n.starts_with('l'));
    matches!(
        n,
        "machine"
            | "group"
            | "package"
            | "pack"
            | "socket"
            | "die"
            | "numa"
            | "numanode"
            | "node"
            | "memcache"
            | "core"
            | "pu"
            | "misc"
    ) || {
        // Caches: l1, l2d, l3u, l1i, l2cache, l1dcache ...
        let b = n.as_bytes();
        b.len() >= 2
            && b[0] == b'l'
            && (b'1'..=b'5').contains(&b[1])
            && matches!(
                &n[2..],
                "" | "d" | "u" | "i" | "cache" | "dcache" | "ucache" | "icache"
            )
    }
}

/// Rejects what hwloc would reject without saying why, and machines too large to build.
fn check_synthetic(desc: &str) -> Result<(), TopologyError> {
    let bad = |reason: String| TopologyError::BadSynthetic {
        desc: desc.to_string(),
        reason,
    };
    let mut tokens = Vec::new();
    let (mut depth, mut start) = (0i32, None);
    for (i, c) in desc.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            _ => {}
        }
        if c.is_whitespace() && depth == 0 {
            if let Some(s) = start.take() {
                tokens.push(&desc[s..i]);
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        tokens.push(&desc[s..]);
    }
    if depth != 0 {
        return Err(bad("unbalanced brackets".into()));
    }
    // Memory-side children ("[numa(memory=..)]") do not multiply the PU count.
    let levels: Vec<&str> = tokens.into_iter().filter(|t| !t.starts_with('[')).collect();
    if levels.is_empty() {
        return Err(bad("empty description".into()));
    }
    let mut pus: u64 = 1;
    for tok in &levels {
        let (name, rest) = tok
            .split_once(':')
            .ok_or_else(|| bad(format!("level '{tok}' has no ':count'")))?;
        if !known_synthetic_level(name) {
            return Err(bad(format!("unknown level '{name}'")));
        }
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let count: u64 = digits
            .parse()
            .map_err(|_| bad(format!("level '{tok}' has no numeric count")))?;
        if count == 0 {
            return Err(bad(format!(
                "level '{name}' has 0 children: a machine needs at least one PU"
            )));
        }
        pus = pus.saturating_mul(count);
        if pus > MAX_PUS {
            return Err(bad(format!(
                "describes more than {MAX_PUS} PUs, the most huddle models"
            )));
        }
    }
    Ok(())
}

/// The tightest cgroup v2 CPU quota on this process's cgroup path, in CPUs.
fn cgroup_cpu_quota() -> Option<f64> {
    let cg = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = cg.lines().find_map(|l| l.strip_prefix("0::"))?;
    let mut dir = PathBuf::from("/sys/fs/cgroup");
    let mut best: Option<f64> = None;
    for part in std::iter::once("").chain(path.split('/').filter(|p| !p.is_empty())) {
        dir.push(part);
        if let Ok(s) = std::fs::read_to_string(dir.join("cpu.max")) {
            let mut it = s.split_whitespace();
            if let (Some(q), Some(p)) = (it.next(), it.next()) {
                if let (Ok(q), Ok(p)) = (q.parse::<f64>(), p.parse::<f64>()) {
                    if p > 0.0 {
                        best = Some(best.map_or(q / p, |b: f64| b.min(q / p)));
                    }
                }
            }
        }
    }
    best
}

fn kind_of(ty: ObjectType) -> Option<ObjKind> {
    Some(match ty {
        ObjectType::Machine => ObjKind::Machine,
        ObjectType::Group => ObjKind::Group,
        ObjectType::Package => ObjKind::Package,
        ObjectType::Die => ObjKind::Die,
        ObjectType::L5Cache => ObjKind::L5,
        ObjectType::L4Cache => ObjKind::L4,
        ObjectType::L3Cache => ObjKind::L3,
        ObjectType::L2Cache => ObjKind::L2,
        ObjectType::L1Cache => ObjKind::L1,
        ObjectType::Core => ObjKind::Core,
        ObjectType::PU => ObjKind::Pu,
        _ => return None,
    })
}

/// Copies hwloc's tree into the plain model.
fn extract(topo: &Topology, source: Source) -> Machine {
    let mut m = Machine {
        source,
        nodes: Vec::new(),
        pus: Vec::new(),
        numa_nodes: Vec::new(),
        numa_distances: None,
        cpu_quota: None,
        costs: LevelCosts::default(),
    };
    walk(topo.root_object(), None, 0, &mut m);
    m.numa_nodes.sort_by_key(|n| n.logical_index);
    // Node.numa held hwloc logical indexes; after sorting they are also vector indexes.
    fill_pu_ancestry(&mut m);
    m.numa_distances = numa_distances(topo, m.numa_nodes.len());
    m
}

fn walk(obj: &TopologyObject, parent: Option<u32>, depth: u16, m: &mut Machine) {
    let kept = kind_of(obj.object_type()).map(|kind| {
        let id = m.nodes.len() as u32;
        let cache_size = match obj.attributes() {
            Some(hwlocality::object::attributes::ObjectAttributes::Cache(c)) => {
                c.size().map(|s| s.get())
            }
            _ => None,
        };
        m.nodes.push(Node {
            kind,
            logical_index: obj.logical_index() as u32,
            os_index: obj.os_index().map(|i| i as u32),
            parent,
            children: Vec::new(),
            depth,
            cache_size,
            pu_range: (m.pus.len() as u32, 0),
            numa: Vec::new(),
        });
        if let Some(p) = parent {
            m.nodes[p as usize].children.push(id);
        }
        if kind == ObjKind::Pu {
            m.pus.push(Pu {
                os_index: obj.os_index().unwrap_or(0) as u32,
                logical_index: obj.logical_index() as u32,
                core: None,
                l1: None,
                l2: None,
                l3: None,
                numa: None,
                package: None,
                allowed: true,
                node: id,
            });
        }
        id
    });
    // NUMA nodes attach to the nearest kept node (possibly through memory-side caches).
    let holder = kept.or(parent);
    if let Some(h) = holder {
        collect_numa(obj, h, m);
    }
    let (child_parent, child_depth) = match kept {
        Some(id) => (Some(id), depth + 1),
        None => (parent, depth),
    };
    for child in obj.normal_children() {
        walk(child, child_parent, child_depth, m);
    }
    if let Some(id) = kept {
        m.nodes[id as usize].pu_range.1 = m.pus.len() as u32;
    }
}

fn collect_numa(obj: &TopologyObject, holder: u32, m: &mut Machine) {
    for mem in obj.memory_children() {
        if mem.object_type() == ObjectType::NUMANode {
            let memory = match mem.attributes() {
                Some(hwlocality::object::attributes::ObjectAttributes::NUMANode(a)) => {
                    a.local_memory().map(|v| v.get())
                }
                _ => None,
            };
            m.numa_nodes.push(NumaNode {
                os_index: mem.os_index().unwrap_or(0) as u32,
                logical_index: mem.logical_index() as u32,
                memory,
                attached_to: holder,
            });
            m.nodes[holder as usize]
                .numa
                .push(mem.logical_index() as u32);
        } else {
            collect_numa(mem, holder, m);
        }
    }
}

/// Sets each PU's enclosing core, caches, package and NUMA node (logical indexes).
fn fill_pu_ancestry(m: &mut Machine) {
    for i in 0..m.pus.len() {
        let mut cur = m.nodes[m.pus[i].node as usize].parent;
        let pu = &mut m.pus[i];
        while let Some(id) = cur {
            let n = &m.nodes[id as usize];
            let slot = match n.kind {
                ObjKind::Core => &mut pu.core,
                ObjKind::L1 => &mut pu.l1,
                ObjKind::L2 => &mut pu.l2,
                ObjKind::L3 => &mut pu.l3,
                ObjKind::Package => &mut pu.package,
                _ => &mut None,
            };
            if slot.is_none() {
                *slot = Some(n.logical_index);
            }
            if pu.numa.is_none() {
                pu.numa = n.numa.iter().min().copied();
            }
            cur = n.parent;
        }
    }
}

/// The NUMA latency matrix, if the source has one covering every NUMA node.
fn numa_distances(topo: &Topology, n: usize) -> Option<Vec<Vec<u64>>> {
    if n == 0 {
        return None;
    }
    let all = topo.distances(None).ok()?;
    for d in all {
        let objs: Vec<Option<usize>> = d
            .objects()
            .map(|o| {
                o.filter(|o| o.object_type() == ObjectType::NUMANode)
                    .map(|o| o.logical_index())
            })
            .collect();
        if objs.len() != n || objs.iter().any(Option::is_none) {
            continue;
        }
        let values = d.distances();
        let mut out = vec![vec![0u64; n]; n];
        for (r, lr) in objs.iter().enumerate() {
            for (c, lc) in objs.iter().enumerate() {
                out[lr.unwrap_or(0)][lc.unwrap_or(0)] = values[r * n + c];
            }
        }
        return Some(out);
    }
    None
}
