//! Which mappings of /proc/self/maps (parsed by `agent_abi::maps`) the agent may re-arm or
//! adopt. Pure: no system calls, so that the rules are unit-tested.

use agent_abi::maps::MapsLine;

/// The agent's own file as the loader opened it (set once at start, see [`note_own_path`]):
/// a copy under another name is still itself.
static OWN_PATH: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();

/// Records the path the dynamic loader gave the object holding `addr` (the agent's code).
/// Called from the program's thread at start, before the helpers run.
pub fn note_own_path(addr: *const libc::c_void) {
    // SAFETY: dladdr fills `info` for an address inside a loaded object; dli_fname is then a
    // NUL-terminated string owned by the loader.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(addr, &mut info) != 0 && !info.dli_fname.is_null() {
            use std::os::unix::ffi::{OsStrExt, OsStringExt};
            let name = std::ffi::CStr::from_ptr(info.dli_fname).to_bytes();
            // /proc/self/maps shows the path with links resolved.
            let path = std::fs::canonicalize(std::ffi::OsStr::from_bytes(name))
                .map(|p| p.into_os_string().into_vec())
                .unwrap_or_else(|_| name.to_vec());
            let _ = OWN_PATH.set(path);
        }
    }
}

/// Objects whose writable data the agent's own helper threads use: the dynamic loader (lazy
/// binding), the C library (system call wrappers, errno, its locks) and the agent itself,
/// by its usual name or by the path it was loaded from (HUDDLE_AGENT naming a renamed copy
/// made the agent re-arm its own data, and its helpers then waited on themselves). A
/// helper that faulted on one of their pages while it was out would wait for itself.
pub fn agent_critical(path: &[u8]) -> bool {
    if OWN_PATH
        .get()
        .is_some_and(|own| !own.is_empty() && own.as_slice() == path)
    {
        return true;
    }
    let base = path.rsplit(|&c| c == b'/').next().unwrap_or(path);
    [
        &b"ld-linux"[..],
        b"ld-",
        b"libc.so",
        b"libc-",
        b"libpthread",
        b"libdl",
        b"libhuddle_agent",
    ]
    .iter()
    .any(|p| base.starts_with(p))
}

/// How the agent's own mappings are named (PR_SET_VMA_ANON_NAME): never the program's.
pub const OWN_NAME: &[u8] = b"[anon:huddle-agent]";

/// How a mapping may be re-armed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Use {
    /// MAP_SHARED file, shmem or /dev/zero: drop the PTEs (the data stays in the page cache).
    Shared,
    /// Private anonymous memory: taken out through the userfaultfd.
    Private,
    /// Never re-armed.
    Never,
}

/// Classifies the lines of one maps text in order: whether an anonymous mapping is the
/// `.bss` of a critical object depends on the mapping before it.
#[derive(Default)]
pub struct Classifier {
    prev_end: u64,
    prev_critical_file: bool,
}

impl Classifier {
    /// `private_ok`: the agent has a userfaultfd (and the program has not taken over).
    pub fn classify(&mut self, m: &MapsLine, private_ok: bool) -> Use {
        // .bss (and .lbss, Fortran COMMON) is the anonymous mapping right after an object's
        // last file mapping; only that of a critical object stays out.
        let critical_bss = m.start == self.prev_end && self.prev_critical_file;
        self.prev_end = m.end;
        self.prev_critical_file = m.file() && agent_critical(m.path);
        if !m.read || !m.write || m.exec {
            return Use::Never;
        }
        if m.shared {
            // Files, shmem, /dev/zero; never device memory.
            let device = m.path.starts_with(b"/dev/")
                && !m.path.starts_with(b"/dev/zero")
                && !m.path.starts_with(b"/dev/shm/");
            return if device { Use::Never } else { Use::Shared };
        }
        // Anonymous: no path, the heap, or a name given with PR_SET_VMA_ANON_NAME. Not
        // [stack] (grows down, and a fault below it must extend it, not reach us) nor
        // [vvar]/[vdso] and the like.
        let anon = !m.file()
            && (m.path.is_empty() || m.path == b"[heap]" || m.path.starts_with(b"[anon:"))
            && !m.path.starts_with(OWN_NAME);
        if private_ok && anon && !critical_bss {
            Use::Private
        } else {
            Use::Never
        }
    }
}

/// Largest file-backed private mapping the agent copies into anonymous memory at start.
pub const ADOPT_MAX: u64 = 64 << 20;

/// Whether a file-backed private writable mapping (an object's `.data`, a MAP_PRIVATE file)
/// is to be replaced by an anonymous copy at start, so that the userfaultfd, which takes
/// anonymous memory only, can re-arm it.
pub fn adoptable(m: &MapsLine) -> bool {
    m.file()
        && m.read
        && m.write
        && !m.exec
        && !m.shared
        && m.end - m.start <= ADOPT_MAX
        && !m.path.starts_with(b"/dev/")
        && !agent_critical(m.path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify_all(text: &str, private_ok: bool) -> Vec<Use> {
        let mut c = Classifier::default();
        text.lines()
            .map(|l| {
                c.classify(
                    &agent_abi::maps::parse_line(l.as_bytes()).unwrap(),
                    private_ok,
                )
            })
            .collect()
    }

    #[test]
    fn program_bss_is_eligible_and_libc_bss_is_not() {
        // An executable's .data and .bss, libc's .data and .bss, the heap, a thread stack,
        // an anonymous mapping right after a library that is not critical (libgomp's .bss).
        let maps = "\
55e000001000-55e000002000 rw-p 00003000 08:01 100 /usr/bin/solver
55e000002000-55e003004000 rw-p 00000000 00:00 0
55e004000000-55e004100000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000003000 rw-p 001d5000 08:01 200 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000003000-7f0000010000 rw-p 00000000 00:00 0
7f0000020000-7f0000021000 rw-p 00030000 08:01 300 /usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0
7f0000021000-7f0000022000 rw-p 00000000 00:00 0
7f0000030000-7f0000031000 ---p 00000000 00:00 0
7f0000031000-7f0000131000 rw-p 00000000 00:00 0
7f0000200000-7f0000201000 rw-p 00010000 08:01 400 /work/target/release/libhuddle_agent.so
7f0000201000-7f0000202000 rw-p 00000000 00:00 0
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
7ffd00030000-7ffd00032000 r--p 00000000 00:00 0 [vvar]
7ffd00040000-7ffd00042000 rw-p 00000000 00:00 0 [anon:huddle-agent]
7ffd00050000-7ffd00052000 rw-p 00000000 00:00 0 [anon:lammps pool]
";
        use Use::*;
        assert_eq!(
            classify_all(maps, true),
            [
                Never, Private, Private, Never, Never, Never, Private, Never, Private, Never,
                Never, Never, Never, Never, Private
            ]
        );
        // Without a userfaultfd nothing private is.
        assert!(classify_all(maps, false).iter().all(|&u| u == Never));
    }

    #[test]
    fn shared_mappings_but_not_devices() {
        let maps = "\
7f0000000000-7f0000100000 rw-s 00000000 00:05 77 /dev/shm/psm_shm.1
7f0000100000-7f0000200000 rw-s 00000000 00:01 78 /dev/zero (deleted)
7f0000200000-7f0000300000 rw-s 00000000 00:05 79 /SYSV00000000 (deleted)
7f0000300000-7f0000400000 rw-s 10000000 00:05 80 /dev/dri/card0
7f0000400000-7f0000500000 r--s 00000000 08:01 81 /data/input.bin
";
        use Use::*;
        assert_eq!(
            classify_all(maps, false),
            [Shared, Shared, Shared, Never, Never]
        );
    }

    #[test]
    fn adopts_program_data_but_not_critical_objects() {
        let ok = |l: &str| adoptable(&agent_abi::maps::parse_line(l.as_bytes()).unwrap());
        assert!(ok(
            "55e000001000-55e000002000 rw-p 00003000 08:01 100 /usr/bin/solver"
        ));
        assert!(ok(
            "7f0000020000-7f0000021000 rw-p 00030000 08:01 300 /usr/lib/libgfortran.so.5"
        ));
        assert!(!ok(
            "7f0000000000-7f0000003000 rw-p 001d5000 08:01 200 /usr/lib/x86_64-linux-gnu/libc.so.6"
        ));
        assert!(!ok(
            "7f0000000000-7f0000003000 rw-p 00030000 08:01 200 /usr/lib64/ld-linux-x86-64.so.2"
        ));
        assert!(!ok(
            "7f0000000000-7f0000003000 rw-p 00030000 08:01 200 /x/libhuddle_agent.so"
        ));
        // Not writable, shared, anonymous, executable, a device, or too large.
        assert!(!ok(
            "55e000001000-55e000002000 r--p 00003000 08:01 100 /usr/bin/solver"
        ));
        assert!(!ok(
            "55e000001000-55e000002000 rw-s 00003000 08:01 100 /data/f"
        ));
        assert!(!ok("55e000001000-55e000002000 rw-p 00000000 00:00 0"));
        assert!(!ok(
            "55e000001000-55e000002000 rwxp 00003000 08:01 100 /usr/bin/jit"
        ));
        assert!(!ok(
            "55e000001000-55e000002000 rw-p 00000000 00:06 5 /dev/mem"
        ));
        assert!(!ok(
            "7f0000000000-7f0080000000 rw-p 00000000 08:01 9 /data/big.bin"
        ));
    }

    #[test]
    fn critical_names() {
        for p in [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib64/ld-linux-x86-64.so.2",
            "libc-2.31.so",
            "/usr/lib/libpthread.so.0",
            "/a/libhuddle_agent.so",
        ] {
            assert!(agent_critical(p.as_bytes()), "{p}");
        }
        for p in [
            "/usr/lib/libgomp.so.1",
            "/usr/lib/libcrypto.so.3",
            "/usr/bin/lammps",
            "/usr/lib/libmpi.so.40",
        ] {
            assert!(!agent_critical(p.as_bytes()), "{p}");
        }
    }
}
