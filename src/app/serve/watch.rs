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
//!
//! The drop directory is watched by identity (device and inode), checked
//! every [`ROOT_CHECK`]: when it is deleted, renamed away or replaced by a new
//! directory of the same name, the watcher drops every watch (events from a
//! renamed-away tree would carry the wrong paths), reports
//! [`WatchEvent::Lost`], waits for the path to be a directory again, watches
//! it afresh and asks for a [`WatchEvent::Rescan`], which covers whatever
//! arrived meanwhile.
//!
//! The events travel to serve's loop through a bounded channel
//! ([`channel`], [`QUEUE_EVENTS`] at most), so an inotify storm cannot grow
//! it: the watcher never blocks on it (it must keep draining inotify, or
//! the kernel's own queue overflows). When the channel is full an event is
//! dropped and counted ([`Watcher::dropped`]), and one [`WatchEvent::Rescan`]
//! is owed: it is sent as soon as there is room (checked on every event and
//! at least every [`ROOT_CHECK`]), and every event until then is dropped as
//! well, since the rescan finds those files. Files beyond the bound wait
//! where they are, in the drop directory: the rule of the kernel's
//! `IN_Q_OVERFLOW`, one level up.
//!
//! Symbolic links are never followed, by the scan or the watch: a link in the
//! drop tree (to a file or a directory, inside or outside the tree) is not
//! ingested and is logged once per sighting, so nothing outside the drop
//! directory is read through one.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::ops::ControlFlow;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

use super::sidecar;

/// What the watcher reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    /// A complete WAV file at this absolute path.
    File(PathBuf),
    /// Events were lost, or the drop directory is watched afresh: the
    /// consumer must rescan the whole tree.
    Rescan,
    /// The drop directory was deleted, moved or replaced; nothing is watched
    /// until it is a directory again (then a [`WatchEvent::Rescan`] follows).
    Lost(String),
}

/// The most events the channel from the watcher to serve's loop holds
/// ([`channel`]). The loop takes every queued event each time it wakes
/// (at most `serve.flush_interval_ms` apart), and an event is one path:
/// 4,096 of them is under 1 MiB, and more than the intake takes at once
/// (`serve.max_queued_files`, 8,192 by default, fills from rescans too).
/// Events every watcher of this process dropped on a full channel (one
/// serve per process; a watcher restarted by `reload` counts on).
static DROPPED_TOTAL: AtomicU64 = AtomicU64::new(0);

/// Events dropped on a full channel since the process started, by every
/// watcher it ran (`ctl stats`' `watch_dropped_events`, the metric
/// `melforge_watch_dropped_events`).
pub fn dropped_total() -> u64 {
    DROPPED_TOTAL.load(Ordering::Relaxed)
}

/// Past it, events are dropped and a rescan is owed (module doc).
pub const QUEUE_EVENTS: usize = 4_096;

/// The bounded channel a [`Watcher`] reports on: [`QUEUE_EVENTS`] events.
pub fn channel() -> (SyncSender<WatchEvent>, Receiver<WatchEvent>) {
    std::sync::mpsc::sync_channel(QUEUE_EVENTS)
}

/// How often the drop directory's identity is checked.
pub const ROOT_CHECK: Duration = Duration::from_millis(100);

/// Logs a symbolic link that the scan or the watch leaves alone.
fn skip_symlink(path: &Path) {
    tracing::warn!(
        path = %path.display(),
        "Ignored a symbolic link in the drop directory: serve does not follow links; \
         move or copy the file in instead."
    );
}

/// Whether `path` is a symbolic link (without following it).
fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// (device, inode) of `dir` when it is a directory.
fn dir_identity(dir: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(dir)
        .ok()
        .filter(std::fs::Metadata::is_dir)
        .map(|m| (m.dev(), m.ino()))
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
    let mut out = Vec::new();
    let _all = scan_tree_each(dir, ignore, &sidecar::Seen::default(), &mut |p| {
        out.push(p);
        ControlFlow::Continue(())
    });
    out
}

/// [`scan_tree`] without the list: calls `f` on each file, in the same order
/// (each directory's entries sorted by name, depth first, which is `PathBuf`
/// order), until `f` breaks (serve's intake is full: the rest waits for the
/// next rescan). Holds one directory listing per level, not the tree: with
/// `on_success = "keep"` the drop tree holds every file ever ingested.
/// Notes each directory's names in `seen` before reporting its files.
/// Returns whether `f` broke the walk.
pub fn scan_tree_each(
    dir: &Path,
    ignore: &Ignore,
    seen: &sidecar::Seen,
    f: &mut dyn FnMut(PathBuf) -> ControlFlow<()>,
) -> ControlFlow<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return ControlFlow::Continue(());
    };
    let mut entries: Vec<std::fs::DirEntry> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in &entries {
        seen.note(&e.file_name().to_string_lossy());
    }
    for e in entries {
        let name = e.file_name();
        // Names that are not UTF-8 are matched by their lossy text and
        // reported: the consumer rejects them with a reason.
        let name = &*name.to_string_lossy();
        let Ok(t) = e.file_type() else { continue };
        if t.is_symlink() {
            if !ignore.ignores(name) {
                skip_symlink(&e.path());
            }
        } else if t.is_dir() {
            if !ignore.ignores(name) {
                scan_tree_each(&e.path(), ignore, seen, f)?;
            }
        } else if ignore.wants(name) {
            f(e.path())?;
        }
    }
    ControlFlow::Continue(())
}

/// A running watcher thread.
pub struct Watcher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    dropped: Arc<AtomicU64>,
}

const FILE_MASK: WatchMask = WatchMask::CLOSE_WRITE
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::CREATE)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF)
    .union(WatchMask::ONLYDIR)
    .union(WatchMask::DONT_FOLLOW);

struct State {
    inotify: Inotify,
    dirs: HashMap<WatchDescriptor, PathBuf>,
    ignore: Ignore,
    seen: sidecar::Seen,
    tx: SyncSender<WatchEvent>,
    /// A rescan is owed: an event was dropped on a full channel.
    owed: bool,
    /// Events dropped on a full channel, ever.
    dropped: Arc<AtomicU64>,
    /// The drop directory and the identity it had when watched (None while
    /// it is missing).
    root: PathBuf,
    root_id: Option<(u64, u64)>,
    next_root_check: Instant,
}

impl State {
    /// Hands `ev` to the channel without blocking; false when the consumer
    /// has gone. On a full channel, or while a rescan is owed and cannot be
    /// sent yet, `ev` is dropped (counted) and a rescan is owed (module
    /// doc).
    fn send(&mut self, ev: WatchEvent) -> Result<(), ()> {
        if !self.pay_rescan()? {
            self.drop_event(false);
            return Ok(());
        }
        match self.tx.try_send(ev) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => {
                let first = !self.owed;
                self.owed = true;
                self.drop_event(first);
                Ok(())
            }
            Err(TrySendError::Disconnected(_)) => Err(()),
        }
    }

    /// Sends the owed rescan if there is room: whether none is owed now.
    fn pay_rescan(&mut self) -> Result<bool, ()> {
        if !self.owed {
            return Ok(true);
        }
        match self.tx.try_send(WatchEvent::Rescan) {
            Ok(()) => {
                self.owed = false;
                tracing::info!(
                    dropped = self.dropped.load(Ordering::Relaxed),
                    "The watch queue has room again; rescanning for the files whose events \
                     were dropped."
                );
                Ok(true)
            }
            Err(TrySendError::Full(_)) => Ok(false),
            Err(TrySendError::Disconnected(_)) => Err(()),
        }
    }

    /// Counts a dropped event; the first of a run of them is logged.
    fn drop_event(&mut self, first: bool) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        DROPPED_TOTAL.fetch_add(1, Ordering::Relaxed);
        if first {
            tracing::warn!(
                max_events = QUEUE_EVENTS,
                "The watch queue is full; dropping events until it has room, then rescanning."
            );
        }
    }

    /// Checks the drop directory is still the one watched; handles its loss
    /// and its return. False when the consumer has gone.
    fn check_root(&mut self) -> bool {
        let now = Instant::now();
        if now < self.next_root_check {
            return true;
        }
        self.next_root_check = now + ROOT_CHECK;
        let id = dir_identity(&self.root);
        if self.root_id.is_some() && id != self.root_id {
            let what = if id.is_some() {
                "was replaced by another directory"
            } else {
                "was deleted or moved away"
            };
            let msg = format!(
                "the drop directory {} {what}; watching for it again",
                self.root.display()
            );
            tracing::warn!(dir = %self.root.display(), "The drop directory {what}; re-watching it.");
            for wd in std::mem::take(&mut self.dirs).into_keys() {
                // The watch may be gone already (IN_IGNORED); nothing to do.
                let _ = self.inotify.watches().remove(wd);
            }
            self.root_id = None;
            if self.send(WatchEvent::Lost(msg)).is_err() {
                return false;
            }
        }
        if self.root_id.is_none() && id.is_some() {
            self.root_id = id;
            let root = self.root.clone();
            if !self.watch_tree(&root, false) {
                return false;
            }
            tracing::info!(dir = %self.root.display(), "Watching the drop directory again; rescanning it.");
            return self.send(WatchEvent::Rescan).is_ok();
        }
        true
    }

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
        // Every name noted before any file is reported.
        let entries: Vec<std::fs::DirEntry> = entries.flatten().collect();
        for e in &entries {
            self.seen.note(&e.file_name().to_string_lossy());
        }
        for e in entries {
            let name = e.file_name();
            // Names that are not UTF-8 are matched by their lossy text and
            // reported: the consumer rejects them with a reason.
            let name = &*name.to_string_lossy();
            let Ok(t) = e.file_type() else { continue };
            if t.is_symlink() {
                if report_existing && !self.ignore.ignores(name) {
                    skip_symlink(&e.path());
                }
            } else if t.is_dir() && !self.ignore.ignores(name) {
                if !self.watch_tree(&e.path(), report_existing) {
                    return false;
                }
            } else if report_existing
                && self.ignore.wants(name)
                && self.send(WatchEvent::File(e.path())).is_err()
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
                let path = dir.join(name);
                let name = &*name.to_string_lossy();
                if ev.mask.contains(EventMask::ISDIR) {
                    if ev.mask.intersects(EventMask::CREATE | EventMask::MOVED_TO)
                        && !self.ignore.ignores(name)
                    {
                        new_dirs.push(path);
                    }
                } else {
                    // A sidecar's name counts however it arrives (a hard
                    // link makes only IN_CREATE).
                    if ev.mask.intersects(
                        EventMask::CREATE | EventMask::CLOSE_WRITE | EventMask::MOVED_TO,
                    ) {
                        self.seen.note(name);
                    }
                    if ev
                        .mask
                        .intersects(EventMask::CLOSE_WRITE | EventMask::MOVED_TO)
                        && self.ignore.wants(name)
                    {
                        if is_symlink(&path) {
                            skip_symlink(&path);
                        } else {
                            files.push(path);
                        }
                    }
                }
            }
            for f in files {
                if self.send(WatchEvent::File(f)).is_err() {
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
                if self.send(WatchEvent::Rescan).is_err() {
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
    /// Watches `root` for `ignore`'s files, reported on `tx`, noting names
    /// in `seen`.
    pub fn start(
        root: &Path,
        ignore: Ignore,
        seen: sidecar::Seen,
        tx: SyncSender<WatchEvent>,
    ) -> std::io::Result<Watcher> {
        let inotify = Inotify::init()?;
        let Some(root_id) = dir_identity(root) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("drop directory {} does not exist", root.display()),
            ));
        };
        let mut state = State {
            inotify,
            dirs: HashMap::new(),
            ignore,
            seen,
            tx,
            owed: false,
            dropped: Arc::new(AtomicU64::new(0)),
            root: root.to_path_buf(),
            root_id: Some(root_id),
            next_root_check: Instant::now() + ROOT_CHECK,
        };
        state.watch_tree(root, false);
        let dropped = Arc::clone(&state.dropped);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("watch".into())
            .spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                let tick = Some(ROOT_CHECK);
                while !flag.load(Ordering::Acquire) {
                    if !state.check_root() || state.pay_rescan().is_err() {
                        break;
                    }
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
                            if state.send(WatchEvent::Rescan).is_err() {
                                break;
                            }
                        }
                    }
                }
            })?;
        Ok(Watcher {
            stop,
            thread: Some(thread),
            dropped,
        })
    }

    /// Events dropped on a full channel since start (each followed, once
    /// there is room, by a rescan).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
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
    use std::sync::mpsc::sync_channel;

    fn channel() -> (SyncSender<WatchEvent>, Receiver<WatchEvent>) {
        super::channel()
    }

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
        let w = Watcher::start(&root, Ignore::default(), sidecar::Seen::default(), tx).unwrap();

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
                other => panic!("unexpected {other:?}"),
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

    /// A sidecar's name is noted before the files it may belong to are
    /// reported: by the watch (the `.json` moved in, then its audio; a new
    /// directory whose listing holds both), and by the tree walk, where
    /// `clip.mp3.json` sorts after `clip.mp3`.
    #[test]
    fn sidecar_names_are_seen_before_their_files() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("drop");
        std::fs::create_dir_all(root.join("a")).unwrap();
        std::fs::write(root.join("a/clip.mp3"), b"x").unwrap();
        // A tree without any `.json`: never seen.
        let seen = sidecar::Seen::default();
        let _all = scan_tree_each(&root, &Ignore::default(), &seen, &mut |_| {
            ControlFlow::Continue(())
        });
        assert!(!seen.any());
        std::fs::write(root.join("a/clip.mp3.json"), b"{}").unwrap();
        let seen = sidecar::Seen::default();
        let mut at_report = Vec::new();
        let _all = scan_tree_each(&root, &Ignore::default(), &seen, &mut |p| {
            at_report.push((p, seen.any()));
            ControlFlow::Continue(())
        });
        assert_eq!(at_report, [(root.join("a/clip.mp3"), true)]);

        for how in ["moved in", "new directory"] {
            let root = d.path().join(how.replace(' ', "_"));
            std::fs::create_dir(&root).unwrap();
            let (tx, rx) = channel();
            let seen = sidecar::Seen::default();
            let w = Watcher::start(&root, Ignore::default(), seen.clone(), tx).unwrap();
            std::fs::write(root.join("x.wav"), b"x").unwrap();
            assert_eq!(collect(&rx, 1), [WatchEvent::File(root.join("x.wav"))]);
            assert!(!seen.any(), "{how}");
            let side = d.path().join(format!("{how}.json"));
            std::fs::write(&side, b"{}").unwrap();
            if how == "moved in" {
                std::fs::rename(&side, root.join("y.wav.json")).unwrap();
                std::fs::write(root.join("y.wav"), b"x").unwrap();
            } else {
                let sub = d.path().join("sub");
                std::fs::create_dir(&sub).unwrap();
                std::fs::write(sub.join("y.wav"), b"x").unwrap();
                std::fs::rename(&side, sub.join("y.json")).unwrap();
                std::fs::rename(&sub, root.join("sub")).unwrap();
            }
            let got = collect(&rx, 1);
            assert!(matches!(&got[..], [WatchEvent::File(_)]), "{how}: {got:?}");
            // The receiver saw the file after the flag was set.
            assert!(seen.any(), "{how}");
            w.stop();
        }
    }

    /// An inotify storm against a channel of 4 events: the channel never
    /// holds more than its bound, the watcher drops what does not fit and
    /// counts it, and the rescan it owes (sent once there is room) finds
    /// every file the dropped events named.
    #[test]
    fn a_full_channel_drops_events_and_owes_one_rescan_that_finds_them_all() {
        const CAP: usize = 4;
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("drop");
        std::fs::create_dir(&root).unwrap();
        let (tx, rx) = sync_channel(CAP);
        let w = Watcher::start(&root, Ignore::default(), sidecar::Seen::default(), tx).unwrap();
        let want: std::collections::BTreeSet<PathBuf> = (0..200)
            .map(|i| {
                let p = root.join(format!("f{i:03}.wav"));
                std::fs::write(&p, b"x").unwrap();
                p
            })
            .collect();
        // Nothing is taken until the watcher has dropped events.
        let deadline = Instant::now() + Duration::from_secs(30);
        while w.dropped() == 0 {
            assert!(Instant::now() < deadline, "no event was dropped");
            std::thread::sleep(Duration::from_millis(10));
        }
        let held: Vec<WatchEvent> = rx.try_iter().collect();
        assert!(held.len() <= CAP, "{} events held", held.len());
        let mut seen = std::collections::BTreeSet::new();
        let mut rescans = 0;
        let mut take = |ev: WatchEvent, seen: &mut std::collections::BTreeSet<PathBuf>| match ev {
            WatchEvent::File(p) => {
                seen.insert(p);
            }
            WatchEvent::Rescan => {
                rescans += 1;
                seen.extend(scan_tree(&root, &Ignore::default()));
            }
            WatchEvent::Lost(why) => panic!("{why}"),
        };
        for ev in held {
            take(ev, &mut seen);
        }
        while seen != want {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(ev) => take(ev, &mut seen),
                Err(e) => panic!("{e}: {} of {} files seen", seen.len(), want.len()),
            }
        }
        assert!(rescans >= 1, "events were dropped but no rescan came");
        assert!(w.dropped() > 0);
        assert!(
            dropped_total() >= w.dropped(),
            "the process total counts them too"
        );
        w.stop();
    }
}
