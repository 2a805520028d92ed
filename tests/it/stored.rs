//! Stored corpora end to end: WebDataset shards and NeMo tarred audio
//! build to the rows of the same files built loose, bit for bit, with the
//! samples' metadata; a sharded build of shards merges to the whole.
//!
//! The bad-input cases and parquet are covered with the planner
//! (`plan::stored`, `plan::parquet` unit tests) and, against files written
//! by `webdataset` and `pyarrow` themselves, by `scripts/parity_stored.py`.

use std::path::{Path, PathBuf};
use std::process::Command;

use melforge::app::build::{self, Input, Options};
use melforge::app::merge::{self, shard::Shard};

use crate::manifest::{kaldi, pcm16, rows, signal};

/// `n` WAVs of 1–3 s at 16 kHz: (key, bytes).
fn utterances(n: usize) -> Vec<(String, Vec<u8>)> {
    utterances_at(n, 16_000)
}

/// `n` WAVs of 1–3 s at `rate` Hz.
fn utterances_at(n: usize, rate: u32) -> Vec<(String, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let len = rate as usize + (rate as usize / 2) * (i % 5);
            let wav = pcm16(&signal(len, 1, i as u32 + 1), 1, rate);
            (format!("utt{i:03}"), wav)
        })
        .collect()
}

/// A tar shard at `path` of `members` (name, bytes).
fn tar_of(path: &Path, members: &[(String, Vec<u8>)]) {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in members {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, name, data.as_slice()).unwrap();
    }
    std::fs::write(path, b.into_inner().unwrap()).unwrap();
}

/// The same utterances loose in `tree/train/<key>.wav`, and as 3
/// WebDataset shards with a `.json` and `.cls` sibling each.
fn corpus(dir: &Path, n: usize) -> Vec<(String, Vec<u8>)> {
    corpus_of(dir, utterances(n))
}

fn corpus_of(dir: &Path, utts: Vec<(String, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
    let n = utts.len();
    let tree = dir.join("tree/train/all");
    std::fs::create_dir_all(&tree).unwrap();
    for (key, wav) in &utts {
        std::fs::write(tree.join(format!("{key}.wav")), wav).unwrap();
    }
    for (s, chunk) in utts.chunks(n.div_ceil(3)).enumerate() {
        let mut members = Vec::new();
        for (i, (key, wav)) in chunk.iter().enumerate() {
            members.push((format!("{key}.wav"), wav.clone()));
            let json = format!(
                "{{\"speaker\": \"s{}\", \"text\": \"utterance {key}\"}}",
                i % 2
            );
            members.push((format!("{key}.json"), json.into_bytes()));
            members.push((format!("{key}.cls"), format!("{}", i % 3).into_bytes()));
        }
        tar_of(&dir.join(format!("train-{s:06}.tar")), &members);
    }
    utts
}

fn build(input: &Input, out: &Path, shard: Option<Shard>) -> build::Outcomes {
    build::build_input(input, out, &kaldi(), &Options::default(), shard).unwrap()
}

fn key_of(path: &str) -> &str {
    let name = path.rsplit('/').next().unwrap();
    name.split('.').next().unwrap()
}

#[test]
fn webdataset_shards_build_the_loose_files_rows_with_their_siblings() {
    let dir = tempfile::tempdir().unwrap();
    let utts = corpus(dir.path(), 14);
    let tree = build(
        &Input::Tree(dir.path().join("tree")),
        &dir.path().join("out-tree"),
        None,
    );
    assert_eq!(tree.report.files_ok, 14);
    let pattern = format!("{}/train-{{000000..000002}}.tar", dir.path().display());
    let input = Input::resolve(&[PathBuf::from(&pattern)], None).unwrap();
    assert!(matches!(&input, Input::Stored(sets) if sets[0].split == "train"));
    let out = dir.path().join("out-wds");
    let done = build(&input, &out, None);
    assert_eq!(done.report.files_ok, 14);
    assert!(done.rejected.is_empty(), "{:?}", done.rejected);
    let planned = done.planned.unwrap();
    let shards: u64 = (0..3)
        .map(|s| {
            std::fs::metadata(dir.path().join(format!("train-{s:06}.tar")))
                .unwrap()
                .len()
        })
        .sum();
    // The readers read the audio members once; the planner headers and siblings.
    let audio: u64 = utts.iter().map(|(_, w)| w.len() as u64).sum();
    // Exactly the members when read through the page cache; with O_DIRECT
    // (a cold cache) each range's blocks, at most two more per member.
    let read = done.report.bytes_read;
    assert!(
        read >= audio && read < audio + 14 * 2 * 4096,
        "{read} of {audio}"
    );
    assert!(planned.bytes_read < shards / 10, "{planned:?} of {shards}");

    let loose = rows(&dir.path().join("out-tree/train.h5"));
    let stored = rows(&out.join("train.h5"));
    assert_eq!(stored.rows.len(), 14);
    for (i, path) in stored.path.iter().enumerate() {
        let key = key_of(path);
        let j = loose.path.iter().position(|p| key_of(p) == key).unwrap();
        assert_eq!(stored.rows[i], loose.rows[j], "row of {key}");
        assert!(path.starts_with("train-00000") && path.ends_with(&format!("/{key}.wav")));
    }
    let meta = &stored.meta_of(0);
    assert_eq!(meta["shard"], "train-000000.tar");
    assert_eq!(meta["key"], "utt000");
    assert_eq!(meta["json"]["speaker"], "s0");
    assert_eq!(meta["cls"], 0);
    // Positions restart in each shard, so there is no `line` to merge by.
    assert!(stored.line_of_all().is_empty());
}

#[test]
fn a_sharded_build_of_shards_merges_to_the_whole() {
    let dir = tempfile::tempdir().unwrap();
    corpus(dir.path(), 10);
    let pattern = format!("{}/train-{{000000..000002}}.tar", dir.path().display());
    let input = Input::resolve(&[PathBuf::from(&pattern)], None).unwrap();
    let whole = dir.path().join("whole");
    build(&input, &whole, None);
    let out = dir.path().join("sharded");
    for k in 0..2 {
        build(&input, &out, Some(Shard { index: k, count: 2 }));
    }
    // Whole tar files per shard: shard 0 takes train-000000.tar alone.
    let first = rows(&out.join("train.shard-0-of-2.h5"));
    assert!(
        first
            .path
            .iter()
            .all(|p| p.starts_with("train-000000.tar/"))
    );
    merge::merge(&out, true).unwrap();
    let (a, b) = (rows(&whole.join("train.h5")), rows(&out.join("train.h5")));
    assert_eq!(a.path, b.path);
    assert_eq!(a.rows, b.rows);
    assert_eq!(
        (0..a.rows.len()).map(|i| a.meta_of(i)).collect::<Vec<_>>(),
        (0..b.rows.len()).map(|i| b.meta_of(i)).collect::<Vec<_>>()
    );
}

#[test]
fn nemo_tarred_audio_reads_members_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let utts = utterances(6);
    let loose = dir.path().join("loose");
    std::fs::create_dir_all(&loose).unwrap();
    let mut tarred = String::new();
    let mut plain = String::new();
    for (s, chunk) in utts.chunks(3).enumerate() {
        let members: Vec<(String, Vec<u8>)> = chunk
            .iter()
            .map(|(k, w)| (format!("{k}.wav"), w.clone()))
            .collect();
        tar_of(&dir.path().join(format!("audio_{s}.tar")), &members);
        for (k, w) in chunk {
            std::fs::write(loose.join(format!("{k}.wav")), w).unwrap();
            let frames = (w.len() - 44) / 2;
            let d = frames as f64 / 16_000.0;
            // One whole member, and a segment of it.
            tarred.push_str(&format!(
                "{{\"audio_filepath\": \"{k}.wav\", \"duration\": {d}, \"shard_id\": {s}}}\n\
                 {{\"audio_filepath\": \"{k}.wav\", \"offset\": 0.25, \"duration\": 0.5, \"shard_id\": {s}}}\n"
            ));
            plain.push_str(&format!(
                "{{\"audio_filepath\": \"loose/{k}.wav\", \"duration\": {d}, \"shard_id\": {s}}}\n\
                 {{\"audio_filepath\": \"loose/{k}.wav\", \"offset\": 0.25, \"duration\": 0.5, \"shard_id\": {s}}}\n"
            ));
        }
    }
    tarred.push_str("{\"audio_filepath\": \"nowhere.wav\", \"duration\": 1.0, \"shard_id\": 1}\n");
    let m_tarred = dir.path().join("train.json");
    std::fs::write(&m_tarred, &tarred).unwrap();
    let plain_dir = dir.path().join("plain");
    std::fs::create_dir_all(&plain_dir).unwrap();
    std::fs::rename(&loose, plain_dir.join("loose")).unwrap();
    let m_plain = plain_dir.join("train.json");
    std::fs::write(&m_plain, &plain).unwrap();

    let input = Input::Tarred {
        manifests: vec![m_tarred],
        shards: format!("{}/audio_{{0..1}}.tar", dir.path().display()),
    };
    let done = build(&input, &dir.path().join("out-t"), None);
    assert_eq!(done.report.files_ok, 12);
    assert_eq!(done.rejected.len(), 1);
    assert_eq!(done.rejected[0].line, Some(13));
    assert!(
        done.rejected[0]
            .reason
            .contains("has no member `nowhere.wav`")
    );
    build(
        &Input::Manifests(vec![m_plain]),
        &dir.path().join("out-p"),
        None,
    );
    let (t, p) = (
        rows(&dir.path().join("out-t/train.h5")),
        rows(&dir.path().join("out-p/train.h5")),
    );
    assert_eq!(t.rows, p.rows);
    assert_eq!(t.meta_of(3)["shard_id"], 0);
    // The written-back manifest names each line's row.
    let back = std::fs::read_to_string(dir.path().join("out-t/train.jsonl")).unwrap();
    assert_eq!(back.lines().count(), 12);
    assert!(back.lines().nth(4).unwrap().contains("\"features_row\": 4"));
}

/// deploy/kubernetes with a WebDataset pattern as the input: the Indexed
/// build Job's arguments, as `submit --dry-run` writes them, run here for
/// each completion index with the claim's `/data` at a temporary folder,
/// then the merge Job's: the merged split equals a build of the whole.
#[test]
fn kubernetes_runs_a_sharded_webdataset_build() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(data.path().join("wds")).unwrap();
    // At the default recipe's 4096 Hz: the pods run without a config.
    corpus_of(&data.path().join("wds"), utterances_at(9, 4096));
    let dry = tempfile::tempdir().unwrap();
    let out = Command::new(root.join("deploy/kubernetes/submit"))
        .args([
            "3",
            "--input",
            "/data/wds/train-{000000..000002}.tar",
            "--dry-run",
        ])
        .arg(dry.path())
        .output()
        .expect("submit runs");
    assert!(out.status.success(), "{out:?}");
    let (ok, text) = crate::shard::check_deploy(dry.path());
    assert!(ok, "{text}");
    let job = std::fs::read_to_string(dry.path().join("build-job.yaml")).unwrap();
    let args: Vec<String> = job
        .lines()
        .skip_while(|l| !l.contains("args:"))
        .skip(1)
        .take_while(|l| l.trim_start().starts_with("- "))
        .map(|l| {
            l.trim()
                .trim_start_matches("- ")
                .trim_matches('"')
                .to_string()
        })
        .collect();
    assert_eq!(args[1], "/data/wds/train-{000000..000002}.tar");
    let here = data.path().to_str().unwrap();
    for k in 0..3 {
        let pod_args: Vec<String> = args
            .iter()
            .map(|a| {
                a.replace("/data", here)
                    .replace("$(JOB_COMPLETION_INDEX)", &k.to_string())
                    .replace("$(MELFORGE_SHARDS)", "3")
            })
            .collect();
        let status = Command::new(env!("CARGO_BIN_EXE_melforge"))
            .args(["--log-level", "warn"])
            .args(&pod_args)
            .status()
            .unwrap();
        assert!(status.success(), "pod {k}: {pod_args:?}");
    }
    let status = Command::new(env!("CARGO_BIN_EXE_melforge"))
        .args(["--log-level", "warn", "merge"])
        .arg(data.path().join("out"))
        .status()
        .unwrap();
    assert!(status.success());
    let pattern = format!("{here}/wds/train-{{000000..000002}}.tar");
    let input = Input::resolve(&[PathBuf::from(pattern)], None).unwrap();
    let whole = data.path().join("whole");
    build::build_input(
        &input,
        &whole,
        &melforge::config::Config::default(),
        &Options::default(),
        None,
    )
    .unwrap();
    let a = hdf5::File::open(whole.join("train.h5")).unwrap();
    let b = hdf5::File::open(data.path().join("out/train.h5")).unwrap();
    let mel = |f: &hdf5::File| f.dataset("mel").unwrap().read_raw::<f32>().unwrap();
    assert_eq!(mel(&b).len(), mel(&a).len());
    assert!(!mel(&a).is_empty());
    assert_eq!(mel(&a), mel(&b));
}
