//! Reader of the PMPI agent's board: a node-local shared-memory file in which each MPI rank
//! on this node publishes its counters while it runs (layout: docs/pmpi.md; writer:
//! mpi/pmpi/huddle_pmpi.c). Every field is a monotone or last-value u64 written with single
//! 8-byte stores, so each value read is whole; values of different fields may be a few
//! nanoseconds apart, which deltas over a sampling window absorb.

use matrix::CommMatrix;
use serde::Serialize;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// "HUDBOARD" read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"HUDBOARD");
pub const VERSION: u64 = 1;
pub const HEADER_SIZE: usize = 128;
/// Fixed part of a slot; per-peer bytes then messages follow, world_size u64 each.
pub const SLOT_FIXED: usize = 208;
const HOSTNAME_OFFSET: usize = 144;
/// Worlds larger than this are refused as corrupt rather than mapped.
const MAX_WORLD: u64 = 1 << 20;

// Slot field indexes (u64 units), as in huddle_pmpi.c.
const S_STATE: usize = 0;
const S_PID: usize = 1;
const S_RANK: usize = 2;
const S_CPU: usize = 3;
const S_UPDATED: usize = 4;
const S_INIT: usize = 5;
const S_BLOCKING: usize = 6;
const S_COMPUTE: usize = 7;
const S_PENDING_COMPUTE: usize = 8;
const S_BLOCKING_CALLS: usize = 9;
const S_PENDING_SENDS: usize = 10;
const S_CACHE_MISSES: usize = 11;
const S_CACHE_STATE: usize = 12;
const S_SENT_BYTES: usize = 13;
const S_SENT_MSGS: usize = 14;
const S_IN_CALL: usize = 15;
const S_PHASE_START: usize = 16;
const S_PENDING_SINCE: usize = 17;

#[derive(Debug, thiserror::Error)]
pub enum BoardError {
    #[error("{path}: {reason}")]
    Io { path: String, reason: String },
    #[error("{path}: not a huddle board yet (no ranks have initialized it)")]
    NotReady { path: String },
    #[error("{path}: not a huddle PMPI board: {reason}")]
    Invalid { path: String, reason: String },
}

/// The size of one rank's slot for a world of `n` ranks.
pub fn slot_size(n: u64) -> u64 {
    (SLOT_FIXED as u64 + 16 * n + 63) & !63
}

/// The private directory the agent puts boards in: `$XDG_RUNTIME_DIR/huddle`, or
/// `/tmp/huddle-$UID` when XDG_RUNTIME_DIR is unset.
pub fn default_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(x) if !x.is_empty() && Path::new(&x).is_dir() => Path::new(&x).join("huddle"),
        _ => PathBuf::from(format!("/tmp/huddle-{}", unsafe { libc::getuid() })),
    }
}

/// Where the agent puts the board for a `HUDDLE_BOARD` value: a value with a `/` is the path
/// itself, a plain name becomes `<default_dir>/<name>.board`.
pub fn path_for(name: &str) -> PathBuf {
    if name.contains('/') {
        PathBuf::from(name)
    } else {
        default_dir().join(format!("{name}.board"))
    }
}

/// What a rank's slot says about its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotState {
    /// No rank of this world runs on this node (or it has not reached MPI_Init yet).
    Empty,
    Running,
    Finalized,
    /// The rank's process exited without calling MPI_Finalize.
    ExitedWithoutFinalize,
}

/// Whether the rank's cache-miss counter exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheCounter {
    NotTried,
    Counting,
    /// No hardware counter (VMs without a PMU), or disabled with HUDDLE_PMPI_CACHE=0.
    Unavailable,
}

/// One rank's numbers at one instant. Times are nanoseconds; `compute_ns` and
/// `pending_compute_ns` include the interval in progress.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankSlot {
    pub rank: usize,
    pub state: SlotState,
    pub pid: u32,
    /// False when the slot says running but the process is gone (it crashed or was killed).
    pub alive: bool,
    pub hostname: String,
    /// The CPU (OS index) the rank last ran on, as the agent saw it.
    pub cpu: u32,
    pub blocking_ns: u64,
    pub compute_ns: u64,
    pub pending_compute_ns: u64,
    pub blocking_calls: u64,
    pub pending_sends: u64,
    /// None where no hardware counter exists (VMs without a PMU) or it is not read yet.
    pub cache_misses: Option<u64>,
    pub cache_counter: CacheCounter,
    pub in_blocking_call: bool,
    /// CLOCK_MONOTONIC at MPI_Init and at the last update.
    pub init_ns: u64,
    pub updated_ns: u64,
    /// Totals over all peers.
    pub sent_bytes: u64,
    pub sent_msgs: u64,
    pub bytes_to: Vec<u64>,
    pub msgs_to: Vec<u64>,
}

/// All slots of a board at one instant (CLOCK_MONOTONIC `taken_ns`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Snapshot {
    pub world_size: usize,
    pub stamp: u64,
    pub taken_ns: u64,
    /// Slots of ranks that ran on this node, in rank order.
    pub ranks: Vec<RankSlot>,
}

impl Snapshot {
    /// Bytes sent, row = sender, over the world's ranks; rows of ranks on other nodes are 0.
    pub fn rank_matrix(&self) -> CommMatrix {
        let mut m = CommMatrix::zeros(self.world_size);
        for r in &self.ranks {
            for (j, &b) in r.bytes_to.iter().enumerate() {
                m.set(r.rank, j, b as f64);
            }
        }
        m
    }

    pub fn rank(&self, rank: usize) -> Option<&RankSlot> {
        self.ranks.iter().find(|r| r.rank == rank)
    }
}

/// A read-only mapping of a board file.
pub struct Board {
    path: String,
    file: File,
    ptr: *const u64,
    len: usize,
    world: usize,
    slot_words: usize,
}

// The mapping is read-only and only read with whole-u64 volatile loads.
unsafe impl Send for Board {}

impl Board {
    /// Maps the board at `path` and checks its header.
    pub fn open(path: &Path) -> Result<Board, BoardError> {
        let name = path.display().to_string();
        let io = |e: std::io::Error| BoardError::Io {
            path: name.clone(),
            reason: match e.kind() {
                std::io::ErrorKind::NotFound => {
                    "no such board (has the program called MPI_Init?)".into()
                }
                std::io::ErrorKind::PermissionDenied => {
                    "permission denied (boards are private to their user)".into()
                }
                _ => e.to_string(),
            },
        };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < HEADER_SIZE as u64 {
            return Err(BoardError::NotReady { path: name });
        }
        let mut hdr = [0u8; 48];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut hdr, 0).map_err(io)?;
        let h = |i: usize| u64::from_le_bytes(hdr[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        let invalid = |reason: String| BoardError::Invalid {
            path: name.clone(),
            reason,
        };
        if h(0) == 0 {
            return Err(BoardError::NotReady { path: name });
        }
        if h(0) != MAGIC {
            return Err(invalid("wrong magic number".into()));
        }
        if h(1) != VERSION {
            return Err(invalid(format!(
                "layout version {}, this reader knows {VERSION}",
                h(1)
            )));
        }
        let (hsize, world, ssize) = (h(2), h(3), h(4));
        if hsize != HEADER_SIZE as u64 {
            return Err(invalid(format!(
                "header size {hsize}, expected {HEADER_SIZE}"
            )));
        }
        if world == 0 || world > MAX_WORLD {
            return Err(invalid(format!("world size {world}")));
        }
        if ssize != slot_size(world) {
            return Err(invalid(format!("slot size {ssize} for {world} ranks")));
        }
        let want = HEADER_SIZE as u64 + ssize * world;
        if len != want {
            return Err(invalid(format!(
                "{len} bytes, expected {want} for {world} ranks"
            )));
        }
        // SAFETY: a fresh read-only shared mapping of a regular file of `len` bytes.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io(std::io::Error::last_os_error()));
        }
        Ok(Board {
            path: name,
            file,
            ptr: ptr as *const u64,
            len: len as usize,
            world: world as usize,
            slot_words: (ssize / 8) as usize,
        })
    }

    pub fn world_size(&self) -> usize {
        self.world
    }

    fn word(&self, index: usize) -> u64 {
        debug_assert!(index * 8 < self.len);
        // SAFETY: index is within the mapping (checked by construction of every caller) and
        // u64-aligned (mmap is page-aligned); the writer stores whole u64s.
        unsafe { std::ptr::read_volatile(self.ptr.add(index)) }
    }

    /// Reads every slot. Fails if the file was truncated since it was opened (a new job
    /// reusing the name), instead of faulting on the vanished pages.
    pub fn snapshot(&self) -> Result<Snapshot, BoardError> {
        let len = self
            .file
            .metadata()
            .map_err(|e| BoardError::Io {
                path: self.path.clone(),
                reason: e.to_string(),
            })?
            .len();
        if len as usize != self.len {
            return Err(BoardError::Invalid {
                path: self.path.clone(),
                reason: "the board was resized by another job".into(),
            });
        }
        let now = monotonic_ns();
        let mut ranks = Vec::new();
        for r in 0..self.world {
            let base = HEADER_SIZE / 8 + r * self.slot_words;
            let f = |i: usize| self.word(base + i);
            let state = match f(S_STATE) {
                1 => SlotState::Running,
                2 => SlotState::Finalized,
                3 => SlotState::ExitedWithoutFinalize,
                _ => continue,
            };
            if f(S_RANK) != r as u64 {
                continue; // a slot being initialized, or not ours
            }
            let pid = f(S_PID) as u32;
            let alive = state != SlotState::Running || pid_alive(pid);
            let in_call = f(S_IN_CALL) != 0;
            let running = state == SlotState::Running && alive;
            // Add the compute interval in progress (the writer accounts for it at the next
            // blocking call).
            let mut compute = f(S_COMPUTE);
            let mut pending_compute = f(S_PENDING_COMPUTE);
            if running && !in_call {
                compute += now.saturating_sub(f(S_PHASE_START));
                let since = f(S_PENDING_SINCE);
                if since != 0 {
                    pending_compute += now.saturating_sub(since);
                }
            }
            let words = |off: usize| (0..self.world).map(|j| f(off + j)).collect::<Vec<u64>>();
            let mut host = Vec::new();
            for i in 0..8 {
                host.extend_from_slice(&f(HOSTNAME_OFFSET / 8 + i).to_ne_bytes());
            }
            let end = host.iter().position(|&b| b == 0).unwrap_or(host.len());
            ranks.push(RankSlot {
                rank: r,
                state,
                pid,
                alive,
                hostname: String::from_utf8_lossy(&host[..end]).into_owned(),
                cpu: f(S_CPU) as u32,
                blocking_ns: f(S_BLOCKING),
                compute_ns: compute,
                pending_compute_ns: pending_compute,
                blocking_calls: f(S_BLOCKING_CALLS),
                pending_sends: f(S_PENDING_SENDS),
                cache_misses: (f(S_CACHE_STATE) == 1).then(|| f(S_CACHE_MISSES)),
                cache_counter: match f(S_CACHE_STATE) {
                    1 => CacheCounter::Counting,
                    2 => CacheCounter::Unavailable,
                    _ => CacheCounter::NotTried,
                },
                in_blocking_call: in_call,
                init_ns: f(S_INIT),
                updated_ns: f(S_UPDATED),
                sent_bytes: f(S_SENT_BYTES),
                sent_msgs: f(S_SENT_MSGS),
                bytes_to: words(SLOT_FIXED / 8),
                msgs_to: words(SLOT_FIXED / 8 + self.world),
            });
        }
        Ok(Snapshot {
            world_size: self.world,
            stamp: self.word(5),
            taken_ns: now,
            ranks,
        })
    }
}

impl Drop for Board {
    fn drop(&mut self) {
        // SAFETY: the mapping made in open, unmapped once.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the clock the agent stamps the board with.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn pid_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks existence. EPERM means it exists but is not ours.
    let rc = unsafe { libc::kill(pid as i32, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// One slot to write: rank, fixed fields, bytes to each peer, messages to each peer.
    type Fill = (usize, [u64; 18], Vec<u64>, Vec<u64>);

    /// Writes a board the way the agent lays it out, for `world` ranks with the given slots.
    pub(crate) fn write_board(path: &Path, world: u64, fill: &[Fill]) {
        let ss = slot_size(world);
        let mut buf = vec![0u8; HEADER_SIZE + (ss * world) as usize];
        fn put(buf: &mut [u8], off: usize, v: u64) {
            buf[off..off + 8].copy_from_slice(&v.to_le_bytes());
        }
        for (i, v) in [MAGIC, VERSION, HEADER_SIZE as u64, world, ss, 42, 0]
            .iter()
            .enumerate()
        {
            put(&mut buf, i * 8, *v);
        }
        for (rank, fields, bytes, msgs) in fill {
            let base = HEADER_SIZE + rank * ss as usize;
            for (i, v) in fields.iter().enumerate() {
                put(&mut buf, base + i * 8, *v);
            }
            for (j, v) in bytes.iter().enumerate() {
                put(&mut buf, base + SLOT_FIXED + j * 8, *v);
            }
            for (j, v) in msgs.iter().enumerate() {
                put(&mut buf, base + SLOT_FIXED + (world as usize + j) * 8, *v);
            }
            buf[base + HOSTNAME_OFFSET..base + HOSTNAME_OFFSET + 4].copy_from_slice(b"node");
        }
        let mut f = File::create(path).unwrap();
        f.write_all(&buf).unwrap();
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("simmer-board-{}-{name}", std::process::id()));
        d
    }

    #[test]
    fn reads_slots_matrix_and_live_compute() {
        let p = tmp("ok");
        let me = std::process::id() as u64;
        let mut f0 = [0u64; 18];
        f0[S_STATE] = 2; // finalized
        f0[S_PID] = 1;
        f0[S_BLOCKING] = 500;
        f0[S_COMPUTE] = 1500;
        f0[S_CACHE_STATE] = 2;
        let mut f2 = [0u64; 18];
        f2[S_STATE] = 1; // running, this very process, outside a blocking call
        f2[S_PID] = me;
        f2[S_RANK] = 2;
        f2[S_COMPUTE] = 10;
        f2[S_PHASE_START] = monotonic_ns();
        f2[S_CACHE_STATE] = 1;
        f2[S_CACHE_MISSES] = 777;
        write_board(
            &p,
            3,
            &[
                (0, f0, vec![0, 10, 20], vec![0, 1, 2]),
                (2, f2, vec![5, 0, 0], vec![1, 0, 0]),
            ],
        );
        let b = Board::open(&p).unwrap();
        let s = b.snapshot().unwrap();
        assert_eq!(s.world_size, 3);
        assert_eq!(s.stamp, 42);
        assert_eq!(s.ranks.len(), 2, "rank 1's empty slot is skipped");
        let r0 = s.rank(0).unwrap();
        assert_eq!(
            (r0.state, r0.blocking_ns, r0.compute_ns),
            (SlotState::Finalized, 500, 1500)
        );
        assert_eq!(r0.cache_misses, None);
        assert_eq!(r0.cache_counter, CacheCounter::Unavailable);
        assert_eq!(r0.hostname, "node");
        assert_eq!(r0.msgs_to, vec![0, 1, 2]);
        let r2 = s.rank(2).unwrap();
        assert!(r2.alive);
        assert_eq!(r2.cache_misses, Some(777));
        assert!(r2.compute_ns >= 10, "the interval in progress is added");
        let m = s.rank_matrix();
        assert_eq!(m.get(0, 2), 20.0);
        assert_eq!(m.get(2, 0), 5.0);
        assert_eq!(m.get(1, 0), 0.0);
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn dead_running_rank_is_not_alive() {
        let p = tmp("dead");
        let mut f = [0u64; 18];
        f[S_STATE] = 1;
        f[S_PID] = i32::MAX as u64 - 1; // no such process
        write_board(&p, 1, &[(0, f, vec![0], vec![0])]);
        let s = Board::open(&p).unwrap().snapshot().unwrap();
        assert!(!s.ranks[0].alive);
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn refuses_bad_files_with_reasons() {
        let p = tmp("bad");
        std::fs::write(&p, vec![0u8; 64]).unwrap();
        assert!(matches!(Board::open(&p), Err(BoardError::NotReady { .. })));
        std::fs::write(&p, vec![7u8; 256]).unwrap();
        let e = Board::open(&p).err().unwrap().to_string();
        assert!(e.contains("wrong magic"), "{e}");
        write_board(&p, 4, &[]);
        let mut bytes = std::fs::read(&p).unwrap();
        bytes.truncate(bytes.len() - 8);
        std::fs::write(&p, bytes).unwrap();
        let e = Board::open(&p).err().unwrap().to_string();
        assert!(e.contains("expected"), "{e}");
        std::fs::remove_file(&p).unwrap();
        let e = Board::open(&p).err().unwrap().to_string();
        assert!(e.contains("no such board"), "{e}");
    }

    #[test]
    fn path_rules_match_the_agent() {
        assert_eq!(path_for("/x/y.b"), PathBuf::from("/x/y.b"));
        assert!(path_for("job7").ends_with("job7.board"));
        assert_eq!(slot_size(1), 256);
        assert_eq!(slot_size(4), 320);
    }
}
