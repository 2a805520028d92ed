//! `build`: wires source → reader → compute → writer for one run.
//!
//! Threads: `io.threads` readers, `compute.workers` CPU workers, one writer (the
//! only thread that calls HDF5) and the calling thread, which shows progress.
//! Two bounded [`Ring`]s connect them; buffers travel back through free queues.
//!
//! Shutdown cascades downstream by closing rings: readers close the loaded ring
//! when the last job is pushed, workers close the outcome ring when the loaded
//! ring is drained, the writer finishes when the outcome ring is drained. A
//! writer failure closes both rings, so every upstream push fails and every
//! thread stops; the error is returned after all threads are joined.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use serde::Serialize;

use crate::compute::{self, Choice, Outcome, cpu, cuda};
use crate::config::{Backend, Config, Engine};
use crate::dsp::Plan;
use crate::reader::arena::Arena;
use crate::reader::{Loaded, Readers, uring};
use crate::runtime::pin::{self, PinPolicy, Placement};
use crate::runtime::ring::Ring;
use crate::runtime::telemetry::{Local, Report, Stage, Telemetry};
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
    Backend(#[from] compute::Error),
    #[error(transparent)]
    Writer(#[from] writer::Error),
    #[error(transparent)]
    Cuda(#[from] cuda::Error),
    #[error("cannot write {path}: {source}")]
    Output {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the reader: {0}")]
    Reader(String),
    #[error("cannot start a pipeline thread: {0}")]
    Spawn(std::io::Error),
    #[error("{0}")]
    Panic(String),
}

/// A file that was not written, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Rejection {
    pub path: String,
    pub reason: String,
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
        extra_attrs: vec![("input".into(), input.display().to_string())],
    }
}

/// The writer thread's loop: reorders outcomes into rows, recycles buffers.
fn write_all(
    mut w: DatasetWriter,
    jobs: &[Job],
    outcomes: &Ring<Outcome>,
    free_rows: &ArrayQueue<Vec<f32>>,
    telemetry: &Telemetry,
) -> Result<(WriteReport, Vec<Rejection>), writer::Error> {
    let mut local = Local::default();
    let mut rejected = Vec::new();
    while let Some(Outcome { job, row }) = outcomes.pop() {
        let j = &jobs[job];
        let ok = row.is_ok();
        let row = row
            .map_err(|reason| {
                rejected.push(Rejection {
                    path: j.rel_path.clone(),
                    reason,
                })
            })
            .ok();
        let recycled = local.time(Stage::Write, || w.submit(j.split, j.seq, row))?;
        for r in recycled {
            let _full = free_rows.push(r);
        }
        local.file_done(ok, telemetry);
    }
    let report = local.time(Stage::Write, || w.finish());
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

/// Starts the configured reader engine. `uring` falls back to `std` (with a
/// warning) when the start-up probe fails and `io.fallback` allows it.
fn start_readers(
    cfg: &Config,
    cpus: &[Option<usize>],
    jobs: Arc<[Job]>,
    loaded: Arc<Ring<Loaded>>,
    free_bytes: Arc<ArrayQueue<Vec<u8>>>,
    telemetry: Arc<Telemetry>,
) -> Result<(Readers, Engine, Option<Arc<Arena>>), Error> {
    if cfg.io.engine == Engine::Uring {
        match uring::probe() {
            Ok(_) => {
                let arena = Arena::new(cfg.io.arena_bytes, cfg.io.threads.max(1))
                    .map_err(|e| Error::Reader(e.to_string()))?;
                let r = uring::start_readers_in(&arena, &cfg.io, cpus, jobs, loaded, telemetry)
                    .map_err(|e| Error::Reader(e.to_string()))?;
                return Ok((r, Engine::Uring, Some(arena)));
            }
            Err(why) if cfg.io.fallback => tracing::warn!(
                "io_uring is not usable ({why}); reading with the std engine instead \
                 (set io.fallback = false to make this fatal)."
            ),
            Err(why) => {
                return Err(Error::Reader(format!(
                    "io_uring is not usable ({why}) and io.fallback = false"
                )));
            }
        }
    }
    let r =
        Readers::start(&cfg.io, cpus, jobs, loaded, free_bytes, telemetry).map_err(Error::Spawn)?;
    Ok((r, Engine::Std, None))
}

/// Thread placement: hwloc's plan for both roles, with an explicit `io.pin` or
/// `compute.pin` list (or "off") overriding its role.
fn place_threads(cfg: &Config, gpu_pci_bus_id: Option<&str>) -> Placement {
    let mut placement = pin::plan(
        &PinPolicy::Auto,
        cfg.io.threads,
        cfg.compute.workers,
        gpu_pci_bus_id,
    );
    if cfg.io.pin != PinPolicy::Auto {
        placement.readers = pin::plan(&cfg.io.pin, cfg.io.threads, 0, None).readers;
    }
    if cfg.compute.pin != PinPolicy::Auto {
        placement.workers = pin::plan(&cfg.compute.pin, 0, cfg.compute.workers, None).workers;
    }
    placement
}

/// The compute stage that runs.
enum Compute {
    Cpu(cpu::Workers),
    Cuda(cuda::CudaWorkers),
}

/// Runs a whole build of `input` into `out`.
pub fn build(input: &Path, out: &Path, cfg: &Config, opts: &Options) -> Result<Outcomes, Error> {
    let started = Instant::now();
    let plan = source::scan(input).map_err(|source| Error::Input {
        path: input.to_path_buf(),
        source,
    })?;
    for w in &plan.warnings {
        tracing::warn!("{w}");
    }
    if plan.jobs.is_empty() {
        return Err(Error::Empty(input.to_path_buf()));
    }
    let choice: Choice = compute::select(cfg.compute.backend)?;
    tracing::info!(
        "Found {} WAV files in {} split(s) with {} label(s); compute backend {:?}: {}.",
        plan.jobs.len(),
        plan.splits.len(),
        plan.label_names.len(),
        choice.backend,
        choice.reason
    );

    std::fs::create_dir_all(out).map_err(|source| Error::Output {
        path: out.to_path_buf(),
        source,
    })?;
    let writer = DatasetWriter::create(output_plan(out, input, cfg, &plan))?;

    let jobs: Arc<[Job]> = plan.jobs.into();
    let telemetry = opts.telemetry.clone().unwrap_or_default();
    let loaded = Arc::new(Ring::<Loaded>::new(cfg.io.queue_depth));
    let outcomes = Arc::new(Ring::<Outcome>::new(cfg.compute.queue_depth));
    let free_bytes = Arc::new(ArrayQueue::new(
        cfg.io.queue_depth + cfg.compute.workers + 1,
    ));
    let free_rows = Arc::new(ArrayQueue::new(
        cfg.compute.queue_depth + cfg.compute.workers + cfg.output.chunk_files,
    ));
    let mel_plan = Arc::new(Plan::new(&cfg.spec));

    // Near the GPU's PCIe root when the CUDA backend runs.
    let gpu = (choice.backend == Backend::Cuda)
        .then(cuda::probe)
        .transpose()
        .map_err(|why| Error::Backend(compute::Error::CudaUnavailable(why)))?;
    let placement = place_threads(cfg, gpu.as_ref().map(|g| g.pci_bus_id.as_str()));
    tracing::info!("{placement}");
    let (readers, engine, arena) = start_readers(
        cfg,
        &placement.readers,
        Arc::clone(&jobs),
        Arc::clone(&loaded),
        Arc::clone(&free_bytes),
        Arc::clone(&telemetry),
    )?;
    let compute = if choice.backend == Backend::Cuda {
        let gpu =
            cuda::probe().map_err(|why| Error::Backend(compute::Error::CudaUnavailable(why)))?;
        let opts = cuda::CudaOptions {
            batch_files: cfg.compute.batch_files,
            ..cuda::CudaOptions::default()
        };
        let wiring = cuda::CudaWiring {
            input: Arc::clone(&loaded),
            output: Arc::clone(&outcomes),
            free_bytes,
            free_rows: Arc::clone(&free_rows),
            telemetry: Arc::clone(&telemetry),
            arena,
        };
        match cuda::start_cuda_workers(mel_plan, gpu, opts, wiring) {
            Ok(w) => Compute::Cuda(w),
            Err(e) => {
                // Unblock the readers before reporting.
                loaded.close();
                let _ = readers.join();
                return Err(Error::Cuda(e));
            }
        }
    } else {
        Compute::Cpu(
            cpu::Workers::start(
                mel_plan,
                &placement.workers,
                cpu::Wiring {
                    input: Arc::clone(&loaded),
                    output: Arc::clone(&outcomes),
                    free_bytes,
                    free_rows: Arc::clone(&free_rows),
                    telemetry: Arc::clone(&telemetry),
                },
            )
            .map_err(Error::Spawn)?,
        )
    };
    let writer_thread = {
        let (jobs, loaded, outcomes, telemetry) = (
            Arc::clone(&jobs),
            Arc::clone(&loaded),
            Arc::clone(&outcomes),
            Arc::clone(&telemetry),
        );
        std::thread::Builder::new()
            .name("writer".into())
            .spawn(move || {
                let r = write_all(writer, &jobs, &outcomes, &free_rows, &telemetry);
                if r.is_err() {
                    // Stop everything upstream: their pushes now fail.
                    outcomes.close();
                    loaded.close();
                }
                r
            })
            .map_err(Error::Spawn)?
    };

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
        .map_err(|_| Error::Panic("the writer thread panicked".into()))?;
    let cuda_report = match compute {
        Compute::Cpu(w) => {
            w.join().map_err(Error::Panic)?;
            None
        }
        Compute::Cuda(w) => Some(w.join().map_err(Error::Panic)?),
    };
    readers.join().map_err(Error::Panic)?;
    let (write_report, rejected) = written?;

    let rejected_log = out.join("rejected.jsonl");
    write_rejections(&rejected_log, &rejected).map_err(|source| Error::Output {
        path: rejected_log.clone(),
        source,
    })?;
    let report = telemetry.report(
        started.elapsed(),
        vec![("loaded", loaded.stats()), ("features", outcomes.stats())],
    );
    Ok(Outcomes {
        engine: format!("{engine:?}").to_lowercase(),
        cuda: cuda_report,
        backend: format!("{:?}", choice.backend).to_lowercase(),
        backend_reason: choice.reason,
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
