//! Degraded mode: a write that fails (the output or state disk full, EIO, a
//! journal append that tears) pauses ingest instead of ending the service.
//!
//! On a failed write the loop does what a crash and restart would, without
//! exiting: it waits for the files in flight (their rows are dropped), closes
//! the split files, and forgets everything since the last commit (staged
//! journal records, post-commit actions, rejections to log). Those files are
//! still in the drop directory. The state is then `degraded`, with the error,
//! in `ctl status` and the sd_notify STATUS line, and nothing new is read.
//!
//! Every [`SPACE_POLL`] the loop looks at the free space of the output and
//! state directories; once there is room for a chunk of rows per split and
//! HDF5's metadata, it re-reads the journal (cutting a torn commit), reopens
//! the split files with the rows the journal confirms (cutting rows written
//! after the last commit), rescans the drop directory and resumes. A recovery
//! that fails is retried after a backoff that doubles up to [`MAX_BACKOFF`];
//! the backoff relaxes only after a commit succeeds, so a disk that fills
//! again at once does not make the service re-read the same files in a loop.
//!
//! Exactly-once holds because this is the restart path the kill -9 tests
//! exercise: rows count only once the journal confirms them. The appender
//! reserves disk space before HDF5 writes (`writer::append`), so a full disk
//! never leaves a split file HDF5 cannot reopen.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::health::{Degraded, Health};
use super::{Error, Service};
use crate::app::control::notify;
use crate::runtime::sys;
use crate::writer::append::METADATA_HEADROOM;

/// First wait before a recovery is tried again after one failed.
pub(super) const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// Longest wait between recovery attempts.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How often the free space is checked while there is too little.
pub(super) const SPACE_POLL: Duration = Duration::from_millis(500);
/// Free space the state directory needs before ingest resumes.
const STATE_DIR_NEED: u64 = 1 << 20;

impl Service {
    /// Takes an error from ingest or a flush: a failed write degrades the
    /// service (see the module doc); anything else is passed up as fatal.
    pub(super) fn on_write_error(&mut self, e: Error) -> Result<(), Error> {
        match e {
            Error::Writer(_) | Error::Journal(_) => {
                self.degrade(e.to_string());
                Ok(())
            }
            other => Err(other),
        }
    }

    fn degrade(&mut self, error: String) {
        tracing::error!(
            error,
            "A write failed; ingest is paused and resumes by itself once writes work again. \
             Files not yet committed stay in the drop directory and are ingested then."
        );
        self.last_error = Some(error.clone());
        self.discard_in_flight();
        // Closing the files writes only metadata the last reservation covers.
        self.sink.abandon_all();
        self.journal.discard_staged();
        self.commits.forget_staged();
        // A started flush is forgotten with it (`abandon_all` took its answer).
        let sealed = self.sealed.take().map(|s| s.staged.counts());
        let staged = std::mem::take(&mut self.staged).counts();
        for counts in sealed.into_iter().chain([staged]) {
            self.counters.forget(counts);
        }
        let now = Instant::now();
        let next_try = now + self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        match self.health.degraded_mut() {
            Some(d) => {
                d.error = error.clone();
                d.next_try = next_try;
            }
            None => {
                let d = Degraded {
                    error: error.clone(),
                    since: now,
                    next_try,
                };
                match &mut self.health {
                    Health::ComputeFailed { degraded, .. } => *degraded = Some(d),
                    h => *h = Health::Degraded(d),
                }
            }
        }
        notify::status(&format!("Degraded: {error}"));
    }

    /// A commit went through: the next failure waits [`FIRST_BACKOFF`] again.
    pub(super) fn relax_backoff(&mut self) {
        self.backoff = FIRST_BACKOFF;
    }

    /// Waits for the outcomes of every file the readers started; their rows
    /// go back to the compute stage unwritten.
    fn discard_in_flight(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.intake.in_flight() > 0 && Instant::now() < deadline {
            let outcomes = self.pipeline.outcomes();
            let Some(o) = outcomes.pop_timeout(Duration::from_millis(50)) else {
                // An aborted stage graph (a failed GPU) sends nothing more;
                // its files stay jobs and are queued again.
                if outcomes.is_closed() && outcomes.is_empty() {
                    break;
                }
                continue;
            };
            let _discarded = self.intake.take(o.job);
            if let Ok(row) = o.row {
                let _full = self.pipeline.free_rows().push(row);
            }
        }
    }

    /// While degraded: resumes once there is space and the files reopen.
    pub(super) fn try_recover(&mut self) {
        let now = Instant::now();
        if self.health.degraded().is_none_or(|d| now < d.next_try) {
            return;
        }
        if let Some((dir, free, need)) = self.space_shortfall() {
            tracing::debug!(
                dir = %dir.display(),
                free,
                need,
                "Still too little free space to resume."
            );
            if let Some(d) = self.health.degraded_mut() {
                d.next_try = now + SPACE_POLL;
            }
            return;
        }
        match self.reopen_outputs() {
            Ok(()) => {
                let since = self.health.degraded().expect("checked above").since;
                self.health.recovered();
                tracing::info!(
                    degraded_s = since.elapsed().as_secs_f64(),
                    "Writes work again: ingest resumed; rescanning the drop directory."
                );
                self.rescan();
            }
            Err(e) => {
                // Files half-open from this attempt are closed again.
                self.sink.abandon_all();
                let wait = self.backoff;
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                let error = e.to_string();
                tracing::warn!(
                    error,
                    retry_in_s = wait.as_secs_f64(),
                    "Cannot resume ingest yet."
                );
                self.last_error = Some(error.clone());
                if let Some(d) = self.health.degraded_mut() {
                    d.error = error;
                    d.next_try = now + wait;
                }
            }
        }
    }

    /// The journal as on disk and the split files as it confirms them.
    fn reopen_outputs(&mut self) -> Result<(), Error> {
        self.journal.reopen()?;
        self.fresh_sink()
    }

    /// A directory with less free space than ingest needs to resume: (dir,
    /// free bytes, bytes needed). None when both have enough, or when the
    /// free space cannot be read (the reopen then decides).
    fn space_shortfall(&self) -> Option<(PathBuf, u64, u64)> {
        let out = &self.cfg.output;
        let chunk = (out.chunk_files * self.cfg.spec.row_len() * out.dtype.size()) as u64;
        let need_out = 2 * chunk + METADATA_HEADROOM;
        [
            (&self.serve.output_dir, need_out),
            (&self.serve.state_dir, STATE_DIR_NEED),
        ]
        .into_iter()
        .find_map(|(dir, need)| {
            let f = std::fs::File::open(dir).ok()?;
            let free = sys::available_bytes(std::os::fd::AsFd::as_fd(&f)).ok()?;
            (free < need).then(|| (dir.clone(), free, need))
        })
    }
}
