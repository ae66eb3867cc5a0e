//! `huddle attach` never harms the program it manages: however huddle stops (SIGINT, SIGTERM,
//! SIGHUP, SIGQUIT, `timeout`, --seconds, a bad option), the program is not signalled, runs
//! on with the same output, and has the affinity masks it had before huddle came.

mod common;
use common::{wait_for, Scratch, HUDDLE};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A program that is not huddle's: a shell loop appending 1, 2, 3, ... to a file, with the
/// default reaction to every signal (SIGINT, SIGTERM, SIGHUP end it), and a new `sleep`
/// process every 20 ms.
struct Counter {
    child: Child,
    file: PathBuf,
}

impl Counter {
    fn start(dir: &Path) -> Counter {
        let file = dir.join("count");
        let child = Command::new("sh")
            .args([
                "-c",
                "i=0; while :; do i=$((i+1)); echo $i >> \"$1\"; sleep 0.02; done",
                "counter",
            ])
            .arg(&file)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let c = Counter { child, file };
        c.wait_for_lines(3);
        c
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.file)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    fn wait_for_lines(&self, n: usize) {
        let end = Instant::now() + Duration::from_secs(10);
        while self.lines().len() < n {
            assert!(Instant::now() < end, "the counter wrote {:?}", self.lines());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Still running, and its output goes on unchanged: 1, 2, 3, ... with nothing missing,
    /// nothing repeated, and more of it than before.
    fn assert_runs_on(&mut self, after: &str) {
        assert!(
            self.child.try_wait().unwrap().is_none(),
            "{after}: the program died: {:?}",
            self.child.try_wait()
        );
        let before = self.lines().len();
        self.wait_for_lines(before + 5);
        for (k, line) in self.lines().iter().enumerate() {
            assert_eq!(line, &(k + 1).to_string(), "{after}: line {}", k + 1);
        }
        assert!(self.child.try_wait().unwrap().is_none(), "{after}: died");
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The CPUs thread `tid` may run on.
fn mask(tid: u32) -> Vec<usize> {
    let cpus = manager::actuate::get_affinity(tid).expect("sched_getaffinity");
    cpus.iter().map(|c| c as usize).collect()
}

/// How huddle is made to let go.
#[derive(Clone, Copy, Debug)]
enum LetGo {
    Signal(i32),
    /// `timeout 4 huddle attach ...` (SIGTERM from timeout).
    Timeout,
    /// `--seconds 2`.
    Seconds,
}

/// Attaches to the counter (static:compact pins it at once), waits until huddle pinned it,
/// makes huddle let go, and checks huddle's status, the program, its mask and the report.
fn attach_and_let_go(counter: &mut Counter, dir: &Path, how: LetGo) {
    let pinnable = common::own_cpus().len() >= 2;
    if !pinnable {
        eprintln!("one CPU: huddle cannot change the program's mask; the rest is checked");
    }
    let pid = counter.pid();
    let before = mask(pid);
    let name = format!("{how:?}").replace(['(', ')'], "");
    let report = dir.join(format!("report-{name}"));
    let log = dir.join(format!("stderr-{name}"));
    let seconds = if matches!(how, LetGo::Seconds) {
        "2"
    } else {
        "60"
    };
    let mut cmd = match how {
        LetGo::Timeout => {
            let mut c = Command::new("timeout");
            c.args(["4", HUDDLE]);
            c
        }
        _ => Command::new(HUDDLE),
    };
    let mut huddle = cmd
        .args(["attach", "--quiet", "--policy", "static:compact"])
        .args(["--seconds", seconds, "--report"])
        .arg(&report)
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let stderr = || std::fs::read_to_string(&log).unwrap_or_default();
    if pinnable {
        let end = Instant::now() + Duration::from_secs(3);
        while mask(pid).len() != 1 {
            assert!(
                Instant::now() < end && huddle.try_wait().unwrap().is_none(),
                "{how:?}: huddle did not pin the program: {}",
                stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    } else {
        std::thread::sleep(Duration::from_millis(1500));
    }
    if let LetGo::Signal(sig) = how {
        // SAFETY: signalling our own child.
        assert_eq!(unsafe { libc::kill(huddle.id() as i32, sig) }, 0);
    }
    let st = wait_for(&mut huddle, Duration::from_secs(20));
    let want = match how {
        LetGo::Signal(sig) => 128 + sig,
        LetGo::Timeout => 124,
        LetGo::Seconds => 0,
    };
    assert_eq!(st.code(), Some(want), "{how:?}: {}", stderr());
    assert_eq!(mask(pid), before, "{how:?}: the mask is put back");
    counter.assert_runs_on(&format!("{how:?}"));
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("run.json")).unwrap()).unwrap();
    let notes = info["notes"].to_string();
    assert!(
        notes.contains("detached") && notes.contains("not signalled"),
        "{how:?}: {notes}"
    );
    if pinnable {
        assert!(!notes.contains("; 0 of the"), "{how:?}: {notes}");
    }
}

#[test]
fn attach_lets_go_on_every_signal_and_the_program_runs_on() {
    let dir = Scratch::new("attach-test", "signals");
    let mut counter = Counter::start(&dir);
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        attach_and_let_go(&mut counter, &dir, LetGo::Signal(sig));
    }
}

#[test]
fn attach_under_timeout_and_after_its_seconds_leaves_the_program_as_it_was() {
    if Command::new("timeout").arg("--version").output().is_err() {
        panic!("needs timeout(1) (coreutils)");
    }
    let dir = Scratch::new("attach-test", "timeout");
    let mut counter = Counter::start(&dir);
    attach_and_let_go(&mut counter, &dir, LetGo::Timeout);
    attach_and_let_go(&mut counter, &dir, LetGo::Seconds);
}

/// huddle's own errors come before it acts: the program is untouched.
#[test]
fn attach_errors_leave_the_program_alone() {
    let dir = Scratch::new("attach-test", "errors");
    let mut counter = Counter::start(&dir);
    let pid = counter.pid().to_string();
    let before = mask(counter.pid());
    for args in [
        &["attach", "--report", "/proc/huddle-no-such-dir", &pid][..],
        &["attach", "--threshold", "150", &pid],
        &["attach", "--policy", "fastest", &pid],
    ] {
        let out = Command::new(HUDDLE)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert_eq!(mask(counter.pid()), before);
        counter.assert_runs_on(&format!("{args:?}"));
    }
}
