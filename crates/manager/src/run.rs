//! The loop: sample -> decide -> act -> record, once an interval, until the program ends.
//! Each step is a module of its own ([`crate::sample`], [`crate::decide`], [`crate::act`],
//! [`crate::record`]); this one runs them and handles signals and the end of the run.

use crate::act::Actuator;
use crate::claims::Narrowed;
use crate::control::Controller;
use crate::decide::{Decider, Live, Outcome};
use crate::observer::{Exit, ObservedTask, Observer};
use crate::policy::Policy;
use crate::record::{Closing, Recorder};
use crate::sample::{Sampled, Sampler};
use mapping::{Slot, Target};
use matrix::CommMatrix;
use rundata::RunData;
use std::time::{Duration, Instant};

/// Whose program it is: what huddle's signals mean, and what is left when huddle stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// `huddle run`: huddle started the program. SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to
    /// huddle are passed on to it (see [`detect::signals::install_forwarding`]); the loop ends when the
    /// program does, and its last placement stays until then.
    Launched,
    /// `huddle attach`: the program is someone else's. It is never sent a signal; SIGINT,
    /// SIGTERM, SIGHUP and SIGQUIT sent to huddle end the loop (see
    /// [`detect::signals::install_detach`]), and every affinity mask huddle changed is put back (see
    /// [`crate::ledger`]) however the loop ends.
    Attached,
}

/// Why the loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The program ended.
    Ended,
    /// `max_seconds` passed.
    TimeUp,
    /// An attached program was let go because huddle got this signal.
    Signal(i32),
}

/// Options of one managed run.
pub struct Config {
    /// Whether huddle launched the program or attached to it.
    pub ownership: Ownership,
    /// What to aim for (see [`crate::policy::parse`]).
    pub policy: Box<dyn Policy>,
    /// When to migrate; its interval at the start is the first tick's.
    pub controller: Controller,
    /// Pages per task moved per interval with --move-pages (0 = off). Only used when the
    /// allowed PUs span several NUMA nodes.
    pub page_budget: usize,
    /// One-line live status on stderr.
    pub status_line: bool,
    /// Stop managing after this long even if the program runs on (attach mode).
    pub max_seconds: Option<f64>,
    /// Communication required before the first decision
    /// ([`crate::decide::DEFAULT_MIN_TRAFFIC`]).
    pub min_traffic: f64,
    /// The program's command line, for the report.
    pub command: Vec<String>,
    /// The CPUs other managers of this machine pin on, left out of decisions (`huddle node`;
    /// see [`crate::claims`]).
    pub claims: Option<crate::claims::Claims>,
    /// How the machine model was obtained, and its size, for the report.
    pub machine_description: String,
    /// On a flat target (`Target::is_flat`), with a policy that places by traffic: put the
    /// fault agents to sleep while the tasks running are no more than the PUs, and wake them
    /// when they outnumber them (`huddle run --watch auto`).
    pub agent_sleeps: bool,
}

/// How long a manager pins nothing while other managers' claims leave fewer CPUs than it has
/// busy tasks, none of them pinned yet. Longer, and the machine is oversubscribed for good
/// (two jobs of more busy tasks together than CPUs): tasks share PUs whatever is done, and
/// partners sharing one is the best left, so the decision is made on the manager's share of
/// the CPUs ([`crate::claims::share`]).
const TOO_FEW_WAIT_S: f64 = 1.0;

/// A task that used CPU over this last span is running (see `idle::IdleTracker::share_lately`).
const RAN_LATELY_S: f64 = 0.1;
/// Where more tasks ran than there are PUs, those that used at least this share of a CPU are
/// the ones running, if each of the others used under [`LIGHT_SHARE`] (see [`running_now`]).
const BUSY_SHARE: f64 = 0.5;
/// See [`BUSY_SHARE`]: 4 threads sharing 2 PUs use about half a CPU each, some a little
/// more, some a little less, and must all stay running.
const LIGHT_SHARE: f64 = 0.25;
/// How long one task more than the PUs must be running to wake a dormant agent.
const RUN_OVER_S: f64 = 0.2;
/// How long the tasks running must be no more than the PUs before the agents sleep.
const SLEEP_AFTER_S: f64 = 0.3;

/// Which tasks run now, by the share of a CPU each used over the last span (`shares`, 0 for
/// none): those that ran at all; where they outnumber the `pus`, only those that used at least
/// [`BUSY_SHARE`] of a CPU, when each of the others used under [`LIGHT_SHARE`] and all of them
/// together less than one CPU. That is an MPI job starting: its ranks compute while the
/// launcher and the ranks' helper threads run a little beside them. Counted as running, those held the ranks floating until MPI_Init was
/// over (LAMMPS, 16 ranks on the 16-core lent machine: 21 tasks running at 0.48 s, pinned at
/// 0.68 s, when binding at exec ran 7 % faster than the OS, 2026-11-27). Tasks that share the
/// PUs evenly (an oversubscribed program) all stay running.
fn running_now(shares: &[f64], pus: usize) -> Vec<bool> {
    let ran: Vec<bool> = shares.iter().map(|&s| s > 0.0).collect();
    if ran.iter().filter(|&&r| r).count() <= pus {
        return ran;
    }
    let busy: Vec<bool> = shares.iter().map(|&s| s >= BUSY_SHARE).collect();
    let rest: Vec<f64> = (shares.iter().zip(&busy))
        .filter(|&(_, &b)| !b)
        .map(|(&s, _)| s)
        .collect();
    let light = rest.iter().all(|&s| s < LIGHT_SHARE) && rest.iter().sum::<f64>() < 1.0;
    let n_busy = busy.iter().filter(|&&b| b).count();
    if (1..=pus).contains(&n_busy) && light {
        busy
    } else {
        ran
    }
}

/// The report's line on the first share of the CPUs a manager decided on (crate::claims).
fn share_line(share: &Target, t: f64) -> String {
    let cpus: Vec<String> = (share.allowed_slots().iter())
        .map(|&s| share.os_cpu(s).0.to_string())
        .collect();
    format!(
        "its share: CPUs {}, those with the fewest of the other managers' busy tasks, as few as \
         keep the busiest PU light (first at {t:.2} s)",
        cpus.join(",")
    )
}

/// The report's line on the agents' sleep ([`Config::agent_sleeps`]): `log` holds (t, tasks
/// running, asleep after) at each change, `asleep` the state at the end. None if they never
/// slept.
fn sleep_note(
    log: &[(f64, usize, bool)],
    asleep: bool,
    most_running: usize,
    target: &Target,
) -> Option<String> {
    if log.is_empty() {
        return None;
    }
    let pus = target.allowed_slots().len();
    let changes: Vec<String> = (log.iter().take(8))
        .map(|&(t, n, sleep)| {
            let verb = if sleep { "slept" } else { "woke" };
            format!("{verb} at {t:.2} s ({n} running)")
        })
        .collect();
    let more = match log.len() - changes.len() {
        0 => String::new(),
        k => format!(" and {k} more changes"),
    };
    Some(format!(
        "fault agent asleep (no memory registered, no page re-armed) while no more tasks ran than \
         the {pus} PUs, all equally far apart, where their traffic cannot change a placement \
         (--watch always keeps it awake): {}{more}; at most {most_running} running at once, {} \
         at the end",
        changes.join(", "),
        if asleep { "asleep" } else { "awake" }
    ))
}

/// The tasks of `s` and their communication, for a [`Live`].
fn live_parts(
    s: &Sampled,
    tasks: &[ObservedTask],
    matrix: &CommMatrix,
) -> (Vec<ObservedTask>, CommMatrix) {
    let live_tasks = s.live.iter().map(|&i| tasks[i].clone()).collect();
    (live_tasks, crate::decide::live_matrix(matrix, &s.live))
}

/// The kernel CPUs of the tasks pinned to one PU (`masks`: each task's allowed slots).
fn pinned_pus(target: &Target, masks: &[Vec<usize>]) -> Vec<topology::OsCpu> {
    masks
        .iter()
        .filter(|m| m.len() == 1)
        .map(|m| target.os_cpu(Slot(m[0])))
        .collect()
}

/// Runs the loop until the program ends (or `max_seconds`), then returns everything the
/// report needs. Acting failures (a thread that exits, EPERM) are recorded, never fatal.
pub fn manage(obs: &mut dyn Observer, target: &Target, cfg: Config) -> RunData {
    manage_until(obs, target, cfg).0
}

/// [`manage`], also saying why the loop ended. With [`Ownership::Attached`] the program's
/// affinity masks are as they were before (see [`crate::ledger`]) when this returns.
pub fn manage_until(obs: &mut dyn Observer, target: &Target, cfg: Config) -> (RunData, Stop) {
    let mut record = Recorder::new();
    let ledger = match cfg.ownership {
        Ownership::Launched => crate::ledger::Ledger::launched(),
        Ownership::Attached => crate::ledger::Ledger::attached(obs.pid()),
    };
    let mut sampler = Sampler::new(target);
    let mut decider = Decider::new(cfg.policy, cfg.controller, cfg.min_traffic);
    let mut act = Actuator::new(ledger, target, cfg.page_budget);
    let mut stop = Stop::Ended;
    // Said once in the report: when other managers' CPUs were first left out.
    let mut claims_note = None;
    let mut too_few_note = None;
    let mut share_note = None;
    let mut oversubscribed_note = None;
    let mut too_few_since = None;
    // Computed once: a share of a flat machine's PUs (crate::claims) is flat too.
    let flat = target.is_flat();
    let sleeps = cfg.agent_sleeps && flat && decider.policy.places_by_traffic();
    // (t, tasks running, asleep after) at each change, for the report.
    let mut sleep_log: Vec<(f64, usize, bool)> = Vec::new();
    let mut most_running = 0;
    let (mut over_since, mut under_since) = (None, None);
    let exit = loop {
        let interval_ms = decider.controller.wait_ms();
        let (events, exit, detach) = wait_interval(obs, cfg.ownership, interval_ms);
        if detach != 0 {
            // No decision after the signal: the program is let go as it is.
            stop = Stop::Signal(detach);
            record.count_events(events);
            break None;
        }
        let t = record.elapsed();
        let interval_s = interval_ms as f64 / 1000.0;

        // 1. Sample: where the live tasks run and may run.
        let (matrix, tasks) = obs.snapshot();
        let mut sampled = sampler.sample(t, &matrix, &tasks, act.pinned());
        record.tick(t, events, obs.lost(), interval_s, &matrix, &sampled);
        // Policies that map the matrix leave idle tasks out (they keep the PUs they have).
        if decider.needs_traffic() {
            sampler.leave_idle_out(&mut sampled, &tasks, t);
        }
        // On a flat machine the agents sleep while the tasks running are no more than the
        // PUs (no placement of them costs less than another) for SLEEP_AFTER_S, and wake once
        // they outnumber them: which of them share a PU is then for the matrix to say. One
        // more than the PUs must last RUN_OVER_S: a launcher that initialised before its
        // workers started runs beside them for a tick.
        let pus = target.allowed_slots().len();
        let shares = sampler.shares_lately(&sampled, &tasks, t, RAN_LATELY_S);
        let ran = running_now(&shares, pus);
        let running = ran.iter().filter(|&&r| r).count();
        most_running = most_running.max(running);
        if sleeps {
            if running <= pus {
                over_since = None;
                let since = *under_since.get_or_insert(t);
                if !obs.dormant() && t - since >= SLEEP_AFTER_S {
                    obs.set_dormant(true);
                    sleep_log.push((t, running, true));
                }
            } else {
                under_since = None;
                let since = *over_since.get_or_insert(t);
                if obs.dormant() && (running > pus + 1 || t - since >= RUN_OVER_S) {
                    obs.set_dormant(false);
                    sleep_log.push((t, running, false));
                }
            }
        }

        // 2. Decide.
        let (live_tasks, sub) = live_parts(&sampled, &tasks, &matrix);
        let live = Live {
            matrix: &sub,
            tasks: &live_tasks,
            current: &sampled.current,
            masks: &sampled.masks,
        };
        // Other managers' CPUs are left out while the decision and its pinning are made
        // (under their lock, so that two deciding at once do not take the same CPUs).
        let locked = cfg.claims.as_ref().and_then(|c| Some((c, c.lock().ok()?)));
        let mut narrowed = None;
        let mut too_few = false;
        if let Some((c, _)) = &locked {
            match c.narrow(target, live_tasks.len()) {
                Narrowed::Whole => too_few_since = None,
                Narrowed::To(t_narrowed, note) => {
                    too_few_since = None;
                    claims_note.get_or_insert_with(|| format!("{note} (first at {t:.2} s)"));
                    narrowed = Some(t_narrowed);
                }
                Narrowed::TooFew(note, share) => {
                    too_few_note.get_or_insert_with(|| {
                        format!(
                            "{note}: none was pinned for up to {TOO_FEW_WAIT_S} s, then on this \
                             manager's share of the CPUs (first at {t:.2} s)"
                        )
                    });
                    let since = *too_few_since.get_or_insert(t);
                    // The wait spares floating tasks being pinned beside the others'; tasks
                    // this manager pinned already sit there, or on a PU of their own, and
                    // gain nothing from it (four hosts' managers each left both ranks on PU 0
                    // for the second: bench/node, 2026-11-27).
                    let pinned = sampled.masks.iter().any(|m| m.len() == 1);
                    too_few = !pinned && t - since < TOO_FEW_WAIT_S;
                    if !too_few {
                        share_note.get_or_insert_with(|| share_line(&share, t));
                        narrowed = Some(share);
                    }
                }
                Narrowed::Oversubscribed(note, share) => {
                    too_few_since = None;
                    oversubscribed_note
                        .get_or_insert_with(|| format!("{note} (first at {t:.2} s)"));
                    share_note.get_or_insert_with(|| share_line(&share, t));
                    narrowed = Some(share);
                }
            }
        }
        let mut claimed = None;
        let deciding_on = narrowed.as_ref().unwrap_or(target);
        // On a flat machine the tasks running now (not the busy ones of the last second,
        // which count a launcher that has just started its workers) are pinned at once.
        let pinned_flat = (flat && !too_few)
            .then(|| {
                let mut running = sampled.clone();
                running.keep_where(&ran);
                let (tasks_running, sub) = live_parts(&running, &tasks, &matrix);
                let live = Live {
                    matrix: &sub,
                    tasks: &tasks_running,
                    current: &running.current,
                    masks: &running.masks,
                };
                Some((decider.pin_flat(t, deciding_on, &live)?, running))
            })
            .flatten();
        let judged = match pinned_flat {
            Some(pinned) => Some(pinned),
            None if too_few => {
                // No decision: the tasks float (or stay where they are) while other managers'
                // busy tasks may still go idle (MPI_Init's threads do within tenths of a
                // second).
                None
            }
            None => match decider.decide(t, deciding_on, &live) {
                Outcome::Judged(choice) => Some((choice, sampled.clone())),
                _ => None,
            },
        };
        if let Some((choice, on)) = judged {
            // 3. Act.
            if choice.migrate {
                act.migrate(obs, target, &tasks, &on.live, &on.current, &choice);
                obs.age();
                claimed = Some(choice.proposed_os.clone());
            }
            // 4. Record.
            record.decision(t, &on.live, &choice);
        }
        if let Some((c, _)) = &locked {
            // What the busy tasks hold now: tasks that went idle give their PUs back.
            let held = claimed.unwrap_or_else(|| pinned_pus(target, &sampled.masks));
            let _ = c.claim(&held);
        }
        drop(locked);
        act.move_pages();
        if cfg.status_line {
            let line =
                record.status_line(t, sampled.live.len(), events as f64 / interval_s.max(1e-3));
            eprint!("\r{line}\x1b[K");
        }
        if let Some(e) = exit {
            break Some(e);
        }
        if !obs.alive() {
            break obs.try_wait();
        }
        if cfg.max_seconds.is_some_and(|m| t >= m) {
            stop = Stop::TimeUp;
            break None;
        }
    };
    if cfg.status_line {
        eprintln!();
    }
    if cfg.ownership == Ownership::Attached {
        act.let_go(&match stop {
            Stop::Ended => "the program ended".to_string(),
            Stop::TimeUp => "--seconds passed".to_string(),
            Stop::Signal(s) => format!("huddle got {}", detect::signals::name(s)),
        });
    }
    // Everything still buffered, the board's last bytes included, before the policy
    // finishes (SIMMer removes the board it named).
    record.count_events(obs.flush());
    decider.policy.finish();
    let closing = Closing {
        command: cfg.command,
        policy: decider.policy.name(),
        machine_description: cfg.machine_description,
        allowed_pus: target
            .allowed_slots()
            .iter()
            .map(|&g| target.os_cpu(g).0)
            .collect(),
        threshold: decider.controller.threshold,
        pages: act.pages(),
        notes: {
            let mut notes = act.into_notes();
            notes.extend(decider.policy.notes());
            notes.extend(claims_note);
            notes.extend(too_few_note);
            notes.extend(share_note);
            notes.extend(oversubscribed_note);
            notes.extend(sleep_note(&sleep_log, obs.dormant(), most_running, target));
            notes
        },
    };
    (record.finish(obs, &sampler, exit, closing), stop)
}

/// Waits out one interval of `interval_ms`, draining events after every slice (a slice ends
/// early when a buffer fills, and lasts at most 100 ms so that exits and signals are handled
/// promptly), passing signals on (launched) or taking the order to let go (attached), and
/// pausing or resuming the extra faults on SIGUSR1/SIGUSR2. Returns the events processed,
/// the program's exit if it ended, and the signal that tells huddle to let an attached
/// program go (0: none). `huddle detect` waits with it too.
pub fn wait_interval(
    obs: &mut dyn Observer,
    ownership: Ownership,
    interval_ms: u64,
) -> (u64, Option<Exit>, i32) {
    let wake = Instant::now() + Duration::from_millis(interval_ms);
    let mut exit = None;
    let mut events = 0;
    let mut detach = 0;
    while Instant::now() < wake && exit.is_none() {
        match ownership {
            Ownership::Launched => forward_signal(obs.pid()),
            Ownership::Attached => {
                detach = detect::signals::take_detach();
                if detach != 0 {
                    break;
                }
            }
        }
        if let Some(paused) = detect::signals::take_pause() {
            obs.set_paused(paused);
        }
        exit = obs.try_wait();
        if exit.is_some() || !obs.alive() {
            // Ended: no wait for more events (what is left is drained below).
            break;
        }
        let left = wake.saturating_duration_since(Instant::now());
        obs.wait(left.min(Duration::from_millis(100)));
        events += obs.poll();
    }
    events += obs.poll();
    (events, exit, detach)
}

/// Passes a signal huddle received (from kill, not from the terminal) on to the program.
fn forward_signal(pid: u32) {
    let sig = detect::signals::take_forward();
    if sig != 0 {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            libc::kill(pid as libc::pid_t, sig);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actuate;
    use crate::idle;
    use matrix::CommMatrix;
    use rundata::Decision;
    use std::process::{Child, Command};
    use topology::Machine;

    /// Real processes as tasks, with a fixed matrix: checks the loop and the actuation, not
    /// detection (which has its own tests).
    struct Fixed {
        pids: Vec<u32>,
        /// Our own children among them (the test reaps them).
        children: Vec<Child>,
        matrix: CommMatrix,
        aged: usize,
        /// Tasks whose owned pages the loop asked for.
        asked: std::cell::RefCell<Vec<usize>>,
    }

    impl Fixed {
        fn new(children: Vec<Child>, matrix: CommMatrix) -> Fixed {
            let mut f = Fixed::foreign(children.iter().map(Child::id).collect(), matrix);
            f.children = children;
            f
        }

        /// Processes that are not ours.
        fn foreign(pids: Vec<u32>, matrix: CommMatrix) -> Fixed {
            Fixed {
                pids,
                children: Vec::new(),
                matrix,
                aged: 0,
                asked: Default::default(),
            }
        }
    }

    /// Our children end with the test, panics included.
    impl Drop for Fixed {
        fn drop(&mut self) {
            for c in &mut self.children {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    impl Observer for Fixed {
        fn pid(&self) -> u32 {
            self.pids[0]
        }
        fn poll(&mut self) -> u64 {
            10
        }
        fn snapshot(&self) -> (CommMatrix, Vec<ObservedTask>) {
            let tasks = self
                .pids
                .iter()
                .map(|&p| ObservedTask {
                    tid: p,
                    pid: p,
                    comm: "sleep".into(),
                    first_seen: 0.0,
                    whole_process: false,
                })
                .collect();
            (self.matrix.clone(), tasks)
        }
        fn age(&mut self) {
            self.aged += 1;
        }
        fn owned_pages(&self, task: usize) -> Vec<u64> {
            self.asked.borrow_mut().push(task);
            // Up to 32 pages of the task's private memory.
            let page = crate::act::page_size();
            actuate::private_ranges(self.pids[task])
                .iter()
                .flat_map(|&(a, b)| (a..b).step_by(page as usize))
                .take(32)
                .collect()
        }
        fn lost(&self) -> u64 {
            0
        }
        fn source(&self) -> String {
            "fixed matrix (test)".into()
        }
        fn notes(&self) -> Vec<String> {
            Vec::new()
        }
        fn try_wait(&mut self) -> Option<Exit> {
            None
        }
        fn alive(&self) -> bool {
            true
        }
    }

    /// The `comm` policy with defaults, stopping after `seconds`.
    fn comm_config(seconds: f64) -> Config {
        Config {
            ownership: Ownership::Launched,
            policy: crate::policy::parse("comm", 1, None).unwrap(),
            controller: Controller::default(),
            page_budget: 0,
            status_line: false,
            max_seconds: Some(seconds),
            min_traffic: crate::decide::DEFAULT_MIN_TRAFFIC,
            command: vec!["sleep".into()],
            claims: None,
            machine_description: "this machine".into(),
            agent_sleeps: false,
        }
    }

    /// `n` idle child processes standing in for a program's tasks.
    fn sleepers(n: usize) -> Vec<Child> {
        (0..n)
            .map(|_| Command::new("sleep").arg("30").spawn().unwrap())
            .collect()
    }

    /// `n` busy child processes (a shell loop each).
    fn spinners(n: usize) -> Vec<Child> {
        (0..n)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .spawn()
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn idle_tasks_are_left_out_of_the_mapping() {
        let machine = Machine::from_system().unwrap();
        let target = Target::machine(machine);
        // Task 0 sleeps (a launcher waiting for its workers); tasks 1 and 2 run.
        let mut children = sleepers(1);
        children.extend(spinners(2));
        // The sleeper has the heaviest traffic (it initialised everyone's memory).
        let mut m = CommMatrix::zeros(3);
        for (a, b, w) in [(0, 1, 500.0), (0, 2, 500.0), (1, 2, 100.0)] {
            m.set(a, b, w);
            m.set(b, a, w);
        }
        let mut obs = Fixed::new(children, m);
        let data = manage(&mut obs, &target, comm_config(2.2));
        let late: Vec<&Decision> = data
            .decisions
            .iter()
            .filter(|d| d.t > idle::WINDOW_S + 0.2)
            .collect();
        assert!(!late.is_empty(), "decisions go on: {:?}", data.decisions);
        for d in late {
            assert_eq!(d.tasks, vec![1, 2], "the idle task is not mapped: {d:?}");
        }
    }

    /// An attached program: pinned while huddle holds it, its masks put back when huddle
    /// lets go, after --seconds or on a detach signal, and no signal sent to it.
    #[test]
    fn an_attached_program_gets_its_masks_back() {
        let machine = Machine::from_system().unwrap();
        assert!(
            machine.allowed_pus().count() >= 2,
            "needs two PUs (the test machine has two)"
        );
        let target = Target::machine(machine);
        for by_signal in [false, true] {
            let mut obs = Fixed::new(sleepers(3), CommMatrix::zeros(3));
            let ids: Vec<u32> = obs.children.iter().map(Child::id).collect();
            let before: Vec<topology::CpuSet> = ids
                .iter()
                .map(|&id| actuate::get_affinity(id).unwrap())
                .collect();
            let mut cfg = comm_config(if by_signal { 30.0 } else { 0.6 });
            cfg.ownership = Ownership::Attached;
            cfg.policy = crate::policy::parse("static:compact", 1, None).unwrap();
            let watcher = {
                let ids = ids.clone();
                std::thread::spawn(move || {
                    // Until every task is pinned to one PU, then (by_signal) "SIGTERM".
                    let end = Instant::now() + Duration::from_secs(10);
                    while Instant::now() < end {
                        let pinned = ids
                            .iter()
                            .all(|&id| actuate::get_affinity(id).is_some_and(|m| m.len() == 1));
                        if pinned {
                            if by_signal {
                                detect::signals::request_detach(libc::SIGTERM);
                            }
                            return true;
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    false
                })
            };
            let (data, stop) = manage_until(&mut obs, &target, cfg);
            assert!(
                watcher.join().unwrap(),
                "pinned meanwhile: {:?}",
                data.decisions
            );
            let want = if by_signal {
                Stop::Signal(libc::SIGTERM)
            } else {
                Stop::TimeUp
            };
            assert_eq!(stop, want);
            for (k, &id) in ids.iter().enumerate() {
                assert_eq!(actuate::get_affinity(id).unwrap(), before[k], "task {k}");
            }
            for c in &mut obs.children {
                assert!(c.try_wait().unwrap().is_none(), "the program runs on");
            }
            assert!(
                data.info
                    .notes
                    .iter()
                    .any(|n| n.starts_with("detached") && n.contains("3 of the 3 threads")),
                "{:?}",
                data.info.notes
            );
        }
    }

    #[test]
    fn the_busy_tasks_run_now_where_the_rest_is_a_little_beside_them() {
        // Four ranks on four PUs, their helper threads and the launcher at a few per cent.
        let start = [1.0, 0.95, 0.9, 1.0, 0.05, 0.1, 0.02, 0.0];
        let busy = vec![true, true, true, true, false, false, false, false];
        assert_eq!(running_now(&start, 4), busy);
        // Within the PUs: all that ran.
        assert_eq!(running_now(&start, 8), start.map(|s| s > 0.0).to_vec());
        // Eight threads sharing two PUs: all run, none is left floating; four, some just
        // over half a CPU and some just under: all run too.
        assert_eq!(running_now(&[0.25; 8], 2), vec![true; 8]);
        assert_eq!(running_now(&[0.55, 0.52, 0.45, 0.48], 2), vec![true; 4]);
        // More busy tasks than PUs, or the rest together a whole CPU: all that ran.
        assert_eq!(running_now(&[1.0, 1.0, 1.0, 0.1], 2), vec![true; 4]);
        assert_eq!(running_now(&[1.0, 1.0, 0.4, 0.4, 0.3], 2), vec![true; 5]);
        // None busy yet (a launcher and its ranks starting): all that ran, not none.
        assert_eq!(running_now(&[0.3, 0.3, 0.3], 2), vec![true; 3]);
    }

    /// Two busy partners floating over two PUs: no placement costs less, and they are
    /// pinned one per PU all the same: at once where the PUs are all equally far apart
    /// (decide::pin_in_place, as on the 2-PU test VM), else once the traffic is in
    /// (control::floating_to_pin).
    #[test]
    fn floating_busy_partners_are_pinned_one_per_pu() {
        let machine = Machine::from_system().unwrap();
        assert!(
            machine.allowed_pus().count() >= 2,
            "needs two PUs (the test machine has two)"
        );
        let target = Target::machine(machine);
        let children = spinners(2);
        let mut m = CommMatrix::zeros(2);
        m.set(0, 1, 500.0);
        m.set(1, 0, 500.0);
        let mut obs = Fixed::new(children, m);
        let data = manage(&mut obs, &target, comm_config(1.0));
        let pin = data
            .decisions
            .iter()
            .find(|d| d.action == "migrate")
            .unwrap_or_else(|| panic!("no migration: {:?}", data.decisions));
        if target.is_flat() {
            assert!(
                pin.reason.contains("without waiting for traffic"),
                "{pin:?}"
            );
            assert!(pin.t < 0.5, "at the first ticks: {pin:?}");
        } else {
            assert!(pin.reason.contains("floated"), "{pin:?}");
        }
        assert_ne!(pin.mapping[0], pin.mapping[1], "one per PU: {pin:?}");
    }

    #[test]
    fn waits_for_enough_traffic_before_deciding() {
        let machine = Machine::from_system().unwrap();
        let target = Target::machine(machine);
        let children = sleepers(2);
        let mut m = CommMatrix::zeros(2);
        m.set(0, 1, 10.0);
        m.set(1, 0, 10.0);
        let mut obs = Fixed::new(children, m);
        let data = manage(&mut obs, &target, comm_config(0.4));
        assert!(
            data.decisions.is_empty(),
            "10 events < 64: {:?}",
            data.decisions
        );
    }

    #[test]
    fn a_static_baseline_pins_every_task_without_traffic() {
        let machine = Machine::from_system().unwrap();
        if machine.allowed_pus().count() < 2 {
            panic!("needs two PUs (the test machine has two): pinning is what this tests");
        }
        let target = Target::machine(machine);
        let mut obs = Fixed::new(sleepers(3), CommMatrix::zeros(3));
        let mut cfg = comm_config(0.5);
        cfg.policy = crate::policy::parse("static:compact", 1, None).unwrap();
        let data = manage(&mut obs, &target, cfg);
        let masks: Vec<Option<topology::CpuSet>> = obs
            .children
            .iter()
            .map(|c| actuate::get_affinity(c.id()))
            .collect();
        assert!(
            masks
                .iter()
                .all(|m| m.as_ref().is_some_and(|m| m.len() == 1)),
            "every task pinned: {masks:?} {:?}",
            data.decisions
        );
        let moves = data.decisions.iter().filter(|d| d.action == "migrate");
        assert_eq!(moves.count(), 1, "mapped once: {:?}", data.decisions);
    }

    #[test]
    fn cpus_another_manager_pinned_on_are_left_out() {
        let machine = Machine::from_system().unwrap();
        let pus: Vec<u32> = machine.allowed_pus().map(|p| machine.os_cpu(p).0).collect();
        if pus.len() < 2 {
            panic!("needs two PUs (the test machine has two): pinning is what this tests");
        }
        let dir = std::env::temp_dir().join(format!("huddle-claims-run-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // Another manager (its process lives while the test runs) pins on the first CPU.
        let mut other = Command::new("sleep").arg("30").spawn().unwrap();
        std::fs::create_dir(&dir).unwrap();
        let start = crate::claims::start_time(other.id()).unwrap();
        std::fs::write(
            dir.join(other.id().to_string()),
            format!("{start}\n{}\n", pus[0]),
        )
        .unwrap();
        let run = |claimed: bool| {
            let mut obs = Fixed::new(spinners(1), CommMatrix::zeros(1));
            let mut cfg = comm_config(0.5);
            cfg.policy = crate::policy::parse("static:compact", 1, None).unwrap();
            cfg.claims = claimed.then(|| crate::claims::Claims::open(&dir).unwrap());
            let data = manage(&mut obs, &Target::machine(machine.clone()), cfg);
            let mask = actuate::get_affinity(obs.children[0].id()).unwrap();
            (mask.iter().collect::<Vec<u32>>(), data.info.notes)
        };
        // Compact pins the one task on the first CPU, unless another manager has it.
        assert_eq!(run(false).0, vec![pus[0]]);
        let (mask, notes) = run(true);
        assert_eq!(mask, vec![pus[1]], "{notes:?}");
        assert!(
            notes.iter().any(|n| n.contains("another huddle manager")
                && n.contains(&format!("pid {}", other.id()))),
            "{notes:?}"
        );
        // Our claim went with the loop; the other's stays while its process lives.
        assert!(!dir.join(std::process::id().to_string()).exists());
        assert!(dir.join(other.id().to_string()).exists());
        // Two busy tasks and one CPU left: pinning them would stack one onto the other
        // manager's CPU, so neither is pinned for a second, and the report says why; after
        // that the machine counts as oversubscribed for good and they are pinned on this
        // manager's share: the free PU, where both make it no busier than spreading would.
        let pinned_after = |seconds: f64| {
            let mut obs = Fixed::new(spinners(2), CommMatrix::zeros(2));
            let mut cfg = comm_config(seconds);
            cfg.policy = crate::policy::parse("static:compact", 2, None).unwrap();
            cfg.claims = Some(crate::claims::Claims::open(&dir).unwrap());
            let data = manage(&mut obs, &Target::machine(machine.clone()), cfg);
            let masks: Vec<Vec<u32>> = obs
                .children
                .iter()
                .map(|c| actuate::get_affinity(c.id()).unwrap().iter().collect())
                .collect();
            let waited = data.info.notes.iter().any(|n| {
                n.contains(&format!(
                    "{} CPUs were left for 2 busy tasks: none was pinned for up to 1 s",
                    pus.len() - 1
                ))
            });
            assert!(waited, "{:?}", data.info.notes);
            masks
        };
        assert_eq!(pinned_after(0.5), vec![pus.clone(); 2]);
        assert_eq!(pinned_after(1.6), vec![vec![pus[1]]; 2]);
        // More busy tasks than the machine has CPUs: no CPU given back would spare them
        // sharing, so they are pinned on all CPUs without the wait.
        let n = pus.len() + 1;
        let mut obs = Fixed::new(spinners(n), CommMatrix::zeros(n));
        let mut cfg = comm_config(0.5);
        cfg.policy = crate::policy::parse("static:compact", 2, None).unwrap();
        cfg.claims = Some(crate::claims::Claims::open(&dir).unwrap());
        let data = manage(&mut obs, &Target::machine(machine.clone()), cfg);
        for c in &obs.children {
            assert_eq!(
                actuate::get_affinity(c.id()).unwrap().iter().count(),
                1,
                "{:?}",
                data.info.notes
            );
        }
        assert!(
            data.info.notes.iter().any(|note| note.contains(&format!(
                "{n} busy tasks are more than all {} CPUs",
                pus.len()
            ))),
            "{:?}",
            data.info.notes
        );
        other.kill().unwrap();
        other.wait().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Run as another user by `pinning_someone_elses_tasks_is_a_note` (the pids in the
    /// environment belong to root): exits 0 when the loop ran on and noted the EPERM.
    #[test]
    #[ignore = "helper process for pinning_someone_elses_tasks_is_a_note"]
    fn denied_helper() {
        let Some(pids) = std::env::var_os("HUDDLE_TEST_DENIED") else {
            return;
        };
        let pids: Vec<u32> = pids
            .to_string_lossy()
            .split(',')
            .map(|p| p.parse().unwrap())
            .collect();
        let target = Target::machine(Machine::from_system().unwrap());
        let mut cfg = comm_config(0.6);
        cfg.policy = crate::policy::parse("static:compact", 1, None).unwrap();
        let n = pids.len();
        let mut all_talk = CommMatrix::zeros(n);
        for i in 0..n {
            for j in (0..n).filter(|&j| j != i) {
                all_talk.set(i, j, 1000.0);
            }
        }
        let data = manage(&mut Fixed::foreign(pids, all_talk), &target, cfg);
        let noted = data.info.notes.iter().any(|n| n.contains("EPERM"));
        let tried = data.decisions.iter().any(|d| d.action == "migrate");
        println!("notes {:?} decisions {:?}", data.info.notes, data.decisions);
        std::process::exit(if noted && tried { 0 } else { 1 });
    }

    #[test]
    fn pinning_someone_elses_tasks_is_a_note() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0
            || Command::new("setpriv").arg("--help").output().is_err()
        {
            eprintln!("needs root and setpriv to act as another user");
            return;
        }
        let mut victims = sleepers(2);
        let pids: Vec<String> = victims.iter().map(|c| c.id().to_string()).collect();
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "run::tests::denied_helper",
                "--nocapture",
            ])
            .env("HUDDLE_TEST_DENIED", pids.join(","))
            .output()
            .unwrap();
        for c in &mut victims {
            c.kill().unwrap();
            c.wait().unwrap();
        }
        assert!(
            out.status.success(),
            "the loop went on and noted EPERM: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }

    /// --move-pages on a model with two NUMA nodes (PUs 0 and 1, one per node): the threads
    /// that moved have the pages they touched last queued for their new node. On a one-node
    /// machine node 1 does not exist and those moves fail; they are counted, not fatal.
    #[test]
    fn moved_threads_take_their_pages_along() {
        if actuate::get_affinity(0).is_some_and(|m| !m.contains(1)) {
            eprintln!("needs CPUs 0 and 1");
            return;
        }
        let target = Target::machine(Machine::from_synthetic("numa:2 core:1 pu:1").unwrap());
        // Children with a touched heap, so their pages are in memory.
        let children: Vec<Child> = (0..4)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "x=$(head -c 300000 /dev/zero | tr '\\0' a); sleep 30"])
                    .spawn()
                    .unwrap()
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(300));
        for (k, c) in children.iter().enumerate() {
            actuate::set_affinity(c.id(), &topology::CpuSet::of(&[(k / 2) as u32])).unwrap();
        }
        let mut m = CommMatrix::zeros(4);
        for (a, b) in [(0, 2), (1, 3)] {
            m.set(a, b, 100.0);
            m.set(b, a, 100.0);
        }
        let mut obs = Fixed::new(children, m);
        let mut cfg = comm_config(0.8);
        cfg.page_budget = 8;
        let data = manage(&mut obs, &target, cfg);
        let migration = data
            .decisions
            .iter()
            .find(|d| d.action == "migrate")
            .unwrap_or_else(|| panic!("the partners move together: {:?}", data.decisions));
        let mut asked = obs.asked.borrow().clone();
        asked.sort();
        assert_eq!(
            asked,
            vec![0, 1, 2, 3],
            "every migrated thread's pages: {migration:?}"
        );
        // Two tasks went to node 1: their pages moved (two-node machine) or failed to.
        let node1 = migration.mapping.iter().filter(|&&pu| pu == 1).count();
        assert_eq!(node1, 2, "{migration:?}");
        let tried = data.info.pages_moved + data.info.pages_not_moved;
        assert!(tried > 0, "{:?} {:?}", data.info.notes, data.info);
        assert!(
            data.info.pages_moved > 0 || data.info.notes.iter().any(|n| n.contains("node 1")),
            "{:?}",
            data.info.notes
        );
    }

    #[test]
    fn one_numa_node_moves_no_page() {
        let target = Target::machine(Machine::from_synthetic("pack:1 core:2 pu:1").unwrap());
        let mut obs = Fixed::new(sleepers(2), CommMatrix::zeros(2));
        let mut cfg = comm_config(0.2);
        cfg.page_budget = 8;
        let data = manage(&mut obs, &target, cfg);
        assert!(
            data.info.notes.iter().any(|n| n.contains("one NUMA node")),
            "{:?}",
            data.info.notes
        );
        assert!(obs.asked.borrow().is_empty());
    }

    #[test]
    fn moves_partners_together_and_records_it() {
        let machine = Machine::from_system().unwrap();
        let pus: Vec<u32> = machine.allowed_pus().map(|p| machine.os_cpu(p).0).collect();
        if pus.len() < 2 {
            panic!("needs two PUs (the test machine has two): pinning is what this tests");
        }
        let target = Target::machine(machine);
        let children = sleepers(4);
        // Worst start: partners (0,2) and (1,3) on different PUs.
        for (k, c) in children.iter().enumerate() {
            actuate::set_affinity(c.id(), &topology::CpuSet::of(&[pus[k / 2]])).unwrap();
        }
        let mut m = CommMatrix::zeros(4);
        for (a, b) in [(0, 2), (1, 3)] {
            m.set(a, b, 100.0);
            m.set(b, a, 100.0);
        }
        let mut obs = Fixed::new(children, m);
        let data = manage(&mut obs, &target, comm_config(0.6));
        let aff = |k: usize| actuate::get_affinity(obs.children[k].id()).unwrap();
        assert_eq!(
            aff(0),
            aff(2),
            "partners 0 and 2 share a PU: {:?}",
            data.decisions
        );
        assert_eq!(
            aff(1),
            aff(3),
            "partners 1 and 3 share a PU: {:?}",
            data.decisions
        );
        assert_eq!(aff(0).len(), 1);
        let migrations: Vec<&Decision> = data
            .decisions
            .iter()
            .filter(|d| d.action == "migrate")
            .collect();
        assert_eq!(
            migrations.len(),
            1,
            "one migration, then the loop holds: {:?}",
            data.decisions
        );
        assert!(migrations[0].predicted_gain > 0.9);
        assert_eq!(obs.aged, 1, "the matrix ages after the migration");
        assert!(data.decisions.len() >= 2);
        assert_eq!(data.tasks.len(), 4);
        assert!(!data.placements.is_empty());
    }
}
