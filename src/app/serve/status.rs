//! What `ctl status` and `ctl stats` answer, as typed structs (serde both
//! ways: the service serialises them, `ctl` and tests read them back).
//!
//! Every field is read off the running stage graph, never assumed: the
//! backend is the one that runs and `backend_reason` the sentence that chose
//! it (e.g. "auto: libcuda.so.1 not found (no NVIDIA driver), so the CPU
//! backend is used").

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::app::control::{self, Command, Origin, Replier, Request};
use crate::app::metrics::{Intake as IntakeGauges, Journal, Snapshot, Source};
use crate::compute::RejectKind;
use crate::pipeline::RingDepth;
use crate::runtime::telemetry::{BusySeconds, Report};

/// The service's run state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Running,
    Paused,
    /// A write failed (e.g. a full disk): nothing is read until writes work
    /// again, which the service checks by itself; `last_error` says why.
    Degraded,
    Stopping,
}

/// A rebuild's progress or result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum RebuildStatus {
    Running {
        files_done: u64,
        files_total: usize,
        elapsed_s: f64,
    },
    Done {
        summary: String,
    },
    Failed {
        error: String,
    },
}

/// `ctl status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub state: State,
    pub uptime_s: f64,
    /// "cpu" or "cuda": the compute stage that runs.
    pub backend: String,
    /// Why that backend runs.
    pub backend_reason: String,
    /// "uring" or "std": the reader engine that runs.
    pub engine: String,
    pub watch_dir: PathBuf,
    pub output_dir: PathBuf,
    pub files_ok: u64,
    pub files_rejected: u64,
    /// Rejections per kind since start (kinds with none are left out).
    pub rejected_by_kind: BTreeMap<RejectKind, u64>,
    /// Files finished per second over the last few seconds.
    pub files_per_s: f64,
    /// Offered, not yet handed to the readers.
    pub queued: usize,
    /// The cap on `queued` (`serve.max_queued_files`).
    #[serde(default)]
    pub max_queued_files: usize,
    /// Sightings of files left in the drop directory because the queue was
    /// full, since the start (a later rescan offers them again).
    #[serde(default)]
    pub deferred_files: u64,
    /// Handed to the readers, not yet written or rejected.
    pub in_flight: usize,
    /// Rows per split file.
    pub rows: BTreeMap<String, usize>,
    /// Depth of each ring now, in stage order.
    pub rings: Vec<RingDepth>,
    /// Seconds each stage was busy since start.
    pub busy_s: BusySeconds,
    pub rebuild: Option<RebuildStatus>,
    pub last_error: Option<String>,
    /// The journal file and its exactly-once index: sizes, last compaction.
    #[serde(default)]
    pub journal: Option<crate::app::serve::journal::Info>,
}

/// `ctl stats`: the stage report (as `build --json` gives it), rows, and the
/// live gauges and journal numbers the metrics endpoint shows.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Stats {
    pub backend: String,
    pub backend_reason: String,
    pub engine: String,
    pub report: Report,
    pub rows: BTreeMap<String, usize>,
    /// Offered, not yet handed to the readers.
    pub queued: usize,
    /// The cap on `queued` (`serve.max_queued_files`).
    #[serde(default)]
    pub max_queued_files: usize,
    /// Sightings of files left in the drop directory because the queue was
    /// full, since the start.
    #[serde(default)]
    pub deferred_files: u64,
    /// inotify events the watcher dropped on its full channel since the
    /// start (each run of them followed by a rescan).
    #[serde(default)]
    pub watch_dropped_events: u64,
    /// Handed to the readers, not yet written or rejected.
    pub in_flight: usize,
    /// Depth of each ring now, in stage order.
    pub rings: Vec<RingDepth>,
    pub journal: Journal,
    /// Why writes fail, while the service is degraded (see `State::Degraded`).
    #[serde(default)]
    pub degraded: Option<String>,
}

impl Stats {
    /// What a scrape shows (`ctl stats --format prometheus` and `/metrics`).
    pub fn snapshot(&self) -> Snapshot {
        let r = &self.report;
        Snapshot {
            backend: self.backend.clone(),
            backend_reason: self.backend_reason.clone(),
            engine: self.engine.clone(),
            files_ok: r.files_ok,
            files_rejected: r.files_rejected,
            rejected_by_kind: r.rejected_by_kind.clone(),
            bytes_read: r.bytes_read,
            busy_s: r.busy_s.clone(),
            serial: r.serial.clone(),
            rings: self.rings.clone(),
            in_flight: self.in_flight as u64,
            queued: self.queued as u64,
            intake: Some(IntakeGauges {
                capacity: self.max_queued_files as u64,
                deferred: self.deferred_files,
                watch_dropped: self.watch_dropped_events,
            }),
            rows: self.rows.clone(),
            journal: Some(self.journal.clone()),
            degraded: self.degraded.is_some(),
        }
    }
}

/// How long a scrape waits for the service loop (which answers within a few
/// milliseconds unless it is stuck in a flush).
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// Snapshots from the serve loop behind `tx`.
pub fn from_service(tx: control::Sender) -> Source {
    // mpsc::Sender is Send but not Sync; the endpoint calls from one thread.
    let tx = Mutex::new(tx);
    Box::new(move || {
        let (reply, rx) = Replier::new();
        let req = Request {
            cmd: Command::Stats,
            origin: Origin::Metrics,
            reply: Some(reply),
        };
        tx.lock()
            .map_err(|_| "the metrics thread panicked before".to_string())?
            .send(req)
            .map_err(|_| "the service is shutting down".to_string())?;
        let reply = rx
            .recv_timeout(ANSWER_WITHIN)
            .map_err(|_| "the service did not answer in time".to_string())?;
        if !reply.is_ok() {
            return Err(format!("the service answered {}", reply.to_line()));
        }
        let value = serde_json::Value::Object(reply.as_map().clone());
        let stats: Stats = serde_json::from_value(value)
            .map_err(|e| format!("cannot read the stats reply: {e}"))?;
        Ok(stats.snapshot())
    })
}
