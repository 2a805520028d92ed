//! `build`: a sorted walk of INPUT through the stage graph into one HDF5 file
//! per split.
//!
//! The command supplies the two ends of [`crate::pipeline`]: its source is a
//! thread that pushes the walk's jobs in sorted order and then drops its
//! producer guard (ending the stream); its sink is a [`DatasetWriter`] on one
//! writer thread (the only thread that calls HDF5), which reorders rows into
//! sorted path order. The calling thread shows progress
//! ([`crate::app::progress`]). A writer failure aborts the graph, so every
//! stage stops; the error is returned after all threads are joined. So does
//! a stopping signal ([`crate::app::interrupt`]): the graph is aborted, the
//! writer is dropped without `finish` (deleting its `.partial` files), files
//! already finished are deleted, and [`Error::Interrupted`] is returned.
//!
//! A GPU that fails mid-build (the CUDA stage answers [`Reject::Device`])
//! is not the files' fault and its leftovers cannot be trusted to drain (a
//! failed copy's host buffers are never handed back to the readers), so the
//! writer aborts the graph at the first such answer and nothing is kept.
//! Under `compute.backend = "auto"` the build then runs again, whole, on
//! the CPU (the report's `backend_reason` says why), as it does when the
//! CUDA stage fails to start; under `"cuda"` it fails with
//! [`Error::GpuFailed`]. Before, the graph went on rejecting every
//! later file, and stalled for good once the readers' arena was held by
//! the failed batches.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::app::interrupt::{self, Stopped};
use crate::app::merge::shard::{SHARD_ATTR, Shard};
use crate::app::metrics::{self, Endpoint};
use crate::app::progress::{Progress, Reporter};
use crate::compute::{self, Rejection, cuda};
use crate::config::{Backend, Config};
use crate::frames::{FrameRecipe, RowLayout};
use crate::pipeline::{self, Pipeline};
use crate::plan::manifest::SpillDir;
use crate::plan::{Job, Plan, tree};
use crate::reader::{ReadJob, cache};
use crate::runtime::telemetry::{Report, Telemetry};
use crate::runtime::window::Window;
use crate::writer::{self, DatasetWriter, OutputPlan, PlannedFile, SplitPlan, WriteReport};

mod lhotse;
mod rejections;
mod write;
mod write_back;
use crate::plan::input::{self as planner, Items, LeftOut};
pub use crate::plan::input::{Input, PlanReport};
use crate::plan::spool::Spooled;
use rejections::{add_walk_rejections, rejected_log_name, report, walk_rejection};
use write::spawn_writer;

/// A fatal problem: the run cannot complete.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read input directory {path}: {source}")]
    Input {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "no audio files found under {0} (input.extensions names the extensions a tree's files \
         are taken by)"
    )]
    Empty(PathBuf),
    #[error(transparent)]
    Plan(#[from] crate::plan::input::Error),
    #[error(transparent)]
    Stored(#[from] crate::plan::Error),
    #[error("cannot write the manifest back to {0}: it is an input manifest")]
    WriteBackOverInput(PathBuf),
    #[error("cannot give {path} its lhotse views: {source}")]
    Views {
        path: PathBuf,
        source: writer::vds::ViewsError,
    },
    #[error("cannot write the lhotse cuts {path}: {source}")]
    Cuts {
        path: PathBuf,
        source: lhotse::CutError,
    },
    #[error(
        "output.lhotse (--lhotse) writes cuts for lhotse CutSet manifests; {0} is not one (a \
         tree, a NeMo manifest, a stored corpus or NeMo tarred audio)"
    )]
    LhotseInput(PathBuf),
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
    #[error(transparent)]
    Interrupted(#[from] Stopped),
    #[error(
        "the GPU failed during the build ({0}); nothing was written. compute.backend = \"cuda\" \
         requires the GPU (\"auto\" builds again on the CPU)"
    )]
    GpuFailed(cuda::Cause),
}

/// Run-time options that are not pipeline settings.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The progress display (the CLI draws a bar on a TTY).
    pub progress: Progress,
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
    /// The mean size of the inputs `io.direct = "auto"` sampled, which sized
    /// the read arena; null when nothing was sampled.
    pub typical_file_bytes: Option<u64>,
    /// The read arena's size (`io.arena_bytes`, or sized from the files in
    /// flight); null with the std engine, which has none.
    pub arena_bytes: Option<u64>,
    /// Seconds each start-up step took (walk, device, arena, kernels; they
    /// overlap) and from process start to the first read.
    pub startup_s: pipeline::Startup,
    pub outputs: Vec<OutputFile>,
    /// Every rejection, but of the manifest lines planning left out only
    /// the first [`crate::plan::spool::SAMPLE`] (every one is in
    /// `rejected_log`; `report.files_rejected` counts them all), in the
    /// log's order.
    pub rejected: Vec<Rejection>,
    /// The lines planning left out, in their file until [`report`] merges
    /// them into `rejected_log`.
    #[serde(skip)]
    pub spooled: Option<Spooled>,
    pub rejected_log: PathBuf,
    /// The manifests written back (`OUT/<split>.jsonl`), for a manifest build.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub manifests: Vec<PathBuf>,
    /// The lhotse cuts written (`OUT/<split>.cuts.jsonl.gz`), with
    /// `output.lhotse`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cuts: Vec<PathBuf>,
    /// What planning read and spilled, for a manifest or stored-corpus
    /// build (the readers' bytes are `report.bytes_read`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planned: Option<PlanReport>,
    pub report: Report,
    /// The rows each split's writer wrote (a manifest build's write-back).
    #[serde(skip)]
    kept: Vec<Vec<writer::meta::Kept>>,
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
    (cfg, layout): (&Config, &RowLayout),
    plan: &Plan,
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
        layout: layout.clone(),
        dtype: cfg.output.dtype,
        chunk_files: cfg.output.chunk_files,
        extra_attrs,
    }
}

/// Runs a whole build of `input` into `out`.
pub fn build(input: &Path, out: &Path, cfg: &Config, opts: &Options) -> Result<Outcomes, Error> {
    build_shard(input, out, cfg, opts, None)
}

/// [`build_input`] of a directory (a tree walk) or one manifest.
pub fn build_shard(
    input: &Path,
    out: &Path,
    cfg: &Config,
    opts: &Options,
    shard: Option<Shard>,
) -> Result<Outcomes, Error> {
    build_input(&Input::of(&[input.to_path_buf()]), out, cfg, opts, shard)
}

/// Runs a build of `input` into `out`, or with `shard` only that shard's share
/// of the sorted walk or of each manifest's lines (rule in
/// [`crate::app::merge::shard`]) into `<split>.shard-K-of-N.h5` and
/// `rejected.shard-K-of-N.jsonl` (and a manifest's
/// `<split>.shard-K-of-N.jsonl`), with the label table and split list of the
/// whole input. A shard whose share is empty still writes every split's file
/// (zero rows) and an empty rejection log.
///
/// Four steps: [`plan`] (the walk, beside the backend probe), [`start`]
/// (readers, source and writer threads, then the compute stage beside the
/// first reads), [`supervise`] (progress until the writer is done, then every
/// thread joined) and [`report`] (`rejected.jsonl`, the outcomes).
pub fn build_input(
    input: &Input,
    out: &Path,
    cfg: &Config,
    opts: &Options,
    shard: Option<Shard>,
) -> Result<Outcomes, Error> {
    let started = Instant::now();
    // The device probe (0.5–1.5 s with a GPU) and hwloc's topology discovery
    // run while the tree is walked.
    let probe = compute::Probe::spawn(cfg.compute.backend);
    crate::runtime::pin::discover_in_background(compute::may_use_gpu(cfg.compute.backend));
    // Held until the build ends: dropping it removes the spill folder.
    if cfg.output.lhotse {
        match input {
            Input::Manifests(files) => {
                let limits = planner::limits(cfg);
                if let Some(nemo) = files
                    .iter()
                    .find(|f| crate::plan::manifest::starts_with_nemo(f, limits))
                {
                    return Err(Error::LhotseInput(nemo.clone()));
                }
            }
            Input::Tarred { manifests, .. } => {
                return Err(Error::LhotseInput(manifests[0].clone()));
            }
            Input::Tree(dir) => return Err(Error::LhotseInput(dir.clone())),
            Input::Stored(sets) => {
                return Err(Error::LhotseInput(sets[0].pattern.clone().into()));
            }
        }
    }
    let spill = planner::spill_dir(input, out, cfg.input.spill_max_mib, shard);
    let planned = plan(input, out, cfg, (shard, spill.as_ref()))?;
    // lhotse's cuts describe the recipe's rows (config allows only Kaldi).
    let cuts = match (planned.recipe.layout(), cfg.output.lhotse) {
        (RowLayout::Frames(l), true) => Some(lhotse::Cuts::new(l)),
        _ => None,
    };
    // The write-back names each row's line from the first plan's items (a
    // run again on the CPU plans the same lines).
    let items = planned.items.clone();
    // librosa's fixed rows all have the clip's frames (the writer records 0).
    let fixed_frames = match planned.recipe.layout() {
        RowLayout::Fixed(spec) => Some(spec.row_shape()[3] as u32),
        RowLayout::Frames(_) => None,
    };
    let attempt =
        start(planned, cfg, opts, probe, started).and_then(|r| supervise(r, opts, started));
    let outcomes = match attempt {
        Err(e) if cfg.compute.backend == Backend::Auto => match gpu_failure(&e) {
            Some(why) => {
                let again = (shard, spill.as_ref());
                again_on_the_cpu(input, out, cfg, opts, again, &why, started)?
            }
            None => return Err(e),
        },
        r => r?,
    };
    let mut outcomes = report(outcomes, out, shard)?;
    outcomes.planned = items.as_ref().map(|i| i.planned);
    write_back::write_back(
        outcomes,
        input,
        out,
        (fixed_frames, shard),
        items.as_deref(),
        cuts.as_ref(),
    )
}

/// What the GPU said, when a GPU failure is what stopped the build: at the
/// CUDA stage's start (its memory taken by another process, kernels that do
/// not load) or during the run.
fn gpu_failure(e: &Error) -> Option<String> {
    match e {
        Error::GpuFailed(why) => Some(why.to_string()),
        Error::Pipeline(pipeline::Error::Backend(compute::Error::Cuda(c))) => Some(c.to_string()),
        _ => None,
    }
}

/// The whole build again on the CPU, after the GPU failed under `auto`
/// (the failed attempt kept nothing; see the module doc).
fn again_on_the_cpu(
    input: &Input,
    out: &Path,
    cfg: &Config,
    opts: &Options,
    (shard, spill): (Option<Shard>, Option<&SpillDir>),
    why: &str,
    started: Instant,
) -> Result<Outcomes, Error> {
    tracing::warn!(
        error = why,
        "The GPU failed during the build; building every file again on the CPU."
    );
    if let Some(t) = &opts.telemetry {
        t.reset(); // the failed attempt's counts
    }
    let probe = compute::Probe::decided(compute::Choice::cpu(format!(
        "compute.backend = \"auto\": the GPU failed during this build ({why}), so it ran again \
         on the CPU"
    )));
    let planned = plan(input, out, cfg, (shard, spill))?;
    let running = start(planned, cfg, opts, probe, started)?;
    supervise(running, opts, started)
}

/// What [`plan`] settled before any read: the walk's jobs and open paths, the
/// rejections the walk found, the writer with its files created, and the
/// recipe, built once for the run (the writer's layout, the planner's first
/// seconds and the compute stage all take this one).
struct Planned {
    recipe: Arc<dyn FrameRecipe>,
    jobs: Vec<Job>,
    /// What a manifest build's items carry beyond the plan.
    items: Option<Arc<Items>>,
    /// The walk's plan (its jobs moved out): opens paths, holds the names.
    open: Plan,
    walk_rejected: LeftOut,
    writer: DatasetWriter,
    walk_s: f64,
}

/// The walk (and this shard's share of it), the rejections it found, the
/// output plan and the writer's `.partial` files; a manifest build's
/// spills go into `spill`.
fn plan(
    input: &Input,
    out: &Path,
    cfg: &Config,
    (shard, spill): (Option<Shard>, Option<&SpillDir>),
) -> Result<Planned, Error> {
    let recipe = crate::recipes::build(cfg).map_err(pipeline::Error::from)?;
    let layout = recipe.layout();
    // A manifest build writes the lines it leaves out as it finds them.
    let spool_at = out.join(format!("{}.planning.partial", rejected_log_name(shard)));
    let spool = match input {
        Input::Manifests(_) | Input::Tarred { .. } => {
            create_out(out)?;
            Some(spool_at.as_path())
        }
        Input::Tree(_) | Input::Stored(_) => None,
    };
    let (mut plan, walk_rejected, walk_s, items) = match input {
        Input::Tree(dir) => {
            let (plan, rejected, s) = walk(dir, cfg, shard)?;
            (plan, rejected.into(), s, None)
        }
        Input::Manifests(files) => planner::read(
            files,
            (shard, spill, spool),
            cfg,
            planner::first_seconds(layout, cfg),
        )?,
        Input::Tarred { manifests, shards } => {
            planner::read_tarred(manifests, shards, (shard, spool), cfg)?
        }
        Input::Stored(sets) => {
            planner::read_stored(sets, shard, spill, Some(&cfg.input.audio_column))?
        }
    };
    create_out(out)?;
    let output = output_plan(out, input.shown(), (cfg, layout), &plan, shard);
    let mut writer = match shard {
        Some(s) => DatasetWriter::create_named(output, |split| s.split_file_name(split))?,
        None => DatasetWriter::create(output)?,
    };
    if let Some(items) = &items {
        writer = writer.with_meta(writer::meta::RowMeta {
            json: Arc::clone(items.meta()),
            lines: items.lines().cloned(),
        });
    }
    let jobs = std::mem::take(&mut plan.jobs);
    Ok(Planned {
        recipe,
        jobs,
        items,
        open: plan,
        walk_rejected,
        writer,
        walk_s,
    })
}

/// Creates the output directory.
fn create_out(out: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(out).map_err(|source| Error::Output {
        path: out.to_path_buf(),
        source,
    })
}

/// The sorted walk of `input` (this shard's share of it), the rejections it
/// found, and its seconds. An empty walk, or a stop during it, is an error.
fn walk(
    input: &Path,
    cfg: &Config,
    shard: Option<Shard>,
) -> Result<(Plan, Vec<Rejection>, f64), Error> {
    let t = Instant::now();
    let plan = tree::scan_with(input, &cfg.input.extensions).map_err(|source| Error::Input {
        path: input.to_path_buf(),
        source,
    })?;
    let walk_s = t.elapsed().as_secs_f64();
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
    interrupt::checkpoint("walked");
    if let Some(s) = Stopped::check(0, plan.jobs.len() as u64, "files") {
        return Err(s.into());
    }
    let plan = shard_of(plan, shard);
    tracing::info!(
        files = plan.jobs.len(),
        splits = plan.splits.len(),
        labels = plan.label_names.len(),
        input = %input.display(),
        seconds = walk_s,
        "Found the files to build."
    );
    Ok((plan, walk_rejected, walk_s))
}

/// This shard's share of the walk (rule in [`crate::app::merge::shard`]),
/// or the whole walk.
fn shard_of(plan: Plan, shard: Option<Shard>) -> Plan {
    match shard {
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
    }
}

/// What the writer thread ends with: its report, why it stopped early, or
/// the writer's error.
type Written = Result<Result<(WriteReport, Vec<Rejection>), Halt>, writer::Error>;

/// Why the writer stopped before the last file (dropping its `.partial`
/// files either way).
enum Halt {
    /// A stopping signal.
    Signal,
    /// The CUDA stage answered that the device failed.
    Gpu(Arc<cuda::Cause>),
}

/// A build whose threads run.
struct Running {
    p: Arc<Pipeline>,
    jobs: Arc<Vec<Job>>,
    source: std::thread::JoinHandle<()>,
    writer: std::thread::JoinHandle<Written>,
    endpoint: Option<Endpoint>,
    read_mode: cache::ReadMode,
    walk_rejected: LeftOut,
    walk_s: f64,
}

/// Starts the readers (without waiting for the backend probe), the source and
/// the writer threads, so the first reads go out at once; then the compute
/// stage, whose start (CUDA: kernels, context, arena registration) overlaps
/// those reads. A failure stops whatever already runs.
fn start(
    planned: Planned,
    cfg: &Config,
    opts: &Options,
    mut probe: compute::Probe,
    started: Instant,
) -> Result<Running, Error> {
    let Planned {
        recipe,
        jobs,
        items,
        open,
        walk_rejected,
        writer,
        walk_s,
    } = planned;
    let telemetry = opts.telemetry.clone().unwrap_or_default();
    // Queue far ahead of the readers (the ring wakes the source once per
    // half ring, so hand-overs are rare), but not the whole walk: each queued
    // job holds its path, and a build's memory must not grow with its size.
    let queue_ahead = jobs.len().min(4096);
    let read_mode = choose_read_mode(cfg, &jobs, &open);
    let p = Arc::new(Pipeline::start_reading(
        (cfg, recipe, &read_mode),
        &mut probe,
        telemetry,
        queue_ahead,
    )?);
    let open = Arc::new(open);
    let jobs = Arc::new(jobs);
    let window = reorder_window(cfg);
    let source = spawn_source(&p, &jobs, (Arc::clone(&open), items.clone()), &window);
    let source = source.inspect_err(|_| p.abort())?;
    let writer = spawn_writer(&p, &jobs, (open, items), writer, &window);
    let writer = match writer {
        Ok(w) => w,
        Err(e) => {
            p.abort();
            let _ = source.join();
            return Err(e);
        }
    };
    let running = Running {
        p,
        jobs,
        source,
        writer,
        endpoint: None,
        read_mode,
        walk_rejected,
        walk_s,
    };
    start_compute(running, cfg, probe, started)
}

/// `io.direct = "auto"` is settled here, where the inputs are known: the
/// read mode the readers start with, and the inputs' typical size the arena
/// is sized by. What the run finds out lives in this value, beside the
/// config, which never changes after validation.
fn choose_read_mode(cfg: &Config, jobs: &[Job], open: &Plan) -> cache::ReadMode {
    let read_mode = cache::choose(cfg.io.direct, jobs.len(), |i| open.open_path(&jobs[i]));
    tracing::info!(
        direct = read_mode.direct,
        reason = %read_mode.reason,
        typical_file_bytes = read_mode.typical_bytes,
        "Read mode chosen."
    );
    read_mode
}

/// The writer holds rows that arrive before their predecessors; the window
/// bounds how many (`runtime::window`): twice what the stages hold (reads
/// in flight and loaded per reader, the CPU workers' files or two CUDA
/// batches — the larger while the backend is still being chosen — and the
/// rows queued for the writer).
fn reorder_window(cfg: &Config) -> Arc<Window> {
    let computing = cfg.compute.workers.max(2 * cfg.compute.batch_files);
    Arc::new(Window::new(
        2 * (2 * cfg.io.queue_depth * cfg.io.threads.max(1) + computing + cfg.compute.queue_depth),
    ))
}

/// The compute stage (the backend the probe chose), beside the first reads,
/// then the `[metrics] listen` endpoint. A failure stops the readers, source
/// and writer of `running` before it is returned.
fn start_compute(
    mut running: Running,
    cfg: &Config,
    probe: compute::Probe,
    started: Instant,
) -> Result<Running, Error> {
    let compute = running.p.start_compute(probe).map_err(Error::from);
    // `[metrics] listen`: scrapes read the graph's published telemetry.
    let endpoint = compute.and_then(|()| match cfg.metrics.listen {
        None => Ok(None),
        Some(addr) => Endpoint::start(
            addr,
            metrics::from_pipeline(Arc::clone(&running.p), started),
        )
        .map(Some)
        .map_err(Error::from),
    });
    match endpoint {
        Ok(e) => {
            running.endpoint = e;
            Ok(running)
        }
        Err(e) => {
            // Stop the readers, source and writer (its `.partial` files are
            // deleted when it drops unfinished), then report the cause.
            running.p.abort();
            let _ = running.writer.join();
            let _ = running.source.join();
            if let Some(p) = Arc::into_inner(running.p) {
                let _ = p.join();
            }
            Err(e)
        }
    }
}

/// The source: the sorted walk, then the end of the stream (guard dropped).
fn spawn_source(
    p: &Pipeline,
    jobs: &Arc<Vec<Job>>,
    (open, items): (Arc<Plan>, Option<Arc<Items>>),
    window: &Arc<Window>,
) -> Result<std::thread::JoinHandle<()>, Error> {
    let (feed, jobs) = (p.jobs().producer(), Arc::clone(jobs));
    let window = Arc::clone(window);
    std::thread::Builder::new()
        .name("source".into())
        .spawn(move || {
            for (id, j) in jobs.iter().enumerate() {
                if !window.admit(id) {
                    return; // the writer stopped
                }
                let mut job = ReadJob::whole(id, open.open_path(j));
                if let Some(items) = &items {
                    items.describe(j, &mut job);
                }
                if feed.push(job).is_err() {
                    return; // the graph was aborted
                }
            }
        })
        .map_err(|e| Error::Spawn("source", e))
}

/// Shows progress until the writer is done, then joins every thread and
/// gathers the outcomes (the writer's error, if any, after the stages'; the
/// rejection log's path is [`report`]'s to fill in).
fn supervise(running: Running, opts: &Options, started: Instant) -> Result<Outcomes, Error> {
    let Running {
        p,
        jobs,
        source,
        writer,
        endpoint,
        read_mode,
        walk_rejected,
        walk_s,
    } = running;
    let telemetry = Arc::clone(p.telemetry());
    show_progress(&p, &writer, opts, jobs.len() as u64, started);
    let written = writer.join().map_err(|_| Error::Panicked("writer"))?;
    source.join().map_err(|_| Error::Panicked("source"))?;
    drop(endpoint); // joins the metrics thread, which holds the pipeline
    let p = Arc::into_inner(p).expect("every thread holding the pipeline has been joined");
    let mut report = p.report(started);
    let shape = p.shape().clone();
    let startup = pipeline::Startup {
        walk: walk_s,
        ..p.startup()
    };
    let arena_bytes = p.arena_bytes();
    let cuda_report = p.join();
    // Before the stage's own error: the same failure, said for a build.
    if let Ok(Err(Halt::Gpu(why))) = &written {
        return Err(Error::GpuFailed(cuda::Cause::clone(why)));
    }
    let cuda_report = cuda_report?;
    // A stop: nothing stays, whether the writer finished or not.
    let total = jobs.len() as u64;
    let stopped = |outputs: Vec<PathBuf>| {
        let s = Stopped::check(telemetry.files_done(), total, "files")?;
        interrupt::discard(crate::cmvn::files::with_beside(outputs));
        Some(s)
    };
    let (write_report, mut rejected) = match written? {
        Ok(w) => w,
        Err(Halt::Signal | Halt::Gpu(_)) => {
            return Err(stopped(Vec::new())
                .expect("the writer stops only on a signal")
                .into());
        }
    };
    let finished = || write_report.files.iter().map(|f| f.1.clone()).collect();
    let kept = write_report.kept;
    if let Some(s) = stopped(finished()) {
        return Err(s.into());
    }
    let spooled = add_walk_rejections(&mut report, &mut rejected, walk_rejected);
    Ok(Outcomes {
        engine: shape.engine,
        cuda: cuda_report,
        backend: shape.backend,
        backend_reason: shape.backend_reason,
        direct: read_mode.direct,
        direct_reason: read_mode.reason,
        typical_file_bytes: read_mode.typical_bytes,
        arena_bytes,
        startup_s: startup,
        outputs: write_report
            .files
            .into_iter()
            .map(|(split, path, rows)| OutputFile { split, path, rows })
            .collect(),
        rejected,
        spooled,
        rejected_log: PathBuf::new(),
        manifests: Vec::new(),
        cuts: Vec::new(),
        planned: None,
        report,
        kept,
    })
}

/// The progress display until the writer is done; a signal aborts the graph.
fn show_progress(
    p: &Pipeline,
    writer: &std::thread::JoinHandle<Written>,
    opts: &Options,
    total: u64,
    started: Instant,
) {
    let telemetry = p.telemetry();
    let mut progress = Reporter::start(opts.progress, total, started);
    while !writer.is_finished() {
        progress.tick(telemetry);
        if interrupt::requested().is_some() {
            p.abort();
        }
        std::thread::sleep(progress.poll_interval());
    }
    progress.finish(telemetry);
}
