//! Where the preloaded agent library is.

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

/// The PMPI agent built for the MPI that runs `program` (build/mpi/<flavour>/libhuddle_pmpi.so,
/// see mk/pmpi.mk): `HUDDLE_PMPI` if set, else the flavour is read from the launcher's real
/// path (mpirun.openmpi, mpiexec.mpich, ... or their /etc/alternatives targets).
pub fn pmpi_library(program: &std::ffi::OsStr) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("HUDDLE_PMPI") {
        return Ok(PathBuf::from(p));
    }
    let resolved = detect::resolve_program(&program.to_os_string())
        .and_then(|p| std::fs::canonicalize(p).ok())
        .ok_or_else(|| format!("{}: command not found", program.to_string_lossy()))?;
    let text = resolved.to_string_lossy().to_lowercase();
    let flavour = if text.contains("openmpi") || text.contains("orterun") {
        "openmpi"
    } else if text.contains("mpich") || text.contains("hydra") {
        "mpich"
    } else {
        return Err(format!(
            "cannot tell which MPI {} uses; set HUDDLE_PMPI to build/mpi/<openmpi|mpich>/libhuddle_pmpi.so",
            resolved.display()
        ));
    };
    let exe = std::env::current_exe().unwrap_or_default();
    let root = exe
        .ancestors()
        .nth(3)
        .map(PathBuf::from)
        .unwrap_or_default();
    let lib = root
        .join("build/mpi")
        .join(flavour)
        .join("libhuddle_pmpi.so");
    if lib.is_file() {
        Ok(lib)
    } else {
        Err(format!(
            "{} not found (build it with `make build-pmpi`)",
            lib.display()
        ))
    }
}
