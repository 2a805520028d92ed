//! The merged `offsets` of variable-length rows: each shard's values moved
//! by the frames of the shards before it, checked on the way to run on
//! (`offsets[i + 1] = offsets[i] + lengths[i]`, from 0, to the shard's
//! frames), as the writer promises (`writer::frames`). Written in blocks,
//! so memory does not grow with the rows; both merge layouts write it the
//! same way (a virtual mapping cannot add).

use std::path::Path;

use hdf5::Dataset;

use super::open::Part;
use super::{Ctx, Error};

/// Rows read and written per block (12 bytes a row read, 8 written).
const BLOCK_ROWS: usize = 1 << 20;

/// Writes the shards' rebased offsets into `dst` (`offsets` of the merged
/// file at `out`, created at its full length).
pub(super) fn write(dir: &Path, parts: &[Part], dst: &Dataset, out: &Path) -> Result<(), Error> {
    let (mut at, mut base) = (0usize, 0i64);
    for part in parts {
        rebase_part(dir, part, (dst, out), at, base)?;
        at += part.rows;
        base += part.frames as i64;
    }
    Ok(())
}

/// Writes `part`'s offsets plus `base` at row `at` of `dst`, checking that
/// they run on.
fn rebase_part(
    dir: &Path,
    part: &Part,
    (dst, out): (&Dataset, &Path),
    at: usize,
    base: i64,
) -> Result<(), Error> {
    let src = dir.join(&part.name);
    let (offsets, lengths) = (part.dataset(dir, "offsets")?, part.dataset(dir, "lengths")?);
    let mut next = 0i64;
    let mut from = 0;
    while from < part.rows {
        let to = (from + BLOCK_ROWS).min(part.rows);
        let what = || format!("read rows {from}..{to} of `offsets` and `lengths`");
        let mut o = offsets.read_slice_1d::<i64, _>(from..to).ctx(&src, what)?;
        let l = lengths.read_slice_1d::<i32, _>(from..to).ctx(&src, what)?;
        for (i, (o, &l)) in o.iter_mut().zip(&l).enumerate() {
            if *o != next || l < 0 {
                return Err(Error::BadShard {
                    file: part.name.clone(),
                    reason: format!(
                        "row {} has offset {o} and length {l}; the rows before it end at frame \
                         {next}",
                        from + i
                    ),
                });
            }
            next += i64::from(l);
            *o += base;
        }
        let what = || format!("write rows {}..{} of `offsets`", at + from, at + to);
        dst.write_slice(&o, at + from..at + to).ctx(out, what)?;
        from = to;
    }
    if next != part.frames as i64 {
        return Err(Error::BadShard {
            file: part.name.clone(),
            reason: format!(
                "its rows end at frame {next} but `features` has {} frames",
                part.frames
            ),
        });
    }
    Ok(())
}
