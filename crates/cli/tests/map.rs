//! `huddle map` end to end: the done-when check, output formats, the advisor, bad input.

mod common;
use common::{huddle, json, Scratch};
use std::path::PathBuf;
use std::process::Output;

fn shared(rel: &str) -> String {
    let base = std::env::var_os("HUDDLE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"));
    base.join(rel).display().to_string()
}

fn cg32_on_xeon(extra: &[&str]) -> Output {
    let m = shared("data/matrices/nas-cg-32.csv");
    let x = shared("data/topologies/32em64t-2n8c2t-pci-normalio.xml");
    let mut args = vec!["map", "--matrix", &m, "--xml", &x];
    args.extend_from_slice(extra);
    huddle(&args)
}

#[test]
fn done_when_cg32_costs_no_more_than_scotch() {
    let ours = json(&cg32_on_xeon(&["--format", "json"]));
    let scotch = json(&cg32_on_xeon(&[
        "--format",
        "json",
        "--algorithm",
        "scotch",
    ]));
    let mut pus: Vec<u64> = ours["mapping"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    pus.sort_unstable();
    assert_eq!(pus, (0..32).collect::<Vec<u64>>(), "one task per PU");
    assert_eq!(ours["algorithm"], "huddle");
    assert_eq!(ours["orientation"], "reversed-columns");
    let (c, s) = (
        ours["cost"].as_f64().unwrap(),
        scotch["cost"].as_f64().unwrap(),
    );
    assert!(c <= s, "huddle {c} > scotch {s}");
    let levels: f64 = ours["levels"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_f64().unwrap())
        .sum();
    assert!(levels > 0.0);
    assert!(ours["seconds"].as_f64().unwrap() >= 0.0);
}

#[test]
fn formats_agree_with_the_json_mapping() {
    let v = json(&cg32_on_xeon(&["--format", "json"]));
    let os: Vec<String> = v["mapping"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.to_string())
        .collect();
    let text = |f: &str| {
        let o = cg32_on_xeon(&["--format", f]);
        assert!(o.status.success());
        String::from_utf8(o.stdout).unwrap()
    };
    assert_eq!(text("cpus").trim(), os.join(","));
    assert_eq!(
        text("slurm").trim(),
        format!("--cpu-bind=map_cpu:{}", os.join(","))
    );
    let places: Vec<String> = os.iter().map(|o| format!("{{{o}}}")).collect();
    assert_eq!(text("omp-places").trim(), places.join(","));
    let taskset = text("taskset");
    assert_eq!(taskset.lines().count(), 32);
    assert_eq!(
        taskset.lines().next().unwrap(),
        format!("taskset -c {}", os[0])
    );
    let rankfile = text("rankfile");
    let lines: Vec<&str> = rankfile.lines().collect();
    assert_eq!(lines.len(), 32);
    for (r, l) in lines.iter().enumerate() {
        assert!(l.starts_with(&format!("rank {r}=localhost slot=")), "{l}");
        let slot = l.rsplit('=').next().unwrap();
        let (p, c) = slot.split_once(':').expect("package:core");
        assert!(
            p.parse::<u32>().unwrap() < 2 && c.parse::<u32>().unwrap() < 8,
            "{l}"
        );
    }
    assert!(!rankfile.contains('#'), "one rank per PU: no note");
}

#[test]
fn an_oversubscribing_rankfile_says_how_to_run_it() {
    let dir = Scratch::new("map", "rankfile-over");
    let m = dir.join("m.csv");
    std::fs::write(&m, "0,9,1,0\n9,0,0,1\n1,0,0,9\n0,1,9,0\n").unwrap();
    let out = huddle(&[
        "map",
        "--matrix",
        m.to_str().unwrap(),
        "--synthetic",
        "pack:1 core:2 pu:1",
        "--oversubscribe",
        "--format",
        "rankfile",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let first = text.lines().next().unwrap();
    assert!(
        first.starts_with("# 4 ranks on 2 PUs") && first.contains("mpi_yield_when_idle 1"),
        "{text}"
    );
    assert_eq!(text.lines().filter(|l| l.starts_with("rank ")).count(), 4);
    assert!(String::from_utf8_lossy(&out.stderr).contains("mpi_yield_when_idle"));
}

#[test]
fn cluster_json_has_nodes_and_pus_restriction_holds() {
    let m = shared("data/matrices/nas-cg-16.csv");
    let v = json(&huddle(&[
        "map",
        "--matrix",
        &m,
        "--synthetic",
        "pack:2 core:4 pu:2",
        "--nodes",
        "2",
        "--pus",
        "package:0",
        "--algorithm",
        "drb",
    ]));
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 16);
    assert_eq!(nodes.iter().filter(|n| n.as_u64() == Some(0)).count(), 8);
    for pu in v["mapping"].as_array().unwrap() {
        assert!(pu.as_u64().unwrap() < 8, "package 0 only: {pu}");
    }
}

#[test]
fn advise_prefers_blocked_for_cg() {
    let m = shared("data/matrices/nas-cg-32.csv");
    let v = json(&huddle(&[
        "map",
        "--matrix",
        &m,
        "--synthetic",
        "pack:2 core:2 pu:1",
        "--nodes",
        "8",
        "--advise",
        "--format",
        "json",
    ]));
    assert_eq!(v["launcher_choice"], "blocked");
    let p = v["placements"].as_array().unwrap();
    assert_eq!(p.len(), 3);
    assert!(p[0]["cost"].as_f64().unwrap() < p[1]["cost"].as_f64().unwrap());
    let text = huddle(&[
        "map",
        "--matrix",
        &m,
        "--synthetic",
        "pack:2 core:2 pu:1",
        "--nodes",
        "8",
        "--advise",
    ]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("advice: blocked"));
}

/// The contention term end to end: per-node out/in and link times in the JSON, the phase time
/// is the slowest node's, the bandwidth is the one given, and the text table shows it.
#[test]
fn advise_reports_link_contention() {
    let m = shared("data/matrices/nas-mg-16.csv");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "map",
            "--matrix",
            m.as_str(),
            "--synthetic",
            "pack:2 core:2 pu:1",
            "--nodes",
            "4",
            "--advise",
        ];
        args.extend_from_slice(extra);
        huddle(&args)
    };
    let v = json(&run(&["--format", "json", "--link-bandwidth", "1e3"]));
    assert_eq!(v["link_bandwidth"].as_f64(), Some(1e3));
    let f = |x: &serde_json::Value| -> Vec<f64> {
        x.as_array()
            .unwrap()
            .iter()
            .map(|y| y.as_f64().unwrap())
            .collect()
    };
    let mut times = vec![];
    for p in v["placements"].as_array().unwrap() {
        let (out, inb, link) = (
            f(&p["node_out"]),
            f(&p["node_in"]),
            f(&p["node_link_seconds"]),
        );
        assert_eq!((out.len(), inb.len(), link.len()), (4, 4, 4));
        for k in 0..4 {
            assert!((link[k] - out[k].max(inb[k]) / 1e3).abs() < 1e-12, "{p}");
        }
        let slowest = link.iter().copied().fold(0.0, f64::max);
        assert_eq!(p["link_seconds"].as_f64(), Some(slowest));
        assert_eq!(link[p["busiest_node"].as_u64().unwrap() as usize], slowest);
        let network = p["network"].as_f64().unwrap();
        assert!(
            (out.iter().sum::<f64>() - 2.0 * network).abs() < 1e-6,
            "{p}"
        );
        times.push(slowest);
    }
    // The default bandwidth (1.25e9 B/s) scales every time alike.
    let d = json(&run(&["--format", "json"]));
    assert_eq!(d["link_bandwidth"].as_f64(), Some(1.25e9));
    for (p, t) in d["placements"].as_array().unwrap().iter().zip(&times) {
        let s = p["link_seconds"].as_f64().unwrap();
        assert!((s * 1.25e9 - t * 1e3).abs() <= 1e-9 * t * 1e3, "{p}");
    }
    assert_eq!(d["launcher_choice"], v["launcher_choice"]);
    let text = String::from_utf8(run(&[]).stdout).unwrap();
    assert!(
        text.starts_with("placement") && text.contains("link time"),
        "{text}"
    );
    assert!(text.contains("ranked by link time"), "{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with("cyclic")).count(), 1);
}

#[test]
fn bad_link_bandwidth_is_one_line_exit_2() {
    let m = shared("data/matrices/nas-mg-16.csv");
    for extra in [
        vec!["--advise", "--link-bandwidth=0"],
        vec!["--advise", "--link-bandwidth=-1"],
        vec!["--advise", "--link-bandwidth=nan"],
        vec!["--link-bandwidth=1e9"],
    ] {
        let mut args = vec![
            "map",
            "--matrix",
            m.as_str(),
            "--synthetic",
            "pack:2 core:2 pu:1",
            "--nodes",
            "4",
        ];
        args.extend(extra.iter().copied());
        let o = huddle(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{extra:?}: {err}");
        assert!(err.contains("--link-bandwidth"), "{extra:?}: {err}");
    }
}

#[test]
fn score_gives_the_cost_of_a_given_placement() {
    // The mapping huddle computes, scored back, costs what it said; a worse placement costs more.
    let mapped = json(&cg32_on_xeon(&[]));
    let cpus: Vec<String> = mapped["mapping"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.to_string())
        .collect();
    let scored = json(&cg32_on_xeon(&["--score", &cpus.join(",")]));
    let (a, b) = (
        mapped["cost"].as_f64().unwrap(),
        scored["cost"].as_f64().unwrap(),
    );
    assert!((a - b).abs() <= 1e-9 * a.max(1.0), "{a} vs {b}");
    assert_eq!(scored["mapping"], mapped["mapping"]);
    // Scatter every rank away from its partners: ranks in OS order 0, 16, 1, 17, ...
    let round_robin = json(&cg32_on_xeon(&["--algorithm", "round-robin"]));
    let rr: Vec<String> = round_robin["mapping"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.to_string())
        .collect();
    let worse = json(&cg32_on_xeon(&["--score", &rr.join(",")]));
    assert_eq!(worse["cost"], round_robin["cost"]);
    assert!(worse["cost"].as_f64().unwrap() > a);
    // Bad lists: one line, exit 2.
    for (list, want) in [
        ("0,1", "2 PUs for a matrix of 32 tasks"),
        ("x", "'x' is not a PU OS index"),
        ("999", "no PU with OS index 999"),
    ] {
        let out = cg32_on_xeon(&["--score", list]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(want) && err.trim().lines().count() == 1,
            "{err}"
        );
    }
}

fn bad(content: &str, extra: &[&str]) -> (i32, String) {
    let dir = Scratch::new(
        "map-test",
        &format!("{}", content.len() + extra.len() * 1000),
    );
    let f = dir.join(format!("m{}.csv", content.len() + extra.len() * 1000));
    std::fs::write(&f, content).unwrap();
    let p = f.display().to_string();
    let mut args = vec![
        "map",
        "--matrix",
        p.as_str(),
        "--synthetic",
        "pack:1 core:2 pu:2",
    ];
    args.extend_from_slice(extra);
    let o = huddle(&args);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("huddle: "), "{err}");
    (o.status.code().unwrap_or(-1), err)
}

#[test]
fn bad_matrices_name_file_line_and_column() {
    for (content, place, what) in [
        ("0,1,2\n1,0\n2,1,0\n", ":2:3:", "square"),
        ("0,1\n-1,0\n", ":2:1:", "negative"),
        ("0,NaN\n1,0\n", ":1:2:", "finite"),
        ("0,1\n1,x\n", ":2:2:", "not a number"),
        ("a,b\n0,1\n1,0\n", ":1:1:", "header"),
    ] {
        let (code, err) = bad(content, &[]);
        assert_eq!(code, 2, "{content:?}: {err}");
        assert!(
            err.contains(place) && err.contains(what),
            "{content:?}: {err}"
        );
        assert!(err.contains(".csv"), "names the file: {err}");
    }
}

#[test]
fn too_many_tasks_is_bad_input_unless_oversubscribed() {
    let five = "0,1,1,1,1\n1,0,1,1,1\n1,1,0,1,1\n1,1,1,0,1\n1,1,1,1,0\n";
    let (code, err) = bad(five, &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("5 tasks") && err.contains("--oversubscribe"),
        "{err}"
    );
    let dir = Scratch::new("map-over", "five");
    let f = dir.join("five.csv");
    std::fs::write(&f, five).unwrap();
    let v = json(&huddle(&[
        "map",
        "--matrix",
        f.to_str().unwrap(),
        "--synthetic",
        "pack:1 core:2 pu:2",
        "--oversubscribe",
    ]));
    assert_eq!(v["mapping"].as_array().unwrap().len(), 5);
}

#[test]
fn unknown_algorithm_and_bad_location_exit_2() {
    let m = shared("data/matrices/nas-cg-16.csv");
    for extra in [
        vec!["--algorithm", "metis"],
        vec!["--pus", "core:99"],
        vec!["--costs", "l3=x"],
    ] {
        let mut args = vec![
            "map",
            "--matrix",
            m.as_str(),
            "--synthetic",
            "pack:2 core:4 pu:2",
        ];
        args.extend(extra.iter().copied());
        let o = huddle(&args);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{extra:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
