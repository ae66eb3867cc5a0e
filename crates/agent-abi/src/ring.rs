//! The shared-memory ring through which the preloaded agent reports to the detector.
//!
//! One file per target process, `agent-<pid>.ring` (see [`file_name`]) in the session's private directory
//! (mode 0700, file 0600): a header with counters and a single-producer single-consumer
//! ring of [`Record`]s. The agent (producer) writes records then publishes `head`
//! (release); the detector reads up to `head` (acquire) and publishes `tail`. When the ring
//! is full the agent drops the record and counts it in `dropped`: it never waits.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// First 8 bytes of a complete ring file (`HUDDLEAG`, little-endian): the agent writes it
/// last, after the rest of the header; the detector maps no ring without it.
pub const MAGIC: u64 = u64::from_le_bytes(*b"HUDDLEAG");
/// Layout version of [`Header`] and [`Record`]; the detector ignores rings of another one.
/// Bump it whenever either changes.
pub const VERSION: u32 = 13;
/// Records per ring (power of two).
pub const CAPACITY: u32 = 1 << 15;
/// Ring files one process may create: its first, and one per program exec'd in it.
pub const MAX_EXECS: u32 = 16;

/// The ring file of process `pid`: `agent-PID.ring`, or `agent-PID.N.ring` for the N-th
/// program exec'd in it (the agent of what ran there before the exec, a fork child's or a
/// shell's, holds the earlier name; the detector reads the highest N of a pid).
pub fn file_name(pid: u32, n: u32) -> String {
    match n {
        0 => format!("agent-{pid}.ring"),
        n => format!("agent-{pid}.{n}.ring"),
    }
}

/// (pid, N) of a ring file name made by [`file_name`].
pub fn parse_file_name(name: &str) -> Option<(u32, u32)> {
    let rest = name.strip_prefix("agent-")?.strip_suffix(".ring")?;
    let (pid, n) = rest.split_once('.').unwrap_or((rest, "0"));
    Some((pid.parse().ok()?, n.parse().ok()?))
}

/// Why private (non-shared) memory is or is not being re-armed.
pub mod private_mode {
    /// Not re-armed: disabled, or not decided yet (the header starts zeroed).
    pub const OFF: u32 = 0;
    /// userfaultfd drop-and-restore is active.
    pub const UFFD: u32 = 1;
    /// The program uses userfaultfd itself; the agent stepped back.
    pub const YIELDED_TO_PROGRAM: u32 = 2;
    /// userfaultfd is unavailable (errno in `private_errno`).
    pub const UNAVAILABLE: u32 = 3;
    /// The agent's helper threads could not start (pthread_create's error in
    /// `private_errno`): nothing, private or shared, is re-armed in this process.
    pub const NO_HELPERS: u32 = 4;
    /// The program locked memory (mlock, mlockall): nothing, private or shared, is re-armed
    /// from then on.
    pub const LOCKED_BY_PROGRAM: u32 = 5;
}

/// How the agent takes a dropped private page out ([`Header::saves_by`]).
pub mod saves_by {
    /// Not at all (private memory is not re-armed, or the vault could not be made).
    pub const NONE: u32 = 0;
    /// UFFDIO_MOVE into its vault (Linux 6.8).
    pub const MOVE: u32 = 1;
    /// mremap(MREMAP_DONTUNMAP) into its vault (Linux 5.7; without UFFDIO_MOVE, or with
    /// HUDDLE_AGENT_MOVE=0).
    pub const REMAP: u32 = 2;
}

/// The start of a ring file, shared with the agent (`repr(C)`; change it only with
/// [`VERSION`]). Fields not marked "written by the detector" are written by the agent and
/// read by the detector.
#[repr(C)]
pub struct Header {
    /// [`MAGIC`], written by the agent once the rest of the header is set.
    pub magic: u64,
    /// [`VERSION`] of the agent that made the file.
    pub version: u32,
    /// [`CAPACITY`] of the agent that made the file (the detector checks `version` instead).
    pub capacity: u32,
    /// Process id of the agent's process, written once at creation.
    pub pid: u32,
    /// Thread id of an agent helper thread (each writes its own at start); not read by the
    /// detector, which tells helpers by their name `huddle-agent`.
    pub helper_tid: AtomicU32,
    /// Records published so far (a count; the slot is `head % CAPACITY`): written by the
    /// agent with release, read by the detector with acquire.
    pub head: AtomicU64,
    /// Records consumed so far: written by the detector with release, read by the agent
    /// with acquire to tell a full ring.
    pub tail: AtomicU64,
    /// Records the agent dropped because the ring was full.
    pub dropped: AtomicU64,
    /// Pages of shared mappings whose PTEs were dropped (MADV_DONTNEED).
    pub rearmed_shared: AtomicU64,
    /// Pages of private anonymous memory dropped (saved aside, userfaultfd).
    pub rearmed_private: AtomicU64,
    /// Faults on re-armed pages the agent resolved.
    pub handled: AtomicU64,
    /// Pages eligible for re-arming at the last scan of /proc/self/maps.
    pub candidate_pages: AtomicU64,
    /// Re-arm or resolve calls that failed (the page is then left alone).
    pub errors: AtomicU64,
    /// One of the [`private_mode`] values: whether private memory is re-armed.
    pub private_mode: AtomicU32,
    /// The errno that made userfaultfd unavailable, when `private_mode` is
    /// [`private_mode::UNAVAILABLE`]; 0 otherwise.
    pub private_errno: AtomicU32,
    /// Helper ticks so far (a liveness sign).
    pub ticks: AtomicU64,
    /// Written by the detector: this agent's part of the program-wide re-arm floor, in pages
    /// per second (the floor divided among the program's live agents); 0 = its own floor.
    pub floor_share: AtomicU64,
    /// CPU time (CLOCK_THREAD_CPUTIME_ID, ns) of the re-arm thread so far, stored after each
    /// re-arm pass: with `fault_cpu_ns`, what the agent costs apart from the faults it causes.
    pub rearm_cpu_ns: AtomicU64,
    /// CPU time (CLOCK_THREAD_CPUTIME_ID, ns) of the fault thread so far, stored every 16th
    /// wake-up and when idle.
    pub fault_cpu_ns: AtomicU64,
    /// Written by the detector: the program's live agents (shared pages count once).
    pub live_agents: AtomicU64,
    /// Written by the detector: nonzero while re-arming is paused (`huddle detect` got
    /// SIGUSR1); the agent then takes no pages out until it is zero again.
    pub paused: AtomicU64,
    /// Written by the detector: the share of its pages the agent re-arms per second, in
    /// millionths (lower while the pattern holds); 0 = its own rate.
    pub rate_ppm: AtomicU64,
    /// Scans of /proc/self/maps that found its text changed: while this stays the same the
    /// detector keeps its copy of the process's mappings.
    pub maps_changes: AtomicU64,
    /// Pages of file-backed private data (an object's .data) the agent replaced by anonymous
    /// copies at start so that they can be re-armed (see the agent's adopt module).
    pub adopted_pages: AtomicU64,
    /// Private pages the agent found shared by two tasks or more, which it re-arms more
    /// often (see the agent's focus module).
    pub focus_shared: AtomicU64,
    /// Re-arms the agent gave the pages of `focus_shared`.
    pub focus_rearms: AtomicU64,
    /// Written by the detector: nonzero while the agent is dormant: it registers no more
    /// memory with userfaultfd and re-arms nothing (`huddle run` on a machine where the
    /// matrix cannot change a placement).
    pub dormant: AtomicU64,
    /// Written by the detector: the last [`APART_SLOTS`] private pages whose two tasks it
    /// found touching only their own parts of the page (false sharing, see the detector's
    /// edges module), page `n` at `apart_pages[n % APART_SLOTS]`, then `apart_told` = n + 1
    /// (release). The agent stops re-arming them for the tasks' sake.
    pub apart_pages: [AtomicU64; APART_SLOTS],
    /// Written by the detector: pages found apart so far (see `apart_pages`).
    pub apart_told: AtomicU64,
    /// `apart_told` as the agent last read it: the pages found apart that it keeps out of its
    /// focus table (all but any that left the list before it read them).
    pub apart_heard: AtomicU64,
    /// How the agent takes dropped private pages into its vault: [`saves_by`].
    pub saves_by: AtomicU32,
    /// Of `rearmed_private`, transparent huge pages re-armed whole (see the agent's huge
    /// module): one each, though it takes 512 small pages out.
    pub rearmed_huge: AtomicU64,
}

/// Pages found apart the header holds (see [`Header::apart_pages`]): the agent reads them
/// at every tick, and the detector finds a few a second at most.
pub const APART_SLOTS: usize = 32;

/// A fault the agent resolved itself: task `tid` touched `addr` at `time` (CLOCK_MONOTONIC ns).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C)]
pub struct Record {
    /// CLOCK_MONOTONIC ns when the agent resolved the fault.
    pub time: u64,
    /// The faulting address as userfaultfd gives it: exact where the kernel offers
    /// UFFD_FEATURE_EXACT_ADDRESS (Linux 5.18), else page-aligned.
    pub addr: u64,
    /// Kernel thread id of the faulting thread (not a task index).
    pub tid: u32,
    /// [`KIND_FAULT`]; the detector does not read it.
    pub kind: u32,
}

/// The only record kind: a fault the agent resolved (read or write).
pub const KIND_FAULT: u32 = 1;

/// Size of the ring file in bytes.
pub const fn file_size() -> usize {
    std::mem::size_of::<Header>().next_multiple_of(64)
        + CAPACITY as usize * std::mem::size_of::<Record>()
}

/// A view of a mapped ring file (either side).
pub struct RingView {
    base: *mut u8,
}

// SAFETY: all shared fields are atomics; records are written before `head` is published.
unsafe impl Send for RingView {}

impl RingView {
    /// # Safety
    /// `base` must point at a mapping of at least [`file_size`] bytes that stays mapped.
    pub unsafe fn new(base: *mut u8) -> RingView {
        RingView { base }
    }

    /// The ring's header; see each field for which side writes it.
    pub fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a Header (see `new`).
        unsafe { &*(self.base as *const Header) }
    }

    fn slot(&self, i: u64) -> *mut Record {
        let off = std::mem::size_of::<Header>().next_multiple_of(64);
        // SAFETY: i is reduced modulo CAPACITY, inside the mapping.
        unsafe { (self.base.add(off) as *mut Record).add((i % CAPACITY as u64) as usize) }
    }

    /// Producer: appends, or counts a drop when full. Never blocks, never allocates.
    pub fn push(&self, r: Record) {
        let h = self.header();
        let head = h.head.load(Ordering::Relaxed);
        if head - h.tail.load(Ordering::Acquire) >= CAPACITY as u64 {
            h.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // SAFETY: the slot is outside the consumer's window until head moves.
        unsafe { std::ptr::write_volatile(self.slot(head), r) };
        h.head.store(head + 1, Ordering::Release);
    }

    /// Detector: tells the agent that `page` was found apart (see [`Header::apart_pages`]).
    pub fn tell_apart(&self, page: u64) {
        let h = self.header();
        let n = h.apart_told.load(Ordering::Relaxed);
        h.apart_pages[n as usize % APART_SLOTS].store(page, Ordering::Relaxed);
        h.apart_told.store(n + 1, Ordering::Release);
    }

    /// Agent: hands `f` the pages found apart since `*seen` of them were read (the last
    /// [`APART_SLOTS`] at most) and moves `*seen` on.
    pub fn read_apart(&self, seen: &mut u64, mut f: impl FnMut(u64)) {
        let h = self.header();
        let told = h.apart_told.load(Ordering::Acquire);
        let from = (*seen)
            .max(told.saturating_sub(APART_SLOTS as u64))
            .min(told);
        for n in from..told {
            f(h.apart_pages[n as usize % APART_SLOTS].load(Ordering::Relaxed));
        }
        *seen = told;
    }

    /// Consumer: hands every published record to `f`.
    pub fn drain(&self, mut f: impl FnMut(Record)) -> u64 {
        let h = self.header();
        let head = h.head.load(Ordering::Acquire);
        let mut tail = h.tail.load(Ordering::Relaxed);
        // A corrupt head (the target scribbled on it) must not make us loop for long.
        if head < tail || head - tail > CAPACITY as u64 {
            h.tail.store(head, Ordering::Release);
            return 0;
        }
        let n = head - tail;
        while tail < head {
            // SAFETY: published slots are complete (release/acquire on head).
            f(unsafe { std::ptr::read_volatile(self.slot(tail)) });
            tail += 1;
        }
        h.tail.store(tail, Ordering::Release);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_file_names_name_the_process_and_its_exec() {
        assert_eq!(file_name(42, 0), "agent-42.ring");
        assert_eq!(file_name(42, 3), "agent-42.3.ring");
        for n in [0, 1, 15] {
            assert_eq!(parse_file_name(&file_name(7, n)), Some((7, n)));
        }
        assert_eq!(parse_file_name("agent-x.ring"), None);
        assert_eq!(parse_file_name("other-1.ring"), None);
    }

    #[test]
    fn push_drain_and_drop_when_full() {
        let mut mem = vec![0u64; file_size() / 8 + 1];
        let v = unsafe { RingView::new(mem.as_mut_ptr() as *mut u8) };
        for i in 0..CAPACITY as u64 + 5 {
            v.push(Record {
                time: i,
                addr: i * 4096,
                tid: 7,
                kind: KIND_FAULT,
            });
        }
        assert_eq!(v.header().dropped.load(Ordering::Relaxed), 5);
        let mut got = Vec::new();
        assert_eq!(v.drain(|r| got.push(r.time)), CAPACITY as u64);
        assert_eq!(got.len(), CAPACITY as usize);
        assert_eq!(got[0], 0);
        assert_eq!(*got.last().unwrap(), CAPACITY as u64 - 1);
        v.push(Record {
            time: 99,
            ..Record::default()
        });
        let mut again = Vec::new();
        v.drain(|r| again.push(r.time));
        assert_eq!(again, vec![99], "wraps around after a drain");
    }

    #[test]
    fn pages_found_apart_reach_the_agent_once_and_only_the_last_slots_of_them() {
        let mut mem = vec![0u64; file_size() / 8 + 1];
        let v = unsafe { RingView::new(mem.as_mut_ptr() as *mut u8) };
        let mut seen = 0;
        let mut got = Vec::new();
        v.read_apart(&mut seen, |p| got.push(p));
        assert!(got.is_empty(), "nothing told yet");
        v.tell_apart(0x1000);
        v.tell_apart(0x2000);
        v.read_apart(&mut seen, |p| got.push(p));
        assert_eq!(got, vec![0x1000, 0x2000]);
        got.clear();
        v.read_apart(&mut seen, |p| got.push(p));
        assert!(got.is_empty(), "each page is read once");
        for k in 0..APART_SLOTS as u64 + 3 {
            v.tell_apart(k << 12);
        }
        v.read_apart(&mut seen, |p| got.push(p));
        let kept: Vec<u64> = (3..APART_SLOTS as u64 + 3).map(|k| k << 12).collect();
        assert_eq!(
            got, kept,
            "an agent that fell behind reads the last APART_SLOTS"
        );
    }
}
