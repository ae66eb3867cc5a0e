//! The program's own order of its tasks, and a name for each.
//!
//! tasks.json (and so matrix.csv) lists tasks in the order huddle first saw them, which is
//! /proc order: nothing a person recognises. The page shows them in the order the program
//! gives them: huddle's workload threads by their index (`wl-task-N`), then MPI ranks by rank
//! (each rank's MPI-calling thread first, then the other threads of its process), then every
//! other task by thread name (numbers in names compared as numbers), ties by tid.

use crate::TaskRecord;
use std::collections::HashMap;

/// The index N of a huddle workload thread named `wl-task-N`.
pub fn workload_index(comm: &str) -> Option<usize> {
    comm.strip_prefix("wl-task-")?.parse().ok()
}

/// A thread name that says nothing ("?" where /proc could not be read, or empty).
fn unnamed(comm: &str) -> bool {
    comm.is_empty() || comm == "?"
}

/// A name split into text and number chunks, so that "w-2" comes before "w-10".
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Chunk {
    Num(u128),
    Text(String),
}

fn natural(s: &str) -> Vec<Chunk> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut digits = false;
    let flush = |cur: &mut String, digits: bool, out: &mut Vec<Chunk>| {
        if cur.is_empty() {
            return;
        }
        let chunk = match cur.parse::<u128>() {
            Ok(n) if digits => Chunk::Num(n),
            _ => Chunk::Text(cur.clone()),
        };
        out.push(chunk);
        cur.clear();
    };
    for c in s.chars() {
        let d = c.is_ascii_digit();
        if d != digits {
            flush(&mut cur, digits, &mut out);
            digits = d;
        }
        cur.push(c);
    }
    flush(&mut cur, digits, &mut out);
    out
}

/// Where each task goes on the page, and what it is called there.
#[derive(Clone, Debug, Default)]
pub struct TaskOrder {
    /// Task indexes (into tasks.json and the matrix) in display order.
    pub order: Vec<usize>,
    /// The display name of each task, by task index.
    labels: HashMap<usize, String>,
    /// The MPI rank each task belongs to (its own, or its process's), by task index.
    ranks: HashMap<usize, usize>,
    /// The huddle workload threads (named wl-task-N), by task index.
    workload: HashMap<usize, usize>,
    /// Place of each task in `order`, by task index.
    positions: HashMap<usize, usize>,
}

impl TaskOrder {
    pub fn new(tasks: &[TaskRecord]) -> TaskOrder {
        // A rank's process: every thread of it belongs to the rank.
        let rank_of_pid: HashMap<u32, usize> = tasks
            .iter()
            .filter_map(|t| t.mpi_rank.map(|r| (t.pid, r)))
            .collect();
        let rank = |t: &TaskRecord| t.mpi_rank.or_else(|| rank_of_pid.get(&t.pid).copied());
        let key = |t: &TaskRecord| {
            let wl = workload_index(&t.comm);
            let r = rank(t);
            let class = match (wl, r) {
                (Some(_), _) => 0,
                (None, Some(_)) => 1,
                (None, None) => 2,
            };
            (
                class,
                wl.unwrap_or(0),
                r.unwrap_or(0),
                // The rank's MPI-calling thread before the rest of its process.
                t.mpi_rank.is_none(),
                unnamed(&t.comm),
                natural(&t.comm),
                t.tid,
                t.index,
            )
        };
        let mut sorted: Vec<&TaskRecord> = tasks.iter().collect();
        sorted.sort_by_cached_key(|t| key(t));
        sorted.dedup_by_key(|t| t.index);

        let base = |t: &TaskRecord| -> String {
            let name = if unnamed(&t.comm) {
                format!("tid {}", t.tid)
            } else {
                t.comm.clone()
            };
            if workload_index(&t.comm).is_some() {
                return name;
            }
            match (t.mpi_rank, rank(t)) {
                (Some(r), _) => format!("rank {r}"),
                (None, Some(r)) => format!("rank {r} · {name}"),
                _ => name,
            }
        };
        let mut count: HashMap<String, usize> = HashMap::new();
        for t in &sorted {
            *count.entry(base(t)).or_default() += 1;
        }
        let labels = sorted
            .iter()
            .map(|t| {
                let b = base(t);
                let l = if count[&b] > 1 && !b.starts_with("tid ") {
                    format!("{b} ({})", t.tid)
                } else {
                    b
                };
                (t.index, l)
            })
            .collect();
        let ranks = sorted
            .iter()
            .filter_map(|t| rank(t).map(|r| (t.index, r)))
            .collect();
        let workload = sorted
            .iter()
            .filter_map(|t| workload_index(&t.comm).map(|w| (t.index, w)))
            .collect();
        let order: Vec<usize> = sorted.iter().map(|t| t.index).collect();
        let positions = order.iter().enumerate().map(|(k, &t)| (t, k)).collect();
        TaskOrder {
            order,
            labels,
            ranks,
            workload,
            positions,
        }
    }

    /// The name of task `index` on the page.
    pub fn label(&self, index: usize) -> String {
        self.labels
            .get(&index)
            .cloned()
            .unwrap_or_else(|| format!("task {index}"))
    }

    /// The MPI rank task `index` belongs to, if any.
    pub fn rank(&self, index: usize) -> Option<usize> {
        self.ranks.get(&index).copied()
    }

    /// Display positions (in `rows`, a display order) where a new group of tasks starts:
    /// a new MPI rank, or the change from workload threads or ranks to other tasks.
    pub fn breaks(&self, rows: &[usize]) -> Vec<usize> {
        let group = |t: usize| match (self.workload.contains_key(&t), self.rank(t)) {
            (true, _) => (0, 0),
            (false, Some(r)) => (1, r),
            _ => (2, 0),
        };
        (1..rows.len())
            .filter(|&k| group(rows[k]) != group(rows[k - 1]))
            .collect()
    }

    /// Display order of a matrix over tasks 0..n: the known tasks below n in program order,
    /// then any index tasks.json does not name, in index order.
    pub fn for_matrix(&self, n: usize) -> Vec<usize> {
        let mut out: Vec<usize> = self.order.iter().copied().filter(|&i| i < n).collect();
        let mut seen = vec![false; n];
        for &i in &out {
            seen[i] = true;
        }
        out.extend((0..n).filter(|&i| !seen[i]));
        out
    }

    /// Position of each task on the page, to sort other records by.
    pub fn position(&self, index: usize) -> usize {
        self.positions
            .get(&index)
            .copied()
            .unwrap_or(self.order.len() + index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(index: usize, tid: u32, pid: u32, comm: &str, rank: Option<usize>) -> TaskRecord {
        TaskRecord {
            index,
            tid,
            pid,
            comm: comm.into(),
            mpi_rank: rank,
            ..Default::default()
        }
    }

    #[test]
    fn workload_threads_come_in_their_own_index_order() {
        // /proc order of a distant-pairs run: the main thread, then 1 2 4 5 7 0 3 6.
        let names = [
            "huddle",
            "wl-task-1",
            "wl-task-2",
            "wl-task-4",
            "wl-task-5",
            "wl-task-7",
            "wl-task-0",
            "wl-task-3",
            "wl-task-6",
        ];
        let tasks: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(i, n)| task(i, 100 + i as u32, 100, n, None))
            .collect();
        let o = TaskOrder::new(&tasks);
        assert_eq!(o.order, vec![6, 1, 2, 7, 3, 4, 8, 5, 0]);
        assert_eq!(o.label(6), "wl-task-0");
        assert_eq!(o.label(0), "huddle");
        assert_eq!(o.for_matrix(4), vec![1, 2, 3, 0]);
        assert_eq!(o.for_matrix(11), vec![6, 1, 2, 7, 3, 4, 8, 5, 0, 9, 10]);
        assert_eq!(o.label(10), "task 10");
        assert_eq!(o.breaks(&o.order), vec![8]);
    }

    #[test]
    fn mpi_ranks_come_in_rank_order_with_their_threads() {
        let tasks = vec![
            task(0, 10, 10, "mpirun", None),
            task(1, 11, 10, "mpirun", None),
            task(2, 20, 20, "lmp", Some(1)),
            task(3, 21, 20, "?", None),
            task(4, 30, 30, "lmp", Some(0)),
            task(5, 31, 30, "lmp", None),
            task(6, 32, 30, "lmp", None),
        ];
        let o = TaskOrder::new(&tasks);
        assert_eq!(o.order, vec![4, 5, 6, 2, 3, 0, 1]);
        assert_eq!(o.label(4), "rank 0");
        assert_eq!(o.label(5), "rank 0 · lmp (31)");
        assert_eq!(o.label(3), "rank 1 · tid 21");
        assert_eq!(o.label(1), "mpirun (11)");
        assert_eq!(o.rank(6), Some(0));
        assert_eq!(o.breaks(&o.order), vec![3, 5]);
        assert_eq!(o.rank(0), None);
    }

    #[test]
    fn other_names_sort_naturally() {
        let tasks = vec![
            task(0, 5, 1, "w-10", None),
            task(1, 6, 1, "?", None),
            task(2, 7, 1, "w-2", None),
            task(3, 8, 1, "main", None),
        ];
        assert_eq!(TaskOrder::new(&tasks).order, vec![3, 2, 0, 1]);
    }
}
