//! Parity with librosa 0.11 on committed fixtures (tests/golden/README.md).
//!
//! For every case in `tests/golden/manifest.json`: parse its config.toml with the
//! real config parser, decode every WAV with the real decoder (pad/trim included),
//! compute with `mel::Plan`, and compare with the float32 output librosa produced.
//! The contract (DESIGN.md "Mel definition") is 1e-3 dB; the per-case maximum
//! error is printed so it can be quoted (`cargo test --test golden_parity --
//! --nocapture`).

use std::path::{Path, PathBuf};

use melforge::config::Config;
use melforge::mel::{Plan, Scratch};

const TOLERANCE_DB: f64 = 1e-3;
const MIN_CASES: usize = 9;

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

#[test]
fn every_golden_case_matches_librosa() {
    let dir = golden_dir();
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("manifest.json")).expect("tests/golden/manifest.json"),
    )
    .expect("manifest is JSON");
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
            melforge::wav::decode(&bytes, spec.sample_rate, &mut clip)
                .unwrap_or_else(|e| panic!("{}: {e}", wav_path.display()));
            plan.compute(&clip, &mut scratch, &mut out);

            let want = read_f32(&dir.join(c["expected"].as_str().expect("expected path")));
            assert_eq!(want.len(), out.len(), "{case}/{name}: length");
            let (mut err, mut at) = (0f64, 0usize);
            for (i, (&g, &w)) in out.iter().zip(&want).enumerate() {
                // A NaN counts as an infinite error.
                let e = (f64::from(g) - f64::from(w)).abs();
                let e = if e.is_nan() { f64::INFINITY } else { e };
                if e > err {
                    (err, at) = (e, i);
                }
            }
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
