//! The virtual layout of a merged split (`merge` without `--copy`): every
//! dataset of the shards an HDF5 virtual dataset over their files (`vds`),
//! shard K's entries after shard K-1's, except what a mapping cannot
//! express, written standalone (`copy::standalone`): `offsets`, whose
//! values move by the frames of the shards before, and a dataset with no
//! entries at all (nothing to map, e.g. `features` when every row is
//! empty).

use std::path::Path;

use super::attrs::Value;
use super::open::{Axis, Part};
use super::{Ctx, Error, copy, create_split};
use crate::writer::vds;

/// Writes the virtual merged file of one split at `out` (its shards named
/// relative to it, so they must stay in `dir`).
pub(super) fn write(
    dir: &Path,
    parts: &[Part],
    split_attrs: &[(String, Value)],
    out: &Path,
) -> Result<(), Error> {
    let file = create_split(out, split_attrs)?;
    for &(name, axis) in &parts[0].datasets {
        let total: usize = parts.iter().map(|p| p.len(axis)).sum();
        if axis == Axis::Offsets || total == 0 {
            copy::standalone(dir, parts, (&file, out), (name, axis))?;
            continue;
        }
        let mut offset = 0;
        let sources: Vec<vds::Source<'_>> = parts
            .iter()
            .map(|p| {
                let s = vds::Source {
                    file: &p.name,
                    rows: p.len(axis),
                    offset,
                    from: 0,
                    extent: p.len(axis),
                };
                offset += s.rows;
                s
            })
            .collect();
        let like = parts[0].dataset(dir, name)?;
        let shape = like.shape();
        vds::create(file.id(), name, like.id(), &shape[1..], total, &sources).map_err(|cause| {
            Error::Virtual {
                file: out.to_path_buf(),
                dataset: name,
                cause,
            }
        })?;
    }
    file.close().ctx(out, || "close the file".into())
}
