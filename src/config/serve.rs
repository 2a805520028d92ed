//! The `[serve]` config section: raw keys as users write them and the
//! validated form the service runs with (only `melforge serve` reads it).
//! Part of `config`'s two-step scheme; defaults in [`defaults::serve`].
//!
//! Validation returns a [`Problem`] (key, message) that `config` turns into a
//! `config::Error` with the key's line. Invariants of [`ServeConfig`]: every
//! path is absolute or resolved against the config file's directory, and
//! `output_dir` is not inside `watch_dir`.

use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use crate::model::OnSuccess;

use super::defaults;

/// `[serve]` as written by users.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServe {
    /// Drop directory watched for new WAV files (required for `serve`).
    pub watch_dir: Option<PathBuf>,
    /// Where `<split>.h5` files are appended (required for `serve`).
    pub output_dir: Option<PathBuf>,
    /// Journal and service state (default: `<output_dir>/.melforge`,
    /// [`defaults::serve::STATE_SUBDIR`]).
    pub state_dir: Option<PathBuf>,
    /// Rows become visible to SWMR readers at least this often (default
    /// [`defaults::serve::FLUSH_INTERVAL_MS`]).
    pub flush_interval_ms: Option<u64>,
    /// File name patterns never ingested (`*suffix`, `prefix*`, exact); dotfiles
    /// always (default [`defaults::serve::IGNORE`]).
    pub ignore: Option<Vec<String>>,
    /// Rejected files are moved here (absent: left in place).
    pub quarantine_dir: Option<PathBuf>,
    /// What happens to an ingested file: "keep" | "move" | "delete" (default
    /// [`defaults::serve::ON_SUCCESS`]).
    pub on_success: Option<String>,
    /// Destination for `on_success = "move"`.
    pub done_dir: Option<PathBuf>,
    /// Compact the journal (merge its tail into the on-disk index) once this
    /// many files were committed since the last compaction (default
    /// [`defaults::serve::COMPACT_TAIL_ENTRIES`]).
    pub compact_tail_entries: Option<u64>,
    /// …or once the journal file is this large, in bytes (default
    /// [`defaults::serve::COMPACT_JOURNAL_BYTES`]).
    pub compact_journal_bytes: Option<u64>,
    /// Most files seen and waiting for the readers at once; files beyond it
    /// stay in the drop directory and are picked up by a rescan once the
    /// queue has drained to half of it (default
    /// [`defaults::serve::MAX_QUEUED_FILES`]; about 450 B of memory each).
    pub max_queued_files: Option<usize>,
}

/// Validated `[serve]`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ServeConfig {
    pub watch_dir: PathBuf,
    pub output_dir: PathBuf,
    pub state_dir: PathBuf,
    pub flush_interval_ms: u64,
    pub ignore: Vec<String>,
    pub quarantine_dir: Option<PathBuf>,
    pub on_success: OnSuccess,
    pub done_dir: Option<PathBuf>,
    /// Journal compaction triggers (≥ 1 entry, ≥ 4096 bytes).
    pub compact_tail_entries: u64,
    pub compact_journal_bytes: u64,
    /// The intake's cap on queued files (≥ 1).
    pub max_queued_files: usize,
}

/// A `[serve]` problem: (key, message).
pub type Problem = (&'static str, String);

impl RawServe {
    /// Validates; relative paths are resolved against `base` (the config
    /// file's directory).
    pub fn validate(&self, base: &Path) -> Result<ServeConfig, Problem> {
        let resolve = |p: &PathBuf| {
            if p.is_absolute() {
                p.clone()
            } else {
                base.join(p)
            }
        };
        let watch_dir = self
            .watch_dir
            .as_ref()
            .map(resolve)
            .ok_or(("serve.watch_dir", "is required for `serve`".to_string()))?;
        let output_dir = self
            .output_dir
            .as_ref()
            .map(resolve)
            .ok_or(("serve.output_dir", "is required for `serve`".to_string()))?;
        if output_dir.starts_with(&watch_dir) {
            return Err((
                "serve.output_dir",
                format!(
                    "{} is inside the watched directory {}",
                    output_dir.display(),
                    watch_dir.display()
                ),
            ));
        }
        let state_dir = self
            .state_dir
            .as_ref()
            .map(resolve)
            .unwrap_or_else(|| output_dir.join(defaults::serve::STATE_SUBDIR));
        let flush_interval_ms = match self.flush_interval_ms {
            Some(0) => return Err(("serve.flush_interval_ms", "0; expected ≥ 1".into())),
            Some(v) => v,
            None => defaults::serve::FLUSH_INTERVAL_MS,
        };
        let on_success = match self.on_success.as_deref() {
            None => defaults::serve::ON_SUCCESS,
            Some("keep") => OnSuccess::Keep,
            Some("move") => OnSuccess::Move,
            Some("delete") => OnSuccess::Delete,
            Some(other) => {
                return Err((
                    "serve.on_success",
                    format!("\"{other}\"; expected one of \"keep\", \"move\", \"delete\""),
                ));
            }
        };
        let done_dir = self.done_dir.as_ref().map(resolve);
        if on_success == OnSuccess::Move && done_dir.is_none() {
            return Err((
                "serve.done_dir",
                "is required when on_success = \"move\"".into(),
            ));
        }
        let compact_tail_entries = match self.compact_tail_entries {
            Some(0) => return Err(("serve.compact_tail_entries", "0; expected ≥ 1".into())),
            Some(v) => v,
            None => defaults::serve::COMPACT_TAIL_ENTRIES,
        };
        let compact_journal_bytes = match self.compact_journal_bytes {
            Some(v) if v < 4096 => {
                return Err((
                    "serve.compact_journal_bytes",
                    format!("{v}; expected ≥ 4096"),
                ));
            }
            Some(v) => v,
            None => defaults::serve::COMPACT_JOURNAL_BYTES,
        };
        let max_queued_files = match self.max_queued_files {
            Some(0) => return Err(("serve.max_queued_files", "0; expected ≥ 1".into())),
            Some(v) => v,
            None => defaults::serve::MAX_QUEUED_FILES,
        };
        Ok(ServeConfig {
            watch_dir,
            output_dir,
            state_dir,
            flush_interval_ms,
            ignore: self.ignore.clone().unwrap_or_else(|| {
                defaults::serve::IGNORE
                    .iter()
                    .map(|p| p.to_string())
                    .collect()
            }),
            quarantine_dir: self.quarantine_dir.as_ref().map(resolve),
            on_success,
            done_dir,
            compact_tail_entries,
            compact_journal_bytes,
            max_queued_files,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_keys_and_defaults() {
        let raw = RawServe::default();
        assert_eq!(
            raw.validate(Path::new("/etc")).unwrap_err().0,
            "serve.watch_dir"
        );
        let raw = RawServe {
            watch_dir: Some("drop".into()),
            output_dir: Some("/data/out".into()),
            ..RawServe::default()
        };
        let c = raw.validate(Path::new("/etc/melforge")).unwrap();
        assert_eq!(c.watch_dir, Path::new("/etc/melforge/drop"));
        assert_eq!(c.state_dir, Path::new("/data/out/.melforge"));
        assert_eq!(c.flush_interval_ms, 500);
        assert_eq!(c.on_success, OnSuccess::Keep);
        assert_eq!(c.compact_tail_entries, 65_536);
        assert_eq!(c.compact_journal_bytes, 8 << 20);
        assert_eq!(c.max_queued_files, 8_192);
    }

    #[test]
    fn the_intake_cap_is_at_least_one() {
        let raw = |v| RawServe {
            watch_dir: Some("/d".into()),
            output_dir: Some("/o".into()),
            max_queued_files: Some(v),
            ..RawServe::default()
        };
        let err = raw(0).validate(Path::new("/")).unwrap_err();
        assert_eq!(
            err,
            ("serve.max_queued_files", "0; expected ≥ 1".to_string())
        );
        assert_eq!(raw(1).validate(Path::new("/")).unwrap().max_queued_files, 1);
    }

    #[test]
    fn compaction_limits_are_checked() {
        let raw = RawServe {
            watch_dir: Some("/d".into()),
            output_dir: Some("/o".into()),
            compact_tail_entries: Some(0),
            ..RawServe::default()
        };
        assert_eq!(
            raw.validate(Path::new("/")).unwrap_err().0,
            "serve.compact_tail_entries"
        );
        let raw = RawServe {
            watch_dir: Some("/d".into()),
            output_dir: Some("/o".into()),
            compact_journal_bytes: Some(100),
            ..RawServe::default()
        };
        assert_eq!(
            raw.validate(Path::new("/")).unwrap_err().0,
            "serve.compact_journal_bytes"
        );
    }

    #[test]
    fn example_serve_config_is_valid() {
        let text = include_str!("../../config/serve.toml");
        let c = crate::config::Config::parse(text, "config/serve.toml").unwrap();
        let serve = c.serve.expect("the example has a [serve] section");
        assert_eq!(serve.flush_interval_ms, 500);
        assert!(c.compute.max_batch_delay.as_millis() < 500);
    }

    #[test]
    fn move_needs_a_done_dir_and_output_must_be_outside_the_drop_dir() {
        let raw = RawServe {
            watch_dir: Some("/d".into()),
            output_dir: Some("/o".into()),
            on_success: Some("move".into()),
            ..RawServe::default()
        };
        assert_eq!(
            raw.validate(Path::new("/")).unwrap_err().0,
            "serve.done_dir"
        );
        let raw = RawServe {
            watch_dir: Some("/d".into()),
            output_dir: Some("/d/out".into()),
            ..RawServe::default()
        };
        assert_eq!(
            raw.validate(Path::new("/")).unwrap_err().0,
            "serve.output_dir"
        );
    }
}
