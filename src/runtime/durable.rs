//! Durable file-system changes: a file's bytes, a directory's names, and
//! moves that keep a file under at least one name through a power loss
//! (docs/OPERATIONS.md, "Power loss"). Plain `std::fs` calls in a fixed
//! order; the raw system calls are in [`super::sys`].

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};

/// fsyncs the file at `path`: its bytes and length survive a power loss (not
/// its name: see [`sync_dir`]). Call before renaming a finished file into
/// place, so the final name never points at bytes that were not written.
pub fn sync_file(path: &Path) -> io::Result<()> {
    std::fs::File::open(path)?.sync_all()
}

/// fsyncs the directory `dir`: the creates, renames and unlinks in it survive
/// a power loss. Call after renaming a file into place (and on the parent of
/// a directory just created) before reporting the file as written.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Moves each file `from` to `to` (same file system) so that a power loss at
/// any point leaves it under at least one of the two names: `to`'s missing
/// parent directories are created, each made durable in its parent; every
/// `to` is linked (an existing `to` replaced), then each destination
/// directory is fsynced once, and only then are the sources unlinked. Where
/// hard links are refused, a file is renamed instead and both its
/// directories are fsynced. One fsync per directory, not per file: serve
/// moves every file of a commit this way (one per file capped it near 3,000
/// files/s). Returns one result per move, in order; a move whose directory
/// could not be fsynced fails and keeps its source (the file is then under
/// both names).
pub fn move_all_durably(moves: &[(PathBuf, PathBuf)]) -> Vec<io::Result<()>> {
    enum How {
        Linked,
        Renamed,
    }
    let parent = |p: &Path| parent_dir(p).to_path_buf();
    let mut made: HashSet<PathBuf> = HashSet::new();
    let mut dirty: BTreeSet<PathBuf> = BTreeSet::new();
    let mut how: Vec<io::Result<How>> = Vec::with_capacity(moves.len());
    for (from, to) in moves {
        let dir = parent(to);
        let linked = if made.contains(&dir) {
            Ok(())
        } else {
            create_dir_durably(&dir).map(|()| {
                made.insert(dir.clone());
            })
        }
        .and_then(|()| match std::fs::hard_link(from, to) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                std::fs::remove_file(to)?;
                std::fs::hard_link(from, to)
            }
            r => r,
        });
        how.push(match linked {
            Ok(()) => {
                dirty.insert(dir);
                Ok(How::Linked)
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EOPNOTSUPP)) => {
                std::fs::rename(from, to).map(|()| {
                    dirty.insert(dir);
                    dirty.insert(parent(from));
                    How::Renamed
                })
            }
            Err(e) => Err(e),
        });
    }
    let failed: HashMap<PathBuf, io::Error> = dirty
        .into_iter()
        .filter_map(|d| sync_dir(&d).err().map(|e| (d, e)))
        .collect();
    let dir_failed = |d: &PathBuf| {
        failed
            .get(d)
            .map(|e| io::Error::new(e.kind(), format!("fsync {}: {e}", d.display())))
    };
    moves
        .iter()
        .zip(how)
        .map(|((from, to), how)| match how? {
            How::Linked => match dir_failed(&parent(to)) {
                Some(e) => Err(e),
                None => std::fs::remove_file(from),
            },
            How::Renamed => match dir_failed(&parent(to)).or_else(|| dir_failed(&parent(from))) {
                Some(e) => Err(e),
                None => Ok(()),
            },
        })
        .collect()
}

/// `create_dir_all` where each directory created is fsynced into its parent.
pub fn create_dir_durably(dir: &Path) -> io::Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    let parent = parent_dir(dir);
    create_dir_durably(parent)?;
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        r => r,
    }?;
    sync_dir(parent)
}

/// The directory holding `p` ("." for a bare name).
fn parent_dir(p: &Path) -> &Path {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// A file written under `<name>.partial`, then synced and renamed to its
/// name by [`Partial::finish`]: a reader never sees it half written under
/// its own name. Buffered; an encoder can wrap it (it is `io::Write`).
pub struct Partial {
    partial: PathBuf,
    to: PathBuf,
    w: io::BufWriter<std::fs::File>,
}

impl Partial {
    /// Creates `<to>.partial`.
    pub fn create(to: &Path) -> io::Result<Partial> {
        let mut partial = to.as_os_str().to_owned();
        partial.push(".partial");
        let partial = PathBuf::from(partial);
        let w = io::BufWriter::with_capacity(1 << 16, std::fs::File::create(&partial)?);
        Ok(Partial {
            partial,
            to: to.to_path_buf(),
            w,
        })
    }

    /// Flushes, syncs and renames the file to its name.
    pub fn finish(self) -> io::Result<()> {
        self.w
            .into_inner()
            .map_err(|e| e.into_error())?
            .sync_all()?;
        std::fs::rename(&self.partial, &self.to)
    }
}

impl io::Write for Partial {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.w.write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.w.write_all(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A commit's moves: into an existing directory, into new nested ones,
    /// over an existing file, and one whose source is gone. Each good move
    /// ends with the file under its new name only and its content intact;
    /// the bad one fails alone.
    #[test]
    fn moving_many_files_links_each_then_syncs_each_directory_once() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("drop/a");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::create_dir_all(d.path().join("done/a")).unwrap();
        std::fs::write(d.path().join("done/a/old.wav"), b"stale").unwrap();
        let mut moves = Vec::new();
        for (i, to) in [
            "done/a/x0.wav",
            "done/a/x1.wav",
            "done/b/c/y.wav",
            "done/a/old.wav",
        ]
        .iter()
        .enumerate()
        {
            let from = src.join(format!("f{i}.wav"));
            std::fs::write(&from, format!("clip {i}")).unwrap();
            moves.push((from, d.path().join(to)));
        }
        moves.push((src.join("missing.wav"), d.path().join("done/a/z.wav")));
        let results = move_all_durably(&moves);
        assert_eq!(results.len(), 5);
        for (i, ((from, to), r)) in moves.iter().zip(&results).enumerate().take(4) {
            assert!(r.is_ok(), "move {i}: {r:?}");
            assert!(!from.exists(), "move {i} left its source");
            assert_eq!(std::fs::read_to_string(to).unwrap(), format!("clip {i}"));
        }
        let e = results[4].as_ref().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
        assert!(!d.path().join("done/a/z.wav").exists());
    }
}
