//! Opening an existing `<split>.h5` for appending: crash recovery.
//!
//! A writer killed in SWMR mode leaves the superblock's "open for write"
//! status flags set, and a plain read-write open then fails ("file is already
//! open for write … use h5clear"). [`open_rw`] with `clear_flags` sets HDF5's
//! private fapl property `clear_status_flags` first, which is what `h5clear -s`
//! does. [`open_existing`] then refuses a file made with other parameters
//! ([`check_compatible`]) or holding fewer rows than the journal confirms, and
//! cuts every dataset back to the confirmed count: rows past it may be a torn,
//! unflushed chunk whose files are still in the drop directory, so they are
//! re-ingested rather than trusted.
//!
//! Before any of that, the end of allocation (EOA) moves up to the end of the
//! file. A kill inside H5Fflush can leave the superblock's EOA older than the
//! chunk index and chunks the same flush wrote; HDF5 would then refuse to read
//! them ("addr overflow") or, worse, hand their space out again for new heap
//! collections and chunks while the file still names it. That matches the
//! fault the kill -9 soak saw, a confirmed row's `label` chunk overwritten by
//! path strings; `tests_crash` makes the state by hand.
//!
//! The `unsafe` blocks of the appender are here, in [`raw`]: the HDF5 calls
//! the high-level crate does not offer (those `h5clear` makes,
//! `H5Fincrement_filesize`, `H5garbage_collect`); the chunk-level ones are in
//! `writer::direct::raw`.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use hdf5::File;

use super::names::open_names;
use super::store::Sets;
use super::{OpenReport, Opened, PATH};
use crate::writer::Error;
use crate::writer::h5::{self, Context, Header};
use crate::writer::strings::{self, Column};

/// Opens the existing file at `p`, clearing a killed writer's status flags,
/// checks it against `header`, and cuts it to the `confirmed` rows.
pub(super) fn open_existing(
    p: &Path,
    header: &Header<'_>,
    confirmed: usize,
) -> Result<Opened, Error> {
    let file = open_rw(p, true).ctx(p, || "open the file for appending".into())?;
    // Before anything is read, freed or allocated: a kill inside H5Fflush can
    // leave the superblock's end of allocation older than the chunk index and
    // chunks that flush wrote. Space past it is still named by the file, so
    // the EOA moves up to the end of the file first (`H5Fincrement_filesize`)
    // and nothing there is handed out again.
    hdf5::sync::sync(|| raw::eoa_to_end_of_file(file.id())).ctx(p, || {
        "move the end of allocation to the end of the file".into()
    })?;
    let mut ds = Sets::open(&file, p, header)?;
    check_compatible(&file, &ds, p, header)?;
    let mut lens = ds.row_lens();
    if strings::exists(&file, PATH) {
        let e = strings::ends_name(PATH);
        lens.push(
            file.dataset(&e)
                .ctx(p, || format!("open dataset `{e}`"))?
                .size(),
        );
    }
    let found = lens.iter().copied().max().unwrap_or(0);
    let shortest = lens.iter().copied().min().unwrap_or(0);
    if shortest < confirmed {
        return Err(Error::Recovery {
            file: p.to_path_buf(),
            reason: format!(
                "the journal confirms {confirmed} rows but the file has only {shortest} \
                 (rows per dataset: {lens:?})"
            ),
        });
    }
    // An older file's variable-length `path` is converted, not cut: no
    // element of it is written again (`super::vlen`).
    let old_path = ds.take_vlen_path();
    if found != confirmed || ds.frames_past(p, confirmed)? {
        tracing::warn!(
            file = %p.display(),
            rows = found,
            confirmed,
            "Cutting the rows past the journal: they were never confirmed."
        );
        ds.cut(p, confirmed)?;
    }
    let paths = match old_path {
        Some(old) => {
            drop(old);
            let v = super::vlen::take_strings(&file, p, PATH, confirmed)?;
            Column::create(&file, p, PATH, header.chunk_files, &v)?
        }
        None => Column::open(&file, p, PATH, confirmed)?,
    };
    let (names_col, names) = open_names(&file, p)?;
    set_layout_version(&file, p)?;
    let labels_in_use = labels_in_use(&ds, p, confirmed, names.len())?;
    let report = OpenReport {
        created: false,
        rows_found: found,
        rows_dropped: found - confirmed,
        labels_in_use,
    };
    Ok(Opened {
        file,
        sets: ds,
        paths,
        names_col,
        names,
        report,
    })
}

/// Marks `file` as holding `writer::strings` columns (root attribute
/// `layout_version`), rewriting the attribute only when it differs (an
/// in-place write of the root object header: `replace_names_attr` says why
/// that matters).
fn set_layout_version(file: &File, p: &Path) -> Result<(), Error> {
    let name = "layout_version";
    let have = file.attr(name).and_then(|a| a.read_scalar::<i64>()).ok();
    if have == Some(strings::LAYOUT_VERSION) {
        return Ok(());
    }
    (|| {
        if have.is_some() || file.attr_names()?.iter().any(|n| n == name) {
            file.delete_attr(name)?;
        }
        file.new_attr::<i64>()
            .create(name)?
            .write_scalar(&strings::LAYOUT_VERSION)
    })()
    .ctx(p, || format!("write attribute `{name}`"))
}

/// How many of the file's `n_names` label names its first `rows` rows use:
/// one past the highest label id among them (all names when an id is out of
/// range: such a file is left as it is).
fn labels_in_use(ds: &Sets, p: &Path, rows: usize, n_names: usize) -> Result<usize, Error> {
    if rows == 0 {
        return Ok(0);
    }
    let ids = ds
        .label()
        .read_slice_1d::<i32, _>(0..rows)
        .ctx(p, || "read dataset `label`".into())?;
    let top = ids.iter().copied().max().unwrap_or(-1);
    Ok(usize::try_from(top + 1).map_or(n_names, |n| if n > n_names { n_names } else { n }))
}

/// Refuses a file whose rows were computed with other parameters.
fn check_compatible(file: &File, ds: &Sets, p: &Path, h: &Header<'_>) -> Result<(), Error> {
    let bad = |reason: String| {
        Err(Error::Incompatible {
            file: p.to_path_buf(),
            reason,
        })
    };
    if let Err(reason) = ds.check_shape(h) {
        return bad(reason);
    }
    // Compare every root attribute a fresh file would get (parameters and split),
    // by writing them into an in-memory file and reading both back as text.
    let expected = h5::attrs_as_text(h).ctx(p, || "render the expected attributes".into())?;
    for (name, want) in expected {
        let informational = [
            "label_names",
            "layout_version",
            "melforge_version",
            "chunk_files",
            "chunk_frames",
        ];
        if informational.contains(&name.as_str()) || h.extra_attrs.iter().any(|(k, _)| *k == name) {
            continue;
        }
        let got = h5::attr_text(file, &name).ctx(p, || format!("read attribute `{name}`"))?;
        if got.as_deref() != Some(want.as_str()) {
            return bad(format!(
                "attribute `{name}` is {}, this configuration has {want}",
                got.as_deref().unwrap_or("absent")
            ));
        }
    }
    Ok(())
}

/// Most bytes HDF5's metadata cache may hold per open split file. An
/// appender's working set is the tail of each chunk index and the object
/// headers, far below this; anything more is metadata written at an earlier
/// flush and never read again. 1 MiB, so that memory grows with the
/// number of splits, not with the rows in them (at 4 MiB, three splits took
/// ~240,000 files to fill their caches: docs/BENCHMARKS.md).
pub const METADATA_CACHE_BYTES: usize = 1 << 20;

/// HDF5's raw-data chunk cache per dataset of an open split file: slots and
/// bytes. Rows are appended and never read back, so the cache only has to
/// keep the last, partly written chunk of each dataset; HDF5's default
/// (1 MiB, 521 slots, per dataset) kept up to ~1.7 MiB per split of written
/// chunks with small rows. A chunk larger than this is written past the cache
/// (as every `mel` chunk of a realistic row already is with the default).
pub const CHUNK_CACHE: (usize, usize) = (67, 256 << 10);

/// Hands back the memory HDF5 keeps in its free lists (`H5garbage_collect`):
/// blocks of evicted chunks and metadata HDF5 holds for reuse, which grow up
/// to its default limits (tens of MiB) otherwise. Call before trimming the
/// heap (`runtime::sys::trim_heap`).
pub fn release_free_lists() {
    if let Err(e) = hdf5::sync::sync(raw::garbage_collect) {
        tracing::debug!(error = %e, "H5garbage_collect failed.");
    }
}

/// Opens `p` read-write with libver (latest, latest). With `clear_flags`, sets the
/// private fapl property `clear_status_flags` first, as `h5clear -s` does, so a
/// file whose SWMR writer was killed opens again.
///
/// The metadata cache is capped at [`METADATA_CACHE_BYTES`]
/// (`writer::h5::metadata_cache`), each dataset's chunk cache at
/// [`CHUNK_CACHE`].
pub(super) fn open_rw(p: &Path, clear_flags: bool) -> hdf5::Result<File> {
    let mdc = crate::writer::h5::metadata_cache(METADATA_CACHE_BYTES);
    let fapl = hdf5::plist::FileAccess::build()
        .libver_latest()
        .mdc_config(&mdc)
        .chunk_cache(CHUNK_CACHE.0, CHUNK_CACHE.1, 0.75)
        .finish()?;
    let name = CString::new(p.as_os_str().as_bytes())
        .map_err(|_| hdf5::Error::from("file name contains a NUL byte"))?;
    hdf5::sync::sync(|| {
        super::vfd::use_in(fapl.id())?;
        if clear_flags {
            raw::set_clear_status_flags(fapl.id())?;
        }
        raw::open_rdwr(&name, fapl.id())
    })
}

/// The raw HDF5 calls the high-level crate does not offer, each behind a thin
/// `Result`-returning wrapper. Callers hold the HDF5 lock (`hdf5::sync::sync`).
mod raw {
    use std::ffi::CStr;

    use hdf5::File;
    use hdf5_sys::h5::{hbool_t, herr_t, hsize_t};
    use hdf5_sys::h5f::{H5F_ACC_RDWR, H5Fopen};
    use hdf5_sys::h5i::hid_t;
    use hdf5_sys::h5p::H5Pset;

    /// Name of the private file-access property `h5clear -s` sets (H5Fprivate.h,
    /// `H5F_ACS_CLEAR_STATUS_FLAGS_NAME`; present in HDF5 1.10.0 and later).
    const CLEAR_STATUS_FLAGS: &CStr = c"clear_status_flags";

    pub(super) fn garbage_collect() -> hdf5::Result<()> {
        // SAFETY: H5garbage_collect takes no arguments and only frees blocks on
        // HDF5's own free lists (none is in use); the caller holds the HDF5 lock.
        hdf5::h5check(unsafe { hdf5_sys::h5::H5garbage_collect() }).map(|_| ())
    }

    pub(super) fn set_clear_status_flags(fapl: hid_t) -> hdf5::Result<()> {
        let mut on: hbool_t = 1;
        // SAFETY: `fapl` is a live file-access property list (owned by the caller);
        // the property is registered in every fapl with the size of an hbool_t, and
        // H5Pset copies that many bytes from the pointer, which is valid for them.
        let r = unsafe { H5Pset(fapl, CLEAR_STATUS_FLAGS.as_ptr(), (&raw mut on).cast()) };
        hdf5::h5check(r).map(|_| ())
    }

    // Public HDF5 API since 1.10.2 (H5Fpublic.h) that hdf5-sys does not declare.
    unsafe extern "C" {
        fn H5Fincrement_filesize(file_id: hid_t, increment: hsize_t) -> herr_t;
    }

    /// Sets the EOA of the open file `file` to max(EOA, end of file).
    pub(super) fn eoa_to_end_of_file(file: hid_t) -> hdf5::Result<()> {
        // SAFETY: `file` is a live file id owned by the caller; the call takes
        // plain integers and only moves the file's allocation mark.
        hdf5::h5check(unsafe { H5Fincrement_filesize(file, 0) }).map(|_| ())
    }

    pub(super) fn open_rdwr(name: &CStr, fapl: hid_t) -> hdf5::Result<File> {
        // SAFETY: `name` is a NUL-terminated string and `fapl` a live property list,
        // both outliving the call.
        let id = hdf5::h5check(unsafe { H5Fopen(name.as_ptr(), H5F_ACC_RDWR, fapl) })?;
        // SAFETY: `id` is a file id just returned by H5Fopen, owned by nobody else.
        unsafe { hdf5::from_id::<File>(id) }
    }
}
