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
//!
//! Output goes to `$MELFORGE_BENCH_DIR`, else `/dev/shm` (tmpfs: the writer's
//! own cost, not the disk's), else the system temp dir.
//!
//! Run: `cargo bench --bench writer -- --warm-up-time 1 --measurement-time 5`.

use std::path::{Path, PathBuf};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use melforge::dsp::Spec;
use melforge::source::PathTable;
use melforge::writer::{ChunkWrite, DatasetWriter, Dtype, OutputPlan, PlannedFile, SplitPlan};

const ROWS: usize = 4096;
const CHUNK_FILES: usize = 64;

fn out_root() -> PathBuf {
    if let Some(d) = std::env::var_os("MELFORGE_BENCH_DIR") {
        return PathBuf::from(d);
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

fn plan(out_dir: &Path, dtype: Dtype) -> OutputPlan {
    let mut paths = PathTable::default();
    let files = (0..ROWS)
        .map(|i| PlannedFile {
            path: paths.push(&format!(
                "train/{}/clip{i:06}.wav",
                ["leak", "noleak"][i % 2]
            )),
            label: (i % 2) as i32,
        })
        .collect();
    OutputPlan {
        out_dir: out_dir.to_path_buf(),
        paths: std::sync::Arc::new(paths),
        splits: vec![SplitPlan {
            name: "train".into(),
            files,
        }],
        label_names: vec!["leak".into(), "noleak".into()],
        spec: Spec::default(),
        dtype,
        chunk_files: CHUNK_FILES,
        extra_attrs: vec![],
    }
}

/// Synthetic dB-like rows (the values do not matter to the writer).
fn rows(row_len: usize) -> Vec<Vec<f32>> {
    (0..ROWS)
        .map(|r| {
            (0..row_len)
                .map(|i| -80.0 + ((r * 31 + i * 7) % 800) as f32 * 0.1)
                .collect()
        })
        .collect()
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
                        rows(row_len)
                    },
                    |rows| {
                        let w = DatasetWriter::create_with(
                            plan(&out, dtype),
                            |s| format!("{s}.h5"),
                            how,
                        );
                        let mut w = w.expect("create");
                        for (seq, row) in rows.into_iter().enumerate() {
                            w.submit(0, seq, Some(row)).expect("submit");
                        }
                        w.finish().expect("finish")
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
