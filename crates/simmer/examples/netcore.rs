//! Runs a command and reports the protocol-processing core over its run: per CPU, the share of
//! time in network interrupts and softirqs, and the CPU the sampler names as protocol core.
//! Usage: netcore [--interval-ms N] -- COMMAND ARGS...   (prints one markdown-ready line)
use simmer::protocol::{load, ProcSource};
use std::process::Command;
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let split = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let interval = args[..split]
        .iter()
        .position(|a| a == "--interval-ms")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(500);
    let cmd = args.get(split + 1..).unwrap_or(&[]);
    if cmd.is_empty() {
        eprintln!("usage: netcore [--interval-ms N] -- COMMAND ARGS...");
        std::process::exit(2);
    }
    let src = ProcSource::system();
    let first = src.sample().unwrap_or_else(|e| {
        eprintln!("netcore: {e}");
        std::process::exit(1)
    });
    let mut child = Command::new(&cmd[0])
        .args(&cmd[1..])
        .spawn()
        .unwrap_or_else(|e| {
            eprintln!("netcore: {}: {e}", cmd[0]);
            std::process::exit(2)
        });
    // Windows while it runs, then the whole run.
    let mut prev = first.clone();
    let mut named = std::collections::BTreeMap::<u32, usize>::new();
    let status = loop {
        if let Ok(Some(s)) = child.try_wait() {
            break s;
        }
        std::thread::sleep(Duration::from_millis(interval));
        if let Ok(cur) = src.sample() {
            if let Some(c) = load(&prev, &cur).protocol_cpu {
                *named.entry(c).or_default() += 1;
            }
            prev = cur;
        }
    };
    let last = src.sample().unwrap_or(prev);
    let l = load(&first, &last);
    let shares: Vec<String> = l
        .cpus
        .iter()
        .map(|c| {
            format!(
                "cpu{} {:.1}% ({:.0} NET_RX/s)",
                c.cpu,
                100.0 * c.protocol_share,
                c.net_rx_per_s
            )
        })
        .collect();
    println!(
        "protocol core: {} (confidence {:.2}; windows naming each CPU: {:?}); {}",
        l.protocol_cpu
            .map_or("none".to_string(), |c| format!("cpu{c}")),
        l.confidence,
        named,
        shares.join(", ")
    );
    std::process::exit(status.code().unwrap_or(1));
}
