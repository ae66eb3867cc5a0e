//! The placement advisor (SIMMer, chapter 5): for ranks spread over several nodes, compare
//! blocked allocation (ranks 0..k-1 on node 0, the next k on node 1, ...), cyclic allocation
//! (rank r on node r mod N) and huddle's mapping, each scored with the shared cost model.
//! Inside each node, blocked and cyclic ranks are placed by huddle's algorithm, so the
//! comparison isolates the choice of node.

use crate::{cost, map_graph, Algorithm, Graph, MapError, Mapping, Options, Target};
use serde::Serialize;
use std::time::Instant;

#[derive(Clone, Debug, Serialize)]
pub struct Placement {
    /// "blocked", "cyclic" or "mapped".
    pub name: &'static str,
    pub mapping: Mapping,
    /// Traffic that crosses the network.
    pub network: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Advice {
    pub placements: Vec<Placement>,
    /// The cheapest of blocked and cyclic (what a launcher flag can select).
    pub launcher_choice: &'static str,
    /// The cheapest overall.
    pub best: &'static str,
}

pub fn advise(graph: &Graph, target: &Target, opts: &Options) -> Result<Advice, MapError> {
    let n = graph.n();
    let nodes = target.num_nodes();
    let caps: Vec<usize> = (0..nodes).map(|k| target.node_capacity(k)).collect();
    let total: usize = caps.iter().sum();
    if n > total && !opts.oversubscribe {
        return Err(MapError::TooManyTasks {
            tasks: n,
            slots: total,
        });
    }
    let block = n.div_ceil(nodes);
    let blocked: Vec<usize> = (0..n).map(|r| r / block).collect();
    let cyclic: Vec<usize> = (0..n).map(|r| r % nodes).collect();
    let mut placements = vec![
        by_nodes("blocked", &blocked, graph, target, opts)?,
        by_nodes("cyclic", &cyclic, graph, target, opts)?,
    ];
    let mapped = map_graph(
        graph,
        target,
        &Options {
            algorithm: Algorithm::Huddle,
            ..opts.clone()
        },
    )?;
    placements.push(Placement {
        name: "mapped",
        network: network(&mapped),
        mapping: mapped,
    });
    let cheapest = |ps: &[Placement]| {
        ps.iter()
            .min_by(|a, b| a.mapping.cost.total_cmp(&b.mapping.cost))
            .map_or("mapped", |p| p.name)
    };
    Ok(Advice {
        launcher_choice: cheapest(&placements[..2]),
        best: cheapest(&placements),
        placements,
    })
}

fn network(m: &Mapping) -> f64 {
    m.levels
        .iter()
        .find(|(l, _)| *l == topology::Level::Network)
        .map_or(0.0, |x| x.1)
}

/// Ranks fixed to nodes; huddle places each node's ranks on that node's PUs.
fn by_nodes(
    name: &'static str,
    node_of: &[usize],
    graph: &Graph,
    target: &Target,
    opts: &Options,
) -> Result<Placement, MapError> {
    let start = Instant::now();
    let mut slots = vec![0; graph.n()];
    for node in 0..target.num_nodes() {
        let ranks: Vec<usize> = (0..graph.n()).filter(|&r| node_of[r] == node).collect();
        if ranks.is_empty() {
            continue;
        }
        let sub = Target::node_target(target, node);
        let local = map_graph(
            &graph.subgraph(&ranks),
            &sub,
            &Options {
                algorithm: Algorithm::Huddle,
                ..opts.clone()
            },
        )?;
        for (&r, &pu) in ranks.iter().zip(&local.slots) {
            slots[r] = target.global(node, pu);
        }
    }
    let eval = cost::evaluate(graph, target, &slots);
    let mapping = Mapping {
        slots,
        cost: eval.cost,
        levels: eval.levels,
        algorithm: Algorithm::Huddle,
        seconds: start.elapsed().as_secs_f64(),
    };
    Ok(Placement {
        name,
        network: network(&mapping),
        mapping,
    })
}
