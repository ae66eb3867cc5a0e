//! `huddle map`: a communication matrix and a machine (or cluster) in, one PU per task out,
//! in the format a launcher takes; `--advise` compares blocked, cyclic and mapped placement
//! of ranks over nodes.

use crate::exit::bad_input;
use crate::machine_args::MachineArgs;
use mapping::{Algorithm, MapError, Mapping, Options, Orientation, Slot, Target};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use topology::{Cluster, LevelCosts, Machine, OsCpu};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// {"mapping": [PU OS index per task], "cost", "levels", "algorithm", "seconds", ...}
    Json,
    /// PU OS indexes, comma-separated, in task order
    Cpus,
    /// Open MPI rankfile: `rank R=HOST slot=PACKAGE:CORE` (logical indexes, as Open MPI 4 reads them)
    Rankfile,
    /// Slurm `--cpu-bind=map_cpu:` list (one line per node on clusters)
    Slurm,
    /// OMP_PLACES value, one place per thread: {3},{5},...
    OmpPlaces,
    /// One `taskset -c CPU` prefix per task, line i for task i
    Taskset,
    /// Human-readable table (the default of --advise)
    Text,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrientArg {
    /// Flip columns when the matrix is stored with reversed columns (the NAS files are)
    Auto,
    AsIs,
    Reversed,
}

#[derive(clap::Args)]
#[command(
    long_about = "Map the tasks of a communication matrix (CSV, N lines of N numbers) onto the \
    machine so that partners share caches. Cost = sum over pairs of traffic x level cost of the \
    finest level their PUs share (--costs). Tasks take one core each before any second \
    hardware thread; more tasks than allowed PUs needs --oversubscribe (loads then differ by \
    at most one). With --nodes or --node-xml ranks go to nodes first, then PUs. --advise \
    compares blocked, cyclic and mapped placement over the nodes by network volume and by \
    link contention (per node max(bytes out, bytes in) / --link-bandwidth; the slowest node \
    sets the time; row = sender, column = receiver) and recommends by contention time, then \
    volume, then cost."
)]
pub struct Args {
    /// Communication matrix (CSV)
    #[arg(long, value_name = "FILE")]
    pub matrix: PathBuf,
    #[command(flatten)]
    pub machine: MachineArgs,
    /// A cluster of N copies of the machine (--xml, --synthetic or this one)
    #[arg(long, value_name = "N", conflicts_with = "node_xml")]
    pub nodes: Option<usize>,
    /// A cluster with one hwloc XML file per node
    #[arg(long, value_name = "F1,F2,...", value_delimiter = ',', conflicts_with_all = ["xml", "synthetic"])]
    pub node_xml: Vec<PathBuf>,
    /// huddle, drb, greedy, treematch, scotch, compact, scatter, round-robin, random, identity
    #[arg(long, default_value = "huddle")]
    pub algorithm: String,
    /// Seed for randomised choices (same seed, same mapping)
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Allow more tasks than allowed PUs
    #[arg(long)]
    pub oversubscribe: bool,
    /// Let tasks share a core's hardware threads while other cores are idle
    #[arg(long)]
    pub share_cores: bool,
    /// Only use these PUs (hwloc location syntax, applied on every node)
    #[arg(long, value_name = "LOCATION")]
    pub pus: Option<String>,
    /// Output format (default json; text for --advise)
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Host names for rankfiles (default localhost, or node0, node1, ... on clusters)
    #[arg(long, value_name = "H1,H2,...", value_delimiter = ',')]
    pub hosts: Vec<String>,
    /// Compare blocked, cyclic and mapped placement of ranks over the nodes
    #[arg(long)]
    pub advise: bool,
    /// Bytes per second of each node's network link, for --advise's contention time
    /// (default 1.25e9: one 10 Gb/s Myri-10G link, SIMMer's network)
    #[arg(long, value_name = "BYTES_PER_S")]
    pub link_bandwidth: Option<f64>,
    /// Score this placement instead of computing one: PU OS indexes per task, comma-separated
    /// (as --format cpus prints them); prints {"cost", "levels", "mapping"} as JSON
    #[arg(long, value_name = "CPUS", conflicts_with = "advise")]
    pub score: Option<String>,
    /// How the matrix file is laid out
    #[arg(long, value_enum, default_value = "auto")]
    pub orientation: OrientArg,
}

fn map_err(e: MapError) -> anyhow::Error {
    match e {
        MapError::Scotch(_) => anyhow::Error::new(e),
        _ => bad_input(e),
    }
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let raw = matrix::CommMatrix::read(&args.matrix).map_err(bad_input)?;
    let symmetric = raw.is_symmetric();
    let code = map_matrix(&args, raw)?;
    // After success only, so that an error stays one line; --advise reads both directions
    // (bytes out and in per node), so there is nothing to note.
    if !symmetric && !args.advise {
        eprintln!(
            "huddle: note: {} is not symmetric; a pair's traffic is taken as the mean of its two directions",
            args.matrix.display()
        );
    }
    Ok(code)
}

fn map_matrix(args: &Args, raw: matrix::CommMatrix) -> anyhow::Result<i32> {
    let (m, orientation) = match args.orientation {
        OrientArg::Auto => mapping::orient(&raw),
        OrientArg::AsIs => (raw, Orientation::AsIs),
        OrientArg::Reversed => (mapping::flip(&raw), Orientation::ReversedColumns),
    };
    let target = load_target(args)?;
    let opts = Options {
        algorithm: Algorithm::parse(&args.algorithm).map_err(bad_input)?,
        seed: args.seed,
        oversubscribe: args.oversubscribe,
        share_cores: args.share_cores,
    };
    if args.link_bandwidth.is_some() && !args.advise {
        return Err(bad_input("--link-bandwidth is an option of --advise"));
    }
    if args.advise {
        if target.num_nodes() < 2 {
            return Err(bad_input(
                "--advise needs a cluster: give --nodes N (N >= 2) or --node-xml",
            ));
        }
        let bandwidth = args
            .link_bandwidth
            .unwrap_or(mapping::advise::DEFAULT_LINK_BANDWIDTH);
        if !(bandwidth.is_finite() && bandwidth > 0.0) {
            return Err(bad_input(format!(
                "--link-bandwidth {bandwidth}: give a positive number of bytes per second (e.g. 1.25e9)"
            )));
        }
        let advice =
            mapping::advise::advise_matrix(&m, &target, &opts, bandwidth).map_err(map_err)?;
        print!(
            "{}",
            render_advice(&advice, &target, args.format.unwrap_or(Format::Text))?
        );
        return Ok(0);
    }
    if let Some(list) = &args.score {
        let slots = score_slots(list, &target, m.n())?;
        let e = mapping::cost::evaluate_matrix(&m, &target, &slots);
        let levels: BTreeMap<&'static str, f64> =
            e.levels.iter().map(|(l, v)| (l.name(), *v)).collect();
        let os = numbers(&target.os_cpus(&slots));
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"cost": e.cost, "levels": levels, "mapping": os})
            )?
        );
        return Ok(0);
    }
    let result = mapping::map(&m, &target, &opts).map_err(map_err)?;
    print!(
        "{}",
        render(
            &result,
            &target,
            args.format.unwrap_or(Format::Json),
            &args.hosts,
            orientation
        )?
    );
    Ok(0)
}

/// A rankfile that puts several ranks on one PU needs a word: Open MPI does not count such a
/// job as oversubscribed, so its ranks poll for messages without yielding the PU. LAMMPS with
/// 4 ranks on this 2-PU VM ran 97 s from such a rankfile against 4.3 s under the OS scheduler,
/// and 4.1-4.2 s from the same rankfile with mpi_yield_when_idle (2026-11-25). The rankfile
/// format takes '#' comments (Open MPI 4.1).
fn rankfile_oversubscribed(slots: &[usize]) -> Option<String> {
    let mut pus = slots.to_vec();
    pus.sort_unstable();
    pus.dedup();
    (pus.len() < slots.len()).then(|| {
        format!(
            "{} ranks on {} PUs: Open MPI does not see that this rankfile oversubscribes, and \
             ranks that poll on a shared PU wait for their turn; run with \
             `--mca mpi_yield_when_idle 1`",
            slots.len(),
            pus.len()
        )
    })
}

/// The global PU slots of a `--score` list of OS indexes, one per task of an n-task matrix.
fn score_slots(list: &str, target: &Target, n: usize) -> anyhow::Result<Vec<usize>> {
    if target.is_cluster() {
        return Err(bad_input(
            "--score places tasks on one machine: leave out --nodes and --node-xml",
        ));
    }
    let slots =
        list.split(',')
            .map(|s| {
                let os: u32 = s.trim().parse().map_err(|_| {
                    bad_input(format!("--score: '{}' is not a PU OS index", s.trim()))
                })?;
                target.slot_by_os(0, OsCpu(os)).map(|s| s.0).ok_or_else(|| {
                    bad_input(format!("--score: the machine has no PU with OS index {os}"))
                })
            })
            .collect::<anyhow::Result<Vec<usize>>>()?;
    if slots.len() != n {
        return Err(bad_input(format!(
            "--score: {} PUs for a matrix of {n} tasks",
            slots.len()
        )));
    }
    Ok(slots)
}

fn load_target(args: &Args) -> anyhow::Result<Target> {
    let costs = match &args.machine.costs {
        Some(spec) => Some(LevelCosts::parse(spec).map_err(bad_input)?),
        None => None,
    };
    let mut target = if !args.node_xml.is_empty() {
        Target::cluster(Cluster::from_xml_files(&args.node_xml).map_err(bad_input)?)
    } else {
        let machine: Machine = args.machine.load()?;
        match args.nodes {
            None => Target::machine(machine),
            Some(0) => return Err(bad_input("--nodes must be at least 1")),
            Some(n) => Target::cluster(Cluster::uniform(machine, n).map_err(bad_input)?),
        }
    };
    if let Some(c) = costs {
        target.set_costs(c);
    }
    if let Some(loc) = &args.pus {
        target.restrict(loc).map_err(map_err)?;
    }
    Ok(target)
}

fn levels_json(m: &Mapping) -> BTreeMap<&'static str, f64> {
    m.levels.iter().map(|(l, v)| (l.name(), *v)).collect()
}

fn host(target: &Target, hosts: &[String], node: usize) -> String {
    match hosts.get(node) {
        Some(h) => h.clone(),
        None if target.is_cluster() => format!("node{node}"),
        None => "localhost".into(),
    }
}

/// Kernel CPUs as the numbers the JSON and text outputs write.
fn numbers(cpus: &[OsCpu]) -> Vec<u32> {
    cpus.iter().map(|c| c.0).collect()
}

pub(crate) fn render(
    m: &Mapping,
    target: &Target,
    format: Format,
    hosts: &[String],
    orientation: Orientation,
) -> anyhow::Result<String> {
    let os = numbers(&m.os_cpus(target));
    let nodes = m.nodes(target);
    let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    Ok(match format {
        Format::Json => {
            let mut v = json!({
                "mapping": os,
                "cost": m.cost,
                "levels": levels_json(m),
                "algorithm": m.algorithm.name(),
                "seconds": m.seconds,
                "tasks": os.len(),
                "orientation": orientation,
            });
            if target.is_cluster() {
                v["nodes"] = json!(nodes);
            }
            serde_json::to_string_pretty(&v)? + "\n"
        }
        Format::Cpus => list(&os) + "\n",
        Format::Slurm if !target.is_cluster() => format!("--cpu-bind=map_cpu:{}\n", list(&os)),
        Format::Slurm => {
            let mut out = String::new();
            for k in 0..target.num_nodes() {
                let local: Vec<u32> = (0..os.len())
                    .filter(|&t| nodes[t] == k)
                    .map(|t| os[t])
                    .collect();
                if !local.is_empty() {
                    out += &format!(
                        "{}: --cpu-bind=map_cpu:{}\n",
                        host(target, hosts, k),
                        list(&local)
                    );
                }
            }
            out
        }
        Format::OmpPlaces if target.is_cluster() => {
            return Err(bad_input(
                "omp-places describes the threads of one process; not for clusters",
            ))
        }
        Format::OmpPlaces => {
            os.iter()
                .map(|o| format!("{{{o}}}"))
                .collect::<Vec<_>>()
                .join(",")
                + "\n"
        }
        Format::Taskset => os
            .iter()
            .zip(&nodes)
            .map(|(o, &k)| {
                if target.is_cluster() {
                    format!("{} taskset -c {o}\n", host(target, hosts, k))
                } else {
                    format!("taskset -c {o}\n")
                }
            })
            .collect(),
        Format::Rankfile => {
            let mut out = String::new();
            if let Some(note) = rankfile_oversubscribed(&m.slots) {
                eprintln!("huddle: note: {note}");
                out += &format!("# {note}\n");
            }
            for (t, &g) in m.slots.iter().enumerate() {
                let g = Slot(g);
                let k = target.node_of(g);
                out += &format!(
                    "rank {t}={} slot={}\n",
                    host(target, hosts, k),
                    rank_slot(target, g)
                );
            }
            out
        }
        Format::Text => {
            let mut out = format!(
                "algorithm {}  cost {:.1}  ({:.3} ms)\n",
                m.algorithm,
                m.cost,
                m.seconds * 1e3
            );
            for (l, v) in &m.levels {
                if *v > 0.0 {
                    out += &format!("  traffic inside {:<8} {v:.1}\n", l.name());
                }
            }
            out += &format!("cpus {}\n", list(&os));
            out
        }
    })
}

/// Open MPI 4 rankfile slot: logical package and logical core inside it.
fn rank_slot(target: &Target, g: Slot) -> String {
    let pu = target.pu(g);
    let node = target.node_of(g);
    let machine = &target.machines()[node];
    match (pu.package, pu.core) {
        (Some(p), Some(c)) => {
            let first = machine
                .pus
                .iter()
                .filter(|q| q.package == Some(p))
                .filter_map(|q| q.core)
                .min()
                .unwrap_or(c);
            format!("{p}:{}", c - first)
        }
        (None, Some(c)) => c.to_string(),
        _ => pu.logical_index.to_string(),
    }
}

fn render_advice(
    a: &mapping::advise::Advice,
    target: &Target,
    format: Format,
) -> anyhow::Result<String> {
    match format {
        Format::Json => {
            let placements: Vec<_> = a
                .placements
                .iter()
                .map(|p| {
                    json!({
                        "name": p.name,
                        "cost": p.mapping.cost,
                        "network": p.network,
                        "link_seconds": p.contention.seconds,
                        "busiest_node": p.contention.busiest,
                        "node_out": p.contention.out,
                        "node_in": p.contention.inbound,
                        "node_link_seconds": p.contention.link_seconds,
                        "levels": levels_json(&p.mapping),
                        "mapping": numbers(&p.mapping.os_cpus(target)),
                        "nodes": p.mapping.nodes(target),
                    })
                })
                .collect();
            Ok(serde_json::to_string_pretty(&json!({
                "placements": placements,
                "link_bandwidth": a.link_bandwidth,
                "launcher_choice": a.launcher_choice,
                "best": a.best,
            }))? + "\n")
        }
        Format::Text => {
            let best = a
                .placements
                .iter()
                .map(|p| p.contention.seconds)
                .fold(f64::INFINITY, f64::min);
            let mut out = format!(
                "{:<9} {:>14} {:>14} {:>14} {:>7} {:>12} {:>9}\n",
                "placement", "cost", "network", "busiest link", "node", "link time/s", "vs best"
            );
            for p in &a.placements {
                let c = &p.contention;
                let busiest = c.out[c.busiest].max(c.inbound[c.busiest]);
                out += &format!(
                    "{:<9} {:>14.1} {:>14.1} {:>14.1} {:>7} {:>12.4e} {:>9.3}\n",
                    p.name,
                    p.mapping.cost,
                    p.network,
                    busiest,
                    c.busiest,
                    c.seconds,
                    if best > 0.0 { c.seconds / best } else { 1.0 }
                );
            }
            out += &format!(
                "link time = busiest node's max(out, in) / {:.4e} B/s; ranked by link time, \
                 then network, then cost\n",
                a.link_bandwidth
            );
            out += &format!(
                "advice: {} allocation (of blocked/cyclic); best overall: {}\n",
                a.launcher_choice, a.best
            );
            Ok(out)
        }
        _ => Err(bad_input("--advise prints text or json")),
    }
}
