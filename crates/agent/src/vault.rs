//! Where dropped private pages wait: the saved-page slots (pages moved into the vault with
//! UFFDIO_MOVE, or with mremap and its drop in flight in [`Pending`]), putting them back, and
//! the program's own discards and remaps that a drop must not race with.

use super::*;

#[derive(Clone, Copy)]
pub(super) struct Saved {
    /// Page address; 0 when the slot is free.
    pub(crate) addr: u64,
    pub(crate) since: u64,
    /// Held for a drop by mremap in flight (see [`Pending`]): not free though `addr` is 0.
    pub(crate) reserved: bool,
    /// The vault page the page itself was moved to.
    pub(crate) vault_at: u64,
    /// The number of the program's REMAP that carried the slot to `addr` (0: taken out
    /// there); see [`remap_slots`].
    pub(crate) arrived: u64,
    /// Left behind by its mapping, whose REMAP is still to come: another mapping holds
    /// `addr` now (see [`orphaned_by_unmap`]). Never put back there: a REMAP out of `addr`
    /// may carry it to its mapping again; else it is dropped when it expires.
    pub(crate) orphan: bool,
}

/// A drop by mremap in flight (rearm::drop_by_remap), from the move until the fault thread
/// handles the move's own REMAP event. The program's mapping events handled meanwhile may
/// have come before the move or after it: events queue in the order the threads get to
/// queue them after their changes, not in the order of the changes. So they are kept here
/// and settled when the move's own event comes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Pending {
    /// The page taken (0: no drop in flight).
    pub(crate) from: u64,
    /// The vault page it goes to, and the slot held for it.
    pub(crate) to: u64,
    pub(crate) slot: usize,
    /// Where the contents belong if the events came after the move: `from`, carried along by
    /// the program's remaps (0: the program discarded or unmapped it).
    pub(crate) home: u64,
    /// The program moved a mapping onto `from` meanwhile. Before the move, the page taken is
    /// that mapping's and belongs at `from`; after it, the page belongs at `home`. The move
    /// left a hole (a missing page) at exactly one of the two, which tells them apart.
    pub(crate) moved_onto: bool,
}

impl Pending {
    pub(super) fn start(from: u64, to: u64, slot: usize) -> Pending {
        Pending {
            from,
            to,
            slot,
            home: from,
            moved_onto: false,
        }
    }

    pub(super) fn active(&self) -> bool {
        self.from != 0
    }

    /// Whether a missing fault at `page` must wait until the drop is settled: its contents
    /// may be on their way to the vault.
    pub(super) fn holds(&self, page: u64) -> bool {
        self.active() && (page == self.from || page == self.home)
    }

    /// The program discarded or unmapped [start, end): in either order with the move, the
    /// contents are gone.
    pub(super) fn discarded(&mut self, start: u64, end: u64) {
        if start <= self.home && self.home < end {
            self.home = 0;
        }
    }

    /// The program moved [src, src + len) to dst.
    pub(super) fn remapped(&mut self, src: u64, dst: u64, len: u64) {
        if self.home != 0 && src <= self.home && self.home < src + len {
            self.home = self.home - src + dst;
        } else if dst <= self.from && self.from < dst + len {
            self.moved_onto = true;
        }
    }

    /// Where the page taken belongs once the move's own event is handled (0: nowhere, the
    /// program discarded it, or the two places cannot be told apart). `hole(addr)`: addr has
    /// no page now.
    pub(super) fn settle(&self, hole: impl Fn(u64) -> bool) -> u64 {
        if !self.moved_onto || self.home == self.from {
            return self.home;
        }
        match (self.home != 0 && hole(self.home), hole(self.from)) {
            (true, false) => self.home,
            (false, true) => self.from,
            _ => 0,
        }
    }
}

/// Puts saved page `i` back (caller holds the lock). False when it must wait for a change
/// of the program's mappings (an event unread, or read during a fork and not handled yet;
/// see put_back_waits): the slot is kept and the caller retries later, never spinning with
/// the lock held.
pub(super) unsafe fn restore(st: &mut State, i: usize) -> bool {
    // An event read during a fork and not handled yet: the slot may name the address its
    // page had before that change.
    if st.events_waiting.load(Ordering::Acquire) {
        return false;
    }
    if st.saved[i].orphan {
        // Its mapping's REMAP may be the change still unread: kept for it (before a fork,
        // at expiry, when its vault chunk is freed), else dropped.
        if change_unread(st, st.saved[i].addr) {
            return false;
        }
        discard(st, i);
        return true;
    }
    let (addr, src) = (st.saved[i].addr, st.saved[i].vault_at);
    // A copy, not a move back: moving would clear the vault's entry and flush the TLB. A
    // vault page with nothing in it (mremap moved a page the program had discarded, or never
    // touched) must not be read: it may still be registered with us, and this thread would
    // wait on its own fault. Its contents are zeros.
    let put = if UFFD_CAN_MOVE.load(Ordering::Relaxed) || in_memory(st, src) {
        copy_back(st, addr, src)
    } else {
        zero_page(st, addr)
    };
    if !put && put_back_waits(st, addr, errno()) {
        return false;
    }
    // Put back (the copy woke any thread waiting there), or EEXIST (already back), or the
    // range is gone for good (a waiter is woken by the fault handler): the slot is done. Its
    // vault page is freed with its chunk.
    st.saved[i].addr = 0;
    st.saved[i].vault_at = 0;
    true
}

/// First touch of `page` in registered memory. Each first touch costs
/// the program a round trip to the fault thread: about 50 us on the 2-core KVM guest, where
/// the helper waits on an idle vCPU that must be woken (a program writing 50,000 fresh pages
/// in order took 3.7-5.6 us a page under the agent, against 1.9 with perf alone). So a
/// first touch maps the zero page for more than its page: ZERO_AHEAD pages, and where a
/// stream goes on in order (a first touch where one of the last FILLS fills ended) each fill
/// doubles, up to FILL_MAX pages, as readahead does. The zero page takes no memory, and a
/// write to it is the program's own copy-on-write fault, which the kernel resolves in the
/// writing thread: its page comes from that thread's NUMA node, as a first touch's would (a
/// page of our own, UFFDIO_COPY, would come from the fault thread's). No fill reaches a
/// saved page; where the range leaves the mapping it falls back to the one page.
pub(super) unsafe fn zero_fill(st: &State, page: u64) -> ZeroFill {
    // Nor the page of a drop by mremap in flight, nor where it may belong (see Pending).
    let pending = [st.pending.from, st.pending.home];
    let saved_ahead = (st.saved.iter().map(|x| x.addr))
        .chain(pending)
        .filter(|&a| a > page)
        .min()
        .unwrap_or(u64::MAX)
        .min(st.huge.first_out_from(page + PAGE as u64));
    let stream = FILL
        .iter()
        .position(|f| f.end.load(Ordering::Relaxed) == page);
    let slot = &FILL[stream.unwrap_or_else(|| FILL_CURSOR.fetch_add(1, Ordering::Relaxed) % FILLS)];
    let (pages, next) = fill_size(stream.is_some(), slot.next.load(Ordering::Relaxed));
    let end = (page + (pages * PAGE) as u64).min(saved_ahead);
    for len in [end - page, PAGE as u64] {
        let mut z = UffdioZeropage {
            range: UffdioRange { start: page, len },
            mode: 0,
            zeropage: 0,
        };
        if uffd_ioctl(st.uffd, UFFDIO_ZEROPAGE, &mut z as *mut _ as *mut c_void) == 0 {
            slot.end.store(page + len, Ordering::Relaxed);
            slot.next.store(next, Ordering::Relaxed);
            return ZeroFill::Filled;
        }
        match errno() {
            // A part filled answers EAGAIN too (its thread is woken, a retry finds it there).
            libc::EAGAIN => return ZeroFill::Later,
            // Nothing filled: the faulting page is there. Another thread's fault on the same
            // page, read in the same batch, brought it back (common on pages two tasks
            // share), or a put back beat the fault's message.
            libc::EEXIST => return ZeroFill::AlreadyThere,
            _ => {}
        }
    }
    ZeroFill::AlreadyThere
}

/// What zero_fill did for a missing-page fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ZeroFill {
    /// Zero pages mapped from the faulting page on: a first touch.
    Filled,
    /// The page was there already (or the range left the mapping): only its thread to wake.
    AlreadyThere,
    /// A mapping change is unread (EAGAIN): retry after the next read.
    Later,
}

/// Pages a first touch fills (see zero_fill), and what the stream's next one in order gets:
/// `next` in order (doubling up to FILL_MAX), else ZERO_AHEAD.
fn fill_size(in_order: bool, next: usize) -> (usize, usize) {
    if in_order {
        (next, (next * 2).min(FILL_MAX))
    } else {
        (ZERO_AHEAD, (ZERO_AHEAD * 2).min(FILL_MAX))
    }
}

/// Whether `page` has contents: mapped, or swapped out (pagemap bits 63 and 62). Without
/// pagemap, assumed so.
pub(super) unsafe fn in_memory(st: &State, page: u64) -> bool {
    st.pagemap < 0 || pagemap_entry(st, page).is_some_and(|e| e & (PM_PRESENT | PM_SWAPPED) != 0)
}

/// UFFDIO_ZEROPAGE of the one page `page`; true when done (or a page is there already).
unsafe fn zero_page(st: &State, page: u64) -> bool {
    matches!(zero_page_errno(st, page), 0 | libc::EEXIST)
}

/// UFFDIO_ZEROPAGE of the one page `page`: 0, or the kernel's errno.
pub(super) unsafe fn zero_page_errno(st: &State, page: u64) -> i32 {
    let mut z = UffdioZeropage {
        range: UffdioRange {
            start: page,
            len: PAGE as u64,
        },
        mode: 0,
        zeropage: 0,
    };
    match uffd_ioctl(st.uffd, UFFDIO_ZEROPAGE, &mut z as *mut _ as *mut c_void) {
        0 => 0,
        _ => errno(),
    }
}

/// UFFDIO_COPY of one page from `src` to `dst`; true when done (or already there).
pub(super) unsafe fn copy_back(st: &State, dst: u64, src: u64) -> bool {
    let mut c = UffdioCopy {
        dst,
        src,
        len: PAGE as u64,
        mode: 0,
        copy: 0,
    };
    uffd_ioctl(st.uffd, UFFDIO_COPY, &mut c as *mut _ as *mut c_void) == 0
        || errno() == libc::EEXIST
}

/// Forgets slot `i`'s page (the program discarded or unmapped it). A vault page stays
/// until its chunk is freed: freeing raises a REMOVE event, which the fault thread (the
/// caller here) would have to read itself.
pub(super) fn discard(st: &mut State, i: usize) {
    st.saved[i].addr = 0;
    st.saved[i].vault_at = 0;
    st.saved[i].orphan = false;
}

/// Makes a clean vault page ready at the cursor (re-arm thread, lock not held across the
/// madvise: its REMOVE event is read by the fault thread). False when a page still saved in
/// the chunk to free could not be put back yet (EAGAIN): nothing is moved this time.
pub(super) unsafe fn prepare_vault(st: &mut State) -> bool {
    let v = VAULT_PAGES as u64;
    if st.vault_next == st.vault_clean_end {
        let lo = st.vault + (st.vault_clean_end % v) * PAGE as u64;
        let hi = lo + (VAULT_CHUNK * PAGE) as u64;
        lock();
        for i in 0..SAVED {
            let at = st.saved[i].vault_at;
            if st.saved[i].addr != 0 && lo <= at && at < hi && !restore(st, i) {
                unlock();
                return false;
            }
        }
        unlock();
        sys::madvise(lo as *mut c_void, VAULT_CHUNK * PAGE, libc::MADV_DONTNEED);
        st.vault_clean_end += VAULT_CHUNK as u64;
    }
    true
}

/// A free slot: no page, and not held for a drop in flight.
pub(super) fn free_slot(st: &State) -> Option<usize> {
    st.saved.iter().position(|x| x.addr == 0 && !x.reserved)
}

/// Remembers a range the program discarded (caller holds the lock).
pub(super) fn note_discard(st: &mut State, start: u64, end: u64) {
    let now = monotonic_ns();
    let (_, _, old) = st.discarded[st.discarded_next];
    if old != 0 && now.saturating_sub(old) < DISCARD_QUARANTINE_NS {
        st.quarantine_all_until = st.quarantine_all_until.max(old + DISCARD_QUARANTINE_NS);
    }
    st.discarded[st.discarded_next] = (start, end, now);
    st.discarded_next = (st.discarded_next + 1) % DISCARDED;
}

/// The program moved [src, src + len) to dst (its REMAP event, the `seq`th handled): the
/// slots there follow, but not all of them. Events queue in the order the threads get to
/// queue them after their changes, not in the order of the changes (see [`Pending`]): a
/// thread that mremaps X away may queue its REMAP only after another thread has mapped X
/// afresh and moved a mapping of its own onto it, whose REMAP, handled first, carried that
/// mapping's slots into X. Those slots belong at X and must stay (they followed the first
/// move, and the other thread's next read of them got zeros: crates/cli/tests/
/// mremap_race.c). A move carries a slot's hole with it, so a slot follows only where its
/// new address has no page (`hole`: false when it has one); and where two slots share an
/// address, the one that arrived there by the later REMAP stays.
pub(super) fn remap_slots(
    saved: &mut [Saved],
    src: u64,
    dst: u64,
    len: u64,
    seq: u64,
    hole: impl Fn(u64) -> bool,
) {
    let inside = |a: u64| a != 0 && src <= a && a < src + len;
    let mut follows = [false; SAVED];
    for (i, x) in saved.iter().enumerate() {
        // Only for slots in the range: the scan of all slots for a twin, and pagemap.
        let arrived_later_than_twin =
            || (saved.iter()).any(|y| y.addr == x.addr && y.arrived < x.arrived);
        follows[i] = inside(x.addr) && !arrived_later_than_twin() && hole(x.addr - src + dst);
    }
    for (x, _) in saved.iter_mut().zip(follows).filter(|(_, f)| *f) {
        x.addr = x.addr - src + dst;
        x.arrived = seq;
        x.orphan = false;
    }
}

/// Whether `page` has no contents, or `pagemap` (the fd, -1: none) cannot tell: a REMAP
/// then moves every slot in its range, as it did before remap_slots checked.
pub(super) fn hole_or_unknown(pagemap: c_int, page_size: u64, page: u64) -> bool {
    let mut entry: u64 = 0;
    let off = (page / page_size * 8) as libc::off_t;
    // SAFETY: reads 8 bytes into a local.
    let read = unsafe { libc::pread(pagemap, &mut entry as *mut u64 as *mut c_void, 8, off) };
    read != 8 || entry & (PM_PRESENT | PM_SWAPPED) == 0
}

/// Whether slot `i`, in a range the program unmapped, belongs to a mapping moved there
/// since, and must stay: it arrived by a REMAP and its address is a hole in memory
/// registered with us there now. UNMAP events queue late as REMAPs do (see remap_slots): the old range's UNMAP
/// of an mremap can come after another thread moved a mapping of its own into that range,
/// and the UNMAP that an mremap onto that range raises first for the destination can take
/// the old range's entry in `remapped` before it (take_remapped matches ranges only).
/// Found with crates/cli/tests/mremap_race.c: its moving threads read zeros. (A mapping made
/// there afresh is not registered with us yet, or its page there is no hole once touched.)
pub(super) unsafe fn moved_in_after_unmap(st: &State, i: usize) -> bool {
    let a = st.saved[i].addr;
    st.saved[i].arrived != 0 && hole_or_unknown(st.pagemap, st.page, a) && registered_here(st, a)
}

/// Whether slot `i`, in a range the program unmapped, was left behind by its own mapping
/// rather than unmapped with it: the range is registered memory again (a mapping moved in),
/// so the UNMAP was that move's unmapping of its destination, and the mapping the slot
/// belongs to moved away first, its REMAP still to come. An mremap with MREMAP_FIXED onto a
/// registered range raises that UNMAP first, and its thread may be the quicker to queue
/// (two such losses traced in mremap_race with the debug build). The slot becomes an orphan.
pub(super) unsafe fn orphaned_by_unmap(st: &State, i: usize) -> bool {
    registered_here(st, st.saved[i].addr)
}

/// A page of ours that nothing can read (PROT_NONE; never registered, as it is not
/// writable), the source of the copy probe: the kernel's copy from it fails at once, EFAULT,
/// and faults to no userfaultfd. It was address 0x1000, "below vm.mmap_min_addr"; but that
/// is 4096 on the 2-core VM and root may map page 0 too: MPICH's `traffic` under `huddle run
/// --source faults` had pages from 0 to 0x6000, registered with the agent, and a probe from
/// 0x1000 while that page was out faulted to the fault thread with the re-arm thread
/// holding the lock (hung in 3 of 6 runs). An address outside user space will not do: the
/// kernel checks the source's range first (EINVAL). Made at the first probe, kept for good
/// (a fork child has it too); where that mmap fails, such an address, so that every probe
/// says "not registered" and nothing is taken out.
static UNREADABLE: AtomicU64 = AtomicU64::new(0);

unsafe fn unreadable() -> u64 {
    let known = UNREADABLE.load(Ordering::Acquire);
    if known != 0 {
        return known;
    }
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    let m = sys::mmap(std::ptr::null_mut(), PAGE, libc::PROT_NONE, flags);
    if m == libc::MAP_FAILED {
        return 1 << 63;
    }
    match UNREADABLE.compare_exchange(0, m as u64, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => m as u64,
        Err(other) => {
            sys::munmap(m, PAGE);
            other
        }
    }
}

/// Whether `page` lies in memory registered with our userfaultfd now. Asked with a UFFDIO_COPY
/// from an address that cannot be read, which changes nothing: the kernel answers EFAULT once
/// it found the registered destination (a page there or not), ENOENT where there is none.
/// While a mapping change is unread it answers EAGAIN first; then: whether anything is
/// mapped there at all (mincore).
unsafe fn registered_here(st: &State, page: u64) -> bool {
    let mut resident = 0u8;
    match copy_probe(st, page) {
        0 | libc::EFAULT => true,
        libc::EAGAIN => libc::mincore(page as *mut c_void, PAGE, &mut resident) == 0,
        _ => false,
    }
}

/// Whether the page at `page` may be taken out: it lies in memory registered with our
/// userfaultfd now (the copy probe finds the registered destination: EFAULT, or EEXIST where
/// a huge page maps it; not ENOENT, nor EAGAIN while a change is unread). UFFDIO_MOVE wants
/// only its destination, the vault, registered: a page of memory that is not (mapped over a
/// registered range since the last scan, its event not yet seen) would move all the same,
/// and its next access would map zeros there instead of faulting to us. Asked under the
/// lock, right before the move: a change of the mapping after it stays unread until the
/// fault thread takes the lock, and the kernel refuses the move meanwhile (EAGAIN).
pub(super) unsafe fn registered_now(st: &State, page: u64) -> bool {
    matches!(copy_probe(st, page), 0 | libc::EFAULT | libc::EEXIST)
}

/// Whether a put back of the page at `addr` that failed with `errno` must be tried again
/// later, the slot kept: EAGAIN (a mapping change of the program is unread), and ENOENT
/// (nothing mapped at `addr`) while a change is unread. The kernel checks for changes in
/// flight when the call begins and looks the address up once it has the mmap lock: an
/// mremap that held the lock in between answers ENOENT, and its REMAP, unread, will carry
/// the slot on. Taken as done, that lost the page (agent_torture's moved mapping read a page
/// of zeros, about 1 run in 1,000; traced 2026-11-29: a fork's quiesce met it).
pub(super) unsafe fn put_back_waits(st: &State, addr: u64, errno: i32) -> bool {
    errno == libc::EAGAIN || (errno == libc::ENOENT && change_unread(st, addr))
}

/// Whether a mapping change of the program is unread: the kernel answers a copy with EAGAIN
/// until its event is read. Asked at `page`, and where nothing registered is there (ENOENT)
/// at memory that is: the vault where it is registered, which stays mapped, else the
/// mappings the last scan registered.
unsafe fn change_unread(st: &State, page: u64) -> bool {
    let vault_registered = UFFD_CAN_MOVE.load(Ordering::Relaxed) && st.vault != 0;
    let vault = vault_registered.then_some(st.vault);
    let registered = st.registered[..st.nregistered].iter().map(|r| r.0);
    for at in [page].into_iter().chain(vault).chain(registered) {
        match copy_probe(st, at) {
            libc::EAGAIN => return true,
            libc::ENOENT => continue,
            _ => return false,
        }
    }
    false
}

/// A UFFDIO_COPY to `page` from an address that cannot be read, which changes nothing: 0
/// (never seen), or the kernel's errno (see registered_here).
unsafe fn copy_probe(st: &State, page: u64) -> i32 {
    let mut c = UffdioCopy {
        dst: page,
        src: unreadable(),
        len: PAGE as u64,
        mode: UFFDIO_COPY_MODE_DONTWAKE,
        copy: 0,
    };
    match uffd_ioctl(st.uffd, UFFDIO_COPY, &mut c as *mut _ as *mut c_void) {
        0 => 0,
        _ => errno(),
    }
}

/// Whether [start, end) is the old range of a REMAP handled earlier (forgets it then).
pub(super) fn take_remapped(st: &mut State, start: u64, end: u64) -> bool {
    match st.remapped.iter().position(|&r| r == (start, end)) {
        Some(k) => {
            st.remapped[k] = (0, 0);
            true
        }
        None => false,
    }
}

/// Whether [start, end) may be taken out now (caller holds the lock): no fork under way,
/// no mapping change since the last scan of the maps or waiting to be handled, none of it
/// discarded by the program lately, none of it read by the kernel at execve or at a
/// thread's end (the robust module), and no page of it out already.
pub(super) fn may_drop(st: &State, start: u64, end: u64) -> bool {
    !held()
        && st.changes == st.scanned_changes
        && !st.events_waiting.load(Ordering::Acquire)
        && !recently_discarded(st, start, end)
        && !st.exec_pages.meets(start, end)
        && !st.ending.meets(start, end)
        && !(st.saved.iter()).any(|x| x.addr != 0 && start <= x.addr && x.addr < end)
}

/// Whether a range the program discarded within the quarantine meets [start, end).
pub(super) fn recently_discarded(st: &State, start: u64, end: u64) -> bool {
    let now = monotonic_ns();
    now < st.quarantine_all_until
        || st
            .discarded
            .iter()
            .any(|&(a, b, t)| a < end && start < b && now.saturating_sub(t) < DISCARD_QUARANTINE_NS)
}

/// Sets up the vault that dropped pages are moved into: registered (missing mode) with our
/// userfaultfd where `registered` (UFFDIO_MOVE wants its destination registered), else
/// plain memory that mremap moves pages onto.
pub(super) unsafe fn open_vault(st: *mut State, registered: bool) {
    let vault = own_mapping(VAULT_PAGES * PAGE);
    if vault.is_null() {
        return;
    }
    if !registered {
        (*st).vault = vault as u64;
        (*st).vault_clean_end = VAULT_PAGES as u64;
        return;
    }
    let mut reg = UffdioRegister {
        range: UffdioRange {
            start: vault as u64,
            len: (VAULT_PAGES * PAGE) as u64,
        },
        mode: UFFDIO_REGISTER_MODE_MISSING,
        ioctls: 0,
    };
    if uffd_ioctl(
        (*st).uffd,
        UFFDIO_REGISTER,
        &mut reg as *mut _ as *mut c_void,
    ) != 0
    {
        sys::munmap(vault, VAULT_PAGES * PAGE);
        return;
    }
    (*st).vault = vault as u64;
    (*st).vault_clean_end = VAULT_PAGES as u64;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fill_doubles_while_a_stream_goes_on_in_order() {
        // Out of order: ZERO_AHEAD; then in order: 32, 64, ... up to FILL_MAX.
        let (mut pages, mut next) = fill_size(false, 7);
        let mut seen = vec![pages];
        for _ in 0..7 {
            (pages, next) = fill_size(true, next);
            seen.push(pages);
        }
        assert_eq!(seen, [16, 32, 64, 128, 256, 512, 512, 512]);
        // Out of order again: back to the start.
        assert_eq!(fill_size(false, next), (ZERO_AHEAD, 2 * ZERO_AHEAD));
    }

    #[test]
    fn discarded_ranges_are_quarantined_and_overwriting_a_fresh_one_holds_everything() {
        let mut st = zeroed_state();
        assert!(!recently_discarded(&st, 0x1000, 0x1000 + 1));
        note_discard(&mut st, 0x10_000, 0x20_000);
        assert!(recently_discarded(&st, 0x10_000, 0x10_000 + 1));
        assert!(recently_discarded(&st, 0x1f_fff, 0x1f_fff + 1));
        assert!(
            !recently_discarded(&st, 0x20_000, 0x20_000 + 1),
            "end is exclusive"
        );
        assert_eq!(st.quarantine_all_until, 0);
        // DISCARDED more discards within the second: the first is overwritten while still in
        // quarantine, so nothing at all may be dropped until its quarantine ends.
        for k in 0..DISCARDED as u64 {
            note_discard(
                &mut st,
                0x100_000 + k * 0x1000,
                0x100_000 + (k + 1) * 0x1000,
            );
        }
        assert!(st.quarantine_all_until > monotonic_ns());
        assert!(
            recently_discarded(&st, 0xdead_0000, 0xdead_0000 + 1),
            "everything held"
        );
    }

    #[test]
    fn a_drop_in_flight_follows_the_programs_events() {
        let p = 0x10_000;
        let none = |_: u64| panic!("no hole test needed");
        // Nothing happened meanwhile: the page belongs where it was taken.
        let clean = Pending::start(p, 0x90_000, 3);
        assert!(clean.holds(p) && !clean.holds(p + 0x1000));
        assert_eq!(clean.settle(none), p);
        // Discarded (REMOVE or UNMAP over it), before or after the move: gone.
        let mut d = clean;
        d.discarded(p - 0x1000, p + 0x1000);
        assert_eq!(d.settle(none), 0);
        let mut d = clean;
        d.discarded(p + 0x1000, p + 0x2000);
        assert_eq!(d.settle(none), p, "a neighbour's discard is not ours");
        // Its mapping moved away: with nothing moved onto the old place, the move cannot have
        // come after (it would have found nothing and failed), so the page follows its mapping.
        let mut m = clean;
        m.remapped(p - 0x1000, 0x50_000, 0x4000);
        assert_eq!(m.home, 0x51_000);
        assert!(m.holds(0x51_000) && m.holds(p));
        assert_eq!(m.settle(none), 0x51_000);
        // Moved away and another mapping moved onto the old place: the hole tells.
        m.remapped(0x70_000, p - 0x1000, 0x4000);
        assert!(m.moved_onto);
        assert_eq!(
            m.settle(|a| a == 0x51_000),
            0x51_000,
            "moved after the drop"
        );
        assert_eq!(
            m.settle(|a| a == p),
            p,
            "moved before: the page taken is the newcomer's"
        );
        assert_eq!(m.settle(|_| true), 0, "two holes: cannot tell");
        assert_eq!(m.settle(|_| false), 0, "no hole: cannot tell");
        // Only moved onto (the old mapping unmapped first, which discards): gone either way.
        let mut o = clean;
        o.discarded(p, p + 0x1000);
        o.remapped(0x70_000, p, 0x1000);
        assert_eq!(
            o.settle(|a| a == p),
            p,
            "the newcomer's page, taken after it came"
        );
        assert_eq!(o.settle(|_| false), 0);
        assert!(!Pending::default().active() && !Pending::default().holds(0));
    }

    #[test]
    fn remapped_ranges_are_taken_once_and_slots_are_found_free() {
        let mut st = zeroed_state();
        st.remapped[3] = (0x5000, 0x9000);
        assert!(
            !take_remapped(&mut st, 0x5000, 0x8000),
            "only the exact range"
        );
        assert!(take_remapped(&mut st, 0x5000, 0x9000));
        assert!(
            !take_remapped(&mut st, 0x5000, 0x9000),
            "forgotten after the first take"
        );
        assert_eq!(free_slot(&st), Some(0));
        st.saved[0].addr = 0x7000;
        st.saved[1].reserved = true; // held for a drop in flight: not free yet
        assert_eq!(free_slot(&st), Some(2));
        discard(&mut st, 0);
        assert_eq!(free_slot(&st), Some(0));
        for slot in st.saved.iter_mut() {
            slot.addr = 1;
        }
        assert_eq!(free_slot(&st), None);
    }

    #[test]
    fn a_remap_handled_late_leaves_what_another_mapping_brought_into_its_old_range() {
        let mut st = zeroed_state();
        let (x, y, d, len) = (0x10_0000u64, 0x20_0000u64, 0x30_0000u64, 0x4_0000u64);
        let p = PAGE as u64;
        // Thread A's mapping at X has page 1 out; B's at Y has page 3 out. In the kernel A
        // moved X to D first, then B moved Y onto X; B's REMAP was handled first.
        st.saved[0].addr = x + p;
        st.saved[1].addr = y + 3 * p;
        remap_slots(&mut st.saved, y, x, len, 1, |_| true);
        assert_eq!((st.saved[1].addr, st.saved[1].arrived), (x + 3 * p, 1));
        // A's REMAP now: D + p is A's hole and follows; D + 3p holds A's page, so B's slot
        // belongs at X still.
        remap_slots(&mut st.saved, x, d, len, 2, |a| a != d + 3 * p);
        assert_eq!((st.saved[0].addr, st.saved[0].arrived), (d + p, 2));
        assert_eq!((st.saved[1].addr, st.saved[1].arrived), (x + 3 * p, 1));
        // Moved on by B in order: its hole went along, and so does the slot.
        remap_slots(&mut st.saved, x, y, len, 3, |_| true);
        assert_eq!(st.saved[1].addr, y + 3 * p);
        // Outside the range: untouched.
        assert_eq!(st.saved[0].addr, d + p);
    }

    #[test]
    fn of_two_slots_at_one_address_the_later_arrival_stays() {
        let mut st = zeroed_state();
        let (x, d, len) = (0x10_0000u64, 0x30_0000u64, 0x4_0000u64);
        // A's page and B's (carried there by REMAP 5) both out at X: both new addresses are
        // holes, so only the order of arrival tells which mapping each belongs to.
        st.saved[3].addr = x;
        st.saved[7].addr = x;
        st.saved[7].arrived = 5;
        remap_slots(&mut st.saved, x, d, len, 6, |_| true);
        assert_eq!((st.saved[3].addr, st.saved[3].arrived), (d, 6));
        assert_eq!((st.saved[7].addr, st.saved[7].arrived), (x, 5));
    }

    #[test]
    fn an_unmap_keeps_only_slots_that_arrived_in_memory_registered_there_now() {
        let mut st = zeroed_state();
        st.page = PAGE as u64;
        // SAFETY: plain system calls on memory of this test's own.
        unsafe {
            let Some(fd) = test_uffd(0) else { return };
            st.uffd = fd;
            st.pagemap = libc::open(c"/proc/self/pagemap".as_ptr(), libc::O_RDONLY);
            let prot = libc::PROT_READ | libc::PROT_WRITE;
            let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
            let m = libc::mmap(std::ptr::null_mut(), 3 * PAGE, prot, flags, -1, 0);
            assert_ne!(m, libc::MAP_FAILED);
            let p = m as u64;
            // The second page has contents; the first two are registered (a mapping moved
            // in), the third is not (a mapping made afresh).
            *(m as *mut u8).add(PAGE) = 1;
            let mut reg = UffdioRegister {
                range: UffdioRange {
                    start: p,
                    len: 2 * PAGE as u64,
                },
                mode: UFFDIO_REGISTER_MODE_MISSING,
                ioctls: 0,
            };
            assert_eq!(
                uffd_ioctl(st.uffd, UFFDIO_REGISTER, &mut reg as *mut _ as *mut c_void),
                0
            );
            let slots = [
                (p, 3),
                (p, 0),
                (p + PAGE as u64, 3),
                (p + 2 * PAGE as u64, 3),
            ];
            for (i, (addr, arrived)) in slots.into_iter().enumerate() {
                st.saved[i].addr = addr;
                st.saved[i].arrived = arrived;
            }
            assert!(
                moved_in_after_unmap(&st, 0),
                "arrived, a hole in registered memory"
            );
            assert!(
                !moved_in_after_unmap(&st, 1),
                "taken out there: the unmapped mapping's"
            );
            assert!(!moved_in_after_unmap(&st, 2), "a page there: not its home");
            assert!(
                !moved_in_after_unmap(&st, 3),
                "a mapping made afresh, not registered"
            );
            assert!(!in_memory(&st, p), "asking changed nothing");
            // Not kept, yet registered memory is there again: the slot's own mapping left
            // first (an orphan); where nothing registered is, the page went with its mapping.
            assert!(orphaned_by_unmap(&st, 2));
            assert!(!orphaned_by_unmap(&st, 3));
            libc::munmap(m, 3 * PAGE);
            assert!(!moved_in_after_unmap(&st, 0), "nothing mapped there now");
            libc::close(st.uffd);
            libc::close(st.pagemap);
        }
    }

    #[test]
    fn an_orphan_is_never_put_back_where_it_was_left_but_follows_its_mappings_remap() {
        let mut st = zeroed_state();
        let (x, d, len) = (0x10_0000u64, 0x30_0000u64, 0x4_0000u64);
        st.saved[0].addr = x;
        st.saved[0].orphan = true;
        st.saved[1].addr = x + PAGE as u64;
        st.saved[1].orphan = true;
        // Its mapping's REMAP comes: it follows into its hole and is a slot like any other.
        remap_slots(&mut st.saved, x, d, len, 1, |a| a == d);
        assert_eq!((st.saved[0].addr, st.saved[0].orphan), (d, false));
        // Expired where it was left, no change unread (no userfaultfd here): dropped.
        st.uffd = -1;
        // SAFETY: restore of an orphan asks the kernel only (EBADF here).
        assert!(unsafe { restore(&mut st, 1) });
        assert_eq!((st.saved[1].addr, st.saved[1].orphan), (0, false));
    }

    /// A userfaultfd with `features` (the test is skipped without one).
    unsafe fn test_uffd(features: u64) -> Option<c_int> {
        let fd = libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK) as c_int;
        if fd < 0 {
            eprintln!(
                "skipped: no userfaultfd ({})",
                std::io::Error::last_os_error()
            );
            return None;
        }
        let mut api = UffdioApi {
            api: UFFD_API,
            features,
            ioctls: 0,
        };
        if uffd_ioctl(fd, UFFDIO_API, &mut api as *mut _ as *mut c_void) != 0 {
            eprintln!(
                "skipped: no userfaultfd with features {features:#x} ({})",
                std::io::Error::last_os_error()
            );
            libc::close(fd);
            return None;
        }
        Some(fd)
    }

    /// A State as the agent starts with it, 4-KiB pages, no pagemap, and a userfaultfd of
    /// `features` (None: the test is skipped).
    unsafe fn state_with_uffd(features: u64) -> Option<(Box<State>, c_int)> {
        let fd = test_uffd(features)?;
        let mut st = zeroed_state();
        st.page = PAGE as u64;
        st.pagemap = -1;
        st.uffd = fd;
        Some((st, fd))
    }

    /// A private anonymous page of the test's own (its address).
    fn one_page() -> u64 {
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        // SAFETY: a new mapping, at an address the kernel picks.
        unsafe { libc::mmap(std::ptr::null_mut(), PAGE, prot, flags, -1, 0) as u64 }
    }

    /// Registers [start, start + len) in missing mode.
    unsafe fn register(fd: c_int, start: u64, len: u64) {
        let mut reg = UffdioRegister {
            range: UffdioRange { start, len },
            mode: UFFDIO_REGISTER_MODE_MISSING,
            ioctls: 0,
        };
        assert_eq!(
            uffd_ioctl(fd, UFFDIO_REGISTER, &mut reg as *mut _ as *mut c_void),
            0
        );
    }

    /// A thread that moves the page at `from` onto `to` (mremap); its mremap returns once
    /// its REMAP is read.
    fn move_page_in_a_thread(from: u64, to: u64) -> std::thread::JoinHandle<u64> {
        std::thread::spawn(move || {
            let fixed = libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED;
            // SAFETY: moves one page of the test's own onto another of its own.
            unsafe {
                libc::mremap(from as *mut c_void, PAGE, PAGE, fixed, to as *mut c_void) as u64
            }
        })
    }

    /// Waits (5 s at most) until the kernel says a mapping change is unread.
    unsafe fn wait_for_an_unread_change(st: &State, page: u64) {
        let asked_at = monotonic_ns();
        while !change_unread(st, page) && monotonic_ns() - asked_at < 5_000_000_000 {
            std::thread::yield_now();
        }
    }

    /// The next message of `fd` (5 s at most); event 0 when none came.
    unsafe fn read_message(fd: c_int) -> UffdMsg {
        let mut msg = std::mem::zeroed::<UffdMsg>();
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        libc::poll(&mut pfd, 1, 5000);
        let size = std::mem::size_of::<UffdMsg>();
        if libc::read(fd, &mut msg as *mut _ as *mut c_void, size) != size as isize {
            msg.event = 0;
        }
        msg
    }

    #[test]
    fn an_orphan_waits_while_a_mapping_change_is_unread() {
        // SAFETY: plain system calls on memory of this test's own; the thread's mremap
        // returns once its event is read below, before any assertion.
        unsafe {
            let Some((mut st, fd)) = state_with_uffd(UFFD_FEATURE_EVENT_REMAP) else {
                return;
            };
            let map = one_page;
            // The orphan's address, in the mapping that moved in; the mapping that moves
            // away now (its REMAP raised, unread until read below); where it goes.
            let (here, moving, to) = (map(), map(), map());
            register(fd, here, PAGE as u64);
            register(fd, moving, PAGE as u64);
            st.saved[0].addr = here;
            st.saved[0].orphan = true;
            let mover = move_page_in_a_thread(moving, to);
            wait_for_an_unread_change(&st, here);
            let kept = !restore(&mut st, 0) && st.saved[0].addr == here;
            let msg = read_message(fd);
            assert_eq!(mover.join().unwrap(), to);
            assert_eq!(msg.event, UFFD_EVENT_REMAP, "the move's event");
            assert!(kept, "kept while the REMAP was unread");
            // Read: the next try drops it.
            assert!(!change_unread(&st, here));
            assert!(restore(&mut st, 0));
            assert_eq!((st.saved[0].addr, st.saved[0].orphan), (0, false));
            libc::munmap(here as *mut c_void, PAGE);
            libc::munmap(to as *mut c_void, PAGE);
            libc::close(fd);
        }
    }

    /// The probe reads nothing the program may map: with page 0x1000 mapped, registered and
    /// missing (its contents out), a probe elsewhere answers at once, and right. With the old
    /// source, 0x1000, it waited for a fault thread (here: none) and the test failed.
    #[test]
    fn the_probe_never_reads_memory_a_program_may_map() {
        // SAFETY: page 0x1000 is mapped here only if free (MAP_FIXED_NOREPLACE) and unmapped
        // below; the probing thread is released (a zero page there) before any failure.
        unsafe {
            let Some((st, fd)) = state_with_uffd(0) else {
                return;
            };
            let low = libc::mmap(
                0x1000 as *mut c_void,
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            );
            if low as u64 != 0x1000 {
                eprintln!("skipped: page 0x1000 cannot be mapped here (vm.mmap_min_addr)");
                libc::close(fd);
                return;
            }
            register(fd, 0x1000, PAGE as u64);
            let ours = one_page();
            register(fd, ours, PAGE as u64);
            let st_addr = &*st as *const State as usize;
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(registered_now(&*(st_addr as *const State), ours));
            });
            let answer = rx.recv_timeout(std::time::Duration::from_secs(5));
            if answer.is_err() {
                let mut z = UffdioZeropage {
                    range: UffdioRange {
                        start: 0x1000,
                        len: PAGE as u64,
                    },
                    mode: 0,
                    zeropage: 0,
                };
                uffd_ioctl(fd, UFFDIO_ZEROPAGE, &mut z as *mut _ as *mut c_void);
                let _ = rx.recv_timeout(std::time::Duration::from_secs(5));
            }
            assert_eq!(answer, Ok(true), "the probe waited on page 0x1000");
            libc::munmap(0x1000 as *mut c_void, PAGE);
            libc::munmap(ours as *mut c_void, PAGE);
            libc::close(fd);
        }
    }

    /// A page of memory not registered with us is never taken out: UFFDIO_MOVE would move it
    /// all the same (only the vault, its destination, must be registered), and its next
    /// access would map zeros. A page of registered memory is, and goes back intact.
    #[test]
    fn only_pages_of_registered_memory_are_taken_out() {
        // SAFETY: system calls on memory of this test's own; the registered page is read only
        // once mincore says it is back (a missing one would block the read on our uffd).
        unsafe {
            let Some((mut st, fd)) = state_with_uffd(UFFD_FEATURE_MOVE) else {
                return;
            };
            open_vault(&mut *st, true);
            assert_ne!(st.vault, 0, "the vault is mapped and registered");
            let ring = own_mapping(ring::file_size());
            assert!(!ring.is_null());
            let view = RingView::new(ring as *mut u8);
            let (alone, ours) = (one_page(), one_page());
            *(alone as *mut u64) = 7;
            *(ours as *mut u64) = 9;
            register(fd, ours, PAGE as u64);
            assert!(!registered_now(&st, alone));
            assert!(registered_now(&st, ours));
            drop_by_move(&mut st, &view, alone);
            assert!(st.saved.iter().all(|x| x.addr != alone), "not taken out");
            assert_eq!(*(alone as *const u64), 7);
            drop_by_move(&mut st, &view, ours);
            let i = st
                .saved
                .iter()
                .position(|x| x.addr == ours)
                .expect("taken out");
            assert!(restore(&mut st, i), "put back");
            let mut resident = 0u8;
            assert_eq!(libc::mincore(ours as *mut c_void, PAGE, &mut resident), 0);
            assert_eq!(resident & 1, 1, "back in memory");
            assert_eq!(*(ours as *const u64), 9);
            libc::munmap(alone as *mut c_void, PAGE);
            libc::munmap(ours as *mut c_void, PAGE);
            libc::munmap(ring, ring::file_size());
            libc::munmap(st.vault as *mut c_void, VAULT_PAGES * PAGE);
            libc::close(fd);
        }
    }

    #[test]
    fn nothing_is_put_back_while_an_event_read_during_a_fork_waits() {
        let mut st = zeroed_state();
        st.page = PAGE as u64;
        st.pagemap = -1;
        st.uffd = -1;
        st.saved[0].addr = 0x7000_0000_0000;
        st.saved[0].vault_at = 0x7100_0000_0000;
        st.events_waiting.store(true, Ordering::Release);
        // SAFETY: no page is touched: the first call returns before any system call, the
        // second meets EBADF (no userfaultfd here), which ends the slot.
        unsafe {
            assert!(
                !restore(&mut st, 0),
                "put back by an address the event may have changed"
            );
            assert_eq!(st.saved[0].addr, 0x7000_0000_0000, "the slot is kept");
            st.events_waiting.store(false, Ordering::Release);
            assert!(restore(&mut st, 0));
        }
        assert_eq!(st.saved[0].addr, 0);
    }

    #[test]
    fn a_page_whose_mapping_moved_away_waits_for_the_remap_and_goes_back_there() {
        // SAFETY: plain system calls on memory of this test's own; the thread's mremap
        // returns once its event is read below.
        unsafe {
            let Some((mut st, fd)) = state_with_uffd(UFFD_FEATURE_EVENT_REMAP) else {
                return;
            };
            let map = one_page;
            // A mapping the last scan registered; the page that is out (its mapping moves
            // away now, its REMAP unread until read below); where it goes; its saved copy.
            let (elsewhere, moving, to, saved) = (map(), map(), map(), map());
            register(fd, elsewhere, PAGE as u64);
            register(fd, moving, PAGE as u64);
            st.registered[0] = (elsewhere, elsewhere + PAGE as u64);
            st.nregistered = 1;
            *(saved as *mut u64) = 0x5eed;
            st.saved[0].addr = moving;
            st.saved[0].vault_at = saved;
            let mover = move_page_in_a_thread(moving, to);
            wait_for_an_unread_change(&st, moving);
            let kept = !restore(&mut st, 0) && st.saved[0].addr == moving;
            // What the kernel answers a copy that checked for changes before the move and
            // looked the address up after it.
            let waits_on_enoent = put_back_waits(&st, moving, libc::ENOENT);
            let msg = read_message(fd);
            assert_eq!(mover.join().unwrap(), to);
            assert_eq!(msg.event, UFFD_EVENT_REMAP, "the move's event");
            assert!(kept, "kept while the REMAP was unread");
            assert!(waits_on_enoent, "ENOENT while the REMAP was unread: kept");
            assert!(
                !put_back_waits(&st, moving, libc::ENOENT),
                "read: really gone"
            );
            // The REMAP handled as the fault thread does: the slot follows, and goes back
            // at the mapping's new address.
            remap_slots(&mut st.saved, msg.a0, msg.a1, msg.a2, 1, |_| true);
            assert_eq!(st.saved[0].addr, to);
            assert!(restore(&mut st, 0));
            assert_eq!(st.saved[0].addr, 0);
            assert_eq!(
                *(to as *const u64),
                0x5eed,
                "the page's contents at the new address"
            );
            for a in [elsewhere, to, saved] {
                libc::munmap(a as *mut c_void, PAGE);
            }
            libc::close(fd);
        }
    }

    #[test]
    fn only_a_fill_of_a_missing_page_is_a_first_touch() {
        // SAFETY: plain system calls on memory of this test's own, registered with a
        // userfaultfd of its own; nothing touches the pages before they are filled.
        unsafe {
            let Some((st, fd)) = state_with_uffd(0) else {
                return;
            };
            let prot = libc::PROT_READ | libc::PROT_WRITE;
            let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
            let len = 4 * PAGE;
            let base = libc::mmap(std::ptr::null_mut(), len, prot, flags, -1, 0) as u64;
            register(fd, base, len as u64);
            // Missing: filled (ZERO_AHEAD pages would leave the mapping: the one page).
            assert_eq!(zero_fill(&st, base), ZeroFill::Filled);
            assert_eq!(*(base as *const u64), 0);
            // A second fault's message on the same page, read after the first was served
            // (two threads faulting together): there already, not a first touch.
            assert_eq!(zero_fill(&st, base), ZeroFill::AlreadyThere);
            libc::munmap(base as *mut c_void, len);
            libc::close(fd);
        }
    }

    #[test]
    fn without_pagemap_every_slot_follows_as_before() {
        assert!(hole_or_unknown(-1, PAGE as u64, 0x1000));
    }
}
