//! A test target with known communication: `pairs threads|processes N SECONDS [crash]`.
//! Task i shares one page with task (i + N/2) mod N (distant pairs); both write and read it.
//! Processes share an anonymous MAP_SHARED mapping created before fork. Prints a checksum
//! that depends only on N and the iteration count, never on timing.
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const PAGE: usize = 4096;

/// One task's work: `iters` rounds of writing its half of the pair page and reading the other.
fn work(base: *mut u8, n: usize, i: usize, iters: u64) -> u64 {
    let pair = i % (n / 2);
    let page = unsafe { base.add(pair * PAGE) } as *const AtomicU64;
    let mine = if i < n / 2 { 0 } else { 1 };
    let mut sum = 0u64;
    for k in 0..iters {
        for w in 0..(PAGE / 8 / 2) {
            // SAFETY: within the pair's page; words interleave between the two partners.
            let cell = unsafe { &*page.add(w * 2 + mine) };
            cell.store(k ^ w as u64, Ordering::Relaxed);
            let other = unsafe { &*page.add(w * 2 + 1 - mine) };
            // The value read is racy by design; only the access matters, not the data.
            std::hint::black_box(other.load(Ordering::Relaxed));
        }
        sum = sum.wrapping_add(k);
    }
    sum
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let mode = a.get(1).map(String::as_str).unwrap_or("threads");
    let n: usize = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(8);
    let secs: f64 = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let crash = a.get(4).is_some_and(|s| s == "crash");
    // Iterations are fixed by time at the start: the same count for every task.
    let iters = (secs * 20000.0) as u64;
    let len = n / 2 * PAGE;
    let flags = if mode == "processes" {
        libc::MAP_SHARED
    } else {
        libc::MAP_PRIVATE
    };
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    } as *mut u8;
    let t = Instant::now();
    let mut total = 0u64;
    if mode == "processes" {
        let mut kids = Vec::new();
        for i in 0..n {
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                let s = work(base, n, i, iters);
                unsafe { libc::_exit((s % 251) as i32) };
            }
            kids.push(pid);
        }
        for pid in kids {
            let mut st = 0;
            unsafe { libc::waitpid(pid, &mut st, 0) };
            total += libc::WEXITSTATUS(st) as u64;
        }
    } else {
        let b = base as usize;
        let hs: Vec<_> = (0..n)
            .map(|i| std::thread::spawn(move || work(b as *mut u8, n, i, iters) % 251))
            .collect();
        for h in hs {
            total += h.join().unwrap_or(0);
        }
    }
    if crash {
        std::thread::sleep(Duration::from_millis(50));
        unsafe { libc::abort() };
    }
    println!("checksum {total} in {:.2}s", t.elapsed().as_secs_f64());
}
