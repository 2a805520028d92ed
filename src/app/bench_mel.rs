//! `melforge bench mel`: the compute stage alone, so users can size machines.
//!
//! Synthetic 16-bit clips are encoded as WAV in memory (no disk, no reader,
//! no writer), then `threads` threads each decode and transform their share
//! with the CPU backend's own code under the configured recipe: librosa
//! (`wav::decode` and `dsp::Plan::compute`, one `Scratch` per thread, as the
//! workers do) or a frame recipe (Kaldi fbank/MFCC, Whisper: the recipe's
//! `FrameWorker`, one per thread, on clips of [`FRAME_CLIP_SECONDS`] at the
//! recipe's rate). The report gives clips/s in all, clips/s per thread and µs
//! of CPU per clip, with decode and compute timed apart on the first thread.
//! What it does not measure: reads, ring hand-offs and HDF5 writes
//! (`melforge build` does all of them; `scripts/bench-e2e` compares it with
//! the numpy baseline).

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::Config;
use crate::dsp::Level;
use crate::frames::{FrameRecipe, Input, RecipePlan, RowLayout};
use crate::synth;

/// Seconds of audio per clip under a frame recipe (Whisper reads at most 30).
pub const FRAME_CLIP_SECONDS: usize = 10;

/// Arguments of `melforge bench mel`.
#[derive(Clone, Debug, clap::Args)]
pub struct MelArgs {
    /// Config file whose recipe is measured: `[features] recipe`, with
    /// `[mel]`/`[segmentation]` for librosa (default: the reference spec).
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// Clips each thread computes.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    pub clips: u64,
    /// Threads computing at once (default: the CPUs this process may use).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub threads: Option<u64>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What `bench mel` measured.
#[derive(Clone, Debug, Serialize)]
pub struct MelReport {
    /// The recipe measured (`[features] recipe`).
    pub recipe: String,
    pub threads: usize,
    pub clips: u64,
    pub wall_s: f64,
    /// Clips per second, all threads together.
    pub clips_per_s: f64,
    /// Clips per second per thread (per core when each has its own).
    pub clips_per_s_per_thread: f64,
    /// Wall µs one thread spends per clip (decode + mel).
    pub us_per_clip: f64,
    /// Of which decode (WAV → f32 clip), from thread 0.
    pub decode_us_per_clip: f64,
    /// Of which the recipe's transform, from thread 0.
    pub mel_us_per_clip: f64,
    /// Shape of one row: librosa's (n_long, n_short, n_mels, n_frames), a
    /// frame recipe's (frames, bins).
    pub row_shape: Vec<usize>,
    /// Which transform ran: `batched-avx512`, `batched-avx2`,
    /// `batched-portable` (frames per vector lane), or `per-frame` (realfft).
    pub fft: &'static str,
}

impl std::fmt::Display for MelReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{}: {} clips on {} thread(s) in {:.2} s: {:.0} clips/s ({:.0} clips/s per thread)",
            self.recipe,
            self.clips,
            self.threads,
            self.wall_s,
            self.clips_per_s,
            self.clips_per_s_per_thread
        )?;
        writeln!(
            f,
            "per clip and thread: {:.1} µs ({:.1} µs decode, {:.1} µs compute); row shape {:?}; FFT {}",
            self.us_per_clip,
            self.decode_us_per_clip,
            self.mel_us_per_clip,
            self.row_shape,
            self.fft
        )
    }
}

/// Runs the benchmark and returns its report.
pub fn run(args: &MelArgs) -> anyhow::Result<MelReport> {
    let cfg = match &args.config {
        Some(f) => Config::load(f)?,
        None => Config::default(),
    };
    let threads = args.threads.map_or_else(
        || std::thread::available_parallelism().map_or(1, usize::from),
        |t| t as usize,
    );
    let recipe = crate::recipes::build(&cfg)?;
    Ok(measure(recipe.as_ref(), threads, args.clips))
}

/// `clips` rows of `recipe` on `threads` threads: librosa's clips of the
/// spec's length; the other recipes' clips of [`FRAME_CLIP_SECONDS`] (or
/// the recipe's cap) at its rate.
fn measure(recipe: &dyn FrameRecipe, threads: usize, clips: u64) -> MelReport {
    let layout = recipe.layout();
    let rate = layout.sample_rate();
    let samples = match layout.input() {
        Input::Clip(n) => n,
        Input::Natural { max } => {
            let samples = FRAME_CLIP_SECONDS * rate as usize;
            max.map_or(samples, |m| m.min(samples))
        }
    };
    let wavs = Clips::new(samples, rate);
    let (wall, per_thread) = time_threads(threads, clips, &wavs, || {
        let mut worker = recipe.worker();
        let mut row = Vec::new();
        move |clip: &[f32], seed: u64| {
            worker
                .compute(clip, seed, &mut row)
                .expect("a clip of seconds gives frames");
            std::hint::black_box(&row);
        }
    });
    let row_shape = match layout {
        RowLayout::Fixed(spec) => spec.row_shape().to_vec(),
        RowLayout::Frames(l) => {
            // The row of the first clip, for its frames.
            let mut row = Vec::new();
            let mut clip = vec![0f32; samples];
            wavs.decode(0, &mut clip);
            recipe
                .worker()
                .compute(&clip, 0, &mut row)
                .expect("a clip of seconds gives frames");
            vec![l.frames_of(row.len()).unwrap_or(0), l.bins]
        }
    };
    let level = match recipe.plan() {
        RecipePlan::Librosa(p) => p.batch_level(),
        RecipePlan::Kaldi(p) => p.batched(),
        RecipePlan::Whisper(p) => Some(p.level()),
        RecipePlan::CpuOnly => None,
    };
    report(
        layout.recipe().to_string(),
        (threads, clips),
        (wall, per_thread[0]),
        row_shape,
        level,
    )
}

/// Sixteen distinct 16-bit clips of `samples` at `rate`, as WAV bytes,
/// reused round-robin.
struct Clips {
    wavs: Vec<Vec<u8>>,
    rate: u32,
    samples: usize,
}

impl Clips {
    fn new(samples: usize, rate: u32) -> Clips {
        let wavs = (0..16)
            .map(|i| {
                let mut pcm = Vec::with_capacity(samples);
                while pcm.len() < samples {
                    pcm.extend(synth::clip(7, i, i as usize % 4));
                }
                pcm.truncate(samples);
                synth::encode_wav_pcm16(&pcm, rate)
            })
            .collect();
        Clips {
            wavs,
            rate,
            samples,
        }
    }

    /// Clip `i` (round-robin) decoded into `out` (`samples` long).
    fn decode(&self, i: usize, out: &mut [f32]) {
        crate::decode::wav::decode(&self.wavs[i % self.wavs.len()], self.rate, out)
            .expect("a synthetic clip decodes");
    }
}

/// Runs `clips` clips on each of `threads` threads, each with its own
/// `compute` from `worker`; the wall time and, per thread, (decode time,
/// compute time).
fn time_threads<W, F>(
    threads: usize,
    clips: u64,
    wavs: &Clips,
    worker: F,
) -> (Duration, Vec<(Duration, Duration)>)
where
    W: FnMut(&[f32], u64),
    F: Fn() -> W + Sync,
{
    assert!(threads >= 1);
    let started = Instant::now();
    let per_thread: Vec<(Duration, Duration)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let worker = &worker;
                s.spawn(move || compute_share(worker(), wavs, clips))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a bench thread panicked"))
            .collect()
    });
    assert_eq!(per_thread.len(), threads);
    (started.elapsed(), per_thread)
}

/// Decodes and computes `clips` clips; (decode time, compute time).
fn compute_share(
    mut compute: impl FnMut(&[f32], u64),
    wavs: &Clips,
    clips: u64,
) -> (Duration, Duration) {
    let mut clip = vec![0f32; wavs.samples];
    let (mut decode, mut mel) = (Duration::ZERO, Duration::ZERO);
    for i in 0..clips as usize {
        let t = Instant::now();
        wavs.decode(i, &mut clip);
        let t1 = Instant::now();
        compute(&clip, i as u64);
        mel += t1.elapsed();
        decode += t1 - t;
    }
    (decode, mel)
}

/// The report of `clips` clips on each of `threads` threads in `wall`, with
/// thread 0's (decode, compute) times.
fn report(
    recipe: String,
    (threads, clips): (usize, u64),
    (wall, (decode, mel)): (Duration, (Duration, Duration)),
    row_shape: Vec<usize>,
    level: Option<Level>,
) -> MelReport {
    let wall_s = wall.as_secs_f64();
    let total = clips * threads as u64;
    let n = clips as f64;
    MelReport {
        recipe,
        threads,
        clips: total,
        wall_s,
        clips_per_s: total as f64 / wall_s,
        clips_per_s_per_thread: total as f64 / wall_s / threads as f64,
        us_per_clip: wall_s * 1e6 / n,
        decode_us_per_clip: decode.as_secs_f64() * 1e6 / n,
        mel_us_per_clip: mel.as_secs_f64() * 1e6 / n,
        row_shape,
        fft: match level {
            Some(Level::Avx512) => "batched-avx512",
            Some(Level::Avx2) => "batched-avx2",
            Some(Level::Portable) => "batched-portable",
            None => "per-frame",
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_clip_and_splits_the_time() {
        let r = run(&MelArgs {
            config: None,
            clips: 20,
            threads: Some(2),
            json: false,
        })
        .unwrap();
        assert_eq!((r.threads, r.clips), (2, 40));
        assert_eq!(r.recipe, "librosa");
        assert_eq!(r.row_shape, [79, 3, 32, 1]);
        assert!(r.clips_per_s > 0.0 && r.mel_us_per_clip > 0.0 && r.decode_us_per_clip > 0.0);
        // Decode and mel are parts of one clip's time on thread 0.
        assert!(r.decode_us_per_clip + r.mel_us_per_clip <= r.us_per_clip * 1.01);
        assert!(r.to_string().contains("clips/s per thread"));
        // The reference spec (n_fft 512) takes the batched path on every CPU.
        assert!(r.fft.starts_with("batched-"), "{}", r.fft);
    }

    /// `[features] recipe` is what runs: a Kaldi fbank config measures
    /// fbank rows of 10 s at 16 kHz (998 frames of 23 bins under
    /// torchaudio's defaults), Whisper rows of 80 bins.
    #[test]
    fn the_configured_frame_recipe_is_measured() {
        let dir = tempfile::tempdir().unwrap();
        let run_with = |text: &str| {
            let file = dir.path().join("c.toml");
            std::fs::write(&file, text).unwrap();
            run(&MelArgs {
                config: Some(file),
                clips: 6,
                threads: Some(2),
                json: false,
            })
            .unwrap()
        };
        let r = run_with("[features]\nrecipe = \"kaldi-fbank\"\n");
        assert_eq!((r.recipe.as_str(), r.clips), ("kaldi-fbank", 12));
        assert_eq!(r.row_shape, [998, 23]);
        assert!(r.mel_us_per_clip > 0.0 && r.decode_us_per_clip > 0.0);
        assert!(r.fft.starts_with("batched-"), "{}", r.fft);
        let r = run_with("[features]\nrecipe = \"whisper\"\n");
        assert_eq!(r.recipe, "whisper");
        assert_eq!(r.row_shape[1], 80);
        assert!(r.to_string().starts_with("whisper: 12 clips"), "{r}");
    }
}
