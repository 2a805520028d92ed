//! A row appended in pieces ([`RowPieces`]: a recording too long to hold
//! whole): its frames go to the split file a chunk at a time while the row
//! is under way, and the row exists (its offset, length, label, path and
//! metadata) only once its last piece is in. Frames written for a row that
//! is then refused, or that a crash interrupts, lie past the last row:
//! the next row's frames overwrite them, and recovery cuts `features` to the
//! confirmed rows' frames as it does for any unconfirmed row.

use super::meta::MetaColumn;
use super::{Appender, Error};
use crate::model::Refusal;
use crate::writer::RowPieces;

impl Appender {
    /// [`Appender::append_with_meta`] of a row that `row` gives in pieces;
    /// `piece` is the caller's buffer for them. `Ok(Err(refusal))`: the row
    /// was given up half-way, and the split is as before it.
    pub fn append_pieces(
        &mut self,
        (rel_path, label, meta): (&str, i32, Option<&str>),
        row: &mut dyn RowPieces,
        piece: &mut Vec<f32>,
    ) -> Result<Result<usize, Refusal>, Error> {
        self.check_target(rel_path, label)?;
        let entry = MetaColumn::entry(meta)?;
        if self.store.is_full(self.chunk_files, self.rows_written) {
            self.reserve(self.store.rows(), rel_path.len() + entry.as_str().len())?;
            self.guard(|a| a.write_pending())?;
        }
        let start = self.store.frames_end()?;
        let mut acc = self.cmvn.acc();
        loop {
            match row.next(piece) {
                Ok(true) => {
                    self.store.extend_frames(&self.path, piece)?;
                    acc.add_frames(piece);
                    if self.store.is_full(self.chunk_files, self.rows_written) {
                        self.reserve(self.store.rows(), 0)?;
                        self.guard(|a| {
                            a.write_pending()?;
                            // Frames of the row under way when no whole row
                            // was buffered with them.
                            a.write_store()
                        })?;
                    }
                }
                Ok(false) => break,
                Err(refusal) => {
                    self.store.give_up_row(&self.path, start)?;
                    return Ok(Err(refusal));
                }
            }
        }
        let index = self.rows();
        self.store.end_row(start, row.trailer(), label, rel_path)?;
        self.cmvn.add_stats(&acc.take());
        self.paths.push(rel_path);
        self.meta.push(&entry);
        Ok(Ok(index))
    }
}
