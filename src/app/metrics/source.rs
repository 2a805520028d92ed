//! Where a scrape's [`Snapshot`] comes from.
//!
//! * `serve`: `app::serve::status::from_service` asks the service loop for
//!   `stats` through the same command channel the control socket feeds
//!   (origin `Origin::Metrics`), so a scrape and `ctl stats` read the same
//!   numbers, taken by the one thread that owns them (it lives with serve's
//!   `Stats`, so this module never imports serve).
//! * `build`: [`from_pipeline`] reads the published telemetry and the ring
//!   depths of the running graph directly (atomic loads).

use std::sync::Arc;
use std::time::Instant;

use super::Snapshot;
use super::endpoint::Source;
use crate::pipeline::Pipeline;

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
            serial: r.serial,
            rings: p.ring_depths(),
            in_flight: 0,
            queued: 0,
            intake: None,
            rows: Default::default(),
            journal: None,
            degraded: false,
        })
    })
}
