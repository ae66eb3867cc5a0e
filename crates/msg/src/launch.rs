//! Starting a job: create the segment, fork and pin N ranks, forward signals, watch them.
//!
//! A rank that dies (a signal, a nonzero exit, or an exit without MPI_Finalize) or calls
//! MPI_Abort raises the segment's abort flag, which every rank sees in its progress loop and
//! fails on; ranks still alive after the grace period are killed. The launcher returns every
//! rank's exit and the worst status.

use crate::rules::{Class, RuleTable};
use crate::shm::{JobSpec, Segment, NKEYS, NONE, STATE_FINALIZED};
use crate::MsgError;
use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

pub struct Launch {
    pub program: OsString,
    pub args: Vec<OsString>,
    pub job: JobSpec,
    /// How long ranks get to stop by themselves after one failed, before SIGKILL.
    pub grace: Duration,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RankEnd {
    Exited(i32),
    Signaled(i32),
}

impl RankEnd {
    /// Shell convention: the code, or 128 + signal.
    pub fn code(&self) -> i32 {
        match *self {
            RankEnd::Exited(c) => c,
            RankEnd::Signaled(s) => 128 + s,
        }
    }
}

pub struct Outcome {
    pub ends: Vec<RankEnd>,
    /// The first failure, as a sentence, if any rank failed.
    pub failure: Option<String>,
    /// The worst exit status over ranks (0 if all succeeded).
    pub status: i32,
}

/// The job description for ranks pinned to `pus` (logical PU indexes of `m`, one per rank):
/// placement keys, the pair class matrix from `Machine::level`, the rules, and a ring size
/// that keeps the segment near 256 MiB at most (512 KiB rings up to 22 ranks).
pub fn job_spec(
    m: &topology::Machine,
    pus: &[usize],
    rules: &RuleTable,
) -> Result<JobSpec, MsgError> {
    let n = pus.len();
    if let Some(&bad) = pus.iter().find(|&&p| p >= m.num_pus()) {
        return Err(MsgError::BadJob(format!("PU {bad} is not on this machine")));
    }
    let key = |v: Option<u32>| v.unwrap_or(NONE);
    let keys: Vec<[u32; NKEYS]> = pus
        .iter()
        .map(|&p| {
            let u = &m.pus[p];
            [
                key(u.package),
                key(u.numa),
                key(u.l3),
                key(u.l2),
                key(u.core),
            ]
        })
        .collect();
    let mut classes = Vec::with_capacity(n * n);
    for &a in pus {
        for &b in pus {
            classes.push(Class::from_level(m.level(a, b)));
        }
    }
    let ring_bytes = ((256usize << 20) / (n * n)).clamp(64 << 10, 512 << 10) / 4096 * 4096;
    Ok(JobSpec {
        pu_os: pus.iter().map(|&p| m.pus[p].os_index).collect(),
        keys,
        classes,
        rules: rules.to_array()?,
        ring_bytes,
    })
}

static PENDING_SIGNAL: AtomicI32 = AtomicI32::new(0);
const FORWARDED: [i32; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

extern "C" fn note_signal(sig: libc::c_int) {
    PENDING_SIGNAL.store(sig, Ordering::SeqCst);
}

fn signal_name(sig: i32) -> String {
    let p = unsafe { libc::strsignal(sig) };
    if p.is_null() {
        return format!("signal {sig}");
    }
    let s = unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy();
    format!("signal {sig} ({s})")
}

/// Runs the job to completion.
pub fn run(l: Launch) -> Result<Outcome, MsgError> {
    let n = l.job.pu_os.len();
    let seg = Segment::create(&l.job)?;
    let mut old: Vec<(i32, libc::sighandler_t)> = Vec::new();
    for &s in &FORWARDED {
        let h = note_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        old.push((s, unsafe { libc::signal(s, h) }));
    }
    let result = supervise(&l, &seg, n);
    for (s, h) in old {
        unsafe { libc::signal(s, h) };
    }
    result
}

fn spawn_rank(l: &Launch, seg: &Segment, rank: usize) -> Result<Child, MsgError> {
    let n = l.job.pu_os.len();
    let pu = l.job.pu_os[rank] as usize;
    let parent = unsafe { libc::getpid() };
    let mut cmd = Command::new(&l.program);
    cmd.args(&l.args)
        .env("HUDDLE_MSG_FD", seg.fd().to_string())
        .env("HUDDLE_MSG_RANK", rank.to_string())
        .env("HUDDLE_MSG_SIZE", n.to_string())
        .env("HUDDLE_MSG_PU", pu.to_string());
    unsafe {
        cmd.pre_exec(move || {
            // Only async-signal-safe calls here: we are between fork and exec.
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(pu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Die with the launcher instead of waiting forever for peers.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    cmd.spawn().map_err(|source| MsgError::Spawn {
        program: l.program.to_string_lossy().into_owned(),
        source,
    })
}

fn supervise(l: &Launch, seg: &Segment, n: usize) -> Result<Outcome, MsgError> {
    let mut children: Vec<Child> = Vec::with_capacity(n);
    for r in 0..n {
        match spawn_rank(l, seg, r) {
            Ok(c) => children.push(c),
            Err(e) => {
                for c in &mut children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(e);
            }
        }
    }
    let mut ends: Vec<Option<RankEnd>> = vec![None; n];
    let mut failure: Option<String> = None;
    let mut deadline: Option<Instant> = None;
    let mut killed = false;
    loop {
        for (r, c) in children.iter_mut().enumerate() {
            if ends[r].is_some() {
                continue;
            }
            let Ok(Some(st)) = c.try_wait() else { continue };
            let end = match (st.code(), st.signal()) {
                (Some(code), _) => RankEnd::Exited(code),
                (None, Some(sig)) => RankEnd::Signaled(sig),
                _ => RankEnd::Exited(1),
            };
            let finalized = seg.rank(r).state.load(Ordering::SeqCst) == STATE_FINALIZED;
            let why = match &end {
                RankEnd::Signaled(s) => Some(format!("was killed by {}", signal_name(*s))),
                RankEnd::Exited(0) if !finalized && n > 1 => {
                    Some("exited without calling MPI_Finalize".to_string())
                }
                RankEnd::Exited(0) => None,
                RankEnd::Exited(c) => Some(format!("exited with status {c}")),
            };
            if let Some(why) = why {
                if failure.is_none() {
                    let pid = c.id();
                    // A rank that called MPI_Abort (or hit a fatal error) raised the abort
                    // before it and the others exited: that is the cause to report.
                    failure = Some(match seg.aborted() {
                        Some((a, code)) => format!("rank {a} aborted the job (code {code})"),
                        None => format!("rank {r} (pid {pid}) {why}"),
                    });
                    seg.raise_abort(r as i32, end.code().max(1));
                    deadline.get_or_insert(Instant::now() + l.grace);
                }
            }
            ends[r] = Some(end);
        }
        if let (Some((r, code)), None) = (seg.aborted(), deadline) {
            // A rank called MPI_Abort or hit a fatal MPI error.
            failure.get_or_insert(format!("rank {r} aborted the job (code {code})"));
            deadline = Some(Instant::now() + l.grace);
        }
        let sig = PENDING_SIGNAL.swap(0, Ordering::SeqCst);
        if sig != 0 {
            for (r, c) in children.iter().enumerate() {
                if ends[r].is_none() {
                    unsafe { libc::kill(c.id() as i32, sig) };
                }
            }
            deadline.get_or_insert(Instant::now() + l.grace);
        }
        if ends.iter().all(Option::is_some) {
            break;
        }
        if !killed && deadline.is_some_and(|d| Instant::now() >= d) {
            for (r, c) in children.iter_mut().enumerate() {
                if ends[r].is_none() {
                    let _ = c.kill();
                }
            }
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let ends: Vec<RankEnd> = ends
        .into_iter()
        .map(|e| e.unwrap_or(RankEnd::Exited(1)))
        .collect();
    let mut status = ends.iter().map(RankEnd::code).max().unwrap_or(0);
    if status == 0 && failure.is_some() {
        status = 1;
    }
    Ok(Outcome {
        ends,
        failure,
        status,
    })
}
