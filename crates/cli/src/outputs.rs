//! Output paths are checked, and output directories made, before any work starts: a run is
//! never lost to a path that cannot be written.
//!
//! The rules, the same for every option that names where output goes:
//! - a FILE must not be a directory or another non-regular file, its directory must exist
//!   already (huddle creates no directory for a file the user named), and it must be
//!   writable there;
//! - a DIR that exists must be a writable directory; one that does not is created (that one
//!   directory only: its parent must exist).
//!
//! Each failure is one line naming the option and the path, exit status 2.

use crate::exit::bad_input;
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Not there: missing, or a path through something that is not a directory (its parent is
/// then looked at, and named in the message).
fn absent(e: &std::io::Error) -> bool {
    e.kind() == ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

/// The directory a path is in ("." for a bare name).
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Whether a file can be created in directory `dir`: by creating one and removing it again
/// (permission bits alone do not tell, for root or on read-only and virtual file systems).
fn probe_dir(flag: &str, shown: &Path, dir: &Path) -> anyhow::Result<()> {
    let probe = dir.join(format!(".huddle-write-test-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(bad_input(format!(
            "{flag} {}: cannot write in {} ({e})",
            shown.display(),
            dir.display()
        ))),
    }
}

/// Checks that `path`, given with option `flag`, can be written as a regular file (see the
/// module documentation). Nothing is left behind.
pub fn file(flag: &str, path: &Path) -> anyhow::Result<()> {
    let show = |what: String| bad_input(format!("{flag} {}: {what}", path.display()));
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => return Err(show("is a directory, not a file".into())),
        Ok(m) if !m.is_file() => return Err(show("is not a regular file".into())),
        Ok(_) => {
            // Opened for writing without truncating: what is in it stays until the run ends.
            return std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .map(drop)
                .map_err(|e| show(format!("cannot be written ({e})")));
        }
        Err(e) if absent(&e) => {}
        Err(e) => return Err(show(format!("{e}"))),
    }
    let dir = parent_of(path);
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => probe_dir(flag, path, dir),
        Ok(_) => Err(show(format!("{} is not a directory", dir.display()))),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(show(format!(
            "directory {} does not exist (huddle creates no directory for a file)",
            dir.display()
        ))),
        Err(e) => Err(show(format!("{}: {e}", dir.display()))),
    }
}

/// An output directory, ready for writing.
#[derive(Debug)]
pub struct OutDir {
    pub path: PathBuf,
    /// huddle made it just now.
    pub created: bool,
}

impl OutDir {
    /// Removes the directory again if huddle made it and nothing was written into it (for
    /// runs that end in an error before any output).
    pub fn discard_if_unused(&self) {
        if self.created {
            let _ = std::fs::remove_dir(&self.path);
        }
    }
}

/// Makes sure `path`, given with option `flag`, is a directory huddle can write in: an
/// existing one, or one it creates with `mode` when its parent exists (see the module
/// documentation).
pub fn dir(flag: &str, path: &Path, mode: u32) -> anyhow::Result<OutDir> {
    let show = |what: String| bad_input(format!("{flag} {}: {what}", path.display()));
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => {
            probe_dir(flag, path, path)?;
            return Ok(OutDir {
                path: path.to_path_buf(),
                created: false,
            });
        }
        Ok(_) => return Err(show("exists and is not a directory".into())),
        Err(e) if absent(&e) => {}
        Err(e) => return Err(show(format!("{e}"))),
    }
    let parent = parent_of(path);
    match std::fs::metadata(parent) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(show(format!("{} is not a directory", parent.display()))),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(show(format!(
                "directory {} does not exist (huddle creates only the directory named, not its parents)",
                parent.display()
            )))
        }
        Err(e) => return Err(show(format!("{}: {e}", parent.display()))),
    }
    std::fs::DirBuilder::new()
        .mode(mode)
        .create(path)
        .map_err(|e| show(format!("cannot create the directory ({e})")))?;
    let made = OutDir {
        path: path.to_path_buf(),
        created: true,
    };
    if let Err(e) = probe_dir(flag, path, path) {
        made.discard_if_unused();
        return Err(e);
    }
    Ok(made)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("huddle-outputs-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn message(r: anyhow::Result<impl std::fmt::Debug>) -> String {
        let e = r.unwrap_err();
        assert_eq!(
            e.downcast_ref::<crate::exit::Exit>().map(|x| x.code),
            Some(2)
        );
        e.to_string()
    }

    #[test]
    fn files_are_checked_and_nothing_is_left() {
        let d = scratch("files");
        let f = d.join("m.csv");
        file("--out", &f).unwrap();
        assert!(!f.exists(), "the check leaves no file");
        std::fs::write(&f, "old").unwrap();
        file("--out", &f).unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "old", "not truncated");
        assert!(message(file("--out", &d)).contains("is a directory"));
        assert!(message(file("--out", Path::new("/dev/null"))).contains("not a regular file"));
        let missing = d.join("no/such/m.csv");
        assert!(message(file("--out", &missing)).contains("does not exist"));
        assert!(!d.join("no").exists(), "no parent created");
        assert!(message(file("--out", &f.join("x"))).contains("not a directory"));
        assert!(message(file("--out", Path::new("/proc/huddle-x.csv"))).contains("cannot write"));
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1, "only m.csv");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn directories_are_made_one_level_deep() {
        let d = scratch("dirs");
        let r = dir("--report", &d.join("r"), 0o700).unwrap();
        assert!(r.created && d.join("r").is_dir());
        let again = dir("--report", &d.join("r"), 0o700).unwrap();
        assert!(!again.created);
        again.discard_if_unused();
        assert!(d.join("r").is_dir(), "an existing directory stays");
        r.discard_if_unused();
        assert!(!d.join("r").exists(), "an unused new one goes");
        assert!(message(dir("--report", &d.join("a/b"), 0o700)).contains("does not exist"));
        assert!(!d.join("a").exists(), "no parent created");
        std::fs::write(d.join("f"), "").unwrap();
        assert!(message(dir("--report", &d.join("f"), 0o700)).contains("not a directory"));
        assert!(
            message(dir("--report", Path::new("/proc/huddle-r"), 0o700)).contains("cannot create")
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
