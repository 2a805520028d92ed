//! String columns without heap objects: how `serve` stores `path`, `meta`
//! and `label_names` (root attribute `layout_version` 2, docs/FORMAT.md
//! "Files written by `serve`").
//!
//! A column `C` of N strings is two plain 1-D datasets:
//!
//! * `C_utf8` (uint8): every string's UTF-8 bytes, back to back, in row order;
//! * `C_end` (int64, N): one past the last byte of string `i`, so string `i`
//!   is `C_utf8[C_end[i-1] : C_end[i]]` (`0` for `i = 0`).
//!
//! **Why not HDF5's variable-length strings.** Each element of a vlen
//! dataset is a reference into the file's global heap, and HDF5 frees the
//! heap object an element names whenever it writes that element again. A
//! writer killed inside H5Fflush can leave elements past the rows its
//! journal confirmed naming heap objects that the next writer hands out
//! again; its next append into that chunk then frees a string a confirmed
//! row owns, and that row reads as another file's path
//! (`crash::kill_9_before_every_write` found one at its 59th kill point).
//! Three rounds of fixes made it rarer, never impossible. Here every byte
//! of a string lives in a chunk of a plain dataset: nothing outside the
//! rows names anything, a write frees nothing, and bytes a killed writer
//! left past the confirmed end are garbage that the next rows overwrite,
//! exactly like the frames past the end of `features`.
//!
//! Invariants, checked where they are read ([`Column::open`]): `C_end` is
//! non-decreasing, its first element ≥ 0, and its last ≤ the length of
//! `C_utf8`. A flush writes `C_utf8` before `C_end`, so an end a reader can
//! see never names bytes that are not yet written.
//!
//! [`read`] reads a column of either layout (vlen `C`, or `C_utf8` +
//! `C_end`): the tests, `serve rebuild` and anything else that reads a
//! split file go through it.

use std::path::Path;

use hdf5::types::VarLenUnicode;
use hdf5::{Dataset, File};

use super::Error;
use super::h5::{Context, create_1d};

/// The value of the root attribute `layout_version` of a file whose string
/// columns are this module's (every file `serve` appends to).
pub const LAYOUT_VERSION: i64 = 2;

/// Bytes per chunk of a `C_utf8` dataset.
const CHUNK_BYTES: usize = 16 << 10;

/// The name of the bytes dataset of column `name`.
pub fn bytes_name(name: &str) -> String {
    format!("{name}_utf8")
}

/// The name of the ends dataset of column `name`.
pub fn ends_name(name: &str) -> String {
    format!("{name}_end")
}

/// Whether `file` holds column `name` in this module's layout.
pub fn exists(file: &File, name: &str) -> bool {
    file.link_exists(&ends_name(name))
}

/// Every string of column `name` of `file`, in either layout: this
/// module's, or a variable-length string dataset `name` (build files,
/// and serve files before layout 2). Rows past the shorter of the two
/// datasets (a SWMR reader may see one refreshed before the other) are
/// left out.
pub fn read(file: &File, name: &str) -> hdf5::Result<Vec<String>> {
    if !exists(file, name) {
        let v = file.dataset(name)?.read_raw::<VarLenUnicode>()?;
        return Ok(v.iter().map(|s| s.as_str().to_string()).collect());
    }
    let ends = file.dataset(&ends_name(name))?.read_raw::<i64>()?;
    let bytes = file.dataset(&bytes_name(name))?.read_raw::<u8>()?;
    match split(&ends, &bytes) {
        (out, None) => Ok(out),
        (_, Some(why)) => Err(hdf5::Error::from(format!("{name}: {why}"))),
    }
}

/// The strings `ends` mark in `bytes`, in order, up to the first that is
/// not whole, and why it is not when it breaks the module's invariants (an
/// end before the one before it, bytes that are not UTF-8). An end past
/// the bytes stops without a reason: a SWMR reader may see the ends
/// refreshed before the bytes.
fn split(ends: &[i64], bytes: &[u8]) -> (Vec<String>, Option<String>) {
    let mut out = Vec::with_capacity(ends.len());
    let mut start = 0usize;
    for (i, &end) in ends.iter().enumerate() {
        let Some(stop) = usize::try_from(end).ok().filter(|&e| e >= start) else {
            return (out, Some(format!("row {i} ends at {end}, before {start}")));
        };
        let Some(b) = bytes.get(start..stop) else {
            break;
        };
        match std::str::from_utf8(b) {
            Ok(s) => out.push(s.to_string()),
            Err(e) => return (out, Some(format!("row {i} is not UTF-8: {e}"))),
        }
        start = stop;
    }
    (out, None)
}

/// A column being appended to: its two datasets and the strings not yet
/// written to them.
#[derive(Debug)]
pub(crate) struct Column {
    name: &'static str,
    bytes: Dataset,
    ends: Dataset,
    /// Strings written.
    rows: usize,
    /// Bytes written (the end of the last written string).
    end: u64,
    pending: Vec<u8>,
    pending_ends: Vec<i64>,
}

impl Column {
    /// Creates column `name` in `file` holding `strings`, `C_end` chunked
    /// by `chunk_rows`.
    pub(crate) fn create<S: AsRef<str>>(
        file: &File,
        p: &Path,
        name: &'static str,
        chunk_rows: usize,
        strings: &[S],
    ) -> Result<Column, Error> {
        let (b, e) = (bytes_name(name), ends_name(name));
        let bytes =
            create_1d::<u8>(file, &b, CHUNK_BYTES).ctx(p, || format!("create dataset `{b}`"))?;
        let ends = create_1d::<i64>(file, &e, chunk_rows.max(1))
            .ctx(p, || format!("create dataset `{e}`"))?;
        let mut c = Column::over(name, bytes, ends, 0, 0);
        for s in strings {
            c.push(s.as_ref());
        }
        c.write(p)?;
        Ok(c)
    }

    fn over(name: &'static str, bytes: Dataset, ends: Dataset, rows: usize, end: u64) -> Column {
        Column {
            name,
            bytes,
            ends,
            rows,
            end,
            pending: Vec::new(),
            pending_ends: Vec::new(),
        }
    }

    /// Opens column `name` of `file` and cuts it to its first `rows`
    /// strings (fewer when it holds fewer: see [`Column::rows`]). Errors
    /// when an end breaks the module's invariants.
    pub(crate) fn open(
        file: &File,
        p: &Path,
        name: &'static str,
        rows: usize,
    ) -> Result<Column, Error> {
        let (b, e) = (bytes_name(name), ends_name(name));
        let bytes = file.dataset(&b).ctx(p, || format!("open dataset `{b}`"))?;
        let ends = file.dataset(&e).ctx(p, || format!("open dataset `{e}`"))?;
        let keep = rows.min(ends.size());
        let end = if keep == 0 {
            0
        } else {
            ends.read_slice_1d::<i64, _>(keep - 1..keep)
                .ctx(p, || format!("read row {} of dataset `{e}`", keep - 1))?[0]
        };
        let have = bytes.size() as u64;
        let end = u64::try_from(end)
            .ok()
            .filter(|&x| x <= have)
            .ok_or_else(|| Error::Recovery {
                file: p.to_path_buf(),
                reason: format!(
                    "dataset `{e}` ends row {} at byte {end}, but `{b}` holds {have} bytes",
                    keep.saturating_sub(1)
                ),
            })?;
        let c = Column::over(name, bytes, ends, keep, end);
        c.cut_to(p, keep, end)?;
        Ok(c)
    }

    /// Opens column `name` of `file`, cut to its longest prefix of whole
    /// strings (each end in order and within the bytes, each string UTF-8),
    /// and returns them: for a short column whose tail a killed writer may
    /// have torn and whose tail the caller rewrites anyway (`label_names`).
    pub(crate) fn open_whole_prefix(
        file: &File,
        p: &Path,
        name: &'static str,
    ) -> Result<(Column, Vec<String>), Error> {
        let (b, e) = (bytes_name(name), ends_name(name));
        let bytes = file.dataset(&b).ctx(p, || format!("open dataset `{b}`"))?;
        let ends = file.dataset(&e).ctx(p, || format!("open dataset `{e}`"))?;
        let all_ends = ends
            .read_raw::<i64>()
            .ctx(p, || format!("read dataset `{e}`"))?;
        let all_bytes = bytes
            .read_raw::<u8>()
            .ctx(p, || format!("read dataset `{b}`"))?;
        let (out, _) = split(&all_ends, &all_bytes);
        let start: usize = out.iter().map(String::len).sum();
        if out.len() < all_ends.len() {
            tracing::warn!(
                file = %p.display(),
                column = name,
                kept = out.len(),
                found = all_ends.len(),
                "Cut a string column's torn tail (written by a killed writer, never used)."
            );
        }
        let c = Column::over(name, bytes, ends, out.len(), start as u64);
        c.cut_to(p, out.len(), start as u64)?;
        Ok((c, out))
    }

    /// Strings in the column (written, not pending).
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Buffers the next string.
    pub(crate) fn push(&mut self, s: &str) {
        self.pending.extend_from_slice(s.as_bytes());
        let end = self.end + self.pending.len() as u64;
        self.pending_ends
            .push(i64::try_from(end).expect("a column under 2^63 bytes"));
    }

    /// Bytes the buffered strings take in the file (for space reservations).
    pub(crate) fn pending_bytes(&self) -> usize {
        self.pending.len() + 8 * self.pending_ends.len()
    }

    /// Strings buffered.
    pub(crate) fn pending_rows(&self) -> usize {
        self.pending_ends.len()
    }

    /// Writes the buffered strings after the written ones (bytes first,
    /// then their ends) and empties the buffer.
    pub(crate) fn write(&mut self, p: &Path) -> Result<(), Error> {
        if self.pending_ends.is_empty() {
            return Ok(());
        }
        let (b, e) = (bytes_name(self.name), ends_name(self.name));
        let start = self.end as usize;
        let end = start + self.pending.len();
        if end > start {
            self.bytes
                .resize(end)
                .ctx(p, || format!("grow dataset `{b}` to {end} bytes"))?;
            self.bytes
                .write_slice(&self.pending, start..end)
                .ctx(p, || format!("write bytes {start}..{end} of dataset `{b}`"))?;
        }
        let (r0, r1) = (self.rows, self.rows + self.pending_ends.len());
        self.ends
            .resize(r1)
            .ctx(p, || format!("grow dataset `{e}` to {r1} rows"))?;
        self.ends
            .write_slice(&self.pending_ends, r0..r1)
            .ctx(p, || format!("write rows {r0}..{r1} of dataset `{e}`"))?;
        debug_assert_eq!(self.pending_ends.last().copied(), i64::try_from(end).ok());
        self.rows = r1;
        self.end = end as u64;
        self.pending.clear();
        self.pending_ends.clear();
        Ok(())
    }

    /// Cuts the written strings to the first `rows` (before any is buffered).
    pub(crate) fn cut(&mut self, p: &Path, rows: usize) -> Result<(), Error> {
        assert!(self.pending_ends.is_empty(), "cut with strings buffered");
        if rows >= self.rows {
            return Ok(());
        }
        let e = ends_name(self.name);
        let end = if rows == 0 {
            0
        } else {
            self.ends
                .read_slice_1d::<i64, _>(rows - 1..rows)
                .ctx(p, || format!("read row {} of dataset `{e}`", rows - 1))?[0]
        };
        let end = u64::try_from(end).unwrap_or(0).min(self.end);
        self.cut_to(p, rows, end)?;
        self.rows = rows;
        self.end = end;
        Ok(())
    }

    fn cut_to(&self, p: &Path, rows: usize, end: u64) -> Result<(), Error> {
        let (b, e) = (bytes_name(self.name), ends_name(self.name));
        if self.ends.size() != rows {
            self.ends
                .resize(rows)
                .ctx(p, || format!("cut dataset `{e}` to {rows} rows"))?;
        }
        if self.bytes.size() as u64 != end {
            self.bytes
                .resize(end as usize)
                .ctx(p, || format!("cut dataset `{b}` to {end} bytes"))?;
        }
        Ok(())
    }
}
