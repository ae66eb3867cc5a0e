//! The contention study harness (SIMMer part 2 on one machine): runs an MPI program under
//! rank placements (one rank per emulated node, packed, spread, blocked, cyclic), pinned with
//! bench/simmer/pin-rank, for a number of repetitions interleaved across placements, and prints
//! a markdown table of mean, standard deviation and minimum time per placement.
//!
//! Usage: contention --mpi openmpi|mpich --np N [--nodes G] [--reps R]
//!        [--placements packed,spread,...] [--pin PATH] -- PROGRAM ARGS...
//! The time is the program's own `time_s=` output when it prints one, else wall-clock time.
use simmer::placement::{place, PlacementKind};
use std::process::Command;
use std::time::Instant;

fn fail(msg: &str) -> ! {
    eprintln!("contention: {msg}");
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let split = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let (opts, prog) = (&args[..split], args.get(split + 1..).unwrap_or(&[]));
    let get = |name: &str| {
        opts.iter()
            .position(|a| a == name)
            .and_then(|i| opts.get(i + 1))
            .cloned()
    };
    let mpi = get("--mpi").unwrap_or_else(|| "openmpi".into());
    let num = |name: &str, d: usize| -> usize {
        get(name).map_or(d, |v| {
            v.parse()
                .unwrap_or_else(|_| fail(&format!("{name}: not a number: {v}")))
        })
    };
    let np = num("--np", 4);
    let nodes = num("--nodes", 2);
    let reps = num("--reps", 3).max(1);
    let pin = get("--pin").unwrap_or_else(|| "bench/simmer/pin-rank".into());
    let kinds: Vec<PlacementKind> = get("--placements")
        .map(|s| {
            s.split(',')
                .map(|p| {
                    PlacementKind::parse(p)
                        .unwrap_or_else(|| fail(&format!("unknown placement '{p}'")))
                })
                .collect()
        })
        .unwrap_or_else(|| PlacementKind::ALL.to_vec());
    if prog.is_empty() {
        fail("usage: contention --mpi openmpi|mpich --np N [--nodes G] [--reps R] [--placements LIST] -- PROGRAM ARGS");
    }
    let launcher = format!("mpirun.{mpi}");
    if Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {launcher}"))
        .output()
        .map_or(true, |o| !o.status.success())
    {
        fail(&format!(
            "{launcher} not found: install Open MPI or MPICH (scripts/bootstrap does)"
        ));
    }
    let machine = topology::Machine::from_system().unwrap_or_else(|e| fail(&e.to_string()));
    let mut plans = Vec::new();
    for k in &kinds {
        match place(&machine, *k, np, nodes) {
            Ok(pus) => {
                let os: Vec<String> = pus
                    .iter()
                    .map(|&p| machine.pus[p].os_index.to_string())
                    .collect();
                plans.push((*k, os.join(",")));
            }
            Err(e) => eprintln!("contention: {}: skipped: {e}", k.name()),
        }
    }
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); plans.len()];
    for _ in 0..reps {
        for (i, (_, cpus)) in plans.iter().enumerate() {
            let mut cmd = Command::new("timeout");
            cmd.arg("600").arg(&launcher);
            if mpi == "openmpi" {
                cmd.args([
                    "--allow-run-as-root",
                    "--oversubscribe",
                    "--bind-to",
                    "none",
                ]);
            }
            cmd.args(["-np", &np.to_string(), &pin, cpus]).args(prog);
            let t0 = Instant::now();
            let out = cmd
                .output()
                .unwrap_or_else(|e| fail(&format!("{launcher}: {e}")));
            let wall = t0.elapsed().as_secs_f64();
            if !out.status.success() {
                let err = String::from_utf8_lossy(&out.stderr);
                fail(&format!(
                    "{} run failed ({}): {}",
                    plans[i].0.name(),
                    out.status,
                    err.lines().last().unwrap_or("")
                ));
            }
            let text = String::from_utf8_lossy(&out.stdout);
            let own = text.split_whitespace().find_map(|w| {
                w.strip_prefix("time_s=")
                    .and_then(|v| v.parse::<f64>().ok())
            });
            times[i].push(own.unwrap_or(wall));
        }
    }
    let stats: Vec<(f64, f64, f64)> = times
        .iter()
        .map(|t| {
            let n = t.len() as f64;
            let mean = t.iter().sum::<f64>() / n;
            let sd = if t.len() > 1 {
                (t.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
            } else {
                0.0
            };
            (mean, sd, t.iter().copied().fold(f64::INFINITY, f64::min))
        })
        .collect();
    let best = stats.iter().map(|s| s.0).fold(f64::INFINITY, f64::min);
    println!(
        "| placement | CPUs of ranks 0..{} | mean (s) | sd (s) | min (s) | runs | mean / best |",
        np - 1
    );
    println!("|---|---|---|---|---|---|---|");
    for ((k, cpus), (mean, sd, min)) in plans.iter().zip(&stats) {
        println!(
            "| {} | {} | {:.3} | {:.3} | {:.3} | {} | {:.2} |",
            k.name(),
            cpus,
            mean,
            sd,
            min,
            reps,
            mean / best
        );
    }
}
