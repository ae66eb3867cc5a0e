//! Memory the tasks share, and the futex barrier that orders their rounds.
//!
//! Threads use private anonymous memory (as a threaded program's heap would be); processes
//! use a memfd mapped MAP_SHARED before fork, so every process sees the same pages under the
//! same (device, inode, offset). The control block (barrier, per-task results) is a separate
//! small mapping, shared across fork.

use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// An mmap'ed area, unmapped on drop.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory; concurrent access is ordered by the barrier.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Zeroed anonymous memory; `shared` keeps it shared with children after fork.
    pub fn anonymous(len: usize, shared: bool) -> io::Result<Mapping> {
        let kind = if shared {
            libc::MAP_SHARED
        } else {
            libc::MAP_PRIVATE
        };
        Mapping::map(len, kind | libc::MAP_ANONYMOUS, -1)
    }

    /// A memfd of `len` bytes mapped MAP_SHARED (the fd is closed; the mapping keeps it).
    pub fn memfd(name: &std::ffi::CStr, len: usize) -> io::Result<Mapping> {
        // SAFETY: name is a valid C string; the fd is checked and closed below.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is ours.
        let r = if unsafe { libc::ftruncate(fd, len as libc::off_t) } < 0 {
            Err(io::Error::last_os_error())
        } else {
            Mapping::map(len, libc::MAP_SHARED, fd)
        };
        // SAFETY: fd is ours and no longer needed.
        unsafe { libc::close(fd) };
        r
    }

    fn map(len: usize, flags: i32, fd: i32) -> io::Result<Mapping> {
        let len = len.max(1);
        // SAFETY: a fresh mapping at an address the kernel chooses.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
        })
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from mmap and nothing refers to the area any more.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// CLOCK_MONOTONIC in nanoseconds (the same clock in every process; async-signal-safe).
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub const FLAG_STOP: u32 = 1;
pub const FLAG_ABORT: u32 = 2;

/// Task status values in the control block.
pub const STATUS_RUNNING: u64 = 0;
pub const STATUS_DONE: u64 = 1;
pub const STATUS_ABORTED: u64 = 2;
pub const STATUS_PANICKED: u64 = 3;
/// Pinning failed; the errno is added to this value.
pub const STATUS_PIN_FAILED: u64 = 1 << 32;

#[repr(C)]
struct Header {
    count: AtomicU32,
    generation: AtomicU32,
    flags: AtomicU32,
    phase: AtomicU32,
    start_ns: AtomicU64,
    switch_ns: AtomicU64,
    /// The round (counted from 0 over the whole run) in which the last phase began.
    switch_round: AtomicU64,
    /// When the last task finished.
    end_ns: AtomicU64,
}

/// Per-task fields, before the task's counters.
const TID: usize = 0;
const STATUS: usize = 1;
const ROUNDS: usize = 2;
const ERRORS: usize = 3;
const CHECKSUM: usize = 4;
const READ_BYTES: usize = 5;
const FIELDS: usize = 6;

/// The control block: barrier state, the phase, and each task's results, in a mapping the
/// tasks share. Every per-task field has one writer (its task); the coordinator reads them
/// after the tasks are gone. Task records are padded to 256 B so tasks do not write the same
/// block.
pub struct Control {
    map: Mapping,
    tasks: usize,
    phases: usize,
    record: usize,
}

impl Control {
    pub fn new(tasks: usize, phases: usize, shared: bool) -> io::Result<Control> {
        let words = FIELDS + phases * tasks;
        let record = (words * 8).div_ceil(256) * 256;
        let map = Mapping::anonymous(256 + tasks * record, shared)?;
        Ok(Control {
            map,
            tasks,
            phases,
            record,
        })
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping is page-aligned, zeroed and larger than Header; atomics are
        // valid for any bit pattern.
        unsafe { &*(self.map.ptr() as *const Header) }
    }

    fn word(&self, task: usize, index: usize) -> &AtomicU64 {
        assert!(task < self.tasks && index < FIELDS + self.phases * self.tasks);
        // SAFETY: in bounds (checked above) and 8-byte aligned (256 and record are multiples
        // of 256).
        unsafe { &*(self.map.ptr().add(256 + task * self.record + index * 8) as *const AtomicU64) }
    }

    pub fn tid(&self, t: usize) -> &AtomicU64 {
        self.word(t, TID)
    }
    pub fn status(&self, t: usize) -> &AtomicU64 {
        self.word(t, STATUS)
    }
    pub fn rounds(&self, t: usize) -> &AtomicU64 {
        self.word(t, ROUNDS)
    }
    pub fn errors(&self, t: usize) -> &AtomicU64 {
        self.word(t, ERRORS)
    }
    pub fn checksum(&self, t: usize) -> &AtomicU64 {
        self.word(t, CHECKSUM)
    }
    pub fn read_bytes(&self, t: usize) -> &AtomicU64 {
        self.word(t, READ_BYTES)
    }
    /// Bytes that `reader` has read of `writer`'s data in phase `phase`.
    pub fn counter(&self, phase: usize, reader: usize, writer: usize) -> &AtomicU64 {
        self.word(reader, FIELDS + phase * self.tasks + writer)
    }

    pub fn phase(&self) -> usize {
        self.header().phase.load(Ordering::Acquire) as usize
    }
    pub fn start_ns(&self) -> u64 {
        self.header().start_ns.load(Ordering::Acquire)
    }
    pub fn switch_ns(&self) -> u64 {
        self.header().switch_ns.load(Ordering::Acquire)
    }
    pub fn switch_round(&self) -> u64 {
        self.header().switch_round.load(Ordering::Acquire)
    }
    pub fn end_ns(&self) -> u64 {
        self.header().end_ns.load(Ordering::Acquire)
    }
    pub fn finished_at(&self, now: u64) {
        self.header().end_ns.fetch_max(now, Ordering::AcqRel);
    }
    pub fn stopping(&self) -> bool {
        self.header().flags.load(Ordering::Acquire) & FLAG_STOP != 0
    }
    pub fn aborted(&self) -> bool {
        self.header().flags.load(Ordering::Acquire) & FLAG_ABORT != 0
    }

    /// Makes every task leave its barrier wait and stop (a partner died).
    pub fn abort(&self) {
        let h = self.header();
        h.flags.fetch_or(FLAG_ABORT, Ordering::AcqRel);
        futex_wake(&h.generation);
    }

    /// Waits until all tasks arrived. The last one to arrive calls `decide` with the
    /// [`Decider`] before releasing the others, so every task sees the same decision.
    /// Returns false if the run was aborted.
    pub fn barrier(&self, decide: impl FnOnce(&Decider)) -> bool {
        let h = self.header();
        let generation = h.generation.load(Ordering::Acquire);
        if h.count.fetch_add(1, Ordering::AcqRel) + 1 == self.tasks as u32 {
            h.count.store(0, Ordering::Relaxed);
            decide(&Decider { header: h });
            h.generation.fetch_add(1, Ordering::AcqRel);
            futex_wake(&h.generation);
            return !self.aborted();
        }
        // A short spin catches partners that are nearly there; then sleep on the futex,
        // waking now and then to notice an abort.
        for _ in 0..2000 {
            if h.generation.load(Ordering::Acquire) != generation {
                return !self.aborted();
            }
            std::hint::spin_loop();
        }
        loop {
            if self.aborted() {
                return false;
            }
            if h.generation.load(Ordering::Acquire) != generation {
                return true;
            }
            futex_wait(&h.generation, generation, 200_000_000);
        }
    }
}

/// What the last task at a barrier may change for everyone.
pub struct Decider<'a> {
    header: &'a Header,
}

impl Decider<'_> {
    pub fn start_ns(&self) -> u64 {
        self.header.start_ns.load(Ordering::Relaxed)
    }
    pub fn set_start(&self, now: u64) {
        self.header.start_ns.store(now, Ordering::Relaxed);
    }
    /// Starts `phase` with the next round, `round` (counted over the whole run).
    pub fn switch_phase(&self, phase: usize, round: u64, now: u64) {
        self.header.phase.store(phase as u32, Ordering::Relaxed);
        self.header.switch_ns.store(now, Ordering::Relaxed);
        self.header.switch_round.store(round, Ordering::Relaxed);
    }
    pub fn stop(&self) {
        self.header.flags.fetch_or(FLAG_STOP, Ordering::Relaxed);
    }
}

fn futex_wait(word: &AtomicU32, expected: u32, timeout_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: word is a valid u32 in memory that outlives the call; not FUTEX_PRIVATE, so it
    // works across processes sharing the mapping. EAGAIN/EINTR/ETIMEDOUT just return.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        )
    };
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: as in futex_wait.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn barrier_releases_everyone_with_one_decision() {
        let c = Control::new(4, 1, false).unwrap();
        let decided = AtomicU32::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for round in 0..50u32 {
                        assert!(c.barrier(|d| {
                            decided.fetch_add(1, Ordering::Relaxed);
                            if round == 49 {
                                d.stop();
                            }
                        }));
                        assert_eq!(c.stopping(), round == 49);
                    }
                });
            }
        });
        assert_eq!(decided.load(Ordering::Relaxed), 50);
    }

    #[test]
    fn abort_wakes_waiters() {
        let c = Control::new(3, 1, false).unwrap();
        std::thread::scope(|s| {
            let h = s.spawn(|| c.barrier(|_| ()));
            std::thread::sleep(std::time::Duration::from_millis(50));
            c.abort();
            assert!(!h.join().unwrap());
        });
    }

    #[test]
    fn records_do_not_overlap() {
        let c = Control::new(3, 2, false).unwrap();
        c.counter(1, 2, 2).store(7, Ordering::Relaxed);
        c.tid(2).store(9, Ordering::Relaxed);
        c.checksum(0).store(5, Ordering::Relaxed);
        assert_eq!(c.counter(1, 2, 2).load(Ordering::Relaxed), 7);
        assert_eq!(c.counter(0, 2, 0).load(Ordering::Relaxed), 0);
        assert_eq!(c.tid(2).load(Ordering::Relaxed), 9);
        assert_eq!(c.checksum(0).load(Ordering::Relaxed), 5);
    }
}
