//! The chunk buffer: up to `chunk_files` consecutive accepted rows of one split,
//! already in the on-disk element type, with their labels and paths.
//!
//! It is filled one row at a time in seq order and handed whole to
//! [`super::h5::SplitFile::append`], which writes it with one call per dataset
//! (`mel` by a direct chunk write, which takes the mel values out with
//! [`ChunkBuf::take_mel`] and gives an already written buffer back).
//! Storage is allocated on the first push and reused after every `clear`.

use half::f16;
use hdf5::types::VarLenUnicode;

use super::{Dtype, Error};

/// Row values in the element type of the `mel` dataset.
pub(super) enum MelBuf {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

impl MelBuf {
    /// An empty buffer of `dtype`'s element type.
    pub(super) fn of(dtype: Dtype) -> MelBuf {
        match dtype.is_f16() {
            false => MelBuf::F32(Vec::new()),
            true => MelBuf::F16(Vec::new()),
        }
    }

    /// Forgets the values, keeping the storage.
    pub(super) fn clear(&mut self) {
        match self {
            MelBuf::F32(b) => b.clear(),
            MelBuf::F16(b) => b.clear(),
        }
    }

    /// An empty buffer of this one's type: `spare` (cleared) when it is one.
    pub(super) fn emptied(&self, spare: Option<MelBuf>) -> MelBuf {
        match (self, spare) {
            (MelBuf::F32(_), Some(MelBuf::F32(b))) => MelBuf::F32(b),
            (MelBuf::F16(_), Some(MelBuf::F16(b))) => MelBuf::F16(b),
            (MelBuf::F32(_), _) => MelBuf::F32(Vec::new()),
            (MelBuf::F16(_), _) => MelBuf::F16(Vec::new()),
        }
    }

    /// Pads with zeros to `len` values.
    pub(super) fn pad(&mut self, len: usize) {
        match self {
            MelBuf::F32(b) => b.resize(len, 0.0),
            MelBuf::F16(b) => b.resize(len, f16::ZERO),
        }
    }

    /// Moves the values from `at` on into a buffer of their own (`spare`'s
    /// storage where it fits the type), which it returns.
    pub(super) fn split_tail(&mut self, at: usize, spare: Option<MelBuf>) -> MelBuf {
        let mut rest = self.emptied(spare);
        match (&mut *self, &mut rest) {
            (MelBuf::F32(a), MelBuf::F32(r)) => {
                r.extend_from_slice(&a[at..]);
                a.truncate(at);
            }
            (MelBuf::F16(a), MelBuf::F16(r)) => {
                r.extend_from_slice(&a[at..]);
                a.truncate(at);
            }
            _ => unreachable!("`emptied` gives the same type"),
        }
        rest
    }
}

pub(super) struct ChunkBuf {
    mel: MelBuf,
    /// How values are stored (float16 rounding, on the compact grid).
    store: Dtype,
    labels: Vec<i32>,
    paths: Vec<VarLenUnicode>,
    row_shape: [usize; 4],
    row_len: usize,
    /// Rows that make a full chunk (≤ chunk_files when the split is smaller).
    capacity: usize,
}

impl ChunkBuf {
    /// A buffer that is full at `capacity` rows of `row_shape`.
    pub(super) fn new(dtype: Dtype, row_shape: [usize; 4], capacity: usize) -> Self {
        ChunkBuf {
            mel: MelBuf::of(dtype),
            store: dtype,
            labels: Vec::new(),
            paths: Vec::new(),
            row_shape,
            row_len: row_shape.iter().product(),
            capacity: capacity.max(1),
        }
    }

    /// Appends one row (`row_len` values; the caller has checked the length).
    pub(super) fn push(&mut self, row: &[f32], label: i32, path: &str) -> Result<(), Error> {
        debug_assert_eq!(row.len(), self.row_len);
        let path = super::plan_error::storable("path", path)?;
        let total = self.capacity * self.row_len;
        match &mut self.mel {
            MelBuf::F32(buf) => {
                buf.reserve_exact(total - buf.len());
                buf.extend_from_slice(row);
            }
            MelBuf::F16(buf) => {
                buf.reserve_exact(total - buf.len());
                let start = buf.len();
                buf.resize(start + row.len(), f16::ZERO);
                self.store.narrow(&mut buf[start..], row);
            }
        }
        self.labels.push(label);
        self.paths.push(path);
        Ok(())
    }

    pub(super) fn rows(&self) -> usize {
        self.labels.len()
    }

    pub(super) fn is_full(&self) -> bool {
        self.rows() >= self.capacity
    }

    pub(super) fn clear(&mut self) {
        match &mut self.mel {
            MelBuf::F32(buf) => buf.clear(),
            MelBuf::F16(buf) => buf.clear(),
        }
        self.labels.clear();
        self.paths.clear();
    }

    pub(super) fn mel(&self) -> &MelBuf {
        &self.mel
    }

    /// Moves the buffered mel values out (for a direct chunk write that may
    /// hold them), leaving `spare` (cleared by its giver) or a new empty
    /// buffer of the same type in their place; labels and paths stay until
    /// [`ChunkBuf::clear`].
    pub(super) fn take_mel(&mut self, spare: Option<MelBuf>) -> MelBuf {
        let empty = spare.unwrap_or_else(|| match &self.mel {
            MelBuf::F32(_) => MelBuf::F32(Vec::new()),
            MelBuf::F16(_) => MelBuf::F16(Vec::new()),
        });
        std::mem::replace(&mut self.mel, empty)
    }

    pub(super) fn labels(&self) -> &[i32] {
        &self.labels
    }

    pub(super) fn paths(&self) -> &[VarLenUnicode] {
        &self.paths
    }

    /// Bytes of the buffered mel rows (what a write of the chunk appends, give
    /// or take the small label and path data).
    pub(super) fn bytes(&self) -> usize {
        match &self.mel {
            MelBuf::F32(b) => 4 * b.len(),
            MelBuf::F16(b) => 2 * b.len(),
        }
    }

    /// Shape of the buffered block: (rows, n_long, n_short, n_mels, n_frames).
    pub(super) fn shape(&self) -> (usize, usize, usize, usize, usize) {
        let [a, b, c, d] = self.row_shape;
        (self.rows(), a, b, c, d)
    }
}

/// The order chunks reach a split's file in: each starts where the previous
/// one ended, and only the split's last may be short.
///
/// The writer's side of this boundary is `SplitWriter::consume`, which fills
/// the chunk buffer in seq order and hands it over when full (and
/// `DatasetWriter::finish` the last, short one); the file's side
/// (`SplitFile::append`) asserts it here before anything is written, since
/// a chunk out of order would put rows at the wrong index of every dataset.
/// One comparison per chunk. Tests: `writer::tests::chunk_boundaries`,
/// `out_of_order_submission_lands_in_seq_order`, and
/// `tests::a_chunk_after_the_short_last_one_is_a_bug` below (it fires).
#[derive(Debug, Default)]
pub(super) struct ChunkOrder {
    /// Rows written so far: where the next chunk starts.
    next_start: usize,
    /// A short chunk was written: it was the split's last.
    ended: bool,
}

impl ChunkOrder {
    /// Takes a chunk of `rows` rows (`full`: as many as a chunk holds)
    /// starting at row `start`.
    pub(super) fn take(&mut self, start: usize, rows: usize, full: bool) {
        assert!(
            !self.ended,
            "a chunk at row {start} after the split's last, short chunk"
        );
        assert_eq!(
            start, self.next_start,
            "chunks out of order: one at row {start}, expected row {}",
            self.next_start
        );
        assert!(rows > 0, "an empty chunk at row {start}");
        self.next_start = start + rows;
        self.ended = !full;
    }
}

#[cfg(test)]
mod tests {
    use super::ChunkOrder;

    #[test]
    fn whole_chunks_then_one_short_one() {
        let mut o = ChunkOrder::default();
        o.take(0, 4, true);
        o.take(4, 4, true);
        o.take(8, 1, false);
    }

    #[test]
    #[should_panic(expected = "after the split's last, short chunk")]
    fn a_chunk_after_the_short_last_one_is_a_bug() {
        let mut o = ChunkOrder::default();
        o.take(0, 3, false);
        o.take(3, 4, true);
    }

    #[test]
    #[should_panic(expected = "chunks out of order")]
    fn a_chunk_that_skips_rows_is_a_bug() {
        let mut o = ChunkOrder::default();
        o.take(0, 4, true);
        o.take(8, 4, true);
    }
}
