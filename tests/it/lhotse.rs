//! `build --lhotse`: a CutSet in, `OUT/<split>.cuts.jsonl.gz` out, each
//! cut's `features` a `numpy_hdf5` view of its row. That lhotse itself loads
//! them is `scripts/parity_lhotse.py`'s (real lhotse and torch); here, the
//! file's fields and the views' values, read as lhotse's reader reads them
//! (`h5py.File(storage_path)[storage_key][a:b]`).

use std::io::{Read as _, Write as _};
use std::path::Path;

use melforge::app::build::{self, Input};
use melforge::config::{Config, Overrides};

use crate::common::put;
use crate::manifest::{cut_line, pcm16, rows, signal};

fn gzip(path: &Path, lines: &[String]) {
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(path).unwrap(),
        flate2::Compression::default(),
    );
    gz.write_all(lines.join("\n").as_bytes()).unwrap();
    gz.finish().unwrap();
}

fn gunzip_lines(path: &Path) -> Vec<serde_json::Value> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The lhotse-fbank recipe with lhotse output, resampling the 22.05 kHz
/// test recording.
fn lhotse_config() -> Config {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("c.toml");
    std::fs::write(&toml, "[input]\nresample = \"soxr_hq\"\n").unwrap();
    let over = Overrides {
        recipe: Some("lhotse-fbank".into()),
        lhotse: true,
        ..Overrides::default()
    };
    let mut c = Config::load_with(Some(&toml), &over).unwrap();
    c.compute.workers = 2;
    c
}

fn build_cuts(manifest: &Path, out: &Path, cfg: &Config) -> build::Outcomes {
    let input = Input::of(&[manifest.to_path_buf()]);
    build::build_input(&input, out, cfg, &Default::default(), None).unwrap()
}

/// Every good cut comes back in row order, as written plus `features`
/// (an input cut's own features replaced), and each view is its row's
/// frames; a bad cut is rejected and leaves no gap.
#[test]
fn cuts_come_back_with_features_that_are_views_of_their_rows() {
    let d = tempfile::tempdir().unwrap();
    put(
        d.path(),
        "rec.wav",
        &pcm16(&signal(22_050 * 4, 2, 5), 2, 22_050),
    );
    let mut lines = vec![
        cut_line("c0", "rec.wav", 0.333_3, 1.010_1, 1),
        cut_line("c1", "missing.wav", 0.0, 1.0, 0),
        cut_line("c2", "rec.wav", 1.5, 2.001, 0),
    ];
    // A cut that had features of its own (say, an older extraction).
    let mut old: serde_json::Value =
        serde_json::from_str(&cut_line("c3", "rec.wav", 0.0, 4.0, 1)).unwrap();
    old["features"] = serde_json::json!({"type": "old", "storage_key": "x"});
    lines.push(old.to_string());
    let manifest = d.path().join("cuts_train.jsonl.gz");
    gzip(&manifest, &lines);
    let out = tempfile::tempdir().unwrap();
    let done = build_cuts(&manifest, out.path(), &lhotse_config());
    assert_eq!(done.rejected.len(), 1, "{:?}", done.rejected);
    let cuts_path = out.path().join("cuts_train.cuts.jsonl.gz");
    assert_eq!(done.cuts, std::slice::from_ref(&cuts_path));
    let cuts = gunzip_lines(&cuts_path);
    let ids: Vec<_> = cuts.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["c0", "c2", "c3"]);
    let h5 = out.path().join("cuts_train.h5");
    let got = rows(&h5);
    let file = hdf5::File::open(&h5).unwrap();
    for (i, cut) in cuts.iter().enumerate() {
        let f = &cut["features"];
        let frames = got.rows[i].len() / 80;
        // lhotse's frame count, compute_num_frames(duration, 0.01, 16000)
        // = (round(duration * 16000) + 80) // 160, is `num_frames`
        // (lhotse.qa.validate holds it to that); the row is within the one
        // frame `load_features` forgives: this recording is resampled from
        // 22.05 kHz, whose length rounds on its own.
        let d = cut["duration"].as_f64().unwrap();
        let lhotse_frames = ((d * 16_000.0).round() as usize + 80) / 160;
        assert!(
            frames.abs_diff(lhotse_frames) <= 1,
            "{}: {frames} {lhotse_frames}",
            ids[i]
        );
        assert_eq!(f["type"], "kaldi-fbank");
        assert_eq!(f["num_frames"], lhotse_frames);
        assert_eq!(f["num_features"], 80);
        assert_eq!(f["frame_shift"], 0.01);
        assert_eq!(f["sampling_rate"], 16_000);
        assert_eq!(f["start"], cut["start"]);
        assert_eq!(f["duration"], cut["duration"]);
        assert_eq!(f["storage_type"], "numpy_hdf5");
        assert_eq!(f["storage_path"], h5.to_str().unwrap());
        assert_eq!(f["storage_key"], format!("lhotse/{i}"));
        assert_eq!(f["recording_id"], "rec");
        assert_eq!(f["channels"], cut["channel"]);
        // The supervision and the rest of the cut are kept.
        assert_eq!(
            cut["supervisions"][0]["text"],
            format!("{}: Grüße, 世界", ids[i])
        );
        let view = file.dataset(&format!("lhotse/{i}")).unwrap();
        let seen = frames.min(lhotse_frames);
        assert_eq!(view.shape(), [seen, 80]);
        assert_eq!(
            view.read_raw::<f32>().unwrap(),
            got.rows[i][..seen * 80],
            "{}",
            ids[i]
        );
        // lhotse reads a slice of it too.
        let part = view.read_slice_2d::<f32, _>(ndarray::s![1..3, ..]).unwrap();
        assert_eq!(part.as_slice().unwrap(), &got.rows[i][80..240]);
    }
    assert!(cuts[2]["features"]["type"] == "kaldi-fbank");
    // The written-back manifest is there as for any manifest build.
    assert!(out.path().join("cuts_train.jsonl").is_file());
}

/// The lhotse rounding: a duration whose product with the rate lands just
/// below a whole number keeps its last sample, as lhotse's `load_audio`
/// does; truncation would make the row one frame's worth of samples
/// shorter at 16 kHz here.
#[test]
fn a_cut_counts_its_samples_as_lhotse_does() {
    let d = tempfile::tempdir().unwrap();
    // 16 kHz mono: 1.001 s = 16,015.999… samples; lhotse reads 16,016,
    // truncation 16,015. Check the samples through the row of a tree build
    // of exactly lhotse's samples.
    let samples = signal(16_000 * 3, 1, 9);
    put(d.path(), "rec.wav", &pcm16(&samples, 1, 16_000));
    let (start, dur) = (0.5, 1.001);
    let line = cut_line("c", "rec.wav", start, dur, 0).replace("22050", "16000");
    let manifest = d.path().join("cuts.jsonl.gz");
    gzip(&manifest, &[line]);
    let cfg = lhotse_config();
    let out = tempfile::tempdir().unwrap();
    let done = build_cuts(&manifest, out.path(), &cfg);
    assert!(done.rejected.is_empty(), "{:?}", done.rejected);
    let got = rows(&out.path().join("cuts.h5"));
    let first = 8_000;
    let n = 16_016; // compute_num_samples(1.001, 16000)
    assert_eq!(
        (dur * 16_000.0) as usize,
        n - 1,
        "the product is below a whole number"
    );
    let tree = tempfile::tempdir().unwrap();
    let mut want_cfg = cfg.clone();
    want_cfg.output.lhotse = false;
    for (name, len) in [("lhotse", n), ("truncated", n - 1)] {
        put(
            tree.path(),
            &format!("{name}/x.wav"),
            &pcm16(&samples[first..first + len], 1, 16_000),
        );
    }
    let want_out = tempfile::tempdir().unwrap();
    crate::common::build(tree.path(), want_out.path(), &want_cfg);
    let want = rows(&want_out.path().join("all.h5"));
    let at = |label: &str| want.path.iter().position(|p| p.starts_with(label)).unwrap();
    assert_eq!(got.rows[0], want.rows[at("lhotse")]);
    assert_ne!(got.rows[0], want.rows[at("truncated")]);
}

/// Inputs lhotse output cannot describe (a tree, a NeMo manifest) are
/// refused before any work, naming the input.
#[test]
fn a_tree_and_a_nemo_manifest_are_refused_with_a_sentence() {
    let d = tempfile::tempdir().unwrap();
    put(
        d.path(),
        "a/b.wav",
        &pcm16(&signal(16_000, 1, 1), 1, 16_000),
    );
    let nemo = put(
        d.path(),
        "train.jsonl",
        b"\n{\"audio_filepath\": \"a/b.wav\", \"duration\": 1.0}\n",
    );
    for input in [d.path().join("a"), nemo] {
        let out = tempfile::tempdir().unwrap();
        let e = build::build_input(
            &Input::of(std::slice::from_ref(&input)),
            out.path(),
            &lhotse_config(),
            &Default::default(),
            None,
        )
        .unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("writes cuts for lhotse CutSet manifests")
                && e.contains(input.to_str().unwrap()),
            "{e}"
        );
        assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0, "{e}");
    }
}
