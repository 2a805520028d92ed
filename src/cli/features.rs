//! `melforge features FILE --out X.npy`: what melforge computes for one file
//! under a config's recipe, as a NumPy array: decode (and resample, per
//! `[input]`) at the file's natural length, then the recipe's CPU DSP.
//!
//! Shapes are the references': kaldi-fbank/-mfcc `(num_frames, num_bins)`
//! (torchaudio's), whisper `(n_mels, 3000)` (the extractor's, padded with the
//! row's pad value) or with `--stored` the `(covering frames, n_mels)` a
//! dataset stores, librosa the row's `(n_long, n_short, n_frames, n_mels)`.
//! `--repeat N` times the DSP alone (N runs on one thread) and reports µs per
//! file on stderr. scripts/parity_recipes.py compares these arrays with the
//! reference extractors.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use npyz::WriterBuilder;

use crate::config::{Config, Recipe};
use crate::decode::clip::ClipDecoder;
use crate::decode::{flac, resample, wav};
use crate::dsp::kaldi::{KaldiPlan, Kind};
use crate::dsp::whisper::{self, WhisperPlan};
use crate::dsp::{Plan, Scratch};

/// The `features` subcommand's arguments.
#[derive(clap::Args)]
pub struct FeaturesArgs {
    /// The audio file (WAV or FLAC).
    pub file: PathBuf,
    /// TOML config whose [features] (and [input]) apply; default: librosa.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Where to write the float32 .npy array.
    #[arg(long)]
    pub out: PathBuf,
    /// whisper: write the stored frames (frames, n_mels), not (n_mels, 3000).
    #[arg(long)]
    pub stored: bool,
    /// Also time the DSP: N runs, µs per file on stderr.
    #[arg(long, default_value_t = 0)]
    pub repeat: u32,
}

/// An array and its shape, row-major.
struct Array {
    shape: Vec<u64>,
    data: Vec<f32>,
}

/// Runs the command; the summary line goes to stderr.
pub fn run(args: &FeaturesArgs) -> anyhow::Result<()> {
    let cfg = match &args.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    let bytes = std::fs::read(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let rate = cfg.features.sample_rate().unwrap_or(cfg.spec.sample_rate);
    let samples = match cfg.features.recipe {
        Recipe::Librosa => decode(&cfg, &bytes, rate, Some(cfg.spec.clip_samples())),
        _ => decode(&cfg, &bytes, rate, None),
    }
    .with_context(|| args.file.display().to_string())?;
    let (array, summary) = compute(&cfg, &samples, args)?;
    write_npy(&args.out, &array)?;
    eprintln!(
        "{}: {} {:?}{summary}",
        args.file.display(),
        cfg.features.recipe.name(),
        array.shape
    );
    Ok(())
}

/// The file's samples at `rate` (mono per `[input]`), at its natural length
/// (librosa.load's ceil(n · rate / orig) when resampled) or `clip` samples.
fn decode(cfg: &Config, bytes: &[u8], rate: u32, clip: Option<usize>) -> anyhow::Result<Vec<f32>> {
    let (frames, from) = if bytes.starts_with(flac::MAGIC) {
        let info = flac::stream_info(bytes)?;
        if info.total_samples == 0 {
            bail!("FLAC stream without a total sample count");
        }
        (info.total_samples as usize, info.sample_rate)
    } else {
        let info = wav::parse(bytes)?;
        (info.frames, info.sample_rate)
    };
    let natural = if from == rate {
        frames
    } else {
        resample::output_len(frames, from, rate)
    };
    let mut out = vec![0.0; clip.unwrap_or(natural)];
    ClipDecoder::new(rate, cfg.input.policy).decode(bytes, &mut out)?;
    Ok(out)
}

/// The recipe's features of `samples` and a summary suffix for stderr.
fn compute(cfg: &Config, samples: &[f32], args: &FeaturesArgs) -> anyhow::Result<(Array, String)> {
    let mut data = Vec::new();
    Ok(match &cfg.features.recipe {
        Recipe::KaldiFbank(o) | Recipe::KaldiMfcc(o) => {
            let kind = if matches!(cfg.features.recipe, Recipe::KaldiFbank(_)) {
                Kind::Fbank
            } else {
                Kind::Mfcc
            };
            let plan = KaldiPlan::new(o, kind)?;
            let mut scratch = plan.scratch();
            let frames = plan.compute(samples, &mut scratch, &mut data);
            let timing = time(args.repeat, || {
                plan.compute(samples, &mut scratch, &mut data);
            });
            let shape = vec![frames as u64, plan.num_bins() as u64];
            (Array { shape, data }, timing)
        }
        Recipe::Whisper { n_mels } => {
            let plan = WhisperPlan::new(*n_mels)?;
            let mut scratch = plan.scratch();
            let row = plan.compute(samples, &mut scratch, &mut data);
            let timing = time(args.repeat, || {
                plan.compute(samples, &mut scratch, &mut data);
            });
            let summary = format!(
                ", {} frames stored, pad value {}{timing}",
                row.frames, row.pad_value
            );
            let array = if args.stored {
                Array {
                    shape: vec![row.frames as u64, *n_mels as u64],
                    data,
                }
            } else {
                let mut padded = vec![row.pad_value; n_mels * whisper::N_FRAMES];
                for (t, frame) in data.chunks_exact(*n_mels).enumerate() {
                    for (m, &v) in frame.iter().enumerate() {
                        padded[m * whisper::N_FRAMES + t] = v;
                    }
                }
                Array {
                    shape: vec![*n_mels as u64, whisper::N_FRAMES as u64],
                    data: padded,
                }
            };
            (array, summary)
        }
        Recipe::Librosa => {
            let plan = Plan::new(&cfg.spec);
            let mut scratch = Scratch::new(&plan);
            data.resize(cfg.spec.row_len(), 0.0);
            plan.compute(samples, &mut scratch, &mut data);
            let timing = time(args.repeat, || {
                plan.compute(samples, &mut scratch, &mut data)
            });
            let shape = cfg.spec.row_shape().iter().map(|&d| d as u64).collect();
            (Array { shape, data }, timing)
        }
    })
}

/// Runs `f` `repeat` times; ", N µs per file (R runs)" or "".
fn time(repeat: u32, mut f: impl FnMut()) -> String {
    if repeat == 0 {
        return String::new();
    }
    let start = Instant::now();
    for _ in 0..repeat {
        f();
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / f64::from(repeat);
    format!(", {us:.1} µs per file ({repeat} runs)")
}

fn write_npy(path: &Path, a: &Array) -> anyhow::Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut w = npyz::WriteOptions::<f32>::new()
        .default_dtype()
        .shape(&a.shape)
        .writer(std::io::BufWriter::new(file))
        .begin_nd()
        .with_context(|| format!("cannot write {}", path.display()))?;
    w.extend(a.data.iter().copied())
        .with_context(|| format!("cannot write {}", path.display()))?;
    w.finish()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
