//! A detection session on one target: spawn or attach, poll events, read the matrix.

use crate::active::BusyProcesses;
use crate::agent_env;
pub use crate::agent_env::{private_base, remove_stale_private_dirs};
use crate::budget::Budget;
use crate::edges::{EdgeKey, PageEdges};
use crate::ids::{IdMap, IdSet};
use crate::owners::PageOwners;
use crate::perf::{self, PerfError, PerfSource, Record, Sampled};
use crate::procmaps::{self, Vma};
use crate::procs;
use crate::sharers::{mix, PageState, PageTable, SharerTable};
pub use crate::spawn::resolve_program;
use crate::spawn::{ExecFailed, HeldChild};
use agent_abi::ring::{self, RingView};
use matrix::CommMatrix;
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What to watch.
#[derive(Clone, Debug)]
pub enum Target {
    /// Run this program (searched in PATH when it has no '/') with these arguments.
    Spawn {
        /// Name or path of the program; also its `argv[0]`.
        program: OsString,
        /// The arguments after `argv[0]`.
        args: Vec<OsString>,
    },
    /// Watch a running process and the threads/children it creates from now on.
    Attach(i32),
}

/// Whether a row of the matrix is a thread or a whole process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Granularity {
    /// One row per thread, keyed by thread id.
    Thread,
    /// One row per process, keyed by process id; private memory then never pairs two rows.
    Process,
}

/// Default re-arm budget: CDSM's 1 % of the program's pages per second...
pub const DEFAULT_REARM_RATE: f64 = 0.01;
/// ... but at least this many pages per second while the pattern is new or changing
/// ([`crate::budget`]). On the 2-core VM, 300 kept every communicating pattern at 8 tasks at
/// r >= 0.93 and the phase-change delay at a median 0.2-0.3 s (a fixed 75: over 2 s in 4
/// of 7 runs). 600 finds the edges of a static decomposition sooner, at about 40 bisection
/// steps a second at 300: first correct remap within 1 s on bench/layouts' 8-thread rows
/// (c and f; halo, stencil, pipeline; 3-s `huddle run`, 8 alternating rounds, 2026-11-28)
/// in 44 of 48 runs against 34 of 48 at 300, median 0.51 s against 0.76 s. The extra 450
/// pages of the first 1.5 s cost the program tens of ms at 29-71 us a page, and layout-c
/// pipeline x8's detected r fell from 0.970 to 0.949 (the pairs found first run ahead;
/// docs/detect.md, "A start floor of 600 pages/s") ...
pub const DEFAULT_REARM_FLOOR: u32 = 600;
/// ... and this many once it holds: bench/detect measured one re-armed private page to cost
/// the ring workload 29-71 us of its time here, so a fixed 300 pages/s took about 2 %.
pub const DEFAULT_STEADY_FLOOR: u32 = 75;
/// While the pattern holds the rate falls with the floor, by this factor at most.
pub const MAX_RATE_CUT: f64 = 4.0;
/// Agent wake-up period (CDSM: 10 ms).
pub const DEFAULT_AGENT_INTERVAL_MS: u32 = 10;

/// The in-process agent (LD_PRELOAD) that makes pages fault again.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// Path of libhuddle_agent.so.
    pub library: PathBuf,
    /// Fraction of eligible pages re-armed per second (CDSM: 0.01).
    pub rearm_rate: f64,
    /// Re-armed pages per second at least (small programs have few pages) at the start and
    /// after the pattern changed ...
    pub rearm_floor: u32,
    /// ... and while it holds (see [`crate::budget`]).
    pub steady_floor: u32,
    /// Helper wake-up period (CDSM: 10 ms).
    pub interval_ms: u32,
    /// Also re-arm private anonymous memory (userfaultfd drop and restore; see the agent).
    pub private_memory: bool,
    /// Re-arm in a process only while two of its threads or more are busy: for MPI ranks,
    /// whose traffic between processes the PMPI agent counts (see the agent's busy module).
    pub threads_only: bool,
}

/// How a session detects. The default: 256-byte blocks, 2^20 table slots, 256 ring pages,
/// thread rows, no agent, no page owners, page faults sampled, system-wide perf events
/// unless HUDDLE_PERF_SCOPE=task.
#[derive(Clone, Debug)]
pub struct Config {
    /// Bytes per memory block (power of two; CDSM: 256).
    pub block_size: u64,
    /// Sharer-table slots (power of two; `sharers::SLOT_BYTES` each).
    pub table_slots: usize,
    /// Data pages per CPU ring buffer (power of two).
    pub ring_pages: usize,
    /// Open perf events per task even where system-wide ones are allowed (see crate::perf:
    /// per-task events cost context switches). Default: HUDDLE_PERF_SCOPE=task.
    pub per_task_perf: bool,
    /// Rows per thread or per process.
    pub granularity: Granularity,
    /// None: first-touch faults only.
    pub agent: Option<AgentConfig>,
    /// Record which task touches each page ([`PageOwners`]), for moving a thread's pages
    /// with it. Up to this many pages; 0: off.
    pub page_owners: usize,
    /// What perf samples: page faults (the default), or nothing but the task records, for a
    /// caller that takes communication from elsewhere (`--source mpi`).
    pub sampled: Sampled,
    /// Only sharing between threads of one process counts: another source counts the
    /// traffic between processes (`--source both`: the PMPI agent between MPI ranks). The
    /// faults of a process with fewer than two busy threads (see crate::active) then go no
    /// further than the page owners: no maps lookup, no sharer table.
    pub within_process: bool,
    /// Where perf events are refused (perf_event_paranoid 3 or 4, as Debian's and Ubuntu's
    /// kernels set it, for a user other than root): go on without page faults, the program's
    /// tasks listed from /proc every [`PROC_LIST_NS`]. For a caller with another source of
    /// traffic (the PMPI agent's board); without it the session fails to start.
    pub tasks_from_proc: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            block_size: 256,
            table_slots: 1 << 20,
            ring_pages: 256,
            per_task_perf: std::env::var("HUDDLE_PERF_SCOPE").is_ok_and(|v| v == "task"),
            granularity: Granularity::Thread,
            agent: None,
            page_owners: 0,
            sampled: Sampled::PageFaults,
            within_process: false,
            tasks_from_proc: false,
        }
    }
}

/// Why a session could not start.
#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    /// The program is not in PATH, or exec gave ENOENT; holds the name as given.
    #[error("{0}: command not found")]
    CommandNotFound(String),
    /// exec of the program failed otherwise.
    #[error("{program}: cannot execute: {err}")]
    Exec {
        /// The program as given.
        program: String,
        /// The error execve returned.
        err: std::io::Error,
    },
    /// [`Config::block_size`] is not a power of two in 8..=1 MiB; holds the value given.
    #[error("block size {0} is not a power of two between 8 and 1048576")]
    BlockSize(u64),
    /// [`AgentConfig::library`] is not a file; holds its path.
    #[error(
        "agent library {0} not found (build it with `cargo build -p agent` or set HUDDLE_AGENT)"
    )]
    AgentMissing(PathBuf),
    /// Attach: the pid is negative, or /proc lists no task of it.
    #[error("process {0} does not exist or cannot be read")]
    NoSuchProcess(i32),
    /// perf events could not be opened and no agent reports faults (attach never has one).
    #[error(
        "no event source works: {perf}; and no agent is loaded to report faults itself \
         (attach cannot preload it)"
    )]
    NoSource {
        /// Why perf failed (the [`PerfError`] message).
        perf: String,
    },
    /// A system call failed while starting (pipe, fork, the private directory), or an
    /// argument held a NUL byte.
    #[error("{what}: {err}")]
    Io {
        /// What was being done, with the path where there is one.
        what: String,
        /// The error it gave.
        err: std::io::Error,
    },
}

/// One task of the target: a thread (or a process at process granularity).
#[derive(Clone, Debug, Serialize)]
pub struct TaskInfo {
    /// Thread id; the process id at process granularity (the task's key either way).
    pub tid: u32,
    /// Process id.
    pub pid: u32,
    /// Name from /proc when first seen ("?" if unreadable), then from perf COMM records.
    pub comm: String,
    /// Milliseconds after the session started.
    pub first_seen_ms: f64,
    /// A perf EXIT record was seen for it (at process granularity, for its main thread).
    pub exited: bool,
    /// The agent's own helper thread: listed, never part of the matrix.
    pub agent: bool,
}

/// Counters for the manager and the report. The agent counters are summed over every agent
/// ring the session mapped, those of processes that ended included.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Stats {
    /// Wall-clock seconds since the session started (monotonic).
    pub elapsed_s: f64,
    /// Fault events of program tasks (agent helpers' left out), those the sharer table
    /// skipped while their process had one thread (or, with `Config::within_process`, fewer
    /// than two busy threads) included.
    pub faults: u64,
    /// Communication events (matrix increments, each pair counted once).
    pub comm_events: u64,
    /// The same counted by page, for private memory (see `page_mode_pids`).
    pub page_comm_events: u64,
    /// Processes whose threads the matrix pairs by page (see `Session::page_mode`).
    pub page_mode_pids: Vec<u32>,
    /// Probes of page edges (two threads entering pages at different offsets, edges.rs)
    /// with watchpoints.
    pub page_edges_probed: u64,
    /// Pages of those edges probed apart.
    pub page_edge_pages_apart: u64,
    /// Page edges found apart (false sharing on every page probed), and found shared.
    pub page_edges_apart: u64,
    /// See `page_edges_apart`.
    pub page_edges_shared: u64,
    /// Page events of edges found apart: taken back, or not counted.
    pub page_events_apart: u64,
    /// Page events on edges proven shared whose threads enter in different blocks: added
    /// to the block counts outside page mode (edges.rs).
    pub page_events_proven: u64,
    /// Why no page edge could be probed (no hardware watchpoints, no permission).
    pub watchpoints_refused: Option<String>,
    /// `faults / elapsed_s`.
    pub faults_per_s: f64,
    /// Records the kernel dropped (PERF_RECORD_LOST).
    pub perf_lost: u64,
    /// Agent records dropped because its ring was full.
    pub agent_dropped: u64,
    /// Bytes the sharer table reserves (`table_slots * SLOT_BYTES`, never more).
    pub table_bytes: usize,
    /// Sharer-table slots ([`Config::table_slots`] rounded up to a power of two).
    pub table_slots: usize,
    /// Sharer-table slots taken over by another block, whose history was dropped.
    pub table_evictions: u64,
    /// Pages of shared mappings the agents re-armed (PTE dropped).
    pub rearmed_shared: u64,
    /// Pages of private anonymous memory the agents re-armed (userfaultfd).
    pub rearmed_private: u64,
    /// Of `rearmed_private`, transparent huge pages re-armed whole (kept huge).
    pub rearmed_huge: u64,
    /// Faults on re-armed pages the agents resolved.
    pub agent_handled: u64,
    /// Re-arm or resolve calls of the agents that failed.
    pub agent_errors: u64,
    /// Pages eligible for re-arming: each agent's count at its last maps scan.
    pub candidate_pages: u64,
    /// Pages of file-backed private data (.data) the agents made re-armable at start.
    pub adopted_pages: u64,
    /// Private pages the agents found shared (the focus table).
    pub focus_shared: u64,
    /// Re-arms the agents gave the pages of `focus_shared`.
    pub focus_rearms: u64,
    /// Pages the page edges found apart that the agents heard of and keep out of their
    /// focus tables (see edges.rs and the agent's focus module).
    pub focus_apart: u64,
    /// Agent ring files mapped so far (one per process and exec, ended ones included).
    pub agents: usize,
    /// The program-wide re-arm floor now, pages/s (0 without an agent).
    pub rearm_floor: u64,
    /// Times a pattern change raised the floor after the start (0 without an agent).
    pub floor_boosts: u64,
    /// User + system CPU seconds of this process (the detector), from getrusage.
    pub detector_cpu_s: f64,
    /// CPU seconds of the agents' helper threads, inside the target.
    pub agent_cpu_s: f64,
    /// User + system CPU seconds of the spawned target and its reaped descendants, helpers
    /// included; None until [`Session::try_wait`] reaped it, and always for attach.
    pub target_cpu_s: Option<f64>,
}

impl Stats {
    /// What proven page edges added to the block counts, if anything (in page mode every
    /// page event counts anyway).
    pub fn proven_note(&self) -> Option<String> {
        (self.page_events_proven > 0 && self.page_mode_pids.is_empty()).then(|| {
            format!(
                "{} page events where two threads enter a page in different blocks counted with the blocks' (page edges proven shared by watchpoints)",
                self.page_events_proven
            )
        })
    }

    /// What the page-edge probes found (docs/detect.md, page edges), for notes; None while no
    /// process is in page mode.
    pub fn page_edges_note(&self) -> Option<String> {
        if self.page_mode_pids.is_empty() {
            return None;
        }
        Some(match &self.watchpoints_refused {
            Some(why) => format!(
                "page edges not probed ({why}): false sharing of pages counts as sharing"
            ),
            None => format!(
                "page edges probed {} times with watchpoints: {} pages apart, {} edges apart, {} shared (false sharing of pages: {} events not counted)",
                self.page_edges_probed,
                self.page_edge_pages_apart,
                self.page_edges_apart,
                self.page_edges_shared,
                self.page_events_apart
            ),
        })
    }
}

fn cpu_seconds(ru: &libc::rusage) -> f64 {
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Which sources run, and why others do not.
#[derive(Clone, Debug, Serialize)]
pub struct SourceStatus {
    /// What the source is, such as "perf page faults" or "agent (extra faults)".
    pub name: String,
    /// Whether it contributes fault events (the agent by causing them).
    pub active: bool,
    /// How it is set up, or why it is not active.
    pub note: String,
}

/// How the spawned target ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetExit {
    /// Exited with this status; an attached target counts as `Code(0)` once it is gone.
    Code(i32),
    /// Killed by this signal number.
    Signal(i32),
}

impl TargetExit {
    /// The status a shell would report: the code, or 128 + signal.
    pub fn shell_status(self) -> i32 {
        match self {
            TargetExit::Code(c) => c,
            TargetExit::Signal(s) => 128 + s,
        }
    }
}

struct AgentRing {
    view: RingView,
    base: *mut libc::c_void,
    len: usize,
}

impl Drop for AgentRing {
    fn drop(&mut self) {
        // SAFETY: base/len come from our mmap.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// No agent's part of the re-arm floor falls below this (pages per second).
const MIN_FLOOR_SHARE: u64 = 16;

/// A running detection. See the crate documentation for the calling pattern.
pub struct Session {
    /// Program-wide re-arm floor (pages/s) shared among the agents; 0 without an agent.
    agent_floor: u64,
    /// The configured re-arm rate (fraction of pages per second) and floor: the agents' rate
    /// is scaled by the floor now over this floor (see [`crate::budget`]).
    agent_rate: f64,
    agent_high_floor: u64,
    /// The counts of the start, taken at the high floor, were scaled to the low one.
    start_scaled: bool,
    /// Per task, what that scaling took off its total: `--min-share` judges a task by its
    /// unscaled total, else a task outside the workload that only counted at the start (a
    /// launcher) passes the share of a median the scaling lowered.
    scaled_away: Vec<u64>,
    /// Chooses that floor from how new the recent events are; None without an agent.
    budget: Option<Budget>,
    /// Re-arming paused in every agent (see [`Session::set_paused`]).
    paused: bool,
    /// Every agent dormant (see [`Session::set_dormant`]).
    dormant: bool,
    pid: i32,
    spawned: bool,
    exit: Option<TargetExit>,
    /// User + system CPU seconds of the spawned target and its waited-for descendants.
    target_cpu_s: Option<f64>,
    started: Instant,
    t0_ns: u64,
    shift: u32,
    granularity: Granularity,
    perf: Option<PerfSource>,
    /// With system-wide perf events: the program's processes, whose records are kept.
    tree: Option<IdSet>,
    /// Without perf ([`Config::tasks_from_proc`]): the program's root process and its tasks
    /// at the last listing, whose changes become task records.
    listing: Option<(u32, BTreeSet<procs::TaskId>)>,
    /// A pidfd of the program's main process, readable once it ended: `wait` returns then
    /// (system-wide perf rings do not hang up when the program's tasks exit). Closed once it
    /// fired; from then on `wait` waits at most ENDING_WAIT (the leader's exit is signalled
    /// before its last threads are gone and it can be reaped).
    pidfd: std::cell::Cell<i32>,
    ending: std::cell::Cell<bool>,
    dir: Option<PathBuf>,
    rings: HashMap<PathBuf, AgentRing>,
    /// The ring of each process with an agent.
    ring_of_pid: IdMap<PathBuf>,
    table: SharerTable,
    /// The same faults of private memory keyed by page (see [`Session::page_mode`]); None
    /// when blocks are pages already.
    pages: Option<PageTable>,
    /// Events the page table found, per task pair, as `counts`.
    page_counts: Vec<Vec<u64>>,
    /// Page events on edges proven shared whose entry offsets lie in different blocks, per
    /// task pair: what blocks miss of real sharing, counted with `counts` outside page mode.
    proven_counts: Vec<Vec<u64>>,
    page_events_proven: u64,
    /// Pairs that enter their pages at different offsets, and whether they share data
    /// across them (watchpoint probes; see edges.rs).
    edges: PageEdges,
    /// What each process's private faults gave by block and by page.
    granule_events: IdMap<Granules>,
    /// Live program threads (agent helpers not counted) per process, in thread granularity.
    threads_of_pid: IdMap<u32>,
    /// With `Config::within_process`: which processes have two threads at work.
    busy: Option<BusyProcesses>,
    owners: Option<PageOwners>,
    tasks: Vec<TaskInfo>,
    index: IdMap<usize>,
    counts: Vec<Vec<u64>>,
    maps: IdMap<CachedMaps>,
    generation: u64,
    /// CLOCK_MONOTONIC ns at the start of the current poll.
    poll_ns: u64,
    rings_scanned_ns: u64,
    faults: u64,
    comm_events: u64,
    agent_faults_seen: u64,
    sources: Vec<SourceStatus>,
    batch: Vec<(u64, Record)>,
}

/// A process's mappings as last read from /proc/PID/maps.
struct CachedMaps {
    read_ns: u64,
    read_generation: u64,
    /// The process's agent's `maps_changes` when read (None: no agent).
    agent_changes: Option<u64>,
    vmas: Option<Vec<Vma>>,
}

/// Mappings are read again when a fault falls outside them, or when older than this: reading
/// /proc/PID/maps at every poll cost more than the faults it keyed (and takes the target's
/// mmap lock). A mapping replaced in place is keyed by its old kind for at most this long.
const MAPS_MAX_AGE_NS: u64 = 500_000_000;
/// For a process whose agent says its maps text has not changed (the agent reads it every
/// second): re-reading every 500 ms was a third of huddle's CPU with 8 processes.
const AGENT_MAPS_MAX_AGE_NS: u64 = 4_000_000_000;
/// How long `wait` waits at most once the program's main process ended.
const ENDING_WAIT: Duration = Duration::from_millis(5);
/// New agent rings (processes started) are looked for at most this often.
const RING_SCAN_NS: u64 = 100_000_000;
/// Without perf, the program's tasks are listed from /proc this often (with the look for new
/// agent rings): a task that starts and ends between two listings is not seen.
pub const PROC_LIST_NS: u64 = RING_SCAN_NS;
/// How long a fault on private memory keeps counting in the sharer table (see fault). The
/// agent's focus re-arms a shared page every 50 ms to a few hundred ms (more pages than the
/// budget serves wait their turn); a uniform sample's previous fault on the same page is most
/// likely tens of seconds old at the default rate, from another phase of the program. 500 ms
/// lost most focus events when many pages waited (pipeline, 8 threads).
const PRIVATE_HISTORY_MS: u32 = 4000;
/// The page table has this share of the block table's slots (a page holds 16 blocks of 256 B).
const PAGE_TABLE_SHARE: usize = 16;
const PAGE_SHIFT: u32 = 12;
const PAGE_MASK: u64 = (1 << PAGE_SHIFT) - 1;
/// Page mode needs this many page events of the process, and blocks under 1 / RATIO of them.
const PAGE_MODE_MIN_EVENTS: u64 = 32;
const PAGE_MODE_RATIO: u64 = 5;

pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Session {
    /// Starts detection. For `Spawn`, the program is forked, held before exec while the
    /// perf events are opened on it, then exec'd with the agent preloaded (if configured).
    pub fn start(target: Target, cfg: &Config) -> Result<Session, DetectError> {
        if !cfg.block_size.is_power_of_two() || !(8..=1 << 20).contains(&cfg.block_size) {
            return Err(DetectError::BlockSize(cfg.block_size));
        }
        let mut s = Session {
            agent_floor: cfg.agent.as_ref().map_or(0, |a| a.rearm_floor as u64),
            agent_rate: cfg.agent.as_ref().map_or(0.0, |a| a.rearm_rate),
            agent_high_floor: cfg.agent.as_ref().map_or(0, |a| a.rearm_floor as u64),
            start_scaled: false,
            scaled_away: Vec::new(),
            budget: cfg
                .agent
                .as_ref()
                .map(|a| Budget::new(a.rearm_floor as u64, a.steady_floor as u64, monotonic_ns())),
            paused: false,
            dormant: false,
            pid: 0,
            spawned: false,
            exit: None,
            target_cpu_s: None,
            started: Instant::now(),
            t0_ns: monotonic_ns(),
            shift: cfg.block_size.trailing_zeros(),
            granularity: cfg.granularity,
            perf: None,
            tree: None,
            listing: None,
            pidfd: std::cell::Cell::new(-1),
            ending: std::cell::Cell::new(false),
            dir: None,
            rings: HashMap::new(),
            ring_of_pid: IdMap::default(),
            table: SharerTable::new(cfg.table_slots),
            pages: (cfg.block_size < 1 << PAGE_SHIFT)
                .then(|| PageTable::new((cfg.table_slots / PAGE_TABLE_SHARE).max(1024))),
            page_counts: Vec::new(),
            proven_counts: Vec::new(),
            page_events_proven: 0,
            edges: PageEdges::default(),
            granule_events: IdMap::default(),
            threads_of_pid: IdMap::default(),
            busy: cfg.within_process.then(BusyProcesses::default),
            owners: (cfg.page_owners > 0)
                .then(|| PageOwners::new(perf::page_size() as u64, cfg.page_owners)),
            tasks: Vec::new(),
            index: IdMap::default(),
            counts: Vec::new(),
            maps: IdMap::default(),
            generation: 0,
            poll_ns: 0,
            rings_scanned_ns: 0,
            faults: 0,
            comm_events: 0,
            agent_faults_seen: 0,
            sources: Vec::new(),
            batch: Vec::new(),
        };
        s.sources.push(SourceStatus {
            name: "hardware memory sampling (PEBS/IBS)".into(),
            active: false,
            note: hw_sampling_note(),
        });
        match target {
            Target::Spawn { program, args } => s.spawn(program, args, cfg)?,
            Target::Attach(pid) => s.attach(pid, cfg)?,
        }
        Ok(s)
    }

    fn spawn(
        &mut self,
        program: OsString,
        args: Vec<OsString>,
        cfg: &Config,
    ) -> Result<(), DetectError> {
        let name = program.to_string_lossy().into_owned();
        let path =
            resolve_program(&program).ok_or_else(|| DetectError::CommandNotFound(name.clone()))?;
        let mut env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        if let Some(a) = &cfg.agent {
            if !a.library.is_file() {
                return Err(DetectError::AgentMissing(a.library.clone()));
            }
            let dir = agent_env::private_dir()?;
            env = agent_env::environment(env, a, &dir);
            self.dir = Some(dir);
        }
        let argv: Vec<&OsString> = std::iter::once(&program).chain(&args).collect();
        let child = HeldChild::fork(&path, &argv, &env)?;
        let pid = child.pid;
        self.pid = pid;
        self.pidfd.set(pidfd_open(pid));
        self.spawned = true;
        match open_perf(cfg, || {
            PerfSource::open(&[pid], true, cfg.ring_pages, cfg.sampled)
        }) {
            Ok(p) => {
                self.sources.push(perf_status(&p, true));
                if p.system_wide {
                    self.tree = Some([pid as u32].into_iter().collect());
                }
                self.perf = Some(p);
            }
            Err(e) if cfg.tasks_from_proc => self.list_from_proc(pid as u32, &e),
            Err(e) => {
                self.sources.push(SourceStatus {
                    name: "perf page faults".into(),
                    active: false,
                    note: e.to_string(),
                });
                if cfg.agent.is_none() {
                    child.abandon();
                    return Err(DetectError::NoSource {
                        perf: e.to_string(),
                    });
                }
            }
        }
        if let Some(a) = &cfg.agent {
            self.sources.push(SourceStatus {
                name: "agent (extra faults)".into(),
                active: true,
                note: format!(
                    "{} preloaded: re-arms max({:.2}% of eligible pages, {} pages)/s (both terms x \
                     {}/{} while the pattern holds) every {} ms; shared \
                     mappings by dropping PTEs (reads and writes fault), private anonymous memory \
                     {}{}",
                    a.library.display(),
                    a.rearm_rate * 100.0,
                    a.rearm_floor,
                    a.steady_floor,
                    a.rearm_floor,
                    a.interval_ms,
                    if a.private_memory {
                        "by userfaultfd: dropped after being copied aside, put back on the next \
                         access (reads and writes fault)"
                    } else {
                        "not at all (disabled)"
                    },
                    if self.perf.is_none() {
                        "; its own fault reports are the only event source"
                    } else {
                        ""
                    },
                ) + if a.threads_only {
                    "; only in processes with two busy threads or more (MPI ranks: the PMPI \
                     agent counts their traffic)"
                } else {
                    ""
                },
            });
        }
        if let Err(ExecFailed(code)) = child.release() {
            let err = std::io::Error::from_raw_os_error(code);
            return Err(if code == libc::ENOENT {
                DetectError::CommandNotFound(name)
            } else {
                DetectError::Exec { program: name, err }
            });
        }
        self.register(pid as u32, pid as u32, self.t0_ns);
        Ok(())
    }

    /// Follows a running process and every process below it (an mpirun and its ranks), all
    /// their threads, of those huddle may watch ([`procs::ours`]). Listing and opening race
    /// with tasks that start meanwhile: the tree is listed again after each opening until
    /// nothing new turns up (a task started after its creator is followed is inherited by
    /// the kernel).
    fn attach(&mut self, pid: i32, cfg: &Config) -> Result<(), DetectError> {
        let root = u32::try_from(pid).map_err(|_| DetectError::NoSuchProcess(pid))?;
        let list = || procs::watched_tasks(root);
        let mut tasks = list();
        let mut seen: std::collections::HashSet<(u32, u32)> = tasks.iter().copied().collect();
        if tasks.is_empty() {
            return Err(DetectError::NoSuchProcess(pid));
        }
        self.pid = pid;
        self.pidfd.set(pidfd_open(pid));
        let tids: Vec<i32> = tasks.iter().map(|&(_, t)| t as i32).collect();
        let no_source = |e: PerfError| DetectError::NoSource {
            perf: e.to_string(),
        };
        let mut p = match open_perf(cfg, || {
            PerfSource::open(&tids, false, cfg.ring_pages, cfg.sampled)
        }) {
            Ok(p) => p,
            Err(e) if cfg.tasks_from_proc => {
                self.list_from_proc(root, &e);
                if let Some((_, listed)) = self.listing.as_mut() {
                    listed.extend(tasks.iter().copied());
                }
                for (p, t) in tasks {
                    self.register(p, t, self.t0_ns);
                }
                return Ok(());
            }
            Err(e) => return Err(no_source(e)),
        };
        if p.system_wide {
            // Open before listing: whatever starts after the list is seen by its FORK record.
            tasks = list();
            seen.extend(tasks.iter().copied());
            self.tree = Some(tasks.iter().map(|&(p, _)| p).collect());
        }
        for _ in 0..if p.system_wide { 0 } else { 5 } {
            let new: Vec<(u32, u32)> = list()
                .into_iter()
                .filter(|task| seen.insert(*task))
                .collect();
            if new.is_empty() {
                break;
            }
            let tids: Vec<i32> = new.iter().map(|&(_, t)| t as i32).collect();
            p.add(&tids).map_err(no_source)?;
            tasks.extend(new);
        }
        self.sources.push(perf_status(&p, false));
        self.perf = Some(p);
        self.sources.push(SourceStatus {
            name: "agent (extra faults)".into(),
            active: false,
            note: "not loaded: attach cannot preload it, so only first-touch faults are seen"
                .into(),
        });
        for (p, t) in tasks {
            self.register(p, t, self.t0_ns);
        }
        Ok(())
    }

    /// Goes on without perf (refused with `e`): the tasks below `root` are listed from /proc
    /// at every [`PROC_LIST_NS`] instead ([`Config::tasks_from_proc`]).
    fn list_from_proc(&mut self, root: u32, e: &PerfError) {
        self.sources.push(SourceStatus {
            name: "perf page faults".into(),
            active: false,
            note: e.to_string(),
        });
        self.sources.push(SourceStatus {
            name: "/proc task list".into(),
            active: true,
            note: format!(
                "perf refused, so no page faults: the program's tasks are listed from /proc every {} ms (a thread that starts and ends between two listings is not seen)",
                PROC_LIST_NS / 1_000_000
            ),
        });
        self.listing = Some((root, BTreeSet::new()));
    }

    /// With [`Session::list_from_proc`]: the tasks that started or ended since the last
    /// listing, as the task records perf would have given.
    fn list_tasks(&mut self, batch: &mut Vec<(u64, Record)>) {
        let Some((root, before)) = self.listing.as_mut() else {
            return;
        };
        let now: BTreeSet<procs::TaskId> = procs::watched_tasks(*root).into_iter().collect();
        let (started, ended) = procs::listing_changes(before, &now);
        let time = self.poll_ns;
        for (pid, tid) in started {
            batch.push((
                time,
                Record::Fork {
                    pid,
                    ppid: pid,
                    tid,
                    time,
                },
            ));
        }
        for (pid, tid) in ended {
            batch.push((time, Record::Exit { pid, tid, time }));
        }
        *before = now;
    }

    /// Process id of the target: the spawned child, or the attached process.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// CLOCK_MONOTONIC time (ns) the session started; `first_seen_ms` counts from it.
    pub fn start_monotonic_ns(&self) -> u64 {
        self.t0_ns
    }

    /// Every event source and why it runs or not, in the order tried.
    pub fn sources(&self) -> &[SourceStatus] {
        &self.sources
    }

    /// Waits up to `timeout` for a ring buffer to pass its watermark (or the target to exit).
    pub fn wait(&self, timeout: Duration) {
        let timeout = if self.ending.get() {
            timeout.min(ENDING_WAIT)
        } else {
            timeout
        };
        let mut fds = self.perf.as_ref().map(|p| p.fds()).unwrap_or_default();
        let pidfd = self.pidfd.get();
        if pidfd >= 0 {
            fds.push(pidfd);
        }
        if fds.is_empty() {
            std::thread::sleep(timeout);
            return;
        }
        let mut pfds: Vec<libc::pollfd> = fds
            .iter()
            .map(|&fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: pfds is a valid array of pollfd.
        let r = unsafe {
            libc::poll(
                pfds.as_mut_ptr(),
                pfds.len() as libc::nfds_t,
                timeout.as_millis().min(i32::MAX as u128) as i32,
            )
        };
        if pidfd >= 0 && pfds.last().is_some_and(|p| p.revents != 0) {
            // The program's main process ended: return now, and never wait on it again.
            // SAFETY: the fd is ours and no longer used.
            unsafe { libc::close(pidfd) };
            self.pidfd.set(-1);
            self.ending.set(true);
            return;
        }
        // POLLHUP stays set once tasks exited; do not spin on it.
        if r > 0 && pfds.iter().all(|p| p.revents & libc::POLLIN == 0) {
            std::thread::sleep(timeout.min(Duration::from_millis(10)));
        }
    }

    /// Checks (without blocking) whether the target ended; for a spawned target this reaps it.
    pub fn try_wait(&mut self) -> Option<TargetExit> {
        if self.exit.is_some() {
            return self.exit;
        }
        if self.spawned {
            let mut st = 0;
            // SAFETY: wait4 on our own child; ru is a valid out-pointer.
            let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
            if unsafe { libc::wait4(self.pid, &mut st, libc::WNOHANG, &mut ru) } == self.pid {
                self.target_cpu_s = Some(cpu_seconds(&ru));
                self.exit = Some(if libc::WIFSIGNALED(st) {
                    TargetExit::Signal(libc::WTERMSIG(st))
                } else {
                    TargetExit::Code(libc::WEXITSTATUS(st))
                });
            }
        } else if unsafe { libc::kill(self.pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        {
            // Gone. (EPERM: still there, under another user since an exec of a setuid
            // program; it is not ours to signal, but it runs.)
            self.exit = Some(TargetExit::Code(0));
        }
        self.exit
    }

    /// Sends `sig` to the target (for forwarding SIGINT/SIGTERM).
    pub fn signal(&self, sig: i32) {
        if self.exit.is_none() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(self.pid, sig) };
        }
    }

    /// Reads every pending event from every source and updates the matrix; returns the
    /// number of fault events processed. Cheap when nothing happened.
    pub fn poll(&mut self) -> u64 {
        // Records stamped within the last 2 ms may still be on their way into another CPU's
        // ring; hold them for the next poll so that tasks are ordered by true time.
        let cut = monotonic_ns().saturating_sub(2_000_000);
        self.poll_until(cut)
    }

    /// Like [`Session::poll`], but processes everything buffered (after the target ended).
    pub fn flush(&mut self) -> u64 {
        self.poll_until(u64::MAX)
    }

    fn poll_until(&mut self, cut: u64) -> u64 {
        self.generation += 1;
        self.poll_ns = monotonic_ns();
        let mut batch = std::mem::take(&mut self.batch);
        if let Some(p) = self.perf.as_mut() {
            p.drain(|r| {
                let t = match &r {
                    Record::Fault { time, .. }
                    | Record::Fork { time, .. }
                    | Record::Exit { time, .. } => *time,
                    _ => 0,
                };
                batch.push((t, r));
            });
        }
        if cut == u64::MAX || self.poll_ns.saturating_sub(self.rings_scanned_ns) >= RING_SCAN_NS {
            self.rings_scanned_ns = self.poll_ns;
            self.scan_rings();
            self.list_tasks(&mut batch);
        }
        let use_agent_faults = self.perf.is_none();
        let mut agent_seen = 0;
        for r in self.rings.values() {
            let pid = r.view.header().pid;
            r.view.drain(|rec| {
                agent_seen += 1;
                if use_agent_faults {
                    batch.push((
                        rec.time,
                        Record::Fault {
                            pid,
                            tid: rec.tid,
                            time: rec.time,
                            addr: rec.addr,
                            cpu: 0,
                        },
                    ));
                }
            });
        }
        self.agent_faults_seen += agent_seen;
        // Per-CPU rings interleave in time; the sharer lists want the true order.
        batch.sort_by_key(|(t, _)| *t);
        let ready = batch.partition_point(|(t, _)| *t < cut);
        let mut n = 0;
        for (_, r) in batch.drain(..ready) {
            if let Some(tree) = self.tree.as_mut() {
                if !in_tree(tree, &r) {
                    continue;
                }
            }
            match r {
                Record::Fault {
                    pid,
                    tid,
                    time,
                    addr,
                    ..
                } => {
                    if self.fault(pid, tid, time, addr) {
                        n += 1;
                    }
                }
                Record::Fork { pid, tid, time, .. } => {
                    self.register(pid, tid, time);
                }
                Record::Exit { pid, tid, .. } => {
                    if let (Some(b), true) = (self.busy.as_mut(), pid == tid) {
                        b.forget(pid);
                    }
                    let key = if self.granularity == Granularity::Thread {
                        tid
                    } else {
                        pid
                    };
                    if let Some(&i) = self.index.get(&key) {
                        if self.granularity == Granularity::Thread || pid == tid {
                            if !self.tasks[i].exited && !self.tasks[i].agent {
                                if let Some(n) = self.threads_of_pid.get_mut(&pid) {
                                    *n = n.saturating_sub(1);
                                }
                            }
                            self.tasks[i].exited = true;
                        }
                    }
                }
                Record::Comm {
                    pid,
                    tid,
                    time,
                    comm,
                } => {
                    let i = self.register(pid, tid, time);
                    if self.granularity == Granularity::Thread || pid == tid {
                        if comm == "huddle-agent" {
                            // Registered as a program thread (its name unreadable then: an
                            // agent helper of a program that exec'd at once) and counted
                            // as one: not any more, or the program would never look
                            // single-threaded while its master initialises.
                            if !self.tasks[i].agent && !self.tasks[i].exited {
                                if let Some(n) = self.threads_of_pid.get_mut(&pid) {
                                    *n = n.saturating_sub(1);
                                }
                            }
                            self.tasks[i].agent = true;
                        } else if !self.tasks[i].agent {
                            self.tasks[i].comm = comm;
                        }
                    }
                }
                Record::Lost { .. } => {}
            }
        }
        self.batch = batch;
        if self.pages.is_some() {
            self.probe_edges();
        }
        if let Some(b) = self.budget.as_mut() {
            let floor = b.floor(self.poll_ns);
            if floor != self.agent_floor {
                let (then, now) = (self.rearm_rate(self.agent_floor), self.rearm_rate(floor));
                if !self.start_scaled && now < then {
                    // The start is over. Its counts were sampled at the start's higher rate:
                    // scaled to the steady one, each stays in proportion to the traffic it
                    // samples, and the start's many events do not outweigh the steady state
                    // (docs/detect.md, "Counts in proportion to the re-arm rate"). Not after
                    // a boost: its events are there to outweigh the pattern before it.
                    self.start_scaled = true;
                    if now >= 1.0 {
                        self.scale(now.round() as u64, then.round() as u64);
                    }
                }
                self.agent_floor = floor;
                self.share_floor();
            }
        }
        n
    }

    fn scan_rings(&mut self) {
        let Some(dir) = &self.dir else { return };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            if self.rings.contains_key(&path) || path.extension().is_none_or(|x| x != "ring") {
                continue;
            }
            if let Some(r) = map_ring(&path) {
                // The highest N of a pid is its program now: the lower ones belong to the
                // fork child it was before an exec (see ring::file_name).
                let pid = r.view.header().pid;
                let n = |p: &Path| {
                    p.file_name()
                        .and_then(|f| ring::parse_file_name(&f.to_string_lossy()))
                        .map_or(0, |(_, n)| n)
                };
                if self
                    .ring_of_pid
                    .get(&pid)
                    .is_none_or(|old| n(old) < n(&path))
                {
                    self.ring_of_pid.insert(pid, path.clone());
                }
                self.rings.insert(path, r);
            }
        }
        self.share_floor();
    }

    /// Divides the re-arm floor among the agents of processes still alive, so a program of
    /// many processes re-arms as many pages per second as one of a single process (CDSM's
    /// budget is per program); each agent still adds its own rate x its own pages.
    fn share_floor(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        // SAFETY: kill with signal 0 only checks that the process exists.
        let alive = |pid: u32| unsafe { libc::kill(pid as i32, 0) } == 0;
        // A ring replaced by the one of an exec'd program (same pid) is not an agent any more.
        let live: Vec<&AgentRing> = self
            .rings
            .iter()
            .filter(|(path, r)| {
                let pid = r.view.header().pid;
                alive(pid) && self.ring_of_pid.get(&pid) == Some(*path)
            })
            .map(|(_, r)| r)
            .collect();
        // A floor of 0 stays 0 (the header's 0 means "use your own", which is 0 too).
        let share = match self.agent_floor {
            0 => 0,
            f => (f / live.len().max(1) as u64).max(MIN_FLOOR_SHARE),
        };
        let n = live.len() as u64;
        let rate_ppm = self.rate_ppm();
        for r in live {
            r.view.header().rate_ppm.store(rate_ppm, Relaxed);
            r.view.header().floor_share.store(share, Relaxed);
            r.view.header().live_agents.store(n, Relaxed);
            r.view.header().paused.store(self.paused as u64, Relaxed);
            r.view.header().dormant.store(self.dormant as u64, Relaxed);
        }
    }

    /// Pages per second the agents re-arm in all at floor `floor` (see [`rearm_rate`]).
    fn rearm_rate(&self, floor: u64) -> f64 {
        use std::sync::atomic::Ordering::Relaxed;
        let pages: u64 = (self.rings.values())
            .map(|r| r.view.header().candidate_pages.load(Relaxed))
            .sum();
        rearm_rate(self.agent_rate, self.agent_high_floor, floor, pages)
    }

    /// The agents' re-arm rate now, in millionths of their pages per second: the configured
    /// rate times the floor now over the start floor, so that while the pattern holds both
    /// terms of the budget drop together, but by MAX_RATE_CUT at most (1 % -> 0.25 % at the
    /// defaults, as when the start floor was 300: the start floor was raised for the search
    /// at the start, not to re-arm large programs less while the pattern holds). At least 1,
    /// since 0 tells an agent to use its own rate.
    fn rate_ppm(&self) -> u64 {
        if self.agent_rate <= 0.0 {
            return 0;
        }
        let scale = rate_scale(self.agent_floor, self.agent_high_floor);
        ((self.agent_rate * 1e6 * scale).round() as u64).max(1)
    }

    /// Pauses or resumes re-arming in every agent, those that appear later included. While
    /// paused, the program runs as if detection were only watching (first-touch faults are
    /// still counted); the agents take no pages out and put back those out within 250 ms.
    /// Used to measure what re-arming costs inside one run (bench/detect).
    pub fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
        self.publish_switches();
    }

    /// Puts every agent to sleep or wakes it, those that appear later included. A dormant
    /// agent registers no more memory with userfaultfd (first touches of memory mapped
    /// meanwhile are plain faults) and takes no page out (those out come back when touched
    /// or after 250 ms); what it registered stays registered. Waking restarts the high
    /// re-arm floor: nothing is known yet about the tasks that woke it.
    pub fn set_dormant(&mut self, dormant: bool) {
        if self.dormant && !dormant {
            if let Some(b) = self.budget.as_mut() {
                b.wake(monotonic_ns());
            }
        }
        self.dormant = dormant;
        self.publish_switches();
    }

    /// Writes `paused` and `dormant` into every agent's ring header (rings found later get
    /// them from [`Session::share_floor`]).
    fn publish_switches(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        for r in self.rings.values() {
            r.view.header().paused.store(self.paused as u64, Relaxed);
            r.view.header().dormant.store(self.dormant as u64, Relaxed);
        }
    }

    /// Whether the agents are dormant ([`Session::set_dormant`]).
    pub fn dormant(&self) -> bool {
        self.dormant
    }

    /// Index of task (pid, tid), registering it if new.
    fn register(&mut self, pid: u32, tid: u32, time: u64) -> usize {
        let key = if self.granularity == Granularity::Thread {
            tid
        } else {
            pid
        };
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        let comm_path = if self.granularity == Granularity::Thread {
            format!("/proc/{pid}/task/{tid}/comm")
        } else {
            format!("/proc/{pid}/comm")
        };
        let comm = std::fs::read_to_string(comm_path)
            .map(|s| s.trim_end().to_string())
            .unwrap_or_else(|_| "?".into());
        let i = self.tasks.len();
        if self.granularity == Granularity::Thread && comm != "huddle-agent" {
            *self.threads_of_pid.entry(pid).or_insert(0) += 1;
        }
        self.tasks.push(TaskInfo {
            tid: key,
            pid,
            agent: comm == "huddle-agent",
            comm,
            first_seen_ms: time.saturating_sub(self.t0_ns) as f64 / 1e6,
            exited: false,
        });
        self.index.insert(key, i);
        self.counts.push(Vec::new());
        self.page_counts.push(Vec::new());
        self.proven_counts.push(Vec::new());
        i
    }

    /// The sharer-table key of a faulting address: shared mappings by (device, inode,
    /// offset) so that processes meet; everything else by (process, virtual address).
    fn key(&mut self, pid: u32, addr: u64) -> (u64, bool) {
        let (now, generation) = (self.poll_ns, self.generation);
        // The agent's count of maps changes, looked up only once the cache is past 500 ms.
        let (rings, ring_of_pid) = (&self.rings, &self.ring_of_pid);
        let agent_changes = || {
            let ring = rings.get(ring_of_pid.get(&pid)?)?;
            let changes = &ring.view.header().maps_changes;
            Some(changes.load(std::sync::atomic::Ordering::Acquire))
        };
        let entry = self.maps.entry(pid).or_insert(CachedMaps {
            read_ns: 0,
            read_generation: 0,
            agent_changes: None,
            vmas: None,
        });
        let shift = self.shift;
        // (device, inode, page-cache offset) of a shared mapping; None for private memory.
        let shared_key = |v: &Vma| {
            v.shared
                .then(|| (v.dev, v.inode, v.offset + (addr - v.start)))
        };
        let age = now.saturating_sub(entry.read_ns);
        let fresh = age <= MAPS_MAX_AGE_NS
            || (age <= AGENT_MAPS_MAX_AGE_NS
                && entry.agent_changes.is_some()
                && agent_changes() == entry.agent_changes);
        let mut hit = entry.vmas.as_deref().and_then(|v| procmaps::find(v, addr));
        // At most one read per poll, even for faults outside every mapping.
        if (!fresh || hit.is_none()) && entry.read_generation != generation {
            // Read before the maps: a change in between makes the next fault read again.
            let changes = agent_changes();
            *entry = CachedMaps {
                read_ns: now,
                read_generation: generation,
                agent_changes: changes,
                vmas: procmaps::read(pid),
            };
            hit = entry.vmas.as_deref().and_then(|v| procmaps::find(v, addr));
        }
        if let Some((dev, inode, off)) = hit.and_then(shared_key) {
            return (
                mix(mix(dev ^ 0x5348_4152_4544) ^ inode) ^ (off >> shift),
                true,
            );
        }
        (mix(pid as u64 ^ 0x5052_4956) ^ (addr >> self.shift), false)
    }

    fn fault(&mut self, pid: u32, tid: u32, time: u64, addr: u64) -> bool {
        let t = self.register(pid, tid, time);
        if self.tasks[t].agent || addr == 0 {
            return false;
        }
        self.faults += 1;
        let t32 = t as u32;
        if let Some(o) = &mut self.owners {
            o.record(pid, addr, t32);
        }
        // Only sharing inside a process counts (Config::within_process), and a process with
        // one busy thread shares nothing with itself.
        let poll_ns = self.poll_ns;
        if let Some(b) = &mut self.busy {
            if !b.two_busy(pid, poll_ns) {
                return true;
            }
        }
        let (key, shared) = self.key(pid, addr);
        if !shared && self.single_threaded(pid) {
            return true;
        }
        // Private memory: faults made before the program went parallel stay out, and
        // accessors count for PRIVATE_HISTORY_MS. A shared mapping's page-cache pages are
        // dropped and re-faulted by every process, so their history is kept, as in CDSM.
        let now_ms = (time.saturating_sub(self.t0_ns) / 1_000_000).min(u32::MAX as u64) as u32;
        let keep_ms = if shared { u32::MAX } else { PRIVATE_HISTORY_MS };
        let counts = &mut self.counts;
        let budget = &mut self.budget;
        let mut events = 0;
        self.table.record_at(key, t32, now_ms, keep_ms, |q| {
            let q = q as usize;
            if let Some(b) = budget.as_mut() {
                b.event(t, q);
            }
            add_event(counts, t, q);
            events += 1;
        });
        self.comm_events += events;
        if let (false, Some(pages)) = (shared, self.pages.as_mut()) {
            let page_key = mix(pid as u64 ^ 0x5041_4745) ^ (addr >> PAGE_SHIFT);
            let (page, offset) = (addr & !PAGE_MASK, (addr & PAGE_MASK) as u16);
            let (page_counts, edges) = (&mut self.page_counts, &mut self.edges);
            let (proven_counts, proven, shift) = (
                &mut self.proven_counts,
                &mut self.page_events_proven,
                self.shift,
            );
            let mut page_events = 0;
            let record = |q: u32, q_offset| {
                // Events of an edge found apart (false sharing of the page) do not count;
                // page mode is chosen on all of them.
                let edge = EdgeKey::of((t32, offset), (q, q_offset));
                if edge.is_none_or(|e| edges.event(pid, e, page)) {
                    add_event(page_counts, t, q as usize);
                    if edge.is_some_and(|e| e.across_blocks(shift) && edges.proven(&e)) {
                        add_event(proven_counts, t, q as usize);
                        *proven += 1;
                    }
                }
                page_events += 1;
            };
            let (before, after) = pages.record_at(page_key, t32, offset, now_ms, keep_ms, record);
            let tally = self.granule_events.entry(pid).or_default();
            tally.block_events += events;
            tally.page_events += page_events;
            if before != after {
                match after {
                    PageState::Paired => tally.paired_pages += 1,
                    PageState::Crowded => tally.crowded_pages += 1,
                    PageState::Fresh => {}
                }
            }
        }
        true
    }

    /// Runs the page edges' probes (edges.rs): every edge of a process in page mode, and
    /// outside it the edges whose threads enter in different blocks (what blocks miss);
    /// takes back the events of edges found apart and adds those of edges proven shared.
    fn probe_edges(&mut self) {
        let (tasks, granules) = (&self.tasks, &self.granule_events);
        let watched = self.edges.unavailable.is_none();
        let paged = |pid: u32| granules.get(&pid).is_some_and(|g| g.by_page(watched));
        // Most programs have no edge to probe: no walk over the edges at every poll then.
        let work = self.edges.probing()
            || (watched && self.edges.open())
            || granules.keys().any(|&pid| paged(pid));
        if !work {
            return;
        }
        let shift = self.shift;
        let wanted = |pid: u32, key: &EdgeKey| key.across_blocks(shift) || paged(pid);
        let tid_of = |t: u32| {
            let task = tasks.get(t as usize)?;
            (!task.exited).then_some(task.tid)
        };
        let found = self.edges.tick(self.poll_ns, wanted, tid_of);
        for (key, events) in found.proven {
            if key.across_blocks(shift) {
                let (a, b) = (key.lo_task as usize, key.hi_task as usize);
                add_events(&mut self.proven_counts, a, b, events);
                self.page_events_proven += events;
            }
        }
        for (pid, page) in found.apart_pages {
            let ring = self
                .ring_of_pid
                .get(&pid)
                .and_then(|path| self.rings.get(path));
            if let Some(r) = ring {
                r.view.tell_apart(page);
            }
        }
        for back in found.apart {
            for (x, y) in [(back.a, back.b), (back.b, back.a)] {
                if let Some(n) = self
                    .page_counts
                    .get_mut(x as usize)
                    .and_then(|r| r.get_mut(y as usize))
                {
                    *n = n.saturating_sub(back.events);
                }
            }
        }
    }

    /// Whether the matrix pairs process `pid`'s threads by page (see [`Granules::by_page`]).
    fn page_mode(&self, pid: u32) -> bool {
        let watched = self.edges.unavailable.is_none();
        (self.granule_events.get(&pid)).is_some_and(|g| g.by_page(watched))
    }

    /// Whether a fault of process `pid` on its private memory is to stay out of the sharer
    /// table because the process has one thread (agent helpers aside): memory set up before
    /// the program goes parallel (the master initialising every array, as most OpenMP and
    /// Fortran codes do) says nothing about which threads use it later, and recorded it
    /// would pair the master with every later fault on it. Counted in thread granularity
    /// only: in process granularity private memory never pairs two tasks.
    fn single_threaded(&self, pid: u32) -> bool {
        self.granularity == Granularity::Thread
            && self.threads_of_pid.get(&pid).is_some_and(|&n| n <= 1)
    }

    /// Whether each row is a thread or a whole process.
    pub fn granularity(&self) -> Granularity {
        self.granularity
    }

    /// Every task seen so far, in order of appearance (index = matrix row).
    pub fn tasks(&self) -> Vec<TaskInfo> {
        self.tasks.clone()
    }

    /// The symmetric matrix over all tasks (agent helpers included as zero rows; use
    /// [`Session::matrix_of`] to choose rows).
    pub fn matrix(&self) -> CommMatrix {
        let all: Vec<usize> = (0..self.tasks.len()).collect();
        self.matrix_of(&all)
    }

    /// The matrix restricted to the given task indexes, in that order.
    pub fn matrix_of(&self, rows: &[usize]) -> CommMatrix {
        let paged = self.paged_tasks();
        let mut m = CommMatrix::zeros(rows.len());
        for (i, &a) in rows.iter().enumerate() {
            for (j, &b) in rows.iter().enumerate() {
                m.set(i, j, self.count(a, b, &paged) as f64);
            }
        }
        m
    }

    /// For each task, whether its process is in page mode (looked up once per matrix).
    fn paged_tasks(&self) -> Vec<bool> {
        let any = self.pages.is_some() && !self.granule_events.is_empty();
        (self.tasks.iter())
            .map(|t| any && self.page_mode(t.pid))
            .collect()
    }

    /// Events between tasks `a` and `b`: by page between two threads of a process in page
    /// mode (`paged`, from [`Session::paged_tasks`]), by block and on proven page edges
    /// otherwise.
    fn count(&self, a: usize, b: usize, paged: &[bool]) -> u64 {
        let at = |rows: &[Vec<u64>]| rows.get(a).and_then(|r| r.get(b)).copied().unwrap_or(0);
        if paged[a] && self.tasks[a].pid == self.tasks[b].pid {
            at(&self.page_counts)
        } else {
            at(&self.counts) + at(&self.proven_counts)
        }
    }

    /// Total communication of each task (row sums).
    pub fn task_totals(&self) -> Vec<u64> {
        let paged = self.paged_tasks();
        let n = self.tasks.len();
        (0..n)
            .map(|a| (0..n).map(|b| self.count(a, b, &paged)).sum())
            .collect()
    }

    /// The tasks worth mapping: not agent helpers, and, when anything communicated, with at
    /// least `min_share` of the median task's communication (a launcher thread that only
    /// initialised memory drops out; a master that talks to everyone stays). With no
    /// communication at all every task is kept: a silent program yields an honest zero matrix.
    pub fn active_tasks(&self, min_share: f64) -> Vec<usize> {
        let mut totals = self.task_totals();
        for (t, away) in totals.iter_mut().zip(&self.scaled_away) {
            *t += away;
        }
        let cand: Vec<usize> = (0..self.tasks.len())
            .filter(|&i| !self.tasks[i].agent)
            .collect();
        let mut sorted: Vec<u64> = cand.iter().map(|&i| totals[i]).collect();
        sorted.sort_unstable();
        let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0);
        if median == 0 {
            return cand;
        }
        cand.into_iter()
            .filter(|&i| totals[i] as f64 >= min_share * median as f64)
            .collect()
    }

    /// The pages (start addresses in the task's process) task `task` (a row of the matrix)
    /// touched last, when the session records page owners; empty otherwise.
    pub fn owned_pages(&self, task: usize) -> Vec<u64> {
        self.owners
            .as_ref()
            .map_or_else(Vec::new, |o| o.owned_by(task as u32))
    }

    /// CDSM aging after a migration: every count M -= M >> 2 (counts under 4 stay).
    pub fn age(&mut self) {
        age_rows(&mut self.counts);
        age_rows(&mut self.page_counts);
        age_rows(&mut self.proven_counts);
        age_rows(std::slice::from_mut(&mut self.scaled_away));
        self.edges.age();
    }

    /// Every count times `num / den`, rounded to the nearest (see `scaled`).
    fn scale(&mut self, num: u64, den: u64) {
        let before = self.task_totals();
        for rows in [
            &mut self.counts,
            &mut self.page_counts,
            &mut self.proven_counts,
        ] {
            scale_rows(rows, num, den);
        }
        self.edges.scale(num, den);
        let after = self.task_totals();
        self.scaled_away = before
            .iter()
            .zip(&after)
            .map(|(b, a)| b.saturating_sub(*a))
            .collect();
    }

    /// The counters now (reads the agents' ring headers and this process's rusage).
    pub fn stats(&self) -> Stats {
        let elapsed = self.started.elapsed().as_secs_f64();
        let mut s = Stats {
            elapsed_s: elapsed,
            faults: self.faults,
            comm_events: self.comm_events,
            page_comm_events: self.granule_events.values().map(|g| g.page_events).sum(),
            page_mode_pids: {
                let mut pids: Vec<u32> = (self.granule_events.keys().copied())
                    .filter(|&pid| self.page_mode(pid))
                    .collect();
                pids.sort_unstable();
                pids
            },
            page_edges_probed: self.edges.probes,
            page_edge_pages_apart: self.edges.pages_apart,
            page_edges_apart: self.edges.apart,
            page_edges_shared: self.edges.shared,
            page_events_apart: self.edges.events_dropped,
            page_events_proven: self.page_events_proven,
            watchpoints_refused: self.edges.unavailable.clone(),
            faults_per_s: self.faults as f64 / elapsed.max(1e-9),
            perf_lost: self.perf.as_ref().map_or(0, |p| p.lost),
            table_bytes: self.table.memory_bytes(),
            table_slots: self.table.slots(),
            table_evictions: self.table.evictions,
            agents: self.rings.len(),
            rearm_floor: self.agent_floor,
            floor_boosts: self.budget.as_ref().map_or(0, |b| b.boosts),
            target_cpu_s: self.target_cpu_s,
            ..Stats::default()
        };
        // SAFETY: getrusage writes the struct we pass.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } == 0 {
            s.detector_cpu_s = cpu_seconds(&ru);
        }
        use std::sync::atomic::Ordering::Relaxed;
        for r in self.rings.values() {
            let h = r.view.header();
            s.agent_dropped += h.dropped.load(Relaxed);
            s.rearmed_shared += h.rearmed_shared.load(Relaxed);
            s.rearmed_private += h.rearmed_private.load(Relaxed);
            s.rearmed_huge += h.rearmed_huge.load(Relaxed);
            s.agent_handled += h.handled.load(Relaxed);
            s.agent_errors += h.errors.load(Relaxed);
            s.candidate_pages += h.candidate_pages.load(Relaxed);
            s.adopted_pages += h.adopted_pages.load(Relaxed);
            s.focus_shared += h.focus_shared.load(Relaxed);
            s.focus_rearms += h.focus_rearms.load(Relaxed);
            s.focus_apart += h.apart_heard.load(Relaxed);
            s.agent_cpu_s +=
                (h.rearm_cpu_ns.load(Relaxed) + h.fault_cpu_ns.load(Relaxed)) as f64 / 1e9;
        }
        s
    }

    /// Processes whose agent re-arms nothing (its helper threads did not start, or the
    /// program locked memory): a line each, for a warning (the run then sees only the faults
    /// the program makes itself).
    pub fn idle_agents(&self) -> Vec<String> {
        use std::sync::atomic::Ordering::Relaxed;
        let mut v: Vec<String> = (self.rings.values())
            .map(|r| r.view.header())
            .filter_map(|h| match h.private_mode.load(Relaxed) {
                ring::private_mode::NO_HELPERS => {
                    Some(format!("pid {}: {}", h.pid, no_helpers_note(h)))
                }
                ring::private_mode::LOCKED_BY_PROGRAM => {
                    Some(format!("pid {}: {LOCKED_NOTE}", h.pid))
                }
                _ => None,
            })
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Per-process notes from the agents (private-memory mode and why).
    pub fn agent_notes(&self) -> Vec<String> {
        use std::sync::atomic::Ordering::Relaxed;
        let mut v: Vec<String> = self
            .rings
            .values()
            .map(|r| {
                let h = r.view.header();
                let mode = match h.private_mode.load(Relaxed) {
                    ring::private_mode::UFFD => format!(
                        "private memory: userfaultfd, pages saved by {}",
                        match h.saves_by.load(Relaxed) {
                            ring::saves_by::MOVE => "move",
                            ring::saves_by::REMAP => "remap",
                            _ => "nothing (no vault: none re-armed)",
                        }
                    ),
                    ring::private_mode::YIELDED_TO_PROGRAM => {
                        "private memory: not re-armed, the program uses userfaultfd itself"
                            .to_string()
                    }
                    ring::private_mode::UNAVAILABLE => format!(
                        "private memory: not re-armed, userfaultfd unavailable ({})",
                        std::io::Error::from_raw_os_error(h.private_errno.load(Relaxed) as i32)
                    ),
                    ring::private_mode::NO_HELPERS => no_helpers_note(h),
                    ring::private_mode::LOCKED_BY_PROGRAM => LOCKED_NOTE.to_string(),
                    _ => "private memory: not re-armed (disabled)".to_string(),
                };
                format!("pid {}: {mode}", h.pid)
            })
            .collect();
        // A process that execs has a ring per image under one pid: one line for both.
        v.sort();
        v.dedup();
        v.extend(self.budget.as_ref().map(Budget::summary));
        v.extend(self.huge_pages_note());
        v
    }

    /// Said when an agent watches private memory on a machine that gives all of it
    /// transparent huge pages: the agent leaves a new mapping to the kernel until the
    /// program has filled it (its huge pages stay), but each re-arm puts a page back 4 KiB
    /// at a time and splits the huge page it lands in.
    pub fn huge_pages_note(&self) -> Option<String> {
        use std::sync::atomic::Ordering::Relaxed;
        let watching = (self.rings.values())
            .any(|r| r.view.header().private_mode.load(Relaxed) == ring::private_mode::UFFD);
        let text = std::fs::read_to_string(THP_ENABLED).ok()?;
        (watching && thp_mode(&text) == Some("always")).then(|| {
            "transparent huge pages are on for all memory here (always), and each page the \
             agent re-arms splits the huge page it lands in: while it re-arms, a program that \
             relies on huge pages runs slower (a random-access loop over 512 MiB in small pages: \
             about 8-10 %, docs/detect.md); --no-private keeps them and watches shared memory only"
                .to_string()
        })
    }
}

const THP_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

/// The mode the kernel's transparent huge page setting selects (the bracketed word of
/// `always [madvise] never`).
fn thp_mode(text: &str) -> Option<&str> {
    (text.split_whitespace())
        .find(|w| w.starts_with('[') && w.ends_with(']'))
        .map(|w| w.trim_start_matches('[').trim_end_matches(']'))
}

/// The note of an agent that stepped back when its program locked memory.
const LOCKED_NOTE: &str =
    "nothing re-armed since the program locked memory (mlock or mlockall: its pages must not fault)";

/// The note of an agent whose helper threads did not start.
fn no_helpers_note(h: &ring::Header) -> String {
    let errno = h.private_errno.load(std::sync::atomic::Ordering::Relaxed) as i32;
    format!(
        "nothing re-armed, the agent's helper threads could not start ({})",
        std::io::Error::from_raw_os_error(errno)
    )
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.pidfd.get() >= 0 {
            // SAFETY: the fd is ours.
            unsafe { libc::close(self.pidfd.get()) };
        }
        self.rings.clear();
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// A process's private faults by block and by page (see `Session::page_mode`).
#[derive(Clone, Copy, Debug, Default)]
struct Granules {
    block_events: u64,
    page_events: u64,
    /// Pages that paired two tasks, and pages that had three or more.
    paired_pages: u64,
    crowded_pages: u64,
}

impl Granules {
    /// Whether to pair the process's threads by page rather than by block: when blocks saw
    /// under a fifth of what pages saw, on pages that seldom a third task touches (one page
    /// crowded for eight paired at most). Then the threads share pages but enter them at
    /// different blocks: Fortran arrays in a COMMON block that starts inside a page, where
    /// two tiles' sweeps enter an edge page 768 bytes apart and blocks see none of it
    /// (docs/detect.md). Tasks writing their own blocks of shared pages (`false-sharing`)
    /// crowd them, and with two tasks the page edges' watchpoints (`watched`: not refused)
    /// find them apart. Without watchpoints the pages must also pair the same two tasks again
    /// and again (1.5 events a page or more), which false sharing seldom does; that took
    /// until 2 s of the Fortran stencil's run, the watchpoints 0.5 s (2026-11-27).
    fn by_page(&self, watched: bool) -> bool {
        self.page_events >= PAGE_MODE_MIN_EVENTS
            && self.block_events * PAGE_MODE_RATIO < self.page_events
            && (watched || 2 * self.page_events >= 3 * self.paired_pages)
            && self.crowded_pages * 8 <= self.paired_pages
    }
}

/// Counts one event between tasks `a` and `b` in both directions.
fn add_event(rows: &mut [Vec<u64>], a: usize, b: usize) {
    add_events(rows, a, b, 1);
}

/// Counts `n` events between tasks `a` and `b` in both directions.
fn add_events(rows: &mut [Vec<u64>], a: usize, b: usize, n: u64) {
    for (x, y) in [(a, b), (b, a)] {
        let row = &mut rows[x];
        if row.len() <= y {
            row.resize(y + 1, 0);
        }
        row[y] += n;
    }
}

/// CDSM's ageing after a migration, M -= M >> 2 on every entry: old communication fades so
/// a new pattern can take over.
fn age_rows(rows: &mut [Vec<u64>]) {
    for row in rows {
        for v in row.iter_mut() {
            *v -= *v >> 2;
        }
    }
}

/// Every entry times `num / den` (see `scaled`).
fn scale_rows(rows: &mut [Vec<u64>], num: u64, den: u64) {
    for row in rows {
        for v in row.iter_mut() {
            *v = scaled(*v, num, den);
        }
    }
}

/// `v * num / den`, rounded to the nearest. Not up: a task outside the workload with a few
/// events, each count rounded up to 1, passed `--min-share` of the scaled-down median in a
/// loaded run (crates/cli/tests/detect.rs, under `make test`).
pub(crate) fn scaled(v: u64, num: u64, den: u64) -> u64 {
    (v * num + den / 2) / den
}

fn map_ring(path: &Path) -> Option<AgentRing> {
    use std::os::unix::fs::MetadataExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .ok()?;
    let meta = f.metadata().ok()?;
    // Only rings of our own user, complete and of the size we expect.
    // SAFETY: geteuid has no preconditions.
    if meta.uid() != unsafe { libc::geteuid() } || meta.len() < ring::file_size() as u64 {
        return None;
    }
    let len = ring::file_size();
    use std::os::fd::AsRawFd;
    // SAFETY: mapping a regular file of at least `len` bytes, shared.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: the mapping is `len` bytes and lives as long as AgentRing.
    let view = unsafe { RingView::new(base as *mut u8) };
    let ok = view.header().magic == ring::MAGIC && view.header().version == ring::VERSION;
    let r = AgentRing { view, base, len };
    ok.then_some(r)
}

/// A pidfd of `pid` (Linux 5.3+), or -1 where the kernel has none.
fn pidfd_open(pid: i32) -> i32 {
    // SAFETY: pidfd_open takes a pid and flags and returns an fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd >= 0 {
        // SAFETY: fd is ours; children must not inherit it.
        unsafe { libc::fcntl(fd as i32, libc::F_SETFD, libc::FD_CLOEXEC) };
        fd as i32
    } else {
        -1
    }
}

/// System-wide perf events where allowed (they cost the program no context-switch time),
/// else `per_task`. A system-wide failure other than a missing privilege is an error.
fn open_perf(
    cfg: &Config,
    per_task: impl FnOnce() -> Result<PerfSource, PerfError>,
) -> Result<PerfSource, PerfError> {
    if cfg.per_task_perf {
        return per_task();
    }
    match PerfSource::open_system_wide(cfg.ring_pages, cfg.sampled) {
        Err(PerfError::Permission { .. }) => per_task(),
        r => r,
    }
}

/// Whether a record of a system-wide event belongs to the program (`tree`: its processes),
/// adding the processes it starts.
fn in_tree(tree: &mut IdSet, r: &Record) -> bool {
    match r {
        Record::Fork { pid, ppid, .. } => {
            if tree.contains(pid) || tree.contains(ppid) {
                tree.insert(*pid);
                true
            } else {
                false
            }
        }
        Record::Fault { pid, .. } | Record::Exit { pid, .. } | Record::Comm { pid, .. } => {
            tree.contains(pid)
        }
        Record::Lost { .. } => true,
    }
}

fn perf_status(p: &PerfSource, spawn: bool) -> SourceStatus {
    if p.sampled == Sampled::TasksOnly {
        return SourceStatus {
            name: "perf task records".into(),
            active: false,
            note: "PERF_COUNT_SW_DUMMY: which tasks start, exit and are named; no page faults"
                .into(),
        };
    }
    SourceStatus {
        name: "perf page faults".into(),
        active: true,
        note: format!(
            "PERF_COUNT_SW_PAGE_FAULTS, period 1, per-CPU rings, {}{}{}",
            if p.system_wide {
                "system-wide events filtered to the program's processes"
            } else {
                "per-task events, inherited"
            },
            if spawn && !p.system_wide {
                ", enabled at exec"
            } else {
                ""
            },
            if p.exclude_kernel {
                format!(
                    "; user-mode faults only (kernel.perf_event_paranoid = {}, not CAP_PERFMON)",
                    perf::paranoid_level()
                )
            } else {
                "; user and kernel-mode faults".into()
            }
        ),
    }
}

/// Whether a PMU with memory sampling exists; here it is only reported, not used.
fn hw_sampling_note() -> String {
    let pmu = Path::new("/sys/bus/event_source/devices/cpu");
    let ibs = Path::new("/sys/bus/event_source/devices/ibs_op");
    if ibs.exists() {
        "AMD IBS present; not used by this version (page faults only)".into()
    } else if pmu.join("events/mem-loads").exists() {
        "Intel PEBS memory sampling present; not used by this version (page faults only)".into()
    } else {
        "skipped: no hardware PMU with memory sampling on this machine".into()
    }
}

/// Pages per second re-armed in all at floor `floor` out of a start floor of `high`, with the
/// configured rate `rate` (a fraction of `pages` per second; 0: the agents' own, unknown
/// here): each agent's budget is max(rate x its pages, its share of the floor), taken here
/// program-wide.
fn rearm_rate(rate: f64, high: u64, floor: u64, pages: u64) -> f64 {
    let rate = rate.max(0.0) * rate_scale(floor, high);
    (rate * pages as f64).max(floor as f64)
}

/// What the configured re-arm rate is multiplied by while the floor is `floor` pages/s out of
/// a start floor of `high` (see `Session::rate_ppm`).
fn rate_scale(floor: u64, high: u64) -> f64 {
    match high {
        0 => 1.0,
        high => (floor as f64 / high as f64).max(1.0 / MAX_RATE_CUT),
    }
}

#[cfg(test)]
mod tests {
    use super::{age_rows, in_tree, rearm_rate, scale_rows, IdSet, Record, MAX_RATE_CUT};

    #[test]
    fn the_huge_page_mode_is_the_bracketed_word() {
        assert_eq!(super::thp_mode("[always] madvise never\n"), Some("always"));
        assert_eq!(super::thp_mode("always [madvise] never\n"), Some("madvise"));
        assert_eq!(super::thp_mode("always madvise [never]"), Some("never"));
        assert_eq!(super::thp_mode(""), None);
    }

    #[test]
    fn the_rate_falls_with_the_floor_by_four_at_most() {
        assert_eq!(super::rate_scale(600, 600), 1.0);
        assert_eq!(super::rate_scale(150, 300), 0.5);
        assert_eq!(super::rate_scale(75, 300), 0.25);
        assert_eq!(
            super::rate_scale(75, 600),
            0.25,
            "the defaults: 1 % -> 0.25 %"
        );
        assert_eq!(
            super::rate_scale(0, 0),
            1.0,
            "no floor: the rate as configured"
        );
    }

    #[test]
    fn system_wide_records_are_kept_for_the_tree_and_what_it_starts() {
        let mut tree: IdSet = [10].into_iter().collect();
        let fault = |pid| Record::Fault {
            pid,
            tid: pid,
            time: 0,
            addr: 0,
            cpu: 0,
        };
        let fork = |pid, ppid| Record::Fork {
            pid,
            ppid,
            tid: pid,
            time: 0,
        };
        assert!(in_tree(&mut tree, &fault(10)));
        assert!(!in_tree(&mut tree, &fault(99)), "another program's fault");
        assert!(
            !in_tree(&mut tree, &fork(98, 97)),
            "another program's child"
        );
        assert!(!tree.contains(&98));
        // A child of the program (an mpirun's rank), then its own child and its thread.
        assert!(in_tree(&mut tree, &fork(11, 10)));
        assert!(in_tree(&mut tree, &fork(12, 11)));
        assert!(in_tree(&mut tree, &fork(12, 12)));
        assert!(in_tree(&mut tree, &fault(12)));
        assert!(in_tree(&mut tree, &Record::Lost { lost: 3 }));
    }

    #[test]
    fn pages_only_where_blocks_miss_what_two_tasks_share_again_and_again() {
        use super::Granules;
        let g = |block_events, page_events, paired_pages, crowded_pages| Granules {
            block_events,
            page_events,
            paired_pages,
            crowded_pages,
        };
        for watched in [false, true] {
            // Measured (huddle detect, 2026-11-26): layout-f stencil x4 and halo x4.
            assert!(g(0, 263, 88, 0).by_page(watched));
            assert!(g(50, 472, 15, 0).by_page(watched));
            // layout-f stencil x4 at a floor of 2000 pages/s: many pages, each paired about twice.
            assert!(g(1, 2311, 1202, 1).by_page(watched));
            // false-sharing x8: a page pairs once, then a third task crowds it.
            assert!(!g(2, 1092, 1009, 239).by_page(watched));
            // layout-c stencil x4: blocks see enough.
            assert!(!g(231, 334, 35, 1).by_page(watched));
            // Too few events to say.
            assert!(!g(0, 20, 5, 0).by_page(watched));
        }
        // Early in a run most pages have paired once: by page only where watchpoints will
        // take false sharing back.
        assert!(g(0, 40, 35, 0).by_page(true));
        assert!(!g(0, 40, 35, 0).by_page(false));
    }

    #[test]
    fn counts_scale_by_the_fall_of_the_whole_re_arm_rate() {
        // The layout workloads (26,667 pages): the floors decide, 600 -> 75 pages/s.
        let (then, now) = (
            rearm_rate(0.01, 600, 600, 26_667),
            rearm_rate(0.01, 600, 75, 26_667),
        );
        assert_eq!((then, now), (600.0, 75.0));
        // A million pages: the rate term decides, and falls by MAX_RATE_CUT only.
        let (then, now) = (
            rearm_rate(0.01, 600, 600, 1 << 20),
            rearm_rate(0.01, 600, 75, 1 << 20),
        );
        assert!((then / now - MAX_RATE_CUT).abs() < 1e-9, "{then} {now}");
        // The agents' own rate (0 here): the floors.
        assert_eq!(rearm_rate(0.0, 600, 75, 1 << 20), 75.0);
        // Scaled to the lower rate, rounded to the nearest: a count under half of 600 / 75
        // goes.
        let mut rows = vec![vec![0, 1, 3, 4, 8, 100], vec![7]];
        scale_rows(&mut rows, 75, 600);
        assert_eq!(rows, vec![vec![0, 0, 0, 1, 1, 13], vec![1]]);
    }

    #[test]
    fn ageing_takes_a_quarter_rounded_down() {
        let mut rows = vec![vec![0, 1, 3, 4, 7, 100], vec![], vec![8]];
        age_rows(&mut rows);
        assert_eq!(rows, vec![vec![0, 1, 3, 3, 6, 75], vec![], vec![6]]);
        // Repeated ageing fades a count away only down to 3 (3 >> 2 == 0): a trickle stays.
        for _ in 0..20 {
            age_rows(&mut rows);
        }
        assert_eq!(rows[0][5], 3);
    }
}
