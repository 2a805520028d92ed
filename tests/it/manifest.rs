//! `build MANIFEST…`: NeMo and lhotse manifests, segments of long
//! recordings, metadata stored beside the rows and the manifest written
//! back, bad lines rejected with their line numbers.
//!
//! A segment's row is checked against a tree build of the segment's
//! samples cut out beforehand (the whole file decoded natively, the frames
//! `int(offset · rate)` … `+ int(duration · rate)` of librosa's arithmetic,
//! written as a float WAV at the file's rate): the same decoder, resampler
//! and recipe then see the same samples, so the rows must be equal. The
//! parity of those samples and rows with librosa and kaldi-native-fbank
//! themselves is `scripts/parity_manifest.py`'s.

use std::path::{Path, PathBuf};
use std::process::Command;

use hdf5::types::VarLenUnicode;
use melforge::app::build::{self, Input};
use melforge::config::Config;
use melforge::decode::policy::Channels;

use crate::common::{put, wav_with};

const KALDI: &str = "[features]\nrecipe = \"kaldi-fbank\"\nnum_mel_bins = 40\n\n\
                     [input]\nresample = \"soxr_hq\"\n";

pub(crate) fn kaldi() -> Config {
    let mut c = Config::parse(KALDI, "test").unwrap();
    c.compute.workers = 2;
    c
}

/// A deterministic 16-bit signal: two tones and a little noise.
pub(crate) fn signal(n: usize, ch: usize, seed: u32) -> Vec<i16> {
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    (0..n * ch)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let t = (i / ch) as f32;
            let c = (i % ch) as f32;
            let v = 0.3 * (t * (0.031 + 0.01 * c)).sin() + 0.2 * (t * 0.0021).sin();
            ((v + (x % 1000) as f32 / 20_000.0) * 20_000.0) as i16
        })
        .collect()
}

pub(crate) fn pcm16(samples: &[i16], ch: u16, rate: u32) -> Vec<u8> {
    let data: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
    wav_with(1, ch, rate, 16, 2 * ch, &data)
}

fn float_wav(samples: &[f32], rate: u32) -> Vec<u8> {
    let data: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
    wav_with(3, 1, rate, 32, 4, &data)
}

/// librosa.load's samples of a segment, at the file's own rate: the
/// whole file decoded (channel mean, or one channel), then cut.
fn cut(
    bytes: &[u8],
    channel: Option<usize>,
    offset: f64,
    duration: Option<f64>,
) -> (Vec<f32>, u32) {
    let mut all = Vec::new();
    let native = match channel {
        None => melforge::decode::native::decode(bytes, Channels::Mean, &mut all).unwrap(),
        Some(c) => {
            let n = melforge::decode::native::decode(bytes, Channels::First, &mut all).unwrap();
            if c > 0 {
                // Only WAVs take a channel other than 0: read it directly.
                let info = melforge::decode::wav::parse(bytes).unwrap();
                all.resize(info.frames, 0.0);
                melforge::decode::wav::decode_channel_into(bytes, &info, c, &mut all);
            }
            n
        }
    };
    let rate = native.sample_rate;
    let start = (offset * f64::from(rate)) as usize;
    let end = duration.map_or(all.len(), |d| {
        (start + (d * f64::from(rate)) as usize).min(all.len())
    });
    (all[start..end].to_vec(), rate)
}

/// The rows of a variable-length split file, with `path`, `meta`, `line`.
pub(crate) struct Rows {
    pub rows: Vec<Vec<f32>>,
    pub path: Vec<String>,
    meta: Vec<serde_json::Value>,
    line: Vec<u32>,
}

impl Rows {
    /// Row `i`'s metadata object.
    pub(crate) fn meta_of(&self, i: usize) -> serde_json::Value {
        self.meta[i].clone()
    }

    /// Every row's 1-based `line` (empty without the dataset).
    pub(crate) fn line_of_all(&self) -> &[u32] {
        &self.line
    }
}

fn strings(f: &hdf5::File, name: &str) -> Vec<String> {
    f.dataset(name)
        .unwrap()
        .read_raw::<VarLenUnicode>()
        .unwrap()
        .into_iter()
        .map(|s| s.as_str().to_string())
        .collect()
}

pub(crate) fn rows(path: &Path) -> Rows {
    let f = hdf5::File::open(path).unwrap();
    let feats = f.dataset("features").unwrap();
    let bins = feats.shape()[1];
    let values = feats.read_raw::<f32>().unwrap();
    let offsets = f.dataset("offsets").unwrap().read_raw::<i64>().unwrap();
    let lengths = f.dataset("lengths").unwrap().read_raw::<i32>().unwrap();
    let rows = offsets
        .iter()
        .zip(&lengths)
        .map(|(&o, &n)| values[o as usize * bins..(o as usize + n as usize) * bins].to_vec())
        .collect();
    let (meta, line) = if f.link_exists("meta") {
        let meta = strings(&f, "meta")
            .iter()
            .map(|s| serde_json::from_str(s).unwrap())
            .collect();
        let line = match f.dataset("line") {
            Ok(d) => d.read_raw::<u32>().unwrap(),
            Err(_) => Vec::new(), // a stored corpus's rows have none
        };
        (meta, line)
    } else {
        (Vec::new(), Vec::new())
    };
    Rows {
        rows,
        path: strings(&f, "path"),
        meta,
        line,
    }
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

pub(crate) fn codec(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/codecs")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Each segment's row equals the tree build of its samples cut beforehand,
/// over a long 16 kHz WAV (read as byte ranges), a 22.05 kHz stereo WAV, a
/// 44.1 kHz stereo MP3 and a 16 kHz Opus; whole-file items too; rows in line
/// order; every field of each line stored as `meta` with its `line`.
#[test]
fn nemo_segments_build_to_the_rows_of_their_samples() {
    let d = tempfile::tempdir().unwrap();
    let long = pcm16(&signal(16_000 * 30, 1, 1), 1, 16_000);
    let stereo = pcm16(&signal(22_050 * 4, 2, 2), 2, 22_050);
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("audio/long.wav", long),
        ("audio/stereo.wav", stereo),
        ("audio/s.mp3", codec("speech44k_stereo.mp3")),
        ("audio/s.opus", codec("speech16k_mono.opus")),
    ];
    let mut files = files;
    for (rel, bytes) in &files {
        put(d.path(), rel, bytes);
    }
    // sox writes FLAC with a SEEKTABLE (a point every 10 s), which segments
    // are read from; CI has sox (scripts/parity_manifest.py needs it too).
    let flac = d.path().join("audio/long.flac");
    let sox = Command::new("sox")
        .arg(d.path().join("audio/long.wav"))
        .arg(&flac)
        .status();
    if sox.is_ok_and(|s| s.success()) {
        files.push(("audio/long.flac", std::fs::read(&flac).unwrap()));
    } else {
        eprintln!("no sox: the FLAC items are left out");
    }
    let mut items: Vec<(usize, Option<f64>, Option<f64>)> = vec![
        (0, Some(12.345_678), Some(2.5)),
        (0, Some(0.0), Some(1.0)),
        (1, Some(1.000_03), Some(1.7)),
        (0, Some(29.0), Some(5.0)),      // runs past the end: the rest
        (2, Some(0.051_234), Some(0.2)), // the MP3 and the Opus last 0.35 s and 0.5 s
        (3, Some(0.1), Some(0.3)),
        (2, None, None),
        (1, None, None),
        (0, Some(7.25), None),
    ];
    if files.len() == 5 {
        // Between two seek points, across one, from 0, to the end.
        items.extend([
            (4, Some(12.345_678), Some(2.5)),
            (4, Some(19.5), Some(1.0)),
            (4, Some(0.0), Some(0.7)),
            (4, Some(25.25), None),
            (4, None, None),
        ]);
    }
    let mut lines = Vec::new();
    let tree = tempfile::tempdir().unwrap();
    for (i, &(f, offset, duration)) in items.iter().enumerate() {
        let (rel, bytes) = &files[f];
        let mut line = serde_json::json!({
            "audio_filepath": rel, "text": format!("utterance {i} — ünïcödé ✓"), "n": i,
        });
        if let Some(o) = offset {
            line["offset"] = o.into();
        }
        let (samples, rate) = cut(bytes, None, offset.unwrap_or(0.0), duration);
        line["duration"] = duration
            .unwrap_or(samples.len() as f64 / f64::from(rate))
            .into();
        lines.push(line.to_string());
        put(
            tree.path(),
            &format!("cuts/{i:03}.wav"),
            &float_wav(&samples, rate),
        );
    }
    let manifest = put(d.path(), "train.jsonl", lines.join("\n").as_bytes());
    let cfg = kaldi();
    let out = tempfile::tempdir().unwrap();
    let input = Input::of(&[manifest]);
    let done = build::build_input(&input, out.path(), &cfg, &Default::default(), None).unwrap();
    assert!(done.rejected.is_empty(), "{:?}", done.rejected);
    // The WAV and FLAC segments were read as their byte ranges: far less
    // than the 30 s files once per segment (a FLAC whole-file item and the
    // small files are read whole).
    assert!(
        done.report.bytes_read < 4 * 960_044,
        "{}",
        done.report.bytes_read
    );
    let want_out = tempfile::tempdir().unwrap();
    crate::common::build(tree.path(), want_out.path(), &cfg);
    let got = rows(&out.path().join("train.h5"));
    let want = rows(&want_out.path().join("all.h5"));
    assert_eq!(got.rows.len(), items.len());
    for (i, (g, w)) in got.rows.iter().zip(&want.rows).enumerate() {
        assert!(!g.is_empty(), "row {i}");
        assert_eq!(max_diff(g, w), 0.0, "row {i} ({:?})", items[i]);
        assert_eq!(got.path[i], files[items[i].0].0);
        assert_eq!(got.line[i], i as u32 + 1);
        let line: serde_json::Value = serde_json::from_str(&lines[i]).unwrap();
        assert_eq!(got.meta[i], line, "row {i}");
    }
}

/// Segments deep into 5-minute MP3, Ogg Vorbis and Ogg Opus recordings
/// (ffmpeg-encoded; CI has ffmpeg) read their frames or pages, not the
/// files: the build reads a few times the segments' share of the bytes, far
/// less than the files once per segment, and each row is the tree build of
/// the whole-file decode's samples (MP3 and Vorbis parts decode to the same
/// samples bit for bit; Opus rows within 6e-2 on log fbank).
#[test]
fn lossy_segments_read_their_frames_not_the_files() {
    const SECONDS: usize = 300;
    let d = tempfile::tempdir().unwrap();
    let wav = put(
        d.path(),
        "src.wav",
        &pcm16(&signal(16_000 * SECONDS, 1, 7), 1, 16_000),
    );
    let encodings: [(&str, &[&str]); 3] = [
        ("long.mp3", &["-c:a", "libmp3lame", "-b:a", "32k"]),
        ("long.ogg", &["-c:a", "libvorbis", "-q:a", "2"]),
        ("long.opus", &["-c:a", "libopus", "-b:a", "24k"]),
    ];
    let mut files = Vec::new();
    for (name, args) in encodings {
        let dst = d.path().join(name);
        let st = Command::new("ffmpeg")
            .args(["-loglevel", "error", "-y", "-i"])
            .arg(&wav)
            .args(args)
            .arg(&dst)
            .status()
            .expect("ffmpeg runs");
        assert!(st.success(), "ffmpeg {name}");
        files.push((name, std::fs::read(&dst).unwrap()));
    }
    let tree = tempfile::tempdir().unwrap();
    let (mut lines, mut items, mut seg_bytes) = (Vec::new(), Vec::new(), 0f64);
    for (f, (name, bytes)) in files.iter().enumerate() {
        for k in 0..12 {
            let offset = 3.0 + k as f64 * 24.37;
            let duration = 2.0 + (k % 3) as f64 * 0.5;
            let line = serde_json::json!({
                "audio_filepath": name, "offset": offset, "duration": duration,
            });
            lines.push(line.to_string());
            let (samples, rate) = cut(bytes, None, offset, Some(duration));
            let i = items.len();
            put(
                tree.path(),
                &format!("cuts/{i:03}.wav"),
                &float_wav(&samples, rate),
            );
            items.push(f);
            seg_bytes += duration / SECONDS as f64 * bytes.len() as f64;
        }
    }
    let manifest = put(d.path(), "lossy.jsonl", lines.join("\n").as_bytes());
    let cfg = kaldi();
    let out = tempfile::tempdir().unwrap();
    let input = Input::of(&[manifest]);
    let done = build::build_input(&input, out.path(), &cfg, &Default::default(), None).unwrap();
    assert!(done.rejected.is_empty(), "{:?}", done.rejected);
    let read = done.report.bytes_read as f64;
    let files_once_each: f64 = files.iter().map(|(_, b)| b.len() as f64 * 12.0).sum();
    eprintln!(
        "read {read} bytes: {:.2}x the segments', {:.4}x the files once per segment",
        read / seg_bytes,
        read / files_once_each
    );
    assert!(read < 4.0 * seg_bytes, "{read} against {seg_bytes}");
    let want_out = tempfile::tempdir().unwrap();
    crate::common::build(tree.path(), want_out.path(), &cfg);
    let got = rows(&out.path().join("lossy.h5"));
    let want = rows(&want_out.path().join("all.h5"));
    assert_eq!(got.rows.len(), items.len());
    for (i, (g, w)) in got.rows.iter().zip(&want.rows).enumerate() {
        // libopus restarted 5 s before the segment is close to, not always
        // exactly, the decoder that ran from the start (after 1 s: one row
        // of 12 at 0.052 on log fbank, the rest equal).
        let tolerance = if files[items[i]].0.ends_with(".opus") {
            0.06
        } else {
            0.0
        };
        let diff = max_diff(g, w);
        assert!(diff <= tolerance, "row {i} ({}): {diff}", files[items[i]].0);
    }
}

pub(crate) fn cut_line(id: &str, source: &str, start: f64, duration: f64, channel: u32) -> String {
    serde_json::json!({
        "id": id, "start": start, "duration": duration, "channel": channel,
        "supervisions": [{"id": format!("{id}-s"), "recording_id": "rec", "start": 0.0,
            "duration": duration, "channel": channel, "text": format!("{id}: Grüße, 世界"),
            "speaker": format!("spk-{id}"), "language": "de"}],
        "recording": {"id": "rec", "sources": [{"type": "file", "channels": [0, 1],
            "source": source}], "sampling_rate": 22050, "num_samples": 88200,
            "duration": 4.0},
        "type": "MonoCut"
    })
    .to_string()
}

/// A gzipped lhotse CutSet: each cut's channel (not the mean), its start
/// and duration, the first supervision's text, speaker and language and the
/// cut's id in `meta`, written back with its row.
#[test]
fn lhotse_cuts_take_their_channel_and_supervision() {
    use std::io::Write as _;
    let d = tempfile::tempdir().unwrap();
    let stereo = pcm16(&signal(22_050 * 4, 2, 3), 2, 22_050);
    put(d.path(), "rec.wav", &stereo);
    let cuts = [
        ("c0", 0.5, 1.0, 1),
        ("c1", 2.0, 1.5, 0),
        ("c2", 0.0, 4.0, 1),
    ];
    let text: Vec<String> = cuts
        .iter()
        .map(|&(id, s, dur, ch)| cut_line(id, "rec.wav", s, dur, ch))
        .collect();
    let manifest = d.path().join("cuts_dev.jsonl.gz");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&manifest).unwrap(),
        flate2::Compression::default(),
    );
    gz.write_all(text.join("\n").as_bytes()).unwrap();
    gz.finish().unwrap();
    let tree = tempfile::tempdir().unwrap();
    for (i, &(_, s, dur, ch)) in cuts.iter().enumerate() {
        let (samples, rate) = cut(&stereo, Some(ch as usize), s, Some(dur));
        put(
            tree.path(),
            &format!("cuts/{i}.wav"),
            &float_wav(&samples, rate),
        );
    }
    let cfg = kaldi();
    let out = tempfile::tempdir().unwrap();
    let input = Input::of(&[manifest]);
    let done = build::build_input(&input, out.path(), &cfg, &Default::default(), None).unwrap();
    assert!(done.rejected.is_empty(), "{:?}", done.rejected);
    let want_out = tempfile::tempdir().unwrap();
    crate::common::build(tree.path(), want_out.path(), &cfg);
    let got = rows(&out.path().join("cuts_dev.h5"));
    let want = rows(&want_out.path().join("all.h5"));
    for (i, &(id, s, dur, ch)) in cuts.iter().enumerate() {
        assert_eq!(max_diff(&got.rows[i], &want.rows[i]), 0.0, "cut {id}");
        let m = &got.meta[i];
        assert_eq!(m["id"], id);
        assert_eq!(m["text"], format!("{id}: Grüße, 世界"));
        assert_eq!(m["speaker"], format!("spk-{id}"));
        assert_eq!(m["language"], "de");
        assert_eq!(
            (m["start"].as_f64(), m["duration"].as_f64()),
            (Some(s), Some(dur))
        );
        assert_eq!(m["channel"], ch);
    }
    // Channel 1 is not the mean.
    let (mean, rate) = cut(&stereo, None, 0.5, Some(1.0));
    let mean_out = tempfile::tempdir().unwrap();
    let mean_tree = tempfile::tempdir().unwrap();
    put(mean_tree.path(), "m/0.wav", &float_wav(&mean, rate));
    crate::common::build(mean_tree.path(), mean_out.path(), &cfg);
    assert!(max_diff(&got.rows[0], &rows(&mean_out.path().join("all.h5")).rows[0]) > 0.1);
    let back = std::fs::read_to_string(out.path().join("cuts_dev.jsonl")).unwrap();
    let back: Vec<serde_json::Value> = back
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(back.len(), 3);
    for (i, b) in back.iter().enumerate() {
        assert_eq!(b["id"], cuts[i].0);
        assert_eq!(b["features_file"], "cuts_dev.h5");
        assert_eq!(b["features_row"], i);
        assert_eq!(b["num_frames"], got.rows[i].len() / 40);
        assert_eq!(
            b["supervisions"][0]["text"],
            format!("{}: Grüße, 世界", cuts[i].0)
        );
    }
}

fn melforge(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_melforge"))
        .args(args)
        .env("MELFORGE_LOG", "warn")
        .output()
        .unwrap()
}

/// Every listed kind of bad line is in rejected.jsonl with its line number
/// and a specific reason; the good lines build, in order, and the exit code
/// is 0; `--strict` fails.
#[test]
fn bad_lines_are_rejected_with_their_line_numbers_and_good_ones_build() {
    let d = tempfile::tempdir().unwrap();
    let wav = pcm16(&signal(16_000 * 3, 1, 4), 1, 16_000);
    put(d.path(), "a.wav", &wav);
    put(
        d.path(),
        "text.wav",
        b"this is not audio at all, only words",
    );
    let mp3 = codec("speech16k_mono.mp3");
    put(d.path(), "cut.mp3", &mp3[..mp3.len() * 3 / 4]);
    let lines = [
        r#"{"audio_filepath": "a.wav", "offset": 0.5, "duration": 1.0, "text": "first"}"#,
        r#"{"audio_filepath": "a.wav", "offset": 0.5, "duration": 1.0"#,
        r#"{"audio_filepath": "missing.wav", "duration": 1.0}"#,
        r#"{"audio_filepath": "text.wav", "duration": 1.0}"#,
        r#"{"audio_filepath": "cut.mp3"}"#,
        r#"{"audio_filepath": "a.wav", "offset": 3.5, "duration": 1.0}"#,
        r#"{"audio_filepath": "a.wav", "offset": 1.0, "duration": 0}"#,
        r#"{"audio_filepath": "a.wav", "offset": 1.0, "duration": -2.5}"#,
        r#"{"audio_filepath": "a.wav", "duration": 3.2}"#,
        r#"{"audio_filepath": "a.wav", "duration": 3.05, "text": "last"}"#,
    ];
    let manifest = put(d.path(), "train.jsonl", lines.join("\n").as_bytes());
    let config = put(d.path(), "c.toml", KALDI.as_bytes());
    let out = d.path().join("out");
    let (m, o, c) = (
        manifest.to_str().unwrap(),
        out.to_str().unwrap(),
        config.to_str().unwrap(),
    );
    let run = melforge(&["build", m, "--out", o, "--config", c, "--progress", "none"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let rejected: Vec<serde_json::Value> = std::fs::read_to_string(out.join("rejected.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let got: Vec<(u64, &str, &str)> = rejected
        .iter()
        .map(|r| {
            let line = r["line"].as_u64().unwrap();
            (
                line,
                r["kind"].as_str().unwrap(),
                r["reason"].as_str().unwrap(),
            )
        })
        .collect();
    let want: [(u64, &str, &str); 8] = [
        (2, "bad_line", "the line is not JSON"),
        (3, "unreadable", "cannot open"),
        (4, "malformed", "not an audio file"),
        (5, "malformed", "truncated MP3 stream"),
        (
            6,
            "bad_segment",
            "the offset 3.5 s is past the end of the file (3.000 s)",
        ),
        (7, "bad_line", "the duration is 0 s; it must be positive"),
        (8, "bad_line", "the duration is -2.5 s; it must be positive"),
        (
            9,
            "bad_segment",
            "the manifest says 3.2 s but the file lasts 3.000 s",
        ),
    ];
    assert_eq!(got.len(), want.len(), "{got:?}");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!((g.0, g.1), (w.0, w.1), "{g:?}");
        assert!(
            g.2.starts_with(w.2),
            "line {}: {:?} is not {:?}",
            g.0,
            g.2,
            w.2
        );
    }
    let split = rows(&out.join("train.h5"));
    assert_eq!(split.line, [1, 10]);
    assert_eq!(split.meta[0]["text"], "first");
    assert_eq!(split.meta[1]["text"], "last");
    let back: Vec<String> = std::fs::read_to_string(out.join("train.jsonl"))
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(back.len(), 2);
    let frames = split.rows[1].len() / 40;
    assert_eq!(
        back[1],
        format!(
            r#"{{"audio_filepath": "a.wav", "duration": 3.05, "text": "last", "features_file": "train.h5", "features_row": 1, "num_frames": {frames}}}"#
        )
    );

    let strict = melforge(&[
        "build",
        m,
        "--out",
        o,
        "--config",
        c,
        "--strict",
        "--progress",
        "none",
    ]);
    assert_eq!(strict.status.code(), Some(1));
}

/// The Python API builds a manifest and reads `meta(i)` back (skipped
/// without the package's dependencies).
#[test]
fn python_builds_a_manifest_and_reads_meta() {
    let probe = Command::new("python3")
        .args(["-c", "import h5py, numpy"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: python3 with h5py and numpy is not available");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    put(
        d.path(),
        "a.wav",
        &pcm16(&signal(16_000 * 2, 1, 5), 1, 16_000),
    );
    let line = r#"{"audio_filepath": "a.wav", "offset": 0.25, "duration": 1.0, "text": "héllo 👋", "speaker": "s1"}"#;
    let manifest = put(d.path(), "train.jsonl", format!("{line}\n").as_bytes());
    let config = put(d.path(), "c.toml", KALDI.as_bytes());
    let out = d.path().join("out");
    let script = r#"
import sys, melforge
m, out, cfg = sys.argv[1:4]
melforge.build(m, out, config=cfg, progress=False)
ds = melforge.MelDataset(out + "/train.h5")
meta = ds.meta(0)
assert meta["text"] == "héllo 👋", meta
assert meta["speaker"] == "s1" and meta["line"] == 1 and meta["offset"] == 0.25, meta
assert meta["num_frames"] == ds.lengths[0] == 98, meta
print("ok")
"#;
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let bin_dir: PathBuf = Path::new(env!("CARGO_BIN_EXE_melforge"))
        .parent()
        .unwrap()
        .into();
    let run = Command::new("python3")
        .args(["-c", script])
        .args([&manifest, &out, &config])
        .env("PYTHONPATH", &python)
        .env("MELFORGE_BIN", env!("CARGO_BIN_EXE_melforge"))
        .env(
            "PATH",
            format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap()),
        )
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}

/// Regression: a whole-file item over `io.max_file_bytes` was rejected as
/// `too_large` under Whisper, which reads only its first 30 s. A 40 s WAV
/// and FLAC at 16 kHz over a 100 kB limit are now read for their first
/// 30 s (the bytes read say so) and give the rows of a build whose limit
/// holds them whole, bit for bit; a WAV at 22,050 Hz (resampled, so its
/// start alone is not the whole one's start) is still rejected as too
/// large.
#[test]
fn whisper_reads_the_first_30_s_of_a_whole_file_item_over_the_size_limit() {
    let d = tempfile::tempdir().unwrap();
    let wav = put(
        d.path(),
        "a.wav",
        &pcm16(&signal(16_000 * 40, 2, 31), 2, 16_000),
    );
    let st = Command::new("ffmpeg")
        .args(["-loglevel", "error", "-y", "-i"])
        .arg(&wav)
        .arg(d.path().join("a.flac"))
        .status()
        .expect("ffmpeg runs");
    assert!(st.success());
    put(
        d.path(),
        "b.wav",
        &pcm16(&signal(22_050 * 40, 1, 32), 1, 22_050),
    );
    let lines: Vec<String> = ["a.wav", "a.flac", "b.wav"]
        .iter()
        .map(|a| serde_json::json!({ "audio_filepath": a }).to_string())
        .collect();
    let manifest = put(d.path(), "train.jsonl", lines.join("\n").as_bytes());
    let cfg = |limit: u64| {
        let mut c = Config::parse(
            "[features]\nrecipe = \"whisper\"\n\n[input]\nresample = \"soxr_hq\"\n",
            "test",
        )
        .unwrap();
        c.compute.workers = 2;
        c.io.max_file_bytes = limit;
        c
    };
    let input = Input::of(std::slice::from_ref(&manifest));
    let build = |limit: u64| {
        let out = tempfile::tempdir().unwrap();
        let done =
            build::build_input(&input, out.path(), &cfg(limit), &Default::default(), None).unwrap();
        (done, out)
    };
    let (whole, whole_out) = build(1 << 30);
    assert!(whole.rejected.is_empty(), "{:?}", whole.rejected);
    let (first, first_out) = build(100_000);
    let rejected: Vec<_> = first
        .rejected
        .iter()
        .map(|r| (r.path.as_str(), r.kind))
        .collect();
    assert_eq!(
        rejected,
        [("b.wav", melforge::model::RejectKind::TooLarge)],
        "{:?}",
        first.rejected
    );
    // 30 s of 16-bit stereo is 1,920,000 bytes of the WAV; the FLAC's
    // first 30 s are less than the file.
    let len = |n: &str| std::fs::metadata(d.path().join(n)).unwrap().len();
    assert!(
        first.report.bytes_read < 1_920_100 + len("a.flac"),
        "{}",
        first.report.bytes_read
    );
    assert!(whole.report.bytes_read >= len("a.wav") + len("a.flac") + len("b.wav"));
    let got = rows(&first_out.path().join("train.h5"));
    let want = rows(&whole_out.path().join("train.h5"));
    assert_eq!(got.rows.len(), 2);
    for (i, g) in got.rows.iter().enumerate() {
        let w = &want.rows[i];
        assert!(!g.is_empty(), "row {i}");
        let same = g.len() == w.len() && g.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "row {i} ({})", got.path[i]);
    }
}
