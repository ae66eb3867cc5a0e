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
//!   with EFAULT. The agent registers these mappings with a userfaultfd (missing +
//!   write-protect) and takes the page out without losing it: on Linux 6.8 and later it
//!   moves the page itself into a vault of its own (UFFDIO_MOVE: no copy, and writers never
//!   wait); before that (or with HUDDLE_AGENT_MOVE=0) it write-protects the page, copies
//!   it aside (process_vm_readv), drops it (MADV_DONTNEED) and lifts the protection. The
//!   next access by any task, read or write, from user code or inside a system call, is a
//!   missing-page fault that the agent's fault thread resolves by copying the page back
//!   (UFFDIO_COPY), recording who touched it; pages never touched get the zero page. At most 128 pages are out at a
//!   time; one untouched for 250 ms is put back.
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
//!   agent's lock, and pages are taken out under it too, which leaves the kernel to refuse
//!   (EAGAIN) a take-out while an event is unread; nothing is taken out between an event
//!   and the next scan of /proc/self/maps (a new mapping in a freed range is not registered
//!   with us before that scan); a range the program discarded (MADV_DONTNEED, announced
//!   before the pages go) is left alone for a second; the UNMAP of an mremap's old range
//!   does not discard what another thread moved into that range meanwhile. Every saved page
//!   is put back before fork (pthread_atfork), and EAGAIN from the kernel is retried, never
//!   treated as done. crates/cli/tests/agent_torture.c checks all of this on both paths.
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
//! Where the budget goes: up to half of each tick's pages go to the focus table
//! (the focus module: a probe after each sampled fault, pages two tasks take turns on, and a
//! bisection towards the edge between two tasks' data), the rest to a uniform sample.
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

use detect::ring::{self, RingView};
use libc::{c_int, c_ulong, c_void};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, Ordering};

mod adopt;
mod focus;
mod maps;

// userfaultfd ABI (linux/userfaultfd.h).
const UFFD_API: u64 = 0xAA;
const UFFDIO_API: c_ulong = 0xc018_aa3f;
const UFFDIO_REGISTER: c_ulong = 0xc020_aa00;
const UFFDIO_UNREGISTER: c_ulong = 0x8010_aa01;
const UFFDIO_WAKE: c_ulong = 0x8010_aa02;
const UFFDIO_WRITEPROTECT: c_ulong = 0xc018_aa06;
const UFFDIO_COPY: c_ulong = 0xc028_aa03;
const UFFDIO_ZEROPAGE: c_ulong = 0xc020_aa04;
const UFFDIO_MOVE: c_ulong = 0xc028_aa05;
const UFFDIO_MOVE_MODE_DONTWAKE: u64 = 1;
const UFFD_FEATURE_MOVE: u64 = 1 << 16;
const UFFDIO_REGISTER_MODE_MISSING: u64 = 1;
const UFFDIO_REGISTER_MODE_WP: u64 = 2;
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1;
const UFFD_FEATURE_EVENT_REMAP: u64 = 1 << 2;
const UFFD_FEATURE_EVENT_REMOVE: u64 = 1 << 3;
const UFFD_FEATURE_EVENT_UNMAP: u64 = 1 << 6;
const UFFD_FEATURE_THREAD_ID: u64 = 1 << 8;
const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
const UFFD_EVENT_REMAP: u8 = 0x14;
const UFFD_EVENT_REMOVE: u8 = 0x15;
const UFFD_EVENT_UNMAP: u8 = 0x16;
const UFFD_PAGEFAULT_FLAG_WP: u64 = 2;
/// The registration must offer UFFDIO_COPY, UFFDIO_ZEROPAGE and UFFDIO_WRITEPROTECT.
const IOCTLS_NEEDED: u64 = (1 << 3) | (1 << 4) | (1 << 6);

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}
#[repr(C)]
#[derive(Clone, Copy)]
struct UffdioRange {
    start: u64,
    len: u64,
}
#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}
#[repr(C)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}
#[repr(C)]
struct UffdioCopy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}
#[repr(C)]
struct UffdioMove {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    moved: i64,
}
#[repr(C)]
struct UffdioZeropage {
    range: UffdioRange,
    mode: u64,
    zeropage: i64,
}
/// uffd_msg: the union's words. Page fault: (flags, address, ptid); remap: (from, to,
/// len); remove/unmap: (start, end, -).
#[repr(C)]
#[derive(Clone, Copy)]
struct UffdMsg {
    event: u8,
    _r1: u8,
    _r2: u16,
    _r3: u32,
    a0: u64,
    a1: u64,
    a2: u64,
}

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
/// one TLB flush, one REMOVE event), putting back first any page still saved there. At most
/// VAULT_PAGES pages (1 MiB) of the vault are resident.
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
/// Pages zero-filled at a first touch (see zero_fill).
const ZERO_AHEAD: usize = 16;
/// A dropped page nobody touched within this time is put back. Short, because pages of a
/// finished phase would otherwise hold the slots and starve the re-arming of the new
/// phase's pages.
const SAVED_MAX_NS: u64 = 250_000_000;

#[derive(Clone, Copy)]
struct Saved {
    /// Page address; 0 when the slot is free.
    addr: u64,
    since: u64,
    /// Page of our own MADV_DONTNEED still to be seen (0: none): the REMOVE event it raises is ours,
    /// not the program discarding the page (the event is read, and the madvise returns,
    /// before the fault thread gets to handle it).
    own_remove: u64,
    /// The vault page the page itself was moved to (UFFDIO_MOVE); 0: its contents were
    /// copied into `data`.
    vault_at: u64,
    data: [u8; PAGE],
}

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
    regions: [Region; MAX_REGIONS],
    nregions: usize,
    total_pages: u64,
    /// The part of total_pages in shared mappings.
    shared_pages: u64,
    excluded: [(u64, u64); 5],
    maps_buf: [u8; MAPS_BUF],
    /// Hash of the maps text at the last whole scan (see scan_maps).
    maps_hash: u64,
    pagemap: c_int,
    /// /proc/self/maps, kept open and re-read from offset 0 at each scan (see open_high).
    maps: c_int,
    saved: [Saved; SAVED],
    /// VAULT_PAGES pages that hold moved-out program pages (0: pages are saved by copy).
    /// Registered (missing mode) with our userfaultfd, because UFFDIO_MOVE wants its
    /// destination registered; the program never touches this memory.
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
    /// Old ranges of REMAP events whose UNMAP is still to come.
    remapped: [(u64, u64); REMAPPED],
    remapped_next: usize,
    /// Every range registered with our uffd (under the lock), for stepping back.
    registered: [(u64, u64); MAX_REGIONS],
    nregistered: usize,
    /// Pages seen shared, re-armed more often (under the lock).
    focus: focus::Focus,
}

/// The agent's uffd (-1: none); read by the interposed ioctl.
static UFFD: AtomicI32 = AtomicI32::new(-1);
/// Held around every use of the uffd by the helper and by the interposer.
static BUSY: AtomicBool = AtomicBool::new(false);
/// Set once the program uses userfaultfd itself.
static YIELDED: AtomicBool = AtomicBool::new(false);
/// No new private page may be dropped (fork or yield in progress).
static HOLD: AtomicBool = AtomicBool::new(false);
/// The private page being dropped right now (0: none).
static DROPPING: AtomicU64 = AtomicU64::new(0);
static STATE: AtomicPtr<State> = AtomicPtr::new(std::ptr::null_mut());
/// First touches of private pages the fault thread resolved: when it moves, pages became
/// present that the re-arm thread's index lacks (a new phase's memory; without this it
/// waited for the next scan, up to a second, re-arming only pages no longer used).
static FIRST_TOUCHES: AtomicU64 = AtomicU64::new(0);
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

fn errno() -> i32 {
    // SAFETY: the thread's errno location is always valid.
    unsafe { *libc::__errno_location() }
}

unsafe fn uffd_ioctl(fd: c_int, req: c_ulong, arg: *mut c_void) -> i64 {
    libc::syscall(libc::SYS_ioctl, fd, req, arg)
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = agent_init;

extern "C" fn agent_init() {
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
}

extern "C" fn after_fork_parent() {
    HOLD.store(YIELDED.load(Ordering::Acquire), Ordering::Release);
    unlock();
}

/// Stops new drops, waits for the one in flight, puts every dropped page back, and
/// returns holding the lock.
unsafe fn quiesce() {
    HOLD.store(true, Ordering::Release);
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
        }
        if !left {
            return;
        }
        // Let the fault thread read the pending event that made the kernel say EAGAIN.
        unlock();
        libc::sched_yield();
    }
}

/// Puts saved page `i` back (caller holds the lock). False when the kernel said EAGAIN
/// (the program is changing its mappings; an event is pending): the slot is kept and the
/// caller retries later, never spinning with the lock held.
unsafe fn restore(st: &mut State, i: usize) -> bool {
    let src = match st.saved[i].vault_at {
        0 => st.saved[i].data.as_ptr() as u64,
        at => at,
    };
    // A copy, not a move back: moving would clear the vault's entry and flush the TLB.
    if !copy_back(st, st.saved[i].addr, src) && errno() == libc::EAGAIN {
        return false;
    }
    // Put back (the copy woke any thread waiting there), or EEXIST (already back), or the
    // range is gone (a waiter is woken by the fault handler): the slot is done. Its vault
    // page is freed with its chunk.
    st.saved[i].addr = 0;
    st.saved[i].vault_at = 0;
    true
}

/// First touch of `page` in registered memory: zero pages for it and the next ones up to
/// ZERO_AHEAD (stopping before any saved page), so that a program filling fresh memory
/// comes to the fault thread once per ZERO_AHEAD pages, not once per page. Falls back to
/// the one page when the range leaves the mapping. False on EAGAIN (retry).
unsafe fn zero_fill(st: &State, page: u64) -> bool {
    let saved_ahead = st
        .saved
        .iter()
        .filter(|x| x.addr > page)
        .map(|x| x.addr)
        .min()
        .unwrap_or(u64::MAX);
    let end = (page + (ZERO_AHEAD * PAGE) as u64).min(saved_ahead);
    for len in [end - page, PAGE as u64] {
        let mut z = UffdioZeropage {
            range: UffdioRange { start: page, len },
            mode: 0,
            zeropage: 0,
        };
        if uffd_ioctl(st.uffd, UFFDIO_ZEROPAGE, &mut z as *mut _ as *mut c_void) == 0 {
            return true;
        }
        match errno() {
            libc::EAGAIN => return false,
            // Filled up to a page already there (the faulting one is filled, or was there).
            libc::EEXIST => return true,
            _ => {}
        }
    }
    true
}

/// UFFDIO_COPY of one page from `src` to `dst`; true when done (or already there).
unsafe fn copy_back(st: &State, dst: u64, src: u64) -> bool {
    let mut c = UffdioCopy {
        dst,
        src,
        len: PAGE as u64,
        mode: 0,
        copy: 0,
    };
    uffd_ioctl(st.uffd, UFFDIO_COPY, &mut c as *mut _ as *mut c_void) == 0
        || errno() == libc::EEXIST
}

/// Forgets slot `i`'s page (the program discarded or unmapped it). A vault page stays
/// until its chunk is freed: freeing raises a REMOVE event, which the fault thread (the
/// caller here) would have to read itself.
fn discard(st: &mut State, i: usize) {
    st.saved[i].addr = 0;
    st.saved[i].vault_at = 0;
}

/// Makes a clean vault page ready at the cursor (re-arm thread, lock not held across the
/// madvise: its REMOVE event is read by the fault thread). False when a page still saved in
/// the chunk to free could not be put back yet (EAGAIN): nothing is moved this time.
unsafe fn prepare_vault(st: &mut State) -> bool {
    let v = VAULT_PAGES as u64;
    if st.vault_next == st.vault_clean_end {
        let lo = st.vault + (st.vault_clean_end % v) * PAGE as u64;
        let hi = lo + (VAULT_CHUNK * PAGE) as u64;
        lock();
        for i in 0..SAVED {
            let at = st.saved[i].vault_at;
            if st.saved[i].addr != 0 && lo <= at && at < hi && !restore(st, i) {
                unlock();
                return false;
            }
        }
        unlock();
        libc::madvise(lo as *mut c_void, VAULT_CHUNK * PAGE, libc::MADV_DONTNEED);
        st.vault_clean_end += VAULT_CHUNK as u64;
    }
    true
}

/// A free slot: no page, and no REMOVE event of ours still to come for it.
fn free_slot(st: &State) -> Option<usize> {
    st.saved
        .iter()
        .position(|x| x.addr == 0 && x.own_remove == 0)
}

/// Remembers a range the program discarded (caller holds the lock).
fn note_discard(st: &mut State, start: u64, end: u64) {
    let now = monotonic_ns();
    let (_, _, old) = st.discarded[st.discarded_next];
    if old != 0 && now.saturating_sub(old) < DISCARD_QUARANTINE_NS {
        st.quarantine_all_until = st.quarantine_all_until.max(old + DISCARD_QUARANTINE_NS);
    }
    st.discarded[st.discarded_next] = (start, end, now);
    st.discarded_next = (st.discarded_next + 1) % DISCARDED;
}

/// Whether [start, end) is the old range of a REMAP handled earlier (forgets it then).
fn take_remapped(st: &mut State, start: u64, end: u64) -> bool {
    match st.remapped.iter().position(|&r| r == (start, end)) {
        Some(k) => {
            st.remapped[k] = (0, 0);
            true
        }
        None => false,
    }
}

/// Whether `page` lies in a range the program discarded within the quarantine.
fn recently_discarded(st: &State, page: u64) -> bool {
    let now = monotonic_ns();
    now < st.quarantine_all_until
        || st.discarded.iter().any(|&(a, b, t)| {
            a <= page && page < b && now.saturating_sub(t) < DISCARD_QUARANTINE_NS
        })
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
                libc::munmap((*old).vault as *mut c_void, VAULT_PAGES * PAGE);
            }
            if (*old).pidfd >= 0 {
                libc::close((*old).pidfd);
            }
            if (*old).pagemap >= 0 {
                libc::close((*old).pagemap);
            }
            if (*old).maps >= 0 {
                libc::close((*old).maps);
            }
            if !(*old).ring.is_null() {
                libc::munmap((*old).ring as *mut c_void, ring::file_size());
            }
            libc::munmap(old as *mut c_void, std::mem::size_of::<State>());
        }
    }
    UFFD.store(-1, Ordering::Release);
    DROPPING.store(0, Ordering::Release);
    HOLD.store(false, Ordering::Release);
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
    let Some(dir) = std::env::var_os("HUDDLE_AGENT_DIR") else {
        return;
    };
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
        (*st).pidfd = open_pidfd();
        (*st).page = libc::sysconf(libc::_SC_PAGESIZE) as u64;
        (*st).rate = env_f64("HUDDLE_AGENT_RATE", 0.01);
        (*st).floor = env_f64("HUDDLE_AGENT_FLOOR", 100.0);
        (*st).interval_ms = env_f64("HUDDLE_AGENT_INTERVAL_MS", 10.0).clamp(1.0, 10_000.0) as i32;
        (*st).private = std::env::var("HUDDLE_AGENT_PRIVATE").map_or(true, |v| v != "0");
        (*st).rng = (libc::getpid() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (*st).excluded[0] = (p as u64, p as u64 + size as u64);
        (*st).ring = open_ring(&dir);
        if (*st).ring.is_null() {
            libc::munmap(p, size);
            return;
        }
        (*st).excluded[1] = (
            (*st).ring as u64,
            (*st).ring as u64 + ring::file_size() as u64,
        );
        let view = RingView::new((*st).ring);
        if (*st).private {
            // HUDDLE_AGENT_MOVE=0 saves pages by copy even where the kernel can move them.
            let with_move = std::env::var("HUDDLE_AGENT_MOVE").map_or(true, |v| v != "0");
            match open_uffd(with_move) {
                Ok(fd) => {
                    (*st).uffd = fd;
                    view.header()
                        .private_mode
                        .store(ring::private_mode::UFFD_WP, Ordering::Relaxed);
                }
                Err(e) => {
                    view.header()
                        .private_mode
                        .store(ring::private_mode::UNAVAILABLE, Ordering::Relaxed);
                    view.header()
                        .private_errno
                        .store(e as u32, Ordering::Relaxed);
                }
            }
        }
        if (*st).uffd >= 0 && UFFD_CAN_MOVE.load(Ordering::Relaxed) {
            open_vault(st);
        }
        if (*st).uffd >= 0 {
            let pages = adopt::adopt_file_data((*st).maps, &mut (*st).maps_buf);
            view.header().adopted_pages.store(pages, Ordering::Relaxed);
        }
        UFFD.store((*st).uffd, Ordering::Release);
        STATE.store(st, Ordering::Release);
        // The helpers run on stacks of our own, so that their ranges are known and excluded
        // before they exist: they must never drop or protect their own stacks.
        let stacks = [own_mapping(HELPER_STACK), own_mapping(HELPER_STACK)];
        for (k, stack) in stacks.iter().enumerate() {
            (*st).excluded[2 + k] = (*stack as u64, *stack as u64 + HELPER_STACK as u64);
        }
        if (*st).vault != 0 {
            (*st).excluded[4] = ((*st).vault, (*st).vault + (VAULT_PAGES * PAGE) as u64);
        }
        let mains: [extern "C" fn(*mut c_void) -> *mut c_void; 2] = [fault_main, rearm_main];
        for (stack, main) in stacks.into_iter().zip(mains) {
            let mut attr: libc::pthread_attr_t = std::mem::zeroed();
            libc::pthread_attr_init(&mut attr);
            let mut tid: libc::pthread_t = 0;
            if stack.is_null()
                || libc::pthread_attr_setstack(&mut attr, stack, HELPER_STACK) != 0
                || libc::pthread_create(&mut tid, &attr, main, st as *mut c_void) != 0
            {
                view.header().errors.fetch_add(1, Ordering::Relaxed);
            }
            libc::pthread_attr_destroy(&mut attr);
        }
    }
}

const HELPER_STACK: usize = 256 << 10;

/// Anonymous memory for the agent alone. Marked (MADV_DONTDUMP, and named where the kernel
/// allows) so the kernel never merges it with a neighbouring mapping of the program:
/// a merged mapping would either hide program memory or expose the agent's own.
unsafe fn own_mapping(size: usize) -> *mut c_void {
    let p = libc::mmap(
        std::ptr::null_mut(),
        size,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
        -1,
        0,
    );
    if p == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    libc::madvise(p, size, libc::MADV_DONTDUMP);
    const PR_SET_VMA: c_int = 0x53564d41;
    const PR_SET_VMA_ANON_NAME: c_ulong = 0;
    libc::prctl(
        PR_SET_VMA,
        PR_SET_VMA_ANON_NAME,
        p as c_ulong,
        size as c_ulong,
        c"huddle-agent".as_ptr() as c_ulong,
    );
    p
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

/// Creates `DIR/agent-PID.ring` (0600, exclusive) and maps it.
unsafe fn open_ring(dir: &std::ffi::OsStr) -> *mut u8 {
    use std::os::unix::ffi::OsStrExt;
    let pid = libc::getpid();
    let mut path = dir.as_bytes().to_vec();
    path.extend_from_slice(format!("/agent-{pid}.ring\0").as_bytes());
    let fd = libc::open(
        path.as_ptr() as *const libc::c_char,
        libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        0o600,
    );
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

/// A userfaultfd that also handles faults taken inside system calls (no
/// UFFD_USER_MODE_ONLY: with it, a write(2) into a protected page would fail).
unsafe fn open_uffd(with_move: bool) -> Result<c_int, i32> {
    let fd = libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK) as c_int;
    if fd < 0 {
        return Err(errno());
    }
    // Out of the way of the program's own fd numbers.
    let high = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 900);
    let fd = if high >= 0 {
        libc::close(fd);
        high
    } else {
        fd
    };
    // REMOVE/UNMAP/REMAP events tell us when the program itself discards or moves memory
    // that holds a dropped page, so we never put back data it threw away.
    let mut api = UffdioApi {
        api: UFFD_API,
        features: UFFD_FEATURE_THREAD_ID
            | UFFD_FEATURE_EVENT_REMOVE
            | UFFD_FEATURE_EVENT_UNMAP
            | UFFD_FEATURE_EVENT_REMAP
            | if with_move { UFFD_FEATURE_MOVE } else { 0 },
        ioctls: 0,
    };
    if uffd_ioctl(fd, UFFDIO_API, &mut api as *mut _ as *mut c_void) != 0 {
        let e = errno();
        libc::close(fd);
        if with_move {
            // A kernel before 6.8: no UFFDIO_MOVE, pages are saved by copy.
            return open_uffd(false);
        }
        return Err(e);
    }
    UFFD_CAN_MOVE.store(with_move, Ordering::Relaxed);
    Ok(fd)
}

/// Sets up the vault for dropping pages by moving them (UFFDIO_MOVE, Linux 6.8): no copy
/// and no write-protect window. Without it, pages are saved by copy.
unsafe fn open_vault(st: *mut State) {
    let vault = own_mapping(VAULT_PAGES * PAGE);
    if vault.is_null() {
        return;
    }
    let mut reg = UffdioRegister {
        range: UffdioRange {
            start: vault as u64,
            len: (VAULT_PAGES * PAGE) as u64,
        },
        mode: UFFDIO_REGISTER_MODE_MISSING,
        ioctls: 0,
    };
    if uffd_ioctl(
        (*st).uffd,
        UFFDIO_REGISTER,
        &mut reg as *mut _ as *mut c_void,
    ) != 0
    {
        libc::munmap(vault, VAULT_PAGES * PAGE);
        return;
    }
    (*st).vault = vault as u64;
    (*st).vault_clean_end = VAULT_PAGES as u64;
}

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
        // Faults the kernel answered EAGAIN for (a mapping change is pending): retried after
        // the next read, which lets that change complete.
        let mut deferred = [empty; 4 * MSGS];
        let mut ndeferred = 0usize;
        let mut wakes: u64 = 0;
        loop {
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            let timeout = if ndeferred > 0 { 1 } else { 1000 };
            // The lock is taken before the read: once an event is read, the program goes on
            // (it may touch the moved range at once), so no other helper may act on the
            // slots' old addresses until the event is handled.
            let mut count = 0;
            if libc::poll(&mut pfd, 1, timeout) > 0 {
                lock();
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
                for m in &msgs[..count] {
                    if !handle(&mut *st, &view, m) && ndeferred < deferred.len() {
                        deferred[ndeferred] = *m;
                        ndeferred += 1;
                    }
                }
                unlock();
            }
            lock();
            let mut keep = 0;
            for k in 0..ndeferred {
                let m = deferred[k];
                if !handle(&mut *st, &view, &m) {
                    deferred[keep] = m;
                    keep += 1;
                }
            }
            ndeferred = keep;
            unlock();
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
            if m.a0 & UFFD_PAGEFAULT_FLAG_WP != 0 {
                // A writer hit a page being saved: it is woken when the drop completes;
                // waking it now would let it write into the copy being taken.
                if DROPPING.load(Ordering::Acquire) == page {
                    return true;
                }
                let mut wp = UffdioWriteprotect { range, mode: 0 };
                if uffd_ioctl(
                    st.uffd,
                    UFFDIO_WRITEPROTECT,
                    &mut wp as *mut _ as *mut c_void,
                ) != 0
                {
                    if errno() == libc::EAGAIN {
                        return false;
                    }
                    view.header().errors.fetch_add(1, Ordering::Relaxed);
                }
            } else {
                // Missing: a page we dropped (put its contents back) or one never touched.
                let slot = st.saved.iter().position(|x| x.addr == page);
                let done = match slot {
                    Some(i) => restore(st, i),
                    None => zero_fill(st, page),
                };
                if !done {
                    return false;
                }
                if slot.is_none() {
                    // First touch, not a re-armed page: the detector sees it through perf.
                    FIRST_TOUCHES.fetch_add(1, Ordering::Relaxed);
                    let mut rg = range;
                    uffd_ioctl(st.uffd, UFFDIO_WAKE, &mut rg as *mut _ as *mut c_void);
                    return true;
                }
            }
            let mut rg = range;
            uffd_ioctl(st.uffd, UFFDIO_WAKE, &mut rg as *mut _ as *mut c_void);
            view.header().handled.fetch_add(1, Ordering::Relaxed);
            let now = monotonic_ns();
            if m.a0 & UFFD_PAGEFAULT_FLAG_WP == 0 {
                st.focus.fault(page, m.a2 as u32, now);
            }
            view.push(ring::Record {
                time: now,
                addr: m.a1,
                tid: m.a2 as u32,
                kind: ring::KIND_WRITE_FAULT,
            });
            true
        }
        UFFD_EVENT_REMOVE | UFFD_EVENT_UNMAP => {
            // The program discarded [a0, a1): its dropped pages there must stay discarded.
            if st.vault != 0 && m.a0 >= st.vault && m.a1 <= st.vault + (VAULT_PAGES * PAGE) as u64 {
                return true; // prepare_vault's own
            }
            let own = st
                .saved
                .iter()
                .position(|x| x.own_remove == m.a0 && m.a1 == m.a0 + PAGE as u64);
            match own {
                // Our own drop: the page is saved on purpose.
                Some(i) => st.saved[i].own_remove = 0,
                // The old range of an mremap whose REMAP was handled: its slots moved with
                // it, and any slot there now arrived later (another thread may already have
                // moved memory into the freed range).
                None if m.event == UFFD_EVENT_UNMAP && take_remapped(st, m.a0, m.a1) => {}
                None => {
                    // REMOVE: announced, zapped once read (DISCARD_QUARANTINE_NS). UNMAP:
                    // done, but the candidate list holds the range until the next scan.
                    if m.event == UFFD_EVENT_REMOVE {
                        note_discard(st, m.a0, m.a1);
                    }
                    st.changes += 1;
                    st.focus.forget(m.a0, m.a1);
                    for i in 0..SAVED {
                        let a = st.saved[i].addr;
                        if a != 0 && m.a0 <= a && a < m.a1 {
                            discard(st, i);
                        }
                    }
                }
            }
            true
        }
        UFFD_EVENT_REMAP => {
            for x in st.saved.iter_mut() {
                if x.addr != 0 && m.a0 <= x.addr && x.addr < m.a0 + m.a2 {
                    x.addr = x.addr - m.a0 + m.a1;
                }
            }
            st.changes += 1;
            st.focus.forget(m.a0, m.a0 + m.a2);
            st.remapped[st.remapped_next] = (m.a0, m.a0 + m.a2);
            st.remapped_next = (st.remapped_next + 1) % REMAPPED;
            true
        }
        _ => true,
    }
}

/// The re-arm thread: every tick, spends the page budget.
extern "C" fn rearm_main(arg: *mut c_void) -> *mut c_void {
    // SAFETY: see fault_main.
    unsafe {
        let st = &mut *(arg as *mut State);
        let view = helper_prologue(st);
        let mut period = st.interval_ms as u64 * 1_000_000;
        let started = monotonic_ns();
        let (mut last, mut last_scan, mut last_index, mut last_full) = (started, 0, 0, 0);
        let mut indexed_touches = 0;
        loop {
            let ts = libc::timespec {
                tv_sec: (period / 1_000_000_000) as libc::time_t,
                tv_nsec: (period % 1_000_000_000) as libc::c_long,
            };
            libc::nanosleep(&ts, std::ptr::null_mut());
            let now = monotonic_ns();
            // After the program changed its mappings; every 100 ms during the first second
            // (programs set up their memory then) and every second after; at every tick
            // during the first 100 ms while nothing is eligible yet. A scan whose maps text
            // is unchanged stops there, unless the program's mapping changes (UNMAP, REMAP,
            // REMOVE: a range may have been unmapped and mapped again, unregistered) or
            // INDEX_MAX_AGE_NS ask for the whole pass (registration retried, pages indexed).
            lock();
            let changed = st.changes != st.scanned_changes;
            unlock();
            let every = if now - started < 10 * SCAN_NS {
                SCAN_NS
            } else {
                10 * SCAN_NS
            };
            let touches = FIRST_TOUCHES.load(Ordering::Relaxed);
            if now - last_scan >= every || changed || (st.nregions == 0 && now - started < SCAN_NS)
            {
                last_scan = now;
                if scan_maps(st, &view, changed || now - last_full >= INDEX_MAX_AGE_NS) {
                    (last_full, last_index, indexed_touches) = (now, now, touches);
                }
            }
            if touches != indexed_touches && now - last_index >= SCAN_NS {
                last_index = now;
                indexed_touches = touches;
                index_present(st);
            }
            view.header().ticks.fetch_add(1, Ordering::Relaxed);
            expire(st, now);
            let dt = (now - last) as f64 / 1e9;
            last = now;
            // The floor is program-wide: the detector divides it among the live agents.
            let floor = match view.header().floor_share.load(Ordering::Relaxed) {
                0 => st.floor,
                share => share as f64,
            };
            // Shared pages are mapped by every process of the program: each agent counts its
            // part of them, so the program's budget counts them once.
            let live = view.header().live_agents.load(Ordering::Relaxed).max(1);
            let pages = (st.total_pages - st.shared_pages) as f64 + (st.shared_pages / live) as f64;
            let rate = match view.header().rate_ppm.load(Ordering::Relaxed) {
                0 => st.rate,
                ppm => ppm as f64 / 1e6,
            };
            let per_s = (rate * pages).max(floor);
            // Wake for about PAGES_PER_WAKE pages at a time, between the configured interval
            // and SCAN_NS. A wake-up costs more than its pages: on the 2-core VM (ring x2
            // threads, 500 pages/s) the re-arm thread used 83 ms of CPU per 5 s waking for 4
            // pages, 50 ms for 16 and 26 ms for 50. But long gaps sample oversubscribed
            // threads unevenly (only the ones running right after a wake fault): at 50 pages
            // master-worker x32 threads fell from r 0.92 to 0.85; at 16 it kept 0.92.
            let shortest = st.interval_ms as u64 * 1_000_000;
            period = ((PAGES_PER_WAKE * 1e9 / per_s) as u64).clamp(shortest, SCAN_NS.max(shortest));
            st.budget = (st.budget + per_s * dt).min(per_s); // at most one second's worth
            if view.header().paused.load(Ordering::Relaxed) != 0 {
                st.budget = 0.0;
            }
            let n = st.budget as u64;
            st.budget -= n as f64;
            // All of it at random among the mapped pages, as CDSM samples. Giving half to
            // pages seen in use lately (as before 2026-11-23) over-sampled the small blocks
            // every task touches (barriers, counters), whose events only say who came
            // first: at 32 threads master-worker fell to r 0.83-0.89 with it, 0.95 without,
            // and the 8-task patterns and the phase change did not suffer.
            rearm(st, &view, n);
            flush_shared(st, &view);
            view.header()
                .rearm_cpu_ns
                .store(thread_cpu_ns(), Ordering::Relaxed);
        }
    }
}

/// Puts back dropped pages nobody touched for a while, freeing their slots.
unsafe fn expire(st: &mut State, now: u64) {
    lock();
    for i in 0..SAVED {
        let page = st.saved[i].addr;
        if page != 0 && now.saturating_sub(st.saved[i].since) > SAVED_MAX_NS {
            restore(st, i);
        }
    }
    unlock();
}

/// Re-reads /proc/self/maps and, when its text changed or `whole` asks, rebuilds the
/// candidate list (no allocation), registers private anonymous candidates with the
/// userfaultfd and indexes the present pages. Returns whether it did that whole pass.
unsafe fn scan_maps(st: &mut State, view: &RingView, whole: bool) -> bool {
    lock();
    st.scanned_changes = st.changes;
    unlock();
    if st.maps < 0 {
        return false;
    }
    // From offset 0 every time: /proc seq files regenerate their text when read from the start.
    let mut len = 0usize;
    while len < MAPS_BUF {
        let n = libc::pread(
            st.maps,
            st.maps_buf.as_mut_ptr().add(len) as *mut c_void,
            MAPS_BUF - len,
            len as libc::off_t,
        );
        if n <= 0 {
            break;
        }
        len += n as usize;
    }
    let private_ok = st.uffd >= 0 && !YIELDED.load(Ordering::Acquire);
    let text_hash = fnv1a(&st.maps_buf[..len]) ^ private_ok as u64;
    if text_hash == st.maps_hash && !whole {
        return false;
    }
    if text_hash != st.maps_hash {
        view.header().maps_changes.fetch_add(1, Ordering::Release);
    }
    st.maps_hash = text_hash;
    st.nregions = 0;
    st.total_pages = 0;
    st.shared_pages = 0;
    let mut classifier = maps::Classifier::default();
    let mut pos = 0;
    while pos < len && st.nregions < MAX_REGIONS {
        let line_end = st.maps_buf[pos..len]
            .iter()
            .position(|&c| c == b'\n')
            .map_or(len, |i| pos + i);
        let parsed = maps::parse(&st.maps_buf[pos..line_end]);
        pos = line_end + 1;
        let Some(m) = parsed else { continue };
        let (start, end) = (m.start, m.end);
        let usage = classifier.classify(&m, private_ok);
        let mine = st
            .excluded
            .iter()
            .any(|&(a, b)| a < end && start < b.max(a + 1));
        if usage == maps::Use::Never || mine {
            continue;
        }
        let s = usage == maps::Use::Shared;
        if !s {
            lock();
            let mut reg = UffdioRegister {
                range: UffdioRange {
                    start,
                    len: end - start,
                },
                mode: UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP,
                ioctls: 0,
            };
            let known = st.registered[..st.nregistered].contains(&(start, end));
            let room = known || st.nregistered < MAX_REGIONS;
            let ok = room
                && !YIELDED.load(Ordering::Acquire)
                && uffd_ioctl(st.uffd, UFFDIO_REGISTER, &mut reg as *mut _ as *mut c_void) == 0
                && reg.ioctls & IOCTLS_NEEDED == IOCTLS_NEEDED;
            if ok && !known {
                st.registered[st.nregistered] = (start, end);
                st.nregistered += 1;
            }
            unlock();
            if !ok {
                continue;
            }
        }
        st.regions[st.nregions] = Region {
            start,
            end,
            shared: s,
        };
        st.nregions += 1;
        st.total_pages += (end - start) / st.page;
        if s {
            st.shared_pages += (end - start) / st.page;
        }
    }
    view.header()
        .candidate_pages
        .store(st.total_pages, Ordering::Relaxed);
    index_present(st);
    true
}

/// FNV-1a: tells one maps text from the next (a collision costs at most INDEX_MAX_AGE_NS of
/// a stale candidate list).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Builds the index of present pages (see PRESENT_RUNS).
unsafe fn index_present(st: &mut State) {
    st.indexed = false;
    st.npresent_runs = 0;
    st.present_pages = 0;
    if st.pagemap < 0 || st.total_pages > INDEX_MAX_PAGES {
        return;
    }
    for k in 0..st.nregions {
        let r = st.regions[k];
        let mut page = r.start;
        let mut in_run = false;
        while page < r.end {
            let want = (((r.end - page) / st.page) as usize).min(PAGEMAP_CHUNK);
            let off = (page / st.page * 8) as libc::off_t;
            let got = libc::pread(
                st.pagemap,
                st.pagemap_buf.as_mut_ptr() as *mut c_void,
                want * 8,
                off,
            );
            if got != (want * 8) as isize {
                return;
            }
            for j in 0..want {
                if st.pagemap_buf[j] & PM_PRESENT == 0 {
                    in_run = false;
                    continue;
                }
                if !in_run {
                    if st.npresent_runs == PRESENT_RUNS {
                        return;
                    }
                    st.present_runs[st.npresent_runs] =
                        (page + j as u64 * st.page, st.present_pages, r.shared);
                    st.npresent_runs += 1;
                    in_run = true;
                }
                st.present_pages += 1;
            }
            page += want as u64 * st.page;
        }
    }
    st.indexed = true;
}

/// A uniformly random page of the present-page index: (address, shared).
fn pick_indexed(st: &mut State) -> Option<(u64, bool)> {
    if st.present_pages == 0 {
        return None;
    }
    let k = next_rand(st) % st.present_pages;
    let runs = &st.present_runs[..st.npresent_runs];
    // The last run that starts at or before the k-th present page.
    let i = runs.partition_point(|&(_, before, _)| before <= k) - 1;
    let (first, before, shared) = runs[i];
    Some((first + (k - before) * st.page, shared))
}

fn next_rand(st: &mut State) -> u64 {
    // xorshift64*
    let mut x = st.rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    st.rng = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

unsafe fn rearm_page(st: &mut State, view: &RingView, addr: u64, shared: bool) {
    if shared {
        st.shared_batch[st.nshared_batch] = addr;
        st.nshared_batch += 1;
        if st.nshared_batch == SHARED_BATCH {
            flush_shared(st, view);
        }
    } else if st.vault != 0 {
        drop_by_move(st, view, addr);
    } else {
        drop_private(st, view, addr);
    }
}

/// Drops this tick's shared pages: MADV_DONTNEED drops the page-table entries only (the
/// data stays in the page cache / shmem), all in one process_madvise, so one TLB flush.
unsafe fn flush_shared(st: &mut State, view: &RingView) {
    // Only pages that are still mapped shared or from a file (pagemap bits 63 and 61): the
    // candidate list is up to a second old, and MADV_DONTNEED on private memory the program
    // mapped at the same address since would discard its data.
    let mut n = 0;
    for k in 0..st.nshared_batch {
        let addr = st.shared_batch[k];
        let shared = PM_PRESENT | PM_FILE_OR_SHARED;
        if pagemap_entry(st, addr).is_some_and(|e| e & shared == shared) {
            st.shared_batch[n] = addr;
            n += 1;
        }
    }
    st.nshared_batch = 0;
    if n == 0 {
        return;
    }
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; SHARED_BATCH];
    for (v, &addr) in iov.iter_mut().zip(&st.shared_batch[..n]) {
        *v = libc::iovec {
            iov_base: addr as *mut c_void,
            iov_len: st.page as usize,
        };
    }
    let all = (n as u64 * st.page) as isize;
    let batched = st.pidfd >= 0
        && libc::syscall(
            libc::SYS_process_madvise,
            st.pidfd,
            iov.as_ptr(),
            n,
            libc::MADV_DONTNEED,
            0,
        ) as isize
            == all;
    if !batched && st.pidfd >= 0 && errno() == libc::EINVAL {
        // Before Linux 6.13 process_madvise refuses MADV_DONTNEED: page by page from now on.
        libc::close(st.pidfd);
        st.pidfd = -1;
    }
    for k in 0..n {
        let addr = st.shared_batch[k];
        // After a partial or failed batch, page by page (dropping a page twice is harmless).
        if batched || libc::madvise(addr as *mut c_void, st.page as usize, libc::MADV_DONTNEED) == 0
        {
            view.header().rearmed_shared.fetch_add(1, Ordering::Relaxed);
        } else {
            view.header().errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Drops a private page without losing it: write-protect (writers wait), copy it aside,
/// MADV_DONTNEED, lift the protection. The next access by any task (read or write, from
/// user code or inside a system call) is a missing-page fault that the fault thread
/// resolves by copying the contents back (UFFDIO_COPY), recording who touched it.
unsafe fn drop_private(st: &mut State, view: &RingView, page: u64) {
    if st.page as usize != PAGE || st.uffd < 0 {
        return;
    }
    lock();
    let slot = free_slot(st);
    let (Some(i), false) = (
        slot,
        HOLD.load(Ordering::Acquire) || YIELDED.load(Ordering::Acquire),
    ) else {
        unlock();
        return;
    };
    if st.saved.iter().any(|x| x.addr == page) {
        unlock();
        return;
    }
    if st.changes != st.scanned_changes || recently_discarded(st, page) {
        unlock();
        return;
    }
    DROPPING.store(page, Ordering::SeqCst);
    unlock();
    let range = UffdioRange {
        start: page,
        len: PAGE as u64,
    };
    let mut wp = UffdioWriteprotect {
        range,
        mode: UFFDIO_WRITEPROTECT_MODE_WP,
    };
    if uffd_ioctl(
        st.uffd,
        UFFDIO_WRITEPROTECT,
        &mut wp as *mut _ as *mut c_void,
    ) != 0
    {
        DROPPING.store(0, Ordering::SeqCst);
        return;
    }
    // process_vm_readv, not a plain copy: if the program unmapped the page meanwhile, this
    // fails with EFAULT instead of crashing the process.
    let local = libc::iovec {
        iov_base: st.saved[i].data.as_mut_ptr() as *mut c_void,
        iov_len: PAGE,
    };
    let remote = libc::iovec {
        iov_base: page as *mut c_void,
        iov_len: PAGE,
    };
    let copied = libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) == PAGE as isize;
    let mut dropped = false;
    if copied {
        lock();
        st.saved[i].addr = page;
        st.saved[i].since = monotonic_ns();
        st.saved[i].own_remove = page;
        unlock();
        dropped = libc::madvise(page as *mut c_void, PAGE, libc::MADV_DONTNEED) == 0;
    }
    // A dropped anonymous page keeps no write-protect marker (the kernel installs markers
    // for file memory only): its next access is a missing fault, resolved without
    // protection. Lifting the protection here would only wait (EAGAIN) until the fault
    // thread has read the REMOVE event of our own madvise.
    if !dropped {
        loop {
            let mut un = UffdioWriteprotect { range, mode: 0 };
            if uffd_ioctl(
                st.uffd,
                UFFDIO_WRITEPROTECT,
                &mut un as *mut _ as *mut c_void,
            ) == 0
                || errno() != libc::EAGAIN
            {
                break;
            }
            libc::sched_yield();
        }
    }
    let mut rg = range;
    uffd_ioctl(st.uffd, UFFDIO_WAKE, &mut rg as *mut _ as *mut c_void);
    if copied && !dropped {
        lock();
        if st.saved[i].addr == page {
            st.saved[i].own_remove = 0;
            // On EAGAIN the slot stays; expire() puts the page back later.
            restore(st, i);
        }
        unlock();
    }
    DROPPING.store(0, Ordering::SeqCst);
    if dropped {
        view.header()
            .rearmed_private
            .fetch_add(1, Ordering::Relaxed);
    } else {
        view.header().errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether `page` is mapped now (pagemap bit 63). Re-arming an unmapped page does nothing,
/// so samples go to pages in use, as CDSM's walk of the present page-table entries does.
unsafe fn present(st: &State, page: u64) -> bool {
    if st.pagemap < 0 {
        return true;
    }
    pagemap_entry(st, page).is_some_and(|e| e & PM_PRESENT != 0)
}

/// /proc/self/pagemap bits: the page is mapped; it is a file page or shared anonymous.
const PM_PRESENT: u64 = 1 << 63;
const PM_FILE_OR_SHARED: u64 = 1 << 61;

/// The pagemap entry of `page` (None when it cannot be read).
unsafe fn pagemap_entry(st: &State, page: u64) -> Option<u64> {
    let mut entry: u64 = 0;
    let off = (page / st.page * 8) as libc::off_t;
    let read = libc::pread(st.pagemap, &mut entry as *mut u64 as *mut c_void, 8, off);
    (read == 8).then_some(entry)
}

/// Drops `page` by moving it into the vault. The lock is held across the move: the fault
/// thread reads events only under the lock, so an event of the program about this page is
/// either handled already (the range is then in quarantine and skipped) or still unread,
/// and then the kernel refuses the move (EAGAIN). Either way the page moved is in a
/// mapping registered with us, whose next access faults to us.
unsafe fn drop_by_move(st: &mut State, view: &RingView, page: u64) {
    if st.page as usize != PAGE || st.uffd < 0 || !prepare_vault(st) {
        return;
    }
    lock();
    let slot = free_slot(st);
    let (Some(i), false) = (
        slot,
        HOLD.load(Ordering::Acquire)
            || YIELDED.load(Ordering::Acquire)
            || st.changes != st.scanned_changes
            || recently_discarded(st, page)
            || st.saved.iter().any(|x| x.addr == page),
    ) else {
        unlock();
        return;
    };
    let dst = st.vault + (st.vault_next % VAULT_PAGES as u64) * PAGE as u64;
    let mut mv = UffdioMove {
        dst,
        src: page,
        len: PAGE as u64,
        mode: UFFDIO_MOVE_MODE_DONTWAKE,
        moved: 0,
    };
    // EBUSY for a page shared with a forked child or pinned, ENOENT for one unmapped since
    // the index was built: left where it is, as on any error.
    if uffd_ioctl(st.uffd, UFFDIO_MOVE, &mut mv as *mut _ as *mut c_void) == 0 {
        st.saved[i].addr = page;
        st.saved[i].since = monotonic_ns();
        st.saved[i].vault_at = dst;
        view.header()
            .rearmed_private
            .fetch_add(1, Ordering::Relaxed);
    }
    // After a failure the vault page may not be clean: skipped until its chunk is freed.
    st.vault_next += 1;
    unlock();
}

/// Re-arms `n` random eligible pages that are mapped: from the present-page index, or
/// (without one) by drawing candidate pages until one is mapped (up to 32 draws each).
unsafe fn rearm(st: &mut State, view: &RingView, n: u64) {
    if st.total_pages == 0 {
        return;
    }
    // Up to half to the focus table (see the focus module), the rest uniform: with three
    // quarters the heap workloads' threads lost the uniform samples that pair readers with
    // owners (bench/detect: ring x8 r 0.86, master-worker x8 0.89; 0.985, 0.927 with half).
    let n = n - rearm_focus(st, view, n / 2);
    for _ in 0..n {
        // The index is up to INDEX_MAX_AGE_NS old: pages dropped since (ours, not yet
        // touched again) or discarded by the program are drawn again.
        for _ in 0..32 {
            let chosen = if st.indexed {
                pick_indexed(st)
            } else {
                pick_any(st)
            };
            let Some((addr, shared)) = chosen else { break };
            if present(st, addr) {
                rearm_page(st, view, addr, shared);
                break;
            }
        }
    }
}

/// Re-arms up to `most` pages of the focus table that are due; returns how many it tried.
/// Only pages still inside a private region of the last scan (as for the uniform sample).
unsafe fn rearm_focus(st: &mut State, view: &RingView, most: u64) -> u64 {
    let mut due = [0u64; FOCUS_PER_TICK];
    let now = monotonic_ns();
    lock();
    let n = st
        .focus
        .take_due(now, &mut due[..(most as usize).min(FOCUS_PER_TICK)]);
    let h = view.header();
    h.focus_shared
        .store(st.focus.found_shared, Ordering::Relaxed);
    h.focus_rearms.store(st.focus.rearms, Ordering::Relaxed);
    unlock();
    for &page in &due[..n] {
        let private = st.regions[..st.nregions]
            .iter()
            .any(|r| !r.shared && r.start <= page && page < r.end);
        if !private || !present(st, page) {
            lock();
            st.focus.forget(page, page + PAGE as u64);
            unlock();
            continue;
        }
        let before = view.header().rearmed_private.load(Ordering::Relaxed);
        rearm_page(st, view, page, false);
        if view.header().rearmed_private.load(Ordering::Relaxed) == before {
            lock();
            st.focus.not_armed(page, now);
            unlock();
        }
    }
    n as u64
}

/// A uniformly random candidate page, present or not: (address, shared).
fn pick_any(st: &mut State) -> Option<(u64, bool)> {
    let mut k = next_rand(st) % st.total_pages;
    for i in 0..st.nregions {
        let r = st.regions[i];
        let pages = (r.end - r.start) / st.page;
        if k < pages {
            return Some((r.start + k * st.page, r.shared));
        }
        k -= pages;
    }
    None
}

/// Interposed `ioctl`: when the program registers a userfaultfd range of its own, the
/// agent first removes all its registrations (which also lifts its write protection and
/// wakes any waiter) and stops re-arming private memory, so the program's call succeeds.
///
/// # Safety
/// Same contract as ioctl(2); the third argument is passed through unchanged.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    let ours = UFFD.load(Ordering::Acquire);
    if request == UFFDIO_REGISTER && ours >= 0 && fd != ours && !YIELDED.load(Ordering::Acquire) {
        // Every dropped page back first, then no registration of ours left in the way.
        quiesce();
        YIELDED.store(true, Ordering::Release);
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
                h.header()
                    .private_mode
                    .store(ring::private_mode::YIELDED_TO_PROGRAM, Ordering::Relaxed);
            }
        }
        unlock();
    }
    libc::syscall(libc::SYS_ioctl, fd, request, arg) as c_int
}
