//! A program's processes and threads, read from /proc (the detector attaches to them, the
//! manager pins them and reads their CPU time).
//!
//! Only /proc/PID/stat, /proc/PID/task/ and /proc/PID/task/TID/stat are read: plain files the
//! kernel itself guards, never the symlinks (cwd, root, exe, fd) that could lead elsewhere.

use std::collections::BTreeSet;
use std::path::Path;

/// The fields of /proc/.../stat huddle uses.
#[derive(Clone, Debug, PartialEq)]
pub struct Stat {
    /// The command name: the text between the first '(' and the last ')'.
    pub comm: String,
    /// The state letter (R, S, D, Z, T, ...).
    pub state: char,
    /// The parent's process id.
    pub ppid: u32,
    /// utime + stime in clock ticks.
    pub cpu_ticks: u64,
    /// The CPU it last ran on.
    pub processor: u32,
}

/// Parses a stat line. The command may contain spaces and parentheses, so the fields after
/// it are found from the last ')'.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3 (state); field k is rest[k - 3].
    let field = |k: usize| rest.get(k - 3).and_then(|s| s.parse::<u64>().ok());
    Some(Stat {
        comm,
        state: rest.first()?.chars().next()?,
        ppid: field(4)? as u32,
        cpu_ticks: field(14)? + field(15)?,
        processor: field(39)? as u32,
    })
}

/// Reads and parses a stat file (/proc/PID/stat or /proc/PID/task/TID/stat); None if it
/// cannot be read (the task is gone) or does not parse.
pub fn read_stat(path: &Path) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(path).ok()?)
}

/// Field 22 of a stat line: when the process started, in clock ticks since boot. With the
/// pid it names one process for good, where the pid alone may be reused.
pub fn parse_start_ticks(text: &str) -> Option<u64> {
    let close = text.rfind(')')?;
    // The first field after the command is field 3.
    text.get(close + 1..)?
        .split_whitespace()
        .nth(22 - 3)?
        .parse()
        .ok()
}

/// When process `pid` started (clock ticks since boot); None when there is no such process.
pub fn start_ticks(pid: u32) -> Option<u64> {
    parse_start_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Thread ids of a process (empty if it is gone).
pub fn threads(pid: u32) -> Vec<u32> {
    let mut out: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    out.sort_unstable();
    out
}

/// The process and all its descendants, found by walking /proc once for parent links
/// (a launcher such as mpirun forks ranks that fork again).
pub fn process_tree(root: u32) -> Vec<u32> {
    let mut children: Vec<(u32, u32)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(st) = read_stat(&e.path().join("stat")) {
                children.push((st.ppid, pid));
            }
        }
    }
    let mut tree = BTreeSet::from([root]);
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(_, c) in children.iter().filter(|(pp, _)| *pp == p) {
            if tree.insert(c) {
                frontier.push(c);
            }
        }
    }
    if !Path::new(&format!("/proc/{root}")).exists() {
        tree.remove(&root);
    }
    tree.into_iter().collect()
}

/// The (process, thread) pairs of `root` and every process below it that huddle may watch
/// ([`ours`]): under Slurm, a job's ranks below root's slurmstepd.
pub fn watched_tasks(root: u32) -> Vec<TaskId> {
    process_tree(root)
        .into_iter()
        .filter(|&p| ours(p))
        .flat_map(|p| threads(p).into_iter().map(move |t| (p, t)))
        .collect()
}

/// A task as (process id, thread id).
pub type TaskId = (u32, u32);

/// What changed from one listing of tasks to the next: those that started and those that
/// ended, each in order.
pub fn listing_changes(
    before: &BTreeSet<TaskId>,
    now: &BTreeSet<TaskId>,
) -> (Vec<TaskId>, Vec<TaskId>) {
    (
        now.difference(before).copied().collect(),
        before.difference(now).copied().collect(),
    )
}

/// Clock ticks per second, for converting stat CPU times.
pub fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// CPU seconds this process (huddle itself) has used, all its threads, to the nanosecond:
/// /proc/self/stat counts clock ticks (10 ms), and huddle's CPU over a short run is often
/// less than one (run.json said 0.0).
pub fn own_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer for clock_gettime.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// The real, effective and saved user and group ids of a /proc/PID/status text.
pub fn parse_ids(status: &str) -> Option<([u32; 3], [u32; 3])> {
    let ids = |key: &str| -> Option<[u32; 3]> {
        let line = status.lines().find_map(|l| l.strip_prefix(key))?;
        let mut f = line.split_whitespace().map(|v| v.parse::<u32>().ok());
        Some([f.next()??, f.next()??, f.next()??])
    };
    Some((ids("Uid:")?, ids("Gid:")?))
}

/// Whether `ids` (of [`parse_ids`]) belong to a process whose user is `uid` and group `gid`
/// by the kernel's rule for watching another process: all three of its user ids, and all
/// three of its group ids, are the caller's.
pub fn owned_by(ids: ([u32; 3], [u32; 3]), uid: u32, gid: u32) -> bool {
    ids.0.iter().all(|&u| u == uid) && ids.1.iter().all(|&g| g == gid)
}

/// Whether huddle may watch (perf events, /proc/PID/maps) and pin process `pid`: root may
/// act on every process; another user only on processes that are wholly its own. Under
/// Slurm the ranks' parent (slurmstepd) is root's while the ranks are the user's, so a
/// node manager watches the ranks and leaves their parent alone. Yama's ptrace_scope only
/// restricts attaching (PTRACE_MODE_ATTACH), which none of that needs.
pub fn ours(pid: u32) -> bool {
    // SAFETY: getters without preconditions.
    let (euid, uid, gid) = unsafe { (libc::geteuid(), libc::getuid(), libc::getgid()) };
    if euid == 0 {
        return Path::new(&format!("/proc/{pid}")).exists();
    }
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| parse_ids(&s))
        .is_some_and(|ids| owned_by(ids, uid, gid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_cpu_time_has_a_finer_grain_than_clock_ticks() {
        // Spin until 2 ms of CPU show: with tick accounting the first step seen is 10 ms.
        let start = own_cpu_seconds();
        let wall = std::time::Instant::now();
        let mut delta = 0.0;
        while delta < 0.002 && wall.elapsed().as_secs() < 5 {
            delta = own_cpu_seconds() - start;
        }
        assert!((0.002..0.009).contains(&delta), "{delta}");
    }

    #[test]
    fn stat_lines_with_odd_commands_parse() {
        let line = "4242 (a) b (c)) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 30 0 0 20 0 3 0 \
                    1000 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let st = parse_stat(line).unwrap();
        assert_eq!(st.comm, "a) b (c)");
        assert_eq!(
            (st.state, st.ppid, st.cpu_ticks, st.processor),
            ('S', 17, 280, 1)
        );
        assert!(parse_stat("garbage").is_none());
        assert_eq!(parse_start_ticks(line), Some(1000));
        assert_eq!(parse_start_ticks("garbage"), None);
    }

    #[test]
    fn finds_own_threads_and_children() {
        let me = std::process::id();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s2 = stop.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            while !s2.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        });
        // By its id, not by a count: the other tests of this binary start and end threads too.
        let tid = rx.recv().unwrap();
        assert!(threads(me).contains(&tid), "thread {tid} not listed");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        h.join().unwrap();

        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert!(process_tree(me).contains(&child.id()));
        assert!(ours(child.id()));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!process_tree(me).contains(&child.id()));
    }

    #[test]
    fn ids_come_from_the_status_lines_and_must_all_match() {
        let status = "Name:\tslurmstepd\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\t100\t100\t100\n";
        let ids = parse_ids(status).unwrap();
        assert_eq!(ids, ([1000; 3], [100; 3]));
        assert!(owned_by(ids, 1000, 100));
        assert!(!owned_by(ids, 1001, 100));
        assert!(!owned_by(ids, 1000, 0));
        // A setuid program keeps the caller's real id but not its effective one.
        let setuid = parse_ids("Uid:\t1000\t0\t0\t0\nGid:\t100\t100\t100\t100\n").unwrap();
        assert!(!owned_by(setuid, 1000, 100));
        assert!(parse_ids("Uid:\t1000\nGid:\t100\t100\t100\n").is_none());
        assert!(parse_ids("Name:\tx\n").is_none());
        assert!(ours(std::process::id()));
    }

    #[test]
    fn listing_changes_are_the_tasks_that_came_and_went() {
        let before: BTreeSet<(u32, u32)> = [(10, 10), (10, 11), (20, 20)].into();
        let now: BTreeSet<(u32, u32)> = [(10, 10), (20, 20), (20, 21), (30, 30)].into();
        assert_eq!(
            listing_changes(&before, &now),
            (vec![(20, 21), (30, 30)], vec![(10, 11)])
        );
        assert_eq!(listing_changes(&now, &now), (vec![], vec![]));
        let me = std::process::id();
        assert!(watched_tasks(me).contains(&(me, me)));
    }

    #[test]
    fn a_vanished_process_has_no_tree_and_no_threads() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(process_tree(pid).is_empty());
        assert!(threads(pid).is_empty());
        assert!(start_ticks(pid).is_none());
        assert!(start_ticks(std::process::id()).is_some());
        assert!(!ours(pid));
    }
}
