//! The CPUs each manager of one machine pins its tasks on, so that two managers do not pin
//! theirs onto the same PUs: two jobs, or two job steps, on a node whose launcher binds
//! nothing (each manager would otherwise map its ranks onto the same first cores), or the
//! namespace hosts of the tests, which share one machine's CPUs.
//!
//! Each manager keeps one file in a directory that every manager of the machine sees
//! ([`DEFAULT_DIR`]: node-local, writable by every user, its sticky bit lets each remove only
//! its own files). The file is named by the manager's pid and holds its start time (so that a
//! reused pid is no claim) and the kernel CPU of each of its busy tasks pinned to one (renewed
//! at each decision, so a task that went idle gives its CPU back). Before a decision a manager
//! reads the other files and leaves their CPUs out; where fewer CPUs remain than it has busy
//! tasks it pins nothing for a while (others' busy tasks may go idle; unless it pinned its
//! tasks already), then decides on its share of the CPUs ([`share`]); where it has more busy
//! tasks than the machine has CPUs, no wait can help, and it decides on its share at once.
//! The decision, the pinning and the new claim are taken under an flock on the directory's
//! lock file, so two managers deciding at once do not take the same CPUs. The last manager
//! to leave removes the directory (and the files of managers that were killed).

use mapping::{Slot, Target};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use topology::OsCpu;

/// Where the managers of a machine keep their claims: /dev/shm is a tmpfs of the machine's
/// own, which every user may write.
pub const DEFAULT_DIR: &str = "/dev/shm/huddle-cpu-claims";

/// Busy tasks that other managers pinned, per kernel CPU.
pub type Taken = BTreeMap<u32, usize>;

/// This manager's entry in the claims directory; its file goes when this is dropped.
pub struct Claims {
    dir: PathBuf,
    own: PathBuf,
    pid: u32,
    start: u64,
    /// The CPUs of the last claim written (None: none yet).
    last: std::sync::Mutex<Option<Vec<u32>>>,
}

/// What other managers' claims leave one manager ([`Claims::narrow`]).
pub enum Narrowed {
    /// No other manager claims a CPU of the target.
    Whole,
    /// The target without the others' CPUs, and a line for the report.
    To(Target, String),
    /// Fewer CPUs are left than busy tasks, and a line for the report: pinned onto the
    /// others' CPUs, two programs' busy tasks would share PUs, which the scheduler avoids
    /// while they float. The run loop waits a while, then decides on this manager's share
    /// of the target ([`share`]), the third field.
    TooFew(String, Target),
    /// This manager has more busy tasks than the target has CPUs (oversubscribed by itself, as
    /// the tests' namespace hosts on 2 PUs are): no CPUs others give back would spare its
    /// tasks sharing PUs, so the decision is made at once, on this manager's share of the
    /// target ([`share`]), the second field; a line for the report.
    Oversubscribed(String, Target),
}

/// Holds the directory's lock until dropped (closing the file releases the flock).
pub struct Locked(#[allow(dead_code)] File);

/// Another manager's claim, as read from its file.
#[derive(Debug, PartialEq, Eq)]
struct Entry {
    start: u64,
    cpus: Vec<u32>,
}

impl Claims {
    /// Joins the claims of `dir` (created, mode 1777, if missing), as this process.
    pub fn open(dir: &Path) -> io::Result<Claims> {
        let pid = std::process::id();
        let start = start_time(pid)
            .ok_or_else(|| io::Error::other("cannot read this process's start time"))?;
        Claims::open_as(dir, pid, start)
    }

    fn open_as(dir: &Path, pid: u32, start: u64) -> io::Result<Claims> {
        let claims = Claims {
            dir: dir.to_path_buf(),
            own: dir.join(pid.to_string()),
            pid,
            start,
            last: Default::default(),
        };
        // Fails here, not at the first decision, if the directory cannot be used.
        drop(claims.lock()?);
        Ok(claims)
    }

    /// Takes the directory's lock (waits for a manager holding it), making the directory and
    /// its lock file where they are missing.
    pub fn lock(&self) -> io::Result<Locked> {
        let path = self.dir.join(".lock");
        loop {
            match fs::create_dir(&self.dir) {
                // Every user's managers write here; the sticky bit keeps their files their own.
                Ok(()) => fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o1777))?,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            let file = match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(&path)
            {
                Ok(f) => {
                    fs::set_permissions(&path, fs::Permissions::from_mode(0o644))?;
                    f
                }
                // Another user's lock file: flock needs only a descriptor open for reading.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => match File::open(&path) {
                    Ok(f) => f,
                    // Removed by the last manager to leave, just now.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                },
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            // SAFETY: flock on our own open descriptor.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
                return Err(io::Error::last_os_error());
            }
            // The last manager may have removed the directory while we waited: this lock
            // file is then no one else's, and the lock must be taken again on the new one.
            let held = file.metadata()?.ino();
            if fs::metadata(&path).is_ok_and(|m| m.ino() == held) {
                return Ok(Locked(file));
            }
        }
    }

    /// The busy tasks that other live managers pinned, per CPU, and their pids. A file whose
    /// process is gone (or whose pid now names a process started at another time) is removed
    /// where we may.
    pub fn others(&self) -> (Taken, Vec<u32>) {
        let mut cpus = Taken::new();
        let mut pids = Vec::new();
        let Ok(dir) = fs::read_dir(&self.dir) else {
            return (cpus, pids);
        };
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if pid == self.pid {
                continue;
            }
            let Some(entry) = fs::read_to_string(e.path()).ok().and_then(|s| parse(&s)) else {
                continue;
            };
            if start_time(pid) != Some(entry.start) {
                let _ = fs::remove_file(e.path());
                continue;
            }
            for cpu in entry.cpus {
                *cpus.entry(cpu).or_insert(0) += 1;
            }
            pids.push(pid);
        }
        pids.sort_unstable();
        (cpus, pids)
    }

    /// What the CPUs other live managers claim leave this manager for `needed` tasks
    /// ([`leave_out`]), with a line for the report that says whose they were.
    pub fn narrow(&self, target: &Target, needed: usize) -> Narrowed {
        let (taken, pids) = self.others();
        let list = |xs: &mut dyn Iterator<Item = &u32>| {
            xs.map(|x| x.to_string()).collect::<Vec<_>>().join(",")
        };
        let whose = format!(
            "CPUs {} were pinned by another huddle manager on this machine (pid {})",
            list(&mut taken.keys()),
            list(&mut pids.iter())
        );
        match leave_out(target, &taken, needed) {
            LeftOut::Nothing => Narrowed::Whole,
            LeftOut::Kept(narrowed) => {
                Narrowed::To(narrowed, format!("{whose}: decisions left them out"))
            }
            LeftOut::TooFew(left) => Narrowed::TooFew(
                format!("{whose}: {left} CPUs were left for {needed} busy tasks"),
                share(target, &taken, needed),
            ),
            LeftOut::Oversubscribed(all) => Narrowed::Oversubscribed(
                format!(
                    "{whose}: {needed} busy tasks are more than all {all} CPUs, so decisions \
                     were made at once, on this manager's share of the CPUs"
                ),
                share(target, &taken, needed),
            ),
        }
    }

    /// Records the CPU of each of this manager's busy tasks pinned to one now, so a CPU
    /// comes once per task on it (written whole, then renamed over the old claim: a reader
    /// never sees half of one; not written again while the list stays the same).
    pub fn claim(&self, cpus: &[OsCpu]) -> io::Result<()> {
        let mut set: Vec<u32> = cpus.iter().map(|c| c.0).collect();
        set.sort_unstable();
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.as_ref() == Some(&set) {
            return Ok(());
        }
        let tmp = self.dir.join(format!(".{}.new", self.pid));
        let mut f = File::create(&tmp)?;
        writeln!(f, "{}", self.start)?;
        writeln!(
            f,
            "{}",
            set.iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",")
        )?;
        fs::rename(&tmp, &self.own)?;
        *last = Some(set);
        Ok(())
    }
}

impl Drop for Claims {
    fn drop(&mut self) {
        let Ok(locked) = self.lock() else {
            let _ = fs::remove_file(&self.own);
            return;
        };
        let _ = fs::remove_file(&self.own);
        // The last one out (the files of killed managers swept first) removes the directory.
        let (_, live) = self.others();
        if live.is_empty() {
            // A manager waiting for this lock takes it again on a new file (see `lock`).
            let _ = fs::remove_file(self.dir.join(".lock"));
            let _ = fs::remove_dir(&self.dir);
        }
        drop(locked);
    }
}

/// What `taken` leaves of a target ([`leave_out`]).
#[derive(Debug)]
pub enum LeftOut {
    /// None of the target's PUs is taken.
    Nothing,
    /// The target without the taken PUs: at least the tasks needed remain.
    Kept(Target),
    /// Only this many PUs remain, fewer than the tasks needed.
    TooFew(usize),
    /// Some PUs are taken, but the tasks needed are more than all of the target's PUs (this
    /// many): leaving out would not spare them sharing.
    Oversubscribed(usize),
}

/// `target` without the PUs of kernel CPUs in `taken`, when at least `needed` allowed PUs
/// remain and `needed` fits on the whole target.
pub fn leave_out(target: &Target, taken: &Taken, needed: usize) -> LeftOut {
    let keep: Vec<_> = target
        .allowed_slots()
        .into_iter()
        .filter(|&s| !taken.contains_key(&target.os_cpu(s).0))
        .collect();
    if keep.len() == target.allowed_slots().len() {
        return LeftOut::Nothing;
    }
    let all = target.allowed_slots().len();
    if needed > all {
        return LeftOut::Oversubscribed(all);
    }
    if keep.len() < needed.max(1) {
        return LeftOut::TooFew(keep.len());
    }
    let mut narrowed = target.clone();
    narrowed.keep_only(&keep);
    LeftOut::Kept(narrowed)
}

/// This manager's share of `target` while its `needed` busy tasks and the others' (`taken`)
/// are more than the CPUs: the PUs that hold the fewest of the others' tasks (the target's
/// order among equals), as few of them as keep the busiest PU as light as spreading its tasks
/// over more would (its tasks spread evenly over the share), or one task heavier where every
/// PU holds others' tasks already. Tasks share PUs whatever is done then; what is left to
/// choose is whom they share with, and a manager that spreads its own over every PU puts each
/// of its partners beside other programs' tasks instead of beside each other: four namespace
/// hosts of 2 ranks on 2 PUs, each manager deciding on all CPUs, ran 0.75 of plain (bench/node,
/// 2026-11-27 04:16 UTC), and the same 8 ranks on one host ran 2.79-2.85 s with each pair bound
/// to one PU, 2.93-4.65 s with each pair split over both and 2.87-4.11 s floating (3 rounds
/// each, Open MPI, 2026-11-27). Without the one task of slack, four such managers that had
/// each split their pair kept it split (a pair on one PU would make it 5 tasks against 4).
pub fn share(target: &Target, taken: &Taken, needed: usize) -> Target {
    let others_on = |s: &Slot| taken.get(&target.os_cpu(*s).0).copied().unwrap_or(0);
    let mut least_used = target.allowed_slots();
    // Stable: among PUs of equal load the target's order stays.
    least_used.sort_by_key(others_on);
    let loads: Vec<usize> = least_used.iter().map(others_on).collect();
    // The busiest PU with this manager's tasks on the first k: those k, or the others'
    // busiest PU outside them.
    let busiest = |k: usize| {
        let inside = loads[k - 1] + needed.div_ceil(k);
        inside.max(
            loads
                .get(k..)
                .map_or(0, |rest| rest.iter().copied().max().unwrap_or(0)),
        )
    };
    let lightest = (1..=loads.len()).map(busiest).min().unwrap_or(0);
    let slack = usize::from(loads.first().is_some_and(|&l| l > 0));
    let k = (1..=loads.len())
        .find(|&k| busiest(k) <= lightest + slack)
        .unwrap_or(0);
    least_used.truncate(k);
    least_used.sort_unstable();
    let mut mine = target.clone();
    mine.keep_only(&least_used);
    mine
}

fn parse(text: &str) -> Option<Entry> {
    let mut lines = text.lines();
    let start = lines.next()?.trim().parse().ok()?;
    let cpus = match lines.next()?.trim() {
        "" => Vec::new(),
        list => list
            .split(',')
            .map(|c| c.parse().ok())
            .collect::<Option<_>>()?,
    };
    Some(Entry { start, cpus })
}

/// A live process's start time (clock ticks after boot, field 22 of /proc/PID/stat); None
/// for a process that is gone or a zombie (a killed manager whose parent has not reaped it
/// yet pins nothing).
pub(crate) fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count after the last ')'.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    if matches!(fields.next(), Some("Z" | "X")) {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use topology::Machine;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("huddle-claims-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn entries_are_parsed() {
        assert_eq!(
            parse("123\n0,2,5\n"),
            Some(Entry {
                start: 123,
                cpus: vec![0, 2, 5]
            })
        );
        assert_eq!(
            parse("7\n\n"),
            Some(Entry {
                start: 7,
                cpus: vec![]
            })
        );
        assert_eq!(parse("x\n1\n"), None);
        assert_eq!(parse("7\n1,a\n"), None);
        assert_eq!(parse(""), None);
    }

    #[test]
    fn start_times_are_those_of_live_processes() {
        let a = start_time(std::process::id()).unwrap();
        assert_eq!(start_time(std::process::id()), Some(a));
        assert_eq!(start_time(u32::MAX), None);
        // A child that ended and is not reaped yet: a zombie has none.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        for _ in 0..500 {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            if stat.contains(") Z ") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert_eq!(start_time(pid), None);
        child.wait().unwrap();
    }

    #[test]
    fn another_managers_cpus_are_seen_and_its_file_goes_with_it() {
        let d = dir("two");
        // Another manager: a live child process, with its own start time.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let other = Claims::open_as(&d, child.id(), start_time(child.id()).unwrap()).unwrap();
        other.claim(&[OsCpu(3), OsCpu(1), OsCpu(3)]).unwrap();
        let mine = Claims::open(&d).unwrap();
        // One entry per task: two of its busy tasks are on CPU 3.
        assert_eq!(
            mine.others(),
            ([(1, 1), (3, 2)].into_iter().collect(), vec![child.id()])
        );
        assert_eq!(
            fs::metadata(&d).unwrap().permissions().mode() & 0o7777,
            0o1777
        );
        // Its process gone: the claim is stale and removed.
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(mine.others(), (Taken::new(), vec![]));
        assert!(!d.join(child.id().to_string()).exists());
        drop(other);
        // A pid whose start time differs (reused) is no claim either.
        let reused = Claims::open_as(&d, 1, start_time(1).unwrap() + 1).unwrap();
        reused.claim(&[OsCpu(0)]).unwrap();
        assert_eq!(mine.others().0, Taken::new());
        // Ours goes when we drop it.
        mine.claim(&[OsCpu(0)]).unwrap();
        assert!(d.join(std::process::id().to_string()).exists());
        drop(mine);
        assert!(!d.join(std::process::id().to_string()).exists());
        // The last one out leaves nothing behind.
        drop(reused);
        assert!(!d.exists(), "{:?}", fs::read_dir(&d).map(|r| r.count()));
    }

    #[test]
    fn taken_cpus_are_left_out_while_enough_remain() {
        let target = Target::machine(Machine::from_synthetic("pack:1 core:8 pu:1").unwrap());
        let taken: Taken = [(0, 1), (1, 1), (2, 1), (3, 1)].into_iter().collect();
        let LeftOut::Kept(n) = leave_out(&target, &taken, 4) else {
            panic!("4 CPUs are left for 4 tasks");
        };
        let os: Vec<u32> = n.allowed_slots().iter().map(|&s| n.os_cpu(s).0).collect();
        assert_eq!(os, vec![4, 5, 6, 7]);
        // Too few left for 5 tasks.
        assert!(matches!(leave_out(&target, &taken, 5), LeftOut::TooFew(4)));
        assert!(matches!(leave_out(&target, &taken, 4), LeftOut::Kept(_)));
        // More tasks than the whole target has PUs: no waiting helps.
        assert!(matches!(
            leave_out(&target, &taken, 9),
            LeftOut::Oversubscribed(8)
        ));
        // Nothing taken, or only CPUs the target does not allow: the whole target.
        assert!(matches!(
            leave_out(&target, &Taken::new(), 1),
            LeftOut::Nothing
        ));
        assert!(matches!(
            leave_out(&target, &[(9, 1)].into_iter().collect(), 1),
            LeftOut::Nothing
        ));
    }

    fn os_cpus(t: &Target) -> Vec<u32> {
        t.allowed_slots().iter().map(|&s| t.os_cpu(s).0).collect()
    }

    #[test]
    fn a_share_keeps_the_busiest_pu_light_on_as_few_pus_as_it_can() {
        let two = Target::machine(Machine::from_synthetic("pack:1 core:2 pu:1").unwrap());
        let on = |loads: &[(u32, usize)]| loads.iter().copied().collect::<Taken>();
        // Four hosts of 2 ranks on 2 PUs: three others' pairs on CPU 0 -> ours on CPU 1
        // (6 at most, against 7 spread).
        assert_eq!(os_cpus(&share(&two, &on(&[(0, 6)]), 2)), vec![1]);
        // Three others' tasks on CPU 0 and one on CPU 1: CPU 1 (3 at most, against 4).
        assert_eq!(os_cpus(&share(&two, &on(&[(0, 3), (1, 1)]), 2)), vec![1]);
        // One on each: our pair on the first (3 at most), one task more than spread (2), as
        // every PU holds others' tasks.
        assert_eq!(os_cpus(&share(&two, &on(&[(0, 1), (1, 1)]), 2)), vec![0]);
        // With a PU free, no slack: 3 tasks go to the two free PUs of four, not onto one.
        let four = Target::machine(Machine::from_synthetic("pack:1 core:4 pu:1").unwrap());
        assert_eq!(
            os_cpus(&share(&four, &on(&[(0, 1), (1, 1)]), 3)),
            vec![2, 3]
        );
        // Two hosts of 4 ranks: the other host's spread over both -> spread ours too (4 and 4,
        // not 6 and 2); the other's on one PU -> ours on the other one.
        assert_eq!(os_cpus(&share(&two, &on(&[(0, 2), (1, 2)]), 4)), vec![0, 1]);
        assert_eq!(os_cpus(&share(&two, &on(&[(0, 4)]), 4)), vec![1]);
        // 12 busy tasks beside 12 of others on 8 PUs: 4 at most on the busiest PU, spread
        // over the 4 least used; one more is allowed, so 4 each on the 3 least used.
        let eight = Target::machine(Machine::from_synthetic("pack:1 core:8 pu:1").unwrap());
        let taken = on(&[
            (0, 2),
            (1, 2),
            (2, 1),
            (3, 1),
            (4, 2),
            (5, 2),
            (6, 1),
            (7, 1),
        ]);
        assert_eq!(os_cpus(&share(&eight, &taken, 12)), vec![2, 3, 6]);
        // One task: the least used PU; very many: all of them.
        assert_eq!(os_cpus(&share(&eight, &taken, 1)), vec![2]);
        assert_eq!(os_cpus(&share(&eight, &taken, 1000)).len(), 8);
        // Others' tasks on CPUs the target does not allow do not count.
        assert_eq!(os_cpus(&share(&two, &on(&[(9, 6)]), 2)), vec![0, 1]);
    }
}
