//! `melforge bench mel`: the compute stage alone, so users can size machines.
//!
//! Synthetic 16-bit clips of the configured spec are encoded as WAV in memory
//! (no disk, no reader, no writer), then `threads` threads each decode and
//! transform their share with the CPU backend's own code (`wav::decode` and
//! `dsp::Plan::compute`, one `Scratch` per thread, as the workers do). The
//! report gives clips/s in all, clips/s per thread and µs of CPU per clip,
//! with decode and mel timed apart on the first thread. What it does not
//! measure: reads, ring hand-offs and HDF5 writes (`melforge build` does all
//! of them; `scripts/bench-e2e` compares it with the numpy baseline).

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::Config;
use crate::dsp::{Level, Plan, Scratch};
use crate::synth;

/// Arguments of `melforge bench mel`.
#[derive(Clone, Debug, clap::Args)]
pub struct MelArgs {
    /// Config file whose [mel]/[segmentation] spec is measured (default: the
    /// reference spec).
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
    /// Of which the log-mel transform, from thread 0.
    pub mel_us_per_clip: f64,
    /// Shape of one row (n_long, n_short, n_mels, n_frames).
    pub row_shape: [usize; 4],
    /// Which transform ran: `batched-avx512`, `batched-avx2`,
    /// `batched-portable` (frames per vector lane), or `per-frame` (realfft).
    pub fft: &'static str,
}

impl std::fmt::Display for MelReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} clips on {} thread(s) in {:.2} s: {:.0} clips/s ({:.0} clips/s per thread)",
            self.clips, self.threads, self.wall_s, self.clips_per_s, self.clips_per_s_per_thread
        )?;
        writeln!(
            f,
            "per clip and thread: {:.1} µs ({:.1} µs decode, {:.1} µs mel); row shape {:?}; FFT {}",
            self.us_per_clip,
            self.decode_us_per_clip,
            self.mel_us_per_clip,
            self.row_shape,
            self.fft
        )
    }
}

/// Runs the benchmark and returns its report.
pub fn run(args: &MelArgs) -> Result<MelReport, crate::config::Error> {
    let cfg = match &args.config {
        Some(f) => Config::load(f)?,
        None => Config::default(),
    };
    let spec = cfg.spec;
    let threads = args.threads.map_or_else(
        || std::thread::available_parallelism().map_or(1, usize::from),
        |t| t as usize,
    );
    // A few distinct clips, long enough for the spec, reused round-robin.
    let clip_len = spec.clip_samples();
    let wavs: Vec<Vec<u8>> = (0..16)
        .map(|i| {
            let mut pcm = Vec::with_capacity(clip_len);
            while pcm.len() < clip_len {
                pcm.extend(synth::clip(7, i, i as usize % 4));
            }
            pcm.truncate(clip_len);
            synth::encode_wav_pcm16(&pcm, spec.sample_rate)
        })
        .collect();
    let plan = Plan::new(&spec);
    let started = Instant::now();
    let per_thread: Vec<(Duration, Duration)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (plan, wavs) = (&plan, &wavs);
                s.spawn(move || compute_share(plan, wavs, args.clips, spec.sample_rate))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a bench thread panicked"))
            .collect()
    });
    let wall_s = started.elapsed().as_secs_f64();
    let total = args.clips * threads as u64;
    let (decode, mel) = per_thread[0];
    let n = args.clips as f64;
    Ok(MelReport {
        threads,
        clips: total,
        wall_s,
        clips_per_s: total as f64 / wall_s,
        clips_per_s_per_thread: total as f64 / wall_s / threads as f64,
        us_per_clip: wall_s * 1e6 / n,
        decode_us_per_clip: decode.as_secs_f64() * 1e6 / n,
        mel_us_per_clip: mel.as_secs_f64() * 1e6 / n,
        row_shape: spec.row_shape(),
        fft: match plan.batch_level() {
            Some(Level::Avx512) => "batched-avx512",
            Some(Level::Avx2) => "batched-avx2",
            Some(Level::Portable) => "batched-portable",
            None => "per-frame",
        },
    })
}

/// Decodes and transforms `clips` clips; (decode time, mel time).
fn compute_share(plan: &Plan, wavs: &[Vec<u8>], clips: u64, rate: u32) -> (Duration, Duration) {
    let spec = plan.spec();
    let mut scratch = Scratch::new(plan);
    let mut clip = vec![0f32; spec.clip_samples()];
    let mut out = vec![0f32; spec.row_len()];
    let (mut decode, mut mel) = (Duration::ZERO, Duration::ZERO);
    for i in 0..clips as usize {
        let t = Instant::now();
        crate::decode::wav::decode(&wavs[i % wavs.len()], rate, &mut clip)
            .expect("a synthetic clip decodes");
        let t1 = Instant::now();
        plan.compute(&clip, &mut scratch, &mut out);
        mel += t1.elapsed();
        decode += t1 - t;
        std::hint::black_box(&out);
    }
    (decode, mel)
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
        assert_eq!(r.row_shape, [79, 3, 32, 1]);
        assert!(r.clips_per_s > 0.0 && r.mel_us_per_clip > 0.0 && r.decode_us_per_clip > 0.0);
        // Decode and mel are parts of one clip's time on thread 0.
        assert!(r.decode_us_per_clip + r.mel_us_per_clip <= r.us_per_clip * 1.01);
        assert!(r.to_string().contains("clips/s per thread"));
        // The reference spec (n_fft 512) takes the batched path on every CPU.
        assert!(r.fft.starts_with("batched-"), "{}", r.fft);
    }
}
