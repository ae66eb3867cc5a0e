//! Software page-fault events from perf_event_open, read from per-CPU mmap'd ring buffers.
//!
//! Two scopes. Per task: one event per (task, CPU) with `inherit`, so threads and children
//! created later report into the same per-CPU buffers; any user may open it on their own
//! processes. System-wide: one event per CPU for every process (needs CAP_PERFMON or
//! kernel.perf_event_paranoid <= 0); the session keeps what comes from the program's process
//! tree. Per-task events are switched in and out with their tasks, and that costs a program
//! that changes context often (MPI ranks that yield while they wait): 4 threads calling
//! sched_yield ran 14 % slower under per-task events and 0.6 % faster (noise) under per-CPU
//! ones (bench/perfcost, median of 15 pairs). So the session asks for system-wide first.
//! Period 1: every fault is a sample with TID, TIME, ADDR, CPU. FORK/EXIT/COMM records tell
//! us about tasks; LOST records are counted, never hidden.

use perf_event_open_sys as sys;
use std::io;
use std::sync::atomic::{fence, Ordering};
use sys::bindings as b;

/// One record from a ring buffer, decoded.
#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    /// A page fault by `tid` (in process `pid`) at `addr`; `time` is CLOCK_MONOTONIC ns.
    Fault {
        /// Process id of the faulting task.
        pid: u32,
        /// Thread id of the faulting task.
        tid: u32,
        /// When it faulted, CLOCK_MONOTONIC ns.
        time: u64,
        /// The faulting virtual address, byte-precise.
        addr: u64,
        /// The CPU (OS index) it faulted on.
        cpu: u32,
    },
    /// A task was created: a thread when `pid == ppid`, else a process whose parent is
    /// `ppid` (perf_event_open(2)).
    Fork {
        /// Process id of the new task (for a thread, the process it joins).
        pid: u32,
        /// Process id of the creating process.
        ppid: u32,
        /// Thread id of the new task.
        tid: u32,
        /// When it was created, CLOCK_MONOTONIC ns.
        time: u64,
    },
    /// A task ended.
    Exit {
        /// Process id of the task.
        pid: u32,
        /// Thread id of the task.
        tid: u32,
        /// When it ended, CLOCK_MONOTONIC ns.
        time: u64,
    },
    /// A task got a new name (exec or prctl).
    Comm {
        /// Process id of the task.
        pid: u32,
        /// Thread id of the task.
        tid: u32,
        /// When it was renamed, CLOCK_MONOTONIC ns.
        time: u64,
        /// The new name (at most 15 bytes, lossy UTF-8).
        comm: String,
    },
    /// The kernel dropped `lost` records because the buffer was full.
    Lost {
        /// Records lost (also added to [`PerfSource::lost`]).
        lost: u64,
    },
}

/// Why a perf source could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    /// perf_event_open refused with EACCES or EPERM: a missing privilege.
    #[error(
        "perf_event_open on pid {pid} cpu {cpu}: {err} (kernel.perf_event_paranoid = {paranoid}; \
         needs CAP_PERFMON or CAP_SYS_ADMIN, or paranoid <= 2 for user-space-only events)"
    )]
    Permission {
        /// The thread id the event was for; -1 for every process (system-wide).
        pid: i32,
        /// The CPU (OS index) the event was for.
        cpu: i32,
        /// The error perf_event_open returned.
        err: io::Error,
        /// kernel.perf_event_paranoid as read (see [`paranoid_level`]).
        paranoid: String,
    },
    /// perf_event_open or PERF_EVENT_IOC_SET_OUTPUT failed otherwise; ESRCH when every task was
    /// already gone (pid and cpu -1 when none was given).
    #[error("perf_event_open on pid {pid} cpu {cpu}: {err}")]
    Open {
        /// The thread id the event was for; -1 for every process (system-wide).
        pid: i32,
        /// The CPU (OS index) the event was for.
        cpu: i32,
        /// The error the call returned.
        err: io::Error,
    },
    /// The ring buffer could not be mapped.
    #[error("mmap of the perf ring buffer ({bytes} bytes): {err}")]
    Mmap {
        /// Length asked for: one control page plus the data pages.
        bytes: usize,
        /// The error mmap returned.
        err: io::Error,
    },
}

impl PerfError {
    /// The task exited before its event could be opened.
    fn is_gone(&self) -> bool {
        matches!(self, PerfError::Open { err, .. } if err.raw_os_error() == Some(libc::ESRCH))
    }
}

/// The contents of /proc/sys/kernel/perf_event_paranoid, for messages.
pub fn paranoid_level() -> String {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown (no /proc/sys/kernel/perf_event_paranoid)".into())
}

/// What the events sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sampled {
    /// Every page fault (sample_period 1): the detector's input.
    PageFaults,
    /// Nothing: a dummy event whose only records are the tasks starting, exiting and being
    /// named, for a task table without paying for a record per fault (`--source mpi`).
    TasksOnly,
}

/// The event description: page faults, or the dummy event (task records only).
fn attr(
    sampled: Sampled,
    exclude_kernel: bool,
    enable_on_exec: bool,
    inherit: bool,
    wakeup_bytes: u32,
) -> b::perf_event_attr {
    // SAFETY: perf_event_attr is plain old data; all-zero is its documented default.
    let mut a: b::perf_event_attr = unsafe { std::mem::zeroed() };
    a.type_ = b::PERF_TYPE_SOFTWARE;
    a.size = std::mem::size_of::<b::perf_event_attr>() as u32;
    a.config = match sampled {
        Sampled::PageFaults => b::PERF_COUNT_SW_PAGE_FAULTS,
        Sampled::TasksOnly => b::PERF_COUNT_SW_DUMMY,
    } as u64;
    a.__bindgen_anon_1.sample_period = 1;
    a.sample_type =
        (b::PERF_SAMPLE_TID | b::PERF_SAMPLE_TIME | b::PERF_SAMPLE_ADDR | b::PERF_SAMPLE_CPU)
            as u64;
    a.set_disabled(1);
    a.set_inherit(inherit as u64);
    a.set_task(1);
    a.set_comm(1);
    a.set_comm_exec(1);
    a.set_sample_id_all(1);
    a.set_exclude_kernel(exclude_kernel as u64);
    a.set_exclude_hv(1);
    a.set_enable_on_exec(enable_on_exec as u64);
    a.set_use_clockid(1);
    a.clockid = libc::CLOCK_MONOTONIC;
    a.set_watermark(1);
    a.__bindgen_anon_2.wakeup_watermark = wakeup_bytes;
    a
}

/// One per-CPU ring buffer (and the event fd that owns it).
struct Ring {
    fd: i32,
    base: *mut u8,
    len: usize,
    data_size: u64,
}

// SAFETY: the ring is only touched through &mut self; the mapping lives as long as Ring.
unsafe impl Send for Ring {}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: base/len come from a successful mmap; fd from perf_event_open.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len);
            libc::close(self.fd);
        }
    }
}

/// All rings of one perf source, plus what it has seen.
pub struct PerfSource {
    rings: Vec<Ring>,
    /// Each online CPU and the index of its mapped ring, for tasks added later.
    cpu_rings: Vec<(i32, usize)>,
    /// The event description (kept for tasks added later).
    attr: b::perf_event_attr,
    /// Records the kernel reported as lost.
    pub lost: u64,
    /// Whether faults taken in kernel mode (inside system calls) are excluded.
    pub exclude_kernel: bool,
    /// One event per CPU for every process: the reader keeps its program's records.
    pub system_wide: bool,
    /// What the events sample.
    pub sampled: Sampled,
    scratch: Vec<u8>,
}

/// Online CPUs, as perf wants them (by OS index); all that sysconf counts when sysfs does
/// not say.
pub fn online_cpus() -> Vec<i32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    match cpuset::CpuSet::parse_list(&text) {
        Ok(cpus) if !cpus.is_empty() => cpus.iter().map(|c| c as i32).collect(),
        _ => {
            // SAFETY: sysconf has no memory-safety preconditions.
            let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1);
            (0..n as i32).collect()
        }
    }
}

impl PerfSource {
    /// Opens the page-fault event on each of `tids` (inherit follows their future children),
    /// one ring per CPU; every further (tid, CPU) event writes into that CPU's ring.
    /// `enable_on_exec`: counting starts when the (stopped, not yet exec'd) task execs.
    /// Tries with kernel-mode faults first and falls back to user-only events on EACCES.
    pub fn open(
        tids: &[i32],
        enable_on_exec: bool,
        ring_pages: usize,
        sampled: Sampled,
    ) -> Result<PerfSource, PerfError> {
        match Self::open_with(tids, enable_on_exec, ring_pages, sampled, false) {
            Err(PerfError::Permission { .. }) => {
                Self::open_with(tids, enable_on_exec, ring_pages, sampled, true)
            }
            r => r,
        }
    }

    fn open_with(
        tids: &[i32],
        enable_on_exec: bool,
        ring_pages: usize,
        sampled: Sampled,
        exclude_kernel: bool,
    ) -> Result<PerfSource, PerfError> {
        let page = page_size();
        let pages = ring_pages.max(1).next_power_of_two();
        let data_bytes = pages * page;
        let mut src = PerfSource {
            rings: Vec::new(),
            cpu_rings: Vec::new(),
            attr: attr(
                sampled,
                exclude_kernel,
                enable_on_exec,
                true,
                (data_bytes / 4) as u32,
            ),
            lost: 0,
            exclude_kernel,
            system_wide: false,
            sampled,
            scratch: Vec::new(),
        };
        let mut last_err = None;
        for cpu in online_cpus() {
            // The CPU's ring belongs to the first task that can still be opened; a task that
            // exited since it was listed (ESRCH) is skipped.
            for (k, &tid) in tids.iter().enumerate() {
                let fd = match src.open_event(tid, cpu) {
                    Ok(fd) => fd,
                    Err(e) if e.is_gone() => {
                        last_err = Some(e);
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                src.map_ring(fd, cpu, data_bytes)?;
                src.add_on(&tids[k + 1..], cpu, src.rings.len() - 1, false)?;
                break;
            }
        }
        if src.cpu_rings.is_empty() {
            return Err(last_err.unwrap_or(PerfError::Open {
                pid: -1,
                cpu: -1,
                err: io::Error::from_raw_os_error(libc::ESRCH),
            }));
        }
        if !enable_on_exec {
            src.enable();
        }
        Ok(src)
    }

    /// Opens the page-fault event for every process on every CPU, one ring each, enabled.
    /// Fails with [`PerfError::Permission`] without CAP_PERFMON (or CAP_SYS_ADMIN) where
    /// kernel.perf_event_paranoid > 0.
    pub fn open_system_wide(ring_pages: usize, sampled: Sampled) -> Result<PerfSource, PerfError> {
        let page = page_size();
        let pages = ring_pages.max(1).next_power_of_two();
        let data_bytes = pages * page;
        let mut src = PerfSource {
            rings: Vec::new(),
            cpu_rings: Vec::new(),
            attr: attr(sampled, false, false, false, (data_bytes / 4) as u32),
            lost: 0,
            exclude_kernel: false,
            system_wide: true,
            sampled,
            scratch: Vec::new(),
        };
        for cpu in online_cpus() {
            let fd = src.open_event(-1, cpu)?;
            src.map_ring(fd, cpu, data_bytes)?;
        }
        src.enable();
        Ok(src)
    }

    /// Maps `fd`'s ring (one control page and `data_bytes`) as CPU `cpu`'s ring; closes
    /// `fd` when that fails.
    fn map_ring(&mut self, fd: i32, cpu: i32, data_bytes: usize) -> Result<(), PerfError> {
        let len = data_bytes + page_size();
        // SAFETY: mapping a perf fd as documented: 1 + 2^n pages, shared.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            let err = io::Error::last_os_error();
            // SAFETY: fd is ours.
            unsafe { libc::close(fd) };
            return Err(PerfError::Mmap { bytes: len, err });
        }
        self.rings.push(Ring {
            fd,
            base: base as *mut u8,
            len,
            data_size: data_bytes as u64,
        });
        self.cpu_rings.push((cpu, self.rings.len() - 1));
        Ok(())
    }

    /// Opens the event of `tid` on `cpu` (not mapped, disabled).
    fn open_event(&mut self, tid: i32, cpu: i32) -> Result<i32, PerfError> {
        // SAFETY: `attr` is a valid, fully initialised attribute struct.
        let fd = unsafe {
            sys::perf_event_open(
                &mut self.attr,
                tid,
                cpu,
                -1,
                b::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
            )
        };
        if fd >= 0 {
            return Ok(fd);
        }
        let err = io::Error::last_os_error();
        Err(match err.raw_os_error() {
            Some(libc::EACCES) | Some(libc::EPERM) => PerfError::Permission {
                pid: tid,
                cpu,
                err,
                paranoid: paranoid_level(),
            },
            _ => PerfError::Open { pid: tid, cpu, err },
        })
    }

    /// Opens the events of `tids` on `cpu`, their records sent into ring `ring`; tasks that
    /// are gone are skipped. Returns how many were added.
    fn add_on(
        &mut self,
        tids: &[i32],
        cpu: i32,
        ring: usize,
        enable: bool,
    ) -> Result<usize, PerfError> {
        let mut added = 0;
        for &tid in tids {
            let fd = match self.open_event(tid, cpu) {
                Ok(fd) => fd,
                Err(e) if e.is_gone() => continue,
                Err(e) => return Err(e),
            };
            // Same CPU, another task: send its records into the CPU's ring.
            // SAFETY: both fds are valid perf events on the same CPU.
            if unsafe { sys::ioctls::SET_OUTPUT(fd, self.rings[ring].fd) } < 0 {
                let err = io::Error::last_os_error();
                // SAFETY: fd is ours.
                unsafe { libc::close(fd) };
                return Err(PerfError::Open { pid: tid, cpu, err });
            }
            if enable {
                // SAFETY: fd is a perf event fd we own.
                unsafe { sys::ioctls::ENABLE(fd, 0) };
            }
            // An unmapped entry: it only keeps the fd open until drop.
            self.rings.push(Ring {
                fd,
                base: std::ptr::null_mut(),
                len: 0,
                data_size: 0,
            });
            added += 1;
        }
        Ok(added)
    }

    /// Starts following tasks found after the source was opened (attach: threads or
    /// processes that appeared before their creator was followed). Tasks already gone are
    /// skipped; returns how many (task, CPU) events were added.
    pub fn add(&mut self, tids: &[i32]) -> Result<usize, PerfError> {
        let mut added = 0;
        for (cpu, ring) in self.cpu_rings.clone() {
            added += self.add_on(tids, cpu, ring, true)?;
        }
        Ok(added)
    }

    /// Starts counting on every event (for attach; spawn uses enable-on-exec).
    pub fn enable(&self) {
        for r in &self.rings {
            // SAFETY: r.fd is a perf event fd we own.
            unsafe { sys::ioctls::ENABLE(r.fd, 0) };
        }
    }

    /// The fds to wait on (readable when a ring passes its watermark or a task exits).
    pub fn fds(&self) -> Vec<i32> {
        self.rings
            .iter()
            .filter(|r| r.len > 0)
            .map(|r| r.fd)
            .collect()
    }

    /// Decodes every record now in the rings and hands it to `f`; returns how many.
    pub fn drain(&mut self, mut f: impl FnMut(Record)) -> u64 {
        let mut n = 0;
        for i in 0..self.rings.len() {
            if self.rings[i].len == 0 {
                continue;
            }
            n += self.drain_ring(i, &mut f);
        }
        n
    }

    fn drain_ring(&mut self, i: usize, f: &mut impl FnMut(Record)) -> u64 {
        let page = page_size();
        let ring = &self.rings[i];
        let meta = ring.base as *mut b::perf_event_mmap_page;
        let data = unsafe { ring.base.add(page) };
        let size = ring.data_size;
        // SAFETY: meta points at the mapped control page; data_head is written by the
        // kernel, so read it volatile and fence before reading the data it covers.
        let head = unsafe { std::ptr::read_volatile(&(*meta).data_head) };
        fence(Ordering::Acquire);
        let mut tail = unsafe { std::ptr::read_volatile(&(*meta).data_tail) };
        let mut n = 0;
        while tail + 8 <= head {
            let mut hdr = [0u8; 8];
            copy_ring(data, size, tail, &mut hdr);
            let typ = u32::from_ne_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
            let len = u16::from_ne_bytes([hdr[6], hdr[7]]) as u64;
            if len < 8 || tail + len > head {
                break;
            }
            self.scratch.resize(len as usize, 0);
            copy_ring(data, size, tail, &mut self.scratch);
            if let Some(rec) = decode(typ, &self.scratch[8..]) {
                if let Record::Lost { lost } = rec {
                    self.lost += lost;
                }
                f(rec);
                n += 1;
            }
            tail += len;
        }
        fence(Ordering::Release);
        // SAFETY: tells the kernel how far we have read; only we write data_tail.
        unsafe { std::ptr::write_volatile(&mut (*meta).data_tail, tail) };
        n
    }
}

/// The system page size in bytes (sysconf `_SC_PAGESIZE`).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// Copies `out.len()` bytes starting at ring offset `pos`, wrapping at the end.
fn copy_ring(data: *const u8, size: u64, pos: u64, out: &mut [u8]) {
    let start = (pos % size) as usize;
    let first = out.len().min(size as usize - start);
    // SAFETY: both ranges lie inside the data area of `size` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(data.add(start), out.as_mut_ptr(), first);
        std::ptr::copy_nonoverlapping(data, out.as_mut_ptr().add(first), out.len() - first);
    }
}

fn u32_at(b: &[u8], i: usize) -> Option<u32> {
    b.get(i..i + 4)
        .map(|s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_at(b: &[u8], i: usize) -> Option<u64> {
    let s = b.get(i..i + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(u64::from_ne_bytes(a))
}

/// Decodes a record body (after the 8-byte header). Sample layout for
/// TID|TIME|ADDR|CPU: pid, tid, time, addr, cpu, res. Other records end in the
/// sample_id fields TID, TIME, CPU (sample_id_all).
pub fn decode(typ: u32, body: &[u8]) -> Option<Record> {
    match typ {
        b::PERF_RECORD_SAMPLE => Some(Record::Fault {
            pid: u32_at(body, 0)?,
            tid: u32_at(body, 4)?,
            time: u64_at(body, 8)?,
            addr: u64_at(body, 16)?,
            cpu: u32_at(body, 24)?,
        }),
        b::PERF_RECORD_FORK => Some(Record::Fork {
            pid: u32_at(body, 0)?,
            ppid: u32_at(body, 4)?,
            tid: u32_at(body, 8)?,
            time: u64_at(body, 16)?,
        }),
        b::PERF_RECORD_EXIT => Some(Record::Exit {
            pid: u32_at(body, 0)?,
            tid: u32_at(body, 8)?,
            time: u64_at(body, 16)?,
        }),
        b::PERF_RECORD_COMM => {
            // The name is NUL-padded to 8 bytes; sample_id (TID, TIME, CPU) follows.
            let time = u64_at(body, body.len().checked_sub(16)?)?;
            let name = body.get(8..body.len().checked_sub(24)?)?;
            let end = name
                .iter()
                .position(|&c| c == 0)
                .unwrap_or(name.len().min(16));
            Some(Record::Comm {
                pid: u32_at(body, 0)?,
                tid: u32_at(body, 4)?,
                time,
                comm: String::from_utf8_lossy(&name[..end]).into_owned(),
            })
        }
        b::PERF_RECORD_LOST => Some(Record::Lost {
            lost: u64_at(body, 8)?,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_or_truncated_records_decode_to_none_never_a_panic() {
        for typ in [
            b::PERF_RECORD_SAMPLE,
            b::PERF_RECORD_FORK,
            b::PERF_RECORD_EXIT,
            b::PERF_RECORD_COMM,
            b::PERF_RECORD_LOST,
        ] {
            for len in 0..24 {
                let body = vec![0u8; len];
                let _ = decode(typ, &body);
            }
        }
        // A COMM record of 16 to 23 bytes has room for the time but not for a name.
        assert!(decode(b::PERF_RECORD_COMM, &[0u8; 20]).is_none());
        // pid, tid, "ab" padded to 8, then sample_id (tid, time, cpu).
        let mut comm = Vec::new();
        comm.extend(7u32.to_ne_bytes());
        comm.extend(8u32.to_ne_bytes());
        comm.extend(*b"ab\0\0\0\0\0\0");
        comm.extend(8u64.to_ne_bytes());
        comm.extend(99u64.to_ne_bytes());
        comm.extend(0u64.to_ne_bytes());
        match decode(b::PERF_RECORD_COMM, &comm) {
            Some(Record::Comm { pid, tid, comm, .. }) => {
                assert_eq!((pid, tid, comm.as_str()), (7, 8, "ab"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_dummy_event_keeps_the_task_records_and_samples_nothing() {
        let faults = attr(Sampled::PageFaults, false, true, true, 4096);
        assert_eq!(faults.config, b::PERF_COUNT_SW_PAGE_FAULTS as u64);
        // SAFETY: sample_period is the member this module sets.
        assert_eq!(unsafe { faults.__bindgen_anon_1.sample_period }, 1);
        let tasks = attr(Sampled::TasksOnly, false, true, true, 4096);
        assert_eq!(tasks.config, b::PERF_COUNT_SW_DUMMY as u64);
        for a in [faults, tasks] {
            assert_eq!(a.type_, b::PERF_TYPE_SOFTWARE);
            assert_eq!((a.task(), a.comm(), a.inherit()), (1, 1, 1));
        }
    }
}
