//! The `[features]` section: which recipe turns audio into features, and its
//! parameters, as raw keys → validated [`FeaturesConfig`].
//!
//! `recipe` = "librosa" (the default: `[mel]` + `[segmentation]`, fixed-length
//! clips, the same bytes as before this section existed) | "kaldi-fbank" |
//! "kaldi-mfcc" | "whisper" | "lhotse-fbank" (a preset: "kaldi-fbank" with
//! the defaults of lhotse's `FbankConfig`, [`KaldiOptions::lhotse_fbank`];
//! the file records "kaldi-fbank" and every value, so it reads as any Kaldi
//! fbank file). The Kaldi parameters are flat in `[features]`,
//! with exactly the keyword names and defaults of
//! `torchaudio.compliance.kaldi.fbank` / `.mfcc` (plus `sample_scale`); Whisper
//! takes `n_mels`. A key that the chosen recipe does not have is an error
//! naming it (a typo or a forgotten `recipe` must not silently change the
//! numbers), and so is a `[mel]`/`[segmentation]` value other than its default
//! under a non-librosa recipe (the example config writes every default out).

use serde::{Deserialize, Serialize};

use super::{Ctx, Error};
use crate::dsp::ParamValue;
use crate::dsp::kaldi::{KaldiOptions, KaldiWindow, Kind};
use crate::dsp::whisper;

/// `[features]` as written by users. Every key is optional; the Kaldi keys'
/// defaults are torchaudio's ([`KaldiOptions::default`]).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFeatures {
    /// "librosa" (default) | "kaldi-fbank" | "kaldi-mfcc" | "whisper" |
    /// "lhotse-fbank".
    pub recipe: Option<String>,
    /// whisper: 80 (default) or 128.
    pub n_mels: Option<usize>,
    /// kaldi: Hz (default 16000); inputs are resampled to it (`input.resample`).
    pub sample_frequency: Option<f64>,
    /// kaldi: frame length in ms (25).
    pub frame_length: Option<f64>,
    /// kaldi: frame shift in ms (10).
    pub frame_shift: Option<f64>,
    /// kaldi: Gaussian dither (0). Non-zero is seeded per file: deterministic,
    /// not comparable bit for bit with any reference.
    pub dither: Option<f64>,
    /// kaldi: 0.97.
    pub preemphasis_coefficient: Option<f64>,
    /// kaldi: true.
    pub remove_dc_offset: Option<bool>,
    /// kaldi: "povey" (default) | "hanning" | "hamming" | "rectangular" | "blackman".
    pub window_type: Option<String>,
    /// kaldi: 0.42.
    pub blackman_coeff: Option<f64>,
    /// kaldi: true.
    pub round_to_power_of_two: Option<bool>,
    /// kaldi: true.
    pub snip_edges: Option<bool>,
    /// kaldi: 23.
    pub num_mel_bins: Option<usize>,
    /// kaldi: Hz (20).
    pub low_freq: Option<f64>,
    /// kaldi: Hz; ≤ 0 is an offset from Nyquist (0).
    pub high_freq: Option<f64>,
    /// kaldi: false.
    pub use_energy: Option<bool>,
    /// kaldi: true.
    pub raw_energy: Option<bool>,
    /// kaldi: 1.0.
    pub energy_floor: Option<f64>,
    /// kaldi-fbank: true.
    pub use_log_fbank: Option<bool>,
    /// kaldi-fbank: true.
    pub use_power: Option<bool>,
    /// kaldi-mfcc: 13.
    pub num_ceps: Option<usize>,
    /// kaldi-mfcc: 22.0.
    pub cepstral_lifter: Option<f64>,
    /// kaldi: 1.0 = waveform in [-1, 1] (torchaudio, lhotse); 32768 = int16
    /// range (the Kaldi binaries, WeNet).
    pub sample_scale: Option<f64>,
}

/// The validated recipe.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "recipe", rename_all = "kebab-case")]
pub enum Recipe {
    /// `[mel]` + `[segmentation]` (`Config::spec`).
    Librosa,
    KaldiFbank(KaldiOptions),
    KaldiMfcc(KaldiOptions),
    Whisper {
        n_mels: usize,
    },
}

/// `[features]`, validated.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FeaturesConfig {
    #[serde(flatten)]
    pub recipe: Recipe,
}

impl Default for FeaturesConfig {
    fn default() -> Self {
        FeaturesConfig {
            recipe: Recipe::Librosa,
        }
    }
}

impl Recipe {
    /// The `recipe` key's value.
    pub fn name(&self) -> &'static str {
        match self {
            Recipe::Librosa => "librosa",
            Recipe::KaldiFbank(_) => "kaldi-fbank",
            Recipe::KaldiMfcc(_) => "kaldi-mfcc",
            Recipe::Whisper { .. } => "whisper",
        }
    }
}

impl FeaturesConfig {
    /// The rate (Hz) inputs are resampled to for this recipe; `None` for
    /// librosa, whose rate is `mel.sample_rate`.
    pub fn sample_rate(&self) -> Option<u32> {
        match &self.recipe {
            Recipe::Librosa => None,
            Recipe::KaldiFbank(o) | Recipe::KaldiMfcc(o) => Some(o.sample_frequency as u32),
            Recipe::Whisper { .. } => Some(whisper::SAMPLE_RATE),
        }
    }

    /// Every parameter of the recipe as (`features.<key>`, value), the recipe
    /// first: the root attributes that let a dataset's numbers be reproduced.
    /// librosa's parameters are the `[mel]` spec's, recorded as before.
    pub fn params(&self) -> Vec<(String, ParamValue)> {
        let named = |k: &str| format!("features.{k}");
        let mut p = vec![(named("recipe"), ParamValue::Text(self.recipe.name()))];
        match &self.recipe {
            Recipe::Librosa => {}
            Recipe::KaldiFbank(o) => p.extend(
                o.params(Kind::Fbank)
                    .into_iter()
                    .map(|(k, v)| (named(k), v)),
            ),
            Recipe::KaldiMfcc(o) => {
                p.extend(o.params(Kind::Mfcc).into_iter().map(|(k, v)| (named(k), v)))
            }
            Recipe::Whisper { n_mels } => {
                p.push((named("n_mels"), ParamValue::Int(*n_mels as i64)));
            }
        }
        p
    }

    /// Validates `[features]`; `spec_changed` says whether `[mel]` or
    /// `[segmentation]` changed the librosa definition from its defaults
    /// (rejected under another recipe, which would ignore it).
    pub(super) fn from_raw(r: &RawFeatures, spec_changed: bool, cx: &Ctx) -> Result<Self, Error> {
        let recipe = match r.recipe.as_deref().unwrap_or("librosa") {
            "librosa" => {
                only(r, &[], "librosa", cx)?;
                Recipe::Librosa
            }
            "kaldi-fbank" => {
                only(r, &FBANK_ONLY, "kaldi-fbank", cx)?;
                Recipe::KaldiFbank(kaldi(r, Kind::Fbank, KaldiOptions::default(), cx)?)
            }
            "lhotse-fbank" => {
                only(r, &FBANK_ONLY, "lhotse-fbank", cx)?;
                Recipe::KaldiFbank(kaldi(r, Kind::Fbank, KaldiOptions::lhotse_fbank(), cx)?)
            }
            "kaldi-mfcc" => {
                only(r, &MFCC_ONLY, "kaldi-mfcc", cx)?;
                Recipe::KaldiMfcc(kaldi(r, Kind::Mfcc, KaldiOptions::default(), cx)?)
            }
            "whisper" => {
                only(r, &["n_mels"], "whisper", cx)?;
                let n_mels = r.n_mels.unwrap_or(80);
                whisper::check_n_mels(n_mels)
                    .map_err(|e| cx.invalid("features.n_mels", e.to_string()))?;
                Recipe::Whisper { n_mels }
            }
            other => {
                return Err(cx.invalid(
                    "features.recipe",
                    format!(
                        "\"{other}\"; expected one of \"librosa\", \"kaldi-fbank\", \"kaldi-mfcc\", \"whisper\", \"lhotse-fbank\""
                    ),
                ));
            }
        };
        if spec_changed && recipe != Recipe::Librosa {
            return Err(cx.invalid(
                "features.recipe",
                format!(
                    "\"{}\" does not read [mel] or [segmentation] (the librosa recipe's), which change its defaults here; remove those keys",
                    recipe.name()
                ),
            ));
        }
        Ok(FeaturesConfig { recipe })
    }
}

/// Keys of `[features]` other than `recipe`, each with whether it is set.
fn set_keys(r: &RawFeatures) -> [(&'static str, bool); 22] {
    [
        ("n_mels", r.n_mels.is_some()),
        ("sample_frequency", r.sample_frequency.is_some()),
        ("frame_length", r.frame_length.is_some()),
        ("frame_shift", r.frame_shift.is_some()),
        ("dither", r.dither.is_some()),
        (
            "preemphasis_coefficient",
            r.preemphasis_coefficient.is_some(),
        ),
        ("remove_dc_offset", r.remove_dc_offset.is_some()),
        ("window_type", r.window_type.is_some()),
        ("blackman_coeff", r.blackman_coeff.is_some()),
        ("round_to_power_of_two", r.round_to_power_of_two.is_some()),
        ("snip_edges", r.snip_edges.is_some()),
        ("num_mel_bins", r.num_mel_bins.is_some()),
        ("low_freq", r.low_freq.is_some()),
        ("high_freq", r.high_freq.is_some()),
        ("use_energy", r.use_energy.is_some()),
        ("raw_energy", r.raw_energy.is_some()),
        ("energy_floor", r.energy_floor.is_some()),
        ("use_log_fbank", r.use_log_fbank.is_some()),
        ("use_power", r.use_power.is_some()),
        ("num_ceps", r.num_ceps.is_some()),
        ("cepstral_lifter", r.cepstral_lifter.is_some()),
        ("sample_scale", r.sample_scale.is_some()),
    ]
}

/// The keys shared by both Kaldi recipes.
const KALDI_COMMON: [&str; 17] = [
    "sample_frequency",
    "frame_length",
    "frame_shift",
    "dither",
    "preemphasis_coefficient",
    "remove_dc_offset",
    "window_type",
    "blackman_coeff",
    "round_to_power_of_two",
    "snip_edges",
    "num_mel_bins",
    "low_freq",
    "high_freq",
    "use_energy",
    "raw_energy",
    "energy_floor",
    "sample_scale",
];

const FBANK_ONLY: [&str; 19] = concat_keys(["use_log_fbank", "use_power"]);
const MFCC_ONLY: [&str; 19] = concat_keys(["num_ceps", "cepstral_lifter"]);

const fn concat_keys(extra: [&'static str; 2]) -> [&'static str; 19] {
    let mut out = [""; 19];
    let mut i = 0;
    while i < 17 {
        out[i] = KALDI_COMMON[i];
        i += 1;
    }
    out[17] = extra[0];
    out[18] = extra[1];
    out
}

/// Rejects any set key that `recipe` does not take, naming it.
fn only(r: &RawFeatures, allowed: &[&str], recipe: &str, cx: &Ctx) -> Result<(), Error> {
    for (key, set) in set_keys(r) {
        if set && !allowed.contains(&key) {
            return Err(cx.invalid(
                &format!("features.{key}"),
                format!("not a parameter of recipe \"{recipe}\""),
            ));
        }
    }
    Ok(())
}

/// The Kaldi options: the preset's defaults `d` (torchaudio's, or lhotse's
/// `FbankConfig`) for absent keys, then validated.
fn kaldi(r: &RawFeatures, kind: Kind, d: KaldiOptions, cx: &Ctx) -> Result<KaldiOptions, Error> {
    let window_options: Vec<(&str, KaldiWindow)> = KaldiWindow::ALL.to_vec();
    let o = KaldiOptions {
        sample_frequency: r.sample_frequency.unwrap_or(d.sample_frequency),
        frame_length: r.frame_length.unwrap_or(d.frame_length),
        frame_shift: r.frame_shift.unwrap_or(d.frame_shift),
        dither: r.dither.unwrap_or(d.dither),
        preemphasis_coefficient: r
            .preemphasis_coefficient
            .unwrap_or(d.preemphasis_coefficient),
        remove_dc_offset: r.remove_dc_offset.unwrap_or(d.remove_dc_offset),
        window_type: cx.choice(
            "features.window_type",
            r.window_type.as_deref(),
            d.window_type,
            &window_options,
        )?,
        blackman_coeff: r.blackman_coeff.unwrap_or(d.blackman_coeff),
        round_to_power_of_two: r.round_to_power_of_two.unwrap_or(d.round_to_power_of_two),
        snip_edges: r.snip_edges.unwrap_or(d.snip_edges),
        num_mel_bins: r.num_mel_bins.unwrap_or(d.num_mel_bins),
        low_freq: r.low_freq.unwrap_or(d.low_freq),
        high_freq: r.high_freq.unwrap_or(d.high_freq),
        use_energy: r.use_energy.unwrap_or(d.use_energy),
        raw_energy: r.raw_energy.unwrap_or(d.raw_energy),
        energy_floor: r.energy_floor.unwrap_or(d.energy_floor),
        use_log_fbank: r.use_log_fbank.unwrap_or(d.use_log_fbank),
        use_power: r.use_power.unwrap_or(d.use_power),
        num_ceps: r.num_ceps.unwrap_or(d.num_ceps),
        cepstral_lifter: r.cepstral_lifter.unwrap_or(d.cepstral_lifter),
        sample_scale: r.sample_scale.unwrap_or(d.sample_scale),
    };
    let rate = o.sample_frequency;
    if !(rate.is_finite() && rate >= 1.0 && rate.fract() == 0.0 && rate <= f64::from(u32::MAX)) {
        return Err(cx.invalid(
            "features.sample_frequency",
            format!("{rate}; expected a whole number of Hz ≥ 1 (inputs are resampled to it)"),
        ));
    }
    o.validate(kind).map_err(|e| {
        cx.invalid(
            &format!("features.{}", e.key),
            format!("{}; {}", e.value, e.expected),
        )
    })?;
    Ok(o)
}

#[cfg(test)]
#[path = "features_tests.rs"]
mod tests;
