//! A manifest build's per-row metadata, stored beside the features: `meta`
//! (each row's manifest fields as one JSON object, UTF-8, any Unicode) and
//! `line` (its 1-based manifest line), one entry per row, in row order.
//!
//! The writer learns which rows it wrote as they are written (seq and
//! frames, 8 bytes a row, kept only when metadata is attached) and writes
//! both datasets once, just before the split file is closed and renamed, so
//! a finished file has them or the build failed. The rows written also go
//! back to the build in [`super::WriteReport::kept`] (the written-back
//! manifest names each line's row and frames).

use std::path::Path;
use std::sync::Arc;

use hdf5::File;
use hdf5::types::VarLenUnicode;

use super::Error;
use super::h5::{Context, create_1d};
use crate::plan::PackedText;

/// What to store beside each row, by the row's path index.
#[derive(Clone, Debug)]
pub struct RowMeta {
    /// A JSON object per path index.
    pub json: Arc<PackedText>,
    /// A 1-based manifest line per path index; None for inputs without
    /// lines (stored corpora: `meta` says where each row came from), whose
    /// files then have no `line` dataset.
    pub lines: Option<Arc<Vec<u32>>>,
}

/// A row as written: its seq in the split and its frames.
pub type Kept = (u32, u32);

/// Rows per chunk of `meta` and `line` in a split file of `rows` rows (a
/// merge of shards chunks them as a build of the whole would).
pub fn chunk_rows(rows: usize) -> usize {
    rows.clamp(1, 4096)
}

/// Writes `meta` and `line` for `rows` (path indices, in row order) into
/// the open split file `file` (at `p`).
pub(super) fn write(file: &File, p: &Path, meta: &RowMeta, rows: &[u32]) -> Result<(), Error> {
    let chunk = chunk_rows(rows.len());
    let ds = create_1d::<VarLenUnicode>(file, "meta", chunk).ctx(p, || "create `meta`".into())?;
    ds.resize(rows.len()).ctx(p, || "size `meta`".into())?;
    // A chunk's strings at a time: the metadata stays compressed in memory
    // (`PackedText`), and a split of millions of rows never holds all of
    // it as strings at once.
    let mut cursor = meta.json.cursor();
    let mut json = Vec::with_capacity(chunk);
    for (k, part) in rows.chunks(chunk).enumerate() {
        json.clear();
        for &r in part {
            json.push(super::plan_error::storable("metadata", cursor.get(r))?);
        }
        let at = k * chunk;
        ds.write_slice(&json, at..at + part.len())
            .ctx(p, || "write `meta`".into())?;
    }
    let Some(all) = &meta.lines else {
        return Ok(());
    };
    let lines: Vec<u32> = rows.iter().map(|&r| all[r as usize]).collect();
    let ds = create_1d::<u32>(file, "line", chunk).ctx(p, || "create `line`".into())?;
    ds.resize(rows.len()).ctx(p, || "size `line`".into())?;
    ds.write(&lines).ctx(p, || "write `line`".into())?;
    Ok(())
}
