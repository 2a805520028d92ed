//! Per-clip CPU cost of the compute stage: WAV decode and the log-mel transform.
//!
//! * `wav_decode/pcm16_10s`: [`melforge::decode::wav::decode`] of one canonical 10 s,
//!   4096 Hz int16 mono clip into the f32 clip buffer.
//! * `mel/default`: [`melforge::dsp::Plan::compute`] with the default spec (the
//!   reference dataset: two-stage segmentation, 237 segments, 159 distinct frames).
//! * `mel/center_reflect_unsegmented`: a non-default spec: segmentation off (the
//!   whole clip is one STFT), `center = true` with reflect padding (161 frames).
//!
//! Throughput is in clips (elements), so criterion prints clips/s per core.
//! Run: `cargo bench --bench mel -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use melforge::dsp::{PadMode, Plan, Scratch, Spec};
use melforge::synth;

/// One synthetic clip (seed 1, index 0, label 0) as PCM16 samples.
fn pcm() -> Vec<i16> {
    synth::clip(1, 0, 0)
}

fn as_f32(samples: &[i16], len: usize) -> Vec<f32> {
    let mut clip: Vec<f32> = samples.iter().map(|&s| f32::from(s) / 32768.0).collect();
    clip.resize(len, 0.0);
    clip
}

fn bench_decode(c: &mut Criterion) {
    let bytes = synth::encode_wav_pcm16(&pcm(), synth::SAMPLE_RATE);
    let mut clip = vec![0.0f32; Spec::default().clip_samples()];
    let mut group = c.benchmark_group("wav_decode");
    group.throughput(Throughput::Elements(1));
    group.bench_function("pcm16_10s", |b| {
        b.iter(|| {
            melforge::decode::wav::decode(black_box(&bytes), synth::SAMPLE_RATE, &mut clip)
                .expect("a synth clip decodes")
        })
    });
    group.finish();
}

fn bench_spec(c: &mut Criterion, name: &str, spec: &Spec) {
    spec.validate().expect("benchmark spec is valid");
    let plan = Plan::new(spec);
    let mut scratch = Scratch::new(&plan);
    let clip = as_f32(&pcm(), spec.clip_samples());
    let mut out = vec![0.0f32; spec.row_len()];
    let mut group = c.benchmark_group("mel");
    group.throughput(Throughput::Elements(1));
    group.bench_function(name, |b| {
        b.iter(|| plan.compute(black_box(&clip), &mut scratch, black_box(&mut out)))
    });
    group.finish();
}

fn bench_mel(c: &mut Criterion) {
    bench_spec(c, "default", &Spec::default());

    let mut spec = Spec::default();
    spec.segmentation.enabled = false;
    spec.center = true;
    spec.pad_mode = PadMode::Reflect;
    bench_spec(c, "center_reflect_unsegmented", &spec);
}

criterion_group!(benches, bench_decode, bench_mel);
criterion_main!(benches);
