//! `--compare-fio`: the same files read by fio's io_uring engine.
//!
//! fio is given the corpus directory with `opendir` (a `filename=` list of
//! 20,000 paths is longer than fio accepts), reads each file sequentially
//! (`file_service_type=sequential`) with `openfiles` = `iodepth` = the queue
//! depth, so as many files are in flight as in the uring engine. `--files N`
//! becomes `nrfiles=N` (fio then picks N files in directory order, not ours).
//!
//! Block size: fio issues no I/O for a file smaller than `bs`, and O_DIRECT
//! needs aligned lengths, so `bs` is the smallest file size rounded down to
//! 4 KiB, capped at 128 KiB. For the synth corpus (81,964-byte clips) that is
//! one 80 KiB read per file: fio skips each file's last 44 bytes, which is
//! noted in the pass. fio's clat percentiles are per I/O, which is per file
//! only when every file is one I/O.
//!
//! Files/s is the files fio found (its "opendir added N files" line, or
//! `nrfiles`) over its read runtime.

use std::io;
use std::process::{Command, ExitStatus};

use serde_json::Value;

use super::psync::ALIGN;
use super::{Cache, Corpus, Engine, Latency, PassResult};

const MAX_BS: u64 = 128 * 1024;

/// Why fio could not be run, or its report not read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No `fio` on PATH.
    #[error("fio is not installed (not on PATH; on Debian: apt-get install fio)")]
    NotInstalled,
    /// `fio --version` ran but failed.
    #[error("`fio --version` exited with {status}")]
    Version { status: ExitStatus },
    /// fio could not be started.
    #[error("cannot run fio: {source}")]
    Spawn { source: io::Error },
    /// fio ran and failed; `stderr` is the first line it wrote there.
    #[error("fio exited with {status}: {stderr}")]
    Failed { status: ExitStatus, stderr: String },
    /// stdout held no `{`.
    #[error("fio printed no JSON report")]
    NoReport,
    /// The JSON document did not parse.
    #[error("cannot parse fio's JSON report: {source}")]
    Json { source: serde_json::Error },
    /// The report lacks a section (`jobs[0]`, `jobs[0].read`).
    #[error("fio's report has no {section}")]
    NoSection { section: &'static str },
    /// The read section lacks a measurement (`io_bytes`, `runtime`).
    #[error("no read.{field}")]
    NoReadField { field: &'static str },
}

/// A usable fio binary.
pub struct Fio {
    pub version: String,
}

impl Fio {
    /// Looks for `fio` on PATH.
    pub fn find() -> Result<Fio, Error> {
        match Command::new("fio").arg("--version").output() {
            Ok(o) if o.status.success() => Ok(Fio {
                version: String::from_utf8_lossy(&o.stdout).trim().to_string(),
            }),
            Ok(o) => Err(Error::Version { status: o.status }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Error::NotInstalled),
            Err(source) => Err(Error::Spawn { source }),
        }
    }

    /// The arguments of one fio run over `corpus`.
    pub fn args(corpus: &Corpus, cache: Cache, direct: bool, qd: usize) -> Vec<String> {
        let mut a = vec![
            "--output-format=json".to_string(),
            "--name=melforge-bench-io".to_string(),
            "--ioengine=io_uring".to_string(),
            format!("--direct={}", u8::from(direct)),
            format!("--iodepth={qd}"),
            "--rw=read".to_string(),
            format!("--bs={}", block_size(corpus)),
            format!("--opendir={}", corpus.dir.display()),
            "--file_service_type=sequential".to_string(),
            format!("--openfiles={qd}"),
            // fio's default invalidate=1 would turn a warm pass cold.
            format!("--invalidate={}", u8::from(cache == Cache::Cold)),
            "--group_reporting=1".to_string(),
        ];
        if corpus.files.len() < corpus.total_files {
            a.push(format!("--nrfiles={}", corpus.files.len()));
        }
        a
    }

    /// Runs fio once and converts its report into a pass.
    pub fn run(
        &self,
        corpus: &Corpus,
        cache: Cache,
        direct: bool,
        qd: usize,
    ) -> Result<PassResult, Error> {
        let args = Self::args(corpus, cache, direct, qd);
        let out = Command::new("fio")
            .args(&args)
            .output()
            .map_err(|source| Error::Spawn { source })?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(Error::Failed {
                status: out.status,
                stderr: err.lines().next().unwrap_or("").to_owned(),
            });
        }
        let (mut pass, found) = parse(&stdout, corpus.files.len(), cache, direct, qd)?;
        let bs = block_size(corpus);
        let mut notes = vec![format!("bs={bs}")];
        if corpus.files.iter().any(|f| !f.size.is_multiple_of(bs)) {
            notes.push("fio reads whole blocks only, so each file's tail past its last bs boundary is not read".into());
        }
        if let Some(found) = found.filter(|&n| n != corpus.total_files as u64) {
            notes.push(format!(
                "fio found {found} files below {} but the benchmark's tree has {} *.wav files; the sets differ",
                corpus.dir.display(),
                corpus.total_files
            ));
        }
        pass.note = Some(notes.join("; "));
        pass.command = Some(std::iter::once("fio".to_string()).chain(args).collect());
        Ok(pass)
    }
}

/// The fio block size for `corpus` (see the module doc).
pub fn block_size(corpus: &Corpus) -> u64 {
    let min = corpus.files.iter().map(|f| f.size).min().unwrap_or(0);
    (min / ALIGN as u64 * ALIGN as u64).clamp(ALIGN as u64, MAX_BS)
}

/// Parses fio's stdout: optional "opendir added N files" lines, then the JSON
/// document. `limit` caps the file count (fio's `nrfiles`). Also returns the
/// number of files fio said it found.
pub fn parse(
    stdout: &str,
    limit: usize,
    cache: Cache,
    direct: bool,
    qd: usize,
) -> Result<(PassResult, Option<u64>), Error> {
    let mut found = None;
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("fio: opendir added ") {
            let n: Option<u64> = rest.split_whitespace().next().and_then(|n| n.parse().ok());
            found = Some(found.unwrap_or(0) + n.unwrap_or(0));
        }
    }
    let start = stdout.find('{').ok_or(Error::NoReport)?;
    let doc: Value =
        serde_json::from_str(&stdout[start..]).map_err(|source| Error::Json { source })?;
    let job = doc
        .pointer("/jobs/0")
        .ok_or(Error::NoSection { section: "jobs[0]" })?;
    let err = job.get("error").and_then(Value::as_u64).unwrap_or(0);
    let read = job.get("read").ok_or(Error::NoSection {
        section: "jobs[0].read",
    })?;
    let num = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_f64);
    let bytes = num(read, "/io_bytes").ok_or(Error::NoReadField { field: "io_bytes" })? as u64;
    let runtime_ms = num(read, "/runtime").ok_or(Error::NoReadField { field: "runtime" })?;
    let files = found.map_or(limit as u64, |n| n.min(limit as u64));
    let files = if bytes == 0 { 0 } else { files };
    let secs = runtime_ms / 1000.0;
    let rate = |x: f64| if secs > 0.0 { x / secs } else { 0.0 };
    let latency = (|| {
        Some(Latency {
            p50_us: num(read, "/clat_ns/percentile/50.000000")? / 1000.0,
            p99_us: num(read, "/clat_ns/percentile/99.000000")? / 1000.0,
            max_us: num(read, "/clat_ns/max")? / 1000.0,
        })
    })()
    .filter(|_| bytes > 0);
    let pass = PassResult {
        engine: Engine::Fio,
        cache,
        direct,
        queue_depth: qd,
        files,
        errors: err.min(1),
        bytes,
        elapsed_s: secs,
        files_per_s: rate(files as f64),
        mib_per_s: rate(bytes as f64 / (1024.0 * 1024.0)),
        latency,
        buffered_fallbacks: 0,
        first_error: (err != 0).then(|| format!("fio job error {err}")),
        note: None,
        command: None,
    };
    Ok((pass, found))
}
