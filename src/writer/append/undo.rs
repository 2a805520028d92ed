//! An undo log for the moments HDF5 rewrites a split file's metadata in place
//! outside SWMR's write ordering: recovery at open and the close.
//!
//! SWMR orders each flush's metadata writes so that every prefix of them is a
//! readable file, and a flush is followed by an `fdatasync`. A plain (non-SWMR)
//! open or close makes no such promise: it rewrites the superblock, object
//! headers, heaps and free-space info in place, truncates, rewrites the
//! superblock again, and a power loss that keeps only part of those writes
//! leaves a file HDF5 refuses to open ("incorrect metadata checksum"). So
//! while such a step runs, the file is *armed*:
//!
//! 1. [`arm`] syncs the file, then creates `.<name>.undo` next to it holding
//!    the file's length, and makes the log and its name durable.
//! 2. Before every write below that length, the driver (`super::vfd`) appends
//!    the bytes about to be overwritten to the log and `fdatasync`s it
//!    ([`record`]); a truncate below it does the same for the bytes cut.
//! 3. [`Armed::commit`] syncs the file, then deletes the log durably.
//!
//! [`roll_back`], called before a split file is opened, finds a log left by a
//! step that did not commit, writes the saved bytes back (newest first, so the
//! oldest copy of a byte wins), truncates to the saved length and syncs: the
//! file is exactly as it was when armed, which was durable and consistent. A
//! record torn by the power loss fails its checksum and is skipped: its write
//! was never issued, since each record is synced before the write it covers.
//!
//! The log names the file it covers by inode (the device is recorded, not
//! compared: it can change across a reboot or remount): a log whose file was
//! since replaced (a rebuild's swap renames a new file over it) is stale and
//! is deleted unused. A new split file is created only after any log left
//! for its name is removed ([`discard`]), so a reused inode number never
//! meets an old log.
//!
//! Log format (little-endian): header `MFUNDO01`, length, device, inode (u64
//! each), xxh3 of the 32 bytes before it; then records `addr u64, n u64,
//! n bytes, xxh3 u64` of the rest.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use xxhash_rust::xxh3::xxh3_64;

use crate::runtime::durable;

const MAGIC: &[u8; 8] = b"MFUNDO01";
const HEADER: usize = 40;

/// A file's identity while it is open: (device, inode).
pub(super) type Key = (u64, u64);

/// The log of one armed file.
struct Log {
    file: File,
    /// The armed file's length when armed: bytes at or past it are new.
    base_len: u64,
}

/// Armed files by identity, and how many there are (the driver's write path
/// skips the lock while none is armed).
static ARMED: Mutex<Option<HashMap<Key, Log>>> = Mutex::new(None);
static N_ARMED: AtomicUsize = AtomicUsize::new(0);

fn armed() -> MutexGuard<'static, Option<HashMap<Key, Log>>> {
    ARMED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The undo log's path for the split file `h5`.
pub fn log_path(h5: &Path) -> PathBuf {
    let name = h5
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    h5.with_file_name(format!(".{name}.undo"))
}

/// The directory holding `p` ("." for a bare name).
fn dir_of(p: &Path) -> &Path {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// The identity of an open file.
pub(super) fn key_of(f: &File) -> io::Result<Key> {
    let m = f.metadata()?;
    Ok((m.dev(), m.ino()))
}

/// An armed split file; see the module documentation. Dropping it without
/// [`Armed::commit`] disarms it and leaves the log for [`roll_back`].
pub struct Armed {
    h5: PathBuf,
    key: Key,
}

/// Arms `h5` (an existing file): syncs it, then writes its length to a new
/// undo log and makes the log durable, name included.
pub fn arm(h5: &Path) -> io::Result<Armed> {
    let f = OpenOptions::new().read(true).write(true).open(h5)?;
    f.sync_data()?;
    let meta = f.metadata()?;
    let key = (meta.dev(), meta.ino());
    let lp = log_path(h5);
    let mut log = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&lp)?;
    let mut header = Vec::with_capacity(HEADER);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&meta.len().to_le_bytes());
    header.extend_from_slice(&meta.dev().to_le_bytes());
    header.extend_from_slice(&meta.ino().to_le_bytes());
    header.extend_from_slice(&xxh3_64(&header).to_le_bytes());
    log.write_all(&header)?;
    log.sync_data()?;
    durable::sync_dir(dir_of(&lp))?;
    let entry = Log {
        file: log,
        base_len: meta.len(),
    };
    let mut map = armed();
    if map
        .get_or_insert_with(HashMap::new)
        .insert(key, entry)
        .is_none()
    {
        N_ARMED.fetch_add(1, Ordering::SeqCst);
    }
    Ok(Armed {
        h5: h5.to_path_buf(),
        key,
    })
}

impl Armed {
    /// Syncs the file and deletes the log durably: the step is done.
    pub fn commit(self) -> io::Result<()> {
        File::open(&self.h5)?.sync_data()?;
        disarm(self.key);
        let lp = log_path(&self.h5);
        std::fs::remove_file(&lp)?;
        durable::sync_dir(dir_of(&lp))
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        disarm(self.key);
    }
}

fn disarm(key: Key) {
    if let Some(map) = armed().as_mut()
        && map.remove(&key).is_some()
    {
        N_ARMED.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether the file `key` is armed: its writes must pass [`record`] first.
pub(super) fn is_armed(key: Key) -> bool {
    N_ARMED.load(Ordering::SeqCst) > 0 && armed().as_ref().is_some_and(|m| m.contains_key(&key))
}

/// Called by the driver before it writes `len` bytes at `addr` of the file
/// `key` (read through `src`): when that file is armed and the range starts
/// below its armed length, saves the bytes there to the log and syncs it.
pub(super) fn record(key: Key, src: &File, addr: u64, len: u64) -> io::Result<()> {
    if N_ARMED.load(Ordering::SeqCst) == 0 {
        return Ok(());
    }
    let mut map = armed();
    let Some(log) = map.as_mut().and_then(|m| m.get_mut(&key)) else {
        return Ok(());
    };
    if addr >= log.base_len {
        return Ok(());
    }
    let end = addr.saturating_add(len).min(log.base_len);
    let mut old = vec![0u8; (end - addr) as usize];
    read_full(src, &mut old, addr)?;
    let mut rec = Vec::with_capacity(old.len() + 24);
    rec.extend_from_slice(&addr.to_le_bytes());
    rec.extend_from_slice(&(old.len() as u64).to_le_bytes());
    rec.extend_from_slice(&old);
    rec.extend_from_slice(&xxh3_64(&rec).to_le_bytes());
    log.file.write_all(&rec)?;
    log.file.sync_data()
}

/// Reads `buf.len()` bytes at `at`; past the end of the file reads zeros.
fn read_full(f: &File, buf: &mut [u8], at: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], at + done as u64) {
            Ok(0) => {
                buf[done..].fill(0);
                break;
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// What [`roll_back`] restored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolledBack {
    /// Saved ranges written back.
    pub records: usize,
    /// The length the file was cut back to.
    pub len: u64,
}

/// Restores `h5` from a log an uncommitted step left, then deletes the log.
/// `Ok(None)` when there is no log, or when it covers nothing: its header
/// never became durable (then nothing was overwritten under it), or the file
/// it names is gone or was replaced.
pub fn roll_back(h5: &Path) -> io::Result<Option<RolledBack>> {
    let lp = log_path(h5);
    let bytes = match std::fs::read(&lp) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let dir = dir_of(&lp).to_path_buf();
    let f = match OpenOptions::new().write(true).open(h5) {
        Ok(f) => Some(f),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let live = match (&f, parse_header(&bytes)) {
        // The inode only: a device number can change across a reboot or a
        // remount (FUSE and other anonymous devices get a new one per mount).
        (Some(f), Some((base_len, key))) if key_of(f)?.1 == key.1 => Some(base_len),
        _ => None,
    };
    let (Some(f), Some(base_len)) = (f, live) else {
        std::fs::remove_file(&lp)?;
        durable::sync_dir(&dir)?;
        return Ok(None);
    };
    let records = parse_records(&bytes[HEADER..]);
    for (addr, old) in records.iter().rev() {
        f.write_all_at(old, *addr)?;
    }
    f.set_len(base_len)?;
    f.sync_all()?;
    std::fs::remove_file(&lp)?;
    durable::sync_dir(&dir)?;
    Ok(Some(RolledBack {
        records: records.len(),
        len: base_len,
    }))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Deletes the log left for `h5` (the file is gone and is made anew), durably.
pub fn discard(h5: &Path) -> io::Result<()> {
    let lp = log_path(h5);
    match std::fs::remove_file(&lp) {
        Ok(()) => durable::sync_dir(dir_of(&lp)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// The armed length and the file's identity.
fn parse_header(b: &[u8]) -> Option<(u64, Key)> {
    if b.len() < HEADER || &b[..8] != MAGIC || u64_at(b, 32)? != xxh3_64(&b[..32]) {
        return None;
    }
    Some((u64_at(b, 8)?, (u64_at(b, 16)?, u64_at(b, 24)?)))
}

/// The records up to the first one torn or failing its checksum.
fn parse_records(mut b: &[u8]) -> Vec<(u64, &[u8])> {
    let mut out = Vec::new();
    while let (Some(addr), Some(n)) = (u64_at(b, 0), u64_at(b, 8)) {
        let Some(end) = usize::try_from(n).ok().and_then(|n| n.checked_add(16)) else {
            break;
        };
        match u64_at(b, end) {
            Some(sum) if sum == xxh3_64(&b[..end]) => {
                out.push((addr, &b[16..end]));
                b = &b[end + 8..];
            }
            _ => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `data` at `at` the way the driver does: record, then write.
    fn logged_write(h5: &Path, at: u64, data: &[u8]) {
        let f = OpenOptions::new().read(true).write(true).open(h5).unwrap();
        record(key_of(&f).unwrap(), &f, at, data.len() as u64).unwrap();
        f.write_all_at(data, at).unwrap();
    }

    /// `dir/name` holding `body`, armed, then `writes` made through the log
    /// and the step cut off before its commit (the log stays).
    fn cut_off_step(dir: &Path, name: &str, body: &[u8], writes: &[(u64, &[u8])]) -> PathBuf {
        let h5 = dir.join(name);
        std::fs::write(&h5, body).unwrap();
        let armed = arm(&h5).unwrap();
        for (at, data) in writes {
            logged_write(&h5, *at, data);
        }
        drop(armed);
        h5
    }

    #[test]
    fn an_uncommitted_step_rolls_back_to_the_armed_bytes_and_length() {
        let dir = tempfile::tempdir().unwrap();
        let before: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let writes: [(u64, &[u8]); 4] = [
            (10, &[1; 100]),
            (50, &[2; 100]),
            (4000, &[3; 500]),
            (6000, &[4; 10]),
        ];
        let h5 = cut_off_step(dir.path(), "train.h5", &before, &writes);
        // Not armed any more: this write is not logged.
        let f = OpenOptions::new().read(true).write(true).open(&h5).unwrap();
        record(key_of(&f).unwrap(), &f, 0, 1).unwrap();
        assert!(log_path(&h5).exists());
        let done = roll_back(&h5).unwrap().unwrap();
        assert_eq!(
            done,
            RolledBack {
                records: 3,
                len: 4096
            }
        );
        assert_eq!(std::fs::read(&h5).unwrap(), before);
        assert!(!log_path(&h5).exists());
        assert_eq!(roll_back(&h5).unwrap(), None);
    }

    #[test]
    fn a_committed_step_leaves_no_log_and_keeps_its_writes() {
        let dir = tempfile::tempdir().unwrap();
        let h5 = dir.path().join("val.h5");
        std::fs::write(&h5, [9u8; 64]).unwrap();
        let armed = arm(&h5).unwrap();
        logged_write(&h5, 0, &[1; 8]);
        armed.commit().unwrap();
        assert!(!log_path(&h5).exists());
        assert_eq!(roll_back(&h5).unwrap(), None);
        assert_eq!(
            &std::fs::read(&h5).unwrap()[..9],
            &[1, 1, 1, 1, 1, 1, 1, 1, 9]
        );
    }

    #[test]
    fn a_torn_record_and_a_torn_header_restore_nothing_they_did_not_cover() {
        let dir = tempfile::tempdir().unwrap();
        let h5 = cut_off_step(
            dir.path(),
            "test.h5",
            &[5; 256],
            &[(0, &[1; 16]), (100, &[2; 16])],
        );
        // The power loss kept the second record only in part, and its write
        // never happened.
        let lp = log_path(&h5);
        let len = std::fs::metadata(&lp).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&lp)
            .unwrap()
            .set_len(len - 3)
            .unwrap();
        let f = OpenOptions::new().write(true).open(&h5).unwrap();
        f.write_all_at(&[5; 16], 100).unwrap();
        assert_eq!(roll_back(&h5).unwrap().unwrap().records, 1);
        assert_eq!(std::fs::read(&h5).unwrap(), vec![5u8; 256]);

        // A header that never became whole: nothing was written under it.
        std::fs::write(&lp, &MAGIC[..5]).unwrap();
        f.write_all_at(&[7; 4], 0).unwrap();
        assert_eq!(roll_back(&h5).unwrap(), None);
        assert!(!lp.exists());
        assert_eq!(&std::fs::read(&h5).unwrap()[..5], &[7, 7, 7, 7, 5]);
    }

    #[test]
    fn a_log_written_under_another_device_number_still_rolls_back() {
        let dir = tempfile::tempdir().unwrap();
        let h5 = cut_off_step(dir.path(), "train.h5", &[1; 64], &[(8, &[2; 8])]);
        // The disk came back under another device number (a remount).
        let lp = log_path(&h5);
        let mut log = std::fs::read(&lp).unwrap();
        log[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        let sum = xxh3_64(&log[..32]);
        log[32..40].copy_from_slice(&sum.to_le_bytes());
        std::fs::write(&lp, &log).unwrap();
        assert_eq!(roll_back(&h5).unwrap().unwrap().records, 1);
        assert_eq!(std::fs::read(&h5).unwrap(), vec![1u8; 64]);
    }

    #[test]
    fn a_log_whose_file_was_replaced_is_dropped_unused() {
        let dir = tempfile::tempdir().unwrap();
        let h5 = cut_off_step(dir.path(), "train.h5", &[1; 64], &[(0, &[2; 64])]);
        // A rebuild renamed a new file over it.
        let new = dir.path().join("new.h5");
        std::fs::write(&new, [3u8; 32]).unwrap();
        std::fs::rename(&new, &h5).unwrap();
        assert_eq!(roll_back(&h5).unwrap(), None);
        assert!(!log_path(&h5).exists());
        assert_eq!(std::fs::read(&h5).unwrap(), vec![3u8; 32]);
    }
}
