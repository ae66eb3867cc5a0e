//! `huddle node`: manage the MPI ranks of one job on this node; and the launcher side of
//! `huddle run --node-managers -- mpirun ...`, which has the job start one on every node with
//! ranks. How the two split the work: docs/cluster.md.

use crate::exit::bad_input;
use crate::run::Common;
use manager::mpi::{MpiTraffic, SourceMode};
use manager::node::NodeRanks;
use manager::observe::Detected;
use manager::run;
use simmer::board::{Board, BoardError};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
#[command(
    long_about = "Manage the MPI ranks of one job on this node. The ranks run with the PMPI \
    agent preloaded, which publishes them on the node's board: which ranks run on this host \
    (their pids, the thread each calls MPI from), their exact MPI traffic, and when each \
    finalizes or dies. huddle node watches those ranks as `huddle attach` does (page faults \
    of their threads, merged with the board's traffic: --source both), maps them with this \
    node's own topology under the same policies, thresholds and safety rules as `huddle run`, \
    and pins them. It never signals a rank. It ends when every rank of this host on the board \
    has finalized or died (or after --seconds, or on SIGINT, SIGTERM, SIGHUP, SIGQUIT), puts \
    back every affinity mask it changed, writes the report (--report DIR, or with \
    --job-report DIR into DIR/node-HOST/ beside a node.json summary), removes the board once \
    no rank writes it any more, and exits 0 (128+N after signal N).\n\n\
    The job starts it itself: with HUDDLE_NODE=1 in the ranks' environment, the agent in the \
    first rank of each node to create the board runs `huddle node --board BOARD \
    [--job-report $HUDDLE_NODE_REPORT] --quiet $HUDDLE_NODE_ARGS`, detached (the huddle \
    binary from HUDDLE_BIN, else PATH). `huddle run --node-managers -- mpirun ...` sets all \
    of that up. See docs/cluster.md."
)]
pub struct NodeArgs {
    #[command(flatten)]
    pub common: Common,
    /// The job's board on this node: a path, or a name as HUDDLE_BOARD takes it
    /// (<board directory>/<name>.board)
    #[arg(long, value_name = "BOARD")]
    pub board: String,
    /// The job's report directory (shared by the nodes, or one per node): this node's run
    /// data go into DIR/node-HOST/ with a node.json summary. DIR is created if missing (its
    /// parent must exist)
    #[arg(long, value_name = "DIR", conflicts_with = "report")]
    pub job_report: Option<PathBuf>,
    /// Stop managing after this many seconds
    #[arg(long, value_name = "S")]
    pub seconds: Option<f64>,
}

/// How long `huddle run` reads the launcher's stderr after the launcher ended.
const RELAY_DRAIN: Duration = Duration::from_secs(5);

/// How long the board, and then a first rank of this host on it, may take to appear.
const APPEAR: Duration = Duration::from_secs(5);

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Writes DIR/node.json atomically (temporary file, then rename).
fn write_node_json(dir: &Path, value: &serde_json::Value) {
    let path = dir.join("node.json");
    let tmp = dir.join(format!(".node.json.tmp{}", std::process::id()));
    let text = serde_json::to_string_pretty(value).unwrap_or_default() + "\n";
    let ok = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = ok {
        let _ = std::fs::remove_file(&tmp);
        eprintln!("huddle: {}: not written: {e}", path.display());
    }
}

/// The board's creation time (header field 6, CLOCK_REALTIME ns), in Unix seconds.
fn board_created_unix(path: &Path) -> Option<f64> {
    use std::os::unix::fs::FileExt;
    let mut b = [0u8; 8];
    std::fs::File::open(path)
        .ok()?
        .read_exact_at(&mut b, 48)
        .ok()?;
    let ns = u64::from_le_bytes(b);
    (ns > 0).then(|| ns as f64 / 1e9)
}

fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

pub fn run(args: NodeArgs) -> anyhow::Result<i32> {
    // First: from here on SIGINT, SIGTERM, SIGHUP and SIGQUIT only make huddle let go.
    detect::signals::install_detach();
    detect::signals::install_pause();
    if let Some(s) = args.seconds {
        if !(s.is_finite() && s > 0.0) {
            return Err(bad_input(format!(
                "--seconds {s}: must be a positive number of seconds"
            )));
        }
    }
    let host = manager::node::host_name();
    let board = simmer::board::path_for(&args.board);
    let mut common = args.common.clone();
    let node_dir = match &args.job_report {
        Some(job) => {
            crate::outputs::dir("--job-report", job, 0o700)?;
            let d = job.join(format!("node-{}", manager::node::file_name_part(&host)));
            crate::outputs::dir("--job-report", &d, 0o700)?;
            common.report = Some(d.clone());
            Some(d)
        }
        None => None,
    };
    let started = unix_now();
    // Read now: the agent removes a default board at MPI_Finalize.
    let created = board_created_unix(&board);
    let summary = |state: &str| {
        serde_json::json!({
            "schema": "huddle.node/1",
            "state": state,
            "host": host,
            "pid": std::process::id(),
            "board": board,
            "started_unix": started,
            "board_created_unix": created,
            "start_delay_s": created.map(|c| started - c),
        })
    };
    if let Some(d) = &node_dir {
        write_node_json(d, &summary("running"));
    }
    let result = manage(&args, &common, &host, &board);
    if let Some(d) = &node_dir {
        let mut v = summary(if result.is_ok() { "done" } else { "failed" });
        match &result {
            Ok((_, extra)) => {
                if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
                    o.extend(e.clone());
                }
            }
            Err(e) => v["error"] = format!("{e:#}").into(),
        }
        write_node_json(d, &v);
    }
    result.map(|(code, _)| code)
}

/// The board, once ranks have initialized it.
fn open_board(path: &Path) -> anyhow::Result<Board> {
    // No directory: no rank will make the board there either.
    let dir_missing = path
        .parent()
        .is_some_and(|d| !d.as_os_str().is_empty() && !d.is_dir());
    let until = Instant::now() + if dir_missing { Duration::ZERO } else { APPEAR };
    loop {
        match Board::open(path) {
            Ok(b) => return Ok(b),
            Err(e @ BoardError::Invalid { .. }) => return Err(bad_input(e)),
            Err(e) if Instant::now() >= until => return Err(bad_input(e)),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Runs the loop; gives the exit code and what node.json should add.
fn manage(
    args: &NodeArgs,
    common: &Common,
    host: &str,
    board_path: &Path,
) -> anyhow::Result<(i32, serde_json::Value)> {
    let asked = common
        .source
        .as_deref()
        .map(SourceMode::parse)
        .transpose()
        .map_err(bad_input)?;
    let board = open_board(board_path)?;
    let board_id = file_id(board_path);
    // The first rank of this host is on the board already (it started us after writing its
    // slot); wait a little in case huddle node was started by hand before the job.
    let until = Instant::now() + APPEAR;
    let pids: Vec<u32> = loop {
        let snap = board.snapshot().map_err(bad_input)?;
        let local = manager::node::local_ranks(&snap, host);
        let running: Vec<u32> = local
            .iter()
            .filter(|r| r.alive && r.state == simmer::board::SlotState::Running)
            .map(|r| r.pid)
            .collect();
        if !running.is_empty() {
            break running;
        }
        if Instant::now() >= until {
            let mut hosts: Vec<&str> = snap.ranks.iter().map(|r| r.hostname.as_str()).collect();
            hosts.sort_unstable();
            hosts.dedup();
            return Err(bad_input(format!(
                "{}: no running rank on this host ({host}) within {} s (ranks on: {})",
                board_path.display(),
                APPEAR.as_secs(),
                if hosts.is_empty() {
                    "none".to_string()
                } else {
                    hosts.join(", ")
                }
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let root = manager::node::attach_root(&pids).ok_or_else(|| {
        bad_input(format!(
            "ranks {pids:?} on {host} share no parent process below init: cannot watch them as one program"
        ))
    })?;
    // Its name, for node.json: the launcher's daemon (orted, slurmstepd, hydra_pmi_proxy).
    let root_command = std::fs::read_to_string(format!("/proc/{root}/comm"))
        .map(|c| c.trim_end().to_string())
        .unwrap_or_default();
    // The ranks must be ours; their parent need not be (slurmstepd is root's).
    if let Some(p) = pids.iter().find(|&&p| !manager::procs::ours(p)) {
        return Err(bad_input(format!(
            "rank process {p} on {host} belongs to another user: huddle only manages processes of its own user"
        )));
    }
    // The ranks' CPUs (their cpuset, or where the launcher bound them), not huddle's.
    let cpus: topology::CpuSet = pids
        .iter()
        .flat_map(|&p| manager::actuate::tree_cpus(p))
        .collect();
    if cpus.is_empty() {
        return Err(bad_input(format!("ranks {pids:?}: gone already")));
    }
    // Started by a rank, huddle node inherited that rank's affinity mask (one core, where the
    // launcher binds ranks): widen it to every CPU of the job on this node and its own, so it
    // does not queue behind the rank that started it.
    let mut own = manager::actuate::get_affinity(std::process::id()).unwrap_or_default();
    own.extend(cpus.iter());
    let _ = manager::actuate::set_affinity(std::process::id(), &own);
    // SIMMer's rules read this job's board, not one named by `huddle run`.
    let (target, policy, machine) = crate::run::check(common, Some(&cpus), Some(board_path))?;
    let mpi = match asked {
        Some(SourceMode::Faults) => None,
        _ => Some((
            MpiTraffic::new(board_path.to_path_buf(), common.block_size),
            asked.unwrap_or(SourceMode::Both),
        )),
    };
    let mut cfg = crate::run::detect_config(common, false);
    crate::run::configure_sources(
        &mut cfg,
        mpi.as_ref().map(|m| m.1),
        common.faults_between_ranks,
    );
    let session =
        detect::Session::start(detect::Target::Attach(root as i32), &cfg).map_err(|e| match e {
            detect::DetectError::NoSuchProcess(_) => bad_input(e),
            other => anyhow::Error::new(other),
        })?;
    let mut obs = NodeRanks::new(
        Detected {
            session,
            spawned: false,
            mpi,
        },
        board,
        host.to_string(),
    );
    let ranks: Vec<String> = obs.ranks().keys().map(|r| r.to_string()).collect();
    let mut cfg = crate::run::config(
        common,
        policy,
        vec![format!(
            "huddle node on {host}: ranks {} of board {}",
            ranks.join(","),
            board_path.display()
        )],
        machine,
    );
    cfg.max_seconds = args.seconds;
    cfg.ownership = run::Ownership::Attached;
    // Other jobs' node managers on this machine keep their CPUs (see manager::claims).
    let claims_dir = Path::new(manager::claims::DEFAULT_DIR);
    let mut claims_failed = None;
    match manager::claims::Claims::open(claims_dir) {
        Ok(c) => cfg.claims = Some(c),
        Err(e) => {
            claims_failed = Some(format!(
                "{}: {e}: this manager did not see which CPUs other huddle managers on this machine pin on",
                claims_dir.display()
            ))
        }
    }
    let (mut data, stop) = run::manage_until(&mut obs, &target, cfg);
    data.info.notes.extend(claims_failed);
    data.rank_matrix = obs.rank_matrix();
    let finished = obs.finished();
    let slots = obs.local_slots();
    drop(obs);
    crate::run::finish(common, &data);
    // Nobody writes the board any more once every rank on it is done: the node manager is
    // its reader, so it goes (the agent removes a default board at MPI_Finalize already; this
    // is for ranks that died, and boards named with HUDDLE_BOARD). Only the file we read.
    let all_done = Board::open(board_path)
        .and_then(|b| b.snapshot())
        .is_ok_and(|s| {
            s.ranks
                .iter()
                .all(|r| !(r.alive && r.state == simmer::board::SlotState::Running))
        });
    if finished && all_done && board_id.is_some() && file_id(board_path) == board_id {
        let _ = std::fs::remove_file(board_path);
    }
    let first_remap = data
        .decisions
        .iter()
        .find(|d| d.action == "migrate")
        .map(|d| d.t);
    let extra = serde_json::json!({
        "stop": match stop {
            run::Stop::Ended => "ranks ended".to_string(),
            run::Stop::TimeUp => "--seconds passed".to_string(),
            run::Stop::Signal(s) => detect::signals::name(s),
        },
        "attached_to": data.info.pid,
        "attached_to_command": root_command,
        "ranks": slots.iter().map(|r| serde_json::json!({
            "rank": r.rank,
            "pid": r.pid,
            "state": r.state,
            "alive": r.alive,
            "sent_bytes": r.sent_bytes,
        })).collect::<Vec<_>>(),
        "migrations": data.decisions.iter().filter(|d| d.action == "migrate").count(),
        "first_remap_s": first_remap,
        "duration_s": data.info.duration_s,
        "huddle_cpu_s": data.info.huddle_cpu_s,
    });
    let code = match stop {
        run::Stop::Signal(s) => {
            eprintln!(
                "huddle: {}: let go of the ranks on {host}, which run on (not signalled; affinity put back)",
                detect::signals::name(s)
            );
            128 + s
        }
        run::Stop::Ended | run::Stop::TimeUp => 0,
    };
    Ok((code, extra))
}

/// Options of `huddle run` that node managers take over (HUDDLE_NODE_ARGS, split by the agent
/// on white space).
fn forwarded(c: &Common) -> anyhow::Result<Vec<String>> {
    let mut v: Vec<String> = vec![
        "--policy".into(),
        c.policy.clone(),
        "--threshold".into(),
        c.threshold.to_string(),
        "--block-size".into(),
        c.block_size.to_string(),
        "--simmer-confidence".into(),
        c.simmer_confidence.to_string(),
        "--min-traffic".into(),
        c.min_traffic.to_string(),
        "--seed".into(),
        c.seed.to_string(),
        "--page-budget".into(),
        c.page_budget.to_string(),
    ];
    if c.move_pages {
        v.push("--move-pages".into());
    }
    if c.processes {
        v.push("--processes".into());
    }
    if let Some(p) = &c.pus {
        v.extend(["--pus".into(), p.clone()]);
    }
    if let Some(s) = &c.source {
        v.extend(["--source".into(), s.clone()]);
    }
    if let Some(bad) = v
        .iter()
        .find(|a| a.is_empty() || a.contains(char::is_whitespace))
    {
        return Err(bad_input(format!(
            "--node-managers: option value '{bad}' is empty or has white space, which cannot be passed on to the node managers"
        )));
    }
    Ok(v)
}

/// Whether `resolved` (a canonical path) is an MPI launcher rather than an MPI program.
fn is_launcher(resolved: &Path) -> bool {
    resolved
        .file_name()
        .is_some_and(|n| agent_abi::is_mpi_launcher(n.as_encoded_bytes()))
}

/// Whether `resolved` (a canonical path) is Slurm's srun, which starts the program itself on
/// every node of the allocation.
fn is_srun(resolved: &Path) -> bool {
    resolved.file_name().is_some_and(|n| n == "srun")
}

/// Where the program is on an srun command line: the first argument that is no option and
/// names an executable file (srun's option values given apart, such as the 2 of `-N 2`, name
/// no such file).
fn srun_program(rest: &[OsString]) -> Option<(usize, PathBuf)> {
    rest.iter().enumerate().find_map(|(i, a)| {
        if a.as_encoded_bytes().starts_with(b"-") {
            return None;
        }
        let p = detect::resolve_program(a).and_then(|p| std::fs::canonicalize(p).ok())?;
        p.is_file().then_some((i, p))
    })
}

/// srun passes the whole environment on to the ranks (`--export=ALL`, its default), so
/// nothing is added then. With `--export=NONE` or a list of variables (as an option, or
/// SLURM_EXPORT_ENV without one, which srun reads in its place) `vars` are added to what it
/// passes. Returns the arguments, and SLURM_EXPORT_ENV's new value where that needs one.
fn srun_exports(rest: &[OsString], vars: &[&str]) -> (Vec<OsString>, Option<String>) {
    let widen = |v: &str| -> Option<String> {
        let v = v.trim();
        if v == "ALL" || v.starts_with("ALL,") {
            None
        } else if v == "NONE" || v == "NIL" || v.is_empty() {
            Some(vars.join(","))
        } else {
            Some(format!("{v},{}", vars.join(",")))
        }
    };
    // srun's own options: the arguments before the program.
    let end = srun_program(rest).map_or(rest.len(), |(i, _)| i);
    let mut out: Vec<OsString> = Vec::new();
    let mut found = false;
    let mut i = 0;
    while i < end {
        let a = rest[i].to_string_lossy();
        if let Some(v) = a.strip_prefix("--export=") {
            found = true;
            out.push(widen(v).map_or_else(|| rest[i].clone(), |w| format!("--export={w}").into()));
        } else if a == "--export" && i + 1 < end {
            found = true;
            out.push(rest[i].clone());
            i += 1;
            let v = rest[i].to_string_lossy();
            out.push(widen(&v).map_or_else(|| rest[i].clone(), OsString::from));
        } else {
            out.push(rest[i].clone());
        }
        i += 1;
    }
    out.extend(rest[i..].iter().cloned());
    let env = (!found)
        .then(|| std::env::var("SLURM_EXPORT_ENV").ok())
        .flatten()
        .and_then(|v| widen(&v));
    (out, env)
}

/// The launcher's arguments with `-x VAR` for each of `vars` first: Open MPI passes only
/// those to ranks on other nodes (MPICH's hydra passes the whole environment already).
fn with_exports(rest: &[OsString], vars: &[&str]) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    for v in vars {
        out.push("-x".into());
        out.push((*v).into());
    }
    out.extend(rest.iter().cloned());
    out
}

/// `huddle run --node-managers -- CMD`: the ranks preload the PMPI agent and start a node
/// manager on every node; this process launches CMD, passes signals on, and waits for the
/// node reports. Returns CMD's exit status.
pub fn launch(args: crate::run::RunArgs) -> anyhow::Result<i32> {
    crate::agent::remove_leftovers();
    let c = &args.common;
    let (program, rest) = args.command.split_first().expect("clap requires a command");
    let Some(resolved) =
        detect::resolve_program(program).and_then(|p| std::fs::canonicalize(p).ok())
    else {
        return Err(crate::exit::Exit {
            code: 127,
            message: format!("{}: command not found", program.to_string_lossy()),
        }
        .into());
    };
    if let Some(s) = &c.source {
        if SourceMode::parse(s).map_err(bad_input)? == SourceMode::Faults {
            return Err(bad_input(
                "--node-managers --source faults: node managers find the ranks on the PMPI agent's board; use --source both or mpi",
            ));
        }
    }
    let srun = is_srun(&resolved);
    let flavour = if srun {
        srun_program(rest)
            .and_then(|(_, p)| crate::agent::mpi_flavour(&p))
            .ok_or_else(|| {
            bad_input(
                "--node-managers: srun starts no program linked with a libmpi huddle recognises (Open MPI or MPICH)",
            )
        })?
    } else {
        crate::agent::mpi_flavour(&resolved).ok_or_else(|| {
            bad_input(format!(
                "--node-managers: {} is no MPI launcher and links no libmpi huddle recognises",
                resolved.display()
            ))
        })?
    };
    // Bytes alone unless the policy is simmer, as under `huddle run` (docs/pmpi.md).
    let timesplit = c.policy == "simmer";
    let lib = crate::agent::pmpi_library_for(flavour, !timesplit).map_err(bad_input)?;
    let node_args = forwarded(c)?;
    // The options the node managers will run with, checked here once rather than on every
    // node (`simmer` with the name of a board: each node manager reads its node's own).
    crate::run::check(c, None, Some(std::path::Path::new("node-board")))?;
    let report = crate::run::report_dir(c)?;
    let report_abs = report
        .as_ref()
        .map(|r| std::fs::canonicalize(&r.path))
        .transpose()?;
    let huddle = std::env::current_exe()?;
    crate::agent::preload(&lib);
    std::env::set_var("HUDDLE_NODE", "1");
    std::env::set_var("HUDDLE_BIN", &huddle);
    std::env::set_var("HUDDLE_NODE_ARGS", node_args.join(" "));
    let mut vars = vec![
        "LD_PRELOAD",
        "HUDDLE_NODE",
        "HUDDLE_BIN",
        "HUDDLE_NODE_ARGS",
        "HUDDLE_RANK_MATRIX",
    ];
    if !timesplit {
        std::env::set_var("HUDDLE_PMPI_TIMESPLIT", "0");
        vars.push("HUDDLE_PMPI_TIMESPLIT");
    }
    // Whether a node sees the report directory: the marker with this job's random token in
    // it. A node that does not find it (no shared file system, or one that shows the
    // directory late) hands its report over through the launcher's stderr instead; a marker
    // of another job can never pass for this one's. Found by mistake on a shared directory,
    // the report still arrives, only the longer way.
    let token = match &report_abs {
        Some(dir) => {
            let token = relay::new_token()?;
            let marker = dir.join(relay::launch_marker(&token));
            std::fs::write(&marker, b"")
                .map_err(|e| bad_input(format!("{}: cannot write: {e}", marker.display())))?;
            std::env::set_var(relay::TOKEN_VAR, &token);
            vars.push(relay::TOKEN_VAR);
            Some(token)
        }
        None => {
            std::env::remove_var(relay::TOKEN_VAR);
            None
        }
    };
    match &report_abs {
        Some(dir) => {
            std::env::set_var("HUDDLE_NODE_REPORT", dir);
            std::env::set_var("HUDDLE_RANK_MATRIX", dir.join("rank-matrix.csv"));
            vars.push("HUDDLE_NODE_REPORT");
        }
        None => {
            std::env::remove_var("HUDDLE_NODE_REPORT");
            // No report: no rank matrix left on whichever node rank 0 runs.
            std::env::set_var("HUDDLE_RANK_MATRIX", "none");
        }
    }
    if std::env::var_os("HUDDLE_BOARD").is_some() {
        vars.push("HUDDLE_BOARD");
    }
    let argv = if srun {
        let (argv, env) = srun_exports(rest, &vars);
        if let Some(v) = env {
            std::env::set_var("SLURM_EXPORT_ENV", v);
        }
        argv
    } else if flavour == "openmpi" && is_launcher(&resolved) {
        with_exports(rest, &vars)
    } else {
        rest.to_vec()
    };
    detect::signals::install_forwarding();
    // Node managers of this job start after this (less a margin for clocks of other nodes).
    let launched = unix_now() - 5.0;
    let mut cmd = std::process::Command::new(program);
    cmd.args(&argv);
    // Node reports may come as framed lines among the ranks' output: the launcher's stderr
    // goes through `huddle relay` (crates/relay), a process of its own so that the launcher
    // keeps a reader, and the job its output, even if this huddle is killed.
    let relay = match (&token, &report_abs) {
        (Some(token), Some(dir)) => {
            let (read, write) = cloexec_pipe()?;
            let relay = start_relay(&huddle, token, dir, read)?;
            cmd.stderr(write);
            Some(relay)
        }
        _ => None,
    };
    let child = cmd.spawn();
    drop(cmd); // its copy of the pipe: the relay sees the end when the launcher's side closes
    let mut child =
        child.map_err(|e| anyhow::anyhow!("{}: cannot start: {e}", program.to_string_lossy()))?;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        let sig = detect::signals::take_forward();
        if sig != 0 {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(child.id() as libc::pid_t, sig) };
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut delivered = Vec::new();
    if let (Some((pid, done)), Some(dir), Some(token)) = (relay, &report_abs, &token) {
        // Everything the ranks wrote was forwarded before the launcher ended; a process that
        // still holds its stderr (a daemon of the launcher) is not waited for long.
        match done.recv_timeout(RELAY_DRAIN) {
            Ok(nodes) => delivered = nodes,
            Err(_) => eprintln!(
                "huddle: the launcher's stderr is still open {} s after it ended: node reports that come later are written by huddle relay (pid {pid}) when it closes",
                RELAY_DRAIN.as_secs()
            ),
        }
        let _ = std::fs::remove_file(dir.join(relay::launch_marker(token)));
    }
    if let Some(dir) = &report_abs {
        wait_for_nodes(dir, launched, Duration::from_secs(20), &delivered);
    }
    use std::os::unix::process::ExitStatusExt;
    Ok(status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1))
}

/// A pipe whose two ends are closed on exec (each child gets its end as a standard stream).
fn cloexec_pipe() -> anyhow::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two new descriptors into fds, which become owned here.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(anyhow::anyhow!(
            "cannot make a pipe for the launcher's stderr: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    })
}

/// Starts `huddle relay` on the read end of the launcher's stderr; gives its pid and where
/// its account of the node reports arrives once the stream has ended.
fn start_relay(
    huddle: &Path,
    token: &str,
    dir: &Path,
    read: std::os::fd::OwnedFd,
) -> anyhow::Result<(u32, std::sync::mpsc::Receiver<Vec<relay::NodeDelivery>>)> {
    let child = std::process::Command::new(huddle)
        .arg("relay")
        .arg("--token")
        .arg(token)
        .arg("--dir")
        .arg(dir)
        .stdin(read)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| anyhow::anyhow!("{}: cannot start huddle relay: {e}", huddle.display()))?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let nodes = child
            .wait_with_output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .filter_map(|l| serde_json::from_str(l).ok())
                    .filter_map(|v| relay::NodeDelivery::from_json(&v))
                    .collect()
            })
            .unwrap_or_default();
        let _ = tx.send(nodes);
    });
    Ok((pid, rx))
}

#[derive(clap::Args)]
pub struct RelayArgs {
    /// The job's token (HUDDLE_NODE_TOKEN)
    #[arg(long)]
    pub token: String,
    /// The job's report directory
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
}

/// `huddle relay` (started by `huddle run --node-managers --report DIR`): copies standard
/// input, the launcher's stderr, to standard error, rebuilds the node reports framed in it
/// under DIR, and at its end prints each node's account (delivery.json's form) on stdout.
pub fn relay(args: RelayArgs) -> anyhow::Result<i32> {
    // It ends when the stream closes; the terminal's signals are for the launcher.
    detect::signals::install_detach();
    let mut r = relay::Relay::new(&args.token, relay::Collector::new(&args.dir));
    relay::pump(std::io::stdin().lock(), &mut std::io::stderr(), &mut r);
    let collector = r.collector;
    if collector.bad_lines > 0 {
        eprintln!(
            "huddle: {} framed line(s) of node reports in the launcher's stderr were garbled (interleaved with other output?)",
            collector.bad_lines
        );
    }
    for e in &collector.write_errors {
        eprintln!("huddle: node report file not written: {e}");
    }
    let (nodes, job_files) = collector.finish();
    for (name, whole) in job_files {
        if !whole {
            eprintln!(
                "huddle: {name} arrived incomplete through the launcher's stderr: not written"
            );
        }
    }
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for n in nodes {
        let _ = writeln!(out, "{}", n.to_json());
    }
    Ok(0)
}

/// The node directories of a job report and the state each node.json gives ("stale": a node
/// manager that started before `since`, Unix seconds: an earlier job's).
fn node_states(dir: &Path, since: f64) -> Vec<(PathBuf, String)> {
    let mut out: Vec<(PathBuf, String)> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("node-"))
                .filter(|e| e.path().is_dir())
                .map(|e| {
                    let v = std::fs::read_to_string(e.path().join("node.json"))
                        .ok()
                        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
                    let state = match v {
                        Some(v) if v["started_unix"].as_f64().is_some_and(|t| t < since) => {
                            "stale".to_string()
                        }
                        Some(v) => v["state"].as_str().unwrap_or("starting").to_string(),
                        None => "starting".into(),
                    };
                    (e.path(), state)
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Waits (at most `limit`) until every node manager that reported into `dir` since `since`
/// (Unix seconds) has finished, then says where each node's report is and which way it came:
/// the shared file system, or the launcher's stderr (`delivered`, which are not waited for:
/// what came is all there is).
fn wait_for_nodes(dir: &Path, since: f64, limit: Duration, delivered: &[relay::NodeDelivery]) {
    let until = Instant::now() + limit;
    let via = |path: &Path| {
        delivered
            .iter()
            .find(|d| path.file_name().is_some_and(|n| *n == *d.node))
    };
    let node_states = |d: &Path| node_states(d, since);
    let mut nodes = node_states(dir);
    while nodes
        .iter()
        .any(|(p, s)| (s == "running" || s == "starting") && via(p).is_none())
        && Instant::now() < until
    {
        std::thread::sleep(Duration::from_millis(100));
        nodes = node_states(dir);
    }
    if nodes.is_empty() {
        eprintln!(
            "huddle: no node manager reported into {} (did the ranks start with the PMPI agent?)",
            dir.display()
        );
        return;
    }
    for (path, state) in nodes {
        let way = match via(&path) {
            Some(d) if d.handed_over.is_none() && !path.join("node.json").is_file() => {
                eprintln!(
                    "huddle: node report of {} did not arrive: its ranks said at start it would come through the launcher's stderr, and ended without handing it over (killed?)",
                    path.display()
                );
                continue;
            }
            Some(d) if !d.complete() => {
                let lost = if d.lost.is_empty() {
                    "its end".to_string()
                } else {
                    d.lost.join(", ")
                };
                eprintln!(
                    "huddle: node report in {} arrived incomplete through the launcher's stderr (lost: {lost})",
                    path.display()
                );
                "through the launcher's stderr"
            }
            Some(_) => "through the launcher's stderr",
            None => "shared file system",
        };
        match state.as_str() {
            "done" => eprintln!("huddle: node report in {} ({way})", path.display()),
            "failed" => eprintln!(
                "huddle: node manager failed, see {}",
                path.join("node.log").display()
            ),
            "stale" => eprintln!(
                "huddle: {} is an earlier job's: no node manager of this job reported there",
                path.display()
            ),
            _ => match via(&path).and_then(|d| d.handed_over.as_ref()) {
                Some((_, manager)) => eprintln!(
                    "huddle: node manager of {} had not finished when its ranks handed the report over (it was {}): its report is missing",
                    path.display(),
                    if manager == "gone" { "dead: killed?" } else { manager }
                ),
                None => eprintln!(
                    "huddle: node manager of {} did not finish within {} s (killed?): its report is missing",
                    path.display(),
                    limit.as_secs()
                ),
            },
        }
    }
    match crate::report::render_job(dir) {
        Ok(page) => eprintln!("huddle: job report in {}", page.display()),
        Err(e) => eprintln!("huddle: job page not written: {e:#}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launchers_are_told_from_programs() {
        assert!(is_launcher(Path::new("/usr/bin/orterun")));
        assert!(is_launcher(Path::new("/usr/bin/mpiexec.hydra")));
        assert!(is_launcher(Path::new("/usr/bin/mpirun.openmpi")));
        assert!(!is_launcher(Path::new("/work/build/mpi/openmpi/traffic")));
    }

    #[test]
    fn srun_passes_the_variables_on() {
        let words = |s: &str| s.split_whitespace().map(OsString::from).collect::<Vec<_>>();
        let exports = |s: &str| srun_exports(&words(s), &["A", "B"]).0;
        // The default (ALL) and ALL with more: unchanged.
        for s in ["-N 2 /bin/sh --export=X", "--export=ALL,X=1 -n 8 /bin/sh"] {
            assert_eq!(exports(s), words(s));
        }
        assert_eq!(
            exports("--export=NONE -n 8 /bin/sh"),
            words("--export=A,B -n 8 /bin/sh")
        );
        // A list, given apart; the program's own arguments are left alone.
        assert_eq!(
            exports("-n 8 --export X,Y=1 -l /bin/sh --export=Z"),
            words("-n 8 --export X,Y=1,A,B -l /bin/sh --export=Z")
        );
        let at = |s: &str| srun_program(&words(s)).map(|(i, _)| i);
        assert_eq!(at("-N 2 --mpi=pmix sh -c x"), Some(3));
        assert_eq!(at("-N 2 ./no-such-program"), None);
        assert!(is_srun(Path::new("/usr/bin/srun")));
        assert!(!is_srun(Path::new("/usr/bin/sruns")));
    }

    #[test]
    fn exports_come_before_the_launcher_arguments() {
        let rest: Vec<OsString> = vec!["-np".into(), "4".into(), "./a".into()];
        let out = with_exports(&rest, &["A", "B"]);
        let out: Vec<&str> = out.iter().map(|s| s.to_str().unwrap()).collect();
        assert_eq!(out, ["-x", "A", "-x", "B", "-np", "4", "./a"]);
    }
}
