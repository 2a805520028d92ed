//! Recordings too large to read whole (`melforge::long`): a whole-file item
//! over `io.max_file_bytes` is computed in pieces (Kaldi) or from its first
//! seconds (Whisper, librosa), and every row equals, bit for bit, the row of
//! a build that read the same file whole (the limit raised). What cannot be
//! computed so is a `too_large` rejection that says why, and a row that
//! breaks half-way is taken back out of the file.

use std::path::Path;

use melforge::app::build::{self, Input, Outcomes};
use melforge::config::Config;
use melforge::model::RejectKind;

use crate::common::{frame_rows, put};
use crate::manifest::{pcm16, signal};
use crate::manifest_spill::ffmpeg;

/// The limit the streamed builds run under: every long file is over it.
const CAP: u64 = 1 << 20;

/// Long recordings at 16 kHz: a mono WAV of 200 s, its FLAC (ffmpeg's:
/// no SEEKTABLE, so parts are searched for) and MP3, a stereo WAV of 130 s
/// (over the limit by its channels), and a short WAV read whole.
fn corpus(root: &Path) {
    let mono = put(
        root,
        "a/mono.wav",
        &pcm16(&signal(16_000 * 200 + 777, 1, 5), 1, 16_000),
    );
    ffmpeg(&mono, &[], &root.join("a/mono.flac"));
    ffmpeg(
        &mono,
        &["-c:a", "libmp3lame", "-b:a", "32k"],
        &root.join("a/mono.mp3"),
    );
    put(
        root,
        "b/stereo.wav",
        &pcm16(&signal(16_000 * 130, 2, 6), 2, 16_000),
    );
    put(
        root,
        "b/short.wav",
        &pcm16(&signal(16_000 * 3, 1, 7), 1, 16_000),
    );
}

fn run(input: &Path, toml: &str, limit: u64) -> (Outcomes, tempfile::TempDir) {
    let mut cfg = Config::parse(toml, "test").unwrap();
    cfg.compute.workers = 2;
    cfg.io.max_file_bytes = limit;
    let out = tempfile::tempdir().unwrap();
    let input = Input::of(&[input.to_path_buf()]);
    let done = build::build_input(&input, out.path(), &cfg, &Default::default(), None).unwrap();
    (done, out)
}

/// The rows of every split file, checked to lie back to back.
fn rows_of(dir: &Path) -> std::collections::BTreeMap<String, Vec<f32>> {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "h5") {
            let f = hdf5::File::open(&p).unwrap();
            let offsets = f.dataset("offsets").unwrap().read_raw::<i64>().unwrap();
            let lengths = f.dataset("lengths").unwrap().read_raw::<i32>().unwrap();
            let mut end = 0;
            for (o, n) in offsets.iter().zip(&lengths) {
                assert_eq!(*o, end, "{}: rows back to back", p.display());
                end += i64::from(*n);
            }
            let frames = f.dataset("features").unwrap().shape()[0];
            assert_eq!(
                frames as i64,
                end,
                "{}: no frames past the rows",
                p.display()
            );
        }
    }
    frame_rows(dir)
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

#[test]
fn kaldi_rows_of_files_over_the_limit_are_computed_in_pieces_bit_for_bit() {
    let d = tempfile::tempdir().unwrap();
    corpus(d.path());
    let recipes = [
        // Dither draws noise frame after frame: the pieces must draw it in
        // the same order from the same seed.
        "[features]\nrecipe = \"kaldi-fbank\"\nnum_mel_bins = 80\ndither = 1.0\n",
        // snip_edges = false reflects at both ends of the whole waveform.
        "[features]\nrecipe = \"kaldi-mfcc\"\nsnip_edges = false\n",
    ];
    for toml in recipes {
        let (whole, whole_out) = run(d.path(), toml, 1 << 30);
        assert!(whole.rejected.is_empty(), "{:?}", whole.rejected);
        let (pieces, pieces_out) = run(d.path(), toml, CAP);
        assert!(pieces.rejected.is_empty(), "{toml}: {:?}", pieces.rejected);
        let want = rows_of(whole_out.path());
        let got = rows_of(pieces_out.path());
        assert_eq!(got.len(), 5, "{toml}");
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>()
        );
        for (path, row) in &got {
            assert!(!row.is_empty(), "{path}");
            assert!(same_bits(row, &want[path]), "{toml}: {path} differs");
        }
    }
}

#[test]
fn whisper_and_librosa_rows_of_files_over_the_limit_come_from_their_first_seconds() {
    let d = tempfile::tempdir().unwrap();
    corpus(d.path());
    let toml = "[features]\nrecipe = \"whisper\"\n";
    let (whole, whole_out) = run(d.path(), toml, 1 << 30);
    let (first, first_out) = run(d.path(), toml, CAP);
    assert!(whole.rejected.is_empty() && first.rejected.is_empty());
    let (want, got) = (rows_of(whole_out.path()), rows_of(first_out.path()));
    assert_eq!(got.len(), 5);
    for (path, row) in &got {
        assert!(same_bits(row, &want[path]), "whisper: {path} differs");
    }
    // librosa at the files' rate: the clip is the first 10 s.
    let toml = "[mel]\nsample_rate = 16000\n";
    let (whole, whole_out) = run(d.path(), toml, 1 << 30);
    let (first, first_out) = run(d.path(), toml, CAP);
    assert!(whole.rejected.is_empty() && first.rejected.is_empty());
    let mel = |dir: &Path, split: &str| {
        let s = crate::common::read_split(&dir.join(format!("{split}.h5")));
        (s.path, s.mel.into_raw_vec_and_offset().0)
    };
    // One folder level: one split, `all`, labelled by folder.
    let (paths, got) = mel(first_out.path(), "all");
    let (want_paths, want) = mel(whole_out.path(), "all");
    assert_eq!(paths.len(), 5);
    assert_eq!(paths, want_paths);
    assert!(same_bits(&got, &want), "librosa rows differ");
}

#[test]
fn what_cannot_be_computed_in_pieces_is_rejected_as_too_large_with_the_reason() {
    let d = tempfile::tempdir().unwrap();
    // At 8 kHz under a 16 kHz recipe with resampling on: soxr runs over
    // the whole signal, so pieces would not be the whole-file row.
    put(
        d.path(),
        "a/slow.wav",
        &pcm16(&signal(8_000 * 200, 1, 8), 1, 8_000),
    );
    put(
        d.path(),
        "a/ok.wav",
        &pcm16(&signal(16_000 * 2, 1, 9), 1, 16_000),
    );
    let toml = "[features]\nrecipe = \"kaldi-fbank\"\n\n[input]\nresample = \"soxr_hq\"\n";
    let (done, out) = run(d.path(), toml, CAP);
    let rejected: Vec<_> = done
        .rejected
        .iter()
        .map(|r| (r.path.as_str(), r.kind))
        .collect();
    assert_eq!(rejected, [("a/slow.wav", RejectKind::TooLarge)]);
    let reason = &done.rejected[0].reason;
    assert!(
        reason.contains("cannot be computed in pieces") && reason.contains("8000 Hz"),
        "{reason}"
    );
    assert_eq!(rows_of(out.path()).len(), 1);
}

/// A FLAC whose frames are damaged a minute and a half in: the row breaks
/// after whole `features` chunks of it were written. It is rejected, and
/// the file holds the other rows back to back, as the whole-file build
/// (which rejects it too) does.
#[test]
fn a_row_that_breaks_half_way_is_taken_back_out_of_the_file() {
    let d = tempfile::tempdir().unwrap();
    corpus(d.path());
    let flac = d.path().join("a/mono.flac");
    let mut bytes = std::fs::read(&flac).unwrap();
    let at = bytes.len() * 9 / 20;
    for b in &mut bytes[at..at + 20_000] {
        *b = b.wrapping_mul(31).wrapping_add(7);
    }
    std::fs::write(&flac, &bytes).unwrap();
    // 23 bins: a 1 MiB chunk is 11,397 frames, under two minutes.
    let toml = "[features]\nrecipe = \"kaldi-fbank\"\n";
    let (whole, whole_out) = run(d.path(), toml, 1 << 30);
    let (pieces, pieces_out) = run(d.path(), toml, CAP);
    let paths = |o: &Outcomes| {
        o.rejected
            .iter()
            .map(|r| r.path.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(paths(&whole), ["a/mono.flac"], "{:?}", whole.rejected);
    assert_eq!(paths(&pieces), ["a/mono.flac"], "{:?}", pieces.rejected);
    let (want, got) = (rows_of(whole_out.path()), rows_of(pieces_out.path()));
    assert_eq!(got.len(), 4);
    for (path, row) in &got {
        assert!(same_bits(row, &want[path]), "{path} differs");
    }
}
