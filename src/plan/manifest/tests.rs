use std::io::Write as _;

use super::*;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn meta(m: &Manifests, path: u32) -> Value {
    serde_json::from_str(&m.meta.get(path)).unwrap()
}

#[test]
fn split_names_are_the_stems_after_gz() {
    for (file, want) in [
        ("train.jsonl", "train"),
        ("dev.json", "dev"),
        ("cuts_train.jsonl.gz", "cuts_train"),
        ("a/b/test-clean.jsonl", "test-clean"),
    ] {
        assert_eq!(split_name(Path::new(file)).as_deref(), Some(want), "{file}");
    }
}

/// NeMo lines: line order, 1-based lines, segments or whole files with
/// their stated duration, relative paths against the manifest's folder,
/// every field kept as metadata (any Unicode), bad lines left out with a
/// sentence each.
#[test]
fn nemo_lines_become_items_in_line_order() {
    let d = tempfile::tempdir().unwrap();
    let text = [
        r#"{"audio_filepath": "b.wav", "duration": 2.5, "text": "naïve café 日本語", "speaker": 7}"#,
        r#"not json"#,
        r#"{"audio_filepath": "/abs/a.flac", "offset": 1.25, "duration": 0.5}"#,
        "",
        r#"{"audio_filepath": "c.wav", "duration": 0}"#,
        r#"{"audio_filepath": "c.wav", "duration": -1}"#,
        r#"{"audio_filepath": "c.wav", "offset": -0.5, "duration": 1}"#,
        r#"{"duration": 1}"#,
        r#"{"audio_filepath": "sub/c.wav", "duration": "long"}"#,
        r#"{"audio_filepath": "sub/d.wav"}"#,
    ]
    .join("\n");
    let f = write(d.path(), "train.jsonl", &text);
    let m = plan(std::slice::from_ref(&f)).unwrap();
    assert_eq!(m.plan.splits, ["train"]);
    let rels: Vec<&str> = m.plan.jobs.iter().map(|j| m.plan.rel_path(j)).collect();
    assert_eq!(rels, ["b.wav", "/abs/a.flac", "sub/d.wav"]);
    assert_eq!(&m.lines[..], [1, 3, 10]);
    let seqs: Vec<u32> = m.plan.jobs.iter().map(|j| j.seq).collect();
    assert_eq!(seqs, [0, 1, 2]);
    assert_eq!(m.plan.open_path(&m.plan.jobs[0]), d.path().join("b.wav"));
    assert_eq!(m.plan.open_path(&m.plan.jobs[1]), Path::new("/abs/a.flac"));
    assert_eq!(
        m.extents.segment(0),
        Some(Segment {
            expect_s: Some(2.5),
            ..Segment::default()
        })
    );
    assert_eq!(
        m.extents.segment(1),
        Some(Segment {
            offset_s: 1.25,
            duration_s: Some(0.5),
            ..Segment::default()
        })
    );
    assert_eq!(m.extents.segment(2), None);
    assert_eq!(meta(&m, 0)["text"], "naïve café 日本語");
    assert_eq!(meta(&m, 0)["speaker"], 7);
    let got: Vec<(u64, RejectKind, &str)> = m
        .rejected
        .iter()
        .map(|r| (r.line, r.kind, r.reason.as_str()))
        .collect();
    assert_eq!(got.len(), 6, "{got:?}");
    assert!(got.iter().all(|g| g.1 == RejectKind::BadLine));
    let reasons: Vec<(u64, &str)> = got.iter().map(|g| (g.0, g.2)).collect();
    assert!(
        reasons[0].1.starts_with("the line is not JSON"),
        "{reasons:?}"
    );
    assert_eq!(reasons[0].0, 2);
    assert_eq!(reasons[1], (5, "the duration is 0 s; it must be positive"));
    assert_eq!(reasons[2], (6, "the duration is -1 s; it must be positive"));
    assert_eq!(
        reasons[3],
        (7, "the offset is -0.5 s; it must not be negative")
    );
    assert!(reasons[4].1.contains("neither a NeMo item"), "{reasons:?}");
    assert_eq!(
        reasons[5],
        (
            9,
            "`duration` is not a number: \"long\"; expected a finite number of seconds"
        )
    );
    assert_eq!(m.rejected[3].path, "c.wav");
}

fn cut_line(id: &str, source: &str, start: f64, duration: f64, channel: u32) -> String {
    serde_json::json!({
        "id": id, "start": start, "duration": duration, "channel": channel,
        "supervisions": [
            {"id": "s1", "recording_id": "r", "start": 0.0, "duration": duration,
             "text": "Grüße — привет", "speaker": "spk-1", "language": "de"},
            {"id": "s2", "text": "second"}
        ],
        "recording": {"id": "rec-1", "sources": [{"type": "file", "channels": [0, 1],
            "source": source}], "sampling_rate": 16000, "num_samples": 160000,
            "duration": 10.0},
        "custom": {"domain": "news"},
        "type": "MonoCut"
    })
    .to_string()
}

/// lhotse cuts, gzipped: the first source, the cut's start, duration and
/// channel, and the first supervision's text, speaker and language.
#[test]
fn lhotse_cuts_from_a_gzipped_cutset() {
    let d = tempfile::tempdir().unwrap();
    let text = [
        cut_line("cut-a", "rec.wav", 1.5, 2.0, 1),
        cut_line("cut-b", "/x/rec.flac", 0.0, 3.0, 0),
    ]
    .join("\n");
    let f = d.path().join("cuts_dev.jsonl.gz");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&f).unwrap(),
        flate2::Compression::default(),
    );
    gz.write_all(text.as_bytes()).unwrap();
    gz.finish().unwrap();
    let m = plan(std::slice::from_ref(&f)).unwrap();
    assert!(m.rejected.is_empty(), "{:?}", m.rejected);
    assert_eq!(m.plan.splits, ["cuts_dev"]);
    assert_eq!(
        m.extents.segment(0),
        Some(Segment {
            offset_s: 1.5,
            duration_s: Some(2.0),
            channel: Some(1),
            expect_s: None,
            base_frame: 0,
            lossy: None,
            rounding: crate::model::Rounding::Lhotse,
        })
    );
    let meta0 = meta(&m, 0);
    assert_eq!(meta0["id"], "cut-a");
    assert_eq!(meta0["text"], "Grüße — привет");
    assert_eq!(meta0["speaker"], "spk-1");
    assert_eq!(meta0["language"], "de");
    assert_eq!(meta0["recording_id"], "rec-1");
    assert_eq!(meta0["domain"], "news");
    assert_eq!(m.plan.open_path(&m.plan.jobs[0]), d.path().join("rec.wav"));
}

/// A segment of a WAV is read as its extent (the header is read once per
/// recording); a whole-file item and a file that is not a WAV are not.
#[test]
fn wav_segments_get_byte_ranges_and_others_do_not() {
    let d = tempfile::tempdir().unwrap();
    let samples: Vec<i16> = (0..16_000).map(|i| (i % 300) as i16).collect();
    let wav = crate::synth::encode_wav_pcm16(&samples, 16_000);
    std::fs::write(d.path().join("long.wav"), wav).unwrap();
    std::fs::write(d.path().join("x.mp3"), b"ID3 not really").unwrap();
    let text = [
        r#"{"audio_filepath": "long.wav", "offset": 0.25, "duration": 0.5}"#,
        r#"{"audio_filepath": "long.wav", "offset": 0.5, "duration": 0.25}"#,
        r#"{"audio_filepath": "long.wav", "duration": 1.0}"#,
        r#"{"audio_filepath": "x.mp3", "offset": 0.5, "duration": 0.25}"#,
    ]
    .join("\n");
    let f = write(d.path(), "t.jsonl", &text);
    let m = plan(std::slice::from_ref(&f)).unwrap();
    let r0 = m.extents.range(0).unwrap();
    assert_eq!((r0.start, r0.len), (44 + 2 * 4_000, 2 * 8_000));
    let r1 = m.extents.range(1).unwrap();
    assert_eq!((r1.start, r1.len), (44 + 2 * 8_000, 2 * 4_000));
    assert!(m.extents.range(2).is_none() && m.extents.range(3).is_none());
    // A ranged WAV decodes from the start of what is read.
    assert_eq!(m.extents.segment(0).unwrap().offset_s, 0.0);
    assert_eq!(m.extents.segment(0).unwrap().duration_s, None);
    assert_eq!(m.extents.segment(3).unwrap().offset_s, 0.5);
    // One header read for the WAV's two segments, one for the MP3.
    assert!(m.header_bytes <= 44 + 2 * 16_000 + 14, "{}", m.header_bytes);
}

#[test]
fn two_manifests_with_one_stem_are_an_error() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("x")).unwrap();
    let a = write(d.path(), "train.jsonl", "");
    let b = write(&d.path().join("x"), "train.json", "");
    assert!(matches!(plan(&[a, b]), Err(Error::SameSplit { .. })));
}

/// Shares of a manifest's lines (`build --shard`): together they plan every
/// line once, each item and each bad line under its own line number, the
/// lines outside a share neither parsed nor rejected.
#[test]
fn shares_of_the_lines_cover_every_line_once() {
    let d = tempfile::tempdir().unwrap();
    let mut text = Vec::new();
    for i in 1..=11 {
        text.push(match i {
            4 => "not json".to_string(),
            7 => String::new(),
            _ => format!(r#"{{"audio_filepath": "a{i}.wav", "text": "t{i}"}}"#),
        });
    }
    let f = write(d.path(), "train.jsonl", &(text.join("\n") + "\n"));
    assert_eq!(count_lines(&f, Limits::default()).unwrap(), 11);
    let whole = plan(std::slice::from_ref(&f)).unwrap();
    for n in 1..=5usize {
        let (mut lines, mut rejected) = (Vec::new(), Vec::new());
        for k in 0..n {
            let share = move |total: usize| total * k / n..total * (k + 1) / n;
            let m = plan_share(std::slice::from_ref(&f), Some(&share)).unwrap();
            let seqs: Vec<u32> = m.plan.jobs.iter().map(|j| j.seq).collect();
            assert_eq!(seqs, (0..seqs.len() as u32).collect::<Vec<_>>());
            for (j, &line) in m.plan.jobs.iter().zip(m.lines.iter()) {
                assert_eq!(m.plan.rel_path(j), format!("a{line}.wav"));
                assert_eq!(meta(&m, j.path)["text"], format!("t{line}"));
            }
            lines.extend(m.lines.iter().copied());
            rejected.extend(m.rejected.iter().map(|r| r.line));
        }
        assert_eq!(lines, whole.lines.to_vec(), "N = {n}");
        assert_eq!(rejected, [4], "N = {n}");
    }
}

/// Hostile values: times that are not finite, out of range or strings,
/// JSON nested past serde_json's limit, a cut id met before. Each is a
/// rejection naming the line; the good lines around them are items.
#[test]
fn hostile_lines_are_rejected_with_a_reason_and_the_good_ones_kept() {
    let d = tempfile::tempdir().unwrap();
    let good = r#"{"audio_filepath": "a.wav", "duration": 1}"#;
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let text = [
        good,
        r#"{"audio_filepath": "a.wav", "offset": 1e308, "duration": 1}"#,
        r#"{"audio_filepath": "a.wav", "offset": -1e308, "duration": 1}"#,
        r#"{"audio_filepath": "a.wav", "offset": 0, "duration": 1e999}"#,
        r#"{"audio_filepath": "a.wav", "offset": "NaN", "duration": 1}"#,
        r#"{"audio_filepath": "a.wav", "duration": "inf"}"#,
        &deep,
        &cut_line("cut-a", "r.wav", 0.0, 1.0, 0),
        &cut_line("cut-a", "r.wav", 2.0, 1.0, 0),
        good,
    ]
    .join("\n");
    let f = write(d.path(), "m.jsonl", &text);
    let m = plan(std::slice::from_ref(&f)).unwrap();
    assert_eq!(&m.lines[..], [1, 8, 10]);
    let reasons: Vec<(u64, &str)> = m
        .rejected
        .iter()
        .map(|r| (r.line, r.reason.as_str()))
        .collect();
    assert_eq!(reasons.len(), 7, "{reasons:?}");
    assert_eq!(
        reasons[0],
        (
            2,
            "the offset is 1e308 s; it must be at most 10000000 s (116 days)"
        )
    );
    assert_eq!(
        reasons[1],
        (3, "the offset is -1e308 s; it must not be negative")
    );
    assert!(
        reasons[2].0 == 4
            && reasons[2]
                .1
                .starts_with("the line is not JSON: number out of range"),
        "{reasons:?}"
    );
    assert_eq!(
        reasons[3],
        (
            5,
            "`offset` is not a number: \"NaN\"; expected a finite number of seconds"
        )
    );
    assert_eq!(reasons[4].0, 6);
    assert!(
        reasons[4]
            .1
            .starts_with("`duration` is not a number: \"inf\"")
    );
    assert!(
        reasons[5].0 == 7
            && reasons[5]
                .1
                .starts_with("the line is not JSON: recursion limit exceeded"),
        "{reasons:?}"
    );
    assert_eq!(
        reasons[6],
        (
            9,
            "the cut id `cut-a` is already line 8's; cut ids are unique in a manifest, so this \
             line is left out"
        )
    );
    assert!(m.rejected.iter().all(|r| r.kind == RejectKind::BadLine));
    assert_eq!(m.items_of.len(), 1);
    assert_eq!(m.items_of[0], 0..3);
}

/// A cut whose recording carries a transform melforge does not apply
/// (speed perturbation) is refused by name; `Resample` is read (the recipe
/// resamples), and a cut's samples are counted as lhotse counts them.
#[test]
fn cuts_with_foreign_transforms_are_refused_and_resample_is_read() {
    let cut = |transforms: &str| {
        format!(
            "{{\"id\": \"c\", \"start\": 0.5, \"duration\": 1.0, \"channel\": 0, \"recording\": \
             {{\"id\": \"r\", \"sources\": [{{\"type\": \"file\", \"channels\": [0], \"source\": \
             \"a.wav\"}}], \"sampling_rate\": 16000, \"num_samples\": 48000, \"duration\": 3.0, \
             \"transforms\": [{transforms}]}}}}"
        )
    };
    let speed = cut(
        "{\"name\": \"Resample\", \"kwargs\": {\"source_sampling_rate\": 8000, \
         \"target_sampling_rate\": 16000}}, {\"name\": \"Speed\", \"kwargs\": {\"factor\": 1.1}}",
    );
    let Err((audio, why)) = parse_line(&speed) else {
        panic!("a sped-up cut was read")
    };
    assert_eq!(audio.as_deref(), Some("a.wav"));
    assert!(why.contains("the transform `Speed`"), "{why}");
    let resampled = cut(
        "{\"name\": \"Resample\", \"kwargs\": {\"source_sampling_rate\": 8000, \
         \"target_sampling_rate\": 16000}}",
    );
    let Ok(item) = parse_line(&resampled) else {
        panic!("a resampled cut was refused")
    };
    let seg = item.segment.unwrap();
    assert_eq!(seg.rounding, crate::model::Rounding::Lhotse);
    assert_eq!(seg.frames(16_000), (8_000, Some(16_000)));
}
