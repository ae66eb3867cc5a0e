//! Transparent huge pages re-armed whole. Taking one 4 KiB page out of a huge page splits
//! it for good (the kernel maps the other 511 with a page table from then on), so steady
//! re-arming left a program that relies on huge pages with none within seconds (NPB SP's
//! .bss: all 23 split within half a second; a random-access loop over 512 MiB ran about
//! 10 % slower without them, docs/detect.md). Where a uniform sample lands in a huge page,
//! the whole page is moved instead: UFFDIO_MOVE of an aligned 2-MiB range whose page-table
//! entry is a huge one moves that one entry (Linux 6.8, the kernel's move_pages_huge_pmd),
//! into a 2-MiB slot of a vault of its own. The next access to any of its 512 pages faults
//! with that page's exact address (what the detector records), and the fault thread moves
//! the entry back, still huge. So a sample of a huge page tells which task touched which of
//! its pages first. So does the probe that follows a sample (focus::Focus::may_take_huge_page);
//! bisection steps, edge pages and pages found shared ask about one page and are still taken
//! out 4 KiB at a time: the huge pages that stay split are where the search for tasks' block
//! edges went.
//!
//! While a huge page is out, the program may discard or move parts of its range (REMOVE,
//! UNMAP, REMAP events). Then each of its pages gets a home of its own (`homes`; 0 where
//! the program discarded it), and it comes back 4 KiB at a time by copy, as small pages.

use super::*;

/// Huge pages out at a time (a pick that finds all slots taken is skipped). Their vault is
/// address space only: a page out is the program's own, moved.
pub(super) const HUGE_SLOTS: usize = 8;
/// Small pages in a huge page: windows are used only where the huge page is 2 MiB of
/// 4-KiB pages (x86-64).
const WINDOW_PAGES: usize = 512;

/// /proc/self/pagemap's PAGEMAP_SCAN ioctl (Linux 6.7): page_region, pm_scan_arg.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

#[repr(C)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

const PAGEMAP_SCAN: c_ulong = 0xc060_6610;
const PAGE_IS_HUGE: u64 = 1 << 6;

/// One huge page out.
#[derive(Clone, Copy)]
pub(super) struct HugeSaved {
    /// Where the huge page belongs (0: the slot is free).
    pub(crate) addr: u64,
    since: u64,
    /// Set once the program changed part of the range while the page was out: each small
    /// page then has its own home in `homes` (0: discarded, or never moved out).
    per_page: bool,
    homes: [u64; WINDOW_PAGES],
}

/// The huge pages out and their vault. All zeros is a valid value: off (`base` 0).
pub(super) struct HugeVault {
    /// HUGE_SLOTS aligned huge-page slots, registered (missing mode) with our userfaultfd;
    /// 0: none, no huge page is re-armed whole.
    base: u64,
    /// The mapping that holds them (unaligned, two huge pages longer), for munmap.
    mapping: u64,
    mapping_len: u64,
    size: u64,
    slots: [HugeSaved; HUGE_SLOTS],
    /// A slot's vault range holds something (a page copied back leaves the vault's copy, a
    /// move that failed half way leaves a page table): cleaned before its next use.
    dirty: [bool; HUGE_SLOTS],
    /// A slot whose cleaning failed: never used again.
    broken: [bool; HUGE_SLOTS],
}

impl HugeSaved {
    /// Whether the program's `page` is out in this slot.
    pub(super) fn holds(&self, page: u64) -> bool {
        if self.addr == 0 {
            return false;
        }
        if !self.per_page {
            return self.addr <= page && page < self.addr + (WINDOW_PAGES * PAGE) as u64;
        }
        self.homes.contains(&page)
    }

    /// Gives each small page its own home (before a change to part of the range).
    fn split_homes(&mut self) {
        if !self.per_page {
            for (k, h) in self.homes.iter_mut().enumerate() {
                *h = self.addr + (k * PAGE) as u64;
            }
            self.per_page = true;
        }
    }

    /// The lowest home at or above `page`, if any (a first touch's zero fill stops there).
    pub(super) fn first_home_from(&self, page: u64) -> Option<u64> {
        if self.addr == 0 {
            return None;
        }
        if !self.per_page {
            return (self.addr + (WINDOW_PAGES * PAGE) as u64 > page)
                .then_some(self.addr.max(page));
        }
        self.homes
            .iter()
            .copied()
            .filter(|&h| h != 0 && h >= page)
            .min()
    }

    /// The program discarded or unmapped [start, end).
    pub(super) fn discarded(&mut self, start: u64, end: u64) {
        if self.addr == 0 {
            return;
        }
        if !self.per_page {
            let (a, b) = (self.addr, self.addr + (WINDOW_PAGES * PAGE) as u64);
            if end <= a || b <= start {
                return;
            }
            if start <= a && b <= end {
                self.addr = 0;
                return;
            }
            self.split_homes();
        }
        for h in self.homes.iter_mut() {
            if start <= *h && *h < end {
                *h = 0;
            }
        }
        if self.homes.iter().all(|&h| h == 0) {
            self.addr = 0;
        }
    }

    /// The program moved [src, src + len) to dst. As for small pages (vault::remap_slots),
    /// a page follows only where its new address is a hole (`hole`): a REMAP handled late
    /// must not carry off what another mapping brought into its old range meanwhile.
    pub(super) fn remapped(&mut self, src: u64, dst: u64, len: u64, hole: impl Fn(u64) -> bool) {
        let size = (WINDOW_PAGES * PAGE) as u64;
        if self.addr == 0 {
            return;
        }
        if !self.per_page {
            if src <= self.addr && self.addr + size <= src + len {
                if hole(self.addr - src + dst) {
                    self.addr = self.addr - src + dst;
                }
                return;
            }
            if self.addr + size <= src || src + len <= self.addr {
                return;
            }
            self.split_homes();
        }
        for h in self.homes.iter_mut() {
            if *h != 0 && src <= *h && *h < src + len && hole(*h - src + dst) {
                *h = *h - src + dst;
            }
        }
    }
}

impl HugeVault {
    /// The slot that holds the program's `page`.
    pub(super) fn holding(&self, page: u64) -> Option<usize> {
        if self.base == 0 {
            return None;
        }
        self.slots.iter().position(|s| s.holds(page))
    }

    /// The lowest page at or above `page` that is out (u64::MAX: none).
    pub(super) fn first_out_from(&self, page: u64) -> u64 {
        (self.slots.iter().filter_map(|s| s.first_home_from(page)))
            .min()
            .unwrap_or(u64::MAX)
    }

    pub(super) fn discarded(&mut self, start: u64, end: u64) {
        for (s, dirty) in self.slots.iter_mut().zip(self.dirty.iter_mut()) {
            if s.addr != 0 {
                s.discarded(start, end);
                *dirty |= s.addr == 0;
            }
        }
    }

    pub(super) fn remapped(&mut self, src: u64, dst: u64, len: u64, hole: impl Fn(u64) -> bool) {
        for s in self.slots.iter_mut() {
            s.remapped(src, dst, len, &hole);
        }
    }

    /// Whether [start, end) is (part of) the vault: the events of our own cleaning.
    pub(super) fn own(&self, start: u64, end: u64) -> bool {
        self.base != 0 && start >= self.base && end <= self.base + self.size * HUGE_SLOTS as u64
    }

    fn slot_at(&self, i: usize) -> u64 {
        self.base + i as u64 * self.size
    }
}

/// Sets up the vault of huge pages where pages are moved with UFFDIO_MOVE and huge pages
/// are 2 MiB of small pages.
/// Called at start (reads the environment).
pub(super) unsafe fn open(st: &mut State) {
    if std::env::var(agent_env::HUGE).is_ok_and(|v| v == "0") {
        return;
    }
    let size = st.thp.huge_size();
    if !UFFD_CAN_MOVE.load(Ordering::Relaxed)
        || size != (WINDOW_PAGES * PAGE) as u64
        || st.pagemap < 0
    {
        return;
    }
    // Aligned slots with some of our own mapping on either side: a slot made afresh
    // (clean) never borders a mapping of the program, so it can never merge with one.
    let len = size * (HUGE_SLOTS as u64 + 2);
    let mapping = own_mapping(len as usize);
    if mapping.is_null() {
        return;
    }
    let base = (mapping as u64 + size) & !(size - 1);
    let mut reg = UffdioRegister {
        range: UffdioRange {
            start: base,
            len: size * HUGE_SLOTS as u64,
        },
        mode: UFFDIO_REGISTER_MODE_MISSING,
        ioctls: 0,
    };
    if uffd_ioctl(st.uffd, UFFDIO_REGISTER, &mut reg as *mut _ as *mut c_void) != 0 {
        sys::munmap(mapping, len as usize);
        return;
    }
    let h = &mut st.huge;
    (h.base, h.mapping, h.mapping_len, h.size) = (base, mapping as u64, len, size);
}

/// The vault's mapping, for the maps scan to leave alone ((0, 0): none).
pub(super) fn vault_range(h: &HugeVault) -> (u64, u64) {
    (h.mapping, h.mapping + h.mapping_len)
}

/// Unmaps the vault (a fork child's copy).
pub(super) unsafe fn close(h: &HugeVault) {
    if h.mapping != 0 {
        sys::munmap(h.mapping as *mut c_void, h.mapping_len as usize);
    }
}

/// The aligned huge page `page` lies in, where it may be re-armed whole: inside one
/// private region of the last scan, and mapped by a huge page-table entry now.
unsafe fn window_of(st: &State, page: u64) -> Option<u64> {
    let h = &st.huge;
    if h.base == 0 {
        return None;
    }
    let w = page & !(h.size - 1);
    let inside = st.regions[..st.nregions]
        .iter()
        .any(|r| !r.shared && r.start <= w && w + h.size <= r.end);
    (inside && is_huge(st, w, h.size)).then_some(w)
}

/// Whether [w, w + size) is mapped by a huge page-table entry (PAGEMAP_SCAN).
unsafe fn is_huge(st: &State, w: u64, size: u64) -> bool {
    let mut found = [PageRegion::default(); 2];
    let mut arg = PmScanArg {
        size: std::mem::size_of::<PmScanArg>() as u64,
        flags: 0,
        start: w,
        end: w + size,
        walk_end: 0,
        vec: found.as_mut_ptr() as u64,
        vec_len: found.len() as u64,
        max_pages: 0,
        category_inverted: 0,
        category_mask: PAGE_IS_HUGE,
        category_anyof_mask: 0,
        return_mask: PAGE_IS_HUGE,
    };
    let n = libc::ioctl(st.pagemap, PAGEMAP_SCAN as _, &mut arg as *mut PmScanArg);
    n == 1 && found[0].start == w && found[0].end == w + size
}

/// Re-arms the huge page `page` lies in, whole, if it is one (re-arm thread). Returns
/// whether the pick was taken care of (re-armed, or not possible now); false: `page` is not
/// in a huge page, re-arm it alone.
pub(super) unsafe fn rearm_window(st: &mut State, view: &RingView, page: u64) -> bool {
    let Some(w) = window_of(st, page) else {
        return false;
    };
    clean(st);
    let size = st.huge.size;
    lock();
    let free = (0..HUGE_SLOTS)
        .find(|&i| st.huge.slots[i].addr == 0 && !st.huge.dirty[i] && !st.huge.broken[i]);
    let busy = !may_drop(st, w, w + size) || st.pending.active() || !registered_now(st, w);
    let Some(i) = free.filter(|_| !busy) else {
        unlock();
        return true;
    };
    let dst = st.huge.slot_at(i);
    let mut mv = UffdioMove {
        dst,
        src: w,
        len: size,
        mode: UFFDIO_MOVE_MODE_DONTWAKE,
        moved: 0,
    };
    let ok = uffd_ioctl(st.uffd, UFFDIO_MOVE, &mut mv as *mut _ as *mut c_void) == 0;
    let moved = if ok { size } else { mv.moved.max(0) as u64 };
    if moved > 0 {
        let s = &mut st.huge.slots[i];
        s.addr = w;
        s.since = monotonic_ns();
        s.per_page = false;
        if moved < size {
            // Split since it was looked at, and moved page by page up to a hole: those
            // pages are out, the rest stayed.
            s.split_homes();
            for h in s.homes[(moved / PAGE as u64) as usize..].iter_mut() {
                *h = 0;
            }
        }
        let h = view.header();
        h.rearmed_private.fetch_add(1, Ordering::Relaxed);
        h.rearmed_huge.fetch_add(1, Ordering::Relaxed);
    }
    // After any failure the slot may hold a page table: cleaned before its next use.
    st.huge.dirty[i] = !ok;
    unlock();
    true
}

/// Puts huge slot `i` back (caller holds the lock): the entry moved back whole, or page by
/// page where the program changed part of the range. False when it must wait for a mapping
/// change (see vault::restore; what was put back stays put back).
pub(super) unsafe fn restore_window(st: &mut State, i: usize) -> bool {
    if st.events_waiting.load(Ordering::Acquire) {
        return false;
    }
    let (src, size) = (st.huge.slot_at(i), st.huge.size);
    if !st.huge.slots[i].per_page {
        let mut mv = UffdioMove {
            dst: st.huge.slots[i].addr,
            src,
            len: size,
            mode: 0,
            moved: 0,
        };
        if uffd_ioctl(st.uffd, UFFDIO_MOVE, &mut mv as *mut _ as *mut c_void) == 0 {
            st.huge.slots[i].addr = 0;
            return true;
        }
        let (e, moved) = (errno(), mv.moved.max(0) as u64);
        if moved == 0 && put_back_waits(st, st.huge.slots[i].addr, e) {
            return false;
        }
        // Moved part way (or refused): the rest goes back page by page.
        let s = &mut st.huge.slots[i];
        s.split_homes();
        for h in s.homes[..(moved / PAGE as u64) as usize].iter_mut() {
            *h = 0;
        }
    }
    for k in 0..WINDOW_PAGES {
        let home = st.huge.slots[i].homes[k];
        if home == 0 {
            continue;
        }
        if !copy_back(st, home, src + (k * PAGE) as u64) && put_back_waits(st, home, errno()) {
            return false;
        }
        // Put back, already there, or the range is gone for good: done with this page.
        st.huge.slots[i].homes[k] = 0;
    }
    st.huge.slots[i].addr = 0;
    st.huge.dirty[i] = true;
    true
}

/// Puts back every huge page out longer than SAVED_MAX_NS (caller holds the lock).
pub(super) unsafe fn expire(st: &mut State, now: u64) {
    for i in 0..HUGE_SLOTS {
        let s = &st.huge.slots[i];
        if s.addr != 0 && now.saturating_sub(s.since) > SAVED_MAX_NS {
            restore_window(st, i);
        }
    }
}

/// Puts back every huge page out (caller holds the lock); false if one must wait (EAGAIN).
pub(super) unsafe fn restore_all(st: &mut State) -> bool {
    let mut all = true;
    for i in 0..HUGE_SLOTS {
        if st.huge.slots[i].addr != 0 && !restore_window(st, i) {
            all = false;
        }
    }
    all
}

/// Makes dirty vault slots clean again (re-arm thread, without the lock: replacing a
/// registered range raises an UNMAP event that the fault thread reads). A fresh mapping
/// over the slot frees its page table too, which a huge entry needs to move in.
unsafe fn clean(st: &mut State) {
    lock();
    let h = &st.huge;
    let dirty: [bool; HUGE_SLOTS] =
        std::array::from_fn(|i| h.dirty[i] && h.slots[i].addr == 0 && !h.broken[i]);
    unlock();
    for i in (0..HUGE_SLOTS).filter(|&i| dirty[i]) {
        let at = st.huge.slot_at(i);
        let size = st.huge.size;
        let fresh = sys::mmap(
            at as *mut c_void,
            size as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
        );
        let mut reg = UffdioRegister {
            range: UffdioRange {
                start: at,
                len: size,
            },
            mode: UFFDIO_REGISTER_MODE_MISSING,
            ioctls: 0,
        };
        if fresh as u64 == at {
            mark_own(fresh, size as usize);
        }
        let ok = fresh as u64 == at
            && uffd_ioctl(st.uffd, UFFDIO_REGISTER, &mut reg as *mut _ as *mut c_void) == 0;
        lock();
        st.huge.dirty[i] = false;
        st.huge.broken[i] = !ok;
        unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: u64 = 0x4000_0000;
    const SIZE: u64 = (WINDOW_PAGES * PAGE) as u64;

    fn out_at(addr: u64) -> HugeSaved {
        HugeSaved {
            addr,
            since: 0,
            per_page: false,
            homes: [0; WINDOW_PAGES],
        }
    }

    #[test]
    fn a_whole_huge_page_is_held_moved_and_discarded_as_one() {
        let mut s = out_at(W);
        assert!(s.holds(W) && s.holds(W + SIZE - PAGE as u64) && !s.holds(W + SIZE));
        assert_eq!(s.first_home_from(W - PAGE as u64), Some(W));
        assert_eq!(
            s.first_home_from(W + 5 * PAGE as u64),
            Some(W + 5 * PAGE as u64)
        );
        assert_eq!(s.first_home_from(W + SIZE), None);
        // Moved whole (an mremap of a larger range): still one entry, at its new place.
        s.remapped(W - SIZE, 0x8000_0000, 4 * SIZE, |_| true);
        assert!(!s.per_page && s.addr == 0x8000_0000 + SIZE);
        // Discarded whole: nothing to put back.
        s.discarded(0x8000_0000, 0x8000_0000 + 2 * SIZE);
        assert_eq!(s.addr, 0);
    }

    #[test]
    fn a_partial_change_gives_each_page_its_own_home() {
        let mut s = out_at(W);
        let p = PAGE as u64;
        // The program discards pages 10..20 and moves pages 100..200 elsewhere.
        s.discarded(W + 10 * p, W + 20 * p);
        assert!(s.per_page && !s.holds(W + 15 * p) && s.holds(W + 20 * p) && s.holds(W));
        s.remapped(W + 100 * p, 0x9000_0000, 100 * p, |_| true);
        assert!(!s.holds(W + 150 * p) && s.holds(0x9000_0000 + 50 * p));
        assert_eq!(s.first_home_from(W + 10 * p), Some(W + 20 * p));
        // An unrelated change leaves it alone.
        s.discarded(W + 2 * SIZE, W + 3 * SIZE);
        assert!(s.holds(W + 511 * p));
        // Everything discarded: the slot is free.
        s.discarded(0, u64::MAX);
        assert_eq!(s.addr, 0);
        assert!(!s.holds(W));
    }

    #[test]
    fn changes_outside_leave_a_whole_page_whole() {
        let mut s = out_at(W);
        s.discarded(W + SIZE, W + 2 * SIZE);
        s.discarded(W - SIZE, W);
        s.remapped(W + SIZE, W + 4 * SIZE, SIZE, |_| true);
        assert!(!s.per_page && s.addr == W);
    }

    #[test]
    fn the_scan_argument_is_the_kernels_size() {
        // struct pm_scan_arg has 12 u64 fields; PAGEMAP_SCAN = _IOWR('f', 16, it).
        assert_eq!(std::mem::size_of::<PmScanArg>(), 96);
        assert_eq!(
            PAGEMAP_SCAN,
            (3 << 30) | (96 << 16) | ((b'f' as c_ulong) << 8) | 16
        );
    }
}
