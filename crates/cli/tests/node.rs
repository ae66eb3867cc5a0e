//! `huddle node` without MPI: a board written the way the PMPI agent writes it, for a "rank"
//! that is a `sleep` started by a shell (the launcher's daemon). The node manager finds the
//! rank of its host, manages it until its slot says finalized, never signals it, writes its
//! node report and removes the board; a board with no rank of this host is refused.
//! (With real MPI ranks on two hosts: tests/node-managers.sh.)

mod common;
use common::{wait_for, Scratch, HUDDLE};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where a slot's host name starts (include/huddle/board.h, HOSTNAME_OFFSET).
const HOSTNAME_OFFSET: usize = 152;

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length, the last byte stays 0.
    assert_eq!(
        unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) },
        0
    );
    let end = buf.iter().position(|&b| b == 0).unwrap();
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// A board of a world of one rank: rank 0 is process `pid` on host `host`, in `state`
/// (1 running, 2 finalized).
fn write_board(path: &Path, pid: u32, host: &str, state: u64) {
    use simmer::board::{slot_size, HEADER_SIZE, MAGIC, VERSION};
    let ss = slot_size(1) as usize;
    let mut buf = vec![0u8; HEADER_SIZE + ss];
    let put = |buf: &mut Vec<u8>, off: usize, v: u64| {
        buf[off..off + 8].copy_from_slice(&v.to_le_bytes());
    };
    for (i, v) in [MAGIC, VERSION, HEADER_SIZE as u64, 1, ss as u64, 7, 1]
        .into_iter()
        .enumerate()
    {
        put(&mut buf, i * 8, v);
    }
    put(&mut buf, HEADER_SIZE, state);
    put(&mut buf, HEADER_SIZE + 8, pid as u64);
    put(&mut buf, HEADER_SIZE + 16, 0);
    let h = HEADER_SIZE + HOSTNAME_OFFSET;
    buf[h..h + host.len()].copy_from_slice(host.as_bytes());
    // Written in place, as the ranks do: the node manager keeps the file mapped.
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(path)
        .unwrap();
    f.write_all_at(&buf, 0).unwrap();
}

/// A "launcher daemon" (a shell) with one "rank" (a sleep); the rank's pid.
fn daemon_with_rank() -> (Child, u32) {
    let mut daemon = Command::new("sh")
        .args(["-c", "sleep 60 & wait"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    let rank = loop {
        let kids = detect::procs::process_tree(daemon.id());
        if let Some(&rank) = kids.iter().find(|&&p| p != daemon.id()) {
            break Some(rank);
        }
        if Instant::now() >= until {
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let Some(rank) = rank else {
        let _ = daemon.kill();
        let _ = daemon.wait();
        panic!("the daemon started no rank");
    };
    (daemon, rank)
}

fn node_json(dir: &Path) -> serde_json::Value {
    std::fs::read_to_string(dir.join("node.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null)
}

#[test]
fn manages_its_hosts_rank_until_it_finalizes_and_cleans_up() {
    let dir = Scratch::new("node", "finalize");
    let board = dir.join("job.board");
    let (mut daemon, rank) = daemon_with_rank();
    let host = host_name();
    write_board(&board, rank, &host, 1);
    let job = dir.join("report");
    let mut node = Command::new(HUDDLE)
        .args(["node", "--quiet", "--policy", "none", "--board"])
        .arg(&board)
        .arg("--job-report")
        .arg(&job)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let node_dir = job.join(format!("node-{}", manager::node::file_name_part(&host)));
    let until = Instant::now() + Duration::from_secs(10);
    while node_json(&node_dir)["state"] != "running" {
        assert!(Instant::now() < until, "no node.json saying running");
        assert!(
            node.try_wait().unwrap().is_none(),
            "huddle node ended early"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        node.try_wait().unwrap().is_none(),
        "huddle node must run while its rank runs"
    );
    write_board(&board, rank, &host, 2);
    let st = wait_for(&mut node, Duration::from_secs(15));
    let out = node.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(st.code(), Some(0), "{err}");
    let v = node_json(&node_dir);
    assert_eq!(v["state"], "done", "{v}");
    assert_eq!(v["stop"], "ranks ended", "{v}");
    assert_eq!(v["host"], host.as_str());
    assert_eq!(
        v["attached_to"],
        daemon.id(),
        "the session is on the ranks' parent"
    );
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", daemon.id())).unwrap();
    assert_eq!(v["attached_to_command"], comm.trim_end(), "{v}");
    assert_eq!(v["ranks"][0]["pid"], rank);
    assert!(node_dir.join("run.json").is_file() && node_dir.join("tasks.json").is_file());
    assert!(!board.exists(), "the board of a finished job is removed");
    // The rank was never signalled.
    assert!(
        Path::new(&format!("/proc/{rank}")).exists(),
        "the rank must run on"
    );
    unsafe { libc::kill(rank as i32, libc::SIGKILL) };
    daemon.wait().unwrap();
}

#[test]
fn refuses_a_board_without_a_rank_of_this_host() {
    let dir = Scratch::new("node", "elsewhere");
    let board = dir.join("job.board");
    write_board(&board, std::process::id(), "elsewhere-host", 1);
    let t0 = Instant::now();
    let out = Command::new(HUDDLE)
        .args(["node", "--quiet", "--board"])
        .arg(&board)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no running rank on this host") && err.contains("elsewhere-host"),
        "{err}"
    );
    assert!(t0.elapsed() < Duration::from_secs(15));
    assert!(
        board.exists(),
        "a board of other hosts' ranks is left alone"
    );
}

#[test]
fn a_missing_or_foreign_board_is_bad_input() {
    let dir = Scratch::new("node", "bad");
    let out = Command::new(HUDDLE)
        .args(["node", "--board"])
        .arg(dir.join("missing-dir/x.board"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no such board"), "{err}");
    let junk = dir.join("junk.board");
    std::fs::write(&junk, vec![7u8; 512]).unwrap();
    let out = Command::new(HUDDLE)
        .args(["node", "--board"])
        .arg(&junk)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not a huddle PMPI board"), "{err}");
}

/// The job page from node directories as `huddle node` leaves them and rank 0's matrix:
/// 4 ranks, pairs 0-2 and 1-3 talk, but hA ran 0,1 and hB 2,3 (both pairs cross).
#[test]
fn a_job_directory_gets_its_page_with_advice_for_the_next_run() {
    let dir = Scratch::new("node", "job-page");
    for (host, ranks) in [("hA", [0, 1]), ("hB", [2, 3])] {
        let d = dir.join(format!("node-{host}"));
        std::fs::create_dir(&d).unwrap();
        let ranks: Vec<serde_json::Value> = ranks
            .iter()
            .map(|r| serde_json::json!({"rank": r, "pid": 100 + r, "state": "finalized", "alive": false, "sent_bytes": 1000}))
            .collect();
        let v = serde_json::json!({
            "schema": "huddle.node/1", "state": "done", "host": host, "pid": 1,
            "started_unix": 1.0, "start_delay_s": 0.03, "ranks": ranks,
            "migrations": 2, "first_remap_s": 0.26, "duration_s": 3.0, "huddle_cpu_s": 0.02,
        });
        std::fs::write(d.join("node.json"), v.to_string()).unwrap();
    }
    std::fs::write(
        dir.join("rank-matrix.csv"),
        "0,0,5000,0\n0,0,0,4000\n5000,0,0,0\n0,4000,0,0\n",
    )
    .unwrap();
    // `huddle report DIR`, then the page it wrote.
    let render = || {
        let out = Command::new(HUDDLE)
            .args(["report", dir.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read_to_string(dir.join("index.html")).unwrap()
    };
    let page = render();
    assert!(page.contains("huddle job: 2 nodes, 4 ranks seen"), "{page}");
    assert!(page.contains("hA") && page.contains("hB"));
    // What ran sends both pairs across; the advice keeps each pair on one node.
    assert!(
        page.contains("<td class=l>what ran</td>"),
        "what ran is not the advice"
    );
    assert!(
        page.contains("100.0% less"),
        "nothing need cross the network"
    );
    assert!(
        page.contains("rank 0=hA") && page.contains("rank 2=hA"),
        "pair 0-2 on hA"
    );
    // No matrix: the page still comes, without advice.
    std::fs::remove_file(dir.join("rank-matrix.csv")).unwrap();
    let page = render();
    assert!(page.contains("No rank-matrix.csv") && page.contains("No advice"));
}
