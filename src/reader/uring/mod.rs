//! Engine `uring`: every file's whole life goes through io_uring.
//!
//! Each reader thread owns one [`UringEngine`]: its own ring, its own
//! partition of the registered [`Arena`](crate::reader::arena::Arena), and
//! `io.queue_depth` direct-descriptor slots. Per file it submits OPENAT
//! (O_DIRECT|O_NOATIME, straight into a fixed slot) linked to STATX, then
//! READ_FIXED into an arena extent hard-linked to CLOSE — so a build makes no
//! per-file `openat`/`read`/`close` syscalls, only batched `io_uring_enter`s.
//! Per-file fallbacks (O_NOATIME refused, O_DIRECT refused, short reads) and
//! the state machine are described in [`engine`].
//!
//! [`probe`] checks at start-up that the kernel and any seccomp filter allow
//! all of this, and says exactly what is missing when not.

mod engine;
mod probe;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

pub use engine::UringEngine;
pub use probe::{ProbeReport, probe};

use super::arena::{Arena, ArenaError};
use super::{FileBytes, Loaded, Readers};
use crate::config::IoConfig;
use crate::runtime::ring::Ring;
use crate::runtime::telemetry::{Local, Stage, Telemetry};
use crate::source::Job;

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

impl From<&IoConfig> for UringOptions {
    fn from(c: &IoConfig) -> Self {
        UringOptions {
            queue_depth: c.queue_depth,
            direct: c.direct,
            max_file_bytes: c.max_file_bytes,
        }
    }
}

/// What one [`UringEngine::run`] did.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct RunStats {
    pub files_ok: u64,
    pub files_rejected: u64,
    /// Bytes delivered (file sizes, not aligned read lengths).
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
    /// CQEs that matched no busy slot (should stay 0).
    pub stray_cqes: u64,
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
    #[error("io_uring is unusable here: {0}")]
    Unsupported(String),
    #[error(transparent)]
    Arena(#[from] ArenaError),
    #[error("the read arena has {parts} partition(s) but {threads} reader thread(s) need one each")]
    Parts { parts: usize, threads: usize },
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
    #[error("cannot start a reader thread: {0}")]
    Spawn(std::io::Error),
}

/// Starts `cfg.threads` ring-engine readers over `jobs`, with an arena of
/// `cfg.arena_bytes` split between them; see [`start_readers_in`].
pub fn start_readers(
    cfg: &IoConfig,
    cpus: &[Option<usize>],
    jobs: Arc<[Job]>,
    out: Arc<Ring<Loaded>>,
    telemetry: Arc<Telemetry>,
) -> Result<Readers, SetupError> {
    let arena = Arena::new(cfg.arena_bytes, cfg.threads)?;
    start_readers_in(&arena, cfg, cpus, jobs, out, telemetry)
}

/// Starts `cfg.threads` readers (thread `i` pinned to `cpus[i]` when given)
/// reading into partition `i` of `arena`. They share a job cursor and push one
/// [`Loaded`] per job onto `out`; the last to finish closes it. Ring set-up
/// errors surface here, before any thread starts. If a ring fails mid-run,
/// its in-flight files are pushed as read errors and that thread reads the
/// rest of its jobs with plain `read` (logged).
pub fn start_readers_in(
    arena: &Arc<Arena>,
    cfg: &IoConfig,
    cpus: &[Option<usize>],
    jobs: Arc<[Job]>,
    out: Arc<Ring<Loaded>>,
    telemetry: Arc<Telemetry>,
) -> Result<Readers, SetupError> {
    let threads = cfg.threads.max(1);
    if arena.parts() < threads {
        return Err(SetupError::Parts {
            parts: arena.parts(),
            threads,
        });
    }
    let opts = UringOptions::from(cfg);
    let engines = (0..threads)
        .map(|i| UringEngine::new(&opts, arena.part(i)))
        .collect::<Result<Vec<_>, _>>()?;
    let cursor = Arc::new(AtomicUsize::new(0));
    let running = Arc::new(AtomicUsize::new(threads));
    let mut handles = Vec::with_capacity(threads);
    for (i, mut engine) in engines.into_iter().enumerate() {
        let cpu = cpus.get(i).copied().flatten();
        let (jobs, ring, telemetry, cursor, running) = (
            Arc::clone(&jobs),
            Arc::clone(&out),
            Arc::clone(&telemetry),
            Arc::clone(&cursor),
            Arc::clone(&running),
        );
        let limit = cfg.max_file_bytes;
        let spawned = std::thread::Builder::new()
            .name(format!("reader-{i}"))
            .spawn(move || {
                crate::runtime::pin::pin_or_warn(cpu, &format!("Reader {i}"));
                let mut local = Local::default();
                let next = || {
                    let job = cursor.fetch_add(1, Ordering::Relaxed);
                    jobs.get(job).map(|j| (job, j.path.as_path()))
                };
                let done = |job, bytes, _latency| ring.push(Loaded { job, bytes }).is_ok();
                match engine.run(next, done) {
                    Ok(stats) => {
                        // Busy = the loop's wall time less time blocked handing
                        // files downstream.
                        local.add_busy(Stage::Read, stats.wall.saturating_sub(stats.blocked_in_done));
                        local.add_bytes(stats.bytes);
                        if stats.buffered_fallbacks + stats.noatime_retries > 0 {
                            tracing::info!(
                                "Reader {i}: {} file(s) read buffered (O_DIRECT refused), {} opened \
                                 without O_NOATIME (not the owner).",
                                stats.buffered_fallbacks,
                                stats.noatime_retries
                            );
                        }
                    }
                    Err(e) => {
                        tracing::error!(
                            "Reader {i}'s io_uring failed ({e}); it reads its remaining files \
                             with plain read()."
                        );
                        let mut buf = Vec::new();
                        loop {
                            let job = cursor.fetch_add(1, Ordering::Relaxed);
                            let Some(j) = jobs.get(job) else { break };
                            let r = local
                                .time(Stage::Read, || super::read_file(&j.path, limit, &mut buf));
                            let bytes = r.map(|()| {
                                local.add_bytes(buf.len() as u64);
                                FileBytes::Heap(std::mem::take(&mut buf))
                            });
                            if ring.push(Loaded { job, bytes }).is_err() {
                                break;
                            }
                        }
                    }
                }
                local.publish(&telemetry);
                if running.fetch_sub(1, Ordering::AcqRel) == 1 {
                    ring.close();
                }
            });
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => {
                // Threads already started finish their jobs; the ring is closed
                // so the caller's consumers end.
                out.close();
                return Err(SetupError::Spawn(e));
            }
        }
    }
    Ok(Readers::from_threads(handles))
}
