//! What both CUDA stages (the librosa recipe's `backend`, the Kaldi and
//! Whisper recipes' `frames_stage`) are started with and give back: their
//! sizes ([`CudaOptions`]), the running stage ([`CudaWorkers`]: the decode
//! pool and the stage thread) and its report ([`CudaReport`]); and the
//! lifecycle both stage threads share: start-up answered once
//! ([`spawn_stage`], [`answer`]), the decode pool started behind it
//! ([`with_pool`]) and stopped however the thread ends ([`StopPool`]), the
//! loop's wait for the next file ([`next`]) and the report made of how the
//! run ended ([`Ended::report`]). What differs between the two is only how a
//! batch is filled and computed.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Error;
use super::cause::Cause;
use super::feed::Feed;
use super::orchestrate::RunnerStats;
use crate::runtime::ring::Ring;

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
    /// CPU threads decoding, in front of the device, the files it cannot
    /// decode itself (FLAC, resampled, `channels = "first"`); ≥ 1. The
    /// default is [`default_decode_threads`] for one reader.
    pub decode_threads: usize,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            batch_files: 256,
            slots: 2,
            flush_after: Duration::from_millis(20),
            f16_rows: false,
            decode_threads: default_decode_threads(1),
        }
    }
}

/// The decode threads `compute.decode_threads` asks for (`configured`), and
/// when that is 0 (the default), [`default_decode_threads`].
pub fn decode_threads(configured: usize, readers: usize) -> usize {
    match configured {
        0 => default_decode_threads(readers),
        n => n,
    }
}

/// Decode threads for a host running `readers` reader threads: every core
/// left after the readers and the CUDA stage thread, at least one.
pub fn default_decode_threads(readers: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    cores.saturating_sub(readers + 1).max(1)
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
    /// Threads of the decode pool in front of the device.
    pub decode_threads: usize,
    /// Files decoded by the pool into staged clips (the rest: on the device).
    pub host_decoded_files: u64,
    /// Files of a variable-length recipe too long for one device batch,
    /// computed by the stage thread on the CPU instead (`frames_stage`).
    pub host_computed_files: u64,
}

/// The stage thread's handle.
pub(super) type StageHandle = JoinHandle<Result<CudaReport, Error>>;

/// Starts the stage thread `body` (named `cuda`) and waits for it to be
/// ready: `body` reports its start-up (device, kernels, buffers) on the
/// sender it is given, `Ok` once it runs, else the error, after which the
/// thread is joined and the error returned.
pub(super) fn spawn_stage(
    body: impl FnOnce(mpsc::Sender<Result<(), Error>>) -> Result<CudaReport, Error> + Send + 'static,
) -> Result<StageHandle, Error> {
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), Error>>();
    let thread = std::thread::Builder::new()
        .name("cuda".into())
        .spawn(move || body(ready_tx))
        .map_err(|e| Cause::host("start the CUDA thread", e))?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(thread),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        Err(_) => Err(Cause::ThreadDied.into()),
    }
}

/// Answers the stage's start-up on `ready`: `Ok` with what opened, or the
/// error (sent to the starter, which returns it) and, for the thread's own
/// result, [`Cause::StartUpFailed`].
pub(super) fn answer<T>(
    opened: Result<T, Error>,
    ready: &mpsc::Sender<Result<(), Error>>,
) -> Result<T, Error> {
    match opened {
        Ok(v) => {
            let _gone = ready.send(Ok(()));
            Ok(v)
        }
        Err(e) => {
            let _gone = ready.send(Err(e));
            Err(Cause::StartUpFailed.into())
        }
    }
}

/// The decode pool `pool` in front of the running stage thread `thread`
/// (`wanted` threads asked for). When no pool thread started, every pool
/// guard is gone, so the stage thread sees a closed, empty input and ends:
/// it is joined and the spawn error returned.
pub(super) fn with_pool(
    pool: std::io::Result<Feed>,
    wanted: usize,
    thread: StageHandle,
) -> Result<CudaWorkers, Error> {
    match pool {
        Ok(feed) => {
            if feed.len() < wanted {
                tracing::warn!(
                    started = feed.len(),
                    wanted,
                    "Fewer decode threads run than asked for."
                );
            }
            Ok(CudaWorkers::new(feed, thread))
        }
        Err(e) => {
            let _ = thread.join();
            Err(Cause::host("start the decode threads", e).into())
        }
    }
}

/// Runs its closure when dropped: however a stage thread ends (a panic
/// included), its decode pool stops (its pushes fail, its waits for a
/// staging slot end).
pub(super) struct StopPool<F: FnMut()>(pub F);

impl<F: FnMut()> Drop for StopPool<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// What a stage loop takes next from its decode pool.
pub(super) enum Next<T> {
    File(T),
    /// Nothing arrived (the loop polled or flushed a due batch meanwhile).
    Idle,
    /// The input closed and is empty.
    Drained,
}

/// How long a stage loop sleeps when its input is empty and open: short
/// against a batch's compute, long enough not to spin a core.
const IDLE_SLEEP: Duration = Duration::from_micros(200);

/// The next file of `input`. While none is there and the input is open,
/// `idle` runs (complete the batches in flight, issue one that is due)
/// and the loop sleeps [`IDLE_SLEEP`]; a closed input is drained, then
/// [`Next::Drained`].
pub(super) fn next<T>(input: &Ring<T>, idle: impl FnOnce()) -> Next<T> {
    if let Some(x) = input.try_pop() {
        return Next::File(x);
    }
    if input.is_closed() {
        return input.pop().map_or(Next::Drained, Next::File);
    }
    idle();
    std::thread::sleep(IDLE_SLEEP);
    Next::Idle
}

/// How a stage thread's run ended, once its device work is dropped (and
/// its releases recorded in `errors`) and its output guard is gone.
pub(super) struct Ended {
    /// The loop's first device failure.
    pub run: Result<(), Cause>,
    /// When the stage thread started.
    pub started: Instant,
    /// Each release the device recorded as failed (`Device::attach_error_sink`).
    pub errors: Arc<Mutex<Vec<String>>>,
    pub stats: RunnerStats,
}

impl Ended {
    /// The stage's report: `report` (with what only the stage knows) plus
    /// the run's statistics and rates; or the run's failure, or the
    /// releases that failed.
    pub(super) fn report(self, report: CudaReport) -> Result<CudaReport, Error> {
        let failures = self.errors.lock().map(|e| e.clone()).unwrap_or_default();
        let run_s = self.started.elapsed().as_secs_f64();
        self.run.map_err(Error::Run)?;
        if !failures.is_empty() {
            return Err(Error::Teardown { failures });
        }
        let h2d_gb_per_s = self.stats.h2d_bytes as f64 / run_s.max(1e-9) / 1e9;
        Ok(CudaReport {
            runner: self.stats,
            run_s,
            h2d_gb_per_s,
            ..report
        })
    }
}

/// The running CUDA stage: the decode pool and the stage thread.
pub struct CudaWorkers {
    feed: Feed,
    thread: StageHandle,
}

impl CudaWorkers {
    /// The decode pool and the stage thread of a running stage.
    pub(super) fn new(feed: Feed, thread: StageHandle) -> CudaWorkers {
        CudaWorkers { feed, thread }
    }

    pub fn join(self) -> Result<CudaReport, Error> {
        let pool_ok = self.feed.join();
        let report = self.thread.join().map_err(|_| Error::Panicked)??;
        if !pool_ok {
            return Err(Error::Panicked);
        }
        Ok(report)
    }
}
