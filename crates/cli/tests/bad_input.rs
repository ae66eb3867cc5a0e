//! Bad input, as a tester would try it: each probe must end quickly with exit 2 and one line
//! that names the problem, before anything runs (docs/bad-input.md lists them).

mod common;
use common::HUDDLE;
use std::process::Command;
use std::time::{Duration, Instant};

/// (arguments, what the one line must say)
const PROBES: &[(&[&str], &str)] = &[
    (
        &["topo", "--xml", "/dev/zero"],
        "character device, not a regular file",
    ),
    (
        &["map", "--matrix", "/dev/zero"],
        "character device, not a regular file",
    ),
    (&["map", "--matrix", "/tmp"], "is a directory"),
    (
        &["detect", "--table-slots", "1099511627776", "--", "true"],
        "--table-slots 1099511627776: must be a power of two",
    ),
    (
        &["detect", "--table-slots", "3", "--", "true"],
        "--table-slots 3: must be a power of two",
    ),
    (
        &["detect", "--min-share", "NaN", "--", "true"],
        "--min-share NaN",
    ),
    (
        &["detect", "--min-share", "-1", "--", "true"],
        "--min-share -1",
    ),
    (
        &["detect", "--rearm-floor", "99999999", "--", "true"],
        "at most 1000000 pages per second",
    ),
    (
        &["run", "--simmer-confidence", "7", "--", "true"],
        "--simmer-confidence 7",
    ),
    (
        &["run", "--threshold", "-5", "--", "true"],
        "--threshold -5",
    ),
    (
        &["run", "--min-traffic", "NaN", "--", "true"],
        "--min-traffic NaN",
    ),
    (
        &["run", "--page-budget", "99999999999999", "--", "true"],
        "--page-budget 99999999999999",
    ),
    (&["attach", "--seconds", "-1", "1"], "--seconds -1"),
    (&["attach", "--seconds", "NaN", "1"], "--seconds NaN"),
    (
        &["topo", "--synthetic", "core:2 pu:1", "--costs", "l3=1e308"],
        "cost of l3 must be between 0 and 1e6",
    ),
    (
        &["detect", "--bogus", "--", "true"],
        "unexpected argument '--bogus' found (see --help)",
    ),
    (
        &["map"],
        "required arguments were not provided: --matrix <FILE> (see --help)",
    ),
];

fn huddle(args: &[&str]) -> (i32, String, Duration) {
    let t = Instant::now();
    let out = Command::new(HUDDLE)
        .args(args)
        .output()
        .expect("huddle runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        t.elapsed(),
    )
}

#[test]
fn every_probe_is_one_line_exit_2_before_anything_runs() {
    for (args, want) in PROBES {
        let (code, err, took) = huddle(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err:?} lacks {want:?}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err:?}");
        assert!(took < Duration::from_secs(10), "{args:?} took {took:?}");
    }
}

#[test]
fn a_fifo_and_a_huge_matrix_are_refused_without_reading_them() {
    let dir = common::Scratch::new("bad-input", "files");
    let fifo = dir.join("m.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let (code, err, _) = huddle(&["map", "--matrix", fifo.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("is a FIFO, not a regular file"), "{err}");
    let big = dir.join("big.csv");
    std::fs::write(&big, "0,1\n1,0\n").unwrap();
    let out = Command::new(HUDDLE)
        .args(["map", "--matrix", big.to_str().unwrap()])
        .env("HUDDLE_MAX_INPUT_BYTES", "4")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("over the input size limit of 4 bytes"),
        "{err}"
    );
    // Values whose costs would overflow: refused, not a cost of 0 or infinity.
    let huge = dir.join("huge.csv");
    std::fs::write(&huge, "0,1.7e308\n1.7e308,0\n").unwrap();
    let (code, err, _) = huddle(&["map", "--matrix", huge.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("costs would overflow"), "{err}");
    // An asymmetric matrix is mapped, with a note saying how it was read.
    let asym = dir.join("asym.csv");
    std::fs::write(&asym, "0,4\n2,0\n").unwrap();
    let (code, err, _) = huddle(&[
        "map",
        "--matrix",
        asym.to_str().unwrap(),
        "--synthetic",
        "core:2 pu:1",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("not symmetric"), "{err}");
}
