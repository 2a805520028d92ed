//! `melforge synth --kind speech`: a deterministic corpus of speech-like
//! utterances, for the variable-length recipes (Kaldi fbank/MFCC, Whisper)
//! without downloaded data.
//!
//! Layout: `<DIR>/{train,dev,test}/<speaker>/<speaker>_<index>.wav`
//! (80/10/10 by index; ten speakers `spk0`…`spk9`, the label), 16-bit mono
//! WAV at 16 kHz unless `--rate` says otherwise, each **2 to 20 s long**
//! (uniform). An utterance is words of 2–5 syllables with pauses between
//! them; a syllable is a voiced vowel (a glottal pulse train at the
//! speaker's pitch with intonation, through three formant resonators that
//! glide to the next vowel's) optionally after an unvoiced fricative (noise
//! through a 4–6 kHz resonance). Every file is a pure function of
//! `(seed, index)`, like `synth`'s machine sounds (SplitMix64, two-pole
//! resonators, no floating-point library calls whose results vary by
//! platform beyond `sin`/`cos`).

use std::f64::consts::PI;
use std::path::{Path, PathBuf};

use crate::synth::Rng;

/// Default rate of the speech corpus.
pub const SPEECH_RATE: u32 = 16_000;
/// Shortest and longest utterance, seconds.
pub const SECONDS: (f64, f64) = (2.0, 20.0);
const SPEAKERS: usize = 10;

/// The speech corpus's generator for file `index`: `synth`'s SplitMix64,
/// seeded apart from the machine sounds' (the salt) so the two never share
/// a stream.
fn rng(seed: u64, index: u64) -> Rng {
    Rng::from_state(seed ^ index.wrapping_mul(0xA076_1D64_78BD_642F) ^ 0x5EEC_4000)
}

/// Two-pole resonator, unity-ish gain, whose centre can move.
struct Formant {
    y1: f64,
    y2: f64,
}

impl Formant {
    fn step(&mut self, x: f64, freq: f64, bandwidth: f64, rate: f64) -> f64 {
        let r = (-PI * bandwidth / rate).exp();
        let w = 2.0 * PI * freq / rate;
        let y = (1.0 - r) * x + 2.0 * r * w.cos() * self.y1 - r * r * self.y2;
        self.y2 = self.y1;
        self.y1 = y;
        y
    }
}

/// Vowel formants (F1, F2, F3), Hz.
const VOWELS: [[f64; 3]; 6] = [
    [730.0, 1090.0, 2440.0],
    [270.0, 2290.0, 3010.0],
    [530.0, 1840.0, 2480.0],
    [570.0, 840.0, 2410.0],
    [300.0, 870.0, 2240.0],
    [660.0, 1720.0, 2410.0],
];

/// Relative path, label and duration (samples) of utterance `index`.
pub fn utterance_name(index: u64) -> (String, usize) {
    let split = match index % 10 {
        0..8 => "train",
        8 => "dev",
        _ => "test",
    };
    let speaker = ((index * 7 + index / 10) % SPEAKERS as u64) as usize;
    (
        format!("{split}/spk{speaker}/spk{speaker}_{index:06}.wav"),
        speaker,
    )
}

/// The int16 samples of utterance `index` by `speaker` at `rate` Hz.
pub fn utterance(seed: u64, index: u64, speaker: usize, rate: u32) -> Vec<i16> {
    let mut rng = rng(seed, index);
    let sr = f64::from(rate);
    let n = (rng.range(SECONDS.0, SECONDS.1) * sr) as usize;
    let base_f0 = 95.0 + 13.0 * speaker as f64;
    let mut x = vec![0f64; n];
    let mut formants = [
        Formant { y1: 0.0, y2: 0.0 },
        Formant { y1: 0.0, y2: 0.0 },
        Formant { y1: 0.0, y2: 0.0 },
    ];
    let mut fric = Formant { y1: 0.0, y2: 0.0 };
    let (mut phase, mut i) = (0.0f64, (rng.range(0.05, 0.3) * sr) as usize);
    let mut vowel = VOWELS[0];
    while i < n {
        let syllables = 2 + (rng.next() % 4) as usize;
        for s in 0..syllables {
            if rng.unit() < 0.4 {
                let len = (rng.range(0.05, 0.12) * sr) as usize;
                let centre = rng.range(4000.0, 6000.0).min(0.45 * sr);
                for v in x.iter_mut().skip(i).take(len) {
                    *v += 0.25 * fric.step(rng.noise(), centre, 900.0, sr);
                }
                i += len;
            }
            let next = VOWELS[(rng.next() % VOWELS.len() as u64) as usize];
            let len = (rng.range(0.12, 0.3) * sr) as usize;
            let rise = 1.0 + 0.15 * (1.0 - s as f64 / syllables as f64);
            for k in 0..len.min(n.saturating_sub(i)) {
                let t = k as f64 / len as f64;
                let f0 = base_f0 * rise * (1.0 + 0.01 * rng.noise());
                phase += f0 / sr;
                // A glottal pulse once per period, shaped by the envelope.
                let pulse = if phase >= 1.0 {
                    phase -= 1.0;
                    1.0
                } else {
                    0.0
                };
                let env = (PI * t).sin();
                let mut y = 0.0;
                for (j, f) in formants.iter_mut().enumerate() {
                    let freq = (vowel[j] + (next[j] - vowel[j]) * t).min(0.45 * sr);
                    y += f.step(pulse * 40.0, freq, 80.0 + 40.0 * j as f64, sr) / (j + 1) as f64;
                }
                x[i + k] += env * y + 0.002 * rng.noise();
            }
            vowel = next;
            i += len;
        }
        // A pause between words.
        let gap = (rng.range(0.08, 0.4) * sr) as usize;
        for v in x.iter_mut().skip(i).take(gap) {
            *v += 0.002 * rng.noise();
        }
        i += gap;
    }
    let peak = x.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-12);
    let gain = rng.range(0.3, 0.9) / peak;
    x.iter()
        .map(|v| (v * gain * 32767.0).round().clamp(-32768.0, 32767.0) as i16)
        .collect()
}

/// Writes `files` utterances under `dir` using every core; returns their paths.
pub fn generate(dir: &Path, files: u64, seed: u64, rate: u32) -> std::io::Result<Vec<PathBuf>> {
    if rate < 8000 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a rate of {rate} Hz is too low for speech; expected ≥ 8000"),
        ));
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> std::io::Result<Vec<PathBuf>> {
                    let mut written = Vec::new();
                    for index in (t..files).step_by(threads as usize) {
                        let (rel, speaker) = utterance_name(index);
                        let path = dir.join(rel);
                        if let Some(parent) = path.parent() {
                            std::fs::create_dir_all(parent)?;
                        }
                        let samples = utterance(seed, index, speaker, rate);
                        std::fs::write(&path, crate::synth::encode_wav_pcm16(&samples, rate))?;
                        written.push(path);
                    }
                    Ok(written)
                })
            })
            .collect();
        let mut all = Vec::new();
        for h in handles {
            match h.join() {
                Ok(r) => all.extend(r?),
                Err(_) => return Err(std::io::Error::other("a synth thread panicked")),
            }
        }
        all.sort();
        Ok(all)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utterances_are_deterministic_2_to_20_s_and_not_silent() {
        let a = utterance(1, 7, 3, SPEECH_RATE);
        assert_eq!(a, utterance(1, 7, 3, SPEECH_RATE));
        assert_ne!(a, utterance(1, 8, 3, SPEECH_RATE));
        let mut lens = Vec::new();
        for i in 0..40 {
            let (_, spk) = utterance_name(i);
            let u = utterance(5, i, spk, SPEECH_RATE);
            let secs = u.len() as f64 / f64::from(SPEECH_RATE);
            assert!((SECONDS.0..SECONDS.1).contains(&secs), "{secs}");
            assert!(u.iter().any(|v| v.unsigned_abs() > 5000));
            lens.push(u.len());
        }
        let (lo, hi) = (lens.iter().min().unwrap(), lens.iter().max().unwrap());
        assert!(*hi > 3 * *lo, "durations vary: {lo}..{hi}");
    }
}
