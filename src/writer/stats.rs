//! Each split's CMVN statistics ([`crate::cmvn`]) as the writers keep them:
//! summed row by row in row order, stored in the split file and written
//! beside it ([`crate::cmvn::files`]) when it is finished.
//!
//! In the file they are three small datasets, `cmvn_frames` (int64
//! scalar), `cmvn_sum` and `cmvn_sum_square` (float64, (bins,)), not
//! attributes: a dataset's values can be rewritten in a file open for SWMR
//! writing, an attribute cannot (docs/FORMAT.md, "Files written by
//! `serve`"). They cost a few hundred bytes, and a file keeps its own
//! statistics when it is copied without its neighbours.

use std::path::Path;

use hdf5::File;

use super::h5::Context;
use super::{Error, RowPieces};
use crate::cmvn::{Bins, RowAcc, RowStats, Stats};
use crate::model::Refusal;

/// The dataset names.
pub const FRAMES: &str = "cmvn_frames";
pub const SUM: &str = "cmvn_sum";
pub const SUM_SQUARE: &str = "cmvn_sum_square";

/// The build writer's summing state: the layout and a scratch row.
pub(super) struct Summer {
    pub(super) bins: Bins,
    scratch: RowAcc,
}

impl Summer {
    pub(super) fn new(bins: Bins) -> Summer {
        let scratch = bins.acc();
        Summer { bins, scratch }
    }

    /// `given`, or the statistics of `row` summed here (a row that came
    /// without them).
    pub(super) fn row(&mut self, row: &[f32], given: Option<RowStats>) -> RowStats {
        given.unwrap_or_else(|| self.bins.row(row, &mut self.scratch))
    }
}

/// A row in pieces whose frames are summed as they pass.
pub(super) struct Tally<'a> {
    pub(super) inner: &'a mut dyn RowPieces,
    pub(super) acc: RowAcc,
}

impl RowPieces for Tally<'_> {
    fn next(&mut self, out: &mut Vec<f32>) -> Result<bool, Refusal> {
        let more = self.inner.next(out)?;
        if more {
            self.acc.add_frames(out);
        }
        Ok(more)
    }

    fn trailer(&self) -> &[f32] {
        self.inner.trailer()
    }
}

/// Stores `s` in the open split file `file` (at `p`).
pub(super) fn write(file: &File, p: &Path, s: &Stats) -> Result<(), Error> {
    store(file, s).ctx(p, || "write the statistics datasets".into())
}

/// Creates the three datasets of `s` in `file` (a build's or a merge's).
pub fn store(file: &File, s: &Stats) -> hdf5::Result<()> {
    let frames = i64::try_from(s.frames).unwrap_or(i64::MAX);
    file.new_dataset::<i64>()
        .shape(())
        .obj_track_times(false)
        .create(FRAMES)?
        .write_scalar(&frames)?;
    for (name, v) in [(SUM, &s.sum), (SUM_SQUARE, &s.sum_square)] {
        file.new_dataset::<f64>()
            .shape(v.len())
            .obj_track_times(false)
            .create(name)?
            .write(v.as_slice())?;
    }
    Ok(())
}

/// The statistics stored in `file`, or None when it has none (a file of
/// an older melforge).
pub fn read(file: &File) -> hdf5::Result<Option<Stats>> {
    if !file.link_exists(FRAMES) {
        return Ok(None);
    }
    let frames: i64 = file.dataset(FRAMES)?.read_scalar()?;
    Ok(Some(Stats {
        frames: u64::try_from(frames).unwrap_or(0),
        sum: file.dataset(SUM)?.read_raw()?,
        sum_square: file.dataset(SUM_SQUARE)?.read_raw()?,
    }))
}
