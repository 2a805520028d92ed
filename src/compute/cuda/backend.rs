//! The CUDA compute stage: one thread that owns the device and turns
//! [`Loaded`] files into [`Outcome`]s — the GPU twin of `compute::cpu::Workers`.
//!
//! Per file, on the host: a reader error or a header that `wav::parse` rejects
//! (or a sample rate other than the spec's) becomes a rejection at once, with
//! the same text as the CPU backend; only decoding of accepted PCM WAV files
//! at the spec's rate happens on the device. Files `decode::clip::device_wav`
//! routes to the host (FLAC, resampled, `first` channel) are computed on this
//! thread by the CPU mel path (`compute::cpu::HostMel`). Accepted files are batched (`compute.batch_files`) into a
//! [`BatchRunner`]; a partial batch is flushed when the input is drained or
//! once its first file has waited [`CudaOptions::flush_after`]
//! (`compute.max_batch_delay_ms`), so a slow trickle of files (serve) is
//! computed within that delay instead of waiting for a full batch.
//! Outcomes carry job indices; the writer orders rows, so batch completion
//! order does not matter. Heap buffers (std reader) go back to `free_bytes`
//! when their copy completed; arena extents free themselves then.
//!
//! Start-up is synchronous: [`start_cuda_workers`] returns only after the
//! device opened, the kernels loaded and the arena was registered — or with the
//! error that prevented it, so `--backend cuda` fails at start-up, not mid-run.
//! A device error mid-run rejects every file not yet finished with
//! [`Reject::Device`], drains the input the same way (so the pipeline ends),
//! and is returned by [`CudaWorkers::join`]. The output ring is fed through one
//! producer guard held by the stage thread: it closes however the thread ends.

use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

use super::device::Device;
use super::driver::Gpu;
use super::orchestrate::{BatchRunner, HostBytes, RunnerConfig, RunnerStats, Staged};
use super::recipe::MelRecipe;
use super::tables::Tables;
use super::{Error, nvrtc, real};
use crate::compute::cpu::HostMel;
use crate::compute::{Outcome, Reject, Wiring};
use crate::dsp::Plan;
use crate::reader::{FileBytes, Loaded};
use crate::runtime::ring::Producer;
use crate::runtime::telemetry::{Local, Stage};

/// Sizes of the CUDA stage.
#[derive(Clone, Copy, Debug)]
pub struct CudaOptions {
    /// Files per batch (`compute.batch_files`).
    pub batch_files: usize,
    /// Device batch slots (2: copy of batch k+1 overlaps compute of batch k).
    pub slots: usize,
    /// Compute a partial batch once its first file has waited this long.
    pub flush_after: Duration,
    /// The output is float16: rows are converted inside the graph and leave
    /// the device as binary16 (`MelRecipe::with_f16_rows`).
    pub f16_rows: bool,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            batch_files: 256,
            slots: 2,
            flush_after: Duration::from_millis(20),
            f16_rows: false,
        }
    }
}

/// What the CUDA stage reports at the end (add it to the build's JSON as
/// `"cuda"`).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CudaReport {
    pub device: String,
    pub kernel_compile_s: f64,
    pub kernel_from_cache: bool,
    pub batch_files: usize,
    #[serde(flatten)]
    pub runner: RunnerStats,
    /// Seconds the stage thread ran (start-up excluded).
    pub run_s: f64,
    /// h2d_bytes / run_s, GB/s (a lower bound on the link's rate).
    pub h2d_gb_per_s: f64,
    /// Host→device copies read pageable memory (no arena, or its
    /// registration was refused).
    pub pageable_copies: bool,
    /// Rows left the device as float16 (converted in the graph).
    pub f16_rows: bool,
}

/// The running CUDA stage.
pub struct CudaWorkers {
    thread: JoinHandle<Result<CudaReport, Error>>,
}

impl CudaWorkers {
    pub fn join(self) -> Result<CudaReport, Error> {
        self.thread.join().map_err(|_| Error::Panicked)?
    }
}

/// File bytes held until their copy completed; heap buffers are recycled.
struct Held {
    bytes: Option<FileBytes>,
    free: Arc<ArrayQueue<Vec<u8>>>,
}

impl HostBytes for Held {
    fn ptr(&self) -> *const u8 {
        self.bytes.as_ref().map_or(std::ptr::null(), |b| b.ptr())
    }
    fn len(&self) -> usize {
        self.bytes.as_ref().map_or(0, HostBytes::len)
    }
    fn readable(&self) -> usize {
        self.bytes.as_ref().map_or(0, HostBytes::readable)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(FileBytes::Heap(v)) = self.bytes.take() {
            let _full = self.free.push(v);
        }
    }
}

/// The kernels for `gpu`: CUBIN for its architecture, or PTX for the newest
/// one NVRTC knows below it (`nvrtc::pick_target`); (image, seconds, whether
/// every source came from the disk cache).
pub(crate) fn compile_kernels(gpu: &Gpu) -> Result<(nvrtc::Image, f64, bool), Error> {
    let n = super::api::nvrtc().map_err(Error::Unavailable)?;
    let sm = u32::try_from(gpu.cc.0 * 10 + gpu.cc.1).unwrap_or(0);
    let target = n
        .supported_archs()
        .and_then(|a| nvrtc::pick_target(sm, &a))
        .map_err(Error::Unavailable)?;
    let t = Instant::now();
    let mut images = Vec::new();
    for (file, src) in nvrtc::SOURCES {
        images.push(nvrtc::compile_cached(file, src, target)?);
    }
    let compile_s = t.elapsed().as_secs_f64();
    let from_cache = images.iter().all(|i| i.from_disk_cache);
    let image = images
        .into_iter()
        .next()
        .ok_or_else(|| Error::Unavailable("no kernel sources".into()))?;
    Ok((image, compile_s, from_cache))
}

/// Starts the CUDA stage on the GPU `gpu` found by `driver::probe`.
pub fn start_cuda_workers(
    plan: Arc<Plan>,
    gpu: Gpu,
    opts: CudaOptions,
    wiring: Wiring,
) -> Result<CudaWorkers, Error> {
    let (image, compile_s, from_cache) = compile_kernels(&gpu)?;
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
        plan,
        move || real::CudaDevice::open(gpu, &image),
        opts,
        wiring,
        report,
    )
}

/// [`start_cuda_workers`] on any [`Device`]: `make` runs on the stage thread
/// (a CUDA context is current on the thread that made it). Tests pass a
/// `HostDouble`.
pub fn start_workers_with<D, F>(
    plan: Arc<Plan>,
    make: F,
    opts: CudaOptions,
    wiring: Wiring,
    report: CudaReport,
) -> Result<CudaWorkers, Error>
where
    D: Device,
    F: FnOnce() -> super::device::Result<D> + Send + 'static,
{
    let tables = Tables::new(&plan).map_err(|e| Error::Unavailable(e.to_string()))?;
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), Error>>();
    let output = wiring.output.producer();
    let thread = std::thread::Builder::new()
        .name("cuda".into())
        .spawn(move || {
            let started = Instant::now();
            let cfg = RunnerConfig {
                batch_files: opts.batch_files.max(1),
                slots: opts.slots.max(1),
                // Room for B files of 4 bytes × clip samples (16-bit stereo or
                // 32-bit mono); larger files close the batch early.
                input_bytes: opts.batch_files.max(1) * tables.clip_samples * 4 + (1 << 20),
            };
            let runner = make().and_then(|dev| {
                BatchRunner::new(
                    dev,
                    MelRecipe::new(tables).with_f16_rows(opts.f16_rows),
                    cfg,
                )
            });
            let mut runner: BatchRunner<D, MelRecipe, usize, Held> = match runner {
                Ok(r) => r,
                Err(e) => {
                    let _gone = ready_tx.send(Err(e.into()));
                    return Err(Error::Unavailable("CUDA start-up failed".into()));
                }
            };
            let mut pageable = false;
            if let Some(a) = &wiring.arena {
                // SAFETY: the mapping stays alive while `wiring.arena` (an Arc)
                // is held, i.e. until after `runner` (and its device, which
                // unregisters) is dropped at the end of this closure.
                if let Err(e) = unsafe { runner.device().register_host(a.as_ptr(), a.len()) } {
                    // Refused under confidential computing, some vGPU and
                    // WSL set-ups: copies then go through the driver's
                    // staging buffers (pageable path), slower but correct.
                    tracing::warn!(
                        error = %e,
                        "The reader arena cannot be registered for DMA; copies use pageable memory."
                    );
                    pageable = true;
                }
            }
            let _gone = ready_tx.send(Ok(()));
            let r = run(&mut runner, &plan, opts, &wiring, &output);
            let stats = runner.stats();
            let errors = runner.error_sink();
            drop(runner);
            let teardown = errors.lock().map(|e| e.clone()).unwrap_or_default();
            let run_s = started.elapsed().as_secs_f64();
            drop(output);
            r.map_err(Error::Run)?;
            if !teardown.is_empty() {
                return Err(Error::Teardown(teardown.join("; ")));
            }
            Ok(CudaReport {
                runner: stats,
                pageable_copies: pageable || wiring.arena.is_none(),
                run_s,
                h2d_gb_per_s: stats.h2d_bytes as f64 / run_s.max(1e-9) / 1e9,
                f16_rows: opts.f16_rows,
                ..report
            })
        })
        .map_err(|e| Error::Unavailable(format!("cannot start the CUDA thread: {e}")))?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(CudaWorkers { thread }),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        Err(_) => Err(Error::Unavailable(
            "the CUDA thread died during start-up".into(),
        )),
    }
}

/// The stage loop; returns the first device error (after rejecting what it hit).
fn run<D: Device>(
    runner: &mut BatchRunner<D, MelRecipe, usize, Held>,
    plan: &Plan,
    opts: CudaOptions,
    w: &Wiring,
    output: &Producer<Outcome>,
) -> Result<(), Arc<str>> {
    let spec = plan.spec();
    let rate = spec.sample_rate;
    let row_len = spec.row_len();
    let mut local = Local::default();
    // The CPU mel path for files decoded on the host, made on first use.
    let mut host_mel: Option<HostMel> = None;
    let closed = std::cell::Cell::new(false);
    let mut sink = |job: usize, vals: &[f32]| {
        let mut row = w.free_rows.pop().unwrap_or_default();
        row.clear();
        row.extend_from_slice(vals);
        debug_assert_eq!(row.len(), row_len);
        if output.push(Outcome { job, row: Ok(row) }).is_err() {
            closed.set(true);
        }
    };
    let reject = |job: usize, why: Reject| output.push(Outcome { job, row: Err(why) }).is_ok();
    let mut failure: Option<Arc<str>> = None;
    let fail = |e: &dyn std::fmt::Display| -> Arc<str> { e.to_string().into() };
    // When the first file of the open batch arrived.
    let mut open_since: Option<Instant> = None;
    loop {
        let item = match w.input.try_pop() {
            Some(i) => Some(i),
            None if w.input.is_closed() => {
                // Closed: drain what is left, then stop.
                match w.input.pop() {
                    Some(i) => Some(i),
                    None => break,
                }
            }
            None if runner.open_len() == 0 && failure.is_none() => {
                // Nothing assembled: block for input, but keep completing
                // batches in flight (poll) every few milliseconds.
                let r = local.time(Stage::Mel, || runner.poll(&mut sink));
                if let Err(e) = r {
                    failure.get_or_insert(fail(&e));
                }
                std::thread::sleep(Duration::from_micros(200));
                None
            }
            None => {
                let r = local.time(Stage::Mel, || {
                    flush_if_due(runner, &mut open_since, opts.flush_after, &mut sink)
                });
                if let Err(e) = r {
                    failure.get_or_insert(fail(&e));
                }
                std::thread::sleep(Duration::from_micros(200));
                None
            }
        };
        let Some(Loaded { job, bytes }) = item else {
            if closed.get() {
                break;
            }
            continue;
        };
        let bytes = match bytes {
            Err(e) => {
                if !reject(job, e.into()) {
                    break;
                }
                continue;
            }
            Ok(b) => b,
        };
        if let Some(f) = &failure {
            let _ok = reject(job, Reject::Device(Arc::clone(f)));
            continue;
        }
        // Raw PCM WAV at the spec's rate is decoded on the device; FLAC,
        // resampled and `first`-channel files are decoded and computed here
        // on the host by the CPU mel path (docs/GPU.md).
        let routed = local.time(Stage::Decode, || {
            crate::decode::clip::device_wav(&bytes, rate, w.policy)
        });
        let info = match routed {
            Ok(Some(i)) => i,
            Ok(None) => {
                let host = host_mel.get_or_insert_with(|| HostMel::new(plan, w.policy));
                let mut row = w.free_rows.pop().unwrap_or_default();
                row.resize(row_len, 0.0);
                let r = host.row(plan, &bytes, &mut row, &mut local);
                drop(Held {
                    bytes: Some(bytes),
                    free: Arc::clone(&w.free_bytes),
                });
                if output
                    .push(Outcome {
                        job,
                        row: r.map(|()| row),
                    })
                    .is_err()
                {
                    break;
                }
                continue;
            }
            Err(e) => {
                if !reject(job, e.into()) {
                    break;
                }
                continue;
            }
        };
        let held = Held {
            bytes: Some(bytes),
            free: Arc::clone(&w.free_bytes),
        };
        let mut staged = Staged {
            tag: job,
            bytes: held,
            info,
        };
        let r = local.time(Stage::Mel, || -> super::device::Result<()> {
            for _attempt in 0..2 {
                match runner.add(staged) {
                    Ok(()) => return Ok(()),
                    Err(back) if runner.open_len() == 0 => {
                        staged = back;
                        break;
                    }
                    Err(back) => {
                        staged = back;
                        runner.flush(&mut sink)?;
                    }
                }
            }
            // Too big for an empty batch: reject (its bytes are dropped here).
            let bytes = staged.bytes.len();
            let _ok = reject(staged.tag, Reject::Staging { bytes });
            Ok(())
        });
        if runner.open_len() == 0 {
            open_since = None;
        } else {
            open_since.get_or_insert_with(Instant::now);
        }
        let r = r.and_then(|()| {
            if runner.open_len() >= opts.batch_files.max(1) {
                open_since = None;
                runner.flush(&mut sink)
            } else {
                flush_if_due(runner, &mut open_since, opts.flush_after, &mut sink)?;
                runner.poll(&mut sink)
            }
        });
        if let Err(e) = r {
            failure.get_or_insert(fail(&e));
        }
        if let Some(f) = &failure {
            for s in runner.take_open() {
                let _ok = reject(s.tag, Reject::Device(Arc::clone(f)));
            }
            for tag in runner.take_in_flight() {
                let _ok = reject(tag, Reject::Device(Arc::clone(f)));
            }
        }
        if closed.get() {
            break;
        }
    }
    if failure.is_none() {
        let r = local.time(Stage::Mel, || runner.finish(&mut sink));
        if let Err(e) = r {
            failure = Some(fail(&e));
        }
    }
    if let Some(f) = &failure {
        for s in runner.take_open() {
            let _ok = reject(s.tag, Reject::Device(Arc::clone(f)));
        }
        for tag in runner.take_in_flight() {
            let _ok = reject(tag, Reject::Device(Arc::clone(f)));
        }
    }
    local.publish(&w.telemetry);
    match failure {
        Some(f) => Err(f),
        None => Ok(()),
    }
}

/// Computes the open batch if its first file has waited `delay` or longer.
fn flush_if_due<D: Device>(
    runner: &mut BatchRunner<D, MelRecipe, usize, Held>,
    open_since: &mut Option<Instant>,
    delay: Duration,
    sink: &mut impl FnMut(usize, &[f32]),
) -> super::device::Result<()> {
    match *open_since {
        Some(t) if t.elapsed() >= delay => {
            *open_since = None;
            runner.flush(sink)
        }
        _ => Ok(()),
    }
}
