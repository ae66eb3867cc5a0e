//! Busy threads of this process, for the threads-only mode (HUDDLE_AGENT_THREADS_ONLY=1).
//!
//! Where another source counts the traffic between processes (the PMPI agent, for MPI
//! ranks), this process's faults can only add what its own threads share, and a process
//! with one busy thread shares nothing with itself: re-arming there costs the program its
//! faults for nothing (HPCC's single-threaded ranks: start floor and rate of four ranks,
//! about 700 pages a second for 1.5 s, at 30-70 us of the program's time each). So in that
//! mode the agent re-arms only while two of its threads or more are busy
//! (agent_abi::busy's rule), judged every CHECK_NS from their CPU clocks, read here.

use libc::c_int;

pub use agent_abi::busy::{Threads, CHECK_NS, TRACKED};

/// Fills `out` with (tid, CPU time in ns) of this process's threads and returns how many:
/// the tids from `dir` (see for_each_tid), each thread's CPU time from its CPU clock.
///
/// # Safety
/// `dir` is a descriptor of /proc/self/task (or -1: none).
pub unsafe fn sample(dir: c_int, out: &mut [(u32, u64)]) -> usize {
    let mut n = 0;
    for_each_tid(dir, |tid| {
        if n < out.len() {
            out[n] = (tid, thread_cpu_ns(tid));
            n += 1;
        }
    });
    n
}

/// Calls `f` with each thread id of this process: the entries of `dir` (/proc/self/task,
/// opened at start and read again from offset 0). No allocation, no new descriptor.
///
/// # Safety
/// `dir` is a descriptor of /proc/self/task (or -1: none).
pub unsafe fn for_each_tid(dir: c_int, mut f: impl FnMut(u32)) {
    if dir < 0 || libc::lseek(dir, 0, libc::SEEK_SET) < 0 {
        return;
    }
    let mut buf = [0u8; 4096];
    loop {
        let len = libc::syscall(libc::SYS_getdents64, dir, buf.as_mut_ptr(), buf.len());
        if len <= 0 {
            return;
        }
        let mut off = 0usize;
        while off + 19 < len as usize {
            // struct linux_dirent64: ino u64, off i64, reclen u16, type u8, name (NUL-ended).
            let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
            if reclen == 0 {
                return;
            }
            if let Some(tid) = parse_tid(&buf[off + 19..(off + reclen).min(len as usize)]) {
                f(tid);
            }
            off += reclen;
        }
    }
}

/// A directory entry's name as a thread id ("." and ".." are not).
fn parse_tid(name: &[u8]) -> Option<u32> {
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let name = &name[..end];
    if name.is_empty() || !name.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(name).ok()?.parse().ok()
}

/// CPU time of thread `tid` of this process (0 once it is gone): its CPU clock, as the
/// kernel encodes a thread's scheduler clock (MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)).
fn thread_cpu_ns(tid: u32) -> u64 {
    super::clock_ns((!(tid as libc::clockid_t) << 3) | 6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_threads_are_sampled() {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spin = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        // SAFETY: a descriptor of our own /proc/self/task, closed below.
        let dir = unsafe {
            libc::open(
                c"/proc/self/task".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        assert!(dir >= 0);
        let mut out = [(0, 0); TRACKED];
        let mut t = Threads::default();
        let n = unsafe { sample(dir, &mut out) };
        assert!(n >= 2, "this thread and the spinner: {n}");
        let me = unsafe { libc::gettid() } as u32;
        assert!(out[..n].iter().any(|&(tid, cpu)| tid == me && cpu > 0));
        t.update(&out[..n], 0);
        std::thread::sleep(std::time::Duration::from_millis(200));
        let n2 = unsafe { sample(dir, &mut out) };
        // The spinner ran for much of the 200 ms, this thread slept; judged as if 20 ms had
        // passed (4 ms of CPU make a thread busy), so that a loaded machine passes too.
        assert!(t.update(&out[..n2], 20_000_000) >= 1);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        spin.join().unwrap();
        unsafe { libc::close(dir) };
        assert_eq!(parse_tid(b"1234\0\0\0"), Some(1234));
        assert_eq!(parse_tid(b"..\0"), None);
    }
}
