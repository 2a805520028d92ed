//! The writer alone: [`melforge::writer::DatasetWriter`] taking 4096 rows of
//! the default shape (79 × 3 × 32 float32 values, 30,336 bytes) that are
//! already computed and in memory, in seq order, default `chunk_files` (64),
//! and finishing the file. Each iteration writes a fresh file; the row buffers
//! are made, and the previous file deleted, before the timer starts. Criterion prints rows/s.
//!
//! Two paths in the same run: `direct` (the writer: `H5Dwrite_chunk` of whole
//! chunks) and `slice` (the reference it replaced: `write_slice` per chunk),
//! for float32 and float16. `scripts/bench-writer-h5py.py` writes the same rows
//! with h5py's `write_direct_chunk` for the comparison in docs/BENCHMARKS.md.
//! The rows, the plan and the timed write are `melforge bench write`'s
//! (`app::bench_write`), which measures the same on a machine without cargo.
//!
//! Output goes to `$MELFORGE_BENCH_DIR`, else `/dev/shm` (tmpfs: the writer's
//! own cost, not the disk's), else the system temp dir.
//!
//! Run: `cargo bench --bench writer -- --warm-up-time 1 --measurement-time 5`.

use std::path::PathBuf;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use melforge::app::bench_write::{default_dir, plan, rows, write_once};
use melforge::dsp::Spec;
use melforge::writer::{ChunkWrite, Dtype};

const ROWS: usize = 4096;
const CHUNK_FILES: usize = 64;

fn out_root() -> PathBuf {
    std::env::var_os("MELFORGE_BENCH_DIR").map_or_else(default_dir, PathBuf::from)
}

fn bench_writer(c: &mut Criterion) {
    let root = tempfile::tempdir_in(out_root()).expect("bench output dir");
    let row_len = Spec::default().row_len();
    let mut g = c.benchmark_group("writer");
    g.throughput(Throughput::Elements(ROWS as u64));
    g.sample_size(10);
    for dtype in [Dtype::Float32, Dtype::Float16] {
        for (name, how) in [("direct", ChunkWrite::Direct), ("slice", ChunkWrite::Slice)] {
            let out = root.path().join(format!("{}-{name}", dtype.name()));
            g.bench_function(format!("{}/{name}", dtype.name()), |b| {
                b.iter_batched(
                    || {
                        // Outside the timer: replacing last iteration's file
                        // would time the kernel freeing its pages.
                        let _ = std::fs::remove_file(out.join("train.h5"));
                        rows(ROWS, row_len)
                    },
                    |rows| {
                        write_once(plan(&out, dtype, ROWS, CHUNK_FILES), rows, how).expect("write")
                    },
                    BatchSize::PerIteration,
                );
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench_writer);
criterion_main!(benches);
