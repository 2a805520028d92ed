//! Typed pipeline telemetry.
//!
//! Each stage thread keeps a private [`Local`] tally (no shared writes per
//! event) and publishes it into the shared [`Telemetry`] every few files and when
//! it stops, so the progress display and the end-of-run report read consistent
//! totals without any lock on the hot path.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::model::RejectKind;
use crate::runtime::clock;
use crate::runtime::ring::RingStats;

const KINDS: usize = RejectKind::ALL.len();

/// Pipeline stages whose busy time is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Read = 0,
    Decode = 1,
    Mel = 2,
    Write = 3,
}

const STAGES: usize = 4;

/// Shared, published totals.
#[derive(Debug, Default)]
pub struct Telemetry {
    busy_ns: [AtomicU64; STAGES],
    files_ok: AtomicU64,
    files_rejected: AtomicU64,
    rejected_by_kind: [AtomicU64; KINDS],
    bytes_read: AtomicU64,
    /// Nanoseconds from [`clock::process_start`] to the first job a reader
    /// took (its open is submitted at once); 0 until then.
    first_read_ns: AtomicU64,
    /// The single-threaded stages' own CPU clocks ([`Local::serial`]).
    serial: Mutex<Vec<Arc<SerialSlot>>>,
}

/// One single-threaded stage's published CPU time and files.
#[derive(Debug)]
struct SerialSlot {
    name: String,
    cpu_ns: AtomicU64,
    files: AtomicU64,
    /// The thread whose clock this is: the first to publish into it.
    owner: OnceLock<ThreadId>,
}

impl SerialSlot {
    /// Records the calling thread's CPU time so far and `files` more handled;
    /// a publish from another thread than the first would read the wrong
    /// clock and is ignored.
    fn record(&self, files: u64) {
        let me = std::thread::current().id();
        if *self.owner.get_or_init(|| me) != me {
            debug_assert!(false, "stage {} published from another thread", self.name);
            return;
        }
        let own = thread_cpu().saturating_sub(Duration::from_nanos(STOOD_IN_NS.get()));
        self.cpu_ns.store(own.as_nanos() as u64, Ordering::Relaxed);
        self.files.fetch_add(files, Ordering::Relaxed);
    }
}

/// CPU time the calling thread has run (`CLOCK_THREAD_CPUTIME_ID`): its
/// work, without the time it waited.
pub fn thread_cpu() -> Duration {
    super::sys::thread_cpu_time()
}

thread_local! {
    /// CPU time this thread spent standing in for a device ([`stand_in`]).
    static STOOD_IN_NS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Runs `f`, which does on this thread what a device does elsewhere (the
/// CUDA host double's kernels, copies and FFTs), and leaves its CPU time out
/// of the thread's serial stage ([`SerialStage`]): on a GPU that time is the
/// device's, not the stage's, so the host double's `cuda` stage shows its
/// host-side cost alone.
pub fn stand_in<R>(f: impl FnOnce() -> R) -> R {
    let before = thread_cpu();
    let r = f();
    let spent = thread_cpu().saturating_sub(before).as_nanos() as u64;
    STOOD_IN_NS.set(STOOD_IN_NS.get() + spent);
    r
}

/// A thread's private tally; publish with [`Local::publish`].
#[derive(Default)]
pub struct Local {
    busy_ns: [u64; STAGES],
    files_ok: u64,
    files_rejected: u64,
    rejected_by_kind: [u64; KINDS],
    bytes_read: u64,
    unpublished: u32,
    /// A single-threaded stage's clock ([`Local::serial`]).
    serial: Option<Arc<SerialSlot>>,
    /// Files this stage handled since the last publish.
    handled: u64,
}

impl Local {
    /// The tally of a single-threaded stage named `name` ("writer",
    /// "reader-0", "cuda", …): besides the counts, each [`publish`](Self::publish)
    /// records the publishing thread's own CPU time, which the report gives
    /// per file of the run ([`SerialStage`]). Publish only from the stage's
    /// thread.
    pub fn serial(shared: &Telemetry, name: impl Into<String>) -> Local {
        let slot = Arc::new(SerialSlot {
            name: name.into(),
            cpu_ns: AtomicU64::new(0),
            files: AtomicU64::new(0),
            owner: OnceLock::new(),
        });
        shared
            .serial
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Arc::clone(&slot));
        Local {
            serial: Some(slot),
            ..Local::default()
        }
    }

    /// Counts `n` files this stage handled (a reader's reads, say); finished
    /// files ([`file_done`](Self::file_done)) count by themselves.
    pub fn handled(&mut self, n: u64) {
        self.handled += n;
    }

    /// Runs `f`, charging its wall time to `stage`.
    pub fn time<R>(&mut self, stage: Stage, f: impl FnOnce() -> R) -> R {
        let t = Instant::now();
        let r = f();
        self.busy_ns[stage as usize] += t.elapsed().as_nanos() as u64;
        r
    }

    /// Charges a duration measured elsewhere (e.g. an engine's own clock) to `stage`.
    pub fn add_busy(&mut self, stage: Stage, d: Duration) {
        self.busy_ns[stage as usize] += d.as_nanos() as u64;
    }

    pub fn add_bytes(&mut self, n: u64) {
        self.bytes_read += n;
    }

    /// Counts one finished file (written, or rejected with its kind) and
    /// publishes every 32.
    pub fn file_done(&mut self, outcome: Result<(), RejectKind>, shared: &Telemetry) {
        self.handled += 1;
        match outcome {
            Ok(()) => self.files_ok += 1,
            Err(kind) => {
                self.files_rejected += 1;
                self.rejected_by_kind[kind.index()] += 1;
            }
        }
        self.unpublished += 1;
        if self.unpublished >= 32 {
            self.publish(shared);
        }
    }

    /// Moves the tally into the shared totals.
    pub fn publish(&mut self, shared: &Telemetry) {
        for (s, v) in shared.busy_ns.iter().zip(&mut self.busy_ns) {
            s.fetch_add(std::mem::take(v), Ordering::Relaxed);
        }
        shared
            .files_ok
            .fetch_add(std::mem::take(&mut self.files_ok), Ordering::Relaxed);
        shared
            .files_rejected
            .fetch_add(std::mem::take(&mut self.files_rejected), Ordering::Relaxed);
        for (s, v) in shared
            .rejected_by_kind
            .iter()
            .zip(&mut self.rejected_by_kind)
        {
            s.fetch_add(std::mem::take(v), Ordering::Relaxed);
        }
        shared
            .bytes_read
            .fetch_add(std::mem::take(&mut self.bytes_read), Ordering::Relaxed);
        if let Some(slot) = &self.serial {
            slot.record(std::mem::take(&mut self.handled));
        }
        self.unpublished = 0;
    }
}

impl Telemetry {
    /// Zeroes every total (a build that starts again from its first file
    /// after a failed attempt, for a caller that watches this telemetry).
    pub fn reset(&self) {
        let all = self.busy_ns.iter().chain(&self.rejected_by_kind).chain([
            &self.files_ok,
            &self.files_rejected,
            &self.bytes_read,
            &self.first_read_ns,
        ]);
        for a in all {
            a.store(0, Ordering::Relaxed);
        }
        self.serial_slots().clear();
    }

    /// Adds a serial stage measured by its own thread elsewhere (a pool
    /// thread that outlives the run): `cpu` and `files` are this run's share.
    pub fn record_serial(&self, name: impl Into<String>, cpu: Duration, files: u64) {
        let slot = Arc::new(SerialSlot {
            name: name.into(),
            cpu_ns: AtomicU64::new(cpu.as_nanos() as u64),
            files: AtomicU64::new(files),
            owner: OnceLock::new(),
        });
        self.serial_slots().push(slot);
    }

    fn serial_slots(&self) -> std::sync::MutexGuard<'_, Vec<Arc<SerialSlot>>> {
        self.serial
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Each single-threaded stage's CPU time as published, per file of
    /// `run_files` (the files the run finished: a stage that handled a share
    /// of them, as each of several readers does, caps the run at its own
    /// rate over the whole), in the order the stages started.
    pub fn serial_stages(&self, run_files: u64) -> Vec<SerialStage> {
        self.serial_slots()
            .iter()
            .map(|s| {
                let cpu_s = s.cpu_ns.load(Ordering::Relaxed) as f64 * 1e-9;
                SerialStage {
                    stage: s.name.clone(),
                    cpu_s,
                    files: s.files.load(Ordering::Relaxed),
                    cpu_us_per_file: cpu_s * 1e6 / run_files.max(1) as f64,
                }
            })
            .collect()
    }

    /// Records that a reader took its first job now, unless one already did
    /// (one relaxed load per reader burst once set).
    pub fn mark_first_read(&self) {
        if self.first_read_ns.load(Ordering::Relaxed) == 0 {
            let ns = (clock::process_start().elapsed().as_nanos() as u64).max(1);
            let _ =
                self.first_read_ns
                    .compare_exchange(0, ns, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Time from process start to the first read submitted, once there was one.
    pub fn first_read(&self) -> Option<Duration> {
        match self.first_read_ns.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// Files finished so far (accepted + rejected), as published.
    pub fn files_done(&self) -> u64 {
        self.files_ok.load(Ordering::Relaxed) + self.files_rejected.load(Ordering::Relaxed)
    }

    /// Files rejected so far, as published.
    pub fn files_rejected(&self) -> u64 {
        self.files_rejected.load(Ordering::Relaxed)
    }

    /// Input bytes read so far, as published.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }

    fn busy(&self, s: Stage) -> f64 {
        self.busy_ns[s as usize].load(Ordering::Relaxed) as f64 * 1e-9
    }

    /// Published rejections per kind (kinds with none are left out).
    pub fn rejected_by_kind(&self) -> BTreeMap<RejectKind, u64> {
        RejectKind::ALL
            .iter()
            .map(|&k| (k, self.rejected_by_kind[k.index()].load(Ordering::Relaxed)))
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    /// Published seconds each stage was busy, summed over its threads.
    pub fn busy_seconds(&self) -> BusySeconds {
        BusySeconds {
            read: self.busy(Stage::Read),
            decode: self.busy(Stage::Decode),
            mel: self.busy(Stage::Mel),
            write: self.busy(Stage::Write),
        }
    }

    /// The end-of-run report.
    pub fn report(&self, elapsed: Duration, rings: Vec<(&'static str, RingStats)>) -> Report {
        let files_ok = self.files_ok.load(Ordering::Relaxed);
        let files_rejected = self.files_rejected.load(Ordering::Relaxed);
        let secs = elapsed.as_secs_f64();
        let serial = self.serial_stages(files_ok + files_rejected);
        Report {
            files_ok,
            files_rejected,
            rejected_by_kind: self.rejected_by_kind(),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            elapsed_s: secs,
            files_per_s: if secs > 0.0 {
                (files_ok + files_rejected) as f64 / secs
            } else {
                0.0
            },
            busy_s: self.busy_seconds(),
            serial_ceiling_files_per_s: serial_ceiling(&serial),
            serial,
            rings: rings
                .into_iter()
                .map(|(name, stats)| RingReport {
                    name: name.to_string(),
                    stats,
                })
                .collect(),
        }
    }
}

/// Seconds each stage spent busy, summed over its threads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BusySeconds {
    pub read: f64,
    pub decode: f64,
    pub mel: f64,
    pub write: f64,
}

/// One single-threaded stage's own CPU time (`CLOCK_THREAD_CPUTIME_ID`,
/// not the wall time it waited, nor time spent in a device's stead:
/// [`stand_in`]), and what that costs each file of the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SerialStage {
    /// The stage's thread: "reader-0", "cuda", "writer", "serve", "append".
    pub stage: String,
    pub cpu_s: f64,
    /// Files the stage handled itself.
    pub files: u64,
    /// `cpu_s` in µs over the files the run finished.
    pub cpu_us_per_file: f64,
}

/// The most files per second the run's serial stages allow, however many
/// cores compute: 1e6 / the largest `cpu_us_per_file` (`None` with no
/// serial stage or no CPU time measured).
pub fn serial_ceiling(stages: &[SerialStage]) -> Option<f64> {
    let worst = stages.iter().map(|s| s.cpu_us_per_file).fold(0.0, f64::max);
    (worst > 0.0).then(|| 1e6 / worst)
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RingReport {
    pub name: String,
    #[serde(flatten)]
    pub stats: RingStats,
}

/// What a build did, for humans (Display) and machines (`--json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub files_ok: u64,
    pub files_rejected: u64,
    /// Rejections per kind (kinds with none are left out).
    pub rejected_by_kind: BTreeMap<RejectKind, u64>,
    pub bytes_read: u64,
    pub elapsed_s: f64,
    pub files_per_s: f64,
    pub busy_s: BusySeconds,
    /// The single-threaded stages' own CPU time ([`SerialStage`]).
    #[serde(default)]
    pub serial: Vec<SerialStage>,
    /// 1e6 / the largest serial `cpu_us_per_file` ([`serial_ceiling`]).
    #[serde(default)]
    pub serial_ceiling_files_per_s: Option<f64>,
    pub rings: Vec<RingReport>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "files: {} ok, {} rejected; {:.1} MiB read in {:.2} s ({:.0} files/s)",
            self.files_ok,
            self.files_rejected,
            self.bytes_read as f64 / (1 << 20) as f64,
            self.elapsed_s,
            self.files_per_s
        )?;
        if !self.rejected_by_kind.is_empty() {
            let kinds: Vec<String> = self
                .rejected_by_kind
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            writeln!(f, "rejected by kind: {}", kinds.join(", "))?;
        }
        let b = &self.busy_s;
        writeln!(
            f,
            "busy seconds: read {:.2}, decode {:.2}, mel {:.2}, write {:.2}",
            b.read, b.decode, b.mel, b.write
        )?;
        if !self.serial.is_empty() {
            let stages: Vec<String> = self
                .serial
                .iter()
                .map(|s| format!("{} {:.1}", s.stage, s.cpu_us_per_file))
                .collect();
            write!(f, "serial CPU µs per file: {}", stages.join(", "))?;
            match self.serial_ceiling_files_per_s {
                Some(c) => writeln!(f, " (ceiling {c:.0} files/s)")?,
                None => writeln!(f)?,
            }
        }
        for r in &self.rings {
            writeln!(
                f,
                "ring {}: capacity {}, mean depth {:.1}, max depth {}",
                r.name, r.stats.capacity, r.stats.mean_depth, r.stats.max_depth
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_tallies_reach_the_report_after_publish() {
        let shared = Telemetry::default();
        let mut l = Local::default();
        l.add_bytes(100);
        l.file_done(Ok(()), &shared);
        l.file_done(Err(RejectKind::Malformed), &shared);
        assert_eq!(shared.files_done(), 0, "nothing published before 32 files");
        l.time(Stage::Mel, || std::thread::sleep(Duration::from_millis(2)));
        l.publish(&shared);
        let r = shared.report(Duration::from_secs(1), vec![]);
        assert_eq!((r.files_ok, r.files_rejected, r.bytes_read), (1, 1, 100));
        assert_eq!(
            r.rejected_by_kind.into_iter().collect::<Vec<_>>(),
            vec![(RejectKind::Malformed, 1)]
        );
        assert!(r.busy_s.mel >= 0.002);
        assert_eq!(r.files_per_s, 2.0);
    }

    /// What a thread spends standing in for a device is not its stage's
    /// CPU time; what it spends on its own is.
    #[test]
    fn time_spent_standing_in_for_a_device_is_left_out_of_the_serial_stage() {
        fn spin(d: Duration) {
            let end = thread_cpu() + d;
            while thread_cpu() < end {
                std::hint::black_box(0u64);
            }
        }
        std::thread::spawn(|| {
            let shared = Telemetry::default();
            let mut l = Local::serial(&shared, "cuda");
            stand_in(|| spin(Duration::from_millis(60)));
            spin(Duration::from_millis(20));
            l.publish(&shared);
            let [stage] = &shared.serial_stages(1)[..] else {
                panic!("one serial stage");
            };
            assert!(
                stage.cpu_s >= 0.020,
                "its own 20 ms counts: {}",
                stage.cpu_s
            );
            assert!(
                stage.cpu_s < 0.060,
                "the 60 ms stood in do not: {}",
                stage.cpu_s
            );
        })
        .join()
        .unwrap();
    }
}
