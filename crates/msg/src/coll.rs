//! Communicators and the collectives, which follow the machine tree.
//!
//! A collective's tree is built level by level from the placement keys the launcher stored
//! per rank (package, NUMA node, L3, L2, core): ranks are grouped by package, the group
//! leaders exchange over a binomial tree, then each group recursively by the next level. Data
//! therefore crosses each package link once per message (not once per rank), and large
//! messages are cut in segments that flow down (Bcast) or up (Reduce) the tree in a
//! pipeline. Alltoall is a pairwise exchange with one send and one receive in flight per rank,
//! in an order that spreads the messages crossing the package link evenly over its steps (see
//! [`exchange_order`]). Large Allreduce runs around a ring of the ranks in machine order
//! (reduce-scatter, then allgather).

use crate::engine::{Engine, Status};
use crate::ops::{self, Op, Type};
use crate::shm::NKEYS;
use crate::MsgError;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

/// Segment size of pipelined collectives.
pub const SEGMENT: usize = 128 * 1024;
/// Alltoall blocks up to this size are all posted at once (latency-bound).
const ALLTOALL_SMALL: usize = 1024;

const TAG_BCAST: i32 = 1;
const TAG_REDUCE: i32 = 2;
const TAG_BARRIER: i32 = 3;
const TAG_GATHER: i32 = 4;
const TAG_SCATTER: i32 = 5;
const TAG_ALLTOALL: i32 = 6;
const TAG_ALLREDUCE: i32 = 7;
/// Allreduce up to this size uses recursive doubling (latency-bound) on power-of-two sizes:
/// one exchange per level instead of a trip up and one down the tree (4 KiB: 1.1 us, not
/// 1.5 us, on the 2-core VM).
const ALLREDUCE_SMALL: usize = 16384;
/// Allreduce from this size on is a ring reduce-scatter + allgather (bandwidth-bound).
const ALLREDUCE_RING: usize = 64 * 1024;

/// One communicator as seen by this rank.
pub struct Comm {
    /// World rank of each member, by communicator rank.
    pub ranks: Vec<usize>,
    /// Communicator rank of each world rank (-1 if not a member).
    pub world_to_comm: Rc<Vec<i32>>,
    /// This rank's communicator rank.
    pub me: usize,
    /// Point-to-point context; collectives use ctx + 1.
    pub ctx: u32,
    pub errhandler: i32,
    trees: HashMap<usize, Tree>,
    /// Alltoall's exchange order (see [`exchange_order`]) and this rank's position in it.
    exchange: Option<(Rc<Vec<usize>>, usize)>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tree {
    pub parent: Option<usize>,
    pub children: Vec<usize>,
}

impl Comm {
    pub fn new(ranks: Vec<usize>, world_size: usize, me: usize, ctx: u32) -> Comm {
        let mut w2c = vec![-1; world_size];
        for (c, &w) in ranks.iter().enumerate() {
            w2c[w] = c as i32;
        }
        Comm {
            ranks,
            world_to_comm: Rc::new(w2c),
            me,
            ctx,
            errhandler: 0,
            trees: HashMap::new(),
            exchange: None,
        }
    }

    pub fn size(&self) -> usize {
        self.ranks.len()
    }

    fn tree(&mut self, e: &Engine, root: usize) -> Tree {
        if let Some(t) = self.trees.get(&root) {
            return t.clone();
        }
        let keys: Vec<[u32; NKEYS]> = self.ranks.iter().map(|&w| e.keys(w)).collect();
        let all = build_trees(&keys, root);
        let t = all[self.me].clone();
        self.trees.insert(root, t.clone());
        t
    }

    fn coll(&self) -> u32 {
        self.ctx + 1
    }

    /// The members in machine order (package, NUMA node, L3, L2, core, then rank): ring
    /// neighbours share the deepest cache they can, and the ring crosses each boundary twice.
    fn ring(&self, e: &Engine) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.size()).collect();
        order.sort_by_key(|&r| (e.keys(self.ranks[r]), r));
        order
    }

    /// The members in the order Alltoall's exchange steps shift over, and our position in
    /// it; computed once per communicator (every member computes the same from the keys).
    fn exchange_order(&mut self, e: &Engine) -> (Rc<Vec<usize>>, usize) {
        if let Some((order, pos)) = &self.exchange {
            return (order.clone(), *pos);
        }
        let keys: Vec<[u32; NKEYS]> = self.ranks.iter().map(|&w| e.keys(w)).collect();
        let order = Rc::new(exchange_order(&keys));
        let pos = order.iter().position(|&r| r == self.me).unwrap_or(0);
        self.exchange = Some((order.clone(), pos));
        (order, pos)
    }
}

/// Candidate swaps when spreading the exchange order: 16 per member, but at most
/// EXCHANGE_WORK / n, since each costs O(n): about 3.5 ms at any size on the 2-core VM
/// (release build), where sweeping all pairs until nothing improved took 33 ms at 64 ranks
/// and 1.5-4.4 s at 256.
const EXCHANGE_SWAPS_PER_RANK: usize = 16;
const EXCHANGE_WORK: usize = 1 << 16;

/// The order of the members (indexes into `keys`) for Alltoall's pairwise exchange, where at
/// step s the member at position i sends to the one at position i + s (mod n).
///
/// In machine order the steps are lopsided: with two packages of m ranks, step m sends every
/// message across the package link at once while step 1 sends two. The total that must cross
/// is fixed, so the order spreads it: a shuffle of machine order (its peak step is already
/// within about 1.2x the average for large n), then swaps of members of different groups at
/// pseudo-random places (see EXCHANGE_SWAPS_PER_RANK), each kept when it lowers the most
/// messages any step sends across groups (ties: the sum of squares over steps). Groups are packages, or NUMA nodes when the
/// members share one package; with one group, machine order is kept. The generator has a
/// fixed seed, so every member computes the same order.
pub fn exchange_order(keys: &[[u32; NKEYS]]) -> Vec<usize> {
    let n = keys.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&r| (keys[r], r));
    let Some(level) = (0..2).find(|&l| keys.iter().any(|k| k[l] != keys[0][l])) else {
        return order;
    };
    // SplitMix64: a deterministic stream, the same on every member.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut below = |m: usize| {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % m as u64) as usize
    };
    for i in (1..n).rev() {
        order.swap(i, below(i + 1));
    }
    let mut group: Vec<u32> = order.iter().map(|&r| keys[r][level]).collect();
    let mut cross = crossings(&group);
    let score = |c: &[usize]| {
        (
            c.iter().copied().max().unwrap_or(0),
            c.iter().map(|&x| x * x).sum::<usize>(),
        )
    };
    let mut best = score(&cross);
    // Sends from position i at step s that cross groups, for the positions a swap of a and b
    // touches (i = a, b, a - s, b - s), each counted once, added to or taken from `cross[s - 1]`.
    let touch = |group: &[u32], cross: &mut [usize], a: usize, b: usize, add: bool| {
        for s in 1..n {
            let mut seen = [usize::MAX; 4];
            for (k, i) in [a, b, (a + n - s) % n, (b + n - s) % n]
                .into_iter()
                .enumerate()
            {
                if seen[..k].contains(&i) {
                    continue;
                }
                seen[k] = i;
                if group[i] != group[(i + s) % n] {
                    if add {
                        cross[s - 1] += 1;
                    } else {
                        cross[s - 1] -= 1;
                    }
                }
            }
        }
    };
    for _ in 0..(EXCHANGE_SWAPS_PER_RANK * n).min(EXCHANGE_WORK / n) {
        let (a, b) = (below(n), below(n));
        if group[a] == group[b] {
            continue;
        }
        touch(&group, &mut cross, a, b, false);
        group.swap(a, b);
        touch(&group, &mut cross, a, b, true);
        let sc = score(&cross);
        if sc < best {
            best = sc;
            order.swap(a, b);
        } else {
            touch(&group, &mut cross, a, b, false);
            group.swap(a, b);
            touch(&group, &mut cross, a, b, true);
        }
    }
    order
}

/// For the groups of the members in exchange order, how many sends of each step s = 1..n-1
/// go to a member of another group (entry s - 1).
pub fn crossings(group: &[u32]) -> Vec<usize> {
    let n = group.len();
    (1..n)
        .map(|s| (0..n).filter(|&i| group[i] != group[(i + s) % n]).count())
        .collect()
}

/// Every member's parent and children in the topology tree rooted at `root`.
pub fn build_trees(keys: &[[u32; NKEYS]], root: usize) -> Vec<Tree> {
    let mut out = vec![Tree::default(); keys.len()];
    let members: Vec<usize> = (0..keys.len()).collect();
    build(keys, &members, root, 0, &mut out);
    out
}

fn build(keys: &[[u32; NKEYS]], members: &[usize], root: usize, level: usize, out: &mut [Tree]) {
    if members.len() <= 1 {
        return;
    }
    if level == NKEYS {
        let mut order = vec![root];
        order.extend(members.iter().copied().filter(|&m| m != root));
        binomial(&order, out);
        return;
    }
    let mut groups: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for &m in members {
        groups.entry(keys[m][level]).or_default().push(m);
    }
    if groups.len() == 1 {
        return build(keys, members, root, level + 1, out);
    }
    let mut leaders = Vec::new();
    let mut subgroups = Vec::new();
    for g in groups.values() {
        let leader = if g.contains(&root) { root } else { g[0] };
        if leader == root {
            leaders.insert(0, leader);
        } else {
            leaders.push(leader);
        }
        subgroups.push((g.clone(), leader));
    }
    // Leader edges first: the child that heads a whole group gets each segment first.
    binomial(&leaders, out);
    for (g, leader) in subgroups {
        build(keys, &g, leader, level + 1, out);
    }
}

/// A binomial tree over `order` (order[0] is its root), added to `out`.
fn binomial(order: &[usize], out: &mut [Tree]) {
    let n = order.len();
    // Children with the largest subtrees first.
    for i in 0..n {
        let low = if i == 0 {
            n.next_power_of_two()
        } else {
            i & i.wrapping_neg()
        };
        let mut step = low >> 1;
        while step > 0 {
            if i + step < n {
                out[order[i]].children.push(order[i + step]);
                out[order[i + step]].parent = Some(order[i]);
            }
            step >>= 1;
        }
    }
}

fn segments(len: usize, unit: usize) -> Vec<(usize, usize)> {
    let seg = (SEGMENT / unit).max(1) * unit;
    if len <= seg {
        return vec![(0, len)];
    }
    (0..len)
        .step_by(seg)
        .map(|o| (o, seg.min(len - o)))
        .collect()
}

fn wait_all(e: &mut Engine, ids: &[usize]) -> Result<(), MsgError> {
    e.wait_until(|e| ids.iter().all(|&i| e.is_done(i)))?;
    for &i in ids {
        e.release(i);
    }
    Ok(())
}

/// Pipelined broadcast of `buf` from `root` down the topology tree.
pub fn bcast(e: &mut Engine, c: &mut Comm, buf: &mut [u8], root: usize) -> Result<(), MsgError> {
    if c.size() == 1 {
        return Ok(());
    }
    let t = c.tree(e, root);
    let segs = segments(buf.len(), 1);
    let base = buf.as_mut_ptr();
    let recvs: Vec<usize> = match t.parent {
        Some(p) => segs
            .iter()
            .map(|&(o, l)| {
                let ptr = unsafe { base.add(o) };
                // Safety: `buf` outlives the call, which waits for every request.
                unsafe { e.irecv(ptr, l as u64, c.ranks[p] as i32, c.coll(), TAG_BCAST, None) }
            })
            .collect(),
        None => Vec::new(),
    };
    let mut sends = Vec::new();
    for (i, &(o, l)) in segs.iter().enumerate() {
        if let Some(&r) = recvs.get(i) {
            e.wait(r)?;
        }
        for &ch in &t.children {
            let ptr = unsafe { base.add(o) };
            sends.push(unsafe { e.isend(ptr, l as u64, c.ranks[ch], c.coll(), TAG_BCAST) });
        }
    }
    wait_all(e, &sends)
}

/// Pipelined reduction up the topology tree; `acc` holds this rank's contribution and, at
/// the root, receives the result.
pub fn reduce(
    e: &mut Engine,
    c: &mut Comm,
    acc: &mut [u8],
    ty: Type,
    op: Op,
    root: usize,
) -> Result<(), MsgError> {
    if c.size() == 1 {
        return Ok(());
    }
    let t = c.tree(e, root);
    let len = acc.len();
    let segs = segments(len, ty.size());
    let mut tmp = vec![0u8; len * t.children.len()];
    let tbase = tmp.as_mut_ptr();
    let mut recvs = Vec::with_capacity(segs.len() * t.children.len());
    for &(o, l) in &segs {
        for (k, &ch) in t.children.iter().enumerate() {
            let ptr = unsafe { tbase.add(k * len + o) };
            // Safety: `tmp` outlives the call, which waits for every request.
            recvs.push(unsafe {
                e.irecv(
                    ptr,
                    l as u64,
                    c.ranks[ch] as i32,
                    c.coll(),
                    TAG_REDUCE,
                    None,
                )
            });
        }
    }
    let mut sends = Vec::new();
    let nch = t.children.len();
    for (s, &(o, l)) in segs.iter().enumerate() {
        for k in 0..nch {
            e.wait(recvs[s * nch + k])?;
            let part = unsafe { std::slice::from_raw_parts(tbase.add(k * len + o), l) };
            ops::reduce(op, ty, &mut acc[o..o + l], part);
        }
        if let Some(p) = t.parent {
            let ptr = acc[o..].as_ptr();
            sends.push(unsafe { e.isend(ptr, l as u64, c.ranks[p], c.coll(), TAG_REDUCE) });
        }
    }
    wait_all(e, &sends)
}

/// Small messages on power-of-two communicators: recursive doubling, whose first steps pair
/// neighbouring ranks (the nearest PUs under compact placement). Large ones: the ring of
/// `ring_allreduce`. In between, reduce to rank 0 then broadcast, both along the topology
/// tree and pipelined.
pub fn allreduce(
    e: &mut Engine,
    c: &mut Comm,
    acc: &mut [u8],
    ty: Type,
    op: Op,
) -> Result<(), MsgError> {
    let n = c.size();
    if n > 1 && n.is_power_of_two() && acc.len() <= ALLREDUCE_SMALL {
        // The partner's operand: on the stack when small (no allocation per call).
        let mut stack = [0u8; 256];
        let mut heap = Vec::new();
        let theirs: &mut [u8] = if acc.len() <= stack.len() {
            &mut stack[..acc.len()]
        } else {
            heap.resize(acc.len(), 0);
            &mut heap
        };
        let mut mask = 1;
        while mask < n {
            let partner = c.me ^ mask;
            let w = c.ranks[partner];
            // Safety: both buffers outlive the two requests, which are waited for here.
            let ids = unsafe {
                [
                    e.irecv(
                        theirs.as_mut_ptr(),
                        theirs.len() as u64,
                        w as i32,
                        c.coll(),
                        TAG_ALLREDUCE,
                        None,
                    ),
                    e.isend(acc.as_ptr(), acc.len() as u64, w, c.coll(), TAG_ALLREDUCE),
                ]
            };
            wait_all(e, &ids)?;
            // Lower rank's operand first everywhere, so every rank gets the same bits.
            if partner < c.me {
                ops::reduce(op, ty, theirs, acc);
                acc.copy_from_slice(theirs);
            } else {
                ops::reduce(op, ty, acc, theirs);
            }
            mask <<= 1;
        }
        return Ok(());
    }
    if n > 1 && acc.len() >= ALLREDUCE_RING {
        // Safety: no separate send buffer.
        return unsafe { ring_allreduce(e, c, None, acc, ty, op) };
    }
    reduce(e, c, acc, ty, op, 0)?;
    bcast(e, c, acc, 0)
}

/// Allreduce of `send` (acc.len() bytes) into `acc`, saving the ring the copy of `send`
/// into `acc` first.
///
/// # Safety
/// `send` must hold acc.len() bytes and not overlap `acc`.
pub unsafe fn allreduce_from(
    e: &mut Engine,
    c: &mut Comm,
    send: *const u8,
    acc: &mut [u8],
    ty: Type,
    op: Op,
) -> Result<(), MsgError> {
    if c.size() > 1 && acc.len() >= ALLREDUCE_RING {
        return unsafe { ring_allreduce(e, c, Some(send), acc, ty, op) };
    }
    unsafe { std::ptr::copy_nonoverlapping(send, acc.as_mut_ptr(), acc.len()) };
    allreduce(e, c, acc, ty, op)
}

/// Large vectors: a reduce-scatter then an allgather around `Comm::ring`. Every rank sends
/// and receives 2(n-1)/n of the vector and reduces (n-1)/n of it, all ranks at once, where
/// reducing to a root and broadcasting passes the whole vector through the root twice and
/// leaves the others idle. Each block is reduced by one rank only, so every rank ends with
/// the same bits. With a separate `send` buffer, blocks arrive straight in `acc` and are
/// reduced with `send` there (no copy of the vector first, no scratch block).
///
/// # Safety
/// `send`, if given, must hold acc.len() bytes and not overlap `acc`.
unsafe fn ring_allreduce(
    e: &mut Engine,
    c: &mut Comm,
    send: Option<*const u8>,
    acc: &mut [u8],
    ty: Type,
    op: Op,
) -> Result<(), MsgError> {
    let n = c.size();
    let unit = ty.size();
    let elems = acc.len() / unit;
    let block = |b: usize| (b * elems / n * unit)..((b + 1) * elems / n * unit);
    let order = c.ring(e);
    let pos = order
        .iter()
        .position(|&r| r == c.me)
        .expect("member of its ring");
    let next = c.ranks[order[(pos + 1) % n]];
    let prev = c.ranks[order[(pos + n - 1) % n]] as i32;
    let ctx = c.coll();
    // In place, a received block needs room of its own until it is reduced into acc.
    let mut theirs: Vec<u8> = match send {
        Some(_) => Vec::new(),
        None => Vec::with_capacity(elems.div_ceil(n) * unit),
    };
    // One step: send block `out` (from `from`), receive block `inb`. Every rank receives at
    // every step, so single copies are left to the receivers (isend_solo).
    let ring_step = |e: &mut Engine, from: *const u8, out: usize, into: *mut u8, inb: usize| {
        let (s, r) = (block(out), block(inb));
        // Safety: both buffers outlive the two requests, which are waited for here; the
        // blocks sent and received are disjoint.
        let ids = unsafe {
            [
                e.irecv(into, r.len() as u64, prev, ctx, TAG_ALLREDUCE, None),
                e.isend_solo(from.add(s.start), s.len() as u64, next, ctx, TAG_ALLREDUCE),
            ]
        };
        let got = (e.wait(ids[0])?.bytes as usize).min(r.len());
        e.wait(ids[1])?;
        Ok::<usize, MsgError>(got)
    };
    let base = acc.as_mut_ptr();
    // Reduce-scatter: at step k block pos-k goes out (at k = 0 this rank's own data) and
    // block pos-k-1 comes in and takes this rank's contribution; at the end block pos+1 is
    // complete here.
    for k in 0..n - 1 {
        let (out, inb) = ((pos + n - k) % n, (pos + 2 * n - k - 1) % n);
        let r = block(inb);
        let from = match send {
            Some(p) if k == 0 => p,
            _ => base as *const u8,
        };
        match send {
            Some(own) => {
                ring_step(e, from, out, unsafe { base.add(r.start) }, inb)?;
                // Safety: `own` holds acc.len() bytes (caller).
                let mine = unsafe { std::slice::from_raw_parts(own.add(r.start), r.len()) };
                ops::reduce(op, ty, &mut acc[r], mine);
            }
            None => {
                let got = ring_step(e, from, out, theirs.as_mut_ptr(), inb)?;
                // A shorter block only comes from ranks passing different counts
                // (erroneous): the rest is zeroed rather than read uninitialised.
                unsafe { std::ptr::write_bytes(theirs.as_mut_ptr().add(got), 0, r.len() - got) };
                // Safety: all r.len() bytes are written now.
                let got = unsafe { std::slice::from_raw_parts(theirs.as_ptr(), r.len()) };
                ops::reduce(op, ty, &mut acc[r], got);
            }
        }
    }
    // Allgather: pass the complete blocks on around the ring.
    for k in 0..n - 1 {
        let (out, inb) = ((pos + 1 + n - k) % n, (pos + n - k) % n);
        let at = block(inb).start;
        ring_step(e, base as *const u8, out, unsafe { base.add(at) }, inb)?;
    }
    Ok(())
}

/// Gather to rank 0 up the topology tree, release down it.
pub fn barrier(e: &mut Engine, c: &mut Comm) -> Result<(), MsgError> {
    if c.size() == 1 {
        return Ok(());
    }
    let t = c.tree(e, 0);
    let ids: Vec<usize> = t
        .children
        .iter()
        .map(|&ch| unsafe {
            e.irecv(
                std::ptr::null_mut(),
                0,
                c.ranks[ch] as i32,
                c.coll(),
                TAG_BARRIER,
                None,
            )
        })
        .collect();
    wait_all(e, &ids)?;
    if let Some(p) = t.parent {
        e.send(&[], c.ranks[p], c.coll(), TAG_BARRIER)?;
        e.recv(&mut [], c.ranks[p] as i32, c.coll(), TAG_BARRIER)?;
    }
    let ids: Vec<usize> = t
        .children
        .iter()
        .map(|&ch| unsafe { e.isend(std::ptr::null(), 0, c.ranks[ch], c.coll(), TAG_BARRIER) })
        .collect();
    wait_all(e, &ids)
}

/// Gather blocks of different sizes at `root`: rank r's `send` lands at recv[displs[r]..]
/// (`counts`/`displs` in bytes, used at the root only).
/// # Safety
/// At the root, `recv` must hold `displs[r] + counts[r]` bytes for every rank r.
pub unsafe fn gatherv(
    e: &mut Engine,
    c: &mut Comm,
    send: &[u8],
    recv: *mut u8,
    counts: &[usize],
    displs: &[usize],
    root: usize,
) -> Result<(), MsgError> {
    if c.me != root {
        e.send(send, c.ranks[root], c.coll(), TAG_GATHER)?;
        return Ok(());
    }
    let mut ids = Vec::new();
    for r in 0..c.size() {
        let ptr = unsafe { recv.add(displs[r]) };
        if r == root {
            // MPI_IN_PLACE at the root passes its own block as `send` already in place.
            if !std::ptr::eq(send.as_ptr(), ptr) {
                unsafe { std::ptr::copy(send.as_ptr(), ptr, send.len().min(counts[r])) };
            }
            continue;
        }
        ids.push(e.irecv(
            ptr,
            counts[r] as u64,
            c.ranks[r] as i32,
            c.coll(),
            TAG_GATHER,
            None,
        ));
    }
    wait_all(e, &ids)
}

/// Scatter equal blocks of `block` bytes from `root`.
/// # Safety
/// `recv` must hold `block` bytes; at the root `send` must hold `block` bytes per rank.
pub unsafe fn scatter(
    e: &mut Engine,
    c: &mut Comm,
    send: *const u8,
    recv: *mut u8,
    block: usize,
    root: usize,
) -> Result<(), MsgError> {
    if c.me != root {
        let id = e.irecv(
            recv,
            block as u64,
            c.ranks[root] as i32,
            c.coll(),
            TAG_SCATTER,
            None,
        );
        e.wait(id)?;
        return Ok(());
    }
    let mut ids = Vec::new();
    for r in 0..c.size() {
        let ptr = unsafe { send.add(r * block) };
        if r == root {
            if !std::ptr::eq(ptr, recv) {
                unsafe { std::ptr::copy(ptr, recv, block) };
            }
            continue;
        }
        ids.push(e.isend(ptr, block as u64, c.ranks[r], c.coll(), TAG_SCATTER));
    }
    wait_all(e, &ids)
}

/// Personalized exchange: rank r's block for rank d is send[sdispl[d]..+scount[d]], it lands
/// in d's recv[rdispl[r]..+rcount[r]] (all in bytes).
#[allow(clippy::too_many_arguments)]
/// # Safety
/// `send` and `recv` must hold the blocks the counts and displacements describe.
pub unsafe fn alltoallv(
    e: &mut Engine,
    c: &mut Comm,
    send: *const u8,
    scount: &[usize],
    sdispl: &[usize],
    recv: *mut u8,
    rcount: &[usize],
    rdispl: &[usize],
) -> Result<(), MsgError> {
    let small = scount.iter().chain(rcount).all(|&b| b <= ALLTOALL_SMALL);
    let sblock = |d: usize| (sdispl[d], scount[d]);
    let rblock = |r: usize| (rdispl[r], rcount[r]);
    unsafe { exchange(e, c, send, sblock, recv, rblock, small) }
}

/// Alltoall with blocks of `sb` bytes to send and `rb` to receive per rank, laid out in rank
/// order (no count arrays to build per call).
///
/// # Safety
/// `send` must hold n * sb bytes and `recv` n * rb.
pub unsafe fn alltoall(
    e: &mut Engine,
    c: &mut Comm,
    send: *const u8,
    sb: usize,
    recv: *mut u8,
    rb: usize,
) -> Result<(), MsgError> {
    let small = sb.max(rb) <= ALLTOALL_SMALL;
    unsafe { exchange(e, c, send, |d| (d * sb, sb), recv, |r| (r * rb, rb), small) }
}

/// The exchange behind Alltoall(v): `sblock(d)` and `rblock(r)` give (offset, bytes) of the
/// block for rank d in `send` and of the block from rank r in `recv`.
unsafe fn exchange(
    e: &mut Engine,
    c: &mut Comm,
    send: *const u8,
    sblock: impl Fn(usize) -> (usize, usize),
    recv: *mut u8,
    rblock: impl Fn(usize) -> (usize, usize),
    small: bool,
) -> Result<(), MsgError> {
    let n = c.size();
    let me = c.me;
    let own_block = || unsafe {
        let ((so, sc), (ro, rc)) = (sblock(me), rblock(me));
        std::ptr::copy(send.add(so), recv.add(ro), sc.min(rc))
    };
    if small {
        own_block();
        // Everything posted at once; the request ids on the stack for small communicators.
        let mut stack = [0usize; 64];
        let mut heap = Vec::new();
        let ids: &mut [usize] = if 2 * n <= stack.len() {
            &mut stack[..2 * (n - 1)]
        } else {
            heap.resize(2 * (n - 1), 0);
            &mut heap
        };
        for step in 1..n {
            let src = (me + n - step) % n;
            let (ro, rc) = rblock(src);
            ids[step - 1] = e.irecv(
                unsafe { recv.add(ro) },
                rc as u64,
                c.ranks[src] as i32,
                c.coll(),
                TAG_ALLTOALL,
                None,
            );
        }
        for step in 1..n {
            let dst = (me + step) % n;
            let (so, sc) = sblock(dst);
            ids[n - 2 + step] = unsafe {
                e.isend(
                    send.add(so),
                    sc as u64,
                    c.ranks[dst],
                    c.coll(),
                    TAG_ALLTOALL,
                )
            };
        }
        return wait_all(e, ids);
    }
    // Step s: send to the member s places after us in the exchange order, receive from the
    // one s places before. Every rank is at the same step, so each transfer's partner is
    // ready for it, and each rank has one message in flight each way. Every rank is receiving
    // at each step, so single copies are left to the receivers (isend_solo), and our own
    // block is copied last: the peers' first reads start at once.
    let (order, pos) = c.exchange_order(e);
    for step in 1..n {
        let dst = order[(pos + step) % n];
        let src = order[(pos + n - step) % n];
        let (ro, rc) = rblock(src);
        let r = e.irecv(
            unsafe { recv.add(ro) },
            rc as u64,
            c.ranks[src] as i32,
            c.coll(),
            TAG_ALLTOALL,
            None,
        );
        let (so, sc) = sblock(dst);
        let s = unsafe {
            e.isend_solo(
                send.add(so),
                sc as u64,
                c.ranks[dst],
                c.coll(),
                TAG_ALLTOALL,
            )
        };
        wait_all(e, &[r, s])?;
    }
    own_block();
    Ok(())
}

/// Agrees on a fresh context pair among the members of `c` (collective over `c`).
pub fn agree_ctx(e: &mut Engine, c: &mut Comm, proposal: u32) -> Result<u32, MsgError> {
    let mut v = (proposal as u64).to_ne_bytes();
    allreduce(e, c, &mut v, Type::Uint64, Op::Max)?;
    Ok(u64::from_ne_bytes(v) as u32)
}

/// Everyone's `mine` (same length everywhere), concatenated in communicator rank order.
pub fn allgather(e: &mut Engine, c: &mut Comm, mine: &[u8]) -> Result<Vec<u8>, MsgError> {
    let b = mine.len();
    let n = c.size();
    let mut all = vec![0u8; b * n];
    let counts = vec![b; n];
    let displs: Vec<usize> = (0..n).map(|r| r * b).collect();
    // Safety: `all` holds n blocks of b bytes.
    unsafe { gatherv(e, c, mine, all.as_mut_ptr(), &counts, &displs, 0)? };
    bcast(e, c, &mut all, 0)?;
    Ok(all)
}

/// Completed status for operations on MPI_PROC_NULL.
pub fn proc_null_status() -> Status {
    Status {
        source: -2,
        tag: -1,
        error: 0,
        bytes: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_tree(trees: &[Tree], root: usize) {
        // Every non-root has a parent, parent/child links agree, and all reach the root.
        for (i, t) in trees.iter().enumerate() {
            if i == root {
                assert!(t.parent.is_none());
                continue;
            }
            let p = t.parent.expect("non-root has a parent");
            assert!(trees[p].children.contains(&i));
            let mut x = i;
            let mut hops = 0;
            while let Some(p) = trees[x].parent {
                x = p;
                hops += 1;
                assert!(hops <= trees.len());
            }
            assert_eq!(x, root);
        }
    }

    #[test]
    fn package_link_crossed_once() {
        // 2 packages x 2 L3 x 2 cores; ranks 0-3 on package 0, 4-7 on package 1.
        let keys: Vec<[u32; NKEYS]> = (0..8u32).map(|r| [r / 4, 0, r / 2, r, r]).collect();
        for root in 0..8 {
            let t = build_trees(&keys, root);
            check_tree(&t, root);
            let crossing = t
                .iter()
                .enumerate()
                .filter(|(i, x)| x.parent.is_some_and(|p| keys[p][0] != keys[*i][0]))
                .count();
            assert_eq!(crossing, 1, "root {root}");
            let l3_crossing = t
                .iter()
                .enumerate()
                .filter(|(i, x)| x.parent.is_some_and(|p| keys[p][2] != keys[*i][2]))
                .count();
            assert_eq!(l3_crossing, 3, "root {root}: one edge per other L3");
        }
    }

    /// Keys of ranks on packages of the given sizes, in rank order.
    fn packages(sizes: &[u32]) -> Vec<[u32; NKEYS]> {
        let mut keys = Vec::new();
        for (p, &m) in sizes.iter().enumerate() {
            for c in 0..m {
                let core = keys.len() as u32;
                keys.push([p as u32, p as u32, p as u32, core, c]);
            }
        }
        keys
    }

    #[test]
    fn exchange_order_spreads_package_crossings_over_the_steps() {
        for sizes in [
            &[4, 4][..],
            &[8, 8],
            &[16, 16],
            &[4, 4, 4, 4],
            &[3, 5],
            &[6, 6, 6],
            &[32, 32],
        ] {
            let keys = packages(sizes);
            let n = keys.len();
            let order = exchange_order(&keys);
            let mut sorted = order.clone();
            sorted.sort();
            assert_eq!(
                sorted,
                (0..n).collect::<Vec<_>>(),
                "{sizes:?}: a permutation"
            );
            let group = |o: &[usize]| o.iter().map(|&r| keys[r][0]).collect::<Vec<_>>();
            let machine = crossings(&group(&(0..n).collect::<Vec<_>>()));
            let spread = crossings(&group(&order));
            // The total is fixed; up to 32 ranks every step carries at most one message over
            // the average, beyond that (a bounded number of swaps) at most an eighth more.
            assert_eq!(spread.iter().sum::<usize>(), machine.iter().sum::<usize>());
            let bound = machine.iter().sum::<usize>().div_ceil(n - 1);
            let slack = if n <= 32 { 1 } else { bound / 8 };
            let peak = *spread.iter().max().unwrap();
            assert!(
                peak <= bound + slack,
                "{sizes:?}: peak {peak}, bound {bound}"
            );
            // Packages of equal size: machine order's middle step sends every message
            // across; the spread order does not.
            if sizes.iter().all(|&m| m == sizes[0]) && n >= 8 {
                assert!(peak < *machine.iter().max().unwrap(), "{sizes:?}");
            }
        }
        // Two packages of 16: the middle step no longer sends all 32 messages across.
        let keys = packages(&[16, 16]);
        let g: Vec<u32> = exchange_order(&keys).iter().map(|&r| keys[r][0]).collect();
        assert_eq!(
            crossings(&(0..32).map(|r| keys[r][0]).collect::<Vec<_>>())[15],
            32
        );
        assert!(*crossings(&g).iter().max().unwrap() <= 18);
    }

    #[test]
    fn exchange_order_keeps_machine_order_on_one_package() {
        let keys: Vec<[u32; NKEYS]> = (0..6u32).rev().map(|r| [0, 0, r / 2, r, r]).collect();
        // Machine order: by keys, so the ranks with the lowest cores first.
        assert_eq!(exchange_order(&keys), vec![5, 4, 3, 2, 1, 0]);
        // One package with two NUMA nodes: the nodes are the groups.
        let numa: Vec<[u32; NKEYS]> = (0..8u32).map(|r| [0, r / 4, r / 4, r, r]).collect();
        let g: Vec<u32> = exchange_order(&numa).iter().map(|&r| numa[r][1]).collect();
        assert!(*crossings(&g).iter().max().unwrap() < 8);
    }

    #[test]
    fn flat_machine_is_binomial() {
        let keys = vec![[0, 0, 0, 0, 0]; 5];
        let t = build_trees(&keys, 2);
        check_tree(&t, 2);
        assert_eq!(t[2].children.len(), 3);
    }

    #[test]
    fn segments_cover_exactly() {
        let s = segments(3 * SEGMENT + 7, 8);
        assert_eq!(s.iter().map(|x| x.1).sum::<usize>(), 3 * SEGMENT + 7);
        assert!(s.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0));
        assert!(s.iter().all(|x| x.0 % 8 == 0));
        assert_eq!(segments(0, 4), vec![(0, 0)]);
    }
}
