//! CPU backend: W worker threads turning [`Loaded`] files into [`Outcome`]s.
//!
//! Each worker owns its clip buffer and mel scratch (no allocation per file in
//! steady state: byte buffers go back to the reader through `free_bytes`, row
//! buffers come from `free_rows`, which the writer refills). The mel plan
//! (window, FFT plan, sparse filterbank) is built once and shared.
//!
//! When the input ring is closed and drained, the last worker to stop closes the
//! output ring, which ends the writer's stream.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;

use crossbeam_queue::ArrayQueue;

use super::Outcome;
use crate::dsp::{Plan, Scratch};
use crate::reader::{FileBytes, Loaded};
use crate::runtime::ring::Ring;
use crate::runtime::telemetry::{Local, Stage, Telemetry};

/// Queues a worker pool is wired to.
pub struct Wiring {
    pub input: Arc<Ring<Loaded>>,
    pub output: Arc<Ring<Outcome>>,
    pub free_bytes: Arc<ArrayQueue<Vec<u8>>>,
    pub free_rows: Arc<ArrayQueue<Vec<f32>>>,
    pub telemetry: Arc<Telemetry>,
}

/// Running CPU workers.
pub struct Workers {
    threads: Vec<JoinHandle<()>>,
}

/// Decodes and computes one file into `row`.
fn process(
    plan: &Plan,
    bytes: &[u8],
    clip: &mut [f32],
    scratch: &mut Scratch,
    row: &mut [f32],
    local: &mut Local,
) -> Result<(), String> {
    let rate = plan.spec().sample_rate;
    local
        .time(Stage::Decode, || {
            crate::decode::wav::decode(bytes, rate, clip)
        })
        .map_err(|e| e.to_string())?;
    local.time(Stage::Mel, || plan.compute(clip, scratch, row));
    Ok(())
}

impl Workers {
    /// Starts one worker per entry of `cpus`, each pinned to its CPU when one
    /// is given (a failed pin is logged; the worker runs unpinned).
    pub fn start(
        plan: Arc<Plan>,
        cpus: &[Option<usize>],
        wiring: Wiring,
    ) -> std::io::Result<Workers> {
        let workers = cpus.len();
        let wiring = Arc::new(wiring);
        let running = Arc::new(AtomicUsize::new(workers));
        let mut threads = Vec::with_capacity(workers);
        for (i, &cpu) in cpus.iter().enumerate() {
            let (plan, w, running) = (Arc::clone(&plan), Arc::clone(&wiring), Arc::clone(&running));
            threads.push(std::thread::Builder::new().name(format!("cpu-{i}")).spawn(
                move || {
                    crate::runtime::pin::pin_or_warn(cpu, &format!("Compute worker {i}"));
                    let spec = plan.spec();
                    let mut clip = vec![0f32; spec.clip_samples()];
                    let row_len = spec.row_len();
                    let mut scratch = Scratch::new(&plan);
                    let mut local = Local::default();
                    while let Some(Loaded { job, bytes }) = w.input.pop() {
                        let row = match bytes {
                            Err(e) => Err(e.to_string()),
                            Ok(bytes) => {
                                let mut row = w.free_rows.pop().unwrap_or_default();
                                row.resize(row_len, 0.0);
                                let r = process(
                                    &plan,
                                    &bytes,
                                    &mut clip,
                                    &mut scratch,
                                    &mut row,
                                    &mut local,
                                );
                                // Heap buffers go back to the reader; other kinds
                                // release their storage when dropped.
                                match bytes {
                                    FileBytes::Heap(v) => {
                                        let _full = w.free_bytes.push(v);
                                    }
                                    FileBytes::Arena(_) => {}
                                }
                                r.map(|()| row)
                            }
                        };
                        if w.output.push(Outcome { job, row }).is_err() {
                            break;
                        }
                    }
                    local.publish(&w.telemetry);
                    if running.fetch_sub(1, Ordering::AcqRel) == 1 {
                        w.output.close();
                    }
                },
            )?);
        }
        Ok(Workers { threads })
    }

    pub fn join(self) -> Result<(), String> {
        for t in self.threads {
            t.join()
                .map_err(|_| "a compute worker panicked".to_string())?;
        }
        Ok(())
    }
}
