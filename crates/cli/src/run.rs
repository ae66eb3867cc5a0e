//! `huddle run` and `huddle attach`: manage a program online.

use crate::exit::bad_input;
use manager::control::Controller;
use manager::mpi::{MpiTraffic, SourceMode};
use manager::observe::Detected;
use manager::run::{self, Config};
use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(clap::Args, Clone)]
pub struct Common {
    /// comm (map the detected communication continuously), static:ALGO (map once with ALGO:
    /// huddle, drb, greedy, treematch, scotch, compact, scatter, round-robin, random, identity),
    /// none (observe and report only), simmer (MPI programs: SIMMer's rules on the PMPI
    /// agent's per-rank metrics and the protocol-processing core; see docs/pmpi.md)
    #[arg(long, default_value = "comm", value_name = "POLICY")]
    pub policy: String,
    /// Migrate only when the predicted communication cost falls by at least this many percent
    #[arg(long, default_value_t = 5.0, value_name = "PERCENT")]
    pub threshold: f64,
    /// After a migration, move the task's memory to the NUMA node of its new PU (move_pages):
    /// the pages a thread was seen touching last, or with --processes a process's
    /// private memory. Only where the allowed PUs span several NUMA nodes
    #[arg(long)]
    pub move_pages: bool,
    /// Pages moved per task per interval with --move-pages (the rate limit)
    #[arg(long, default_value_t = 1024, value_name = "PAGES")]
    pub page_budget: usize,
    /// Only use these PUs (hwloc location syntax: pu:0-3, core:2, package:1.core:0, 0-3)
    #[arg(long, value_name = "LOCATION")]
    pub pus: Option<String>,
    /// Write the raw data and an HTML report (index.html) into DIR: an existing writable
    /// directory, or one huddle creates (mode 0700) in an existing parent; checked before
    /// the program starts
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
    /// Bytes per detection block (power of two)
    #[arg(long, default_value_t = 256, value_name = "BYTES")]
    pub block_size: u64,
    /// Pages per second the agent re-arms at least for the first 1.5 s and for 1 s after the
    /// pattern changed (as in `huddle detect`)
    #[arg(long, default_value_t = detect::DEFAULT_REARM_FLOOR, value_name = "N")]
    pub rearm_floor: u32,
    /// Pages per second at least while the pattern holds; the 1 % rate falls by the same
    /// factor then, by 4 at most
    #[arg(long, default_value_t = detect::DEFAULT_STEADY_FLOOR, value_name = "N")]
    pub steady_floor: u32,
    /// Do not re-arm private memory (heap, static arrays, anonymous mmaps): it keeps its
    /// transparent huge pages, which the agent's 4-KiB re-arming takes away; only shared
    /// memory is watched then (as in `huddle detect`)
    #[arg(long)]
    pub no_private: bool,
    /// Treat each process, not each thread, as one task (for multi-process programs)
    #[arg(long)]
    pub processes: bool,
    /// --policy simmer: act on a rule's decision from this confidence on (0..1)
    #[arg(long, default_value_t = 0.6, value_name = "C")]
    pub simmer_confidence: f64,
    /// Communication events needed before a decision (first-touch noise guard); at least 4
    /// per busy task in any case
    #[arg(long, default_value_t = manager::decide::DEFAULT_MIN_TRAFFIC, value_name = "EVENTS")]
    pub min_traffic: f64,
    /// Where the matrix comes from: faults (page faults), mpi (the PMPI agent's exact byte
    /// counts between MPI ranks), both (MPI between ranks, page faults inside a rank).
    /// Default: both when the command is an MPI launcher (mpirun, mpiexec of Open MPI or
    /// MPICH) or a binary linking libmpi, whose PMPI agent is then preloaded into the ranks;
    /// faults otherwise
    #[arg(long, value_name = "SOURCE")]
    pub source: Option<String>,
    /// With --source both, record page faults between ranks too (matrix-faults.csv then
    /// holds them, to compare with the PMPI agent's counts); by default a rank's faults are
    /// kept only while two of its threads are busy, since MPI counts what ranks exchange
    #[arg(long)]
    pub faults_between_ranks: bool,
    /// Seed of the mapping algorithms
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// No live status line on stderr
    #[arg(long)]
    pub quiet: bool,
    #[command(flatten)]
    pub machine: crate::machine_args::MachineArgs,
}

/// `huddle run --watch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Watch {
    /// Asleep while the matrix cannot change a placement (flat machines).
    Auto,
    /// Watch throughout.
    Always,
}

#[derive(clap::Args)]
#[command(
    long_about = "Launch a program and manage it online: detect which of its threads and \
    processes communicate (page faults, with the agent preloaded for extra faults), map them \
    onto the machine so that partners share caches, and pin them (sched_setaffinity on every \
    thread; with --processes on every thread of each process) whenever the predicted \
    communication cost falls by at least the threshold and the previous tick's proposal, \
    costed on the new matrix, would gain that too (the tick after a proposal comes 50 ms \
    later). The interval adapts (100 ms, +50 ms while stable, halved after a change, \
    50 ms..2 s) and the matrix ages after each migration (M -= M >> 2). A task that used \
    under 2 % of a CPU over \
    the last second (a main thread waiting for its workers) is left out of the mapping and \
    keeps its PUs, so that it takes no PU's share of the balance. Returns the program's exit \
    status; SIGINT and SIGTERM sent to huddle are passed on; SIGUSR1 pauses the agent's extra faults and \
    SIGUSR2 resumes them. If huddle is killed the program runs on.\n\n\
    On a machine whose PUs are all equally far apart (one shared cache, no SMT, as on small \
    VMs), two tasks or more running, no more of them than PUs, are pinned where they run as \
    soon as they are seen (a lone one is not: what it starts would inherit its PU), and the \
    agent sleeps while they are no more than the PUs (--watch)."
)]
pub struct RunArgs {
    #[command(flatten)]
    pub common: Common,
    /// Do not preload the agent (only first-touch faults are seen)
    #[arg(long)]
    pub no_agent: bool,
    /// When the agent watches. auto: on a machine whose PUs are all equally far apart (one
    /// shared cache, no SMT: no placement of one task per PU costs less than another) it
    /// sleeps, registering no more memory and re-arming nothing, once no more tasks than PUs
    /// have run for 0.3 s, and wakes when they outnumber the PUs; elsewhere, and with
    /// --policy none, it always watches. always: it always watches
    #[arg(long, value_enum, default_value = "auto", value_name = "WHEN")]
    pub watch: Watch,
    /// MPI jobs over several nodes: a node manager (`huddle node`) on every node with ranks,
    /// started by the job's first rank there, maps that node's ranks; this huddle only
    /// launches, forwards signals and, with --report, waits for each node's report in
    /// DIR/node-HOST/: written there by nodes that share DIR, and handed over through the
    /// launcher's stderr by nodes that do not (huddle then reads that stderr through a pipe
    /// and passes the job's own lines on unchanged) (docs/cluster.md). Also on when
    /// HUDDLE_NODE=1 is in the environment
    #[arg(long)]
    pub node_managers: bool,
    /// The program and its arguments
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

#[derive(clap::Args)]
#[command(
    long_about = "Manage a program that is already running: like `huddle run`, but the \
    agent cannot be preloaded, so only first-touch faults of new memory are seen. The process \
    and every process below it (an mpirun and its ranks) are followed, with all their threads; \
    tasks started later are picked up too. Tasks are only placed on the CPUs the program may \
    already run on (the union of its threads' affinity masks, which the kernel keeps inside \
    their cpuset). MPI ranks that already run with the PMPI agent preloaded write a board in \
    huddle's board directory: attach finds it by the ranks' pids and merges their exact \
    traffic as `huddle run` does (--source). huddle only acts on processes its user may \
    ptrace.\n\n\
    huddle never signals the program it attached to. It lets go when the program ends, \
    after --seconds, or when huddle gets SIGINT, SIGTERM, SIGHUP or SIGQUIT (Ctrl-C, kill, \
    timeout, a closed terminal): it stops pinning, puts back the affinity mask of every \
    thread it pinned (threads the program started meanwhile that inherited a mask huddle \
    set get their process's mask from before; a mask the program set itself meanwhile \
    stays), closes its perf events, writes the report, and exits: 0 when the program ended \
    or --seconds passed, 128+N after signal N, 2 for bad input (checked before anything \
    is pinned). The program runs on, placed as it was before huddle came (pages moved with \
    --move-pages stay where they went). Only if huddle is killed outright (SIGKILL) does the \
    last placement stay."
)]
pub struct AttachArgs {
    #[command(flatten)]
    pub common: Common,
    /// Stop managing after this many seconds
    #[arg(long, value_name = "S")]
    pub seconds: Option<f64>,
    /// The process to manage
    pub pid: i32,
}

/// Pages whose owner is recorded with --move-pages (about 50 MB of table at most).
const PAGE_OWNERS_MAX: usize = 1 << 20;

pub(crate) fn detect_config(c: &Common, agent: bool) -> detect::Config {
    detect::Config {
        block_size: c.block_size,
        granularity: if c.processes {
            detect::Granularity::Process
        } else {
            detect::Granularity::Thread
        },
        agent: agent.then(|| detect::AgentConfig {
            library: crate::agent::library(),
            rearm_rate: detect::DEFAULT_REARM_RATE,
            rearm_floor: c.rearm_floor,
            steady_floor: c.steady_floor,
            interval_ms: detect::DEFAULT_AGENT_INTERVAL_MS,
            private_memory: !c.no_private,
            threads_only: false,
        }),
        // A thread's pages can only follow it if the detector records who touches them;
        // a whole process takes all its private memory along.
        page_owners: if c.move_pages && !c.processes {
            PAGE_OWNERS_MAX
        } else {
            0
        },
        ..detect::Config::default()
    }
}

/// What the detector records, by where the traffic between ranks comes from (`mode`: None
/// where the command is no MPI program, or --source faults).
/// - `--source mpi`: nothing reads page faults, so none are recorded (perf keeps only the
///   task records, for the task table) and the fault agent is not preloaded (docs/pmpi.md).
/// - `--source both`: the PMPI agent counts the traffic between ranks, so page faults only
///   matter inside a process: the fault agent re-arms only in ranks with two busy threads or
///   more (hybrid MPI + threads), and the detector drops the faults of a process with fewer
///   than two busy threads before any lookup (detect::active): in a single-threaded rank they
///   could find nothing and cost the rank time and huddle CPU. `faults_between_ranks` keeps
///   every fault in the detector, for comparing the two sources (matrix-faults.csv).
/// - Either way, where perf is refused the session lists the tasks from /proc and goes on.
pub(crate) fn configure_sources(
    cfg: &mut detect::Config,
    mode: Option<SourceMode>,
    faults_between_ranks: bool,
) {
    // The board carries the traffic between ranks even where perf is refused.
    cfg.tasks_from_proc = matches!(mode, Some(SourceMode::Mpi | SourceMode::Both));
    match mode {
        Some(SourceMode::Mpi) => {
            cfg.sampled = detect::perf::Sampled::TasksOnly;
            cfg.agent = None;
            cfg.page_owners = 0;
        }
        Some(SourceMode::Both) => {
            if let Some(a) = cfg.agent.as_mut() {
                a.threads_only = true;
            }
            cfg.within_process = !faults_between_ranks;
        }
        _ => {}
    }
}

/// Options checked, machine loaded, policy made. `cpus`: the OS CPUs the program may run on
/// when that is not huddle's own set (attach); the mapping uses only those.
/// Pages moved per task per interval at most (4 GiB of 4 KiB pages).
const MAX_PAGE_BUDGET: usize = 1 << 20;

/// Checks the options, loads the machine (restricted to `cpus`, the program's CPUs, where
/// given) and builds the policy; `board`: where the ranks' PMPI agent publishes, which
/// `--policy simmer` reads.
pub(crate) fn check(
    c: &Common,
    cpus: Option<&topology::CpuSet>,
    board: Option<&std::path::Path>,
) -> anyhow::Result<(mapping::Target, Box<dyn manager::policy::Policy>, String)> {
    if !(0.0..100.0).contains(&c.threshold) {
        return Err(bad_input(format!(
            "--threshold {}: must be at least 0 and below 100",
            c.threshold
        )));
    }
    if !(0.0..=1.0).contains(&c.simmer_confidence) {
        return Err(bad_input(format!(
            "--simmer-confidence {}: must be within 0..1",
            c.simmer_confidence
        )));
    }
    if !(c.min_traffic.is_finite() && c.min_traffic >= 0.0) {
        return Err(bad_input(format!(
            "--min-traffic {}: must be a finite number of events, at least 0",
            c.min_traffic
        )));
    }
    if !(1..=MAX_PAGE_BUDGET).contains(&c.page_budget) {
        return Err(bad_input(format!(
            "--page-budget {}: must be 1..{MAX_PAGE_BUDGET} pages",
            c.page_budget
        )));
    }
    crate::detect::check_floors(c.rearm_floor, c.steady_floor)?;
    let mut machine = c.machine.load()?;
    if let Some(cpus) = cpus {
        for pu in &mut machine.pus {
            pu.allowed = cpus.contains(pu.os_index);
        }
        if !machine.pus.iter().any(|p| p.allowed) {
            return Err(bad_input(format!(
                "the program may only run on CPUs {cpus}, none of which is in the machine model"
            )));
        }
    }
    let simmer = board.map(|b| manager::policy::SimmerInputs {
        board: b.to_path_buf(),
        machine: machine.clone(),
        min_confidence: c.simmer_confidence,
    });
    let policy = manager::policy::parse(&c.policy, c.seed, simmer).map_err(bad_input)?;
    let counts = machine.counts();
    let description = format!(
        "{} ({} PUs, {} cores, {} L3, {} NUMA nodes)",
        match &machine.source {
            topology::Source::System => "this machine".to_string(),
            topology::Source::Xml(p) => p.display().to_string(),
            topology::Source::Synthetic(d) => d.clone(),
        },
        counts.pu,
        counts.core,
        counts.l3,
        counts.numa
    );
    let mut target = mapping::Target::machine(machine);
    if let Some(loc) = &c.pus {
        target.restrict(loc).map_err(bad_input)?;
    }
    Ok((target, policy, description))
}

pub(crate) fn config(
    c: &Common,
    policy: Box<dyn manager::policy::Policy>,
    command: Vec<String>,
    machine: String,
) -> Config {
    Config {
        ownership: run::Ownership::Launched,
        policy,
        controller: Controller::new(c.threshold / 100.0),
        page_budget: if c.move_pages { c.page_budget } else { 0 },
        status_line: !c.quiet && std::io::stderr().is_terminal(),
        max_seconds: None,
        min_traffic: c.min_traffic,
        command,
        claims: None,
        machine_description: machine,
        agent_sleeps: false,
    }
}

/// The report directory, made ready before the program starts (see [`crate::outputs`]).
pub(crate) fn report_dir(c: &Common) -> anyhow::Result<Option<crate::outputs::OutDir>> {
    c.report
        .as_deref()
        .map(|d| crate::outputs::dir("--report", d, 0o700))
        .transpose()
}

/// Writes the report if asked. A failure is printed, not returned: `run` must still hand back
/// the program's own exit status.
pub(crate) fn finish(c: &Common, data: &report::RunData) {
    let Some(dir) = &c.report else { return };
    match data.save(dir).and_then(|()| report::render(dir)) {
        Ok(page) => eprintln!("huddle: report in {}", page.display()),
        Err(e) => eprintln!("huddle: report not written: {e}"),
    }
}

/// The SIMMer policy reads the board the PMPI agent of every rank writes: makes the board's
/// directory, and has the ranks write to `board` (and their rank matrix into the report).
fn publish_board(c: &Common, board: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(simmer::board::default_dir())?;
    std::env::set_var("HUDDLE_BOARD", board);
    if let Some(report) = &c.report {
        // The directory itself is made by report_dir before the program starts.
        std::env::set_var("HUDDLE_RANK_MATRIX", report.join("rank-matrix.csv"));
    } else {
        std::env::set_var("HUDDLE_RANK_MATRIX", crate::agent::scratch_rank_matrix());
    }
    Ok(())
}

pub fn run(args: RunArgs) -> anyhow::Result<i32> {
    if args.node_managers || std::env::var_os("HUDDLE_NODE").is_some_and(|v| v == "1") {
        return crate::node::launch(args);
    }
    detect::signals::install_pause();
    crate::agent::remove_leftovers();
    let (program, rest) = args.command.split_first().expect("clap requires a command");
    // A missing program is reported by the session below (exit 127, or 126 if not executable).
    if args.common.policy == "simmer" && detect::resolve_program(program).is_some() {
        crate::agent::preload(&crate::agent::pmpi_library(program).map_err(bad_input)?);
    }
    let board = (args.common.policy == "simmer").then(crate::agent::board_path);
    let (target, policy, machine) = check(&args.common, None, board.as_deref())?;
    if let Some(b) = &board {
        publish_board(&args.common, b)?;
    }
    let report = report_dir(&args.common)?;
    let discard = |e: anyhow::Error| {
        if let Some(r) = &report {
            r.discard_if_unused();
        }
        e
    };
    let mpi = crate::agent::mpi_setup(
        args.common.source.as_deref(),
        program,
        args.common.block_size,
        args.common.policy == "simmer",
        args.common
            .report
            .as_ref()
            .map_or_else(crate::agent::scratch_rank_matrix, |r| {
                r.join("rank-matrix.csv")
            }),
    )
    .map_err(discard)?;
    let mut cfg = detect_config(&args.common, !args.no_agent);
    configure_sources(
        &mut cfg,
        mpi.as_ref().map(|m| m.1),
        args.common.faults_between_ranks,
    );
    let session = detect::Session::start(
        detect::Target::Spawn {
            program: program.clone(),
            args: rest.to_vec(),
        },
        &cfg,
    )
    .map_err(crate::exit::start_error)
    .map_err(discard)?;
    detect::signals::install_forwarding();
    let command = args
        .command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut obs = Detected {
        session,
        spawned: true,
        mpi,
    };
    let data = run::manage(
        &mut obs,
        &target,
        Config {
            agent_sleeps: args.watch == Watch::Auto,
            ..config(&args.common, policy, command, machine)
        },
    );
    if let Some((m, _)) = &obs.mpi {
        // Named by us, so the agent leaves it for a reader: nobody reads it after the run.
        let _ = std::fs::remove_file(m.path());
    }
    if args.common.report.is_none() {
        let _ = std::fs::remove_file(crate::agent::scratch_rank_matrix());
    }
    finish(&args.common, &data);
    Ok(match (data.info.exit_code, data.info.exit_signal) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    })
}

pub fn attach(args: AttachArgs) -> anyhow::Result<i32> {
    // First: from here on SIGINT, SIGTERM, SIGHUP and SIGQUIT only make huddle let go.
    detect::signals::install_detach();
    detect::signals::install_pause();
    if args.common.policy == "simmer" {
        return Err(bad_input(
            "--policy simmer needs the PMPI agent preloaded into the ranks: start the program with `huddle run`",
        ));
    }
    let asked = args
        .common
        .source
        .as_deref()
        .map(SourceMode::parse)
        .transpose()
        .map_err(bad_input)?;
    if let Some(s) = args.seconds {
        if !(s.is_finite() && s > 0.0) {
            return Err(bad_input(format!(
                "--seconds {s}: must be a positive number of seconds"
            )));
        }
    }
    if args.pid <= 0 {
        return Err(bad_input(format!("{}: not a process id", args.pid)));
    }
    if !std::path::Path::new(&format!("/proc/{}", args.pid)).exists() {
        return Err(bad_input(format!("process {}: no such process", args.pid)));
    }
    if !manager::procs::ours(args.pid as u32) {
        return Err(bad_input(format!(
            "process {}: belongs to another user; huddle only manages processes of its own user",
            args.pid
        )));
    }
    // The program's CPUs, not huddle's: it may have been started under another affinity
    // mask or cpuset.
    let cpus = manager::actuate::tree_cpus(args.pid as u32);
    if cpus.is_empty() {
        return Err(bad_input(format!("process {}: no such process", args.pid)));
    }
    let (target, policy, machine) = check(&args.common, Some(&cpus), None)?;
    let report = report_dir(&args.common)?;
    // attach cannot preload the PMPI agent, but ranks that run with it write a board.
    let mpi = match asked {
        Some(SourceMode::Faults) => None,
        _ => {
            let tree = manager::procs::process_tree(args.pid as u32);
            match crate::agent::board_of_tree(&tree) {
                Some(board) => Some((
                    MpiTraffic::new(board, args.common.block_size),
                    asked.unwrap_or(SourceMode::Both),
                )),
                None => {
                    if asked.is_some() {
                        eprintln!(
                            "huddle: no PMPI board of process {}'s ranks in {} (attach cannot preload the agent; start the ranks with it, or the program with `huddle run`): page faults alone",
                            args.pid,
                            simmer::board::default_dir().display()
                        );
                    }
                    None
                }
            }
        }
    };
    let mut cfg = detect_config(&args.common, false);
    configure_sources(
        &mut cfg,
        mpi.as_ref().map(|m| m.1),
        args.common.faults_between_ranks,
    );
    let session = detect::Session::start(detect::Target::Attach(args.pid), &cfg).map_err(|e| {
        if let Some(r) = &report {
            r.discard_if_unused();
        }
        match e {
            detect::DetectError::NoSuchProcess(_) => bad_input(e),
            other => anyhow::Error::new(other),
        }
    })?;
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", args.pid)).unwrap_or_default();
    let mut obs = Detected {
        session,
        spawned: false,
        mpi,
    };
    let mut cfg = config(
        &args.common,
        policy,
        vec![format!("pid {} ({})", args.pid, comm.trim())],
        machine,
    );
    cfg.max_seconds = args.seconds;
    cfg.ownership = run::Ownership::Attached;
    let (data, stop) = run::manage_until(&mut obs, &target, cfg);
    // The perf events close here, before the report is written.
    drop(obs);
    finish(&args.common, &data);
    Ok(match stop {
        run::Stop::Signal(s) => {
            eprintln!(
                "huddle: {}: let go of process {}, which runs on (not signalled; affinity put back)",
                detect::signals::name(s),
                args.pid
            );
            128 + s
        }
        run::Stop::Ended | run::Stop::TimeUp => 0,
    })
}
