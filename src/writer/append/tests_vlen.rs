//! A file with variable-length string datasets (made by `build`, or by a
//! `serve` from before `writer::strings`) is converted when the appender
//! opens it (`super::vlen`), and what a killed writer of the old layout
//! left behind cannot reach the confirmed rows.

use hdf5::File;

use super::tests::{row, spec, strings};
use super::*;
use crate::writer::direct::raw;

fn file_name(i: usize) -> String {
    format!("train/a/f{i:03}.wav")
}

/// The raw bytes of the chunk of 1-D `d` starting at `start`.
fn chunk_bytes(d: &hdf5::Dataset, start: usize) -> Vec<u8> {
    let offset = [start as u64];
    let n = raw::chunk_bytes_at(d, &offset).unwrap().unwrap();
    let mut buf = vec![0u8; n];
    raw::read_chunk(d, &offset, &mut buf).unwrap();
    buf
}

/// A build file of `train` with rows 0..n (variable-length `path`).
fn build_file(dir: &Path, n: usize) {
    let s = spec();
    let mut paths = crate::plan::PathTable::default();
    let plan = crate::writer::OutputPlan {
        out_dir: dir.to_path_buf(),
        splits: vec![crate::writer::SplitPlan {
            name: "train".into(),
            files: (0..n)
                .map(|i| crate::writer::PlannedFile {
                    path: paths.push(&file_name(i)),
                    label: 0,
                })
                .collect(),
        }],
        paths: std::sync::Arc::new(paths),
        label_names: vec!["a".to_string()],
        layout: s.layout.clone(),
        dtype: s.dtype,
        chunk_files: s.chunk_files,
        extra_attrs: vec![],
    };
    let mut w = crate::writer::DatasetWriter::create(plan).unwrap();
    for i in 0..n {
        w.submit(0, i, Some(row(i))).unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn stale_references_past_the_confirmed_rows_do_not_free_confirmed_strings() {
    // The crash state of the old layout, made by hand: 8 rows in chunks of
    // 4, the journal confirms 6, and rows 6 and 7 (past the rows kept, in
    // chunk 4..8) name the heap objects of confirmed rows 0 and 1, as a kill
    // inside H5Fflush left them when the chunk reached the disk and the heap
    // collection did not. The old appender freed rows 0 and 1's strings when
    // it next wrote rows 6 and 7.
    let dir = tempfile::tempdir().unwrap();
    build_file(dir.path(), 8);
    let p = dir.path().join("train.h5");
    {
        let f = File::open_rw(&p).unwrap();
        let d = f.dataset("path").unwrap();
        let first = chunk_bytes(&d, 0);
        let mut second = chunk_bytes(&d, 4);
        let elem = second.len() / 4;
        second[2 * elem..].copy_from_slice(&first[..2 * elem]);
        raw::write_chunk(&d, &[4], &second).unwrap();
        drop(d);
        f.close().unwrap();
    }
    let (mut a, report) = Appender::open(dir.path(), &spec(), &["a".to_string()], 6).unwrap();
    assert_eq!(report.rows_dropped, 2);
    for i in 6..40 {
        assert_eq!(a.append(&file_name(i), 0, &row(i)).unwrap(), i);
        if i % 3 == 0 {
            a.flush().unwrap();
        }
    }
    a.close().unwrap();
    let f = File::open(&p).unwrap();
    let want: Vec<String> = (0..40).map(file_name).collect();
    assert_eq!(strings(&f, "path"), want);
    assert_eq!(strings(&f, "label_names"), ["a"]);
    assert_eq!(strings(&f, "meta"), vec![String::new(); 40]);
    // Converted: no variable-length dataset is left to be written again.
    for name in ["path", "meta", "label_names"] {
        assert!(!f.link_exists(name), "{name} is still a dataset");
        assert!(
            crate::writer::strings::exists(&f, name),
            "{name} is not a column"
        );
    }
    let v = f
        .attr("layout_version")
        .unwrap()
        .read_scalar::<i64>()
        .unwrap();
    assert_eq!(v, crate::writer::strings::LAYOUT_VERSION);
}

#[test]
fn a_new_file_has_no_variable_length_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, _) = Appender::open(dir.path(), &spec(), &["a".to_string()], 0).unwrap();
    a.append_with_meta("x/é.wav", 0, &row(0), Some(r#"{"text":"ünï"}"#))
        .unwrap();
    a.close().unwrap();
    let f = File::open(dir.path().join("train.h5")).unwrap();
    for name in f.member_names().unwrap() {
        let t = f.dataset(&name).unwrap().dtype().unwrap();
        assert!(
            !matches!(
                t.to_descriptor().unwrap(),
                hdf5::types::TypeDescriptor::VarLenUnicode
                    | hdf5::types::TypeDescriptor::VarLenAscii
            ),
            "dataset {name} holds variable-length strings"
        );
    }
    assert_eq!(strings(&f, "path"), ["x/é.wav"]);
    assert_eq!(strings(&f, "meta"), [r#"{"text":"ünï"}"#]);
}
