//! `melforge._native`: melforge's recipes called in-process from Python.
//!
//! The numbers are those of `melforge build`: the same [`KaldiPlan`],
//! [`WhisperPlan`] and librosa [`Plan`] (melforge-dsp), built with the same options, computing
//! the same rows with the same SIMD level, so a row here equals the row a
//! build stores for the same samples, bit for bit. `python/melforge/
//! features.py` is the public face (keyword names, dtypes, torch tensors);
//! this module takes contiguous float32 waveforms and an options dict.
//!
//! * Plans are cached per option set ([`Plans`]): a call never rebuilds one.
//! * A list of waveforms is computed on `threads` threads with the GIL
//!   released; item `i` is dithered with the seed `seed + i` (a build seeds
//!   each file with its index the same way), so rows never depend on the
//!   thread count.
//! * Bad input raises `ValueError` (NaN or inf samples, an empty waveform,
//!   one shorter than a frame where `snip_edges` refuses it, options out of
//!   range) or `TypeError` (an unknown option, which lists the valid ones,
//!   or a value of the wrong type), each naming the argument.

mod librosa;

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use melforge_decode::native::{Range, decode_range};
use melforge_decode::policy::Channels;
use melforge_decode::resample::Resampler;
use melforge_dsp::kaldi::{KaldiOptions, KaldiPlan, Kind, OptionValue, SetError};
use melforge_dsp::whisper::WhisperPlan;
use melforge_dsp::{Plan, Spec};
use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArray1, PyArray2, PyReadonlyArray1};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};

/// The plans made so far, by recipe and options (a handful in a run: a
/// linear search by equality is the cheapest lookup).
#[derive(Default)]
struct Plans {
    kaldi: Vec<(Kind, KaldiOptions, Arc<KaldiPlan>)>,
    whisper: HashMap<usize, Arc<WhisperPlan>>,
    librosa: Vec<(Spec, Arc<Plan>)>,
}

thread_local! {
    /// Each thread's scratch per plan (keyed by the plan's address: plans
    /// are never dropped), so a call on one waveform allocates none.
    static SCRATCH: RefCell<HashMap<usize, Box<dyn Any>>> = RefCell::new(HashMap::new());
}

/// Runs `f` with this thread's scratch for `key`, made by `make` the first
/// time.
fn with_scratch<S: 'static, T>(
    key: usize,
    make: impl FnOnce() -> S,
    f: impl FnOnce(&mut S) -> T,
) -> T {
    let taken = SCRATCH.with(|c| c.borrow_mut().remove(&key));
    let mut s = match taken.and_then(|b| b.downcast::<S>().ok()) {
        Some(s) => *s,
        None => make(),
    };
    let r = f(&mut s);
    SCRATCH.with(|c| c.borrow_mut().insert(key, Box::new(s)));
    r
}

static PLANS: Mutex<Option<Plans>> = Mutex::new(None);

fn with_plans<T>(f: impl FnOnce(&mut Plans) -> T) -> T {
    let mut guard = PLANS.lock().unwrap_or_else(|p| p.into_inner());
    f(guard.get_or_insert_with(Plans::default))
}

fn kind_of(kind: &str) -> PyResult<(Kind, &'static str)> {
    match kind {
        "fbank" => Ok((Kind::Fbank, "kaldi_fbank")),
        "mfcc" => Ok((Kind::Mfcc, "kaldi_mfcc")),
        _ => Err(PyValueError::new_err(format!(
            "kind = {kind:?}: expected \"fbank\" or \"mfcc\""
        ))),
    }
}

/// The keyword names `kaldi_fbank` (`kind` "fbank") or `kaldi_mfcc` ("mfcc")
/// take, in torchaudio's order.
#[pyfunction]
fn kaldi_option_names(kind: &str) -> PyResult<Vec<&'static str>> {
    let (kind, _) = kind_of(kind)?;
    let names = KaldiOptions::default().params(kind);
    Ok(names.into_iter().map(|(k, _)| k).collect())
}

/// One keyword's value as the options take it (a bool before an int: a
/// Python bool is an int).
fn option_value<'a>(v: &'a Bound<'_, PyAny>, text: &'a mut String) -> PyResult<OptionValue<'a>> {
    if v.is_instance_of::<PyBool>() {
        Ok(OptionValue::Bool(v.extract()?))
    } else if v.is_instance_of::<PyInt>() {
        Ok(OptionValue::Int(v.extract()?))
    } else if v.is_instance_of::<PyFloat>() {
        Ok(OptionValue::Real(v.extract()?))
    } else if v.is_instance_of::<PyString>() {
        *text = v.extract()?;
        Ok(OptionValue::Text(text))
    } else {
        // numpy scalars and the like: as a float if they are one.
        Ok(OptionValue::Real(v.extract::<f64>()?))
    }
}

/// torchaudio's defaults with `options` applied and validated.
fn kaldi_options(
    kind: Kind,
    func: &str,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<KaldiOptions> {
    let mut o = KaldiOptions::default();
    for (k, v) in options.into_iter().flat_map(|d| d.iter()) {
        let key: String = k.extract()?;
        let mut text = String::new();
        let value = option_value(&v, &mut text).map_err(|_| {
            PyTypeError::new_err(format!(
                "{func}(): {key} = {v}: not a number, a bool or a string"
            ))
        })?;
        o.set(kind, &key, value).map_err(|e| match e {
            SetError::Unknown { key } => {
                let valid = KaldiOptions::default().params(kind);
                let valid: Vec<&str> = valid.iter().map(|(k, _)| *k).collect();
                PyTypeError::new_err(format!(
                    "{func}() got an unexpected option {key:?}; its options are: {}",
                    valid.join(", ")
                ))
            }
            SetError::Type { key, expected } => {
                PyTypeError::new_err(format!("{func}(): {key} = {v}: expected {expected}"))
            }
        })?;
    }
    o.validate(kind)
        .map_err(|e| PyValueError::new_err(format!("{func}(): {e}")))?;
    Ok(o)
}

fn kaldi_plan(
    kind: Kind,
    func: &str,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<Arc<KaldiPlan>> {
    let o = kaldi_options(kind, func, options)?;
    let find = |p: &mut Plans| {
        let mut same = p
            .kaldi
            .iter()
            .filter(|(k, opts, _)| *k == kind && *opts == o);
        same.next().map(|(_, _, plan)| Arc::clone(plan))
    };
    if let Some(p) = with_plans(find) {
        return Ok(p);
    }
    let plan =
        KaldiPlan::new(&o, kind).map_err(|e| PyValueError::new_err(format!("{func}(): {e}")))?;
    let plan = Arc::new(plan);
    with_plans(|p| p.kaldi.push((kind, o, Arc::clone(&plan))));
    Ok(plan)
}

/// The waveforms' samples, checked: contiguous, not empty, finite.
fn samples<'a>(func: &str, waveforms: &'a [PyReadonlyArray1<'_, f32>]) -> PyResult<Vec<&'a [f32]>> {
    let name = |i: usize| match waveforms.len() {
        1 => "waveform".to_string(),
        _ => format!("waveforms[{i}]"),
    };
    let mut out = Vec::with_capacity(waveforms.len());
    for (i, w) in waveforms.iter().enumerate() {
        let s = w.as_slice().map_err(|_| {
            PyValueError::new_err(format!("{func}(): {} is not contiguous", name(i)))
        })?;
        if s.is_empty() {
            return Err(PyValueError::new_err(format!(
                "{func}(): {} is empty",
                name(i)
            )));
        }
        if let Some(at) = first_non_finite(s) {
            return Err(PyValueError::new_err(format!(
                "{func}(): {} has a non-finite sample ({}) at index {at}",
                name(i),
                s[at]
            )));
        }
        out.push(s);
    }
    Ok(out)
}

/// The index of the first NaN or infinite sample. Blocks are checked
/// branch-free, so the check vectorises (a scalar search cost a tenth of a
/// short-hop log-mel); only a block that fails is searched.
fn first_non_finite(s: &[f32]) -> Option<usize> {
    const BLOCK: usize = 256;
    for (b, block) in s.chunks(BLOCK).enumerate() {
        if !block
            .iter()
            .fold(true, |ok, v| ok & (v.abs() < f32::INFINITY))
        {
            return block
                .iter()
                .position(|v| !v.is_finite())
                .map(|i| b * BLOCK + i);
        }
    }
    None
}

/// Runs `f(i, item)` for every item on up to `threads` threads (the
/// calling one among them, with its scratch for `key` reused); results in
/// item order. Each thread takes the next item not yet taken, so
/// utterances of different lengths spread evenly; what item `i` computes
/// depends only on `i` (its dither seed), never on the thread.
fn parallel<I: Sync, T: Send, S: 'static>(
    items: &[I],
    (threads, key): (usize, usize),
    make: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, usize, &I) -> T + Sync,
) -> Vec<T> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = threads.clamp(1, items.len().max(1));
    let next = AtomicUsize::new(0);
    let work = |s: &mut S| {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(it) = items.get(i) else {
                return done;
            };
            done.push((i, f(s, i, it)));
        }
    };
    let mut slots: Vec<Option<T>> = items.iter().map(|_| None).collect();
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads)
            .map(|_| scope.spawn(|| work(&mut make())))
            .collect();
        let mine = with_scratch(key, &make, work);
        let theirs = helpers
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        for (i, t) in mine.into_iter().chain(theirs) {
            slots[i] = Some(t);
        }
    });
    let out: Vec<T> = slots.into_iter().flatten().collect();
    debug_assert_eq!(out.len(), items.len(), "every item taken once");
    out
}

/// `v` as a numpy array of `shape` (rows, columns), without a copy.
fn array<'py>(
    py: Python<'py>,
    func: &str,
    shape: (usize, usize),
    v: Vec<f32>,
) -> PyResult<Bound<'py, PyArray2<f32>>> {
    let a = Array2::from_shape_vec(shape, v)
        .map_err(|e| PyValueError::new_err(format!("{func}(): {e}")))?;
    Ok(a.into_pyarray(py))
}

/// Kaldi fbank (`kind` "fbank") or MFCC ("mfcc") of each waveform: a
/// (frames, bins) float32 array each.
#[pyfunction]
#[pyo3(signature = (kind, waveforms, options=None, threads=1, seed=0))]
fn kaldi<'py>(
    py: Python<'py>,
    kind: &str,
    waveforms: Vec<PyReadonlyArray1<'py, f32>>,
    options: Option<&Bound<'py, PyDict>>,
    threads: usize,
    seed: u64,
) -> PyResult<Vec<Bound<'py, PyArray2<f32>>>> {
    let (kind, func) = kind_of(kind)?;
    let plan = kaldi_plan(kind, func, options)?;
    let waves = samples(func, &waveforms)?;
    for (i, w) in waves.iter().enumerate() {
        if let Err(e) = plan.check_length(w.len()) {
            let name = if waves.len() == 1 {
                "waveform".into()
            } else {
                format!("waveforms[{i}]")
            };
            let o = plan.options();
            return Err(PyValueError::new_err(format!(
                "{func}(): {name} has {} samples, fewer than one frame ({} samples: frame_length {} ms \
                 at sample_frequency {} Hz, snip_edges {})",
                e.samples,
                e.min_samples,
                o.frame_length,
                o.sample_frequency,
                if o.snip_edges { "True" } else { "False" }
            )));
        }
    }
    let bins = plan.num_bins();
    let rows = py.detach(|| {
        parallel(
            &waves,
            (threads, Arc::as_ptr(&plan) as usize),
            || plan.scratch(),
            |scratch, i, w| {
                scratch.seed(seed.wrapping_add(i as u64));
                let mut out = Vec::new();
                let frames = plan.compute(w, scratch, &mut out);
                (frames, out)
            },
        )
    });
    (rows.into_iter())
        .map(|(frames, v)| array(py, func, (frames, bins), v))
        .collect()
}

/// Whisper's log-mel of each waveform (mono, 16 kHz, cut at 30 s): its
/// covering frames as a (frames, n_mels) float32 array, and the value of
/// every feature of the frames after them up to 3,000 (the extractor's
/// padding), as a build stores them.
#[pyfunction]
#[pyo3(signature = (waveforms, n_mels=80, threads=1))]
fn whisper<'py>(
    py: Python<'py>,
    waveforms: Vec<PyReadonlyArray1<'py, f32>>,
    n_mels: usize,
    threads: usize,
) -> PyResult<Vec<(Bound<'py, PyArray2<f32>>, f32)>> {
    let func = "whisper_log_mel";
    let plan = match with_plans(|p| p.whisper.get(&n_mels).cloned()) {
        Some(p) => p,
        None => {
            let plan = WhisperPlan::new(n_mels)
                .map_err(|e| PyValueError::new_err(format!("{func}(): n_mels = {n_mels}: {e}")))?;
            let plan = Arc::new(plan);
            with_plans(|p| p.whisper.insert(n_mels, Arc::clone(&plan)));
            plan
        }
    };
    let waves = samples(func, &waveforms)?;
    let rows = py.detach(|| {
        parallel(
            &waves,
            (threads, Arc::as_ptr(&plan) as usize),
            || plan.scratch(),
            |scratch, _, w| {
                let mut out = Vec::new();
                let r = plan.compute(w, scratch, &mut out);
                (r.frames, r.pad_value, out)
            },
        )
    });
    (rows.into_iter())
        .map(|(frames, pad, v)| Ok((array(py, func, (frames, n_mels), v)?, pad)))
        .collect()
}

thread_local! {
    /// This thread's libsoxr instances per target rate (their filters are
    /// designed once per input rate: `Resampler`).
    static RESAMPLERS: RefCell<Vec<Resampler>> = const { RefCell::new(Vec::new()) };
}

/// `samples` at `from` Hz converted to `to` Hz as `librosa.resample(...,
/// res_type="soxr_hq")` does: the build's own conversion.
fn resample(samples: &[f32], from: u32, to: u32) -> Result<Vec<f32>, String> {
    RESAMPLERS.with(|r| {
        let mut r = r.borrow_mut();
        let at = match r.iter().position(|x| x.target() == to) {
            Some(i) => i,
            None => {
                r.push(Resampler::new(to));
                r.len() - 1
            }
        };
        let mut out = Vec::new();
        r[at]
            .run(samples, from, &mut out)
            .map_err(|e| e.to_string())?;
        Ok(out)
    })
}

/// The file in `data` (any container melforge reads: WAV, FLAC, MP3, Ogg
/// Vorbis and Opus, MP4 AAC), mixed to mono, from `offset` seconds for
/// `duration` seconds (to the end when None), at its own rate or converted
/// to `sr` Hz through libsoxr HQ, as `librosa.load(sr=sr)` reads it;
/// returns (samples, rate).
#[pyfunction]
#[pyo3(signature = (data, offset=0.0, duration=None, sr=None))]
fn decode<'py>(
    py: Python<'py>,
    data: &[u8],
    offset: f64,
    duration: Option<f64>,
    sr: Option<u32>,
) -> PyResult<(Bound<'py, PyArray1<f32>>, u32)> {
    let bad = |name: &str, v: f64| {
        PyValueError::new_err(format!(
            "decode(): {name} = {v}: expected a finite number ≥ 0"
        ))
    };
    if !(offset.is_finite() && offset >= 0.0) {
        return Err(bad("offset", offset));
    }
    if let Some(d) = duration.filter(|d| !(d.is_finite() && *d >= 0.0)) {
        return Err(bad("duration", d));
    }
    let range = Range {
        offset_s: offset,
        duration_s: duration,
    };
    if sr == Some(0) {
        return Err(PyValueError::new_err(
            "decode(): sr = 0: expected a rate > 0 or None",
        ));
    }
    let mut out = Vec::new();
    let native = py.detach(|| decode_range(data, (Channels::Mean, usize::MAX), range, &mut out));
    let native = native.map_err(|e| PyValueError::new_err(format!("decode(): data: {e}")))?;
    let from = native.sample_rate;
    match sr {
        Some(to) if to != from => {
            let out = py.detach(|| resample(&out, from, to));
            let out =
                out.map_err(|e| PyValueError::new_err(format!("decode(): sr = {to}: {e}")))?;
            Ok((out.into_pyarray(py), to))
        }
        _ => Ok((out.into_pyarray(py), from)),
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode, m)?)?;
    m.add_function(wrap_pyfunction!(kaldi, m)?)?;
    m.add_function(wrap_pyfunction!(kaldi_option_names, m)?)?;
    m.add_function(wrap_pyfunction!(librosa::log_mel, m)?)?;
    m.add("LOG_MEL_OPTIONS", librosa::NAMES.to_vec())?;
    m.add_function(wrap_pyfunction!(whisper, m)?)?;
    Ok(())
}
