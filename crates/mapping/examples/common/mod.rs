//! What bench_mapping and speed_mapping share: the generated patterns and a CPU clock.

use mapping::Graph;

/// Generated patterns over n tasks.
pub fn pattern(name: &str, n: usize, seed: u64) -> Graph {
    let mut e = Vec::new();
    let mut s = seed;
    let mut rnd = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 33) as usize
    };
    match name {
        "ring" => (0..n).for_each(|i| e.push((i, (i + 1) % n, 10.0))),
        "distant-pairs" => (0..n / 2).for_each(|i| e.push((i, i + n / 2, 10.0))),
        "clusters" => {
            // Groups of 8 talk inside (heavily) and to the next group (lightly).
            for i in 0..n {
                for j in i + 1..((i / 8 + 1) * 8).min(n) {
                    e.push((i, j, 10.0));
                }
                e.push((i, (i + 8) % n, 1.0));
            }
        }
        _ => {
            // Random sparse: 4 random partners per task, weights 1..100.
            for i in 0..n {
                for _ in 0..4 {
                    e.push((i, rnd() % n, (1 + rnd() % 100) as f64));
                }
            }
        }
    }
    Graph::from_edges(n, &e)
}

// Each example uses one of the two clocks.
#[allow(dead_code)]
pub const PROCESS: i32 = 2; // CLOCK_PROCESS_CPUTIME_ID: all threads
#[allow(dead_code)]
pub const THREAD: i32 = 3; // CLOCK_THREAD_CPUTIME_ID: robust to other load on the machine

/// CPU time of `clock` (PROCESS or THREAD), in seconds.
pub fn cpu_seconds(clock: i32) -> f64 {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { clock_gettime(clock, &mut ts) };
    ts.sec as f64 + ts.nsec as f64 * 1e-9
}
