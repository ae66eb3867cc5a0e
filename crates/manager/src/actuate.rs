//! Acting on the program: thread affinity and page placement.

use topology::CpuSet;

/// Why pinning a thread did not happen.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PinError {
    /// The thread exited between listing and pinning: harmless.
    #[error("thread {0} is gone")]
    Gone(u32),
    /// EPERM: huddle may not set this thread's affinity (another user's, no CAP_SYS_NICE).
    #[error("not permitted to set the affinity of thread {0} (EPERM)")]
    Denied(u32),
    /// The CPUs are outside what the thread's cpuset allows.
    #[error("CPUs {cpus} are not allowed for thread {tid} (EINVAL)")]
    NotAllowed {
        /// The thread.
        tid: u32,
        /// The CPUs asked for (OS indexes).
        cpus: CpuSet,
    },
    /// Any other failure of sched_setaffinity(2).
    #[error("sched_setaffinity({tid}): {reason}")]
    Other {
        /// The thread.
        tid: u32,
        /// The OS error, as text.
        reason: String,
    },
}

/// Restricts one thread to `cpus` (OS indexes). Works for any number of CPUs.
pub fn set_affinity(tid: u32, cpus: &CpuSet) -> Result<(), PinError> {
    let Err(e) = cpuset::set_affinity(tid, cpus) else {
        return Ok(());
    };
    Err(match e.raw_os_error() {
        Some(libc::ESRCH) => PinError::Gone(tid),
        Some(libc::EPERM) => PinError::Denied(tid),
        Some(libc::EINVAL) => PinError::NotAllowed {
            tid,
            cpus: cpus.clone(),
        },
        _ => PinError::Other {
            tid,
            reason: e.to_string(),
        },
    })
}

/// Restricts every thread of process `pid` to `cpus` (see [`for_each_thread`]).
pub fn set_process_affinity(pid: u32, cpus: &CpuSet) -> Result<(), PinError> {
    for_each_thread(pid, |tid| set_affinity(tid, cpus))
}

/// Calls `pin` on every thread of process `pid`. Threads that exit meanwhile are skipped;
/// one started meanwhile by a thread not yet pinned is caught by listing again. Gone when
/// the process has no threads left; otherwise the first other error, after every thread
/// was tried.
pub fn for_each_thread(
    pid: u32,
    mut pin: impl FnMut(u32) -> Result<(), PinError>,
) -> Result<(), PinError> {
    let mut done: Vec<u32> = Vec::new();
    let mut first_error = None;
    for _ in 0..3 {
        let todo: Vec<u32> = crate::procs::threads(pid)
            .into_iter()
            .filter(|t| !done.contains(t))
            .collect();
        if todo.is_empty() {
            break;
        }
        for tid in todo {
            match pin(tid) {
                Ok(()) | Err(PinError::Gone(_)) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
            done.push(tid);
        }
    }
    match first_error {
        Some(e) => Err(e),
        None if done.is_empty() => Err(PinError::Gone(pid)),
        None => Ok(()),
    }
}

/// The CPUs a thread may currently run on (OS indexes), or None if it is gone.
pub fn get_affinity(tid: u32) -> Option<CpuSet> {
    cpuset::affinity(tid)
}

/// The CPUs (OS indexes) any thread of `root` and the processes below it may run on now:
/// the union of their affinity masks, which the kernel keeps inside each one's cpuset.
/// Empty if the process is gone.
pub fn tree_cpus(root: u32) -> CpuSet {
    let mut cpus = CpuSet::default();
    for pid in crate::procs::process_tree(root) {
        for tid in crate::procs::threads(pid) {
            cpus.0.extend(get_affinity(tid).unwrap_or_default().0);
        }
    }
    cpus
}

/// move_pages flag: move pages mapped only by this process (<linux/mempolicy.h>).
const MPOL_MF_MOVE: libc::c_int = 1 << 1;

/// Outcome of moving pages.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PageMove {
    /// Pages asked for (the length of `pages`).
    pub requested: usize,
    /// Pages move_pages(2) put on the target node.
    pub moved: usize,
    /// Pages already on the target node.
    pub already_there: usize,
    /// Pages not in memory (never touched, or swapped out): nothing to move.
    pub absent: usize,
    /// Pages that were in memory on another node and are not on the target node after the move.
    pub failed: usize,
}

/// Private, writable, anonymous ranges of a process (heap, anonymous mmaps): the memory a
/// task owns and that should follow it. Shared and file-backed ranges are left alone.
pub fn private_ranges(pid: u32) -> Vec<(u64, u64)> {
    detect::procmaps::read(pid)
        .unwrap_or_default()
        .iter()
        .filter(|v| v.private_anon())
        .map(|v| (v.start, v.end))
        .collect()
}

/// Moves the pages at `pages` (page addresses in process `pid`) to NUMA node `node` with
/// move_pages(2). Pages already there or not in memory are left alone (asked first, so
/// they are not counted as moved).
pub fn move_pages_to(pid: u32, pages: &[u64], node: i32) -> Result<PageMove, std::io::Error> {
    let mut out = PageMove {
        requested: pages.len(),
        ..Default::default()
    };
    if pages.is_empty() {
        return Ok(out);
    }
    let ptrs: Vec<*mut libc::c_void> = pages.iter().map(|&p| p as *mut libc::c_void).collect();
    let mut status = vec![0i32; ptrs.len()];
    // SAFETY: ptrs and status both hold ptrs.len() elements; a null node list only queries.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            pid as libc::pid_t,
            ptrs.len(),
            ptrs.as_ptr(),
            std::ptr::null::<i32>(),
            status.as_mut_ptr(),
            0,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    out.already_there = status.iter().filter(|&&s| s == node).count();
    out.absent = status.iter().filter(|&&s| s < 0).count();
    let sel: Vec<*mut libc::c_void> = (0..ptrs.len())
        .filter(|&i| status[i] >= 0 && status[i] != node)
        .map(|i| ptrs[i])
        .collect();
    if sel.is_empty() {
        return Ok(out);
    }
    let nodes = vec![node; sel.len()];
    let mut st = vec![0i32; sel.len()];
    // SAFETY: sel, nodes and st hold sel.len() elements.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            pid as libc::pid_t,
            sel.len(),
            sel.as_ptr(),
            nodes.as_ptr(),
            st.as_mut_ptr(),
            MPOL_MF_MOVE,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    out.moved = st.iter().filter(|&&s| s == node).count();
    out.failed = st.len() - out.moved;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tid() -> u32 {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::syscall(libc::SYS_gettid) as u32 }
    }

    #[test]
    fn pins_a_thread_and_reads_it_back() {
        let me = tid();
        let before = get_affinity(me).unwrap();
        let cpu = before.to_vec()[0];
        set_affinity(me, &topology::CpuSet::of(&[cpu])).unwrap();
        assert_eq!(get_affinity(me).unwrap(), topology::CpuSet::of(&[cpu]));
        set_affinity(me, &before).unwrap();
        assert_eq!(get_affinity(me).unwrap(), before);
    }

    /// Run in a child (see below): three threads that sleep, besides the test's own.
    #[test]
    #[ignore = "helper process for pins_every_thread_of_a_process"]
    fn thread_holder() {
        if std::env::var_os("HUDDLE_TEST_THREAD_HOLDER").is_none() {
            return;
        }
        for _ in 0..3 {
            std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_secs(30)));
        }
        std::thread::sleep(std::time::Duration::from_secs(30));
    }

    #[test]
    fn pins_every_thread_of_a_process() {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "actuate::tests::thread_holder"])
            .env("HUDDLE_TEST_THREAD_HOLDER", "1")
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        let t0 = std::time::Instant::now();
        while crate::procs::threads(pid).len() < 4 && t0.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let threads = crate::procs::threads(pid);
        let cpu = get_affinity(pid).unwrap().to_vec()[0];
        let pinned = set_process_affinity(pid, &CpuSet::of(&[cpu]));
        let masks: Vec<Option<topology::CpuSet>> =
            threads.iter().map(|&t| get_affinity(t)).collect();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            threads.len() >= 4,
            "the helper started its threads: {threads:?}"
        );
        pinned.unwrap();
        for (t, m) in threads.iter().zip(&masks) {
            assert_eq!(m.as_ref(), Some(&CpuSet::of(&[cpu])), "thread {t} pinned");
        }
        assert_eq!(
            set_process_affinity(pid, &CpuSet::of(&[cpu])),
            Err(PinError::Gone(pid))
        );
    }

    #[test]
    fn gone_threads_and_bad_cpus_are_told_apart() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(
            set_affinity(pid, &topology::CpuSet::of(&[0])),
            Err(PinError::Gone(pid))
        );
        // A CPU far beyond this machine.
        assert!(matches!(
            set_affinity(tid(), &topology::CpuSet::of(&[16_000])),
            Err(PinError::NotAllowed { .. })
        ));
        assert_eq!(get_affinity(pid), None);
    }

    #[test]
    fn moves_own_private_pages_to_node_zero() {
        // Node 0 exists on every Linux machine; the pages are already there on a one-node VM,
        // so this checks the query path and the accounting.
        let buf = vec![1u8; 1 << 20];
        std::hint::black_box(&buf);
        let ranges = private_ranges(std::process::id());
        assert!(!ranges.is_empty());
        let page = buf.as_ptr() as u64 & !4095;
        let pages: Vec<u64> = (0..64).map(|i| page + 4096 * i).collect();
        let r = move_pages_to(std::process::id(), &pages, 0).unwrap();
        assert_eq!(r.requested, 64);
        assert_eq!(r.moved + r.already_there + r.failed + r.absent, 64);
        assert!(
            r.already_there + r.moved >= 60,
            "the buffer is in memory: {r:?}"
        );
        // A node that does not exist is an error, not a panic.
        assert!(
            move_pages_to(std::process::id(), &pages, 4095).is_err() || {
                let r = move_pages_to(std::process::id(), &pages, 4095).unwrap();
                r.moved == 0
            }
        );
    }
}
