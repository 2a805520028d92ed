//! Unit tests of the journal: commits, torn tails, corruption, and the
//! index snapshot with its compaction (crash at every step, memory bound,
//! version-1 migration).

use std::io::Write;

use super::*;

fn stamp(i: u64) -> FileStamp {
    FileStamp {
        size: 1000 + i,
        mtime_ns: 1_700_000_000_000_000_000 + i as i64,
    }
}

#[test]
fn crc32_matches_zlib() {
    assert_eq!(crc32(b""), 0);
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
}

#[test]
fn reopen_after_a_torn_commit_keeps_what_was_committed() {
    let d = tempfile::tempdir().unwrap();
    let (mut j, _) = Journal::open(d.path()).unwrap();
    j.stage_row("train/a/x.wav", stamp(0), "train", 0);
    j.commit().unwrap();
    j.stage_row("train/a/y.wav", stamp(1), "train", 1);
    // A commit that failed half-way (ENOSPC): part of a line on disk.
    std::fs::OpenOptions::new()
        .append(true)
        .open(d.path().join("journal"))
        .unwrap()
        .write_all(b"0badc0de {\"t\":\"row\",\"pa")
        .unwrap();
    let s = j.reopen().unwrap();
    assert_eq!(s.rows_of("train"), 1);
    assert_eq!(s.torn_bytes, 23);
    assert_eq!(j.staged(), 0);
    j.stage_row("train/a/y.wav", stamp(1), "train", 1);
    j.commit().unwrap();
    drop(j);
    let (_j, s) = Journal::open(d.path()).unwrap();
    assert_eq!(s.rows_of("train"), 2);
    assert_eq!(s.torn_bytes, 0);
}

/// serve commits what a flush covered while later rows are staged: only the
/// first records are committed, the rest stay staged (in order) for the
/// next commit, and a reopen sees exactly the committed ones.
#[test]
fn commit_first_commits_a_prefix_and_keeps_the_rest_staged() {
    let d = tempfile::tempdir().unwrap();
    let (mut j, _) = Journal::open(d.path()).unwrap();
    j.stage_row("train/a/x0.wav", stamp(0), "train", 0);
    j.stage_reject("train/a/bad.wav", stamp(1), "not a WAV file");
    j.stage_row("train/a/x1.wav", stamp(2), "train", 1);
    j.stage_row("train/a/x2.wav", stamp(3), "train", 2);
    j.commit_first(2).unwrap();
    assert_eq!(j.staged(), 2);
    assert_eq!(j.state().rows_of("train"), 1);
    assert!(j.lookup("train/a/bad.wav", stamp(1)).unwrap().is_some());
    assert!(j.lookup("train/a/x1.wav", stamp(2)).unwrap().is_none());
    drop(j);
    let (mut j, s) = Journal::open(d.path()).unwrap();
    assert_eq!(s.rows_of("train"), 1);
    assert_eq!(s.commits, 1);
    j.stage_row("train/a/x1.wav", stamp(2), "train", 1);
    j.stage_row("train/a/x2.wav", stamp(3), "train", 2);
    j.stage_row("train/a/x3.wav", stamp(4), "train", 3);
    j.commit_first(1).unwrap();
    j.commit_first(5).unwrap();
    assert_eq!(j.staged(), 0);
    drop(j);
    let (j, s) = Journal::open(d.path()).unwrap();
    assert_eq!(s.rows_of("train"), 4);
    assert_eq!(s.commits, 3);
    assert!(j.lookup("train/a/x3.wav", stamp(4)).unwrap().is_some());
}

/// The write side of the record format: a reason with newlines, quotes and
/// non-ASCII stays one line whose checksum and JSON read back to the same
/// record (`encode` asserts it; this drives that boundary with hostile text).
#[test]
fn a_record_with_newlines_and_quotes_is_one_line_and_reads_back() {
    let rec = Record::Reject {
        path: "train/a/\"odd\"\nname ü.wav".into(),
        size: 7,
        mtime_ns: -1,
        reason: "line one\nline two\r\t\u{0}end".into(),
    };
    let mut out = Vec::new();
    encode(&rec, &mut out);
    assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1);
    assert_eq!(out.last(), Some(&b'\n'));
    assert_eq!(decode(&out[..out.len() - 1]), Some(rec));
    // One flipped byte in the JSON: the read side's check refuses it.
    let mut bad = out.clone();
    bad[20] ^= 1;
    assert_eq!(decode(&bad[..bad.len() - 1]), None);
}

#[test]
fn commit_and_reopen() {
    let d = tempfile::tempdir().unwrap();
    {
        let (mut j, s) = Journal::open(d.path()).unwrap();
        assert!(s.created);
        assert_eq!(s.rows_of("train"), 0);
        j.stage_row("train/a/x.wav", stamp(0), "train", 0);
        j.stage_row("val/a/y.wav", stamp(1), "val", 0);
        j.stage_reject("train/a/bad.wav", stamp(2), "not a WAV file");
        j.commit().unwrap();
        j.stage_row("train/b/z.wav", stamp(3), "train", 1);
        j.commit().unwrap();
        // Staged but never committed: lost.
        j.stage_row("train/b/w.wav", stamp(4), "train", 2);
        assert_eq!(j.state().rows_of("train"), 2);
    }
    let (j, s) = Journal::open(d.path()).unwrap();
    assert!(!s.created);
    assert_eq!(s.rows_of("train"), 2);
    assert_eq!(s.rows_of("val"), 1);
    assert_eq!(s.commits, 2);
    assert_eq!(s.torn_bytes, 0);
    assert_eq!(
        j.lookup("train/b/z.wav", stamp(3)).unwrap(),
        Some(Known::Ingested(RowAt {
            split: "train".into(),
            row: 1
        }))
    );
    assert_eq!(j.lookup("train/b/z.wav", stamp(9)).unwrap(), None);
    assert_eq!(
        j.lookup("train/a/bad.wav", stamp(2)).unwrap(),
        Some(Known::Rejected)
    );
    // A changed file is retried.
    assert_eq!(j.lookup("train/a/bad.wav", stamp(5)).unwrap(), None);
}

#[test]
fn second_open_is_locked_out() {
    let d = tempfile::tempdir().unwrap();
    let (_j, _) = Journal::open(d.path()).unwrap();
    assert!(matches!(Journal::open(d.path()), Err(Error::Locked { .. })));
}

/// Cuts the file at every byte offset inside the last batch (records plus
/// commit): the reopened journal holds exactly the first batch and the file is
/// cut back to it, and it accepts further commits.
#[test]
fn torn_last_batch_at_every_offset() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("journal");
    let after_first = {
        let (mut j, _) = Journal::open(d.path()).unwrap();
        j.stage_row("a/x/1.wav", stamp(1), "a", 0);
        j.commit().unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        j.stage_row("a/x/2.wav", stamp(2), "a", 1);
        j.stage_reject("a/x/3.wav", stamp(3), "too short");
        j.commit().unwrap();
        len
    };
    let full = std::fs::read(&path).unwrap();
    for cut in after_first as usize..full.len() {
        std::fs::write(&path, &full[..cut]).unwrap();
        let (mut j, s) = Journal::open(d.path()).unwrap();
        assert_eq!(s.rows_of("a"), 1, "cut at {cut}");
        assert_eq!(s.commits, 1, "cut at {cut}");
        assert_eq!(s.torn_bytes, cut as u64 - after_first, "cut at {cut}");
        assert!(j.lookup("a/x/3.wav", stamp(3)).unwrap().is_none());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), after_first);
        j.stage_row("a/x/2.wav", stamp(2), "a", 1);
        j.commit().unwrap();
        drop(j);
        let (_j, s) = Journal::open(d.path()).unwrap();
        assert_eq!(s.rows_of("a"), 2, "cut at {cut}");
    }
    // The whole file is intact.
    std::fs::write(&path, &full).unwrap();
    let (_j, s) = Journal::open(d.path()).unwrap();
    assert_eq!(s.commits, 2);
    assert_eq!(s.rows_of("a"), 2);
}

/// A flipped byte anywhere in the last batch is a torn tail (cut, the batch is
/// lost); in an earlier committed batch it is corruption and refuses to open.
#[test]
fn damage_inside_committed_batch_refuses_to_open() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("journal");
    let (first_end, second_end) = {
        let (mut j, _) = Journal::open(d.path()).unwrap();
        j.stage_row("a/x/1.wav", stamp(1), "a", 0);
        j.commit().unwrap();
        let first = std::fs::metadata(&path).unwrap().len() as usize;
        j.stage_row("a/x/2.wav", stamp(2), "a", 1);
        j.commit().unwrap();
        (first, std::fs::metadata(&path).unwrap().len() as usize)
    };
    let full = std::fs::read(&path).unwrap();
    let header_end = full.iter().position(|&b| b == b'\n').unwrap() + 1;
    for i in header_end..second_end {
        let mut bytes = full.clone();
        bytes[i] ^= 0x20;
        std::fs::write(&path, &bytes).unwrap();
        let r = Journal::open(d.path());
        if i < first_end {
            assert!(matches!(r, Err(Error::Corrupt { .. })), "flip at {i}");
        } else {
            let (_j, s) = r.unwrap();
            assert_eq!(s.commits, 1, "flip at {i}");
            assert_eq!(s.rows_of("a"), 1, "flip at {i}");
        }
    }
}

#[test]
fn out_of_order_rows_are_refused_at_commit() {
    let d = tempfile::tempdir().unwrap();
    let (mut j, _) = Journal::open(d.path()).unwrap();
    j.stage_row("a/x/1.wav", stamp(1), "a", 1);
    assert!(matches!(j.commit(), Err(Error::Corrupt { .. })));
}

/// File `i` of the compaction tests: every seventh is rejected, the rest
/// alternate between two splits.
fn put(j: &mut Journal, i: u64) {
    let path = format!("s{}/l/{i:07}.wav", i % 2);
    if i % 7 == 3 {
        j.stage_reject(&path, stamp(i), "synthetic");
    } else {
        j.stage_row(&path, stamp(i), &format!("s{}", i % 2), row_of(i));
    }
}

/// The row of file `i` in its split: files k < i of the same split (k ≡ i
/// mod 2) that are not rejected (k mod 7 ≠ 3).
fn row_of(i: u64) -> usize {
    let s = i % 2;
    let m = (i - s) / 2; // k = s + 2t for t in 0..m
    let c = ((3 + 7 - s) * 4) % 7; // (s + 2t) % 7 == 3  ⇔  t % 7 == c
    let rejected = m / 7 + u64::from(m % 7 > c);
    (m - rejected) as usize
}

/// Files 0..n are each confirmed (rows in order per split), n.. are not.
fn check_prefix(j: &Journal, n: u64, upto: u64) {
    let mut rows = [0usize; 2];
    for i in 0..upto {
        let path = format!("s{}/l/{i:07}.wav", i % 2);
        let got = j.lookup(&path, stamp(i)).unwrap();
        if i >= n {
            assert_eq!(got, None, "file {i} of {n}");
        } else if i % 7 == 3 {
            assert_eq!(got, Some(Known::Rejected), "file {i}");
        } else {
            let s = (i % 2) as usize;
            let want = RowAt {
                split: format!("s{s}"),
                row: rows[s],
            };
            rows[s] += 1;
            assert_eq!(got, Some(Known::Ingested(want)), "file {i}");
        }
        // Another version of the same path is new.
        if i % 101 == 0 {
            assert_eq!(j.lookup(&path, stamp(i + 1_000_000)).unwrap(), None);
        }
    }
    assert_eq!(j.state().rows_of("s0"), rows[0]);
    assert_eq!(j.state().rows_of("s1"), rows[1]);
}

fn state_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// A crash at each step of a compaction (the hook stops it there, with no
/// cleanup, and the journal is dropped as a killed process would) leaves a
/// state directory that opens to exactly the committed set, without stray
/// files, and that takes further commits and compactions.
#[test]
fn compaction_survives_a_crash_at_every_step() {
    for step in Step::ALL {
        let d = tempfile::tempdir().unwrap();
        {
            let (mut j, _) = Journal::open(d.path()).unwrap();
            for i in 0..300 {
                put(&mut j, i);
            }
            j.commit().unwrap();
            j.compact().unwrap();
            for i in 300..700 {
                put(&mut j, i);
                if i % 50 == 0 {
                    j.commit().unwrap();
                }
            }
            j.commit().unwrap();
            let commits = j.state().commits;
            let r = j.compact_with(&mut |s| {
                if s == step {
                    Err(std::io::Error::other("crash"))
                } else {
                    Ok(())
                }
            });
            assert!(r.is_err(), "{step:?}");
            assert_eq!(j.state().commits, commits);
        }
        let (mut j, s) = Journal::open(d.path()).unwrap();
        check_prefix(&j, 700, 800);
        assert_eq!(s.torn_bytes, 0, "{step:?}");
        let files = state_files(d.path());
        let indexes = files.iter().filter(|f| f.starts_with("index.")).count();
        assert_eq!(indexes, 1, "{step:?}: {files:?}");
        assert!(
            !files.iter().any(|f| f.ends_with(".tmp")),
            "{step:?}: {files:?}"
        );
        for i in 700..800 {
            put(&mut j, i);
        }
        j.commit().unwrap();
        j.compact().unwrap();
        drop(j);
        let (j, _) = Journal::open(d.path()).unwrap();
        check_prefix(&j, 800, 900);
        assert_eq!(j.info().tail_entries, 0);
        assert_eq!(j.info().index_entries, 800);
    }
}

/// Before the index, every ingested file stayed in a map in memory (and every
/// record in the journal): ~1 KB of RSS and ~130 B of journal per file ever
/// ingested. With automatic compaction the index's heap is the bounded tail
/// plus 16 B per 128 files, and the journal stays under its limit.
#[test]
fn index_memory_does_not_grow_with_ingested_files() {
    let d = tempfile::tempdir().unwrap();
    let limits = Limits {
        tail_entries: 4096,
        journal_bytes: 1 << 20,
    };
    let (mut j, _) = Journal::open(d.path()).unwrap();
    let n = 100_000;
    let mut heap_at_10k = 0;
    let mut max_heap = 0;
    let mut max_journal = 0;
    for i in 0..n {
        put(&mut j, i);
        if i % 1000 == 999 {
            j.commit().unwrap();
            if j.wants_compaction(&limits) {
                j.compact().unwrap();
            }
            max_heap = max_heap.max(j.heap_bytes());
            max_journal = max_journal.max(j.info().journal_bytes);
            if i == 9_999 {
                heap_at_10k = j.heap_bytes();
            }
        }
    }
    let info = j.info();
    assert_eq!(info.index_entries, n);
    assert!(info.compactions >= 20, "{info:?}");
    // The tail never holds more than the limit plus one batch.
    let slot = std::mem::size_of::<(u128, Value)>() + 1;
    // (A table of ≤ 2× the entries, and the sorted copy a compaction makes.)
    let tail_cap = (4096 + 1000) * 2 * slot + 8192 * std::mem::size_of::<(u128, Value)>();
    let sparse = (n as usize).div_ceil(index::BLOCK_ENTRIES) * 16;
    assert!(max_heap <= tail_cap + sparse, "{max_heap} B of index heap");
    assert!(max_heap < 768 << 10, "{max_heap} B of index heap");
    // Growth from 10k to 100k files is the block keys only.
    assert!(
        j.heap_bytes() <= heap_at_10k.max(tail_cap) + sparse,
        "{} B at 100k, {heap_at_10k} B at 10k",
        j.heap_bytes()
    );
    assert!(
        max_journal < (1 << 20) + 200_000,
        "{max_journal} B of journal"
    );
    drop(j);
    let (j, _) = Journal::open(d.path()).unwrap();
    check_prefix(&j, n, n + 100);
}

/// A version-1 journal (before the index) opens as all tail, asks to be
/// compacted, and after the compaction answers the same.
#[test]
fn version_1_journal_opens_and_migrates() {
    let d = tempfile::tempdir().unwrap();
    {
        let (mut j, _) = Journal::open(d.path()).unwrap();
        for i in 0..200 {
            put(&mut j, i);
        }
        j.commit().unwrap();
    }
    // The same records under a version-1 header.
    let path = d.path().join("journal");
    let text = std::fs::read(&path).unwrap();
    let nl = text.iter().position(|&b| b == b'\n').unwrap();
    let mut v1 = Vec::new();
    encode(&Record::Journal { version: 1 }, &mut v1);
    v1.extend_from_slice(&text[nl + 1..]);
    std::fs::write(&path, &v1).unwrap();
    let (mut j, s) = Journal::open(d.path()).unwrap();
    assert_eq!(s.version, 1);
    check_prefix(&j, 200, 250);
    let limits = Limits {
        tail_entries: 1 << 20,
        journal_bytes: 1 << 30,
    };
    assert!(j.wants_compaction(&limits));
    j.compact().unwrap();
    assert!(!j.wants_compaction(&limits));
    drop(j);
    let (j, s) = Journal::open(d.path()).unwrap();
    assert_eq!(s.version, 2);
    check_prefix(&j, 200, 250);
}

/// A snapshot that does not match its checkpoint refuses to open (the
/// committed set would be wrong), as a damaged committed batch does.
#[test]
fn damaged_index_snapshot_refuses_to_open() {
    let d = tempfile::tempdir().unwrap();
    {
        let (mut j, _) = Journal::open(d.path()).unwrap();
        for i in 0..500 {
            put(&mut j, i);
        }
        j.commit().unwrap();
        j.compact().unwrap();
    }
    let p = d.path().join(index::file_name(1));
    let mut bytes = std::fs::read(&p).unwrap();
    bytes[40] ^= 0x10;
    std::fs::write(&p, &bytes).unwrap();
    assert!(matches!(
        Journal::open(d.path()),
        Err(Error::BadIndex { .. })
    ));
    std::fs::remove_file(&p).unwrap();
    assert!(matches!(Journal::open(d.path()), Err(Error::Io { .. })));
}

#[test]
fn compaction_with_staged_records_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let (mut j, _) = Journal::open(d.path()).unwrap();
    put(&mut j, 0);
    assert!(matches!(j.compact(), Err(Error::Staged(1))));
    j.commit().unwrap();
    j.compact().unwrap();
    check_prefix(&j, 1, 10);
}
