//! serve's per-row metadata: the string column `meta` (`writer::strings`),
//! one entry per row, holding the JSON object of the dropped file's sidecar
//! (`<file>.json`), or the empty string for a file that had none. A
//! manifest build's files have a variable-length string dataset `meta`
//! (`writer::meta`), so a reader's `meta(i)` works on both.
//!
//! The column follows the rows' own rules (module doc of [`super`]): its
//! entries are written with the rows they belong to, flushed and synced
//! with them, and cut back to the journal's confirmed rows when the file is
//! opened. A file from before the column existed (or one whose column is
//! shorter than the rows confirmed) gets it on open, its missing entries
//! empty: the only state that open can meet, since every flush that
//! confirmed rows wrote their entries first. A file with the older
//! variable-length `meta` dataset has it converted on open ([`super::vlen`]).

use std::path::Path;

use hdf5::File;
use hdf5::types::VarLenUnicode;

use crate::writer::Error;
use crate::writer::strings::{self, Column};

/// The column's name.
const NAME: &str = "meta";

/// The `meta` column of an open split file and the entries not yet
/// written to it.
pub(super) struct MetaColumn {
    col: Column,
}

impl MetaColumn {
    /// Opens (or adds, or converts) `meta` in `file` (at `p`), holding the
    /// file's `rows` confirmed rows: entries past them are cut, missing
    /// ones added empty. Call before SWMR writing starts (it may create
    /// datasets).
    pub(super) fn open(file: &File, p: &Path, rows: usize, chunk: usize) -> Result<Self, Error> {
        let mut col = if strings::exists(file, NAME) {
            Column::open(file, p, NAME, rows)?
        } else if file.link_exists(NAME) {
            let old = super::vlen::take_strings(file, p, NAME, rows)?;
            Column::create(file, p, NAME, chunk, &old)?
        } else {
            Column::create::<&str>(file, p, NAME, chunk, &[])?
        };
        if col.rows() < rows {
            tracing::warn!(
                file = %p.display(),
                entries = col.rows(),
                rows,
                "Column `meta` is shorter than the rows; the rows past it get empty metadata."
            );
            for _ in col.rows()..rows {
                col.push("");
            }
            col.write(p)?;
        }
        Ok(MetaColumn { col })
    }

    /// The entry of a row: `json` (a JSON object's text), or empty; an
    /// error when it cannot be stored (a NUL byte: a build file's
    /// variable-length `meta` could not hold it either).
    pub(super) fn entry(json: Option<&str>) -> Result<VarLenUnicode, Error> {
        Ok(crate::writer::plan_error::storable(
            "metadata",
            json.unwrap_or(""),
        )?)
    }

    /// Buffers the entry of the next row (from [`MetaColumn::entry`]).
    pub(super) fn push(&mut self, entry: &VarLenUnicode) {
        self.col.push(entry.as_str());
    }

    /// Bytes the buffered entries take in the file (for the space
    /// reservation).
    pub(super) fn pending_bytes(&self) -> usize {
        self.col.pending_bytes()
    }

    /// Writes the buffered entries at row `at` (where the rows they belong
    /// to are written) and empties the buffer.
    pub(super) fn write(&mut self, p: &Path, at: usize) -> Result<(), Error> {
        debug_assert!(self.col.pending_rows() == 0 || self.col.rows() == at);
        self.col.write(p)
    }
}
