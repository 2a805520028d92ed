//! The CUDA compute stage: a pool of CPU decode threads ([`super::feed`])
//! in front of one thread that owns the device and turns the files the pool
//! hands on into [`Outcome`]s — the GPU twin of `compute::cpu::Workers`.
//!
//! ```text
//! readers ─Loaded─▶ decode pool (CudaOptions::decode_threads) ─Fed─▶ cuda thread ─rows─▶ writer
//! ```
//!
//! Per file, in the pool: a reader error or a file the CPU backend rejects
//! becomes that rejection at once, with the same text; raw PCM/float WAV at
//! the spec's rate goes on with its parsed header and is decoded on the
//! device; every other accepted file (FLAC, resampled, `channels = "first"`)
//! is decoded by the CPU backend's `ClipDecoder` into a pinned staging slot
//! (`compute::cuda::staging`), which the device reads as mono float32 data. The GPU
//! computes the mel of every accepted file.
//!
//! The stage thread only batches: files are added (`compute.batch_files`)
//! to a [`BatchRunner`]; a partial batch is flushed when the input is
//! drained or once its first file has waited [`CudaOptions::flush_after`]
//! (`compute.max_batch_delay_ms`), so a slow trickle of files (serve) is
//! computed within that delay instead of waiting for a full batch. One
//! thread is enough for that: it issues a few asynchronous calls per batch
//! of 256 files and sleeps in blocking-sync event waits the rest of the time.
//! Outcomes carry job indices; the writer orders rows, so batch completion
//! order does not matter. Heap buffers (std reader) go back to `free_bytes`
//! when their copy completed; arena extents and staging slots free
//! themselves then.
//!
//! Start-up is synchronous: [`start_cuda_workers`] returns only after the
//! device opened, the kernels loaded, the arena was registered and the
//! pool started (the decode staging is registered when the first
//! host-decoded clip arrives: an all-WAV corpus never pins it) — or with the error that prevented it
//! (no file was taken from the input then), so `--backend cuda` fails at
//! start-up, not mid-run. A device error mid-run rejects every file not yet
//! finished with [`Reject::Device`], keeps taking the pool's files and
//! rejecting them the same way (so the pipeline ends), and is returned by
//! [`CudaWorkers::join`] (as a [`Cause`]). The output ring is fed through producer guards held
//! by the stage thread and each decode thread: it closes however they end.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Instant;

use crossbeam_queue::ArrayQueue;

use super::cause::Cause;
use super::device::Device;
use super::feed::{Fed, FedKind, Feed, FeedWiring};
use super::gpu::Gpu;
use super::kernels::compile_kernels;
use super::orchestrate::{BatchRunner, HostBytes, RunnerConfig, Staged};
use super::recipe::MelRecipe;
use super::stage::{self, Intake};
use super::staging::{Clip, Staging};
use super::tables::Tables;
pub use super::workers::{
    CudaOptions, CudaReport, CudaWorkers, decode_threads, default_decode_threads,
};
use super::workers::{Ended, StopPool, answer, spawn_stage, with_pool};
use super::{Error, real};
use crate::compute::{Outcome, Reject, Wiring};
use crate::dsp::Plan;
use crate::frames::RecipePlan;
use crate::reader::FileBytes;
use crate::runtime::ring::{Producer, Ring};
use crate::runtime::telemetry::Local;

/// What the device reads for one file, held until its copy completed: the
/// file's bytes (heap buffers are recycled) or a staged clip.
enum Held {
    File {
        bytes: Option<FileBytes>,
        free: Arc<ArrayQueue<Vec<u8>>>,
    },
    Clip(Clip),
}

impl HostBytes for Held {
    fn ptr(&self) -> *const u8 {
        match self {
            Held::File { bytes, .. } => bytes.as_ref().map_or(std::ptr::null(), |b| b.ptr()),
            Held::Clip(c) => c.ptr(),
        }
    }
    fn len(&self) -> usize {
        match self {
            Held::File { bytes, .. } => bytes.as_ref().map_or(0, HostBytes::len),
            Held::Clip(c) => c.byte_len(),
        }
    }
    fn readable(&self) -> usize {
        match self {
            Held::File { bytes, .. } => bytes.as_ref().map_or(0, HostBytes::readable),
            Held::Clip(c) => c.byte_len(),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Held::File { bytes, free } = self
            && let Some(FileBytes::Heap(v)) = bytes.take()
        {
            let _full = free.push(v);
        }
    }
}

/// Starts the CUDA stage on the GPU `gpu` found by `driver::probe`.
pub fn start_cuda_workers(
    gpu: Gpu,
    opts: CudaOptions,
    wiring: Wiring,
) -> Result<CudaWorkers, Error> {
    let (images, compile_s, from_cache) = compile_kernels(&gpu)?;
    tracing::info!(
        gpu = %gpu,
        seconds = compile_s,
        from_cache,
        "CUDA kernels are ready."
    );
    let report = CudaReport {
        device: gpu.to_string(),
        kernel_compile_s: compile_s,
        kernel_from_cache: from_cache,
        batch_files: opts.batch_files,
        ..CudaReport::default()
    };
    start_workers_with(
        move || real::CudaDevice::open(gpu, &images),
        opts,
        wiring,
        report,
    )
}

/// [`start_cuda_workers`] on any [`Device`]: `make` runs on the stage thread
/// (a CUDA context is current on the thread that made it). Tests pass a
/// `HostDouble`. In steps: the stage's parts (tables, decode staging, rings
/// and every producer guard), the stage thread (it answers once its device
/// opened), then the decode pool in front of it.
pub fn start_workers_with<D, F>(
    make: F,
    opts: CudaOptions,
    wiring: Wiring,
    report: CudaReport,
) -> Result<CudaWorkers, Error>
where
    D: Device,
    F: FnOnce() -> super::device::Result<D> + Send + 'static,
{
    let plan = match wiring.recipe.plan() {
        RecipePlan::Librosa(plan) => plan,
        _ => {
            let recipe = Arc::clone(&wiring.recipe);
            return super::frames_stage::start(&recipe, make, opts, wiring, report);
        }
    };
    let tables = Tables::new(&plan).map_err(Cause::from)?;
    let threads = opts.decode_threads.max(1);
    let batch = opts.batch_files.max(1);
    // Room for the open batch, one batch being copied and every decode
    // thread's clip in progress: the pool blocks (back-pressure) beyond.
    let staging = Staging::new(2 * batch + 2 * threads, tables.clip_samples)
        .map_err(|e| Cause::host("map the decode staging", e))?;
    let fed: Arc<Ring<Fed>> = Arc::new(Ring::new(batch.max(threads * 2)));
    // Every guard exists before any thread can drop one.
    let output = wiring.output.producer();
    let pool_fed: Vec<Producer<Fed>> = (0..threads).map(|_| fed.producer()).collect();
    let pool_out: Vec<Producer<Outcome>> = (0..threads).map(|_| wiring.output.producer()).collect();
    let feed_wiring = FeedWiring {
        input: Arc::clone(&wiring.input),
        free_bytes: Arc::clone(&wiring.free_bytes),
        telemetry: Arc::clone(&wiring.telemetry),
        policy: wiring.policy,
        rate: plan.spec().sample_rate,
        staging: Arc::clone(&staging),
    };
    let thread = spawn_stage(move |ready| {
        let stage = StageThread {
            plan,
            opts,
            tables,
            wiring,
            fed,
            staging,
            output,
            ready,
            report,
        };
        stage.run(make)
    })?;
    let threads = pool_fed.len();
    with_pool(
        Feed::start(feed_wiring, pool_fed, pool_out),
        threads,
        thread,
    )
}

/// What the stage thread owns: the plan and its tables, the wiring, the fed
/// ring from the pool, the decode staging and its output guard.
struct StageThread {
    plan: Arc<Plan>,
    opts: CudaOptions,
    tables: Tables,
    wiring: Wiring,
    fed: Arc<Ring<Fed>>,
    staging: Arc<Staging>,
    output: Producer<Outcome>,
    /// Answered once: the device opened (or why not).
    ready: mpsc::Sender<Result<(), Error>>,
    report: CudaReport,
}

impl StageThread {
    /// The stage thread's body: open the device, answer `ready`, run the
    /// loop, release everything, and report.
    fn run<D, F>(self, make: F) -> Result<CudaReport, Error>
    where
        D: Device,
        F: FnOnce() -> super::device::Result<D>,
    {
        let started = Instant::now();
        let (fed, staging) = (Arc::clone(&self.fed), Arc::clone(&self.staging));
        let stop_pool = StopPool(move || {
            fed.close();
            staging.close();
        });
        let opened = open_runner(make, self.tables, self.opts).map_err(Error::from);
        let sum = self.wiring.stats.clone();
        let mut runner = answer(opened, &self.ready)?.summing(sum);
        let mut pageable = false;
        if let Some(a) = self.wiring.arena.as_ref() {
            // SAFETY: the arena stays mapped while `wiring.arena` (an
            // Arc) is held, i.e. until after `runner` (and its device,
            // which unregisters) is dropped at the end of this function.
            pageable = !unsafe { register(runner.device(), a.as_ptr(), a.len(), "reader arena") };
        }
        // The staging is registered when the first clip arrives: a
        // corpus the device decodes alone never pins it (nor touches
        // its pages).
        let mut intake = LibrosaIntake {
            rate: self.plan.spec().sample_rate,
            free_bytes: Arc::clone(&self.wiring.free_bytes),
            staging_reg: LazyRegistration {
                ptr: self.staging.as_ptr(),
                len: self.staging.len(),
                state: None,
            },
            host_decoded: 0,
        };
        let ends = (&self.wiring, &self.output);
        let r = stage::run(&mut runner, &mut intake, self.opts, &self.fed, ends);
        pageable |= intake.staging_reg.state == Some(false);
        // The pool stops if it is still running (the output closed):
        // pushes fail, waits for a slot end; leftovers are dropped.
        drop(stop_pool);
        let rate = self.plan.spec().sample_rate;
        while let Some(f) = self.fed.try_pop() {
            drop(held(f.kind, rate, &self.wiring.free_bytes));
        }
        let ended = Ended {
            run: r,
            started,
            errors: runner.error_sink(),
            stats: runner.stats(),
        };
        drop(runner);
        drop(self.output);
        ended.report(CudaReport {
            pageable_copies: pageable || self.wiring.arena.is_none(),
            f16_rows: self.opts.f16_rows,
            decode_threads: self.opts.decode_threads.max(1),
            host_decoded_files: intake.host_decoded,
            ..self.report
        })
    }
}

/// The device (`make`) and the batch runner over it, sized for `opts`.
fn open_runner<D, F>(
    make: F,
    tables: Tables,
    opts: CudaOptions,
) -> super::device::Result<BatchRunner<D, MelRecipe, usize, Held>>
where
    D: Device,
    F: FnOnce() -> super::device::Result<D>,
{
    let batch = opts.batch_files.max(1);
    let cfg = RunnerConfig {
        slots: opts.slots.max(1),
        // Room for B files of 4 bytes × clip samples (16-bit stereo, 32-bit
        // mono or a staged f32 clip); larger files close the batch early.
        ..RunnerConfig::new(batch, batch * tables.clip_samples * 4 + (1 << 20))
    };
    let recipe = MelRecipe::new(tables).with_f16_rows(opts.f16_rows);
    BatchRunner::new(make()?, recipe, cfg)
}

/// Registers `len` bytes at `ptr` for DMA; false (logged) when refused.
///
/// # Safety
/// The range must stay mapped until `dev` is dropped (its drop unregisters).
unsafe fn register<D: Device>(dev: &mut D, ptr: *mut u8, len: usize, what: &str) -> bool {
    // SAFETY: forwarded from the caller.
    match unsafe { dev.register_host(ptr, len) } {
        Ok(_) => true,
        Err(e) => {
            // Refused under confidential computing, some vGPU and WSL
            // set-ups: copies then go through the driver's staging buffers
            // (pageable path), slower but correct.
            tracing::warn!(
                error = %e,
                region = what,
                "Host memory cannot be registered for DMA; copies use pageable memory."
            );
            false
        }
    }
}

/// The decode staging's registration, made by the stage thread when the
/// first host-decoded clip reaches it (before any copy reads the staging).
struct LazyRegistration {
    ptr: *mut u8,
    len: usize,
    /// `None` until tried; then whether the device took it.
    state: Option<bool>,
}

impl LazyRegistration {
    fn ensure<D: Device>(&mut self, dev: &mut D) {
        if self.state.is_none() {
            // SAFETY: `ptr..ptr + len` is the staging mapping, which the
            // stage thread's closure holds (an Arc) until after the runner
            // and its device are dropped.
            self.state = Some(unsafe { register(dev, self.ptr, self.len, "decode staging") });
        }
    }
}

/// What the runner holds for a fed file.
fn held(
    kind: FedKind,
    rate: u32,
    free: &Arc<ArrayQueue<Vec<u8>>>,
) -> (Held, crate::decode::wav::WavInfo) {
    match kind {
        FedKind::Device { bytes, info } => (
            Held::File {
                bytes: Some(bytes),
                free: Arc::clone(free),
            },
            info,
        ),
        FedKind::Pcm(clip) => {
            let info = clip.info(rate);
            (Held::Clip(clip), info)
        }
    }
}

/// The librosa recipe's input: the file's own bytes (decoded on the
/// device) or a clip the pool decoded into the staging, which is registered
/// for DMA when the first one arrives.
struct LibrosaIntake {
    rate: u32,
    free_bytes: Arc<ArrayQueue<Vec<u8>>>,
    staging_reg: LazyRegistration,
    /// Files that came as host-decoded clips.
    host_decoded: u64,
}

impl<D: Device> Intake<D> for LibrosaIntake {
    type Fed = Fed;
    type Bytes = Held;

    fn stage(&mut self, fed: Fed) -> Staged<usize, Held> {
        let (bytes, info) = held(fed.kind, self.rate, &self.free_bytes);
        self.host_decoded += u64::from(matches!(bytes, Held::Clip(_)));
        Staged {
            tag: fed.job,
            bytes,
            info,
        }
    }

    fn ready(&mut self, dev: &mut D, staged: &Staged<usize, Held>) {
        if matches!(staged.bytes, Held::Clip(_)) {
            self.staging_reg.ensure(dev);
        }
    }

    /// A file larger than a batch's device input: rejected (its bytes
    /// dropped here).
    fn oversize(&mut self, staged: Staged<usize, Held>, _: &mut Local) -> Result<Vec<f32>, Reject> {
        let bytes = staged.bytes.len();
        Err(Reject::Staging { bytes })
    }
}
