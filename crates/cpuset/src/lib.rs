//! The one set of CPUs (or NUMA nodes) huddle passes around, by OS index, as hwloc's bitmap
//! is for hwloc: read and written in the two kernel spellings, lists (`0-3,8`:
//! /sys/devices/system/cpu/online, Cpus_allowed_list, smp_affinity_list, taskset -c) and hex
//! masks in 32-bit groups separated by commas, most significant first (`ff,00000001`:
//! rps_cpus, smp_affinity). Every list huddle parses goes through [`CpuSet::parse_list`].
//!
//! A crate of its own, re-exported by `topology`, so that the allocator and the detector,
//! which do not link hwloc, share it.

use std::collections::BTreeSet;

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("bad CPU set '{text}': {reason}")]
pub struct CpuSetError {
    pub text: String,
    pub reason: String,
}

/// One CPU by its OS index: the kernel's CPU number (`taskset -c`, sched_setaffinity,
/// /proc/PID/stat's processor). A type of its own so that a slot or an hwloc logical index
/// cannot be pinned to by mistake; `topology::Machine::os_cpu` and `mapping::Target::os_cpu`
/// are where the other index spaces turn into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OsCpu(pub u32);

impl std::fmt::Display for OsCpu {
    /// The bare number, as the kernel writes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl From<OsCpu> for CpuSet {
    /// The set of that one CPU (a mask that pins).
    fn from(cpu: OsCpu) -> CpuSet {
        CpuSet::of(&[cpu.0])
    }
}

/// A set of CPU OS indexes, ascending.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CpuSet(pub BTreeSet<u32>);

/// NUMA nodes by OS index: the same type, as in hwloc (nodesets are bitmaps too).
pub type NodeSet = CpuSet;

/// CPU numbers above this are refused as typos (the kernel's own limit is 8192).
const MAX_CPU: u32 = 8191;

impl CpuSet {
    /// The set of `cpus` (duplicates once).
    pub fn of(cpus: &[u32]) -> CpuSet {
        CpuSet(cpus.iter().copied().collect())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn contains(&self, cpu: u32) -> bool {
        self.0.contains(&cpu)
    }

    /// The members as [`OsCpu`]s, ascending.
    pub fn cpus(&self) -> impl DoubleEndedIterator<Item = OsCpu> + '_ {
        self.iter().map(OsCpu)
    }

    /// The members, ascending.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    /// The members, ascending.
    pub fn to_vec(&self) -> Vec<u32> {
        self.iter().collect()
    }

    /// Parses `0-3,8` (empty text or whitespace is the empty set); CPU numbers up to 8191,
    /// the kernel's own limit (larger ones are taken for typos).
    pub fn parse_list(text: &str) -> Result<CpuSet, CpuSetError> {
        CpuSet::parse_index_list(text, MAX_CPU)
    }

    /// [`CpuSet::parse_list`] for indexes of other kinds (logical PUs, cores, NUMA nodes of a
    /// model), each at most `max`.
    pub fn parse_index_list(text: &str, max: u32) -> Result<CpuSet, CpuSetError> {
        let err = |reason: &str| CpuSetError {
            text: text.to_string(),
            reason: reason.to_string(),
        };
        let mut set = BTreeSet::new();
        for part in text.trim().split(',').filter(|p| !p.trim().is_empty()) {
            let num = |s: &str| -> Result<u32, CpuSetError> {
                let v: u32 = s.trim().parse().map_err(|_| err("not a number"))?;
                if v > max {
                    return Err(err(&format!("number too large (over {max})")));
                }
                Ok(v)
            };
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (num(a)?, num(b)?);
                    if a > b {
                        return Err(err("range goes backwards"));
                    }
                    set.extend(a..=b);
                }
                None => {
                    set.insert(num(part)?);
                }
            }
        }
        Ok(CpuSet(set))
    }

    /// Parses a kernel hex mask (`ff,00000001`).
    pub fn parse_mask(text: &str) -> Result<CpuSet, CpuSetError> {
        let err = |reason: &str| CpuSetError {
            text: text.to_string(),
            reason: reason.to_string(),
        };
        let groups: Vec<&str> = text.trim().split(',').collect();
        let mut set = BTreeSet::new();
        for (k, g) in groups.iter().rev().enumerate() {
            if g.is_empty() || g.len() > 8 {
                return Err(err("each comma-separated group has 1 to 8 hex digits"));
            }
            let v = u32::from_str_radix(g, 16).map_err(|_| err("not hexadecimal"))?;
            for bit in 0..32 {
                if v & (1 << bit) != 0 {
                    let cpu = k as u32 * 32 + bit;
                    if cpu > MAX_CPU {
                        return Err(err("number too large (over 8191)"));
                    }
                    set.insert(cpu);
                }
            }
        }
        Ok(CpuSet(set))
    }

    /// The kernel's cpu_set_t layout (sched_setaffinity): bit `c % 64` of word `c / 64`
    /// for CPU `c`, at least one word.
    pub fn to_words(&self) -> Vec<u64> {
        let words = self
            .0
            .iter()
            .next_back()
            .map_or(1, |&c| c as usize / 64 + 1);
        let mut m = vec![0u64; words];
        for &c in &self.0 {
            m[c as usize / 64] |= 1 << (c % 64);
        }
        m
    }

    /// The set in a kernel cpu_set_t layout (sched_getaffinity), of which the first `bytes`
    /// bytes are meaningful.
    pub fn from_words(words: &[u64], bytes: usize) -> CpuSet {
        let bits = (bytes * 8).min(words.len() * 64) as u32;
        (0..bits)
            .filter(|&c| words[c as usize / 64] >> (c % 64) & 1 == 1)
            .collect()
    }

    /// `0-3,8`.
    pub fn to_list(&self) -> String {
        let mut out: Vec<String> = Vec::new();
        let mut it = self.0.iter().copied().peekable();
        while let Some(a) = it.next() {
            let mut b = a;
            while it.peek() == Some(&(b + 1)) {
                b += 1;
                it.next();
            }
            out.push(if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            });
        }
        out.join(",")
    }

    /// The kernel mask spelling, with at least one group (`0` for the empty set).
    pub fn to_mask(&self) -> String {
        let top = self.0.iter().next_back().map_or(0, |&c| c / 32);
        (0..=top)
            .rev()
            .map(|g| {
                let v = self
                    .0
                    .iter()
                    .filter(|&&c| c / 32 == g)
                    .fold(0u32, |acc, &c| acc | 1 << (c % 32));
                if g == top {
                    format!("{v:x}")
                } else {
                    format!("{v:08x}")
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The CPUs thread `tid` (0: the calling thread) may run on (sched_getaffinity), or None
/// when it cannot be read (the thread is gone).
pub fn affinity(tid: u32) -> Option<CpuSet> {
    // Large enough for 16 384 CPUs; the kernel fails with EINVAL if its mask is larger.
    let mut words = vec![0u64; 16_384 / 64];
    // SAFETY: the buffer is valid for its full length in bytes.
    let n = unsafe {
        libc::syscall(
            libc::SYS_sched_getaffinity,
            tid as libc::pid_t,
            words.len() * 8,
            words.as_mut_ptr(),
        )
    };
    (n > 0).then(|| CpuSet::from_words(&words, n as usize))
}

/// Restricts thread `tid` (0: the calling thread) to `cpus` (sched_setaffinity); the OS
/// error as it comes (ESRCH: gone, EPERM: not allowed, EINVAL: none of them usable).
pub fn set_affinity(tid: u32, cpus: &CpuSet) -> std::io::Result<()> {
    set_affinity_words(tid, &cpus.to_words())
}

/// [`set_affinity`] with the mask already in the kernel's layout ([`CpuSet::to_words`]): no
/// allocation, for a forked child of a threaded process.
pub fn set_affinity_words(tid: u32, words: &[u64]) -> std::io::Result<()> {
    // SAFETY: the mask buffer is valid for its length in bytes.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_setaffinity,
            tid as libc::pid_t,
            words.len() * 8,
            words.as_ptr(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> CpuSet {
        CpuSet(iter.into_iter().collect())
    }
}

impl Extend<u32> for CpuSet {
    fn extend<I: IntoIterator<Item = u32>>(&mut self, iter: I) {
        self.0.extend(iter);
    }
}

impl IntoIterator for CpuSet {
    type Item = u32;
    type IntoIter = std::collections::btree_set::IntoIter<u32>;
    /// The members, ascending.
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl std::fmt::Display for CpuSet {
    /// The list spelling (`0-3,8`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_list())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn kernel_spellings() {
        assert_eq!(
            CpuSet::parse_list("0-3,8").unwrap(),
            CpuSet::of(&[0, 1, 2, 3, 8])
        );
        assert_eq!(
            CpuSet::parse_mask("ff,00000001").unwrap().to_list(),
            "0,32-39"
        );
        assert_eq!(
            CpuSet::parse_mask("00000000,00000002").unwrap(),
            CpuSet::of(&[1])
        );
        assert_eq!(CpuSet::of(&[1]).to_mask(), "2");
        assert_eq!(CpuSet::of(&[]).to_mask(), "0");
        assert_eq!(CpuSet::of(&[0, 33]).to_mask(), "2,00000001");
        assert!(CpuSet::parse_list("3-1").is_err());
        assert!(CpuSet::parse_list("1,x").is_err());
        assert!(CpuSet::parse_list("9000").is_err());
        assert_eq!(
            CpuSet::parse_index_list("9000-9001", 65_535).unwrap().len(),
            2
        );
        assert!(CpuSet::parse_index_list("70000", 65_535).is_err());
        assert_eq!(CpuSet::parse_list(" 0-1,\n").unwrap().to_vec(), vec![0, 1]);
        assert!(CpuSet::parse_list("").unwrap().is_empty());
        let mine = affinity(0).expect("our own mask");
        assert!(!mine.is_empty());
        set_affinity(0, &mine).unwrap();
        assert_eq!(affinity(0), Some(mine));
        assert!(affinity(u32::MAX >> 1).is_none(), "no such thread");
        let s: CpuSet = [5, 1, 5].into_iter().collect();
        assert_eq!((s.len(), s.to_string()), (2, "1,5".to_string()));
        assert!(CpuSet::parse_mask("xyz").is_err());
        assert!(CpuSet::parse_mask("123456789").is_err());
    }

    proptest! {
        #[test]
        fn round_trips(cpus in proptest::collection::btree_set(0u32..300, 0..40)) {
            let s = CpuSet(cpus);
            prop_assert_eq!(CpuSet::parse_list(&s.to_list()).unwrap(), s.clone());
            prop_assert_eq!(CpuSet::parse_mask(&s.to_mask()).unwrap(), s.clone());
            let words = s.to_words();
            prop_assert_eq!(CpuSet::from_words(&words, words.len() * 8), s);
        }
    }
}
