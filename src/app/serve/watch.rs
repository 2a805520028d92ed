//! The `serve` source: an inotify watch on the drop directory tree.
//!
//! Reports every WAV file that becomes complete in the tree: `IN_CLOSE_WRITE`
//! (written in place) and `IN_MOVED_TO` (renamed in — the recommended writer
//! contract: write elsewhere on the same filesystem, then rename). New
//! subdirectories (`IN_CREATE`/`IN_MOVED_TO` with `IN_ISDIR`) are watched and
//! scanned at once, since files may land in them before the watch exists. On
//! `IN_Q_OVERFLOW` the kernel dropped events, so the watcher asks for a full
//! rescan. Temporary names ([`Ignore`]) never produce an event.
//!
//! The same path may be reported more than once (a rescan, a close after a
//! rename); the consumer deduplicates against its journal. The watcher owns
//! its thread; [`Watcher::stop`] (or drop) ends it within one poll interval.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

/// What the watcher reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    /// A complete WAV file at this absolute path.
    File(PathBuf),
    /// Events were lost; the consumer must rescan the whole tree.
    Rescan,
}

/// Names that are never ingested: dotfiles and the configured suffix patterns
/// (`*.part`, `*.tmp` by default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ignore {
    /// Glob-like patterns: `*suffix`, `prefix*`, or an exact name.
    pub patterns: Vec<String>,
    /// Extensions taken as inputs (`input.extensions`, lower case, no dot).
    pub extensions: Vec<String>,
}

impl Default for Ignore {
    fn default() -> Self {
        Ignore {
            patterns: vec!["*.part".into(), "*.tmp".into()],
            extensions: crate::config::defaults::input::EXTENSIONS
                .iter()
                .map(|e| e.to_string())
                .collect(),
        }
    }
}

impl Ignore {
    /// Whether a file or directory name is temporary and must be skipped.
    pub fn ignores(&self, name: &str) -> bool {
        if name.starts_with('.') {
            return true;
        }
        self.patterns
            .iter()
            .any(|p| match (p.strip_prefix('*'), p.strip_suffix('*')) {
                (Some(suffix), _) => name.ends_with(suffix),
                (None, Some(prefix)) => name.starts_with(prefix),
                (None, None) => name == p,
            })
    }

    /// Whether `name` has one of the input extensions (case-insensitive)
    /// and should be ingested.
    pub fn wants(&self, name: &str) -> bool {
        !self.ignores(name)
            && Path::new(name)
                .extension()
                .and_then(OsStr::to_str)
                .is_some_and(|e| self.extensions.iter().any(|x| x.eq_ignore_ascii_case(e)))
    }
}

/// Every WAV file below `dir` that `ignore` wants, sorted (the initial scan
/// and the rescan after an overflow).
pub fn scan_tree(dir: &Path, ignore: &Ignore) -> Vec<PathBuf> {
    fn walk(dir: &Path, ignore: &Ignore, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                if !ignore.ignores(name) {
                    walk(&e.path(), ignore, out);
                }
            } else if ignore.wants(name) {
                out.push(e.path());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, ignore, &mut out);
    out.sort();
    out
}

/// A running watcher thread.
pub struct Watcher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

const FILE_MASK: WatchMask = WatchMask::CLOSE_WRITE
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::CREATE)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::ONLYDIR);

struct State {
    inotify: Inotify,
    dirs: HashMap<WatchDescriptor, PathBuf>,
    ignore: Ignore,
    tx: Sender<WatchEvent>,
}

impl State {
    /// Watches `dir` and every subdirectory; reports the files already there
    /// when `report_existing` (a directory that appeared after start-up).
    fn watch_tree(&mut self, dir: &Path, report_existing: bool) -> bool {
        match self.inotify.watches().add(dir, FILE_MASK) {
            Ok(wd) => {
                self.dirs.insert(wd, dir.to_path_buf());
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "Cannot watch a directory.");
                return true;
            }
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return true;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() && !self.ignore.ignores(name) {
                if !self.watch_tree(&e.path(), report_existing) {
                    return false;
                }
            } else if report_existing
                && self.ignore.wants(name)
                && self.tx.send(WatchEvent::File(e.path())).is_err()
            {
                return false;
            }
        }
        true
    }

    /// Handles every queued event; false when the consumer has gone.
    fn drain(&mut self, buf: &mut [u8]) -> std::io::Result<bool> {
        loop {
            let events = match self.inotify.read_events(buf) {
                Ok(ev) => ev,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) => return Err(e),
            };
            let mut new_dirs = Vec::new();
            let mut files = Vec::new();
            let mut overflow = false;
            for ev in events {
                if ev.mask.contains(EventMask::Q_OVERFLOW) {
                    overflow = true;
                    continue;
                }
                if ev.mask.contains(EventMask::IGNORED) {
                    self.dirs.remove(&ev.wd);
                    continue;
                }
                let (Some(dir), Some(name)) = (self.dirs.get(&ev.wd), ev.name) else {
                    continue;
                };
                let Some(name) = name.to_str() else { continue };
                let path = dir.join(name);
                if ev.mask.contains(EventMask::ISDIR) {
                    if ev.mask.intersects(EventMask::CREATE | EventMask::MOVED_TO)
                        && !self.ignore.ignores(name)
                    {
                        new_dirs.push(path);
                    }
                } else if ev
                    .mask
                    .intersects(EventMask::CLOSE_WRITE | EventMask::MOVED_TO)
                    && self.ignore.wants(name)
                {
                    files.push(path);
                }
            }
            for f in files {
                if self.tx.send(WatchEvent::File(f)).is_err() {
                    return Ok(false);
                }
            }
            for d in new_dirs {
                if !self.watch_tree(&d, true) {
                    return Ok(false);
                }
            }
            if overflow {
                tracing::warn!("The inotify queue overflowed; rescanning the drop directory.");
                // Watches may be missing for directories created meanwhile.
                let roots: Vec<PathBuf> = self.dirs.values().cloned().collect();
                for d in roots {
                    if !self.watch_tree(&d, false) {
                        return Ok(false);
                    }
                }
                if self.tx.send(WatchEvent::Rescan).is_err() {
                    return Ok(false);
                }
            }
        }
    }
}

impl Watcher {
    /// Starts watching `root` (which must exist). Files already present are
    /// not reported: the consumer does its own initial [`scan_tree`] after
    /// this returns, so nothing that lands in between is missed.
    pub fn start(root: &Path, ignore: Ignore, tx: Sender<WatchEvent>) -> std::io::Result<Watcher> {
        let inotify = Inotify::init()?;
        let mut state = State {
            inotify,
            dirs: HashMap::new(),
            ignore,
            tx,
        };
        if !root.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("drop directory {} does not exist", root.display()),
            ));
        }
        state.watch_tree(root, false);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("watch".into())
            .spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                let tick = Some(std::time::Duration::from_millis(100));
                while !flag.load(Ordering::Acquire) {
                    // Timed out, interrupted or failed: look at the stop flag again.
                    let ready = crate::runtime::sys::poll_readable([state.inotify.as_fd()], tick);
                    if !matches!(ready, Ok([true])) {
                        continue;
                    }
                    match state.drain(&mut buf) {
                        Ok(true) => {}
                        Ok(false) => break,
                        Err(e) => {
                            tracing::error!(error = %e, "Reading inotify events failed; rescanning.");
                            if state.tx.send(WatchEvent::Rescan).is_err() {
                                break;
                            }
                        }
                    }
                }
            })?;
        Ok(Watcher {
            stop,
            thread: Some(thread),
        })
    }

    /// Ends the watcher thread and waits for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            tracing::error!("The watcher thread panicked.");
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::{Receiver, channel};
    use std::time::{Duration, Instant};

    fn collect(rx: &Receiver<WatchEvent>, want: usize) -> Vec<WatchEvent> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut got = Vec::new();
        while got.len() < want && Instant::now() < deadline {
            if let Ok(e) = rx.recv_timeout(Duration::from_millis(50)) {
                got.push(e);
            }
        }
        got
    }

    #[test]
    fn ignore_rules() {
        let i = Ignore::default();
        assert!(i.wants("a.wav") && i.wants("B.WAV"));
        assert!(!i.wants(".a.wav") && !i.wants("a.wav.part") && !i.wants("a.tmp"));
        assert!(!i.wants("notes.txt"));
        // `.flac` drops are inputs by default; `input.extensions` narrows it.
        assert!(i.wants("c.flac") && i.wants("D.FLAC") && !i.wants("c.flac.part"));
        let i = Ignore {
            extensions: vec!["wav".into()],
            patterns: vec!["incoming_*".into(), "skip.wav".into()],
        };
        assert!(!i.wants("incoming_1.wav") && !i.wants("skip.wav") && i.wants("x.wav"));
        assert!(!i.wants("x.flac"));
    }

    #[test]
    fn reports_renames_writes_and_files_in_new_subdirectories() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("drop");
        std::fs::create_dir(&root).unwrap();
        let (tx, rx) = channel();
        let w = Watcher::start(&root, Ignore::default(), tx).unwrap();

        // Renamed in (the recommended contract), from a temp name.
        std::fs::write(root.join("a.wav.part"), b"x").unwrap();
        std::fs::rename(root.join("a.wav.part"), root.join("a.wav")).unwrap();
        // Written in place.
        std::fs::write(root.join("b.wav"), b"x").unwrap();
        // A temp file and a dotfile: never reported.
        std::fs::write(root.join("c.tmp"), b"x").unwrap();
        std::fs::write(root.join(".d.wav"), b"x").unwrap();
        // A whole subtree renamed in at once, and a file written into a new dir.
        let staging = d.path().join("staging/TRAINING/leak");
        std::fs::create_dir_all(&staging).unwrap();
        std::fs::write(staging.join("e.wav"), b"x").unwrap();
        std::fs::rename(d.path().join("staging/TRAINING"), root.join("TRAINING")).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        std::fs::write(root.join("TRAINING/leak/f.wav"), b"x").unwrap();

        let got = collect(&rx, 4);
        let mut files: Vec<PathBuf> = got
            .into_iter()
            .map(|e| match e {
                WatchEvent::File(p) => p,
                WatchEvent::Rescan => panic!("unexpected rescan"),
            })
            .collect();
        files.sort();
        files.dedup();
        assert_eq!(
            files,
            [
                root.join("TRAINING/leak/e.wav"),
                root.join("TRAINING/leak/f.wav"),
                root.join("a.wav"),
                root.join("b.wav"),
            ]
        );
        w.stop();
    }

    #[test]
    fn scan_tree_skips_temporary_names() {
        let d = tempfile::tempdir().unwrap();
        for p in [
            "x/a.wav",
            "x/.b.wav",
            "x/c.wav.part",
            ".hidden/d.wav",
            "e.WAV",
        ] {
            let f = d.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, b"").unwrap();
        }
        assert_eq!(
            scan_tree(d.path(), &Ignore::default()),
            [d.path().join("e.WAV"), d.path().join("x/a.wav")]
        );
    }
}
