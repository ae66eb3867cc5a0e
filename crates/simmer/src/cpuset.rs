//! CPU sets in the two kernel spellings: lists (`0-3,8`, smp_affinity_list) and hex masks in
//! 32-bit groups separated by commas, most significant first (`ff,00000001`, rps_cpus and
//! smp_affinity).

use std::collections::BTreeSet;

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("bad CPU set '{text}': {reason}")]
pub struct CpuSetError {
    pub text: String,
    pub reason: String,
}

/// A set of CPU OS indexes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuSet(pub BTreeSet<u32>);

/// CPU numbers above this are refused as typos (the kernel's own limit is 8192).
const MAX_CPU: u32 = 8191;

impl CpuSet {
    pub fn of(cpus: &[u32]) -> CpuSet {
        CpuSet(cpus.iter().copied().collect())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, cpu: u32) -> bool {
        self.0.contains(&cpu)
    }

    /// Parses `0-3,8` (empty text or whitespace is the empty set).
    pub fn parse_list(text: &str) -> Result<CpuSet, CpuSetError> {
        let err = |reason: &str| CpuSetError {
            text: text.to_string(),
            reason: reason.to_string(),
        };
        let mut set = BTreeSet::new();
        for part in text.trim().split(',').filter(|p| !p.trim().is_empty()) {
            let num = |s: &str| -> Result<u32, CpuSetError> {
                let v: u32 = s.trim().parse().map_err(|_| err("not a CPU number"))?;
                if v > MAX_CPU {
                    return Err(err("CPU number too large"));
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
                        return Err(err("CPU number too large"));
                    }
                    set.insert(cpu);
                }
            }
        }
        Ok(CpuSet(set))
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
        assert!(CpuSet::parse_mask("xyz").is_err());
        assert!(CpuSet::parse_mask("123456789").is_err());
    }

    proptest! {
        #[test]
        fn round_trips(cpus in proptest::collection::btree_set(0u32..300, 0..40)) {
            let s = CpuSet(cpus);
            prop_assert_eq!(CpuSet::parse_list(&s.to_list()).unwrap(), s.clone());
            prop_assert_eq!(CpuSet::parse_mask(&s.to_mask()).unwrap(), s);
        }
    }
}
