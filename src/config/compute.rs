//! The `[compute]` section: the compute stage (backend, workers, batching,
//! the queue to the writer, placement) → validated [`ComputeConfig`];
//! defaults in [`defaults::compute`].
//!
//! `workers = 0` (the default) is resolved here to one worker per available
//! core, so the validated `workers` is always ≥ 1.
//!
//! `max_batch_delay_ms` is checked against `[serve]` when that section is
//! present: a partial CUDA batch may be held for at most that long, so it must
//! be shorter than `serve.flush_interval_ms` or a dropped file could stay
//! invisible past a flush. The error names the key the user wrote (the delay,
//! or the flush interval when the delay is the default) and both values.

use std::time::Duration;

use serde::Deserialize;

use super::serve::ServeConfig;
use super::{Ctx, Error, defaults, io};
use crate::runtime::pin::PinPolicy;

/// `[compute]` as written by users.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCompute {
    /// "auto" | "cpu" | "cuda"; default [`defaults::compute::BACKEND`].
    pub backend: Option<String>,
    /// CPU worker threads; 0 = one per available core; default
    /// [`defaults::compute::WORKERS`].
    pub workers: Option<usize>,
    /// Files per batch (CUDA backend); default
    /// [`defaults::compute::BATCH_FILES`].
    pub batch_files: Option<usize>,
    /// Feature rows in flight between compute and the writer; default
    /// [`defaults::compute::QUEUE_DEPTH`].
    pub queue_depth: Option<usize>,
    /// Worker thread placement: "auto" | "off" | CPU list like "1,3"; default
    /// [`defaults::compute::PIN`].
    pub pin: Option<String>,
    /// Milliseconds the CUDA stage may hold a partial batch waiting for more
    /// files before computing it; 1..=60000, and below
    /// `serve.flush_interval_ms` when `[serve]` is present. Default
    /// [`defaults::compute::MAX_BATCH_DELAY_MS`].
    pub max_batch_delay_ms: Option<u64>,
    /// CPU threads decoding what the GPU cannot (FLAC, resampling, channel
    /// policies) in front of the CUDA stage; 0 = the cores the readers and
    /// the stage thread leave, at least 1. Default
    /// [`defaults::compute::DECODE_THREADS`].
    pub decode_threads: Option<usize>,
}

/// Compute backend selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Auto,
    Cpu,
    Cuda,
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
    /// Longest a partial CUDA batch waits for more files (1 ms ..= 60 s, and
    /// below `serve.flush_interval_ms` when serving). Printed as the key it
    /// was read from, `max_batch_delay_ms`.
    #[serde(rename = "max_batch_delay_ms", serialize_with = "serialize_ms")]
    pub max_batch_delay: Duration,
    /// Decode threads of the CUDA stage; 0 = by the cores
    /// (`compute::cuda::decode_threads`).
    pub decode_threads: usize,
}

/// The accepted range of `compute.max_batch_delay_ms`.
const MAX_BATCH_DELAY_RANGE_MS: std::ops::RangeInclusive<u64> = 1..=60_000;

fn serialize_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl ComputeConfig {
    /// Applies the defaults, resolves `workers` and validates; `serve` is the
    /// validated `[serve]` section, if the file has one.
    pub(super) fn from_raw(
        c: &RawCompute,
        cx: &Ctx,
        serve: Option<&ServeConfig>,
    ) -> Result<ComputeConfig, Error> {
        let workers = match c.workers.unwrap_or(defaults::compute::WORKERS) {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        Ok(ComputeConfig {
            backend: cx.choice(
                "compute.backend",
                c.backend.as_deref(),
                defaults::compute::BACKEND,
                &[
                    ("auto", Backend::Auto),
                    ("cpu", Backend::Cpu),
                    ("cuda", Backend::Cuda),
                ],
            )?,
            workers,
            batch_files: cx.positive(
                "compute.batch_files",
                c.batch_files,
                defaults::compute::BATCH_FILES,
            )?,
            queue_depth: cx.positive(
                "compute.queue_depth",
                c.queue_depth,
                defaults::compute::QUEUE_DEPTH,
            )?,
            pin: io::pin(cx, "compute.pin", c.pin.as_deref(), defaults::compute::PIN)?,
            max_batch_delay: max_batch_delay(c.max_batch_delay_ms, cx, serve)?,
            decode_threads: c
                .decode_threads
                .unwrap_or(defaults::compute::DECODE_THREADS),
        })
    }
}

/// `compute.max_batch_delay_ms`: in range, and below the flush interval when
/// serving.
fn max_batch_delay(
    written: Option<u64>,
    cx: &Ctx,
    serve: Option<&ServeConfig>,
) -> Result<Duration, Error> {
    const KEY: &str = "compute.max_batch_delay_ms";
    let ms = written.unwrap_or(defaults::compute::MAX_BATCH_DELAY_MS);
    if !MAX_BATCH_DELAY_RANGE_MS.contains(&ms) {
        return Err(cx.invalid(
            KEY,
            format!(
                "{ms}; expected {} to {} milliseconds",
                MAX_BATCH_DELAY_RANGE_MS.start(),
                MAX_BATCH_DELAY_RANGE_MS.end()
            ),
        ));
    }
    if let Some(serve) = serve
        && ms >= serve.flush_interval_ms
    {
        let flush = serve.flush_interval_ms;
        let why =
            "or a partially filled CUDA batch could keep dropped files invisible past a flush";
        return Err(match written {
            Some(_) => cx.invalid(
                KEY,
                format!(
                    "{ms}; {KEY} = {ms} must be less than serve.flush_interval_ms = {flush}, {why}"
                ),
            ),
            None => cx.invalid(
                "serve.flush_interval_ms",
                format!(
                    "{flush}; serve.flush_interval_ms = {flush} must be greater than \
                     {KEY} = {ms} (its default), {why}; raise the interval or set {KEY} below it"
                ),
            ),
        });
    }
    Ok(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::{Config, Error};

    /// A `[serve]` section that validates anywhere, with the given interval.
    fn serve(flush_ms: u64) -> String {
        format!(
            "[serve]\nwatch_dir = \"/d\"\noutput_dir = \"/o\"\nflush_interval_ms = {flush_ms}\n"
        )
    }

    #[test]
    fn max_batch_delay_defaults_to_20_ms() {
        let c = Config::parse("", "t").unwrap();
        assert_eq!(c.compute.max_batch_delay, Duration::from_millis(20));
        let c = Config::parse(&serve(500), "t").unwrap();
        assert_eq!(c.compute.max_batch_delay, Duration::from_millis(20));
        let c = Config::parse("[compute]\nmax_batch_delay_ms = 60000\n", "t").unwrap();
        assert_eq!(c.compute.max_batch_delay, Duration::from_secs(60));
    }

    #[test]
    fn max_batch_delay_out_of_range_is_rejected_with_key_and_line() {
        for bad in [0, 60_001] {
            let text = format!("[compute]\nworkers = 1\nmax_batch_delay_ms = {bad}\n");
            let e = Config::parse(&text, "f.toml").unwrap_err();
            let msg = e.to_string();
            assert!(
                msg.starts_with("f.toml:3: invalid value for `compute.max_batch_delay_ms`"),
                "{msg}"
            );
            assert!(msg.contains("1 to 60000"), "{msg}");
        }
        let e = Config::parse("[compute]\nmax_batch_delay_ms = -5\n", "f.toml").unwrap_err();
        assert!(matches!(e, Error::Syntax { .. }), "{e}");
        assert!(e.to_string().contains("max_batch_delay_ms"), "{e}");
    }

    #[test]
    fn max_batch_delay_at_or_above_the_flush_interval_is_rejected_naming_both_keys() {
        for delay in [100, 250] {
            let text = format!("[compute]\nmax_batch_delay_ms = {delay}\n{}", serve(100));
            let e = Config::parse(&text, "f.toml").unwrap_err();
            let msg = e.to_string();
            assert!(
                msg.starts_with("f.toml:2: invalid value for `compute.max_batch_delay_ms`"),
                "{msg}"
            );
            assert!(
                msg.contains(&format!("compute.max_batch_delay_ms = {delay}"))
                    && msg.contains("serve.flush_interval_ms = 100"),
                "{msg}"
            );
        }
        let text = format!("[compute]\nmax_batch_delay_ms = 99\n{}", serve(100));
        let c = Config::parse(&text, "t").unwrap();
        assert_eq!(c.compute.max_batch_delay, Duration::from_millis(99));
        // Without [serve] there is no flush interval to stay under.
        assert!(Config::parse("[compute]\nmax_batch_delay_ms = 5000\n", "t").is_ok());
    }

    #[test]
    fn a_flush_interval_under_the_default_delay_names_the_interval() {
        let e = Config::parse(&serve(20), "f.toml").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("f.toml:4: invalid value for `serve.flush_interval_ms`"),
            "{msg}"
        );
        assert!(
            msg.contains("serve.flush_interval_ms = 20")
                && msg.contains("compute.max_batch_delay_ms = 20 (its default)"),
            "{msg}"
        );
    }

    #[test]
    fn max_batch_delay_prints_as_its_key_in_milliseconds() {
        let c = Config::parse("[compute]\nmax_batch_delay_ms = 35\n", "t").unwrap();
        let text = toml::to_string(&c.compute).unwrap();
        assert!(text.contains("max_batch_delay_ms = 35"), "{text}");
    }
}
