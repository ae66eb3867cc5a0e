//! `huddle run` / `huddle attach` end to end: exit statuses, signals, huddle's own death,
//! permissions, and that a managed program computes the same result.

mod common;
use common::{json_file, wait_for, Scratch, HUDDLE};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn huddle() -> Command {
    let mut c = Command::new(HUDDLE);
    c.stdin(Stdio::null());
    c
}

fn run(args: &[&str]) -> Output {
    huddle().args(args).output().expect("huddle runs")
}

/// `huddle run --quiet [RUN_ARGS] --report REPORT -- huddle workload PATTERN --threads N
/// --seconds S --out-dir OUT [WL_ARGS]`, stdout discarded.
fn managed_workload(run_args: &[&str], report: &Path, workload: &[&str], out: &Path) -> Command {
    let mut c = huddle();
    c.args(["run", "--quiet"])
        .args(run_args)
        .arg("--report")
        .arg(report)
        .args(["--", HUDDLE, "workload"])
        .args(workload)
        .arg("--out-dir")
        .arg(out)
        .stdout(Stdio::null());
    c
}

fn scratch(name: &str) -> Scratch {
    Scratch::new("run-test", name)
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

/// As a shell and `huddle detect` say it: 126 for a program that is there but cannot run.
#[test]
fn a_program_that_cannot_be_executed_is_126_with_a_message() {
    // A file that is there but has no execute permission (mode 0644).
    let dir = scratch("not-executable");
    let file = dir.join("data.txt");
    std::fs::write(&file, "not a program\n").unwrap();
    let path = file.display().to_string();
    let out = run(&["run", "--quiet", "--", &path]);
    assert_eq!(out.status.code(), Some(126));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{path}: cannot execute")), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

/// The report directory is checked before the program starts (tests/outputs.rs); one that
/// goes away during the run costs the report, not the program's status.
#[test]
fn a_report_that_cannot_be_written_keeps_the_programs_status() {
    let dir = scratch("late-report");
    let report = dir.join("r");
    let script = format!("rmdir {r} && touch {r} && exit 5", r = report.display());
    let out = run(&[
        "run",
        "--quiet",
        "--report",
        &report.display().to_string(),
        "--",
        "sh",
        "-c",
        &script,
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
    let mut child = huddle()
        .args(["run", "--quiet", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let st = wait_for(&mut child, Duration::from_secs(20));
    assert_eq!(
        st.code(),
        Some(128 + libc::SIGTERM),
        "sleep died of the forwarded SIGTERM"
    );
}

/// On a terminal (a pty from `script`), huddle keeps one status line on stderr.
#[test]
fn a_terminal_gets_a_live_status_line() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("needs script(1) for a pty");
        return;
    }
    let cmd = format!("{} run -- sleep 1.2", HUDDLE);
    let out = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    // Rewritten in place: carriage return, the line, erase to its end.
    let line = text
        .split('\r')
        .find(|l| l.starts_with("huddle: ") && l.contains(" tasks, "))
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    assert!(line.contains(" events/s, no remap yet\x1b[K"), "{line:?}");
    // Without a terminal (this test's own stderr is a pipe), nothing of it.
    let plain = run(&["run", "--", "sleep", "0.3"]);
    assert!(!String::from_utf8_lossy(&plain.stderr).contains(" events/s"));
}

#[test]
fn sigint_to_huddle_reaches_the_program() {
    // Sent with kill (not from a terminal, which would reach the program itself). SIGINT
    // back to its default first: a shell's background job ignores it, exec keeps an ignored
    // signal ignored, and `sleep` would then outlive the forwarded SIGINT as it would
    // without huddle (make test run from `nohup ... &` failed here for that reason).
    use std::os::unix::process::CommandExt;
    let mut c = huddle();
    c.args(["run", "--quiet", "--", "sleep", "30"]);
    // SAFETY: signal() is async-signal-safe, fit for the child between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = c.spawn().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let st = wait_for(&mut child, Duration::from_secs(20));
    assert_eq!(
        st.code(),
        Some(128 + libc::SIGINT),
        "sleep died of the forwarded SIGINT"
    );
}

/// Processes of the tree below `pid` (children, grandchildren), from the ppid of every
/// process in /proc.
fn descendants(pid: u32) -> Vec<u32> {
    let mut parent = std::collections::HashMap::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let after = stat.rsplit_once(')').map_or("", |x| x.1);
        if let Some(pp) = after
            .split_whitespace()
            .nth(1)
            .and_then(|x| x.parse::<u32>().ok())
        {
            parent.insert(p, pp);
        }
    }
    let mut out: Vec<u32> = parent
        .keys()
        .copied()
        .filter(|&p| {
            let mut x = p;
            while let Some(&pp) = parent.get(&x) {
                if pp == pid {
                    return true;
                }
                x = pp;
            }
            false
        })
        .collect();
    out.sort_unstable();
    out
}

/// The agent's ring files live in a private directory: 0700, files 0600.
#[test]
fn the_agents_files_are_private() {
    let dir = scratch("agent-files");
    let mut child = huddle()
        .env("XDG_RUNTIME_DIR", &*dir)
        .args(["run", "--quiet", "--", "sleep", "1.5"])
        .spawn()
        .unwrap();
    let prefix = format!("huddle-detect-{}-", child.id());
    let end = Instant::now() + Duration::from_secs(10);
    let mut checked = 0;
    while checked == 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
        for e in std::fs::read_dir(&*dir).unwrap().flatten() {
            if !e.file_name().to_string_lossy().starts_with(&prefix) {
                continue;
            }
            let mode =
                |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&e.path()), 0o700, "{}", e.path().display());
            for f in std::fs::read_dir(e.path()).unwrap().flatten() {
                assert_eq!(mode(&f.path()), 0o600, "{}", f.path().display());
                checked += 1;
            }
        }
    }
    assert!(
        checked > 0,
        "no agent ring file appeared in {}",
        dir.display()
    );
    assert!(wait_for(&mut child, Duration::from_secs(20)).success());
}

/// attach follows the process and every process below it (as it would an mpirun and its
/// ranks), and places tasks only on the CPUs the program may run on, not huddle's.
#[test]
fn attach_follows_a_process_tree_inside_its_cpus() {
    let dir = scratch("attach-tree");
    let report = dir.join("r");
    // The program runs on the last CPU only; huddle on all of them.
    let cpu = *common::own_cpus().last().unwrap();
    let mut target = Command::new("taskset")
        .args(["-c", &cpu.to_string(), HUDDLE])
        .args([
            "workload",
            "ring",
            "--processes",
            "3",
            "--seconds",
            "8",
            "--out-dir",
        ])
        .arg(dir.join("wl"))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = target.id();
    let end = Instant::now() + Duration::from_secs(10);
    while descendants(pid).len() < 3 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    let ranks = descendants(pid);
    assert!(ranks.len() >= 3, "the workload's processes: {ranks:?}");
    let out = run(&[
        "attach",
        "--quiet",
        "--processes",
        "--policy",
        "static:scatter",
        "--seconds",
        "1.5",
        "--report",
        &report.display().to_string(),
        &pid.to_string(),
    ]);
    let _ = target.kill();
    let _ = target.wait();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tasks = json_file(&report.join("tasks.json"));
    let pids: Vec<u64> = tasks
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["pid"].as_u64().unwrap())
        .collect();
    for r in &ranks {
        assert!(
            pids.contains(&(*r as u64)),
            "process {r} of the tree is a task: {pids:?}"
        );
    }
    let info = json_file(&report.join("run.json"));
    assert_eq!(info["allowed_pus"], serde_json::json!([cpu]), "{info}");
    // Scatter spreads the tasks over every allowed CPU: here only the program's own, where
    // taskset put them already (so the placement is live and nothing moves).
    let decisions = json_file(&report.join("decisions.json"));
    let first = decisions
        .as_array()
        .unwrap()
        .first()
        .unwrap_or_else(|| panic!("static:scatter decides at once: {decisions}"));
    assert!(
        first["mapping"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p.as_u64() == Some(cpu as u64)),
        "{first}"
    );
    let mapped: Vec<u64> = first["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| tasks[i.as_u64().unwrap() as usize]["pid"].as_u64().unwrap())
        .collect();
    assert!(
        ranks.iter().all(|r| mapped.contains(&(*r as u64))),
        "{mapped:?} vs {ranks:?}"
    );
}

/// The program dies (SIGKILL from outside) while huddle is deciding and pinning: huddle
/// returns its status, writes the report, and does not hang.
#[test]
fn a_program_killed_while_managed_gives_its_status_and_a_report() {
    let dir = scratch("killed");
    let report = dir.join("r");
    let mut child = managed_workload(
        &[],
        &report,
        &["ring", "--threads", "4", "--seconds", "30"],
        &dir.join("wl"),
    )
    .spawn()
    .unwrap();
    // Around the first remap (about 1.8 s in).
    std::thread::sleep(Duration::from_millis(1800));
    let program = descendants(child.id());
    assert!(!program.is_empty(), "the workload runs");
    for p in &program {
        // SAFETY: killing processes this test started.
        unsafe { libc::kill(*p as i32, libc::SIGKILL) };
    }
    let st = wait_for(&mut child, Duration::from_secs(20));
    assert_eq!(st.code(), Some(128 + libc::SIGKILL));
    let info = json_file(&report.join("run.json"));
    assert_eq!(info["exit_signal"], 9, "{info}");
    assert!(report.join("index.html").exists());
}

/// Tasks that end between being listed and being pinned (ESRCH) are harmless: a program
/// that keeps starting short processes, remapped at every change of the task count.
#[test]
fn tasks_that_end_before_they_are_pinned_are_harmless() {
    let dir = scratch("churn");
    let report = dir.join("r");
    let script = "i=0; while [ $i -lt 150 ]; do sleep 0.01 & i=$((i+1)); [ $((i % 10)) -eq 0 ] && wait; done; wait";
    let mut child = huddle()
        .args([
            "run",
            "--quiet",
            "--policy",
            "static:round-robin",
            "--report",
        ])
        .arg(&report)
        .args(["--", "sh", "-c", script])
        .spawn()
        .unwrap();
    let st = wait_for(&mut child, Duration::from_secs(60));
    assert_eq!(st.code(), Some(0));
    let info = json_file(&report.join("run.json"));
    assert_eq!(
        info["notes"].as_array().map(|n| n
            .iter()
            .filter(|x| x.to_string().contains("affinity"))
            .count()),
        Some(0),
        "{info}"
    );
    let decisions = json_file(&report.join("decisions.json"));
    let pins = decisions
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["action"] == "migrate")
        .count();
    assert!(pins >= 2, "remapped as tasks came and went: {decisions}");
}

/// The whole job on a real program: detection finds the partners of a workload started in
/// the worst placement, and huddle moves them together.
#[test]
fn a_detected_program_is_remapped_so_partners_share_a_pu() {
    let pus = common::own_cpus();
    if pus.len() < 2 {
        panic!("needs two PUs (the test machine has two): pinning is what this tests");
    }
    let dir = scratch("remap");
    let report = dir.join("r");
    // distant-pairs x4: partners (0,2) and (1,3); compact puts each pair on two PUs.
    let pin = format!("{},{},{},{}", pus[0], pus[0], pus[1], pus[1]);
    let wl = [
        "distant-pairs",
        "--threads",
        "4",
        "--seconds",
        "5",
        "--json",
        "--pin",
        &pin,
    ];
    let out = managed_workload(&[], &report, &wl, &dir.join("wl"))
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wl: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tids: Vec<u64> = wl["tids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect();
    let tasks = json_file(&report.join("tasks.json"));
    let decisions = json_file(&report.join("decisions.json"));
    let last = decisions
        .as_array()
        .unwrap()
        .iter()
        .rfind(|d| d["action"] == "migrate")
        .unwrap_or_else(|| panic!("no migration: {decisions}"));
    // The PU of each workload thread after the last migration.
    let pu = |tid: u64| -> u64 {
        let idx = tasks
            .as_array()
            .unwrap()
            .iter()
            .position(|t| t["tid"].as_u64() == Some(tid))
            .unwrap();
        let k = last["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .position(|i| i.as_u64() == Some(idx as u64))
            .unwrap();
        last["mapping"][k].as_u64().unwrap()
    };
    assert_eq!(pu(tids[0]), pu(tids[2]), "{last}");
    assert_eq!(pu(tids[1]), pu(tids[3]), "{last}");
    assert_ne!(pu(tids[0]), pu(tids[1]), "balanced: {last}");
}

/// SIGUSR1 pauses the extra faults (events stop once the pages out are back), SIGUSR2 resumes
/// them; neither ends huddle or reaches the program. The floors given are used.
#[test]
fn sigusr1_pauses_extra_faults_and_sigusr2_resumes_them() {
    let d = scratch("pause");
    let report = d.join("report");
    // --watch always: two threads on this machine's two equally far PUs would put the agent
    // to sleep.
    let mut child = managed_workload(
        &[
            "--rearm-floor",
            "1000",
            "--steady-floor",
            "1000",
            "--watch",
            "always",
        ],
        &report,
        &["ring", "--threads", "2", "--seconds", "5"],
        &d.join("wl"),
    )
    .spawn()
    .unwrap();
    let pid = child.id() as i32;
    for (wait_ms, sig) in [(1000, libc::SIGUSR1), (2000, libc::SIGUSR2)] {
        std::thread::sleep(Duration::from_millis(wait_ms));
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid, sig) };
    }
    let st = wait_for(&mut child, Duration::from_secs(60));
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

/// On one PU (`--pus`, flat on any machine) a single busy thread puts the agent to sleep after
/// 0.3 s: it re-arms far fewer pages than with `--watch always`, and the report says when;
/// two threads on that PU keep it awake.
/// A process (or thread) started by a task huddle pinned inherits its PU: a lone OpenMP
/// master pinned before it started its worker kept both threads on one PU to the end. Now a
/// lone task is not pinned on a flat machine, and two busy ones on one PU are spread without
/// waiting for traffic. Here a shell spins alone, then starts two spinning shells that print
/// the PUs they may use once they are done: never the same single one.
#[test]
fn tasks_that_inherit_a_pinned_pu_are_spread_over_free_ones() {
    let cpus = common::own_cpus();
    if cpus.len() < 2 {
        eprintln!("skipped: needs two CPUs, has {cpus:?}");
        return;
    }
    let pus = format!("{},{}", cpus[0], cpus[1]);
    let script = "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done
for k in 1 2; do
  sh -c 'i=0; while [ $i -lt 600000 ]; do i=$((i+1)); done; grep Cpus_allowed_list /proc/self/status' &
done
wait";
    let out = huddle()
        .args(["run", "--quiet", "--pus", &pus, "--", "sh", "-c", script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let masks: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect();
    assert_eq!(masks.len(), 2, "{out:?}");
    let one_pu = |m: &str| !m.contains([',', '-']);
    assert!(
        !(masks[0] == masks[1] && one_pu(&masks[0])),
        "both on PU {}: {masks:?}",
        masks[0]
    );
}

#[test]
fn the_agent_sleeps_while_the_tasks_running_are_no_more_than_equally_far_pus() {
    let pu = format!("pu:{}", common::own_cpus()[0]);
    let d = scratch("dormant");
    let rearmed = |name: &str, extra: &[&str], workload: &[&str]| {
        let report = d.join(name);
        let mut args = vec!["--pus", pu.as_str()];
        args.extend_from_slice(extra);
        let st = managed_workload(&args, &report, workload, &d.join(format!("{name}-wl")))
            .status()
            .unwrap();
        assert!(st.success(), "{name}: {st:?}");
        let run = json_file(&report.join("run.json"));
        let notes: Vec<String> = (run["notes"].as_array().unwrap().iter())
            .map(|n| n.as_str().unwrap().to_string())
            .collect();
        (run["rearmed_pages"].as_u64().unwrap(), notes)
    };
    let one = ["private", "--threads", "1", "--seconds", "3"];
    let (asleep, notes) = rearmed("one", &[], &one);
    assert!(
        notes
            .iter()
            .any(|n| n.contains("slept at") && n.ends_with("asleep at the end")),
        "{notes:?}"
    );
    let (awake, notes) = rearmed("always", &["--watch", "always"], &one);
    assert!(!notes.iter().any(|n| n.contains("asleep")), "{notes:?}");
    // Awake: 300 pages/s for 1.5 s, then 75/s; asleep after 0.3-0.5 s.
    assert!(
        awake > 300 && asleep * 2 < awake,
        "{asleep} pages re-armed with sleep, {awake} without"
    );
    let two = ["ring", "--threads", "2", "--seconds", "2"];
    let (pages, notes) = rearmed("two", &[], &two);
    assert!(pages > 300, "{pages} pages re-armed: {notes:?}");
    assert!(!notes.iter().any(|n| n.contains("asleep")), "{notes:?}");
}

#[test]
fn the_program_survives_when_huddle_is_killed() {
    let dir = scratch("survive");
    let flag = dir.join("done");
    let script = format!("sleep 1.5; echo finished > {}", flag.display());
    let mut child = huddle()
        .args(["run", "--quiet", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    // SAFETY: killing our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    wait_for(&mut child, Duration::from_secs(5));
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
fn attach_refuses_processes_of_another_user() {
    if unsafe { libc::geteuid() } != 0 || Command::new("setpriv").arg("--help").output().is_err() {
        eprintln!("needs root and setpriv to act as another user");
        return;
    }
    // This test process belongs to root; huddle runs as nobody.
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", HUDDLE])
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
    assert!(err.contains("belongs to another user"), "{err}");
}

#[test]
fn report_files_are_private_and_the_result_is_unchanged() {
    let dir = scratch("report");
    let report = dir.join("r");
    let plain = dir.join("plain");
    let managed = dir.join("managed");
    let workload = |out: &PathBuf| {
        vec![
            HUDDLE.to_string(),
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
    // `huddle report` renders the same page again from the raw data.
    std::fs::remove_file(report.join("index.html")).unwrap();
    let again = run(&["report", &report.display().to_string()]);
    assert!(again.status.success());
    assert_eq!(
        std::fs::read_to_string(report.join("index.html")).unwrap(),
        page
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--no-private` leaves the program's private memory alone (it keeps its transparent huge
/// pages): a heap workload with the agent kept awake re-arms hundreds of pages without it and
/// none with it.
#[test]
fn no_private_re_arms_no_private_memory() {
    let d = scratch("no-private");
    let rearmed = |name: &str, extra: &[&str]| {
        let report = d.join(name);
        let mut args = vec!["--watch", "always"];
        args.extend_from_slice(extra);
        let workload = ["private", "--threads", "2", "--seconds", "2"];
        let st = managed_workload(&args, &report, &workload, &d.join(format!("{name}-wl")))
            .status()
            .unwrap();
        assert!(st.success(), "{name}: {st:?}");
        json_file(&report.join("run.json"))["rearmed_pages"]
            .as_u64()
            .unwrap()
    };
    let (all, shared_only) = (rearmed("all", &[]), rearmed("shared", &["--no-private"]));
    assert!(
        all > 300 && shared_only == 0,
        "{all} pages re-armed by default, {shared_only} with --no-private"
    );
}
