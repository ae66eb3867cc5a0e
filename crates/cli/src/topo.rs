//! `huddle topo`: the machine model as a readable tree or as JSON (schema in docs/topology-json.md).

use crate::exit::bad_input;
use crate::machine_args::MachineArgs;
use serde::Serialize;
use std::fmt::Write;
use topology::{Level, Machine, Node, ObjKind};

#[derive(clap::Args)]
#[command(
    long_about = "Show the machine model huddle maps onto: the tree of packages, caches, \
    cores and PUs (with hwloc logical indexes L# and OS indexes P#), NUMA nodes and their \
    distances, and which PUs this process may use. Without --xml or --synthetic it reads \
    this machine through hwloc, honouring the cpuset, cgroup and affinity mask."
)]
pub struct Args {
    #[command(flatten)]
    pub machine: MachineArgs,
    /// Print JSON (schema huddle.topology/1, see docs/topology-json.md)
    #[arg(long)]
    pub json: bool,
    /// Resolve an hwloc location (pu:0-3, core:2, package:1.core:0, 0-3) to PU OS indexes
    #[arg(long, value_name = "LOCATION")]
    pub resolve: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let m = args.machine.load()?;
    if let Some(loc) = &args.resolve {
        let pus = topology::parse_location(&m, loc).map_err(bad_input)?;
        let os: Vec<u32> = pus.iter().map(|&p| m.os_cpu(p).0).collect();
        if args.json {
            println!(
                "{}",
                serde_json::to_string(&serde_json::json!({ "location": loc, "os_indexes": os }))?
            );
        } else {
            println!(
                "{}",
                os.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
            );
        }
        return Ok(0);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&JsonModel::new(&m))?);
    } else {
        print!("{}", render_tree(&m));
    }
    Ok(0)
}

/// The stable JSON form. Add fields, never rename or remove them without bumping `schema`.
#[derive(Serialize)]
struct JsonModel<'a> {
    schema: &'static str,
    source: &'a topology::Source,
    counts: topology::Counts,
    pus: &'a [topology::Pu],
    numa_nodes: &'a [topology::NumaNode],
    numa_distances: &'a Option<Vec<Vec<u64>>>,
    caches: Vec<JsonCache>,
    level_costs: serde_json::Map<String, serde_json::Value>,
    cpu_quota: Option<f64>,
}

#[derive(Serialize)]
struct JsonCache {
    level: &'static str,
    logical_index: u32,
    size: Option<u64>,
    pus: usize,
}

impl<'a> JsonModel<'a> {
    fn new(m: &'a Machine) -> Self {
        let caches = m
            .nodes
            .iter()
            .filter(|n| {
                matches!(
                    n.kind,
                    ObjKind::L1 | ObjKind::L2 | ObjKind::L3 | ObjKind::L4 | ObjKind::L5
                )
            })
            .map(|n| JsonCache {
                level: n.kind.name(),
                logical_index: n.logical_index,
                size: n.cache_size,
                pus: (n.pu_range.1 - n.pu_range.0) as usize,
            })
            .collect();
        let level_costs = Level::ALL
            .iter()
            .map(|l| (l.name().to_string(), serde_json::json!(m.costs.get(*l))))
            .collect();
        JsonModel {
            schema: "huddle.topology/1",
            source: &m.source,
            counts: m.counts(),
            pus: &m.pus,
            numa_nodes: &m.numa_nodes,
            numa_distances: &m.numa_distances,
            caches,
            level_costs,
            cpu_quota: m.cpu_quota,
        }
    }
}

fn size(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        x if x >= 1 << 30 => format!("{:.1}GB", b / (1u64 << 30) as f64),
        x if x >= 1 << 20 => format!("{}MB", x >> 20),
        x if x >= 1 << 10 => format!("{}KB", x >> 10),
        x => format!("{x}B"),
    }
}

/// lstopo-like text: one line per object, PUs listed on their core's line.
fn render_tree(m: &Machine) -> String {
    let c = m.counts();
    let mut out = String::new();
    let src = match &m.source {
        topology::Source::System => "this machine".to_string(),
        topology::Source::Xml(p) => p.display().to_string(),
        topology::Source::Synthetic(d) => format!("synthetic \"{d}\""),
    };
    let _ = writeln!(
        out,
        "{src}: {} packages, {} NUMA nodes, {} L3, {} L2, {} L1, {} cores, {} PUs ({} allowed)",
        c.package,
        c.numa,
        c.l3,
        c.l2,
        c.l1,
        c.core,
        c.pu,
        m.allowed_pus().count()
    );
    if let Some(q) = m.cpu_quota {
        let _ = writeln!(out, "cgroup CPU quota: {q:.2} CPUs");
    }
    node_lines(m, 0, 0, &mut out);
    if let Some(d) = &m.numa_distances {
        let _ = writeln!(out, "NUMA distances (relative latency, by NUMA L#):");
        for row in d {
            let _ = writeln!(
                out,
                "  {}",
                row.iter().map(|v| format!("{v:>4}")).collect::<String>()
            );
        }
    }
    out
}

/// One line for a non-PU object; a core's line lists its PUs.
fn label(m: &Machine, n: &Node) -> String {
    let name = match n.kind {
        ObjKind::Machine => return "Machine".to_string(),
        ObjKind::Group => "Group",
        ObjKind::Package => "Package",
        ObjKind::Die => "Die",
        ObjKind::Core => "Core",
        cache => {
            let size = n
                .cache_size
                .map(|b| format!(" ({})", size(b)))
                .unwrap_or_default();
            return format!(
                "{} L#{}{size}",
                cache.name().to_uppercase(),
                n.logical_index
            );
        }
    };
    let mut s = format!("{name} L#{}", n.logical_index);
    if n.kind == ObjKind::Core {
        let pus: Vec<String> = m.pus[n.pu_range.0 as usize..n.pu_range.1 as usize]
            .iter()
            .map(pu_label)
            .collect();
        let _ = write!(s, ": {}", pus.join(", "));
    }
    s
}

fn pu_label(p: &topology::Pu) -> String {
    let denied = if p.allowed { "" } else { " (not allowed)" };
    format!("PU L#{} P#{}{denied}", p.logical_index, p.os_index)
}

fn node_lines(m: &Machine, id: usize, indent: usize, out: &mut String) {
    let n = &m.nodes[id];
    let pad = "  ".repeat(indent);
    if n.kind == ObjKind::Pu {
        // A PU outside any core (rare in XML exports) gets its own line.
        let pu = m
            .pus
            .iter()
            .find(|p| p.node as usize == id)
            .expect("every PU node has a PU");
        let _ = writeln!(out, "{pad}{}", pu_label(pu));
        return;
    }
    let _ = writeln!(out, "{pad}{}", label(m, n));
    for &numa in &n.numa {
        let node = &m.numa_nodes[numa as usize];
        let mem = node
            .memory
            .map(|b| format!(", {}", size(b)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{pad}  NUMANode L#{} (P#{}{mem})",
            node.logical_index, node.os_index
        );
    }
    if n.kind == ObjKind::Core {
        return;
    }
    for &child in &n.children {
        node_lines(m, child as usize, indent + 1, out);
    }
}
