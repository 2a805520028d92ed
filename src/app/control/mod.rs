//! Control of the running service: one [`Command`] channel fed by signals and
//! by the Unix control socket, answered by the service loop.
//!
//! ```text
//! SIGTERM/SIGINT/SIGHUP ──signals::block_and_spawn──┐
//!                                                    ├──Request──▶ service loop ──Reply──▶ socket client
//! control socket clients ──socket::Server (JSON)────┘   (mpsc)     (one thread)
//! ```
//!
//! * [`Request`] is what the service loop receives: a [`Command`], where it
//!   came from ([`Origin`]) and, for socket requests, a [`Replier`] that must
//!   be answered with one [`Reply`]. Signals carry no replier.
//! * The channel is a plain `std::sync::mpsc` channel ([`channel`]): unbounded,
//!   so a signal never blocks; the socket side is bounded by its client cap.
//!   The service loop waits with `recv_timeout` to interleave its own timers
//!   (flush interval, watchdog pings).
//! * [`socket`] is the server (JSON lines, client cap and timeouts), [`peer`]
//!   its SO_PEERCRED policy, [`client`] the `melforge ctl` side, [`signals`]
//!   the signalfd thread, [`notify`] the sd_notify calls.
//!
//! Invariants: every socket request gets exactly one reply line: the service's
//! reply, or an error if the service dropped the replier or is shutting
//! down. Replies are JSON objects with `"ok": true|false`; failures carry
//! `"error"`.

pub mod client;
pub mod notify;
pub mod peer;
pub mod signals;
pub mod socket;

use std::sync::mpsc;

use serde::Serialize;
use serde_json::{Map, Value};

pub use socket::Server;

/// What an operator (or the service manager, through a signal) asks of the
/// service. Also the argument of `melforge ctl` (clap value names are the wire
/// names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Command {
    /// State, uptime, backend, counts, rates, ring depths, last error.
    Status,
    /// Full per-stage telemetry.
    Stats,
    /// Re-ingest the whole tree into new files, then swap them in.
    Rebuild,
    /// Stop taking new files (watch events keep being queued).
    Pause,
    /// Take new files again (undoes pause).
    Resume,
    /// Flush the outputs now.
    Flush,
    /// Finish the files in flight, flush and exit 0 (also SIGTERM, SIGINT).
    Shutdown,
    /// Re-read the config, apply what can change live, report the rest (also SIGHUP).
    Reload,
    /// Merge the journal into the on-disk index now (bounds memory and journal size).
    Compact,
}

impl Command {
    /// Every command, in the order error messages list them.
    pub const ALL: [Command; 9] = [
        Command::Status,
        Command::Stats,
        Command::Rebuild,
        Command::Pause,
        Command::Resume,
        Command::Flush,
        Command::Shutdown,
        Command::Reload,
        Command::Compact,
    ];

    /// The wire name (`"status"`, …).
    pub fn name(self) -> &'static str {
        match self {
            Command::Status => "status",
            Command::Stats => "stats",
            Command::Rebuild => "rebuild",
            Command::Pause => "pause",
            Command::Resume => "resume",
            Command::Flush => "flush",
            Command::Shutdown => "shutdown",
            Command::Reload => "reload",
            Command::Compact => "compact",
        }
    }

    /// The command with this wire name (case-insensitive).
    pub fn from_name(name: &str) -> Option<Command> {
        Command::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(name))
    }

    /// "status, stats, …, reload", for error messages.
    pub fn expected_list() -> String {
        let names: Vec<_> = Command::ALL.iter().map(|c| c.name()).collect();
        names.join(", ")
    }
}

impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a request came from (for logs and for the reply to a repeated
/// shutdown signal, which the service loop may treat as "stop now").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A signal; the number (`libc::SIGTERM`, …).
    Signal(i32),
    /// A control socket client, identified by its SO_PEERCRED credentials.
    Socket { pid: i32, uid: u32 },
    /// A scrape of the metrics endpoint (`stats` only).
    Metrics,
}

/// One reply: a JSON object with `"ok"`. Build with [`Reply::ok`],
/// [`Reply::ok_with`] or [`Reply::error`].
#[derive(Clone, Debug, PartialEq)]
pub struct Reply(Map<String, Value>);

impl Reply {
    /// `{"ok": true}`.
    pub fn ok() -> Reply {
        let mut m = Map::new();
        m.insert("ok".into(), Value::Bool(true));
        Reply(m)
    }

    /// `{"ok": true, ...fields}`: the fields of `body` (a struct or map that
    /// serialises to an object; anything else lands under `"result"`).
    pub fn ok_with(body: impl Serialize) -> Reply {
        let mut r = Reply::ok();
        match serde_json::to_value(body) {
            Ok(Value::Object(fields)) => {
                for (k, v) in fields {
                    if k != "ok" {
                        r.0.insert(k, v);
                    }
                }
            }
            Ok(Value::Null) => {}
            Ok(other) => {
                r.0.insert("result".into(), other);
            }
            Err(e) => return Reply::error(format!("cannot encode the reply: {e}")),
        }
        r
    }

    /// `{"ok": false, "error": message}`.
    pub fn error(message: impl Into<String>) -> Reply {
        let mut m = Map::new();
        m.insert("ok".into(), Value::Bool(false));
        m.insert("error".into(), Value::String(message.into()));
        Reply(m)
    }

    /// Adds or replaces one field.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Reply {
        self.0.insert(key.into(), value.into());
        self
    }

    pub fn is_ok(&self) -> bool {
        self.0.get("ok") == Some(&Value::Bool(true))
    }

    /// The reply as a JSON object.
    pub fn as_map(&self) -> &Map<String, Value> {
        &self.0
    }

    /// One line of JSON, without the newline.
    pub fn to_line(&self) -> String {
        serde_json::to_string(&self.0).expect("a JSON map always serialises")
    }
}

/// The answer slot of one socket request. Consuming: a request is answered
/// at most once; dropping it unanswered makes the client see an error.
#[derive(Debug)]
pub struct Replier(mpsc::SyncSender<Reply>);

impl Replier {
    /// A replier and the receiving end the socket thread waits on.
    pub(crate) fn new() -> (Replier, mpsc::Receiver<Reply>) {
        let (tx, rx) = mpsc::sync_channel(1);
        (Replier(tx), rx)
    }

    /// Sends the reply; if the client has gone (or timed out) it is dropped.
    pub fn send(self, reply: Reply) {
        let _ = self.0.try_send(reply);
    }
}

/// What the service loop receives.
#[derive(Debug)]
pub struct Request {
    pub cmd: Command,
    pub origin: Origin,
    /// `Some` for socket requests (answer it), `None` for signals.
    pub reply: Option<Replier>,
}

impl Request {
    /// Answers the request if it expects an answer; a no-op for signals.
    pub fn respond(self, reply: Reply) {
        if let Some(r) = self.reply {
            r.send(reply);
        }
    }
}

/// What [`wait_readable`] saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ready {
    /// The watched descriptor has input.
    Source,
    /// The wake-up descriptor has input (or hung up): the thread should stop.
    Wake,
}

/// Blocks until `source` or `wake` is readable, retrying on EINTR. A wake-up
/// wins when both are ready. Used by the signal thread and the socket's
/// accept loop, which both sleep until work arrives or they are told to stop.
pub(crate) fn wait_readable(
    source: std::os::fd::BorrowedFd<'_>,
    wake: std::os::fd::BorrowedFd<'_>,
) -> std::io::Result<Ready> {
    loop {
        match crate::runtime::sys::poll_readable([source, wake], None) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
            Ok([_, true]) => return Ok(Ready::Wake),
            Ok([true, false]) => return Ok(Ready::Source),
            Ok([false, false]) => continue,
        }
    }
}

/// The sending side, cloned into the signal thread and the socket server.
pub type Sender = mpsc::Sender<Request>;
/// The service loop's end.
pub type Receiver = mpsc::Receiver<Request>;

/// A new command channel.
pub fn channel() -> (Sender, Receiver) {
    mpsc::channel()
}

/// Problems setting up the control socket or the signal thread.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error(
        "another melforge instance is already listening on {path}; stop it or set [control] socket to another path"
    )]
    AlreadyRunning { path: String },
    #[error("{path} exists and is not a socket; refusing to replace it")]
    NotASocket { path: String },
    #[error("control.group: no group named \"{name}\" on this system")]
    UnknownGroup { name: String },
    #[error("cannot set up signal handling: {0}")]
    Signals(std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for c in Command::ALL {
            assert_eq!(Command::from_name(c.name()), Some(c));
        }
        assert_eq!(Command::from_name("STATUS"), Some(Command::Status));
        assert_eq!(Command::from_name("foo"), None);
        assert!(Command::expected_list().starts_with("status, stats, rebuild"));
    }

    #[test]
    fn replies_are_objects_with_ok() {
        #[derive(Serialize)]
        struct S {
            state: &'static str,
            ok: u32,
        }
        let r = Reply::ok_with(S {
            state: "running",
            ok: 7,
        });
        assert!(r.is_ok());
        assert_eq!(r.to_line(), r#"{"ok":true,"state":"running"}"#);
        assert_eq!(Reply::ok_with(3).to_line(), r#"{"ok":true,"result":3}"#);
        let e = Reply::error("nope");
        assert!(!e.is_ok());
        assert_eq!(e.to_line(), r#"{"error":"nope","ok":false}"#);
    }

    #[test]
    fn dropped_replier_is_seen_by_the_waiter() {
        let (r, rx) = Replier::new();
        drop(r);
        assert!(rx.recv().is_err());
        let (r, rx) = Replier::new();
        drop(rx);
        r.send(Reply::ok()); // client gone: no panic
    }
}
