//! `melforge synth`: a deterministic synthetic corpus shaped like the reference
//! dataset, so demos, tests and benchmarks need no downloaded data.
//!
//! Layout: `<DIR>/{TRAINING,VALIDATION,TESTING}/<LABEL>/<LABEL>_<index>.wav`,
//! 10 s of 4096 Hz int16 mono per file (70/15/15 split by index). Every file is
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

/// SplitMix64: tiny, fast, and fully specified, so corpora are reproducible.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, index: u64) -> Rng {
        let mut r = Rng(seed ^ index.wrapping_mul(0xA076_1D64_78BD_642F));
        r.next();
        r
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [-1, 1).
    fn noise(&mut self) -> f64 {
        self.unit() * 2.0 - 1.0
    }
    fn range(&mut self, lo: f64, hi: f64) -> f64 {
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
    fn new(freq: f64, r: f64) -> Resonator {
        let w = 2.0 * PI * freq / f64::from(SAMPLE_RATE);
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
    let mut rng = Rng::new(seed, index);
    let n = CLIP_SAMPLES;
    let sr = f64::from(SAMPLE_RATE);
    let mut x = vec![0f64; n];
    let peak = rng.range(0.2, 0.9);
    match label {
        0 => {
            let mut res = Resonator::new(rng.range(300.0, 900.0), 0.97);
            for v in &mut x {
                *v = res.step(rng.noise());
            }
        }
        1 => {
            for (i, v) in x.iter_mut().enumerate() {
                *v = 0.05 * rng.noise();
                if i % 1000 == 0 && rng.unit() < 0.3 {
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
            let mut res = Resonator::new(rng.range(1400.0, 1800.0), 0.98);
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
                        let path = dir.join(rel);
                        let bytes = encode_wav_pcm16(&clip(seed, index, label), SAMPLE_RATE);
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
