//! The build's HDF5 file driver: `sec2`'s behaviour (`writer::driver`), except
//! that the raw-data write of a buffer the writer *lends* it goes to a pool
//! of threads instead of being written before the call returns.
//!
//! Why: writing a split file is HDF5 bookkeeping (small) plus the kernel
//! copying each chunk into the page cache (`pwrite`: page allocation and a
//! copy, about two thirds of the writer thread's CPU time on tmpfs). HDF5 is
//! not thread-safe, so the bookkeeping stays on the writer's one thread; the
//! copy does not need to. The writer wraps a whole chunk it hands to
//! `H5Dwrite_chunk` in a [`Loaned`] buffer and makes the call inside
//! [`lend`]: HDF5 allocates the chunk and passes the very same bytes to the
//! driver's `write` (an unfiltered chunk is not copied on the way), which
//! queues them for a pool thread and returns. The file's bytes and every
//! address are the same as with `sec2`: only the moment the chunk's bytes
//! reach the page cache moves, and a build's file is renamed into place only
//! after it is closed, which waits for every queued write.
//!
//! Rules that keep it exact:
//! * only a write of `H5FD_MEM_DRAW` bytes lying wholly inside the lent
//!   buffer is queued; every other write (metadata, the chunk cache's
//!   `label`/`path` chunks, whose buffers HDF5 reuses) is written at once,
//!   after any queued write it overlaps;
//! * a read waits for the queued writes it overlaps, a truncate and the
//!   close for all of them;
//! * a [`Loaned`] buffer is given back ([`Loaned::reclaim`]) only once its
//!   writes are done, and dropping one waits for them too, so no queued
//!   write ever reads freed or reused memory;
//! * a failed queued write fails the next call of that file (and the
//!   buffer's reclaim): nothing is lost silently.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use hdf5_sys::h5::{haddr_t, hbool_t, herr_t};
use hdf5_sys::h5i::hid_t;

use super::driver::{self, Base, Callbacks, MEM_DRAW, Public};
use crate::runtime::telemetry::thread_cpu;

/// Threads that copy lent chunks into files: half the cores, 2 to 8. On two
/// cores that is two, so neither the writer nor one copier alone carries a
/// build's bytes.
fn pool_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    (cores / 2).clamp(2, 8)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writes outstanding against one buffer or one file, and the first error.
#[derive(Default)]
pub(super) struct Count {
    state: Mutex<(usize, Option<std::io::Error>)>,
    done: Condvar,
}

impl Count {
    fn begin(&self) {
        lock(&self.state).0 += 1;
    }

    fn end(&self, r: &std::io::Result<()>) {
        let mut s = lock(&self.state);
        s.0 -= 1;
        if let Err(e) = r
            && s.1.is_none()
        {
            s.1 = Some(match e.raw_os_error() {
                Some(errno) => std::io::Error::from_raw_os_error(errno),
                None => std::io::Error::new(e.kind(), e.to_string()),
            });
        }
        drop(s);
        self.done.notify_all();
    }

    /// Waits until nothing is outstanding; the first error, taken.
    fn wait(&self) -> std::io::Result<()> {
        let mut s = lock(&self.state);
        while s.0 > 0 {
            s = self
                .done
                .wait(s)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        s.1.take().map_or(Ok(()), Err)
    }
}

/// A buffer whose bytes may be in queued writes: given back by
/// [`reclaim`](Loaned::reclaim) once they are written.
pub(super) struct Loaned<B> {
    buf: Option<B>,
    count: Arc<Count>,
}

impl<B> Loaned<B> {
    pub(super) fn new(buf: B) -> Loaned<B> {
        Loaned {
            buf: Some(buf),
            count: Arc::default(),
        }
    }

    pub(super) fn get(&self) -> &B {
        self.buf.as_ref().expect("a loaned buffer until reclaimed")
    }

    /// Whether every write of its bytes is done (reclaim will not wait).
    pub(super) fn is_written(&self) -> bool {
        lock(&self.count.state).0 == 0
    }

    /// The buffer, once every queued write of its bytes is done; the first
    /// write error instead, if one failed.
    pub(super) fn reclaim(mut self) -> std::io::Result<B> {
        self.count.wait()?;
        Ok(self.buf.take().expect("reclaimed once"))
    }
}

impl<B> Drop for Loaned<B> {
    fn drop(&mut self) {
        // Queued writes read the buffer: it lives until they are done.
        let _ = self.count.wait();
    }
}

/// Loans kept before the oldest is waited for: what bounds the memory that
/// queued writes hold.
const MAX_IN_FLIGHT: usize = 4;

/// Buffers whose chunks were handed to HDF5 and may still be queued for the
/// file, oldest first, with the first queued write that failed.
pub(super) struct InFlight<B> {
    loans: VecDeque<Loaned<B>>,
    failed: Option<std::io::Error>,
}

impl<B> InFlight<B> {
    pub(super) fn new() -> InFlight<B> {
        InFlight {
            loans: VecDeque::new(),
            failed: None,
        }
    }

    /// Keeps `loaned` (its HDF5 call made) and hands `back` every buffer
    /// whose writes are done: the oldest beyond [`MAX_IN_FLIGHT`], waited
    /// for, and any already written.
    pub(super) fn keep(&mut self, loaned: Loaned<B>, mut back: impl FnMut(B)) {
        self.loans.push_back(loaned);
        while self.loans.len() > MAX_IN_FLIGHT
            && let Some(oldest) = self.loans.pop_front()
        {
            self.reclaim(oldest, &mut back);
        }
        while let Some(b) = self.written() {
            back(b);
        }
    }

    /// The oldest buffer, if its writes are done.
    pub(super) fn written(&mut self) -> Option<B> {
        while self.loans.front().is_some_and(Loaned::is_written) {
            let oldest = self.loans.pop_front()?;
            let mut got = None;
            self.reclaim(oldest, &mut |b| got = Some(b));
            if got.is_some() {
                return got;
            }
        }
        None
    }

    /// Waits for every loan, handing each buffer `back`.
    pub(super) fn settle(&mut self, mut back: impl FnMut(B)) {
        while let Some(l) = self.loans.pop_front() {
            self.reclaim(l, &mut back);
        }
    }

    fn reclaim(&mut self, loaned: Loaned<B>, back: &mut impl FnMut(B)) {
        match loaned.reclaim() {
            Ok(b) => back(b),
            Err(e) => {
                self.failed.get_or_insert(e);
            }
        }
    }

    /// The first queued write's failure, once.
    pub(super) fn check(&mut self) -> hdf5::Result<()> {
        match self.failed.take() {
            Some(e) => Err(format!("writing a chunk into the file failed: {e}").into()),
            None => Ok(()),
        }
    }
}

thread_local! {
    /// The byte range lent for the HDF5 call under way on this thread.
    static LENT: RefCell<Option<(usize, usize, Arc<Count>)>> = const { RefCell::new(None) };
}

/// Runs `f` (one HDF5 call that writes `data`, a view of `loaned`'s
/// buffer) with those bytes lent to the driver: a raw-data write of them
/// may be queued, and `loaned` is not given back before it is done.
pub(super) fn lend<B, T: Copy, R>(loaned: &Loaned<B>, data: &[T], f: impl FnOnce() -> R) -> R {
    let start = data.as_ptr() as usize;
    let range = (
        start,
        start + std::mem::size_of_val(data),
        Arc::clone(&loaned.count),
    );
    /// Ends the loan however `f` returns, unwinding included.
    struct End;
    impl Drop for End {
        fn drop(&mut self) {
            LENT.with(|l| *l.borrow_mut() = None);
        }
    }
    LENT.with(|l| *l.borrow_mut() = Some(range));
    let _end = End;
    f()
}

/// The lent buffer's counter, when `[ptr, ptr + len)` lies in it.
pub(super) fn lent_for(ptr: usize, len: usize) -> Option<Arc<Count>> {
    LENT.with(|l| {
        l.borrow()
            .as_ref()
            .filter(|(s, e, _)| *s <= ptr && ptr + len <= *e)
            .map(|(_, _, c)| Arc::clone(c))
    })
}

/// One open file's queued writes: their byte ranges and the first error.
pub(super) struct Flight {
    file: File,
    ranges: Mutex<Vec<(u64, u64)>>,
    count: Count,
    /// Start each chunk's writeback once it is written (serve: its flush
    /// syncs every few milliseconds, and then finds the chunks on their way
    /// to the disk instead of writing them all back on its own thread).
    writeback: bool,
    /// A copier is writing to the file (changed under the pool's queue
    /// lock): the others leave its jobs alone (see [`Pool`]).
    busy: AtomicBool,
}

impl Flight {
    /// The queue of `file` (a descriptor of its own), the copiers started;
    /// `writeback`: see the field.
    pub(super) fn of(file: &File, writeback: bool) -> std::io::Result<Arc<Flight>> {
        let file = file.try_clone()?;
        pool();
        Ok(Arc::new(Flight {
            file,
            ranges: Mutex::default(),
            count: Count::default(),
            writeback,
            busy: AtomicBool::new(false),
        }))
    }

    /// Waits for every queued write; the first error.
    pub(super) fn wait(&self) -> std::io::Result<()> {
        self.count.wait()
    }

    fn overlaps(&self, addr: u64, len: u64) -> bool {
        lock(&self.ranges)
            .iter()
            .any(|&(a, l)| a < addr + len && addr < a + l)
    }

    /// Waits for the queued writes that overlap `[addr, addr + len)` (all
    /// of them: they are few, a chunk each), then returns the first error.
    pub(super) fn settle(&self, addr: u64, len: u64) -> std::io::Result<()> {
        if self.overlaps(addr, len) {
            return self.count.wait();
        }
        match lock(&self.count.state).1.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// A queued write: `len` bytes at `ptr` (a lent buffer) to `addr`.
struct Job {
    flight: Arc<Flight>,
    buffer: Arc<Count>,
    addr: u64,
    ptr: usize,
    len: usize,
}

/// The copier threads and what each has cost.
///
/// A copier takes the oldest queued job whose file no other copier is
/// writing. A buffered write holds the file's inode lock for the whole copy,
/// so two copiers on one file only take turns, and the one waiting spins on
/// the lock first (measured: 2–4% of a Whisper build's CPU on two cores, the
/// two copiers on the same split file); a file's jobs go one at a time, and
/// the other copiers write the other files.
struct Pool {
    queue: Mutex<VecDeque<Job>>,
    queued: Condvar,
    stages: Vec<Arc<Copier>>,
}

/// One copier's own CPU time (ns) and writes done, as it publishes them.
struct Copier {
    name: String,
    cpu_ns: AtomicU64,
    jobs: AtomicU64,
}

/// The copiers, started with the first file this driver opens.
static POOL: OnceLock<Pool> = OnceLock::new();

fn pool() -> &'static Pool {
    POOL.get_or_init(|| {
        let mut stages = Vec::new();
        for i in 0..pool_threads() {
            let copier = Arc::new(Copier {
                name: format!("h5-copy-{i}"),
                cpu_ns: AtomicU64::new(0),
                jobs: AtomicU64::new(0),
            });
            let me = Arc::clone(&copier);
            let spawned = std::thread::Builder::new()
                .name(copier.name.clone())
                .spawn(move || copy_loop(&me));
            // A pool that could not start a thread has fewer; with none,
            // `queue` writes in place.
            if spawned.is_ok() {
                stages.push(copier);
            }
        }
        Pool {
            queue: Mutex::default(),
            queued: Condvar::new(),
            stages,
        }
    })
}

/// The oldest job of `queue` whose file no copier is writing, its file
/// marked busy (the caller holds the queue's lock).
fn next_job(queue: &mut VecDeque<Job>) -> Option<Job> {
    let i = queue
        .iter()
        .position(|j| !j.flight.busy.load(Ordering::Relaxed))?;
    let job = queue.remove(i)?;
    job.flight.busy.store(true, Ordering::Relaxed);
    Some(job)
}

fn copy_loop(me: &Copier) {
    // The pool is set before any job is queued, and this thread is only
    // started from inside its initialisation.
    let pool = loop {
        match POOL.get() {
            Some(pool) => break pool,
            None => std::thread::yield_now(),
        }
    };
    let mut queue = lock(&pool.queue);
    loop {
        let Some(job) = next_job(&mut queue) else {
            queue = pool
                .queued
                .wait(queue)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            continue;
        };
        drop(queue);
        // SAFETY: the job's bytes are a lent buffer that its `Loaned` keeps
        // alive and unchanged until `buffer` counts this write done.
        let bytes = unsafe { std::slice::from_raw_parts(job.ptr as *const u8, job.len) };
        let r = job.flight.file.write_all_at(bytes, job.addr);
        if r.is_ok() && job.flight.writeback {
            use std::os::fd::AsFd;
            // A hint: the flush's fdatasync is what makes the bytes durable.
            let _ = crate::runtime::sys::start_writeback_range(
                job.flight.file.as_fd(),
                job.addr,
                job.len as u64,
            );
        }
        {
            let mut ranges = lock(&job.flight.ranges);
            if let Some(i) = ranges.iter().position(|&r| r == (job.addr, job.len as u64)) {
                ranges.swap_remove(i);
            }
        }
        me.cpu_ns
            .store(thread_cpu().as_nanos() as u64, Ordering::Relaxed);
        me.jobs.fetch_add(1, Ordering::Relaxed);
        queue = lock(&pool.queue);
        // This copier looks at the queue again before it sleeps, so the
        // file's next job, left by the others while it wrote, is taken.
        job.flight.busy.store(false, Ordering::Relaxed);
        job.flight.count.end(&r);
        job.buffer.end(&r);
    }
}

/// Each copier thread's name, CPU time and writes so far (for the build's
/// report of its serial stages).
pub(crate) fn copiers() -> Vec<(String, Duration, u64)> {
    let Some(pool) = POOL.get() else {
        return Vec::new();
    };
    pool.stages
        .iter()
        .map(|c| {
            (
                c.name.clone(),
                Duration::from_nanos(c.cpu_ns.load(Ordering::Relaxed)),
                c.jobs.load(Ordering::Relaxed),
            )
        })
        .collect()
}

/// Queues `job`, or (no copier could start) writes it here.
fn queue(job: Job) -> std::io::Result<()> {
    let pool = pool();
    job.flight.count.begin();
    job.buffer.begin();
    lock(&job.flight.ranges).push((job.addr, job.len as u64));
    if pool.stages.is_empty() {
        // SAFETY: as in `copy_loop`; here the caller's buffer is borrowed
        // for the call itself.
        let bytes = unsafe { std::slice::from_raw_parts(job.ptr as *const u8, job.len) };
        let r = job.flight.file.write_all_at(bytes, job.addr);
        lock(&job.flight.ranges).clear();
        job.flight.count.end(&r);
        job.buffer.end(&r);
        return r;
    }
    lock(&pool.queue).push_back(job);
    pool.queued.notify_one();
    Ok(())
}

/// A driver's write of `size` bytes at `buf` to `addr` of `flight`'s file:
/// queued for a copier when `lent` (the lent buffer's counter, from
/// [`lent_for`]), else written here. Either way after the queued writes it
/// overlaps.
pub(super) fn write_at(
    flight: &Arc<Flight>,
    lent: Option<Arc<Count>>,
    addr: u64,
    buf: *const c_void,
    size: usize,
) -> std::io::Result<()> {
    flight.settle(addr, size as u64)?;
    match lent {
        Some(buffer) => queue(Job {
            flight: Arc::clone(flight),
            buffer,
            addr,
            ptr: buf as usize,
            len: size,
        }),
        None => {
            // SAFETY: the driver's caller (HDF5) passes a buffer of `size`
            // bytes for the call.
            let bytes = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), size) };
            flight.file.write_all_at(bytes, addr)
        }
    }
}

/// Whether this HDF5 can use the driver, or why not (once per process).
#[cfg(test)]
pub(crate) fn available() -> Result<(), &'static str> {
    driver().map(drop)
}

/// The environment switch that writes build files with HDF5's own `sec2`
/// driver instead, every chunk copied on the writer thread: a way back if
/// this driver ever misbehaves, and the baseline of the writer's benchmark.
pub const SEC2_ENV: &str = "MELFORGE_H5_DRIVER";

/// Makes `fapl` open files with this driver; `Ok` (and `fapl` unchanged,
/// so files are `sec2`'s, written in place) where [`available`] says no or
/// [`SEC2_ENV`] is `sec2`.
pub(super) fn use_in(fapl: hid_t) -> hdf5::Result<()> {
    static SEC2: OnceLock<bool> = OnceLock::new();
    if *SEC2.get_or_init(|| std::env::var_os(SEC2_ENV).is_some_and(|v| v == "sec2")) {
        return Ok(());
    }
    driver::use_registered(fapl, driver())
}

fn driver() -> Result<hid_t, &'static str> {
    static ID: OnceLock<Result<hid_t, &'static str>> = OnceLock::new();
    let callbacks = Callbacks {
        name: c"melforge_lent",
        open,
        close,
        read,
        write,
        truncate,
    };
    driver::register_once(&ID, callbacks, |why| {
        tracing::info!(
            reason = why,
            "Build files are written with HDF5's sec2 driver: chunk bytes are \
             copied on the writer thread."
        );
    })
}

/// An open file: `Base` first, so HDF5's `H5FD_t *` is a pointer to it.
#[repr(C)]
struct Open {
    base: Base,
    flight: Arc<Flight>,
}

/// The `Open` behind HDF5's file pointer.
///
/// # Safety
/// `f` must come from [`open`] and not be closed yet.
unsafe fn this<'a>(f: *const Public) -> &'a mut Open {
    // SAFETY: per the contract; an Open starts with a Base.
    unsafe { driver::file(f) }
}

unsafe extern "C" fn open(
    name: *const c_char,
    flags: c_uint,
    _fapl: hid_t,
    _maxaddr: haddr_t,
) -> *mut Public {
    // SAFETY: HDF5 passes the file name as a NUL-terminated string.
    let opened = unsafe { Base::open(name, flags) }.and_then(|base| {
        let flight = Flight::of(&base.file, false)?;
        Ok(Open { base, flight })
    });
    driver::into_public(opened)
}

unsafe extern "C" fn close(f: *mut Public) -> herr_t {
    // SAFETY: `f` came from `open` (Box::into_raw of an Open) and HDF5 closes
    // it once; the descriptors close with the box.
    let o = unsafe { Box::from_raw(f.cast::<Open>()) };
    match o.flight.count.wait() {
        Ok(()) => 0,
        Err(e) => o.base.fail("queued chunk write", &e),
    }
}

unsafe extern "C" fn read(
    f: *mut Public,
    _type: c_int,
    _dxpl: hid_t,
    addr: haddr_t,
    size: usize,
    buf: *mut c_void,
) -> herr_t {
    // SAFETY: an open file of this driver.
    let o = unsafe { this(f) };
    if let Err(e) = o.flight.settle(addr, size as u64) {
        return o.base.fail("queued chunk write", &e);
    }
    // SAFETY: HDF5 passes a buffer of `size` bytes.
    unsafe { driver::read_into(&o.base, addr, size, buf) }
}

unsafe extern "C" fn write(
    f: *mut Public,
    ty: c_int,
    _dxpl: hid_t,
    addr: haddr_t,
    size: usize,
    buf: *const c_void,
) -> herr_t {
    // SAFETY: an open file of this driver.
    let o = unsafe { this(f) };
    let lent = (ty == MEM_DRAW)
        .then(|| lent_for(buf as usize, size))
        .flatten();
    if let Err(e) = write_at(&o.flight, lent, addr, buf, size) {
        return o.base.fail("write", &e);
    }
    o.base.eof = o.base.eof.max(addr + size as u64);
    0
}

unsafe extern "C" fn truncate(f: *mut Public, _dxpl: hid_t, _closing: hbool_t) -> herr_t {
    // SAFETY: an open file of this driver.
    let o = unsafe { this(f) };
    if let Err(e) = o.flight.count.wait() {
        return o.base.fail("queued chunk write", &e);
    }
    if o.base.eoa == o.base.eof {
        return 0;
    }
    if let Err(e) = o.base.file.set_len(o.base.eoa) {
        return o.base.fail("truncate", &e);
    }
    o.base.eof = o.base.eoa;
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(flight: &Arc<Flight>, loaned: &Loaned<Vec<u8>>, addr: u64) -> Job {
        let v = loaned.get();
        Job {
            flight: Arc::clone(flight),
            buffer: Arc::clone(&loaned.count),
            addr,
            ptr: v.as_ptr() as usize,
            len: v.len(),
        }
    }

    fn flight(file: File) -> Arc<Flight> {
        Arc::new(Flight {
            file,
            ranges: Mutex::default(),
            count: Count::default(),
            writeback: false,
            busy: AtomicBool::new(false),
        })
    }

    /// A copier takes the oldest job of a file no other copier writes.
    #[test]
    fn a_copier_skips_the_jobs_of_a_file_being_written() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            flight(File::create(dir.path().join("a")).unwrap()),
            flight(File::create(dir.path().join("b")).unwrap()),
        );
        let loaned = Loaned::new(vec![1u8; 8]);
        let mut queue: VecDeque<Job> = [
            job(&a, &loaned, 0),
            job(&a, &loaned, 8),
            job(&b, &loaned, 0),
        ]
        .into();
        let first = next_job(&mut queue).unwrap();
        assert!(Arc::ptr_eq(&first.flight, &a) && first.addr == 0);
        // `a` is being written: its next job waits, `b`'s goes.
        let second = next_job(&mut queue).unwrap();
        assert!(Arc::ptr_eq(&second.flight, &b));
        assert!(next_job(&mut queue).is_none());
        a.busy.store(false, Ordering::Relaxed);
        let third = next_job(&mut queue).unwrap();
        assert!(Arc::ptr_eq(&third.flight, &a) && third.addr == 8);
        assert!(queue.is_empty());
    }

    #[test]
    fn queued_writes_land_and_the_buffer_comes_back_after_them() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let f = flight(File::create(&p).unwrap());
        let loans: Vec<Loaned<Vec<u8>>> = (0..8u8)
            .map(|i| Loaned::new(vec![i + 1; 1 << 16]))
            .collect();
        for (i, l) in loans.iter().enumerate() {
            queue(job(&f, l, (i as u64) << 16)).unwrap();
        }
        // The pool writes them in any order; the file is whole once all are back.
        for (i, l) in loans.into_iter().enumerate() {
            assert_eq!(l.reclaim().unwrap(), vec![i as u8 + 1; 1 << 16]);
        }
        f.count.wait().unwrap();
        assert!(lock(&f.ranges).is_empty());
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(bytes.len(), 8 << 16);
        for (i, c) in bytes.chunks(1 << 16).enumerate() {
            assert!(c.iter().all(|&b| b == i as u8 + 1), "block {i}");
        }
    }

    #[test]
    fn a_failed_queued_write_fails_its_buffer_and_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ro");
        std::fs::write(&p, b"x").unwrap();
        // Read-only: every pwrite fails (EBADF).
        let f = flight(File::open(&p).unwrap());
        let l = Loaned::new(vec![7u8; 4096]);
        queue(job(&f, &l, 0)).unwrap();
        assert!(
            l.reclaim().is_err(),
            "the buffer's reclaim says the write failed"
        );
        let e = f.settle(1 << 20, 1).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{e}");
        assert_eq!(std::fs::read(&p).unwrap(), b"x");
    }

    #[test]
    fn only_bytes_inside_the_lent_range_are_lent() {
        let l = Loaned::new(vec![0u32; 1024]);
        let v = l.get();
        let base = v.as_ptr() as usize;
        lend(&l, v, || {
            assert!(lent_for(base, 4096).is_some());
            assert!(lent_for(base + 4, 4092).is_some());
            assert!(lent_for(base + 4, 4096).is_none(), "runs past the end");
            assert!(lent_for(base.wrapping_sub(4), 8).is_none());
        });
        assert!(
            lent_for(base, 4096).is_none(),
            "the loan ends with the call"
        );
    }

    #[test]
    fn the_driver_registers_on_this_hdf5() {
        let (mut major, mut minor, mut release) = (0, 0, 0);
        // SAFETY: three valid out-pointers.
        unsafe { hdf5_sys::h5::H5get_libversion(&mut major, &mut minor, &mut release) };
        if (major, minor) != (1, 10) || release < 8 {
            eprintln!("skipped: HDF5 {major}.{minor}.{release} is not 1.10.8+");
            return;
        }
        available().unwrap();
    }
}
