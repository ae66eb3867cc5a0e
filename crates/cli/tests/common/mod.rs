//! Helpers shared by the CLI integration tests.
#![allow(dead_code)] // each test file compiles this module and uses part of it

use std::ops::Deref;
use std::path::{Path, PathBuf};

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
