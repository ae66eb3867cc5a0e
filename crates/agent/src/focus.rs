//! Where the re-arm budget goes once a page is seen shared, or likely to be.
//!
//! A uniform sample re-arms each page rarely (at 1 % of the pages per second, once in 100 s),
//! so a page two tasks share shows up as one fault now and the next one much later. So a
//! private page that faults after being re-armed is probed again PROBE_DELAY_NS later (up
//! to PROBE_TRIES times); when a probe's fault comes from another task the page is shared
//! and is re-armed every FOCUS_PERIOD_NS while that lasts. A page the same task faults on
//! again and again (SAME_TO_DEMOTE times; while searching, also not touched by the other for
//! OTHER_GONE_NS), or that more than MAX_TIDS tasks touch (a flag or a barrier every task
//! reads, whose faults only say who came first), or that is not touched again, leaves the
//! table. So does a page the detector found apart (two tasks each on their own part of it,
//! see its edges module; it counts none of their faults there), which stays out APART_NS.
//!
//! Where only a few pages are shared, as in a halo exchange (a page or two at each edge of a
//! task's block among thousands), a uniform sample would take seconds to hit one. But each
//! fault also tells which task uses that page: the table remembers the last KNOWN such
//! (page, task) pairs, and when two known pages not far apart belong to different tasks it
//! probes the page half-way between them, until the two sides are neighbours. Those two
//! pages, the edge between two tasks' data, are probed as above. A block edge is found in
//! log2(distance) probes.
//!
//! Which of the two searches gets the budget depends on what probes find (`Outcomes`). Until
//! 16 probes are done every sample is probed once, and those probes go first, so that the
//! phase is known within a fraction of a second. While under one probe in 16 (of the last
//! 16 or more) finds a page shared, sharing is taken to be rare and at block edges
//! ("searching"; also before the probes have said): each round serves one page per pair of
//! tasks found sharing, the bisection steps, narrowest bracket first and one per bracket, so
//! that edges are found one after the other, and the first tries of edge pages; then the
//! later tries of edge pages, one per pair of tasks either side of the edge. A step that
//! faulted is not probed (it said whose the page is); each page of an edge gets EDGE_TRIES
//! probes, and once one side is found shared the other side gets no more until the found
//! side leaves the table (then it gets them again at once), nor do the pair's edges in other
//! fields (`pair_found`); a pair's pages share the re-arm period; only one uniform sample in
//! SAMPLE_PROBE_EVERY is probed, once, and last (enough to notice that probes start finding
//! sharing; edge probes do not count there, they look where sharing is by construction).
//! While probes do find sharing (heap buffers read whole by another task), every sample is
//! probed twice and all due pages are served in turns of pairs, longest due first: there
//! the steps only split buffers both sides share anyway, and serving them first cost
//! bench/detect's 32-thread pipeline and master-worker about 0.08 of r.
//!
//! A pair of tasks found late catches up: pairs found sharing are served in turns, but one
//! found when the others have had many re-arms starts up to CATCH_UP re-arms behind the best
//! served and has the turns until it is level. In plain turns the pairs found last kept a
//! third to a fifth of the counts of those found first (layout-c and -f halo x8, snapshots
//! at 2 and 4.5 s), and a manager that maps on the counts cut them (a first remap cutting
//! two links of the chain, kept for the whole run).
//!
//! While searching and short of budget, pages found shared and the search take turns.
//! The re-arm thread gives at most half of each tick's budget to due pages (three quarters
//! while searching), the rest stays uniform, and wakes sooner while steps wait for their
//! faults. Pure bookkeeping (no system calls), under the agent's lock.

pub const PROBE_DELAY_NS: u64 = 50_000_000;
/// How often a page found shared is re-armed at most (while searching, a pair's pages
/// together). A halo's iteration takes milliseconds; at 50 ms its few edge pages could not
/// use the budget of the first 1.5 s (layout-c halo x4, 2026-11-26: 27-32 events 0.8 s
/// into the run, 30-54 at 20 ms).
pub const FOCUS_PERIOD_NS: u64 = 20_000_000;
/// A page re-armed but not touched within this time is forgotten.
const UNTOUCHED_NS: u64 = 1_000_000_000;
/// A page due this long ago and not re-armed yet (the budget went elsewhere) is dropped.
const STALE_NS: u64 = 500_000_000;
pub const ENTRIES: usize = 512;
const MAX_TIDS: usize = 2;
/// Pages whose last faulting task is remembered, how long, and the farthest two of them
/// may be apart to be bisected.
const KNOWN: usize = 1024;
const KNOWN_MAX_AGE_NS: u64 = 10_000_000_000;
const MAX_GAP: u64 = 1 << 30;
/// Not searching, the page across an edge is probed when its task was seen this long ago.
const EDGE_RECHECK_NS: u64 = 1_000_000_000;
/// While searching, an edge page gets its EDGE_TRIES again after this long only (at 1 s,
/// every fault of a page found shared gave the page across the edge 8 more probes a
/// second), and this many are remembered.
const EDGE_REPROBE_NS: u64 = 10_000_000_000;
const EDGES: usize = 64;
/// Pages the detector found apart (two tasks on their own parts of one page: false
/// sharing, whose faults it does not count) are kept out of the table this long, and this
/// many are remembered. In a Fortran COMMON halo every block edge of the source field is
/// such a page, and a pair found first there had its re-arms spent on it, uncounted
/// (layout-f halo x8, 2026-11-28: a link at 0 events for all of an 8-s run).
const APART_NS: u64 = 10_000_000_000;
const APART: usize = 64;
/// Pairs whose re-arms are counted (see `served`), and the most re-arms a pair found late
/// is behind the best-served one when it is first served: it catches up that many before
/// the others have their turns again.
const PAIRS: usize = 64;
const CATCH_UP: u32 = 32;
const PAGE: u64 = 4096;
const SAME_TO_DEMOTE: u8 = 8;
/// While searching, a page two tasks share leaves only when, besides SAME_TO_DEMOTE faults
/// in a row by one, the other has not faulted on it for this long. A halo's edge page is
/// touched first by its owner eight times in a row often enough that pairs found left after
/// 0.4 to 6 s and, their edges not probed again for EDGE_REPROBE_NS, stopped counting
/// (layout-c halo x8, 2026-11-26: 7 pairs found, 6 of them left).
const OTHER_GONE_NS: u64 = 2_000_000_000;
/// Probes of a page that one task faulted on before leave after this many faults by that
/// task again: a page two tasks take turns on shows the other one within two probes three
/// times in four.
const PROBE_TRIES: u8 = 2;
/// The two pages either side of an edge between two tasks' blocks get more: in a halo
/// exchange the owner touches its edge page in every sweep and the neighbour in every
/// other, so the neighbour comes first after a re-arm about one time in two on one side of
/// the edge and hardly ever on the other.
const EDGE_TRIES: u8 = 8;
/// While searching, the first this many go with the steps, the rest after them.
const EDGE_FIRST_TRIES: u8 = 2;
/// While searching, one uniform sample in this many is probed (enough to tell when probes
/// start finding sharing); the others, and bisection steps, are not probed at all.
const SAMPLE_PROBE_EVERY: u32 = 4;
const MAX_PROBES: usize = ENTRIES / 8;
/// Pages kept in focus per pair of tasks: every pair that shares gets re-armed about as
/// often, instead of the first pair found taking the whole table (a pipeline's stages
/// share thousands of pages each).
const PER_PAIR: usize = 8;
const MAX_STEPS: usize = ENTRIES / 4;

/// Outcomes of the last probes (halved every OUTCOMES_WINDOW): while probes rarely find a
/// page shared, few pages are (a halo among thousands of private pages) and the edges
/// between the tasks' blocks are where to look; while they often do, sharing is spread
/// over many pages and the probes find it faster than bisection.
#[derive(Clone, Copy, Default)]
struct Outcomes {
    done: u32,
    shared: u32,
}

const OUTCOMES_WINDOW: u32 = 64;

impl Outcomes {
    fn done(&mut self, shared: bool) {
        self.done += 1;
        self.shared += shared as u32;
        if self.done >= OUTCOMES_WINDOW {
            self.done /= 2;
            self.shared /= 2;
        }
    }

    /// Under 16 probes done: not known yet. Then under one in 16 found a page shared:
    /// searching; else sharing is spread.
    fn phase(&self) -> Phase {
        if self.done < 16 {
            Phase::Unknown
        } else if self.shared * 16 < self.done {
            Phase::Searching
        } else {
            Phase::Spread
        }
    }
}

/// What the probes say of where sharing is (see `Outcomes`). Until they say, the table works
/// as while searching, but probes every sample, once, so that they say it soon: at two
/// probes each and served by how long they were due, the first 16 outcomes took 0.8 s of
/// layout-c halo x4, and the bisection waited for them.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Phase {
    Unknown,
    Searching,
    Spread,
}

#[derive(Clone, Copy, Default)]
struct Entry {
    /// Page address; 0 when the entry is free.
    page: u64,
    /// When to re-arm it next; while `armed`, when to give up waiting for its fault.
    due: u64,
    armed: bool,
    /// The distinct tasks seen fault on it (none yet for a page half-way between two known
    /// ones), and the last one.
    tids: [u32; MAX_TIDS],
    ntids: u8,
    last: u32,
    /// Faults in a row by `last`.
    same: u8,
    /// Faults in a row by the one task seen so far after which the page leaves.
    tries: u8,
    /// A page either side of an edge between two tasks' blocks.
    edge: bool,
    /// For an edge page, the two tasks either side (`pair_key`): it takes turns with the
    /// pages found shared by that pair.
    between: u64,
    /// A bisection step: the width of the bracket it halves, in bytes.
    gap: u64,
    /// When a task other than the one before it last faulted on the page.
    other_seen: u64,
}

/// One key for the pair of tasks `a` and `b`, whichever order.
fn pair_key(a: u32, b: u32) -> u64 {
    (a.min(b) as u64) << 32 | a.max(b) as u64
}

/// All-zero is an empty table (it lives in the agent's zeroed State mapping).
pub struct Focus {
    entries: [Entry; ENTRIES],
    /// (page, task, when) of recent faults; page 0: free.
    known: [(u64, u32, u64); KNOWN],
    known_next: usize,
    /// How often probes found a page shared, lately.
    probes: Outcomes,
    /// Uniform samples seen (which of them to probe while searching).
    samples: u32,
    /// Pages lately made edge probes, and when.
    edges: [(u64, u64); EDGES],
    edges_next: usize,
    /// Pages the detector found apart, and when (see APART_NS).
    apart: [(u64, u64); APART],
    apart_next: usize,
    /// Re-arms of pages found shared, per pair of tasks (pair key, count; key 0: free).
    served: [(u64, u32); PAIRS],
    /// Pages seen shared (two tasks or more) so far, and re-arms given to due pages.
    pub found_shared: u64,
    pub rearms: u64,
    /// Pages served to the search lately minus those to pages found shared (see
    /// `share_with_search`).
    search_lead: i8,
}

impl Focus {
    /// Whether probes lately rarely find sharing, so that bisection steps lead (see
    /// `Outcomes`).
    pub fn searching(&self) -> bool {
        self.probes.phase() == Phase::Searching
    }

    /// Task `tid` faulted at `now` on re-armed page `page`.
    pub fn fault(&mut self, page: u64, tid: u32, now: u64) {
        self.track(page, tid, now);
        self.learn(page, tid, now);
    }

    fn track(&mut self, page: u64, tid: u32, now: u64) {
        let phase = self.probes.phase();
        let searching = phase != Phase::Spread;
        let Some(k) = self.entries.iter().position(|e| e.page == page) else {
            // A uniform sample: probe it once more. While searching, a sample's probes
            // would find sharing under one time in 16 and took most of the budget the
            // bisection needs (layout-c halo x8: edges of 1-2 of 7 pairs found in 8 s).
            self.samples = self.samples.wrapping_add(1);
            let tries = match phase {
                Phase::Spread => PROBE_TRIES,
                Phase::Unknown => 1,
                Phase::Searching if self.samples.is_multiple_of(SAMPLE_PROBE_EVERY) => 1,
                Phase::Searching => return,
            };
            let _ = self.add(page, now + PROBE_DELAY_NS, Some(tid), tries);
            return;
        };
        // While searching, a pair's pages share the period: with the budget to spare (the
        // first 1.5 s), a pair found on two pages got twice the re-arms, and events, of a
        // pair found on one (halo x4: a first remap cut two links of three). Where sharing
        // is spread the budget is short anyway and the turns share it (pipeline x32 lost
        // 0.07 of r with the shared period).
        let pages = match self.entries[k].ntids {
            2 if searching => {
                let pair = pair_key(self.entries[k].tids[0], self.entries[k].tids[1]);
                let of_pair = |e: &Entry| {
                    e.page != 0 && e.ntids == 2 && pair_key(e.tids[0], e.tids[1]) == pair
                };
                self.entries.iter().filter(|e| of_pair(e)).count() as u64
            }
            _ => 1,
        };
        let e = &mut self.entries[k];
        e.armed = false;
        e.due = now + FOCUS_PERIOD_NS * pages;
        if e.ntids == 0 && searching && !e.edge {
            // A bisection step has done its job: it said whose the page is.
            e.page = 0;
        } else if e.ntids == 0 {
            // A bisection probe: from now on an ordinary one.
            (e.tids[0], e.ntids, e.last) = (tid, 1, tid);
            e.due = now + PROBE_DELAY_NS;
        } else if tid == e.last {
            e.same = e.same.saturating_add(1);
            let other_gone = !searching || now.saturating_sub(e.other_seen) >= OTHER_GONE_NS;
            if (e.ntids == 1 && e.same >= e.tries) || (e.same >= SAME_TO_DEMOTE && other_gone) {
                // Edge probes are left out: they look where sharing is by construction.
                if e.ntids == 1 && !e.edge {
                    self.probes.done(false);
                }
                e.page = 0;
                if e.ntids == 2 && e.edge {
                    let other = if e.tids[0] == tid {
                        e.tids[1]
                    } else {
                        e.tids[0]
                    };
                    self.probe_across(page, tid, other, now);
                }
            }
        } else {
            e.same = 0;
            e.last = tid;
            e.other_seen = now;
            if !e.tids[..e.ntids as usize].contains(&tid) {
                if e.ntids as usize == MAX_TIDS {
                    e.page = 0;
                    return;
                }
                e.tids[e.ntids as usize] = tid;
                e.ntids += 1;
                if e.ntids == 2 && !e.edge {
                    self.probes.done(true);
                }
                let pair = self.entries[k].tids;
                if searching {
                    // The pair is found: its other edges' pages, the one across this edge
                    // (which the neighbour hardly ever touches first) and those in other
                    // fields, need no more probes (see `pair_found`). Nor are they remembered
                    // as probed: if this page is found apart (false sharing: in a Fortran
                    // COMMON halo the source field's block edges) the pair is lost, and
                    // they must be probed again at their next fault, not EDGE_REPROBE_NS
                    // later (layout-f halo x8, 2026-11-28: a pair found at 0.00 s on the
                    // source field, told apart at 0.11 s, had 2 events in 8 s).
                    let key = pair_key(pair[0], pair[1]);
                    for k in 0..ENTRIES {
                        let e = self.entries[k];
                        if e.page != 0 && e.edge && e.ntids < 2 && e.between == key {
                            self.entries[k].page = 0;
                            for slot in self.edges.iter_mut().filter(|(p, _)| *p == e.page) {
                                *slot = (0, 0);
                            }
                        }
                    }
                }
                self.found_shared += 1;
                let same_pair = |e: &Entry| {
                    e.page != 0 && e.ntids == 2 && (e.tids == pair || e.tids == [pair[1], pair[0]])
                };
                if self.entries.iter().filter(|e| same_pair(e)).count() > PER_PAIR {
                    self.entries[k].page = 0;
                }
            }
        }
    }

    /// Remembers that `tid` uses `page`; probes towards the edge with the nearest known
    /// page on either side that another task uses. While searching, from the known page of
    /// `tid` nearest to that one (the narrowest bracket known), not from `page`: a chain of
    /// steps that died (a step never served or never touched) left its innermost pages
    /// known, and a fault farther inside the block, where most uniform samples land, found
    /// its own task's pages nearest and restarted nothing; a pair whose edges were lost so
    /// kept 0 events for the rest of an 8-s run (layout-f halo x8, 2026-11-28).
    fn learn(&mut self, page: u64, tid: u32, now: u64) {
        let mut slot = None;
        let fresh = |at: u64| now.saturating_sub(at) <= KNOWN_MAX_AGE_NS;
        // The nearest known page of another task either side (0 / MAX: none).
        let (mut below, mut above) = ((0u64, 0u32, 0u64), (u64::MAX, 0u32, 0u64));
        for (k, &(p, t, at)) in self.known.iter().enumerate() {
            if p == 0 || !fresh(at) {
                continue;
            }
            if p == page {
                slot = Some(k);
            } else if t == tid {
                continue;
            } else if p < page && p > below.0 {
                below = (p, t, at);
            } else if p > page && p < above.0 {
                above = (p, t, at);
            }
        }
        // Between them and `page` every known page is `tid`'s: the nearest to each is where
        // the bracket starts.
        let (mut near_below, mut near_above) = (page, page);
        for &(p, _, at) in self.known.iter() {
            if p != 0 && fresh(at) && p > below.0 && p < near_below {
                near_below = p;
            } else if p != 0 && fresh(at) && p < above.0 && p > near_above {
                near_above = p;
            }
        }
        let k = slot.unwrap_or_else(|| {
            self.known_next = (self.known_next + 1) % KNOWN;
            self.known_next
        });
        self.known[k] = (page, tid, now);
        let searching = self.probes.phase() != Phase::Spread;
        for ((q, t, at), near) in [(below, near_below), (above, near_above)] {
            // Where sharing is spread, only from the page nearest the other task's.
            if q == 0 || q == u64::MAX || (!searching && near != page) {
                continue;
            }
            let page = near;
            let gap = q.abs_diff(page);
            if gap == PAGE {
                if self.probes.phase() != Phase::Spread {
                    // Each side of the edge is probed EDGE_TRIES times, at most once per
                    // EDGE_REPROBE_NS (a fault on one side finds the other again and again),
                    // unless the pair is found already.
                    let between = pair_key(tid, t);
                    if self.pair_found(between) {
                        continue;
                    }
                    for p in [page, q] {
                        if self.new_edge(p, now) {
                            match self.entries.iter_mut().find(|e| e.page == p) {
                                Some(e) => {
                                    (e.tries, e.edge, e.between) =
                                        (e.tries.max(EDGE_TRIES), true, between)
                                }
                                None => {
                                    if let Some(e) = self.add(p, now, None, EDGE_TRIES) {
                                        e.between = between;
                                    }
                                }
                            }
                        }
                    }
                } else if now.saturating_sub(at) > EDGE_RECHECK_NS {
                    // The other side's page is probed too, unless it just was (it is in the
                    // table then, or was found not shared: no ping-pong between them).
                    let _ = self.add(q, now, None, PROBE_TRIES);
                }
            } else if gap <= MAX_GAP && !self.step_between(q.min(page), q.max(page)) {
                let mid = (q.min(page) + gap / 2) & !(PAGE - 1);
                if let Some(e) = self.add(mid, now, None, PROBE_TRIES) {
                    e.gap = gap;
                }
            }
        }
    }

    /// Whether a page of the pair `pair` is in the table found shared. While searching, one
    /// page is as good as several: a pair's pages share the re-arm period, so more of them
    /// add no events, while each edge of the pair in another field took EDGE_TRIES probes a
    /// side, most of them for nothing (layout-c halo: the source term's edges are read by
    /// their owner only, 8 or more probes a side). Not recorded as an edge probe, so the
    /// next fault there makes it one if the pair has been lost meanwhile.
    fn pair_found(&self, pair: u64) -> bool {
        (self.entries.iter())
            .any(|e| e.page != 0 && e.ntids == 2 && pair_key(e.tids[0], e.tids[1]) == pair)
    }

    /// A found edge page of `owner` and `other` left the table (its owner came first again
    /// and again): the page across the edge, last seen used by `other`, is probed as an
    /// edge again at once. Which side of an edge the neighbour comes first on can change as the
    /// threads drift, and without this the pair was lost for EDGE_REPROBE_NS (layout-c halo
    /// x8, 2026-11-28: a link found at 0.25 s kept 6 events for the rest of a 4-s run).
    fn probe_across(&mut self, page: u64, owner: u32, other: u32, now: u64) {
        let across = [page.wrapping_sub(PAGE), page + PAGE]
            .into_iter()
            .find(|&q| {
                self.known.iter().any(|&(p, t, at)| {
                    p == q && t == other && now.saturating_sub(at) <= KNOWN_MAX_AGE_NS
                })
            });
        let Some(q) = across else { return };
        for slot in self.edges.iter_mut().filter(|(p, _)| *p == q) {
            *slot = (0, 0);
        }
        if self.new_edge(q, now) {
            if let Some(e) = self.add(q, now, None, EDGE_TRIES) {
                e.between = pair_key(owner, other);
            }
        }
    }

    /// Whether a bisection step inside (lo, hi) waits for its fault: one step per bracket,
    /// or every fault near an edge starts a chain of its own towards it (layout-c halo x8:
    /// about 12 steps to find one edge instead of 6).
    fn step_between(&self, lo: u64, hi: u64) -> bool {
        self.entries
            .iter()
            .any(|e| e.page > lo && e.page < hi && e.ntids == 0 && !e.edge)
    }

    /// The detector found `page` apart: it leaves the table and is not taken in again for
    /// APART_NS.
    pub fn apart(&mut self, page: u64, now: u64) {
        for e in self.entries.iter_mut().filter(|e| e.page == page) {
            e.page = 0;
        }
        self.apart_next = (self.apart_next + 1) % APART;
        self.apart[self.apart_next] = (page, now);
    }

    fn is_apart(&self, page: u64, now: u64) -> bool {
        (self.apart.iter()).any(|&(p, at)| p == page && now.saturating_sub(at) <= APART_NS)
    }

    /// Whether `page` was not made an edge probe within EDGE_REPROBE_NS; remembers it.
    fn new_edge(&mut self, page: u64, now: u64) -> bool {
        if self
            .edges
            .iter()
            .any(|&(p, at)| p == page && now.saturating_sub(at) <= EDGE_REPROBE_NS)
        {
            return false;
        }
        self.edges_next = (self.edges_next + 1) % EDGES;
        self.edges[self.edges_next] = (page, now);
        true
    }

    /// A new entry for `page` due at `due` (nothing when the page has one or the table is
    /// full). Probes of single samples (`tid` given) and bisection steps are bounded, so that
    /// pages found shared keep most of the table and the budget is not spent on waiting
    /// lists: at the steady 75 pages/s, 64 probes are under a second's work.
    fn add(&mut self, page: u64, due: u64, tid: Option<u32>, tries: u8) -> Option<&mut Entry> {
        if self.entries.iter().any(|e| e.page == page) || self.is_apart(page, due) {
            return None;
        }
        let kind = tid.is_some() as u8;
        let same_kind = self
            .entries
            .iter()
            .filter(|e| e.page != 0 && e.ntids == kind)
            .count();
        if same_kind >= if tid.is_some() { MAX_PROBES } else { MAX_STEPS } {
            return None;
        }
        let e = self.entries.iter_mut().find(|e| e.page == 0)?;
        *e = Entry {
            page,
            due,
            armed: false,
            tids: [tid.unwrap_or(0), 0],
            ntids: tid.is_some() as u8,
            last: tid.unwrap_or(0),
            same: 0,
            tries,
            edge: tries == EDGE_TRIES,
            between: 0,
            gap: 0,
            other_seen: due,
        };
        Some(e)
    }

    /// Fills `out` with the pages due at `now` (marking them armed) and returns how many:
    /// round-robin over the pairs of tasks, longest due first within each round, so that
    /// every pair found sharing gets about the same share of a budget too small for all.
    /// While searching (see `Outcomes`), a round is a page of each pair found, the bisection
    /// steps (narrowest bracket first) and the first tries of edge pages, then the later
    /// edge tries by pair; probes of uniform samples come last (first until the probes have
    /// said where sharing is).
    /// Forgets pages armed earlier and never touched since, and probes and bisection steps
    /// due for over STALE_NS that the budget never reached. (Serving pages found shared
    /// first starved the search: a pipeline's first pair found kept the budget and the other
    /// pairs were never found, r 0.5 at 8 threads against 0.88 in turn. Serving the longest
    /// due page first gave each pair a share of its pages in the table, 1 to PER_PAIR:
    /// pipeline x8's equal links were counted 15 to 47 in one run, and the first remap cut
    /// the two weakest-looking instead of the middle one. In a halo, where sharing is at
    /// block edges only, steps served in turn with everything else went breadth first:
    /// layout-c halo x8 found its first of 21 edges after 150 steps, 1.4 s.)
    pub fn take_due(&mut self, now: u64, out: &mut [u64]) -> usize {
        let phase = self.probes.phase();
        // (class, pair key, order key, due, entry); probes and steps are pairs of their own.
        let mut due = [(0u8, 0u64, 0u64, 0u64, 0u16); ENTRIES];
        let mut ndue = 0;
        for (k, e) in self.entries.iter_mut().enumerate() {
            if e.page == 0 || e.due > now {
                continue;
            }
            if e.armed || (e.ntids < 2 && now - e.due > STALE_NS) {
                e.page = 0;
                continue;
            }
            let pair = if e.ntids == 2 {
                pair_key(e.tids[0], e.tids[1])
            } else if e.between != 0 {
                e.between
            } else {
                u64::MAX - k as u64
            };
            // While searching, a round serves a page of each pair found, the steps
            // (narrowest bracket first) and the first tries of edge pages; then the later
            // tries of edge pages, one per pair of tasks either side; then probes of samples.
            // Served after every step, the pages of the first pairs found waited while the
            // bisection went on elsewhere (halo x4: pairs found at 0.2-0.4 s, their pages
            // re-armed once between 0.5 and 0.75 s); served after every page found shared,
            // the later edge tries starved and went stale once two pairs of three were
            // found; as turns of their own, edges of a field only its owner reads took half
            // the focus budget from 0.75 to 1.5 s. Until the probes say where sharing is,
            // theirs go first: the phase waits on their outcomes (served after the steps and
            // edges, pipeline x32 stayed unjudged for all of a 2-s run, r 0.6-0.7, not 0.9).
            let (class, key) = match phase {
                Phase::Spread => (0, 0),
                Phase::Unknown if e.ntids == 1 && !e.edge => (0, 0),
                _ if e.ntids == 2 => (0, 0),
                _ if e.ntids == 0 || (e.edge && e.same < EDGE_FIRST_TRIES) => (0, e.gap),
                _ if e.edge => (1, 0),
                _ => (2, 0),
            };
            due[ndue] = (class, pair, key, e.due, k as u16);
            ndue += 1;
        }
        // Rank within the pair (0 = its longest due page), behind by as many re-arms as the
        // pair has had more than the least served pair due; serve by (class, rank, key, due).
        due[..ndue].sort_unstable();
        let best = self.best_served();
        let least = due[..ndue]
            .iter()
            .filter(|d| self.entries[d.4 as usize].ntids == 2)
            .map(|d| self.served_of(d.1, best))
            .min()
            .unwrap_or(0);
        let mut order = [(0u8, 0u16, 0u64, 0u64, 0u16); ENTRIES];
        for i in 0..ndue {
            let (class, pair, key, at, k) = due[i];
            let rank = if i > 0 && (class, pair) == (due[i - 1].0, due[i - 1].1) {
                order[i - 1].1 + 1
            } else if self.entries[k as usize].ntids == 2 {
                (self.served_of(pair, best) - least).min(u16::MAX as u32) as u16
            } else {
                0
            };
            order[i] = (class, rank, key, at, k);
        }
        let n = ndue.min(out.len());
        if n < ndue && phase == Phase::Searching {
            self.share_with_search(&mut order[..ndue], n);
        } else if n < ndue {
            order[..ndue].select_nth_unstable(n);
        }
        for (slot, &(_, _, _, _, k)) in out.iter_mut().zip(&order[..n]) {
            if self.entries[k as usize].ntids == 2 {
                let [a, b] = self.entries[k as usize].tids;
                self.count_served(pair_key(a, b));
            }
            let e = &mut self.entries[k as usize];
            *slot = e.page;
            e.armed = true;
            e.due = now + UNTOUCHED_NS;
        }
        self.rearms += n as u64;
        n
    }

    /// Puts the `n` entries to serve first in `order`: in its order, but taking turns between
    /// pages found shared and the search (steps, edge and sample probes), so that neither
    /// starves the other when the budget is short. Served in order only, the pages of the
    /// pairs found first took all of it and the other edges were never found (layout-c
    /// halo x8, 2026-11-26: 5 of 7 pairs found, the last at 1.5 s).
    fn share_with_search(&mut self, order: &mut [(u8, u16, u64, u64, u16)], n: usize) {
        order.sort_unstable();
        let found = |o: &(u8, u16, u64, u64, u16)| self.entries[o.4 as usize].ntids == 2;
        let (mut next_found, mut next_search) = (0, 0);
        let mut picked = [(0u8, 0u16, 0u64, 0u64, 0u16); ENTRIES];
        for slot in picked.iter_mut().take(n) {
            while next_found < order.len() && !found(&order[next_found]) {
                next_found += 1;
            }
            while next_search < order.len() && found(&order[next_search]) {
                next_search += 1;
            }
            let take_found = match (next_found < order.len(), next_search < order.len()) {
                (true, true) => self.search_lead >= 0,
                (found_left, _) => found_left,
            };
            let i = if take_found {
                &mut next_found
            } else {
                &mut next_search
            };
            *slot = order[*i];
            *i += 1;
            self.search_lead = (self.search_lead + if take_found { -1 } else { 1 }).clamp(-2, 2);
        }
        order[..n].copy_from_slice(&picked[..n]);
    }

    /// Re-arms of pair `pair`'s pages found shared so far: a pair found late starts
    /// CATCH_UP behind the best served one (so it is served first until it caught up) and
    /// no further (or the others would wait for all of it).
    fn served_of(&self, pair: u64, best: u32) -> u32 {
        let mine = self.served.iter().find(|s| s.0 == pair).map_or(0, |s| s.1);
        mine.max(best.saturating_sub(CATCH_UP))
    }

    fn best_served(&self) -> u32 {
        self.served.iter().map(|s| s.1).max().unwrap_or(0)
    }

    fn count_served(&mut self, pair: u64) {
        let start = self.served_of(pair, self.best_served());
        if let Some(s) = self.served.iter_mut().find(|s| s.0 == pair) {
            s.1 = start + 1;
        } else if let Some(s) = self.served.iter_mut().min_by_key(|s| (s.0 != 0, s.1)) {
            // A free slot, else the least served pair's (it is served first anyway).
            *s = (pair, start + 1);
        }
    }

    /// When the re-arm thread should look at the table next: when its next page not armed
    /// yet falls due (`now` if one is due already), or within `soon` while a bisection
    /// step waits for its fault (which makes the next step, due at once). None where
    /// sharing is spread: there the budget, not the ticks, limits the re-arms, and waking
    /// every 10 ms for the pages due tripled the agents' CPU (bench/manager's heap
    /// workloads, 8 threads: 0.15-0.30 % -> 0.44-0.67 % of the program's).
    pub fn next_due(&self, now: u64, soon: u64) -> Option<u64> {
        if self.probes.phase() == Phase::Spread {
            return None;
        }
        self.entries
            .iter()
            .filter(|e| e.page != 0)
            .map(|e| match (e.armed, e.ntids) {
                (false, _) => e.due.max(now),
                (true, 0) => now + soon,
                (true, _) => u64::MAX,
            })
            .min()
            .filter(|&at| at != u64::MAX)
    }

    /// Whether `page` is in the table as a probe of a sample, whose question (which task
    /// comes next) re-arming the huge page around it answers as well (the agent's huge
    /// module). Bisection steps, edge pages and pages found shared ask about one page. (Steps
    /// while sharing is spread taken whole too cost layout-c stencil x8 under THP `always`
    /// its r: 0.62 in 3 of 3 runs against 0.92-0.99, 2026-11-29.)
    pub fn may_take_huge_page(&self, page: u64) -> bool {
        (self.entries.iter()).any(|e| e.page == page && e.ntids == 1 && !e.edge)
    }

    /// The page was not re-armed after all (taken out by the program, no free slot): it is
    /// due again at the next tick.
    pub fn not_armed(&mut self, page: u64, now: u64) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.page == page) {
            e.armed = false;
            e.due = now;
        }
    }

    /// The program unmapped, moved or discarded [start, end).
    pub fn forget(&mut self, start: u64, end: u64) {
        for e in self.entries.iter_mut() {
            if start <= e.page && e.page < end {
                e.page = 0;
            }
        }
        for k in self.known.iter_mut() {
            if start <= k.0 && k.0 < end {
                k.0 = 0;
            }
        }
    }

    /// Pages in the table (probes and shared ones).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.iter().filter(|e| e.page != 0).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Box<Focus> {
        Box::new(Focus {
            entries: [Entry::default(); ENTRIES],
            known: [(0, 0, 0); KNOWN],
            known_next: 0,
            edges: [(0, 0); EDGES],
            edges_next: 0,
            apart: [(0, 0); APART],
            apart_next: 0,
            served: [(0, 0); PAIRS],
            probes: Outcomes::default(),
            samples: 0,
            found_shared: 0,
            rearms: 0,
            search_lead: 0,
        })
    }

    /// A table whose last 16 probes found no page shared: searching.
    fn searching_table() -> Box<Focus> {
        let mut f = table();
        f.probes = Outcomes {
            done: 16,
            shared: 0,
        };
        assert_eq!(f.probes.phase(), Phase::Searching);
        f
    }

    /// A table whose probes found sharing often: spread.
    fn spread_table() -> Box<Focus> {
        let mut f = table();
        f.probes = Outcomes {
            done: 16,
            shared: 8,
        };
        assert_eq!(f.probes.phase(), Phase::Spread);
        f
    }

    fn due(f: &mut Focus, now: u64) -> Vec<u64> {
        let mut out = [0; 16];
        let n = f.take_due(now, &mut out);
        out[..n].to_vec()
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn a_sample_is_probed_and_a_private_page_leaves() {
        let mut f = spread_table();
        f.fault(0x1000, 7, 0);
        assert!(
            due(&mut f, 10 * MS).is_empty(),
            "not before the probe delay"
        );
        assert_eq!(due(&mut f, 50 * MS), [0x1000]);
        assert!(due(&mut f, 60 * MS).is_empty(), "armed: not taken twice");
        f.fault(0x1000, 7, 70 * MS); // the same task again
        assert_eq!(due(&mut f, 120 * MS), [0x1000], "a second try");
        f.fault(0x1000, 7, 130 * MS);
        assert_eq!(f.len(), 0, "PROBE_TRIES faults by the one task: not shared");
        assert_eq!(f.found_shared, 0);
    }

    #[test]
    fn a_shared_page_is_re_armed_every_period_until_one_task_keeps_it() {
        let mut f = spread_table();
        f.fault(0x2000, 1, 0);
        assert_eq!(due(&mut f, 50 * MS), [0x2000]);
        f.fault(0x2000, 2, 60 * MS);
        assert_eq!(f.found_shared, 1);
        for k in 0..10u64 {
            let t = 110 * MS + k * 50 * MS;
            assert_eq!(due(&mut f, t), [0x2000], "period {k}");
            f.fault(0x2000, 1 + (k % 2) as u32, t);
        }
        // Task 1 alone from now on: demoted after SAME_TO_DEMOTE faults in a row.
        let mut t = 700 * MS;
        for _ in 0..=SAME_TO_DEMOTE {
            assert_eq!(due(&mut f, t), [0x2000]);
            f.fault(0x2000, 1, t);
            t += 50 * MS;
        }
        assert_eq!(f.len(), 0);
    }

    #[test]
    fn while_searching_a_shared_page_stays_until_the_other_task_is_gone_a_while() {
        let mut f = searching_table();
        entry(&mut f, 0x2000, &[1, 2], 0);
        f.fault(0x2000, 2, 0);
        // A halo's edge page: its owner comes first many times in a row, the neighbour
        // still reads it.
        let mut t = 0;
        for _ in 0..3 * SAME_TO_DEMOTE as u64 {
            t += 50 * MS;
            f.fault(0x2000, 1, t);
        }
        assert_eq!(f.len(), 1, "the neighbour was seen {} ms ago", t / MS);
        // The clock runs from the owner's first fault after the neighbour's, at 50 ms.
        while t < 50 * MS + OTHER_GONE_NS {
            t += 50 * MS;
            f.fault(0x2000, 1, t);
        }
        assert_eq!(f.len(), 0, "gone after {} ms", t / MS);
    }

    #[test]
    fn while_searching_pages_found_and_the_search_take_turns() {
        let mut f = searching_table();
        // Eight pairs found sharing, each due; one bisection step between tasks 9 and 10.
        for k in 0..8u64 {
            entry(&mut f, (1 + k) << 40, &[k as u32 * 2, k as u32 * 2 + 1], 0);
        }
        f.fault(1 << 30, 9, 0);
        f.fault((1 << 30) + (64 << 12), 10, 0);
        let step = 1 << 30 | 32 << 12;
        // A budget of two pages a tick: the step is served in the first tick, not after
        // all eight pairs.
        let mut out = [0u64; 2];
        let n = f.take_due(MS, &mut out);
        assert_eq!(n, 2);
        assert!(out.contains(&step), "{out:x?}");
        assert_eq!(out.iter().filter(|&&p| p >= 1 << 40).count(), 1);
    }

    #[test]
    fn barrier_pages_and_untouched_pages_leave() {
        let mut f = spread_table();
        f.fault(0x3000, 1, 0);
        assert_eq!(due(&mut f, 50 * MS), [0x3000]);
        f.fault(0x3000, 2, 50 * MS);
        assert_eq!(due(&mut f, 100 * MS), [0x3000]);
        f.fault(0x3000, 3, 100 * MS);
        assert_eq!(f.len(), 0, "a third task: a flag or barrier page");
        let mut g = spread_table();
        g.fault(0x4000, 1, 0);
        assert_eq!(due(&mut g, 50 * MS), [0x4000]);
        assert!(due(&mut g, 500 * MS).is_empty());
        assert!(
            due(&mut g, 1100 * MS).is_empty(),
            "armed and untouched for 1 s: forgotten"
        );
        assert_eq!(g.len(), 0);
    }

    #[test]
    fn bisection_finds_the_edge_between_two_tasks_blocks() {
        // Task 1 uses the pages below page 70, task 2 the ones from 70 on.
        let owner = |page: u64| if page >> 12 < 70 { 1 } else { 2 };
        let mut f = table();
        let mut t = 0;
        f.fault(16 << 12, 1, t);
        f.fault(80 << 12, 2, t);
        let mut probed = Vec::new();
        for _ in 0..12 {
            t += MS;
            for page in due(&mut f, t) {
                probed.push(page >> 12);
                f.fault(page, owner(page), t);
            }
        }
        assert_eq!(&probed[..3], [48, 64, 72], "half-way each time");
        assert!(
            probed.contains(&69) && probed.contains(&70),
            "the edge: {probed:?}"
        );
        assert!(
            probed.len() <= 10,
            "log2(64) steps and the edge: {probed:?}"
        );
        // Known pages of the same task: nothing to bisect.
        let mut g = table();
        g.fault(16 << 12, 1, 0);
        g.fault(80 << 12, 1, 0);
        assert!(due(&mut g, MS).is_empty());
    }

    #[test]
    fn a_bisection_that_died_restarts_from_a_fault_farther_inside_the_block() {
        // Task 1 uses the pages below page 70, task 2 the ones from 70 on.
        let mut f = searching_table();
        f.fault(60 << 12, 1, 0);
        f.fault(75 << 12, 2, 0);
        // The step half-way is never served: it goes stale.
        let t = STALE_NS + 2 * MS;
        assert!(!due(&mut f, t).contains(&(67 << 12)), "stale");
        assert!(due(&mut f, t + MS).is_empty());
        // A fault of task 2 far from the edge: the bracket is still 60..75, from task 2's
        // page nearest to task 1's.
        f.fault(100 << 12, 2, t + 2 * MS);
        assert_eq!(due(&mut f, t + 3 * MS), [67 << 12]);
        // Where sharing is spread, only faults next to the other task's pages bisect.
        let mut g = spread_table();
        g.fault(60 << 12, 1, 0);
        g.fault(75 << 12, 2, 0);
        g.fault(100 << 12, 2, 0);
        let steps = |g: &Focus| {
            (g.entries.iter())
                .filter(|e| e.page != 0 && e.ntids == 0)
                .count()
        };
        assert_eq!(steps(&g), 1, "one step, between 60 and 75");
    }

    #[test]
    fn outcomes_say_search_while_probes_rarely_find_sharing() {
        let mut o = Outcomes::default();
        for _ in 0..15 {
            o.done(false);
        }
        assert_eq!(o.phase(), Phase::Unknown, "too few probes to judge");
        o.done(false);
        assert_eq!(o.phase(), Phase::Searching);
        for _ in 0..2 {
            o.done(true);
        }
        assert_eq!(o.phase(), Phase::Spread, "2 of 18 found sharing");
        // The window halves: old outcomes fade.
        for _ in 0..200 {
            o.done(false);
        }
        assert!(o.done < OUTCOMES_WINDOW && o.phase() == Phase::Searching);
    }

    #[test]
    fn while_searching_edge_pages_get_more_probes() {
        let mut f = searching_table();
        let mut t = 0;
        // Pages 69 (task 1) and 70 (task 2) are an edge; task 1 keeps touching 69 first.
        f.fault(69 << 12, 1, t);
        f.fault(70 << 12, 2, t);
        let mut seen = Vec::new();
        for _ in 0..EDGE_TRIES as usize + 2 {
            t += PROBE_DELAY_NS;
            for page in due(&mut f, t) {
                seen.push(page >> 12);
                f.fault(page, if page >> 12 == 69 { 1 } else { 2 }, t);
            }
        }
        let n69 = seen.iter().filter(|&&p| p == 69).count();
        assert!(
            n69 >= EDGE_TRIES as usize - 1,
            "page 69 probed {n69} times: {seen:?}"
        );
        // Spread: the edge's other side gets an ordinary probe only.
        let mut g = spread_table();
        g.fault(69 << 12, 1, 0);
        g.fault(70 << 12, 2, 0);
        let mut n = 0;
        let mut t = 0;
        for _ in 0..EDGE_TRIES as usize + 2 {
            t += PROBE_DELAY_NS;
            for page in due(&mut g, t) {
                n += (page >> 12 == 69) as usize;
                g.fault(page, if page >> 12 == 69 { 1 } else { 2 }, t);
            }
        }
        assert!(n <= PROBE_TRIES as usize + 1, "{n}");
    }

    /// An entry as `track` leaves it: a sample probe (one task) or a shared page (two).
    fn entry(f: &mut Focus, page: u64, tids: &[u32], due: u64) {
        let e = f.entries.iter_mut().find(|e| e.page == 0).unwrap();
        *e = Entry {
            page,
            due,
            tids: [tids[0], *tids.get(1).unwrap_or(&0)],
            ntids: tids.len() as u8,
            last: tids[0],
            tries: PROBE_TRIES,
            ..Entry::default()
        };
    }

    #[test]
    fn while_searching_a_round_is_a_page_per_pair_then_steps_narrowest_first() {
        let mut f = searching_table();
        // Two pages of one pair found shared and a sample's probe, all due long ago.
        entry(&mut f, 1 << 40, &[1, 2], 0);
        entry(&mut f, 3 << 40, &[1, 2], 0);
        entry(&mut f, 2 << 40, &[3], 0);
        let t = 400 * MS;
        // Two brackets: 64 pages wide at 1 GiB, 16 wide at 2 GiB (task 2 between them).
        f.fault(1 << 30, 1, t);
        f.fault((1 << 30) + (64 << 12), 2, t);
        f.fault(2 << 30, 2, t);
        f.fault((2 << 30) + (16 << 12), 1, t);
        let take = |f: &mut Focus, n: usize| {
            let mut out = [0u64; 8];
            let n = f.take_due(t + MS, &mut out[..n]);
            let mut v = out[..n].to_vec();
            v.sort_unstable();
            for &p in &v {
                f.not_armed(p, t);
            }
            v
        };
        // The pair's pages take its turn one after the other (longest due first).
        let pair = |v: &[u64]| v.iter().filter(|&&p| p == 1 << 40 || p == 3 << 40).count();
        let steps = |v: &[u64]| {
            v.iter()
                .filter(|&&p| p < 1 << 40)
                .copied()
                .collect::<Vec<_>>()
        };
        let v = take(&mut f, 1);
        assert_eq!((pair(&v), steps(&v)), (1, vec![]), "the pair's turn");
        let v = take(&mut f, 2);
        assert_eq!(
            (pair(&v), steps(&v)),
            (1, vec![2 << 30 | 8 << 12]),
            "the narrow step"
        );
        let v = take(&mut f, 3);
        let both = vec![1 << 30 | 32 << 12, 2 << 30 | 8 << 12];
        assert_eq!((pair(&v), steps(&v)), (1, both.clone()), "the wide one");
        let v = take(&mut f, 4);
        assert_eq!((pair(&v), steps(&v)), (2, both), "the pair's second page");
        assert!(take(&mut f, 5).contains(&(2 << 40)), "the probe last");
        // Spread: in turns of pairs, longest due first (the shared page and the probe).
        let mut g = spread_table();
        entry(&mut g, 1 << 40, &[1, 2], 0);
        entry(&mut g, 2 << 40, &[3], 0);
        g.fault(1 << 30, 1, t);
        g.fault((1 << 30) + (64 << 12), 2, t);
        assert_eq!(take(&mut g, 2), [1 << 40, 2 << 40]);
    }

    #[test]
    fn until_probes_judge_every_sample_is_probed_once_and_first() {
        let mut f = table();
        assert_eq!(f.probes.phase(), Phase::Unknown);
        // Samples of task 3, far apart (no bisection between them).
        for k in 1..=8u64 {
            f.fault(k << 32, 3, 0);
        }
        assert!(
            f.entries
                .iter()
                .filter(|e| e.page != 0)
                .all(|e| e.tries == 1),
            "every sample probed, once"
        );
        // Three pages found shared by tasks 1 and 2, and a bisection step: the pair's turn
        // and the probes go before the step and the pair's other pages.
        for k in 1..=3u64 {
            entry(&mut f, (100 + k) << 32, &[1, 2], 0);
        }
        f.fault(1 << 30, 4, 0);
        f.fault((1 << 30) + (64 << 12), 5, 0);
        let mut out = [0u64; 9];
        let n = f.take_due(PROBE_DELAY_NS, &mut out);
        let shared = out[..n].iter().filter(|&&p| p >> 32 > 100).count();
        let step = out[..n].contains(&(1 << 30 | 32 << 12));
        assert_eq!((n, shared, step), (9, 1, false), "{:x?}", &out[..n]);
        // Each probe's outcome comes with its first fault.
        for &p in &out[..n] {
            f.fault(p, if p >> 32 > 100 { 1 } else { 3 }, PROBE_DELAY_NS);
        }
        assert_eq!((f.probes.done, f.probes.shared), (8, 0));
    }

    #[test]
    fn while_searching_an_edge_takes_turns_as_the_pair_either_side() {
        let mut f = searching_table();
        for k in 1..=3u64 {
            entry(&mut f, (100 + k) << 32, &[1, 2], 0);
        }
        // Edges between tasks 5 and 6 (no page of theirs found yet) and between 1 and 2.
        for (page, between) in [(7u64 << 32, pair_key(5, 6)), (8 << 32, pair_key(2, 1))] {
            let e = f.entries.iter_mut().find(|e| e.page == 0).unwrap();
            *e = Entry {
                page,
                tids: [5, 0],
                ntids: 1,
                last: 5,
                tries: EDGE_TRIES,
                edge: true,
                between,
                ..Entry::default()
            };
        }
        entry(&mut f, 9 << 32, &[6], 0); // a sample's probe
        let take = |f: &mut Focus, n: usize| {
            let mut out = [0u64; 8];
            let n = f.take_due(MS, &mut out[..n]);
            let mut got = out[..n].to_vec();
            got.sort_unstable();
            for &p in &got {
                f.not_armed(p, 0);
            }
            got
        };
        let got = take(&mut f, 2);
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[0],
            7 << 32,
            "the edge of a pair not found: a turn of its own"
        );
        assert!(got[1] >> 32 > 100, "and one page of pair (1, 2): {got:x?}");
        // Past their first tries, edges come after the pages found, before the probe.
        for e in f.entries.iter_mut().filter(|e| e.edge) {
            e.same = EDGE_FIRST_TRIES;
        }
        let got = take(&mut f, 5);
        assert!(
            got.contains(&(7 << 32)) && got.contains(&(8 << 32)),
            "{got:x?}"
        );
        assert!(!got.contains(&(9 << 32)), "{got:x?}");
    }

    #[test]
    fn while_searching_a_pairs_pages_share_the_period() {
        let mut f = searching_table();
        entry(&mut f, 1 << 40, &[1, 2], 0);
        entry(&mut f, 3 << 40, &[1, 2], 0);
        entry(&mut f, 5 << 40, &[3, 4], 0);
        for (page, tid) in [(1 << 40, 2), (5 << 40, 4)] {
            f.fault(page, tid, 10 * MS);
        }
        let due_of = |f: &Focus, page: u64| f.entries.iter().find(|e| e.page == page).unwrap().due;
        assert_eq!(
            due_of(&f, 1 << 40),
            10 * MS + 2 * FOCUS_PERIOD_NS,
            "two pages"
        );
        assert_eq!(due_of(&f, 5 << 40), 10 * MS + FOCUS_PERIOD_NS, "one page");
        let mut g = spread_table();
        entry(&mut g, 1 << 40, &[1, 2], 0);
        entry(&mut g, 3 << 40, &[1, 2], 0);
        g.fault(1 << 40, 2, 10 * MS);
        assert_eq!(
            due_of(&g, 1 << 40),
            10 * MS + FOCUS_PERIOD_NS,
            "spread: each its own"
        );
    }

    #[test]
    fn the_next_look_is_when_a_page_falls_due_or_soon_while_a_step_waits() {
        let mut g = spread_table();
        entry(&mut g, 1 << 40, &[1, 2], 0);
        assert_eq!(
            g.next_due(10 * MS, MS),
            None,
            "spread: the ticks as the budget sets them"
        );
        let mut f = searching_table();
        assert_eq!(f.next_due(0, MS), None, "an empty table");
        entry(&mut f, 1 << 40, &[1, 2], 30 * MS);
        assert_eq!(f.next_due(10 * MS, MS), Some(30 * MS));
        assert_eq!(f.next_due(40 * MS, MS), Some(40 * MS), "due already");
        let _ = due(&mut f, 40 * MS);
        assert_eq!(
            f.next_due(40 * MS, MS),
            None,
            "armed, waiting for its fault"
        );
        // A bisection step armed: its fault makes the next step, due at once.
        f.fault(1 << 30, 1, 40 * MS);
        f.fault((1 << 30) + (64 << 12), 2, 40 * MS);
        let _ = due(&mut f, 41 * MS);
        assert_eq!(f.next_due(41 * MS, MS), Some(42 * MS));
    }

    #[test]
    fn one_bisection_step_per_bracket() {
        let mut f = searching_table();
        f.fault(100 << 12, 1, 0);
        f.fault(164 << 12, 2, 0);
        // Task 1 faults inside the bracket while its step (page 132) waits.
        f.fault(110 << 12, 1, MS);
        f.fault(120 << 12, 1, MS);
        let steps: Vec<u64> = f
            .entries
            .iter()
            .filter(|e| e.page != 0 && e.ntids == 0)
            .map(|e| e.page >> 12)
            .collect();
        assert_eq!(steps, [132]);
        // A step that faulted has said whose the page is: no probe of it while searching.
        let n = due(&mut f, 2 * MS);
        assert_eq!(n, [132 << 12]);
        f.fault(132 << 12, 1, 2 * MS);
        assert!(
            f.entries.iter().all(|e| e.page != 132 << 12),
            "the step left the table"
        );
        assert_eq!(
            due(&mut f, 3 * MS),
            [148 << 12],
            "the next step, from page 132"
        );
    }

    #[test]
    fn while_searching_few_samples_are_probed_and_edges_do_not_count() {
        let mut f = searching_table();
        for k in 0..4 * SAMPLE_PROBE_EVERY as u64 {
            f.fault((4 << 30) + ((16 * k) << 12), 3, 0);
        }
        let probes = f
            .entries
            .iter()
            .filter(|e| e.page != 0 && e.ntids == 1)
            .count();
        assert_eq!(probes, 4, "one sample in SAMPLE_PROBE_EVERY");
        assert!(
            f.entries.iter().all(|e| e.page == 0 || e.tries == 1),
            "one try each"
        );
        // An edge found shared is not a probe outcome; the four samples' probes are.
        f.fault(69 << 12, 1, 0);
        f.fault(70 << 12, 2, 0);
        for (round, t) in [(1, MS), (2, MS + PROBE_DELAY_NS)] {
            for page in due(&mut f, t) {
                // Page 69 is task 1's, then task 2 comes first; the samples are task 3's
                // (too far from the edge for bisection steps).
                let tid = match page >> 12 {
                    69 => round,
                    70 => 2,
                    _ => 3,
                };
                f.fault(page, tid, t);
            }
        }
        assert_eq!(f.found_shared, 1);
        assert_eq!((f.probes.done, f.probes.shared), (20, 0));
    }

    #[test]
    fn an_edge_found_shared_ends_the_probes_across_it() {
        let mut f = searching_table();
        f.fault(69 << 12, 1, 0);
        f.fault(70 << 12, 2, 0);
        let edges = |f: &Focus| {
            f.entries
                .iter()
                .filter(|e| e.page != 0 && e.edge)
                .map(|e| e.page >> 12)
                .collect::<Vec<_>>()
        };
        assert_eq!(edges(&f).len(), 2);
        // Page 69's first fault is task 1's; its second, a probe, task 2's: shared.
        let mut t = MS;
        for page in due(&mut f, t) {
            f.fault(page, if page == 69 << 12 { 1 } else { 2 }, t);
        }
        t += PROBE_DELAY_NS;
        assert!(due(&mut f, t).contains(&(69 << 12)));
        f.fault(69 << 12, 2, t);
        assert_eq!(edges(&f), [69], "page 70 needs no more probes");
    }

    #[test]
    fn a_pair_found_on_one_edge_needs_no_probes_of_its_other_edges() {
        let mut f = searching_table();
        // Tasks 1 and 2 meet at 69|70 and, in another field, at 169|170; 2 and 3 at 369|370.
        for (page, task) in [(69, 1), (70, 2), (169, 1), (170, 2), (369, 2), (370, 3)] {
            f.fault(page << 12, task, 0);
        }
        let edges = |f: &Focus| {
            let mut e: Vec<u64> = (f.entries.iter())
                .filter(|e| e.page != 0 && e.edge && e.ntids < 2)
                .map(|e| e.page >> 12)
                .collect();
            e.sort();
            e
        };
        assert_eq!(edges(&f), [69, 70, 169, 170, 369, 370]);
        // Page 69 is found shared (task 1 faults on it, then task 2): the pair's other edge
        // probes leave, the other pair's stay.
        let mut t = MS;
        assert!(due(&mut f, t).contains(&(69 << 12)));
        f.fault(69 << 12, 1, t);
        t += PROBE_DELAY_NS;
        assert!(due(&mut f, t).contains(&(69 << 12)));
        f.fault(69 << 12, 2, t);
        assert_eq!(edges(&f), [369, 370]);
        // A new edge of the found pair is not probed; one of another pair is.
        for (page, task) in [(269, 1), (270, 2), (469, 3), (470, 4)] {
            f.fault(page << 12, task, t);
        }
        assert_eq!(edges(&f), [369, 370, 469, 470]);
        // Once the pair's found page leaves (found apart), a fault at one of its edges makes
        // probes again: one never probed, and one whose probes left when the pair was found.
        f.apart(69 << 12, t);
        f.fault(270 << 12, 2, t + MS);
        assert_eq!(edges(&f), [269, 270, 369, 370, 469, 470]);
        f.fault(170 << 12, 2, t + 2 * MS);
        assert_eq!(edges(&f), [169, 170, 269, 270, 369, 370, 469, 470]);
    }

    #[test]
    fn a_found_edge_page_that_leaves_sends_the_probes_across_the_edge_again() {
        let mut f = searching_table();
        f.fault(69 << 12, 1, 0);
        f.fault(70 << 12, 2, 0);
        let edges = |f: &Focus| {
            let mut v: Vec<_> = f
                .entries
                .iter()
                .filter(|e| e.page != 0 && e.edge)
                .map(|e| (e.page >> 12, e.ntids))
                .collect();
            v.sort();
            v
        };
        // Page 69 (task 1's) is found shared with task 2; page 70 leaves the probes.
        let mut t = MS;
        for page in due(&mut f, t) {
            f.fault(page, if page == 69 << 12 { 1 } else { 2 }, t);
        }
        t += PROBE_DELAY_NS;
        f.fault(69 << 12, 2, t);
        assert_eq!(edges(&f), [(69, 2)]);
        // Then only its owner comes first, for longer than OTHER_GONE_NS: it leaves, and
        // page 70 is an edge probe of the pair again, well within EDGE_REPROBE_NS.
        t += FOCUS_PERIOD_NS;
        f.fault(69 << 12, 1, t);
        t += OTHER_GONE_NS;
        for _ in 0..SAME_TO_DEMOTE {
            t += FOCUS_PERIOD_NS;
            f.fault(69 << 12, 1, t);
        }
        assert_eq!(edges(&f), [(70, 0)]);
        let across = f.entries.iter().find(|e| e.page == 70 << 12).unwrap();
        assert_eq!(across.between, pair_key(1, 2));
        assert!(t < EDGE_REPROBE_NS);
    }

    #[test]
    fn a_page_the_detector_found_apart_leaves_and_stays_out_for_a_while() {
        let mut f = table();
        let (found, elsewhere) = (5 << 40, 9 << 40);
        entry(&mut f, found, &[1, 2], 10 * MS);
        f.apart(found, 5 * MS);
        assert_eq!(
            f.len(),
            0,
            "a page found shared that the detector found apart leaves"
        );
        f.fault(found, 1, 20 * MS);
        assert_eq!(f.len(), 0, "a sample of it is not probed");
        f.fault(elsewhere, 1, 20 * MS);
        assert_eq!(f.len(), 1, "a sample elsewhere is");
        f.fault(found, 2, 5 * MS + APART_NS + MS);
        assert_eq!(f.len(), 2, "after APART_NS it is probed again");
    }

    #[test]
    fn forget_and_not_armed() {
        let mut f = spread_table();
        for p in 1..=4u64 {
            f.fault(p << 12, 1, 0);
        }
        f.forget(0x2000, 0x4000);
        assert_eq!(f.len(), 2);
        let mut out = [0; 1];
        assert_eq!(
            f.take_due(50 * MS, &mut out),
            1,
            "bounded by the room given"
        );
        f.not_armed(out[0], 50 * MS);
        assert_eq!(due(&mut f, 50 * MS).len(), 2);
    }

    #[test]
    fn probes_and_pairs_are_bounded() {
        let mut f = spread_table();
        for p in 1..=(ENTRIES as u64) {
            f.fault(p << 12, 1, 0);
        }
        assert_eq!(f.len(), MAX_PROBES, "probes of single samples");
        // Pages tasks 1 and 2 take turns on: PER_PAIR of them stay in focus.
        let mut g = spread_table();
        let pages: Vec<u64> = (0..PER_PAIR as u64 + 5)
            .map(|p| (p * 16 + 1000) << 12)
            .collect();
        for &p in &pages {
            g.fault(p, 1, 0);
        }
        let mut out = [0u64; ENTRIES];
        let n = g.take_due(50 * MS, &mut out);
        assert_eq!(n, pages.len());
        for &p in &out[..n] {
            g.fault(p, 2, 50 * MS);
        }
        assert_eq!(g.found_shared, pages.len() as u64);
        let kept = g
            .entries
            .iter()
            .filter(|e| e.page != 0 && e.ntids == 2)
            .count();
        assert_eq!(kept, PER_PAIR);
    }

    /// Makes `pages` shared by tasks `a` and `b` in `f` (probed, then faulted by the other).
    fn share(f: &mut Focus, pages: &[u64], a: u32, b: u32, now: u64) {
        for &p in pages {
            f.fault(p, a, now);
        }
        let mut out = [0u64; ENTRIES];
        let n = f.take_due(now + PROBE_DELAY_NS, &mut out);
        for &p in &out[..n] {
            f.fault(p, b, now + PROBE_DELAY_NS);
        }
    }

    #[test]
    fn a_small_budget_is_shared_among_pairs_not_pages() {
        let mut f = spread_table();
        // Pair (1, 2) has PER_PAIR pages in focus, pair (3, 4) one, found a little later; all
        // too far apart for bisection steps between them.
        const FAR: u64 = 1 << 40;
        let many: Vec<u64> = (1..=PER_PAIR as u64).map(|p| p << 31).collect();
        share(&mut f, &many, 1, 2, 0);
        share(&mut f, &[FAR], 3, 4, 10 * MS);
        let (mut for_many, mut for_one) = (0, 0);
        let mut turns = std::collections::HashMap::new();
        let mut out = [0u64; 2];
        for tick in 0..40u64 {
            let now = 200 * MS + tick * FOCUS_PERIOD_NS;
            let n = f.take_due(now, &mut out);
            for &p in &out[..n] {
                // Each page's two tasks take turns.
                let turn = turns.entry(p).or_insert(0u32);
                *turn += 1;
                if p == FAR {
                    for_one += 1;
                    f.fault(p, 3 + *turn % 2, now);
                } else {
                    for_many += 1;
                    f.fault(p, 1 + *turn % 2, now);
                }
            }
        }
        // Longest due first gave the one page 1 in PER_PAIR + 1 of the pairs' re-arms
        // (6 against 58 here).
        assert!(
            for_one * 3 >= for_many && for_one >= 10,
            "the one-page pair got {for_one} re-arms, the other {for_many}"
        );
    }

    #[test]
    fn a_pair_found_late_catches_up_on_re_arms_then_takes_turns() {
        let mut f = spread_table();
        const EARLY: u64 = 1 << 31;
        const LATE: u64 = 2 << 31;
        share(&mut f, &[EARLY], 1, 2, 0);
        let mut out = [0u64; 1];
        // Each page's two tasks take turns on it.
        let mut turns = [0u32; 2];
        let mut tick = |f: &mut Focus, t: u64| -> Option<u64> {
            let now = 200 * MS + t * FOCUS_PERIOD_NS;
            let n = f.take_due(now, &mut out);
            let page = out[..n].first().copied();
            if let Some(p) = page {
                let k = (p == LATE) as usize;
                turns[k] += 1;
                f.fault(p, 1 + 2 * k as u32 + turns[k] % 2, now);
            }
            page
        };
        // The first pair alone for 60 ticks, then the second is found.
        for t in 0..60 {
            assert_eq!(tick(&mut f, t), Some(EARLY));
        }
        entry(&mut f, LATE, &[3, 4], 200 * MS + 60 * FOCUS_PERIOD_NS);
        let late_of = |pages: &[Option<u64>]| pages.iter().filter(|&&p| p == Some(LATE)).count();
        // It has every turn until it is as served as the other (less one or two a tie gives
        // the other), then they take turns.
        let first: Vec<_> = (61..61 + CATCH_UP as u64)
            .map(|t| tick(&mut f, t))
            .collect();
        assert!(late_of(&first) + 2 >= CATCH_UP as usize, "{first:?}");
        let then: Vec<_> = (100..140).map(|t| tick(&mut f, t)).collect();
        let late = late_of(&then);
        assert!(
            (15..=25).contains(&late),
            "in turns after: {late} of 40 to the late pair"
        );
    }
}
