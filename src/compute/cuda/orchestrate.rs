//! `BatchRunner`: the per-batch choreography of the CUDA backend, written
//! against the [`Device`] trait so the host double can check it.
//!
//! Per batch of up to B files (one *slot* of device memory each, two slots so
//! the copy of batch k+1 overlaps the compute of batch k):
//!
//! ```text
//! copy stream:    [PtoD descriptors][HtoD bytes from the arena …]──record copied[s]
//! compute stream:                              wait copied[s]──graph(s, shape)──record done[s]
//!                 graph = kernels + cuFFT D2Z + D2H rows into pinned out[s]
//! ```
//!
//! Invariants (tested with the host double in `tests.rs`):
//! * a file's bytes (an arena extent) are released — dropped, which returns the
//!   extent to the reader — only after `copied[s]` completed, i.e. after the
//!   DMA that reads them ran; never while a copy could still read them, even
//!   when the runner is dropped mid-batch (a failed wait leaks them instead);
//! * slot s is reused only after `done[s]` completed and its rows were
//!   harvested, so neither its device input nor its pinned output is
//!   overwritten while in use;
//! * a graph is captured once per (slot, shape) and replayed afterwards; the
//!   shape of a partial batch of n files is `n.next_power_of_two().min(B)`,
//!   the extra files being empty descriptors (0 frames → silence, rows
//!   discarded), so a partial batch (the last of a build, or a time-flushed
//!   one in `serve`) costs at most log2(B)+1 captures per slot, never one per
//!   size; a batch closed because the device input was full rounds up only
//!   to a multiple of B/16 (`BatchRunner::shape`);
//! * each new shape's work runs once uncaptured before its capture
//!   (`Recipe::warm_up`: lazily loaded cuFFT kernels load outside capture);
//! * a failed submit loses no file: before the copies, the batch stays open
//!   (`take_open`); after, its tags go to `take_in_flight` and its bytes are
//!   leaked, never released while a copy may read them;
//! * host-parsed headers decide what is copied: only `data_offset + min(frames,
//!   clip) × block_align` bytes of a file (a long file is trimmed before the
//!   copy); runs of extents adjacent in the arena go as one copy.
//!
//! Errors: any device error is returned and is sticky for the runner (the
//! backend turns it into per-file rejections and a fatal shutdown error);
//! `Drop` never panics and records what failed in [`BatchRunner::errors`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::device::{DevBuf, Device, DeviceError, Event, GraphExec, Pinned, Result, Stream};
use crate::decode::wav::WavInfo;

/// The host bytes of one file, readable until the value is dropped.
pub trait HostBytes {
    /// Start of the file's bytes.
    fn ptr(&self) -> *const u8;
    /// The file's length.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes readable from `ptr` (≥ `len`: an arena extent's capacity), so
    /// adjacent extents coalesce into one copy.
    fn readable(&self) -> usize {
        self.len()
    }
}

impl HostBytes for crate::reader::FileBytes {
    fn ptr(&self) -> *const u8 {
        <[u8]>::as_ptr(self)
    }
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
    fn readable(&self) -> usize {
        match self {
            crate::reader::FileBytes::Heap(v) => v.len(),
            crate::reader::FileBytes::Arena(e) => e.room().max(e.len()),
        }
    }
}

/// Where one file's samples sit in the slot's device input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    /// Byte offset of the first sample in the device input buffer.
    pub data: u64,
    /// Sample frames the kernel may read (clamped to the clip).
    pub frames: u32,
    pub info: WavInfo,
}

/// The kernel side of a batch: what the runner copies and replays.
pub trait Recipe {
    /// Per-slot device work memory.
    type Work;
    /// Bytes of one file descriptor in the descriptor table.
    fn desc_bytes(&self) -> usize;
    /// Writes the descriptor of `file` (None: a padding slot) into `out`.
    fn encode(&self, file: Option<&Placed>, out: &mut [u8]);
    /// Samples per clip (frames beyond are never read).
    fn clip_samples(&self) -> usize;
    /// Output bytes per file (one row as the graph copies it back).
    fn row_bytes(&self) -> usize;
    /// Appends the f32 values of one row's `bytes` to `out` (default: the
    /// bytes are native-endian f32).
    fn decode_row(&self, bytes: &[u8], out: &mut Vec<f32>) {
        out.extend(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]])),
        );
    }
    /// One-time set-up: kernels, constant tables (synchronous is fine).
    fn init<D: Device>(&mut self, dev: &mut D) -> Result<()>;
    /// Allocates a slot's work memory for up to `files` files.
    fn alloc_work<D: Device>(&mut self, dev: &mut D, files: usize) -> Result<Self::Work>;
    /// Outside capture: whatever a shape needs (cuFFT plans).
    fn prepare<D: Device>(&mut self, dev: &mut D, files: usize) -> Result<()>;
    /// Outside capture, on `stream`, once per new shape before its capture:
    /// runs what loads code lazily on first use (a cuFFT plan's first
    /// execution loads its kernels; with lazy module loading, CUDA ≥ 12.2's
    /// default, that load must not happen inside a capture). `work` is the
    /// slot's, free at this point, so garbage in it is harmless.
    fn warm_up<D: Device>(
        &mut self,
        dev: &mut D,
        stream: Stream,
        work: &Self::Work,
        files: usize,
    ) -> Result<()> {
        let _unused = (dev, stream, work, files);
        Ok(())
    }
    /// Issues one batch of `files` files on `stream` (captured into a graph):
    /// kernels reading `input`/`descs`, then D2H of the rows into `out`.
    #[allow(clippy::too_many_arguments)]
    fn issue<D: Device>(
        &mut self,
        dev: &mut D,
        stream: Stream,
        work: &Self::Work,
        input: DevBuf,
        descs: DevBuf,
        out: Pinned,
        files: usize,
    ) -> Result<()>;
}

/// One file handed to the runner.
pub struct Staged<T, B> {
    pub tag: T,
    pub bytes: B,
    pub info: WavInfo,
}

/// Sizes of the runner.
#[derive(Clone, Copy, Debug)]
pub struct RunnerConfig {
    /// Files per batch (B).
    pub batch_files: usize,
    /// Device input bytes per slot.
    pub input_bytes: usize,
    /// Device batch slots (2 = double buffering).
    pub slots: usize,
}

/// Counters for the backend report.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct RunnerStats {
    pub batches: u64,
    pub files: u64,
    pub padded_files: u64,
    pub h2d_bytes: u64,
    pub h2d_copies: u64,
    pub captures: u64,
    pub graph_launches: u64,
    /// Host time blocked waiting for a free slot or the last batch.
    pub wait_s: f64,
}

struct Open<T, B> {
    items: Vec<Staged<T, B>>,
    placed: Vec<Placed>,
    /// (dst offset, host ptr, len) of each coalesced copy.
    copies: Vec<(usize, *const u8, usize)>,
    cursor: usize,
    /// Closed because the device input was full (not by count or time).
    full: bool,
}

impl<T, B> Open<T, B> {
    fn new() -> Self {
        Open {
            items: Vec::new(),
            placed: Vec::new(),
            copies: Vec::new(),
            cursor: 0,
            full: false,
        }
    }
}

struct Slot<W, T, B> {
    input: DevBuf,
    descs: DevBuf,
    desc_host: Pinned,
    out: Pinned,
    work: W,
    copied: Event,
    done: Event,
    /// Bytes still possibly read by an in-flight copy.
    held: Vec<B>,
    /// Tags of the batch in flight (real files only, in order).
    tags: Vec<T>,
    busy: bool,
}

/// See the module doc.
pub struct BatchRunner<D: Device, R: Recipe, T, B: HostBytes> {
    dev: D,
    recipe: R,
    cfg: RunnerConfig,
    copy: Stream,
    compute: Stream,
    slots: Vec<Slot<R::Work, T, B>>,
    next: usize,
    graphs: HashMap<(usize, usize), GraphExec>,
    open: Open<T, B>,
    stats: RunnerStats,
    failed: Option<DeviceError>,
    errors: Arc<Mutex<Vec<String>>>,
    /// Tags of a batch whose submit failed after its copies may have been
    /// issued: returned by `take_in_flight` for rejection.
    lost_tags: Vec<T>,
    /// Their bytes: a copy may still read them, so they are never released
    /// (leaked in Drop — the safe failure).
    stranded: Vec<B>,
}

const ALIGN: usize = 256;

impl<D: Device, R: Recipe, T, B: HostBytes> BatchRunner<D, R, T, B> {
    /// Creates streams, events and `cfg.slots` slots; runs `recipe.init`.
    pub fn new(mut dev: D, mut recipe: R, cfg: RunnerConfig) -> Result<Self> {
        let b = cfg.batch_files.max(1);
        let cfg = RunnerConfig {
            batch_files: b,
            slots: cfg.slots.max(1),
            input_bytes: cfg.input_bytes.max(ALIGN),
        };
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        dev.attach_error_sink(Arc::clone(&errors));
        recipe.init(&mut dev)?;
        let copy = dev.create_stream()?;
        let compute = dev.create_stream()?;
        let mut slots = Vec::with_capacity(cfg.slots);
        for _ in 0..cfg.slots {
            slots.push(Slot {
                input: dev.alloc(cfg.input_bytes)?,
                descs: dev.alloc(b * recipe.desc_bytes())?,
                desc_host: dev.alloc_pinned(b * recipe.desc_bytes())?,
                out: dev.alloc_pinned(b * recipe.row_bytes())?,
                work: recipe.alloc_work(&mut dev, b)?,
                copied: dev.create_event()?,
                done: dev.create_event()?,
                held: Vec::new(),
                tags: Vec::new(),
                busy: false,
            });
        }
        Ok(BatchRunner {
            dev,
            recipe,
            cfg,
            copy,
            compute,
            slots,
            next: 0,
            graphs: HashMap::new(),
            open: Open::new(),
            stats: RunnerStats::default(),
            failed: None,
            errors,
            lost_tags: Vec::new(),
            stranded: Vec::new(),
        })
    }

    pub fn device(&mut self) -> &mut D {
        &mut self.dev
    }

    #[cfg(test)]
    pub(crate) fn dev_mut_for_test(&mut self) -> &mut D {
        &mut self.dev
    }

    pub fn stats(&self) -> RunnerStats {
        self.stats
    }

    /// Where teardown problems are recorded; still readable after the
    /// runner was dropped (Drop never panics, it records).
    pub fn error_sink(&self) -> Arc<Mutex<Vec<String>>> {
        Arc::clone(&self.errors)
    }

    fn record_error(&self, e: String) {
        tracing::error!(error = %e, "CUDA teardown failed.");
        self.errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(e);
    }

    /// Files in the batch being assembled.
    pub fn open_len(&self) -> usize {
        self.open.items.len()
    }

    fn check(&self) -> Result<()> {
        match &self.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn sticky<X>(&mut self, r: Result<X>) -> Result<X> {
        if let Err(e) = &r {
            self.failed.get_or_insert_with(|| e.clone());
        }
        r
    }

    /// Bytes of `item` the kernels need.
    fn needed(&self, item: &Staged<T, B>) -> usize {
        let frames = item.info.frames.min(self.recipe.clip_samples());
        let need = item.info.data_offset + frames * usize::from(item.info.block_align);
        need.min(item.bytes.len())
    }

    /// Adds a file to the open batch; gives it back when the batch is full
    /// (count or device input bytes): `flush` and add again. A file that
    /// cannot fit even an empty batch is returned with `Ok(Err)` too — the
    /// caller rejects it when `open_len() == 0`.
    pub fn add(&mut self, item: Staged<T, B>) -> std::result::Result<(), Staged<T, B>> {
        if self.open.items.len() >= self.cfg.batch_files {
            return Err(item);
        }
        let need = self.needed(&item);
        let copy_len = if need == item.bytes.len() {
            item.bytes.readable().max(need)
        } else {
            need
        };
        let ptr = item.bytes.ptr();
        // Coalesce with the previous copy when the host bytes are adjacent.
        let (dst, extend) = match self.open.copies.last() {
            Some(&(d, p, l)) if p.wrapping_add(l) == ptr => (d + l, true),
            _ => (self.open.cursor.div_ceil(ALIGN) * ALIGN, false),
        };
        if dst + copy_len > self.cfg.input_bytes {
            self.open.full = !self.open.items.is_empty();
            return Err(item);
        }
        if extend {
            if let Some(last) = self.open.copies.last_mut() {
                last.2 += copy_len;
            }
        } else {
            self.open.copies.push((dst, ptr, copy_len));
        }
        self.open.cursor = dst + copy_len;
        let frames = item.info.frames.min(self.recipe.clip_samples());
        self.open.placed.push(Placed {
            data: (dst + item.info.data_offset) as u64,
            frames: frames as u32,
            info: item.info,
        });
        self.open.items.push(item);
        Ok(())
    }

    /// Releases the bytes of every slot whose copy completed. Non-blocking.
    fn release_copied(&mut self) -> Result<()> {
        for i in 0..self.slots.len() {
            if !self.slots[i].held.is_empty() {
                let done = self.dev.event_query(self.slots[i].copied);
                if self.sticky(done)? {
                    self.slots[i].held.clear();
                }
            }
        }
        Ok(())
    }

    /// Hands slot `i`'s rows to `sink` and frees the slot (its work is done).
    fn harvest(&mut self, i: usize, sink: &mut impl FnMut(T, &[f32])) {
        let row = self.recipe.row_bytes();
        let slot = &mut self.slots[i];
        slot.held.clear();
        slot.busy = false;
        // SAFETY: `done` completed, so the graph's D2H into `out` has run and
        // nothing is in flight into it until this slot is reused.
        let out = unsafe { self.dev.pinned(slot.out) };
        let mut vals = Vec::with_capacity(row / 2);
        for (k, tag) in slot.tags.drain(..).enumerate() {
            vals.clear();
            self.recipe
                .decode_row(&out[k * row..(k + 1) * row], &mut vals);
            sink(tag, &vals);
        }
    }

    /// Non-blocking progress: releases copied bytes, harvests finished slots.
    pub fn poll(&mut self, sink: &mut impl FnMut(T, &[f32])) -> Result<()> {
        self.check()?;
        self.release_copied()?;
        for i in 0..self.slots.len() {
            if self.slots[i].busy {
                let q = self.dev.event_query(self.slots[i].done);
                if self.sticky(q)? {
                    self.harvest(i, sink);
                }
            }
        }
        Ok(())
    }

    /// The graph for (slot, shape), captured on first use.
    fn graph(&mut self, s: usize, shape: usize) -> Result<GraphExec> {
        if let Some(&g) = self.graphs.get(&(s, shape)) {
            return Ok(g);
        }
        self.recipe.prepare(&mut self.dev, shape)?;
        let slot = &self.slots[s];
        self.recipe
            .warm_up(&mut self.dev, self.compute, &slot.work, shape)?;
        self.dev.begin_capture(self.compute)?;
        let issued = self.recipe.issue(
            &mut self.dev,
            self.compute,
            &slot.work,
            slot.input,
            slot.descs,
            slot.out,
            shape,
        );
        // End the capture even when issuing failed, so the stream is usable.
        let graph = self.dev.end_capture(self.compute);
        issued?;
        let exec = self.dev.graph_instantiate(graph?)?;
        self.graphs.insert((s, shape), exec);
        self.stats.captures += 1;
        Ok(exec)
    }

    /// Submits the open batch (if any): waits for a free slot, then issues
    /// copies, the cross-stream wait and the graph replay.
    pub fn flush(&mut self, sink: &mut impl FnMut(T, &[f32])) -> Result<()> {
        self.check()?;
        if self.open.items.is_empty() {
            return Ok(());
        }
        let r = self.submit(sink);
        self.sticky(r)
    }

    fn submit(&mut self, sink: &mut impl FnMut(T, &[f32])) -> Result<()> {
        let s = self.next;
        self.next = (s + 1) % self.slots.len();
        if self.slots[s].busy {
            let t = std::time::Instant::now();
            self.dev.event_synchronize(self.slots[s].done)?;
            self.stats.wait_s += t.elapsed().as_secs_f64();
            self.harvest(s, sink);
        }
        let n = self.open.items.len();
        let shape = self.shape(n, self.open.full);
        // Capture (or find) the graph while the batch is still open: when that
        // fails, nothing was copied and the files stay open for rejection.
        let exec = self.graph(s, shape)?;
        let open = std::mem::replace(&mut self.open, Open::new());
        let done = self.slots[s].done;
        let r = self.issue_batch(s, shape, &open).and_then(|()| {
            self.dev.graph_launch(exec, self.compute)?;
            self.dev.record_event(done, self.compute)
        });
        if r.is_err() {
            // Copies may have been issued: the tags go to `take_in_flight`,
            // the bytes are never released (Drop leaks them).
            for it in open.items {
                self.lost_tags.push(it.tag);
                self.stranded.push(it.bytes);
            }
            return r;
        }
        self.stats.graph_launches += 1;
        self.stats.batches += 1;
        self.stats.files += n as u64;
        self.stats.padded_files += (shape - n) as u64;
        let slot = &mut self.slots[s];
        slot.busy = true;
        for it in open.items {
            slot.tags.push(it.tag);
            slot.held.push(it.bytes);
        }
        self.release_copied()
    }

    /// The captured shape for a batch of `n` files. A partial batch (count
    /// not reached: the last of a build, a time-flushed one in serve) rounds
    /// up to a power of two — at most log2(B)+1 shapes. A batch closed because
    /// the device input was full rounds up only to a multiple of B/16 (its
    /// size depends on the files' bytes, not on timing, so it recurs): 130
    /// files of B = 256 run as 144, not 256; at most 16 more shapes.
    fn shape(&self, n: usize, full: bool) -> usize {
        let b = self.cfg.batch_files;
        if full {
            let g = (b / 16).max(1);
            n.div_ceil(g).saturating_mul(g).min(b)
        } else {
            n.next_power_of_two().min(b)
        }
    }

    /// Descriptors and copies of `open` into slot `s`, then the copy event
    /// and the compute stream's wait on it.
    fn issue_batch(&mut self, s: usize, shape: usize, open: &Open<T, B>) -> Result<()> {
        // Descriptors: real files, then padding.
        let db = self.recipe.desc_bytes();
        let slot = &self.slots[s];
        let (desc_host, descs, input, copied) =
            (slot.desc_host, slot.descs, slot.input, slot.copied);
        {
            // SAFETY: the slot is free (its done event completed or it never
            // ran), so no copy from `desc_host` is in flight.
            let table = unsafe { self.dev.pinned_mut(desc_host) };
            for k in 0..shape {
                self.recipe
                    .encode(open.placed.get(k), &mut table[k * db..(k + 1) * db]);
            }
        }
        self.dev
            .memcpy_ptod_async(self.copy, descs, 0, desc_host, 0, shape * db)?;
        for &(dst, ptr, len) in &open.copies {
            // SAFETY: `ptr..ptr+len` lies in the bytes of the items of this
            // batch (their `readable` ranges, merged only when adjacent); the
            // items move into `held` (or `stranded` on failure) and are
            // dropped only after `copied` completes (release_copied / harvest
            // / Drop), or never.
            unsafe { self.dev.memcpy_htod_async(self.copy, input, dst, ptr, len) }?;
            self.stats.h2d_bytes += len as u64;
            self.stats.h2d_copies += 1;
        }
        self.dev.record_event(copied, self.copy)?;
        self.dev.stream_wait_event(self.compute, copied)
    }

    /// Flushes and waits for every batch; all rows reach `sink`.
    pub fn finish(&mut self, sink: &mut impl FnMut(T, &[f32])) -> Result<()> {
        self.flush(sink)?;
        let t = std::time::Instant::now();
        for k in 0..self.slots.len() {
            let i = (self.next + k) % self.slots.len();
            if self.slots[i].busy {
                let r = self.dev.event_synchronize(self.slots[i].done);
                self.sticky(r)?;
                self.harvest(i, sink);
            }
        }
        self.stats.wait_s += t.elapsed().as_secs_f64();
        Ok(())
    }

    /// Takes the open (unsubmitted) files back, e.g. to reject them after a
    /// failure. Their bytes were never handed to the device.
    pub fn take_open(&mut self) -> Vec<Staged<T, B>> {
        std::mem::replace(&mut self.open, Open::new()).items
    }

    /// Tags of files submitted but not finished (after a failure: to reject).
    pub fn take_in_flight(&mut self) -> Vec<T> {
        let mut v = std::mem::take(&mut self.lost_tags);
        for s in &mut self.slots {
            v.append(&mut s.tags);
        }
        v
    }
}

impl<D: Device, R: Recipe, T, B: HostBytes> Drop for BatchRunner<D, R, T, B> {
    fn drop(&mut self) {
        for i in 0..self.slots.len() {
            if self.slots[i].held.is_empty() && !self.slots[i].busy {
                continue;
            }
            let copied = self.slots[i].copied;
            match self.dev.event_synchronize(copied) {
                Ok(()) => self.slots[i].held.clear(),
                Err(e) => {
                    // The copy may still read these bytes: never give them
                    // back to the reader. Leaking is the safe failure.
                    self.record_error(format!(
                        "batch slot {i}: {e}; {} file buffer(s) leaked rather than released \
                         while a copy may still read them",
                        self.slots[i].held.len()
                    ));
                    for b in self.slots[i].held.drain(..) {
                        std::mem::forget(b);
                    }
                }
            }
            if self.slots[i].busy
                && let Err(e) = self.dev.event_synchronize(self.slots[i].done)
            {
                self.record_error(format!("batch slot {i}: {e}"));
            }
        }
        if !self.stranded.is_empty() {
            self.record_error(format!(
                "{} file buffer(s) of a failed submit leaked rather than released while a \
                 copy may still read them",
                self.stranded.len()
            ));
            for b in self.stranded.drain(..) {
                std::mem::forget(b);
            }
        }
        // The device is dropped after this body and records its own
        // teardown failures into `errors` (attach_error_sink).
    }
}
