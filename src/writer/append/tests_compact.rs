//! Compact rows (`writer::compact`) through the SWMR appender: the partly
//! filled last chunk rewritten at every write, recovery to the journal with
//! that chunk read back, a kill between a rewrite and its flush rolled back
//! by the undo log, a row given up after whole chunks of it were written,
//! and plain and compact files refused by the other configuration.

use super::tests_frames::{check_rows, spec as plain_spec};
use super::*;
use crate::model::{Refusal, RejectKind};
use crate::writer::RowPieces;

/// 2,048 bins: a compact `features` chunk is 16 frames.
const BINS: usize = 2048;
const CHUNK: usize = 16;

fn spec() -> AppendSpec {
    AppendSpec {
        dtype: Dtype::Compact { tick_power: -5 },
        ..plain_spec()
    }
}

fn frames(i: usize) -> usize {
    [0, 3, 40, 17, 1, 9, 16][i % 7]
}

/// Row `i`: values on the 2^-5 grid within float16's exact range, so the
/// stored values are these exactly.
fn row(i: usize) -> Vec<f32> {
    let mut r: Vec<f32> = (0..frames(i) * BINS)
        .map(|k| ((i * 131 + k * 7) % 512) as f32 / 32.0 - 8.0)
        .collect();
    r.push(-(i as f32));
    r
}

fn undo_log(d: &Path) -> PathBuf {
    undo::log_path(&d.join("train.h5"))
}

/// Every row of the file at `d` is `row(ids[i])`, back to back, in Blosc
/// chunks of 16 frames.
fn check(d: &Path, ids: &[usize]) {
    let f = File::open(d.join("train.h5")).unwrap();
    let features = f.dataset("features").unwrap();
    assert!(!features.filters().is_empty(), "features is not compressed");
    assert_eq!(features.chunk(), Some(vec![CHUNK, BINS]));
    check_rows(d, ids, BINS, (frames, row));
}

#[test]
fn compact_rows_append_across_flushes_and_recover_to_the_journal() {
    let d = tempfile::tempdir().unwrap();
    let (mut a, _) = Appender::open(d.path(), &spec(), &[], 0).unwrap();
    for i in 0..12 {
        assert_eq!(a.append(&format!("f{i}.wav"), -1, &row(i)).unwrap(), i);
        if i % 3 == 1 {
            // Most flushes leave a partly filled chunk that the next rewrites.
            a.flush().unwrap();
            assert!(!undo_log(d.path()).exists(), "a flush left its undo log");
        }
    }
    a.flush().unwrap();
    drop(a); // killed: the journal confirmed 8 rows (67 frames: 4 chunks and 3)
    let (mut a, rep) = Appender::open(d.path(), &spec(), &[], 8).unwrap();
    assert_eq!((rep.rows_found, rep.rows_dropped), (12, 4));
    assert_eq!(a.append("f50.wav", -1, &row(50)).unwrap(), 8);
    a.append("f12.wav", -1, &row(12)).unwrap();
    a.close().unwrap();
    assert!(!undo_log(d.path()).exists());
    check(d.path(), &[0, 1, 2, 3, 4, 5, 6, 7, 50, 12]);
}

#[test]
fn a_kill_between_a_rewrite_and_its_flush_rolls_back_to_the_flush() {
    let d = tempfile::tempdir().unwrap();
    let (mut a, _) = Appender::open(d.path(), &spec(), &[], 0).unwrap();
    for i in [1, 3] {
        a.append(&format!("f{i}.wav"), -1, &row(i)).unwrap();
    }
    a.flush().unwrap(); // 20 frames: a whole chunk and 4 frames of the next
    // Rows of 40 frames until the buffer holds 16 chunks' worth: the next
    // append writes them, rewriting the chunk that holds the flushed rows'
    // last 4 frames.
    let mut n = 0;
    while !undo_log(d.path()).exists() {
        assert!(n < 8, "no write after {n} rows of 40 frames");
        a.append("f2.wav", -1, &row(2)).unwrap();
        n += 1;
    }
    assert_eq!(n, 8, "the buffer was written before it held 16 chunks");
    drop(a); // killed before the flush
    let (mut a, rep) = Appender::open(d.path(), &spec(), &[], 2).unwrap();
    assert!(!undo_log(d.path()).exists(), "the open left the undo log");
    assert_eq!(rep.rows_found - rep.rows_dropped, 2);
    a.append("f9.wav", -1, &row(9)).unwrap();
    a.close().unwrap();
    check(d.path(), &[1, 3, 9]);
}

/// Frames of a row in pieces of 5 frames; refused after `refuse_after`
/// pieces when set.
struct Pieces {
    row: Vec<f32>,
    at: usize,
    given: usize,
    refuse_after: Option<usize>,
}

impl RowPieces for Pieces {
    fn next(&mut self, out: &mut Vec<f32>) -> Result<bool, Refusal> {
        if Some(self.given) == self.refuse_after {
            return Err(Refusal::of(RejectKind::Unreadable, &"gone half-way"));
        }
        let frames = self.row.len() - 1;
        out.clear();
        if self.at == frames {
            return Ok(false);
        }
        let end = (self.at + 5 * BINS).min(frames);
        out.extend_from_slice(&self.row[self.at..end]);
        self.at = end;
        self.given += 1;
        Ok(true)
    }

    fn trailer(&self) -> &[f32] {
        &self.row[self.row.len() - 1..]
    }
}

fn pieces(row: Vec<f32>, refuse_after: Option<usize>) -> Pieces {
    Pieces {
        row,
        at: 0,
        given: 0,
        refuse_after,
    }
}

#[test]
fn a_row_given_up_after_whole_chunks_leaves_the_rows_before_it_whole() {
    let d = tempfile::tempdir().unwrap();
    let (mut a, _) = Appender::open(d.path(), &spec(), &[], 0).unwrap();
    a.append("f3.wav", -1, &row(3)).unwrap();
    a.flush().unwrap(); // 17 frames: a chunk and 1 frame
    let mut piece = Vec::new();
    // A row of 300 frames given up after 275: the buffer was written when
    // it held 16 chunks (256 frames), all but 1 of them this row's.
    let long: Vec<f32> = (0..300 * BINS + 1).map(|k| (k % 64) as f32).collect();
    let r = a
        .append_pieces(
            ("long.wav", -1, None),
            &mut pieces(long, Some(55)),
            &mut piece,
        )
        .unwrap();
    assert!(r.is_err());
    let r = a
        .append_pieces(("f9.wav", -1, None), &mut pieces(row(9), None), &mut piece)
        .unwrap();
    assert_eq!(r.unwrap(), 1);
    a.append("f5.wav", -1, &row(5)).unwrap();
    a.close().unwrap();
    check(d.path(), &[3, 9, 5]);
}

#[test]
fn plain_and_compact_files_refuse_the_other_storage() {
    let d = tempfile::tempdir().unwrap();
    let (a, _) = Appender::open(d.path(), &spec(), &[], 0).unwrap();
    a.close().unwrap();
    let mut f16 = plain_spec();
    f16.dtype = Dtype::Float16;
    let e = match Appender::open(d.path(), &f16, &[], 0) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a compact file took plain rows"),
    };
    assert!(e.contains("stored compact"), "{e}");
    let p = tempfile::tempdir().unwrap();
    let (a, _) = Appender::open(p.path(), &f16, &[], 0).unwrap();
    a.close().unwrap();
    let e = match Appender::open(p.path(), &spec(), &[], 0) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a plain file took compact chunks"),
    };
    assert!(e.contains("stored plain"), "{e}");
}
