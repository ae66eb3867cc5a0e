//! `huddle report DIR`: render a run directory's raw data into DIR/index.html again, or, for
//! the report directory of a job over several nodes, the job's page.

use crate::exit::bad_input;
use mapping::advise::{self, ScoredPlacement, DEFAULT_LINK_BANDWIDTH};
use mapping::{Options, Orientation, Target};
use matrix::CommMatrix;
use report::job::{NextRun, NodeSummary, PlacementRow};
use std::path::{Path, PathBuf};
use topology::{Cluster, Machine};

#[derive(clap::Args)]
#[command(
    long_about = "Render the HTML report of a run directory written by `huddle run \
    --report DIR` again from its raw data (run.json, tasks.json, matrix.csv, snapshots.json, \
    placements.csv, decisions.json, samples.json). The page is one self-contained file that \
    opens offline.\n\nFor the report directory of a job over several nodes (`huddle run \
    --node-managers --report DIR`: DIR/node-HOST/ per node, DIR/rank-matrix.csv) it writes \
    the job's page: a row per node (state, ranks, first remap, migrations, the way its report \
    came: shared file system or the launcher's stderr, link to the node's own page), the job's \
    rank matrix grouped by node, and the placement advised for the next \
    run (blocked, cyclic or mapped, as `huddle map --advise` compares them) against what ran, \
    with an Open MPI rankfile."
)]
pub struct Args {
    /// The run directory
    pub dir: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let page = if report::job::is_job_dir(&args.dir) {
        render_job(&args.dir)?
    } else {
        report::render(&args.dir).map_err(bad_input)?
    };
    println!("{}", page.display());
    Ok(0)
}

/// Writes the job page `dir/index.html` from the node directories and the rank matrix.
pub fn render_job(dir: &Path) -> anyhow::Result<PathBuf> {
    let nodes = report::job::load_nodes(dir).map_err(bad_input)?;
    let path = dir.join("rank-matrix.csv");
    let ranks = if path.is_file() {
        Some(CommMatrix::read(&path).map_err(|e| bad_input(format!("{}: {e}", path.display())))?)
    } else {
        None
    };
    let next = match &ranks {
        Some(m) if nodes.len() >= 2 && m.n() > 0 => Some(next_run(m, &nodes)?),
        _ => None,
    };
    report::job::render_job(dir, &nodes, ranks.as_ref(), next.as_ref()).map_err(bad_input)
}

/// The advisor on the job's matrix: blocked, cyclic and mapped, and what ran.
fn next_run(m: &CommMatrix, nodes: &[NodeSummary]) -> anyhow::Result<NextRun> {
    // Each node as a machine of one core per rank it can hold: the question here is which
    // ranks share a node; the node managers' own topologies are not in the job directory.
    let per_node = nodes
        .iter()
        .map(|n| n.ranks.len())
        .max()
        .unwrap_or(0)
        .max(m.n().div_ceil(nodes.len()))
        .max(1);
    let machine = Machine::from_synthetic(&format!("pack:1 core:{per_node} pu:1"))?;
    let target = Target::cluster(Cluster::uniform(machine, nodes.len())?);
    let opts = Options::default();
    let bw = DEFAULT_LINK_BANDWIDTH;
    let advice = advise::advise_matrix(m, &target, &opts, bw).map_err(bad_input)?;
    let row = |p: &ScoredPlacement| PlacementRow {
        name: p.name.to_string(),
        network: p.network,
        link_seconds: p.contention.seconds,
        node_of: p.mapping.nodes(&target),
    };
    let ran = match report::job::ranks_to_nodes(nodes, m.n()) {
        Some(node_of) => Some(row(&advise::evaluate_nodes(
            "what ran", &node_of, m, &target, &opts, bw,
        )
        .map_err(bad_input)?)),
        None => None,
    };
    let best = advice
        .placements
        .iter()
        .find(|p| p.name == advice.best)
        .expect("the advisor's best is one of its placements");
    let hosts: Vec<String> = nodes.iter().map(|n| n.host.clone()).collect();
    let rankfile = crate::map::render(
        &best.mapping,
        &target,
        crate::map::Format::Rankfile,
        &hosts,
        Orientation::AsIs,
    )?;
    Ok(NextRun {
        ran,
        options: advice.placements.iter().map(row).collect(),
        best: advice.best.to_string(),
        rankfile,
        link_bandwidth: bw,
        model: format!(
            "Each of the {} nodes is modelled as {per_node} cores, one rank each (the rankfile's \
             slots are those cores; the node managers' own topologies are in their pages).",
            nodes.len()
        ),
    })
}
