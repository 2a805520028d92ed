//! Journal compaction from the serve loop: automatic when the journal's tail
//! or file passes `serve.compact_tail_entries` / `serve.compact_journal_bytes`
//! (checked after every commit and at start), and on `ctl compact`. The
//! compaction itself, and why a crash inside it is harmless, is
//! `app::serve::journal::compact`.

use std::time::{Duration, Instant};

use serde_json::json;

use super::Service;
use crate::app::control::Reply;
use crate::app::serve::journal::Limits;

impl Service {
    /// Compacts the journal when its tail or file has passed the configured
    /// limits (see `journal::compact`). A failure leaves the journal as it was
    /// (or already switched to the new checkpoint: both answer the same), is
    /// noted, and is retried a minute later.
    pub(super) fn maybe_compact(&mut self) {
        if self.journal.staged() > 0 || !self.compaction_due() {
            return;
        }
        match self.journal.compact() {
            Ok(_) => {
                self.compact_after = None;
                // Once per compaction cycle, HDF5's free lists too (the
                // compaction trimmed the heap of its own buffers already).
                crate::writer::append::release_free_lists();
                crate::runtime::sys::trim_heap();
            }
            Err(e) => {
                self.compact_after = Some(Instant::now() + Duration::from_secs(60));
                self.note_error(format!("cannot compact the journal: {e}"));
            }
        }
    }

    /// Whether the journal has passed its limits and may compact now (a
    /// failed compaction waits a minute). Compaction needs nothing staged,
    /// so the flush timer then commits everything at once (`commit`).
    pub(super) fn compaction_due(&self) -> bool {
        let limits = Limits {
            tail_entries: self.serve.compact_tail_entries,
            journal_bytes: self.serve.compact_journal_bytes,
        };
        self.journal.wants_compaction(&limits)
            && self.compact_after.is_none_or(|t| Instant::now() >= t)
    }

    /// `ctl compact` once what was staged is committed: compacts now.
    pub(super) fn compact_now(&mut self) -> Reply {
        if let Some(d) = self.health.degraded() {
            return Reply::error(format!(
                "cannot compact while writes fail (degraded: {})",
                d.error
            ));
        }
        match self.journal.compact() {
            Ok(c) => {
                self.compact_after = None;
                Reply::ok_with(json!({ "compaction": c, "journal": self.journal.info() }))
            }
            Err(e) => Reply::error(format!("cannot compact the journal: {e}")),
        }
    }
}
