//! The baselines: placements that ignore the communication matrix.

use crate::rng::SplitMix64;
use crate::{Algorithm, Arch, MapError, Options, Slot, Target};

/// The global PU index of each of `n` tasks under a baseline `alg` (compact, scatter,
/// round-robin, random or identity); PU loads differ by at most one when oversubscribed.
pub fn place(
    alg: Algorithm,
    n: usize,
    target: &Target,
    opts: &Options,
) -> Result<Vec<usize>, MapError> {
    // Random draws from the same slots huddle's algorithms use, so that it differs from them
    // only in ignoring the matrix.
    if alg == Algorithm::Random {
        let mut slots = target.slots_for(n, opts.oversubscribe, opts.share_cores)?;
        SplitMix64::new(opts.seed).shuffle(&mut slots);
        return Ok(slots);
    }
    let mut order = target.allowed_slots();
    let p = order.len();
    if p == 0 {
        return Err(MapError::NoSlots);
    }
    if n > p && !opts.oversubscribe {
        return Err(MapError::TooManyTasks { tasks: n, slots: p });
    }
    match alg {
        Algorithm::Identity => {
            order.sort_by_key(|&g| (target.node_of(g), target.os_cpu(g)));
        }
        Algorithm::RoundRobin => order.sort_by_key(|&g| (target.smt_rank(g.0), g)),
        Algorithm::Scatter => order = scatter_order(target, &order),
        _ => {}
    }
    // Blocks of consecutive tasks per PU for the "consecutive" orders, cycling otherwise;
    // both keep PU loads within one of each other.
    let blocked = matches!(alg, Algorithm::Compact | Algorithm::Identity);
    Ok((0..n)
        .map(|i| {
            if blocked {
                order[i * p / n.max(p)].0
            } else {
                order[i % p].0
            }
        })
        .collect())
}

/// Leaves interleaved level by level: the first tasks land in different top-level subtrees.
fn scatter_order(target: &Target, slots: &[Slot]) -> Vec<Slot> {
    let placement: Vec<usize> = slots.iter().map(|s| s.0).collect();
    let arch = Arch::build(target, &placement);
    let leaves = interleave(&arch, arch.root());
    leaves.into_iter().map(|l| Slot(arch.slot(l))).collect()
}

fn interleave(arch: &Arch, node: usize) -> Vec<usize> {
    let parts: Vec<Vec<usize>> = arch.nodes[node]
        .children
        .iter()
        .map(|&c| {
            if c >= crate::arch::LEAF {
                vec![c - crate::arch::LEAF]
            } else {
                interleave(arch, c)
            }
        })
        .collect();
    let longest = parts.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::with_capacity(parts.iter().map(Vec::len).sum());
    for k in 0..longest {
        for p in &parts {
            if let Some(&x) = p.get(k) {
                out.push(x);
            }
        }
    }
    out
}
