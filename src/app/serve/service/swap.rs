//! `ctl rebuild` from the serve loop: starts a rebuild (`app::serve::rebuild`
//! runs an ordinary build into a staging directory while ingest goes on),
//! and once it has finished swaps its files and journal in: drain what is in
//! flight, flush and commit, close the files, install by rename, restart the
//! stage graph and the sink on the rebuild's config, and offer again what
//! was queued and whatever the rebuild did not see.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::health::Health;
use super::{Error, Service};
use crate::app::control::Reply;
use crate::app::serve::rebuild::{self, Rebuild};
use crate::app::serve::status::{RebuildStatus, State};
use crate::config::Config;
use crate::config::serve::OnSuccess;
use crate::pipeline::Pipeline;

impl Service {
    pub(super) fn start_rebuild(&mut self) -> Reply {
        if self.rebuild.is_some() {
            return Reply::error("a rebuild is already running");
        }
        if let Some(d) = self.health.degraded() {
            return Reply::error(format!(
                "cannot rebuild while writes fail (degraded: {})",
                d.error
            ));
        }
        if self.serve.on_success != OnSuccess::Keep {
            return Reply::error(
                "rebuild re-reads the drop directory, but serve.on_success moves or deletes \
                 ingested files; set on_success = \"keep\" to use rebuild",
            );
        }
        let cfg = match Config::load(&self.config_path) {
            Ok(c) => c,
            Err(e) => return Reply::error(format!("cannot read the config: {e}")),
        };
        match Rebuild::start(cfg, &self.serve) {
            Ok(r) => {
                let p = r.progress();
                self.rebuild = Some(r);
                Reply::ok_with(json!({ "rebuild": p }))
            }
            Err(e) => Reply::error(format!("cannot start the rebuild: {e}")),
        }
    }

    /// When a rebuild has finished, swaps its files and journal in.
    pub(super) fn poll_rebuild(&mut self) -> Result<(), Error> {
        if !self.rebuild.as_ref().is_some_and(Rebuild::is_finished) {
            return Ok(());
        }
        let rebuild = self.rebuild.take().expect("checked above");
        match rebuild.finish() {
            Err(e) => {
                self.note_error(format!("rebuild failed: {e}"));
                self.rebuild_report = Some(RebuildStatus::Failed {
                    error: e.to_string(),
                });
                Ok(())
            }
            Ok(done) => self.swap_in(done),
        }
    }

    /// Replaces the live files and journal with a finished rebuild's, restarts
    /// ingest with the rebuild's config, and re-offers every file the rebuild
    /// did not see.
    fn swap_in(&mut self, done: rebuild::Finished) -> Result<(), Error> {
        // Drain: nothing new starts; finish what is in flight on the old config.
        let paused = self.state;
        self.state = State::Paused;
        while self.intake.in_flight() > 0 {
            if matches!(self.health, Health::ComputeFailed { .. }) {
                // The GPU failed meanwhile: its files go back to the queue
                // (and `auto` moves to the CPU) before the swap.
                self.replace_failed_compute()?;
                continue;
            }
            match self
                .pipeline
                .outcomes()
                .pop_timeout(Duration::from_millis(50))
            {
                Some(o) => self.absorb(o)?,
                None => continue,
            }
        }
        self.flush_commit()?;
        self.sink.close_all()?;
        // Swap the files and the journal (each rename is atomic).
        let report = done.install(&self.serve, &mut self.journal)?;
        // The new journal holds every rebuilt file in its tail.
        self.maybe_compact();
        // Restart the stage graph with the new config.
        let old = std::mem::replace(
            &mut self.pipeline,
            Pipeline::start(&done.cfg, Arc::clone(&self.telemetry), 0)?,
        );
        old.close();
        while old.outcomes().pop().is_some() {}
        old.join()?;
        let new_cfg = done.cfg;
        self.cfg.spec = new_cfg.spec;
        self.cfg.output = new_cfg.output;
        self.fresh_sink()?;
        // Requeue the backlog, and offer everything the rebuild did not cover.
        for p in self.intake.take_queued() {
            let _full = self.offer(p);
        }
        self.rescan();
        self.state = paused;
        tracing::info!(summary = %report, "Rebuild swapped in.");
        self.rebuild_report = Some(RebuildStatus::Done { summary: report });
        Ok(())
    }
}
