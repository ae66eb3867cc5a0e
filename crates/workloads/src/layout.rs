//! Where every task writes and reads: the shared regions of each phase, cut into slots.
//!
//! A region is shared by a pair or a group of tasks. It holds one slot per writer in each of
//! two buffers (round r uses buffer r % 2, so a round's writes never overwrite data that a
//! partner may still be reading from the round before). Slots start on page boundaries and are
//! whole pages, so a page has exactly one writer, except in `false-sharing`, where up to
//! page/256 writers each own a 256 B block of every page of the region.

use crate::{Pattern, WorkloadError, CLUSTER_SIZE};
use matrix::CommMatrix;

/// Block size of `false-sharing`: the detection granularity it is meant to resolve.
pub const FALSE_SHARING_BLOCK: usize = 256;

/// Largest region accepted (per pair or group), a guard against typos like `--bytes 4T`.
pub const MAX_REGION_BYTES: u64 = 1 << 36;

/// What one writer produces each round and who reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Slot {
    /// Unique over the whole layout; seeds the slot's content.
    pub id: usize,
    pub writer: usize,
    pub readers: Vec<usize>,
    /// Byte offset of the slot in the data mapping, for buffer 0 and buffer 1.
    pub base: [usize; 2],
    /// The slot is `pieces` runs of `chunk` bytes, `stride` bytes apart.
    pub chunk: usize,
    pub stride: usize,
    pub pieces: usize,
}

impl Slot {
    /// Bytes written (and read by each reader) per round.
    pub fn bytes(&self) -> usize {
        self.chunk * self.pieces
    }
}

/// The slots of one phase of a pattern.
#[derive(Clone, Debug)]
pub struct Phase {
    pub pattern: Pattern,
    pub slots: Vec<Slot>,
    /// Number of shared regions in this phase.
    pub regions: usize,
}

/// The whole data mapping of a workload.
#[derive(Clone, Debug)]
pub struct Layout {
    pub pattern: Pattern,
    pub tasks: usize,
    /// Requested size of each region (pair or group), in bytes.
    pub region_bytes: u64,
    pub page: usize,
    pub phases: Vec<Phase>,
    /// Length of the data mapping in bytes.
    pub total: usize,
}

impl Layout {
    pub fn new(pattern: Pattern, tasks: usize, region_bytes: u64) -> Result<Layout, WorkloadError> {
        Layout::with_page(pattern, tasks, region_bytes, page_size())
    }

    /// As [`Layout::new`] with an explicit page size (tests use it to be machine-independent).
    pub fn with_page(
        pattern: Pattern,
        tasks: usize,
        region_bytes: u64,
        page: usize,
    ) -> Result<Layout, WorkloadError> {
        pattern.check_tasks(tasks)?;
        if region_bytes > MAX_REGION_BYTES {
            return Err(WorkloadError::Bytes {
                bytes: region_bytes,
                reason: format!("more than {MAX_REGION_BYTES} bytes per region"),
            });
        }
        let mut b = Builder {
            page,
            region_pages: region_bytes as usize / page,
            region_bytes,
            offset: 0,
            next_id: 0,
        };
        let mut phases = Vec::new();
        for p in pattern.phases() {
            phases.push(b.phase(p, tasks)?);
        }
        Ok(Layout {
            pattern,
            tasks,
            region_bytes,
            page,
            phases,
            total: b.offset,
        })
    }

    /// Directed bytes per round of phase `phase`: entry (w, r) is what reader r reads of
    /// writer w's data each round (the diagonal is a task reading its own data).
    pub fn directed_per_round(&self, phase: usize) -> CommMatrix {
        let mut m = CommMatrix::zeros(self.tasks);
        for s in &self.phases[phase].slots {
            for &r in &s.readers {
                m.add(s.writer, r, s.bytes() as f64);
            }
        }
        m
    }
}

/// Bytes moved between two different tasks, both directions added, zero diagonal: the
/// ground-truth form written to ground-truth.csv.
pub fn moved_between_tasks(directed: &CommMatrix) -> CommMatrix {
    let n = directed.n();
    let mut m = CommMatrix::zeros(n);
    for i in 0..n {
        for j in 0..n {
            if i != j {
                m.set(i, j, directed.get(i, j) + directed.get(j, i));
            }
        }
    }
    m
}

/// The ground truth's shape: bytes moved per pair in one round of each phase, for `tasks`
/// tasks and regions of `region_bytes`. A run's matrix is this per phase times its rounds.
pub fn ground_truth(
    pattern: Pattern,
    tasks: usize,
    region_bytes: u64,
) -> Result<CommMatrix, WorkloadError> {
    let layout = Layout::new(pattern, tasks, region_bytes)?;
    let mut total = CommMatrix::zeros(tasks);
    for ph in 0..layout.phases.len() {
        let m = moved_between_tasks(&layout.directed_per_round(ph));
        for i in 0..tasks {
            for j in 0..tasks {
                total.add(i, j, m.get(i, j));
            }
        }
    }
    Ok(total)
}

pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

struct Builder {
    page: usize,
    region_pages: usize,
    region_bytes: u64,
    offset: usize,
    next_id: usize,
}

impl Builder {
    fn too_small(&self, pattern: Pattern, pages: usize, why: &str) -> WorkloadError {
        WorkloadError::Bytes {
            bytes: self.region_bytes,
            reason: format!(
                "too small: {pattern} needs at least {} bytes per region ({why})",
                pages * self.page
            ),
        }
    }

    /// A region where each writer owns whole pages, `writers.len()` slots per buffer.
    fn region(
        &mut self,
        pattern: Pattern,
        writers: &[(usize, Vec<usize>)],
        slots: &mut Vec<Slot>,
    ) -> Result<(), WorkloadError> {
        let per_slot = self.region_pages / (2 * writers.len());
        if per_slot == 0 {
            return Err(self.too_small(
                pattern,
                2 * writers.len(),
                "one page per writer in each of two buffers",
            ));
        }
        let chunk = per_slot * self.page;
        let half = writers.len() * chunk;
        for (k, (writer, readers)) in writers.iter().enumerate() {
            let base = self.offset + k * chunk;
            slots.push(Slot {
                id: self.next_id,
                writer: *writer,
                readers: readers.clone(),
                base: [base, base + half],
                chunk,
                stride: chunk,
                pieces: 1,
            });
            self.next_id += 1;
        }
        self.offset += 2 * half;
        Ok(())
    }

    fn pair(
        &mut self,
        pattern: Pattern,
        a: usize,
        b: usize,
        slots: &mut Vec<Slot>,
    ) -> Result<(), WorkloadError> {
        self.region(pattern, &[(a, vec![b]), (b, vec![a])], slots)
    }

    fn group(
        &mut self,
        pattern: Pattern,
        members: &[usize],
        slots: &mut Vec<Slot>,
    ) -> Result<(), WorkloadError> {
        let writers: Vec<(usize, Vec<usize>)> = members
            .iter()
            .map(|&w| (w, members.iter().copied().filter(|&r| r != w).collect()))
            .collect();
        self.region(pattern, &writers, slots)
    }

    /// Up to page/256 tasks per region, each writing (and reading back) its own 256 B block
    /// of every page: pages are shared, blocks are not.
    fn false_sharing(
        &mut self,
        pattern: Pattern,
        tasks: usize,
        slots: &mut Vec<Slot>,
    ) -> Result<(), WorkloadError> {
        let half_pages = self.region_pages / 2;
        if half_pages == 0 {
            return Err(self.too_small(pattern, 2, "one page in each of two buffers"));
        }
        let per_region = (self.page / FALSE_SHARING_BLOCK).max(1);
        let half = half_pages * self.page;
        for first in (0..tasks).step_by(per_region) {
            for t in first..(first + per_region).min(tasks) {
                let base = self.offset + (t - first) * FALSE_SHARING_BLOCK;
                slots.push(Slot {
                    id: self.next_id,
                    writer: t,
                    readers: vec![t],
                    base: [base, base + half],
                    chunk: FALSE_SHARING_BLOCK,
                    stride: self.page,
                    pieces: half_pages,
                });
                self.next_id += 1;
            }
            self.offset += 2 * half;
        }
        Ok(())
    }

    fn phase(&mut self, pattern: Pattern, n: usize) -> Result<Phase, WorkloadError> {
        let mut slots = Vec::new();
        let start = self.offset;
        let mut regions = 0;
        match pattern {
            Pattern::Pairs => {
                for a in (0..n).step_by(2) {
                    self.pair(pattern, a, a + 1, &mut slots)?;
                    regions += 1;
                }
            }
            Pattern::DistantPairs => {
                for a in 0..n / 2 {
                    self.pair(pattern, a, a + n / 2, &mut slots)?;
                    regions += 1;
                }
            }
            Pattern::Ring => {
                // With two tasks both neighbours are the same task: one region.
                let links = if n == 2 { 1 } else { n };
                for a in 0..links {
                    self.pair(pattern, a, (a + 1) % n, &mut slots)?;
                    regions += 1;
                }
            }
            Pattern::Clusters => {
                for first in (0..n).step_by(CLUSTER_SIZE) {
                    let members: Vec<usize> = (first..first + CLUSTER_SIZE).collect();
                    self.group(pattern, &members, &mut slots)?;
                    regions += 1;
                }
            }
            Pattern::AllToAll => {
                let members: Vec<usize> = (0..n).collect();
                self.group(pattern, &members, &mut slots)?;
                regions += 1;
            }
            Pattern::Pipeline => {
                for a in 0..n - 1 {
                    self.region(pattern, &[(a, vec![a + 1])], &mut slots)?;
                    regions += 1;
                }
            }
            Pattern::MasterWorker => {
                for w in 1..n {
                    self.pair(pattern, 0, w, &mut slots)?;
                    regions += 1;
                }
            }
            Pattern::Private => {
                for t in 0..n {
                    self.region(pattern, &[(t, vec![t])], &mut slots)?;
                    regions += 1;
                }
            }
            Pattern::FalseSharing => {
                self.false_sharing(pattern, n, &mut slots)?;
                regions = n.div_ceil((self.page / FALSE_SHARING_BLOCK).max(1));
            }
            Pattern::PhaseChange => unreachable!("phase-change is split into its phases"),
        }
        debug_assert!(self.offset >= start);
        Ok(Phase {
            pattern,
            slots,
            regions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;
    const MIB: u64 = 1 << 20;

    fn shape(p: Pattern, n: usize) -> CommMatrix {
        let l = Layout::with_page(p, n, 4 * MIB, PAGE).unwrap();
        let mut total = CommMatrix::zeros(n);
        for ph in 0..l.phases.len() {
            let m = moved_between_tasks(&l.directed_per_round(ph));
            for i in 0..n {
                for j in 0..n {
                    total.add(i, j, m.get(i, j));
                }
            }
        }
        total
    }

    /// The set of partners with non-zero traffic.
    fn partners(m: &CommMatrix, i: usize) -> Vec<usize> {
        (0..m.n()).filter(|&j| m.get(i, j) > 0.0).collect()
    }

    #[test]
    fn distant_pairs_partner_is_i_plus_half() {
        for n in [2, 8, 32] {
            let m = shape(Pattern::DistantPairs, n);
            for i in 0..n {
                assert_eq!(partners(&m, i), vec![(i + n / 2) % n], "n={n} i={i}");
            }
            // Each pair region of 4 MiB: two buffers, one 1 MiB slot per direction.
            assert_eq!(m.get(0, n / 2), 2.0 * MIB as f64);
        }
    }

    #[test]
    fn pairs_ring_pipeline_master_worker_shapes() {
        let m = shape(Pattern::Pairs, 8);
        for i in 0..8 {
            assert_eq!(partners(&m, i), vec![i ^ 1]);
        }
        let m = shape(Pattern::Ring, 8);
        for i in 0..8usize {
            let mut want = vec![(i + 7) % 8, (i + 1) % 8];
            want.sort();
            assert_eq!(partners(&m, i), want);
            assert_eq!(m.get(i, (i + 1) % 8), 2.0 * MIB as f64);
        }
        assert_eq!(partners(&shape(Pattern::Ring, 2), 0), vec![1]);
        let l = Layout::with_page(Pattern::Pipeline, 8, 4 * MIB, PAGE).unwrap();
        let d = l.directed_per_round(0);
        for w in 0..8 {
            for r in 0..8 {
                let want = if r == w + 1 { 2.0 * MIB as f64 } else { 0.0 };
                assert_eq!(d.get(w, r), want, "pipeline {w}->{r}");
            }
        }
        let m = shape(Pattern::MasterWorker, 8);
        assert_eq!(partners(&m, 0), (1..8).collect::<Vec<_>>());
        for w in 1..8 {
            assert_eq!(partners(&m, w), vec![0]);
        }
    }

    #[test]
    fn clusters_and_all_to_all_are_uniform_inside_groups() {
        let m = shape(Pattern::Clusters, 16);
        for i in 0..16 {
            let want: Vec<usize> = (0..16).filter(|&j| j != i && j / 8 == i / 8).collect();
            assert_eq!(partners(&m, i), want);
        }
        let w = m.get(0, 1);
        assert!(w > 0.0 && (0..8).all(|j| j == 3 || m.get(3, j) == w));
        let m = shape(Pattern::AllToAll, 6);
        let w = m.get(0, 1);
        for i in 0..6 {
            for j in 0..6 {
                assert_eq!(m.get(i, j), if i == j { 0.0 } else { w });
            }
        }
    }

    #[test]
    fn private_and_false_sharing_move_nothing() {
        for p in [Pattern::Private, Pattern::FalseSharing] {
            for n in [2, 17, 32] {
                assert_eq!(shape(p, n).total(), 0.0, "{p} n={n}");
            }
        }
        // False sharing: 16 writers per 4 KiB page, each in its own 256 B block.
        let l = Layout::with_page(Pattern::FalseSharing, 32, 4 * MIB, PAGE).unwrap();
        let s = &l.phases[0].slots;
        assert_eq!(s.len(), 32);
        assert_eq!(s[0].base[0] / PAGE, s[15].base[0] / PAGE);
        assert_ne!(s[0].base[0] / PAGE, s[16].base[0] / PAGE);
        assert_eq!(s[5].base[0] % PAGE, 5 * 256);
        assert_eq!(s[5].pieces, 512);
    }

    #[test]
    fn phase_change_is_pairs_then_distant_pairs() {
        let l = Layout::with_page(Pattern::PhaseChange, 8, 4 * MIB, PAGE).unwrap();
        assert_eq!(l.phases.len(), 2);
        let a = moved_between_tasks(&l.directed_per_round(0));
        let b = moved_between_tasks(&l.directed_per_round(1));
        assert_eq!(partners(&a, 2), vec![3]);
        assert_eq!(partners(&b, 2), vec![6]);
    }

    #[test]
    fn slots_never_overlap_and_are_page_aligned() {
        for p in Pattern::ALL {
            let n = if p == Pattern::Clusters { 16 } else { 12 };
            let l = Layout::with_page(p, n, 256 * 1024, PAGE).unwrap();
            let mut used = vec![false; l.total];
            for ph in &l.phases {
                for s in &ph.slots {
                    if p != Pattern::FalseSharing {
                        assert_eq!(s.base[0] % PAGE, 0, "{p}");
                        assert_eq!(s.chunk % PAGE, 0, "{p}");
                    }
                    for base in s.base {
                        for k in 0..s.pieces {
                            let at = base + k * s.stride;
                            for b in &mut used[at..at + s.chunk] {
                                assert!(!*b, "{p}: overlap at {at}");
                                *b = true;
                            }
                        }
                    }
                }
            }
        }
    }

    proptest::proptest! {
        /// For every pattern and task count it accepts: the ground truth is symmetric with a
        /// zero diagonal, every task of a communicating pattern has a partner, and every byte
        /// a reader reads was written by a slot's writer in that phase.
        #[test]
        fn shapes_are_consistent(pick in 0usize..10, n in 1usize..40, pages in 16usize..300) {
            let p = Pattern::ALL[pick];
            proptest::prop_assume!(p.check_tasks(n).is_ok());
            let l = match Layout::with_page(p, n, (pages * PAGE) as u64, PAGE) {
                Ok(l) => l,
                Err(e) => {
                    proptest::prop_assert!(e.to_string().contains("too small"), "{}", e);
                    return Ok(());
                }
            };
            let m = shape(p, n);
            for i in 0..n {
                proptest::prop_assert_eq!(m.get(i, i), 0.0);
                for j in 0..n {
                    proptest::prop_assert_eq!(m.get(i, j), m.get(j, i));
                }
                if p.communicates() {
                    proptest::prop_assert!(!partners(&m, i).is_empty(), "{} n={} task {} alone", p, n, i);
                }
            }
            for (ph, phase) in l.phases.iter().enumerate() {
                let d = l.directed_per_round(ph);
                let written: f64 = phase.slots.iter().map(|s| (s.bytes() * s.readers.len()) as f64).sum();
                let read: f64 = (0..n).flat_map(|w| (0..n).map(move |r| (w, r))).map(|(w, r)| d.get(w, r)).sum();
                proptest::prop_assert_eq!(written, read);
                proptest::prop_assert!(l.total >= phase.slots.iter().map(|s| s.base[1] + (s.pieces - 1) * s.stride + s.chunk).max().unwrap_or(0));
            }
        }
    }

    #[test]
    fn region_size_is_checked() {
        let e = Layout::with_page(Pattern::AllToAll, 32, 64 * 1024, PAGE)
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least 262144 bytes"), "{e}");
        assert!(Layout::with_page(Pattern::Pairs, 2, 1 << 40, PAGE).is_err());
        assert!(Layout::with_page(Pattern::Pairs, 2, 4 * PAGE as u64, PAGE).is_ok());
    }
}
