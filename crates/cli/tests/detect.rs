//! `huddle detect` end to end, on the ground-truth workloads (needs the agent library:
//! `cargo build -p agent`, which `make test` and `cargo test --workspace` do).

mod common;
use common::{json_file, Scratch, HUDDLE};
use std::path::{Path, PathBuf};
use std::process::Command;

fn agent() -> PathBuf {
    let dir = Path::new(HUDDLE).parent().expect("binary dir");
    let p = dir.join("libhuddle_agent.so");
    assert!(
        p.is_file(),
        "{} missing: run `cargo build -p agent` first",
        p.display()
    );
    p
}

fn tmp(name: &str) -> Scratch {
    Scratch::new("detect-test", name)
}

fn detect(dir: &Path, extra: &[&str], cmd: &[&str]) -> std::process::Output {
    detect_scoped(dir, extra, cmd, None)
}

/// `scope`: HUDDLE_PERF_SCOPE for the detector ("task": per-task perf events).
fn detect_scoped(
    dir: &Path,
    extra: &[&str],
    cmd: &[&str],
    scope: Option<&str>,
) -> std::process::Output {
    let out = dir.join("m.csv");
    let mut c = Command::new(HUDDLE);
    if let Some(s) = scope {
        c.env("HUDDLE_PERF_SCOPE", s);
    } else {
        c.env_remove("HUDDLE_PERF_SCOPE");
    }
    c.env("HUDDLE_AGENT", agent())
        .arg("detect")
        .arg("--out")
        .arg(&out)
        .args(extra)
        .arg("--")
        .args(cmd);
    c.output().expect("huddle runs")
}

/// Rank of each matrix row, through the workload's own list of task ids.
fn ranks(doc: &serde_json::Value, wl: &serde_json::Value, processes: bool) -> Vec<usize> {
    let ids: Vec<u64> = wl["tids"]
        .as_array()
        .expect("tids")
        .iter()
        .filter_map(|v| v.as_u64())
        .collect();
    let tasks = doc["tasks"].as_array().expect("tasks");
    doc["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            let t = &tasks[r.as_u64().expect("row index") as usize];
            let id = if processes {
                t["pid"].as_u64()
            } else {
                t["tid"].as_u64()
            };
            ids.iter()
                .position(|&x| Some(x) == id)
                .expect("every row is a workload task")
        })
        .collect()
}

fn distant_pairs(mode: &str) {
    distant_pairs_scoped(mode, None);
}

fn distant_pairs_scoped(mode: &str, scope: Option<&str>) {
    let d = tmp(&format!("dp-{mode}-{}", scope.unwrap_or("default")));
    let wl_dir = d.join("wl");
    let processes = mode == "processes";
    let extra: &[&str] = if processes { &["--processes"] } else { &[] };
    let flag = format!("--{mode}");
    let o = detect_scoped(
        &d,
        extra,
        &[
            HUDDLE,
            "workload",
            "distant-pairs",
            &flag,
            "8",
            "--seconds",
            "3",
            "--out-dir",
            wl_dir.to_str().unwrap(),
        ],
        scope,
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let doc = json_file(&d.join("m.json"));
    // Per-task events when asked for, or without the privilege for system-wide ones.
    let privileged = unsafe { libc::geteuid() } == 0
        || std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
            .is_ok_and(|p| p.trim().parse::<i32>().is_ok_and(|v| v <= 0));
    let want = if scope == Some("task") || !privileged {
        "per-task events"
    } else {
        "system-wide events"
    };
    let note = doc["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .find(|s| s["name"] == "perf page faults")
        .and_then(|s| s["note"].as_str())
        .unwrap_or_default();
    assert!(note.contains(want), "perf source note: {note}");
    let wl = json_file(&wl_dir.join("workload.json"));
    assert_eq!(
        wl["read_errors"].as_u64(),
        Some(0),
        "detection never changes the program's data"
    );
    let r = ranks(&doc, &wl, processes);
    assert_eq!(r.len(), 8, "the 8 workload tasks, launcher left out: {r:?}");
    let m = matrix::CommMatrix::read(&d.join("m.csv")).expect("matrix CSV");
    assert_eq!(m.n(), 8);
    for i in 0..8 {
        let best = (0..8)
            .filter(|&j| j != i)
            .max_by(|&a, &b| m.get(i, a).total_cmp(&m.get(i, b)))
            .unwrap();
        assert_eq!(
            r[best],
            (r[i] + 4) % 8,
            "rank {}: strongest partner rank {} (row {:?})",
            r[i],
            r[best],
            m.row(i)
        );
        assert!(m.get(i, best) > 0.0);
    }
    assert!(d.join("m.tasks.csv").is_file());
}

#[test]
fn distant_pairs_processes_strongest_partner_is_i_plus_4() {
    distant_pairs("processes");
}

#[test]
fn distant_pairs_threads_strongest_partner_is_i_plus_4() {
    distant_pairs("threads");
}

#[test]
fn distant_pairs_with_per_task_perf_events() {
    distant_pairs_scoped("processes", Some("task"));
}

fn same_checksum(mode: &str) {
    let d = tmp(&format!("checksum-{mode}"));
    let flag = format!("--{mode}");
    let plain = d.join("plain");
    let o = Command::new(HUDDLE)
        .args([
            "workload",
            "ring",
            &flag,
            "4",
            "--seconds",
            "1",
            "--out-dir",
            plain.to_str().unwrap(),
        ])
        .output()
        .expect("workload runs");
    assert!(o.status.success());
    let watched = d.join("watched");
    let o = detect(
        &d,
        &[],
        &[
            HUDDLE,
            "workload",
            "ring",
            &flag,
            "4",
            "--seconds",
            "1",
            "--out-dir",
            watched.to_str().unwrap(),
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let a = json_file(&plain.join("workload.json"));
    let b = json_file(&watched.join("workload.json"));
    assert_eq!(a["checksum"], b["checksum"]);
    assert_eq!(b["read_errors"].as_u64(), Some(0));
}

#[test]
fn checksum_is_the_same_with_and_without_detection_processes() {
    same_checksum("processes");
}

#[test]
fn checksum_is_the_same_with_and_without_detection_threads() {
    // Threads share private memory: the agent drops and restores it (userfaultfd).
    same_checksum("threads");
}

/// Compiles tests/NAME.c into `dir`.
fn compile_c(dir: &Path, name: &str) -> PathBuf {
    let bin = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/{name}.c"));
    let cc = Command::new("cc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-pthread", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .expect("cc runs");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    bin
}

/// A C program checks its own memory (heap, mmap, .bss, .data) while the agent drops and
/// restores its pages 20 times faster than by default, and meanwhile discards, moves, unmaps
/// and maps memory (over its .bss too), moves brk, reads into it with a system call, forks
/// (a child that exits while its agent re-arms), execs, and at the end registers a
/// userfaultfd of its own on its static data (crates/cli/tests/agent_torture.c).
fn agent_keeps_memory_intact(saved_by: &str, torture_env: &[(&str, &str)]) {
    agent_keeps_memory_intact_with(saved_by, None, torture_env);
}

/// The torture run with the agent at `agent_copy` (None: where it was built), the program
/// given `torture_env` (AGENT_TORTURE_CASE / AGENT_TORTURE_SKIP).
fn agent_keeps_memory_intact_with(
    saved_by: &str,
    agent_copy: Option<&str>,
    torture_env: &[(&str, &str)],
) {
    let env_name: String = torture_env
        .iter()
        .map(|(k, v)| format!("-{k}{v}"))
        .collect();
    let d = tmp(&format!(
        "torture-{saved_by}-{}{env_name}",
        agent_copy.unwrap_or("built")
    ));
    let bin = compile_c(&d, "agent_torture");
    let lib = match agent_copy {
        Some(name) => {
            let p = d.join(name);
            std::fs::copy(agent(), &p).unwrap();
            p
        }
        None => agent(),
    };
    // Under a time limit: a helper that waits on itself hangs the program for good.
    let mut c = Command::new("timeout");
    c.args(["-k", "5", "120"]).arg(HUDDLE);
    c.envs(torture_env.iter().copied());
    c.env("HUDDLE_AGENT", lib)
        .env(
            "HUDDLE_AGENT_MOVE",
            if saved_by == "move" { "1" } else { "0" },
        )
        .args([
            "detect",
            "--rearm-floor",
            "10000",
            "--steady-floor",
            "10000",
            "--out",
        ])
        .arg(d.join("m.csv"))
        .arg("--")
        .arg(&bin)
        .arg("3");
    let o = c.output().expect("huddle runs");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(
        o.status.success() && out.contains("all checks held"),
        "{out}{err}"
    );
    let doc = json_file(&d.join("m.json"));
    // The agent saved pages the way asked (HUDDLE_AGENT_MOVE once never reached it); moving
    // needs Linux 6.8.
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut v = release.split(|c: char| !c.is_ascii_digit());
    let (major, minor): (u32, u32) = (
        v.next().and_then(|x| x.parse().ok()).unwrap_or(0),
        v.next().and_then(|x| x.parse().ok()).unwrap_or(0),
    );
    let can_move = (major, minor) >= (6, 8);
    let how = format!(
        "pages saved by {}",
        if can_move { saved_by } else { "remap" }
    );
    let notes = doc["agent_notes"].to_string();
    assert!(notes.contains(&how), "{how}: {notes}");
    let stats = &doc["stats"];
    assert!(
        stats["rearmed_private"].as_u64().unwrap_or(0) > 100,
        "the agent dropped pages: {stats}"
    );
    // The program's .data (4 x 64 pages of initialised static words) became anonymous memory
    // the agent can re-arm, as its .bss is.
    assert!(
        stats["adopted_pages"].as_u64().unwrap_or(0) >= 256,
        "the agent adopted the static data: {stats}"
    );
}

/// Compiles tests/NAME.c into `d` and runs it under `huddle detect [EXTRA] --out d/m.csv`
/// with a time limit; asserts that both exit 0 and returns their stdout and stderr.
fn detect_c_program(d: &Path, name: &str, extra: &[&str]) -> (String, String) {
    detect_c_program_with(d, name, extra, &[])
}

/// detect_c_program, the program given `args`.
fn detect_c_program_with(d: &Path, name: &str, extra: &[&str], args: &[&str]) -> (String, String) {
    let bin = compile_c(d, name);
    let o = Command::new("timeout")
        .args(["-k", "5", "60"])
        .arg(HUDDLE)
        .env("HUDDLE_AGENT", agent())
        .arg("detect")
        .args(extra)
        .arg("--out")
        .arg(d.join("m.csv"))
        .arg("--")
        .arg(&bin)
        .args(args)
        .output()
        .expect("huddle runs");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert!(o.status.success(), "{out}{err}");
    (out, err)
}

/// A program with more static TLS than a helper's own stack (1 MiB per thread, as a Fortran
/// OpenMP program's THREADPRIVATE arrays): the agent's helpers start (their stacks hold the
/// TLS glibc puts there) and re-arm its shared static array. Before, pthread_create refused
/// the helpers' 256-KiB stacks, the agent re-armed nothing, and NPB SP class A showed 0
/// events in 12,000 faults.
#[test]
fn agent_helpers_start_beside_a_large_static_tls() {
    let d = tmp("big-tls");
    let (out, err) = detect_c_program(&d, "big_tls", &[]);
    assert!(out.contains("done"), "{out}{err}");
    assert!(!err.contains("could not start"), "{err}");
    let doc = json_file(&d.join("m.json"));
    let stats = &doc["stats"];
    assert_eq!(stats["agent_errors"].as_u64(), Some(0), "{stats}");
    assert!(
        stats["rearmed_private"].as_u64().unwrap_or(0) > 0,
        "the agent re-armed the program's pages: {stats}"
    );
    assert!(
        stats["comm_events"].as_u64().unwrap_or(0) > 0,
        "the threads' sharing was seen: {stats}"
    );
}

/// KiB after `what` in a line "WHAT N KiB" of huge_pages.c's output (-1: no such line).
fn kib_after(out: &str, what: &str) -> i64 {
    out.lines()
        .find_map(|l| {
            l.strip_prefix(what)?
                .strip_suffix(" KiB")?
                .parse::<i64>()
                .ok()
        })
        .unwrap_or(-1)
}

/// Whether the agent took pages out by UFFDIO_MOVE (Linux 6.8), which whole huge pages need
/// (said in its note; the mremap path before 6.8 splits a sampled huge page).
fn saved_by_move(doc: &serde_json::Value) -> bool {
    let moved = doc["agent_notes"]
        .to_string()
        .contains("pages saved by move");
    if !moved {
        eprintln!("whole huge pages not checked: the agent did not take pages out by move here");
    }
    moved
}

/// huge_pages.c run plainly with `args`: the KiB of huge pages it got after its fill, or
/// None (with a note) where a plain run gets none here (THP `never`, no free huge page).
fn huge_kib_plain(d: &Path, args: &[&str]) -> Option<i64> {
    let bin = compile_c(d, "huge_pages");
    let plain = Command::new(&bin)
        .args(args)
        .output()
        .expect("the program runs");
    let out = String::from_utf8_lossy(&plain.stdout).into_owned();
    assert!(plain.status.success(), "{out}");
    let kib = kib_after(&out, "huge pages after the fill: ");
    if kib <= 0 {
        eprintln!("not compared: a plain run got no huge pages here ({out})");
        return None;
    }
    Some(kib)
}

/// A program that asks for transparent huge pages (MADV_HUGEPAGE, crates/cli/tests/huge_pages.c)
/// gets them under the agent as in a plain run: the agent registers such a mapping only once
/// the program has filled it (re-arming it afterwards: see the next test). Before, its first
/// touches went through the agent 4 KiB at a time and it had no huge page at all.
#[test]
fn a_program_that_asks_for_huge_pages_gets_them_under_the_agent() {
    let d = tmp("huge-pages");
    let Some(plain_kib) = huge_kib_plain(&d, &[]) else {
        return;
    };
    let (out, err) = detect_c_program(&d, "huge_pages", &[]);
    assert!(out.contains("all words held"), "{out}{err}");
    let kib = kib_after(&out, "huge pages after the fill: ");
    assert!(
        kib >= plain_kib / 2,
        "huge pages under the agent {kib} KiB, plain {plain_kib} KiB: {out}"
    );
    let stats = &json_file(&d.join("m.json"))["stats"];
    assert_eq!(stats["agent_errors"].as_u64(), Some(0), "{stats}");
}

/// Steady re-arming keeps a program's huge pages: the agent takes a sampled huge page out
/// whole and moves it back whole (the agent's huge module). One thread works on the array
/// for 3 s (no page is shared, so nothing is asked about one page at a time; the agent
/// registers the array up to 2 s after the fill). Before, every re-arm split the huge page it
/// landed in, and at 10,000 re-arms a second none was left.
#[test]
fn steady_rearming_keeps_huge_pages_whole() {
    let d = tmp("huge-pages-alone");
    let Some(plain_kib) = huge_kib_plain(&d, &["alone"]) else {
        return;
    };
    let floors = ["--rearm-floor", "10000", "--steady-floor", "10000"];
    let (out, err) = detect_c_program_with(&d, "huge_pages", &floors, &["alone"]);
    assert!(out.contains("all words held"), "{out}{err}");
    let doc = json_file(&d.join("m.json"));
    let stats = &doc["stats"];
    assert_eq!(stats["agent_errors"].as_u64(), Some(0), "{stats}");
    if !saved_by_move(&doc) {
        return;
    }
    let huge = stats["rearmed_huge"].as_u64().unwrap_or(0);
    assert!(huge >= 20, "whole huge pages re-armed: {stats}");
    // Read while the agent re-arms: up to HUGE_SLOTS (8) huge pages may be out then, 16 MiB.
    let end = kib_after(&out, "huge pages at the end: ");
    assert!(
        end >= plain_kib / 4,
        "huge pages at the end {end} KiB of {plain_kib} after {huge} whole re-arms: {out}"
    );
}

/// A program that locks memory (mlock) asks that its pages never fault, and a locked page
/// cannot be dropped: the agent, which re-armed pages until then, steps back for the rest of
/// the run and says so, and the program's data stays whole. Before, mlockall also locked the
/// agent's own vault and every drop failed, silently.
#[test]
fn the_agent_steps_back_when_the_program_locks_memory() {
    let d = tmp("lock-memory");
    let floors = ["--rearm-floor", "2000", "--steady-floor", "2000"];
    let (out, err) = detect_c_program(&d, "lock_memory", &floors);
    assert!(out.contains("done"), "{out}{err}");
    assert!(err.contains("the program locked memory"), "{err}");
    let doc = json_file(&d.join("m.json"));
    let stats = &doc["stats"];
    assert!(
        stats["rearmed_private"].as_u64().unwrap_or(0) > 0,
        "the agent re-armed pages before the lock: {stats}"
    );
    assert_eq!(stats["agent_errors"].as_u64(), Some(0), "{stats}");
    let notes = doc["agent_notes"].to_string();
    assert!(notes.contains("locked memory"), "{notes}");
}

/// A copy of the agent under another name still knows its own data: its helpers use it, and
/// re-arming it made them wait on themselves (every run hung before; found by matching the
/// agent by file name only).
#[test]
fn a_renamed_agent_never_rearms_its_own_data() {
    agent_keeps_memory_intact_with("move", Some("renamed-agent.so"), &[]);
}

#[test]
fn agent_keeps_memory_intact_when_moving_pages() {
    agent_keeps_memory_intact("move", &[]);
}

/// Heap arrays in transparent huge pages, which the agent re-arms whole (the huge module):
/// while one is out, the program discards and unmaps single pages of it, writes into it
/// from a system call and forks.
#[test]
fn agent_keeps_memory_intact_when_moving_huge_pages() {
    agent_keeps_memory_intact("move", &[("AGENT_TORTURE_HUGE", "1")]);
}

/// Taking pages out with mremap (kernels before 6.8, or HUDDLE_AGENT_MOVE=0). Saving them
/// by copy and MADV_DONTNEED, the way before, lost a page in 2 runs of 40 when every pass
/// moved a mapping while the agent dropped pages (two other programs busy on the 2 cores;
/// docs/detect.md, "Taking pages out before Linux 6.8").
#[test]
fn agent_keeps_memory_intact_when_remapping_pages() {
    agent_keeps_memory_intact("remap", &[]);
}

/// Threads move their mappings about while the agent has pages of them out, so that the
/// kernel queues a thread's REMAP after another thread has moved a mapping into the range it
/// left (crates/cli/tests/mremap_race.c). Every page must stay with its own mapping. Before
/// vault::remap_slots checked where a REMAP's holes went, the late REMAP carried the other
/// mapping's pages off and its thread read zeros: 8 runs of 8 failed on the 2-core VM.
#[test]
fn agent_keeps_pages_with_their_mapping_when_remaps_queue_late() {
    let d = tmp("mremap-race");
    let floors = ["--rearm-floor", "10000", "--steady-floor", "10000"];
    let (out, err) = detect_c_program_with(&d, "mremap_race", &floors, &["3"]);
    assert!(out.contains("all checks held"), "{out}{err}");
    let stats = &json_file(&d.join("m.json"))["stats"];
    assert!(
        stats["rearmed_private"].as_u64().unwrap_or(0) > 100,
        "the agent took pages out: {stats}"
    );
}

/// Fork children that exec, and threads that exit, while their agent re-arms
/// (crates/cli/tests/exec_child.c): execve reads the thread's robust futex list head after
/// ending the agent's helpers, and exit clears the thread's TID word without waiting for a
/// fault, so those pages must never be out. Before the robust module, a child hung in
/// execve in every run (5 of 5; the torture's mix met it in 3 of 377 runs);
/// threads that exited with the page out ended all the same (5 seen, Linux 6.18).
/// Threads that exit holding a robust mutex: the kernel marks its owner dead from the
/// thread's robust list, and does not wait for a fault then; before the entries' pages were
/// kept, the next lock timed out in every run (3 of 3, the first thread each time).
/// Threads that lock one and end through glibc at once (robust-return), before the agent
/// looks at the robust lists: their mutex's page may be out while they hold it (1 to 6 of
/// the 8 threads in each of 30 looped runs), and must be back when they end; before the
/// thread_end module the first thread's mutex timed out in every run (6 of 6).
#[test]
fn fork_children_exec_and_threads_exit_while_their_agent_rearms() {
    let d = tmp("exec-child");
    let floors = ["--rearm-floor", "10000", "--steady-floor", "10000"];
    for (mode, want) in [
        (
            "exec",
            "8 children ended, 0 with their descriptor's page out",
        ),
        (
            "exit",
            "8 threads ended, 0 with their descriptor's page out",
        ),
        ("robust", "8 threads ended, 0 with their mutex's page out"),
        ("robust-return", "8 threads ended, "),
    ] {
        let (out, err) = detect_c_program_with(&d, "exec_child", &floors, &["8", mode]);
        assert!(out.contains(want), "{mode}: {out}{err}");
        let stats = &json_file(&d.join("m.json"))["stats"];
        assert!(
            stats["rearmed_private"].as_u64().unwrap_or(0) > 0,
            "{mode}: the agents took pages out: {stats}"
        );
    }
}

/// A program whose mremap drops its new address, as UCX's memory hooks (libucm, loaded by
/// MPICH's and Open MPI's UCX transports) do for the whole process
/// (crates/cli/tests/hooked_mremap.c): the agent's own calls went through it, and its
/// adoption of `.data` moved the copy to address 0 (pages 0 to 0x11000 mapped; with the
/// copy probe then reading from 0x1000, the program hung). The agent now makes its memory
/// system calls itself (crates/agent/src/sys.rs).
#[test]
fn a_program_that_hooks_mremap_keeps_its_data_where_it_was() {
    let d = tmp("hooked-mremap");
    let (out, err) = detect_c_program_with(&d, "hooked_mremap", &[], &[]);
    assert!(out.contains("all checks held"), "{out}{err}");
    let stats = &json_file(&d.join("m.json"))["stats"];
    assert!(
        stats["adopted_pages"].as_u64().unwrap_or(0) > 0,
        "the agent adopted .data: {stats}"
    );
}

/// The agent skips most of a scan while the maps text stays the same; a mapping made after
/// its first second (its only shared memory) must still be found and re-armed before the
/// periodic whole scan (every 4 s) would find it.
#[test]
fn a_mapping_made_later_is_rearmed() {
    let d = tmp("late-mapping");
    let bin = compile_c(&d, "late_mapping");
    let o = detect(&d, &[], &[bin.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stats = &json_file(&d.join("m.json"))["stats"];
    assert!(
        stats["rearmed_shared"].as_u64().unwrap_or(0) > 0,
        "the late shared mapping was re-armed: {stats}"
    );
}

/// SIGUSR1 pauses re-arming: after it, the agent takes out only what one tick had in hand.
#[test]
fn sigusr1_pauses_rearming_and_sigusr2_resumes_it() {
    let d = tmp("pause");
    let run = |signals: &[(u64, i32)], name: &str| {
        let mut c = Command::new(HUDDLE);
        c.env("HUDDLE_AGENT", agent())
            .args(["detect", "--rearm-floor", "1000", "--steady-floor", "1000"])
            .arg("--out")
            .arg(d.join(format!("{name}.csv")))
            .args(["--", HUDDLE, "workload", "ring", "--threads", "2"])
            .args(["--seconds", "3", "--out-dir"])
            .arg(d.join(name))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let mut child = c.spawn().expect("huddle runs");
        for &(at_ms, sig) in signals {
            std::thread::sleep(std::time::Duration::from_millis(at_ms));
            // SAFETY: kill has no memory preconditions; the child is ours and alive.
            unsafe { libc::kill(child.id() as i32, sig) };
        }
        assert!(child.wait().expect("huddle exits").success());
        let stats = &json_file(&d.join(format!("{name}.json")))["stats"];
        stats["rearmed_private"].as_u64().expect("rearmed_private")
    };
    // Paused from 0.5 s to the end (3 s and more), against paused from 0.5 s to 1.5 s.
    let paused = run(&[(500, libc::SIGUSR1)], "paused");
    let resumed = run(&[(500, libc::SIGUSR1), (1000, libc::SIGUSR2)], "resumed");
    assert!(paused > 0, "re-arming ran before the pause");
    // At 1000 pages/s, 0.5 s of re-arming plus a second's budget in hand at most.
    assert!(
        paused < 1600,
        "paused after 0.5 s yet {paused} pages re-armed"
    );
    assert!(
        resumed > paused + 500,
        "resumed after 1.5 s: {resumed} re-armed, paused for good: {paused}"
    );
}

/// While the pattern holds, the rate part of the agents' budget drops with the floor: at
/// 5 % of pages per second and floors 200 -> 2, a steady two-thread ring re-arms far fewer
/// pages than with the floor held at 200 (which keeps the rate at 5 % too).
#[test]
fn the_rearm_rate_drops_with_the_floor_while_the_pattern_holds() {
    let d = tmp("steady-rate");
    let run = |steady: &str| {
        let o = Command::new(HUDDLE)
            .env("HUDDLE_AGENT", agent())
            .args(["detect", "--rearm-rate", "0.05", "--rearm-floor", "200"])
            .args(["--steady-floor", steady, "--out"])
            .arg(d.join(format!("{steady}.csv")))
            .args(["--", HUDDLE, "workload", "ring", "--threads", "2"])
            .args(["--seconds", "4", "--out-dir"])
            .arg(d.join(steady))
            .output()
            .expect("huddle runs");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let stats = json_file(&d.join(format!("{steady}.json")))["stats"].clone();
        let pages = stats["rearmed_private"].as_u64().expect("rearmed_private")
            + stats["rearmed_shared"].as_u64().expect("rearmed_shared");
        (pages, stats)
    };
    let (held, held_stats) = run("200");
    let (dropped, dropped_stats) = run("2");
    // 1.5 s at the start rate, then 1/100 of it: under half of the run held at 5 %.
    assert!(
        dropped * 2 < held,
        "steady floor 2: {dropped} pages ({dropped_stats}); held at 200: {held} ({held_stats})"
    );
    assert!(dropped > 0, "re-arming ran at the start");
}

#[test]
fn command_not_found_exits_127() {
    let d = tmp("notfound");
    let o = detect(&d, &[], &["huddle-no-such-command-xyz"]);
    assert_eq!(o.status.code(), Some(127));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("huddle-no-such-command-xyz: command not found"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
}

#[test]
fn crashing_target_still_writes_the_matrix_and_passes_its_status_on() {
    let d = tmp("crash");
    let wl_dir = d.join("wl");
    let script = format!(
        "{} workload distant-pairs --processes 4 --seconds 1 --out-dir {} >/dev/null; kill -SEGV $$",
        HUDDLE,
        wl_dir.display()
    );
    let o = detect(&d, &[], &["sh", "-c", &script]);
    assert_eq!(
        o.status.code(),
        Some(128 + 11),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let m = matrix::CommMatrix::read(&d.join("m.csv")).expect("matrix written");
    assert!(m.n() >= 4, "the workload's tasks are in it");
    assert!(
        m.total() > 0.0,
        "and what they communicated before the crash"
    );
    let doc = json_file(&d.join("m.json"));
    assert_eq!(doc["exit_status"].as_i64(), Some(139));
}

#[test]
fn bad_block_size_is_bad_input() {
    let d = tmp("block");
    let o = detect(&d, &["--block-size", "100"], &["true"]);
    assert_eq!(o.status.code(), Some(2));
}
