//! The HDF5 file driver of serve's split files: POSIX `pread`/`pwrite` like
//! HDF5's default `sec2` driver (same feature flags, same file format: h5py
//! and every other reader open the files with `sec2`), plus two hooks:
//!
//! * before a write or truncate, the bytes about to go are saved to the
//!   file's undo log when the file is armed (`super::undo`). That is what
//!   makes recovery at open and the close safe against a power loss that
//!   tears their in-place metadata writes;
//! * a whole `mel` chunk the appender lends (`crate::writer::lent`, as the
//!   build's writer does) is queued for the copier threads instead of being
//!   written before the call returns, while the file is not armed. A read
//!   waits for the queued writes it overlaps; a metadata write, a truncate
//!   and the close wait for all of them, so no chunk index or extent that
//!   names a chunk reaches the file before the chunk's bytes; the
//!   appender's flush waits for them before its `fsync`.
//!
//! The class and the parts that are `sec2`'s are `writer::driver`'s (HDF5
//! 1.10.8 to 1.10.x only, [`available`]). Elsewhere the files are opened
//! with `sec2` and arming does nothing (logged once).
//!
//! With the `test-hooks` feature (on for `cargo test` only), the driver is
//! also where a crash-point test stops the process: with
//! `MELFORGE_CRASH_AT_WRITE=k` the process SIGKILLs itself just before its
//! `k`-th write or truncate of any split file ([`crash_point`]). Every byte
//! HDF5 puts in a file passes here, so sweeping `k` kills a writer between
//! every pair of its writes: the exact places a kill -9 can land.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::{Arc, OnceLock};

use hdf5_sys::h5::{haddr_t, hbool_t, herr_t};
use hdf5_sys::h5i::hid_t;

use super::undo;
use crate::writer::driver::{self, Base, Callbacks, MEM_DRAW, Public};
use crate::writer::lent::{self, Flight};

/// An open file: `Base` first, so HDF5's `H5FD_t *` is a pointer to it.
#[repr(C)]
struct Open {
    base: Base,
    /// Its chunk writes queued for the copiers.
    flight: Arc<Flight>,
}

/// Whether this HDF5 can use the driver, or why not (once per process).
pub fn available() -> Result<(), &'static str> {
    driver().map(drop)
}

/// Makes `fapl` open files with this driver; `Ok` (and `fapl` unchanged)
/// where [`available`] says no.
pub(super) fn use_in(fapl: hid_t) -> hdf5::Result<()> {
    driver::use_registered(fapl, driver())
}

fn driver() -> Result<hid_t, &'static str> {
    static ID: OnceLock<Result<hid_t, &'static str>> = OnceLock::new();
    let callbacks = Callbacks {
        name: c"melforge_undo",
        open,
        close,
        read,
        write,
        truncate,
    };
    driver::register_once(&ID, callbacks, |why| {
        tracing::warn!(
            reason = why,
            "Split files are opened with HDF5's sec2 driver: their close and \
             recovery are not protected against torn writes by an undo log."
        );
    })
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
        let flight = Flight::of(&base.file, true)?;
        Ok(Open { base, flight })
    });
    driver::into_public(opened)
}

unsafe extern "C" fn close(f: *mut Public) -> herr_t {
    // SAFETY: `f` came from `open` (Box::into_raw of an Open) and HDF5 closes
    // it once; the descriptors close with the box.
    let o = unsafe { Box::from_raw(f.cast::<Open>()) };
    match o.flight.wait() {
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
    crash_point();
    // Raw data of a lent chunk goes to a copier unless the undo log must
    // see the bytes it replaces first. Metadata waits for every queued
    // chunk: it may name them.
    let lent = (ty == MEM_DRAW && !undo::is_armed(o.base.key))
        .then(|| lent::lent_for(buf as usize, size))
        .flatten();
    let settled = match ty == MEM_DRAW {
        true => o.flight.settle(addr, size as u64),
        false => o.flight.wait(),
    };
    if let Err(e) = settled {
        return o.base.fail("queued chunk write", &e);
    }
    if lent.is_none()
        && let Err(e) = undo::record(o.base.key, &o.base.file, addr, size as u64)
    {
        return o.base.fail("undo log write", &e);
    }
    if let Err(e) = lent::write_at(&o.flight, lent, addr, buf, size) {
        return o.base.fail("write", &e);
    }
    o.base.eof = o.base.eof.max(addr + size as u64);
    0
}

unsafe extern "C" fn truncate(f: *mut Public, _dxpl: hid_t, _closing: hbool_t) -> herr_t {
    // SAFETY: an open file of this driver.
    let open = unsafe { this(f) };
    if let Err(e) = open.flight.wait() {
        return open.base.fail("queued chunk write", &e);
    }
    let o = &mut open.base;
    if o.eoa == o.eof {
        return 0;
    }
    crash_point();
    if o.eoa < o.eof
        && let Err(e) = undo::record(o.key, &o.file, o.eoa, o.eof - o.eoa)
    {
        return o.fail("undo log write", &e);
    }
    if let Err(e) = o.file.set_len(o.eoa) {
        return o.fail("truncate", &e);
    }
    o.eof = o.eoa;
    0
}

/// Test hook: SIGKILLs this process before its `k`-th write or truncate of
/// a split file when `MELFORGE_CRASH_AT_WRITE` is `k` (only with the
/// `test-hooks` feature; a no-op otherwise). See the module doc.
#[inline]
fn crash_point() {
    #[cfg(feature = "test-hooks")]
    {
        use std::sync::atomic::{AtomicU64, Ordering};
        static AT: OnceLock<Option<u64>> = OnceLock::new();
        static WRITES: AtomicU64 = AtomicU64::new(0);
        let at = AT.get_or_init(|| {
            std::env::var("MELFORGE_CRASH_AT_WRITE")
                .ok()
                .and_then(|v| v.parse().ok())
        });
        if let Some(k) = *at
            && WRITES.fetch_add(1, Ordering::Relaxed) + 1 == k
        {
            let _ = crate::runtime::sys::kill_self(libc::SIGKILL);
            // SIGKILL cannot be caught; nothing runs past it.
            loop {
                std::thread::park();
            }
        }
    }
}
