//! Policies: what mapping the manager should aim for. The loop asks the policy for a
//! candidate; [`crate::control::Controller`] decides whether moving to it is worth it.
//! A new policy (SIMMer's network-aware rules) implements [`Policy`] and plugs in here.

use mapping::{Algorithm, Options, Target};
use matrix::CommMatrix;

/// A candidate mapping: one slot (global PU index of the target) per task.
#[derive(Clone, Debug, PartialEq)]
pub struct Proposal {
    pub slots: Vec<usize>,
    pub reason: String,
}

pub trait Policy {
    fn name(&self) -> String;
    /// A candidate for the tasks of `matrix` (live tasks only, in the matrix's order), given
    /// the slot each task occupies now. None: nothing to propose (observe only).
    fn propose(
        &mut self,
        matrix: &CommMatrix,
        target: &Target,
        current: &[usize],
    ) -> Option<Proposal>;
}

/// `comm`: map the detected matrix with huddle's best algorithm at every interval.
pub struct Comm {
    pub algorithm: Algorithm,
    pub seed: u64,
}

impl Policy for Comm {
    fn name(&self) -> String {
        "comm".into()
    }

    fn propose(
        &mut self,
        matrix: &CommMatrix,
        target: &Target,
        _current: &[usize],
    ) -> Option<Proposal> {
        if matrix.n() == 0 || matrix.total() <= 0.0 {
            return None;
        }
        let opts = Options {
            algorithm: self.algorithm,
            seed: self.seed,
            oversubscribe: true,
            ..Options::default()
        };
        let m = mapping::map(matrix, target, &opts).ok()?;
        Some(Proposal {
            slots: m.slots,
            reason: format!("{} mapping of the detected matrix", self.algorithm),
        })
    }
}

/// `static:ALGO`: map once, as soon as there is something to map, then hold that mapping.
/// Algorithms that ignore the matrix (compact, scatter, ...) map as soon as tasks exist.
pub struct Static {
    pub algorithm: Algorithm,
    pub seed: u64,
    chosen: Option<Vec<usize>>,
}

impl Static {
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

    fn propose(
        &mut self,
        matrix: &CommMatrix,
        target: &Target,
        _current: &[usize],
    ) -> Option<Proposal> {
        let needs_matrix = !Algorithm::BASELINES.contains(&self.algorithm);
        match &self.chosen {
            // Tasks that appeared later keep the slots mapping gave the first ones; map again
            // only if the task count changed.
            Some(s) if s.len() == matrix.n() => {}
            _ => {
                if matrix.n() == 0 || (needs_matrix && matrix.total() <= 0.0) {
                    return None;
                }
                let opts = Options {
                    algorithm: self.algorithm,
                    seed: self.seed,
                    oversubscribe: true,
                    ..Options::default()
                };
                self.chosen = Some(mapping::map(matrix, target, &opts).ok()?.slots);
            }
        }
        Some(Proposal {
            slots: self.chosen.clone()?,
            reason: format!("static {} mapping", self.algorithm),
        })
    }
}

/// `none`: observe and report, never move anything.
pub struct Observe;

impl Policy for Observe {
    fn name(&self) -> String {
        "none".into()
    }

    fn propose(&mut self, _: &CommMatrix, _: &Target, _: &[usize]) -> Option<Proposal> {
        None
    }
}

/// Parses `comm`, `static:ALGO` or `none`.
pub fn parse(spec: &str, seed: u64) -> Result<Box<dyn Policy>, String> {
    match spec {
        "comm" => Ok(Box::new(Comm {
            algorithm: Algorithm::Huddle,
            seed,
        })),
        "none" => Ok(Box::new(Observe)),
        s => match s.strip_prefix("static:") {
            Some(a) => Ok(Box::new(Static::new(
                Algorithm::parse(a).map_err(|e| e.to_string())?,
                seed,
            ))),
            None => Err(format!("unknown policy '{s}' (comm, static:ALGO, none)")),
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
        let p = parse("comm", 1)
            .unwrap()
            .propose(&pairs(), &t, &[0, 1, 2, 3])
            .unwrap();
        assert_eq!(t.level(p.slots[0], p.slots[2]), topology::Level::Package);
        assert_eq!(t.level(p.slots[1], p.slots[3]), topology::Level::Package);
    }

    #[test]
    fn comm_proposes_nothing_without_traffic() {
        assert!(parse("comm", 1)
            .unwrap()
            .propose(&CommMatrix::zeros(4), &target(), &[0, 1, 2, 3])
            .is_none());
    }

    #[test]
    fn static_maps_once_and_holds() {
        let t = target();
        let mut p = parse("static:huddle", 1).unwrap();
        assert!(p.propose(&CommMatrix::zeros(4), &t, &[0; 4]).is_none());
        let first = p.propose(&pairs(), &t, &[0; 4]).unwrap();
        let mut other = CommMatrix::zeros(4);
        other.set(0, 1, 1000.0);
        other.set(1, 0, 1000.0);
        assert_eq!(
            p.propose(&other, &t, &first.slots).unwrap().slots,
            first.slots
        );
        // Baselines need no traffic.
        assert!(parse("static:compact", 1)
            .unwrap()
            .propose(&CommMatrix::zeros(4), &t, &[0; 4])
            .is_some());
    }

    #[test]
    fn none_never_proposes_and_bad_names_fail() {
        assert!(parse("none", 1)
            .unwrap()
            .propose(&pairs(), &target(), &[0, 1, 2, 3])
            .is_none());
        assert!(parse("fastest", 1).is_err());
        assert!(parse("static:magic", 1).is_err());
    }
}
