//! The HDF5 file driver of serve's split files: POSIX `pread`/`pwrite` like
//! HDF5's default `sec2` driver (same feature flags, same file format: h5py
//! and every other reader open the files with `sec2`), plus one hook: before
//! a write or truncate, the bytes about to go are saved to the file's undo log
//! when the file is armed (`super::undo`). That is what makes recovery at
//! open and the close safe against a power loss that tears their in-place
//! metadata writes.
//!
//! The class layout is HDF5 1.10's `H5FD_class_t` from 1.10.8 on (with
//! `terminate`, and `get_eof` taking a memory type); hdf5-sys declares an
//! older one, so the struct is declared here and the driver is only
//! registered on a 1.10 library from 1.10.8 on ([`available`]). Elsewhere the
//! files are opened with `sec2` and arming does nothing (logged once).
//!
//! With the `test-hooks` feature (on for `cargo test` only), the driver is
//! also where a crash-point test stops the process: with
//! `MELFORGE_CRASH_AT_WRITE=k` the process SIGKILLs itself just before its
//! `k`-th write or truncate of any split file ([`crash_point`]). Every byte
//! HDF5 puts in a file passes here, so sweeping `k` kills a writer between
//! every pair of its writes: the exact places a kill -9 can land.

use std::ffi::{CStr, c_char, c_int, c_uint, c_ulong, c_void};
use std::fs::{File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;
use std::sync::OnceLock;

use hdf5_sys::h5::{haddr_t, hbool_t, herr_t, hsize_t};
use hdf5_sys::h5i::hid_t;

use super::undo::{self, Key};

/// `H5FD_t`: the public part of an open file, filled in by HDF5 after `open`.
#[repr(C)]
struct Public {
    driver_id: hid_t,
    cls: *const c_void,
    fileno: c_ulong,
    access_flags: c_uint,
    feature_flags: c_ulong,
    maxaddr: haddr_t,
    base_addr: haddr_t,
    threshold: hsize_t,
    alignment: hsize_t,
    paged_aggr: hbool_t,
}

/// An open file: `Public` first, so HDF5's `H5FD_t *` is a pointer to it.
#[repr(C)]
struct Open {
    public: Public,
    file: File,
    path: PathBuf,
    key: Key,
    eoa: haddr_t,
    eof: haddr_t,
}

type Unused = Option<unsafe extern "C" fn()>;

/// `H5FD_class_t` of HDF5 1.10.8 (H5FDpublic.h), field for field.
#[repr(C)]
struct Class {
    name: *const c_char,
    maxaddr: haddr_t,
    fc_degree: c_int,
    terminate: Unused,
    sb_size: Unused,
    sb_encode: Unused,
    sb_decode: Unused,
    fapl_size: usize,
    fapl_get: Unused,
    fapl_copy: Unused,
    fapl_free: Unused,
    dxpl_size: usize,
    dxpl_copy: Unused,
    dxpl_free: Unused,
    open: Option<unsafe extern "C" fn(*const c_char, c_uint, hid_t, haddr_t) -> *mut Public>,
    close: Option<unsafe extern "C" fn(*mut Public) -> herr_t>,
    cmp: Option<unsafe extern "C" fn(*const Public, *const Public) -> c_int>,
    query: Option<unsafe extern "C" fn(*const Public, *mut c_ulong) -> herr_t>,
    get_type_map: Unused,
    alloc: Unused,
    free: Unused,
    get_eoa: Option<unsafe extern "C" fn(*const Public, c_int) -> haddr_t>,
    set_eoa: Option<unsafe extern "C" fn(*mut Public, c_int, haddr_t) -> herr_t>,
    get_eof: Option<unsafe extern "C" fn(*const Public, c_int) -> haddr_t>,
    get_handle: Unused,
    read: Option<
        unsafe extern "C" fn(*mut Public, c_int, hid_t, haddr_t, usize, *mut c_void) -> herr_t,
    >,
    write: Option<
        unsafe extern "C" fn(*mut Public, c_int, hid_t, haddr_t, usize, *const c_void) -> herr_t,
    >,
    flush: Unused,
    truncate: Option<unsafe extern "C" fn(*mut Public, hid_t, hbool_t) -> herr_t>,
    lock: Option<unsafe extern "C" fn(*mut Public, hbool_t) -> herr_t>,
    unlock: Option<unsafe extern "C" fn(*mut Public) -> herr_t>,
    fl_map: [c_int; 7],
}

// H5Fpublic.h / H5FDpublic.h constants of 1.10.
const ACC_RDWR: c_uint = 0x0001;
const ACC_TRUNC: c_uint = 0x0002;
const ACC_EXCL: c_uint = 0x0004;
const ACC_CREAT: c_uint = 0x0010;
const CLOSE_WEAK: c_int = 1;
const MEM_SUPER: c_int = 1;
const MEM_DRAW: c_int = 3;
/// sec2's features: aggregate and accumulate metadata, sieve and aggregate
/// raw data, SWMR I/O, files the default driver can open.
const FEATURES: c_ulong = 0x0001 | 0x0002 | 0x0004 | 0x0008 | 0x0010 | 0x1000 | 0x8000;
/// Largest address: what `sec2` allows with a 64-bit `off_t`.
const MAXADDR: haddr_t = (1 << 63) - 1;

/// Whether this HDF5 can use the driver, or why not (once per process).
pub fn available() -> Result<(), &'static str> {
    driver().map(drop)
}

/// Makes `fapl` open files with this driver; `Err` (and `fapl` unchanged)
/// where [`available`] says no.
pub(super) fn use_in(fapl: hid_t) -> hdf5::Result<()> {
    let Ok(id) = driver() else {
        return Ok(());
    };
    // SAFETY: `fapl` is a live file-access property list owned by the caller;
    // `id` a registered driver that takes no driver info (null).
    let r = unsafe { hdf5_sys::h5p::H5Pset_driver(fapl, id, std::ptr::null()) };
    hdf5::h5check(r).map(drop)
}

fn driver() -> Result<hid_t, &'static str> {
    static ID: OnceLock<Result<hid_t, &'static str>> = OnceLock::new();
    *ID.get_or_init(|| {
        let r = hdf5::sync::sync(register);
        if let Err(why) = r {
            tracing::warn!(
                reason = why,
                "Split files are opened with HDF5's sec2 driver: their close and \
                 recovery are not protected against torn writes by an undo log."
            );
        }
        r
    })
}

fn register() -> Result<hid_t, &'static str> {
    let (mut major, mut minor, mut release) = (0, 0, 0);
    // SAFETY: three valid out-pointers to c_uint.
    let r = unsafe { hdf5_sys::h5::H5get_libversion(&mut major, &mut minor, &mut release) };
    if r < 0 || (major, minor) != (1, 10) || release < 8 {
        return Err("the undo-log driver is built for HDF5 1.10.8 to 1.10.x");
    }
    let class = Class {
        name: c"melforge_undo".as_ptr(),
        maxaddr: MAXADDR,
        fc_degree: CLOSE_WEAK,
        terminate: None,
        sb_size: None,
        sb_encode: None,
        sb_decode: None,
        fapl_size: 0,
        fapl_get: None,
        fapl_copy: None,
        fapl_free: None,
        dxpl_size: 0,
        dxpl_copy: None,
        dxpl_free: None,
        open: Some(open),
        close: Some(close),
        cmp: Some(cmp),
        query: Some(query),
        get_type_map: None,
        alloc: None,
        free: None,
        get_eoa: Some(get_eoa),
        set_eoa: Some(set_eoa),
        get_eof: Some(get_eof),
        get_handle: None,
        read: Some(read),
        write: Some(write),
        flush: None,
        truncate: Some(truncate),
        lock: Some(lock),
        unlock: Some(unlock),
        // H5FD_FLMAP_DICHOTOMY, as sec2: metadata and raw data apart.
        fl_map: [
            MEM_SUPER, MEM_SUPER, MEM_SUPER, MEM_DRAW, MEM_DRAW, MEM_SUPER, MEM_SUPER,
        ],
    };
    // SAFETY: `class` has the layout of the linked library's H5FD_class_t
    // (checked above: 1.10.8+); H5FDregister copies it (and the name is static).
    let id = unsafe { hdf5_sys::h5fd::H5FDregister((&raw const class).cast()) };
    if id < 0 {
        return Err("H5FDregister refused the undo-log driver");
    }
    Ok(id)
}

/// The `Open` behind HDF5's file pointer.
///
/// # Safety
/// `f` must come from [`open`] and not be closed yet; HDF5 serialises calls.
unsafe fn this<'a>(f: *const Public) -> &'a mut Open {
    // SAFETY: per the contract, `f` is the first field of a live, boxed Open,
    // and no other reference to it exists during this callback.
    unsafe { &mut *f.cast::<Open>().cast_mut() }
}

/// A shared view of the `Open` behind HDF5's file pointer.
///
/// # Safety
/// As [`this`]; no `&mut` to it may be alive.
unsafe fn view<'a>(f: *const Public) -> &'a Open {
    // SAFETY: per the contract, `f` is the first field of a live, boxed Open.
    unsafe { &*f.cast::<Open>() }
}

fn fail(o: &Open, what: &str, e: &std::io::Error) -> herr_t {
    tracing::warn!(file = %o.path.display(), error = %e, "HDF5 {what} failed.");
    -1
}

unsafe extern "C" fn open(
    name: *const c_char,
    flags: c_uint,
    _fapl: hid_t,
    _maxaddr: haddr_t,
) -> *mut Public {
    // SAFETY: HDF5 passes the file name as a NUL-terminated string.
    let path = PathBuf::from(std::ffi::OsStr::from_bytes(
        unsafe { CStr::from_ptr(name) }.to_bytes(),
    ));
    let opened = OpenOptions::new()
        .read(true)
        .write(flags & ACC_RDWR != 0)
        .create(flags & ACC_CREAT != 0 && flags & ACC_EXCL == 0)
        .create_new(flags & ACC_CREAT != 0 && flags & ACC_EXCL != 0)
        .truncate(flags & ACC_TRUNC != 0)
        .mode(0o666)
        .open(&path)
        .and_then(|file| {
            let key = undo::key_of(&file)?;
            let eof = file.metadata()?.len();
            Ok((file, key, eof))
        });
    match opened {
        Ok((file, key, eof)) => Box::into_raw(Box::new(Open {
            // SAFETY: all-zero is a valid Public (integers and a null pointer);
            // HDF5 fills it in after open returns.
            public: unsafe { std::mem::zeroed() },
            file,
            path,
            key,
            eoa: 0,
            eof,
        }))
        .cast(),
        Err(e) => {
            tracing::debug!(file = %path.display(), error = %e, "HDF5 open failed.");
            std::ptr::null_mut()
        }
    }
}

unsafe extern "C" fn close(f: *mut Public) -> herr_t {
    // SAFETY: `f` came from `open` (Box::into_raw of an Open) and HDF5 closes
    // it once; the descriptor closes with the box.
    drop(unsafe { Box::from_raw(f.cast::<Open>()) });
    0
}

unsafe extern "C" fn cmp(a: *const Public, b: *const Public) -> c_int {
    // SAFETY: both are open files of this driver (HDF5 compares like with like).
    let (a, b) = unsafe { (view(a).key, view(b).key) };
    a.cmp(&b) as c_int
}

unsafe extern "C" fn query(_f: *const Public, flags: *mut c_ulong) -> herr_t {
    if !flags.is_null() {
        // SAFETY: a valid out-pointer from HDF5 (`_f` may be null: driver query).
        unsafe { *flags = FEATURES };
    }
    0
}

unsafe extern "C" fn get_eoa(f: *const Public, _type: c_int) -> haddr_t {
    // SAFETY: an open file of this driver.
    unsafe { view(f) }.eoa
}

unsafe extern "C" fn set_eoa(f: *mut Public, _type: c_int, addr: haddr_t) -> herr_t {
    // SAFETY: an open file of this driver.
    unsafe { this(f) }.eoa = addr;
    0
}

unsafe extern "C" fn get_eof(f: *const Public, _type: c_int) -> haddr_t {
    // SAFETY: an open file of this driver.
    unsafe { view(f) }.eof
}

unsafe extern "C" fn read(
    f: *mut Public,
    _type: c_int,
    _dxpl: hid_t,
    addr: haddr_t,
    size: usize,
    buf: *mut c_void,
) -> herr_t {
    // SAFETY: an open file of this driver; HDF5 passes a buffer of `size` bytes.
    let (o, buf) = unsafe {
        (
            this(f),
            std::slice::from_raw_parts_mut(buf.cast::<u8>(), size),
        )
    };
    let mut done = 0;
    while done < size {
        match o.file.read_at(&mut buf[done..], addr + done as u64) {
            // Past the end of the file reads as zeros, as in sec2.
            Ok(0) => {
                buf[done..].fill(0);
                break;
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return fail(o, "read", &e),
        }
    }
    0
}

unsafe extern "C" fn write(
    f: *mut Public,
    _type: c_int,
    _dxpl: hid_t,
    addr: haddr_t,
    size: usize,
    buf: *const c_void,
) -> herr_t {
    // SAFETY: an open file of this driver; HDF5 passes a buffer of `size` bytes.
    let (o, buf) = unsafe { (this(f), std::slice::from_raw_parts(buf.cast::<u8>(), size)) };
    crash_point();
    if let Err(e) = undo::record(o.key, &o.file, addr, size as u64) {
        return fail(o, "undo log write", &e);
    }
    if let Err(e) = o.file.write_all_at(buf, addr) {
        return fail(o, "write", &e);
    }
    o.eof = o.eof.max(addr + size as u64);
    0
}

unsafe extern "C" fn truncate(f: *mut Public, _dxpl: hid_t, _closing: hbool_t) -> herr_t {
    // SAFETY: an open file of this driver.
    let o = unsafe { this(f) };
    if o.eoa == o.eof {
        return 0;
    }
    crash_point();
    if o.eoa < o.eof
        && let Err(e) = undo::record(o.key, &o.file, o.eoa, o.eof - o.eoa)
    {
        return fail(o, "undo log write", &e);
    }
    if let Err(e) = o.file.set_len(o.eoa) {
        return fail(o, "truncate", &e);
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

unsafe extern "C" fn lock(f: *mut Public, rw: hbool_t) -> herr_t {
    // SAFETY: an open file of this driver.
    let o = unsafe { this(f) };
    let how = if rw != 0 {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    };
    // SAFETY: flock on a descriptor the Open owns.
    if unsafe { libc::flock(o.file.as_raw_fd(), how | libc::LOCK_NB) } < 0 {
        let e = std::io::Error::last_os_error();
        // As sec2 by default: a file system without flock opens unlocked.
        if e.raw_os_error() == Some(libc::ENOSYS) {
            return 0;
        }
        return fail(o, "file lock", &e);
    }
    0
}

unsafe extern "C" fn unlock(f: *mut Public) -> herr_t {
    // SAFETY: an open file of this driver.
    let o = unsafe { this(f) };
    // SAFETY: flock on a descriptor the Open owns.
    if unsafe { libc::flock(o.file.as_raw_fd(), libc::LOCK_UN) } < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOSYS) {
            return 0;
        }
        return fail(o, "file unlock", &e);
    }
    0
}
