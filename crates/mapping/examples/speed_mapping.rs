//! Quick speed check of the default algorithm on the generated patterns of bench_mapping
//! (no Scotch, no baselines): median placement time and cost per case.
//!
//! Usage: speed_mapping [MAX_TASKS] [REPS] [PATTERN | nas]. `nas`: every shared matrix on
//! every shared topology, from $HUDDLE_SHARED (CASE=substring picks cases). Prints the median
//! placement time (wall, as bench_mapping reports it) and the least CPU time of this thread,
//! which other load on the machine disturbs less.

use mapping::{map_graph, Graph, Options, Target};
use matrix::CommMatrix;
use topology::Machine;

mod common;
use common::{cpu_seconds, pattern, THREAD};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let max: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(16384);
    let reps: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5);
    let only: Option<&str> = args.get(3).map(String::as_str);
    if only == Some("nas") {
        return nas(reps);
    }
    let machines = [
        (64, "pack:2 l3:2 core:8 pu:2"),
        (256, "pack:4 l3:2 core:16 pu:2"),
        (1024, "pack:8 l3:4 core:16 pu:2"),
        (4096, "group:4 pack:8 l3:4 core:16 pu:2"),
        (16384, "group:16 pack:8 l3:4 core:16 pu:2"),
    ];
    for (n, desc) in machines {
        if n > max {
            continue;
        }
        let target = Target::machine(Machine::from_synthetic(desc).expect("synthetic machine"));
        for p in ["ring", "distant-pairs", "clusters", "random-sparse"] {
            if only.is_some_and(|o| o != p) {
                continue;
            }
            let g = pattern(p, n, 42);
            let mut times = Vec::new();
            let mut cpu = Vec::new();
            let mut cost = 0.0;
            for _ in 0..reps {
                let c0 = cpu_seconds(THREAD);
                let m = map_graph(&g, &target, &Options::default()).expect("maps");
                cpu.push((cpu_seconds(THREAD) - c0) * 1e3);
                times.push(m.seconds);
                cost = m.cost;
            }
            times.sort_by(f64::total_cmp);
            cpu.sort_by(f64::total_cmp);
            println!(
                "{p:>14} x{n:<6} wall median {:>10.3} ms  cpu min {:>10.3} ms  cost {cost}",
                times[times.len() / 2] * 1e3,
                cpu[0]
            );
        }
    }
}

/// Every shared matrix on every shared topology where it fits (as bench_mapping does).
fn nas(reps: usize) {
    let shared = std::path::PathBuf::from(
        std::env::var("HUDDLE_SHARED").unwrap_or_else(|_| "../shared".into()),
    );
    let list = |d: &str| {
        let mut v: Vec<_> = std::fs::read_dir(shared.join(d))
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        v.sort();
        v
    };
    let (mut total, mut worst, mut count) = (0.0, (0.0, String::new()), 0);
    for tp in list("data/topologies") {
        let Ok(machine) = Machine::from_xml(&tp) else {
            continue;
        };
        let target = Target::machine(machine);
        for mp in list("data/matrices") {
            let Ok(raw) = CommMatrix::read(&mp) else {
                continue;
            };
            let m = mapping::orient(&raw).0;
            if m.n() > target.allowed_slots().len() {
                continue;
            }
            let name = format!("{} on {}", mp.display(), tp.display());
            if std::env::var("CASE").is_ok_and(|c| !name.contains(&c)) {
                continue;
            }
            let g = Graph::from_matrix(&m);
            let mut cpu = Vec::new();
            let mut cost = 0.0;
            for _ in 0..reps {
                let c0 = cpu_seconds(THREAD);
                cost = map_graph(&g, &target, &Options::default())
                    .expect("maps")
                    .cost;
                cpu.push((cpu_seconds(THREAD) - c0) * 1e3);
            }
            cpu.sort_by(f64::total_cmp);
            println!("{:>8.3} ms  cost {cost}  {name}", cpu[0]);
            total += cpu[0];
            count += 1;
            if cpu[0] > worst.0 {
                worst = (cpu[0], name);
            }
        }
    }
    println!(
        "{count} cases, cpu min total {total:.3} ms, worst {:.3} ms ({})",
        worst.0, worst.1
    );
}
