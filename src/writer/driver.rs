//! What melforge's two HDF5 file drivers share: HDF5 1.10's driver class
//! layout, and the parts that behave exactly as HDF5's default `sec2`
//! driver (POSIX `pread`, end-of-address bookkeeping, `flock`), so the files
//! they write are `sec2` files that h5py and every other reader open.
//!
//! * `append::vfd` (serve's split files) saves the bytes a write or truncate
//!   is about to replace to the file's undo log first;
//! * [`super::lent`] (the build's split files) hands the large raw-data
//!   writes of buffers the writer lends it to a pool of threads, so the
//!   kernel's copy into the page cache leaves the writer thread.
//!
//! The class layout is HDF5 1.10's `H5FD_class_t` from 1.10.8 on (with
//! `terminate`, and `get_eof` taking a memory type); hdf5-sys declares an
//! older one, so the struct is declared here and a driver is only
//! registered on a 1.10 library from 1.10.8 on ([`register`]).
//!
//! Every driver's open file is a `#[repr(C)]` struct whose first field is a
//! [`Base`], itself starting with HDF5's public part, so the callbacks here
//! read any driver's file through the pointer HDF5 passes.

use std::ffi::{CStr, c_char, c_int, c_uint, c_ulong, c_void};
use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::OnceLock;

use hdf5_sys::h5::{haddr_t, hbool_t, herr_t, hsize_t};
use hdf5_sys::h5i::hid_t;

/// `H5FD_t`: the public part of an open file, filled in by HDF5 after `open`.
#[repr(C)]
pub(super) struct Public {
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

/// The part every driver's open file starts with.
#[repr(C)]
pub(super) struct Base {
    public: Public,
    pub file: File,
    pub path: PathBuf,
    /// (device, inode): two opens of one file compare equal.
    pub key: (u64, u64),
    pub eoa: haddr_t,
    pub eof: haddr_t,
}

type Unused = Option<unsafe extern "C" fn()>;

pub(super) type OpenFn = unsafe extern "C" fn(*const c_char, c_uint, hid_t, haddr_t) -> *mut Public;
pub(super) type CloseFn = unsafe extern "C" fn(*mut Public) -> herr_t;
pub(super) type ReadFn =
    unsafe extern "C" fn(*mut Public, c_int, hid_t, haddr_t, usize, *mut c_void) -> herr_t;
pub(super) type WriteFn =
    unsafe extern "C" fn(*mut Public, c_int, hid_t, haddr_t, usize, *const c_void) -> herr_t;
pub(super) type TruncateFn = unsafe extern "C" fn(*mut Public, hid_t, hbool_t) -> herr_t;

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
    open: Option<OpenFn>,
    close: Option<CloseFn>,
    cmp: Option<unsafe extern "C" fn(*const Public, *const Public) -> c_int>,
    query: Option<unsafe extern "C" fn(*const Public, *mut c_ulong) -> herr_t>,
    get_type_map: Unused,
    alloc: Unused,
    free: Unused,
    get_eoa: Option<unsafe extern "C" fn(*const Public, c_int) -> haddr_t>,
    set_eoa: Option<unsafe extern "C" fn(*mut Public, c_int, haddr_t) -> herr_t>,
    get_eof: Option<unsafe extern "C" fn(*const Public, c_int) -> haddr_t>,
    get_handle: Unused,
    read: Option<ReadFn>,
    write: Option<WriteFn>,
    flush: Unused,
    truncate: Option<TruncateFn>,
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
/// `H5FD_MEM_DRAW`: raw data (dataset elements), as opposed to metadata.
pub(super) const MEM_DRAW: c_int = 3;
/// sec2's features: aggregate and accumulate metadata, sieve and aggregate
/// raw data, SWMR I/O, files the default driver can open.
const FEATURES: c_ulong = 0x0001 | 0x0002 | 0x0004 | 0x0008 | 0x0010 | 0x1000 | 0x8000;
/// Largest address: what `sec2` allows with a 64-bit `off_t`.
const MAXADDR: haddr_t = (1 << 63) - 1;

/// The callbacks that make one driver what it is; the rest are `sec2`'s.
pub(super) struct Callbacks {
    pub name: &'static CStr,
    pub open: OpenFn,
    pub close: CloseFn,
    pub read: ReadFn,
    pub write: WriteFn,
    pub truncate: TruncateFn,
}

/// Registers a driver with `callbacks` (call under the HDF5 lock), or says
/// why this HDF5 cannot have it.
pub(super) fn register(callbacks: Callbacks) -> Result<hid_t, &'static str> {
    let (mut major, mut minor, mut release) = (0, 0, 0);
    // SAFETY: three valid out-pointers to c_uint.
    let r = unsafe { hdf5_sys::h5::H5get_libversion(&mut major, &mut minor, &mut release) };
    if r < 0 || (major, minor) != (1, 10) || release < 8 {
        return Err("melforge's file drivers are built for HDF5 1.10.8 to 1.10.x");
    }
    let class = Class {
        name: callbacks.name.as_ptr(),
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
        open: Some(callbacks.open),
        close: Some(callbacks.close),
        cmp: Some(cmp),
        query: Some(query),
        get_type_map: None,
        alloc: None,
        free: None,
        get_eoa: Some(get_eoa),
        set_eoa: Some(set_eoa),
        get_eof: Some(get_eof),
        get_handle: None,
        read: Some(callbacks.read),
        write: Some(callbacks.write),
        flush: None,
        truncate: Some(callbacks.truncate),
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
        return Err("H5FDregister refused melforge's file driver");
    }
    Ok(id)
}

/// The driver registered in `cell` (once per process, under the HDF5
/// lock), or why this HDF5 cannot have it; `on_fail` says so once.
pub(super) fn register_once(
    cell: &'static OnceLock<Result<hid_t, &'static str>>,
    callbacks: Callbacks,
    on_fail: fn(&'static str),
) -> Result<hid_t, &'static str> {
    *cell.get_or_init(|| {
        let r = hdf5::sync::sync(|| register(callbacks));
        if let Err(why) = r {
            on_fail(why);
        }
        r
    })
}

/// Makes `fapl` open files with the driver `registered` names; `Ok` (and
/// `fapl` unchanged: HDF5's sec2) where it could not be registered.
pub(super) fn use_registered(
    fapl: hid_t,
    registered: Result<hid_t, &'static str>,
) -> hdf5::Result<()> {
    let Ok(id) = registered else {
        return Ok(());
    };
    // SAFETY: `fapl` is a live file-access property list owned by the caller;
    // `id` a registered driver that takes no driver info (null).
    let r = unsafe { hdf5_sys::h5p::H5Pset_driver(fapl, id, std::ptr::null()) };
    hdf5::h5check(r).map(drop)
}

/// The driver's open file behind HDF5's file pointer.
///
/// # Safety
/// `f` must come from the `open` of the driver whose files are `T`s (boxed,
/// `#[repr(C)]`, starting with a [`Base`]) and not be closed yet; HDF5
/// serialises calls, so no other reference to it exists during a callback.
pub(super) unsafe fn file<'a, T>(f: *const Public) -> &'a mut T {
    // SAFETY: per the contract.
    unsafe { &mut *f.cast::<T>().cast_mut() }
}

/// Boxes an opened file for HDF5, or HDF5's failure (null) when it did not
/// open.
pub(super) fn into_public<T>(opened: std::io::Result<T>) -> *mut Public {
    match opened {
        Ok(o) => Box::into_raw(Box::new(o)).cast(),
        Err(_) => std::ptr::null_mut(),
    }
}

/// `read` into HDF5's buffer of `size` bytes at `buf`, as sec2.
///
/// # Safety
/// `buf` is the buffer HDF5 passes to `read`, valid for `size` bytes.
pub(super) unsafe fn read_into(o: &Base, addr: haddr_t, size: usize, buf: *mut c_void) -> herr_t {
    // SAFETY: per the contract.
    let buf = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), size) };
    o.read_at(addr, buf)
}

impl Base {
    /// Opens `name` as HDF5's `flags` ask, as `sec2` does.
    ///
    /// # Safety
    /// `name` is the NUL-terminated string HDF5 passes to `open`.
    pub(super) unsafe fn open(name: *const c_char, flags: c_uint) -> std::io::Result<Base> {
        // SAFETY: per the contract.
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
            .open(&path);
        let file = match opened {
            Ok(f) => f,
            Err(e) => {
                tracing::debug!(file = %path.display(), error = %e, "HDF5 open failed.");
                return Err(e);
            }
        };
        let m = file.metadata()?;
        Ok(Base {
            // SAFETY: all-zero is a valid Public (integers and a null pointer);
            // HDF5 fills it in after open returns.
            public: unsafe { std::mem::zeroed() },
            file,
            path,
            key: (m.dev(), m.ino()),
            eoa: 0,
            eof: m.len(),
        })
    }

    /// Logs a failed call and returns HDF5's failure.
    pub(super) fn fail(&self, what: &str, e: &std::io::Error) -> herr_t {
        tracing::warn!(file = %self.path.display(), error = %e, "HDF5 {what} failed.");
        -1
    }

    /// `pread` of `buf.len()` bytes at `addr`; past the end reads as zeros,
    /// as in sec2.
    pub(super) fn read_at(&self, addr: haddr_t, buf: &mut [u8]) -> herr_t {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], addr + done as u64) {
                Ok(0) => {
                    buf[done..].fill(0);
                    break;
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return self.fail("read", &e),
            }
        }
        0
    }
}

/// The [`Base`] behind HDF5's file pointer.
///
/// # Safety
/// `f` must come from a driver's `open` (whose file starts with a `Base`)
/// and not be closed yet; HDF5 serialises calls.
unsafe fn base<'a>(f: *const Public) -> &'a mut Base {
    // SAFETY: per the contract, `f` is the first field of a live, boxed
    // #[repr(C)] struct that starts with a Base, and no other reference to
    // it exists during this callback.
    unsafe { &mut *f.cast::<Base>().cast_mut() }
}

unsafe extern "C" fn cmp(a: *const Public, b: *const Public) -> c_int {
    // SAFETY: both are open files of this driver (HDF5 compares like with like).
    let (a, b) = unsafe { (base(a).key, base(b).key) };
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
    // SAFETY: an open file of a driver of this module.
    unsafe { base(f) }.eoa
}

unsafe extern "C" fn set_eoa(f: *mut Public, _type: c_int, addr: haddr_t) -> herr_t {
    // SAFETY: an open file of a driver of this module.
    unsafe { base(f) }.eoa = addr;
    0
}

unsafe extern "C" fn get_eof(f: *const Public, _type: c_int) -> haddr_t {
    // SAFETY: an open file of a driver of this module.
    unsafe { base(f) }.eof
}

/// `flock` as sec2 by default; a file system without it opens unlocked.
fn flock(o: &Base, how: c_int, what: &str) -> herr_t {
    match crate::runtime::sys::flock(o.file.as_fd(), how) {
        Ok(()) => 0,
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => 0,
        Err(e) => o.fail(what, &e),
    }
}

unsafe extern "C" fn lock(f: *mut Public, rw: hbool_t) -> herr_t {
    let how = if rw != 0 {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    };
    // SAFETY: an open file of a driver of this module.
    flock(unsafe { base(f) }, how | libc::LOCK_NB, "file lock")
}

unsafe extern "C" fn unlock(f: *mut Public) -> herr_t {
    // SAFETY: an open file of a driver of this module.
    flock(unsafe { base(f) }, libc::LOCK_UN, "file unlock")
}
