use super::*;

fn synth(d: &str) -> Machine {
    Machine::from_synthetic(d).expect("valid synthetic description")
}

#[test]
fn synthetic_counts_match_the_description() {
    let m = synth("pack:2 l3:2 core:4 pu:2");
    let c = m.counts();
    assert_eq!((c.package, c.l3, c.core, c.pu), (2, 4, 16, 32));
    assert_eq!(
        m.pus
            .iter()
            .map(|p| p.logical_index as usize)
            .collect::<Vec<_>>(),
        (0..32).collect::<Vec<_>>()
    );
}

#[test]
fn levels_follow_the_tree() {
    let m = synth("pack:2 l3:2 l2:2 core:2 pu:2");
    assert_eq!(m.level(0, 0), Level::Pu);
    assert_eq!(m.level(0, 1), Level::Core);
    assert_eq!(m.level(0, 2), Level::L2);
    assert_eq!(m.level(0, 4), Level::L3);
    assert_eq!(m.level(0, 8), Level::Package);
    assert_eq!(m.level(0, 16), Level::Machine);
    assert!(m.distance(0, 1) < m.distance(0, 4));
    assert!(m.distance(0, 4) < m.distance(0, 16));
    // Symmetric everywhere.
    for a in 0..m.num_pus() {
        for b in 0..m.num_pus() {
            assert_eq!(m.level(a, b), m.level(b, a));
        }
    }
}

#[test]
fn numa_sharing_is_finer_than_the_package_ancestor() {
    // Two NUMA nodes inside one package (SNC-like): PUs in the same node share NUMA.
    let m = synth("pack:1 numa:2 core:2 pu:1");
    assert_eq!(m.counts().numa, 2);
    assert_eq!(m.pus[0].numa, Some(0));
    assert_eq!(m.pus[3].numa, Some(1));
    assert_eq!(m.level(0, 1), Level::Numa);
    assert_eq!(m.level(0, 2), Level::Package);
}

#[test]
fn pu_fields_name_their_ancestors() {
    let m = synth("pack:2 l3:1 l2:2 l1:1 core:1 pu:2");
    let p = &m.pus[5];
    assert_eq!(
        (p.core, p.l1, p.l2, p.l3, p.package),
        (Some(2), Some(2), Some(2), Some(1), Some(1))
    );
}

#[test]
fn level_costs_parse_and_validate() {
    let c = LevelCosts::parse("l3=5, network=100").unwrap();
    assert_eq!(c.get(Level::L3), 5.0);
    assert_eq!(c.get(Level::Network), 100.0);
    assert_eq!(c.get(Level::L2), LevelCosts::default().get(Level::L2));
    for bad in ["l9=1", "l3", "l3=x", "l3=-1", "l2=50", "core=nan"] {
        assert!(LevelCosts::parse(bad).is_err(), "{bad} should be rejected");
    }
}

#[test]
fn bad_synthetic_descriptions_name_the_problem() {
    let cases = [
        ("pack:0 pu:2", "0 children"),
        ("pack:1000 core:1000 pu:1000", "more than"),
        ("pack:2 foo:3 pu:2", "unknown level 'foo'"),
        ("pack:2 core pu:2", "no ':count'"),
        ("", "empty"),
        ("pack:2 core:x", "numeric"),
    ];
    for (desc, want) in cases {
        let err = Machine::from_synthetic(desc).unwrap_err().to_string();
        assert!(err.contains(want), "{desc:?} gave {err:?}, wanted {want:?}");
        assert!(!err.contains('\n'));
    }
}

#[test]
fn bad_xml_files_name_the_problem() {
    let dir = std::env::temp_dir().join(format!("huddle-topo-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let empty = dir.join("empty.xml");
    std::fs::write(&empty, "").unwrap();
    let broken = dir.join("broken.xml");
    std::fs::write(
        &broken,
        "<?xml version=\"1.0\"?><topology><object type=\"Machine\"",
    )
    .unwrap();
    let other = dir.join("other.xml");
    std::fs::write(&other, "<html></html>").unwrap();
    for (p, want) in [
        (dir.join("missing.xml"), "no such file"),
        (empty, "empty"),
        (broken, "malformed"),
        (other, "no <topology>"),
        (
            PathBuf::from("/dev/null"),
            "character device, not a regular file",
        ),
        (
            PathBuf::from("/dev/zero"),
            "character device, not a regular file",
        ),
        (dir.clone(), "directory"),
    ] {
        let err = Machine::from_xml(&p).unwrap_err().to_string();
        assert!(err.contains(want), "{} gave {err:?}", p.display());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

use std::path::PathBuf;

#[test]
fn locations_resolve_like_hwloc_calc() {
    let m = synth("pack:2 l3:2 core:4 pu:2");
    let loc = |s: &str| -> Vec<usize> {
        parse_location(&m, s)
            .unwrap()
            .into_iter()
            .map(|p| p.0)
            .collect()
    };
    assert_eq!(loc("pu:0-3"), vec![0, 1, 2, 3]);
    assert_eq!(loc("core:2"), vec![4, 5]);
    assert_eq!(loc("package:1.core:0"), vec![16, 17]);
    assert_eq!(loc("l3:1.core:1-2.pu:0"), vec![10, 12]);
    assert_eq!(
        loc("core:odd.pu:1"),
        (0..16)
            .filter(|c| c % 2 == 1)
            .map(|c| 2 * c + 1)
            .collect::<Vec<_>>()
    );
    assert_eq!(loc("all ~package:0"), (16..32).collect::<Vec<_>>());
    assert_eq!(loc("0-2,5"), vec![0, 1, 2, 5]);
    assert_eq!(loc("pu:0 pu:31"), vec![0, 31]);
    for bad in ["core:16", "tile:0", "pu:3-1", "pu", "", "pu:0 ~pu:0", "99"] {
        assert!(parse_location(&m, bad).is_err(), "{bad:?} should fail");
    }
}

#[test]
fn cluster_adds_the_network_level() {
    let m = synth("pack:2 core:2 pu:1");
    let c = Cluster::uniform(m, 3).unwrap();
    assert_eq!(c.num_pus(), 12);
    assert_eq!(c.locate(5), (1, 1));
    assert_eq!(c.global(2, 3), 11);
    assert_eq!(c.level(0, 1), Level::Package);
    assert_eq!(c.level(3, 4), Level::Network);
    assert!(c.distance(3, 4) > c.distance(0, 3));
    assert!(Cluster::uniform(synth("pu:1"), 0).is_err());
}

#[test]
fn sixteen_thousand_pus_stay_small() {
    let m = synth("pack:16 numa:2 l3:4 l2:8 core:4 pu:4");
    assert_eq!(m.num_pus(), 16_384);
    // The model itself (not hwloc's copy) stays within a few MB.
    assert!(m.heap_bytes() < 8 << 20, "{} bytes", m.heap_bytes());
    assert_eq!(m.level(0, 16_383), Level::Machine);
}

#[test]
fn system_model_has_allowed_pus() {
    let m = Machine::from_system().unwrap();
    assert!(m.num_pus() >= 1);
    assert!(m.allowed_pus().count() >= 1);
    assert_eq!(m.counts().machine, 1);
}

#[test]
fn dies_and_groups_are_never_farther_than_what_holds_them() {
    // NUMA memory at each package, two dies in it: the same die is as near as the other
    // die of the package (it was "package", farther than "numa" across the dies).
    let m = synth("pack:2 [numa] die:2 core:2 pu:1");
    assert_eq!(m.level(0, 1), Level::Numa, "same die");
    assert_eq!(m.level(0, 2), Level::Numa, "other die, same package");
    assert_eq!(m.level(0, 4), Level::Machine);
    // A group of two L3s inside a package: package-near, not machine-far.
    let g = synth("pack:2 group:2 l3:2 core:1 pu:1");
    assert_eq!(g.level(0, 1), Level::Package, "same group, two L3s");
    assert_eq!(g.level(0, 2), Level::Package, "other group, same package");
    assert_eq!(g.level(0, 4), Level::Machine);
    for m in [&m, &g] {
        for a in 0..m.num_pus() {
            for b in 0..m.num_pus() {
                // Any pair inside a package is nearer than any pair across packages.
                if a / 4 == b / 4 {
                    assert!(m.distance(a, b) < m.distance(a, (a + 4) % 8), "{a}-{b}");
                }
                assert_eq!(m.level(a, b), m.level(b, a));
            }
        }
    }
}

#[test]
fn logical_pus_convert_to_kernel_cpus_and_back() {
    let mut m = synth("pack:2 core:2 pu:1");
    for (pu, os) in m.pus.iter_mut().zip([0, 2, 1, 3]) {
        pu.os_index = os;
    }
    assert_eq!(m.os_cpu(LogicalPu(1)), OsCpu(2));
    assert_eq!(m.pu_by_os(OsCpu(2)), Some(LogicalPu(1)));
    assert_eq!(m.pu_by_os(OsCpu(7)), None);
    assert_eq!(
        m.allowed_pus().collect::<Vec<_>>(),
        (0..4).map(LogicalPu).collect::<Vec<_>>()
    );
}
