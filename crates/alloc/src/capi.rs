//! The C ABI (include/huddle/alloc.h). Every entry point catches panics, so none crosses into
//! C; failures return NULL or -1, set errno, and leave a one-line message for
//! `huddle_last_error()`.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::{AllocError, Location, Mode, Pool};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(e: &AllocError) {
    // SAFETY: errno is thread-local; __errno_location never returns NULL.
    unsafe { *libc::__errno_location() = e.errno() };
    let text = CString::new(e.to_string().replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = text);
}

/// Runs `f`, turning errors and panics into `fallback` plus errno and a message.
fn guard<T>(fallback: T, f: impl FnOnce() -> Result<T, AllocError>) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_error(&e);
            fallback
        }
        Err(_) => {
            set_error(&AllocError::Internal(
                "panic caught at the C boundary".into(),
            ));
            fallback
        }
    }
}

fn location(controller: c_int, bank: c_int, p: &Pool) -> Result<Location, AllocError> {
    if controller < 0 || bank < 0 {
        return Err(AllocError::BadLocation {
            controller: controller.into(),
            bank: bank.into(),
            controllers: p.controllers(),
            banks: p.banks(),
        });
    }
    Ok(Location {
        controller: controller as usize,
        bank: bank as usize,
    })
}

/// # Safety
/// `p` is NULL or a pool from `huddle_pool_create` that was not destroyed.
unsafe fn pool<'a>(p: *const Pool) -> Result<&'a Pool, AllocError> {
    p.as_ref().ok_or(AllocError::Null)
}

/// Creates a pool of `bytes` bytes; `mapping` names the address-mapping function (NULL: this
/// machine's). NULL on failure.
///
/// # Safety
/// `mapping` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn huddle_pool_create(bytes: usize, mapping: *const c_char) -> *mut Pool {
    guard(std::ptr::null_mut(), || {
        let name = if mapping.is_null() {
            None
        } else {
            let s = CStr::from_ptr(mapping);
            Some(s.to_str().map_err(|_| AllocError::BadMapping {
                spec: s.to_string_lossy().into_owned(),
                reason: "not UTF-8".into(),
            })?)
        };
        Ok(Box::into_raw(Box::new(Pool::new(bytes, name)?)))
    })
}

/// Unmaps the pool; every pointer from it becomes invalid.
///
/// # Safety
/// `p` is NULL or a live pool, destroyed once.
#[no_mangle]
pub unsafe extern "C" fn huddle_pool_destroy(p: *mut Pool) {
    guard((), || {
        if !p.is_null() {
            drop(Box::from_raw(p));
        }
        Ok(())
    })
}

/// Controllers of the pool, -1 for NULL.
///
/// # Safety
/// `p` is NULL or a live pool.
#[no_mangle]
pub unsafe extern "C" fn huddle_pool_controllers(p: *const Pool) -> c_int {
    guard(-1, || Ok(pool(p)?.controllers() as c_int))
}

/// Banks per controller, -1 for NULL.
///
/// # Safety
/// `p` is NULL or a live pool.
#[no_mangle]
pub unsafe extern "C" fn huddle_pool_banks(p: *const Pool) -> c_int {
    guard(-1, || Ok(pool(p)?.banks() as c_int))
}

/// Bytes in one chunk, the smallest block a pool hands out; 0 for NULL.
///
/// # Safety
/// `p` is NULL or a live pool.
#[no_mangle]
pub unsafe extern "C" fn huddle_pool_chunk_size(p: *const Pool) -> usize {
    guard(0, || Ok(pool(p)?.chunk_size()))
}

/// Name of the mapping the pool sorts by (the one chosen for this machine when created with
/// NULL), valid while the pool lives; NULL for NULL.
///
/// # Safety
/// `p` is NULL or a live pool.
#[no_mangle]
pub unsafe extern "C" fn huddle_pool_mapping(p: *const Pool) -> *const c_char {
    guard(std::ptr::null(), || {
        Ok(pool(p)?.mapping().c_name().as_ptr())
    })
}

/// `bytes` bytes at (controller, bank) with the fallbacks of `mode`; NULL when none fits.
///
/// # Safety
/// `p` is NULL or a live pool.
#[no_mangle]
pub unsafe extern "C" fn huddle_alloc(
    p: *mut Pool,
    bytes: usize,
    controller: c_int,
    bank: c_int,
    mode: c_int,
) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        let p = pool(p)?;
        let at = location(controller, bank, p)?;
        Ok(p.alloc(bytes, at, Mode::try_from(mode)?)?.as_ptr().cast())
    })
}

/// Returns an allocation to its lists; NULL is ignored; a pointer that is not a live
/// allocation sets errno to EINVAL and changes nothing.
///
/// # Safety
/// `p` is NULL or a live pool.
#[no_mangle]
pub unsafe extern "C" fn huddle_free(p: *mut Pool, ptr: *mut c_void) {
    guard((), || {
        if ptr.is_null() {
            return Ok(());
        }
        pool(p)?.free(ptr.cast())
    })
}

/// Stores the (controller, bank) of an address in the pool; 0, or -1 when it is outside.
///
/// # Safety
/// `p` is NULL or a live pool; `controller`/`bank` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn huddle_where(
    p: *const Pool,
    ptr: *const c_void,
    controller: *mut c_int,
    bank: *mut c_int,
) -> c_int {
    guard(-1, || {
        let at = pool(p)?.where_is(ptr.cast())?;
        if !controller.is_null() {
            *controller = at.controller as c_int;
        }
        if !bank.is_null() {
            *bank = at.bank as c_int;
        }
        Ok(0)
    })
}

/// Binds the calling thread to (controller, bank) for `huddle_alloc_bound`; 0 or -1.
///
/// # Safety
/// `p` is NULL or a live pool.
#[no_mangle]
pub unsafe extern "C" fn huddle_bind_thread(p: *mut Pool, controller: c_int, bank: c_int) -> c_int {
    guard(-1, || {
        let p = pool(p)?;
        p.bind_thread(location(controller, bank, p)?)?;
        Ok(0)
    })
}

/// `bytes` bytes in the calling thread's bound bank (exact mode); NULL when unbound or full.
///
/// # Safety
/// `p` is NULL or a live pool.
#[no_mangle]
pub unsafe extern "C" fn huddle_alloc_bound(p: *mut Pool, bytes: usize) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        Ok(pool(p)?.alloc_bound(bytes)?.as_ptr().cast())
    })
}

/// The message of the calling thread's last failure ("" if none); valid until its next failure.
#[no_mangle]
pub extern "C" fn huddle_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}
