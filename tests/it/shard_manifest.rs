//! Sharded builds of manifests and of variable-length rows, merged: N
//! shards (`build MANIFEST… --shard K/N`, each a block of every manifest's
//! lines) joined by `merge` equal one single build bit for bit — every
//! dataset (`features`/`offsets`/`lengths`/`pad_value` or `mel`, `label`,
//! `path`, `meta`, `line`), every root attribute, `rejected.jsonl` and the
//! written-back `<split>.jsonl` byte for byte — in the virtual layout and
//! with `--copy`; each shard's rejections are the bad lines of its own
//! share, with their manifest line numbers.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use hdf5::types::{TypeDescriptor, VarLenUnicode};
use melforge::app::build::{self, Input, Options};
use melforge::app::merge::{self, open::DATASETS, shard::Shard};
use melforge::config::Config;

use crate::common::put;
use crate::manifest::{codec, cut_line, pcm16, signal};

fn config(text: &str) -> Config {
    let mut c = Config::parse(text, "test").unwrap();
    c.compute.workers = 2;
    c.output.chunk_files = 4;
    c
}

const KALDI: &str = "[features]\nrecipe = \"kaldi-fbank\"\nnum_mel_bins = 40\n\n\
                     [input]\nresample = \"soxr_hq\"\n";

/// Every dataset and root attribute of a split file, values bit for bit.
#[derive(Debug, PartialEq)]
struct Dump {
    floats: BTreeMap<&'static str, Vec<u32>>,
    ints: BTreeMap<&'static str, Vec<i64>>,
    strings: BTreeMap<&'static str, Vec<String>>,
    attrs: Vec<(String, merge::attrs::Value)>,
}

fn dump(path: &Path) -> Dump {
    let f = hdf5::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut d = Dump {
        floats: BTreeMap::new(),
        ints: BTreeMap::new(),
        strings: BTreeMap::new(),
        attrs: merge::attrs::read_all(&f).unwrap(),
    };
    for (name, _) in DATASETS {
        if !f.link_exists(name) {
            continue;
        }
        let ds = f.dataset(name).unwrap();
        match ds.dtype().unwrap().to_descriptor().unwrap() {
            TypeDescriptor::Float(_) => {
                let v = ds.read_raw::<f32>().unwrap();
                d.floats
                    .insert(name, v.iter().map(|x| x.to_bits()).collect());
            }
            TypeDescriptor::VarLenUnicode => {
                let v = ds.read_raw::<VarLenUnicode>().unwrap();
                d.strings
                    .insert(name, v.iter().map(|s| s.as_str().to_string()).collect());
            }
            _ => {
                d.ints.insert(name, ds.read_raw::<i64>().unwrap());
            }
        }
    }
    d
}

fn is_virtual(path: &Path, dataset: &str) -> bool {
    let f = hdf5::File::open(path).unwrap();
    // A virtual dataset has no chunking; a build's is chunked.
    f.dataset(dataset).unwrap().chunk().is_none()
}

fn text(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The lines of the rejection log `p`.
fn rejected_lines(p: &Path) -> Vec<u64> {
    text(p)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["line"].as_u64().unwrap()
        })
        .collect()
}

/// A NeMo manifest (`train.jsonl`: segments of a long WAV and of a stereo
/// WAV, whole files, an MP3, Unicode text, a blank line and bad lines) and a
/// gzipped lhotse CutSet (`cuts_dev.jsonl.gz`, one cut of an unreadable
/// source type), over the audio beside them.
fn manifests(d: &Path) -> Vec<PathBuf> {
    put(
        d,
        "audio/long.wav",
        &pcm16(&signal(16_000 * 20, 1, 1), 1, 16_000),
    );
    put(
        d,
        "audio/stereo.wav",
        &pcm16(&signal(22_050 * 4, 2, 2), 2, 22_050),
    );
    put(d, "audio/s.mp3", &codec("speech16k_mono.mp3"));
    let nemo = |audio: &str, extra: &str, i: usize| {
        format!(
            r#"{{"audio_filepath": "{audio}", {extra}"text": "Zeile {i} — ünïcödé ✓", "n": {i}}}"#
        )
    };
    let lines = [
        nemo(
            "audio/long.wav",
            r#""offset": 12.345678, "duration": 2.5, "#,
            1,
        ),
        nemo("audio/long.wav", r#""offset": 0.0, "duration": 1.0, "#, 2),
        r#"{"audio_filepath": "audio/long.wav", "offset": 1.0"#.to_string(),
        nemo(
            "audio/stereo.wav",
            r#""offset": 1.00003, "duration": 1.7, "#,
            4,
        ),
        String::new(),
        nemo("audio/missing.wav", r#""duration": 1.0, "#, 6),
        nemo("audio/s.mp3", "", 7),
        nemo("audio/long.wav", r#""offset": 19.5, "duration": 3.0, "#, 8),
        nemo("audio/long.wav", r#""offset": 25.0, "duration": 1.0, "#, 9),
        nemo("audio/stereo.wav", r#""duration": 4.0, "#, 10),
        nemo("audio/long.wav", r#""offset": 7.25, "duration": 0.5, "#, 11),
        nemo("audio/long.wav", r#""offset": 3.0, "duration": -1, "#, 12),
        nemo("audio/long.wav", r#""offset": 15.0, "#, 13),
    ];
    let train = put(d, "train.jsonl", (lines.join("\n") + "\n").as_bytes());
    let mut cuts: Vec<String> = [
        ("c0", 0.5, 1.0, 1),
        ("c1", 2.0, 1.5, 0),
        ("c2", 0.0, 4.0, 1),
    ]
    .iter()
    .map(|&(id, s, dur, ch)| cut_line(id, "audio/stereo.wav", s, dur, ch))
    .collect();
    cuts.insert(
        1,
        cut_line("c_url", "audio/stereo.wav", 0.0, 1.0, 0)
            .replace(r#""type":"file""#, r#""type":"url""#),
    );
    let dev = d.join("cuts_dev.jsonl.gz");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&dev).unwrap(),
        flate2::Compression::default(),
    );
    gz.write_all(cuts.join("\n").as_bytes()).unwrap();
    gz.finish().unwrap();
    vec![train, dev]
}

fn build_manifests(files: &[PathBuf], out: &Path, cfg: &Config, shard: Option<Shard>) {
    let input = Input::of(files);
    build::build_input(&input, out, cfg, &Options::default(), shard).unwrap();
}

/// The split files, `rejected.jsonl` and written-back manifests of
/// `merged` equal `single`'s.
fn assert_merged_equals(single: &Path, merged: &Path, splits: &[&str], write_back: bool) {
    for split in splits {
        let (a, b) = (
            dump(&single.join(format!("{split}.h5"))),
            dump(&merged.join(format!("{split}.h5"))),
        );
        assert!(!a.strings["path"].is_empty(), "{split}: no rows");
        assert_eq!(a, b, "{split}");
        if write_back {
            let back = |d: &Path| text(&d.join(format!("{split}.jsonl")));
            assert_eq!(back(single), back(merged), "{split}.jsonl");
        }
    }
    let rej = |d: &Path| text(&d.join("rejected.jsonl"));
    assert_eq!(rej(single), rej(merged));
}

fn remove_shards(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.to_str().unwrap().contains(".shard-") {
            std::fs::remove_file(p).unwrap();
        }
    }
}

/// Builds the manifests whole and in `n` shards, checks each shard's
/// rejections, merges (virtual, then `--copy` with the shards deleted) and
/// compares both with the single build.
fn check_manifest_shards(cfg: &Config, n: usize, frames: bool) {
    let d = tempfile::tempdir().unwrap();
    let files = manifests(d.path());
    let single = d.path().join("single");
    build_manifests(&files, &single, cfg, None);
    let lines = rejected_lines(&single.join("rejected.jsonl"));
    assert_eq!(lines, [2, 3, 6, 9, 12], "the single build's rejections");
    let out = d.path().join("sharded");
    let mut shard_lines = Vec::new();
    for k in 0..n {
        let s = Shard { index: k, count: n };
        build_manifests(&files, &out, cfg, Some(s));
        // Its rejections are the bad lines of its own blocks (train has 13
        // lines, cuts_dev 4).
        let own = rejected_lines(&out.join(s.rejected_file_name()));
        let (train, dev) = (s.range(13), s.range(4));
        let mut want: Vec<u64> = [3u64, 6, 9, 12]
            .into_iter()
            .filter(|&l| train.contains(&(l as usize - 1)))
            .collect();
        if dev.contains(&1) {
            want.push(2);
        }
        want.sort();
        assert_eq!(own, want, "shard {s}");
        // Its rows are the good lines of its block, with their line numbers.
        let rows = dump(&out.join(s.split_file_name("train")));
        let share = &rows.ints["line"];
        assert!(
            share.iter().all(|&l| train.contains(&(l as usize - 1))),
            "{s}: {share:?}"
        );
        assert!(!share.is_empty() || train.len() < 3, "{s}: no rows");
        shard_lines.extend(own);
    }
    shard_lines.sort();
    assert_eq!(shard_lines, lines, "the shards' rejections together");
    let r = merge::merge(&out, false).unwrap();
    assert_eq!((r.mode, r.shards, r.rejected), ("virtual", n, lines.len()));
    assert_eq!(r.manifests.len(), 2);
    let data = if frames { "features" } else { "mel" };
    assert!(is_virtual(&out.join("train.h5"), data));
    if frames {
        assert!(!is_virtual(&out.join("train.h5"), "offsets"));
    }
    assert_merged_equals(&single, &out, &["train", "cuts_dev"], true);
    let r = merge::merge(&out, true).unwrap();
    assert_eq!(r.mode, "copy");
    assert!(!is_virtual(&out.join("train.h5"), data));
    remove_shards(&out);
    assert_merged_equals(&single, &out, &["train", "cuts_dev"], true);
}

#[test]
fn manifest_shards_of_kaldi_rows_merge_into_the_single_build() {
    check_manifest_shards(&config(KALDI), 3, true);
}

/// More shards than cuts: some shards have no row of `cuts_dev` (nor
/// anything at all to map in the virtual layout).
#[test]
fn more_manifest_shards_than_lines_still_merge_into_the_single_build() {
    check_manifest_shards(&config(KALDI), 5, true);
}

/// librosa's fixed rows (`mel`) with `meta` and `line`.
#[test]
fn manifest_shards_of_fixed_rows_merge_into_the_single_build() {
    let cfg = config("[input]\nresample = \"soxr_hq\"\n");
    check_manifest_shards(&cfg, 2, false);
}

/// A tree of speech utterances of different lengths (and a truncated file)
/// under Whisper (`pad_value`) and Kaldi MFCC: the variable-length rows of
/// 4 shards merged, virtual and copied, equal the single build.
#[test]
fn variable_length_tree_shards_merge_into_the_single_build() {
    let input = tempfile::tempdir().unwrap();
    melforge::app::synth_speech::generate(input.path(), 14, 5, 16_000).unwrap();
    let mut wavs: Vec<PathBuf> = walk(input.path());
    wavs.sort();
    let bytes = std::fs::read(&wavs[0]).unwrap();
    let rel = wavs[0]
        .strip_prefix(input.path())
        .unwrap()
        .with_file_name("zz_cut.wav");
    put(input.path(), rel.to_str().unwrap(), &bytes[..30]);
    for recipe in ["whisper", "kaldi-mfcc"] {
        let cfg = config(&format!("[features]\nrecipe = \"{recipe}\"\n"));
        let d = tempfile::tempdir().unwrap();
        let single = d.path().join("single");
        build::build(input.path(), &single, &cfg, &Options::default()).unwrap();
        let out = d.path().join("sharded");
        for k in 0..4 {
            let s = Some(Shard { index: k, count: 4 });
            build::build_shard(input.path(), &out, &cfg, &Options::default(), s).unwrap();
        }
        let splits: Vec<String> = std::fs::read_dir(&single)
            .unwrap()
            .filter_map(|e| {
                let n = e.unwrap().file_name().into_string().unwrap();
                n.strip_suffix(".h5").map(String::from)
            })
            .collect();
        let splits: Vec<&str> = splits.iter().map(String::as_str).collect();
        let r = merge::merge(&out, false).unwrap();
        assert!(r.manifests.is_empty() && r.rejected == 1, "{recipe}: {r:?}");
        assert!(is_virtual(
            &out.join(format!("{}.h5", splits[0])),
            "features"
        ));
        assert_merged_equals(&single, &out, &splits, false);
        merge::merge(&out, true).unwrap();
        remove_shards(&out);
        assert_merged_equals(&single, &out, &splits, false);
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// merge refuses a manifest build whose written-back shards are missing or
/// do not match the split files, before writing anything.
#[test]
fn merge_refuses_missing_or_mismatched_written_back_manifests() {
    let d = tempfile::tempdir().unwrap();
    let files = manifests(d.path());
    let out = d.path().join("sharded");
    let cfg = config(KALDI);
    for k in 0..2 {
        build_manifests(&files, &out, &cfg, Some(Shard { index: k, count: 2 }));
    }
    let refusal = |dir: &Path| {
        let e = merge::merge(dir, false).expect_err("merge must refuse");
        for name in ["train.h5", "rejected.jsonl", "train.jsonl"] {
            assert!(!dir.join(name).exists(), "a refused merge wrote {name}");
        }
        e.to_string()
    };
    let back = out.join("train.shard-1-of-2.jsonl");
    let saved = text(&back);
    std::fs::remove_file(&back).unwrap();
    let e = refusal(&out);
    assert!(
        e.contains("the written-back manifest of split `train`: shard(s) 1 of 2 are missing"),
        "{e}"
    );
    let first = saved.lines().next().unwrap();
    let renumbered = first.replace("\"features_row\": 0,", "\"features_row\": 1,");
    assert_ne!(first, renumbered);
    std::fs::write(&back, saved.replacen(first, &renumbered, 1)).unwrap();
    let e = refusal(&out);
    assert!(
        e.contains(
            "train.shard-1-of-2.jsonl line 1: names row 1 of train.shard-1-of-2.h5, where row 0"
        ),
        "{e}"
    );
    std::fs::write(&back, &saved).unwrap();
    merge::merge(&out, false).unwrap();
}

/// The command line: `build MANIFEST --shard K/N` for every K, then `merge`;
/// scripts/check_h5.py (h5py) accepts the merged virtual files.
#[test]
fn the_cli_shards_a_manifest_and_merges_it() {
    let d = tempfile::tempdir().unwrap();
    let files = manifests(d.path());
    let cfg = put(d.path(), "c.toml", KALDI.as_bytes());
    let run = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_melforge"))
            .args(args)
            .env("MELFORGE_LOG", "warn")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    let (m, c) = (files[0].to_str().unwrap(), cfg.to_str().unwrap());
    let single = d.path().join("single");
    let out = d.path().join("out");
    let (s, o) = (single.to_str().unwrap(), out.to_str().unwrap());
    run(&["build", m, "--out", s, "--config", c, "--progress", "none"]);
    for k in 0..3 {
        let shard = format!("{k}/3");
        run(&[
            "build",
            m,
            "--out",
            o,
            "--config",
            c,
            "--progress",
            "none",
            "--shard",
            &shard,
        ]);
    }
    run(&["merge", o]);
    assert_merged_equals(&single, &out, &["train"], true);
    // h5py reads the virtual variable-length layout, `meta` and `line`.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/check_h5.py");
    let check = std::process::Command::new("python3")
        .arg(&script)
        .arg(&out)
        .output()
        .expect("python3 runs");
    assert!(
        check.status.success(),
        "check_h5.py: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}
