//! Variable-length rows through the SWMR appender: round trip across
//! flushes and whole `features` chunks, recovery cutting `features` with the
//! per-row datasets, layout mismatches refused.

use super::tests::{spec as mel_spec, strings};
use super::*;
use crate::frames::RowLayout;
use crate::frames::testing::Blocks;

/// 2,048 bins of float32: a `features` chunk is 128 frames.
const BINS: usize = 2048;

pub(super) fn spec() -> AppendSpec {
    AppendSpec {
        layout: Blocks::new(BINS, 4, Some(3000)).rows,
        ..mel_spec()
    }
}

fn frames(i: usize) -> usize {
    [0, 3, 200, 57, 1, 130][i % 6]
}

fn row(i: usize) -> Vec<f32> {
    let mut r: Vec<f32> = (0..frames(i) * BINS)
        .map(|k| (i * 10_000 + k % 9_999) as f32)
        .collect();
    r.push(-(i as f32));
    r
}

/// Every row of the file at `d` checked against `row(ids[i])`.
fn check(d: &Path, ids: &[usize]) {
    check_rows(d, ids, BINS, (frames, row));
}

/// A test's rows: file row `i`'s frames and values.
pub(super) type RowsOf = (fn(usize) -> usize, fn(usize) -> Vec<f32>);

/// Every row of the file at `d` is `row(ids[i])` of `frames(ids[i])`
/// frames of `bins` values (and a pad value), back to back, with path
/// `f{ids[i]}.wav`.
pub(super) fn check_rows(d: &Path, ids: &[usize], bins: usize, (frames, row): RowsOf) {
    let f = File::open(d.join("train.h5")).unwrap();
    let offsets = f.dataset("offsets").unwrap().read_raw::<i64>().unwrap();
    let lengths = f.dataset("lengths").unwrap().read_raw::<i32>().unwrap();
    let pads = f.dataset("pad_value").unwrap().read_raw::<f32>().unwrap();
    let features = f.dataset("features").unwrap();
    let values = features.read_raw::<f32>().unwrap();
    assert_eq!(offsets.len(), ids.len());
    let mut at = 0;
    for (r, &i) in ids.iter().enumerate() {
        assert_eq!(
            (offsets[r], lengths[r]),
            (at as i64, frames(i) as i32),
            "row {r}"
        );
        let want = row(i);
        assert!(
            values[at * bins..(at + frames(i)) * bins] == want[..want.len() - 1],
            "values of row {r} (file row {i})"
        );
        assert_eq!(pads[r], -(i as f32));
        at += frames(i);
    }
    assert_eq!(features.shape(), vec![at, bins]);
    let paths = strings(&f, "path");
    let want: Vec<String> = ids.iter().map(|i| format!("f{i}.wav")).collect();
    assert_eq!(paths, want);
}

#[test]
fn variable_rows_append_across_flushes_and_recover_to_the_journal() {
    let d = tempfile::tempdir().unwrap();
    let (mut a, _) = Appender::open(d.path(), &spec(), &[], 0).unwrap();
    for i in 0..9 {
        assert_eq!(a.append(&format!("f{i}.wav"), -1, &row(i)).unwrap(), i);
        if i % 4 == 2 {
            a.flush().unwrap();
        }
    }
    a.flush().unwrap();
    drop(a); // killed: the journal confirmed 5 rows
    let (mut a, rep) = Appender::open(d.path(), &spec(), &[], 5).unwrap();
    assert_eq!((rep.rows_found, rep.rows_dropped), (9, 4));
    assert_eq!(a.append("f50.wav", -1, &row(50)).unwrap(), 5);
    a.append("f11.wav", -1, &row(11)).unwrap();
    a.close().unwrap();
    check(d.path(), &[0, 1, 2, 3, 4, 50, 11]);
    let e = a_row_off_the_protocol(d.path());
    assert!(e.contains("not frames of 2048 values plus 1"), "{e}");
}

fn a_row_off_the_protocol(d: &Path) -> String {
    let (mut a, _) = Appender::open(d, &spec(), &[], 7).unwrap();
    let e = a
        .append("bad.wav", -1, &[0.0; BINS])
        .unwrap_err()
        .to_string();
    a.close().unwrap();
    e
}

#[test]
fn a_file_of_the_other_layout_is_refused_with_a_sentence() {
    let d = tempfile::tempdir().unwrap();
    let (a, _) = Appender::open(d.path(), &spec(), &[], 0).unwrap();
    a.close().unwrap();
    let e = refused(Appender::open(d.path(), &mel_spec(), &[], 0));
    assert!(
        e.to_string().contains("variable-length `features` rows"),
        "{e}"
    );
    let e2 = tempfile::tempdir().unwrap();
    let (a, _) = Appender::open(e2.path(), &mel_spec(), &[], 0).unwrap();
    a.close().unwrap();
    let e = refused(Appender::open(e2.path(), &spec(), &[], 0));
    assert!(e.to_string().contains("librosa's `mel` rows"), "{e}");
    let mut other = spec();
    if let RowLayout::Frames(l) = &mut other.layout {
        l.bins = 7;
    }
    let e = refused(Appender::open(d.path(), &other, &[], 0));
    assert!(matches!(e, Error::Incompatible { .. }), "{e}");
}

fn refused(r: Result<(Appender, OpenReport), Error>) -> Error {
    match r {
        Err(e) => e,
        Ok(_) => panic!("the file was opened"),
    }
}

/// A kill after a write grew `features` and before it grew the per-row
/// datasets leaves frames past the last row with every per-row dataset at
/// the journal's count; recovery cuts them, so the next row starts where
/// the last confirmed one ends (rows stay back to back).
#[test]
fn frames_past_the_confirmed_rows_are_cut_even_when_no_row_is() {
    let d = tempfile::tempdir().unwrap();
    let (mut a, _) = Appender::open(d.path(), &spec(), &[], 0).unwrap();
    for i in 0..3 {
        a.append(&format!("f{i}.wav"), -1, &row(i)).unwrap();
    }
    a.close().unwrap();
    {
        let f = File::open_rw(d.path().join("train.h5")).unwrap();
        let features = f.dataset("features").unwrap();
        let n = features.shape()[0];
        features.resize((n + 150, BINS)).unwrap();
    }
    let (mut a, rep) = Appender::open(d.path(), &spec(), &[], 3).unwrap();
    assert_eq!(rep.rows_dropped, 0);
    a.append("f4.wav", -1, &row(4)).unwrap();
    a.close().unwrap();
    check(d.path(), &[0, 1, 2, 4]);
}
