//! huddle's model against hwloc's own tools on the same inputs: every XML in
//! shared/data/topologies must give the counts `hwloc-info` reports, and locations must
//! resolve to the PUs `hwloc-calc` gives.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use topology::{parse_location, Machine};

fn shared_topologies() -> Vec<PathBuf> {
    let dir = std::env::var_os("HUDDLE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"))
        .join("data/topologies");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (set HUDDLE_SHARED to the shared/ folder)",
                dir.display()
            )
        })
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "xml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 10,
        "expected the shared topologies, found {}",
        files.len()
    );
    files
}

/// Object counts per type name as `hwloc-info` prints them ("depth 2: 8 Package (type #1)").
fn hwloc_info_counts(file: &PathBuf) -> HashMap<String, usize> {
    let out = Command::new("hwloc-info")
        .args(["--if", "xml", "-i"])
        .arg(file)
        .output()
        .expect("hwloc-info runs (installed by scripts/bootstrap)");
    assert!(
        out.status.success(),
        "hwloc-info failed on {}",
        file.display()
    );
    let mut counts = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((_, rest)) = line.split_once(':') else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (Some(n), Some(ty)) = (words.next(), words.next()) else {
            continue;
        };
        let ty = if ty.starts_with("Group") { "Group" } else { ty };
        *counts.entry(ty.to_string()).or_insert(0) += n.parse::<usize>().unwrap();
    }
    counts
}

#[test]
fn every_shared_xml_matches_hwloc_info() {
    for file in shared_topologies() {
        let m = Machine::from_xml(&file).unwrap_or_else(|e| panic!("{e}"));
        let want = hwloc_info_counts(&file);
        let get = |k: &str| want.get(k).copied().unwrap_or(0);
        let c = m.counts();
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        assert_eq!(c.pu, get("PU"), "{name}: PUs");
        assert_eq!(c.core, get("Core"), "{name}: cores");
        assert_eq!(c.package, get("Package"), "{name}: packages");
        assert_eq!(c.numa, get("NUMANode"), "{name}: NUMA nodes");
        assert_eq!(c.l3, get("L3Cache"), "{name}: L3");
        assert_eq!(c.l2, get("L2Cache"), "{name}: L2");
        assert_eq!(c.l1, get("L1dCache") + get("L1Cache"), "{name}: L1");
        assert_eq!(c.die, get("Die"), "{name}: dies");
        assert_eq!(c.group, get("Group"), "{name}: groups");
        assert_eq!(m.pus.len(), c.pu);
        // Every PU lies under the root and distances are symmetric on a sample.
        for a in (0..m.num_pus()).step_by(7) {
            for b in (0..m.num_pus()).step_by(5) {
                assert_eq!(m.level(a, b), m.level(b, a), "{name}: level({a},{b})");
            }
        }
    }
}

/// PU OS indexes hwloc-calc gives for a location, or None if it rejects it. hwloc-calc skips
/// out-of-range indexes with a warning on stderr where huddle fails; treat those as rejected.
fn hwloc_calc(file: &PathBuf, location: &str) -> Option<Vec<u32>> {
    let out = Command::new("hwloc-calc")
        .args(["--if", "xml", "-i"])
        .arg(file)
        .args(["--po", "-I", "pu"])
        .args(location.split_whitespace())
        .output()
        .expect("hwloc-calc runs");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || text.is_empty() || !out.stderr.is_empty() {
        return None;
    }
    let mut v: Vec<u32> = text.split(',').map(|s| s.parse().unwrap()).collect();
    v.sort_unstable();
    Some(v)
}

#[test]
fn locations_resolve_as_hwloc_calc_does() {
    let locations = [
        "pu:0-3",
        "core:2",
        "package:1.core:0",
        "numa:1",
        "l3:0.core:1",
        "core:odd",
        "core:all.pu:0",
        "package:0.l2:1-2.pu:1",
        "all ~core:0",
    ];
    let mut compared = 0;
    for file in shared_topologies() {
        let m = Machine::from_xml(&file).unwrap();
        for loc in locations {
            let ours = parse_location(&m, loc).ok().map(|pus| {
                let mut os: Vec<u32> = pus.iter().map(|&p| m.os_cpu(p).0).collect();
                os.sort_unstable();
                os
            });
            let theirs = hwloc_calc(&file, loc);
            if let (Some(o), Some(t)) = (&ours, &theirs) {
                assert_eq!(o, t, "{} '{loc}'", file.display());
                compared += 1;
            } else if theirs.is_some() {
                panic!(
                    "{} '{loc}': hwloc-calc resolves it, huddle does not",
                    file.display()
                );
            }
        }
    }
    assert!(compared > 50, "only {compared} comparisons ran");
}
