//! The control socket server: a Unix stream socket speaking JSON lines.
//!
//! Protocol: each request is one line, either `{"cmd":"status"}` (an optional
//! `"id"` is echoed back in the reply) or a bare word `status`; each reply is
//! one JSON object line with `"ok"`. A client may send several requests on
//! one connection. Blank lines are ignored. Errors:
//! * malformed JSON, a missing `cmd`, an unknown command: an error reply, and
//!   the connection stays open;
//! * a line longer than `max_line_bytes`: an error reply, then close;
//! * a line not finished within `client_timeout_ms` of the previous reply
//!   (or of connecting): an error reply, then close. The deadline is per
//!   request line, not per read, so a client trickling a byte at a time
//!   cannot hold its slot; an idle connection is closed silently at the same
//!   deadline;
//! * more than `max_clients` connections, or more than
//!   `max_clients_per_peer` from one process: the newcomer gets a "busy"
//!   reply;
//! * a peer (SO_PEERCRED) that is not root, the service's uid, or in the
//!   configured group: an error naming its uid, then close. Refusals are
//!   logged at most once per [`REFUSAL_LOG_EVERY`] per reason, with the
//!   number left unlogged, so a client retrying in a loop cannot flood the
//!   log.
//!
//! Threads: one accept thread (poll on the listener and a wake-up socket) and
//! one thread per client, capped. Each request goes to the service loop as a
//! [`Request`] and the client thread waits for the [`Reply`]; while waiting it
//! watches the server's stop flag, so [`Server::shutdown`] never waits on a
//! service loop that is itself shutting down.
//!
//! Ownership of the socket file: start-up removes a stale socket only when a
//! connect test shows nobody listens, and refuses to start when someone does.
//! The file is unlinked when the server stops, and only if it is still the
//! inode this server bound (a successor's socket is left alone). Nothing here
//! panics on teardown: failures are logged.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::peer::{PeerCred, PeerPolicy, peer_cred, resolve_group, supplementary_groups};
use super::{Command, Error, Origin, Replier, Reply, Request, Sender};
use crate::config::ControlConfig;

/// How long a client waits for the service loop to answer one request.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`Server::shutdown`] waits for in-flight replies to be written.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// Longest command text quoted back in an "unknown command" error.
const MAX_ECHO: usize = 64;
/// At most one log line per refusal reason in this interval.
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// Settings the client threads need, copied out of the config.
struct Limits {
    max_line_bytes: usize,
    max_clients: usize,
    max_clients_per_peer: usize,
    client_timeout: Duration,
}

struct Shared {
    limits: Limits,
    policy: PeerPolicy,
    tx: Sender,
    stopping: AtomicBool,
    /// Connected clients (a clone of each stream, to unblock their reads at
    /// shutdown, and the peer's pid); a client thread removes its own entry
    /// when it ends.
    clients: Mutex<HashMap<u64, Client>>,
    /// Rate limits for the refusal log lines.
    refusals: Mutex<RefusalLog>,
    clients_changed: Condvar,
    next_id: AtomicU64,
}

/// The running control socket server. Stop it with [`Server::shutdown`] (or
/// drop it).
pub struct Server {
    path: PathBuf,
    /// (dev, ino) of the socket file this server bound.
    inode: (u64, u64),
    shared: Arc<Shared>,
    wake: UnixStream,
    accept: Mutex<Option<JoinHandle<()>>>,
    unlinked: AtomicBool,
}

impl Server {
    /// Binds the socket described by `cfg` and starts serving; requests go
    /// to `tx`. Creates the parent directory, removes a stale socket (nobody
    /// listening), refuses to start when another instance listens, applies
    /// `mode` and `group`.
    pub fn start(cfg: &ControlConfig, tx: Sender) -> Result<Server, Error> {
        let path = cfg.socket.clone();
        let shown = path.display().to_string();
        let io = |what: &'static str| {
            let path = shown.clone();
            move |source| Error::Io { what, path, source }
        };
        let group = match &cfg.group {
            Some(name) => Some((name.clone(), resolve_group(name)?)),
            None => None,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|source| Error::Io {
                what: "create the socket directory",
                path: parent.display().to_string(),
                source,
            })?;
        }
        remove_stale(&path)?;
        let listener = UnixListener::bind(&path).map_err(io("bind the control socket"))?;
        let meta = std::fs::symlink_metadata(&path).map_err(io("stat"))?;
        let inode = (meta.dev(), meta.ino());
        // From here on, a failure must not leave our socket file behind.
        let cleanup = |e: Error| {
            let _ = std::fs::remove_file(&path);
            e
        };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(cfg.mode))
            .map_err(io("chmod"))
            .map_err(cleanup)?;
        if let Some((_, gid)) = &group {
            std::os::unix::fs::chown(&path, None, Some(*gid))
                .map_err(io("chown"))
                .map_err(cleanup)?;
        }
        listener
            .set_nonblocking(true)
            .map_err(io("configure"))
            .map_err(cleanup)?;
        let (wake, wake_rx) = UnixStream::pair()
            .map_err(io("create a wake-up pair for"))
            .map_err(cleanup)?;

        let shared = Arc::new(Shared {
            limits: Limits {
                max_line_bytes: cfg.max_line_bytes,
                max_clients: cfg.max_clients,
                max_clients_per_peer: cfg.max_clients_per_peer,
                client_timeout: Duration::from_millis(cfg.client_timeout_ms),
            },
            policy: PeerPolicy::for_this_process(group),
            tx,
            stopping: AtomicBool::new(false),
            clients: Mutex::new(HashMap::new()),
            refusals: Mutex::new(RefusalLog::default()),
            clients_changed: Condvar::new(),
            next_id: AtomicU64::new(0),
        });
        let s = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("melforge-ctl-accept".into())
            .spawn(move || accept_loop(&listener, &wake_rx, &s))
            .map_err(io("start the accept thread for"))
            .map_err(cleanup)?;
        tracing::info!(
            path = %path.display(),
            mode = %format_args!("{:04o}", cfg.mode),
            "Control socket listening."
        );
        Ok(Server {
            path,
            inode,
            shared,
            wake,
            accept: Mutex::new(Some(accept)),
            unlinked: AtomicBool::new(false),
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Connected clients right now.
    pub fn clients(&self) -> usize {
        self.shared.clients.lock().map_or(0, |c| c.len())
    }

    /// Stops accepting connections and removes the socket file; connected
    /// clients are still answered. Idempotent; call it when draining starts.
    pub fn stop_accepting(&self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        let _ = (&self.wake).write_all(b"x");
        let handle = self.accept.lock().ok().and_then(|mut h| h.take());
        if let Some(h) = handle
            && h.join().is_err()
        {
            tracing::warn!("The control socket's accept thread panicked.");
        }
        self.unlink();
    }

    /// Stops accepting, closes idle connections, and waits (up to 2 s) for
    /// replies in flight to be written. Requests still waiting for the
    /// service loop are answered "the service is shutting down".
    pub fn shutdown(self) {
        // Drop does the work.
    }

    fn unlink(&self) {
        if self.unlinked.swap(true, Ordering::SeqCst) {
            return;
        }
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == self.inode => {
                if let Err(e) = std::fs::remove_file(&self.path) {
                    tracing::warn!(
                        path = %self.path.display(),
                        error = %e,
                        "Could not remove the control socket."
                    );
                }
            }
            Ok(_) => tracing::warn!(
                path = %self.path.display(),
                "The control socket was replaced by another one; leaving it in place."
            ),
            Err(_) => {}
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop_accepting();
        let Ok(mut clients) = self.shared.clients.lock() else {
            return;
        };
        for c in clients.values() {
            // Unblocks a read waiting for the next request; writes still work.
            let _ = c.stream.shutdown(std::net::Shutdown::Read);
        }
        let deadline = Instant::now() + SHUTDOWN_GRACE;
        while !clients.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!(
                    clients = clients.len(),
                    "Control clients are still connected at shutdown."
                );
                break;
            }
            match self.shared.clients_changed.wait_timeout(clients, left) {
                Ok((c, _)) => clients = c,
                Err(_) => return,
            }
        }
    }
}

/// Removes `path` if it is a socket nobody listens on; errors if someone
/// does, or if it is not a socket.
fn remove_stale(path: &Path) -> Result<(), Error> {
    let shown = || path.display().to_string();
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(Error::NotASocket { path: shown() });
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(Error::AlreadyRunning { path: shown() }),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            tracing::info!(path = %path.display(), "Removing a stale control socket.");
            std::fs::remove_file(path).map_err(|source| Error::Io {
                what: "remove the stale socket",
                path: shown(),
                source,
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error::Io {
            what: "test the existing socket",
            path: shown(),
            source,
        }),
    }
}

fn accept_loop(listener: &UnixListener, wake: &UnixStream, shared: &Arc<Shared>) {
    loop {
        match super::wait_readable(listener.as_fd(), wake.as_fd()) {
            Ok(super::Ready::Source) => {}
            Ok(super::Ready::Wake) => return,
            Err(e) => {
                tracing::error!(error = %e, "The control socket stopped: poll failed.");
                return;
            }
        }
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        loop {
            match listener.accept() {
                Ok((stream, _)) => admit(stream, shared),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "The control socket could not accept a client.");
                    std::thread::sleep(Duration::from_millis(100));
                    break;
                }
            }
        }
    }
}

/// A connected client, as the registry keeps it.
struct Client {
    /// A clone of the client's stream, shut down to unblock its thread.
    stream: UnixStream,
    /// The peer process (SO_PEERCRED), for the per-peer cap.
    pid: Option<i32>,
}

/// Starts a client thread, or answers "busy" when a cap is reached.
fn admit(stream: UnixStream, shared: &Arc<Shared>) {
    let _ = stream.set_nonblocking(false);
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let pid = peer_cred(&stream).ok().map(|p| p.pid);
    {
        let Ok(mut clients) = shared.clients.lock() else {
            return;
        };
        let limits = &shared.limits;
        let busy = if clients.len() >= limits.max_clients {
            Some(format!(
                "busy: {} control clients are connected; try again",
                limits.max_clients
            ))
        } else if pid.is_some()
            && clients.values().filter(|c| c.pid == pid).count() >= limits.max_clients_per_peer
        {
            Some(format!(
                "busy: this process already holds {} control connections (control.max_clients_per_peer); close one and try again",
                limits.max_clients_per_peer
            ))
        } else {
            None
        };
        if let Some(msg) = busy {
            drop(clients);
            shared.log_refusal(Refusal::Busy, pid, None, &msg);
            let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
            let _ = write_reply(&stream, &Reply::error(msg));
            return;
        }
        match stream.try_clone() {
            Ok(c) => clients.insert(id, Client { stream: c, pid }),
            Err(_) => return,
        };
    }
    let s = Arc::clone(shared);
    let spawned = std::thread::Builder::new()
        .name("melforge-ctl-client".into())
        .spawn(move || {
            let _guard = ClientGuard { shared: &s, id };
            serve_client(&stream, &s);
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "Could not start a control client thread.");
        if let Ok(mut c) = shared.clients.lock() {
            c.remove(&id);
        }
    }
}

/// Removes a client's registry entry when its thread ends, even by panic.
struct ClientGuard<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for ClientGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut c) = self.shared.clients.lock() {
            c.remove(&self.id);
        }
        self.shared.clients_changed.notify_all();
    }
}

fn write_reply(mut stream: &UnixStream, reply: &Reply) -> io::Result<()> {
    let mut line = reply.to_line();
    line.push('\n');
    stream.write_all(line.as_bytes())
}

/// The peer of `stream` when the policy lets it in; otherwise it is told why
/// (and a refusal is logged).
fn admitted_peer(stream: &UnixStream, shared: &Shared) -> Option<PeerCred> {
    let peer = match peer_cred(stream) {
        Ok(p) => p,
        Err(e) => {
            let _ = write_reply(
                stream,
                &Reply::error(format!("cannot identify the peer: {e}")),
            );
            return None;
        }
    };
    if let Err(denied) = shared.policy.check(peer, supplementary_groups) {
        let msg = denied.to_string();
        shared.log_refusal(Refusal::Denied, Some(peer.pid), Some(peer.uid), &msg);
        let _ = write_reply(stream, &Reply::error(msg));
        return None;
    }
    Some(peer)
}

/// The reply to one complete request line; `None` for a blank line.
fn answer(line: &[u8], peer: PeerCred, origin: Origin, shared: &Shared) -> Option<Reply> {
    match parse_request(line) {
        Ok(None) => None,
        Ok(Some((cmd, id))) => {
            tracing::debug!(
                pid = peer.pid,
                uid = peer.uid,
                command = %cmd,
                "A control client sent a command."
            );
            let reply = dispatch(cmd, origin, shared);
            Some(match id {
                Some(id) => reply.with("id", id),
                None => reply,
            })
        }
        Err(msg) => Some(Reply::error(msg)),
    }
}

fn serve_client(stream: &UnixStream, shared: &Shared) {
    let Some(peer) = admitted_peer(stream, shared) else {
        return;
    };
    let timeout = shared.limits.client_timeout;
    if stream.set_write_timeout(Some(timeout)).is_err() {
        return;
    }
    let origin = Origin::Socket {
        pid: peer.pid,
        uid: peer.uid,
    };
    let mut reader = BufReader::new(LineDeadline {
        stream,
        deadline: Instant::now() + timeout,
    });
    let mut line = Vec::new();
    loop {
        // Each request line must be complete within the timeout, however
        // its bytes arrive.
        reader.get_mut().deadline = Instant::now() + timeout;
        let reply = match read_line_limited(&mut reader, &mut line, shared.limits.max_line_bytes) {
            Ok(Line::Eof) => return,
            Ok(Line::TooLong) => {
                let msg = format!(
                    "request line exceeds {} bytes; closing the connection",
                    shared.limits.max_line_bytes
                );
                let _ = write_reply(stream, &Reply::error(msg));
                return;
            }
            Ok(Line::Complete) => match answer(&line, peer, origin, shared) {
                Some(reply) => reply,
                None => continue,
            },
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if !line.is_empty() {
                    let msg = format!(
                        "timed out after {} ms waiting for the end of the request line",
                        timeout.as_millis()
                    );
                    let _ = write_reply(stream, &Reply::error(msg));
                }
                return;
            }
            Err(_) => return,
        };
        if write_reply(stream, &reply).is_err() {
            return;
        }
    }
}

/// A client stream read under a deadline for the current request line: each
/// read waits at most until `deadline`, and a read at or past it fails with
/// `TimedOut`.
struct LineDeadline<'a> {
    stream: &'a UnixStream,
    deadline: Instant,
}

impl io::Read for LineDeadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        (&mut &*self.stream).read(buf)
    }
}

/// Why a client was turned away, for the rate-limited log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Refusal {
    Busy,
    Denied,
}

/// Per-reason log throttle: the first refusal of an interval is logged, the
/// rest are counted and reported with the next logged one.
#[derive(Default)]
struct RefusalLog {
    last: HashMap<Refusal, Instant>,
    unlogged: HashMap<Refusal, u64>,
}

impl RefusalLog {
    /// Whether to log this refusal now, and how many were left unlogged
    /// since the last line for the same reason.
    fn admit(&mut self, why: Refusal, now: Instant) -> Option<u64> {
        match self.last.get(&why) {
            Some(t) if now.duration_since(*t) < REFUSAL_LOG_EVERY => {
                *self.unlogged.entry(why).or_default() += 1;
                None
            }
            _ => {
                self.last.insert(why, now);
                Some(self.unlogged.remove(&why).unwrap_or(0))
            }
        }
    }
}

impl Shared {
    fn log_refusal(&self, why: Refusal, pid: Option<i32>, uid: Option<u32>, reason: &str) {
        let Some(unlogged) = self
            .refusals
            .lock()
            .ok()
            .and_then(|mut l| l.admit(why, Instant::now()))
        else {
            return;
        };
        match why {
            Refusal::Denied => tracing::warn!(
                pid,
                uid,
                reason,
                unlogged,
                "Refused a control client: not allowed."
            ),
            Refusal::Busy => tracing::warn!(
                pid,
                reason,
                unlogged,
                "Refused a control client: no free slot."
            ),
        }
    }
}

/// Sends one command to the service loop and waits for its reply.
fn dispatch(cmd: Command, origin: Origin, shared: &Shared) -> Reply {
    let (replier, rx) = Replier::new();
    let req = Request {
        cmd,
        origin,
        reply: Some(replier),
    };
    if shared.tx.send(req).is_err() {
        return Reply::error("the service is not taking commands (it is shutting down)");
    }
    let deadline = Instant::now() + REPLY_TIMEOUT;
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(r) => return r,
            Err(RecvTimeoutError::Disconnected) => {
                return Reply::error(format!("the service dropped the {cmd} request unanswered"));
            }
            Err(RecvTimeoutError::Timeout) => {
                if shared.stopping.load(Ordering::SeqCst) {
                    return Reply::error("the service is shutting down");
                }
                if Instant::now() >= deadline {
                    return Reply::error(format!(
                        "the service did not answer {cmd} within {} s",
                        REPLY_TIMEOUT.as_secs()
                    ));
                }
            }
        }
    }
}

enum Line {
    /// `buf` holds one line (without the newline; or the final bytes before
    /// EOF).
    Complete,
    Eof,
    TooLong,
}

/// Reads one line into `buf` (cleared first), refusing more than `max`
/// bytes. On an error, `buf` holds the partial line read so far.
fn read_line_limited(r: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> io::Result<Line> {
    buf.clear();
    loop {
        let avail = match r.fill_buf() {
            Ok(a) => a,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if avail.is_empty() {
            return Ok(if buf.is_empty() {
                Line::Eof
            } else {
                Line::Complete
            });
        }
        let (take, done) = match avail.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (avail.len(), false),
        };
        if buf.len() + take > max {
            return Ok(Line::TooLong);
        }
        buf.extend_from_slice(&avail[..take]);
        r.consume(take + usize::from(done));
        if done {
            return Ok(Line::Complete);
        }
    }
}

/// The command (and optional request id) in one line; `Ok(None)` for a blank
/// line; `Err` with the message for the client.
fn parse_request(line: &[u8]) -> Result<Option<(Command, Option<Value>)>, String> {
    let expected = || {
        format!(
            "expected {{\"cmd\":\"<command>\"}} or a bare command word, one of {}",
            Command::expected_list()
        )
    };
    let text = std::str::from_utf8(line)
        .map_err(|_| format!("the request is not valid UTF-8; {}", expected()))?
        .trim();
    if text.is_empty() {
        return Ok(None);
    }
    let unknown = |name: &str| {
        let shown: String = name.chars().take(MAX_ECHO).collect();
        let more = if name.chars().count() > MAX_ECHO {
            "…"
        } else {
            ""
        };
        format!(
            "unknown command \"{shown}{more}\"; expected one of {}",
            Command::expected_list()
        )
    };
    if !text.starts_with('{') {
        return match Command::from_name(text) {
            Some(c) => Ok(Some((c, None))),
            None => Err(unknown(text)),
        };
    }
    let v: Value = serde_json::from_str(text)
        .map_err(|e| format!("malformed JSON request ({e}); {}", expected()))?;
    let id = v.get("id").cloned();
    match v.get("cmd") {
        Some(Value::String(name)) => match Command::from_name(name) {
            Some(c) => Ok(Some((c, id))),
            None => Err(unknown(name)),
        },
        _ => Err(format!("the request has no \"cmd\" string; {}", expected())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_as_json_or_bare_words() {
        assert_eq!(
            parse_request(b"{\"cmd\":\"status\"}").unwrap(),
            Some((Command::Status, None))
        );
        assert_eq!(
            parse_request(b"  flush \r").unwrap(),
            Some((Command::Flush, None))
        );
        assert_eq!(
            parse_request(b"{\"cmd\":\"stats\",\"id\":7}").unwrap(),
            Some((Command::Stats, Some(Value::from(7))))
        );
        assert_eq!(parse_request(b"   ").unwrap(), None);
        let e = parse_request(b"foo").unwrap_err();
        assert!(
            e.starts_with("unknown command \"foo\"; expected one of status, stats,"),
            "{e}"
        );
        let e = parse_request(b"{\"cmd\":").unwrap_err();
        assert!(e.starts_with("malformed JSON request"), "{e}");
        let e = parse_request(b"{\"command\":\"status\"}").unwrap_err();
        assert!(e.contains("no \"cmd\""), "{e}");
        let e = parse_request(&[0xff, 0xfe]).unwrap_err();
        assert!(e.contains("UTF-8"), "{e}");
        let long = "x".repeat(1000);
        let e = parse_request(long.as_bytes()).unwrap_err();
        assert!(e.len() < 300, "the echo is truncated: {e}");
    }

    #[test]
    fn a_refused_peer_in_a_loop_logs_one_line_per_interval() {
        let mut log = RefusalLog::default();
        let t0 = Instant::now();
        assert_eq!(log.admit(Refusal::Denied, t0), Some(0));
        for i in 1..5000u64 {
            let t = t0 + Duration::from_micros(i);
            assert_eq!(log.admit(Refusal::Denied, t), None);
        }
        // Another reason has its own budget.
        assert_eq!(log.admit(Refusal::Busy, t0), Some(0));
        // The next interval logs once, with the count left unlogged.
        let later = t0 + REFUSAL_LOG_EVERY;
        assert_eq!(log.admit(Refusal::Denied, later), Some(4999));
        assert_eq!(log.admit(Refusal::Denied, later), None);
    }

    #[test]
    fn line_reader_limits_and_keeps_partial_lines() {
        let mut r = BufReader::with_capacity(4, &b"status\nabcdefghij\nlast"[..]);
        let mut buf = Vec::new();
        assert!(matches!(
            read_line_limited(&mut r, &mut buf, 8),
            Ok(Line::Complete)
        ));
        assert_eq!(buf, b"status");
        assert!(matches!(
            read_line_limited(&mut r, &mut buf, 8),
            Ok(Line::TooLong)
        ));
        let mut r = BufReader::new(&b"last"[..]);
        assert!(matches!(
            read_line_limited(&mut r, &mut buf, 8),
            Ok(Line::Complete)
        ));
        assert_eq!(buf, b"last");
        assert!(matches!(
            read_line_limited(&mut r, &mut buf, 8),
            Ok(Line::Eof)
        ));
    }
}
