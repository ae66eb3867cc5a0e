//! Signals for a front end that runs a target: Ctrl-C reaches the target through the
//! terminal while we stay to write results; SIGTERM/SIGHUP are caught to be forwarded.

use std::sync::atomic::{AtomicI32, Ordering};

static PENDING: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: i32) {
    PENDING.store(sig, Ordering::Relaxed);
}

/// Ignores SIGINT and records SIGTERM/SIGHUP for [`take`].
pub fn install() {
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGHUP, on_signal as *const () as libc::sighandler_t);
    }
}

/// The signal caught since the last call (0: none); pass it on with `Session::signal`.
pub fn take() -> i32 {
    PENDING.swap(0, Ordering::Relaxed)
}
