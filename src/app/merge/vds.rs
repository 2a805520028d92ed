//! The one place melforge calls HDF5's C API directly: creating a virtual
//! dataset (VDS), which the safe `hdf5` crate does not expose
//! (`H5Pset_layout(H5D_VIRTUAL)` + `H5Pset_virtual` per source + `H5Dcreate2`).
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

/// One source of a virtual dataset: all `rows` rows of dataset `dataset` in
/// file `file` (a name relative to the virtual file's directory), placed at
/// row `offset`.
pub struct Source<'a> {
    pub file: &'a str,
    pub rows: usize,
    pub offset: usize,
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

/// Maps all rows of `s` (dataset `at.dataset` in file `file`) onto rows
/// `s.offset..` of the virtual space.
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
    let mut src_dims = at.dims.to_vec();
    src_dims[0] = s.rows as hsize_t;
    let mut start = vec![0 as hsize_t; at.dims.len()];
    start[0] = s.offset as hsize_t;
    // SAFETY: the pointers point into live locals (`src_dims`, `start`) or
    // the caller's CStrs, each `rank` long where a length applies; the ids
    // are open (the caller's contract, or just checked by `ids.keep`).
    unsafe {
        let src_space = ids.keep(
            "H5Screate_simple",
            H5Screate_simple(rank, src_dims.as_ptr(), std::ptr::null()),
            H5Sclose,
        )?;
        check(
            "H5Sselect_hyperslab",
            H5Sselect_hyperslab(
                at.vspace,
                H5S_seloper_t::H5S_SELECT_SET,
                start.as_ptr(),
                std::ptr::null(),
                src_dims.as_ptr(),
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
/// dataset of the first source), mapping each source's rows in order.
/// Sources with zero rows are skipped; `total` must be their sum and > 0.
pub fn create(
    file_id: hid_t,
    name: &str,
    like: hid_t,
    row_shape: &[usize],
    total: usize,
    sources: &[Source<'_>],
) -> Result<(), Error> {
    let c_name = CString::new(name).map_err(|_| Error::Nul {
        name: name.to_string(),
    })?;
    let dims: Vec<hsize_t> = std::iter::once(total)
        .chain(row_shape.iter().copied())
        .map(|d| d as hsize_t)
        .collect();
    let rank = dims.len() as i32;
    let mut srcs = Vec::new();
    for s in sources.iter().filter(|s| s.rows > 0) {
        let f = CString::new(s.file).map_err(|_| Error::Nul {
            name: s.file.to_string(),
        })?;
        srcs.push((f, s));
    }
    hdf5::sync::sync(|| {
        let mut ids = Ids(Vec::new());
        // SAFETY: every pointer passed points into a live local (`dims`,
        // `src_dims`, `start`, the CStrings) whose length matches `rank`; every
        // id is checked (negative = failure) before use and closed once by
        // `ids`; `file_id` and `like` are open ids the caller's safe handles
        // keep alive for the call; the global HDF5 lock is held by `sync`.
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
                    dims: &dims,
                    dataset: &c_name,
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
                    c_name.as_ptr(),
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
