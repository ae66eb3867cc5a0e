//! Locality classes of rank pairs and the per-class transport rule table.
//!
//! The rule for a pair decides how a message of a given size travels: up to `eager_limit`
//! bytes in one record of the pair ring; above it, pipelined copy-in/copy-out in records of
//! `fragment` bytes; from `single_copy_threshold` bytes on, one copy with process_vm_readv.
//! The default table comes from the cache sizes (the seed's rule: fragment = the whole L1d
//! when the pair shares an L2, half of it when not); `huddle tune-msg` measures a better one
//! and stores it as JSON (schema `huddle.msg-rules/1`, see docs/msg.md).

use crate::MsgError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use topology::{Level, Machine, ObjKind};

pub const NCLASS: usize = 5;

/// How close two ranks sit, from the PUs they are pinned to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum Class {
    /// The same core (same PU or hyperthreads): they share L1 and L2.
    Core = 0,
    /// Different cores sharing an L2.
    L2 = 1,
    /// Sharing the last-level cache but no L2.
    L3 = 2,
    /// The same NUMA node or package, no shared cache.
    Numa = 3,
    /// Different packages (the inter-socket link).
    Remote = 4,
}

impl Class {
    pub const ALL: [Class; NCLASS] = [
        Class::Core,
        Class::L2,
        Class::L3,
        Class::Numa,
        Class::Remote,
    ];

    pub fn from_level(level: Level) -> Class {
        match level {
            Level::Pu | Level::Core | Level::L1 => Class::Core,
            Level::L2 => Class::L2,
            Level::L3 => Class::L3,
            Level::Numa | Level::Package => Class::Numa,
            Level::Machine | Level::Network => Class::Remote,
        }
    }

    pub fn from_u8(v: u8) -> Class {
        Class::ALL.get(v as usize).copied().unwrap_or(Class::Remote)
    }

    pub fn name(self) -> &'static str {
        match self {
            Class::Core => "core",
            Class::L2 => "l2",
            Class::L3 => "l3",
            Class::Numa => "numa",
            Class::Remote => "remote",
        }
    }

    fn shares_l2(self) -> bool {
        matches!(self, Class::Core | Class::L2)
    }
}

/// Transport parameters for one class (bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[repr(C)]
pub struct Rule {
    pub eager_limit: u64,
    pub fragment: u64,
    pub single_copy_threshold: u64,
    /// The single-copy threshold inside exchanges (Alltoall steps, the Allreduce ring), where
    /// both ranks send and receive at once: a single copy then has no helper, so pipelining
    /// (two fast in-cache copies) wins up to larger sizes. 0 in a file: as
    /// single_copy_threshold (tables from before this field).
    #[serde(default)]
    pub exchange_single_copy_threshold: u64,
}

/// The table `huddle launch` puts in the segment, as stored on disk.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuleTable {
    pub schema: String,
    /// "cache-sizes" or "tune-msg".
    pub source: String,
    /// What it was derived from, e.g. "L1d 48 KiB, L2 2 MiB, L3 105 MiB" or the measurement.
    pub basis: String,
    pub rules: BTreeMap<Class, Rule>,
}

pub const SCHEMA: &str = "huddle.msg-rules/1";
const KIB: u64 = 1024;

fn cache_size(m: &Machine, kind: ObjKind) -> Option<u64> {
    m.nodes_of(kind).find_map(|n| n.cache_size)
}

impl RuleTable {
    /// The default rules from the machine's cache sizes.
    pub fn from_caches(m: &Machine) -> RuleTable {
        let l1 = cache_size(m, ObjKind::L1).unwrap_or(32 * KIB);
        let l2 = cache_size(m, ObjKind::L2).unwrap_or(256 * KIB);
        let l3 = cache_size(m, ObjKind::L3);
        let mut rules = BTreeMap::new();
        for c in Class::ALL {
            // Below a shared cache's size the two copies of copy-in/copy-out stay in that
            // cache; past it (or without one) one copy through process_vm_readv moves half
            // the bytes through memory.
            let single_copy_threshold = match c {
                Class::Core | Class::L2 => (l2 / 2).max(64 * KIB),
                // Where one copy through the shared L3 beats two depends on the machine: since
                // small records cost one cache line, `huddle tune-msg` put the crossover at
                // 128 KiB on an Intel VM and found none up to 4 MiB on an AMD Zen 5 VM (32 KiB
                // there: 4.3 us by single copy, 1.1 us pipelined).
                Class::L3 => 128 * KIB,
                Class::Numa | Class::Remote => 64 * KIB,
            };
            // Exchanges: pipelined while the messages stay well inside the shared cache (a
            // sixteenth of it; on the 2-core VM, Alltoall and the Allreduce ring were 4-40 %
            // faster pipelined at 256 KiB-1 MiB, even at 4 MiB).
            let shared = match c {
                Class::Core | Class::L2 => Some(l2),
                Class::L3 => l3,
                Class::Numa | Class::Remote => None,
            };
            let exchange_single_copy_threshold = shared.map_or(single_copy_threshold, |s| {
                (s / 16).max(single_copy_threshold)
            });
            rules.insert(
                c,
                Rule {
                    eager_limit: 4 * KIB,
                    fragment: if c.shares_l2() { l1 } else { l1 / 2 },
                    single_copy_threshold,
                    exchange_single_copy_threshold,
                },
            );
        }
        RuleTable {
            schema: SCHEMA.into(),
            source: "cache-sizes".into(),
            basis: format!(
                "L1d {} KiB, L2 {} KiB, L3 {}",
                l1 / KIB,
                l2 / KIB,
                l3.map_or("none".into(), |s| format!("{} KiB", s / KIB))
            ),
            rules,
        }
    }

    /// The rules as the segment stores them, in class order; classes the table lacks get
    /// the nearest class's rule that it has.
    pub fn to_array(&self) -> Result<[Rule; NCLASS], MsgError> {
        let first = self
            .rules
            .values()
            .next()
            .copied()
            .ok_or_else(|| MsgError::BadRules("the table has no rules".into()))?;
        let mut out = [first; NCLASS];
        let mut last = first;
        for c in Class::ALL {
            if let Some(r) = self.rules.get(&c) {
                last = *r;
            }
            out[c as usize] = last;
        }
        Ok(out)
    }

    pub fn validate(&self) -> Result<(), MsgError> {
        if self.schema != SCHEMA {
            return Err(MsgError::BadRules(format!(
                "schema is {:?}, expected {SCHEMA:?}",
                self.schema
            )));
        }
        for (c, r) in &self.rules {
            if r.fragment < 64 || r.fragment > 16 << 20 {
                return Err(MsgError::BadRules(format!(
                    "class {}: fragment {} outside 64 B..16 MiB",
                    c.name(),
                    r.fragment
                )));
            }
            if r.eager_limit > 16 << 20 {
                return Err(MsgError::BadRules(format!(
                    "class {}: eager_limit {} above 16 MiB",
                    c.name(),
                    r.eager_limit
                )));
            }
        }
        self.to_array().map(|_| ())
    }

    /// The table `huddle launch` uses: `explicit` if given, else the stored one
    /// ([`default_rules_path`]) if there is one, else the one derived from `m`'s caches.
    pub fn for_launch(m: &Machine, explicit: Option<&Path>) -> Result<RuleTable, MsgError> {
        match explicit
            .map(Path::to_path_buf)
            .or_else(|| default_rules_path().filter(|p| p.is_file()))
        {
            Some(p) => RuleTable::load(&p),
            None => Ok(RuleTable::from_caches(m)),
        }
    }

    pub fn load(path: &Path) -> Result<RuleTable, MsgError> {
        let text = inputfile::read_text(path)
            .map_err(|e| MsgError::BadRules(format!("{}: {e}", path.display())))?;
        RuleTable::from_json(&text, &path.display().to_string())
    }

    /// Parses and validates a table; errors are prefixed with `name` (the file).
    pub fn from_json(text: &str, name: &str) -> Result<RuleTable, MsgError> {
        let mut t: RuleTable =
            serde_json::from_str(text).map_err(|e| MsgError::BadRules(format!("{name}: {e}")))?;
        for r in t.rules.values_mut() {
            if r.exchange_single_copy_threshold == 0 {
                r.exchange_single_copy_threshold = r.single_copy_threshold;
            }
        }
        t.validate()
            .map_err(|e| MsgError::BadRules(format!("{name}: {e}")))?;
        Ok(t)
    }

    pub fn save(&self, path: &Path) -> Result<(), MsgError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| MsgError::BadRules(format!("{}: {e}", dir.display())))?;
        }
        let text =
            serde_json::to_string_pretty(self).map_err(|e| MsgError::BadRules(e.to_string()))?;
        std::fs::write(path, text + "\n")
            .map_err(|e| MsgError::BadRules(format!("{}: {e}", path.display())))
    }
}

/// Where `huddle tune-msg` stores the table and `huddle launch` looks for it:
/// $HUDDLE_MSG_RULES, else $XDG_CONFIG_HOME/huddle/msg-rules.json, else
/// ~/.config/huddle/msg-rules.json.
pub fn default_rules_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("HUDDLE_MSG_RULES") {
        return Some(PathBuf::from(p));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("huddle").join("msg-rules.json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_rule_fragment_follows_l2_sharing() {
        let m = Machine::from_synthetic("pack:2 l3:1 l2:2 l1d:1 core:1 pu:1").unwrap();
        let t = RuleTable::from_caches(&m);
        let l1 = cache_size(&m, ObjKind::L1).unwrap();
        assert_eq!(t.rules[&Class::L2].fragment, l1);
        assert_eq!(t.rules[&Class::Core].fragment, l1);
        assert_eq!(t.rules[&Class::L3].fragment, l1 / 2);
        assert_eq!(t.rules[&Class::Remote].fragment, l1 / 2);
        t.validate().unwrap();
    }

    #[test]
    fn exchanges_stay_pipelined_within_a_sixteenth_of_the_shared_cache() {
        let m = Machine::from_synthetic("pack:2 l3:1 l2:2 core:1 pu:1").unwrap();
        let t = RuleTable::from_caches(&m);
        let l3 = cache_size(&m, ObjKind::L3).unwrap();
        let r = t.rules[&Class::L3];
        assert_eq!(
            r.exchange_single_copy_threshold,
            (l3 / 16).max(r.single_copy_threshold)
        );
        // No shared cache: as for one message.
        let r = t.rules[&Class::Remote];
        assert_eq!(r.exchange_single_copy_threshold, r.single_copy_threshold);
    }

    #[test]
    fn a_table_without_exchange_thresholds_uses_the_single_copy_ones() {
        let dir = std::env::temp_dir().join(format!("huddle-msg-old-{}", std::process::id()));
        let p = dir.join("r.json");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            &p,
            r#"{"schema":"huddle.msg-rules/1","source":"x","basis":"x","rules":{"core":{"eager_limit":4096,"fragment":4096,"single_copy_threshold":65536}}}"#,
        )
        .unwrap();
        let t = RuleTable::load(&p).unwrap();
        assert_eq!(t.rules[&Class::Core].exchange_single_copy_threshold, 65536);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn classes_follow_the_tree() {
        let m = Machine::from_synthetic("pack:2 l3:1 l2:2 core:2 pu:2").unwrap();
        let class = |a, b| Class::from_level(m.level(a, b));
        assert_eq!(class(0, 0), Class::Core);
        assert_eq!(class(0, 1), Class::Core);
        assert_eq!(class(0, 2), Class::L2);
        assert_eq!(class(0, 4), Class::L3);
        assert_eq!(class(0, 8), Class::Remote);
    }

    #[test]
    fn json_round_trip_and_missing_classes_inherit() {
        let m = Machine::from_synthetic("pack:1 core:2 pu:1").unwrap();
        let mut t = RuleTable::from_caches(&m);
        t.rules.retain(|c, _| *c == Class::Core || *c == Class::L3);
        let text = serde_json::to_string(&t).unwrap();
        let back: RuleTable = serde_json::from_str(&text).unwrap();
        assert_eq!(back, t);
        let a = back.to_array().unwrap();
        assert_eq!(a[Class::L2 as usize], t.rules[&Class::Core]);
        assert_eq!(a[Class::Remote as usize], t.rules[&Class::L3]);
    }

    #[test]
    fn bad_tables_are_rejected() {
        let dir = std::env::temp_dir().join(format!("huddle-msg-rules-{}", std::process::id()));
        let p = dir.join("r.json");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&p, "{\"schema\": 3}").unwrap();
        assert!(RuleTable::load(&p).is_err());
        std::fs::write(
            &p,
            r#"{"schema":"huddle.msg-rules/1","source":"x","basis":"x","rules":{"core":{"eager_limit":4096,"fragment":1,"single_copy_threshold":0}}}"#,
        )
        .unwrap();
        let e = RuleTable::load(&p).unwrap_err().to_string();
        assert!(e.contains("fragment"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
