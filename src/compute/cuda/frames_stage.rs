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
//! thread gathers the utterances of the open slot ([`FrameExec`]) and, when it
//! issues it, copies their samples into the slot's pinned buffer, and later
//! the rows out of its pinned output, on a few threads (`host_copy`: one
//! thread's copies were what held this stage back); a slot is issued when it holds `compute.batch_files`
//! utterances, when the next one would not fit its rows or samples, when its
//! first utterance has waited `compute.max_batch_delay_ms`, or at the end.
//! Two slots alternate: one is filled (and its copies run) while the other
//! computes. Rows leave in the row protocol of `crate::frames` (Whisper: the
//! pad value as trailer), as the CPU workers' do.
//!
//! An utterance longer than one batch holds (more than `ROWS_PER_BATCH`
//! frames: about 11 minutes at a 10 ms shift) is computed by the stage thread
//! with the CPU recipe instead (`host_computed_files` in the report).
//!
//! Failure: the first device error rejects every utterance the slots hold
//! with [`Reject::Device`] and every later one the same way (the pipeline
//! ends normally); [`CudaWorkers::join`] returns it.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Instant;

use crossbeam_queue::ArrayQueue;

use super::cause::Cause;
use super::device::{Device, DeviceError};
use super::feed::{Feed, recycle};
use super::frames_exec::{Capacity, FrameExec, FrameSlot, FrameTables};
use super::host_copy;
use super::orchestrate::RunnerStats;
use super::recipe_tables::Batch;
use super::workers::{
    CudaOptions, CudaReport, CudaWorkers, Ended, Next, StopPool, answer, next, spawn_stage,
    with_pool,
};
use super::{Error, device};
use crate::compute::{Outcome, Reject, Wiring};
use crate::decode::clip::{ClipDecoder, Policy};
use crate::frames::{FrameRecipe, FrameWorker};
use crate::reader::Loaded;
use crate::runtime::ring::{Producer, Ring};
use crate::runtime::telemetry::{Local, Stage, Telemetry};

/// One decoded file on its way to the device.
struct Utterance {
    job: usize,
    samples: Vec<f32>,
    rows: usize,
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
                    Ok(rows) => Ok(Utterance { job, samples, rows }),
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
        let opened = make().and_then(|mut dev| {
            let exec = FrameExec::new(&mut dev, self.tables.clone(), cap)?;
            let slots = [exec.slot(&mut dev)?, exec.slot(&mut dev)?];
            Ok((dev, exec, slots))
        });
        let opened = opened.map_err(|e| Error::from(Cause::StartUp(e)));
        let (dev, exec, slots) = answer(opened, &self.ready)?;
        let errors: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        let mut st = Frames {
            dev,
            exec,
            slots: slots.map(Slot::new),
            open: 0,
            opts: self.opts,
            free_rows: &self.wiring.free_rows,
            free_samples: &self.free_samples,
            output: &self.output,
            closed: false,
            failure: None,
            open_since: None,
            stats: RunnerStats::default(),
            host: None,
            recipe: &self.recipe,
            local: Local::serial(&self.wiring.telemetry, "cuda"),
            host_computed: 0,
            copy_threads: host_copy::copy_threads(
                std::thread::available_parallelism().map_or(1, |n| n.get()),
            ),
        };
        st.dev.attach_error_sink(Arc::clone(&errors));
        let r = st.run(&self.fed, &self.wiring.telemetry);
        drop(stop_pool);
        while let Some(u) = self.fed.try_pop() {
            drop(u);
        }
        let (stats, host_computed) = (st.stats, st.host_computed);
        drop(st);
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

/// One slot and the utterances it holds (open) or computes (busy).
struct Slot {
    slot: FrameSlot,
    /// The samples of the utterances taken, until the slot is issued.
    pending: Vec<Vec<f32>>,
    jobs: Vec<usize>,
    lengths: Vec<usize>,
    rows: usize,
    samples: usize,
    /// The batch in flight: the slot is busy until its rows are harvested.
    batch: Option<Batch>,
}

impl Slot {
    fn new(slot: FrameSlot) -> Slot {
        Slot {
            slot,
            pending: Vec::new(),
            jobs: Vec::new(),
            lengths: Vec::new(),
            rows: 0,
            samples: 0,
            batch: None,
        }
    }

    fn clear(&mut self) {
        self.jobs.clear();
        self.lengths.clear();
        self.rows = 0;
        self.samples = 0;
        self.batch = None;
    }
}

/// The stage loop's state.
struct Frames<'a, D: Device> {
    dev: D,
    exec: FrameExec,
    slots: [Slot; 2],
    /// The slot being filled (never busy).
    open: usize,
    opts: CudaOptions,
    free_rows: &'a ArrayQueue<Vec<f32>>,
    free_samples: &'a ArrayQueue<Vec<f32>>,
    output: &'a Producer<Outcome>,
    /// The output ring closed (the consumer is gone).
    closed: bool,
    failure: Option<Arc<Cause>>,
    open_since: Option<Instant>,
    stats: RunnerStats,
    /// The CPU recipe, for an utterance longer than a batch (made on first use).
    host: Option<Box<dyn FrameWorker>>,
    recipe: &'a Arc<dyn FrameRecipe>,
    local: Local,
    host_computed: u64,
    /// Threads for the host copies (`host_copy`).
    copy_threads: usize,
}

impl<D: Device> Frames<'_, D> {
    fn run(&mut self, input: &Ring<Utterance>, telemetry: &Telemetry) -> Result<(), Cause> {
        while !self.closed {
            match self.next(input) {
                Next::File(u) => self.take(u),
                Next::Idle => {}
                Next::Drained => break,
            }
        }
        if self.failure.is_none() && !self.closed {
            let r = self.finish();
            self.fail(r);
        }
        self.reject_held();
        self.local.publish(telemetry);
        match self.failure.take() {
            Some(f) => Err(Arc::unwrap_or_clone(f)),
            None => Ok(()),
        }
    }

    /// The next utterance; while none is there, harvests finished slots and
    /// issues the open one once its first utterance has waited long enough.
    fn next(&mut self, input: &Ring<Utterance>) -> Next<Utterance> {
        next(input, || {
            if self.failure.is_none() {
                let r = self.poll().and_then(|()| match self.open_since {
                    Some(t) if t.elapsed() >= self.opts.flush_after => self.submit(),
                    _ => Ok(()),
                });
                self.fail(r);
            }
        })
    }

    /// Adds one utterance to the open slot (issuing slots as they fill).
    fn take(&mut self, u: Utterance) {
        if let Some(f) = &self.failure {
            let why = Reject::Device(Arc::clone(f));
            self.send(u.job, Err(why));
            return;
        }
        let cap = self.exec.capacity();
        if u.samples.len() > cap.samples || u.rows > cap.rows {
            self.on_host(u);
            return;
        }
        let r = self.add(u);
        self.fail(r);
    }

    fn add(&mut self, u: Utterance) -> device::Result<()> {
        let cap = self.exec.capacity();
        let len = u.samples.len();
        let s = &self.slots[self.open];
        if s.jobs.len() >= cap.utts || s.samples + len > cap.samples || s.rows + u.rows > cap.rows {
            self.submit()?;
        }
        let s = &mut self.slots[self.open];
        debug_assert!(s.batch.is_none(), "the open slot is never busy");
        s.samples += len;
        s.rows += u.rows;
        s.jobs.push(u.job);
        s.lengths.push(len);
        s.pending.push(u.samples);
        self.open_since.get_or_insert_with(Instant::now);
        if s.jobs.len() >= self.opts.batch_files.max(1) {
            self.submit()?;
        }
        Ok(())
    }

    /// Computes an utterance too long for a batch with the CPU recipe.
    fn on_host(&mut self, u: Utterance) {
        let worker = self.host.get_or_insert_with(|| self.recipe.worker());
        let mut row = self.free_rows.pop().unwrap_or_default();
        let r = self.local.time(Stage::Mel, || {
            worker.compute(&u.samples, u.job as u64, &mut row)
        });
        self.host_computed += 1;
        let _full = self.free_samples.push(u.samples);
        self.send(u.job, r.map(|()| row).map_err(Reject::from));
    }

    /// Issues the open slot (if it holds anything) and opens the other one,
    /// waiting for it and harvesting its rows if it is still busy.
    fn submit(&mut self) -> device::Result<()> {
        self.open_since = None;
        let i = self.open;
        if self.slots[i].jobs.is_empty() {
            return Ok(());
        }
        let batch = self
            .exec
            .tables()
            .batch(&self.slots[i].lengths)
            .map_err(|e| DeviceError::new("issue", e))?;
        let (exec, dev, s) = (&self.exec, &mut self.dev, &mut self.slots[i]);
        // SAFETY: slot i is the open one, idle since it was last harvested:
        // `submit` waited for the slot it opened, nothing was issued since.
        let pinned = unsafe { exec.samples_mut(dev, &s.slot) }?;
        host_copy::gather(
            &s.pending,
            pinned,
            self.copy_threads,
            host_copy::PARALLEL_MIN_BYTES,
        );
        for v in s.pending.drain(..) {
            let _full = self.free_samples.push(v);
        }
        let slot = &s.slot;
        // SAFETY: as above.
        let r = self
            .local
            .time(Stage::Mel, || unsafe { exec.issue(dev, slot, &batch) });
        self.stats.batches += 1;
        self.stats.files += batch.len() as u64;
        self.stats.h2d_bytes += (batch.n_samples * 4 + batch.utts.len() * 16) as u64;
        self.stats.h2d_copies += 2;
        self.slots[i].batch = Some(batch);
        r?;
        self.open = 1 - i;
        if self.slots[self.open].batch.is_some() {
            let t = Instant::now();
            let done = self.slots[self.open].slot.done;
            self.dev.event_synchronize(done)?;
            self.stats.wait_s += t.elapsed().as_secs_f64();
            self.harvest(self.open);
        }
        Ok(())
    }

    /// Harvests every busy slot whose batch completed. Non-blocking.
    fn poll(&mut self) -> device::Result<()> {
        for i in 0..self.slots.len() {
            if self.slots[i].batch.is_some() && self.dev.event_query(self.slots[i].slot.done)? {
                self.harvest(i);
            }
        }
        Ok(())
    }

    /// Sends slot `i`'s rows on and frees it (its `done` completed).
    fn harvest(&mut self, i: usize) {
        let Some(batch) = self.slots[i].batch.take() else {
            return;
        };
        let n = self.slots[i].jobs.len();
        let slot = &self.slots[i].slot;
        // SAFETY: the slot's done event completed after this batch was
        // issued, and nothing was issued on the slot since.
        let src: Vec<_> = (0..n)
            .map(|u| unsafe { self.exec.rows(&self.dev, slot, &batch, u) })
            .collect();
        let mut rows: Vec<Vec<f32>> = (0..n)
            .map(|_| self.free_rows.pop().unwrap_or_default())
            .collect();
        host_copy::scatter(
            &src,
            &mut rows,
            self.copy_threads,
            host_copy::PARALLEL_MIN_BYTES,
        );
        for (&job, row) in self.slots[i].jobs.iter().zip(rows) {
            if self.output.push(Outcome::new(job, Ok(row))).is_err() {
                self.closed = true;
            }
        }
        self.slots[i].clear();
    }

    /// Issues what is open and waits for every batch.
    fn finish(&mut self) -> device::Result<()> {
        self.submit()?;
        let t = Instant::now();
        for i in 0..self.slots.len() {
            if self.slots[i].batch.is_some() {
                self.dev.event_synchronize(self.slots[i].slot.done)?;
                self.harvest(i);
            }
        }
        self.stats.wait_s += t.elapsed().as_secs_f64();
        Ok(())
    }

    /// Keeps the first device failure and rejects what the slots hold.
    fn fail(&mut self, r: device::Result<()>) {
        if let Err(e) = r {
            self.failure
                .get_or_insert_with(|| Arc::new(Cause::Device(e)));
            self.reject_held();
        }
    }

    /// After a failure (or at the end): every utterance still in a slot is
    /// rejected with the failure.
    fn reject_held(&mut self) {
        let Some(f) = self.failure.clone() else {
            return;
        };
        // The batch itself stays: Drop still waits for it before the
        // device (and the pinned memory its copies use) goes.
        for i in 0..self.slots.len() {
            let jobs = std::mem::take(&mut self.slots[i].jobs);
            for job in jobs {
                self.send(job, Err(Reject::Device(Arc::clone(&f))));
            }
            self.slots[i].lengths.clear();
            for v in self.slots[i].pending.drain(..) {
                let _full = self.free_samples.push(v);
            }
        }
    }

    fn send(&mut self, job: usize, row: Result<Vec<f32>, Reject>) {
        if self.output.push(Outcome::new(job, row)).is_err() {
            self.closed = true;
        }
    }
}

impl<D: Device> Drop for Frames<'_, D> {
    /// Waits for the batches still on the device (a failed or abandoned
    /// run), so no copy reads or writes pinned memory the device frees.
    fn drop(&mut self) {
        for s in &self.slots {
            if s.batch.is_some()
                && let Err(e) = self.dev.event_synchronize(s.slot.done)
            {
                tracing::error!(error = %e, "CUDA teardown: a batch did not complete.");
            }
        }
    }
}
