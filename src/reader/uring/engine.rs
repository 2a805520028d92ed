//! One reader thread's io_uring and its per-file state machine.
//!
//! Every file occupies one *slot* from admission until its descriptor is
//! closed; slot `i` is also fixed-file slot `i` of the ring (a direct
//! descriptor, never a process fd) and owns `paths[i]` and `statx[i]`, which
//! the kernel reads/writes while the slot's requests are in flight.
//!
//! ```text
//! Opening:  OPENAT(direct → slot) ─link→ STATX(path)        2 CQEs
//!   open EPERM + O_NOATIME → retry without; EINVAL + O_DIRECT → retry buffered
//!   open failed → reject (no descriptor); stat/type/size refused → reject + CLOSE
//!   arena full → WaitArena (descriptor stays open) until an extent is released
//!   (a file over `ArenaPart::spill_above` waits for a spill extent instead)
//! Reading:  READ_FIXED(slot, extent) ─hardlink→ CLOSE(slot)  2 CQEs
//!   (a spill extent is not a registered buffer: plain READ instead; so are
//!   the reads of the partition's first lap, see "Registration" below)
//!   the hard link closes the file even when the read is short or fails; the
//!   extent is delivered at the READ CQE; a short read re-opens at the aligned
//!   offset it stopped at (Opening again, size re-checked)
//! Closing:  CLOSE(slot)                                      1 CQE
//! ```
//!
//! A ranged job ([`Next::Range`], a segment of a long WAV) lives the same
//! life: its READ covers the blocks around the range, O_DIRECT where the
//! file allows it, and its prefix is placed in front of the range's first
//! byte when the READ completes; [`plan`] has the layout, the refusals and
//! the extent planning shared by whole files and ranges.
//!
//! `user_data` = epoch (32 bits) | slot (24) | op kind (8); a slot is reused only
//! after every CQE of its previous requests has arrived (`pending == 0`).
//!
//! Registration: the partition is registered as fixed buffers once its
//! allocator has gone round it ([`ArenaPart::lapped`]), between two
//! submissions on this thread; until then reads are plain READs into the same
//! memory. Registering pins every page of the partition, and pinning pages
//! that are not there yet faults them in (and, with huge pages, may compact
//! memory first): 2–50 ms for a 28 MiB partition on the dev VM, which at
//! start-up came before the first read. After one lap the pages are there and
//! the pin is cheap; a build or serve that never fills its arena never pays
//! it. A registration that fails is logged once and reads stay plain.
//!
//! Buffer lifetime: a busy slot's path, statx buffer and extent are not touched
//! or freed until its CQEs arrive. If the engine is dropped with slots still
//! busy (a fatal ring error or a panic in the callback), it leaks those
//! buffers instead of freeing memory the kernel may still write.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::mem::ManuallyDrop;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

use io_uring::{IoUring, opcode, squeue, types};

use super::slot::{CLOSE, OPEN, Phase, READ, STATX, Slot, Then, push_free, slot_of, user_data};
use super::{RunStats, SetupError, UringOptions};
use crate::reader::arena::ArenaPart;
use crate::reader::{Error, FileBytes, ReadRange};

mod plan;

const STATX_DIOALIGN: u32 = 0x2000;
const STATX_DIO_READ_ALIGN: u32 = 0x2_0000;

/// What a job stream has for [`UringEngine::run_stream`].
pub enum Next<P> {
    /// Read this file for this job.
    Job(usize, P),
    /// Read this part of this file for this job: the bytes delivered are
    /// the range's prefix, then exactly its bytes (see `plan`).
    Range(usize, P, ReadRange),
    /// Nothing now; ask again after the next completion.
    Later,
    /// Nothing ever again.
    End,
}

pub(super) type Done<'a> = dyn FnMut(usize, Result<FileBytes, Error>, Duration) -> bool + 'a;

/// One thread's ring over one arena partition. Not shared between threads.
pub struct UringEngine {
    // Field order is drop order: the ring goes before the buffers it names.
    ring: IoUring,
    slots: Vec<Slot>,
    paths: ManuallyDrop<Vec<Vec<u8>>>,
    statx: ManuallyDrop<Box<[libc::statx]>>,
    part: ArenaPart,
    opts: UringOptions,
    free: Vec<usize>,
    waiting: VecDeque<usize>,
    /// SQEs pushed whose CQE has not been reaped.
    in_kernel: usize,
    cqes: Vec<(u64, i32)>,
    block_sizes: HashMap<(u32, u32), u64>,
    stopping: bool,
    /// A fatal ring error happened; slots may still be busy in the kernel.
    broken: bool,
    buffers: Buffers,
    stats: RunStats,
}

/// Whether the partition is registered as the ring's fixed buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Buffers {
    /// Not yet: the allocator has not gone round the partition.
    Pending,
    Registered,
    /// Registration failed (logged); reads stay plain.
    Failed,
}

impl UringEngine {
    /// A ring with `opts.queue_depth` file slots and `queue_depth` sparse
    /// fixed-file slots over `part`, which is registered as fixed buffers
    /// once its allocator has gone round it (see the module documentation).
    pub fn new(opts: &UringOptions, part: ArenaPart) -> Result<UringEngine, SetupError> {
        let depth = opts.queue_depth.clamp(1, 1 << 16);
        let entries = (depth * 4).next_power_of_two().min(32768) as u32;
        let ring = IoUring::builder()
            .setup_coop_taskrun()
            .setup_submit_all()
            .build(entries)
            .or_else(|_| IoUring::new(entries))
            .map_err(|source| SetupError::Ring { entries, source })?;
        ring.submitter()
            .register_files_sparse(depth as u32)
            .map_err(SetupError::RegisterFiles)?;
        // SAFETY: `libc::statx` is plain old data; all-zero is a valid value.
        let zero: libc::statx = unsafe { std::mem::zeroed() };
        Ok(UringEngine {
            ring,
            slots: (0..depth).map(|_| Slot::default()).collect(),
            paths: ManuallyDrop::new(vec![Vec::new(); depth]),
            statx: ManuallyDrop::new(vec![zero; depth].into_boxed_slice()),
            part,
            opts: opts.clone(),
            free: (0..depth).rev().collect(),
            waiting: VecDeque::new(),
            in_kernel: 0,
            cqes: Vec::with_capacity(entries as usize * 2),
            block_sizes: HashMap::new(),
            stopping: false,
            broken: false,
            buffers: Buffers::Pending,
            stats: RunStats::default(),
        })
    }

    /// Whether reads now go into registered buffers (READ_FIXED).
    pub fn buffers_registered(&self) -> bool {
        self.buffers == Buffers::Registered
    }

    /// Registers the partition as fixed buffers once it has been gone round
    /// (see the module documentation); true when they are registered.
    fn fixed_buffers(&mut self) -> bool {
        if self.buffers == Buffers::Pending && self.part.lapped() {
            let t = Instant::now();
            let iov = self.part.iovecs();
            // SAFETY: the iovecs cover this engine's partition of the arena
            // mapping, which `part` (an `Arc<Arena>` inside) keeps mapped for
            // at least as long as the ring: `ring` is dropped first (field
            // order). Plain reads in flight into the same memory are not
            // affected by the registration.
            match unsafe { self.ring.submitter().register_buffers(&iov) } {
                Ok(()) => {
                    self.buffers = Buffers::Registered;
                    tracing::debug!(
                        bytes = self.part.size(),
                        seconds = t.elapsed().as_secs_f64(),
                        "Registered the read arena partition with io_uring."
                    );
                }
                Err(source) => {
                    self.buffers = Buffers::Failed;
                    let e = SetupError::RegisterBuffers {
                        bytes: self.part.size() as u64,
                        source,
                    };
                    tracing::warn!(error = %e, "Reading without registered buffers.");
                }
            }
        }
        self.buffers == Buffers::Registered
    }

    /// The partition this engine reads into.
    pub fn part(&self) -> &ArenaPart {
        &self.part
    }

    /// Pulls `(job, path)` from `next` until it returns `None`, keeping up to
    /// `queue_depth` files in flight, and calls `done(job, bytes, latency)` for
    /// each file in completion order. `done` returning false stops early
    /// (files in flight are finished and dropped undelivered). On a fatal ring
    /// error, every file in flight is delivered as a read error first.
    /// Paths are copied into the slot at admission, so `next` may hand out
    /// borrowed or owned paths.
    pub fn run<P: AsRef<Path>>(
        &mut self,
        mut next: impl FnMut() -> Option<(usize, P)>,
        done: impl FnMut(usize, Result<FileBytes, Error>, Duration) -> bool,
    ) -> io::Result<RunStats> {
        self.run_stream(
            || match next() {
                Some((job, path)) => Next::Job(job, path),
                None => Next::End,
            },
            done,
        )
    }

    /// [`UringEngine::run`] over a stream that may run dry for a while: on
    /// [`Next::Later`] the engine keeps reaping the files it has in flight and
    /// asks again after each completion, so a producer that is momentarily
    /// behind never drains the ring; the run returns once nothing is in
    /// flight and `next` has nothing (`Later`) or never will (`End`).
    pub fn run_stream<P: AsRef<Path>>(
        &mut self,
        next: impl FnMut() -> Next<P>,
        done: impl FnMut(usize, Result<FileBytes, Error>, Duration) -> bool,
    ) -> io::Result<RunStats> {
        self.run_stream_until(next, done, &|| false)
    }

    /// [`UringEngine::run_stream`] that also stops when `closed()` says the
    /// files' consumer is gone, which `done` can only say for a file it is
    /// given: files waiting for room in the arena, which only that consumer
    /// can free (and a failed GPU stage may never free), are then dropped
    /// undelivered instead of waited for.
    pub fn run_stream_until<P: AsRef<Path>>(
        &mut self,
        mut next: impl FnMut() -> Next<P>,
        mut done: impl FnMut(usize, Result<FileBytes, Error>, Duration) -> bool,
        closed: &dyn Fn() -> bool,
    ) -> io::Result<RunStats> {
        if self.broken {
            return Err(io::Error::other("the io_uring engine failed earlier"));
        }
        let started = Instant::now();
        self.stats = RunStats::default();
        self.stopping = false;
        let r = self.run_loop(&mut next, &mut done, closed);
        self.stats.wall = started.elapsed();
        match r {
            Ok(()) => Ok(self.stats.clone()),
            Err(e) => {
                self.broken = true;
                self.fail_in_flight(&e, &mut done);
                Err(e)
            }
        }
    }

    fn run_loop<P: AsRef<Path>>(
        &mut self,
        next: &mut dyn FnMut() -> Next<P>,
        done: &mut Done<'_>,
        closed: &dyn Fn() -> bool,
    ) -> io::Result<()> {
        let mut exhausted = false;
        loop {
            let mut dry = false;
            while !self.stopping && !exhausted && !dry && !self.free.is_empty() {
                match next() {
                    Next::End => exhausted = true,
                    Next::Later => dry = true,
                    Next::Job(job, path) => self.admit(job, path.as_ref(), None, done)?,
                    Next::Range(job, path, r) => {
                        self.admit(job, path.as_ref(), Some(r), done)?;
                    }
                }
            }
            let seen = self.part.releases();
            self.service_waiters(done)?;
            if self.free.len() == self.slots.len() && (exhausted || dry || self.stopping) {
                return Ok(());
            }
            if self.in_kernel > 0 {
                match self.ring.submit_and_wait(1) {
                    Ok(_) => {}
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {}
                    Err(e) => return Err(e),
                }
                self.reap(done)?;
            } else if !self.waiting.is_empty() {
                // Nothing in flight: only a release by compute can unblock
                // us, unless compute is gone (the next pass closes them).
                self.stats.arena_waits += 1;
                if !self.part.wait_release(seen, Duration::from_millis(100)) && closed() {
                    self.stopping = true;
                }
            } else {
                return Err(io::Error::other(
                    "io_uring engine stalled: busy slots but nothing in flight",
                ));
            }
        }
    }

    /// Takes a free slot for `job` (the whole file, or `range` of it) and
    /// submits OPENAT → STATX.
    fn admit(
        &mut self,
        job: usize,
        path: &Path,
        range: Option<ReadRange>,
        done: &mut Done<'_>,
    ) -> io::Result<()> {
        let i = self.free.pop().expect("admit needs a free slot");
        let s = &mut self.slots[i];
        *s = Slot {
            epoch: s.epoch.wrapping_add(1),
            job,
            started: Some(Instant::now()),
            // No O_CLOEXEC: a direct descriptor never enters the fd table (so
            // exec cannot inherit it), and the kernel rejects the flag with
            // EINVAL when a fixed slot is the target.
            // O_NOFOLLOW: a path that is (or became) a symbolic link is not
            // read; callers resolve the links they mean to follow.
            // O_NONBLOCK: a FIFO with no writer would hold the OPENAT (and
            // the ring's wait for it) for ever; it opens at once and its
            // statx refuses it (`refusal`). A regular file's reads wait as
            // usual (the kernel retries them; a filesystem that cannot
            // answers EAGAIN, and `on_read` reopens without the flag).
            flags: libc::O_RDONLY | libc::O_NOATIME | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            align: 1,
            range,
            ..Slot::default()
        };
        if self.opts.direct {
            s.flags |= libc::O_DIRECT;
        }
        let p = &mut self.paths[i];
        p.clear();
        p.extend_from_slice(path.as_os_str().as_bytes());
        if p.contains(&0) {
            let e = io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte");
            self.deliver(i, Err(Error::Open(e)), done);
            self.release_slot(i);
            return Ok(());
        }
        p.push(0);
        self.submit_open(i)
    }

    fn submit_open(&mut self, i: usize) -> io::Result<()> {
        let s = &mut self.slots[i];
        s.phase = Phase::Opening;
        s.then = Then::Free;
        s.pending = 2;
        let path = self.paths[i].as_ptr().cast::<libc::c_char>();
        let dest = types::DestinationSlot::try_from_slot_target(i as u32)
            .map_err(|_| io::Error::other("fixed-file slot out of range"))?;
        let open = opcode::OpenAt::new(types::Fd(libc::AT_FDCWD), path)
            .file_index(Some(dest))
            .flags(s.flags)
            .build()
            .flags(squeue::Flags::IO_LINK)
            .user_data(user_data(i, s.epoch, OPEN));
        // Raw pointer into the boxed slice; no reference to it is held while
        // the kernel writes.
        let buf = self
            .statx
            .as_mut_ptr()
            .wrapping_add(i)
            .cast::<types::statx>();
        let statx = opcode::Statx::new(types::Fd(libc::AT_FDCWD), path, buf)
            .mask(libc::STATX_TYPE | libc::STATX_SIZE | STATX_DIOALIGN | STATX_DIO_READ_ALIGN)
            .build()
            .user_data(user_data(i, s.epoch, STATX));
        // SAFETY: `paths[i]` (NUL-terminated) and `statx[i]` belong to slot i,
        // which stays busy — so neither is modified, moved or freed — until
        // both CQEs arrive; on drop with busy slots they are leaked.
        unsafe { self.push(&[open, statx]) }
    }

    /// Submits a lone CLOSE of slot `i`'s direct descriptor.
    fn submit_close(&mut self, i: usize) -> io::Result<()> {
        let s = &mut self.slots[i];
        s.phase = Phase::Closing;
        s.then = Then::Free;
        s.pending = 1;
        let close = opcode::Close::new(types::Fixed(i as u32))
            .build()
            .user_data(user_data(i, s.epoch, CLOSE));
        // SAFETY: CLOSE references no memory.
        unsafe { self.push(&[close]) }
    }

    /// Submits READ_FIXED (from the aligned resume point) hard-linked to CLOSE.
    /// File offset `off` lands at extent byte `lead + (off - base)`
    /// (`plan::layout`); one read asks for at most 1 GiB (the kernel caps a
    /// read below 2 GiB anyway) and a short one resumes.
    fn submit_read(&mut self, i: usize) -> io::Result<()> {
        let fixed = self.fixed_buffers();
        let s = &mut self.slots[i];
        let target = s.target();
        let e = s.extent.as_mut().expect("a read needs an extent");
        let off = s.got / s.align * s.align;
        let end = if s.align == 1 {
            target
        } else {
            s.base + (e.capacity() - s.lead) as u64
        };
        let len = (end - off).min(1 << 30) as u32;
        let buf = e
            .as_mut_ptr()
            .wrapping_add(s.lead + (off - s.base) as usize);
        s.read_off = off;
        s.phase = Phase::Reading;
        s.then = Then::Free;
        s.pending = 2;
        let read = match e.buf_index().filter(|_| fixed) {
            Some(index) => {
                self.stats.fixed_reads += 1;
                opcode::ReadFixed::new(types::Fixed(i as u32), buf, len, index)
                    .offset(off)
                    .build()
            }
            None => opcode::Read::new(types::Fixed(i as u32), buf, len)
                .offset(off)
                .build(),
        };
        let read = read
            .flags(squeue::Flags::IO_HARDLINK)
            .user_data(user_data(i, s.epoch, READ));
        let close = opcode::Close::new(types::Fixed(i as u32))
            .build()
            .user_data(user_data(i, s.epoch, CLOSE));
        // SAFETY: `buf..buf+len` lies inside the extent held by slot i (base ≤
        // off ≤ end ≤ base + capacity - lead), which is registered buffer `buf_index` when `fixed`
        // (otherwise memory the extent owns, read without registration); the slot
        // keeps the extent, unread, until the READ CQE arrives, and on drop
        // with busy slots the extent is leaked, never released for reuse.
        unsafe { self.push(&[read, close]) }
    }

    /// # Safety
    ///
    /// Every buffer the entries point to must stay valid and untouched until
    /// their CQEs are reaped (or be leaked).
    unsafe fn push(&mut self, entries: &[squeue::Entry]) -> io::Result<()> {
        loop {
            // SAFETY: forwarded from this function's contract.
            if unsafe { self.ring.submission().push_multiple(entries) }.is_ok() {
                self.in_kernel += entries.len();
                return Ok(());
            }
            // Queue full: hand what is queued to the kernel and retry.
            match self.ring.submit() {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {
                    self.ring.submit_and_wait(1).map(drop).or_else(|e| {
                        if e.raw_os_error() == Some(libc::EINTR) {
                            Ok(())
                        } else {
                            Err(e)
                        }
                    })?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn reap(&mut self, done: &mut Done<'_>) -> io::Result<()> {
        let mut cqes = std::mem::take(&mut self.cqes);
        cqes.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        self.in_kernel -= cqes.len();
        let mut r = Ok(());
        for &(ud, res) in &cqes {
            if r.is_ok() {
                r = self.on_cqe(ud, res, done);
            }
        }
        cqes.clear();
        self.cqes = cqes;
        r
    }

    fn on_cqe(&mut self, ud: u64, res: i32, done: &mut Done<'_>) -> io::Result<()> {
        let (i, kind) = slot_of(&self.slots, ud);
        let s = &mut self.slots[i];
        s.pending -= 1;
        match kind {
            OPEN => s.open_res = res,
            STATX => s.statx_res = res,
            READ => self.on_read(i, res, done),
            _ => {
                if res < 0 {
                    self.stats.close_errors += 1;
                }
            }
        }
        if self.slots[i].pending > 0 {
            return Ok(());
        }
        match (self.slots[i].phase, self.slots[i].then) {
            (Phase::Opening, _) => self.after_open(i, done),
            (_, Then::Reopen) if !self.stopping => self.submit_open(i),
            _ => {
                self.release_slot(i);
                Ok(())
            }
        }
    }

    fn after_open(&mut self, i: usize, done: &mut Done<'_>) -> io::Result<()> {
        let s = &mut self.slots[i];
        if s.open_res < 0 {
            let errno = -s.open_res;
            if errno == libc::EPERM && s.flags & libc::O_NOATIME != 0 {
                s.flags &= !libc::O_NOATIME;
                self.stats.noatime_retries += 1;
                return self.submit_open(i);
            }
            if errno == libc::EINVAL && s.flags & libc::O_DIRECT != 0 {
                s.flags &= !libc::O_DIRECT;
                s.buffered = true;
                s.align = 1;
                return self.submit_open(i);
            }
            let e = Error::Open(io::Error::from_raw_os_error(errno));
            self.deliver(i, Err(e), done);
            self.release_slot(i);
            return Ok(());
        }
        // The file is open in fixed slot i: every path below must close it.
        if self.stopping {
            return self.submit_close(i);
        }
        let st = self.statx[i];
        let size = st.stx_size;
        if let Some(e) = self.refusal(i, &st) {
            self.deliver(i, Err(e), done);
            return self.submit_close(i);
        }
        let s = &mut self.slots[i];
        s.size = Some(size);
        if size == 0 && s.range.is_none() {
            let empty = FileBytes::Arena(self.part.empty());
            self.deliver(i, Ok(empty), done);
            return self.submit_close(i);
        }
        if s.extent.is_some() {
            return self.submit_read(i); // resuming after a short read
        }
        self.plan_extent(i, &st, done)
    }

    fn deliver(&mut self, i: usize, r: Result<FileBytes, Error>, done: &mut Done<'_>) {
        self.slots[i].delivered = true;
        let s = &self.slots[i];
        let latency = s.started.map_or(Duration::ZERO, |t| t.elapsed());
        match &r {
            Ok(b) => {
                // A range's prefix is the source's, not bytes read.
                let prefix = s.range.as_ref().map_or(0, |r| r.prefix.len());
                self.stats.files_ok += 1;
                self.stats.bytes += (b.len() - prefix) as u64;
                self.stats.buffered_fallbacks += u64::from(s.buffered && self.opts.direct);
            }
            Err(_) => self.stats.files_rejected += 1,
        }
        if self.stopping {
            return;
        }
        let t = Instant::now();
        let go = done(s.job, r, latency);
        self.stats.blocked_in_done += t.elapsed();
        self.stopping |= !go;
    }

    fn release_slot(&mut self, i: usize) {
        let s = &mut self.slots[i];
        s.phase = Phase::Free;
        s.extent = None;
        push_free(&mut self.free, &self.slots, i);
    }

    /// After a fatal ring error: every admitted file is reported failed. The
    /// slots stay busy (the kernel may still use their buffers) and are leaked.
    fn fail_in_flight(&mut self, e: &io::Error, done: &mut Done<'_>) {
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            if s.phase == Phase::Free || s.delivered {
                continue;
            }
            let err = io::Error::new(e.kind(), format!("io_uring failed: {e}"));
            self.deliver(i, Err(Error::Read(err)), done);
        }
    }
}

impl Drop for UringEngine {
    fn drop(&mut self) {
        let busy = self.slots.iter().any(|s| s.phase != Phase::Free) || self.in_kernel > 0;
        if busy {
            // The kernel may still write into these: leak rather than free.
            for s in &mut self.slots {
                std::mem::forget(s.extent.take());
            }
            return;
        }
        // SAFETY: nothing is in flight, so the kernel holds no pointer into
        // these buffers; they are dropped exactly once, here.
        unsafe {
            ManuallyDrop::drop(&mut self.paths);
            ManuallyDrop::drop(&mut self.statx);
        }
    }
}
