//! The long-lived read → compute stages of `serve`.
//!
//! Unlike `build`, jobs arrive one by one while the service runs. The service
//! loop pushes `(job id, path)` onto the `jobs` ring; one reader thread turns
//! bursts of jobs into [`Loaded`] files (io_uring engine, or plain reads when
//! io_uring is unusable and `io.fallback` allows it); the CPU workers turn
//! those into [`Outcome`]s, which the service loop pops. Job ids are the
//! service's own; this module never interprets them.
//!
//! Shutdown: [`Ingest::close`] closes the jobs ring; the reader finishes what
//! it holds and closes the loaded ring; the workers drain it and close the
//! outcome ring; the service drains that. Nothing is dropped on the way.

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_queue::ArrayQueue;

use crate::compute::{Outcome, cpu};
use crate::config::{Config, Engine};
use crate::dsp::Plan;
use crate::reader::arena::Arena;
use crate::reader::uring::{self, UringEngine, UringOptions};
use crate::reader::{FileBytes, Loaded, read_file};
use crate::runtime::ring::Ring;
use crate::runtime::telemetry::{Local, Stage, Telemetry};

/// A running read → compute pipeline.
pub struct Ingest {
    pub jobs: Arc<Ring<(usize, PathBuf)>>,
    pub loaded: Arc<Ring<Loaded>>,
    pub outcomes: Arc<Ring<Outcome>>,
    pub free_rows: Arc<ArrayQueue<Vec<f32>>>,
    /// "uring" or "std".
    pub engine: &'static str,
    reader: JoinHandle<()>,
    workers: cpu::Workers,
}

/// The reader thread's loop with the ring engine: one `run` per burst of jobs.
fn uring_reader(
    mut engine: UringEngine,
    jobs: &Ring<(usize, PathBuf)>,
    out: &Ring<Loaded>,
    local: &mut Local,
    telemetry: &Telemetry,
) {
    // Blocks until a burst starts, then takes whatever else is queued (the
    // engine borrows the paths for the whole run).
    let mut burst: Vec<(usize, PathBuf)> = Vec::new();
    while let Some(first) = jobs.pop() {
        burst.clear();
        burst.push(first);
        while burst.len() < 4096
            && let Some(j) = jobs.try_pop()
        {
            burst.push(j);
        }
        let mut it = burst.iter();
        let next = || it.next().map(|(id, p)| (*id, p.as_path()));
        let done = |job, bytes, _latency| out.push(Loaded { job, bytes }).is_ok();
        match engine.run(next, done) {
            Ok(stats) => {
                local.add_busy(
                    Stage::Read,
                    stats.wall.saturating_sub(stats.blocked_in_done),
                );
                local.add_bytes(stats.bytes);
            }
            Err(e) => {
                tracing::error!("The io_uring reader failed: {e}; files in flight are rejected.");
            }
        }
        local.publish(telemetry);
    }
}

/// The reader thread's loop with plain reads.
fn std_reader(
    jobs: &Ring<(usize, PathBuf)>,
    out: &Ring<Loaded>,
    limit: u64,
    local: &mut Local,
    telemetry: &Telemetry,
) {
    while let Some((job, path)) = jobs.pop() {
        let mut buf = Vec::new();
        let r = local.time(Stage::Read, || read_file(&path, limit, &mut buf));
        let bytes = r.map(|()| {
            local.add_bytes(buf.len() as u64);
            FileBytes::Heap(buf)
        });
        if out.push(Loaded { job, bytes }).is_err() {
            break;
        }
        if jobs.is_empty() {
            local.publish(telemetry);
        }
    }
}

impl Ingest {
    /// Starts the reader and `cfg.compute.workers` CPU workers for `cfg.spec`.
    pub fn start(cfg: &Config, telemetry: Arc<Telemetry>) -> Result<Ingest, String> {
        let jobs = Arc::new(Ring::new(cfg.io.queue_depth * 4));
        let loaded = Arc::new(Ring::new(cfg.io.queue_depth));
        let outcomes = Arc::new(Ring::new(cfg.compute.queue_depth));
        let free_rows = Arc::new(ArrayQueue::new(
            cfg.compute.queue_depth + cfg.compute.workers,
        ));
        let placement = crate::runtime::pin::plan(&cfg.compute.pin, 1, cfg.compute.workers, None);

        let use_uring = cfg.io.engine == Engine::Uring
            && match uring::probe() {
                Ok(_) => true,
                Err(why) if cfg.io.fallback => {
                    tracing::warn!(
                        "io_uring is not usable ({why}); reading with the std engine instead."
                    );
                    false
                }
                Err(why) => {
                    return Err(format!(
                        "io_uring is not usable ({why}) and io.fallback = false"
                    ));
                }
            };
        let engine = if use_uring {
            let arena = Arena::new(cfg.io.arena_bytes, 1).map_err(|e| e.to_string())?;
            let opts = UringOptions {
                queue_depth: cfg.io.queue_depth,
                direct: cfg.io.direct,
                max_file_bytes: cfg.io.max_file_bytes,
            };
            Some(UringEngine::new(&opts, arena.part(0)).map_err(|e| e.to_string())?)
        } else {
            None
        };
        let engine_name = if engine.is_some() { "uring" } else { "std" };
        let reader = {
            let (jobs, loaded, telemetry) = (
                Arc::clone(&jobs),
                Arc::clone(&loaded),
                Arc::clone(&telemetry),
            );
            let limit = cfg.io.max_file_bytes;
            let cpu = placement.readers.first().copied().flatten();
            std::thread::Builder::new()
                .name("serve-reader".into())
                .spawn(move || {
                    crate::runtime::pin::pin_or_warn(cpu, "The reader");
                    let mut local = Local::default();
                    match engine {
                        Some(e) => uring_reader(e, &jobs, &loaded, &mut local, &telemetry),
                        None => std_reader(&jobs, &loaded, limit, &mut local, &telemetry),
                    }
                    local.publish(&telemetry);
                    loaded.close();
                })
                .map_err(|e| format!("cannot start the reader thread: {e}"))?
        };
        let workers = cpu::Workers::start(
            Arc::new(Plan::new(&cfg.spec)),
            &placement.workers,
            cpu::Wiring {
                input: Arc::clone(&loaded),
                output: Arc::clone(&outcomes),
                free_bytes: Arc::new(ArrayQueue::new(1)),
                free_rows: Arc::clone(&free_rows),
                telemetry,
            },
        )
        .map_err(|e| format!("cannot start the compute workers: {e}"))?;
        Ok(Ingest {
            jobs,
            loaded,
            outcomes,
            free_rows,
            engine: engine_name,
            reader,
            workers,
        })
    }

    /// Ends the job stream; the stages drain and close their rings in turn.
    pub fn close(&self) {
        self.jobs.close();
    }

    /// Waits for every thread (call after [`Ingest::close`] and after the
    /// outcome ring has been drained to its end).
    pub fn join(self) -> Result<(), String> {
        self.reader
            .join()
            .map_err(|_| "the serve reader thread panicked".to_string())?;
        self.workers.join()
    }
}
