//! The job source for `build MANIFEST…`: NeMo and lhotse manifests instead
//! of a tree walk.
//!
//! Each manifest is one split, named after its file's stem
//! (`train.jsonl.gz` → `train`); a line is one item, and items keep line
//! order (`seq` is the position among the manifest's good lines). Two
//! kinds of line, told apart by their fields, in `.json`/`.jsonl` files,
//! gzipped or not (gzip is recognised by its magic bytes):
//!
//! * NeMo: `audio_filepath`, `duration`, optional `offset`, any other
//!   fields. With `offset` the item is the segment `offset`…`offset +
//!   duration`; without it the whole file, whose length must agree with
//!   `duration` within 0.1 s.
//! * lhotse cut (`recording` present): the recording's first source (of
//!   type `file`), the cut's `start`, `duration` and `channel`. Its
//!   metadata: the cut's `id`, `start`, `duration`, `channel`,
//!   `recording_id`, the first supervision's `text`, `speaker` and
//!   `language`, and the cut's `custom` fields.
//!
//! Relative audio paths resolve against the manifest's folder; `path` keeps
//! them as written. A line that names no usable item (not JSON, a field
//! missing or mistyped, a duration that is not positive, a negative offset)
//! becomes a [`LineRejection`] with its 1-based line number and is left
//! out; the problems only the audio can show (a missing file, not audio, an
//! offset past the end) are the decoder's, and `build` puts the line number
//! on those too.
//!
//! A shard of a build (`build --shard K/N`) plans only its share of each
//! manifest's lines ([`plan_share`]; the rule is the caller's): the lines
//! outside it are neither parsed nor rejected here, and the items keep
//! their manifest line numbers (`seq` counts the good lines of the share).
//!
//! A segment of a WAV file is read as its exact byte extent, one of a FLAC
//! file from the seek point before it to the one after it (without a
//! SEEKTABLE: from the frame holding its first sample through the one
//! holding its last, found with small reads, `seek::bisect`): the header is
//! read here once per recording (the first 64 KiB, up to 1 MiB when its
//! chunks or blocks before the samples are larger), and the job carries the
//! header rewritten for the part and the extent (`decode::wav::extent`,
//! `decode::flac::seek`). An MP3 or Ogg (Vorbis, Opus) recording gets a
//! seek index here, once (`decode::compressed::index`: frame or page
//! headers hopped over), and each segment reads the frames or pages from a
//! pre-roll before it to its end, behind the Ogg header pages; the job's
//! segment says how the part lines up with the whole-file decode
//! ([`crate::model::LossyPart`]). An M4A recording's index is its sample
//! table, and a segment reads its access units from a pre-roll before it
//! where that is exact: not past the first unit that may code a band as
//! perceptual noise (whose generator the part would start afresh). The
//! other segments of such a recording, and recordings whose index cannot
//! be built (a damaged file), cannot be cut into parts: with a spill folder
//! ([`plan_spilling`], `build`'s `OUT/.melforge-spill`) such a recording
//! with two or more of them is decoded once, after every line is planned,
//! into a float WAV there, and those segments become extents of that WAV,
//! the rows bit for bit those of decoding the recording itself ([`spill`]).
//! Otherwise (no folder, a decode over `input.spill_max_mib`, a decode
//! error, one segment) they are read whole and decoded from their start up
//! to the segment's end; the decoder names what is wrong, if anything.

use std::collections::HashMap;
use std::io::{BufRead, Read};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::{Job, PathTable, Plan};
use crate::decode::compressed::{self, index};
use crate::decode::flac::seek;
use crate::decode::wav::extent;
use crate::model::{RejectKind, Segment};
use crate::reader::ReadRange;

pub mod spill;

pub use spill::SpillDir;

/// A manifest that cannot be used at all.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read manifest {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("manifests {first} and {second} both name split `{split}` (their file stems)")]
    SameSplit {
        first: PathBuf,
        second: PathBuf,
        split: String,
    },
    #[error("manifest {0} has no file stem to name its split after")]
    NoStem(PathBuf),
}

/// A manifest line left out, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineRejection {
    /// The split (manifest) it belongs to.
    pub split: u32,
    /// 1-based.
    pub line: u64,
    /// The audio path when the line named one, else the manifest's path.
    pub path: String,
    pub kind: RejectKind,
    pub reason: String,
}

/// What the manifests hold, in the shape `build` takes: the plan (one
/// split per manifest, no labels) and per job, by path index, what only a
/// manifest has.
#[derive(Debug, Default)]
pub struct Manifests {
    pub plan: Plan,
    /// The manifests, in split order.
    pub files: Vec<PathBuf>,
    /// By path index: the item's metadata as a JSON object.
    pub meta: Arc<PathTable>,
    /// By path index: the item's 1-based manifest line.
    pub lines: Arc<[u32]>,
    /// By path index: the segment, when the item is not the whole file.
    pub segments: Vec<Option<Segment>>,
    /// By path index: the bytes to read instead of the whole file.
    pub ranges: Vec<Option<ReadRange>>,
    pub rejected: Vec<LineRejection>,
    /// Bytes read to plan ranges: headers, the frame searches of FLAC
    /// files without seek points, the MP3/Ogg seek indexes, and the
    /// recordings read whole to spill them ([`spill`]).
    pub header_bytes: u64,
    /// Recordings decoded once into a spill, and the bytes written ([`spill`]).
    pub spilled: usize,
    pub spill_bytes: u64,
}

/// Whether `input` is a manifest (a regular file) rather than a tree.
pub fn is_manifest(input: &Path) -> bool {
    input.is_file()
}

/// The split a manifest file names: its stem, after `.gz`.
pub fn split_name(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let name = name.strip_suffix(".gz").unwrap_or(name);
    let stem = name.rsplit_once('.').map_or(name, |(s, _)| s);
    (!stem.is_empty()).then(|| stem.to_string())
}

/// The lines of a manifest, gunzipped when it starts with gzip's magic.
pub fn open_lines(path: &Path) -> std::io::Result<Box<dyn BufRead>> {
    lines_of(std::io::BufReader::new(std::fs::File::open(path)?))
}

/// The lines of a manifest's bytes read from `f`, gunzipped when they
/// start with gzip's magic. A line is held whole: at most the file's size,
/// or about 1,032 times it gunzipped (deflate's largest ratio).
fn lines_of<'a>(mut f: impl BufRead + 'a) -> std::io::Result<Box<dyn BufRead + 'a>> {
    let gz = f.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    Ok(if gz {
        Box::new(std::io::BufReader::new(flate2::read::MultiGzDecoder::new(
            f,
        )))
    } else {
        Box::new(f)
    })
}

/// One usable line.
struct Item {
    /// As written in the manifest.
    audio: String,
    segment: Option<Segment>,
    meta: Map<String, Value>,
}

/// Why a line is left out: its audio path when known, and the sentence.
type Bad = (Option<String>, String);

/// Reads every manifest into one plan.
pub fn plan(manifests: &[PathBuf]) -> Result<Manifests, Error> {
    plan_share(manifests, None)
}

/// Which lines of each manifest to plan: given a manifest's number of
/// lines, the 0-based indices of the lines taken (a shard's share of them,
/// `build --shard K/N`); None: every line.
pub type Share<'a> = Option<&'a dyn Fn(usize) -> Range<usize>>;

/// Reads the lines `share` gives of every manifest into one plan. Lines
/// outside the share are not parsed (their audio headers are not read
/// either) and leave no rejection: they are another shard's.
pub fn plan_share(manifests: &[PathBuf], share: Share<'_>) -> Result<Manifests, Error> {
    plan_spilling(manifests, share, None)
}

/// [`plan_share`], and with `spill` the segments of compressed recordings
/// that cannot be cut into parts served from one decode of each, written
/// there ([`spill`]).
pub fn plan_spilling(
    manifests: &[PathBuf],
    share: Share<'_>,
    spill: Option<&SpillDir>,
) -> Result<Manifests, Error> {
    let mut b = Builder::default();
    for (split, file) in manifests.iter().enumerate() {
        let name = split_name(file).ok_or_else(|| Error::NoStem(file.clone()))?;
        if let Some(i) = b.m.plan.splits.iter().position(|s| *s == name) {
            return Err(Error::SameSplit {
                first: manifests[i].clone(),
                second: file.clone(),
                split: name,
            });
        }
        b.m.plan.splits.push(name);
        let read = |source| Error::Read {
            path: file.clone(),
            source,
        };
        let keep = match share {
            Some(share) => share(count_lines(file).map_err(read)?),
            None => 0..usize::MAX,
        };
        b.manifest(split as u32, file, keep).map_err(read)?;
        b.m.files.push(file.clone());
    }
    let Builder {
        mut m,
        paths,
        meta,
        lines,
        heads,
        pending,
    } = b;
    m.plan.paths = Arc::new(paths);
    m.meta = Arc::new(meta);
    m.lines = lines.into();
    m.header_bytes = heads.bytes;
    if let Some(dir) = spill {
        spill::resolve(&mut m, pending, dir);
    }
    Ok(m)
}

/// The number of lines of a manifest (gunzipped), as [`open_lines`] reads
/// them: what a [`Share`] divides.
pub fn count_lines(path: &Path) -> std::io::Result<usize> {
    let mut r = open_lines(path)?;
    let (mut n, mut buf) = (0, Vec::new());
    while r.read_until(b'\n', &mut buf)? > 0 {
        n += 1;
        buf.clear();
    }
    Ok(n)
}

/// The plan as it grows, manifest by manifest.
#[derive(Default)]
struct Builder {
    m: Manifests,
    paths: PathTable,
    meta: PathTable,
    lines: Vec<u32>,
    heads: Heads,
    /// Segments of recordings read whole ([`spill`]).
    pending: spill::Pending,
}

impl Builder {
    /// The lines `keep` (0-based) of manifest `file`, split `split`.
    fn manifest(&mut self, split: u32, file: &Path, keep: Range<usize>) -> std::io::Result<()> {
        let dir = file.parent().unwrap_or(Path::new("")).to_path_buf();
        let mut seq = 0u32;
        each_line(open_lines(file)?, keep, |line_no, parsed| match parsed {
            Ok(item) => {
                self.item(item, &dir, split, seq, line_no);
                seq += 1;
            }
            Err((audio, reason)) => self.m.rejected.push(LineRejection {
                split,
                line: line_no,
                path: audio.unwrap_or_else(|| file.display().to_string()),
                kind: RejectKind::BadLine,
                reason,
            }),
        })
    }

    /// A usable line: its job (the `seq`-th of its split), metadata, line,
    /// segment and byte range.
    fn item(&mut self, item: Item, dir: &Path, split: u32, seq: u32, line_no: u64) {
        let open = dir.join(&item.audio);
        let ranged = item
            .segment
            .filter(|s| s.expect_s.is_none())
            .and_then(|s| self.heads.range(&open, &s));
        let (range, segment) = match ranged {
            Some((r, s)) => (Some(r), Some(s)),
            None => (None, item.segment),
        };
        let path = self.paths.push(&item.audio);
        // A compressed recording's segment without a part: the recording
        // has no index, or the index gives this segment none (an M4A past
        // its first access unit coding noise).
        let compressed = matches!(
            self.heads.by_path.get(&open),
            Some(Some(Head::Whole | Head::Lossy(_)))
        );
        if compressed && range.is_none() && segment.is_some_and(|s| s.expect_s.is_none()) {
            self.pending.push(&open, path);
        }
        self.meta.push(&Value::Object(item.meta).to_string());
        self.lines.push(u32::try_from(line_no).unwrap_or(u32::MAX));
        if open != Path::new(&item.audio) {
            self.m.plan.targets.insert(path, open);
        }
        self.m.segments.push(segment);
        self.m.ranges.push(range);
        self.m.plan.jobs.push(Job {
            path,
            split,
            seq,
            label: -1,
        });
    }
}

/// Each line of `lines` whose 0-based index is in `keep`, parsed, to
/// `each` with its 1-based number; blank lines are skipped. A line that is
/// not UTF-8 (or a read error) ends it with the error.
fn each_line(
    lines: impl BufRead,
    keep: Range<usize>,
    mut each: impl FnMut(u64, Result<Item, Bad>),
) -> std::io::Result<()> {
    for (i, line) in lines.lines().enumerate() {
        if i < keep.start {
            line?;
            continue;
        }
        if i >= keep.end {
            break;
        }
        let text = line?;
        if text.trim().is_empty() {
            continue;
        }
        each(i as u64 + 1, parse_line(&text));
    }
    Ok(())
}

/// Fuzz entry point (`crate::fuzzing`): `data` as a whole manifest file,
/// gzipped or not, read and parsed line by line as [`plan`] reads it, no
/// audio opened. Every line is an item or a rejection with a reason, in
/// line order; an item names its audio and a segment within the bounds
/// [`check_times`] sets.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub fn fuzz_manifest(data: &[u8]) {
    let Ok(lines) = lines_of(std::io::Cursor::new(data)) else {
        return;
    };
    let mut last = 0;
    let _ = each_line(lines, 0..usize::MAX, |line, parsed| {
        assert!(line > last, "line {line} after line {last}");
        last = line;
        match parsed {
            Ok(item) => {
                assert!(!item.audio.is_empty(), "an item without its audio");
                if let Some(s) = item.segment {
                    assert!(s.offset_s.is_finite() && s.offset_s >= 0.0, "{s:?}");
                    for d in [s.duration_s, s.expect_s].into_iter().flatten() {
                        assert!(d.is_finite() && d > 0.0, "{s:?}");
                    }
                    let _ = s.frames(48_000);
                }
            }
            Err((_, reason)) => assert!(!reason.is_empty(), "a rejection without a reason"),
        }
    });
}

/// Whether `text` is a line [`plan`] makes an item of (its audio may still
/// be rejected later).
pub fn is_item(text: &str) -> bool {
    parse_line(text).is_ok()
}

/// A line as an item, or why it is none.
fn parse_line(text: &str) -> Result<Item, Bad> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| (None, format!("the line is not JSON: {e}")))?;
    let Value::Object(obj) = v else {
        return Err((None, "the line is JSON but not an object".to_string()));
    };
    if obj.contains_key("recording") {
        cut(obj)
    } else if obj.contains_key("audio_filepath") {
        nemo(obj)
    } else {
        Err((
            None,
            "the line is neither a NeMo item (no `audio_filepath`) nor a lhotse cut (no \
             `recording`)"
                .to_string(),
        ))
    }
}

/// A number field: absent, or a finite number.
fn number(obj: &Map<String, Value>, key: &str, audio: &str) -> Result<Option<f64>, Bad> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|x| x.is_finite())
            .map(Some)
            .ok_or_else(|| {
                (
                    Some(audio.to_string()),
                    format!("`{key}` is not a number: {v}"),
                )
            }),
    }
}

/// `duration` must be positive and `offset` not negative.
fn check_times(audio: &str, offset: Option<f64>, duration: Option<f64>) -> Result<(), Bad> {
    if let Some(d) = duration.filter(|d| *d <= 0.0) {
        return Err((
            Some(audio.to_string()),
            format!("the duration is {d} s; it must be positive"),
        ));
    }
    if let Some(o) = offset.filter(|o| *o < 0.0) {
        return Err((
            Some(audio.to_string()),
            format!("the offset is {o} s; it must not be negative"),
        ));
    }
    Ok(())
}

/// A NeMo item.
fn nemo(obj: Map<String, Value>) -> Result<Item, Bad> {
    let Some(Value::String(audio)) = obj.get("audio_filepath") else {
        return Err((None, "`audio_filepath` is not a string".to_string()));
    };
    let audio = audio.clone();
    if audio.is_empty() {
        return Err((None, "`audio_filepath` is empty".to_string()));
    }
    let duration = number(&obj, "duration", &audio)?;
    let offset = number(&obj, "offset", &audio)?;
    check_times(&audio, offset, duration)?;
    let segment = match (offset, duration) {
        (Some(offset_s), d) => Some(Segment {
            offset_s,
            duration_s: d,
            ..Segment::default()
        }),
        (None, Some(d)) => Some(Segment {
            expect_s: Some(d),
            ..Segment::default()
        }),
        (None, None) => None,
    };
    Ok(Item {
        audio,
        segment,
        meta: obj,
    })
}

/// A lhotse MonoCut.
fn cut(obj: Map<String, Value>) -> Result<Item, Bad> {
    let rec = obj.get("recording").and_then(Value::as_object);
    let source = rec
        .and_then(|r| r.get("sources"))
        .and_then(Value::as_array)
        .and_then(|s| s.first())
        .and_then(Value::as_object)
        .ok_or((None, "the cut's recording has no `sources`".to_string()))?;
    let kind = source.get("type").and_then(Value::as_str).unwrap_or("file");
    let Some(Value::String(audio)) = source.get("source") else {
        return Err((
            None,
            "the recording's first source has no `source` path".into(),
        ));
    };
    if kind != "file" {
        return Err((
            Some(audio.clone()),
            format!("the recording's source is of type `{kind}`; only `file` is read"),
        ));
    }
    let audio = audio.clone();
    let start = number(&obj, "start", &audio)?.unwrap_or(0.0);
    let duration = number(&obj, "duration", &audio)?
        .ok_or((Some(audio.clone()), "the cut has no `duration`".to_string()))?;
    check_times(&audio, Some(start), Some(duration))?;
    let channel = match obj.get("channel") {
        None | Some(Value::Null) => 0,
        Some(Value::Array(a)) if a.len() == 1 => channel_of(&a[0], &audio)?,
        Some(Value::Array(a)) => {
            return Err((
                Some(audio),
                format!("the cut spans {} channels; one is read", a.len()),
            ));
        }
        Some(v) => channel_of(v, &audio)?,
    };
    let mut meta = Map::new();
    for key in ["id", "start", "duration", "channel"] {
        if let Some(v) = obj.get(key) {
            meta.insert(key.to_string(), v.clone());
        }
    }
    if let Some(id) = rec.and_then(|r| r.get("id")) {
        meta.insert("recording_id".to_string(), id.clone());
    }
    let sup = obj
        .get("supervisions")
        .and_then(Value::as_array)
        .and_then(|s| s.first())
        .and_then(Value::as_object);
    for key in ["text", "speaker", "language"] {
        if let Some(v) = sup.and_then(|s| s.get(key)) {
            meta.insert(key.to_string(), v.clone());
        }
    }
    if let Some(Value::Object(custom)) = obj.get("custom") {
        for (k, v) in custom {
            meta.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    Ok(Item {
        audio,
        segment: Some(Segment {
            offset_s: start,
            duration_s: Some(duration),
            channel: Some(channel),
            expect_s: None,
            base_frame: 0,
            lossy: None,
        }),
        meta,
    })
}

fn channel_of(v: &Value, audio: &str) -> Result<u16, Bad> {
    v.as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .ok_or_else(|| {
            (
                Some(audio.to_string()),
                format!("the channel {v} is not an index"),
            )
        })
}

/// How a recording's segments are placed in it.
enum Head {
    Wav(extent::Head),
    Flac(seek::Head),
    Lossy(index::Index),
    /// A compressed stream without an index (M4A, or damaged): read whole,
    /// or spilled ([`spill`]).
    Whole,
}

/// Headers read so far, by the path opened (None: neither a WAV, a FLAC
/// nor an MP3, Ogg or MP4 stream that could be indexed, or unreadable; such an
/// item is read whole and the decoder says what is wrong, if anything).
#[derive(Default)]
struct Heads {
    by_path: HashMap<PathBuf, Option<Head>>,
    bytes: u64,
}

impl Heads {
    /// The range that holds `seg` of the file at `path`, and the segment
    /// as the decoder then applies it to the bytes read.
    fn range(&mut self, path: &Path, seg: &Segment) -> Option<(ReadRange, Segment)> {
        if !self.by_path.contains_key(path) {
            let (head, bytes) = read_head(path);
            self.bytes += bytes;
            self.by_path.insert(path.to_path_buf(), head);
        }
        match self.by_path.get_mut(path)?.as_mut()? {
            Head::Wav(h) => {
                let e = h.extent(seg)?;
                // A WAV cut to the segment decodes whole.
                let whole = Segment {
                    offset_s: 0.0,
                    duration_s: None,
                    ..*seg
                };
                Some((ReadRange::new(e.prefix, e.start, e.len), whole))
            }
            Head::Flac(h) => {
                let e = match h.extent(seg) {
                    Some(e) => e,
                    None => search_flac(h, path, seg, &mut self.bytes)?,
                };
                let part = Segment {
                    base_frame: e.base_frame,
                    ..*seg
                };
                Some((ReadRange::new(e.prefix, e.start, e.len), part))
            }
            Head::Lossy(i) => {
                let e = i.extent(seg)?;
                let part = Segment {
                    lossy: Some(e.part),
                    ..*seg
                };
                let range = ReadRange {
                    prefix: e.prefix,
                    start: e.start,
                    len: e.len,
                };
                Some((range, part))
            }
            Head::Whole => None,
        }
    }
}

/// The frames of a FLAC file without seek points that `seg` needs, searched
/// for with small reads of the file (`seek::bisect`), counted in `bytes`.
fn search_flac(
    h: &mut seek::Head,
    path: &Path,
    seg: &Segment,
    bytes: &mut u64,
) -> Option<seek::Extent> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path).ok()?;
    h.search(seg, &mut |at, buf: &mut [u8]| {
        let mut n = 0;
        while n < buf.len() {
            match f.read_at(&mut buf[n..], at + n as u64) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        *bytes += n as u64;
        Ok(n)
    })
}

/// A WAV header or the metadata of a FLAC file.
fn parse_head(buf: &[u8], len: u64) -> Option<Head> {
    extent::head(buf, len)
        .map(Head::Wav)
        .or_else(|| seek::head(buf, len).map(Head::Flac))
}

/// The header of the file at `path`, and the bytes read for it.
fn read_head(path: &Path) -> (Option<Head>, u64) {
    const FIRST: u64 = 64 << 10;
    const MOST: u64 = 1 << 20;
    let Ok(f) = std::fs::File::open(path) else {
        return (None, 0);
    };
    let Ok(len) = f.metadata().map(|m| m.len()) else {
        return (None, 0);
    };
    let mut buf = Vec::new();
    let mut want = FIRST;
    loop {
        buf.clear();
        if (&f).take(want).read_to_end(&mut buf).is_err() {
            return (None, buf.len() as u64);
        }
        let got = buf.len() as u64;
        if compressed::sniff(&buf).is_some() {
            let (index, bytes) = index::Index::build(&f, len, &buf);
            return (Some(index.map_or(Head::Whole, Head::Lossy)), got + bytes);
        }
        match parse_head(&buf, len) {
            Some(h) => return (Some(h), got),
            None if got == want
                && want < MOST
                && (buf.starts_with(b"RIFF") || buf.starts_with(b"fLaC")) =>
            {
                want = MOST;
                use std::io::Seek;
                if (&f).seek(std::io::SeekFrom::Start(0)).is_err() {
                    return (None, got);
                }
            }
            None => return (None, got),
        }
    }
}

#[cfg(test)]
mod tests;
