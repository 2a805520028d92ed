//! The synthetic corpus (`melforge synth`): deterministic, shaped like the reference
//! dataset, so demos, tests and benchmarks need no downloaded data.
//!
//! Layout: `<DIR>/{TRAINING,VALIDATION,TESTING}/<LABEL>/<LABEL>_<index>.wav`,
//! 10 s of 4096 Hz int16 mono per file (70/15/15 split by index). [`Encoding`]
//! changes the container (`--format flac`: FLAC through the `flacenc` encoder,
//! so FLAC benchmarks need no tool beside the binary) and the rate (`--rate`:
//! the same signals synthesised at another rate, e.g. 16 kHz inputs for
//! `resample = "soxr_hq"`). Every file is
//! a pure function of `(seed, index)`: the same arguments give byte-identical
//! files on any machine, whatever the thread count. The four labels have
//! clearly different spectra:
//!
//! * `LEAK`: band-limited hiss, a resonance between 300 and 900 Hz;
//! * `NO_LEAK`: quiet broadband background with sparse clicks;
//! * `PUMP`: a 40–60 Hz harmonic series up to ~1 kHz over light noise;
//! * `VALVE`: periodic bursts of a 1.4–1.8 kHz resonance.

use std::f64::consts::PI;
use std::path::{Path, PathBuf};

/// Label folder names, in id order (sorted, as a build assigns them).
pub const LABELS: [&str; 4] = ["LEAK", "NO_LEAK", "PUMP", "VALVE"];
pub const SAMPLE_RATE: u32 = 4096;
pub const CLIP_SAMPLES: usize = 40960;

/// File container of a synthetic corpus.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// 16-bit PCM WAV with the canonical 44-byte header.
    #[default]
    Wav,
    /// 16-bit FLAC (flacenc's default compression).
    Flac,
}

/// How the corpus is written: container and sample rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encoding {
    pub format: Format,
    /// Samples per second (≥ 1000); 10 s of them per clip.
    pub rate: u32,
}

impl Default for Encoding {
    fn default() -> Self {
        Encoding {
            format: Format::Wav,
            rate: SAMPLE_RATE,
        }
    }
}

impl Encoding {
    fn extension(self) -> &'static str {
        match self.format {
            Format::Wav => "wav",
            Format::Flac => "flac",
        }
    }

    /// The bytes of one file holding `samples`.
    fn encode(self, samples: &[i16]) -> std::io::Result<Vec<u8>> {
        match self.format {
            Format::Wav => Ok(encode_wav_pcm16(samples, self.rate)),
            Format::Flac => encode_flac_pcm16(samples, self.rate),
        }
    }
}

/// SplitMix64: tiny, fast, and fully specified, so corpora are reproducible.
/// `melforge synth --kind speech` (`app::synth_speech`) draws from it too.
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator whose state is `state` as given (no step taken).
    pub(crate) fn from_state(state: u64) -> Rng {
        Rng(state)
    }
    fn new(seed: u64, index: u64) -> Rng {
        let mut r = Rng(seed ^ index.wrapping_mul(0xA076_1D64_78BD_642F));
        r.next();
        r
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [-1, 1).
    pub(crate) fn noise(&mut self) -> f64 {
        self.unit() * 2.0 - 1.0
    }
    pub(crate) fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
}

/// Two-pole resonator at `freq` Hz with pole radius `r`.
struct Resonator {
    a1: f64,
    a2: f64,
    y1: f64,
    y2: f64,
}

impl Resonator {
    fn new(freq: f64, r: f64, rate: u32) -> Resonator {
        let w = 2.0 * PI * freq / f64::from(rate);
        Resonator {
            a1: 2.0 * r * w.cos(),
            a2: -r * r,
            y1: 0.0,
            y2: 0.0,
        }
    }
    fn step(&mut self, x: f64) -> f64 {
        let y = x + self.a1 * self.y1 + self.a2 * self.y2;
        self.y2 = self.y1;
        self.y1 = y;
        y
    }
}

/// Normalises to a peak of `peak` (full scale = 1) and quantises to int16.
fn to_pcm16(x: &[f64], peak: f64) -> Vec<i16> {
    let max = x.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-12);
    x.iter()
        .map(|v| (v / max * peak * 32767.0).round().clamp(-32768.0, 32767.0) as i16)
        .collect()
}

/// The samples of file `index` with label `label` (index into [`LABELS`]).
pub fn clip(seed: u64, index: u64, label: usize) -> Vec<i16> {
    clip_at(seed, index, label, SAMPLE_RATE)
}

/// [`clip`] synthesised at `rate` Hz: 10 s, the same kinds of signal (at
/// 4096 Hz exactly [`clip`]).
pub fn clip_at(seed: u64, index: u64, label: usize, rate: u32) -> Vec<i16> {
    let mut rng = Rng::new(seed, index);
    let n = CLIP_SAMPLES * rate as usize / SAMPLE_RATE as usize;
    let sr = f64::from(rate);
    // NO_LEAK's clicks come every 1000 samples at 4096 Hz (0.24 s).
    let click_every = (1000 * rate as usize / SAMPLE_RATE as usize).max(1);
    let mut x = vec![0f64; n];
    let peak = rng.range(0.2, 0.9);
    match label {
        0 => {
            let mut res = Resonator::new(rng.range(300.0, 900.0), 0.97, rate);
            for v in &mut x {
                *v = res.step(rng.noise());
            }
        }
        1 => {
            for (i, v) in x.iter_mut().enumerate() {
                *v = 0.05 * rng.noise();
                if i % click_every == 0 && rng.unit() < 0.3 {
                    *v += 1.0;
                }
            }
            return to_pcm16(&x, peak * 0.3);
        }
        2 => {
            let f0 = rng.range(40.0, 60.0);
            let harmonics = (1000.0 / f0) as usize;
            let phases: Vec<f64> = (0..harmonics).map(|_| rng.range(0.0, 2.0 * PI)).collect();
            for (h, ph) in phases.iter().enumerate() {
                let w = 2.0 * PI * f0 * (h + 1) as f64 / sr;
                let amp = 1.0 / (h + 1) as f64;
                // Rotating phasor instead of a sin() per sample.
                let (rot_s, rot_c) = w.sin_cos();
                let (mut s, mut c) = ph.sin_cos();
                for v in x.iter_mut() {
                    *v += amp * s;
                    (s, c) = (s * rot_c + c * rot_s, c * rot_c - s * rot_s);
                }
            }
            for v in &mut x {
                *v += 0.02 * rng.noise();
            }
        }
        _ => {
            let mut res = Resonator::new(rng.range(1400.0, 1800.0), 0.98, rate);
            let period = (rng.range(0.3, 0.8) * sr) as usize;
            let burst = period / 4;
            for (i, v) in x.iter_mut().enumerate() {
                let drive = if i % period < burst { rng.noise() } else { 0.0 };
                *v = res.step(drive) + 0.01 * rng.noise();
            }
        }
    }
    to_pcm16(&x, peak)
}

/// A canonical 44-byte-header PCM WAV file holding `samples` (int16 mono).
pub fn encode_wav_pcm16(samples: &[i16], sample_rate: u32) -> Vec<u8> {
    let data_len = (samples.len() * 2) as u32;
    let mut b = Vec::with_capacity(44 + data_len as usize);
    b.extend_from_slice(b"RIFF");
    b.extend_from_slice(&(36 + data_len).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    b.extend_from_slice(&16u32.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes()); // PCM
    b.extend_from_slice(&1u16.to_le_bytes()); // mono
    b.extend_from_slice(&sample_rate.to_le_bytes());
    b.extend_from_slice(&(sample_rate * 2).to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&16u16.to_le_bytes());
    b.extend_from_slice(b"data");
    b.extend_from_slice(&data_len.to_le_bytes());
    for s in samples {
        b.extend_from_slice(&s.to_le_bytes());
    }
    b
}

/// A 16-bit mono FLAC stream holding `samples` (flacenc, default settings).
pub fn encode_flac_pcm16(samples: &[i16], sample_rate: u32) -> std::io::Result<Vec<u8>> {
    use flacenc::component::BitRepr as _;
    use flacenc::error::Verify as _;
    let config = flacenc::config::Encoder::default()
        .into_verified()
        .map_err(|(_, e)| std::io::Error::other(format!("FLAC encoder settings: {e:?}")))?;
    let wide: Vec<i32> = samples.iter().map(|&v| i32::from(v)).collect();
    let source = flacenc::source::MemSource::from_samples(&wide, 1, 16, sample_rate as usize);
    let stream = flacenc::encode_with_fixed_block_size(&config, source, config.block_size)
        .map_err(|e| std::io::Error::other(format!("FLAC encoding failed: {e:?}")))?;
    let mut sink = flacenc::bitsink::ByteSink::new();
    stream
        .write(&mut sink)
        .map_err(|e| std::io::Error::other(format!("FLAC encoding failed: {e:?}")))?;
    Ok(sink.into_inner())
}

/// Relative path and label of file `index` of the corpus.
pub fn file_name(index: u64) -> (String, usize) {
    let split = match index % 20 {
        0..14 => "TRAINING",
        14..17 => "VALIDATION",
        _ => "TESTING",
    };
    // Spread labels independently of the split pattern.
    let label = ((index / 20 + index) % LABELS.len() as u64) as usize;
    let name = LABELS[label];
    (format!("{split}/{name}/{name}_{index:06}.wav"), label)
}

/// Writes `files` clips under `dir` using every available core. Returns the
/// paths written.
pub fn generate(dir: &Path, files: u64, seed: u64) -> std::io::Result<Vec<PathBuf>> {
    generate_as(dir, files, seed, Encoding::default())
}

/// [`generate`] in another container or at another rate; file names end in
/// the container's extension.
pub fn generate_as(
    dir: &Path,
    files: u64,
    seed: u64,
    enc: Encoding,
) -> std::io::Result<Vec<PathBuf>> {
    if enc.rate < 1000 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a rate of {} Hz is too low; expected ≥ 1000", enc.rate),
        ));
    }
    for split in ["TRAINING", "VALIDATION", "TESTING"] {
        for label in LABELS {
            std::fs::create_dir_all(dir.join(split).join(label))?;
        }
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> std::io::Result<Vec<PathBuf>> {
                    let mut written = Vec::new();
                    for index in (t..files).step_by(threads as usize) {
                        let (rel, label) = file_name(index);
                        let path = dir.join(rel).with_extension(enc.extension());
                        let bytes = enc.encode(&clip_at(seed, index, label, enc.rate))?;
                        std::fs::write(&path, bytes)?;
                        written.push(path);
                    }
                    Ok(written)
                })
            })
            .collect();
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.join().expect("synth thread panicked")?);
        }
        all.sort();
        Ok(all)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: a fixed-blocksize stream whose STREAMINFO minimum block
    /// size counts its short last block (flacenc writes min 2176, max 4096
    /// for 80,000 samples; libFLAC's `flac -t` passes it) was rejected by
    /// `decode::flac` as "truncated FLAC stream: the file ends inside a
    /// metadata block or frame".
    #[test]
    fn flac_whose_minimum_block_counts_the_short_last_one_decodes() {
        use crate::decode::flac;
        use crate::decode::policy::Channels;
        let samples: Vec<i16> = (0..80_000)
            .map(|i| ((i * 37) % 20_000 - 10_000) as i16)
            .collect();
        let f = encode_flac_pcm16(&samples, 8000).unwrap();
        let (min, max) = (
            u16::from_be_bytes([f[8], f[9]]),
            u16::from_be_bytes([f[10], f[11]]),
        );
        assert!(min < max, "the fixture must have min {min} < max {max}");
        let mut got = Vec::new();
        let info = flac::decode(&f, Channels::Mean, usize::MAX, &mut got).unwrap();
        assert_eq!(info.total_samples, 80_000);
        let want: Vec<f32> = samples.iter().map(|&v| f32::from(v) / 32768.0).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn clips_are_deterministic_and_distinct() {
        assert_eq!(clip(1, 5, 2), clip(1, 5, 2));
        assert_ne!(clip(1, 5, 2), clip(2, 5, 2));
        assert_ne!(clip(1, 5, 2), clip(1, 6, 2));
        for label in 0..4 {
            let c = clip(7, 3, label);
            assert_eq!(c.len(), CLIP_SAMPLES);
            assert!(
                c.iter().any(|&v| v.unsigned_abs() > 1000),
                "label {label} is silent"
            );
        }
    }

    #[test]
    fn other_rates_keep_ten_seconds_and_4096_hz_is_the_default_clip() {
        assert_eq!(clip_at(3, 9, 1, SAMPLE_RATE), clip(3, 9, 1));
        let c = clip_at(3, 9, 0, 16_000);
        assert_eq!(c.len(), 160_000);
        assert!(c.iter().any(|&v| v.unsigned_abs() > 1000));
    }

    /// The FLAC files decode (with the decoder a build uses) to exactly the
    /// samples synthesised.
    #[test]
    fn flac_corpus_decodes_to_the_synthesised_samples() {
        let dir = tempfile::tempdir().unwrap();
        let enc = Encoding {
            format: Format::Flac,
            rate: 8000,
        };
        let paths = generate_as(dir.path(), 3, 5, enc).unwrap();
        assert!(paths.iter().all(|p| p.extension().unwrap() == "flac"));
        for index in 0..3u64 {
            let (rel, label) = file_name(index);
            let path = dir.path().join(rel).with_extension("flac");
            assert!(paths.contains(&path), "{}", path.display());
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(&bytes[..4], b"fLaC");
            let want: Vec<f32> = clip_at(5, index, label, 8000)
                .iter()
                .map(|&v| f32::from(v) / 32768.0)
                .collect();
            let mut got = Vec::new();
            let info = crate::decode::flac::decode(
                &bytes,
                crate::decode::clip::Channels::Mean,
                usize::MAX,
                &mut got,
            )
            .unwrap_or_else(|e| panic!("file {index}: {e}"));
            assert_eq!(info.sample_rate, 8000);
            assert_eq!(got, want, "file {index}");
        }
        assert!(generate_as(dir.path(), 1, 1, Encoding { rate: 10, ..enc }).is_err());
    }

    #[test]
    fn wav_header_is_canonical() {
        let b = encode_wav_pcm16(&[1, -2, 3], 4096);
        assert_eq!(b.len(), 44 + 6);
        assert_eq!(&b[0..4], b"RIFF");
        assert_eq!(u32::from_le_bytes(b[4..8].try_into().unwrap()), 36 + 6);
        assert_eq!(&b[36..40], b"data");
        assert_eq!(&b[44..46], &1i16.to_le_bytes());
    }

    #[test]
    fn splits_follow_the_70_15_15_pattern() {
        let names: Vec<_> = (0..20).map(|i| file_name(i).0).collect();
        let count = |s: &str| names.iter().filter(|n| n.starts_with(s)).count();
        assert_eq!(
            (count("TRAINING/"), count("VALIDATION/"), count("TESTING/")),
            (14, 3, 3)
        );
    }
}
