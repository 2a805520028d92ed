//! The merged split's CMVN statistics (`crate::cmvn`): the shards' own,
//! added in shard order (frames exactly; each sum with one f64 rounding per
//! shard), stored in the merged file and written beside it as a build
//! writes them. Shards of an older melforge, without statistics, give a
//! merged file without them, as a build of that version would.

use std::path::Path;

use super::open::Part;
use super::{Ctx, Error};
use crate::cmvn::Stats;

/// The statistics of the split whose shards are `parts`, or None when a
/// shard has none.
pub(super) fn combine(dir: &Path, parts: &[Part]) -> Result<Option<Stats>, Error> {
    let mut total: Option<Stats> = None;
    for p in parts {
        let file = dir.join(&p.name);
        let Some(s) =
            crate::writer::stats::read(&p.file).ctx(&file, || "read the CMVN statistics".into())?
        else {
            return Ok(None);
        };
        match &mut total {
            None => total = Some(s),
            Some(t) => t.add(&s).ok_or_else(|| Error::BadShard {
                file: p.name.clone(),
                reason: format!(
                    "its CMVN statistics have {} bins, the shards before it {}",
                    s.bins(),
                    t.bins()
                ),
            })?,
        }
    }
    Ok(total)
}

/// Stores `s` in the merged file at `out` (closed: it is reopened).
pub(super) fn store(out: &Path, s: &Stats) -> Result<(), Error> {
    let file = hdf5::File::open_rw(out).ctx(out, || "reopen the merged file".into())?;
    crate::writer::stats::store(&file, s).ctx(out, || "write the CMVN statistics".into())?;
    file.close().ctx(out, || "close the merged file".into())
}
