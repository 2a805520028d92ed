//! Typed pipeline telemetry.
//!
//! Each stage thread keeps a private [`Local`] tally (no shared writes per
//! event) and publishes it into the shared [`Telemetry`] every few files and when
//! it stops, so the progress display and the end-of-run report read consistent
//! totals without any lock on the hot path.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
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
}

impl Local {
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
}
