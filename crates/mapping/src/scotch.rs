//! libscotch's SCOTCH_graphMap, the reference mapper, through a thin FFI to
//! /usr/include/scotch/scotch.h (Debian libscotch-dev 7.0.3, SCOTCH_Num = int).
//!
//! The target is the same tree the other algorithms see: a `tleaf` architecture when the
//! tree is regular, otherwise a decomposition-defined architecture built (SCOTCH_archBuild0)
//! from a weighted tree graph whose leaf-to-leaf path lengths grow with the level costs.
//! Scotch may leave a slot doubly used; such tasks move to the nearest free slot, so the
//! mapping stays valid. Its cost is then measured by huddle's model like any other.

use crate::arch::{Arch, LEAF};
use crate::{Graph, MapError};
use std::ffi::c_void;
use std::os::raw::c_int;
use std::sync::Mutex;

type Num = c_int;

#[link(name = "scotch")]
extern "C" {
    fn SCOTCH_graphAlloc() -> *mut c_void;
    fn SCOTCH_graphInit(g: *mut c_void) -> c_int;
    fn SCOTCH_graphExit(g: *mut c_void);
    #[allow(clippy::too_many_arguments)]
    fn SCOTCH_graphBuild(
        g: *mut c_void,
        baseval: Num,
        vertnbr: Num,
        verttab: *const Num,
        vendtab: *const Num,
        velotab: *const Num,
        vlbltab: *const Num,
        edgenbr: Num,
        edgetab: *const Num,
        edlotab: *const Num,
    ) -> c_int;
    fn SCOTCH_archAlloc() -> *mut c_void;
    fn SCOTCH_archInit(a: *mut c_void) -> c_int;
    fn SCOTCH_archExit(a: *mut c_void);
    fn SCOTCH_archTleaf(
        a: *mut c_void,
        levlnbr: Num,
        sizetab: *const Num,
        linktab: *const Num,
    ) -> c_int;
    fn SCOTCH_archBuild0(
        a: *mut c_void,
        g: *const c_void,
        listnbr: Num,
        listtab: *const Num,
        strat: *const c_void,
    ) -> c_int;
    fn SCOTCH_stratAlloc() -> *mut c_void;
    fn SCOTCH_stratInit(s: *mut c_void) -> c_int;
    fn SCOTCH_stratExit(s: *mut c_void);
    fn SCOTCH_stratGraphMapBuild(s: *mut c_void, flags: Num, partnbr: Num, kbal: f64) -> c_int;
    fn SCOTCH_graphMap(
        g: *mut c_void,
        a: *const c_void,
        s: *mut c_void,
        parttab: *mut Num,
    ) -> c_int;
    fn SCOTCH_randomSeed(seed: Num);
    fn SCOTCH_randomReset();
    fn SCOTCH_memFree(p: *mut c_void);
}

const STRAT_QUALITY: Num = 0x1;

/// Scotch keeps global state (random generator, error handler): one call at a time.
static LOCK: Mutex<()> = Mutex::new(());

/// Scotch objects freed on drop, whatever path returns.
struct Owned {
    ptr: *mut c_void,
    exit: unsafe extern "C" fn(*mut c_void),
}

impl Owned {
    fn new(
        alloc: unsafe extern "C" fn() -> *mut c_void,
        init: unsafe extern "C" fn(*mut c_void) -> c_int,
        exit: unsafe extern "C" fn(*mut c_void),
        what: &str,
    ) -> Result<Owned, MapError> {
        // SAFETY: the alloc/init pair of one Scotch object type, checked before use.
        let ptr = unsafe { alloc() };
        if ptr.is_null() {
            return Err(MapError::Scotch(format!("cannot allocate a {what}")));
        }
        if unsafe { init(ptr) } != 0 {
            unsafe { SCOTCH_memFree(ptr) };
            return Err(MapError::Scotch(format!("cannot initialise a {what}")));
        }
        Ok(Owned { ptr, exit })
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: ptr was initialised by the matching init function.
        unsafe {
            (self.exit)(self.ptr);
            SCOTCH_memFree(self.ptr);
        }
    }
}

fn num(x: usize, what: &str) -> Result<Num, MapError> {
    Num::try_from(x).map_err(|_| MapError::Scotch(format!("{what} {x} exceeds Scotch's int range")))
}

/// A graph in Scotch's CSR form (base 0); `edges` lists each undirected edge once.
struct Csr {
    verttab: Vec<Num>,
    edgetab: Vec<Num>,
    edlotab: Vec<Num>,
}

impl Csr {
    fn new(nv: usize, edges: &[(usize, usize, Num)]) -> Result<Csr, MapError> {
        let mut deg = vec![0usize; nv + 1];
        for &(a, b, _) in edges {
            deg[a + 1] += 1;
            deg[b + 1] += 1;
        }
        for i in 0..nv {
            deg[i + 1] += deg[i];
        }
        let mut fill = deg.clone();
        let mut edgetab = vec![0; deg[nv]];
        let mut edlotab = vec![0; deg[nv]];
        for &(a, b, w) in edges {
            for (x, y) in [(a, b), (b, a)] {
                edgetab[fill[x]] = num(y, "vertex")?;
                edlotab[fill[x]] = w;
                fill[x] += 1;
            }
        }
        Ok(Csr {
            verttab: deg
                .iter()
                .map(|&d| num(d, "edge index"))
                .collect::<Result<_, _>>()?,
            edgetab,
            edlotab,
        })
    }

    fn build(&self, g: &Owned) -> Result<(), MapError> {
        let nv = self.verttab.len() - 1;
        // SAFETY: arrays outlive the graph (Scotch keeps pointers, it does not copy them);
        // the caller keeps `self` alive until the graph is dropped.
        let rc = unsafe {
            SCOTCH_graphBuild(
                g.ptr,
                0,
                num(nv, "vertex count")?,
                self.verttab.as_ptr(),
                self.verttab.as_ptr().add(1),
                std::ptr::null(),
                std::ptr::null(),
                num(self.edgetab.len(), "edge count")?,
                self.edgetab.as_ptr(),
                self.edlotab.as_ptr(),
            )
        };
        if rc != 0 {
            return Err(MapError::Scotch("SCOTCH_graphBuild failed".into()));
        }
        Ok(())
    }
}

/// Returns the leaf of each task.
pub fn map(graph: &Graph, arch: &Arch, seed: u64) -> Result<Vec<usize>, MapError> {
    let n = graph.n();
    if n == 1 {
        return Ok(vec![0]);
    }
    // Integer edge loads: the heaviest edge gets 10 000 and the total stays below 10^7.
    let (wmax, wsum) = graph
        .edges()
        .fold((0.0f64, 0.0f64), |(m, s), (_, _, w)| (m.max(w), s + w));
    let scale = if wmax > 0.0 {
        (1e4 / wmax).min(1e7 / wsum)
    } else {
        1.0
    };
    let edges: Vec<(usize, usize, Num)> = graph
        .edges()
        .map(|(i, j, w)| (i, j, ((w * scale).round() as Num).max(1)))
        .collect();
    let tasks = Csr::new(n, &edges)?;

    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    unsafe {
        // The first reset initialises Scotch's generator (else its first use seeds it from
        // the clock, overriding ours); then our seed, then back to its start.
        SCOTCH_randomReset();
        SCOTCH_randomSeed((seed % i32::MAX as u64) as Num);
        SCOTCH_randomReset();
    }
    let g = Owned::new(
        SCOTCH_graphAlloc,
        SCOTCH_graphInit,
        SCOTCH_graphExit,
        "graph",
    )?;
    tasks.build(&g)?;
    let a = Owned::new(SCOTCH_archAlloc, SCOTCH_archInit, SCOTCH_archExit, "target")?;
    let s = Owned::new(
        SCOTCH_stratAlloc,
        SCOTCH_stratInit,
        SCOTCH_stratExit,
        "strategy",
    )?;
    // Kept alive while `a` may point into it.
    let mut tree_graph = None;
    match regular_levels(arch) {
        Some((sizes, links)) => {
            let rc = unsafe {
                SCOTCH_archTleaf(
                    a.ptr,
                    num(sizes.len(), "levels")?,
                    sizes.as_ptr(),
                    links.as_ptr(),
                )
            };
            if rc != 0 {
                return Err(MapError::Scotch("SCOTCH_archTleaf failed".into()));
            }
        }
        None => {
            let (csr, leaves) = tree_as_graph(arch)?;
            let tg = Owned::new(
                SCOTCH_graphAlloc,
                SCOTCH_graphInit,
                SCOTCH_graphExit,
                "graph",
            )?;
            csr.build(&tg)?;
            let bs = Owned::new(
                SCOTCH_stratAlloc,
                SCOTCH_stratInit,
                SCOTCH_stratExit,
                "strategy",
            )?;
            let rc = unsafe {
                SCOTCH_archBuild0(
                    a.ptr,
                    tg.ptr,
                    num(leaves.len(), "leaves")?,
                    leaves.as_ptr(),
                    bs.ptr,
                )
            };
            if rc != 0 {
                return Err(MapError::Scotch("SCOTCH_archBuild0 failed".into()));
            }
            tree_graph = Some((csr, tg));
        }
    }
    let leaves = arch.num_leaves();
    if unsafe { SCOTCH_stratGraphMapBuild(s.ptr, STRAT_QUALITY, num(leaves, "slots")?, 0.0) } != 0 {
        return Err(MapError::Scotch("SCOTCH_stratGraphMapBuild failed".into()));
    }
    let mut part: Vec<Num> = vec![-1; n];
    if unsafe { SCOTCH_graphMap(g.ptr, a.ptr, s.ptr, part.as_mut_ptr()) } != 0 {
        return Err(MapError::Scotch("SCOTCH_graphMap failed".into()));
    }
    drop(tree_graph);
    let leaf_of: Vec<Option<usize>> = part
        .iter()
        .map(|&p| usize::try_from(p).ok().filter(|&l| l < leaves))
        .collect();
    Ok(repair(arch, leaf_of))
}

/// Arity and link cost per level when every node at a depth has the same arity and cost and
/// all leaves sit at the same depth (tleaf's model); costs are scaled to integers.
fn regular_levels(arch: &Arch) -> Option<(Vec<Num>, Vec<Num>)> {
    let (mut sizes, mut links) = (Vec::new(), Vec::new());
    let mut level = vec![arch.root()];
    loop {
        if level.iter().all(|&e| e >= LEAF) {
            return Some((sizes, links));
        }
        if level.iter().any(|&e| e >= LEAF) {
            return None;
        }
        let first = &arch.nodes[level[0]];
        let (k, c) = (first.children.len(), first.cost);
        if level
            .iter()
            .any(|&e| arch.nodes[e].children.len() != k || arch.nodes[e].cost != c)
        {
            return None;
        }
        sizes.push(Num::try_from(k).ok()?);
        links.push(((c * 10.0).round() as Num).max(1));
        level = level
            .iter()
            .flat_map(|&e| arch.nodes[e].children.iter().copied())
            .collect();
    }
}

/// The tree as a graph: vertex per node, then per leaf; edge lengths make the path between
/// two leaves twice the height of their common node, heights growing with the costs.
fn tree_as_graph(arch: &Arch) -> Result<(Csr, Vec<Num>), MapError> {
    let nn = arch.nodes.len();
    let mut height = vec![0 as Num; nn];
    let mut order: Vec<usize> = (0..nn).collect();
    order.sort_by_key(|&x| arch.nodes[x].height);
    for &x in &order {
        let below = arch.nodes[x]
            .children
            .iter()
            .map(|&c| if c >= LEAF { 0 } else { height[c] })
            .max()
            .unwrap_or(0);
        height[x] = ((arch.nodes[x].cost * 10.0).round() as Num).max(below + 1);
    }
    let mut edges = Vec::new();
    for x in 0..nn {
        for &c in &arch.nodes[x].children {
            let (v, h) = if c >= LEAF {
                (nn + c - LEAF, 0)
            } else {
                (c, height[c])
            };
            edges.push((x, v, height[x] - h));
        }
    }
    let leaves = (0..arch.num_leaves())
        .map(|l| num(nn + l, "vertex"))
        .collect::<Result<_, _>>()?;
    Ok((Csr::new(nn + arch.num_leaves(), &edges)?, leaves))
}

/// One task per leaf: tasks Scotch left unmapped or on an already used leaf go to the
/// nearest free leaf.
fn repair(arch: &Arch, leaf_of: Vec<Option<usize>>) -> Vec<usize> {
    let mut used = vec![false; arch.num_leaves()];
    let mut out = vec![usize::MAX; leaf_of.len()];
    let mut homeless = Vec::new();
    for (t, l) in leaf_of.iter().enumerate() {
        match *l {
            Some(l) if !used[l] => {
                used[l] = true;
                out[t] = l;
            }
            _ => homeless.push((t, *l)),
        }
    }
    for (t, wanted) in homeless {
        let from = wanted.unwrap_or(0);
        let free = (0..used.len())
            .filter(|&l| !used[l])
            .min_by(|&x, &y| {
                arch.dist(from, x)
                    .total_cmp(&arch.dist(from, y))
                    .then(x.abs_diff(from).cmp(&y.abs_diff(from)))
            })
            .unwrap_or(0);
        used[free] = true;
        out[t] = free;
    }
    out
}
