//! The MPI C ABI (include/huddle/msg/mpi.h). Every entry point catches panics, checks its
//! arguments, and reports errors through the communicator's error handler: MPI_ERRORS_RETURN
//! returns the error class, MPI_ERRORS_ARE_FATAL (the default) prints one line and aborts
//! the job. Handles are small integers: communicators index a table, requests are engine
//! request ids + 1, datatypes and operators are the constants of mpi.h.
#![allow(non_snake_case, non_camel_case_types, clippy::missing_safety_doc)]

use crate::coll::{self, Comm};
use crate::engine::{Engine, Status, ANY};
use crate::ops::{self, Op, Type};
use crate::MsgError;
use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

pub type MPI_Comm = c_int;
pub type MPI_Datatype = c_int;
pub type MPI_Op = c_int;
pub type MPI_Request = c_int;
pub type MPI_Errhandler = c_int;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct MPI_Status {
    pub MPI_SOURCE: c_int,
    pub MPI_TAG: c_int,
    pub MPI_ERROR: c_int,
    reserved: c_int,
    count: i64,
}

pub const MPI_SUCCESS: c_int = 0;
pub const MPI_ERR_BUFFER: c_int = 1;
pub const MPI_ERR_COUNT: c_int = 2;
pub const MPI_ERR_TYPE: c_int = 3;
pub const MPI_ERR_TAG: c_int = 4;
pub const MPI_ERR_COMM: c_int = 5;
pub const MPI_ERR_RANK: c_int = 6;
pub const MPI_ERR_REQUEST: c_int = 7;
pub const MPI_ERR_ROOT: c_int = 8;
pub const MPI_ERR_OP: c_int = 10;
pub const MPI_ERR_ARG: c_int = 13;
pub const MPI_ERR_TRUNCATE: c_int = 15;
pub const MPI_ERR_OTHER: c_int = 16;
pub const MPI_ERR_INTERN: c_int = 17;
pub const MPI_ERR_IN_STATUS: c_int = 18;

const COMM_NULL: c_int = 0;
const COMM_WORLD: c_int = 1;
const COMM_SELF: c_int = 2;
const ERRORS_ARE_FATAL: c_int = 1;
const ERRORS_RETURN: c_int = 2;
const PROC_NULL: c_int = -2;
const UNDEFINED: c_int = -32766;
const TAG_UB: c_int = 0x3fff_ffff;
const THREAD_SERIALIZED: c_int = 2;
/// MPI_IN_PLACE is `(void *)-1` in mpi.h.
const IN_PLACE: usize = usize::MAX;

struct Lib {
    eng: Engine,
    comms: Vec<Option<Comm>>,
    next_ctx: u32,
    thread_level: c_int,
    /// The communicator whose error handler takes this call's error when it is not the one
    /// the call names: a request call's error belongs to the request's communicator.
    err_comm: Option<MPI_Comm>,
}

/// The library. No lock: we provide at most MPI_THREAD_SERIALIZED, so the program itself
/// orders calls made from different threads (as MPICH and Open MPI do below
/// MPI_THREAD_MULTIPLE). A locked instruction per call would also wait for the stores to the
/// rings to drain, which costs more than a small message. `BUSY` catches most programs that
/// break the rule (or re-enter from a signal handler) and fails their call instead.
struct LibCell(UnsafeCell<Option<Lib>>);
// Safety: see above; every access goes through `with_lib`.
unsafe impl Sync for LibCell {}
static LIB: LibCell = LibCell(UnsafeCell::new(None));
static BUSY: AtomicBool = AtomicBool::new(false);

/// Clears `BUSY` when the call ends, panics included.
struct Entered;
impl Drop for Entered {
    fn drop(&mut self) {
        BUSY.store(false, Ordering::Release);
    }
}

/// Runs `f` on the library state; None if another call is in progress.
fn with_lib<T>(f: impl FnOnce(&mut Option<Lib>) -> T) -> Option<T> {
    if BUSY.load(Ordering::Acquire) {
        return None;
    }
    BUSY.store(true, Ordering::Relaxed);
    let _entered = Entered;
    // Safety: BUSY was clear, so no other call holds the state (see LibCell).
    Some(f(unsafe { &mut *LIB.0.get() }))
}

static STATE: Mutex<(bool, bool)> = Mutex::new((false, false)); // (initialized, finalized)
static START: OnceLock<Instant> = OnceLock::new();

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An MPI error: its class and a sentence for MPI_ERRORS_ARE_FATAL.
struct Fail(c_int, String);

impl From<MsgError> for Fail {
    fn from(e: MsgError) -> Fail {
        Fail(MPI_ERR_OTHER, e.to_string())
    }
}

type R<T> = Result<T, Fail>;

/// Runs one MPI call: lock, panic guard, error handler of `comm`.
fn call(name: &str, comm: MPI_Comm, f: impl FnOnce(&mut Lib) -> R<()>) -> c_int {
    let r = catch_unwind(AssertUnwindSafe(|| {
        with_lib(|g| {
            let Some(lib) = g.as_mut() else {
                eprintln!("huddle-msg: {name} called before MPI_Init or after MPI_Finalize");
                std::process::exit(1);
            };
            lib.err_comm = None;
            match f(lib) {
                Ok(()) => MPI_SUCCESS,
                Err(Fail(code, msg)) => {
                    let handler = lib
                        .comm(lib.err_comm.unwrap_or(comm))
                        .or_else(|_| lib.comm(COMM_WORLD))
                        .map_or(ERRORS_ARE_FATAL, |c| c.errhandler);
                    if handler == ERRORS_RETURN {
                        code
                    } else {
                        let rank = lib.eng.rank();
                        // One write, so lines of several ranks do not interleave.
                        let line = format!(
                            "huddle-msg: rank {rank}: {name}: {msg} (MPI_ERRORS_ARE_FATAL)\n"
                        );
                        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
                        lib.eng.segment().raise_abort(rank as i32, code);
                        std::process::exit(1);
                    }
                }
            }
        })
        .unwrap_or_else(|| {
            eprintln!(
                "huddle-msg: {name} called while another MPI call runs (two threads at once, \
                 beyond MPI_THREAD_SERIALIZED)"
            );
            MPI_ERR_OTHER
        })
    }));
    r.unwrap_or(MPI_ERR_INTERN)
}

impl Lib {
    /// Sends the error of `r`, if any, to the handler of the communicator with context
    /// `ctx` (a request's: point-to-point or its collective context).
    fn blame(&mut self, ctx: Option<u32>, r: R<()>) -> R<()> {
        if let (Err(_), Some(ctx)) = (&r, ctx) {
            self.err_comm = self
                .comms
                .iter()
                .position(|c| {
                    c.as_ref()
                        .is_some_and(|c| c.ctx == ctx || c.ctx.wrapping_add(1) == ctx)
                })
                .and_then(|i| MPI_Comm::try_from(i).ok());
        }
        r
    }

    fn comm(&self, h: MPI_Comm) -> R<&Comm> {
        usize::try_from(h)
            .ok()
            .and_then(|i| self.comms.get(i))
            .and_then(|c| c.as_ref())
            .ok_or_else(|| Fail(MPI_ERR_COMM, format!("invalid communicator {h}")))
    }

    /// The engine and a communicator, borrowed together.
    fn parts(&mut self, h: MPI_Comm) -> R<(&mut Engine, &mut Comm)> {
        let c = usize::try_from(h)
            .ok()
            .and_then(|i| self.comms.get_mut(i))
            .and_then(|c| c.as_mut())
            .ok_or_else(|| Fail(MPI_ERR_COMM, format!("invalid communicator {h}")))?;
        Ok((&mut self.eng, c))
    }

    fn add_comm(&mut self, c: Comm) -> MPI_Comm {
        match self
            .comms
            .iter()
            .position(|c| c.is_none())
            .filter(|&i| i > 2)
        {
            Some(i) => {
                self.comms[i] = Some(c);
                i as MPI_Comm
            }
            None => {
                self.comms.push(Some(c));
                (self.comms.len() - 1) as MPI_Comm
            }
        }
    }
}

fn dtype(dt: MPI_Datatype) -> R<Type> {
    Type::from_handle(dt).ok_or_else(|| Fail(MPI_ERR_TYPE, format!("invalid datatype {dt}")))
}

fn op_of(op: MPI_Op, ty: Type) -> R<Op> {
    let o =
        Op::from_handle(op).ok_or_else(|| Fail(MPI_ERR_OP, format!("invalid operator {op}")))?;
    if !ops::valid(o, ty) {
        return Err(Fail(
            MPI_ERR_OP,
            format!("operator {o:?} is not defined on {ty:?}"),
        ));
    }
    Ok(o)
}

/// Byte length of `count` elements, with the buffer checked.
fn bytes(buf: *const c_void, count: c_int, dt: MPI_Datatype) -> R<usize> {
    let ty = dtype(dt)?;
    let n = usize::try_from(count)
        .map_err(|_| Fail(MPI_ERR_COUNT, format!("negative count {count}")))?;
    let b = n * ty.size();
    if b > 0 && buf.is_null() {
        return Err(Fail(
            MPI_ERR_BUFFER,
            "null buffer with a nonzero count".into(),
        ));
    }
    Ok(b)
}

fn peer(c: &Comm, rank: c_int, any_ok: bool) -> R<Option<i32>> {
    if rank == PROC_NULL {
        return Ok(None);
    }
    if any_ok && rank == ANY {
        return Ok(Some(ANY));
    }
    match usize::try_from(rank).ok().and_then(|r| c.ranks.get(r)) {
        Some(&w) => Ok(Some(w as i32)),
        None => Err(Fail(
            MPI_ERR_RANK,
            format!("invalid rank {rank} (communicator size {})", c.size()),
        )),
    }
}

fn check_tag(tag: c_int, any_ok: bool) -> R<()> {
    if (0..=TAG_UB).contains(&tag) || (any_ok && tag == ANY) {
        Ok(())
    } else {
        Err(Fail(MPI_ERR_TAG, format!("invalid tag {tag}")))
    }
}

unsafe fn put_status(p: *mut MPI_Status, s: Status) {
    if !p.is_null() {
        *p = MPI_Status {
            MPI_SOURCE: s.source,
            MPI_TAG: s.tag,
            MPI_ERROR: s.error,
            reserved: 0,
            count: s.bytes as i64,
        };
    }
}

fn empty_status() -> Status {
    Status {
        source: ANY,
        tag: ANY,
        error: 0,
        bytes: 0,
    }
}

fn root_of(c: &Comm, root: c_int) -> R<usize> {
    usize::try_from(root)
        .ok()
        .filter(|&r| r < c.size())
        .ok_or_else(|| {
            Fail(
                MPI_ERR_ROOT,
                format!("invalid root {root} (size {})", c.size()),
            )
        })
}

// ---- environment ----

fn init() -> c_int {
    let r = catch_unwind(|| {
        let mut st = lock(&STATE);
        if st.0 {
            eprintln!("huddle-msg: MPI_Init called twice");
            return MPI_ERR_OTHER;
        }
        let eng = match Engine::from_env() {
            Ok(e) => e,
            Err(e) => {
                eprintln!("huddle-msg: MPI_Init: {e}");
                std::process::exit(1);
            }
        };
        let n = eng.size();
        let me = eng.rank();
        let world = Comm::new((0..n).collect(), n, me, 0);
        let selfc = Comm::new(vec![me], n, 0, 2);
        let lib = Lib {
            eng,
            comms: vec![None, Some(world), Some(selfc)],
            next_ctx: 4,
            thread_level: 0,
            err_comm: None,
        };
        if with_lib(|g| *g = Some(lib)).is_none() {
            eprintln!("huddle-msg: MPI_Init called while another MPI call runs");
            return MPI_ERR_OTHER;
        }
        START.get_or_init(Instant::now);
        st.0 = true;
        MPI_SUCCESS
    });
    r.unwrap_or(MPI_ERR_INTERN)
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) -> c_int {
    init()
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Init_thread(
    _argc: *mut c_int,
    _argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    let r = init();
    // Calls are not locked against each other (see LibCell): MPI_THREAD_SERIALIZED at most.
    let level = required.clamp(0, THREAD_SERIALIZED);
    if r == MPI_SUCCESS {
        with_lib(|g| {
            if let Some(l) = g.as_mut() {
                l.thread_level = level;
            }
        });
    }
    if !provided.is_null() {
        *provided = level;
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Query_thread(provided: *mut c_int) -> c_int {
    call("MPI_Query_thread", COMM_WORLD, |l| {
        if !provided.is_null() {
            *provided = l.thread_level;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Finalize() -> c_int {
    let r = call("MPI_Finalize", COMM_WORLD, |l| {
        let (e, c) = l.parts(COMM_WORLD)?;
        // Nobody leaves while a peer may still read its buffers or wait for its messages.
        coll::barrier(e, c)?;
        e.mark_finalized();
        Ok(())
    });
    if r == MPI_SUCCESS {
        let _ = catch_unwind(|| {
            with_lib(|g| *g = None);
            lock(&STATE).1 = true;
        });
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Initialized(flag: *mut c_int) -> c_int {
    if !flag.is_null() {
        *flag = lock(&STATE).0 as c_int;
    }
    MPI_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Finalized(flag: *mut c_int) -> c_int {
    if !flag.is_null() {
        *flag = lock(&STATE).1 as c_int;
    }
    MPI_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Abort(_comm: MPI_Comm, code: c_int) -> c_int {
    let _ = catch_unwind(|| {
        with_lib(|g| {
            if let Some(l) = g.as_ref() {
                let rank = l.eng.rank();
                let line = format!("huddle-msg: rank {rank} called MPI_Abort with code {code}\n");
                let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
                l.eng.segment().raise_abort(rank as i32, code);
            }
        })
    });
    std::process::exit(if code == 0 { 1 } else { code & 0xff })
}

#[no_mangle]
pub extern "C" fn MPI_Wtime() -> f64 {
    match START.get() {
        Some(s) => s.elapsed().as_secs_f64(),
        None => {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
            ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
        }
    }
}

#[no_mangle]
pub extern "C" fn MPI_Wtick() -> f64 {
    1e-9
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Get_processor_name(name: *mut c_char, len: *mut c_int) -> c_int {
    let mut buf = [0 as c_char; 256];
    libc::gethostname(buf.as_mut_ptr(), 255);
    let s = CStr::from_ptr(buf.as_ptr());
    let n = s.to_bytes().len();
    if !name.is_null() {
        std::ptr::copy_nonoverlapping(buf.as_ptr(), name, n + 1);
    }
    if !len.is_null() {
        *len = n as c_int;
    }
    MPI_SUCCESS
}

fn error_text(code: c_int) -> &'static str {
    match code {
        MPI_SUCCESS => "no error",
        MPI_ERR_BUFFER => "invalid buffer pointer",
        MPI_ERR_COUNT => "invalid count argument",
        MPI_ERR_TYPE => "invalid datatype",
        MPI_ERR_TAG => "invalid tag",
        MPI_ERR_COMM => "invalid communicator",
        MPI_ERR_RANK => "invalid rank",
        MPI_ERR_REQUEST => "invalid request",
        MPI_ERR_ROOT => "invalid root",
        MPI_ERR_OP => "invalid reduce operation",
        MPI_ERR_ARG => "invalid argument",
        MPI_ERR_TRUNCATE => "message truncated",
        MPI_ERR_OTHER => "other error",
        MPI_ERR_INTERN => "internal error",
        MPI_ERR_IN_STATUS => "error code is in status",
        _ => "unknown error",
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Error_string(code: c_int, s: *mut c_char, len: *mut c_int) -> c_int {
    let t = error_text(code);
    if !s.is_null() {
        std::ptr::copy_nonoverlapping(t.as_ptr() as *const c_char, s, t.len());
        *s.add(t.len()) = 0;
    }
    if !len.is_null() {
        *len = t.len() as c_int;
    }
    MPI_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Error_class(code: c_int, class: *mut c_int) -> c_int {
    if !class.is_null() {
        *class = code;
    }
    MPI_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_size(dt: MPI_Datatype, size: *mut c_int) -> c_int {
    call("MPI_Type_size", COMM_WORLD, |_| {
        let t = dtype(dt)?;
        if !size.is_null() {
            *size = t.size() as c_int;
        }
        Ok(())
    })
}

// ---- communicators ----

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_rank(comm: MPI_Comm, rank: *mut c_int) -> c_int {
    call("MPI_Comm_rank", comm, |l| {
        let c = l.comm(comm)?;
        if rank.is_null() {
            return Err(Fail(MPI_ERR_ARG, "null rank pointer".into()));
        }
        *rank = c.me as c_int;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_size(comm: MPI_Comm, size: *mut c_int) -> c_int {
    call("MPI_Comm_size", comm, |l| {
        let c = l.comm(comm)?;
        if size.is_null() {
            return Err(Fail(MPI_ERR_ARG, "null size pointer".into()));
        }
        *size = c.size() as c_int;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_split(
    comm: MPI_Comm,
    color: c_int,
    key: c_int,
    newcomm: *mut MPI_Comm,
) -> c_int {
    call("MPI_Comm_split", comm, |l| {
        if newcomm.is_null() {
            return Err(Fail(MPI_ERR_ARG, "null newcomm pointer".into()));
        }
        if color < 0 && color != UNDEFINED {
            return Err(Fail(MPI_ERR_ARG, format!("invalid color {color}")));
        }
        let proposal = l.next_ctx;
        let world = l.eng.size();
        let (e, c) = l.parts(comm)?;
        let mut mine = [0u8; 8];
        mine[..4].copy_from_slice(&color.to_ne_bytes());
        mine[4..].copy_from_slice(&key.to_ne_bytes());
        let all = coll::allgather(e, c, &mine)?;
        let ctx = coll::agree_ctx(e, c, proposal)?;
        let mut members: Vec<(c_int, usize, usize)> = Vec::new();
        for (r, chunk) in all.chunks(8).enumerate() {
            let col = c_int::from_ne_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            let k = c_int::from_ne_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
            if col == color && color != UNDEFINED {
                members.push((k, r, c.ranks[r]));
            }
        }
        members.sort();
        let me = c.me;
        l.next_ctx = ctx + 2;
        if color == UNDEFINED {
            *newcomm = COMM_NULL;
            return Ok(());
        }
        let my = members
            .iter()
            .position(|m| m.1 == me)
            .ok_or_else(|| Fail(MPI_ERR_INTERN, "own rank missing from split".into()))?;
        let mut nc = Comm::new(members.iter().map(|m| m.2).collect(), world, my, ctx);
        nc.errhandler = l.comm(comm)?.errhandler;
        *newcomm = l.add_comm(nc);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_dup(comm: MPI_Comm, newcomm: *mut MPI_Comm) -> c_int {
    call("MPI_Comm_dup", comm, |l| {
        if newcomm.is_null() {
            return Err(Fail(MPI_ERR_ARG, "null newcomm pointer".into()));
        }
        let proposal = l.next_ctx;
        let world = l.eng.size();
        let (e, c) = l.parts(comm)?;
        let ctx = coll::agree_ctx(e, c, proposal)?;
        let mut nc = Comm::new(c.ranks.clone(), world, c.me, ctx);
        nc.errhandler = c.errhandler;
        l.next_ctx = ctx + 2;
        *newcomm = l.add_comm(nc);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_free(comm: *mut MPI_Comm) -> c_int {
    let h = if comm.is_null() { COMM_NULL } else { *comm };
    call("MPI_Comm_free", COMM_WORLD, |l| {
        l.comm(h)?;
        if h == COMM_WORLD || h == COMM_SELF {
            return Err(Fail(
                MPI_ERR_COMM,
                "cannot free a predefined communicator".into(),
            ));
        }
        l.comms[h as usize] = None;
        *comm = COMM_NULL;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_set_errhandler(comm: MPI_Comm, eh: MPI_Errhandler) -> c_int {
    call("MPI_Comm_set_errhandler", comm, |l| {
        if eh != ERRORS_ARE_FATAL && eh != ERRORS_RETURN {
            return Err(Fail(MPI_ERR_ARG, format!("invalid error handler {eh}")));
        }
        let (_, c) = l.parts(comm)?;
        c.errhandler = eh;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_get_errhandler(comm: MPI_Comm, eh: *mut MPI_Errhandler) -> c_int {
    call("MPI_Comm_get_errhandler", comm, |l| {
        let c = l.comm(comm)?;
        if !eh.is_null() {
            *eh = if c.errhandler == ERRORS_RETURN {
                ERRORS_RETURN
            } else {
                ERRORS_ARE_FATAL
            };
        }
        Ok(())
    })
}

// ---- point to point ----

unsafe fn start_send(
    l: &mut Lib,
    buf: *const c_void,
    count: c_int,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> R<usize> {
    let b = bytes(buf, count, dt)?;
    check_tag(tag, false)?;
    let (e, c) = l.parts(comm)?;
    match peer(c, dest, false)? {
        None => Ok(done_request(e, coll::proc_null_status())),
        Some(w) => Ok(e.isend(buf as *const u8, b as u64, w as usize, c.ctx, tag)),
    }
}

fn done_request(e: &mut Engine, st: Status) -> usize {
    e.completed(st)
}

unsafe fn start_recv(
    l: &mut Lib,
    buf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> R<usize> {
    let b = bytes(buf, count, dt)?;
    check_tag(tag, true)?;
    let (e, c) = l.parts(comm)?;
    match peer(c, source, true)? {
        None => Ok(done_request(e, coll::proc_null_status())),
        Some(w) => Ok(e.irecv(
            buf as *mut u8,
            b as u64,
            w,
            c.ctx,
            tag,
            Some(c.world_to_comm.clone()),
        )),
    }
}

fn finish(e: &mut Engine, id: usize) -> R<Status> {
    let st = e.wait(id)?;
    Ok(st)
}

fn status_error(st: &Status) -> R<()> {
    if st.error != 0 {
        return Err(Fail(st.error, error_text(st.error).into()));
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Send(
    buf: *const c_void,
    count: c_int,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> c_int {
    call("MPI_Send", comm, |l| {
        let b = bytes(buf, count, dt)?;
        check_tag(tag, false)?;
        let (e, c) = l.parts(comm)?;
        let st = match peer(c, dest, false)? {
            None => return Ok(()),
            Some(w) => e.send_ptr(buf as *const u8, b as u64, w as usize, c.ctx, tag)?,
        };
        status_error(&st)
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Recv(
    buf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    call("MPI_Recv", comm, |l| {
        let id = start_recv(l, buf, count, dt, source, tag, comm)?;
        let st = finish(&mut l.eng, id)?;
        put_status(status, st);
        status_error(&st)
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Isend(
    buf: *const c_void,
    count: c_int,
    dt: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    req: *mut MPI_Request,
) -> c_int {
    call("MPI_Isend", comm, |l| {
        if req.is_null() {
            return Err(Fail(MPI_ERR_REQUEST, "null request pointer".into()));
        }
        let id = start_send(l, buf, count, dt, dest, tag, comm)?;
        *req = id as c_int + 1;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Irecv(
    buf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    req: *mut MPI_Request,
) -> c_int {
    call("MPI_Irecv", comm, |l| {
        if req.is_null() {
            return Err(Fail(MPI_ERR_REQUEST, "null request pointer".into()));
        }
        let id = start_recv(l, buf, count, dt, source, tag, comm)?;
        *req = id as c_int + 1;
        Ok(())
    })
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn MPI_Sendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    call("MPI_Sendrecv", comm, |l| {
        let r = start_recv(l, recvbuf, recvcount, recvtype, source, recvtag, comm)?;
        let s = start_send(l, sendbuf, sendcount, sendtype, dest, sendtag, comm)?;
        let e = &mut l.eng;
        e.wait_until(|e| e.is_done(r) && e.is_done(s))?;
        let sst = e.release(s);
        let rst = e.release(r);
        put_status(status, rst);
        status_error(&sst)?;
        status_error(&rst)
    })
}

/// Request handle -> engine id; None for MPI_REQUEST_NULL.
fn req_id(e: &Engine, h: MPI_Request) -> R<Option<usize>> {
    if h == 0 {
        return Ok(None);
    }
    let id = usize::try_from(h - 1)
        .map_err(|_| Fail(MPI_ERR_REQUEST, format!("invalid request {h}")))?;
    if !e.is_live(id) {
        return Err(Fail(MPI_ERR_REQUEST, format!("invalid request {h}")));
    }
    Ok(Some(id))
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Wait(req: *mut MPI_Request, status: *mut MPI_Status) -> c_int {
    call("MPI_Wait", COMM_WORLD, |l| {
        if req.is_null() {
            return Err(Fail(MPI_ERR_REQUEST, "null request pointer".into()));
        }
        let Some(id) = req_id(&l.eng, *req)? else {
            put_status(status, empty_status());
            return Ok(());
        };
        let ctx = l.eng.request_ctx(id);
        let st = l.eng.wait(id)?;
        *req = 0;
        put_status(status, st);
        l.blame(ctx, status_error(&st))
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Test(
    req: *mut MPI_Request,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    call("MPI_Test", COMM_WORLD, |l| {
        if req.is_null() || flag.is_null() {
            return Err(Fail(MPI_ERR_ARG, "null request or flag pointer".into()));
        }
        let Some(id) = req_id(&l.eng, *req)? else {
            *flag = 1;
            put_status(status, empty_status());
            return Ok(());
        };
        l.eng.progress();
        l.eng.check_abort()?;
        if !l.eng.is_done(id) {
            *flag = 0;
            return Ok(());
        }
        let ctx = l.eng.request_ctx(id);
        let st = l.eng.release(id);
        *req = 0;
        *flag = 1;
        put_status(status, st);
        l.blame(ctx, status_error(&st))
    })
}

/// The requests' ids (None for MPI_REQUEST_NULL), in one allocation of the right size (a
/// collect through Result grows the vector by doubling: several reallocs per Waitall).
fn req_ids(e: &Engine, hs: &[MPI_Request]) -> R<Vec<Option<usize>>> {
    let mut ids = Vec::with_capacity(hs.len());
    for &h in hs {
        ids.push(req_id(e, h)?);
    }
    Ok(ids)
}

unsafe fn req_slice<'a>(count: c_int, reqs: *mut MPI_Request) -> R<&'a mut [MPI_Request]> {
    let n = usize::try_from(count)
        .map_err(|_| Fail(MPI_ERR_COUNT, format!("negative count {count}")))?;
    if n == 0 {
        return Ok(&mut []);
    }
    if reqs.is_null() {
        return Err(Fail(MPI_ERR_REQUEST, "null request array".into()));
    }
    Ok(std::slice::from_raw_parts_mut(reqs, n))
}

/// Releases every completed request of Waitall/Testall into `statuses`; the first failed
/// one's communicator takes the error.
unsafe fn release_all(
    l: &mut Lib,
    ids: &[Option<usize>],
    hs: &mut [MPI_Request],
    statuses: *mut MPI_Status,
) -> R<()> {
    let mut failed: Option<Option<u32>> = None;
    for (k, id) in ids.iter().enumerate() {
        let ctx = id.and_then(|i| l.eng.request_ctx(i));
        let st = id.map_or_else(empty_status, |i| l.eng.release(i));
        if st.error != 0 && failed.is_none() {
            failed = Some(ctx);
        }
        hs[k] = 0;
        if !statuses.is_null() {
            put_status(statuses.add(k), st);
        }
    }
    match failed {
        Some(ctx) => l.blame(
            ctx,
            Err(Fail(
                MPI_ERR_IN_STATUS,
                "a request failed; see its status".into(),
            )),
        ),
        None => Ok(()),
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Waitall(
    count: c_int,
    reqs: *mut MPI_Request,
    statuses: *mut MPI_Status,
) -> c_int {
    call("MPI_Waitall", COMM_WORLD, |l| {
        let hs = req_slice(count, reqs)?;
        let ids = req_ids(&l.eng, hs)?;
        // Done stays done until released: skip past finished requests once, not on every
        // poll (a window of n receives would cost n*n/2 checks).
        let mut pending = 0;
        l.eng.wait_until(|e| {
            while pending < ids.len() && ids[pending].is_none_or(|i| e.is_done(i)) {
                pending += 1;
            }
            pending == ids.len()
        })?;
        release_all(l, &ids, hs, statuses)
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Waitany(
    count: c_int,
    reqs: *mut MPI_Request,
    index: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    call("MPI_Waitany", COMM_WORLD, |l| {
        let hs = req_slice(count, reqs)?;
        if index.is_null() {
            return Err(Fail(MPI_ERR_ARG, "null index pointer".into()));
        }
        let ids = req_ids(&l.eng, hs)?;
        if ids.iter().all(Option::is_none) {
            *index = UNDEFINED;
            put_status(status, empty_status());
            return Ok(());
        }
        l.eng
            .wait_until(|e| ids.iter().flatten().any(|&i| e.is_done(i)))?;
        let k = ids
            .iter()
            .position(|id| id.is_some_and(|i| l.eng.is_done(i)))
            .ok_or_else(|| Fail(MPI_ERR_INTERN, "no request completed".into()))?;
        let id = ids[k].unwrap_or_default();
        let ctx = l.eng.request_ctx(id);
        let st = l.eng.release(id);
        hs[k] = 0;
        *index = k as c_int;
        put_status(status, st);
        l.blame(ctx, status_error(&st))
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Testall(
    count: c_int,
    reqs: *mut MPI_Request,
    flag: *mut c_int,
    statuses: *mut MPI_Status,
) -> c_int {
    call("MPI_Testall", COMM_WORLD, |l| {
        let hs = req_slice(count, reqs)?;
        if flag.is_null() {
            return Err(Fail(MPI_ERR_ARG, "null flag pointer".into()));
        }
        let ids = req_ids(&l.eng, hs)?;
        l.eng.progress();
        l.eng.check_abort()?;
        if !ids.iter().flatten().all(|&i| l.eng.is_done(i)) {
            *flag = 0;
            return Ok(());
        }
        *flag = 1;
        release_all(l, &ids, hs, statuses)
    })
}

unsafe fn probe_once(l: &mut Lib, source: c_int, tag: c_int, comm: MPI_Comm) -> R<Option<Status>> {
    check_tag(tag, true)?;
    let (e, c) = l.parts(comm)?;
    let Some(w) = peer(c, source, true)? else {
        return Ok(Some(coll::proc_null_status()));
    };
    e.check_abort()?;
    Ok(e.probe(w, c.ctx, tag).map(|(src, t, total)| Status {
        source: c.world_to_comm.get(src).copied().unwrap_or(-1),
        tag: t,
        error: 0,
        bytes: total,
    }))
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Iprobe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    call("MPI_Iprobe", comm, |l| {
        if flag.is_null() {
            return Err(Fail(MPI_ERR_ARG, "null flag pointer".into()));
        }
        match probe_once(l, source, tag, comm)? {
            Some(st) => {
                *flag = 1;
                put_status(status, st);
            }
            None => *flag = 0,
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Probe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    call("MPI_Probe", comm, |l| {
        if let Some(st) = probe_once(l, source, tag, comm)? {
            put_status(status, st);
            return Ok(());
        }
        let (e, c) = l.parts(comm)?;
        let Some(w) = peer(c, source, true)? else {
            return Ok(());
        };
        let ctx = c.ctx;
        let mut found = None;
        e.wait_until(|e| {
            found = e.peek(w, ctx, tag);
            found.is_some()
        })?;
        if let Some((src, t, total)) = found {
            put_status(
                status,
                Status {
                    source: c.world_to_comm.get(src).copied().unwrap_or(-1),
                    tag: t,
                    error: 0,
                    bytes: total,
                },
            );
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Get_count(
    status: *const MPI_Status,
    dt: MPI_Datatype,
    count: *mut c_int,
) -> c_int {
    call("MPI_Get_count", COMM_WORLD, |_| {
        let ty = dtype(dt)?;
        if status.is_null() || count.is_null() {
            return Err(Fail(MPI_ERR_ARG, "null status or count pointer".into()));
        }
        let b = (*status).count;
        *count = if b % ty.size() as i64 == 0 {
            (b / ty.size() as i64) as c_int
        } else {
            UNDEFINED
        };
        Ok(())
    })
}

// ---- collectives ----

/// The caller's contribution: `sendbuf`, or `recvbuf` for MPI_IN_PLACE.
unsafe fn contribution(sendbuf: *const c_void, recvbuf: *const c_void, b: usize) -> Vec<u8> {
    let src = if sendbuf as usize == IN_PLACE {
        recvbuf
    } else {
        sendbuf
    };
    if b == 0 {
        return Vec::new();
    }
    std::slice::from_raw_parts(src as *const u8, b).to_vec()
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Barrier(comm: MPI_Comm) -> c_int {
    call("MPI_Barrier", comm, |l| {
        let (e, c) = l.parts(comm)?;
        Ok(coll::barrier(e, c)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Bcast(
    buf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    call("MPI_Bcast", comm, |l| {
        let b = bytes(buf, count, dt)?;
        let (e, c) = l.parts(comm)?;
        let root = root_of(c, root)?;
        let s: &mut [u8] = if b == 0 {
            &mut []
        } else {
            std::slice::from_raw_parts_mut(buf as *mut u8, b)
        };
        Ok(coll::bcast(e, c, s, root)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    call("MPI_Reduce", comm, |l| {
        let ty = dtype(dt)?;
        let o = op_of(op, ty)?;
        let b = bytes(sendbuf, count, dt)?;
        let (e, c) = l.parts(comm)?;
        let root = root_of(c, root)?;
        if c.me == root && b > 0 && recvbuf.is_null() {
            return Err(Fail(
                MPI_ERR_BUFFER,
                "null receive buffer at the root".into(),
            ));
        }
        let mut acc = contribution(sendbuf, recvbuf, b);
        coll::reduce(e, c, &mut acc, ty, o, root)?;
        if c.me == root && b > 0 {
            std::ptr::copy_nonoverlapping(acc.as_ptr(), recvbuf as *mut u8, b);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Allreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dt: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> c_int {
    call("MPI_Allreduce", comm, |l| {
        let ty = dtype(dt)?;
        let o = op_of(op, ty)?;
        let b = bytes(recvbuf, count, dt)?;
        let (e, c) = l.parts(comm)?;
        if b == 0 {
            return Ok(());
        }
        let acc = std::slice::from_raw_parts_mut(recvbuf as *mut u8, b);
        if sendbuf as usize == IN_PLACE {
            return Ok(coll::allreduce(e, c, acc, ty, o)?);
        }
        let send = sendbuf as *const u8;
        if send < acc.as_ptr().add(b) && acc.as_ptr() < send.add(b) {
            return Err(Fail(
                MPI_ERR_BUFFER,
                "send and receive buffers overlap (use MPI_IN_PLACE)".into(),
            ));
        }
        Ok(coll::allreduce_from(e, c, send, acc, ty, o)?)
    })
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn MPI_Gather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    call("MPI_Gather", comm, |l| {
        let (e, c) = l.parts(comm)?;
        let root = root_of(c, root)?;
        let n = c.size();
        let rb = if c.me == root {
            bytes(recvbuf, recvcount, recvtype)?
        } else {
            0
        };
        let send = if sendbuf as usize == IN_PLACE && c.me == root {
            // In place: the root's block already sits at its slot of recvbuf.
            std::slice::from_raw_parts((recvbuf as *const u8).add(root * rb), rb).to_vec()
        } else {
            let sb = bytes(sendbuf, sendcount, sendtype)?;
            contribution(sendbuf, recvbuf, sb)
        };
        let counts = vec![rb; n];
        let displs: Vec<usize> = (0..n).map(|r| r * rb).collect();
        Ok(coll::gatherv(
            e,
            c,
            &send,
            recvbuf as *mut u8,
            &counts,
            &displs,
            root,
        )?)
    })
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn MPI_Gatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    call("MPI_Gatherv", comm, |l| {
        let (e, c) = l.parts(comm)?;
        let root = root_of(c, root)?;
        let n = c.size();
        let (mut counts, mut disp) = (vec![0usize; n], vec![0usize; n]);
        if c.me == root {
            let ty = dtype(recvtype)?;
            if recvcounts.is_null() || displs.is_null() {
                return Err(Fail(
                    MPI_ERR_ARG,
                    "null recvcounts or displs at the root".into(),
                ));
            }
            for r in 0..n {
                let (k, d) = (*recvcounts.add(r), *displs.add(r));
                if k < 0 || d < 0 {
                    return Err(Fail(
                        MPI_ERR_COUNT,
                        format!("negative count or displacement for rank {r}"),
                    ));
                }
                counts[r] = k as usize * ty.size();
                disp[r] = d as usize * ty.size();
            }
        }
        let send = if sendbuf as usize == IN_PLACE && c.me == root {
            let me = c.me;
            std::slice::from_raw_parts((recvbuf as *const u8).add(disp[me]), counts[me]).to_vec()
        } else {
            let sb = bytes(sendbuf, sendcount, sendtype)?;
            contribution(sendbuf, recvbuf, sb)
        };
        Ok(coll::gatherv(
            e,
            c,
            &send,
            recvbuf as *mut u8,
            &counts,
            &disp,
            root,
        )?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Allgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    call("MPI_Allgather", comm, |l| {
        let (e, c) = l.parts(comm)?;
        let rb = bytes(recvbuf, recvcount, recvtype)?;
        let n = c.size();
        let send = if sendbuf as usize == IN_PLACE {
            std::slice::from_raw_parts((recvbuf as *const u8).add(c.me * rb), rb).to_vec()
        } else {
            let sb = bytes(sendbuf, sendcount, sendtype)?;
            contribution(sendbuf, recvbuf, sb)
        };
        let counts = vec![rb; n];
        let displs: Vec<usize> = (0..n).map(|r| r * rb).collect();
        coll::gatherv(e, c, &send, recvbuf as *mut u8, &counts, &displs, 0)?;
        let all: &mut [u8] = if rb == 0 {
            &mut []
        } else {
            std::slice::from_raw_parts_mut(recvbuf as *mut u8, rb * n)
        };
        Ok(coll::bcast(e, c, all, 0)?)
    })
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn MPI_Scatter(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    call("MPI_Scatter", comm, |l| {
        let (e, c) = l.parts(comm)?;
        let root = root_of(c, root)?;
        let block = if c.me == root {
            bytes(sendbuf, sendcount, sendtype)?
        } else {
            bytes(recvbuf, recvcount, recvtype)?
        };
        let recv = if recvbuf as usize == IN_PLACE {
            (sendbuf as *mut u8).add(c.me * block)
        } else {
            recvbuf as *mut u8
        };
        Ok(coll::scatter(
            e,
            c,
            sendbuf as *const u8,
            recv,
            block,
            root,
        )?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Alltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    call("MPI_Alltoall", comm, |l| {
        let (e, c) = l.parts(comm)?;
        let n = c.size();
        let rb = bytes(recvbuf, recvcount, recvtype)?;
        let (send, sb) = if sendbuf as usize == IN_PLACE {
            (contribution(sendbuf, recvbuf, rb * n), rb)
        } else {
            let sb = bytes(sendbuf, sendcount, sendtype)?;
            (Vec::new(), sb)
        };
        let sptr = if sendbuf as usize == IN_PLACE {
            send.as_ptr()
        } else {
            sendbuf as *const u8
        };
        Ok(coll::alltoall(e, c, sptr, sb, recvbuf as *mut u8, rb)?)
    })
}

unsafe fn vec_arg(p: *const c_int, n: usize, unit: usize, what: &str) -> R<Vec<usize>> {
    if p.is_null() {
        return Err(Fail(MPI_ERR_ARG, format!("null {what}")));
    }
    (0..n)
        .map(|i| {
            let v = *p.add(i);
            usize::try_from(v)
                .map(|v| v * unit)
                .map_err(|_| Fail(MPI_ERR_COUNT, format!("negative {what}[{i}] = {v}")))
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn MPI_Alltoallv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    call("MPI_Alltoallv", comm, |l| {
        let (e, c) = l.parts(comm)?;
        let n = c.size();
        let st = dtype(sendtype)?.size();
        let rt = dtype(recvtype)?.size();
        let sc = vec_arg(sendcounts, n, st, "sendcounts")?;
        let sd = vec_arg(sdispls, n, st, "sdispls")?;
        let rc = vec_arg(recvcounts, n, rt, "recvcounts")?;
        let rd = vec_arg(rdispls, n, rt, "rdispls")?;
        Ok(coll::alltoallv(
            e,
            c,
            sendbuf as *const u8,
            &sc,
            &sd,
            recvbuf as *mut u8,
            &rc,
            &rd,
        )?)
    })
}
