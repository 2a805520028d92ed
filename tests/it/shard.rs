//! Sharded builds (`build --shard K/N`) and `merge`: N shards merged equal one
//! single-node build (mel, label, path, label_names, every root attribute,
//! rejected.jsonl), virtual and `--copy`; h5py and scripts/check_h5.py read
//! the merged virtual files; merge refuses incomplete or incompatible shard
//! sets with a sentence.

use std::path::{Path, PathBuf};
use std::process::Command;

use melforge::app::build::{self, Options};
use melforge::app::merge::{self, shard::Shard};
use melforge::config::Config;

use crate::common::{self, put, read_split, wav_with};

/// A synthetic corpus plus rejects in two splits and a split (`TINY`) with two
/// files, fewer than most shard counts here.
fn corpus() -> tempfile::TempDir {
    let d = common::synth_corpus(23, 7);
    let some_wav = first_wav(&d.path().join("TRAINING"));
    let bytes = std::fs::read(some_wav).unwrap();
    put(d.path(), "TINY/x/a.wav", &bytes);
    put(d.path(), "TINY/y/b.wav", &bytes);
    put(d.path(), "TRAINING/leak/zz_truncated.wav", &bytes[..30]);
    let wrong_rate = wav_with(1, 1, 8000, 16, 2, &[0; 64]);
    put(d.path(), "TESTING/leak/aa_wrong_rate.wav", &wrong_rate);
    d
}

fn first_wav(dir: &Path) -> PathBuf {
    let mut all: Vec<PathBuf> = walk(dir);
    all.sort();
    all.into_iter().next().expect("a wav file")
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "wav") {
            out.push(p);
        }
    }
    out
}

fn shard_build(input: &Path, out: &Path, cfg: &Config, k: usize, n: usize) {
    let s = Some(Shard { index: k, count: n });
    build::build_shard(input, out, cfg, &Options::default(), s).unwrap();
}

fn build_all_shards(input: &Path, out: &Path, cfg: &Config, n: usize) {
    for k in 0..n {
        shard_build(input, out, cfg, k, n);
    }
}

fn split_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().into_string().unwrap();
            let stem = n.strip_suffix(".h5")?;
            (!stem.contains(".shard-")).then(|| stem.to_string())
        })
        .collect();
    v.sort();
    v
}

fn attrs_of(f: &hdf5::File) -> Vec<(String, merge::attrs::Value)> {
    merge::attrs::read_all(f).unwrap()
}

/// Every split of `merged` equals the one in `single`: rows, labels, paths,
/// label table and root attributes; and rejected.jsonl is byte-identical.
fn assert_same_as_single(single: &Path, merged: &Path) {
    let names = split_names(single);
    assert!(names.len() >= 4, "{names:?}");
    assert_eq!(split_names(merged), names);
    for split in &names {
        let a = read_split(&single.join(format!("{split}.h5")));
        let b = read_split(&merged.join(format!("{split}.h5")));
        assert_eq!(a.mel, b.mel, "{split}: mel");
        assert_eq!(a.label, b.label, "{split}: label");
        assert_eq!(a.path, b.path, "{split}: path");
        assert_eq!(a.label_names, b.label_names, "{split}: label_names");
        assert_eq!(attrs_of(&a.file), attrs_of(&b.file), "{split}: attributes");
    }
    let rej = |d: &Path| std::fs::read_to_string(d.join("rejected.jsonl")).unwrap();
    assert_eq!(rej(single), rej(merged));
    assert_eq!(rej(merged).lines().count(), 2);
}

fn is_virtual(file: &Path) -> bool {
    let f = hdf5::File::open(file).unwrap();
    let ds = f.dataset("mel").unwrap();
    // A virtual dataset has no chunking; a build's is chunked.
    ds.chunk().is_none() && ds.shape()[0] > 0
}

fn check_sharded_equals_single(n: usize) {
    let input = corpus();
    let cfg = common::config(2);
    let single = tempfile::tempdir().unwrap();
    common::build(input.path(), single.path(), &cfg);
    let out = tempfile::tempdir().unwrap();
    build_all_shards(input.path(), out.path(), &cfg, n);

    let r = merge::merge(out.path(), false).unwrap();
    assert_eq!((r.mode, r.shards, r.rejected), ("virtual", n, 2));
    assert!(is_virtual(&out.path().join("TRAINING.h5")));
    assert_same_as_single(single.path(), out.path());

    let r = merge::merge(out.path(), true).unwrap();
    assert_eq!((r.mode, r.rejected), ("copy", 2));
    assert!(!is_virtual(&out.path().join("TRAINING.h5")));
    // The copies stand alone: without the shards they still read the same.
    for e in std::fs::read_dir(out.path()).unwrap() {
        let p = e.unwrap().path();
        if p.to_str().unwrap().contains(".shard-") {
            std::fs::remove_file(p).unwrap();
        }
    }
    assert_same_as_single(single.path(), out.path());
}

#[test]
fn one_shard_merged_equals_a_single_build() {
    check_sharded_equals_single(1);
}

#[test]
fn three_shards_merged_equal_a_single_build() {
    check_sharded_equals_single(3);
}

/// TINY has 2 files: two of the four shards have no row of it.
#[test]
fn four_shards_merged_equal_a_single_build_with_a_split_smaller_than_n() {
    check_sharded_equals_single(4);
}

/// More shards than files: two of the four shards build nothing at all and
/// still write their (empty) files, so the merge is complete.
#[test]
fn shards_with_no_file_at_all_still_merge_into_a_single_build() {
    let src = corpus();
    let bytes = std::fs::read(first_wav(&src.path().join("TRAINING"))).unwrap();
    let input = tempfile::tempdir().unwrap();
    put(input.path(), "A/x/1.wav", &bytes);
    put(input.path(), "B/y/2.wav", &bytes[..40]);
    let cfg = common::config(2);
    let single = tempfile::tempdir().unwrap();
    common::build(input.path(), single.path(), &cfg);
    let out = tempfile::tempdir().unwrap();
    build_all_shards(input.path(), out.path(), &cfg, 4);
    let r = merge::merge(out.path(), false).unwrap();
    let rows: Vec<_> = r
        .outputs
        .iter()
        .map(|o| (o.split.as_str(), o.rows))
        .collect();
    assert_eq!((rows, r.rejected), (vec![("A", 1), ("B", 0)], 1));
    for split in ["A", "B"] {
        let a = read_split(&single.path().join(format!("{split}.h5")));
        let b = read_split(&out.path().join(format!("{split}.h5")));
        assert_eq!(
            (a.mel, a.label, a.path),
            (b.mel, b.label, b.path),
            "{split}"
        );
    }
    let rej = |d: &Path| std::fs::read_to_string(d.join("rejected.jsonl")).unwrap();
    assert_eq!(rej(single.path()), rej(out.path()));
}

#[test]
fn every_shard_has_every_split_and_the_whole_label_table() {
    let input = corpus();
    let out = tempfile::tempdir().unwrap();
    build_all_shards(input.path(), out.path(), &common::config(2), 4);
    let mut rows = 0;
    let mut tables = Vec::new();
    for k in 0..4 {
        let s = read_split(&out.path().join(format!("TINY.shard-{k}-of-4.h5")));
        rows += s.path.len();
        tables.push(s.label_names);
    }
    assert_eq!(rows, 2);
    assert!(tables.windows(2).all(|w| w[0] == w[1]));
    assert!(tables[0].contains(&"x".to_string()) && tables[0].contains(&"leak".to_string()));
    for k in 0..4 {
        assert!(
            out.path()
                .join(format!("rejected.shard-{k}-of-4.jsonl"))
                .is_file()
        );
    }
}

#[test]
fn h5py_and_check_h5_read_the_merged_virtual_files() {
    let input = corpus();
    let cfg = common::config(2);
    let single = tempfile::tempdir().unwrap();
    common::build(input.path(), single.path(), &cfg);
    let out = tempfile::tempdir().unwrap();
    build_all_shards(input.path(), out.path(), &cfg, 3);
    merge::merge(out.path(), false).unwrap();

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/check_h5.py");
    let check = Command::new("python3")
        .arg(&script)
        .arg(out.path())
        .output()
        .expect("python3 runs");
    assert!(
        check.status.success(),
        "check_h5.py: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    // Read from another working directory: the mapping names the shards
    // relative to the merged file.
    let code = r#"
import sys, h5py, numpy as np
a_dir, b_dir = sys.argv[1], sys.argv[2]
for split in ("TESTING", "TINY", "TRAINING", "VALIDATION"):
    with h5py.File(f"{a_dir}/{split}.h5") as a, h5py.File(f"{b_dir}/{split}.h5") as b:
        assert b["mel"].is_virtual and b["path"].is_virtual, split
        assert np.array_equal(a["mel"][:], b["mel"][:]), split
        assert np.array_equal(a["label"][:], b["label"][:]), split
        assert list(a["path"].asstr()[:]) == list(b["path"].asstr()[:]), split
        assert list(a.attrs["label_names"]) == list(b.attrs["label_names"]), split
        assert b["mel"][1:3].shape[0] == min(2, max(0, b["mel"].shape[0] - 1)), split
print("ok")
"#;
    let run = Command::new("python3")
        .current_dir("/")
        .arg("-c")
        .arg(code)
        .arg(single.path())
        .arg(out.path())
        .output()
        .expect("python3 runs");
    assert!(
        run.status.success() && String::from_utf8_lossy(&run.stdout).trim() == "ok",
        "h5py: {}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    // A virtual file whose shard is gone would read fill values: check_h5.py
    // names the missing source.
    std::fs::remove_file(out.path().join("TRAINING.shard-1-of-3.h5")).unwrap();
    let check = Command::new("python3")
        .arg(&script)
        .arg(out.path())
        .output()
        .expect("python3 runs");
    let err = String::from_utf8_lossy(&check.stderr);
    assert!(
        !check.status.success()
            && err.contains("maps TRAINING.shard-1-of-3.h5, which does not exist"),
        "{err}"
    );
}

/// Builds all 3 shards of `corpus()` into a fresh directory.
fn three_shards() -> (tempfile::TempDir, tempfile::TempDir) {
    let input = corpus();
    let out = tempfile::tempdir().unwrap();
    build_all_shards(input.path(), out.path(), &common::config(2), 3);
    (input, out)
}

fn refusal(dir: &Path) -> String {
    let e = merge::merge(dir, false).expect_err("merge must refuse");
    assert!(
        !dir.join("TRAINING.h5").exists() && !dir.join("rejected.jsonl").exists(),
        "a refused merge writes nothing"
    );
    e.to_string()
}

#[test]
fn merge_refuses_an_empty_directory() {
    let d = tempfile::tempdir().unwrap();
    assert!(refusal(d.path()).starts_with("no shard files"));
}

#[test]
fn merge_refuses_a_missing_shard() {
    let (_input, out) = three_shards();
    std::fs::remove_file(out.path().join("TRAINING.shard-1-of-3.h5")).unwrap();
    let e = refusal(out.path());
    assert!(
        e.contains("split `TRAINING`: shard(s) 1 of 3 are missing"),
        "{e}"
    );
}

#[test]
fn merge_refuses_a_missing_rejection_log() {
    let (_input, out) = three_shards();
    std::fs::remove_file(out.path().join("rejected.shard-2-of-3.jsonl")).unwrap();
    let e = refusal(out.path());
    assert!(e.contains("shard(s) 2 of 3 are missing"), "{e}");
}

#[test]
fn merge_refuses_mixed_shard_counts() {
    let (input, out) = three_shards();
    shard_build(input.path(), out.path(), &common::config(2), 0, 2);
    let e = refusal(out.path());
    assert!(e.contains("mixes shards of different builds"), "{e}");
}

#[test]
fn merge_refuses_a_copied_shard_as_a_duplicate() {
    let (_input, out) = three_shards();
    let p = |k: usize| out.path().join(format!("TRAINING.shard-{k}-of-3.h5"));
    std::fs::copy(p(0), p(1)).unwrap();
    let e = refusal(out.path());
    assert!(
        e.contains("holds shard \"0/3\"") && e.contains("duplicate shard"),
        "{e}"
    );
}

#[test]
fn merge_refuses_a_second_spelling_of_a_shard() {
    let (_input, out) = three_shards();
    let p = out.path();
    std::fs::copy(
        p.join("TRAINING.shard-1-of-3.h5"),
        p.join("TRAINING.shard-01-of-3.h5"),
    )
    .unwrap();
    let e = refusal(out.path());
    assert!(
        e.contains("TRAINING.shard-01-of-3.h5 looks like a shard file"),
        "{e}"
    );
}

#[test]
fn merge_refuses_shards_with_different_parameters() {
    let (input, out) = three_shards();
    let mut cfg = common::config(2);
    cfg.spec.n_mels = 16;
    shard_build(input.path(), out.path(), &cfg, 2, 3);
    let e = refusal(out.path());
    assert!(e.contains("differ in attribute `n_mels` (32 vs 16)"), "{e}");
}

#[test]
fn merge_refuses_shards_with_different_dtypes() {
    let (input, out) = three_shards();
    let mut cfg = common::config(2);
    cfg.output.dtype = melforge::writer::Dtype::Float16;
    shard_build(input.path(), out.path(), &cfg, 1, 3);
    let e = refusal(out.path());
    assert!(
        e.contains("attribute `dtype` (\"float32\" vs \"float16\")"),
        "{e}"
    );
}

#[test]
fn merge_refuses_shards_with_different_label_tables() {
    let (input, out) = three_shards();
    // The tree grew a label after shards 0 and 1 were built.
    let bytes = std::fs::read(first_wav(&input.path().join("TRAINING"))).unwrap();
    put(input.path(), "TRAINING/zzz_new/c.wav", &bytes);
    shard_build(input.path(), out.path(), &common::config(2), 2, 3);
    let e = refusal(out.path());
    assert!(e.contains("have different label tables"), "{e}");
}

#[test]
fn merge_refuses_overlapping_shards() {
    let (input, out) = three_shards();
    // The tree changed (files added before shard 1's first row) between
    // shard builds, without a new label: shard 1's rows now repeat shard 0's.
    let training = input.path().join("TRAINING");
    let mut wavs = walk(&training);
    wavs.sort();
    let bytes = std::fs::read(&wavs[0]).unwrap();
    let label_dir = wavs[0].parent().unwrap().to_path_buf();
    for i in 0..12 {
        std::fs::write(label_dir.join(format!("0000_{i:02}.wav")), &bytes).unwrap();
    }
    shard_build(input.path(), out.path(), &common::config(2), 1, 3);
    let e = refusal(out.path());
    assert!(e.contains("the shards overlap or are out of order"), "{e}");
}

/// Runs scripts/check_deploy.py on `dir`; (success, stdout + stderr).
pub(crate) fn check_deploy(dir: &Path) -> (bool, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(root.join("scripts/check_deploy.py"))
        .arg(dir)
        .output()
        .expect("python3 runs");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// A copy of deploy/kubernetes with `edit` applied to one manifest.
fn manifests_with(file: &str, edit: impl Fn(&str) -> String) -> tempfile::TempDir {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes");
    let d = tempfile::tempdir().unwrap();
    for name in ["pvc.yaml", "build-job.yaml", "merge-job.yaml"] {
        let text = std::fs::read_to_string(src.join(name)).unwrap();
        let text = if name == file { edit(&text) } else { text };
        std::fs::write(d.path().join(name), text).unwrap();
    }
    d
}

#[test]
fn kubernetes_manifests_pass_the_schema_and_wiring_checks() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes");
    let (ok, text) = check_deploy(&dir);
    assert!(ok, "{text}");
}

#[test]
fn kubernetes_checks_catch_miswired_manifests() {
    type Case = (&'static str, fn(&str) -> String, &'static str);
    let cases: [Case; 5] = [
        (
            "build-job.yaml",
            |t| t.replace("\"/data/input\"", "\"/srv/input\""),
            "'/srv/input' is not on the mounted claim",
        ),
        (
            "build-job.yaml",
            |t| t.replace("  parallelism: 4", "  parallelism: 3"),
            "must all be N",
        ),
        (
            "build-job.yaml",
            |t| t.replace("$(JOB_COMPLETION_INDEX)/$(MELFORGE_SHARDS)", "0/4"),
            "--shard is '0/4'",
        ),
        (
            "merge-job.yaml",
            |t| t.replace("claimName: melforge-data", "claimName: other"),
            "does not mount the claim",
        ),
        (
            "build-job.yaml",
            |t| t.replace("  backoffLimit: 8", "  backoffLimit: 8\n  retries: 3"),
            "'retries' was unexpected",
        ),
    ];
    for (file, edit, expect) in cases {
        let d = manifests_with(file, edit);
        let (ok, text) = check_deploy(d.path());
        assert!(
            !ok && text.contains(expect),
            "{file}: expected {expect:?} in {text}"
        );
    }
}

/// `submit --input` puts manifests in the build Job's arguments in place of
/// the default tree (checked on the manifests it would apply: `--dry-run`),
/// and refuses a path the pods cannot see.
#[test]
fn kubernetes_submit_names_manifests_as_the_input() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let d = tempfile::tempdir().unwrap();
    let submit = |args: &[&str]| {
        Command::new(root.join("deploy/kubernetes/submit"))
            .args(args)
            .output()
            .expect("submit runs")
    };
    let dir = d.path().to_str().unwrap();
    let out = submit(&[
        "3",
        "--input",
        "/data/lists/train.jsonl",
        "--input",
        "/data/lists/dev cuts.jsonl.gz",
        "--dry-run",
        dir,
    ]);
    assert!(out.status.success(), "{out:?}");
    let job = std::fs::read_to_string(d.path().join("build-job.yaml")).unwrap();
    let args: Vec<&str> = job
        .lines()
        .skip_while(|l| !l.contains("args:"))
        .skip(1)
        .take_while(|l| l.trim_start().starts_with("- "))
        .map(|l| l.trim().trim_start_matches("- ").trim_matches('"'))
        .collect();
    assert_eq!(
        args,
        [
            "build",
            "/data/lists/train.jsonl",
            "/data/lists/dev cuts.jsonl.gz",
            "--out",
            "/data/out",
            "--shard",
            "$(JOB_COMPLETION_INDEX)/$(MELFORGE_SHARDS)"
        ]
    );
    let (ok, text) = check_deploy(d.path());
    assert!(ok, "{text}");
    let out = submit(&["3", "--input", "/home/me/train.jsonl", "--dry-run", dir]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("is not on the claim"), "{err}");
}
