//! Configuration: TOML text → [`RawConfig`] (serde, `deny_unknown_fields`, every
//! key optional) → validated [`Config`] (defaults applied, values checked, derived
//! values computed).
//!
//! Every error names the key (`section.key`) and, where the key appears in the
//! text, its line. The defaults are the reference dataset's (docs/DESIGN.md
//! "Defaults") and all live in [`defaults`]; `config/melforge.toml` documents
//! every key.
//!
//! One file per TOML section, each holding the raw struct, the validated struct
//! and the step between them: `mel` (`[mel]` + `[segmentation]` → [`Spec`]),
//! `output`, `io`, `compute`, `control`, `metrics` and [`serve`]. This file owns the top
//! level (`RawConfig` → `Config`), the error type and the helpers every section
//! validates with (`Ctx`); `features` holds `[features]` (the recipe). The
//! section types are re-exported here, so callers name them `config::X`
//! whichever file they live in.

mod compute;
mod control;
pub mod defaults;
mod features;
mod input;
mod io;
mod mel;
mod metrics;
mod output;
pub mod serve;

use std::path::Path;

use serde::Deserialize;

use crate::dsp::Spec;

pub use compute::{Backend, ComputeConfig, RawCompute};
pub use control::{ControlConfig, RawControl};
pub use defaults::control::SOCKET as DEFAULT_CONTROL_SOCKET;
pub use features::{FeaturesConfig, RawFeatures, Recipe};
pub use input::{InputConfig, RawInput};
pub use io::{Direct, Engine, IoConfig, RawDirect, RawIo};
pub use mel::{RawMel, RawSegmentation};
pub use metrics::{MetricsConfig, RawMetrics};
pub use output::{OutputConfig, RawOutput};

/// A configuration problem, with the key and line it concerns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// TOML syntax error or unknown/mistyped key; the message from the parser
    /// already names the key and shows the line.
    #[error("{origin}: {message}")]
    Syntax { origin: String, message: String },
    #[error("{origin}{}: invalid value for `{key}`: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Invalid {
        origin: String,
        key: String,
        line: Option<usize>,
        message: String,
    },
}

/// The whole file as written by users.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// `[mel]`: the log-mel definition.
    #[serde(default)]
    pub mel: RawMel,
    /// `[segmentation]`: the long/short segment layout.
    #[serde(default)]
    pub segmentation: RawSegmentation,
    /// `[output]`: the HDF5 dataset.
    #[serde(default)]
    pub output: RawOutput,
    /// `[io]`: the reader stage.
    #[serde(default)]
    pub io: RawIo,
    /// `[compute]`: the compute stage.
    #[serde(default)]
    pub compute: RawCompute,
    /// `[control]`: the service's control socket.
    #[serde(default)]
    pub control: RawControl,
    /// `[metrics]`: the Prometheus endpoint (absent: off).
    #[serde(default)]
    pub metrics: RawMetrics,
    /// `[serve]`: only `melforge serve` reads it.
    pub serve: Option<serve::RawServe>,
    /// `[input]`: which files are inputs and how they become clips.
    #[serde(default)]
    pub input: RawInput,
    /// `[features]`: the recipe (librosa, kaldi-fbank, kaldi-mfcc, whisper).
    #[serde(default)]
    pub features: RawFeatures,
}

/// A complete, validated configuration.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Config {
    pub spec: Spec,
    pub output: OutputConfig,
    pub io: IoConfig,
    pub compute: ComputeConfig,
    pub control: ControlConfig,
    pub metrics: MetricsConfig,
    /// Present when the file has a `[serve]` section.
    pub serve: Option<serve::ServeConfig>,
    pub input: InputConfig,
    /// The recipe; `Recipe::Librosa` (the default) computes `spec`.
    pub features: FeaturesConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config::from_raw(RawConfig::default(), "", "<defaults>").expect("defaults are valid")
    }
}

/// 1-based line where `key` is assigned inside `[section]`, if it is.
fn line_of(text: &str, section: &str, key: &str) -> Option<usize> {
    let mut current = String::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix('[') {
            // `[section]`, possibly followed by a comment.
            current = rest
                .split(']')
                .next()
                .unwrap_or_default()
                .trim()
                .to_string();
            continue;
        }
        if current == section
            && let Some((k, _)) = t.split_once('=')
            && k.trim().trim_matches('"') == key
        {
            return Some(i + 1);
        }
    }
    None
}

/// What every section's validation needs: the text (for line numbers) and the
/// origin (for the error prefix), plus the checks sections share.
struct Ctx<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Ctx<'_> {
    /// The context defaults are validated in (no text, no lines).
    const DEFAULTS: Ctx<'static> = Ctx {
        text: "",
        origin: "<defaults>",
    };

    /// An [`Error::Invalid`] for `key` (`section.name`), with its line if the
    /// text assigns it.
    fn invalid(&self, key: &str, message: impl Into<String>) -> Error {
        let (section, name) = key.split_once('.').unwrap_or((key, ""));
        Error::Invalid {
            origin: self.origin.to_string(),
            key: key.to_string(),
            line: line_of(self.text, section, name),
            message: message.into(),
        }
    }

    /// One of `options` (case-insensitive), or `default` when absent; the
    /// error lists the options.
    fn choice<T: Copy>(
        &self,
        key: &str,
        value: Option<&str>,
        default: T,
        options: &[(&str, T)],
    ) -> Result<T, Error> {
        let Some(v) = value else { return Ok(default) };
        options
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(v))
            .map(|&(_, t)| t)
            .ok_or_else(|| {
                let names: Vec<_> = options.iter().map(|(n, _)| format!("\"{n}\"")).collect();
                self.invalid(
                    key,
                    format!("\"{v}\"; expected one of {}", names.join(", ")),
                )
            })
    }

    /// A count ≥ 1, or `default` when absent.
    fn positive(&self, key: &str, value: Option<usize>, default: usize) -> Result<usize, Error> {
        match value {
            Some(0) => Err(self.invalid(key, "0; expected a value ≥ 1")),
            Some(v) => Ok(v),
            None => Ok(default),
        }
    }
}

impl Config {
    /// Parses and validates TOML text; `origin` (usually the file name) prefixes errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, Error> {
        Config::parse_in(text, origin, Path::new("."))
    }

    /// Reads and validates a config file; relative paths in it resolve against
    /// its directory.
    pub fn load(path: &Path) -> Result<Config, Error> {
        Config::load_with(Some(path), &Overrides::default())
    }

    fn parse_in(text: &str, origin: &str, base: &Path) -> Result<Config, Error> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| Error::Syntax {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        Config::from_raw_in(raw, text, origin, base)
    }

    /// Applies defaults and validates. `text` is only used to find line numbers;
    /// relative paths resolve against the current directory.
    pub fn from_raw(raw: RawConfig, text: &str, origin: &str) -> Result<Config, Error> {
        Config::from_raw_in(raw, text, origin, Path::new("."))
    }

    /// As [`Config::from_raw`], resolving relative paths against `base`.
    pub fn from_raw_in(
        raw: RawConfig,
        text: &str,
        origin: &str,
        base: &Path,
    ) -> Result<Config, Error> {
        let cx = Ctx { text, origin };
        let serve = raw
            .serve
            .as_ref()
            .map(|s| s.validate(base))
            .transpose()
            .map_err(|(key, message)| cx.invalid(key, message))?;
        let spec = mel::spec(&raw.mel, &raw.segmentation, &cx)?;
        let features = FeaturesConfig::from_raw(&raw.features, spec != Spec::default(), &cx)?;
        let output = OutputConfig::from_raw(&raw.output, &cx, &features.recipe)?;
        if output.lhotse {
            lhotse_allows(&features.recipe).map_err(|why| cx.invalid("output.lhotse", why))?;
        }
        Ok(Config {
            features,
            spec,
            output,
            io: IoConfig::from_raw(&raw.io, &cx)?,
            compute: ComputeConfig::from_raw(&raw.compute, &cx, serve.as_ref())?,
            control: ControlConfig::from_raw(&raw.control, &cx, base)?,
            metrics: MetricsConfig::from_raw(&raw.metrics, &cx)?,
            serve,
            input: InputConfig::from_raw(&raw.input, &cx)?,
        })
    }
}

/// What the command line sets over a config file's keys (`build --recipe`,
/// `--lhotse`, `--backend`): applied to the raw keys before validation, so
/// they get the same checks and the same sentences as the file's own, and
/// the validated `Config` never changes afterwards.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `features.recipe`.
    pub recipe: Option<String>,
    /// `output.lhotse = true`.
    pub lhotse: bool,
    /// `compute.backend`: "auto", "cpu" or "cuda".
    pub backend: Option<String>,
}

impl Config {
    /// The config file at `path` (the defaults when `None`) with `over`
    /// set on its keys, validated as one.
    pub fn load_with(path: Option<&Path>, over: &Overrides) -> Result<Config, Error> {
        let (text, origin, base) = match path {
            Some(p) => (
                std::fs::read_to_string(p).map_err(|source| Error::Read {
                    path: p.display().to_string(),
                    source,
                })?,
                p.display().to_string(),
                p.parent().unwrap_or(Path::new(".")).to_path_buf(),
            ),
            None => (String::new(), "<defaults>".to_string(), ".".into()),
        };
        let mut raw: RawConfig = toml::from_str(&text).map_err(|e| Error::Syntax {
            origin: origin.clone(),
            message: e.to_string(),
        })?;
        if let Some(r) = &over.recipe {
            raw.features.recipe = Some(r.clone());
        }
        if over.lhotse {
            raw.output.lhotse = Some(true);
        }
        if let Some(b) = &over.backend {
            raw.compute.backend = Some(b.clone());
        }
        Config::from_raw_in(raw, &text, &origin, &base)
    }
}

/// Whether lhotse can load a recipe's rows as a cut's features: its
/// `Features` describe frames `frame_shift` apart whose count is
/// `compute_num_frames(duration, frame_shift, sampling_rate)`, which holds
/// for the Kaldi recipes without `snip_edges` (lhotse's own default).
fn lhotse_allows(recipe: &Recipe) -> Result<(), String> {
    match recipe {
        Recipe::KaldiFbank(o) | Recipe::KaldiMfcc(o) if !o.snip_edges => Ok(()),
        Recipe::KaldiFbank(_) | Recipe::KaldiMfcc(_) => Err(
            "true, but `features.snip_edges` is true: lhotse counts a cut's frames as \
             `compute_num_frames` does, which assumes snip_edges = false (the \
             \"lhotse-fbank\" recipe's default)"
                .to_string(),
        ),
        other => Err(format!(
            "true, but recipe \"{}\" has no lhotse feature type; lhotse cuts are written for \
             \"lhotse-fbank\", \"kaldi-fbank\" and \"kaldi-mfcc\" (with snip_edges = false)",
            other.name()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Dtype;

    #[test]
    fn empty_text_gives_the_reference_defaults() {
        let c = Config::parse("", "t").unwrap();
        assert_eq!(c.spec, Spec::default());
        assert_eq!(c.output.dtype, Dtype::Float32);
    }

    #[test]
    fn unknown_key_is_named_with_its_line() {
        let e = Config::parse("[mel]\nn_fft = 512\nn_mel = 32\n", "f.toml").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("n_mel"), "{msg}");
        assert!(msg.contains("line 3"), "{msg}");
    }

    #[test]
    fn bad_choice_lists_the_options() {
        let e = Config::parse("[mel]\nwindow = \"kaiser\"\n", "f.toml").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("mel.window") && msg.contains("\"hann\""),
            "{msg}"
        );
    }

    #[test]
    fn wrong_type_is_a_syntax_error_naming_the_key() {
        let e = Config::parse("[output]\nchunk_files = \"many\"\n", "f.toml").unwrap_err();
        assert!(matches!(e, Error::Syntax { .. }));
        assert!(e.to_string().contains("chunk_files"), "{e}");
    }

    #[test]
    fn line_is_found_under_a_section_header_followed_by_a_comment() {
        // config/melforge.toml writes `[segmentation]          # two-stage …`;
        // the header's comment used to hide every line in that section.
        let text = "[segmentation]   # layout\nlong_window = 1000000\n";
        let e = Config::parse(text, "f.toml").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("f.toml:2: invalid value for `segmentation.long_window`"),
            "{e}"
        );
    }

    #[test]
    fn example_config_is_valid_and_equals_defaults() {
        let text = include_str!("../../config/melforge.toml");
        let c = Config::parse(text, "config/melforge.toml").unwrap();
        assert_eq!(c.spec, Spec::default());
        // Every section, not only the spec: the example documents the defaults.
        assert_eq!(c, Config::default());
    }
}
