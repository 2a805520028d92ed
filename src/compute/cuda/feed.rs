//! The decode pool in front of the CUDA stage: `decode_threads` CPU threads
//! between the readers and the stage thread.
//!
//! ```text
//! readers ──Loaded──▶ decode pool (N threads) ──Fed──▶ cuda thread ──rows──▶ writer
//!                       │ Router::route per file             ▲
//!                       │  device WAV: header only ──────────┤ (the file's bytes)
//!                       │  FLAC / resampled / "first": decoded into a staged clip
//!                       └─ reader errors, rejections ────────────────────────▶ writer
//! ```
//!
//! Each thread owns a [`Router`] (the CPU backend's `ClipDecoder` + the
//! shared [`Staging`]): raw PCM/float WAV at the spec's rate goes on as the
//! file's bytes and header (decoded on the device); every other accepted
//! file is decoded here to an f32 mono clip at the spec's rate in a staging
//! slot, which the stage thread copies to the device like any extent. A
//! reader error or a file the CPU backend would reject becomes that
//! rejection here, with the same reason, straight onto the output ring (the
//! writer orders rows by job, so it does not matter which thread sent what).
//!
//! Why a pool: decoding is the dearest per-file step on the host (FLAC
//! ≈ 525 µs per reference clip on the GPU box, 3× the mel), so one thread
//! caps a FLAC corpus at ~2,000 files/s; N threads scale it by N. The stage
//! thread does no per-file work beyond batching.
//!
//! Accounting: every `Loaded` taken from the input becomes exactly one
//! [`Fed`] or one rejection. Each thread holds a producer guard of the fed
//! ring (it closes when the last thread ends: the stage thread then finishes
//! its batches) and of the output ring. If the stage thread ends first it
//! closes the fed ring and the staging, and the threads stop.

use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_queue::ArrayQueue;

use super::staging::{Clip, Route, Router, Staging};
use crate::compute::{Outcome, Reject};
use crate::decode::clip::Policy;
use crate::decode::wav::WavInfo;
use crate::reader::{FileBytes, Loaded};
use crate::runtime::ring::{Producer, Ring};
use crate::runtime::telemetry::{Local, Stage, Telemetry};

/// A file on its way to the device.
pub struct Fed {
    pub job: usize,
    pub kind: FedKind,
}

/// What the device reads for a [`Fed`] file.
pub enum FedKind {
    /// The file's own bytes, decoded on the device with this header.
    Device { bytes: FileBytes, info: WavInfo },
    /// A clip decoded on the host (mono f32 at the spec's rate).
    Pcm(Clip),
}

/// What the pool's threads share.
pub struct FeedWiring {
    pub input: Arc<Ring<Loaded>>,
    pub free_bytes: Arc<ArrayQueue<Vec<u8>>>,
    pub telemetry: Arc<Telemetry>,
    pub policy: Policy,
    pub rate: u32,
    pub staging: Arc<Staging>,
}

/// The running pool.
pub struct Feed {
    threads: Vec<JoinHandle<()>>,
}

impl Feed {
    /// Starts one thread per pair of guards (`fed[i]`, `output[i]`); the
    /// guards must all exist before this is called (rings close when the
    /// last guard drops). Returns the pool, or the spawn error if not even
    /// one thread started (the guards are then dropped, which closes the
    /// fed ring).
    pub fn start(
        w: FeedWiring,
        fed: Vec<Producer<Fed>>,
        output: Vec<Producer<Outcome>>,
    ) -> std::io::Result<Feed> {
        let w = Arc::new(w);
        let bodies = fed.into_iter().zip(output).map(|(fed, output)| {
            let w = Arc::clone(&w);
            move || run(&w, &fed, &output)
        });
        Feed::spawn(bodies)
    }

    /// Starts one thread (`decode-i`) per body. Returns the pool, or the
    /// spawn error if not even one thread started (the bodies, and the
    /// guards they own, are then dropped).
    pub fn spawn<F>(bodies: impl IntoIterator<Item = F>) -> std::io::Result<Feed>
    where
        F: FnOnce() + Send + 'static,
    {
        let mut threads = Vec::new();
        let mut first_error = None;
        for (i, body) in bodies.into_iter().enumerate() {
            let spawned = std::thread::Builder::new()
                .name(format!("decode-{i}"))
                .spawn(body);
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => {
                    tracing::warn!(error = %e, "A decode thread could not be started.");
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if threads.is_empty() => Err(e),
            _ => Ok(Feed { threads }),
        }
    }

    /// Threads running.
    pub fn len(&self) -> usize {
        self.threads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }

    /// Waits for every thread; `false` if one panicked.
    pub fn join(self) -> bool {
        let mut ok = true;
        for t in self.threads {
            ok &= t.join().is_ok();
        }
        ok
    }
}

/// Gives a heap buffer back to the readers (arena extents free themselves).
pub(super) fn recycle(bytes: FileBytes, free: &ArrayQueue<Vec<u8>>) {
    if let FileBytes::Heap(v) = bytes {
        let _full = free.push(v);
    }
}

/// One decode thread.
fn run(w: &FeedWiring, fed: &Producer<Fed>, output: &Producer<Outcome>) {
    let mut router = Router::new(w.rate, w.policy, Arc::clone(&w.staging));
    let mut local = Local::default();
    while let Some(Loaded {
        job,
        bytes,
        segment,
    }) = w.input.pop()
    {
        let bytes = match bytes {
            Ok(b) => b,
            Err(e) => {
                if output.push(Outcome::new(job, Err(e.into()))).is_err() {
                    break;
                }
                continue;
            }
        };
        let routed = local.time(Stage::Decode, || router.route(&bytes, segment.as_ref()));
        let kind = match routed {
            Ok(Some(Route::Device(info))) => FedKind::Device { bytes, info },
            Ok(Some(Route::Pcm(clip))) => {
                recycle(bytes, &w.free_bytes);
                FedKind::Pcm(clip)
            }
            // The stage thread ended and closed the staging.
            Ok(None) => {
                recycle(bytes, &w.free_bytes);
                break;
            }
            Err(e) => {
                recycle(bytes, &w.free_bytes);
                let why: Reject = e.into();
                if output.push(Outcome::new(job, Err(why))).is_err() {
                    break;
                }
                continue;
            }
        };
        if fed.push(Fed { job, kind }).is_err() {
            // The stage thread ended: nothing will compute this file.
            break;
        }
    }
    local.publish(&w.telemetry);
}
