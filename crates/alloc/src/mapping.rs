//! Address-mapping functions: which memory controller and which DRAM bank an address lands in.
//!
//! A mapping is named by a string so that C callers and tests can pick one:
//!
//! | name | what it is |
//! |---|---|
//! | `tilepro64[:banks=2\|4\|8,hash=0\|1]` | the seed's TILEPro64 function (Algorithm 2): bank = addr\[15:13\] ^ {0, addr\[17:16\]}, controller = addr\[35:34\] |
//! | `sandybridge-ddr3-1ch` | Intel Sandy Bridge, DDR3, one channel, one rank, as published by DRAMA |
//! | `haswell-ddr3-2ch` | Intel Ivy Bridge / Haswell, DDR3, two channels, two ranks (DRAMA) |
//! | `skylake-ddr4-2ch` | Intel Skylake, DDR4, two channels, two ranks (DRAMA) |
//! | `zenplus-ddr4-1r`, `zenplus-ddr4-2r` | AMD Zen+ (and Zen), DDR4, one channel, one or two ranks (ZenHammer) |
//! | `zen2-ddr4-1r`, `zen2-ddr4-2r` | AMD Zen 2, DDR4, one channel, one or two ranks (ZenHammer) |
//! | `zen3-ddr4-1r`, `zen3-ddr4-2r` | AMD Zen 3, DDR4, one channel, one or two ranks (ZenHammer) |
//! | `zen4-ddr5-1r` | AMD Zen 4, DDR5, one DIMM, one rank, 8 bank groups (ZenHammer) |
//! | `numa` | no bank function: one controller per NUMA node, one bank (the fallback) |
//! | `xor:bank=13^17,14^18;controller=6` | any XOR-of-bits function: one `^`-joined bit list per bank/controller bit |
//! | `synthetic:controllers=C,banks=B,chunk=S[,run=K,source=virtual\|physical]` | a deterministic injected map for tests |
//!
//! The Intel functions are facts reported by Pessl et al., "DRAMA: Exploiting DRAM Addressing for
//! Cross-CPU Attacks", USENIX Security 2016; the AMD ones by Jattke et al., "ZenHammer: Rowhammer
//! Attacks on AMD Zen-based Platforms", USENIX Security 2024 (bank-group, bank and rank functions
//! of desktop Ryzen machines with one DDR4 DIMM per channel, over the address bits they resolved:
//! up to bit 29, 28 and 27 for Zen+, Zen 2 and Zen 3). They hold for the DIMM population those
//! machines had; another population shifts the bits, which is why `xor:` exists.
//!
//! **Granule.** Most of these functions read address bits below 12, so the bank (and, on Intel,
//! the channel) changes inside every 4 KiB page: no page lies in one bank. A pool is built from
//! pages, so by default (`granule=page`) a mapping keeps only the functions that read page-frame
//! bits alone; the (controller, bank) of a page is then the same for all its bytes, and every page
//! spreads over the banks the dropped functions select (`skylake-ddr4-2ch`: 16 of 32 banks kept,
//! channels interleaved inside each page; `zen3-ddr4-1r`: every function reads bits 8-11, so a
//! page covers all 16 banks and only one "bank" is left). `granule=line` keeps every function:
//! blocks as small as the lowest bit read (128 B on Skylake) in one bank, nothing larger.

use crate::AllocError;

/// Where an address lives: memory controller (channel or NUMA node) and bank within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Location {
    pub controller: usize,
    pub bank: usize,
}

/// Which address a mapping function reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The physical address (from /proc/self/pagemap): what real hardware decodes.
    Physical,
    /// The virtual address: only for injected test mappings, needs no privilege.
    Virtual,
}

/// A named address-mapping function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    name: String,
    kind: Kind,
    /// Functions dropped because they read address bits inside a page (granule=page).
    dropped: usize,
    /// `name` for C callers (a spec never holds a NUL: it came from a C string or the environment).
    c_name: std::ffi::CString,
}

/// The smallest block a mapping places: a page (default) or whatever its functions allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granule {
    Page,
    Line,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// Each output bit is the parity of the address bits in its mask.
    Xor {
        banks: Vec<u64>,
        controllers: Vec<u64>,
    },
    TilePro64(TilePro64),
    Synthetic(Synthetic),
}

/// The TILEPro64 memory controller's bank function, Algorithm 2 of the seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TilePro64 {
    /// Column bits (10 on the seed's board, read from the controller's SPR).
    pub colbits: u32,
    /// Bank bits (3: eight banks).
    pub bankbits: u32,
    /// hash\[0\]: bank address hashing enabled (it was, on the seed's board).
    pub hash: bool,
    /// Banks the allocator uses: 8, or 4/2 by wrapping the index as the seed did.
    pub banks: usize,
}

impl TilePro64 {
    /// Bank of a physical address, literally as Algorithm 2 computes it, then wrapped.
    pub fn bank(&self, addr: u64) -> usize {
        let lo = self.colbits + 3;
        let hi = self.bankbits + self.colbits + 2;
        let mut bank = (addr >> lo) & ((1u64 << self.bankbits) - 1);
        if self.hash {
            // high[bankbits-1:0] = {1'b0, addr[17:16]} when the bank field reaches bit 15.
            let high = if hi >= 15 && self.bankbits == 3 {
                (addr >> 16) & 0b11
            } else {
                0
            };
            bank ^= high;
        }
        (bank as usize) % self.banks
    }

    /// Controller: physical address bits 35:34 (36-bit physical addresses, four controllers).
    pub fn controller(&self, addr: u64) -> usize {
        ((addr >> 34) & 0b11) as usize
    }
}

/// An injected, deterministic map: chunk index i = addr / chunk; run r = i / run;
/// bank = r mod banks, controller = (r / banks) mod controllers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Synthetic {
    pub controllers: usize,
    pub banks: usize,
    pub chunk_shift: u32,
    /// Consecutive chunks that share one (controller, bank).
    pub run: usize,
    pub source: Source,
}

/// Bank and channel masks of the published x86 functions (DRAMA, USENIX Security 2016).
/// Each entry is one output bit, given as the address bits XORed into it.
const SANDYBRIDGE_DDR3_1CH_BANKS: &[&[u32]] = &[&[13, 17], &[14, 18], &[15, 19]];
const HASWELL_DDR3_2CH_BANKS: &[&[u32]] = &[&[14, 18], &[15, 19], &[16, 20], &[17, 21]];
const HASWELL_DDR3_2CH_CHANNELS: &[&[u32]] = &[&[7, 8, 9, 12, 13, 18, 19]];
const SKYLAKE_DDR4_2CH_BANKS: &[&[u32]] = &[&[7, 14], &[15, 19], &[16, 20], &[17, 21], &[18, 22]];
const SKYLAKE_DDR4_2CH_CHANNELS: &[&[u32]] = &[&[8, 9, 12, 13, 18, 19]];
/// AMD Zen generations (ZenHammer, USENIX Security 2024; the bit lists as its artifact's DRAM
/// configurations give them): bank-group, bank and (two-rank DIMMs) rank functions of one channel.
const ZENPLUS_DDR4_1R_BANKS: &[&[u32]] = &[
    &[15, 17, 21, 25, 29],
    &[16, 18, 22, 26],
    &[6, 7, 8, 9, 10, 11, 12, 13, 19, 23, 27],
    &[14, 20, 24, 28],
];
const ZENPLUS_DDR4_2R_BANKS: &[&[u32]] = &[
    &[17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29],
    &[14, 21, 25, 29],
    &[15, 18, 22, 26],
    &[16, 19, 23, 27],
    &[6, 7, 8, 9, 10, 11, 12, 13, 20, 24, 28],
];
const ZEN2_DDR4_1R_BANKS: &[&[u32]] = &[
    &[16, 18, 22, 26],
    &[15, 17, 21, 25],
    &[14, 20, 24, 28],
    &[6, 7, 8, 9, 10, 11, 12, 13, 19, 23, 27],
];
const ZEN2_DDR4_2R_BANKS: &[&[u32]] = &[
    &[17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28],
    &[15, 18, 22, 26],
    &[14, 21, 25],
    &[6, 7, 8, 9, 10, 11, 12, 13, 20, 24, 28],
    &[16, 19, 23, 27],
];
const ZEN3_DDR4_1R_BANKS: &[&[u32]] = &[
    &[8, 17, 21, 25],
    &[9, 18, 22, 26],
    &[10, 19, 23, 27],
    &[11, 20, 24],
];
const ZEN3_DDR4_2R_BANKS: &[&[u32]] = &[
    &[17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27],
    &[8, 18, 22, 26],
    &[9, 19, 23, 27],
    &[10, 20, 24],
    &[11, 21, 25],
];
/// Zen 4 with DDR5 (one DIMM, one rank, 8 bank groups): sub-channel, bank-group and bank functions.
const ZEN4_DDR5_1R_BANKS: &[&[u32]] = &[
    &[6, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29],
    &[12, 22, 27],
    &[9, 21, 26],
    &[8, 20, 25],
    &[11, 19, 24, 29],
    &[10, 18, 23, 28],
];

/// log2 of the page the pool is built from.
fn page_shift() -> u32 {
    crate::pagemap::page_size().trailing_zeros()
}

/// The names [`Mapping::parse`] knows, for error messages and `--help`.
pub const KNOWN: &str = "tilepro64, sandybridge-ddr3-1ch, haswell-ddr3-2ch, skylake-ddr4-2ch, \
                         zenplus-ddr4-1r, zenplus-ddr4-2r, zen2-ddr4-1r, zen2-ddr4-2r, zen3-ddr4-1r, \
                         zen3-ddr4-2r, zen4-ddr5-1r, numa, xor:bank=..;controller=.., \
                         synthetic:controllers=C,banks=B,chunk=S (physical ones take granule=page|line)";

fn masks(bits: &[&[u32]]) -> Vec<u64> {
    bits.iter()
        .map(|b| b.iter().fold(0u64, |m, &i| m | (1u64 << i)))
        .collect()
}

fn bad(spec: &str, reason: impl Into<String>) -> AllocError {
    AllocError::BadMapping {
        spec: spec.to_string(),
        reason: reason.into(),
    }
}

/// `key=value` pairs after the colon.
fn params<'a>(spec: &str, rest: &'a str) -> Result<Vec<(&'a str, &'a str)>, AllocError> {
    rest.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| bad(spec, format!("'{p}' is not key=value")))
        })
        .collect()
}

fn number(spec: &str, key: &str, v: &str) -> Result<usize, AllocError> {
    v.parse::<usize>()
        .map_err(|_| bad(spec, format!("{key}={v}: not a non-negative integer")))
}

/// `13^17,14^18` -> one mask per comma-separated function.
fn xor_list(spec: &str, list: &str) -> Result<Vec<u64>, AllocError> {
    list.split(',')
        .filter(|f| !f.is_empty())
        .map(|f| {
            let mut mask = 0u64;
            for bit in f.split('^') {
                let b: u32 = bit
                    .trim()
                    .parse()
                    .map_err(|_| bad(spec, format!("'{bit}' is not a bit number")))?;
                if b >= 63 {
                    return Err(bad(spec, format!("bit {b} is beyond 62")));
                }
                mask ^= 1u64 << b;
            }
            if mask == 0 {
                return Err(bad(spec, format!("'{f}' XORs to nothing")));
            }
            Ok(mask)
        })
        .collect()
}

/// The preset for the CPU that /proc/cpuinfo describes (vendor, family, model), or `numa`.
pub fn preset_for_cpu(cpuinfo: &str) -> &'static str {
    let field = |key: &str| {
        cpuinfo
            .lines()
            .find(|l| l.split(':').next().map(str::trim) == Some(key))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim())
            .unwrap_or_default()
    };
    let family = field("cpu family").parse::<u32>().unwrap_or(0);
    let model = field("model").parse::<u32>().unwrap_or(0);
    match (field("vendor_id"), family, model) {
        ("GenuineIntel", 6, 42 | 45) => "sandybridge-ddr3-1ch",
        ("GenuineIntel", 6, 58 | 62 | 60 | 63 | 69 | 70) => "haswell-ddr3-2ch",
        ("GenuineIntel", 6, 78 | 85 | 94 | 142 | 158) => "skylake-ddr4-2ch",
        // Family 17h: Zen and Zen+ (models 00h-2Fh), Zen 2 (30h-FFh: Rome, Renoir, Matisse)
        ("AuthenticAMD", 0x17, 0x00..=0x2f) => "zenplus-ddr4-1r",
        ("AuthenticAMD", 0x17, _) => "zen2-ddr4-1r",
        // Family 19h: Zen 3 (00h-0Fh Milan, 20h-5Fh Vermeer/Cezanne), Zen 4 (10h-1Fh Genoa, 60h-7Fh, A0h-AFh)
        ("AuthenticAMD", 0x19, 0x00..=0x0f | 0x20..=0x5f) => "zen3-ddr4-1r",
        ("AuthenticAMD", 0x19, 0x10..=0x1f | 0x60..=0x7f | 0xa0..=0xaf) => "zen4-ddr5-1r",
        _ => "numa",
    }
}

fn parse_granule(spec: &str, v: &str) -> Result<Granule, AllocError> {
    match v {
        "page" => Ok(Granule::Page),
        "line" => Ok(Granule::Line),
        _ => Err(bad(spec, format!("granule={v}: page or line"))),
    }
}

/// One output bit per entry, each the address bits XORed into it.
type Functions = &'static [&'static [u32]];

/// (bank functions, controller functions) of a named published mapping.
fn preset_functions(name: &str) -> Option<(Functions, Functions)> {
    Some(match name {
        "sandybridge-ddr3-1ch" => (SANDYBRIDGE_DDR3_1CH_BANKS, &[]),
        "haswell-ddr3-2ch" => (HASWELL_DDR3_2CH_BANKS, HASWELL_DDR3_2CH_CHANNELS),
        "skylake-ddr4-2ch" => (SKYLAKE_DDR4_2CH_BANKS, SKYLAKE_DDR4_2CH_CHANNELS),
        "zenplus-ddr4-1r" => (ZENPLUS_DDR4_1R_BANKS, &[]),
        "zenplus-ddr4-2r" => (ZENPLUS_DDR4_2R_BANKS, &[]),
        "zen2-ddr4-1r" => (ZEN2_DDR4_1R_BANKS, &[]),
        "zen2-ddr4-2r" => (ZEN2_DDR4_2R_BANKS, &[]),
        "zen3-ddr4-1r" => (ZEN3_DDR4_1R_BANKS, &[]),
        "zen3-ddr4-2r" => (ZEN3_DDR4_2R_BANKS, &[]),
        "zen4-ddr5-1r" => (ZEN4_DDR5_1R_BANKS, &[]),
        "numa" => (&[], &[]),
        _ => return None,
    })
}

impl Mapping {
    /// Parses a mapping name (see the module documentation).
    pub fn parse(spec: &str) -> Result<Mapping, AllocError> {
        let spec = spec.trim();
        let (head, rest) = spec.split_once(':').unwrap_or((spec, ""));
        let mut granule = Granule::Page;
        let mut kind = match head {
            "tilepro64" => {
                let mut t = TilePro64 {
                    colbits: 10,
                    bankbits: 3,
                    hash: true,
                    banks: 8,
                };
                for (k, v) in params(spec, rest)? {
                    match k {
                        "banks" => match number(spec, k, v)? {
                            n @ (2 | 4 | 8) => t.banks = n,
                            n => {
                                return Err(bad(
                                    spec,
                                    format!("banks={n}: the seed uses 2, 4 or 8"),
                                ))
                            }
                        },
                        "hash" => t.hash = number(spec, k, v)? != 0,
                        "granule" => granule = parse_granule(spec, v)?,
                        _ => {
                            return Err(bad(
                                spec,
                                format!("unknown parameter '{k}' (banks, hash, granule)"),
                            ))
                        }
                    }
                }
                Kind::TilePro64(t)
            }
            "xor" => {
                let mut banks = Vec::new();
                let mut controllers = Vec::new();
                for part in rest.split(';').filter(|p| !p.is_empty()) {
                    let (k, v) = part.split_once('=').ok_or_else(|| {
                        bad(
                            spec,
                            format!("'{part}' is not bank=.., controller=.. or granule=.."),
                        )
                    })?;
                    match k.trim() {
                        "bank" => banks = xor_list(spec, v)?,
                        "controller" => controllers = xor_list(spec, v)?,
                        "granule" => granule = parse_granule(spec, v.trim())?,
                        other => {
                            return Err(bad(
                                spec,
                                format!("unknown part '{other}' (bank, controller, granule)"),
                            ))
                        }
                    }
                }
                if banks.is_empty() && controllers.is_empty() {
                    return Err(bad(spec, "needs bank=... and/or controller=..."));
                }
                if banks.len() > 16 || controllers.len() > 8 {
                    return Err(bad(spec, "at most 16 bank and 8 controller functions"));
                }
                Kind::Xor { banks, controllers }
            }
            "synthetic" => {
                let mut s = Synthetic {
                    controllers: 1,
                    banks: 1,
                    chunk_shift: 12,
                    run: 1,
                    source: Source::Virtual,
                };
                for (k, v) in params(spec, rest)? {
                    match k {
                        "controllers" => s.controllers = number(spec, k, v)?,
                        "banks" => s.banks = number(spec, k, v)?,
                        "run" => s.run = number(spec, k, v)?,
                        "chunk" => {
                            let c = number(spec, k, v)?;
                            if !c.is_power_of_two() || c < 64 {
                                return Err(bad(spec, format!("chunk={c}: a power of two >= 64")));
                            }
                            s.chunk_shift = c.trailing_zeros();
                        }
                        "source" => {
                            s.source = match v {
                                "virtual" => Source::Virtual,
                                "physical" => Source::Physical,
                                _ => {
                                    return Err(bad(
                                        spec,
                                        format!("source={v}: virtual or physical"),
                                    ))
                                }
                            }
                        }
                        _ => {
                            return Err(bad(
                                spec,
                                format!(
                                "unknown parameter '{k}' (controllers, banks, chunk, run, source)"
                            ),
                            ))
                        }
                    }
                }
                if !(1..=64).contains(&s.controllers)
                    || !(1..=1024).contains(&s.banks)
                    || s.run == 0
                {
                    return Err(bad(
                        spec,
                        "controllers in 1..=64, banks in 1..=1024, run >= 1",
                    ));
                }
                Kind::Synthetic(s)
            }
            preset => {
                let (banks, controllers) = preset_functions(preset)
                    .ok_or_else(|| AllocError::UnknownMapping(spec.to_string()))?;
                for (k, v) in params(spec, rest)? {
                    match k {
                        "granule" => granule = parse_granule(spec, v)?,
                        _ => return Err(bad(spec, format!("unknown parameter '{k}' (granule)"))),
                    }
                }
                Kind::Xor {
                    banks: masks(banks),
                    controllers: masks(controllers),
                }
            }
        };
        let mut dropped = 0;
        if let Kind::Xor { banks, controllers } = &mut kind {
            if granule == Granule::Page {
                // Functions that read bits inside a page cannot separate pages: drop them.
                let inside = (1u64 << page_shift()) - 1;
                let before = banks.len() + controllers.len();
                banks.retain(|m| m & inside == 0);
                controllers.retain(|m| m & inside == 0);
                dropped = before - banks.len() - controllers.len();
            }
        }
        Ok(Mapping {
            name: spec.to_string(),
            c_name: std::ffi::CString::new(spec).map_err(|_| bad(spec, "contains a NUL byte"))?,
            kind,
            dropped,
        })
    }

    /// This machine's mapping: $HUDDLE_ALLOC_MAPPING if set, else the published function for
    /// the CPU generation in /proc/cpuinfo, else `numa` (one controller per NUMA node, one bank).
    /// The DIMM population is not visible from software, so a preset assumes the population its
    /// source measured (one rank on AMD).
    pub fn for_this_machine() -> Result<Mapping, AllocError> {
        if let Ok(spec) = std::env::var("HUDDLE_ALLOC_MAPPING") {
            return Mapping::parse(&spec);
        }
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        Mapping::parse(preset_for_cpu(&cpuinfo))
    }

    /// Functions dropped because they read bits inside a page (see the module documentation):
    /// each halves the banks (or controllers) a page can be told apart by.
    pub fn dropped_functions(&self) -> usize {
        self.dropped
    }

    /// The name it was parsed from.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name as a C string.
    pub fn c_name(&self) -> &std::ffi::CStr {
        &self.c_name
    }

    /// Controllers the function distinguishes (before NUMA nodes multiply them).
    pub fn controllers(&self) -> usize {
        match &self.kind {
            Kind::Xor { controllers, .. } => 1 << controllers.len(),
            Kind::TilePro64(_) => 4,
            Kind::Synthetic(s) => s.controllers,
        }
    }

    /// Banks per controller.
    pub fn banks(&self) -> usize {
        match &self.kind {
            Kind::Xor { banks, .. } => 1 << banks.len(),
            Kind::TilePro64(t) => t.banks,
            Kind::Synthetic(s) => s.banks,
        }
    }

    /// log2 of the largest aligned block that always lies in one (controller, bank): the lowest
    /// address bit the function reads.
    pub fn chunk_shift(&self) -> u32 {
        match &self.kind {
            Kind::Xor { banks, controllers } => banks
                .iter()
                .chain(controllers)
                .fold(0u64, |m, x| m | x)
                .trailing_zeros()
                .min(30),
            Kind::TilePro64(t) => t.colbits + 3,
            Kind::Synthetic(s) => s.chunk_shift,
        }
    }

    /// Which address the function reads.
    pub fn source(&self) -> Source {
        match &self.kind {
            Kind::Synthetic(s) => s.source,
            _ => Source::Physical,
        }
    }

    /// (controller, bank) of an address.
    pub fn locate(&self, addr: u64) -> Location {
        match &self.kind {
            Kind::Xor { banks, controllers } => {
                let bits = |fns: &[u64]| {
                    fns.iter().enumerate().fold(0usize, |acc, (i, &m)| {
                        acc | (((addr & m).count_ones() & 1) as usize) << i
                    })
                };
                Location {
                    controller: bits(controllers),
                    bank: bits(banks),
                }
            }
            Kind::TilePro64(t) => Location {
                controller: t.controller(addr),
                bank: t.bank(addr),
            },
            Kind::Synthetic(s) => {
                let run = (addr >> s.chunk_shift) as usize / s.run;
                Location {
                    controller: (run / s.banks) % s.controllers,
                    bank: run % s.banks,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tile() -> Mapping {
        Mapping::parse("tilepro64").unwrap()
    }

    #[test]
    fn tilepro_bank_bits_are_13_to_15_so_banks_change_every_8k() {
        let m = tile();
        assert_eq!(m.chunk_shift(), 13, "the seed: a bank changes every 8 kB");
        assert_eq!((m.controllers(), m.banks()), (4, 8));
        // Without hashing, the eight 8 kB chunks of a 64 kB page are banks 0..7 (Fig. 2.2).
        let plain = Mapping::parse("tilepro64:hash=0").unwrap();
        let banks: Vec<usize> = (0..8).map(|i| plain.locate(i << 13).bank).collect();
        assert_eq!(banks, vec![0, 1, 2, 3, 4, 5, 6, 7]);
        // Inside a chunk the bank does not change.
        assert_eq!(plain.locate(0x1fff).bank, 0);
    }

    #[test]
    fn tilepro_hash_xors_bits_16_17_into_the_low_bank_bits() {
        let m = tile();
        // "we assume that the first 8 kB of a page is bank 0. However, after hashing, it can be
        // any bank from 0-3": first chunk of each 64 kB page, over bits 16 and 17.
        let firsts: Vec<usize> = (0..4u64).map(|p| m.locate(p << 16).bank).collect();
        assert_eq!(firsts, vec![0, 1, 2, 3]);
        for page in 0..1024u64 {
            assert!(
                m.locate(page << 16).bank < 4,
                "first 8 kB of page {page} must hash to 0-3"
            );
            // Every 64 kB page still spreads over all eight banks.
            let mut seen: Vec<usize> = (0..8)
                .map(|c| m.locate((page << 16) | (c << 13)).bank)
                .collect();
            seen.sort();
            assert_eq!(seen, (0..8).collect::<Vec<_>>());
        }
        // Bit 18 is not part of the hash: pages 0 and 4 start in the same bank.
        assert_eq!(m.locate(0).bank, m.locate(4 << 16).bank);
        // Explicit value: addr[15:13] = 0b101, addr[17:16] = 0b11 -> 0b101 ^ 0b011 = 0b110.
        assert_eq!(m.locate((0b11 << 16) | (0b101 << 13)).bank, 0b110);
    }

    #[test]
    fn tilepro_controller_bits_are_34_and_35_and_banks_wrap() {
        let m = tile();
        for c in 0..4u64 {
            assert_eq!(m.locate(c << 34).controller, c as usize);
        }
        // 2 GB of DDR2 per controller stays inside one controller (bits below 34).
        assert_eq!(m.locate((2u64 << 30) - 1).controller, 0);
        let four = Mapping::parse("tilepro64:banks=4,hash=0").unwrap();
        assert_eq!(
            four.locate(5 << 13).bank,
            1,
            "the seed wraps bank indexes for 4 banks"
        );
        let two = Mapping::parse("tilepro64:banks=2,hash=0").unwrap();
        assert_eq!(two.locate(7 << 13).bank, 1);
        assert!(Mapping::parse("tilepro64:banks=3").is_err());
    }

    #[test]
    fn xor_functions_follow_their_masks() {
        let m = Mapping::parse("sandybridge-ddr3-1ch").unwrap();
        assert_eq!((m.controllers(), m.banks(), m.chunk_shift()), (1, 8, 13));
        assert_eq!(m.locate(1 << 13).bank, 1);
        assert_eq!(m.locate((1 << 13) | (1 << 17)).bank, 0, "13^17 cancels");
        assert_eq!(m.locate(1 << 19).bank, 4);
        let s = Mapping::parse("skylake-ddr4-2ch:granule=line").unwrap();
        assert_eq!((s.controllers(), s.banks(), s.chunk_shift()), (2, 32, 7));
        assert_eq!(s.locate(1 << 8).controller, 1);
        assert_eq!(s.locate(1 << 7).bank, 1);
        let h = Mapping::parse("haswell-ddr3-2ch:granule=line").unwrap();
        assert_eq!((h.controllers(), h.banks(), h.chunk_shift()), (2, 16, 7));
        let x = Mapping::parse("xor:bank=13^17,14^18;controller=6;granule=line").unwrap();
        assert_eq!((x.controllers(), x.banks(), x.chunk_shift()), (2, 4, 6));
        assert_eq!(
            x.locate(1 << 6),
            Location {
                controller: 1,
                bank: 0
            }
        );
        assert_eq!(
            x.locate(1 << 18),
            Location {
                controller: 0,
                bank: 2
            }
        );
    }

    #[test]
    fn page_granule_keeps_the_functions_of_page_frame_bits_only() {
        // (name, controllers, banks, dropped) with 4 KiB pages
        for (name, c, b, dropped) in [
            ("skylake-ddr4-2ch", 1, 16, 2), // 7^14 and the channel 8^9^12^.. read inside a page
            ("haswell-ddr3-2ch", 1, 16, 1),
            ("sandybridge-ddr3-1ch", 1, 8, 0),
            ("tilepro64", 4, 8, 0),
            ("zenplus-ddr4-1r", 1, 8, 1),
            ("zenplus-ddr4-2r", 1, 16, 1),
            ("zen2-ddr4-1r", 1, 8, 1),
            ("zen2-ddr4-2r", 1, 16, 1),
            ("zen3-ddr4-1r", 1, 1, 4), // bits 8-11 in every function: a page covers all 16 banks
            ("zen3-ddr4-2r", 1, 2, 4),
            ("zen4-ddr5-1r", 1, 2, 5),
            ("numa", 1, 1, 0),
        ] {
            let m = Mapping::parse(name).unwrap();
            assert_eq!(
                (m.controllers(), m.banks(), m.dropped_functions()),
                (c, b, dropped),
                "{name}"
            );
            assert!(
                m.chunk_shift() >= 12,
                "{name}: a page must lie in one (controller, bank)"
            );
            // Every byte of a page decodes to the page's location.
            for page in [0u64, 0x1234_5000, 0x3_ffff_f000] {
                let first = m.locate(page);
                assert!(
                    (0..4096).step_by(64).all(|o| m.locate(page + o) == first),
                    "{name}"
                );
            }
        }
        // The kept functions are the line-granule ones that read no bit below 12.
        let line = Mapping::parse("skylake-ddr4-2ch:granule=line").unwrap();
        let page = Mapping::parse("skylake-ddr4-2ch").unwrap();
        assert_eq!(line.locate(1 << 15).bank, 0b10);
        assert_eq!(page.locate(1 << 15).bank, 0b1);
        assert_eq!(page.locate((1 << 15) | (1 << 19)).bank, 0, "15^19 cancels");
        assert!(Mapping::parse("skylake-ddr4-2ch:granule=bank").is_err());
        assert!(Mapping::parse("zen3-ddr4-1r:granule=line").unwrap().banks() == 16);
    }

    #[test]
    fn cpu_generations_pick_their_published_function_or_numa() {
        let cpu = |v: &str, f: u32, m: u32| {
            format!("processor\t: 0\nvendor_id\t: {v}\ncpu family\t: {f}\nmodel\t\t: {m}\n")
        };
        assert_eq!(
            preset_for_cpu(&cpu("GenuineIntel", 6, 85)),
            "skylake-ddr4-2ch"
        );
        assert_eq!(
            preset_for_cpu(&cpu("AuthenticAMD", 25, 1)),
            "zen3-ddr4-1r",
            "EPYC Milan"
        );
        assert_eq!(
            preset_for_cpu(&cpu("AuthenticAMD", 25, 0x21)),
            "zen3-ddr4-1r"
        );
        assert_eq!(
            preset_for_cpu(&cpu("AuthenticAMD", 25, 0x11)),
            "zen4-ddr5-1r",
            "EPYC Genoa"
        );
        assert_eq!(
            preset_for_cpu(&cpu("AuthenticAMD", 23, 0x31)),
            "zen2-ddr4-1r",
            "EPYC Rome"
        );
        assert_eq!(
            preset_for_cpu(&cpu("AuthenticAMD", 23, 8)),
            "zenplus-ddr4-1r"
        );
        assert_eq!(
            preset_for_cpu(&cpu("AuthenticAMD", 26, 2)),
            "numa",
            "Zen 5: none published here"
        );
        assert_eq!(preset_for_cpu(&cpu("GenuineIntel", 6, 143)), "numa");
        assert_eq!(preset_for_cpu(""), "numa");
    }

    #[test]
    fn synthetic_maps_runs_of_chunks() {
        let m = Mapping::parse("synthetic:controllers=2,banks=3,chunk=4096,run=2").unwrap();
        let locs: Vec<(usize, usize)> = (0..14u64)
            .map(|i| m.locate(i << 12))
            .map(|l| (l.controller, l.bank))
            .collect();
        assert_eq!(
            &locs[..8],
            &[
                (0, 0),
                (0, 0),
                (0, 1),
                (0, 1),
                (0, 2),
                (0, 2),
                (1, 0),
                (1, 0)
            ]
        );
        assert_eq!(locs[12], (0, 0), "wraps after controllers x banks runs");
        assert_eq!(m.source(), Source::Virtual);
    }

    #[test]
    fn bad_names_are_clear_errors() {
        for spec in [
            "nonsense",
            "xor:",
            "xor:bank=13^x",
            "xor:bank=13^13",
            "xor:rank=3",
            "synthetic:banks=0",
            "synthetic:chunk=1000",
            "synthetic:banks",
            "synthetic:source=disk",
            "skylake-ddr4-2ch:banks=4",
        ] {
            let e = Mapping::parse(spec).unwrap_err().to_string();
            assert!(e.contains(spec.split(':').next().unwrap()), "{spec}: {e}");
        }
    }
}
