//! Threads that end through glibc (their start routine returns, or pthread_exit). At the
//! thread's exit system call the kernel walks its robust futex list to mark each mutex it
//! holds as its owner's death, and clears the TID word pthread_join waits on, and waits for
//! no fault there: a page of those the agent took out stays a mutex locked for good (the next
//! lock hangs) or a join that never returns. The robust module keeps such pages as it finds
//! them every SCAN_NS; a thread that locks a robust mutex and ends sooner was not covered
//! (crates/cli/tests/exec_child.c, robust-return: the first thread's mutex timed out in 3
//! runs of 3). So every thread started with pthread_create gets a value of KEY, whose
//! destructor, run by glibc in the ending thread after its start routine, keeps those pages
//! (robust::keep_ending_thread) before the exit system call.
//!
//! Not covered: threads made with clone(2) directly, and threads that end with a raw exit
//! system call (no destructors run); for them the SCAN_NS window stays.

use super::*;

/// A thread's start routine. "C-unwind": pthread_exit and pthread_cancel unwind through
/// [`begin`] (a forced unwind; it has nothing to drop).
type Start = unsafe extern "C-unwind" fn(*mut c_void) -> *mut c_void;
type Create = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    Start,
    *mut c_void,
) -> c_int;

/// glibc's pthread_create (RTLD_NEXT), once looked up.
static REAL: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
const NO_KEY: u32 = u32::MAX;
static KEY: AtomicU32 = AtomicU32::new(NO_KEY);

/// A start routine and its argument on their way to the new thread: a fixed pool, so that
/// pthread_create allocates nothing of ours. Without a free slot the thread starts as the
/// program asked, without the destructor.
struct Slot {
    busy: AtomicBool,
    start: AtomicUsize,
    arg: AtomicPtr<c_void>,
}
const SLOTS: usize = 256;
static SLOT: [Slot; SLOTS] = [const {
    Slot {
        busy: AtomicBool::new(false),
        start: AtomicUsize::new(0),
        arg: AtomicPtr::new(std::ptr::null_mut()),
    }
}; SLOTS];

/// Makes the key, once the agent runs in this process (see start); a fork child keeps it.
pub(super) fn arm() {
    if KEY.load(Ordering::Acquire) != NO_KEY {
        return;
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: at_end is a plain function that only reads the agent's state under its lock.
    if unsafe { libc::pthread_key_create(&mut key, Some(at_end)) } == 0 {
        KEY.store(key, Ordering::Release);
    }
}

unsafe fn real() -> Option<Create> {
    let mut p = REAL.load(Ordering::Acquire);
    if p.is_null() {
        p = libc::dlsym(libc::RTLD_NEXT, c"pthread_create".as_ptr());
        REAL.store(p, Ordering::Release);
    }
    // SAFETY: the symbol is glibc's pthread_create, whose signature Create is.
    (!p.is_null()).then(|| std::mem::transmute::<*mut c_void, Create>(p))
}

/// Interposed `pthread_create`: the program's thread starts in [`begin`], which gives it a
/// value of KEY and calls the program's start routine.
///
/// # Safety
/// Same contract as pthread_create(3).
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: Start,
    arg: *mut c_void,
) -> c_int {
    let Some(create) = real() else {
        return libc::EAGAIN;
    };
    if KEY.load(Ordering::Acquire) == NO_KEY {
        return create(thread, attr, start, arg);
    }
    let free = SLOT.iter().position(|s| {
        s.busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    });
    let Some(i) = free else {
        return create(thread, attr, start, arg);
    };
    SLOT[i].start.store(start as usize, Ordering::Relaxed);
    SLOT[i].arg.store(arg, Ordering::Relaxed);
    let r = create(thread, attr, begin, i as *mut c_void);
    if r != 0 {
        SLOT[i].busy.store(false, Ordering::Release);
    }
    r
}

/// The new thread's first function: frees its slot, sets its value of KEY (so that glibc
/// runs at_end when it ends) and runs the program's start routine.
unsafe extern "C-unwind" fn begin(slot: *mut c_void) -> *mut c_void {
    let s = &SLOT[slot as usize];
    // SAFETY: pthread_create stored a Start there before the thread existed.
    let start = std::mem::transmute::<usize, Start>(s.start.load(Ordering::Relaxed));
    let arg = s.arg.load(Ordering::Relaxed);
    s.busy.store(false, Ordering::Release);
    // Any value but null: glibc runs a key's destructor only for those.
    let value = (&KEY as *const AtomicU32).cast::<c_void>();
    libc::pthread_setspecific(KEY.load(Ordering::Acquire), value);
    start(arg)
}

/// KEY's destructor, in the ending thread.
unsafe extern "C" fn at_end(_: *mut c_void) {
    let st = STATE.load(Ordering::Acquire);
    if !st.is_null() && UFFD.load(Ordering::Acquire) >= 0 {
        robust::keep_ending_thread(st);
    }
}
