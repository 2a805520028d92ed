//! `build --progress json`: one JSON object per line on stderr with a fixed
//! set of fields (the Python API and orchestrators parse them; fields may be
//! added, never renamed or removed: this test pins the set).

use std::process::Command;

use crate::common::*;

const FIELDS: [&str; 8] = [
    "bytes_read",
    "elapsed_s",
    "eta_s",
    "event",
    "files_done",
    "files_per_s",
    "files_total",
    "rejected",
];

#[test]
fn progress_json_events_have_the_pinned_fields_and_count_up_to_the_total() {
    let corpus = synth_corpus(200, 8);
    // One file that is rejected, so `rejected` counts.
    put(
        corpus.path(),
        "TESTING/LEAK/broken.wav",
        b"RIFF\x04\x00\x00\x00WAVE",
    );
    let out = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_melforge"))
        .args([
            "--log-format",
            "json",
            "build",
            "--progress",
            "json",
            "--out",
        ])
        .arg(out.path())
        .arg(corpus.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let events: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("every stderr line is JSON"))
        .filter(|v| v["event"] == "progress")
        .collect();
    assert!(events.len() >= 2, "a first and a last event: {stderr}");
    let mut last_done = 0;
    for e in &events {
        let mut keys: Vec<&str> = e.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        keys.sort();
        assert_eq!(keys, FIELDS, "{e}");
        assert_eq!(e["files_total"], 201);
        let done = e["files_done"].as_u64().unwrap();
        assert!(done >= last_done, "{e}");
        last_done = done;
    }
    let end = events.last().unwrap();
    assert_eq!(end["files_done"], 201, "{end}");
    assert_eq!(end["rejected"], 1, "{end}");
    assert!(end["bytes_read"].as_u64().unwrap() > 0, "{end}");
    assert_eq!(end["eta_s"], 0.0, "{end}");
}

#[test]
fn no_progress_events_without_the_flag() {
    let corpus = synth_corpus(10, 8);
    let out = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_melforge"))
        .args(["build", "--out"])
        .arg(out.path())
        .arg(corpus.path())
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(!String::from_utf8_lossy(&o.stderr).contains("\"event\":\"progress\""));
}
