//! Parity with librosa 0.11 on committed fixtures (tests/golden/README.md).
//!
//! For every case in `tests/golden/manifest.json`: parse its config.toml with the
//! real config parser, decode every WAV with the real decoder (pad/trim included),
//! compute with `mel::Plan`, and compare with the float32 output librosa produced.
//! The contract (docs/DESIGN.md "Mel definition") is 1e-3 dB; the per-case maximum
//! error is printed so it can be quoted (`cargo test --test it golden --
//! --nocapture`).
//!
//! The batched FFT path (`Plan::compute` where `n_fft / 2` is a power of two)
//! is also compared with the per-frame realfft path (`Plan::compute_reference`)
//! on every golden clip, within `PATHS_DB`, and both with librosa.
//!
//! The second test runs the whole `build` pipeline on each case's input tree and
//! compares the rows of the HDF5 file it writes, so the contract is checked on
//! the product's output, not only on the library call.

use std::path::{Path, PathBuf};

use melforge::config::Config;
use melforge::dsp::{Plan, Scratch};

const TOLERANCE_DB: f64 = 1e-3;
const MIN_CASES: usize = 9;
/// Largest |batched − reference| in dB (the bound `crates/dsp/src/plan/batch` states:
/// the transforms differ far below an f32 ulp of any power, so at most a few
/// ulp of a dB value from an occasional rounding flip).
const PATHS_DB: f64 = 1e-4;

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn read_f32(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(bytes.len() % 4, 0, "{}", path.display());
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn shape_of(v: &serde_json::Value) -> [usize; 4] {
    let a: Vec<usize> = v
        .as_array()
        .expect("shape is an array")
        .iter()
        .map(|x| x.as_u64().expect("shape entries are integers") as usize)
        .collect();
    a.try_into().expect("shape has 4 entries")
}

fn manifest() -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(golden_dir().join("manifest.json"))
            .expect("tests/golden/manifest.json"),
    )
    .expect("manifest is JSON")
}

/// Largest |a - b| in dB, a NaN counting as infinite; with its index.
fn max_error(got: &[f32], want: &[f32]) -> (f64, usize) {
    let (mut err, mut at) = (0f64, 0usize);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let e = (f64::from(g) - f64::from(w)).abs();
        let e = if e.is_nan() { f64::INFINITY } else { e };
        if e > err {
            (err, at) = (e, i);
        }
    }
    (err, at)
}

#[test]
fn every_golden_case_matches_librosa() {
    let dir = golden_dir();
    let manifest = manifest();
    let cases = manifest["cases"].as_object().expect("manifest.cases");
    assert!(
        cases.len() >= MIN_CASES,
        "only {} golden cases (expected ≥ {MIN_CASES})",
        cases.len()
    );

    let mut failures = Vec::new();
    for (case, entry) in cases {
        let config_path = dir.join(entry["config"].as_str().expect("config path"));
        let text = std::fs::read_to_string(&config_path)
            .unwrap_or_else(|e| panic!("{}: {e}", config_path.display()));
        let spec = Config::parse(&text, &config_path.display().to_string())
            .unwrap_or_else(|e| panic!("{case}: {e}"))
            .spec;
        assert_eq!(spec.row_shape(), shape_of(&entry["shape"]), "{case}: shape");
        let plan = Plan::new(&spec);
        let mut scratch = Scratch::new(&plan);
        let mut clip = vec![0f32; spec.clip_samples()];
        let mut out = vec![0f32; spec.row_len()];

        let clips = entry["clips"].as_object().expect("clips");
        assert!(!clips.is_empty(), "{case}: no clips");
        let mut case_err = 0f64;
        for (name, c) in clips {
            let wav_path = dir.join(c["wav"].as_str().expect("wav path"));
            let bytes =
                std::fs::read(&wav_path).unwrap_or_else(|e| panic!("{}: {e}", wav_path.display()));
            melforge::decode::wav::decode(&bytes, spec.sample_rate, &mut clip)
                .unwrap_or_else(|e| panic!("{}: {e}", wav_path.display()));
            plan.compute(&clip, &mut scratch, &mut out);

            let want = read_f32(&dir.join(c["expected"].as_str().expect("expected path")));
            assert_eq!(want.len(), out.len(), "{case}/{name}: length");
            let (err, at) = max_error(&out, &want);
            if err > TOLERANCE_DB {
                failures.push(format!(
                    "{case}/{name}: max error {err:.3e} dB at index {at} (got {}, librosa {})",
                    out[at], want[at]
                ));
            }
            case_err = case_err.max(err);
        }
        eprintln!(
            "golden {case:<20} {:>2} clips  shape {:?}  max |error| {case_err:.2e} dB",
            clips.len(),
            spec.row_shape()
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every golden clip through the batched path and the per-frame reference path:
/// within `PATHS_DB` of each other, and the reference within the librosa contract.
#[test]
fn batched_and_reference_paths_agree_on_every_golden_case() {
    let dir = golden_dir();
    let manifest = manifest();
    let cases = manifest["cases"].as_object().expect("manifest.cases");
    let mut batched_cases = 0;
    let mut worst = 0f64;
    for (case, entry) in cases {
        let cfg = Config::load(&dir.join(entry["config"].as_str().unwrap()))
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        let spec = cfg.spec;
        let plan = Plan::new(&spec);
        batched_cases += usize::from(plan.batch_level().is_some());
        let mut scratch = Scratch::new(&plan);
        let mut clip = vec![0f32; spec.clip_samples()];
        let mut fast = vec![0f32; spec.row_len()];
        let mut reference = vec![0f32; spec.row_len()];
        for (name, c) in entry["clips"].as_object().expect("clips") {
            let bytes = std::fs::read(dir.join(c["wav"].as_str().unwrap())).unwrap();
            melforge::decode::wav::decode(&bytes, spec.sample_rate, &mut clip).unwrap();
            plan.compute(&clip, &mut scratch, &mut fast);
            plan.compute_reference(&clip, &mut scratch, &mut reference);
            let (err, at) = max_error(&fast, &reference);
            assert!(
                err <= PATHS_DB,
                "{case}/{name}: batched {} vs reference {} at {at}",
                fast[at],
                reference[at]
            );
            worst = worst.max(err);
            let want = read_f32(&dir.join(c["expected"].as_str().unwrap()));
            let (err, at) = max_error(&reference, &want);
            assert!(
                err <= TOLERANCE_DB,
                "{case}/{name}: reference off by {err:e} at {at}"
            );
        }
    }
    assert!(batched_cases > 0, "no golden case takes the batched path");
    eprintln!("{batched_cases} batched cases, max |batched − reference| {worst:e} dB");
}

/// `build` on each case's input tree writes rows equal to librosa's output.
#[test]
fn build_output_matches_librosa_for_every_case() {
    let dir = golden_dir();
    let manifest = manifest();
    let cases = manifest["cases"].as_object().expect("manifest.cases");
    let mut worst = 0f64;
    for (case, entry) in cases {
        let cfg = Config::load(&dir.join(entry["config"].as_str().unwrap()))
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        let out = tempfile::tempdir().unwrap();
        let done = crate::common::build(&dir.join(case).join("input"), out.path(), &cfg);
        let clips = entry["clips"].as_object().expect("clips");
        assert_eq!(done.report.files_ok as usize, clips.len(), "{case}");
        let split = crate::common::read_split(&out.path().join("all.h5"));
        let row_len = cfg.spec.row_len();
        assert_eq!(split.mel.len(), clips.len() * row_len, "{case}");
        let rows = split.mel.as_slice().expect("contiguous");
        for c in clips.values() {
            // Manifest paths are `<case>/input/<kind>/<clip>.wav`; rows are keyed
            // by the path relative to the input tree.
            let wav = c["wav"].as_str().unwrap();
            let rel = wav.strip_prefix(&format!("{case}/input/")).unwrap();
            let i = split.path.iter().position(|p| p == rel).unwrap_or_else(|| {
                panic!("{case}: {rel} not among the written paths {:?}", split.path)
            });
            let want = read_f32(&dir.join(c["expected"].as_str().unwrap()));
            let (err, at) = max_error(&rows[i * row_len..(i + 1) * row_len], &want);
            assert!(err <= TOLERANCE_DB, "{case}/{rel}: {err:.3e} dB at {at}");
            worst = worst.max(err);
        }
    }
    eprintln!("golden build: max |error| over all cases {worst:.2e} dB");
}
