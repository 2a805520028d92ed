//! `build`: a sorted walk of INPUT through the stage graph into one HDF5 file
//! per split.
//!
//! The command supplies the two ends of [`crate::pipeline`]: its source is a
//! thread that pushes the walk's jobs in sorted order and then drops its
//! producer guard (ending the stream); its sink is a [`DatasetWriter`] on one
//! writer thread (the only thread that calls HDF5), which reorders rows into
//! sorted path order. The calling thread shows progress. A writer failure
//! aborts the graph, so every stage stops; the error is returned after all
//! threads are joined.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::app::merge::shard::{SHARD_ATTR, Shard};
use crate::app::metrics::{self, Endpoint};
use crate::compute::{RejectKind, Rejection, cuda};
use crate::config::{Config, Direct};
use crate::pipeline::{self, Delivered, Pipeline};
use crate::reader::{ReadJob, cache};
use crate::runtime::telemetry::{Local, Report, Telemetry};
use crate::runtime::window::{CloseOnDrop, Window};
use crate::source::{self, Job, PathTable, Plan};
use crate::writer::{self, DatasetWriter, OutputPlan, PlannedFile, SplitPlan, WriteReport};

/// A fatal problem: the run cannot complete.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read input directory {path}: {source}")]
    Input {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no .wav files found under {0}")]
    Empty(PathBuf),
    #[error(transparent)]
    Pipeline(#[from] pipeline::Error),
    #[error(transparent)]
    Writer(#[from] writer::Error),
    #[error("cannot write {path}: {source}")]
    Output {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the {0} thread: {1}")]
    Spawn(&'static str, std::io::Error),
    #[error("the {0} thread panicked")]
    Panicked(&'static str),
    #[error(transparent)]
    Metrics(#[from] metrics::Error),
}

/// Run-time options that are not pipeline settings.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Draw a progress bar (the CLI sets this on a TTY).
    pub progress: bool,
    /// Count into this instead of a private tally, so a caller (the service's
    /// rebuild) can watch progress while the build runs.
    pub telemetry: Option<Arc<Telemetry>>,
}

/// Everything a finished build reports.
#[derive(Debug, Serialize)]
pub struct Outcomes {
    /// Reader engine used: "uring" or "std".
    pub engine: String,
    /// The CUDA stage's report (device, batches, H2D bytes and rate) when it ran.
    pub cuda: Option<cuda::CudaReport>,
    pub backend: String,
    pub backend_reason: String,
    /// Whether the ring engine opened inputs with O_DIRECT (`io.direct`,
    /// `auto` resolved by `reader::cache`), and why.
    pub direct: bool,
    pub direct_reason: String,
    pub outputs: Vec<OutputFile>,
    pub rejected: Vec<Rejection>,
    pub rejected_log: PathBuf,
    pub report: Report,
}

#[derive(Debug, Serialize)]
pub struct OutputFile {
    pub split: String,
    pub path: PathBuf,
    pub rows: usize,
}

fn output_plan(
    out: &Path,
    input: &Path,
    cfg: &Config,
    plan: &source::Plan,
    shard: Option<Shard>,
) -> OutputPlan {
    let splits = plan
        .splits
        .iter()
        .enumerate()
        .map(|(i, name)| SplitPlan {
            name: name.clone(),
            files: plan
                .split_jobs(i)
                .map(|j| PlannedFile {
                    path: j.path,
                    label: j.label,
                })
                .collect(),
        })
        .collect();
    let input = std::path::absolute(input).unwrap_or_else(|_| input.to_path_buf());
    let mut extra_attrs = vec![
        ("input".into(), input.display().to_string()),
        // `[input]` settings that decide the numbers (docs/FORMAT.md).
        (
            "input_resample".into(),
            cfg.input.policy.resample.name().into(),
        ),
        (
            "input_channels".into(),
            cfg.input.policy.channels.name().into(),
        ),
    ];
    if let Some(s) = shard {
        // Which shard a file holds; merge checks it against the file name and
        // leaves it out of the merged file.
        extra_attrs.push((SHARD_ATTR.into(), s.to_string()));
    }
    OutputPlan {
        out_dir: out.to_path_buf(),
        paths: Arc::clone(&plan.paths),
        splits,
        label_names: plan.label_names.clone(),
        spec: cfg.spec.clone(),
        dtype: cfg.output.dtype,
        chunk_files: cfg.output.chunk_files,
        extra_attrs,
    }
}

/// The writer thread's loop: every outcome into the sink, in arrival order
/// (the writer reorders rows).
fn write_all(
    mut w: DatasetWriter,
    jobs: &[Job],
    paths: &PathTable,
    window: &Window,
    p: &Pipeline,
) -> Result<(WriteReport, Vec<Rejection>), writer::Error> {
    let mut local = Local::default();
    let mut rejected = Vec::new();
    let telemetry = p.telemetry();
    while let Some(o) = p.outcomes().pop() {
        window.received(o.job);
        let j = &jobs[o.job];
        let d = pipeline::deliver(
            &mut w,
            j,
            paths.get(j.path),
            o.row,
            p.free_rows(),
            &mut local,
            telemetry,
        )?;
        if let Delivered::Rejected(r) = d {
            rejected.push(r);
        }
    }
    let report = local.time(crate::runtime::telemetry::Stage::Write, || w.finish());
    local.publish(telemetry);
    rejected.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((report?, rejected))
}

/// The rejection for a path the walk skipped: its path relative to `input`
/// (bytes that are not UTF-8 escaped), the kind, and the reason.
fn walk_rejection(input: &Path, w: &source::Warning) -> Rejection {
    let rel = w.path.strip_prefix(input).unwrap_or(&w.path);
    let path = source::escape_path(rel);
    let (kind, reason) = match w.kind {
        source::WarningKind::NonUtf8Name => (
            RejectKind::BadPath,
            "the name is not valid UTF-8 (shown with \\xNN escapes), so it cannot be a row's \
             path; rename it to UTF-8"
                .to_string(),
        ),
        source::WarningKind::UnreadableDir => (
            RejectKind::Unreadable,
            format!(
                "directory cannot be read, nothing below it was built: {}",
                w.reason
            ),
        ),
        source::WarningKind::UnlistableEntry => (
            RejectKind::Unreadable,
            format!("an entry of this directory cannot be listed: {}", w.reason),
        ),
        source::WarningKind::BrokenLink => (
            RejectKind::Unreadable,
            format!(
                "symbolic link whose target cannot be resolved: {}",
                w.reason
            ),
        ),
    };
    Rejection { path, kind, reason }
}

/// Writes the rejection log through `<name>.partial` (fsynced, then renamed),
/// then fsyncs the output directory and its parent: after this returns, the
/// split files renamed before it and the log survive a power loss.
fn write_rejections(path: &Path, rejected: &[Rejection]) -> std::io::Result<()> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = std::path::PathBuf::from(partial);
    let mut f = std::io::BufWriter::new(std::fs::File::create(&partial)?);
    for r in rejected {
        serde_json::to_writer(&mut f, r)?;
        f.write_all(b"\n")?;
    }
    f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&partial, path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    crate::runtime::sys::sync_dir(dir)?;
    match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => crate::runtime::sys::sync_dir(parent),
        _ => Ok(()),
    }
}

fn progress_bar(total: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} files ({per_sec}, eta {eta})",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    bar
}

/// Runs a whole build of `input` into `out`.
pub fn build(input: &Path, out: &Path, cfg: &Config, opts: &Options) -> Result<Outcomes, Error> {
    build_shard(input, out, cfg, opts, None)
}

/// Runs a build of `input` into `out`, or with `shard` only that shard's share
/// of the sorted walk (rule in [`crate::app::merge::shard`]) into
/// `<split>.shard-K-of-N.h5` and `rejected.shard-K-of-N.jsonl`, with the label
/// table and split list of the whole tree. A shard whose share is empty still
/// writes every split's file (zero rows) and an empty rejection log.
pub fn build_shard(
    input: &Path,
    out: &Path,
    cfg: &Config,
    opts: &Options,
    shard: Option<Shard>,
) -> Result<Outcomes, Error> {
    let started = Instant::now();
    let plan = source::scan_with(input, &cfg.input.extensions).map_err(|source| Error::Input {
        path: input.to_path_buf(),
        source,
    })?;
    for w in &plan.warnings {
        tracing::warn!(path = %w.path.display(), reason = %w.reason, "{}", w.kind.sentence());
    }
    // Paths the walk could not use are rejections too (every shard walks the
    // whole tree, so only shard 0 records them).
    let walk_rejected: Vec<Rejection> = if shard.is_none_or(|s| s.index == 0) {
        plan.warnings
            .iter()
            .map(|w| walk_rejection(input, w))
            .collect()
    } else {
        Vec::new()
    };
    if plan.jobs.is_empty() {
        return Err(Error::Empty(input.to_path_buf()));
    }
    let mut plan = match shard {
        Some(s) => {
            let part = s.apply(&plan);
            tracing::info!(
                shard = %s,
                files = part.jobs.len(),
                of = plan.jobs.len(),
                "Building one shard of the walk."
            );
            part
        }
        None => plan,
    };
    tracing::info!(
        files = plan.jobs.len(),
        splits = plan.splits.len(),
        labels = plan.label_names.len(),
        input = %input.display(),
        "Found the files to build."
    );
    std::fs::create_dir_all(out).map_err(|source| Error::Output {
        path: out.to_path_buf(),
        source,
    })?;
    let output = output_plan(out, input, cfg, &plan, shard);
    let writer = match shard {
        Some(s) => DatasetWriter::create_named(output, |split| s.split_file_name(split))?,
        None => DatasetWriter::create(output)?,
    };
    let telemetry = opts.telemetry.clone().unwrap_or_default();
    // Queue far ahead of the readers (the ring wakes the source once per
    // half ring, so hand-overs are rare), but not the whole walk: each queued
    // job holds its path, and a build's memory must not grow with its size.
    let queue_ahead = plan.jobs.len().min(4096);
    // `io.direct = "auto"` is settled here, where the inputs are known.
    let read_mode = cache::choose(cfg.io.direct, plan.jobs.len(), |i| {
        plan.open_path(&plan.jobs[i])
    });
    tracing::info!(direct = read_mode.direct, reason = %read_mode.reason, "Read mode chosen.");
    let mut run_cfg = cfg.clone();
    run_cfg.io.direct = if read_mode.direct {
        Direct::Always
    } else {
        Direct::Never
    };
    let p = Arc::new(Pipeline::start(&run_cfg, telemetry, queue_ahead)?);
    let paths = Arc::clone(&plan.paths);
    let jobs: Arc<[Job]> = std::mem::take(&mut plan.jobs).into();
    // The source opens links at their resolved targets (`Plan::open_path`).
    let open = Plan {
        jobs: Vec::new(),
        ..plan
    };
    // `[metrics] listen`: scrapes read the graph's published telemetry.
    let endpoint = match cfg.metrics.listen {
        None => None,
        Some(addr) => {
            match Endpoint::start(addr, metrics::from_pipeline(Arc::clone(&p), started)) {
                Ok(e) => Some(e),
                Err(e) => {
                    p.abort();
                    return Err(e.into());
                }
            }
        }
    };

    // The writer holds rows that arrive before their predecessors; the window
    // bounds how many (`runtime::window`): twice what the stages hold (reads
    // in flight and loaded per reader, the CPU workers' files or two CUDA
    // batches, the rows queued for the writer).
    let computing = match p.shape().workers {
        0 => 2 * cfg.compute.batch_files,
        n => n,
    };
    let window = Arc::new(Window::new(
        2 * (2 * cfg.io.queue_depth * cfg.io.threads.max(1) + computing + cfg.compute.queue_depth),
    ));
    // The source: the sorted walk, then the end of the stream (guard dropped).
    let source = {
        let (feed, jobs) = (p.jobs().producer(), Arc::clone(&jobs));
        let window = Arc::clone(&window);
        std::thread::Builder::new()
            .name("source".into())
            .spawn(move || {
                for (id, j) in jobs.iter().enumerate() {
                    if !window.admit(id) {
                        return; // the writer stopped
                    }
                    let job = ReadJob {
                        id,
                        path: open.open_path(j),
                    };
                    if feed.push(job).is_err() {
                        return; // the graph was aborted
                    }
                }
            })
    };
    let source = match source {
        Ok(s) => s,
        Err(e) => {
            p.abort();
            return Err(Error::Spawn("source", e));
        }
    };
    // The sink: one writer thread.
    let writer_thread = {
        let (p, jobs) = (Arc::clone(&p), Arc::clone(&jobs));
        let window = Arc::clone(&window);
        std::thread::Builder::new()
            .name("writer".into())
            .spawn(move || {
                let _release_source = CloseOnDrop(&window);
                let r = write_all(writer, &jobs, &paths, &window, &p);
                if r.is_err() {
                    p.abort();
                }
                r
            })
    };
    let writer_thread = match writer_thread {
        Ok(w) => w,
        Err(e) => {
            p.abort();
            return Err(Error::Spawn("writer", e));
        }
    };

    let telemetry = Arc::clone(p.telemetry());
    let bar = opts.progress.then(|| progress_bar(jobs.len() as u64));
    while !writer_thread.is_finished() {
        if let Some(b) = &bar {
            b.set_position(telemetry.files_done());
        }
        std::thread::sleep(Duration::from_millis(if bar.is_some() { 100 } else { 20 }));
    }
    if let Some(b) = &bar {
        b.set_position(telemetry.files_done());
        b.finish_and_clear();
    }
    let written = writer_thread
        .join()
        .map_err(|_| Error::Panicked("writer"))?;
    source.join().map_err(|_| Error::Panicked("source"))?;
    drop(endpoint); // joins the metrics thread, which holds the pipeline
    let p = Arc::into_inner(p).expect("every thread holding the pipeline has been joined");
    let report = p.report(started);
    let shape = p.shape().clone();
    let cuda_report = p.join()?;
    let (write_report, mut rejected) = written?;
    let mut report = report;
    for r in walk_rejected {
        report.files_rejected += 1;
        *report.rejected_by_kind.entry(r.kind).or_default() += 1;
        rejected.push(r);
    }
    rejected.sort_by(|a, b| a.path.cmp(&b.path));

    let rejected_log = out.join(shard.map_or("rejected.jsonl".into(), |s| s.rejected_file_name()));
    write_rejections(&rejected_log, &rejected).map_err(|source| Error::Output {
        path: rejected_log.clone(),
        source,
    })?;
    Ok(Outcomes {
        engine: shape.engine,
        cuda: cuda_report,
        backend: shape.backend,
        backend_reason: shape.backend_reason,
        direct: read_mode.direct,
        direct_reason: read_mode.reason,
        outputs: write_report
            .files
            .into_iter()
            .map(|(split, path, rows)| OutputFile { split, path, rows })
            .collect(),
        rejected,
        rejected_log,
        report,
    })
}
