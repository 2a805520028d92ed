//! Writer tests: every file is read back with hdf5-metno.

use std::path::{Path, PathBuf};

use half::f16;
use hdf5::types::VarLenUnicode;

use super::*;
use crate::dsp::{Segmentation, Spec};

/// A small spec with distinct dimensions: row shape [2, 3, 4, 5].
pub(crate) fn tiny_spec() -> Spec {
    Spec {
        sample_rate: 64,
        clip_seconds: 1.0,
        segmentation: Segmentation {
            enabled: true,
            long_window: 32,
            long_hop: 32,
            short_window: 16,
            short_hop: 8,
        },
        n_fft: 8,
        hop_length: 2,
        win_length: 8,
        n_mels: 4,
        fmax: 32.0,
        ..Spec::default()
    }
}

const ROW_SHAPE: [usize; 4] = [2, 3, 4, 5];
const ROW_LEN: usize = 120;

fn plan(out_dir: &Path, n_files: usize, chunk_files: usize, dtype: Dtype) -> OutputPlan {
    let mut paths = crate::plan::PathTable::default();
    let files = (0..n_files)
        .map(|i| PlannedFile {
            path: paths.push(&format!("train/{}/f{i:03}.wav", ["leak", "noleak"][i % 2])),
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
        layout: RowLayout::Fixed(tiny_spec()),
        dtype,
        chunk_files,
        extra_attrs: vec![("input".into(), "/data/in".into())],
    }
}

/// The row the "compute stage" produces for file `seq`: distinct, dB-like values.
fn row(seq: usize) -> Vec<f32> {
    (0..ROW_LEN)
        .map(|i| -100.0 + seq as f32 * 1.5 + i as f32 * 0.173)
        .collect()
}

/// Submits `order` (seq, accepted) to split 0 and finishes.
fn run(plan: OutputPlan, order: &[(usize, bool)]) -> WriteReport {
    let mut w = DatasetWriter::create(plan).unwrap();
    for &(seq, ok) in order {
        w.submit(0, seq, ok.then(|| row(seq))).unwrap();
    }
    w.finish().unwrap()
}

fn in_order(n: usize) -> Vec<(usize, bool)> {
    (0..n).map(|s| (s, true)).collect()
}

fn read_str(file: &hdf5::File, name: &str) -> String {
    file.attr(name)
        .unwrap()
        .read_scalar::<VarLenUnicode>()
        .unwrap()
        .to_string()
}

/// Checks rows, labels and paths of `path` against the accepted seqs, in order.
fn check_rows(path: &Path, accepted: &[usize]) {
    let file = hdf5::File::open(path).unwrap();
    let mel = file.dataset("mel").unwrap();
    assert_eq!(
        mel.shape(),
        [
            accepted.len(),
            ROW_SHAPE[0],
            ROW_SHAPE[1],
            ROW_SHAPE[2],
            ROW_SHAPE[3]
        ]
    );
    let values = mel.read_raw::<f32>().unwrap();
    let labels = file.dataset("label").unwrap().read_raw::<i32>().unwrap();
    let paths = file
        .dataset("path")
        .unwrap()
        .read_raw::<VarLenUnicode>()
        .unwrap();
    assert_eq!(labels.len(), accepted.len());
    assert_eq!(paths.len(), accepted.len());
    for (i, &seq) in accepted.iter().enumerate() {
        assert_eq!(
            values[i * ROW_LEN..(i + 1) * ROW_LEN],
            row(seq)[..],
            "row {i}"
        );
        assert_eq!(labels[i], (seq % 2) as i32, "label {i}");
        assert!(
            paths[i].as_str().ends_with(&format!("/f{seq:03}.wav")),
            "path {i}"
        );
    }
}

#[test]
fn schema_and_attributes_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let report = run(plan(dir.path(), 3, 2, Dtype::Float32), &in_order(3));
    let out = dir.path().join("train.h5");
    assert_eq!(report.files, vec![("train".to_string(), out.clone(), 3)]);
    assert_eq!(report.bytes_written, std::fs::metadata(&out).unwrap().len());
    check_rows(&out, &[0, 1, 2]);

    let file = hdf5::File::open(&out).unwrap();
    let mel = file.dataset("mel").unwrap();
    assert!(mel.dtype().unwrap().is::<f32>());
    assert_eq!(mel.chunk(), Some(vec![2, 2, 3, 4, 5]));
    assert!(mel.is_resizable());
    let label = file.dataset("label").unwrap();
    assert!(label.dtype().unwrap().is::<i32>());
    assert_eq!(label.chunk(), Some(vec![2]));
    assert_eq!(file.dataset("path").unwrap().chunk(), Some(vec![2]));

    let names = file
        .attr("label_names")
        .unwrap()
        .read_raw::<VarLenUnicode>()
        .unwrap();
    assert_eq!(
        names.iter().map(|n| n.as_str()).collect::<Vec<_>>(),
        ["leak", "noleak"]
    );
    assert_eq!(read_str(&file, "split"), "train");
    assert_eq!(read_str(&file, "melforge_version"), crate::VERSION);
    assert_eq!(read_str(&file, "window"), "hann");
    assert_eq!(read_str(&file, "pad_mode"), "constant");
    assert_eq!(read_str(&file, "mel_scale"), "slaney");
    assert_eq!(read_str(&file, "norm"), "slaney");
    assert_eq!(read_str(&file, "dtype"), "float32");
    assert_eq!(read_str(&file, "input"), "/data/in");
    let int = |n: &str| file.attr(n).unwrap().read_scalar::<i64>().unwrap();
    let real = |n: &str| file.attr(n).unwrap().read_scalar::<f64>().unwrap();
    let flag = |n: &str| file.attr(n).unwrap().read_scalar::<bool>().unwrap();
    assert_eq!(int("sample_rate"), 64);
    assert_eq!(int("clip_samples"), 64);
    assert_eq!(int("n_fft"), 8);
    assert_eq!(int("hop_length"), 2);
    assert_eq!(int("win_length"), 8);
    assert_eq!(int("n_mels"), 4);
    assert_eq!(int("long_window"), 32);
    assert_eq!(int("long_hop"), 32);
    assert_eq!(int("short_window"), 16);
    assert_eq!(int("short_hop"), 8);
    assert_eq!([int("n_long"), int("n_short"), int("n_frames")], [2, 3, 5]);
    assert_eq!(int("chunk_files"), 2);
    assert_eq!(real("clip_seconds"), 1.0);
    assert_eq!(real("power"), 2.0);
    assert_eq!(real("fmin"), 0.0);
    assert_eq!(real("fmax"), 32.0);
    assert_eq!(real("ref"), 1.0);
    assert_eq!(real("amin"), 1e-10);
    assert!(!flag("center"));
    assert!(flag("segmentation_enabled"));
    assert!(file.attr("top_db").is_err(), "top_db none is omitted");
}

#[test]
fn top_db_is_recorded_when_set() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = plan(dir.path(), 1, 1, Dtype::Float32);
    p.layout.spec_mut().top_db = Some(80.0);
    run(p, &in_order(1));
    let file = hdf5::File::open(dir.path().join("train.h5")).unwrap();
    assert_eq!(
        file.attr("top_db").unwrap().read_scalar::<f64>().unwrap(),
        80.0
    );
}

#[test]
fn out_of_order_submission_lands_in_seq_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(plan(dir.path(), 9, 4, Dtype::Float32)).unwrap();
    let order = [7, 2, 8, 0, 1, 5, 3, 6, 4];
    let mut recycled = 0;
    for seq in order {
        recycled += w.submit(0, seq, Some(row(seq))).unwrap().len();
    }
    assert_eq!(recycled, 9, "every consumed row comes back for reuse");
    assert_eq!(w.pending_rows(), 0);
    w.finish().unwrap();
    check_rows(&dir.path().join("train.h5"), &(0..9).collect::<Vec<_>>());
}

#[test]
fn rejected_files_leave_no_hole() {
    let dir = tempfile::tempdir().unwrap();
    let order: Vec<_> = [4, 0, 6, 1, 3, 2, 5]
        .iter()
        .map(|&s| (s, s != 1 && s != 4))
        .collect();
    let report = run(plan(dir.path(), 7, 2, Dtype::Float32), &order);
    assert_eq!(report.files[0].2, 5);
    check_rows(&dir.path().join("train.h5"), &[0, 2, 3, 5, 6]);
}

#[test]
fn float16_round_trips_within_f16_precision() {
    let dir = tempfile::tempdir().unwrap();
    run(plan(dir.path(), 5, 2, Dtype::Float16), &in_order(5));
    let file = hdf5::File::open(dir.path().join("train.h5")).unwrap();
    let mel = file.dataset("mel").unwrap();
    assert!(mel.dtype().unwrap().is::<f16>());
    assert_eq!(read_str(&file, "dtype"), "float16");
    let got = mel.read_raw::<f16>().unwrap();
    assert_eq!(got.len(), 5 * ROW_LEN);
    for seq in 0..5 {
        for (g, want) in got[seq * ROW_LEN..].iter().zip(row(seq)) {
            // f16 has an 11-bit significand: relative error ≤ 2^-11.
            assert!(
                (g.to_f32() - want).abs() <= want.abs() / 2048.0,
                "{g} vs {want}"
            );
        }
    }
}

#[test]
fn chunk_boundaries() {
    for n in [0, 1, 3, 4, 5, 8, 9] {
        let dir = tempfile::tempdir().unwrap();
        let report = run(plan(dir.path(), n, 4, Dtype::Float32), &in_order(n));
        assert_eq!(report.files[0].2, n);
        check_rows(&dir.path().join("train.h5"), &(0..n).collect::<Vec<_>>());
    }
}

#[test]
fn empty_split_and_all_rejected_give_valid_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = plan(dir.path(), 3, 2, Dtype::Float32);
    p.splits.push(SplitPlan {
        name: "empty".into(),
        files: vec![],
    });
    p.label_names.clear();
    for f in &mut p.splits[0].files {
        f.label = -1;
    }
    let mut w = DatasetWriter::create(p).unwrap();
    for seq in [2, 0, 1] {
        w.submit(0, seq, None).unwrap();
    }
    let report = w.finish().unwrap();
    assert_eq!(report.files.len(), 2);
    for (name, path, rows) in &report.files {
        assert_eq!(*rows, 0, "{name}");
        let file = hdf5::File::open(path).unwrap();
        assert_eq!(file.dataset("mel").unwrap().shape(), [0, 2, 3, 4, 5]);
        assert_eq!(file.dataset("label").unwrap().shape(), [0]);
        assert_eq!(file.dataset("path").unwrap().shape(), [0]);
        let names = file.attr("label_names").unwrap();
        assert_eq!(names.read_raw::<VarLenUnicode>().unwrap().len(), 0);
    }
}

#[test]
fn several_splits_are_independent() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = plan(dir.path(), 3, 2, Dtype::Float32);
    let mut test = p.splits[0].clone();
    test.name = "test".into();
    p.splits.push(test);
    let mut w = DatasetWriter::create(p).unwrap();
    for seq in [2, 1, 0] {
        w.submit(1, seq, Some(row(seq))).unwrap();
        w.submit(0, 2 - seq, Some(row(2 - seq))).unwrap();
    }
    let report = w.finish().unwrap();
    assert_eq!(
        report
            .files
            .iter()
            .map(|f| f.0.as_str())
            .collect::<Vec<_>>(),
        ["train", "test"]
    );
    for (_, path, _) in &report.files {
        check_rows(path, &[0, 1, 2]);
    }
}

#[test]
fn partial_is_renamed_only_at_finish() {
    let dir = tempfile::tempdir().unwrap();
    let partial = dir.path().join("train.h5.partial");
    let done = dir.path().join("train.h5");
    let mut w = DatasetWriter::create(plan(dir.path(), 3, 2, Dtype::Float32)).unwrap();
    assert!(partial.exists() && !done.exists());
    for seq in 0..3 {
        w.submit(0, seq, Some(row(seq))).unwrap();
    }
    assert!(partial.exists() && !done.exists());
    w.finish().unwrap();
    assert!(!partial.exists() && done.exists());
}

#[test]
fn finish_with_a_missing_seq_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(plan(dir.path(), 5, 2, Dtype::Float32)).unwrap();
    for seq in [0, 2, 4] {
        w.submit(0, seq, Some(row(seq))).unwrap();
    }
    match w.finish() {
        Err(Error::Incomplete { missing, first, .. }) => assert_eq!((missing, first), (2, 1)),
        other => panic!("expected Incomplete, got {other:?}"),
    }
    assert!(!dir.path().join("train.h5").exists());
    // A failed finish leaves no debris.
    assert!(!dir.path().join("train.h5.partial").exists());
}

#[test]
fn a_failed_build_leaves_no_partial_files_behind() {
    // Regression: a build that failed (e.g. ENOSPC) left `<split>.h5.partial`
    // files that nothing ever cleaned.
    let dir = tempfile::tempdir().unwrap();
    let partial = dir.path().join("train.h5.partial");
    let mut w = DatasetWriter::create(plan(dir.path(), 3, 2, Dtype::Float32)).unwrap();
    w.submit(0, 0, Some(row(0))).unwrap();
    assert!(partial.exists());
    drop(w);
    assert!(!partial.exists());
    assert!(!dir.path().join("train.h5").exists());
}

#[test]
fn protocol_errors_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(plan(dir.path(), 3, 2, Dtype::Float32)).unwrap();
    w.submit(0, 1, Some(row(1))).unwrap();
    assert!(matches!(
        w.submit(1, 0, None),
        Err(Error::UnknownSplit {
            split: 1,
            n_splits: 1
        })
    ));
    assert!(matches!(
        w.submit(0, 3, None),
        Err(Error::SeqOutOfRange { seq: 3, .. })
    ));
    assert!(matches!(
        w.submit(0, 1, None),
        Err(Error::DuplicateSeq { seq: 1, .. })
    ));
    assert!(matches!(
        w.submit(0, 0, Some(vec![0.0; 7])),
        Err(Error::RowLength {
            got: 7,
            expected: 120,
            ..
        })
    ));
    w.submit(0, 0, Some(row(0))).unwrap();
    assert!(matches!(
        w.submit(0, 0, None),
        Err(Error::DuplicateSeq { seq: 0, .. })
    ));
    w.submit(0, 2, Some(row(2))).unwrap();
    w.finish().unwrap();
    check_rows(&dir.path().join("train.h5"), &[0, 1, 2]);
}

#[test]
fn invalid_plans_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let base = plan(dir.path(), 2, 2, Dtype::Float32);
    let mut bad: Vec<OutputPlan> = Vec::new();
    let mut p = base.clone();
    p.chunk_files = 0;
    bad.push(p);
    let mut p = base.clone();
    p.splits[0].files[0].label = 2;
    bad.push(p);
    let mut p = base.clone();
    p.splits[0].files[1].path = 2;
    bad.push(p);
    let mut p = base.clone();
    p.label_names.reverse();
    bad.push(p);
    let mut p = base.clone();
    p.splits.push(p.splits[0].clone());
    bad.push(p);
    let mut p = base.clone();
    p.splits[0].name = "a/b".into();
    bad.push(p);
    let mut p = base.clone();
    p.extra_attrs.push(("split".into(), "x".into()));
    bad.push(p);
    for p in bad {
        assert!(matches!(DatasetWriter::create(p), Err(Error::Plan(_))));
    }
    assert!(!dir.path().join("train.h5.partial").exists());
}

#[test]
fn identical_runs_give_identical_bytes_whatever_the_order() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let forward: Vec<_> = (0..11).map(|s| (s, s != 5)).collect();
    let backward: Vec<_> = forward.iter().rev().copied().collect();
    for dtype in [Dtype::Float32, Dtype::Float16] {
        run(plan(a.path(), 11, 4, dtype), &forward);
        // Separated in time so that any time stamp would differ.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        run(plan(b.path(), 11, 4, dtype), &backward);
        let bytes = |d: &Path| std::fs::read(d.join("train.h5")).unwrap();
        assert!(
            bytes(a.path()) == bytes(b.path()),
            "{dtype:?} outputs differ"
        );
    }
}

/// Leaves sample outputs for `scripts/check_h5.py` in `$MELFORGE_WRITER_SAMPLE_DIR`
/// (float32) and its `float16/` subfolder when set; otherwise in a temporary
/// directory, as a smoke test.
#[test]
fn sample_output_for_check_h5() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::env::var_os("MELFORGE_WRITER_SAMPLE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_path_buf());
    for (dtype, dir) in [
        (Dtype::Float32, dir.clone()),
        (Dtype::Float16, dir.join("float16")),
    ] {
        let mut p = plan(&dir, 7, 3, dtype);
        p.splits.push(SplitPlan {
            name: "empty".into(),
            files: vec![],
        });
        let mut w = DatasetWriter::create(p).unwrap();
        for seq in [3, 1, 0, 6, 2, 5, 4] {
            w.submit(0, seq, (seq != 2).then(|| row(seq))).unwrap();
        }
        w.finish().unwrap();
    }
}
