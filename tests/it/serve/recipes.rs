//! serve with the variable-length recipes: speech files dropped into a
//! service computing Kaldi fbank (CPU workers, or the CUDA stage over the host
//! double), killed with SIGKILL mid-stream and restarted, give every file
//! exactly one row, each equal to a `melforge build --backend cpu` of the
//! same files with the same recipe.

use std::path::Path;
use std::process::Command;

use super::harness::{self, *};

/// `melforge synth --kind speech` into `dir`: (relative path, bytes), sorted.
fn speech(dir: &Path, files: u64, seed: u64) -> Vec<(String, Vec<u8>)> {
    let o = Command::new(BIN)
        .args(["synth", "--kind", "speech", "--files"])
        .arg(files.to_string())
        .args(["--seed", &seed.to_string()])
        .arg(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_str().unwrap().to_string();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

both_stages!(kaldi_rows_survive_kill_9_and_equal_a_cpu_build);
fn kaldi_rows_survive_kill_9_and_equal_a_cpu_build(stage: Stage) {
    let tmp = tempfile::tempdir().unwrap();
    let corpus_dir = tmp.path().join("speech");
    let corpus = speech(&corpus_dir, 30, 8);
    let recipe = "[features]\nrecipe = \"kaldi-fbank\"\n";
    let mut svc = Svc::with_stage(stage, 50, recipe);
    svc.start();
    for (i, (rel, bytes)) in corpus.iter().enumerate() {
        svc.drop_file(rel, bytes);
        if i == 17 {
            svc.kill9();
            svc.start();
        }
    }
    let s = svc.wait_rows(corpus.len() as u64);
    assert_eq!(s["backend"], stage.backend(), "{s}");
    svc.shutdown();
    let got = crate::common::frame_rows(&svc.out);
    assert_eq!(
        got.keys().cloned().collect::<Vec<_>>(),
        corpus.iter().map(|(r, _)| r.clone()).collect::<Vec<_>>(),
        "every file exactly once"
    );
    // The same files built on the CPU.
    let cfg = tmp.path().join("recipe.toml");
    std::fs::write(&cfg, recipe).unwrap();
    let out = tmp.path().join("built");
    let o = Command::new(BIN)
        .env_remove(melforge::compute::HOST_DOUBLE_ENV)
        .args(["build", "--backend", "cpu", "--config"])
        .arg(&cfg)
        .arg("--out")
        .arg(&out)
        .arg(&corpus_dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want = crate::common::frame_rows(&out);
    for (p, row) in &got {
        let same = row.len() == want[p].len()
            && row
                .iter()
                .zip(&want[p])
                .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{p}: serve's row differs from the build's");
    }
}
