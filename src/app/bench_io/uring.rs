//! Adapter from the benchmark to the io_uring reader engine
//! ([`crate::reader::uring::UringEngine`]).
//!
//! One engine on the calling thread, over one partition of a fresh arena of
//! `queue_depth` × (largest file, page-rounded, plus a page), at least 64 MiB
//! and at most 1 GiB (never less than one file). Each file's extent is dropped
//! inside `done`, so the arena is never what limits the pass. Latency is the
//! engine's submit → complete time per file. Ring and arena set-up (mapping,
//! buffer registration) happen before the clock starts.

use std::io;
use std::time::Instant;

use super::{FileEntry, Measured};
use crate::reader::arena::Arena;
use crate::reader::uring::{ProbeError, SetupError, UringEngine, UringOptions, probe};

const PAGE: u64 = 4096;
const MIN_ARENA: u64 = 64 << 20;
const MAX_ARENA: u64 = 1 << 30;

/// Why a uring pass could not run to the end.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The arena or the ring could not be set up.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The ring failed during the pass (the files read so far are lost).
    #[error("the ring failed mid-pass: {0}")]
    MidPass(#[source] io::Error),
}

/// Whether the engine can run here; the reason when it cannot.
pub fn available() -> Result<(), ProbeError> {
    probe().map(|_| ())
}

/// Arena bytes for `files` with `queue_depth` in flight.
fn arena_bytes(files: &[FileEntry], queue_depth: usize) -> u64 {
    let largest = files.iter().map(|f| f.size).max().unwrap_or(0);
    let need = largest.div_ceil(PAGE) * PAGE + PAGE;
    (need * queue_depth as u64)
        .clamp(MIN_ARENA, MAX_ARENA)
        .max(need)
}

/// One pass over `files` with `queue_depth` files in flight.
pub fn run(files: &[FileEntry], direct: bool, queue_depth: usize) -> Result<Measured, Error> {
    let bytes = arena_bytes(files, queue_depth);
    let arena = Arena::new(bytes, 1).map_err(SetupError::from)?;
    let opts = UringOptions {
        queue_depth,
        direct,
        max_file_bytes: bytes,
    };
    let mut engine = UringEngine::new(&opts, arena.part(0))?;
    let mut m = Measured::default();
    let mut cursor = files.iter().enumerate();
    let next = || cursor.next().map(|(i, f)| (i, f.path.as_path()));
    let start = Instant::now();
    let stats = engine.run(next, |job, res, latency| {
        match res {
            Ok(b) => {
                m.files += 1;
                m.bytes += b.len() as u64;
                m.latencies_ns.push(latency.as_nanos() as u64);
            }
            Err(e) => m.error(&files[job].path, e),
        }
        true
    });
    m.elapsed = start.elapsed();
    let stats = stats.map_err(Error::MidPass)?;
    m.buffered_fallbacks = stats.buffered_fallbacks;
    Ok(m)
}
