//! The supervise step of serve (`start`'s third): the loop that runs until a
//! stop, and the commands it answers.
//!
//! Each turn, in this order: one control request (waiting up to 2 ms for
//! it), the watcher's events (files offered to the intake), a recovery
//! attempt while degraded, a rescan when the intake deferred files and has
//! room again (`intake`), feeding the readers, the outcomes, a finished
//! flush's commit, a failed GPU's replacement, a finished rebuild's swap,
//! the flush timer, the systemd watchdog and status line. The loop ends once
//! stopping and nothing is in flight.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::json;

use super::{Error, Service};
use crate::app::control::{self, Command, Reply, Request, notify};
use crate::app::serve::status::State;
use crate::app::serve::watch::{WatchEvent, Watcher};

impl Service {
    pub(super) fn event_loop(
        &mut self,
        rx: &control::Receiver,
        watch_rx: &mpsc::Receiver<WatchEvent>,
        watch_tx: &mpsc::SyncSender<WatchEvent>,
        watcher: &mut Option<Watcher>,
        server: &control::Server,
    ) -> Result<(), Error> {
        let flush_every = Duration::from_millis(self.serve.flush_interval_ms);
        let mut next_flush = Instant::now() + flush_every;
        let watchdog = notify::watchdog_interval().map(|d| d / 2);
        let mut next_ping = Instant::now();
        let mut next_status = Instant::now();
        loop {
            match rx.recv_timeout(Duration::from_millis(2)) {
                Ok(req) => self.handle(req, watcher, watch_tx, server)?,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => self.state = State::Stopping,
            }
            if self.state != State::Stopping {
                self.take_watch_events(watch_rx);
            }
            self.try_recover();
            self.feed();
            self.take_outcomes()?;
            self.replace_failed_compute()?;
            self.poll_rebuild()?;
            let now = Instant::now();
            if now >= next_flush {
                let flush_every = Duration::from_millis(self.serve.flush_interval_ms);
                next_flush = now + flush_every;
                if let Err(e) = self.tick_flush() {
                    self.on_write_error(e)?;
                }
            }
            if let Some(every) = watchdog
                && now >= next_ping
            {
                notify::watchdog();
                next_ping = now + every;
            }
            if now >= next_status {
                notify::status(&self.status_line());
                next_status = now + Duration::from_secs(5);
            }
            if self.state == State::Stopping && self.intake.in_flight() == 0 {
                return Ok(());
            }
        }
    }

    /// Offers the files the watcher reported; then, when the intake
    /// deferred files and has room again, rescans for them.
    fn take_watch_events(&mut self, watch_rx: &mpsc::Receiver<WatchEvent>) {
        while let Ok(ev) = watch_rx.try_recv() {
            match ev {
                WatchEvent::File(p) => {
                    let _full = self.offer(p);
                }
                WatchEvent::Rescan => self.rescan(),
                WatchEvent::Lost(why) => self.note_error(why),
            }
        }
        if self.intake.rescan_due() {
            tracing::debug!(
                queued = self.intake.queued(),
                max_queued_files = self.intake.capacity(),
                "The intake has room again: rescanning for the files it deferred."
            );
            self.rescan();
        }
    }

    /// Absorbs every outcome the stage graph has ready, then commits a
    /// flush that has answered; a failed write degrades.
    fn take_outcomes(&mut self) -> Result<(), Error> {
        while let Some(o) = self.pipeline.outcomes().try_pop() {
            if let Err(e) = self.absorb(o) {
                self.on_write_error(e)?;
            }
        }
        if let Err(e) = self.poll_flush() {
            self.on_write_error(e)?;
        }
        Ok(())
    }

    /// The sd_notify STATUS line.
    fn status_line(&self) -> String {
        let (queued, cap) = (self.intake.queued(), self.intake.capacity());
        match self.health.degraded() {
            Some(d) => format!(
                "Degraded for {:.0} s: {}; {queued}/{cap} queued",
                d.since.elapsed().as_secs_f64(),
                d.error,
            ),
            None => format!(
                "{:?}: {} ok, {} rejected, {queued}/{cap} queued",
                self.state,
                self.counters.files_ok(),
                self.counters.files_rejected(),
            ),
        }
    }

    fn handle(
        &mut self,
        req: Request,
        watcher: &mut Option<Watcher>,
        watch_tx: &mpsc::SyncSender<WatchEvent>,
        server: &control::Server,
    ) -> Result<(), Error> {
        tracing::debug!(command = %req.cmd, origin = ?req.origin, "Command received.");
        let reply = match req.cmd {
            Command::Status => self.status(),
            Command::Stats => self.stats(),
            Command::Pause => {
                if self.state == State::Running {
                    self.state = State::Paused;
                }
                Reply::ok().with("state", "paused")
            }
            Command::Resume => {
                if self.state == State::Paused {
                    self.state = State::Running;
                }
                Reply::ok().with("state", "running")
            }
            Command::Flush => match self.flush_commit() {
                Ok(()) => Reply::ok_with(json!({ "rows": self.sink.rows() })),
                Err(e) => {
                    let msg = e.to_string();
                    req.respond(Reply::error(msg));
                    return self.on_write_error(e);
                }
            },
            Command::Shutdown => {
                self.shut_down(req, watcher, server);
                return Ok(());
            }
            Command::Reload => self.reload(watcher, watch_tx),
            Command::Rebuild => self.start_rebuild(),
            Command::Compact => {
                if self.health.degraded().is_none()
                    && let Err(e) = self.flush_commit()
                {
                    req.respond(Reply::error(e.to_string()));
                    return self.on_write_error(e);
                }
                self.compact_now()
            }
        };
        req.respond(reply);
        Ok(())
    }

    /// `shutdown`: stop watching and accepting, leave the queued files in
    /// the drop directory for next time; the loop then finishes the files in
    /// flight.
    fn shut_down(&mut self, req: Request, watcher: &mut Option<Watcher>, server: &control::Server) {
        tracing::info!("Shutting down: finishing the files in flight.");
        self.state = State::Stopping;
        // Answer before stopping the server: a client still waiting once it
        // stops would be told "the service is shutting down" instead of this
        // reply.
        req.respond(Reply::ok().with("state", "stopping"));
        if let Some(w) = watcher.take() {
            w.stop();
        }
        server.stop_accepting();
        let _left = self.intake.take_queued();
    }
}
