//! EXPERIMENTAL: infer bank bits from row-conflict timing (the idea behind DRAMA's timing
//! attack, written here from the description).
//!
//! Two addresses in the same bank but different rows cannot both sit in that bank's row
//! buffer, so fetching them alternately from DRAM (flushed from the caches each time) takes
//! longer than for two addresses in different banks. The detector times many pairs (a fixed
//! base, random partners), splits the pair latencies into "fast" and "slow" at the widest gap,
//! and keeps the XOR functions of up to three physical address bits that are constant over
//! every slow (same-bank) pair but not over the fast ones.
//!
//! What it is worth depends on the machine: inside a virtual machine the addresses are
//! guest-physical; only the bits below the host's backing page size (21 for 2 MiB pages) are
//! the real ones, and other guests share the banks. Treat its output as a hint to check
//! against a published mapping, never as a mapping to allocate by.

use std::path::PathBuf;

use crate::pagemap::{page_size, Pagemap};
use crate::AllocError;

/// What to measure.
#[derive(Debug, Clone)]
pub struct DetectOptions {
    /// Buffer to sample from (more bytes: more high physical bits vary).
    pub buffer_bytes: usize,
    /// Random partner addresses timed against the base.
    pub samples: usize,
    /// Timed alternations per pair (the median is kept).
    pub rounds: usize,
    /// Lowest and highest physical bit a function may use.
    pub bits: (u32, u32),
    pub pagemap: PathBuf,
    pub seed: u64,
}

impl Default for DetectOptions {
    fn default() -> Self {
        DetectOptions {
            buffer_bytes: 256 << 20,
            samples: 3000,
            rounds: 60,
            bits: (6, 33),
            pagemap: PathBuf::from("/proc/self/pagemap"),
            seed: 0x9e37_79b9_7f4a_7c15,
        }
    }
}

/// What the detector saw.
#[derive(Debug, Clone)]
pub struct DetectReport {
    /// Median cycles per pair, in sample order.
    pub latencies: Vec<u64>,
    /// Pairs at or above this many cycles count as row conflicts.
    pub threshold: u64,
    /// Medians of the fast and slow groups.
    pub fast_median: u64,
    pub slow_median: u64,
    pub conflicts: usize,
    /// Independent XOR functions (bit masks) constant over the conflicting pairs.
    pub functions: Vec<u64>,
    /// Highest physical address bit that varied over the buffer.
    pub top_bit: u32,
}

impl DetectReport {
    /// A function as "13^17".
    pub fn describe(mask: u64) -> String {
        (0..64)
            .filter(|b| mask >> b & 1 == 1)
            .map(|b| b.to_string())
            .collect::<Vec<_>>()
            .join("^")
    }
}

struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[cfg(target_arch = "x86_64")]
fn time_pair(a: *const u8, b: *const u8, rounds: usize) -> u64 {
    use std::arch::x86_64::{__rdtscp, _mm_clflush, _mm_mfence};
    let mut t = Vec::with_capacity(rounds);
    let mut aux = 0u32;
    for _ in 0..rounds {
        // SAFETY: a and b point into a live, touched mapping; clflush/rdtscp exist on x86_64.
        unsafe {
            _mm_clflush(a);
            _mm_clflush(b);
            _mm_mfence();
            let t0 = __rdtscp(&mut aux);
            std::ptr::read_volatile(a);
            std::ptr::read_volatile(b);
            let t1 = __rdtscp(&mut aux);
            t.push(t1.wrapping_sub(t0));
        }
    }
    t.sort_unstable();
    t[t.len() / 2]
}

#[cfg(not(target_arch = "x86_64"))]
fn time_pair(_: *const u8, _: *const u8, _: usize) -> u64 {
    0
}

/// Threshold at the widest gap between sorted latencies, looking only where the slow side
/// holds between 0.5 % and 40 % of the pairs (same-bank pairs are a small minority).
fn split(latencies: &[u64]) -> u64 {
    let mut s = latencies.to_vec();
    s.sort_unstable();
    let n = s.len();
    let lo = (n * 6 / 10).max(1);
    let hi = n.saturating_sub((n / 200).max(1));
    let mut best = (0u64, s.last().copied().unwrap_or(0) + 1);
    for i in lo..hi.max(lo) {
        let gap = s[i].saturating_sub(s[i - 1]);
        if gap > best.0 {
            best = (gap, s[i]);
        }
    }
    best.1
}

/// Reduces masks to an independent set over GF(2), keeping the lightest ones.
fn independent(mut masks: Vec<u64>) -> Vec<u64> {
    masks.sort_by_key(|m| (m.count_ones(), *m));
    let mut basis: Vec<u64> = Vec::new(); // reduced rows, each with a distinct leading bit
    let mut kept = Vec::new();
    for m in masks {
        let mut r = m;
        for &b in &basis {
            let lead = 63 - b.leading_zeros();
            if r >> lead & 1 == 1 {
                r ^= b;
            }
        }
        if r != 0 {
            basis.push(r);
            basis.sort_by_key(|b| std::cmp::Reverse(63 - b.leading_zeros()));
            kept.push(m);
        }
    }
    kept
}

/// Runs the experiment (needs pagemap privilege; x86_64 only).
pub fn detect(opts: &DetectOptions) -> Result<DetectReport, AllocError> {
    if !cfg!(target_arch = "x86_64") {
        return Err(AllocError::Internal(
            "the timing detector needs x86_64 (clflush, rdtscp)".into(),
        ));
    }
    let page = page_size();
    let len = opts.buffer_bytes.max(page * 16) / page * page;
    // SAFETY: a fresh private anonymous mapping, unmapped below on every path.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return Err(AllocError::Os {
            what: "mmap",
            bytes: len,
            source: std::io::Error::last_os_error(),
        });
    }
    let base = map.cast::<u8>();
    let result = (|| {
        // SAFETY: our mapping; touching makes every page present for pagemap.
        unsafe {
            libc::madvise(map, len, libc::MADV_NOHUGEPAGE);
            for off in (0..len).step_by(page) {
                std::ptr::write_volatile(base.add(off), 1);
            }
        }
        let pm = Pagemap::open(&opts.pagemap)?;
        let phys = pm.physical_pages(base as u64, len / page)?;
        let top_bit = phys
            .iter()
            .map(|p| p ^ phys[0])
            .fold(0, |a, b| a | b)
            .checked_ilog2()
            .unwrap_or(0);
        let mut rng = XorShift(opts.seed | 1);
        let a_phys = phys[0];
        let mut partners = Vec::with_capacity(opts.samples);
        let mut latencies = Vec::with_capacity(opts.samples);
        for _ in 0..opts.samples {
            let p = 1 + (rng.next() as usize) % (phys.len() - 1);
            let line = (rng.next() as usize % (page / 64)) * 64;
            let b = base.wrapping_add(p * page + line);
            latencies.push(time_pair(base, b, opts.rounds.max(1)));
            partners.push(phys[p] + line as u64);
        }
        let threshold = split(&latencies);
        let slow: Vec<u64> = partners
            .iter()
            .zip(&latencies)
            .filter(|(_, &l)| l >= threshold)
            .map(|(p, _)| p ^ a_phys)
            .collect();
        let fast: Vec<u64> = partners
            .iter()
            .zip(&latencies)
            .filter(|(_, &l)| l < threshold)
            .map(|(p, _)| p ^ a_phys)
            .collect();
        let median = |mut v: Vec<u64>| {
            v.sort_unstable();
            v.get(v.len() / 2).copied().unwrap_or(0)
        };
        let (lo_bit, hi_bit) = (opts.bits.0, opts.bits.1.min(top_bit));
        let mut candidates = Vec::new();
        if slow.len() >= 8 {
            let bits: Vec<u32> = (lo_bit..=hi_bit).collect();
            let mut masks = Vec::new();
            for (i, &x) in bits.iter().enumerate() {
                masks.push(1u64 << x);
                for (j, &y) in bits.iter().enumerate().skip(i + 1) {
                    masks.push(1u64 << x | 1u64 << y);
                    for &z in &bits[j + 1..] {
                        masks.push(1u64 << x | 1u64 << y | 1u64 << z);
                    }
                }
            }
            for m in masks {
                let same = |d: &u64| (d & m).count_ones() & 1 == 0;
                let slow_same = slow.iter().filter(|d| same(d)).count() as f64 / slow.len() as f64;
                let fast_same =
                    fast.iter().filter(|d| same(d)).count() as f64 / fast.len().max(1) as f64;
                // Same bank: constant over slow pairs; a bank bit splits the others.
                if slow_same >= 0.95 && fast_same < 0.75 {
                    candidates.push(m);
                }
            }
        }
        Ok(DetectReport {
            threshold,
            fast_median: median(
                latencies
                    .iter()
                    .copied()
                    .filter(|&l| l < threshold)
                    .collect(),
            ),
            slow_median: median(
                latencies
                    .iter()
                    .copied()
                    .filter(|&l| l >= threshold)
                    .collect(),
            ),
            conflicts: slow.len(),
            functions: independent(candidates),
            latencies,
            top_bit,
        })
    })();
    // SAFETY: unmapping our own mapping.
    unsafe { libc::munmap(map, len) };
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_finds_the_gap_above_the_bulk() {
        let mut l = vec![200u64; 950];
        l.extend(vec![320u64; 50]);
        l[3] = 190;
        assert_eq!(split(&l), 320);
    }

    #[test]
    fn independent_drops_combinations() {
        let a = 1 << 13 | 1 << 17;
        let b = 1 << 14 | 1 << 18;
        // a^b is a combination of a and b; the lighter originals survive.
        assert_eq!(independent(vec![a ^ b, b, a]), vec![a, b]);
        assert_eq!(DetectReport::describe(a), "13^17");
    }
}
