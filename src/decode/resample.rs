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

use soxr::Soxr;
use soxr::format::Mono;
use soxr::params::{QualityRecipe, QualitySpec, RuntimeSpec};

/// libsoxr refused a conversion (its message).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("libsoxr cannot resample {from} Hz to {to} Hz: {why}")]
pub struct Error {
    pub from: u32,
    pub to: u32,
    pub why: String,
}

/// Output frames produced per `soxr_process` call.
const CHUNK: usize = 16384;

/// Cached libsoxr instances converting to one target rate.
pub struct Resampler {
    target: u32,
    /// (input rate, instance); a handful of rates at most in practice.
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
            cache: Vec::new(),
        }
    }

    /// The rate this converts to.
    pub fn target(&self) -> u32 {
        self.target
    }

    /// Converts `input` (at `from` Hz) into `out` (cleared first), exactly
    /// `output_len(input.len(), from, target)` samples long.
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
