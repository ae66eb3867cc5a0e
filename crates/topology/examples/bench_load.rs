//! Benchmark: loading synthetic machines up to 16 384 PUs and querying PU distances.
//! Prints a markdown section for BENCHMARKS.md. Run: cargo run --release -p topology --example bench_load

use std::time::Instant;
use topology::Machine;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let descs = [
        ("pack:2 l3:2 core:4 pu:2", 32),
        ("pack:4 numa:2 l3:1 l2:8 core:2 pu:2", 256),
        ("pack:8 numa:2 l3:2 l2:8 core:2 pu:2", 1024),
        ("pack:16 numa:2 l3:4 l2:8 core:2 pu:2", 4096),
        ("pack:16 numa:2 l3:4 l2:8 core:4 pu:4", 16384),
    ];
    println!("## Topology: loading synthetic machines and PU distances\n");
    println!(
        "Command: `cargo run --release -p topology --example bench_load` (via `make bench`), {}.\n",
        date()
    );
    println!("Load = hwloc builds the synthetic topology and huddle copies it into its model (median of 7).");
    println!("Distance = one `Machine::distance(a, b)` on pseudo-random PU pairs (mean over 2M queries).\n");
    println!(
        "| synthetic description | PUs | load (ms) | model heap (KiB) | distance (ns/query) |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (desc, pus) in descs {
        let mut times = Vec::new();
        let mut m = None;
        for _ in 0..7 {
            let t = Instant::now();
            let loaded = Machine::from_synthetic(desc).expect("valid description");
            times.push(t.elapsed().as_secs_f64() * 1e3);
            m = Some(loaded);
        }
        let m = m.expect("loaded at least once");
        assert_eq!(m.num_pus(), pus);
        let n = m.num_pus() as u64;
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let queries = 2_000_000;
        let t = Instant::now();
        let mut sum = 0.0;
        for _ in 0..queries {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            sum += m.distance((x % n) as usize, ((x >> 32) % n) as usize);
        }
        let ns = t.elapsed().as_secs_f64() * 1e9 / queries as f64;
        std::hint::black_box(sum);
        println!(
            "| `{desc}` | {pus} | {:.1} | {} | {:.1} |",
            median(times),
            m.heap_bytes() / 1024,
            ns
        );
    }
}

fn date() -> String {
    std::process::Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%d")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}
