//! The re-arm thread: the scan of /proc/self/maps, the index of present pages, the random
//! and focus picks, and taking pages out (shared: MADV_DONTNEED; private: into the vault).

use super::*;

/// The re-arm thread: every tick, spends the page budget.
pub(super) extern "C" fn rearm_main(arg: *mut c_void) -> *mut c_void {
    // SAFETY: see fault_main.
    unsafe {
        let st = &mut *(arg as *mut State);
        let view = helper_prologue(st);
        let mut period = st.interval_ms as u64 * 1_000_000;
        let started = monotonic_ns();
        let (mut last, mut last_scan, mut last_index, mut last_full) = (started, 0, 0, 0);
        let mut last_robust = 0;
        let mut indexed_touches = 0;
        loop {
            let ts = libc::timespec {
                tv_sec: (period / 1_000_000_000) as libc::time_t,
                tv_nsec: (period % 1_000_000_000) as libc::c_long,
            };
            libc::nanosleep(&ts, std::ptr::null_mut());
            let now = monotonic_ns();
            if st.threads_only && now - st.threads.checked_ns >= busy::CHECK_NS {
                let mut cpu = [(0u32, 0u64); busy::TRACKED];
                let n = busy::sample(st.task_dir, &mut cpu);
                st.threads.update(&cpu[..n], now);
            }
            // Threads-only and under two busy threads: nothing to re-arm, so no scan of the
            // maps and no index of present pages either (in an MPI rank those were most of
            // the agent's CPU: 0.05 s in a 4-s LAMMPS run of 4 ranks).
            // Dormant (the detector's word): the same, for every process.
            let idle = (st.threads_only && st.threads.busy < 2)
                || view.header().dormant.load(Ordering::Relaxed) != 0;
            // After the program changed its mappings; every 100 ms during the first second
            // (programs set up their memory then) and every second after; at every tick
            // during the first 100 ms while nothing is eligible yet. A scan whose maps text
            // is unchanged stops there, unless the program's mapping changes (UNMAP, REMAP,
            // REMOVE: a range may have been unmapped and mapped again, unregistered) or
            // INDEX_MAX_AGE_NS ask for the whole pass (registration retried, pages indexed).
            lock();
            let changed = st.changes != st.scanned_changes;
            unlock();
            let every = if now - started < 10 * SCAN_NS {
                SCAN_NS
            } else {
                10 * SCAN_NS
            };
            let touches = FIRST_TOUCHES.load(Ordering::Relaxed);
            let mut whole_pass = false;
            if !idle
                && (now - last_scan >= every
                    || changed
                    || (st.nregions == 0 && now - started < SCAN_NS))
            {
                last_scan = now;
                // Mappings waiting for huge pages are looked at again at every scan.
                let whole = changed || now - last_full >= INDEX_MAX_AGE_NS || st.thp.any_waiting();
                whole_pass = scan_maps(st, &view, whole);
                if whole_pass {
                    (last_full, last_index, indexed_touches) = (now, now, touches);
                }
            }
            // After the maps were read, so that a thread whose new stack the scan registered
            // is seen; also every SCAN_NS, as threads come and go without changing the maps
            // text (glibc reuses their stacks) and lock robust mutexes.
            if !idle && (whole_pass || now - last_robust >= SCAN_NS) {
                last_robust = now;
                robust::collect(st);
            }
            if !idle && touches != indexed_touches && now - last_index >= SCAN_NS {
                last_index = now;
                indexed_touches = touches;
                index_present(st);
            }
            view.header().ticks.fetch_add(1, Ordering::Relaxed);
            expire(st, now);
            // Pages the detector found apart leave the focus table; most ticks have none, and
            // then the fault thread's lock is not taken.
            if view.header().apart_told.load(Ordering::Relaxed) != st.apart_read {
                let mut apart_read = st.apart_read;
                lock();
                view.read_apart(&mut apart_read, |page| st.focus.apart(page, now));
                unlock();
                st.apart_read = apart_read;
                view.header()
                    .apart_heard
                    .store(apart_read, Ordering::Relaxed);
            }
            let dt = (now - last) as f64 / 1e9;
            last = now;
            // The floor is program-wide: the detector divides it among the live agents.
            let floor = match view.header().floor_share.load(Ordering::Relaxed) {
                0 => st.floor,
                share => share as f64,
            };
            // Shared pages are mapped by every process of the program: each agent counts its
            // part of them, so the program's budget counts them once.
            let live = view.header().live_agents.load(Ordering::Relaxed).max(1);
            let pages = (st.total_pages - st.shared_pages) as f64 + (st.shared_pages / live) as f64;
            let rate = match view.header().rate_ppm.load(Ordering::Relaxed) {
                0 => st.rate,
                ppm => ppm as f64 / 1e6,
            };
            let per_s = (rate * pages).max(floor);
            // Wake for about PAGES_PER_WAKE pages at a time, between the configured interval
            // and SCAN_NS. A wake-up costs more than its pages: on the 2-core VM (ring x2
            // threads, 500 pages/s) the re-arm thread used 83 ms of CPU per 5 s waking for 4
            // pages, 50 ms for 16 and 26 ms for 50. But long gaps sample oversubscribed
            // threads unevenly (only the ones running right after a wake fault): at 50 pages
            // master-worker x32 threads fell from r 0.92 to 0.85; at 16 it kept 0.92.
            let shortest = st.interval_ms as u64 * 1_000_000;
            period = ((PAGES_PER_WAKE * 1e9 / per_s) as u64).clamp(shortest, SCAN_NS.max(shortest));
            st.budget = (st.budget + per_s * dt).min(per_s); // at most one second's worth
            if view.header().paused.load(Ordering::Relaxed) != 0 || idle {
                st.budget = 0.0;
            } else {
                // Sooner when a focus page falls due before then (or a bisection step may
                // fault), though not under FOCUS_TICK_NS. Not while nothing is re-armed: a
                // page found shared stays due, and an idle rank would wake every 10 ms.
                lock();
                let focus_due = st.focus.next_due(now, FOCUS_TICK_NS);
                unlock();
                if let Some(due) = focus_due {
                    period = period.min(due.saturating_sub(now).max(FOCUS_TICK_NS.max(shortest)));
                }
            }
            let n = st.budget as u64;
            st.budget -= n as f64;
            // All of it at random among the mapped pages, as CDSM samples. Giving half to
            // pages seen in use lately (as before 2026-11-23) over-sampled the small blocks
            // every task touches (barriers, counters), whose events only say who came
            // first: at 32 threads master-worker fell to r 0.83-0.89 with it, 0.95 without,
            // and the 8-task patterns and the phase change did not suffer.
            rearm(st, &view, n);
            flush_shared(st, &view);
            view.header()
                .rearm_cpu_ns
                .store(thread_cpu_ns(), Ordering::Relaxed);
        }
    }
}

/// Puts back dropped pages nobody touched for a while, freeing their slots.
pub(super) unsafe fn expire(st: &mut State, now: u64) {
    lock();
    for i in 0..SAVED {
        let page = st.saved[i].addr;
        if page != 0 && now.saturating_sub(st.saved[i].since) > SAVED_MAX_NS {
            restore(st, i);
        }
    }
    huge::expire(st, now);
    unlock();
}

/// Re-reads /proc/self/maps and, when its text changed or `whole` asks, rebuilds the
/// candidate list (no allocation), registers private anonymous candidates with the
/// userfaultfd and indexes the present pages. Returns whether it did that whole pass.
pub(super) unsafe fn scan_maps(st: &mut State, view: &RingView, whole: bool) -> bool {
    lock();
    st.scanned_changes = st.changes;
    unlock();
    if st.maps < 0 {
        return false;
    }
    // From offset 0 every time: /proc seq files regenerate their text when read from the start.
    let len = read_proc(st.maps, &mut st.maps_buf);
    let private_ok = st.uffd >= 0 && !YIELDED.load(Ordering::Acquire);
    let text_hash = fnv1a(&st.maps_buf[..len]) ^ private_ok as u64;
    if text_hash == st.maps_hash && !whole {
        return false;
    }
    if text_hash != st.maps_hash {
        view.header().maps_changes.fetch_add(1, Ordering::Release);
    }
    st.maps_hash = text_hash;
    st.scans += 1;
    st.nregions = 0;
    st.total_pages = 0;
    st.shared_pages = 0;
    let mut classifier = maps::Classifier::default();
    let mut pos = 0;
    while pos < len && st.nregions < MAX_REGIONS {
        let line_end = st.maps_buf[pos..len]
            .iter()
            .position(|&c| c == b'\n')
            .map_or(len, |i| pos + i);
        let parsed = agent_abi::maps::parse_line(&st.maps_buf[pos..line_end]);
        pos = line_end + 1;
        let Some(m) = parsed else { continue };
        let (start, end) = (m.start, m.end);
        let usage = classifier.classify(&m, private_ok);
        let mine = st
            .excluded
            .iter()
            .any(|&(a, b)| a < end && start < b.max(a + 1));
        if usage == maps::Use::Never || mine {
            continue;
        }
        let s = usage == maps::Use::Shared;
        if !s {
            lock();
            let known = st.registered[..st.nregistered].contains(&(start, end));
            unlock();
            if !known && thp::before_register(st, start, end, st.scans) == thp::Settle::Wait {
                continue;
            }
            lock();
            let mut reg = UffdioRegister {
                range: UffdioRange {
                    start,
                    len: end - start,
                },
                mode: UFFDIO_REGISTER_MODE_MISSING,
                ioctls: 0,
            };
            let known = st.registered[..st.nregistered].contains(&(start, end));
            let room = known || st.nregistered < MAX_REGIONS;
            let ok = room
                && !YIELDED.load(Ordering::Acquire)
                && uffd_ioctl(st.uffd, UFFDIO_REGISTER, &mut reg as *mut _ as *mut c_void) == 0
                && reg.ioctls & IOCTLS_NEEDED == IOCTLS_NEEDED;
            if ok && !known {
                st.registered[st.nregistered] = (start, end);
                st.nregistered += 1;
            }
            unlock();
            if !ok {
                continue;
            }
        }
        st.regions[st.nregions] = Region {
            start,
            end,
            shared: s,
        };
        st.nregions += 1;
        st.total_pages += (end - start) / st.page;
        if s {
            st.shared_pages += (end - start) / st.page;
        }
    }
    st.thp.prune(st.scans);
    view.header()
        .candidate_pages
        .store(st.total_pages, Ordering::Relaxed);
    index_present(st);
    true
}

/// FNV-1a: tells one maps text from the next (a collision costs at most INDEX_MAX_AGE_NS of
/// a stale candidate list).
pub(super) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Builds the index of present pages (see PRESENT_RUNS).
pub(super) unsafe fn index_present(st: &mut State) {
    st.indexed = false;
    st.npresent_runs = 0;
    st.present_pages = 0;
    if st.pagemap < 0 || st.total_pages > INDEX_MAX_PAGES {
        return;
    }
    for k in 0..st.nregions {
        let r = st.regions[k];
        let mut page = r.start;
        let mut in_run = false;
        while page < r.end {
            let Some(want) = read_pagemap(st, page, r.end) else {
                return;
            };
            for j in 0..want {
                if st.pagemap_buf[j] & PM_PRESENT == 0 {
                    in_run = false;
                    continue;
                }
                if !in_run {
                    if st.npresent_runs == PRESENT_RUNS {
                        return;
                    }
                    st.present_runs[st.npresent_runs] =
                        (page + j as u64 * st.page, st.present_pages, r.shared);
                    st.npresent_runs += 1;
                    in_run = true;
                }
                st.present_pages += 1;
            }
            page += want as u64 * st.page;
        }
    }
    st.indexed = true;
}

/// Reads the pagemap entries of [page, end) into st.pagemap_buf, PAGEMAP_CHUNK at most;
/// how many (None when pagemap cannot be read).
pub(super) unsafe fn read_pagemap(st: &mut State, page: u64, end: u64) -> Option<usize> {
    let want = (((end - page) / st.page) as usize).min(PAGEMAP_CHUNK);
    let off = (page / st.page * 8) as libc::off_t;
    let got = libc::pread(
        st.pagemap,
        st.pagemap_buf.as_mut_ptr() as *mut c_void,
        want * 8,
        off,
    );
    (got == (want * 8) as isize).then_some(want)
}

/// A uniformly random page of the present-page index: (address, shared).
pub(super) fn pick_indexed(st: &mut State) -> Option<(u64, bool)> {
    if st.present_pages == 0 {
        return None;
    }
    let k = next_rand(st) % st.present_pages;
    let runs = &st.present_runs[..st.npresent_runs];
    // The last run that starts at or before the k-th present page.
    let i = runs.partition_point(|&(_, before, _)| before <= k) - 1;
    let (first, before, shared) = runs[i];
    Some((first + (k - before) * st.page, shared))
}

pub(super) fn next_rand(st: &mut State) -> u64 {
    // xorshift64*
    let mut x = st.rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    st.rng = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

pub(super) unsafe fn rearm_page(st: &mut State, view: &RingView, addr: u64, shared: bool) {
    if shared {
        st.shared_batch[st.nshared_batch] = addr;
        st.nshared_batch += 1;
        if st.nshared_batch == SHARED_BATCH {
            flush_shared(st, view);
        }
    } else if UFFD_CAN_MOVE.load(Ordering::Relaxed) {
        drop_by_move(st, view, addr);
    } else {
        drop_by_remap(st, view, addr);
    }
}

/// Drops this tick's shared pages: MADV_DONTNEED drops the page-table entries only (the
/// data stays in the page cache / shmem), all in one process_madvise, so one TLB flush.
pub(super) unsafe fn flush_shared(st: &mut State, view: &RingView) {
    // Only pages that are still mapped shared or from a file (pagemap bits 63 and 61): the
    // candidate list is up to a second old, and MADV_DONTNEED on private memory the program
    // mapped at the same address since would discard its data.
    let mut n = 0;
    for k in 0..st.nshared_batch {
        let addr = st.shared_batch[k];
        let shared = PM_PRESENT | PM_FILE_OR_SHARED;
        if pagemap_entry(st, addr).is_some_and(|e| e & shared == shared) {
            st.shared_batch[n] = addr;
            n += 1;
        }
    }
    st.nshared_batch = 0;
    if n == 0 {
        return;
    }
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; SHARED_BATCH];
    for (v, &addr) in iov.iter_mut().zip(&st.shared_batch[..n]) {
        *v = libc::iovec {
            iov_base: addr as *mut c_void,
            iov_len: st.page as usize,
        };
    }
    let all = (n as u64 * st.page) as isize;
    let batched = st.pidfd >= 0
        && libc::syscall(
            libc::SYS_process_madvise,
            st.pidfd,
            iov.as_ptr(),
            n,
            libc::MADV_DONTNEED,
            0,
        ) as isize
            == all;
    if !batched && st.pidfd >= 0 && errno() == libc::EINVAL {
        // Before Linux 6.13 process_madvise refuses MADV_DONTNEED: page by page from now on.
        libc::close(st.pidfd);
        st.pidfd = -1;
    }
    for k in 0..n {
        let addr = st.shared_batch[k];
        // After a partial or failed batch, page by page (dropping a page twice is harmless).
        if batched || sys::madvise(addr as *mut c_void, st.page as usize, libc::MADV_DONTNEED) == 0
        {
            view.header().rearmed_shared.fetch_add(1, Ordering::Relaxed);
        } else {
            view.header().errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Drops a private page by moving it into the vault with mremap(MREMAP_DONTUNMAP) (Linux
/// 5.7), where the kernel has no UFFDIO_MOVE: the page-table entry moves in one step under
/// the kernel's mmap lock, and the program's mapping stays where it was with that page
/// missing, so the next access by any task (read or write, from user code or inside a
/// system call) faults to us and gets the contents back by copy (UFFDIO_COPY).
///
/// The mremap raises a REMAP event and waits until the fault thread has read it, so the
/// lock cannot be held across it, and the kernel does not refuse the move while a program
/// event is unread (as it refuses UFFDIO_MOVE): the agent asks first, under the lock
/// (registered_and_settled), and the drop is in flight in `st.pending` until the fault
/// thread handles its event and settles where the page belongs (vault::Pending). A move
/// that raised no event took the page from a mapping not registered with us (mapped at that
/// address after the question), where no fault would bring it back: it is moved back at
/// once.
pub(super) unsafe fn drop_by_remap(st: &mut State, view: &RingView, page: u64) {
    if st.page as usize != PAGE || st.uffd < 0 || !prepare_vault(st) {
        return;
    }
    lock();
    let slot = free_slot(st);
    let (Some(i), false) = (
        slot,
        !may_drop(st, page, page + PAGE as u64) || !registered_and_settled(st, page),
    ) else {
        unlock();
        return;
    };
    let dst = st.vault + (st.vault_next % VAULT_PAGES as u64) * PAGE as u64;
    st.vault_next += 1;
    st.saved[i].reserved = true;
    st.pending = Pending::start(page, dst, i);
    DROPPING.store(page, Ordering::SeqCst);
    unlock();
    let moved = sys::mremap(
        page as *mut c_void,
        PAGE,
        PAGE,
        libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED | MREMAP_DONTUNMAP,
        dst as *mut c_void,
    ) != libc::MAP_FAILED;
    // The event was read before mremap returned, and is handled under the lock: still
    // pending now means there was none.
    lock();
    let settled = !st.pending.active();
    st.pending = Pending::default();
    st.saved[i].reserved = false;
    unlock();
    if moved && !settled {
        sys::mremap(
            dst as *mut c_void,
            PAGE,
            PAGE,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED | MREMAP_DONTUNMAP,
            page as *mut c_void,
        );
    }
    if settled {
        // The moved page's mapping kept our registration: off again, so that freeing its
        // chunk raises no event and a read of it never waits on our own fault thread.
        let mut rg = UffdioRange {
            start: dst,
            len: PAGE as u64,
        };
        uffd_ioctl(st.uffd, UFFDIO_UNREGISTER, &mut rg as *mut _ as *mut c_void);
    }
    DROPPING.store(0, Ordering::SeqCst);
    // Faults at the page that waited for the drop to settle are retried by the fault thread
    // (it defers them); one that arrived as it settled is woken here.
    let mut rg = UffdioRange {
        start: page,
        len: PAGE as u64,
    };
    uffd_ioctl(st.uffd, UFFDIO_WAKE, &mut rg as *mut _ as *mut c_void);
    if moved && settled {
        view.header()
            .rearmed_private
            .fetch_add(1, Ordering::Relaxed);
    } else {
        view.header().errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// The check the kernel makes before UFFDIO_MOVE, which mremap does not make: `page` is
/// mapped, in memory registered with us, and no mapping change of the program is unread.
/// A UFFDIO_ZEROPAGE of the page says so with EEXIST (EAGAIN: a change is unread; ENOENT:
/// not registered, a mapping made there since the last scan). It fills a missing page with
/// zeros, which is what a missing page the program did not discard holds; it is not dropped.
/// The gap left is from this call to the mremap's.
unsafe fn registered_and_settled(st: &State, page: u64) -> bool {
    zero_page_errno(st, page) == libc::EEXIST
}

/// Whether `page` is mapped now (pagemap bit 63). Re-arming an unmapped page does nothing,
/// so samples go to pages in use, as CDSM's walk of the present page-table entries does.
pub(super) unsafe fn present(st: &State, page: u64) -> bool {
    if st.pagemap < 0 {
        return true;
    }
    pagemap_entry(st, page).is_some_and(|e| e & PM_PRESENT != 0)
}

/// /proc/self/pagemap bits: the page is mapped; it is a file page or shared anonymous.
pub(super) const PM_PRESENT: u64 = 1 << 63;

pub(super) const PM_FILE_OR_SHARED: u64 = 1 << 61;

/// /proc/self/pagemap bit: the page is swapped out.
pub(super) const PM_SWAPPED: u64 = 1 << 62;

/// mremap flag (Linux 5.7): leave the old mapping in place, its pages missing.
const MREMAP_DONTUNMAP: c_int = 4;

/// The pagemap entry of `page` (None when it cannot be read).
pub(super) unsafe fn pagemap_entry(st: &State, page: u64) -> Option<u64> {
    let mut entry: u64 = 0;
    let off = (page / st.page * 8) as libc::off_t;
    let read = libc::pread(st.pagemap, &mut entry as *mut u64 as *mut c_void, 8, off);
    (read == 8).then_some(entry)
}

/// Drops `page` by moving it into the vault. The lock is held across the move: the fault
/// thread reads events only under the lock, so an event of the program about this page is
/// either handled already (the range is then in quarantine and skipped) or still unread,
/// and then the kernel refuses the move (EAGAIN). Either way the page moved is in a
/// mapping registered with us, whose next access faults to us.
pub(super) unsafe fn drop_by_move(st: &mut State, view: &RingView, page: u64) {
    if st.page as usize != PAGE || st.uffd < 0 || !prepare_vault(st) {
        return;
    }
    lock();
    let slot = free_slot(st);
    let (Some(i), false) = (slot, !may_drop(st, page, page + PAGE as u64)) else {
        unlock();
        return;
    };
    if !registered_now(st, page) {
        unlock();
        return;
    }
    let dst = st.vault + (st.vault_next % VAULT_PAGES as u64) * PAGE as u64;
    let mut mv = UffdioMove {
        dst,
        src: page,
        len: PAGE as u64,
        mode: UFFDIO_MOVE_MODE_DONTWAKE,
        moved: 0,
    };
    // EBUSY for a page shared with a forked child or pinned, ENOENT for one unmapped since
    // the index was built: left where it is, as on any error.
    if uffd_ioctl(st.uffd, UFFDIO_MOVE, &mut mv as *mut _ as *mut c_void) == 0 {
        st.saved[i].addr = page;
        st.saved[i].arrived = 0;
        st.saved[i].orphan = false;
        st.saved[i].since = monotonic_ns();
        st.saved[i].vault_at = dst;
        view.header()
            .rearmed_private
            .fetch_add(1, Ordering::Relaxed);
    }
    // After a failure the vault page may not be clean: skipped until its chunk is freed.
    st.vault_next += 1;
    unlock();
}

/// Re-arms `n` random eligible pages that are mapped: from the present-page index, or
/// (without one) by drawing candidate pages until one is mapped (up to 32 draws each).
pub(super) unsafe fn rearm(st: &mut State, view: &RingView, n: u64) {
    if st.total_pages == 0 || super::LOCKED.load(Ordering::Acquire) {
        return;
    }
    // Up to half to the focus table (see the focus module), the rest uniform: with three
    // quarters the heap workloads' threads lost the uniform samples that pair readers with
    // owners (bench/detect: ring x8 r 0.86, master-worker x8 0.89; 0.985, 0.927 with half).
    // While it searches for block edges (sharing is rare, so those uniform samples find
    // little), three quarters. A share of a tick's page or two is a fraction: it is carried
    // to the next tick, and dropped when the table had nothing due (credit is no backlog).
    lock();
    let share = if st.focus.searching() { 0.75 } else { 0.5 };
    unlock();
    st.focus_credit += n as f64 * share;
    let offered = (st.focus_credit as u64).min(n);
    let used = rearm_focus(st, view, offered);
    st.focus_credit = if used < offered {
        0.0
    } else {
        st.focus_credit - used as f64
    };
    let n = n - used;
    for _ in 0..n {
        // The index is up to INDEX_MAX_AGE_NS old: pages dropped since (ours, not yet
        // touched again) or discarded by the program are drawn again.
        for _ in 0..32 {
            let chosen = if st.indexed {
                pick_indexed(st)
            } else {
                pick_any(st)
            };
            let Some((addr, shared)) = chosen else { break };
            if present(st, addr) {
                // In a huge page: the whole of it, which keeps it huge (the huge module).
                if shared || !huge::rearm_window(st, view, addr) {
                    rearm_page(st, view, addr, shared);
                }
                break;
            }
        }
    }
}

/// Re-arms up to `most` pages of the focus table that are due; returns how many it tried.
/// Only pages still inside a private region of the last scan (as for the uniform sample).
pub(super) unsafe fn rearm_focus(st: &mut State, view: &RingView, most: u64) -> u64 {
    let mut due = [0u64; FOCUS_PER_TICK];
    let now = monotonic_ns();
    lock();
    let n = st
        .focus
        .take_due(now, &mut due[..(most as usize).min(FOCUS_PER_TICK)]);
    let h = view.header();
    h.focus_shared
        .store(st.focus.found_shared, Ordering::Relaxed);
    h.focus_rearms.store(st.focus.rearms, Ordering::Relaxed);
    unlock();
    for &page in &due[..n] {
        let private = st.regions[..st.nregions]
            .iter()
            .any(|r| !r.shared && r.start <= page && page < r.end);
        if !private || !present(st, page) {
            lock();
            st.focus.forget(page, page + PAGE as u64);
            unlock();
            continue;
        }
        let before = view.header().rearmed_private.load(Ordering::Relaxed);
        // In a huge page, where the question allows, the whole of it, as for a sample (the
        // huge module); else the page alone, which splits the huge page.
        lock();
        let whole = st.focus.may_take_huge_page(page);
        unlock();
        if !(whole && huge::rearm_window(st, view, page)) {
            rearm_page(st, view, page, false);
        }
        if view.header().rearmed_private.load(Ordering::Relaxed) == before {
            lock();
            st.focus.not_armed(page, now);
            unlock();
        }
    }
    n as u64
}

/// A uniformly random candidate page, present or not: (address, shared).
pub(super) fn pick_any(st: &mut State) -> Option<(u64, bool)> {
    let mut k = next_rand(st) % st.total_pages;
    for i in 0..st.nregions {
        let r = st.regions[i];
        let pages = (r.end - r.start) / st.page;
        if k < pages {
            return Some((r.start + k * st.page, r.shared));
        }
        k -= pages;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn indexed_picks_land_on_present_pages_in_proportion() {
        let mut st = zeroed_state();
        st.page = 4096;
        st.rng = 0x9e37_79b9_7f4a_7c15;
        // Two runs: 3 pages at 0x10000 (private), 1 page at 0x80000 (shared).
        st.present_runs[0] = (0x10_000, 0, false);
        st.present_runs[1] = (0x80_000, 3, true);
        st.npresent_runs = 2;
        st.present_pages = 4;
        let mut hits = std::collections::BTreeMap::new();
        for _ in 0..4000 {
            let (addr, shared) = pick_indexed(&mut st).unwrap();
            assert_eq!(shared, addr == 0x80_000, "{addr:#x}");
            *hits.entry(addr).or_insert(0) += 1;
        }
        assert_eq!(
            hits.keys().copied().collect::<Vec<_>>(),
            vec![0x10_000, 0x11_000, 0x12_000, 0x80_000]
        );
        assert!(hits.values().all(|&n| (800..1200).contains(&n)), "{hits:?}");
        st.present_pages = 0;
        assert_eq!(pick_indexed(&mut st), None);
    }
}
