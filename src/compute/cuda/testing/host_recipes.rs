//! The recipe kernels (`kernels/frames.cu`: Kaldi fbank/MFCC, Whisper log-mel)
//! run on the host: FFI to their g++ build (`kernels/host_launch_frames.cpp`),
//! and two pipelines that run a batch of variable-length utterances the way a
//! device would, with realfft standing in for cuFFT (f32 R2C for Kaldi, f64
//! D2Z for Whisper, the precisions of the CPU code).
//!
//! Before any call, [`KaldiHost::run`] / [`WhisperHost::run`] check every
//! length and every index the kernels will compute from the tables and the
//! batch ([`check_batch`], the band ranges), so a bad argument is an
//! [`Error`], never an out-of-bounds access; the only `unsafe` blocks are the
//! FFI calls. Tests: `host_recipes_tests.rs`.

use std::sync::Arc;

use realfft::{RealFftPlanner, RealToComplex};

use super::host::{Dim3, Error, Launch};
use crate::compute::cuda::recipe_tables::{
    Bands, Batch, FrUtt, KaldiTables, WHISPER_MAX_PARTS, WhisperTables,
};
use crate::dsp::kaldi::Kind;
use crate::dsp::whisper::{N_FFT, N_SAMPLES};

pub(super) mod ffi {
    use super::Dim3;
    use crate::compute::cuda::recipe_tables::FrUtt;

    // Defined in kernels/host_launch_frames.cpp; each runs the kernel of the
    // same name for every thread of grid × block. Pointers must be valid for
    // every index the kernel computes from the counts (the callers check).
    unsafe extern "C" {
        pub fn host_kf_frame(
            grid: Dim3,
            block: Dim3,
            samples: *const f32,
            utts: *const FrUtt,
            n_utts: i32,
            n_rows: i32,
            window_size: i32,
            window_shift: i32,
            padded: i32,
            snip_edges: i32,
            sample_scale: f32,
            remove_dc_offset: i32,
            preemph: f32,
            raw_energy: i32,
            log_energy_floor: f32,
            window: *const f32,
            frames: *mut f32,
            energy: *mut f32,
        );
        pub fn host_kf_power_mel_log(
            grid: Dim3,
            block: Dim3,
            spectrum: *const f32,
            n_rows: i32,
            n_bins: i32,
            n_mels: i32,
            band_first: *const i32,
            band_len: *const i32,
            band_offset: *const i32,
            band_weights: *const f32,
            use_power: i32,
            use_log: i32,
            energy: *const f32,
            energy_col: i32,
            out_stride: i32,
            out_col: i32,
            out: *mut f32,
        );
        pub fn host_kf_dct(
            grid: Dim3,
            block: Dim3,
            mel: *const f32,
            n_rows: i32,
            n_mels: i32,
            num_ceps: i32,
            dct: *const f32,
            use_energy: i32,
            energy: *const f32,
            out: *mut f32,
        );
        pub fn host_wm_frame(
            grid: Dim3,
            block: Dim3,
            samples: *const f32,
            utts: *const FrUtt,
            n_utts: i32,
            n_rows: i32,
            window: *const f64,
            frames: *mut f64,
        );
        pub fn host_wm_power_mel_log(
            grid: Dim3,
            block: Dim3,
            spectrum: *const f64,
            n_rows: i32,
            n_bins: i32,
            n_mels: i32,
            band_first: *const i32,
            band_len: *const i32,
            band_offset: *const i32,
            band_weights: *const f64,
            out: *mut f32,
        );
        pub fn host_wm_max_part(
            grid: Dim3,
            block: Dim3,
            values: *const f32,
            utts: *const FrUtt,
            n_utts: i32,
            n_mels: i32,
            parts: i32,
            partial: *mut f32,
        );
        pub fn host_wm_max(
            grid: Dim3,
            block: Dim3,
            partial: *const f32,
            utts: *const FrUtt,
            n_utts: i32,
            parts: i32,
            floor_log: f32,
            clamp: *mut f32,
            pad: *mut f32,
        );
        pub fn host_wm_clamp_scale(
            grid: Dim3,
            block: Dim3,
            values: *mut f32,
            utts: *const FrUtt,
            n_utts: i32,
            n_rows: i32,
            n_mels: i32,
            clamp: *const f32,
        );
    }
}

fn table(what: &'static str, detail: String) -> Error {
    Error::Table { what, detail }
}

fn i(what: &'static str, v: usize) -> Result<i32, Error> {
    i32::try_from(v)
        .map_err(|_| Error::TooLarge(crate::compute::cuda::tables::TooLarge { what, value: v }))
}

/// Checks the batch against `samples`: the sentinel, rows non-decreasing, and
/// every utterance's reads (`reach(u, rows)`: the samples it may touch, from
/// its first) inside the buffer. At least one utterance.
fn check_batch(
    batch: &Batch,
    samples: &[f32],
    reach: impl Fn(&FrUtt, usize) -> Option<usize>,
) -> Result<(), Error> {
    let u = &batch.utts;
    if u.len() < 2 || u.last().map(|s| s.row as usize) != Some(batch.n_rows) {
        return Err(table(
            "utts",
            "no utterance, or no sentinel at n_rows".into(),
        ));
    }
    for (k, w) in u.windows(2).enumerate() {
        let rows = i64::from(w[1].row) - i64::from(w[0].row);
        let start = usize::try_from(w[0].sample).ok();
        let end = start.zip(reach(&w[0], rows.max(0) as usize));
        let inside = end.is_some_and(|(s, r)| s.checked_add(r).is_some_and(|e| e <= samples.len()));
        if rows < 0 || w[0].row < 0 || w[0].n_samples < 0 || (rows > 0 && !inside) {
            return Err(table("utts", format!("utterance {k}: {:?}", w[0])));
        }
    }
    Ok(())
}

/// Checks that every band reads bins below `n_bins` and weights inside the table.
fn check_bands<T>(b: &Bands<T>, n_mels: usize, n_bins: usize) -> Result<(), Error> {
    let lens = [b.first.len(), b.len.len(), b.offset.len()];
    if lens.iter().any(|&l| l != n_mels) {
        return Err(table(
            "bands",
            format!("{lens:?} entries for {n_mels} bands"),
        ));
    }
    for m in 0..n_mels {
        let (f, l, o) = (b.first[m], b.len[m], b.offset[m]);
        let ok = f >= 0 && l >= 0 && o >= 0 && (f + l) as usize <= n_bins;
        if !ok || (o + l) as usize > b.weights.len() {
            return Err(table(
                "bands",
                format!("band {m}: first {f}, len {l}, offset {o}"),
            ));
        }
    }
    Ok(())
}

/// The Kaldi recipe's kernels on the host, in device order:
/// `kf_frame` → R2C (realfft f32) → `kf_power_mel_log` → `kf_dct` (MFCC).
pub struct KaldiHost {
    t: KaldiTables,
    fft: Arc<dyn RealToComplex<f32>>,
    launch: Option<Launch>,
}

impl KaldiHost {
    pub fn new(t: KaldiTables) -> KaldiHost {
        let fft = RealFftPlanner::<f32>::new().plan_fft_forward(t.padded);
        KaldiHost {
            t,
            fft,
            launch: None,
        }
    }

    /// Every kernel launched with `launch` instead of the device's shapes.
    pub fn with_launch(mut self, launch: Launch) -> KaldiHost {
        self.launch = Some(launch);
        self
    }

    fn launch(&self, total: usize) -> Launch {
        self.launch.unwrap_or_else(|| Launch::for_total(total))
    }

    /// Rows `[n_rows][out_bins]` of every utterance of `batch`, whose samples
    /// (mono, in [-1, 1]) are `samples`.
    pub fn run(&self, samples: &[f32], batch: &Batch) -> Result<Vec<f32>, Error> {
        let t = &self.t;
        let (ws, shift) = (t.window_size, t.window_shift);
        let snip = t.snip_edges;
        check_batch(batch, samples, |u, rows| match rows {
            0 => Some(0),
            _ if snip => (rows - 1).checked_mul(shift)?.checked_add(ws),
            // Kaldi's reflection needs at least one sample (else it never ends).
            _ => (u.n_samples > 0).then_some(u.n_samples as usize),
        })?;
        if t.window.len() != ws || ws > t.padded || t.n_bins != t.padded / 2 + 1 {
            return Err(table(
                "window",
                format!("{} points, padded {}", ws, t.padded),
            ));
        }
        check_bands(&t.bands, t.n_mels, t.padded / 2)?;
        if t.kind == Kind::Mfcc && t.dct.len() != t.out_bins * t.n_mels {
            return Err(table("dct", format!("{} values", t.dct.len())));
        }
        let (n_utts, rows) = (i("utterances", batch.len())?, i("rows", batch.n_rows)?);
        let mut frames = vec![0f32; batch.n_rows * t.padded];
        let mut energy = vec![0f32; batch.n_rows];
        let l = self.launch(batch.n_rows);
        // SAFETY: check_batch proved every utterance's frames read samples
        // inside `samples` (snip_edges: (rows−1)·shift + window_size from its
        // start; otherwise reflection keeps them below n_samples); frames and
        // energy hold n_rows · padded and n_rows values, the window ws.
        unsafe {
            ffi::host_kf_frame(
                l.grid,
                l.block,
                samples.as_ptr(),
                batch.utts.as_ptr(),
                n_utts,
                rows,
                i("window", ws)?,
                i("shift", shift)?,
                i("padded", t.padded)?,
                i32::from(snip),
                t.sample_scale,
                i32::from(t.remove_dc_offset),
                t.preemph,
                i32::from(t.raw_energy),
                t.log_energy_floor,
                t.window.as_ptr(),
                frames.as_mut_ptr(),
                energy.as_mut_ptr(),
            );
        }
        let spectrum = self.fft_rows(&frames);
        self.mel_rows(&spectrum, &energy, batch.n_rows)
    }

    /// `kf_power_mel_log`, then `kf_dct` for MFCC.
    fn mel_rows(&self, spectrum: &[f32], energy: &[f32], n_rows: usize) -> Result<Vec<f32>, Error> {
        let t = &self.t;
        let mfcc = t.kind == Kind::Mfcc;
        let (stride, col, e_col) = match mfcc {
            true => (t.n_mels, 0, -1),
            false if t.use_energy => (t.out_bins, 1, 0),
            false => (t.out_bins, 0, -1),
        };
        let mut mel = vec![0f32; n_rows * stride];
        let l = self.launch(n_rows * t.n_mels);
        // SAFETY: spectrum holds n_rows · n_bins complex values, every band
        // reads bins below padded/2 and weights inside the table
        // (check_bands); out has n_rows rows of `stride` ≥ col + n_mels
        // (fbank: out_bins = n_mels + use_energy) values, energy n_rows.
        unsafe {
            ffi::host_kf_power_mel_log(
                l.grid,
                l.block,
                spectrum.as_ptr(),
                i("rows", n_rows)?,
                i("bins", t.n_bins)?,
                i("mels", t.n_mels)?,
                t.bands.first.as_ptr(),
                t.bands.len.as_ptr(),
                t.bands.offset.as_ptr(),
                t.bands.weights.as_ptr(),
                i32::from(t.use_power),
                i32::from(t.use_log),
                energy.as_ptr(),
                e_col,
                i("stride", stride)?,
                col,
                mel.as_mut_ptr(),
            );
        }
        if !mfcc {
            return Ok(mel);
        }
        let mut out = vec![0f32; n_rows * t.out_bins];
        let l = self.launch(out.len());
        // SAFETY: mel holds n_rows · n_mels values, dct out_bins · n_mels
        // (checked in run), out n_rows · out_bins, energy n_rows.
        unsafe {
            ffi::host_kf_dct(
                l.grid,
                l.block,
                mel.as_ptr(),
                i("rows", n_rows)?,
                i("mels", t.n_mels)?,
                i("ceps", t.out_bins)?,
                t.dct.as_ptr(),
                i32::from(t.use_energy),
                energy.as_ptr(),
                out.as_mut_ptr(),
            );
        }
        Ok(out)
    }

    /// The R2C step: every padded frame → n_bins complex values, interleaved.
    fn fft_rows(&self, frames: &[f32]) -> Vec<f32> {
        let (n, bins) = (self.t.padded, self.t.n_bins);
        let mut spectrum = vec![0f32; frames.len() / n * 2 * bins];
        let (mut input, mut output) = (self.fft.make_input_vec(), self.fft.make_output_vec());
        let mut scratch = self.fft.make_scratch_vec();
        for (frame, out) in frames
            .chunks_exact(n)
            .zip(spectrum.chunks_exact_mut(2 * bins))
        {
            input.copy_from_slice(frame);
            self.fft
                .process_with_scratch(&mut input, &mut output, &mut scratch)
                .expect("buffer sizes come from the plan");
            for (o, x) in out.chunks_exact_mut(2).zip(&output) {
                o[0] = x.re;
                o[1] = x.im;
            }
        }
        spectrum
    }
}

/// The Whisper recipe's kernels on the host, in device order: `wm_frame` → D2Z
/// (realfft f64) → `wm_power_mel_log` → `wm_max_part` → `wm_max` →
/// `wm_clamp_scale`.
pub struct WhisperHost {
    t: WhisperTables,
    fft: Arc<dyn RealToComplex<f64>>,
    launch: Option<Launch>,
}

/// What [`WhisperHost::run`] returns: rows `[n_rows][n_mels]` (the covering
/// frames of every utterance) and each utterance's pad value.
pub struct WhisperRows {
    pub values: Vec<f32>,
    pub pad: Vec<f32>,
}

impl WhisperHost {
    pub fn new(t: WhisperTables) -> WhisperHost {
        let fft = RealFftPlanner::<f64>::new().plan_fft_forward(N_FFT);
        WhisperHost {
            t,
            fft,
            launch: None,
        }
    }

    pub fn with_launch(mut self, launch: Launch) -> WhisperHost {
        self.launch = Some(launch);
        self
    }

    fn launch(&self, total: usize) -> Launch {
        self.launch.unwrap_or_else(|| Launch::for_total(total))
    }

    pub fn run(&self, samples: &[f32], batch: &Batch) -> Result<WhisperRows, Error> {
        let t = &self.t;
        // wm_frame reads an utterance's samples below its n_samples only.
        check_batch(batch, samples, |u, _| Some(u.n_samples as usize))?;
        if batch.utts.iter().any(|u| u.n_samples as usize > N_SAMPLES) {
            return Err(table("utts", "an utterance longer than 30 s".into()));
        }
        if t.window.len() != N_FFT {
            return Err(table("window", format!("{} points", t.window.len())));
        }
        let n_bins = N_FFT / 2 + 1;
        check_bands(&t.bands, t.n_mels, n_bins)?;
        let (n_utts, rows) = (i("utterances", batch.len())?, i("rows", batch.n_rows)?);
        let mels = i("mels", t.n_mels)?;
        let mut frames = vec![0f64; batch.n_rows * N_FFT];
        let l = self.launch(frames.len());
        // SAFETY: every utterance reads only its first n_samples samples, all
        // inside `samples` (check_batch); frames holds n_rows · 400 values.
        unsafe {
            let (s, u) = (samples.as_ptr(), batch.utts.as_ptr());
            ffi::host_wm_frame(
                l.grid,
                l.block,
                s,
                u,
                n_utts,
                rows,
                t.window.as_ptr(),
                frames.as_mut_ptr(),
            );
        }
        let spectrum = self.fft_rows(&frames);
        let mut values = vec![0f32; batch.n_rows * t.n_mels];
        let l = self.launch(values.len());
        // SAFETY: spectrum holds n_rows · 201 complex values, the bands read
        // bins < 201 and weights inside the table (check_bands).
        unsafe {
            let b = &t.bands;
            ffi::host_wm_power_mel_log(
                l.grid,
                l.block,
                spectrum.as_ptr(),
                rows,
                i("bins", n_bins)?,
                mels,
                b.first.as_ptr(),
                b.len.as_ptr(),
                b.offset.as_ptr(),
                b.weights.as_ptr(),
                values.as_mut_ptr(),
            );
        }
        let parts = WHISPER_MAX_PARTS;
        let mut partial = vec![0f32; batch.len() * parts];
        let (mut clamp, mut pad) = (vec![0f32; batch.len()], vec![0f32; batch.len()]);
        let p = i("parts", parts)?;
        // SAFETY: values holds n_rows · n_mels values and each utterance's
        // rows lie inside n_rows (check_batch); partial holds n_utts · parts,
        // clamp and pad n_utts values.
        unsafe {
            let u = batch.utts.as_ptr();
            let l = self.launch(partial.len());
            ffi::host_wm_max_part(
                l.grid,
                l.block,
                values.as_ptr(),
                u,
                n_utts,
                mels,
                p,
                partial.as_mut_ptr(),
            );
            let l = self.launch(batch.len());
            let (c, d) = (clamp.as_mut_ptr(), pad.as_mut_ptr());
            ffi::host_wm_max(
                l.grid,
                l.block,
                partial.as_ptr(),
                u,
                n_utts,
                p,
                t.floor_log,
                c,
                d,
            );
            let l = self.launch(values.len());
            let v = values.as_mut_ptr();
            ffi::host_wm_clamp_scale(l.grid, l.block, v, u, n_utts, rows, mels, clamp.as_ptr());
        }
        Ok(WhisperRows { values, pad })
    }

    /// The D2Z step: every 400-sample frame → 201 complex values, interleaved.
    fn fft_rows(&self, frames: &[f64]) -> Vec<f64> {
        let bins = N_FFT / 2 + 1;
        let mut spectrum = vec![0f64; frames.len() / N_FFT * 2 * bins];
        let (mut input, mut output) = (self.fft.make_input_vec(), self.fft.make_output_vec());
        let mut scratch = self.fft.make_scratch_vec();
        for (frame, out) in frames
            .chunks_exact(N_FFT)
            .zip(spectrum.chunks_exact_mut(2 * bins))
        {
            input.copy_from_slice(frame);
            self.fft
                .process_with_scratch(&mut input, &mut output, &mut scratch)
                .expect("buffer sizes come from the plan");
            for (o, x) in out.chunks_exact_mut(2).zip(&output) {
                o[0] = x.re;
                o[1] = x.im;
            }
        }
        spectrum
    }
}

#[cfg(test)]
#[path = "host_recipes_tests.rs"]
mod tests;
