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
pub use std_engine::{read_file, read_range};

/// Why one file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot open: {0}")]
    Open(std::io::Error),
    #[error("cannot stat: {0}")]
    Stat(std::io::Error),
    #[error("not a regular file")]
    NotAFile,
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
