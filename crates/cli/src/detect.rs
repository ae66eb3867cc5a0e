//! `huddle detect`: run a program under communication detection and write its matrix,
//! task table and periodic snapshots (CSV and JSON; schema in docs/detect.md).

use crate::exit::{bad_input, start_error};
use detect::document::{self, Document, Snapshot};
use detect::{AgentConfig, Config, Granularity, Session, Target};
use manager::observe::Detected;
use manager::observer::Observer;
use manager::run::{wait_interval, Ownership};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
#[command(
    long_about = "Run CMD with communication detection (CDSM-style page-fault \
    sharing, see docs/detect.md) and write the N x N symmetric matrix over its tasks \
    (threads, or processes with --processes), in the order they appeared. The program's \
    results are unchanged; its exit status is passed on (128+N when killed by signal N; \
    127 when CMD is not found). If it crashes, the matrix so far is still written. \
    SIGUSR1 sent to huddle pauses the agent's re-arming (only first touches are seen \
    then), SIGUSR2 resumes it."
)]
pub struct Args {
    /// Matrix CSV; the task table goes to OUT.tasks.csv and everything as JSON to OUT.json.
    /// Its directory must exist; all three are checked for writing before CMD starts
    #[arg(long, value_name = "FILE", default_value = "detect-matrix.csv")]
    pub out: PathBuf,
    /// Also print the JSON document (schema huddle.detect/1) on stdout
    #[arg(long)]
    pub json: bool,
    /// Memory block size in bytes (power of two, 8..1048576; CDSM uses 256)
    #[arg(long, value_name = "B", default_value_t = 256)]
    pub block_size: u64,
    /// Snapshot period in milliseconds
    #[arg(long, value_name = "T", default_value_t = 1000)]
    pub interval_ms: u64,
    /// Write every snapshot as DIR/snapshot-NNNN.csv (and all in DIR/snapshots.json): an
    /// existing writable directory, or one huddle creates in an existing parent
    #[arg(long, value_name = "DIR")]
    pub snapshots: Option<PathBuf>,
    /// One row per process instead of per thread
    #[arg(long)]
    pub processes: bool,
    /// Keep every task in the matrix (default: drop tasks with less than --min-share of the
    /// median task's communication, e.g. a launcher thread; they stay in the task table).
    /// Shares are of the counts as seen, before the start's counts are scaled down to the
    /// steady re-arm rate
    #[arg(long)]
    pub all_tasks: bool,
    /// See --all-tasks
    #[arg(long, value_name = "F", default_value_t = 0.1)]
    pub min_share: f64,
    /// Do not preload the agent: first-touch faults only
    #[arg(long)]
    pub no_agent: bool,
    /// Fraction of the program's mapped pages the agent re-arms per second (CDSM: 0.01)
    #[arg(long, value_name = "F", default_value_t = detect::DEFAULT_REARM_RATE)]
    pub rearm_rate: f64,
    /// Pages per second the agent re-arms at least (small programs have few pages) for the
    /// first 1.5 s and for 1 s after the pattern changed
    #[arg(long, value_name = "N", default_value_t = detect::DEFAULT_REARM_FLOOR)]
    pub rearm_floor: u32,
    /// Pages per second at least while the pattern holds; --rearm-rate falls by the same
    /// factor then, by 4 at most (each re-armed page costs the program tens of microseconds)
    #[arg(long, value_name = "N", default_value_t = detect::DEFAULT_STEADY_FLOOR)]
    pub steady_floor: u32,
    /// Do not re-arm private memory (heap, static arrays, anonymous mmaps; userfaultfd): it
    /// keeps its transparent huge pages, which the agent's 4-KiB re-arming takes away; only
    /// shared memory is watched then
    #[arg(long)]
    pub no_private: bool,
    /// Where the matrix comes from: faults (page faults), mpi (the PMPI agent's exact byte
    /// counts between MPI ranks), both (MPI between ranks, page faults inside a rank).
    /// Default: both for an MPI launcher or a binary linking libmpi (the agent is preloaded
    /// into the ranks, and the rank matrix goes to OUT.ranks.csv), faults otherwise
    #[arg(long, value_name = "SOURCE")]
    pub source: Option<String>,
    /// With --source both, record page faults between ranks too (to compare with the PMPI
    /// agent's counts); by default a rank's faults are kept only while two of its threads
    /// are busy, since MPI counts what ranks exchange
    #[arg(long)]
    pub faults_between_ranks: bool,
    /// Sharer-table slots (power of two; 40 bytes each)
    #[arg(long, value_name = "N", default_value_t = 1 << 20)]
    pub table_slots: usize,
    /// The program and its arguments
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// The matrix over session rows `rows`, merged with the MPI ranks' traffic where there is
/// any (symmetric), each cell's source and each row's MPI rank (MPI programs only).
fn merged(d: &Detected, rows: &[usize]) -> Merged {
    let (matrix, _) = d.snapshot_of(rows);
    Merged {
        matrix: matrix.symmetrized(),
        cell_sources: d.cell_sources_of(rows),
        row_mpi_ranks: d.mpi.as_ref().map(|_| d.mpi_ranks_of(rows)),
    }
}

/// What [`merged`] gives.
struct Merged {
    matrix: matrix::CommMatrix,
    cell_sources: Option<Vec<Vec<&'static str>>>,
    row_mpi_ranks: Option<Vec<Option<usize>>>,
}

/// `rows` plus the rows of the ranks' MPI threads (whose traffic page faults may not show).
fn with_rank_threads(d: &Detected, mut rows: Vec<usize>) -> Vec<usize> {
    let Some((m, _)) = &d.mpi else { return rows };
    let procs = m.ranks().0;
    let s = &d.session;
    let whole = s.granularity() == Granularity::Process;
    for (i, t) in s.tasks().iter().enumerate() {
        let mpi = procs.iter().any(|p| p.is_mpi(t.pid, t.tid, whole));
        if !t.agent && mpi && !rows.contains(&i) {
            rows.push(i);
        }
    }
    rows.sort_unstable();
    rows
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Sharer-table slots: a power of two from 1024, whose table (`SLOT_BYTES` a slot) fits in a
/// quarter of the machine's memory.
fn check_table_slots(slots: usize) -> anyhow::Result<()> {
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(u64::MAX, |kib| kib * 1024);
    let most = (mem / 4 / detect::sharers::SLOT_BYTES as u64).min(1 << 40);
    if !slots.is_power_of_two() || slots < 1024 || slots as u64 > most {
        return Err(bad_input(format!(
            "--table-slots {slots}: must be a power of two from 1024 to {} ({} bytes each, at most a quarter of this machine's memory)",
            1u64 << (63 - most.leading_zeros()),
            detect::sharers::SLOT_BYTES
        )));
    }
    Ok(())
}

/// The agent's re-arm floors (pages per second): at most a million each.
pub fn check_floors(floor: u32, steady: u32) -> anyhow::Result<()> {
    const MOST: u32 = 1_000_000;
    if floor > MOST || steady > MOST {
        return Err(bad_input(format!(
            "--rearm-floor {floor} / --steady-floor {steady}: at most {MOST} pages per second"
        )));
    }
    Ok(())
}

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let stem = p.with_extension("");
    PathBuf::from(format!("{}{suffix}", stem.display()))
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    detect::signals::install_pause();
    crate::agent::remove_leftovers();
    if !(args.rearm_rate.is_finite() && (0.0..=1.0).contains(&args.rearm_rate)) {
        return Err(bad_input(format!(
            "--rearm-rate {}: must be between 0 and 1",
            args.rearm_rate
        )));
    }
    if args.interval_ms == 0 {
        return Err(bad_input("--interval-ms must be at least 1"));
    }
    if !(args.min_share.is_finite() && args.min_share >= 0.0) {
        return Err(bad_input(format!(
            "--min-share {}: must be a finite fraction, at least 0",
            args.min_share
        )));
    }
    check_table_slots(args.table_slots)?;
    check_floors(args.rearm_floor, args.steady_floor)?;
    // Every file the run ends with, checked before the program starts.
    crate::outputs::file("--out", &args.out)?;
    for derived in [
        with_suffix(&args.out, ".tasks.csv"),
        args.out.with_extension("json"),
    ] {
        crate::outputs::file("--out", &derived)?;
    }
    let agent = (!args.no_agent).then(|| AgentConfig {
        library: crate::agent::library(),
        rearm_rate: args.rearm_rate,
        rearm_floor: args.rearm_floor,
        steady_floor: args.steady_floor,
        interval_ms: detect::DEFAULT_AGENT_INTERVAL_MS,
        private_memory: !args.no_private,
        threads_only: false,
    });
    let agent = match agent {
        Some(a) if !a.library.is_file() => {
            eprintln!(
                "huddle: warning: agent library {} not found (set HUDDLE_AGENT); detecting first-touch faults only",
                a.library.display()
            );
            None
        }
        a => a,
    };
    let mut cfg = Config {
        block_size: args.block_size,
        table_slots: args.table_slots,
        granularity: if args.processes {
            Granularity::Process
        } else {
            Granularity::Thread
        },
        agent,
        ..Config::default()
    };
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| bad_input("no command given"))?;
    // Made last, once every other input is known good.
    let snapshots = args
        .snapshots
        .as_deref()
        .map(|d| crate::outputs::dir("--snapshots", d, 0o755))
        .transpose()?;
    let discard = |e: anyhow::Error| {
        if let Some(d) = &snapshots {
            d.discard_if_unused();
        }
        e
    };
    let mpi = crate::agent::mpi_setup(
        args.source.as_deref(),
        program,
        args.block_size,
        false,
        with_suffix(&args.out, ".ranks.csv"),
    )
    .map_err(discard)?;
    if mpi.is_some() {
        crate::outputs::file("--out", &with_suffix(&args.out, ".ranks.csv")).map_err(discard)?;
    }
    crate::run::configure_sources(
        &mut cfg,
        mpi.as_ref().map(|m| m.1),
        args.faults_between_ranks,
    );
    let target = Target::Spawn {
        program: program.clone(),
        args: rest.to_vec(),
    };
    let s = Session::start(target, &cfg)
        .map_err(start_error)
        .map_err(discard)?;
    for src in s.sources().iter().filter(|x| !x.active) {
        eprintln!("huddle: {}: {}", src.name, src.note);
    }
    let mut d = Detected {
        session: s,
        spawned: true,
        mpi,
    };
    // Ctrl-C reaches the target through the terminal and we stay to write the matrix;
    // signals sent to huddle alone are passed on. The wait is the manager's (one interval,
    // events drained as they come, signals and pauses handled), without its decisions.
    detect::signals::install_forwarding();
    let mut snaps = Vec::new();
    let min_share = if args.all_tasks { 0.0 } else { args.min_share };
    let snap_dir = args.snapshots.as_deref();
    let exit = loop {
        let (_, ended, _) = wait_interval(&mut d, Ownership::Launched, args.interval_ms);
        // The exit the wait reaped is the session's to give, with its shell status.
        if let (Some(_), Some(e)) = (ended, d.session.try_wait()) {
            break e;
        }
        snaps.push(snapshot(&d, min_share, snaps.len(), snap_dir)?);
    };
    // Everything still buffered, including records held back for ordering.
    d.flush();
    if let Some((m, _)) = &d.mpi {
        // Named by us, so the agent leaves it for a reader: nobody reads it after the run.
        let _ = std::fs::remove_file(m.path());
    }
    snaps.push(snapshot(&d, min_share, snaps.len(), snap_dir)?);
    let s = &d.session;
    let rows = if args.all_tasks {
        (0..s.tasks().len())
            .filter(|&i| !s.tasks()[i].agent)
            .collect()
    } else {
        with_rank_threads(&d, s.active_tasks(min_share))
    };
    let Merged {
        matrix: m,
        cell_sources,
        row_mpi_ranks,
    } = merged(&d, &rows);
    let tasks = s.tasks();
    write(&args.out, &m.to_csv())?;
    write(
        &with_suffix(&args.out, ".tasks.csv"),
        &document::tasks_csv(&tasks, &rows),
    )?;
    let stats = s.stats();
    let idle_agents = s.idle_agents();
    let huge_pages = s.huge_pages_note();
    let doc = Document {
        schema: document::SCHEMA,
        command: args
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        block_size: args.block_size,
        granularity: cfg.granularity,
        exit_status: exit.shell_status(),
        start_monotonic_ns: s.start_monotonic_ns(),
        rows: &rows,
        matrix: m.to_rows(),
        cell_sources,
        row_mpi_ranks,
        tasks: &tasks,
        sources: s.sources(),
        agent_notes: s.agent_notes(),
        stats: stats.clone(),
        snapshots: &snaps,
    };
    let json = serde_json::to_string_pretty(&doc)?;
    write(&args.out.with_extension("json"), &json)?;
    if let Some(d) = &args.snapshots {
        write(
            &d.join("snapshots.json"),
            &serde_json::to_string_pretty(&snaps)?,
        )?;
    }
    if args.json {
        println!("{json}");
    }
    // Under --source both the faults of single-threaded ranks are dropped (MPI counts what
    // they exchange): what must not go by silently is an empty matrix, not zero fault events.
    if m.total() == 0.0 {
        eprintln!(
            "huddle: warning: no communication detected ({} faults from {} tasks); the matrix is all zeros",
            stats.faults,
            tasks.len()
        );
    }
    for idle in &idle_agents {
        eprintln!("huddle: warning: {idle}");
    }
    if let Some(note) = &huge_pages {
        eprintln!("huddle: note: {note}");
    }
    if stats.perf_lost + stats.agent_dropped > 0 {
        eprintln!(
            "huddle: warning: {} perf records and {} agent records were lost",
            stats.perf_lost, stats.agent_dropped
        );
    }
    if let Some((m, _)) = &d.mpi {
        let (ranks, bytes) = m.seen();
        if ranks == 0 {
            eprintln!(
                "huddle: mpi: no rank wrote to the board (no MPI_Init with the PMPI agent preloaded); page faults alone"
            );
        } else {
            eprintln!(
                "huddle: mpi: {ranks} ranks counted {bytes} bytes sent (PMPI agent, exact) -> {}",
                with_suffix(&args.out, ".ranks.csv").display()
            );
        }
    }
    if !stats.page_mode_pids.is_empty() {
        let pids: Vec<String> = stats.page_mode_pids.iter().map(u32::to_string).collect();
        eprintln!(
            "huddle: note: the threads of process {} are paired by page, not by {}-byte block: they share pages but enter them at different blocks (docs/detect.md, page mode)",
            pids.join(", "),
            args.block_size
        );
        if let Some(edges) = stats.page_edges_note() {
            eprintln!("huddle: note: {edges} (docs/detect.md, page edges)");
        }
    }
    if let Some(proven) = stats.proven_note() {
        eprintln!("huddle: note: {proven} (docs/detect.md, page edges)");
    }
    // The helpers' CPU is part of the target's; the program's own is what is left.
    let cost = match stats.target_cpu_s {
        Some(t) if t - stats.agent_cpu_s > 0.0 => format!(
            "; detection CPU {:.2} s = {:.1} % of the program's",
            stats.detector_cpu_s + stats.agent_cpu_s,
            100.0 * (stats.detector_cpu_s + stats.agent_cpu_s) / (t - stats.agent_cpu_s)
        ),
        _ => String::new(),
    };
    let by_page = match stats.page_mode_pids.is_empty() {
        true => String::new(),
        false => format!(" ({} by page)", stats.page_comm_events),
    };
    eprintln!(
        "huddle: {} tasks in the matrix ({} seen), {} faults, {} communication events{by_page} -> {}{cost}",
        rows.len(),
        tasks.len(),
        stats.faults,
        stats.comm_events,
        args.out.display()
    );
    Ok(exit.shell_status())
}

fn snapshot(
    d: &Detected,
    min_share: f64,
    n: usize,
    dir: Option<&Path>,
) -> anyhow::Result<Snapshot> {
    let s = &d.session;
    let rows = with_rank_threads(d, s.active_tasks(min_share));
    let Merged {
        matrix: m,
        cell_sources,
        ..
    } = merged(d, &rows);
    if let Some(d) = dir {
        write(&d.join(format!("snapshot-{n:04}.csv")), &m.to_csv())?;
    }
    let st = s.stats();
    Ok(Snapshot {
        t_s: st.elapsed_s,
        rows,
        matrix: m.to_rows(),
        cell_sources,
        faults: st.faults,
        comm_events: st.comm_events,
    })
}
