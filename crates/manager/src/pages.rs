//! `--move-pages`: after a migration, a task's memory follows it to its new NUMA node, a
//! budget of pages per task per interval (move_pages copies each page while the program
//! runs, so a large process moves over several intervals instead of stalling one).
//!
//! What follows a task: for a whole process (`--processes`), its private anonymous memory;
//! for a thread, the pages it was seen touching last (the detector's page owners), since
//! threads share one address space.

use crate::actuate;
use std::collections::{HashMap, VecDeque};

/// Pages of one task still to move.
struct Pending {
    pid: u32,
    node: i32,
    /// Address ranges [start, end), page-aligned, front first.
    ranges: VecDeque<(u64, u64)>,
}

/// The pages still to follow migrated tasks, queued per task and moved (move_pages(2)) at
/// most a budget of pages per task per [`PageMover::step`].
pub struct PageMover {
    budget: usize,
    page: u64,
    /// By task id (thread or process).
    pending: HashMap<u32, Pending>,
    /// Pages moved to their task's node so far.
    pub moved: u64,
    /// Pages that could not be moved so far; a whole batch counts where move_pages(2) failed.
    pub failed: u64,
}

impl PageMover {
    /// Moves at most `budget` pages per task per [`PageMover::step`].
    pub fn new(budget: usize) -> PageMover {
        // SAFETY: sysconf has no memory-safety preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
        PageMover {
            budget,
            page,
            pending: HashMap::new(),
            moved: 0,
            failed: 0,
        }
    }

    /// Task `task` (of process `pid`) now runs on NUMA node `node` (OS index): `ranges`
    /// follow it, replacing whatever was still queued for it.
    pub fn follow(&mut self, task: u32, pid: u32, node: i32, ranges: Vec<(u64, u64)>) {
        let ranges: VecDeque<(u64, u64)> = ranges.into_iter().filter(|r| r.1 > r.0).collect();
        if ranges.is_empty() {
            self.pending.remove(&task);
        } else {
            self.pending.insert(task, Pending { pid, node, ranges });
        }
    }

    /// Pages still queued, over all tasks.
    pub fn queued(&self) -> u64 {
        self.pending
            .values()
            .flat_map(|p| p.ranges.iter())
            .map(|&(a, b)| (b - a).div_ceil(self.page))
            .sum()
    }

    /// Moves up to the budget of every task's queue; returns error messages (a process
    /// that is gone drops its queue silently).
    pub fn step(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        let mut done = Vec::new();
        for (&task, p) in &mut self.pending {
            let mut batch = Vec::with_capacity(self.budget);
            while batch.len() < self.budget {
                let Some((a, b)) = p.ranges.front_mut() else {
                    break;
                };
                batch.push(*a);
                *a += self.page;
                if *a >= *b {
                    p.ranges.pop_front();
                }
            }
            match actuate::move_pages_to(p.pid, &batch, p.node) {
                Ok(r) => {
                    self.moved += r.moved as u64;
                    self.failed += r.failed as u64;
                }
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => p.ranges.clear(),
                Err(e) => {
                    self.failed += batch.len() as u64;
                    errors.push(format!(
                        "move_pages of process {} to node {}: {e}",
                        p.pid, p.node
                    ));
                }
            }
            if p.ranges.is_empty() {
                done.push(task);
            }
        }
        for t in done {
            self.pending.remove(&t);
        }
        errors
    }
}

/// Page addresses (ascending) as ranges of consecutive pages.
pub fn ranges_of(pages: &[u64], page: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &p in pages {
        match out.last_mut() {
            Some(last) if last.1 == p => last.1 = p + page,
            _ => out.push((p, p + page)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_pages_make_one_range() {
        assert_eq!(
            ranges_of(&[0x1000, 0x2000, 0x3000, 0x8000, 0xa000, 0xb000], 0x1000),
            vec![(0x1000, 0x4000), (0x8000, 0x9000), (0xa000, 0xc000)]
        );
        assert!(ranges_of(&[], 0x1000).is_empty());
    }

    /// A buffer of this process queued for node 0 (where a one-node machine has it
    /// already): drained a budget at a time, every page asked about once.
    #[test]
    fn a_queue_drains_a_budget_per_step() {
        let page = 4096u64;
        let buf = vec![7u8; 40 * page as usize];
        std::hint::black_box(&buf);
        let start = (buf.as_ptr() as u64).div_ceil(page) * page;
        let mut m = PageMover::new(16);
        m.follow(1, std::process::id(), 0, vec![(start, start + 32 * page)]);
        assert_eq!(m.queued(), 32);
        assert!(m.step().is_empty());
        assert_eq!(m.queued(), 16);
        assert!(m.step().is_empty());
        assert_eq!(m.queued(), 0);
        assert_eq!(m.failed, 0);
        // A later move of the same task replaces what was queued.
        m.follow(1, std::process::id(), 0, vec![(start, start + 4 * page)]);
        m.follow(1, std::process::id(), 0, vec![(start, start + 2 * page)]);
        assert_eq!(m.queued(), 2);
        // A process that is gone drops its queue without an error.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        m.follow(2, gone, 0, vec![(start, start + 4 * page)]);
        assert!(m.step().is_empty());
        assert_eq!(m.queued(), 0);
    }
}
