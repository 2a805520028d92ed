//! The power-loss model as a plain data structure: a live tree, a durable image
//! and, per inode, the operations applied to the live tree but not yet durable.
//!
//! Invariants:
//! - `live` is what processes see; every operation applies to it at once.
//! - `durable` holds, per inode, what survives a power loss: a file's bytes, a
//!   directory's entries. It changes only through [`Model::fsync`] (a file's
//!   pending writes/truncates, or a directory's pending entry changes, all at
//!   once) and never through any other call.
//! - `pending[ino]` is the ordered list of what `live[ino]` has that
//!   `durable[ino]` lacks; `durable` + every pending op == `live` (checked by
//!   the unit tests after every step).
//! - Inodes are never reused within one model; unreachable ones stay until the
//!   next [`Model::crash`] image leaves them out.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};

/// An inode number (1 is the root directory).
pub type Ino = u64;

/// The root directory's inode.
pub const ROOT: Ino = 1;

/// A file's bytes or a directory's entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    File(Vec<u8>),
    Dir(BTreeMap<OsString, Ino>),
}

/// A change applied to the live tree and not yet durable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// File: `data` written at `off`.
    Write { off: u64, data: Vec<u8> },
    /// File: length set to `len`.
    Truncate { len: u64 },
    /// Directory: `name` now names `ino` (replacing what it named).
    Link { name: OsString, ino: Ino },
    /// Directory: `name` removed.
    Unlink { name: OsString },
    /// Directory: `from` renamed to `to` inside the same directory, one atomic step.
    Rename { from: OsString, to: OsString },
}

/// What a crash keeps of the operations that were not durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// Nothing that was not durable survives.
    Whole,
    /// Per inode, a pseudo-random prefix of its pending operations survives,
    /// the first one left out possibly in part (a prefix of a write's bytes);
    /// the seed makes it reproducible.
    Torn { seed: u64 },
}

/// A durability boundary, numbered from 1 in the order they happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Boundary {
    pub n: u64,
    pub what: &'static str,
    /// The inode's last known name (for reports only).
    pub name: OsString,
}

/// Errors as errno values (what FUSE replies with).
pub type Errno = i32;

/// The whole model: see the module doc.
#[derive(Clone, Debug)]
pub struct Model {
    live: HashMap<Ino, Body>,
    durable: HashMap<Ino, Body>,
    pending: HashMap<Ino, Vec<Op>>,
    names: HashMap<Ino, OsString>,
    next: Ino,
    boundaries: u64,
    log: Vec<Boundary>,
    /// Freeze: the crash image taken when boundary `at` completed.
    freeze: Option<(u64, CrashMode)>,
    frozen: Option<Box<Model>>,
}

impl Default for Model {
    fn default() -> Self {
        Model::new()
    }
}

impl Model {
    /// An empty file system: the root directory, durable.
    pub fn new() -> Model {
        let root = Body::Dir(BTreeMap::new());
        Model {
            live: HashMap::from([(ROOT, root.clone())]),
            durable: HashMap::from([(ROOT, root)]),
            pending: HashMap::new(),
            names: HashMap::from([(ROOT, OsString::from("/"))]),
            next: ROOT + 1,
            boundaries: 0,
            log: Vec::new(),
            freeze: None,
            frozen: None,
        }
    }

    /// The live body of `ino`.
    pub fn get(&self, ino: Ino) -> Option<&Body> {
        self.live.get(&ino)
    }

    /// The inode `name` names in directory `dir`.
    pub fn lookup(&self, dir: Ino, name: &OsStr) -> Result<Ino, Errno> {
        match self.live.get(&dir) {
            Some(Body::Dir(e)) => e.get(name).copied().ok_or(libc::ENOENT),
            Some(Body::File(_)) => Err(libc::ENOTDIR),
            None => Err(libc::ENOENT),
        }
    }

    /// How many live directory entries name `ino` (the root counts once).
    pub fn nlink(&self, ino: Ino) -> u32 {
        let n = self
            .live
            .values()
            .filter_map(|b| match b {
                Body::Dir(e) => Some(e.values().filter(|&&i| i == ino).count()),
                Body::File(_) => None,
            })
            .sum::<usize>();
        (n + usize::from(ino == ROOT)) as u32
    }

    /// Durability boundaries so far (fsync, fsyncdir, create, mkdir, link,
    /// unlink, rmdir, rename, truncate).
    pub fn boundaries(&self) -> &[Boundary] {
        &self.log
    }

    /// Takes the crash image (with `mode`) as soon as boundary `at` has
    /// completed; `at == 0` takes it now. Later operations still apply to the
    /// live tree, but the image no longer changes.
    pub fn freeze_at(&mut self, at: u64, mode: CrashMode) {
        self.freeze = Some((at, mode));
        self.frozen = None;
        self.maybe_freeze();
    }

    /// The image taken by [`Model::freeze_at`], once its boundary has passed.
    pub fn frozen(&self) -> Option<&Model> {
        self.frozen.as_deref()
    }

    fn boundary(&mut self, what: &'static str, ino: Ino) {
        self.boundaries += 1;
        let name = self.names.get(&ino).cloned().unwrap_or_default();
        self.log.push(Boundary {
            n: self.boundaries,
            what,
            name,
        });
        self.maybe_freeze();
    }

    fn maybe_freeze(&mut self) {
        if let Some((at, mode)) = self.freeze
            && self.frozen.is_none()
            && self.boundaries >= at
        {
            self.frozen = Some(Box::new(self.crash(mode)));
        }
    }

    fn dir_mut(&mut self, dir: Ino) -> Result<&mut BTreeMap<OsString, Ino>, Errno> {
        match self.live.get_mut(&dir) {
            Some(Body::Dir(e)) => Ok(e),
            Some(Body::File(_)) => Err(libc::ENOTDIR),
            None => Err(libc::ENOENT),
        }
    }

    fn push(&mut self, ino: Ino, op: Op) {
        self.pending.entry(ino).or_default().push(op);
    }

    /// Creates a file (`dir == false`) or directory named `name` in `parent`.
    pub fn create(&mut self, parent: Ino, name: &OsStr, dir: bool) -> Result<Ino, Errno> {
        if self.dir_mut(parent)?.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.next;
        self.next += 1;
        let body = if dir {
            Body::Dir(BTreeMap::new())
        } else {
            Body::File(Vec::new())
        };
        self.live.insert(ino, body.clone());
        self.durable.insert(ino, body);
        self.names.insert(ino, name.to_owned());
        self.dir_mut(parent)?.insert(name.to_owned(), ino);
        let name = name.to_owned();
        self.push(parent, Op::Link { name, ino });
        self.boundary(if dir { "mkdir" } else { "create" }, ino);
        Ok(ino)
    }

    /// A new name `name` in `parent` for the file `ino`.
    pub fn link(&mut self, ino: Ino, parent: Ino, name: &OsStr) -> Result<(), Errno> {
        if matches!(self.live.get(&ino), Some(Body::Dir(_)) | None) {
            return Err(libc::EPERM);
        }
        if self.dir_mut(parent)?.contains_key(name) {
            return Err(libc::EEXIST);
        }
        self.dir_mut(parent)?.insert(name.to_owned(), ino);
        let name = name.to_owned();
        self.push(parent, Op::Link { name, ino });
        self.boundary("link", ino);
        Ok(())
    }

    /// Removes `name` from `parent` (a file with `dir == false`, an empty
    /// directory with `dir == true`).
    pub fn unlink(&mut self, parent: Ino, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let ino = self.lookup(parent, name)?;
        match (self.live.get(&ino), dir) {
            (Some(Body::Dir(e)), true) if !e.is_empty() => return Err(libc::ENOTEMPTY),
            (Some(Body::Dir(_)), false) => return Err(libc::EISDIR),
            (Some(Body::File(_)), true) => return Err(libc::ENOTDIR),
            _ => {}
        }
        self.dir_mut(parent)?.remove(name);
        let name = name.to_owned();
        self.push(parent, Op::Unlink { name });
        self.boundary(if dir { "rmdir" } else { "unlink" }, ino);
        Ok(())
    }

    /// Renames `parent/name` to `newparent/newname`, replacing a file (or an
    /// empty directory) there; `noreplace` fails with EEXIST instead. Atomic in
    /// the live tree; in the same directory also one pending op; across two
    /// directories a `Link` pending in the target and an `Unlink` in the source.
    pub fn rename(
        &mut self,
        parent: Ino,
        name: &OsStr,
        newparent: Ino,
        newname: &OsStr,
        noreplace: bool,
    ) -> Result<(), Errno> {
        let ino = self.lookup(parent, name)?;
        let is_dir = matches!(self.live.get(&ino), Some(Body::Dir(_)));
        if is_dir && self.is_ancestor(ino, newparent) {
            return Err(libc::EINVAL);
        }
        match self.lookup(newparent, newname) {
            Ok(old) if old == ino => return Ok(()),
            Ok(_) if noreplace => return Err(libc::EEXIST),
            Ok(old) => match (self.live.get(&old), is_dir) {
                (Some(Body::Dir(e)), true) if !e.is_empty() => return Err(libc::ENOTEMPTY),
                (Some(Body::Dir(_)), false) => return Err(libc::EISDIR),
                (Some(Body::File(_)), true) => return Err(libc::ENOTDIR),
                _ => {}
            },
            Err(libc::ENOENT) => {}
            Err(e) => return Err(e),
        }
        self.dir_mut(parent)?.remove(name);
        self.dir_mut(newparent)?.insert(newname.to_owned(), ino);
        self.names.insert(ino, newname.to_owned());
        if parent == newparent {
            let (from, to) = (name.to_owned(), newname.to_owned());
            self.push(parent, Op::Rename { from, to });
        } else {
            let link = Op::Link {
                name: newname.to_owned(),
                ino,
            };
            self.push(newparent, link);
            self.push(
                parent,
                Op::Unlink {
                    name: name.to_owned(),
                },
            );
        }
        self.boundary("rename", ino);
        Ok(())
    }

    fn is_ancestor(&self, a: Ino, mut b: Ino) -> bool {
        // Walks up from b by searching parents (small trees only).
        loop {
            if a == b {
                return true;
            }
            let parent = self.live.iter().find_map(|(&p, body)| match body {
                Body::Dir(e) if e.values().any(|&i| i == b) => Some(p),
                _ => None,
            });
            match parent {
                Some(p) if p != b => b = p,
                _ => return false,
            }
        }
    }

    /// Writes `data` at `off` in the file `ino`.
    pub fn write(&mut self, ino: Ino, off: u64, data: &[u8]) -> Result<(), Errno> {
        match self.live.get_mut(&ino) {
            Some(Body::File(b)) => apply_write(b, off, data),
            Some(Body::Dir(_)) => return Err(libc::EISDIR),
            None => return Err(libc::ENOENT),
        }
        let data = data.to_vec();
        self.push(ino, Op::Write { off, data });
        Ok(())
    }

    /// Sets the length of the file `ino`.
    pub fn truncate(&mut self, ino: Ino, len: u64) -> Result<(), Errno> {
        match self.live.get_mut(&ino) {
            Some(Body::File(b)) => b.resize(len as usize, 0),
            Some(Body::Dir(_)) => return Err(libc::EISDIR),
            None => return Err(libc::ENOENT),
        }
        self.push(ino, Op::Truncate { len });
        self.boundary("truncate", ino);
        Ok(())
    }

    /// Reads up to `len` bytes at `off` of the file `ino`.
    pub fn read(&self, ino: Ino, off: u64, len: usize) -> Result<&[u8], Errno> {
        match self.live.get(&ino) {
            Some(Body::File(b)) => {
                let start = (off as usize).min(b.len());
                Ok(&b[start..(start + len).min(b.len())])
            }
            Some(Body::Dir(_)) => Err(libc::EISDIR),
            None => Err(libc::ENOENT),
        }
    }

    /// fsync/fdatasync of a file (its bytes and length) or a directory (its
    /// entries: creates, links, unlinks, renames in it) makes exactly that
    /// inode's pending operations durable.
    pub fn fsync(&mut self, ino: Ino) -> Result<(), Errno> {
        let what = match self.live.get(&ino) {
            Some(Body::File(_)) => "fsync",
            Some(Body::Dir(_)) => "fsyncdir",
            None => return Err(libc::ENOENT),
        };
        if let Some(ops) = self.pending.remove(&ino) {
            self.make_durable(ino, &ops);
        }
        self.boundary(what, ino);
        Ok(())
    }

    /// The file system a power loss now leaves: every inode's durable body
    /// plus, in torn mode, a prefix of its pending operations; only what is
    /// reachable from the root through those entries. Everything is durable
    /// in the result, and its boundary count starts again from 0.
    pub fn crash(&self, mode: CrashMode) -> Model {
        let mut rng = match mode {
            CrashMode::Whole => None,
            CrashMode::Torn { seed } => Some(Rng(seed | 1)),
        };
        let mut image: HashMap<Ino, Body> = HashMap::new();
        let mut inos: Vec<Ino> = self.durable.keys().copied().collect();
        inos.sort_unstable(); // reproducible with one seed
        for ino in inos {
            let mut body = self.durable[&ino].clone();
            if let (Some(rng), Some(ops)) = (rng.as_mut(), self.pending.get(&ino)) {
                let keep = rng.below(ops.len() as u64 + 1) as usize;
                for op in &ops[..keep] {
                    apply(&mut body, op, None);
                }
                if let Some(op @ Op::Write { data, .. }) = ops.get(keep) {
                    let part = rng.below(data.len() as u64 + 1) as usize;
                    apply(&mut body, op, Some(part));
                }
            }
            image.insert(ino, body);
        }
        // Keep what is reachable from the root.
        let mut live = HashMap::new();
        let mut stack = vec![ROOT];
        while let Some(ino) = stack.pop() {
            if live.contains_key(&ino) {
                continue;
            }
            let Some(body) = image.remove(&ino) else {
                continue;
            };
            if let Body::Dir(e) = &body {
                stack.extend(e.values().copied());
            }
            live.insert(ino, body);
        }
        // Drop entries whose inode did not survive (cannot happen with
        // durable-only images, but a torn Link can name any inode).
        let alive: std::collections::HashSet<Ino> = live.keys().copied().collect();
        for body in live.values_mut() {
            if let Body::Dir(e) = body {
                e.retain(|_, i| alive.contains(i));
            }
        }
        let names = self
            .names
            .iter()
            .filter(|(i, _)| alive.contains(i))
            .map(|(&i, n)| (i, n.clone()))
            .collect();
        Model {
            durable: live.clone(),
            live,
            pending: HashMap::new(),
            names,
            next: self.next,
            boundaries: 0,
            log: Vec::new(),
            freeze: None,
            frozen: None,
        }
    }

    /// Applies `ops` (an inode's pending operations, in order) to its
    /// durable body.
    fn make_durable(&mut self, ino: Ino, ops: &[Op]) {
        let d = self
            .durable
            .get_mut(&ino)
            .expect("every inode has a durable body");
        for op in ops {
            apply(d, op, None);
        }
    }

    /// Makes everything durable and starts counting boundaries from 0 again
    /// (set-up before a run: the inputs are on disk).
    pub fn settle(&mut self) {
        for (ino, ops) in std::mem::take(&mut self.pending) {
            self.make_durable(ino, &ops);
        }
        self.boundaries = 0;
        self.log.clear();
        self.freeze = None;
        self.frozen = None;
    }

    /// Checks `durable` + pending == `live` for every inode (tests).
    pub fn check(&self) -> Result<(), String> {
        for (ino, body) in &self.live {
            let mut d = self.durable.get(ino).cloned().ok_or("no durable body")?;
            for op in self.pending.get(ino).into_iter().flatten() {
                apply(&mut d, op, None);
            }
            if &d != body {
                return Err(format!("inode {ino}: durable + pending != live"));
            }
        }
        Ok(())
    }
}

fn apply_write(b: &mut Vec<u8>, off: u64, data: &[u8]) {
    let off = off as usize;
    if b.len() < off + data.len() {
        b.resize(off + data.len(), 0);
    }
    b[off..off + data.len()].copy_from_slice(data);
}

/// Applies `op` to `body`; `part` limits a write to a prefix of its bytes.
fn apply(body: &mut Body, op: &Op, part: Option<usize>) {
    match (body, op) {
        (Body::File(b), Op::Write { off, data }) => {
            let n = part.unwrap_or(data.len()).min(data.len());
            apply_write(b, *off, &data[..n]);
        }
        (Body::File(b), Op::Truncate { len }) => b.resize(*len as usize, 0),
        (Body::Dir(e), Op::Link { name, ino }) => {
            e.insert(name.clone(), *ino);
        }
        (Body::Dir(e), Op::Unlink { name }) => {
            e.remove(name);
        }
        (Body::Dir(e), Op::Rename { from, to }) => {
            if let Some(ino) = e.remove(from) {
                e.insert(to.clone(), ino);
            }
        }
        _ => unreachable!("ops are logged on inodes of their kind"),
    }
}

/// xorshift64: reproducible torn crashes without a dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
