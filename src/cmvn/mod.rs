//! Global CMVN statistics: per split and per feature bin, the frame count,
//! the sum and the sum of squares of every stored value, in f64, as WeNet's
//! `global_cmvn` and ESPnet's `feats_stats.npz` hold them (docs/FORMAT.md,
//! "CMVN statistics").
//!
//! A *frame* is one vector of `bins` values: under the speech recipes a row
//! of `features` (one STFT frame); under librosa one column of a segment's
//! mel spectrogram, `mel[i, l, s, :, t]`, so the bins are the `n_mels` mel
//! bands and a row has `n_long · n_short · n_frames` frames.
//!
//! **Where the work is.** The build's writer is a serial stage, so the
//! values are summed where the rows are made: a compute worker turns each
//! row into a [`RowStats`] (the row's own per-bin sums, [`Bins::row`]) and
//! the writer only adds that to its split's [`Stats`] (2 × bins additions).
//! A row that arrives without one (the CUDA stage's, a recording computed
//! in pieces on the writer's thread) is summed by the writer itself with
//! the same function, so the numbers do not depend on who summed.
//!
//! **Reproducible.** A row's sums run over its frames in order (one f64
//! accumulator per bin and per sum; librosa's mel rows in four interleaved
//! accumulators per band, combined in a fixed order), and a split's totals
//! add the rows' sums in row order, so the statistics are a function of the
//! stored rows alone: bit-identical whatever the thread count, the backend
//! or the arrival order. Values are summed as stored: with float16 output,
//! the float16 values, and with compact storage the float16 values on its
//! grid (each square of a float32 or float16 value is exact
//! in f64).

pub mod files;
#[cfg(test)]
mod tests;

use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::frames::{FrameLayout, RowLayout};
use crate::model::Dtype;

/// How a row's values map to bins, and how they are stored (float16, on
/// the compact grid: the statistics are those of the stored values).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bins {
    bins: usize,
    shape: Shape,
    store: Dtype,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Shape {
    /// `frames × bins` values, frame-major, then `trailer` values.
    Frames { trailer: usize },
    /// librosa's `[n_long][n_short][n_mels][n_frames]`: `blocks` blocks of
    /// `n_mels × n_frames`, the bin being the mel band.
    Mel { blocks: usize, n_frames: usize },
}

/// One row's statistics: its frames, then per bin its sum and its sum of
/// squares (`sums[..bins]`, `sums[bins..]`).
#[derive(Clone, Debug, PartialEq)]
pub struct RowStats {
    pub frames: u64,
    pub sums: Box<[f64]>,
}

/// A running row's sums (the frames of a row that comes in pieces).
#[derive(Clone, Debug)]
pub struct RowAcc {
    frames: u64,
    sums: Vec<f64>,
    store: Dtype,
    scratch: Vec<f16>,
    wide: Vec<f32>,
}

impl Bins {
    /// Variable-length rows of `layout`.
    pub fn frames(layout: &FrameLayout, dtype: Dtype) -> Bins {
        Bins {
            bins: layout.bins,
            shape: Shape::Frames {
                trailer: layout.trailer(),
            },
            store: dtype,
        }
    }

    /// librosa's fixed rows of shape `[n_long, n_short, n_mels, n_frames]`.
    pub fn mel(row_shape: [usize; 4], dtype: Dtype) -> Bins {
        let [n_long, n_short, n_mels, n_frames] = row_shape;
        Bins {
            bins: n_mels,
            shape: Shape::Mel {
                blocks: n_long * n_short,
                n_frames,
            },
            store: dtype,
        }
    }

    /// The rows of a recipe's `layout`, stored as `dtype`.
    pub fn of_layout(layout: &RowLayout, dtype: Dtype) -> Bins {
        match layout {
            RowLayout::Fixed(spec) => Bins::mel(spec.row_shape(), dtype),
            RowLayout::Frames(l) => Bins::frames(l, dtype),
        }
    }

    pub fn bins(&self) -> usize {
        self.bins
    }

    /// An empty running row.
    pub fn acc(&self) -> RowAcc {
        RowAcc {
            frames: 0,
            sums: vec![0.0; 2 * self.bins],
            store: self.store,
            scratch: Vec::new(),
            wide: Vec::new(),
        }
    }

    /// The statistics of `row` (a whole row of this layout, as the writer
    /// checks it). `scratch` is the caller's buffer for float16 rounding.
    pub fn row(&self, row: &[f32], scratch: &mut RowAcc) -> RowStats {
        match self.shape {
            Shape::Frames { trailer } => {
                let values = &row[..row.len().saturating_sub(trailer)];
                scratch.reset(self.bins, self.store);
                scratch.add_frames(values);
                scratch.take()
            }
            Shape::Mel { blocks, n_frames } => {
                let values = stored(row, self.store, scratch);
                mel_row(values, self.bins, blocks, n_frames)
            }
        }
    }
}

/// `row` as stored: itself, or rounded to float16 (on the compact grid
/// where there is one) and widened back.
fn stored<'a>(row: &'a [f32], store: Dtype, scratch: &'a mut RowAcc) -> &'a [f32] {
    if !store.is_f16() {
        return row;
    }
    scratch.scratch.resize(row.len(), f16::ZERO);
    store.narrow(&mut scratch.scratch, row);
    scratch.wide.resize(row.len(), 0.0);
    scratch.scratch.convert_to_f32_slice(&mut scratch.wide);
    &scratch.wide
}

/// A librosa row's sums: per band, four interleaved accumulators over its
/// frames in every block, combined as (a0 + a1) + (a2 + a3).
fn mel_row(values: &[f32], bins: usize, blocks: usize, n_frames: usize) -> RowStats {
    let mut sums = vec![0.0; 2 * bins].into_boxed_slice();
    for m in 0..bins {
        let (mut s, mut q) = ([0.0f64; 4], [0.0f64; 4]);
        for b in 0..blocks {
            let start = (b * bins + m) * n_frames;
            let band = values.get(start..start + n_frames).unwrap_or_default();
            let mut quads = band.chunks_exact(4);
            for c in &mut quads {
                for k in 0..4 {
                    let x = f64::from(c[k]);
                    s[k] += x;
                    q[k] += x * x;
                }
            }
            for (k, &v) in quads.remainder().iter().enumerate() {
                let x = f64::from(v);
                s[k] += x;
                q[k] += x * x;
            }
        }
        sums[m] = (s[0] + s[1]) + (s[2] + s[3]);
        sums[bins + m] = (q[0] + q[1]) + (q[2] + q[3]);
    }
    RowStats {
        frames: (blocks * n_frames) as u64,
        sums,
    }
}

impl RowAcc {
    fn reset(&mut self, bins: usize, store: Dtype) {
        self.frames = 0;
        self.store = store;
        self.sums.clear();
        self.sums.resize(2 * bins, 0.0);
    }

    /// Adds whole frames (`k × bins` values, frame-major) in order.
    pub fn add_frames(&mut self, values: &[f32]) {
        let bins = self.sums.len() / 2;
        if bins == 0 {
            return;
        }
        let store = self.store;
        let mut wide = std::mem::take(&mut self.wide);
        let mut scratch = std::mem::take(&mut self.scratch);
        let values = if store.is_f16() {
            scratch.resize(values.len(), f16::ZERO);
            store.narrow(&mut scratch, values);
            wide.resize(values.len(), 0.0);
            scratch.convert_to_f32_slice(&mut wide);
            &wide[..]
        } else {
            values
        };
        let (s, q) = self.sums.split_at_mut(bins);
        // Four frames a pass: each sum is loaded and stored once for four
        // values, added in frame order as one at a time would (the same bits).
        let mut quads = values.chunks_exact(4 * bins);
        for quad in &mut quads {
            let (f0, rest) = quad.split_at(bins);
            let (f1, rest) = rest.split_at(bins);
            let (f2, f3) = rest.split_at(bins);
            for i in 0..bins {
                let [x0, x1, x2, x3] = [f0[i], f1[i], f2[i], f3[i]].map(f64::from);
                s[i] = s[i] + x0 + x1 + x2 + x3;
                q[i] = q[i] + x0 * x0 + x1 * x1 + x2 * x2 + x3 * x3;
            }
        }
        for frame in quads.remainder().chunks_exact(bins) {
            for ((s, q), &v) in s.iter_mut().zip(q.iter_mut()).zip(frame) {
                let x = f64::from(v);
                *s += x;
                *q += x * x;
            }
        }
        self.frames += (values.len() / bins) as u64;
        self.wide = wide;
        self.scratch = scratch;
    }

    /// The row's statistics so far.
    pub fn take(&mut self) -> RowStats {
        RowStats {
            frames: self.frames,
            sums: self.sums.clone().into_boxed_slice(),
        }
    }
}

/// A split's statistics: frames, and per bin the sum and the sum of squares.
#[derive(Clone, Debug, PartialEq)]
pub struct Stats {
    pub frames: u64,
    pub sum: Vec<f64>,
    pub sum_square: Vec<f64>,
}

impl Stats {
    pub fn new(bins: usize) -> Stats {
        Stats {
            frames: 0,
            sum: vec![0.0; bins],
            sum_square: vec![0.0; bins],
        }
    }

    pub fn bins(&self) -> usize {
        self.sum.len()
    }

    /// Adds the next row's statistics (rows in row order).
    pub fn add_row(&mut self, r: &RowStats) {
        let bins = self.sum.len();
        debug_assert_eq!(r.sums.len(), 2 * bins);
        self.frames += r.frames;
        for (t, v) in self.sum.iter_mut().zip(&r.sums[..bins]) {
            *t += v;
        }
        for (t, v) in self.sum_square.iter_mut().zip(&r.sums[bins..]) {
            *t += v;
        }
    }

    /// Adds another part's totals (the next shard's, in shard order).
    /// `None` when the bins differ.
    pub fn add(&mut self, other: &Stats) -> Option<()> {
        if other.bins() != self.bins() {
            return None;
        }
        self.frames += other.frames;
        for (t, v) in self.sum.iter_mut().zip(&other.sum) {
            *t += v;
        }
        for (t, v) in self.sum_square.iter_mut().zip(&other.sum_square) {
            *t += v;
        }
        Some(())
    }
}
