//! [`KaldiPlan`] (validated options and precomputed tables, shared by workers)
//! and [`KaldiScratch`] (per-worker buffers and the dither generator); one
//! [`KaldiPlan::compute`] turns a waveform into torchaudio's
//! `(num_frames, num_bins)` float32 matrix, row-major.
//!
//! Per frame, in Kaldi's order: extract (snip_edges, or Kaldi's reflection at
//! both edges), × sample_scale, + dither, − mean (remove_dc_offset), raw log
//! energy, pre-emphasis (x[i] −= p·x[i−1] from the end, x[0] −= p·x[0]),
//! window, windowed log energy, zero-pad, real FFT, |X|² (or |X|) for the bins
//! below Nyquist, mel triangles, ln(max(x, ε)) with ε = f32::EPSILON, then the
//! energy column (fbank) or DCT, lifter and C0 := energy (mfcc).
//!
//! Two paths compute this: the batched one (`batch`: 16, 8 or 4 frames at
//! a time in float32 SIMD lanes, chosen from the CPU as [`Level`] says: its
//! own FFT and cephes' `logf`), which [`KaldiPlan::compute`] and
//! [`KaldiPlan::compute_piece`] take whenever it covers the options (an FFT
//! length `2m` with `m ≥ 2` a product of 2, 3 and 5: every power of two from
//! 4, so every round_to_power_of_two set, and e.g. 400 or 1200 without
//! rounding; [`KaldiPlan::batched`]), and the per-frame one (realfft, libm's
//! `logf`), which they fall back to for the other lengths (e.g. 1102 = 44.1
//! kHz × 25 ms without rounding) and which [`KaldiPlan::compute_per_frame`]
//! always runs (what the CUDA kernels' host double equals bit for bit). Both
//! run the same float32 operations in the same order up to the FFT (so the
//! energy sums are the same bits) and differ by FFT and logarithm rounding
//! after it: within 1e-4 (natural log) in mel bands within 1e3 of a frame's
//! loudest, 1e-3 within 1e6 (tested on random option sets).
//!
//! Precision: float32 throughout (`Real`), as kaldi-native-fbank and torchaudio
//! compute; the tables are built in float64 and rounded once.
//!
//! Nothing is computed over the whole waveform: a frame reads its own
//! window ([`KaldiPlan::frame_samples`]; with snip_edges = false the first
//! and last frames reflect within half a window of the edges, which needs
//! only the waveform's length), DC removal and pre-emphasis are per frame,
//! and the dither is drawn frame after frame. So [`KaldiPlan::pieces`] cuts
//! a waveform into runs of frames with the samples each run reads, and
//! [`KaldiPlan::compute_piece`] over them, in order with one scratch, gives
//! the rows of [`KaldiPlan::compute`] over the whole, bit for bit (a
//! frame's batched result does not depend on its lane nor on the frames
//! beside it): the computation of a recording longer than memory in bounded
//! pieces.

use std::sync::Arc;

use rand::{RngExt, SeedableRng, rngs::StdRng};
use realfft::{RealFftPlanner, RealToComplex, num_complex::Complex};

use super::banks::{self, Band};
use super::batch::{BatchBuffers, Frames, KaldiBatch};
use super::options::{KaldiError, KaldiOptions, Kind};
use crate::Level;

/// The working precision of the frame pipeline.
type Real = f32;

/// A waveform that gives no frame (snip_edges = true: fewer samples than one
/// window; false: fewer than half a shift): the references return a
/// (0, num_bins) matrix; callers that store rows reject the file with this as
/// its reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "{samples} samples is shorter than one frame: kaldi fbank/mfcc gives 0 frames \
     below {min_samples} samples with these options"
)]
pub struct TooShort {
    pub samples: usize,
    /// The fewest samples that give one frame.
    pub min_samples: usize,
}

/// Where a piece of a waveform lies in it, for [`KaldiPlan::compute_piece`]:
/// the waveform's length, the index of the piece's first sample, and the
/// frames to compute from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub first_sample: usize,
    pub total_samples: usize,
    pub frames: std::ops::Range<usize>,
}

impl Piece {
    /// All `frames` frames of a waveform of `samples` samples.
    pub fn whole(samples: usize, frames: usize) -> Piece {
        Piece {
            first_sample: 0,
            total_samples: samples,
            frames: 0..frames,
        }
    }
}

/// Validated options with everything precomputed; immutable, shared by workers.
pub struct KaldiPlan {
    opts: KaldiOptions,
    kind: Kind,
    window_size: usize,
    window_shift: usize,
    padded: usize,
    window: Vec<Real>,
    banks: Vec<Band>,
    /// num_ceps × num_mel_bins, lifter applied (mfcc only; empty for fbank).
    dct: Vec<Real>,
    fft: Arc<dyn RealToComplex<Real>>,
    log_energy_floor: Option<Real>,
    /// The batched path, where it takes these options.
    batch: Option<KaldiBatch>,
}

impl std::fmt::Debug for KaldiPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KaldiPlan")
            .field("opts", &self.opts)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// Per-worker buffers of one plan, and the dither generator.
pub struct KaldiScratch {
    frame: Vec<Real>,
    spectrum: Vec<Complex<Real>>,
    fft_scratch: Vec<Complex<Real>>,
    power: Vec<Real>,
    mel: Vec<Real>,
    rng: StdRng,
    /// The batched path's buffers (None without it).
    batch: Option<BatchBuffers>,
}

impl KaldiScratch {
    /// Restarts the dither noise from `seed` (call once per file, e.g. with a
    /// hash of its path, for results that do not depend on scheduling).
    pub fn seed(&mut self, seed: u64) {
        self.rng = StdRng::seed_from_u64(seed);
    }

    /// One standard normal draw (Box–Muller).
    fn gaussian(&mut self) -> f64 {
        gaussian(&mut self.rng)
    }
}

/// One standard normal draw from `rng` (Box–Muller).
fn gaussian(rng: &mut StdRng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1]
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

impl KaldiPlan {
    /// Validates `opts` for `kind` and precomputes window, FFT, banks and DCT,
    /// with the batched path built for the best level this CPU runs.
    pub fn new(opts: &KaldiOptions, kind: Kind) -> Result<KaldiPlan, KaldiError> {
        KaldiPlan::with_level(opts, kind, Level::detect())
    }

    /// [`new`](Self::new) with the batched path built for `level` (which this
    /// CPU must have: [`Level::available`]); every level gives the same bits.
    pub fn with_level(
        opts: &KaldiOptions,
        kind: Kind,
        level: Level,
    ) -> Result<KaldiPlan, KaldiError> {
        opts.validate(kind)?;
        let padded = opts.padded_window_size();
        let fft = RealFftPlanner::<Real>::new().plan_fft_forward(padded);
        let dct = match kind {
            Kind::Fbank => Vec::new(),
            Kind::Mfcc => banks::dct_lifted(opts),
        };
        let log_energy_floor = (opts.energy_floor > 0.0).then(|| opts.energy_floor.ln() as Real);
        let mut plan = KaldiPlan {
            opts: opts.clone(),
            kind,
            window_size: opts.window_size(),
            window_shift: opts.window_shift(),
            padded,
            window: banks::window(opts).into_iter().map(|w| w as Real).collect(),
            banks: banks::mel_banks(opts),
            dct,
            fft,
            log_energy_floor,
            batch: None,
        };
        let tables = (plan.window.as_slice(), plan.bands(), plan.dct.as_slice());
        plan.batch = KaldiBatch::new(opts, kind, tables, plan.log_energy_floor, level);
        Ok(plan)
    }

    /// The level the batched path runs at, or None where these options keep
    /// the per-frame path (an FFT length that is not twice a product of 2, 3
    /// and 5, at least 4).
    pub fn batched(&self) -> Option<Level> {
        self.batch.as_ref().map(KaldiBatch::level)
    }

    pub fn options(&self) -> &KaldiOptions {
        &self.opts
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Columns of the output: num_mel_bins (+1 with use_energy) for fbank,
    /// num_ceps for mfcc.
    pub fn num_bins(&self) -> usize {
        match self.kind {
            Kind::Fbank => self.opts.num_mel_bins + usize::from(self.opts.use_energy),
            Kind::Mfcc => self.opts.num_ceps,
        }
    }

    /// Samples per frame and between frames.
    pub fn window_size(&self) -> usize {
        self.window_size
    }

    pub fn window_shift(&self) -> usize {
        self.window_shift
    }

    /// Kaldi's frame count: snip_edges ⇒ 1 + (n − window) / shift (0 when
    /// n < window); otherwise (n + shift/2) / shift.
    pub fn num_frames(&self, n_samples: usize) -> usize {
        if self.opts.snip_edges {
            if n_samples < self.window_size {
                0
            } else {
                1 + (n_samples - self.window_size) / self.window_shift
            }
        } else {
            (n_samples + self.window_shift / 2) / self.window_shift
        }
    }

    /// [`num_frames`](Self::num_frames), or [`TooShort`] where it is 0.
    pub fn check_length(&self, n_samples: usize) -> Result<usize, TooShort> {
        let min_samples = if self.opts.snip_edges {
            self.window_size
        } else {
            self.window_shift - self.window_shift / 2
        };
        match self.num_frames(n_samples) {
            0 => Err(TooShort {
                samples: n_samples,
                min_samples,
            }),
            f => Ok(f),
        }
    }

    /// Buffers for [`compute`](Self::compute), dither seeded with 0.
    pub fn scratch(&self) -> KaldiScratch {
        KaldiScratch {
            frame: vec![0.0; self.padded],
            spectrum: self.fft.make_output_vec(),
            fft_scratch: self.fft.make_scratch_vec(),
            power: vec![0.0; self.padded / 2],
            mel: vec![0.0; self.opts.num_mel_bins],
            rng: StdRng::seed_from_u64(0),
            batch: self.batch.as_ref().map(KaldiBatch::buffers),
        }
    }

    /// Replaces `out` with the (num_frames, num_bins) features of `samples`
    /// (mono, at sample_frequency, in [-1, 1] before sample_scale), row-major;
    /// returns num_frames (0 for a waveform shorter than one frame).
    pub fn compute(
        &self,
        samples: &[f32],
        scratch: &mut KaldiScratch,
        out: &mut Vec<f32>,
    ) -> usize {
        let frames = self.num_frames(samples.len());
        let piece = Piece::whole(samples.len(), frames);
        self.compute_piece(samples, &piece, scratch, out);
        frames
    }

    /// [`compute`](Self::compute) one frame at a time whatever the options
    /// (realfft, libm's `logf`): the path the batched one falls back to, and
    /// the numbers the CUDA kernels' host double computes (bit for bit).
    pub fn compute_per_frame(
        &self,
        samples: &[f32],
        scratch: &mut KaldiScratch,
        out: &mut Vec<f32>,
    ) -> usize {
        let frames = self.num_frames(samples.len());
        let piece = Piece::whole(samples.len(), frames);
        self.check_piece(&piece);
        out.clear();
        self.per_frame(samples, &piece, scratch, out);
        frames
    }

    /// The samples frame `f` of a waveform of `total` samples reads: its
    /// window, clamped into the waveform (snip_edges = false reflects at
    /// both edges, within half a window of them).
    pub fn frame_samples(&self, f: usize, total: usize) -> std::ops::Range<usize> {
        let ws = self.window_size;
        if self.opts.snip_edges {
            let start = f * self.window_shift;
            return start..start + ws;
        }
        let (n, start) = (
            total as i64,
            (f * self.window_shift + self.window_shift / 2) as i64 - (ws / 2) as i64,
        );
        let end = start + ws as i64;
        let (mut lo, mut hi) = (start, end);
        if start < 0 {
            (lo, hi) = (0, hi.max(-start)); // -s - 1 for s < 0
        }
        if end > n {
            (lo, hi) = (lo.min(2 * n - end), n); // 2n - 1 - s for s ≥ n
        }
        lo.clamp(0, n) as usize..hi.clamp(0, n) as usize
    }

    /// Replaces `out` with the rows of `piece.frames` of a waveform of
    /// `piece.total_samples` samples, of which `samples` holds those from
    /// `piece.first_sample` on: each row equal, bit for bit, to the same
    /// row of [`compute`](Self::compute) over the whole waveform, since a
    /// frame reads only its own window ([`frame_samples`](Self::frame_samples)),
    /// which `samples` must hold, and its result does not depend on the
    /// frames computed beside it (the batched path's lanes). With a non-zero
    /// dither, the pieces of one waveform must be computed in order with one
    /// scratch (the noise is drawn frame after frame).
    pub fn compute_piece(
        &self,
        samples: &[f32],
        piece: &Piece,
        scratch: &mut KaldiScratch,
        out: &mut Vec<f32>,
    ) {
        self.check_piece(piece);
        out.clear();
        match &self.batch {
            Some(batch) => {
                let mut b = scratch.batch.take().expect("a scratch of this plan");
                let mut src = Source {
                    plan: self,
                    samples,
                    piece,
                    frame: &mut scratch.frame,
                    rng: &mut scratch.rng,
                };
                batch.rows(piece.frames.clone(), &mut src, &mut b, out);
                scratch.batch = Some(b);
            }
            None => self.per_frame(samples, piece, scratch, out),
        }
    }

    fn check_piece(&self, piece: &Piece) {
        assert!(
            piece.frames.end <= self.num_frames(piece.total_samples),
            "frames {:?} of a waveform of {} samples, which has {}",
            piece.frames,
            piece.total_samples,
            self.num_frames(piece.total_samples)
        );
    }

    /// Appends the rows of `piece.frames` to `out`, one frame at a time.
    fn per_frame(
        &self,
        samples: &[f32],
        piece: &Piece,
        scratch: &mut KaldiScratch,
        out: &mut Vec<f32>,
    ) {
        let bins = self.num_bins();
        let first = out.len();
        out.resize(first + piece.frames.len() * bins, 0.0);
        let out = &mut out[first..];
        for (f, row) in piece.frames.clone().zip(out.chunks_exact_mut(bins)) {
            let need = self.frame_samples(f, piece.total_samples);
            debug_assert!(
                need.start >= piece.first_sample && need.end <= piece.first_sample + samples.len(),
                "frame {f} reads samples {need:?}; the piece holds {} from {}",
                samples.len(),
                piece.first_sample
            );
            self.extract(samples, piece, f, scratch);
            let energy = self.prepare_frame(scratch);
            self.spectrum(scratch);
            self.finish_row(energy, scratch, row);
        }
    }

    /// The waveform of `total` samples cut into pieces of at most
    /// `frames_per_piece` frames (at least 1), in order, each with the
    /// samples its frames read ([`frame_samples`](Self::frame_samples)):
    /// consecutive pieces overlap by window − shift samples, so memory for
    /// a piece is `frames_per_piece × shift + window` samples whatever the
    /// waveform's length. The rows of the pieces, one after the other, are
    /// the rows of [`compute`](Self::compute) over the whole waveform.
    pub fn pieces(
        &self,
        total: usize,
        frames_per_piece: usize,
    ) -> impl Iterator<Item = (Piece, std::ops::Range<usize>)> + '_ {
        let frames = self.num_frames(total);
        let step = frames_per_piece.max(1);
        (0..frames)
            .step_by(step)
            .map(move |first| self.piece(total, first..(first + step).min(frames)))
    }

    /// The piece of the waveform of `total` samples that computes frames
    /// `run` (within [`num_frames`](Self::num_frames)), and the samples its
    /// frames read: one step of [`pieces`](Self::pieces), for a caller that
    /// walks the frames itself (a recording streamed from disk).
    pub fn piece(
        &self,
        total: usize,
        run: std::ops::Range<usize>,
    ) -> (Piece, std::ops::Range<usize>) {
        let (lo, hi) = run.clone().fold((usize::MAX, 0), |(lo, hi), f| {
            let r = self.frame_samples(f, total);
            (lo.min(r.start), hi.max(r.end))
        });
        let piece = Piece {
            first_sample: lo,
            total_samples: total,
            frames: run,
        };
        (piece, lo..hi)
    }

    /// Frame `f`'s window_size samples into `scratch.frame`, scaled and
    /// dithered; the FFT padding after them zeroed. `samples` holds the
    /// waveform's samples from `piece.first_sample` on.
    fn extract(&self, samples: &[f32], piece: &Piece, f: usize, scratch: &mut KaldiScratch) {
        let ws = self.window_size;
        self.extract_scaled(samples, piece, f, &mut scratch.frame[..ws]);
        scratch.frame[ws..].fill(0.0);
        if self.opts.dither != 0.0 {
            let dither = self.opts.dither;
            for k in 0..ws {
                let g = scratch.gaussian();
                scratch.frame[k] += (dither * g) as Real;
            }
        }
    }

    /// Where frame `f` of a waveform of `total` samples starts when its
    /// window lies inside the waveform (always with snip_edges; otherwise
    /// None for a frame that reflects at an edge).
    fn frame_start(&self, f: usize, total: usize) -> Option<usize> {
        if self.opts.snip_edges {
            return Some(f * self.window_shift);
        }
        let ws = self.window_size;
        let start = (f * self.window_shift + self.window_shift / 2) as i64 - (ws / 2) as i64;
        (start >= 0 && start + ws as i64 <= total as i64).then_some(start as usize)
    }

    /// Frame `f`'s window_size samples into `frame`, scaled (no dither).
    fn extract_scaled(&self, samples: &[f32], piece: &Piece, f: usize, frame: &mut [Real]) {
        let scale = self.opts.sample_scale as Real;
        let ws = self.window_size;
        let at = piece.first_sample;
        if self.opts.snip_edges {
            let start = f * self.window_shift - at;
            for (d, &s) in frame[..ws].iter_mut().zip(&samples[start..start + ws]) {
                *d = s * scale;
            }
        } else {
            let n = piece.total_samples as i64;
            let start = (f * self.window_shift + self.window_shift / 2) as i64 - (ws / 2) as i64;
            for (k, d) in frame[..ws].iter_mut().enumerate() {
                let mut s = start + k as i64;
                // Kaldi's ExtractWindow: reflect until inside (n ≥ 1 here).
                while s < 0 || s >= n {
                    s = if s < 0 { -s - 1 } else { 2 * n - 1 - s };
                }
                *d = samples[s as usize - at] * scale;
            }
        }
    }

    /// DC removal, energy, pre-emphasis and window on `scratch.frame`; returns
    /// the log energy (floored) the recipe asked for.
    fn prepare_frame(&self, scratch: &mut KaldiScratch) -> Real {
        let ws = self.window_size;
        let x = &mut scratch.frame[..ws];
        if self.opts.remove_dc_offset {
            let mean = x.iter().sum::<Real>() / ws as Real;
            x.iter_mut().for_each(|v| *v -= mean);
        }
        let mut energy = if self.opts.raw_energy {
            log_energy(x)
        } else {
            0.0
        };
        let p = self.opts.preemphasis_coefficient as Real;
        if p != 0.0 {
            for i in (1..ws).rev() {
                x[i] -= p * x[i - 1];
            }
            x[0] -= p * x[0];
        }
        x.iter_mut().zip(&self.window).for_each(|(v, w)| *v *= w);
        if !self.opts.raw_energy {
            energy = log_energy(x);
        }
        match self.log_energy_floor {
            Some(floor) => energy.max(floor),
            None => energy,
        }
    }

    /// FFT of the padded frame; |X|² (or |X|) of bins 0 .. padded/2 into
    /// `scratch.power`, then the mel energies into `scratch.mel`.
    fn spectrum(&self, scratch: &mut KaldiScratch) {
        let KaldiScratch {
            frame,
            spectrum,
            fft_scratch,
            power,
            mel,
            ..
        } = scratch;
        self.fft
            .process_with_scratch(frame, spectrum, fft_scratch)
            .expect("buffers come from this plan's FFT");
        for (p, c) in power.iter_mut().zip(spectrum.iter()) {
            *p = c.re * c.re + c.im * c.im;
        }
        if !self.opts.use_power {
            power.iter_mut().for_each(|p| *p = p.sqrt());
        }
        for (m, band) in mel.iter_mut().zip(&self.banks) {
            let span = &power[band.first..band.first + band.weights.len()];
            *m = span.iter().zip(&band.weights).map(|(p, w)| p * w).sum();
        }
    }

    /// Log, then the fbank row (energy first when asked) or the mfcc row.
    fn finish_row(&self, energy: Real, scratch: &mut KaldiScratch, row: &mut [f32]) {
        let mel = &mut scratch.mel;
        if self.opts.use_log_fbank {
            mel.iter_mut().for_each(|m| *m = m.max(Real::EPSILON).ln());
        }
        match self.kind {
            Kind::Fbank => {
                let (head, tail) = row.split_at_mut(usize::from(self.opts.use_energy));
                if let Some(e) = head.first_mut() {
                    *e = energy;
                }
                tail.copy_from_slice(mel);
            }
            Kind::Mfcc => {
                let n = mel.len();
                for (c, d) in row.iter_mut().zip(self.dct.chunks_exact(n)) {
                    *c = d.iter().zip(mel.iter()).map(|(a, b)| a * b).sum();
                }
                if self.opts.use_energy {
                    row[0] = energy;
                }
            }
        }
    }
}

/// A piece's frames as the batched path reads them.
struct Source<'a> {
    plan: &'a KaldiPlan,
    samples: &'a [f32],
    piece: &'a Piece,
    frame: &'a mut [Real],
    rng: &'a mut StdRng,
}

impl Frames for Source<'_> {
    fn samples(&self) -> &[f32] {
        self.samples
    }

    fn start(&self, f: usize) -> Option<usize> {
        let start = self.plan.frame_start(f, self.piece.total_samples)?;
        Some(start - self.piece.first_sample)
    }

    fn extract(&mut self, f: usize) -> &[f32] {
        let frame = &mut self.frame[..self.plan.window_size];
        self.plan.extract_scaled(self.samples, self.piece, f, frame);
        frame
    }

    fn gaussian(&mut self) -> f64 {
        gaussian(self.rng)
    }
}

/// ln(max(Σx², ε)), ε = f32::EPSILON (Kaldi's and torchaudio's).
fn log_energy(x: &[Real]) -> Real {
    x.iter()
        .map(|v| v * v)
        .sum::<Real>()
        .max(Real::EPSILON)
        .ln()
}

/// The precomputed tables, for the CUDA kernels (`compute::cuda::recipe_tables`),
/// which must use exactly these values to equal [`KaldiPlan::compute`].
impl KaldiPlan {
    /// The FFT length (window_size, rounded up to a power of two if asked).
    pub fn padded(&self) -> usize {
        self.padded
    }

    /// The analysis window (window_size points, float32).
    pub fn window(&self) -> &[f32] {
        &self.window
    }

    /// Each mel triangle as (first FFT bin, its weights).
    pub fn bands(&self) -> impl ExactSizeIterator<Item = (usize, &[f32])> + '_ {
        self.banks.iter().map(|b| (b.first, b.weights.as_slice()))
    }

    /// The MFCC matrix, num_ceps × num_mel_bins, lifter applied (empty for fbank).
    pub fn dct(&self) -> &[f32] {
        &self.dct
    }

    /// ln(energy_floor), or None when energy_floor is 0 (no floor).
    pub fn log_energy_floor(&self) -> Option<f32> {
        self.log_energy_floor
    }
}
