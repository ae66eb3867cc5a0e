//! The pool: one locked mapping, walked in chunks, each chunk on the free list of the
//! (controller, bank) its physical address decodes to.
//!
//! Fallback order (each mode includes the steps of the ones before it, as Algorithm 1 of the
//! seed does when its mode mask holds all the lower modes):
//!
//! 1. `Exact`: the requested (controller, bank) only.
//! 2. `Controller`: then the other banks of the requested controller, most free memory first.
//! 3. `Any`: then the other controllers, most free memory first, and within each its banks,
//!    most free memory first.
//! 4. `Split`: then the first run of contiguous free chunks anywhere, across banks and
//!    controllers.
//!
//! A request larger than one chunk needs that many adjacent chunks in one list; with a
//! hardware mapping whose bank changes every chunk only `Split` can serve it (the seed's
//! restriction: "a contiguous allocation within a bank cannot be more than 8 kB").
//! The list links live beside the pool, not inside the chunks, so the allocator never touches
//! (and never pulls into cache) the memory it hands out.

use std::collections::HashMap;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::mapping::{Location, Mapping, Source};
use crate::pagemap::{page_size, Pagemap};
use crate::AllocError;

/// Allocation modes, in fallback order (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    Exact = 0,
    Controller = 1,
    Any = 2,
    Split = 3,
}

impl TryFrom<i32> for Mode {
    type Error = AllocError;
    fn try_from(v: i32) -> Result<Mode, AllocError> {
        match v {
            0 => Ok(Mode::Exact),
            1 => Ok(Mode::Controller),
            2 => Ok(Mode::Any),
            3 => Ok(Mode::Split),
            _ => Err(AllocError::BadMode(v)),
        }
    }
}

/// Knobs that tests and benchmarks need; the defaults are what production wants.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// Where virtual -> physical translations are read (tests point it at a missing file).
    pub pagemap: PathBuf,
    /// Lock the pool's pages (mlock). Without it the kernel may swap or move them.
    pub lock: bool,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            pagemap: PathBuf::from("/proc/self/pagemap"),
            lock: true,
        }
    }
}

const NIL: u32 = u32::MAX;
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// (pool id, location) per pool this thread is bound in.
    static BINDINGS: std::cell::RefCell<Vec<(u64, Location)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A bank- and controller-aware pool.
pub struct Pool {
    base: NonNull<u8>,
    /// Bytes handed to mmap (aligned start may sit after `map_base`).
    map_base: NonNull<u8>,
    map_len: usize,
    len: usize,
    chunk: usize,
    controllers: usize,
    banks: usize,
    mapping: Mapping,
    options: PoolOptions,
    nodes: Vec<u32>,
    id: u64,
    state: Mutex<State>,
}

// SAFETY: the raw pointers name a private mapping owned by the pool; every mutable bookkeeping
// access goes through the mutex.
unsafe impl Send for Pool {}
unsafe impl Sync for Pool {}

/// Free lists as index-linked doubly linked lists (one per (controller, bank)).
struct State {
    list_of: Vec<u32>,
    next: Vec<u32>,
    prev: Vec<u32>,
    head: Vec<u32>,
    free: Vec<bool>,
    free_chunks: Vec<usize>,
    /// Start chunk -> chunk count of every live allocation.
    live: HashMap<usize, usize>,
}

impl State {
    fn new(list_of: Vec<u32>, lists: usize) -> State {
        let n = list_of.len();
        let mut s = State {
            list_of,
            next: vec![NIL; n],
            prev: vec![NIL; n],
            head: vec![NIL; lists],
            free: vec![false; n],
            free_chunks: vec![0; lists],
            live: HashMap::new(),
        };
        // Pushing in reverse leaves every list in address order.
        for i in (0..n).rev() {
            s.push(i);
        }
        s
    }

    fn push(&mut self, i: usize) {
        let l = self.list_of[i] as usize;
        let h = self.head[l];
        self.next[i] = h;
        self.prev[i] = NIL;
        if h != NIL {
            self.prev[h as usize] = i as u32;
        }
        self.head[l] = i as u32;
        self.free[i] = true;
        self.free_chunks[l] += 1;
    }

    fn unlink(&mut self, i: usize) {
        let l = self.list_of[i] as usize;
        let (p, n) = (self.prev[i], self.next[i]);
        if p == NIL {
            self.head[l] = n;
        } else {
            self.next[p as usize] = n;
        }
        if n != NIL {
            self.prev[n as usize] = p;
        }
        self.next[i] = NIL;
        self.prev[i] = NIL;
        self.free[i] = false;
        self.free_chunks[l] -= 1;
    }

    fn claim(&mut self, start: usize, k: usize) -> usize {
        for i in start..start + k {
            self.unlink(i);
        }
        self.live.insert(start, k);
        start
    }

    /// `k` adjacent free chunks that all belong to list `l`.
    fn take_from_list(&mut self, l: usize, k: usize) -> Option<usize> {
        if self.free_chunks[l] < k {
            return None;
        }
        let mut i = self.head[l];
        while i != NIL {
            let s = i as usize;
            let fits = s + k <= self.free.len()
                && (s..s + k).all(|j| self.free[j] && self.list_of[j] as usize == l);
            if fits {
                return Some(self.claim(s, k));
            }
            i = self.next[s];
        }
        None
    }

    /// First run of `k` adjacent free chunks, wherever they lie.
    fn take_contiguous(&mut self, k: usize) -> Option<usize> {
        let mut run = 0;
        for i in 0..self.free.len() {
            run = if self.free[i] { run + 1 } else { 0 };
            if run == k {
                return Some(self.claim(i + 1 - k, k));
            }
        }
        None
    }
}

/// 0..n ordered by `free` descending; ties keep index order (the seed's availability queues).
fn most_free_first(n: usize, free: impl Fn(usize) -> usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    v.sort_by_key(|&x| std::cmp::Reverse(free(x)));
    v
}

fn os_error(what: &'static str, bytes: usize) -> AllocError {
    AllocError::Os {
        what,
        bytes,
        source: std::io::Error::last_os_error(),
    }
}

/// Online NUMA nodes, from sysfs ("0-3,5"); [0] when sysfs has no node directory (or a
/// list it cannot read).
fn online_nodes() -> Vec<u32> {
    let text = std::fs::read_to_string("/sys/devices/system/node/online").unwrap_or_default();
    match cpuset::NodeSet::parse_list(&text) {
        Ok(nodes) if !nodes.is_empty() => nodes.to_vec(),
        _ => vec![0],
    }
}

/// Interleave the (not yet touched) range over `nodes`: MPOL_INTERLEAVE through mbind(2).
fn interleave(addr: *mut u8, len: usize, nodes: &[u32]) -> Result<(), AllocError> {
    const MPOL_INTERLEAVE: libc::c_long = 3;
    let max = nodes.iter().copied().max().unwrap_or(0) as usize + 1;
    let mut mask = vec![0u64; max.div_ceil(64)];
    for &n in nodes {
        mask[n as usize / 64] |= 1 << (n % 64);
    }
    // SAFETY: addr/len is our own fresh mapping; the mask outlives the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr,
            len,
            MPOL_INTERLEAVE,
            mask.as_ptr(),
            (mask.len() * 64) as libc::c_ulong,
            0 as libc::c_uint,
        )
    };
    if rc != 0 {
        return Err(os_error("mbind(MPOL_INTERLEAVE)", len));
    }
    Ok(())
}

/// NUMA node of each page, asked with move_pages(2) and no target nodes (a pure query).
fn page_nodes(addr: *mut u8, pages: usize, page: usize) -> Result<Vec<i32>, AllocError> {
    let ptrs: Vec<*mut libc::c_void> = (0..pages)
        .map(|i| addr.wrapping_add(i * page).cast())
        .collect();
    let mut status = vec![0i32; pages];
    // SAFETY: the arrays have `pages` entries; a NULL node list makes this a query.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0,
            pages as libc::c_ulong,
            ptrs.as_ptr(),
            std::ptr::null::<i32>(),
            status.as_mut_ptr(),
            0,
        )
    };
    if rc != 0 {
        return Err(os_error("move_pages (node query)", pages * page));
    }
    Ok(status)
}

impl Pool {
    /// A pool of at least `bytes` bytes under the named mapping (None: this machine's).
    pub fn new(bytes: usize, mapping: Option<&str>) -> Result<Pool, AllocError> {
        let mapping = match mapping {
            Some(s) => Mapping::parse(s)?,
            None => Mapping::for_this_machine()?,
        };
        Pool::with_options(bytes, mapping, PoolOptions::default())
    }

    /// A pool with explicit options.
    pub fn with_options(
        bytes: usize,
        mapping: Mapping,
        options: PoolOptions,
    ) -> Result<Pool, AllocError> {
        let page = page_size();
        let mut chunk = 1usize << mapping.chunk_shift();
        if mapping.source() == Source::Physical {
            // Physical contiguity is only known inside a page: each page is placed on its own.
            chunk = chunk.min(page);
        }
        let unit = chunk.max(page);
        if bytes == 0 || bytes > (1usize << 46) {
            return Err(AllocError::BadSize(bytes));
        }
        let len = bytes.div_ceil(unit) * unit;
        if len / chunk >= NIL as usize {
            return Err(AllocError::BadSize(bytes));
        }
        let map_len = len + if chunk > page { chunk } else { 0 };
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(os_error("mmap", map_len));
        }
        let map_base = NonNull::new(map.cast::<u8>()).ok_or(AllocError::BadSize(bytes))?;
        let skew = (chunk - (map as usize % chunk)) % chunk;
        let mut pool = Pool {
            base: NonNull::new(map_base.as_ptr().wrapping_add(skew)).unwrap_or(map_base),
            map_base,
            map_len,
            len,
            chunk,
            controllers: 0,
            banks: mapping.banks(),
            mapping,
            options,
            nodes: online_nodes(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            state: Mutex::new(State::new(Vec::new(), 0)),
        };
        // From here on, Drop unmaps on every error path.
        pool.controllers = pool.nodes.len() * pool.mapping.controllers();
        let base = pool.base.as_ptr();
        // SAFETY (all three): the range is our own mapping.
        if unsafe { libc::madvise(base.cast(), len, libc::MADV_NOHUGEPAGE) } != 0 {
            return Err(os_error("madvise(MADV_NOHUGEPAGE)", len));
        }
        if pool.nodes.len() > 1 {
            interleave(base, len, &pool.nodes)?;
        }
        if pool.options.lock {
            if unsafe { libc::mlock(base.cast(), len) } != 0 {
                return Err(os_error("mlock", len));
            }
        } else {
            // Fault every page in so that it has a frame to translate.
            unsafe { std::ptr::write_bytes(base, 0, len) };
        }
        let placement = pool.classify()?;
        let lists = pool.controllers * pool.banks;
        let list_of = placement
            .iter()
            .map(|l| (l.controller * pool.banks + l.bank) as u32)
            .collect();
        pool.state = Mutex::new(State::new(list_of, lists));
        Ok(pool)
    }

    /// (controller, bank) of every chunk, freshly translated.
    fn classify(&self) -> Result<Vec<Location>, AllocError> {
        let page = page_size();
        let chunks = self.len / self.chunk;
        let base = self.base.as_ptr();
        let mc = self.mapping.controllers();
        let node_index = |node: i32| -> Result<usize, AllocError> {
            self.nodes
                .iter()
                .position(|&n| n as i32 == node)
                .ok_or(AllocError::NodeQuery(node))
        };
        let pages = self.len / page;
        let nodes: Vec<usize> = if self.nodes.len() > 1 {
            page_nodes(base, pages, page)?
                .into_iter()
                .map(node_index)
                .collect::<Result<_, _>>()?
        } else {
            vec![0; pages]
        };
        let place = |node: usize, addr: u64| {
            let l = self.mapping.locate(addr);
            Location {
                controller: node * mc + l.controller % mc,
                bank: l.bank % self.banks,
            }
        };
        match self.mapping.source() {
            Source::Virtual => Ok((0..chunks)
                .map(|i| {
                    let va = base as u64 + (i * self.chunk) as u64;
                    place(nodes[i * self.chunk / page], va)
                })
                .collect()),
            Source::Physical => {
                let pm = Pagemap::open(&self.options.pagemap)?;
                let mut out = Vec::with_capacity(chunks);
                // Translate in batches of 4096 pages (32 KiB of pagemap per read).
                for first in (0..pages).step_by(4096) {
                    let n = (pages - first).min(4096);
                    let phys = pm.physical_pages(base as u64 + (first * page) as u64, n)?;
                    for (j, pa) in phys.into_iter().enumerate() {
                        for off in (0..page).step_by(self.chunk) {
                            out.push(place(nodes[first + j], pa + off as u64));
                        }
                    }
                }
                Ok(out)
            }
        }
    }

    /// Re-translates every chunk and counts those whose (controller, bank) changed since the
    /// pool was built (0 while the pages stay locked in place).
    pub fn verify_placement(&self) -> Result<usize, AllocError> {
        let now = self.classify()?;
        let st = self.lock();
        Ok(now
            .iter()
            .zip(&st.list_of)
            .filter(|(l, &o)| (l.controller * self.banks + l.bank) as u32 != o)
            .count())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // No code path panics while holding the lock; recover the guard rather than propagate.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Controllers: NUMA nodes x the mapping's controllers.
    pub fn controllers(&self) -> usize {
        self.controllers
    }

    /// Banks per controller.
    pub fn banks(&self) -> usize {
        self.banks
    }

    /// Bytes in one chunk (the allocation granule).
    pub fn chunk_size(&self) -> usize {
        self.chunk
    }

    /// Pool size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a pool has at least one chunk.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapping the pool sorts by.
    pub fn mapping(&self) -> &Mapping {
        &self.mapping
    }

    /// Start of the pool's memory.
    pub fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    fn check(&self, at: Location) -> Result<usize, AllocError> {
        if at.controller >= self.controllers || at.bank >= self.banks {
            return Err(AllocError::BadLocation {
                controller: at.controller as i64,
                bank: at.bank as i64,
                controllers: self.controllers,
                banks: self.banks,
            });
        }
        Ok(at.controller * self.banks + at.bank)
    }

    /// Free bytes at one (controller, bank).
    pub fn free_bytes(&self, at: Location) -> Result<usize, AllocError> {
        let l = self.check(at)?;
        Ok(self.lock().free_chunks[l] * self.chunk)
    }

    /// Free bytes in the whole pool.
    pub fn free_total(&self) -> usize {
        self.lock().free_chunks.iter().sum::<usize>() * self.chunk
    }

    /// `bytes` bytes at `at`, falling back as `mode` allows.
    pub fn alloc(&self, bytes: usize, at: Location, mode: Mode) -> Result<NonNull<u8>, AllocError> {
        let want = self.check(at)?;
        if bytes == 0 {
            return Err(AllocError::ZeroRequest);
        }
        let k = bytes.div_ceil(self.chunk);
        let mut st = self.lock();
        let mut got = st.take_from_list(want, k);
        if got.is_none() && mode >= Mode::Controller {
            let c = at.controller;
            let banks = most_free_first(self.banks, |b| st.free_chunks[c * self.banks + b]);
            for b in banks {
                let l = c * self.banks + b;
                if l != want {
                    got = st.take_from_list(l, k);
                    if got.is_some() {
                        break;
                    }
                }
            }
        }
        if got.is_none() && mode >= Mode::Any {
            let ctrls = most_free_first(self.controllers, |c| {
                st.free_chunks[c * self.banks..(c + 1) * self.banks]
                    .iter()
                    .sum()
            });
            'outer: for c in ctrls.into_iter().filter(|&c| c != at.controller) {
                let banks = most_free_first(self.banks, |b| st.free_chunks[c * self.banks + b]);
                for b in banks {
                    got = st.take_from_list(c * self.banks + b, k);
                    if got.is_some() {
                        break 'outer;
                    }
                }
            }
        }
        if got.is_none() && mode >= Mode::Split {
            got = st.take_contiguous(k);
        }
        match got {
            Some(i) => Ok(
                NonNull::new(self.base.as_ptr().wrapping_add(i * self.chunk)).unwrap_or(self.base),
            ),
            // Blocks of a line-granule mapping change bank inside a page: say so, not "no memory".
            None if k > 1 && self.chunk < page_size() && mode < Mode::Split => {
                Err(AllocError::SpansBanks {
                    bytes,
                    chunk: self.chunk,
                    mapping: self.mapping.name().to_string(),
                })
            }
            None => Err(AllocError::OutOfMemory {
                bytes,
                controller: at.controller,
                bank: at.bank,
                mode,
            }),
        }
    }

    fn chunk_of(&self, ptr: *const u8) -> Result<usize, AllocError> {
        let off = (ptr as usize).wrapping_sub(self.base.as_ptr() as usize);
        if off >= self.len {
            return Err(AllocError::NotInPool(ptr as usize));
        }
        Ok(off / self.chunk)
    }

    /// Returns an allocation's chunks to their lists.
    pub fn free(&self, ptr: *const u8) -> Result<(), AllocError> {
        let i = self.chunk_of(ptr)?;
        let mut st = self.lock();
        let k = match st.live.get(&i) {
            Some(&k) if i * self.chunk == ptr as usize - self.base.as_ptr() as usize => k,
            _ => return Err(AllocError::NotAllocated(ptr as usize)),
        };
        st.live.remove(&i);
        for j in i..i + k {
            st.push(j);
        }
        Ok(())
    }

    /// (controller, bank) of any address inside the pool.
    pub fn where_is(&self, ptr: *const u8) -> Result<Location, AllocError> {
        let i = self.chunk_of(ptr)?;
        let l = self.lock().list_of[i] as usize;
        Ok(Location {
            controller: l / self.banks,
            bank: l % self.banks,
        })
    }

    /// Binds the calling thread to `at`: its [`Pool::alloc_bound`] calls land there.
    pub fn bind_thread(&self, at: Location) -> Result<(), AllocError> {
        self.check(at)?;
        BINDINGS.with(|b| {
            let mut b = b.borrow_mut();
            b.retain(|(id, _)| *id != self.id);
            b.push((self.id, at));
        });
        Ok(())
    }

    /// The calling thread's binding in this pool.
    pub fn bound(&self) -> Option<Location> {
        BINDINGS.with(|b| {
            b.borrow()
                .iter()
                .find(|(id, _)| *id == self.id)
                .map(|(_, l)| *l)
        })
    }

    /// `bytes` bytes in the calling thread's bank, exactly there (mode `Exact`).
    pub fn alloc_bound(&self, bytes: usize) -> Result<NonNull<u8>, AllocError> {
        let at = self.bound().ok_or(AllocError::NotBound)?;
        self.alloc(bytes, at, Mode::Exact)
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("base", &self.base)
            .field("len", &self.len)
            .field("chunk", &self.chunk)
            .field("controllers", &self.controllers)
            .field("banks", &self.banks)
            .field("mapping", &self.mapping.name())
            .finish()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        BINDINGS.with(|b| b.borrow_mut().retain(|(id, _)| *id != self.id));
        // SAFETY: the mapping is ours; munmap also drops the lock.
        unsafe { libc::munmap(self.map_base.as_ptr().cast(), self.map_len) };
    }
}
