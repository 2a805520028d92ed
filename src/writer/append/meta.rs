//! serve's per-row metadata: the 1-D string dataset `meta`, one entry per
//! row, holding the JSON object of the dropped file's sidecar
//! (`<file>.json`), or the empty string for a file that had none. A manifest
//! build's files have the same dataset (`writer::meta`), so a reader's
//! `meta(i)` works on both.
//!
//! The column follows the rows' own rules (module doc of [`super`]): its
//! entries are written with the rows they belong to, flushed and synced
//! with them, and cut back to the journal's confirmed rows when the file is
//! opened. It is a variable-length string dataset like `path`, so the
//! references a killed writer left past the rows kept are nulled before
//! rows are written there ([`super::vlen`]). A file from before the column
//! existed (or one whose column is shorter than the rows confirmed) gets it
//! on open, its missing entries empty: the only state that open can meet,
//! since every flush that confirmed rows wrote their entries first.

use std::path::Path;

use hdf5::types::VarLenUnicode;
use hdf5::{Dataset, File};

use super::vlen::{self, StaleRefs};
use crate::writer::Error;
use crate::writer::h5::{Context, create_1d};

/// The `meta` dataset of an open split file and the entries not yet
/// written to it.
pub(super) struct MetaColumn {
    ds: Dataset,
    refs: StaleRefs,
    pending: Vec<VarLenUnicode>,
}

impl MetaColumn {
    /// Opens (or adds) `meta` in `file` (at `p`), holding the file's `rows`
    /// confirmed rows: entries past them are nulled and cut, missing ones
    /// added empty. Call before SWMR writing starts (it may create the
    /// dataset).
    pub(super) fn open(file: &File, p: &Path, rows: usize, chunk: usize) -> Result<Self, Error> {
        let ds = if file.link_exists("meta") {
            let ds = file
                .dataset("meta")
                .ctx(p, || "open dataset `meta`".into())?;
            let have = ds.size();
            if have > rows {
                vlen::clear_past(&ds, rows)
                    .ctx(p, || "clear dataset `meta` past the confirmed rows".into())?;
                ds.resize(rows).ctx(p, || "cut dataset `meta`".into())?;
            } else if have < rows {
                tracing::warn!(
                    file = %p.display(),
                    entries = have,
                    rows,
                    "Dataset `meta` is shorter than the rows; the rows past it get empty \
                     metadata."
                );
                vlen::clear_past(&ds, have)
                    .ctx(p, || "clear dataset `meta` past its end".into())?;
                StaleRefs::new(&ds, have)
                    .and_then(|mut r| r.grow(&ds, rows))
                    .and_then(|()| ds.resize(rows))
                    .ctx(p, || format!("grow dataset `meta` to {rows} rows"))?;
            }
            ds
        } else {
            let ds = create_1d::<VarLenUnicode>(file, "meta", chunk.max(1))
                .ctx(p, || "create dataset `meta`".into())?;
            ds.resize(rows)
                .ctx(p, || format!("size dataset `meta` to {rows} rows"))?;
            ds
        };
        let refs =
            StaleRefs::new(&ds, rows).ctx(p, || "read the chunking of dataset `meta`".into())?;
        Ok(MetaColumn {
            ds,
            refs,
            pending: Vec::new(),
        })
    }

    /// The entry of a row: `json` (a JSON object's text), or empty; an
    /// error when HDF5 cannot store it (a NUL byte).
    pub(super) fn entry(json: Option<&str>) -> Result<VarLenUnicode, Error> {
        Ok(crate::writer::plan_error::storable(
            "metadata",
            json.unwrap_or(""),
        )?)
    }

    /// Buffers the entry of the next row (from [`MetaColumn::entry`]).
    pub(super) fn push(&mut self, entry: VarLenUnicode) {
        self.pending.push(entry);
    }

    /// Bytes of the buffered entries' strings, with HDF5's per-object
    /// overhead (for the space reservation).
    pub(super) fn pending_bytes(&self) -> usize {
        self.pending.iter().map(|s| s.as_str().len() + 32).sum()
    }

    /// Writes the buffered entries at row `at` (where the rows they belong
    /// to are written) and empties the buffer.
    pub(super) fn write(&mut self, p: &Path, at: usize) -> Result<(), Error> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let end = at + self.pending.len();
        self.refs
            .grow(&self.ds, end)
            .ctx(p, || format!("grow dataset `meta` to {end} rows"))?;
        self.ds
            .resize(end)
            .ctx(p, || format!("grow dataset `meta` to {end} rows"))?;
        self.ds
            .write_slice(&self.pending, at..end)
            .ctx(p, || "write dataset `meta`".into())?;
        self.pending.clear();
        Ok(())
    }
}
