//! The `[control]` section: the Unix control socket of `melforge serve`
//! (read by `app::control`) → validated [`ControlConfig`]; defaults in
//! [`defaults::control`].
//!
//! Invariants of the validated form: the socket path fits `sun_path` (≤ 107
//! bytes) and, when relative, is resolved against the config file's
//! directory; `mode` is permission bits only (≤ 0o777) and prints as octal.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{Ctx, Error, defaults};

/// `[control]` as written by users.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawControl {
    /// Socket path (default [`defaults::control::SOCKET`]); relative paths
    /// resolve against the config file's directory. The parent directory is
    /// created. At most 107 bytes (the `sun_path` limit).
    pub socket: Option<String>,
    /// Socket file mode as an octal string (default "0660",
    /// [`defaults::control::MODE`]).
    pub mode: Option<String>,
    /// Group (name or numeric gid) given the socket and allowed to use it, in
    /// addition to root and the service's own uid.
    pub group: Option<String>,
    /// Longest request line accepted; longer lines get an error and the
    /// connection is closed (default [`defaults::control::MAX_LINE_BYTES`]).
    pub max_line_bytes: Option<usize>,
    /// Concurrent client connections; more are answered "busy" (default
    /// [`defaults::control::MAX_CLIENTS`]).
    pub max_clients: Option<usize>,
    /// Concurrent connections one peer process (SO_PEERCRED pid) may hold;
    /// more are answered "busy", so one misbehaving client cannot take every
    /// slot (default [`defaults::control::MAX_CLIENTS_PER_PEER`], at most
    /// `max_clients`).
    pub max_clients_per_peer: Option<usize>,
    /// A client must complete each request line within this long of the
    /// previous reply (or of connecting): an idle connection, or one that
    /// trickles a line byte by byte, is disconnected (default [`defaults::control::CLIENT_TIMEOUT_MS`]).
    pub client_timeout_ms: Option<u64>,
}

/// Validated control-socket settings.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ControlConfig {
    pub socket: PathBuf,
    /// Permission bits applied to the socket file (≤ 0o777).
    #[serde(serialize_with = "serialize_octal_mode")]
    pub mode: u32,
    pub group: Option<String>,
    pub max_line_bytes: usize,
    pub max_clients: usize,
    pub max_clients_per_peer: usize,
    pub client_timeout_ms: u64,
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig::from_raw(&RawControl::default(), &Ctx::DEFAULTS, Path::new("."))
            .expect("defaults are valid")
    }
}

fn serialize_octal_mode<S: serde::Serializer>(mode: &u32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{mode:04o}"))
}

impl ControlConfig {
    /// Applies the defaults and validates; a relative socket path resolves
    /// against `base` (unless `base` is ".").
    pub(super) fn from_raw(c: &RawControl, cx: &Ctx, base: &Path) -> Result<ControlConfig, Error> {
        let socket = c.socket.as_deref().unwrap_or(defaults::control::SOCKET);
        if socket.is_empty() {
            return Err(cx.invalid("control.socket", "\"\"; expected a socket path"));
        }
        let socket = match Path::new(socket) {
            p if p.is_relative() && base != Path::new(".") => base.join(p),
            p => p.to_path_buf(),
        };
        // sockaddr_un.sun_path is 108 bytes including the terminating NUL.
        let len = socket.as_os_str().len();
        if len > 107 {
            return Err(cx.invalid(
                "control.socket",
                format!("a path of {len} bytes; Unix socket paths are limited to 107"),
            ));
        }
        let mode = match c.mode.as_deref() {
            None => defaults::control::MODE,
            Some(m) => {
                let digits = m.strip_prefix("0o").unwrap_or(m);
                match u32::from_str_radix(digits, 8) {
                    Ok(v) if v <= 0o777 && !digits.starts_with('+') => v,
                    _ => {
                        return Err(cx.invalid(
                            "control.mode",
                            format!("\"{m}\"; expected octal permission bits like \"0660\""),
                        ));
                    }
                }
            }
        };
        let group = match c.group.as_deref() {
            Some("") => {
                return Err(cx.invalid("control.group", "\"\"; expected a group name or gid"));
            }
            g => g.map(str::to_string),
        };
        let max_line_bytes = match c.max_line_bytes {
            Some(n) if n < 64 => {
                return Err(cx.invalid(
                    "control.max_line_bytes",
                    format!("{n}; expected at least 64"),
                ));
            }
            Some(n) => n,
            None => defaults::control::MAX_LINE_BYTES,
        };
        let client_timeout_ms = match c.client_timeout_ms {
            Some(0) => {
                return Err(cx.invalid("control.client_timeout_ms", "0; expected ≥ 1"));
            }
            Some(v) => v,
            None => defaults::control::CLIENT_TIMEOUT_MS,
        };
        let max_clients = cx.positive(
            "control.max_clients",
            c.max_clients,
            defaults::control::MAX_CLIENTS,
        )?;
        let max_clients_per_peer = match c.max_clients_per_peer {
            Some(n) if n == 0 || n > max_clients => {
                return Err(cx.invalid(
                    "control.max_clients_per_peer",
                    format!("{n}; expected 1 to control.max_clients ({max_clients})"),
                ));
            }
            Some(n) => n,
            None => defaults::control::MAX_CLIENTS_PER_PEER.min(max_clients),
        };
        Ok(ControlConfig {
            socket,
            mode,
            group,
            max_line_bytes,
            max_clients,
            max_clients_per_peer,
            client_timeout_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, DEFAULT_CONTROL_SOCKET, RawConfig};

    #[test]
    fn control_defaults() {
        let c = Config::parse("", "t").unwrap().control;
        assert_eq!(c.socket, Path::new(DEFAULT_CONTROL_SOCKET));
        assert_eq!(c.mode, 0o660);
        assert_eq!(c.group, None);
        assert_eq!(c.max_line_bytes, 65536);
        assert_eq!(c.max_clients, 64);
        assert_eq!(c, ControlConfig::default());
    }

    #[test]
    fn control_mode_is_octal_and_errors_name_key_and_line() {
        let c = Config::parse("[control]\nmode = \"0600\"\ngroup = \"adm\"\n", "t").unwrap();
        assert_eq!(c.control.mode, 0o600);
        assert_eq!(c.control.group.as_deref(), Some("adm"));
        let e = Config::parse("[control]\n\nmode = \"0999\"\n", "f.toml").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("f.toml:3: invalid value for `control.mode`"),
            "{e}"
        );
        let e = Config::parse("[control]\nsockets = \"/x\"\n", "f.toml").unwrap_err();
        assert!(e.to_string().contains("sockets"), "{e}");
        let long = format!("[control]\nsocket = \"/{}\"\n", "a".repeat(120));
        let e = Config::parse(&long, "f.toml").unwrap_err();
        assert!(e.to_string().contains("control.socket"), "{e}");
    }

    #[test]
    fn control_socket_resolves_against_the_config_directory() {
        let raw: RawConfig = toml::from_str("[control]\nsocket = \"run/c.sock\"\n").unwrap();
        let c = Config::from_raw_in(raw, "", "t", Path::new("/etc/melforge")).unwrap();
        assert_eq!(c.control.socket, Path::new("/etc/melforge/run/c.sock"));
    }

    #[test]
    fn control_mode_prints_as_octal() {
        let c = Config::parse("[control]\nmode = \"640\"\n", "t").unwrap();
        let text = toml::to_string(&c.control).unwrap();
        assert!(text.contains("mode = \"0640\""), "{text}");
    }
}
