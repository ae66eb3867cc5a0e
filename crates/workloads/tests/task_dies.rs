//! A task process killed mid-run must end the run with an error naming it, not hang its
//! partners at the barrier. (Its own test binary: it scans this process's children.)

use std::time::{Duration, Instant};
use workloads::{run, Mode, Pattern, Spec, WorkloadError};

/// PID of our child process named `name`, if it exists yet.
fn child_named(name: &str) -> Option<i32> {
    let me = std::process::id().to_string();
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        let ppid = stat[close + 1..].split_whitespace().nth(1);
        if comm == name && ppid == Some(me.as_str()) {
            return stat[..open].trim().parse().ok();
        }
    }
    None
}

#[test]
fn killed_task_aborts_the_run() {
    let mut spec = Spec::new(Pattern::Ring, Mode::Processes, 4);
    spec.seconds = 120.0;
    spec.region_bytes = 64 * 1024;
    let started = Instant::now();
    let handle = std::thread::spawn(move || run(&spec));
    let victim = loop {
        if let Some(pid) = child_named("wl-task-2") {
            break pid;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "task 2 never appeared"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: victim is our own child.
    assert_eq!(unsafe { libc::kill(victim, libc::SIGKILL) }, 0);
    let result = handle.join().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the run did not end soon after the kill"
    );
    match result {
        Err(WorkloadError::TaskFailed { reason, report }) => {
            assert!(
                reason.contains(&format!("task 2 (pid {victim}) was killed by signal 9")),
                "{reason}"
            );
            // What was done before the kill is still there.
            assert!(report.iterations > 0);
            assert!(report.matrix.get(0, 1) > 0.0);
        }
        other => panic!("expected TaskFailed, got {other:?}"),
    }
}
