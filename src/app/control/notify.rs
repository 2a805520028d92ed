//! sd_notify: tells systemd (Type=notify) when the service is ready, what it
//! is doing, that it is alive (watchdog), and that it is stopping.
//!
//! Every call is a no-op when `NOTIFY_SOCKET` is unset (not started by
//! systemd). A failed send is logged, never fatal: the service keeps working
//! even if the manager cannot be told. The service loop should:
//! * call [`ready`] once set-up is done (socket bound, initial scan queued);
//! * call [`status`] with a one-line summary (rates, counts) now and then;
//! * when [`watchdog_interval`] is `Some(d)`, call [`watchdog`] every `d / 2`
//!   from the loop itself, so a wedged loop stops the pings;
//! * call [`reloading`] then [`ready`] around a SIGHUP reload;
//! * call [`stopping`] when draining starts.

use std::time::Duration;

use sd_notify::NotifyState;

fn send(what: &str, states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(state = what, error = %e, "Could not notify the service manager.");
    }
}

/// Whether a service manager listens (`NOTIFY_SOCKET` is set).
pub fn enabled() -> bool {
    std::env::var_os("NOTIFY_SOCKET").is_some()
}

/// `READY=1`: start-up is complete.
pub fn ready() {
    send("READY=1", &[NotifyState::Ready]);
}

/// `STATUS=…`: a one-line description shown by `systemctl status`.
pub fn status(text: &str) {
    // A newline would end the field early; keep the message on one line.
    let line = text.replace('\n', " ");
    send("STATUS", &[NotifyState::Status(&line)]);
}

/// `RELOADING=1` (with `MONOTONIC_USEC`): a reload started; send [`ready`]
/// when it is done.
pub fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send("RELOADING=1", &[NotifyState::Reloading, now]),
        Err(_) => send("RELOADING=1", &[NotifyState::Reloading]),
    }
}

/// `STOPPING=1`: shutdown started.
pub fn stopping() {
    send("STOPPING=1", &[NotifyState::Stopping]);
}

/// `WATCHDOG=1`: the service is alive.
pub fn watchdog() {
    send("WATCHDOG=1", &[NotifyState::Watchdog]);
}

/// The watchdog timeout systemd expects pings within (`WATCHDOG_USEC`, for
/// this pid), or `None` when the watchdog is off. Ping at half of it.
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled().filter(|d| !d.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;

    const CHILD_MARKER: &str = "MELFORGE_NOTIFY_TEST_CHILD";

    /// Runs inside a re-executed copy of this test binary (the environment
    /// of a multi-threaded test process cannot be changed safely), with
    /// NOTIFY_SOCKET and WATCHDOG_USEC set by the parent test.
    #[test]
    fn notify_child_sends_states() {
        if std::env::var_os(CHILD_MARKER).is_none() {
            return; // only meaningful as the parent's child
        }
        assert!(enabled());
        assert_eq!(watchdog_interval(), Some(Duration::from_secs(30)));
        ready();
        status("12 files/s\nok");
        watchdog();
        reloading();
        stopping();
    }

    #[test]
    fn states_arrive_on_a_fake_notify_socket() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        // The test's path from this module's, so a module move cannot leave
        // `--exact` matching nothing (which made this test wait for
        // datagrams that never came after control/ moved under app/).
        let module = module_path!().split_once("::").map_or("", |(_, m)| m);
        let child = format!("{module}::notify_child_sends_states");
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &child, "--test-threads=1"])
            .env(CHILD_MARKER, "1")
            .env("NOTIFY_SOCKET", &path)
            .env("WATCHDOG_USEC", "30000000")
            .env_remove("WATCHDOG_PID")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        for _ in 0..5 {
            let n = sock.recv(&mut buf).expect("a datagram");
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        assert_eq!(got[0], "READY=1\n");
        assert_eq!(got[1], "STATUS=12 files/s ok\n");
        assert_eq!(got[2], "WATCHDOG=1\n");
        assert!(
            got[3].starts_with("RELOADING=1\nMONOTONIC_USEC="),
            "{}",
            got[3]
        );
        assert_eq!(got[4], "STOPPING=1\n");
    }

    #[test]
    fn without_notify_socket_calls_are_no_ops() {
        if enabled() {
            eprintln!("skipped: NOTIFY_SOCKET is set for the test process");
            return;
        }
        ready();
        status("x");
        stopping();
        watchdog();
    }
}
