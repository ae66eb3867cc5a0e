//! The huddle agent: a shared library `huddle detect` preloads (LD_PRELOAD) into the target.
//!
//! A helper thread wakes every `HUDDLE_AGENT_INTERVAL_MS` (10 ms, as in CDSM) and re-arms a
//! random sample of the process's data pages, at most `max(rate * eligible pages, floor)`
//! pages per second, so that the next access to them faults again and the detector sees
//! who touches them. It never changes what the program computes:
//!
//! * Shared mappings (MAP_SHARED files, shmem, /dev/zero): `madvise(MADV_DONTNEED)` drops
//!   the page-table entries only; the data stays in the page cache / shmem and the next
//!   access (read or write) takes a minor fault that maps it again.
//! * Private anonymous memory (heap, anonymous mmap): dropping PTEs would discard data, and
//!   `mprotect` would make `read(2)`/`write(2)` into the page fail with EFAULT. The agent
//!   uses userfaultfd write-protection instead: a write (from user code or from the kernel
//!   inside a system call) blocks until the helper thread lifts the protection, which it
//!   does at once, recording (tid, address). Reads do not fault: private memory is seen
//!   through its writers only.
//!
//! Never re-armed: code and read-only mappings, file-backed private mappings (library data),
//! anonymous memory right after a file mapping (a .bss), thread stacks (mappings right above
//! a guard page) and [stack], device mappings, the agent's own memory, and any memory once
//! the program registers a userfaultfd range itself (`ioctl` is interposed: the agent
//! unregisters everything and steps back before the program's call proceeds).
//!
//! Thread stacks are eligible: glibc stacks are anonymous mappings that the kernel merges
//! with neighbouring anonymous memory, so they cannot be told apart reliably, and a
//! write-protected stack page only delays its owner (or a signal frame being pushed) until
//! the helper lifts the protection. A stack is written by its own thread, so it adds no
//! false communication, only spends budget.
//!
//! The helper thread blocks all signals and makes system calls only (no malloc, no locks
//! the program could hold), so a program thread stopped on a write-protected page can never
//! wait on it. Without `HUDDLE_AGENT_DIR` in the environment the library does nothing.

use detect::ring::{self, RingView};
use libc::{c_int, c_ulong, c_void};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering};

// userfaultfd ABI (linux/userfaultfd.h).
const UFFD_API: u64 = 0xAA;
const UFFDIO_API: c_ulong = 0xc018_aa3f;
const UFFDIO_REGISTER: c_ulong = 0xc020_aa00;
const UFFDIO_UNREGISTER: c_ulong = 0x8010_aa01;
const UFFDIO_WAKE: c_ulong = 0x8010_aa02;
const UFFDIO_WRITEPROTECT: c_ulong = 0xc018_aa06;
const UFFDIO_REGISTER_MODE_WP: u64 = 2;
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1;
const UFFD_FEATURE_THREAD_ID: u64 = 1 << 8;
const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
const UFFD_PAGEFAULT_FLAG_WP: u64 = 2;
const IOCTL_WRITEPROTECT_BIT: u64 = 1 << 6;

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
#[derive(Clone, Copy)]
struct UffdMsg {
    event: u8,
    _r1: u8,
    _r2: u16,
    _r3: u32,
    flags: u64,
    address: u64,
    ptid: u32,
    _pad: u32,
}

const MAX_REGIONS: usize = 4096;
const MAPS_BUF: usize = 1 << 20;
const MSGS: usize = 64;
/// Pages recently seen in use (re-armed again first) and pages waiting to be checked.
const HOT: usize = 512;

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
    excluded: [(u64, u64); 4],
    maps: [u8; MAPS_BUF],
    msgs: [UffdMsg; MSGS],
    /// Pages that faulted (private) or were found mapped again (shared) since re-armed.
    hot: [(u64, bool); HOT],
    nhot: usize,
    hot_next: usize,
    /// Shared pages dropped, to look up in /proc/self/pagemap at the next tick.
    probe: [u64; HOT],
    nprobe: usize,
    pagemap: c_int,
}

impl State {
    fn add_hot(&mut self, page: u64, shared: bool) {
        if self.hot[..self.nhot].iter().any(|&(p, _)| p == page) {
            return;
        }
        if self.nhot < HOT {
            self.hot[self.nhot] = (page, shared);
            self.nhot += 1;
        } else {
            let i = (self.rng as usize) % HOT;
            self.hot[i] = (page, shared);
        }
    }
}

/// The agent's uffd (-1: none); read by the interposed ioctl.
static UFFD: AtomicI32 = AtomicI32::new(-1);
/// Held around every use of the uffd by the helper and by the interposer.
static BUSY: AtomicBool = AtomicBool::new(false);
/// Set once the program uses userfaultfd itself.
static YIELDED: AtomicBool = AtomicBool::new(false);
static STATE: AtomicPtr<State> = AtomicPtr::new(std::ptr::null_mut());

fn lock() {
    while BUSY
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
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
    lock();
}

extern "C" fn after_fork_parent() {
    unlock();
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
            if (*old).pagemap >= 0 {
                libc::close((*old).pagemap);
            }
            if !(*old).ring.is_null() {
                libc::munmap((*old).ring as *mut c_void, ring::file_size());
            }
            libc::munmap(old as *mut c_void, std::mem::size_of::<State>());
        }
    }
    UFFD.store(-1, Ordering::Release);
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
        (*st).pagemap = -1;
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
            match open_uffd() {
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
        UFFD.store((*st).uffd, Ordering::Release);
        STATE.store(st, Ordering::Release);
        // The helper runs on a stack of our own, so that its range is known and excluded.
        let stack = own_mapping(HELPER_STACK);
        // Excluded before the helper exists: it must never protect its own stack.
        (*st).excluded[2] = (stack as u64, stack as u64 + HELPER_STACK as u64);
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        let mut tid: libc::pthread_t = 0;
        if stack.is_null()
            || libc::pthread_attr_setstack(&mut attr, stack, HELPER_STACK) != 0
            || libc::pthread_create(&mut tid, &attr, helper, st as *mut c_void) != 0
        {
            view.header().errors.fetch_add(1, Ordering::Relaxed);
        }
        libc::pthread_attr_destroy(&mut attr);
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
unsafe fn open_uffd() -> Result<c_int, i32> {
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
    let mut api = UffdioApi {
        api: UFFD_API,
        features: UFFD_FEATURE_THREAD_ID,
        ioctls: 0,
    };
    if uffd_ioctl(fd, UFFDIO_API, &mut api as *mut _ as *mut c_void) != 0 {
        let e = errno();
        libc::close(fd);
        return Err(e);
    }
    Ok(fd)
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

extern "C" fn helper(arg: *mut c_void) -> *mut c_void {
    // SAFETY: arg is the State mapping, used only by this thread (and fork handlers under BUSY).
    unsafe {
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
        let st = &mut *(arg as *mut State);
        let view = RingView::new(st.ring);
        view.header()
            .helper_tid
            .store(libc::gettid() as u32, Ordering::Relaxed);
        st.pagemap = libc::open(
            c"/proc/self/pagemap".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if st.pagemap >= 0 {
            let high = libc::fcntl(st.pagemap, libc::F_DUPFD_CLOEXEC, 900);
            if high >= 0 {
                libc::close(st.pagemap);
                st.pagemap = high;
            }
        }
        let period = st.interval_ms as u64 * 1_000_000;
        let mut next_tick = monotonic_ns();
        let mut last = next_tick;
        let mut tick: u64 = 0;
        loop {
            let now = monotonic_ns();
            let wait_ms = (next_tick.saturating_sub(now) / 1_000_000) as c_int;
            if st.uffd >= 0 && !YIELDED.load(Ordering::Acquire) {
                let mut pfd = libc::pollfd {
                    fd: st.uffd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                if libc::poll(&mut pfd, 1, wait_ms) > 0 {
                    resolve_faults(st, &view);
                }
            } else if wait_ms > 0 {
                libc::usleep(wait_ms as u32 * 1000);
            }
            let now = monotonic_ns();
            if now < next_tick {
                continue;
            }
            next_tick = now + period;
            if tick.is_multiple_of(10) || st.nregions == 0 {
                scan_maps(st, &view);
            }
            tick += 1;
            view.header().ticks.fetch_add(1, Ordering::Relaxed);
            let dt = (now - last) as f64 / 1e9;
            last = now;
            let per_s = (st.rate * st.total_pages as f64).max(st.floor);
            st.budget = (st.budget + per_s * dt).min(per_s); // at most one second's worth
            let n = st.budget as u64;
            st.budget -= n as f64;
            check_probes(st);
            // Half the budget goes to pages known to be in use, half to random discovery.
            let hot = if st.nhot > 0 { (n + tick % 2) / 2 } else { 0 };
            rearm_hot(st, &view, hot);
            rearm(st, &view, n - hot);
        }
    }
}

/// Lifts write protection for every pending fault and records who wrote where.
unsafe fn resolve_faults(st: &mut State, view: &RingView) {
    lock();
    let n = libc::read(
        st.uffd,
        st.msgs.as_mut_ptr() as *mut c_void,
        std::mem::size_of::<[UffdMsg; MSGS]>(),
    );
    if n > 0 {
        let count = n as usize / std::mem::size_of::<UffdMsg>();
        let time = monotonic_ns();
        for i in 0..count.min(MSGS) {
            let m = st.msgs[i];
            if m.event != UFFD_EVENT_PAGEFAULT {
                continue;
            }
            let page = m.address & !(st.page - 1);
            let range = UffdioRange {
                start: page,
                len: st.page,
            };
            let r = if m.flags & UFFD_PAGEFAULT_FLAG_WP != 0 {
                let mut wp = UffdioWriteprotect { range, mode: 0 };
                uffd_ioctl(
                    st.uffd,
                    UFFDIO_WRITEPROTECT,
                    &mut wp as *mut _ as *mut c_void,
                )
            } else {
                let mut rg = range;
                uffd_ioctl(st.uffd, UFFDIO_WAKE, &mut rg as *mut _ as *mut c_void)
            };
            if r != 0 {
                // Never leave a thread stuck: wake it whatever happened.
                let mut rg = range;
                uffd_ioctl(st.uffd, UFFDIO_WAKE, &mut rg as *mut _ as *mut c_void);
                view.header().errors.fetch_add(1, Ordering::Relaxed);
            }
            view.header().handled.fetch_add(1, Ordering::Relaxed);
            st.add_hot(page, false);
            view.push(ring::Record {
                time,
                addr: m.address,
                tid: m.ptid,
                kind: ring::KIND_WRITE_FAULT,
            });
        }
    }
    unlock();
}

fn parse_hex(s: &[u8]) -> Option<u64> {
    let mut v: u64 = 0;
    if s.is_empty() {
        return None;
    }
    for &c in s {
        let d = (c as char).to_digit(16)? as u64;
        v = v.checked_mul(16)?.checked_add(d)?;
    }
    Some(v)
}

/// Re-reads /proc/self/maps into the candidate list (no allocation) and registers private
/// anonymous candidates with the userfaultfd.
unsafe fn scan_maps(st: &mut State, view: &RingView) {
    let fd = libc::open(
        c"/proc/self/maps".as_ptr(),
        libc::O_RDONLY | libc::O_CLOEXEC,
    );
    if fd < 0 {
        return;
    }
    let mut len = 0usize;
    while len < MAPS_BUF {
        let n = libc::read(
            fd,
            st.maps.as_mut_ptr().add(len) as *mut c_void,
            MAPS_BUF - len,
        );
        if n <= 0 {
            break;
        }
        len += n as usize;
    }
    libc::close(fd);
    let private_ok = st.uffd >= 0 && !YIELDED.load(Ordering::Acquire);
    st.nregions = 0;
    st.total_pages = 0;
    let (mut prev_end, mut prev_file) = (0u64, false);
    let mut pos = 0;
    while pos < len && st.nregions < MAX_REGIONS {
        let line_end = st.maps[pos..len]
            .iter()
            .position(|&c| c == b'\n')
            .map_or(len, |i| pos + i);
        let line = &st.maps[pos..line_end];
        pos = line_end + 1;
        let mut fields = line.split(|&c| c == b' ').filter(|f| !f.is_empty());
        let (Some(range), Some(perms), Some(_off), Some(_dev), Some(inode)) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            continue;
        };
        let path = fields.next().unwrap_or(b"");
        let Some(dash) = range.iter().position(|&c| c == b'-') else {
            continue;
        };
        let (Some(start), Some(end)) = (parse_hex(&range[..dash]), parse_hex(&range[dash + 1..]))
        else {
            continue;
        };
        if perms.len() < 4 {
            continue;
        }
        let (r, w, x, s) = (
            perms[0] == b'r',
            perms[1] == b'w',
            perms[2] == b'x',
            perms[3] == b's',
        );
        let anon = inode == b"0" && (path.is_empty() || path == b"[heap]");
        let adjacent = start == prev_end;
        let after_file = adjacent && prev_file;
        prev_end = end;
        prev_file = inode != b"0";
        if !r || !w || x {
            continue;
        }
        let mine = st
            .excluded
            .iter()
            .any(|&(a, b)| a < end && start < b.max(a + 1));
        if mine {
            continue;
        }
        let eligible = if s {
            // Shared: files, shmem, /dev/zero; never device memory.
            !path.starts_with(b"/dev/")
                || path.starts_with(b"/dev/zero")
                || path.starts_with(b"/dev/shm/")
        } else {
            private_ok && anon && !after_file
        };
        if !eligible {
            continue;
        }
        if !s {
            lock();
            let mut reg = UffdioRegister {
                range: UffdioRange {
                    start,
                    len: end - start,
                },
                mode: UFFDIO_REGISTER_MODE_WP,
                ioctls: 0,
            };
            let ok = !YIELDED.load(Ordering::Acquire)
                && uffd_ioctl(st.uffd, UFFDIO_REGISTER, &mut reg as *mut _ as *mut c_void) == 0
                && reg.ioctls & IOCTL_WRITEPROTECT_BIT != 0;
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
    }
    view.header()
        .candidate_pages
        .store(st.total_pages, Ordering::Relaxed);
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

/// Shared pages dropped earlier and mapped again since (present in pagemap) are in use.
unsafe fn check_probes(st: &mut State) {
    if st.pagemap < 0 {
        st.nprobe = 0;
        return;
    }
    for i in 0..st.nprobe {
        let page = st.probe[i];
        let mut entry: u64 = 0;
        let off = (page / st.page * 8) as libc::off_t;
        if libc::pread(st.pagemap, &mut entry as *mut u64 as *mut c_void, 8, off) == 8
            && entry >> 63 == 1
        {
            st.add_hot(page, true);
        }
    }
    st.nprobe = 0;
}

/// Re-arms `n` pages from the hot list, round robin.
unsafe fn rearm_hot(st: &mut State, view: &RingView, n: u64) {
    for _ in 0..n.min(st.nhot as u64) {
        st.hot_next = (st.hot_next + 1) % st.nhot;
        let (page, shared) = st.hot[st.hot_next];
        // Only pages still inside a candidate region (the program may have unmapped it).
        let live = st.regions[..st.nregions]
            .iter()
            .any(|r| r.start <= page && page < r.end && r.shared == shared);
        if live {
            rearm_page(st, view, page, shared);
        }
    }
}

unsafe fn rearm_page(st: &mut State, view: &RingView, addr: u64, shared: bool) {
    if shared {
        if libc::madvise(addr as *mut c_void, st.page as usize, libc::MADV_DONTNEED) == 0 {
            view.header().rearmed_shared.fetch_add(1, Ordering::Relaxed);
            if st.nprobe < HOT {
                st.probe[st.nprobe] = addr;
                st.nprobe += 1;
            }
        } else {
            view.header().errors.fetch_add(1, Ordering::Relaxed);
        }
    } else {
        lock();
        let ok = !YIELDED.load(Ordering::Acquire) && {
            let mut wp = UffdioWriteprotect {
                range: UffdioRange {
                    start: addr,
                    len: st.page,
                },
                mode: UFFDIO_WRITEPROTECT_MODE_WP,
            };
            uffd_ioctl(
                st.uffd,
                UFFDIO_WRITEPROTECT,
                &mut wp as *mut _ as *mut c_void,
            ) == 0
        };
        unlock();
        if ok {
            view.header()
                .rearmed_private
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Whether `page` is mapped now (pagemap bit 63). Re-arming an unmapped page does nothing,
/// so samples go to pages in use, as CDSM's walk of the present page-table entries does.
unsafe fn present(st: &State, page: u64) -> bool {
    if st.pagemap < 0 {
        return true;
    }
    let mut entry: u64 = 0;
    let off = (page / st.page * 8) as libc::off_t;
    libc::pread(st.pagemap, &mut entry as *mut u64 as *mut c_void, 8, off) == 8 && entry >> 63 == 1
}

/// Re-arms `n` random eligible pages that are mapped (up to 32 draws each).
unsafe fn rearm(st: &mut State, view: &RingView, n: u64) {
    if st.total_pages == 0 {
        return;
    }
    for _ in 0..n {
        for _ in 0..32 {
            let mut k = next_rand(st) % st.total_pages;
            let mut chosen = None;
            for i in 0..st.nregions {
                let r = st.regions[i];
                let pages = (r.end - r.start) / st.page;
                if k < pages {
                    chosen = Some((r.shared, r.start + k * st.page));
                    break;
                }
                k -= pages;
            }
            let Some((shared, addr)) = chosen else { break };
            if present(st, addr) {
                rearm_page(st, view, addr, shared);
                break;
            }
        }
    }
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
        lock();
        YIELDED.store(true, Ordering::Release);
        let st = STATE.load(Ordering::Acquire);
        if !st.is_null() {
            for i in 0..(*st).nregions {
                let r = (*st).regions[i];
                if !r.shared {
                    let mut rg = UffdioRange {
                        start: r.start,
                        len: r.end - r.start,
                    };
                    uffd_ioctl(ours, UFFDIO_UNREGISTER, &mut rg as *mut _ as *mut c_void);
                }
            }
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
