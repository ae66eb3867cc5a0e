//! The userfaultfd ABI (linux/userfaultfd.h) as the agent uses it: constants, the ioctl
//! argument structs, and opening the descriptor with the features it needs.

use super::*;

pub(super) const UFFD_API: u64 = 0xAA;
pub(super) const UFFDIO_API: c_ulong = 0xc018_aa3f;
pub(super) const UFFDIO_REGISTER: c_ulong = 0xc020_aa00;
pub(super) const UFFDIO_UNREGISTER: c_ulong = 0x8010_aa01;
pub(super) const UFFDIO_WAKE: c_ulong = 0x8010_aa02;
pub(super) const UFFDIO_COPY: c_ulong = 0xc028_aa03;
pub(super) const UFFDIO_ZEROPAGE: c_ulong = 0xc020_aa04;
pub(super) const UFFDIO_MOVE: c_ulong = 0xc028_aa05;
pub(super) const UFFDIO_MOVE_MODE_DONTWAKE: u64 = 1;
pub(super) const UFFDIO_COPY_MODE_DONTWAKE: u64 = 1;
pub(super) const UFFD_FEATURE_MOVE: u64 = 1 << 16;
pub(super) const UFFDIO_REGISTER_MODE_MISSING: u64 = 1;
pub(super) const UFFD_FEATURE_EVENT_REMAP: u64 = 1 << 2;
pub(super) const UFFD_FEATURE_EVENT_REMOVE: u64 = 1 << 3;
pub(super) const UFFD_FEATURE_EVENT_UNMAP: u64 = 1 << 6;
pub(super) const UFFD_FEATURE_THREAD_ID: u64 = 1 << 8;
/// Fault messages carry the faulting address itself, not its page (Linux 5.18).
pub(super) const UFFD_FEATURE_EXACT_ADDRESS: u64 = 1 << 11;
pub(super) const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
pub(super) const UFFD_EVENT_REMAP: u8 = 0x14;
pub(super) const UFFD_EVENT_REMOVE: u8 = 0x15;
pub(super) const UFFD_EVENT_UNMAP: u8 = 0x16;

/// The registration must offer UFFDIO_COPY and UFFDIO_ZEROPAGE.
pub(super) const IOCTLS_NEEDED: u64 = (1 << 3) | (1 << 4);

#[repr(C)]
pub(super) struct UffdioApi {
    pub(crate) api: u64,
    pub(crate) features: u64,
    pub(crate) ioctls: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct UffdioRange {
    pub(crate) start: u64,
    pub(crate) len: u64,
}

#[repr(C)]
pub(super) struct UffdioRegister {
    pub(crate) range: UffdioRange,
    pub(crate) mode: u64,
    pub(crate) ioctls: u64,
}

#[repr(C)]
pub(super) struct UffdioCopy {
    pub(crate) dst: u64,
    pub(crate) src: u64,
    pub(crate) len: u64,
    pub(crate) mode: u64,
    pub(crate) copy: i64,
}

#[repr(C)]
pub(super) struct UffdioMove {
    pub(crate) dst: u64,
    pub(crate) src: u64,
    pub(crate) len: u64,
    pub(crate) mode: u64,
    pub(crate) moved: i64,
}

#[repr(C)]
pub(super) struct UffdioZeropage {
    pub(crate) range: UffdioRange,
    pub(crate) mode: u64,
    pub(crate) zeropage: i64,
}

/// uffd_msg: the union's words. Page fault: (flags, address, ptid); remap: (from, to,
/// len); remove/unmap: (start, end, -).
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct UffdMsg {
    pub(crate) event: u8,
    pub(crate) _r1: u8,
    pub(crate) _r2: u16,
    pub(crate) _r3: u32,
    pub(crate) a0: u64,
    pub(crate) a1: u64,
    pub(crate) a2: u64,
}

pub(super) unsafe fn uffd_ioctl(fd: c_int, req: c_ulong, arg: *mut c_void) -> i64 {
    libc::syscall(libc::SYS_ioctl, fd, req, arg)
}

/// A userfaultfd that also handles faults taken inside system calls (no
/// UFFD_USER_MODE_ONLY: with it, a write(2) into a protected page would fail). Asks for
/// UFFDIO_MOVE (`with_move`, Linux 6.8) and for exact fault addresses (the records the agent
/// writes are the detector's only source when perf is unavailable, and a page-aligned
/// address would put every fault in the page's first block), and does without each on a
/// kernel that lacks it.
pub(super) unsafe fn open_uffd(with_move: bool) -> Result<c_int, i32> {
    // No allocation: this may run in a helper thread.
    let all = [
        UFFD_FEATURE_MOVE | UFFD_FEATURE_EXACT_ADDRESS,
        UFFD_FEATURE_EXACT_ADDRESS,
        0,
    ];
    let wanted = if with_move { &all[..] } else { &all[1..] };
    let mut last = 0;
    for &extra in wanted {
        match open_with(extra) {
            Ok(fd) => {
                UFFD_CAN_MOVE.store(extra & UFFD_FEATURE_MOVE != 0, Ordering::Relaxed);
                return Ok(fd);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// A userfaultfd with the features the agent always needs plus `extra`; the kernel's errno
/// when it refuses them (a feature it does not know: EINVAL).
unsafe fn open_with(extra: u64) -> Result<c_int, i32> {
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
            | extra,
        ioctls: 0,
    };
    if uffd_ioctl(fd, UFFDIO_API, &mut api as *mut _ as *mut c_void) != 0 {
        let e = errno();
        libc::close(fd);
        return Err(e);
    }
    Ok(fd)
}
