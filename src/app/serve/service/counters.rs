//! The serve loop's file counts for `ctl status`, the sd_notify status line
//! and the final log line: files ingested and rejected since the start, and
//! the rate over the last few seconds.
//!
//! Invariant: a file counts once its outcome is absorbed; a failed write
//! takes back the files absorbed since the last commit ([`Counters::forget`]),
//! since they are ingested again after the recovery and count then.

use std::time::Instant;

/// See the module documentation.
pub(super) struct Counters {
    started: Instant,
    files_ok: u64,
    files_rejected: u64,
    /// (time, files done) at the last rate sample, and the rate then.
    rate: (Instant, u64, f64),
}

impl Counters {
    pub(super) fn new() -> Counters {
        let now = Instant::now();
        Counters {
            started: now,
            files_ok: 0,
            files_rejected: 0,
            rate: (now, 0, 0.0),
        }
    }

    /// A file's row was written.
    pub(super) fn ok(&mut self) {
        self.files_ok += 1;
    }

    /// A file was rejected.
    pub(super) fn rejected(&mut self) {
        self.files_rejected += 1;
    }

    /// Takes back `(ok, rejected)` files whose commit a failed write lost.
    pub(super) fn forget(&mut self, (ok, rejected): (u64, u64)) {
        self.files_ok -= ok;
        self.files_rejected -= rejected;
    }

    pub(super) fn files_ok(&self) -> u64 {
        self.files_ok
    }

    pub(super) fn files_rejected(&self) -> u64 {
        self.files_rejected
    }

    /// When the service started.
    pub(super) fn started(&self) -> Instant {
        self.started
    }

    /// Files done per second since the last sample, sampled at most once a
    /// second (a call within the second answers the last rate).
    pub(super) fn rate(&mut self, now: Instant) -> f64 {
        let done = self.files_ok + self.files_rejected;
        let (t0, d0, last) = self.rate;
        let dt = now.duration_since(t0).as_secs_f64();
        if dt < 1.0 {
            return last;
        }
        // Saturating: a failed write takes uncommitted files off the count.
        let r = done.saturating_sub(d0) as f64 / dt;
        self.rate = (now, done, r);
        r
    }
}
