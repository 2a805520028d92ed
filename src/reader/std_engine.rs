//! Engine `std`: plain blocking reads on dedicated threads.
//!
//! `io.threads` threads take jobs from a shared
//! cursor in job order, `open` + `fstat` + `read` each file into a recycled
//! buffer, and push a [`Loaded`] handle onto the compute ring. The ring's
//! capacity (`io.queue_depth`) bounds the bytes held in memory. Buffers come
//! back from compute through the `free` queue, so steady state allocates
//! nothing.
//!
//! A per-file failure (vanished, unreadable, not a regular file, larger than
//! `io.max_file_bytes`) is not an error of the stage: it travels down the ring
//! as a [`Loaded`] with a reason, and becomes a rejection line.

use std::fs::File;
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;

use crossbeam_queue::ArrayQueue;

use super::{Error, FileBytes, Loaded};
use crate::config::IoConfig;
use crate::runtime::ring::Ring;
use crate::runtime::telemetry::{Local, Stage, Telemetry};
use crate::source::Job;

/// Reads one file into `buf` (cleared first), enforcing the size limit.
pub fn read_file(path: &std::path::Path, limit: u64, buf: &mut Vec<u8>) -> Result<(), Error> {
    buf.clear();
    let mut f = File::open(path).map_err(Error::Open)?;
    let meta = f.metadata().map_err(Error::Stat)?;
    if !meta.is_file() {
        return Err(Error::NotAFile);
    }
    let size = meta.len();
    if size > limit {
        return Err(Error::TooLarge { size, limit });
    }
    buf.reserve(size as usize);
    // Read at most one byte past the stat size, so a growing file is noticed
    // without reading an unbounded amount.
    let got = (&mut f)
        .take(size + 1)
        .read_to_end(buf)
        .map_err(Error::Read)? as u64;
    if got != size {
        return Err(Error::SizeChanged {
            expected: size,
            got,
        });
    }
    Ok(())
}

/// Running reader threads.
pub struct Readers {
    threads: Vec<JoinHandle<()>>,
}

impl Readers {
    /// Wraps reader threads started by another engine.
    pub(crate) fn from_threads(threads: Vec<JoinHandle<()>>) -> Readers {
        Readers { threads }
    }

    /// Starts `cfg.threads` std-engine readers over `jobs`. When every job has
    /// been pushed, the last reader to finish closes `out`.
    /// Starts `cfg.threads` readers; thread `i` is pinned to `cpus[i]` when
    /// given (a failed pin is logged and the thread runs unpinned).
    pub fn start(
        cfg: &IoConfig,
        cpus: &[Option<usize>],
        jobs: Arc<[Job]>,
        out: Arc<Ring<Loaded>>,
        free: Arc<ArrayQueue<Vec<u8>>>,
        telemetry: Arc<Telemetry>,
    ) -> std::io::Result<Readers> {
        let cursor = Arc::new(AtomicUsize::new(0));
        let running = Arc::new(AtomicUsize::new(cfg.threads));
        let limit = cfg.max_file_bytes;
        let mut threads = Vec::with_capacity(cfg.threads);
        for i in 0..cfg.threads {
            let cpu = cpus.get(i).copied().flatten();
            let (jobs, out, free, telemetry, cursor, running) = (
                Arc::clone(&jobs),
                Arc::clone(&out),
                Arc::clone(&free),
                Arc::clone(&telemetry),
                Arc::clone(&cursor),
                Arc::clone(&running),
            );
            threads.push(
                std::thread::Builder::new()
                    .name(format!("reader-{i}"))
                    .spawn(move || {
                        crate::runtime::pin::pin_or_warn(cpu, &format!("Reader {i}"));
                        let mut local = Local::default();
                        loop {
                            let job = cursor.fetch_add(1, Ordering::Relaxed);
                            let Some(j) = jobs.get(job) else { break };
                            let mut buf = free.pop().unwrap_or_default();
                            let res =
                                local.time(Stage::Read, || read_file(&j.path, limit, &mut buf));
                            let bytes = res.map(|()| {
                                local.add_bytes(buf.len() as u64);
                                FileBytes::Heap(buf)
                            });
                            if out.push(Loaded { job, bytes }).is_err() {
                                break; // downstream shut down early
                            }
                        }
                        local.publish(&telemetry);
                        if running.fetch_sub(1, Ordering::AcqRel) == 1 {
                            out.close();
                        }
                    })?,
            );
        }
        Ok(Readers { threads })
    }

    /// Waits for every reader thread; a panicked reader is reported.
    pub fn join(self) -> Result<(), String> {
        for t in self.threads {
            t.join()
                .map_err(|_| "a reader thread panicked".to_string())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_file_reasons() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.wav");
        std::fs::write(&p, vec![7u8; 100]).unwrap();
        let mut buf = vec![1, 2, 3];
        read_file(&p, 100, &mut buf).unwrap();
        assert_eq!(buf, vec![7u8; 100]);
        let e = read_file(&p, 99, &mut buf).unwrap_err();
        assert_eq!(
            e.to_string(),
            "file is 100 bytes, larger than io.max_file_bytes = 99"
        );
        let e = read_file(&d.path().join("gone.wav"), 100, &mut buf).unwrap_err();
        assert!(e.to_string().starts_with("cannot open: "), "{e}");
        let e = read_file(d.path(), 100, &mut buf).unwrap_err();
        assert!(matches!(e, Error::NotAFile | Error::Read(_)), "{e}");
    }
}
