//! The `[io]` section: the reader stage (engine, threads, queue, O_DIRECT,
//! size limits) → validated [`IoConfig`]; defaults in [`defaults::io`].
//!
//! Also owns thread-placement parsing ([`pin`]), which `[compute]` shares: a
//! policy string must parse and explicit CPUs must exist and be allowed to
//! this process, so a bad `pin` fails at start-up, not when a thread starts.

use serde::Deserialize;

use super::{Ctx, Error, defaults};
use crate::runtime::pin::PinPolicy;

/// `[io]` as written by users.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIo {
    /// "uring" (io_uring, the default) | "std" (plain reads on threads);
    /// default [`defaults::io::ENGINE`].
    pub engine: Option<String>,
    /// When io_uring is unusable, fall back to the std engine with a warning
    /// (true) or fail at start-up (false); default [`defaults::io::FALLBACK`].
    pub fallback: Option<bool>,
    /// Reader thread placement: "auto" | "off" | CPU list like "0,2-3";
    /// default [`defaults::io::PIN`].
    pub pin: Option<String>,
    /// Reader threads: a number ≥ 1 or "auto" (sized by the machine's
    /// cores, [`auto_threads`]); default [`defaults::io::THREADS`].
    pub threads: Option<RawThreads>,
    /// Files loaded ahead of compute (bounds memory: queue_depth × file size);
    /// default [`defaults::io::QUEUE_DEPTH`].
    pub queue_depth: Option<usize>,
    /// O_DIRECT: true, false or "auto"; default [`defaults::io::DIRECT`].
    pub direct: Option<RawDirect>,
    /// Files larger than this are not read whole: their rows are computed
    /// from parts of them where the recipe allows (`crate::long`), else
    /// they are rejected without being read; default
    /// [`defaults::io::MAX_FILE_BYTES`].
    pub max_file_bytes: Option<u64>,
    /// Size of the read buffer arena (ring engine); default: sized for the
    /// files in flight (see [`IoConfig::arena_bytes`]).
    pub arena_bytes: Option<u64>,
}

/// `io.threads` as written: a count or a word.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(untagged)]
pub enum RawThreads {
    Count(usize),
    Word(String),
}

/// Reader threads for `io.threads = "auto"` on a machine with `cores`
/// available cores, and the sentence that says why: one reader per 8 cores,
/// 2 to 4 (1 on one core). A ring keeps `io.queue_depth` reads in flight, so
/// one reader reaches a disk's rate; but a warm file is copied out of the
/// page cache by the thread that reads it (about 20 µs of a reader's CPU for
/// a 82 KB clip on the 2-core dev VM), a serial cost that capped a warm
/// build at about 40k files/s with one reader there: two halve it, at the
/// same build rate on two cores. On the 16-core GPU box two readers were the
/// best of 1/2/4/8 (22.3k files/s vs 16.3–20.5k with one, 19.6k with eight:
/// more rings only contend for the cores that decode and write).
pub fn auto_threads(cores: usize) -> (usize, String) {
    let n = (cores / 8).clamp(2, 4).min(cores.max(1));
    let s = if n == 1 { "" } else { "s" };
    (
        n,
        format!("io.threads = \"auto\": {n} reader{s} for {cores} cores (one per 8 cores, 2 to 4)"),
    )
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

/// `io.direct` as written: a bool or a word.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(untagged)]
pub enum RawDirect {
    Flag(bool),
    Word(String),
}

/// When the ring engine opens files with O_DIRECT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direct {
    /// `"auto"`: a build samples its inputs before it starts (`reader::cache`)
    /// and reads through the page cache when they are already in it, with
    /// O_DIRECT otherwise; serve, which cannot look ahead, reads O_DIRECT.
    Auto,
    /// `true`: always O_DIRECT (per-file buffered fallback where refused).
    Always,
    /// `false`: always through the page cache.
    Never,
}

/// Validated I/O settings.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct IoConfig {
    pub engine: Engine,
    pub fallback: bool,
    pub pin: PinPolicy,
    /// Reader threads (≥ 1; `"auto"` resolved here).
    pub threads: usize,
    /// Why `threads` has its value ("io.threads = 4 was set", or the
    /// `"auto"` rule and the core count), for the start-up log.
    pub threads_reason: String,
    pub queue_depth: usize,
    pub direct: Direct,
    pub max_file_bytes: u64,
    /// The registered read arena; `None` (the default): sized by
    /// `pipeline::arena_bytes` for the files in flight, between
    /// [`defaults::io::ARENA_MIN_AUTO`] and [`defaults::io::ARENA_MAX_AUTO`].
    pub arena_bytes: Option<u64>,
}

impl IoConfig {
    /// Applies the defaults and validates.
    pub(super) fn from_raw(i: &RawIo, cx: &Ctx) -> Result<IoConfig, Error> {
        let (threads, threads_reason) = match &i.threads {
            Some(RawThreads::Count(n)) => {
                let n = cx.positive("io.threads", Some(*n), 1)?;
                (n, format!("io.threads = {n} was set"))
            }
            Some(RawThreads::Word(w)) if w.eq_ignore_ascii_case("auto") => auto_threads(cores()),
            Some(RawThreads::Word(w)) => {
                return Err(cx.invalid(
                    "io.threads",
                    format!("{w:?}; expected a number ≥ 1 or \"auto\""),
                ));
            }
            None => match defaults::io::THREADS {
                Some(n) => (n, format!("io.threads = {n} (the default)")),
                None => auto_threads(cores()),
            },
        };
        Ok(IoConfig {
            engine: cx.choice(
                "io.engine",
                i.engine.as_deref(),
                defaults::io::ENGINE,
                &[("uring", Engine::Uring), ("std", Engine::Std)],
            )?,
            fallback: i.fallback.unwrap_or(defaults::io::FALLBACK),
            pin: pin(cx, "io.pin", i.pin.as_deref(), defaults::io::PIN)?,
            threads,
            threads_reason,
            queue_depth: cx.positive("io.queue_depth", i.queue_depth, defaults::io::QUEUE_DEPTH)?,
            direct: match &i.direct {
                None => defaults::io::DIRECT,
                Some(RawDirect::Flag(true)) => Direct::Always,
                Some(RawDirect::Flag(false)) => Direct::Never,
                Some(RawDirect::Word(w)) => cx.choice(
                    "io.direct",
                    Some(w),
                    defaults::io::DIRECT,
                    &[
                        ("auto", Direct::Auto),
                        ("true", Direct::Always),
                        ("false", Direct::Never),
                    ],
                )?,
            },
            max_file_bytes: match i.max_file_bytes {
                Some(0) => return Err(cx.invalid("io.max_file_bytes", "0; expected a size ≥ 1")),
                Some(v) => v,
                None => defaults::io::MAX_FILE_BYTES,
            },
            arena_bytes: match i.arena_bytes {
                Some(0) => return Err(cx.invalid("io.arena_bytes", "0; expected a size ≥ 4096")),
                b => b,
            },
        })
    }
}

/// Cores this process may run on.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A placement policy for `key` (`io.pin`, `compute.pin`), or `default` when
/// absent; explicit CPUs must exist and be allowed.
pub(super) fn pin(
    cx: &Ctx,
    key: &str,
    value: Option<&str>,
    default: PinPolicy,
) -> Result<PinPolicy, Error> {
    let Some(v) = value else {
        return Ok(default);
    };
    let policy: PinPolicy = v.parse().map_err(|e| cx.invalid(key, format!("{e}")))?;
    if let PinPolicy::Cores(cpus) = &policy {
        crate::runtime::pin::validate_cores(cpus).map_err(|e| cx.invalid(key, e.to_string()))?;
    }
    Ok(policy)
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, Direct};
    use crate::runtime::pin::PinPolicy;

    #[test]
    fn direct_takes_a_bool_or_auto_and_defaults_to_auto() {
        let d = |text: &str| Config::parse(text, "t").map(|c| c.io.direct);
        assert_eq!(d("").unwrap(), Direct::Auto);
        assert_eq!(d("[io]\ndirect = true\n").unwrap(), Direct::Always);
        assert_eq!(d("[io]\ndirect = false\n").unwrap(), Direct::Never);
        assert_eq!(d("[io]\ndirect = \"AUTO\"\n").unwrap(), Direct::Auto);
        let e = d("[io]\ndirect = \"sometimes\"\n").unwrap_err().to_string();
        assert!(
            e.contains("io.direct") && e.contains("\"auto\", \"true\", \"false\""),
            "{e}"
        );
        assert!(d("[io]\ndirect = 1\n").is_err());
    }

    #[test]
    fn threads_take_a_count_or_auto_and_default_to_auto() {
        let t = |text: &str| Config::parse(text, "t").map(|c| (c.io.threads, c.io.threads_reason));
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let auto = super::auto_threads(cores);
        assert_eq!(t("").unwrap(), auto);
        assert_eq!(t("[io]\nthreads = \"Auto\"\n").unwrap(), auto);
        let (n, why) = t("[io]\nthreads = 3\n").unwrap();
        assert_eq!((n, why.as_str()), (3, "io.threads = 3 was set"));
        let e = t("[io]\nthreads = 0\n").unwrap_err().to_string();
        assert!(e.contains("io.threads") && e.contains("≥ 1"), "{e}");
        let e = t("[io]\nthreads = \"many\"\n").unwrap_err().to_string();
        assert!(e.contains("io.threads") && e.contains("\"auto\""), "{e}");
    }

    #[test]
    fn auto_threads_grow_with_the_cores_from_two_to_four() {
        let n = |cores| super::auto_threads(cores).0;
        assert_eq!([n(1), n(2), n(8), n(15)], [1, 2, 2, 2]);
        assert_eq!([n(16), n(24), n(32), n(64), n(256)], [2, 3, 4, 4, 4]);
        let (_, why) = super::auto_threads(16);
        assert!(why.contains("2 readers for 16 cores"), "{why}");
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
}
