//! The one batching loop of the CUDA stage thread, for every recipe: files
//! from the decode pool go into a [`BatchRunner`]; a batch is computed when
//! it holds `compute.batch_files` files, when the next file would not fit
//! its device input or its output rows, once its first file has waited
//! [`CudaOptions::flush_after`] (`compute.max_batch_delay_ms`, so a slow
//! trickle in `serve` is computed within that delay), or at the end. Rows
//! and rejections go to the output ring; the writer orders them by job, so
//! batch completion order does not matter.
//!
//! What differs between the inputs is an [`Intake`]: how a file the pool
//! hands on becomes what the runner takes (librosa: the file's own bytes or
//! a staged clip; Kaldi and Whisper: the decoded samples), and what becomes
//! of a file too large for an empty batch (librosa: rejected; Kaldi: its
//! rows computed on the host by the CPU recipe).
//!
//! Failure: the first device error rejects every file the runner holds (the
//! open batch and the batches in flight) with [`Reject::Device`], and every
//! later file the same way, so the pipeline ends normally; the loop returns
//! the error.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

use super::cause::Cause;
use super::device::{self, Device};
use super::orchestrate::{BatchRunner, HostBytes, Recipe, RowSink, Staged};
use super::workers::{CudaOptions, Next, next};
use crate::compute::{Outcome, Reject, Wiring};
use crate::runtime::ring::{Producer, Ring};
use crate::runtime::telemetry::{Local, Stage, Telemetry};

/// The input side of the loop: see the module doc.
pub(super) trait Intake<D: Device> {
    /// What the decode pool hands on.
    type Fed;
    /// The host bytes the runner copies.
    type Bytes: HostBytes;
    /// The file as the runner takes it (tagged with its job).
    fn stage(&mut self, fed: Self::Fed) -> Staged<usize, Self::Bytes>;
    /// Called before `staged` is added: the device is about to read its
    /// bytes (librosa registers the decode staging on first use).
    fn ready(&mut self, dev: &mut D, staged: &Staged<usize, Self::Bytes>) {
        let _unused = (dev, staged);
    }
    /// A file no empty batch holds: its row, or why it has none.
    fn oversize(
        &mut self,
        staged: Staged<usize, Self::Bytes>,
        local: &mut Local,
    ) -> Result<Vec<f32>, Reject>;
}

/// Where the stage's rows and rejections go: the output ring, with rows
/// from the free list.
struct Rows<'a> {
    free_rows: &'a ArrayQueue<Vec<f32>>,
    output: &'a Producer<Outcome>,
    /// The output ring closed (the consumer is gone): the loop ends.
    closed: bool,
}

impl RowSink<usize> for Rows<'_> {
    fn buffer(&mut self) -> Vec<f32> {
        self.free_rows.pop().unwrap_or_default()
    }

    fn row(&mut self, job: usize, row: Vec<f32>, stats: Option<crate::cmvn::RowStats>) {
        self.push(Outcome {
            job,
            row: Ok(row),
            stats,
        });
    }
}

impl Rows<'_> {
    fn send(&mut self, job: usize, row: Result<Vec<f32>, Reject>) {
        self.push(Outcome::new(job, row));
    }

    fn push(&mut self, outcome: Outcome) {
        if self.output.push(outcome).is_err() {
            self.closed = true;
        }
    }
}

/// Runs the loop until the pool's ring is drained (or the output closed);
/// returns the first device error, after rejecting what it hit.
pub(super) fn run<D, R, I>(
    runner: &mut BatchRunner<D, R, usize, I::Bytes>,
    intake: &mut I,
    opts: CudaOptions,
    input: &Ring<I::Fed>,
    (wiring, output): (&Wiring, &Producer<Outcome>),
) -> Result<(), Cause>
where
    D: Device,
    R: Recipe,
    I: Intake<D>,
{
    let mut st = StageLoop {
        runner,
        intake,
        opts,
        rows: Rows {
            free_rows: &wiring.free_rows,
            output,
            closed: false,
        },
        local: Local::serial(&wiring.telemetry, "cuda"),
        failure: None,
        open_since: None,
    };
    loop {
        let fed = match st.next(input) {
            Next::File(fed) => fed,
            Next::Drained => break,
            Next::Idle => {
                // A batch flushed for its delay (no new file) may have
                // failed: its files are answered now, not when the next
                // file comes (serve may have none to send).
                st.reject_unfinished();
                if st.rows.closed {
                    break;
                }
                continue;
            }
        };
        let staged = st.intake.stage(fed);
        // After a failure the file is rejected at once (and the loop goes
        // on taking files, so the pipeline ends).
        if st.take(staged) {
            st.reject_unfinished();
        }
        if st.rows.closed {
            break;
        }
    }
    st.finish(&wiring.telemetry)
}

/// The loop's state: the runner, the intake, where rows go, the first
/// device failure, and when the open batch's first file arrived.
struct StageLoop<'a, D: Device, R: Recipe, I: Intake<D>> {
    runner: &'a mut BatchRunner<D, R, usize, I::Bytes>,
    intake: &'a mut I,
    opts: CudaOptions,
    rows: Rows<'a>,
    local: Local,
    failure: Option<Arc<Cause>>,
    /// When the first file of the open batch arrived.
    open_since: Option<Instant>,
}

impl<D: Device, R: Recipe, I: Intake<D>> StageLoop<'_, D, R, I> {
    /// The next fed file; while none is there, completes batches in flight
    /// (nothing assembled) or flushes the open batch once it is due.
    fn next(&mut self, input: &Ring<I::Fed>) -> Next<I::Fed> {
        next(input, || {
            let (runner, rows) = (&mut *self.runner, &mut self.rows);
            let r = if runner.open_len() == 0 && self.failure.is_none() {
                // Nothing assembled: keep completing batches in flight.
                self.local.time(Stage::Mel, || runner.poll(rows))
            } else {
                let (open_since, delay) = (&mut self.open_since, self.opts.flush_after);
                (self.local).time(Stage::Mel, || flush_if_due(runner, open_since, delay, rows))
            };
            self.fail(r);
        })
    }

    /// Adds one file to the open batch and flushes what is full or due;
    /// true when a failure came first (the file was rejected instead).
    fn take(&mut self, staged: Staged<usize, I::Bytes>) -> bool {
        if let Some(f) = &self.failure {
            let job = staged.tag;
            drop(staged);
            self.rows.send(job, Err(Reject::Device(Arc::clone(f))));
            return true;
        }
        self.intake.ready(self.runner.device(), &staged);
        let r = self.add(staged);
        if self.runner.open_len() == 0 {
            self.open_since = None;
        } else {
            self.open_since.get_or_insert_with(Instant::now);
        }
        let (runner, rows) = (&mut *self.runner, &mut self.rows);
        let r = r.and_then(|()| {
            if runner.open_len() >= self.opts.batch_files.max(1) {
                self.open_since = None;
                self.local.time(Stage::Mel, || runner.flush(rows))
            } else {
                let (open_since, delay) = (&mut self.open_since, self.opts.flush_after);
                self.local.time(Stage::Mel, || {
                    flush_if_due(runner, open_since, delay, rows)?;
                    runner.poll(rows)
                })
            }
        });
        self.fail(r);
        false
    }

    /// Adds `staged` to the open batch, flushing a full batch once to make
    /// room; a file too large for an empty batch goes to the intake.
    fn add(&mut self, mut staged: Staged<usize, I::Bytes>) -> device::Result<()> {
        for _attempt in 0..2 {
            let (runner, rows) = (&mut *self.runner, &mut self.rows);
            match self.local.time(Stage::Mel, || runner.add(staged)) {
                Ok(()) => return Ok(()),
                Err(back) if runner.open_len() == 0 => {
                    staged = back;
                    break;
                }
                Err(back) => {
                    staged = back;
                    self.local.time(Stage::Mel, || runner.flush(rows))?;
                }
            }
        }
        let job = staged.tag;
        let row = self.intake.oversize(staged, &mut self.local);
        self.rows.send(job, row);
        Ok(())
    }

    /// Keeps the first device failure.
    fn fail(&mut self, r: device::Result<()>) {
        if let Err(e) = r {
            self.failure
                .get_or_insert_with(|| Arc::new(Cause::Device(e)));
        }
    }

    /// After a device failure: rejects every file the runner still holds
    /// (the open batch and the batches whose submit or completion failed).
    fn reject_unfinished(&mut self) {
        let Some(why) = self.failure.clone() else {
            return;
        };
        for s in self.runner.take_open() {
            self.rows.send(s.tag, Err(Reject::Device(Arc::clone(&why))));
        }
        for tag in self.runner.take_in_flight() {
            self.rows.send(tag, Err(Reject::Device(Arc::clone(&why))));
        }
    }

    /// Completes what is in flight (unless the device failed), rejects what
    /// is left, publishes the stage's telemetry.
    fn finish(mut self, telemetry: &Telemetry) -> Result<(), Cause> {
        if self.failure.is_none() && !self.rows.closed {
            let (runner, rows) = (&mut *self.runner, &mut self.rows);
            let r = self.local.time(Stage::Mel, || runner.finish(rows));
            self.fail(r);
        }
        self.reject_unfinished();
        self.local.publish(telemetry);
        match self.failure {
            Some(f) => Err(Arc::unwrap_or_clone(f)),
            None => Ok(()),
        }
    }
}

/// Computes the open batch if its first file has waited `delay` or longer.
fn flush_if_due<D: Device, R: Recipe, B: HostBytes>(
    runner: &mut BatchRunner<D, R, usize, B>,
    open_since: &mut Option<Instant>,
    delay: Duration,
    sink: &mut impl RowSink<usize>,
) -> device::Result<()> {
    match *open_since {
        Some(t) if t.elapsed() >= delay => {
            *open_since = None;
            runner.flush(sink)
        }
        _ => Ok(()),
    }
}
