//! The sharer table: for each memory block, the tasks that faulted on it most recently.
//!
//! Fixed size, lossy, O(1) per event. `slots` entries (a power of two), each holding a
//! block key and the last [`WAYS`] accessors in FIFO order (newest first, duplicates
//! allowed, as in CDSM, so that a task that stopped using a block ages out after four
//! newer faults). Memory: `slots * size_of::<Slot>()` bytes (40 B per slot) at most, allocated
//! once, zeroed: the kernel maps a page of it only when a slot there is first used.
//!
//! Each accessor carries the time of its fault. A caller may ask that accessors older than
//! some age make no event and leave the list: the agent re-arms a page rarely, so without
//! it the initialising thread's first touches would stay in the list of every block and
//! pair with each later fault for as long as the program runs (see Session::fault).
//!
//! Collision policy: direct-mapped. A block whose slot holds another block's key takes the
//! slot over and starts with an empty list (the old block's history is dropped, counted
//! in `evictions`). A lost history can only hide communication, never invent it.

/// Accessors remembered per block.
pub const WAYS: usize = 4;
/// An empty accessor. Tasks are stored as task + 1 so that an all-zero slot is an empty one
/// and the table can come from zeroed memory, whose pages the kernel maps on first use:
/// filling the default 40-MB table took about 14 ms of every `huddle run`'s start (a 30-ms
/// start in all, 2026-11-26).
const EMPTY: u32 = 0;

#[derive(Clone, Copy)]
#[repr(C)]
struct Slot {
    key: u64,
    tasks: [u32; WAYS],
    /// When each accessor faulted (ms, the caller's clock).
    seen: [u32; WAYS],
}

/// Bytes per slot of the table.
pub const SLOT_BYTES: usize = std::mem::size_of::<Slot>();

/// The direct-mapped table of each block's last [`WAYS`] accessors (task indexes), fixed at
/// `slots() * SLOT_BYTES` bytes.
pub struct SharerTable {
    slots: Vec<Slot>,
    mask: u64,
    /// Slots taken over from a different block.
    pub evictions: u64,
    /// Faults recorded.
    pub faults: u64,
}

/// A 64-bit mix (splitmix64 finaliser) so that neighbouring blocks spread over the table.
pub fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl SharerTable {
    /// A table of `slots` entries, rounded up to a power of two (at least 1).
    pub fn new(slots: usize) -> SharerTable {
        let n = slots.max(1).next_power_of_two();
        let layout = std::alloc::Layout::array::<Slot>(n).expect("sharer table size");
        // SAFETY: Slot is repr(C) integers, valid when all zero (an empty slot); the memory
        // comes from the global allocator with the layout of n Slots, as from_raw_parts needs.
        let slots = unsafe {
            let p = std::alloc::alloc_zeroed(layout).cast::<Slot>();
            if p.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            Vec::from_raw_parts(p, n, n)
        };
        SharerTable {
            slots,
            mask: n as u64 - 1,
            evictions: 0,
            faults: 0,
        }
    }

    /// The slot of `key`. Keys are a hash of the mapping XOR the block number, so blocks that
    /// differ only in the low GROUP_BITS bits (neighbours in memory) keep that difference: a
    /// run of them starts at a random slot (`mix` of the rest) and takes consecutive slots.
    /// A program's first touches sweep its memory, and with every block on a random slot
    /// they touched a new page of this table (40 MB at the default size, zeroed on first
    /// touch) per fault: under HPCC a third of huddle's CPU went to its own page faults and
    /// the perf records of them. A run of 256 slots (10 KiB) holds 16 pages' worth of
    /// 256-byte blocks. Runs start anywhere, not on multiples of 256: two keys of different
    /// runs meet as often as with one random slot each (aligned runs collided whole, and
    /// pipeline x32 took 6,534 evictions instead of 508).
    fn index(&self, key: u64) -> usize {
        const GROUP_BITS: u32 = 8;
        let low = key & ((1 << GROUP_BITS) - 1);
        (mix(key >> GROUP_BITS).wrapping_add(low) & self.mask) as usize
    }

    /// Bytes the table occupies (the bound; it never grows).
    pub fn memory_bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Slot>()
    }

    /// Slots in the table (a power of two, fixed at creation).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Records a fault by `task` on the block with key `key`; calls `partner(q)` once for
    /// every distinct other task `q` in the block's list (a communication event t <-> q),
    /// then puts `task` at the front of the list, dropping the oldest entry if full.
    pub fn record(&mut self, key: u64, task: u32, partner: impl FnMut(u32)) {
        self.record_at(key, task, 0, u32::MAX, partner)
    }

    /// [`SharerTable::record`] at time `now_ms`, where accessors that faulted more than
    /// `keep_ms` before make no event and are dropped from the list.
    pub fn record_at(
        &mut self,
        key: u64,
        task: u32,
        now_ms: u32,
        keep_ms: u32,
        mut partner: impl FnMut(u32),
    ) {
        self.faults += 1;
        debug_assert!(task < u32::MAX, "task index {task}");
        let task = task + 1;
        let i = self.index(key);
        let slot = &mut self.slots[i];
        if slot.key != key || slot.tasks[0] == EMPTY {
            if slot.tasks[0] != EMPTY {
                self.evictions += 1;
            }
            slot.key = key;
            slot.tasks = [EMPTY; WAYS];
        }
        for i in 0..WAYS {
            // Newest first, so every entry from the first stale one on is stale too.
            if slot.tasks[i] != EMPTY && now_ms.saturating_sub(slot.seen[i]) > keep_ms {
                slot.tasks[i..].fill(EMPTY);
                break;
            }
        }
        for i in 0..WAYS {
            let q = slot.tasks[i];
            if q != EMPTY && q != task && !slot.tasks[..i].contains(&q) {
                partner(q - 1);
            }
        }
        slot.tasks.copy_within(0..WAYS - 1, 1);
        slot.seen.copy_within(0..WAYS - 1, 1);
        slot.tasks[0] = task;
        slot.seen[0] = now_ms;
    }

    /// The accessors of `key`, newest first (for tests and inspection).
    pub fn accessors(&self, key: u64) -> Vec<u32> {
        let slot = &self.slots[self.index(key)];
        if slot.key != key {
            return Vec::new();
        }
        slot.tasks
            .iter()
            .filter(|&&t| t != EMPTY)
            .map(|&t| t - 1)
            .collect()
    }
}

/// The sharer table at page granularity, for private memory whose sharers enter a page at
/// different blocks (see `Session::page_mode`). A page that more than two tasks touched
/// while in the table (a flag, a barrier, or tasks writing their own blocks of one page, as
/// in the `false-sharing` workload) is crowded: it gives no events until its slot goes to
/// another page. Two tasks either side of a block edge are what this table is for; as the
/// agent's focus table (MAX_TIDS), it takes more as contention, not communication.
pub struct PageTable {
    table: SharerTable,
    /// Per slot of `table`: what its page has shown so far.
    state: Vec<PageState>,
    /// Per slot: where in the page each accessor of the list faulted (bytes), in its order.
    offsets: Vec<[u16; WAYS]>,
}

/// What a page of the [`PageTable`] has shown since it took its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageState {
    /// One task, or none yet.
    Fresh,
    /// Two tasks: events.
    Paired,
    /// Three or more: no events any more.
    Crowded,
}

impl PageTable {
    /// A table of `slots` entries (a power of two, at least 1).
    pub fn new(slots: usize) -> PageTable {
        let table = SharerTable::new(slots);
        let state = vec![PageState::Fresh; table.slots()];
        let offsets = vec![[0; WAYS]; table.slots()];
        PageTable {
            table,
            state,
            offsets,
        }
    }

    /// As [`SharerTable::record_at`] for a fault at byte `offset` of the page, but no events
    /// from a crowded page; `partner` gets each partner with where its own last fault on the
    /// page was. Returns the page's state before and after the fault.
    pub fn record_at(
        &mut self,
        key: u64,
        task: u32,
        offset: u16,
        now_ms: u32,
        keep_ms: u32,
        mut partner: impl FnMut(u32, u16),
    ) -> (PageState, PageState) {
        let i = self.table.index(key);
        if self.table.slots[i].key != key || self.table.slots[i].tasks[0] == EMPTY {
            self.state[i] = PageState::Fresh;
        }
        let before = self.state[i];
        let (listed, offsets) = (self.table.slots[i].tasks, self.offsets[i]);
        let mut partners = [0u32; WAYS];
        let mut n = 0;
        self.table.record_at(key, task, now_ms, keep_ms, |q| {
            partners[n] = q;
            n += 1;
        });
        // The list moved down by one, as the table's did.
        self.offsets[i].copy_within(0..WAYS - 1, 1);
        self.offsets[i][0] = offset;
        self.state[i] = match (before, n) {
            (PageState::Crowded, _) | (_, 2..) => PageState::Crowded,
            (PageState::Fresh, 0) => PageState::Fresh,
            _ => PageState::Paired,
        };
        if self.state[i] != PageState::Crowded {
            for &q in &partners[..n] {
                // Its newest entry, the one the table paired.
                let j = listed.iter().position(|&x| x == q + 1).unwrap_or(0);
                partner(q, offsets[j]);
            }
        }
        (before, self.state[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_table_gives_each_partner_where_it_last_faulted_on_the_page() {
        let mut t = PageTable::new(64);
        let mut events = |task, offset| {
            let mut v = Vec::new();
            t.record_at(9, task, offset, 0, u32::MAX, |q, o| v.push((q, o)));
            v
        };
        assert_eq!(events(0, 0x10), vec![]);
        assert_eq!(events(1, 0x300), vec![(0, 0x10)]);
        assert_eq!(events(0, 0x20), vec![(1, 0x300)]);
        // Task 0's newest fault (0x20), not its first.
        assert_eq!(events(1, 0x308), vec![(0, 0x20)]);
    }

    #[test]
    fn page_table_pairs_two_tasks_and_stops_at_a_third() {
        let mut t = PageTable::new(64);
        let events = |t: &mut PageTable, key, task| {
            let mut v = Vec::new();
            let states = t.record_at(key, task, 0, 0, u32::MAX, |q, _| v.push(q));
            (v, states.1)
        };
        use PageState::*;
        assert_eq!(events(&mut t, 7, 0), (vec![], Fresh));
        assert_eq!(events(&mut t, 7, 1), (vec![0], Paired));
        assert_eq!(events(&mut t, 7, 0), (vec![1], Paired));
        // A third task: contention, and the page stays quiet after it.
        assert_eq!(events(&mut t, 7, 2), (vec![], Crowded));
        assert_eq!(events(&mut t, 7, 0), (vec![], Crowded));
        assert_eq!(events(&mut t, 7, 1), (vec![], Crowded));
        // Another page in that slot starts afresh.
        let other = (0..u64::MAX)
            .find(|&k| k != 7 && t.table.index(k) == t.table.index(7))
            .unwrap();
        assert_eq!(events(&mut t, other, 3), (vec![], Fresh));
        assert_eq!(events(&mut t, other, 4), (vec![3], Paired));
    }

    #[test]
    fn neighbouring_blocks_take_neighbouring_slots_from_a_random_start() {
        let t = SharerTable::new(1 << 20);
        let base = mix(7) & !0xff;
        let first = t.index(base);
        for k in 1..256 {
            assert_eq!(t.index(base + k), (first + k as usize) & (t.slots() - 1));
        }
        // Runs start anywhere: 1000 runs cover about as many distinct starts, unaligned.
        let starts: std::collections::HashSet<usize> =
            (0..1000u64).map(|g| t.index(g << 8)).collect();
        assert!(starts.len() > 990, "{}", starts.len());
        assert!(starts.iter().filter(|&&s| s % 256 == 0).count() < 20);
    }

    fn events(t: &mut SharerTable, key: u64, task: u32) -> Vec<u32> {
        let mut v = Vec::new();
        t.record(key, task, |q| v.push(q));
        v
    }

    #[test]
    fn first_fault_is_no_event_second_task_is() {
        let mut t = SharerTable::new(1024);
        assert!(events(&mut t, 7, 1).is_empty());
        assert!(
            events(&mut t, 7, 1).is_empty(),
            "same task again: no communication"
        );
        assert_eq!(events(&mut t, 7, 2), vec![1]);
        assert_eq!(events(&mut t, 7, 3), vec![2, 1]);
    }

    #[test]
    fn fifo_keeps_the_four_newest_and_counts_each_partner_once() {
        let mut t = SharerTable::new(1024);
        for task in [1, 2, 3, 4, 5] {
            events(&mut t, 9, task);
        }
        assert_eq!(
            t.accessors(9),
            vec![5, 4, 3, 2],
            "task 1 was the oldest and left"
        );
        assert_eq!(events(&mut t, 9, 1), vec![5, 4, 3, 2]);
        events(&mut t, 9, 2);
        events(&mut t, 9, 2);
        assert_eq!(t.accessors(9), vec![2, 2, 1, 5]);
        assert_eq!(events(&mut t, 9, 7), vec![2, 1, 5], "duplicates count once");
    }

    #[test]
    fn a_task_that_stops_ages_out_after_four_newer_faults() {
        let mut t = SharerTable::new(64);
        events(&mut t, 3, 0); // the initialising thread
        for _ in 0..2 {
            events(&mut t, 3, 1);
            events(&mut t, 3, 2);
        }
        assert_eq!(
            events(&mut t, 3, 1),
            vec![2],
            "task 0 is gone from the list"
        );
    }

    #[test]
    fn accessors_older_than_the_window_make_no_event_and_leave() {
        let mut t = SharerTable::new(64);
        let at = |t: &mut SharerTable, key, task, ms| {
            let mut v = Vec::new();
            t.record_at(key, task, ms, 500, |q| v.push(q));
            v
        };
        at(&mut t, 5, 0, 100); // the master initialises the block
        at(&mut t, 5, 1, 900); // the owner, 800 ms later: no event with the master
        assert_eq!(t.accessors(5), vec![1]);
        assert_eq!(
            at(&mut t, 5, 2, 1000),
            vec![1],
            "within the window: an event"
        );
        assert_eq!(
            at(&mut t, 5, 3, 1450),
            vec![2],
            "task 1 faulted 550 ms before"
        );
        assert_eq!(at(&mut t, 5, 4, 1450 + 501), Vec::<u32>::new());
        // Without a window (record) old accessors stay, as in CDSM.
        at(&mut t, 6, 0, 0);
        assert_eq!(events(&mut t, 6, 1), vec![0]);
    }

    #[test]
    fn collision_takes_the_slot_over_and_counts_an_eviction() {
        let mut t = SharerTable::new(1); // every key shares the one slot
        events(&mut t, 10, 1);
        events(&mut t, 10, 2);
        assert_eq!(t.evictions, 0);
        assert!(
            events(&mut t, 11, 3).is_empty(),
            "a new block never inherits partners"
        );
        assert_eq!(t.evictions, 1);
        assert!(t.accessors(10).is_empty());
        assert_eq!(t.accessors(11), vec![3]);
        assert!(events(&mut t, 10, 4).is_empty());
        assert_eq!(t.evictions, 2);
    }

    #[test]
    fn memory_is_bounded_by_slot_count() {
        let mut t = SharerTable::new(1000);
        assert_eq!(t.slots(), 1024);
        assert_eq!(t.memory_bytes(), 1024 * 40);
        for k in 0..100_000u64 {
            events(&mut t, k, (k % 5) as u32);
        }
        assert_eq!(t.memory_bytes(), 1024 * 40, "the table never grows");
        assert_eq!(t.faults, 100_000);
    }

    proptest::proptest! {
        #[test]
        fn partners_never_include_self_and_are_distinct(
            ops in proptest::collection::vec((0u64..8, 0u32..6), 1..400)
        ) {
            let mut t = SharerTable::new(4);
            for (k, task) in ops {
                let ev = events(&mut t, k, task);
                proptest::prop_assert!(!ev.contains(&task));
                let mut d = ev.clone();
                d.sort();
                d.dedup();
                proptest::prop_assert_eq!(d.len(), ev.len());
                proptest::prop_assert!(ev.len() < WAYS + 1);
            }
        }
    }
}
