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
//! Both kinds of recipe run through it (the one batching loop): librosa's
//! fixed clips, one row a file, captured once per shape and replayed; and
//! the variable-length recipes (Kaldi, Whisper), whose files give
//! [`Recipe::rows`] rows each and whose batches are issued directly
//! ([`Recipe::captured`] false: every batch has its own row count, so a
//! graph would be captured for one replay). A batch closes on its file
//! count, its device input bytes or its output rows. Host-decoded samples
//! in pageable memory are gathered into the slot's pinned input on a few
//! threads before one copy ([`RunnerConfig::gather`]), and released at once.
//!
//! Errors: any device error is returned and is sticky for the runner (the
//! backend turns it into per-file rejections and a fatal shutdown error);
//! `Drop` never panics and records what failed in [`BatchRunner::errors`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::device::{DevBuf, Device, DeviceError, Event, GraphExec, Pinned, Result, Stream};
use super::host_copy;

pub use super::batch::{Desc, HostBytes, Placed, Recipe, RowSink, Shape, Staged};

/// Sizes of the runner.
#[derive(Clone, Copy, Debug)]
pub struct RunnerConfig {
    /// Files per batch (B).
    pub batch_files: usize,
    /// Device input bytes per slot.
    pub input_bytes: usize,
    /// Device batch slots (2 = double buffering).
    pub slots: usize,
    /// Files' bytes are copied into the slot's pinned input on the host
    /// first, then to the device in one copy (pageable host-decoded
    /// samples); false: each run of adjacent bytes is copied straight from
    /// where it lies (registered memory: the arena, the decode staging).
    pub gather: bool,
    /// Threads for the host copies (`host_copy`), ≥ 1.
    pub copy_threads: usize,
}

impl RunnerConfig {
    /// `batch_files` files of up to `input_bytes` device input per batch, two
    /// slots, copied straight from registered memory on this machine's
    /// copy threads.
    pub fn new(batch_files: usize, input_bytes: usize) -> RunnerConfig {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        RunnerConfig {
            batch_files,
            input_bytes,
            slots: 2,
            gather: false,
            copy_threads: host_copy::copy_threads(cores),
        }
    }
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
    /// Output rows of the files placed.
    rows: usize,
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
            rows: 0,
            full: false,
        }
    }
}

struct Slot<W, T, B> {
    input: DevBuf,
    /// The pinned input the files are gathered into (`RunnerConfig::gather`).
    input_host: Option<Pinned>,
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
    /// Where their rows are.
    placed: Vec<Placed>,
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
    /// How each row's CMVN statistics are summed as it is copied out
    /// ([`BatchRunner::summing`]); None: the rows go without them.
    sum: Option<crate::cmvn::Bins>,
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
            gather: cfg.gather,
            copy_threads: cfg.copy_threads.max(1),
        };
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        dev.attach_error_sink(Arc::clone(&errors));
        recipe.init(&mut dev)?;
        let copy = dev.create_stream()?;
        let compute = dev.create_stream()?;
        let mut slots = Vec::with_capacity(cfg.slots);
        // One descriptor a file, and a direct batch's sentinel.
        let desc_bytes = (b + 1) * recipe.desc_bytes();
        for _ in 0..cfg.slots {
            let input_host = match cfg.gather {
                true => Some(dev.alloc_pinned(cfg.input_bytes)?),
                false => None,
            };
            slots.push(Slot {
                input: dev.alloc(cfg.input_bytes)?,
                input_host,
                descs: dev.alloc(desc_bytes)?,
                desc_host: dev.alloc_pinned(desc_bytes)?,
                out: dev.alloc_pinned(recipe.out_bytes(b))?,
                work: recipe.alloc_work(&mut dev, b)?,
                copied: dev.create_event()?,
                done: dev.create_event()?,
                held: Vec::new(),
                tags: Vec::new(),
                placed: Vec::new(),
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
            sum: None,
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

    /// Sums each row's CMVN statistics with `sum` as its batch is copied
    /// out, on the copy threads ([`host_copy::scatter`]), and hands them to
    /// the sink with the row, as the CPU workers do: the writer's serial
    /// thread then only adds them.
    pub fn summing(mut self, sum: Option<crate::cmvn::Bins>) -> Self {
        self.sum = sum;
        self
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
    /// (count, device input bytes or output rows): `flush` and add again. A
    /// file that cannot fit even an empty batch is given back too — the
    /// caller deals with it when `open_len() == 0`.
    pub fn add(&mut self, item: Staged<T, B>) -> std::result::Result<(), Staged<T, B>> {
        if self.open.items.len() >= self.cfg.batch_files {
            return Err(item);
        }
        let need = self.needed(&item);
        let rows = self.recipe.rows(&item.info);
        let gather = self.cfg.gather;
        let copy_len = if need == item.bytes.len() && !gather {
            item.bytes.readable().max(need)
        } else {
            need
        };
        let ptr = item.bytes.ptr();
        // Straight copies coalesce with the previous one when the host bytes
        // are adjacent; gathered ones lie back to back (f32 aligned).
        let (dst, extend) = match self.open.copies.last() {
            Some(&(d, p, l)) if !gather && p.wrapping_add(l) == ptr => (d + l, true),
            _ if gather => (self.open.cursor.div_ceil(4) * 4, false),
            _ => (self.open.cursor.div_ceil(ALIGN) * ALIGN, false),
        };
        let out_rows = self.recipe.out_rows(self.cfg.batch_files);
        if dst + copy_len > self.cfg.input_bytes || self.open.rows + rows > out_rows {
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
            row: self.open.rows as u32,
            rows: rows as u32,
        });
        self.open.rows += rows;
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
    fn harvest(&mut self, i: usize, sink: &mut impl RowSink<T>) {
        let (dev, recipe, slot) = (&self.dev, &self.recipe, &mut self.slots[i]);
        slot.held.clear();
        slot.busy = false;
        // SAFETY: `done` completed, so the batch's D2H into `out` has run and
        // nothing is in flight into it until this slot is reused.
        let out = unsafe { dev.pinned(slot.out) };
        let src: Vec<(&[u8], Option<f32>)> = (slot.placed.iter().enumerate())
            .map(|(k, p)| recipe.output(out, k, p))
            .collect();
        let mut rows: Vec<_> = src.iter().map(|_| (sink.buffer(), None)).collect();
        let sum = self.sum.as_ref();
        let spread = host_copy::scatter_threads(self.cfg.copy_threads, sum.is_some());
        host_copy::scatter(&src, &mut rows, spread, recipe.decoder(), sum);
        slot.placed.clear();
        for (tag, (row, stats)) in slot.tags.drain(..).zip(rows) {
            sink.row(tag, row, stats);
        }
    }

    /// Non-blocking progress: releases copied bytes, harvests finished slots.
    pub fn poll(&mut self, sink: &mut impl RowSink<T>) -> Result<()> {
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
    fn graph(&mut self, s: usize, shape: Shape) -> Result<GraphExec> {
        let key = (s, shape.files);
        if let Some(&g) = self.graphs.get(&key) {
            return Ok(g);
        }
        let files = shape.files;
        self.recipe.prepare(&mut self.dev, files)?;
        let slot = &self.slots[s];
        self.recipe
            .warm_up(&mut self.dev, self.compute, &slot.work, files)?;
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
        self.graphs.insert(key, exec);
        self.stats.captures += 1;
        Ok(exec)
    }

    /// Submits the open batch (if any): waits for a free slot, then issues
    /// copies, the cross-stream wait and the graph replay.
    pub fn flush(&mut self, sink: &mut impl RowSink<T>) -> Result<()> {
        self.check()?;
        if self.open.items.is_empty() {
            return Ok(());
        }
        let r = self.submit(sink);
        self.sticky(r)
    }

    fn submit(&mut self, sink: &mut impl RowSink<T>) -> Result<()> {
        let s = self.next;
        self.next = (s + 1) % self.slots.len();
        if self.slots[s].busy {
            let t = std::time::Instant::now();
            self.dev.event_synchronize(self.slots[s].done)?;
            self.stats.wait_s += t.elapsed().as_secs_f64();
            self.harvest(s, sink);
        }
        let n = self.open.items.len();
        let captured = self.recipe.captured();
        let files = match captured {
            true => self.shape(n, self.open.full),
            false => n,
        };
        let shape = Shape {
            files,
            rows: self.open.rows,
        };
        // Capture (or find) the graph while the batch is still open: when that
        // fails, nothing was copied and the files stay open for rejection.
        let exec = match captured {
            true => Some(self.graph(s, shape)?),
            false => None,
        };
        let open = std::mem::replace(&mut self.open, Open::new());
        let done = self.slots[s].done;
        let r = self.issue_batch(s, shape, &open).and_then(|()| {
            match exec {
                Some(exec) => self.dev.graph_launch(exec, self.compute)?,
                None => {
                    let slot = &self.slots[s];
                    let (input, descs, out) = (slot.input, slot.descs, slot.out);
                    self.recipe.issue(
                        &mut self.dev,
                        self.compute,
                        &slot.work,
                        input,
                        descs,
                        out,
                        shape,
                    )?;
                }
            }
            self.dev.record_event(done, self.compute)
        });
        // Gathered, the device copies from the slot's pinned input: the
        // files' own bytes are released here, whatever happened.
        let gathered = self.cfg.gather;
        if r.is_err() {
            // Copies may have been issued: the tags go to `take_in_flight`,
            // the bytes are never released (Drop leaks them).
            for it in open.items {
                self.lost_tags.push(it.tag);
                match gathered {
                    true => drop(it.bytes),
                    false => self.stranded.push(it.bytes),
                }
            }
            return r;
        }
        self.stats.graph_launches += u64::from(captured);
        self.stats.batches += 1;
        self.stats.files += n as u64;
        self.stats.padded_files += (files - n) as u64;
        let slot = &mut self.slots[s];
        slot.busy = true;
        slot.placed = open.placed;
        for it in open.items {
            slot.tags.push(it.tag);
            match gathered {
                true => drop(it.bytes),
                false => slot.held.push(it.bytes),
            }
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
    fn issue_batch(&mut self, s: usize, shape: Shape, open: &Open<T, B>) -> Result<()> {
        // Descriptors: real files, then padding (captured) or the sentinel.
        let db = self.recipe.desc_bytes();
        let entries = match self.recipe.captured() {
            true => shape.files,
            false => shape.files + 1,
        };
        let end = Desc::Pad {
            data: open.cursor as u64,
            row: open.rows as u32,
        };
        let slot = &self.slots[s];
        let (desc_host, descs, input, copied) =
            (slot.desc_host, slot.descs, slot.input, slot.copied);
        {
            // SAFETY: the slot is free (its done event completed or it never
            // ran), so no copy from `desc_host` is in flight.
            let table = unsafe { self.dev.pinned_mut(desc_host) };
            for k in 0..entries {
                let entry = open.placed.get(k).map_or(end, Desc::File);
                self.recipe.encode(entry, &mut table[k * db..(k + 1) * db]);
            }
        }
        self.dev
            .memcpy_ptod_async(self.copy, descs, 0, desc_host, 0, entries * db)?;
        match self.slots[s].input_host {
            Some(pinned) => self.gather_input(pinned, input, open)?,
            None => {
                for &(dst, ptr, len) in &open.copies {
                    // SAFETY: `ptr..ptr+len` lies in the bytes of the items of
                    // this batch (their `readable` ranges, merged only when
                    // adjacent); the items move into `held` (or `stranded` on
                    // failure) and are dropped only after `copied` completes
                    // (release_copied / harvest / Drop), or never.
                    unsafe { self.dev.memcpy_htod_async(self.copy, input, dst, ptr, len) }?;
                    self.stats.h2d_bytes += len as u64;
                    self.stats.h2d_copies += 1;
                }
            }
        }
        self.dev.record_event(copied, self.copy)?;
        self.dev.stream_wait_event(self.compute, copied)
    }

    /// Gathers the batch's bytes into the slot's pinned input on the copy
    /// threads, then copies them to the device in one piece.
    fn gather_input(&mut self, pinned: Pinned, input: DevBuf, open: &Open<T, B>) -> Result<()> {
        let parts: Vec<(usize, &[u8])> = (open.copies.iter())
            // SAFETY: each copy is `len` bytes of one item of this batch
            // (`needed` ≤ its length), alive while `open` is borrowed.
            .map(|&(dst, ptr, len)| (dst, unsafe { std::slice::from_raw_parts(ptr, len) }))
            .collect();
        {
            // SAFETY: the slot is free (as for `desc_host` above): no copy
            // reads its pinned input.
            let host = unsafe { self.dev.pinned_mut(pinned) };
            let (threads, min) = (self.cfg.copy_threads, host_copy::PARALLEL_MIN_BYTES);
            host_copy::gather(&parts, host, threads, min);
        }
        if open.cursor > 0 {
            self.dev
                .memcpy_ptod_async(self.copy, input, 0, pinned, 0, open.cursor)?;
            self.stats.h2d_bytes += open.cursor as u64;
            self.stats.h2d_copies += 1;
        }
        Ok(())
    }

    /// Flushes and waits for every batch; all rows reach `sink`.
    pub fn finish(&mut self, sink: &mut impl RowSink<T>) -> Result<()> {
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
