//! Signals for a front end that runs or watches a program (`huddle detect`, `run`, `attach`,
//! `node`): one set of rules for all of them.
//!
//! - Forwarding ([`install_forwarding`], [`take_forward`]), for a program huddle started:
//!   SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to huddle alone (kill, `si_code <= 0`) are
//!   passed on; the ones the terminal sent reached the program's process group already, so
//!   huddle only stays to write its results.
//! - Detaching ([`install_detach`], [`take_detach`]), for a program that is someone else's:
//!   the same four signals, from the terminal or from kill alike, end huddle's watch, and the
//!   program is never signalled.
//! - Pausing ([`install_pause`], [`take_pause`]): SIGUSR1 pauses the agents' re-arming,
//!   SIGUSR2 resumes it.
//!
//! The handlers only store into atomics, which the front end's loop takes.

use std::sync::atomic::{AtomicI32, Ordering};

/// The signals a front end handles (forwards, or takes as the order to let go).
pub const HANDLED: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

static FORWARD: AtomicI32 = AtomicI32::new(0);
static DETACH: AtomicI32 = AtomicI32::new(0);
/// The last of SIGUSR1 (pause re-arming) or SIGUSR2 (resume) received, 0 once taken.
static PAUSE: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_forward(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to SA_SIGINFO handlers.
    let from_user = info.is_null() || unsafe { (*info).si_code } <= 0;
    if from_user {
        FORWARD.store(sig, Ordering::SeqCst);
    }
}

extern "C" fn on_detach(sig: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    DETACH.store(sig, Ordering::SeqCst);
}

extern "C" fn on_pause(sig: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    PAUSE.store(sig, Ordering::SeqCst);
}

type Handler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

fn install(signals: &[i32], handler: Handler) {
    for &sig in signals {
        // SAFETY: the handler only stores into an atomic, which is async-signal-safe.
        // (Handlers, unlike ignored signals, are reset by exec: the program gets defaults.)
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Forwarding, for a program huddle started: see the module's rules.
pub fn install_forwarding() {
    install(&HANDLED, on_forward);
}

/// Detaching, for a program that is not huddle's. Install it before anything else, so that
/// a signal during start-up is not lost either.
pub fn install_detach() {
    install(&HANDLED, on_detach);
}

/// Records SIGUSR1/SIGUSR2 for [`take_pause`]. Call it first: until then either signal
/// would end the process.
pub fn install_pause() {
    install(&[libc::SIGUSR1, libc::SIGUSR2], on_pause);
}

/// The signal to pass on to the program (0: none since the last call).
pub fn take_forward() -> i32 {
    FORWARD.swap(0, Ordering::SeqCst)
}

/// The signal that told huddle to let the program go (0: none since the last call).
pub fn take_detach() -> i32 {
    DETACH.swap(0, Ordering::SeqCst)
}

/// As if `sig` had come with [`install_detach`] in place (for tests of the front ends).
pub fn request_detach(sig: i32) {
    DETACH.store(sig, Ordering::SeqCst);
}

/// Some(true) after SIGUSR1, Some(false) after SIGUSR2, None when neither came since the
/// last call; pass it on with `Session::set_paused`.
pub fn take_pause() -> Option<bool> {
    match PAUSE.swap(0, Ordering::SeqCst) {
        libc::SIGUSR1 => Some(true),
        libc::SIGUSR2 => Some(false),
        _ => None,
    }
}

/// "SIGTERM" for 15, and so on for the signals huddle handles.
pub fn name(sig: i32) -> String {
    match sig {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGQUIT => "SIGQUIT".into(),
        libc::SIGUSR1 => "SIGUSR1".into(),
        libc::SIGUSR2 => "SIGUSR2".into(),
        other => format!("signal {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test for all three, since the handlers are process-wide.
    #[test]
    fn kill_is_forwarded_and_pauses_are_taken_once() {
        install_forwarding();
        install_pause();
        // SAFETY: signals to ourselves; the handlers are installed above.
        unsafe {
            libc::raise(libc::SIGTERM);
            libc::raise(libc::SIGUSR1);
        }
        assert_eq!(take_forward(), libc::SIGTERM, "sent by kill: forwarded");
        assert_eq!(take_forward(), 0, "taken once");
        assert_eq!(take_pause(), Some(true));
        assert_eq!(take_pause(), None);
        // SAFETY: as above.
        unsafe { libc::raise(libc::SIGUSR2) };
        assert_eq!(take_pause(), Some(false));
        install_detach();
        // SAFETY: as above.
        unsafe { libc::raise(libc::SIGHUP) };
        assert_eq!(take_detach(), libc::SIGHUP);
        assert_eq!(take_forward(), 0, "detach mode forwards nothing");
        assert_eq!(name(libc::SIGQUIT), "SIGQUIT");
        assert_eq!(name(64), "signal 64");
    }
}
