//! Ctrl-C and SIGTERM for the one-shot commands (`build`, `merge`): a normal
//! way to stop, which leaves nothing behind.
//!
//! [`install`] sets a process-wide handler for SIGINT and SIGTERM that only
//! stores the signal number in an atomic (async-signal-safe, with
//! `SA_RESTART`, so no stage thread sees EINTR). The command polls
//! [`requested`] where it can stop: `build` after the walk, in its supervising
//! loop (then it aborts the stage graph; the writer is dropped without
//! `finish`, which deletes its `.partial` files) and after the writer's
//! `finish` (then it deletes the finished files, [`discard`]); `merge` after
//! each file it writes. The command then returns an error carrying
//! [`Stopped`], whose sentence the CLI prints as the one line
//! "interrupted after N of M files; nothing written" before exiting with
//! [`EXIT_CODE`] (130, the shell's code for death by SIGINT).
//!
//! The handler is installed even where the signal was ignored at start (a
//! job started with `&` from a script): the Python API and the tests stop a
//! child by sending it SIGINT, which must not depend on how their own parent
//! set things up.
//!
//! `serve` does not use this module: it blocks the signals and reads them
//! from a signalfd (`app::control::signals`), as a daemon must.
//!
//! With the `test-hooks` feature (on for `cargo test` only), [`checkpoint`]
//! raises SIGINT at a named point when `MELFORGE_TEST_INTERRUPT_AT` names it,
//! so the integration tests hit each stopping point through the real signal
//! path, deterministically.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::runtime::sys;

/// Exit status of a command stopped by a signal.
pub const EXIT_CODE: u8 = 130;

/// The signals that stop a one-shot command.
pub const SIGNALS: [i32; 2] = [libc::SIGINT, libc::SIGTERM];

/// The last stopping signal received (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signo: libc::c_int) {
    RECEIVED.store(signo, Ordering::SeqCst);
}

/// Makes SIGINT and SIGTERM set the flag [`requested`] reads instead of
/// killing the process. Call once, before the command starts.
pub fn install() -> std::io::Result<()> {
    sys::set_signal_handler(&SIGNALS, on_signal)
}

/// The stopping signal received since [`install`], if any.
pub fn requested() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// A command stopped by a signal, and how far it had come.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("interrupted after {done} of {total} {unit}; nothing written")]
pub struct Stopped {
    /// The signal number.
    pub signal: i32,
    pub done: u64,
    pub total: u64,
    /// What `done` and `total` count ("files", "splits").
    pub unit: &'static str,
}

impl Stopped {
    /// `Some` when a stopping signal has been received.
    pub fn check(done: u64, total: u64, unit: &'static str) -> Option<Stopped> {
        requested().map(|signal| Stopped {
            signal,
            done,
            total,
            unit,
        })
    }
}

/// Deletes files a stopped command had already finished, so that it leaves
/// nothing behind; a file that cannot be deleted is logged (the stop itself
/// is what the user asked for).
pub fn discard(paths: impl IntoIterator<Item = PathBuf>) {
    for p in paths {
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(
                path = %p.display(),
                error = %e,
                "Cannot delete an output of the interrupted command."
            ),
        }
    }
}

/// Test hook: raises SIGINT here when `MELFORGE_TEST_INTERRUPT_AT` is `name`
/// (only with the `test-hooks` feature; a no-op otherwise).
#[inline]
pub fn checkpoint(name: &str) {
    #[cfg(feature = "test-hooks")]
    if std::env::var_os("MELFORGE_TEST_INTERRUPT_AT").is_some_and(|v| v == name) {
        let _ = sys::kill_self(libc::SIGINT);
    }
    #[cfg(not(feature = "test-hooks"))]
    let _ = name;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_progress_and_says_nothing_was_written() {
        let s = Stopped {
            signal: libc::SIGINT,
            done: 3,
            total: 20_000,
            unit: "files",
        };
        assert_eq!(
            s.to_string(),
            "interrupted after 3 of 20000 files; nothing written"
        );
    }

    #[test]
    fn discard_deletes_files_and_ignores_missing_ones() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a.h5");
        std::fs::write(&a, b"x").unwrap();
        discard([a.clone(), d.path().join("never-there")]);
        assert!(!a.exists());
    }
}
