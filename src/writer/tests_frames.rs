//! Variable-length rows through the build writer: every dataset read back,
//! chunk boundaries crossed, float16, rejections, arrival order.

use crate::frames::RowLayout;
use std::path::Path;

use hdf5::types::VarLenUnicode;

use super::*;
use crate::frames::testing::Blocks;

/// 4,096 bins: a `features` chunk (1 MiB of float32) is 64 frames, so rows
/// of up to 150 frames cross chunk boundaries.
const BINS: usize = 4096;

fn layout(padded: bool) -> FrameLayout {
    Blocks::new(BINS, 8, padded.then_some(3000)).layout
}

fn plan(out_dir: &Path, n_files: usize, dtype: Dtype, padded: bool) -> OutputPlan {
    let mut paths = crate::plan::PathTable::default();
    let files = (0..n_files)
        .map(|i| PlannedFile {
            path: paths.push(&format!("train/spk{}/u{i:03}.wav", i % 3)),
            label: (i % 3) as i32,
        })
        .collect();
    OutputPlan {
        out_dir: out_dir.to_path_buf(),
        paths: std::sync::Arc::new(paths),
        splits: vec![SplitPlan {
            name: "train".into(),
            files,
        }],
        label_names: vec!["spk0".into(), "spk1".into(), "spk2".into()],
        layout: RowLayout::Frames(layout(padded)),
        dtype,
        chunk_files: 4,
        extra_attrs: vec![("input".into(), "/data/in".into())],
    }
}

/// Frames of row `seq`: 0 for every 7th, else up to 150.
fn frames(seq: usize) -> usize {
    if seq % 7 == 3 { 0 } else { (seq * 37) % 151 }
}

fn row(seq: usize, padded: bool) -> Vec<f32> {
    let mut r: Vec<f32> = (0..frames(seq) * BINS)
        .map(|i| seq as f32 + (i % 1000) as f32 / 1024.0)
        .collect();
    if padded {
        r.push(-(seq as f32));
    }
    r
}

fn rejected(seq: usize) -> bool {
    seq % 5 == 4
}

fn write(dir: &Path, n: usize, dtype: Dtype, padded: bool, order: &[usize]) -> WriteReport {
    let mut w = DatasetWriter::create(plan(dir, n, dtype, padded)).unwrap();
    for &seq in order {
        let r = (!rejected(seq)).then(|| row(seq, padded));
        w.submit(0, seq, r).unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn variable_rows_read_back_in_seq_order_whatever_the_arrival() {
    let n = 23;
    for (dtype, padded) in [(Dtype::Float32, true), (Dtype::Float16, false)] {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let forward: Vec<usize> = (0..n).collect();
        let shuffled: Vec<usize> = (0..n).map(|i| (i * 7) % n).collect();
        let ra = write(a.path(), n, dtype, padded, &forward);
        write(b.path(), n, dtype, padded, &shuffled);
        let kept: Vec<usize> = (0..n).filter(|s| !rejected(*s)).collect();
        assert_eq!(ra.files[0].2, kept.len());
        let fa = a.path().join("train.h5");
        assert_eq!(
            std::fs::read(&fa).unwrap(),
            std::fs::read(b.path().join("train.h5")).unwrap(),
            "the bytes depend on the arrival order"
        );
        let f = hdf5::File::open(&fa).unwrap();
        let features = f.dataset("features").unwrap();
        let total: usize = kept.iter().map(|s| frames(*s)).sum();
        assert_eq!(features.shape(), vec![total, BINS]);
        assert_eq!(features.chunk(), Some(vec![64 * 4 / dtype.size(), BINS]));
        let offsets = f.dataset("offsets").unwrap().read_raw::<i64>().unwrap();
        let lengths = f.dataset("lengths").unwrap().read_raw::<i32>().unwrap();
        let labels = f.dataset("label").unwrap().read_raw::<i32>().unwrap();
        let paths = f
            .dataset("path")
            .unwrap()
            .read_raw::<VarLenUnicode>()
            .unwrap();
        let all = features.read_raw::<f32>().unwrap();
        let mut at = 0;
        for (i, &seq) in kept.iter().enumerate() {
            assert_eq!((offsets[i], lengths[i]), (at as i64, frames(seq) as i32));
            assert_eq!(labels[i], (seq % 3) as i32);
            assert_eq!(
                paths[i].as_str(),
                format!("train/spk{}/u{seq:03}.wav", seq % 3)
            );
            let want = row(seq, padded);
            let got = &all[at * BINS..(at + frames(seq)) * BINS];
            for (g, w) in got.iter().zip(&want) {
                let tol = if dtype == Dtype::Float16 { 0.02 } else { 0.0 };
                assert!((g - w).abs() <= tol, "row {i}: {g} vs {w}");
            }
            at += frames(seq);
        }
        assert_eq!(f.link_exists("pad_value"), padded);
        if padded {
            let pads = f.dataset("pad_value").unwrap().read_raw::<f32>().unwrap();
            let want: Vec<f32> = kept.iter().map(|s| -(*s as f32)).collect();
            assert_eq!(pads, want);
        }
        let text = |k: &str| h5::attr_text(&f, k).unwrap();
        assert_eq!(text("layout").as_deref(), Some("frames"));
        assert_eq!(text("recipe").as_deref(), Some("test-blocks"));
        assert_eq!(text("n_bins").as_deref(), Some("4096"));
        assert_eq!(text("step").as_deref(), Some("8"));
        assert_eq!(text("padded_frames").is_some(), padded);
        assert_eq!(text("n_mels"), None, "librosa's parameters stay out");
    }
}

#[test]
fn rows_off_the_protocol_and_clashing_parameters_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(plan(d.path(), 3, Dtype::Float32, true)).unwrap();
    let e = w.submit(0, 0, Some(vec![0.0; BINS])).unwrap_err();
    assert!(
        e.to_string().contains("not frames of 4096 values plus 1"),
        "{e}"
    );
    w.submit(0, 0, Some(vec![0.5; BINS + 1])).unwrap();
    let mut p = plan(d.path(), 1, Dtype::Float32, false);
    if let RowLayout::Frames(l) = &mut p.layout {
        l.params
            .push(("n_bins".into(), crate::frames::Param::Int(3)));
    }
    assert!(DatasetWriter::create(p).is_err());
}

/// Whisper rows of 2–20 s utterances: the covering frames and the pad value,
/// written and compared with the padded layout's bytes (docs/FORMAT.md).
#[test]
fn whisper_rows_keep_the_covering_frames_and_store_under_half_the_padded_bytes() {
    use crate::compute::cpu::HostRow;
    use crate::dsp::whisper::WhisperPlan;
    use crate::recipes::tests::{decoded, signal, wav16};
    let recipe = crate::recipes::whisper(80).unwrap();
    let l = recipe.layout().frame_layout().clone();
    assert_eq!(
        (l.max_samples, l.padded_frames, l.trailer()),
        (Some(480_000), Some(3000), 1)
    );
    let plan = WhisperPlan::new(80).unwrap();
    let mut host = HostRow::new(recipe.as_ref(), crate::decode::clip::Policy::default());
    let mut local = crate::runtime::telemetry::Local::default();
    let n_files = 24;
    let mut paths = crate::plan::PathTable::default();
    let files = (0..n_files)
        .map(|i| PlannedFile {
            path: paths.push(&format!("train/u{i:02}.wav")),
            label: -1,
        })
        .collect();
    let d = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(OutputPlan {
        out_dir: d.path().to_path_buf(),
        paths: std::sync::Arc::new(paths),
        splits: vec![SplitPlan {
            name: "train".into(),
            files,
        }],
        label_names: vec![],
        layout: RowLayout::Frames(l.clone()),
        dtype: Dtype::Float32,
        chunk_files: 64,
        extra_attrs: vec![],
    })
    .unwrap();
    let mut stored_frames = 0;
    for i in 0..n_files {
        // 2 to 20 s, evenly spread (plus one past 30 s: truncated).
        let n = if i == 0 {
            33 * 16_000
        } else {
            32_000 + (i - 1) * 288_000 / (n_files - 2)
        };
        let s = signal(n, i);
        let mut row = Vec::new();
        host.row(&wav16(&s), None, i as u64, &mut row, &mut local)
            .unwrap();
        let mut want = Vec::new();
        let r = plan.compute(&decoded(&s), &mut plan.scratch(), &mut want);
        assert_eq!(row.len(), want.len() + 1);
        assert_eq!(row[..want.len()], want[..]);
        assert_eq!(row[want.len()], r.pad_value);
        assert_eq!(r.frames, plan.num_frames_covering(n.min(480_000)));
        stored_frames += r.frames;
        w.submit(0, i, Some(row)).unwrap();
    }
    let report = w.finish().unwrap();
    let padded = (n_files * 80 * 3000 * 4) as u64;
    let ratio = report.bytes_written as f64 / padded as f64;
    eprintln!(
        "whisper, {n_files} utterances (one of 33 s, the rest 2-20 s): {} bytes stored, \
         {padded} padded ({ratio:.3}); {stored_frames} of {} frames",
        report.bytes_written,
        n_files * 3000
    );
    assert!(ratio < 0.5, "{ratio}");
}

/// Each split's CMVN statistics: the rows' own sums added in row order,
/// the same whether the writer sums a row or is handed its sums, and
/// whatever the arrival order; stored in the file and in the two files
/// beside it, and none of them left by a writer dropped unfinished.
#[test]
fn statistics_describe_the_stored_rows_in_the_file_and_beside_it() {
    let n = 23;
    let bins = crate::cmvn::Bins::frames(&layout(true), Dtype::Float16);
    let mut want = crate::cmvn::Stats::new(BINS);
    for seq in (0..n).filter(|s| !rejected(*s)) {
        want.add_row(&bins.row(&row(seq, true), &mut bins.acc()));
    }
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let shuffled: Vec<usize> = (0..n).map(|i| (i * 7) % n).collect();
    write(a.path(), n, Dtype::Float16, true, &shuffled);
    let mut w = DatasetWriter::create(plan(b.path(), n, Dtype::Float16, true)).unwrap();
    for seq in 0..n {
        match rejected(seq) {
            true => drop(w.submit(0, seq, None).unwrap()),
            false => {
                let r = row(seq, true);
                let s = Some(bins.row(&r, &mut bins.acc()));
                drop(w.submit_with_stats(0, seq, r, s).unwrap());
            }
        }
    }
    w.finish().unwrap();
    for dir in [a.path(), b.path()] {
        let f = hdf5::File::open(dir.join("train.h5")).unwrap();
        assert_eq!(stats::read(&f).unwrap().as_ref(), Some(&want));
        let json = std::fs::read_to_string(dir.join("train.global_cmvn")).unwrap();
        assert_eq!(json, crate::cmvn::files::global_cmvn_json(&want));
        let npz = std::fs::read(dir.join("train.feats_stats.npz")).unwrap();
        assert_eq!(npz, crate::cmvn::files::feats_stats_npz(&want));
    }
    let c = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(plan(c.path(), n, Dtype::Float32, true)).unwrap();
    drop(w.submit(0, 0, Some(row(0, true))).unwrap());
    drop(w); // an interrupted build
    let left: Vec<_> = std::fs::read_dir(c.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}
