//! The ingest journal of `serve`: which files are already rows (or rejected), so a
//! restart after a crash or kill -9 loses nothing and duplicates nothing.
//!
//! `<state_dir>/journal` is append-only text, one record per line:
//! `<crc32 of the JSON, 8 hex digits> <JSON object>\n`. Records are
//! `{"t":"journal","version":1}` (first line), `{"t":"row", path, size, mtime_ns,
//! split, row}`, `{"t":"reject", path, size, mtime_ns, reason}` and
//! `{"t":"commit", "seq", "rows": {split: rows}}`.
//!
//! Invariants:
//! * **Group commit.** [`Journal::stage_row`] / [`Journal::stage_reject`] only
//!   buffer; [`Journal::commit`] writes the staged records plus one commit record
//!   with one `write` and `fdatasync`s. Only records followed by a valid commit
//!   record count.
//! * **HDF5 first, then the journal.** The caller flushes every
//!   [`crate::writer::append::Appender`] (rows written, H5Fflush, fdatasync) and
//!   only then commits the journal. So at any crash point each file is either in
//!   both or, after recovery, in neither: rows the journal does not confirm are cut
//!   from the HDF5 file by [`crate::writer::append::Appender::open`], and their
//!   files, still in the drop directory, are ingested again.
//! * **Torn tails are expected, corruption is not.** On open, bytes after the last
//!   valid commit record (a half-written batch: bad checksum, no newline, or valid
//!   records never committed) are cut off the file. An invalid line *before* a
//!   valid commit record is corruption and refuses to open.
//! * **One writer.** The journal holds an exclusive `flock` on `<state_dir>/lock`
//!   for its lifetime, so two services never share a state directory.
//! * Rows of one split are confirmed in order 0, 1, 2, … and each commit record
//!   repeats the per-split totals, which recovery checks.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Journal format version written in the first record.
const VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
    #[error("{}: another process holds the state directory lock", path.display())]
    Locked { path: PathBuf },
    #[error("{}: corrupt at line {line}: {reason}", path.display())]
    Corrupt {
        path: PathBuf,
        line: usize,
        reason: String,
    },
}

/// Identity of a file version in the drop directory: size and mtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FileStamp {
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i64,
}

impl FileStamp {
    pub fn of(meta: &std::fs::Metadata) -> FileStamp {
        use std::os::unix::fs::MetadataExt;
        FileStamp {
            size: meta.len(),
            mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
        }
    }
}

/// Where a confirmed file landed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowAt {
    pub stamp: FileStamp,
    pub split: String,
    pub row: usize,
}

/// A confirmed rejection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    pub stamp: FileStamp,
    pub reason: String,
}

/// What a path is known as, for [`RecoveredState::lookup`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Known<'a> {
    /// This version of the file is row `row` of `split`: skip it.
    Ingested(&'a RowAt),
    /// This version of the file was rejected: skip it.
    Rejected(&'a Rejected),
}

/// Everything the journal confirms, rebuilt on open and kept current by commits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveredState {
    /// Confirmed rows per split (absent = 0).
    pub rows: BTreeMap<String, usize>,
    /// Relative path → its confirmed rows (a path rewritten with new contents is
    /// a new file and gets a new row; every version stays listed).
    pub ingested: HashMap<String, Vec<RowAt>>,
    /// Relative path → its latest confirmed rejection.
    pub rejected: HashMap<String, Rejected>,
    /// Commits so far.
    pub commits: u64,
    /// Bytes of a torn tail cut off at open (0 after a clean shutdown).
    pub torn_bytes: u64,
    /// The journal did not exist and was created: no file may have rows yet.
    pub created: bool,
}

impl RecoveredState {
    /// Confirmed rows of `split`.
    pub fn rows_of(&self, split: &str) -> usize {
        self.rows.get(split).copied().unwrap_or(0)
    }

    /// Whether this version of `path` was already ingested or rejected.
    pub fn lookup(&self, path: &str, stamp: FileStamp) -> Option<Known<'_>> {
        if let Some(r) = self
            .ingested
            .get(path)
            .and_then(|v| v.iter().find(|r| r.stamp == stamp))
        {
            return Some(Known::Ingested(r));
        }
        self.rejected
            .get(path)
            .filter(|r| r.stamp == stamp)
            .map(Known::Rejected)
    }

    fn apply(&mut self, rec: &Record) -> Result<(), String> {
        match rec {
            Record::Journal { version } if *version == VERSION => {}
            Record::Journal { version } => return Err(format!("unknown version {version}")),
            Record::Row {
                path,
                size,
                mtime_ns,
                split,
                row,
            } => {
                let next = self.rows.entry(split.clone()).or_default();
                if *row != *next {
                    return Err(format!("split `{split}` row {row}, expected row {next}"));
                }
                *next += 1;
                self.ingested.entry(path.clone()).or_default().push(RowAt {
                    stamp: FileStamp {
                        size: *size,
                        mtime_ns: *mtime_ns,
                    },
                    split: split.clone(),
                    row: *row,
                });
            }
            Record::Reject {
                path,
                size,
                mtime_ns,
                reason,
            } => {
                self.rejected.insert(
                    path.clone(),
                    Rejected {
                        stamp: FileStamp {
                            size: *size,
                            mtime_ns: *mtime_ns,
                        },
                        reason: reason.clone(),
                    },
                );
            }
            Record::Commit { seq, rows } => {
                if *seq != self.commits + 1 {
                    return Err(format!("commit {seq}, expected {}", self.commits + 1));
                }
                for (split, n) in rows {
                    if self.rows_of(split) != *n {
                        return Err(format!(
                            "commit {seq} says split `{split}` has {n} rows, the records give {}",
                            self.rows_of(split)
                        ));
                    }
                }
                self.commits = *seq;
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "lowercase", deny_unknown_fields)]
enum Record {
    Journal {
        version: u32,
    },
    Row {
        path: String,
        size: u64,
        mtime_ns: i64,
        split: String,
        row: usize,
    },
    Reject {
        path: String,
        size: u64,
        mtime_ns: i64,
        reason: String,
    },
    Commit {
        seq: u64,
        rows: BTreeMap<String, usize>,
    },
}

/// The open journal; see the module documentation.
pub struct Journal {
    path: PathBuf,
    file: File,
    _lock: File,
    state: RecoveredState,
    /// Records staged since the last commit, already encoded.
    staged: Vec<u8>,
    staged_records: Vec<Record>,
}

impl Journal {
    /// Opens (creating) `<state_dir>/journal`, cuts a torn tail and replays it.
    pub fn open(state_dir: &Path) -> Result<(Journal, RecoveredState), Error> {
        let io = |path: &Path, action| {
            let path = path.to_path_buf();
            move |source| Error::Io {
                path,
                action,
                source,
            }
        };
        std::fs::create_dir_all(state_dir).map_err(io(state_dir, "create the state directory"))?;
        let lock_path = state_dir.join("lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io(&lock_path, "open the lock file"))?;
        lock_exclusive(&lock, &lock_path)?;
        let path = state_dir.join("journal");
        let created = !path
            .try_exists()
            .map_err(io(&path, "look for the journal"))?;
        let file = open_append(&path)?;
        let mut j = Journal {
            path,
            file,
            _lock: lock,
            state: RecoveredState::default(),
            staged: Vec::new(),
            staged_records: Vec::new(),
        };
        let mut state = j.load()?;
        state.created = created;
        if created {
            File::open(state_dir)
                .and_then(|d| d.sync_all())
                .map_err(io(state_dir, "sync the state directory"))?;
        }
        j.state = state.clone();
        Ok((j, state))
    }

    /// Forgets what was staged and re-reads the journal from disk, as a
    /// restart would (cutting a torn tail a failed commit left), keeping the
    /// lock. For a service that keeps running after a failed write.
    pub fn reopen(&mut self) -> Result<RecoveredState, Error> {
        self.staged.clear();
        self.staged_records.clear();
        self.file = open_append(&self.path)?;
        let state = self.load()?;
        self.state = state.clone();
        Ok(state)
    }

    /// Reads and replays the whole file, cuts a torn tail, and writes the
    /// version record into an empty journal.
    fn load(&mut self) -> Result<RecoveredState, Error> {
        let io = |action| {
            let path = self.path.clone();
            move |source| Error::Io {
                path,
                action,
                source,
            }
        };
        let mut bytes = Vec::new();
        (&self.file)
            .read_to_end(&mut bytes)
            .map_err(io("read the journal"))?;
        let (mut state, good) = replay(&self.path, &bytes)?;
        state.torn_bytes = (bytes.len() - good) as u64;
        if good < bytes.len() {
            tracing::warn!(
                path = %self.path.display(),
                bytes = bytes.len() - good,
                "Cutting a torn tail off the journal: the last batch was never committed."
            );
            self.file
                .set_len(good as u64)
                .map_err(io("cut the torn tail"))?;
        }
        if good == 0 {
            self.stage(Record::Journal { version: VERSION });
            self.write_staged()?;
        } else if good < bytes.len() {
            self.file.sync_data().map_err(io("sync the journal"))?;
        }
        Ok(state)
    }

    /// The state as of the last commit.
    pub fn state(&self) -> &RecoveredState {
        &self.state
    }

    /// Records that `path` (version `stamp`) is row `row` of `split`; confirmed by
    /// the next [`Journal::commit`]. Rows of a split must be staged in order.
    pub fn stage_row(&mut self, path: &str, stamp: FileStamp, split: &str, row: usize) {
        self.stage(Record::Row {
            path: path.to_string(),
            size: stamp.size,
            mtime_ns: stamp.mtime_ns,
            split: split.to_string(),
            row,
        });
    }

    /// Records that `path` (version `stamp`) was rejected; confirmed by the next
    /// [`Journal::commit`].
    pub fn stage_reject(&mut self, path: &str, stamp: FileStamp, reason: &str) {
        self.stage(Record::Reject {
            path: path.to_string(),
            size: stamp.size,
            mtime_ns: stamp.mtime_ns,
            reason: reason.to_string(),
        });
    }

    /// Drops the records staged since the last commit (their rows were never
    /// made durable).
    pub fn discard_staged(&mut self) {
        self.staged.clear();
        self.staged_records.clear();
    }

    /// Records staged and not yet committed.
    pub fn staged(&self) -> usize {
        self.staged_records.len()
    }

    /// Writes the staged records and a commit record in one `write`, then
    /// `fdatasync`s. Call only after every appender holding the staged rows has
    /// flushed. On error the journal must be re-read ([`Journal::reopen`], or a
    /// restart) before the next commit.
    pub fn commit(&mut self) -> Result<(), Error> {
        if self.staged_records.is_empty() {
            return Ok(());
        }
        let mut next = self.state.clone();
        for rec in &self.staged_records {
            next.apply(rec).map_err(|reason| Error::Corrupt {
                path: self.path.clone(),
                line: 0,
                reason: format!("staged record refused: {reason}"),
            })?;
        }
        let commit = Record::Commit {
            seq: next.commits + 1,
            rows: next.rows.clone(),
        };
        next.apply(&commit)
            .expect("a commit of applied records is consistent");
        self.stage(commit);
        self.write_staged()?;
        self.state = next;
        Ok(())
    }

    fn stage(&mut self, rec: Record) {
        encode(&rec, &mut self.staged);
        self.staged_records.push(rec);
    }

    fn write_staged(&mut self) -> Result<(), Error> {
        let r = self
            .file
            .write_all(&self.staged)
            .and_then(|()| self.file.sync_data());
        self.staged.clear();
        self.staged_records.clear();
        r.map_err(|source| Error::Io {
            path: self.path.clone(),
            action: "write the journal",
            source,
        })
    }
}

/// Opens the journal file for reading and appending, creating it.
fn open_append(path: &Path) -> Result<File, Error> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .append(true)
        .open(path)
        .map_err(|source| Error::Io {
            path: path.to_path_buf(),
            action: "open the journal",
            source,
        })
}

/// Takes an exclusive `flock` on `lock`. A lock that is busy is retried for a
/// second: a child this process forks holds a copy of the descriptor (and so the
/// lock) until it calls exec.
fn lock_exclusive(lock: &File, path: &Path) -> Result<(), Error> {
    for _ in 0..100 {
        match crate::runtime::sys::try_lock_exclusive(lock.as_fd()) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(source) => {
                return Err(Error::Io {
                    path: path.to_path_buf(),
                    action: "lock the state directory",
                    source,
                });
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Err(Error::Locked {
        path: path.to_path_buf(),
    })
}

/// Appends one encoded line for `rec`.
fn encode(rec: &Record, out: &mut Vec<u8>) {
    let json = serde_json::to_vec(rec).expect("records serialise");
    write!(out, "{:08x} ", crc32(&json)).expect("writing to a Vec");
    out.extend_from_slice(&json);
    out.push(b'\n');
}

/// Decodes one line (without its newline); `None` if torn or damaged.
fn decode(line: &[u8]) -> Option<Record> {
    let (crc, json) = (line.get(..8)?, line.get(9..)?);
    // Exactly as written: lowercase hex, one space.
    if line[8] != b' ' || !crc.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let crc = u32::from_str_radix(std::str::from_utf8(crc).ok()?, 16).ok()?;
    if crc != crc32(json) {
        return None;
    }
    serde_json::from_slice(json).ok()
}

/// Replays `bytes`, returning the committed state and the length of the prefix
/// that ends with the last valid commit record (or the header when none).
fn replay(path: &Path, bytes: &[u8]) -> Result<(RecoveredState, usize), Error> {
    let mut state = RecoveredState::default();
    let mut pending = RecoveredState::default();
    let mut good = 0;
    let mut first_bad: Option<usize> = None;
    let mut seen_commit_after_bad = false;
    let mut pos = 0;
    let mut line_no = 0;
    while pos < bytes.len() {
        line_no += 1;
        let Some(nl) = bytes[pos..].iter().position(|&b| b == b'\n') else {
            break; // a last line without newline is torn
        };
        let line = &bytes[pos..pos + nl];
        let end = pos + nl + 1;
        pos = end;
        let Some(rec) = decode(line) else {
            first_bad.get_or_insert(line_no);
            continue;
        };
        let corrupt = |reason: String| Error::Corrupt {
            path: path.to_path_buf(),
            line: line_no,
            reason,
        };
        if line_no == 1 && !matches!(rec, Record::Journal { .. }) {
            return Err(corrupt("the first record is not the journal header".into()));
        }
        if let Some(bad) = first_bad {
            // Damage inside the last batch is a torn write (its pages may reach
            // the disk in any order); a commit record after the damage that is not
            // the next one means a whole committed batch is damaged.
            if let Record::Commit { seq, .. } = rec
                && (seq != state.commits + 1 || seen_commit_after_bad)
            {
                return Err(corrupt(format!(
                    "line {bad} is damaged but a later batch was committed"
                )));
            }
            seen_commit_after_bad |= matches!(rec, Record::Commit { .. });
            continue;
        }
        pending.apply(&rec).map_err(corrupt)?;
        if matches!(rec, Record::Commit { .. } | Record::Journal { .. }) {
            state = pending.clone();
            good = end;
        }
    }
    Ok((state, good))
}

/// CRC-32 (IEEE 802.3, reflected, as zlib's `crc32`), bitwise: records are short.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
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
        let (_j, s) = Journal::open(d.path()).unwrap();
        assert!(!s.created);
        assert_eq!(s.rows_of("train"), 2);
        assert_eq!(s.rows_of("val"), 1);
        assert_eq!(s.commits, 2);
        assert_eq!(s.torn_bytes, 0);
        assert!(matches!(
            s.lookup("train/b/z.wav", stamp(3)),
            Some(Known::Ingested(RowAt { row: 1, .. }))
        ));
        assert_eq!(s.lookup("train/b/z.wav", stamp(9)), None);
        assert!(matches!(
            s.lookup("train/a/bad.wav", stamp(2)),
            Some(Known::Rejected(Rejected { reason, .. })) if reason == "not a WAV file"
        ));
        // A changed file is retried.
        assert_eq!(s.lookup("train/a/bad.wav", stamp(5)), None);
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
            assert!(s.lookup("a/x/3.wav", stamp(3)).is_none());
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
}
