//! The ingest journal of `serve`: which files are already rows (or rejected), so a
//! restart after a crash or kill -9 loses nothing and duplicates nothing, in
//! memory that does not grow with the files ever ingested.
//!
//! The exactly-once index has two parts: a sorted snapshot on disk
//! (`<state_dir>/index.<generation>`, see [`index`]) and an in-memory **tail**
//! of the entries committed since that snapshot, which the journal file
//! holds as records. [`Journal::compact`] ([`compact`]) merges the tail into a
//! new snapshot and rewrites the journal as one checkpoint record, so both
//! memory and the journal file stay bounded; `serve` compacts when the tail
//! passes `serve.compact_tail_entries` or the journal `serve.compact_journal_bytes`,
//! and on `ctl compact`.
//!
//! `<state_dir>/journal` is append-only text, one record per line:
//! `<crc32 of the JSON, 8 hex digits> <JSON object>\n`. Records are
//! `{"t":"journal","version":2}` (first line), then optionally `{"t":"checkpoint",
//! seq, rows: {split: rows}, splits: [name…], index: {generation, entries, xxh3}}`
//! (second line only: everything before it is in the snapshot it names; split
//! ids in the index are positions in `splits`), then `{"t":"row", path, size,
//! mtime_ns, split, row}`, `{"t":"reject", path, size, mtime_ns, reason}` and
//! `{"t":"commit", "seq", "rows": {split: rows}}`. A version-1 journal (no
//! checkpoint, no index) opens as all tail and is migrated by the first
//! compaction, which `serve` runs at start.
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
//!   valid commit record is corruption and refuses to open, as does a snapshot
//!   whose size or checksum differs from its checkpoint record.
//! * **Compaction changes no answer.** The committed set after a compaction —
//!   or after a crash at any point of one — is exactly the set before it; see
//!   [`compact`] for the order of writes that makes this so.
//! * **One writer.** The journal holds an exclusive `flock` on `<state_dir>/lock`
//!   for its lifetime, so two services never share a state directory.
//! * Rows of one split are confirmed in order 0, 1, 2, … and each commit record
//!   repeats the per-split totals, which recovery checks.

mod compact;
pub mod index;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use compact::{Compaction, Limits, Step};
use index::{IndexRef, Snapshot, Value};

/// Journal format version written in the first record.
const VERSION: u32 = 2;

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
    #[error("{}: the index snapshot is damaged: {reason}", path.display())]
    BadIndex { path: PathBuf, reason: String },
    #[error("cannot compact the journal while {0} record(s) are staged; commit first")]
    Staged(usize),
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
    pub split: String,
    pub row: usize,
}

/// What a file version is known as, for [`Journal::lookup`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Known {
    /// This version of the file is row `row` of `split`: skip it.
    Ingested(RowAt),
    /// This version of the file was rejected (the reason is in
    /// `rejected.jsonl`): skip it.
    Rejected,
}

/// The journal's totals, rebuilt on open and kept current by commits. The
/// per-file index is not here: ask [`Journal::lookup`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveredState {
    /// Confirmed rows per split (absent = 0).
    pub rows: BTreeMap<String, usize>,
    /// Split names in id order (the index stores ids).
    pub splits: Vec<String>,
    /// Commits so far.
    pub commits: u64,
    /// Bytes of a torn tail cut off at open (0 after a clean shutdown).
    pub torn_bytes: u64,
    /// The journal did not exist and was created: no file may have rows yet.
    pub created: bool,
    /// The format version found on disk (1 until migrated by a compaction).
    pub version: u32,
}

impl RecoveredState {
    /// Confirmed rows of `split`.
    pub fn rows_of(&self, split: &str) -> usize {
        self.rows.get(split).copied().unwrap_or(0)
    }

    fn split_id(&mut self, split: &str) -> u32 {
        match self.splits.iter().position(|s| s == split) {
            Some(i) => i as u32,
            None => {
                self.splits.push(split.to_string());
                (self.splits.len() - 1) as u32
            }
        }
    }

    /// Applies one record; a row or rejection returns its index entry.
    fn apply(&mut self, rec: &Record) -> Result<Option<(u128, Value)>, String> {
        match rec {
            Record::Journal { version } if matches!(*version, 1 | VERSION) => {
                self.version = *version;
            }
            Record::Journal { version } => return Err(format!("unknown version {version}")),
            Record::Checkpoint {
                seq, rows, splits, ..
            } => {
                self.commits = *seq;
                self.rows = rows.clone();
                self.splits = splits.clone();
                if let Some(s) = rows.keys().find(|s| !splits.contains(s)) {
                    return Err(format!("split `{s}` has rows but no id"));
                }
            }
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
                let id = self.split_id(split);
                let stamp = FileStamp {
                    size: *size,
                    mtime_ns: *mtime_ns,
                };
                let value = Value::Row {
                    split: id,
                    row: *row as u64,
                };
                return Ok(Some((index::fingerprint(path, stamp), value)));
            }
            Record::Reject {
                path,
                size,
                mtime_ns,
                ..
            } => {
                let stamp = FileStamp {
                    size: *size,
                    mtime_ns: *mtime_ns,
                };
                return Ok(Some((index::fingerprint(path, stamp), Value::Rejected)));
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
        Ok(None)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "lowercase", deny_unknown_fields)]
enum Record {
    Journal {
        version: u32,
    },
    Checkpoint {
        seq: u64,
        rows: BTreeMap<String, usize>,
        splits: Vec<String>,
        index: IndexRef,
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

/// Sizes of the journal and its index, for `ctl status` and the metrics.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Info {
    /// Bytes of `<state_dir>/journal`.
    pub journal_bytes: u64,
    /// Confirmed file versions (snapshot + tail).
    pub index_entries: u64,
    /// Of those, entries committed since the snapshot (held in memory).
    pub tail_entries: u64,
    /// Generation of the snapshot (0: none yet).
    pub index_generation: u64,
    /// Heap bytes the index holds (tail map + snapshot block keys).
    pub index_heap_bytes: u64,
    /// Compactions since the service started.
    pub compactions: u64,
    pub last_compaction: Option<Compaction>,
}

/// The open journal; see the module documentation.
pub struct Journal {
    dir: PathBuf,
    path: PathBuf,
    file: File,
    _lock: File,
    state: RecoveredState,
    /// Records staged since the last commit, already encoded.
    staged: Vec<u8>,
    staged_records: Vec<Record>,
    /// Where each staged record ends in `staged`.
    staged_ends: Vec<usize>,
    /// Entries committed since the snapshot. Cleared, not replaced, by a
    /// compaction: its table keeps its size, so the memory it takes is the
    /// same from one compaction to the next instead of a new allocation the
    /// allocator may place elsewhere each time.
    tail: HashMap<u128, Value>,
    /// The tail sorted, during a compaction (kept allocated for the same reason).
    sorted: Vec<(u128, Value)>,
    snapshot: Option<Snapshot>,
    /// Length of the journal file as of the last commit.
    bytes: u64,
    compactions: u64,
    last_compaction: Option<Compaction>,
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
            dir: state_dir.to_path_buf(),
            path,
            file,
            _lock: lock,
            state: RecoveredState::default(),
            staged: Vec::new(),
            staged_records: Vec::new(),
            staged_ends: Vec::new(),
            tail: HashMap::new(),
            sorted: Vec::new(),
            snapshot: None,
            bytes: 0,
            compactions: 0,
            last_compaction: None,
        };
        let mut state = j.load()?;
        state.created = created;
        if created {
            index::sync_dir(state_dir)?;
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
        self.staged_ends.clear();
        self.file = open_append(&self.path)?;
        let state = self.load()?;
        self.state = state.clone();
        Ok(state)
    }

    /// Reads and replays the whole file, cuts a torn tail, opens the snapshot
    /// the checkpoint names, removes files no journal refers to (what a
    /// compaction interrupted by a crash left), and writes the version record
    /// into an empty journal.
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
        let r = replay(&self.path, &bytes)?;
        let mut state = r.state;
        let good = r.good;
        let len = bytes.len();
        drop(bytes);
        state.torn_bytes = (len - good) as u64;
        self.snapshot = match r.index {
            Some(ir) => Some(Snapshot::open(&self.dir, ir)?),
            None => None,
        };
        self.tail = r.entries.into_iter().collect();
        self.remove_strays();
        if good < len {
            tracing::warn!(
                path = %self.path.display(),
                bytes = len - good,
                "Cutting a torn tail off the journal: the last batch was never committed."
            );
            self.file
                .set_len(good as u64)
                .map_err(io("cut the torn tail"))?;
        }
        self.bytes = good as u64;
        if good == 0 {
            state.version = VERSION;
            self.stage(Record::Journal { version: VERSION });
            self.write_staged()?;
        } else if good < len {
            self.file.sync_data().map_err(io("sync the journal"))?;
        }
        Ok(state)
    }

    /// Removes `journal.tmp` and every `index.*` file but the live snapshot.
    fn remove_strays(&self) {
        let live = self.snapshot.as_ref().map(|s| s.index_ref().generation);
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            let stray = name == "journal.tmp"
                || (name.starts_with("index.")
                    && index::generation_of(name).is_none_or(|g| Some(g) != live));
            if stray {
                match std::fs::remove_file(e.path()) {
                    Ok(()) => tracing::info!(
                        file = %e.path().display(),
                        "Removed a file an interrupted journal compaction left."
                    ),
                    Err(err) => tracing::warn!(
                        file = %e.path().display(),
                        error = %err,
                        "Cannot remove a file an interrupted journal compaction left."
                    ),
                }
            }
        }
    }

    /// The state as of the last commit.
    pub fn state(&self) -> &RecoveredState {
        &self.state
    }

    /// Whether this version of `path` was already ingested or rejected (as of
    /// the last commit): the tail in memory, else one `pread` of the snapshot.
    pub fn lookup(&self, path: &str, stamp: FileStamp) -> Result<Option<Known>, Error> {
        let key = index::fingerprint(path, stamp);
        let value = match self.tail.get(&key) {
            Some(v) => Some(*v),
            None => match &self.snapshot {
                Some(s) => s.get(key)?,
                None => None,
            },
        };
        Ok(value.map(|v| match v {
            Value::Rejected => Known::Rejected,
            Value::Row { split, row } => Known::Ingested(RowAt {
                split: self
                    .state
                    .splits
                    .get(split as usize)
                    .cloned()
                    .unwrap_or_default(),
                row: row as usize,
            }),
        }))
    }

    /// Sizes of the journal and the index.
    pub fn info(&self) -> Info {
        let snap = self.snapshot.as_ref();
        Info {
            journal_bytes: self.bytes,
            index_entries: snap.map_or(0, |s| s.index_ref().entries) + self.tail.len() as u64,
            tail_entries: self.tail.len() as u64,
            index_generation: snap.map_or(0, |s| s.index_ref().generation),
            index_heap_bytes: self.heap_bytes() as u64,
            compactions: self.compactions,
            last_compaction: self.last_compaction.clone(),
        }
    }

    /// Heap bytes the exactly-once index holds: the tail map (key, value and
    /// one control byte per slot) and the snapshot's block keys.
    pub fn heap_bytes(&self) -> usize {
        let slot = std::mem::size_of::<(u128, Value)>() + 1;
        self.tail.capacity() * slot
            + self.sorted.capacity() * std::mem::size_of::<(u128, Value)>()
            + self.snapshot.as_ref().map_or(0, Snapshot::heap_bytes)
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
        self.staged_ends.clear();
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
        self.commit_first(self.staged_records.len())
    }

    /// [`Journal::commit`] of the first `n` staged records only (those staged
    /// before a flush that covers their rows was asked for; the rest stay
    /// staged). Call only after that flush has returned.
    pub fn commit_first(&mut self, n: usize) -> Result<(), Error> {
        let n = n.min(self.staged_records.len());
        if n == 0 {
            return Ok(());
        }
        let mut next = self.state.clone();
        let mut entries = Vec::with_capacity(n);
        for rec in &self.staged_records[..n] {
            let e = next.apply(rec).map_err(|reason| Error::Corrupt {
                path: self.path.clone(),
                line: 0,
                reason: format!("staged record refused: {reason}"),
            })?;
            entries.extend(e);
        }
        let commit = Record::Commit {
            seq: next.commits + 1,
            rows: next.rows.clone(),
        };
        next.apply(&commit)
            .expect("a commit of applied records is consistent");
        let cut = self.staged_ends[n - 1];
        // The committed records leave the stage whether or not the write
        // works (after a failure the journal is re-read anyway).
        let rest = self.staged.split_off(cut);
        let mut text = std::mem::replace(&mut self.staged, rest);
        encode(&commit, &mut text);
        self.staged_records.drain(..n);
        self.staged_ends.drain(..n);
        for end in &mut self.staged_ends {
            *end -= cut;
        }
        self.write_durably(&text)?;
        self.state = next;
        self.tail.extend(entries);
        Ok(())
    }

    fn stage(&mut self, rec: Record) {
        encode(&rec, &mut self.staged);
        self.staged_records.push(rec);
        self.staged_ends.push(self.staged.len());
    }

    /// Writes every staged record (the journal's header at its creation).
    fn write_staged(&mut self) -> Result<(), Error> {
        let text = std::mem::take(&mut self.staged);
        self.staged_records.clear();
        self.staged_ends.clear();
        self.write_durably(&text)
    }

    /// Appends `text` in one `write` and `fdatasync`s.
    fn write_durably(&mut self, text: &[u8]) -> Result<(), Error> {
        let r = self
            .file
            .write_all(text)
            .and_then(|()| self.file.sync_data());
        if r.is_ok() {
            self.bytes += text.len() as u64;
        }
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
///
/// Write side of the record check [`decode`] makes on read: one record is
/// one line (serde_json escapes every control character inside strings, so
/// the JSON holds no newline — a record that spanned lines would read back
/// as two damaged ones and refuse the journal), and the line decodes back to
/// `rec` (checked in debug builds: it costs a parse). Tests:
/// `tests::a_record_with_newlines_and_quotes_is_one_line_and_reads_back`,
/// `tests::commit_and_reopen`, `tests::torn_last_batch_at_every_offset`.
fn encode(rec: &Record, out: &mut Vec<u8>) {
    let json = serde_json::to_vec(rec).expect("records serialise");
    assert!(
        !json.contains(&b'\n'),
        "a journal record would span two lines"
    );
    let start = out.len();
    write!(out, "{:08x} ", crc32(&json)).expect("writing to a Vec");
    out.extend_from_slice(&json);
    debug_assert_eq!(decode(&out[start..]).as_ref(), Some(rec));
    out.push(b'\n');
}

/// Decodes one line (without its newline); `None` if torn or damaged. The
/// bytes come from disk, so nothing here is asserted: a bad line is data
/// ([`replay`] tells a torn tail from corruption); [`encode`] asserts the
/// write side of the same format.
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

/// What [`replay`] recovers.
struct Replayed {
    state: RecoveredState,
    /// Committed tail entries, in journal order (a later one wins).
    entries: Vec<(u128, Value)>,
    /// The snapshot the checkpoint names.
    index: Option<IndexRef>,
    /// Length of the prefix that ends with the last valid commit record (or
    /// the header or checkpoint when none).
    good: usize,
}

/// Replays `bytes`; see [`Replayed`].
fn replay(path: &Path, bytes: &[u8]) -> Result<Replayed, Error> {
    let mut state = RecoveredState::default();
    let mut pending = RecoveredState::default();
    let mut entries = Vec::new();
    let mut committed = 0;
    let mut index = None;
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
        if let Record::Checkpoint { index: ir, .. } = &rec {
            if line_no != 2 || pending.version < 2 || first_bad.is_some() {
                return Err(corrupt(
                    "a checkpoint record is valid only right after a version-2 header".into(),
                ));
            }
            index = Some(*ir);
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
        entries.extend(pending.apply(&rec).map_err(corrupt)?);
        if matches!(
            rec,
            Record::Commit { .. } | Record::Journal { .. } | Record::Checkpoint { .. }
        ) {
            state = pending.clone();
            committed = entries.len();
            good = end;
        }
    }
    // What replay keeps: a prefix of whole lines ending with a commit (or
    // the header/checkpoint), and only entries that prefix committed. The
    // cut `Journal::load` makes at `good` relies on both. Tests:
    // `tests::torn_last_batch_at_every_offset` (every cut point).
    assert!(
        good == 0 || bytes[good - 1] == b'\n',
        "journal replay kept a prefix ending inside a line ({good})"
    );
    assert!(committed <= entries.len());
    entries.truncate(committed);
    Ok(Replayed {
        state,
        entries,
        index,
        good,
    })
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
