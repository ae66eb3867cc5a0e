//! The shared segment every rank of a job maps: a header, one slot per rank (pid, state,
//! futex doorbell, placement), the pair class matrix, and one single-producer single-consumer
//! byte ring per ordered pair of ranks (ring src->dst is written only by src, read only by dst).
//!
//! `huddle launch` creates it as a memfd (so nothing is left in /dev/shm if anything dies)
//! and passes the descriptor to the ranks it forks through `HUDDLE_MSG_FD`.

use crate::rules::{Class, Rule, NCLASS};
use crate::MsgError;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

const MAGIC: u64 = 0x6875_6464_6c65_6d73; // "huddlems"
const VERSION: u32 = 4;
/// Placement keys per rank: package, NUMA node, L3, L2, core (logical indexes; NONE if absent).
pub const NKEYS: usize = 5;
pub const NONE: u32 = u32::MAX;
/// `Header::abort`: a caller of raise_abort has claimed it / has written rank and code.
const ABORT_CLAIMED: u32 = 1;
const ABORT_RAISED: u32 = 2;

/// Rank states in `RankSlot::state`.
pub const STATE_STARTED: u32 = 0;
pub const STATE_READY: u32 = 1;
pub const STATE_FINALIZED: u32 = 2;

#[repr(C)]
pub struct Header {
    magic: u64,
    version: u32,
    pub nranks: u32,
    pub ring_bytes: u64,
    total_bytes: u64,
    /// ABORT_RAISED once the job must stop: a rank died, called MPI_Abort or hit a fatal
    /// error (ABORT_CLAIMED while the first caller writes who and why).
    pub abort: AtomicU32,
    pub abort_rank: AtomicI32,
    pub abort_code: AtomicI32,
    /// 1 while process_vm_readv works between ranks; a rank whose probe fails clears it.
    pub single_copy_ok: AtomicU32,
    /// 1 while every rank registered for membarrier(GLOBAL_EXPEDITED); a rank whose
    /// registration fails clears it and all ranks fall back to a fence per wake-up check.
    pub asym_fence_ok: AtomicU32,
    /// MPI_Init rendezvous: ranks arrived, and a generation word to futex-wait on.
    pub init_arrived: AtomicU32,
    pub init_gen: AtomicU32,
    pub rules: [Rule; NCLASS],
}

#[repr(C, align(128))]
pub struct RankSlot {
    pub pid: AtomicI32,
    pub state: AtomicU32,
    /// Bumped by whoever gives this rank something to do while it sleeps; the futex word.
    pub doorbell: AtomicU32,
    /// Nonzero while the rank sleeps (or is about to) on `doorbell`.
    pub waiting: AtomicU32,
    pub pu_os: u32,
    pub keys: [u32; NKEYS],
    /// Address of a word with a known value, read by a peer to probe process_vm_readv.
    pub probe_addr: AtomicU64,
}

/// Copy slots per ordered pair: single-copy messages in flight that both ranks may copy.
pub const NSLOTS: usize = 32;

/// Copy-slot states (`CopySlot::state`).
pub const SLOT_FREE: u32 = 0;
/// The sender announced the message (RTS names this slot).
pub const SLOT_POSTED: u32 = 1;
/// The receiver matched it and published its buffer: both may claim chunks.
pub const SLOT_MATCHED: u32 = 2;

/// One cooperative single copy: the receiver publishes where the bytes go, then sender and
/// receiver claim chunks from `next` (sender with process_vm_writev, receiver with
/// process_vm_readv) and add the bytes they copied to `done`. Only the sender moves a slot
/// from FREE to POSTED (and back, when the FIN comes); only the receiver sets it MATCHED.
#[repr(C, align(64))]
pub struct CopySlot {
    pub state: AtomicU32,
    /// Nonzero if a copy failed.
    pub err: AtomicU32,
    /// Receive buffer address in the receiver.
    pub addr: AtomicU64,
    /// Bytes to copy (the message, cut to the receive buffer).
    pub len: AtomicU64,
    pub chunk: AtomicU64,
    /// Next chunk index to claim.
    pub next: AtomicU64,
    /// Bytes copied so far, by both sides.
    pub done: AtomicU64,
}

/// The consumer's counter (bytes read, ever; the producer finds new records by their stamps,
/// see engine::Rec), alone on its line, then the pair's copy slots.
#[repr(C, align(128))]
pub struct RingCtl {
    pub tail: AtomicU64,
    _pad: [u8; 120],
    pub slots: [CopySlot; NSLOTS],
}

struct Layout {
    ranks: usize,
    classes: usize,
    rings: usize,
    ring_stride: usize,
    total: usize,
}

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

fn layout(n: usize, ring_bytes: usize) -> Layout {
    let ranks = round_up(std::mem::size_of::<Header>(), 4096);
    let classes = ranks + n * std::mem::size_of::<RankSlot>();
    let rings = round_up(classes + n * n, 4096);
    let ring_stride = std::mem::size_of::<RingCtl>() + ring_bytes;
    Layout {
        ranks,
        classes,
        rings,
        ring_stride,
        total: rings + n * n * ring_stride,
    }
}

/// What `create` needs to know about the job.
pub struct JobSpec {
    /// Per rank: the PU OS index it is pinned to and its placement keys.
    pub pu_os: Vec<u32>,
    pub keys: Vec<[u32; NKEYS]>,
    /// Row-major n*n locality classes.
    pub classes: Vec<Class>,
    pub rules: [Rule; NCLASS],
    /// Capacity of each pair ring in bytes (a multiple of 64).
    pub ring_bytes: usize,
}

/// A mapped segment. Dropping it unmaps it (and closes the memfd).
pub struct Segment {
    base: *mut u8,
    len: usize,
    n: usize,
    lay: Layout,
    fd: OwnedFd,
}

// The segment is process-shared memory accessed only through atomics and the ring protocol.
unsafe impl Send for Segment {}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

impl Segment {
    /// Creates and initializes a segment for a job (launcher side).
    pub fn create(spec: &JobSpec) -> Result<Segment, MsgError> {
        let n = spec.pu_os.len();
        if n == 0 || spec.keys.len() != n || spec.classes.len() != n * n {
            return Err(MsgError::BadJob(
                "rank tables disagree on the number of ranks".into(),
            ));
        }
        if spec.ring_bytes < 4096 || !spec.ring_bytes.is_multiple_of(64) {
            return Err(MsgError::BadJob(format!(
                "ring size {} must be a multiple of 64 and at least 4096",
                spec.ring_bytes
            )));
        }
        let lay = layout(n, spec.ring_bytes);
        // No MFD_CLOEXEC: the ranks inherit the descriptor across exec.
        let raw = unsafe { libc::memfd_create(c"huddle-msg".as_ptr(), 0) };
        if raw < 0 {
            return Err(MsgError::Sys("memfd_create", errno()));
        }
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        if unsafe { libc::ftruncate(raw, lay.total as libc::off_t) } != 0 {
            return Err(MsgError::Sys("ftruncate of the shared segment", errno()));
        }
        let mut seg = Segment::map(fd, lay, n)?;
        let total = seg.len as u64;
        let h = seg.header_mut_init();
        h.magic = MAGIC;
        h.version = VERSION;
        h.nranks = n as u32;
        h.ring_bytes = spec.ring_bytes as u64;
        h.total_bytes = total;
        h.single_copy_ok.store(1, Ordering::Relaxed);
        h.asym_fence_ok.store(1, Ordering::Relaxed);
        h.rules = spec.rules;
        for r in 0..n {
            let s = seg.rank_ptr(r);
            unsafe {
                (*s).pu_os = spec.pu_os[r];
                (*s).keys = spec.keys[r];
            }
        }
        for (i, c) in spec.classes.iter().enumerate() {
            unsafe { *seg.base.add(seg.lay.classes + i) = *c as u8 };
        }
        Ok(seg)
    }

    /// Maps the segment a launcher passed in `fd` (rank side) and checks it.
    pub fn attach(fd: RawFd) -> Result<Segment, MsgError> {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(MsgError::Sys("fstat of HUDDLE_MSG_FD", errno()));
        }
        let size = st.st_size as usize;
        if size < std::mem::size_of::<Header>() {
            return Err(MsgError::BadSegment("too small".into()));
        }
        // Read the header through a temporary mapping of its first page.
        let owned = unsafe { OwnedFd::from_raw_fd(libc::dup(fd)) };
        let head = Segment::map(owned, layout(1, 4096), 0).map(|mut s| {
            s.len = std::mem::size_of::<Header>();
            s
        });
        let (n, ring_bytes) = match head {
            Ok(s) => {
                let h = s.header();
                if h.magic != MAGIC || h.version != VERSION {
                    return Err(MsgError::BadSegment("wrong magic or version".into()));
                }
                (h.nranks as usize, h.ring_bytes as usize)
            }
            Err(e) => return Err(e),
        };
        let lay = layout(n, ring_bytes);
        if lay.total != size || n == 0 || !ring_bytes.is_multiple_of(64) {
            return Err(MsgError::BadSegment(format!(
                "size {size} does not match {n} ranks with {ring_bytes}-byte rings"
            )));
        }
        let owned = unsafe { OwnedFd::from_raw_fd(libc::dup(fd)) };
        Segment::map(owned, lay, n)
    }

    fn map(fd: OwnedFd, lay: Layout, n: usize) -> Result<Segment, MsgError> {
        let len = if n == 0 { 4096 } else { lay.total };
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(MsgError::Sys("mmap of the shared segment", errno()));
        }
        Ok(Segment {
            base: p as *mut u8,
            len,
            n,
            lay,
            fd,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub fn nranks(&self) -> usize {
        self.n
    }

    pub fn bytes(&self) -> usize {
        self.len
    }

    /// Only while creating, before any rank maps the segment.
    fn header_mut_init(&mut self) -> &mut Header {
        unsafe { &mut *(self.base as *mut Header) }
    }

    pub fn header(&self) -> &Header {
        unsafe { &*(self.base as *const Header) }
    }

    fn rank_ptr(&self, r: usize) -> *mut RankSlot {
        debug_assert!(r < self.n);
        unsafe {
            self.base
                .add(self.lay.ranks + r * std::mem::size_of::<RankSlot>()) as *mut _
        }
    }

    pub fn rank(&self, r: usize) -> &RankSlot {
        unsafe { &*self.rank_ptr(r) }
    }

    pub fn class(&self, a: usize, b: usize) -> Class {
        let v = unsafe { *self.base.add(self.lay.classes + a * self.n + b) };
        Class::from_u8(v)
    }

    pub fn ring_ctl(&self, src: usize, dst: usize) -> &RingCtl {
        let off = self.lay.rings + (src * self.n + dst) * self.lay.ring_stride;
        unsafe { &*(self.base.add(off) as *const RingCtl) }
    }

    /// Maps in, now, the pages of every ring `rank` writes or reads, so that first touches
    /// do not fault inside timed communication. Best effort: MADV_POPULATE_WRITE needs
    /// Linux 5.14; without it pages fault in on first use as before.
    pub fn prefault_rings_of(&self, rank: usize) {
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        for other in 0..self.n {
            for (src, dst) in [(rank, other), (other, rank)] {
                let off = self.lay.rings + (src * self.n + dst) * self.lay.ring_stride;
                let start = off / 4096 * 4096;
                let end = off + self.lay.ring_stride;
                unsafe {
                    libc::madvise(
                        self.base.add(start) as *mut libc::c_void,
                        end - start,
                        MADV_POPULATE_WRITE,
                    )
                };
            }
        }
    }

    /// Start of the data area of ring src->dst (`ring_bytes` long).
    pub fn ring_data(&self, src: usize, dst: usize) -> *mut u8 {
        let off = self.lay.rings
            + (src * self.n + dst) * self.lay.ring_stride
            + std::mem::size_of::<RingCtl>();
        unsafe { self.base.add(off) }
    }

    /// Tells every rank to stop (first caller wins) and wakes the sleepers. The rank and
    /// code are written before the flag says so: a reader never sees the zeros of a fresh
    /// segment instead.
    pub fn raise_abort(&self, rank: i32, code: i32) {
        let h = self.header();
        if h.abort
            .compare_exchange(0, ABORT_CLAIMED, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            h.abort_rank.store(rank, Ordering::SeqCst);
            h.abort_code.store(code, Ordering::SeqCst);
            h.abort.store(ABORT_RAISED, Ordering::Release);
        }
        for r in 0..self.n {
            ring_doorbell(&self.rank(r).doorbell, true);
        }
    }
}

impl Segment {
    /// (rank, code) of the abort once one is raised.
    #[inline]
    pub fn aborted(&self) -> Option<(i32, i32)> {
        let h = self.header();
        (h.abort.load(Ordering::Acquire) == ABORT_RAISED).then(|| {
            (
                h.abort_rank.load(Ordering::Relaxed),
                h.abort_code.load(Ordering::Relaxed),
            )
        })
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// Bumps a doorbell and, if `wake`, wakes whoever sleeps on it.
pub fn ring_doorbell(word: &AtomicU32, wake: bool) {
    word.fetch_add(1, Ordering::SeqCst);
    if wake {
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAKE,
                i32::MAX,
                std::ptr::null::<libc::timespec>(),
                std::ptr::null::<u32>(),
                0,
            )
        };
    }
}

// membarrier(2) commands (linux/membarrier.h; not in the libc crate).
const MEMBARRIER_CMD_GLOBAL_EXPEDITED: libc::c_int = 1 << 1;
const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_int = 1 << 2;

/// Registers this process for `heavy_barrier`. False where the kernel lacks it (before 4.16)
/// or a seccomp filter refuses it.
pub fn register_heavy_barrier() -> bool {
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED,
            0,
            0,
        ) == 0
    }
}

/// The slow side of an asymmetric fence: on return, every running thread of every registered
/// process has passed a full memory barrier, so a compiler barrier on the fast side (the
/// sender's check of `waiting`) orders like a real fence. Only a rank about to sleep pays it.
pub fn heavy_barrier() -> bool {
    unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) == 0 }
}

/// Sleeps while `*word == seen`, at most `timeout_ms`.
pub fn futex_wait(word: &AtomicU32, seen: u32, timeout_ms: u64) {
    let ts = libc::timespec {
        tv_sec: (timeout_ms / 1000) as libc::time_t,
        tv_nsec: ((timeout_ms % 1000) * 1_000_000) as libc::c_long,
    };
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            seen,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0,
        )
    };
}
