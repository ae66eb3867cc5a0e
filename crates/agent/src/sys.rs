//! The memory system calls the agent makes, straight to the kernel. Libraries may replace
//! libc's mmap, munmap, mremap and madvise for the whole process: UCX's memory hooks
//! (libucm, loaded by MPICH's and Open MPI's UCX transports) patch them, take locks of
//! their own, and pass an mremap on without its new address, so the agent's MREMAP_FIXED
//! moves went to address 0 (MPICH's `traffic` under `huddle run --source faults`: `.data`
//! adopted to pages 0 to 0x6000, which the agent then registered and re-armed; 2026-11-30).
//! Nor may the helper threads wait on a program's lock. libc::syscall is not hooked. Its
//! arguments are passed as longs: an int's upper half in the register is not defined.

use libc::{c_int, c_long, c_void};

/// mmap(2); MAP_FAILED on failure, errno set.
pub(crate) unsafe fn mmap(addr: *mut c_void, len: usize, prot: c_int, flags: c_int) -> *mut c_void {
    let (prot, flags, fd, offset) = (prot as c_long, flags as c_long, -1 as c_long, 0 as c_long);
    libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, offset) as *mut c_void
}

/// munmap(2).
pub(crate) unsafe fn munmap(addr: *mut c_void, len: usize) -> c_int {
    libc::syscall(libc::SYS_munmap, addr, len) as c_int
}

/// mremap(2) with a new address (MREMAP_FIXED); MAP_FAILED on failure, errno set.
pub(crate) unsafe fn mremap(
    old: *mut c_void,
    old_len: usize,
    new_len: usize,
    flags: c_int,
    new: *mut c_void,
) -> *mut c_void {
    libc::syscall(
        libc::SYS_mremap,
        old,
        old_len,
        new_len,
        flags as c_long,
        new,
    ) as *mut c_void
}

/// madvise(2).
pub(crate) unsafe fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int {
    libc::syscall(libc::SYS_madvise, addr, len, advice as c_long) as c_int
}

/// mprotect(2).
pub(crate) unsafe fn mprotect(addr: *mut c_void, len: usize, prot: c_int) -> c_int {
    libc::syscall(libc::SYS_mprotect, addr, len, prot as c_long) as c_int
}
