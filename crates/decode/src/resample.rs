//! Sample-rate conversion as `librosa.resample(y, orig_sr, target_sr,
//! res_type="soxr_hq")` does it (librosa 0.11): libsoxr (the system library,
//! through the `soxr` crate) with the `SOXR_HQ` recipe (20-bit precision,
//! "small" roll-off, no flags), float32 in and out, one thread, the whole
//! signal pushed through then drained — python-soxr's `soxr.resample(y, orig,
//! target, quality="HQ")` — and the length then fixed to
//! `ceil(n · target / orig)` (librosa's `fix_length`: zero pad or trim).
//!
//! [`Resampler`] keeps one libsoxr instance per input rate it has seen (their
//! filter design is the expensive part) and clears it between signals, so a
//! worker converting a corpus at one rate designs the filter once.
//!
//! libsoxr is the crate's one system library, behind its `soxr` feature (on
//! by default). A build without it decodes every file at its own rate and
//! refuses a conversion with [`Error`], naming the feature.

#[cfg(feature = "soxr")]
use soxr::Soxr;
#[cfg(feature = "soxr")]
use soxr::format::Mono;
#[cfg(feature = "soxr")]
use soxr::params::{QualityRecipe, QualitySpec, RuntimeSpec};

/// libsoxr refused a conversion (its message).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("libsoxr cannot resample {from} Hz to {to} Hz: {why}")]
pub struct Error {
    pub from: u32,
    pub to: u32,
    pub why: String,
}

/// libsoxr instances kept per [`Resampler`] (one per input rate).
#[cfg(feature = "soxr")]
const MAX_CACHED: usize = 8;

/// Output frames produced per `soxr_process` call.
#[cfg(feature = "soxr")]
const CHUNK: usize = 16384;

/// Cached libsoxr instances converting to one target rate.
pub struct Resampler {
    target: u32,
    /// (input rate, instance), oldest first; at most [`MAX_CACHED`].
    #[cfg(feature = "soxr")]
    cache: Vec<(u32, Soxr<Mono<f32>>)>,
}

/// `ceil(n · to / from)`: librosa's output length.
pub fn output_len(n: usize, from: u32, to: u32) -> usize {
    (n as u128 * u128::from(to)).div_ceil(u128::from(from.max(1))) as usize
}

impl Resampler {
    pub fn new(target: u32) -> Resampler {
        Resampler {
            target,
            #[cfg(feature = "soxr")]
            cache: Vec::new(),
        }
    }

    /// The rate this converts to.
    pub fn target(&self) -> u32 {
        self.target
    }

    /// Without libsoxr (the `soxr` feature off) every conversion is refused.
    #[cfg(not(feature = "soxr"))]
    pub fn run(&mut self, _input: &[f32], from: u32, _out: &mut Vec<f32>) -> Result<(), Error> {
        Err(Error {
            from,
            to: self.target,
            why: "this build has no libsoxr (melforge-decode's `soxr` feature is off)".into(),
        })
    }

    /// Converts `input` (at `from` Hz) into `out` (cleared first), exactly
    /// `output_len(input.len(), from, target)` samples long.
    #[cfg(feature = "soxr")]
    pub fn run(&mut self, input: &[f32], from: u32, out: &mut Vec<f32>) -> Result<(), Error> {
        let to = self.target;
        let err = |why: soxr::Error| Error {
            from,
            to,
            why: why.to_string(),
        };
        let at = match self.cache.iter().position(|(r, _)| *r == from) {
            Some(i) => i,
            None => {
                if self.cache.len() == MAX_CACHED {
                    // A corpus of many rates: drop the oldest instance.
                    self.cache.remove(0);
                }
                let quality = QualitySpec::new(QualityRecipe::high());
                let s = Soxr::new_with_params(f64::from(from), f64::from(to), quality, {
                    RuntimeSpec::new(1)
                })
                .map_err(err)?;
                self.cache.push((from, s));
                self.cache.len() - 1
            }
        };
        let soxr = &mut self.cache[at].1;
        soxr.clear().map_err(err)?;
        let want = output_len(input.len(), from, to);
        out.clear();
        let mut consumed = 0;
        while consumed < input.len() {
            let start = out.len();
            out.resize(start + CHUNK, 0.0);
            let p = soxr
                .process(&input[consumed..], &mut out[start..])
                .map_err(err)?;
            consumed += p.input_frames;
            out.truncate(start + p.output_frames);
            if p.input_frames == 0 && p.output_frames == 0 {
                break;
            }
        }
        loop {
            let start = out.len();
            out.resize(start + CHUNK, 0.0);
            let n = soxr.drain(&mut out[start..]).map_err(err)?;
            out.truncate(start + n);
            if n == 0 {
                break;
            }
        }
        out.resize(want, 0.0);
        Ok(())
    }
}

#[cfg(all(test, feature = "soxr"))]
mod tests {
    use super::*;

    fn signal(n: usize) -> Vec<f32> {
        (0..n).map(|i| (i as f32 * 0.05).sin() * 0.5).collect()
    }

    #[test]
    fn a_reused_instance_gives_what_a_fresh_one_gives() {
        let x = signal(5000);
        let y = signal(3000);
        let mut warm = Resampler::new(4096);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        warm.run(&y, 22050, &mut a).unwrap();
        warm.run(&x, 22050, &mut a).unwrap();
        Resampler::new(4096).run(&x, 22050, &mut b).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), output_len(5000, 22050, 4096));
        // Many rates: the cache stays bounded and results stay right.
        for r in (0..12).map(|k| 8000 + 1000 * k) {
            warm.run(&y, r, &mut a).unwrap();
            assert_eq!(a.len(), output_len(3000, r, 4096));
        }
        assert_eq!(warm.cache.len(), MAX_CACHED);
        warm.run(&x, 22050, &mut a).unwrap();
        assert_eq!(a, b);
    }
}
