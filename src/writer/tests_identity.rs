//! Byte identity of the direct chunk writes: the same plan and rows written
//! with [`ChunkWrite::Direct`] and with the reference [`ChunkWrite::Slice`]
//! (the writer before direct writes: `write_slice` per chunk) must give the
//! same `.h5` files, byte for byte. Covered: float32 and float16, the default
//! row shape (float32 chunks larger than HDF5's chunk cache, float16 chunks
//! that fit it) and a tiny one (hundreds of chunks held in the cache, past its
//! hash-slot count), a partial last chunk, rejected files (gaps), splits of
//! different sizes (one smaller than a chunk, one empty), and arrival out of
//! order.

use std::path::{Path, PathBuf};

use super::*;
use crate::dsp::Spec;

/// A distinct, dB-like row for file `seq` of split `split`.
fn row(len: usize, split: usize, seq: usize) -> Vec<f32> {
    (0..len)
        .map(|i| -100.0 + (seq * 7 + split * 1000) as f32 * 0.37 + (i % 997) as f32 * 0.173)
        .collect()
}

/// A plan with one split per entry of `sizes`, each file labelled by parity.
fn plan(
    out_dir: &Path,
    spec: &Spec,
    dtype: Dtype,
    chunk_files: usize,
    sizes: &[usize],
) -> OutputPlan {
    let mut paths = crate::plan::PathTable::default();
    let splits = sizes
        .iter()
        .enumerate()
        .map(|(k, &n)| SplitPlan {
            name: format!("s{k}"),
            files: (0..n)
                .map(|i| PlannedFile {
                    path: paths.push(&format!("s{k}/{}/f{i:05}.wav", ["a", "b"][i % 2])),
                    label: (i % 2) as i32,
                })
                .collect(),
        })
        .collect();
    OutputPlan {
        out_dir: out_dir.to_path_buf(),
        paths: std::sync::Arc::new(paths),
        splits,
        label_names: vec!["a".into(), "b".into()],
        layout: RowLayout::Fixed(spec.clone()),
        dtype,
        chunk_files,
        extra_attrs: vec![("input".into(), "/data/in".into())],
    }
}

/// Writes every split with `how`; file `seq` is rejected when `rejected(seq)`.
/// Outcomes arrive in blocks of 5 in reverse, so the reorder buffer is used.
fn build(plan: OutputPlan, how: ChunkWrite, rejected: impl Fn(usize) -> bool) -> Vec<PathBuf> {
    let row_len = plan.layout.spec().row_len();
    let sizes: Vec<usize> = plan.splits.iter().map(|s| s.files.len()).collect();
    let mut w = DatasetWriter::create_with(plan, |s| format!("{s}.h5"), how).unwrap();
    for (k, &n) in sizes.iter().enumerate() {
        for block in (0..n).collect::<Vec<_>>().chunks(5) {
            for &seq in block.iter().rev() {
                let r = (!rejected(seq)).then(|| row(row_len, k, seq));
                w.submit(k, seq, r).unwrap();
            }
        }
    }
    let report = w.finish().unwrap();
    report.files.into_iter().map(|(_, p, _)| p).collect()
}

fn assert_identical(spec: &Spec, dtype: Dtype, chunk_files: usize, sizes: &[usize], gaps: bool) {
    let rejected = |seq: usize| gaps && (seq % 11 == 3 || seq.is_multiple_of(17));
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let slice = build(
        plan(a.path(), spec, dtype, chunk_files, sizes),
        ChunkWrite::Slice,
        rejected,
    );
    let direct = build(
        plan(b.path(), spec, dtype, chunk_files, sizes),
        ChunkWrite::Direct,
        rejected,
    );
    assert_eq!(slice.len(), direct.len());
    for (s, d) in slice.iter().zip(&direct) {
        let (s_bytes, d_bytes) = (std::fs::read(s).unwrap(), std::fs::read(d).unwrap());
        let first_diff = s_bytes.iter().zip(&d_bytes).position(|(x, y)| x != y);
        assert!(
            s_bytes == d_bytes,
            "{dtype:?}, chunk {chunk_files}, sizes {sizes:?}, gaps {gaps}: {} differs \
             (sizes {} vs {}, first differing byte {first_diff:?})",
            d.file_name().unwrap().to_string_lossy(),
            s_bytes.len(),
            d_bytes.len(),
        );
    }
}

#[test]
fn default_shape_float32_files_are_byte_identical() {
    // 150 files, chunks of 64: two whole chunks and a partial one; a split
    // smaller than a chunk; an empty split.
    for gaps in [false, true] {
        assert_identical(&Spec::default(), Dtype::Float32, 64, &[150, 40, 0], gaps);
    }
}

#[test]
fn default_shape_float16_files_are_byte_identical() {
    for gaps in [false, true] {
        assert_identical(&Spec::default(), Dtype::Float16, 64, &[150, 40, 0], gaps);
    }
}

#[test]
fn whole_chunks_only_are_byte_identical() {
    for dtype in [Dtype::Float32, Dtype::Float16] {
        assert_identical(&Spec::default(), dtype, 32, &[128], false);
    }
}

#[test]
fn tiny_rows_past_the_cache_slots_are_byte_identical() {
    // Chunks of 4 tiny rows (1.9 KB): more than the cache's 521 hash slots
    // are written, so chunks leave the cache by slot collision first.
    let spec = super::tests::tiny_spec();
    for dtype in [Dtype::Float32, Dtype::Float16] {
        for gaps in [false, true] {
            assert_identical(&spec, dtype, 4, &[2300, 9, 3], gaps);
        }
    }
}

#[test]
fn direct_writes_read_back_as_written() {
    // Identity with the reference is the main proof; this checks the values
    // themselves, including the zero padding not showing up as rows.
    let dir = tempfile::tempdir().unwrap();
    let spec = Spec::default();
    let files = build(
        plan(dir.path(), &spec, Dtype::Float32, 64, &[70]),
        ChunkWrite::Direct,
        |seq| seq == 1,
    );
    let file = hdf5::File::open(&files[0]).unwrap();
    let mel = file.dataset("mel").unwrap();
    assert_eq!(mel.shape()[0], 69);
    let values = mel.read_raw::<f32>().unwrap();
    let n = spec.row_len();
    for (i, seq) in (0..70).filter(|&s| s != 1).enumerate() {
        assert_eq!(values[i * n..(i + 1) * n], row(n, 0, seq)[..], "row {i}");
    }
}
