//! The reader stage as every command starts it: engine choice (io_uring with
//! its start-up probe, or plain reads where the probe fails and `io.fallback`
//! allows), the registered arena, `io.threads` threads placed by `io.pin`.
//!
//! Input is a ring of [`ReadJob`]s that the command's source fills (a sorted
//! walk for `build`, the inotify loop for `serve`) and closes at the end of its
//! stream; output is one [`Loaded`] per job on the `loaded` ring, through a
//! [`Producer`] guard per thread, so the ring closes when the last reader ends
//! — however it ends.
//!
//! The ring engine reads in runs: a thread blocks for one job, then keeps up
//! to `io.queue_depth` files in flight, taking new jobs as slots free up; a
//! momentarily empty queue does not end the run while files are in flight
//! (`Next::Later`), so a source that falls behind never drains the ring. The
//! thread goes back to blocking only when nothing is queued or in flight.
//! A job with a byte range goes through the same ring ([`Next::Range`]); the
//! std engine reads it with one `pread`. A ring that fails mid-run hands
//! its in-flight files on as read errors and its thread reads the rest of its
//! jobs with plain `read()` (logged).

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_queue::ArrayQueue;

use super::arena::Arena;
use super::cache::ReadMode;
use super::uring::{self, Next, SetupError, UringEngine, UringOptions};
use super::{FileBytes, Loaded, read_file, read_range};
use crate::config::{Engine, IoConfig};
use crate::model::Segment;
use crate::runtime::ring::{Producer, Ring};
use crate::runtime::telemetry::{Local, Stage, Telemetry};

/// One file for the readers: the source's id for it and where it is.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadJob {
    pub id: usize,
    pub path: PathBuf,
    /// The part of the file the row stands for (a manifest's segment),
    /// handed on with the bytes to the decoder; None: the whole file.
    pub segment: Option<Segment>,
    /// Read only these bytes instead of the whole file.
    pub range: Option<ReadRange>,
}

impl ReadJob {
    /// A whole file.
    pub fn whole(id: usize, path: PathBuf) -> ReadJob {
        ReadJob {
            id,
            path,
            segment: None,
            range: None,
        }
    }
}

/// Part of a file to read instead of all of it: the bytes delivered are
/// `prefix` followed by the file's `len` bytes at `start` (a WAV header the
/// source rewrote for the segment, then the segment's samples). A file
/// shorter than `start + len` is a read error (it changed since it was
/// planned).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadRange {
    pub prefix: Arc<[u8]>,
    pub start: u64,
    pub len: u64,
}

impl ReadRange {
    pub fn new(prefix: Vec<u8>, start: u64, len: u64) -> ReadRange {
        ReadRange {
            prefix: prefix.into(),
            start,
            len,
        }
    }
}

/// Why the reader stage could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("io_uring is not usable ({0}) and io.fallback = false")]
    NoUring(#[from] uring::ProbeError),
    #[error(transparent)]
    Uring(#[from] SetupError),
    #[error("cannot start a reader thread: {0}")]
    Spawn(std::io::Error),
}

/// The running reader threads.
pub struct ReaderStage {
    engine: Engine,
    arena: Option<Arc<Arena>>,
    threads: Vec<JoinHandle<()>>,
}

/// What one reader thread needs.
struct Ctx {
    jobs: Arc<Ring<ReadJob>>,
    out: Producer<Loaded>,
    free: Arc<ArrayQueue<Vec<u8>>>,
    telemetry: Arc<Telemetry>,
    limit: u64,
    name: String,
}

impl ReaderStage {
    /// Starts the configured engine: `io.threads` threads (thread `i` pinned to
    /// `cpus[i]` when given) taking jobs from `jobs` and pushing onto `out`.
    /// Heap buffers of the plain engine are recycled through `free`. The ring
    /// engine reads into an arena of `arena_bytes` (`cfg.arena_bytes` where set),
    /// O_DIRECT where the run's read mode says so.
    pub fn start(
        (cfg, read): (&IoConfig, &ReadMode),
        arena_bytes: u64,
        cpus: &[Option<usize>],
        jobs: Arc<Ring<ReadJob>>,
        out: &Arc<Ring<Loaded>>,
        free: Arc<ArrayQueue<Vec<u8>>>,
        telemetry: Arc<Telemetry>,
    ) -> Result<ReaderStage, StartError> {
        let threads = cfg.threads.max(1);
        let mut engines = None;
        let mut arena = None;
        if cfg.engine == Engine::Uring {
            match uring::probe() {
                Ok(_) => {
                    let (a, e) = rings((cfg, read), arena_bytes, threads)?;
                    engines = Some(e);
                    arena = Some(a);
                }
                Err(why) if cfg.fallback => tracing::warn!(
                    reason = %why,
                    "io_uring is not usable; reading with the std engine instead \
                     (set io.fallback = false to make this fatal)."
                ),
                Err(why) => return Err(StartError::NoUring(why)),
            }
        }
        let engine = if engines.is_some() {
            Engine::Uring
        } else {
            Engine::Std
        };
        // Every guard exists before any thread can drop one.
        let producers: Vec<Producer<Loaded>> = (0..threads).map(|_| out.producer()).collect();
        let mut engines = engines.map(Vec::into_iter);
        let mut handles = Vec::with_capacity(threads);
        for (i, out) in producers.into_iter().enumerate() {
            let cpu = cpus.get(i).copied().flatten();
            let ctx = Ctx {
                jobs: Arc::clone(&jobs),
                out,
                free: Arc::clone(&free),
                telemetry: Arc::clone(&telemetry),
                limit: cfg.max_file_bytes,
                name: format!("Reader {i}"),
            };
            let uring = engines.as_mut().and_then(Iterator::next);
            let spawned = std::thread::Builder::new()
                .name(format!("reader-{i}"))
                .spawn(move || {
                    crate::runtime::pin::pin_or_warn(cpu, &ctx.name);
                    let mut local = Local::serial(&ctx.telemetry, format!("reader-{i}"));
                    match uring {
                        Some(e) => uring_loop(e, &ctx, &mut local),
                        None => std_loop(&ctx, &mut local),
                    }
                    local.publish(&ctx.telemetry);
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    // End the stream so the threads already started exit
                    // instead of waiting for jobs that will never come.
                    jobs.close();
                    return Err(StartError::Spawn(e));
                }
            }
        }
        Ok(ReaderStage {
            engine,
            arena,
            threads: handles,
        })
    }

    /// The engine that runs ("uring" unless the probe sent us to "std").
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// The registered arena of the ring engine (the CUDA stage registers it too).
    pub fn arena(&self) -> Option<&Arc<Arena>> {
        self.arena.as_ref()
    }

    /// Waits for every reader thread; `false` if one panicked.
    pub fn join(self) -> bool {
        let mut ok = true;
        for t in self.threads {
            ok &= t.join().is_ok();
        }
        ok
    }
}

/// The arena of `arena_bytes` in `threads` partitions and one ring over
/// each; how long each step took is logged (debug).
fn rings(
    (cfg, read): (&IoConfig, &ReadMode),
    arena_bytes: u64,
    threads: usize,
) -> Result<(Arc<Arena>, Vec<UringEngine>), StartError> {
    let t = std::time::Instant::now();
    let arena = Arena::new(arena_bytes, threads).map_err(SetupError::from)?;
    let mapped = t.elapsed();
    let opts = UringOptions::new(cfg, read);
    let engines = (0..threads)
        .map(|i| UringEngine::new(&opts, arena.part(i)))
        .collect::<Result<Vec<_>, _>>()?;
    tracing::debug!(
        arena_s = mapped.as_secs_f64(),
        rings_s = (t.elapsed() - mapped).as_secs_f64(),
        arena_bytes,
        "Reader rings set up."
    );
    Ok((arena, engines))
}

/// Ring engine: one `run` per burst of queued jobs.
fn uring_loop(mut engine: UringEngine, ctx: &Ctx, local: &mut Local) {
    while let Some(first) = ctx.jobs.pop() {
        ctx.telemetry.mark_first_read();
        let mut first = Some(first);
        // The segments of the files in flight, by job id (a manifest's).
        let segments = std::cell::RefCell::new(std::collections::HashMap::new());
        // While jobs keep coming, one run keeps the ring full; it ends only
        // when nothing is queued and nothing is in flight. A job with a byte
        // range (a segment of a long WAV) goes through the ring too: its
        // blocks only, then its prefix placed in front (`uring::engine`).
        let mut next = || {
            let j = match first.take().or_else(|| ctx.jobs.try_pop()) {
                Some(j) => j,
                None if ctx.jobs.is_closed() => match ctx.jobs.try_pop() {
                    Some(j) => j,
                    None => return Next::End,
                },
                None => return Next::Later,
            };
            if let Some(s) = j.segment {
                segments.borrow_mut().insert(j.id, s);
            }
            match j.range {
                Some(r) => Next::Range(j.id, j.path, r),
                None => Next::Job(j.id, j.path),
            }
        };
        let handled = std::cell::Cell::new(0u64);
        let done = |job, bytes, _latency| {
            handled.set(handled.get() + 1);
            let segment = segments.borrow_mut().remove(&job);
            ctx.out
                .push(Loaded {
                    job,
                    bytes,
                    segment,
                })
                .is_ok()
        };
        let ran = engine.run_stream_until(&mut next, done, &|| ctx.out.is_closed());
        local.handled(handled.get());
        match ran {
            Ok(stats) => {
                // Busy = the loop's wall time less time blocked handing files on.
                local.add_busy(Stage::Read, stats.busy());
                local.add_bytes(stats.bytes);
                if stats.buffered_fallbacks + stats.noatime_retries > 0 {
                    tracing::info!(
                        reader = %ctx.name,
                        buffered = stats.buffered_fallbacks,
                        without_noatime = stats.noatime_retries,
                        "Some files were read buffered (O_DIRECT refused) or opened without \
                         O_NOATIME (not the owner)."
                    );
                }
            }
            Err(e) => {
                tracing::error!(
                    reader = %ctx.name,
                    error = %e,
                    "The io_uring engine failed; its files in flight are rejected and it \
                     reads the rest with plain read()."
                );
                std_loop(ctx, local);
                return;
            }
        }
        local.publish(&ctx.telemetry);
        if ctx.out.is_closed() {
            return; // downstream ended early
        }
    }
}

/// Plain engine: `open` + `fstat` + `read` per job into a recycled buffer.
fn std_loop(ctx: &Ctx, local: &mut Local) {
    while let Some(j) = ctx.jobs.pop() {
        ctx.telemetry.mark_first_read();
        if j.range.is_some() {
            if !read_ranged(j, ctx, local) {
                return; // downstream ended early
            }
            continue;
        }
        let mut buf = ctx.free.pop().unwrap_or_default();
        let r = local.time(Stage::Read, || read_file(&j.path, ctx.limit, &mut buf));
        let bytes = r.map(|()| {
            local.add_bytes(buf.len() as u64);
            FileBytes::Heap(buf)
        });
        let loaded = Loaded {
            job: j.id,
            bytes,
            segment: j.segment,
        };
        local.handled(1);
        if ctx.out.push(loaded).is_err() {
            return; // downstream ended early
        }
        if ctx.jobs.is_empty() {
            local.publish(&ctx.telemetry);
        }
    }
}

/// Reads job `j`'s byte range into a recycled buffer with `pread` and hands
/// it on; `false` when downstream has ended. Bytes counted are the file's
/// bytes read (the prefix is the source's, already in memory).
fn read_ranged(j: ReadJob, ctx: &Ctx, local: &mut Local) -> bool {
    let range = j.range.expect("a ranged job");
    let mut buf = ctx.free.pop().unwrap_or_default();
    let r = local.time(Stage::Read, || read_range(&j.path, &range, &mut buf));
    let bytes = r.map(|()| {
        local.add_bytes(range.len);
        FileBytes::Heap(buf)
    });
    let loaded = Loaded {
        job: j.id,
        bytes,
        segment: j.segment,
    };
    local.handled(1);
    ctx.out.push(loaded).is_ok()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A running stage with its job ring, output ring and telemetry.
    type Started = (
        Arc<Ring<ReadJob>>,
        Arc<Ring<Loaded>>,
        Arc<Telemetry>,
        ReaderStage,
    );

    /// A stage over `cfg` with a 2 MiB arena: its job ring (2 × `ring`),
    /// its output ring (`ring`), its telemetry and the stage.
    fn started(cfg: &IoConfig, ring: usize) -> Started {
        let jobs = Arc::new(Ring::new(2 * ring));
        let out = Arc::new(Ring::new(ring));
        let telemetry = Arc::new(Telemetry::default());
        let free = Arc::new(ArrayQueue::new(4));
        let stage = ReaderStage::start(
            (cfg, &crate::reader::cache::unsampled(cfg.direct)),
            2 << 20,
            &[],
            Arc::clone(&jobs),
            &out,
            free,
            Arc::clone(&telemetry),
        )
        .unwrap();
        (jobs, out, telemetry, stage)
    }

    fn files(dir: &std::path::Path, n: usize) -> Vec<(PathBuf, Vec<u8>)> {
        (0..n)
            .map(|i| {
                let p = dir.join(format!("f{i:04}"));
                let body: Vec<u8> = (0..(i * 977) % 9000).map(|b| (b ^ i) as u8).collect();
                std::fs::write(&p, &body).unwrap();
                (p, body)
            })
            .collect()
    }

    /// Both engines, several threads, a source that trickles jobs in bursts:
    /// every job comes out once with its bytes, and the loaded ring closes
    /// when the job ring does.
    #[test]
    fn every_job_once_with_both_engines_and_a_bursty_source() {
        let d = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let fs = files(d.path(), 200);
        for engine in [Engine::Uring, Engine::Std] {
            let mut cfg = crate::config::Config::default().io;
            cfg.engine = engine;
            cfg.threads = 2;
            cfg.queue_depth = 8;
            let (jobs, out, telemetry, stage) = started(&cfg, 8);
            let source = {
                let (jobs, fs) = (jobs.producer(), fs.clone());
                std::thread::spawn(move || {
                    for (id, (path, _)) in fs.into_iter().enumerate() {
                        jobs.push(ReadJob::whole(id, path)).unwrap();
                        if id % 50 == 49 {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    }
                })
            };
            let mut seen = vec![false; fs.len()];
            while let Some(Loaded { job, bytes, .. }) = out.pop() {
                assert!(!std::mem::replace(&mut seen[job], true), "job {job} twice");
                assert_eq!(&*bytes.unwrap(), fs[job].1.as_slice());
            }
            source.join().unwrap();
            assert!(stage.join());
            assert!(seen.iter().all(|&s| s), "{engine:?}: a job is missing");
            let r = telemetry.report(Duration::from_secs(1), vec![]);
            let total: usize = fs.iter().map(|(_, b)| b.len()).sum();
            assert_eq!(r.bytes_read, total as u64, "{engine:?}");
        }
    }

    /// Jobs with byte ranges and segments among whole ones, both engines:
    /// a ranged job's bytes are its prefix then exactly its range, every
    /// job's segment comes out with its bytes, and the bytes counted are
    /// the ranges' (not the files').
    #[test]
    fn ranges_and_segments_travel_with_their_jobs_through_both_engines() {
        let d = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let fs = files(d.path(), 60);
        let seg = |i: usize| Segment {
            offset_s: i as f64,
            ..Segment::default()
        };
        let range = |i: usize, len: usize| {
            (i.is_multiple_of(3) && len > 100)
                .then(|| ReadRange::new(vec![i as u8; 3], 17, (len - 40) as u64))
        };
        for engine in [Engine::Uring, Engine::Std] {
            let mut cfg = crate::config::Config::default().io;
            cfg.engine = engine;
            cfg.queue_depth = 4;
            let (jobs, out, telemetry, stage) = started(&cfg, 4);
            let source = {
                let (jobs, fs) = (jobs.producer(), fs.clone());
                std::thread::spawn(move || {
                    for (id, (path, body)) in fs.into_iter().enumerate() {
                        let mut j = ReadJob::whole(id, path);
                        j.segment = id.is_multiple_of(2).then(|| seg(id));
                        j.range = range(id, body.len());
                        jobs.push(j).unwrap();
                    }
                })
            };
            let mut seen = 0;
            let mut want_bytes = 0;
            while let Some(Loaded {
                job,
                bytes,
                segment,
            }) = out.pop()
            {
                seen += 1;
                let body = &fs[job].1;
                let got = bytes.unwrap();
                match range(job, body.len()) {
                    Some(r) => {
                        assert_eq!(&got[..3], &[job as u8; 3]);
                        assert_eq!(&got[3..], &body[17..17 + r.len as usize], "job {job}");
                        want_bytes += r.len;
                    }
                    None => {
                        assert_eq!(&*got, body.as_slice());
                        want_bytes += body.len() as u64;
                    }
                }
                assert_eq!(
                    segment,
                    (job % 2 == 0).then(|| seg(job)),
                    "{engine:?} job {job}"
                );
            }
            source.join().unwrap();
            assert!(stage.join());
            assert_eq!(seen, fs.len());
            let r = telemetry.report(Duration::from_secs(1), vec![]);
            assert_eq!(r.bytes_read, want_bytes, "{engine:?}");
        }
    }
}
