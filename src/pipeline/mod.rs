//! The stage graph: the one wiring that `build`, `serve` and serve's
//! `rebuild` run. A command supplies only its source (which pushes
//! [`ReadJob`]s) and its sink (a [`Sink`] fed through [`deliver`]).
//!
//! ```text
//! source ──ReadJob──▶ readers ──Loaded──▶ compute ──Outcome──▶ sink
//! (command's)  jobs    io_uring | std  loaded  cpu workers | outcomes (command's)
//!              ring    io.pin placed   ring    cuda stage    ring
//!                         ▲                     │   ▲                │
//!                         └── arena extents / ──┘   └── free rows ───┘
//!                             heap buffers
//! ```
//!
//! The graph starts in two steps, so reads never wait for the GPU:
//! [`Pipeline::start_reading`] makes the reader's choices (io_uring after its
//! probe, or plain reads where `io.fallback` allows; `io.threads` readers,
//! `"auto"`: one per 8 cores, 2 to 4), places them (hwloc; `io.pin` overrides), sizes
//! the rings and the arena and starts the readers, whatever the backend probe
//! ([`Probe`], on its own thread) has found so far; [`Pipeline::start_compute`]
//! joins the probe ([`compute::select`]: CPU workers or the CUDA stage, and the
//! sentence that says why), places the workers (near the GPU's PCIe root when
//! one runs; `compute.pin` overrides) and starts them on what the readers
//! already loaded. [`Pipeline::start`] does both at once (serve);
//! [`Pipeline::startup`] says how long each step took. The source ends its stream by dropping
//! its producer guard of [`Pipeline::jobs`] (or by [`Pipeline::close`]); each
//! stage's last thread closes the ring after it, so the sink sees the end of
//! the outcome ring once everything upstream has drained. A failing sink calls
//! [`Pipeline::abort`]: every ring closes, every push upstream fails, every
//! thread exits, and [`Pipeline::join`] returns.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use crossbeam_queue::ArrayQueue;
use serde::{Deserialize, Serialize};

use crate::compute::{self, ComputeStage, Outcome, Probe, Wiring, cuda};
use crate::config::{Config, Engine};
use crate::frames::FrameRecipe;
use crate::long::Streamer;
use crate::reader::cache::{self, ReadMode};
use crate::reader::{self, Loaded, ReadJob, ReaderStage};
use crate::runtime::pin::{self, PinPolicy, Placement};
use crate::runtime::ring::{Ring, RingStats};
use crate::runtime::telemetry::Telemetry;
use crate::writer;

mod arena;
mod deliver;

pub use arena::{Sampled, arena_bytes};
pub use deliver::{Delivered, Delivery, LongFile, deliver, too_large};

/// Why the stage graph could not start or did not end cleanly.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Backend(#[from] compute::Error),
    #[error("cannot start the reader: {0}")]
    Reader(#[from] reader::stage::StartError),
    #[error("a reader thread panicked")]
    ReaderPanicked,
    #[error("the compute stage was started twice")]
    ComputeStarted,
    #[error(transparent)]
    Recipe(#[from] crate::recipes::Error),
}

/// The guarded value, also after a thread panicked holding the lock (the
/// values guarded here are plain data, valid at every step).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A ring's name and current depth, for status displays.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RingDepth {
    pub name: String,
    pub depth: usize,
    pub capacity: usize,
}

/// What the running graph is made of, for logs, status and reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Shape {
    /// "cpu" or "cuda".
    pub backend: String,
    /// Why that backend runs (e.g. "auto: libcuda.so.1 not found (no NVIDIA
    /// driver), so the CPU backend is used").
    pub backend_reason: String,
    /// "uring" or "std".
    pub engine: String,
    pub readers: usize,
    /// CPU workers (0 when the CUDA stage computes).
    pub workers: usize,
}

/// How long each start-up step took, in seconds (`build --json`'s
/// `startup_s`). The device probe runs beside the walk and the kernels beside
/// the first reads, so the parts overlap: `first_read` (from process start to
/// the first read submitted) is what a user waits for.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Startup {
    /// The sorted walk of the input (build only).
    pub walk: f64,
    /// The backend choice (`compute::select`: libcuda, `cuInit`, a test open
    /// of the device), on its own thread.
    pub device: f64,
    /// Readers started: arena mapped and registered with io_uring (pinned).
    pub arena: f64,
    /// The compute stage started: CPU workers, or the CUDA stage's kernels,
    /// context, graph and arena registration (beside the first reads).
    pub kernels: f64,
    /// From process start to the first read submitted.
    pub first_read: Option<f64>,
}

impl std::fmt::Display for Startup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "start-up: walk {:.3} s, device {:.3} s, arena {:.3} s, kernels {:.3} s (overlapping)",
            self.walk, self.device, self.arena, self.kernels
        )?;
        match self.first_read {
            Some(s) => writeln!(f, "; first read {:.3} s after process start", s),
            None => writeln!(f, "; no read"),
        }
    }
}

/// The compute stage's start, held between [`Pipeline::start_reading`] and
/// [`Pipeline::start_compute`].
struct PendingCompute {
    cfg: Config,
    wiring: Wiring,
    /// Every file is decoded or resampled on the host (`auto` weighs it).
    host_decode: bool,
}

/// A running stage graph.
pub struct Pipeline {
    jobs: Arc<Ring<ReadJob>>,
    loaded: Arc<Ring<Loaded>>,
    outcomes: Arc<Ring<Outcome>>,
    free_rows: Arc<ArrayQueue<Vec<f32>>>,
    readers: ReaderStage,
    /// Until [`Pipeline::start_compute`]: what it needs.
    pending: Mutex<Option<PendingCompute>>,
    /// From [`Pipeline::start_compute`] on: the compute stage.
    compute: Mutex<Option<ComputeStage>>,
    /// The shape while only the readers run (backend "pending").
    reading: Shape,
    shape: OnceLock<Shape>,
    startup: Mutex<Startup>,
    telemetry: Arc<Telemetry>,
    /// The run's recipe, built once: what a serve sink's layout is taken
    /// from.
    recipe: Arc<dyn FrameRecipe>,
    /// Computes the rows of files too large to read whole, in pieces
    /// (Kaldi recipes; `crate::long`).
    streamer: Option<Streamer>,
}

/// Thread placement: hwloc's plan for both roles (near the GPU when one
/// runs), with an explicit `io.pin` or `compute.pin` overriding its role.
///
/// With neither role on `auto`, hwloc's plan is not made at all.
fn place_threads(cfg: &Config, workers: usize, gpu_pci_bus_id: Option<&str>) -> Placement {
    let auto = cfg.io.pin == PinPolicy::Auto || cfg.compute.pin == PinPolicy::Auto;
    let mut placement = match auto {
        true => pin::plan(&PinPolicy::Auto, cfg.io.threads, workers, gpu_pci_bus_id),
        false => pin::plan(&PinPolicy::Off, cfg.io.threads, workers, None),
    };
    if cfg.io.pin != PinPolicy::Auto {
        placement.readers = pin::plan(&cfg.io.pin, cfg.io.threads, 0, None).readers;
    }
    if cfg.compute.pin != PinPolicy::Auto {
        placement.workers = pin::plan(&cfg.compute.pin, 0, workers, None).workers;
    }
    placement
}

/// Whether every input is decoded or resampled on the host, whichever
/// backend computes (`compute::for_recipe` weighs it).
fn host_decode(cfg: &Config, read: &ReadMode) -> bool {
    read.compressed || cfg.input.policy.resample != crate::decode::policy::Resample::Off
}

/// The rings and free lists of a stage graph.
struct Rings {
    jobs: Arc<Ring<ReadJob>>,
    loaded: Arc<Ring<Loaded>>,
    outcomes: Arc<Ring<Outcome>>,
    free_bytes: Arc<ArrayQueue<Vec<u8>>>,
    free_rows: Arc<ArrayQueue<Vec<f32>>>,
}

impl Rings {
    /// Sized by `cfg`; `queue_ahead` jobs may wait for a reader (0: a live
    /// source).
    fn new(cfg: &Config, queue_ahead: usize) -> Rings {
        let ahead = queue_ahead.max(cfg.io.queue_depth * 4);
        // A source that queues ahead is woken once a quarter of its queue is
        // free, not per job; a live one (serve, `queue_ahead` 0) hands a lone
        // file to an idle reader at once.
        let batch = if queue_ahead > 0 { ahead / 4 } else { 1 };
        // Every ring and free list holds at least one item, or a stage
        // would block on its first hand-over for good.
        assert!(ahead >= 1 && cfg.io.queue_depth >= 1 && cfg.compute.queue_depth >= 1);
        // Wake batches: compute and the writer share cores with the readers,
        // so hand-overs go in runs (see `runtime::ring`).
        Rings {
            jobs: Arc::new(Ring::with_wake_batch(ahead, batch)),
            loaded: Arc::new(Ring::with_wake_batch(
                cfg.io.queue_depth,
                cfg.io.queue_depth / 4,
            )),
            outcomes: Arc::new(Ring::with_wake_batch(
                cfg.compute.queue_depth,
                cfg.output.chunk_files.min(cfg.compute.queue_depth / 4),
            )),
            free_bytes: Arc::new(ArrayQueue::new(
                cfg.io.queue_depth + cfg.compute.workers + 1,
            )),
            free_rows: Arc::new(ArrayQueue::new(
                cfg.compute.queue_depth + cfg.compute.workers + cfg.output.chunk_files,
            )),
        }
    }
}

/// The readers' arena size and CPUs, from the backend choice when the probe
/// already made it: an arena sized for what the backend holds in flight,
/// readers placed beside the workers or near the GPU.
fn reader_sizing(cfg: &Config, read: &ReadMode, probe: &mut Probe) -> (u64, Vec<Option<usize>>) {
    let arena_bytes = |target: &compute::Target| arena_bytes(cfg, target, read.into());
    let cpu_only = || {
        (
            arena_bytes(&compute::Target::Cpu),
            place_threads(cfg, 0, None).readers,
        )
    };
    match probe.peek() {
        Some(Ok(choice)) => {
            let workers = match choice.target {
                compute::Target::Cpu => cfg.compute.workers,
                _ => 0,
            };
            let placement = place_threads(cfg, workers, choice.gpu_pci_bus_id());
            (arena_bytes(&choice.target), placement.readers)
        }
        // The error is start_compute's to report; the readers stop then.
        Some(Err(_)) => cpu_only(),
        // Still probing: without a driver library (found in
        // milliseconds) the CPU runs; with one, either may.
        None if !compute::host_double_requested() && !cuda::driver_present() => cpu_only(),
        None => (
            arena_bytes(&compute::Target::Cpu).max(arena_bytes(&compute::Target::HostDouble)),
            place_threads(cfg, 0, None).readers,
        ),
    }
}

impl Pipeline {
    /// Starts readers and compute for `cfg`, counting into `telemetry`: the
    /// backend is chosen first, on this thread ([`Pipeline::start_reading`]
    /// and [`Pipeline::start_compute`] in one step, for `serve`).
    ///
    /// `queue_ahead` is how many jobs the source may queue ahead of the
    /// readers (at least `4 × io.queue_depth` is used). A source that knows its
    /// whole list (build's walk) should queue far ahead: with a short queue the
    /// source and the readers hand over every few files, and on a 2-core
    /// machine each handover is a context switch taken from compute (measured:
    /// 7% of a 20k-clip build's wall time). A live source (serve) has little
    /// to queue anyway.
    ///
    /// Under `compute.backend = "auto"` a CUDA stage that fails to start
    /// (the GPU's memory taken by another process, kernels that do not load)
    /// is replaced by the CPU backend, the reason naming the error: nothing
    /// was fed to the graph yet, so nothing is lost.
    pub fn start(
        cfg: &Config,
        telemetry: Arc<Telemetry>,
        queue_ahead: usize,
    ) -> Result<Pipeline, Error> {
        // hwloc's discovery beside the probe (0.5–1.5 s with a GPU).
        crate::runtime::pin::discover_in_background(compute::may_use_gpu(cfg.compute.backend));
        let probe = Probe::now(cfg.compute.backend);
        match Pipeline::start_on(cfg, probe, Arc::clone(&telemetry), queue_ahead) {
            Err(Error::Backend(compute::Error::Cuda(e)))
                if cfg.compute.backend == crate::config::Backend::Auto =>
            {
                tracing::warn!(error = %e, "The CUDA stage could not start; using the CPU backend.");
                let cpu = Probe::decided(compute::Choice::cpu(format!(
                    "compute.backend = \"auto\": the CUDA stage could not start ({e}), so the \
                     CPU computes"
                )));
                Pipeline::start_on(cfg, cpu, telemetry, queue_ahead)
            }
            r => r,
        }
    }

    /// [`Pipeline::start`] with the backend chosen by `probe`.
    pub fn start_on(
        cfg: &Config,
        probe: Probe,
        telemetry: Arc<Telemetry>,
        queue_ahead: usize,
    ) -> Result<Pipeline, Error> {
        let recipe = crate::recipes::build(cfg)?;
        Pipeline::start_on_recipe((cfg, recipe), probe, telemetry, queue_ahead)
    }

    /// [`Pipeline::start_on`] with the recipe already built for `cfg` (a
    /// restart on another backend keeps its recipe).
    pub fn start_on_recipe(
        (cfg, recipe): (&Config, Arc<dyn FrameRecipe>),
        mut probe: Probe,
        telemetry: Arc<Telemetry>,
        queue_ahead: usize,
    ) -> Result<Pipeline, Error> {
        // No list of inputs to sample here (serve, a restart on the CPU).
        let read = cache::unsampled(cfg.io.direct);
        let p = Pipeline::start_reading((cfg, recipe, &read), &mut probe, telemetry, queue_ahead)?;
        match p.start_compute(probe) {
            Ok(()) => Ok(p),
            Err(e) => {
                p.abort();
                let _ = p.join();
                Err(e)
            }
        }
    }

    /// Starts the readers (and the rings) without waiting for `probe`: jobs
    /// pushed now are read at once, and the loaded files wait in the ring and
    /// the arena until [`Pipeline::start_compute`] starts the consumer. When
    /// the probe has not answered yet, the arena is sized for either backend
    /// and the readers are placed without the GPU's locality.
    /// `recipe`: the run's recipe, built once by the caller
    /// (`recipes::build`); `read`: the run's read
    /// mode (`reader::cache`), which also sizes the arena by the inputs'
    /// typical size where a build sampled them.
    pub fn start_reading(
        (cfg, recipe, read): (&Config, Arc<dyn FrameRecipe>, &ReadMode),
        probe: &mut Probe,
        telemetry: Arc<Telemetry>,
        queue_ahead: usize,
    ) -> Result<Pipeline, Error> {
        let t = Instant::now();
        let (arena, readers_cpus) = reader_sizing(cfg, read, probe);
        tracing::debug!(seconds = t.elapsed().as_secs_f64(), "Readers placed.");
        let Rings {
            jobs,
            loaded,
            outcomes,
            free_bytes,
            free_rows,
        } = Rings::new(cfg, queue_ahead);
        let readers = ReaderStage::start(
            (&cfg.io, read),
            cfg.io.arena_bytes.unwrap_or(arena),
            &readers_cpus,
            Arc::clone(&jobs),
            &loaded,
            Arc::clone(&free_bytes),
            Arc::clone(&telemetry),
        )?;
        let arena_s = t.elapsed().as_secs_f64();
        let stats = crate::cmvn::Bins::of_layout(recipe.layout(), cfg.output.dtype);
        let wiring = Wiring {
            input: Arc::clone(&loaded),
            output: Arc::clone(&outcomes),
            free_bytes,
            free_rows: Arc::clone(&free_rows),
            telemetry: Arc::clone(&telemetry),
            arena: readers.arena().cloned(),
            policy: cfg.input.policy,
            stats: Some(stats),
            recipe,
        };
        let streamer = Streamer::for_recipe(&wiring.recipe, cfg.input.policy);
        let engine = match readers.engine() {
            Engine::Uring => "uring",
            Engine::Std => "std",
        };
        let reading = Shape {
            backend: "pending".into(),
            backend_reason: "the backend is being chosen".into(),
            engine: engine.to_string(),
            readers: cfg.io.threads.max(1),
            workers: 0,
        };
        tracing::debug!(
            engine,
            readers = reading.readers,
            readers_reason = %cfg.io.threads_reason,
            seconds = arena_s,
            "Readers started."
        );
        Ok(Pipeline {
            jobs,
            loaded,
            outcomes,
            free_rows,
            readers,
            recipe: Arc::clone(&wiring.recipe),
            pending: Mutex::new(Some(PendingCompute {
                cfg: cfg.clone(),
                wiring,
                host_decode: host_decode(cfg, read),
            })),
            compute: Mutex::new(None),
            reading,
            shape: OnceLock::new(),
            startup: Mutex::new(Startup {
                arena: arena_s,
                ..Startup::default()
            }),
            telemetry,
            streamer,
        })
    }

    /// The run's recipe, as built once for it.
    pub fn recipe(&self) -> &Arc<dyn FrameRecipe> {
        &self.recipe
    }

    /// What computes a too-large file's row in pieces, under a recipe that
    /// can (`crate::long`).
    pub fn streamer(&self) -> Option<&Streamer> {
        self.streamer.as_ref()
    }

    /// Waits for `probe` and starts the compute stage (CPU workers, or the
    /// CUDA stage with its kernels and arena registration) on the readers'
    /// rings. Call once, after [`Pipeline::start_reading`]; on an error the
    /// caller aborts the graph. A second call is an error.
    pub fn start_compute(&self, probe: Probe) -> Result<(), Error> {
        let Some(pending) = lock(&self.pending).take() else {
            return Err(Error::ComputeStarted);
        };
        let (choice, device) = probe.wait();
        lock(&self.startup).device = device.as_secs_f64();
        let PendingCompute {
            cfg,
            wiring,
            host_decode,
        } = pending;
        let choice = compute::for_recipe(
            choice?,
            cfg.compute.backend,
            wiring.recipe.as_ref(),
            host_decode,
        )?;
        let workers = match choice.target {
            compute::Target::Cpu => cfg.compute.workers,
            _ => 0,
        };
        let placement = place_threads(&cfg, workers, choice.gpu_pci_bus_id());
        tracing::info!(placement = %placement, "Threads placed.");
        let t = Instant::now();
        let f16_rows = cfg.output.dtype == writer::Dtype::Float16;
        let stage = ComputeStage::start(
            &choice,
            &cfg.compute,
            f16_rows,
            &placement.workers,
            cfg.io.threads,
            wiring,
        )?;
        lock(&self.startup).kernels = t.elapsed().as_secs_f64();
        *lock(&self.compute) = Some(stage);
        let shape = Shape {
            backend: choice.name().to_string(),
            backend_reason: choice.reason.clone(),
            workers,
            ..self.reading.clone()
        };
        tracing::info!(
            backend = %shape.backend,
            reason = %shape.backend_reason,
            engine = %shape.engine,
            readers = shape.readers,
            readers_reason = %cfg.io.threads_reason,
            workers = shape.workers,
            // The CUDA stage's pool: the cores the readers and its thread
            // leave, unless compute.decode_threads is set.
            decode_threads = if workers == 0 {
                cuda::decode_threads(cfg.compute.decode_threads, cfg.io.threads)
            } else {
                0
            },
            "Pipeline started."
        );
        let _ = self.shape.set(shape);
        Ok(())
    }

    /// The read arena's size in bytes; None with the std engine.
    pub fn arena_bytes(&self) -> Option<u64> {
        self.readers.arena().map(|a| a.len() as u64)
    }

    /// How long each start-up step took (first read: once there was one).
    pub fn startup(&self) -> Startup {
        Startup {
            first_read: self.telemetry.first_read().map(|d| d.as_secs_f64()),
            ..lock(&self.startup).clone()
        }
    }

    /// The ring the source pushes onto; a source holds a producer guard
    /// (`jobs().producer()`) and drops it at the end of its stream.
    pub fn jobs(&self) -> &Arc<Ring<ReadJob>> {
        &self.jobs
    }

    /// The ring the sink pops from.
    pub fn outcomes(&self) -> &Arc<Ring<Outcome>> {
        &self.outcomes
    }

    /// Where the sink returns row buffers it is done with.
    pub fn free_rows(&self) -> &Arc<ArrayQueue<Vec<f32>>> {
        &self.free_rows
    }

    pub fn telemetry(&self) -> &Arc<Telemetry> {
        &self.telemetry
    }

    /// What runs: the compute stage's shape once it started, before that
    /// the readers' (backend "pending").
    pub fn shape(&self) -> &Shape {
        self.shape.get().unwrap_or(&self.reading)
    }

    /// Ends the job stream (a source that holds no guard, like serve's loop).
    pub fn close(&self) {
        self.jobs.close();
    }

    /// Stops everything after a sink failure: every ring closes, so every
    /// push upstream fails and every stage thread exits.
    pub fn abort(&self) {
        self.outcomes.close();
        self.loaded.close();
        self.jobs.close();
    }

    /// Counters of each ring, in stage order.
    pub fn ring_stats(&self) -> Vec<(&'static str, RingStats)> {
        vec![
            ("jobs", self.jobs.stats()),
            ("loaded", self.loaded.stats()),
            ("features", self.outcomes.stats()),
        ]
    }

    /// Depth of each ring now, in stage order.
    pub fn ring_depths(&self) -> Vec<RingDepth> {
        let depth = |name: &str, len: usize, st: RingStats| RingDepth {
            name: name.to_string(),
            depth: len,
            capacity: st.capacity,
        };
        vec![
            depth("jobs", self.jobs.len(), self.jobs.stats()),
            depth("loaded", self.loaded.len(), self.loaded.stats()),
            depth("features", self.outcomes.len(), self.outcomes.stats()),
        ]
    }

    /// The stage report of this graph's telemetry since `started`.
    pub fn report(&self, started: Instant) -> crate::runtime::telemetry::Report {
        self.telemetry.report(started.elapsed(), self.ring_stats())
    }

    /// Waits for every stage thread (after the sink has seen the end of the
    /// outcome ring, or after [`Pipeline::abort`]); the CUDA report when the
    /// CUDA stage ran.
    pub fn join(self) -> Result<Option<cuda::CudaReport>, Error> {
        // Whatever is left is dropped, so the stages' pushes never block.
        self.jobs.close();
        let compute = self.compute.into_inner().unwrap_or_else(|p| p.into_inner());
        // A graph whose compute never started (its start failed) has only
        // readers to join: aborted, they exit.
        let compute = compute.map(ComputeStage::join).transpose();
        let readers_ok = self.readers.join();
        let report = compute?.flatten();
        if !readers_ok {
            return Err(Error::ReaderPanicked);
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The start-up overlap: the readers read while the backend is still
    /// being chosen, and the compute stage starts on what they loaded. The
    /// probe here waits for the test, so the order is forced, not timed.
    #[test]
    fn reads_go_out_before_the_backend_is_chosen() {
        let dir = tempfile::tempdir().unwrap();
        let files = crate::synth::generate(dir.path(), 6, 3).unwrap();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let wait = Arc::new(Mutex::new(wait));
        let mut probe = Probe::spawn_with(move || {
            let _ = lock(&wait).recv();
            compute::select(crate::config::Backend::Cpu)
        });
        let mut cfg = Config::default();
        cfg.compute.workers = 1;
        let telemetry = Arc::new(Telemetry::default());
        let recipe = crate::recipes::build(&cfg).unwrap();
        let read = cache::unsampled(cfg.io.direct);
        let p = Pipeline::start_reading(
            (&cfg, recipe, &read),
            &mut probe,
            Arc::clone(&telemetry),
            16,
        )
        .unwrap();
        assert_eq!(p.shape().backend, "pending");
        let feed = p.jobs().producer();
        for (id, path) in files.iter().enumerate() {
            feed.push(ReadJob::whole(id, path.clone())).unwrap();
        }
        drop(feed);
        // Every file is read and waits for compute; nothing computed yet.
        let t = Instant::now();
        while p.loaded.len() < files.len() {
            assert!(t.elapsed().as_secs() < 30, "the readers did not read");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert!(telemetry.first_read().is_some());
        assert!(p.outcomes().is_empty());
        assert!(
            probe.peek().is_none(),
            "the probe answered before it was let go"
        );
        go.send(()).unwrap();
        p.start_compute(probe).unwrap();
        assert_eq!(p.shape().backend, "cpu");
        let mut done = 0;
        while let Some(o) = p.outcomes().pop() {
            assert!(o.row.is_ok(), "{:?}", o.row.err());
            done += 1;
        }
        assert_eq!(done, files.len());
        let startup = p.startup();
        assert!(
            startup.first_read.is_some() && startup.kernels >= 0.0,
            "{startup:?}"
        );
        assert!(matches!(
            p.start_compute(Probe::now(crate::config::Backend::Cpu)),
            Err(Error::ComputeStarted)
        ));
        p.join().unwrap();
    }

    /// A backend that cannot start (cuda asked for, none here) stops the
    /// readers that were already reading, and `start_compute` says why.
    #[test]
    fn a_failed_backend_choice_stops_the_readers() {
        let mut cfg = Config::default();
        cfg.compute.workers = 1;
        let mut probe = Probe::spawn_with(|| {
            Err(compute::Error::CudaUnavailable(
                compute::cuda::Cause::NoDevice,
            ))
        });
        let read = cache::unsampled(cfg.io.direct);
        let p = Pipeline::start_reading(
            (&cfg, crate::recipes::build(&cfg).unwrap(), &read),
            &mut probe,
            Arc::new(Telemetry::default()),
            0,
        )
        .unwrap();
        let e = p.start_compute(probe).unwrap_err();
        assert!(e.to_string().contains("no CUDA device"), "{e}");
        p.abort();
        p.join().unwrap();
    }
}
