//! The `[mel]` and `[segmentation]` sections: the raw keys users write and the
//! step that turns them into a validated [`Spec`].
//!
//! Absent keys take [`defaults::mel`] (the reference dataset's spec); two
//! defaults follow other keys (`win_length` = `n_fft`, `fmax` = Nyquist of
//! `sample_rate`). Range and consistency checks are [`Spec::validate`]'s; this
//! file only maps its errors onto keys and lines.

use serde::Deserialize;

use super::{Ctx, Error, defaults};
use crate::dsp::{MelNorm, MelScale, PadMode, Segmentation, Spec, Window};

/// `[mel]` as written by users. Absent keys take the reference defaults
/// ([`defaults::mel::spec`]).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMel {
    /// Expected sample rate in Hz; files at any other rate are rejected.
    pub sample_rate: Option<u32>,
    /// Clip length in seconds; shorter files are zero-padded, longer trimmed.
    pub clip_seconds: Option<f64>,
    /// FFT size (any size ≥ 2).
    pub n_fft: Option<usize>,
    /// STFT hop in samples.
    pub hop_length: Option<usize>,
    /// Window length in samples (default n_fft, [`defaults::mel::win_length`]);
    /// padded to n_fft like librosa.
    pub win_length: Option<usize>,
    /// "hann" | "hamming" | "blackman" | "boxcar" (periodic, as librosa).
    pub window: Option<String>,
    /// Pad each segment by n_fft/2 on both sides before framing.
    pub center: Option<bool>,
    /// "constant" (zeros) | "reflect"; used when center = true.
    pub pad_mode: Option<String>,
    /// Exponent of the magnitude: 1 (magnitude) or 2 (power).
    pub power: Option<f64>,
    /// Number of mel bands.
    pub n_mels: Option<usize>,
    /// Lowest band edge in Hz.
    pub fmin: Option<f64>,
    /// Highest band edge in Hz (default sample_rate / 2, [`defaults::mel::fmax`]).
    pub fmax: Option<f64>,
    /// "slaney" | "htk".
    pub mel_scale: Option<String>,
    /// "slaney" | "none".
    pub norm: Option<String>,
    /// dB reference: 10·log10(max(amin, ref)) is subtracted.
    #[serde(rename = "ref")]
    pub ref_value: Option<f64>,
    /// Floor applied before the logarithm.
    pub amin: Option<f64>,
    /// Clamp at (max over the whole clip) − top_db; absent means no clamp.
    pub top_db: Option<f64>,
}

/// `[segmentation]`: the two-stage long/short layout, in samples. Absent keys
/// take the reference defaults ([`defaults::mel::spec`]).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSegmentation {
    /// false ⇒ one segment, the whole clip.
    pub enabled: Option<bool>,
    /// Long segment length; long segment l starts at l × long_hop.
    pub long_window: Option<usize>,
    /// Step between long segments.
    pub long_hop: Option<usize>,
    /// Short segment length, inside its long segment.
    pub short_window: Option<usize>,
    /// Step between short segments inside a long one.
    pub short_hop: Option<usize>,
}

/// Applies the defaults to `[mel]` + `[segmentation]` and validates the result.
pub(super) fn spec(m: &RawMel, g: &RawSegmentation, cx: &Ctx) -> Result<Spec, Error> {
    let d = defaults::mel::spec();
    let sample_rate = match m.sample_rate {
        Some(0) => return Err(cx.invalid("mel.sample_rate", "0; expected a rate in Hz ≥ 1")),
        Some(r) => r,
        None => d.sample_rate,
    };
    let n_fft = m.n_fft.unwrap_or(d.n_fft);
    let spec = Spec {
        sample_rate,
        clip_seconds: m.clip_seconds.unwrap_or(d.clip_seconds),
        segmentation: Segmentation {
            enabled: g.enabled.unwrap_or(d.segmentation.enabled),
            long_window: g.long_window.unwrap_or(d.segmentation.long_window),
            long_hop: g.long_hop.unwrap_or(d.segmentation.long_hop),
            short_window: g.short_window.unwrap_or(d.segmentation.short_window),
            short_hop: g.short_hop.unwrap_or(d.segmentation.short_hop),
        },
        n_fft,
        hop_length: m.hop_length.unwrap_or(d.hop_length),
        win_length: m
            .win_length
            .unwrap_or_else(|| defaults::mel::win_length(n_fft)),
        window: cx.choice(
            "mel.window",
            m.window.as_deref(),
            d.window,
            &[
                ("hann", Window::Hann),
                ("hamming", Window::Hamming),
                ("blackman", Window::Blackman),
                ("boxcar", Window::Boxcar),
            ],
        )?,
        center: m.center.unwrap_or(d.center),
        pad_mode: cx.choice(
            "mel.pad_mode",
            m.pad_mode.as_deref(),
            d.pad_mode,
            &[
                ("constant", PadMode::Constant),
                ("reflect", PadMode::Reflect),
            ],
        )?,
        power: m.power.unwrap_or(d.power),
        n_mels: m.n_mels.unwrap_or(d.n_mels),
        fmin: m.fmin.unwrap_or(d.fmin),
        fmax: m.fmax.unwrap_or_else(|| defaults::mel::fmax(sample_rate)),
        mel_scale: cx.choice(
            "mel.mel_scale",
            m.mel_scale.as_deref(),
            d.mel_scale,
            &[("slaney", MelScale::Slaney), ("htk", MelScale::Htk)],
        )?,
        norm: cx.choice(
            "mel.norm",
            m.norm.as_deref(),
            d.norm,
            &[("slaney", MelNorm::Slaney), ("none", MelNorm::None)],
        )?,
        ref_value: m.ref_value.unwrap_or(d.ref_value),
        amin: m.amin.unwrap_or(d.amin),
        top_db: m.top_db.or(d.top_db),
    };
    spec.validate().map_err(|e| cx.invalid(e.key, e.message))?;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn bad_value_names_key_and_line() {
        let e = Config::parse("[mel]\n\nfmax = 9000\n", "f.toml").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("f.toml:3: invalid value for `mel.fmax`"),
            "{msg}"
        );
        assert!(msg.contains("Nyquist"), "{msg}");
    }

    #[test]
    fn fmax_follows_the_sample_rate_when_absent() {
        let c = Config::parse("[mel]\nsample_rate = 8000\n", "t").unwrap();
        assert_eq!(c.spec.fmax, 4000.0);
    }
}
