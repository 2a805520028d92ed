//! `ctl status` and `ctl stats` of the running service: the typed replies
//! (`app::serve::status`) read off the loop's own state and the stage graph.

use std::time::Instant;

use super::Service;
use crate::app::control::Reply;
use crate::app::serve::rebuild::Rebuild;
use crate::app::serve::status::{State, Stats, Status};

impl Service {
    pub(super) fn status(&mut self) -> Reply {
        let rate = self.counters.rate(Instant::now());
        let shape = self.pipeline.shape();
        let state = match (self.state, self.health.degraded()) {
            (State::Running | State::Paused, Some(_)) => State::Degraded,
            (s, _) => s,
        };
        Reply::ok_with(Status {
            state,
            uptime_s: self.counters.started().elapsed().as_secs_f64(),
            backend: shape.backend.clone(),
            backend_reason: shape.backend_reason.clone(),
            engine: shape.engine.clone(),
            watch_dir: self.serve.watch_dir.clone(),
            output_dir: self.serve.output_dir.clone(),
            files_ok: self.counters.files_ok(),
            files_rejected: self.counters.files_rejected(),
            rejected_by_kind: self.telemetry.rejected_by_kind(),
            files_per_s: rate,
            queued: self.intake.queued(),
            max_queued_files: self.intake.capacity(),
            deferred_files: self.intake.deferred_total(),
            in_flight: self.intake.in_flight(),
            rows: self.sink.rows(),
            rings: self.pipeline.ring_depths(),
            busy_s: self.telemetry.busy_seconds(),
            rebuild: self
                .rebuild
                .as_ref()
                .map(Rebuild::progress)
                .or(self.rebuild_report.clone()),
            last_error: self.last_error.clone(),
            journal: Some(self.journal.info()),
        })
    }

    /// The journal's side of `stats` and the metrics.
    fn journal_metrics(&self) -> crate::app::metrics::Journal {
        let mut j = self.commits.journal(self.journal.staged());
        let info = self.journal.info();
        j.index = crate::app::metrics::JournalIndex {
            journal_bytes: info.journal_bytes,
            entries: info.index_entries,
            tail_entries: info.tail_entries,
            compactions: info.compactions,
            last_compaction_unix_s: info.last_compaction.map_or(0.0, |c| c.at_unix_s),
        };
        j
    }

    pub(super) fn stats(&self) -> Reply {
        let shape = self.pipeline.shape();
        Reply::ok_with(Stats {
            backend: shape.backend.clone(),
            backend_reason: shape.backend_reason.clone(),
            engine: shape.engine.clone(),
            report: self.pipeline.report(self.counters.started()),
            rows: self.sink.rows(),
            queued: self.intake.queued(),
            max_queued_files: self.intake.capacity(),
            deferred_files: self.intake.deferred_total(),
            watch_dropped_events: crate::app::serve::watch::dropped_total(),
            in_flight: self.intake.in_flight(),
            rings: self.pipeline.ring_depths(),
            journal: self.journal_metrics(),
            degraded: self.health.degraded().map(|d| d.error.clone()),
        })
    }
}
