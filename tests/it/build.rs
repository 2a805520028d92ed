//! End to end: synth → build → read the HDF5 back.

use crate::common::*;
use melforge::synth::{self, LABELS};

#[test]
fn synth_build_read_back_shape_labels_paths_values() {
    let corpus = synth_corpus(40, 3);
    let out = tempfile::tempdir().unwrap();
    let cfg = config(2);
    let done = build(corpus.path(), out.path(), &cfg);
    assert_eq!(done.report.files_ok, 40);
    assert_eq!(done.report.files_rejected, 0);
    assert!(done.rejected.is_empty());

    let splits: Vec<_> = done
        .outputs
        .iter()
        .map(|o| (o.split.as_str(), o.rows))
        .collect();
    assert_eq!(
        splits,
        [("TESTING", 6), ("TRAINING", 28), ("VALIDATION", 6)]
    );
    assert!(!out.path().join("TRAINING.h5.partial").exists());

    let s = read_split(&out.path().join("TRAINING.h5"));
    assert_eq!(s.mel.shape(), &[28, 79, 3, 32, 1]);
    assert_eq!(s.label_names, LABELS);
    let mut sorted = s.path.clone();
    sorted.sort();
    assert_eq!(s.path, sorted, "rows are in sorted path order");
    for (i, p) in s.path.iter().enumerate() {
        // Label id matches the folder name.
        let folder = p.split('/').nth(1).unwrap();
        assert_eq!(LABELS[s.label[i] as usize], folder, "{p}");
        // Values equal a direct computation on the same file.
        let bytes = std::fs::read(corpus.path().join(p)).unwrap();
        let want = features_of(&bytes, &cfg);
        let got = s.mel.index_axis(ndarray::Axis(0), i);
        assert_eq!(got.as_slice().unwrap(), &want[..], "row {i} ({p})");
    }
    // Different labels give different spectra: the mean spectra differ clearly.
    let mean_of = |label: i32| -> f32 {
        let rows: Vec<usize> = (0..s.label.len())
            .filter(|&i| s.label[i] == label)
            .collect();
        let v: f32 = rows
            .iter()
            .map(|&i| s.mel.index_axis(ndarray::Axis(0), i).iter().sum::<f32>())
            .sum();
        v / rows.len() as f32
    };
    assert!((mean_of(0) - mean_of(1)).abs() > 1.0);
}

#[test]
fn output_is_byte_identical_whatever_the_worker_count() {
    let corpus = synth_corpus(30, 5);
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    build(corpus.path(), a.path(), &config(1));
    build(corpus.path(), b.path(), &config(3));
    for split in ["TRAINING", "VALIDATION", "TESTING"] {
        let name = format!("{split}.h5");
        assert_eq!(
            std::fs::read(a.path().join(&name)).unwrap(),
            std::fs::read(b.path().join(&name)).unwrap(),
            "{name} differs between 1 and 3 workers"
        );
    }
}

/// RIFF + fmt + a LIST chunk, and no data chunk.
fn no_data_chunk() -> Vec<u8> {
    let mut b = wav_with(1, 1, 4096, 16, 2, &[])[..36].to_vec();
    b.extend_from_slice(b"LIST\x05\x00\x00\x00INFO!\x00");
    b
}

/// Every kind of bad file next to good ones: exactly the good rows are written
/// and each bad file gets one rejection line with a specific reason.
#[test]
fn mixed_corpus_rejects_each_bad_file_and_keeps_every_good_one() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let good = synth::encode_wav_pcm16(&synth::clip(9, 0, 0), 4096);
    let short_good = synth::encode_wav_pcm16(&synth::clip(9, 1, 2)[..1000], 4096);
    put(r, "TRAINING/LEAK/good_a.wav", &good);
    put(r, "TRAINING/PUMP/good_b.wav", &short_good);
    put(r, "TESTING/LEAK/good_c.wav", &good);
    let pcm = vec![0u8; 400];
    let bad: &[(&str, Vec<u8>, &str)] = &[
        (
            "TRAINING/LEAK/bad_not_riff.wav",
            // An ID3 tag: an MP3 by its content (whatever its name), cut
            // short right after the tag's first bytes.
            b"ID3\x03 this is an mp3".to_vec(),
            "MP3",
        ),
        ("TRAINING/LEAK/bad_empty_file.wav", Vec::new(), "truncated"),
        (
            "TRAINING/LEAK/bad_header.wav",
            good[..30].to_vec(),
            "truncated",
        ),
        (
            "TRAINING/LEAK/bad_data.wav",
            good[..2000].to_vec(),
            "truncated",
        ),
        (
            "TRAINING/LEAK/bad_adpcm.wav",
            wav_with(0x11, 1, 4096, 4, 256, &pcm),
            "ADPCM",
        ),
        (
            "TRAINING/LEAK/bad_zero_ch.wav",
            wav_with(1, 0, 4096, 16, 2, &pcm),
            "channels",
        ),
        (
            "TRAINING/LEAK/bad_rate.wav",
            wav_with(1, 1, 8000, 16, 2, &pcm),
            "8000",
        ),
        (
            "TRAINING/LEAK/bad_align.wav",
            wav_with(1, 2, 4096, 16, 3, &pcm),
            "block_align",
        ),
        (
            "TRAINING/LEAK/bad_no_data.wav",
            no_data_chunk(),
            "data chunk",
        ),
        (
            "TRAINING/LEAK/bad_empty_data.wav",
            wav_with(1, 1, 4096, 16, 2, &[]),
            "empty",
        ),
        (
            "TRAINING/LEAK/bad_bits.wav",
            wav_with(1, 1, 4096, 12, 2, &pcm),
            "12",
        ),
    ];
    for (p, bytes, _) in bad {
        put(r, p, bytes);
    }
    // A link whose target vanished, and a file over the size limit that is
    // no recording whose parts can be read alone (a WAV over it would be
    // computed from its first seconds: tests/it/long.rs).
    std::os::unix::fs::symlink(r.join("gone.wav"), r.join("TRAINING/LEAK/bad_link.wav")).unwrap();
    put(r, "TRAINING/LEAK/bad_big.wav", &vec![0x55u8; 200_000]);

    let out = tempfile::tempdir().unwrap();
    let mut cfg = config(2);
    cfg.io.max_file_bytes = 150_000;
    let done = build(r, out.path(), &cfg);
    assert_eq!(done.report.files_ok, 3);

    let lines: Vec<serde_json::Value> = std::fs::read_to_string(out.path().join("rejected.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let reason = |p: &str| -> String {
        let hits: Vec<_> = lines.iter().filter(|l| l["path"] == p).collect();
        assert_eq!(
            hits.len(),
            1,
            "{p}: expected one rejection line, got {hits:?}"
        );
        hits[0]["reason"].as_str().unwrap().to_string()
    };
    for (p, _, word) in bad {
        let why = reason(p);
        assert!(
            why.contains(word),
            "{p}: reason {why:?} should mention {word:?}"
        );
    }
    let big = reason("TRAINING/LEAK/bad_big.wav");
    assert!(
        big.contains("150000") && big.contains("cannot be computed in pieces"),
        "{big}"
    );
    assert!(
        reason("TRAINING/LEAK/bad_link.wav")
            .starts_with("symbolic link whose target cannot be resolved: "),
        "{}",
        reason("TRAINING/LEAK/bad_link.wav")
    );
    assert_eq!(lines.len(), bad.len() + 2);

    let train = read_split(&out.path().join("TRAINING.h5"));
    assert_eq!(
        train.path,
        ["TRAINING/LEAK/good_a.wav", "TRAINING/PUMP/good_b.wav"]
    );
    assert_eq!(train.mel.shape()[0], 2);
    let want = features_of(&short_good, &cfg);
    assert_eq!(
        train
            .mel
            .index_axis(ndarray::Axis(0), 1)
            .as_slice()
            .unwrap(),
        &want[..]
    );
    assert_eq!(
        read_split(&out.path().join("TESTING.h5")).path,
        ["TESTING/LEAK/good_c.wav"]
    );
}

#[test]
fn flat_and_single_level_layouts_go_to_split_all() {
    let root = tempfile::tempdir().unwrap();
    let good = synth::encode_wav_pcm16(&synth::clip(1, 0, 1), 4096);
    put(root.path(), "x.wav", &good);
    put(root.path(), "hum/y.wav", &good);
    let out = tempfile::tempdir().unwrap();
    build(root.path(), out.path(), &config(1));
    let s = read_split(&out.path().join("all.h5"));
    assert_eq!(s.path, ["hum/y.wav", "x.wav"]);
    assert_eq!(s.label, [0, -1]);
    assert_eq!(s.label_names, ["hum"]);
}

#[test]
fn float16_output_matches_float32_within_half_precision() {
    let corpus = synth_corpus(20, 11);
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let cfg32 = config(2);
    let mut cfg16 = config(2);
    cfg16.output.dtype = melforge::writer::Dtype::Float16;
    build(corpus.path(), a.path(), &cfg32);
    build(corpus.path(), b.path(), &cfg16);
    let x = read_split(&a.path().join("TRAINING.h5")).mel;
    let f = hdf5::File::open(b.path().join("TRAINING.h5")).unwrap();
    let ds = f.dataset("mel").unwrap();
    assert_eq!(ds.dtype().unwrap().size(), 2, "stored as 16-bit floats");
    let y = ds.read_dyn::<f32>().unwrap();
    for (u, v) in x.iter().zip(y.iter()) {
        assert!((u - v).abs() <= u.abs() * 1e-3 + 1e-3, "{u} vs {v}");
    }
}

#[test]
fn a_symlinked_input_file_is_built_from_its_resolved_target() {
    // The reader never follows links (O_NOFOLLOW); build's walk resolves the
    // links in the input tree itself, so they are still built.
    let corpus = synth_corpus(3, 9);
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("elsewhere.wav");
    std::fs::write(&target, wav_with(1, 1, 4096, 16, 2, &[0u8; 8192])).unwrap();
    let dir = corpus.path().join("TRAINING/LEAK");
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&target, dir.join("linked.wav")).unwrap();
    let out = tempfile::tempdir().unwrap();
    let done = build(corpus.path(), out.path(), &config(2));
    assert_eq!(done.report.files_ok, 4, "{:?}", done.rejected);
    let train = read_split(&out.path().join("TRAINING.h5"));
    assert!(
        train.path.iter().any(|p| p == "TRAINING/LEAK/linked.wav"),
        "{:?}",
        train.path
    );
}

/// Before spill extents, a file larger than a reader's share of the read
/// arena was rejected ("file needs … bytes of read arena"), so a small arena
/// capped the file size. Now `io.max_file_bytes` alone does: the long file is
/// read into its own buffer and built like the others.
#[test]
fn a_file_larger_than_the_read_arena_is_built_not_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    let clip = synth::clip(4, 0, 3);
    let normal = synth::encode_wav_pcm16(&clip, 4096);
    // 75 s of audio, ~600 KB: trimmed to the 10 s clip like any long file.
    let long_pcm: Vec<i16> = clip.iter().copied().cycle().take(300_000).collect();
    let long = synth::encode_wav_pcm16(&long_pcm, 4096);
    assert!(long.len() > 512 << 10);
    for i in 0..6 {
        put(r, &format!("TRAINING/LEAK/n{i}.wav"), &normal);
    }
    put(r, "TRAINING/LEAK/long.wav", &long);

    let out = tempfile::tempdir().unwrap();
    let mut cfg = config(2);
    cfg.io.arena_bytes = Some(512 << 10);
    let done = build(r, out.path(), &cfg);
    assert!(done.rejected.is_empty(), "{:?}", done.rejected);
    assert_eq!(done.report.files_ok, 7);
    let s = read_split(&out.path().join("TRAINING.h5"));
    let i = s
        .path
        .iter()
        .position(|p| p == "TRAINING/LEAK/long.wav")
        .unwrap();
    let got = s.mel.index_axis(ndarray::Axis(0), i);
    assert_eq!(got.as_slice().unwrap(), &features_of(&long, &cfg)[..]);
}
