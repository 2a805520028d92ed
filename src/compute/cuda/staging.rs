//! Decoding in front of a device: the staging memory that host-decoded clips
//! are written into, and the per-thread [`Router`] that decides, file by
//! file, whether the device decodes it or the host does.
//!
//! The CUDA stage's decode threads (`compute::cuda::feed`) each own one
//! [`Router`]. For every accepted file the router either returns the WAV
//! header ([`Route::Device`]: raw PCM/float WAV at the target rate whose
//! channels the device's mean handles — the device decodes it from the
//! file's own bytes) or decodes the file on the host with the same
//! [`ClipDecoder`] the CPU backend runs (FLAC, resampling, `channels =
//! "first"`) into a [`Clip`] of [`Staging`] ([`Route::Pcm`]): `clip_samples`
//! f32 values, already mono, at the target rate, zero padded or trimmed. The
//! device reads such a clip as a headerless mono float32 WAV
//! ([`Clip::info`]), so the kernels need no new input kind and the samples
//! the mel starts from are the CPU backend's, bit for bit.
//!
//! [`Staging`] is one anonymous mapping cut into fixed slots of one clip
//! each, laid end to end (slot k + 1 starts where slot k ends, so clips
//! staged in slot order go to the device as one copy). The device stage
//! registers the whole mapping once (pinned for DMA, like the reader's
//! arena). Slots are handed out by a free list; a [`Clip`] returns its slot
//! when dropped — the device stage drops it only after the copy that reads
//! it completed. [`Staging::acquire`] blocks while every slot is in use (the
//! back-pressure that bounds the decode threads' lead) and gives up once the
//! staging is [closed](Staging::close) (the device stage ended).
//!
//! Invariants: a slot is owned by at most one [`Clip`] at a time (the free
//! list holds each index once), so the `&mut [f32]` a clip hands out never
//! aliases another clip's; the slots sit between two unused guard bytes
//! ranges ([`GUARD`]), so no byte of another mapping (the reader's arena,
//! mapped separately and registered separately) is ever adjacent to a slot
//! and a coalesced copy never spans two registrations.

use std::ptr::NonNull;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::decode::clip::{self, ClipDecoder, Policy};
use crate::decode::wav::{SampleFormat, WavInfo};

/// Unused bytes before the first slot and after the last one.
pub const GUARD: usize = 4096;

/// Fixed-size clip slots in one mapping; see the module doc.
pub struct Staging {
    /// The mapping (guards included).
    base: NonNull<u8>,
    len: usize,
    /// Samples per clip.
    clip_samples: usize,
    /// Bytes per slot (`clip_samples · 4`).
    stride: usize,
    free: Mutex<Free>,
    available: Condvar,
}

struct Free {
    slots: Vec<u32>,
    closed: bool,
}

// SAFETY: the mapping is plain memory owned by this value; each slot is
// accessed only through the one `Clip` that owns it (free-list invariant).
unsafe impl Send for Staging {}
// SAFETY: as above; `&Staging` exposes the base pointer, the length and the
// mutex-guarded free list only.
unsafe impl Sync for Staging {}

impl std::fmt::Debug for Staging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staging")
            .field("slots", &((self.len - 2 * GUARD) / self.stride))
            .field("clip_samples", &self.clip_samples)
            .finish()
    }
}

impl Staging {
    /// `slots` (≥ 1) clips of `clip_samples` (≥ 1) f32 samples each.
    pub fn new(slots: usize, clip_samples: usize) -> std::io::Result<Arc<Staging>> {
        let slots = slots.clamp(1, u32::MAX as usize);
        let stride = clip_samples
            .max(1)
            .checked_mul(4)
            .ok_or_else(|| std::io::Error::other("clip too long for staging"))?;
        let len = stride
            .checked_mul(slots)
            .and_then(|l| l.checked_add(2 * GUARD))
            .ok_or_else(|| std::io::Error::other("staging size overflows"))?;
        let base = crate::runtime::sys::map_anonymous(len)?;
        Ok(Arc::new(Staging {
            base,
            len,
            clip_samples: clip_samples.max(1),
            stride,
            // Popped from the end: slot 0 first, so clips start in slot order.
            free: Mutex::new(Free {
                slots: (0..slots as u32).rev().collect(),
                closed: false,
            }),
            available: Condvar::new(),
        }))
    }

    /// Start of the mapping, guards included (to register it with a device).
    pub fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Bytes of the mapping, guards included.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Samples per clip.
    pub fn clip_samples(&self) -> usize {
        self.clip_samples
    }

    /// Slots not owned by a [`Clip`].
    pub fn free_slots(&self) -> usize {
        self.lock().slots.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Free> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A free slot, waiting while none is; `None` once the staging is closed.
    pub fn acquire(self: &Arc<Self>) -> Option<Clip> {
        let mut free = self.lock();
        loop {
            if free.closed {
                return None;
            }
            if let Some(index) = free.slots.pop() {
                return Some(Clip {
                    staging: Arc::clone(self),
                    index,
                });
            }
            // A timed wait: a missed notification costs a few ms, never a hang.
            free = self
                .available
                .wait_timeout(free, Duration::from_millis(5))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Ends every present and future [`acquire`](Self::acquire) with `None`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.available.notify_all();
    }

    fn release(&self, index: u32) {
        self.lock().slots.push(index);
        self.available.notify_one();
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are what map_anonymous returned and was given;
        // every `Clip` holds an `Arc<Staging>`, so none outlives the mapping.
        // A failure can only mean invalid arguments, which construction rules
        // out; it is ignored.
        let _ = unsafe { crate::runtime::sys::unmap(self.base, self.len) };
    }
}

/// One staging slot holding (or about to hold) one decoded clip; returns the
/// slot when dropped.
pub struct Clip {
    staging: Arc<Staging>,
    index: u32,
}

impl std::fmt::Debug for Clip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clip").field("index", &self.index).finish()
    }
}

impl Clip {
    /// Start of the clip's bytes (inside the staging mapping).
    pub fn ptr(&self) -> *const u8 {
        let offset = GUARD + self.index as usize * self.staging.stride;
        // SAFETY: index < slots, so the slot lies between the two guards,
        // inside the mapping.
        unsafe { self.staging.base.as_ptr().add(offset) }
    }

    /// Bytes of the clip (`clip_samples · 4`; slots are exactly this far
    /// apart).
    pub fn byte_len(&self) -> usize {
        self.staging.stride
    }

    /// Which slot this is (slots are adjacent in index order).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The samples, for writing.
    pub fn samples_mut(&mut self) -> &mut [f32] {
        // SAFETY: the slot is `clip_samples` f32 values inside the mapping,
        // 4-byte aligned (page-aligned base, GUARD and stride multiples of
        // 4), zero filled at first and always initialised f32 bits; this
        // `Clip` owns the slot exclusively (free-list invariant) and
        // `&mut self` rules out another view through it.
        unsafe {
            std::slice::from_raw_parts_mut(self.ptr().cast_mut().cast(), self.staging.clip_samples)
        }
    }

    /// The samples.
    pub fn samples(&self) -> &[f32] {
        // SAFETY: as in `samples_mut`; `&self` allows shared views only.
        unsafe { std::slice::from_raw_parts(self.ptr().cast(), self.staging.clip_samples) }
    }

    /// The header a device decoder reads these bytes with: mono native f32
    /// (little-endian on every host this runs on) at `rate`, no header
    /// bytes, exactly one clip of frames.
    pub fn info(&self, rate: u32) -> WavInfo {
        WavInfo {
            sample_rate: rate,
            channels: 1,
            format: SampleFormat::F32,
            block_align: 4,
            data_offset: 0,
            frames: self.staging.clip_samples,
        }
    }
}

impl Drop for Clip {
    fn drop(&mut self) {
        self.staging.release(self.index);
    }
}

const _: () = assert!(
    cfg!(target_endian = "little"),
    "staged clips are read as little-endian f32"
);

/// Where a file goes.
#[derive(Debug)]
pub enum Route {
    /// The device decodes the file from its own bytes with this header.
    Device(WavInfo),
    /// Decoded here into a staged clip (read with [`Clip::info`]).
    Pcm(Clip),
}

/// One decode thread's state: the CPU backend's clip decoder and the staging
/// it writes into.
pub struct Router {
    rate: u32,
    policy: Policy,
    decoder: ClipDecoder,
    staging: Arc<Staging>,
}

impl Router {
    pub fn new(rate: u32, policy: Policy, staging: Arc<Staging>) -> Router {
        Router {
            rate,
            policy,
            decoder: ClipDecoder::new(rate, policy),
            staging,
        }
    }

    /// Routes (and, for the host, decodes) one file: `Err` is the rejection
    /// the CPU backend gives the file; `Ok(None)` means the staging was
    /// closed while waiting for a slot (the device stage is gone).
    /// A segment of a file (a manifest's) is always decoded on the host.
    pub fn route(
        &mut self,
        bytes: &[u8],
        seg: Option<&crate::model::Segment>,
    ) -> Result<Option<Route>, clip::Error> {
        let seg = seg.filter(|s| !s.is_whole());
        if seg.is_none()
            && let Some(info) = clip::device_wav(bytes, self.rate, self.policy)?
        {
            return Ok(Some(Route::Device(info)));
        }
        let Some(mut clip) = self.staging.acquire() else {
            return Ok(None);
        };
        // On error the clip drops here and its slot goes back.
        self.decoder
            .decode_segment(bytes, seg, clip.samples_mut())?;
        Ok(Some(Route::Pcm(clip)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::policy::{Channels, Resample};

    #[test]
    fn slots_are_adjacent_exclusive_and_come_back_on_drop() {
        let s = Staging::new(3, 10).unwrap();
        assert_eq!(s.len(), 120 + 2 * GUARD);
        let mut a = s.acquire().unwrap();
        let b = s.acquire().unwrap();
        assert_eq!((a.index(), b.index()), (0, 1));
        assert_eq!(a.ptr().wrapping_add(a.byte_len()), b.ptr());
        // Guards on both sides: nothing outside the mapping touches a slot.
        assert_eq!(a.ptr(), s.as_ptr().wrapping_add(GUARD).cast_const());
        a.samples_mut().fill(1.5);
        assert!(b.samples().iter().all(|&v| v == 0.0));
        assert_eq!(s.free_slots(), 1);
        drop(a);
        assert_eq!(s.free_slots(), 2);
        let c = s.acquire().unwrap();
        assert_eq!(c.index(), 0);
        assert!(c.samples().iter().all(|&v| v == 1.5));
        let info = c.info(4096);
        assert_eq!((info.channels, info.frames, info.data_offset), (1, 10, 0));
        assert_eq!(info.format, SampleFormat::F32);
    }

    #[test]
    fn acquire_waits_for_a_slot_and_ends_when_closed() {
        let s = Staging::new(1, 4).unwrap();
        let held = s.acquire().unwrap();
        let s2 = Arc::clone(&s);
        let waiter = std::thread::spawn(move || s2.acquire().map(|c| c.index()));
        std::thread::sleep(Duration::from_millis(20));
        drop(held);
        assert_eq!(waiter.join().unwrap(), Some(0));
        let _held = s.acquire().unwrap();
        let s3 = Arc::clone(&s);
        let waiter = std::thread::spawn(move || s3.acquire().is_none());
        std::thread::sleep(Duration::from_millis(20));
        s.close();
        assert!(waiter.join().unwrap(), "a closed staging hands out nothing");
    }

    #[test]
    fn the_router_sends_device_wavs_on_and_decodes_the_rest_like_the_cpu_backend() {
        let rate = 4096;
        let n = 4096;
        let staging = Staging::new(2, n).unwrap();
        let policy = Policy {
            resample: Resample::SoxrHq,
            channels: Channels::First,
        };
        let mut router = Router::new(rate, policy, Arc::clone(&staging));
        let samples = crate::synth::clip(7, 1, 0);
        let mono = crate::synth::encode_wav_pcm16(&samples, rate);
        match router.route(&mono, None).unwrap().unwrap() {
            Route::Device(info) => assert_eq!((info.sample_rate, info.channels), (rate, 1)),
            Route::Pcm(_) => panic!("a mono PCM WAV at the rate is the device's"),
        }
        // Another rate: decoded here, equal to the CPU backend's clip.
        let other = crate::synth::encode_wav_pcm16(&samples, 8000);
        let Route::Pcm(clip) = router.route(&other, None).unwrap().unwrap() else {
            panic!("a resampled file is decoded on the host");
        };
        let mut want = vec![0f32; n];
        ClipDecoder::new(rate, policy)
            .decode(&other, &mut want)
            .unwrap();
        assert!(
            clip.samples()
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
        // A bad file is the CPU backend's rejection and keeps no slot.
        let before = staging.free_slots();
        let bad = b"fLaC\0\0\0\0garbage".to_vec();
        let want_err = ClipDecoder::new(rate, policy)
            .decode(&bad, &mut want)
            .unwrap_err();
        assert_eq!(router.route(&bad, None).unwrap_err(), want_err);
        assert_eq!(staging.free_slots(), before);
        staging.close();
        assert!(router.route(&other, None).unwrap().is_none());
    }
}
