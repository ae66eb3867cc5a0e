//! One task's life: pin, announce its TID, then rounds of "write my slots, barrier, read my
//! partners' slots" until the last task at a barrier says stop.
//!
//! Everything a task needs is allocated before it starts, so a forked child allocates nothing
//! (fork from a multi-threaded process leaves the allocator's locks in an unknown state).

use crate::layout::{Layout, Slot};
use crate::shm::{self, Control};
use std::sync::atomic::Ordering;

/// Rounds of each phase run at least this many times, and content repeats with this period,
/// so every (slot, content) pair is read in every run and the checksum does not depend on
/// how many rounds fitted in the time budget.
pub const CONTENT_KEYS: u64 = 4;

/// Consecutive words of a slot differ by this (odd, so a slot never repeats a word).
const STEP: u64 = 0x9E37_79B9_7F4A_7C15;

/// splitmix64's finalizer: a cheap, well-mixing 64-bit hash.
pub fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// What the tasks share: the layout, the data mapping, the control block, the budget.
pub struct Shared<'a> {
    pub layout: &'a Layout,
    pub data: *mut u8,
    pub control: &'a Control,
    pub seconds_ns: u64,
    pub salt: u64,
}

// SAFETY: `data` points into a mapping that outlives the tasks; the barrier orders access.
unsafe impl Send for Shared<'_> {}
unsafe impl Sync for Shared<'_> {}

/// One task's slots and its record of what it read, prepared before the task starts.
pub struct Plan {
    pub task: usize,
    /// Per phase: indexes of the slots this task writes, and of those it reads.
    outgoing: Vec<Vec<usize>>,
    incoming: Vec<Vec<usize>>,
    /// Digest of the first read of each (phase, incoming slot, content key); 0 = not read.
    seen: Vec<u64>,
    /// Where each phase's entries start in `seen`.
    seen_base: Vec<usize>,
    /// The affinity mask to take, in the kernel's layout (made here: the task may run in a
    /// forked child, which must not allocate).
    pin: Option<Vec<u64>>,
}

impl Plan {
    pub fn new(layout: &Layout, task: usize, pin: Option<&[u32]>) -> Plan {
        let mut outgoing = Vec::new();
        let mut incoming = Vec::new();
        let mut seen_base = Vec::new();
        let mut entries = 0;
        for ph in &layout.phases {
            let out: Vec<usize> = (0..ph.slots.len())
                .filter(|&i| ph.slots[i].writer == task)
                .collect();
            let inc: Vec<usize> = (0..ph.slots.len())
                .filter(|&i| ph.slots[i].readers.contains(&task))
                .collect();
            seen_base.push(entries);
            entries += inc.len() * CONTENT_KEYS as usize;
            outgoing.push(out);
            incoming.push(inc);
        }
        let pin = pin.map(|cpus| cpuset::CpuSet::of(cpus).to_words());
        Plan {
            task,
            outgoing,
            incoming,
            seen: vec![0; entries],
            seen_base,
            pin,
        }
    }
}

fn seed(salt: u64, slot: &Slot, key: u64) -> u64 {
    mix(salt ^ mix(slot.id as u64 * CONTENT_KEYS + key))
}

/// Fills the slot's buffer with its content for `key`.
fn write_slot(data: *mut u8, slot: &Slot, buf: usize, seed: u64) {
    let words = slot.chunk / 8;
    for p in 0..slot.pieces {
        // SAFETY: the layout keeps every piece inside the mapping, 8-byte aligned, and no
        // other task touches this slot's buffer during the write half of the round.
        let piece = unsafe {
            std::slice::from_raw_parts_mut(
                data.add(slot.base[buf] + p * slot.stride) as *mut u64,
                words,
            )
        };
        let first = (p * words) as u64;
        for (k, w) in piece.iter_mut().enumerate() {
            *w = seed.wrapping_add((first + k as u64).wrapping_mul(STEP));
        }
    }
}

/// Reads the slot's buffer: (digest of the words, number of words that differ from what the
/// writer wrote).
fn read_slot(data: *const u8, slot: &Slot, buf: usize, seed: u64) -> (u64, u64) {
    let words = slot.chunk / 8;
    let mut digest = 0u64;
    let mut errors = 0u64;
    for p in 0..slot.pieces {
        // SAFETY: as in write_slot; the writer finished before the barrier and will not
        // write this buffer again before this task's next barrier.
        let piece = unsafe {
            std::slice::from_raw_parts(
                data.add(slot.base[buf] + p * slot.stride) as *const u64,
                words,
            )
        };
        let first = (p * words) as u64;
        for (k, &w) in piece.iter().enumerate() {
            let i = first + k as u64;
            errors += u64::from(w != seed.wrapping_add(i.wrapping_mul(STEP)));
            digest = digest.wrapping_add(w.wrapping_mul(2 * i + 1));
        }
    }
    (digest, errors)
}

fn gettid() -> u64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u64 }
}

/// Names the calling thread "wl-task-N" (what `ps`, `top` and a detector's task table show).
fn set_name(task: usize) {
    let mut name = *b"wl-task-\0\0\0\0\0\0\0\0";
    let mut digits = [0u8; 8];
    let (mut t, mut len) = (task, 0);
    loop {
        digits[len] = b'0' + (t % 10) as u8;
        len += 1;
        t /= 10;
        if t == 0 || len == 7 {
            break;
        }
    }
    for k in 0..len {
        name[8 + k] = digits[len - 1 - k];
    }
    // SAFETY: name is NUL-terminated and 16 bytes long, as PR_SET_NAME requires.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
}

/// Runs one task to the end; returns its status (shm::STATUS_*), also stored in the control
/// block.
pub fn run_task(sh: &Shared, plan: &mut Plan) -> u64 {
    let t = plan.task;
    let c = sh.control;
    set_name(t);
    c.tid(t).store(gettid(), Ordering::Release);
    if let Some(words) = &plan.pin {
        if let Err(e) = cpuset::set_affinity_words(0, words) {
            let errno = e.raw_os_error().unwrap_or(0) as u64;
            c.status(t)
                .store(shm::STATUS_PIN_FAILED + errno, Ordering::Release);
            c.abort();
            return shm::STATUS_PIN_FAILED + errno;
        }
    }
    let status = rounds(sh, plan);
    c.status(t).store(status, Ordering::Release);
    c.finished_at(shm::mono_ns());
    status
}

fn rounds(sh: &Shared, plan: &mut Plan) -> u64 {
    let (t, c, layout) = (plan.task, sh.control, sh.layout);
    let phases = layout.phases.len();
    if !c.barrier(|d| d.set_start(shm::mono_ns())) {
        return shm::STATUS_ABORTED;
    }
    let (mut round, mut in_phase, mut ph) = (0u64, 0u64, 0usize);
    loop {
        let buf = (round % 2) as usize;
        let key = in_phase % CONTENT_KEYS;
        let slots = &layout.phases[ph].slots;
        for &s in &plan.outgoing[ph] {
            write_slot(sh.data, &slots[s], buf, seed(sh.salt, &slots[s], key));
        }
        in_phase += 1;
        // The last task to arrive decides, from the clock, whether the next round switches
        // phase or whether this is the last round; everyone sees the same decision.
        let decided = c.barrier(|d| {
            if in_phase < CONTENT_KEYS {
                return;
            }
            let now = shm::mono_ns();
            let elapsed = now.saturating_sub(d.start_ns());
            if ph + 1 < phases {
                if elapsed >= sh.seconds_ns / phases as u64 * (ph as u64 + 1) {
                    d.switch_phase(ph + 1, round + 1, now);
                }
            } else if elapsed >= sh.seconds_ns {
                d.stop();
            }
        });
        if !decided {
            return shm::STATUS_ABORTED;
        }
        let mut read = 0u64;
        for (j, &s) in plan.incoming[ph].iter().enumerate() {
            let slot = &slots[s];
            let (digest, errors) = read_slot(sh.data, slot, buf, seed(sh.salt, slot, key));
            let entry =
                &mut plan.seen[plan.seen_base[ph] + j * CONTENT_KEYS as usize + key as usize];
            if *entry == 0 {
                *entry = digest | 1;
            }
            if errors > 0 {
                c.errors(t).fetch_add(errors, Ordering::Relaxed);
            }
            c.counter(ph, t, slot.writer)
                .fetch_add(slot.bytes() as u64, Ordering::Relaxed);
            read += slot.bytes() as u64;
        }
        c.read_bytes(t).fetch_add(read, Ordering::Relaxed);
        round += 1;
        c.rounds(t).store(round, Ordering::Release);
        if c.stopping() {
            break;
        }
        let next = c.phase();
        if next != ph {
            ph = next;
            in_phase = 0;
        }
    }
    let mut h = mix(t as u64);
    for &d in &plan.seen {
        h = mix(h ^ d);
    }
    c.checksum(t).store(h, Ordering::Release);
    shm::STATUS_DONE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_checks_what_write_wrote() {
        let slot = Slot {
            id: 3,
            writer: 0,
            readers: vec![1],
            base: [0, 4096],
            chunk: 256,
            stride: 1024,
            pieces: 4,
        };
        let mut mem = vec![0u64; 1024];
        let data = mem.as_mut_ptr() as *mut u8;
        write_slot(data, &slot, 1, 42);
        let (d, e) = read_slot(data, &slot, 1, 42);
        assert_eq!(e, 0);
        assert_eq!(read_slot(data, &slot, 1, 42).0, d);
        // Another seed expects other words: every word differs.
        assert_eq!(read_slot(data, &slot, 1, 43).1, 128);
        // Buffer 0 was never written: all 128 words are wrong, the digest is 0.
        assert_eq!(read_slot(data, &slot, 0, 42), (0, 128));
        // One corrupted word is counted and changes the digest.
        mem[512 + 128 + 3] ^= 1;
        let data = mem.as_mut_ptr() as *mut u8;
        let (d2, e2) = read_slot(data, &slot, 1, 42);
        assert_eq!(e2, 1);
        assert_ne!(d2, d);
        // Gaps between pieces are untouched.
        assert_eq!(mem[512 + 32], 0);
    }

    #[test]
    fn thread_names() {
        std::thread::spawn(|| {
            set_name(123);
            let mut buf = [0u8; 16];
            // SAFETY: PR_GET_NAME writes at most 16 bytes.
            unsafe { libc::prctl(libc::PR_GET_NAME, buf.as_mut_ptr()) };
            assert_eq!(&buf[..12], b"wl-task-123\0");
        })
        .join()
        .unwrap();
    }
}
