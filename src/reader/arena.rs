//! The read arena: one page-aligned anonymous mapping that file bytes are read
//! into, split into one partition per reader thread.
//!
//! The mapping is registered with io_uring (per partition, as fixed buffers) so
//! READ_FIXED can DMA straight into it, and — in the CUDA backend — with
//! `cuMemHostRegister`, so the bytes the disk wrote are the bytes the GPU copies.
//! It must stay an anonymous private mapping for that reason. The io_uring
//! registration waits until a partition's allocator has gone round once
//! ([`ArenaPart::lapped`]): registering pins every page, and faulting in a
//! fresh partition (10–60 ms for 28 MiB on the dev VM, when huge pages need
//! compaction) would otherwise come before the first read.
//!
//! Each partition is a circular allocator ([`Circular`]): extents are handed out
//! in ring order, may be released in any order (compute has several workers),
//! and the head only advances over a run of released extents at the front.
//! An [`Extent`] is an RAII handle: dropping it releases its space and wakes a
//! reader blocked in [`ArenaPart::wait_release`].
//!
//! A file too large for the partition's ring (more than a quarter of it, so one
//! big file never starves the typical ones) gets a **spill extent** instead
//! ([`ArenaPart::alloc_spill`]): its own page-aligned mapping, not registered
//! (the reader uses a plain READ for it), unmapped when the extent drops. Spill
//! bytes live at once are capped per partition by a budget, so the arena can be
//! sized for the typical file (resident memory is what the ring touches) while
//! any file up to `io.max_file_bytes` is still read.
//!
//! Invariants (checked by the model test below):
//! * live extents of a partition never overlap and lie inside the partition;
//! * every extent's address is aligned as requested;
//! * an extent never straddles a [`SEGMENT`] boundary, because each segment is
//!   one registered io_uring buffer (the kernel caps a buffer at 1 GiB).
//!
//! All `unsafe` of the arena lives here: releasing the mapping (the raw
//! `mmap`/`munmap` calls are wrapped in [`crate::runtime::sys`]), the slice
//! views of an extent, and the `Send`/`Sync` claims for the raw mapping
//! pointer.

use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The largest registered buffer the kernel accepts; partitions are registered
/// as consecutive buffers of this size (the last one shorter).
pub const SEGMENT: usize = 1 << 30;

const PAGE: usize = 4096;

/// Why an arena could not be created.
#[derive(Debug, thiserror::Error)]
pub enum ArenaError {
    #[error(
        "io.arena_bytes = {need} bytes must be locked in memory for io_uring's registered \
         buffers, but RLIMIT_MEMLOCK is {limit} bytes ({limit_kib} KiB) and the process lacks \
         CAP_IPC_LOCK; raise the limit with `ulimit -l {need_kib}` (shell) or \
         `LimitMEMLOCK={need}` in the systemd unit, or lower io.arena_bytes",
        limit_kib = limit / 1024,
        need_kib = need.div_ceil(1024)
    )]
    Memlock { limit: u64, need: u64 },
    #[error(
        "io.arena_bytes = {bytes} is too small for {parts} reader thread(s): each needs at \
         least one page ({PAGE} bytes)"
    )]
    TooSmall { bytes: u64, parts: usize },
    #[error("cannot map the {bytes}-byte read arena: {source}")]
    Map { bytes: u64, source: std::io::Error },
}

/// Rounds `v` up to a multiple of `align` (a power of two or any positive value).
fn align_up(v: usize, align: usize) -> usize {
    v.div_ceil(align) * align
}

/// Whether the process may lock memory without limit (CAP_IPC_LOCK effective).
fn has_ipc_lock() -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

/// The soft RLIMIT_MEMLOCK, `None` when unlimited (or unreadable).
fn memlock_limit() -> Option<u64> {
    crate::runtime::sys::memlock_limit().ok().flatten()
}

/// Fails when registering `need` bytes would exceed RLIMIT_MEMLOCK (io_uring
/// accounts registered buffers against it unless the process has CAP_IPC_LOCK).
pub fn check_memlock(need: u64) -> Result<(), ArenaError> {
    if has_ipc_lock() {
        return Ok(());
    }
    match memlock_limit() {
        Some(limit) if limit < need => Err(ArenaError::Memlock { limit, need }),
        _ => Ok(()),
    }
}

/// An owned anonymous mapping; unmapped on drop.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; access to its bytes
// is partitioned by the allocator (each live extent owns its range exclusively).
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` exposes only the base pointer and length.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(len: usize) -> std::io::Result<Mapping> {
        let ptr = crate::runtime::sys::map_anonymous(len)?;
        Ok(Mapping { ptr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what map_anonymous returned and was
        // given, and no extent outlives the mapping (each holds an
        // `Arc<Arena>`). A failure can only mean invalid arguments, which the
        // construction rules out; ignore it.
        let _ = unsafe { crate::runtime::sys::unmap(self.ptr, self.len) };
    }
}

/// One live allocation in ring order.
#[derive(Clone, Copy, Debug)]
struct Rec {
    start: usize,
    end: usize,
    released: bool,
}

/// The circular allocator of one partition, in offsets relative to its start.
/// Pure bookkeeping (no memory), so the model test can drive it directly.
#[derive(Debug)]
pub(crate) struct Circular {
    size: usize,
    segment: usize,
    /// Absolute address of offset 0 (alignment is of real addresses).
    base_addr: usize,
    live: VecDeque<Rec>,
    /// Sequence number of `live[0]`.
    first_seq: u64,
    /// Releases so far (the wake-up generation).
    releases: u64,
    /// Threads blocked in [`ArenaPart::wait_release`].
    waiters: usize,
    /// Bytes of live spill extents, and the most allowed at once (one spill
    /// is always allowed when none is live).
    spill_live: usize,
    spill_budget: usize,
    /// An allocation once found no room between the tail and the end: every
    /// page but the last extent's worth has been handed out at least once.
    lapped: bool,
}

impl Circular {
    pub(crate) fn new(size: usize, segment: usize, base_addr: usize) -> Circular {
        Circular {
            size,
            segment,
            base_addr,
            live: VecDeque::new(),
            first_seq: 0,
            releases: 0,
            waiters: 0,
            spill_live: 0,
            spill_budget: 0,
            lapped: false,
        }
    }

    /// First aligned start ≥ `from` whose `len` bytes stay inside one segment
    /// and end at or before `limit`.
    fn place(&self, from: usize, limit: usize, len: usize, align: usize) -> Option<usize> {
        let aligned = |o: usize| align_up(self.base_addr + o, align) - self.base_addr;
        let mut s = aligned(from);
        if s / self.segment != (s + len - 1) / self.segment {
            s = aligned((s / self.segment + 1) * self.segment);
            if s / self.segment != (s + len - 1) / self.segment {
                return None;
            }
        }
        (s + len <= limit).then_some(s)
    }

    /// Reserves `len` (> 0) bytes aligned to `align`; `(offset, seq)` or `None`
    /// when there is no room now.
    pub(crate) fn alloc(&mut self, len: usize, align: usize) -> Option<(usize, u64)> {
        debug_assert!(len > 0 && align > 0);
        let start = match (self.live.front(), self.live.back()) {
            (Some(head), Some(tail)) if tail.end > head.start => {
                match self.place(tail.end, self.size, len, align) {
                    Some(s) => Some(s),
                    None => {
                        self.lapped = true;
                        self.place(0, head.start, len, align)
                    }
                }
            }
            (Some(head), Some(tail)) => self.place(tail.end, head.start, len, align),
            _ => self.place(0, self.size, len, align),
        }?;
        self.check_placed(start, len, align);
        let seq = self.first_seq + self.live.len() as u64;
        self.live.push_back(Rec {
            start,
            end: start + len,
            released: false,
        });
        Some((start, seq))
    }

    /// The allocator's invariants for a new extent at `start..start + len`,
    /// before it is handed out (the module doc's list): inside the
    /// partition, aligned as asked, within one segment, and in the free gap
    /// — after the tail or, once the ring wrapped, before the head — so it
    /// overlaps no live extent. O(1) per file. The other side of the
    /// boundary is [`Circular::release`] (only a live, unreleased sequence
    /// number frees space). Tests: `tests::allocator_model` (proptest, every
    /// allocation of random runs) and
    /// `tests::an_extent_over_a_live_one_is_a_bug` (it fires).
    fn check_placed(&self, start: usize, len: usize, align: usize) {
        assert!(
            start + len <= self.size,
            "arena extent {start}+{len} ends past the partition ({})",
            self.size
        );
        assert!(
            (self.base_addr + start).is_multiple_of(align),
            "arena extent at {start} is not aligned to {align}"
        );
        assert_eq!(
            start / self.segment,
            (start + len - 1) / self.segment,
            "arena extent {start}+{len} straddles a segment boundary"
        );
        if let (Some(head), Some(tail)) = (self.live.front(), self.live.back()) {
            let in_gap = if tail.end > head.start {
                start >= tail.end || start + len <= head.start
            } else {
                start >= tail.end && start + len <= head.start
            };
            assert!(
                in_gap,
                "arena extent {start}+{len} overlaps the live ones ({}..{})",
                head.start, tail.end
            );
        }
    }

    /// Marks `seq` free; the head advances over the released run at the front.
    /// Returns false for an unknown sequence number.
    pub(crate) fn release(&mut self, seq: u64) -> bool {
        let Some(rec) = seq
            .checked_sub(self.first_seq)
            .and_then(|i| self.live.get_mut(i as usize))
        else {
            return false;
        };
        if rec.released {
            return false;
        }
        rec.released = true;
        while self.live.front().is_some_and(|r| r.released) {
            self.live.pop_front();
            self.first_seq += 1;
        }
        self.releases += 1;
        true
    }

    /// Whether the allocator has gone round once (see the field).
    pub(crate) fn lapped(&self) -> bool {
        self.lapped
    }

    /// Largest extent that can ever be allocated at `align`.
    pub(crate) fn max_extent(&self, align: usize) -> usize {
        let lead = align_up(self.base_addr, align) - self.base_addr;
        self.size.min(self.segment).saturating_sub(lead)
    }
}

/// Shared state of one partition.
struct Part {
    /// Offset of the partition in the mapping (page-aligned).
    base: usize,
    size: usize,
    segment: usize,
    alloc: Mutex<Circular>,
    released: Condvar,
}

/// The whole arena: one mapping, `parts` partitions.
pub struct Arena {
    map: Mapping,
    parts: Box<[Part]>,
    /// Releases of unknown extents (a bug if ever non-zero; never panics in Drop).
    bad_releases: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arena")
            .field("bytes", &self.map.len)
            .field("parts", &self.parts.len())
            .finish()
    }
}

impl Arena {
    /// Maps `bytes` (rounded to whole pages per partition) split into `parts`
    /// equal partitions, after checking RLIMIT_MEMLOCK covers the registration.
    /// Spill extents of a partition may hold up to its own size at once.
    pub fn new(bytes: u64, parts: usize) -> Result<Arc<Arena>, ArenaError> {
        Self::with_segment(bytes, parts, SEGMENT, 0)
    }

    /// As [`Arena::new`], with spill extents of a partition allowed up to
    /// `max(spill_budget, partition size)` bytes at once.
    pub fn with_spill(
        bytes: u64,
        parts: usize,
        spill_budget: u64,
    ) -> Result<Arc<Arena>, ArenaError> {
        Self::with_segment(bytes, parts, SEGMENT, spill_budget)
    }

    fn with_segment(
        bytes: u64,
        parts: usize,
        segment: usize,
        spill_budget: u64,
    ) -> Result<Arc<Arena>, ArenaError> {
        let parts = parts.max(1);
        let per = (bytes / parts as u64) as usize / PAGE * PAGE;
        if per == 0 {
            return Err(ArenaError::TooSmall { bytes, parts });
        }
        let len = per * parts;
        check_memlock(len as u64)?;
        let map = Mapping::new(len).map_err(|source| ArenaError::Map {
            bytes: len as u64,
            source,
        })?;
        let base_addr = map.ptr.as_ptr() as usize;
        let parts = (0..parts)
            .map(|i| Part {
                base: i * per,
                size: per,
                segment,
                alloc: Mutex::new(Circular {
                    spill_budget: per.max(usize::try_from(spill_budget).unwrap_or(usize::MAX)),
                    ..Circular::new(per, segment, base_addr + i * per)
                }),
                released: Condvar::new(),
            })
            .collect();
        Ok(Arc::new(Arena {
            map,
            parts,
            bad_releases: Default::default(),
        }))
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.map.len
    }

    pub fn is_empty(&self) -> bool {
        self.map.len == 0
    }

    /// Start of the mapping (for `cuMemHostRegister`).
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.ptr.as_ptr()
    }

    /// Number of partitions.
    pub fn parts(&self) -> usize {
        self.parts.len()
    }

    /// The whole mapping as iovecs of at most [`SEGMENT`] bytes.
    pub fn iovecs(&self) -> Vec<libc::iovec> {
        segments(self.as_ptr(), self.map.len, SEGMENT)
    }

    /// Partition `i`'s handle (panics when `i ≥ parts()`).
    pub fn part(self: &Arc<Self>, i: usize) -> ArenaPart {
        assert!(i < self.parts.len(), "arena has {} parts", self.parts.len());
        ArenaPart {
            arena: Arc::clone(self),
            index: i,
        }
    }

    /// Releases of extents the allocator did not know (should stay 0).
    pub fn bad_releases(&self) -> u64 {
        self.bad_releases.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn lock(&self, part: usize) -> std::sync::MutexGuard<'_, Circular> {
        self.parts[part]
            .alloc
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

fn segments(base: *mut u8, len: usize, segment: usize) -> Vec<libc::iovec> {
    (0..len.div_ceil(segment))
        .map(|k| libc::iovec {
            iov_base: base.wrapping_add(k * segment).cast(),
            iov_len: segment.min(len - k * segment),
        })
        .collect()
}

/// One reader thread's partition.
pub struct ArenaPart {
    arena: Arc<Arena>,
    index: usize,
}

impl std::fmt::Debug for ArenaPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArenaPart")
            .field("index", &self.index)
            .field("size", &self.size())
            .finish()
    }
}

impl ArenaPart {
    fn part(&self) -> &Part {
        &self.arena.parts[self.index]
    }

    /// Bytes in this partition.
    pub fn size(&self) -> usize {
        self.part().size
    }

    /// The arena this partition belongs to.
    pub fn arena(&self) -> &Arc<Arena> {
        &self.arena
    }

    /// This partition as io_uring fixed buffers: buffer `k` is segment `k`
    /// (see [`Extent::buf_index`]).
    pub fn iovecs(&self) -> Vec<libc::iovec> {
        let part = self.part();
        segments(
            self.arena.as_ptr().wrapping_add(part.base),
            part.size,
            part.segment,
        )
    }

    /// Whether the allocator has gone round the partition once, so nearly
    /// every page of it has been written: registering it with io_uring then
    /// pins pages already there instead of faulting in the whole partition
    /// (see `reader::uring::engine`).
    pub fn lapped(&self) -> bool {
        self.arena.lock(self.index).lapped()
    }

    /// Largest extent this partition can ever hand out at `align`.
    pub fn max_extent(&self, align: usize) -> usize {
        self.arena.lock(self.index).max_extent(align)
    }

    /// An extent of `len` bytes (valid length 0) whose address is a multiple
    /// of `align`, or `None` when there is no room until something is released.
    /// `len == 0` always succeeds and takes no space.
    pub fn alloc(&self, len: usize, align: usize) -> Option<Extent> {
        if len == 0 {
            return Some(self.empty());
        }
        let (offset, seq) = self.arena.lock(self.index).alloc(len, align.max(1))?;
        Some(self.extent(offset, seq, len))
    }

    /// A zero-length extent (takes no space; for empty files).
    pub fn empty(&self) -> Extent {
        self.extent(0, EMPTY, 0)
    }

    /// Extents longer than this should be spills ([`ArenaPart::alloc_spill`]):
    /// a quarter of the partition, or less where segments or `align` cap it.
    pub fn spill_above(&self, align: usize) -> usize {
        (self.size() / 4).min(self.max_extent(align))
    }

    /// A spill extent of `len` (> 0) bytes: its own page-aligned mapping, not
    /// a registered buffer ([`Extent::buf_index`] is `None`). `Ok(None)` while
    /// live spills would exceed the partition's budget; the next release of
    /// any extent of this partition may make room ([`ArenaPart::wait_release`]).
    pub fn alloc_spill(&self, len: usize) -> Result<Option<Extent>, ArenaError> {
        let cap = align_up(len.max(1), PAGE);
        {
            let mut g = self.arena.lock(self.index);
            if g.spill_live > 0 && g.spill_live + cap > g.spill_budget {
                return Ok(None);
            }
            g.spill_live += cap;
        }
        match Mapping::new(cap) {
            Ok(map) => {
                let mut e = self.extent(0, SPILL, cap);
                e.spill = Some(map);
                Ok(Some(e))
            }
            Err(source) => {
                self.arena.lock(self.index).spill_live -= cap;
                Err(ArenaError::Map {
                    bytes: cap as u64,
                    source,
                })
            }
        }
    }

    /// Bytes of live spill extents in this partition.
    pub fn spill_live(&self) -> usize {
        self.arena.lock(self.index).spill_live
    }

    fn extent(&self, offset: usize, seq: u64, len: usize) -> Extent {
        Extent {
            arena: Arc::clone(&self.arena),
            part: self.index,
            seq,
            offset: self.part().base + offset,
            part_offset: offset,
            spill: None,
            cap: len,
            start: 0,
            len: 0,
        }
    }

    /// Releases so far; pass to [`ArenaPart::wait_release`] to wait for the next.
    pub fn releases(&self) -> u64 {
        self.arena.lock(self.index).releases
    }

    /// Blocks until an extent of this partition is released after `seen`
    /// (a value of [`ArenaPart::releases`]) or `timeout` passes. True if one was.
    pub fn wait_release(&self, seen: u64, timeout: Duration) -> bool {
        let part = self.part();
        let mut g = self.arena.lock(self.index);
        let deadline = std::time::Instant::now() + timeout;
        while g.releases == seen {
            let now = std::time::Instant::now();
            if now >= deadline {
                return false;
            }
            g.waiters += 1;
            g = part
                .released
                .wait_timeout(g, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            g.waiters -= 1;
        }
        true
    }
}

/// Sequence number of the zero-length extent (never registered).
const EMPTY: u64 = u64::MAX;
/// Sequence number of a spill extent (its own mapping, never registered).
const SPILL: u64 = u64::MAX - 1;

/// A range of the arena owned by one file: written by the reader (through
/// [`Extent::as_mut_ptr`]), then read through `Deref` over its valid length.
/// Dropping it returns the space to its partition.
pub struct Extent {
    arena: Arc<Arena>,
    part: usize,
    seq: u64,
    /// Offset in the mapping.
    offset: usize,
    /// Offset in the partition.
    part_offset: usize,
    /// A spill extent's own mapping (then `offset` means nothing).
    spill: Option<Mapping>,
    cap: usize,
    /// First valid byte (a ranged read's view starts inside the extent).
    start: usize,
    len: usize,
}

// SAFETY: an extent exclusively owns its byte range (allocator invariant), so
// moving it to another thread moves that ownership; the arena is Sync.
unsafe impl Send for Extent {}
// SAFETY: `&Extent` only gives shared reads of bytes nobody else writes.
unsafe impl Sync for Extent {}

impl std::fmt::Debug for Extent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extent")
            .field("part", &self.part)
            .field("offset", &self.offset)
            .field("cap", &self.cap)
            .field("start", &self.start)
            .field("len", &self.len)
            .finish()
    }
}

impl Extent {
    /// Bytes reserved (the most that may be written).
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Bytes reserved from the first valid byte on (what may be read past
    /// the valid bytes through `Deref`'s pointer, e.g. by a device copy).
    pub fn room(&self) -> usize {
        self.cap - self.start
    }

    /// Start of the reserved range, for the kernel to write into. The caller
    /// must not read the extent (Deref) while a write through it is in flight.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.base()
    }

    fn base(&self) -> *mut u8 {
        match &self.spill {
            Some(m) => m.ptr.as_ptr(),
            None => self.arena.as_ptr().wrapping_add(self.offset),
        }
    }

    /// Offset of the extent in the whole mapping (for a device-side view);
    /// `None` for a spill extent, which lies outside it.
    pub fn offset(&self) -> Option<usize> {
        self.spill.is_none().then_some(self.offset)
    }

    /// Index of the registered buffer (partition segment) holding the extent;
    /// `None` for a spill extent (not registered: read it with a plain READ).
    pub fn buf_index(&self) -> Option<u16> {
        self.spill
            .is_none()
            .then(|| (self.part_offset / self.arena.parts[self.part].segment) as u16)
    }

    /// Sets how many leading bytes are valid. Panics if `len > capacity()`.
    pub fn set_len(&mut self, len: usize) {
        self.set_view(0, len);
    }

    /// Makes `[start, start + len)` of the reserved range the valid bytes
    /// (what `Deref` shows): a ranged read keeps the aligned blocks around
    /// its bytes in the extent but hands on only these. Panics past the
    /// capacity.
    pub fn set_view(&mut self, start: usize, len: usize) {
        assert!(
            start.checked_add(len).is_some_and(|end| end <= self.cap),
            "extent view {start}+{len} > capacity {}",
            self.cap
        );
        self.start = start;
        self.len = len;
    }

    /// The whole reserved range, writable (for filling without the kernel).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.cap == 0 {
            return &mut [];
        }
        // SAFETY: [base, base+cap) lies inside the live arena mapping (held by
        // `self.arena`) or is the extent's own spill mapping (held by
        // `self.spill`), is owned by this extent alone (allocator invariant),
        // and is initialised (anonymous memory is zero-filled); `&mut self`
        // makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.as_mut_ptr(), self.cap) }
    }
}

impl std::ops::Deref for Extent {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: as in `as_mut_slice`; `start + len ≤ cap` (`set_view`), and
        // by the contract of `as_mut_ptr` no write is in flight while the
        // extent is read.
        unsafe { std::slice::from_raw_parts(self.base().wrapping_add(self.start), self.len) }
    }
}

impl Drop for Extent {
    fn drop(&mut self) {
        if self.seq == EMPTY {
            return;
        }
        // A spill's mapping is unmapped here, before its budget is returned.
        let spilled = self.spill.take().is_some();
        let (ok, waiters) = {
            let mut g = self.arena.lock(self.part);
            if spilled {
                g.spill_live -= self.cap;
                g.releases += 1;
                (true, g.waiters)
            } else {
                (g.release(self.seq), g.waiters)
            }
        };
        if !ok {
            self.arena
                .bad_releases
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if waiters > 0 {
            self.arena.parts[self.part].released.notify_all();
        }
    }
}

#[cfg(test)]
mod tests;
