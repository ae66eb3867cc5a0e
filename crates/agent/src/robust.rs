//! Pages the kernel reads from a thread's memory when the thread ends by execve: its robust
//! futex list head (set_robust_list; glibc keeps it in the thread's descriptor, beside the
//! TID word the kernel may clear then). By then execve has ended every other thread, the
//! agent's helpers too, so a fault there waits for good: agent_torture's fork children hung
//! in execve (futex_exit_release reading the list head from a page their own agent had
//! taken out; crates/cli/tests/exec_child.c). Those pages are never taken out.
//!
//! The same for the robust mutexes a thread holds: when it ends (exit or execve) the kernel
//! walks its list to mark each one's owner dead, and does not wait for a fault then (exit)
//! or has no agent left to serve it (execve): the mutex stays locked by a dead thread, and
//! the next lock waits for good instead of answering EOWNERDEAD. The entries' pages (their
//! `next` word and their futex word) are kept too, as found at each collection (every
//! SCAN_NS), and by a thread that ends through glibc as it ends (the thread_end module:
//! `ending`); a mutex locked by a thread that ends otherwise within SCAN_NS is not covered.

use super::*;

/// Pages kept: two a thread (the head and the TID word may lie on either side of a page
/// boundary).
pub(super) const EXEC_PAGES: usize = 2048;
/// Bytes before the head that the kernel may touch at exec (glibc's TID word) and the size
/// of struct robust_list_head.
const BEFORE_HEAD: u64 = 32;
const HEAD_LEN: u64 = 24;

/// The pages to keep in place, in ascending order (a drop asks about its range by binary
/// search). They stay once found: a thread's stack (and descriptor) is reused by the next
/// thread glibc starts, at the same address.
#[derive(Clone, Copy)]
pub(super) struct ExecPages {
    pages: [u64; EXEC_PAGES],
    n: usize,
    /// More pages than fit: no private page is taken out until they fit again.
    full: bool,
}

/// Where found pages go: the kept list, or an ending thread's few.
trait Keep {
    /// Keeps one page (once).
    fn keep_page(&mut self, page: u64);

    /// Keeps the pages of a robust list head at `head` (0: the thread set none).
    fn add_head(&mut self, head: u64, page_size: u64) {
        if head != 0 {
            self.add_bytes(
                head.saturating_sub(BEFORE_HEAD),
                BEFORE_HEAD + HEAD_LEN,
                page_size,
            );
        }
    }

    /// Keeps the pages of a robust list entry at `entry` (a held mutex; 0: none): its `next`
    /// word, and its futex word `futex_offset` bytes away.
    fn add_entry(&mut self, entry: u64, futex_offset: i64, page_size: u64) {
        if entry != 0 {
            self.add_bytes(entry, 8, page_size);
            self.add_bytes(entry.wrapping_add_signed(futex_offset), 4, page_size);
        }
    }

    /// Keeps the pages of [addr, addr + len).
    fn add_bytes(&mut self, addr: u64, len: u64, page_size: u64) {
        let first = addr & !(page_size - 1);
        let last = addr.saturating_add(len - 1) & !(page_size - 1);
        self.keep_page(first);
        self.keep_page(last);
    }
}

impl Keep for ExecPages {
    fn keep_page(&mut self, page: u64) {
        let Err(at) = self.pages[..self.n].binary_search(&page) else {
            return;
        };
        if self.n == EXEC_PAGES {
            self.full = true;
            return;
        }
        self.pages.copy_within(at..self.n, at + 1);
        self.pages[at] = page;
        self.n += 1;
    }
}

impl ExecPages {
    /// Whether [start, end) holds a page to keep (or they did not all fit).
    pub(super) fn meets(&self, start: u64, end: u64) -> bool {
        let listed = &self.pages[..self.n];
        let at = listed.partition_point(|&p| p < start);
        self.full || listed.get(at).is_some_and(|&p| p < end)
    }

    fn holds(&self, page: u64) -> bool {
        self.pages[..self.n].binary_search(&page).is_ok()
    }
}

/// Adds the robust list heads of every thread of this process (st.task_dir) to
/// st.exec_pages, starting afresh when they do not fit, and puts back any of their pages
/// that is out (taken before its thread was seen). No allocation: runs in the re-arm thread.
pub(super) unsafe fn collect(st: &mut State) {
    add_every_head(st);
    if st.exec_pages.full {
        // Pages of threads long gone fill the list: only the living ones.
        st.exec_pages.n = 0;
        st.exec_pages.full = false;
        add_every_head(st);
    }
    lock();
    for i in 0..SAVED {
        if st.saved[i].addr != 0 && st.exec_pages.holds(st.saved[i].addr) {
            restore(st, i);
        }
    }
    for k in 0..st.exec_pages.n {
        if let Some(i) = st.huge.holding(st.exec_pages.pages[k]) {
            huge::restore_window(st, i);
        }
    }
    unlock();
}

unsafe fn add_every_head(st: &mut State) {
    let (pages, page_size) = (&mut st.exec_pages, st.page);
    busy::for_each_tid(st.task_dir, |tid| {
        let head = robust_head(tid);
        pages.add_head(head, page_size);
        add_held(pages, head, page_size);
    });
}

/// Robust list entries followed at most, a thread.
const HELD_MAX: usize = 64;

/// The pages of one ending thread: its head (two) and two for each entry followed.
const FEW: usize = 2 + 2 * 2 * (HELD_MAX + 1);
struct Few {
    pages: [u64; FEW],
    n: usize,
}

impl Keep for Few {
    fn keep_page(&mut self, page: u64) {
        if self.n < FEW && !self.pages[..self.n].contains(&page) {
            self.pages[self.n] = page;
            self.n += 1;
        }
    }
}

/// The calling thread ends (thread_end's destructor; the exit system call follows): the
/// pages of its robust list head and of the robust mutexes it holds are kept from now on
/// (st.ending, which drops ask about under the lock), and any of them out is put back.
/// Read before the lock: reading a page that is out waits for the fault thread, which
/// needs the lock. `ending` starts afresh when full: its threads ended long since. A put back
/// that must wait for a mapping change is tried again, the lock let go in between (the
/// fault thread takes it to read the change), up to PUT_BACK_TRIES times.
pub(super) unsafe fn keep_ending_thread(st: *mut State) {
    let page_size = (*st).page;
    let mut few = Few {
        pages: [0; FEW],
        n: 0,
    };
    let head = robust_head(0);
    few.add_head(head, page_size);
    add_held(&mut few, head, page_size);
    let few = &few.pages[..few.n];
    lock();
    let st = &mut *st;
    if st.ending.n + few.len() > EXEC_PAGES {
        st.ending.n = 0;
    }
    for &page in few {
        st.ending.keep_page(page);
    }
    for _ in 0..PUT_BACK_TRIES {
        let mut all_back = true;
        for i in 0..SAVED {
            if st.saved[i].addr != 0 && few.contains(&st.saved[i].addr) {
                all_back &= restore(st, i);
            }
        }
        for &page in few {
            if let Some(i) = st.huge.holding(page) {
                all_back &= huge::restore_window(st, i);
            }
        }
        unlock();
        if all_back {
            return;
        }
        libc::sched_yield();
        lock();
    }
    unlock();
}

/// See keep_ending_thread: a mapping change is read within microseconds, unless the fault
/// thread is not running; then the thread ends without waiting longer.
const PUT_BACK_TRIES: usize = 10_000;

/// Keeps the pages of the robust mutexes on the list at `head` (struct robust_list_head:
/// next, futex_offset, list_op_pending). The list belongs to a running thread and changes
/// under us: read with process_vm_readv, which fails instead of faulting on an address no
/// longer mapped (a wrong page kept costs nothing but that page's samples). An entry's
/// pages are kept before it is read: a page out is then put back by collect.
unsafe fn add_held(pages: &mut impl Keep, head: u64, page_size: u64) {
    let mut words = [0u64; 3];
    if head == 0 || !read_own(head, &mut words) {
        return;
    }
    let (mut entry, futex_offset, pending) = (words[0], words[1] as i64, words[2]);
    pages.add_entry(pending & !1, futex_offset, page_size);
    for _ in 0..HELD_MAX {
        // Bit 0 of a link marks a priority-inheritance mutex.
        entry &= !1;
        if entry == head || entry == 0 {
            return;
        }
        pages.add_entry(entry, futex_offset, page_size);
        let mut next = [0u64; 1];
        if !read_own(entry, &mut next) {
            return;
        }
        entry = next[0];
    }
}

/// Reads `out.len()` words of this process at `addr`; false when they are not all mapped.
unsafe fn read_own(addr: u64, out: &mut [u64]) -> bool {
    let len = std::mem::size_of_val(out);
    let local = libc::iovec {
        iov_base: out.as_mut_ptr() as *mut c_void,
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut c_void,
        iov_len: len,
    };
    libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) == len as isize
}

/// Thread `tid`'s robust list head (tid 0: the calling thread's; 0: none, or the kernel
/// would not say).
unsafe fn robust_head(tid: u32) -> u64 {
    let mut head: *mut c_void = std::ptr::null_mut();
    let mut len: libc::size_t = 0;
    let r = libc::syscall(
        libc::SYS_get_robust_list,
        tid as libc::c_long,
        &mut head as *mut *mut c_void,
        &mut len as *mut libc::size_t,
    );
    if r == 0 {
        head as u64
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_keeps_its_page_and_the_one_before_where_it_straddles() {
        let mut st = zeroed_state();
        let page = PAGE as u64;
        st.exec_pages.add_head(0x7000_0000 + 0x9e0, page);
        assert!(st.exec_pages.meets(0x7000_0000, 0x7000_1000));
        assert!(!st.exec_pages.meets(0x7000_1000, 0x7000_2000));
        // The TID word before a head at the start of a page is on the page before.
        st.exec_pages.add_head(0x7100_0008, page);
        assert!(st.exec_pages.meets(0x70ff_f000, 0x7100_0000));
        assert!(st.exec_pages.meets(0x7100_0000, 0x7100_1000));
        // Found again: kept once.
        st.exec_pages.add_head(0x7000_0000 + 0x9e0, page);
        assert_eq!(st.exec_pages.n, 3);
        assert!(!st.exec_pages.meets(0x7200_0000, 0x7300_0000));
        st.exec_pages.add_head(0, page);
        assert_eq!(st.exec_pages.n, 3);
        // Kept in order whatever the order found, for the binary search.
        st.exec_pages.add_head(0x6000_0000 + 0x100, page);
        let listed = &st.exec_pages.pages[..st.exec_pages.n];
        assert!(listed.windows(2).all(|w| w[0] < w[1]), "{listed:x?}");
        assert!(st.exec_pages.meets(0x5fff_f000, 0x6000_1000));
        assert!(st.exec_pages.holds(0x7100_0000) && !st.exec_pages.holds(0x7200_0000));
    }

    #[test]
    fn more_heads_than_fit_stop_every_private_drop() {
        let mut st = zeroed_state();
        let page = PAGE as u64;
        for k in 0..EXEC_PAGES as u64 + 1 {
            st.exec_pages
                .add_head(0x1000_0000 + k * 2 * page + 0x800, page);
        }
        assert!(st.exec_pages.full);
        assert!(st.exec_pages.meets(0x9000_0000, 0x9000_1000));
    }

    #[test]
    fn an_entry_keeps_its_link_and_its_futex_word() {
        let mut pages = zeroed_state().exec_pages;
        let page = PAGE as u64;
        // glibc's futex word lies before the link (a negative offset), here on the page before.
        pages.add_entry(0x7000_0010, -0x20, page);
        assert!(pages.holds(0x7000_0000) && pages.holds(0x6fff_f000));
        pages.add_entry(0, -0x20, page);
        assert_eq!(pages.n, 2);
    }

    /// A robust mutex alone on a page of its own (the caller unmaps it).
    unsafe fn robust_mutex_on_its_own_page() -> *mut libc::pthread_mutex_t {
        let m = libc::mmap(
            std::ptr::null_mut(),
            PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(m, libc::MAP_FAILED);
        let m = m as *mut libc::pthread_mutex_t;
        let mut a: libc::pthread_mutexattr_t = std::mem::zeroed();
        libc::pthread_mutexattr_init(&mut a);
        libc::pthread_mutexattr_setrobust(&mut a, libc::PTHREAD_MUTEX_ROBUST);
        libc::pthread_mutex_init(m, &a);
        m
    }

    #[test]
    fn the_robust_mutexes_a_thread_holds_are_found() {
        let mut st = zeroed_state();
        st.page = PAGE as u64;
        // SAFETY: a mutex of this test's own, locked and unlocked by this thread; our own
        // /proc/self/task, closed below.
        unsafe {
            let m = robust_mutex_on_its_own_page();
            st.task_dir = libc::open(
                c"/proc/self/task".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            );
            assert!(st.task_dir >= 0);
            let page = m as u64;
            collect(&mut st);
            assert!(!st.exec_pages.holds(page), "not held yet");
            libc::pthread_mutex_lock(m);
            collect(&mut st);
            libc::pthread_mutex_unlock(m);
            assert!(st.exec_pages.holds(page), "held: on this thread's list");
            libc::close(st.task_dir);
            libc::munmap(m as *mut c_void, PAGE);
        }
    }

    #[test]
    fn an_ending_thread_keeps_its_head_and_the_robust_mutexes_it_holds() {
        let mut st = zeroed_state();
        st.page = PAGE as u64;
        let st_addr = &mut *st as *mut State as usize;
        // SAFETY: a mutex of this test's own, locked by the thread that then "ends" (the
        // destructor's call) and never unlocked: the thread really ends holding it.
        unsafe {
            let m = robust_mutex_on_its_own_page();
            let m_addr = m as usize;
            let head = std::thread::spawn(move || {
                libc::pthread_mutex_lock(m_addr as *mut libc::pthread_mutex_t);
                keep_ending_thread(st_addr as *mut State);
                robust_head(0)
            })
            .join()
            .unwrap();
            assert!(st.ending.holds(m as u64), "the held mutex's page");
            let page = head & !(PAGE as u64 - 1);
            assert!(st.ending.meets(page, page + PAGE as u64), "the head's page");
            assert!(
                !st.exec_pages.meets(0, u64::MAX),
                "the collected list is not touched"
            );
            // Its owner died holding it.
            assert_eq!(libc::pthread_mutex_lock(m), libc::EOWNERDEAD);
            libc::munmap(m as *mut c_void, PAGE);
        }
    }

    #[test]
    fn this_threads_head_is_found() {
        let mut st = zeroed_state();
        st.page = PAGE as u64;
        // SAFETY: our own /proc/self/task, closed below.
        unsafe {
            st.task_dir = libc::open(
                c"/proc/self/task".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            );
            assert!(st.task_dir >= 0);
            let head = robust_head(libc::gettid() as u32);
            assert_ne!(head, 0, "glibc sets a robust list head for every thread");
            collect(&mut st);
            let page = head & !(PAGE as u64 - 1);
            assert!(st.exec_pages.meets(page, page + PAGE as u64));
            libc::close(st.task_dir);
        }
    }
}
