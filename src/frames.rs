//! Variable-length rows: the vocabulary the compute stage, the writers and
//! `inspect` share for recipes whose rows have a length of their own (Kaldi
//! fbank and MFCC, Whisper's log-mel), defined below all of them.
//!
//! * A [`FrameRecipe`] is one such recipe, built once from the configuration
//!   and shared by every worker; [`FrameRecipe::worker`] gives each worker
//!   its own [`FrameWorker`] (scratch buffers, no allocation per file in the
//!   steady state).
//! * The **row protocol** between compute and the sink: a row is
//!   `frames × bins` float32 values, frame-major (row-major
//!   `(frames, bins)`), followed by [`FrameLayout::trailer`] values that are
//!   per-row scalars (Whisper: the one value every frame past the audio has,
//!   which readers pad with). The frame count is therefore
//!   `(len − trailer) / bins` ([`FrameLayout::frames_of`]); a row of 0 frames
//!   is valid (a file shorter than one frame where the reference returns an
//!   empty matrix).
//! * [`FrameLayout`] is what the writer records: the recipe's name, its
//!   parameters ([`Param`], written as root attributes under the reference's
//!   own keyword names), bins, the frame step in seconds, the sample rate and
//!   how many samples of a file the recipe reads ([`FrameLayout::max_samples`]:
//!   Whisper's 30 s).
//!
//! The librosa recipe keeps its fixed-shape rows (`dsp::Spec`) and does not
//! use this module.

use std::fmt;
use std::sync::Arc;

use crate::dsp::kaldi::KaldiPlan;
use crate::dsp::whisper::WhisperPlan;

/// The layout version written as the root attribute `layout_version` of a
/// variable-length file (docs/FORMAT.md, "Variable-length rows").
pub const LAYOUT_VERSION: i64 = 1;

/// The value of the root attribute `layout` of a variable-length file.
pub const LAYOUT_NAME: &str = "frames";

/// The size a `features` chunk aims at (docs/FORMAT.md, "Chunking").
pub const CHUNK_TARGET_BYTES: usize = 1 << 20;

/// One recipe parameter as it is stored (an HDF5 root attribute).
#[derive(Clone, Debug, PartialEq)]
pub enum Param {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
}

impl fmt::Display for Param {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Param::Int(v) => write!(f, "{v}"),
            Param::Float(v) => write!(f, "{v:?}"),
            Param::Bool(v) => write!(f, "{v}"),
            Param::Str(v) => f.write_str(v),
        }
    }
}

/// How a recipe's rows look to the sink and to readers.
#[derive(Clone, Debug, PartialEq)]
pub struct FrameLayout {
    /// `kaldi-fbank`, `kaldi-mfcc` or `whisper` (the `[features] recipe`).
    pub recipe: String,
    /// Values per frame (mel bins, cepstra, plus energy where the recipe adds it).
    pub bins: usize,
    /// Hz of the samples the recipe computes from (files are resampled to it).
    pub sample_rate: u32,
    /// Seconds between the starts of two frames.
    pub frame_step_seconds: f64,
    /// Samples read from the start of a file at most (`None`: the whole file).
    pub max_samples: Option<usize>,
    /// Readers pad every row to this many frames with the row's pad value
    /// (Whisper: 3,000), which is then the row's one trailer value.
    pub padded_frames: Option<usize>,
    /// Every parameter that decides the numbers, under the reference's names.
    pub params: Vec<(String, Param)>,
}

impl FrameLayout {
    /// Per-row scalars after the frames: 1 (the pad value) when rows are
    /// padded by readers, else 0.
    pub fn trailer(&self) -> usize {
        usize::from(self.padded_frames.is_some())
    }

    /// Frames per `features` chunk when a value takes `value_bytes`: about
    /// [`CHUNK_TARGET_BYTES`], so one utterance touches one chunk (two where
    /// it straddles a boundary).
    pub fn chunk_frames(&self, value_bytes: usize) -> usize {
        (CHUNK_TARGET_BYTES / (self.bins.max(1) * value_bytes.max(1))).max(1)
    }

    /// The frame count of a row of `len` values, or None when `len` does not
    /// follow the row protocol.
    pub fn frames_of(&self, len: usize) -> Option<usize> {
        let values = len.checked_sub(self.trailer())?;
        (self.bins > 0 && values.is_multiple_of(self.bins)).then_some(values / self.bins)
    }
}

/// Why a file has no row under a variable-length recipe.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error(
        "{samples} samples is shorter than one frame: {recipe} gives 0 frames below \
         {min_samples} samples with these options"
    )]
    TooShort {
        recipe: String,
        samples: usize,
        min_samples: usize,
    },
}

/// The plan behind a recipe, for a backend that computes it with its own
/// kernels (the CUDA stage builds its tables from it: the same window, mel
/// weights and DCT as the CPU workers).
#[derive(Clone, Debug)]
pub enum RecipePlan {
    Kaldi(Arc<KaldiPlan>),
    Whisper(Arc<WhisperPlan>),
    /// A recipe no other backend computes (tests' own recipes).
    CpuOnly,
}

/// A variable-length recipe, built once and shared by the workers.
pub trait FrameRecipe: Send + Sync + fmt::Debug {
    fn layout(&self) -> &FrameLayout;
    /// One worker's computing state.
    fn worker(&self) -> Box<dyn FrameWorker>;
    /// The plan, for other backends.
    fn plan(&self) -> RecipePlan {
        RecipePlan::CpuOnly
    }
}

/// One worker's state for a [`FrameRecipe`].
pub trait FrameWorker: Send {
    /// Replaces `row` with the row of `samples` (mono, at the layout's rate,
    /// at most `max_samples` of them) under the row protocol. `seed` is the
    /// file's own (its job id: the same file gets the same one whatever the
    /// thread count), for recipes that add seeded noise (Kaldi's dither).
    fn compute(&mut self, samples: &[f32], seed: u64, row: &mut Vec<f32>)
    -> Result<(), FrameError>;
}

#[cfg(test)]
pub(crate) mod testing {
    //! A test-only recipe: frames of `step` samples, each frame's bins are
    //! its mean and its first `bins − 1` samples, and (optionally) a pad value:
    //! simple enough that a test can say what every stored value must be.
    use super::*;

    #[derive(Debug)]
    pub struct Blocks {
        pub layout: FrameLayout,
        pub step: usize,
    }

    impl Blocks {
        pub fn new(bins: usize, step: usize, padded: Option<usize>) -> Blocks {
            Blocks {
                layout: FrameLayout {
                    recipe: "test-blocks".into(),
                    bins,
                    sample_rate: 16_000,
                    frame_step_seconds: step as f64 / 16_000.0,
                    max_samples: None,
                    padded_frames: padded,
                    params: vec![
                        ("step".into(), Param::Int(step as i64)),
                        ("note".into(), Param::Str("test".into())),
                    ],
                },
                step,
            }
        }

        /// The row [`FrameWorker::compute`] makes of `samples`.
        pub fn row(&self, samples: &[f32]) -> Vec<f32> {
            let bins = self.layout.bins;
            let mut row = Vec::new();
            for frame in samples.chunks_exact(self.step) {
                row.push(frame.iter().sum::<f32>() / self.step as f32);
                row.extend((0..bins - 1).map(|i| frame.get(i).copied().unwrap_or(0.0)));
            }
            if self.layout.padded_frames.is_some() {
                row.push(-1.5);
            }
            row
        }
    }

    struct BlocksWorker(std::sync::Arc<Blocks>);

    impl FrameWorker for BlocksWorker {
        fn compute(
            &mut self,
            samples: &[f32],
            _seed: u64,
            row: &mut Vec<f32>,
        ) -> Result<(), FrameError> {
            if samples.len() < self.0.step && self.0.layout.padded_frames.is_none() {
                return Err(FrameError::TooShort {
                    recipe: self.0.layout.recipe.clone(),
                    samples: samples.len(),
                    min_samples: self.0.step,
                });
            }
            *row = self.0.row(samples);
            Ok(())
        }
    }

    /// The recipe as the stages take it.
    #[derive(Debug)]
    pub struct Shared(pub std::sync::Arc<Blocks>);

    impl FrameRecipe for Shared {
        fn layout(&self) -> &FrameLayout {
            &self.0.layout
        }
        fn worker(&self) -> Box<dyn FrameWorker> {
            Box::new(BlocksWorker(std::sync::Arc::clone(&self.0)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::Blocks;

    #[test]
    fn frames_follow_the_row_protocol() {
        let plain = Blocks::new(4, 10, None).layout;
        assert_eq!(plain.frames_of(0), Some(0));
        assert_eq!(plain.frames_of(12), Some(3));
        assert_eq!(plain.frames_of(13), None);
        let padded = Blocks::new(4, 10, Some(30)).layout;
        assert_eq!(padded.trailer(), 1);
        assert_eq!(padded.frames_of(13), Some(3));
        assert_eq!(padded.frames_of(0), None);
    }
}
