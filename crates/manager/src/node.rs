//! One node of an MPI job (`huddle node`): the ranks of this node, found on the PMPI agent's
//! board, watched and mapped by the same loop as `huddle attach`.
//!
//! The board tells which ranks run here (their slot's host name is this host's), their pids
//! and the thread each calls MPI from, and when each finalized or died. The detection session
//! is attached to the process the local ranks share as parent (the launcher's daemon on the
//! node: orted, hydra_pmi_proxy, slurmstepd, or mpirun itself), so ranks that reach MPI_Init
//! after the node manager started are followed too; [`NodeRanks`] then shows the loop only
//! the threads of the local ranks' processes, never the daemon's or another node's. The loop
//! ends when every local rank has finalized or died ([`all_done`]).

use crate::observe::Detected;
use crate::observer::{Exit, ObservedTask, Observer};
use matrix::CommMatrix;
use simmer::board::{Board, BoardSnapshot, RankSlot, SlotState};
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

/// The slots of the ranks that ran on host `host` (the name `gethostname` gives there, as the
/// agent writes it into each slot).
pub fn local_ranks<'a>(snap: &'a BoardSnapshot, host: &str) -> Vec<&'a RankSlot> {
    snap.ranks
        .iter()
        .filter(|r| r.state != SlotState::Empty && r.hostname == host)
        .collect()
}

/// Whether every one of `local` has finalized, exited without MPI_Finalize, or died (a
/// running slot whose process is gone). False while none is known: the node manager starts
/// before the last local ranks reach MPI_Init.
pub fn all_done(local: &[&RankSlot]) -> bool {
    !local.is_empty()
        && local
            .iter()
            .all(|r| !(r.state == SlotState::Running && r.alive))
}

/// This host's name as `gethostname` gives it (what the agent writes into a slot).
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length; gethostname NUL-terminates within it when the
    // name fits, and the last byte is kept 0.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// A host name as a file-name part, as the agent makes it for `node-HOST` (characters other
/// than `[A-Za-z0-9._-]` become `_`; an empty name, `.` or `..` is `unknown`).
pub fn file_name_part(host: &str) -> String {
    let s: String = host
        .chars()
        .take(63)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s == "." || s == ".." {
        "unknown".into()
    } else {
        s
    }
}

/// The process the detection session attaches to for ranks `pids`: the nearest common
/// ancestor of their parents (the launcher's daemon on this node), so that ranks started
/// after this call are below it too; where the ranks share no parent below init, the nearest
/// common ancestor of the ranks themselves (one rank: that rank). None when even that is
/// init or nothing (ranks from unrelated process trees).
pub fn attach_root(pids: &[u32]) -> Option<u32> {
    let ppid = |p: u32| detect::procs::read_stat(std::path::Path::new(&format!("/proc/{p}/stat")));
    let parents: Vec<u32> = pids
        .iter()
        .filter_map(|&p| ppid(p).map(|s| s.ppid))
        .collect();
    let usable = |r: &Option<u32>| r.is_some_and(|p| p > 1);
    let by_parent = (parents.len() == pids.len())
        .then(|| common_ancestor(&parents))
        .flatten();
    if usable(&by_parent) {
        return by_parent;
    }
    Some(common_ancestor(pids)?).filter(|&p| p > 1)
}

/// The nearest process that is `pids` or an ancestor of every one of them.
fn common_ancestor(pids: &[u32]) -> Option<u32> {
    let chain = |mut p: u32| {
        let mut c = vec![p];
        while p > 1 && c.len() < 4096 {
            match detect::procs::read_stat(std::path::Path::new(&format!("/proc/{p}/stat"))) {
                Some(st) if st.ppid != 0 => {
                    p = st.ppid;
                    c.push(p);
                }
                _ => break,
            }
        }
        c
    };
    let chains: Vec<Vec<u32>> = pids.iter().map(|&p| chain(p)).collect();
    let first = chains.first()?;
    first
        .iter()
        .copied()
        .find(|a| chains[1..].iter().all(|c| c.contains(a)))
}

/// The detection session's tasks restricted to this node's ranks, with the end of the loop
/// taken from the board. See the module documentation.
pub struct NodeRanks {
    /// The session (on the process [`attach_root`] names), with the MPI merge; the loop sees
    /// only the rows of the local ranks' processes.
    pub inner: Detected,
    board: Board,
    host: String,
    /// Session rows shown to the loop, in the order they joined (stable indexes).
    rows: Vec<usize>,
    shown: HashSet<usize>,
    /// rank -> pid of every local rank seen so far.
    ranks: BTreeMap<usize, u32>,
    /// The last snapshot of the board that could be read.
    last: Option<BoardSnapshot>,
    done: bool,
    started: Instant,
    /// How long to wait for a first local rank before giving up.
    patience: Duration,
    notes: Vec<String>,
}

impl NodeRanks {
    /// `board`: the job's board, opened; `host`: this host's name as slots carry it.
    pub fn new(inner: Detected, board: Board, host: String) -> NodeRanks {
        let mut notes = Vec::new();
        if !crate::procs::ours(inner.pid()) {
            notes.push(format!(
                "process {} (the ranks' parent) belongs to another user: only the processes of huddle's own user below it are watched and pinned",
                inner.pid()
            ));
        }
        let mut n = NodeRanks {
            inner,
            board,
            host,
            rows: Vec::new(),
            shown: HashSet::new(),
            ranks: BTreeMap::new(),
            last: None,
            done: false,
            started: Instant::now(),
            patience: Duration::from_secs(10),
            notes,
        };
        n.refresh();
        n
    }

    /// Reads the board and takes in the session's new tasks that belong to local ranks.
    fn refresh(&mut self) {
        match self.board.snapshot() {
            Ok(snap) => {
                let local = local_ranks(&snap, &self.host);
                for r in &local {
                    self.ranks.insert(r.rank, r.pid);
                }
                self.done = all_done(&local);
                self.last = Some(snap);
            }
            Err(e) => {
                // Resized by another job reusing the name: ours is over.
                self.push_note(format!("board no longer readable, stopped: {e}"));
                self.done = true;
            }
        }
        if self.ranks.is_empty() && self.started.elapsed() > self.patience {
            self.push_note(format!(
                "no rank of host {} appeared on the board within {} s",
                self.host,
                self.patience.as_secs()
            ));
            self.done = true;
        }
        let pids: HashSet<u32> = self.ranks.values().copied().collect();
        for (i, t) in self.inner.session.tasks().iter().enumerate() {
            if !t.agent && !self.shown.contains(&i) && pids.contains(&t.pid) {
                self.shown.insert(i);
                self.rows.push(i);
            }
        }
    }

    fn push_note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    /// The local ranks seen so far: rank -> pid.
    pub fn ranks(&self) -> &BTreeMap<usize, u32> {
        &self.ranks
    }

    /// The local ranks' slots as last read.
    pub fn local_slots(&self) -> Vec<RankSlot> {
        self.last
            .as_ref()
            .map(|s| local_ranks(s, &self.host).into_iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Bytes sent by this node's ranks (rows of other nodes' ranks are zero), over the world.
    pub fn rank_matrix(&self) -> Option<CommMatrix> {
        let snap = self.last.as_ref()?;
        let mut m = CommMatrix::zeros(snap.world_size);
        for r in local_ranks(snap, &self.host) {
            for (j, &b) in r.bytes_to.iter().enumerate().take(snap.world_size) {
                m.set(r.rank, j, b as f64);
            }
        }
        Some(m)
    }

    /// Whether every local rank has finalized or died.
    pub fn finished(&self) -> bool {
        self.done
    }

    /// Local ranks whose process is not below the session's root (started from another
    /// process tree): their threads are not watched.
    fn unwatched(&self) -> Vec<(usize, u32)> {
        let seen: HashSet<u32> = self.inner.session.tasks().iter().map(|t| t.pid).collect();
        self.ranks
            .iter()
            .filter(|(_, pid)| !seen.contains(pid))
            .map(|(&r, &p)| (r, p))
            .collect()
    }
}

impl Observer for NodeRanks {
    fn pid(&self) -> u32 {
        self.inner.pid()
    }

    fn poll(&mut self) -> u64 {
        let n = self.inner.poll();
        self.refresh();
        n
    }

    fn wait(&self, timeout: Duration) {
        self.inner.wait(timeout)
    }

    fn flush(&mut self) -> u64 {
        let n = self.inner.flush();
        self.refresh();
        n
    }

    fn snapshot(&self) -> (CommMatrix, Vec<ObservedTask>) {
        self.inner.snapshot_of(&self.rows)
    }

    fn age(&mut self) {
        self.inner.age()
    }

    fn lost(&self) -> u64 {
        self.inner.lost()
    }

    fn source(&self) -> String {
        self.inner.source()
    }

    fn notes(&self) -> Vec<String> {
        let mut notes = vec![format!(
            "node {}: ranks {} of a world of {} ({} of their threads watched), from the board; the session is attached to process {}",
            self.host,
            list(self.ranks.keys()),
            self.last.as_ref().map_or(0, |s| s.world_size),
            self.rows.len(),
            self.inner.pid()
        )];
        let unwatched = self.unwatched();
        if !unwatched.is_empty() {
            notes.push(format!(
                "ranks {} run here but not below process {}: their threads were not watched",
                list(unwatched.iter().map(|(r, _)| r)),
                self.inner.pid()
            ));
        }
        notes.extend(self.notes.iter().cloned());
        notes.extend(self.inner.notes());
        notes
    }

    fn cell_sources(&self) -> Option<Vec<Vec<&'static str>>> {
        self.inner.cell_sources_of(&self.rows)
    }

    fn fault_matrix(&self) -> Option<CommMatrix> {
        self.inner.fault_matrix_of(&self.rows)
    }

    fn mpi_ranks(&self) -> Vec<Option<usize>> {
        self.inner.mpi_ranks_of(&self.rows)
    }

    fn try_wait(&mut self) -> Option<Exit> {
        // The ranks are not ours: they end when the job says so.
        None
    }

    fn alive(&self) -> bool {
        !self.done
    }

    fn agent_cpu_s(&self) -> f64 {
        self.inner.agent_cpu_s()
    }

    fn rearmed_pages(&self) -> u64 {
        self.inner.rearmed_pages()
    }

    fn owned_pages(&self, task: usize) -> Vec<u64> {
        self.inner.owned_pages_of(&self.rows, task)
    }

    fn set_paused(&mut self, paused: bool) {
        self.inner.set_paused(paused)
    }

    fn set_dormant(&mut self, dormant: bool) {
        self.inner.set_dormant(dormant)
    }

    fn dormant(&self) -> bool {
        self.inner.dormant()
    }
}

fn list<'a>(items: impl Iterator<Item = &'a usize>) -> String {
    let v: Vec<String> = items.map(|r| r.to_string()).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use simmer::board::CacheCounter;

    fn slot(rank: usize, state: SlotState, alive: bool, host: &str) -> RankSlot {
        RankSlot {
            rank,
            state,
            pid: 100 + rank as u32,
            alive,
            hostname: host.into(),
            cpu: 0,
            tid: 0,
            blocking_ns: 0,
            compute_ns: 0,
            pending_compute_ns: 0,
            blocking_calls: 0,
            pending_sends: 0,
            cache_misses: None,
            cache_counter: CacheCounter::Unavailable,
            in_blocking_call: false,
            init_ns: 0,
            updated_ns: 0,
            sent_bytes: 0,
            sent_msgs: 0,
            bytes_to: vec![],
            msgs_to: vec![],
        }
    }

    fn snap(ranks: Vec<RankSlot>) -> BoardSnapshot {
        BoardSnapshot {
            world_size: 4,
            stamp: 1,
            taken_ns: 0,
            ranks,
        }
    }

    #[test]
    fn local_ranks_are_those_of_this_host() {
        let s = snap(vec![
            slot(0, SlotState::Running, true, "hA"),
            slot(1, SlotState::Running, true, "hA"),
            slot(2, SlotState::Running, true, "hB"),
        ]);
        let l: Vec<usize> = local_ranks(&s, "hA").iter().map(|r| r.rank).collect();
        assert_eq!(l, vec![0, 1]);
        assert!(local_ranks(&s, "hC").is_empty());
    }

    #[test]
    fn done_when_every_local_rank_finalized_or_died() {
        use SlotState::*;
        let cases = [
            (vec![], false),
            (vec![(Running, true)], false),
            (vec![(Finalized, true), (Running, true)], false),
            (vec![(Finalized, true), (Finalized, true)], true),
            (vec![(Finalized, true), (Running, false)], true),
            (vec![(ExitedWithoutFinalize, true), (Running, false)], true),
        ];
        for (states, want) in cases {
            let slots: Vec<RankSlot> = states
                .iter()
                .enumerate()
                .map(|(i, &(st, alive))| slot(i, st, alive, "h"))
                .collect();
            let refs: Vec<&RankSlot> = slots.iter().collect();
            assert_eq!(all_done(&refs), want, "{states:?}");
        }
    }

    #[test]
    fn host_names_become_file_name_parts() {
        assert_eq!(file_name_part("hA"), "hA");
        assert_eq!(file_name_part("node-1.example.org"), "node-1.example.org");
        assert_eq!(file_name_part("a/b c"), "a_b_c");
        assert_eq!(file_name_part(""), "unknown");
        assert_eq!(file_name_part(".."), "unknown");
    }

    #[test]
    fn the_root_is_the_ranks_common_parent() {
        use std::process::Command;
        // Two "ranks" started by one "daemon" (a shell), as orted starts a node's ranks.
        let mut daemon = Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30 & wait"])
            .spawn()
            .unwrap();
        let d = daemon.id();
        let mut kids = Vec::new();
        for _ in 0..200 {
            kids = detect::procs::process_tree(d)
                .into_iter()
                .filter(|&p| p != d)
                .collect();
            if kids.len() == 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(kids.len(), 2, "the daemon's two children");
        assert_eq!(attach_root(&kids), Some(d));
        assert_eq!(attach_root(&kids[..1]), Some(d), "one rank: its parent");
        // A rank and a process above it: their nearest common ancestor's parent... the
        // parents (d and the test's parent) meet above the test.
        let me = std::process::id();
        assert_ne!(attach_root(&[kids[0], me]), Some(d));
        unsafe { libc::kill(d as i32, libc::SIGKILL) };
        for k in kids {
            unsafe { libc::kill(k as i32, libc::SIGKILL) };
        }
        daemon.wait().unwrap();
    }
}
