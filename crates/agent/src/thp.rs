//! Transparent huge pages kept at start-up. Memory registered with the agent's userfaultfd
//! is faulted in 4 KiB at a time (a first touch maps the zero page through the fault
//! thread), so a program the kernel gives huge pages (THP `always`, or MADV_HUGEPAGE under
//! `madvise`) had none under the agent: NPB SP class A, 42 MiB plain and 0 under the agent;
//! a random-access loop over 512 MiB, about 8 % slower in small pages. So a new mapping
//! where the kernel allows huge pages (smaps `THPeligible`, which follows the THP setting,
//! MADV_HUGEPAGE / NOHUGEPAGE and PR_SET_THP_DISABLE) is registered only once the program
//! has filled it: when half of its pages or more are present and that did not grow between
//! two scans (SETTLE_MIN_NS after it was first seen at the earliest; a count that merely
//! stopped growing registered NPB SP's .bss before its arrays were initialised), or
//! SETTLE_MAX_NS after it was first seen. Its first touches are then the kernel's own (huge
//! pages, and no round trip to the fault thread); registering keeps the huge pages, and each
//! re-arm later splits the one it lands in. Tried before this and dropped: collapsing split
//! ranges again with MADV_COLLAPSE (0.5-5 ms a collapse on the 2-core VM; the loop ran
//! slower, see docs/detect.md).

use super::*;

/// Mappings waiting to be registered at a time; more are registered at once.
const SETTLING: usize = 64;
const SETTLE_MIN_NS: u64 = 200_000_000;
const SETTLE_MAX_NS: u64 = 2_000_000_000;
const SMAPS_BUF: usize = 64 << 10;
/// Reading smaps walks the page tables of the whole process (6 ms for 512 MiB of small
/// pages on the 2-core VM): after each read, the next waits 1/SMAPS_SHARE of its time, so
/// that a program whose heap keeps growing (a new range each scan) spends at most 1 % of a
/// CPU on it. In between, a new mapping is judged by the last read (not listed: registered).
const SMAPS_SHARE: u64 = 100;

/// The machine's transparent-huge-page setting (/sys/kernel/mm/transparent_hugepage/enabled).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum ThpMode {
    Always,
    Madvise,
    Never,
}

/// Reads the bracketed word of the setting's text ("always [madvise] never").
pub(super) fn thp_mode(text: &[u8]) -> Option<ThpMode> {
    let open = text.iter().position(|&c| c == b'[')?;
    let close = open + text[open..].iter().position(|&c| c == b']')?;
    match &text[open + 1..close] {
        b"always" => Some(ThpMode::Always),
        b"madvise" => Some(ThpMode::Madvise),
        b"never" => Some(ThpMode::Never),
        _ => None,
    }
}

#[derive(Clone, Copy, Default)]
struct Waiting {
    start: u64,
    end: u64,
    since: u64,
    present: u64,
    /// The scan that saw it last.
    scan: u64,
}

/// What the agent knows of huge pages: their size, the mappings allowed them, and the
/// mappings waiting to be registered. All zeros is a valid value: off (`huge` 0).
pub(super) struct Thp {
    /// Huge-page size in bytes (hpage_pmd_size); 0: no waiting (no THP, or `never`).
    huge: u64,
    /// Mappings whose smaps said THPeligible 1, as of the scan `eligible_scan`.
    eligible: [(u64, u64); MAX_REGIONS],
    neligible: usize,
    eligible_scan: u64,
    /// No new read of smaps before this time (see SMAPS_SHARE).
    next_read_ns: u64,
    waiting: [Waiting; SETTLING],
    nwaiting: usize,
    /// smaps is read through this, a line at a time (scan_maps' own buffer is in use).
    buf: [u8; SMAPS_BUF],
    /// /proc/self/smaps, opened at start (see open_high) and re-read from offset 0; -1:
    /// none.
    pub(super) smaps: c_int,
}

/// The decision for one mapping not registered yet.
#[derive(Debug, PartialEq)]
pub(super) enum Settle {
    /// Register it now.
    Register,
    /// Leave it to the kernel until the next scan.
    Wait,
}

impl Thp {
    /// Turns waiting on for huge pages of `huge` bytes (a power of two above a page).
    pub(super) fn enable(&mut self, huge: u64) {
        self.huge = if huge.is_power_of_two() && huge > PAGE as u64 {
            huge
        } else {
            0
        };
    }

    /// The huge-page size in bytes (0: none, or THP `never`).
    pub(super) fn huge_size(&self) -> u64 {
        self.huge
    }

    /// Whether [start, end) holds a whole aligned huge page (else THP cannot apply).
    fn holds_huge_page(&self, start: u64, end: u64) -> bool {
        self.huge != 0
            && (start + self.huge - 1) & !(self.huge - 1) < end.saturating_sub(self.huge - 1)
    }

    fn eligible(&self, start: u64, end: u64) -> bool {
        self.eligible[..self.neligible].contains(&(start, end))
    }

    /// Whether mappings are waiting (scans must then look again even if the maps did not
    /// change).
    pub(super) fn any_waiting(&self) -> bool {
        self.nwaiting > 0
    }

    /// The rule of the module's comment for eligible [start, end) with `present` pages
    /// present now, seen by scan number `scan`.
    fn settle(&mut self, start: u64, end: u64, present: u64, now: u64, scan: u64) -> Settle {
        // By its start: a heap that grows keeps waiting from when it was first seen, not
        // again from each new end.
        let Some(i) = self.waiting[..self.nwaiting]
            .iter()
            .position(|w| w.start == start)
        else {
            if self.nwaiting == SETTLING {
                return Settle::Register;
            }
            self.waiting[self.nwaiting] = Waiting {
                start,
                end,
                since: now,
                present,
                scan,
            };
            self.nwaiting += 1;
            return Settle::Wait;
        };
        let w = &mut self.waiting[i];
        let age = now.saturating_sub(w.since);
        let pages = (end - start) / PAGE as u64;
        let filled = age >= SETTLE_MIN_NS && present * 2 >= pages && present == w.present;
        if filled || age >= SETTLE_MAX_NS {
            self.nwaiting -= 1;
            self.waiting[i] = self.waiting[self.nwaiting];
            return Settle::Register;
        }
        (w.end, w.present, w.scan) = (end, present, scan);
        Settle::Wait
    }

    /// Forgets waiting mappings that scan `scan` did not see (gone, or no longer eligible).
    pub(super) fn prune(&mut self, scan: u64) {
        let mut i = 0;
        while i < self.nwaiting {
            if self.waiting[i].scan == scan {
                i += 1;
            } else {
                self.nwaiting -= 1;
                self.waiting[i] = self.waiting[self.nwaiting];
            }
        }
    }
}

/// Reads /proc/self/smaps a line at a time, keeping the mappings whose `THPeligible` is 1.
#[derive(Default)]
pub(super) struct EligibleScan {
    mapping: (u64, u64),
}

impl EligibleScan {
    /// One line of smaps (without its newline); `keep` gets each eligible mapping.
    pub(super) fn line(&mut self, line: &[u8], mut keep: impl FnMut(u64, u64)) {
        if let Some(rest) = line.strip_prefix(b"THPeligible:") {
            if rest.iter().find(|c| !c.is_ascii_whitespace()) == Some(&b'1') {
                keep(self.mapping.0, self.mapping.1);
            }
        } else if let Some(m) = agent_abi::maps::parse_line(line) {
            self.mapping = (m.start, m.end);
        }
    }
}

/// Turns waiting on when the machine gives transparent huge pages at all. Called at start,
/// before the program's own code runs (files are opened then only, see open_high).
pub(super) unsafe fn enable_from_sysfs(st: &mut State) {
    let mut buf = [0u8; 64];
    let read = |path: &std::ffi::CStr, buf: &mut [u8]| -> usize {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return 0;
        }
        let n = libc::read(fd, buf.as_mut_ptr() as *mut c_void, buf.len());
        libc::close(fd);
        n.max(0) as usize
    };
    let n = read(c"/sys/kernel/mm/transparent_hugepage/enabled", &mut buf);
    if matches!(thp_mode(&buf[..n]), None | Some(ThpMode::Never)) {
        return;
    }
    let n = read(
        c"/sys/kernel/mm/transparent_hugepage/hpage_pmd_size",
        &mut buf,
    );
    let size = std::str::from_utf8(&buf[..n])
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0);
    st.thp.enable(size);
    if st.thp.huge != 0 {
        st.thp.smaps = open_high(c"/proc/self/smaps");
    }
}

/// Re-reads the eligible mappings from /proc/self/smaps (once per scan at most, only while
/// a new mapping could hold a huge page, and within SMAPS_SHARE).
unsafe fn read_eligible(thp: &mut Thp) {
    thp.neligible = 0;
    if thp.smaps < 0 {
        return;
    }
    let mut scan = EligibleScan::default();
    let (mut kept, mut have, mut offset) = (0, 0usize, 0usize);
    let buf = &mut thp.buf;
    loop {
        // From offset 0 on: /proc seq files regenerate their text when read from the start.
        let n = pread_at(thp.smaps, &mut buf[have..], offset);
        if n == 0 {
            break;
        }
        have += n;
        offset += n;
        // Whole lines now; a partial one moves to the front for the next read.
        let mut pos = 0;
        while let Some(i) = buf[pos..have].iter().position(|&c| c == b'\n') {
            let eligible = &mut thp.eligible;
            scan.line(&buf[pos..pos + i], |a, b| {
                if kept < MAX_REGIONS {
                    eligible[kept] = (a, b);
                    kept += 1;
                }
            });
            pos += i + 1;
        }
        buf.copy_within(pos..have, 0);
        have -= pos;
        if have == buf.len() {
            break; // a line longer than the buffer: not smaps as we know it
        }
    }
    thp.neligible = kept;
}

/// Present pages of [start, end) (pagemap bit 63); u64::MAX when pagemap cannot be read.
unsafe fn count_present(st: &mut State, start: u64, end: u64) -> u64 {
    let (mut page, mut n) = (start, 0);
    while page < end {
        let Some(want) = read_pagemap(st, page, end) else {
            return u64::MAX;
        };
        n += st.pagemap_buf[..want]
            .iter()
            .filter(|&&e| e & PM_PRESENT != 0)
            .count() as u64;
        page += want as u64 * st.page;
    }
    n
}

/// For scan_maps, about private mapping [start, end) not registered yet: Wait while the
/// kernel may still give it huge pages (see the module's comment). `scan` numbers the
/// scans, so that smaps is read once per scan at most.
pub(super) unsafe fn before_register(st: &mut State, start: u64, end: u64, scan: u64) -> Settle {
    if !st.thp.holds_huge_page(start, end) || st.pagemap < 0 {
        return Settle::Register;
    }
    let now = monotonic_ns();
    if st.thp.eligible_scan != scan && now >= st.thp.next_read_ns {
        st.thp.eligible_scan = scan;
        read_eligible(&mut st.thp);
        st.thp.next_read_ns = now + SMAPS_SHARE * monotonic_ns().saturating_sub(now);
    }
    if !st.thp.eligible(start, end) {
        return Settle::Register;
    }
    let present = count_present(st, start, end);
    if present == u64::MAX {
        return Settle::Register;
    }
    st.thp.settle(start, end, present, now, scan)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HUGE: u64 = 2 << 20;
    const MS: u64 = 1_000_000;

    fn thp() -> Box<Thp> {
        // SAFETY: all zeros is a valid Thp (see its comment).
        let mut t: Box<Thp> = unsafe { Box::new(std::mem::zeroed()) };
        t.enable(HUGE);
        t
    }

    #[test]
    fn the_bracketed_word_is_the_setting() {
        assert_eq!(
            thp_mode(b"always [madvise] never\n"),
            Some(ThpMode::Madvise)
        );
        assert_eq!(thp_mode(b"[always] madvise never\n"), Some(ThpMode::Always));
        assert_eq!(thp_mode(b"always madvise [never]\n"), Some(ThpMode::Never));
        assert_eq!(thp_mode(b"always madvise never\n"), None);
        assert_eq!(thp_mode(b"[sometimes]"), None);
        assert_eq!(thp_mode(b""), None);
    }

    #[test]
    fn only_mappings_that_hold_an_aligned_huge_page_can_wait() {
        let t = thp();
        assert!(t.holds_huge_page(0x4000_0000, 0x4020_0000));
        assert!(t.holds_huge_page(0x3ff0_0000, 0x4030_0000));
        assert!(!t.holds_huge_page(0x4000_1000, 0x4020_1000)); // 2 MiB, not aligned
        assert!(!t.holds_huge_page(0x4000_0000, 0x401f_f000));
        let mut off = thp();
        off.enable(0);
        assert!(!off.holds_huge_page(0x4000_0000, 0x4040_0000));
    }

    #[test]
    fn a_mapping_is_registered_once_filled_or_after_the_longest_wait() {
        let mut t = thp();
        // 2048 pages, being filled: waits.
        let (a, b) = (0x4000_0000, 0x4080_0000);
        assert_eq!(t.settle(a, b, 100, 0, 0), Settle::Wait);
        assert!(t.any_waiting());
        assert_eq!(t.settle(a, b, 1500, 100 * MS, 0), Settle::Wait);
        // Same count, but too soon to call it filled.
        let mut early = thp();
        early.settle(a, b, 1500, 0, 0);
        assert_eq!(early.settle(a, b, 1500, SETTLE_MIN_NS - 1, 0), Settle::Wait);
        // A few pages touched and no more for a while (a .bss before its arrays are set up):
        // not filled.
        let mut few = thp();
        few.settle(a, b, 30, 0, 0);
        assert_eq!(few.settle(a, b, 30, 500 * MS, 0), Settle::Wait);
        // Half or more, and the same count after SETTLE_MIN_NS: filled, registered.
        assert_eq!(t.settle(a, b, 1500, 300 * MS, 0), Settle::Register);
        assert!(!t.any_waiting());
        // Never touched: waits until SETTLE_MAX_NS.
        let (c, d) = (0x5000_0000, 0x5040_0000);
        assert_eq!(t.settle(c, d, 0, 0, 0), Settle::Wait);
        assert_eq!(t.settle(c, d, 0, SETTLE_MAX_NS - 1, 0), Settle::Wait);
        assert_eq!(t.settle(c, d, 0, SETTLE_MAX_NS, 0), Settle::Register);
        // A mapping that keeps growing (a heap) waits from when it was first seen.
        let e = 0x6000_0000;
        assert_eq!(t.settle(e, e + HUGE, 10, 0, 0), Settle::Wait);
        assert_eq!(
            t.settle(e, e + 2 * HUGE, 20, SETTLE_MAX_NS / 2, 0),
            Settle::Wait
        );
        assert_eq!(
            t.settle(e, e + 3 * HUGE, 30, SETTLE_MAX_NS, 0),
            Settle::Register
        );
    }

    #[test]
    fn waiting_is_bounded_and_gone_mappings_are_forgotten() {
        let mut t = thp();
        for k in 0..SETTLING as u64 {
            assert_eq!(t.settle(k * HUGE, (k + 1) * HUGE, 0, 0, 0), Settle::Wait);
        }
        let extra = SETTLING as u64 * HUGE;
        assert_eq!(t.settle(extra, extra + HUGE, 0, 0, 0), Settle::Register);
        // Scan 1 sees four of them again.
        for k in 0..4 {
            assert_eq!(t.settle(k * HUGE, (k + 1) * HUGE, 0, 1, 1), Settle::Wait);
        }
        t.prune(1);
        assert_eq!(t.nwaiting, 4);
        t.prune(2);
        assert!(!t.any_waiting());
    }

    #[test]
    fn smaps_gives_the_eligible_mappings() {
        let smaps = "\
55e000000000-55e000800000 rw-p 00000000 00:00 0
Size:               8192 kB
AnonHugePages:         0 kB
THPeligible:    1
VmFlags: rd wr mr mw me ac hg
55e000800000-55e000c00000 rw-p 00000000 00:00 0 [heap]
Size:               4096 kB
THPeligible:    0
VmFlags: rd wr mr mw me ac
7f0000000000-7f0000021000 r-xp 00000000 08:01 200 /usr/lib/x86_64-linux-gnu/libc.so.6
THPeligible:    0
";
        let mut scan = EligibleScan::default();
        let mut kept = Vec::new();
        for l in smaps.lines() {
            scan.line(l.as_bytes(), |a, b| kept.push((a, b)));
        }
        assert_eq!(kept, [(0x55e0_0000_0000, 0x55e0_0080_0000)]);
        let mut t = thp();
        t.eligible[0] = kept[0];
        t.neligible = 1;
        assert!(t.eligible(0x55e0_0000_0000, 0x55e0_0080_0000));
        assert!(!t.eligible(0x55e0_0080_0000, 0x55e0_00c0_0000));
    }
}
