//! Where the preloaded agent library is.

use manager::mpi::{MpiTraffic, SourceMode};
use std::path::PathBuf;

/// `HUDDLE_AGENT` if set, else `libhuddle_agent.so` beside the huddle binary (cargo puts both
/// in target/<profile>/), else in ../lib relative to it (an installed layout).
pub fn library() -> PathBuf {
    if let Some(p) = std::env::var_os("HUDDLE_AGENT") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().map(PathBuf::from).unwrap_or_default();
    let candidates = [
        dir.join("libhuddle_agent.so"),
        dir.join("../libhuddle_agent.so"),
        dir.join("../lib/libhuddle_agent.so"),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| candidates[0].clone())
}

/// Which MPI a command runs under ("openmpi" or "mpich"): from the launcher's real path
/// (mpirun.openmpi, mpiexec.mpich, orterun, hydra, or their /etc/alternatives targets), else
/// from the MPI library the binary links (libmpi.so: Open MPI, libmpich.so: MPICH). None for
/// a program that is neither (a script, a statically linked binary, no MPI at all).
pub fn mpi_flavour(resolved: &std::path::Path) -> Option<&'static str> {
    let text = resolved.to_string_lossy().to_lowercase();
    if text.contains("openmpi") || text.contains("orterun") {
        return Some("openmpi");
    }
    if text.contains("mpich") || text.contains("hydra") {
        return Some("mpich");
    }
    linked_mpi(resolved)
}

/// The MPI named in an ELF binary's dynamic string table. Reads at most the first 256 MiB:
/// the dynamic section of a real binary is near its start.
fn linked_mpi(path: &std::path::Path) -> Option<&'static str> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(256 << 20)
        .read_to_end(&mut bytes)
        .ok()?;
    if !bytes.starts_with(b"\x7fELF") {
        return None;
    }
    let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    if has(b"libmpich.so") {
        Some("mpich")
    } else if has(b"libmpi.so") {
        Some("openmpi")
    } else {
        None
    }
}

/// The PMPI agent built for `flavour`: `HUDDLE_PMPI` if set, else the first that exists of
/// `<huddle's dir>/../lib/huddle/<flavour>/` (an installed layout) and `build/mpi/<flavour>/`
/// of the source tree this huddle was built from (mk/pmpi.mk puts it there). `bytes_only`:
/// the build without the time split (`libhuddle_pmpi_bytes.so`, no receive, probe or
/// completion wrappers), where there is one; else the full `libhuddle_pmpi.so`.
pub fn pmpi_library_for(flavour: &str, bytes_only: bool) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("HUDDLE_PMPI") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let installed = exe
        .ancestors()
        .nth(2)
        .map(|prefix| prefix.join("lib/huddle").join(flavour))
        .unwrap_or_default();
    // The workspace above crates/cli, fixed at build time.
    let tree = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(|root| root.join("build/mpi").join(flavour))
        .unwrap_or_default();
    let full = [&installed, &tree].map(|d| d.join("libhuddle_pmpi.so"));
    let bytes = [&installed, &tree].map(|d| d.join("libhuddle_pmpi_bytes.so"));
    let candidates: Vec<&PathBuf> = if bytes_only {
        bytes.iter().chain(&full).collect()
    } else {
        full.iter().collect()
    };
    match candidates.iter().find(|p| p.is_file()) {
        Some(lib) => Ok(lib.canonicalize().unwrap_or_else(|_| lib.to_path_buf())),
        None => Err(format!(
            "no PMPI agent for {flavour}: neither {} nor {} exists (build it with `make build-pmpi`, or set HUDDLE_PMPI)",
            full[0].display(),
            full[1].display()
        )),
    }
}

/// The PMPI agent for the MPI that `program` uses (a launcher or a binary linking libmpi),
/// with the time split (for the simmer policy).
pub fn pmpi_library(program: &std::ffi::OsStr) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("HUDDLE_PMPI") {
        return Ok(PathBuf::from(p));
    }
    let resolved = detect::resolve_program(&program.to_os_string())
        .and_then(|p| std::fs::canonicalize(p).ok())
        .ok_or_else(|| format!("{}: command not found", program.to_string_lossy()))?;
    let flavour = mpi_flavour(&resolved).ok_or_else(|| {
        format!(
            "cannot tell which MPI {} uses; set HUDDLE_PMPI to build/mpi/<openmpi|mpich>/libhuddle_pmpi.so",
            resolved.display()
        )
    })?;
    pmpi_library_for(flavour, false)
}

/// Prepends a library to LD_PRELOAD for the program (the detection agent comes first).
pub fn preload(lib: &std::path::Path) {
    let mut v = lib.as_os_str().to_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        v.push(" ");
        v.push(old);
    }
    std::env::set_var("LD_PRELOAD", v);
}

/// The board the ranks of this run write (private directory, named after huddle's pid).
pub fn board_path() -> PathBuf {
    simmer::board::default_dir().join(format!("huddle-run-{}.board", std::process::id()))
}

/// Removes what huddle processes killed before they could clean up left behind: the private
/// directories with their agents' ring files, and the boards of MPI runs (see
/// [`detect::session::remove_stale_private_dirs`] and [`remove_stale_boards`]).
pub fn remove_leftovers() {
    detect::session::remove_stale_private_dirs(&detect::session::private_base());
    remove_stale_boards(&simmer::board::default_dir());
}

/// Removes from the board directory `dir` the boards and scratch rank matrices
/// (`huddle-run-PID.board`, `.csv`) of huddle processes that were killed before they could
/// remove them: PID is gone, and no rank listed on the board still runs (the board of an
/// orphaned job stays readable by `huddle attach`). Only regular files of our own user are
/// removed; returns how many.
pub fn remove_stale_boards(dir: &std::path::Path) -> usize {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .collect();
    // Boards first: a rank matrix stays with a board that stays.
    names.sort_by_key(|n| !n.ends_with(".board"));
    let mut removed = 0;
    for name in names {
        let Some((pid, ext)) = name
            .strip_prefix("huddle-run-")
            .and_then(|r| r.split_once('.'))
        else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if !matches!(ext, "board" | "csv") || detect::procs::start_ticks(pid).is_some() {
            continue;
        }
        let path = dir.join(&name);
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_file() || meta.uid() != me {
            continue;
        }
        let board = path.with_extension("board");
        let ranks_alive = simmer::board::Board::open(&board)
            .and_then(|b| b.snapshot())
            .is_ok_and(|snap| {
                snap.ranks
                    .iter()
                    .any(|r| r.alive && detect::procs::start_ticks(r.pid).is_some())
            });
        if !ranks_alive && std::fs::remove_file(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Where the ranks' rank matrix goes when the user asked for none: beside the board, removed
/// after the run.
pub fn scratch_rank_matrix() -> PathBuf {
    board_path().with_extension("csv")
}

/// MPI ranks among the program's tasks: the PMPI agent built for the program's MPI is
/// preloaded into them, and the board they write is read into the matrix (`source`:
/// --source as given). None where the command is no MPI program huddle recognises, its agent
/// is not built, or --source faults; each of those but the last says so in one line, and
/// page faults go on alone. `preloaded`: --policy simmer did the preload and named the
/// board already. `rank_matrix`: where rank 0 writes the rank matrix at MPI_Finalize (set
/// always: without it the agent writes beside the board and says so on the program's stderr).
pub fn mpi_setup(
    source: Option<&str>,
    program: &std::ffi::OsStr,
    block_size: u64,
    preloaded: bool,
    rank_matrix: PathBuf,
) -> anyhow::Result<Option<(MpiTraffic, SourceMode)>> {
    let asked = source
        .map(SourceMode::parse)
        .transpose()
        .map_err(crate::exit::bad_input)?;
    if asked == Some(SourceMode::Faults) {
        return Ok(None);
    }
    // A missing program is reported by the session (exit 127).
    let Some(resolved) = detect::resolve_program(&program.to_os_string())
        .and_then(|p| std::fs::canonicalize(p).ok())
    else {
        return Ok(None);
    };
    let Some(flavour) = mpi_flavour(&resolved) else {
        if asked.is_some() {
            eprintln!(
                "huddle: {}: no MPI launcher and no libmpi linked (a script, a static binary?): MPI traffic not counted, page faults alone",
                resolved.display()
            );
        }
        return Ok(None);
    };
    // Bytes alone (below): the build without the time split's wrappers.
    let lib = match pmpi_library_for(flavour, true) {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!("huddle: MPI traffic not counted ({e}): page faults alone");
            return Ok(None);
        }
    };
    if !preloaded {
        preload(&lib);
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(simmer::board::default_dir())?;
        std::env::set_var("HUDDLE_BOARD", board_path());
        // Bytes alone: the time split is for the simmer policy, which preloads the agent
        // itself, and it was most of the agent's cost per MPI call (docs/pmpi.md).
        std::env::set_var("HUDDLE_PMPI_TIMESPLIT", "0");
        if let Some(dir) = rank_matrix.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        std::env::set_var("HUDDLE_RANK_MATRIX", rank_matrix);
    }
    Ok(Some((
        MpiTraffic::new(board_path(), block_size),
        asked.unwrap_or(SourceMode::Both),
    )))
}

/// The board of a job already running under the PMPI agent (preloaded by the user, or by a
/// `huddle run`), found in the default board directory by its ranks' pids, any of which is in
/// `tree`: attach cannot preload the agent, but it can read a board that is there.
pub fn board_of_tree(tree: &[u32]) -> Option<PathBuf> {
    let mut found = None;
    for entry in std::fs::read_dir(simmer::board::default_dir())
        .ok()?
        .flatten()
    {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "board") {
            continue;
        }
        let Ok(snap) = simmer::board::Board::open(&path).and_then(|b| b.snapshot()) else {
            continue;
        };
        if snap.ranks.iter().any(|r| r.alive && tree.contains(&r.pid)) {
            found = Some(path);
            break;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boards_of_killed_runs_are_removed_and_live_ones_kept() {
        let dir = std::env::temp_dir().join(format!("huddle-boards-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let dead = gone.id();
        gone.wait().unwrap();
        let me = std::process::id();
        let names = [
            format!("huddle-run-{dead}.board"),
            format!("huddle-run-{dead}.csv"),
            format!("huddle-run-{me}.board"),
            format!("huddle-run-{me}.csv"),
            format!("huddle-run-{dead}.txt"),
            "mine.board".to_string(),
        ];
        for n in &names {
            std::fs::write(dir.join(n), b"not a board").unwrap();
        }
        assert_eq!(remove_stale_boards(&dir), 2);
        for n in &names[..2] {
            assert!(!dir.join(n).exists(), "{n} removed");
        }
        for n in &names[2..] {
            assert!(dir.join(n).exists(), "{n} kept");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
