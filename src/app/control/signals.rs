//! Signals as commands: SIGTERM and SIGINT become [`Command::Shutdown`],
//! SIGHUP becomes [`Command::Reload`], delivered on the same channel as the
//! control socket's requests (without a replier).
//!
//! Mechanism: the three signals are blocked with `pthread_sigmask` and read
//! from a `signalfd` by one dedicated thread. A blocked signal stays pending
//! until read, so no handler runs and no async-signal-safety rules apply.
//!
//! **Call [`block_and_spawn`] first in `main`, before any other thread is
//! started**: threads inherit the signal mask of their creator, and a thread
//! that does not block SIGTERM would receive it with the default action
//! (terminate) instead of the signalfd. SIGPIPE is set to ignored as well
//! (Rust's runtime already does so for binaries), so a control client that
//! hangs up makes a write fail with EPIPE instead of killing the service.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;

use std::io::Write;

use super::{Command, Error, Origin, Request, Sender};
use crate::runtime::sys;

/// The signals turned into commands.
pub const SIGNALS: [i32; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// The command a signal stands for.
pub fn command_for(signo: i32) -> Option<Command> {
    match signo {
        libc::SIGTERM | libc::SIGINT => Some(Command::Shutdown),
        libc::SIGHUP => Some(Command::Reload),
        _ => None,
    }
}

/// The running signal thread; [`SignalThread::stop`] (or drop) ends it. The
/// signals stay blocked in the calling thread (a late SIGTERM stays pending
/// rather than killing a process that is already stopping).
pub struct SignalThread {
    wake: UnixStream,
    handle: Option<JoinHandle<()>>,
}

impl SignalThread {
    /// Ends the thread and waits for it.
    pub fn stop(mut self) {
        self.end();
    }

    fn end(&mut self) {
        let _ = (&self.wake).write_all(b"x");
        if let Some(h) = self.handle.take()
            && h.join().is_err()
        {
            tracing::warn!("The signal thread panicked.");
        }
    }
}

impl Drop for SignalThread {
    fn drop(&mut self) {
        self.end();
    }
}

/// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (and so in every
/// thread it starts afterwards), ignores SIGPIPE, and starts the thread that
/// turns those signals into [`Request`]s on `tx`. Must be called before any
/// other thread exists; see the module docs.
pub fn block_and_spawn(tx: Sender) -> Result<SignalThread, Error> {
    sys::block_signals(&SIGNALS).map_err(Error::Signals)?;
    // Cannot fail: SIGPIPE is a valid signal and SIG_IGN installs no handler.
    let _ = sys::ignore_sigpipe();
    let sfd = sys::signalfd(&SIGNALS).map_err(Error::Signals)?;
    let (wake, wake_rx) = UnixStream::pair().map_err(Error::Signals)?;
    let handle = std::thread::Builder::new()
        .name("melforge-signals".into())
        .spawn(move || signal_loop(&sfd, &wake_rx, &tx))
        .map_err(Error::Signals)?;
    Ok(SignalThread {
        wake,
        handle: Some(handle),
    })
}

fn signal_loop(sfd: &OwnedFd, wake: &UnixStream, tx: &Sender) {
    loop {
        match super::wait_readable(sfd.as_fd(), wake.as_fd()) {
            Ok(super::Ready::Source) => {}
            Ok(super::Ready::Wake) => return,
            Err(e) => {
                tracing::error!(error = %e, "Signal handling stopped: poll failed.");
                return;
            }
        }
        let info = match sys::read_signalfd(sfd.as_fd()) {
            Ok(info) => info,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) =>
            {
                continue;
            }
            Err(e) => {
                tracing::error!(
                    error = %e,
                    "Signal handling stopped: reading the signalfd failed."
                );
                return;
            }
        };
        let signo = info.signo;
        let Some(cmd) = command_for(signo) else {
            continue;
        };
        tracing::info!(
            signal = signo,
            pid = info.pid,
            command = %cmd,
            "Received a signal; requesting its command."
        );
        let req = Request {
            cmd,
            origin: Origin::Signal(signo),
            reply: None,
        };
        if tx.send(req).is_err() {
            // The service loop is gone; nothing left to tell.
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn signals_map_to_commands() {
        assert_eq!(command_for(libc::SIGTERM), Some(Command::Shutdown));
        assert_eq!(command_for(libc::SIGINT), Some(Command::Shutdown));
        assert_eq!(command_for(libc::SIGHUP), Some(Command::Reload));
        assert_eq!(command_for(libc::SIGUSR1), None);
    }

    /// Set in the copy of this test binary that
    /// [`signals_arrive_as_requests`] runs.
    const CHILD_ENV: &str = "MELFORGE_TEST_SIGNALS_CHILD";

    /// In that copy, blocks the three signals in the main thread before the
    /// test harness starts any thread (the C runtime runs `.init_array`
    /// before `main`), so that every thread of the copy inherits the mask,
    /// as every thread of `melforge serve` inherits it from `main`.
    // SAFETY: a constructor runs before `main`, on the only thread; this one
    // reads the environment and sets the signal mask, nothing that needs
    // std's runtime, and cannot unwind (neither call panics).
    #[used]
    #[unsafe(link_section = ".init_array")]
    static BLOCK_IN_CHILD: extern "C" fn() = block_in_child;

    extern "C" fn block_in_child() {
        if std::env::var_os(CHILD_ENV).is_some() {
            // A failure shows in the child: the first signal kills it.
            let _ = sys::block_signals(&SIGNALS);
        }
    }

    /// Signals sent to the process arrive as requests. That needs what
    /// `main` sets up: the signals blocked before any other thread exists,
    /// which this multi-threaded harness is not (one of its threads would
    /// take SIGTERM's default action). So the test runs itself again in a
    /// fresh process, this test binary with a filter naming this test and
    /// [`CHILD_ENV`] set, where [`BLOCK_IN_CHILD`] has blocked the signals
    /// from the start. A re-executed binary, never a fork of this one: see
    /// docs/CONVENTIONS.md, "Tests".
    #[test]
    fn signals_arrive_as_requests() {
        if std::env::var_os(CHILD_ENV).is_some() {
            return each_signal_arrives();
        }
        let full = concat!(module_path!(), "::signals_arrive_as_requests");
        // The harness names tests without the crate's name.
        let (_, name) = full.split_once("::").expect("a crate-qualified path");
        let o = std::process::Command::new(std::env::current_exe().expect("this test binary"))
            .args([name, "--exact", "--test-threads=1"])
            .env(CHILD_ENV, "1")
            .output()
            .expect("run the test binary again");
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success(),
            "the child failed ({}):\n{out}{err}",
            o.status
        );
        assert!(out.contains(" 1 passed;"), "the filter ran no test:\n{out}");
    }

    /// The child's part: SIGHUP, SIGTERM and SIGINT, each sent to the whole
    /// process, read from the signalfd and delivered as its command.
    fn each_signal_arrives() {
        let (tx, rx) = super::super::channel();
        let t = block_and_spawn(tx).expect("block the signals, start the thread");
        for (sig, want) in [
            (libc::SIGHUP, Command::Reload),
            (libc::SIGTERM, Command::Shutdown),
            (libc::SIGINT, Command::Shutdown),
        ] {
            sys::kill_self(sig).expect("kill");
            let r = rx
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|e| panic!("signal {sig}: no request ({e})"));
            assert!(r.cmd == want, "signal {sig}: {}", r.cmd);
            assert!(r.origin == Origin::Signal(sig), "signal {sig}");
            assert!(r.reply.is_none(), "signal {sig}: a signal has no replier");
        }
        t.stop();
    }
}
