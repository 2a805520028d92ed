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

use crate::compute::{Rejection, cuda};
use crate::config::Config;
use crate::pipeline::{self, Delivered, Pipeline};
use crate::reader::ReadJob;
use crate::runtime::telemetry::{Local, Report, Telemetry};
use crate::source::{self, Job};
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

fn output_plan(out: &Path, input: &Path, cfg: &Config, plan: &source::Plan) -> OutputPlan {
    let splits = plan
        .splits
        .iter()
        .enumerate()
        .map(|(i, name)| SplitPlan {
            name: name.clone(),
            files: plan
                .split_jobs(i)
                .map(|j| PlannedFile {
                    rel_path: j.rel_path.clone(),
                    label: j.label,
                })
                .collect(),
        })
        .collect();
    let input = std::path::absolute(input).unwrap_or_else(|_| input.to_path_buf());
    OutputPlan {
        out_dir: out.to_path_buf(),
        splits,
        label_names: plan.label_names.clone(),
        spec: cfg.spec.clone(),
        dtype: cfg.output.dtype,
        chunk_files: cfg.output.chunk_files,
        extra_attrs: vec![
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
        ],
    }
}

/// The writer thread's loop: every outcome into the sink, in arrival order
/// (the writer reorders rows).
fn write_all(
    mut w: DatasetWriter,
    jobs: &[Job],
    p: &Pipeline,
) -> Result<(WriteReport, Vec<Rejection>), writer::Error> {
    let mut local = Local::default();
    let mut rejected = Vec::new();
    let telemetry = p.telemetry();
    while let Some(o) = p.outcomes().pop() {
        let j = &jobs[o.job];
        let d = pipeline::deliver(
            &mut w,
            j,
            &j.rel_path,
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

fn write_rejections(path: &Path, rejected: &[Rejection]) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for r in rejected {
        serde_json::to_writer(&mut f, r)?;
        f.write_all(b"\n")?;
    }
    f.flush()
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
    let started = Instant::now();
    let plan = source::scan_with(input, &cfg.input.extensions).map_err(|source| Error::Input {
        path: input.to_path_buf(),
        source,
    })?;
    for w in &plan.warnings {
        tracing::warn!(path = %w.path.display(), reason = %w.reason, "{}", w.kind.sentence());
    }
    if plan.jobs.is_empty() {
        return Err(Error::Empty(input.to_path_buf()));
    }
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
    let writer = DatasetWriter::create(output_plan(out, input, cfg, &plan))?;
    let telemetry = opts.telemetry.clone().unwrap_or_default();
    // Queue the whole walk ahead of the readers (bounded: ~100 bytes a job).
    let queue_ahead = plan.jobs.len().min(1 << 16);
    let p = Arc::new(Pipeline::start(cfg, telemetry, queue_ahead)?);
    let jobs: Arc<[Job]> = plan.jobs.into();

    // The source: the sorted walk, then the end of the stream (guard dropped).
    let source = {
        let (feed, jobs) = (p.jobs().producer(), Arc::clone(&jobs));
        std::thread::Builder::new()
            .name("source".into())
            .spawn(move || {
                for (id, j) in jobs.iter().enumerate() {
                    let job = ReadJob {
                        id,
                        path: j.path.clone(),
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
        std::thread::Builder::new()
            .name("writer".into())
            .spawn(move || {
                let r = write_all(writer, &jobs, &p);
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
    let p = Arc::into_inner(p).expect("every thread holding the pipeline has been joined");
    let report = p.report(started);
    let shape = p.shape().clone();
    let cuda_report = p.join()?;
    let (write_report, rejected) = written?;

    let rejected_log = out.join("rejected.jsonl");
    write_rejections(&rejected_log, &rejected).map_err(|source| Error::Output {
        path: rejected_log.clone(),
        source,
    })?;
    Ok(Outcomes {
        engine: shape.engine,
        cuda: cuda_report,
        backend: shape.backend,
        backend_reason: shape.backend_reason,
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
