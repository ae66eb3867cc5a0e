//! Policies: what placement the manager should aim for. The loop asks the policy for a
//! candidate; [`crate::control::Controller`] decides whether moving to it is worth it.
//! `comm`, `static:ALGO` and `none` live here; `simmer` in [`simmer`]. [`parse`] builds
//! each of them from its name.

pub mod simmer;

use mapping::{Algorithm, Options, Target};
use matrix::CommMatrix;
use std::path::PathBuf;
use topology::Machine;

/// A candidate placement: one slot of the target (a bare `mapping::Slot` number, as
/// placements hold them) per live task.
#[derive(Clone, Debug, PartialEq)]
pub struct Proposal {
    /// The slot of each live task, in [`Context::tasks`] order.
    pub slots: Vec<usize>,
    /// Why this placement, for the report.
    pub reason: String,
    /// The policy judged the move itself (its own symptoms, confirmation and cooldown, or
    /// the user's explicit `static:` choice), so the communication-cost threshold does not
    /// apply.
    pub self_judged: bool,
    /// Only tasks whose slot changes are pinned; the others keep running where the
    /// scheduler puts them (SIMMer moves single ranks). Otherwise every task is pinned.
    pub only_moved: bool,
}

/// What a policy sees at each decision: the live tasks, their communication and placement.
pub struct Context<'a> {
    /// Communication among the live tasks, in `tasks` order.
    pub matrix: &'a CommMatrix,
    /// The PUs the tasks may be placed on, numbered as its slots.
    pub target: &'a Target,
    /// The slot each live task occupies now.
    pub current: &'a [usize],
    /// The live tasks, one per matrix row.
    pub tasks: &'a [crate::observer::ObservedTask],
}

/// What placement to aim for, asked once a tick by [`crate::decide::Decider`].
pub trait Policy {
    /// The name as `--policy` spells it (`comm`, `static:ALGO`, `none`, `simmer`).
    fn name(&self) -> String;
    /// A candidate placement of the live tasks. None: nothing to propose (observe only).
    fn propose(&mut self, ctx: &Context) -> Option<Proposal>;
    /// Whether the policy works from the detected matrix, so that it must wait for enough
    /// traffic (`--min-traffic`) before its first proposal.
    fn needs_traffic(&self) -> bool {
        true
    }
    /// Whether the policy places tasks by the detected matrix: on a machine where no
    /// placement of one task per PU costs less than another, `huddle run` then pins the
    /// running tasks in place at once and keeps the agent dormant while they are no more
    /// than the PUs. Not `none`, which only observes.
    fn places_by_traffic(&self) -> bool {
        self.needs_traffic()
    }
    /// Notes for the report (what the policy saw, what it could not do).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// Undoes changes made outside the program (interrupt steering) when the run ends.
    fn finish(&mut self) {}
}

fn options(algorithm: Algorithm, seed: u64) -> Options {
    Options {
        algorithm,
        seed,
        oversubscribe: true,
        ..Options::default()
    }
}

/// `comm`: map the detected matrix with huddle's best algorithm at every interval.
pub struct Comm {
    /// The mapping algorithm ([`parse`] picks `Algorithm::Huddle`).
    pub algorithm: Algorithm,
    /// Seed of the mapping algorithm.
    pub seed: u64,
}

impl Policy for Comm {
    fn name(&self) -> String {
        "comm".into()
    }

    fn propose(&mut self, ctx: &Context) -> Option<Proposal> {
        if ctx.matrix.n() == 0 || ctx.matrix.total() <= 0.0 {
            return None;
        }
        let m = mapping::map(ctx.matrix, ctx.target, &options(self.algorithm, self.seed)).ok()?;
        Some(Proposal {
            slots: m.slots,
            reason: format!("{} mapping of the detected matrix", self.algorithm),
            self_judged: false,
            only_moved: false,
        })
    }
}

/// `static:ALGO`: map once, as soon as there is something to map, then hold that mapping
/// (again only when the number of tasks changes). The placement is the user's choice, so it
/// is applied whatever its predicted gain. Algorithms that ignore the matrix (compact,
/// scatter, ...) map as soon as tasks exist, idle ones included.
pub struct Static {
    /// The mapping algorithm the user named.
    pub algorithm: Algorithm,
    /// Seed of the mapping algorithm.
    pub seed: u64,
    chosen: Option<Vec<usize>>,
}

impl Static {
    /// A policy that has chosen no placement yet.
    pub fn new(algorithm: Algorithm, seed: u64) -> Static {
        Static {
            algorithm,
            seed,
            chosen: None,
        }
    }
}

impl Policy for Static {
    fn name(&self) -> String {
        format!("static:{}", self.algorithm)
    }

    fn needs_traffic(&self) -> bool {
        !Algorithm::BASELINES.contains(&self.algorithm)
    }

    fn propose(&mut self, ctx: &Context) -> Option<Proposal> {
        let needs_matrix = !Algorithm::BASELINES.contains(&self.algorithm);
        // Map again only if the task count changed.
        if self
            .chosen
            .as_ref()
            .is_none_or(|s| s.len() != ctx.matrix.n())
        {
            if ctx.matrix.n() == 0 || (needs_matrix && ctx.matrix.total() <= 0.0) {
                return None;
            }
            let m =
                mapping::map(ctx.matrix, ctx.target, &options(self.algorithm, self.seed)).ok()?;
            self.chosen = Some(m.slots);
        }
        Some(Proposal {
            slots: self.chosen.clone()?,
            reason: format!("static {} mapping", self.algorithm),
            self_judged: true,
            only_moved: false,
        })
    }
}

/// `none`: observe and report, never move anything.
pub struct Observe;

impl Policy for Observe {
    fn name(&self) -> String {
        "none".into()
    }

    fn propose(&mut self, _: &Context) -> Option<Proposal> {
        None
    }

    fn places_by_traffic(&self) -> bool {
        false
    }
}

/// What `simmer` needs besides its name.
#[derive(Clone, Debug)]
pub struct SimmerInputs {
    /// The board the PMPI agent of the program's ranks publishes on (HUDDLE_BOARD).
    pub board: PathBuf,
    /// The machine the ranks run on.
    pub machine: Machine,
    /// Decisions are acted on from this confidence (0..1; SIMMer's default 0.6).
    pub min_confidence: f64,
}

/// Builds the policy `spec` names: `comm`, `static:ALGO`, `none`, or `simmer`, which needs
/// `inputs` (an error without). `seed` seeds the mapping algorithms.
pub fn parse(
    spec: &str,
    seed: u64,
    inputs: Option<SimmerInputs>,
) -> Result<Box<dyn Policy>, String> {
    match spec {
        "comm" => Ok(Box::new(Comm {
            algorithm: Algorithm::Huddle,
            seed,
        })),
        "none" => Ok(Box::new(Observe)),
        "simmer" => {
            let i = inputs.ok_or("policy 'simmer' needs the board of the program's PMPI agent")?;
            Ok(Box::new(simmer::Simmer::new(
                i.board,
                i.machine,
                i.min_confidence,
            )))
        }
        s => match s.strip_prefix("static:") {
            Some(a) => Ok(Box::new(Static::new(
                Algorithm::parse(a).map_err(|e| e.to_string())?,
                seed,
            ))),
            None => Err(format!(
                "unknown policy '{s}' (comm, static:ALGO, none, simmer)"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use topology::Machine;

    fn target() -> Target {
        Target::machine(Machine::from_synthetic("pack:2 core:2 pu:1").unwrap())
    }

    fn ask(p: &mut dyn Policy, m: &CommMatrix, t: &Target, current: &[usize]) -> Option<Proposal> {
        p.propose(&Context {
            matrix: m,
            target: t,
            current,
            tasks: &[],
        })
    }

    fn pairs() -> CommMatrix {
        // 0-2 and 1-3 talk.
        let mut m = CommMatrix::zeros(4);
        for (a, b) in [(0, 2), (1, 3)] {
            m.set(a, b, 100.0);
            m.set(b, a, 100.0);
        }
        m
    }

    #[test]
    fn comm_puts_partners_in_one_package() {
        let t = target();
        let p = ask(
            parse("comm", 1, None).unwrap().as_mut(),
            &pairs(),
            &t,
            &[0, 1, 2, 3],
        )
        .unwrap();
        assert_eq!(t.level(p.slots[0], p.slots[2]), topology::Level::Package);
        assert_eq!(t.level(p.slots[1], p.slots[3]), topology::Level::Package);
        assert!(!p.self_judged);
    }

    #[test]
    fn comm_proposes_nothing_without_traffic() {
        let mut p = parse("comm", 1, None).unwrap();
        assert!(ask(p.as_mut(), &CommMatrix::zeros(4), &target(), &[0, 1, 2, 3]).is_none());
    }

    #[test]
    fn static_maps_once_and_holds() {
        let t = target();
        let mut p = parse("static:huddle", 1, None).unwrap();
        assert!(ask(p.as_mut(), &CommMatrix::zeros(4), &t, &[0; 4]).is_none());
        let first = ask(p.as_mut(), &pairs(), &t, &[0; 4]).unwrap();
        let mut other = CommMatrix::zeros(4);
        other.set(0, 1, 1000.0);
        other.set(1, 0, 1000.0);
        assert_eq!(
            ask(p.as_mut(), &other, &t, &first.slots).unwrap().slots,
            first.slots
        );
        assert!(
            first.self_judged && !first.only_moved,
            "applied as chosen, every task"
        );
        // Baselines need no traffic.
        let mut c = parse("static:compact", 1, None).unwrap();
        assert!(!c.needs_traffic());
        assert!(parse("static:huddle", 1, None).unwrap().needs_traffic());
        assert!(ask(c.as_mut(), &CommMatrix::zeros(4), &t, &[0; 4]).is_some());
    }

    #[test]
    fn none_never_proposes_and_bad_names_fail() {
        let mut p = parse("none", 1, None).unwrap();
        assert!(ask(p.as_mut(), &pairs(), &target(), &[0, 1, 2, 3]).is_none());
        assert!(parse("fastest", 1, None).is_err());
        assert!(parse("static:magic", 1, None).is_err());
        assert!(parse("simmer", 1, None).is_err(), "simmer needs its board");
        let inputs = SimmerInputs {
            board: "/nonexistent/board".into(),
            machine: Machine::from_synthetic("pack:1 core:2 pu:1").unwrap(),
            min_confidence: 0.6,
        };
        assert_eq!(parse("simmer", 1, Some(inputs)).unwrap().name(), "simmer");
    }
}
