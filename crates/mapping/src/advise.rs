//! The placement advisor (SIMMer, chapter 5): for ranks spread over several nodes, compare
//! blocked allocation (ranks 0..k-1 on node 0, the next k on node 1, ...), cyclic allocation
//! (rank r on node r mod N) and huddle's mapping. Inside each node, blocked and cyclic ranks
//! are placed by huddle's algorithm, so the comparison isolates the choice of node.
//!
//! Each placement gets two network figures:
//!
//! * **volume**: the shared cost model's traffic between ranks on different nodes
//!   (`network`, each pair counted once with w = (M\[i\]\[j\] + M\[j\]\[i\]) / 2);
//! * **contention**: every node has one network link. Per node, `out` is what its ranks send
//!   to ranks on other nodes and `in` what they receive from them; the link needs
//!   max(out, in) / bandwidth seconds (a full-duplex link carries both directions at once), and
//!   the phase's network time is the slowest node's ([`Contention`]).
//!
//! The recommendation orders placements by the contention time first, then by volume, then by
//! the full level-weighted cost (see [`Advice`]).

use crate::{cost, map_graph, Algorithm, Graph, MapError, Mapping, Options, Target};
use matrix::CommMatrix;
use serde::Serialize;
use std::cmp::Ordering;
use std::time::Instant;
use topology::LogicalPu;

/// Link bandwidth assumed when none is given, in bytes per second: one Myri-10G link
/// (10 Gb/s), the network of SIMMer's 16-node cluster (seed, chapter 5.1). All nodes share
/// one bandwidth, so it scales every link time alike and never changes the ranking.
pub const DEFAULT_LINK_BANDWIDTH: f64 = 1.25e9;

/// Directed traffic between ranks: `(sender, receiver, amount)`, in the matrix's unit
/// (bytes for matrices from the MPI agent; detection counts for the NAS matrices).
#[derive(Clone, Debug)]
pub struct Traffic {
    n: usize,
    sends: Vec<(usize, usize, f64)>,
}

impl Traffic {
    /// Row i, column j of the matrix is what rank i sends to rank j. A symmetric matrix (the
    /// NAS files) therefore has out = in on every node.
    pub fn from_matrix(m: &CommMatrix) -> Traffic {
        let n = m.n();
        let mut sends = Vec::new();
        for i in 0..n {
            for (j, &v) in m.row(i).iter().enumerate() {
                if i != j && v.is_finite() && v > 0.0 {
                    sends.push((i, j, v));
                }
            }
        }
        Traffic { n, sends }
    }

    /// For callers that only have the symmetric graph: each edge of weight w is w sent in
    /// each direction (the reading of a symmetric matrix).
    pub fn from_graph(g: &Graph) -> Traffic {
        let mut sends = Vec::with_capacity(2 * g.num_edges());
        for (i, j, w) in g.edges() {
            sends.push((i, j, w));
            sends.push((j, i, w));
        }
        Traffic { n: g.n(), sends }
    }

    /// Number of ranks.
    pub fn n(&self) -> usize {
        self.n
    }
}

/// Network link load of one placement (one node per rank).
#[derive(Clone, Debug, Serialize)]
pub struct Contention {
    /// Per node: what its ranks send to ranks on other nodes.
    pub out: Vec<f64>,
    /// Per node: what its ranks receive from ranks on other nodes.
    #[serde(rename = "in")]
    pub inbound: Vec<f64>,
    /// Per node: max(out, in) / bandwidth, in seconds.
    pub link_seconds: Vec<f64>,
    /// The phase's network time: the slowest node's link time.
    pub seconds: f64,
    /// The node with that link time (the lowest index on ties).
    pub busiest: usize,
}

impl Contention {
    /// Link times of the placement `node_of` (rank -> node) over `nodes` nodes, each with one
    /// link of `bandwidth` bytes per second. Ranks with an index past `node_of` are ignored.
    pub fn of(traffic: &Traffic, node_of: &[usize], nodes: usize, bandwidth: f64) -> Contention {
        let nodes = node_of.iter().map(|&k| k + 1).max().unwrap_or(0).max(nodes);
        let mut out = vec![0.0; nodes];
        let mut inbound = vec![0.0; nodes];
        for &(i, j, v) in &traffic.sends {
            let (Some(&a), Some(&b)) = (node_of.get(i), node_of.get(j)) else {
                continue;
            };
            if a != b {
                out[a] += v;
                inbound[b] += v;
            }
        }
        let link_seconds: Vec<f64> = out
            .iter()
            .zip(&inbound)
            .map(|(o, i)| o.max(*i) / bandwidth)
            .collect();
        let (busiest, seconds) =
            link_seconds
                .iter()
                .copied()
                .enumerate()
                .fold(
                    (0, 0.0),
                    |best, (k, s)| if s > best.1 { (k, s) } else { best },
                );
        Contention {
            out,
            inbound,
            link_seconds,
            seconds,
            busiest,
        }
    }
}

/// One placement the advisor scores: where each rank runs and its network figures.
#[derive(Clone, Debug, Serialize)]
pub struct ScoredPlacement {
    /// "blocked", "cyclic" or "mapped".
    pub name: &'static str,
    /// The slot of each rank and its level-weighted cost.
    pub mapping: Mapping,
    /// Traffic that crosses the network (volume, as the cost model counts it).
    pub network: f64,
    /// Per-node link load and the phase's network time.
    pub contention: Contention,
}

/// The advisor's answer. Placements are ordered by the contention time (the phase cannot end
/// before its busiest link has drained); within a relative 1e-9 of each other (symmetric
/// patterns often tie exactly), by network volume (traffic off the busiest link still loads
/// the switch and other links and costs protocol processing); then by the level-weighted
/// cost (where the ranks sit inside the nodes). On equal keys the earlier of blocked, cyclic,
/// mapped wins.
#[derive(Clone, Debug, Serialize)]
pub struct Advice {
    /// Blocked, cyclic and mapped, in that order.
    pub placements: Vec<ScoredPlacement>,
    /// The better of blocked and cyclic (what a launcher flag can select).
    pub launcher_choice: &'static str,
    /// The best overall.
    pub best: &'static str,
    /// Bytes per second of each node's link.
    pub link_bandwidth: f64,
}

/// The advisor on a symmetric graph (each edge's weight sent both ways) at the default link
/// bandwidth.
pub fn advise(graph: &Graph, target: &Target, opts: &Options) -> Result<Advice, MapError> {
    advise_traffic(
        graph,
        &Traffic::from_graph(graph),
        target,
        opts,
        DEFAULT_LINK_BANDWIDTH,
    )
}

/// The advisor on a matrix: row = sender, column = receiver for the link loads, the symmetric
/// graph for the cost model; `link_bandwidth` in bytes per second.
pub fn advise_matrix(
    m: &CommMatrix,
    target: &Target,
    opts: &Options,
    link_bandwidth: f64,
) -> Result<Advice, MapError> {
    advise_traffic(
        &Graph::from_matrix(m),
        &Traffic::from_matrix(m),
        target,
        opts,
        link_bandwidth,
    )
}

fn advise_traffic(
    graph: &Graph,
    traffic: &Traffic,
    target: &Target,
    opts: &Options,
    link_bandwidth: f64,
) -> Result<Advice, MapError> {
    if !(link_bandwidth.is_finite() && link_bandwidth > 0.0) {
        return Err(MapError::LinkBandwidth(link_bandwidth));
    }
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
    let blocked = blocked_nodes(n, &caps);
    let cyclic = cyclic_nodes(n, &caps);
    let mapped = map_graph(
        graph,
        target,
        &Options {
            algorithm: Algorithm::Huddle,
            ..opts.clone()
        },
    )?;
    let placements: Vec<ScoredPlacement> = [
        ("blocked", by_nodes(&blocked, graph, target, opts)?),
        ("cyclic", by_nodes(&cyclic, graph, target, opts)?),
        ("mapped", mapped),
    ]
    .into_iter()
    .map(|(name, mapping)| ScoredPlacement {
        name,
        network: network(&mapping),
        contention: Contention::of(traffic, &mapping.nodes(target), nodes, link_bandwidth),
        mapping,
    })
    .collect();
    Ok(Advice {
        launcher_choice: best_of(&placements[..2]),
        best: best_of(&placements),
        placements,
        link_bandwidth,
    })
}

/// Slurm's block distribution over nodes of `caps` PUs: consecutive ranks, an equal share
/// (rounded up) per node, no node beyond its PUs; what is left goes to nodes with PUs to
/// spare, in order; beyond every PU (oversubscribed), one more rank per node in turn.
fn blocked_nodes(n: usize, caps: &[usize]) -> Vec<usize> {
    let share = n.div_ceil(caps.len().max(1));
    let mut quota: Vec<usize> = caps.iter().map(|&c| c.min(share)).collect();
    let mut left = n - quota.iter().sum::<usize>().min(n);
    for (q, &c) in quota.iter_mut().zip(caps) {
        let more = (c - *q).min(left);
        *q += more;
        left -= more;
    }
    for k in (0..caps.len()).cycle().take(left) {
        quota[k] += 1;
    }
    let mut out = Vec::with_capacity(n);
    for (k, &q) in quota.iter().enumerate() {
        out.extend(std::iter::repeat_n(k, q));
    }
    out.truncate(n);
    out
}

/// Slurm's cyclic distribution over nodes of `caps` PUs: rank r on the next node in turn
/// that has a PU left; once every PU is taken (oversubscribed), plain turns.
fn cyclic_nodes(n: usize, caps: &[usize]) -> Vec<usize> {
    let nodes = caps.len().max(1);
    let mut used = vec![0usize; caps.len()];
    let mut out = Vec::with_capacity(n);
    let mut k = 0;
    for r in 0..n {
        let free = (0..nodes)
            .map(|i| (k + i) % nodes)
            .find(|&i| used.get(i) < caps.get(i));
        let node = free.unwrap_or(r % nodes);
        if let Some(u) = used.get_mut(node) {
            *u += 1;
        }
        out.push(node);
        k = node + 1;
    }
    out
}

/// A placement given as one node per rank (what a job ran with), scored as the advisor scores
/// its own: huddle places each node's ranks on that node's PUs, then network volume and link
/// contention over the nodes.
pub fn evaluate_nodes(
    name: &'static str,
    node_of: &[usize],
    m: &CommMatrix,
    target: &Target,
    opts: &Options,
    link_bandwidth: f64,
) -> Result<ScoredPlacement, MapError> {
    if !(link_bandwidth.is_finite() && link_bandwidth > 0.0) {
        return Err(MapError::LinkBandwidth(link_bandwidth));
    }
    if node_of.len() != m.n() {
        return Err(MapError::NodePlacement(format!(
            "{} nodes given for {} ranks",
            node_of.len(),
            m.n()
        )));
    }
    if let Some(&bad) = node_of.iter().find(|&&k| k >= target.num_nodes()) {
        return Err(MapError::NodePlacement(format!(
            "node {bad} named, the target has {}",
            target.num_nodes()
        )));
    }
    let graph = Graph::from_matrix(m);
    let mapping = by_nodes(node_of, &graph, target, opts)?;
    Ok(ScoredPlacement {
        name,
        network: network(&mapping),
        contention: Contention::of(
            &Traffic::from_matrix(m),
            node_of,
            target.num_nodes(),
            link_bandwidth,
        ),
        mapping,
    })
}

/// Equal within a relative 1e-9 (rounding), else ordered.
fn cmp_close(a: f64, b: f64) -> Ordering {
    if (a - b).abs() <= 1e-9 * a.abs().max(b.abs()) {
        Ordering::Equal
    } else {
        a.total_cmp(&b)
    }
}

/// The advisor's order: contention time, then network volume, then cost.
pub fn compare(a: &ScoredPlacement, b: &ScoredPlacement) -> Ordering {
    cmp_close(a.contention.seconds, b.contention.seconds)
        .then_with(|| cmp_close(a.network, b.network))
        .then_with(|| cmp_close(a.mapping.cost, b.mapping.cost))
}

fn best_of(ps: &[ScoredPlacement]) -> &'static str {
    // min_by keeps the first of equal elements: blocked before cyclic before mapped.
    ps.iter()
        .min_by(|a, b| compare(a, b))
        .map_or("mapped", |p| p.name)
}

fn network(m: &Mapping) -> f64 {
    m.levels
        .iter()
        .find(|(l, _)| *l == topology::Level::Network)
        .map_or(0.0, |x| x.1)
}

/// Ranks fixed to nodes; huddle places each node's ranks on that node's PUs.
fn by_nodes(
    node_of: &[usize],
    graph: &Graph,
    target: &Target,
    opts: &Options,
) -> Result<Mapping, MapError> {
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
            slots[r] = target.slot(node, LogicalPu(pu)).0;
        }
    }
    let eval = cost::evaluate(graph, target, &slots);
    Ok(Mapping {
        slots,
        cost: eval.cost,
        levels: eval.levels,
        algorithm: Algorithm::Huddle,
        seconds: start.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use topology::{Cluster, Machine};

    fn cluster(nodes: usize, node: &str) -> Target {
        Target::cluster(Cluster::uniform(Machine::from_synthetic(node).unwrap(), nodes).unwrap())
    }

    fn opts() -> Options {
        Options {
            seed: 7,
            ..Options::default()
        }
    }

    fn matrix(n: usize, sends: &[(usize, usize, f64)]) -> CommMatrix {
        let mut m = CommMatrix::zeros(n);
        for &(i, j, v) in sends {
            m.add(i, j, v);
        }
        m
    }

    fn by_name<'a>(a: &'a Advice, name: &str) -> &'a ScoredPlacement {
        a.placements.iter().find(|p| p.name == name).unwrap()
    }

    #[test]
    fn block_and_cyclic_keep_each_node_within_its_pus() {
        // Uniform nodes: Slurm's shapes.
        assert_eq!(blocked_nodes(5, &[4, 4]), vec![0, 0, 0, 1, 1]);
        assert_eq!(cyclic_nodes(5, &[4, 4]), vec![0, 1, 0, 1, 0]);
        // A small node takes no more than it has; the rest go where PUs are left.
        assert_eq!(blocked_nodes(6, &[1, 8]), vec![0, 1, 1, 1, 1, 1]);
        assert_eq!(cyclic_nodes(6, &[1, 8]), vec![0, 1, 1, 1, 1, 1]);
        assert_eq!(blocked_nodes(6, &[2, 2, 8]), vec![0, 0, 1, 1, 2, 2]);
        // Oversubscribed: one more rank per node in turn.
        assert_eq!(blocked_nodes(5, &[2, 2]), vec![0, 0, 0, 1, 1]);
        assert_eq!(cyclic_nodes(5, &[2, 2]), vec![0, 1, 0, 1, 0]);
    }

    #[test]
    fn a_node_placement_that_does_not_fit_is_an_error() {
        let target = cluster(2, "core:2 pu:1");
        let m = matrix(3, &[(0, 1, 1.0)]);
        let e = |node_of: &[usize]| {
            evaluate_nodes("ran", node_of, &m, &target, &opts(), DEFAULT_LINK_BANDWIDTH)
                .err()
                .map(|e| e.to_string())
        };
        assert_eq!(
            e(&[0, 1]).unwrap(),
            "node placement: 2 nodes given for 3 ranks"
        );
        assert_eq!(
            e(&[0, 1, 2]).unwrap(),
            "node placement: node 2 named, the target has 2"
        );
        assert_eq!(e(&[0, 0, 1]), None);
    }

    #[test]
    fn a_given_placement_scores_as_the_advisors_own() {
        // Pairs 0-1 and 2-3 talk; blocked puts each pair on one node.
        let m = matrix(
            4,
            &[(0, 1, 100.0), (1, 0, 100.0), (2, 3, 80.0), (3, 2, 80.0)],
        );
        let t = cluster(2, "pack:1 core:2 pu:1");
        let a = advise_matrix(&m, &t, &opts(), 1e9).unwrap();
        let given = evaluate_nodes("what ran", &[0, 0, 1, 1], &m, &t, &opts(), 1e9).unwrap();
        let blocked = by_name(&a, "blocked");
        assert_eq!(given.network, blocked.network);
        assert_eq!(given.contention.seconds, blocked.contention.seconds);
        assert_eq!(given.mapping.nodes(&t), vec![0, 0, 1, 1]);
        // Cyclic splits both pairs: 180 bytes each way over the links.
        let split = evaluate_nodes("what ran", &[0, 1, 0, 1], &m, &t, &opts(), 1e9).unwrap();
        assert_eq!(split.network, 180.0);
        assert!((split.contention.seconds - 180e-9).abs() < 1e-15);
        assert!(evaluate_nodes("x", &[0, 1, 0, 1], &m, &t, &opts(), 0.0).is_err());
    }

    /// out/in per node by hand, max(out, in) / bandwidth, the slowest node.
    #[test]
    fn link_time_is_the_slowest_nodes_larger_direction() {
        // Ranks 0,1 on node 0; 2,3 on node 1; 4 on node 2.
        let t = Traffic::from_matrix(&matrix(
            5,
            &[
                (0, 2, 100.0), // node 0 -> 1
                (1, 4, 50.0),  // node 0 -> 2
                (3, 0, 30.0),  // node 1 -> 0
                (2, 3, 999.0), // inside node 1: not on any link
                (4, 1, 20.0),  // node 2 -> 0
            ],
        ));
        let c = Contention::of(&t, &[0, 0, 1, 1, 2], 3, 10.0);
        assert_eq!(c.out, vec![150.0, 30.0, 20.0]);
        assert_eq!(c.inbound, vec![50.0, 100.0, 50.0]);
        assert_eq!(c.link_seconds, vec![15.0, 10.0, 5.0]);
        assert_eq!((c.busiest, c.seconds), (0, 15.0));
        // A node with no ranks has an idle link; the bandwidth divides every time.
        let c = Contention::of(&t, &[0, 0, 1, 1, 2], 4, 20.0);
        assert_eq!(c.link_seconds, vec![7.5, 5.0, 2.5, 0.0]);
        // Receiving dominates: everyone sends to rank 0.
        let t = Traffic::from_matrix(&matrix(4, &[(1, 0, 4.0), (2, 0, 4.0), (3, 0, 4.0)]));
        let c = Contention::of(&t, &[0, 1, 2, 3], 4, 1.0);
        assert_eq!((c.busiest, c.seconds), (0, 12.0));
        assert_eq!(c.out[0], 0.0);
    }

    #[test]
    fn graph_traffic_is_sent_both_ways() {
        let g = Graph::from_edges(3, &[(0, 1, 5.0), (1, 2, 2.0)]);
        let c = Contention::of(&Traffic::from_graph(&g), &[0, 1, 1], 2, 1.0);
        assert_eq!((c.out, c.inbound), (vec![5.0, 5.0], vec![5.0, 5.0]));
    }

    /// 8 ranks, 2 nodes of 4 cores. Rank 0 talks to 1, 2 and 3 (weight 3 each); rank 4 to
    /// 5, 6, 7 (3 each); and pairs (0,5), (1,4), (2,7), (3,6) at 2 each.
    /// Blocked {0..3},{4..7}: only the four cross pairs leave: volume 8; each node sends and
    /// receives 8. Cyclic {0,2,4,6},{1,3,5,7}: cut = (0,1),(0,3),(4,5),(4,7) + (0,5),(1,4),
    /// (2,7),(3,6) = 4*3 + 4*2 = 20. Both symmetric on the two nodes, so volume and the
    /// busiest link agree here; the next tests pull them apart.
    #[test]
    fn two_nodes_symmetric_volume_and_link_agree() {
        let mut s = vec![];
        for (a, b, w) in [
            (0, 1, 3.0),
            (0, 2, 3.0),
            (0, 3, 3.0),
            (4, 5, 3.0),
            (4, 6, 3.0),
            (4, 7, 3.0),
            (0, 5, 2.0),
            (1, 4, 2.0),
            (2, 7, 2.0),
            (3, 6, 2.0),
        ] {
            s.push((a, b, w));
            s.push((b, a, w));
        }
        let a = advise_matrix(&matrix(8, &s), &cluster(2, "core:4 pu:1"), &opts(), 1.0).unwrap();
        let (b, c) = (by_name(&a, "blocked"), by_name(&a, "cyclic"));
        assert_eq!((b.network, c.network), (8.0, 20.0));
        assert_eq!((b.contention.seconds, c.contention.seconds), (8.0, 20.0));
        assert_eq!(a.launcher_choice, "blocked");
    }

    /// 8 ranks, 4 nodes of 2 cores: blocked {0,1},{2,3},{4,5},{6,7}; cyclic {0,4},{1,5},{2,6},{3,7}.
    fn four_by_two(pairs: &[(usize, usize, f64)], bandwidth: f64) -> Advice {
        let mut s = vec![];
        for &(a, b, w) in pairs {
            s.push((a, b, w));
            s.push((b, a, w));
        }
        advise_matrix(
            &matrix(8, &s),
            &cluster(4, "core:2 pu:1"),
            &opts(),
            bandwidth,
        )
        .unwrap()
    }

    /// Same volume, different busiest link. Pairs of weight 10:
    /// (0,4) and (1,5) are cut by blocked, both between nodes 0 and 2: volume 20, node 0 sends
    /// 20, 20 / 5 = 4 s. (0,1) and (6,7) are cut by cyclic, between nodes 0-1 and 2-3: volume
    /// 20, every node sends 10, 2 s. Volume ties, so contention decides: cyclic.
    #[test]
    fn same_volume_different_link_time() {
        let a = four_by_two(
            &[(0, 4, 10.0), (1, 5, 10.0), (0, 1, 10.0), (6, 7, 10.0)],
            5.0,
        );
        let (b, c) = (by_name(&a, "blocked"), by_name(&a, "cyclic"));
        assert_eq!((b.network, c.network), (20.0, 20.0));
        assert_eq!(b.contention.out, vec![20.0, 0.0, 20.0, 0.0]);
        assert_eq!(c.contention.out, vec![10.0; 4]);
        assert_eq!((b.contention.seconds, c.contention.seconds), (4.0, 2.0));
        assert_eq!(b.contention.busiest, 0);
        assert_eq!(a.launcher_choice, "cyclic");
        // Huddle's own mapping keeps 4-0-1-5 on two nodes cutting one pair and (6,7) local:
        // volume 10, one link pair at 10 -> 2 s; it ties cyclic on time, wins on volume.
        let m = by_name(&a, "mapped");
        assert_eq!((m.network, m.contention.seconds), (10.0, 2.0));
        assert_eq!(a.best, "mapped");
    }

    /// Same busiest link, different volume. Pairs of weight 10: (0,4) is cut by blocked
    /// (nodes 0-2: volume 10, busiest 10); (0,1) and (2,3) by cyclic (nodes 0-1 and 2-3:
    /// volume 20, every node 10). Link times tie at 10 / 1 = 10 s; volume breaks the tie:
    /// blocked.
    #[test]
    fn same_link_time_different_volume() {
        let a = four_by_two(&[(0, 4, 10.0), (0, 1, 10.0), (2, 3, 10.0)], 1.0);
        let (b, c) = (by_name(&a, "blocked"), by_name(&a, "cyclic"));
        assert_eq!((b.network, c.network), (10.0, 20.0));
        assert_eq!((b.contention.seconds, c.contention.seconds), (10.0, 10.0));
        assert_eq!(a.launcher_choice, "blocked");
    }

    /// Less volume but a busier link loses. Blocked cuts (0,4)=4 and (1,5)=4: volume 8, nodes 0
    /// and 2 each send 8 -> 4 s at 2 B/s. Cyclic cuts (0,1)=3, (2,3)=3, (4,5)=3: volume 9,
    /// nodes 0 and 1 each send 6 -> 3 s. A volume model (and the level-weighted cost) picks
    /// blocked; the contention model picks cyclic.
    #[test]
    fn contention_outranks_volume() {
        let a = four_by_two(
            &[
                (0, 4, 4.0),
                (1, 5, 4.0),
                (0, 1, 3.0),
                (2, 3, 3.0),
                (4, 5, 3.0),
            ],
            2.0,
        );
        let (b, c) = (by_name(&a, "blocked"), by_name(&a, "cyclic"));
        assert_eq!((b.network, c.network), (8.0, 9.0));
        assert!(b.mapping.cost < c.mapping.cost);
        assert_eq!(c.contention.out, vec![6.0, 6.0, 3.0, 3.0]);
        assert_eq!((b.contention.seconds, c.contention.seconds), (4.0, 3.0));
        assert_eq!(a.launcher_choice, "cyclic");
        assert_eq!(a.link_bandwidth, 2.0);
    }

    #[test]
    fn bad_bandwidth_is_refused() {
        let m = matrix(2, &[(0, 1, 1.0)]);
        for bw in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = advise_matrix(&m, &cluster(2, "core:1 pu:1"), &opts(), bw);
            assert!(matches!(e, Err(MapError::LinkBandwidth(_))), "{bw}");
        }
    }
}
