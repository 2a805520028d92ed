//! Stale heap references past the end of a variable-length string dataset.
//!
//! `path` and `label_names` hold UTF-8 strings whose bytes live in the
//! file's global heap; each element of the dataset is a reference to one heap
//! object (collection address, object index). When HDF5 writes an element of
//! such a dataset it reads the element already stored there and **frees the
//! heap object it references**. That is right for a live element; it is not
//! for the bytes a killed writer left *past the dataset's end*:
//!
//! * a kill inside H5Fflush can leave a chunk holding references for rows the
//!   journal never confirmed, while the heap collection they point into is
//!   still the older one on disk; the next writer reuses those object indices
//!   for new (confirmed) strings;
//! * when it then appends into that chunk, HDF5 frees the object the stale
//!   element names — a string a confirmed row now owns. That row reads as
//!   another file's path or fails with "bad heap pointer":
//!   `crash::kill_9_at_random_points` found a path twice this way (about one
//!   kill in 1,000, in the CI suite once in three runs).
//!
//! One rule for every vlen dataset the appender grows: before rows past the
//! rows kept are written, the elements there hold no reference (all zero,
//! HDF5's null). [`clear_past`] cleans the partial chunk holding the first row
//! not kept when the file is opened, before recovery cuts it (read raw, the
//! elements from that row on zeroed, written back raw: a direct chunk write
//! frees nothing); [`StaleRefs::grow`] overwrites with zeros every chunk the
//! dataset grows into that already exists in the file (one a killed writer
//! flushed beyond the extent it recorded). A chunk never allocated starts as
//! the fill value, null, and costs one index lookup.

use hdf5::Dataset;

use crate::writer::direct::raw;

/// Rows per chunk of the 1-D chunked dataset `ds`.
fn chunk_rows(ds: &Dataset) -> hdf5::Result<usize> {
    match ds.chunk().as_deref() {
        Some([rows]) if *rows > 0 => Ok(*rows),
        other => Err(format!("dataset {} is not 1-D chunked: {other:?}", ds.name()).into()),
    }
}

/// Nulls the elements of `ds` from `rows` to the end of the chunk holding
/// row `rows` (read raw, zeroed, written back raw). Run before `ds` is cut
/// or grown from `rows`.
pub(super) fn clear_past(ds: &Dataset, rows: usize) -> hdf5::Result<()> {
    let per_chunk = chunk_rows(ds)?;
    let rest = rows % per_chunk;
    if rest == 0 {
        return Ok(());
    }
    let offset = [(rows - rest) as u64];
    let Some(bytes) = raw::chunk_bytes_at(ds, &offset)? else {
        return Ok(());
    };
    let mut buf = vec![0u8; bytes];
    raw::read_chunk(ds, &offset, &mut buf)?;
    let tail = &mut buf[rest * (bytes / per_chunk)..];
    if tail.iter().any(|b| *b != 0) {
        tracing::warn!(
            dataset = %ds.name(),
            rows,
            "Clearing heap references a killed writer left past the rows kept."
        );
        tail.fill(0);
        raw::write_chunk(ds, &offset, &buf)?;
    }
    Ok(())
}

/// Keeps the chunks a vlen dataset grows into clean; see the module doc.
#[derive(Debug)]
pub(super) struct StaleRefs {
    chunk_rows: usize,
    /// Chunks starting below this row are known clean past the extent.
    clean_to: usize,
}

impl StaleRefs {
    /// For `ds` holding `rows` elements whose last partial chunk was cleaned
    /// ([`clear_past`]).
    pub(super) fn new(ds: &Dataset, rows: usize) -> hdf5::Result<StaleRefs> {
        let chunk_rows = chunk_rows(ds)?;
        Ok(StaleRefs {
            chunk_rows,
            clean_to: rows.next_multiple_of(chunk_rows),
        })
    }

    /// Nulls every chunk first entered by growing `ds` to `end` elements
    /// which a killed writer had already allocated (growing `ds` to look;
    /// within the chunks already clean it leaves the resize to the caller).
    /// Call before writing elements up to `end`.
    pub(super) fn grow(&mut self, ds: &Dataset, end: usize) -> hdf5::Result<()> {
        if end <= self.clean_to {
            return Ok(());
        }
        ds.resize(end)?;
        let mut start = self.clean_to;
        while start < end {
            let offset = [start as u64];
            if let Some(bytes) = raw::chunk_bytes_at(ds, &offset)? {
                tracing::warn!(
                    dataset = %ds.name(),
                    row = start,
                    "Clearing a chunk a killed writer left past the end of a dataset."
                );
                raw::write_chunk(ds, &offset, &vec![0u8; bytes])?;
            }
            start += self.chunk_rows;
        }
        self.clean_to = end.next_multiple_of(self.chunk_rows);
        Ok(())
    }
}
