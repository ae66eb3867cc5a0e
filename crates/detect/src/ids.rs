//! Maps keyed by process and thread ids, hashed cheaply.
//!
//! Every perf record looks up its task and process several times (the program's tree, the
//! task index, the maps cache); with std's SipHash those lookups were about 7 % of huddle's
//! CPU under HPCC (perf profile, 2026-11-26). Ids are small integers chosen by the kernel,
//! not by an adversary, so one multiplication spreads them well enough.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Fibonacci hashing of one integer key: the multiplication carries the id's bits into the
/// high bits, which hashbrown's control bytes use.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used by integer keys; kept correct for any other.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, id: u32) {
        self.0 = (self.0 ^ id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A map keyed by pid or tid.
pub type IdMap<V> = HashMap<u32, V, BuildHasherDefault<IdHasher>>;
/// A set of pids or tids.
pub type IdSet = HashSet<u32, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn consecutive_ids_differ_in_the_high_bits() {
        let b = BuildHasherDefault::<IdHasher>::default();
        let tops: HashSet<u64> = (1000..1128u32).map(|id| b.hash_one(id) >> 57).collect();
        assert!(tops.len() > 64, "7-bit tags of 128 ids: {}", tops.len());
    }

    #[test]
    fn maps_and_sets_behave_as_usual() {
        let mut m: IdMap<usize> = IdMap::default();
        let mut s: IdSet = IdSet::default();
        for id in 0..10_000u32 {
            m.insert(id * 7, id as usize);
            s.insert(id * 3);
        }
        assert_eq!(m.len(), 10_000);
        assert_eq!(m[&(42 * 7)], 42);
        assert!(s.contains(&(9_999 * 3)) && !s.contains(&1));
    }
}
