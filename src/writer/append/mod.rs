//! SWMR appends for `serve`: one [`Appender`] per `<out>/<split>.h5`.
//!
//! The file has the build schema (`docs/FORMAT.md`: `mel`, `label`, every root
//! attribute) with its strings (`path`, `meta`, and a growing `label_names`) as
//! `writer::strings` columns, which hold no global-heap object (root attribute
//! `layout_version` 2; `vlen` converts an older file's on open); the writer
//! holds it open in HDF5 single-writer/multiple-reader mode, so an h5py reader
//! opened with `swmr=True` sees new rows after `refresh()`.
//!
//! Invariants:
//! * **Rows in arrival order.** [`Appender::append`] returns the row index at once;
//!   rows are buffered and written as whole chunks, the last partial chunk at
//!   [`Appender::flush`].
//! * **Flush = visible and durable.** `flush` writes pending label names and rows,
//!   calls H5Fflush (SWMR orders the metadata writes so readers always see a
//!   consistent file), then `fdatasync`s the file. Rows below
//!   [`Appender::flushed_rows`] survive a kill -9 or a power cut; the journal
//!   (`crate::app::serve::journal`) records them only after this returns.
//! * **Label ids never change.** Names are only appended to `label_names`. The root
//!   attribute `label_names` cannot change while SWMR writing (attribute writes are
//!   not SWMR-safe), so it is rewritten whenever the file is opened or closed and is
//!   exact whenever no writer has the file open; the dataset is exact at every flush.
//! * **Open always recovers.** A writer killed in SWMR mode leaves the superblock's
//!   "open for write" flags set and a plain read-write open fails ("file is already
//!   open for write … use h5clear"). [`Appender::open`] sets HDF5's private fapl
//!   property `clear_status_flags` (what `h5clear -s` does) and then cuts every
//!   dataset to the row count the journal confirms: rows past it may be a torn,
//!   unflushed chunk, and their files are still in the drop directory, so they are
//!   re-ingested rather than trusted.
//! * **A full disk never reaches HDF5.** Before rows, names or a flush go to
//!   HDF5, the appender reserves (`fallocate` with `FALLOC_FL_KEEP_SIZE`, or a
//!   free-space check where the filesystem cannot reserve) the most the file
//!   can grow by for them, plus [`METADATA_HEADROOM`]. When the space is not
//!   there the call fails with [`Error::NoSpace`] and changes nothing: HDF5 never
//!   sees a failed write it could leave half-done (ENOSPC inside HDF5 corrupts
//!   the file's free-space and address metadata beyond recovery), the appender
//!   stays usable, and the caller may retry or close it. Up to one reservation
//!   of blocks past the end of the file stays allocated while it is open.
//!
//! Files: this one is the [`Appender`] API (create, append, flush, close);
//! [`sink`] is serve's [`crate::writer::Sink`], [`AppendSink`]: a handle
//! whose thread writes the split files ([`splits`], one appender per split);
//! [`recover`] opens an existing file: it clears the SWMR status flags, moves
//! a stale end of allocation up to the end of the file, checks the file
//! matches this configuration and cuts rows back to the journal's count. The
//! appender's raw HDF5 calls are in `recover::raw` (those `h5clear` makes,
//! `H5Fincrement_filesize`, `H5garbage_collect`) and `writer::direct::raw`.

mod cmvn;
mod meta;
mod names;
mod pieces;
mod recover;
mod sink;
mod space;
mod splits;
mod store;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_cmvn;
#[cfg(test)]
mod tests_compact;
#[cfg(test)]
mod tests_crash;
#[cfg(test)]
mod tests_frames;
#[cfg(test)]
mod tests_meta;
#[cfg(test)]
mod tests_vlen;
mod undo;
mod vfd;
mod vlen;

pub use recover::release_free_lists;
pub use sink::AppendSink;
pub use splits::Dest;

use std::path::{Path, PathBuf};

use hdf5::File;

use super::h5::{Context, Header, create_file, write_attrs};
use super::strings::Column;
use super::{Dtype, Error, PlanError};
use crate::frames::RowLayout;
use crate::runtime::sys;
use meta::MetaColumn;
use names::{adopt_table, create_names, replace_names_attr, rewrite_names};
use recover::{open_existing, open_rw};
use store::{Sets, Store};

/// Rows per chunk of the `label_names` column's ends.
const NAMES_CHUNK: usize = 64;

/// The name of the per-row path column.
const PATH: &str = "path";

/// Space reserved past the end of the file beyond the rows themselves: HDF5's
/// metadata (chunk index, object headers, free-space sections, a new chunk
/// of each string column's bytes and ends) and a close.
pub const METADATA_HEADROOM: u64 = 1 << 20;

/// What an [`Appender`] needs to create or check `<out_dir>/<split>.h5`.
#[derive(Clone, Debug)]
pub struct AppendSpec {
    pub split: String,
    /// The recipe's rows: librosa's `mel` rows, or variable-length rows
    /// (`crate::frames`) in `features`.
    pub layout: RowLayout,
    pub dtype: Dtype,
    /// Rows per HDF5 chunk along N, ≥ 1.
    pub chunk_files: usize,
    /// Extra root attributes (UTF-8 strings), written when the file is created.
    pub extra_attrs: Vec<(String, String)>,
}

/// What [`Appender::open`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// The file did not exist and was created.
    pub created: bool,
    /// Rows the file held (the longest of `mel`, `label`, `path`) before recovery.
    pub rows_found: usize,
    /// Rows cut because the journal did not confirm them.
    pub rows_dropped: usize,
    /// Label names the confirmed rows use: the file's list up to the highest
    /// id a kept row carries. Only this prefix is fixed; the names after it
    /// (added before a crash, never committed) are free to be rewritten.
    pub labels_in_use: usize,
}

/// An open `<split>.h5` in SWMR-write mode; see the module documentation.
pub struct Appender {
    path: PathBuf,
    file: File,
    /// The row datasets and the rows not yet written to them.
    store: Store,
    /// `path`: each row's path, written with the rows (`writer::strings`).
    paths: Column,
    /// `label_names`, the live list of names (`writer::strings`).
    names_col: Column,
    label_names: Vec<String>,
    /// Names in `names_col` (the rest are pending).
    names_written: usize,
    /// Names in the root attribute.
    names_in_attr: usize,
    /// Rows written to HDF5 (not necessarily flushed).
    rows_written: usize,
    /// Rows flushed and synced.
    rows_flushed: usize,
    /// Rows per HDF5 chunk of the datasets.
    chunk_files: usize,
    /// `meta`: each row's sidecar metadata, written with the rows.
    meta: MetaColumn,
    /// The CMVN statistics, stored at each flush.
    cmvn: cmvn::Cmvn,
    /// A plain descriptor of the same file, for `fdatasync` and space
    /// reservations.
    sync: std::fs::File,
    /// Bytes of one stored value.
    value_bytes: usize,
    /// Chunks of `mel` below this one have left the page cache
    /// ([`Appender::drop_synced_chunks`]).
    chunks_dropped: usize,
    failed: bool,
    /// The undo log armed before a write rewrote a compact chunk that holds
    /// rows ([`store::Store::rewrites`]), committed by the next flush. Last:
    /// a dropped appender (a test's kill) closes the file before this
    /// disarms, so the close's writes are in the log too.
    armed: Option<undo::Armed>,
}

impl Appender {
    /// Opens `<out_dir>/<spec.split>.h5` for appending, creating it (with
    /// `label_names`) when missing, and starts SWMR writing.
    ///
    /// `confirmed_rows` is the row count the journal confirms: an existing file is
    /// cut to it (clearing the status flags a killed writer left behind); a file
    /// with fewer rows is an error, as is a missing file when `confirmed_rows > 0`.
    /// The file's label list becomes `label_names` (the caller's table, kept
    /// identical across splits) whenever that agrees with the names its kept
    /// rows use ([`OpenReport::labels_in_use`]; ids in use never change): names
    /// a crashed writer added in its own order and never committed are
    /// rewritten, or dropped when the table lacks them. When the names in use
    /// conflict with the table (files from before this rule), the file keeps
    /// its list and the table's missing names are appended; the caller checks
    /// [`Appender::label_names`] if it needs ids to match.
    pub fn open(
        out_dir: &Path,
        spec: &AppendSpec,
        label_names: &[String],
        confirmed_rows: usize,
    ) -> Result<(Appender, OpenReport), Error> {
        validate(spec, label_names)?;
        let path = out_dir.join(format!("{}.h5", spec.split));
        if spec.dtype.tick_power().is_some()
            && let Err(why) = vfd::available()
        {
            return Err(Error::Incompatible {
                file: path,
                reason: format!(
                    "compact chunks are rewritten as rows arrive, which is safe against a \
                     crash only through melforge's undo-logging file driver, and it cannot \
                     be used here: {why}"
                ),
            });
        }
        let header = Header {
            split: &spec.split,
            label_names,
            layout: &spec.layout,
            dtype: spec.dtype,
            chunk_files: spec.chunk_files,
            extra_attrs: &spec.extra_attrs,
        };
        let exists = path.try_exists().map_err(|source| Error::Io {
            path: path.clone(),
            action: "look for the output file",
            source,
        })?;
        if exists {
            roll_back(&path)?;
        } else {
            if confirmed_rows > 0 {
                return Err(Error::Recovery {
                    file: path,
                    reason: format!(
                        "the journal confirms {confirmed_rows} rows but the file is missing"
                    ),
                });
            }
            undo::discard(&path).map_err(|source| Error::Io {
                path: undo::log_path(&path),
                action: "remove the undo log of a split file that is gone",
                source,
            })?;
            create_new(out_dir, &path, &header)?;
        }
        // Recovery, the label list and starting SWMR write in place outside
        // SWMR's ordering: armed until the file is synced in SWMR mode.
        let armed = arm(&path)?;
        let Opened {
            file,
            sets,
            paths,
            mut names_col,
            mut names,
            mut report,
        } = open_existing(&path, &header, confirmed_rows)?;
        report.created = !exists;
        let rows = report.rows_found - report.rows_dropped;
        let meta = MetaColumn::open(&file, &path, rows, spec.chunk_files)?;
        let bins = crate::cmvn::Bins::of_layout(&spec.layout, spec.dtype);
        let cmvn = cmvn::Cmvn::open(&file, &path, &sets, bins, rows)?;
        // The files beside it describe the rows at the last close: stale
        // from the first append on, written again by the close.
        crate::cmvn::files::remove(&path).map_err(|source| Error::Io {
            path: path.clone(),
            action: "remove the statistics files beside",
            source,
        })?;
        if let Some(list) = adopt_table(&names, report.labels_in_use, label_names)
            && list != names
        {
            let keep = report.labels_in_use.min(names.len());
            rewrite_names(&mut names_col, &path, &list, keep)?;
            names = list;
        }
        // Writable: fallocate needs a descriptor open for writing.
        let sync = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|source| Error::Io {
                path: path.clone(),
                action: "open the output file for fsync and space reservations",
                source,
            })?;
        let names_in_attr = names.len();
        let mut app = Appender {
            store: Store::new(sets, spec, &path)?,
            cmvn,
            chunk_files: spec.chunk_files,
            paths,
            names_col,
            meta,
            path,
            file,
            names_written: names.len(),
            names_in_attr,
            label_names: names,
            rows_written: rows,
            rows_flushed: rows,
            sync,
            value_bytes: spec.dtype.size(),
            chunks_dropped: rows / spec.chunk_files,
            failed: false,
            armed: None,
        };
        // New names go into the attribute too while SWMR is not yet on.
        for n in label_names {
            app.label_id(n)?;
        }
        app.write_names()?;
        app.rewrite_names_attr()?;
        let p = app.path.as_path();
        app.file.flush().ctx(p, || "flush the file".into())?;
        app.file
            .start_swmr()
            .ctx(p, || "start SWMR writing".into())?;
        commit(p, armed)?;
        Ok((app, report))
    }

    /// The file being appended to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Label names, ids index this (including names not yet flushed).
    pub fn label_names(&self) -> &[String] {
        &self.label_names
    }

    /// The id of label `name`, appending it to `label_names` if new (written at the
    /// next flush; existing ids never change).
    pub fn label_id(&mut self, name: &str) -> Result<i32, Error> {
        if let Some(i) = self.label_names.iter().position(|n| n == name) {
            return Ok(i as i32);
        }
        if name.contains('\0') {
            return Err(PlanError::Nul {
                what: "label",
                value: name.to_string(),
            }
            .into());
        }
        let id = i32::try_from(self.label_names.len()).map_err(|_| PlanError::TooManyLabels)?;
        self.label_names.push(name.to_string());
        Ok(id)
    }

    /// Appends one row (`spec.row_len()` values, layout as in
    /// [`super::DatasetWriter::submit`]; with [`AppendSpec::frames`],
    /// `crate::frames`' row protocol) for the file at `rel_path` with label id
    /// `label` (-1 for none). Returns its row index. The row is visible to readers
    /// and durable after the next [`Appender::flush`].
    pub fn append(&mut self, rel_path: &str, label: i32, row: &[f32]) -> Result<usize, Error> {
        self.append_with_meta(rel_path, label, row, None)
    }

    /// [`Appender::append`] with the row's metadata: `meta`, a JSON object's
    /// text, stored in `meta` (empty for `None`).
    pub fn append_with_meta(
        &mut self,
        rel_path: &str,
        label: i32,
        row: &[f32],
        meta: Option<&str>,
    ) -> Result<usize, Error> {
        self.append_with_stats((rel_path, label, meta), row, None)
    }

    /// [`Appender::append_with_meta`] of `(path, label, meta)` with the
    /// row's CMVN sums where its worker made them (else summed here).
    pub fn append_with_stats(
        &mut self,
        (rel_path, label, meta): (&str, i32, Option<&str>),
        row: &[f32],
        stats: Option<crate::cmvn::RowStats>,
    ) -> Result<usize, Error> {
        self.check_target(rel_path, label)?;
        let index = self.rows();
        self.store.check(&self.path, index, row)?;
        let entry = MetaColumn::entry(meta)?;
        // A full chunk is written before the row is taken, so a refusal for
        // lack of space leaves the row with the caller and nothing changed.
        if self.store.is_full(self.chunk_files, self.rows_written) {
            self.reserve(self.store.rows(), rel_path.len() + entry.as_str().len())?;
            self.guard(|a| a.write_pending())?;
        }
        self.store.push(row, label, rel_path)?;
        self.cmvn.add(row, stats);
        self.paths.push(rel_path);
        self.meta.push(&entry);
        Ok(index)
    }

    /// `Err` when a row cannot be appended for `rel_path` with `label`.
    fn check_target(&self, rel_path: &str, label: i32) -> Result<(), Error> {
        if self.failed {
            return Err(Error::Failed);
        }
        let n_labels = self.label_names.len();
        if label != -1 && usize::try_from(label).is_ok_and(|l| l >= n_labels) || label < -1 {
            return Err(Error::UnknownLabel {
                file: self.path.clone(),
                label,
                n_labels,
            });
        }
        if rel_path.contains('\0') {
            return Err(PlanError::Nul {
                what: "path",
                value: rel_path.to_string(),
            }
            .into());
        }
        Ok(())
    }

    /// The CMVN statistics of every row appended (`cmvn`), stored at each
    /// flush.
    pub fn cmvn(&self) -> &crate::cmvn::Stats {
        self.cmvn.stats()
    }

    /// Rows appended so far (written, buffered or flushed).
    pub fn rows(&self) -> usize {
        self.rows_written + self.store.rows()
    }

    /// Rows that readers see and that survive a crash.
    pub fn flushed_rows(&self) -> usize {
        self.rows_flushed
    }

    /// Rows appended since the last flush.
    pub fn pending_rows(&self) -> usize {
        self.rows() - self.rows_flushed
    }

    /// Writes pending names and rows, flushes HDF5 (SWMR readers see them after
    /// `refresh()`) and syncs the file to disk. Returns [`Appender::flushed_rows`].
    pub fn flush(&mut self) -> Result<usize, Error> {
        if self.failed {
            return Err(Error::Failed);
        }
        if self.pending_rows() == 0 && self.names_written == self.label_names.len() {
            return Ok(self.rows_flushed);
        }
        self.reserve(self.store.rows(), 0)?;
        self.guard(|a| {
            a.write_names()?;
            a.write_pending()?;
            a.cmvn.write(&a.path, a.rows_written)?;
            // The chunks lent to the copiers land before the metadata that
            // names them and before the sync.
            a.store.settle(&a.path)?;
            a.file.flush().ctx(&a.path, || "flush the file".into())?;
            a.sync_file()?;
            // The rewritten chunks and the index that names them are in the
            // file: the state the log would roll back to is no longer needed.
            match a.armed.take() {
                Some(armed) => commit(&a.path, Some(armed)),
                None => Ok(()),
            }
        })?;
        // The previous flush's rows stay cached for SWMR readers; the whole
        // chunks before them are on disk and never written again.
        self.drop_synced_chunks(self.rows_flushed / self.chunk_files);
        self.rows_flushed = self.rows_written;
        Ok(self.rows_flushed)
    }

    /// Drops the pages of `mel` chunks `chunks_dropped..below` (whole, synced
    /// chunks: no row is written into them again) from the page cache.
    ///
    /// Why: each page a growing file takes is a new page-cache page, and on a
    /// VM a page the guest has not touched yet costs several times the copy
    /// into it: serve's loop thread spent most of its time in that copy
    /// (`docs/BENCHMARKS.md`, "serve at the box's rate"). Dropped pages are
    /// reused by the next rows. Pages a chunk shares with its neighbours, and
    /// all metadata, stay. Best effort: a failure is logged and skipped.
    fn drop_synced_chunks(&mut self, below: usize) {
        use std::os::fd::AsFd;
        let Some(mel) = self.store.mel() else {
            return;
        };
        for k in self.chunks_dropped..below {
            let offset = [(k * self.chunk_files) as u64, 0, 0, 0, 0];
            let dropped = super::direct::raw::chunk_extent_at(mel, &offset)
                .map_err(|e| e.to_string())
                .and_then(|extent| match extent {
                    Some((addr, size)) => {
                        sys::fadvise_dontneed_range(self.sync.as_fd(), addr, size)
                            .map_err(|e| e.to_string())
                    }
                    None => Ok(()),
                });
            if let Err(e) = dropped {
                tracing::debug!(
                    file = %self.path.display(),
                    chunk = k,
                    error = %e,
                    "Cannot drop a chunk's pages from the page cache."
                );
                break;
            }
        }
        self.chunks_dropped = self.chunks_dropped.max(below);
    }

    /// Flushes, closes the file and, when names were added while SWMR writing,
    /// reopens it briefly to bring the root attribute `label_names` up to date.
    /// Returns the row count.
    pub fn close(mut self) -> Result<usize, Error> {
        let rows = self.flush()?;
        // The close and the reopen rewrite metadata in place (`undo`); a
        // step armed already (a flush with nothing to write) goes on.
        let armed = match self.armed.take() {
            Some(a) => Some(a),
            None => arm(&self.path)?,
        };
        let Appender {
            path,
            file,
            store,
            paths,
            names_col,
            label_names,
            names_in_attr,
            meta,
            cmvn,
            ..
        } = self;
        let stats = cmvn.stats().clone();
        drop((store, paths, names_col, meta, cmvn));
        file.close().ctx(&path, || "close the file".into())?;
        if names_in_attr != label_names.len() {
            let file = open_rw(&path, false).ctx(&path, || "reopen the file".into())?;
            replace_names_attr(&file, &label_names)
                .ctx(&path, || "rewrite attribute `label_names`".into())?;
            file.close().ctx(&path, || "close the file".into())?;
        }
        commit(&path, armed)?;
        release_reservation(&self.sync);
        crate::cmvn::files::write(&path, &stats).map_err(|source| Error::Io {
            path: path.clone(),
            action: "write the statistics files beside",
            source,
        })?;
        Ok(rows)
    }

    /// Closes the file without writing the rows appended since the last
    /// flush (a failed write: they will be ingested again), then gives back
    /// the space reserved past its end. Errors are logged: the next open
    /// recovers the file to the journal's row count either way.
    pub fn abandon(self) {
        let Appender {
            path,
            file,
            store,
            paths,
            names_col,
            sync,
            meta,
            armed,
            cmvn,
            ..
        } = self;
        let mut store = store;
        if let Err(e) = store.settle(&path) {
            tracing::warn!(error = %e, "A chunk of an abandoned split file was not written.");
        }
        let armed = armed.map_or_else(
            || {
                arm(&path).unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "Closing an abandoned split file without an undo log.");
                    None
                })
            },
            Some,
        );
        drop((store, paths, names_col, meta, cmvn));
        if let Err(e) = file.close() {
            tracing::warn!(file = %path.display(), error = %e, "Closing an abandoned split file failed.");
        }
        if let Err(e) = commit(&path, armed) {
            tracing::warn!(error = %e, "Syncing an abandoned split file failed; the next open rolls its close back.");
        }
        release_reservation(&sync);
    }

    /// Runs `f`, marking the appender failed if it errs.
    fn guard(&mut self, f: impl FnOnce(&mut Self) -> Result<(), Error>) -> Result<(), Error> {
        let r = f(self);
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    fn write_pending(&mut self) -> Result<(), Error> {
        let rows = self.store.rows();
        if rows > 0 {
            // The strings first: a SWMR reader that sees a row sees its path.
            self.paths.write(&self.path)?;
            self.meta.write(&self.path, self.rows_written)?;
            self.write_store()?;
            self.rows_written += rows;
        }
        Ok(())
    }

    /// Writes the store's buffered frames and rows, arming the undo log
    /// first when that rewrites a compact chunk holding rows (`store`).
    fn write_store(&mut self) -> Result<(), Error> {
        if self.store.rewrites() && self.armed.is_none() {
            self.armed = arm(&self.path)?;
        }
        self.store.write(&self.path, self.rows_written)
    }

    fn write_names(&mut self) -> Result<(), Error> {
        let (start, end) = (self.names_written, self.label_names.len());
        if start == end {
            return Ok(());
        }
        for n in &self.label_names[start..end] {
            self.names_col.push(n);
        }
        self.names_col.write(&self.path)?;
        self.names_written = end;
        Ok(())
    }

    fn rewrite_names_attr(&mut self) -> Result<(), Error> {
        replace_names_attr(&self.file, &self.label_names)
            .ctx(&self.path, || "rewrite attribute `label_names`".into())?;
        self.names_in_attr = self.label_names.len();
        Ok(())
    }

    fn sync_file(&self) -> Result<(), Error> {
        self.sync.sync_data().map_err(|source| Error::Io {
            path: self.path.clone(),
            action: "sync the output file",
            source,
        })
    }
}

fn validate(spec: &AppendSpec, label_names: &[String]) -> Result<(), Error> {
    let name = &spec.split;
    if name.is_empty() || name.contains(['/', '\0']) || name == "." || name == ".." {
        return Err(PlanError::SplitName { name: name.clone() }.into());
    }
    if spec.chunk_files == 0 {
        return Err(PlanError::ChunkFiles.into());
    }
    if let RowLayout::Fixed(s) = &spec.layout
        && let Err(e) = s.validate()
    {
        return Err(PlanError::Spec(e).into());
    }
    for (i, n) in label_names.iter().enumerate() {
        if label_names[..i].contains(n) {
            return Err(PlanError::LabelTwice { name: n.clone() }.into());
        }
    }
    Ok(())
}

/// What [`recover::open_existing`] hands the appender.
struct Opened {
    file: File,
    sets: Sets,
    /// The `path` column, cut to the confirmed rows.
    paths: Column,
    /// The `label_names` column and the names it holds.
    names_col: Column,
    names: Vec<String>,
    report: OpenReport,
}

/// Creates `p` atomically: the file is made complete (datasets, attributes)
/// under a temporary name, synced, renamed into place (the caller then opens
/// it like an existing file). A write failing half-way leaves only the temporary file
/// (replaced by the next attempt), never a `<split>.h5` without its datasets.
fn create_new(out_dir: &Path, p: &Path, header: &Header<'_>) -> Result<(), Error> {
    std::fs::create_dir_all(out_dir).map_err(|source| Error::Io {
        path: out_dir.to_path_buf(),
        action: "create the output directory",
        source,
    })?;
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = out_dir.join(format!(".{name}.creating"));
    let made = (|| {
        let file = create_file(&tmp)?;
        write_attrs(&file, header).ctx(&tmp, || "write the root attributes".into())?;
        Sets::create(&file, &tmp, header)?;
        drop(Column::create::<&str>(
            &file,
            &tmp,
            PATH,
            header.chunk_files,
            &[],
        )?);
        drop(create_names(&file, &tmp, &[])?);
        file.close().ctx(&tmp, || "close the new file".into())?;
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(|source| Error::Io {
                path: tmp.clone(),
                action: "sync the new file",
                source,
            })
    })();
    if let Err(e) = made {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, p).map_err(|source| Error::Io {
        path: p.to_path_buf(),
        action: "move the new file into place",
        source,
    })?;
    // The directory entry must be durable before the journal names rows in it.
    sync_dir(out_dir)
}

/// Arms `p` for a step that writes in place outside SWMR's ordering
/// (`undo`); `None` where the driver is not in use (`vfd::available`).
fn arm(p: &Path) -> Result<Option<undo::Armed>, Error> {
    if vfd::available().is_err() {
        return Ok(None);
    }
    undo::arm(p).map(Some).map_err(|source| Error::Io {
        path: undo::log_path(p),
        action: "arm the undo log",
        source,
    })
}

/// Syncs `p` and ends the armed step.
fn commit(p: &Path, armed: Option<undo::Armed>) -> Result<(), Error> {
    let r = match armed {
        Some(a) => a.commit(),
        None => std::fs::File::open(p).and_then(|f| f.sync_data()),
    };
    r.map_err(|source| Error::Io {
        path: p.to_path_buf(),
        action: "sync the file and commit its undo log",
        source,
    })
}

/// Puts back what an armed step a crash interrupted had overwritten.
fn roll_back(p: &Path) -> Result<(), Error> {
    match undo::roll_back(p) {
        Ok(Some(done)) => {
            tracing::warn!(
                file = %p.display(),
                ranges = done.records,
                len = done.len,
                "Rolled back an interrupted open or close of the split file."
            );
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(source) => Err(Error::Io {
            path: undo::log_path(p),
            action: "roll back an interrupted open or close",
            source,
        }),
    }
}

/// Frees the blocks reserved past the end of the file (truncating it to its
/// own size drops them on ext4, XFS and tmpfs). Best effort: a failure only
/// leaves the reservation allocated until the next close.
fn release_reservation(f: &std::fs::File) {
    if let Ok(m) = f.metadata() {
        let _ = f.set_len(m.len());
    }
}

fn sync_dir(dir: &Path) -> Result<(), Error> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            action: "sync the directory",
            source,
        })
}
