//! Plan-level tests against a deliberately naive reference: librosa.stft's
//! algorithm written out literally per segment (its head / middle / tail framing
//! with numpy-style padding, a direct O(n²) DFT in f64, the dense filterbank,
//! per-segment dB), with no frame sharing.

use super::filterbank::{mel_filterbank, mel_frequencies};
use super::spec::{MelNorm, MelScale, PadMode, Segmentation, Spec, Window};
use super::window::window_f64;
use super::{Plan, Scratch};

/// `numpy.pad(x, (left, right), mode)` for "constant" (zeros) and "reflect",
/// the latter by walking back and forth across `x` (numpy bounces as often as
/// the pad needs).
fn np_pad(x: &[f32], left: usize, right: usize, mode: PadMode) -> Vec<f32> {
    let walk = |start: usize, dir: isize, count: usize| -> Vec<f32> {
        let n = x.len() as isize;
        let (mut cur, mut d) = (start as isize, dir);
        (0..count)
            .map(|_| match mode {
                PadMode::Constant => 0.0,
                PadMode::Reflect => {
                    if n > 1 {
                        cur += d;
                        if cur == 0 || cur == n - 1 {
                            d = -d;
                        }
                    }
                    x[cur as usize]
                }
            })
            .collect()
    };
    let mut head = walk(0, 1, left);
    head.reverse();
    let tail = walk(x.len() - 1, -1, right);
    [head, x.to_vec(), tail].concat()
}

/// `librosa.util.frame(y, n_fft, hop)`: all complete frames.
fn frame(y: &[f32], n_fft: usize, hop: usize) -> Vec<Vec<f32>> {
    if y.len() < n_fft {
        return Vec::new();
    }
    (0..(y.len() - n_fft) / hop + 1)
        .map(|f| y[f * hop..f * hop + n_fft].to_vec())
        .collect()
}

/// The frames librosa.stft analyses for one segment (librosa 0.11 stft body).
fn stft_frames(y: &[f32], spec: &Spec) -> Vec<Vec<f32>> {
    let (n_fft, hop) = (spec.n_fft, spec.hop_length);
    if !spec.center {
        return frame(y, n_fft, hop);
    }
    let h = n_fft / 2;
    let start_k = h.div_ceil(hop);
    let tail_k = ((y.len() + h) as isize - n_fft as isize).div_euclid(hop as isize) + 1;
    if tail_k <= start_k as isize {
        return frame(&np_pad(y, h, h, spec.pad_mode), n_fft, hop);
    }
    let tail_k = tail_k as usize;
    let start = start_k * hop - h;
    let head_len = ((start_k - 1) * hop + n_fft + 1 - h).min(y.len());
    let mut frames = frame(&np_pad(&y[..head_len], h, 0, spec.pad_mode), n_fft, hop);
    frames.truncate(start_k);
    frames.extend(frame(&y[start..], n_fft, hop));
    if tail_k * hop - h + n_fft <= y.len() + h {
        let post = np_pad(&y[tail_k * hop - h..], 0, h, spec.pad_mode);
        frames.extend(frame(&post, n_fft, hop));
    }
    frames
}

/// Literal per-segment librosa pipeline; returns `[l][s][mel][frame]` in dB (f64).
fn reference(spec: &Spec, clip: &[f32]) -> Vec<f64> {
    let n_fft = spec.n_fft;
    let window = window_f64(spec);
    let bank = mel_filterbank(spec);
    let len = spec.segment_samples();
    let mut out = Vec::new();
    for l in 0..spec.n_long() {
        for s in 0..spec.n_short() {
            let start = spec.segment_start(l, s);
            let frames = stft_frames(&clip[start..start + len], spec);
            let n_frames = frames.len();
            assert_eq!(n_frames, spec.n_frames());
            let mut seg_out = vec![0.0; spec.n_mels * n_frames];
            for (f, fr) in frames.iter().enumerate() {
                let x: Vec<f64> = (0..n_fft).map(|j| window[j] * f64::from(fr[j])).collect();
                let power: Vec<f64> = (0..spec.n_bins())
                    .map(|k| {
                        let (mut re, mut im) = (0.0, 0.0);
                        for (j, &v) in x.iter().enumerate() {
                            let a = -2.0 * std::f64::consts::PI * ((j * k) % n_fft) as f64
                                / n_fft as f64;
                            re += v * a.cos();
                            im += v * a.sin();
                        }
                        (re * re + im * im).sqrt().powf(spec.power)
                    })
                    .collect();
                for (m, row) in bank.iter().enumerate() {
                    let mel: f64 = row.iter().zip(&power).map(|(&w, p)| f64::from(w) * p).sum();
                    seg_out[m * n_frames + f] = 10.0 * mel.max(spec.amin).log10()
                        - 10.0 * spec.amin.max(spec.ref_value).log10();
                }
            }
            out.extend(seg_out);
        }
    }
    if let Some(t) = spec.top_db {
        let max = out.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        for v in &mut out {
            *v = v.max(max - t);
        }
    }
    out
}

#[test]
fn np_pad_matches_numpy() {
    let x = [0.0, 1.0, 2.0, 3.0];
    // numpy.pad([0, 1, 2, 3], (7, 5), mode='reflect')
    let want = [
        1., 0., 1., 2., 3., 2., 1., 0., 1., 2., 3., 2., 1., 0., 1., 2.,
    ];
    assert_eq!(np_pad(&x, 7, 5, PadMode::Reflect), want);
    assert_eq!(
        np_pad(&x, 1, 2, PadMode::Constant),
        [0., 0., 1., 2., 3., 0., 0.]
    );
}

fn compute(spec: &Spec, clip: &[f32]) -> Vec<f32> {
    let plan = Plan::new(spec);
    let mut scratch = Scratch::new(&plan);
    let mut out = vec![f32::NAN; spec.row_len()];
    plan.compute(clip, &mut scratch, &mut out);
    out
}

/// Deterministic noise plus a tone, quantised like int16 input.
fn test_clip(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|i| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let noise = ((state >> 33) as f64 / (1u64 << 31) as f64 - 0.5) * 0.2;
            let tone = 0.5 * (i as f64 * 0.3).sin();
            ((noise + tone) * 32768.0).round().clamp(-32768.0, 32767.0) as f32 / 32768.0
        })
        .collect()
}

/// A small two-stage spec the O(n²) reference can afford.
fn small() -> Spec {
    Spec {
        sample_rate: 1024,
        clip_seconds: 1.0,
        segmentation: Segmentation {
            enabled: true,
            long_window: 256,
            long_hop: 128,
            short_window: 128,
            short_hop: 64,
        },
        n_fft: 64,
        hop_length: 32,
        win_length: 64,
        fmax: 512.0,
        n_mels: 16,
        ..Spec::default()
    }
}

fn assert_matches_reference(spec: &Spec, tol_db: f64) {
    spec.validate().unwrap();
    let clip = test_clip(spec.clip_samples(), 7);
    let got = compute(spec, &clip);
    let want = reference(spec, &clip);
    assert_eq!(got.len(), want.len());
    let err = got
        .iter()
        .zip(&want)
        .map(|(&g, &w)| (f64::from(g) - w).abs())
        .fold(0.0, f64::max);
    assert!(err <= tol_db, "max error {err} dB for {spec:?}");
}

#[test]
fn shared_frames_equal_the_unshared_reference() {
    let base = small();
    let variants = [
        base.clone(),
        Spec {
            center: true,
            ..base.clone()
        },
        Spec {
            center: true,
            pad_mode: PadMode::Reflect,
            ..base.clone()
        },
        Spec {
            n_fft: 63,
            win_length: 50,
            hop_length: 20,
            center: true,
            pad_mode: PadMode::Reflect,
            window: Window::Hamming,
            ..base.clone()
        },
        Spec {
            win_length: 40,
            window: Window::Blackman,
            mel_scale: MelScale::Htk,
            norm: MelNorm::None,
            fmin: 30.0,
            fmax: 400.0,
            ..base.clone()
        },
        Spec {
            power: 1.0,
            top_db: Some(20.0),
            ref_value: 0.01,
            window: Window::Boxcar,
            ..base.clone()
        },
        Spec {
            power: 1.5,
            ..base.clone()
        },
        Spec {
            segmentation: Segmentation {
                enabled: false,
                ..base.segmentation
            },
            center: true,
            ..base.clone()
        },
    ];
    let more = [
        // hop > n_fft/2: the tail piece is shorter than the pad (numpy bounces).
        Spec {
            n_fft: 64,
            hop_length: 48,
            center: true,
            pad_mode: PadMode::Reflect,
            ..base.clone()
        },
        Spec {
            n_fft: 33,
            win_length: 33,
            hop_length: 30,
            center: true,
            pad_mode: PadMode::Reflect,
            ..base.clone()
        },
    ];
    for spec in variants.iter().chain(&more) {
        assert_matches_reference(spec, 1e-4);
    }
}

#[test]
fn default_spec_matches_reference_on_a_short_clip() {
    // The real default parameters on a 1.5 s clip (the O(n²) DFT is slow).
    let spec = Spec {
        clip_seconds: 1.5,
        ..Spec::default()
    };
    assert_matches_reference(&spec, 1e-4);
    let centred = Spec {
        center: true,
        pad_mode: PadMode::Reflect,
        ..spec
    };
    assert_matches_reference(&centred, 1e-4);
}

#[test]
fn pure_tone_peaks_in_its_mel_band() {
    let spec = Spec::default();
    let f0 = 1000.0;
    let clip: Vec<f32> = (0..spec.clip_samples())
        .map(|i| (0.5 * (2.0 * std::f64::consts::PI * f0 * i as f64 / 4096.0).sin()) as f32)
        .collect();
    let out = compute(&spec, &clip);
    // Band m spans mel_f[m] .. mel_f[m + 2] with its peak at mel_f[m + 1].
    let mel_f = mel_frequencies(spec.n_mels + 2, spec.fmin, spec.fmax, spec.mel_scale);
    let expected = (0..spec.n_mels)
        .min_by(|&a, &b| {
            (mel_f[a + 1] - f0)
                .abs()
                .partial_cmp(&(mel_f[b + 1] - f0).abs())
                .unwrap()
        })
        .unwrap();
    let n_frames = spec.n_frames();
    for seg in out.chunks_exact(spec.n_mels * n_frames) {
        let argmax = (0..spec.n_mels)
            .max_by(|&a, &b| seg[a * n_frames].partial_cmp(&seg[b * n_frames]).unwrap())
            .unwrap();
        assert_eq!(argmax, expected);
    }
}

#[test]
fn silence_is_the_amin_floor() {
    let spec = Spec::default();
    let out = compute(&spec, &vec![0.0; spec.clip_samples()]);
    assert!(out.iter().all(|&v| v == -100.0), "{:?}", &out[..4]);
}

#[test]
fn top_db_clamps_against_the_whole_clip_maximum() {
    // Loud first half, quiet second half: quiet segments are clamped relative to
    // the loud ones, not to their own maximum.
    let spec = Spec {
        top_db: Some(30.0),
        ..Spec::default()
    };
    let n = spec.clip_samples();
    let clip: Vec<f32> = test_clip(n, 3)
        .iter()
        .enumerate()
        .map(|(i, &x)| if i < n / 2 { x } else { x * 1e-4 })
        .collect();
    let out = compute(&spec, &clip);
    let max = out.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let min = out.iter().cloned().fold(f32::INFINITY, f32::min);
    assert_eq!(min, max - 30.0);
    let last_seg = &out[out.len() - spec.n_mels..];
    assert!(last_seg.iter().all(|&v| v == max - 30.0));
}

#[test]
fn plan_is_shareable_across_threads() {
    fn check<T: Send + Sync>() {}
    check::<Plan>();
    fn send<T: Send>() {}
    send::<Scratch>();
}

#[test]
#[should_panic(expected = "clip length")]
fn wrong_clip_length_panics() {
    compute(&Spec::default(), &[0.0; 10]);
}

/// `Plan::natural` over recordings of many lengths, one scratch reused from
/// long to short and back: each row equals, bit for bit, a fresh plan built
/// for that clip length with the segmentation off (what a build with
/// `segmentation.enabled = false` and that clip stores), and the O(n²)
/// reference within 1e-3 dB.
#[test]
fn natural_length_plans_equal_a_plan_built_for_that_clip() {
    let variants = [
        small(),
        Spec {
            center: true,
            pad_mode: PadMode::Reflect,
            top_db: Some(40.0),
            ..small()
        },
        Spec {
            center: true,
            n_fft: 63,
            win_length: 50,
            hop_length: 17,
            ..small()
        },
    ];
    for base in variants {
        let plan = Plan::new(&base);
        let mut scratch = Scratch::new(&plan);
        for (k, len) in [1000, 64, 65, 33, 1, 2, 3, 20, 97, 5000, 129]
            .into_iter()
            .enumerate()
        {
            let spec = Spec {
                clip_seconds: len as f64 / f64::from(base.sample_rate),
                segmentation: Segmentation {
                    enabled: false,
                    ..base.segmentation
                },
                ..base.clone()
            };
            let natural = plan.natural(len);
            if let Err(e) = spec.validate() {
                assert_eq!(natural.err(), Some(e), "{len} samples");
                continue;
            }
            let natural = natural.unwrap();
            assert_eq!(natural.spec(), &spec);
            let clip = test_clip(len, k as u64);
            scratch.fit(&natural);
            let mut got = vec![f32::NAN; spec.row_len()];
            natural.compute(&clip, &mut scratch, &mut got);
            let want = compute(&spec, &clip);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(bits(&got) == bits(&want), "{len} samples, {base:?}");
            let reference = reference(&spec, &clip);
            let err = (got.iter().zip(&reference))
                .map(|(&g, &w)| (f64::from(g) - w).abs())
                .fold(0.0, f64::max);
            assert!(err <= 1e-3, "{err} dB off the reference, {len} samples");
        }
    }
    // Too short for any frame: no plan, and the reason names the option.
    let short = Plan::new(&small()).natural(63).unwrap_err();
    assert_eq!(short.key, "mel.n_fft");
    assert_eq!(
        Plan::new(&small()).natural(0).unwrap_err().key,
        "mel.clip_seconds"
    );
}
