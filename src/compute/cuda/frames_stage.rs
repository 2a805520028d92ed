//! The CUDA stage of the variable-length recipes (Kaldi fbank and MFCC,
//! Whisper's log-mel): the same decode pool and stage thread as the librosa
//! recipe's (`backend`), with utterances of their own lengths in place of
//! fixed clips.
//!
//! ```text
//! readers ─Loaded─▶ decode pool ─Utterance─▶ cuda thread ─rows─▶ writer
//!                    │ ClipDecoder::decode_natural (the CPU workers' decode)
//!                    └─ reader errors, undecodable, shorter than a frame ──▶ writer
//! ```
//!
//! The pool decodes every file exactly as the CPU workers do (mono at the
//! recipe's rate, Whisper cut at 30 s) and rejects what they reject, with
//! the same reason (a Kaldi file shorter than one frame included). The stage
//! thread runs the one batching loop (`stage`) over the batch runner with
//! this recipe's kernels ([`FrameKernels`]): the runner gathers a batch's
//! samples into a slot's pinned input, and later its rows out of the pinned
//! output, on a few threads (`host_copy`: one thread's copies were what held
//! this stage back). Rows leave in the row protocol of `crate::frames`
//! (Whisper: the pad value as trailer), as the CPU workers' do.
//!
//! An utterance longer than one batch holds (more than `ROWS_PER_BATCH`
//! frames: about 11 minutes at a 10 ms shift) is computed by the stage thread
//! with the CPU recipe instead (`host_computed_files` in the report).
//!
//! Failure: as for every recipe (`stage`); [`CudaWorkers::join`] returns it.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Instant;

use crossbeam_queue::ArrayQueue;

use super::cause::Cause;
use super::device::Device;
use super::feed::{Feed, recycle};
use super::frames_exec::{Capacity, FrameKernels, FrameTables};
use super::orchestrate::{BatchRunner, HostBytes, RunnerConfig, Staged};
use super::stage::{self, Intake};
use super::workers::{
    CudaOptions, CudaReport, CudaWorkers, Ended, StopPool, answer, spawn_stage, with_pool,
};
use super::{Error, device};
use crate::compute::{Outcome, Reject, Wiring};
use crate::decode::clip::{ClipDecoder, Policy};
use crate::decode::wav::{SampleFormat, WavInfo};
use crate::frames::{FrameRecipe, FrameWorker};
use crate::reader::Loaded;
use crate::runtime::ring::{Producer, Ring};
use crate::runtime::telemetry::{Local, Stage, Telemetry};

/// One decoded file on its way to the device.
struct Utterance {
    job: usize,
    samples: Vec<f32>,
}

/// An utterance's samples while the runner holds them; given back to the
/// pool's free list when dropped.
struct Samples {
    samples: Vec<f32>,
    free: Arc<ArrayQueue<Vec<f32>>>,
}

impl HostBytes for Samples {
    fn ptr(&self) -> *const u8 {
        self.samples.as_ptr().cast()
    }
    fn len(&self) -> usize {
        self.samples.len() * 4
    }
}

impl Drop for Samples {
    fn drop(&mut self) {
        let _full = self.free.push(std::mem::take(&mut self.samples));
    }
}

/// What the decode threads share.
struct PoolCtx {
    input: Arc<Ring<Loaded>>,
    free_bytes: Arc<ArrayQueue<Vec<u8>>>,
    free_samples: Arc<ArrayQueue<Vec<f32>>>,
    telemetry: Arc<Telemetry>,
    policy: Policy,
    rate: u32,
    max_samples: Option<usize>,
    tables: FrameTables,
    recipe: String,
}

/// Starts the stage for `recipe` on the device `make` opens (on the stage
/// thread): the stage thread first (it answers once the device opened and
/// the recipe's kernels and tables loaded), then the decode pool.
pub(super) fn start<D, F>(
    recipe: &Arc<dyn FrameRecipe>,
    make: F,
    opts: CudaOptions,
    wiring: Wiring,
    report: CudaReport,
) -> Result<CudaWorkers, Error>
where
    D: Device,
    F: FnOnce() -> device::Result<D> + Send + 'static,
{
    let tables = FrameTables::new(&recipe.plan()).map_err(Cause::Recipe)?;
    let layout = recipe.layout();
    let threads = opts.decode_threads.max(1);
    let batch = opts.batch_files.max(1);
    let fed: Arc<Ring<Utterance>> = Arc::new(Ring::new(batch.max(threads * 2)));
    let free_samples = Arc::new(ArrayQueue::new(2 * batch + 2 * threads));
    // Every guard exists before any thread can drop one.
    let output = wiring.output.producer();
    let pool_fed: Vec<Producer<Utterance>> = (0..threads).map(|_| fed.producer()).collect();
    let pool_out: Vec<Producer<Outcome>> = (0..threads).map(|_| wiring.output.producer()).collect();
    let ctx = Arc::new(PoolCtx {
        input: Arc::clone(&wiring.input),
        free_bytes: Arc::clone(&wiring.free_bytes),
        free_samples: Arc::clone(&free_samples),
        telemetry: Arc::clone(&wiring.telemetry),
        policy: wiring.policy,
        rate: layout.sample_rate(),
        max_samples: layout.frames().and_then(|l| l.max_samples),
        tables: tables.clone(),
        recipe: layout.recipe().to_string(),
    });
    let recipe = Arc::clone(recipe);
    let thread = spawn_stage(move |ready| {
        let stage = StageThread {
            tables,
            recipe,
            opts,
            wiring,
            fed,
            free_samples,
            output,
            ready,
            report,
        };
        stage.run(make)
    })?;
    let threads = pool_fed.len();
    let bodies = pool_fed.into_iter().zip(pool_out).map(|(fed, out)| {
        let ctx = Arc::clone(&ctx);
        move || decode(&ctx, &fed, &out)
    });
    with_pool(Feed::spawn(bodies), threads, thread)
}

/// One decode thread: each file decoded as the CPU workers decode it, its
/// rows counted, or its rejection sent on.
fn decode(c: &PoolCtx, fed: &Producer<Utterance>, output: &Producer<Outcome>) {
    let mut decoder = ClipDecoder::new(c.rate, c.policy);
    let mut local = Local::default();
    while let Some(Loaded {
        job,
        bytes,
        segment,
    }) = c.input.pop()
    {
        let next = match bytes {
            Err(e) => Err(Reject::Read(e)),
            Ok(bytes) => {
                let mut samples = c.free_samples.pop().unwrap_or_default();
                let r = local.time(Stage::Decode, || {
                    let seg = segment.as_ref();
                    decoder.decode_natural_segment(&bytes, seg, c.max_samples, &mut samples)
                });
                recycle(bytes, &c.free_bytes);
                let rows = r
                    .map_err(Reject::from)
                    .and_then(|_| Ok(c.tables.rows(samples.len(), &c.recipe)?));
                match rows {
                    Ok(_) => Ok(Utterance { job, samples }),
                    Err(why) => {
                        let _full = c.free_samples.push(samples);
                        Err(why)
                    }
                }
            }
        };
        let pushed = match next {
            Ok(u) => fed.push(u).is_ok(),
            Err(why) => output.push(Outcome::new(job, Err(why))).is_ok(),
        };
        if !pushed {
            break;
        }
    }
    local.publish(&c.telemetry);
}

/// What the stage thread owns.
struct StageThread {
    tables: FrameTables,
    recipe: Arc<dyn FrameRecipe>,
    opts: CudaOptions,
    wiring: Wiring,
    fed: Arc<Ring<Utterance>>,
    free_samples: Arc<ArrayQueue<Vec<f32>>>,
    output: Producer<Outcome>,
    ready: mpsc::Sender<Result<(), Error>>,
    report: CudaReport,
}

impl StageThread {
    fn run<D, F>(self, make: F) -> Result<CudaReport, Error>
    where
        D: Device,
        F: FnOnce() -> device::Result<D>,
    {
        let started = Instant::now();
        let fed = Arc::clone(&self.fed);
        let stop_pool = StopPool(move || fed.close());
        let cap = Capacity::new(&self.tables, self.opts.batch_files);
        let cfg = RunnerConfig {
            slots: self.opts.slots.max(1),
            gather: true,
            ..RunnerConfig::new(cap.utts, cap.samples * 4)
        };
        let kernels = FrameKernels::new(self.tables.clone(), cap);
        let opened = make().and_then(|dev| BatchRunner::new(dev, kernels, cfg));
        let opened = opened.map_err(|e| Error::from(Cause::StartUp(e)));
        let mut runner = answer(opened, &self.ready)?.summing(self.wiring.stats.clone());
        let mut intake = FramesIntake {
            free_samples: Arc::clone(&self.free_samples),
            rate: self.recipe.layout().sample_rate(),
            recipe: &self.recipe,
            host: None,
            free_rows: &self.wiring.free_rows,
            host_computed: 0,
        };
        let ends = (&self.wiring, &self.output);
        let r = stage::run(&mut runner, &mut intake, self.opts, &self.fed, ends);
        drop(stop_pool);
        while let Some(u) = self.fed.try_pop() {
            drop(u);
        }
        let (stats, host_computed) = (runner.stats(), intake.host_computed);
        let errors = runner.error_sink();
        drop(runner);
        drop(self.output);
        let ended = Ended {
            run: r,
            started,
            errors,
            stats,
        };
        ended.report(CudaReport {
            decode_threads: self.opts.decode_threads.max(1),
            host_decoded_files: stats.files + host_computed,
            host_computed_files: host_computed,
            ..self.report
        })
    }
}

/// The variable-length recipes' input: the samples the pool decoded, mono
/// f32 at the recipe's rate; an utterance longer than a batch holds is
/// computed here with the CPU recipe.
struct FramesIntake<'a> {
    free_samples: Arc<ArrayQueue<Vec<f32>>>,
    rate: u32,
    recipe: &'a Arc<dyn FrameRecipe>,
    /// The CPU recipe, for an utterance longer than a batch (made on first use).
    host: Option<Box<dyn FrameWorker>>,
    free_rows: &'a ArrayQueue<Vec<f32>>,
    host_computed: u64,
}

impl<D: Device> Intake<D> for FramesIntake<'_> {
    type Fed = Utterance;
    type Bytes = Samples;

    fn stage(&mut self, u: Utterance) -> Staged<usize, Samples> {
        let info = WavInfo {
            sample_rate: self.rate,
            channels: 1,
            format: SampleFormat::F32,
            block_align: 4,
            data_offset: 0,
            frames: u.samples.len(),
        };
        let bytes = Samples {
            samples: u.samples,
            free: Arc::clone(&self.free_samples),
        };
        Staged {
            tag: u.job,
            bytes,
            info,
        }
    }

    /// Computes an utterance too long for a batch with the CPU recipe.
    fn oversize(
        &mut self,
        staged: Staged<usize, Samples>,
        local: &mut Local,
    ) -> Result<Vec<f32>, Reject> {
        let worker = self.host.get_or_insert_with(|| self.recipe.worker());
        let mut row = self.free_rows.pop().unwrap_or_default();
        let (job, samples) = (staged.tag as u64, &staged.bytes.samples);
        let r = local.time(Stage::Mel, || worker.compute(samples, job, &mut row));
        self.host_computed += 1;
        r.map(|()| row).map_err(Reject::from)
    }
}
