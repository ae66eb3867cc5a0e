//! The huddle agent: a shared library `huddle detect` preloads (LD_PRELOAD) into the target.
//!
//! A re-arm thread wakes every `HUDDLE_AGENT_INTERVAL_MS` (10 ms, as in CDSM) and re-arms a
//! random sample of the process's data pages, at most `max(rate * eligible pages, floor)`
//! pages per second (the detector writes both into the ring header as the pattern settles
//! or changes), so that the next access to them faults again and the detector sees
//! who touches them. It never changes what the program computes:
//!
//! * Shared mappings (MAP_SHARED files, shmem, /dev/zero): `madvise(MADV_DONTNEED)` drops
//!   the page-table entries only; the data stays in the page cache / shmem and the next
//!   access (read or write) takes a minor fault that maps it again.
//! * Private anonymous memory (heap, anonymous mmap, thread stacks): dropping PTEs alone
//!   would discard data, and `mprotect` would make `read(2)`/`write(2)` into the page fail
//!   with EFAULT. The agent registers these mappings with a userfaultfd (missing mode) and
//!   takes the page out without losing it: it moves the page itself into a vault of its own,
//!   with UFFDIO_MOVE on Linux 6.8 and later, with mremap(MREMAP_DONTUNMAP) before (Linux
//!   5.7; or with HUDDLE_AGENT_MOVE=0), either way one step under the kernel's mmap lock
//!   that leaves the program's mapping in place with the page missing. The next access by
//!   any task, read or write, from user code or inside a system call, is a missing-page
//!   fault that the agent's fault thread resolves by copying the page back (UFFDIO_COPY),
//!   recording who touched it; pages never touched get the zero page. At most 128 pages are
//!   out at a time; one untouched for 250 ms is put back. A sampled transparent huge page is
//!   moved out and back whole (the huge module), which keeps it huge.
//!
//!   Cost: taking a page out of a multithreaded process's page table means a TLB flush on
//!   every CPU that runs it (an IPI; 9.4 us per page on the 2-core KVM guest, with another
//!   thread of the process running). So the agent pays it only where it must: it copies
//!   pages back (no flush; moving back cost another 9.4 us) and frees used vault pages
//!   VAULT_CHUNK at a time, and it drops shared pages with one process_madvise per tick
//!   (Linux 6.13 and later; page by page before). Moving runs of neighbouring pages in one
//!   call would share the flush too (2.5 us per page in fours), but for the same budget it
//!   samples a quarter as many places: ring x8 threads fell from r 0.98 to 0.88.
//!
//!   The program's own memory changes arrive as REMOVE/UNMAP/REMAP events, after or before
//!   the change, while its other threads go on. So: events are read and handled under the
//!   agent's lock, and pages are moved out with UFFDIO_MOVE under it too, which leaves the
//!   kernel to refuse (EAGAIN) a take-out while an event is unread (an mremap raises an event
//!   of its own, so it runs without the lock, and the program's events handled while it is
//!   in flight are settled against it: vault::Pending); nothing is taken out between an event
//!   and the next scan of /proc/self/maps (a new mapping in a freed range is not registered
//!   with us before that scan); a range the program discarded (MADV_DONTNEED, announced
//!   before the pages go) is left alone for a second; the UNMAP of an mremap's old range
//!   does not discard what another thread moved into that range meanwhile, nor does a
//!   REMAP that queued after such a move carry it off (vault::remap_slots), nor an UNMAP
//!   that queued late discard it (vault::moved_in_after_unmap, orphaned_by_unmap); a read's
//!   events are handled before its faults. Every saved page
//!   is put back before fork (pthread_atfork; the forking thread keeps the lock until fork
//!   returns, and meanwhile the fault thread resolves page faults without it, since a
//!   thread holding a lock fork() needs may be stopped on one), and EAGAIN from the kernel
//!   is retried, never treated as done. crates/cli/tests/agent_torture.c checks all of this on both paths.
//!
//! Static data is re-armed like the heap: a `.bss` (and `.lbss`, Fortran COMMON) is the
//! anonymous mapping right after its object's file mappings, and an object's `.data` is
//! adopted at start (see the adopt module: replaced by an anonymous copy while the process
//! has one thread). Never re-armed: code and read-only mappings, the data and `.bss` of the
//! dynamic loader, the C library and the agent itself (the helper threads use them; see
//! maps::agent_critical), `.data` of libraries loaded later and files the program maps
//! MAP_PRIVATE itself, [stack], device mappings, the agent's own memory, and any memory
//! once the program registers a userfaultfd range itself (`ioctl` is interposed: the agent
//! unregisters everything and steps back before the program's call proceeds).
//!
//! Where the budget goes: up to half of each tick's pages (three quarters while it searches
//! for block edges) go to the focus table (the focus module: a probe after each sampled
//! fault, pages two tasks take turns on, and a bisection towards the edge between two tasks'
//! data), the rest to a uniform sample. The re-arm thread wakes every 10 ms at least while a
//! focus page falls due or a bisection step waits for its fault.
//!
//! Thread stacks are eligible: glibc stacks are anonymous mappings that the kernel merges
//! with neighbouring anonymous memory, so they cannot be told apart reliably, and a
//! write-protected stack page only delays its owner (or a signal frame being pushed) until
//! the helper lifts the protection. A stack is written by its own thread, so it adds no
//! false communication, only spends budget.
//!
//! Two helper threads (both named `huddle-agent`, on stacks of their own): the re-arm thread
//! and the fault thread, which resolves userfaultfd messages at once. Both block all
//! signals and make system calls only (no malloc, no locks the program could hold), so a
//! program thread stopped on a protected or dropped page never waits on the program.
//!
//! Not covered: a page pinned for DMA (O_DIRECT, io_uring fixed buffers, RDMA) while it is
//! dropped would keep receiving data in the old frame; raw fork(2)/clone(2) system calls
//! that bypass pthread_atfork would give the child a dropped page as zeros; a thread that
//! stalls for over a second between its MADV_DONTNEED being announced and done could see
//! the page's old contents come back. Registration keeps the kernel from merging a new
//! mapping with a registered neighbour until the next scan (within a second), so an mremap
//! spanning both in that time fails with EFAULT where it would have worked without the
//! agent. Run with `--no-private` (HUDDLE_AGENT_PRIVATE=0) for such programs. Without
//! `HUDDLE_AGENT_DIR` in the environment the library does nothing.
//!
//! Modules: `uffd` (the userfaultfd ABI), `vault` (where dropped pages wait, and the
//! program's discards and remaps), `rearm` (the re-arm thread: maps scan, page index, picks,
//! taking pages out), `focus` (pages two tasks share), `maps` (what is eligible), `adopt`
//! (`.data` made anonymous), `thp` (mappings left to the kernel's huge pages until filled),
//! `huge` (a sampled transparent huge page re-armed whole, so it stays huge), `robust`
//! (pages the kernel reads when a thread ends or execs), `thread_end` (the interposed
//! `pthread_create`, so that an ending thread keeps those pages); this file holds the shared
//! state and its lock, start-up, the fork hooks, the fault thread and the interposed
//! `ioctl` and `mlock` calls.

use agent_abi::env as agent_env;
use agent_abi::ring::{self, RingView};
use libc::{c_int, c_ulong, c_void};
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};

mod adopt;
mod busy;
mod focus;
mod huge;
mod maps;
mod rearm;
mod robust;
mod sys;
mod thp;
mod thread_end;
mod uffd;
mod vault;

use rearm::*;
use uffd::*;
use vault::*;

/// A program's MADV_DONTNEED is announced (REMOVE event) before its pages are zapped, and
/// the zap follows once the event is read. A page dropped in between would carry the old
/// contents past the discard; so ranges discarded in the last second are left alone.
const DISCARDED: usize = 256;
const DISCARD_QUARANTINE_NS: u64 = 1_000_000_000;
/// REMAP old ranges remembered until their UNMAP arrives (it follows within the mremap).
const REMAPPED: usize = 64;

/// Private pages dropped at a time (their contents wait here until the next access).
/// Enough slots for a quarter second of 500 pages/s (the default floor is 300).
const SAVED: usize = 128;
/// The vault is used as a log: each page moved out goes to the next clean vault page and
/// comes back by copy, and used vault pages are freed VAULT_CHUNK at a time (one madvise,
/// one TLB flush; one REMOVE event where the vault is registered), putting back first any
/// page still saved there. At most VAULT_PAGES pages (1 MiB) of the vault are resident. A
/// page moved in by mremap is a mapping of its own there: up to about 2 * VAULT_PAGES more
/// lines in /proc/PID/maps (the kernel's limit is vm.max_map_count, 65,530 by default).
const VAULT_PAGES: usize = 256;
const VAULT_CHUNK: usize = 32;
/// Random picks come from an index of the mapped pages built at each scan of the maps
/// (runs of present pages), not from pagemap reads per draw: in sparse memory (malloc
/// arenas, reserved thread stacks) a draw took up to 32 reads. Programs with more candidate
/// pages than INDEX_MAX_PAGES, or more runs than PRESENT_RUNS, are drawn from per read.
const PRESENT_RUNS: usize = 8192;
const INDEX_MAX_PAGES: u64 = 1 << 18;
/// Pagemap entries read per call while indexing.
const PAGEMAP_CHUNK: usize = 512;
/// Shared pages dropped per process_madvise call.
const SHARED_BATCH: usize = 64;
const PAGE: usize = 4096;
/// How often the re-arm thread reads /proc/self/maps during the first second (programs set
/// up their memory then; every 10 * SCAN_NS after that), and its longest sleep.
const SCAN_NS: u64 = 100_000_000;
/// While the maps text stays the same, the present-page index is rebuilt only this often
/// (first touches of private pages rebuild it sooner): new pages of shared mappings, which
/// no fault of ours announces, wait at most this long to be sampled. Walking pagemap was
/// over half of an idle agent's CPU when it ran at every scan.
const INDEX_MAX_AGE_NS: u64 = 4_000_000_000;
/// Pages the re-arm thread aims to re-arm per wake-up (see rearm_main).
const PAGES_PER_WAKE: f64 = 16.0;
/// Focus pages (see the focus module) re-armed per tick at most.
const FOCUS_PER_TICK: usize = 64;
/// The re-arm thread's shortest sleep while focus pages are due: a bisection step faults
/// within a few milliseconds, and at one step per 50-ms tick (16 pages a wake at the
/// 300 pages/s floor) the ten steps to a block edge took half a second (layout-c halo).
const FOCUS_TICK_NS: u64 = 10_000_000;
/// Pages zero-filled at a first touch (see zero_fill), and at most, where a stream goes on in
/// order (2 MiB).
const ZERO_AHEAD: usize = 16;
const FILL_MAX: usize = 512;
/// A dropped page nobody touched within this time is put back. Short, because pages of a
/// finished phase would otherwise hold the slots and starve the re-arming of the new
/// phase's pages.
const SAVED_MAX_NS: u64 = 250_000_000;

const MAX_REGIONS: usize = 4096;
const MAPS_BUF: usize = 1 << 20;
const MSGS: usize = 64;

#[derive(Clone, Copy, Default)]
struct Region {
    start: u64,
    end: u64,
    shared: bool,
}

/// Everything the helper touches, in one anonymous mapping of its own (never re-armed).
struct State {
    uffd: c_int,
    ring: *mut u8,
    page: u64,
    rate: f64,
    floor: f64,
    interval_ms: i32,
    private: bool,
    rng: u64,
    budget: f64,
    /// The focus table's part of the budget not spent yet (see rearm::rearm).
    focus_credit: f64,
    regions: [Region; MAX_REGIONS],
    nregions: usize,
    total_pages: u64,
    /// The part of total_pages in shared mappings.
    shared_pages: u64,
    excluded: [(u64, u64); 6],
    maps_buf: [u8; MAPS_BUF],
    /// Hash of the maps text at the last whole scan (see scan_maps).
    maps_hash: u64,
    pagemap: c_int,
    /// /proc/self/maps, kept open and re-read from offset 0 at each scan (see open_high).
    maps: c_int,
    saved: [Saved; SAVED],
    /// A drop by mremap in flight (under the lock; see vault::Pending).
    pending: Pending,
    /// VAULT_PAGES pages that hold moved-out program pages (0: none, nothing private is
    /// re-armed). Registered (missing mode) with our userfaultfd where pages are moved with
    /// UFFDIO_MOVE, which wants its destination registered; the program never touches it.
    vault: u64,
    /// Vault pages used so far, and the count up to which they are clean (both only grow;
    /// page k is vault + (k % VAULT_PAGES) * PAGE): [vault_next, vault_clean_end) are free.
    vault_next: u64,
    vault_clean_end: u64,
    /// A pidfd of this process for process_madvise (-1: none, madvise page by page).
    pidfd: c_int,
    /// Present pages at the last scan: (first page of a run, pages in the runs before it,
    /// shared); `indexed` false when the index is not usable (see PRESENT_RUNS).
    present_runs: [(u64, u64, bool); PRESENT_RUNS],
    npresent_runs: usize,
    present_pages: u64,
    indexed: bool,
    pagemap_buf: [u64; PAGEMAP_CHUNK],
    /// Shared pages to drop at the end of this tick.
    shared_batch: [u64; SHARED_BATCH],
    nshared_batch: usize,
    /// Ranges the program discarded lately (start, end, when): not dropped for a while.
    discarded: [(u64, u64, u64); DISCARDED],
    discarded_next: usize,
    /// Set when an entry still in quarantine had to be overwritten: nothing is dropped
    /// before this time.
    quarantine_all_until: u64,
    /// Program mapping changes (UNMAP, REMOVE, REMAP) handled so far, and their count at the
    /// start of the last scan of /proc/self/maps: while they differ, the candidate list may
    /// name memory that is gone or that a new, unregistered mapping holds now, so nothing is
    /// dropped until the next scan (the next tick).
    changes: u64,
    scanned_changes: u64,
    /// The program's REMAP events handled so far (see vault::remap_slots).
    remaps: u64,
    /// Old ranges of REMAP events whose UNMAP is still to come.
    remapped: [(u64, u64); REMAPPED],
    remapped_next: usize,
    /// Every range registered with our uffd (under the lock), for stepping back.
    registered: [(u64, u64); MAX_REGIONS],
    nregistered: usize,
    /// Pages seen shared, re-armed more often (under the lock).
    focus: focus::Focus,
    /// Pages the detector found apart that the focus table was told of (see
    /// agent_abi::ring::Header::apart_pages).
    apart_read: u64,
    /// Re-arm only while two threads or more are busy (see the busy module), and the
    /// threads' CPU times.
    threads_only: bool,
    threads: busy::Threads,
    /// /proc/self/task, for the busy module and the robust module (-1: none).
    task_dir: c_int,
    /// Pages the kernel reads at execve, never taken out (see the robust module).
    exec_pages: robust::ExecPages,
    /// The same for threads as they end through glibc (robust::keep_ending_thread); only
    /// under the lock.
    ending: robust::ExecPages,
    /// Whole passes of scan_maps so far.
    scans: u64,
    /// Mappings left to the kernel's huge pages until filled (see the thp module).
    thp: thp::Thp,
    /// Huge pages re-armed whole, and their vault (see the huge module).
    huge: huge::HugeVault,
    /// A mapping event (REMOVE, UNMAP, REMAP) was read during a fork and waits for the
    /// lock. The program has gone on, and the slots and candidates may name the old
    /// addresses: until the fault thread has handled it, nothing is taken out, put back
    /// (vault::restore, huge::restore_window) or filled.
    events_waiting: AtomicBool,
}

/// The agent's uffd (-1: none); read by the interposed ioctl.
static UFFD: AtomicI32 = AtomicI32::new(-1);
/// Held around every use of the uffd by the helper and by the interposer.
static BUSY: AtomicBool = AtomicBool::new(false);
/// Set once the program uses userfaultfd itself.
static YIELDED: AtomicBool = AtomicBool::new(false);
/// Threads in quiesce() or fork() now: no new private page may be dropped while any is.
/// A count, not a flag: two threads forking at once each quiesce, and the first one's fork
/// returning must not let drops start before the second has forked (a drop by mremap then
/// slipped in after the second's quiesce and its fork child saw the page as zeros;
/// agent_torture, a fork at every pass, 2026-11-29).
static HOLDS: AtomicU32 = AtomicU32::new(0);

/// Whether no private page may be dropped now: a fork under way, or the agent stepped back.
fn held() -> bool {
    HOLDS.load(Ordering::Acquire) > 0 || YIELDED.load(Ordering::Acquire)
}

/// The private page being dropped right now (0: none).
static DROPPING: AtomicU64 = AtomicU64::new(0);
/// A thread is in fork(): it holds the lock from before_fork until the fork is done, with
/// every dropped page put back and no new drop allowed (HOLDS).
static FORKING: AtomicBool = AtomicBool::new(false);
/// The fault thread is resolving messages without the lock because a fork holds it (see
/// lock_unless_forking). The fork's end waits until that pass is over: the pass counts on
/// no page being out (a first touch's zero fill reaches ahead over holes) and on nothing
/// being dropped before the mapping events it read are set aside for the lock. A drop
/// started as soon as the fork ended broke both.
static UNLOCKED_PASS: AtomicBool = AtomicBool::new(false);
static STATE: AtomicPtr<State> = AtomicPtr::new(std::ptr::null_mut());
/// First touches of private pages the fault thread resolved: when it moves, pages became
/// present that the re-arm thread's index lacks (a new phase's memory; without this it
/// waited for the next scan, up to a second, re-arming only pages no longer used).
static FIRST_TOUCHES: AtomicU64 = AtomicU64::new(0);
/// The last FILLS first-touch fills: where each ended (a first touch there is a stream of
/// the program filling fresh memory in order: a master initialising three arrays in one loop
/// is three), and how many pages its stream's next fill gets; a new stream takes the slot at
/// FILL_CURSOR (see zero_fill; the fault thread's only).
struct Fill {
    end: AtomicU64,
    next: AtomicUsize,
}
const FILLS: usize = 64;
static FILL: [Fill; FILLS] = [const {
    Fill {
        end: AtomicU64::new(0),
        next: AtomicUsize::new(ZERO_AHEAD),
    }
}; FILLS];
static FILL_CURSOR: AtomicUsize = AtomicUsize::new(0);
/// Our userfaultfd offers UFFDIO_MOVE.
static UFFD_CAN_MOVE: AtomicBool = AtomicBool::new(false);

fn lock() {
    let mut spins = 0u32;
    while BUSY
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        // Holders keep it for a few system calls at most: spin a little before yielding
        // (a yield is a system call, and was one per fault at the default rate).
        spins += 1;
        if spins < 2000 {
            std::hint::spin_loop();
        } else {
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
    }
}

fn unlock() {
    BUSY.store(false, Ordering::Release);
}

/// Ends what lock_unless_forking began: releases the lock, or ends the pass without it.
fn unlock_or_end_pass(locked: bool) {
    if locked {
        unlock();
    } else {
        UNLOCKED_PASS.store(false, Ordering::SeqCst);
    }
}

/// The lock, unless a fork is under way (false: not taken). The forking thread holds the
/// lock across fork(); meanwhile another program thread may fault on registered memory
/// while holding a lock fork() itself needs (a malloc arena's), so the fault thread must
/// resolve page faults without the lock then, or the three wait on each other for good
/// (seen: agent_torture, a fork beside a malloc, both helpers spinning on the lock).
fn lock_unless_forking() -> bool {
    let mut spins = 0u32;
    loop {
        if BUSY
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return true;
        }
        if FORKING.load(Ordering::SeqCst) {
            // Announced, then checked again: after_fork_parent clears FORKING and then looks
            // at UNLOCKED_PASS, so either it waits for this pass or the pass takes the lock.
            UNLOCKED_PASS.store(true, Ordering::SeqCst);
            if FORKING.load(Ordering::SeqCst) {
                return false;
            }
            UNLOCKED_PASS.store(false, Ordering::SeqCst);
            continue;
        }
        spins += 1;
        if spins < 2000 {
            std::hint::spin_loop();
        } else {
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
    }
}

fn errno() -> i32 {
    // SAFETY: the thread's errno location is always valid.
    unsafe { *libc::__errno_location() }
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = agent_init;

extern "C" fn agent_init() {
    maps::note_own_path(agent_init as *const c_void);
    // SAFETY: registering plain functions; they only make system calls.
    unsafe {
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_parent),
            Some(after_fork_child),
        )
    };
    start();
}

extern "C" fn before_fork() {
    // The child has no userfaultfd: every dropped page must be back before it is copied.
    // SAFETY: restores pages through our own uffd; takes the lock until after fork.
    unsafe { quiesce() };
    FORKING.store(true, Ordering::SeqCst);
}

extern "C" fn after_fork_parent() {
    FORKING.store(false, Ordering::SeqCst);
    while UNLOCKED_PASS.load(Ordering::SeqCst) {
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
    HOLDS.fetch_sub(1, Ordering::AcqRel);
    unlock();
}

/// Stops new drops (until the caller takes back its hold: HOLDS), waits for the one in
/// flight, puts every dropped page back, and returns holding the lock.
unsafe fn quiesce() {
    HOLDS.fetch_add(1, Ordering::AcqRel);
    // A drop that saw no hold did so under the lock, and set DROPPING before
    // releasing it: taking the lock once makes that drop's DROPPING seen below (a drop by
    // mremap that slipped past the wait would be settled after the fork copied its hole).
    lock();
    unlock();
    while DROPPING.load(Ordering::Acquire) != 0 {
        libc::sched_yield();
    }
    let st = STATE.load(Ordering::Acquire);
    loop {
        lock();
        let mut left = false;
        if !st.is_null() && (*st).uffd >= 0 {
            for i in 0..SAVED {
                if (*st).saved[i].addr != 0 && !restore(&mut *st, i) {
                    left = true;
                }
            }
            left |= !huge::restore_all(&mut *st);
        }
        if !left {
            return;
        }
        // Let the fault thread read the pending event that made the kernel say EAGAIN.
        unlock();
        libc::sched_yield();
    }
}

extern "C" fn after_fork_child() {
    // The helper did not survive fork; its uffd belongs to the parent's address space.
    let old = STATE.swap(std::ptr::null_mut(), Ordering::AcqRel);
    if !old.is_null() {
        // SAFETY: the child owns copies of these resources; release them.
        unsafe {
            if (*old).uffd >= 0 {
                libc::close((*old).uffd);
            }
            if (*old).vault != 0 {
                sys::munmap((*old).vault as *mut c_void, VAULT_PAGES * PAGE);
            }
            huge::close(&(*old).huge);
            if (*old).pidfd >= 0 {
                libc::close((*old).pidfd);
            }
            if (*old).pagemap >= 0 {
                libc::close((*old).pagemap);
            }
            if (*old).maps >= 0 {
                libc::close((*old).maps);
            }
            if (*old).task_dir >= 0 {
                libc::close((*old).task_dir);
            }
            if (*old).thp.smaps >= 0 {
                libc::close((*old).thp.smaps);
            }
            if !(*old).ring.is_null() {
                sys::munmap((*old).ring as *mut c_void, ring::file_size());
            }
            sys::munmap(old as *mut c_void, std::mem::size_of::<State>());
        }
    }
    UFFD.store(-1, Ordering::Release);
    DROPPING.store(0, Ordering::Release);
    HOLDS.store(0, Ordering::Release);
    FORKING.store(false, Ordering::Release);
    UNLOCKED_PASS.store(false, Ordering::Release);
    unlock();
    start();
}

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)
        .unwrap_or(default)
}

fn start() {
    let Some(dir) = std::env::var_os(agent_env::DIR) else {
        return;
    };
    if own_exe_is_mpi_launcher() {
        return;
    }
    // SAFETY: a fresh private anonymous mapping for State; zero is a valid State except
    // for the fields set below.
    unsafe {
        let size = std::mem::size_of::<State>();
        let p = own_mapping(size);
        if p.is_null() {
            return;
        }
        let st = p as *mut State;
        (*st).uffd = -1;
        // Opened here, in the thread that runs the constructor or the fork child handler,
        // while the program's own code is not running: see open_high.
        (*st).pagemap = open_high(c"/proc/self/pagemap");
        (*st).maps = open_high(c"/proc/self/maps");
        (*st).thp.smaps = -1;
        (*st).pidfd = open_pidfd();
        (*st).page = libc::sysconf(libc::_SC_PAGESIZE) as u64;
        (*st).rate = env_f64(agent_env::RATE, 0.01);
        (*st).floor = env_f64(agent_env::FLOOR, 100.0);
        (*st).interval_ms = env_f64(agent_env::INTERVAL_MS, 10.0).clamp(1.0, 10_000.0) as i32;
        (*st).private = std::env::var(agent_env::PRIVATE).map_or(true, |v| v != "0");
        (*st).threads_only = std::env::var(agent_env::THREADS_ONLY).is_ok_and(|v| v == "1");
        (*st).task_dir = open_high(c"/proc/self/task");
        (*st).rng = (libc::getpid() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (*st).excluded[0] = (p as u64, p as u64 + size as u64);
        (*st).ring = open_ring(&dir);
        if (*st).ring.is_null() {
            sys::munmap(p, size);
            return;
        }
        (*st).excluded[1] = (
            (*st).ring as u64,
            (*st).ring as u64 + ring::file_size() as u64,
        );
        let view = RingView::new((*st).ring);
        if (*st).private {
            // HUDDLE_AGENT_MOVE=0 takes pages out with mremap even where UFFDIO_MOVE exists.
            let with_move = std::env::var(agent_env::MOVE).map_or(true, |v| v != "0");
            match open_uffd(with_move) {
                Ok(fd) => {
                    (*st).uffd = fd;
                    view.header()
                        .private_mode
                        .store(ring::private_mode::UFFD, Ordering::Relaxed);
                }
                Err(e) => tell_mode(&view, ring::private_mode::UNAVAILABLE, e),
            }
        }
        if (*st).uffd >= 0 {
            open_vault(st, UFFD_CAN_MOVE.load(Ordering::Relaxed));
        }
        if (*st).uffd >= 0 {
            thp::enable_from_sysfs(&mut *st);
            huge::open(&mut *st);
        }
        let saves_by = match ((*st).vault != 0, UFFD_CAN_MOVE.load(Ordering::Relaxed)) {
            (false, _) => ring::saves_by::NONE,
            (true, true) => ring::saves_by::MOVE,
            (true, false) => ring::saves_by::REMAP,
        };
        view.header().saves_by.store(saves_by, Ordering::Relaxed);
        if (*st).uffd >= 0 {
            let pages = adopt::adopt_file_data((*st).maps, &mut (*st).maps_buf);
            view.header().adopted_pages.store(pages, Ordering::Relaxed);
        }
        UFFD.store((*st).uffd, Ordering::Release);
        STATE.store(st, Ordering::Release);
        // The helpers run on stacks of our own, so that their ranges are known and excluded
        // before they exist: they must never drop or protect their own stacks. Each has a
        // guard page below it: a helper that overran its stack would otherwise write into
        // whatever the program mapped next (our mappings have no name where the kernel
        // lacks PR_SET_VMA_ANON_NAME, and merge with the program's).
        let stack_bytes = helper_stack_bytes();
        let stacks = [guarded_stack(stack_bytes), guarded_stack(stack_bytes)];
        for (k, stack) in stacks.iter().enumerate() {
            if !stack.is_null() {
                let guard = *stack as u64 - PAGE as u64;
                (*st).excluded[2 + k] = (guard, *stack as u64 + stack_bytes as u64);
            }
        }
        if (*st).vault != 0 {
            (*st).excluded[4] = ((*st).vault, (*st).vault + (VAULT_PAGES * PAGE) as u64);
        }
        (*st).excluded[5] = huge::vault_range(&(*st).huge);
        let mains: [extern "C" fn(*mut c_void) -> *mut c_void; 2] = [fault_main, rearm_main];
        for (stack, main) in stacks.into_iter().zip(mains) {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            libc::pthread_attr_init(&mut attr);
            let mut tid: libc::pthread_t = 0;
            let err = if stack.is_null() {
                libc::ENOMEM
            } else {
                match libc::pthread_attr_setstack(&mut attr, stack, stack_bytes) {
                    0 => libc::pthread_create(&mut tid, &attr, main, st as *mut c_void),
                    e => e,
                }
            };
            if err != 0 {
                // Said in the detector's notes: without its helpers the agent re-arms nothing.
                view.header().errors.fetch_add(1, Ordering::Relaxed);
                tell_mode(&view, ring::private_mode::NO_HELPERS, err);
            }
            libc::pthread_attr_destroy(&mut attr);
        }
        // After the helpers: they never end through glibc.
        thread_end::arm();
    }
}

/// Whether this process runs an MPI launcher ([`agent_abi::is_mpi_launcher`]): mpirun
/// itself, or a child it forked that has not exec'd its rank yet. Without allocating: this
/// also runs in a fork child of a threaded parent.
fn own_exe_is_mpi_launcher() -> bool {
    let mut buf = [0u8; 4096];
    // SAFETY: readlink writes at most buf.len() bytes into buf.
    let n = unsafe {
        libc::readlink(
            c"/proc/self/exe".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n <= 0 {
        return false;
    }
    let path = &buf[..n as usize];
    let name = path.rsplit(|&c| c == b'/').next().unwrap_or(path);
    agent_abi::is_mpi_launcher(name)
}

/// Says in the ring header why private memory is re-armed or not (`private_mode`), with
/// the error that made it so (`private_errno`).
fn tell_mode(view: &RingView, mode: u32, errno: c_int) {
    view.header().private_mode.store(mode, Ordering::Relaxed);
    (view.header().private_errno).store(errno as u32, Ordering::Relaxed);
}

/// What a helper needs of its stack for itself.
const HELPER_STACK: usize = 256 << 10;
/// Room for what glibc adds to the program's static TLS in a thread's block (the thread
/// descriptor, the surplus for objects loaded later with initial-exec TLS): a few KiB.
const TLS_MARGIN: usize = 64 << 10;

/// Stack bytes for a helper: HELPER_STACK plus the program's static TLS, which glibc carves
/// out of the top of a stack given with pthread_attr_setstack, refusing (EINVAL) one too
/// small to hold it. A Fortran OpenMP program keeps its THREADPRIVATE arrays there: NPB 3.3
/// SP class A has a 504-KiB `.tbss`, and with a 256-KiB stack neither helper started, so the
/// agent re-armed nothing and the run showed 0 events in 12,000 faults (2026-11-29).
unsafe fn helper_stack_bytes() -> usize {
    HELPER_STACK + static_tls_bytes().next_multiple_of(PAGE) + TLS_MARGIN
}

/// The TLS segments (`.tdata` + `.tbss`, PT_TLS) of every object loaded now, each rounded up
/// to its alignment: the static TLS of every thread, or more (an object dlopen'ed with TLS
/// of its own adds some that is allocated on first use instead).
unsafe fn static_tls_bytes() -> usize {
    unsafe extern "C" fn add(info: *mut libc::dl_phdr_info, _: usize, sum: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid info whose dlpi_phdr has dlpi_phnum headers;
        // `sum` is the usize below.
        unsafe {
            let info = &*info;
            for k in 0..info.dlpi_phnum as usize {
                let ph = &*info.dlpi_phdr.add(k);
                if ph.p_type == libc::PT_TLS {
                    let align = (ph.p_align as usize).max(1);
                    *(sum as *mut usize) += (ph.p_memsz as usize).next_multiple_of(align);
                }
            }
        }
        0
    }
    let mut sum = 0usize;
    libc::dl_iterate_phdr(Some(add), &mut sum as *mut usize as *mut c_void);
    sum
}

/// `bytes` for a helper's stack above a PROT_NONE guard page (null: none).
unsafe fn guarded_stack(bytes: usize) -> *mut c_void {
    let p = own_mapping(PAGE + bytes);
    if p.is_null() {
        return p;
    }
    if sys::mprotect(p, PAGE, libc::PROT_NONE) != 0 {
        sys::munmap(p, PAGE + bytes);
        return std::ptr::null_mut();
    }
    (p as *mut u8).add(PAGE) as *mut c_void
}

/// Anonymous memory for the agent alone. Marked (MADV_DONTDUMP, and named where the kernel
/// allows) so the kernel never merges it with a neighbouring mapping of the program:
/// a merged mapping would either hide program memory or expose the agent's own.
unsafe fn own_mapping(size: usize) -> *mut c_void {
    let p = sys::mmap(
        std::ptr::null_mut(),
        size,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
    );
    if p == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    mark_own(p, size);
    p
}

/// Marks [p, p + size) as the agent's (see own_mapping).
unsafe fn mark_own(p: *mut c_void, size: usize) {
    sys::madvise(p, size, libc::MADV_DONTDUMP);
    const PR_SET_VMA: c_int = 0x53564d41;
    const PR_SET_VMA_ANON_NAME: c_ulong = 0;
    libc::prctl(
        PR_SET_VMA,
        PR_SET_VMA_ANON_NAME,
        p as c_ulong,
        size as c_ulong,
        c"huddle-agent".as_ptr() as c_ulong,
    );
}

/// pread(2) of `fd` at `offset` into `buf`: the bytes read (0 at the end, or on an error).
pub(crate) unsafe fn pread_at(fd: c_int, buf: &mut [u8], offset: usize) -> usize {
    let n = libc::pread(
        fd,
        buf.as_mut_ptr() as *mut c_void,
        buf.len(),
        offset as libc::off_t,
    );
    n.max(0) as usize
}

/// The text of a /proc file kept open (`fd`), read from offset 0 (where /proc seq files
/// regenerate it) into `buf`, as much as fits: its length.
pub(crate) unsafe fn read_proc(fd: c_int, buf: &mut [u8]) -> usize {
    let mut len = 0;
    while len < buf.len() {
        match pread_at(fd, &mut buf[len..], len) {
            0 => break,
            n => len += n,
        }
    }
    len
}

/// Opens `path` read-only on a descriptor >= 900. Only ever called before the program's own
/// code runs (constructor, fork child handler): an open() takes the lowest free descriptor,
/// and a helper thread opening files while the program redirects its stdio made the
/// program's dup2() fail with EBUSY (MPICH's hydra launching ranks, seen in tests).
unsafe fn open_high(path: &std::ffi::CStr) -> c_int {
    let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return -1;
    }
    let high = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 900);
    libc::close(fd);
    high
}

/// A pidfd of this process on a descriptor >= 900 (see open_high), for process_madvise.
unsafe fn open_pidfd() -> c_int {
    let fd = libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) as c_int;
    if fd < 0 {
        return -1;
    }
    let high = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 900);
    libc::close(fd);
    high
}

/// Creates `DIR/agent-PID.ring` (0600, exclusive) and maps it. A process that forked and
/// then exec'd finds that name taken by the agent of its own fork child (same pid, before
/// the exec): it takes `agent-PID.N.ring` with the first free N, and the detector reads the
/// highest N of a pid (an exec'd program, such as every MPI rank mpirun starts, had no agent
/// before 2026-11-26).
unsafe fn open_ring(dir: &std::ffi::OsStr) -> *mut u8 {
    use std::os::unix::ffi::OsStrExt;
    let pid = libc::getpid();
    let mut fd = -1;
    for n in 0..ring::MAX_EXECS {
        let path = [
            dir.as_bytes(),
            b"/",
            ring::file_name(pid as u32, n).as_bytes(),
            b"\0",
        ]
        .concat();
        fd = libc::open(
            path.as_ptr() as *const libc::c_char,
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            0o600,
        );
        if fd >= 0 || *libc::__errno_location() != libc::EEXIST {
            break;
        }
    }
    if fd < 0 {
        return std::ptr::null_mut();
    }
    let len = ring::file_size();
    if libc::ftruncate(fd, len as libc::off_t) != 0 {
        libc::close(fd);
        return std::ptr::null_mut();
    }
    let p = libc::mmap(
        std::ptr::null_mut(),
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_SHARED,
        fd,
        0,
    );
    libc::close(fd);
    if p == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    let h = p as *mut ring::Header;
    (*h).capacity = ring::CAPACITY;
    (*h).pid = pid as u32;
    (*h).version = ring::VERSION;
    std::sync::atomic::fence(Ordering::Release);
    (*h).magic = ring::MAGIC;
    p as *mut u8
}

/// The clock's time in ns (0 for a clock that does not exist, such as a thread's that ended).
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CPU time of the calling thread (ns).
fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Common start of both helper threads: no signals (a program handler must never run
/// here), a recognisable name.
unsafe fn helper_prologue(st: *mut State) -> RingView {
    let mut all: libc::sigset_t = std::mem::zeroed();
    libc::sigfillset(&mut all);
    libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    libc::prctl(
        libc::PR_SET_NAME,
        c"huddle-agent".as_ptr() as c_ulong,
        0,
        0,
        0,
    );
    let view = RingView::new((*st).ring);
    view.header()
        .helper_tid
        .store(libc::gettid() as u32, Ordering::Relaxed);
    view
}

/// The fault thread: resolves every userfaultfd message at once.
extern "C" fn fault_main(arg: *mut c_void) -> *mut c_void {
    // SAFETY: arg is the State mapping; fields shared with the re-arm thread are only
    // touched under the lock (saved pages).
    unsafe {
        let st = arg as *mut State;
        let view = helper_prologue(st);
        let fd = (*st).uffd;
        if fd < 0 {
            return std::ptr::null_mut();
        }
        let empty = UffdMsg {
            event: 0,
            _r1: 0,
            _r2: 0,
            _r3: 0,
            a0: 0,
            a1: 0,
            a2: 0,
        };
        let mut msgs = [empty; MSGS];
        // Messages that must wait: faults the kernel answered EAGAIN for (a mapping change is
        // pending; retried after the next read, which lets that change complete), and
        // while a fork holds the lock, the program's mapping events.
        let mut deferred = [empty; 4 * MSGS];
        let mut ndeferred = 0usize;
        // What still waits after a round (then copied back into `deferred`).
        let mut kept = [empty; 4 * MSGS];
        let mut wakes: u64 = 0;
        loop {
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            let timeout = if ndeferred > 0 { 1 } else { 1000 };
            let readable = libc::poll(&mut pfd, 1, timeout) > 0;
            // The lock is taken before the read: once an event is read, the program goes on
            // (it may touch the moved range at once), so no other helper may act on the
            // slots' old addresses until the event is handled.
            let locked = lock_unless_forking();
            let mut count = 0;
            if readable {
                let n = libc::read(
                    fd,
                    msgs.as_mut_ptr() as *mut c_void,
                    std::mem::size_of_val(&msgs),
                );
                count = if n > 0 {
                    (n as usize / std::mem::size_of::<UffdMsg>()).min(MSGS)
                } else {
                    0
                };
            }
            // The program's mapping changes first, then the faults, and of each the ones set
            // aside earlier first: an event read during a fork came before the ones read
            // now. A read returns every pending fault before any event, but a fault read
            // beside an event may be about memory the event moved: its thread ran on after
            // the change, or the event queued late (see vault::remap_slots) and the slots are
            // not yet where the fault looks (one copied another mapping's page in its place).
            let mut nkept = 0;
            let mut events_wait = false;
            for faults in [false, true] {
                if faults && locked {
                    // The events are handled: pages may be put back again.
                    (*st).events_waiting.store(events_wait, Ordering::Release);
                }
                let of_pass = |m: &&UffdMsg| (m.event == UFFD_EVENT_PAGEFAULT) == faults;
                let older_first = deferred[..ndeferred].iter().chain(&msgs[..count]);
                for m in older_first.filter(of_pass) {
                    let done = if locked {
                        handle(&mut *st, &view, m)
                    } else {
                        handle_during_fork(&*st, m)
                    };
                    if done {
                        continue;
                    }
                    if nkept < kept.len() {
                        kept[nkept] = *m;
                        nkept += 1;
                        if m.event != UFFD_EVENT_PAGEFAULT {
                            events_wait = true;
                            (*st).events_waiting.store(true, Ordering::Release);
                        }
                    } else {
                        no_room_to_defer(&*st, &view, m);
                    }
                }
            }
            deferred[..nkept].copy_from_slice(&kept[..nkept]);
            ndeferred = nkept;
            (*st).events_waiting.store(events_wait, Ordering::Release);
            unlock_or_end_pass(locked);
            // A system call (no vDSO for thread clocks): every 16th wake-up, and when idle.
            wakes += 1;
            if wakes.is_multiple_of(16) || count == 0 {
                view.header()
                    .fault_cpu_ns
                    .store(thread_cpu_ns(), Ordering::Relaxed);
            }
        }
    }
}

/// A message that must wait when the deferred list is full (more threads faulting while a
/// mapping change is pending than it holds, or events while a fork holds the lock). A
/// fault's thread is woken to fault again, which queues its message anew (dropped, it
/// would wait for good). An event cannot be asked again: counted as an error (during a
/// fork no page is out, and the next scan of the maps sees the change).
unsafe fn no_room_to_defer(st: &State, view: &RingView, m: &UffdMsg) {
    if m.event == UFFD_EVENT_PAGEFAULT {
        let mut rg = UffdioRange {
            start: m.a1 & !(st.page - 1),
            len: st.page,
        };
        uffd_ioctl(st.uffd, UFFDIO_WAKE, &mut rg as *mut _ as *mut c_void);
    } else {
        view.header().errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// Handles one message while another thread forks and holds the lock (see
/// lock_unless_forking); false when it must wait for the lock. Only page faults are resolved
/// here: before_fork put every dropped page back, HOLDS stops new drops and the fork's end
/// waits for this pass (UNLOCKED_PASS), so a missing page is a first touch (zeros). Mapping
/// events change the agent's state and wait for the lock.
unsafe fn handle_during_fork(st: &State, m: &UffdMsg) -> bool {
    if m.event != UFFD_EVENT_PAGEFAULT {
        return false;
    }
    first_touch(st, m.a1 & !(st.page - 1))
}

/// A missing page with no saved contents: never touched (zeros). False when it must be
/// retried. Only a fill counts as a first touch: a page found there already (two threads'
/// faults on one page read together) is not new memory for the re-arm thread's index.
unsafe fn first_touch(st: &State, page: u64) -> bool {
    match zero_fill(st, page) {
        ZeroFill::Later => return false,
        ZeroFill::Filled => {
            FIRST_TOUCHES.fetch_add(1, Ordering::Relaxed);
        }
        ZeroFill::AlreadyThere => {}
    }
    let mut rg = UffdioRange {
        start: page,
        len: st.page,
    };
    uffd_ioctl(st.uffd, UFFDIO_WAKE, &mut rg as *mut _ as *mut c_void);
    true
}

/// Handles one message (the caller holds the lock); false when it must be retried.
unsafe fn handle(st: &mut State, view: &RingView, m: &UffdMsg) -> bool {
    let page_mask = !(st.page - 1);
    match m.event {
        UFFD_EVENT_PAGEFAULT => {
            let page = m.a1 & page_mask;
            let range = UffdioRange {
                start: page,
                len: st.page,
            };
            // A page whose drop by mremap is in flight: resolved once it is settled.
            if st.pending.holds(page) {
                return false;
            }
            // Missing: a page we dropped (put its contents back: alone, or its whole huge
            // page) or one never touched.
            let slot = st.saved.iter().position(|x| x.addr == page && !x.orphan);
            let huge_slot = st.huge.holding(page);
            let done = match (slot, huge_slot) {
                (Some(i), _) => restore(st, i),
                (None, Some(i)) => huge::restore_window(st, i),
                // Not a re-armed page: the detector sees it through perf.
                (None, None) => return first_touch(st, page),
            };
            if !done {
                return false;
            }
            let mut rg = range;
            uffd_ioctl(st.uffd, UFFDIO_WAKE, &mut rg as *mut _ as *mut c_void);
            view.header().handled.fetch_add(1, Ordering::Relaxed);
            let now = monotonic_ns();
            st.focus.fault(page, m.a2 as u32, now);
            view.push(ring::Record {
                time: now,
                addr: m.a1,
                tid: m.a2 as u32,
                kind: ring::KIND_FAULT,
            });
            true
        }
        UFFD_EVENT_REMOVE | UFFD_EVENT_UNMAP => {
            // The program discarded [a0, a1): its dropped pages there must stay discarded.
            if st.vault != 0 && m.a0 >= st.vault && m.a1 <= st.vault + (VAULT_PAGES * PAGE) as u64 {
                return true; // prepare_vault's own
            }
            if st.huge.own(m.a0, m.a1) {
                return true; // huge::clean's own
            }
            st.pending.discarded(m.a0, m.a1);
            // The old range of an mremap whose REMAP was handled: its slots moved with it,
            // and any slot there now arrived later (another thread may already have moved
            // memory into the freed range).
            if m.event == UFFD_EVENT_UNMAP && take_remapped(st, m.a0, m.a1) {
                return true;
            }
            // REMOVE: announced, zapped once read (DISCARD_QUARANTINE_NS). UNMAP: done, but
            // the candidate list holds the range until the next scan.
            if m.event == UFFD_EVENT_REMOVE {
                note_discard(st, m.a0, m.a1);
            }
            st.changes += 1;
            st.focus.forget(m.a0, m.a1);
            for i in 0..SAVED {
                let a = st.saved[i].addr;
                let unmap = m.event == UFFD_EVENT_UNMAP;
                if a == 0 || a < m.a0 || m.a1 <= a || (unmap && moved_in_after_unmap(st, i)) {
                    continue;
                }
                if unmap && orphaned_by_unmap(st, i) {
                    st.saved[i].orphan = true;
                } else {
                    discard(st, i);
                }
            }
            st.huge.discarded(m.a0, m.a1);
            true
        }
        UFFD_EVENT_REMAP
            if st.pending.active()
                && (m.a0, m.a1, m.a2) == (st.pending.from, st.pending.to, PAGE as u64) =>
        {
            // Our own drop by mremap: the page is in the vault; where it belongs is settled
            // against the program's events handled since (vault::Pending).
            let p = st.pending;
            let home = p.settle(|a| !in_memory(st, a));
            if home != 0 {
                let slot = &mut st.saved[p.slot];
                slot.addr = home;
                slot.arrived = 0;
                slot.orphan = false;
                slot.since = monotonic_ns();
                slot.vault_at = p.to;
            } else if p.home != 0 {
                view.header().errors.fetch_add(1, Ordering::Relaxed);
            }
            st.pending = Pending::default();
            true
        }
        UFFD_EVENT_REMAP => {
            st.pending.remapped(m.a0, m.a1, m.a2);
            st.remaps += 1;
            let (pagemap, page_size) = (st.pagemap, st.page);
            let hole = |a: u64| hole_or_unknown(pagemap, page_size, a);
            remap_slots(&mut st.saved, m.a0, m.a1, m.a2, st.remaps, hole);
            st.huge.remapped(m.a0, m.a1, m.a2, hole);
            st.changes += 1;
            st.focus.forget(m.a0, m.a0 + m.a2);
            st.remapped[st.remapped_next] = (m.a0, m.a0 + m.a2);
            st.remapped_next = (st.remapped_next + 1) % REMAPPED;
            true
        }
        _ => true,
    }
}

/// Interposed `ioctl`: when the program registers a userfaultfd range of its own, the
/// agent first removes all its registrations (which also wakes any waiter) and stops re-arming private memory, so the program's call succeeds.
///
/// # Safety
/// Same contract as ioctl(2); the third argument is passed through unchanged.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    let ours = UFFD.load(Ordering::Acquire);
    if request == UFFDIO_REGISTER && ours >= 0 && fd != ours && !YIELDED.load(Ordering::Acquire) {
        step_back(ring::private_mode::YIELDED_TO_PROGRAM);
    }
    libc::syscall(libc::SYS_ioctl, fd, request, arg) as c_int
}

/// Puts every dropped page back, removes all the agent's userfaultfd registrations (which
/// also wakes any waiter) and re-arms no private page from
/// then on; `mode` says why, in the ring header.
unsafe fn step_back(mode: u32) {
    let ours = UFFD.load(Ordering::Acquire);
    // Every dropped page back first, then no registration of ours left in the way.
    quiesce();
    YIELDED.store(true, Ordering::Release);
    HOLDS.fetch_sub(1, Ordering::AcqRel);
    let st = STATE.load(Ordering::Acquire);
    if !st.is_null() {
        for i in 0..(*st).nregistered {
            let (start, end) = (*st).registered[i];
            let mut rg = UffdioRange {
                start,
                len: end - start,
            };
            uffd_ioctl(ours, UFFDIO_UNREGISTER, &mut rg as *mut _ as *mut c_void);
        }
        (*st).nregistered = 0;
        if !(*st).ring.is_null() {
            let h = RingView::new((*st).ring);
            h.header().private_mode.store(mode, Ordering::Relaxed);
        }
    }
    unlock();
}

/// Set once the program locks memory: nothing is re-armed from then on, private or shared.
pub(crate) static LOCKED: AtomicBool = AtomicBool::new(false);

/// The program locks memory (mlock, mlock2, mlockall): it asks that those pages never fault,
/// and a locked page cannot be dropped (MADV_DONTNEED fails with EINVAL; with mlockall the
/// agent's own vault is locked and populated too, and every move into it failed with EEXIST,
/// a program re-arming nothing for its whole run, 2026-11-29). So the agent steps back for
/// good before the call, every dropped page put back, and says so in its note.
unsafe fn before_lock() {
    if LOCKED.swap(true, Ordering::AcqRel) {
        return;
    }
    if UFFD.load(Ordering::Acquire) >= 0 && !YIELDED.load(Ordering::Acquire) {
        step_back(ring::private_mode::LOCKED_BY_PROGRAM);
    } else {
        let st = STATE.load(Ordering::Acquire);
        if !st.is_null() && !(*st).ring.is_null() {
            let h = RingView::new((*st).ring);
            (h.header().private_mode)
                .store(ring::private_mode::LOCKED_BY_PROGRAM, Ordering::Relaxed);
        }
    }
}

/// Interposed `mlock`: see [`before_lock`].
///
/// # Safety
/// Same contract as mlock(2).
#[no_mangle]
pub unsafe extern "C" fn mlock(addr: *const c_void, len: libc::size_t) -> c_int {
    before_lock();
    libc::syscall(libc::SYS_mlock, addr, len) as c_int
}

/// Interposed `mlock2`: see [`before_lock`].
///
/// # Safety
/// Same contract as mlock2(2).
#[no_mangle]
pub unsafe extern "C" fn mlock2(
    addr: *const c_void,
    len: libc::size_t,
    flags: libc::c_uint,
) -> c_int {
    before_lock();
    libc::syscall(libc::SYS_mlock2, addr, len, flags) as c_int
}

/// Interposed `mlockall`: see [`before_lock`].
///
/// # Safety
/// Same contract as mlockall(2).
#[no_mangle]
pub unsafe extern "C" fn mlockall(flags: c_int) -> c_int {
    before_lock();
    libc::syscall(libc::SYS_mlockall, flags) as c_int
}

/// A State as the agent starts with it (its own anonymous mapping: all zero), for unit tests.
#[cfg(test)]
fn zeroed_state() -> Box<State> {
    let layout = std::alloc::Layout::new::<State>();
    // SAFETY: every field of State is an integer, bool, raw pointer or array of them (the
    // agent itself starts from zeroed memory), and the layout is State's own.
    unsafe { Box::from_raw(std::alloc::alloc_zeroed(layout).cast::<State>()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_of_a_fork_waits_for_the_fault_threads_pass_without_the_lock() {
        // As before_fork leaves things: the forking thread holds the lock and a hold.
        lock();
        HOLDS.fetch_add(1, Ordering::AcqRel);
        FORKING.store(true, Ordering::SeqCst);
        assert!(
            !lock_unless_forking(),
            "a fork holds the lock: the pass goes without it"
        );
        let ended = std::sync::Arc::new(AtomicBool::new(false));
        let fork_end = {
            let ended = ended.clone();
            std::thread::spawn(move || {
                after_fork_parent();
                ended.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(
            !ended.load(Ordering::SeqCst),
            "the fork ended during the pass"
        );
        assert!(held(), "drops were allowed again during the pass");
        unlock_or_end_pass(false);
        fork_end.join().unwrap();
        assert!(ended.load(Ordering::SeqCst));
        assert!(!held());
        // The lock is free again, and the next pass takes it.
        assert!(lock_unless_forking());
        unlock_or_end_pass(true);
        assert!(!BUSY.load(Ordering::Acquire));
    }
}
