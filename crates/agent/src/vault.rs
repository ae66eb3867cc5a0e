//! Where dropped private pages wait: the saved-page slots (copies, or pages moved into the
//! vault with UFFDIO_MOVE), putting them back, and the program's own discards and remaps
//! that a drop must not race with.

use super::*;

#[derive(Clone, Copy)]
pub(super) struct Saved {
    /// Page address; 0 when the slot is free.
    pub(crate) addr: u64,
    pub(crate) since: u64,
    /// Page of our own MADV_DONTNEED still to be seen (0: none): the REMOVE event it raises is ours,
    /// not the program discarding the page (the event is read, and the madvise returns,
    /// before the fault thread gets to handle it).
    pub(crate) own_remove: u64,
    /// The vault page the page itself was moved to (UFFDIO_MOVE); 0: its contents were
    /// copied into `data`.
    pub(crate) vault_at: u64,
    pub(crate) data: [u8; PAGE],
}

/// Puts saved page `i` back (caller holds the lock). False when the kernel said EAGAIN
/// (the program is changing its mappings; an event is pending): the slot is kept and the
/// caller retries later, never spinning with the lock held.
pub(super) unsafe fn restore(st: &mut State, i: usize) -> bool {
    let src = match st.saved[i].vault_at {
        0 => st.saved[i].data.as_ptr() as u64,
        at => at,
    };
    // A copy, not a move back: moving would clear the vault's entry and flush the TLB.
    if !copy_back(st, st.saved[i].addr, src) && errno() == libc::EAGAIN {
        return false;
    }
    // Put back (the copy woke any thread waiting there), or EEXIST (already back), or the
    // range is gone (a waiter is woken by the fault handler): the slot is done. Its vault
    // page is freed with its chunk.
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
/// saved page; where the range leaves the mapping it falls back to the one page. False on
/// EAGAIN (retry).
pub(super) unsafe fn zero_fill(st: &State, page: u64) -> bool {
    let saved_ahead = st
        .saved
        .iter()
        .filter(|x| x.addr > page)
        .map(|x| x.addr)
        .min()
        .unwrap_or(u64::MAX);
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
            return true;
        }
        match errno() {
            libc::EAGAIN => return false,
            // Filled up to a page already there (the faulting one is filled, or was there).
            libc::EEXIST => return true,
            _ => {}
        }
    }
    true
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
        libc::madvise(lo as *mut c_void, VAULT_CHUNK * PAGE, libc::MADV_DONTNEED);
        st.vault_clean_end += VAULT_CHUNK as u64;
    }
    true
}

/// A free slot: no page, and no REMOVE event of ours still to come for it.
pub(super) fn free_slot(st: &State) -> Option<usize> {
    st.saved
        .iter()
        .position(|x| x.addr == 0 && x.own_remove == 0)
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

/// Whether `page` lies in a range the program discarded within the quarantine.
pub(super) fn recently_discarded(st: &State, page: u64) -> bool {
    let now = monotonic_ns();
    now < st.quarantine_all_until
        || st.discarded.iter().any(|&(a, b, t)| {
            a <= page && page < b && now.saturating_sub(t) < DISCARD_QUARANTINE_NS
        })
}

/// Sets up the vault for dropping pages by moving them (UFFDIO_MOVE, Linux 6.8): no copy
/// and no write-protect window. Without it, pages are saved by copy.
pub(super) unsafe fn open_vault(st: *mut State) {
    let vault = own_mapping(VAULT_PAGES * PAGE);
    if vault.is_null() {
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
        libc::munmap(vault, VAULT_PAGES * PAGE);
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
        assert!(!recently_discarded(&st, 0x1000));
        note_discard(&mut st, 0x10_000, 0x20_000);
        assert!(recently_discarded(&st, 0x10_000));
        assert!(recently_discarded(&st, 0x1f_fff));
        assert!(!recently_discarded(&st, 0x20_000), "end is exclusive");
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
        assert!(recently_discarded(&st, 0xdead_0000), "everything held");
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
        st.saved[1].own_remove = 0x8000; // its own REMOVE still to be seen: not free yet
        assert_eq!(free_slot(&st), Some(2));
        discard(&mut st, 0);
        assert_eq!(free_slot(&st), Some(0));
        for slot in st.saved.iter_mut() {
            slot.addr = 1;
        }
        assert_eq!(free_slot(&st), None);
    }
}
