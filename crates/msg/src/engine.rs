//! The point-to-point engine of one rank: pair rings, MPI matching, the three transports and
//! progress by polling, then sleeping on a futex.
//!
//! Ring records are 32-byte headers followed by the payload rounded up to 32 bytes (a SHORT
//! record carries up to 8 bytes inside its header). A message is either one SHORT or DATA
//! record (eager), a DATA record followed by MORE records of `fragment`
//! bytes each (pipelined copy-in/copy-out), or an RTS record carrying the sender's buffer
//! address and a copy slot of the pair; the receiver publishes its buffer in the slot, both
//! ranks copy chunks of the message (receiver: process_vm_readv, sender: process_vm_writev)
//! until none is left, and the receiver answers with FIN once every byte is in.
//! Every ring is FIFO and matching happens on a message's first record, in ring order, so
//! two messages from one sender on one communicator are matched in the order they were sent.

use crate::rules::{Class, Rule, NCLASS};
use crate::shm::{self, Segment};
use crate::MsgError;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{compiler_fence, fence, AtomicU64, Ordering};

pub const ANY: i32 = -1;

/// Ring records start on a half cache line: a 32-byte header, then the payload rounded up to
/// 32 bytes. A message of at most `SHORT_MAX` bytes is a SHORT record, its payload inside
/// the header: two per cache line, where each message took a line of its own before (the
/// line transfers between the cores bound the message rate when the cores are far apart).
/// RTS and FIN take 64 bytes (their fields fill a second half line).
const ALIGN: u64 = 32;
const HDR: u64 = 32;
const SHORT_MAX: u64 = 8;
const PAD: u32 = 1;
const DATA: u32 = 2;
const MORE: u32 = 3;
const RTS: u32 = 4;
const FIN: u32 = 5;
const SHORT: u32 = 6;

/// A record header. The receiver polls the half line where the next record will start and
/// takes it once `stamp` equals that record's ring position + 1: no shared head counter. The
/// sender stores `stamp` last (release), so the whole record is visible by then. Stale data
/// cannot match: an old header holds an older position, and the receiver zeroes the first
/// word of every other half line of each record it consumes.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Rec {
    stamp: u64,
    kind: u32,
    len: u32,
    ctx: u32,
    tag: i32,
    /// The message's size; a SHORT record's payload instead.
    total: u64,
    // RTS and FIN only; DATA and MORE carry payload from here on.
    addr: u64,
    token: u64,
    /// RTS and FIN: copy slot + 1 of the pair (0: none, the receiver copies alone).
    slot: u64,
    _pad: u64,
}

/// Ring bytes a record of `kind` with `len` payload bytes takes (PAD: to the ring's end).
fn record_bytes(kind: u32, len: u64) -> u64 {
    match kind {
        SHORT => HDR,
        RTS | FIN => 2 * HDR,
        _ => HDR + len.div_ceil(ALIGN) * ALIGN,
    }
}

/// Header bytes of `kind` after the stamp.
fn header_body(kind: u32) -> usize {
    let header = if kind == RTS || kind == FIN {
        2 * HDR
    } else {
        HDR
    };
    header as usize - std::mem::size_of::<u64>()
}

/// MPI error classes the engine produces (values match include/huddle/msg/mpi.h).
pub const ERR_TRUNCATE: i32 = 15;
pub const ERR_OTHER: i32 = 16;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// The sender's rank in the receive's communicator (world rank if none was given).
    pub source: i32,
    pub tag: i32,
    pub error: i32,
    /// Bytes received (at most the receive buffer's size).
    pub bytes: u64,
}

enum Kind {
    Send {
        ctx: u32,
        tag: i32,
        buf: *const u8,
        len: u64,
        sent: u64,
        fragment: u64,
        single_copy: bool,
        /// Part of an exchange (see `isend_solo`): its own single-copy threshold, no help.
        exchange: bool,
    },
    Recv {
        buf: *mut u8,
        cap: u64,
        ctx: u32,
        src: i32,
        tag: i32,
        ranks: Option<Rc<Vec<i32>>>,
    },
}

struct Req {
    kind: Kind,
    done: bool,
    status: Status,
}

struct Unexp {
    src: usize,
    ctx: u32,
    tag: i32,
    total: u64,
    data: Vec<u8>,
    /// Sender's buffer address, token and copy slot (+ 1) for a single-copy message.
    rts: Option<(u64, u64, u64)>,
    /// The receive that matched it while its fragments were still arriving.
    matched: Option<usize>,
}

#[derive(Clone, Copy)]
enum Target {
    Req(usize),
    Unexp(usize),
}

struct Inflight {
    target: Target,
    got: u64,
    total: u64,
}

#[derive(Default)]
struct Tx {
    head: u64,
    tail_seen: u64,
    queue: VecDeque<usize>,
    /// FIN records to send: token, error, slot + 1.
    fins: VecDeque<(u64, i32, u64)>,
    /// Copy slots of this pair that a send of ours holds (bit i: slot i), and the request.
    slots_busy: u64,
    /// Held slots whose chunks are all claimed: nothing left for us to help with.
    slots_helped: u64,
    slot_req: [usize; shm::NSLOTS],
}

/// A cooperative single copy this rank receives, waiting for the sender's chunks.
struct CoopRx {
    id: usize,
    src: usize,
    tag: i32,
    total: u64,
    token: u64,
    slot: usize,
    len: u64,
}

#[derive(Default)]
struct Rx {
    tail: u64,
    inflight: Option<Inflight>,
}

/// Progress tuning: polls before yielding, yields before sleeping, sleep slice (ms). A rank
/// alone on its PU keeps polling for at least `spin_us` (a wake-up costs more than a large
/// copy takes); a rank sharing its PU stops after `polls` so that the others can run.
#[derive(Clone, Copy, Debug)]
pub struct Spin {
    pub polls: u32,
    pub spin_us: u64,
    pub yields: u32,
    pub sleep_ms: u64,
}

impl Default for Spin {
    fn default() -> Spin {
        Spin {
            // A rank sharing its PU gains nothing by polling while the rank it waits for
            // cannot run: 4000 polls cost 140 us per message, 8 cost 2 us (8 B ping-pong,
            // two ranks on one PU of this machine).
            polls: 8,
            spin_us: 1000,
            yields: 20,
            sleep_ms: 50,
        }
    }
}

pub struct Engine {
    seg: Segment,
    me: usize,
    n: usize,
    cap: u64,
    rules: [Rule; NCLASS],
    class: Vec<Class>,
    single_copy: bool,
    tx: Vec<Tx>,
    rx: Vec<Rx>,
    reqs: Vec<Option<Req>>,
    free: Vec<usize>,
    posted: VecDeque<usize>,
    unexp: Vec<Option<Unexp>>,
    unexp_free: Vec<usize>,
    unexp_order: VecDeque<usize>,
    queued: usize,
    coop_rx: Vec<CoopRx>,
    /// Sends holding a copy slot (the sender helps copy them once they match).
    coop_tx: usize,
    /// Chunk size of a cooperative copy: 0 picks one from the size; u64::MAX: no cooperation.
    chunk: u64,
    /// Set once the job aborts: no more progress, so no write into buffers the caller may
    /// have given up on.
    poisoned: bool,
    /// Another rank of the job is pinned to this rank's PU.
    shares_pu: bool,
    /// Every rank registered for membarrier: senders check `waiting` after a compiler
    /// barrier only, and a rank going to sleep pays for the real barrier (shm::heavy_barrier).
    asym_fence: bool,
    stats: Stats,
    pub spin: Spin,
}

/// Messages this rank started, by transport.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub eager: u64,
    pub pipelined: u64,
    pub single_copy: u64,
    /// Waits that ended in a futex sleep (the spin and yield budget ran out).
    pub sleeps: u64,
}

// Requests hold raw pointers to user buffers and `Rc`s shared only with the communicators of
// the library that owns the engine. The engine moves between threads only together with that
// library and never runs on two at once (MPI_THREAD_SERIALIZED at most), and the MPI rules (a
// buffer stays valid until its request completes) make moving it safe.
unsafe impl Send for Engine {}

static PROBE_WORD: u64 = 0x7072_6f62_655f_6f6b;

fn read_remote(pid: i32, addr: u64, dst: &mut [u8]) -> Result<(), std::io::Error> {
    copy_remote(pid, dst.as_mut_ptr(), addr, dst.len(), false)
}

/// Copies `len` bytes between `local` and address `remote` of process `pid`: into `local`
/// (process_vm_readv) or, if `write`, out of it (process_vm_writev).
fn copy_remote(
    pid: i32,
    local: *mut u8,
    remote: u64,
    len: usize,
    write: bool,
) -> Result<(), std::io::Error> {
    let mut done = 0usize;
    while done < len {
        let l = libc::iovec {
            iov_base: unsafe { local.add(done) } as *mut libc::c_void,
            iov_len: len - done,
        };
        let r = libc::iovec {
            iov_base: (remote as usize + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        let r = unsafe {
            if write {
                libc::process_vm_writev(pid, &l, 1, &r, 1, 0)
            } else {
                libc::process_vm_readv(pid, &l, 1, &r, 1, 0)
            }
        };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            return Err(std::io::Error::from_raw_os_error(libc::EFAULT));
        }
        done += r as usize;
    }
    Ok(())
}

impl Engine {
    /// Joins the job as rank `me` of the segment: registers, meets the other ranks, and
    /// probes whether single copy works between processes here.
    pub fn join(seg: Segment, me: usize) -> Result<Engine, MsgError> {
        let n = seg.nranks();
        if me >= n {
            return Err(MsgError::BadJob(format!("rank {me} of a {n}-rank job")));
        }
        let h = seg.header();
        let cap = h.ring_bytes;
        let mut rules = h.rules;
        for r in &mut rules {
            // A record must fit in a quarter ring so that a wrapped one always fits.
            r.eager_limit = r.eager_limit.min(cap / 4);
            r.fragment = r.fragment.clamp(64, cap / 4);
        }
        let class = (0..n).map(|d| seg.class(me, d)).collect();
        // Let any process of ours read our buffers (Yama ptrace_scope=1 would refuse it).
        unsafe {
            libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0);
            libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
        }
        let slot = seg.rank(me);
        slot.pid.store(unsafe { libc::getpid() }, Ordering::SeqCst);
        slot.probe_addr
            .store(&PROBE_WORD as *const u64 as u64, Ordering::SeqCst);
        slot.state.store(shm::STATE_READY, Ordering::SeqCst);
        let mut e = Engine {
            seg,
            me,
            n,
            cap,
            rules,
            class,
            single_copy: true,
            tx: (0..n).map(|_| Tx::default()).collect(),
            rx: (0..n).map(|_| Rx::default()).collect(),
            reqs: Vec::new(),
            free: Vec::new(),
            posted: VecDeque::new(),
            unexp: Vec::new(),
            unexp_free: Vec::new(),
            unexp_order: VecDeque::new(),
            queued: 0,
            coop_rx: Vec::new(),
            coop_tx: 0,
            chunk: 0,
            poisoned: false,
            shares_pu: false,
            asym_fence: false,
            stats: Stats::default(),
            spin: Spin::default(),
        };
        if let Some(p) = std::env::var("HUDDLE_MSG_SPIN")
            .ok()
            .and_then(|s| s.parse().ok())
        {
            e.spin.polls = p;
        }
        if let Some(us) = std::env::var("HUDDLE_MSG_SPIN_US")
            .ok()
            .and_then(|s| s.parse().ok())
        {
            e.spin.spin_us = us;
        }
        if let Some(c) = std::env::var("HUDDLE_MSG_CHUNK")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
        {
            e.chunk = if c == 0 { u64::MAX } else { c.max(4096) };
        }
        let my_pu = e.seg.rank(me).pu_os;
        e.shares_pu = (0..n).any(|r| r != me && e.seg.rank(r).pu_os == my_pu);
        if std::env::var_os("HUDDLE_MSG_FENCE").is_some() || !shm::register_heavy_barrier() {
            e.seg.header().asym_fence_ok.store(0, Ordering::SeqCst);
        }
        e.seg.prefault_rings_of(me);
        e.init_barrier(1)?;
        let peer = (me + 1) % n;
        if peer != me {
            let ps = e.seg.rank(peer);
            let mut word = [0u8; 8];
            let ok = read_remote(
                ps.pid.load(Ordering::SeqCst),
                ps.probe_addr.load(Ordering::SeqCst),
                &mut word,
            )
            .is_ok()
                && u64::from_ne_bytes(word) == PROBE_WORD;
            if !ok {
                e.seg.header().single_copy_ok.store(0, Ordering::SeqCst);
            }
        }
        e.init_barrier(2)?;
        e.asym_fence = e.seg.header().asym_fence_ok.load(Ordering::SeqCst) == 1;
        e.single_copy = e.seg.header().single_copy_ok.load(Ordering::SeqCst) == 1
            && std::env::var_os("HUDDLE_MSG_NO_SINGLE_COPY").is_none();
        Ok(e)
    }

    /// Joins the job `huddle launch` described in the environment (HUDDLE_MSG_FD,
    /// HUDDLE_MSG_RANK); without it, a job of one.
    pub fn from_env() -> Result<Engine, MsgError> {
        let Ok(fd) = std::env::var("HUDDLE_MSG_FD") else {
            return Engine::singleton();
        };
        let fd: i32 = fd
            .parse()
            .map_err(|_| MsgError::BadJob(format!("HUDDLE_MSG_FD={fd:?} is not a descriptor")))?;
        let rank = std::env::var("HUDDLE_MSG_RANK")
            .ok()
            .and_then(|r| r.parse().ok())
            .ok_or_else(|| MsgError::BadJob("HUDDLE_MSG_RANK is missing or not a number".into()))?;
        Engine::join(Segment::attach(fd)?, rank)
    }

    /// A job of one: MPI programs started without `huddle launch`.
    pub fn singleton() -> Result<Engine, MsgError> {
        let table = crate::rules::RuleTable {
            schema: crate::rules::SCHEMA.into(),
            source: "built-in".into(),
            basis: "singleton".into(),
            rules: [(
                Class::Core,
                Rule {
                    eager_limit: 4096,
                    fragment: 32768,
                    single_copy_threshold: u64::MAX,
                    exchange_single_copy_threshold: u64::MAX,
                },
            )]
            .into_iter()
            .collect(),
        };
        let seg = Segment::create(&shm::JobSpec {
            pu_os: vec![0],
            keys: vec![[shm::NONE; shm::NKEYS]],
            classes: vec![Class::Core],
            rules: table.to_array()?,
            ring_bytes: 256 * 1024,
        })?;
        Engine::join(seg, 0)
    }

    fn init_barrier(&self, round: u32) -> Result<(), MsgError> {
        let h = self.seg.header();
        let want = round * self.n as u32;
        if h.init_arrived.fetch_add(1, Ordering::SeqCst) + 1 == want {
            shm::ring_doorbell(&h.init_gen, true);
            return Ok(());
        }
        loop {
            let g = h.init_gen.load(Ordering::SeqCst);
            if h.init_arrived.load(Ordering::SeqCst) >= want {
                return Ok(());
            }
            self.check_abort()?;
            shm::futex_wait(&h.init_gen, g, 50);
        }
    }

    pub fn rank(&self) -> usize {
        self.me
    }

    pub fn size(&self) -> usize {
        self.n
    }

    pub fn segment(&self) -> &Segment {
        &self.seg
    }

    pub fn class_to(&self, dst: usize) -> Class {
        self.class[dst]
    }

    pub fn rule_to(&self, dst: usize) -> Rule {
        self.rules[self.class[dst] as usize]
    }

    /// Overrides the rule of one class (tune-msg tries candidates this way).
    pub fn set_rule(&mut self, class: Class, rule: Rule) {
        let mut r = rule;
        r.eager_limit = r.eager_limit.min(self.cap / 4);
        r.fragment = r.fragment.clamp(64, self.cap / 4);
        self.rules[class as usize] = r;
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    pub fn single_copy_available(&self) -> bool {
        self.single_copy
    }

    /// Placement keys of a rank (package, NUMA, L3, L2, core).
    pub fn keys(&self, rank: usize) -> [u32; shm::NKEYS] {
        self.seg.rank(rank).keys
    }

    pub fn check_abort(&self) -> Result<(), MsgError> {
        match self.seg.aborted() {
            Some((rank, code)) => Err(MsgError::Aborted { rank, code }),
            None => Ok(()),
        }
    }

    /// A slot for the request `make` builds. The slot is taken first and the request built
    /// straight into it: building it first and then copying it in was the hottest spot of
    /// the message path in perf (streaming 1-byte messages).
    #[inline(always)]
    fn alloc(&mut self, make: impl FnOnce() -> Req) -> usize {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.reqs.push(None);
                self.reqs.len() - 1
            }
        };
        debug_assert!(self.reqs[i].is_none());
        // Safety: a free slot holds None, which needs no drop.
        unsafe { std::ptr::write(&mut self.reqs[i], Some(make())) };
        i
    }

    fn req(&mut self, id: usize) -> &mut Req {
        self.reqs[id].as_mut().expect("live request")
    }

    pub fn is_live(&self, id: usize) -> bool {
        self.reqs.get(id).is_some_and(|r| r.is_some())
    }

    /// The context (communicator) of a live request.
    pub fn request_ctx(&self, id: usize) -> Option<u32> {
        self.reqs.get(id)?.as_ref().map(|r| match r.kind {
            Kind::Send { ctx, .. } | Kind::Recv { ctx, .. } => ctx,
        })
    }

    pub fn is_done(&self, id: usize) -> bool {
        self.reqs[id].as_ref().is_some_and(|r| r.done)
    }

    /// Frees a completed request and returns its status.
    #[inline]
    pub fn release(&mut self, id: usize) -> Status {
        // The status is read in place: moving the whole request out first showed as a hot
        // spot in perf, like building it in `alloc`.
        let slot = &mut self.reqs[id];
        let r = slot.as_ref().expect("live request");
        debug_assert!(r.done);
        let status = r.status;
        *slot = None;
        self.free.push(id);
        status
    }

    // ---- sending ----

    /// Starts sending `len` bytes at `buf` to world rank `dst`.
    ///
    /// # Safety
    /// The buffer must stay valid and unchanged until the request completes.
    pub unsafe fn isend(
        &mut self,
        buf: *const u8,
        len: u64,
        dst: usize,
        ctx: u32,
        tag: i32,
    ) -> usize {
        unsafe { self.isend_with(buf, len, dst, ctx, tag, false) }
    }

    /// `isend` for exchanges, where every rank is receiving at the same time: single copy
    /// only from the rule's exchange threshold, and left to the receiver alone (it is
    /// copying anyway; the sender's help would only contend with it and delay the sender's
    /// own receive).
    ///
    /// # Safety
    /// As `isend`.
    pub unsafe fn isend_solo(
        &mut self,
        buf: *const u8,
        len: u64,
        dst: usize,
        ctx: u32,
        tag: i32,
    ) -> usize {
        unsafe { self.isend_with(buf, len, dst, ctx, tag, true) }
    }

    /// How `len` bytes travel to `dst`: by single copy, else in records of `fragment` bytes
    /// (one record when len <= fragment). In an exchange the single-copy threshold is the
    /// rule's exchange one.
    fn transport(&self, len: u64, dst: usize, exchange: bool) -> (bool, u64) {
        let rule = self.rule_to(dst);
        let threshold = if exchange {
            rule.exchange_single_copy_threshold
        } else {
            rule.single_copy_threshold
        };
        let single_copy = self.single_copy && dst != self.me && len >= threshold;
        let fragment = if len <= rule.eager_limit {
            len.max(1)
        } else {
            rule.fragment
        };
        (single_copy, fragment)
    }

    unsafe fn isend_with(
        &mut self,
        buf: *const u8,
        len: u64,
        dst: usize,
        ctx: u32,
        tag: i32,
        exchange: bool,
    ) -> usize {
        let (single_copy, fragment) = self.transport(len, dst, exchange);
        if single_copy {
            self.stats.single_copy += 1;
        } else if len <= fragment {
            self.stats.eager += 1;
        } else {
            self.stats.pipelined += 1;
        }
        // One record and nothing queued before it: written now, the request is born done.
        let direct =
            !single_copy && len <= fragment && unsafe { self.put_now(buf, len, dst, ctx, tag) };
        let id = self.alloc(|| Req {
            kind: Kind::Send {
                ctx,
                tag,
                buf,
                len,
                sent: if direct { len } else { 0 },
                fragment,
                single_copy,
                exchange,
            },
            done: direct,
            status: Status {
                bytes: if direct { len } else { 0 },
                ..Status::default()
            },
        });
        if direct {
            return id;
        }
        self.tx[dst].queue.push_back(id);
        self.queued += 1;
        if self.tx[dst].queue.len() == 1 {
            self.advance_tx(dst);
        }
        id
    }

    /// Writes a one-record message into the pair ring if nothing is queued before it.
    unsafe fn put_now(&mut self, buf: *const u8, len: u64, dst: usize, ctx: u32, tag: i32) -> bool {
        self.tx[dst].queue.is_empty()
            && self.tx[dst].fins.is_empty()
            && self.put(
                dst,
                Rec {
                    kind: DATA,
                    len: len as u32,
                    ctx,
                    tag,
                    total: len,
                    ..Rec::default()
                },
                buf,
            )
    }

    /// Blocking send of `len` bytes at `buf`. An eager message with nothing queued before it
    /// goes straight into the ring without a request (the ping-pong fast path).
    ///
    /// # Safety
    /// The buffer must be valid for `len` bytes.
    pub unsafe fn send_ptr(
        &mut self,
        buf: *const u8,
        len: u64,
        dst: usize,
        ctx: u32,
        tag: i32,
    ) -> Result<Status, MsgError> {
        let (single_copy, fragment) = self.transport(len, dst, false);
        if !single_copy && len <= fragment && unsafe { self.put_now(buf, len, dst, ctx, tag) } {
            self.stats.eager += 1;
            return Ok(Status {
                bytes: len,
                ..Status::default()
            });
        }
        let id = unsafe { self.isend(buf, len, dst, ctx, tag) };
        self.wait(id)
    }

    /// Wakes `rank` if it sleeps. Our stores must be visible before we read its `waiting`
    /// (it sets `waiting`, then re-checks our rings): a full fence here, or, with the
    /// asymmetric fence, a compiler barrier here and a membarrier on the sleeper's side.
    fn notify(&self, rank: usize) {
        if self.asym_fence {
            compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
        let slot = self.seg.rank(rank);
        if slot.waiting.load(Ordering::Relaxed) != 0 {
            shm::ring_doorbell(&slot.doorbell, true);
        }
    }

    /// Writes one record to ring me->dst if it fits now.
    fn put(&mut self, dst: usize, mut rec: Rec, payload: *const u8) -> bool {
        if rec.kind == DATA && rec.total == rec.len as u64 && rec.total <= SHORT_MAX {
            // The whole message fits the header's `total` field.
            let mut bytes = [0u8; 8];
            unsafe { std::ptr::copy_nonoverlapping(payload, bytes.as_mut_ptr(), rec.len as usize) };
            rec.kind = SHORT;
            rec.total = u64::from_ne_bytes(bytes);
        }
        let need = record_bytes(rec.kind, rec.len as u64);
        let cap = self.cap;
        let tx = &mut self.tx[dst];
        let pos = tx.head % cap;
        let to_end = cap - pos;
        let total = if to_end < need { to_end + need } else { need };
        if cap - (tx.head - tx.tail_seen) < total {
            tx.tail_seen = self.seg.ring_ctl(self.me, dst).tail.load(Ordering::Acquire);
            if cap - (tx.head - tx.tail_seen) < total {
                return false;
            }
        }
        let data = self.seg.ring_data(self.me, dst);
        let mut at = pos;
        if to_end < need {
            let pad = Rec {
                kind: PAD,
                ..Rec::default()
            };
            unsafe { publish(data.add(pos as usize), pad, tx.head) };
            at = 0;
            tx.head += to_end;
        }
        unsafe {
            let at = data.add(at as usize);
            if rec.kind != SHORT && rec.len > 0 {
                // Payload first, header last.
                std::ptr::copy_nonoverlapping(payload, at.add(HDR as usize), rec.len as usize);
            }
            publish(at, rec, tx.head);
        }
        tx.head += need;
        self.notify(dst);
        true
    }

    fn advance_tx(&mut self, dst: usize) {
        while let Some(&(token, err, slot)) = self.tx[dst].fins.front() {
            let rec = Rec {
                kind: FIN,
                tag: err,
                token,
                slot,
                ..Rec::default()
            };
            if !self.put(dst, rec, std::ptr::null()) {
                return;
            }
            self.tx[dst].fins.pop_front();
        }
        while let Some(&id) = self.tx[dst].queue.front() {
            let Some(Req {
                kind:
                    Kind::Send {
                        ctx,
                        tag,
                        buf,
                        len,
                        sent,
                        fragment,
                        single_copy,
                        exchange,
                        ..
                    },
                ..
            }) = self.reqs[id]
            else {
                unreachable!("send queue holds send requests")
            };
            if single_copy {
                // A free copy slot lets the receiver share the copy with us; without one
                // (all taken by messages not yet received), or in an exchange, the receiver
                // copies alone.
                let free = !self.tx[dst].slots_busy & ((1u64 << shm::NSLOTS) - 1);
                let slot = if free != 0 && !exchange && self.chunk != u64::MAX {
                    free.trailing_zeros() as usize
                } else {
                    shm::NSLOTS
                };
                if slot < shm::NSLOTS {
                    self.seg.ring_ctl(self.me, dst).slots[slot]
                        .state
                        .store(shm::SLOT_POSTED, Ordering::Relaxed);
                }
                let rec = Rec {
                    kind: RTS,
                    ctx,
                    tag,
                    total: len,
                    addr: buf as u64,
                    token: id as u64,
                    slot: if slot < shm::NSLOTS {
                        slot as u64 + 1
                    } else {
                        0
                    },
                    ..Rec::default()
                };
                if !self.put(dst, rec, std::ptr::null()) {
                    return;
                }
                if slot < shm::NSLOTS {
                    self.tx[dst].slots_busy |= 1 << slot;
                    self.tx[dst].slots_helped &= !(1 << slot);
                    self.tx[dst].slot_req[slot] = id;
                    self.coop_tx += 1;
                }
                // Completes when FIN comes back.
            } else {
                let mut sent = sent;
                loop {
                    let chunk = fragment.min(len - sent);
                    let rec = Rec {
                        kind: if sent == 0 { DATA } else { MORE },
                        len: chunk as u32,
                        ctx,
                        tag,
                        total: len,
                        ..Rec::default()
                    };
                    if !self.put(dst, rec, unsafe { buf.add(sent as usize) }) {
                        if let Kind::Send { sent: s, .. } = &mut self.req(id).kind {
                            *s = sent;
                        }
                        return;
                    }
                    sent += chunk;
                    if sent == len {
                        break;
                    }
                }
                let r = self.req(id);
                r.done = true;
                r.status.bytes = len;
            }
            self.tx[dst].queue.pop_front();
            self.queued -= 1;
        }
    }

    // ---- receiving ----

    /// Posts a receive of up to `cap` bytes from world rank `src` (or ANY) with `tag` (or
    /// ANY). `ranks` maps world ranks to the communicator's ranks for the status.
    ///
    /// # Safety
    /// `buf` must be valid for `cap` bytes of writes until the request completes.
    pub unsafe fn irecv(
        &mut self,
        buf: *mut u8,
        cap: u64,
        src: i32,
        ctx: u32,
        tag: i32,
        ranks: Option<Rc<Vec<i32>>>,
    ) -> usize {
        let id = self.alloc(|| Req {
            kind: Kind::Recv {
                buf,
                cap,
                ctx,
                src,
                tag,
                ranks,
            },
            done: false,
            status: Status::default(),
        });
        let found = self.unexp_order.iter().position(|&u| {
            let m = self.unexp[u].as_ref().expect("live entry");
            matches(ctx, src, tag, m.ctx, m.src, m.tag)
        });
        match found {
            Some(pos) => {
                let u = self.unexp_order.remove(pos).expect("position is valid");
                self.take_unexpected(u, id);
            }
            None => self.posted.push_back(id),
        }
        id
    }

    /// A receive matched an unexpected message: copy what has arrived, or fetch it.
    fn take_unexpected(&mut self, u: usize, id: usize) {
        let e = self.unexp[u].as_mut().expect("live entry");
        if let Some((addr, token, slot)) = e.rts {
            let (src, tag, total) = (e.src, e.tag, e.total);
            self.free_unexp(u);
            self.single_copy_into(id, src, tag, total, (addr, token, slot));
            return;
        }
        if (e.data.len() as u64) < e.total {
            e.matched = Some(id);
            return;
        }
        self.finish_from_unexp(u, id);
    }

    /// Queues an unexpected message behind the earlier ones.
    fn add_unexp(&mut self, e: Unexp) -> usize {
        let u = match self.unexp_free.pop() {
            Some(u) => {
                self.unexp[u] = Some(e);
                u
            }
            None => {
                self.unexp.push(Some(e));
                self.unexp.len() - 1
            }
        };
        self.unexp_order.push_back(u);
        u
    }

    fn free_unexp(&mut self, u: usize) {
        self.unexp[u] = None;
        self.unexp_free.push(u);
    }

    fn finish_from_unexp(&mut self, u: usize, id: usize) {
        let e = self.unexp[u].take().expect("live entry");
        self.unexp_free.push(u);
        let (buf, cap) = self.recv_buf(id);
        let n = (e.data.len() as u64).min(cap);
        unsafe { std::ptr::copy_nonoverlapping(e.data.as_ptr(), buf, n as usize) };
        self.complete_recv(id, e.src, e.tag, e.total);
    }

    fn recv_buf(&mut self, id: usize) -> (*mut u8, u64) {
        match &self.req(id).kind {
            Kind::Recv { buf, cap, .. } => (*buf, *cap),
            Kind::Send { .. } => unreachable!("receive request"),
        }
    }

    fn complete_recv(&mut self, id: usize, src: usize, tag: i32, total: u64) {
        let r = self.req(id);
        let (cap, source) = match &r.kind {
            Kind::Recv { cap, ranks, .. } => (
                *cap,
                ranks
                    .as_ref()
                    .map_or(src as i32, |m| m.get(src).copied().unwrap_or(-1)),
            ),
            Kind::Send { .. } => unreachable!("receive request"),
        };
        r.status = Status {
            source,
            tag,
            error: if total > cap { ERR_TRUNCATE } else { 0 },
            bytes: total.min(cap),
        };
        r.done = true;
    }

    /// Chunk size of a cooperative copy of `len` bytes.
    fn chunk_for(&self, len: u64) -> u64 {
        if self.chunk != 0 {
            return self.chunk;
        }
        // Enough chunks that both sides stay busy to the end, each large enough that the
        // system call costs little beside the copy.
        (len.div_ceil(8))
            .clamp(64 << 10, 512 << 10)
            .next_multiple_of(4096)
    }

    /// Copies single-copy message `rts` (sender's address, token, slot + 1) into receive
    /// `id`: alone when the sender gave no slot, else shared with the sender chunk by chunk.
    fn single_copy_into(
        &mut self,
        id: usize,
        src: usize,
        tag: i32,
        total: u64,
        rts: (u64, u64, u64),
    ) {
        let (addr, token, slot) = rts;
        let (buf, cap) = self.recv_buf(id);
        let n = total.min(cap);
        let pid = self.seg.rank(src).pid.load(Ordering::Relaxed);
        if slot == 0 {
            let slice = unsafe { std::slice::from_raw_parts_mut(buf, n as usize) };
            let err = match read_remote(pid, addr, slice) {
                Ok(()) => 0,
                Err(_) => ERR_OTHER,
            };
            self.complete_recv(id, src, tag, total);
            if err != 0 {
                self.req(id).status.error = err;
            }
            self.tx[src].fins.push_back((token, err, 0));
            self.advance_tx(src);
            return;
        }
        let si = slot as usize - 1;
        let chunk = self.chunk_for(n);
        {
            let s = &self.seg.ring_ctl(src, self.me).slots[si];
            s.addr.store(buf as u64, Ordering::Relaxed);
            s.len.store(n, Ordering::Relaxed);
            s.chunk.store(chunk, Ordering::Relaxed);
            s.next.store(0, Ordering::Relaxed);
            s.done.store(0, Ordering::Relaxed);
            s.err.store(0, Ordering::Relaxed);
            s.state.store(shm::SLOT_MATCHED, Ordering::Release);
        }
        let s: *const shm::CopySlot = &self.seg.ring_ctl(src, self.me).slots[si];
        // Safety: the slot lives in the segment, which outlives this call.
        claim_chunks(unsafe { &*s }, pid, addr, buf, false);
        self.coop_rx.push(CoopRx {
            id,
            src,
            tag,
            total,
            token,
            slot: si,
            len: n,
        });
        self.finish_coop_rx();
    }

    /// Completes the cooperative receives whose every chunk has been copied.
    fn finish_coop_rx(&mut self) -> bool {
        let mut any = false;
        let mut i = 0;
        while i < self.coop_rx.len() {
            let c = &self.coop_rx[i];
            let s = &self.seg.ring_ctl(c.src, self.me).slots[c.slot];
            if s.done.load(Ordering::Acquire) < c.len {
                i += 1;
                continue;
            }
            let err = if s.err.load(Ordering::Relaxed) != 0 {
                ERR_OTHER
            } else {
                0
            };
            let c = self.coop_rx.swap_remove(i);
            self.complete_recv(c.id, c.src, c.tag, c.total);
            if err != 0 {
                self.req(c.id).status.error = err;
            }
            self.tx[c.src]
                .fins
                .push_back((c.token, err, c.slot as u64 + 1));
            self.advance_tx(c.src);
            any = true;
        }
        any
    }

    /// The sender's part of cooperative copies: chunks of matched messages to each rank.
    fn help_coop_tx(&mut self) -> bool {
        let mut any = false;
        for d in 0..self.n {
            let mut busy = self.tx[d].slots_busy & !self.tx[d].slots_helped;
            while busy != 0 {
                let si = busy.trailing_zeros() as usize;
                busy &= busy - 1;
                let s: *const shm::CopySlot = &self.seg.ring_ctl(self.me, d).slots[si];
                // Safety: the slot lives in the segment, which outlives this call.
                let s = unsafe { &*s };
                if s.state.load(Ordering::Acquire) != shm::SLOT_MATCHED {
                    continue;
                }
                let id = self.tx[d].slot_req[si];
                let Some(Req {
                    kind: Kind::Send { buf, .. },
                    ..
                }) = self.reqs[id]
                else {
                    continue;
                };
                let pid = self.seg.rank(d).pid.load(Ordering::Relaxed);
                let addr = s.addr.load(Ordering::Relaxed);
                if claim_chunks(s, pid, addr, buf as *mut u8, true) {
                    // The receiver may be asleep waiting for our last chunk.
                    self.notify(d);
                    any = true;
                }
                self.tx[d].slots_helped |= 1 << si;
            }
        }
        any
    }

    fn drain_rx(&mut self, src: usize) -> bool {
        let mut any = false;
        let cap = self.cap;
        // Raw pointer: the segment outlives this call, and handlers need `&mut self`.
        let ctl: *const shm::RingCtl = self.seg.ring_ctl(src, self.me);
        let data = self.seg.ring_data(src, self.me);
        let mut published = self.rx[src].tail;
        loop {
            let tail = self.rx[src].tail;
            let pos = tail % cap;
            let at = unsafe { data.add(pos as usize) };
            // Safety: records start on 32-byte boundaries inside the mapped ring.
            let stamp = unsafe { &*(at as *const AtomicU64) };
            if stamp.load(Ordering::Acquire) != tail + 1 {
                break;
            }
            any = true;
            // Only this record's header: the half line after a SHORT one may be the next
            // record, still being written.
            let mut rec = Rec::default();
            unsafe {
                std::ptr::copy_nonoverlapping(at, &mut rec as *mut Rec as *mut u8, HDR as usize)
            };
            if rec.kind == RTS || rec.kind == FIN {
                rec = unsafe { std::ptr::read(at as *const Rec) };
            }
            let mut payload = unsafe { at.add(HDR as usize) as *const u8 };
            let size = if rec.kind == PAD {
                cap - pos
            } else {
                record_bytes(rec.kind, rec.len as u64)
            };
            if rec.kind == SHORT {
                // A DATA record whose payload sits in `total`.
                payload = unsafe { at.add(std::mem::offset_of!(Rec, total)) };
                rec.kind = DATA;
                rec.total = rec.len as u64;
            }
            match rec.kind {
                DATA => self.on_first(src, &rec, payload),
                MORE => self.on_more(src, &rec, payload),
                RTS => self.on_rts(src, &rec),
                FIN => {
                    if rec.slot != 0 {
                        let si = rec.slot as usize - 1;
                        self.seg.ring_ctl(self.me, src).slots[si]
                            .state
                            .store(shm::SLOT_FREE, Ordering::Relaxed);
                        self.tx[src].slots_busy &= !(1 << si);
                        self.coop_tx -= 1;
                    }
                    let id = rec.token as usize;
                    if let Some(r) = self.reqs.get_mut(id).and_then(|r| r.as_mut()) {
                        if let Kind::Send { len, .. } = r.kind {
                            r.done = true;
                            r.status.bytes = len;
                            r.status.error = rec.tag;
                        }
                    }
                }
                _ => {}
            }
            // Zero the first word of the record's other half lines: the sender's payload
            // there must not pass for a stamp when a header lands there a lap later.
            for half in (ALIGN..size).step_by(ALIGN as usize) {
                unsafe {
                    (*(at.add(half as usize) as *const AtomicU64)).store(0, Ordering::Relaxed)
                };
            }
            self.rx[src].tail += size;
            // Publish the space now and then, not once per record (each store may take the
            // line back from the sender): at a quarter ring, and when the batch ends.
            if self.rx[src].tail - published >= cap / 4 {
                published = self.rx[src].tail;
                unsafe { (*ctl).tail.store(published, Ordering::Release) };
            }
        }
        if self.rx[src].tail != published {
            unsafe { (*ctl).tail.store(self.rx[src].tail, Ordering::Release) };
        }
        // One wake-up check per batch of records, not one fence per record.
        if any {
            self.notify(src);
        }
        any
    }

    fn match_posted(&mut self, src: usize, ctx: u32, tag: i32) -> Option<usize> {
        let pos = self.posted.iter().position(|&id| match &self.reqs[id] {
            Some(Req {
                kind:
                    Kind::Recv {
                        ctx: c,
                        src: s,
                        tag: t,
                        ..
                    },
                ..
            }) => matches(*c, *s, *t, ctx, src, tag),
            _ => false,
        })?;
        self.posted.remove(pos)
    }

    fn on_first(&mut self, src: usize, rec: &Rec, payload: *const u8) {
        let target = match self.match_posted(src, rec.ctx, rec.tag) {
            Some(id) => Target::Req(id),
            None => Target::Unexp(self.add_unexp(Unexp {
                src,
                ctx: rec.ctx,
                tag: rec.tag,
                total: rec.total,
                data: Vec::with_capacity(rec.total as usize),
                rts: None,
                matched: None,
            })),
        };
        let mut f = Inflight {
            target,
            got: 0,
            total: rec.total,
        };
        self.deliver(&mut f, rec, payload);
        if f.got < f.total {
            self.rx[src].inflight = Some(f);
        } else {
            self.finish(src, f, rec.tag);
        }
    }

    fn on_more(&mut self, src: usize, rec: &Rec, payload: *const u8) {
        let Some(mut f) = self.rx[src].inflight.take() else {
            return;
        };
        self.deliver(&mut f, rec, payload);
        if f.got < f.total {
            self.rx[src].inflight = Some(f);
        } else {
            self.finish(src, f, rec.tag);
        }
    }

    fn deliver(&mut self, f: &mut Inflight, rec: &Rec, payload: *const u8) {
        let len = rec.len as u64;
        match f.target {
            Target::Req(id) => {
                let (buf, cap) = self.recv_buf(id);
                if f.got < cap {
                    let n = len.min(cap - f.got);
                    unsafe {
                        std::ptr::copy_nonoverlapping(payload, buf.add(f.got as usize), n as usize)
                    };
                }
            }
            Target::Unexp(u) => {
                let e = self.unexp[u].as_mut().expect("live entry");
                e.data.extend_from_slice(unsafe {
                    std::slice::from_raw_parts(payload, len as usize)
                });
            }
        }
        f.got += len;
    }

    fn finish(&mut self, src: usize, f: Inflight, tag: i32) {
        match f.target {
            Target::Req(id) => self.complete_recv(id, src, tag, f.total),
            Target::Unexp(u) => {
                if let Some(id) = self.unexp[u].as_ref().and_then(|e| e.matched) {
                    self.finish_from_unexp(u, id);
                }
            }
        }
    }

    fn on_rts(&mut self, src: usize, rec: &Rec) {
        match self.match_posted(src, rec.ctx, rec.tag) {
            Some(id) => {
                self.single_copy_into(id, src, rec.tag, rec.total, (rec.addr, rec.token, rec.slot))
            }
            None => {
                self.add_unexp(Unexp {
                    src,
                    ctx: rec.ctx,
                    tag: rec.tag,
                    total: rec.total,
                    data: Vec::new(),
                    rts: Some((rec.addr, rec.token, rec.slot)),
                    matched: None,
                });
            }
        }
    }

    /// Looks for an unexpected message matching (src, ctx, tag) without receiving it:
    /// (world source, tag, total bytes).
    pub fn probe(&mut self, src: i32, ctx: u32, tag: i32) -> Option<(usize, i32, u64)> {
        self.progress();
        self.peek(src, ctx, tag)
    }

    /// `probe` without progress.
    pub fn peek(&self, src: i32, ctx: u32, tag: i32) -> Option<(usize, i32, u64)> {
        self.unexp_order.iter().find_map(|&u| {
            let e = self.unexp[u].as_ref()?;
            matches(ctx, src, tag, e.ctx, e.src, e.tag).then_some((e.src, e.tag, e.total))
        })
    }

    /// A request that is already complete with `st` (operations on MPI_PROC_NULL).
    pub fn completed(&mut self, st: Status) -> usize {
        self.alloc(|| Req {
            kind: Kind::Recv {
                buf: std::ptr::null_mut(),
                cap: 0,
                ctx: u32::MAX,
                src: ANY,
                tag: ANY,
                ranks: None,
            },
            done: true,
            status: st,
        })
    }

    /// Cancels a posted receive that has not matched (for error paths); true if removed.
    pub fn cancel_recv(&mut self, id: usize) -> bool {
        match self.posted.iter().position(|&p| p == id) {
            Some(pos) => {
                self.posted.remove(pos);
                self.reqs[id] = None;
                self.free.push(id);
                true
            }
            None => false,
        }
    }

    /// One pass over every send queue and every incoming ring. True if anything moved.
    pub fn progress(&mut self) -> bool {
        if self.poisoned {
            return false;
        }
        let mut any = false;
        if self.queued > 0 {
            for d in 0..self.n {
                if !self.tx[d].queue.is_empty() || !self.tx[d].fins.is_empty() {
                    self.advance_tx(d);
                    any = true;
                }
            }
        }
        // Incoming messages first: a single copy addressed to us is copied by us at once,
        // before we help a peer copy ours (the peer is busy copying it already).
        for s in 0..self.n {
            any |= self.drain_rx(s);
        }
        if self.coop_tx > 0 {
            any |= self.help_coop_tx();
        }
        if !self.coop_rx.is_empty() {
            any |= self.finish_coop_rx();
        }
        any
    }

    /// Polls until `done` holds: a bounded spin, a few yields, then futex sleeps (so that
    /// ranks sharing a core let each other run). Fails if the job is aborting.
    pub fn wait_until(&mut self, mut done: impl FnMut(&Engine) -> bool) -> Result<(), MsgError> {
        if done(self) {
            return Ok(());
        }
        let mut spins: u32 = 0;
        // Started when first needed: most waits end within the first polls, and reading
        // the clock costs as much as a poll.
        let mut since: Option<std::time::Instant> = None;
        let budget = std::time::Duration::from_micros(self.spin.spin_us);
        loop {
            self.progress();
            if done(self) {
                return Ok(());
            }
            if let Err(e) = self.check_abort() {
                self.poisoned = true;
                return Err(e);
            }
            spins += 1;
            if spins < self.spin.polls
                || (!self.shares_pu && !spins.is_multiple_of(16))
                || (!self.shares_pu
                    && since.get_or_insert_with(std::time::Instant::now).elapsed() < budget)
            {
                std::hint::spin_loop();
                continue;
            }
            if spins < self.spin.polls + self.spin.yields {
                unsafe { libc::sched_yield() };
                continue;
            }
            let slot = self.seg.rank(self.me);
            slot.waiting.store(1, Ordering::SeqCst);
            let seen = slot.doorbell.load(Ordering::SeqCst);
            if self.asym_fence && !shm::heavy_barrier() {
                // Cannot happen once registered; if it does, stay awake rather than risk
                // missing a wake-up.
                self.seg.rank(self.me).waiting.store(0, Ordering::SeqCst);
                unsafe { libc::sched_yield() };
                continue;
            }
            self.progress();
            if done(self) {
                self.seg.rank(self.me).waiting.store(0, Ordering::SeqCst);
                return Ok(());
            }
            self.stats.sleeps += 1;
            shm::futex_wait(&self.seg.rank(self.me).doorbell, seen, self.spin.sleep_ms);
            self.seg.rank(self.me).waiting.store(0, Ordering::SeqCst);
            spins = self.spin.polls / 2;
            since = None;
        }
    }

    pub fn wait(&mut self, id: usize) -> Result<Status, MsgError> {
        self.wait_until(|e| e.is_done(id))?;
        Ok(self.release(id))
    }

    /// Blocking send.
    pub fn send(&mut self, buf: &[u8], dst: usize, ctx: u32, tag: i32) -> Result<Status, MsgError> {
        // Safety: we wait for completion; after an abort error the engine is poisoned and
        // never touches the buffer again.
        unsafe { self.send_ptr(buf.as_ptr(), buf.len() as u64, dst, ctx, tag) }
    }

    /// Blocking receive.
    pub fn recv(
        &mut self,
        buf: &mut [u8],
        src: i32,
        ctx: u32,
        tag: i32,
    ) -> Result<Status, MsgError> {
        // Safety: as in `send`.
        let id = unsafe { self.irecv(buf.as_mut_ptr(), buf.len() as u64, src, ctx, tag, None) };
        self.wait(id)
    }

    /// Marks this rank finalized (the launcher then accepts its exit).
    pub fn mark_finalized(&self) {
        self.seg
            .rank(self.me)
            .state
            .store(shm::STATE_FINALIZED, Ordering::SeqCst);
    }
}

/// Writes record header `rec` at `at` (ring position `pos`), stamp last.
///
/// # Safety
/// `at` must point at 64 writable, 8-byte-aligned bytes of the ring.
unsafe fn publish(at: *mut u8, rec: Rec, pos: u64) {
    // Everything but the stamp, then the stamp with release ordering.
    let stamp = std::mem::size_of::<u64>();
    std::ptr::copy_nonoverlapping(
        (&rec as *const Rec as *const u8).add(stamp),
        at.add(stamp),
        header_body(rec.kind),
    );
    (*(at as *const AtomicU64)).store(pos + 1, Ordering::Release);
}

fn matches(ctx: u32, src: i32, tag: i32, mctx: u32, msrc: usize, mtag: i32) -> bool {
    ctx == mctx && (src == ANY || src as usize == msrc) && (tag == ANY || tag == mtag)
}

/// Claims chunks of a matched copy slot until none is left and copies them: the receiver
/// reads from the sender's buffer at `remote` into its `local` one, the sender (`write`)
/// writes from its `local` buffer into the receiver's at `remote`. True if it copied any.
fn claim_chunks(s: &shm::CopySlot, pid: i32, remote: u64, local: *mut u8, write: bool) -> bool {
    let len = s.len.load(Ordering::Relaxed);
    let chunk = s.chunk.load(Ordering::Relaxed).max(1);
    let mut any = false;
    loop {
        let c = s.next.fetch_add(1, Ordering::AcqRel);
        let off = c.saturating_mul(chunk);
        if off >= len {
            return any;
        }
        let n = chunk.min(len - off);
        // The receiver's buffer is at `remote` for the sender and `local` for the receiver;
        // the sender's at `local` for the sender and `remote` for the receiver: both offsets
        // are the same.
        let r = copy_remote(
            pid,
            unsafe { local.add(off as usize) },
            remote + off,
            n as usize,
            write,
        );
        if r.is_err() {
            s.err.store(1, Ordering::Relaxed);
        }
        s.done.fetch_add(n, Ordering::AcqRel);
        any = true;
    }
}
