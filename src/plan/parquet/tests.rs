//! `plan::parquet` on real parquet files written by the `parquet` crate's
//! `ArrowWriter` in the shape Hugging Face `datasets` writes (a struct
//! `audio` column `{bytes, path}` beside text, integer and float columns,
//! several row groups, snappy): byte-exact spills, metadata values, per-row
//! rejections, whole-file errors, the codecs the Cargo features promise,
//! `bytes_read`, and damage (a page, a footer's column offset) that costs
//! only its row group. Files pyarrow writes were checked by hand once (the
//! tests run without Python); the commit that added this module says how.

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use arrow_array::builder::{BinaryBuilder, StringBuilder, StructBuilder};
use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Date32Array, DictionaryArray, Float32Array, Float64Array,
    Int8Array, Int64Array, ListArray, NullArray, RecordBatch, StringArray,
    TimestampMicrosecondArray, TimestampMillisecondArray, UInt64Array,
};
use arrow_schema::{DataType, Field, Fields};
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::metadata::{ParquetMetaDataReader, ParquetMetaDataWriter};
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{ChunkReader, FileReader, Length, SerializedFileReader};
use serde_json::{Value, json};

use super::{Error, Options, Spilled, spill};

const UNLIMITED: Options<'static> = Options {
    audio_column: None,
    max_spill_bytes: u64::MAX,
};

/// Deterministic incompressible bytes (xorshift64*), as encoded audio is.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

/// Row `row`'s recording: 300 to 2 KiB of noise.
fn clip(row: usize) -> Vec<u8> {
    noise(row as u64 + 1, 300 + (row * 397) % 1800)
}

fn audio_fields() -> Fields {
    Fields::from(vec![
        Field::new("bytes", DataType::Binary, true),
        Field::new("path", DataType::Utf8, true),
    ])
}

/// The `audio` struct column: `Some(bytes)` rows, `None` for a null struct.
/// One row of the audio column: `None` for a null struct, else its `bytes`
/// (null when `None`) and `path`.
type Clip = Option<(Option<Vec<u8>>, String)>;

fn audio_column(clips: &[Clip]) -> ArrayRef {
    let mut b = StructBuilder::from_fields(audio_fields(), clips.len());
    for c in clips {
        let (bytes, path) = match c {
            Some((bytes, path)) => (bytes.as_deref(), Some(path.as_str())),
            None => (None, None),
        };
        let Some(f) = b.field_builder::<BinaryBuilder>(0) else {
            panic!("field 0 is binary");
        };
        f.append_option(bytes);
        let Some(f) = b.field_builder::<StringBuilder>(1) else {
            panic!("field 1 is a string");
        };
        f.append_option(path);
        b.append(c.is_some());
    }
    Arc::new(b.finish())
}

/// One row group of an HF-shaped table: rows `first..first + n`, every 7th
/// sentence null, every 5th score NaN, and a nested `segments` list column
/// that is not metadata.
fn hf_batch(first: usize, n: usize) -> RecordBatch {
    let rows: Vec<usize> = (first..first + n).collect();
    let clips: Vec<_> = rows
        .iter()
        .map(|&r| Some((Some(clip(r)), format!("clip_{r:04}.wav"))))
        .collect();
    hf_batch_of(&rows, &clips)
}

fn hf_batch_of(rows: &[usize], clips: &[Clip]) -> RecordBatch {
    let sentence: StringArray = rows
        .iter()
        .map(|r| (r % 7 != 3).then(|| format!("sentence {r}")))
        .collect();
    let up_votes: Int64Array = rows.iter().map(|&r| Some(r as i64 * 3 - 40)).collect();
    let score: Float64Array = rows
        .iter()
        .map(|&r| {
            Some(if r % 5 == 4 {
                f64::NAN
            } else {
                r as f64 * 0.25 + 0.1
            })
        })
        .collect();
    let segments = ListArray::from_iter_primitive::<Int32Type, _, _>(
        rows.iter()
            .map(|&r| Some((0..64).map(move |k| Some((r * 64 + k) as i32)))),
    );
    RecordBatch::try_from_iter([
        ("audio", audio_column(clips)),
        ("sentence", Arc::new(sentence) as ArrayRef),
        ("up_votes", Arc::new(up_votes)),
        ("score", Arc::new(score)),
        ("segments", Arc::new(segments)),
    ])
    .expect("the columns have one length")
}

/// Writes `batches` as one snappy row group each.
fn write_groups(path: &Path, batches: &[RecordBatch]) {
    write_compressed(path, batches, Compression::SNAPPY);
}

fn write_compressed(path: &Path, batches: &[RecordBatch], codec: Compression) {
    let props = WriterProperties::builder().set_compression(codec).build();
    let file = File::create(path).expect("create the parquet file");
    let mut w = ArrowWriter::try_new(file, batches[0].schema(), Some(props)).expect("writer");
    for b in batches {
        w.write(b).expect("write a batch");
        w.flush().expect("close the row group");
    }
    w.close().expect("close the file");
}

/// Runs `spill` into a fresh spill file that already holds `base` bytes;
/// returns what it gave and the spill's whole contents.
fn run(parquet: &Path, o: &Options, base: usize) -> (Result<Spilled, Error>, Vec<u8>) {
    let path = parquet.with_extension("spill");
    let mut out = File::options()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .expect("create the spill");
    out.write_all(&vec![0xAA; base]).expect("the spill's head");
    let got = spill(parquet, &mut out, o);
    let mut all = Vec::new();
    out.seek(SeekFrom::Start(0)).expect("rewind");
    out.read_to_end(&mut all).expect("read the spill back");
    (got, all)
}

fn slice(spill: &[u8], start: u64, len: u64) -> &[u8] {
    &spill[start as usize..(start + len) as usize]
}

#[test]
fn hf_rows_spill_byte_exact_with_their_metadata() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("train-00000-of-00001.parquet");
    // 150 rows: three batches of one row group.
    let sizes = [10, 150, 7];
    let mut first = 0;
    let batches: Vec<_> = sizes
        .iter()
        .map(|&n| {
            first += n;
            hf_batch(first - n, n)
        })
        .collect();
    write_groups(&path, &batches);
    let reader = SerializedFileReader::new(File::open(&path).expect("open")).expect("parquet");
    assert_eq!(
        reader.metadata().num_row_groups(),
        3,
        "one row group per batch"
    );

    let (got, spilled) = run(&path, &UNLIMITED, 5);
    let got = got.expect("the file spills");
    assert!(got.rejected.is_empty(), "{:?}", got.rejected);
    assert_eq!(got.rows.len(), 167);
    let mut at = 5;
    for (i, row) in got.rows.iter().enumerate() {
        let r = i;
        assert_eq!(row.row, r as u64);
        assert_eq!(row.start, at, "row {r} follows the previous one");
        assert_eq!(
            slice(&spilled, row.start, row.len),
            clip(r),
            "row {r}'s bytes"
        );
        at += row.len;
        assert_eq!(
            row.audio_path.as_deref(),
            Some(format!("clip_{r:04}.wav").as_str())
        );
        let sentence = if r % 7 == 3 {
            Value::Null
        } else {
            json!(format!("sentence {r}"))
        };
        let score = if r % 5 == 4 {
            Value::Null
        } else {
            json!(r as f64 * 0.25 + 0.1)
        };
        let want = json!({"sentence": sentence, "up_votes": r as i64 * 3 - 40, "score": score});
        assert_eq!(Value::Object(row.meta.clone()), want, "row {r}'s metadata");
    }
    assert_eq!(got.bytes_written, at - 5);
    assert_eq!(
        spilled.len() as u64,
        at,
        "nothing but the rows after the head"
    );
    assert!(
        spilled[..5].iter().all(|&b| b == 0xAA),
        "the head is untouched"
    );
}

/// The codecs Cargo.toml's parquet features promise (files re-saved with
/// zstd, lz4 or gzip), so that a feature dropped from the list fails here.
#[test]
fn every_codec_the_features_enable_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let codecs = [
        Compression::UNCOMPRESSED,
        Compression::GZIP(Default::default()),
        Compression::ZSTD(Default::default()),
        Compression::LZ4_RAW,
        Compression::LZ4,
    ];
    for codec in codecs {
        let path = dir.path().join(format!("{codec}.parquet"));
        write_compressed(&path, &[hf_batch(0, 5), hf_batch(5, 5)], codec);
        let (got, spilled) = run(&path, &UNLIMITED, 0);
        let got = got.unwrap_or_else(|e| panic!("{codec}: {e}"));
        assert!(got.rejected.is_empty(), "{codec}: {:?}", got.rejected);
        assert_eq!(got.rows.len(), 10, "{codec}");
        for row in &got.rows {
            let bytes = slice(&spilled, row.start, row.len);
            assert_eq!(bytes, clip(row.row as usize), "{codec}: row {}", row.row);
        }
    }
}

#[test]
fn rows_without_bytes_are_rejected_by_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("holes.parquet");
    let rows: Vec<usize> = (0..6).collect();
    let clips = vec![
        Some((Some(clip(0)), "a.wav".to_owned())),
        Some((None, "b.wav".to_owned())),
        None,
        Some((Some(Vec::new()), "d.wav".to_owned())),
        Some((Some(clip(4)), "e.wav".to_owned())),
    ];
    let mut second = clips.clone();
    second.truncate(2);
    write_groups(
        &path,
        &[
            hf_batch_of(&rows[..5], &clips),
            hf_batch_of(&rows[..2], &second),
        ],
    );

    let (got, spilled) = run(&path, &UNLIMITED, 0);
    let got = got.expect("the file spills");
    let rows: Vec<u64> = got.rows.iter().map(|r| r.row).collect();
    assert_eq!(
        rows,
        [0, 4, 5],
        "row 6 (the second group's null bytes) is left out"
    );
    assert_eq!(slice(&spilled, got.rows[1].start, got.rows[1].len), clip(4));
    assert_eq!(slice(&spilled, got.rows[2].start, got.rows[2].len), clip(0));
    let rejected: Vec<_> = got.rejected.iter().map(|r| r.rows.clone()).collect();
    assert_eq!(rejected, [1..2, 2..3, 3..4, 6..7]);
    let reasons: Vec<&str> = got.rejected.iter().map(|r| r.reason.as_str()).collect();
    assert_eq!(
        reasons[0],
        "row 1: the audio column `audio` has no bytes (null); expected the recording's \
         encoded bytes"
    );
    assert!(
        reasons[1].starts_with("row 2: the audio column `audio` is null;"),
        "{}",
        reasons[1]
    );
    assert!(reasons[2].contains("row 3: the audio column `audio` has an empty byte string"));
    assert!(reasons[3].starts_with("row 6: the audio column `audio` has no bytes (null)"));
}

/// A file with a plain binary column `wav` and a `text` column.
fn write_plain(path: &Path, column: &str, n: usize) {
    let wav: BinaryArray = (0..n).map(|r| Some(clip(r))).collect();
    let text: StringArray = (0..n).map(|r| Some(format!("text {r}"))).collect();
    let batch = RecordBatch::try_from_iter([
        (column, Arc::new(wav) as ArrayRef),
        ("text", Arc::new(text)),
    ])
    .expect("batch");
    write_groups(path, &[batch]);
}

#[test]
fn a_named_plain_binary_column_is_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("plain.parquet");
    write_plain(&path, "wav", 4);
    let o = Options {
        audio_column: Some("wav"),
        max_spill_bytes: u64::MAX,
    };
    let (got, spilled) = run(&path, &o, 0);
    let got = got.expect("the file spills");
    assert_eq!(got.rows.len(), 4);
    for (r, row) in got.rows.iter().enumerate() {
        assert_eq!(slice(&spilled, row.start, row.len), clip(r));
        assert_eq!(row.audio_path, None);
        assert_eq!(
            Value::Object(row.meta.clone()),
            json!({"text": format!("text {r}")})
        );
    }
}

#[test]
fn a_plain_binary_audio_column_must_be_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("plain.parquet");
    write_plain(&path, "audio", 2);
    let (got, _) = run(&path, &UNLIMITED, 0);
    let err = got.expect_err("`audio` is binary, not Hugging Face's struct");
    assert!(
        matches!(&err, Error::AudioType { column, found: DataType::Binary, plain_binary: true, .. }
            if column == "audio"),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("named by Options::audio_column"),
        "{err}"
    );
}

#[test]
fn a_missing_audio_column_names_the_columns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("plain.parquet");
    write_plain(&path, "wav", 2);
    let (got, spilled) = run(&path, &UNLIMITED, 3);
    let err = got.expect_err("there is no `audio` column");
    let Error::NoAudioColumn {
        wanted, columns, ..
    } = &err
    else {
        panic!("expected NoAudioColumn, got {err:?}");
    };
    assert_eq!(wanted, "audio");
    assert_eq!(columns, &["wav", "text"]);
    assert!(
        err.to_string()
            .contains("no column `audio` (its columns: wav, text)"),
        "{err}"
    );
    assert_eq!(spilled.len(), 3, "the spill is left as it was");
}

#[test]
fn an_audio_column_of_another_type_says_what_it_is() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("text.parquet");
    let audio: StringArray = vec![Some("a.wav")].into_iter().collect();
    let batch =
        RecordBatch::try_from_iter([("audio", Arc::new(audio) as ArrayRef)]).expect("batch");
    write_groups(&path, &[batch]);
    let (got, _) = run(&path, &UNLIMITED, 0);
    let err = got.expect_err("a string column holds no recordings");
    assert!(
        matches!(
            &err,
            Error::AudioType {
                found: DataType::Utf8,
                plain_binary: false,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("`audio` is Utf8; expected a struct"),
        "{err}"
    );
}

#[test]
fn a_file_that_is_not_parquet_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wav = dir.path().join("clip.parquet");
    fs::write(&wav, b"RIFF\x24\x00\x00\x00WAVEfmt ").expect("write");
    let (got, _) = run(&wav, &UNLIMITED, 0);
    let err = got.expect_err("a WAV file");
    assert!(
        matches!(&err, Error::NotParquet { len: 16, head, tail, .. }
            if head == b"RIFF" && tail == b"fmt "),
        "{err:?}"
    );
    assert!(err.to_string().contains("starts with \"RIFF\""), "{err}");

    let empty = dir.path().join("empty.parquet");
    fs::write(&empty, b"").expect("write");
    let (got, _) = run(&empty, &UNLIMITED, 0);
    assert!(
        matches!(got, Err(Error::NotParquet { len: 0, .. })),
        "{got:?}"
    );

    let footer = dir.path().join("footer.parquet");
    fs::write(
        &footer,
        b"PAR1 garbage where a footer goes \x10\x00\x00\x00PAR1",
    )
    .expect("write");
    let (got, _) = run(&footer, &UNLIMITED, 0);
    assert!(matches!(got, Err(Error::Footer { .. })), "{got:?}");

    let (got, _) = run(&dir.path().join("absent.parquet"), &UNLIMITED, 0);
    assert!(matches!(got, Err(Error::Open { .. })), "{got:?}");
}

/// A `ChunkReader` over a file's bytes that records every range fetched
/// whole: the parquet page reader fetches a page's compressed payload so.
#[derive(Clone)]
struct Recording {
    data: Bytes,
    fetched: Arc<Mutex<Vec<(u64, usize)>>>,
}

impl Length for Recording {
    fn len(&self) -> u64 {
        self.data.len() as u64
    }
}

impl ChunkReader for Recording {
    type T = <Bytes as ChunkReader>::T;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        self.data.get_read(start)
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.fetched.lock().expect("lock").push((start, length));
        self.data.get_bytes(start, length)
    }
}

/// The byte range of the compressed payload of the first data page of row
/// group `group`'s leaf column `column`, found through the footer's
/// `data_page_offset` and the page reader's own fetch.
fn first_data_page_payload(file: &[u8], group: usize, column: usize) -> (u64, usize) {
    let rec = Recording {
        data: Bytes::copy_from_slice(file),
        fetched: Arc::default(),
    };
    let reader = SerializedFileReader::new(rec.clone()).expect("parquet");
    let chunk = reader.metadata().row_group(group).column(column).clone();
    let data_page = chunk.data_page_offset() as u64;
    let (_, chunk_end) = {
        let (start, len) = chunk.byte_range();
        (start, start + len)
    };
    rec.fetched.lock().expect("lock").clear();
    let rg = reader.get_row_group(group).expect("row group");
    let mut pages = rg.get_column_page_reader(column).expect("page reader");
    // The dictionary page (if any) comes first; read until the data page.
    while let Some(page) = pages.get_next_page().expect("the page decodes") {
        if page.is_data_page() {
            break;
        }
    }
    let fetched = rec.fetched.lock().expect("lock").clone();
    let payload = fetched
        .into_iter()
        .find(|&(start, len)| start > data_page && start + len as u64 <= chunk_end)
        .expect("the data page's payload was fetched");
    assert!(payload.1 > 16, "a payload worth damaging: {payload:?}");
    payload
}

#[test]
fn a_damaged_page_costs_only_its_row_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("damaged.parquet");
    write_groups(
        &path,
        &[hf_batch(0, 10), hf_batch(10, 10), hf_batch(20, 10)],
    );
    let mut file = fs::read(&path).expect("read back");
    // Leaf 0 is `audio.bytes`.
    let (start, len) = first_data_page_payload(&file, 1, 0);
    file[start as usize..start as usize + len].fill(0xFF);
    fs::write(&path, &file).expect("write the damage");

    let (got, spilled) = run(&path, &UNLIMITED, 0);
    let got = got.expect("a damaged row group is no whole-file failure");
    assert_eq!(got.rejected.len(), 1, "{:?}", got.rejected);
    let rejection = &got.rejected[0];
    assert_eq!(rejection.rows, 10..20);
    assert!(
        rejection
            .reason
            .starts_with("row group 1 (rows 10..20) cannot be decoded: "),
        "{}",
        rejection.reason
    );
    let rows: Vec<u64> = got.rows.iter().map(|r| r.row).collect();
    let want: Vec<u64> = (0..10).chain(20..30).collect();
    assert_eq!(rows, want);
    for row in &got.rows {
        assert_eq!(slice(&spilled, row.start, row.len), clip(row.row as usize));
        assert_eq!(row.meta["up_votes"], json!(row.row as i64 * 3 - 40));
    }
}

/// The file's bytes before its footer (the pages), and its footer's
/// metadata.
fn pages_and_footer(file: &[u8]) -> (&[u8], parquet::file::metadata::ParquetMetaData) {
    let n = file.len();
    let footer: [u8; 4] = file[n - 8..n - 4].try_into().expect("4 bytes");
    let pages = &file[..n - 8 - u32::from_le_bytes(footer) as usize];
    let meta = ParquetMetaDataReader::new()
        .parse_and_finish(&Bytes::copy_from_slice(file))
        .expect("the footer parses");
    (pages, meta)
}

/// Regression: a footer whose column chunk offset is negative made the
/// parquet crate panic (`ColumnChunkMetaData::byte_range` asserts) when a
/// randomly damaged file was read; it now costs that row group only.
#[test]
fn a_footer_placing_a_column_outside_the_file_costs_its_row_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("footer.parquet");
    write_groups(
        &path,
        &[hf_batch(0, 10), hf_batch(10, 10), hf_batch(20, 10)],
    );
    let file = fs::read(&path).expect("read back");
    let (pages, meta) = pages_and_footer(&file);
    let mut builder = meta.into_builder();
    let mut groups = builder.take_row_groups();
    let mut columns = groups[1].columns().to_vec();
    columns[0] = columns[0]
        .clone()
        .into_builder()
        .set_dictionary_page_offset(None)
        .set_data_page_offset(-5)
        .build()
        .expect("column chunk");
    groups[1] = groups[1]
        .clone()
        .into_builder()
        .set_column_metadata(columns)
        .build()
        .expect("row group");
    let meta = builder.set_row_groups(groups).build();
    let mut damaged = pages.to_vec();
    ParquetMetaDataWriter::new(&mut damaged, &meta)
        .finish()
        .expect("write the footer");
    fs::write(&path, &damaged).expect("write the damage");

    let (got, spilled) = run(&path, &UNLIMITED, 0);
    let got = got.expect("one bad column chunk is no whole-file failure");
    assert_eq!(got.rejected.len(), 1, "{:?}", got.rejected);
    assert_eq!(got.rejected[0].rows, 10..20);
    assert!(
        got.rejected[0].reason.starts_with(
            "row group 1 (rows 10..20) cannot be decoded: the footer places column `audio.bytes` at"
        ),
        "{}",
        got.rejected[0].reason
    );
    let rows: Vec<u64> = got.rows.iter().map(|r| r.row).collect();
    assert_eq!(rows, (0..10).chain(20..30).collect::<Vec<u64>>());
    for row in &got.rows {
        assert_eq!(slice(&spilled, row.start, row.len), clip(row.row as usize));
    }
}

#[test]
fn over_max_spill_bytes_is_an_error_and_the_spill_is_cut_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.parquet");
    write_groups(&path, &[hf_batch(0, 8)]);
    let total: u64 = (0..8).map(|r| clip(r).len() as u64).sum();
    let o = Options {
        audio_column: None,
        max_spill_bytes: total - 1,
    };
    let (got, spilled) = run(&path, &o, 7);
    let err = got.expect_err("one byte short");
    assert!(
        matches!(err, Error::SpillFull { row: 7, needed, limit, .. }
            if needed == total && limit == total - 1),
        "{err:?}"
    );
    assert_eq!(
        spilled,
        vec![0xAA; 7],
        "the rows written before are cut off"
    );

    let exact = Options {
        audio_column: None,
        max_spill_bytes: total,
    };
    let (got, _) = run(&path, &exact, 0);
    assert_eq!(got.expect("exactly the limit").bytes_written, total);
}

#[test]
fn bytes_read_leave_out_the_columns_not_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("nested.parquet");
    write_groups(&path, &[hf_batch(0, 40), hf_batch(40, 40)]);
    let reader = SerializedFileReader::new(File::open(&path).expect("open")).expect("parquet");
    let size = |name: &str| -> u64 {
        let groups = reader.metadata().row_groups();
        let chunks = groups.iter().flat_map(|g| g.columns());
        let of_name = chunks.filter(|c| c.column_path().string().starts_with(name));
        of_name.map(|c| c.compressed_size() as u64).sum()
    };
    let file_len = fs::metadata(&path).expect("stat").len();
    let (audio, segments) = (size("audio"), size("segments"));
    assert!(
        segments > 20_000,
        "the nested column is worth leaving out: {segments}"
    );

    let (got, _) = run(&path, &UNLIMITED, 0);
    let got = got.expect("the file spills");
    assert!(
        got.bytes_read >= audio,
        "{} < the audio's {audio}",
        got.bytes_read
    );
    assert!(
        got.bytes_read < file_len - segments,
        "{} bytes read of {file_len}, of which {segments} are the unread segments",
        got.bytes_read
    );
}

#[test]
fn scalar_metadata_of_every_kind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kinds.parquet");
    let audio = audio_column(&[
        Some((Some(clip(0)), "0.wav".to_owned())),
        Some((Some(clip(1)), "1.wav".to_owned())),
    ]);
    let dict: DictionaryArray<Int32Type> = vec![Some("f"), None].into_iter().collect();
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("audio", audio),
        ("speaker", Arc::new(dict)),
        ("age", Arc::new(Int8Array::from(vec![Some(-3), None]))),
        ("id", Arc::new(UInt64Array::from(vec![u64::MAX, 0]))),
        (
            "gain",
            Arc::new(Float32Array::from(vec![0.5, f32::INFINITY])),
        ),
        ("ok", Arc::new(BooleanArray::from(vec![true, false]))),
        ("day", Arc::new(Date32Array::from(vec![19_753, 0]))),
        (
            "at",
            Arc::new(
                TimestampMicrosecondArray::from(vec![1_706_659_200_123_456, 0])
                    .with_timezone("UTC"),
            ),
        ),
        (
            "local",
            Arc::new(TimestampMillisecondArray::from(vec![1_706_659_200_000, 1])),
        ),
        ("nothing", Arc::new(NullArray::new(2))),
        ("raw", Arc::new(BinaryArray::from(vec![&b"x"[..], b"y"]))),
    ];
    let nullable = columns.into_iter().map(|(name, col)| (name, col, true));
    let batch = RecordBatch::try_from_iter_with_nullable(nullable).expect("batch");
    write_groups(&path, &[batch]);
    let (got, _) = run(&path, &UNLIMITED, 0);
    let got = got.expect("the file spills");
    let meta: Vec<Value> = got
        .rows
        .iter()
        .map(|r| Value::Object(r.meta.clone()))
        .collect();
    assert_eq!(
        meta,
        [
            json!({"speaker": "f", "age": -3, "id": u64::MAX, "gain": 0.5, "ok": true,
                   "day": "2024-01-31", "at": "2024-01-31T00:00:00.123456Z",
                   "local": "2024-01-31T00:00:00", "nothing": null}),
            json!({"speaker": null, "age": null, "id": 0, "gain": null, "ok": false,
                   "day": "1970-01-01", "at": "1970-01-01T00:00:00Z",
                   "local": "1970-01-01T00:00:00.001", "nothing": null}),
        ]
    );
}
