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
//! Where a segment lies is its recording's container's answer
//! ([`super::container`]: one trait that WAV, FLAC, the compressed streams
//! and archive members answer, read once per recording). A segment of a
//! WAV file is read as its exact byte extent, one of a FLAC
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
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::container::{Heads, Window};
use super::{Extents, Job, PackedText, PathTable, Plan};
use crate::model::{RejectKind, Segment};
use crate::reader::{FileKind, ReadRange};

pub mod lines;
mod parse;
pub mod spill;

pub use lines::{Limits, Line, Lines, Span, Stamp};
pub use parse::{MAX_TIME_S, cut_meta};
pub use spill::SpillDir;

use parse::{Item, parse_line};

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
    #[error("manifest {path} is not a regular file but {kind}; a manifest is read from a file")]
    NotRegular { path: PathBuf, kind: FileKind },
    #[error(
        "manifest {path} has more than {max} lines (input.manifest_max_lines); split it, or \
         raise the limit if it is meant to be this long"
    )]
    TooManyLines { path: PathBuf, max: u64 },
    #[error(
        "manifest {path}, line {line}: the manifests' audio paths pass 4 GiB in all \
         (a build holds them in memory); build them in shards (build --shard K/N)"
    )]
    TooMuchText { path: PathBuf, line: u64 },
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
    pub meta: Arc<PackedText>,
    /// By path index: the item's 1-based manifest line.
    pub lines: Arc<Vec<u32>>,
    /// By path index: where its line's text lies in its manifest (empty
    /// for a stored corpus, whose items are no lines): what the write-back
    /// copies.
    pub spans: Arc<Vec<Span>>,
    /// By split: its manifest file as it was planned.
    pub stamps: Vec<Option<Stamp>>,
    /// By path index: the segment, when the item is not the whole file,
    /// and the bytes to read instead of the whole file.
    pub extents: Extents,
    /// By split: the path indices of its items (a split's `seq` q is path
    /// index `start + q`).
    pub items_of: Vec<Range<u32>>,
    /// The lines left out, when no [`Options::reject`] took them.
    pub rejected: Vec<LineRejection>,
    /// Lines left out in all.
    pub left_out: u64,
    /// Bytes read to plan ranges: headers, the frame searches of FLAC
    /// files without seek points, the MP3/Ogg seek indexes, and the
    /// recordings read whole to spill them ([`spill`]).
    pub header_bytes: u64,
    /// Recordings decoded once into a spill, and the bytes written ([`spill`]).
    pub spilled: usize,
    pub spill_bytes: u64,
    /// Recordings not spilled for want of room on the disk under the
    /// output folder: the free-space check refused them, or writing the
    /// spill met ENOSPC, EDQUOT or EFBIG ([`spill`]).
    pub spill_no_room: usize,
}

impl Manifests {
    /// Job `path` (an index of the plan's paths, its metadata and line
    /// pushed by the caller) of `split` at `seq`: the reader opens `open`
    /// (None: the path itself), reads `range` (None: the whole file) and
    /// the decoder cuts `segment`.
    pub fn push_job(
        &mut self,
        (path, split, seq): (u32, u32, u32),
        open: Option<PathBuf>,
        segment: Option<Segment>,
        range: Option<ReadRange>,
    ) {
        if let Some(open) = open {
            self.plan.targets.insert(path, open);
        }
        self.extents.push(segment, range);
        self.plan.jobs.push(Job {
            path,
            split,
            seq,
            label: -1,
        });
    }
}

/// Whether `input` is a manifest (a regular file) rather than a tree.
pub fn is_manifest(input: &Path) -> bool {
    input.is_file()
}

/// An item's line up to (not with) its closing brace, trailing space
/// dropped: a JSON object's text ends with it (None: the line is no object).
pub fn object_body(line: &[u8]) -> Option<&[u8]> {
    line.trim_ascii_end().strip_suffix(b"}")
}

/// Whether the first item line of the manifest at `path` is a NeMo item
/// (`audio_filepath`, no `recording`), read with `limits`: `build --lhotse`
/// refuses such a manifest before any work. A file whose first lines are
/// unreadable or not items says false (the build names the problem).
pub fn starts_with_nemo(path: &Path, limits: Limits) -> bool {
    let Ok(mut lines) = Lines::open(path, limits) else {
        return false;
    };
    while let Ok(Some((_, line))) = lines.next_line() {
        let Line::Text(text) = line else { return false };
        if text.trim().is_empty() {
            continue;
        }
        return match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(o)) => {
                o.contains_key("audio_filepath") && !o.contains_key("recording")
            }
            _ => false,
        };
    }
    false
}

/// The split a manifest file names: its stem, after `.gz`.
pub fn split_name(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let name = name.strip_suffix(".gz").unwrap_or(name);
    let stem = name.rsplit_once('.').map_or(name, |(s, _)| s);
    (!stem.is_empty()).then(|| stem.to_string())
}

/// Reads every manifest into one plan.
pub fn plan(manifests: &[PathBuf]) -> Result<Manifests, Error> {
    plan_share(manifests, None)
}

/// What [`plan_with`] plans: every line or a shard's share, a spill folder
/// or none, and the bounds on reading the manifests.
#[derive(Clone, Copy, Default)]
pub struct Options<'a> {
    pub share: Share<'a>,
    pub spill: Option<&'a SpillDir>,
    pub limits: Limits,
    /// Whole-file items over the size limit read for their first seconds
    /// only ([`FirstSeconds`]).
    pub first: Option<FirstSeconds>,
    /// Where the audio paths are members of archives rather than files
    /// (NeMo's tarred audio, `plan::tarred`); None: files beside the
    /// manifest.
    pub members: Option<&'a dyn Members>,
    /// How the spill reads its recordings ([`spill::prepare`]); None: as
    /// `[io]`'s defaults say.
    pub readers: Option<spill::Readers<'a>>,
    /// Where each line left out goes as it is found (`build`: a
    /// [`super::spool::Spool`]); None: [`Manifests::rejected`].
    pub reject: Option<&'a dyn Fn(LineRejection)>,
}

/// Where a manifest's audio lives when a path names a member of an
/// archive, not a file of its own (NeMo's tarred audio: `plan::tarred`).
pub trait Members {
    /// The file to open and the extent of member `name` of shard
    /// `shard_id`, or why there is none.
    fn find_member(&self, name: &str, shard_id: Option<u64>) -> Result<Member, String>;
}

/// An archive member: the file to open, and the extent (start, length)
/// of the member's bytes in it.
pub type Member = (PathBuf, u64, u64);

/// Which lines of each manifest to plan: given a manifest's number of
/// lines, the 0-based indices of the lines taken (a shard's share of them,
/// `build --shard K/N`); None: every line.
pub type Share<'a> = Option<&'a dyn Fn(usize) -> Range<usize>>;

/// Reads the lines `share` gives of every manifest into one plan. Lines
/// outside the share are not parsed (their audio headers are not read
/// either) and leave no rejection: they are another shard's.
pub fn plan_share(manifests: &[PathBuf], share: Share<'_>) -> Result<Manifests, Error> {
    plan_spilling(manifests, share, None, None)
}

/// A recipe that reads only the first `seconds` of a recording at
/// `rate_hz` (Whisper: 30 s at 16 kHz). A whole-file item of a WAV or FLAC
/// recording at that rate and over `over_bytes` (`io.max_file_bytes`) is
/// planned as the range holding those seconds, as a segment of them is:
/// the reader reads only them (instead of rejecting the file as too large)
/// and the decoder gives the samples of the whole-file decode's start, bit
/// for bit, so the row is the same. A recording at another rate is left
/// whole (a part resampled alone is not the whole one's start), and so is
/// a compressed one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FirstSeconds {
    pub rate_hz: u32,
    pub seconds: f64,
    pub over_bytes: u64,
}

/// [`plan_share`], and with `spill` the segments of compressed recordings
/// that cannot be cut into parts served from one decode of each, written
/// there ([`spill`]); with `first`, whole-file items over the size limit
/// read for their first seconds only ([`FirstSeconds`]).
pub fn plan_spilling(
    manifests: &[PathBuf],
    share: Share<'_>,
    spill: Option<&SpillDir>,
    first: Option<FirstSeconds>,
) -> Result<Manifests, Error> {
    let limits = Limits::default();
    plan_with(
        manifests,
        Options {
            share,
            spill,
            limits,
            first,
            members: None,
            readers: None,
            reject: None,
        },
    )
}

/// Reads the manifests as `o` says: [`plan_spilling`] with `o.limits`
/// ([`lines`]).
pub fn plan_with(manifests: &[PathBuf], o: Options<'_>) -> Result<Manifests, Error> {
    let Options {
        share,
        spill,
        limits,
        first,
        members,
        readers,
        reject,
    } = o;
    let mut b = Builder {
        first,
        members,
        reject,
        ..Builder::default()
    };
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
        b.m.plan
            .bases
            .push(file.parent().unwrap_or(Path::new("")).to_path_buf());
        let keep = match share {
            Some(share) => share(count_lines(file, limits)?),
            None => 0..usize::MAX,
        };
        let first = b.paths.len() as u32;
        let stamp = b.manifest(split as u32, file, keep, limits)?;
        b.m.stamps.push(stamp);
        b.m.items_of.push(first..b.paths.len() as u32);
        b.m.files.push(file.clone());
    }
    let Builder {
        mut m,
        paths,
        meta,
        lines,
        spans,
        heads,
        pending,
        ..
    } = b;
    let (mut paths, mut meta) = (paths, meta);
    paths.shrink_to_fit();
    meta.shrink_to_fit();
    m.extents.shrink_to_fit();
    m.plan.jobs.shrink_to_fit();
    m.plan.paths = Arc::new(paths);
    m.meta = Arc::new(meta);
    m.lines = Arc::new(lines);
    m.spans = Arc::new(spans);
    m.header_bytes = heads.bytes;
    if let Some(dir) = spill {
        let defaults;
        let readers = match readers {
            Some(r) => r,
            None => {
                defaults = crate::config::Config::default().io;
                spill::Readers { io: &defaults }
            }
        };
        spill::prepare(&mut m, pending, dir, readers);
    }
    Ok(m)
}

/// The number of lines of a manifest (gunzipped), as [`Lines`] reads them:
/// what a [`Share`] divides.
pub fn count_lines(path: &Path, limits: Limits) -> Result<usize, Error> {
    let n = Lines::open(path, limits)?.count()?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// The cut ids a manifest's lines have had, each with its first line: by
/// a 128-bit hash of the id (two keyed SipHashes), 24 bytes an id however
/// long it is, where the ids themselves would cost ~80. Two distinct ids
/// of 100 million share a hash with a chance near 10⁻²³.
#[derive(Default)]
struct CutIds {
    keys: (std::hash::RandomState, std::hash::RandomState),
    first: HashMap<(u64, u64), u64>,
}

impl CutIds {
    /// The line that had `id` first, or None (and `line` is now it).
    fn first(&mut self, id: &str, line: u64) -> Option<u64> {
        use std::hash::BuildHasher as _;
        let key = (self.keys.0.hash_one(id), self.keys.1.hash_one(id));
        match self.first.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => Some(*e.get()),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(line);
                None
            }
        }
    }
}

/// The plan as it grows, manifest by manifest.
#[derive(Default)]
struct Builder<'a> {
    m: Manifests,
    paths: PathTable,
    meta: PackedText,
    lines: Vec<u32>,
    spans: Vec<Span>,
    heads: Heads,
    /// Segments of recordings read whole ([`spill`]).
    pending: spill::Pending,
    first: Option<FirstSeconds>,
    members: Option<&'a dyn Members>,
    reject: Option<&'a dyn Fn(LineRejection)>,
}

impl Builder<'_> {
    /// The lines `keep` (0-based) of manifest `file`, split `split`, read
    /// within `limits`. A cut whose `id` an earlier line of the manifest
    /// has is rejected, naming that line. The file as it was opened.
    fn manifest(
        &mut self,
        split: u32,
        file: &Path,
        keep: Range<usize>,
        limits: Limits,
    ) -> Result<Option<Stamp>, Error> {
        let dir = file.parent().unwrap_or(Path::new("")).to_path_buf();
        let mut seq = 0u32;
        let mut ids = CutIds::default();
        let mut lines = Lines::open(file, limits)?;
        while let Some((line_no, line)) = lines.next_line()? {
            let i = (line_no - 1) as usize;
            if i < keep.start {
                continue;
            }
            if i >= keep.end {
                break;
            }
            let parsed = match line {
                Line::Text(text) if text.trim().is_empty() => continue,
                Line::Text(text) => parse_line(text),
                Line::TooLong { bytes } => Err((
                    None,
                    format!(
                        "the line is {bytes} bytes, over the limit of {} \
                         (input.manifest_max_line_kib = {}); it was skipped unread to its end",
                        limits.max_line_bytes,
                        limits.max_line_bytes >> 10
                    ),
                )),
                Line::NotUtf8 { at } => Err((
                    None,
                    format!("the line is not UTF-8 (from byte {at}); expected UTF-8 JSON"),
                )),
            };
            let parsed = parsed.and_then(|item| match &item.cut_id {
                Some(id) => match ids.first(id, line_no) {
                    Some(first) => Err((
                        Some(item.audio.clone()),
                        format!(
                            "the cut id `{id}` is already line {first}'s; cut ids are unique \
                             in a manifest, so this line is left out"
                        ),
                    )),
                    None => Ok(item),
                },
                None => Ok(item),
            });
            let parsed = parsed.and_then(|item| self.member(item));
            let span = lines.span();
            match parsed {
                Ok((item, member)) => {
                    self.item(item, member, &dir, (split, seq, line_no), span)
                        .ok_or_else(|| Error::TooMuchText {
                            path: file.to_path_buf(),
                            line: line_no,
                        })?;
                    seq += 1;
                }
                Err((audio, reason)) => self.left_out(LineRejection {
                    split,
                    line: line_no,
                    path: audio.unwrap_or_else(|| file.display().to_string()),
                    kind: RejectKind::BadLine,
                    reason,
                }),
            }
        }
        Ok(lines.stamp())
    }

    /// A line left out: to [`Options::reject`], else kept.
    fn left_out(&mut self, r: LineRejection) {
        self.m.left_out += 1;
        match self.reject {
            Some(reject) => reject(r),
            None => self.m.rejected.push(r),
        }
    }

    /// The archive member a line's audio path names, when the manifest's
    /// audio is in archives ([`Members`]; its `shard_id` says which).
    fn member(&self, item: Item) -> Result<(Item, Option<Member>), parse::Bad> {
        let Some(m) = self.members else {
            return Ok((item, None));
        };
        let shard_id = item.meta.get("shard_id").and_then(Value::as_u64);
        match m.find_member(&item.audio, shard_id) {
            Ok(found) => Ok((item, Some(found))),
            Err(why) => Err((Some(item.audio.clone()), why)),
        }
    }

    /// A usable line: its job (the `seq`-th of its split), metadata, line,
    /// segment and byte range. None (nothing added) when the paths or the
    /// metadata would pass the 4 GiB a [`PathTable`] holds.
    fn item(
        &mut self,
        item: Item,
        member: Option<Member>,
        dir: &Path,
        (split, seq, line_no): (u32, u32, u64),
        span: Span,
    ) -> Option<()> {
        let meta = Value::Object(item.meta).to_string();
        if !self.paths.fits(&item.audio) || !self.meta.fits(&meta) {
            return None;
        }
        self.spans.push(span);
        if let Some((open, start, len)) = member {
            // An archive member: its segment's part of it where its
            // container gives one, else the member whole, the segment cut
            // by the decoder.
            let window = Window::member(&open, start, len);
            let ranged = item
                .segment
                .filter(|s| s.expect_s.is_none())
                .and_then(|s| self.heads.range(&window, &s));
            let (range, segment) = match ranged {
                Some((r, s)) => (Some(r), Some(s)),
                None => (window.whole(), item.segment),
            };
            let path = self.paths.push(&item.audio);
            self.meta.push(&meta);
            self.lines.push(u32::try_from(line_no).unwrap_or(u32::MAX));
            self.m
                .push_job((path, split, seq), Some(open), segment, range);
            return Some(());
        }
        let open = dir.join(&item.audio);
        let window = Window::file(&open);
        let ranged = match item.segment {
            Some(s) => Some(s)
                .filter(|s| s.expect_s.is_none())
                .and_then(|s| self.heads.range(&window, &s)),
            None => self.first_seconds(&open),
        };
        let (range, segment) = match ranged {
            Some((r, s)) => (Some(r), Some(s)),
            None => (None, item.segment),
        };
        let path = self.paths.push(&item.audio);
        // A compressed recording's segment without a part: the recording
        // has no index, or the index gives this segment none (an M4A past
        // its first access unit coding noise). Its container was read for
        // the segment already.
        if range.is_none() && segment.is_some_and(|s| s.expect_s.is_none()) {
            let compressed = self
                .heads
                .get(&window)
                .is_some_and(|c| c.decodes_from_start());
            if compressed {
                self.pending.push(&open, path);
            }
        }
        self.meta.push(&meta);
        self.lines.push(u32::try_from(line_no).unwrap_or(u32::MAX));
        // The plan opens it as its split's folder joined with the path.
        self.m.push_job((path, split, seq), None, segment, range);
        Some(())
    }
}

impl Builder<'_> {
    /// The range of the first seconds of the whole-file item at `open`,
    /// when [`FirstSeconds`] applies to it.
    fn first_seconds(&mut self, open: &Path) -> Option<(ReadRange, Segment)> {
        let first = self.first?;
        if std::fs::metadata(open).ok()?.len() <= first.over_bytes {
            return None;
        }
        let seg = Segment {
            offset_s: 0.0,
            duration_s: Some(first.seconds),
            ..Segment::default()
        };
        let window = Window::file(open);
        let ranged = self.heads.range(&window, &seg)?;
        let c = self.heads.get(&window)?;
        // A compressed part is not the whole decode's start, bit for bit.
        if c.decodes_from_start() {
            return None;
        }
        (c.sample_rate()? == first.rate_hz).then_some(ranged)
    }
}

/// Fuzz entry point (`crate::fuzzing`): `data` as a whole manifest file,
/// gzipped or not, read line by line within small limits (64 KiB lines,
/// 100,000 lines: a bomb stops there) and parsed as [`plan`] parses each
/// line, no audio opened. Every line is an item or a rejection with a
/// reason, in line order; an item names its audio and a segment within the
/// bounds the parser sets.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub fn fuzz_manifest(data: &[u8]) {
    let limits = Limits {
        max_line_bytes: 64 << 10,
        max_lines: 100_000,
    };
    let cursor = std::io::Cursor::new(data.to_vec());
    let Ok(mut lines) = Lines::from_reader(cursor, Path::new("fuzz.jsonl"), limits) else {
        return;
    };
    let mut last = 0;
    while let Ok(Some((no, line))) = lines.next_line() {
        assert!(no > last, "line {no} after line {last}");
        last = no;
        let Line::Text(text) = line else {
            continue;
        };
        if text.trim().is_empty() {
            continue;
        }
        match parse_line(text) {
            Ok(item) => {
                assert!(!item.audio.is_empty(), "an item without its audio");
                if let Some(s) = item.segment {
                    assert!(s.offset_s.is_finite() && s.offset_s >= 0.0, "{s:?}");
                    assert!(s.offset_s <= MAX_TIME_S, "{s:?}");
                    for d in [s.duration_s, s.expect_s].into_iter().flatten() {
                        assert!(d.is_finite() && d > 0.0 && d <= MAX_TIME_S, "{s:?}");
                    }
                    let _ = s.frames(48_000);
                }
            }
            Err((_, reason)) => assert!(!reason.is_empty(), "a rejection without a reason"),
        }
    }
}

#[cfg(test)]
mod tests;
