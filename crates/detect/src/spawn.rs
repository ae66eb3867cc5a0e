//! Starting the program held before exec: forked with its argument and environment vectors
//! built beforehand (the child may only make system calls), it waits on a pipe until the
//! detector has opened its event sources, so that not one fault of the program is missed.

use crate::session::DetectError;
use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Finds `program` the way execvp would: as given if it has a '/', else in PATH.
pub fn resolve_program(program: &OsString) -> Option<PathBuf> {
    let p = Path::new(program);
    let runnable = |c: &Path| {
        let Ok(cs) = CString::new(c.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: cs is a valid C string.
        c.is_file() && unsafe { libc::access(cs.as_ptr(), libc::X_OK) } == 0
    };
    if program.as_bytes().contains(&b'/') {
        return p.exists().then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(p))
        .find(|c| runnable(c))
}

pub(crate) fn cstr(s: &[u8], what: &str) -> Result<CString, DetectError> {
    CString::new(s).map_err(|_| DetectError::Io {
        what: what.to_string(),
        err: std::io::Error::new(std::io::ErrorKind::InvalidInput, "contains a NUL byte"),
    })
}

/// A forked child held before its exec.
pub(crate) struct HeldChild {
    pub pid: i32,
    /// Write end: one byte lets the child exec; closing it unwritten makes it exit 127.
    go: i32,
    /// Read end: the child's errno when exec failed, EOF when it succeeded.
    exec_error: i32,
}

/// Why a released child did not start the program.
pub(crate) struct ExecFailed(pub i32);

impl HeldChild {
    /// Forks a child that will exec `path` with `argv` (argv[0] first) and `env`.
    pub fn fork(
        path: &Path,
        argv: &[&OsString],
        env: &[(OsString, OsString)],
    ) -> Result<HeldChild, DetectError> {
        let cpath = cstr(path.as_os_str().as_bytes(), "program path")?;
        let argv_c = argv
            .iter()
            .map(|a| cstr(a.as_bytes(), "argument"))
            .collect::<Result<Vec<_>, _>>()?;
        let envp_c: Vec<CString> = env
            .iter()
            .filter_map(|(k, v)| {
                let mut b = k.as_bytes().to_vec();
                b.push(b'=');
                b.extend_from_slice(v.as_bytes());
                CString::new(b).ok()
            })
            .collect();
        let mut argv: Vec<*const libc::c_char> = argv_c.iter().map(|c| c.as_ptr()).collect();
        argv.push(std::ptr::null());
        let mut envp: Vec<*const libc::c_char> = envp_c.iter().map(|c| c.as_ptr()).collect();
        envp.push(std::ptr::null());
        let (mut go, mut err) = ([0i32; 2], [0i32; 2]);
        // SAFETY: plain pipe creation into valid arrays.
        if unsafe { libc::pipe2(go.as_mut_ptr(), libc::O_CLOEXEC) } != 0
            || unsafe { libc::pipe2(err.as_mut_ptr(), libc::O_CLOEXEC) } != 0
        {
            return Err(DetectError::Io {
                what: "pipe".into(),
                err: std::io::Error::last_os_error(),
            });
        }
        // SAFETY: the child only calls async-signal-safe functions (read, execve, write, _exit).
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(DetectError::Io {
                what: "fork".into(),
                err: std::io::Error::last_os_error(),
            });
        }
        if pid == 0 {
            unsafe {
                libc::close(go[1]);
                libc::close(err[0]);
                let mut b = [0u8; 1];
                // Wait until the parent has opened the events; EOF means it gave up. (A
                // signal handler inherited from huddle may interrupt the wait: wait again.)
                let got = loop {
                    let n = libc::read(go[0], b.as_mut_ptr() as *mut libc::c_void, 1);
                    if n >= 0 || *libc::__errno_location() != libc::EINTR {
                        break n;
                    }
                };
                if got != 1 {
                    libc::_exit(127);
                }
                libc::execve(cpath.as_ptr(), argv.as_ptr(), envp.as_ptr());
                let e = *libc::__errno_location();
                libc::write(err[1], &e as *const i32 as *const libc::c_void, 4);
                libc::_exit(127);
            }
        }
        // SAFETY: closing our copies of the child's ends.
        unsafe {
            libc::close(go[0]);
            libc::close(err[1]);
        }
        Ok(HeldChild {
            pid,
            go: go[1],
            exec_error: err[0],
        })
    }

    /// Lets the child exec; on failure the child is reaped and its errno returned.
    pub fn release(self) -> Result<(), ExecFailed> {
        let mut e = [0u8; 4];
        // SAFETY: writing one byte to our pipe, then reading the exec-error pipe.
        let got = unsafe {
            libc::write(self.go, b"g".as_ptr() as *const libc::c_void, 1);
            libc::close(self.go);
            let n = libc::read(self.exec_error, e.as_mut_ptr() as *mut libc::c_void, 4);
            libc::close(self.exec_error);
            n
        };
        if got == 4 {
            // SAFETY: reaping our own child.
            unsafe { libc::waitpid(self.pid, std::ptr::null_mut(), 0) };
            return Err(ExecFailed(i32::from_ne_bytes(e)));
        }
        Ok(())
    }

    /// Gives up: the child exits 127 without running the program, and is reaped.
    pub fn abandon(self) {
        // SAFETY: closing our pipe ends and reaping our own child.
        unsafe {
            libc::close(self.go);
            libc::close(self.exec_error);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}
