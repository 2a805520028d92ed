//! The appender's `meta` column (serve's sidecar metadata): entries go with
//! their rows through buffering, flushes and recovery; a file from before
//! the column gains it on open with empty entries; an entry HDF5 cannot
//! store is refused before anything changes.

use super::tests::{row, spec, strings};
use super::*;

fn entry(i: usize) -> Option<String> {
    (!i.is_multiple_of(3)).then(|| format!("{{\"i\":{i},\"text\":\"ü {i}\"}}"))
}

fn want(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| entry(i).unwrap_or_default()).collect()
}

fn meta_of(p: &Path) -> Vec<String> {
    let f = File::open(p).unwrap();
    strings(&f, "meta")
}

#[test]
fn entries_follow_their_rows_through_flushes_and_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("train.h5");
    let (mut a, _) = Appender::open(dir.path(), &spec(), &["a".to_string()], 0).unwrap();
    // 4 rows a chunk: rows 0..6 cross a chunk and a partial one.
    for i in 0..6 {
        a.append_with_meta(&format!("f{i}.wav"), 0, &row(i), entry(i).as_deref())
            .unwrap();
    }
    assert_eq!(a.flush().unwrap(), 6);
    // Rows 6..9 written but never confirmed: the writer is killed.
    for i in 6..9 {
        a.append_with_meta(&format!("f{i}.wav"), 0, &row(i), Some("{\"lost\":1}"))
            .unwrap();
    }
    a.flush().unwrap();
    drop(a);
    assert_eq!(meta_of(&p).len(), 9);
    let (mut a, report) = Appender::open(dir.path(), &spec(), &["a".to_string()], 6).unwrap();
    assert_eq!(report.rows_dropped, 3);
    for i in 6..11 {
        assert_eq!(
            a.append_with_meta(&format!("f{i}.wav"), 0, &row(i), entry(i).as_deref())
                .unwrap(),
            i
        );
    }
    a.close().unwrap();
    assert_eq!(meta_of(&p), want(0..11));
    let f = File::open(&p).unwrap();
    assert_eq!(strings(&f, "path").len(), 11);
}

#[test]
fn a_file_without_the_column_gains_it_with_empty_entries() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("train.h5");
    let (mut a, _) = Appender::open(dir.path(), &spec(), &["a".to_string()], 0).unwrap();
    for i in 0..5 {
        a.append(&format!("f{i}.wav"), 0, &row(i)).unwrap();
    }
    a.close().unwrap();
    // As a file written before the column existed.
    {
        let f = File::open_rw(&p).unwrap();
        f.unlink("meta_utf8").unwrap();
        f.unlink("meta_end").unwrap();
        f.close().unwrap();
    }
    let (mut a, _) = Appender::open(dir.path(), &spec(), &["a".to_string()], 5).unwrap();
    a.append_with_meta("g.wav", 0, &row(5), Some("{\"k\":\"v\"}"))
        .unwrap();
    a.close().unwrap();
    let mut expect = vec![String::new(); 5];
    expect.push("{\"k\":\"v\"}".into());
    assert_eq!(meta_of(&p), expect);
}

#[test]
fn an_entry_hdf5_cannot_store_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, _) = Appender::open(dir.path(), &spec(), &["a".to_string()], 0).unwrap();
    a.append_with_meta("f.wav", 0, &row(0), Some("{}")).unwrap();
    let e = a
        .append_with_meta("g.wav", 0, &row(1), Some("{\"a\":\"\0\"}"))
        .unwrap_err();
    assert!(e.to_string().contains("metadata"), "{e}");
    assert_eq!(a.rows(), 1);
    a.append_with_meta("h.wav", 0, &row(2), None).unwrap();
    a.close().unwrap();
    let p = dir.path().join("train.h5");
    assert_eq!(meta_of(&p), ["{}", ""]);
    let f = File::open(&p).unwrap();
    assert_eq!(strings(&f, "path"), ["f.wav", "h.wav"]);
}
