//! The thin FUSE layer over [`crate::model::Model`]: each request locks the
//! model, applies one model call and replies. Nothing here decides what is
//! durable; it only maps requests (fsync → `Model::fsync` of the file,
//! fsyncdir → of the directory, setattr with a size → `truncate`, ...).
//!
//! Attributes and entries are cached by the kernel for 0 s, so every lookup
//! reaches the model. Times are fixed per inode (stable across a crash), modes
//! are 0644/0755 and owners are the caller's; chmod/chown/utimes succeed
//! without effect. No writeback cache: every write reaches the model before
//! the `write` call returns, which is what makes "not yet durable" mean
//! "reached the file system, not fsynced".

use std::ffi::OsStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    FileAttr, FileType, Filesystem, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};

use crate::model::{Body, Ino, Model};

const TTL: Duration = Duration::ZERO;

/// The FUSE file system over a shared model.
pub(crate) struct Fs {
    pub(crate) model: Arc<Mutex<Model>>,
}

/// Answers a getattr/setattr with `ino`'s attributes, or ENOENT.
fn reply_attr(m: &Model, ino: Ino, req: &Request<'_>, reply: ReplyAttr) {
    match attr(m, ino, req) {
        Some(a) => reply.attr(&TTL, &a),
        None => reply.error(libc::ENOENT),
    }
}

fn attr(m: &Model, ino: Ino, req: &Request<'_>) -> Option<FileAttr> {
    let (kind, size, perm) = match m.get(ino)? {
        Body::File(b) => (FileType::RegularFile, b.len() as u64, 0o644),
        Body::Dir(_) => (FileType::Directory, 0, 0o755),
    };
    let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000 + ino);
    Some(FileAttr {
        ino,
        size,
        blocks: size.div_ceil(512),
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        kind,
        perm,
        nlink: m.nlink(ino),
        uid: req.uid(),
        gid: req.gid(),
        rdev: 0,
        blksize: 4096,
        flags: 0,
    })
}

impl Fs {
    fn lock(&self) -> std::sync::MutexGuard<'_, Model> {
        // A panic elsewhere poisons the lock; the model is still consistent
        // (each call completes or fails before mutating).
        self.model.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn entry(&self, req: &Request<'_>, r: Result<Ino, i32>, reply: ReplyEntry) {
        let m = self.lock();
        match r.and_then(|ino| attr(&m, ino, req).ok_or(libc::ENOENT)) {
            Ok(a) => reply.entry(&TTL, &a, 0),
            Err(e) => reply.error(e),
        }
    }
}

fn empty(r: Result<(), i32>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl Filesystem for Fs {
    fn lookup(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let r = self.lock().lookup(parent, name);
        self.entry(req, r, reply);
    }

    fn getattr(&mut self, req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        reply_attr(&self.lock(), ino, req, reply);
    }

    fn setattr(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let mut m = self.lock();
        if let Some(len) = size
            && let Err(e) = m.truncate(ino, len)
        {
            return reply.error(e);
        }
        reply_attr(&m, ino, req, reply);
    }

    fn mkdir(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self.lock().create(parent, name, true);
        self.entry(req, r, reply);
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        empty(self.lock().unlink(parent, name, false), reply);
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        empty(self.lock().unlink(parent, name, true), reply);
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        if flags & !libc::RENAME_NOREPLACE != 0 {
            return reply.error(libc::EINVAL); // RENAME_EXCHANGE/WHITEOUT
        }
        let noreplace = flags & libc::RENAME_NOREPLACE != 0;
        empty(
            self.lock()
                .rename(parent, name, newparent, newname, noreplace),
            reply,
        );
    }

    fn link(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = self.lock().link(ino, newparent, newname).map(|()| ino);
        self.entry(req, r, reply);
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        match self.lock().get(ino) {
            Some(_) => reply.opened(0, 0),
            None => reply.error(libc::ENOENT),
        }
    }

    fn create(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let mut m = self.lock();
        match m.create(parent, name, false) {
            Ok(ino) => {
                let a = attr(&m, ino, req).expect("just created");
                reply.created(&TTL, &a, 0, 0, 0);
            }
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        match self.lock().read(ino, offset.max(0) as u64, size as usize) {
            Ok(b) => reply.data(b),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        match self.lock().write(ino, offset.max(0) as u64, data) {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn fsync(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _ds: bool, reply: ReplyEmpty) {
        empty(self.lock().fsync(ino), reply);
    }

    fn fsyncdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _ds: bool, reply: ReplyEmpty) {
        empty(self.lock().fsync(ino), reply);
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        let m = self.lock();
        let Some(Body::Dir(entries)) = m.get(ino) else {
            return reply.error(libc::ENOTDIR);
        };
        let dots = [
            (ino, FileType::Directory, OsStr::new(".")),
            (ino, FileType::Directory, OsStr::new("..")),
        ];
        let rest = entries.iter().map(|(name, &i)| {
            let kind = match m.get(i) {
                Some(Body::Dir(_)) => FileType::Directory,
                _ => FileType::RegularFile,
            };
            (i, kind, name.as_os_str())
        });
        for (k, (i, kind, name)) in dots
            .into_iter()
            .chain(rest)
            .enumerate()
            .skip(offset.max(0) as usize)
        {
            if reply.add(i, k as i64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        // Plenty of room: the model lives in memory.
        reply.statfs(1 << 24, 1 << 23, 1 << 23, 1 << 20, 1 << 19, 4096, 255, 4096);
    }
}
