//! Starting the tasks (threads or forked processes), watching them, and building the report.

use crate::layout::{moved_between_tasks, Layout};
use crate::shm::{self, Control, Mapping};
use crate::task::{self, mix, Plan, Shared};
use crate::{Pattern, WorkloadError};
use matrix::CommMatrix;
use serde::Serialize;
use std::sync::atomic::Ordering;

pub const DEFAULT_SECONDS: f64 = 2.0;
pub const DEFAULT_REGION_BYTES: u64 = 4 << 20;
pub const MAX_SECONDS: f64 = 1e6;

/// Threads of this process, or child processes sharing a memfd mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Threads,
    Processes,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Spec {
    pub pattern: Pattern,
    pub mode: Mode,
    pub tasks: usize,
    /// Time budget; each phase still runs at least [`crate::CONTENT_KEYS`] rounds.
    pub seconds: f64,
    /// Size of each shared region (per pair or per group), in bytes.
    pub region_bytes: u64,
    /// Per task, the CPUs (OS indexes) it pins itself to before the first round.
    pub pin: Option<Vec<Vec<u32>>>,
    /// Sample the rounds done this often (ms) into [`Report::progress`]; 0: never.
    pub progress_ms: u64,
}

impl Spec {
    pub fn new(pattern: Pattern, mode: Mode, tasks: usize) -> Spec {
        Spec {
            pattern,
            mode,
            tasks,
            seconds: DEFAULT_SECONDS,
            region_bytes: DEFAULT_REGION_BYTES,
            pin: None,
            progress_ms: 0,
        }
    }
}

/// What a run did. Serialized as the `huddle.workload/1` JSON summary
/// (docs/workload-json.md); the matrices are written as CSV beside it.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub pattern: Pattern,
    /// The pattern of each phase (two for phase-change).
    pub phases: Vec<Pattern>,
    pub mode: Mode,
    pub tasks: usize,
    /// PID of the process that started the tasks.
    pub pid: u32,
    /// TID (threads) or PID (processes) of each task, in task order.
    pub tids: Vec<u64>,
    pub region_bytes: u64,
    /// Length of the shared data mapping.
    pub mapped_bytes: usize,
    /// Rounds each task completed (all tasks run the same rounds).
    pub iterations: u64,
    /// Rounds per phase.
    pub phase_iterations: Vec<u64>,
    /// From the moment all tasks were ready to the moment the last one finished.
    pub seconds: f64,
    pub iterations_per_second_per_task: f64,
    pub iterations_per_second_total: f64,
    /// Bytes all tasks read of other tasks' (and, for private, their own) data per second.
    pub read_bytes_per_second: f64,
    /// 16 hex digits; equal for equal pattern, tasks and region size.
    pub checksum: String,
    /// Words read that differed from what their writer wrote (0 unless memory was corrupted).
    pub read_errors: u64,
    /// Seconds from the start to the first round of the last phase (phase-change only).
    pub phase_switch_s: Option<f64>,
    /// CLOCK_MONOTONIC of the start and of the phase switch, to line up with other tools.
    pub start_monotonic_ns: u64,
    pub phase_switch_monotonic_ns: Option<u64>,
    /// Wall-clock time of the start (Unix epoch, ns).
    pub start_unix_ns: u64,
    /// With --progress-ms: [CLOCK_MONOTONIC ns, rounds done] every that many ms, to measure
    /// speed over parts of a run (bench/detect compares windows with and without re-arming).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub progress: Vec<[u64; 2]>,
    /// Bytes moved between tasks over the whole run, both directions added (ground-truth.csv).
    #[serde(skip)]
    pub matrix: CommMatrix,
    /// The same per phase.
    #[serde(skip)]
    pub phase_matrices: Vec<CommMatrix>,
}

fn check(spec: &Spec, layout: &Layout) -> Result<(), WorkloadError> {
    if !(spec.seconds.is_finite() && (0.0..=MAX_SECONDS).contains(&spec.seconds)) {
        return Err(WorkloadError::Seconds(spec.seconds));
    }
    // SAFETY: sysconf has no preconditions.
    let phys = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) }.max(0) as u64 * layout.page as u64;
    if phys > 0 && layout.total as u64 > phys / 2 {
        return Err(WorkloadError::Bytes {
            bytes: spec.region_bytes,
            reason: format!(
                "the {} tasks would share {} bytes, more than half of this machine's {} bytes of memory",
                spec.tasks, layout.total, phys
            ),
        });
    }
    if let Some(pin) = &spec.pin {
        if pin.len() != spec.tasks {
            return Err(WorkloadError::Pin(format!(
                "{} locations for {} tasks (give one per task)",
                pin.len(),
                spec.tasks
            )));
        }
        // The kernel's own limit (NR_CPUS at most 8192); masks are sized to fit.
        let limit = 8192;
        for (t, cpus) in pin.iter().enumerate() {
            if cpus.is_empty() {
                return Err(WorkloadError::Pin(format!("task {t} has no CPU")));
            }
            if let Some(c) = cpus.iter().find(|&&c| c >= limit) {
                return Err(WorkloadError::Pin(format!(
                    "CPU {c} of task {t} is beyond the {limit} CPUs Linux supports"
                )));
            }
        }
    }
    Ok(())
}

/// Runs the workload to the end of its time budget.
pub fn run(spec: &Spec) -> Result<Report, WorkloadError> {
    let layout = Layout::new(spec.pattern, spec.tasks, spec.region_bytes)?;
    check(spec, &layout)?;
    let processes = spec.mode == Mode::Processes;
    let control = Control::new(spec.tasks, layout.phases.len(), processes).map_err(|error| {
        WorkloadError::Io {
            what: "mapping the control block",
            error,
        }
    })?;
    let data = if processes {
        Mapping::memfd(c"huddle-workload", layout.total)
    } else {
        Mapping::anonymous(layout.total, false)
    }
    .map_err(|error| WorkloadError::Io {
        what: "mapping the shared data",
        error,
    })?;
    let salt = mix(spec.tasks as u64 ^ mix(spec.region_bytes ^ mix(spec.pattern as u64)));
    let shared = Shared {
        layout: &layout,
        data: data.ptr(),
        control: &control,
        seconds_ns: (spec.seconds * 1e9) as u64,
        salt,
    };
    let plans: Vec<Plan> = (0..spec.tasks)
        .map(|t| Plan::new(&layout, t, spec.pin.as_ref().map(|p| p[t].as_slice())))
        .collect();
    let mut progress = Vec::new();
    let ended = std::sync::atomic::AtomicBool::new(false);
    let failure = std::thread::scope(|s| {
        let sampler = (spec.progress_ms > 0).then(|| {
            let (control, ended) = (&control, &ended);
            let every = std::time::Duration::from_millis(spec.progress_ms);
            s.spawn(move || sample_progress(control, ended, every))
        });
        let failure = if processes {
            run_processes(&shared, plans)
        } else {
            run_threads(&shared, plans)
        };
        ended.store(true, Ordering::Release);
        if let Some(h) = sampler {
            progress = h.join().unwrap_or_default();
        }
        failure
    })?;
    let mut report = report(spec, &layout, &control, salt);
    report.progress = progress;
    if let Some(reason) = failure {
        return Err(WorkloadError::TaskFailed {
            reason,
            report: Box::new(report),
        });
    }
    for t in 0..spec.tasks {
        let status = control.status(t).load(Ordering::Acquire);
        if status >= shm::STATUS_PIN_FAILED {
            return Err(WorkloadError::PinFailed {
                task: t,
                cpus: spec.pin.as_ref().map(|p| p[t].clone()).unwrap_or_default(),
                error: std::io::Error::from_raw_os_error((status - shm::STATUS_PIN_FAILED) as i32),
            });
        }
    }
    Ok(report)
}

/// Rounds task 0 has done, every `every`, until the run ends. Rounds are in lockstep (a
/// barrier ends each), so task 0 speaks for all.
fn sample_progress(
    control: &Control,
    ended: &std::sync::atomic::AtomicBool,
    every: std::time::Duration,
) -> Vec<[u64; 2]> {
    let mut samples = Vec::new();
    loop {
        let over = ended.load(Ordering::Acquire);
        samples.push([shm::mono_ns(), control.rounds(0).load(Ordering::Acquire)]);
        if over {
            return samples;
        }
        std::thread::sleep(every);
    }
}

/// The first task that failed on its own (not because a partner's failure aborted it).
fn root_cause(control: &Control, n: usize, died: &[Option<String>]) -> Option<String> {
    if let Some(d) = died.iter().flatten().next() {
        return Some(d.clone());
    }
    for t in 0..n {
        match control.status(t).load(Ordering::Acquire) {
            shm::STATUS_PANICKED => return Some(format!("task {t} panicked")),
            s if s >= shm::STATUS_PIN_FAILED => return None, // reported as PinFailed
            _ => {}
        }
    }
    if control.aborted() {
        return Some("the run was aborted".into());
    }
    None
}

fn run_threads(sh: &Shared, plans: Vec<Plan>) -> Result<Option<String>, WorkloadError> {
    let n = plans.len();
    let mut spawn_error = None;
    std::thread::scope(|s| {
        for mut plan in plans {
            let t = plan.task;
            let spawned = std::thread::Builder::new()
                .name(format!("wl-task-{t}"))
                .spawn_scoped(s, move || {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        task::run_task(sh, &mut plan)
                    }));
                    if r.is_err() {
                        sh.control
                            .status(t)
                            .store(shm::STATUS_PANICKED, Ordering::Release);
                        sh.control.abort();
                    }
                });
            if let Err(error) = spawned {
                sh.control.abort();
                spawn_error = Some(error);
                break;
            }
        }
    });
    if let Some(error) = spawn_error {
        return Err(WorkloadError::Io {
            what: "starting a task thread",
            error,
        });
    }
    Ok(root_cause(sh.control, n, &vec![None; n]))
}

/// How a child that had not finished its rounds went away.
fn describe(status: i32) -> String {
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        // SAFETY: strsignal returns a pointer to a static string, or NULL.
        let name = unsafe {
            let p = libc::strsignal(sig);
            if p.is_null() {
                String::new()
            } else {
                format!(" ({})", std::ffi::CStr::from_ptr(p).to_string_lossy())
            }
        };
        format!("was killed by signal {sig}{name}")
    } else {
        format!(
            "exited with status {} before finishing",
            libc::WEXITSTATUS(status)
        )
    }
}

fn run_processes(sh: &Shared, plans: Vec<Plan>) -> Result<Option<String>, WorkloadError> {
    let n = plans.len();
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    let mut pids: Vec<libc::pid_t> = Vec::with_capacity(n);
    let mut fork_error = None;
    for mut plan in plans {
        // SAFETY: the child only runs run_task, which allocates nothing and uses
        // async-signal-safe system calls, then leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: plain system calls; _exit never returns.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
            }
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                task::run_task(sh, &mut plan)
            }));
            let code = match r {
                Ok(shm::STATUS_DONE) => 0,
                Ok(shm::STATUS_ABORTED) => 1,
                Ok(_) => 3,
                Err(_) => {
                    sh.control
                        .status(plan.task)
                        .store(shm::STATUS_PANICKED, Ordering::Release);
                    sh.control.abort();
                    4
                }
            };
            // SAFETY: leaves the child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        if pid < 0 {
            fork_error = Some(std::io::Error::last_os_error());
            sh.control.abort();
            break;
        }
        pids.push(pid);
    }
    // Reap our own children only (never waitpid(-1): the caller may have others). Poll, so
    // that a child that dies while its partners wait at a barrier aborts the run.
    let mut died: Vec<Option<String>> = vec![None; n];
    let mut alive: Vec<usize> = (0..pids.len()).collect();
    while !alive.is_empty() {
        let mut reaped = false;
        alive.retain(|&t| {
            let mut status = 0;
            // SAFETY: status is a valid out-pointer; pids[t] is our child.
            let r = unsafe { libc::waitpid(pids[t], &mut status, libc::WNOHANG) };
            if r == 0 {
                return true;
            }
            reaped = true;
            // A task that recorded an end (done, aborted, panicked, pin failure) is accounted
            // for by its status; one still "running" died under us.
            if r > 0 && sh.control.status(t).load(Ordering::Acquire) == shm::STATUS_RUNNING {
                died[t] = Some(format!("task {t} (pid {}) {}", pids[t], describe(status)));
                sh.control.abort();
            }
            false
        });
        if !reaped {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    if let Some(error) = fork_error {
        return Err(WorkloadError::Io {
            what: "forking a task process",
            error,
        });
    }
    Ok(root_cause(sh.control, n, &died))
}

fn report(spec: &Spec, layout: &Layout, control: &Control, salt: u64) -> Report {
    let n = spec.tasks;
    let phases = layout.phases.len();
    let iterations = (0..n)
        .map(|t| control.rounds(t).load(Ordering::Acquire))
        .max()
        .unwrap_or(0);
    let switch_round = control.switch_round();
    let phase_iterations = if phases > 1 {
        let first = if switch_round > 0 {
            switch_round
        } else {
            iterations
        };
        vec![first, iterations - first]
    } else {
        vec![iterations]
    };
    let start = control.start_ns();
    let end = control.end_ns().max(start);
    let seconds = (end - start) as f64 / 1e9;
    let per_second = |x: f64| if seconds > 0.0 { x / seconds } else { 0.0 };
    let read_errors: u64 = (0..n)
        .map(|t| control.errors(t).load(Ordering::Acquire))
        .sum();
    let mut checksum = salt;
    for t in 0..n {
        checksum = mix(checksum ^ control.checksum(t).load(Ordering::Acquire));
    }
    if read_errors > 0 {
        // Corrupted reads change the checksum even when the first reads were intact.
        checksum = mix(checksum ^ mix(read_errors));
    }
    let read_bytes: u64 = (0..n)
        .map(|t| control.read_bytes(t).load(Ordering::Acquire))
        .sum();
    let mut matrix = CommMatrix::zeros(n);
    let mut phase_matrices = Vec::new();
    for ph in 0..phases {
        let mut directed = CommMatrix::zeros(n);
        for reader in 0..n {
            for writer in 0..n {
                let b = control.counter(ph, reader, writer).load(Ordering::Acquire);
                directed.set(writer, reader, b as f64);
            }
        }
        let m = moved_between_tasks(&directed);
        for i in 0..n {
            for j in 0..n {
                matrix.add(i, j, m.get(i, j));
            }
        }
        phase_matrices.push(m);
    }
    let switch_ns = (phases > 1 && switch_round > 0).then(|| control.switch_ns());
    let now_mono = shm::mono_ns();
    let now_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    Report {
        schema: "huddle.workload/1",
        pattern: spec.pattern,
        phases: layout.phases.iter().map(|p| p.pattern).collect(),
        mode: spec.mode,
        tasks: n,
        pid: std::process::id(),
        tids: (0..n)
            .map(|t| control.tid(t).load(Ordering::Acquire))
            .collect(),
        region_bytes: spec.region_bytes,
        mapped_bytes: layout.total,
        iterations,
        phase_iterations,
        seconds,
        iterations_per_second_per_task: per_second(iterations as f64),
        iterations_per_second_total: per_second((iterations * n as u64) as f64),
        read_bytes_per_second: per_second(read_bytes as f64),
        checksum: format!("{checksum:016x}"),
        read_errors,
        phase_switch_s: switch_ns.map(|s| s.saturating_sub(start) as f64 / 1e9),
        start_monotonic_ns: start,
        phase_switch_monotonic_ns: switch_ns,
        start_unix_ns: now_unix.saturating_sub(now_mono.saturating_sub(start)),
        progress: Vec::new(),
        matrix,
        phase_matrices,
    }
}
