//! Where a scrape's [`Snapshot`] comes from.
//!
//! * `serve`: [`from_service`] asks the service loop for `stats` through the
//!   same command channel the control socket feeds (origin
//!   [`Origin::Metrics`]), so a scrape and `ctl stats` read the same numbers,
//!   taken by the one thread that owns them.
//! * `build`: [`from_pipeline`] reads the published telemetry and the ring
//!   depths of the running graph directly (atomic loads).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Snapshot;
use super::endpoint::Source;
use crate::app::control::{self, Command, Origin, Replier, Request};
use crate::app::serve::status::Stats;
use crate::pipeline::Pipeline;

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

/// Snapshots of a `build`'s running graph (no journal, nothing queued).
pub fn from_pipeline(p: Arc<Pipeline>, started: Instant) -> Source {
    Box::new(move || {
        let r = p.report(started);
        let shape = p.shape();
        Ok(Snapshot {
            backend: shape.backend.clone(),
            backend_reason: shape.backend_reason.clone(),
            engine: shape.engine.clone(),
            files_ok: r.files_ok,
            files_rejected: r.files_rejected,
            rejected_by_kind: r.rejected_by_kind,
            bytes_read: r.bytes_read,
            busy_s: r.busy_s,
            rings: p.ring_depths(),
            in_flight: 0,
            queued: 0,
            rows: Default::default(),
            journal: None,
            degraded: false,
        })
    })
}
