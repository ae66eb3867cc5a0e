//! The protocol-processing core: which CPUs take the network interrupts and softirqs
//! (NET_RX/NET_TX) and how much of their time goes there, from /proc/interrupts,
//! /proc/softirqs and /proc/stat sampled twice; and steering of receive processing (RPS,
//! /sys/class/net/IF/queues/rx-N/rps_cpus) and IRQ affinity (/proc/irq/N/smp_affinity_list).
//!
//! Everything reads below a root directory ("/" on a live system) so the parsers are tested
//! on constructed files.

use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use topology::{CpuSet, CpuSetError};

#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("{path}: {reason}")]
    Read { path: String, reason: String },
    #[error("{path}:{line}: {reason}")]
    Parse {
        path: String,
        line: usize,
        reason: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum SteerError {
    #[error("{path}: no such file (no such interface, queue or IRQ, or the kernel lacks RPS)")]
    NotFound { path: String },
    #[error("{path}: not allowed: {reason}")]
    NotAllowed { path: String, reason: String },
    #[error("{path}: the kernel refused {value}: {reason}")]
    Refused {
        path: String,
        value: String,
        reason: String,
    },
    #[error("{path}: {reason}")]
    Io { path: String, reason: String },
    #[error(transparent)]
    CpuSet(#[from] CpuSetError),
}

/// Counters of one instant, per CPU OS index.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NetSample {
    /// CLOCK_MONOTONIC nanoseconds.
    pub taken_ns: u64,
    /// Interrupts of network devices.
    pub net_irqs: BTreeMap<u32, u64>,
    /// All device interrupts (numbered lines).
    pub all_irqs: BTreeMap<u32, u64>,
    pub net_rx: BTreeMap<u32, u64>,
    pub net_tx: BTreeMap<u32, u64>,
    /// Every softirq kind together.
    pub all_softirqs: BTreeMap<u32, u64>,
    /// /proc/stat ticks: (irq, softirq, total).
    pub ticks: BTreeMap<u32, (u64, u64, u64)>,
    /// IRQ numbers recognized as the network devices', with the CPU taking most of them.
    pub net_irq_lines: Vec<u32>,
}

/// What one CPU did for the network between two samples.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CpuLoad {
    pub cpu: u32,
    pub net_irqs_per_s: f64,
    pub net_rx_per_s: f64,
    pub net_tx_per_s: f64,
    /// Share of this CPU's time in hard interrupts / softirqs (all kinds), 0..1.
    pub irq_share: f64,
    pub softirq_share: f64,
    /// Estimated share of this CPU's time spent on network protocol processing: interrupt
    /// and softirq time weighted by the network's share of the events on this CPU.
    pub protocol_share: f64,
}

/// The protocol-processing picture over a window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProtocolLoad {
    pub seconds: f64,
    pub cpus: Vec<CpuLoad>,
    /// The CPU doing most protocol processing: by time when some CPU spends at least
    /// [`MIN_PROTOCOL_SHARE`] on it, else (tick accounting shows no softirq time) by where
    /// most network interrupts and softirqs ran.
    pub protocol_cpu: Option<u32>,
    /// How sure: the protocol CPU's part of all protocol processing, scaled down when fewer
    /// than [`CONFIDENT_EVENTS_PER_S`] network softirqs and interrupts per second happened in the window.
    pub confidence: f64,
    pub net_irq_lines: Vec<u32>,
}

/// Below this share of one CPU's time no CPU is called the protocol core (0.5 %).
pub const MIN_PROTOCOL_SHARE: f64 = 0.005;
/// Network events per second needed for full confidence.
pub const CONFIDENT_EVENTS_PER_S: f64 = 1000.0;
/// Fewer network events than this in a window lower the confidence proportionally.
pub const MIN_EVENTS: f64 = 20.0;

/// Where the counters are read from.
#[derive(Clone, Debug)]
pub struct ProcSource {
    root: PathBuf,
    /// Names that mark a network IRQ line in /proc/interrupts: device names (eth0, virtio2)
    /// and PCI addresses of the network devices.
    net_names: Vec<String>,
}

impl ProcSource {
    /// The live system, with network devices found under /sys/class/net.
    pub fn system() -> ProcSource {
        let root = PathBuf::from("/");
        let net_names = discover_net_names(&root);
        ProcSource { root, net_names }
    }

    /// Files under `root` (root/proc/interrupts ...), with the given network names.
    pub fn with_root(root: &Path, net_names: Vec<String>) -> ProcSource {
        ProcSource {
            root: root.to_path_buf(),
            net_names,
        }
    }

    pub fn net_names(&self) -> &[String] {
        &self.net_names
    }

    fn read(&self, rel: &str) -> Result<(String, String), ProtocolError> {
        let path = self.root.join(rel);
        let name = path.display().to_string();
        std::fs::read_to_string(&path)
            .map(|t| (t, name.clone()))
            .map_err(|e| ProtocolError::Read {
                path: name,
                reason: e.to_string(),
            })
    }

    pub fn sample(&self) -> Result<NetSample, ProtocolError> {
        let mut s = NetSample {
            taken_ns: crate::board::monotonic_ns(),
            ..Default::default()
        };
        let (text, name) = self.read("proc/interrupts")?;
        parse_interrupts(&text, &name, &self.net_names, &mut s)?;
        let (text, name) = self.read("proc/softirqs")?;
        parse_softirqs(&text, &name, &mut s)?;
        let (text, name) = self.read("proc/stat")?;
        parse_stat(&text, &name, &mut s)?;
        Ok(s)
    }
}

/// Names of the network devices under root/sys/class/net (loopback and devices without
/// hardware excluded): interface name, device name and, for PCI devices or their children,
/// the PCI address.
pub fn discover_net_names(root: &Path) -> Vec<String> {
    let mut names = Vec::new();
    let Ok(dir) = std::fs::read_dir(root.join("sys/class/net")) else {
        return names;
    };
    for e in dir.flatten() {
        let iface = e.file_name().to_string_lossy().into_owned();
        let Ok(dev) = std::fs::canonicalize(e.path().join("device")) else {
            continue; // lo, ifb, bridges: no hardware, no interrupts
        };
        names.push(iface);
        for part in [dev.file_name(), dev.parent().and_then(|p| p.file_name())]
            .into_iter()
            .flatten()
        {
            let p = part.to_string_lossy().into_owned();
            if (p.starts_with("virtio") || is_pci_address(&p)) && !names.contains(&p) {
                names.push(p);
            }
        }
    }
    names
}

fn is_pci_address(s: &str) -> bool {
    // dddd:bb:dd.f
    let b = s.as_bytes();
    b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.'
}

fn matches_net(desc: &str, names: &[String]) -> bool {
    desc.split_whitespace().any(|tok| {
        names.iter().any(|n| {
            tok == n
                || tok.ends_with(&format!("-{n}"))
                || tok.starts_with(&format!("{n}-"))
                || tok.starts_with(&format!("{n}."))
                || tok.contains(&format!("@pci:{n}"))
        })
    })
}

fn cpu_header(line: &str, path: &str) -> Result<Vec<u32>, ProtocolError> {
    line.split_whitespace()
        .map(|t| {
            t.strip_prefix("CPU")
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| ProtocolError::Parse {
                    path: path.into(),
                    line: 1,
                    reason: format!("expected CPUn column headers, got '{t}'"),
                })
        })
        .collect()
}

fn parse_interrupts(
    text: &str,
    path: &str,
    names: &[String],
    s: &mut NetSample,
) -> Result<(), ProtocolError> {
    let mut lines = text.lines();
    let cpus = cpu_header(lines.next().unwrap_or(""), path)?;
    for (k, line) in lines.enumerate() {
        let Some((label, rest)) = line.split_once(':') else {
            continue;
        };
        let Ok(irq) = label.trim().parse::<u32>() else {
            continue; // NMI, LOC, ...: not device interrupts
        };
        let mut toks = rest.split_whitespace();
        let mut counts = Vec::with_capacity(cpus.len());
        for _ in 0..cpus.len() {
            match toks.next().map(str::parse::<u64>) {
                Some(Ok(v)) => counts.push(v),
                _ => {
                    return Err(ProtocolError::Parse {
                        path: path.into(),
                        line: k + 2,
                        reason: format!("IRQ {irq}: expected {} per-CPU counts", cpus.len()),
                    })
                }
            }
        }
        let desc: Vec<&str> = toks.collect();
        let net = matches_net(&desc.join(" "), names);
        for (&cpu, &v) in cpus.iter().zip(&counts) {
            *s.all_irqs.entry(cpu).or_default() += v;
            if net {
                *s.net_irqs.entry(cpu).or_default() += v;
            }
        }
        if net {
            s.net_irq_lines.push(irq);
        }
    }
    Ok(())
}

fn parse_softirqs(text: &str, path: &str, s: &mut NetSample) -> Result<(), ProtocolError> {
    let mut lines = text.lines();
    let cpus = cpu_header(lines.next().unwrap_or(""), path)?;
    for (k, line) in lines.enumerate() {
        let Some((kind, rest)) = line.split_once(':') else {
            continue;
        };
        let counts: Result<Vec<u64>, _> = rest.split_whitespace().map(str::parse::<u64>).collect();
        let counts = counts.map_err(|_| ProtocolError::Parse {
            path: path.into(),
            line: k + 2,
            reason: format!("{}: counts are not numbers", kind.trim()),
        })?;
        for (&cpu, &v) in cpus.iter().zip(&counts) {
            *s.all_softirqs.entry(cpu).or_default() += v;
            match kind.trim() {
                "NET_RX" => *s.net_rx.entry(cpu).or_default() += v,
                "NET_TX" => *s.net_tx.entry(cpu).or_default() += v,
                _ => {}
            }
        }
    }
    Ok(())
}

fn parse_stat(text: &str, path: &str, s: &mut NetSample) -> Result<(), ProtocolError> {
    for (k, line) in text.lines().enumerate() {
        let mut toks = line.split_whitespace();
        let Some(cpu) = toks
            .next()
            .and_then(|t| t.strip_prefix("cpu"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue; // the "cpu" total line and the rest of the file
        };
        let v: Result<Vec<u64>, _> = toks.map(str::parse::<u64>).collect();
        let v = match v {
            Ok(v) if v.len() >= 7 => v,
            _ => {
                return Err(ProtocolError::Parse {
                    path: path.into(),
                    line: k + 1,
                    reason: format!("cpu{cpu}: expected at least 7 tick counts"),
                })
            }
        };
        // user nice system idle iowait irq softirq [steal]; guest time is inside user.
        let total: u64 = v.iter().take(8).sum();
        s.ticks.insert(cpu, (v[5], v[6], total));
    }
    Ok(())
}

fn delta(a: &BTreeMap<u32, u64>, b: &BTreeMap<u32, u64>, cpu: u32) -> u64 {
    b.get(&cpu)
        .copied()
        .unwrap_or(0)
        .saturating_sub(a.get(&cpu).copied().unwrap_or(0))
}

/// The protocol-processing load between two samples of the same source.
pub fn load(earlier: &NetSample, later: &NetSample) -> ProtocolLoad {
    let seconds = later.taken_ns.saturating_sub(earlier.taken_ns) as f64 / 1e9;
    let per_s = |v: u64| {
        if seconds > 0.0 {
            v as f64 / seconds
        } else {
            0.0
        }
    };
    let mut cpus = Vec::new();
    let mut events = 0u64;
    for (&cpu, &(irq1, soft1, tot1)) in &later.ticks {
        let (irq0, soft0, tot0) = earlier.ticks.get(&cpu).copied().unwrap_or((0, 0, 0));
        let total = tot1.saturating_sub(tot0) as f64;
        let share = |x: u64| if total > 0.0 { x as f64 / total } else { 0.0 };
        let irq_share = share(irq1.saturating_sub(irq0));
        let softirq_share = share(soft1.saturating_sub(soft0));
        let net_irqs = delta(&earlier.net_irqs, &later.net_irqs, cpu);
        let all_irqs = delta(&earlier.all_irqs, &later.all_irqs, cpu);
        let rx = delta(&earlier.net_rx, &later.net_rx, cpu);
        let tx = delta(&earlier.net_tx, &later.net_tx, cpu);
        let all_soft = delta(&earlier.all_softirqs, &later.all_softirqs, cpu);
        events += net_irqs + rx + tx;
        let frac = |part: u64, all: u64| {
            if all > 0 {
                part as f64 / all as f64
            } else {
                0.0
            }
        };
        cpus.push(CpuLoad {
            cpu,
            net_irqs_per_s: per_s(net_irqs),
            net_rx_per_s: per_s(rx),
            net_tx_per_s: per_s(tx),
            irq_share,
            softirq_share,
            protocol_share: irq_share * frac(net_irqs, all_irqs)
                + softirq_share * frac(rx + tx, all_soft),
        });
    }
    let sum: f64 = cpus.iter().map(|c| c.protocol_share).sum();
    let top = cpus
        .iter()
        .max_by(|a, b| a.protocol_share.total_cmp(&b.protocol_share));
    // Volume is a rate, so the manager's windows (50 ms to 2 s) judge the same traffic alike;
    // a handful of events in a very short window stays doubtful.
    let volume =
        (per_s(events) / CONFIDENT_EVENTS_PER_S).min(1.0) * (events as f64 / MIN_EVENTS).min(1.0);
    let (protocol_cpu, confidence) = match top {
        Some(c) if c.protocol_share >= MIN_PROTOCOL_SHARE && sum > 0.0 => {
            (Some(c.cpu), (c.protocol_share / sum) * volume)
        }
        // Tick-based accounting (no CONFIG_IRQ_TIME_ACCOUNTING, as in many VMs) can show no
        // softirq time at all while thousands of NET_RX run on one CPU: then the CPU taking
        // most network events is the protocol core, with their concentration as confidence.
        _ => {
            let count = |c: &CpuLoad| c.net_irqs_per_s + c.net_rx_per_s + c.net_tx_per_s;
            let all: f64 = cpus.iter().map(count).sum();
            match cpus.iter().max_by(|a, b| count(a).total_cmp(&count(b))) {
                Some(c) if all > 0.0 => (Some(c.cpu), count(c) / all * volume),
                _ => (None, 0.0),
            }
        }
    };
    ProtocolLoad {
        seconds,
        cpus,
        protocol_cpu,
        confidence,
        net_irq_lines: later.net_irq_lines.clone(),
    }
}

/// Samples `source` every `interval` for `count` windows and returns each window's load.
pub fn sample_over(
    source: &ProcSource,
    interval: std::time::Duration,
    count: usize,
) -> Result<Vec<ProtocolLoad>, ProtocolError> {
    let mut prev = source.sample()?;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        std::thread::sleep(interval);
        let cur = source.sample()?;
        out.push(load(&prev, &cur));
        prev = cur;
    }
    Ok(out)
}

/// Moves receive processing and interrupts, below a root ("/" live). Each setter returns the
/// previous set so the caller can restore it.
#[derive(Clone, Debug)]
pub struct Steering {
    root: PathBuf,
}

impl Steering {
    pub fn system() -> Steering {
        Steering {
            root: PathBuf::from("/"),
        }
    }

    pub fn with_root(root: &Path) -> Steering {
        Steering {
            root: root.to_path_buf(),
        }
    }

    pub fn rps_path(&self, iface: &str, queue: u32) -> PathBuf {
        self.root
            .join(format!("sys/class/net/{iface}/queues/rx-{queue}/rps_cpus"))
    }

    pub fn irq_path(&self, irq: u32) -> PathBuf {
        self.root.join(format!("proc/irq/{irq}/smp_affinity_list"))
    }

    /// The CPUs that do receive packet steering for this queue (empty: RPS off, the CPU
    /// taking the interrupt does it).
    pub fn rps_cpus(&self, iface: &str, queue: u32) -> Result<CpuSet, SteerError> {
        let p = self.rps_path(iface, queue);
        Ok(CpuSet::parse_mask(&read_steer(&p)?)?)
    }

    pub fn set_rps_cpus(
        &self,
        iface: &str,
        queue: u32,
        cpus: &CpuSet,
    ) -> Result<CpuSet, SteerError> {
        if iface.contains('/') || iface.is_empty() {
            return Err(SteerError::NotFound {
                path: format!("interface '{iface}'"),
            });
        }
        let p = self.rps_path(iface, queue);
        let before = CpuSet::parse_mask(&read_steer(&p)?)?;
        write_steer(&p, &cpus.to_mask())?;
        let after = CpuSet::parse_mask(&read_steer(&p)?)?;
        if &after != cpus {
            return Err(SteerError::Refused {
                path: p.display().to_string(),
                value: cpus.to_list(),
                reason: format!("it reads back as '{}'", after.to_list()),
            });
        }
        Ok(before)
    }

    pub fn irq_affinity(&self, irq: u32) -> Result<CpuSet, SteerError> {
        Ok(CpuSet::parse_list(&read_steer(&self.irq_path(irq))?)?)
    }

    pub fn set_irq_affinity(&self, irq: u32, cpus: &CpuSet) -> Result<CpuSet, SteerError> {
        let p = self.irq_path(irq);
        let before = CpuSet::parse_list(&read_steer(&p)?)?;
        if cpus.is_empty() {
            return Err(SteerError::Refused {
                path: p.display().to_string(),
                value: "the empty set".into(),
                reason: "an IRQ needs at least one CPU".into(),
            });
        }
        write_steer(&p, &cpus.to_list())?;
        Ok(before)
    }
}

fn read_steer(p: &Path) -> Result<String, SteerError> {
    std::fs::read_to_string(p).map_err(|e| steer_err(p, &e, ""))
}

fn write_steer(p: &Path, value: &str) -> Result<(), SteerError> {
    if !p.exists() {
        return Err(SteerError::NotFound {
            path: p.display().to_string(),
        });
    }
    std::fs::write(p, format!("{value}\n")).map_err(|e| steer_err(p, &e, value))
}

fn steer_err(p: &Path, e: &std::io::Error, value: &str) -> SteerError {
    let path = p.display().to_string();
    match e.raw_os_error() {
        Some(libc::ENOENT) => SteerError::NotFound { path },
        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => SteerError::NotAllowed {
            path,
            reason: "needs root (CAP_NET_ADMIN for RPS, CAP_SYS_ADMIN for IRQs) and a writable /sys and /proc".into(),
        },
        Some(libc::EIO) | Some(libc::EINVAL) | Some(libc::ERANGE) => SteerError::Refused {
            path,
            value: value.into(),
            reason: "the IRQ is kernel-managed or per-CPU, or the set has no online CPU".into(),
        },
        _ => SteerError::Io {
            path,
            reason: e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERRUPTS_A: &str = "           CPU0       CPU1       \n  0:         10          0   IO-APIC   2-edge      timer\n 38:          0       1000 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0\n 39:        200          0 PCI-MSIX-0000:00:03.0   2-edge      virtio2-output.0\n 40:          5          5 PCI-MSIX-0000:00:04.0   1-edge      virtio3-rx\nNMI:          0          0   Non-maskable interrupts\nERR:          0\n";
    const INTERRUPTS_B: &str = "           CPU0       CPU1       \n  0:         10          0   IO-APIC   2-edge      timer\n 38:          0       3000 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0\n 39:        300          0 PCI-MSIX-0000:00:03.0   2-edge      virtio2-output.0\n 40:          5        105 PCI-MSIX-0000:00:04.0   1-edge      virtio3-rx\nNMI:          0          0   Non-maskable interrupts\nERR:          0\n";
    const SOFTIRQS_A: &str = "                    CPU0       CPU1       \n          HI:          0          0\n       TIMER:        100        100\n      NET_TX:         10          0\n      NET_RX:        100        100\n";
    const SOFTIRQS_B: &str = "                    CPU0       CPU1       \n          HI:          0          0\n       TIMER:        200        200\n      NET_TX:         20          0\n      NET_RX:        200       5100\n";
    const STAT_A: &str = "cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 100 0 100 800 0 0 0 0 0 0\ncpu1 100 0 100 800 0 0 0 0 0 0\nintr 0\n";
    const STAT_B: &str = "cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 150 0 150 1699 0 0 1 0 0 0\ncpu1 150 0 150 1610 0 40 50 0 0 0\nintr 0\n";

    fn fake(dir: &str, files: [(&str, &str); 3]) -> PathBuf {
        let root = std::env::temp_dir().join(format!("simmer-proto-{}-{dir}", std::process::id()));
        std::fs::create_dir_all(root.join("proc")).unwrap();
        for (name, text) in files {
            std::fs::write(root.join("proc").join(name), text).unwrap();
        }
        root
    }

    #[test]
    fn finds_the_protocol_cpu() {
        let names = vec![
            "eth0".to_string(),
            "virtio2".to_string(),
            "0000:00:03.0".to_string(),
        ];
        let a = ProcSource::with_root(
            &fake(
                "a",
                [
                    ("interrupts", INTERRUPTS_A),
                    ("softirqs", SOFTIRQS_A),
                    ("stat", STAT_A),
                ],
            ),
            names.clone(),
        );
        let b = ProcSource::with_root(
            &fake(
                "b",
                [
                    ("interrupts", INTERRUPTS_B),
                    ("softirqs", SOFTIRQS_B),
                    ("stat", STAT_B),
                ],
            ),
            names,
        );
        let mut sa = a.sample().unwrap();
        let mut sb = b.sample().unwrap();
        assert_eq!(
            sa.net_irq_lines,
            vec![38, 39],
            "virtio3 is not a network device here"
        );
        sa.taken_ns = 0;
        sb.taken_ns = 2_000_000_000;
        let l = load(&sa, &sb);
        assert_eq!(l.seconds, 2.0);
        let c1 = &l.cpus[1];
        assert_eq!(c1.net_irqs_per_s, 1000.0);
        assert_eq!(c1.net_rx_per_s, 2500.0);
        // cpu1: 1000 ticks, 40 irq (2000 of 2100 irqs are the network's), 50 softirq (5000 of
        // 5100 softirqs are NET_RX).
        assert!((c1.irq_share - 0.04).abs() < 1e-9);
        let want = 0.04 * 2000.0 / 2100.0 + 0.05 * 5000.0 / 5100.0;
        assert!((c1.protocol_share - want).abs() < 1e-9);
        assert_eq!(l.protocol_cpu, Some(1));
        assert!(
            l.confidence > 0.95 && l.confidence <= 1.0,
            "{}",
            l.confidence
        );
    }

    #[test]
    fn counts_name_the_protocol_cpu_when_softirq_time_is_not_accounted() {
        // The same events as above, but /proc/stat shows no irq or softirq time at all.
        let stat_b = "cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 150 0 150 1700 0 0 0 0 0 0\ncpu1 150 0 150 1700 0 0 0 0 0 0\nintr 0\n";
        let names = vec!["virtio2".to_string()];
        let a = ProcSource::with_root(
            &fake(
                "ta",
                [
                    ("interrupts", INTERRUPTS_A),
                    ("softirqs", SOFTIRQS_A),
                    ("stat", STAT_A),
                ],
            ),
            names.clone(),
        );
        let b = ProcSource::with_root(
            &fake(
                "tb",
                [
                    ("interrupts", INTERRUPTS_B),
                    ("softirqs", SOFTIRQS_B),
                    ("stat", stat_b),
                ],
            ),
            names,
        );
        let (mut sa, mut sb) = (a.sample().unwrap(), b.sample().unwrap());
        sa.taken_ns = 0;
        sb.taken_ns = 2_000_000_000;
        let l = load(&sa, &sb);
        assert!(l.cpus.iter().all(|c| c.protocol_share == 0.0));
        // cpu1 took 2000 network IRQs and 5000 NET_RX of 7160 network events.
        assert_eq!(l.protocol_cpu, Some(1));
        let want = (1000.0 + 2500.0) / (1000.0 + 2500.0 + 50.0 + 50.0 + 5.0);
        assert!((l.confidence - want).abs() < 1e-9, "{}", l.confidence);
    }

    #[test]
    fn idle_network_has_no_protocol_cpu() {
        let root = fake(
            "idle",
            [
                ("interrupts", INTERRUPTS_A),
                ("softirqs", SOFTIRQS_A),
                ("stat", STAT_A),
            ],
        );
        let s = ProcSource::with_root(&root, vec!["eth0".into()])
            .sample()
            .unwrap();
        let l = load(&s, &s);
        assert_eq!(l.protocol_cpu, None);
        assert_eq!(l.confidence, 0.0);
    }

    #[test]
    fn parse_errors_name_file_and_line() {
        let root = fake(
            "bad",
            [
                ("interrupts", "  CPU0 CPU1\n 5: 1 x edge foo\n"),
                ("softirqs", SOFTIRQS_A),
                ("stat", STAT_A),
            ],
        );
        let e = ProcSource::with_root(&root, vec![])
            .sample()
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with("proc/interrupts:2: IRQ 5: expected 2 per-CPU counts"),
            "{e}"
        );
        let root = fake(
            "bad2",
            [
                ("interrupts", INTERRUPTS_A),
                ("softirqs", SOFTIRQS_A),
                ("stat", "cpu0 1 2\n"),
            ],
        );
        let e = ProcSource::with_root(&root, vec![])
            .sample()
            .unwrap_err()
            .to_string();
        assert!(e.contains("proc/stat:1: cpu0"), "{e}");
        let e = ProcSource::with_root(Path::new("/nonexistent"), vec![])
            .sample()
            .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/proc/interrupts"));
    }

    #[test]
    fn live_system_parses() {
        // Whatever this machine is, its own files must parse and give shares in 0..1.
        let src = ProcSource::system();
        let a = src.sample().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let b = src.sample().unwrap();
        let l = load(&a, &b);
        assert!(!l.cpus.is_empty());
        for c in &l.cpus {
            assert!((0.0..=1.0).contains(&c.protocol_share), "{c:?}");
        }
    }

    #[test]
    fn steering_writes_masks_and_reports_missing_queues() {
        let root = std::env::temp_dir().join(format!("simmer-steer-{}", std::process::id()));
        let q = root.join("sys/class/net/lo/queues/rx-0");
        std::fs::create_dir_all(&q).unwrap();
        std::fs::write(q.join("rps_cpus"), "0\n").unwrap();
        std::fs::create_dir_all(root.join("proc/irq/38")).unwrap();
        std::fs::write(root.join("proc/irq/38/smp_affinity_list"), "0-1\n").unwrap();
        let s = Steering::with_root(&root);
        let before = s.set_rps_cpus("lo", 0, &CpuSet::of(&[1])).unwrap();
        assert!(before.is_empty());
        assert_eq!(std::fs::read_to_string(q.join("rps_cpus")).unwrap(), "2\n");
        assert_eq!(s.rps_cpus("lo", 0).unwrap(), CpuSet::of(&[1]));
        let e = s.set_rps_cpus("nosuch", 0, &CpuSet::of(&[0])).unwrap_err();
        assert!(matches!(e, SteerError::NotFound { .. }), "{e}");
        let prev = s.set_irq_affinity(38, &CpuSet::of(&[1])).unwrap();
        assert_eq!(prev, CpuSet::of(&[0, 1]));
        assert_eq!(s.irq_affinity(38).unwrap(), CpuSet::of(&[1]));
        assert!(matches!(
            s.set_irq_affinity(38, &CpuSet::default()),
            Err(SteerError::Refused { .. })
        ));
        assert!(matches!(
            s.set_irq_affinity(99, &CpuSet::of(&[0])),
            Err(SteerError::NotFound { .. })
        ));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn net_names_match_irq_descriptions() {
        let n = vec!["eth0".to_string(), "0000:3b:00.0".to_string()];
        assert!(matches_net("PCI-MSI 1-edge eth0-TxRx-0", &n));
        assert!(matches_net(
            "IR-PCI-MSIX-0000:3b:00.0 3-edge mlx5_comp2@pci:0000:3b:00.0",
            &n
        ));
        assert!(!matches_net("IO-APIC 2-edge timer", &n));
        assert!(!matches_net("PCI-MSI eth01-rx", &n));
        assert!(is_pci_address("0000:00:03.0"));
    }
}
