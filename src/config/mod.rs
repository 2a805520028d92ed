//! Configuration: TOML text → [`RawConfig`] (serde, `deny_unknown_fields`, every
//! key optional) → validated [`Config`] (defaults applied, values checked, derived
//! values computed).
//!
//! Every error names the key (`section.key`) and, where the key appears in the
//! text, its line. The defaults are the reference dataset's (docs/DESIGN.md
//! "Defaults"); `config/melforge.toml` documents every key.

pub mod serve;

use std::path::Path;

use serde::Deserialize;

use crate::dsp::{MelNorm, MelScale, PadMode, Segmentation, Spec, Window};
use crate::runtime::pin::PinPolicy;
use crate::writer::Dtype;

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

/// `[mel]` as written by users. Absent keys take the reference defaults.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMel {
    /// Expected sample rate in Hz; files at any other rate are rejected.
    pub sample_rate: Option<u32>,
    /// Clip length in seconds; shorter files are zero-padded, longer trimmed.
    pub clip_seconds: Option<f64>,
    /// FFT size (any size ≥ 2).
    pub n_fft: Option<usize>,
    /// STFT hop in samples.
    pub hop_length: Option<usize>,
    /// Window length in samples (default n_fft); padded to n_fft like librosa.
    pub win_length: Option<usize>,
    /// "hann" | "hamming" | "blackman" | "boxcar" (periodic, as librosa).
    pub window: Option<String>,
    /// Pad each segment by n_fft/2 on both sides before framing.
    pub center: Option<bool>,
    /// "constant" (zeros) | "reflect"; used when center = true.
    pub pad_mode: Option<String>,
    /// Exponent of the magnitude: 1 (magnitude) or 2 (power).
    pub power: Option<f64>,
    /// Number of mel bands.
    pub n_mels: Option<usize>,
    /// Lowest band edge in Hz.
    pub fmin: Option<f64>,
    /// Highest band edge in Hz (default sample_rate / 2).
    pub fmax: Option<f64>,
    /// "slaney" | "htk".
    pub mel_scale: Option<String>,
    /// "slaney" | "none".
    pub norm: Option<String>,
    /// dB reference: 10·log10(max(amin, ref)) is subtracted.
    #[serde(rename = "ref")]
    pub ref_value: Option<f64>,
    /// Floor applied before the logarithm.
    pub amin: Option<f64>,
    /// Clamp at (max over the whole clip) − top_db; absent means no clamp.
    pub top_db: Option<f64>,
}

/// `[segmentation]`: the two-stage long/short layout, in samples.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSegmentation {
    /// false ⇒ one segment, the whole clip.
    pub enabled: Option<bool>,
    pub long_window: Option<usize>,
    pub long_hop: Option<usize>,
    pub short_window: Option<usize>,
    pub short_hop: Option<usize>,
}

/// `[output]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutput {
    /// "float32" | "float16".
    pub dtype: Option<String>,
    /// Rows per HDF5 chunk along N.
    pub chunk_files: Option<usize>,
}

/// `[io]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIo {
    /// "uring" (io_uring, the default) | "std" (plain reads on threads).
    pub engine: Option<String>,
    /// When io_uring is unusable, fall back to the std engine with a warning
    /// (true) or fail at start-up (false).
    pub fallback: Option<bool>,
    /// Reader thread placement: "auto" | "off" | CPU list like "0,2-3".
    pub pin: Option<String>,
    /// Reader threads.
    pub threads: Option<usize>,
    /// Files loaded ahead of compute (bounds memory: queue_depth × file size).
    pub queue_depth: Option<usize>,
    /// Use O_DIRECT where the engine supports it.
    pub direct: Option<bool>,
    /// Files larger than this are rejected without being read.
    pub max_file_bytes: Option<u64>,
    /// Size of the read buffer arena (ring engine).
    pub arena_bytes: Option<u64>,
}

/// `[compute]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCompute {
    /// "auto" | "cpu" | "cuda".
    pub backend: Option<String>,
    /// CPU worker threads; 0 = one per available core.
    pub workers: Option<usize>,
    /// Files per batch (CUDA backend).
    pub batch_files: Option<usize>,
    /// Feature rows in flight between compute and the writer.
    pub queue_depth: Option<usize>,
    /// Worker thread placement: "auto" | "off" | CPU list like "1,3".
    pub pin: Option<String>,
}

/// The whole file as written by users.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub mel: RawMel,
    #[serde(default)]
    pub segmentation: RawSegmentation,
    #[serde(default)]
    pub output: RawOutput,
    #[serde(default)]
    pub io: RawIo,
    #[serde(default)]
    pub compute: RawCompute,
    #[serde(default)]
    pub control: RawControl,
    /// `[serve]`: only `melforge serve` reads it.
    pub serve: Option<crate::config::serve::RawServe>,
}

/// Compute backend selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Auto,
    Cpu,
    Cuda,
}

/// Reader engine selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// io_uring: the whole file lifecycle in the ring, O_DIRECT into an arena.
    Uring,
    /// Blocking open/read/close per file.
    Std,
}

/// Validated I/O settings.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct IoConfig {
    pub engine: Engine,
    pub fallback: bool,
    pub pin: PinPolicy,
    pub threads: usize,
    pub queue_depth: usize,
    pub direct: bool,
    pub max_file_bytes: u64,
    pub arena_bytes: u64,
}

/// Validated compute settings.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ComputeConfig {
    pub backend: Backend,
    /// Resolved worker count (≥ 1).
    pub workers: usize,
    pub batch_files: usize,
    pub queue_depth: usize,
    pub pin: PinPolicy,
}

/// Validated output settings.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct OutputConfig {
    pub dtype: Dtype,
    pub chunk_files: usize,
}

/// A complete, validated configuration.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Config {
    pub spec: Spec,
    pub output: OutputConfig,
    pub io: IoConfig,
    pub compute: ComputeConfig,
    pub control: ControlConfig,
    /// Present when the file has a `[serve]` section.
    pub serve: Option<crate::config::serve::ServeConfig>,
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
            current = rest.trim_end_matches(']').trim().to_string();
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

struct Ctx<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Ctx<'_> {
    fn invalid(&self, key: &str, message: impl Into<String>) -> Error {
        let (section, name) = key.split_once('.').unwrap_or((key, ""));
        Error::Invalid {
            origin: self.origin.to_string(),
            key: key.to_string(),
            line: line_of(self.text, section, name),
            message: message.into(),
        }
    }

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

    /// A placement policy; explicit CPUs must exist and be allowed.
    fn pin(&self, key: &str, value: Option<&str>) -> Result<PinPolicy, Error> {
        let Some(v) = value else {
            return Ok(PinPolicy::Auto);
        };
        let policy: PinPolicy = v.parse().map_err(|e| self.invalid(key, format!("{e}")))?;
        if let PinPolicy::Cores(cpus) = &policy {
            crate::runtime::pin::validate_cores(cpus).map_err(|e| self.invalid(key, e))?;
        }
        Ok(policy)
    }

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
        let raw: RawConfig = toml::from_str(text).map_err(|e| Error::Syntax {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        Config::from_raw(raw, text, origin)
    }

    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.display().to_string(),
            source,
        })?;
        let raw: RawConfig = toml::from_str(&text).map_err(|e| Error::Syntax {
            origin: path.display().to_string(),
            message: e.to_string(),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Config::from_raw_in(raw, &text, &path.display().to_string(), base)
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
        let d = Spec::default();
        let m = &raw.mel;
        let sample_rate = match m.sample_rate {
            Some(0) => return Err(cx.invalid("mel.sample_rate", "0; expected a rate in Hz ≥ 1")),
            Some(r) => r,
            None => d.sample_rate,
        };
        let n_fft = m.n_fft.unwrap_or(d.n_fft);
        let g = &raw.segmentation;
        let spec = Spec {
            sample_rate,
            clip_seconds: m.clip_seconds.unwrap_or(d.clip_seconds),
            segmentation: Segmentation {
                enabled: g.enabled.unwrap_or(d.segmentation.enabled),
                long_window: g.long_window.unwrap_or(d.segmentation.long_window),
                long_hop: g.long_hop.unwrap_or(d.segmentation.long_hop),
                short_window: g.short_window.unwrap_or(d.segmentation.short_window),
                short_hop: g.short_hop.unwrap_or(d.segmentation.short_hop),
            },
            n_fft,
            hop_length: m.hop_length.unwrap_or(d.hop_length),
            win_length: m.win_length.unwrap_or(n_fft),
            window: cx.choice(
                "mel.window",
                m.window.as_deref(),
                d.window,
                &[
                    ("hann", Window::Hann),
                    ("hamming", Window::Hamming),
                    ("blackman", Window::Blackman),
                    ("boxcar", Window::Boxcar),
                ],
            )?,
            center: m.center.unwrap_or(d.center),
            pad_mode: cx.choice(
                "mel.pad_mode",
                m.pad_mode.as_deref(),
                d.pad_mode,
                &[
                    ("constant", PadMode::Constant),
                    ("reflect", PadMode::Reflect),
                ],
            )?,
            power: m.power.unwrap_or(d.power),
            n_mels: m.n_mels.unwrap_or(d.n_mels),
            fmin: m.fmin.unwrap_or(d.fmin),
            fmax: m.fmax.unwrap_or(f64::from(sample_rate) / 2.0),
            mel_scale: cx.choice(
                "mel.mel_scale",
                m.mel_scale.as_deref(),
                d.mel_scale,
                &[("slaney", MelScale::Slaney), ("htk", MelScale::Htk)],
            )?,
            norm: cx.choice(
                "mel.norm",
                m.norm.as_deref(),
                d.norm,
                &[("slaney", MelNorm::Slaney), ("none", MelNorm::None)],
            )?,
            ref_value: m.ref_value.unwrap_or(d.ref_value),
            amin: m.amin.unwrap_or(d.amin),
            top_db: m.top_db,
        };
        spec.validate().map_err(|e| cx.invalid(e.key, e.message))?;

        let o = &raw.output;
        let output = OutputConfig {
            dtype: cx.choice(
                "output.dtype",
                o.dtype.as_deref(),
                Dtype::Float32,
                &[("float32", Dtype::Float32), ("float16", Dtype::Float16)],
            )?,
            chunk_files: cx.positive("output.chunk_files", o.chunk_files, 64)?,
        };

        let i = &raw.io;
        let io = IoConfig {
            engine: cx.choice(
                "io.engine",
                i.engine.as_deref(),
                Engine::Uring,
                &[("uring", Engine::Uring), ("std", Engine::Std)],
            )?,
            fallback: i.fallback.unwrap_or(true),
            pin: cx.pin("io.pin", i.pin.as_deref())?,
            threads: cx.positive("io.threads", i.threads, 1)?,
            queue_depth: cx.positive("io.queue_depth", i.queue_depth, 64)?,
            direct: i.direct.unwrap_or(true),
            max_file_bytes: match i.max_file_bytes {
                Some(0) => return Err(cx.invalid("io.max_file_bytes", "0; expected a size ≥ 1")),
                Some(v) => v,
                None => 64 << 20,
            },
            arena_bytes: i.arena_bytes.unwrap_or(256 << 20),
        };

        let c = &raw.compute;
        let workers = match c.workers {
            None | Some(0) => std::thread::available_parallelism().map_or(1, |n| n.get()),
            Some(n) => n,
        };
        let compute = ComputeConfig {
            backend: cx.choice(
                "compute.backend",
                c.backend.as_deref(),
                Backend::Auto,
                &[
                    ("auto", Backend::Auto),
                    ("cpu", Backend::Cpu),
                    ("cuda", Backend::Cuda),
                ],
            )?,
            workers,
            batch_files: cx.positive("compute.batch_files", c.batch_files, 256)?,
            queue_depth: cx.positive("compute.queue_depth", c.queue_depth, 256)?,
            pin: cx.pin("compute.pin", c.pin.as_deref())?,
        };
        Ok(Config {
            spec,
            output,
            io,
            compute,
            control: ControlConfig::from_raw(&raw.control, &cx, base)?,
            serve,
        })
    }
}

// ---- [control]: the service's control socket (read by `control`). ----

/// `[control]`: the Unix control socket of `melforge serve` (see `control`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawControl {
    /// Socket path (default "/run/melforge/control.sock"); relative paths
    /// resolve against the config file's directory. The parent directory is
    /// created. At most 107 bytes (the `sun_path` limit).
    pub socket: Option<String>,
    /// Socket file mode as an octal string (default "0660").
    pub mode: Option<String>,
    /// Group (name or numeric gid) given the socket and allowed to use it, in
    /// addition to root and the service's own uid.
    pub group: Option<String>,
    /// Longest request line accepted; longer lines get an error and the
    /// connection is closed (default 65536).
    pub max_line_bytes: Option<usize>,
    /// Concurrent client connections; more are answered "busy" (default 64).
    pub max_clients: Option<usize>,
    /// A client that sends nothing (or half a line) for this long is
    /// disconnected (default 5000).
    pub client_timeout_ms: Option<u64>,
}

/// Validated control-socket settings.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ControlConfig {
    pub socket: std::path::PathBuf,
    /// Permission bits applied to the socket file (≤ 0o777).
    #[serde(serialize_with = "serialize_octal_mode")]
    pub mode: u32,
    pub group: Option<String>,
    pub max_line_bytes: usize,
    pub max_clients: usize,
    pub client_timeout_ms: u64,
}

/// Where `melforge serve` listens and `melforge ctl` connects by default.
pub const DEFAULT_CONTROL_SOCKET: &str = "/run/melforge/control.sock";

impl Default for ControlConfig {
    fn default() -> Self {
        let cx = Ctx {
            text: "",
            origin: "<defaults>",
        };
        ControlConfig::from_raw(&RawControl::default(), &cx, Path::new("."))
            .expect("defaults are valid")
    }
}

fn serialize_octal_mode<S: serde::Serializer>(mode: &u32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{mode:04o}"))
}

impl ControlConfig {
    fn from_raw(c: &RawControl, cx: &Ctx, base: &Path) -> Result<ControlConfig, Error> {
        let socket = c.socket.as_deref().unwrap_or(DEFAULT_CONTROL_SOCKET);
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
            None => 0o660,
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
            None => 65536,
        };
        let client_timeout_ms = match c.client_timeout_ms {
            Some(0) => {
                return Err(cx.invalid("control.client_timeout_ms", "0; expected ≥ 1"));
            }
            Some(v) => v,
            None => 5000,
        };
        Ok(ControlConfig {
            socket,
            mode,
            group,
            max_line_bytes,
            max_clients: cx.positive("control.max_clients", c.max_clients, 64)?,
            client_timeout_ms,
        })
    }
}

#[cfg(test)]
mod control_tests {
    use super::*;

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
// ---- end [control] ----

#[cfg(test)]
mod tests {
    use super::*;

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
    fn bad_value_names_key_and_line() {
        let e = Config::parse("[mel]\n\nfmax = 9000\n", "f.toml").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("f.toml:3: invalid value for `mel.fmax`"),
            "{msg}"
        );
        assert!(msg.contains("Nyquist"), "{msg}");
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
    fn pin_lists_are_parsed_and_unknown_cpus_rejected() {
        let c = Config::parse("[io]\npin = \"0\"\n[compute]\npin = \"off\"\n", "t").unwrap();
        assert_eq!(c.io.pin, PinPolicy::Cores(vec![0]));
        assert_eq!(c.compute.pin, PinPolicy::Off);
        let e = Config::parse("[io]\npin = \"4000\"\n", "f.toml").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("f.toml:2: invalid value for `io.pin`"),
            "{e}"
        );
    }

    #[test]
    fn fmax_follows_the_sample_rate_when_absent() {
        let c = Config::parse("[mel]\nsample_rate = 8000\n", "t").unwrap();
        assert_eq!(c.spec.fmax, 4000.0);
    }

    #[test]
    fn example_config_is_valid_and_equals_defaults() {
        let text = include_str!("../../config/melforge.toml");
        let c = Config::parse(text, "config/melforge.toml").unwrap();
        assert_eq!(c.spec, Spec::default());
    }
}
