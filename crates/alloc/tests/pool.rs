//! Pool behaviour under injected (synthetic) address maps, which need no privilege, plus the
//! physical path where this process may read pagemap.

use std::collections::BTreeMap;
use std::path::PathBuf;

use huddle_alloc::{AllocError, Location, Mapping, Mode, Pool, PoolOptions};

fn loc(controller: usize, bank: usize) -> Location {
    Location { controller, bank }
}

fn synthetic(bytes: usize, spec: &str) -> Pool {
    Pool::with_options(bytes, Mapping::parse(spec).unwrap(), PoolOptions::default()).unwrap()
}

const FOUR_BY_EIGHT: &str = "synthetic:controllers=4,banks=8,chunk=4096";

/// Checks that every byte range of an allocation lies in `at`: by the pool's translation, and
/// for a virtual map by the mapping itself (physical ones were checked against pagemap when the
/// pool was sorted: physical_maps_sort_chunks_by_their_frames).
fn assert_in(pool: &Pool, ptr: *const u8, bytes: usize, at: Location) {
    let m = pool.mapping();
    for off in (0..bytes).step_by(pool.chunk_size()).chain([bytes - 1]) {
        let a = ptr.wrapping_add(off);
        if m.source() == huddle_alloc::Source::Virtual {
            assert_eq!(
                m.locate(a as u64),
                at,
                "byte {off} of {ptr:p} per the mapping"
            );
        }
        assert_eq!(
            pool.where_is(a).unwrap(),
            at,
            "byte {off} of {ptr:p} per where_is"
        );
    }
}

#[test]
fn exact_allocations_fill_each_bank_without_overlap_and_all_return() {
    let pool = synthetic(4 << 20, FOUR_BY_EIGHT);
    assert_eq!(
        (pool.controllers(), pool.banks(), pool.chunk_size()),
        (4, 8, 4096)
    );
    let total = pool.free_total();
    assert_eq!(total, 4 << 20);
    let mut got: Vec<(usize, usize)> = Vec::new();
    for c in 0..4 {
        for b in 0..8 {
            let before = pool.free_bytes(loc(c, b)).unwrap();
            assert_eq!(before, total / 32, "interleaved map: equal share per bank");
            let mut n = 0;
            while let Ok(p) = pool.alloc(1000, loc(c, b), Mode::Exact) {
                assert_in(&pool, p.as_ptr(), 1000, loc(c, b));
                // Writing a tag per allocation exposes any overlap below.
                unsafe { std::ptr::write_bytes(p.as_ptr(), (got.len() % 251) as u8, 4096) };
                got.push((p.as_ptr() as usize, got.len()));
                n += 1;
            }
            assert_eq!(n * 4096, before, "every chunk of ({c},{b}) handed out once");
            assert_eq!(pool.free_bytes(loc(c, b)).unwrap(), 0);
        }
    }
    assert_eq!(pool.free_total(), 0);
    let mut starts: Vec<usize> = got.iter().map(|g| g.0).collect();
    starts.sort();
    assert!(
        starts.windows(2).all(|w| w[1] - w[0] >= 4096),
        "allocations overlap"
    );
    for &(p, tag) in &got {
        assert_eq!(
            unsafe { *(p as *const u8).add(4095) },
            (tag % 251) as u8,
            "overwritten"
        );
    }
    for &(p, _) in &got {
        pool.free(p as *const u8).unwrap();
    }
    assert_eq!(pool.free_total(), total);
    for c in 0..4 {
        for b in 0..8 {
            assert_eq!(pool.free_bytes(loc(c, b)).unwrap(), total / 32);
        }
    }
}

/// Drains one (controller, bank) completely.
fn drain(pool: &Pool, at: Location) -> Vec<*mut u8> {
    let mut v = Vec::new();
    while let Ok(p) = pool.alloc(1, at, Mode::Exact) {
        v.push(p.as_ptr());
    }
    v
}

#[test]
fn modes_fall_back_in_the_documented_order() {
    let pool = synthetic(2 << 20, "synthetic:controllers=2,banks=4,chunk=4096");
    // 512 chunks, 64 per (controller, bank).
    drain(&pool, loc(0, 0));
    // Make bank 2 of controller 0 the fullest: take some from banks 1 and 3.
    for _ in 0..10 {
        pool.alloc(1, loc(0, 1), Mode::Exact).unwrap();
        pool.alloc(1, loc(0, 3), Mode::Exact).unwrap();
    }
    // 1. Exact never leaves the bank.
    let e = pool.alloc(1, loc(0, 0), Mode::Exact).unwrap_err();
    assert!(matches!(e, AllocError::OutOfMemory { .. }), "{e}");
    // 2. Controller: the requested controller's bank with the most free memory.
    let p = pool.alloc(1, loc(0, 0), Mode::Controller).unwrap();
    assert_eq!(pool.where_is(p.as_ptr()).unwrap(), loc(0, 2));
    // Drain the rest of controller 0.
    for b in 1..4 {
        drain(&pool, loc(0, b));
    }
    assert!(pool.alloc(1, loc(0, 0), Mode::Controller).is_err());
    // Controller 1: make bank 3 the fullest.
    for b in 0..3 {
        pool.alloc(1, loc(1, b), Mode::Exact).unwrap();
    }
    // 3. Any: another controller, then its fullest bank.
    let p = pool.alloc(1, loc(0, 0), Mode::Any).unwrap();
    assert_eq!(pool.where_is(p.as_ptr()).unwrap(), loc(1, 3));
    // Exact/Controller/Any cannot serve two adjacent chunks here (banks change every chunk)...
    for mode in [Mode::Exact, Mode::Controller, Mode::Any] {
        assert!(pool.alloc(8192, loc(1, 0), mode).is_err(), "{mode:?}");
    }
    // 4. ...Split can: contiguous, across banks.
    let p = pool.alloc(3 * 4096, loc(1, 0), Mode::Split).unwrap();
    let l: Vec<Location> = (0..3)
        .map(|i| pool.where_is(p.as_ptr().wrapping_add(i * 4096)).unwrap())
        .collect();
    assert!(l[0] != l[1] && l[1] != l[2], "split spans banks: {l:?}");
    assert!(pool.free(p.as_ptr()).is_ok());
}

#[test]
fn controller_mode_prefers_the_requested_bank_when_it_has_memory() {
    let pool = synthetic(1 << 20, "synthetic:controllers=2,banks=4,chunk=4096");
    for mode in [Mode::Exact, Mode::Controller, Mode::Any, Mode::Split] {
        let p = pool.alloc(100, loc(1, 2), mode).unwrap();
        assert_eq!(pool.where_is(p.as_ptr()).unwrap(), loc(1, 2), "{mode:?}");
    }
}

#[test]
fn multi_chunk_requests_stay_in_one_bank_when_the_map_has_runs() {
    let pool = synthetic(1 << 20, "synthetic:controllers=2,banks=2,chunk=4096,run=4");
    let p = pool.alloc(3 * 4096, loc(1, 1), Mode::Exact).unwrap();
    assert_in(&pool, p.as_ptr(), 3 * 4096, loc(1, 1));
    // 4-chunk runs: a 5-chunk request cannot fit one bank.
    assert!(pool.alloc(5 * 4096, loc(1, 1), Mode::Exact).is_err());
}

#[test]
fn bound_threads_allocate_in_their_own_bank() {
    let pool = synthetic(2 << 20, FOUR_BY_EIGHT);
    let e = pool.alloc_bound(64).unwrap_err();
    assert!(matches!(e, AllocError::NotBound), "{e}");
    std::thread::scope(|s| {
        for t in 0..4usize {
            let pool = &pool;
            s.spawn(move || {
                let at = loc(t, 7 - t);
                pool.bind_thread(at).unwrap();
                for _ in 0..8 {
                    let p = pool.alloc_bound(4096).unwrap();
                    assert_eq!(pool.where_is(p.as_ptr()).unwrap(), at);
                }
            });
        }
    });
    assert_eq!(pool.free_total(), (2 << 20) - 4 * 8 * 4096);
    // Rebinding replaces the old binding.
    pool.bind_thread(loc(0, 0)).unwrap();
    pool.bind_thread(loc(3, 1)).unwrap();
    assert_eq!(pool.bound(), Some(loc(3, 1)));
}

#[test]
fn bad_requests_are_errors_that_change_nothing() {
    let pool = synthetic(1 << 20, FOUR_BY_EIGHT);
    let total = pool.free_total();
    assert!(matches!(
        pool.alloc(1, loc(4, 0), Mode::Any),
        Err(AllocError::BadLocation { .. })
    ));
    assert!(matches!(
        pool.alloc(1, loc(0, 8), Mode::Any),
        Err(AllocError::BadLocation { .. })
    ));
    assert!(matches!(
        pool.alloc(0, loc(0, 0), Mode::Any),
        Err(AllocError::ZeroRequest)
    ));
    assert!(matches!(
        pool.alloc(2 << 20, loc(0, 0), Mode::Split),
        Err(AllocError::OutOfMemory { .. })
    ));
    let outside = [0u8; 8];
    assert!(matches!(
        pool.free(outside.as_ptr()),
        Err(AllocError::NotInPool(_))
    ));
    assert!(matches!(
        pool.where_is(outside.as_ptr()),
        Err(AllocError::NotInPool(_))
    ));
    let p = pool.alloc(10, loc(1, 1), Mode::Exact).unwrap();
    assert!(matches!(
        pool.free(p.as_ptr().wrapping_add(1)),
        Err(AllocError::NotAllocated(_))
    ));
    pool.free(p.as_ptr()).unwrap();
    assert!(
        matches!(pool.free(p.as_ptr()), Err(AllocError::NotAllocated(_))),
        "double free"
    );
    assert_eq!(pool.free_total(), total);
    assert!(matches!(
        Pool::new(0, Some(FOUR_BY_EIGHT)),
        Err(AllocError::BadSize(0))
    ));
    assert!(matches!(
        Pool::new(4096, Some("bogus")),
        Err(AllocError::UnknownMapping(_))
    ));
}

fn euid() -> u32 {
    unsafe { libc::geteuid() }
}

#[test]
fn missing_pagemap_is_a_clear_error() {
    let opts = PoolOptions {
        pagemap: PathBuf::from("/nonexistent/huddle/pagemap"),
        ..PoolOptions::default()
    };
    let e = Pool::with_options(1 << 20, Mapping::parse("tilepro64").unwrap(), opts).unwrap_err();
    assert!(matches!(e, AllocError::PagemapMissing(_)), "{e}");
    assert_eq!(e.to_string(), "/nonexistent/huddle/pagemap: not found; physical addresses cannot be translated without pagemap");
    // A virtual (injected) map never opens pagemap.
    let opts = PoolOptions {
        pagemap: PathBuf::from("/nonexistent/huddle/pagemap"),
        ..PoolOptions::default()
    };
    assert!(Pool::with_options(1 << 20, Mapping::parse(FOUR_BY_EIGHT).unwrap(), opts).is_ok());
}

#[test]
fn physical_maps_sort_chunks_by_their_frames() {
    for spec in [
        "tilepro64",
        "sandybridge-ddr3-1ch",
        "skylake-ddr4-2ch",
        "synthetic:controllers=2,banks=4,chunk=4096,source=physical",
    ] {
        let r = Pool::new(8 << 20, Some(spec));
        if euid() != 0 {
            let e = r.expect_err("unprivileged pagemap translation must fail");
            assert!(
                matches!(e, AllocError::NoPrivilege(_) | AllocError::Os { .. }),
                "{e}"
            );
            continue;
        }
        let pool = r.unwrap_or_else(|e| panic!("{spec}: {e}"));
        let m = Mapping::parse(spec).unwrap();
        assert_eq!(
            pool.chunk_size(),
            (1usize << m.chunk_shift()).min(4096),
            "{spec}"
        );
        // Cross-check each chunk against an independent pagemap read.
        let pm = huddle_alloc::pagemap::Pagemap::open(std::path::Path::new("/proc/self/pagemap"))
            .unwrap();
        let phys = pm
            .physical_pages(pool.base() as u64, pool.len() / 4096)
            .unwrap();
        let mut per_list: BTreeMap<Location, usize> = BTreeMap::new();
        for (i, pa) in phys.iter().enumerate() {
            for off in (0..4096).step_by(pool.chunk_size()) {
                let l = m.locate(pa + off as u64);
                assert_eq!(
                    pool.where_is(pool.base().wrapping_add(i * 4096 + off))
                        .unwrap(),
                    l,
                    "{spec}"
                );
                *per_list.entry(l).or_default() += pool.chunk_size();
            }
        }
        for (l, bytes) in &per_list {
            assert_eq!(pool.free_bytes(*l).unwrap(), *bytes, "{spec} {l:?}");
        }
        // Locked pages stay where they were.
        assert_eq!(pool.verify_placement().unwrap(), 0, "{spec}");
    }
}

/// Re-runs this test binary as user `nobody`; the child creates a physical pool.
/// Every size class (1 byte, a cache line, half a chunk, a chunk, a page where a page fits in a
/// chunk) at every (controller, bank) that holds a free chunk: served exactly there.
fn every_size_at_every_bank(pool: &Pool, name: &str) {
    let chunk = pool.chunk_size();
    let mut sizes = vec![1, 64, chunk / 2, chunk];
    if chunk >= 4096 {
        sizes.push(4096);
    }
    let mut served = 0;
    for c in 0..pool.controllers() {
        for b in 0..pool.banks() {
            let at = loc(c, b);
            if pool.free_bytes(at).unwrap() < chunk {
                continue;
            }
            for &bytes in sizes.iter().filter(|&&n| n > 0) {
                let p = pool
                    .alloc(bytes, at, Mode::Exact)
                    .unwrap_or_else(|e| panic!("{name}: {bytes} B at {at:?}: {e}"));
                assert_in(pool, p.as_ptr(), bytes, at);
                pool.free(p.as_ptr()).unwrap();
                served += 1;
            }
        }
    }
    assert!(
        served >= sizes.len(),
        "{name}: no (controller, bank) held a free chunk"
    );
}

#[test]
fn every_size_class_is_served_at_every_bank() {
    for spec in [
        FOUR_BY_EIGHT,
        "synthetic:controllers=2,banks=4,chunk=8192",
        "synthetic:controllers=1,banks=16,chunk=65536,run=2",
    ] {
        every_size_at_every_bank(&synthetic(8 << 20, spec), spec);
    }
    if euid() != 0 {
        eprintln!("physical mappings: not root, pagemap hides frames (covered by the test above)");
        return;
    }
    // The published mappings at their default (page) granule, from physical frames.
    for spec in [
        "tilepro64",
        "sandybridge-ddr3-1ch",
        "haswell-ddr3-2ch",
        "skylake-ddr4-2ch",
        "zenplus-ddr4-2r",
        "zen2-ddr4-1r",
        "zen3-ddr4-2r",
        "zen4-ddr5-1r",
        "numa",
    ] {
        let pool = Pool::new(16 << 20, Some(spec)).unwrap_or_else(|e| panic!("{spec}: {e}"));
        assert_eq!(pool.chunk_size(), 4096, "{spec}");
        every_size_at_every_bank(&pool, spec);
    }
}

#[test]
fn a_block_wider_than_a_line_granule_is_refused_with_the_reason() {
    if euid() != 0 {
        eprintln!("not root: pagemap hides frames");
        return;
    }
    let pool = Pool::new(4 << 20, Some("skylake-ddr4-2ch:granule=line")).unwrap();
    assert_eq!(pool.chunk_size(), 128);
    every_size_at_every_bank(&pool, "skylake-ddr4-2ch:granule=line");
    let e = pool.alloc(4096, loc(0, 0), Mode::Exact).unwrap_err();
    assert!(
        matches!(e, AllocError::SpansBanks { chunk: 128, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("granule=page"), "{e}");
    // Split still serves it, across banks.
    let p = pool.alloc(4096, loc(0, 0), Mode::Split).unwrap();
    pool.free(p.as_ptr()).unwrap();
}

#[test]
fn unprivileged_process_gets_a_clear_error() {
    if euid() != 0 {
        let e = Pool::new(1 << 20, Some("tilepro64")).expect_err("must fail without privilege");
        assert!(e.to_string().contains("CAP_SYS_ADMIN"), "{e}");
        return;
    }
    use std::os::unix::process::CommandExt;
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "child_creates_a_physical_pool",
            "--nocapture",
        ])
        .env("HUDDLE_ALLOC_CHILD", "1")
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("CHILD-ERROR: /proc/self/pagemap: physical frame numbers are hidden; translating addresses needs CAP_SYS_ADMIN"),
        "child output: {text}"
    );
}

#[test]
#[ignore = "helper: run by unprivileged_process_gets_a_clear_error as user nobody"]
fn child_creates_a_physical_pool() {
    assert_eq!(
        std::env::var("HUDDLE_ALLOC_CHILD").as_deref(),
        Ok("1"),
        "run only as the helper"
    );
    match Pool::new(1 << 20, Some("tilepro64")) {
        Ok(_) => println!("CHILD-OK"),
        Err(e) => println!("CHILD-ERROR: {e}"),
    }
}
