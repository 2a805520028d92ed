//! The control socket and `melforge ctl`, against a fake service loop that
//! runs in this process: every command, malformed/huge/stalled/concurrent
//! clients, the client cap, the socket file's lifecycle, SO_PEERCRED (as
//! root, through `melforge ctl` run as `nobody`), and the `ctl` binary's
//! output and exit codes.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command as Process;
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use melforge::app::control::{self, Command, Reply, Server};
use melforge::config::{Config, ControlConfig};
use serde_json::{Value, json};

/// A control server on a temp path with a fake service loop answering it.
struct Fake {
    dir: tempfile::TempDir,
    path: PathBuf,
    server: Option<Server>,
    service: Option<JoinHandle<()>>,
}

/// The fake service loop's answer: echoes the command; `rebuild` fails.
fn answer(cmd: Command) -> Reply {
    match cmd {
        Command::Rebuild => Reply::error("a rebuild is already running"),
        Command::Status => Reply::ok_with(json!({
            "cmd": "status",
            "state": "running",
            "uptime_s": 12.5,
            "backend": "cpu",
            "files": {"ok": 3, "rejected": 1},
            "last_error": null,
        })),
        other => Reply::ok().with("cmd", other.name()),
    }
}

impl Fake {
    fn start(tune: impl FnOnce(&mut ControlConfig)) -> Fake {
        Fake::start_with(tune, |rx| {
            for req in rx {
                let r = answer(req.cmd);
                req.respond(r);
            }
        })
    }

    fn start_with(
        tune: impl FnOnce(&mut ControlConfig),
        service: impl FnOnce(control::Receiver) + Send + 'static,
    ) -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = Config::default().control;
        cfg.socket = dir.path().join("run/control.sock"); // parent is created
        tune(&mut cfg);
        let (tx, rx) = control::channel();
        let server = Server::start(&cfg, tx).unwrap();
        let service = std::thread::spawn(move || service(rx));
        Fake {
            path: cfg.socket,
            dir,
            server: Some(server),
            service: Some(service),
        }
    }

    fn connect(&self) -> Conn {
        Conn::new(UnixStream::connect(&self.path).unwrap())
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        drop(self.server.take()); // drops the sender: the service loop ends
        if let Some(s) = self.service.take() {
            let _ = s.join();
        }
    }
}

struct Conn {
    w: UnixStream,
    r: BufReader<UnixStream>,
}

impl Conn {
    fn new(s: UnixStream) -> Conn {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Conn {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    /// Sends one line. A server that refuses a client answers and closes
    /// at once, so the send may meet a closed socket (EPIPE); the answer is
    /// still there for `recv`.
    fn send(&mut self, line: &str) {
        let sent = self
            .w
            .write_all(line.as_bytes())
            .and_then(|()| self.w.write_all(b"\n"));
        match sent {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => panic!("send: {e}"),
            _ => {}
        }
    }

    fn recv(&mut self) -> Value {
        let mut line = String::new();
        self.r.read_line(&mut line).unwrap();
        assert!(line.ends_with('\n'), "no reply line: {line:?}");
        serde_json::from_str(&line).unwrap()
    }

    fn ask(&mut self, line: &str) -> Value {
        self.send(line);
        self.recv()
    }

    /// True when the server has closed the connection (EOF or reset).
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        !matches!(self.r.read(&mut b), Ok(n) if n > 0)
    }
}

#[test]
fn every_command_gets_its_reply_in_both_request_forms() {
    let f = Fake::start(|_| {});
    let mut c = f.connect();
    for cmd in Command::ALL {
        for line in [format!("{{\"cmd\":\"{}\"}}", cmd.name()), cmd.name().into()] {
            let r = c.ask(&line);
            if cmd == Command::Rebuild {
                assert_eq!(r["ok"], false, "{r}");
                assert_eq!(r["error"], "a rebuild is already running");
            } else {
                assert_eq!(r["ok"], true, "{r}");
                assert_eq!(r["cmd"], cmd.name(), "{r}");
            }
        }
    }
    let r = c.ask(r#"{"cmd":"status","id":"abc"}"#);
    assert_eq!(r["id"], "abc");
    assert_eq!(r["files"]["ok"], 3);
}

#[test]
fn malformed_and_unknown_requests_get_errors_and_the_connection_stays_open() {
    let f = Fake::start(|_| {});
    let mut c = f.connect();
    let r = c.ask("foo");
    assert_eq!(r["ok"], false);
    let e = r["error"].as_str().unwrap();
    assert!(
        e.starts_with("unknown command \"foo\"; expected one of status, stats, rebuild"),
        "{e}"
    );
    let r = c.ask(r#"{"cmd":"bar"}"#);
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("unknown command \"bar\"")
    );
    let r = c.ask(r#"{"cmd":"#);
    assert!(
        r["error"].as_str().unwrap().starts_with("malformed JSON"),
        "{r}"
    );
    let r = c.ask(r#"{"command":"status"}"#);
    assert!(r["error"].as_str().unwrap().contains("\"cmd\""), "{r}");
    c.w.write_all(b"\xff\xfe\n").unwrap();
    assert!(c.recv()["error"].as_str().unwrap().contains("UTF-8"));
    // Blank lines are ignored; the connection still works.
    c.send("");
    assert_eq!(c.ask("status")["ok"], true);
}

#[test]
fn an_over_long_line_is_refused_and_the_connection_closed() {
    let f = Fake::start(|c| c.max_line_bytes = 1024);
    let mut c = f.connect();
    // Exactly at the limit is fine.
    let padded = format!("{:<1024}", "status");
    assert_eq!(c.ask(&padded)["ok"], true);
    let _ = c.w.write_all(&vec![b'a'; 5000]);
    let _ = c.w.write_all(b"\n");
    let r = c.recv();
    assert_eq!(r["ok"], false);
    assert!(
        r["error"].as_str().unwrap().contains("exceeds 1024 bytes"),
        "{r}"
    );
    assert!(c.closed());
    // The server is still fine.
    assert_eq!(f.connect().ask("status")["ok"], true);
}

#[test]
fn fifty_concurrent_clients_all_get_answers() {
    // All fifty come from this one process: lift the per-peer cap.
    let f = Arc::new(Fake::start(|c| c.max_clients_per_peer = 64));
    let barrier = Arc::new(Barrier::new(50));
    let threads: Vec<_> = (0..50)
        .map(|i| {
            let f = Arc::clone(&f);
            let b = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let mut c = f.connect();
                b.wait();
                let r = c.ask(&format!(r#"{{"cmd":"stats","id":{i}}}"#));
                assert_eq!(r["ok"], true);
                assert_eq!(r["id"], i);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn a_stalled_client_does_not_block_others_and_is_timed_out() {
    let f = Fake::start(|c| c.client_timeout_ms = 1500);
    let mut stalled = f.connect();
    stalled.w.write_all(br#"{"cmd":"sta"#).unwrap();
    let t = Instant::now();
    assert_eq!(f.connect().ask("status")["ok"], true);
    assert!(
        t.elapsed() < Duration::from_millis(1000),
        "{:?}",
        t.elapsed()
    );
    let r = stalled.recv();
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("timed out after 1500 ms"),
        "{r}"
    );
    assert!(t.elapsed() >= Duration::from_millis(1400));
    assert!(stalled.closed());
}

#[test]
fn trickling_clients_cannot_hold_control_slots_past_one_request_deadline() {
    // Regression: the timeout was per read, so a byte every 200 ms kept a
    // slot forever and `ctl status` got "busy" for as long as they trickled.
    let f = Arc::new(Fake::start(|c| {
        c.max_clients = 4;
        c.client_timeout_ms = 800;
    }));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tricklers: Vec<_> = (0..4)
        .map(|_| {
            let mut c = f.connect();
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut sent = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if c.w.write_all(b" ").is_err() {
                        return sent;
                    }
                    sent += 1;
                    std::thread::sleep(Duration::from_millis(200));
                }
                sent
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    // While they trickle, a newcomer is busy at first...
    let r = f.connect().recv();
    assert!(r["error"].as_str().unwrap_or("").starts_with("busy"), "{r}");
    // ...and gets its answer once the tricklers' line deadline has passed,
    // though they never stop sending.
    let t = Instant::now();
    let answered = loop {
        let r = f.connect().ask("status");
        if r["ok"] == true {
            break t.elapsed();
        }
        assert!(
            t.elapsed() < Duration::from_secs(6),
            "still refused while clients trickle: {r}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in tricklers {
        t.join().unwrap();
    }
    assert!(answered < Duration::from_secs(3), "{answered:?}");
}

#[test]
fn one_process_cannot_take_every_control_slot() {
    let f = Fake::start(|c| {
        c.max_clients = 8;
        c.max_clients_per_peer = 3;
    });
    let mut held: Vec<_> = (0..3).map(|_| f.connect()).collect();
    for c in &mut held {
        assert_eq!(c.ask("status")["ok"], true);
    }
    let mut fourth = f.connect();
    let r = fourth.recv();
    let e = r["error"].as_str().unwrap_or("");
    assert!(
        e.starts_with("busy: this process already holds 3 control connections"),
        "{r}"
    );
    assert!(fourth.closed());
    // Another process still gets in: the cap is per peer, not global.
    let out = Process::new("python3")
        .arg("-c")
        .arg(
            "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); \
             s.sendall(b'status\\n'); print(s.makefile().readline(), end='')",
        )
        .arg(&f.path)
        .output()
        .unwrap();
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reply["ok"], true, "{reply}");
}

#[test]
fn clients_beyond_the_cap_are_told_busy() {
    let f = Fake::start(|c| c.max_clients = 2);
    let mut a = f.connect();
    let mut b = f.connect();
    assert_eq!(a.ask("status")["ok"], true);
    assert_eq!(b.ask("status")["ok"], true);
    let mut c = f.connect();
    let r = c.recv();
    assert_eq!(r["ok"], false);
    assert!(r["error"].as_str().unwrap().starts_with("busy"), "{r}");
    assert!(c.closed());
    drop(a);
    // The slot frees once the server notices the hang-up.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = f.connect().ask("status");
        if r["ok"] == true {
            break;
        }
        assert!(Instant::now() < deadline, "slot never freed: {r}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(b.ask("pause")["ok"], true);
}

#[test]
fn the_socket_file_has_the_mode_and_is_removed_on_shutdown() {
    let mut f = Fake::start(|c| c.mode = 0o600);
    let meta = std::fs::metadata(&f.path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);

    // A second instance on the same path refuses to start and leaves it alone.
    let cfg = ControlConfig {
        socket: f.path.clone(),
        ..Config::default().control
    };
    let (tx, _rx) = control::channel();
    let e = Server::start(&cfg, tx)
        .err()
        .expect("a second instance fails");
    assert!(matches!(e, control::Error::AlreadyRunning { .. }), "{e}");
    assert!(e.to_string().contains("already listening"), "{e}");
    assert_eq!(f.connect().ask("status")["ok"], true);

    f.server.take().unwrap().shutdown();
    assert!(!f.path.exists(), "socket file removed");
}

#[test]
fn a_stale_socket_is_replaced_but_a_regular_file_is_not() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("c.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap()); // leaves the file
    assert!(path.exists());
    let cfg = ControlConfig {
        socket: path.clone(),
        ..Config::default().control
    };
    let (tx, _rx) = control::channel();
    let s = Server::start(&cfg, tx).expect("a stale socket is replaced");
    drop(s);

    std::fs::write(&path, b"precious").unwrap();
    let (tx, _rx) = control::channel();
    let e = Server::start(&cfg, tx)
        .err()
        .expect("a regular file is refused");
    assert!(matches!(e, control::Error::NotASocket { .. }), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
}

#[test]
fn stop_accepting_keeps_connected_clients_served() {
    let mut f = Fake::start(|_| {});
    let mut a = f.connect();
    assert_eq!(a.ask("status")["ok"], true);
    f.server.as_ref().unwrap().stop_accepting();
    assert!(UnixStream::connect(&f.path).is_err(), "no new clients");
    assert_eq!(a.ask("flush")["ok"], true);
    f.server.take().unwrap().shutdown();
    assert!(a.closed(), "idle clients are closed at shutdown");
}

#[test]
fn shutdown_does_not_wait_for_a_service_loop_that_never_answers() {
    let mut f = Fake::start_with(
        |_| {},
        |rx| {
            // Holds every request without answering, until the channel ends.
            let held: Vec<_> = rx.iter().collect();
            drop(held);
        },
    );
    let mut a = f.connect();
    a.send("status");
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    f.server.take().unwrap().shutdown();
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    let r = a.recv();
    assert_eq!(r["error"], "the service is shutting down", "{r}");
}

#[test]
fn a_dropped_request_is_an_error_not_a_hang() {
    let f = Fake::start_with(
        |_| {},
        |rx| {
            for req in rx {
                drop(req);
            }
        },
    );
    let r = f.connect().ask("pause");
    assert_eq!(
        r["error"], "the service dropped the pause request unanswered",
        "{r}"
    );
}

/// Sends `status` to `f` by running `melforge ctl --json` as uid/gid 65534
/// (`nobody`; std drops the supplementary groups when root sets the uid) and
/// returns the reply's error (empty when allowed), or None when not root.
///
/// A process of its own through `Command`, never a fork of this harness: a
/// forked copy of the multi-threaded test binary would keep every descriptor
/// the other tests hold open, a sibling's listening socket among them
/// (docs/CONVENTIONS.md, "Tests").
fn ask_as_nobody(f: &Fake) -> Option<String> {
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to drop to another uid");
        return None;
    }
    // nobody must reach the socket: open up the temp directories.
    for p in [f.dir.path(), f.path.parent().unwrap()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let exe = exe_for_nobody(f.dir.path());
    let run = || {
        Process::new(&exe)
            .args(["ctl", "--json", "--timeout", "10", "--socket"])
            .arg(&f.path)
            .arg("status")
            .uid(65534)
            .gid(65534)
            .output()
    };
    // A fresh copy can be busy for a moment (ETXTBSY): another test's child,
    // between its fork and its exec, may still hold the copy's write end.
    let mut o = run();
    for _ in 0..100 {
        match &o {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(Duration::from_millis(20));
                o = run();
            }
            _ => break,
        }
    }
    let o = o.unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    let reply: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "ctl as nobody printed no JSON reply ({e}): {}, stderr: {stderr}",
            o.status
        )
    });
    if reply["ok"] == true {
        assert!(o.status.success(), "{}: {stderr}", o.status);
        Some(String::new())
    } else {
        assert_eq!(o.status.code(), Some(1), "{stderr}");
        Some(
            reply["error"]
                .as_str()
                .expect("an error sentence")
                .to_owned(),
        )
    }
}

/// The `melforge` binary where `nobody` may run it: cargo's own when every
/// directory above it lets others through, else a copy in `dir` (a checkout
/// under a private home, as CI's may be).
fn exe_for_nobody(dir: &Path) -> PathBuf {
    let exe = Path::new(env!("CARGO_BIN_EXE_melforge"));
    let others_may =
        |p: &Path, bit: u32| std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & bit != 0);
    if others_may(exe, 0o001) && exe.ancestors().skip(1).all(|d| others_may(d, 0o001)) {
        return exe.to_path_buf();
    }
    let copy = dir.join("melforge");
    std::fs::copy(exe, &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    copy
}

#[test]
fn peers_of_another_uid_are_refused_unless_in_the_group() {
    let f = Fake::start(|c| c.mode = 0o666);
    if let Some(e) = ask_as_nobody(&f) {
        assert!(
            e.starts_with("permission denied: uid 65534 may not use this socket"),
            "{e:?}"
        );
    }
    let f = Fake::start(|c| {
        c.mode = 0o660;
        c.group = Some("65534".into());
    });
    // The socket was given the group.
    let gid = std::os::unix::fs::MetadataExt::gid(&std::fs::metadata(&f.path).unwrap());
    assert_eq!(gid, 65534);
    if let Some(e) = ask_as_nobody(&f) {
        assert_eq!(e, "", "a group member is allowed");
    }
}

fn ctl(args: &[&str], socket: &Path) -> std::process::Output {
    Process::new(env!("CARGO_BIN_EXE_melforge"))
        .arg("ctl")
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn ctl_prints_human_and_json_replies_and_exits_1_on_errors() {
    let f = Fake::start(|_| {});
    let o = ctl(&["status"], &f.path);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(out.contains("state: running\n"), "{out}");
    assert!(out.contains("files:\n  ok: 3\n  rejected: 1\n"), "{out}");
    assert!(out.contains("last_error: -\n"), "{out}");
    assert!(!out.contains("ok: true"), "{out}");

    let o = ctl(&["--json", "flush"], &f.path);
    assert!(o.status.success());
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v, json!({"ok": true, "cmd": "flush"}));

    let o = ctl(&["rebuild"], &f.path);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim(),
        "error: a rebuild is already running"
    );
    let o = ctl(&["rebuild", "--json"], &f.path);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], false);
}

#[test]
fn ctl_without_a_service_says_so_and_reads_the_socket_from_the_config() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("nope.sock");
    let o = ctl(&["status"], &missing);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err.trim(),
        format!(
            "error: cannot connect to {}: No such file or directory — is `melforge serve` running?",
            missing.display()
        )
    );

    let f = Fake::start(|_| {});
    let cfg = d.path().join("m.toml");
    std::fs::write(
        &cfg,
        format!("[control]\nsocket = \"{}\"\n", f.path.display()),
    )
    .unwrap();
    let o = Process::new(env!("CARGO_BIN_EXE_melforge"))
        .args(["ctl", "pause", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "cmd: pause\n");
}
