use super::picture::{LEFT, TOP};
use super::*;
use crate::frames::RowLayout;
use crate::frames::testing::Blocks;
use crate::writer::{DatasetWriter, Dtype, OutputPlan, PlannedFile, SplitPlan};

/// A variable-length `train.h5` of rows with 0, 3, 40 and 250 frames of 16
/// bins, and a rejection log with two of its files and one of another split.
fn build(dir: &Path) -> PathBuf {
    let recipe = Blocks::new(16, 4, None);
    let mut paths = crate::plan::PathTable::default();
    let lens = [0usize, 3, 40, 250];
    let files = lens
        .iter()
        .map(|n| PlannedFile {
            path: paths.push(&format!("train/a/u{n}.wav")),
            label: 0,
        })
        .collect();
    let plan = OutputPlan {
        out_dir: dir.to_path_buf(),
        paths: std::sync::Arc::new(paths),
        splits: vec![SplitPlan {
            name: "train".into(),
            files,
        }],
        label_names: vec!["a".into()],
        layout: RowLayout::Frames(recipe.layout.clone()),
        dtype: Dtype::Float32,
        chunk_files: 2,
        extra_attrs: vec![],
    };
    let mut w = DatasetWriter::create(plan).unwrap();
    for (seq, n) in lens.iter().enumerate() {
        let samples: Vec<f32> = (0..n * 4).map(|i| (i as f32 * 0.1).sin() - 2.0).collect();
        w.submit(0, seq, Some(recipe.row(&samples))).unwrap();
    }
    w.finish().unwrap();
    let log = [
        r#"{"path":"train/a/x.wav","kind":"malformed","reason":"r"}"#,
        r#"{"path":"train/b/y.wav","kind":"malformed","reason":"r"}"#,
        r#"{"path":"test/a/z.wav","kind":"sample_rate","reason":"r"}"#,
    ];
    std::fs::write(dir.join("rejected.jsonl"), log.join("\n") + "\n").unwrap();
    dir.join("train.h5")
}

#[test]
fn the_report_has_the_recipe_rows_frames_values_and_rejections() {
    let d = tempfile::tempdir().unwrap();
    let r = inspect(&build(d.path())).unwrap();
    assert_eq!(
        (r.layout.as_str(), r.recipe.as_str()),
        ("frames", "test-blocks")
    );
    assert_eq!((r.rows, r.bins, r.frames_total), (4, 16, 293));
    assert_eq!((r.frames_min, r.frames_max), (0, 250));
    assert_eq!(r.histogram.iter().map(|b| b.rows).sum::<u64>(), 4);
    assert_eq!(r.histogram[0].lo, 0);
    assert_eq!(r.histogram.last().unwrap().rows, 1);
    let (lo, hi) = r.value_range.unwrap();
    // Frames past a block's 4 samples are zeros.
    assert!((-3.0..=-2.9).contains(&lo) && hi == 0.0, "{lo} {hi}");
    assert_eq!(r.rejected.get("malformed"), Some(&2));
    assert_eq!(r.rejected.get("sample_rate"), None, "another split's");
    assert!(r.attributes.iter().any(|(k, v)| k == "step" && v == "4"));
    let text = r.to_string();
    assert!(
        text.contains("recipe: test-blocks (frames layout)"),
        "{text}"
    );
    assert!(text.contains("malformed: 2"), "{text}");
}

#[test]
fn a_row_becomes_a_png_of_the_expected_size() {
    let d = tempfile::tempdir().unwrap();
    let file = build(d.path());
    let out = d.path().join("row.png");
    let (w, h) = draw_row(&file, 3, &out).unwrap();
    assert_eq!((w, h), picture::size(250, 16));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&out).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (w, h));
    // The heat map is coloured, the margins white, the axes black.
    let px = |x: u32, y: u32| {
        let i = ((y * w + x) * 3) as usize;
        [buf[i], buf[i + 1], buf[i + 2]]
    };
    assert_eq!(px(w - 1, h - 1), [255, 255, 255]);
    assert_ne!(px(LEFT + 5, TOP + 5), [255, 255, 255]);
    assert_eq!(px(LEFT - 1, TOP + 5), [0, 0, 0]);
    let e = draw_row(&file, 4, &out).unwrap_err().to_string();
    assert!(
        e.contains("row 4 does not exist (the file has 4 rows)"),
        "{e}"
    );
    // A 0-frame row is a picture of the axes alone.
    assert_eq!(draw_row(&file, 0, &out).unwrap(), picture::size(0, 16));
}
