//! Probe: can this machine deliver page-fault samples of a child and its threads?
//! Forks a child that waits, opens the event on it (per CPU, inherit), lets it spawn a
//! thread that touches memory, and prints what the rings delivered.
use detect::perf::{PerfSource, Record};

fn main() {
    let mut go = [0i32; 2];
    unsafe { libc::pipe(go.as_mut_ptr()) };
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut b = [0u8; 1];
        unsafe { libc::read(go[0], b.as_mut_ptr() as *mut _, 1) };
        let h = std::thread::spawn(|| {
            let v = vec![1u8; 64 << 20];
            v.iter().map(|&x| x as u64).sum::<u64>()
        });
        let s = h.join().unwrap();
        unsafe { libc::_exit((s % 7) as i32) };
    }
    let mut src =
        PerfSource::open(&[pid], false, 64, detect::perf::Sampled::PageFaults).expect("open");
    println!("opened, exclude_kernel={}", src.exclude_kernel);
    unsafe { libc::write(go[1], b"x".as_ptr() as *const _, 1) };
    let (mut faults, mut forks, mut tids) = (0u64, 0u64, std::collections::BTreeSet::new());
    let mut status = 0;
    loop {
        std::thread::sleep(std::time::Duration::from_millis(5));
        src.drain(|r| match r {
            Record::Fault { tid, .. } => {
                faults += 1;
                tids.insert(tid);
            }
            Record::Fork { .. } => forks += 1,
            _ => {}
        });
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            break;
        }
    }
    src.drain(|r| {
        if let Record::Fault { tid, .. } = r {
            faults += 1;
            tids.insert(tid);
        }
    });
    println!(
        "faults={faults} forks={forks} tids={tids:?} lost={}",
        src.lost
    );
}
