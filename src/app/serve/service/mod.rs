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
//!                   │   sink: AppendSink (the one append `writer::Sink`; one
//!                   │         SWMR appender per split on its own thread)
//!                   │   flush timer: a sink flush is started; once it answers,
//!                   │   the journal commit of what it covers, then post-commit
//!                   │   actions (move/delete/quarantine, rejected.jsonl): `commit`
//! ```
//!
//! [`Service`] holds the configuration and the resources (journal, sink,
//! stage graph, telemetry) beside parts with one job each:
//! * `intake`: the files taken on and not yet finished (queued for the
//!   readers, in flight), bounded by `serve.max_queued_files`: files beyond
//!   it stay in the drop directory until a rescan finds room;
//! * `commit`: what the next commits hold (`Staged`, then `Sealed` while its
//!   flush runs);
//! * `counters`: files ingested and rejected, the rate;
//! * `health`: one value, healthy, degraded (writes fail: `degraded`) or
//!   compute failed (the GPU failed: `gpu_failure`).
//!
//! The source is this loop (inotify + rescans, exactly-once checks against
//! the journal); the graph is the one `build` runs, GPU included: with the CUDA
//! stage a partial batch is computed once its first file has waited
//! `compute.max_batch_delay_ms`, well inside `flush_interval_ms`.
//!
//! Exactly once: a file is skipped when the intake holds it, when it waits
//! for a commit, or when the journal confirms its (path, size, mtime); rows
//! become durable at a flush, and the journal records them only after that
//! flush (see `journal`; flushes run on the append thread while the loop
//! goes on, and a commit holds exactly what its flush covered: `commit`).
//! Post-commit actions (moving or deleting a source file) run only after the
//! commit, so a crash never loses a file that has no confirmed row.
//!
//! Memory follows the cap, not the drop directory: the intake holds at most
//! `max_queued_files` queued files (plus the stage graph's in flight), a
//! file seen while it is full costs nothing but a flag, and a rescan stops
//! as soon as the intake is full again (`intake`; docs/BENCHMARKS.md,
//! "serve under bursts").
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
//! watcher, first scan) → supervise (`Service::event_loop`: `supervise`) →
//! stop and report (`Service::finish`). A rebuild's swap is `swap`.
//!
//! Shutdown (SIGTERM/SIGINT or `shutdown`): stop watching and accepting, drop the
//! not-yet-started queue (those files stay in the drop directory), finish the
//! files in flight, flush, commit, close the files, exit 0.

mod commit;
mod compaction;
mod counters;
mod degraded;
mod gpu_failure;
mod health;
mod intake;
mod rejected;
mod reload;
mod report;
mod start;
mod supervise;
mod swap;

pub use start::run;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::rebuild::Rebuild;
use super::status::{RebuildStatus, State};
use super::watch::{Ignore, scan_tree_each};
use crate::app::control;
use crate::app::metrics::{self, CommitClock};
use crate::app::serve::journal::{FileStamp, Journal};
use crate::compute::{Outcome, Reject, RejectKind, Rejection};
use crate::config::Config;
use crate::config::serve::{OnSuccess, ServeConfig};
use crate::pipeline::{self, Delivered, Pipeline};
use crate::reader::ReadJob;
use crate::runtime::telemetry::{Local, Telemetry};
use crate::writer::Placed;
use crate::writer::append::{AppendSink, Dest};
use commit::{After, Sealed, Staged};
use counters::Counters;
use health::Health;
use intake::{DropFile, Intake};

/// A fatal service problem.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] crate::config::Error),
    #[error(
        "{} has no [serve] section (watch_dir and output_dir are required for serve)",
        .config.display()
    )]
    NoServe { config: PathBuf },
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
    Gpu(crate::compute::cuda::Cause),
}

/// Everything the loop owns: the configuration and the resources (journal,
/// sink, stage graph, telemetry), and the parts that each keep one kind of
/// state: `intake` (the files taken on, bounded), `staged`/`sealed` (what
/// the next commits hold: `commit`), `counters`, `health` (healthy, degraded,
/// compute failed: `health`).
pub struct Service {
    config_path: PathBuf,
    cfg: Config,
    serve: ServeConfig,
    journal: Journal,
    sink: AppendSink,
    pipeline: Pipeline,
    telemetry: Arc<Telemetry>,
    local: Local,
    intake: Intake,
    /// Absorbed since the last seal, for the next commit.
    staged: Staged,
    /// The flush the append thread is doing and what its commit holds.
    sealed: Option<Sealed>,
    counters: Counters,
    health: Health,
    /// Wait before the next recovery attempt; relaxes after a good commit
    /// (`degraded`).
    backoff: Duration,
    /// The operator's say: running, paused, stopping.
    state: State,
    /// Journal commits and drop→commit latency, for `stats` and metrics.
    commits: CommitClock,
    /// After a failed automatic compaction, the next is not tried before this.
    compact_after: Option<Instant>,
    rebuild: Option<Rebuild>,
    rebuild_report: Option<RebuildStatus>,
    last_error: Option<String>,
    /// Whether the drop tree has held a sidecar's name (`sidecar::Seen`).
    sidecars: super::sidecar::Seen,
}

impl Service {
    /// A new append thread for the current config (the old one ends and is
    /// joined as it is replaced), with every split the journal has rows in
    /// opened.
    fn fresh_sink(&mut self) -> Result<(), Error> {
        let layout = self.pipeline.recipe().layout().clone();
        self.sink = AppendSink::new(
            &self.serve.output_dir,
            (&self.cfg, layout),
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

    /// Considers one file of the drop tree for ingest. Breaks when the
    /// intake is full: the file stays in the drop directory, deferred to a
    /// later rescan (`intake`), and a rescan stops there.
    fn offer(&mut self, abs: PathBuf) -> ControlFlow<()> {
        let Ok(rel) = abs.strip_prefix(&self.serve.watch_dir) else {
            return ControlFlow::Continue(());
        };
        let (rel, utf8) = match rel.to_str() {
            Some(r) => (r.to_string(), true),
            None => (crate::plan::tree::escape_path(rel), false),
        };
        if self.intake.holds(&rel) {
            return ControlFlow::Continue(());
        }
        if self.intake.is_full() {
            self.intake.defer();
            return ControlFlow::Break(());
        }
        let Ok(meta) = std::fs::metadata(&abs) else {
            return ControlFlow::Continue(()); // vanished (moved on, or a rename chain)
        };
        let stamp = FileStamp::of(&meta);
        if !meta.is_file() || self.absorbed(&rel, stamp) {
            return ControlFlow::Continue(());
        }
        if !utf8 {
            let reason = "the name is not valid UTF-8 (shown with \\xNN escapes), so it cannot \
                          be a row's path; rename it to UTF-8";
            self.reject_unusable(abs, rel, stamp, RejectKind::BadPath, reason.into());
            return ControlFlow::Continue(());
        }
        // No `.json` name in the tree yet: no sidecar to look for.
        let sidecar = if self.sidecars.any() {
            super::sidecar::read(&abs)
        } else {
            Ok(None)
        };
        let meta = match sidecar {
            Ok(meta) => meta,
            Err(e) => {
                let reason = e.to_string();
                self.reject_unusable(abs, rel, stamp, RejectKind::BadSidecar, reason);
                return ControlFlow::Continue(());
            }
        };
        let parts: Vec<&str> = rel.split('/').collect();
        let (split, label) = crate::plan::tree::split_and_label(&parts);
        self.intake.admit(DropFile {
            abs,
            dest: Dest {
                rel,
                split,
                label,
                meta,
            },
            stamp,
            seen: Instant::now(),
        });
        ControlFlow::Continue(())
    }

    /// Whether `rel` at `stamp` was absorbed already: committed, or waiting
    /// for a commit. True also when the journal cannot tell (ingesting could
    /// duplicate a row; the next rescan, or restart, offers the file again).
    fn absorbed(&mut self, rel: &str, stamp: FileStamp) -> bool {
        if self.staged.has(rel, stamp)
            || self
                .sealed
                .as_ref()
                .is_some_and(|s| s.staged.has(rel, stamp))
        {
            return true;
        }
        match self.journal.lookup(rel, stamp) {
            Ok(found) => found.is_some(),
            Err(e) => {
                self.note_error(format!("cannot look {rel} up in the journal index: {e}"));
                true
            }
        }
    }

    /// Offers every file of the drop tree, in path order, until the intake
    /// is full.
    fn rescan(&mut self) {
        let ignore = Ignore {
            patterns: self.serve.ignore.clone(),
            extensions: self.cfg.input.extensions.clone(),
        };
        let dir = self.serve.watch_dir.clone();
        self.intake.rescan_started();
        let seen = self.sidecars.clone();
        let _full = scan_tree_each(&dir, &ignore, &seen, &mut |f| self.offer(f));
    }

    /// Rejects a dropped file it cannot take on (`kind`, `reason`: a name that is
    /// not UTF-8, `rel` being its escaped form; a sidecar that cannot supply its
    /// metadata) without reading it, like any rejection: journalled, logged,
    /// listed in `rejected.jsonl`, quarantined if set.
    fn reject_unusable(
        &mut self,
        abs: PathBuf,
        rel: String,
        stamp: FileStamp,
        kind: RejectKind,
        reason: String,
    ) {
        tracing::warn!(path = %rel, kind = %kind, reason, "Rejected a dropped file.");
        self.journal.stage_reject(&rel, stamp, &reason);
        let quarantine = self.serve.quarantine_dir.as_ref().map(|q| {
            let to = q.join(abs.strip_prefix(&self.serve.watch_dir).unwrap_or(&abs));
            After::Move(abs, to)
        });
        self.local.file_done(Err(kind), &self.telemetry);
        self.local.publish(&self.telemetry);
        let r = Rejection {
            path: rel,
            kind,
            reason,
            line: None,
        };
        self.staged.rejected(stamp, r, quarantine);
        self.counters.rejected();
    }

    /// Moves queued jobs into the reader's ring while it has room.
    fn feed(&mut self) {
        if self.state != State::Running || !self.health.feeds() {
            return;
        }
        while let Some((id, path)) = self.intake.front() {
            let job = ReadJob::whole(id, path.clone());
            if self.pipeline.jobs().try_push(job).is_err() {
                break;
            }
            self.intake.started_front();
        }
    }

    /// Takes one computed file into its split (or records its rejection).
    fn absorb(&mut self, o: Outcome) -> Result<(), Error> {
        if let Err(Reject::Device(why)) = &o.row {
            // Not the file's fault: it is queued again (`gpu_failure`).
            self.device_failed(why);
            return Ok(());
        }
        let Some(DropFile {
            abs,
            dest: job,
            stamp,
            seen,
        }) = self.intake.take(o.job)
        else {
            return Ok(());
        };
        // A file that changed while it was read (e.g. written in place into a
        // new directory and picked up by its scan before the writer closed it)
        // is offered again: its close event was skipped while it was in flight.
        let recheck = (self.serve.on_success == OnSuccess::Keep
            && (o.row.is_ok() || self.serve.quarantine_dir.is_none()))
        .then(|| (abs.clone(), stamp));
        let long = pipeline::too_large(&o.row)
            .then(|| self.pipeline.streamer())
            .flatten()
            .map(|streamer| pipeline::LongFile {
                streamer,
                path: &abs,
                segment: None,
                seed: o.job as u64,
            });
        if o.row.is_ok() || long.is_some() {
            let confirmed = self.journal.state().rows_of(&job.split);
            self.sink.open(&job.split, confirmed)?;
        }
        let delivered = pipeline::deliver(
            &mut self.sink,
            &job,
            &job.rel,
            (o.row, o.stats, long),
            self.pipeline.free_rows(),
            &mut self.local,
            &self.telemetry,
        )?;
        match delivered {
            Delivered::Held => unreachable!("the append sink writes a row in pieces at once"),
            Delivered::Row(placed) => {
                let Placed::At { index } = placed else {
                    unreachable!("the append sink places every row at once")
                };
                self.journal.stage_row(&job.rel, stamp, &job.split, index);
                self.commits.staged(seen);
                let after = self.after_row(abs, &job.rel);
                self.staged.row(job.rel, stamp, after);
                self.counters.ok();
            }
            Delivered::Rejected(r) => {
                tracing::warn!(
                    path = %r.path,
                    kind = %r.kind,
                    reason = %r.reason,
                    "Rejected a dropped file."
                );
                self.journal.stage_reject(&job.rel, stamp, &r.reason);
                let quarantine = (self.serve.quarantine_dir.as_ref())
                    .map(|q| After::Move(abs, q.join(&job.rel)));
                self.staged.rejected(stamp, r, quarantine);
                self.counters.rejected();
            }
        }
        if let Some((abs, stamp)) = recheck
            && std::fs::metadata(&abs).is_ok_and(|m| FileStamp::of(&m) != stamp)
        {
            let _full = self.offer(abs);
        }
        Ok(())
    }

    /// What `serve.on_success` does with the source file `abs` of a row
    /// once its commit is through.
    fn after_row(&self, abs: PathBuf, rel: &str) -> Option<After> {
        match self.serve.on_success {
            OnSuccess::Keep => None,
            OnSuccess::Delete => Some(After::Delete(abs)),
            OnSuccess::Move => {
                let done = self.serve.done_dir.as_ref();
                let to = done.expect("validated: move has a done_dir").join(rel);
                Some(After::Move(abs, to))
            }
        }
    }

    fn note_error(&mut self, e: String) {
        tracing::error!(error = %e, "The service hit an error; it keeps running.");
        self.last_error = Some(e);
    }
}
