//! The tracing subscriber every command logs through, on stderr.
//!
//! * Level: `RUST_LOG` when set (an `EnvFilter` directive), else `--log-level`
//!   with symphonia's own logging at `error` (its per-file stream notes
//!   would flood a build; melforge logs each rejection with its reason).
//! * Format: `--log-format`, else `$MELFORGE_LOG_FORMAT`, else text.
//!   [`LogFormat::Text`] is for people (tracing-subscriber's default lines,
//!   without targets); [`LogFormat::Json`] writes one JSON object per line for
//!   journald and log shippers: `timestamp`, `level`, `message`, then the
//!   event's fields at the top level (`path`, `reason`, …), then `target`.
//!
//! * Colour: text lines carry ANSI colours only when stderr is a terminal and
//!   `NO_COLOR` is unset (see [`ansi`]); under journald, a pipe or a file they
//!   are plain, so `journalctl` and log files show no escape codes.
//!
//! Call sites log a sentence as the message and put values in named fields
//! (`warn!(path = %rel, reason = %why, "Rejected a file.")`), so both formats
//! carry the same information and JSON consumers never parse a message.

use std::ffi::OsStr;

use clap::ValueEnum;

/// The environment variable read when `--log-format` is not given.
pub const FORMAT_ENV: &str = "MELFORGE_LOG_FORMAT";

/// How log events are written to stderr: human-readable lines, or one JSON
/// object per line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    // No doc comments on the variants: clap would switch `--help` to its long,
    // multi-line layout to list them.
    #[default]
    Text,
    Json,
}

impl LogFormat {
    /// The flag's value, else the environment variable's (`env`, the value of
    /// [`FORMAT_ENV`]; empty counts as unset), else text. An unknown value in
    /// the environment is an error naming the variable.
    pub fn resolve(
        flag: Option<LogFormat>,
        env: Option<&OsStr>,
    ) -> Result<LogFormat, UnknownFormat> {
        if let Some(f) = flag {
            return Ok(f);
        }
        let Some(raw) = env.filter(|v| !v.is_empty()) else {
            return Ok(LogFormat::default());
        };
        raw.to_str()
            .and_then(|v| LogFormat::from_str(v.trim(), true).ok())
            .ok_or_else(|| UnknownFormat {
                value: raw.to_string_lossy().into_owned(),
            })
    }
}

/// `$MELFORGE_LOG_FORMAT` holds a value that is not a [`LogFormat`]; the
/// sentence matches clap's own for a bad `--log-format`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid value '{value}' for {} [possible values: text, json]",
    FORMAT_ENV
)]
pub struct UnknownFormat {
    /// The variable's value (lossily decoded when it is not UTF-8).
    pub value: String,
}

/// Whether text lines get ANSI colours: only on a terminal, and not when
/// `NO_COLOR` is set to anything non-empty (no-color.org). `JOURNAL_STREAM`
/// (set by systemd when stderr is the journal) also turns them off, in case a
/// unit connects a terminal-like stream.
pub fn ansi(stderr_is_terminal: bool, no_color: Option<&OsStr>, journal: Option<&OsStr>) -> bool {
    stderr_is_terminal
        && no_color.is_none_or(|v| v.is_empty())
        && journal.is_none_or(|v| v.is_empty())
}

/// Installs the global subscriber. Call once, before anything logs.
pub fn init(level: &str, format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{level},symphonia=error")));
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => fmt
            .with_target(false)
            .with_ansi(ansi(
                std::io::stderr().is_terminal(),
                std::env::var_os("NO_COLOR").as_deref(),
                std::env::var_os("JOURNAL_STREAM").as_deref(),
            ))
            .init(),
        LogFormat::Json => fmt
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_ansi(false)
            .init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_beats_env_beats_default() {
        let json = Some(OsStr::new("json"));
        assert_eq!(LogFormat::resolve(None, None), Ok(LogFormat::Text));
        assert_eq!(
            LogFormat::resolve(None, Some(OsStr::new(""))),
            Ok(LogFormat::Text)
        );
        assert_eq!(LogFormat::resolve(None, json), Ok(LogFormat::Json));
        assert_eq!(
            LogFormat::resolve(None, Some(OsStr::new(" JSON "))),
            Ok(LogFormat::Json)
        );
        assert_eq!(
            LogFormat::resolve(Some(LogFormat::Text), json),
            Ok(LogFormat::Text)
        );
    }

    #[test]
    fn colours_only_on_a_terminal_without_no_color_or_journald() {
        let set = Some(OsStr::new("1"));
        let empty = Some(OsStr::new(""));
        assert!(ansi(true, None, None));
        assert!(ansi(true, empty, empty));
        assert!(!ansi(false, None, None), "a pipe, a file or the journal");
        assert!(!ansi(true, set, None));
        assert!(!ansi(true, None, Some(OsStr::new("8:12345"))));
    }

    #[test]
    fn an_unknown_env_value_names_the_variable() {
        let e = LogFormat::resolve(None, Some(OsStr::new("yaml"))).unwrap_err();
        assert_eq!(
            e,
            UnknownFormat {
                value: "yaml".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "invalid value 'yaml' for MELFORGE_LOG_FORMAT [possible values: text, json]"
        );
    }
}
