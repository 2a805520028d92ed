//! powerfs: a test-only FUSE file system that simulates power loss.
//!
//! Never part of melforge's release binary: it is a dev-dependency of the
//! integration tests (`tests/it/powerloss/`), pure Rust (the `fuser` crate with
//! no libfuse), and mounts with mount(2), so it needs root and `/dev/fuse`
//! ([`available`] says why not where it cannot run).
//!
//! # The rules (what survives a power loss)
//! The whole tree lives in memory ([`model::Model`]) in two layers: the live
//! view processes see, and the durable image a power loss leaves.
//! - Every write, truncate, create, mkdir, link, unlink, rmdir and rename
//!   applies to the live view at once and is logged as pending on the inode
//!   it changes: data ops (write, truncate) on the file, name ops (create,
//!   link, unlink, rename) on the directory holding the name.
//! - `fsync`/`fdatasync` of a file makes its pending data ops durable: its
//!   bytes and length. Not its name: a new file whose directory was never
//!   fsynced is gone after a crash, even if the file itself was fsynced.
//! - `fsync` of a directory makes its pending name ops durable: creates,
//!   links, unlinks and renames in it. Not the data of the files it names: a
//!   durable name whose file was never fsynced comes back empty.
//! - A rename inside one directory is one atomic op (the old or the new name,
//!   never both nor neither). A rename across two directories is a link in the
//!   target and an unlink in the source, each durable with its own directory
//!   (fsync only the target and the file has both names after a crash).
//! - `close`, `flush`, `sync(2)` and `syncfs(2)` make nothing durable (FUSE
//!   passes no syncfs to the file system).
//! - A crash ([`model::Model::crash`]) keeps, per inode, the durable body; in
//!   [`CrashMode::Torn`] also a pseudo-random prefix of its pending ops, the
//!   first one left out possibly in part (a prefix of a write's bytes), so a
//!   torn image is always one the ops could have produced in their order on
//!   that inode. Only what is reachable from the root survives.
//!
//! # Crash points
//! Each durability boundary (fsync, fsyncdir, create, mkdir, link, unlink,
//! rmdir, rename, truncate) is numbered from 1 in a log. [`PowerFs::freeze_at`]
//! makes the model take the crash image the moment boundary `k` completes;
//! the program keeps running on the live view (its later fsyncs no longer
//! matter), the harness kills it, calls [`PowerFs::power_loss`] (unmount, the
//! image) and mounts the image again with [`PowerFs::mount`].

pub mod model;

mod fuse;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub use model::{Boundary, CrashMode, Model};

/// Whether this process can mount powerfs here, or why not.
pub fn available() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("powerfs mounts with mount(2), which needs root".into());
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map(drop)
        .map_err(|e| format!("cannot open /dev/fuse: {e}"))
}

/// A mounted powerfs: unmounted (lazily) on drop.
pub struct PowerFs {
    model: Arc<Mutex<Model>>,
    session: Option<fuser::BackgroundSession>,
    mountpoint: PathBuf,
}

impl PowerFs {
    /// Mounts `model` at `mountpoint` (an existing empty directory).
    pub fn mount(mountpoint: &Path, model: Model) -> std::io::Result<PowerFs> {
        let model = Arc::new(Mutex::new(model));
        let fs = fuse::Fs {
            model: Arc::clone(&model),
        };
        let opts = [
            fuser::MountOption::FSName("powerfs".into()),
            fuser::MountOption::RW,
        ];
        let session = fuser::spawn_mount2(fs, mountpoint, &opts)?;
        Ok(PowerFs {
            model,
            session: Some(session),
            mountpoint: mountpoint.to_path_buf(),
        })
    }

    /// Runs `f` on the model (for set-up and inspection).
    pub fn with<R>(&self, f: impl FnOnce(&mut Model) -> R) -> R {
        f(&mut self.model.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// See [`Model::freeze_at`].
    pub fn freeze_at(&self, at: u64, mode: CrashMode) {
        self.with(|m| m.freeze_at(at, mode));
    }

    /// Whether a frozen image has been taken.
    pub fn frozen(&self) -> bool {
        self.with(|m| m.frozen().is_some())
    }

    /// The power loss: unmounts (processes using the mount must be dead) and
    /// returns what survives: the frozen image if one was taken, else the crash
    /// image of the current state with `mode`.
    pub fn power_loss(mut self, mode: CrashMode) -> Model {
        self.unmount();
        self.with(|m| m.frozen().cloned().unwrap_or_else(|| m.crash(mode)))
    }

    fn unmount(&mut self) {
        if let Some(session) = self.session.take() {
            if let Ok(c) = std::ffi::CString::new(self.mountpoint.as_os_str().as_encoded_bytes()) {
                // SAFETY: `c` is a valid NUL-terminated path for the call's duration.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
            // The session thread ends once the kernel drops the connection;
            // the mount guard dropped here sees the file system unmounted.
            let fuser::BackgroundSession { guard, .. } = session;
            let _ = guard.join();
        }
    }
}

impl Drop for PowerFs {
    fn drop(&mut self) {
        self.unmount();
    }
}
