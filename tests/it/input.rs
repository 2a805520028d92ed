//! Inputs beyond the reference WAVs (`[input]`): FLAC and WAV at other rates,
//! mono and stereo, checked against librosa on committed fixtures
//! (`tests/golden/inputs`, made by `make_golden.py inputs`) through the
//! library call and through `build`, on the CPU and on the CUDA stage over the
//! host double; a malformed-FLAC corpus; arbitrary bytes never panic.

use std::path::{Path, PathBuf};
use std::process::Command;

use melforge::compute::RejectKind;
use melforge::config::Config;
use melforge::decode::clip::{ClipDecoder, Container};
use melforge::dsp::{Plan, Scratch};
use proptest::prelude::*;

const TOLERANCE_DB: f64 = 1e-3;

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn manifest() -> serde_json::Value {
    let p = golden().join("inputs/manifest.json");
    serde_json::from_str(&std::fs::read_to_string(&p).expect("inputs manifest")).unwrap()
}

fn read_f32(path: &Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Largest |a - b| (NaN counts as infinite).
fn max_error(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(&g, &w)| {
            let e = (f64::from(g) - f64::from(w)).abs();
            if e.is_nan() { f64::INFINITY } else { e }
        })
        .fold(0.0, f64::max)
}

/// Every (config name, config, manifest entry) of the input fixtures.
fn configs(m: &serde_json::Value) -> Vec<(String, Config, serde_json::Value)> {
    m["configs"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, c)| {
            let cfg = Config::load(&golden().join(c["config"].as_str().unwrap()))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            (name.clone(), cfg, c.clone())
        })
        .collect()
}

#[test]
fn every_flac_and_resampled_golden_file_matches_librosa_load() {
    let m = manifest();
    let files = m["files"].as_object().unwrap();
    // FLAC 16/24-bit and WAV, four rates, mono and stereo, synth and speech.
    assert!(files.len() >= 16, "{} files", files.len());
    let mut failures = Vec::new();
    for (cname, cfg, entry) in configs(&m) {
        let spec = &cfg.spec;
        assert_eq!(
            spec.clip_samples(),
            entry["clip_samples"].as_u64().unwrap() as usize
        );
        let plan = Plan::new(spec);
        let mut scratch = Scratch::new(&plan);
        let mut dec = ClipDecoder::new(spec.sample_rate, cfg.input.policy);
        let mut clip = vec![0f32; spec.clip_samples()];
        let mut row = vec![0f32; spec.row_len()];
        let mut worst = 0f64;
        for (name, f) in files {
            let bytes = std::fs::read(golden().join(f["path"].as_str().unwrap())).unwrap();
            let d = dec
                .decode(&bytes, &mut clip)
                .unwrap_or_else(|e| panic!("{cname}/{name}: {e}"));
            assert!(d.resampled, "{cname}/{name}");
            assert_eq!(u64::from(d.channels), f["channels"].as_u64().unwrap());
            let want_flac = f["path"].as_str().unwrap().ends_with(".flac");
            assert_eq!(d.container == Container::Flac, want_flac, "{name}");
            plan.compute(&clip, &mut scratch, &mut row);
            let want =
                read_f32(&golden().join(entry["expected"][name]["expected"].as_str().unwrap()));
            let err = max_error(&row, &want);
            if err > TOLERANCE_DB {
                failures.push(format!("{cname}/{name}: {err:.3e} dB"));
            }
            worst = worst.max(err);
        }
        eprintln!(
            "inputs {cname}: {} files, max |error| {worst:.2e} dB",
            files.len()
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Rows of a build's `all.h5` keyed by path.
fn rows_by_path(out: &Path, row_len: usize) -> Vec<(String, Vec<f32>)> {
    let split = crate::common::read_split(&out.join("all.h5"));
    let rows = split.mel.as_slice().unwrap();
    split
        .path
        .iter()
        .enumerate()
        .map(|(i, p)| (p.clone(), rows[i * row_len..(i + 1) * row_len].to_vec()))
        .collect()
}

/// Compares every row with librosa's; returns the worst error.
fn check_rows(
    rows: &[(String, Vec<f32>)],
    m: &serde_json::Value,
    entry: &serde_json::Value,
) -> f64 {
    let files = m["files"].as_object().unwrap();
    assert_eq!(rows.len(), files.len());
    let mut worst = 0f64;
    for (name, f) in files {
        let rel = f["rel"].as_str().unwrap();
        let (_, row) = rows
            .iter()
            .find(|(p, _)| p == rel)
            .unwrap_or_else(|| panic!("{rel} not written"));
        let want = read_f32(&golden().join(entry["expected"][name]["expected"].as_str().unwrap()));
        let err = max_error(row, &want);
        assert!(err <= TOLERANCE_DB, "{rel}: {err:.3e} dB");
        worst = worst.max(err);
    }
    worst
}

#[test]
fn build_of_flac_and_resampled_inputs_matches_librosa() {
    let m = manifest();
    let tree = golden().join(m["input_tree"].as_str().unwrap());
    for (cname, mut cfg, entry) in configs(&m) {
        cfg.compute.workers = 2;
        let out = tempfile::tempdir().unwrap();
        let done = crate::common::build(&tree, out.path(), &cfg);
        assert!(done.rejected.is_empty(), "{cname}: {:?}", done.rejected);
        let worst = check_rows(&rows_by_path(out.path(), cfg.spec.row_len()), &m, &entry);
        let f = crate::common::read_split(&out.path().join("all.h5")).file;
        let attr = |k: &str| {
            f.attr(k)
                .unwrap()
                .read_scalar::<hdf5::types::VarLenUnicode>()
                .unwrap()
                .to_string()
        };
        assert_eq!(attr("input_resample"), "soxr_hq");
        assert_eq!(attr("input_channels"), "mean");
        eprintln!("inputs build {cname}: max |error| {worst:.2e} dB");
    }
}

#[test]
fn with_resample_off_each_other_rate_is_rejected_naming_both_rates() {
    let m = manifest();
    let tree = golden().join(m["input_tree"].as_str().unwrap());
    let (_, mut cfg, _) = configs(&m).remove(0);
    cfg.input.policy.resample = melforge::decode::clip::Resample::Off;
    let out = tempfile::tempdir().unwrap();
    let done = crate::common::build(&tree, out.path(), &cfg);
    assert_eq!(done.rejected.len(), m["files"].as_object().unwrap().len());
    for r in &done.rejected {
        assert_eq!(r.kind, RejectKind::SampleRate, "{r:?}");
        let rate: &str = r.path.split('/').next().unwrap();
        assert_eq!(
            r.reason,
            format!(
                "sample rate {rate} Hz, expected {} Hz",
                cfg.spec.sample_rate
            )
        );
    }
}

/// Runs `melforge build` as a child (the host double is chosen by an
/// environment variable, which a test must not set in its own process).
fn build_child(input: &Path, out: &Path, config: &Path, host_double: bool) -> serde_json::Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_melforge"));
    cmd.arg("build")
        .arg(input)
        .arg("--out")
        .arg(out)
        .arg("--config")
        .arg(config)
        .arg("--json");
    if host_double {
        cmd.env(melforge::compute::HOST_DOUBLE_ENV, "1")
            .args(["--backend", "cuda"]);
    } else {
        cmd.env_remove(melforge::compute::HOST_DOUBLE_ENV)
            .args(["--backend", "cpu"]);
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&o.stdout));
    })
}

#[test]
fn cuda_stage_on_the_host_double_writes_the_cpu_rows_for_flac_resampled_and_device_wavs() {
    let m = manifest();
    let (cname, cfg, entry) = configs(&m)
        .into_iter()
        .find(|c| c.0 == "to_16k")
        .expect("the 16 kHz config");
    assert_eq!(cfg.spec.sample_rate, 16000, "{cname}");
    // The golden tree (every file decoded on the host) plus WAVs at the target
    // rate, which the CUDA stage decodes on the device.
    let tree = tempfile::tempdir().unwrap();
    let src = golden().join(m["input_tree"].as_str().unwrap());
    for f in m["files"].as_object().unwrap().values() {
        let rel = f["rel"].as_str().unwrap();
        crate::common::put(tree.path(), rel, &std::fs::read(src.join(rel)).unwrap());
    }
    let n = cfg.spec.clip_samples();
    let pcm: Vec<u8> = (0..n)
        .flat_map(|i| (((i as f32 * 0.07).sin() * 9000.0) as i16).to_le_bytes())
        .collect();
    let at_rate = crate::common::wav_with(1, 1, 16000, 16, 2, &pcm);
    crate::common::put(tree.path(), "16000/device_mono.wav", &at_rate);
    let config = golden().join(entry["config"].as_str().unwrap());
    let cpu = tempfile::tempdir().unwrap();
    let gpu = tempfile::tempdir().unwrap();
    let r_cpu = build_child(tree.path(), cpu.path(), &config, false);
    let r_gpu = build_child(tree.path(), gpu.path(), &config, true);
    assert_eq!(r_cpu["backend"], "cpu", "{r_cpu}");
    assert_eq!(r_gpu["backend"], "cuda", "{r_gpu}");
    let row_len = cfg.spec.row_len();
    let a = rows_by_path(cpu.path(), row_len);
    let b = rows_by_path(gpu.path(), row_len);
    assert_eq!(a.len(), m["files"].as_object().unwrap().len() + 1);
    assert_eq!(
        a.iter().map(|r| &r.0).collect::<Vec<_>>(),
        b.iter().map(|r| &r.0).collect::<Vec<_>>()
    );
    // Every golden file (FLAC or another rate) is decoded by the decode pool,
    // the WAV at the rate on the device; the (host) kernels compute the mel
    // of all of them, and the rows are the CPU backend's bit for bit.
    let golden_files = m["files"].as_object().unwrap().len() as u64;
    assert_eq!(r_gpu["cuda"]["host_decoded_files"], golden_files, "{r_gpu}");
    assert_eq!(r_gpu["cuda"]["files"], golden_files + 1, "{r_gpu}");
    for ((p, x), (_, y)) in a.iter().zip(&b) {
        let same = x.iter().zip(y).all(|(u, v)| u.to_bits() == v.to_bits());
        assert!(
            same,
            "{p}: rows differ between backends (max |Δ| = {} dB)",
            max_error(x, y)
        );
    }
    // Both backends within tolerance of librosa on the golden files.
    let golden_rows: Vec<_> = b
        .into_iter()
        .filter(|(p, _)| !p.starts_with("16000/"))
        .collect();
    check_rows(&golden_rows, &m, &entry);
}

/// A FLAC fixture from the golden inputs (16-bit stereo, 8 kHz).
fn good_flac() -> Vec<u8> {
    std::fs::read(golden().join("inputs/files/8000/flac16_stereo_synth_8000.flac")).unwrap()
}

/// Offset of the first frame (after the last metadata block).
fn first_frame(f: &[u8]) -> usize {
    let mut pos = 4;
    loop {
        let last = f[pos] & 0x80 != 0;
        let len = u32::from_be_bytes([0, f[pos + 1], f[pos + 2], f[pos + 3]]) as usize;
        pos += 4 + len;
        if last {
            return pos;
        }
    }
}

#[test]
fn malformed_flac_corpus_is_rejected_with_specific_reasons_and_good_files_are_written() {
    let good = good_flac();
    let frame0 = first_frame(&good);
    let patched = |at: usize, v: u8| {
        let mut b = good.clone();
        b[at] = v;
        b
    };
    // STREAMINFO bytes: 8..10 min block, 18..21 rate/channels/bits.
    let mut zero_rate = good.clone();
    zero_rate[18] = 0;
    zero_rate[19] = 0;
    zero_rate[20] &= 0x0F;
    let mut bits12 = good.clone();
    // bits-1 is 5 bits across bytes 20 (low bit) and 21 (high nibble).
    bits12[20] &= 0xFE;
    bits12[21] = (bits12[21] & 0x0F) | (11 << 4);
    let mut huge = good.clone();
    huge[21] |= 0x0F;
    huge[22..26].copy_from_slice(&[0xFF; 4]);
    // A stream of many frames (1.6 s, 4096-sample blocks) with one frame in
    // the middle damaged: the demuxer skips it, the gap names the sample.
    let long = std::fs::read(golden().join("inputs/files/44100/long_flac16_mono_tones_44100.flac"))
        .unwrap();
    let mut bad_crc = long.clone();
    let mid = first_frame(&long) + (long.len() - first_frame(&long)) * 2 / 5;
    bad_crc[mid] ^= 0x5A;
    bad_crc[mid + 1] ^= 0xA5;
    let mut bad_last = good.clone();
    let at = frame0 + (good.len() - frame0) / 2;
    bad_last[at] ^= 0x5A;
    let corpus: Vec<(&str, Vec<u8>, RejectKind, &str)> = vec![
        (
            "wrong_magic.flac",
            patched(3, b'X'),
            RejectKind::Malformed,
            "not an audio file melforge reads",
        ),
        (
            "empty.flac",
            Vec::new(),
            RejectKind::Malformed,
            "truncated header",
        ),
        (
            "header_only.flac",
            good[..30].to_vec(),
            RejectKind::Malformed,
            "truncated FLAC header",
        ),
        (
            "not_streaminfo.flac",
            patched(4, 0x04),
            RejectKind::Malformed,
            "expected STREAMINFO",
        ),
        (
            "streaminfo_len.flac",
            patched(7, 40),
            RejectKind::Malformed,
            "expected 34",
        ),
        (
            "zero_rate.flac",
            zero_rate,
            RejectKind::Malformed,
            "absurd FLAC header: sample rate 0 Hz",
        ),
        (
            "zero_block.flac",
            {
                let mut b = good.clone();
                b[8] = 0;
                b[9] = 0;
                b
            },
            RejectKind::Malformed,
            "block sizes",
        ),
        (
            "huge_count.flac",
            huge,
            RejectKind::Malformed,
            "samples declared in a",
        ),
        (
            "bits12.flac",
            bits12,
            RejectKind::Unsupported,
            "FLAC bit depth 12 is not supported",
        ),
        (
            "truncated.flac",
            good[..frame0 + (good.len() - frame0) / 3].to_vec(),
            RejectKind::Malformed,
            "truncated FLAC stream",
        ),
        (
            "bad_crc.flac",
            bad_crc,
            RejectKind::Malformed,
            "failed its CRC check or was cut out",
        ),
        (
            "bad_last_frame.flac",
            bad_last,
            RejectKind::Malformed,
            "its last frame failed its CRC check",
        ),
        (
            "no_frames.flac",
            good[..frame0].to_vec(),
            RejectKind::Malformed,
            "truncated FLAC stream",
        ),
    ];
    let m = manifest();
    let (_, mut cfg, _) = configs(&m).remove(0);
    cfg.compute.workers = 2;
    let tree = tempfile::tempdir().unwrap();
    for (name, bytes, _, _) in &corpus {
        crate::common::put(tree.path(), &format!("bad/{name}"), bytes);
    }
    crate::common::put(tree.path(), "good/a.flac", &good);
    crate::common::put(tree.path(), "good/b.FLAC", &good);
    let out = tempfile::tempdir().unwrap();
    let done = crate::common::build(tree.path(), out.path(), &cfg);
    assert_eq!(done.report.files_ok, 2, "{:?}", done.rejected);
    let mut reasons = Vec::new();
    for (name, _, kind, words) in &corpus {
        let rel = format!("bad/{name}");
        let r = done
            .rejected
            .iter()
            .find(|r| r.path == rel)
            .unwrap_or_else(|| panic!("{rel} was not rejected"));
        reasons.push(format!("{rel}: {} ({})", r.reason, r.kind));
        assert_eq!(r.kind, *kind, "{rel}: {}", r.reason);
        assert!(
            r.reason.contains(words),
            "{rel}: {:?} lacks {words:?}",
            r.reason
        );
    }
    eprintln!("{}", reasons.join("\n"));
    assert_eq!(done.rejected.len(), corpus.len());
    let rows = rows_by_path(out.path(), cfg.spec.row_len());
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].1, rows[1].1);
}

#[test]
fn channel_policy_first_and_reject_apply_to_flac_and_wav() {
    let m = manifest();
    let (_, base, _) = configs(&m).remove(0);
    let stereo_wav =
        std::fs::read(golden().join("inputs/files/8000/wav16_stereo_speech_8000.wav")).unwrap();
    let stereo_flac = good_flac();
    let mono_flac =
        std::fs::read(golden().join("inputs/files/8000/flac24_mono_speech_8000.flac")).unwrap();
    let clip_len = base.spec.clip_samples();
    let run = |policy, bytes: &[u8]| {
        let mut d = ClipDecoder::new(base.spec.sample_rate, policy);
        let mut clip = vec![0f32; clip_len];
        d.decode(bytes, &mut clip).map(|_| clip)
    };
    use melforge::decode::clip::{Channels, Policy, Resample};
    let pol = |channels| Policy {
        resample: Resample::SoxrHq,
        channels,
    };
    for stereo in [&stereo_wav, &stereo_flac] {
        let e = run(pol(Channels::Reject), stereo).unwrap_err();
        assert_eq!(
            e.to_string(),
            "2 channels, but input.channels = \"reject\" accepts mono files only"
        );
        let r = melforge::compute::Reject::from(e);
        assert_eq!(r.kind(), RejectKind::Unsupported);
        let mean = run(pol(Channels::Mean), stereo).unwrap();
        let first = run(pol(Channels::First), stereo).unwrap();
        assert_ne!(mean, first, "the second channel differs from the first");
    }
    // Mono files pass every policy unchanged.
    let a = run(pol(Channels::Reject), &mono_flac).unwrap();
    assert_eq!(a, run(pol(Channels::First), &mono_flac).unwrap());
    assert_eq!(a, run(pol(Channels::Mean), &mono_flac).unwrap());
    // `first` of a stereo WAV equals the mono WAV of its left channel.
    let info = melforge::decode::wav::parse(&stereo_wav).unwrap();
    let data = &stereo_wav[info.data_offset..info.data_offset + info.frames * 4];
    let left: Vec<u8> = data.chunks_exact(4).flat_map(|f| [f[0], f[1]]).collect();
    let mono = crate::common::wav_with(1, 1, 8000, 16, 2, &left);
    assert_eq!(
        run(pol(Channels::First), &stereo_wav).unwrap(),
        run(pol(Channels::Mean), &mono).unwrap()
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary bytes, and FLAC files with random bytes overwritten or cut,
    /// never panic the clip decoder: a clip or a typed error.
    #[test]
    fn arbitrary_and_mutated_flac_bytes_never_panic(
        raw in proptest::collection::vec(any::<u8>(), 0..512),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
        cut in any::<prop::sample::Index>(),
        resample in any::<bool>(),
    ) {
        use melforge::decode::clip::{Channels, Policy, Resample};
        let policy = Policy {
            resample: if resample { Resample::SoxrHq } else { Resample::Off },
            channels: Channels::Mean,
        };
        let mut dec = ClipDecoder::new(4096, policy);
        let mut clip = vec![0f32; 2048];
        let _ = dec.decode(&raw, &mut clip);
        let mut flac_raw = b"fLaC".to_vec();
        flac_raw.extend_from_slice(&raw);
        let _ = dec.decode(&flac_raw, &mut clip);
        let mut f = good_flac();
        for (at, v) in &edits {
            let i = at.index(f.len());
            f[i] = *v;
        }
        f.truncate(cut.index(f.len() + 1).max(1));
        if let Ok(d) = dec.decode(&f, &mut clip) {
            prop_assert!(d.channels >= 1);
        }
    }
}

/// Found by the `flac_clip` fuzz target: corrupt residuals overflow the
/// fixed predictor inside symphonia's FLAC decoder (`buf[i] += buf[i - 1]`),
/// which panics where overflow checks are on (debug and test builds) and wraps
/// in release builds. Either way the file is one rejection or one row, and
/// the worker survives to decode the next file.
#[test]
fn predictor_overflow_inside_the_flac_decoder_is_a_rejection_not_a_crash() {
    let bad = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/flac_predictor_overflow.flac"),
    )
    .unwrap();
    let mut out = Vec::new();
    let r = melforge::decode::flac::decode(
        &bad,
        melforge::decode::clip::Channels::Mean,
        usize::MAX,
        &mut out,
    );
    if cfg!(debug_assertions) {
        assert_eq!(
            r.unwrap_err().to_string(),
            "corrupt FLAC frame: the FLAC decoder failed on these bytes"
        );
    }
    // Through build, one worker: the bad file and then a good one.
    let m = manifest();
    let (_, mut cfg, _) = configs(&m).remove(0);
    cfg.compute.workers = 1;
    let tree = tempfile::tempdir().unwrap();
    crate::common::put(tree.path(), "a/bad.flac", &bad);
    crate::common::put(tree.path(), "b/good.flac", &good_flac());
    let out = tempfile::tempdir().unwrap();
    let done = crate::common::build(tree.path(), out.path(), &cfg);
    assert!(
        done.rejected.iter().all(|r| r.path == "a/bad.flac"),
        "{:?}",
        done.rejected
    );
    let rows = rows_by_path(out.path(), cfg.spec.row_len());
    assert!(rows.iter().any(|(p, _)| p == "b/good.flac"));
    assert_eq!(rows.len() + done.rejected.len(), 2);
}

/// The row `build` computes for `bytes` under `cfg` (the library path).
fn row_of(bytes: &[u8], cfg: &Config) -> Vec<f32> {
    let plan = Plan::new(&cfg.spec);
    let mut scratch = Scratch::new(&plan);
    let mut clip = vec![0f32; cfg.spec.clip_samples()];
    ClipDecoder::new(cfg.spec.sample_rate, cfg.input.policy)
        .decode(bytes, &mut clip)
        .unwrap();
    let mut row = vec![0f32; cfg.spec.row_len()];
    plan.compute(&clip, &mut scratch, &mut row);
    row
}

/// One file of each container in one folder under the default
/// `input.extensions` — WAV, FLAC, MP3, Ogg Vorbis, Ogg Opus (one named
/// `.ogg`: recognised by content), M4A — builds one row each, equal to the
/// library's row for the file; an MP3 cut short is rejected as malformed
/// with the truncation named, and the build goes on.
#[test]
fn a_build_over_one_file_of_each_container_writes_a_row_for_each() {
    let m = manifest();
    let (_, mut cfg, _) = configs(&m)
        .into_iter()
        .find(|c| c.0 == "to_16k")
        .expect("the 16 kHz config");
    cfg.input.extensions = Config::default().input.extensions;
    cfg.compute.workers = 2;
    let codecs = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/codecs");
    let inputs = golden().join("inputs/files/22050");
    let read = |p: PathBuf| std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let files: Vec<(&str, Vec<u8>)> = vec![
        (
            "mixed/a.wav",
            read(inputs.join("wav16_stereo_speech_22050.wav")),
        ),
        (
            "mixed/b.flac",
            read(inputs.join("flac24_mono_speech_22050.flac")),
        ),
        ("mixed/c.mp3", read(codecs.join("speech44k_stereo.mp3"))),
        ("mixed/d.ogg", read(codecs.join("speech16k_mono.ogg"))),
        ("mixed/e.opus", read(codecs.join("speech44k_stereo.opus"))),
        ("mixed/f.ogg", read(codecs.join("speech16k_mono.opus"))),
        ("mixed/g.m4a", read(codecs.join("speech16k_mono.m4a"))),
        ("mixed/h.MP4", read(codecs.join("speech44k_stereo.m4a"))),
    ];
    let tree = tempfile::tempdir().unwrap();
    for (rel, bytes) in &files {
        crate::common::put(tree.path(), rel, bytes);
    }
    let mp3 = read(codecs.join("speech16k_mono.mp3"));
    crate::common::put(tree.path(), "mixed/cut.mp3", &mp3[..mp3.len() * 3 / 4]);
    let out = tempfile::tempdir().unwrap();
    let done = crate::common::build(tree.path(), out.path(), &cfg);
    assert_eq!(done.rejected.len(), 1, "{:?}", done.rejected);
    let r = &done.rejected[0];
    assert_eq!(r.path, "mixed/cut.mp3");
    assert_eq!(r.kind, RejectKind::Malformed, "{r:?}");
    assert!(r.reason.starts_with("truncated MP3 stream"), "{r:?}");
    let rows = rows_by_path(out.path(), cfg.spec.row_len());
    assert_eq!(rows.len(), files.len());
    for (rel, bytes) in &files {
        let (_, row) = rows.iter().find(|(p, _)| p == rel).expect(rel);
        assert_eq!(row, &row_of(bytes, &cfg), "{rel}");
        assert!(row.iter().all(|v| v.is_finite()), "{rel}");
    }
}
