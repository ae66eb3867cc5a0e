//! Adoption of file-backed private data: an object's `.data` (initialised static arrays,
//! Fortran BLOCK DATA, the part of `.bss` sharing its last file page) is a private mapping of
//! the file, which a userfaultfd cannot register (anonymous, shmem and hugetlb memory only).
//! At start, while the process has one thread, each such mapping is replaced by an
//! anonymous copy at the same address: same contents, same protection, and from then on
//! re-armed like the heap. Libraries loaded later (dlopen) and files the program maps
//! MAP_PRIVATE itself are not adopted: with other threads running, a write between the copy
//! and the swap would be lost.

use crate::maps;
use crate::sys;
use libc::{c_int, c_void};

/// Mappings adopted at most (an executable and its libraries have a few dozen).
const MAX_ADOPT: usize = 256;

/// Adopts every adoptable mapping listed in /proc/self/maps (`maps_fd`, read into `buf`);
/// returns the pages adopted. Does nothing unless the calling thread is the only one.
///
/// # Safety
/// Must run before the agent's helper threads exist; `maps_fd` is /proc/self/maps.
pub unsafe fn adopt_file_data(maps_fd: c_int, buf: &mut [u8]) -> u64 {
    if maps_fd < 0 || threads() != Some(1) {
        return 0;
    }
    let len = crate::read_proc(maps_fd, buf);
    let mut todo = [(0u64, 0u64); MAX_ADOPT];
    let mut n = 0;
    for line in buf[..len].split(|&c| c == b'\n') {
        match agent_abi::maps::parse_line(line) {
            Some(m) if n < MAX_ADOPT && maps::adoptable(&m) => {
                todo[n] = (m.start, m.end);
                n += 1;
            }
            _ => {}
        }
    }
    let page = libc::sysconf(libc::_SC_PAGESIZE) as u64;
    todo[..n]
        .iter()
        .filter(|&&(start, end)| replace_with_copy(start, (end - start) as usize))
        .map(|&(start, end)| (end - start) / page)
        .sum()
}

/// Copies [start, start + len) into fresh anonymous memory and moves that over the original
/// in one mremap. The copy goes through process_vm_readv, which reports a page it cannot
/// read (past the end of a truncated file) instead of raising SIGBUS; the original then
/// stays as it was.
unsafe fn replace_with_copy(start: u64, len: usize) -> bool {
    let tmp = sys::mmap(
        std::ptr::null_mut(),
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
    );
    if tmp == libc::MAP_FAILED {
        return false;
    }
    let local = libc::iovec {
        iov_base: tmp,
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: start as *mut c_void,
        iov_len: len,
    };
    let copied = libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0);
    let moved = copied == len as isize
        && sys::mremap(
            tmp,
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            start as *mut c_void,
        ) != libc::MAP_FAILED;
    if !moved {
        sys::munmap(tmp, len);
    }
    moved
}

/// The process's thread count (Threads: in /proc/self/status).
fn threads() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Threads:"))?;
    line["Threads:".len()..].trim().parse().ok()
}
