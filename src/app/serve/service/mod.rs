//! The `serve` loop: one thread that owns the journal, the sink (SWMR
//! appenders, which write on a thread of their own) and every decision; the
//! other threads (signals, control socket, inotify, and the stage graph's
//! readers and compute) only feed it.
//!
//! ```text
//! watch ──paths──▶ ┐                          stage graph (crate::pipeline):
//! rescan ─────────▶ service loop ──ReadJob──▶ readers → compute (cpu | cuda)
//! signals/socket ─▶ │   ▲                                         │
//!                   │   └────────────── Outcome ──────────────────┘
//!                   │   sink: AppendSink (one SWMR appender per split, on
//!                   │         its own thread: `writer::append::thread`)
//!                   │   flush timer: a sink flush is started; once it answers,
//!                   │   the journal commit of what it covers, then post-commit
//!                   │   actions (move/delete/quarantine, rejected.jsonl): `commit`
//! ```
//!
//! The source is this loop (inotify + rescans, exactly-once checks against
//! the journal); the graph is the one `build` runs, GPU included: with the CUDA
//! stage a partial batch is computed once its first file has waited
//! `compute.max_batch_delay_ms`, well inside `flush_interval_ms`.
//!
//! Exactly once: a file is skipped when the journal confirms its (path, size,
//! mtime); rows become durable at a flush, and the journal records them only
//! after that flush (see `journal`; flushes run on the append thread while
//! the loop goes on, and a commit holds exactly what its flush covered:
//! `commit`). Post-commit actions (moving or deleting a
//! source file) run only after the commit, so a crash never loses a file that
//! has no confirmed row.
//!
//! Why one loop thread is enough: every decision about a file (exactly
//! once, order, commit) is taken here, and with the split files' HDF5 calls
//! on the append thread and flushes pipelined (`commit`) it costs 7.4 µs
//! per file on the 2-core dev VM, a ceiling of about 130,000 files/s
//! (docs/BENCHMARKS.md, "serve's appends on their own thread").
//!
//! A failed write (full disk, EIO) does not end the service: see `degraded`.
//!
//! Start to stop is `start`: plan (`Service::new`) → start (socket, endpoint,
//! watcher, first scan) → supervise (`event_loop`, here) → stop and report.
//!
//! Shutdown (SIGTERM/SIGINT or `shutdown`): stop watching and accepting, drop the
//! not-yet-started backlog (those files stay in the drop directory), finish the
//! files in flight, flush, commit, close the files, exit 0.

mod commit;
mod compaction;
mod degraded;
mod gpu_failure;
mod rejected;
mod reload;
mod report;
mod start;

pub use start::run;

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::json;

use super::rebuild::Rebuild;
use super::status::{RebuildStatus, State};
use super::watch::{Ignore, WatchEvent, Watcher, scan_tree_each};
use crate::app::control::{self, Command, Reply, Request, notify};
use crate::app::metrics::{self, CommitClock, Endpoint};
use crate::app::serve::journal::{FileStamp, Journal};
use crate::compute::{Outcome, Reject, Rejection};
use crate::config::Config;
use crate::config::serve::{OnSuccess, ServeConfig};
use crate::pipeline::{self, Delivered, Pipeline};
use crate::reader::ReadJob;
use crate::runtime::telemetry::{Local, Telemetry};
use crate::writer::Placed;
use crate::writer::append::{AppendSink, Dest};

/// A fatal service problem.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] crate::config::Error),
    #[error("{0} has no [serve] section (watch_dir and output_dir are required for serve)")]
    NoServe(String),
    #[error("cannot prepare {path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{0} holds HDF5 files but the state directory has no journal; refusing to touch them \
         (move them away, or point serve.state_dir at the journal that wrote them)"
    )]
    Orphans(PathBuf),
    #[error(transparent)]
    Journal(#[from] crate::app::serve::journal::Error),
    #[error(transparent)]
    Writer(#[from] crate::writer::Error),
    #[error(transparent)]
    Control(#[from] control::Error),
    #[error(transparent)]
    Pipeline(#[from] pipeline::Error),
    #[error(transparent)]
    Rebuild(#[from] super::rebuild::Error),
    #[error(transparent)]
    Metrics(#[from] metrics::Error),
    #[error(
        "the GPU failed during the run ({0}) and compute.backend = \"cuda\" requires it; \
         files not committed stay in the drop directory and are ingested at the next start"
    )]
    Gpu(String),
}

/// One file of the drop tree on its way through the pipeline.
#[derive(Clone, Debug)]
struct DropFile {
    abs: PathBuf,
    /// Where its row goes (`rel` is its path relative to the drop directory).
    dest: Dest,
    /// Size and mtime when it was offered (the journal's identity of the file).
    stamp: FileStamp,
    /// When it was offered (the start of its drop→commit latency).
    seen: Instant,
}

/// Something to do with a source file once the journal has confirmed it.
enum After {
    Move(PathBuf, PathBuf),
    Delete(PathBuf),
}

/// Everything the loop owns.
pub struct Service {
    config_path: PathBuf,
    cfg: Config,
    serve: ServeConfig,
    journal: Journal,
    sink: AppendSink,
    pipeline: Pipeline,
    telemetry: Arc<Telemetry>,
    local: Local,
    jobs: HashMap<usize, DropFile>,
    in_flight: HashSet<String>,
    /// Files absorbed (row appended or rejected) since the last journal commit:
    /// the journal's state does not list them yet, so `offer` checks here too.
    uncommitted: HashMap<String, FileStamp>,
    backlog: VecDeque<usize>,
    next_id: usize,
    after: Vec<After>,
    rejections: Vec<Rejection>,
    state: State,
    started: Instant,
    files_ok: u64,
    files_rejected: u64,
    last_error: Option<String>,
    rebuild: Option<Rebuild>,
    rebuild_report: Option<RebuildStatus>,
    /// (time, files done) at the last rate sample, and the rate then.
    rate: (Instant, u64, f64),
    /// Files ok and rejected since the last commit (forgotten if a write fails).
    since_commit: (u64, u64),
    /// The flush the append thread is doing and what its commit holds
    /// (`commit`).
    sealed: Option<commit::Sealed>,
    /// Set while writes fail; see `degraded`.
    degraded: Option<degraded::Degraded>,
    /// Wait before the next recovery attempt; relaxes after a good commit.
    backoff: Duration,
    /// Journal commits and drop→commit latency, for `stats` and metrics.
    commits: CommitClock,
    /// After a failed automatic compaction, the next is not tried before this.
    compact_after: Option<Instant>,
    /// The GPU's error, from the first file it failed until the loop
    /// replaces the stage graph (`gpu_failure`); nothing is fed meanwhile.
    compute_failed: Option<String>,
}

impl Service {
    /// A new append thread for the current config (the old one ends and is
    /// joined as it is replaced), with every split the journal has rows in
    /// opened.
    fn fresh_sink(&mut self) -> Result<(), Error> {
        self.sink = AppendSink::new(
            &self.serve.output_dir,
            &self.cfg,
            &self.serve.watch_dir,
            Arc::clone(&self.telemetry),
        )?;
        self.open_journal_splits()
    }

    /// Opens every split the journal has rows in (cutting unconfirmed rows).
    fn open_journal_splits(&mut self) -> Result<(), Error> {
        let splits: Vec<(String, usize)> = self
            .journal
            .state()
            .rows
            .keys()
            .map(|s| (s.clone(), self.journal.state().rows_of(s)))
            .collect();
        for (split, confirmed) in splits {
            self.sink.open(&split, confirmed)?;
        }
        Ok(())
    }

    /// Considers one file of the drop tree for ingest.
    fn offer(&mut self, abs: PathBuf) {
        let Ok(rel) = abs.strip_prefix(&self.serve.watch_dir) else {
            return;
        };
        let (rel, utf8) = match rel.to_str() {
            Some(r) => (r.to_string(), true),
            None => (crate::source::escape_path(rel), false),
        };
        if self.in_flight.contains(&rel) {
            return;
        }
        let Ok(meta) = std::fs::metadata(&abs) else {
            return; // vanished (moved on, or a rename chain): nothing to do
        };
        if !meta.is_file() {
            return;
        }
        let stamp = FileStamp::of(&meta);
        if self.uncommitted.get(&rel) == Some(&stamp)
            || self
                .sealed
                .as_ref()
                .is_some_and(|s| s.files.get(&rel) == Some(&stamp))
        {
            return;
        }
        match self.journal.lookup(&rel, stamp) {
            Ok(None) => {}
            Ok(Some(_)) => return,
            Err(e) => {
                // Unknown: ingesting could duplicate a row. The next rescan
                // (or restart) offers the file again.
                self.note_error(format!("cannot look {rel} up in the journal index: {e}"));
                return;
            }
        }
        if !utf8 {
            self.reject_unusable(abs, rel, stamp);
            return;
        }
        let parts: Vec<&str> = rel.split('/').collect();
        let (split, label) = crate::source::split_and_label(&parts);
        let id = self.next_id;
        self.next_id += 1;
        self.in_flight.insert(rel.clone());
        self.jobs.insert(
            id,
            DropFile {
                abs,
                dest: Dest { rel, split, label },
                stamp,
                seen: Instant::now(),
            },
        );
        self.backlog.push_back(id);
    }

    fn rescan(&mut self) {
        let ignore = Ignore {
            patterns: self.serve.ignore.clone(),
            extensions: self.cfg.input.extensions.clone(),
        };
        let dir = self.serve.watch_dir.clone();
        scan_tree_each(&dir, &ignore, &mut |f| self.offer(f));
    }

    /// Rejects a dropped file whose path cannot be a row's `path` (not UTF-8;
    /// `rel` is its escaped form) without reading it, like any rejection:
    /// journalled, logged, listed in `rejected.jsonl`, quarantined if set.
    fn reject_unusable(&mut self, abs: PathBuf, rel: String, stamp: FileStamp) {
        let kind = crate::compute::RejectKind::BadPath;
        let reason = "the name is not valid UTF-8 (shown with \\xNN escapes), so it cannot be \
                      a row's path; rename it to UTF-8"
            .to_string();
        tracing::warn!(path = %rel, kind = %kind, reason, "Rejected a dropped file.");
        self.journal.stage_reject(&rel, stamp, &reason);
        if let Some(q) = &self.serve.quarantine_dir {
            let to = q.join(abs.strip_prefix(&self.serve.watch_dir).unwrap_or(&abs));
            self.after.push(After::Move(abs, to));
        }
        self.local.file_done(Err(kind), &self.telemetry);
        self.local.publish(&self.telemetry);
        self.uncommitted.insert(rel.clone(), stamp);
        self.rejections.push(Rejection {
            path: rel,
            kind,
            reason,
        });
        self.files_rejected += 1;
        self.since_commit.1 += 1;
    }

    /// Moves backlog jobs into the reader's ring while it has room.
    fn feed(&mut self) {
        if self.state != State::Running || self.degraded.is_some() || self.compute_failed.is_some()
        {
            return;
        }
        while let Some(&id) = self.backlog.front() {
            let path = self.jobs[&id].abs.clone();
            if self.pipeline.jobs().try_push(ReadJob { id, path }).is_err() {
                break;
            }
            self.backlog.pop_front();
        }
    }

    /// Takes one computed file into its split (or records its rejection).
    fn absorb(&mut self, o: Outcome) -> Result<(), Error> {
        if let Err(Reject::Device(why)) = &o.row {
            // Not the file's fault: it is queued again (`gpu_failure`).
            let why = why.to_string();
            self.device_failed(&why);
            return Ok(());
        }
        let Some(DropFile {
            abs,
            dest: job,
            stamp,
            seen,
        }) = self.jobs.remove(&o.job)
        else {
            return Ok(());
        };
        self.in_flight.remove(&job.rel);
        self.uncommitted.insert(job.rel.clone(), stamp);
        // A file that changed while it was read (e.g. written in place into a
        // new directory and picked up by its scan before the writer closed it)
        // is offered again: its close event was skipped while it was in flight.
        let recheck = (self.serve.on_success == OnSuccess::Keep
            && (o.row.is_ok() || self.serve.quarantine_dir.is_none()))
        .then(|| (abs.clone(), stamp));
        if o.row.is_ok() {
            let confirmed = self.journal.state().rows_of(&job.split);
            self.sink.open(&job.split, confirmed)?;
        }
        let delivered = pipeline::deliver(
            &mut self.sink,
            &job,
            &job.rel,
            o.row,
            self.pipeline.free_rows(),
            &mut self.local,
            &self.telemetry,
        )?;
        match delivered {
            Delivered::Row(placed) => {
                let Placed::At { index } = placed else {
                    unreachable!("the append sink places every row at once")
                };
                self.journal.stage_row(&job.rel, stamp, &job.split, index);
                self.commits.staged(seen);
                self.files_ok += 1;
                self.since_commit.0 += 1;
                match self.serve.on_success {
                    OnSuccess::Keep => {}
                    OnSuccess::Delete => self.after.push(After::Delete(abs)),
                    OnSuccess::Move => {
                        let to = self
                            .serve
                            .done_dir
                            .as_ref()
                            .expect("validated: move has a done_dir")
                            .join(&job.rel);
                        self.after.push(After::Move(abs, to));
                    }
                }
            }
            Delivered::Rejected(r) => {
                tracing::warn!(
                    path = %r.path,
                    kind = %r.kind,
                    reason = %r.reason,
                    "Rejected a dropped file."
                );
                self.journal.stage_reject(&job.rel, stamp, &r.reason);
                if let Some(q) = &self.serve.quarantine_dir {
                    self.after.push(After::Move(abs, q.join(&job.rel)));
                }
                self.rejections.push(r);
                self.files_rejected += 1;
                self.since_commit.1 += 1;
            }
        }
        if let Some((abs, stamp)) = recheck
            && std::fs::metadata(&abs).is_ok_and(|m| FileStamp::of(&m) != stamp)
        {
            self.offer(abs);
        }
        Ok(())
    }

    fn note_error(&mut self, e: String) {
        tracing::error!(error = %e, "The service hit an error; it keeps running.");
        self.last_error = Some(e);
    }
}

impl Service {
    fn event_loop(
        &mut self,
        rx: &control::Receiver,
        watch_rx: &mpsc::Receiver<WatchEvent>,
        watch_tx: &mpsc::Sender<WatchEvent>,
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
                while let Ok(ev) = watch_rx.try_recv() {
                    match ev {
                        WatchEvent::File(p) => self.offer(p),
                        WatchEvent::Rescan => self.rescan(),
                        WatchEvent::Lost(why) => self.note_error(why),
                    }
                }
            }
            self.try_recover();
            self.feed();
            while let Some(o) = self.pipeline.outcomes().try_pop() {
                if let Err(e) = self.absorb(o) {
                    self.on_write_error(e)?;
                }
            }
            if let Err(e) = self.poll_flush() {
                self.on_write_error(e)?;
            }
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
                let status = match &self.degraded {
                    Some(d) => format!(
                        "Degraded for {:.0} s: {}; {} queued",
                        d.since.elapsed().as_secs_f64(),
                        d.error,
                        self.backlog.len()
                    ),
                    None => format!(
                        "{:?}: {} ok, {} rejected, {} queued",
                        self.state,
                        self.files_ok,
                        self.files_rejected,
                        self.backlog.len()
                    ),
                };
                notify::status(&status);
                next_status = now + Duration::from_secs(5);
            }
            if self.state == State::Stopping && self.jobs.len() == self.backlog.len() {
                return Ok(());
            }
        }
    }

    fn handle(
        &mut self,
        req: Request,
        watcher: &mut Option<Watcher>,
        watch_tx: &mpsc::Sender<WatchEvent>,
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
                tracing::info!("Shutting down: finishing the files in flight.");
                self.state = State::Stopping;
                // Answer before stopping the server: a client still waiting
                // once it stops would be told "the service is shutting down"
                // instead of this reply.
                req.respond(Reply::ok().with("state", "stopping"));
                if let Some(w) = watcher.take() {
                    w.stop();
                }
                server.stop_accepting();
                // Not yet started: leave them in the drop directory for next time.
                for id in std::mem::take(&mut self.backlog) {
                    if let Some(j) = self.jobs.remove(&id) {
                        self.in_flight.remove(&j.dest.rel);
                    }
                }
                return Ok(());
            }
            Command::Reload => self.reload(watcher, watch_tx),
            Command::Rebuild => self.start_rebuild(),
            Command::Compact => {
                if self.degraded.is_none()
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

    fn start_rebuild(&mut self) -> Reply {
        if self.rebuild.is_some() {
            return Reply::error("a rebuild is already running");
        }
        if let Some(d) = &self.degraded {
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
    fn poll_rebuild(&mut self) -> Result<(), Error> {
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
    fn swap_in(&mut self, done: super::rebuild::Finished) -> Result<(), Error> {
        // Drain: nothing new starts; finish what is in flight on the old config.
        let paused = self.state;
        self.state = State::Paused;
        while self.jobs.len() > self.backlog.len() {
            if self.compute_failed.is_some() {
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
        let backlog: Vec<PathBuf> = std::mem::take(&mut self.backlog)
            .into_iter()
            .filter_map(|id| self.jobs.remove(&id).map(|j| j.abs))
            .collect();
        self.in_flight.clear();
        for p in backlog {
            self.offer(p);
        }
        self.rescan();
        self.state = paused;
        tracing::info!(summary = %report, "Rebuild swapped in.");
        self.rebuild_report = Some(RebuildStatus::Done { summary: report });
        Ok(())
    }

    /// Final drain after the loop: flush, commit, close every file, stop ingest.
    fn finish(mut self) -> Result<(), Error> {
        if let Some(r) = self.rebuild.take() {
            r.abandon();
        }
        let flushed = self.flush_commit();
        let closed = self.sink.close_all().map_err(Error::Writer);
        self.pipeline.close();
        while self.pipeline.outcomes().pop().is_some() {}
        let joined = self.pipeline.join().map(|_| ()).map_err(Error::Pipeline);
        if flushed.is_ok() {
            tracing::info!(
                ingested = self.files_ok,
                rejected = self.files_rejected,
                "Stopped; every file ingested this run is committed."
            );
        } else {
            tracing::error!(
                "Stopped after a failed final flush: files since the last commit were not \
                 committed and will be ingested again at the next start."
            );
        }
        flushed.and(closed).and(joined)
    }
}
