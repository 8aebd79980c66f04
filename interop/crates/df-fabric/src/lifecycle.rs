//! Opt-in clean stop on SIGINT / SIGTERM for programs that run a [`crate::Fabric`].
//!
//! The library installs no signal handler by itself. A binary that calls [`install`] gets:
//! - the first SIGINT or SIGTERM only sets a flag (the handler does nothing else, so it is
//!   async-signal-safe); from then on [`crate::Fabric::step`], `poll` and `sync_now` return
//!   [`crate::FabricError::Stopped`], so the node loop stops at its next step and unwinds normally:
//!   the `Fabric` is dropped and its transport closed (peers see the node go at once);
//! - [`exit_if_stopped`], called by the binary once the fabric is gone, prints one line to stderr
//!   (`df-node: stopping on SIGTERM`) and exits with status `128 + signal` (the shell convention);
//! - a second signal while the first is being handled (a publish blocked by congestion control,
//!   a long wait for peers) ends the process at once with the same status.
//!
//! ```ignore
//! df_fabric::lifecycle::install()?;
//! let result = run(); // steps a Fabric until done or Err(FabricError::Stopped(_))
//! df_fabric::lifecycle::exit_if_stopped("df-node");
//! ```

use std::fmt;
use std::sync::atomic::{AtomicI32, Ordering};

/// The first stop signal received since [`install`] (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// A stop signal that arrived (SIGINT or SIGTERM).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopSignal(i32);

impl StopSignal {
    /// The signal number.
    pub fn number(self) -> i32 {
        self.0
    }

    /// `SIGINT`, `SIGTERM` (or `signal <n>`).
    pub fn name(self) -> String {
        #[cfg(unix)]
        {
            match self.0 {
                libc::SIGINT => return "SIGINT".into(),
                libc::SIGTERM => return "SIGTERM".into(),
                _ => {}
            }
        }
        format!("signal {}", self.0)
    }

    /// The conventional exit status of a process ended by this signal: `128 + signal`.
    pub fn exit_code(self) -> i32 {
        128 + self.0
    }
}

impl fmt::Display for StopSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(unix)]
extern "C" fn on_signal(sig: libc::c_int) {
    // Only async-signal-safe operations: an atomic swap, and _exit on a second signal.
    if RECEIVED.swap(sig, Ordering::SeqCst) != 0 {
        // SAFETY: _exit is async-signal-safe and never returns.
        unsafe { libc::_exit(128 + sig) };
    }
}

/// Installs the SIGINT / SIGTERM handlers (see the module documentation). Idempotent.
#[cfg(unix)]
pub fn install() -> std::io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is a valid value; the handler only touches an atomic (and
        // calls _exit), which is async-signal-safe.
        let rc = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Signal handlers are only available on Unix.
#[cfg(not(unix))]
pub fn install() -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "stop signals are handled on Unix only",
    ))
}

/// The stop signal received since [`install`], if any.
pub fn stop_signal() -> Option<StopSignal> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(StopSignal(s)),
    }
}

/// If a stop signal arrived: prints `<program>: stopping on <SIGNAL>` to stderr and exits with
/// `128 + signal`. Call it after the fabric is dropped (its transport closed). Returns otherwise.
pub fn exit_if_stopped(program: &str) {
    if let Some(sig) = stop_signal() {
        eprintln!("{program}: stopping on {sig}");
        std::process::exit(sig.exit_code());
    }
}
