//! The exactly-once index on disk: which file versions the journal confirms,
//! as a sorted file of fixed-size entries that costs almost no memory.
//!
//! A file version's **fingerprint** is the 128-bit XXH3 of (relative path,
//! size, mtime in ns), length-prefixed so no two inputs share bytes. Its value
//! is where its row went (split id, row) or "rejected"; the rejection's reason
//! stays in `rejected.jsonl` and the journal. Two distinct versions share a
//! fingerprint with probability about n²/2¹²⁹: 1.5·10⁻²⁵ for ten million
//! files, far below the odds of an undetected disk error. A collision would
//! make `serve` skip one file as already ingested.
//!
//! `<state_dir>/index.<generation>` ([`file_name`]) holds the entries sorted
//! by key, [`ENTRY_BYTES`] each, nothing else (its entry count and XXH3-64
//! checksum are in the journal's checkpoint record, which names the
//! generation). [`Snapshot`] keeps only the first key of every block of
//! [`BLOCK_ENTRIES`] entries (16 B per 128 files: 125 KiB for a million) and
//! answers a lookup with one `pread` of one 4 KiB block, never with `mmap`,
//! whose touched pages would count as the process's memory. Snapshots are
//! written once, by [`write_merged`] (a streaming merge of the previous
//! snapshot with the sorted tail), to a `.tmp` name that is fsynced and then
//! renamed into place; a snapshot is never modified.
//!
//! Entry layout (little-endian except the key): key (16 B, big-endian, so byte
//! order is key order), split id (u32; `u32::MAX` = rejected), zero (u32), row
//! (u64).

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::{Error, FileStamp};

/// Bytes per entry on disk.
pub const ENTRY_BYTES: usize = 32;
/// Entries per block: one `pread` per lookup (4 KiB).
pub const BLOCK_ENTRIES: usize = 128;
const BLOCK_BYTES: usize = ENTRY_BYTES * BLOCK_ENTRIES;
const REJECTED: u32 = u32::MAX;

/// What the index says about a file version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// Row `row` of the split with id `split` (the journal's split table).
    Row {
        split: u32,
        row: u64,
    },
    Rejected,
}

/// The fingerprint of `path` at `stamp`; see the module documentation.
pub fn fingerprint(path: &str, stamp: FileStamp) -> u128 {
    let mut buf = Vec::with_capacity(path.len() + 24);
    buf.extend_from_slice(&(path.len() as u64).to_le_bytes());
    buf.extend_from_slice(path.as_bytes());
    buf.extend_from_slice(&stamp.size.to_le_bytes());
    buf.extend_from_slice(&stamp.mtime_ns.to_le_bytes());
    xxhash_rust::xxh3::xxh3_128(&buf)
}

/// The snapshot file of `generation`.
pub fn file_name(generation: u64) -> String {
    format!("index.{generation:016}")
}

/// The generation an `index.*` file name holds, if it is one (not a `.tmp`).
pub fn generation_of(name: &str) -> Option<u64> {
    let g = name.strip_prefix("index.")?;
    (g.len() == 16 && g.bytes().all(|b| b.is_ascii_digit()))
        .then(|| g.parse().ok())
        .flatten()
}

fn encode(key: u128, value: Value, out: &mut [u8]) {
    out[..16].copy_from_slice(&key.to_be_bytes());
    let (split, row) = match value {
        Value::Row { split, row } => (split, row),
        Value::Rejected => (REJECTED, 0),
    };
    out[16..20].copy_from_slice(&split.to_le_bytes());
    out[20..24].copy_from_slice(&0u32.to_le_bytes());
    out[24..32].copy_from_slice(&row.to_le_bytes());
}

fn decode(e: &[u8]) -> (u128, Value) {
    let key = u128::from_be_bytes(e[..16].try_into().expect("16 bytes"));
    let split = u32::from_le_bytes(e[16..20].try_into().expect("4 bytes"));
    let row = u64::from_le_bytes(e[24..32].try_into().expect("8 bytes"));
    let value = if split == REJECTED {
        Value::Rejected
    } else {
        Value::Row { split, row }
    };
    (key, value)
}

/// Where a snapshot is and what the journal says it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IndexRef {
    pub generation: u64,
    pub entries: u64,
    /// XXH3-64 of the whole file.
    pub xxh3: u64,
}

/// An open snapshot: the file and the first key of every block.
#[derive(Debug)]
pub struct Snapshot {
    path: PathBuf,
    file: File,
    r: IndexRef,
    sparse: Vec<u128>,
}

impl Snapshot {
    /// Opens `<dir>/index.<generation>`, checking its size and checksum
    /// against `r` while it reads the block keys (one sequential pass).
    pub fn open(dir: &Path, r: IndexRef) -> Result<Snapshot, Error> {
        let path = dir.join(file_name(r.generation));
        let bad = |reason: String| Error::BadIndex {
            path: path.clone(),
            reason,
        };
        let mut file = File::open(&path).map_err(|source| Error::Io {
            path: path.clone(),
            action: "open the index",
            source,
        })?;
        let len = file
            .metadata()
            .map_err(|source| Error::Io {
                path: path.clone(),
                action: "stat the index",
                source,
            })?
            .len();
        if len != r.entries * ENTRY_BYTES as u64 {
            return Err(bad(format!(
                "{len} bytes, but the journal's checkpoint says {} entries of {ENTRY_BYTES} B",
                r.entries
            )));
        }
        let mut sparse = Vec::with_capacity((r.entries as usize).div_ceil(BLOCK_ENTRIES));
        let mut hash = xxhash_rust::xxh3::Xxh3::new();
        let mut block = vec![0u8; BLOCK_BYTES * 16];
        let mut left = len as usize;
        let mut last: Option<u128> = None;
        while left > 0 {
            let n = left.min(block.len());
            file.read_exact(&mut block[..n])
                .map_err(|source| Error::Io {
                    path: path.clone(),
                    action: "read the index",
                    source,
                })?;
            hash.update(&block[..n]);
            for (i, e) in block[..n].chunks_exact(ENTRY_BYTES).enumerate() {
                let (key, _) = decode(e);
                if last.is_some_and(|l| l >= key) {
                    return Err(bad("keys are not strictly increasing".into()));
                }
                last = Some(key);
                if i % BLOCK_ENTRIES == 0 {
                    sparse.push(key);
                }
            }
            left -= n;
        }
        let sum = hash.digest();
        if sum != r.xxh3 {
            return Err(bad(format!(
                "checksum {sum:016x}, the journal's checkpoint says {:016x}",
                r.xxh3
            )));
        }
        Ok(Snapshot {
            path,
            file,
            r,
            sparse,
        })
    }

    pub fn index_ref(&self) -> IndexRef {
        self.r
    }

    /// Heap bytes this snapshot keeps in memory (the block keys).
    pub fn heap_bytes(&self) -> usize {
        self.sparse.capacity() * std::mem::size_of::<u128>()
    }

    /// The value of `key`, with one `pread` of its block.
    pub fn get(&self, key: u128) -> Result<Option<Value>, Error> {
        let b = self.sparse.partition_point(|&k| k <= key);
        if b == 0 {
            return Ok(None);
        }
        let b = b - 1;
        let first = b * BLOCK_ENTRIES;
        let n = (self.r.entries as usize - first).min(BLOCK_ENTRIES);
        let mut buf = [0u8; BLOCK_BYTES];
        let buf = &mut buf[..n * ENTRY_BYTES];
        self.file
            .read_exact_at(buf, (first * ENTRY_BYTES) as u64)
            .map_err(|source| Error::Io {
                path: self.path.clone(),
                action: "read the index",
                source,
            })?;
        let entries: Vec<&[u8]> = buf.chunks_exact(ENTRY_BYTES).collect();
        Ok(entries
            .binary_search_by(|e| decode(e).0.cmp(&key))
            .ok()
            .map(|i| decode(entries[i]).1))
    }

    /// Calls `f` on every entry in key order, reading sequentially.
    fn for_each(
        &self,
        mut f: impl FnMut(u128, Value) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let mut block = vec![0u8; BLOCK_BYTES * 16];
        let len = self.r.entries as usize * ENTRY_BYTES;
        let mut off = 0;
        while off < len {
            let n = (len - off).min(block.len());
            self.file.read_exact_at(&mut block[..n], off as u64)?;
            for e in block[..n].chunks_exact(ENTRY_BYTES) {
                let (k, v) = decode(e);
                f(k, v)?;
            }
            off += n;
        }
        Ok(())
    }
}

/// Where [`write_merged`] may be interrupted (a test hook stands for a crash
/// there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteStep {
    /// Half of the entries are written to the `.tmp` file.
    HalfWritten,
    /// Every entry is written, not yet fsynced.
    Written,
    /// The `.tmp` file is fsynced, not yet renamed.
    Synced,
    /// Renamed into place; the directory not yet fsynced.
    Renamed,
}

/// Writes `<dir>/index.<generation>`: `old`'s entries merged with `tail`
/// (sorted by key; a key in both takes the tail's value), through a `.tmp`
/// file that is fsynced and renamed, then fsyncs `dir`. `hook` runs at each
/// [`WriteStep`]; an error from it stops the write there.
pub fn write_merged(
    dir: &Path,
    generation: u64,
    old: Option<&Snapshot>,
    tail: &[(u128, Value)],
    hook: &mut dyn FnMut(WriteStep) -> std::io::Result<()>,
) -> Result<IndexRef, Error> {
    let path = dir.join(file_name(generation));
    let tmp = dir.join(format!("{}.tmp", file_name(generation)));
    let io = |action: &'static str, p: &Path| {
        let path = p.to_path_buf();
        move |source| Error::Io {
            path,
            action,
            source,
        }
    };
    let file = File::create(&tmp).map_err(io("create the index", &tmp))?;
    let mut out = Out {
        w: BufWriter::with_capacity(1 << 16, file),
        hash: xxhash_rust::xxh3::Xxh3::new(),
        written: 0,
        half: (old.map_or(0, |o| o.r.entries as usize) + tail.len()) / 2,
        hook,
    };
    let mut t = 0;
    let merged = (|| -> std::io::Result<()> {
        if let Some(old) = old {
            old.for_each(|k, v| {
                while t < tail.len() && tail[t].0 < k {
                    out.put(tail[t].0, tail[t].1)?;
                    t += 1;
                }
                if t < tail.len() && tail[t].0 == k {
                    t += 1;
                    return out.put(k, tail[t - 1].1);
                }
                out.put(k, v)
            })?;
        }
        for &(k, v) in &tail[t..] {
            out.put(k, v)?;
        }
        Ok(())
    })();
    merged.map_err(io("write the index", &tmp))?;
    let (written, sum, hook) = (out.written, out.hash.digest(), out.hook);
    let file = out
        .w
        .into_inner()
        .map_err(|e| e.into_error())
        .map_err(io("write the index", &tmp))?;
    hook(WriteStep::Written).map_err(io("write the index", &tmp))?;
    file.sync_all().map_err(io("sync the index", &tmp))?;
    hook(WriteStep::Synced).map_err(io("sync the index", &tmp))?;
    std::fs::rename(&tmp, &path).map_err(io("rename the index into place", &path))?;
    hook(WriteStep::Renamed).map_err(io("rename the index into place", &path))?;
    sync_dir(dir)?;
    Ok(IndexRef {
        generation,
        entries: written as u64,
        xxh3: sum,
    })
}

/// The `.tmp` file being written, its running checksum and count.
struct Out<'h> {
    w: BufWriter<File>,
    hash: xxhash_rust::xxh3::Xxh3,
    written: usize,
    half: usize,
    hook: &'h mut dyn FnMut(WriteStep) -> std::io::Result<()>,
}

impl Out<'_> {
    fn put(&mut self, key: u128, value: Value) -> std::io::Result<()> {
        let mut buf = [0u8; ENTRY_BYTES];
        encode(key, value, &mut buf);
        self.hash.update(&buf);
        self.w.write_all(&buf)?;
        self.written += 1;
        if self.written == self.half {
            self.w.flush()?;
            (self.hook)(WriteStep::HalfWritten)?;
        }
        Ok(())
    }
}

/// fsyncs the directory `dir` (makes a rename in it durable).
pub fn sync_dir(dir: &Path) -> Result<(), Error> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            action: "sync the state directory",
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(i: u64) -> FileStamp {
        FileStamp {
            size: i,
            mtime_ns: i as i64 * 7,
        }
    }

    #[test]
    fn fingerprint_separates_path_size_and_mtime() {
        let a = fingerprint("a/b.wav", stamp(1));
        assert_ne!(a, fingerprint("a/b.wav", stamp(2)));
        assert_ne!(a, fingerprint("a/c.wav", stamp(1)));
        let s = FileStamp {
            size: 1,
            mtime_ns: 8,
        };
        assert_ne!(a, fingerprint("a/b.wav", s));
        assert_eq!(a, fingerprint("a/b.wav", stamp(1)));
        assert_eq!(generation_of(&file_name(42)), Some(42));
        assert_eq!(generation_of("index.0000000000000042.tmp"), None);
    }

    /// Merging a snapshot with a tail gives every key, in order, the tail's
    /// value where both have it, and every key is found by `get`.
    #[test]
    fn merged_snapshot_finds_every_key() {
        let d = tempfile::tempdir().unwrap();
        let mut first: Vec<(u128, Value)> = (0..1000u64)
            .map(|i| {
                let v = if i % 10 == 0 {
                    Value::Rejected
                } else {
                    Value::Row { split: 1, row: i }
                };
                (fingerprint(&format!("x/{i}.wav"), stamp(i)), v)
            })
            .collect();
        first.sort_by_key(|e| e.0);
        let r1 = write_merged(d.path(), 1, None, &first, &mut |_| Ok(())).unwrap();
        assert_eq!(r1.entries, 1000);
        let s1 = Snapshot::open(d.path(), r1).unwrap();
        let mut tail: Vec<(u128, Value)> = (1000..1300u64)
            .map(|i| {
                (
                    fingerprint(&format!("x/{i}.wav"), stamp(i)),
                    Value::Row { split: 2, row: i },
                )
            })
            .collect();
        // A key already in the snapshot: the tail's value wins.
        tail.push((first[5].0, Value::Row { split: 3, row: 9 }));
        tail.sort_by_key(|e| e.0);
        let r2 = write_merged(d.path(), 2, Some(&s1), &tail, &mut |_| Ok(())).unwrap();
        assert_eq!(r2.entries, 1300);
        let s2 = Snapshot::open(d.path(), r2).unwrap();
        for (k, v) in first.iter().chain(&tail) {
            let want = if *k == first[5].0 {
                Value::Row { split: 3, row: 9 }
            } else {
                *v
            };
            assert_eq!(s2.get(*k).unwrap(), Some(want));
        }
        assert_eq!(s2.get(fingerprint("absent.wav", stamp(1))).unwrap(), None);
        assert_eq!(s2.get(0).unwrap(), None);
        assert_eq!(s2.get(u128::MAX).unwrap(), None);
        assert_eq!(s2.heap_bytes(), 1300usize.div_ceil(BLOCK_ENTRIES) * 16);
    }

    #[test]
    fn a_damaged_snapshot_refuses_to_open() {
        let d = tempfile::tempdir().unwrap();
        let tail: Vec<(u128, Value)> = (0..10u128).map(|k| (k, Value::Rejected)).collect();
        let r = write_merged(d.path(), 1, None, &tail, &mut |_| Ok(())).unwrap();
        let p = d.path().join(file_name(1));
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[100] ^= 1;
        std::fs::write(&p, &bytes).unwrap();
        assert!(matches!(
            Snapshot::open(d.path(), r),
            Err(Error::BadIndex { .. })
        ));
        std::fs::write(&p, &bytes[..64]).unwrap();
        assert!(matches!(
            Snapshot::open(d.path(), r),
            Err(Error::BadIndex { .. })
        ));
    }
}
