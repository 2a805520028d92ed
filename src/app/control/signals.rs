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
    use std::os::unix::process::ExitStatusExt;
    use std::time::Duration;

    #[test]
    fn signals_map_to_commands() {
        assert_eq!(command_for(libc::SIGTERM), Some(Command::Shutdown));
        assert_eq!(command_for(libc::SIGINT), Some(Command::Shutdown));
        assert_eq!(command_for(libc::SIGHUP), Some(Command::Reload));
        assert_eq!(command_for(libc::SIGUSR1), None);
    }

    /// Exit code of the forked child for each failed step.
    fn child(step: &mut i32) -> i32 {
        let (tx, rx) = super::super::channel();
        let Ok(t) = block_and_spawn(tx) else { return 1 };
        for (sig, want) in [
            (libc::SIGHUP, Command::Reload),
            (libc::SIGTERM, Command::Shutdown),
            (libc::SIGINT, Command::Shutdown),
        ] {
            *step += 1;
            // The signal is blocked in every thread of this (forked, so
            // single-threaded before block_and_spawn) process and read from
            // the signalfd.
            if sys::kill_self(sig).is_err() {
                return 20 + *step;
            }
            match rx.recv_timeout(Duration::from_secs(5)) {
                Ok(r) if r.cmd == want && r.origin == Origin::Signal(sig) && r.reply.is_none() => {}
                _ => return 10 + *step,
            }
        }
        t.stop();
        0
    }

    /// Blocking signals must happen before other threads exist, which the
    /// test harness violates; so the real thing runs in a forked child (one
    /// thread), which reports by exit status.
    #[test]
    fn signals_arrive_as_requests_in_a_forked_child() {
        // SAFETY: the child only runs `child` (signal mask, a thread, a
        // channel: glibc keeps malloc usable after fork) and then exits with
        // exit_now, never returning into the test harness.
        let forked = unsafe { sys::fork() }.expect("fork");
        let Some(pid) = forked else {
            let mut step = 0;
            let code = child(&mut step);
            sys::exit_now(code);
        };
        let status = sys::wait_child(pid).expect("waitpid");
        assert!(
            status.code().is_some(),
            "child died by signal {:?}",
            status.signal()
        );
        assert_eq!(status.code(), Some(0), "child failed at a step");
    }
}
