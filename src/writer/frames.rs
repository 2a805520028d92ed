//! Variable-length rows in a split file (recipes other than librosa;
//! `crate::frames` has the row protocol, docs/FORMAT.md "Variable-length
//! rows" the layout users read).
//!
//! Datasets: `features` (total_frames, bins) in the output dtype, chunked by
//! [`chunk_frames`] frames (about [`CHUNK_TARGET_BYTES`], a long utterance:
//! one row touches one chunk, two where it straddles a boundary); per row
//! `offsets` (int64, first frame), `lengths` (int32, frames), `label`,
//! `path`, and `pad_value` (float32) when readers pad rows
//! ([`FrameLayout::padded_frames`]). Rows are `features[offsets[i] :
//! offsets[i] + lengths[i]]`, back to back in row order.
//!
//! [`FrameBuf`] holds the rows not yet written, already in the stored
//! element type. The build ([`FrameSplit`]) writes whole `features` chunks
//! directly (`H5Dwrite_chunk`, as `mel`'s) as soon as they fill, the per-row
//! datasets every `chunk_files` rows, and the last partial chunk (zero
//! padded, HDF5's fill value) at the close: the calls depend only on the row
//! contents, so the bytes do not depend on thread counts. serve's appender
//! writes the same buffer with `write_slice` at each flush
//! ([`FrameSets::write`]).

use std::path::{Path, PathBuf};

use half::f16;
use hdf5::types::VarLenUnicode;
use hdf5::{Dataset, Extent, File, SimpleExtents};

use super::chunk::MelBuf;
use super::direct::raw;
use super::h5::{Context, Header, PathColumn, create_1d, create_file, finish_file, write_attrs};
use super::lent::{self, InFlight, Loaned};
use super::sink::RowPieces;
use super::{Dtype, Error};
use crate::frames::FrameLayout;
use crate::model::Refusal;

pub use super::compact::chunk_frames;

/// The datasets of a variable-length split file.
pub(super) struct FrameSets {
    pub features: Dataset,
    pub offsets: Dataset,
    pub lengths: Dataset,
    pub label: Dataset,
    /// As `writer::h5::Datasets::path`: None in a serve file.
    pub path: Option<Dataset>,
    pub pad: Option<Dataset>,
}

impl FrameSets {
    /// Creates every dataset empty (N = 0, no frames).
    pub(super) fn create(
        file: &File,
        p: &Path,
        h: &Header<'_>,
        l: &FrameLayout,
        paths: PathColumn,
    ) -> Result<Self, Error> {
        let builder = match h.dtype.is_f16() {
            false => file.new_dataset::<f32>(),
            true => file.new_dataset::<f16>(),
        };
        let builder = builder
            .shape(SimpleExtents::from_vec(vec![
                Extent::resizable(0),
                Extent::fixed(l.bins),
            ]))
            .chunk(vec![chunk_frames(l, h.dtype), l.bins])
            .obj_track_times(false);
        let builder = match h.dtype.tick_power() {
            Some(_) => super::compact::filtered(builder),
            None => builder,
        };
        let features = builder
            .create("features")
            .ctx(p, || "create dataset `features`".into())?;
        let c = h.chunk_files;
        let one = |name: &'static str, r: hdf5::Result<Dataset>| {
            r.ctx(p, || format!("create dataset `{name}`"))
        };
        let pad = match l.padded_frames {
            Some(_) => Some(one("pad_value", create_1d::<f32>(file, "pad_value", c))?),
            None => None,
        };
        Ok(FrameSets {
            features,
            offsets: one("offsets", create_1d::<i64>(file, "offsets", c))?,
            lengths: one("lengths", create_1d::<i32>(file, "lengths", c))?,
            label: one("label", create_1d::<i32>(file, "label", c))?,
            path: match paths {
                PathColumn::Vlen => Some(one("path", create_1d::<VarLenUnicode>(file, "path", c))?),
                PathColumn::Caller => None,
            },
            pad,
        })
    }

    /// Opens the datasets of an existing file.
    pub(super) fn open(file: &File, p: &Path, padded: bool) -> Result<Self, Error> {
        let open = |name: &'static str| {
            file.dataset(name)
                .ctx(p, || format!("open dataset `{name}`"))
        };
        Ok(FrameSets {
            features: open("features")?,
            offsets: open("offsets")?,
            lengths: open("lengths")?,
            label: open("label")?,
            path: match file.link_exists("path") {
                true => Some(open("path")?),
                false => None,
            },
            pad: if padded {
                Some(open("pad_value")?)
            } else {
                None
            },
        })
    }

    /// The per-row datasets, for length checks.
    pub(super) fn row_lens(&self) -> Vec<usize> {
        let mut v = vec![self.offsets.size(), self.lengths.size(), self.label.size()];
        v.extend(self.path.as_ref().map(|d| d.size()));
        v.extend(self.pad.as_ref().map(|d| d.size()));
        v
    }

    /// Cuts (or grows) the per-row datasets to `rows` and `features` to `frames`.
    pub(super) fn resize(&self, p: &Path, rows: usize, frames: usize) -> Result<(), Error> {
        let bins = self.features.shape().get(1).copied().unwrap_or(0);
        self.features.resize((frames, bins)).ctx(p, || {
            format!("resize dataset `features` to {frames} frames")
        })?;
        for (name, d) in self.per_row() {
            d.resize(rows)
                .ctx(p, || format!("resize dataset `{name}` to {rows} rows"))?;
        }
        Ok(())
    }

    fn per_row(&self) -> Vec<(&'static str, &Dataset)> {
        let mut v = vec![
            ("offsets", &self.offsets),
            ("lengths", &self.lengths),
            ("label", &self.label),
        ];
        v.extend(self.path.as_ref().map(|d| ("path", d)));
        v.extend(self.pad.as_ref().map(|d| ("pad_value", d)));
        v
    }

    /// Frames the first `rows` rows cover: the end of row `rows − 1`.
    pub(super) fn frames_of_rows(&self, p: &Path, rows: usize) -> Result<usize, Error> {
        if rows == 0 {
            return Ok(0);
        }
        let at = rows - 1;
        let what = |name: &'static str| move || format!("read row {at} of dataset `{name}`");
        let start = self
            .offsets
            .read_slice_1d::<i64, _>(at..rows)
            .ctx(p, what("offsets"))?[0];
        let len = i64::from(
            self.lengths
                .read_slice_1d::<i32, _>(at..rows)
                .ctx(p, what("lengths"))?[0],
        );
        usize::try_from(start + len).map_err(|_| Error::Recovery {
            file: p.to_path_buf(),
            reason: format!("row {at} has offset {start} and length {len}"),
        })
    }

    /// Writes the buffered rows at row `rows` and frame `frames` with
    /// `write_slice` (serve's appender: partly filled chunks included).
    pub(super) fn write(
        &self,
        p: &Path,
        rows: usize,
        frames: usize,
        buf: &FrameBuf,
    ) -> Result<(), Error> {
        let end = frames + buf.buffered_frames();
        let bins = buf.bins;
        self.features
            .resize((end, bins))
            .ctx(p, || format!("grow dataset `features` to {end} frames"))?;
        if end > frames {
            let what = || format!("write frames {frames}..{end} of dataset `features`");
            let shape = (end - frames, bins);
            match &buf.values {
                MelBuf::F32(v) => self.features.write_slice(
                    ndarray::ArrayView2::from_shape(shape, v).expect("buffer shape"),
                    (frames..end, ..),
                ),
                MelBuf::F16(v) => self.features.write_slice(
                    ndarray::ArrayView2::from_shape(shape, v).expect("buffer shape"),
                    (frames..end, ..),
                ),
            }
            .ctx(p, what)?;
        }
        self.write_rows(p, rows, buf)
    }

    /// Grows the per-row datasets and writes the buffered rows' values at `rows`.
    pub(super) fn write_rows(&self, p: &Path, rows: usize, buf: &FrameBuf) -> Result<(), Error> {
        let end = rows + buf.rows();
        if end == rows {
            return Ok(());
        }
        let what =
            |name: &'static str| move || format!("write rows {rows}..{end} of dataset `{name}`");
        for (name, d) in self.per_row() {
            d.resize(end)
                .ctx(p, || format!("grow dataset `{name}` to {end} rows"))?;
        }
        self.offsets
            .write_slice(&buf.offsets, rows..end)
            .ctx(p, what("offsets"))?;
        self.lengths
            .write_slice(&buf.lengths, rows..end)
            .ctx(p, what("lengths"))?;
        self.label
            .write_slice(&buf.labels, rows..end)
            .ctx(p, what("label"))?;
        if let Some(d) = &self.pad {
            d.write_slice(&buf.pads, rows..end)
                .ctx(p, what("pad_value"))?;
        }
        match &self.path {
            Some(d) => d.write_slice(&buf.paths, rows..end).ctx(p, what("path")),
            None => Ok(()),
        }
    }
}

/// Rows not yet written: frames in the stored type and per-row values.
pub(super) struct FrameBuf {
    values: MelBuf,
    /// How values are stored (float16 rounding, on the compact grid; compact
    /// chunks are compressed before they are written).
    store: Dtype,
    /// Compact chunks' compressed bytes (`writer::compact`), one buffer a
    /// chunk, reused.
    packed: Vec<Vec<u8>>,
    offsets: Vec<i64>,
    lengths: Vec<i32>,
    pads: Vec<f32>,
    labels: Vec<i32>,
    paths: Vec<VarLenUnicode>,
    bins: usize,
    trailer: usize,
    /// Buffers of whole chunks handed to HDF5 whose bytes may still be
    /// queued for the file (`lent`).
    in_flight: InFlight<MelBuf>,
    /// Buffers given back, for the frames that follow.
    spares: Vec<MelBuf>,
}

impl FrameBuf {
    pub(super) fn new(dtype: Dtype, layout: &FrameLayout) -> FrameBuf {
        FrameBuf {
            values: MelBuf::of(dtype),
            store: dtype,
            packed: Vec::new(),
            offsets: Vec::new(),
            lengths: Vec::new(),
            pads: Vec::new(),
            labels: Vec::new(),
            paths: Vec::new(),
            bins: layout.bins,
            trailer: layout.trailer(),
            in_flight: InFlight::new(),
            spares: Vec::new(),
        }
    }

    /// Appends a row (checked by the caller against the row protocol) whose
    /// first frame is frame `offset` of the file.
    pub(super) fn push(
        &mut self,
        row: &[f32],
        offset: usize,
        label: i32,
        path: &str,
    ) -> Result<(), Error> {
        let (frames, trailer) = row.split_at(row.len() - self.trailer);
        let n = frames.len() / self.bins;
        let path = self.check_row(n, path)?;
        self.extend_frames(frames);
        self.end_row(offset, n, trailer, label, path);
        Ok(())
    }

    /// The stored path of a row of `frames` frames at `path`, or why it
    /// cannot be stored.
    fn check_row(&self, frames: usize, path: &str) -> Result<VarLenUnicode, Error> {
        let path = super::plan_error::storable("path", path)?;
        i32::try_from(frames).map_err(|_| super::PlanError::TooManyFrames { frames })?;
        Ok(path)
    }

    /// Values per frame.
    pub(super) fn bins(&self) -> usize {
        self.bins
    }

    /// Ends a row of `frames` frames from file frame `offset`, whose frames
    /// were appended with [`FrameBuf::extend_frames`].
    pub(super) fn end_row_at(
        &mut self,
        offset: usize,
        frames: usize,
        trailer: &[f32],
        label: i32,
        path: &str,
    ) -> Result<(), Error> {
        let path = self.check_row(frames, path)?;
        self.end_row(offset, frames, trailer, label, path);
        Ok(())
    }

    /// Appends frames (`frames × bins` values) of the row under way.
    pub(super) fn extend_frames(&mut self, frames: &[f32]) {
        match &mut self.values {
            MelBuf::F32(buf) => buf.extend_from_slice(frames),
            MelBuf::F16(buf) => {
                let start = buf.len();
                buf.resize(start + frames.len(), f16::ZERO);
                self.store.narrow(&mut buf[start..], frames);
            }
        }
    }

    /// Ends the row whose `frames` frames start at file frame `offset`
    /// (checked by [`FrameBuf::check_row`]).
    fn end_row(
        &mut self,
        offset: usize,
        frames: usize,
        trailer: &[f32],
        label: i32,
        path: VarLenUnicode,
    ) {
        self.offsets.push(offset as i64);
        self.lengths.push(frames as i32);
        self.pads.extend(trailer.first());
        self.labels.push(label);
        self.paths.push(path);
    }

    /// Forgets the buffered frames from buffer frame `at` on (a row given
    /// up half-way).
    pub(super) fn truncate_frames(&mut self, at: usize) {
        let len = at * self.bins;
        match &mut self.values {
            MelBuf::F32(b) => b.truncate(len),
            MelBuf::F16(b) => b.truncate(len),
        }
    }

    pub(super) fn rows(&self) -> usize {
        self.labels.len()
    }

    pub(super) fn buffered_frames(&self) -> usize {
        let values = match &self.values {
            MelBuf::F32(b) => b.len(),
            MelBuf::F16(b) => b.len(),
        };
        values / self.bins
    }

    /// Forgets the per-row values (written).
    pub(super) fn clear_rows(&mut self) {
        self.offsets.clear();
        self.lengths.clear();
        self.pads.clear();
        self.labels.clear();
        self.paths.clear();
    }

    /// Forgets every buffered frame (written).
    pub(super) fn clear_frames(&mut self) {
        match &mut self.values {
            MelBuf::F32(b) => b.clear(),
            MelBuf::F16(b) => b.clear(),
        }
    }

    /// Direct writes of the buffered frames at file frame `at` (a chunk
    /// boundary) as whole chunks of `chunk` frames, keeping the rest; with
    /// `last`, the rest too, zero padded. Returns the frames written.
    ///
    /// The chunks' bytes are lent to the file driver (`lent`): the buffer
    /// that holds them is set aside until they are in the file, and the
    /// frames left over start a buffer of their own.
    fn write_chunks(
        &mut self,
        ds: &Dataset,
        at: usize,
        chunk: usize,
        last: bool,
    ) -> hdf5::Result<usize> {
        let (bins, len) = (self.bins, chunk * self.bins);
        let values = self.buffered_frames() * bins;
        let whole = values / len * len;
        if whole == 0 && !(last && values > 0) {
            return Ok(0);
        }
        let spare = self.spares.pop();
        let full = if last {
            let empty = self.values.emptied(spare);
            let mut all = std::mem::replace(&mut self.values, empty);
            all.pad(values.div_ceil(len) * len);
            all
        } else {
            let rest = self.values.split_tail(whole, spare);
            std::mem::replace(&mut self.values, rest)
        };
        if self.store.tick_power().is_some() {
            self.write_packed(ds, at, len, full)?;
            return Ok(if last { values } else { whole } / bins);
        }
        let loaned = Loaned::new(full);
        let r = match loaned.get() {
            MelBuf::F32(v) => lend_chunks(ds, at, len, &loaned, v),
            MelBuf::F16(v) => lend_chunks(ds, at, len, &loaned, v),
        };
        let spares = &mut self.spares;
        self.in_flight.keep(loaned, |b| spare_into(spares, b));
        r?;
        self.in_flight.check()?;
        Ok(if last { values } else { whole } / bins)
    }

    /// Writes `full` (whole chunks of `len` float16 values) as compact
    /// chunks from frame `at` on: compressed into `packed`, then written
    /// in order at once (about a third of float32's bytes; nothing lent).
    fn write_packed(
        &mut self,
        ds: &Dataset,
        at: usize,
        len: usize,
        full: MelBuf,
    ) -> hdf5::Result<()> {
        let MelBuf::F16(v) = &full else {
            unreachable!("compact values are float16 (`MelBuf::of`)")
        };
        let n = super::compact::pack_all(v, len, &mut self.packed)?;
        for (k, bytes) in self.packed[..n].iter().enumerate() {
            raw::write_chunk(ds, &[(at + k * len / self.bins) as u64, 0], bytes)?;
        }
        spare_into(&mut self.spares, full);
        Ok(())
    }

    /// Whether chunks are compressed as they are written (compact storage).
    pub(super) fn is_compact(&self) -> bool {
        self.store.tick_power().is_some()
    }

    /// serve's compact rows: writes the buffered frames from file frame `at`
    /// (a chunk boundary) as whole chunks of `chunk` frames, which leave the
    /// buffer, and the frames after them as one zero-padded chunk, which
    /// stay: the next write rewrites that chunk with more frames (the
    /// appender arms its undo log first). Returns the frames that left.
    pub(super) fn write_compact(
        &mut self,
        ds: &Dataset,
        at: usize,
        chunk: usize,
    ) -> hdf5::Result<usize> {
        let whole = self.write_chunks(ds, at, chunk, false)?;
        let MelBuf::F16(tail) = &self.values else {
            unreachable!("compact values are float16 (`MelBuf::of`)")
        };
        if !tail.is_empty() {
            let mut padded = Vec::with_capacity(chunk * self.bins);
            padded.extend_from_slice(tail);
            padded.resize(chunk * self.bins, f16::ZERO);
            if self.packed.is_empty() {
                self.packed.push(Vec::new());
            }
            super::compact::pack(&padded, &mut self.packed[0])?;
            raw::write_chunk(ds, &[(at + whole) as u64, 0], &self.packed[0])?;
        }
        Ok(whole)
    }

    /// Waits until every chunk written is in the file.
    fn settle(&mut self) -> hdf5::Result<()> {
        let spares = &mut self.spares;
        self.in_flight.settle(|b| spare_into(spares, b));
        self.in_flight.check()
    }
}

/// A written chunk's buffer, cleared, into `spares`.
fn spare_into(spares: &mut Vec<MelBuf>, mut b: MelBuf) {
    b.clear();
    spares.push(b);
}

/// Writes `v` (whole chunks of `len` values) as the chunks from frame `at`
/// on, its bytes lent from `loaned`.
fn lend_chunks<T: Copy>(
    ds: &Dataset,
    at: usize,
    len: usize,
    loaned: &Loaned<MelBuf>,
    v: &[T],
) -> hdf5::Result<()> {
    let bins = ds.shape().get(1).copied().unwrap_or(1).max(1);
    lent::lend(loaned, v, || {
        for (k, c) in v.chunks_exact(len).enumerate() {
            raw::write_chunk(ds, &[(at + k * len / bins) as u64, 0], c)?;
        }
        Ok(())
    })
}

/// A variable-length `<split>.h5.partial` being built.
pub(super) struct FrameSplit {
    partial: PathBuf,
    final_path: PathBuf,
    file: File,
    ds: FrameSets,
    buf: FrameBuf,
    chunk_frames: usize,
    chunk_files: usize,
    /// Rows in the per-row datasets.
    rows_written: usize,
    /// Frames in `features` chunks already written.
    frames_written: usize,
    /// Frames appended so far (written or buffered).
    frames: usize,
    big_endian: bool,
}

impl FrameSplit {
    pub(super) fn create(
        final_path: PathBuf,
        h: &Header<'_>,
        l: &FrameLayout,
    ) -> Result<Self, Error> {
        let mut partial = final_path.clone().into_os_string();
        partial.push(".partial");
        let partial = PathBuf::from(partial);
        let p = partial.as_path();
        let file = create_file(p)?;
        write_attrs(&file, h).ctx(p, || "write the root attributes".into())?;
        let ds = FrameSets::create(&file, p, h, l, PathColumn::Vlen)?;
        Ok(FrameSplit {
            buf: FrameBuf::new(h.dtype, l),
            chunk_frames: chunk_frames(l, h.dtype),
            chunk_files: h.chunk_files,
            rows_written: 0,
            frames_written: 0,
            frames: 0,
            big_endian: cfg!(target_endian = "big"),
            partial,
            final_path,
            file,
            ds,
        })
    }

    /// The open file (to add datasets before [`FrameSplit::close`]).
    pub(super) fn file(&self) -> &File {
        &self.file
    }

    pub(super) fn partial_path(&self) -> &Path {
        &self.partial
    }

    /// The name the file gets once finished.
    pub(super) fn final_path(&self) -> &Path {
        &self.final_path
    }

    /// Appends one row (checked against the row protocol by the caller).
    pub(super) fn push(&mut self, row: &[f32], label: i32, path: &str) -> Result<(), Error> {
        self.buf.push(row, self.frames, label, path)?;
        self.frames = self.frames_written + self.buf.buffered_frames();
        if self.frames - self.frames_written >= self.chunk_frames {
            self.write_frames(false)?;
        }
        self.rows_due()
    }

    /// Writes the per-row values once `chunk_files` rows are buffered.
    fn rows_due(&mut self) -> Result<(), Error> {
        if self.buf.rows() >= self.chunk_files {
            self.ds
                .write_rows(&self.partial, self.rows_written, &self.buf)?;
            self.rows_written += self.buf.rows();
            self.buf.clear_rows();
        }
        Ok(())
    }

    /// Appends the row `row` hands over in pieces ([`RowPieces`]): whole
    /// `features` chunks are written as they fill, so the row is never held
    /// whole. A row refused half-way leaves the file as it was before it
    /// (`Ok(Err(refusal))`); `piece` is the caller's buffer for the pieces.
    pub(super) fn push_pieces(
        &mut self,
        row: &mut dyn RowPieces,
        piece: &mut Vec<f32>,
        label: i32,
        path: &str,
    ) -> Result<Result<usize, Refusal>, Error> {
        let start = self.frames;
        let stored = self.buf.check_row(0, path)?;
        loop {
            match row.next(piece) {
                Ok(true) => {
                    if !piece.len().is_multiple_of(self.buf.bins) {
                        return Err(Error::FrameRowLength {
                            split: self.partial.display().to_string(),
                            seq: self.rows_written + self.buf.rows(),
                            got: piece.len(),
                            bins: self.buf.bins,
                            trailer: 0,
                        });
                    }
                    self.buf.extend_frames(piece);
                    self.frames = self.frames_written + self.buf.buffered_frames();
                    if self.frames - self.frames_written >= self.chunk_frames {
                        self.write_frames(false)?;
                    }
                }
                Ok(false) => break,
                Err(refusal) => {
                    self.give_up_row(start)?;
                    return Ok(Err(refusal));
                }
            }
        }
        let frames = self.frames - start;
        self.buf.check_row(frames, path)?;
        self.buf
            .end_row(start, frames, row.trailer(), label, stored);
        self.rows_due()?;
        Ok(Ok(frames))
    }

    /// Takes the file back to frame `start`, where a row given up half-way
    /// began: buffered frames are dropped, and where whole chunks of it were
    /// written already, the frames before it in the first such chunk are
    /// read back into the buffer, so the next rows' chunks overwrite them.
    fn give_up_row(&mut self, start: usize) -> Result<(), Error> {
        if start >= self.frames_written {
            self.buf.truncate_frames(start - self.frames_written);
        } else {
            let at = start - start % self.chunk_frames;
            let p = &self.partial;
            let what = || format!("read back frames {at}..{start} of dataset `features`");
            self.buf.clear_frames();
            match &mut self.buf.values {
                MelBuf::F32(v) => {
                    let back = self.ds.features.read_slice_2d::<f32, _>((at..start, ..));
                    v.extend(back.ctx(p, what)?.iter().copied());
                }
                MelBuf::F16(v) => {
                    let back = self.ds.features.read_slice_2d::<f16, _>((at..start, ..));
                    v.extend(back.ctx(p, what)?.iter().copied());
                }
            }
            self.frames_written = at;
        }
        self.frames = start;
        Ok(())
    }

    fn write_frames(&mut self, last: bool) -> Result<(), Error> {
        let p = &self.partial;
        let bins = self.buf.bins;
        self.ds.features.resize((self.frames, bins)).ctx(p, || {
            format!("grow dataset `features` to {} frames", self.frames)
        })?;
        let at = self.frames_written;
        if self.big_endian {
            // Direct writes store the buffer's bytes as they are: only where
            // they are the file's little-endian values.
            if last {
                self.ds.write(p, self.rows_written, at, &self.buf)?;
                self.rows_written += self.buf.rows();
                self.buf.clear_rows();
                self.buf.clear_frames();
                self.frames_written = self.frames;
            }
            return Ok(());
        }
        let done = self
            .buf
            .write_chunks(&self.ds.features, at, self.chunk_frames, last)
            .ctx(p, || format!("write the `features` chunks from frame {at}"))?;
        self.frames_written += done;
        Ok(())
    }

    /// Writes what is buffered, closes the file and renames it.
    /// Returns (final path, rows, size in bytes).
    pub(super) fn close(mut self) -> Result<(PathBuf, usize, u64), Error> {
        self.write_frames(true)?;
        (self.buf.settle()).ctx(&self.partial, || "write the `features` chunks".into())?;
        let rows = self.rows_written + self.buf.rows();
        self.ds
            .write_rows(&self.partial, self.rows_written, &self.buf)?;
        let FrameSplit {
            partial,
            final_path,
            file,
            ds,
            ..
        } = self;
        drop(ds);
        file.close().ctx(&partial, || "close the file".into())?;
        let bytes = finish_file(&partial, &final_path)?;
        Ok((final_path, rows, bytes))
    }
}
