//! Where a segment of an MP3, Ogg (Vorbis, Opus) or MP4 (AAC) recording
//! lies in its file, planned once per recording without decoding it, so
//! that each segment reads and decodes only its part ([`super::part`]).
//!
//! * MP3 has no timestamps: the frame headers are hopped over once (4 bytes
//!   read per frame, [`Index::bytes_read`]), which gives every audio frame's
//!   offset; frame `k` decodes to samples `k · spf …` before the encoder
//!   delay (the LAME tag's, read from the first frame by [`super::mp3::tag`]
//!   as the whole-file decode reads it) is cut.
//!   A part starts at least 4 frames and 1,536 bytes before the segment's
//!   frame: the bit reservoir (≤ 511 bytes of earlier frames) of the frames
//!   whose overlap and synthesis state reach the segment is then complete.
//! * Ogg: the page headers are hopped over (27 + 255 bytes read per page),
//!   which gives each page's offset and granule position. A part is the
//!   header pages (the codec setup, read here once) and the pages from one
//!   that starts a packet and whose preceding granule lies a pre-roll before
//!   the segment (Vorbis: half the long block, the overlap the part's first
//!   packet only primes; Opus: 5 s — RFC 7845 §4.6 asks for at least 80 ms,
//!   after which libopus restarted is close to the decoder that ran from
//!   the start but, on near-silent frames, still 0.8 off on log fbank; 1 s
//!   left 0.08 in scripts/parity_manifest.py, 5 s 1.2e-3) to the first page
//!   whose granule reaches the segment's end.
//! * MP4: the `moov` box alone is read (the top-level box headers hopped
//!   over to find it, at the file's start or end) for the sound track's
//!   sample table ([`super::mp4::table`]): each access unit's offset, size
//!   and first sample. A part is the access units from two before the one
//!   holding the segment's first sample (the first decoded only primes the
//!   MDCT overlap; one is enough on the tests' files) through the one
//!   holding its last, read as the one span of the file that covers them
//!   (where another track's samples are interleaved, they are read too and
//!   skipped), behind a header that carries the AudioSpecificConfig and
//!   each unit's place in the span. The whole-file decode's origin and
//!   length are the edit list's media time and the track's duration. Bit
//!   for bit the whole decode's, except in bands coded as perceptual noise
//!   (PNS): the decoder fills them from a generator whose state depends on
//!   every band drawn since the stream's start. So the index also reads
//!   the start of every access unit of a mono track, in reads of up to 1
//!   MiB ([`super::mp4::mono_unit`]: its section codebooks), up to the
//!   first that may draw noise (any unit of a stereo track may: its second
//!   channel's sections lie past the first's spectrum). Before that unit
//!   the generator is untouched, in the whole decode and in a part's fresh
//!   decoder alike, and from the part's first unit on both draw the same:
//!   a part is planned only where it starts at or before that unit; a
//!   later segment gets no extent and is read whole. On a track without
//!   noise bands (ffmpeg's `aac -aac_pns 0`) that is every segment.
//!
//! Anything unexpected (a junk byte between frames, a last frame or page cut
//! short, no end-of-stream page, free-format MP3, a Vorbis stream that
//! starts at a granule past 0) gives no index: the recording is read whole
//! and the whole-file decoder names what is wrong, if anything.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::frames::{Mp3Frame, OggPage, Packets, is_trailing_tag};
use crate::segment::{LossyPart, Segment};

/// Access units an AAC part starts before the one holding its segment:
/// the first one decoded only primes the MDCT overlap (measured on the
/// tests' files: none before gives 0.55 off, one already the whole decode's
/// samples; two for margin).
const AAC_PREROLL: usize = 2;

/// Granules (48 kHz) an Opus part starts before its segment.
const OPUS_PREROLL: u64 = 5 * 48_000;

/// The bytes of one segment: `prefix` (the codec setup, possibly empty)
/// then the file's `len` bytes from `start`.
#[derive(Clone, Debug)]
pub struct Extent {
    pub prefix: Arc<[u8]>,
    pub start: u64,
    pub len: u64,
    pub part: LossyPart,
}

/// One recording's seek index.
#[derive(Debug)]
pub struct Index {
    kind: Kind,
    /// Output samples per second.
    sample_rate: u32,
    origin: u64,
    length: Option<u64>,
    bytes_read: u64,
}

#[derive(Debug)]
enum Kind {
    Mp3 {
        /// Offsets of the audio frames, then the end of the last.
        offsets: Vec<u64>,
        spf: u64,
        /// The part may not reach the last frame (no tag says where the
        /// stream ends; symphonia estimates it).
        open_end: bool,
    },
    Ogg {
        prefix: Arc<[u8]>,
        pages: Vec<Page>,
        /// Granules per output sample (Opus below 48 kHz).
        factor: u64,
        /// Granules of pre-roll before the segment.
        preroll: u64,
        /// Opus: the granule of the first packet (each packet's start is
        /// then the granule before its page). Vorbis: `None` (a part's
        /// first packet only primes the decoder; the granules place it).
        opus_start: Option<u64>,
    },
    Aac {
        table: super::mp4::Table,
        /// [`super::part`]'s header of every AAC part: the rate, channels
        /// and AudioSpecificConfig.
        setup: Vec<u8>,
        /// The first access unit that may draw from the decoder's noise
        /// generator (the count of units when none does): a part must not
        /// start past it.
        first_noise: usize,
    },
}

#[derive(Clone, Copy, Debug)]
struct Page {
    offset: u64,
    len: u32,
    continued: bool,
    /// The page's granule (u64::MAX: no packet ends on it).
    granule: u64,
    /// The last granule position before this page (0 for the first).
    before: u64,
}

impl Index {
    /// The index of the file `f` (`len` bytes, starting with `head`), or
    /// `None` (with the bytes read trying) when it is neither an MP3 nor an
    /// Ogg Vorbis/Opus stream that can be placed, nor an MP4 AAC track.
    pub fn build(f: &File, len: u64, head: &[u8]) -> (Option<Index>, u64) {
        let mut read = |at: u64, n: usize| -> Option<Vec<u8>> {
            let mut buf = vec![0u8; n.min(usize::try_from(len.saturating_sub(at)).ok()?)];
            f.read_exact_at(&mut buf, at).ok()?;
            Some(buf)
        };
        Index::build_from(len, head, &mut read)
    }

    /// [`Index::build`] over `file_read` (`(at, n)`: the file's `n` bytes
    /// at `at`, fewer at its end), so that it also runs over bytes in
    /// memory (the fuzz targets, `super::fuzzing`).
    pub fn build_from(len: u64, head: &[u8], file_read: &mut Read<'_>) -> (Option<Index>, u64) {
        let mut bytes = 0u64;
        let mut read = |at: u64, n: usize| -> Option<Vec<u8>> {
            let buf = file_read(at, n)?;
            bytes += buf.len() as u64;
            Some(buf)
        };
        let index = match super::sniff(head) {
            Some(super::Codec::Mp3) => mp3(head, len, &mut read),
            Some(super::Codec::Vorbis | super::Codec::Opus) => ogg(head, len, &mut read),
            Some(super::Codec::Aac) => aac_index(len, &mut read),
            _ => None,
        };
        (
            index.map(|i| Index {
                bytes_read: bytes,
                ..i
            }),
            bytes,
        )
    }

    /// Samples per second of the decoded stream.
    pub fn sample_rate(&self) -> u32 {
        self.sample_rate
    }

    /// The whole-file decode's length in samples, where the stream says
    /// (LAME tag, last granule position, MP4 track duration).
    pub fn length(&self) -> Option<u64> {
        self.length
    }

    /// Bytes read to build it.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// The bytes `seg` needs, or `None` when it starts past the stream's
    /// end (the whole-file decoder then says so) or, in an AAC track, its
    /// part would start past the first access unit that may draw noise
    /// (the segment is then read whole and decoded from the start).
    pub fn extent(&self, seg: &Segment) -> Option<Extent> {
        self.plan(seg, false)
    }

    /// [`Self::extent`] without the AAC noise rule (whose parts may then
    /// differ from the whole decode in noise bands).
    #[cfg(test)]
    pub(super) fn planned(&self, seg: &Segment) -> Option<Extent> {
        self.plan(seg, true)
    }

    fn plan(&self, seg: &Segment, any: bool) -> Option<Extent> {
        let (s, count) = seg.frames(self.sample_rate);
        if self.length.is_some_and(|n| s >= n) {
            return None;
        }
        let part = LossyPart {
            origin: self.origin,
            first: None,
            length: self.length,
        };
        match &self.kind {
            Kind::Mp3 {
                offsets,
                spf,
                open_end,
            } => mp3_extent(offsets, *spf, *open_end, self.origin + s, count, part),
            Kind::Aac {
                table,
                setup,
                first_noise,
            } => {
                let (e, k0) = aac_extent(table, setup, s, count, part);
                (any || k0 <= *first_noise).then_some(e)
            }
            Kind::Ogg {
                prefix,
                pages,
                factor,
                preroll,
                opus_start,
            } => {
                let at = self.origin + s * factor;
                // Pages whose preceding granule is a pre-roll before `at`.
                let n = pages.partition_point(|p| p.before.saturating_add(*preroll) <= at);
                // Not the last page alone: its granule may be short of its
                // samples (the end trim), no place to count back from.
                let n = n.min(pages.len() - 1);
                let q = (0..n.max(1))
                    .rev()
                    .find(|&i| !pages[i].continued || i == 0)?;
                let e = match count {
                    Some(c) => {
                        let end = self.origin + (s + c) * factor;
                        (q..pages.len())
                            .find(|&i| pages[i].granule != u64::MAX && pages[i].granule >= end)
                            .unwrap_or(pages.len() - 1)
                    }
                    None => pages.len() - 1,
                };
                let (first, last) = (pages[q], pages[e]);
                if opus_start.is_none() && pages.len() == 1 {
                    return None; // a Vorbis stream of one page: read whole
                }
                let at = opus_start.map(|s| if q == 0 { s } else { first.before });
                Some(Extent {
                    prefix: Arc::clone(prefix),
                    start: first.offset,
                    len: last.offset + u64::from(last.len) - first.offset,
                    part: LossyPart { first: at, ..part },
                })
            }
        }
    }
}

use super::mp4::Read;

/// The MP3 frames from at least 4 frames and 1,536 bytes before the one
/// holding raw sample `raw` (the bit reservoir's reach) through the one
/// holding the segment's last sample; `None` where that is the last frame
/// of a stream whose end no tag states.
fn mp3_extent(
    offsets: &[u64],
    spf: u64,
    open_end: bool,
    raw: u64,
    count: Option<u64>,
    part: LossyPart,
) -> Option<Extent> {
    let frames = offsets.len() - 1;
    let ks = usize::try_from(raw / spf).ok().filter(|&k| k < frames)?;
    let mut k0 = ks;
    while k0 > 0 && (ks - k0 < 4 || offsets[ks] - offsets[k0] < 1536) {
        k0 -= 1;
    }
    let ke = match count {
        Some(n) => ((raw + n.max(1) - 1) / spf).min(frames as u64 - 1) as usize,
        None => frames - 1,
    };
    if open_end && ke + 1 == frames {
        return None;
    }
    Some(Extent {
        prefix: Arc::from(&[][..]),
        start: offsets[k0],
        len: offsets[ke + 1] - offsets[k0],
        part: LossyPart {
            first: Some(k0 as u64 * spf),
            ..part
        },
    })
}

/// The access units of an MP4 AAC track, from its sample table.
fn aac_index(len: u64, read: &mut Read<'_>) -> Option<Index> {
    let table = super::mp4::table(read, len)?;
    let (origin, length) = table.track.trim(table.rate);
    length?; // a track of unknown duration: read whole
    let setup = super::part::aac_setup(table.rate, table.channels, &table.asc)?;
    let first_noise = first_noise(&table, read);
    Some(Index {
        sample_rate: table.rate,
        origin,
        length,
        bytes_read: 0,
        kind: Kind::Aac {
            table,
            setup,
            first_noise,
        },
    })
}

/// The first access unit of `t` that may draw from the AAC decoder's noise
/// generator: one that codes a band as noise, or that the section reading
/// cannot follow (0 for a track of more than one channel), or one that
/// cannot be read. The units' first [`UNIT_HEAD`] bytes are read in spans
/// of up to [`SPAN`] bytes (the units of an audio-only file are adjacent,
/// so that is the file once, and only up to that unit); a unit whose
/// sections run past its head is read whole.
fn first_noise(t: &super::mp4::Table, read: &mut Read<'_>) -> usize {
    use super::mp4::{Verdict, mono_unit};
    const UNIT_HEAD: u64 = 256;
    const SPAN: u64 = 1 << 20;
    if t.channels != 1 {
        return 0;
    }
    let n = t.sizes.len();
    let head = |k: usize| u64::from(t.sizes[k]).min(UNIT_HEAD);
    let mut k = 0;
    while k < n {
        let start = t.offsets[k];
        let mut end = start + head(k);
        let mut j = k + 1;
        while j < n && t.offsets[j] >= start && t.offsets[j] + head(j) - start <= SPAN {
            end = end.max(t.offsets[j] + head(j));
            j += 1;
        }
        let Some(span) = usize::try_from(end - start)
            .ok()
            .and_then(|l| read(start, l))
        else {
            return k;
        };
        for i in k..j {
            let at = (t.offsets[i] - start) as usize;
            let unit = span.get(at..at + head(i) as usize);
            let mut verdict = unit.map_or(Verdict::Short, mono_unit);
            if verdict == Verdict::Short && head(i) < u64::from(t.sizes[i]) {
                let whole = read(t.offsets[i], t.sizes[i] as usize);
                verdict = whole.as_deref().map_or(Verdict::Short, mono_unit);
            }
            if verdict != Verdict::Clean {
                return i;
            }
        }
        k = j;
    }
    n
}

/// The access units from [`AAC_PREROLL`] before the one holding the
/// segment's first sample through the one holding its last: the file's
/// span that covers them (all of it, where another track's samples lie
/// between them), and the header [`super::part`] reads them by; and the
/// first of those units.
fn aac_extent(
    t: &super::mp4::Table,
    setup: &[u8],
    s: u64,
    count: Option<u64>,
    part: LossyPart,
) -> (Extent, usize) {
    let n = t.sizes.len();
    let unit = |at: u64| (t.starts.partition_point(|&v| v <= at).max(1) - 1).min(n - 1);
    let raw = part.origin + s;
    let k0 = unit(raw).saturating_sub(AAC_PREROLL);
    let ke = match count {
        Some(c) => unit(raw + c.max(1) - 1),
        None => n - 1,
    };
    let units = k0..=ke;
    let start = units.clone().map(|k| t.offsets[k]).min().unwrap_or(0);
    let end = units
        .clone()
        .map(|k| t.offsets[k] + u64::from(t.sizes[k]))
        .max()
        .unwrap_or(start);
    let mut prefix = setup.to_vec();
    prefix.extend_from_slice(&((ke + 1 - k0) as u32).to_be_bytes());
    for k in units {
        prefix.extend_from_slice(&(t.offsets[k] - start).to_be_bytes());
        prefix.extend_from_slice(&t.sizes[k].to_be_bytes());
    }
    let e = Extent {
        prefix: prefix.into(),
        start,
        len: end - start,
        part: LossyPart {
            first: Some(t.starts[k0]),
            ..part
        },
    };
    (e, k0)
}

/// The audio frames of an MP3 file, hopping from header to header.
fn mp3(head: &[u8], len: u64, read: &mut Read<'_>) -> Option<Index> {
    let id3 = super::mp3::id3v2_len(head) as u64;
    // The first frame follows the ID3v2 tag (which may hold a picture).
    let first = Mp3Frame::parse(&read(id3, 4)?)?;
    let frame0 = read(id3, first.size)?;
    // The whole-file decode's own reading of the Xing/Info/LAME tag, so
    // that the delay and length are the same.
    let tag = super::mp3::tag(&frame0);
    let (origin, length) = tag.map_or((0, None), |g| (g.origin, g.length));
    let tag = tag.is_some();
    let mut offsets = Vec::new();
    let mut pos = id3 + if tag { first.size as u64 } else { 0 };
    while pos < len {
        let h = read(pos, 4)?;
        match Mp3Frame::parse(&h) {
            Some(fr) if fr.kind == first.kind && pos + fr.size as u64 <= len => {
                offsets.push(pos);
                pos += fr.size as u64;
            }
            Some(_) => return None,
            None if is_trailing_tag(&read(pos, 8)?) => break,
            None => return None,
        }
    }
    if offsets.is_empty() {
        return None;
    }
    offsets.push(pos);
    Some(Index {
        kind: Kind::Mp3 {
            offsets,
            spf: u64::from(first.samples),
            open_end: !tag,
        },
        sample_rate: first.sample_rate,
        origin,
        length: length.filter(|_| tag),
        bytes_read: 0,
    })
}

/// The pages of the first logical stream of an Ogg file.
fn ogg(head: &[u8], len: u64, read: &mut Read<'_>) -> Option<Index> {
    let serial = OggPage::parse(head)?.serial;
    let mut pos = 0u64;
    let mut pages = Vec::new();
    let mut prefix = Vec::new();
    let mut headers = Vec::<Vec<u8>>::new();
    let mut packets = Packets::default();
    let (mut setup, mut ended, mut before) = (false, false, 0u64);
    // Packets completing on the first audio page (Vorbis start check).
    let mut first_packets = 0u64;
    while pos < len {
        let h = read(pos, OggPage::MAX_HEADER)?;
        let page = OggPage::parse(&h).filter(|p| pos + p.len() as u64 <= len)?;
        if page.serial == serial && !setup {
            // A header page: its packets are the codec setup.
            let bytes = read(pos, page.len())?;
            packets.page(&page, &bytes, |p, _| headers.push(p.to_vec()));
            prefix.extend_from_slice(&bytes);
            let need = if headers.first()?.starts_with(b"OpusHead") {
                2
            } else {
                3
            };
            if headers.len() >= need {
                let last = bytes[27..page.header].last().copied().unwrap_or(255);
                if headers.len() > need || last == 255 {
                    return None; // audio shares a header page
                }
                setup = true;
            }
        } else if page.serial == serial {
            if pages.is_empty() {
                first_packets = h[27..page.header].iter().filter(|&&v| v < 255).count() as u64;
            }
            pages.push(Page {
                offset: pos,
                len: u32::try_from(page.len()).ok()?,
                continued: page.continued(),
                granule: page.granule,
                before,
            });
            if page.has_granule() {
                before = page.granule;
            }
            if page.eos() {
                ended = true;
                break;
            }
        }
        pos += page.len() as u64;
    }
    if !ended || pages.is_empty() {
        return None;
    }
    let ident = headers.first()?;
    if !ident.starts_with(b"OpusHead") && !ident.starts_with(b"\x01vorbis") {
        return None; // another codec: the whole-file decoder names it
    }
    let (sample_rate, origin, factor, preroll, length, opus_start) =
        positions(ident, &pages, first_packets, read)?;
    if sample_rate == 0 {
        return None;
    }
    Some(Index {
        kind: Kind::Ogg {
            prefix: prefix.into(),
            pages,
            factor,
            preroll,
            opus_start,
        },
        sample_rate,
        origin,
        length: Some(length),
        bytes_read: 0,
    })
}

/// An Ogg stream's output rate, origin, granules per sample, pre-roll,
/// length and (Opus) first granule, from its identification header and
/// pages.
type Positions = (u32, u64, u64, u64, u64, Option<u64>);

fn positions(
    ident: &[u8],
    pages: &[Page],
    first_packets: u64,
    read: &mut Read<'_>,
) -> Option<Positions> {
    let last = pages.iter().rev().find(|p| p.granule != u64::MAX)?.granule;
    let first = pages[0];
    let mut opus_start = None;
    let (sample_rate, origin, factor, preroll, length) = if ident.starts_with(b"OpusHead") {
        let (rate, factor, preskip) = super::ogg_opus::rates(ident)?;
        let body = read(first.offset, first.len as usize)?;
        let start = first_granule(&body, first.granule, pages.len() == 1)?;
        opus_start = Some(start);
        let origin = if start < preskip {
            start + (preskip - start) / factor * factor
        } else {
            start
        };
        let length = last.saturating_sub(origin) / factor;
        (rate, origin, factor, OPUS_PREROLL, length)
    } else {
        let rate = u32::from_le_bytes(ident.get(12..16)?.try_into().ok()?);
        let long = 1u64 << (ident.get(28)? >> 4);
        // A stream that starts past granule 0: its first page holds fewer
        // samples than its granule says.
        if first.granule != u64::MAX && first.granule > first_packets * long / 2 {
            return None;
        }
        (rate, 0, 1, long / 2, last)
    };
    Some((sample_rate, origin, factor, preroll, length, opus_start))
}

/// The granule an Opus stream starts at (as `ogg_opus` places it): the
/// first audio page's granule less its packets' samples.
fn first_granule(page: &[u8], granule: u64, only: bool) -> Option<u64> {
    let h = OggPage::parse(page)?;
    let mut samples = 0u64;
    Packets::default().page(&h, page, |p, _| {
        samples += opus::packet::get_nb_samples(p, 48_000).unwrap_or(0) as u64;
    });
    if only {
        return Some(0);
    }
    granule.checked_sub(samples)
}
