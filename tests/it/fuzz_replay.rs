//! The fuzz corpora replayed as ordinary tests (stable toolchain, no
//! libFuzzer): every file of `fuzz/corpus/<target>/` through the function
//! the fuzz target `<target>` calls (`melforge::fuzzing`), so the inputs
//! the fuzzer found and the seeds stay checked on every `scripts/test`.
//!
//! The targets are the `[[bin]]`s of fuzz/Cargo.toml: one without an entry
//! here, or without a corpus, fails the test, as does an entry without its
//! target.

use std::path::{Path, PathBuf};

/// A fuzz target's body: it panics where an invariant breaks.
type Body = fn(&[u8]);

/// Each fuzz target and the function it calls.
const TARGETS: &[(&str, Body)] = &[
    ("wav_parse", melforge::fuzzing::wav_parse),
    ("flac_clip", melforge::fuzzing::flac_clip),
    ("flac_seek", melforge::fuzzing::flac_seek),
    ("mp4_sections", melforge::fuzzing::mp4_sections),
    ("mp4_table", melforge::fuzzing::mp4_table),
    ("ogg_pages", melforge::fuzzing::ogg_pages),
    ("mp3_frames", melforge::fuzzing::mp3_frames),
    ("lossy_part", melforge::fuzzing::lossy_part),
    ("decode_file", melforge::fuzzing::decode_file),
    ("manifest", melforge::fuzzing::manifest),
    ("sidecar", melforge::app::serve::sidecar::fuzz_sidecar),
    ("tar_index", melforge::fuzzing::tar_index),
    ("parquet_audio", melforge::fuzzing::parquet_audio),
    ("decode_bytes", melforge::fuzzing::decode_bytes),
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The targets fuzz/Cargo.toml declares.
fn declared() -> Vec<String> {
    let text = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).unwrap();
    let doc: toml::Table = text.parse().unwrap();
    doc["bin"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap().to_owned())
        .collect()
}

/// A corpus folder's files, sorted; fails when it is missing or empty.
fn corpus(target: &str) -> Vec<PathBuf> {
    files_of(target, &fuzz_dir().join("corpus").join(target))
}

/// The files of `dir`, the corpus of `target`; fails when there are none.
fn files_of(target: &str, dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| {
            panic!(
                "the corpus of fuzz target {target} ({}): {e}",
                dir.display()
            )
        })
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "the corpus of fuzz target {target} ({}) is empty",
        dir.display()
    );
    files
}

#[test]
fn every_fuzz_target_is_replayed_and_has_a_corpus() {
    let mut declared = declared();
    let mut here: Vec<String> = TARGETS.iter().map(|(n, _)| n.to_string()).collect();
    declared.sort();
    here.sort();
    assert_eq!(
        declared, here,
        "the fuzz targets of fuzz/Cargo.toml and the ones replayed here"
    );
    for (name, _) in TARGETS {
        corpus(name);
    }
}

#[test]
fn every_corpus_file_passes_its_fuzz_target() {
    for (name, run) in TARGETS {
        for file in corpus(name) {
            let bytes = std::fs::read(&file).unwrap();
            let outcome = std::panic::catch_unwind(|| run(&bytes));
            assert!(
                outcome.is_ok(),
                "fuzz target {name} fails on {}",
                file.display()
            );
        }
    }
}

#[test]
fn a_missing_or_empty_corpus_fails_the_replay() {
    let d = tempfile::tempdir().unwrap();
    assert!(std::panic::catch_unwind(|| files_of("t", &d.path().join("none"))).is_err());
    assert!(std::panic::catch_unwind(|| files_of("t", d.path())).is_err());
    std::fs::write(d.path().join("seed"), b"x").unwrap();
    assert_eq!(files_of("t", d.path()).len(), 1);
}
