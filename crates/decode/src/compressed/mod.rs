//! The lossy containers: MP3, Ogg Vorbis, Ogg Opus and MP4/M4A (AAC-LC),
//! from an in-memory byte buffer to mono `f32` at the file's own rate, with a
//! specific [`Error`] for every way a file can be bad.
//!
//! The codec is recognised by content, never by the file name ([`sniff`]):
//! an ID3v2 tag or an MPEG audio layer III frame sync is MP3; `OggS` is Ogg,
//! and the first packet of its first page says which codec (`\x01vorbis`,
//! `OpusHead`; any other is [`Error::Unsupported`] naming it); a `ftyp` box
//! is MP4, whose first sound track must hold AAC (ALAC, Opus, a video-only
//! file… are [`Error::Unsupported`] naming what was found).
//!
//! Sample alignment is the references': soundfile (libsndfile) for MP3,
//! Vorbis and Opus, ffmpeg for MP4 — the encoder delay and padding are
//! removed, as their gapless decoding does:
//! * MP3: [`mp3`], nanomp3's frame decoder (a safe Rust port of minimp3,
//!   faster per core than mpg123, see docs/BENCHMARKS.md) with the LAME
//!   tag's delay + 529 and padding cut as mpg123 cuts them — libsndfile's
//!   length; samples past full scale are kept, as mpg123 keeps them;
//! * Vorbis: symphonia with gapless decoding on (the Ogg granule
//!   positions) — libsndfile's length;
//! * AAC in MP4: symphonia decodes every access unit, and the edit list's
//!   media time (the encoder's 1,024 priming samples, which symphonia keeps)
//!   is cut here as ffmpeg cuts it; the stream then ends at the track's
//!   duration (the sum of its sample durations), so the encoder's padding of
//!   the last access unit is dropped too (ffmpeg 5 keeps it: the parity
//!   script compares the common length, see `scripts/parity_decoders.py`);
//! * Opus: libopus ([`opus`]), with libsndfile's output rate (the Opus rate
//!   at or above the header's input rate), pre-skip and end trimming from the
//!   granule positions, and the header's output gain.
//!
//! A segment of a long recording need not be decoded from the start:
//! [`index`] plans, once per recording and without decoding, the frames,
//! pages or access units from a pre-roll before each segment (MP4: from
//! the `moov` box's sample table alone), and [`open_part`] decodes those
//! (the codec setup, then the packets fed to the decoder directly), placed
//! in the whole-file decode: MP3 and Vorbis bit for bit, Opus as close as
//! libopus restarted 5 s early comes (exact on the tests' files, 1.2e-3 on
//! log fbank in `scripts/parity_manifest.py`), AAC bit for bit except in
//! bands coded as perceptual noise (PNS: the decoder's noise generator has
//! drawn less by then; noise of the same energy, other values), so an AAC
//! part is planned only where no access unit before it codes noise (a mono
//! track's section codebooks, read by [`index`]). Other segments of such a
//! recording are decoded from its start, or served from one decode of the
//! recording that the manifest planner spilled ([`Stream::decode_all`]:
//! every channel kept, interleaved; `plan::manifest::spill`).
//!
//! A stream cut short is [`Error::Truncated`]: an Ogg page or MP4 box that
//! runs past the end of the file, an Ogg stream without its end-of-stream
//! page, an MP3 or MP4 stream that holds fewer samples than its header (Xing
//! frame count, sample table) declares. A damaged packet the decoder refuses
//! is [`Error::Malformed`]. Channels follow [`Mix`] as in
//! [`super::flac`]: `Mean` sums the channels left to right in `f32` and
//! divides by the count (numpy's `mean(axis=0)` on float32), `Channel(c)`
//! keeps channel `c` alone (`first`: channel 0; a lhotse cut's channel). A panic inside a third-party decoder on hostile bytes is one
//! file's rejection, never the worker's end.

mod frames;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod fuzzing;
pub mod index;
mod mp3;
mod mp4;
mod mp4_tables;
mod ogg_opus;
mod part;
mod symph;

use std::fmt;

use super::policy::Mix;
use super::wav::ByteStr;

pub use part::{Part, is_aac_part, open_part};

/// A codec this module decodes, with its container.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Codec {
    Mp3,
    Vorbis,
    Opus,
    Aac,
}

impl Codec {
    /// Every codec, in a stable order.
    pub const ALL: [Codec; 4] = [Codec::Mp3, Codec::Vorbis, Codec::Opus, Codec::Aac];

    /// Lower-case short name (reports, benchmarks).
    pub fn name(self) -> &'static str {
        match self {
            Codec::Mp3 => "mp3",
            Codec::Vorbis => "vorbis",
            Codec::Opus => "opus",
            Codec::Aac => "aac",
        }
    }

    /// The name of the stream in sentences.
    fn stream(self) -> &'static str {
        match self {
            Codec::Mp3 => "MP3",
            Codec::Vorbis => "Ogg Vorbis",
            Codec::Opus => "Ogg Opus",
            Codec::Aac => "MP4 AAC",
        }
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.stream())
    }
}

/// Why a buffer yields no samples. `Display` is a sentence fragment without
/// the path; `format` names the container or stream ("Ogg", "MP3", …).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    #[error("truncated {format} stream: {detail}")]
    Truncated {
        format: &'static str,
        detail: String,
    },
    #[error("malformed {format} stream: {detail}")]
    Malformed {
        format: &'static str,
        detail: String,
    },
    #[error("{format} file holding {what}, which melforge does not decode (expected {expected})")]
    Unsupported {
        format: &'static str,
        what: String,
        expected: &'static str,
    },
    #[error("{format} stream holds no samples")]
    Empty { format: &'static str },
}

impl Error {
    /// The file is well formed but holds something not decoded here.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, Error::Unsupported { .. })
    }

    fn truncated(format: &'static str, detail: impl Into<String>) -> Error {
        Error::Truncated {
            format,
            detail: detail.into(),
        }
    }

    fn malformed(format: &'static str, detail: impl Into<String>) -> Error {
        Error::Malformed {
            format,
            detail: detail.into(),
        }
    }
}

/// What a stream's headers say, before any audio is decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    pub codec: Codec,
    /// The rate samples come out at (for Opus, libsndfile's choice).
    pub sample_rate: u32,
    pub channels: u16,
}

/// Recognises a codec by the first bytes: `None` when they are none of these
/// containers (the caller names what they are not). An Ogg or MP4 file
/// holding another codec is recognised ([`open`] rejects it naming the
/// codec): `Some` means "this module's file".
pub fn sniff(bytes: &[u8]) -> Option<Codec> {
    match bytes.first_chunk::<4>()? {
        b"OggS" => Some(ogg_codec(bytes).unwrap_or(Codec::Vorbis)),
        [b'I', b'D', b'3', _] => Some(Codec::Mp3),
        _ if mp4::is_mp4(bytes) => Some(Codec::Aac),
        _ if is_mp3_sync(bytes) => Some(Codec::Mp3),
        _ => None,
    }
}

/// An MPEG-1/2/2.5 audio layer III frame header at the start.
fn is_mp3_sync(bytes: &[u8]) -> bool {
    let Some(&[a, b, c, _]) = bytes.first_chunk::<4>() else {
        return false;
    };
    let version = (b >> 3) & 3; // 1 is reserved
    let layer = (b >> 1) & 3; // 1 is layer III
    let bitrate = c >> 4; // 15 is invalid
    let rate = (c >> 2) & 3; // 3 is reserved
    a == 0xFF && b & 0xE0 == 0xE0 && version != 1 && layer == 1 && bitrate != 15 && rate != 3
}

/// The codec of an Ogg file's first packet, when it is one decoded here.
fn ogg_codec(bytes: &[u8]) -> Option<Codec> {
    let first = first_ogg_packet(bytes)?;
    if first.starts_with(b"\x01vorbis") {
        Some(Codec::Vorbis)
    } else if first.starts_with(b"OpusHead") {
        Some(Codec::Opus)
    } else {
        None
    }
}

/// The start of the first packet of the first Ogg page (as far as the page
/// holds it), or `None` when the page header is cut short.
fn first_ogg_packet(bytes: &[u8]) -> Option<&[u8]> {
    let nseg = usize::from(*bytes.get(26)?);
    let body = 27 + nseg;
    let table = bytes.get(27..body)?;
    let len: usize = table.iter().map(|&v| usize::from(v)).sum();
    let end = (body + len).min(bytes.len());
    bytes.get(body..end)
}

/// The names of codecs found in Ogg streams that are not decoded here.
fn ogg_other_codec(first: &[u8]) -> String {
    const KNOWN: [(&[u8], &str); 6] = [
        (b"\x7fFLAC", "FLAC"),
        (b"Speex   ", "Speex"),
        (b"\x80theora", "Theora video"),
        (b"OpusTags", "Opus tags without an OpusHead"),
        (b"fishead\0", "an Ogg skeleton before the audio"),
        (b"\x01video", "video"),
    ];
    KNOWN
        .iter()
        .find(|(magic, _)| first.starts_with(magic))
        .map(|(_, name)| (*name).to_owned())
        .unwrap_or_else(|| {
            format!(
                "a codec whose first packet starts with {}",
                ByteStr(&first[..first.len().min(8)])
            )
        })
}

/// An opened stream: headers read and checked, ready to decode.
pub struct Stream {
    head: Head,
    inner: Inner,
}

enum Inner {
    Mp3(Box<mp3::Stream>),
    Symphonia(Box<symph::Stream>),
    Opus(Box<ogg_opus::Stream>),
}

/// Opens the stream in `bytes` (a [`sniff`]ed file): the container is
/// walked, its headers read, the decoder made. Nothing is decoded yet.
pub fn open(bytes: &[u8]) -> Result<Stream, Error> {
    guarded(|| open_unguarded(bytes))
}

fn open_unguarded(bytes: &[u8]) -> Result<Stream, Error> {
    if bytes.starts_with(b"OggS") {
        let last_granule = check_ogg_pages(bytes)?;
        let first = first_ogg_packet(bytes).unwrap_or_default();
        return match ogg_codec(bytes) {
            Some(Codec::Opus) => {
                let (s, head) = ogg_opus::Stream::open(bytes)?;
                Ok(Stream {
                    head,
                    inner: Inner::Opus(Box::new(s)),
                })
            }
            Some(codec) => symphonia(bytes, codec, Some(last_granule)),
            None => Err(Error::Unsupported {
                format: "Ogg",
                what: ogg_other_codec(first),
                expected: "Vorbis or Opus",
            }),
        };
    }
    match sniff(bytes) {
        Some(Codec::Mp3) => {
            let (s, head) = mp3::Stream::open(bytes)?;
            Ok(Stream {
                head,
                inner: Inner::Mp3(Box::new(s)),
            })
        }
        Some(codec) => symphonia(bytes, codec, None),
        None => Err(Error::malformed(
            "audio",
            "neither MP3, Ogg nor MP4 (the caller sniffs first)",
        )),
    }
}

/// `cap`: the most samples the stream holds (an Ogg Vorbis stream's last
/// granule position, which libvorbis ends it at).
fn symphonia(bytes: &[u8], codec: Codec, cap: Option<u64>) -> Result<Stream, Error> {
    let (s, head) = symph::Stream::open(bytes, codec, cap)?;
    Ok(Stream {
        head,
        inner: Inner::Symphonia(Box::new(s)),
    })
}

impl Stream {
    pub fn head(&self) -> Head {
        self.head
    }

    /// Decodes into `out` (cleared first): mono samples at
    /// [`Head::sample_rate`], channels combined by `channels` (a policy or
    /// one channel, [`Mix`]; `reject` is the caller's check and mixes as
    /// `Mean` here).
    /// Stops once `max_frames` samples are out (the rest is not needed); the
    /// checks that need the whole stream (its declared length) only run when
    /// it was decoded.
    pub fn decode(
        self,
        channels: impl Into<Mix>,
        max_frames: usize,
        out: &mut Vec<f32>,
    ) -> Result<Head, Error> {
        self.run(&mut Sink::new(out, channels.into(), max_frames))
    }

    /// Decodes the whole stream into `out` (cleared first) as [`decode`]
    /// does, the same trimming, but with every channel kept: frames of
    /// [`Head::channels`] samples, interleaved. Stops once `max_frames`
    /// frames are out. A decoded buffer with another channel count than
    /// the header's is [`Error::Malformed`] (such a stream has no one
    /// layout to keep).
    ///
    /// [`decode`]: Stream::decode
    pub fn decode_all(self, max_frames: usize, out: &mut Vec<f32>) -> Result<Head, Error> {
        let mut sink = Sink::new(out, Mix::Mean, max_frames);
        self.decode_every_channel(&mut sink).map(|(head, _)| head)
    }

    /// [`decode_all`](Stream::decode_all) without holding the decode: the
    /// frames go to `write` as they pile up, in pieces of at least `chunk`
    /// frames, all but the last [`Sink::KEEP`] (a decoder's end trim may
    /// still cut those), then the rest. `write` returning false stops the
    /// decode (the writer failed). Memory stays at about `chunk` +
    /// [`Sink::KEEP`] frames whatever the stream's length.
    pub fn decode_all_to(
        self,
        max_frames: usize,
        chunk: usize,
        write: &mut Writer<'_>,
    ) -> Result<Drained, Error> {
        let mut out = Vec::new();
        let mut sink = Sink::new(&mut out, Mix::Mean, max_frames);
        sink.drain = Some(write);
        sink.chunk = chunk.max(1);
        let (head, frames) = self.decode_every_channel(&mut sink)?;
        let trimmed_late = sink.cut;
        if !trimmed_late && !sink.stopped && !sink.out.is_empty() {
            let rest = std::mem::take(sink.out);
            if let Some(w) = sink.drain.as_mut() {
                w(&rest);
            }
        }
        Ok(Drained {
            head,
            frames: frames as u64,
            trimmed_late,
        })
    }

    /// Decodes into `sink` with every channel kept; the frames out.
    fn decode_every_channel(self, sink: &mut Sink<'_>) -> Result<(Head, usize), Error> {
        sink.all = Some(usize::from(self.head.channels).max(1));
        let head = self.run(sink)?;
        Ok((head, sink.len()))
    }

    /// Decodes into `sink` (its `out` cleared first), leaving nothing in
    /// it on an error; a buffer of the wrong channel count (`all`) is
    /// [`Error::Malformed`], a stream without a frame [`Error::Empty`].
    fn run(self, sink: &mut Sink<'_>) -> Result<Head, Error> {
        sink.out.clear();
        let head = self.head;
        let r = guarded(|| match self.inner {
            Inner::Mp3(s) => s.decode(sink),
            Inner::Symphonia(s) => s.decode(sink),
            Inner::Opus(s) => s.decode(sink),
        });
        let odd = sink.odd;
        if r.is_err() || odd {
            sink.out.clear();
        }
        r?;
        if odd {
            return Err(Error::malformed(
                head.codec.stream(),
                format!(
                    "a decoded buffer's channels are not the header's {}",
                    head.channels
                ),
            ));
        }
        if sink.len() == 0 {
            return Err(Error::Empty {
                format: head.codec.stream(),
            });
        }
        Ok(head)
    }
}

/// What [`Stream::decode_all_to`] handed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drained {
    pub head: Head,
    /// Frames of the decode (those written, unless `trimmed_late`).
    pub frames: u64,
    /// The decoder's end trim reached frames already written: what was
    /// written is longer than the decode, and unusable.
    pub trimmed_late: bool,
}

/// Runs `f`, turning a panic inside a third-party decoder into an error.
fn guarded<T>(f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(Error::malformed(
            "audio",
            "the decoder failed on these bytes",
        ))
    })
}

/// Takes interleaved frames as a decode hands them on; false: stop.
pub type Writer<'a> = dyn FnMut(&[f32]) -> bool + 'a;

/// Where decoded frames go: mixed to mono, or one channel kept ([`Mix`]),
/// or every channel kept, interleaved (`all`; [`Stream::decode_all`]), and
/// then perhaps handed on as they pile up (`drain`;
/// [`Stream::decode_all_to`]).
pub(crate) struct Sink<'a> {
    out: &'a mut Vec<f32>,
    mode: Mix,
    max_frames: usize,
    /// Every channel kept: the stream's channel count (`mode` unused).
    all: Option<usize>,
    /// With `all`: a buffer came with another channel count (left out).
    odd: bool,
    /// With `all`: where frames go once `chunk` + [`Sink::KEEP`] are out.
    drain: Option<&'a mut Writer<'a>>,
    chunk: usize,
    /// Frames handed to `drain` (no longer in `out`).
    drained: usize,
    /// `drain` refused a piece: the decode stops.
    stopped: bool,
    /// A trim reached into the drained frames.
    cut: bool,
}

impl<'a> Sink<'a> {
    /// Frames kept back from `drain`: more than any decoder trims from the
    /// end of a stream (MP3's padding, an MP4 track's last access unit).
    pub(crate) const KEEP: usize = 1 << 15;

    /// A sink into `out` mixing by `mode`, full at `max_frames`.
    fn new(out: &'a mut Vec<f32>, mode: Mix, max_frames: usize) -> Sink<'a> {
        Sink {
            out,
            mode,
            max_frames,
            all: None,
            odd: false,
            drain: None,
            chunk: usize::MAX,
            drained: 0,
            stopped: false,
            cut: false,
        }
    }

    /// Samples per frame in `out`.
    fn width(&self) -> usize {
        self.all.unwrap_or(1)
    }

    /// Enough frames are out, or the drain failed; the decoder may stop.
    fn full(&self) -> bool {
        self.stopped || self.len() >= self.max_frames
    }

    /// Frames out (drained ones included).
    fn len(&self) -> usize {
        self.drained + self.out.len() / self.width()
    }

    /// Keeps the first `n` frames.
    fn truncate(&mut self, n: usize) {
        match n.checked_sub(self.drained) {
            Some(k) => self.out.truncate(k.saturating_mul(self.width())),
            None => {
                self.cut = true;
                self.out.clear();
            }
        }
    }

    /// Hands all but the last [`Sink::KEEP`] frames to `drain` once
    /// `chunk` more have piled up.
    fn pass_on(&mut self) {
        let w = self.width();
        let have = self.out.len() / w;
        let Some(write) = self.drain.as_mut() else {
            return;
        };
        if self.stopped || have < Sink::KEEP.saturating_add(self.chunk) {
            return;
        }
        let n = (have - Sink::KEEP) * w;
        if !write(&self.out[..n]) {
            self.stopped = true;
        }
        self.out.drain(..n);
        self.drained += n / w;
    }

    /// Appends planar frames (`chans[c]` is channel `c`, all one length).
    fn planar(&mut self, chans: &[&[f32]]) {
        if let Some(n) = self.all {
            if chans.len() != n {
                self.odd = true;
                return;
            }
            let frames = chans.first().map_or(0, |c| c.len());
            self.out.reserve(frames * n);
            for i in 0..frames {
                self.out.extend(chans.iter().map(|c| c[i]));
            }
            self.pass_on();
            return;
        }
        let Some((first, rest)) = chans.split_first() else {
            return;
        };
        if let Mix::Channel(c) = self.mode {
            // One channel (the last where the stream has fewer).
            let c = usize::from(c).min(chans.len() - 1);
            self.out.extend_from_slice(chans[c]);
            return;
        }
        let start = self.out.len();
        self.out.extend_from_slice(first);
        if rest.is_empty() {
            return;
        }
        let mono = &mut self.out[start..];
        for chan in rest {
            for (o, &v) in mono.iter_mut().zip(chan.iter()) {
                *o += v;
            }
        }
        let divisor = chans.len() as f32;
        for o in mono {
            *o /= divisor;
        }
    }

    /// Appends interleaved frames of `nch` channels.
    fn interleaved(&mut self, data: &[f32], nch: usize) {
        if let Some(n) = self.all {
            if nch == n {
                self.out.extend_from_slice(data);
                self.pass_on();
            } else {
                self.odd = true;
            }
            return;
        }
        if nch == 1 {
            self.out.extend_from_slice(data);
            return;
        }
        let one = match self.mode {
            Mix::Channel(c) => Some(usize::from(c).min(nch - 1)),
            Mix::Mean => None,
        };
        let divisor = nch as f32;
        self.out.extend(data.chunks_exact(nch).map(|f| {
            if let Some(c) = one {
                f[c]
            } else {
                let mut s = f[0];
                for &v in &f[1..] {
                    s += v;
                }
                s / divisor
            }
        }));
    }
}

/// Walks every Ogg page of `bytes`: each must be whole, and the first
/// logical stream must end with its end-of-stream page (a file cut short
/// lacks it). Bytes after the end-of-stream page that are no Ogg page (a
/// tag appended by some tool) are ignored, as libsndfile ignores them.
/// Returns the granule position of the first stream's last page.
fn check_ogg_pages(bytes: &[u8]) -> Result<u64, Error> {
    const F: &str = "Ogg";
    let mut pos = 0usize;
    let mut page = 0u64;
    let mut serial = None;
    let mut ended = false;
    let mut granule = 0u64;
    while pos < bytes.len() {
        let Some(h) = bytes.get(pos..pos + 27) else {
            if ended {
                break;
            }
            return Err(Error::truncated(
                F,
                format!(
                    "the file ends at byte {} inside the header of page {page}",
                    bytes.len()
                ),
            ));
        };
        if &h[..4] != b"OggS" {
            if ended {
                break;
            }
            return Err(Error::malformed(
                F,
                format!(
                    "no Ogg page at byte {pos} (found {}, expected b\"OggS\")",
                    ByteStr(&h[..4])
                ),
            ));
        }
        let nseg = usize::from(h[26]);
        let body = bytes
            .get(pos + 27..pos + 27 + nseg)
            .map(|t| t.iter().map(|&v| usize::from(v)).sum::<usize>());
        let end = body.map(|b| pos + 27 + nseg + b);
        let Some(end) = end.filter(|&e| e <= bytes.len()) else {
            return Err(Error::truncated(
                F,
                format!(
                    "page {page} at byte {pos} runs past the end of the file ({} bytes)",
                    bytes.len()
                ),
            ));
        };
        let this = u32::from_le_bytes([h[14], h[15], h[16], h[17]]);
        if *serial.get_or_insert(this) == this && !ended {
            let g = u64::from_le_bytes([h[6], h[7], h[8], h[9], h[10], h[11], h[12], h[13]]);
            if g != u64::MAX {
                granule = g;
            }
            ended = h[5] & 0x04 != 0;
        }
        pos = end;
        page += 1;
    }
    if !ended {
        return Err(Error::truncated(
            F,
            format!(
                "no end-of-stream page after {page} pages (the file is cut short at byte {})",
                bytes.len()
            ),
        ));
    }
    Ok(granule)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod part_tests;
