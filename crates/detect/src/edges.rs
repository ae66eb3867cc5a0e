//! Page edges: telling two threads that share data on a page from two that only share the
//! page.
//!
//! In page mode (Session::page_mode) two threads that fault on one page pair, wherever they
//! touch it. Where a static array does not start on a page boundary (a Fortran COMMON block
//! 0x300 bytes into a page), every page that holds the end of one thread's block and the
//! start of the next thread's pairs them, whether or not either reads the other's data: the
//! last thread of array `u` with the first of array `v` in a halo code, the tile at the end
//! of a column with the tile at the start of the next one in a 2-D stencil. Faults cannot
//! tell these from real edges (a page is the unit of protection); which bytes each thread
//! touches can. Each thread's first touch of a page after a re-arm is where its sweep enters
//! the page, so a pair that enters at different offsets `lo < hi` has an edge there: the
//! lower thread's data ends below `hi`, the higher thread's starts at `hi`. They share data
//! across it when the lower thread touches the word at `hi` or the higher one the word
//! below it, which is what a stencil's or a halo's neighbour read does. A probe sets four
//! watchpoints ([`crate::watch`]) for [`PROBE_NS`]: those two, and each thread's own entry
//! word, which tells that both swept the page meanwhile. Neither crossing with both own
//! words hit: the page is apart, and its events are taken back and no longer counted (false
//! sharing of that page). A crossing: the edge is shared. A probe that saw no sweep is tried
//! again later, and after [`MAX_TRIES`] of them the edge is kept as shared.
//!
//! An edge is one pair and one pair of entry offsets, all pages where they enter at those
//! offsets: in a column-major stencil every column's wrap falls at the same offsets. One edge
//! spans arrays that are used differently (a stencil reads across its tile's edge in the
//! field it reads, never in the one it writes), so an edge is apart only when [`APART_PAGES`]
//! different pages of it (or every page it was seen on, if fewer, but two) were probed apart
//! and none crossed; then all its events are taken back and later ones not counted. Pairs
//! that enter a page at the same word touch the same data and are never probed.
//!
//! Outside page mode the same probes add what blocks miss: two threads that enter a page in
//! different blocks pair on no block, though one may read the other's data across the edge
//! (a C row-major stencil: each row's east neighbour enters the page at its last word, the
//! owner at the first). An edge is proven when a probe saw the lower thread touch the word
//! the higher one entered at: both touched that word. Its events, those tallied before the
//! proof included, then count beside the blocks' (`Tick::proven`). The higher thread
//! touching the word below its entry is no proof there: a thread that loops over its own
//! data enters a page wherever the re-arm found it, and the word below can be its own.

use crate::session::scaled;
use crate::watch::Watchpoint;
use std::collections::HashMap;

/// How long a probe's watchpoints stay set: 20 sweeps of the Fortran stencil's fields at
/// 8 threads on 2 PUs.
pub const PROBE_NS: u64 = 50_000_000;
/// Probes of an edge whose threads did not sweep the page before it is kept as shared.
pub const MAX_TRIES: u8 = 4;
/// Events an edge needs before it is probed (one could be a stray access).
pub const MIN_EVENTS: u64 = 2;
/// Pages of an edge probed apart, none shared, before the edge is apart (or all its pages,
/// if fewer, but two at least). Where two of an edge's three arrays are read across it (a
/// stencil's two fields, read and written in turn, and the source term, only read), a
/// true edge's page is apart one time in three, and eight all apart by chance one time in
/// 6,561 (at five, one true edge in 243 went: 1 run in 8 of the Fortran stencil).
pub const APART_PAGES: usize = 8;
/// Distinct pages remembered per edge, to probe.
const PAGES_KEPT: usize = 12;
/// A page whose events are not counted (its edge or itself found apart) is told to the agent
/// at its next event, and again this long after (the agent keeps a page told apart out of
/// its focus table for as long: agent focus::APART_NS). Told only the pages an edge was
/// probed on, the agent kept finding the other pages of an apart edge and spent re-arms on
/// them: in layout-f stencil x4 (a COMMON block 0x300 bytes into a page, so each column's
/// wrap page holds one task's end and the next one's start) half of the events on an
/// east-west pair's pages were on its apart wrap edge (107 of 211 and 81 of 146, one
/// 8-s run), and the links ended 104 and 65 events where they are equal.
const RETELL_APART_NS: u64 = 10_000_000_000;
/// Pages waiting to be told apart at the next tick, and told pages remembered, at most.
const APART_PENDING: usize = 1024;
const APART_TOLD: usize = 4096;
/// Between two probes of one edge.
const RETRY_NS: u64 = 300_000_000;
/// Watchpoints per thread: x86's four debug registers.
const PER_TASK: u8 = 4;
/// Edges' probes are ended and started at most this often (a walk over all edges).
const TICK_NS: u64 = 5_000_000;
/// Edges remembered at most (about 200 bytes each): a program whose threads enter pages at
/// ever new offsets makes a new edge per event, and events of an edge past this many count
/// as they did before page edges.
pub const MAX_EDGES: usize = 16_384;

/// Two tasks (matrix rows) and where each entered a page, the lower offset first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EdgeKey {
    /// The task that entered lower in the page.
    pub lo_task: u32,
    /// The task that entered higher.
    pub hi_task: u32,
    /// Their entry offsets in the page, rounded down to 8 bytes (`lo_off < hi_off`).
    pub lo_off: u16,
    /// See `lo_off`.
    pub hi_off: u16,
}

impl EdgeKey {
    /// The edge between task `a` entering at page offset `a_off` and `b` at `b_off`; None
    /// when they entered at the same word (no edge: they touch the same data).
    pub fn of(a: (u32, u16), b: (u32, u16)) -> Option<EdgeKey> {
        let (a_off, b_off) = (a.1 & !7, b.1 & !7);
        let (lo, hi) = match a_off.cmp(&b_off) {
            std::cmp::Ordering::Equal => return None,
            std::cmp::Ordering::Less => (a, b),
            std::cmp::Ordering::Greater => (b, a),
        };
        Some(EdgeKey {
            lo_task: lo.0,
            hi_task: hi.0,
            lo_off: lo.1 & !7,
            hi_off: hi.1 & !7,
        })
    }

    /// Whether the two entry offsets lie in different blocks of `1 << shift` bytes (blocks
    /// pair no task on this edge).
    pub fn across_blocks(&self, shift: u32) -> bool {
        (self.lo_off as u32) >> shift != (self.hi_off as u32) >> shift
    }
}

/// What the probes said of an edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not probed yet, or no sweep seen yet.
    Unknown,
    /// One thread touches the other's data across the edge: its events count.
    Shared,
    /// Neither does: its events are taken back.
    Apart,
}

struct Probe {
    started_ns: u64,
    page: u64,
    /// The lower thread at the higher's entry word, and at its own entry word.
    lo_cross: Watchpoint,
    lo_own: Watchpoint,
    /// The higher thread at the word below its entry, and at its entry word.
    hi_cross: Watchpoint,
    hi_own: Watchpoint,
}

struct Edge {
    pid: u32,
    /// Events counted for it (taken back if it is found apart), aged as the matrix.
    events: u64,
    /// Events seen on it in all.
    seen: u64,
    /// The first distinct pages it was seen on.
    pages: Vec<EdgePage>,
    verdict: Verdict,
    /// A probe saw the lower thread touch the word the higher one entered at.
    proven: bool,
    probe: Option<Probe>,
    tries: u8,
    next_probe_ns: u64,
}

/// A page of an edge: events on a page probed apart are false sharing, taken back and not
/// counted, whatever the edge's verdict.
struct EdgePage {
    /// Start address.
    page: u64,
    /// Events counted on it, as `Edge::events`.
    events: u64,
    apart: bool,
}

/// An edge's verdict after a probe: `crossed`, a thread touched the other's word across the
/// edge; `swept`, both touched their own; `apart` of its `pages` probed apart so far (this
/// one included); `tries` probes without a sweep.
fn judge(crossed: bool, swept: bool, apart: usize, pages: usize, tries: u8) -> Verdict {
    match (crossed, swept) {
        (true, _) => Verdict::Shared,
        (false, true) if apart >= APART_PAGES.min(pages).max(2) => Verdict::Apart,
        (false, false) if tries >= MAX_TRIES => Verdict::Shared,
        _ => Verdict::Unknown,
    }
}

/// An edge found apart: its events to take back from the page matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TakeBack {
    /// The pair.
    pub a: u32,
    /// See `a`.
    pub b: u32,
    /// Events counted between them on the edge's pages.
    pub events: u64,
}

/// What a [`PageEdges::tick`] found.
#[derive(Debug, Default)]
pub struct Tick {
    /// Edges and pages found apart: their events to take back from the page matrix.
    pub apart: Vec<TakeBack>,
    /// Edges just proven shared (a probe saw both threads touch one word), with the events
    /// counted on them so far.
    pub proven: Vec<(EdgeKey, u64)>,
    /// (pid, page) of pages just found apart, alone or with their edge: the agent of that
    /// process stops spending re-arms on them.
    pub apart_pages: Vec<(u32, u64)>,
}

/// Every edge seen, with its probe if one is running.
#[derive(Default)]
pub struct PageEdges {
    edges: HashMap<EdgeKey, Edge>,
    /// Edges with no verdict yet (probes may still come).
    open: usize,
    last_tick_ns: u64,
    /// Watchpoints set per task.
    in_use: HashMap<u32, u8>,
    /// Why no watchpoint can be set in this session, once one failed for a reason that holds
    /// for every thread (no hardware breakpoints, no permission).
    pub unavailable: Option<String>,
    /// (pid, page) of events not counted since the last tick, and when each page was last
    /// told apart (see RETELL_APART_NS).
    apart_seen: Vec<(u32, u64)>,
    apart_told: HashMap<(u32, u64), u64>,
    /// Probes started.
    pub probes: u64,
    /// Pages probed apart (their events are taken back, whatever their edge's verdict).
    pub pages_apart: u64,
    /// Edges found apart, and found shared.
    pub apart: u64,
    /// See `apart`.
    pub shared: u64,
    /// Events taken back from apart edges, or not counted on them.
    pub events_dropped: u64,
}

impl PageEdges {
    /// Notes one page event between two tasks of process `pid` on the page at `page`;
    /// returns whether it counts (false on an edge found apart).
    pub fn event(&mut self, pid: u32, key: EdgeKey, page: u64) -> bool {
        if self.edges.len() >= MAX_EDGES && !self.edges.contains_key(&key) {
            return true;
        }
        let e = self.edges.entry(key).or_insert(Edge {
            pid,
            events: 0,
            seen: 0,
            pages: Vec::new(),
            verdict: Verdict::Unknown,
            proven: false,
            probe: None,
            tries: 0,
            next_probe_ns: 0,
        });
        if e.seen == 0 {
            self.open += 1;
        }
        let i = match e.pages.iter().position(|p| p.page == page) {
            None if e.pages.len() < PAGES_KEPT => {
                e.pages.push(EdgePage {
                    page,
                    events: 0,
                    apart: false,
                });
                Some(e.pages.len() - 1)
            }
            i => i,
        };
        e.seen += 1;
        if e.verdict == Verdict::Apart || i.is_some_and(|i| e.pages[i].apart) {
            self.events_dropped += 1;
            if self.apart_seen.len() < APART_PENDING {
                self.apart_seen.push((pid, page));
            }
            return false;
        }
        e.events += 1;
        if let Some(i) = i {
            e.pages[i].events += 1;
        }
        true
    }

    /// Puts the pages of events not counted since the last tick into `told`, those not told
    /// within RETELL_APART_NS.
    fn retell_apart(&mut self, now_ns: u64, told: &mut Vec<(u32, u64)>) {
        if self.apart_told.len() >= APART_TOLD {
            let fresh = |at: &mut u64| now_ns.saturating_sub(*at) < RETELL_APART_NS;
            self.apart_told.retain(|_, at| fresh(at));
        }
        for seen in self.apart_seen.drain(..) {
            let at = self.apart_told.get(&seen).copied();
            if at.is_none_or(|at| now_ns.saturating_sub(at) >= RETELL_APART_NS)
                && self.apart_told.len() < APART_TOLD
            {
                self.apart_told.insert(seen, now_ns);
                told.push(seen);
            }
        }
    }

    /// Whether a probe is running (its watchpoints are set).
    pub fn probing(&self) -> bool {
        self.in_use.values().any(|&n| n > 0)
    }

    /// Whether some edge has no verdict yet.
    pub fn open(&self) -> bool {
        self.open > 0
    }

    /// What is known of edge `key`.
    pub fn verdict(&self, key: &EdgeKey) -> Option<Verdict> {
        self.edges.get(key).map(|e| e.verdict)
    }

    /// Whether a probe saw both threads of edge `key` touch one word (the lower thread the
    /// word the higher one entered at).
    pub fn proven(&self, key: &EdgeKey) -> bool {
        self.edges.get(key).is_some_and(|e| e.proven)
    }

    /// Ends the probes that ran [`PROBE_NS`] and starts new ones on edges for which
    /// `wanted(pid, key)` says yes; `tid_of(task)` is a live task's thread id (None: gone).
    /// Does nothing within [`TICK_NS`] of the last time it ran.
    pub fn tick(
        &mut self,
        now_ns: u64,
        wanted: impl Fn(u32, &EdgeKey) -> bool,
        tid_of: impl Fn(u32) -> Option<u32>,
    ) -> Tick {
        let mut found = Tick::default();
        if now_ns < self.last_tick_ns + TICK_NS {
            return found;
        }
        self.last_tick_ns = now_ns;
        self.retell_apart(now_ns, &mut found.apart_pages);
        let back = &mut found.apart;
        for (key, e) in self.edges.iter_mut() {
            if (e.probe.as_ref()).is_none_or(|p| now_ns.saturating_sub(p.started_ns) < PROBE_NS) {
                continue;
            }
            let Some(p) = e.probe.take() else { continue };
            let (one_word, crossed) = (p.lo_cross.hit(), p.lo_cross.hit() || p.hi_cross.hit());
            let swept = p.lo_own.hit() && p.hi_own.hit();
            for t in [key.lo_task, key.hi_task] {
                if let Some(n) = self.in_use.get_mut(&t) {
                    *n = n.saturating_sub(2);
                }
            }
            let mut events_back = 0;
            if let (false, true, Some(page)) = (
                crossed,
                swept,
                e.pages.iter_mut().find(|q| q.page == p.page),
            ) {
                page.apart = true;
                events_back = std::mem::take(&mut page.events);
                self.pages_apart += 1;
                found.apart_pages.push((e.pid, p.page));
            }
            if !swept {
                e.tries += 1;
            }
            let apart = e.pages.iter().filter(|q| q.apart).count();
            e.verdict = judge(crossed, swept, apart, e.pages.len(), e.tries);
            if one_word && !e.proven {
                e.proven = true;
                found.proven.push((*key, e.events));
            }
            match e.verdict {
                Verdict::Shared => self.shared += 1,
                Verdict::Apart => {
                    self.apart += 1;
                    events_back = e.events;
                    // Pages found apart on their own were told already.
                    let others = e.pages.iter().filter(|q| !q.apart);
                    found.apart_pages.extend(others.map(|q| (e.pid, q.page)));
                }
                Verdict::Unknown if !swept => e.next_probe_ns = now_ns + RETRY_NS,
                Verdict::Unknown => {}
            }
            if events_back > 0 {
                e.events -= events_back.min(e.events);
                self.events_dropped += events_back;
                back.push(TakeBack {
                    a: key.lo_task,
                    b: key.hi_task,
                    events: events_back,
                });
            }
        }
        if self.unavailable.is_some() {
            self.count_open();
            return found;
        }
        for (key, e) in self.edges.iter_mut() {
            let free = |t: &u32, in_use: &HashMap<u32, u8>| {
                in_use.get(t).copied().unwrap_or(0) + 2 <= PER_TASK
            };
            if e.verdict != Verdict::Unknown
                || e.probe.is_some()
                || e.seen < MIN_EVENTS
                || now_ns < e.next_probe_ns
                || !wanted(e.pid, key)
                || !free(&key.lo_task, &self.in_use)
                || !free(&key.hi_task, &self.in_use)
            {
                continue;
            }
            let (Some(lo_tid), Some(hi_tid)) = (tid_of(key.lo_task), tid_of(key.hi_task)) else {
                // A thread that ended: its edge stays as counted.
                e.verdict = Verdict::Shared;
                continue;
            };
            // A page not probed apart yet (with none left, the edge waits for new pages).
            let Some(page) = e.pages.iter().find(|p| !p.apart).map(|p| p.page) else {
                continue;
            };
            let (lo_word, hi_word) = (page + key.lo_off as u64, page + key.hi_off as u64);
            let set = || -> std::io::Result<Probe> {
                Ok(Probe {
                    started_ns: now_ns,
                    page,
                    lo_cross: Watchpoint::open(lo_tid, hi_word)?,
                    lo_own: Watchpoint::open(lo_tid, lo_word)?,
                    hi_cross: Watchpoint::open(hi_tid, hi_word - 8)?,
                    hi_own: Watchpoint::open(hi_tid, hi_word)?,
                })
            };
            match set() {
                Ok(p) => {
                    e.probe = Some(p);
                    self.probes += 1;
                    for t in [key.lo_task, key.hi_task] {
                        *self.in_use.entry(t).or_default() += 2;
                    }
                }
                Err(err) => match err.raw_os_error() {
                    // The thread ended, or its debug registers are taken (a debugger):
                    // this edge keeps counting.
                    Some(libc::ESRCH) | Some(libc::ENOSPC) => e.verdict = Verdict::Shared,
                    // No hardware breakpoints, or no permission: no edge can be probed.
                    _ => {
                        self.unavailable = Some(format!("hardware watchpoints refused: {err}"));
                        break;
                    }
                },
            }
        }
        self.count_open();
        found
    }

    fn count_open(&mut self) {
        self.open = (self.edges.values())
            .filter(|e| e.verdict == Verdict::Unknown)
            .count();
    }

    /// CDSM ageing, as the matrix's: an edge's events to take back age with the counts.
    pub fn age(&mut self) {
        for e in self.edges.values_mut() {
            e.events -= e.events >> 2;
            for p in &mut e.pages {
                p.events -= p.events >> 2;
            }
        }
    }

    /// Scales an edge's events to take back as the matrix's counts are scaled (see
    /// `Session::scale`).
    pub fn scale(&mut self, num: u64, den: u64) {
        for e in self.edges.values_mut() {
            e.events = scaled(e.events, num, den);
            for p in &mut e.pages {
                p.events = scaled(p.events, num, den);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edge_is_two_entry_offsets_lower_first_and_none_at_one_word() {
        let k = EdgeKey::of((3, 0x300), (5, 0x10)).unwrap();
        assert_eq!(
            (k.lo_task, k.lo_off, k.hi_task, k.hi_off),
            (5, 0x10, 3, 0x300)
        );
        assert_eq!(EdgeKey::of((3, 0x304), (5, 0x300)), None);
        assert_eq!(
            EdgeKey::of((3, 0x300), (5, 0x308)).map(|k| k.lo_task),
            Some(3)
        );
    }

    #[test]
    fn an_edge_is_apart_on_enough_pages_apart_and_none_crossed() {
        use Verdict::*;
        // A crossing on any page: shared, whatever came before.
        assert_eq!(judge(true, true, 4, 8, 0), Shared);
        assert_eq!(judge(true, false, 0, 1, 0), Shared);
        // Apart on APART_PAGES pages, or on all of them when fewer, but two at least.
        assert_eq!(judge(false, true, APART_PAGES, 8, 0), Apart);
        assert_eq!(judge(false, true, APART_PAGES - 1, 8, 0), Unknown);
        assert_eq!(judge(false, true, 2, 2, 0), Apart);
        assert_eq!(judge(false, true, 1, 1, 0), Unknown);
        // No sweep: tried again, then kept as shared.
        assert_eq!(judge(false, false, 0, 3, MAX_TRIES - 1), Unknown);
        assert_eq!(judge(false, false, 0, 3, MAX_TRIES), Shared);
    }

    #[test]
    fn later_pages_of_an_apart_edge_are_told_apart_once_per_retell_period() {
        let mut edges = PageEdges::default();
        let key = EdgeKey::of((0, 0), (1, 0x300)).unwrap();
        assert!(edges.event(7, key, 0x1000));
        edges.edges.get_mut(&key).unwrap().verdict = Verdict::Apart;
        let tick = |edges: &mut PageEdges, now: u64| edges.tick(now, |_, _| false, |_| None);
        let s = 1_000_000_000;
        assert!(tick(&mut edges, s).apart_pages.is_empty());
        // A page of the edge seen after its verdict: not counted, told at the next tick.
        assert!(!edges.event(7, key, 0x9000));
        assert!(!edges.event(7, key, 0x9000));
        assert_eq!(tick(&mut edges, 2 * s).apart_pages, [(7, 0x9000)]);
        // Again within the agent's memory of it: not told twice.
        assert!(!edges.event(7, key, 0x9000));
        assert!(tick(&mut edges, 3 * s).apart_pages.is_empty());
        // Once the agent has forgotten it, told again.
        assert!(!edges.event(7, key, 0x9000));
        assert_eq!(
            tick(&mut edges, 2 * s + RETELL_APART_NS).apart_pages,
            [(7, 0x9000)]
        );
    }

    #[test]
    fn edges_past_the_cap_count_and_are_not_remembered() {
        let mut edges = PageEdges::default();
        let key = |i: usize| {
            EdgeKey::of((0, 0), (1, 8 + 8 * (i % 500) as u16)).map(|mut k| {
                k.hi_task = 1 + (i / 500) as u32;
                k
            })
        };
        for i in 0..MAX_EDGES {
            assert!(edges.event(7, key(i).unwrap(), 0x1000));
        }
        let past = key(MAX_EDGES).unwrap();
        assert!(edges.event(7, past, 0x1000));
        assert_eq!((edges.edges.len(), edges.verdict(&past)), (MAX_EDGES, None));
    }

    /// A thread of this test process that touches `words` (8-byte words of `pages`) again
    /// and again until told to stop.
    struct Sweeper {
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
        tid: u32,
        join: std::thread::JoinHandle<()>,
    }

    /// Two page-aligned pages of 512 words each.
    #[repr(align(4096))]
    struct Pages([std::sync::atomic::AtomicU64; 1024]);

    fn sweep(pages: &'static Pages, words: Vec<usize>) -> Sweeper {
        use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
        use std::sync::Arc;
        let stop = Arc::new(AtomicBool::new(false));
        let tid = Arc::new(AtomicU32::new(0));
        let (s, t) = (stop.clone(), tid.clone());
        let join = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            t.store(unsafe { libc::gettid() } as u32, Ordering::Release);
            while !s.load(Ordering::Relaxed) {
                for &w in &words {
                    pages.0[w].fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        while tid.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        Sweeper {
            stop,
            tid: tid.load(Ordering::Acquire),
            join,
        }
    }

    /// Probes edge `key`, seen once on each of the two `pages`, whose tasks 0 and 1 are `a`
    /// and `b`, until it has a verdict; the verdict, the events taken back and whether it
    /// was proven, and the pages told apart (to the agent of pid 7). None when this machine
    /// has no hardware watchpoints.
    fn probe(pages: &Pages, key: EdgeKey, a: Sweeper, b: Sweeper) -> Option<Probed> {
        let mut edges = PageEdges::default();
        let base = pages.0.as_ptr() as u64;
        assert!(edges.event(7, key, base) && edges.event(7, key, base + 4096));
        let tids = [a.tid, b.tid];
        let t0 = crate::session::monotonic_ns();
        let (mut back, mut proven, mut told) = (0, Vec::new(), Vec::new());
        let verdict = loop {
            let now = crate::session::monotonic_ns();
            let found = edges.tick(now, |pid, _| pid == 7, |t| tids.get(t as usize).copied());
            back += found.apart.iter().map(|b| b.events).sum::<u64>();
            proven.extend(found.proven);
            told.extend(
                found
                    .apart_pages
                    .iter()
                    .map(|&(pid, page)| (pid, page - base)),
            );
            if let Some(why) = &edges.unavailable {
                eprintln!("{why}: nothing to check on this machine");
                break None;
            }
            let v = edges.verdict(&key).unwrap();
            if v != Verdict::Unknown || now - t0 > 5_000_000_000 {
                // Proven at most once, with the events noted on pages not found apart
                // before it.
                let one_word = edges.proven(&key);
                assert_eq!(
                    proven,
                    if one_word {
                        vec![(key, 2 - back)]
                    } else {
                        vec![]
                    }
                );
                assert_eq!(edges.open(), v == Verdict::Unknown);
                break Some((v, back, one_word, told));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        for s in [a, b] {
            s.stop.store(true, std::sync::atomic::Ordering::Relaxed);
            s.join.join().unwrap();
        }
        verdict
    }

    /// What `probe` saw: the verdict, events taken back, proven, pages told apart (pid,
    /// offset from the first page), in the order told.
    type Probed = (Verdict, u64, bool, Vec<(u32, u64)>);

    #[test]
    fn threads_either_side_of_an_edge_are_apart_unless_one_reads_across_on_some_page() {
        use std::sync::atomic::AtomicU64;
        let pages: &'static Pages =
            Box::leak(Box::new(Pages(std::array::from_fn(|_| AtomicU64::new(0)))));
        // On each page task 0 owns words 0..96, task 1 the rest.
        let (low, high) = (
            |p: usize| p * 512..p * 512 + 96,
            |p: usize| p * 512 + 96..p * 512 + 512,
        );
        let key = EdgeKey::of((0, 0), (1, 96 * 8)).unwrap();
        // Each touches its own words only: false sharing of both pages.
        let own =
            |f: &dyn Fn(usize) -> std::ops::Range<usize>| f(0).chain(f(1)).collect::<Vec<_>>();
        let Some(verdict) = probe(
            pages,
            key,
            sweep(pages, own(&low)),
            sweep(pages, own(&high)),
        ) else {
            return;
        };
        assert_eq!(verdict, (Verdict::Apart, 2, false, vec![(7, 0), (7, 4096)]));
        // Task 0 reads one word across on the second page only (a neighbour read in one of
        // two arrays): shared.
        let mut across = own(&low);
        across.push(512 + 96);
        let verdict = probe(pages, key, sweep(pages, across), sweep(pages, own(&high)));
        assert_eq!(verdict.map(|v| (v.0, v.2)), Some((Verdict::Shared, true)));
        // Task 1 reads the word below its entry on the second page (as a Fortran stencil
        // reads its neighbour's last word): shared, but not proven, since that word could
        // be task 1's own for all the probe knows.
        let mut below = own(&high);
        below.push(512 + 95);
        let verdict = probe(pages, key, sweep(pages, own(&low)), sweep(pages, below));
        assert_eq!(verdict.map(|v| (v.0, v.2)), Some((Verdict::Shared, false)));
    }
}
