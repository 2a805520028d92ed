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

/// Kaldi fbank in compact storage: Blosc chunks, the last rewritten at
/// every flush (`writer::append::store`).
const COMPACT: &str = "[features]\nrecipe = \"kaldi-fbank\"\n[output]\nstorage = \"compact\"\n";

both_stages!(kaldi_rows_survive_kill_9_and_equal_a_cpu_build);
fn kaldi_rows_survive_kill_9_and_equal_a_cpu_build(stage: Stage) {
    rows_survive_kill_9_and_equal_a_cpu_build(stage, "[features]\nrecipe = \"kaldi-fbank\"\n");
}

/// Compact rows through kill -9 equal a compact build's bit for bit (the
/// CPU stage: the CUDA stage's rows differ from the CPU's within the recipe
/// tolerance, which the grid may turn into a tick).
#[test]
fn compact_rows_survive_kill_9_and_equal_a_compact_build() {
    rows_survive_kill_9_and_equal_a_cpu_build(Stage::Cpu, COMPACT);
}

fn rows_survive_kill_9_and_equal_a_cpu_build(stage: Stage, recipe: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let corpus_dir = tmp.path().join("speech");
    let corpus = speech(&corpus_dir, 30, 8);
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
    same_rows_as_a_cpu_build(&got, tmp.path(), recipe, &corpus_dir, stage);
}

/// Asserts that `got` (serve's rows by path, from `stage`, of torchaudio's
/// default kaldi-fbank) equals what `melforge build --backend cpu` of
/// `corpus` under `recipe` writes: bit for bit from the CPU stage, within
/// docs/FORMAT.md's tolerance from the CUDA stage (one frame at a time, the
/// CPU workers in SIMD lanes: `common::kaldi_rows_close`).
fn same_rows_as_a_cpu_build(
    got: &std::collections::BTreeMap<String, Vec<f32>>,
    tmp: &Path,
    recipe: &str,
    corpus: &Path,
    stage: Stage,
) {
    let cfg = tmp.join("recipe.toml");
    std::fs::write(&cfg, recipe).unwrap();
    let out = tmp.join("built");
    let o = Command::new(BIN)
        .env_remove(melforge::compute::HOST_DOUBLE_ENV)
        .args(["build", "--backend", "cpu", "--config"])
        .arg(&cfg)
        .arg("--out")
        .arg(&out)
        .arg(corpus)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want = crate::common::frame_rows(&out);
    for (p, row) in got {
        if stage == Stage::CudaDouble {
            let close = crate::common::kaldi_rows_close("kaldi-fbank", 23, row, &want[p]);
            close.unwrap_or_else(|e| panic!("{p}: serve's row differs from the build's: {e}"));
            continue;
        }
        let same = row.len() == want[p].len()
            && row
                .iter()
                .zip(&want[p])
                .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{p}: serve's row differs from the build's");
    }
}

both_stages!(a_recording_over_the_size_limit_is_streamed_once_through_kill_9);
/// A recording over `io.max_file_bytes` dropped for serve is computed in
/// pieces on the append thread; serve is killed with SIGKILL while it may be
/// half-way through the row, and after the restart the file has exactly one
/// row, equal bit for bit to a build that read the file whole.
fn a_recording_over_the_size_limit_is_streamed_once_through_kill_9(stage: Stage) {
    long_recording_streamed_once(stage, "[features]\nrecipe = \"kaldi-fbank\"\n");
}

/// The same in compact storage: the long row's whole chunks written as it
/// goes, then refused by the kill and begun again.
#[test]
fn a_long_recording_in_compact_storage_is_streamed_once_through_kill_9() {
    long_recording_streamed_once(Stage::Cpu, COMPACT);
}

fn long_recording_streamed_once(stage: Stage, recipe: &str) {
    use crate::manifest::{pcm16, signal};
    let tmp = tempfile::tempdir().unwrap();
    let corpus_dir = tmp.path().join("long");
    let files = [
        ("x/long.wav", pcm16(&signal(16_000 * 900, 1, 21), 1, 16_000)),
        ("x/short.wav", pcm16(&signal(16_000 * 4, 1, 22), 1, 16_000)),
    ];
    for (rel, bytes) in &files {
        crate::common::put(&corpus_dir, rel, bytes);
    }
    let limit = "[io]\nmax_file_bytes = 1048576\n";
    let mut svc = Svc::with_stage(stage, 50, &format!("{recipe}{limit}"));
    svc.start();
    svc.drop_file(files[0].0, &files[0].1);
    std::thread::sleep(std::time::Duration::from_millis(400));
    svc.kill9();
    svc.start();
    svc.drop_file(files[1].0, &files[1].1);
    svc.wait_rows(2);
    svc.shutdown();
    let got = crate::common::frame_rows(&svc.out);
    assert_eq!(
        got.keys().cloned().collect::<Vec<_>>(),
        ["x/long.wav", "x/short.wav"],
        "every file exactly once"
    );
    same_rows_as_a_cpu_build(&got, tmp.path(), recipe, &corpus_dir, stage);
}
