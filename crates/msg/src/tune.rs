//! Measuring a pair of ranks to build the rule table (the seed's OPTO step, per locality
//! class): for one pair of a class, ping-pong with every candidate fragment size on the
//! pipelined path and with single copy, then keep the fastest fragment and the size from which
//! single copy wins for good. Beyond the caches, where the copies run from memory, only the
//! fastest fragment and single copy are measured (the sizes are slow to move).

use crate::coll::{self, Comm};
use crate::engine::Engine;
use crate::launch::{self, Launch};
use crate::rules::{Class, Rule, RuleTable};
use crate::MsgError;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};
use topology::{Machine, ObjKind};

const TAG: i32 = 77;
const BATCHES: usize = 5;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    pub size: u64,
    /// Fragment size on the pipelined path; 0 for single copy.
    pub fragment: u64,
    pub single_copy: bool,
    /// One-way time (microseconds), median of the batches.
    pub usec: f64,
}

/// What to try.
pub struct Plan {
    pub fragments: Vec<u64>,
    pub sizes: Vec<u64>,
    /// Sizes past the last-level cache, for the fastest fragment and single copy only.
    pub beyond_cache: Vec<u64>,
}

impl Plan {
    /// The candidates; `llc` is the last-level cache size in bytes, if known.
    pub fn new(quick: bool, llc: Option<u64>) -> Plan {
        let k = 1024;
        if quick {
            return Plan {
                fragments: vec![8 * k, 32 * k, 64 * k],
                sizes: vec![16 * k, 128 * k, 1024 * k],
                beyond_cache: Vec::new(),
            };
        }
        // One cache's worth per message is out of it already (each rank has a buffer of
        // that size); twice is well out.
        let beyond_cache = llc.map_or(Vec::new(), |c| {
            vec![c.max(8192 * k), (2 * c).max(16384 * k)]
        });
        Plan {
            beyond_cache,
            fragments: vec![
                4 * k,
                8 * k,
                16 * k,
                24 * k,
                32 * k,
                48 * k,
                64 * k,
                96 * k,
                128 * k,
            ],
            sizes: vec![
                8 * k,
                16 * k,
                32 * k,
                64 * k,
                128 * k,
                256 * k,
                512 * k,
                1024 * k,
                2048 * k,
                4096 * k,
            ],
        }
    }
}

/// One-way ping-pong time between world ranks 0 and 1 (rank 0's measurement; 0 elsewhere).
fn pingpong(e: &mut Engine, buf: &mut [u8], size: usize) -> Result<f64, MsgError> {
    let iters = ((32usize << 20) / size.max(1)).clamp(4, 500);
    let me = e.rank();
    let mut times = Vec::with_capacity(BATCHES);
    for _ in 0..BATCHES {
        let t0 = Instant::now();
        for _ in 0..iters {
            if me == 0 {
                e.send(&buf[..size], 1, 0, TAG)?;
                e.recv(&mut buf[..size], 1, 0, TAG)?;
            } else if me == 1 {
                e.recv(&mut buf[..size], 0, 0, TAG)?;
                e.send(&buf[..size], 0, 0, TAG)?;
            }
        }
        times.push(t0.elapsed().as_secs_f64() * 1e6 / iters as f64 / 2.0);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[BATCHES / 2])
}

struct Measuring<'a> {
    world: &'a mut Comm,
    buf: &'a mut [u8],
    points: &'a mut Vec<Point>,
    class: crate::rules::Class,
    base: Rule,
}

impl Measuring<'_> {
    /// Ping-pong at every size with each (fragment, single copy) trial.
    fn run(
        &mut self,
        e: &mut Engine,
        trials: &[(u64, bool)],
        sizes: &[u64],
    ) -> Result<(), MsgError> {
        for &(fragment, single_copy) in trials {
            e.set_rule(
                self.class,
                Rule {
                    eager_limit: self.base.eager_limit,
                    fragment: if single_copy {
                        self.base.fragment
                    } else {
                        fragment
                    },
                    single_copy_threshold: if single_copy { 0 } else { u64::MAX },
                    exchange_single_copy_threshold: self.base.exchange_single_copy_threshold,
                },
            );
            for &size in sizes {
                coll::barrier(e, self.world)?;
                let usec = pingpong(e, self.buf, size as usize)?;
                self.points.push(Point {
                    size,
                    fragment,
                    single_copy,
                    usec,
                });
            }
        }
        Ok(())
    }
}

/// Runs the plan between world ranks 0 and 1 of the job (both call it; others idle).
pub fn measure(e: &mut Engine, plan: &Plan) -> Result<Vec<Point>, MsgError> {
    let peer = if e.rank() == 0 { 1 } else { 0 };
    let class = e.class_to(peer);
    let mut world = Comm::new((0..e.size()).collect(), e.size(), e.rank(), 0);
    let max = plan
        .sizes
        .iter()
        .chain(&plan.beyond_cache)
        .copied()
        .max()
        .unwrap_or(0) as usize;
    let mut buf: Vec<u8> = (0..max).map(|i| i as u8).collect();
    let mut points = Vec::new();
    let base = e.rule_to(peer);
    let mut trials: Vec<(u64, bool)> = plan.fragments.iter().map(|&f| (f, false)).collect();
    if e.single_copy_available() {
        trials.push((0, true));
    }
    let mut m = Measuring {
        world: &mut world,
        buf: &mut buf,
        points: &mut points,
        class,
        base,
    };
    m.run(e, &trials, &plan.sizes)?;
    if !plan.beyond_cache.is_empty() {
        // Rank 0's times decide (the others have zeros); both ranks must run the same trials.
        let mut best = best_fragment(m.points)
            .unwrap_or(base.fragment)
            .to_ne_bytes();
        coll::bcast(e, m.world, &mut best, 0)?;
        let best = u64::from_ne_bytes(best);
        let big: Vec<(u64, bool)> = std::iter::once((best, false))
            .chain(trials.iter().filter(|t| t.1).copied())
            .collect();
        m.run(e, &big, &plan.beyond_cache)?;
    }
    e.set_rule(class, base);
    coll::barrier(e, &mut world)?;
    Ok(points)
}

/// The pipelined fragment with the least total time over the sizes every fragment was
/// measured at (relative time per size, so that large sizes do not drown the small ones).
fn best_fragment(points: &[Point]) -> Option<u64> {
    let mut frags: Vec<u64> = points
        .iter()
        .filter(|p| !p.single_copy)
        .map(|p| p.fragment)
        .collect();
    frags.sort();
    frags.dedup();
    let common = |size: u64| {
        frags.iter().all(|&f| {
            points
                .iter()
                .any(|p| !p.single_copy && p.fragment == f && p.size == size)
        })
    };
    let mut best: Option<(u64, f64)> = None;
    for &f in &frags {
        let score: f64 = points
            .iter()
            .filter(|p| !p.single_copy && p.fragment == f && common(p.size))
            .map(|p| p.usec.max(1e-3).ln())
            .sum();
        if best.is_none_or(|(_, s)| score < s) {
            best = Some((f, score));
        }
    }
    best.map(|b| b.0)
}

/// The rule the points argue for: the best fragment (`best_fragment`), and the smallest
/// size from which single copy beats that fragment at every larger size measured.
pub fn choose(points: &[Point], base: Rule) -> Rule {
    let fragment = best_fragment(points).unwrap_or(base.fragment);
    let pipelined = |size: u64| {
        points
            .iter()
            .find(|p| !p.single_copy && p.fragment == fragment && p.size == size)
            .map(|p| p.usec)
    };
    let mut sc: Vec<&Point> = points.iter().filter(|p| p.single_copy).collect();
    sc.sort_by_key(|p| p.size);
    let mut threshold = u64::MAX;
    for p in sc.iter().rev() {
        match pipelined(p.size) {
            Some(t) if p.usec < t => threshold = p.size,
            _ => break,
        }
    }
    Rule {
        eager_limit: base.eager_limit,
        fragment,
        single_copy_threshold: threshold,
        // Not measured (ping-pong says nothing about both directions at once): kept.
        exchange_single_copy_threshold: base.exchange_single_copy_threshold,
    }
}

/// The size of the machine's last-level cache (the largest level that names one), past
/// which copies run from memory.
pub fn last_level_cache(m: &Machine) -> Option<u64> {
    [
        ObjKind::L5,
        ObjKind::L4,
        ObjKind::L3,
        ObjKind::L2,
        ObjKind::L1,
    ]
    .into_iter()
    .find_map(|k| m.nodes_of(k).find_map(|n| n.cache_size))
}

/// One rank of a measuring job (started by [`tune_machine`] through its worker command):
/// measures with the job's other rank and, on rank 0, writes the points to `out` as JSON.
pub fn run_worker(out: &Path, quick: bool) -> Result<(), MsgError> {
    let mut e = Engine::from_env()?;
    let llc = Machine::from_system()
        .ok()
        .and_then(|m| last_level_cache(&m));
    let points = measure(&mut e, &Plan::new(quick, llc))?;
    if e.rank() == 0 {
        let text = serde_json::to_string(&points).expect("points serialize");
        std::fs::write(out, text)
            .map_err(|err| MsgError::Tune(format!("{}: {err}", out.display())))?;
    }
    e.mark_finalized();
    Ok(())
}

/// One pair of allowed PUs (logical indexes) for each locality class present on `m`,
/// classes in order.
pub fn class_pairs(m: &Machine) -> Vec<(Class, usize, usize)> {
    let pus: Vec<usize> = m.allowed_pus().map(|p| p.0).collect();
    let mut out: Vec<(Class, usize, usize)> = Vec::new();
    for (i, &a) in pus.iter().enumerate() {
        for &b in &pus[i + 1..] {
            let c = Class::from_level(m.level(a, b));
            if !out.iter().any(|x| x.0 == c) {
                out.push((c, a, b));
            }
        }
    }
    out.sort();
    out
}

/// What was measured for one class.
#[derive(Clone, Debug, Serialize)]
pub struct Measured {
    /// The locality class.
    pub class: Class,
    /// The pair of PUs measured, by OS index.
    pub pus_os: [u32; 2],
    /// Every measurement.
    pub points: Vec<Point>,
}

/// Measures one pair of PUs of each class present on `m` with a two-rank job each, and
/// returns the rule table (measured classes from their points, the others from the cache
/// sizes) with what was measured. `worker(out)` is the program and arguments of a rank
/// that calls [`run_worker`] with `out`.
pub fn tune_machine(
    m: &Machine,
    quick: bool,
    worker: &dyn Fn(&Path) -> (OsString, Vec<OsString>),
) -> Result<(RuleTable, Vec<Measured>), MsgError> {
    let defaults = RuleTable::from_caches(m);
    let mut table = defaults.clone();
    let mut measured = Vec::new();
    for (class, a, b) in class_pairs(m) {
        let tmp = std::env::temp_dir().join(format!(
            "huddle-tune-msg-{}-{}.json",
            std::process::id(),
            class.name()
        ));
        let (program, args) = worker(&tmp);
        let outcome = launch::run(Launch {
            program,
            args,
            job: launch::job_spec(m, &[a, b], &defaults)?,
            grace: Duration::from_secs(5),
        });
        // The worker's file goes whatever happened.
        let text = std::fs::read_to_string(&tmp);
        let _ = std::fs::remove_file(&tmp);
        if let Some(f) = outcome?.failure {
            return Err(MsgError::Tune(format!(
                "measuring class {} on PUs {a},{b}: {f}",
                class.name()
            )));
        }
        let text = text
            .map_err(|e| MsgError::Tune(format!("the worker's points, {}: {e}", tmp.display())))?;
        let points: Vec<Point> = serde_json::from_str(&text)
            .map_err(|e| MsgError::Tune(format!("the worker's points: {e}")))?;
        table
            .rules
            .insert(class, choose(&points, defaults.rules[&class]));
        measured.push(Measured {
            class,
            pus_os: [m.pus[a].os_index, m.pus[b].os_index],
            points,
        });
    }
    let names: Vec<String> = measured
        .iter()
        .map(|x| {
            format!(
                "{} on PUs P#{},P#{}",
                x.class.name(),
                x.pus_os[0],
                x.pus_os[1]
            )
        })
        .collect();
    table.source = "tune-msg".into();
    table.basis = format!(
        "measured {} ({}); other classes from cache sizes ({})",
        if names.is_empty() {
            "nothing".to_string()
        } else {
            names.join(", ")
        },
        if quick { "quick plan" } else { "full plan" },
        defaults.basis
    );
    Ok((table, measured))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(size: u64, fragment: u64, usec: f64) -> Point {
        Point {
            size,
            fragment,
            single_copy: fragment == 0,
            usec,
        }
    }

    #[test]
    fn picks_fastest_fragment_and_stable_crossover() {
        let base = Rule {
            eager_limit: 4096,
            fragment: 1,
            single_copy_threshold: 1,
            exchange_single_copy_threshold: 7,
        };
        let points = vec![
            pt(10, 8, 2.0),
            pt(100, 8, 20.0),
            pt(1000, 8, 200.0),
            pt(10, 32, 1.5),
            pt(100, 32, 15.0),
            pt(1000, 32, 150.0),
            // Single copy: wins at 10 by chance, loses at 100, wins from 1000 on.
            pt(10, 0, 1.0),
            pt(100, 0, 16.0),
            pt(1000, 0, 100.0),
        ];
        let r = choose(&points, base);
        assert_eq!(r.fragment, 32);
        assert_eq!(r.single_copy_threshold, 1000);
        assert_eq!(r.exchange_single_copy_threshold, 7, "not measured: kept");
        let never: Vec<Point> = points.iter().filter(|p| p.size != 1000).cloned().collect();
        assert_eq!(choose(&never, base).single_copy_threshold, u64::MAX);
        // Beyond the cache only fragment 32 and single copy are measured: the fragment is
        // still chosen on the common sizes, and the crossover found out there.
        let mut beyond = never;
        beyond.extend([
            pt(5000, 32, 900.0),
            pt(5000, 0, 700.0),
            pt(20000, 32, 4000.0),
        ]);
        beyond.push(pt(20000, 0, 2800.0));
        let r = choose(&beyond, base);
        assert_eq!((r.fragment, r.single_copy_threshold), (32, 5000));
    }
}
