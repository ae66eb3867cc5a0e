//! Every option that names where output goes is checked (and a directory made) before any
//! work: a bad path is one line, exit 2, the program never starts, and no directory is
//! created beyond the one the user named.

mod common;
use common::{Scratch, HUDDLE};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn huddle(args: &[&str]) -> (Output, Duration) {
    let t = Instant::now();
    let out = Command::new(HUDDLE)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("huddle runs");
    (out, t.elapsed())
}

/// Exit 2, one line naming `names`, quickly, and the program (which would create `flag`)
/// never ran.
fn refused(args: &[&str], names: &str, flag: &Path) {
    let (out, took) = huddle(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    assert!(err.contains(names), "{args:?}: {err}");
    assert!(!flag.exists(), "{args:?}: the program ran");
    assert!(took < Duration::from_secs(10), "{args:?}: took {took:?}");
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn run_and_detect_refuse_bad_output_paths_before_the_program_starts() {
    let d = Scratch::new("outputs-test", "run");
    let flag = d.join("the-program-ran");
    let touch = format!("touch {}", s(&flag));
    let file = d.join("a-file");
    std::fs::write(&file, "").unwrap();
    let missing = d.join("no/such");
    for (option, path, names) in [
        (
            "--report",
            "/proc/huddle-no-such-dir".to_string(),
            "--report",
        ),
        ("--report", s(&file), "not a directory"),
        ("--report", s(&missing.join("r")), "does not exist"),
    ] {
        refused(
            &["run", "--quiet", option, &path, "--", "sh", "-c", &touch],
            names,
            &flag,
        );
    }
    for (option, path, names) in [
        ("--out", "/tmp".to_string(), "is a directory"),
        ("--out", s(&d), "is a directory"),
        ("--out", s(&missing.join("m.csv")), "does not exist"),
        ("--out", "/proc/huddle-m.csv".to_string(), "cannot write"),
        ("--snapshots", s(&file), "not a directory"),
        ("--snapshots", s(&missing.join("s")), "does not exist"),
        ("--snapshots", "/proc/huddle-s".to_string(), "cannot create"),
    ] {
        let out = s(&d.join("m.csv"));
        let mut args = vec!["detect"];
        if option != "--out" {
            args.extend(["--out", &out]);
        }
        args.extend([option, &path, "--", "sh", "-c", &touch]);
        refused(&args, names, &flag);
    }
    // A derived file that is a directory: OUT.json.
    std::fs::create_dir(d.join("m.json")).unwrap();
    refused(
        &[
            "detect",
            "--out",
            &s(&d.join("m.csv")),
            "--",
            "sh",
            "-c",
            &touch,
        ],
        "m.json: is a directory",
        &flag,
    );
    assert!(!d.join("no").exists(), "no parent directory was created");
    assert!(!d.join("m.csv").exists(), "no output file was left");
}

#[test]
fn tune_msg_and_workload_refuse_bad_output_paths_before_measuring() {
    let d = Scratch::new("outputs-test", "tune");
    let never = d.join("never");
    let missing = d.join("no/such");
    refused(&["tune-msg", "--output", "/tmp"], "is a directory", &never);
    refused(
        &["tune-msg", "--output", &s(&missing.join("x.json"))],
        "does not exist",
        &never,
    );
    refused(
        &["tune-msg", "--output", "/proc/huddle-x.json"],
        "cannot write",
        &never,
    );
    let out = Command::new(HUDDLE)
        .args(["tune-msg", "--quick"])
        .env("HUDDLE_MSG_RULES", missing.join("r.json"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("HUDDLE_MSG_RULES"), "{err}");
    refused(
        &[
            "workload",
            "pairs",
            "--threads",
            "2",
            "--seconds",
            "0",
            "--out-dir",
            &s(&missing.join("w")),
        ],
        "does not exist",
        &never,
    );
    assert!(!d.join("no").exists(), "no parent directory was created");
}

/// The directory the user named is made, before the program starts (which can then write
/// into it), with the report's private mode.
#[test]
fn a_named_report_directory_is_made_before_the_program_starts() {
    let d = Scratch::new("outputs-test", "made");
    let report = d.join("r");
    let script = format!("test -d {} && touch {}/seen", s(&report), s(&d));
    let (out, _) = huddle(&[
        "run",
        "--quiet",
        "--report",
        &s(&report),
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        d.join("seen").exists(),
        "the directory was there at the start"
    );
    assert!(report.join("index.html").is_file());
    // A program that cannot start leaves no empty directory behind.
    let (out, _) = huddle(&[
        "run",
        "--quiet",
        "--report",
        &s(&d.join("r2")),
        "--",
        "/nonexistent/program",
    ]);
    assert_eq!(out.status.code(), Some(127));
    assert!(!d.join("r2").exists());
}
