//! MPI traffic, exactly, from the PMPI agent's board, merged into the task matrix.
//!
//! Page faults see MPI traffic badly: single-copy transports (CMA, `process_vm_readv`) make
//! no fault at all, and small messages go through a few reused shared pages. The PMPI agent
//! preloaded into every rank counts the bytes each rank sends to each other rank. Each rank's
//! row lands on its thread that calls MPI (the rank's main thread, where MPI_Init ran), and
//! threads inside a rank still come from page faults (hybrid MPI + OpenMP).
//!
//! Units: a communication event of the fault detector is one block (`--block-size` bytes,
//! 256 by default) touched by a second task, so MPI bytes are counted as bytes / block size
//! events. With `--source mpi` the scale does not matter.

use crate::observer::ObservedTask;
use matrix::CommMatrix;
use simmer::board::Board;
use std::path::{Path, PathBuf};

/// Where the matrix the manager decides on comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceMode {
    /// Page faults alone (programs without MPI, or the agent cannot apply).
    Faults,
    /// Only the PMPI agent's byte counts between ranks.
    Mpi,
    /// MPI between ranks, page faults inside a rank and for tasks that are no rank.
    Both,
}

impl SourceMode {
    /// The mode a `--source` value names: `faults`, `mpi` or `both`; anything else is an
    /// error that lists them.
    pub fn parse(s: &str) -> Result<SourceMode, String> {
        match s {
            "faults" => Ok(SourceMode::Faults),
            "mpi" => Ok(SourceMode::Mpi),
            "both" => Ok(SourceMode::Both),
            other => Err(format!("--source {other}: expected faults, mpi or both")),
        }
    }
}

/// Where one cell of the merged matrix came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CellSource {
    /// Nothing: the cell is zero.
    None,
    /// Page faults (the detector's events).
    Faults,
    /// The PMPI agent's byte counts (in event units).
    Mpi,
}

impl CellSource {
    /// The name the report shows: `""`, `"faults"` or `"mpi"`.
    pub fn name(self) -> &'static str {
        match self {
            CellSource::None => "",
            CellSource::Faults => "faults",
            CellSource::Mpi => "mpi",
        }
    }
}

/// Where a rank runs on this node, from its board slot: its process, and the thread that made
/// its last blocking MPI call (0 where not known yet). A rank not on this node is all zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RankProc {
    /// The rank's process id; 0 for a rank not seen on this node.
    pub pid: u32,
    /// The thread of its last blocking MPI call; 0 where not known yet.
    pub tid: u32,
}

impl RankProc {
    /// The thread its MPI traffic is put on: the one that calls MPI, else the main thread.
    pub fn mpi_thread(&self) -> u32 {
        if self.tid != 0 {
            self.tid
        } else {
            self.pid
        }
    }

    /// Whether the task (`pid`, `tid`) is this rank's MPI thread; a whole-process task is
    /// when it is the rank's process.
    pub fn is_mpi(&self, pid: u32, tid: u32, whole_process: bool) -> bool {
        self.pid != 0
            && if whole_process {
                pid == self.pid
            } else {
                tid == self.mpi_thread()
            }
    }

    /// [`RankProc::is_mpi`] for an observed task.
    pub fn is_mpi_task(&self, task: &ObservedTask) -> bool {
        self.is_mpi(task.pid, task.tid, task.whole_process)
    }
}

/// The merged matrix over `tasks`, and each cell's source. `procs[r]` says where rank r runs
/// (see [`RankProc`]); `ranks` is its byte matrix (row = sender) already in event units. A
/// rank's MPI traffic lands on its MPI thread (see [`rank_threads`]).
pub fn merge(
    faults: &CommMatrix,
    tasks: &[ObservedTask],
    procs: &[RankProc],
    ranks: &CommMatrix,
    mode: SourceMode,
) -> (CommMatrix, Vec<Vec<CellSource>>) {
    let n = tasks.len();
    let mut out = CommMatrix::zeros(n);
    let mut src = vec![vec![CellSource::None; n]; n];
    // The rank whose process each task belongs to, and the rank whose MPI thread it is.
    let rank_of_pid = |pid: u32| procs.iter().position(|p| p.pid != 0 && p.pid == pid);
    let process_rank: Vec<Option<usize>> = tasks.iter().map(|t| rank_of_pid(t.pid)).collect();
    let mpi_thread = rank_threads(tasks, procs);
    for i in 0..n {
        for j in 0..n {
            if i == j {
                continue;
            }
            let between_ranks = matches!((process_rank[i], process_rank[j]),
                (Some(a), Some(b)) if a != b);
            let (v, s) = match (mode, between_ranks) {
                (SourceMode::Faults, _) => (faults.get(i, j), CellSource::Faults),
                (SourceMode::Both, false) => (faults.get(i, j), CellSource::Faults),
                (SourceMode::Mpi, false) => (0.0, CellSource::None),
                (SourceMode::Mpi | SourceMode::Both, true) => {
                    match (mpi_thread[i], mpi_thread[j]) {
                        (Some(a), Some(b)) if a < ranks.n() && b < ranks.n() => {
                            (ranks.get(a, b), CellSource::Mpi)
                        }
                        _ => (0.0, CellSource::Mpi),
                    }
                }
            };
            if v > 0.0 {
                out.set(i, j, v);
                src[i][j] = s;
            }
        }
    }
    (out, src)
}

/// Sources of a symmetrized matrix: a cell is MPI's if either direction is, else faults' if
/// either direction is.
pub fn symmetric_sources(src: &[Vec<CellSource>]) -> Vec<Vec<CellSource>> {
    let n = src.len();
    (0..n)
        .map(|i| {
            (0..n)
                .map(|j| match (src[i][j], src[j][i]) {
                    (CellSource::Mpi, _) | (_, CellSource::Mpi) => CellSource::Mpi,
                    (CellSource::Faults, _) | (_, CellSource::Faults) => CellSource::Faults,
                    _ => CellSource::None,
                })
                .collect()
        })
        .collect()
}

/// For each task, the rank whose MPI-calling thread it is (see [`merge`]).
pub fn rank_threads(tasks: &[ObservedTask], procs: &[RankProc]) -> Vec<Option<usize>> {
    tasks
        .iter()
        .map(|t| procs.iter().position(|p| p.is_mpi_task(t)))
        .collect()
}

/// The board of one run, read as it grows: the cumulative byte counts turned into an aged
/// matrix like the fault detector's (M -= M >> 2 after each migration).
pub struct MpiTraffic {
    path: PathBuf,
    board: Option<Board>,
    events_per_byte: f64,
    stamp: u64,
    /// Bytes already taken from the board, row-major over the world.
    taken: Vec<u64>,
    /// Aged events, row-major over the world.
    aged: Vec<f64>,
    procs: Vec<RankProc>,
    world: usize,
    bytes: u64,
}

impl MpiTraffic {
    /// The board the ranks will create at `path` (HUDDLE_BOARD), read once it exists.
    pub fn new(path: PathBuf, block_size: u64) -> MpiTraffic {
        MpiTraffic {
            path,
            board: None,
            events_per_byte: 1.0 / block_size.max(1) as f64,
            stamp: 0,
            taken: Vec::new(),
            aged: Vec::new(),
            procs: Vec::new(),
            world: 0,
            bytes: 0,
        }
    }

    /// Where the board is, or will be once the ranks create it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes what the ranks counted since the last update. A board not there yet (ranks
    /// before MPI_Init) or not readable is tried again next time.
    pub fn update(&mut self) {
        if self.board.is_none() {
            self.board = Board::open(&self.path).ok();
        }
        let Some(snap) = self.board.as_ref().and_then(|b| b.snapshot().ok()) else {
            return;
        };
        let w = snap.world_size;
        if snap.stamp != self.stamp || w != self.world {
            // A new job on this board (or the first read).
            self.stamp = snap.stamp;
            self.world = w;
            self.taken = vec![0; w * w];
            self.aged = vec![0.0; w * w];
            self.procs = vec![RankProc::default(); w];
        }
        for r in &snap.ranks {
            if r.rank >= w {
                continue;
            }
            self.procs[r.rank] = RankProc {
                pid: r.pid,
                tid: r.tid,
            };
            for (j, &b) in r.bytes_to.iter().enumerate().take(w) {
                let k = r.rank * w + j;
                let new = b.saturating_sub(self.taken[k]);
                self.taken[k] = self.taken[k].max(b);
                self.aged[k] += new as f64 * self.events_per_byte;
                self.bytes += new;
            }
        }
    }

    /// Ages the matrix as the detector ages its own after a migration.
    pub fn age(&mut self) {
        for v in &mut self.aged {
            *v -= *v / 4.0;
        }
    }

    /// Where each rank runs on this node (zero for ranks not seen), and the aged rank matrix.
    pub fn ranks(&self) -> (&[RankProc], CommMatrix) {
        let w = self.world;
        let rows = (0..w)
            .map(|i| self.aged[i * w..(i + 1) * w].to_vec())
            .collect();
        (&self.procs, CommMatrix::from_rows(rows))
    }

    /// Ranks that wrote to the board, and bytes counted so far.
    pub fn seen(&self) -> (usize, u64) {
        (self.procs.iter().filter(|p| p.pid != 0).count(), self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ranks by process, MPI thread not known yet (the main thread stands in).
    fn procs(pids: &[u32]) -> Vec<RankProc> {
        pids.iter().map(|&pid| RankProc { pid, tid: 0 }).collect()
    }

    fn task(tid: u32, pid: u32) -> ObservedTask {
        ObservedTask {
            tid,
            pid,
            comm: String::new(),
            first_seen: 0.0,
            whole_process: false,
        }
    }

    /// mpirun (pid 10), rank 0 (pid 20, threads 20 and 21), rank 1 (pid 30, thread 30).
    fn setup() -> (Vec<ObservedTask>, CommMatrix, Vec<RankProc>, CommMatrix) {
        let tasks = vec![task(10, 10), task(20, 20), task(21, 20), task(30, 30)];
        let mut faults = CommMatrix::zeros(4);
        faults.set(1, 2, 5.0); // threads of rank 0
        faults.set(2, 1, 5.0);
        faults.set(1, 3, 2.0); // rank 0 and rank 1 through a shared segment
        faults.set(0, 1, 1.0); // mpirun and rank 0
        let pids = procs(&[20, 30]);
        let ranks = CommMatrix::from_rows(vec![vec![0.0, 100.0], vec![40.0, 0.0]]);
        (tasks, faults, pids, ranks)
    }

    #[test]
    fn both_takes_ranks_from_mpi_and_threads_from_faults() {
        let (tasks, faults, pids, ranks) = setup();
        let (m, s) = merge(&faults, &tasks, &pids, &ranks, SourceMode::Both);
        assert_eq!(m.get(1, 3), 100.0);
        assert_eq!(m.get(3, 1), 40.0);
        assert_eq!(s[1][3], CellSource::Mpi);
        assert_eq!(m.get(1, 2), 5.0);
        assert_eq!(s[1][2], CellSource::Faults);
        assert_eq!(m.get(0, 1), 1.0, "mpirun is no rank: its faults stay");
        // The second thread of rank 0 has no MPI traffic, and its faults with rank 1 would be
        // the transport's: between ranks only MPI counts.
        assert_eq!(m.get(2, 3), 0.0);
    }

    #[test]
    fn mpi_alone_and_faults_alone() {
        let (tasks, faults, pids, ranks) = setup();
        let (m, s) = merge(&faults, &tasks, &pids, &ranks, SourceMode::Mpi);
        assert_eq!(m.get(1, 3), 100.0);
        assert_eq!(m.get(1, 2), 0.0);
        assert_eq!(m.get(0, 1), 0.0);
        assert_eq!(s[1][2], CellSource::None);
        let (m, _) = merge(&faults, &tasks, &pids, &ranks, SourceMode::Faults);
        assert_eq!(m.get(1, 3), 2.0);
        assert_eq!(m.get(1, 2), 5.0);
    }

    #[test]
    fn whole_process_tasks_carry_their_rank() {
        let mut tasks = vec![task(20, 20), task(30, 30)];
        for t in &mut tasks {
            t.whole_process = true;
        }
        let ranks = CommMatrix::from_rows(vec![vec![0.0, 7.0], vec![3.0, 0.0]]);
        let (m, _) = merge(
            &CommMatrix::zeros(2),
            &tasks,
            &procs(&[20, 30]),
            &ranks,
            SourceMode::Both,
        );
        assert_eq!((m.get(0, 1), m.get(1, 0)), (7.0, 3.0));
    }

    #[test]
    fn mpi_traffic_lands_on_the_thread_that_calls_mpi() {
        // Rank 0 calls MPI from its second thread (21), as an MPI_THREAD_MULTIPLE program may.
        let (tasks, faults, _, ranks) = setup();
        let procs = vec![RankProc { pid: 20, tid: 21 }, RankProc { pid: 30, tid: 30 }];
        let (m, s) = merge(&faults, &tasks, &procs, &ranks, SourceMode::Both);
        assert_eq!((m.get(2, 3), m.get(3, 2)), (100.0, 40.0));
        assert_eq!(s[2][3], CellSource::Mpi);
        assert_eq!(m.get(1, 3), 0.0, "the main thread does not call MPI here");
        assert_eq!(m.get(1, 2), 5.0, "threads of one rank keep their faults");
        assert_eq!(
            rank_threads(&tasks, &procs),
            vec![None, None, Some(0), Some(1)]
        );
    }

    #[test]
    fn ranks_not_yet_seen_leave_faults_alone() {
        let (tasks, faults, _, _) = setup();
        let (m, _) = merge(
            &faults,
            &tasks,
            &[],
            &CommMatrix::zeros(0),
            SourceMode::Both,
        );
        assert_eq!(m.to_rows(), faults.to_rows());
    }

    #[test]
    fn symmetric_sources_prefer_mpi_then_faults() {
        use CellSource::*;
        let src = vec![
            vec![None, Mpi, None],
            vec![Faults, None, None],
            vec![Faults, None, None],
        ];
        let sym = symmetric_sources(&src);
        assert_eq!(sym[0], vec![None, Mpi, Faults]);
        assert_eq!(sym[1], vec![Mpi, None, None]);
        assert_eq!(sym[2][0], Faults);
    }

    #[test]
    fn source_names_parse() {
        assert_eq!(SourceMode::parse("both"), Ok(SourceMode::Both));
        assert!(SourceMode::parse("pmpi")
            .unwrap_err()
            .contains("faults, mpi or both"));
    }
}
