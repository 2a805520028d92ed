//! End-to-end `build`: [`melforge::app::build::build`] on a 500-clip synthetic corpus.
//!
//! The corpus is generated once into a temporary directory and read once before
//! measuring, so the page cache is warm and the numbers are the pipeline's own
//! (walk, read, decode, mel, HDF5 write), not the disk's. Each iteration writes
//! into a fresh output directory. Throughput is in files, so criterion prints
//! files/s. Default config (CPU backend, default workers).
//!
//! Run: `cargo bench --bench build -- --warm-up-time 1 --measurement-time 3`.
//! For the comparison with the numpy baseline on a large corpus use
//! `scripts/bench-e2e`.

use std::path::Path;

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use melforge::app::build::{self, Options};
use melforge::config::Config;

const FILES: u64 = 500;

fn warm(dir: &Path) -> u64 {
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir).expect("corpus dir") {
        let path = entry.expect("corpus entry").path();
        if path.is_dir() {
            bytes += warm(&path);
        } else {
            bytes += std::fs::read(&path).expect("corpus file").len() as u64;
        }
    }
    bytes
}

fn bench_build(c: &mut Criterion) {
    let corpus = tempfile::tempdir().expect("temp corpus");
    melforge::synth::generate(corpus.path(), FILES, 1).expect("synth corpus");
    warm(corpus.path());
    let outputs = tempfile::tempdir().expect("temp outputs");
    let cfg = Config::default();
    let opts = Options::default();

    let mut group = c.benchmark_group("build");
    group.sample_size(10);
    // Each iteration is a whole build (~0.1 s and up): equal-length samples.
    group.sampling_mode(SamplingMode::Flat);
    group.throughput(Throughput::Elements(FILES));
    let mut run = 0u64;
    group.bench_function("synth_500_warm", |b| {
        b.iter(|| {
            run += 1;
            let out = outputs.path().join(format!("run{run}"));
            let done = build::build(corpus.path(), &out, &cfg, &opts).expect("build");
            assert_eq!(done.report.files_ok, FILES);
            // Keep the disk footprint flat across iterations.
            let _ = std::fs::remove_dir_all(&out);
        })
    });
    group.finish();
}

criterion_group!(benches, bench_build);
criterion_main!(benches);
