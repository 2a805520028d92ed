//! `melforge bench io`: how fast can the reader engines load a corpus?
//!
//! Measures whole-file loads of every `*.wav` below a directory (the job list
//! of [`crate::plan::tree::scan`], in its order) as a matrix of passes:
//! {direct, buffered} × {cold, warm} × {uring, psync}, and, with
//! `--compare-fio`, fio over the same files with the same queue depth and
//! direct flag.
//!
//! * [`psync`]: the baseline: one thread, `open` + `read` per file (with
//!   `O_DIRECT` into an aligned buffer for direct passes).
//! * [`uring`]: the io_uring reader engine, one thread, one arena part.
//! * [`cache`]: cold passes evict every file first (`posix_fadvise`
//!   `DONTNEED`, plus `drop_caches` when asked and root); warm passes read the
//!   set once (buffered) first.
//! * [`fio`]: runs fio, parses its JSON, and turns it into the same
//!   [`PassResult`] so the two can be compared.
//! * [`report`]: the aligned table, the JSON document, machine info.
//!
//! A file that cannot be read during a pass (vanished, replaced, unreadable)
//! is counted in `errors` and the pass goes on; only an unusable directory or
//! an empty corpus fails the command.

mod cache;
mod fio;
mod psync;
mod report;
mod uring;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

pub use report::{Machine, Report};

/// Arguments of `melforge bench io`.
#[derive(Clone, Debug, clap::Args)]
pub struct IoArgs {
    /// Directory whose audio files are read (recursively, sorted, in build's
    /// order): every container a build reads by default (WAV, FLAC, MP3,
    /// Ogg, Opus, M4A/MP4; `input.extensions`' default).
    pub dir: PathBuf,
    /// Page-cache state for each pass.
    #[arg(long, value_enum, default_value = "both")]
    pub cache: CacheArg,
    /// Read with O_DIRECT (the default when neither mode is given).
    #[arg(long)]
    pub direct: bool,
    /// Read through the page cache; give both flags for both modes.
    #[arg(long)]
    pub buffered: bool,
    /// Engines to measure.
    #[arg(long, value_enum, default_value = "both")]
    pub engine: EngineArg,
    /// Files in flight for uring and fio.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub queue_depth: u32,
    /// Read only the first N files of the sorted list.
    #[arg(long)]
    pub files: Option<usize>,
    /// Before cold passes also `sync; echo 3 > /proc/sys/vm/drop_caches` (root only).
    #[arg(long)]
    pub drop_caches: bool,
    /// Also run fio (io_uring engine) over the same files and print the ratio.
    #[arg(long)]
    pub compare_fio: bool,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CacheArg {
    Cold,
    Warm,
    Both,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineArg {
    Uring,
    Psync,
    Both,
}

/// Page-cache state a pass starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Cache {
    Cold,
    Warm,
}

/// What produced a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    Uring,
    Psync,
    Fio,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Uring => "uring",
            Engine::Psync => "psync",
            Engine::Fio => "fio",
        }
    }
}

impl Cache {
    pub fn name(self) -> &'static str {
        match self {
            Cache::Cold => "cold",
            Cache::Warm => "warm",
        }
    }
}

/// Why the benchmark could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot scan {dir}: {err}")]
    Scan { dir: PathBuf, err: std::io::Error },
    #[error("no *.wav files below {0}")]
    NoFiles(PathBuf),
    #[error("cannot write the report: {0}")]
    Output(std::io::Error),
}

/// Validated settings of one benchmark run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Cache states, in the order run (cold before warm).
    pub caches: Vec<Cache>,
    /// `true` = O_DIRECT passes, `false` = buffered; in the order run.
    pub direct: Vec<bool>,
    pub engines: Vec<Engine>,
    pub queue_depth: usize,
    pub limit: Option<usize>,
    pub drop_caches: bool,
    pub compare_fio: bool,
}

impl Options {
    pub fn from_args(a: &IoArgs) -> Options {
        let caches = match a.cache {
            CacheArg::Cold => vec![Cache::Cold],
            CacheArg::Warm => vec![Cache::Warm],
            CacheArg::Both => vec![Cache::Cold, Cache::Warm],
        };
        let direct = match (a.direct, a.buffered) {
            (false, true) => vec![false],
            (true, true) => vec![true, false],
            _ => vec![true],
        };
        let engines = match a.engine {
            EngineArg::Uring => vec![Engine::Uring],
            EngineArg::Psync => vec![Engine::Psync],
            EngineArg::Both => vec![Engine::Uring, Engine::Psync],
        };
        Options {
            caches,
            direct,
            engines,
            queue_depth: a.queue_depth as usize,
            limit: a.files,
            drop_caches: a.drop_caches,
            compare_fio: a.compare_fio,
        }
    }
}

/// One file of the corpus and its size when collected.
#[derive(Clone, Debug)]
pub struct FileEntry {
    pub path: PathBuf,
    pub size: u64,
}

/// The files every pass reads.
#[derive(Clone, Debug)]
pub struct Corpus {
    pub dir: PathBuf,
    pub files: Vec<FileEntry>,
    pub bytes: u64,
    /// Files in the whole tree before `--files` cut the list.
    pub total_files: usize,
}

/// Collects the audio files below `dir` (the default `input.extensions`) in
/// job order, at most `limit`.
pub fn collect(dir: &Path, limit: Option<usize>) -> Result<Corpus, Error> {
    let plan = crate::plan::tree::scan(dir).map_err(|err| Error::Scan {
        dir: dir.to_path_buf(),
        err,
    })?;
    let total_files = plan.jobs.len();
    let take = limit.unwrap_or(usize::MAX);
    let files: Vec<FileEntry> = plan
        .jobs
        .iter()
        .take(take)
        .map(|j| {
            let path = plan.open_path(j);
            let size = std::fs::metadata(&path).map_or(0, |m| m.len());
            FileEntry { path, size }
        })
        .collect();
    if files.is_empty() {
        return Err(Error::NoFiles(dir.to_path_buf()));
    }
    let bytes = files.iter().map(|f| f.size).sum();
    Ok(Corpus {
        dir: dir.to_path_buf(),
        files,
        bytes,
        total_files,
    })
}

/// Per-file latency summary, microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Latency {
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

/// The `p`-th percentile (0 < p ≤ 100) of `sorted` by the nearest-rank
/// method: the smallest value with at least p % of the values at or below
/// it. `None` for an empty slice.
pub fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

impl Latency {
    /// Summarises per-file latencies in nanoseconds (sorted in place).
    pub fn from_nanos(lat: &mut [u64]) -> Option<Latency> {
        lat.sort_unstable();
        let us = |v: Option<u64>| v.map(|n| n as f64 / 1000.0);
        Some(Latency {
            p50_us: us(percentile(lat, 50.0))?,
            p99_us: us(percentile(lat, 99.0))?,
            max_us: us(lat.last().copied())?,
        })
    }
}

/// What an engine measured over one pass, before summarising.
#[derive(Debug, Default)]
pub struct Measured {
    /// Files read completely.
    pub files: u64,
    /// Files that could not be read.
    pub errors: u64,
    /// Bytes of the files read completely.
    pub bytes: u64,
    pub elapsed: Duration,
    /// Per-file latency of each file read, nanoseconds.
    pub latencies_ns: Vec<u64>,
    /// Direct passes: files read buffered because O_DIRECT was refused.
    pub buffered_fallbacks: u64,
    /// The first error, as "path: reason".
    pub first_error: Option<String>,
}

impl Measured {
    fn error(&mut self, path: &Path, reason: impl std::fmt::Display) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(format!("{}: {reason}", path.display()));
        }
    }
}

/// One row of the result: a pass of one engine over the corpus.
#[derive(Clone, Debug, Serialize)]
pub struct PassResult {
    pub engine: Engine,
    pub cache: Cache,
    pub direct: bool,
    /// Files in flight (1 for psync).
    pub queue_depth: usize,
    pub files: u64,
    pub errors: u64,
    pub bytes: u64,
    pub elapsed_s: f64,
    pub files_per_s: f64,
    pub mib_per_s: f64,
    /// `None` when no file was read (or fio reported none).
    pub latency: Option<Latency>,
    pub buffered_fallbacks: u64,
    pub first_error: Option<String>,
    /// Anything a reader of the numbers should know (fio block size, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// fio passes: the command line that produced them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
}

impl PassResult {
    fn new(engine: Engine, cache: Cache, direct: bool, qd: usize, mut m: Measured) -> Self {
        let secs = m.elapsed.as_secs_f64();
        let rate = |x: f64| if secs > 0.0 { x / secs } else { 0.0 };
        PassResult {
            engine,
            cache,
            direct,
            queue_depth: qd,
            files: m.files,
            errors: m.errors,
            bytes: m.bytes,
            elapsed_s: secs,
            files_per_s: rate(m.files as f64),
            mib_per_s: rate(m.bytes as f64 / (1024.0 * 1024.0)),
            latency: Latency::from_nanos(&mut m.latencies_ns),
            buffered_fallbacks: m.buffered_fallbacks,
            first_error: m.first_error,
            note: None,
            command: None,
        }
    }
}

/// An engine's rate next to fio's for the same cache state and mode.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub engine: Engine,
    pub cache: Cache,
    pub direct: bool,
    pub files_per_s: f64,
    pub fio_files_per_s: f64,
    /// `files_per_s / fio_files_per_s`.
    pub ratio: f64,
}

/// Runs the whole matrix. Problems that skip part of it (no io_uring, no fio,
/// drop_caches refused) are recorded in [`Report::warnings`].
pub fn run(corpus: &Corpus, opts: &Options) -> Report {
    let mut warnings = Vec::new();
    let mut passes = Vec::new();
    let mut comparisons = Vec::new();
    let engines = usable_engines(opts, &mut warnings);
    let fio = find_fio(opts, &mut warnings);
    let mut cache = cache::CacheControl::new(opts.drop_caches);
    for &direct in &opts.direct {
        for &state in &opts.caches {
            let prepare = |cache: &mut cache::CacheControl| match state {
                Cache::Cold => cache.evict(&corpus.files),
                Cache::Warm => cache.warm(&corpus.files),
            };
            for &engine in &engines {
                prepare(&mut cache);
                let (m, qd) = match engine {
                    Engine::Psync => (psync::run(&corpus.files, direct), 1),
                    Engine::Uring => match uring::run(&corpus.files, direct, opts.queue_depth) {
                        Ok(m) => (m, opts.queue_depth),
                        Err(why) => {
                            warnings.push(format!(
                                "The uring {} {} pass failed: {why}.",
                                state.name(),
                                mode_name(direct)
                            ));
                            continue;
                        }
                    },
                    Engine::Fio => unreachable!("fio is not in the engine list"),
                };
                passes.push(PassResult::new(engine, state, direct, qd, m));
            }
            if let Some(fio) = &fio {
                prepare(&mut cache);
                match fio.run(corpus, state, direct, opts.queue_depth) {
                    Ok(f) => {
                        comparisons.extend(against_fio(&passes, &f, state, direct));
                        passes.push(f);
                    }
                    Err(why) => warnings.push(format!(
                        "fio {} {} failed: {why}.",
                        state.name(),
                        mode_name(direct)
                    )),
                }
            }
        }
    }
    warnings.extend(cache.warnings());
    Report {
        dir: corpus.dir.clone(),
        machine: Machine::current(),
        corpus_files: corpus.files.len(),
        corpus_bytes: corpus.bytes,
        corpus_total_files: corpus.total_files,
        queue_depth: opts.queue_depth,
        fio_version: fio.as_ref().map(|f| f.version.clone()),
        passes,
        comparisons,
        warnings,
    }
}

/// The engines asked for, less uring where the kernel lacks it (a warning).
fn usable_engines(opts: &Options, warnings: &mut Vec<String>) -> Vec<Engine> {
    let mut engines = opts.engines.clone();
    if engines.contains(&Engine::Uring)
        && let Err(why) = uring::available()
    {
        warnings.push(format!("Skipped the uring engine: {why}."));
        engines.retain(|e| *e != Engine::Uring);
    }
    engines
}

/// fio, when the comparison is asked for and fio is installed (else a
/// warning).
fn find_fio(opts: &Options, warnings: &mut Vec<String>) -> Option<fio::Fio> {
    if !opts.compare_fio {
        return None;
    }
    match fio::Fio::find() {
        Ok(f) => Some(f),
        Err(why) => {
            warnings.push(format!("Skipped the fio comparison: {why}."));
            None
        }
    }
}

/// Each engine's pass of cache state `cache` and mode `direct` against
/// fio's pass `f` of the same.
fn against_fio(
    passes: &[PassResult],
    f: &PassResult,
    cache: Cache,
    direct: bool,
) -> Vec<Comparison> {
    passes
        .iter()
        .filter(|p| p.cache == cache && p.direct == direct && p.engine != Engine::Fio)
        .map(|p| Comparison {
            engine: p.engine,
            cache,
            direct,
            files_per_s: p.files_per_s,
            fio_files_per_s: f.files_per_s,
            ratio: if f.files_per_s > 0.0 {
                p.files_per_s / f.files_per_s
            } else {
                f64::NAN
            },
        })
        .collect()
}

pub(crate) fn mode_name(direct: bool) -> &'static str {
    if direct { "direct" } else { "buffered" }
}

/// The `bench io` command: collect, run, print (table or JSON) on stdout.
pub fn main(args: &IoArgs) -> Result<Report, Error> {
    let opts = Options::from_args(args);
    let corpus = collect(&args.dir, opts.limit)?;
    let report = run(&corpus, &opts);
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report).map_err(|e| Error::Output(e.into()))?;
        use std::io::Write;
        writeln!(out).map_err(Error::Output)?;
    } else {
        report.write_table(&mut out).map_err(Error::Output)?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests;
