//! [`KaldiOptions`]: the parameters of `torchaudio.compliance.kaldi.fbank` and
//! `.mfcc`, with exactly torchaudio's keyword names and defaults, plus
//! `sample_scale`; and their validation into typed errors naming the key.
//!
//! torchaudio's `fbank` and `mfcc` share every default (`num_mel_bins` = 23 in
//! both, `dither` = 0.0). kaldi-native-fbank's own defaults differ (dither 3e-5,
//! energy_floor 0): melforge follows torchaudio. Parameters torchaudio has that
//! are not here (`vtln_*`, `htk_compat`, `subtract_mean`, `min_duration`,
//! `channel`) are fixed at torchaudio's defaults; a config naming one is rejected.

use serde::Serialize;

use crate::params::ParamValue;

/// Which of torchaudio's two functions the options describe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// `torchaudio.compliance.kaldi.fbank`: (frames, num_mel_bins [+1 energy]).
    Fbank,
    /// `torchaudio.compliance.kaldi.mfcc`: (frames, num_ceps).
    Mfcc,
}

/// `window_type`, as torchaudio names it (all symmetric, Kaldi's definitions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KaldiWindow {
    /// (0.5 − 0.5·cos(2πi/(N−1)))^0.85.
    Povey,
    /// 0.5 − 0.5·cos(2πi/(N−1)).
    Hanning,
    /// 0.54 − 0.46·cos(2πi/(N−1)).
    Hamming,
    /// All ones.
    Rectangular,
    /// blackman_coeff − 0.5·cos(a·i) + (0.5 − blackman_coeff)·cos(2a·i), a = 2π/(N−1).
    Blackman,
}

impl KaldiWindow {
    /// Every window with torchaudio's name for it.
    pub const ALL: [(&'static str, KaldiWindow); 5] = [
        ("povey", KaldiWindow::Povey),
        ("hanning", KaldiWindow::Hanning),
        ("hamming", KaldiWindow::Hamming),
        ("rectangular", KaldiWindow::Rectangular),
        ("blackman", KaldiWindow::Blackman),
    ];

    /// torchaudio's name (`window_type=`).
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, w)| *w == self)
            .map(|(n, _)| *n)
            .unwrap_or("povey")
    }
}

/// torchaudio's keyword arguments (same names, same defaults, same units: ms
/// for frame_length/frame_shift, Hz for frequencies).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KaldiOptions {
    /// Hz; the rate the waveform is at (inputs are resampled to it).
    pub sample_frequency: f64,
    /// ms.
    pub frame_length: f64,
    /// ms.
    pub frame_shift: f64,
    /// Standard deviation of Gaussian noise added to each sample (in the
    /// scaled units, after `sample_scale`). 0 = none (torchaudio's default). A
    /// non-zero dither is seeded per file ([`super::KaldiScratch::seed`]): it is
    /// deterministic, but not comparable bit for bit with any reference.
    pub dither: f64,
    pub preemphasis_coefficient: f64,
    pub remove_dc_offset: bool,
    pub window_type: KaldiWindow,
    pub blackman_coeff: f64,
    /// Zero-pad each frame to the next power of two before the FFT.
    pub round_to_power_of_two: bool,
    /// true: only frames that fit entirely; false: Kaldi's centred frames with
    /// reflected edges, (n + shift/2) / shift of them.
    pub snip_edges: bool,
    pub num_mel_bins: usize,
    /// Hz.
    pub low_freq: f64,
    /// Hz; ≤ 0 is an offset from Nyquist (0 = Nyquist).
    pub high_freq: f64,
    /// fbank: prepend a log-energy column; mfcc: C0 becomes the log energy.
    pub use_energy: bool,
    /// Energy before pre-emphasis and window (true) or after the window (false).
    pub raw_energy: bool,
    /// Floor on the energy (linear, not log); 0 = none.
    pub energy_floor: f64,
    /// fbank only: natural log of the mel energies (mfcc: always).
    pub use_log_fbank: bool,
    /// fbank only: power (true) or magnitude (false) spectrum (mfcc: always power).
    pub use_power: bool,
    /// mfcc only: cepstra kept, ≤ num_mel_bins.
    pub num_ceps: usize,
    /// mfcc only: Q of the lifter 1 + Q/2·sin(πi/Q); 0 = none.
    pub cepstral_lifter: f64,
    /// melforge's: the decoded waveform (in [-1, 1]) is multiplied by this
    /// first. 1.0 = torchaudio/lhotse; 32768 = the Kaldi binaries and WeNet.
    pub sample_scale: f64,
}

impl Default for KaldiOptions {
    /// torchaudio's defaults (identical for fbank and mfcc), sample_scale 1.
    fn default() -> Self {
        KaldiOptions {
            sample_frequency: 16000.0,
            frame_length: 25.0,
            frame_shift: 10.0,
            dither: 0.0,
            preemphasis_coefficient: 0.97,
            remove_dc_offset: true,
            window_type: KaldiWindow::Povey,
            blackman_coeff: 0.42,
            round_to_power_of_two: true,
            snip_edges: true,
            num_mel_bins: 23,
            low_freq: 20.0,
            high_freq: 0.0,
            use_energy: false,
            raw_energy: true,
            energy_floor: 1.0,
            use_log_fbank: true,
            use_power: true,
            num_ceps: 13,
            cepstral_lifter: 22.0,
            sample_scale: 1.0,
        }
    }
}

impl KaldiOptions {
    /// lhotse's `Fbank()`: its `FbankConfig` defaults (lhotse
    /// `features/kaldi/extractors.py`), which differ from torchaudio's in
    /// four places: 80 bins, `snip_edges` false (lhotse's frame count,
    /// `compute_num_frames`, assumes it), `high_freq` −400 (Nyquist − 400 Hz)
    /// and `energy_floor` 1e-10 (`lhotse.utils.EPSILON`; read only with
    /// `use_energy`). The rest, the log floor included (float32's epsilon,
    /// `Wav2LogFilterBank._eps`), are torchaudio's.
    pub fn lhotse_fbank() -> Self {
        KaldiOptions {
            num_mel_bins: 80,
            snip_edges: false,
            high_freq: -400.0,
            energy_floor: 1e-10,
            ..KaldiOptions::default()
        }
    }
}

/// Why options cannot make a plan: the key (torchaudio's name), what it was,
/// and what was expected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key} = {value}: {expected}")]
pub struct KaldiError {
    /// torchaudio's keyword (the `[features]` key).
    pub key: &'static str,
    /// The offending value, as written.
    pub value: String,
    /// What would have been accepted.
    pub expected: &'static str,
}

fn bad(key: &'static str, value: impl ToString, expected: &'static str) -> KaldiError {
    KaldiError {
        key,
        value: value.to_string(),
        expected,
    }
}

fn finite_positive(key: &'static str, v: f64) -> Result<(), KaldiError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(bad(key, v, "expected a finite number > 0"))
    }
}

impl KaldiOptions {
    /// Samples per frame: frame_length ms at sample_frequency (Kaldi truncates).
    pub fn window_size(&self) -> usize {
        (self.sample_frequency * self.frame_length * 0.001) as usize
    }

    /// Samples between frame starts (Kaldi truncates).
    pub fn window_shift(&self) -> usize {
        (self.sample_frequency * self.frame_shift * 0.001) as usize
    }

    /// The FFT length: window_size, rounded up to a power of two if asked.
    pub fn padded_window_size(&self) -> usize {
        let w = self.window_size();
        if self.round_to_power_of_two {
            w.next_power_of_two()
        } else {
            w
        }
    }

    /// high_freq in Hz (≤ 0 counts back from Nyquist).
    pub fn high_freq_hz(&self) -> f64 {
        let nyquist = 0.5 * self.sample_frequency;
        if self.high_freq > 0.0 {
            self.high_freq
        } else {
            nyquist + self.high_freq
        }
    }

    /// Checks every constraint Kaldi and torchaudio enforce, for `kind`.
    pub fn validate(&self, kind: Kind) -> Result<(), KaldiError> {
        finite_positive("sample_frequency", self.sample_frequency)?;
        finite_positive("frame_length", self.frame_length)?;
        finite_positive("frame_shift", self.frame_shift)?;
        finite_positive("sample_scale", self.sample_scale)?;
        if self.window_size() < 2 {
            return Err(bad(
                "frame_length",
                self.frame_length,
                "expected at least 2 samples per frame at sample_frequency",
            ));
        }
        if self.window_shift() < 1 {
            return Err(bad(
                "frame_shift",
                self.frame_shift,
                "expected at least 1 sample between frames at sample_frequency",
            ));
        }
        if !(self.dither.is_finite() && self.dither >= 0.0) {
            return Err(bad("dither", self.dither, "expected a finite number ≥ 0"));
        }
        if !(self.preemphasis_coefficient.is_finite()
            && (0.0..=1.0).contains(&self.preemphasis_coefficient))
        {
            return Err(bad(
                "preemphasis_coefficient",
                self.preemphasis_coefficient,
                "expected a number in [0, 1]",
            ));
        }
        if !self.blackman_coeff.is_finite() {
            return Err(bad(
                "blackman_coeff",
                self.blackman_coeff,
                "expected a finite number",
            ));
        }
        if !(self.energy_floor.is_finite() && self.energy_floor >= 0.0) {
            return Err(bad(
                "energy_floor",
                self.energy_floor,
                "expected a finite number ≥ 0",
            ));
        }
        self.validate_mel()?;
        if kind == Kind::Mfcc {
            self.validate_mfcc()?;
        }
        Ok(())
    }

    fn validate_mel(&self) -> Result<(), KaldiError> {
        if self.num_mel_bins < 3 {
            return Err(bad(
                "num_mel_bins",
                self.num_mel_bins,
                "expected at least 3",
            ));
        }
        let nyquist = 0.5 * self.sample_frequency;
        if !(self.low_freq.is_finite() && self.low_freq >= 0.0 && self.low_freq < nyquist) {
            return Err(bad(
                "low_freq",
                self.low_freq,
                "expected 0 ≤ low_freq < sample_frequency / 2",
            ));
        }
        let high = self.high_freq_hz();
        if !(self.high_freq.is_finite() && high > self.low_freq && high <= nyquist) {
            return Err(bad(
                "high_freq",
                self.high_freq,
                "expected low_freq < high_freq ≤ sample_frequency / 2 (≤ 0: an offset from it)",
            ));
        }
        Ok(())
    }

    fn validate_mfcc(&self) -> Result<(), KaldiError> {
        if !self.use_log_fbank {
            return Err(bad(
                "use_log_fbank",
                false,
                "kaldi.mfcc always takes the log (not an mfcc parameter)",
            ));
        }
        if !self.use_power {
            return Err(bad(
                "use_power",
                false,
                "kaldi.mfcc always uses the power spectrum (not an mfcc parameter)",
            ));
        }
        if self.num_ceps < 1 || self.num_ceps > self.num_mel_bins {
            return Err(bad(
                "num_ceps",
                self.num_ceps,
                "expected 1 ≤ num_ceps ≤ num_mel_bins",
            ));
        }
        if !(self.cepstral_lifter.is_finite() && self.cepstral_lifter >= 0.0) {
            return Err(bad(
                "cepstral_lifter",
                self.cepstral_lifter,
                "expected a finite number ≥ 0",
            ));
        }
        Ok(())
    }

    /// Every parameter as (torchaudio name, value), in declaration order:
    /// what a dataset records so its numbers can be reproduced. mfcc's own
    /// keys only for mfcc, fbank's only for fbank.
    pub fn params(&self, kind: Kind) -> Vec<(&'static str, ParamValue)> {
        use ParamValue::{Bool, Int, Real, Text};
        let mut p = vec![
            ("sample_frequency", Real(self.sample_frequency)),
            ("frame_length", Real(self.frame_length)),
            ("frame_shift", Real(self.frame_shift)),
            ("dither", Real(self.dither)),
            (
                "preemphasis_coefficient",
                Real(self.preemphasis_coefficient),
            ),
            ("remove_dc_offset", Bool(self.remove_dc_offset)),
            ("window_type", Text(self.window_type.name())),
            ("blackman_coeff", Real(self.blackman_coeff)),
            ("round_to_power_of_two", Bool(self.round_to_power_of_two)),
            ("snip_edges", Bool(self.snip_edges)),
            ("num_mel_bins", Int(self.num_mel_bins as i64)),
            ("low_freq", Real(self.low_freq)),
            ("high_freq", Real(self.high_freq)),
            ("use_energy", Bool(self.use_energy)),
            ("raw_energy", Bool(self.raw_energy)),
            ("energy_floor", Real(self.energy_floor)),
        ];
        match kind {
            Kind::Fbank => {
                p.push(("use_log_fbank", Bool(self.use_log_fbank)));
                p.push(("use_power", Bool(self.use_power)));
            }
            Kind::Mfcc => {
                p.push(("num_ceps", Int(self.num_ceps as i64)));
                p.push(("cepstral_lifter", Real(self.cepstral_lifter)));
            }
        }
        p.push(("sample_scale", Real(self.sample_scale)));
        p
    }
}

/// One option's value as a caller gives it (an in-process call's keyword).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OptionValue<'a> {
    Int(i64),
    Real(f64),
    Bool(bool),
    Text(&'a str),
}

/// Why [`KaldiOptions::set`] refused a keyword.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SetError {
    /// Not one of the function's keywords ([`KaldiOptions::params`]).
    #[error("unknown option {key:?}")]
    Unknown { key: String },
    /// A keyword with a value of the wrong type.
    #[error("{key}: expected {expected}")]
    Type {
        key: &'static str,
        expected: &'static str,
    },
}

impl KaldiOptions {
    /// Sets the option torchaudio calls `key` (one of [`KaldiOptions::params`]
    /// for `kind`); integers are taken where reals are expected, as Python
    /// does. The value is checked by [`KaldiOptions::validate`], not here.
    pub fn set(&mut self, kind: Kind, key: &str, value: OptionValue<'_>) -> Result<(), SetError> {
        let Some((name, _)) = self.params(kind).into_iter().find(|(k, _)| *k == key) else {
            return Err(SetError::Unknown {
                key: key.to_string(),
            });
        };
        let ty = |expected| SetError::Type {
            key: name,
            expected,
        };
        let real = || match value {
            OptionValue::Real(v) => Ok(v),
            OptionValue::Int(v) => Ok(v as f64),
            _ => Err(ty("a number")),
        };
        let flag = || match value {
            OptionValue::Bool(v) => Ok(v),
            _ => Err(ty("True or False")),
        };
        let count = || match value {
            OptionValue::Int(v) => usize::try_from(v).map_err(|_| ty("an integer ≥ 0")),
            _ => Err(ty("an integer")),
        };
        match name {
            "sample_frequency" => self.sample_frequency = real()?,
            "frame_length" => self.frame_length = real()?,
            "frame_shift" => self.frame_shift = real()?,
            "dither" => self.dither = real()?,
            "preemphasis_coefficient" => self.preemphasis_coefficient = real()?,
            "remove_dc_offset" => self.remove_dc_offset = flag()?,
            "window_type" => {
                let OptionValue::Text(t) = value else {
                    return Err(ty("a window name"));
                };
                let found = KaldiWindow::ALL.iter().find(|(n, _)| *n == t);
                let names = "\"povey\", \"hanning\", \"hamming\", \"rectangular\" or \"blackman\"";
                self.window_type = found.map(|(_, w)| *w).ok_or_else(|| ty(names))?;
            }
            "blackman_coeff" => self.blackman_coeff = real()?,
            "round_to_power_of_two" => self.round_to_power_of_two = flag()?,
            "snip_edges" => self.snip_edges = flag()?,
            "num_mel_bins" => self.num_mel_bins = count()?,
            "low_freq" => self.low_freq = real()?,
            "high_freq" => self.high_freq = real()?,
            "use_energy" => self.use_energy = flag()?,
            "raw_energy" => self.raw_energy = flag()?,
            "energy_floor" => self.energy_floor = real()?,
            "use_log_fbank" => self.use_log_fbank = flag()?,
            "use_power" => self.use_power = flag()?,
            "num_ceps" => self.num_ceps = count()?,
            "cepstral_lifter" => self.cepstral_lifter = real()?,
            "sample_scale" => self.sample_scale = real()?,
            _ => {
                return Err(SetError::Unknown {
                    key: key.to_string(),
                });
            }
        }
        Ok(())
    }
}
