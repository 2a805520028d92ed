//! `melforge ctl`: sends one command to a running `melforge serve` over its
//! control socket and prints the reply, human-readable (key: value lines,
//! nested objects indented), as the raw JSON line with `--json`, or for
//! `stats` as the Prometheus text exposition with `--format prometheus`.
//!
//! Exit status (through [`main`]'s result): success when the reply has
//! `"ok": true`; an [`Error`] (exit 1 in `main`) when the socket cannot be
//! reached, the reply is not JSON, or the service answered `"ok": false`.
//! The socket path comes from `--socket`, else `--config F`'s
//! `[control] socket`, else the default.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::Command;
use crate::config::{Config, DEFAULT_CONTROL_SOCKET};

/// Arguments of `melforge ctl`.
#[derive(Clone, Debug, clap::Args)]
pub struct CtlArgs {
    /// The command to send.
    #[arg(value_enum)]
    pub command: Command,
    /// Control socket path (default: control.socket from --config, else
    /// /run/melforge/control.sock).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Config file to read control.socket from.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Print the reply as one JSON line (same as --format json).
    #[arg(long)]
    pub json: bool,
    /// Output format; prometheus (text exposition, as the metrics endpoint
    /// serves it) is for `stats` only.
    #[arg(long, value_enum, conflicts_with = "json")]
    pub format: Option<Format>,
    /// Seconds to wait for the reply.
    #[arg(long, default_value_t = 35)]
    pub timeout: u64,
}

/// How `ctl` prints the reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Human,
    Json,
    Prometheus,
}

/// Why `melforge ctl` failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot connect to {path}: {reason} — {hint}")]
    Connect {
        path: String,
        reason: String,
        hint: &'static str,
    },
    #[error("lost the connection to {path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("{path} answered something that is not a JSON object: {line:?}")]
    BadReply { path: String, line: String },
    /// The service answered `"ok": false`.
    #[error("{reason}")]
    Refused { reason: String },
    #[error(transparent)]
    Config(#[from] crate::config::Error),
    #[error("--format prometheus is only for `stats` (not `{0}`)")]
    NotStats(Command),
    #[error("the stats reply does not read as stats: {0}")]
    BadStats(serde_json::Error),
}

/// The socket `ctl` talks to: `--socket`, else the config's, else the default.
pub fn socket_path(args: &CtlArgs) -> Result<PathBuf, Error> {
    if let Some(s) = &args.socket {
        return Ok(s.clone());
    }
    if let Some(f) = &args.config {
        return Ok(Config::load(f)?.control.socket);
    }
    Ok(PathBuf::from(DEFAULT_CONTROL_SOCKET))
}

/// An io::Error's message without the " (os error N)" suffix.
fn os_message(e: &io::Error) -> String {
    let s = e.to_string();
    match s.rsplit_once(" (os error ") {
        Some((msg, _)) => msg.to_string(),
        None => s,
    }
}

/// Sends `cmd` to the socket at `path` and returns the reply object
/// (whatever its `ok`).
pub fn request(path: &Path, cmd: Command, timeout: Duration) -> Result<Value, Error> {
    let shown = || path.display().to_string();
    let stream = UnixStream::connect(path).map_err(|e| Error::Connect {
        path: shown(),
        reason: os_message(&e),
        hint: match e.kind() {
            io::ErrorKind::PermissionDenied => {
                "run as root, as the service's user, or as a member of its [control] group"
            }
            _ => "is `melforge serve` running?",
        },
    })?;
    let lost = |source| Error::Io {
        path: shown(),
        source,
    };
    stream.set_read_timeout(Some(timeout)).map_err(lost)?;
    stream.set_write_timeout(Some(timeout)).map_err(lost)?;
    // A server that refuses a peer (SO_PEERCRED) answers and closes at
    // accept, so the request may meet a closed socket: the answer is still
    // queued for reading, and it says why.
    match (&stream).write_all(format!("{{\"cmd\":\"{}\"}}\n", cmd.name()).as_bytes()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => return Err(lost(e)),
        _ => {}
    }
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line).map_err(lost)?;
    match serde_json::from_str::<Value>(line.trim_end()) {
        Ok(v @ Value::Object(_)) => Ok(v),
        _ if line.is_empty() => Err(lost(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the service closed the connection without replying",
        ))),
        _ => Err(Error::BadReply {
            path: shown(),
            line: line.trim_end().chars().take(200).collect(),
        }),
    }
}

/// Renders a reply for people: one `key: value` line per field (not `ok`),
/// nested objects indented by two spaces, arrays of scalars on one line,
/// arrays of objects as `-` items. An empty successful reply prints `ok`.
pub fn render_human(reply: &Value) -> String {
    let mut out = String::new();
    match reply {
        Value::Object(m) => {
            let fields: serde_json::Map<String, Value> = m
                .iter()
                .filter(|(k, _)| k.as_str() != "ok")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if fields.is_empty() {
                out.push_str("ok\n");
            } else {
                render_object(&fields, 0, &mut out);
            }
        }
        other => {
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
    out
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => {
                let s = format!("{f:.3}");
                s.trim_end_matches('0').trim_end_matches('.').to_string()
            }
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

fn render_object(m: &serde_json::Map<String, Value>, depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    for (k, v) in m {
        match v {
            Value::Object(inner) if inner.is_empty() => out.push_str(&format!("{pad}{k}: {{}}\n")),
            Value::Object(inner) => {
                out.push_str(&format!("{pad}{k}:\n"));
                render_object(inner, depth + 1, out);
            }
            Value::Array(items) if items.iter().any(|i| i.is_object() || i.is_array()) => {
                out.push_str(&format!("{pad}{k}:\n"));
                for item in items {
                    match item {
                        Value::Object(o) => {
                            out.push_str(&format!("{pad}  -\n"));
                            render_object(o, depth + 2, out);
                        }
                        other => out.push_str(&format!("{pad}  - {other}\n")),
                    }
                }
            }
            Value::Array(items) => {
                let parts: Vec<_> = items.iter().map(scalar).collect();
                out.push_str(&format!("{pad}{k}: {}\n", parts.join(", ")));
            }
            other => out.push_str(&format!("{pad}{k}: {}\n", scalar(other))),
        }
    }
}

/// `melforge ctl`: sends the command, prints the reply to stdout; `Err` (exit
/// 1) when the service cannot be reached or answers `"ok": false`.
pub fn main(args: &CtlArgs) -> Result<(), Error> {
    let format = match args.format {
        Some(f) => f,
        None if args.json => Format::Json,
        None => Format::Human,
    };
    if format == Format::Prometheus && args.command != Command::Stats {
        return Err(Error::NotStats(args.command));
    }
    let path = socket_path(args)?;
    let reply = request(
        &path,
        args.command,
        Duration::from_secs(args.timeout.max(1)),
    )?;
    let ok = reply.get("ok") == Some(&Value::Bool(true));
    let mut stdout = io::stdout().lock();
    let printed = match format {
        Format::Json => writeln!(stdout, "{reply}"),
        _ if !ok => Ok(()),
        Format::Human => write!(stdout, "{}", render_human(&reply)),
        Format::Prometheus => {
            let stats: crate::app::serve::status::Stats =
                serde_json::from_value(reply.clone()).map_err(Error::BadStats)?;
            write!(stdout, "{}", crate::app::metrics::render(&stats.snapshot()))
        }
    };
    let _ = printed.and_then(|_| stdout.flush());
    if ok {
        Ok(())
    } else {
        let msg = reply
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("the service answered ok=false without an error message");
        Err(Error::Refused {
            reason: msg.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn human_rendering_is_generic_and_indented() {
        let r = json!({
            "ok": true,
            "state": "running",
            "uptime_s": 12.5,
            "files": {"ok": 10, "rejected": 1},
            "rings": [{"name": "loaded", "depth": 3}],
            "labels": ["LEAK", "NOLEAK"],
            "last_error": null,
            "rate": 1.0 / 3.0
        });
        let s = render_human(&r);
        let expected = "\
files:
  ok: 10
  rejected: 1
labels: LEAK, NOLEAK
last_error: -
rate: 0.333
rings:
  -
    depth: 3
    name: loaded
state: running
uptime_s: 12.5
";
        assert_eq!(s, expected);
        assert_eq!(render_human(&json!({"ok": true})), "ok\n");
    }

    #[test]
    fn missing_socket_names_path_and_hint() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("none.sock");
        let e = request(&p, Command::Status, Duration::from_secs(1)).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.ends_with("none.sock: No such file or directory — is `melforge serve` running?"),
            "{msg}"
        );
    }
}
