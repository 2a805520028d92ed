//! The variable-length recipes on a device: [`FrameKernels`] is the
//! [`Recipe`] of the batch runner that issues the kernel sequences of
//! `kernels/frames.cu` for one batch of utterances of different lengths,
//! written against the [`Device`] trait so the host double runs the very
//! same calls (`testing/tests_frames.rs`).
//!
//! ```text
//! Kaldi:   H2D samples, utts ─▶ kf_frame ─▶ cuFFT R2C (f32) ─▶ kf_power_mel_log ─▶ [kf_dct] ─▶ D2H rows
//! Whisper: H2D samples, utts ─▶ wm_frame ─▶ cuFFT D2Z (f64) ─▶ wm_power_mel_log
//!            ─▶ wm_max_part ─▶ wm_max ─▶ wm_clamp_scale ─▶ D2H rows, pad values
//! ```
//!
//! The batch runner (`orchestrate`) does the rest, as for librosa: it
//! gathers the utterances' samples into a slot's pinned input, copies them
//! and the utterance table ([`FrUtt`], one [`Desc`] each and a sentinel) on
//! its copy stream, issues this recipe on its compute stream, and hands each
//! utterance its rows (and Whisper's pad value, [`Recipe::output`]) once the
//! slot's batch completed. A slot holds a [`Capacity`] (utterances, rows,
//! samples); each utterance gives [`Recipe::rows`] rows.
//!
//! No CUDA graph here, unlike the librosa recipe: every batch has its own
//! row count, which the kernels take by value, so a graph would be captured
//! for one replay. A batch is 4–7 launches over up to [`ROWS_PER_BATCH`] rows
//! (milliseconds of work); launching them directly costs microseconds. There
//! is one cuFFT plan, made at start-up for every row of a slot: a batch's FFT
//! transforms the rows past its own too (never read), which costs the GPU
//! microseconds, while a plan per row count cost milliseconds each (the
//! first H200 run made one per batch).
//!
//! Invariants: every count the kernels see fits an `i32` ([`Capacity::check`]
//! at start-up); the runner never lets a batch exceed the capacity.

use std::collections::HashMap;

use super::device::{
    Arg, DevBuf, Device, DeviceError, FftKind, FftPlan, FftShape, Kernel, Pinned, Result, Stream,
};
use super::orchestrate::{Desc, Placed, Recipe, Shape};
use super::recipe::{bytes_of, dims, i32a};
use super::recipe_tables::{
    FrUtt, KaldiTables, RecipeTableError, WHISPER_MAX_PARTS, WhisperTables,
};
use super::tables::TooLarge;
use crate::decode::wav::WavInfo;
use crate::dsp::kaldi::{KaldiPlan, Kind};
use crate::dsp::whisper::{N_FFT, N_SAMPLES, WhisperPlan};
use crate::frames::{FrameError, RecipePlan};

/// Rows (frames) one batch holds at most: about 11 minutes of audio at a
/// 10 ms frame shift. Device memory per slot is about 4.5 KB a row (Kaldi,
/// 512-point FFT) or 6.8 KB (Whisper): ≈ 0.3 / 0.45 GB.
pub const ROWS_PER_BATCH: usize = 1 << 16;

/// The fewest rows a slot's FFT buffers hold (`FrameTables::batch_of`).
pub const ROW_BUCKET: usize = 4096;

/// The kernels' tables and the plan's row arithmetic of one recipe.
#[derive(Clone, Debug)]
pub enum FrameTables {
    Kaldi(KaldiTables, std::sync::Arc<KaldiPlan>),
    Whisper(WhisperTables, std::sync::Arc<WhisperPlan>),
}

/// Why a recipe cannot run on the device.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Unsupported {
    #[error(transparent)]
    Tables(#[from] RecipeTableError),
    #[error("the recipe has no CUDA kernels")]
    NoKernels,
}

impl From<TooLarge> for Unsupported {
    fn from(e: TooLarge) -> Unsupported {
        Unsupported::Tables(e.into())
    }
}

impl FrameTables {
    /// The tables of `plan`, or why the kernels cannot compute it (dither).
    pub fn new(plan: &RecipePlan) -> std::result::Result<FrameTables, Unsupported> {
        match plan {
            RecipePlan::Kaldi(p) => Ok(FrameTables::Kaldi(KaldiTables::new(p)?, p.clone())),
            RecipePlan::Whisper(p) => Ok(FrameTables::Whisper(WhisperTables::new(p)?, p.clone())),
            // librosa runs on `backend`'s stage, not this one.
            RecipePlan::Librosa(_) | RecipePlan::CpuOnly => Err(Unsupported::NoKernels),
        }
    }

    /// Values per row (frame).
    pub fn out_bins(&self) -> usize {
        match self {
            FrameTables::Kaldi(t, _) => t.out_bins,
            FrameTables::Whisper(t, _) => t.n_mels,
        }
    }

    /// The row's trailer (Whisper: the pad value).
    pub fn padded(&self) -> bool {
        matches!(self, FrameTables::Whisper(..))
    }

    /// Samples of an utterance the kernels read at most.
    pub fn max_samples(&self) -> usize {
        match self {
            FrameTables::Kaldi(..) => usize::MAX,
            FrameTables::Whisper(..) => N_SAMPLES,
        }
    }

    /// Rows of an utterance of `n` samples, or why it has none where the
    /// CPU recipe rejects it (Kaldi: shorter than one frame), with the same
    /// reason (`recipe` is the recipe's name).
    pub fn rows(&self, n: usize, recipe: &str) -> std::result::Result<usize, FrameError> {
        match self {
            FrameTables::Kaldi(_, p) => p.check_length(n).map_err(|e| FrameError::TooShort {
                recipe: recipe.to_string(),
                samples: e.samples,
                min_samples: e.min_samples,
            }),
            FrameTables::Whisper(_, p) => Ok(p.num_frames_covering(n)),
        }
    }

    /// Rows of an utterance of `n` samples that has rows (the pool checked
    /// with [`FrameTables::rows`]).
    fn rows_of(&self, n: usize) -> usize {
        match self {
            FrameTables::Kaldi(_, p) => p.num_frames(n),
            FrameTables::Whisper(_, p) => p.num_frames_covering(n),
        }
    }

    fn fft(&self) -> (usize, FftKind, usize) {
        match self {
            FrameTables::Kaldi(t, _) => (t.padded, FftKind::R2C, 4),
            FrameTables::Whisper(..) => (N_FFT, FftKind::D2Z, 8),
        }
    }

    /// Samples per row, roughly (the frame shift): sizes the sample buffers.
    fn hop(&self) -> usize {
        match self {
            FrameTables::Kaldi(t, _) => t.window_shift,
            FrameTables::Whisper(..) => crate::dsp::whisper::HOP_LENGTH,
        }
    }

    /// The rows a slot's buffers hold for a capacity of `rows`: the next
    /// power of two from [`ROW_BUCKET`].
    fn batch_of(rows: usize) -> usize {
        rows.max(ROW_BUCKET).next_power_of_two()
    }
}

/// What one batch may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    pub utts: usize,
    pub rows: usize,
    pub samples: usize,
}

impl Capacity {
    /// `utts` utterances, 3,000 rows each (a Whisper window) up to
    /// [`ROWS_PER_BATCH`], and the samples those rows cover (a frame shift
    /// each) plus one FFT length per utterance.
    pub fn new(t: &FrameTables, utts: usize) -> Capacity {
        let utts = utts.max(1);
        let rows = (utts * crate::dsp::whisper::N_FRAMES).clamp(ROW_BUCKET, ROWS_PER_BATCH);
        Capacity {
            utts,
            rows,
            samples: rows * t.hop() + utts * t.fft().0,
        }
    }

    /// Every count the kernels take as `int` fits one for a full batch (row
    /// and element indices inside the kernels are 64-bit).
    fn check(&self) -> std::result::Result<(), TooLarge> {
        let int = |what, value: usize| {
            i32::try_from(value)
                .map(drop)
                .map_err(|_| TooLarge { what, value })
        };
        int("batch utterances", self.utts * WHISPER_MAX_PARTS)?;
        int("batch rows", FrameTables::batch_of(self.rows))
    }
}

/// The device memory of one batch (a runner slot's work).
pub struct FrameWork {
    frames: DevBuf,
    spectrum: DevBuf,
    energy: DevBuf,
    mel: DevBuf,
    out: DevBuf,
    partial: DevBuf,
    clamp: DevBuf,
    pad: DevBuf,
}

/// The tables on the device (uploaded once).
struct Consts {
    window: DevBuf,
    band_first: DevBuf,
    band_len: DevBuf,
    band_offset: DevBuf,
    band_weights: DevBuf,
    dct: DevBuf,
}

/// One batch as the kernels see it: the slot's work, its samples and
/// utterance table on the device, and its counts.
struct Bound<'a> {
    s: Stream,
    w: &'a FrameWork,
    samples: DevBuf,
    utts: DevBuf,
    n_utts: usize,
    rows: usize,
}

/// See the module doc.
pub struct FrameKernels {
    t: FrameTables,
    cap: Capacity,
    kernels: HashMap<&'static str, Kernel>,
    consts: Option<Consts>,
    /// Every row of a slot's frames buffer at once (made in `init`).
    plan: Option<FftPlan>,
}

/// Kernel entry points of each recipe (`kernels/frames.cu`).
const KALDI_KERNELS: [&str; 3] = ["kf_frame", "kf_power_mel_log", "kf_dct"];
const WHISPER_KERNELS: [&str; 5] = [
    "wm_frame",
    "wm_power_mel_log",
    "wm_max_part",
    "wm_max",
    "wm_clamp_scale",
];

impl FrameKernels {
    /// The kernels of `t` for batches of up to `cap`.
    pub fn new(t: FrameTables, cap: Capacity) -> FrameKernels {
        FrameKernels {
            t,
            cap,
            kernels: HashMap::new(),
            consts: None,
            plan: None,
        }
    }

    pub fn capacity(&self) -> Capacity {
        self.cap
    }

    fn k(&self, name: &'static str) -> Result<Kernel> {
        self.kernels
            .get(name)
            .copied()
            .ok_or_else(|| DeviceError::new("cuModuleGetFunction", format!("{name} not loaded")))
    }

    fn ready(&self) -> Result<(&Consts, FftPlan)> {
        match (&self.consts, self.plan) {
            (Some(c), Some(p)) => Ok((c, p)),
            _ => Err(DeviceError::new("issue", "recipe not initialised")),
        }
    }

    /// Uploads the recipe's tables (synchronously).
    fn upload<D: Device>(&self, dev: &mut D) -> Result<Consts> {
        let s = dev.create_stream()?;
        let upload = |dev: &mut D, (ptr, len): (*const u8, usize)| -> Result<DevBuf> {
            let b = dev.alloc(len.max(8))?;
            if len > 0 {
                // SAFETY: the source is a Vec inside `self.t`, alive and
                // unmodified until the event below is synchronised.
                unsafe { dev.memcpy_htod_async(s, b, 0, ptr, len) }?;
            }
            Ok(b)
        };
        let consts = match &self.t {
            FrameTables::Kaldi(k, _) => Consts {
                window: upload(dev, bytes_of(&k.window))?,
                band_first: upload(dev, bytes_of(&k.bands.first))?,
                band_len: upload(dev, bytes_of(&k.bands.len))?,
                band_offset: upload(dev, bytes_of(&k.bands.offset))?,
                band_weights: upload(dev, bytes_of(&k.bands.weights))?,
                dct: upload(dev, bytes_of(&k.dct))?,
            },
            FrameTables::Whisper(w, _) => Consts {
                window: upload(dev, bytes_of(&w.window))?,
                band_first: upload(dev, bytes_of(&w.bands.first))?,
                band_len: upload(dev, bytes_of(&w.bands.len))?,
                band_offset: upload(dev, bytes_of(&w.bands.offset))?,
                band_weights: upload(dev, bytes_of(&w.bands.weights))?,
                dct: upload(dev, (std::ptr::null(), 0))?,
            },
        };
        let e = dev.create_event()?;
        dev.record_event(e, s)?;
        dev.event_synchronize(e)?;
        Ok(consts)
    }
}

impl Recipe for FrameKernels {
    type Work = FrameWork;

    fn desc_bytes(&self) -> usize {
        size_of::<FrUtt>()
    }

    /// An utterance's first sample (the input is f32), the samples the
    /// kernels read and its first row; the sentinel's row ends the batch.
    fn encode(&self, entry: Desc<'_>, out: &mut [u8]) {
        let u = match entry {
            Desc::File(p) => FrUtt {
                sample: (p.data / 4) as i64,
                n_samples: p.frames as i32,
                row: p.row as i32,
            },
            Desc::Pad { data, row } => FrUtt {
                sample: (data / 4) as i64,
                n_samples: 0,
                row: row as i32,
            },
        };
        out[0..8].copy_from_slice(&u.sample.to_ne_bytes());
        out[8..12].copy_from_slice(&u.n_samples.to_ne_bytes());
        out[12..16].copy_from_slice(&u.row.to_ne_bytes());
    }

    fn clip_samples(&self) -> usize {
        self.t.max_samples()
    }

    fn row_bytes(&self) -> usize {
        self.t.out_bins() * 4
    }

    fn rows(&self, info: &WavInfo) -> usize {
        self.t.rows_of(info.frames)
    }

    fn out_rows(&self, _files: usize) -> usize {
        self.cap.rows
    }

    /// The rows, then (Whisper) one pad value a file.
    fn out_bytes(&self, _files: usize) -> usize {
        let pads = if self.t.padded() { self.cap.utts } else { 0 };
        (self.cap.rows * self.t.out_bins() + pads) * 4
    }

    fn output<'o>(&self, out: &'o [u8], k: usize, p: &Placed) -> (&'o [u8], Option<f32>) {
        let rb = self.row_bytes();
        let (at, n) = (p.row as usize * rb, p.rows as usize * rb);
        let pad = self.t.padded().then(|| {
            let at = (self.cap.rows * self.t.out_bins() + k) * 4;
            f32::from_ne_bytes([out[at], out[at + 1], out[at + 2], out[at + 3]])
        });
        (&out[at..at + n], pad)
    }

    fn captured(&self) -> bool {
        false
    }

    /// Loads the recipe's kernels, uploads its tables and makes the one FFT
    /// plan for every row of a slot.
    fn init<D: Device>(&mut self, dev: &mut D) -> Result<()> {
        self.cap.check().map_err(|e| DeviceError::new("alloc", e))?;
        let names: &[&'static str] = match &self.t {
            FrameTables::Kaldi(..) => &KALDI_KERNELS,
            FrameTables::Whisper(..) => &WHISPER_KERNELS,
        };
        for &name in names {
            self.kernels.insert(name, dev.kernel(name)?);
        }
        self.consts = Some(self.upload(dev)?);
        let (n, kind, _) = self.t.fft();
        let batch = FrameTables::batch_of(self.cap.rows);
        self.plan = Some(dev.fft_plan(FftShape { n, batch, kind })?);
        Ok(())
    }

    /// The device memory of one batch of the capacity.
    fn alloc_work<D: Device>(&mut self, dev: &mut D, _files: usize) -> Result<FrameWork> {
        let (c, bins) = (self.cap, self.t.out_bins());
        let (n, _, real) = self.t.fft();
        let fft_rows = FrameTables::batch_of(c.rows);
        let (mels, parts) = match &self.t {
            FrameTables::Kaldi(t, _) if t.kind == Kind::Mfcc => (t.n_mels, 0),
            FrameTables::Kaldi(..) => (0, 0),
            FrameTables::Whisper(..) => (0, WHISPER_MAX_PARTS),
        };
        Ok(FrameWork {
            frames: dev.alloc(fft_rows * n * real)?,
            spectrum: dev.alloc(fft_rows * (n / 2 + 1) * 2 * real)?,
            energy: dev.alloc(c.rows.max(1) * 4)?,
            mel: dev.alloc((c.rows * mels).max(1) * 4)?,
            out: dev.alloc((c.rows * bins).max(1) * 4)?,
            partial: dev.alloc((c.utts * parts).max(1) * 4)?,
            clamp: dev.alloc(c.utts * 4)?,
            pad: dev.alloc(c.utts * 4)?,
        })
    }

    fn prepare<D: Device>(&mut self, _dev: &mut D, _files: usize) -> Result<()> {
        Ok(())
    }

    /// The kernels over the batch's samples (`input`) and utterance table
    /// (`descs`), then the rows (and Whisper's pad values) back to `out`.
    fn issue<D: Device>(
        &mut self,
        dev: &mut D,
        s: Stream,
        w: &FrameWork,
        input: DevBuf,
        descs: DevBuf,
        out: Pinned,
        shape: Shape,
    ) -> Result<()> {
        let c = self.cap;
        if shape.files > c.utts || shape.rows > c.rows {
            return Err(DeviceError::new(
                "issue",
                format!(
                    "a batch of {} utterances, {} rows exceeds the slot",
                    shape.files, shape.rows
                ),
            ));
        }
        let b = Bound {
            s,
            w,
            samples: input,
            utts: descs,
            n_utts: shape.files,
            rows: shape.rows,
        };
        match &self.t {
            FrameTables::Kaldi(t, _) => self.kaldi(dev, &b, t)?,
            FrameTables::Whisper(t, _) => self.whisper(dev, &b, t)?,
        }
        let bins = self.t.out_bins();
        if b.rows > 0 {
            dev.memcpy_dtoh_async(s, out, 0, w.out, 0, b.rows * bins * 4)?;
        }
        if self.t.padded() && b.n_utts > 0 {
            let at = c.rows * bins * 4;
            dev.memcpy_dtoh_async(s, out, at, w.pad, 0, b.n_utts * 4)?;
        }
        Ok(())
    }
}

impl FrameKernels {
    /// Kaldi: frames and energies, R2C, mel bands (and the DCT for MFCC).
    fn kaldi<D: Device>(&self, dev: &mut D, b: &Bound<'_>, t: &KaldiTables) -> Result<()> {
        let (rows, w, buf) = (b.rows, b.w, Arg::buf);
        if rows == 0 {
            return Ok(());
        }
        let (c, plan) = self.ready()?;
        self.kaldi_frames(dev, b, t, c)?;
        dev.fft_exec(b.s, plan, w.frames, w.spectrum)?;
        let mfcc = t.kind == Kind::Mfcc;
        // fbank: mels after the energy column when use_energy; mfcc: the
        // log mels into `mel`, then the DCT into the rows.
        let (dst, stride, col, e_col) = match (mfcc, t.use_energy) {
            (true, _) => (w.mel, t.n_mels, 0, -1),
            (false, true) => (w.out, t.out_bins, 1, 0),
            (false, false) => (w.out, t.out_bins, 0, -1),
        };
        dev.launch(
            b.s,
            self.k("kf_power_mel_log")?,
            dims(rows * t.n_mels),
            &[
                buf(w.spectrum),
                i32a(rows),
                i32a(t.n_bins),
                i32a(t.n_mels),
                buf(c.band_first),
                buf(c.band_len),
                buf(c.band_offset),
                buf(c.band_weights),
                Arg::I32(i32::from(t.use_power)),
                Arg::I32(i32::from(t.use_log)),
                buf(w.energy),
                Arg::I32(e_col),
                i32a(stride),
                Arg::I32(col),
                buf(dst),
            ],
        )?;
        if !mfcc {
            return Ok(());
        }
        dev.launch(
            b.s,
            self.k("kf_dct")?,
            dims(rows * t.out_bins),
            &[
                buf(w.mel),
                i32a(rows),
                i32a(t.n_mels),
                i32a(t.out_bins),
                buf(c.dct),
                Arg::I32(i32::from(t.use_energy)),
                buf(w.energy),
                buf(w.out),
            ],
        )
    }

    /// `kf_frame`: every row's windowed, padded frame and its log energy.
    fn kaldi_frames<D: Device>(
        &self,
        dev: &mut D,
        b: &Bound<'_>,
        t: &KaldiTables,
        c: &Consts,
    ) -> Result<()> {
        let buf = Arg::buf;
        dev.launch(
            b.s,
            self.k("kf_frame")?,
            dims(b.rows),
            &[
                buf(b.samples),
                buf(b.utts),
                i32a(b.n_utts),
                i32a(b.rows),
                i32a(t.window_size),
                i32a(t.window_shift),
                i32a(t.padded),
                Arg::I32(i32::from(t.snip_edges)),
                Arg::F32(t.sample_scale),
                Arg::I32(i32::from(t.remove_dc_offset)),
                Arg::F32(t.preemph),
                Arg::I32(i32::from(t.raw_energy)),
                Arg::F32(t.log_energy_floor),
                buf(c.window),
                buf(b.w.frames),
                buf(b.w.energy),
            ],
        )
    }

    /// Whisper: frames, D2Z, log-mel of every covering frame, then each
    /// utterance's maximum, clamp and pad value.
    fn whisper<D: Device>(&self, dev: &mut D, b: &Bound<'_>, t: &WhisperTables) -> Result<()> {
        let (rows, n_utts, w, buf) = (b.rows, b.n_utts, b.w, Arg::buf);
        let (c, plan) = self.ready()?;
        if rows > 0 {
            self.whisper_log_mel(dev, b, t, (c, plan))?;
        }
        dev.launch(
            b.s,
            self.k("wm_max_part")?,
            dims(n_utts * WHISPER_MAX_PARTS),
            &[
                buf(w.out),
                buf(b.utts),
                i32a(n_utts),
                i32a(t.n_mels),
                i32a(WHISPER_MAX_PARTS),
                buf(w.partial),
            ],
        )?;
        dev.launch(
            b.s,
            self.k("wm_max")?,
            dims(n_utts),
            &[
                buf(w.partial),
                buf(b.utts),
                i32a(n_utts),
                i32a(WHISPER_MAX_PARTS),
                Arg::F32(t.floor_log),
                buf(w.clamp),
                buf(w.pad),
            ],
        )?;
        if rows == 0 {
            return Ok(());
        }
        dev.launch(
            b.s,
            self.k("wm_clamp_scale")?,
            dims(rows * t.n_mels),
            &[
                buf(w.out),
                buf(b.utts),
                i32a(n_utts),
                i32a(rows),
                i32a(t.n_mels),
                buf(w.clamp),
            ],
        )
    }

    /// `wm_frame`, the D2Z and `wm_power_mel_log`: log10 mels of every row.
    fn whisper_log_mel<D: Device>(
        &self,
        dev: &mut D,
        b: &Bound<'_>,
        t: &WhisperTables,
        (c, plan): (&Consts, FftPlan),
    ) -> Result<()> {
        let (rows, w, buf) = (b.rows, b.w, Arg::buf);
        dev.launch(
            b.s,
            self.k("wm_frame")?,
            dims(rows * N_FFT),
            &[
                buf(b.samples),
                buf(b.utts),
                i32a(b.n_utts),
                i32a(rows),
                buf(c.window),
                buf(w.frames),
            ],
        )?;
        dev.fft_exec(b.s, plan, w.frames, w.spectrum)?;
        dev.launch(
            b.s,
            self.k("wm_power_mel_log")?,
            dims(rows * t.n_mels),
            &[
                buf(w.spectrum),
                i32a(rows),
                i32a(N_FFT / 2 + 1),
                i32a(t.n_mels),
                buf(c.band_first),
                buf(c.band_len),
                buf(c.band_offset),
                buf(c.band_weights),
                buf(w.out),
            ],
        )
    }
}
