//! The MP4/M4A box walk symphonia's demuxer does not expose: the top-level
//! boxes checked against the file's length (a file cut short is
//! [`Error::Truncated`]), the first sound track found in `moov` with its
//! sample entry (anything but `mp4a` is [`Error::Unsupported`] naming the
//! codec; no sound track names what the tracks hold), its media timescale
//! and duration (`mdhd`), and the media time of its edit list (`elst`): the
//! samples ffmpeg drops at the start, the encoder's priming (1,024 for AAC
//! encoded by ffmpeg). The stream's length is the track's duration less that
//! media time. [`table`] reads the sample table for segments, and
//! [`sections`] whether an access unit codes bands as perceptual noise.

mod sections;
mod table;

pub(super) use sections::{Verdict, mono_unit};
pub(super) use table::{Read, Table, asc_channels, table};

use super::Error;
use crate::wav::ByteStr;

pub(super) const F: &str = "MP4";

/// What the walk found for the sound track.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Track {
    /// `mdhd` timescale (ticks per second).
    timescale: u32,
    /// `mdhd` duration in ticks (0 when unknown, e.g. fragmented files).
    duration: u64,
    /// The first edit's media time in ticks (0 without an edit list).
    media_time: u64,
}

impl Track {
    /// Samples to drop at the start, and the stream's length after that
    /// (`None` when the file does not say), at `rate` Hz.
    pub(super) fn trim(self, rate: u32) -> (u64, Option<u64>) {
        let ticks = |t: u64| {
            if self.timescale == rate || self.timescale == 0 {
                t
            } else {
                (u128::from(t) * u128::from(rate) / u128::from(self.timescale)) as u64
            }
        };
        let skip = ticks(self.media_time);
        let len = (self.duration > 0).then(|| ticks(self.duration).saturating_sub(skip));
        (skip, len)
    }
}

/// The file starts with an ISO base media `ftyp` box.
pub(super) fn is_mp4(bytes: &[u8]) -> bool {
    bytes.get(4..8) == Some(b"ftyp")
}

/// One box: its type and its body's range in the buffer.
#[derive(Clone, Copy)]
pub(super) struct Box4<'a> {
    pub(super) kind: [u8; 4],
    pub(super) body: &'a [u8],
    pub(super) at: usize,
}

/// What the boxes a walk reads are inside, which decides how a box that
/// does not fit is told.
#[derive(Clone, Copy)]
pub(super) enum Within<'a> {
    /// A level of the file itself: a box past its end is a file cut short.
    File,
    /// A parent box, itself checked against the file first: a child past
    /// the parent's end is malformed.
    Parent(&'a Box4<'a>),
}

impl Within<'_> {
    /// The error for the box at `at` (type `kind` where known), which
    /// does not fit the `left` bytes that follow it (`size`: what it
    /// declares; None when its header itself does not fit).
    fn misfit(self, at: usize, kind: Option<&[u8; 4]>, size: Option<usize>, left: usize) -> Error {
        let what = match kind {
            Some(k) => format!("box {}", ByteStr(k)),
            None => "the box".to_string(),
        };
        match (self, size) {
            (Within::File, None) => Error::truncated(
                F,
                format!("the file ends inside the header of {what} at byte {at}"),
            ),
            (Within::File, Some(size)) => Error::truncated(
                F,
                format!(
                    "{what} at byte {at} declares {size} bytes, {left} follow (the file is cut \
                     short)"
                ),
            ),
            (Within::Parent(p), None) => Error::malformed(
                F,
                format!(
                    "the header of {what} at byte {at} is cut short: {left} bytes left, its \
                     parent {} holds {} bytes from byte {}",
                    ByteStr(&p.kind),
                    p.body.len(),
                    p.at
                ),
            ),
            (Within::Parent(p), Some(size)) => Error::malformed(
                F,
                format!(
                    "{what} at byte {at} declares {size} bytes, more than the {left} bytes left \
                     in its parent {} ({} bytes from byte {})",
                    ByteStr(&p.kind),
                    p.body.len(),
                    p.at
                ),
            ),
        }
    }
}

/// The boxes inside `data` (which starts at file offset `base`), each
/// checked to end inside it: the one walker of MP4 boxes, for the file's
/// levels (`boxes`) and for the children symphonia reads
/// (`mp4_tables::children`); `within` words a box that does not fit.
pub(super) fn walk<'a>(
    data: &'a [u8],
    base: usize,
    within: Within<'_>,
) -> Result<Vec<Box4<'a>>, Error> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < data.len() {
        let at = base + pos;
        let left = data.len() - pos;
        let Some(h) = data.get(pos..pos + 8) else {
            return Err(within.misfit(at, None, None, left));
        };
        let kind = [h[4], h[5], h[6], h[7]];
        let (size, header) = match u32::from_be_bytes([h[0], h[1], h[2], h[3]]) {
            0 => (left, 8),
            1 => {
                let Some(l) = data.get(pos + 8..pos + 16) else {
                    return Err(within.misfit(at, Some(&kind), None, left));
                };
                let l = u64::from_be_bytes(l.try_into().unwrap_or_default());
                (usize::try_from(l).unwrap_or(usize::MAX), 16)
            }
            s => (s as usize, 8),
        };
        if size < header {
            return Err(Error::malformed(
                F,
                format!("box {} at byte {at} declares {size} bytes", ByteStr(&kind)),
            ));
        }
        if size > left {
            return Err(within.misfit(at, Some(&kind), Some(size), left));
        }
        out.push(Box4 {
            kind,
            body: &data[pos + header..pos + size],
            at: at + header,
        });
        pos += size;
        debug_assert!(pos <= data.len());
    }
    Ok(out)
}

/// The boxes inside `data` (which starts at file offset `base`), each
/// checked to end inside it; one that does not is a file cut short.
pub(super) fn boxes(data: &[u8], base: usize) -> Result<Vec<Box4<'_>>, Error> {
    walk(data, base, Within::File)
}

/// The first box of `kind` among `data`'s children.
fn child<'a>(parent: &Box4<'a>, kind: &[u8; 4]) -> Result<Option<Box4<'a>>, Error> {
    Ok(boxes(parent.body, parent.at)?
        .into_iter()
        .find(|b| &b.kind == kind))
}

/// A box reached through `path` from `root`, if every step exists.
fn find<'a>(root: &Box4<'a>, path: &[&[u8; 4]]) -> Result<Option<Box4<'a>>, Error> {
    let mut cur = Box4 {
        kind: root.kind,
        body: root.body,
        at: root.at,
    };
    for kind in path {
        match child(&cur, kind)? {
            Some(b) => cur = b,
            None => return Ok(None),
        }
    }
    Ok(Some(cur))
}

pub(super) fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The sound track of an MP4 file, checked to hold AAC (`mp4a`).
pub(super) fn audio_track(bytes: &[u8]) -> Result<Track, Error> {
    let top = boxes(bytes, 0)?;
    let Some(moov) = top.iter().find(|b| &b.kind == b"moov") else {
        return Err(Error::malformed(
            F,
            "no moov box (the file holds no track descriptions)",
        ));
    };
    sound(moov).map(|(_, t)| t)
}

/// The first sound track of `moov` (checked to hold AAC) and its timing.
fn sound<'a>(moov: &Box4<'a>) -> Result<(Box4<'a>, Track), Error> {
    let mut others = Vec::new();
    for trak in boxes(moov.body, moov.at)?
        .into_iter()
        .filter(|b| &b.kind == b"trak")
    {
        let handler = find(&trak, &[b"mdia", b"hdlr"])?
            .and_then(|h| h.body.get(8..12).map(|t| [t[0], t[1], t[2], t[3]]));
        let entry = find(&trak, &[b"mdia", b"minf", b"stbl", b"stsd"])?
            .and_then(|s| s.body.get(12..16).map(|t| [t[0], t[1], t[2], t[3]]));
        if handler != Some(*b"soun") {
            others.push(describe(handler, entry));
            continue;
        }
        match entry {
            Some(e) if &e == b"mp4a" => return Ok((trak, sound_track(&trak)?)),
            e => {
                return Err(Error::Unsupported {
                    format: F,
                    what: format!("a sound track in {}", codec_name(e)),
                    expected: "AAC-LC (mp4a)",
                });
            }
        }
    }
    let what = if others.is_empty() {
        "no tracks".to_owned()
    } else {
        format!("no sound track (tracks: {})", others.join(", "))
    };
    Err(Error::Unsupported {
        format: F,
        what,
        expected: "an AAC-LC sound track",
    })
}

/// Timescale, duration and edit-list media time of a sound `trak`.
fn sound_track(trak: &Box4<'_>) -> Result<Track, Error> {
    let mdhd = find(trak, &[b"mdia", b"mdhd"])?
        .ok_or_else(|| Error::malformed(F, "the sound track has no mdhd box"))?;
    let b = mdhd.body;
    let parsed = match b.first() {
        Some(1) => be32(b, 20).zip(be64(b, 24)),
        Some(0) => be32(b, 12).zip(be32(b, 16).map(u64::from)),
        _ => None,
    };
    let (timescale, duration) =
        parsed.ok_or_else(|| Error::malformed(F, "the sound track's mdhd box is cut short"))?;
    let duration = if duration == u64::from(u32::MAX) || duration == u64::MAX {
        0 // "unknown"
    } else {
        duration
    };
    let media_time = match find(trak, &[b"edts", b"elst"])? {
        Some(elst) => first_media_time(elst.body)?,
        None => 0,
    };
    Ok(Track {
        timescale,
        duration,
        media_time,
    })
}

/// The media time of the first edit that is not an empty one (`-1`).
fn first_media_time(b: &[u8]) -> Result<u64, Error> {
    let bad = || Error::malformed(F, "the sound track's elst box is cut short");
    let version = *b.first().ok_or_else(bad)?;
    let count = be32(b, 4).ok_or_else(bad)? as usize;
    let (entry, time_at, wide) = if version == 1 {
        (20, 8, true)
    } else {
        (12, 4, false)
    };
    for i in 0..count {
        let at = 8 + i * entry + time_at;
        let t = if wide {
            be64(b, at).ok_or_else(bad)? as i64
        } else {
            i64::from(be32(b, at).ok_or_else(bad)? as i32)
        };
        if t >= 0 {
            return Ok(t as u64);
        }
    }
    Ok(0)
}

/// A track in words: its handler and sample entry.
fn describe(handler: Option<[u8; 4]>, entry: Option<[u8; 4]>) -> String {
    let kind = match handler.as_ref() {
        Some(b"vide") => "video",
        Some(b"soun") => "sound",
        Some(b"text" | b"sbtl" | b"subt") => "text",
        Some(b"hint") => "hint",
        Some(b"meta") => "metadata",
        _ => "other",
    };
    format!("{kind} in {}", codec_name(entry))
}

/// A sample entry's codec in words.
fn codec_name(entry: Option<[u8; 4]>) -> String {
    let Some(e) = entry else {
        return "no sample description".to_owned();
    };
    let name = match &e {
        b"alac" => "ALAC",
        b"Opus" => "Opus",
        b"fLaC" => "FLAC",
        b"ac-3" => "AC-3",
        b"ec-3" => "E-AC-3",
        b".mp3" => "MP3",
        b"samr" | b"sawb" => "AMR",
        b"lpcm" | b"sowt" | b"twos" => "PCM",
        b"avc1" | b"avc3" => "H.264",
        b"hvc1" | b"hev1" => "H.265",
        b"av01" => "AV1",
        b"vp09" => "VP9",
        b"mp4v" => "MPEG-4 video",
        _ => "",
    };
    if name.is_empty() {
        format!("codec {}", ByteStr(&e))
    } else {
        format!("{name} ({})", ByteStr(&e))
    }
}
