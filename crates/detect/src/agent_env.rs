//! The agent's environment and the private directory its ring files live in, as the
//! detector sets them up. The variable names are `agent_abi::env`'s, which the agent reads.

use crate::procs;
use crate::session::{AgentConfig, DetectError};
use agent_abi::env::{DIR, FLOOR, INTERVAL_MS, PREFIX, PRIVATE, RATE, THREADS_ONLY, USER_SETTINGS};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// `env` (the program's environment) with the agent preloaded and configured by `cfg`, its
/// ring going to `dir`: the agent's library goes first in LD_PRELOAD, and any agent settings
/// inherited from huddle's own environment are replaced, except the user's own
/// (`USER_SETTINGS`: HUDDLE_AGENT_MOVE=0 was dropped here, so the "saved by copy" torture
/// run had moved its pages like the other).
pub fn environment(
    mut env: Vec<(OsString, OsString)>,
    cfg: &AgentConfig,
    dir: &Path,
) -> Vec<(OsString, OsString)> {
    let old = env
        .iter()
        .find(|(k, _)| k == "LD_PRELOAD")
        .map(|(_, v)| v.clone())
        .filter(|v| !v.is_empty());
    let mut preload = cfg.library.clone().into_os_string();
    if let Some(old) = old {
        preload.push(" ");
        preload.push(old);
    }
    env.retain(|(k, _)| {
        k != "LD_PRELOAD"
            && (!k.as_bytes().starts_with(PREFIX.as_bytes())
                || USER_SETTINGS.iter().any(|u| k == u))
    });
    env.push(("LD_PRELOAD".into(), preload));
    env.push((DIR.into(), dir.as_os_str().to_owned()));
    env.push((RATE.into(), cfg.rearm_rate.to_string().into()));
    env.push((FLOOR.into(), cfg.rearm_floor.to_string().into()));
    env.push((INTERVAL_MS.into(), cfg.interval_ms.to_string().into()));
    env.push((
        PRIVATE.into(),
        if cfg.private_memory { "1" } else { "0" }.into(),
    ));
    if cfg.threads_only {
        env.push((THREADS_ONLY.into(), "1".into()));
    }
    env
}

/// Prefix of the private directories: `huddle-detect-PID-sSTART-N`, PID and START (clock
/// ticks since boot, /proc/PID/stat field 22) naming the huddle process that made it.
const PRIVATE_PREFIX: &str = "huddle-detect-";

/// Where the private directories go: $XDG_RUNTIME_DIR if it is a directory, else the
/// temporary directory ($TMPDIR, /tmp).
pub fn private_base() -> PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(std::env::temp_dir)
}

/// Whether the huddle process that named a private directory `name` is gone, so that the
/// directory is left over (huddle was killed before it could remove it). A directory named
/// after a live process stays: its owner still reads it. A pid in use again by another
/// process (its start time is not the one in the name) counts as gone. Older names, without
/// the start time, are left over only when their pid is not in use at all.
fn private_dir_is_stale(name: &str) -> bool {
    let Some(rest) = name.strip_prefix(PRIVATE_PREFIX) else {
        return false;
    };
    let mut parts = rest.split('-');
    let Some(pid) = parts.next().and_then(|p| p.parse::<u32>().ok()) else {
        return false;
    };
    match procs::start_ticks(pid) {
        None => true,
        Some(now) => match parts.next().and_then(|s| s.strip_prefix('s')) {
            Some(start) => start.parse::<u64>().is_ok_and(|start| start != now),
            None => false,
        },
    }
}

/// Removes the private directories in `base` that huddle processes killed before they could
/// clean up left behind (with the agents' ring files in them), and returns how many. Only
/// real directories of our own user are touched, never what a symbolic link points to, and
/// never the directory of a huddle that still runs (see `private_dir_is_stale`). A program
/// that outlived its huddle keeps its mapping of a removed ring.
pub fn remove_stale_private_dirs(base: &Path) -> usize {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if !private_dir_is_stale(name) {
            continue;
        }
        let path = e.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() && meta.uid() == me && std::fs::remove_dir_all(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// A private directory (0700) for the agent's ring files. Directories that killed huddle
/// processes left behind are removed first.
pub(crate) fn private_dir() -> Result<PathBuf, DetectError> {
    use std::os::unix::fs::DirBuilderExt;
    let base = private_base();
    remove_stale_private_dirs(&base);
    let me = std::process::id();
    let start = procs::start_ticks(me).unwrap_or(0);
    for i in 0..100u32 {
        let d = base.join(format!("{PRIVATE_PREFIX}{me}-s{start}-{i}"));
        match std::fs::DirBuilder::new().mode(0o700).create(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(err) => {
                return Err(DetectError::Io {
                    what: format!("creating {}", d.display()),
                    err,
                })
            }
        }
    }
    Err(DetectError::Io {
        what: format!("creating a private directory in {}", base.display()),
        err: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_goes_first_and_inherited_settings_are_replaced_but_the_users_own() {
        let cfg = AgentConfig {
            library: "/lib/agent.so".into(),
            rearm_rate: 0.01,
            rearm_floor: 300,
            steady_floor: 75,
            interval_ms: 10,
            private_memory: false,
            threads_only: false,
        };
        let env = vec![
            ("LD_PRELOAD".into(), "/lib/other.so".into()),
            ("HUDDLE_AGENT_RATE".into(), "0.5".into()),
            ("HUDDLE_AGENT_MOVE".into(), "0".into()),
            ("HUDDLE_AGENT_HUGE".into(), "0".into()),
            ("HOME".into(), "/root".into()),
        ];
        let out = environment(env, &cfg, Path::new("/run/x"));
        let get = |k: &str| {
            let v: Vec<_> = out
                .iter()
                .filter(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .collect();
            assert_eq!(v.len(), 1, "{k} once");
            v[0].clone().into_string().unwrap()
        };
        assert_eq!(get("LD_PRELOAD"), "/lib/agent.so /lib/other.so");
        assert_eq!(get(RATE), "0.01");
        assert_eq!(get(FLOOR), "300");
        assert_eq!(get(INTERVAL_MS), "10");
        assert_eq!(get(PRIVATE), "0");
        assert_eq!(get(DIR), "/run/x");
        assert_eq!(get("HOME"), "/root");
        // The user's own settings reach the agent.
        assert_eq!(get("HUDDLE_AGENT_MOVE"), "0");
        assert_eq!(get("HUDDLE_AGENT_HUGE"), "0");
    }

    /// Left-over directories of dead (or replaced) huddle processes go; those of live ones,
    /// files, links and anything not named like ours stay.
    #[test]
    fn stale_private_dirs_are_removed_and_live_ones_kept() {
        let base = std::env::temp_dir().join(format!("huddle-stale-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let dead = gone.id();
        gone.wait().unwrap();
        let me = std::process::id();
        let start = procs::start_ticks(me).unwrap();
        let stale = [
            format!("huddle-detect-{dead}-s123-0"),
            // Our pid, but another start time: a process the pid belonged to before us.
            format!("huddle-detect-{me}-s{}-0", start + 1),
            // Older names without the start time, of a pid not in use.
            format!("huddle-detect-{dead}-4711-0"),
        ];
        let live = [
            format!("huddle-detect-{me}-s{start}-0"),
            format!("huddle-detect-{me}-4711-0"),
            "huddle-detect-notapid-s1-0".to_string(),
            format!("other-{dead}-s1-0"),
        ];
        for d in stale.iter().chain(&live) {
            std::fs::create_dir(base.join(d)).unwrap();
            std::fs::write(base.join(d).join(format!("agent-{dead}.ring")), b"x").unwrap();
        }
        // A file and a link with a stale name, the link to a directory that must survive.
        std::fs::write(base.join(format!("huddle-detect-{dead}-s1-1")), b"x").unwrap();
        let victim = base.join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::fs::write(victim.join("keep"), b"x").unwrap();
        std::os::unix::fs::symlink(&victim, base.join(format!("huddle-detect-{dead}-s1-2")))
            .unwrap();
        assert_eq!(remove_stale_private_dirs(&base), stale.len());
        for d in &stale {
            assert!(!base.join(d).exists(), "{d} removed");
        }
        for d in &live {
            assert!(
                base.join(d).join(format!("agent-{dead}.ring")).exists(),
                "{d} kept"
            );
        }
        assert!(base.join(format!("huddle-detect-{dead}-s1-1")).is_file());
        assert!(victim.join("keep").is_file());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
