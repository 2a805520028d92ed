//! `log_mel`: the librosa recipe over whole waveforms of any length,
//! `librosa.power_to_db(librosa.feature.melspectrogram(y=y, sr=sr, ...),
//! ref=, amin=, top_db=)` with both functions' keyword names and defaults.
//!
//! The options make a [`Spec`] with the segmentation off; its plan is cached
//! per option set, and each waveform gets [`Plan::natural`] of its own
//! length (the frame layout only: the transform, window and filterbank are
//! the cached plan's). A row equals the row `melforge build` stores for the
//! same samples with `segmentation.enabled = false` and a clip of the
//! waveform's length, bit for bit.

use std::sync::Arc;

use melforge_dsp::{
    MelNorm, MelScale, PadMode, Plan, Scratch, Segmentation, Spec, SpecError, Window,
};
use numpy::{PyArray2, PyReadonlyArray1};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};

use super::{array, parallel, samples, with_plans};

const FUNC: &str = "log_mel";

/// The keywords `log_mel` takes: `melspectrogram`'s, then `power_to_db`'s.
pub(crate) const NAMES: [&str; 16] = [
    "sr",
    "n_fft",
    "hop_length",
    "win_length",
    "window",
    "center",
    "pad_mode",
    "power",
    "n_mels",
    "fmin",
    "fmax",
    "htk",
    "norm",
    "ref",
    "amin",
    "top_db",
];

/// librosa's defaults; a `hop_length`, `win_length` or `fmax` of None is
/// derived from the others as librosa does.
struct Options {
    sr: u32,
    n_fft: usize,
    hop_length: Option<usize>,
    win_length: Option<usize>,
    window: Window,
    center: bool,
    pad_mode: PadMode,
    power: f64,
    n_mels: usize,
    fmin: f64,
    fmax: Option<f64>,
    htk: bool,
    norm: MelNorm,
    ref_value: f64,
    amin: f64,
    top_db: Option<f64>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            sr: 22050,
            n_fft: 2048,
            // melspectrogram's own default; None is stft's `win_length // 4`.
            hop_length: Some(512),
            win_length: None,
            window: Window::Hann,
            center: true,
            pad_mode: PadMode::Constant,
            power: 2.0,
            n_mels: 128,
            fmin: 0.0,
            fmax: None,
            htk: false,
            norm: MelNorm::Slaney,
            ref_value: 1.0,
            amin: 1e-10,
            top_db: Some(80.0),
        }
    }
}

fn wrong(key: &str, v: &Bound<'_, PyAny>, expected: &str) -> PyErr {
    PyTypeError::new_err(format!("{FUNC}(): {key} = {v}: expected {expected}"))
}

fn int(key: &str, v: &Bound<'_, PyAny>) -> PyResult<usize> {
    if v.is_instance_of::<PyBool>() {
        return Err(wrong(key, v, "an int"));
    }
    let i: i64 = v.extract().map_err(|_| wrong(key, v, "an int"))?;
    usize::try_from(i)
        .map_err(|_| PyValueError::new_err(format!("{FUNC}(): {key} = {i}: expected an int ≥ 0")))
}

fn real(key: &str, v: &Bound<'_, PyAny>) -> PyResult<f64> {
    if v.is_instance_of::<PyBool>() || v.is_instance_of::<PyString>() {
        return Err(wrong(key, v, "a number"));
    }
    v.extract().map_err(|_| wrong(key, v, "a number"))
}

fn flag(key: &str, v: &Bound<'_, PyAny>) -> PyResult<bool> {
    if v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>() || v.is_instance_of::<PyFloat>()
    {
        return Err(wrong(key, v, "a bool"));
    }
    v.extract().map_err(|_| wrong(key, v, "a bool"))
}

/// `v` as one of `choices` (a string), by name.
fn choice<T: Copy>(key: &str, v: &Bound<'_, PyAny>, choices: &[(&str, T)]) -> PyResult<T> {
    let names: Vec<String> = choices.iter().map(|(n, _)| format!("{n:?}")).collect();
    let text: String = v
        .extract()
        .map_err(|_| wrong(key, v, &format!("one of {}", names.join(", "))))?;
    let found = choices.iter().find(|(n, _)| *n == text);
    found.map(|(_, t)| *t).ok_or_else(|| {
        PyValueError::new_err(format!(
            "{FUNC}(): {key} = {text:?}: expected one of {}",
            names.join(", ")
        ))
    })
}

impl Options {
    fn set(&mut self, key: &str, v: &Bound<'_, PyAny>) -> PyResult<()> {
        let none = v.is_none();
        match key {
            "sr" => {
                let sr = int(key, v)?;
                self.sr = u32::try_from(sr).map_err(|_| {
                    PyValueError::new_err(format!("{FUNC}(): sr = {sr}: too large"))
                })?;
            }
            "n_fft" => self.n_fft = int(key, v)?,
            "hop_length" => self.hop_length = if none { None } else { Some(int(key, v)?) },
            "win_length" => self.win_length = if none { None } else { Some(int(key, v)?) },
            "window" => {
                let windows = [
                    ("hann", Window::Hann),
                    ("hamming", Window::Hamming),
                    ("blackman", Window::Blackman),
                    ("boxcar", Window::Boxcar),
                ];
                self.window = choice(key, v, &windows)?;
            }
            "center" => self.center = flag(key, v)?,
            "pad_mode" => {
                let modes = [
                    ("constant", PadMode::Constant),
                    ("reflect", PadMode::Reflect),
                ];
                self.pad_mode = choice(key, v, &modes)?;
            }
            "power" => self.power = real(key, v)?,
            "n_mels" => self.n_mels = int(key, v)?,
            "fmin" => self.fmin = real(key, v)?,
            "fmax" => self.fmax = if none { None } else { Some(real(key, v)?) },
            "htk" => self.htk = flag(key, v)?,
            "norm" => {
                self.norm = if none {
                    MelNorm::None
                } else {
                    choice(key, v, &[("slaney", MelNorm::Slaney)])?
                };
            }
            "ref" => {
                if v.is_callable() {
                    return Err(wrong(
                        key,
                        v,
                        "a number (a reference computed from the spectrogram, such as np.max, \
                         is not supported: subtract the row's maximum afterwards)",
                    ));
                }
                self.ref_value = real(key, v)?;
            }
            "amin" => self.amin = real(key, v)?,
            "top_db" => self.top_db = if none { None } else { Some(real(key, v)?) },
            _ => {
                return Err(PyTypeError::new_err(format!(
                    "{FUNC}() got an unexpected option {key:?}; its options are: {}",
                    NAMES.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// The spec, checked, with a placeholder clip of `n_fft + 1` samples (the
    /// plans [`Plan::natural`] makes from it have the waveforms' lengths).
    fn spec(&self) -> PyResult<Spec> {
        if self.sr == 0 {
            return Err(PyValueError::new_err(format!(
                "{FUNC}(): sr = 0: must be > 0"
            )));
        }
        let win_length = self.win_length.unwrap_or(self.n_fft);
        let spec = Spec {
            sample_rate: self.sr,
            clip_seconds: (self.n_fft + 1) as f64 / f64::from(self.sr),
            segmentation: Segmentation {
                enabled: false,
                ..Spec::default().segmentation
            },
            n_fft: self.n_fft,
            hop_length: self.hop_length.unwrap_or(win_length / 4),
            win_length,
            window: self.window,
            center: self.center,
            pad_mode: self.pad_mode,
            power: self.power,
            n_mels: self.n_mels,
            fmin: self.fmin,
            fmax: self.fmax.unwrap_or(f64::from(self.sr) / 2.0),
            mel_scale: if self.htk {
                MelScale::Htk
            } else {
                MelScale::Slaney
            },
            norm: self.norm,
            ref_value: self.ref_value,
            amin: self.amin,
            top_db: self.top_db,
        };
        spec.validate().map_err(|e| {
            let key = match e.key {
                "mel.sample_rate" => "sr",
                k => k.strip_prefix("mel.").unwrap_or(k),
            };
            PyValueError::new_err(format!("{FUNC}(): {key}: {}", e.message))
        })?;
        Ok(spec)
    }
}

/// The cached plan for `options` (librosa's keywords).
fn plan(options: Option<&Bound<'_, PyDict>>) -> PyResult<Arc<Plan>> {
    let mut o = Options::default();
    for (k, v) in options.into_iter().flat_map(|d| d.iter()) {
        let key: String = k.extract()?;
        o.set(&key, &v)?;
    }
    let spec = o.spec()?;
    let find = |p: &mut super::Plans| {
        let mut same = p.librosa.iter().filter(|(s, _)| *s == spec);
        same.next().map(|(_, plan)| Arc::clone(plan))
    };
    if let Some(p) = with_plans(find) {
        return Ok(p);
    }
    let plan = Arc::new(Plan::new(&spec));
    with_plans(|p| p.librosa.push((spec, Arc::clone(&plan))));
    Ok(plan)
}

/// librosa's log-mel of each waveform, at its natural length: an
/// `(n_mels, frames)` float32 array each.
#[pyfunction]
#[pyo3(signature = (waveforms, options=None, threads=1))]
pub(crate) fn log_mel<'py>(
    py: Python<'py>,
    waveforms: Vec<PyReadonlyArray1<'py, f32>>,
    options: Option<&Bound<'py, PyDict>>,
    threads: usize,
) -> PyResult<Vec<Bound<'py, PyArray2<f32>>>> {
    let base = plan(options)?;
    let waves = samples(FUNC, &waveforms)?;
    let n_mels = base.spec().n_mels;
    let rows = py.detach(|| {
        parallel(
            &waves,
            (threads, Arc::as_ptr(&base) as usize),
            || Scratch::new(&base),
            |scratch, _, w| {
                let plan = base.natural(w.len())?;
                scratch.fit(&plan);
                let mut out = vec![0.0; plan.spec().row_len()];
                plan.compute(w, scratch, &mut out);
                Ok::<_, SpecError>((plan.spec().n_frames(), out))
            },
        )
    });
    let many = waves.len() > 1;
    (rows.into_iter().enumerate())
        .map(|(i, row)| match row {
            Ok((frames, v)) => array(py, FUNC, (n_mels, frames), v),
            Err(e) => {
                let name = if many {
                    format!("waveforms[{i}]")
                } else {
                    "waveform".into()
                };
                let key = e.key.strip_prefix("mel.").unwrap_or(e.key);
                Err(PyValueError::new_err(format!(
                    "{FUNC}(): {name} has {} samples, too few for one frame: {key}: {}",
                    waves[i].len(),
                    e.message
                )))
            }
        })
        .collect()
}
