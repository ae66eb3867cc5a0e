//! A hardware watchpoint on 8 bytes of a thread's memory (perf_event_open,
//! PERF_TYPE_BREAKPOINT): whether that thread read or wrote them while it was set. The page
//! edges ([`crate::edges`]) ask it which of two threads that fault on one page touch each
//! other's data.
//!
//! A hit is a debug trap in the target thread, which the kernel handles (the program sees
//! nothing): 12-19 us each in this VM (`perf stat -e mem:ADDR/8:rw`, 2026-11-27). So a
//! watchpoint disarms itself at its first hit (sample period 1 with PERF_EVENT_IOC_REFRESH
//! 1): a probe costs its target a few traps however hot the address is. x86 has four debug
//! registers a thread; an open that finds them taken (a debugger's watchpoints) fails with
//! ENOSPC, and nothing is forced.

use perf_event_open_sys as sys;
use std::io;
use sys::bindings as b;

/// One armed watchpoint; closed on drop.
pub struct Watchpoint {
    fd: i32,
}

impl Watchpoint {
    /// Watches reads and writes of the 8 bytes at `addr` (rounded down to 8) by thread `tid`,
    /// in user space only.
    pub fn open(tid: u32, addr: u64) -> io::Result<Watchpoint> {
        // SAFETY: perf_event_attr is plain old data; all-zero is its documented default.
        let mut a: b::perf_event_attr = unsafe { std::mem::zeroed() };
        a.type_ = b::PERF_TYPE_BREAKPOINT;
        a.size = std::mem::size_of::<b::perf_event_attr>() as u32;
        a.bp_type = b::HW_BREAKPOINT_RW;
        a.__bindgen_anon_3.bp_addr = addr & !7;
        a.__bindgen_anon_4.bp_len = b::HW_BREAKPOINT_LEN_8 as u64;
        a.__bindgen_anon_1.sample_period = 1;
        a.set_disabled(1);
        a.set_exclude_kernel(1);
        a.set_exclude_hv(1);
        // SAFETY: `a` is a valid, fully initialised attribute struct.
        let fd = unsafe {
            sys::perf_event_open(&mut a, tid as i32, -1, -1, b::PERF_FLAG_FD_CLOEXEC as _)
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let w = Watchpoint { fd };
        // Enables it, to disable itself after one overflow (one hit at period 1).
        // SAFETY: fd is the event opened above.
        if unsafe { sys::ioctls::REFRESH(fd, 1) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(w)
    }

    /// Whether the thread touched the bytes since the watchpoint was set.
    pub fn hit(&self) -> bool {
        let mut count = 0u64;
        // SAFETY: reads the event's 8-byte count (read_format 0) into `count`.
        let n = unsafe { libc::read(self.fd, (&mut count as *mut u64).cast(), 8) };
        n == 8 && count > 0
    }
}

impl Drop for Watchpoint {
    fn drop(&mut self) {
        // SAFETY: fd is ours and closed once.
        unsafe { libc::close(self.fd) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    /// A thread that reads `data[1]` in a loop, never `data[3]`.
    #[test]
    fn a_watchpoint_tells_the_address_a_thread_reads_from_its_neighbour() {
        let data: Arc<[AtomicU64; 4]> = Arc::new(Default::default());
        let stop = Arc::new(AtomicBool::new(false));
        let tid = Arc::new(AtomicU64::new(0));
        let (d, s, t) = (data.clone(), stop.clone(), tid.clone());
        let reader = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            t.store(unsafe { libc::gettid() } as u64, Ordering::Release);
            let mut sum = 0u64;
            while !s.load(Ordering::Relaxed) {
                sum = sum.wrapping_add(d[1].load(Ordering::Relaxed));
                std::hint::spin_loop();
            }
            sum
        });
        while tid.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        let tid = tid.load(Ordering::Acquire) as u32;
        let read = Watchpoint::open(tid, &data[1] as *const _ as u64);
        let other = Watchpoint::open(tid, &data[3] as *const _ as u64);
        let (read, other) = match (read, other) {
            (Ok(r), Ok(o)) => (r, o),
            (Err(e), _) | (_, Err(e)) => {
                stop.store(true, Ordering::Relaxed);
                reader.join().unwrap();
                // Only a kernel or VM without hardware breakpoints excuses a failure (the
                // edges then keep counting every page event); anything else is a bug here.
                let none = [libc::ENOENT, libc::ENODEV, libc::EOPNOTSUPP];
                assert!(none.contains(&e.raw_os_error().unwrap_or(0)), "{e}");
                eprintln!("no hardware watchpoints here ({e}): nothing to check");
                return;
            }
        };
        let t0 = std::time::Instant::now();
        while !read.hit() && t0.elapsed().as_secs() < 5 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap();
        assert!(read.hit(), "the address the thread reads was never hit");
        assert!(!other.hit(), "an address the thread never touches was hit");
    }
}
