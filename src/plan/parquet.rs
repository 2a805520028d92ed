//! Hugging Face parquet datasets (Common Voice, People's Speech, GigaSpeech,
//! …) read in place: each row's audio bytes are copied into a spill file and
//! its scalar columns become its metadata, so the rest of the plan sees a
//! list of recordings at known byte ranges of one file.
//!
//! The shape read is the one `datasets` writes for an `Audio` feature: an
//! `audio` column that is a struct `{bytes: binary, path: string}` beside
//! scalar columns (text, speaker, ids). [`Options::audio_column`] names
//! another column; only a named column may be plain binary (an unnamed
//! `audio` that is plain binary is an error that says so). Arrow's own
//! reader (the `parquet` crate) decodes the file; nothing here parses
//! parquet.
//!
//! Invariants:
//!
//! * **Whole-file failures are [`Error`]s, row failures are data.** A file
//!   that cannot be opened, is not parquet, has no usable audio column, or
//!   whose spill cannot be written (or would pass `max_spill_bytes`) is an
//!   error; a row without audio bytes, and the rows of a row group whose
//!   pages cannot be decoded, are [`Rejection`]s, and the file goes on.
//! * **Every row is accounted for once**: rows `0..n` of the file are each
//!   either one [`Row`] or inside exactly one [`Rejection`], in file order.
//! * **A damaged row group costs only itself.** Each row group has its own
//!   reader; when a batch fails to decode, the rows of that group not yet
//!   returned are one [`Rejection`] (naming the group, its rows and the
//!   parquet error) and the next group starts afresh. Rows of the group that
//!   decoded before the failure are kept. A read error of the file itself
//!   (the disk, not the data) is [`Error::Read`], not a rejection. A panic
//!   of the parquet crate on damaged bytes is caught and rejects the group
//!   likewise (the panic hook still prints it).
//! * **Damage is seen where the file can show it**: a page that fails to
//!   decompress or decode, or whose CRC-32 (when the writer stored one) does
//!   not match. A damaged byte inside a recording's bytes in a page without a
//!   CRC decodes to wrong audio unseen: snappy has no checksum, and
//!   `datasets` writes no page CRCs.
//! * **The spill is written sequentially** from its stream position at the
//!   call; [`Row::start`] is an absolute offset in it. On `Err` the spill is
//!   cut back to that position (best effort: the original error is the one
//!   returned).
//!
//! Memory: one record batch of [`BATCH_ROWS`] rows of the projected columns
//! (audio and scalar metadata; nested columns are never read), plus each
//! column's current page and, for a dictionary-encoded column, its row
//! group's dictionary (writers cap it, pyarrow and arrow-rs at 1 MiB, then
//! fall back to plain pages). Pages are read one at a time, never a whole
//! column chunk.
//!
//! Owns nothing past the call: the parquet file is opened and closed here;
//! the spill is the caller's, written only forward (and cut back on `Err`).
//! No threads.
//!
//! [`Spilled::bytes_read`] counts the file's bytes the decode took (magic,
//! footer, the projected columns' page headers and payloads; `counted` says
//! exactly what): columns left out of the projection are never read, so it
//! is usually less than the file's size.
//!
//! Metadata ([`Row::meta`]): strings, booleans, integers, floats (NaN and
//! infinities as `null`), `null`, dictionary-encoded scalars as their value,
//! dates, times and timestamps as ISO 8601 strings (`values` says how).
//! Binary, decimal, duration, interval, list, struct and map columns are left
//! out.
//!
//! Files: this one (the interface, the walk over row groups, the spill),
//! `values` (Arrow values → bytes, text, JSON), `counted` (the file behind a
//! counting `ChunkReader`), `tests`.

mod counted;
mod values;

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};

use arrow_array::{Array, RecordBatch, StructArray};
use arrow_schema::{ArrowError, DataType, Fields};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::errors::ParquetError;
use parquet::file::metadata::RowGroupMetaData;
use parquet::file::reader::Length;
use serde_json::{Map, Value};

use counted::Counted;
use values::{binary_at, is_binary, is_scalar, is_string, scalar_at, string_at};

/// Rows per record batch: small, so that a damaged page costs few rows and at
/// most this many recordings' bytes are held at once (64 × a few hundred KiB
/// for speech clips).
pub const BATCH_ROWS: usize = 64;

/// The audio column `datasets` writes for an `Audio` feature.
pub const DEFAULT_AUDIO_COLUMN: &str = "audio";

/// How to read one parquet file.
#[derive(Clone, Debug)]
pub struct Options<'a> {
    /// The column holding the recordings; `None`: `"audio"`.
    pub audio_column: Option<&'a str>,
    /// The most audio bytes one call may append to the spill.
    pub max_spill_bytes: u64,
}

/// One usable row: its audio bytes were appended to the spill file at
/// `[start, start + len)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// 0-based row index in the file.
    pub row: u64,
    /// Absolute offset of the row's audio bytes in the spill file.
    pub start: u64,
    /// Length of the row's audio bytes (never 0).
    pub len: u64,
    /// The audio struct's `path` field (`None` when absent or null, and for
    /// a plain binary column).
    pub audio_path: Option<String>,
    /// Every other scalar column by name (module doc: which, and how).
    pub meta: Map<String, Value>,
}

/// Rows left out, with a specific reason (naming the column, what was wrong,
/// what was expected).
#[derive(Clone, Debug, PartialEq)]
pub struct Rejection {
    /// 0-based: one row, or the rows of a row group that cannot be decoded.
    pub rows: Range<u64>,
    pub reason: String,
}

/// What one file gave.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Spilled {
    /// Usable rows in file order.
    pub rows: Vec<Row>,
    /// Rows left out, in file order.
    pub rejected: Vec<Rejection>,
    /// Bytes of the parquet file read (module doc: what is counted).
    pub bytes_read: u64,
    /// Bytes appended to the spill.
    pub bytes_written: u64,
}

/// Why a whole file could not be spilled.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot open {}: {source}", path.display())]
    Open { path: PathBuf, source: io::Error },
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error(
        "{} is not a parquet file ({len} bytes, starts with \"{}\" and ends with \"{}\"; \
         expected \"PAR1\" at both ends)",
        path.display(), head.escape_ascii(), tail.escape_ascii()
    )]
    NotParquet {
        path: PathBuf,
        len: u64,
        head: Vec<u8>,
        tail: Vec<u8>,
    },
    #[error("{} has a damaged parquet footer: {source}", path.display())]
    Footer { path: PathBuf, source: ParquetError },
    #[error(
        "{}: row group {group} declares {rows} rows in the footer, expected a count ≥ 0 \
         (and a file total under 2^64)",
        path.display()
    )]
    RowCount {
        path: PathBuf,
        group: usize,
        rows: i64,
    },
    #[error(
        "{} has no column `{wanted}` (its columns: {}); expected the recordings there \
         (Options::audio_column names another)",
        path.display(), columns.join(", ")
    )]
    NoAudioColumn {
        path: PathBuf,
        wanted: String,
        columns: Vec<String>,
    },
    #[error(
        "{}: the audio column `{column}` is {found}; expected a struct with a binary `bytes` \
         field and an optional string `path` field (Hugging Face's Audio feature){}",
        path.display(),
        if *.plain_binary { ", or a plain binary column named by Options::audio_column" } else { "" }
    )]
    AudioType {
        path: PathBuf,
        column: String,
        found: DataType,
        /// The column is plain binary but was not named (only a named
        /// column may be).
        plain_binary: bool,
    },
    #[error("cannot write the spill file: {source}")]
    Spill { source: io::Error },
    #[error(
        "{}: row {row} would bring the spill to {needed} bytes, over max_spill_bytes = {limit}",
        path.display()
    )]
    SpillFull {
        path: PathBuf,
        row: u64,
        needed: u64,
        limit: u64,
    },
}

/// Decodes `file` row group by row group and appends each row's audio bytes
/// to `spill` (a file created by the caller, opened for writing), sequentially
/// from its current position, holding at most one record batch of audio.
pub fn spill(file: &Path, spill: &mut File, o: &Options) -> Result<Spilled, Error> {
    let base = spill
        .stream_position()
        .map_err(|source| Error::Spill { source })?;
    let result = spill_from(file, spill, base, o);
    if result.is_err() {
        // Best effort: the spill is the caller's scratch file, and the error
        // that stopped the file is the one worth returning.
        let _ = spill.set_len(base);
        let _ = spill.seek(SeekFrom::Start(base));
    }
    result
}

fn spill_from(path: &Path, spill: &mut File, base: u64, o: &Options) -> Result<Spilled, Error> {
    let file = File::open(path).map_err(|source| Error::Open {
        path: path.to_owned(),
        source,
    })?;
    let reader = Counted::new(file);
    check_magic(path, &reader)?;
    let loaded = unpanicked(|| ArrowReaderMetadata::load(&reader, ArrowReaderOptions::new()));
    let meta = loaded
        .unwrap_or_else(|panic| Err(ParquetError::General(panic)))
        .map_err(|source| {
            reader.io_error(path).unwrap_or(Error::Footer {
                path: path.to_owned(),
                source,
            })
        })?;
    let plan = Columns::of(path, meta.schema().fields(), o.audio_column)?;
    let mask = ProjectionMask::roots(meta.parquet_schema(), plan.roots.iter().copied());
    let mut out = Sink {
        path,
        spill,
        base,
        limit: o.max_spill_bytes,
        got: Spilled::default(),
    };
    let mut first_row = 0u64;
    for (group, rg) in meta.metadata().row_groups().iter().enumerate() {
        let end = u64::try_from(rg.num_rows())
            .ok()
            .and_then(|rows| first_row.checked_add(rows))
            .ok_or_else(|| Error::RowCount {
                path: path.to_owned(),
                group,
                rows: rg.num_rows(),
            })?;
        let group_rows = first_row..end;
        let failed = match chunk_problem(rg, &mask, reader.len()) {
            Some(why) => Some((group_rows.start, why)),
            None => {
                let builder = ParquetRecordBatchReaderBuilder::new_with_metadata(
                    reader.clone(),
                    meta.clone(),
                )
                .with_row_groups(vec![group])
                .with_projection(mask.clone())
                .with_batch_size(BATCH_ROWS);
                read_group(&mut out, &plan, group_rows.clone(), builder)?
            }
        };
        if let Some((from, why)) = failed {
            if let Some(e) = reader.io_error(path) {
                return Err(e);
            }
            out.got.rejected.push(Rejection {
                rows: from..group_rows.end,
                reason: group_reason(group, &group_rows, from, &why),
            });
        }
        first_row = group_rows.end;
    }
    let accounted = out.got.rows.len() as u64
        + out
            .got
            .rejected
            .iter()
            .map(|r| r.rows.end - r.rows.start)
            .sum::<u64>();
    assert_eq!(
        accounted, first_row,
        "every row of the file is one Row or in one Rejection"
    );
    out.got.bytes_read = reader.bytes_read();
    Ok(out.got)
}

/// The sentence for rows `from..` of a row group that cannot be decoded.
fn group_reason(group: usize, rows: &Range<u64>, from: u64, why: &str) -> String {
    let whole = format!("row group {group} (rows {}..{})", rows.start, rows.end);
    if from == rows.start {
        format!("{whole} cannot be decoded: {why}; expected readable pages")
    } else {
        format!(
            "rows {from}..{} of {whole} cannot be decoded after its first {} rows: {why}; \
             expected readable pages",
            rows.end,
            from - rows.start
        )
    }
}

/// Reads one row group's batches into `out`; `Ok(Some((row, error)))` when
/// the batch starting at `row` failed, so rows `row..rows.end` are left out.
fn read_group(
    out: &mut Sink,
    plan: &Columns,
    rows: Range<u64>,
    builder: ParquetRecordBatchReaderBuilder<Counted>,
) -> Result<Option<(u64, String)>, Error> {
    let mut batches = match unpanicked(|| builder.build()) {
        Ok(Ok(batches)) => batches,
        Ok(Err(e)) => return Ok(Some((rows.start, e.to_string()))),
        Err(panic) => return Ok(Some((rows.start, panic))),
    };
    let mut next = rows.start;
    loop {
        let batch = match unpanicked(|| batches.next()) {
            Ok(None) => break,
            Ok(Some(Ok(batch))) => batch,
            Ok(Some(Err(e))) => return Ok(Some((next, arrow_reason(e)))),
            Err(panic) => return Ok(Some((next, panic))),
        };
        let n = batch.num_rows() as u64;
        if batch.num_columns() != plan.roots.len() {
            let why = format!(
                "a batch has {} columns where {} were projected",
                batch.num_columns(),
                plan.roots.len()
            );
            return Ok(Some((next, why)));
        }
        if next + n > rows.end {
            let why = format!(
                "it decodes to more rows than the footer's {}",
                rows.end - rows.start
            );
            return Ok(Some((next, why)));
        }
        out.batch(plan, &batch, next)?;
        next += n;
    }
    if next < rows.end {
        let why = format!("its pages end after {} rows", next - rows.start);
        return Ok(Some((next, why)));
    }
    Ok(None)
}

/// The parquet error inside an Arrow error: the reader wraps every parquet
/// error as `ArrowError::ParquetError`, whose `Display` would prefix it with
/// "Parquet argument error".
fn arrow_reason(e: ArrowError) -> String {
    match e {
        ArrowError::ParquetError(why) => why,
        e => e.to_string(),
    }
}

/// Runs one call into the parquet crate with its panics caught, so that a
/// damaged file costs its rows and not the process: the crate asserts on
/// some malformed input (damaging test files at random hit
/// `ColumnChunkMetaData::byte_range`'s assertion, which [`chunk_problem`]
/// now checks first). What panicked is dropped unused; `Err` is the panic's
/// message. (A build with `panic = "abort"` would abort instead.)
fn unpanicked<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).map_err(|panic| {
        let message = match panic.downcast::<String>() {
            Ok(text) => *text,
            Err(panic) => panic.downcast_ref::<&str>().map_or("", |s| s).to_owned(),
        };
        format!("the parquet decoder panicked ({message})")
    })
}

/// Why row group `rg`'s projected column chunks cannot be read: the footer
/// places one outside the file (a negative offset or length makes the
/// parquet crate panic, a range past the end fails every read).
fn chunk_problem(rg: &RowGroupMetaData, mask: &ProjectionMask, file_len: u64) -> Option<String> {
    for (leaf, chunk) in rg.columns().iter().enumerate() {
        if !mask.leaf_included(leaf) {
            continue;
        }
        let start = chunk
            .dictionary_page_offset()
            .unwrap_or(chunk.data_page_offset());
        let len = chunk.compressed_size();
        let end = u64::try_from(start)
            .ok()
            .zip(u64::try_from(len).ok())
            .and_then(|(start, len)| start.checked_add(len));
        if end.is_none_or(|end| end > file_len) {
            return Some(format!(
                "the footer places column `{}` at {len} bytes from offset {start}, outside the \
                 {file_len}-byte file",
                chunk.column_path().string()
            ));
        }
    }
    None
}

/// Checks `PAR1` at both ends, so that a file of another kind gets a sentence
/// saying so rather than a footer error.
fn check_magic(path: &Path, reader: &Counted) -> Result<(), Error> {
    let len = reader.len();
    let mut head = vec![0u8; len.min(4) as usize];
    let mut tail = vec![0u8; len.min(4) as usize];
    let read = |buf: &mut [u8], at| {
        reader.read_exact_at(buf, at).map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })
    };
    read(&mut head, 0)?;
    read(&mut tail, len.saturating_sub(4))?;
    if len < 12 || head != b"PAR1" || tail != b"PAR1" {
        return Err(Error::NotParquet {
            path: path.to_owned(),
            len,
            head,
            tail,
        });
    }
    Ok(())
}

/// How the audio column is laid out.
#[derive(Debug)]
enum Audio {
    /// `{bytes, path?}` (field indices in the struct).
    Struct { bytes: usize, path: Option<usize> },
    /// A plain binary column named by the user.
    Plain,
}

/// The projection: the audio column and the scalar metadata columns. A
/// batch's columns are the projected ones in file order, so each is found by
/// its position there (names may repeat in a parquet file).
#[derive(Debug)]
struct Columns {
    audio_name: String,
    audio: Audio,
    /// The audio column's position in a batch.
    audio_at: usize,
    /// Name and position in a batch of each metadata column, in file order.
    meta: Vec<(String, usize)>,
    /// Root indices of every projected column (audio included), ascending.
    roots: Vec<usize>,
}

impl Columns {
    fn of(path: &Path, fields: &Fields, named: Option<&str>) -> Result<Columns, Error> {
        let wanted = named.unwrap_or(DEFAULT_AUDIO_COLUMN);
        let Some((at, field)) = fields.find(wanted) else {
            return Err(Error::NoAudioColumn {
                path: path.to_owned(),
                wanted: wanted.to_owned(),
                columns: fields.iter().map(|f| f.name().clone()).collect(),
            });
        };
        let wrong = |plain_binary| Error::AudioType {
            path: path.to_owned(),
            column: wanted.to_owned(),
            found: field.data_type().clone(),
            plain_binary,
        };
        let audio = match field.data_type() {
            DataType::Struct(children) => {
                let bytes = children
                    .find("bytes")
                    .filter(|(_, f)| is_binary(f.data_type()));
                let path_field = children.find("path");
                match (bytes, path_field) {
                    (Some((b, _)), None) => Audio::Struct {
                        bytes: b,
                        path: None,
                    },
                    (Some((b, _)), Some((p, f))) if is_string(f.data_type()) => Audio::Struct {
                        bytes: b,
                        path: Some(p),
                    },
                    _ => return Err(wrong(false)),
                }
            }
            t if is_binary(t) && named.is_some() => Audio::Plain,
            t => return Err(wrong(is_binary(t))),
        };
        let (mut meta, mut roots, mut audio_at) = (Vec::new(), Vec::new(), 0);
        for (i, f) in fields.iter().enumerate() {
            if i == at {
                audio_at = roots.len();
            } else if is_scalar(f.data_type()) {
                meta.push((f.name().clone(), roots.len()));
            } else {
                continue;
            }
            roots.push(i);
        }
        Ok(Columns {
            audio_name: wanted.to_owned(),
            audio,
            audio_at,
            meta,
            roots,
        })
    }
}

/// Where the rows go: the spill, and what the file gave so far.
struct Sink<'a> {
    path: &'a Path,
    spill: &'a mut File,
    base: u64,
    limit: u64,
    got: Spilled,
}

impl Sink<'_> {
    /// Spills the rows of one decoded batch, whose first row is file row
    /// `first`.
    fn batch(&mut self, plan: &Columns, batch: &RecordBatch, first: u64) -> Result<(), Error> {
        // `read_group` checked the batch has every projected column.
        let audio = batch.column(plan.audio_at);
        for i in 0..batch.num_rows() {
            let row = first + i as u64;
            let (bytes, audio_path) = match audio_bytes(&plan.audio, audio.as_ref(), i) {
                Ok(found) => found,
                Err(what) => {
                    self.got.rejected.push(Rejection {
                        rows: row..row + 1,
                        reason: format!(
                            "row {row}: the audio column `{}` {what}; expected the recording's \
                             encoded bytes",
                            plan.audio_name
                        ),
                    });
                    continue;
                }
            };
            let start = self.write(row, bytes)?;
            let meta = plan
                .meta
                .iter()
                .map(|(name, at)| (name.clone(), scalar_at(batch.column(*at).as_ref(), i)))
                .collect();
            self.got.rows.push(Row {
                row,
                start,
                len: bytes.len() as u64,
                audio_path,
                meta,
            });
        }
        Ok(())
    }

    /// Appends one row's bytes; returns their offset in the spill.
    fn write(&mut self, row: u64, bytes: &[u8]) -> Result<u64, Error> {
        let needed = self.got.bytes_written + bytes.len() as u64;
        if needed > self.limit {
            return Err(Error::SpillFull {
                path: self.path.to_owned(),
                row,
                needed,
                limit: self.limit,
            });
        }
        self.spill
            .write_all(bytes)
            .map_err(|source| Error::Spill { source })?;
        let start = self.base + self.got.bytes_written;
        self.got.bytes_written = needed;
        Ok(start)
    }
}

/// Row `i`'s audio bytes and path, or what is wrong with them (the middle of
/// the rejection's sentence).
fn audio_bytes<'b>(
    audio: &Audio,
    column: &'b dyn Array,
    i: usize,
) -> Result<(&'b [u8], Option<String>), &'static str> {
    let (bytes, path) = match audio {
        Audio::Plain => (binary_at(column, i), None),
        Audio::Struct { bytes, path } => {
            let Some(s) = column.as_any().downcast_ref::<StructArray>() else {
                return Err("is not a struct in this batch");
            };
            if s.is_null(i) {
                return Err("is null");
            }
            let p = path.and_then(|p| string_at(s.column(p).as_ref(), i));
            (
                binary_at(s.column(*bytes).as_ref(), i),
                p.map(str::to_owned),
            )
        }
    };
    match bytes {
        None => Err("has no bytes (null)"),
        Some([]) => Err("has an empty byte string"),
        Some(b) => Ok((b, path)),
    }
}

#[cfg(test)]
mod tests;
