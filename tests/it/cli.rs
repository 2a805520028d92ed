//! The `melforge` binary as users run it: exit codes, messages, JSON.

use std::process::Command;

use crate::common::*;

fn melforge() -> Command {
    Command::new(env!("CARGO_BIN_EXE_melforge"))
}

#[test]
fn check_config_names_the_bad_key_and_line() {
    let d = tempfile::tempdir().unwrap();
    let f = put(d.path(), "bad.toml", b"[mel]\nn_mels = 32\nfmax = 5000.0\n");
    let o = melforge().arg("check-config").arg(&f).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad.toml:3") && err.contains("mel.fmax"),
        "{err}"
    );

    let ok = melforge()
        .arg("check-config")
        .arg("config/melforge.toml")
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("(79, 3, 32, 1), 237 segments"));
}

#[test]
fn strict_turns_a_rejection_into_exit_1_and_json_reports_it() {
    let corpus = synth_corpus(5, 1);
    put(corpus.path(), "TESTING/LEAK/zz.wav", b"not a wav");
    let out = tempfile::tempdir().unwrap();
    let o = melforge()
        .args(["build", "--json", "--out"])
        .arg(out.path())
        .arg(corpus.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["report"]["files_ok"], 5);
    assert_eq!(j["rejected"][0]["path"], "TESTING/LEAK/zz.wav");
    assert_eq!(j["backend"], "cpu");

    let o = melforge()
        .args(["build", "--strict", "--out"])
        .arg(out.path())
        .arg(corpus.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("zz.wav"));
}

#[test]
fn missing_input_and_cuda_backend_fail_clearly() {
    let out = tempfile::tempdir().unwrap();
    let o = melforge()
        .args(["build", "/nonexistent/corpus", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/corpus"));

    let corpus = synth_corpus(2, 1);
    let o = melforge()
        .args(["build", "--backend", "cuda", "--out"])
        .arg(out.path())
        .arg(corpus.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("CUDA"));
}
