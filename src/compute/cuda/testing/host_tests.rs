//! The kernels, compiled for the host, against the CPU backend and librosa.
//!
//! Every test builds real WAV bytes (random signals in every sample format, mono,
//! stereo and 3 channels, shorter and longer than a clip), lays several files out
//! in one buffer like the reader's arena, runs [`HostPipeline`] on the batch and
//! compares every value with `wav::decode` + `mel::Plan::compute` on the same
//! file. Max differences are printed (`cargo test --lib compute::cuda --
//! --nocapture`); the host path is expected to be bit-identical to the CPU.

use std::path::{Path, PathBuf};

use half::f16;

use super::*;
use crate::decode::wav::{self, SampleFormat};
use crate::dsp::{MelNorm, MelScale, PadMode, Plan, Scratch, Spec, Window};

/// The contract (docs/DESIGN.md): 1e-3 dB vs librosa; vs the CPU backend we expect
/// (and require) far less.
const LIBROSA_TOLERANCE_DB: f64 = 1e-3;
const CPU_TOLERANCE_DB: f64 = 1e-5;

const FORMATS: [SampleFormat; 6] = [
    SampleFormat::U8,
    SampleFormat::I16,
    SampleFormat::I24,
    SampleFormat::I32,
    SampleFormat::F32,
    SampleFormat::F64,
];

/// splitmix64: deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One channel's value `v` (about [-1, 1]) stored as `format`, little-endian.
fn encode_sample(format: SampleFormat, v: f64, out: &mut Vec<u8>) {
    let int = |scale: f64, lo: f64, hi: f64| (v * scale).round().clamp(lo, hi);
    match format {
        SampleFormat::U8 => out.push(int(128.0, -128.0, 127.0) as i32 as u8 ^ 0x80),
        SampleFormat::I16 => {
            out.extend_from_slice(&(int(32768.0, -32768.0, 32767.0) as i16).to_le_bytes())
        }
        SampleFormat::I24 => {
            let x = int(8_388_608.0, -8_388_608.0, 8_388_607.0) as i32;
            out.extend_from_slice(&x.to_le_bytes()[..3]);
        }
        SampleFormat::I32 => out.extend_from_slice(
            &(int(2_147_483_648.0, -2_147_483_648.0, 2_147_483_647.0) as i32).to_le_bytes(),
        ),
        SampleFormat::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
        SampleFormat::F64 => out.extend_from_slice(&v.to_le_bytes()),
    }
}

/// A WAV file of `frames` random frames: a tone, noise and a quiet stretch, so
/// loud, leakage-floor and amin-clamped values all occur. `junk` adds an
/// odd-sized chunk before `fmt ` (moves the data offset, exercises the pad byte).
fn wav_file(
    rng: &mut Rng,
    format: SampleFormat,
    channels: u16,
    rate: u32,
    frames: usize,
    junk: usize,
) -> Vec<u8> {
    let width = format.bytes_per_sample();
    let float = matches!(format, SampleFormat::F32 | SampleFormat::F64);
    let freq = 50.0 + 1500.0 * rng.unit();
    let mut data = Vec::with_capacity(frames * width * usize::from(channels));
    for t in 0..frames {
        let quiet = t % 3000 >= 2500;
        for c in 0..channels {
            let tone =
                (std::f64::consts::TAU * freq * t as f64 / f64::from(rate) + f64::from(c)).sin();
            let noise = 2.0 * rng.unit() - 1.0;
            let mut v = if quiet {
                1e-4 * noise
            } else {
                0.5 * tone + 0.45 * noise
            };
            if float && t % 97 == 0 {
                v *= 1.7; // floats may exceed full scale
            }
            encode_sample(format, v, &mut data);
        }
    }
    let block_align = width * usize::from(channels);
    let mut f = Vec::new();
    f.extend_from_slice(b"RIFF\0\0\0\0WAVE");
    if junk > 0 {
        f.extend_from_slice(b"LIST");
        f.extend_from_slice(&(junk as u32).to_le_bytes());
        f.extend((0..junk).map(|i| i as u8));
        if junk % 2 == 1 {
            f.push(0);
        }
    }
    f.extend_from_slice(b"fmt ");
    f.extend_from_slice(&16u32.to_le_bytes());
    f.extend_from_slice(&(if float { 3u16 } else { 1u16 }).to_le_bytes());
    f.extend_from_slice(&channels.to_le_bytes());
    f.extend_from_slice(&rate.to_le_bytes());
    f.extend_from_slice(&(rate * block_align as u32).to_le_bytes());
    f.extend_from_slice(&(block_align as u16).to_le_bytes());
    f.extend_from_slice(&(width as u16 * 8).to_le_bytes());
    f.extend_from_slice(b"data");
    f.extend_from_slice(&(data.len() as u32).to_le_bytes());
    f.extend_from_slice(&data);
    let riff = (f.len() - 8) as u32;
    f[4..8].copy_from_slice(&riff.to_le_bytes());
    f
}

/// Files laid out in one buffer at multiples of `align` plus `skew` bytes, as
/// the arena holds them; with their descriptors.
fn arena(files: &[Vec<u8>], align: usize, skew: usize) -> (Vec<u8>, Vec<MfFile>) {
    let mut bytes = Vec::new();
    let mut descs = Vec::new();
    for f in files {
        let at = bytes.len().next_multiple_of(align) + skew;
        bytes.resize(at, 0xAB);
        bytes.extend_from_slice(f);
        descs.push(MfFile::new(&wav::parse(f).expect("test WAV parses"), at));
    }
    bytes.resize(bytes.len().next_multiple_of(align), 0xAB);
    (bytes, descs)
}

/// The CPU backend's rows for `files`, through the per-frame realfft path
/// (`Plan::compute_reference`): the host kernels stand realfft in for cuFFT, so
/// that is the path they must equal (the batched path differs in FFT rounding).
fn cpu_rows(spec: &Spec, files: &[Vec<u8>]) -> Vec<f32> {
    let plan = Plan::new(spec);
    let mut scratch = Scratch::new(&plan);
    let mut clip = vec![0f32; spec.clip_samples()];
    let mut rows = vec![0f32; files.len() * spec.row_len()];
    for (f, row) in files.iter().zip(rows.chunks_exact_mut(spec.row_len())) {
        wav::decode(f, spec.sample_rate, &mut clip).expect("test WAV decodes");
        plan.compute_reference(&clip, &mut scratch, row);
    }
    rows
}

/// Largest |a − b| (a NaN on one side only counts as infinite).
fn max_diff(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(&g, &w)| match (g.is_nan(), w.is_nan()) {
            (true, true) => 0.0,
            (false, false) => (f64::from(g) - f64::from(w)).abs(),
            _ => f64::INFINITY,
        })
        .fold(0.0, f64::max)
}

/// Host kernels vs CPU backend for one batch; returns the max difference.
fn compare_batch(spec: &Spec, files: &[Vec<u8>]) -> f64 {
    let (bytes, descs) = arena(files, 4096, 0);
    let host = HostPipeline::new(&Plan::new(spec)).unwrap();
    let got = host.run(&bytes, &descs).unwrap();
    max_diff(&got, &cpu_rows(spec, files))
}

/// Frame counts: shorter than a clip (zero padding), exact, longer (trimming).
fn lengths(spec: &Spec) -> [usize; 3] {
    let n = spec.clip_samples();
    [n * 6 / 10 + 1, n, n * 13 / 10]
}

#[test]
fn every_sample_format_matches_the_cpu_backend() {
    let spec = Spec::default();
    let mut rng = Rng(1);
    let mut report = Vec::new();
    let mut mixed = Vec::new();
    for format in FORMATS {
        let mut files = Vec::new();
        for channels in [1, 2, 3] {
            for (k, frames) in lengths(&spec).into_iter().enumerate() {
                let junk = if k == 1 { 7 } else { 0 };
                files.push(wav_file(&mut rng, format, channels, 4096, frames, junk));
            }
        }
        let diff = compare_batch(&spec, &files);
        report.push(format!("{format:?} {diff:.3e} dB"));
        assert!(diff <= CPU_TOLERANCE_DB, "{format:?}: max diff {diff:e} dB");
        mixed.push(files[4].clone());
    }
    // One batch mixing every format (the descriptor decides per file).
    let diff = compare_batch(&spec, &mixed);
    assert!(
        diff <= CPU_TOLERANCE_DB,
        "mixed batch: max diff {diff:e} dB"
    );
    eprintln!(
        "host kernels vs CPU, default spec: {}; mixed {diff:.3e} dB",
        report.join(", ")
    );
}

/// Hand-built specs covering every branch of the kernels (2–3 s clips).
fn variant_specs() -> Vec<(&'static str, Spec)> {
    let base = Spec {
        clip_seconds: 2.0,
        ..Spec::default()
    };
    let mut no_seg = base.clone();
    no_seg.segmentation.enabled = false;
    let mut v = vec![
        (
            "center_reflect",
            Spec {
                center: true,
                pad_mode: PadMode::Reflect,
                ..base.clone()
            },
        ),
        (
            "center_constant",
            Spec {
                center: true,
                pad_mode: PadMode::Constant,
                ..base.clone()
            },
        ),
        (
            "segmentation_off",
            Spec {
                center: true,
                pad_mode: PadMode::Reflect,
                ..no_seg.clone()
            },
        ),
        (
            "top_db_80",
            Spec {
                top_db: Some(80.0),
                ..base.clone()
            },
        ),
        (
            "top_db_0",
            Spec {
                top_db: Some(0.0),
                center: true,
                ..base.clone()
            },
        ),
        (
            "power_1",
            Spec {
                power: 1.0,
                ..base.clone()
            },
        ),
        (
            "power_1.5",
            Spec {
                power: 1.5,
                ..base.clone()
            },
        ),
        (
            "htk_norm_none",
            Spec {
                mel_scale: MelScale::Htk,
                norm: MelNorm::None,
                ..base.clone()
            },
        ),
        (
            "ref_0.01",
            Spec {
                ref_value: 0.01,
                window: Window::Blackman,
                ..base.clone()
            },
        ),
        (
            "amin_subnormal",
            Spec {
                amin: 1e-42,
                ..base.clone()
            },
        ),
        (
            "odd_n_fft_centered",
            Spec {
                n_fft: 401,
                win_length: 301,
                hop_length: 100,
                center: true,
                amin: 1e-8,
                window: Window::Boxcar,
                ..no_seg.clone()
            },
        ),
        (
            "hamming_8k_many_mels",
            Spec {
                sample_rate: 8000,
                fmax: 4000.0,
                window: Window::Hamming,
                n_mels: 80,
                ..no_seg
            },
        ),
    ];
    let mut n400 = Spec {
        n_fft: 400,
        hop_length: 160,
        win_length: 400,
        center: true,
        pad_mode: PadMode::Constant,
        ..base
    };
    n400.segmentation.long_window = 2048;
    n400.segmentation.long_hop = 1024;
    n400.segmentation.short_window = 1024;
    n400.segmentation.short_hop = 512;
    v.push(("n_fft_400", n400));
    v
}

#[test]
fn non_default_specs_match_the_cpu_backend() {
    let mut rng = Rng(2);
    let mut report = Vec::new();
    for (name, spec) in variant_specs() {
        spec.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        let [short, exact, long] = lengths(&spec);
        let rate = spec.sample_rate;
        let files = vec![
            wav_file(&mut rng, SampleFormat::I16, 1, rate, short, 0),
            wav_file(&mut rng, SampleFormat::F32, 2, rate, long, 3),
            wav_file(&mut rng, SampleFormat::U8, 1, rate, exact, 0),
            wav_file(&mut rng, SampleFormat::I24, 3, rate, long, 0),
            wav_file(&mut rng, SampleFormat::F64, 2, rate, short, 0),
            wav_file(&mut rng, SampleFormat::I32, 1, rate, exact, 0),
        ];
        let diff = compare_batch(&spec, &files);
        report.push(format!("{name} {diff:.1e}"));
        assert!(diff <= CPU_TOLERANCE_DB, "{name}: max diff {diff:e} dB");
    }
    eprintln!("host kernels vs CPU per spec (dB): {}", report.join(", "));
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn read_f32(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

#[test]
fn golden_cases_match_librosa_through_the_host_kernels() {
    let dir = golden_dir();
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let cases = manifest["cases"].as_object().expect("manifest.cases");
    assert!(cases.len() >= 9, "only {} golden cases", cases.len());
    let mut report = Vec::new();
    for (case, entry) in cases {
        let config = dir.join(entry["config"].as_str().unwrap());
        let spec = crate::config::Config::load(&config)
            .unwrap_or_else(|e| panic!("{case}: {e}"))
            .spec;
        let clips = entry["clips"].as_object().expect("clips");
        let files: Vec<Vec<u8>> = clips
            .values()
            .map(|c| std::fs::read(dir.join(c["wav"].as_str().unwrap())).unwrap())
            .collect();
        let (bytes, descs) = arena(&files, 4096, 0);
        let host = HostPipeline::new(&Plan::new(&spec)).unwrap();
        let rows = host.run(&bytes, &descs).unwrap();

        let mut vs_librosa = 0f64;
        for (c, row) in clips.values().zip(rows.chunks_exact(spec.row_len())) {
            let want = read_f32(&dir.join(c["expected"].as_str().unwrap()));
            vs_librosa = vs_librosa.max(max_diff(row, &want));
        }
        let vs_cpu = max_diff(&rows, &cpu_rows(&spec, &files));
        report.push(format!("{case} {vs_librosa:.1e}/{vs_cpu:.0e}"));
        assert!(
            vs_librosa <= LIBROSA_TOLERANCE_DB,
            "{case}: {vs_librosa:e} dB vs librosa"
        );
        assert!(vs_cpu <= CPU_TOLERANCE_DB, "{case}: {vs_cpu:e} dB vs CPU");
    }
    eprintln!(
        "host kernels, golden cases (dB vs librosa / vs CPU): {}",
        report.join(", ")
    );
}

#[test]
fn f16_conversion_rounds_like_the_half_crate() {
    let mut input: Vec<f32> = (0..=u32::MAX / 4099)
        .map(|k| f32::from_bits(k.wrapping_mul(4099)))
        .collect();
    let specials = crate::dsp::f16::EDGES;
    input.extend_from_slice(&specials);
    input.extend(specials.iter().map(|v| -v));
    let mut out = vec![0u16; input.len()];
    to_f16(Launch::for_total(input.len()), &input, &mut out).unwrap();
    for (&x, &h) in input.iter().zip(&out) {
        let want = f16::from_f32(x);
        if want.is_nan() {
            assert!(
                f16::from_bits(h).is_nan(),
                "{x:e} ({:#x}) → {h:#06x}",
                x.to_bits()
            );
        } else {
            assert_eq!(h, want.to_bits(), "{x:e} ({:#x})", x.to_bits());
        }
    }
}

#[test]
fn float16_rows_equal_the_cpu_rows_rounded() {
    let spec = Spec {
        clip_seconds: 2.0,
        top_db: Some(60.0),
        ..Spec::default()
    };
    let mut rng = Rng(3);
    let files: Vec<_> = FORMATS
        .iter()
        .map(|&f| wav_file(&mut rng, f, 2, 4096, spec.clip_samples(), 0))
        .collect();
    let (bytes, descs) = arena(&files, 4096, 0);
    let host = HostPipeline::new(&Plan::new(&spec)).unwrap();
    let got = host.run_f16(&bytes, &descs).unwrap();
    let want: Vec<u16> = cpu_rows(&spec, &files)
        .iter()
        .map(|&v| f16::from_f32(v).to_bits())
        .collect();
    assert_eq!(got, want);
}

#[test]
fn results_do_not_depend_on_launch_shape_or_file_alignment() {
    let spec = Spec {
        clip_seconds: 1.0,
        center: true,
        top_db: Some(40.0),
        ..Spec::default()
    };
    let mut rng = Rng(4);
    let files: Vec<_> = FORMATS
        .iter()
        .map(|&f| wav_file(&mut rng, f, 2, 4096, 3000, 1))
        .collect();
    let plan = Plan::new(&spec);
    let (bytes, descs) = arena(&files, 4096, 0);
    let reference = HostPipeline::new(&plan)
        .unwrap()
        .run(&bytes, &descs)
        .unwrap();
    for launch in [
        Launch::new(1, 1),
        Launch::new(3, 7),
        Launch::new(1000, 1024),
    ] {
        let host = HostPipeline::new(&plan).unwrap().with_launch(launch);
        let got = host.run(&bytes, &descs).unwrap();
        assert!(got == reference, "{launch:?}");
    }
    // Files at odd byte offsets: every multi-byte sample read is unaligned.
    for skew in [1, 3, 5] {
        let (bytes, descs) = arena(&files, 64, skew);
        let got = HostPipeline::new(&plan)
            .unwrap()
            .run(&bytes, &descs)
            .unwrap();
        assert!(got == reference, "skew {skew}");
    }
}

#[test]
fn wrappers_reject_arguments_that_would_read_out_of_bounds() {
    let spec = Spec {
        clip_seconds: 1.0,
        center: true,
        pad_mode: PadMode::Reflect,
        ..Spec::default()
    };
    let plan = Plan::new(&spec);
    let t = Tables::new(&plan).unwrap();
    let launch = Launch::new(4, 32);
    let mut rng = Rng(5);
    let file = wav_file(&mut rng, SampleFormat::I16, 1, 4096, 3000, 0);
    let (bytes, descs) = arena(std::slice::from_ref(&file), 16, 0);
    let mut clips = vec![0f32; t.clip_samples];

    // A descriptor whose samples run past the buffer.
    let mut bad = descs[0];
    bad.frames += 10_000;
    assert!(matches!(
        decode(launch, &bytes, &[bad], t.clip_samples, &mut clips),
        Err(Error::Table { what: "files", .. })
    ));
    assert!(matches!(
        decode(launch, &bytes, &descs, t.clip_samples, &mut clips[1..]),
        Err(Error::Length { .. })
    ));
    assert!(matches!(
        decode(
            Launch::new(0, 32),
            &bytes,
            &descs,
            t.clip_samples,
            &mut clips
        ),
        Err(Error::Launch(_))
    ));
    decode(launch, &bytes, &descs, t.clip_samples, &mut clips).unwrap();

    let mut frames = vec![0f64; t.frames_len(1)];
    let mut shifted = t.clone();
    *shifted.frame_start.last_mut().unwrap() += 1_000_000;
    assert!(frame(launch, &shifted, &clips, &mut frames).is_err());
    let mut wrong_pattern = t.clone();
    wrong_pattern.frame_pattern[0] = 99;
    assert!(frame(launch, &wrong_pattern, &clips, &mut frames).is_err());
    frame(launch, &t, &clips, &mut frames).unwrap();

    let spectrum = vec![0f64; t.spectrum_len(1)];
    let mut db = vec![0f32; t.per_file_db()];
    let mut bands = t.clone();
    bands.band_offset[3] = bands.band_weights.len() as i32;
    assert!(power_mel_db(launch, &bands, &spectrum, &mut db).is_err());
    assert!(power_mel_db(launch, &t, &spectrum[2..], &mut db).is_err());
    power_mel_db(launch, &t, &spectrum, &mut db).unwrap();

    let mut rows = vec![0f32; t.row_len];
    let mut columns = t.clone();
    columns.column[5] = t.n_distinct as i32;
    assert!(scatter(launch, &columns, &db, &mut rows).is_err());
    scatter(launch, &t, &db, &mut rows).unwrap();
    // All-zero spectrum: every value is the amin floor.
    let floor = (10.0 * 1e-10f64.log10()) as f32;
    assert!(
        rows.iter().all(|&v| (v - floor).abs() < 1e-4),
        "{}",
        rows[0]
    );
}

/// `mf_clip_max` runs in parallel (partial maxima per file, then their
/// maximum); max is exact, so it equals the one-thread-per-file pass bit for
/// bit, whatever the launch shape, with ties, -inf, and sizes not a multiple
/// of the part count.
#[test]
fn the_parallel_clip_max_equals_the_single_pass_bit_for_bit() {
    use super::{CLIP_MAX_PARTS, clip_max};
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for (files, per_file) in [(1, 1), (3, 63), (5, 64), (7, 65), (4, 1000), (2, 8192)] {
        let db: Vec<f32> = (0..files * per_file)
            .map(|i| match next() % 11 {
                0 => f32::NEG_INFINITY,
                1 => -100.0,
                _ => ((next() % 200_000) as f32 - 150_000.0) / 1000.0 + (i % 3) as f32 * 1e-7,
            })
            .collect();
        let one = clip_max(Launch::for_total(files), &db, per_file, 0).unwrap();
        for launch in [Launch::for_total(files * CLIP_MAX_PARTS), Launch::new(1, 1)] {
            let two = clip_max(launch, &db, per_file, CLIP_MAX_PARTS).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&two), bits(&one), "{files} files × {per_file}");
        }
        let want: Vec<f32> = db
            .chunks(per_file)
            .map(|c| c.iter().copied().fold(f32::NEG_INFINITY, f32::max))
            .collect();
        assert_eq!(one, want);
    }
}
