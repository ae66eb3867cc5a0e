//! Rank placements of the contention study (SIMMer part 2: 16 nodes x 4 cores there). On one
//! machine a "node" is emulated as a group of PUs: the packages when there are as many as
//! requested, else equal runs of consecutive PUs. Placements give, for each rank, the PU
//! (logical index) it is pinned to.

use serde::Serialize;
use topology::{Machine, ObjKind};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PlacementKind {
    /// One rank per node, on the node's first PU (16X1 in the thesis).
    OnePerNode,
    /// Consecutive PUs in logical order: neighbours share the nearest caches.
    Packed,
    /// As far apart as the PUs allow: rank r on PU r * P / n.
    Spread,
    /// Ranks 0..k-1 on node 0, k..2k-1 on node 1, ... (k = ceil(n / nodes)).
    Blocked,
    /// Rank r on node r mod nodes.
    Cyclic,
}

impl PlacementKind {
    pub const ALL: [PlacementKind; 5] = [
        PlacementKind::OnePerNode,
        PlacementKind::Packed,
        PlacementKind::Spread,
        PlacementKind::Blocked,
        PlacementKind::Cyclic,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PlacementKind::OnePerNode => "one-per-node",
            PlacementKind::Packed => "packed",
            PlacementKind::Spread => "spread",
            PlacementKind::Blocked => "blocked",
            PlacementKind::Cyclic => "cyclic",
        }
    }

    pub fn parse(s: &str) -> Option<PlacementKind> {
        PlacementKind::ALL.into_iter().find(|p| p.name() == s)
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PlacementError {
    #[error("{0} ranks need {0} nodes for one rank per node, but only {1} are emulated")]
    TooFewNodes(usize, usize),
    #[error("cannot emulate {0} nodes on {1} usable PUs")]
    BadNodes(usize, usize),
    #[error("no ranks to place")]
    NoRanks,
}

/// The emulated nodes: lists of PU logical indexes.
pub fn nodes(machine: &Machine, count: usize) -> Result<Vec<Vec<usize>>, PlacementError> {
    let pus: Vec<usize> = machine.allowed_pus().map(|p| p.0).collect();
    if count == 0 || count > pus.len() {
        return Err(PlacementError::BadNodes(count, pus.len()));
    }
    let packages: Vec<Vec<usize>> = machine
        .nodes_of(ObjKind::Package)
        .map(|n| {
            (n.pu_range.0 as usize..n.pu_range.1 as usize)
                .filter(|p| pus.contains(p))
                .collect::<Vec<_>>()
        })
        .filter(|v: &Vec<usize>| !v.is_empty())
        .collect();
    if packages.len() == count {
        return Ok(packages);
    }
    Ok((0..count)
        .map(|k| pus[k * pus.len() / count..(k + 1) * pus.len() / count].to_vec())
        .collect())
}

/// PU (logical index) of each rank. More ranks than PUs wrap around (oversubscription).
pub fn place(
    machine: &Machine,
    kind: PlacementKind,
    ranks: usize,
    node_count: usize,
) -> Result<Vec<usize>, PlacementError> {
    if ranks == 0 {
        return Err(PlacementError::NoRanks);
    }
    let pus: Vec<usize> = machine.allowed_pus().map(|p| p.0).collect();
    let nodes = nodes(machine, node_count)?;
    let g = nodes.len();
    let in_node = |node: usize, k: usize| nodes[node][k % nodes[node].len()];
    Ok(match kind {
        PlacementKind::OnePerNode => {
            if ranks > g {
                return Err(PlacementError::TooFewNodes(ranks, g));
            }
            (0..ranks).map(|r| nodes[r][0]).collect()
        }
        PlacementKind::Packed => (0..ranks).map(|r| pus[r % pus.len()]).collect(),
        PlacementKind::Spread => (0..ranks)
            .map(|r| {
                if ranks <= pus.len() {
                    pus[r * pus.len() / ranks]
                } else {
                    pus[r % pus.len()]
                }
            })
            .collect(),
        PlacementKind::Blocked => {
            let k = ranks.div_ceil(g);
            (0..ranks).map(|r| in_node(r / k, r % k)).collect()
        }
        PlacementKind::Cyclic => (0..ranks).map(|r| in_node(r % g, r / g)).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements_on_two_packages() {
        let m = Machine::from_synthetic("pack:2 core:4 pu:1").unwrap();
        let p = |k, n, g| place(&m, k, n, g).unwrap();
        assert_eq!(p(PlacementKind::Packed, 4, 2), vec![0, 1, 2, 3]);
        assert_eq!(p(PlacementKind::Spread, 4, 2), vec![0, 2, 4, 6]);
        assert_eq!(p(PlacementKind::Blocked, 4, 2), vec![0, 1, 4, 5]);
        assert_eq!(p(PlacementKind::Cyclic, 4, 2), vec![0, 4, 1, 5]);
        assert_eq!(p(PlacementKind::OnePerNode, 2, 2), vec![0, 4]);
        assert_eq!(p(PlacementKind::OnePerNode, 4, 4), vec![0, 2, 4, 6]);
        assert_eq!(
            place(&m, PlacementKind::OnePerNode, 4, 2),
            Err(PlacementError::TooFewNodes(4, 2))
        );
        assert_eq!(
            place(&m, PlacementKind::Packed, 4, 9),
            Err(PlacementError::BadNodes(9, 8))
        );
    }

    #[test]
    fn oversubscribed_placements_wrap_and_stay_valid() {
        let m = Machine::from_synthetic("core:2 pu:1").unwrap();
        for k in [
            PlacementKind::Packed,
            PlacementKind::Spread,
            PlacementKind::Blocked,
            PlacementKind::Cyclic,
        ] {
            let v = place(&m, k, 8, 2).unwrap();
            assert_eq!(v.len(), 8);
            assert!(v.iter().all(|&p| p < 2), "{k:?} {v:?}");
            // Balanced: each PU gets 4 ranks.
            assert_eq!(v.iter().filter(|&&p| p == 0).count(), 4, "{k:?} {v:?}");
        }
        assert_eq!(
            place(&m, PlacementKind::Blocked, 4, 2).unwrap(),
            vec![0, 0, 1, 1]
        );
        assert_eq!(
            place(&m, PlacementKind::Cyclic, 4, 2).unwrap(),
            vec![0, 1, 0, 1]
        );
    }
}
