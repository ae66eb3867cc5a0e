//! Step 3 of the loop: a migration carried out. Threads (or whole processes) are pinned
//! through the [`Ledger`], which remembers every mask it changed; with `--move-pages` their
//! memory follows them to their new NUMA node, a budget at a time. Failures (a thread that
//! ended, EPERM) become notes for the report, never errors.

use crate::actuate::{self, PinError};
use crate::decide::Choice;
use crate::ledger::Ledger;
use crate::observer::{ObservedTask, Observer};
use crate::pages::PageMover;
use mapping::{Slot, Target};
use std::collections::HashMap;

/// Carries out migrations: pins through the [`Ledger`] (sched_setaffinity), makes pages
/// follow with `--move-pages`, and keeps what failed as notes.
pub struct Actuator {
    ledger: Ledger,
    /// The slot each thread id was pinned to last.
    pinned: HashMap<u32, Slot>,
    mover: Option<PageMover>,
    /// What went wrong or was left undone, once each.
    notes: Vec<String>,
}

impl Actuator {
    /// `page_budget`: pages per task per interval that follow a migrated task (0: none);
    /// nothing moves where the allowed PUs share one NUMA node.
    pub fn new(ledger: Ledger, target: &Target, page_budget: usize) -> Actuator {
        let nodes: std::collections::BTreeSet<(usize, Option<u32>)> = target
            .allowed_slots()
            .into_iter()
            .map(|g| (target.node_of(g), target.pu(g).numa))
            .collect();
        let mover = (page_budget > 0 && nodes.len() > 1).then(|| PageMover::new(page_budget));
        let mut notes = Vec::new();
        if page_budget > 0 && mover.is_none() {
            notes.push(
                "--move-pages: the allowed PUs share one NUMA node, so no page has to move".into(),
            );
        }
        Actuator {
            ledger,
            pinned: HashMap::new(),
            mover,
            notes,
        }
    }

    /// The slot each thread id was pinned to last.
    pub fn pinned(&self) -> &HashMap<u32, Slot> {
        &self.pinned
    }

    /// Moves the live tasks (`live`: indices into `tasks`, running on `current`) to the
    /// choice's slots; their pages follow where that is on.
    pub fn migrate(
        &mut self,
        obs: &dyn Observer,
        target: &Target,
        tasks: &[ObservedTask],
        live: &[usize],
        current: &[usize],
        choice: &Choice,
    ) {
        for (k, &i) in live.iter().enumerate() {
            let task = &tasks[i];
            // SIMMer moves only the tasks it named; the others keep running where the
            // scheduler puts them.
            if choice.only_moved && choice.slots[k] == current[k] {
                continue;
            }
            let os = topology::CpuSet::from(choice.proposed_os[k]);
            let result = if task.whole_process {
                self.ledger.pin_process(task.pid, &os)
            } else {
                self.ledger.pin_thread(task.pid, task.tid, &os)
            };
            match result {
                Ok(()) => {
                    self.pinned.insert(task.tid, Slot(choice.slots[k]));
                }
                Err(PinError::Gone(_)) => continue,
                Err(e) => {
                    // Not moved: its memory stays where it runs.
                    self.note(e.to_string());
                    continue;
                }
            }
            if let (Some(m), Some(node)) = (
                self.mover.as_mut(),
                numa_os_index(target, Slot(choice.slots[k])),
            ) {
                let ranges = if task.whole_process {
                    actuate::private_ranges(task.pid)
                } else {
                    crate::pages::ranges_of(&obs.owned_pages(i), page_size())
                };
                m.follow(task.tid, task.pid, node, ranges);
            }
        }
    }

    /// Moves this interval's budget of queued pages.
    pub fn move_pages(&mut self) {
        let failures = self.mover.as_mut().map(PageMover::step).unwrap_or_default();
        for e in failures {
            self.note(e);
        }
    }

    /// Pages moved and pages that could not be moved so far.
    pub fn pages(&self) -> (u64, u64) {
        self.mover.as_ref().map_or((0, 0), |m| (m.moved, m.failed))
    }

    /// Puts back every mask huddle changed (an attached program let go, because `why`), and
    /// says how that went in the notes.
    pub fn let_go(&mut self, why: &str) {
        let restored = self.ledger.restore();
        let changed = self.ledger.changed();
        self.note(format!(
            "detached ({why}): the program was not signalled; {} of the {changed} threads huddle pinned had their affinity mask put back{}",
            restored.threads,
            if changed > restored.threads {
                " (the others had ended, or had set their own mask since)"
            } else {
                ""
            }
        ));
        for f in restored.failures {
            self.note(format!("affinity not put back: {f}"));
        }
    }

    /// The notes so far, in order.
    pub fn into_notes(self) -> Vec<String> {
        self.notes
    }

    fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }
}

/// OS index of the NUMA node of a slot (None without NUMA information).
fn numa_os_index(target: &Target, slot: Slot) -> Option<i32> {
    let node = target.pu(slot).numa?;
    let m = &target.machines()[target.node_of(slot)];
    m.numa_nodes.get(node as usize).map(|n| n.os_index as i32)
}

pub(crate) fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use topology::{Machine, OsCpu};

    fn choice(slots: Vec<usize>, os: Vec<OsCpu>, only_moved: bool) -> Choice {
        Choice {
            migrate: true,
            current_os: os.clone(),
            proposed_os: os,
            slots,
            only_moved,
            cost_now: 1.0,
            cost_new: 0.0,
            gain: 1.0,
            reason: "test".into(),
            interval_ms: 100,
        }
    }

    struct NoPages;
    impl Observer for NoPages {
        fn pid(&self) -> u32 {
            0
        }
        fn poll(&mut self) -> u64 {
            0
        }
        fn snapshot(&self) -> (matrix::CommMatrix, Vec<ObservedTask>) {
            (matrix::CommMatrix::zeros(0), Vec::new())
        }
        fn age(&mut self) {}
        fn lost(&self) -> u64 {
            0
        }
        fn source(&self) -> String {
            String::new()
        }
        fn notes(&self) -> Vec<String> {
            Vec::new()
        }
        fn try_wait(&mut self) -> Option<crate::observer::Exit> {
            None
        }
        fn alive(&self) -> bool {
            true
        }
    }

    fn sleeper_task(c: &std::process::Child) -> ObservedTask {
        ObservedTask {
            tid: c.id(),
            pid: c.id(),
            comm: "sleep".into(),
            first_seen: 0.0,
            whole_process: false,
        }
    }

    /// An actuator that moved every task of `tasks`, each now on `slot`, to `slot`.
    fn pin_all_to(
        target: &Target,
        slot: Slot,
        tasks: &[ObservedTask],
        only_moved: bool,
    ) -> (Actuator, OsCpu) {
        let mut act = Actuator::new(Ledger::launched(), target, 0);
        let os = target.os_cpu(slot);
        let n = tasks.len();
        let live: Vec<usize> = (0..n).collect();
        let c = choice(vec![slot.0; n], vec![os; n], only_moved);
        act.migrate(&NoPages, target, tasks, &live, &vec![slot.0; n], &c);
        (act, os)
    }

    #[test]
    fn pins_the_live_tasks_and_notes_the_ones_it_cannot() {
        let target = Target::machine(Machine::from_system().unwrap());
        let first = *target.allowed_slots().first().unwrap();
        let mut children: Vec<std::process::Child> = (0..2)
            .map(|_| {
                std::process::Command::new("sleep")
                    .arg("30")
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut tasks: Vec<ObservedTask> = children.iter().map(sleeper_task).collect();
        // A task that is gone: no note, no pin.
        tasks.push(ObservedTask {
            tid: u32::MAX - 1,
            pid: u32::MAX - 1,
            ..tasks[0].clone()
        });
        let (act, os) = pin_all_to(&target, first, &tasks, false);
        let masks: Vec<Option<topology::CpuSet>> = children
            .iter()
            .map(|c| actuate::get_affinity(c.id()))
            .collect();
        for c in &mut children {
            c.kill().unwrap();
            c.wait().unwrap();
        }
        assert_eq!(masks, vec![Some(topology::CpuSet::from(os)); 2]);
        assert_eq!(act.pinned().len(), 2);
        assert_eq!(act.pinned()[&tasks[0].tid], first);
        assert!(
            act.into_notes().is_empty(),
            "a task that ended is no failure"
        );
    }

    #[test]
    fn only_moved_leaves_the_unmoved_tasks_alone() {
        let target = Target::machine(Machine::from_system().unwrap());
        let first = *target.allowed_slots().first().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let before = actuate::get_affinity(child.id());
        let tasks = vec![sleeper_task(&child)];
        let (act, _) = pin_all_to(&target, first, &tasks, true);
        let after = actuate::get_affinity(child.id());
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(after, before, "its slot did not change");
        assert!(act.pinned().is_empty());
    }

    #[test]
    fn one_numa_node_moves_no_page_and_says_so() {
        let target = Target::machine(Machine::from_synthetic("pack:1 core:2 pu:1").unwrap());
        let act = Actuator::new(Ledger::launched(), &target, 8);
        assert_eq!(act.pages(), (0, 0));
        let notes = act.into_notes();
        assert!(
            notes.iter().any(|n| n.contains("one NUMA node")),
            "{notes:?}"
        );
        let two = Target::machine(Machine::from_synthetic("numa:2 core:1 pu:1").unwrap());
        assert!(Actuator::new(Ledger::launched(), &two, 8)
            .into_notes()
            .is_empty());
    }
}
