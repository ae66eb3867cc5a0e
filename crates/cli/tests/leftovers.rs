//! huddle leaves nothing in the temporary directory after a run, and the next run removes
//! what a killed one left (its agents' ring files), never what a live one still uses.

mod common;
use common::{Scratch, HUDDLE};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// huddle with its temporary directory (where the agents' rings go) set to `tmp`.
fn huddle_in(tmp: &Path) -> Command {
    let mut c = Command::new(HUDDLE);
    c.env("TMPDIR", tmp)
        .env_remove("XDG_RUNTIME_DIR")
        .stdin(Stdio::null());
    c
}

/// Everything under `dir`, recursively.
fn contents(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(contents(&p));
        }
        out.push(p);
    }
    out.sort();
    out
}

/// Field 22 of /proc/self/stat: when this process started.
fn own_start_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 1..];
    after.split_whitespace().nth(19).unwrap().parse().unwrap()
}

#[test]
fn a_run_leaves_nothing_in_the_temporary_directory() {
    let d = Scratch::new("leftovers-test", "clean");
    let tmp = d.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let report = d.join("r");
    let out = huddle_in(&tmp)
        .args(["run", "--quiet", "--report"])
        .arg(&report)
        .args(["--", HUDDLE, "workload", "pairs", "--threads", "2"])
        .args(["--seconds", "0.5", "--out-dir"])
        .arg(d.join("wl"))
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The agent ran (so its ring was in tmp) ...
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("run.json")).unwrap()).unwrap();
    assert!(info["rearmed_pages"].as_u64().unwrap() > 0, "{info}");
    // ... and is gone with everything else.
    assert_eq!(contents(&tmp), Vec::<PathBuf>::new());
}

#[test]
fn a_killed_runs_rings_are_removed_by_the_next_run_and_live_ones_kept() {
    let d = Scratch::new("leftovers-test", "killed");
    let tmp = d.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    // The directory of a live huddle: this test process, named with its start time.
    let me = std::process::id();
    let live = tmp.join(format!("huddle-detect-{me}-s{}-0", own_start_ticks()));
    std::fs::create_dir(&live).unwrap();
    std::fs::write(live.join(format!("agent-{me}.ring")), "").unwrap();
    // The same pid with another start time: the pid's earlier owner, gone.
    let reused = tmp.join(format!("huddle-detect-{me}-s{}-0", own_start_ticks() + 1));
    std::fs::create_dir(&reused).unwrap();

    let mut killed = huddle_in(&tmp)
        .args(["run", "--quiet", "--", "sh", "-c", "sleep 0.8"])
        .spawn()
        .unwrap();
    let rings = || -> Vec<PathBuf> {
        contents(&tmp)
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "ring") && !p.starts_with(&live))
            .collect()
    };
    let end = Instant::now() + Duration::from_secs(10);
    while rings().is_empty() {
        assert!(Instant::now() < end, "no agent ring appeared in {tmp:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    killed.kill().unwrap();
    killed.wait().unwrap();
    let left = rings();
    assert!(
        left.iter()
            .all(|r| r.to_string_lossy().contains(&format!("-{}-", killed.id()))),
        "{left:?}"
    );
    // Killed, huddle could not clean up.
    std::thread::sleep(Duration::from_millis(1000));
    assert!(!rings().is_empty(), "{:?}", contents(&tmp));

    let out = huddle_in(&tmp)
        .args(["run", "--quiet", "--", "true"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(rings(), Vec::<PathBuf>::new(), "the killed run's rings");
    assert!(!reused.exists(), "a reused pid's directory");
    assert!(
        live.join(format!("agent-{me}.ring")).is_file(),
        "a live run's ring"
    );
    let mut expected = vec![live.join(format!("agent-{me}.ring")), live.clone()];
    expected.sort();
    assert_eq!(contents(&tmp), expected);
}
