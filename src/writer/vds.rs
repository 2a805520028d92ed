//! Creating HDF5 virtual datasets (VDS), which the safe `hdf5` crate does not
//! expose (`H5Pset_layout(H5D_VIRTUAL)` + `H5Pset_virtual` per source +
//! `H5Dcreate2`): `merge`'s datasets over the shards ([`create`]), and the
//! per-row views lhotse reads a split's rows through ([`views`]).
//!
//! Every call runs under the crate's global HDF5 lock ([`hdf5::sync::sync`]),
//! every id opened here is closed here (an [`Ids`] guard), and the dataset is
//! then reopened through the safe crate by the caller.

use std::ffi::{CStr, CString};

use hdf5_sys::h5::hsize_t;
use hdf5_sys::h5d::{H5D_layout_t, H5Dclose, H5Dcreate2, H5Dget_type};
use hdf5_sys::h5i::hid_t;
use hdf5_sys::h5p::{
    H5P_CLS_DATASET_CREATE, H5P_DEFAULT, H5Pclose, H5Pcreate, H5Pset_layout,
    H5Pset_obj_track_times, H5Pset_virtual,
};
use hdf5_sys::h5s::{H5S_seloper_t, H5Sclose, H5Screate_simple, H5Sselect_hyperslab};
use hdf5_sys::h5t::H5Tclose;

/// Why a virtual dataset could not be created.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An HDF5 C call returned a failure status or an invalid id.
    #[error("{0} failed")]
    Call(&'static str),
    /// A dataset or file name contains a NUL byte, which C strings cannot hold.
    #[error("the name {name:?} contains a NUL byte")]
    Nul { name: String },
}

/// One source of a virtual dataset: `rows` rows of the dataset of the same
/// name in file `file` (a name relative to the virtual file's directory;
/// "." is the virtual file itself), from its row `from` on (the source has
/// `extent` rows in all), placed at row `offset`.
pub struct Source<'a> {
    pub file: &'a str,
    pub rows: usize,
    pub offset: usize,
    pub from: usize,
    pub extent: usize,
}

/// Ids to close on every path out, in reverse order of opening.
struct Ids(Vec<(hid_t, unsafe extern "C" fn(hid_t) -> i32)>);

impl Ids {
    fn keep(
        &mut self,
        what: &'static str,
        id: hid_t,
        close: unsafe extern "C" fn(hid_t) -> i32,
    ) -> Result<hid_t, Error> {
        if id < 0 {
            return Err(Error::Call(what));
        }
        self.0.push((id, close));
        Ok(id)
    }
}

impl Drop for Ids {
    fn drop(&mut self) {
        for (id, close) in self.0.drain(..).rev() {
            // SAFETY: `id` is a valid id returned by the HDF5 call that `close`
            // belongs to, closed exactly once (drained here).
            unsafe { close(id) };
        }
    }
}

fn check(what: &'static str, status: i32) -> Result<(), Error> {
    if status < 0 {
        Err(Error::Call(what))
    } else {
        Ok(())
    }
}

/// Where a source is mapped: the virtual dataset's creation properties, its
/// space, extent and name.
struct Mapping<'a> {
    dcpl: hid_t,
    vspace: hid_t,
    dims: &'a [hsize_t],
    dataset: &'a CStr,
}

/// Maps rows `s.from..s.from + s.rows` of `s` (dataset `at.dataset` in
/// file `file`) onto rows `s.offset..` of the virtual space.
///
/// # Safety
/// `at.dcpl` and `at.vspace` are open ids for the call; the global HDF5 lock
/// is held.
unsafe fn map_source(
    ids: &mut Ids,
    at: &Mapping<'_>,
    file: &CStr,
    s: &Source<'_>,
) -> Result<(), Error> {
    let rank = at.dims.len() as i32;
    let mut count = at.dims.to_vec();
    count[0] = s.rows as hsize_t;
    let mut src_dims = at.dims.to_vec();
    src_dims[0] = s.extent as hsize_t;
    let mut start = vec![0 as hsize_t; at.dims.len()];
    start[0] = s.offset as hsize_t;
    let mut src_start = vec![0 as hsize_t; at.dims.len()];
    src_start[0] = s.from as hsize_t;
    // SAFETY: the pointers point into live locals (`count`, `src_dims`,
    // `start`, `src_start`) or
    // the caller's CStrs, each `rank` long where a length applies; the ids
    // are open (the caller's contract, or just checked by `ids.keep`).
    unsafe {
        let src_space = ids.keep(
            "H5Screate_simple",
            H5Screate_simple(rank, src_dims.as_ptr(), std::ptr::null()),
            H5Sclose,
        )?;
        if s.from != 0 || s.extent != s.rows {
            check(
                "H5Sselect_hyperslab",
                H5Sselect_hyperslab(
                    src_space,
                    H5S_seloper_t::H5S_SELECT_SET,
                    src_start.as_ptr(),
                    std::ptr::null(),
                    count.as_ptr(),
                    std::ptr::null(),
                ),
            )?;
        }
        check(
            "H5Sselect_hyperslab",
            H5Sselect_hyperslab(
                at.vspace,
                H5S_seloper_t::H5S_SELECT_SET,
                start.as_ptr(),
                std::ptr::null(),
                count.as_ptr(),
                std::ptr::null(),
            ),
        )?;
        check(
            "H5Pset_virtual",
            H5Pset_virtual(
                at.dcpl,
                at.vspace,
                file.as_ptr(),
                at.dataset.as_ptr(),
                src_space,
            ),
        )
    }
}

/// Creates dataset `name` in the open file `file_id` as a virtual dataset of
/// shape `(total, row_shape…)` whose element type is that of `like` (an open
/// dataset of the first source), mapping each source's rows in order from
/// the dataset of the same name in each source file.
/// Sources with zero rows are skipped; `total` must be their sum and > 0.
pub fn create(
    file_id: hid_t,
    name: &str,
    like: hid_t,
    row_shape: &[usize],
    total: usize,
    sources: &[Source<'_>],
) -> Result<(), Error> {
    let dims: Vec<hsize_t> = std::iter::once(total)
        .chain(row_shape.iter().copied())
        .map(|d| d as hsize_t)
        .collect();
    let c_name = c_string(name)?;
    create_from(file_id, (&c_name, &c_name), like, &dims, sources)
}

fn c_string(s: &str) -> Result<CString, Error> {
    CString::new(s).map_err(|_| Error::Nul {
        name: s.to_string(),
    })
}

/// Creates dataset `name` of extent `dims` in `file_id`, of `like`'s element
/// type, mapping `sources` (rows of dataset `source` in their files).
fn create_from(
    file_id: hid_t,
    (name, source): (&CStr, &CStr),
    like: hid_t,
    dims: &[hsize_t],
    sources: &[Source<'_>],
) -> Result<(), Error> {
    let rank = dims.len() as i32;
    let mut srcs = Vec::new();
    for s in sources.iter().filter(|s| s.rows > 0) {
        srcs.push((c_string(s.file)?, s));
    }
    hdf5::sync::sync(|| {
        let mut ids = Ids(Vec::new());
        // SAFETY: every pointer passed points into a live local (`dims`,
        // the CStrings) whose length matches `rank`; every id is checked
        // (negative = failure) before use and closed once by `ids`;
        // `file_id` and `like` are open ids the caller's safe handles keep
        // alive for the call; the global HDF5 lock is held by `sync`.
        unsafe {
            let dcpl = ids.keep("H5Pcreate", H5Pcreate(*H5P_CLS_DATASET_CREATE), H5Pclose)?;
            check(
                "H5Pset_layout",
                H5Pset_layout(dcpl, H5D_layout_t::H5D_VIRTUAL),
            )?;
            check("H5Pset_obj_track_times", H5Pset_obj_track_times(dcpl, 0))?;
            let vspace = ids.keep(
                "H5Screate_simple",
                H5Screate_simple(rank, dims.as_ptr(), dims.as_ptr()),
                H5Sclose,
            )?;
            for (file, s) in &srcs {
                let at = Mapping {
                    dcpl,
                    vspace,
                    dims,
                    dataset: source,
                };
                // SAFETY: as above; `dcpl` and `vspace` are open ids kept by
                // `ids` until after the call.
                map_source(&mut ids, &at, file, s)?;
            }
            // The mapping selections changed vspace's selection; the dataset
            // itself is created over the whole extent.
            let space = ids.keep(
                "H5Screate_simple",
                H5Screate_simple(rank, dims.as_ptr(), dims.as_ptr()),
                H5Sclose,
            )?;
            let dtype = ids.keep("H5Dget_type", H5Dget_type(like), H5Tclose)?;
            ids.keep(
                "H5Dcreate2",
                H5Dcreate2(
                    file_id,
                    name.as_ptr(),
                    dtype,
                    space,
                    H5P_DEFAULT,
                    dcpl,
                    H5P_DEFAULT,
                ),
                H5Dclose,
            )?;
        }
        Ok(())
    })
}

/// The group a split file's lhotse views live in: row `i` is
/// `lhotse/<i>`, the `storage_key` its cut names.
pub const VIEWS: &str = "lhotse";

/// Adds to the variable-length split file `file` (datasets `features`,
/// `offsets`, `lengths`; docs/FORMAT.md) one virtual dataset per row,
/// `lhotse/<row>`, of shape `(frames, bins)` over that row's frames of
/// `features` in the same file: what lhotse's `numpy_hdf5` reader opens
/// (`h5py.File(path)[key][a:b]`), the stored bytes themselves, no copy.
/// Row `i`'s view stops at `limits[i]` frames where its row is longer
/// (lhotse's own count of the cut's frames). Returns the number of views
/// made.
pub fn views(file: &hdf5::File, limits: &[u32]) -> Result<usize, ViewsError> {
    let features = file.dataset("features")?;
    let offsets: Vec<i64> = file.dataset("offsets")?.read_raw()?;
    let lengths: Vec<i32> = file.dataset("lengths")?.read_raw()?;
    let shape = features.shape();
    let (extent, bins) = match shape[..] {
        [frames, bins] => (frames, bins),
        _ => return Err(ViewsError::Shape(shape)),
    };
    if offsets.len() != lengths.len() || limits.len() != lengths.len() {
        return Err(ViewsError::Rows {
            offsets: offsets.len(),
            lengths: lengths.len(),
            limits: limits.len(),
        });
    }
    file.create_group(VIEWS)?;
    let source = c_string("features")?;
    for (row, ((&at, &len), &limit)) in offsets.iter().zip(&lengths).zip(limits).enumerate() {
        if at < 0 || len < 0 || at as usize + len as usize > extent {
            return Err(ViewsError::Bounds {
                row,
                at,
                len,
                extent,
            });
        }
        let (from, rows) = (at as usize, (len as usize).min(limit as usize));
        let name = c_string(&format!("{VIEWS}/{row}"))?;
        let dims = [rows as hsize_t, bins as hsize_t];
        let here = Source {
            file: ".",
            rows,
            offset: 0,
            from,
            extent,
        };
        create_from(file.id(), (&name, &source), features.id(), &dims, &[here])?;
    }
    Ok(offsets.len())
}

/// Why a split file's views could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ViewsError {
    #[error(transparent)]
    Hdf5(#[from] hdf5::Error),
    #[error(transparent)]
    Vds(#[from] Error),
    #[error("`features` has shape {0:?}; expected (frames, bins)")]
    Shape(Vec<usize>),
    #[error("`offsets` has {offsets} rows, `lengths` {lengths} and the cuts {limits}")]
    Rows {
        offsets: usize,
        lengths: usize,
        limits: usize,
    },
    #[error("row {row} spans frames {at}..{at}+{len}, outside `features`' {extent}")]
    Bounds {
        row: usize,
        at: i64,
        len: i32,
        extent: usize,
    },
}
