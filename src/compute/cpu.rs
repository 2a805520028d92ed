//! CPU backend: W worker threads turning [`Loaded`] files into [`Outcome`]s.
//!
//! Each worker owns a [`HostMel`] (clip decoder, clip buffer, mel scratch) (no allocation per file in
//! steady state: byte buffers go back to the reader through `free_bytes`, row
//! buffers come from `free_rows`, which the writer refills). The mel plan
//! (window, FFT plan, sparse filterbank) is built once and shared.
//!
//! Each worker holds a producer guard of the output ring: when the input ring
//! is closed and drained (or a worker dies), the last guard to drop closes the
//! output ring, which ends the sink's stream.

use std::sync::Arc;
use std::thread::JoinHandle;

use super::{Outcome, Reject, Wiring};
use crate::decode::clip::{ClipDecoder, Policy};
use crate::dsp::{Plan, Scratch};
use crate::reader::{FileBytes, Loaded};
use crate::runtime::ring::Producer;
use crate::runtime::telemetry::{Local, Stage};

/// Running CPU workers.
pub struct Workers {
    threads: Vec<JoinHandle<()>>,
}

/// One thread's CPU mel path: clip decoder (WAV/FLAC, channel policy,
/// resampling), clip buffer and mel scratch. The CPU workers own one each.
/// (The CUDA stage's decode pool runs the same `ClipDecoder`, and the device
/// computes the mel: `compute::cuda::feed`.)
pub struct HostMel {
    decoder: ClipDecoder,
    clip: Vec<f32>,
    scratch: Scratch,
}

impl HostMel {
    pub fn new(plan: &Plan, policy: Policy) -> HostMel {
        let spec = plan.spec();
        HostMel {
            decoder: ClipDecoder::new(spec.sample_rate, policy),
            clip: vec![0f32; spec.clip_samples()],
            scratch: Scratch::new(plan),
        }
    }

    /// Decodes and computes one file into `row` (`spec.row_len()` values).
    pub fn row(
        &mut self,
        plan: &Plan,
        bytes: &[u8],
        row: &mut [f32],
        local: &mut Local,
    ) -> Result<(), Reject> {
        local.time(Stage::Decode, || self.decoder.decode(bytes, &mut self.clip))?;
        local.time(Stage::Mel, || {
            plan.compute(&self.clip, &mut self.scratch, row)
        });
        Ok(())
    }
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
        // Every guard exists before any worker can drop one.
        let outputs: Vec<Producer<Outcome>> =
            (0..workers).map(|_| wiring.output.producer()).collect();
        let wiring = Arc::new(wiring);
        let mut threads = Vec::with_capacity(workers);
        for ((i, &cpu), output) in cpus.iter().enumerate().zip(outputs) {
            let (plan, w) = (Arc::clone(&plan), Arc::clone(&wiring));
            threads.push(std::thread::Builder::new().name(format!("cpu-{i}")).spawn(
                move || {
                    crate::runtime::pin::pin_or_warn(cpu, &format!("Compute worker {i}"));
                    let row_len = plan.spec().row_len();
                    let mut host = HostMel::new(&plan, w.policy);
                    let mut local = Local::default();
                    while let Some(Loaded { job, bytes }) = w.input.pop() {
                        let row = match bytes {
                            Err(e) => Err(Reject::Read(e)),
                            Ok(bytes) => {
                                let mut row = w.free_rows.pop().unwrap_or_default();
                                row.resize(row_len, 0.0);
                                let r = host.row(&plan, &bytes, &mut row, &mut local);
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
                        if output.push(Outcome { job, row }).is_err() {
                            break;
                        }
                    }
                    local.publish(&w.telemetry);
                },
            )?);
        }
        Ok(Workers { threads })
    }

    /// Waits for every worker; `false` if one panicked.
    pub fn join(self) -> bool {
        let mut ok = true;
        for t in self.threads {
            ok &= t.join().is_ok();
        }
        ok
    }
}
