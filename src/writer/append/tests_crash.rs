//! Crash states made by hand.
//!
//! * A killed flush can leave the superblock's end of allocation (EOA) older
//!   than the chunk index it wrote: the index names chunks and index blocks
//!   allocated past the EOA on disk. Recovery must not hand that space out
//!   again while anything in the file still names it
//!   (`recover::open_existing`). The state: a file flushed twice, then given
//!   the superblock of its first flush.
//! * A close that rewrote metadata in place and never committed its undo log
//!   (`super::undo`) is rolled back by the next open.

use std::path::Path;

use super::tests::{row, spec, strings};
use super::*;

/// Bytes of a version 2/3 superblock (signature to checksum, 8-byte offsets).
const SUPERBLOCK_V3: usize = 48;

fn file_name(round: usize, i: usize) -> String {
    format!("train/a/r{round}-f{i:04}-{}.wav", "x".repeat(i % 23))
}

#[test]
fn space_past_a_stale_end_of_allocation_is_not_reused_after_recovery() {
    for lost in [4, 12, 40, 192] {
        stale_eoa_round_trip(lost);
    }
}

/// An appender on a new `train.h5` in `dir` holding rows `0..n` of round 0.
fn with_rows(dir: &Path, n: usize) -> Appender {
    let (mut a, _) = Appender::open(dir, &spec(), &["a".to_string()], 0).unwrap();
    for i in 0..n {
        a.append(&file_name(0, i), 0, &row(i)).unwrap();
    }
    a
}

/// Flushes 8 rows, then `lost` more in flushes of 8 whose last superblock
/// write is lost, recovers to the 8 and appends 392 rows.
fn stale_eoa_round_trip(lost: usize) {
    let first = tempfile::tempdir().unwrap();
    let mut a = with_rows(first.path(), 8);
    a.flush().unwrap();
    let p = first.path().join("train.h5");
    let old_superblock = std::fs::read(&p).unwrap()[..SUPERBLOCK_V3].to_vec();
    assert_eq!(&old_superblock[..8], b"\x89HDF\r\n\x1a\n");
    assert!(
        old_superblock[8] >= 2,
        "superblock version {}",
        old_superblock[8]
    );
    for i in 8..8 + lost {
        a.append(&file_name(1, i), 0, &row(1000 + i)).unwrap();
        if i % 8 == 7 {
            a.flush().unwrap();
        }
    }
    a.flush().unwrap();
    // The second flush reached the disk, its superblock did not.
    let crashed = tempfile::tempdir().unwrap();
    let q = crashed.path().join("train.h5");
    let mut bytes = std::fs::read(&p).unwrap();
    bytes[..SUPERBLOCK_V3].copy_from_slice(&old_superblock);
    std::fs::write(&q, &bytes).unwrap();
    a.abandon();

    let (mut b, report) = Appender::open(crashed.path(), &spec(), &["a".to_string()], 8).unwrap();
    assert_eq!(report.rows_dropped, lost);
    for i in 8..400 {
        assert_eq!(b.append(&file_name(2, i), 0, &row(i)).unwrap(), i);
        if i % 8 == 7 {
            b.flush().unwrap();
        }
    }
    b.close().unwrap();

    let f = File::open(&q).unwrap();
    let want: Vec<String> = (0..8)
        .map(|i| file_name(0, i))
        .chain((8..400).map(|i| file_name(2, i)))
        .collect();
    assert_eq!(strings(&f, "path"), want);
    let labels = f.dataset("label").unwrap().read_raw::<i32>().unwrap();
    assert!(labels.iter().all(|&l| l == 0), "labels {labels:?}");
    let mel = f.dataset("mel").unwrap().read_raw::<f32>().unwrap();
    for (i, got) in mel.chunks(120).enumerate() {
        assert_eq!(got, row(i).as_slice(), "mel row {i}");
    }
}

#[test]
fn an_uncommitted_in_place_rewrite_is_rolled_back_at_the_next_open() {
    if let Err(why) = super::vfd::available() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    with_rows(dir.path(), 6).close().unwrap();
    let p = dir.path().join("train.h5");
    let before = std::fs::read(&p).unwrap();
    // A close's reopen, cut off after HDF5 wrote and before the commit: the
    // root attribute and the superblock were rewritten in place.
    let armed = super::undo::arm(&p).unwrap();
    let f = open_rw(&p, false).unwrap();
    replace_names_attr(&f, &["a".to_string(), "zz".repeat(40)]).unwrap();
    f.close().unwrap();
    assert_ne!(std::fs::read(&p).unwrap(), before);
    drop(armed);
    assert!(super::undo::log_path(&p).exists());

    // What the next open does first: the file is byte for byte as armed.
    let done = super::undo::roll_back(&p).unwrap().unwrap();
    assert!(done.records > 0, "{done:?}");
    assert_eq!(std::fs::read(&p).unwrap(), before);
    assert!(!super::undo::log_path(&p).exists());
    let (b, report) = Appender::open(dir.path(), &spec(), &["a".to_string()], 6).unwrap();
    assert_eq!(report.rows_dropped, 0);
    b.close().unwrap();
    let f = File::open(&p).unwrap();
    let want: Vec<String> = (0..6).map(|i| file_name(0, i)).collect();
    assert_eq!(strings(&f, "path"), want);
}
