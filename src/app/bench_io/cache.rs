//! Page-cache control between passes.
//!
//! * Cold: one `syncfs` on the corpus's filesystem (dirty pages cannot be
//!   dropped, and a freshly written corpus is dirty), then per file `open` +
//!   `posix_fadvise(DONTNEED)` + `close`. With `--drop-caches`, running as
//!   root, also `sync` and `3` into `/proc/sys/vm/drop_caches`, which drops
//!   dentries and inodes too.
//! * Warm: every file read once, buffered.
//!
//! Failures here never stop the benchmark: they become one warning each
//! (with a count), reported at the end.

use std::fs::File;
use std::os::fd::AsFd;

use super::FileEntry;
use crate::runtime::sys;

/// Eviction / warming with sticky, de-duplicated warnings.
pub struct CacheControl {
    drop_caches: bool,
    drop_failed: Option<String>,
    fadvise_failures: u64,
    first_fadvise_failure: Option<String>,
    warm_failures: u64,
}

impl CacheControl {
    pub fn new(drop_caches: bool) -> Self {
        CacheControl {
            drop_caches,
            drop_failed: None,
            fadvise_failures: 0,
            first_fadvise_failure: None,
            warm_failures: 0,
        }
    }

    /// Evicts every file from the page cache (best effort).
    pub fn evict(&mut self, files: &[FileEntry]) {
        if let Some(first) = files.first()
            && let Ok(f) = File::open(&first.path)
        {
            // Best effort: a failure only leaves dirty pages the kernel keeps.
            let _ = sys::syncfs(f.as_fd());
        }
        if self.drop_caches
            && self.drop_failed.is_none()
            && let Err(why) = drop_caches()
        {
            self.drop_failed = Some(why);
        }
        for f in files {
            if let Err(e) = fadvise_dontneed(f) {
                self.fadvise_failures += 1;
                if self.first_fadvise_failure.is_none() {
                    self.first_fadvise_failure = Some(format!("{}: {e}", f.path.display()));
                }
            }
        }
    }

    /// Reads every file once through the page cache.
    pub fn warm(&mut self, files: &[FileEntry]) {
        let mut buf = Vec::new();
        for f in files {
            if crate::reader::read_file(&f.path, u64::MAX, &mut buf).is_err() {
                self.warm_failures += 1;
            }
        }
    }

    /// Sentences for whatever went wrong, once each.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if let Some(why) = &self.drop_failed {
            w.push(format!(
                "Could not drop the kernel caches ({why}); cold passes used posix_fadvise only."
            ));
        }
        if let Some(first) = &self.first_fadvise_failure {
            w.push(format!(
                "Could not evict {} file(s) from the page cache (first: {first}).",
                self.fadvise_failures
            ));
        }
        if self.warm_failures > 0 {
            w.push(format!(
                "{} file(s) could not be read while warming the cache.",
                self.warm_failures
            ));
        }
        w
    }
}

fn fadvise_dontneed(f: &FileEntry) -> std::io::Result<()> {
    let file = File::open(&f.path)?;
    sys::fadvise_dontneed(file.as_fd())
}

/// `sync; echo 3 > /proc/sys/vm/drop_caches`.
fn drop_caches() -> Result<(), String> {
    if sys::effective_uid() != 0 {
        return Err("not running as root".into());
    }
    sys::sync();
    std::fs::write("/proc/sys/vm/drop_caches", b"3")
        .map_err(|e| format!("cannot write /proc/sys/vm/drop_caches: {e}"))
}
