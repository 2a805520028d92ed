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
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;

use std::io::Write;

use super::{Command, Error, Origin, Request, Sender};

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

fn sigset(signals: &[i32]) -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it fully and
    // sigaddset only sets bits for valid signal numbers (ours are constants).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (and so in every
/// thread it starts afterwards), ignores SIGPIPE, and starts the thread that
/// turns those signals into [`Request`]s on `tx`. Must be called before any
/// other thread exists; see the module docs.
pub fn block_and_spawn(tx: Sender) -> Result<SignalThread, Error> {
    let set = sigset(&SIGNALS);
    // SAFETY: `set` is an initialised sigset_t; a null old-set pointer is
    // allowed. SIG_IGN for SIGPIPE installs no handler code.
    unsafe {
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(Error::Signals(io::Error::from_raw_os_error(rc)));
        }
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    // SAFETY: `set` is initialised; -1 asks for a new fd.
    let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC) };
    if fd < 0 {
        return Err(Error::Signals(io::Error::last_os_error()));
    }
    // SAFETY: signalfd returned a new fd that nothing else owns.
    let sfd = unsafe { OwnedFd::from_raw_fd(fd) };
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
        // SAFETY: signalfd_siginfo is plain data; all-zero is a valid value.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: `info` is valid for writes of `size` bytes and the fd is open.
        let n = unsafe { libc::read(sfd.as_raw_fd(), (&raw mut info).cast(), size) };
        if n != size as isize {
            let e = io::Error::last_os_error();
            if n < 0
                && matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                )
            {
                continue;
            }
            tracing::error!(
                error = %e,
                "Signal handling stopped: reading the signalfd failed."
            );
            return;
        }
        let signo = info.ssi_signo as i32;
        let Some(cmd) = command_for(signo) else {
            continue;
        };
        tracing::info!(
            signal = signo,
            pid = info.ssi_pid,
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
            // SAFETY: signalling our own process; the signal is blocked in
            // every thread of this (forked, so single-threaded before
            // block_and_spawn) process and read from the signalfd.
            unsafe { libc::kill(libc::getpid(), sig) };
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
        // channel: glibc keeps malloc usable after fork) and then _exit()s,
        // never returning into the test harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let mut step = 0;
            let code = child(&mut step);
            // SAFETY: ends the child without running the harness's code.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child; `status` is valid for writes.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(rc, pid);
        assert!(
            libc::WIFEXITED(status),
            "child died by signal {}",
            libc::WTERMSIG(status)
        );
        assert_eq!(libc::WEXITSTATUS(status), 0, "child failed at a step");
    }
}
