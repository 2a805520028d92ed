//! CPU backend: W worker threads turning [`Loaded`] files into [`Outcome`]s.
//!
//! Each worker owns a [`HostRow`]: the clip decoder at the recipe's rate,
//! its sample buffer and the recipe's own worker state (scratch), so there
//! is no allocation per file in the steady state: byte buffers go back to
//! the reader through `free_bytes`, row buffers come from `free_rows`, which
//! the writer refills. The recipe's plan (window, FFT plan, sparse
//! filterbank) is built once and shared. What the decoder makes of a file is
//! the recipe's [`RowLayout::input`](crate::frames::RowLayout::input): a
//! clip of exactly librosa's length, or the file at its natural length up to
//! the recipe's cap.
//!
//! Each worker holds a producer guard of the output ring: when the input ring
//! is closed and drained (or a worker dies), the last guard to drop closes the
//! output ring, which ends the sink's stream.

use std::sync::Arc;
use std::thread::JoinHandle;

use super::{Outcome, Reject, Wiring};
use crate::decode::clip::{ClipDecoder, Policy};
use crate::frames::{FrameRecipe, FrameWorker, Input};
use crate::model::Segment;
use crate::reader::{FileBytes, Loaded};
use crate::runtime::ring::Producer;
use crate::runtime::telemetry::{Local, Stage};

/// Running CPU workers.
pub struct Workers {
    threads: Vec<JoinHandle<()>>,
}

/// One thread's path for a recipe: the decoder at the recipe's rate, the
/// samples as the recipe takes them and the recipe's worker. The CPU workers
/// and `long` own one each. (The CUDA stage's decode pool runs the same
/// `ClipDecoder`, and the device computes the row: `compute::cuda::feed`.)
pub struct HostRow {
    decoder: ClipDecoder,
    samples: Vec<f32>,
    input: Input,
    worker: Box<dyn FrameWorker>,
}

impl HostRow {
    pub fn new(recipe: &dyn FrameRecipe, policy: Policy) -> HostRow {
        let layout = recipe.layout();
        HostRow {
            decoder: ClipDecoder::new(layout.sample_rate(), policy),
            samples: Vec::new(),
            input: layout.input(),
            worker: recipe.worker(),
        }
    }

    /// Decodes `seg` of the file (None: all of it) and computes its row
    /// into `row` (resized to the row's length); `seed` is the file's (its
    /// job id).
    pub fn row(
        &mut self,
        bytes: &[u8],
        seg: Option<&Segment>,
        seed: u64,
        row: &mut Vec<f32>,
        local: &mut Local,
    ) -> Result<(), Reject> {
        local.time(Stage::Decode, || match self.input {
            Input::Clip(n) => {
                self.samples.resize(n, 0.0);
                self.decoder.decode_segment(bytes, seg, &mut self.samples)
            }
            Input::Natural { max } => {
                self.decoder
                    .decode_natural_segment(bytes, seg, max, &mut self.samples)
            }
        })?;
        local.time(Stage::Mel, || self.worker.compute(&self.samples, seed, row))?;
        Ok(())
    }
}

impl Workers {
    /// Starts one worker per entry of `cpus`, each pinned to its CPU when one
    /// is given (a failed pin is logged; the worker runs unpinned).
    pub fn start(cpus: &[Option<usize>], wiring: Wiring) -> std::io::Result<Workers> {
        let workers = cpus.len();
        // Every guard exists before any worker can drop one.
        let outputs: Vec<Producer<Outcome>> =
            (0..workers).map(|_| wiring.output.producer()).collect();
        let wiring = Arc::new(wiring);
        let mut threads = Vec::with_capacity(workers);
        for ((i, &cpu), output) in cpus.iter().enumerate().zip(outputs) {
            let w = Arc::clone(&wiring);
            threads.push(std::thread::Builder::new().name(format!("cpu-{i}")).spawn(
                move || {
                    crate::runtime::pin::pin_or_warn(cpu, &format!("Compute worker {i}"));
                    let mut host = HostRow::new(w.recipe.as_ref(), w.policy);
                    let mut local = Local::default();
                    let mut scratch = w.stats.as_ref().map(|b| b.acc());
                    while let Some(Loaded {
                        job,
                        bytes,
                        segment,
                    }) = w.input.pop()
                    {
                        let row = match bytes {
                            Err(e) => Err(Reject::Read(e)),
                            Ok(bytes) => {
                                let mut row = w.free_rows.pop().unwrap_or_default();
                                let seg = segment.as_ref();
                                let r = host.row(&bytes[..], seg, job as u64, &mut row, &mut local);
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
                        let stats = match (&row, &w.stats, &mut scratch) {
                            (Ok(row), Some(b), Some(scratch)) => Some(b.row(row, scratch)),
                            _ => None,
                        };
                        if output.push(Outcome { job, row, stats }).is_err() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::testing::{Blocks, Shared};

    /// A 16 kHz mono 16-bit PCM WAV of `s`.
    fn wav16(s: &[i16]) -> Vec<u8> {
        let data: Vec<u8> = s.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut b = b"RIFF".to_vec();
        b.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
        b.extend_from_slice(b"WAVEfmt \x10\0\0\0\x01\0\x01\0");
        b.extend_from_slice(&16_000u32.to_le_bytes());
        b.extend_from_slice(&32_000u32.to_le_bytes());
        b.extend_from_slice(b"\x02\0\x10\0data");
        b.extend_from_slice(&(data.len() as u32).to_le_bytes());
        b.extend_from_slice(&data);
        b
    }

    /// A variable-length recipe through the workers: each file keeps its own
    /// length and a file shorter than one frame is a `too_short` rejection.
    #[test]
    fn variable_rows_keep_each_file_s_length() {
        let recipe = Arc::new(Blocks::new(3, 100, None));
        let (mut wiring, input, output) = Wiring::standalone(16);
        wiring.recipe = Arc::new(Shared(Arc::clone(&recipe)));
        let workers = Workers::start(&[None, None], wiring).unwrap();
        let lens = [1234usize, 50, 16_000, 0, 777];
        let wavs: Vec<Vec<u8>> = lens
            .iter()
            .map(|&n| {
                let s: Vec<i16> = (0..n).map(|i| ((i * 37) % 2000) as i16 - 1000).collect();
                wav16(&s)
            })
            .collect();
        for (job, w) in wavs.iter().enumerate() {
            let bytes = Ok(FileBytes::Heap(w.clone()));
            input
                .push(Loaded {
                    job,
                    bytes,
                    segment: None,
                })
                .unwrap();
        }
        input.close();
        let mut got: Vec<Outcome> = std::iter::from_fn(|| output.pop()).collect();
        assert!(workers.join());
        got.sort_by_key(|o| o.job);
        for (o, &n) in got.iter().zip(&lens) {
            let samples: Vec<f32> = (0..n)
                .map(|i| (((i * 37) % 2000) as i16 - 1000) as f32 / 32768.0)
                .collect();
            match &o.row {
                Ok(row) => assert_eq!(row, &recipe.row(&samples), "file {}", o.job),
                Err(e) => {
                    assert!(n < 100, "file {} rejected: {e}", o.job);
                    if n > 0 {
                        // (An empty WAV is the decoder's rejection.)
                        assert_eq!(e.kind(), crate::compute::RejectKind::TooShort);
                        assert!(e.to_string().contains("shorter than one frame"), "{e}");
                    }
                }
            }
        }
        assert_eq!(got.len(), lens.len());
    }
}
