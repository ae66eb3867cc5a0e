//! Helpers shared by the CLI integration tests.
#![allow(dead_code)] // each test file compiles this module and uses part of it

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output};
use std::time::{Duration, Instant};

pub const HUDDLE: &str = env!("CARGO_BIN_EXE_huddle");

/// Runs huddle with `args` to the end.
pub fn huddle(args: &[&str]) -> Output {
    Command::new(HUDDLE)
        .args(args)
        .output()
        .expect("huddle runs")
}

/// The JSON huddle printed; its stderr if it failed.
pub fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

/// The JSON in file `p`.
pub fn json_file(p: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).expect("valid JSON")
}

/// Waits for huddle with a deadline; kills it and fails the test if it hangs.
pub fn wait_for(child: &mut Child, limit: Duration) -> ExitStatus {
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

/// A scratch directory of one test under the system temp directory: emptied at creation,
/// removed when the test passes, kept when it fails (to look at what the run left).
pub struct Scratch(PathBuf);

impl Scratch {
    /// huddle-KIND-PID-NAME, created empty.
    pub fn new(kind: &str, name: &str) -> Scratch {
        let s = Scratch::unmade(kind, name);
        std::fs::create_dir_all(&s.0).expect("temp dir");
        s
    }

    /// The same path, left for the command under test to create.
    pub fn unmade(kind: &str, name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("huddle-{kind}-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        Scratch(d)
    }
}

impl Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The CPUs (OS indexes) this process may run on.
pub fn own_cpus() -> Vec<u32> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or("0");
    topology::CpuSet::parse_list(list).unwrap().to_vec()
}
