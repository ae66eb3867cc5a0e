//! Jobs of this test binary itself, started through the launcher: each test re-runs as N
//! ranks (the launcher sets HUDDLE_MSG_RANK), with pair classes and rules forced so that on a
//! 2-PU machine every transport (eager, pipelined with odd fragments, single copy), ring
//! wrap-around and back-pressure, the futex sleep and the failure path all run.

use huddle_msg::coll::{self, Comm};
use huddle_msg::engine::{Engine, ANY};
use huddle_msg::launch::{self, Launch, RankEnd};
use huddle_msg::ops::{Op, Type};
use huddle_msg::rules::{Class, Rule, NCLASS};
use huddle_msg::shm::{self, JobSpec};
use huddle_msg::MsgError;
use std::time::{Duration, Instant};

fn in_rank() -> bool {
    std::env::var_os("HUDDLE_MSG_RANK").is_some()
}

fn cpus() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// Classes by pair so that a 4-rank job has core, l3 and remote pairs.
fn class_of(a: usize, b: usize) -> Class {
    if a == b {
        return Class::Core;
    }
    [Class::Core, Class::L3, Class::Remote][(a + b) % 3]
}

fn rules() -> [Rule; NCLASS] {
    let mut r = [Rule {
        eager_limit: 256,
        fragment: 1000,
        single_copy_threshold: u64::MAX,
        exchange_single_copy_threshold: u64::MAX,
    }; NCLASS];
    r[Class::L3 as usize] = Rule {
        eager_limit: 4096,
        fragment: 4096,
        single_copy_threshold: 20_000,
        exchange_single_copy_threshold: 50_000,
    };
    r[Class::Remote as usize] = Rule {
        eager_limit: 64,
        fragment: 8192,
        single_copy_threshold: 1000,
        exchange_single_copy_threshold: 1000,
    };
    r
}

fn spec(n: usize, same_pu: bool) -> JobSpec {
    JobSpec {
        pu_os: (0..n as u32)
            .map(|r| if same_pu { 0 } else { r % cpus() })
            .collect(),
        // Two "packages" of two ranks, so the collective trees have two levels.
        keys: (0..n as u32).map(|r| [r / 2, 0, r / 2, r, r]).collect(),
        classes: (0..n * n).map(|i| class_of(i / n, i % n)).collect(),
        rules: rules(),
        // Small rings: records wrap and senders wait for space.
        ring_bytes: 64 * 1024,
    }
}

fn run(test: &str, job: JobSpec) -> launch::Outcome {
    let exe = std::env::current_exe().unwrap();
    launch::run(Launch {
        program: exe.into(),
        args: vec![
            test.into(),
            "--exact".into(),
            "--nocapture".into(),
            "--test-threads=1".into(),
        ],
        job,
        grace: Duration::from_secs(20),
    })
    .unwrap()
}

/// The job ended without a failure and every rank exited 0.
fn assert_all_exited_0(out: &launch::Outcome) {
    assert_eq!(out.failure, None);
    assert!(
        out.ends.iter().all(|e| *e == RankEnd::Exited(0)),
        "{:?}",
        out.ends
    );
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn byte(src: usize, seq: usize, i: usize) -> u8 {
    (src * 31 + seq * 7 + i * 13) as u8
}

/// Everyone's plan: (dst, tag, len) per message, from a shared seed.
fn plan(n: usize, msgs: usize) -> Vec<Vec<(usize, i32, usize)>> {
    (0..n)
        .map(|s| {
            let mut g = Rng(0x9E37_79B9_7F4A_7C15 ^ ((s as u64 + 1) * 1_000_003));
            (0..msgs)
                .map(|_| {
                    let r = g.next();
                    let len = match r % 4 {
                        0 => (r >> 8) as usize % 300,
                        1 => (r >> 8) as usize % 9000,
                        _ => (r >> 8) as usize % 100_000,
                    };
                    ((r >> 32) as usize % n, ((r >> 40) % 3) as i32, len.max(16))
                })
                .collect()
        })
        .collect()
}

fn traffic(e: &mut Engine) -> Result<(), MsgError> {
    let (me, n) = (e.rank(), e.size());
    let p = plan(n, 120);
    let bufs: Vec<Vec<u8>> = p[me]
        .iter()
        .enumerate()
        .map(|(seq, &(_, _, len))| {
            let mut b: Vec<u8> = (0..len).map(|i| byte(me, seq, i)).collect();
            b[..8].copy_from_slice(&(seq as u64).to_le_bytes());
            b
        })
        .collect();
    let sends: Vec<usize> = p[me]
        .iter()
        .zip(&bufs)
        .map(|(&(dst, tag, _), b)| unsafe { e.isend(b.as_ptr(), b.len() as u64, dst, 0, tag) })
        .collect();
    let expect: usize = p.iter().flatten().filter(|m| m.0 == me).count();
    let mut next = vec![0usize; n];
    let mut buf = vec![0u8; 100_000];
    for _ in 0..expect {
        let st = e.recv(&mut buf, ANY, 0, ANY)?;
        let src = st.source as usize;
        let seq = u64::from_le_bytes(buf[..8].try_into().unwrap()) as usize;
        assert!(
            seq >= next[src],
            "from {src}: seq {seq} after {}",
            next[src]
        );
        next[src] = seq + 1;
        let (dst, tag, len) = p[src][seq];
        assert_eq!((dst, tag, len as u64), (me, st.tag, st.bytes));
        for (i, &b) in buf[8..len].iter().enumerate() {
            assert_eq!(
                b,
                byte(src, seq, i + 8),
                "from {src} seq {seq} byte {}",
                i + 8
            );
        }
    }
    e.wait_until(|e| sends.iter().all(|&s| e.is_done(s)))?;
    for s in sends {
        e.release(s);
    }
    Ok(())
}

fn collectives(e: &mut Engine) -> Result<(), MsgError> {
    let (me, n) = (e.rank(), e.size());
    let mut world = Comm::new((0..n).collect(), n, me, 0);
    let count = 300_000usize;
    let mut acc: Vec<u8> = (0..count as u64)
        .flat_map(|i| (i * (me as u64 + 1)).to_ne_bytes())
        .collect();
    coll::allreduce(e, &mut world, &mut acc, Type::Uint64, Op::Sum)?;
    let factor = (n * (n + 1) / 2) as u64;
    for (i, c) in acc.chunks(8).enumerate().step_by(997) {
        assert_eq!(u64::from_ne_bytes(c.try_into().unwrap()), i as u64 * factor);
    }
    for root in 0..n {
        let mut b: Vec<u8> = if me == root {
            (0..400_000).map(|i| (i * 3 + root) as u8).collect()
        } else {
            vec![0; 400_000]
        };
        coll::bcast(e, &mut world, &mut b, root)?;
        assert!(b
            .iter()
            .enumerate()
            .all(|(i, &x)| x == (i * 3 + root) as u8));
    }
    let block = 50_000;
    let send: Vec<u8> = (0..n * block)
        .map(|i| (me * 17 + i / block) as u8)
        .collect();
    let mut recv = vec![0u8; n * block];
    let counts = vec![block; n];
    let displs: Vec<usize> = (0..n).map(|r| r * block).collect();
    unsafe {
        coll::alltoallv(
            e,
            &mut world,
            send.as_ptr(),
            &counts,
            &displs,
            recv.as_mut_ptr(),
            &counts,
            &displs,
        )?
    };
    for r in 0..n {
        assert!(recv[r * block..(r + 1) * block]
            .iter()
            .all(|&x| x == (r * 17 + me) as u8));
    }
    coll::barrier(e, &mut world)
}

#[test]
fn every_transport_under_random_traffic() {
    if in_rank() {
        let mut e = Engine::from_env().unwrap();
        traffic(&mut e).unwrap();
        // Rank 0 has a core, an l3 and a remote peer: every transport must have carried data.
        let st = e.stats();
        if e.rank() == 0 {
            assert!(st.eager > 0 && st.pipelined > 0, "{st:?}");
            assert_eq!(st.single_copy > 0, e.single_copy_available(), "{st:?}");
        }
        collectives(&mut e).unwrap();
        e.mark_finalized();
        return;
    }
    let out = run("every_transport_under_random_traffic", spec(4, false));
    assert_all_exited_0(&out);
}

/// Payload of message `seq` from the stale-stamp test: at the start of each 32-byte half line
/// after the header (record layout: engine::Rec, a 32-byte header, then the payload in 32-byte
/// units; records start on any half line), the stamp a header there would carry one lap
/// later; elsewhere a byte pattern. `at` is the record's ring position, `cap` the ring size.
fn stamp_lookalikes(len: usize, at: u64, cap: u64, seq: usize) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len).map(|i| byte(0, seq, i)).collect();
    let mut half = 32;
    while half - 32 + 8 <= len as u64 {
        let off = (half - 32) as usize;
        p[off..off + 8].copy_from_slice(&(at + half + cap + 1).to_le_bytes());
        half += 32;
    }
    p
}

/// Payload length of message `seq` in the stale-stamp test: varied, so that records do not
/// start on the same lines lap after lap.
fn lookalike_len(seq: usize) -> usize {
    100 + seq * 37 % 400
}

/// Ring positions of `count` records (payload lengths from `lookalike_len`) sent back to back
/// on an empty ring of `cap` bytes (a record that does not fit before the end pads to it).
fn record_positions(count: usize, cap: u64) -> Vec<u64> {
    let mut head = 0;
    (0..count)
        .map(|seq| {
            let size = 32 + (lookalike_len(seq) as u64).div_ceil(32) * 32;
            if cap - head % cap < size {
                head += cap - head % cap;
            }
            head += size;
            head - size
        })
        .collect()
}

#[test]
fn payload_that_looks_like_a_stamp_is_never_taken_for_a_record() {
    const COUNT: usize = 5000;
    let cap = 64 * 1024;
    if in_rank() {
        let mut e = Engine::from_env().unwrap();
        let at = record_positions(COUNT, cap);
        if e.rank() == 0 {
            for (seq, &p) in at.iter().enumerate() {
                let m = stamp_lookalikes(lookalike_len(seq), p, cap, seq);
                e.send(&m, 1, 0, 5).unwrap();
            }
        } else {
            let mut b = vec![0u8; 1024];
            for (seq, &p) in at.iter().enumerate() {
                let st = e.recv(&mut b, 0, 0, 5).unwrap();
                let want = stamp_lookalikes(lookalike_len(seq), p, cap, seq);
                assert!(b[..st.bytes as usize] == want[..], "message {seq} differs");
            }
        }
        let mut world = Comm::new((0..e.size()).collect(), e.size(), e.rank(), 0);
        coll::barrier(&mut e, &mut world).unwrap();
        e.mark_finalized();
        return;
    }
    let out = run(
        "payload_that_looks_like_a_stamp_is_never_taken_for_a_record",
        spec(2, false),
    );
    assert_all_exited_0(&out);
}

#[test]
fn oversubscribed_ranks_sleep_instead_of_spinning() {
    if in_rank() {
        let mut e = Engine::from_env().unwrap();
        // Almost no spinning: every wait goes to the futex.
        e.spin.polls = 2;
        e.spin.yields = 0;
        let (me, n) = (e.rank(), e.size());
        let mut token = [0u8; 8];
        for lap in 0..300u64 {
            if me == 0 {
                token = (lap * n as u64).to_le_bytes();
                e.send(&token, 1, 0, 1).unwrap();
                e.recv(&mut token, (n - 1) as i32, 0, 1).unwrap();
                assert_eq!(u64::from_le_bytes(token), lap * n as u64 + n as u64 - 1);
            } else {
                e.recv(&mut token, (me - 1) as i32, 0, 1).unwrap();
                let v = u64::from_le_bytes(token) + 1;
                e.send(&v.to_le_bytes(), (me + 1) % n, 0, 1).unwrap();
            }
        }
        traffic(&mut e).unwrap();
        let mut world = Comm::new((0..n).collect(), n, me, 0);
        coll::barrier(&mut e, &mut world).unwrap();
        // Five ranks on one PU: waiting means sleeping, not spinning.
        assert!(e.stats().sleeps > 0, "{:?}", e.stats());
        e.mark_finalized();
        return;
    }
    let start = Instant::now();
    let out = run(
        "oversubscribed_ranks_sleep_instead_of_spinning",
        spec(5, true),
    );
    assert_all_exited_0(&out);
    assert!(start.elapsed() < Duration::from_secs(240));
}

/// Alltoall(v) over two "packages" of four ranks: the exchange runs in the order that spreads
/// package crossings over the steps (not rank order), and every block still arrives right.
#[test]
fn alltoall_in_the_spread_exchange_order() {
    if in_rank() {
        let mut e = Engine::from_env().unwrap();
        let (me, n) = (e.rank(), e.size());
        let mut world = Comm::new((0..n).collect(), n, me, 0);
        let keys: Vec<[u32; shm::NKEYS]> = (0..n).map(|r| e.keys(r)).collect();
        let order = coll::exchange_order(&keys);
        assert_ne!(
            order,
            (0..n).collect::<Vec<_>>(),
            "the order differs from rank order"
        );
        for block in [5_000usize, 70_000] {
            let send: Vec<u8> = (0..n * block)
                .map(|i| (me * 31 + (i / block) * 7 + i % 251) as u8)
                .collect();
            let mut recv = vec![0u8; n * block];
            unsafe {
                coll::alltoall(
                    &mut e,
                    &mut world,
                    send.as_ptr(),
                    block,
                    recv.as_mut_ptr(),
                    block,
                )
            }
            .unwrap();
            for r in 0..n {
                for i in (0..block).step_by(97) {
                    let want = (r * 31 + me * 7 + (me * block + i) % 251) as u8;
                    assert_eq!(recv[r * block + i], want, "block {block} from {r} byte {i}");
                }
            }
        }
        coll::barrier(&mut e, &mut world).unwrap();
        e.mark_finalized();
        return;
    }
    let mut job = spec(8, false);
    job.keys = (0..8u32).map(|r| [r / 4, r / 4, r / 4, r, r]).collect();
    let out = run("alltoall_in_the_spread_exchange_order", job);
    assert_all_exited_0(&out);
}

#[test]
fn a_dying_rank_fails_the_others() {
    if in_rank() {
        let mut e = Engine::from_env().unwrap();
        let mut world = Comm::new((0..e.size()).collect(), e.size(), e.rank(), 0);
        coll::barrier(&mut e, &mut world).unwrap();
        if e.rank() == 2 {
            std::process::abort();
        }
        let mut b = [0u8; 4];
        match e.recv(&mut b, 2, 0, 0) {
            Err(MsgError::Aborted { rank: 2, .. }) => std::process::exit(3),
            other => panic!("receive from a dead rank returned {other:?}"),
        }
    }
    let start = Instant::now();
    let out = run("a_dying_rank_fails_the_others", spec(3, false));
    let f = out.failure.expect("the job failed");
    assert!(f.contains("rank 2") && f.contains("signal 6"), "{f}");
    assert_eq!(out.ends[0], RankEnd::Exited(3));
    assert_eq!(out.ends[1], RankEnd::Exited(3));
    assert_eq!(out.ends[2], RankEnd::Signaled(6));
    assert_eq!(out.status, 134);
    // The others saw the failure themselves, well before the 20 s grace ran out.
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn bad_segments_are_refused() {
    if in_rank() {
        return;
    }
    let f = tempfile_fd(b"not a huddle segment at all, just some bytes");
    assert!(huddle_msg::shm::Segment::attach(f).is_err());
    let mut bad = spec(2, false);
    bad.classes.pop();
    assert!(huddle_msg::shm::Segment::create(&bad).is_err());
}

fn tempfile_fd(content: &[u8]) -> i32 {
    use std::io::Write;
    use std::os::fd::IntoRawFd;
    let path = std::env::temp_dir().join(format!("huddle-msg-bad-{}", std::process::id()));
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(content).unwrap();
    let f = std::fs::File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    f.into_raw_fd()
}

/// Single copies shared by both ranks: more large sends than copy slots, received in reverse
/// order (the last ones find no slot and the receiver copies them alone; waiting for a slot
/// would deadlock here), a truncated receive, and receives posted before the sends.
#[test]
fn cooperative_single_copy() {
    const MSGS: usize = 40;
    const LEN: usize = 300_000;
    if in_rank() {
        let mut e = Engine::from_env().unwrap();
        assert_eq!(e.size(), 2);
        let me = e.rank();
        let fill = |seq: usize| -> Vec<u8> { (0..LEN).map(|i| byte(0, seq, i)).collect() };
        if me == 0 {
            let bufs: Vec<Vec<u8>> = (0..MSGS).map(fill).collect();
            let ids: Vec<usize> = bufs
                .iter()
                .enumerate()
                .map(|(t, b)| unsafe { e.isend(b.as_ptr(), LEN as u64, 1, 0, t as i32) })
                .collect();
            for id in ids {
                assert_eq!(e.wait(id).unwrap().error, 0);
            }
            assert!(e.stats().single_copy >= MSGS as u64);
            // Second phase: blocking sends into receives posted with irecv.
            let again = fill(7);
            for t in 0..4 {
                e.send(&again, 1, 0, 100 + t).unwrap();
            }
        } else {
            for t in (0..MSGS).rev() {
                // Message 5 lands in a buffer that is too small: the first bytes, truncated.
                let cap = if t == 5 { LEN / 3 + 1 } else { LEN };
                let mut b = vec![0u8; cap];
                let st = e.recv(&mut b, 0, 0, t as i32).unwrap();
                assert_eq!(st.bytes as usize, cap.min(LEN));
                assert_eq!(st.error, if t == 5 { 15 } else { 0 });
                assert!(b == fill(t)[..cap], "message {t}");
            }
            let mut bufs = vec![vec![0u8; LEN]; 4];
            let ids: Vec<usize> = bufs
                .iter_mut()
                .enumerate()
                .map(|(t, b)| unsafe {
                    e.irecv(b.as_mut_ptr(), LEN as u64, 0, 0, 100 + t as i32, None)
                })
                .collect();
            for id in ids {
                assert_eq!(e.wait(id).unwrap().error, 0);
            }
            assert!(bufs.iter().all(|b| *b == fill(7)));
        }
        let mut world = Comm::new(vec![0, 1], 2, me, 0);
        coll::barrier(&mut e, &mut world).unwrap();
        e.mark_finalized();
        return;
    }
    let mut job = spec(2, false);
    // Both pairs remote: single copy from 1000 bytes.
    job.classes = vec![Class::Core, Class::Remote, Class::Remote, Class::Core];
    let out = run("cooperative_single_copy", job);
    assert_all_exited_0(&out);
}
