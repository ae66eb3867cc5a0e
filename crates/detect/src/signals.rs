//! Signals for a front end that runs a target: Ctrl-C reaches the target through the
//! terminal while we stay to write results; SIGTERM/SIGHUP are caught to be forwarded.

use std::sync::atomic::{AtomicI32, Ordering};

static PENDING: AtomicI32 = AtomicI32::new(0);
/// The last of SIGUSR1 (pause re-arming) or SIGUSR2 (resume) received, 0 once taken.
static PAUSE: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: i32) {
    PENDING.store(sig, Ordering::Relaxed);
}

extern "C" fn on_pause(sig: i32) {
    PAUSE.store(sig, Ordering::Relaxed);
}

/// Records SIGUSR1/SIGUSR2 for [`take_pause`]. Call it first: until then either signal
/// would end the process. (Handlers, unlike ignored signals, are not inherited by exec.)
pub fn install_pause() {
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    unsafe {
        libc::signal(libc::SIGUSR1, on_pause as *const () as libc::sighandler_t);
        libc::signal(libc::SIGUSR2, on_pause as *const () as libc::sighandler_t);
    }
}

/// Ignores SIGINT and records SIGTERM/SIGHUP for [`take`]. Call it once the target runs
/// (it would inherit the ignored SIGINT).
pub fn install() {
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGHUP, on_signal as *const () as libc::sighandler_t);
    }
}

/// Some(true) after SIGUSR1, Some(false) after SIGUSR2, None when neither came since the
/// last call; pass it on with `Session::set_paused`.
pub fn take_pause() -> Option<bool> {
    match PAUSE.swap(0, Ordering::Relaxed) {
        libc::SIGUSR1 => Some(true),
        libc::SIGUSR2 => Some(false),
        _ => None,
    }
}

/// The signal caught since the last call (0: none); pass it on with `Session::signal`.
pub fn take() -> i32 {
    PENDING.swap(0, Ordering::Relaxed)
}
