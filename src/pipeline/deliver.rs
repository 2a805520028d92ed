//! [`deliver`]: one outcome into a sink, with the accounting every command
//! shares (build's writer thread and serve's loop call it), and the hand-over
//! of a file too large to read whole to the run's [`Streamer`] (`crate::long`).

use crossbeam_queue::ArrayQueue;

use crate::compute::{Reject, Rejection};
use crate::long::{Opened, Streamer};
use crate::model::Segment;
use crate::reader;
use crate::runtime::telemetry::{Local, Stage, Telemetry};
use crate::writer::{self, RowPieces, Sink, Streamed};

/// Hands one outcome to `sink` and does the accounting every command shares:
/// write time and file counts (rejections by kind) in `local`, row buffers back
/// to the compute stage. Returns the rejection (for `rejected.jsonl`), if any.
pub fn deliver<S: Sink>(
    sink: &mut S,
    file: &S::File,
    rel_path: &str,
    (row, stats, long): Delivery<'_>,
    free_rows: &ArrayQueue<Vec<f32>>,
    local: &mut Local,
    telemetry: &Telemetry,
) -> Result<Delivered, writer::Error> {
    // Precondition: a worker sums statistics only for a row it computed.
    debug_assert!(
        row.is_ok() || stats.is_none(),
        "statistics of a rejected file"
    );
    let mut recycled = Vec::new();
    let row = match (row, long) {
        (Err(Reject::Read(why @ reader::Error::TooLarge { .. })), Some(l)) => {
            match local.time(Stage::Decode, || {
                l.streamer.open(l.path, &why, l.segment.as_ref(), l.seed)
            }) {
                Ok(Opened::Pieces(pieces)) => {
                    tracing::info!(
                        path = rel_path,
                        "A recording too large to read whole will be computed in pieces."
                    );
                    let d = stream(
                        sink,
                        file,
                        rel_path,
                        pieces,
                        &mut recycled,
                        local,
                        telemetry,
                    );
                    for r in recycled {
                        let _full = free_rows.push(r);
                    }
                    return d;
                }
                Ok(Opened::Row(row)) => Ok(row),
                Err(reject) => Err(reject),
            }
        }
        (row, _) => row,
    };
    let delivered = match row {
        Ok(row) => {
            let placed = local.time(Stage::Write, || {
                sink.write_with_stats(file, row, stats, &mut recycled)
            })?;
            local.file_done(Ok(()), telemetry);
            Delivered::Row(placed)
        }
        Err(why) => {
            local.time(Stage::Write, || sink.skip(file, &mut recycled))?;
            local.file_done(Err(why.kind()), telemetry);
            tracing::debug!(
                path = rel_path,
                kind = %why.kind(),
                reason = %why,
                "Rejected a file."
            );
            Delivered::Rejected(Rejection::new(rel_path.to_string(), &why))
        }
    };
    for r in recycled {
        let _full = free_rows.push(r);
    }
    Ok(delivered)
}

/// What [`deliver`] hands on: the row (or why none), its CMVN statistics
/// when its worker summed them, and the file when it may be long.
pub type Delivery<'a> = (
    Result<Vec<f32>, Reject>,
    Option<crate::cmvn::RowStats>,
    Option<LongFile<'a>>,
);

/// A file whose outcome [`deliver`] may compute in pieces when the reader
/// refused it as too large (`crate::long`): the run's streamer, where the
/// file is, its manifest segment and its dither seed (the job id the
/// workers seed it with).
pub struct LongFile<'a> {
    pub streamer: &'a Streamer,
    pub path: &'a std::path::Path,
    pub segment: Option<Segment>,
    pub seed: u64,
}

/// Whether `row` is a reader's refusal of a whole file as too large, which
/// [`deliver`] may compute in pieces ([`LongFile`]).
pub fn too_large(row: &Result<Vec<f32>, Reject>) -> bool {
    matches!(row, Err(Reject::Read(reader::Error::TooLarge { .. })))
}

/// [`deliver`] of a row in pieces.
fn stream<S: Sink>(
    sink: &mut S,
    file: &S::File,
    rel_path: &str,
    pieces: Box<dyn RowPieces>,
    recycled: &mut Vec<Vec<f32>>,
    local: &mut Local,
    telemetry: &Telemetry,
) -> Result<Delivered, writer::Error> {
    let streamed = local.time(Stage::Write, || sink.write_pieces(file, pieces, recycled))?;
    Ok(match streamed {
        Streamed::Written(placed) => {
            local.file_done(Ok(()), telemetry);
            Delivered::Row(placed)
        }
        Streamed::Held => Delivered::Held,
        Streamed::Refused(why) => {
            local.file_done(Err(why.kind), telemetry);
            tracing::debug!(path = rel_path, kind = %why.kind, reason = %why.reason, "Rejected a file.");
            Delivered::Rejected(Rejection::refused(rel_path.to_string(), why))
        }
    })
}

/// What [`deliver`] did with one outcome.
#[derive(Debug)]
pub enum Delivered {
    /// Written; where, if the sink knows yet.
    Row(writer::Placed),
    /// A row in pieces the sink holds for ordering, reported by the sink
    /// when it is written (the build writer's `take_streamed`).
    Held,
    Rejected(Rejection),
}
