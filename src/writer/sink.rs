//! [`Sink`]: where a run's finished files go — the one interface the stage
//! graph's last step sees, implemented by the build writer
//! ([`super::DatasetWriter`], rows in sorted path order, files renamed into
//! place at the end) and by serve's SWMR appenders ([`super::append::AppendSink`], rows
//! in arrival order, durable at each flush). Each real sink implements it
//! once: what stands behind a sink (the split table on serve's append
//! thread) is not a sink of its own.
//!
//! A sink is driven from one thread (the build's writer thread, serve's loop)
//! through `pipeline::deliver`, which also does the accounting every command
//! shares; it is the only code that calls HDF5.

use super::{DatasetWriter, Error};
use crate::model::Refusal;
use crate::plan::Job;

/// A row too long to hold whole (a recording streamed from disk, computed
/// in pieces by the long-recording stage, which implements this trait):
/// the sink pulls its frames piece by piece when the row's turn comes, and
/// appends each as it arrives. Only variable-length rows (`crate::frames`'
/// row protocol) come in pieces.
pub trait RowPieces: Send {
    /// Replaces `out` with the row's next frames (`frames × bins` values);
    /// `Ok(false)` once every frame was given. `Err`: the row cannot be
    /// finished, and the sink drops what it appended of it.
    fn next(&mut self, out: &mut Vec<f32>) -> Result<bool, Refusal>;

    /// The row's trailer values (the row protocol's per-row scalars), asked
    /// for after its last piece.
    fn trailer(&self) -> &[f32] {
        &[]
    }
}

/// What became of a row handed over in pieces.
#[derive(Debug, PartialEq, Eq)]
pub enum Streamed {
    /// Written, as [`Sink::write`]'s row.
    Written(Placed),
    /// Held for ordering; the sink reports it later (the build writer's
    /// [`DatasetWriter::take_streamed`]).
    Held,
    /// Refused half-way; nothing of it stays.
    Refused(Refusal),
}

/// Where a written row landed, when the sink knows at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placed {
    /// Held for ordering (build): its row index is fixed at `finish`.
    Pending,
    /// Row `index` of its split's file.
    At { index: usize },
}

/// A destination for computed rows.
pub trait Sink {
    /// How the sink addresses one file (split, order, label).
    type File;

    /// Writes `row` for `file`. Row buffers the sink no longer needs are
    /// pushed onto `recycle` for the compute stage to reuse.
    fn write(
        &mut self,
        file: &Self::File,
        row: Vec<f32>,
        recycle: &mut Vec<Vec<f32>>,
    ) -> Result<Placed, Error>;

    /// [`Sink::write`] of a row whose CMVN statistics its worker summed
    /// (`crate::cmvn`); a sink that keeps statistics adds them instead of
    /// summing the row again. By default they are dropped.
    fn write_with_stats(
        &mut self,
        file: &Self::File,
        row: Vec<f32>,
        stats: Option<crate::cmvn::RowStats>,
        recycle: &mut Vec<Vec<f32>>,
    ) -> Result<Placed, Error> {
        let _ = stats;
        self.write(file, row, recycle)
    }

    /// Writes the row of `file` that `row` gives in pieces.
    fn write_pieces(
        &mut self,
        file: &Self::File,
        row: Box<dyn RowPieces>,
        recycle: &mut Vec<Vec<f32>>,
    ) -> Result<Streamed, Error>;

    /// Records that `file` has no row (it was rejected); rows that this
    /// releases (a reorder gap closing) are recycled like `write`'s.
    fn skip(&mut self, file: &Self::File, recycle: &mut Vec<Vec<f32>>) -> Result<(), Error>;
}

impl Sink for DatasetWriter {
    type File = Job;

    fn write(
        &mut self,
        file: &Job,
        row: Vec<f32>,
        recycle: &mut Vec<Vec<f32>>,
    ) -> Result<Placed, Error> {
        recycle.extend(self.submit(file.split as usize, file.seq as usize, Some(row))?);
        Ok(Placed::Pending)
    }

    fn write_with_stats(
        &mut self,
        file: &Job,
        row: Vec<f32>,
        stats: Option<crate::cmvn::RowStats>,
        recycle: &mut Vec<Vec<f32>>,
    ) -> Result<Placed, Error> {
        let (split, seq) = (file.split as usize, file.seq as usize);
        recycle.extend(self.submit_with_stats(split, seq, row, stats)?);
        Ok(Placed::Pending)
    }

    fn write_pieces(
        &mut self,
        file: &Job,
        row: Box<dyn RowPieces>,
        recycle: &mut Vec<Vec<f32>>,
    ) -> Result<Streamed, Error> {
        let arrived = super::Arrived::Pieces(row);
        recycle.extend(self.submit_arrived(file.split as usize, file.seq as usize, arrived)?);
        Ok(Streamed::Held)
    }

    fn skip(&mut self, file: &Job, recycle: &mut Vec<Vec<f32>>) -> Result<(), Error> {
        recycle.extend(self.submit(file.split as usize, file.seq as usize, None)?);
        Ok(())
    }
}
