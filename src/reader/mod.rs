//! The reader stage: loads whole files — or a job's byte range behind a
//! prefix ([`ReadRange`], a manifest's segment) — into memory for compute.
//!
//! Engines share one contract: every job index is pushed exactly once onto the
//! `loaded` ring as a [`Loaded`], carrying either the file's bytes
//! ([`FileBytes`]) or the reason they could not be read ([`Error`]). A per-file
//! failure is data, not a failure of the stage. When the last reader thread
//! has pushed its last job, it closes the ring.
//!
//! * [`stage`]: the stage every command starts — engine choice and fallback,
//!   arena, threads placed by `io.pin`, jobs in from a ring, [`Loaded`] out.
//! * [`std_engine`]: `open` + `fstat` + `read` per file (a range: `pread`)
//!   into recycled heap buffers.
//! * [`uring`]: one io_uring per reader thread; OPENAT → STATX → READ_FIXED →
//!   CLOSE per file (a range: its blocks only, the prefix placed in front),
//!   all through the ring, into the registered [`arena`].
//!   Bytes travel as [`FileBytes::Arena`] extents that free themselves on drop.

pub mod arena;
pub mod cache;
pub mod stage;
pub mod std_engine;
pub mod uring;

pub use stage::{ReadJob, ReadRange, ReaderStage};
pub use std_engine::{open_regular, read_file, read_range};

/// Why one file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot open: {0}")]
    Open(std::io::Error),
    #[error("cannot stat: {0}")]
    Stat(std::io::Error),
    #[error("not a regular file but {0}; only regular files are read")]
    NotAFile(FileKind),
    #[error("file is {size} bytes, larger than io.max_file_bytes = {limit}")]
    TooLarge { size: u64, limit: u64 },
    #[error("read failed: {0}")]
    Read(std::io::Error),
    #[error("file changed size while being read: {expected} bytes at open, {got} read")]
    SizeChanged { expected: u64, got: u64 },
    #[error(
        "file needs {need} bytes of read arena, but one reader's share of io.arena_bytes is \
         {capacity} bytes"
    )]
    ArenaTooSmall { need: u64, capacity: u64 },
}

/// What a path that is not a regular file is, as a rejection names it.
/// Found with `stat`/`statx`, which never blocks: a FIFO is opened only with
/// `O_NONBLOCK` (the engines) or not at all (the manifest planner), so a
/// pipe with no writer cannot hang a reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    Directory,
    Fifo,
    CharDevice,
    BlockDevice,
    Socket,
    Symlink,
    Unknown,
}

impl FileKind {
    /// The kind of `st_mode`/`stx_mode` bits `mode` (None: a regular file).
    pub fn of_mode(mode: u32) -> Option<FileKind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => return None,
            libc::S_IFDIR => FileKind::Directory,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFCHR => FileKind::CharDevice,
            libc::S_IFBLK => FileKind::BlockDevice,
            libc::S_IFSOCK => FileKind::Socket,
            libc::S_IFLNK => FileKind::Symlink,
            _ => FileKind::Unknown,
        })
    }

    /// The kind of `meta` (None: a regular file).
    pub fn of(meta: &std::fs::Metadata) -> Option<FileKind> {
        use std::os::unix::fs::MetadataExt;
        FileKind::of_mode(meta.mode())
    }
}

impl std::fmt::Display for FileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FileKind::Directory => "a directory",
            FileKind::Fifo => "a FIFO (named pipe)",
            FileKind::CharDevice => "a character device",
            FileKind::BlockDevice => "a block device",
            FileKind::Socket => "a socket",
            FileKind::Symlink => "a symbolic link",
            FileKind::Unknown => "a file of unknown type",
        })
    }
}

/// The bytes of one loaded file. Dereferences to exactly the file's bytes.
#[derive(Debug)]
pub enum FileBytes {
    /// A heap buffer; hand it back to the reader's free queue when done.
    Heap(Vec<u8>),
    /// A range of the registered read arena; dropping it frees the range.
    Arena(arena::Extent),
}

impl std::ops::Deref for FileBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            FileBytes::Heap(v) => v,
            FileBytes::Arena(e) => e,
        }
    }
}

/// One file's bytes (or why there are none), addressed by job index.
#[derive(Debug)]
pub struct Loaded {
    /// Index into the job list the reader was started with.
    pub job: usize,
    pub bytes: Result<FileBytes, Error>,
    /// The job's segment (`ReadJob::segment`), for the decoder.
    pub segment: Option<crate::model::Segment>,
}
