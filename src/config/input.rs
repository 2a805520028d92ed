//! The `[input]` section: which files are inputs (`extensions`, used by
//! build's walk and serve's watch) and how they become clips (`resample`,
//! `channels`: a [`Policy`] the compute stage applies). Raw keys → validated
//! [`InputConfig`]; defaults in [`defaults::input`].

use serde::Deserialize;

use super::{Ctx, Error, defaults};
use crate::decode::policy::{Channels, Policy, Resample};

/// `[input]` as written by users.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInput {
    /// File extensions taken as inputs, without the dot (default
    /// [`defaults::input::EXTENSIONS`]).
    pub extensions: Option<Vec<String>>,
    /// "off" | "soxr_hq" (default [`defaults::input::RESAMPLE`]).
    pub resample: Option<String>,
    /// "mean" | "first" | "reject" (default [`defaults::input::CHANNELS`]).
    pub channels: Option<String>,
    /// MiB (default [`defaults::input::SPILL_MAX_MIB`]; 0: never spill).
    pub spill_max_mib: Option<u64>,
    /// KiB (default [`defaults::input::MANIFEST_MAX_LINE_KIB`]).
    pub manifest_max_line_kib: Option<u64>,
    /// Lines (default [`defaults::input::MANIFEST_MAX_LINES`]).
    pub manifest_max_lines: Option<u64>,
    /// The parquet column holding the audio (default "audio").
    pub audio_column: Option<String>,
}

/// Validated input settings.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct InputConfig {
    /// Lower-case extensions without the dot (non-empty, no duplicates).
    pub extensions: Vec<String>,
    /// `resample` and `channels` (flattened: shown as `[input]` keys).
    #[serde(flatten)]
    pub policy: Policy,
    /// A manifest build decodes a compressed recording that cannot be cut
    /// into parts once, into a float WAV under the output folder, when it
    /// has several segments and its decode is at most this many MiB
    /// (`plan::manifest::spill`); 0: never (each segment is decoded
    /// from the recording's start).
    pub spill_max_mib: u64,
    /// A manifest line longer than this many KiB is rejected (with its line
    /// number) and skipped unread (`plan::manifest::lines`).
    pub manifest_max_line_kib: u64,
    /// A manifest with more lines than this (blank ones included) stops the
    /// build with an error.
    pub manifest_max_lines: u64,
    /// The column of a parquet input that holds each row's audio: a struct
    /// of `bytes` and `path` (Hugging Face's `Audio` feature) or a binary
    /// column (`plan::parquet`).
    pub audio_column: String,
}

impl Default for InputConfig {
    fn default() -> InputConfig {
        InputConfig::from_raw(&RawInput::default(), &Ctx::DEFAULTS).expect("defaults are valid")
    }
}

impl InputConfig {
    /// Applies the defaults and validates.
    pub(super) fn from_raw(i: &RawInput, cx: &Ctx) -> Result<InputConfig, Error> {
        let extensions = match &i.extensions {
            None => defaults::input::EXTENSIONS
                .iter()
                .map(|e| e.to_string())
                .collect(),
            Some(list) => {
                let mut out: Vec<String> = Vec::new();
                for e in list {
                    let e = e.strip_prefix('.').unwrap_or(e).to_ascii_lowercase();
                    if e.is_empty() || e.contains(['/', '.', '*']) {
                        return Err(cx.invalid(
                            "input.extensions",
                            format!("\"{e}\"; expected an extension such as \"wav\" or \"flac\""),
                        ));
                    }
                    if !out.contains(&e) {
                        out.push(e);
                    }
                }
                if out.is_empty() {
                    return Err(cx.invalid(
                        "input.extensions",
                        "an empty list; expected at least one extension",
                    ));
                }
                out
            }
        };
        let resample = cx.choice(
            "input.resample",
            i.resample.as_deref(),
            defaults::input::RESAMPLE,
            &[("off", Resample::Off), ("soxr_hq", Resample::SoxrHq)],
        )?;
        let channels = cx.choice(
            "input.channels",
            i.channels.as_deref(),
            defaults::input::CHANNELS,
            &[
                ("mean", Channels::Mean),
                ("first", Channels::First),
                ("reject", Channels::Reject),
            ],
        )?;
        let spill_max_mib = i.spill_max_mib.unwrap_or(defaults::input::SPILL_MAX_MIB);
        if spill_max_mib > defaults::input::SPILL_MAX_MIB_LIMIT {
            return Err(cx.invalid(
                "input.spill_max_mib",
                format!(
                    "{spill_max_mib}; expected at most {} (a WAV's sizes are 32-bit)",
                    defaults::input::SPILL_MAX_MIB_LIMIT
                ),
            ));
        }
        let (manifest_max_line_kib, manifest_max_lines) = manifest_limits(i, cx)?;
        let audio_column = i
            .audio_column
            .clone()
            .unwrap_or_else(|| "audio".to_string());
        if audio_column.is_empty() {
            return Err(cx.invalid(
                "input.audio_column",
                "an empty name; expected a parquet column such as \"audio\"",
            ));
        }
        Ok(InputConfig {
            extensions,
            policy: Policy { resample, channels },
            spill_max_mib,
            manifest_max_line_kib,
            manifest_max_lines,
            audio_column,
        })
    }

    /// Whether `name`'s extension is one of [`InputConfig::extensions`]
    /// (case-insensitive).
    pub fn wants(&self, name: &str) -> bool {
        std::path::Path::new(name)
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| self.extensions.iter().any(|x| x.eq_ignore_ascii_case(e)))
    }
}

/// `input.manifest_max_line_kib` and `input.manifest_max_lines`, defaulted
/// and range-checked.
fn manifest_limits(i: &RawInput, cx: &Ctx) -> Result<(u64, u64), Error> {
    let manifest_max_line_kib = i
        .manifest_max_line_kib
        .unwrap_or(defaults::input::MANIFEST_MAX_LINE_KIB);
    if !(1..=defaults::input::MANIFEST_MAX_LINE_KIB_LIMIT).contains(&manifest_max_line_kib) {
        return Err(cx.invalid(
            "input.manifest_max_line_kib",
            format!(
                "{manifest_max_line_kib}; expected 1 to {} (1 GiB)",
                defaults::input::MANIFEST_MAX_LINE_KIB_LIMIT
            ),
        ));
    }
    let manifest_max_lines = i
        .manifest_max_lines
        .unwrap_or(defaults::input::MANIFEST_MAX_LINES);
    if !(1..=u64::from(u32::MAX)).contains(&manifest_max_lines) {
        return Err(cx.invalid(
            "input.manifest_max_lines",
            format!(
                "{manifest_max_lines}; expected 1 to {} (a row's line number is 32-bit)",
                u32::MAX
            ),
        ));
    }
    Ok((manifest_max_line_kib, manifest_max_lines))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn defaults_take_every_container_reject_other_rates_and_average_channels() {
        let c = Config::parse("", "t").unwrap();
        assert_eq!(
            c.input.extensions,
            ["wav", "flac", "mp3", "ogg", "opus", "oga", "m4a", "mp4"]
        );
        assert_eq!(c.input.policy, Policy::default());
        assert!(c.input.wants("a.WAV") && c.input.wants("b.Flac"));
        assert!(c.input.wants("c.mp3") && c.input.wants("d.Opus") && c.input.wants("e.m4a"));
        assert!(!c.input.wants("c.aac") && !c.input.wants("flac") && !c.input.wants("d.wav.part"));
    }

    #[test]
    fn every_key_is_read_and_bad_values_are_named_with_their_line() {
        let text = "[input]\nextensions = [\".WAV\", \"flac\", \"wav\"]\nresample = \"soxr_hq\"\n\
                    channels = \"first\"\n";
        let c = Config::parse(text, "t").unwrap();
        assert_eq!(c.input.extensions, ["wav", "flac"]);
        assert_eq!(c.input.policy.resample, Resample::SoxrHq);
        assert_eq!(c.input.policy.channels, Channels::First);
        let e = Config::parse("[input]\nresample = \"sinc\"\n", "f.toml").unwrap_err();
        let m = e.to_string();
        assert!(
            m.starts_with("f.toml:2: invalid value for `input.resample`"),
            "{m}"
        );
        assert!(m.contains("\"soxr_hq\""), "{m}");
        let e = Config::parse("[input]\n\nchannels = \"left\"\n", "f.toml").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("f.toml:3: invalid value for `input.channels`")
        );
        let c = Config::parse("[input]\nspill_max_mib = 0\n", "t").unwrap();
        assert_eq!(c.input.spill_max_mib, 0);
        assert_eq!(Config::parse("", "t").unwrap().input.spill_max_mib, 2048);
        let c = Config::parse(
            "[input]\nmanifest_max_line_kib = 4\nmanifest_max_lines = 10\n",
            "t",
        )
        .unwrap();
        assert_eq!(
            (c.input.manifest_max_line_kib, c.input.manifest_max_lines),
            (4, 10)
        );
        let d = Config::parse("", "t").unwrap();
        assert_eq!(
            (d.input.manifest_max_line_kib, d.input.manifest_max_lines),
            (1024, 100_000_000)
        );
        for bad in [
            "manifest_max_line_kib = 0",
            "manifest_max_lines = 0",
            "manifest_max_lines = 5000000000",
        ] {
            let e = Config::parse(&format!("[input]\n{bad}\n"), "f.toml").unwrap_err();
            let key = bad.split(' ').next().unwrap();
            assert!(e.to_string().contains(&format!("input.{key}")), "{e}");
        }
        let e = Config::parse("[input]\nspill_max_mib = 4096\n", "f.toml").unwrap_err();
        assert!(e.to_string().contains("input.spill_max_mib"), "{e}");
        let e = Config::parse("[input]\nextensions = []\n", "f.toml").unwrap_err();
        assert!(e.to_string().contains("at least one extension"), "{e}");
        let e = Config::parse("[input]\nextensions = [\"*.wav\"]\n", "f.toml").unwrap_err();
        assert!(e.to_string().contains("input.extensions"), "{e}");
    }
}
