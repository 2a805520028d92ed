//! Recipes and their rows: the vocabulary the compute stage, `long`, `cmvn`,
//! the writers and `inspect` share, defined below all of them.
//!
//! * A [`FrameRecipe`] is one recipe (librosa, Kaldi fbank and MFCC,
//!   Whisper's log-mel), built once from the configuration and shared by
//!   every worker; [`FrameRecipe::worker`] gives each worker its own
//!   [`FrameWorker`] (scratch buffers, no allocation per file in the steady
//!   state), and [`FrameRecipe::plan`] hands its plan to the CUDA stage.
//! * A [`RowLayout`] says how its rows look: [`RowLayout::Fixed`] (librosa:
//!   every row the shape of its `Spec`, from a clip of exactly its length,
//!   stored in `mel`) or [`RowLayout::Frames`] (a row per file of its own
//!   length, stored in `features`), and what the worker's samples are
//!   ([`RowLayout::input`]).
//! * The **row protocol** of [`RowLayout::Frames`]: a row is
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

use std::fmt;
use std::sync::Arc;

use crate::dsp::kaldi::KaldiPlan;
use crate::dsp::whisper::WhisperPlan;
use crate::dsp::{Plan, Spec};

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

/// How a recipe's rows look to the stages, the writers and readers.
#[derive(Clone, Debug, PartialEq)]
pub enum RowLayout {
    /// librosa: every row has `spec.row_shape()` (`[n_long, n_short,
    /// n_mels, n_frames]`), computed from a clip of exactly
    /// `spec.clip_samples()` samples, and is stored in `mel`.
    Fixed(Spec),
    /// A row per file of its own length (the row protocol above), stored in
    /// `features`.
    Frames(FrameLayout),
}

/// The samples a worker hands a recipe, as [`RowLayout::input`] says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// Exactly this many (a file of another length is rejected, as the
    /// reference dataset's loader does).
    Clip(usize),
    /// The file at its natural length, or its first `max` samples.
    Natural { max: Option<usize> },
}

impl RowLayout {
    /// The `[features] recipe` name the rows are of.
    pub fn recipe(&self) -> &str {
        match self {
            RowLayout::Fixed(_) => "librosa",
            RowLayout::Frames(l) => &l.recipe,
        }
    }

    /// Hz of the samples the recipe computes from (files are resampled to it).
    pub fn sample_rate(&self) -> u32 {
        match self {
            RowLayout::Fixed(spec) => spec.sample_rate,
            RowLayout::Frames(l) => l.sample_rate,
        }
    }

    /// What a worker decodes a file into before the recipe computes it.
    pub fn input(&self) -> Input {
        match self {
            RowLayout::Fixed(spec) => Input::Clip(spec.clip_samples()),
            RowLayout::Frames(l) => Input::Natural { max: l.max_samples },
        }
    }

    /// The variable-length layout (None: librosa's fixed rows).
    pub fn frames(&self) -> Option<&FrameLayout> {
        match self {
            RowLayout::Fixed(_) => None,
            RowLayout::Frames(l) => Some(l),
        }
    }
}

#[cfg(test)]
impl RowLayout {
    /// librosa's `Spec` (tests of the fixed layout; panics on another).
    pub(crate) fn spec(&self) -> &Spec {
        match self {
            RowLayout::Fixed(spec) => spec,
            RowLayout::Frames(l) => panic!("{} rows have no librosa Spec", l.recipe),
        }
    }

    /// [`RowLayout::spec`], to change.
    pub(crate) fn spec_mut(&mut self) -> &mut Spec {
        match self {
            RowLayout::Fixed(spec) => spec,
            RowLayout::Frames(l) => panic!("{} rows have no librosa Spec", l.recipe),
        }
    }

    /// The variable-length layout (tests of it; panics on librosa's).
    pub(crate) fn frame_layout(&self) -> &FrameLayout {
        self.frames().expect("a variable-length layout")
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
    /// librosa's (`compute::cuda::backend`'s stage computes it).
    Librosa(Arc<Plan>),
    Kaldi(Arc<KaldiPlan>),
    Whisper(Arc<WhisperPlan>),
    /// A recipe no other backend computes (tests' own recipes).
    CpuOnly,
}

/// A recipe, built once and shared by the workers.
pub trait FrameRecipe: Send + Sync + fmt::Debug {
    fn layout(&self) -> &RowLayout;
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
    /// as [`RowLayout::input`] says) under the layout. `seed` is the
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
        /// `layout` as the stages take it.
        pub rows: RowLayout,
        pub step: usize,
    }

    impl Blocks {
        pub fn new(bins: usize, step: usize, padded: Option<usize>) -> Blocks {
            let layout = FrameLayout {
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
            };
            Blocks {
                rows: RowLayout::Frames(layout.clone()),
                layout,
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
        fn layout(&self) -> &RowLayout {
            &self.0.rows
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
