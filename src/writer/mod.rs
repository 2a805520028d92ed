//! The writer: the pipeline's HDF5 writer (build files, serve's SWMR
//! appends). The commands that read or join finished files (`app::merge`,
//! `app::inspect`, `app::bench_write`, serve's `rebuild`) open them themselves.
//!
//! A [`DatasetWriter`] is a plain synchronous object; the pipeline runs it on one
//! dedicated thread and feeds it the outcome of every planned file with
//! [`DatasetWriter::submit`]. It owns one `<split>.h5.partial` per split and renames
//! each to `<split>.h5` in [`DatasetWriter::finish`].
//!
//! Invariants:
//! * **Rows are in plan order.** Each split's [`SplitPlan::files`] lists the files in
//!   sorted path order and a file's index there is its `seq`. Outcomes may arrive in
//!   any order; early arrivals wait in a reorder buffer until every lower seq has
//!   arrived. Rejected files (`None`) leave no row, so row `i` of the output is the
//!   `i`-th *accepted* file in sorted path order, and `label[i]`, `path[i]` and
//!   `mel[i]` always describe the same file.
//! * **Whole chunks.** Accepted rows are copied (converted to float16 when asked)
//!   into a chunk buffer of `chunk_files` rows; a full buffer becomes exactly one
//!   HDF5 chunk of each dataset: `mel` by a direct chunk write (`H5Dwrite_chunk`,
//!   no selection, no type path; see `direct`), `label` and `path` by
//!   `write_slice`. The last, partial chunk is written by `finish`, `mel`'s padded
//!   with zeros (HDF5's fill value). Memory is the chunk buffer of each split,
//!   the chunks held back as HDF5's chunk cache would hold them (at most its
//!   1 MiB: one float16 chunk of the default shape, none for float32), plus the
//!   reorder buffer, whose size the caller bounds by how many files it has in
//!   flight.
//! * **Same bytes as `write_slice`.** Direct writes put every chunk in the file
//!   at the moment and place the reference path ([`ChunkWrite::Slice`], kept for
//!   the test and `benches/writer.rs`) would: `tests_identity` compares whole
//!   files written both ways for float32 and float16, gaps, partial chunks and
//!   several splits.
//! * **Reproducible bytes.** Object time stamps are off and the call sequence
//!   depends only on the plan and the row contents, never on arrival order, so two
//!   runs over the same inputs give byte-identical files.
//! * **Protocol errors change nothing.** A bad split index, out-of-range or duplicate
//!   seq, or wrong row length is reported before any state changes; the writer stays
//!   usable. After an HDF5 or I/O error the writer is failed: every later call
//!   returns [`Error::Failed`]. Dropping a writer without `finish` (a failed
//!   run), or a `finish` that fails, closes the files and deletes the `.partial`
//!   files of the splits not yet renamed: a failed build leaves no debris (a
//!   killed one leaves `.partial` files, which the next build overwrites).
//!
//! **Why one thread, and who copies.** Row order is decided here (a row's
//! index is known only once every lower seq has arrived) and HDF5 is not
//! thread-safe, so every HDF5 call stays on this thread. Profiled on a warm
//! 20,000-clip build to tmpfs, two thirds of this thread's CPU time was the
//! kernel's `pwrite` of each chunk into the page cache (page allocation and
//! a copy), not HDF5: the build's files are therefore written through their
//! own file driver ([`lent`]), which takes the raw-data write of a chunk the
//! writer lends it and hands it to a pool of copier threads, at the address
//! HDF5 allocated. The bytes and their places in the file are the same; the
//! writer thread's own CPU went from 15.1 to about 7 µs per 30.6 KB row
//! (docs/BENCHMARKS.md, "Issue 39"), and the copy spreads over the cores.
//!
//! The file layout is documented for users in `docs/FORMAT.md`; the HDF5 calls live
//! in `h5` (schema, build files), `direct` (direct chunk writes of `mel`, the
//! writer's one raw HDF5 call besides `append::recover`'s), `driver` and
//! [`lent`] (the file drivers: what they share, and the build's) and [`append`] (SWMR
//! appends for `serve`), the chunk buffer in `chunk`; [`sink`] is the interface the stage graph writes
//! through, implemented here for `build`.

pub mod append;
mod attrs;
mod chunk;
mod compact;
mod direct;
mod driver;
pub mod frames;
pub(crate) mod h5;
pub(crate) mod lent;
pub mod meta;
mod plan_error;
pub mod sink;
pub mod stats;
pub mod strings;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_frames;
#[cfg(test)]
mod tests_identity;
mod validate;
pub mod vds;

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::frames::{FrameLayout, RowLayout};
pub use crate::model::Dtype;
use crate::model::Refusal;
use chunk::ChunkBuf;
use frames::FrameSplit;
use h5::{Header, SplitFile};
pub use plan_error::PlanError;
pub use sink::{Placed, RowPieces, Sink, Streamed};
use validate::validate;

/// The files of one split, in sorted path order; a file's index is its `seq`.
#[derive(Clone, Debug)]
pub struct SplitPlan {
    /// Split name; the output is `<out_dir>/<name>.h5`.
    pub name: String,
    pub files: Vec<PlannedFile>,
}

/// How whole chunks of `mel` reach the file. Both give byte-identical files
/// (`tests_identity`); [`ChunkWrite::Slice`] is kept as the reference the
/// identity test and `benches/writer.rs` compare against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ChunkWrite {
    /// `H5Dwrite_chunk` of the assembled chunk (the default).
    #[default]
    Direct,
    /// `write_slice` of the chunk's rows: hyperslab selection, type path and
    /// chunk cache (the writer before direct chunk writes).
    Slice,
}

/// One input file as the writer records it.
#[derive(Clone, Copy, Debug)]
pub struct PlannedFile {
    /// Index in [`OutputPlan::paths`] of the path relative to INPUT with `/`
    /// separators (stored in `path`).
    pub path: u32,
    /// Index into [`OutputPlan::label_names`], or -1 for no label.
    pub label: i32,
}

/// Everything the writer needs to know before the first row arrives.
#[derive(Clone, Debug)]
pub struct OutputPlan {
    pub out_dir: PathBuf,
    /// The relative paths [`PlannedFile::path`] indexes (shared with the walk).
    pub paths: std::sync::Arc<crate::plan::PathTable>,
    pub splits: Vec<SplitPlan>,
    /// Sorted, distinct; label ids index this.
    pub label_names: Vec<String>,
    /// The recipe's rows: librosa's fixed rows in `mel`, or rows of their
    /// own length (`crate::frames`' row protocol) in `features`.
    pub layout: RowLayout,
    pub dtype: Dtype,
    /// Rows per HDF5 chunk along N, ≥ 1.
    pub chunk_files: usize,
    /// Extra root attributes, stored as UTF-8 strings (e.g. `("input", "/abs/path")`).
    pub extra_attrs: Vec<(String, String)>,
}

/// What [`DatasetWriter::finish`] produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteReport {
    /// (split name, final path, rows written), in plan order.
    pub files: Vec<(String, PathBuf, usize)>,
    /// Total size on disk of the finished files.
    pub bytes_written: u64,
    /// Per split, in plan order, the rows written (seq, frames; 0 frames
    /// for librosa's fixed rows), when
    /// metadata was attached ([`DatasetWriter::with_meta`]); else empty.
    pub kept: Vec<Vec<meta::Kept>>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: cannot {action}: {source}", file.display())]
    Hdf5 {
        file: PathBuf,
        /// What was being done, e.g. "write rows 0..64 of dataset `mel`".
        action: String,
        source: hdf5::Error,
    },
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
    #[error("invalid output plan: {0}")]
    Plan(#[from] PlanError),
    #[error("no split with index {split} (the plan has {n_splits})")]
    UnknownSplit { split: usize, n_splits: usize },
    #[error("split `{split}`: seq {seq} is out of range (the split has {n_files} files)")]
    SeqOutOfRange {
        split: String,
        seq: usize,
        n_files: usize,
    },
    #[error("split `{split}`: seq {seq} was submitted twice")]
    DuplicateSeq { split: String, seq: usize },
    #[error(
        "split `{split}`: seq {seq} has a row of {got} values, not frames of {bins} values \
         plus {trailer}"
    )]
    FrameRowLength {
        split: String,
        seq: usize,
        got: usize,
        bins: usize,
        trailer: usize,
    },
    #[error("split `{split}`: seq {seq} came in pieces, which only variable-length rows do")]
    PiecesOfFixedRow { split: String, seq: usize },
    #[error("split `{split}`: seq {seq} has a row of {got} values, expected {expected}")]
    RowLength {
        split: String,
        seq: usize,
        got: usize,
        expected: usize,
    },
    #[error(
        "split `{split}`: {missing} of {n_files} files never arrived (first missing seq {first})"
    )]
    Incomplete {
        split: String,
        missing: usize,
        n_files: usize,
        first: usize,
    },
    #[error("the writer failed earlier and accepts no more calls")]
    Failed,
    #[error(
        "{}: not enough disk space: {needed} bytes could not be reserved for the next write \
         ({source}); nothing was written",
        path.display()
    )]
    NoSpace {
        path: PathBuf,
        needed: u64,
        source: std::io::Error,
    },
    #[error("{}: {reason}", file.display())]
    Incompatible {
        /// An existing output file that cannot be appended to with this setup.
        file: PathBuf,
        /// What differs, e.g. "mel rows are (79, 3, 32, 1), expected (2, 3, 4, 5)".
        reason: String,
    },
    #[error("{}: cannot recover: {reason}", file.display())]
    Recovery { file: PathBuf, reason: String },
    #[error("{}: label id {label} is outside -1..{n_labels}", file.display())]
    UnknownLabel {
        file: PathBuf,
        label: i32,
        n_labels: usize,
    },
}

/// Writes every split of one build; see the module documentation.
pub struct DatasetWriter {
    splits: Vec<SplitWriter>,
    rows: RowRule,
    failed: bool,
    /// Stored beside the rows (a manifest build's), when attached.
    meta: Option<meta::RowMeta>,
    /// Rows written from pieces (or refused) not yet taken.
    streamed: Vec<(usize, usize, Result<(), Refusal>)>,
    /// Sums the rows that arrive without their statistics.
    summer: stats::Summer,
}

/// One file's outcome as the build writer holds it until its turn.
pub(crate) enum Arrived {
    /// A row, with its statistics when its worker summed them.
    Row(Vec<f32>, Option<crate::cmvn::RowStats>),
    Skip,
    Pieces(Box<dyn RowPieces>),
}

/// What a submitted row must look like.
#[derive(Clone, Debug)]
pub(crate) enum RowRule {
    /// librosa: exactly this many values.
    Fixed(usize),
    /// Variable-length: the row protocol of this layout.
    Frames(FrameLayout),
}

impl RowRule {
    /// `Err` naming what is wrong when `row` breaks the rule.
    fn check(&self, split: &str, seq: usize, row: &[f32]) -> Result<(), Error> {
        match self {
            RowRule::Fixed(n) if row.len() != *n => Err(Error::RowLength {
                split: split.to_string(),
                seq,
                got: row.len(),
                expected: *n,
            }),
            RowRule::Frames(l) if l.frames_of(row.len()).is_none() => Err(Error::FrameRowLength {
                split: split.to_string(),
                seq,
                got: row.len(),
                bins: l.bins,
                trailer: l.trailer(),
            }),
            _ => Ok(()),
        }
    }
}

/// Where a split's rows go: librosa's chunk buffer and `mel`, or `features`.
enum SplitOut {
    Mel { chunk: ChunkBuf, out: SplitFile },
    Frames(FrameSplit),
}

impl SplitOut {
    fn partial_path(&self) -> &std::path::Path {
        match self {
            SplitOut::Mel { out, .. } => out.partial_path(),
            SplitOut::Frames(f) => f.partial_path(),
        }
    }
}

/// One split's reorder state, chunk buffer and open file.
struct SplitWriter {
    /// Its index in the plan's splits.
    index: usize,
    name: String,
    files: Vec<PlannedFile>,
    paths: std::sync::Arc<crate::plan::PathTable>,
    /// Lowest seq not yet consumed; every seq below it is in the file or the chunk.
    next_seq: usize,
    /// Early arrivals (seq > next_seq), held until their turn.
    pending: BTreeMap<usize, Arrived>,
    out: SplitOut,
    /// The rows written, when metadata is attached (None: not recorded).
    kept: Option<Vec<meta::Kept>>,
    /// The CMVN statistics of the rows written, in row order.
    stats: crate::cmvn::Stats,
}

impl DatasetWriter {
    /// Creates `<out_dir>/<split>.h5.partial` for every split (out_dir created if missing).
    pub fn create(plan: OutputPlan) -> Result<DatasetWriter, Error> {
        Self::create_named(plan, |split| format!("{split}.h5"))
    }

    /// As [`DatasetWriter::create`], with the final file name of each split given
    /// by `file_name(split)` (e.g. `<split>.shard-K-of-N.h5` for a sharded build);
    /// the file is `<name>.partial` until [`DatasetWriter::finish`].
    pub fn create_named(
        plan: OutputPlan,
        file_name: impl Fn(&str) -> String,
    ) -> Result<DatasetWriter, Error> {
        Self::create_with(plan, file_name, ChunkWrite::default())
    }

    /// As [`DatasetWriter::create_named`], writing chunks the way `how` says
    /// (the reference [`ChunkWrite::Slice`] is for tests and benchmarks).
    pub fn create_with(
        plan: OutputPlan,
        file_name: impl Fn(&str) -> String,
        how: ChunkWrite,
    ) -> Result<DatasetWriter, Error> {
        validate(&plan)?;
        std::fs::create_dir_all(&plan.out_dir).map_err(|source| Error::Io {
            path: plan.out_dir.clone(),
            action: "create the output directory",
            source,
        })?;
        let rows = match &plan.layout {
            RowLayout::Fixed(spec) => RowRule::Fixed(spec.row_len()),
            RowLayout::Frames(l) => RowRule::Frames(l.clone()),
        };
        let bins = crate::cmvn::Bins::of_layout(&plan.layout, plan.dtype);
        let mut splits = Vec::with_capacity(plan.splits.len());
        for split in plan.splits {
            let header = Header {
                split: &split.name,
                label_names: &plan.label_names,
                layout: &plan.layout,
                dtype: plan.dtype,
                chunk_files: plan.chunk_files,
                extra_attrs: &plan.extra_attrs,
            };
            let final_path = plan.out_dir.join(file_name(&split.name));
            let chunk_rows = plan.chunk_files.min(split.files.len());
            let out = match &plan.layout {
                RowLayout::Frames(l) => {
                    SplitOut::Frames(FrameSplit::create(final_path, &header, l)?)
                }
                RowLayout::Fixed(spec) => SplitOut::Mel {
                    out: SplitFile::create(final_path, &header, spec, how)?,
                    chunk: ChunkBuf::new(plan.dtype, spec.row_shape(), chunk_rows),
                },
            };
            tracing::debug!(
                split = %split.name,
                path = %out.partial_path().display(),
                files = split.files.len(),
                "Created a split file."
            );
            splits.push(SplitWriter {
                index: splits.len(),
                name: split.name,
                files: split.files,
                paths: std::sync::Arc::clone(&plan.paths),
                next_seq: 0,
                pending: BTreeMap::new(),
                out,
                kept: None,
                stats: crate::cmvn::Stats::new(bins.bins()),
            });
        }
        Ok(DatasetWriter {
            splits,
            rows,
            failed: false,
            meta: None,
            streamed: Vec::new(),
            summer: stats::Summer::new(bins),
        })
    }

    /// Stores `m` beside the rows (`meta::write`): `meta` and `line` per
    /// row, and [`WriteReport::kept`].
    pub fn with_meta(mut self, m: meta::RowMeta) -> DatasetWriter {
        for s in &mut self.splits {
            s.kept = Some(Vec::with_capacity(s.files.len()));
        }
        self.meta = Some(m);
        self
    }

    /// Hands over the outcome of file `seq` of split `split`: `Some(row)`
    /// (`spec.row_len()` f32 values in dB, layout `[n_long][n_short][n_mels][n_frames]`;
    /// with [`OutputPlan::frames`], `crate::frames`' row protocol)
    /// or `None` when the file was rejected.
    ///
    /// Outcomes may arrive in any order; rows land in seq order. Returns the row
    /// buffers no longer needed, for the caller to recycle.
    pub fn submit(
        &mut self,
        split: usize,
        seq: usize,
        row: Option<Vec<f32>>,
    ) -> Result<Vec<Vec<f32>>, Error> {
        let arrived = match row {
            Some(row) => Arrived::Row(row, None),
            None => Arrived::Skip,
        };
        self.submit_arrived(split, seq, arrived)
    }

    /// [`DatasetWriter::submit`] of a row whose statistics its worker
    /// summed (`crate::cmvn::Bins::row`); they are added, not recomputed.
    pub fn submit_with_stats(
        &mut self,
        split: usize,
        seq: usize,
        row: Vec<f32>,
        stats: Option<crate::cmvn::RowStats>,
    ) -> Result<Vec<Vec<f32>>, Error> {
        self.submit_arrived(split, seq, Arrived::Row(row, stats))
    }

    /// [`DatasetWriter::submit`] of any outcome: a row in pieces is pulled
    /// when its turn comes, and what became of it is then in
    /// [`DatasetWriter::take_streamed`].
    pub(crate) fn submit_arrived(
        &mut self,
        split: usize,
        seq: usize,
        row: Arrived,
    ) -> Result<Vec<Vec<f32>>, Error> {
        if self.failed {
            return Err(Error::Failed);
        }
        let n_splits = self.splits.len();
        let s = self
            .splits
            .get_mut(split)
            .ok_or(Error::UnknownSplit { split, n_splits })?;
        s.check(seq, &row, &self.rows)?;
        let mut recycled = Vec::new();
        if seq != s.next_seq {
            s.pending.insert(seq, row);
            return Ok(recycled);
        }
        let (rule, streamed) = (&self.rows, &mut self.streamed);
        let summer = &mut self.summer;
        let result = s
            .consume(row, (rule, summer), &mut recycled, streamed)
            .and_then(|()| {
                while let Some(row) = s.pending.remove(&s.next_seq) {
                    s.consume(row, (rule, summer), &mut recycled, streamed)?;
                }
                Ok(())
            });
        match result {
            Ok(()) => Ok(recycled),
            Err(e) => {
                self.failed = true;
                Err(e)
            }
        }
    }

    /// What became of the rows handed over in pieces since the last call,
    /// as (split, seq, written or refused), in the order they were written.
    pub fn take_streamed(&mut self) -> Vec<(usize, usize, Result<(), Refusal>)> {
        std::mem::take(&mut self.streamed)
    }

    /// Rows waiting in the reorder buffers of all splits (for telemetry).
    pub fn pending_rows(&self) -> usize {
        self.splits.iter().map(|s| s.pending.len()).sum()
    }

    /// Writes the remaining partial chunk of every split, closes the files and
    /// renames every `.partial` to `<split>.h5`. Errors, renaming nothing, if some
    /// seq never arrived.
    pub fn finish(mut self) -> Result<WriteReport, Error> {
        if self.failed {
            return Err(Error::Failed);
        }
        for s in &self.splits {
            if s.next_seq < s.files.len() {
                return Err(Error::Incomplete {
                    split: s.name.clone(),
                    missing: s.files.len() - s.next_seq - s.pending.len(),
                    n_files: s.files.len(),
                    first: s.next_seq,
                });
            }
        }
        let mut report = WriteReport {
            files: Vec::with_capacity(self.splits.len()),
            bytes_written: 0,
            kept: Vec::new(),
        };
        // Splits not yet renamed stay in `self.splits`, so a failure here
        // leaves their `.partial` files to `Drop`.
        while !self.splits.is_empty() {
            if let SplitOut::Mel { chunk, out } = &mut self.splits[0].out
                && chunk.rows() > 0
            {
                out.append(chunk)?;
            }
            let mut s = self.splits.remove(0);
            let partial = s.out.partial_path().to_path_buf();
            if let (Some(m), Some(kept)) = (&self.meta, &s.kept) {
                let rows: Vec<u32> = kept.iter().map(|k| s.files[k.0 as usize].path).collect();
                let file = match &s.out {
                    SplitOut::Mel { out, .. } => out.file(),
                    SplitOut::Frames(f) => f.file(),
                };
                meta::write(file, &partial, m, &rows).inspect_err(|_| remove_partial(&partial))?;
            }
            report.kept.extend(s.kept.take());
            let stats_files = s.write_stats().inspect_err(|_| remove_partial(&partial))?;
            let closed = match s.out {
                SplitOut::Mel { out, .. } => out.close(),
                SplitOut::Frames(f) => f.close(),
            };
            let (path, rows, bytes) = closed.inspect_err(|_| remove_partial(&partial))?;
            stats_files.commit().map_err(|source| Error::Io {
                path: path.clone(),
                action: "rename the statistics files beside",
                source,
            })?;
            tracing::debug!(
                split = %s.name,
                path = %path.display(),
                rows,
                bytes,
                "Wrote a split file."
            );
            report.files.push((s.name, path, rows));
            report.bytes_written += bytes;
        }
        Ok(report)
    }
}

impl Drop for DatasetWriter {
    fn drop(&mut self) {
        let partial: Vec<PathBuf> = self
            .splits
            .iter()
            .map(|s| s.out.partial_path().to_path_buf())
            .collect();
        self.splits.clear(); // closes the files
        for p in &partial {
            remove_partial(p);
        }
    }
}

/// Deletes an unfinished `.partial` file; failures are logged.
fn remove_partial(p: &std::path::Path) {
    match std::fs::remove_file(p) {
        Ok(()) => tracing::debug!(path = %p.display(), "Deleted an unfinished split file."),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(path = %p.display(), error = %e, "Cannot delete an unfinished split file.")
        }
    }
}

impl SplitWriter {
    /// Rejects a submission that would break the protocol, changing nothing.
    /// Stores the split's statistics in its open file and writes the files
    /// beside it under their `.partial` names (renamed after the split file).
    fn write_stats(&self) -> Result<crate::cmvn::files::Pending, Error> {
        let (file, partial, final_path) = match &self.out {
            SplitOut::Mel { out, .. } => (out.file(), out.partial_path(), out.final_path()),
            SplitOut::Frames(f) => (f.file(), f.partial_path(), f.final_path()),
        };
        stats::write(file, partial, &self.stats)?;
        crate::cmvn::files::prepare(final_path, &self.stats).map_err(|source| Error::Io {
            path: final_path.to_path_buf(),
            action: "write the statistics files beside",
            source,
        })
    }

    fn check(&self, seq: usize, row: &Arrived, rule: &RowRule) -> Result<(), Error> {
        if seq >= self.files.len() {
            return Err(Error::SeqOutOfRange {
                split: self.name.clone(),
                seq,
                n_files: self.files.len(),
            });
        }
        if seq < self.next_seq || self.pending.contains_key(&seq) {
            return Err(Error::DuplicateSeq {
                split: self.name.clone(),
                seq,
            });
        }
        match row {
            Arrived::Row(row, _) => rule.check(&self.name, seq, row),
            Arrived::Skip => Ok(()),
            Arrived::Pieces(_) if matches!(rule, RowRule::Fixed(_)) => {
                Err(Error::PiecesOfFixedRow {
                    split: self.name.clone(),
                    seq,
                })
            }
            Arrived::Pieces(_) => Ok(()),
        }
    }

    /// Consumes the outcome of `next_seq`, writing the chunk when it fills up.
    fn consume(
        &mut self,
        row: Arrived,
        (rule, summer): (&RowRule, &mut stats::Summer),
        recycled: &mut Vec<Vec<f32>>,
        streamed: &mut Vec<(usize, usize, Result<(), Refusal>)>,
    ) -> Result<(), Error> {
        let file = self.files[self.next_seq];
        self.next_seq += 1;
        let (row, row_stats) = match row {
            Arrived::Row(row, given) => {
                let s = summer.row(&row, given);
                (row, s)
            }
            Arrived::Skip => return Ok(()),
            Arrived::Pieces(mut pieces) => {
                let seq = self.next_seq - 1;
                let SplitOut::Frames(f) = &mut self.out else {
                    unreachable!("checked on arrival: pieces are variable-length rows")
                };
                let mut piece = recycled.pop().unwrap_or_default();
                let path = self.paths.get(file.path);
                let mut tally = stats::Tally {
                    inner: pieces.as_mut(),
                    acc: summer.bins.acc(),
                };
                let r = f.push_pieces(&mut tally, &mut piece, file.label, path)?;
                recycled.push(piece);
                if r.is_ok() {
                    self.stats.add_row(&tally.acc.take());
                }
                if let (Some(kept), Ok(frames)) = (&mut self.kept, &r) {
                    kept.push((seq as u32, u32::try_from(*frames).unwrap_or(u32::MAX)));
                }
                streamed.push((self.index, seq, r.map(drop)));
                return Ok(());
            }
        };
        if let Some(kept) = &mut self.kept {
            let frames = match rule {
                RowRule::Fixed(_) => 0,
                RowRule::Frames(l) => l.frames_of(row.len()).unwrap_or(0),
            };
            let seq = (self.next_seq - 1) as u32;
            kept.push((seq, u32::try_from(frames).unwrap_or(u32::MAX)));
        }
        let path = self.paths.get(file.path);
        match &mut self.out {
            SplitOut::Mel { chunk, out } => {
                chunk.push(&row, file.label, path)?;
                if chunk.is_full() {
                    out.append(chunk)?;
                    chunk.clear();
                }
            }
            SplitOut::Frames(f) => f.push(&row, file.label, path)?,
        }
        self.stats.add_row(&row_stats);
        recycled.push(row);
        Ok(())
    }
}
