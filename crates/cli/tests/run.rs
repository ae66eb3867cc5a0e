//! `huddle run` / `huddle attach` end to end: exit statuses, signals, huddle's own death,
//! permissions, and that a managed program computes the same result.

mod common;
use common::Scratch;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn huddle() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_huddle"));
    c.stdin(Stdio::null());
    c
}

fn run(args: &[&str]) -> Output {
    huddle().args(args).output().expect("huddle runs")
}

fn scratch(name: &str) -> Scratch {
    Scratch::new("run-test", name)
}

/// Waits for a child with a deadline; kills it and fails the test if it hangs.
fn wait_for(mut child: std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let end = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("huddle did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn alive(pid: i32) -> bool {
    // Zombies count as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

#[test]
fn the_programs_exit_status_is_returned() {
    // Death by signal: 128 + signal, as a shell reports it.
    for (cmd, want) in [
        (&["sh", "-c", "exit 3"][..], 3),
        (&["true"][..], 0),
        (&["sh", "-c", "kill -SEGV $$"][..], 139),
    ] {
        let mut args = vec!["run", "--quiet", "--"];
        args.extend_from_slice(cmd);
        let out = run(&args);
        assert_eq!(
            out.status.code(),
            Some(want),
            "{cmd:?}; huddle's stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_missing_command_is_127_with_a_message() {
    let out = run(&["run", "--quiet", "--", "/nonexistent/program"]);
    assert_eq!(out.status.code(), Some(127));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("command not found"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn a_report_that_cannot_be_written_keeps_the_programs_status() {
    let out = run(&[
        "run",
        "--quiet",
        "--report",
        "/proc/huddle-no-such-dir",
        "--",
        "sh",
        "-c",
        "exit 5",
    ]);
    assert_eq!(out.status.code(), Some(5));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("report not written"), "{err}");
    // Also with the simmer policy, whose set-up runs first: a missing program is still 127.
    let out = run(&[
        "run",
        "--quiet",
        "--policy",
        "simmer",
        "--",
        "/nonexistent/program",
    ]);
    assert_eq!(out.status.code(), Some(127));
}

#[test]
fn bad_options_are_exit_2() {
    for args in [
        &["run", "--policy", "fastest", "--", "true"][..],
        &["run", "--threshold", "150", "--", "true"],
        &["run", "--pus", "core:99", "--", "true"],
        &["run", "--block-size", "100", "--", "true"],
        &["attach", "999999999"],
    ] {
        let out = run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn sigterm_to_huddle_reaches_the_program() {
    let child = huddle()
        .args(["run", "--quiet", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let st = wait_for(child, Duration::from_secs(20));
    assert_eq!(
        st.code(),
        Some(128 + libc::SIGTERM),
        "sleep died of the forwarded SIGTERM"
    );
}

/// SIGUSR1 pauses the extra faults (events stop once the pages out are back), SIGUSR2 resumes
/// them; neither ends huddle or reaches the program. The floors given are used.
#[test]
fn sigusr1_pauses_extra_faults_and_sigusr2_resumes_them() {
    let d = scratch("pause");
    let report = d.join("report");
    let child = huddle()
        .args([
            "run",
            "--quiet",
            "--rearm-floor",
            "1000",
            "--steady-floor",
            "1000",
        ])
        .arg("--report")
        .arg(&report)
        .args([
            "--",
            env!("CARGO_BIN_EXE_huddle"),
            "workload",
            "ring",
            "--threads",
            "2",
        ])
        .args(["--seconds", "5", "--out-dir"])
        .arg(d.join("wl"))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    for (wait_ms, sig) in [(1000, libc::SIGUSR1), (2000, libc::SIGUSR2)] {
        std::thread::sleep(Duration::from_millis(wait_ms));
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid, sig) };
    }
    let st = wait_for(child, Duration::from_secs(60));
    assert_eq!(st.code(), Some(0), "huddle and the workload went on");
    let text = std::fs::read_to_string(report.join("samples.json")).expect("samples.json");
    let samples: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let events_in = |from: f64, to: f64| -> u64 {
        samples
            .as_array()
            .expect("samples")
            .iter()
            .filter(|s| (from..to).contains(&s["t"].as_f64().unwrap()))
            .map(|s| s["events"].as_u64().unwrap())
            .sum()
    };
    // Paused from about 1 s to 3 s after the start; pages out come back within 250 ms.
    let (before, paused, resumed) = (
        events_in(0.0, 1.0),
        events_in(1.8, 2.8),
        events_in(3.5, 9.0),
    );
    assert!(before > 50, "extra faults before the pause: {before}");
    assert!(paused <= 20, "{paused} events while paused");
    // At 1000 pages/s for 1.5 s and more (the default floors would give at most 300/s).
    assert!(resumed > 600, "extra faults after SIGUSR2: {resumed}");
}

#[test]
fn the_program_survives_when_huddle_is_killed() {
    let dir = scratch("survive");
    let flag = dir.join("done");
    let script = format!("sleep 1.5; echo finished > {}", flag.display());
    let child = huddle()
        .args(["run", "--quiet", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    // SAFETY: killing our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    wait_for(child, Duration::from_secs(5));
    // The shell creates the file before echo writes into it: wait for the contents.
    let end = Instant::now() + Duration::from_secs(20);
    let read = || std::fs::read_to_string(&flag).unwrap_or_default();
    while read().trim() != "finished" && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(read().trim(), "finished");
}

#[test]
fn attach_manages_a_running_process_and_leaves_it_running() {
    let mut target = Command::new("sleep").arg("20").spawn().unwrap();
    let pid = target.id().to_string();
    let out = run(&["attach", "--quiet", "--seconds", "0.5", &pid]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        alive(target.id() as i32),
        "attach must not stop the program"
    );
    target.kill().unwrap();
    target.wait().unwrap();
}

#[test]
fn attach_refuses_processes_the_user_may_not_ptrace() {
    if unsafe { libc::geteuid() } != 0 || Command::new("setpriv").arg("--help").output().is_err() {
        eprintln!("needs root and setpriv to act as another user");
        return;
    }
    // This test process belongs to root; huddle runs as nobody.
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            env!("CARGO_BIN_EXE_huddle"),
        ])
        .args([
            "attach",
            "--quiet",
            "--seconds",
            "0.2",
            &std::process::id().to_string(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not allowed"), "{err}");
}

#[test]
fn report_files_are_private_and_the_result_is_unchanged() {
    let dir = scratch("report");
    let report = dir.join("r");
    let plain = dir.join("plain");
    let managed = dir.join("managed");
    let workload = |out: &PathBuf| {
        vec![
            env!("CARGO_BIN_EXE_huddle").to_string(),
            "workload".into(),
            "pairs".into(),
            "--threads".into(),
            "4".into(),
            "--seconds".into(),
            "0.5".into(),
            "--json".into(),
            "--out-dir".into(),
            out.display().to_string(),
        ]
    };
    let base = Command::new(&workload(&plain)[0])
        .args(&workload(&plain)[1..])
        .output()
        .unwrap();
    assert!(base.status.success());
    let mut args = vec![
        "run".to_string(),
        "--quiet".into(),
        "--report".into(),
        report.display().to_string(),
        "--".into(),
    ];
    args.extend(workload(&managed));
    let out = huddle().args(&args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sum = |o: &Output| -> String {
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("workload JSON");
        v["checksum"].to_string()
    };
    assert_eq!(
        sum(&base),
        sum(&out),
        "managing the program must not change its result"
    );
    let mode = |p: PathBuf| std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(report.clone()), 0o700);
    for f in [
        "run.json",
        "tasks.json",
        "matrix.csv",
        "placements.csv",
        "decisions.json",
        "index.html",
    ] {
        assert_eq!(mode(report.join(f)), 0o600, "{f}");
    }
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("run.json")).unwrap()).unwrap();
    // The extra faults ran (the 300 pages/s start floor covers this whole half second).
    assert!(
        info["rearmed_pages"].as_u64().expect("rearmed_pages") > 0,
        "run.json: {info}"
    );
    let page = std::fs::read_to_string(report.join("index.html")).unwrap();
    assert!(page.contains("<svg"));
    assert!(page.contains("pages re-armed for extra faults"));
    // `huddle report` renders it again from the raw data.
    std::fs::remove_file(report.join("index.html")).unwrap();
    let again = run(&["report", &report.display().to_string()]);
    assert!(again.status.success());
    assert!(report.join("index.html").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
