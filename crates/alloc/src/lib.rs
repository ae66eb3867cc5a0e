//! huddle's bank- and controller-aware allocator (the seed's "targeted allocation", chapter 2
//! of bank-aware-allocation-manycore-models.txt).
//!
//! A [`Pool`] maps and locks a region, translates every chunk to its physical address
//! (/proc/self/pagemap), decodes the memory controller and DRAM bank with a named
//! [`Mapping`], and keeps one free list per (controller, bank). Threads allocate from their
//! own bank ([`Pool::bind_thread`], [`Pool::alloc_bound`]) or with the fallbacks of [`Mode`].
//! The same API is exported to C (include/huddle/alloc.h, `pkg-config huddle-alloc`).
//! [`detect`] holds an experimental row-conflict timing detector of bank bits.

pub mod capi;
pub mod detect;
pub mod mapping;
pub mod pagemap;
pub mod pool;

use std::path::PathBuf;

pub use mapping::{Location, Mapping, Source};
pub use pool::{Mode, Pool, PoolOptions};

/// Everything that can go wrong, each naming the input or resource at fault.
#[derive(Debug, thiserror::Error)]
pub enum AllocError {
    #[error("unknown address mapping '{0}' (known: {known})", known = mapping::KNOWN)]
    UnknownMapping(String),
    #[error("address mapping '{spec}': {reason}")]
    BadMapping { spec: String, reason: String },
    #[error("{bytes} bytes cannot lie in one bank under '{mapping}': its banks change every {chunk} bytes (use granule=page, or request at most {chunk} bytes, or mode split)")]
    SpansBanks {
        bytes: usize,
        chunk: usize,
        mapping: String,
    },
    #[error("pool size {0} bytes: must be between 1 byte and 64 TiB")]
    BadSize(usize),
    #[error("{what} of {bytes} bytes failed: {source}")]
    Os {
        what: &'static str,
        bytes: usize,
        source: std::io::Error,
    },
    #[error("{}: not found; physical addresses cannot be translated without pagemap", .0.display())]
    PagemapMissing(PathBuf),
    #[error("{}: {}", .0.display(), .1)]
    PagemapIo(PathBuf, std::io::Error),
    #[error("{}: physical frame numbers are hidden; translating addresses needs CAP_SYS_ADMIN (run as root)", .0.display())]
    NoPrivilege(PathBuf),
    #[error("page at {0:#x} has no frame after locking (not present in pagemap)")]
    NotPresent(u64),
    #[error("move_pages reported node {0}, which is not an online NUMA node")]
    NodeQuery(i32),
    #[error("controller {controller}, bank {bank}: out of range (the pool has {controllers} controllers x {banks} banks)")]
    BadLocation {
        controller: i64,
        bank: i64,
        controllers: usize,
        banks: usize,
    },
    #[error("allocation mode {0}: must be 0 (exact), 1 (controller), 2 (any) or 3 (split)")]
    BadMode(i32),
    #[error("request of 0 bytes")]
    ZeroRequest,
    #[error(
        "no free memory for {bytes} bytes at controller {controller}, bank {bank} in mode {mode:?}"
    )]
    OutOfMemory {
        bytes: usize,
        controller: usize,
        bank: usize,
        mode: Mode,
    },
    #[error("address {0:#x} is not inside this pool")]
    NotInPool(usize),
    #[error("address {0:#x} is not the start of a live allocation of this pool")]
    NotAllocated(usize),
    #[error(
        "the calling thread is not bound to a bank of this pool (call huddle_bind_thread first)"
    )]
    NotBound,
    #[error("null pool or pointer argument")]
    Null,
    #[error("internal error: {0}")]
    Internal(String),
}

impl AllocError {
    /// The errno value the C API reports for this error.
    pub fn errno(&self) -> i32 {
        use AllocError::*;
        match self {
            UnknownMapping(_)
            | BadMapping { .. }
            | BadSize(_)
            | BadLocation { .. }
            | BadMode(_)
            | ZeroRequest
            | NotInPool(_)
            | NotAllocated(_)
            | Null => libc::EINVAL,
            SpansBanks { .. } => libc::ENOTSUP,
            Os { source, .. } | PagemapIo(_, source) => source.raw_os_error().unwrap_or(libc::EIO),
            PagemapMissing(_) => libc::ENOENT,
            NoPrivilege(_) => libc::EPERM,
            NotPresent(_) | NodeQuery(_) | Internal(_) => libc::EFAULT,
            OutOfMemory { .. } => libc::ENOMEM,
            NotBound => libc::ESRCH,
        }
    }
}
