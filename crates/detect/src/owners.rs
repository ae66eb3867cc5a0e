//! Which task touches each page: for `--move-pages`, so that a thread's private pages can
//! follow it to another NUMA node (threads share one address space, so "the process's
//! private memory" says nothing about which thread uses a page).
//!
//! Every fault the detector sees (first touches and the agent's re-armed pages) makes its
//! task the page's owner: a page follows the task that touched it last (as kernel-level
//! schemes such as kMAF move a page toward its latest accessors). A page shared with one
//! marked owner for good would never move in the commonest case, data the main thread
//! initialised for its workers; a page two partners share goes with either, and the
//! manager puts partners together anyway. Only pages that faulted are known: a page the
//! agent never sampled after its first touch counts as its first toucher's. Bounded: past
//! `cap` pages, new pages are not recorded (counted in `dropped`).

use std::collections::HashMap;

/// The task (index) that last faulted on each (process, page), for at most `cap` pages.
pub struct PageOwners {
    /// (process, page number) -> the task that touched it last.
    pages: HashMap<(u32, u64), u32>,
    page_shift: u32,
    cap: usize,
    /// Pages not recorded because the table was full.
    pub dropped: u64,
}

impl PageOwners {
    /// An empty table for pages of `page_size` bytes (a power of two) that records at most
    /// `cap` pages.
    pub fn new(page_size: u64, cap: usize) -> PageOwners {
        PageOwners {
            pages: HashMap::new(),
            page_shift: page_size.max(1).trailing_zeros(),
            cap,
            dropped: 0,
        }
    }

    /// Task `task` of process `pid` touched `addr`.
    pub fn record(&mut self, pid: u32, addr: u64, task: u32) {
        let key = (pid, addr >> self.page_shift);
        let full = self.pages.len() >= self.cap;
        match self.pages.get_mut(&key) {
            Some(owner) => *owner = task,
            None if !full => {
                self.pages.insert(key, task);
            }
            None => self.dropped += 1,
        }
    }

    /// The pages (start addresses, ascending) that `task` touched last.
    pub fn owned_by(&self, task: u32) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .pages
            .iter()
            .filter(|&(_, &o)| o == task)
            .map(|(&(_, page), _)| page << self.page_shift)
            .collect();
        v.sort_unstable();
        v
    }

    /// Pages recorded (at most `cap`).
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    /// Whether no page is recorded.
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_belongs_to_its_last_toucher() {
        let mut o = PageOwners::new(4096, 100);
        o.record(7, 0x1000, 1);
        o.record(7, 0x1fff, 1); // same page
        o.record(7, 0x3000, 1);
        o.record(7, 0x5000, 2);
        // Initialised by task 0 (a main thread), then used by task 2: task 2's.
        o.record(7, 0x8010, 0);
        o.record(7, 0x8020, 2);
        // Back and forth: the latest.
        o.record(7, 0x9000, 1);
        o.record(7, 0x9000, 2);
        o.record(7, 0x9000, 1);
        assert_eq!(o.owned_by(1), vec![0x1000, 0x3000, 0x9000]);
        assert_eq!(o.owned_by(2), vec![0x5000, 0x8000]);
        assert!(o.owned_by(0).is_empty());
        assert_eq!(o.len(), 5);
    }

    #[test]
    fn pages_of_another_process_are_other_pages() {
        let mut o = PageOwners::new(4096, 100);
        o.record(7, 0x1000, 1);
        o.record(8, 0x1000, 2);
        assert_eq!(o.owned_by(1), vec![0x1000]);
        assert_eq!(o.owned_by(2), vec![0x1000]);
    }

    #[test]
    fn a_full_table_drops_new_pages_only() {
        let mut o = PageOwners::new(4096, 2);
        o.record(1, 0x1000, 1);
        o.record(1, 0x2000, 1);
        o.record(1, 0x3000, 1);
        o.record(1, 0x2000, 2); // known page: still updated
        assert_eq!(o.dropped, 1);
        assert_eq!(o.owned_by(1), vec![0x1000]);
        assert_eq!(o.owned_by(2), vec![0x2000]);
    }
}
