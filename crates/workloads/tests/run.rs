//! Runs every pattern for real, as threads and as processes, and checks the measured ground
//! truth against the layout, the checksum's determinism, and bad input.

use workloads::{ground_truth, run, Layout, Mode, Pattern, Spec, WorkloadError, CONTENT_KEYS};

const KIB: u64 = 1024;

fn spec(p: Pattern, mode: Mode, n: usize, seconds: f64) -> Spec {
    let mut s = Spec::new(p, mode, n);
    s.seconds = seconds;
    s.region_bytes = 256 * KIB;
    s
}

/// The measured matrix must be, phase by phase, the per-round shape times the rounds run.
fn check_counts(s: &Spec, r: &workloads::Report) {
    let layout = Layout::new(s.pattern, s.tasks, s.region_bytes).unwrap();
    assert_eq!(r.phase_iterations.iter().sum::<u64>(), r.iterations);
    for (ph, m) in r.phase_matrices.iter().enumerate() {
        let per_round = workloads::moved_between_tasks(&layout.directed_per_round(ph));
        assert!(
            r.phase_iterations[ph] >= CONTENT_KEYS,
            "{}: phase {ph} ran {} rounds",
            s.pattern,
            r.phase_iterations[ph]
        );
        for i in 0..s.tasks {
            for j in 0..s.tasks {
                assert_eq!(
                    m.get(i, j),
                    per_round.get(i, j) * r.phase_iterations[ph] as f64,
                    "{} {:?} phase {ph} ({i},{j})",
                    s.pattern,
                    s.mode
                );
            }
        }
    }
    if s.pattern.communicates() {
        assert!(r.matrix.total() > 0.0);
    } else {
        assert_eq!(r.matrix.total(), 0.0, "{} moved data", s.pattern);
    }
    assert_eq!(r.read_errors, 0);
    assert_eq!(r.tids.len(), s.tasks);
    let mut tids = r.tids.clone();
    tids.sort();
    tids.dedup();
    assert_eq!(tids.len(), s.tasks, "TIDs are distinct");
    assert!(tids[0] > 0);
    assert!(r.iterations_per_second_per_task > 0.0);
    assert_eq!(
        r.iterations_per_second_total,
        r.iterations_per_second_per_task * s.tasks as f64
    );
}

fn tasks_for(p: Pattern) -> usize {
    if p == Pattern::Clusters {
        16
    } else {
        8
    }
}

#[test]
fn every_pattern_as_threads() {
    for p in Pattern::ALL {
        let s = spec(p, Mode::Threads, tasks_for(p), 0.1);
        let r = run(&s).unwrap_or_else(|e| panic!("{p}: {e}"));
        check_counts(&s, &r);
        // Threads are threads of this process, not the process itself.
        assert!(!r.tids.contains(&(std::process::id() as u64)));
    }
}

#[test]
fn every_pattern_as_processes() {
    for p in Pattern::ALL {
        let s = spec(p, Mode::Processes, tasks_for(p), 0.1);
        let r = run(&s).unwrap_or_else(|e| panic!("{p}: {e}"));
        check_counts(&s, &r);
    }
}

#[test]
fn checksum_depends_only_on_the_arguments() {
    let a = run(&spec(Pattern::Ring, Mode::Threads, 6, 0.0)).unwrap();
    // A run with more rounds than the minimum (a longer budget if this machine is slow).
    let mut seconds = 0.3;
    let b = loop {
        let b = run(&spec(Pattern::Ring, Mode::Threads, 6, seconds)).unwrap();
        if b.iterations > a.iterations || seconds > 10.0 {
            break b;
        }
        seconds *= 3.0;
    };
    let c = run(&spec(Pattern::Ring, Mode::Processes, 6, 0.2)).unwrap();
    assert!(
        b.iterations > a.iterations,
        "{} vs {}",
        b.iterations,
        a.iterations
    );
    assert_eq!(a.checksum, b.checksum);
    assert_eq!(a.checksum, c.checksum);
    assert_eq!(a.checksum.len(), 16);
    let other_pattern = run(&spec(Pattern::Pairs, Mode::Threads, 6, 0.0)).unwrap();
    assert_ne!(a.checksum, other_pattern.checksum);
    let mut bigger = spec(Pattern::Ring, Mode::Threads, 6, 0.0);
    bigger.region_bytes = 512 * KIB;
    assert_ne!(a.checksum, run(&bigger).unwrap().checksum);
    // Phase-change: where the switch falls does not matter either.
    let p1 = run(&spec(Pattern::PhaseChange, Mode::Threads, 4, 0.0)).unwrap();
    let p2 = run(&spec(Pattern::PhaseChange, Mode::Processes, 4, 0.3)).unwrap();
    assert_eq!(p1.checksum, p2.checksum);
}

#[test]
fn zero_seconds_runs_the_minimum_rounds() {
    let r = run(&spec(Pattern::Pairs, Mode::Threads, 2, 0.0)).unwrap();
    assert_eq!(r.iterations, CONTENT_KEYS);
    assert_eq!(
        r.matrix.get(0, 1),
        ground_truth(Pattern::Pairs, 2, 256 * KIB)
            .unwrap()
            .get(0, 1)
            * CONTENT_KEYS as f64
    );
}

#[test]
fn phase_change_records_the_switch() {
    let s = spec(Pattern::PhaseChange, Mode::Threads, 8, 0.4);
    let r = run(&s).unwrap();
    check_counts(&s, &r);
    let at = r.phase_switch_s.expect("phase switch time");
    assert!(
        at >= 0.2 && at < r.seconds,
        "switch at {at} of {}",
        r.seconds
    );
    assert!(r.phase_switch_monotonic_ns.unwrap() > r.start_monotonic_ns);
    // Phase 0 is pairs, phase 1 distant pairs.
    assert!(r.phase_matrices[0].get(0, 1) > 0.0 && r.phase_matrices[0].get(0, 4) == 0.0);
    assert!(r.phase_matrices[1].get(0, 4) > 0.0 && r.phase_matrices[1].get(0, 1) == 0.0);
}

#[test]
fn pinning_to_an_allowed_cpu_and_a_missing_one() {
    let mut s = spec(Pattern::Pairs, Mode::Threads, 2, 0.0);
    // Pin both tasks to a CPU this process may use.
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() }.max(0) as u32;
    s.pin = Some(vec![vec![cpu], vec![cpu]]);
    run(&s).unwrap();
    for mode in [Mode::Threads, Mode::Processes] {
        s.mode = mode;
        s.pin = Some(vec![vec![cpu], vec![1000]]);
        match run(&s) {
            Err(e @ WorkloadError::PinFailed { task: 1, .. }) => assert!(e.is_bad_input()),
            other => panic!("{mode:?}: expected a pin failure, got {other:?}"),
        }
    }
    s.pin = Some(vec![vec![cpu]]);
    let e = run(&s).unwrap_err();
    assert!(
        e.is_bad_input() && e.to_string().contains("1 locations for 2 tasks"),
        "{e}"
    );
}

#[test]
fn bad_input_is_reported_not_run() {
    let e = |s: Spec| {
        let e = run(&s).unwrap_err();
        assert!(e.is_bad_input(), "{e}");
        e.to_string()
    };
    assert!(e(spec(Pattern::Pairs, Mode::Threads, 1, 0.0)).contains("at least 2"));
    assert!(e(spec(Pattern::DistantPairs, Mode::Threads, 7, 0.0)).contains("multiple of 2"));
    assert!(e(spec(Pattern::Clusters, Mode::Processes, 12, 0.0)).contains("multiple of 8"));
    let mut s = spec(Pattern::AllToAll, Mode::Threads, 32, 0.0);
    s.region_bytes = 4096;
    assert!(e(s).contains("too small"));
    let mut s = spec(Pattern::Pairs, Mode::Threads, 2, 0.0);
    s.region_bytes = 1 << 40;
    assert!(e(s).contains("region size"));
    // 64 GiB regions pass the per-region guard but not the machine's memory.
    let mut s = spec(Pattern::MasterWorker, Mode::Threads, 64, 0.0);
    s.region_bytes = 1 << 36;
    assert!(e(s).contains("more than half"));
    for bad in [-1.0, f64::NAN, f64::INFINITY, 1e7] {
        assert!(e(spec(Pattern::Pairs, Mode::Threads, 2, bad)).contains("time budget"));
    }
}
