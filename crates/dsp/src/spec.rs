//! The validated feature definition: every parameter that decides the numbers in
//! `mel`, and the shapes derived from them.
//!
//! A [`Spec`] is built by `config` (which validates user input and names the
//! offending key) and is immutable afterwards. Everything here is plain data; the
//! invariants listed on each field hold for any `Spec` that `config` produced, and
//! [`Spec::validate`] re-checks them for specs built by hand (tests, benches).

use serde::Serialize;

/// Analysis window, as `scipy.signal.get_window(name, win_length, fftbins=True)`
/// (periodic) — what librosa's `get_window` returns for these names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Window {
    Hann,
    Hamming,
    Blackman,
    /// Rectangular (`"boxcar"` / `"ones"` in scipy).
    Boxcar,
}

impl Window {
    pub fn name(self) -> &'static str {
        match self {
            Window::Hann => "hann",
            Window::Hamming => "hamming",
            Window::Blackman => "blackman",
            Window::Boxcar => "boxcar",
        }
    }
}

/// Padding used when `center` is true (librosa's `pad_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PadMode {
    Constant,
    Reflect,
}

/// Mel scale formula (`htk=True` in librosa selects `Htk`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MelScale {
    Slaney,
    Htk,
}

/// Filterbank normalisation (`norm="slaney"` or `norm=None` in librosa).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MelNorm {
    Slaney,
    None,
}

/// Two-stage segmentation (docs/DESIGN.md "Mel definition" step 3), in samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Segmentation {
    pub enabled: bool,
    pub long_window: usize,
    pub long_hop: usize,
    pub short_window: usize,
    pub short_hop: usize,
}

/// The complete, validated feature definition.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Spec {
    /// Hz; a file with any other rate is rejected.
    pub sample_rate: u32,
    /// Clip length in seconds (may be fractional); see [`Spec::clip_samples`].
    pub clip_seconds: f64,
    pub segmentation: Segmentation,
    /// FFT size, ≥ 2 (any size, not only powers of two).
    pub n_fft: usize,
    /// ≥ 1.
    pub hop_length: usize,
    /// 1 ..= n_fft; the window is zero-padded (centred) to n_fft as librosa does.
    pub win_length: usize,
    pub window: Window,
    pub center: bool,
    pub pad_mode: PadMode,
    /// Exponent applied to |X|: 1 (magnitude) or 2 (power); any value > 0 works.
    pub power: f64,
    /// ≥ 1.
    pub n_mels: usize,
    /// 0 ≤ fmin < fmax ≤ sample_rate / 2.
    pub fmin: f64,
    pub fmax: f64,
    pub mel_scale: MelScale,
    pub norm: MelNorm,
    /// Reference for dB: 10·log10(max(amin, ref)) is subtracted. > 0.
    pub ref_value: f64,
    /// > 0.
    pub amin: f64,
    /// When set (≥ 0), values are clamped at (max over the whole clip) − top_db.
    pub top_db: Option<f64>,
}

impl Default for Spec {
    /// The reference dataset's definition (docs/DESIGN.md "Defaults").
    fn default() -> Self {
        Spec {
            sample_rate: 4096,
            clip_seconds: 10.0,
            segmentation: Segmentation {
                enabled: true,
                long_window: 1024,
                long_hop: 512,
                short_window: 512,
                short_hop: 256,
            },
            n_fft: 512,
            hop_length: 256,
            win_length: 512,
            window: Window::Hann,
            center: false,
            pad_mode: PadMode::Constant,
            power: 2.0,
            n_mels: 32,
            fmin: 0.0,
            fmax: 2048.0,
            mel_scale: MelScale::Slaney,
            norm: MelNorm::Slaney,
            ref_value: 1.0,
            amin: 1e-10,
            top_db: None,
        }
    }
}

/// Why a hand-built [`Spec`] is unusable. `config` maps these to key names.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct SpecError {
    /// Config key (`section.name`) the problem is attributed to.
    pub key: &'static str,
    pub message: String,
}

fn bad(key: &'static str, message: impl Into<String>) -> SpecError {
    SpecError {
        key,
        message: message.into(),
    }
}

impl Spec {
    /// Samples per clip after pad/trim: round(clip_seconds · sample_rate).
    pub fn clip_samples(&self) -> usize {
        (self.clip_seconds * f64::from(self.sample_rate)).round() as usize
    }

    /// Length of one analysed (short) segment in samples.
    pub fn segment_samples(&self) -> usize {
        if self.segmentation.enabled {
            self.segmentation.short_window
        } else {
            self.clip_samples()
        }
    }

    /// Number of long segments per clip (1 when segmentation is off).
    pub fn n_long(&self) -> usize {
        let s = &self.segmentation;
        if s.enabled {
            (self.clip_samples() - s.long_window) / s.long_hop + 1
        } else {
            1
        }
    }

    /// Number of short segments per long segment (1 when segmentation is off).
    pub fn n_short(&self) -> usize {
        let s = &self.segmentation;
        if s.enabled {
            (s.long_window - s.short_window) / s.short_hop + 1
        } else {
            1
        }
    }

    /// STFT frames per short segment, as librosa.stft counts them.
    pub fn n_frames(&self) -> usize {
        let len = self.segment_samples();
        if self.center {
            // librosa pads n_fft/2 (floored) on each side: for odd n_fft the
            // padded length is len + n_fft - 1.
            (len + 2 * (self.n_fft / 2) - self.n_fft) / self.hop_length + 1
        } else {
            (len - self.n_fft) / self.hop_length + 1
        }
    }

    /// Number of rfft bins, n_fft/2 + 1.
    pub fn n_bins(&self) -> usize {
        self.n_fft / 2 + 1
    }

    /// Per-file output shape (n_long, n_short, n_mels, n_frames).
    pub fn row_shape(&self) -> [usize; 4] {
        [self.n_long(), self.n_short(), self.n_mels, self.n_frames()]
    }

    /// Number of f32 values per file.
    pub fn row_len(&self) -> usize {
        self.row_shape().iter().product()
    }

    /// Start sample of short segment `(l, s)` within the clip.
    pub fn segment_start(&self, l: usize, s: usize) -> usize {
        let g = &self.segmentation;
        if g.enabled {
            l * g.long_hop + s * g.short_hop
        } else {
            0
        }
    }

    /// Checks every invariant documented on the fields, in order: the clip
    /// and its segments, the frames, the mel bands and dB scale.
    pub fn validate(&self) -> Result<(), SpecError> {
        self.validate_clip()?;
        self.validate_frames()?;
        self.validate_mel()
    }

    fn validate_clip(&self) -> Result<(), SpecError> {
        if self.sample_rate == 0 {
            return Err(bad("mel.sample_rate", "must be > 0"));
        }
        if !(self.clip_seconds.is_finite() && self.clip_seconds > 0.0) {
            return Err(bad("mel.clip_seconds", "must be a finite number > 0"));
        }
        let clip = self.clip_samples();
        if clip == 0 {
            return Err(bad("mel.clip_seconds", "gives a clip of 0 samples"));
        }
        let g = &self.segmentation;
        if g.enabled {
            if g.long_window == 0 || g.long_hop == 0 || g.short_window == 0 || g.short_hop == 0 {
                return Err(bad("segmentation", "windows and hops must be > 0"));
            }
            if g.long_window > clip {
                return Err(bad(
                    "segmentation.long_window",
                    format!(
                        "{} exceeds the clip length of {clip} samples",
                        g.long_window
                    ),
                ));
            }
            if g.short_window > g.long_window {
                return Err(bad(
                    "segmentation.short_window",
                    format!("{} exceeds long_window {}", g.short_window, g.long_window),
                ));
            }
        }
        Ok(())
    }

    fn validate_frames(&self) -> Result<(), SpecError> {
        if self.n_fft < 2 {
            return Err(bad("mel.n_fft", "must be ≥ 2"));
        }
        if self.hop_length == 0 {
            return Err(bad("mel.hop_length", "must be ≥ 1"));
        }
        if self.win_length == 0 || self.win_length > self.n_fft {
            return Err(bad(
                "mel.win_length",
                format!("{} must be in 1..={} (n_fft)", self.win_length, self.n_fft),
            ));
        }
        let seg = self.segment_samples();
        if !self.center && seg < self.n_fft {
            return Err(bad(
                "mel.n_fft",
                format!(
                    "{} exceeds the analysed segment of {seg} samples (center = false)",
                    self.n_fft
                ),
            ));
        }
        Ok(())
    }

    fn validate_mel(&self) -> Result<(), SpecError> {
        if !(self.power.is_finite() && self.power > 0.0) {
            return Err(bad("mel.power", "must be > 0"));
        }
        if self.n_mels == 0 {
            return Err(bad("mel.n_mels", "must be ≥ 1"));
        }
        let nyquist = f64::from(self.sample_rate) / 2.0;
        if !(self.fmin >= 0.0 && self.fmin < self.fmax) {
            return Err(bad(
                "mel.fmin",
                format!("must satisfy 0 ≤ fmin < fmax ({})", self.fmax),
            ));
        }
        if self.fmax > nyquist {
            return Err(bad(
                "mel.fmax",
                format!("{} exceeds the Nyquist frequency {nyquist}", self.fmax),
            ));
        }
        if !(self.ref_value.is_finite() && self.ref_value > 0.0) {
            return Err(bad("mel.ref", "must be > 0"));
        }
        if !(self.amin.is_finite() && self.amin > 0.0) {
            return Err(bad("mel.amin", "must be > 0"));
        }
        if let Some(t) = self.top_db
            && !(t.is_finite() && t >= 0.0)
        {
            return Err(bad("mel.top_db", "must be ≥ 0"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_shape_is_the_reference_dataset() {
        let s = Spec::default();
        s.validate().unwrap();
        assert_eq!(s.clip_samples(), 40960);
        assert_eq!(s.row_shape(), [79, 3, 32, 1]);
        assert_eq!(s.n_long() * s.n_short(), 237);
    }

    #[test]
    fn segmentation_off_analyses_the_whole_clip() {
        let mut s = Spec::default();
        s.segmentation.enabled = false;
        s.center = true;
        assert_eq!(s.row_shape(), [1, 1, 32, 40960 / 256 + 1]);
    }

    #[test]
    fn centred_frame_count_matches_librosa_for_odd_n_fft() {
        // librosa.stft(np.zeros(8000), n_fft=401, hop_length=160, center=True): 50 frames.
        let mut s = Spec {
            sample_rate: 4000,
            clip_seconds: 2.0,
            n_fft: 401,
            hop_length: 160,
            win_length: 401,
            center: true,
            fmax: 2000.0,
            ..Spec::default()
        };
        s.segmentation.enabled = false;
        assert_eq!(s.n_frames(), 50);
        s.n_fft = 400;
        s.win_length = 400;
        assert_eq!(s.n_frames(), 51);
    }

    #[test]
    fn fmax_above_nyquist_is_rejected() {
        let s = Spec {
            fmax: 3000.0,
            ..Spec::default()
        };
        assert_eq!(s.validate().unwrap_err().key, "mel.fmax");
    }
}
