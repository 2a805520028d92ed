//! The tables the kernels of `kernels/frames.cu` read for the variable-length
//! recipes (Kaldi fbank and MFCC, Whisper's log-mel), built on the host from
//! the CPU plans ([`KaldiPlan`], [`WhisperPlan`]) so that both backends use the
//! very same window, mel weights and DCT; and [`Batch`], the per-batch
//! utterance table ([`FrUtt`]) of a batch of utterances of different lengths.
//!
//! Plain host data in exactly the layout the kernels index (kernels/README.md);
//! the host shim (`testing/host_recipes.rs`) passes it directly, a device stage
//! would upload it once per plan (the tables) or per batch (the utterances).
//!
//! Invariants of a [`Batch`] made by [`Batch::new`]: `utts` has one entry per
//! utterance plus a sentinel whose `row` is `n_rows`; `row` is non-decreasing;
//! utterance `u` owns rows `utts[u].row .. utts[u + 1].row` and samples
//! `utts[u].sample ..` (`n_samples` of them); every count fits in an `i32`.

use crate::dsp::kaldi::{KaldiPlan, Kind};
use crate::dsp::whisper::{N_SAMPLES, WhisperPlan};

use super::tables::TooLarge;

/// One utterance of a batch (= `FrUtt` in `frames.cu`, 16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrUtt {
    /// Index of its first sample in the batch's sample buffer.
    pub sample: i64,
    /// Its samples the kernels may read (Whisper: cut at 30 s).
    pub n_samples: i32,
    /// Its first output row (frame); its rows end at the next entry's.
    pub row: i32,
}

/// Why the kernels cannot compute a recipe as configured.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RecipeTableError {
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
    /// Dither draws Gaussian noise per sample on the CPU; the kernels have no
    /// generator, so a dithered recipe stays on the CPU.
    #[error("dither = {dither}: the CUDA kernels compute only dither = 0")]
    Dither { dither: f64 },
}

fn int(what: &'static str, value: usize) -> Result<i32, TooLarge> {
    i32::try_from(value).map_err(|_| TooLarge { what, value })
}

/// The utterances of one batch, their samples back to back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// One entry per utterance, then the sentinel (`row` = `n_rows`).
    pub utts: Vec<FrUtt>,
    /// Samples in the buffer (the sum of the lengths).
    pub n_samples: usize,
    /// Output rows of the whole batch.
    pub n_rows: usize,
}

impl Batch {
    /// Utterances of `lengths[u]` samples each, back to back; each gives
    /// `rows(len)` rows and may read at most `max_samples` of its samples.
    pub fn new(
        lengths: &[usize],
        max_samples: usize,
        rows: impl Fn(usize) -> usize,
    ) -> Result<Batch, TooLarge> {
        let mut utts = Vec::with_capacity(lengths.len() + 1);
        let (mut sample, mut row) = (0usize, 0usize);
        for &len in lengths {
            utts.push(FrUtt {
                sample: sample as i64,
                n_samples: int("utterance samples", len.min(max_samples))?,
                row: int("batch rows", row)?,
            });
            sample += len;
            row += rows(len);
        }
        utts.push(FrUtt {
            sample: sample as i64,
            n_samples: 0,
            row: int("batch rows", row)?,
        });
        Ok(Batch {
            utts,
            n_samples: sample,
            n_rows: row,
        })
    }

    /// Utterances (without the sentinel).
    pub fn len(&self) -> usize {
        self.utts.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows of utterance `u`.
    pub fn rows(&self, u: usize) -> std::ops::Range<usize> {
        self.utts[u].row as usize..self.utts[u + 1].row as usize
    }
}

/// Mel bands in kernel layout: band `m` weighs bins `first[m] ..` with
/// `weights[offset[m] .. offset[m] + len[m]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Bands<T> {
    pub first: Vec<i32>,
    pub len: Vec<i32>,
    pub offset: Vec<i32>,
    pub weights: Vec<T>,
}

impl<T: Copy> Bands<T> {
    fn new<'a>(bands: impl Iterator<Item = (usize, &'a [T])>) -> Result<Bands<T>, TooLarge>
    where
        T: 'a,
    {
        let mut b = Bands {
            first: Vec::new(),
            len: Vec::new(),
            offset: Vec::new(),
            weights: Vec::new(),
        };
        for (first, w) in bands {
            b.first.push(int("band first bin", first)?);
            b.len.push(int("band length", w.len())?);
            b.offset.push(int("band weights", b.weights.len())?);
            b.weights.extend_from_slice(w);
        }
        Ok(b)
    }

    /// The highest bin any band reads, plus one (0 without bands).
    pub fn bins_read(&self) -> usize {
        let ends = self.first.iter().zip(&self.len);
        ends.map(|(&f, &l)| (f + l) as usize).max().unwrap_or(0)
    }
}

/// Everything `kf_frame`, `kf_power_mel_log` and `kf_dct` take for one
/// [`KaldiPlan`] (kernels/README.md).
#[derive(Clone, Debug, PartialEq)]
pub struct KaldiTables {
    pub kind: Kind,
    pub window_size: usize,
    pub window_shift: usize,
    /// The FFT length (R2C over `padded` real samples).
    pub padded: usize,
    /// R2C output bins: padded / 2 + 1.
    pub n_bins: usize,
    pub snip_edges: bool,
    pub sample_scale: f32,
    pub remove_dc_offset: bool,
    pub preemph: f32,
    pub raw_energy: bool,
    /// ln(energy_floor), −∞ for no floor.
    pub log_energy_floor: f32,
    pub use_power: bool,
    pub use_log: bool,
    pub use_energy: bool,
    pub n_mels: usize,
    /// Columns of a row (fbank: mels + energy; mfcc: num_ceps).
    pub out_bins: usize,
    pub window: Vec<f32>,
    pub bands: Bands<f32>,
    /// num_ceps × n_mels (mfcc), empty for fbank.
    pub dct: Vec<f32>,
}

impl KaldiTables {
    pub fn new(plan: &KaldiPlan) -> Result<KaldiTables, RecipeTableError> {
        let o = plan.options();
        if o.dither != 0.0 {
            return Err(RecipeTableError::Dither { dither: o.dither });
        }
        let padded = plan.padded();
        int("FFT length", padded)?;
        Ok(KaldiTables {
            kind: plan.kind(),
            window_size: plan.window_size(),
            window_shift: plan.window_shift(),
            padded,
            n_bins: padded / 2 + 1,
            snip_edges: o.snip_edges,
            sample_scale: o.sample_scale as f32,
            remove_dc_offset: o.remove_dc_offset,
            preemph: o.preemphasis_coefficient as f32,
            raw_energy: o.raw_energy,
            log_energy_floor: plan.log_energy_floor().unwrap_or(f32::NEG_INFINITY),
            // mfcc always takes the log of the power spectrum.
            use_power: o.use_power || plan.kind() == Kind::Mfcc,
            use_log: o.use_log_fbank || plan.kind() == Kind::Mfcc,
            use_energy: o.use_energy,
            n_mels: o.num_mel_bins,
            out_bins: plan.num_bins(),
            window: plan.window().to_vec(),
            bands: Bands::new(plan.bands())?,
            dct: plan.dct().to_vec(),
        })
    }

    /// The batch of utterances of `lengths` samples (Kaldi's frame count each).
    pub fn batch(plan: &KaldiPlan, lengths: &[usize]) -> Result<Batch, TooLarge> {
        Batch::new(lengths, usize::MAX, |n| plan.num_frames(n))
    }
}

/// Everything `wm_*` take for one [`WhisperPlan`].
#[derive(Clone, Debug, PartialEq)]
pub struct WhisperTables {
    pub n_mels: usize,
    /// The periodic Hann window, 400 points.
    pub window: Vec<f64>,
    pub bands: Bands<f64>,
    /// log10(1e-10) as float32.
    pub floor_log: f32,
}

/// Partial maxima per utterance in `wm_max_part`.
pub const WHISPER_MAX_PARTS: usize = 64;

impl WhisperTables {
    pub fn new(plan: &WhisperPlan) -> Result<WhisperTables, TooLarge> {
        Ok(WhisperTables {
            n_mels: plan.n_mels(),
            window: plan.window().to_vec(),
            bands: Bands::new(plan.filters())?,
            floor_log: plan.floor_log(),
        })
    }

    /// The batch of utterances of `lengths` samples: each cut at 30 s, with
    /// the frames that cover its audio.
    pub fn batch(plan: &WhisperPlan, lengths: &[usize]) -> Result<Batch, TooLarge> {
        Batch::new(lengths, N_SAMPLES, |n| plan.num_frames_covering(n))
    }
}
