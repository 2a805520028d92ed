//! Journal compaction: the tail merged into a new index snapshot, the journal
//! rewritten as one checkpoint record. Bounds both the memory of the
//! exactly-once index and the size of the journal file.
//!
//! Order of writes, each durable before the next (a crash between any two
//! leaves a state directory that opens to exactly the committed set before
//! the compaction):
//!
//! 1. `index.<g+1>.tmp`: the old snapshot merged with the sorted tail
//!    (streaming), fsynced, renamed to `index.<g+1>`, directory fsynced. A
//!    crash here leaves a snapshot no journal names; the next open removes it.
//! 2. The new snapshot is opened (its checksum checked) before the journal
//!    names it.
//! 3. `journal.tmp`: header + checkpoint (commit count, rows per split, split
//!    table, generation g+1 with its entry count and checksum), fsynced, then
//!    renamed over `journal`. Before the rename the old journal (naming
//!    snapshot g, holding the tail) is live; after it the new one is, and both
//!    give the same answers. The descriptor the journal appends to is opened
//!    on `journal.tmp` before the rename, so later commits land in the new file.
//! 4. The directory is fsynced, then `index.<g>` is removed (so a crash that
//!    loses the rename still finds the old snapshot).
//!
//! Compaction runs at a commit boundary only (nothing staged), on the serve
//! loop's thread: a commit waits while it runs (it rewrites 32 B per file
//! ever ingested; 15–127 ms for 63k–254k entries in the soak of
//! docs/BENCHMARKS.md).

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::index::{self, Snapshot, WriteStep};
use super::{Error, Journal, Record, VERSION, encode, open_append};

/// When `serve` compacts by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Tail entries (files committed since the last snapshot).
    pub tail_entries: u64,
    /// Bytes of the journal file.
    pub journal_bytes: u64,
}

/// What one compaction did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Compaction {
    /// Wall-clock time it finished.
    pub at_unix_s: f64,
    pub took_s: f64,
    /// Generation and entries of the new snapshot.
    pub generation: u64,
    pub entries: u64,
    /// Tail entries merged in.
    pub merged: u64,
    pub journal_bytes_before: u64,
    pub journal_bytes_after: u64,
}

/// A point inside [`Journal::compact_with`] where a test hook may stop it,
/// standing for a crash there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Index(WriteStep),
    /// The new snapshot is in place and its directory entry durable.
    IndexInPlace,
    /// `journal.tmp` is written, not yet fsynced.
    JournalWritten,
    /// `journal.tmp` is fsynced, not yet renamed.
    JournalSynced,
    /// `journal.tmp` is renamed over `journal`; the directory not yet fsynced.
    JournalRenamed,
    /// The directory is fsynced; the old snapshot not yet removed.
    DirSynced,
    /// The old snapshot is removed.
    OldIndexRemoved,
}

impl Step {
    /// Every step, in the order a compaction reaches them.
    pub const ALL: [Step; 10] = [
        Step::Index(WriteStep::HalfWritten),
        Step::Index(WriteStep::Written),
        Step::Index(WriteStep::Synced),
        Step::Index(WriteStep::Renamed),
        Step::IndexInPlace,
        Step::JournalWritten,
        Step::JournalSynced,
        Step::JournalRenamed,
        Step::DirSynced,
        Step::OldIndexRemoved,
    ];
}

impl Journal {
    /// Whether the tail or the journal file has passed `limits`, or the
    /// journal is still version 1 with entries to migrate.
    pub fn wants_compaction(&self, limits: &Limits) -> bool {
        self.tail.len() as u64 >= limits.tail_entries.max(1)
            || self.bytes >= limits.journal_bytes
            || (self.state.version < VERSION && !self.tail.is_empty())
    }

    /// Merges the tail into a new snapshot and rewrites the journal as a
    /// checkpoint (module documentation). Nothing may be staged.
    pub fn compact(&mut self) -> Result<Compaction, Error> {
        self.compact_with(&mut |_| Ok(()))
    }

    /// [`Journal::compact`], calling `hook` at every [`Step`]; an error from
    /// the hook stops the compaction there without any cleanup, as a crash
    /// would (the journal must then be dropped and opened again, as after a
    /// crash).
    pub fn compact_with(
        &mut self,
        hook: &mut dyn FnMut(Step) -> std::io::Result<()>,
    ) -> Result<Compaction, Error> {
        if !self.staged_records.is_empty() {
            return Err(Error::Staged(self.staged_records.len()));
        }
        let t = Instant::now();
        let before = self.bytes;
        let generation = self
            .snapshot
            .as_ref()
            .map_or(0, |s| s.index_ref().generation)
            + 1;
        let mut tail = std::mem::take(&mut self.sorted);
        tail.clear();
        tail.extend(self.tail.iter().map(|(k, v)| (*k, *v)));
        tail.sort_unstable_by_key(|e| e.0);
        let merged = tail.len() as u64;
        let written = index::write_merged(
            &self.dir,
            generation,
            self.snapshot.as_ref(),
            &tail,
            &mut |s| hook(Step::Index(s)),
        );
        tail.clear();
        self.sorted = tail;
        let r = written?;
        let dir = self.dir.clone();
        let hooked = |step| {
            let path = dir.clone();
            move |source| Error::Io {
                path,
                action: match step {
                    Step::IndexInPlace => "write the index",
                    _ => "rewrite the journal",
                },
                source,
            }
        };
        hook(Step::IndexInPlace).map_err(hooked(Step::IndexInPlace))?;
        let snapshot = Snapshot::open(&self.dir, r)?;

        let mut text = Vec::new();
        encode(&Record::Journal { version: VERSION }, &mut text);
        encode(
            &Record::Checkpoint {
                seq: self.state.commits,
                rows: self.state.rows.clone(),
                splits: self.state.splits.clone(),
                index: r,
            },
            &mut text,
        );
        let tmp = self.dir.join("journal.tmp");
        let io = |action: &'static str| {
            let path = tmp.clone();
            move |source| Error::Io {
                path,
                action,
                source,
            }
        };
        std::fs::write(&tmp, &text).map_err(io("write the new journal"))?;
        hook(Step::JournalWritten).map_err(hooked(Step::JournalWritten))?;
        let file = open_append(&tmp)?;
        file.sync_all().map_err(io("sync the new journal"))?;
        hook(Step::JournalSynced).map_err(hooked(Step::JournalSynced))?;
        std::fs::rename(&tmp, &self.path).map_err(io("rename the new journal into place"))?;
        // From here on the new journal is the live one.
        self.file = file;
        self.bytes = text.len() as u64;
        self.tail.clear();
        let old = self.snapshot.replace(snapshot);
        self.state.version = VERSION;
        hook(Step::JournalRenamed).map_err(hooked(Step::JournalRenamed))?;
        index::sync_dir(&self.dir)?;
        hook(Step::DirSynced).map_err(hooked(Step::DirSynced))?;
        if let Some(old) = old {
            let p = self.dir.join(index::file_name(old.index_ref().generation));
            drop(old);
            if let Err(e) = std::fs::remove_file(&p) {
                tracing::warn!(file = %p.display(), error = %e, "Cannot remove an old index snapshot.");
            }
        }
        hook(Step::OldIndexRemoved).map_err(hooked(Step::OldIndexRemoved))?;
        let done = Compaction {
            at_unix_s: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            took_s: t.elapsed().as_secs_f64(),
            generation,
            entries: r.entries,
            merged,
            journal_bytes_before: before,
            journal_bytes_after: self.bytes,
        };
        self.compactions += 1;
        self.last_compaction = Some(done.clone());
        // The snapshot's read buffers and a tail map that grew are freed now.
        crate::runtime::sys::trim_heap();
        tracing::info!(
            generation,
            entries = r.entries,
            merged,
            journal_bytes_before = before,
            took_s = done.took_s,
            "Compacted the journal into an index snapshot."
        );
        Ok(done)
    }
}
