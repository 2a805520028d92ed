//! Engine `uring`: every file's whole life goes through io_uring.
//!
//! Each reader thread owns one [`UringEngine`]: its own ring, its own
//! partition of the registered [`Arena`](crate::reader::arena::Arena), and
//! `io.queue_depth` direct-descriptor slots. Per file it submits OPENAT
//! (O_DIRECT|O_NOATIME, straight into a fixed slot) linked to STATX, then
//! READ_FIXED into an arena extent hard-linked to CLOSE (a ranged job: the
//! blocks around its range, its prefix placed in front) — so a build makes no
//! per-file `openat`/`read`/`close` syscalls, only batched `io_uring_enter`s.
//! Per-file fallbacks (O_NOATIME refused, O_DIRECT refused, short reads) and
//! the state machine are described in [`engine`].
//!
//! [`probe`] checks at start-up that the kernel and any seccomp filter allow
//! all of this, and says exactly what is missing when not.

mod engine;
mod probe;
mod slot;
#[cfg(test)]
mod tests;

use std::time::Duration;

pub use engine::{Next, UringEngine};
pub use probe::{ProbeError, ProbeReport, probe};

use super::arena::ArenaError;
use super::cache::ReadMode;
use crate::config::IoConfig;

/// Per-engine settings (from `[io]`).
#[derive(Clone, Debug)]
pub struct UringOptions {
    /// Files in flight per thread (also the number of fixed-file slots).
    pub queue_depth: usize,
    /// Open with O_DIRECT (per-file buffered fallback where refused).
    pub direct: bool,
    /// Larger files are rejected after STATX, without being read.
    pub max_file_bytes: u64,
}

impl UringOptions {
    /// `[io]`'s settings with the run's read mode (`reader::cache`).
    pub fn new(c: &IoConfig, read: &ReadMode) -> Self {
        UringOptions {
            queue_depth: c.queue_depth,
            direct: read.direct,
            max_file_bytes: c.max_file_bytes,
        }
    }
}

/// What one [`UringEngine::run`] did.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct RunStats {
    pub files_ok: u64,
    pub files_rejected: u64,
    /// Bytes delivered (file sizes, or a range's length without its prefix;
    /// not aligned read lengths).
    pub bytes: u64,
    /// Opens retried without O_NOATIME (EPERM: not the owner).
    pub noatime_retries: u64,
    /// Files read buffered because O_DIRECT was refused (EINVAL).
    pub buffered_fallbacks: u64,
    /// Reads that returned less than the file and were resumed.
    pub short_reads: u64,
    /// CLOSEs that failed (the descriptor slot is freed regardless).
    pub close_errors: u64,
    /// Times the loop slept because the arena was full and nothing was in flight.
    pub arena_waits: u64,
    /// Files read into a spill extent (larger than a quarter of the arena share).
    pub spills: u64,
    /// Reads (including resumed ones) into registered buffers (READ_FIXED);
    /// the rest went plain: spills, and the reads of the partition's first
    /// lap, before it was registered.
    pub fixed_reads: u64,
    /// Wall time of the run.
    pub wall: Duration,
    /// Time spent inside the `done` callback (e.g. blocked on a full ring).
    pub blocked_in_done: Duration,
}

impl RunStats {
    /// Wall time minus time blocked in the callback: the reader's busy time.
    pub fn busy(&self) -> Duration {
        self.wall.saturating_sub(self.blocked_in_done)
    }
}

/// Why the ring engine could not start.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Arena(#[from] ArenaError),
    #[error("cannot create an io_uring with {entries} entries: {source}")]
    Ring {
        entries: u32,
        source: std::io::Error,
    },
    #[error(
        "cannot register the {bytes}-byte read arena with io_uring: {source} (ENOMEM here \
         usually means RLIMIT_MEMLOCK is too small: raise `ulimit -l` or LimitMEMLOCK=)"
    )]
    RegisterBuffers { bytes: u64, source: std::io::Error },
    #[error("cannot register io_uring direct-descriptor slots: {0}")]
    RegisterFiles(std::io::Error),
}
