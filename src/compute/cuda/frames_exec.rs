//! The variable-length recipes on a device: [`FrameExec`] issues the kernel
//! sequences of `kernels/frames.cu` for one batch of utterances of different
//! lengths, written against the [`Device`] trait so the host double runs the
//! very same calls (`testing/tests_frames.rs`).
//!
//! ```text
//! Kaldi:   H2D samples, utts ─▶ kf_frame ─▶ cuFFT R2C (f32) ─▶ kf_power_mel_log ─▶ [kf_dct] ─▶ D2H rows
//! Whisper: H2D samples, utts ─▶ wm_frame ─▶ cuFFT D2Z (f64) ─▶ wm_power_mel_log
//!            ─▶ wm_max_part ─▶ wm_max ─▶ wm_clamp_scale ─▶ D2H rows, pad values
//! ```
//!
//! A [`FrameSlot`] is the device and pinned memory of one batch, sized once
//! for a [`Capacity`] (utterances, rows, samples); the stage fills its pinned
//! samples ([`FrameExec::samples_mut`]), [`FrameExec::issue`]s it on the
//! slot's own stream (two slots: one batch's copies overlap the other's
//! kernels) and reads the rows back once the slot's `done` event completed
//! ([`FrameExec::rows`]).
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
//! Invariants: a slot's pinned memory is written only while the slot is idle
//! (its `done` completed and its rows were read); every count the kernels
//! see fits an `i32` ([`Capacity::check`] at start-up).

use std::collections::HashMap;

use super::device::{
    Arg, DevBuf, Device, DeviceError, Event, FftKind, FftPlan, FftShape, Kernel, Pinned, Result,
    Stream,
};
use super::recipe::{bytes_of, dims, i32a};
use super::recipe_tables::{
    Batch, FrUtt, KaldiTables, RecipeTableError, WHISPER_MAX_PARTS, WhisperTables,
};
use super::tables::TooLarge;
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

    /// The batch of utterances of `lengths` samples, back to back.
    pub fn batch(&self, lengths: &[usize]) -> std::result::Result<Batch, TooLarge> {
        match self {
            FrameTables::Kaldi(_, p) => KaldiTables::batch(p, lengths),
            FrameTables::Whisper(_, p) => WhisperTables::batch(p, lengths),
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

/// The device and pinned memory of one batch, and its stream and event.
pub struct FrameSlot {
    pub stream: Stream,
    /// Recorded after the batch's last copy back.
    pub done: Event,
    samples_host: Pinned,
    utts_host: Pinned,
    /// Rows (`rows × out_bins` f32), then (Whisper) one pad value per utterance.
    out_host: Pinned,
    samples: DevBuf,
    utts: DevBuf,
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

/// See the module doc.
pub struct FrameExec {
    t: FrameTables,
    cap: Capacity,
    kernels: HashMap<&'static str, Kernel>,
    consts: Consts,
    /// Every row of a slot's frames buffer at once.
    plan: FftPlan,
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

impl FrameExec {
    /// Loads the recipe's kernels and uploads its tables (synchronously).
    pub fn new<D: Device>(dev: &mut D, t: FrameTables, cap: Capacity) -> Result<FrameExec> {
        cap.check().map_err(|e| DeviceError::new("alloc", e))?;
        let names: &[&'static str] = match &t {
            FrameTables::Kaldi(..) => &KALDI_KERNELS,
            FrameTables::Whisper(..) => &WHISPER_KERNELS,
        };
        let mut kernels = HashMap::new();
        for &name in names {
            kernels.insert(name, dev.kernel(name)?);
        }
        let s = dev.create_stream()?;
        let upload = |dev: &mut D, (ptr, len): (*const u8, usize)| -> Result<DevBuf> {
            let b = dev.alloc(len.max(8))?;
            if len > 0 {
                // SAFETY: the source is a Vec inside `t`, alive and unmodified
                // until the event below is synchronised.
                unsafe { dev.memcpy_htod_async(s, b, 0, ptr, len) }?;
            }
            Ok(b)
        };
        let consts = match &t {
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
        let (n, kind, _) = t.fft();
        let batch = FrameTables::batch_of(cap.rows);
        let plan = dev.fft_plan(FftShape { n, batch, kind })?;
        Ok(FrameExec {
            t,
            cap,
            kernels,
            consts,
            plan,
        })
    }

    pub fn capacity(&self) -> Capacity {
        self.cap
    }

    pub fn tables(&self) -> &FrameTables {
        &self.t
    }

    fn k(&self, name: &'static str) -> Result<Kernel> {
        self.kernels
            .get(name)
            .copied()
            .ok_or_else(|| DeviceError::new("cuModuleGetFunction", format!("{name} not loaded")))
    }

    /// Allocates one slot for the capacity.
    pub fn slot<D: Device>(&self, dev: &mut D) -> Result<FrameSlot> {
        let (c, bins) = (self.cap, self.t.out_bins());
        let (n, _, real) = self.t.fft();
        let fft_rows = FrameTables::batch_of(c.rows);
        let pads = if self.t.padded() { c.utts } else { 0 };
        let (mels, parts) = match &self.t {
            FrameTables::Kaldi(t, _) if t.kind == Kind::Mfcc => (t.n_mels, 0),
            FrameTables::Kaldi(..) => (0, 0),
            FrameTables::Whisper(..) => (0, WHISPER_MAX_PARTS),
        };
        Ok(FrameSlot {
            stream: dev.create_stream()?,
            done: dev.create_event()?,
            samples_host: dev.alloc_pinned(c.samples * 4)?,
            utts_host: dev.alloc_pinned((c.utts + 1) * size_of::<FrUtt>())?,
            out_host: dev.alloc_pinned((c.rows * bins + pads) * 4)?,
            samples: dev.alloc(c.samples * 4)?,
            utts: dev.alloc((c.utts + 1) * size_of::<FrUtt>())?,
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

    /// The slot's pinned samples, to fill before [`FrameExec::issue`].
    ///
    /// # Safety
    /// The slot must be idle: no batch issued on it since its `done` last
    /// completed (a copy may be reading these bytes otherwise).
    pub unsafe fn samples_mut<'d, D: Device>(
        &self,
        dev: &'d mut D,
        slot: &FrameSlot,
    ) -> Result<&'d mut [f32]> {
        // SAFETY: forwarded from the caller.
        let bytes = unsafe { dev.pinned_mut(slot.samples_host) };
        // SAFETY: every bit pattern is an f32; the alignment is checked.
        let (head, body, _) = unsafe { bytes.align_to_mut::<f32>() };
        if !head.is_empty() {
            return Err(DeviceError::new(
                "pinned",
                "the sample buffer is not 4-byte aligned",
            ));
        }
        Ok(body)
    }

    /// Issues `batch` on the slot's stream: its samples (already in the
    /// slot's pinned buffer) and utterance table to the device, the kernels,
    /// the rows (and Whisper's pad values) back, then the slot's `done`.
    ///
    /// # Safety
    /// The slot must be idle, as for [`FrameExec::samples_mut`].
    pub unsafe fn issue<D: Device>(
        &self,
        dev: &mut D,
        slot: &FrameSlot,
        batch: &Batch,
    ) -> Result<()> {
        let c = self.cap;
        if batch.len() > c.utts || batch.n_rows > c.rows || batch.n_samples > c.samples {
            return Err(DeviceError::new(
                "issue",
                format!(
                    "a batch of {} utterances, {} rows, {} samples exceeds the slot",
                    batch.len(),
                    batch.n_rows,
                    batch.n_samples
                ),
            ));
        }
        let s = slot.stream;
        {
            // SAFETY: the slot is idle (the caller's contract).
            let table = unsafe { dev.pinned_mut(slot.utts_host) };
            for (u, dst) in batch
                .utts
                .iter()
                .zip(table.chunks_exact_mut(size_of::<FrUtt>()))
            {
                dst[0..8].copy_from_slice(&u.sample.to_ne_bytes());
                dst[8..12].copy_from_slice(&u.n_samples.to_ne_bytes());
                dst[12..16].copy_from_slice(&u.row.to_ne_bytes());
            }
        }
        let utt_bytes = batch.utts.len() * size_of::<FrUtt>();
        dev.memcpy_ptod_async(s, slot.utts, 0, slot.utts_host, 0, utt_bytes)?;
        if batch.n_samples > 0 {
            dev.memcpy_ptod_async(
                s,
                slot.samples,
                0,
                slot.samples_host,
                0,
                batch.n_samples * 4,
            )?;
        }
        match &self.t {
            FrameTables::Kaldi(..) => self.kaldi(dev, slot, batch)?,
            FrameTables::Whisper(..) => self.whisper(dev, slot, batch)?,
        }
        let bins = self.t.out_bins();
        if batch.n_rows > 0 {
            dev.memcpy_dtoh_async(s, slot.out_host, 0, slot.out, 0, batch.n_rows * bins * 4)?;
        }
        if self.t.padded() {
            let at = c.rows * bins * 4;
            dev.memcpy_dtoh_async(s, slot.out_host, at, slot.pad, 0, batch.len() * 4)?;
        }
        dev.record_event(slot.done, s)
    }

    /// Kaldi: frames and energies, R2C, mel bands (and the DCT for MFCC).
    fn kaldi<D: Device>(&self, dev: &mut D, slot: &FrameSlot, batch: &Batch) -> Result<()> {
        let (rows, b) = (batch.n_rows, Arg::buf);
        let FrameTables::Kaldi(t, _) = &self.t else {
            return Err(DeviceError::new("issue", "not a Kaldi recipe"));
        };
        if rows == 0 {
            return Ok(());
        }
        self.kaldi_frames(dev, slot, batch, t)?;
        let (c, s) = (&self.consts, slot.stream);
        dev.fft_exec(s, self.plan, slot.frames, slot.spectrum)?;
        let mfcc = t.kind == Kind::Mfcc;
        // fbank: mels after the energy column when use_energy; mfcc: the
        // log mels into `mel`, then the DCT into the rows.
        let (dst, stride, col, e_col) = match (mfcc, t.use_energy) {
            (true, _) => (slot.mel, t.n_mels, 0, -1),
            (false, true) => (slot.out, t.out_bins, 1, 0),
            (false, false) => (slot.out, t.out_bins, 0, -1),
        };
        dev.launch(
            s,
            self.k("kf_power_mel_log")?,
            dims(rows * t.n_mels),
            &[
                b(slot.spectrum),
                i32a(rows),
                i32a(t.n_bins),
                i32a(t.n_mels),
                b(c.band_first),
                b(c.band_len),
                b(c.band_offset),
                b(c.band_weights),
                Arg::I32(i32::from(t.use_power)),
                Arg::I32(i32::from(t.use_log)),
                b(slot.energy),
                Arg::I32(e_col),
                i32a(stride),
                Arg::I32(col),
                b(dst),
            ],
        )?;
        if !mfcc {
            return Ok(());
        }
        dev.launch(
            s,
            self.k("kf_dct")?,
            dims(rows * t.out_bins),
            &[
                b(slot.mel),
                i32a(rows),
                i32a(t.n_mels),
                i32a(t.out_bins),
                b(c.dct),
                Arg::I32(i32::from(t.use_energy)),
                b(slot.energy),
                b(slot.out),
            ],
        )
    }

    /// `kf_frame`: every row's windowed, padded frame and its log energy.
    fn kaldi_frames<D: Device>(
        &self,
        dev: &mut D,
        slot: &FrameSlot,
        batch: &Batch,
        t: &KaldiTables,
    ) -> Result<()> {
        let (c, b) = (&self.consts, Arg::buf);
        dev.launch(
            slot.stream,
            self.k("kf_frame")?,
            dims(batch.n_rows),
            &[
                b(slot.samples),
                b(slot.utts),
                i32a(batch.len()),
                i32a(batch.n_rows),
                i32a(t.window_size),
                i32a(t.window_shift),
                i32a(t.padded),
                Arg::I32(i32::from(t.snip_edges)),
                Arg::F32(t.sample_scale),
                Arg::I32(i32::from(t.remove_dc_offset)),
                Arg::F32(t.preemph),
                Arg::I32(i32::from(t.raw_energy)),
                Arg::F32(t.log_energy_floor),
                b(c.window),
                b(slot.frames),
                b(slot.energy),
            ],
        )
    }

    /// Whisper: frames, D2Z, log-mel of every covering frame, then each
    /// utterance's maximum, clamp and pad value.
    fn whisper<D: Device>(&self, dev: &mut D, slot: &FrameSlot, batch: &Batch) -> Result<()> {
        let (rows, n_utts, b) = (batch.n_rows, batch.len(), Arg::buf);
        let FrameTables::Whisper(t, _) = &self.t else {
            return Err(DeviceError::new("issue", "not a Whisper recipe"));
        };
        let s = slot.stream;
        if rows > 0 {
            self.whisper_log_mel(dev, slot, batch, t)?;
        }
        dev.launch(
            s,
            self.k("wm_max_part")?,
            dims(n_utts * WHISPER_MAX_PARTS),
            &[
                b(slot.out),
                b(slot.utts),
                i32a(n_utts),
                i32a(t.n_mels),
                i32a(WHISPER_MAX_PARTS),
                b(slot.partial),
            ],
        )?;
        dev.launch(
            s,
            self.k("wm_max")?,
            dims(n_utts),
            &[
                b(slot.partial),
                b(slot.utts),
                i32a(n_utts),
                i32a(WHISPER_MAX_PARTS),
                Arg::F32(t.floor_log),
                b(slot.clamp),
                b(slot.pad),
            ],
        )?;
        if rows == 0 {
            return Ok(());
        }
        dev.launch(
            s,
            self.k("wm_clamp_scale")?,
            dims(rows * t.n_mels),
            &[
                b(slot.out),
                b(slot.utts),
                i32a(n_utts),
                i32a(rows),
                i32a(t.n_mels),
                b(slot.clamp),
            ],
        )
    }

    /// `wm_frame`, the D2Z and `wm_power_mel_log`: log10 mels of every row.
    fn whisper_log_mel<D: Device>(
        &self,
        dev: &mut D,
        slot: &FrameSlot,
        batch: &Batch,
        t: &WhisperTables,
    ) -> Result<()> {
        let (rows, c, s, b) = (batch.n_rows, &self.consts, slot.stream, Arg::buf);
        dev.launch(
            s,
            self.k("wm_frame")?,
            dims(rows * N_FFT),
            &[
                b(slot.samples),
                b(slot.utts),
                i32a(batch.len()),
                i32a(rows),
                b(c.window),
                b(slot.frames),
            ],
        )?;
        dev.fft_exec(s, self.plan, slot.frames, slot.spectrum)?;
        dev.launch(
            s,
            self.k("wm_power_mel_log")?,
            dims(rows * t.n_mels),
            &[
                b(slot.spectrum),
                i32a(rows),
                i32a(N_FFT / 2 + 1),
                i32a(t.n_mels),
                b(c.band_first),
                b(c.band_len),
                b(c.band_offset),
                b(c.band_weights),
                b(slot.out),
            ],
        )
    }

    /// Utterance `u`'s row values and (Whisper) pad value from the slot's
    /// pinned output.
    ///
    /// # Safety
    /// The slot's `done` completed after the batch `batch` was issued on it,
    /// and no batch was issued on it since.
    pub unsafe fn rows<'d, D: Device>(
        &self,
        dev: &'d D,
        slot: &FrameSlot,
        batch: &Batch,
        u: usize,
    ) -> (&'d [u8], Option<f32>) {
        let bins = self.t.out_bins();
        // SAFETY: forwarded from the caller: the copies into `out_host` ran.
        let out = unsafe { dev.pinned(slot.out_host) };
        let r = batch.rows(u);
        let values = &out[r.start * bins * 4..r.end * bins * 4];
        let pad = self.t.padded().then(|| {
            let at = (self.cap.rows * bins + u) * 4;
            f32::from_ne_bytes([out[at], out[at + 1], out[at + 2], out[at + 3]])
        });
        (values, pad)
    }
}
