//! `huddle launch`: run an MPI program built with huddle-cc as N ranks on this machine.

use crate::exit::bad_input;
use crate::machine_args::MachineArgs;
use huddle_msg::launch::{self, Launch};
use huddle_msg::rules::RuleTable;
use huddle_msg::MsgError;
use mapping::{Algorithm, Options, Slot, Target};
use matrix::CommMatrix;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;
use topology::{parse_location, LogicalPu, Machine};

#[derive(clap::Args)]
#[command(
    long_about = "Run PROG as N ranks of one message-passing job on this machine. PROG is an \
    MPI program compiled with huddle-cc. Ranks are pinned to PUs (--bind, or --map), the \
    transport of each pair of ranks follows how close their PUs are (same core, shared L2, \
    shared L3, same NUMA node, other package) and the rule table (from `huddle tune-msg` if \
    it stored one, else from the cache sizes). Signals are forwarded to every rank; if a rank \
    dies, the others fail with an error and are killed after --grace seconds. The exit \
    status is the worst over ranks (128+N for a rank killed by signal N)."
)]
pub struct Args {
    /// Number of ranks
    #[arg(short = 'n', long = "np", value_name = "N")]
    pub n: usize,
    /// Placement algorithm of `huddle map`: compact, scatter, round-robin, random, identity,
    /// or (with --matrix) huddle, drb, greedy, treematch, scotch
    #[arg(
        long,
        value_name = "ALGO",
        default_value = "compact",
        conflicts_with = "bind"
    )]
    pub map: String,
    /// Communication matrix (CSV, N x N) for the matrix-driven --map algorithms
    #[arg(long, value_name = "FILE")]
    pub matrix: Option<PathBuf>,
    /// Pin ranks to these PUs (hwloc location). One --bind: ranks take its PUs in turn;
    /// several: rank i goes to the first PU of the (i mod count)-th
    #[arg(long, value_name = "LOCATION")]
    pub bind: Vec<String>,
    /// Rule table (JSON from `huddle tune-msg`); default: the stored one if any, else the
    /// rules derived from the cache sizes
    #[arg(long, value_name = "FILE")]
    pub rules: Option<PathBuf>,
    /// Seconds the other ranks get to stop after one fails, before SIGKILL
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub grace: f64,
    /// Print the placement and pair classes as JSON instead of running
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub machine: MachineArgs,
    /// The program and its arguments (after --)
    #[arg(
        last = true,
        required_unless_present = "dry_run",
        value_name = "PROG ARGS"
    )]
    pub command: Vec<OsString>,
}

/// Ranks per job: the segment holds n*n rings.
const MAX_RANKS: usize = 1024;

/// One PU (logical index) per rank: from --bind, else from the mapping crate's algorithm
/// (baselines need no matrix; matrix-driven algorithms need --matrix).
pub fn placement(
    m: &Machine,
    n: usize,
    map: &str,
    bind: &[String],
    matrix: Option<&PathBuf>,
) -> anyhow::Result<Vec<usize>> {
    if n == 0 || n > MAX_RANKS {
        return Err(bad_input(format!("-n {n}: must be 1..{MAX_RANKS}")));
    }
    if !bind.is_empty() {
        let pool: Vec<LogicalPu> = if bind.len() == 1 {
            parse_location(m, &bind[0]).map_err(bad_input)?
        } else {
            bind.iter()
                .map(|b| {
                    parse_location(m, b)
                        .map_err(bad_input)?
                        .first()
                        .copied()
                        .ok_or_else(|| bad_input(format!("--bind {b}: no PU")))
                })
                .collect::<anyhow::Result<_>>()?
        };
        if pool.is_empty() {
            return Err(bad_input("--bind selects no PU"));
        }
        return Ok((0..n).map(|i| pool[i % pool.len()].0).collect());
    }
    let algorithm = Algorithm::parse(map).map_err(bad_input)?;
    let matrix = match matrix {
        Some(p) => {
            let mx = CommMatrix::read(p).map_err(bad_input)?;
            if mx.n() != n {
                return Err(bad_input(format!(
                    "{}: {} tasks, but -n {n}",
                    p.display(),
                    mx.n()
                )));
            }
            mx
        }
        None if Algorithm::BASELINES.contains(&algorithm) => CommMatrix::zeros(n),
        None => {
            return Err(bad_input(format!(
                "--map {map} places by communication: give --matrix FILE (or use compact, \
                 scatter, round-robin, random, identity)"
            )))
        }
    };
    let opts = Options {
        algorithm,
        oversubscribe: true,
        ..Options::default()
    };
    let target = Target::machine(m.clone());
    let mapping = mapping::map(&matrix, &target, &opts).map_err(bad_input)?;
    // On one machine a slot's PU is the machine's logical PU, which msg's launch takes.
    Ok(mapping
        .slots
        .iter()
        .map(|&g| {
            let (_, pu) = target.locate(Slot(g));
            pu.0
        })
        .collect())
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let m = args.machine.load()?;
    let pus = placement(&m, args.n, &args.map, &args.bind, args.matrix.as_ref())?;
    let rules = RuleTable::for_launch(&m, args.rules.as_deref()).map_err(bad_input)?;
    let job = launch::job_spec(&m, &pus, &rules).map_err(bad_input)?;
    if args.dry_run {
        let classes: Vec<Vec<&str>> = job
            .classes
            .chunks(args.n)
            .map(|row| row.iter().map(|c| c.name()).collect())
            .collect();
        let plan = serde_json::json!({
            "schema": "huddle.launch-plan/1",
            "ranks": args.n,
            "pu_os": job.pu_os,
            "classes": classes,
            "rules": rules,
            "ring_bytes": job.ring_bytes,
        });
        println!("{}", serde_json::to_string_pretty(&plan)?);
        return Ok(0);
    }
    if args.machine.xml.is_some() || args.machine.synthetic.is_some() {
        return Err(bad_input(
            "--xml/--synthetic describe another machine: use them with --dry-run only",
        ));
    }
    if !(args.grace.is_finite() && args.grace >= 0.0) {
        return Err(bad_input(format!("--grace {}: not a duration", args.grace)));
    }
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| bad_input("no program given after --"))?;
    let outcome = launch::run(Launch {
        program: program.clone(),
        args: rest.to_vec(),
        job,
        grace: Duration::from_secs_f64(args.grace),
    })
    .map_err(|e| match e {
        MsgError::Spawn { .. } => bad_input(e),
        other => anyhow::Error::new(other),
    })?;
    if let Some(f) = &outcome.failure {
        eprintln!(
            "huddle: launch: {f}; the job was stopped (exit status {})",
            outcome.status
        );
    }
    Ok(outcome.status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_wraps_and_rejects_bad_input() {
        let m = Machine::from_synthetic("pack:1 core:2 pu:1").unwrap();
        let p = placement(&m, 3, "compact", &[], None).unwrap();
        assert_eq!(p.len(), 3);
        assert!(p.iter().all(|&x| x < 2));
        assert!(placement(&m, 2, "nearest", &[], None).is_err());
        assert!(placement(&m, 2, "treematch", &[], None).is_err());
        assert!(placement(&m, 0, "compact", &[], None).is_err());
        let b = vec!["pu:1".to_string(), "pu:0".to_string()];
        assert_eq!(
            placement(&m, 3, "compact", &b, None).unwrap(),
            vec![1, 0, 1]
        );
        assert!(placement(&m, 2, "compact", &["core:9".to_string()], None).is_err());
    }
}
