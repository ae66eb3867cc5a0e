//! Detection sessions as the loop's [`Observer`].

use crate::mpi::{self, CellSource, MpiTraffic, SourceMode};
use crate::observer::{Exit, ObservedTask, Observer};
use detect::{Session, TargetExit};
use matrix::CommMatrix;

/// A detection session on a launched (`spawned`) or attached program, and where MPI ranks
/// are involved the PMPI agent's board with the way the two are merged.
pub struct Detected {
    /// The detection session on the program.
    pub session: Session,
    /// huddle launched the program (its child): it ends by [`Observer::try_wait`]. Otherwise
    /// it is alive while kill(pid, 0) succeeds.
    pub spawned: bool,
    /// The PMPI agent's board and how its traffic is merged with the faults; None without MPI.
    pub mpi: Option<(MpiTraffic, SourceMode)>,
}

impl Detected {
    /// Rows of the session's matrix that are program tasks (the agent's helper thread is
    /// listed by the session but never mapped). Tasks are only ever appended and their
    /// agent flag never changes, so these indexes are stable over the run.
    fn program_rows(&self) -> Vec<usize> {
        self.session
            .tasks()
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.agent)
            .map(|(i, _)| i)
            .collect()
    }

    /// The page-fault matrix over the session's tasks `rows`, and those tasks.
    fn faults_of(&self, rows: &[usize]) -> (CommMatrix, Vec<ObservedTask>) {
        (
            self.session.matrix_of(rows),
            task_infos(&self.session, rows),
        )
    }

    /// [`Observer::snapshot`] over the session's tasks `rows` only (in that order), for an
    /// observer that shows part of the session (see [`crate::node`]).
    pub fn snapshot_of(&self, rows: &[usize]) -> (CommMatrix, Vec<ObservedTask>) {
        let (faults, tasks) = self.faults_of(rows);
        match &self.mpi {
            Some((m, mode)) => {
                let (procs, ranks) = m.ranks();
                (mpi::merge(&faults, &tasks, procs, &ranks, *mode).0, tasks)
            }
            None => (faults, tasks),
        }
    }

    /// [`Observer::cell_sources`] over the session's tasks `rows`.
    pub fn cell_sources_of(&self, rows: &[usize]) -> Option<Vec<Vec<&'static str>>> {
        let (m, mode) = self.mpi.as_ref()?;
        let (faults, tasks) = self.faults_of(rows);
        let (procs, ranks) = m.ranks();
        let src = mpi::merge(&faults, &tasks, procs, &ranks, *mode).1;
        // The report's matrix is symmetrized, and so are the sources.
        Some(
            mpi::symmetric_sources(&src)
                .into_iter()
                .map(|r| r.into_iter().map(CellSource::name).collect())
                .collect(),
        )
    }

    /// [`Observer::fault_matrix`] over the session's tasks `rows`.
    pub fn fault_matrix_of(&self, rows: &[usize]) -> Option<CommMatrix> {
        self.mpi.as_ref().map(|_| self.faults_of(rows).0)
    }

    /// [`Observer::mpi_ranks`] over the session's tasks `rows`.
    pub fn mpi_ranks_of(&self, rows: &[usize]) -> Vec<Option<usize>> {
        match &self.mpi {
            Some((m, _)) => mpi::rank_threads(&self.faults_of(rows).1, m.ranks().0),
            None => Vec::new(),
        }
    }

    /// [`Observer::owned_pages`] of task `task` of a view over the session's tasks `rows`.
    pub fn owned_pages_of(&self, rows: &[usize], task: usize) -> Vec<u64> {
        match rows.get(task) {
            Some(&row) => self.session.owned_pages(row),
            None => Vec::new(),
        }
    }
}

/// The session's tasks `rows` as the loop and the MPI merge know them.
pub fn task_infos(session: &Session, rows: &[usize]) -> Vec<ObservedTask> {
    let all = session.tasks();
    let whole_process = session.granularity() == detect::Granularity::Process;
    rows.iter()
        .map(|&i| ObservedTask {
            tid: all[i].tid,
            pid: all[i].pid,
            comm: all[i].comm.clone(),
            first_seen: all[i].first_seen_ms / 1000.0,
            whole_process,
        })
        .collect()
}

impl Observer for Detected {
    fn pid(&self) -> u32 {
        self.session.pid() as u32
    }

    fn poll(&mut self) -> u64 {
        if let Some((m, _)) = &mut self.mpi {
            m.update();
        }
        self.session.poll()
    }

    fn wait(&self, timeout: std::time::Duration) {
        self.session.wait(timeout);
    }

    fn flush(&mut self) -> u64 {
        if let Some((m, _)) = &mut self.mpi {
            m.update();
        }
        self.session.flush()
    }

    fn snapshot(&self) -> (CommMatrix, Vec<ObservedTask>) {
        self.snapshot_of(&self.program_rows())
    }

    fn cell_sources(&self) -> Option<Vec<Vec<&'static str>>> {
        self.cell_sources_of(&self.program_rows())
    }

    fn fault_matrix(&self) -> Option<CommMatrix> {
        self.fault_matrix_of(&self.program_rows())
    }

    fn mpi_ranks(&self) -> Vec<Option<usize>> {
        self.mpi_ranks_of(&self.program_rows())
    }

    fn age(&mut self) {
        self.session.age();
        if let Some((m, _)) = &mut self.mpi {
            m.age();
        }
    }

    fn owned_pages(&self, task: usize) -> Vec<u64> {
        self.owned_pages_of(&self.program_rows(), task)
    }

    fn agent_cpu_s(&self) -> f64 {
        self.session.stats().agent_cpu_s
    }

    fn rearmed_pages(&self) -> u64 {
        let s = self.session.stats();
        s.rearmed_shared + s.rearmed_private
    }

    fn set_paused(&mut self, paused: bool) {
        self.session.set_paused(paused);
    }

    fn set_dormant(&mut self, dormant: bool) {
        self.session.set_dormant(dormant);
    }

    fn dormant(&self) -> bool {
        self.session.dormant()
    }

    fn lost(&self) -> u64 {
        let s = self.session.stats();
        s.perf_lost + s.agent_dropped
    }

    fn source(&self) -> String {
        let active: Vec<String> = self
            .session
            .sources()
            .iter()
            .filter(|s| s.active)
            .map(|s| s.name.clone())
            .collect();
        let faults = active.join(" + ");
        match &self.mpi {
            Some((_, SourceMode::Mpi)) => "PMPI agent (MPI bytes between ranks)".into(),
            Some((_, _)) => format!("{faults} + PMPI agent (MPI bytes between ranks)"),
            None => faults,
        }
    }

    fn notes(&self) -> Vec<String> {
        let mut notes: Vec<String> = self
            .session
            .sources()
            .iter()
            .map(|s| format!("{}: {}", s.name, s.note))
            .collect();
        notes.extend(self.session.agent_notes());
        if let Some((m, mode)) = &self.mpi {
            let (ranks, bytes) = m.seen();
            notes.push(if ranks == 0 {
                format!(
                    "mpi: no rank wrote to {} (the program never called MPI_Init with the PMPI agent preloaded: statically linked, another MPI, or no MPI at all); {}",
                    m.path().display(),
                    if *mode == SourceMode::Mpi { "the matrix is empty" } else { "page faults alone" }
                )
            } else {
                format!(
                    "mpi: {ranks} ranks on this node counted {bytes} bytes sent (PMPI agent, exact); between ranks the matrix holds bytes / block size{}",
                    if *mode == SourceMode::Both { ", inside a rank page faults" } else { "" }
                )
            });
        }
        let st = self.session.stats();
        if let Some(edges) = st.page_edges_note() {
            let pids: Vec<String> = st.page_mode_pids.iter().map(u32::to_string).collect();
            notes.push(format!(
                "page mode: the threads of process {} are paired by page; {edges}",
                pids.join(", ")
            ));
        }
        if let Some(proven) = st.proven_note() {
            notes.push(proven);
        }
        notes.push(format!(
            "sharer table: {} slots, {} KiB, {} evictions; {} faults, {} communication events",
            st.table_slots,
            st.table_bytes / 1024,
            st.table_evictions,
            st.faults,
            st.comm_events
        ));
        notes
    }

    fn try_wait(&mut self) -> Option<Exit> {
        self.session.try_wait().map(|e| match e {
            TargetExit::Code(c) => Exit::Code(c),
            TargetExit::Signal(s) => Exit::Signal(s),
        })
    }

    fn alive(&self) -> bool {
        // SAFETY: kill with signal 0 only checks existence. EPERM: there, under another user
        // since an exec of a setuid program; only ESRCH means gone.
        self.spawned
            || unsafe { libc::kill(self.session.pid(), 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }
}
