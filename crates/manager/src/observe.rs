//! Detection sessions as the loop's [`Observer`].

use crate::run::{Exit, Observer, TaskInfo};
use detect::{Session, TargetExit};
use matrix::CommMatrix;

/// A detection session on a launched (`spawned`) or attached program.
pub struct Detected {
    pub session: Session,
    pub spawned: bool,
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
}

impl Observer for Detected {
    fn pid(&self) -> u32 {
        self.session.pid() as u32
    }

    fn poll(&mut self) -> u64 {
        self.session.poll()
    }

    fn wait(&self, timeout: std::time::Duration) {
        self.session.wait(timeout);
    }

    fn flush(&mut self) -> u64 {
        self.session.flush()
    }

    fn snapshot(&self) -> (CommMatrix, Vec<TaskInfo>) {
        let rows = self.program_rows();
        let all = self.session.tasks();
        let whole_process = self.session.granularity() == detect::Granularity::Process;
        let tasks = rows
            .iter()
            .map(|&i| TaskInfo {
                tid: all[i].tid,
                pid: all[i].pid,
                comm: all[i].comm.clone(),
                first_seen: all[i].first_seen_ms / 1000.0,
                whole_process,
            })
            .collect();
        (self.session.matrix_of(&rows), tasks)
    }

    fn age(&mut self) {
        self.session.age();
    }

    fn owned_pages(&self, task: usize) -> Vec<u64> {
        match self.program_rows().get(task) {
            Some(&row) => self.session.owned_pages(row),
            None => Vec::new(),
        }
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
        active.join(" + ")
    }

    fn notes(&self) -> Vec<String> {
        let mut notes: Vec<String> = self
            .session
            .sources()
            .iter()
            .map(|s| format!("{}: {}", s.name, s.note))
            .collect();
        notes.extend(self.session.agent_notes());
        let st = self.session.stats();
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
        // SAFETY: kill with signal 0 only checks existence.
        self.spawned || unsafe { libc::kill(self.session.pid(), 0) } == 0
    }
}
