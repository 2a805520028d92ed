//! Flushes and journal commits from the serve loop, pipelined: on the flush
//! timer the loop asks the append thread for a flush
//! ([`crate::writer::append::AppendSink::start_flush`]) and *seals* what
//! that flush covers (the journal records staged so far, their rows'
//! post-commit actions, the rejections to log, the files they stand for);
//! then it goes on taking outcomes, which stage for the next commit. When
//! the thread answers, the loop commits exactly the sealed records
//! ([`crate::app::serve::journal::Journal::commit_first`]), then runs the
//! sealed actions. So the rule that makes serve exactly-once is unchanged:
//! a record is committed only after a flush that made its row durable, and
//! a source file is moved or deleted only after that commit.
//!
//! Why: the `fdatasync` of a split file took 4–10 ms of every 50 ms flush
//! on the dev VM, and the loop used to wait it out while the stage graph's
//! outcome ring (64 rows, 6 ms at 10,000 files/s) filled and stalled it.
//!
//! One flush is outstanding at most: a tick that finds one running waits
//! for the next tick. Paths that need everything durable now (`ctl flush`,
//! a rebuild's swap, shutdown) and a commit after which the journal is due
//! for compaction use [`Service::flush_commit`], which finishes the sealed
//! flush, then flushes and commits the rest while the loop waits.
//! A failed flush or commit degrades the service (`degraded`), which
//! forgets the sealed state along with everything since the last commit.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use super::{Error, Service, rejected};
use crate::app::serve::journal::FileStamp;
use crate::app::serve::sidecar;
use crate::compute::Rejection;
use crate::runtime::telemetry::Stage;

/// Something to do with a source file once the journal has confirmed it.
pub(super) enum After {
    Move(PathBuf, PathBuf),
    Delete(PathBuf),
}

/// What the files absorbed since the last seal leave for their commit: the
/// journal holds their records (staged), this the rest.
#[derive(Default)]
pub(super) struct Staged {
    after: Vec<After>,
    rejections: Vec<Rejection>,
    /// The files themselves: the journal's committed state does not list
    /// them yet, so `offer` checks here too.
    files: HashMap<String, FileStamp>,
    /// (ok, rejected) files among them.
    counts: (u64, u64),
}

impl Staged {
    /// A file's row was staged; `after` runs once it is committed.
    pub(super) fn row(&mut self, rel: String, stamp: FileStamp, after: Option<After>) {
        self.files.insert(rel, stamp);
        self.after.extend(after);
        self.counts.0 += 1;
    }

    /// A file's rejection was staged; `after` (a quarantine move) runs once
    /// it is committed, after its line is in `rejected.jsonl`.
    pub(super) fn rejected(&mut self, stamp: FileStamp, r: Rejection, after: Option<After>) {
        self.files.insert(r.path.clone(), stamp);
        self.rejections.push(r);
        self.after.extend(after);
        self.counts.1 += 1;
    }

    /// Whether `rel` at `stamp` is among them.
    pub(super) fn has(&self, rel: &str, stamp: FileStamp) -> bool {
        self.files.get(rel) == Some(&stamp)
    }

    /// (ok, rejected) files among them.
    pub(super) fn counts(&self) -> (u64, u64) {
        self.counts
    }

    fn is_empty(&self) -> bool {
        self.files.is_empty() && self.after.is_empty()
    }
}

/// What one started flush covers, committed once it answers.
pub(super) struct Sealed {
    /// Journal records staged before the flush was asked for.
    records: usize,
    /// Their rows, for the drop→commit clock.
    rows: usize,
    /// Everything else their files left for the commit.
    pub(super) staged: Staged,
}

impl Service {
    /// The flush timer: starts a flush of everything absorbed so far unless
    /// one is still running (or nothing is new); a journal due for
    /// compaction gets a full [`Service::flush_commit`] instead.
    pub(super) fn tick_flush(&mut self) -> Result<(), Error> {
        if self.sealed.is_some() || (self.journal.staged() == 0 && self.staged.is_empty()) {
            return Ok(());
        }
        if self.compaction_due() {
            return self.flush_commit();
        }
        self.seal_and_flush()
    }

    /// Each loop turn: commits the sealed flush once the thread answered.
    /// An error (the flush's or the commit's) leaves it sealed, for
    /// `degrade` to forget, counts included.
    pub(super) fn poll_flush(&mut self) -> Result<(), Error> {
        match self.sink.flushed() {
            None => Ok(()),
            Some(Err(e)) => Err(e.into()),
            Some(Ok(())) => {
                let sealed = self
                    .sealed
                    .take()
                    .expect("a flush answered that was started");
                self.commit_sealed(sealed)
            }
        }
    }

    /// Flushes every appender and commits everything, waiting for both:
    /// the sealed flush first, then the rest. Then compacts if due.
    pub(super) fn flush_commit(&mut self) -> Result<(), Error> {
        self.finish_sealed()?;
        self.seal_and_flush()?;
        self.finish_sealed()?;
        self.maybe_compact();
        Ok(())
    }

    /// Asks the append thread for a flush and seals what it covers.
    fn seal_and_flush(&mut self) -> Result<(), Error> {
        self.sink.start_flush()?;
        self.sealed = Some(Sealed {
            records: self.journal.staged(),
            rows: self.commits.waiting(),
            staged: std::mem::take(&mut self.staged),
        });
        Ok(())
    }

    /// Waits for the sealed flush, if any, and commits it.
    fn finish_sealed(&mut self) -> Result<(), Error> {
        if self.sealed.is_none() {
            return Ok(());
        }
        if let Some(Err(e)) = self.sink.wait_flushed() {
            return Err(e.into());
        }
        let sealed = self.sealed.take().expect("checked above");
        self.commit_sealed(sealed)
    }

    /// After its flush answered: the rejections' log, the journal commit of
    /// the sealed records, then the actions that waited for it.
    fn commit_sealed(&mut self, s: Sealed) -> Result<(), Error> {
        let t = Instant::now();
        // Durable before the journal commits the rejections (`rejected`).
        if !s.staged.rejections.is_empty() {
            let path = self.serve.output_dir.join("rejected.jsonl");
            if let Err(e) = rejected::append_durably(&path, &s.staged.rejections) {
                self.note_error(format!("cannot append to {}: {e}", path.display()));
            }
        }
        if let Err(e) = self.journal.commit_first(s.records) {
            // Sealed again, for `degrade` to forget with its files' counts.
            self.sealed = Some(s);
            return Err(e.into());
        }
        self.commits.committed_first(s.rows, s.records);
        if s.records > 0 {
            self.relax_backoff();
        }
        self.local.add_busy(Stage::Write, t.elapsed());
        self.local.publish(&self.telemetry);
        self.run_after(s.staged.after);
        Ok(())
    }

    /// The sidecar beside `p`, if the tree has held any (`sidecar::Seen`).
    fn sidecar_of(&self, p: &std::path::Path) -> Option<std::path::PathBuf> {
        self.sidecars.any().then(|| sidecar::beside(p)).flatten()
    }

    /// Moves and deletes of committed source files.
    fn run_after(&mut self, after: Vec<After>) {
        let mut moves = Vec::new();
        for a in after {
            match a {
                After::Delete(p) => {
                    // The sidecar first: a crash between the two leaves the
                    // file, whose commit the journal holds, not an orphan.
                    let side = self.sidecar_of(&p);
                    for p in side.iter().chain(std::iter::once(&p)) {
                        if let Err(e) = std::fs::remove_file(p) {
                            self.note_error(format!("cannot delete {}: {e}", p.display()));
                        }
                    }
                }
                After::Move(from, to) => {
                    if let Some(side) = self.sidecar_of(&from) {
                        let side_to = sidecar::moved_to(&from, &side, &to);
                        moves.push((side, side_to));
                    }
                    moves.push((from, to));
                }
            }
        }
        // One fsync per directory for the whole commit, not one per file.
        let results = crate::runtime::durable::move_all_durably(&moves);
        for ((from, to), r) in moves.iter().zip(results) {
            if let Err(e) = r {
                self.note_error(format!(
                    "cannot move {} to {}: {e}",
                    from.display(),
                    to.display()
                ));
            }
        }
    }
}
