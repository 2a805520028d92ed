//! What an appender's rows go into: librosa's fixed rows (`mel` and the
//! chunk buffer) or variable-length rows (`features`, `offsets`, `lengths`,
//! `pad_value` and the frame buffer of `writer::frames`), behind one type so
//! that the appender's journal-facing logic (label names, space
//! reservations, flush, recovery, undo) is the same for both.
//!
//! librosa's rows are written a chunk at a time: the buffer is due at the
//! next chunk boundary, so once the rows reach one it holds a whole chunk,
//! which goes to the file by a direct chunk write whose bytes the copiers
//! put in the file (`crate::writer::lent`, as the build's writer does).
//! What a flush writes before a boundary (the rows of a partly filled
//! chunk, then the rest of that chunk at the next write) goes through
//! `write_slice`. [`Store::settle`] waits for the copiers; the flush calls
//! it before HDF5's metadata and the `fsync`.
//!
//! Recovery cuts both layouts to the journal's rows: the per-row datasets
//! to the confirmed count, `features` to the end of the last confirmed row
//! (read from that row's `offsets` and `lengths`, which the confirmed flush
//! made durable). Frames a killed writer left past that end are garbage no
//! row names; the next rows overwrite them.
//!
//! Compact storage (`writer::compact`): a compressed chunk cannot take more
//! frames in place, so the buffer starts at a chunk boundary and keeps the
//! frames of the last, partly filled chunk after they are written (padded
//! with zeros); each write rewrites that chunk whole with the frames that
//! came since. HDF5 stores a rewritten chunk of another size elsewhere and
//! may hand its old space out again before the chunk index that names the
//! new place is in the file, so [`Store::rewrites`] tells the appender to
//! arm its undo log (`super::undo`) before such a write; its flush commits
//! it. On open, the frames of a partly filled last chunk are read back.

use std::path::Path;

use hdf5::Dataset;

use crate::frames::{FrameLayout, RowLayout};
use crate::writer::Error;
use crate::writer::chunk::ChunkBuf;
use crate::writer::direct::MelChunks;
use crate::writer::frames::{FrameBuf, FrameSets, chunk_frames};
use crate::writer::h5::{Context, Datasets, Header, PathColumn};

/// The datasets of an open split file, either layout.
pub(super) enum Sets {
    Mel(Datasets),
    Frames(FrameSets),
}

impl Sets {
    /// Opens the datasets of the layout `h` describes.
    pub(super) fn open(file: &hdf5::File, p: &Path, h: &Header<'_>) -> Result<Sets, Error> {
        match h.layout {
            RowLayout::Fixed(_) if !file.link_exists("mel") && file.link_exists("features") => {
                Err(Error::Incompatible {
                    file: p.to_path_buf(),
                    reason: "the file has variable-length `features` rows, this configuration \
                             makes librosa's `mel` rows"
                        .into(),
                })
            }
            RowLayout::Fixed(_) => Datasets::open(file, p).map(Sets::Mel),
            RowLayout::Frames(l) => {
                if !file.link_exists("features") {
                    return Err(Error::Incompatible {
                        file: p.to_path_buf(),
                        reason: format!(
                            "the file has librosa's `mel` rows, this configuration makes \
                             `{}` rows of variable length",
                            l.recipe
                        ),
                    });
                }
                FrameSets::open(file, p, l.padded_frames.is_some()).map(Sets::Frames)
            }
        }
    }

    /// Creates the datasets of a new file, all but `path` (the appender's
    /// `writer::strings` column).
    pub(super) fn create(file: &hdf5::File, p: &Path, h: &Header<'_>) -> Result<(), Error> {
        match h.layout {
            RowLayout::Fixed(spec) => {
                Datasets::create(file, p, h, spec, PathColumn::Caller).map(drop)
            }
            RowLayout::Frames(l) => FrameSets::create(file, p, h, l, PathColumn::Caller).map(drop),
        }
    }

    pub(super) fn label(&self) -> &Dataset {
        match self {
            Sets::Mel(d) => &d.label,
            Sets::Frames(d) => &d.label,
        }
    }

    /// The variable-length `path` of a file from before `writer::strings`
    /// (or made by `build`), which the appender converts and then unlinks.
    pub(super) fn take_vlen_path(&mut self) -> Option<Dataset> {
        match self {
            Sets::Mel(d) => d.path.take(),
            Sets::Frames(d) => d.path.take(),
        }
    }

    /// Rows in each per-row dataset (`mel`'s first for librosa).
    pub(super) fn row_lens(&self) -> Vec<usize> {
        match self {
            Sets::Mel(d) => {
                let mut v = vec![d.mel.shape()[0], d.label.size()];
                v.extend(d.path.as_ref().map(|p| p.size()));
                v
            }
            Sets::Frames(d) => d.row_lens(),
        }
    }

    /// Rows `range` as whole rows of the row protocol (`mel` rows; frames
    /// then the trailer, a pad value of 0 where the layout has one): the
    /// values as stored, for summing their statistics again.
    pub(super) fn read_rows(
        &self,
        p: &Path,
        range: std::ops::Range<usize>,
    ) -> Result<Vec<Vec<f32>>, Error> {
        let n = range.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let what = |name: &'static str| {
            let r = range.clone();
            move || format!("read rows {r:?} of dataset `{name}`")
        };
        match self {
            Sets::Mel(d) => {
                let v = d
                    .mel
                    .read_slice::<f32, _, ndarray::IxDyn>((range.clone(), .., .., .., ..))
                    .ctx(p, what("mel"))?;
                let v = v.as_standard_layout();
                let flat = v.as_slice().unwrap_or_default();
                Ok(flat
                    .chunks_exact(flat.len() / n)
                    .map(<[f32]>::to_vec)
                    .collect())
            }
            Sets::Frames(d) => {
                let offsets = d
                    .offsets
                    .read_slice_1d::<i64, _>(range.clone())
                    .ctx(p, what("offsets"))?;
                let lengths = d
                    .lengths
                    .read_slice_1d::<i32, _>(range.clone())
                    .ctx(p, what("lengths"))?;
                let bins = d.features.shape().get(1).copied().unwrap_or(1);
                let spans: Vec<(usize, usize)> = offsets
                    .iter()
                    .zip(&lengths)
                    .map(|(&o, &l)| (o.max(0) as usize, l.max(0) as usize))
                    .collect();
                let lo = spans.iter().map(|s| s.0).min().unwrap_or(0);
                let hi = spans.iter().map(|s| s.0 + s.1).max().unwrap_or(lo);
                let v = d
                    .features
                    .read_slice_2d::<f32, _>((lo..hi, ..))
                    .ctx(p, what("features"))?;
                let v = v.as_standard_layout();
                let flat = v.as_slice().unwrap_or_default();
                let trailer = usize::from(d.pad.is_some());
                Ok(spans
                    .iter()
                    .map(|&(o, l)| {
                        let mut row = flat[(o - lo) * bins..(o - lo + l) * bins].to_vec();
                        row.resize(row.len() + trailer, 0.0);
                        row
                    })
                    .collect())
            }
        }
    }

    /// Whether `features` holds frames past the first `rows` rows' (a write
    /// killed after it grew `features` and before the per-row datasets).
    pub(super) fn frames_past(&self, p: &Path, rows: usize) -> Result<bool, Error> {
        match self {
            Sets::Mel(_) => Ok(false),
            Sets::Frames(d) => Ok(d.features.shape()[0] != d.frames_of_rows(p, rows)?),
        }
    }

    /// Cuts every dataset to `rows` rows (and their frames).
    pub(super) fn cut(&self, p: &Path, rows: usize) -> Result<(), Error> {
        match self {
            Sets::Mel(d) => d.resize(p, rows),
            Sets::Frames(d) => d.resize(p, rows, d.frames_of_rows(p, rows)?),
        }
    }

    /// Refuses stored rows whose shape or element type differ from `h`'s.
    pub(super) fn check_shape(&self, h: &Header<'_>) -> Result<(), String> {
        let (ds, what, shape, want) = match (self, h.layout) {
            (Sets::Mel(d), RowLayout::Fixed(spec)) => {
                let row = spec.row_shape();
                let shape = d.mel.shape();
                if shape.len() != 5 || shape[1..] != row {
                    return Err(format!(
                        "mel has shape {shape:?}, this configuration makes rows of {row:?}"
                    ));
                }
                (&d.mel, "mel", shape, vec![])
            }
            (Sets::Frames(d), RowLayout::Frames(l)) => {
                (&d.features, "features", d.features.shape(), vec![l.bins])
            }
            (Sets::Frames(_), RowLayout::Fixed(_)) => {
                return Err("the file has variable-length rows".into());
            }
            (Sets::Mel(_), RowLayout::Frames(_)) => {
                return Err("the file has librosa's fixed rows".into());
            }
        };
        if !want.is_empty() && (shape.len() != 2 || shape[1..] != want) {
            return Err(format!(
                "{what} has shape {shape:?}, this configuration makes frames of {} values",
                want[0]
            ));
        }
        let dtype_ok = match h.dtype.is_f16() {
            false => ds.dtype().is_ok_and(|t| t.is::<f32>()),
            true => ds.dtype().is_ok_and(|t| t.is::<half::f16>()),
        };
        if !dtype_ok {
            return Err(format!("{what} is not {}", h.dtype.name()));
        }
        // Compact chunks go in compressed: a plain dataset must not get them,
        // nor a compact one plain values off the grid.
        match (ds.filters().is_empty(), h.dtype.tick_power().is_some()) {
            (true, true) => Err(format!(
                "{what} is stored plain, this configuration stores compact chunks \
                 (`output.storage = \"compact\"`)"
            )),
            (false, false) => Err(format!(
                "{what} is stored compact (Blosc chunks), this configuration stores plain \
                 values"
            )),
            _ => Ok(()),
        }
    }
}

/// An appender's datasets with the rows not yet written to them.
pub(super) enum Store {
    Mel {
        ds: Datasets,
        /// The rows since the last write: up to the next chunk boundary.
        chunk: ChunkBuf,
        row_len: usize,
        /// Rows per `mel` chunk.
        chunk_rows: usize,
        /// Whole chunks go to the file by direct chunk writes, their bytes
        /// lent to the copiers (`crate::writer::lent`); None where the
        /// dataset's chunks are not plain rows of `chunk_rows`.
        direct: Option<MelChunks>,
    },
    Frames {
        ds: FrameSets,
        buf: Box<FrameBuf>,
        layout: FrameLayout,
        /// Frames in `features` before the buffer's (compact: a chunk
        /// boundary; the buffer may hold frames already written).
        frames: usize,
        /// Frames per `features` chunk: a buffer this long is written.
        chunk_frames: usize,
        /// Compact: the chunk at `frames` is in the file and holds frames
        /// of rows, so the next write rewrites it.
        rewrites: bool,
    },
}

impl Store {
    /// The store over `sets` for rows of `spec`'s layout (which
    /// [`Sets::open`] followed).
    pub(super) fn new(sets: Sets, spec: &super::AppendSpec, p: &Path) -> Result<Store, Error> {
        match (sets, &spec.layout) {
            (Sets::Frames(ds), RowLayout::Frames(l)) => {
                let chunk_frames = chunk_frames(l, spec.dtype);
                let mut buf = Box::new(FrameBuf::new(spec.dtype, l));
                let end = ds.features.shape()[0];
                let frames = match buf.is_compact() {
                    true => end / chunk_frames * chunk_frames,
                    false => end,
                };
                load_frames(&ds, p, &mut buf, frames..end)?;
                Ok(Store::Frames {
                    frames,
                    buf,
                    chunk_frames,
                    rewrites: end > frames,
                    layout: l.clone(),
                    ds,
                })
            }
            (Sets::Mel(ds), RowLayout::Fixed(s)) => {
                let chunk_rows = spec.chunk_files;
                let mut shape = vec![chunk_rows];
                shape.extend(s.row_shape());
                let plain = ds.mel.filters().is_empty() && ds.mel.chunk() == Some(shape);
                let direct = plain
                    .then(|| MelChunks::new(&ds.mel, chunk_rows, s.row_len(), false))
                    .flatten();
                Ok(Store::Mel {
                    chunk: ChunkBuf::new(spec.dtype, s.row_shape(), chunk_rows),
                    row_len: s.row_len(),
                    chunk_rows,
                    direct,
                    ds,
                })
            }
            _ => Err(crate::writer::PlanError::LayoutMismatch.into()),
        }
    }

    /// `mel`, whose synced chunks leave the page cache (librosa only).
    pub(super) fn mel(&self) -> Option<&Dataset> {
        match self {
            Store::Mel { ds, .. } => Some(&ds.mel),
            Store::Frames { .. } => None,
        }
    }

    /// Rows buffered.
    pub(super) fn rows(&self) -> usize {
        match self {
            Store::Mel { chunk, .. } => chunk.rows(),
            Store::Frames { buf, .. } => buf.rows(),
        }
    }

    /// Whether the buffer is due to be written before the next row.
    ///
    /// A compact buffer holds a plain chunk's bytes (1 MiB of values,
    /// [`crate::writer::compact::CHUNK_SHARE`] compact chunks) before it is
    /// written: each write rewrites the partly filled last chunk, so fewer
    /// writes mean fewer rewrites (each packs a chunk again and leaves the
    /// old one's bytes behind).
    ///
    /// A librosa buffer is due at the next chunk boundary after `written`
    /// (the rows in the file): a buffer that starts on one is then a whole
    /// chunk, written directly.
    pub(super) fn is_full(&self, chunk_files: usize, written: usize) -> bool {
        match self {
            Store::Mel {
                chunk, chunk_rows, ..
            } => chunk.rows() >= chunk_rows - written % chunk_rows,
            Store::Frames {
                buf, chunk_frames, ..
            } => {
                let share = match buf.is_compact() {
                    true => crate::writer::compact::CHUNK_SHARE,
                    false => 1,
                };
                buf.rows() >= chunk_files * share || buf.buffered_frames() >= chunk_frames * share
            }
        }
    }

    /// `Err` when `row` (for row `index` of `file`) breaks the layout.
    pub(super) fn check(&self, file: &Path, index: usize, row: &[f32]) -> Result<(), Error> {
        let split = file.display().to_string();
        match self {
            Store::Mel { row_len, .. } if row.len() != *row_len => Err(Error::RowLength {
                split,
                seq: index,
                got: row.len(),
                expected: *row_len,
            }),
            Store::Frames { layout, .. } if layout.frames_of(row.len()).is_none() => {
                Err(Error::FrameRowLength {
                    split,
                    seq: index,
                    got: row.len(),
                    bins: layout.bins,
                    trailer: layout.trailer(),
                })
            }
            _ => Ok(()),
        }
    }

    pub(super) fn push(&mut self, row: &[f32], label: i32, path: &str) -> Result<(), Error> {
        match self {
            Store::Mel { chunk, .. } => chunk.push(row, label, path),
            Store::Frames { buf, frames, .. } => {
                let at = *frames + buf.buffered_frames();
                buf.push(row, at, label, path)
            }
        }
    }

    /// The file frame the next row starts at (variable-length rows only).
    pub(super) fn frames_end(&self) -> Result<usize, Error> {
        match self {
            Store::Frames { buf, frames, .. } => Ok(*frames + buf.buffered_frames()),
            Store::Mel { .. } => Err(crate::writer::PlanError::LayoutMismatch.into()),
        }
    }

    /// Buffers frames of the row under way (`frames × bins` values).
    pub(super) fn extend_frames(&mut self, file: &Path, piece: &[f32]) -> Result<(), Error> {
        match self {
            Store::Frames { buf, .. } if piece.len().is_multiple_of(buf.bins()) => {
                buf.extend_frames(piece);
                Ok(())
            }
            Store::Frames { buf, .. } => Err(Error::FrameRowLength {
                split: file.display().to_string(),
                seq: usize::MAX,
                got: piece.len(),
                bins: buf.bins(),
                trailer: 0,
            }),
            Store::Mel { .. } => Err(crate::writer::PlanError::LayoutMismatch.into()),
        }
    }

    /// Ends the row under way, whose frames started at file frame `start`.
    pub(super) fn end_row(
        &mut self,
        start: usize,
        trailer: &[f32],
        label: i32,
        path: &str,
    ) -> Result<(), Error> {
        match self {
            Store::Frames { buf, frames, .. } => {
                let n = *frames + buf.buffered_frames() - start;
                buf.end_row_at(start, n, trailer, label, path)
            }
            Store::Mel { .. } => Err(crate::writer::PlanError::LayoutMismatch.into()),
        }
    }

    /// Whether the next write rewrites a compact chunk that holds frames of
    /// rows (the appender arms its undo log first).
    pub(super) fn rewrites(&self) -> bool {
        matches!(self, Store::Frames { rewrites: true, .. })
    }

    /// Forgets the frames of a row given up half-way, which started at file
    /// frame `start`: written ones are overwritten by the next row's. A
    /// compact buffer starts again at the chunk boundary below `start`,
    /// with the frames of rows before it read back from the file.
    pub(super) fn give_up_row(&mut self, p: &Path, start: usize) -> Result<(), Error> {
        if let Store::Frames {
            ds,
            buf,
            frames,
            chunk_frames,
            rewrites,
            ..
        } = self
        {
            if start >= *frames {
                buf.truncate_frames(start - *frames);
            } else if buf.is_compact() {
                buf.clear_frames();
                *frames = start / *chunk_frames * *chunk_frames;
                load_frames(ds, p, buf, *frames..start)?;
                *rewrites = start > *frames;
            } else {
                buf.clear_frames();
                *frames = start;
            }
        }
        Ok(())
    }

    /// Most bytes writing the buffered rows (`rows` of them, chunks of
    /// `chunk_rows`) can add to the file, strings aside.
    pub(super) fn bytes_to_write(&self, rows: usize, chunk_rows: usize, dtype_size: usize) -> u64 {
        // A write may start a new chunk at each end of its rows.
        let chunks = (rows.div_ceil(chunk_rows) + 1) as u64;
        match self {
            Store::Mel { row_len, .. } => {
                chunks * chunk_rows as u64 * ((row_len * dtype_size) as u64 + 4)
            }
            Store::Frames {
                buf,
                chunk_frames,
                layout,
                ..
            } => {
                let frames = (buf.buffered_frames() + 2 * chunk_frames) as u64;
                frames * (layout.bins * dtype_size) as u64 + chunks * chunk_rows as u64 * 24
            }
        }
    }

    /// Writes the buffered rows at row `rows` (resizing every dataset) and
    /// empties the buffer; their paths are the caller's to write (the
    /// appender's `writer::strings` column).
    pub(super) fn write(&mut self, p: &Path, rows: usize) -> Result<(), Error> {
        match self {
            Store::Mel {
                ds,
                chunk,
                chunk_rows,
                direct,
                ..
            } => {
                let whole = rows.is_multiple_of(*chunk_rows) && chunk.rows() == *chunk_rows;
                ds.write_rows(p, rows, chunk, direct.as_mut().filter(|_| whole))?;
                chunk.clear();
            }
            Store::Frames {
                ds,
                buf,
                frames,
                chunk_frames,
                rewrites,
                ..
            } if buf.is_compact() => {
                let end = *frames + buf.buffered_frames();
                let bins = buf.bins();
                ds.features
                    .resize((end, bins))
                    .ctx(p, || format!("grow dataset `features` to {end} frames"))?;
                *frames += buf
                    .write_compact(&ds.features, *frames, *chunk_frames)
                    .ctx(p, || {
                        format!("write compact chunks of `features` from frame {frames}")
                    })?;
                *rewrites = buf.buffered_frames() > 0;
                ds.write_rows(p, rows, buf)?;
                buf.clear_rows();
            }
            Store::Frames {
                ds, buf, frames, ..
            } => {
                ds.write(p, rows, *frames, buf)?;
                *frames += buf.buffered_frames();
                buf.clear_rows();
                buf.clear_frames();
            }
        }
        Ok(())
    }

    /// Waits until every chunk written directly is in the file (before the
    /// flush's metadata and `fsync`, and before the undo log is armed).
    pub(super) fn settle(&mut self, p: &Path) -> Result<(), Error> {
        match self {
            Store::Mel {
                ds,
                direct: Some(direct),
                ..
            } => direct
                .flush(&ds.mel)
                .ctx(p, || "write the chunks of dataset `mel`".into()),
            _ => Ok(()),
        }
    }
}

/// Reads frames `range` of `features` back into `buf` (compact: the frames
/// of rows in a partly filled chunk, which the next write rewrites whole).
/// Their values are on the grid already, so storing them again keeps them.
fn load_frames(
    ds: &FrameSets,
    p: &Path,
    buf: &mut FrameBuf,
    range: std::ops::Range<usize>,
) -> Result<(), Error> {
    if range.is_empty() {
        return Ok(());
    }
    let what = || format!("read frames {range:?} of dataset `features` back");
    let values = ds
        .features
        .read_slice_2d::<f32, _>((range.clone(), ..))
        .ctx(p, what)?;
    match values.as_slice() {
        Some(v) => buf.extend_frames(v),
        None => buf.extend_frames(&values.iter().copied().collect::<Vec<f32>>()),
    }
    Ok(())
}
