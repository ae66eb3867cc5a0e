//! hwloc's location syntax, as `hwloc-calc` and `hwloc-bind` accept it, over huddle's model.
//!
//! hwloc exposes this parser only inside its command-line tools (`hwloc-calc`), not in
//! libhwloc, so huddle implements the same grammar on its model and its tests check the
//! result against `hwloc-calc` on the same topology.
//!
//! ```text
//! locations := term { (' ' | ';') term }        union, in order; '~term' removes
//! term      := 'all' | oslist | step { '.' step }
//! step      := type ':' indexes                  indexes are logical, relative to the parent
//! indexes   := item { ',' item } ;  item := N | N-M | 'all' | 'odd' | 'even'
//! oslist    := N | N-M { ',' ... }               bare numbers are PU OS indexes (taskset -c)
//! type      := machine | package (socket, pack) | die | numa (node, numanode) | group
//!            | l1 (l1d) | l2 | l3 | l4 | l5 | core | pu
//! ```
//! e.g. `pu:0-3`, `core:2`, `package:1.core:0`, `numa:0.core:odd`, `all ~core:0`.

use crate::{CpuSet, LogicalPu, Machine, ObjKind, OsCpu, TopologyError};

enum Target {
    Kind(ObjKind),
    Numa,
}

fn target_of(name: &str) -> Option<Target> {
    Some(Target::Kind(match name.to_ascii_lowercase().as_str() {
        "machine" => ObjKind::Machine,
        "package" | "socket" | "pack" => ObjKind::Package,
        "die" => ObjKind::Die,
        "group" => ObjKind::Group,
        "l1" | "l1d" | "l1cache" | "l1dcache" => ObjKind::L1,
        "l2" | "l2d" | "l2cache" | "l2dcache" => ObjKind::L2,
        "l3" | "l3d" | "l3cache" | "l3dcache" => ObjKind::L3,
        "l4" | "l4cache" => ObjKind::L4,
        "l5" | "l5cache" => ObjKind::L5,
        "core" => ObjKind::Core,
        "pu" => ObjKind::Pu,
        "numa" | "node" | "numanode" => return Some(Target::Numa),
        _ => return None,
    }))
}

/// Resolves a location string to the PUs it selects (ascending, no duplicates).
pub fn parse_location(machine: &Machine, location: &str) -> Result<Vec<LogicalPu>, TopologyError> {
    let bad = |reason: String| TopologyError::BadLocation {
        location: location.to_string(),
        reason,
    };
    let mut selected = vec![false; machine.num_pus()];
    let mut any = false;
    for raw in location
        .split(|c: char| c.is_whitespace() || c == ';')
        .filter(|s| !s.is_empty())
    {
        any = true;
        let (remove, term) = match raw.strip_prefix('~') {
            Some(t) => (true, t),
            None => (false, raw),
        };
        for pu in resolve_term(machine, term).map_err(bad)? {
            selected[pu] = !remove;
        }
    }
    if !any {
        return Err(bad("empty location".into()));
    }
    let out: Vec<LogicalPu> = (0..selected.len())
        .filter(|&i| selected[i])
        .map(LogicalPu)
        .collect();
    if out.is_empty() {
        return Err(bad("selects no PU".into()));
    }
    Ok(out)
}

fn resolve_term(m: &Machine, term: &str) -> Result<Vec<usize>, String> {
    if term.eq_ignore_ascii_case("all") {
        return Ok((0..m.num_pus()).collect());
    }
    if term.starts_with(|c: char| c.is_ascii_digit()) {
        return os_list(m, term);
    }
    // Each step narrows a set of PU ranges (the objects chosen so far).
    let mut scopes: Vec<(u32, u32)> = vec![(0, m.num_pus() as u32)];
    for step in term.split('.') {
        let (name, idx) = step
            .split_once(':')
            .ok_or_else(|| format!("'{step}' is not type:index"))?;
        let target = target_of(name).ok_or_else(|| format!("unknown object type '{name}'"))?;
        let all = objects(m, &target);
        let mut next = Vec::new();
        for &(lo, hi) in &scopes {
            let inside: Vec<(u32, u32)> = all
                .iter()
                .copied()
                .filter(|&(a, b)| lo <= a && b <= hi && a < b)
                .collect();
            if inside.is_empty() {
                return Err(format!("no {name} object inside the selection"));
            }
            for i in indexes(idx, inside.len()).map_err(|e| format!("{step}: {e}"))? {
                next.push(inside[i]);
            }
        }
        scopes = next;
    }
    let mut pus: Vec<usize> = scopes
        .iter()
        .flat_map(|&(a, b)| a as usize..b as usize)
        .collect();
    pus.sort_unstable();
    pus.dedup();
    Ok(pus)
}

/// PU ranges of every object of a kind, in logical order.
fn objects(m: &Machine, target: &Target) -> Vec<(u32, u32)> {
    match target {
        Target::Kind(k) => m.nodes_of(*k).map(|n| n.pu_range).collect(),
        Target::Numa => m
            .numa_nodes
            .iter()
            .map(|n| m.nodes[n.attached_to as usize].pu_range)
            .collect(),
    }
}

/// Expands `0-3,5`, `all`, `odd`, `even` over `count` objects.
fn indexes(spec: &str, count: usize) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for item in spec.split(',') {
        match item {
            "all" => out.extend(0..count),
            "even" => out.extend((0..count).step_by(2)),
            "odd" => out.extend((1..count).step_by(2)),
            _ => {
                let set = list(item)?;
                if let Some(b) = set.iter().next_back().filter(|&b| b as usize >= count) {
                    return Err(format!("index {b} out of range, only {count} available"));
                }
                out.extend(set.iter().map(|i| i as usize));
            }
        }
    }
    Ok(out)
}

/// `N` or `N-M` (or a list of them) of logical indexes, through the one list parser; a
/// model has at most MAX_PUS PUs, so no index of it is larger.
fn list(item: &str) -> Result<CpuSet, String> {
    if item.trim().is_empty() {
        return Err("an empty index".into());
    }
    CpuSet::parse_index_list(item, crate::MAX_PUS as u32)
        .map_err(|e| format!("'{item}': {}", e.reason))
}

/// `0-3,8`: PU OS indexes, as taskset and numactl write them.
fn os_list(m: &Machine, spec: &str) -> Result<Vec<usize>, String> {
    let cpus = CpuSet::parse_list(spec).map_err(|e| format!("'{spec}': {}", e.reason))?;
    let mut out = Vec::new();
    for os in cpus.iter() {
        let pu = m
            .pu_by_os(OsCpu(os))
            .ok_or_else(|| format!("no PU with OS index {os} on this machine"))?;
        out.push(pu.0);
    }
    out.sort_unstable();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logical_indexes_go_past_the_kernels_cpu_limit() {
        // Logical indexes of a model of 10 000 objects: past 8191, the limit of CPU
        // numbers, which OS lists keep.
        assert_eq!(indexes("9000-9001,odd", 10_000).unwrap()[..2], [9000, 9001]);
        assert!(indexes("9999", 10_000).is_ok());
        assert!(indexes("10000", 10_000)
            .unwrap_err()
            .contains("out of range"));
        assert!(indexes("70000", 80_000).unwrap_err().contains("too large"));
        assert!(list("9000").is_ok());
        assert!(CpuSet::parse_list("9000").is_err());
    }
}
