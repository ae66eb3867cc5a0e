//! `huddle workload`: a built-in parallel program whose communication is known by
//! construction; writes its ground-truth matrix and a summary (schema in
//! docs/workload-json.md).

use crate::exit::bad_input;
use anyhow::Context;
use std::path::{Path, PathBuf};
use workloads::{Mode, Pattern, Report, Spec, WorkloadError};

#[derive(clap::Args)]
#[command(
    group(clap::ArgGroup::new("mode").required(true).args(["threads", "processes"])),
    long_about = "Run a built-in program whose communication is known by construction, as N \
    threads or N child processes (created in task order 0..N-1). Every round each task writes \
    its part of the regions it shares, waits at a barrier, then reads and checks what its \
    partners wrote. Writes DIR/ground-truth.csv (bytes moved between each pair of tasks, both \
    directions added, counted from the reads the tasks did; phase-change adds \
    ground-truth-phase0.csv and ground-truth-phase1.csv) and DIR/workload.json (pattern, TIDs in \
    task order, rounds, throughput, checksum, phase switch time). The checksum depends only on \
    the pattern, the task count and --bytes.\n\n\
    Patterns: pairs (2k with 2k+1), ring (i with i±1), distant-pairs (i with i+N/2), clusters \
    (groups of 8), all-to-all, pipeline (i writes, i+1 reads), master-worker (0 with everyone), \
    private (no sharing), false-sharing (each task its own 256 B block of shared pages, nothing \
    read across tasks), phase-change (pairs for the first half of the time, then \
    distant-pairs)."
)]
pub struct Args {
    /// Communication pattern (pairs, ring, distant-pairs, clusters, all-to-all, pipeline,
    /// master-worker, private, false-sharing, phase-change)
    #[arg(value_name = "PATTERN")]
    pub pattern: String,
    /// Run N threads of this process
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Run N child processes sharing a memfd mapping
    #[arg(long, value_name = "N")]
    pub processes: Option<usize>,
    /// Time budget in seconds (each phase still runs at least 4 rounds)
    #[arg(long, value_name = "S", default_value_t = workloads::DEFAULT_SECONDS)]
    pub seconds: f64,
    /// Size of each shared region (per pair or group), e.g. 4MiB, 512K, 1048576
    #[arg(long, value_name = "B", default_value = "4MiB")]
    pub bytes: String,
    /// Where ground-truth.csv and workload.json go (created if missing; its parent must exist)
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub out_dir: PathBuf,
    /// Print the summary as JSON (schema huddle.workload/1, docs/workload-json.md)
    #[arg(long)]
    pub json: bool,
    /// Pin each task at start: one hwloc location per task, comma-separated, in task order,
    /// e.g. 0,4,1,5 (PU OS indexes) or pu:0,core:2
    #[arg(long, value_name = "LIST")]
    pub pin: Option<String>,
    /// Record the rounds done every MS milliseconds in workload.json (`progress`), to
    /// measure speed over parts of the run
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub progress_ms: u64,
}

/// "4MiB", "512K", "1G", "1000000", "64KB": K/M/G and KiB/MiB/GiB are powers of 1024,
/// KB/MB/GB powers of 1000.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("--bytes '{s}': expected a number of bytes such as 4MiB or 65536"))?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => {
            return Err(format!(
                "--bytes '{s}': unknown unit '{other}' (use K, M, G, KiB, MiB, GiB, KB, MB, GB)"
            ))
        }
    };
    n.checked_mul(scale)
        .ok_or_else(|| format!("--bytes '{s}': too large"))
}

/// Resolves the per-task locations on this machine to PU OS indexes.
fn parse_pin(list: &str) -> anyhow::Result<Vec<Vec<u32>>> {
    let m =
        topology::Machine::from_system().context("reading this machine's topology for --pin")?;
    let mut out = Vec::new();
    for (t, loc) in list.split(',').enumerate() {
        let pus = topology::parse_location(&m, loc.trim())
            .map_err(|e| bad_input(format!("--pin, task {t}: {e}")))?;
        if pus.is_empty() {
            return Err(bad_input(format!("--pin, task {t}: '{loc}' names no CPU")));
        }
        if let Some(&p) = pus.iter().find(|&&p| !m.pu(p).allowed) {
            return Err(bad_input(format!(
                "--pin, task {t}: CPU {} is not available to this process",
                m.os_cpu(p)
            )));
        }
        out.push(pus.iter().map(|&p| m.os_cpu(p).0).collect());
    }
    Ok(out)
}

fn lib_error(e: WorkloadError) -> anyhow::Error {
    if e.is_bad_input() {
        bad_input(e)
    } else {
        anyhow::Error::new(e)
    }
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let pattern: Pattern = args.pattern.parse().map_err(bad_input)?;
    let (mode, tasks) = match (args.threads, args.processes) {
        (Some(n), None) => (Mode::Threads, n),
        (None, Some(n)) => (Mode::Processes, n),
        _ => return Err(bad_input("give one of --threads N or --processes N")),
    };
    let mut spec = Spec::new(pattern, mode, tasks);
    spec.seconds = args.seconds;
    spec.progress_ms = args.progress_ms;
    spec.region_bytes = parse_bytes(&args.bytes).map_err(bad_input)?;
    // Check the arguments before the (slow) topology load and before creating anything.
    workloads::Layout::new(pattern, tasks, spec.region_bytes).map_err(lib_error)?;
    if !(args.seconds.is_finite() && (0.0..=workloads::MAX_SECONDS).contains(&args.seconds)) {
        return Err(lib_error(WorkloadError::Seconds(args.seconds)));
    }
    // Samples are kept in memory (16 bytes each) until the end.
    if args.progress_ms > 0 && args.seconds * 1000.0 / args.progress_ms as f64 > 1e7 {
        return Err(bad_input(format!(
            "--progress-ms {} over {} s would keep more than 10 million samples",
            args.progress_ms, args.seconds
        )));
    }
    if let Some(list) = &args.pin {
        spec.pin = Some(parse_pin(list)?);
    }
    crate::outputs::dir("--out-dir", &args.out_dir, 0o755)?;

    let (report, failure) = match workloads::run(&spec) {
        Ok(r) => (r, None),
        Err(WorkloadError::TaskFailed { reason, report }) => (*report, Some(reason)),
        Err(e) => return Err(lib_error(e)),
    };
    let files = write_files(&args.out_dir, &report)?;
    if args.json {
        let mut v = serde_json::to_value(&report)?;
        v["files"] = serde_json::json!(files);
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", summary(&report, &files));
    }
    if let Some(reason) = failure {
        anyhow::bail!(
            "{reason}; the ground truth of the rounds done so far is in {}",
            files[0].display()
        );
    }
    if report.read_errors > 0 {
        anyhow::bail!(
            "{} words read differed from what their writer wrote: the workload's memory was \
             changed under it (checksum {})",
            report.read_errors,
            report.checksum
        );
    }
    Ok(0)
}

/// Writes ground-truth.csv (and per-phase matrices) and workload.json; returns their paths,
/// the whole-run matrix first.
fn write_files(dir: &Path, r: &Report) -> anyhow::Result<Vec<PathBuf>> {
    let write = |name: String, text: String| -> anyhow::Result<PathBuf> {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    };
    let mut files = vec![write("ground-truth.csv".into(), r.matrix.to_csv())?];
    if r.phase_matrices.len() > 1 {
        for (i, m) in r.phase_matrices.iter().enumerate() {
            files.push(write(format!("ground-truth-phase{i}.csv"), m.to_csv())?);
        }
    }
    let json_path = dir.join("workload.json");
    let mut v = serde_json::to_value(r)?;
    let mut names: Vec<PathBuf> = files.clone();
    names.push(json_path.clone());
    v["files"] = serde_json::json!(names);
    files.push(write(
        "workload.json".into(),
        serde_json::to_string_pretty(&v)? + "\n",
    )?);
    Ok(files)
}

fn human_bytes(b: f64) -> String {
    match b {
        x if x >= 1e9 => format!("{:.2} GB", x / 1e9),
        x if x >= 1e6 => format!("{:.1} MB", x / 1e6),
        x => format!("{:.0} kB", x / 1e3),
    }
}

fn summary(r: &Report, files: &[PathBuf]) -> String {
    let mode = match r.mode {
        Mode::Threads => "threads",
        Mode::Processes => "processes",
    };
    let mut s = format!(
        "{}: {} {mode}, {} rounds in {:.2} s: {:.1} rounds/s per task, {:.1} total, {}/s read\n",
        r.pattern,
        r.tasks,
        r.iterations,
        r.seconds,
        r.iterations_per_second_per_task,
        r.iterations_per_second_total,
        human_bytes(r.read_bytes_per_second),
    );
    if let Some(at) = r.phase_switch_s {
        s += &format!(
            "phase switch {} -> {} at {at:.3} s (rounds {:?})\n",
            r.phases[0],
            r.phases[r.phases.len() - 1],
            r.phase_iterations
        );
    }
    s += &format!(
        "checksum {}, {} read errors, {} moved between tasks\n",
        r.checksum,
        r.read_errors,
        human_bytes(r.matrix.total())
    );
    s += &format!(
        "tids {}\n",
        r.tids
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    for f in files {
        s += &format!("wrote {}\n", f.display());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_bytes("4MiB"), Ok(4 << 20));
        assert_eq!(parse_bytes("512k"), Ok(512 << 10));
        assert_eq!(parse_bytes("1G"), Ok(1 << 30));
        assert_eq!(parse_bytes("64KB"), Ok(64_000));
        assert_eq!(parse_bytes("65536"), Ok(65536));
        assert!(parse_bytes("4XB")
            .unwrap_err()
            .contains("unknown unit 'xb'"));
        assert!(parse_bytes("-4M").is_err());
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("99999999999999999999G").is_err());
        assert!(parse_bytes("99999999999G")
            .unwrap_err()
            .contains("too large"));
    }
}
