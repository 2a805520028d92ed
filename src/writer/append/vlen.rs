//! Converting a file's variable-length string datasets (`path`, `meta`,
//! `label_names`) into `writer::strings` columns when the appender opens
//! it: a file made by `build`, or by a `serve` from before
//! `writer::strings::LAYOUT_VERSION`.
//!
//! Why the appender writes no variable-length string: each element of such
//! a dataset is a reference into the file's global heap, and HDF5 frees
//! the heap object an element names when it writes that element again. A
//! writer killed inside H5Fflush could leave elements past the rows the
//! journal confirmed naming heap objects that the next writer reused for
//! confirmed strings; the next append into that chunk then freed a
//! confirmed row's path, and the row read as another file's
//! (`crash::kill_9_before_every_write`, kill point 59 before the change).
//! Nulling such elements before writing near them (the earlier fix) made
//! it rarer, never impossible.
//!
//! The conversion only reads: the kept rows' strings (confirmed, so intact),
//! then unlinks the dataset. HDF5 does not free the heap objects of a
//! deleted dataset's elements (their space stays unused in the file), so
//! nothing a killed writer left behind is ever freed, and no element of
//! any vlen dataset is written again. It runs inside the open's armed step
//! (`super::undo`): a kill or power cut during it leaves the file as it
//! was before the open.

use std::path::Path;

use hdf5::File;
use hdf5::types::VarLenUnicode;

use crate::writer::Error;
use crate::writer::h5::Context;

/// The first `rows` strings (at most all) of the variable-length string
/// dataset `name` of `file`, which is then unlinked.
pub(super) fn take_strings(
    file: &File,
    p: &Path,
    name: &str,
    rows: usize,
) -> Result<Vec<String>, Error> {
    let ds = file
        .dataset(name)
        .ctx(p, || format!("open dataset `{name}`"))?;
    let keep = rows.min(ds.size());
    let strings = if keep == 0 {
        Vec::new()
    } else {
        ds.read_slice_1d::<VarLenUnicode, _>(0..keep)
            .ctx(p, || format!("read dataset `{name}`"))?
            .iter()
            .map(|s| s.as_str().to_string())
            .collect()
    };
    drop(ds);
    file.unlink(name)
        .ctx(p, || format!("unlink the converted dataset `{name}`"))?;
    tracing::info!(
        file = %p.display(),
        dataset = name,
        rows = keep,
        "Converted a variable-length string dataset to UTF-8 bytes and ends \
         (layout version 2)."
    );
    Ok(strings)
}
