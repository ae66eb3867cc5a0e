//! `huddle workload` end to end: files, JSON summary, determinism, bad input.

mod common;
use common::{huddle, json, Scratch};
use std::path::Path;

fn tmp(name: &str) -> Scratch {
    Scratch::unmade("wl", name)
}

fn strongest_partner(m: &matrix::CommMatrix, i: usize) -> usize {
    (0..m.n())
        .filter(|&j| j != i)
        .max_by(|&a, &b| m.get(i, a).total_cmp(&m.get(i, b)))
        .unwrap()
}

#[test]
fn distant_pairs_threads_and_processes() {
    let mut checksums = Vec::new();
    for mode in ["--threads", "--processes"] {
        let dir = tmp(mode);
        let d = dir.to_str().unwrap();
        let v = json(&huddle(&[
            "workload",
            "distant-pairs",
            mode,
            "8",
            "--seconds",
            "0.2",
            "--bytes",
            "256K",
            "--out-dir",
            d,
            "--json",
        ]));
        assert_eq!(v["schema"], "huddle.workload/1");
        assert_eq!(v["pattern"], "distant-pairs");
        assert_eq!(v["mode"], &mode[2..]);
        assert_eq!(v["tasks"], 8);
        assert_eq!(v["tids"].as_array().unwrap().len(), 8);
        assert!(v["iterations"].as_u64().unwrap() >= 4);
        assert!(v["iterations_per_second_per_task"].as_f64().unwrap() > 0.0);
        assert_eq!(v["read_errors"], 0);
        assert!(v["phase_switch_s"].is_null());
        let m = matrix::CommMatrix::read(&dir.join("ground-truth.csv")).unwrap();
        assert_eq!(m.n(), 8);
        for i in 0..8 {
            assert_eq!(strongest_partner(&m, i), (i + 4) % 8);
            assert_eq!(m.get(i, (i + 4) % 8), m.get((i + 4) % 8, i));
        }
        // The matrix is what the rounds moved: 2 directions x 64 KiB slots per round.
        let rounds = v["iterations"].as_f64().unwrap();
        assert_eq!(m.get(0, 4), rounds * 2.0 * 65536.0);
        // The summary file is the same summary.
        let file: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("workload.json")).unwrap())
                .unwrap();
        assert_eq!(file["checksum"], v["checksum"]);
        assert_eq!(file["tids"], v["tids"]);
        checksums.push(v["checksum"].as_str().unwrap().to_string());
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert_eq!(checksums[0], checksums[1]);
}

#[test]
fn phase_change_writes_each_phase() {
    let dir = tmp("phase");
    let d = dir.to_str().unwrap();
    let out = huddle(&[
        "workload",
        "phase-change",
        "--threads",
        "4",
        "--seconds",
        "0.3",
        "--bytes",
        "64KiB",
        "--out-dir",
        d,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("phase switch pairs -> distant-pairs at"),
        "{text}"
    );
    assert!(text.contains("checksum "), "{text}");
    let p0 = matrix::CommMatrix::read(&dir.join("ground-truth-phase0.csv")).unwrap();
    let p1 = matrix::CommMatrix::read(&dir.join("ground-truth-phase1.csv")).unwrap();
    let all = matrix::CommMatrix::read(&dir.join("ground-truth.csv")).unwrap();
    assert_eq!(strongest_partner(&p0, 0), 1);
    assert_eq!(strongest_partner(&p1, 0), 2);
    assert_eq!(all.get(0, 1), p0.get(0, 1));
    assert_eq!(all.get(0, 2), p1.get(0, 2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// --progress-ms samples the rounds done over the run, for both modes.
#[test]
fn progress_samples_rounds_over_the_run() {
    for mode in ["--threads", "--processes"] {
        let dir = tmp(&format!("progress{mode}"));
        let d = dir.to_str().unwrap();
        let w = json(&huddle(&[
            "workload",
            "ring",
            mode,
            "2",
            "--seconds",
            "0.5",
            "--bytes",
            "64KiB",
            "--progress-ms",
            "20",
            "--out-dir",
            d,
            "--json",
        ]));
        let samples = w["progress"].as_array().expect("progress");
        assert!(samples.len() >= 10, "{} samples in 0.5 s", samples.len());
        let pair = |s: &serde_json::Value| (s[0].as_u64().unwrap(), s[1].as_u64().unwrap());
        for k in 1..samples.len() {
            let ((t0, r0), (t1, r1)) = (pair(&samples[k - 1]), pair(&samples[k]));
            assert!(t1 >= t0 + 20_000_000 && r1 >= r0, "{mode}: {:?}", samples);
        }
        let (last_t, last_rounds) = pair(samples.last().unwrap());
        assert_eq!(
            last_rounds,
            w["iterations"].as_u64().unwrap(),
            "{mode}: the last sample is the end"
        );
        assert!(last_t >= w["start_monotonic_ns"].as_u64().unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }
    // Without the option there is no progress field.
    let dir = tmp("no-progress");
    let w = json(&huddle(&[
        "workload",
        "ring",
        "--threads",
        "2",
        "--seconds",
        "0.1",
        "--bytes",
        "64KiB",
        "--out-dir",
        dir.to_str().unwrap(),
        "--json",
    ]));
    assert!(w.get("progress").is_none());
    let _ = std::fs::remove_dir_all(&dir);
}

fn fails(args: &[&str], code: i32, needle: &str) {
    let out = huddle(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
    if needle.starts_with("huddle:") {
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let d = tmp("bad");
    let d = d.to_str().unwrap();
    let w = |extra: &[&'static str]| -> Vec<&str> {
        let mut a = vec!["workload"];
        a.extend_from_slice(extra);
        a.extend_from_slice(&["--out-dir", d, "--seconds", "0"]);
        a
    };
    fails(
        &w(&["stars", "--threads", "4"]),
        2,
        "huddle: unknown pattern 'stars' (valid: pairs, ring, distant-pairs",
    );
    fails(
        &[
            "workload",
            "pairs",
            "--threads",
            "2",
            "--seconds",
            "100000",
            "--progress-ms",
            "1",
            "--out-dir",
            d,
        ],
        2,
        "huddle: --progress-ms 1 over 100000 s would keep more than 10 million samples",
    );
    fails(
        &w(&["pairs", "--threads", "1"]),
        2,
        "huddle: pairs with 1 tasks: needs at least 2",
    );
    fails(
        &w(&["clusters", "--processes", "12"]),
        2,
        "needs a multiple of 8 tasks",
    );
    fails(
        &w(&["pairs", "--threads", "4", "--bytes", "1"]),
        2,
        "huddle: region size 1 bytes: too small",
    );
    fails(
        &w(&["pairs", "--threads", "4", "--bytes", "4T"]),
        2,
        "unknown unit 't'",
    );
    fails(
        &w(&["pairs", "--threads", "4", "--bytes", "60G"]),
        2,
        "more than",
    );
    fails(
        &w(&["master-worker", "--threads", "64", "--bytes", "32GiB"]),
        2,
        "more than half",
    );
    fails(
        &w(&["pairs", "--threads", "2", "--pin", "0"]),
        2,
        "1 locations for 2 tasks",
    );
    fails(
        &w(&["pairs", "--threads", "2", "--pin", "0,pu:99"]),
        2,
        "huddle: --pin, task 1:",
    );
    fails(
        &w(&["pairs", "--threads", "2", "--processes", "2"]),
        2,
        "cannot be used with",
    );
    fails(&w(&["pairs"]), 2, "--threads");
    fails(
        &["workload", "pairs", "--threads", "2", "--seconds", "-1"],
        2,
        "huddle: time budget -1 s: must be a number of seconds",
    );
    assert!(!Path::new(d).join("ground-truth.csv").exists());
}
