//! EXPERIMENTAL bank-bit detector (row-conflict timing), printed as a markdown section.
//! `cargo run --release -p huddle-alloc --example detect_banks [SAMPLES]`

use huddle_alloc::detect::{detect, DetectOptions, DetectReport};

fn main() {
    let mut opts = DetectOptions::default();
    if let Some(n) = std::env::args().nth(1).and_then(|s| s.parse().ok()) {
        opts.samples = n;
    }
    let r = match detect(&opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("detect_banks: {e}");
            std::process::exit(1);
        }
    };
    let mut sorted = r.latencies.clone();
    sorted.sort_unstable();
    let pct = |p: usize| sorted[(sorted.len() - 1) * p / 100];
    println!(
        "{} pairs x {} timed alternations over a {} MiB buffer (physical bits up to {} vary).\n",
        r.latencies.len(),
        opts.rounds,
        opts.buffer_bytes >> 20,
        r.top_bit
    );
    println!("| pair latency (cycles, median of rounds) | p5 | p50 | p90 | p99 | max |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| all pairs | {} | {} | {} | {} | {} |\n",
        pct(5),
        pct(50),
        pct(90),
        pct(99),
        pct(100)
    );
    println!(
        "Split at {} cycles: {} slow pairs (median {}) vs {} fast (median {}); \
         a real row-conflict group would be about 1/(banks x ranks x channels) of the pairs \
         and clearly slower.\n",
        r.threshold,
        r.conflicts,
        r.slow_median,
        r.latencies.len() - r.conflicts,
        r.fast_median
    );
    if r.functions.is_empty() {
        println!("Functions found: none (no XOR of <= 3 bits is constant over the slow pairs).");
    } else {
        let f: Vec<String> = r
            .functions
            .iter()
            .map(|&m| DetectReport::describe(m))
            .collect();
        println!("Functions found: `{}`.", f.join(", "));
    }
}
