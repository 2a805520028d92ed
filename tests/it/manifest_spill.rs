//! Segments of compressed recordings that cannot be cut into parts (an M4A
//! past its first access unit coding noise; an MP3 whose seek index cannot
//! be built) are served from one decode of
//! each recording, spilled as a float WAV under the output folder
//! (`source::manifest::spill`): the rows and the rejections are those of
//! the old path, which decodes each segment's recording from its start
//! (`input.spill_max_mib = 0`), bit for bit, while the readers read the
//! segments' extents of the spills instead of the recordings once per
//! segment; nothing of the spill is left in the output folder.

use std::path::{Path, PathBuf};
use std::process::Command;

use melforge::app::build::{self, Input, Outcomes};
use melforge::config::Config;
use melforge::decode::policy::Channels;

use crate::common::{Tmpfs, put};
use crate::manifest::{cut_line, kaldi, pcm16, rows, signal};

pub(crate) fn ffmpeg(src: &Path, args: &[&str], dst: &Path) {
    let st = Command::new("ffmpeg")
        .args(["-loglevel", "error", "-y", "-i"])
        .arg(src)
        .args(args)
        .arg(dst)
        .status()
        .expect("ffmpeg runs");
    assert!(st.success(), "ffmpeg {}", dst.display());
}

fn nemo(audio: &str, offset: f64, duration: Option<f64>) -> String {
    let mut l = serde_json::json!({"audio_filepath": audio, "offset": offset});
    if let Some(d) = duration {
        l["duration"] = d.into();
    }
    l.to_string()
}

fn run(manifests: &[PathBuf], cfg: &Config) -> (Outcomes, tempfile::TempDir) {
    let out = tempfile::tempdir().unwrap();
    let input = Input::of(manifests);
    let done = build::build_input(&input, out.path(), cfg, &Default::default(), None).unwrap();
    let left: Vec<_> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "left in the output folder: {left:?}");
    (done, out)
}

/// The frames the whole-file decode of `bytes` holds, and its channels.
fn decoded(bytes: &[u8]) -> (u64, u64, u32) {
    let mut all = Vec::new();
    let d = melforge::decode::native::decode(bytes, Channels::Mean, &mut all).unwrap();
    (all.len() as u64, u64::from(d.channels), d.sample_rate)
}

/// A 40 s stereo 16 kHz M4A (ffmpeg's `aac`, perceptual noise substitution
/// on), a 30 s MP3 whose last frame is cut short (no seek index; the
/// whole-file decoder takes it) and the same MP3 with a Xing frame count
/// (the whole-file decode is truncated: nothing is spilled, and each
/// segment is still built or rejected as before).
#[test]
fn spilled_segments_are_the_old_paths_rows_bit_for_bit() {
    let d = tempfile::tempdir().unwrap();
    let wav = put(
        d.path(),
        "src.wav",
        &pcm16(&signal(16_000 * 40, 2, 11), 2, 16_000),
    );
    let mono = put(
        d.path(),
        "mono.wav",
        &pcm16(&signal(16_000 * 30, 1, 12), 1, 16_000),
    );
    ffmpeg(
        &wav,
        &["-c:a", "aac", "-aac_pns", "1"],
        &d.path().join("a.m4a"),
    );
    let (nox, xing) = (d.path().join("nox.mp3"), d.path().join("xing.mp3"));
    ffmpeg(
        &mono,
        &["-c:a", "libmp3lame", "-b:a", "32k", "-write_xing", "0"],
        &nox,
    );
    ffmpeg(&mono, &["-c:a", "libmp3lame", "-b:a", "32k"], &xing);
    for (p, name) in [(&nox, "nox_cut.mp3"), (&xing, "xing_cut.mp3")] {
        let b = std::fs::read(p).unwrap();
        put(d.path(), name, &b[..b.len() - 50]);
    }
    let m4a = [
        // (A segment at the very start would get a part of the M4A: no
        // access unit before it codes noise.)
        nemo("a.m4a", 0.5, Some(1.0)),
        nemo("a.m4a", 3.217_5, Some(2.0)),
        cut_line("c1", "a.m4a", 12.5, 0.75, 1),
        cut_line("c0", "a.m4a", 12.5, 0.75, 0),
        nemo("a.m4a", 25.000_03, Some(3.0)),
        nemo("a.m4a", 38.5, Some(5.0)), // runs past the end: the rest
        nemo("a.m4a", 45.0, Some(1.0)), // starts past the end: rejected
        nemo("a.m4a", 39.9, None),
        cut_line("c2", "a.m4a", 1.0, 1.0, 2), // no channel 2: rejected
    ];
    let mp3 = [
        nemo("nox_cut.mp3", 0.5, Some(2.0)),
        nemo("nox_cut.mp3", 17.25, Some(1.5)),
        nemo("nox_cut.mp3", 28.0, None),
        nemo("xing_cut.mp3", 0.5, Some(2.0)),
        nemo("xing_cut.mp3", 17.25, Some(1.5)),
        nemo("xing_cut.mp3", 29.0, None), // into the missing bytes: rejected
    ];
    let manifests = [
        put(d.path(), "aac.jsonl", m4a.join("\n").as_bytes()),
        put(d.path(), "mp3.jsonl", mp3.join("\n").as_bytes()),
    ];
    let mut old_cfg = kaldi();
    old_cfg.input.spill_max_mib = 0;
    let (old, old_out) = run(&manifests, &old_cfg);
    let (new, new_out) = run(&manifests, &kaldi());
    let reasons = |o: &Outcomes| -> Vec<String> {
        o.rejected
            .iter()
            .map(|r| format!("{:?} {} {:?}: {}", r.line, r.path, r.kind, r.reason))
            .collect()
    };
    assert_eq!(reasons(&new), reasons(&old));
    let mut lines: Vec<Option<u64>> = old.rejected.iter().map(|r| r.line).collect();
    lines.sort();
    assert_eq!(lines, [Some(6), Some(7), Some(9)], "{:?}", reasons(&old));
    for split in ["aac", "mp3"] {
        let got = rows(&new_out.path().join(format!("{split}.h5")));
        let want = rows(&old_out.path().join(format!("{split}.h5")));
        assert_eq!(got.rows.len(), want.rows.len(), "{split}");
        for (i, (g, w)) in got.rows.iter().zip(&want.rows).enumerate() {
            assert!(!g.is_empty(), "{split} row {i}");
            let same =
                g.len() == w.len() && g.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{split} row {i} ({})", got.path[i]);
        }
    }
    // The spill served every segment of the M4A and of the cut MP3 that
    // starts before their ends: the readers read those segments' extents
    // of the float WAVs (4 bytes a sample), and the other jobs their files
    // whole, as before.
    let file = |n: &str| std::fs::read(d.path().join(n)).unwrap();
    let spilled = |name: &str, segs: &[(f64, Option<f64>)]| -> u64 {
        let (total, ch, rate) = decoded(&file(name));
        let at = |s: f64| (s * f64::from(rate)) as u64;
        segs.iter()
            .map(|&(o, dur)| {
                let n = dur.map_or(total - at(o), |x| at(x).min(total - at(o)));
                4 * ch * n
            })
            .sum()
    };
    let m4a_segs = [
        (0.5, Some(1.0)),
        (3.217_5, Some(2.0)),
        (12.5, Some(0.75)),
        (12.5, Some(0.75)),
        (25.000_03, Some(3.0)),
        (38.5, Some(5.0)),
        (39.9, None),
        (1.0, Some(1.0)),
    ];
    let nox_segs = [(0.5, Some(2.0)), (17.25, Some(1.5)), (28.0, None)];
    let whole = |n: &str| file(n).len() as u64;
    let want = spilled("a.m4a", &m4a_segs)
        + whole("a.m4a") // starts past the end: read whole, as before
        + spilled("nox_cut.mp3", &nox_segs)
        + 3 * whole("xing_cut.mp3");
    assert_eq!(new.report.bytes_read, want);
    assert!(old.report.bytes_read > 9 * whole("a.m4a"));
}

/// Shards building into one folder each spill their own (and remove only
/// their own stale folder); their rows are the unsharded old path's.
#[test]
fn shards_spill_their_own() {
    use melforge::app::merge::shard::Shard;
    let d = tempfile::tempdir().unwrap();
    let wav = put(
        d.path(),
        "src.wav",
        &pcm16(&signal(16_000 * 20, 1, 13), 1, 16_000),
    );
    ffmpeg(&wav, &["-c:a", "aac"], &d.path().join("a.m4a"));
    let lines: Vec<String> = (0..8)
        .map(|k| nemo("a.m4a", 0.3 + 2.41 * k as f64, Some(1.5)))
        .collect();
    let manifest = put(d.path(), "train.jsonl", lines.join("\n").as_bytes());
    let mut old_cfg = kaldi();
    old_cfg.input.spill_max_mib = 0;
    let (_, old_out) = run(std::slice::from_ref(&manifest), &old_cfg);
    let out = tempfile::tempdir().unwrap();
    let stale = out.path().join(".melforge-spill.shard-0-of-2");
    put(&stale, "0.wav", b"a killed build's");
    put(out.path(), ".melforge-spill/0.wav", b"not this shard's");
    let input = Input::of(std::slice::from_ref(&manifest));
    let mut got = Vec::new();
    for k in 0..2 {
        let s = Some(Shard { index: k, count: 2 });
        let done =
            build::build_input(&input, out.path(), &kaldi(), &Default::default(), s).unwrap();
        assert!(done.rejected.is_empty(), "{:?}", done.rejected);
        // Four segments of 1.5 s, each its extent of the shard's spill
        // (24,000 float samples), where the old path reads the file 4 times.
        assert_eq!(done.report.bytes_read, 4 * 24_000 * 4, "shard {k}");
        assert!(!stale.exists(), "shard {k}");
        got.extend(rows(&out.path().join(format!("train.shard-{k}-of-2.h5"))).rows);
    }
    assert!(out.path().join(".melforge-spill/0.wav").exists());
    let want = rows(&old_out.path().join("train.h5")).rows;
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            g.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits()) && g.len() == w.len(),
            "row {i}"
        );
    }
}

/// `melforge build --config CFG --out OUT MANIFESTS…` (Kaldi fbank, 40
/// bins, two workers, `spill_max_mib` as given): its stderr, after it
/// succeeded with nothing rejected and nothing hidden left in OUT.
fn build_bin(manifests: &[PathBuf], out: &Path, spill_max_mib: u64) -> String {
    let cfg = out.with_extension("toml");
    std::fs::write(
        &cfg,
        format!(
            "[features]\nrecipe = \"kaldi-fbank\"\nnum_mel_bins = 40\n\n[input]\n\
             resample = \"soxr_hq\"\nspill_max_mib = {spill_max_mib}\n\n\
             [compute]\nworkers = 2\n"
        ),
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_melforge"))
        .args(["build", "--strict", "--config"])
        .arg(&cfg)
        .arg("--out")
        .arg(out)
        .args(manifests)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    let left: Vec<_> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".melforge-spill"))
        .collect();
    assert!(left.is_empty(), "left in the output folder: {left:?}");
    err
}

/// Regression: the spill (a 2-hour mono recording spills 461 MB) could
/// fill the disk under OUT. On a 4 MiB tmpfs (the split file takes about
/// 1 MiB), a 40 s M4A whose segments reach its end is refused by the
/// free-space check (its 2.56 MB spill and as much again for the rows do
/// not fit), and an 80 s one whose segments end at 6 s passes the check on
/// that estimate and meets ENOSPC while written (5.12 MB); both fall back
/// to the old path with the reason logged, the rows are those of a build
/// with the spill off on a roomy disk, bit for bit, and no spill file or
/// folder is left.
#[test]
fn a_full_disk_under_out_falls_back_from_the_spill_with_the_same_rows() {
    let d = tempfile::tempdir().unwrap();
    for (name, seconds, seed) in [("early", 80, 21), ("late", 40, 22)] {
        let wav = put(
            d.path(),
            &format!("{name}.wav"),
            &pcm16(&signal(16_000 * seconds, 1, seed), 1, 16_000),
        );
        ffmpeg(
            &wav,
            &["-c:a", "aac"],
            &d.path().join(format!("{name}.m4a")),
        );
    }
    let lines: Vec<String> = (0..6)
        .flat_map(|k| {
            let k = k as f64;
            [
                nemo("early.m4a", 0.3 + 0.8 * k, Some(1.5)),
                nemo("late.m4a", 0.3 + 7.0 * k, Some(1.5)),
            ]
        })
        .collect();
    let manifests = [put(d.path(), "train.jsonl", lines.join("\n").as_bytes())];
    let want_out = d.path().join("want");
    build_bin(&manifests, &want_out, 0);
    let disk_dir = d.path().join("disk");
    let Some(_disk) = Tmpfs::mount(&disk_dir, 4) else {
        return;
    };
    let out = disk_dir.join("out");
    let log = build_bin(&manifests, &out, 2048);
    assert_eq!(
        log.matches("No room on the disk under the output folder")
            .count(),
        2,
        "{log}"
    );
    assert!(log.contains("No space left on device"), "{log}");
    assert!(log.contains("bytes free"), "{log}");
    assert!(log.contains("spill_no_room=2"), "{log}");
    let got = rows(&out.join("train.h5"));
    let want = rows(&want_out.join("train.h5"));
    assert_eq!(got.rows.len(), 12);
    assert_eq!(got.rows.len(), want.rows.len());
    for (i, (g, w)) in got.rows.iter().zip(&want.rows).enumerate() {
        assert!(!g.is_empty(), "row {i}");
        let same = g.len() == w.len() && g.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "row {i} ({})", got.path[i]);
    }
}
