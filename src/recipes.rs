//! The configured recipe as the stages take it: one [`FrameRecipe`],
//! built once per run, whose [`RowLayout`] the writers, `cmvn` and `long`
//! take and whose plan the CUDA stage takes.
//!
//! This is the one place that maps a recipe onto the layouts of
//! `crate::frames`: librosa ([`librosa`]: a `dsp::Plan` over clips of the
//! `Spec`'s length, with the reference dataset's two-stage segmentation;
//! fixed rows), Kaldi fbank/MFCC ([`KaldiPlan`]: the whole file, rows of
//! `num_bins` values; a file shorter than one frame is rejected with the
//! reason) and Whisper ([`WhisperPlan`]: the first 30 s, the covering
//! frames and the pad value as the row's trailer). `build`'s plan step
//! makes it and hands it to the writer (its layout), the planner (the first
//! seconds a recipe reads) and the pipeline (`Pipeline::start_reading`,
//! which puts it in `compute::Wiring::recipe` and sizes the CMVN sums from
//! it); serve's sink takes the layout of the pipeline's recipe.

use std::sync::Arc;

use crate::config::{Config, Recipe};
use crate::dsp::kaldi::{KaldiError, KaldiOptions, KaldiPlan, KaldiScratch, Kind};
use crate::dsp::whisper::{self, WhisperError, WhisperPlan, WhisperScratch};
use crate::dsp::{ParamValue, Plan, Scratch, Spec};
use crate::frames::{
    FrameError, FrameLayout, FrameRecipe, FrameWorker, Param, RecipePlan, RowLayout,
};

/// Why the configured recipe's plan could not be built. `config::features`
/// validates the same options first, so this names a gap in that
/// validation rather than a user's typo; it is reported, not assumed away.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("features: {0}")]
    Kaldi(#[from] KaldiError),
    #[error("features: {0}")]
    Whisper(#[from] WhisperError),
}

/// The recipe `cfg` asks for (`[features] recipe`; librosa computes
/// `cfg.spec`), built once for a run.
pub fn build(cfg: &Config) -> Result<Arc<dyn FrameRecipe>, Error> {
    Ok(match &cfg.features.recipe {
        Recipe::Librosa => librosa(&cfg.spec),
        Recipe::KaldiFbank(o) => kaldi(o, Kind::Fbank)?,
        Recipe::KaldiMfcc(o) => kaldi(o, Kind::Mfcc)?,
        Recipe::Whisper { n_mels } => whisper(*n_mels)?,
    })
}

/// librosa's log-mel of `spec` (a `Spec` that `config` or
/// `Spec::validate` accepted): fixed rows from clips of its length.
pub fn librosa(spec: &Spec) -> Arc<dyn FrameRecipe> {
    librosa_of(Arc::new(Plan::new(spec)))
}

/// [`librosa`] over a plan already built (a caller that holds one, as the
/// benchmarks and the CUDA stage's tests do).
pub fn librosa_of(plan: Arc<Plan>) -> Arc<dyn FrameRecipe> {
    Arc::new(Librosa {
        layout: RowLayout::Fixed(plan.spec().clone()),
        plan,
    })
}

/// Kaldi fbank or MFCC (`kind`) with `opts`, as the stages take it: the
/// float32 SIMD path where it takes the options ([`KaldiPlan::compute`]).
pub fn kaldi(opts: &KaldiOptions, kind: Kind) -> Result<Arc<dyn FrameRecipe>, KaldiError> {
    kaldi_in(opts, kind, false)
}

/// [`kaldi`] one frame at a time ([`KaldiPlan::compute_per_frame`]: realfft
/// and libm's `logf`): the numbers the CUDA kernels' host double computes,
/// for comparing the two backends bit for bit.
pub fn kaldi_per_frame(
    opts: &KaldiOptions,
    kind: Kind,
) -> Result<Arc<dyn FrameRecipe>, KaldiError> {
    kaldi_in(opts, kind, true)
}

fn kaldi_in(
    opts: &KaldiOptions,
    kind: Kind,
    per_frame: bool,
) -> Result<Arc<dyn FrameRecipe>, KaldiError> {
    let plan = KaldiPlan::new(opts, kind)?;
    let params = params(opts.params(kind));
    Ok(Arc::new(Kaldi::new(plan, params, per_frame)))
}

/// Whisper's log-mel with `n_mels` (80 or 128), as the stages take it: the
/// float32 SIMD path ([`WhisperPlan::compute`]).
pub fn whisper(n_mels: usize) -> Result<Arc<dyn FrameRecipe>, WhisperError> {
    whisper_in(n_mels, false)
}

/// [`whisper`] in the extractor's float64 precision, frame by frame
/// ([`WhisperPlan::compute_f64`]): the numbers the CUDA kernels compute, for
/// comparing the two backends bit for bit.
pub fn whisper_f64(n_mels: usize) -> Result<Arc<dyn FrameRecipe>, WhisperError> {
    whisper_in(n_mels, true)
}

fn whisper_in(n_mels: usize, f64: bool) -> Result<Arc<dyn FrameRecipe>, WhisperError> {
    let plan = WhisperPlan::new(n_mels)?;
    let params = params(vec![("n_mels", ParamValue::Int(n_mels as i64))]);
    Ok(Arc::new(Whisper::new(plan, params, f64)))
}

/// Parameters under `features.<name>` (the configuration's keys, which
/// are the reference's keyword names), typed for the attributes.
fn params(list: Vec<(&'static str, ParamValue)>) -> Vec<(String, Param)> {
    list.into_iter()
        .map(|(k, v)| {
            let v = match v {
                ParamValue::Int(i) => Param::Int(i),
                ParamValue::Real(r) => Param::Float(r),
                ParamValue::Bool(b) => Param::Bool(b),
                ParamValue::Text(t) => Param::Str(t.to_string()),
            };
            (format!("features.{k}"), v)
        })
        .collect()
}

/// librosa's log-mel over a shared plan.
#[derive(Debug)]
struct Librosa {
    plan: Arc<Plan>,
    layout: RowLayout,
}

struct LibrosaWorker {
    plan: Arc<Plan>,
    scratch: Scratch,
}

impl FrameRecipe for Librosa {
    fn layout(&self) -> &RowLayout {
        &self.layout
    }
    fn worker(&self) -> Box<dyn FrameWorker> {
        Box::new(LibrosaWorker {
            scratch: Scratch::new(&self.plan),
            plan: Arc::clone(&self.plan),
        })
    }
    fn plan(&self) -> RecipePlan {
        RecipePlan::Librosa(Arc::clone(&self.plan))
    }
}

impl FrameWorker for LibrosaWorker {
    fn compute(
        &mut self,
        samples: &[f32],
        _seed: u64,
        row: &mut Vec<f32>,
    ) -> Result<(), FrameError> {
        let spec = self.plan.spec();
        assert_eq!(
            samples.len(),
            spec.clip_samples(),
            "librosa computes whole clips"
        );
        row.resize(spec.row_len(), 0.0);
        self.plan.compute(samples, &mut self.scratch, row);
        Ok(())
    }
}

/// Kaldi fbank or MFCC over a shared plan, batched or (`per_frame`) one
/// frame at a time.
struct Kaldi {
    plan: Arc<KaldiPlan>,
    layout: RowLayout,
    recipe: &'static str,
    per_frame: bool,
}

impl std::fmt::Debug for Kaldi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kaldi")
            .field("layout", &self.layout)
            .finish_non_exhaustive()
    }
}

impl Kaldi {
    fn new(plan: KaldiPlan, params: Vec<(String, Param)>, per_frame: bool) -> Kaldi {
        let rate = plan.options().sample_frequency;
        let recipe = match plan.kind() {
            Kind::Fbank => "kaldi-fbank",
            Kind::Mfcc => "kaldi-mfcc",
        };
        let layout = FrameLayout {
            recipe: recipe.into(),
            bins: plan.num_bins(),
            sample_rate: rate.round() as u32,
            frame_step_seconds: plan.window_shift() as f64 / rate,
            max_samples: None,
            padded_frames: None,
            params,
        };
        Kaldi {
            plan: Arc::new(plan),
            layout: RowLayout::Frames(layout),
            recipe,
            per_frame,
        }
    }
}

struct KaldiWorker {
    plan: Arc<KaldiPlan>,
    scratch: KaldiScratch,
    recipe: &'static str,
    per_frame: bool,
}

impl FrameRecipe for Kaldi {
    fn layout(&self) -> &RowLayout {
        &self.layout
    }
    fn worker(&self) -> Box<dyn FrameWorker> {
        Box::new(KaldiWorker {
            scratch: self.plan.scratch(),
            plan: Arc::clone(&self.plan),
            recipe: self.recipe,
            per_frame: self.per_frame,
        })
    }
    fn plan(&self) -> RecipePlan {
        RecipePlan::Kaldi(Arc::clone(&self.plan))
    }
}

impl FrameWorker for KaldiWorker {
    fn compute(
        &mut self,
        samples: &[f32],
        seed: u64,
        row: &mut Vec<f32>,
    ) -> Result<(), FrameError> {
        if let Err(e) = self.plan.check_length(samples.len()) {
            return Err(FrameError::TooShort {
                recipe: self.recipe.into(),
                samples: e.samples,
                min_samples: e.min_samples,
            });
        }
        self.scratch.seed(seed);
        if self.per_frame {
            self.plan.compute_per_frame(samples, &mut self.scratch, row);
        } else {
            self.plan.compute(samples, &mut self.scratch, row);
        }
        Ok(())
    }
}

/// Whisper's log-mel over a shared plan, in float32 or (`f64`) the
/// extractor's float64.
struct Whisper {
    plan: Arc<WhisperPlan>,
    layout: RowLayout,
    f64: bool,
}

impl std::fmt::Debug for Whisper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Whisper")
            .field("layout", &self.layout)
            .finish_non_exhaustive()
    }
}

impl Whisper {
    fn new(plan: WhisperPlan, mut params: Vec<(String, Param)>, f64: bool) -> Whisper {
        let i = |k: &str, v: usize| (k.to_string(), Param::Int(v as i64));
        params.extend([
            i("features.n_fft", whisper::N_FFT),
            i("features.hop_length", whisper::HOP_LENGTH),
        ]);
        let layout = FrameLayout {
            recipe: "whisper".into(),
            bins: plan.n_mels(),
            sample_rate: whisper::SAMPLE_RATE,
            frame_step_seconds: whisper::HOP_LENGTH as f64 / f64::from(whisper::SAMPLE_RATE),
            max_samples: Some(whisper::N_SAMPLES),
            padded_frames: Some(whisper::N_FRAMES),
            params,
        };
        Whisper {
            plan: Arc::new(plan),
            layout: RowLayout::Frames(layout),
            f64,
        }
    }
}

struct WhisperWorker {
    plan: Arc<WhisperPlan>,
    scratch: WhisperScratch,
    f64: bool,
}

impl FrameRecipe for Whisper {
    fn layout(&self) -> &RowLayout {
        &self.layout
    }
    fn worker(&self) -> Box<dyn FrameWorker> {
        Box::new(WhisperWorker {
            scratch: self.plan.scratch(),
            plan: Arc::clone(&self.plan),
            f64: self.f64,
        })
    }
    fn plan(&self) -> RecipePlan {
        RecipePlan::Whisper(Arc::clone(&self.plan))
    }
}

impl FrameWorker for WhisperWorker {
    fn compute(
        &mut self,
        samples: &[f32],
        _seed: u64,
        row: &mut Vec<f32>,
    ) -> Result<(), FrameError> {
        let r = if self.f64 {
            self.plan.compute_f64(samples, &mut self.scratch, row)
        } else {
            self.plan.compute(samples, &mut self.scratch, row)
        };
        row.push(r.pad_value);
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests;
