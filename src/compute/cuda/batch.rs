//! What the batch runner ([`super::orchestrate::BatchRunner`]) takes and
//! gives: the kernel side of a batch ([`Recipe`]: its descriptors, rows and
//! kernels), the host bytes of a file ([`HostBytes`], [`Staged`]), where a
//! file lies in a batch ([`Placed`], [`Desc`]) and where finished rows go
//! ([`RowSink`]). Every recipe's CUDA stage implements these and nothing
//! else of the batching (`orchestrate` owns it).

use super::device::{DevBuf, Device, Pinned, Result, Stream};
use super::host_copy;
use crate::decode::wav::WavInfo;

/// The host bytes of one file, readable until the value is dropped.
pub trait HostBytes {
    /// Start of the file's bytes.
    fn ptr(&self) -> *const u8;
    /// The file's length.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes readable from `ptr` (≥ `len`: an arena extent's capacity), so
    /// adjacent extents coalesce into one copy.
    fn readable(&self) -> usize {
        self.len()
    }
}

impl HostBytes for crate::reader::FileBytes {
    fn ptr(&self) -> *const u8 {
        <[u8]>::as_ptr(self)
    }
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
    fn readable(&self) -> usize {
        match self {
            crate::reader::FileBytes::Heap(v) => v.len(),
            crate::reader::FileBytes::Arena(e) => e.room().max(e.len()),
        }
    }
}

/// Where one file's samples sit in the slot's device input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    /// Byte offset of the first sample in the device input buffer.
    pub data: u64,
    /// Sample frames the kernel may read (clamped to the clip).
    pub frames: u32,
    pub info: WavInfo,
    /// The file's first output row in the batch (a row is
    /// [`Recipe::row_bytes`]).
    pub row: u32,
    /// Its output rows ([`Recipe::rows`]).
    pub rows: u32,
}

/// One entry of a batch's descriptor table.
#[derive(Clone, Copy, Debug)]
pub enum Desc<'a> {
    File(&'a Placed),
    /// Past the batch's files: a captured shape's padding (0 frames), or
    /// the sentinel after the last file of a direct batch. `data` and `row`
    /// are where the batch's input and rows end.
    Pad {
        data: u64,
        row: u32,
    },
}

/// The kernel side of a batch: what the runner copies and replays.
pub trait Recipe {
    /// Per-slot device work memory.
    type Work;
    /// Bytes of one file descriptor in the descriptor table.
    fn desc_bytes(&self) -> usize;
    /// Writes one descriptor into `out`.
    fn encode(&self, entry: Desc<'_>, out: &mut [u8]);
    /// Samples per clip (frames beyond are never read).
    fn clip_samples(&self) -> usize;
    /// Bytes of one output row as the device writes it back.
    fn row_bytes(&self) -> usize;
    /// Output rows of a file (default: one row a file).
    fn rows(&self, info: &WavInfo) -> usize {
        let _unused = info;
        1
    }
    /// Output rows a slot of `files` files holds (default: one a file).
    fn out_rows(&self, files: usize) -> usize {
        files
    }
    /// Pinned output bytes of a slot of `files` files.
    fn out_bytes(&self, files: usize) -> usize {
        self.out_rows(files) * self.row_bytes()
    }
    /// Where file `k` of a finished batch (placed at `p`) finds its row
    /// bytes in the slot's output, and its trailer (Whisper's pad value).
    fn output<'o>(&self, out: &'o [u8], k: usize, p: &Placed) -> (&'o [u8], Option<f32>) {
        let _unused = k;
        let rb = self.row_bytes();
        let (at, n) = (p.row as usize * rb, p.rows as usize * rb);
        (&out[at..at + n], None)
    }
    /// How a row's bytes become `f32` values (default: native-endian f32).
    fn decoder(&self) -> host_copy::Decode {
        host_copy::f32_values
    }
    /// Whether a batch's work is captured once per shape and replayed
    /// (true), or issued directly for every batch (false: rows vary).
    fn captured(&self) -> bool {
        true
    }
    /// One-time set-up: kernels, constant tables (synchronous is fine).
    fn init<D: Device>(&mut self, dev: &mut D) -> Result<()>;
    /// Allocates a slot's work memory for up to `files` files.
    fn alloc_work<D: Device>(&mut self, dev: &mut D, files: usize) -> Result<Self::Work>;
    /// Outside capture: whatever a shape needs (cuFFT plans).
    fn prepare<D: Device>(&mut self, dev: &mut D, files: usize) -> Result<()>;
    /// Outside capture, on `stream`, once per new shape before its capture:
    /// runs what loads code lazily on first use (a cuFFT plan's first
    /// execution loads its kernels; with lazy module loading, CUDA ≥ 12.2's
    /// default, that load must not happen inside a capture). `work` is the
    /// slot's, free at this point, so garbage in it is harmless.
    fn warm_up<D: Device>(
        &mut self,
        dev: &mut D,
        stream: Stream,
        work: &Self::Work,
        files: usize,
    ) -> Result<()> {
        let _unused = (dev, stream, work, files);
        Ok(())
    }
    /// Issues one batch on `stream` (captured into a graph when
    /// [`Recipe::captured`]): kernels reading `input`/`descs`, then D2H of
    /// the rows into `out`. `shape` is the files the descriptors describe
    /// (a captured shape counts its padding) and the batch's output rows.
    #[allow(clippy::too_many_arguments)]
    fn issue<D: Device>(
        &mut self,
        dev: &mut D,
        stream: Stream,
        work: &Self::Work,
        input: DevBuf,
        descs: DevBuf,
        out: Pinned,
        shape: Shape,
    ) -> Result<()>;
}

/// What one issue of a batch covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Files (descriptors before the sentinel).
    pub files: usize,
    /// Output rows of the batch.
    pub rows: usize,
}

/// Where a finished batch's rows go.
pub trait RowSink<T> {
    /// An empty row buffer to fill (a recycled one, or a new one).
    fn buffer(&mut self) -> Vec<f32> {
        Vec::new()
    }
    /// The row of the file tagged `tag`, with its CMVN statistics when the
    /// runner sums them ([`BatchRunner::summing`]).
    ///
    /// [`BatchRunner::summing`]: super::orchestrate::BatchRunner::summing
    fn row(&mut self, tag: T, row: Vec<f32>, stats: Option<crate::cmvn::RowStats>);
}

impl<T, F: FnMut(T, &[f32])> RowSink<T> for F {
    fn row(&mut self, tag: T, row: Vec<f32>, _stats: Option<crate::cmvn::RowStats>) {
        self(tag, &row);
    }
}

/// One file handed to the runner.
pub struct Staged<T, B> {
    pub tag: T,
    pub bytes: B,
    pub info: WavInfo,
}
