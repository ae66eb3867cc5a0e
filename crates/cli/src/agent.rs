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
