//! MP3 (MPEG-1/2/2.5 audio layer III) through `nanomp3`, a safe Rust port of
//! minimp3 (`#![forbid(unsafe_code)]`, no allocation in its frame decoder):
//! frames are fed to its decoder from the bytes in memory, one at a time,
//! and the interleaved `f32` frames go to a [`Sink`].
//!
//! Gapless as mpg123 (soundfile's MP3 decoder) and minimp3_ex: the first
//! frame may be a Xing/Info tag instead of audio (skipped); its LAME
//! extension gives the encoder delay and padding, and the output starts
//! `delay + 529` samples in (529: the layer III decoder's own delay) and
//! ends at `frames · spf − delay − padding` ([`Gapless`]). That length is
//! also the check for a file cut short ([`Error::Truncated`]); without the
//! LAME extension nothing is trimmed and no length is known.
//!
//! Bytes between frames (junk, a damaged header) are skipped as the decoder
//! resyncs, as mpg123 does; a frame whose side information or main data the
//! decoder refuses is [`Error::Malformed`]; a frame whose bit reservoir lies
//! in frames not decoded (a stream starting mid-way) gives the frame's
//! length in silence, so every frame keeps its place in time — which is also
//! what [`super::part`] relies on when it decodes from a frame boundary.
//! Frames of another layer are [`Error::Unsupported`]; a change of sample
//! rate mid-stream is [`Error::Malformed`] (the channel count may change:
//! each frame is mixed as it comes).

use nanomp3::{DecodeError, Decoder, FrameInfo, MAX_SAMPLES_PER_FRAME, VbrTag};

use super::frames::Mp3Frame;
use super::{Codec, Error, Head, Sink};

const F: &str = "MP3";
/// The layer III decoder's delay, samples (mpg123's and minimp3's `529`).
const DECODER_DELAY: u64 = 529;

/// Where the whole-file decode starts and ends, from the first frame's tag.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Gapless {
    /// Decoded samples dropped at the start (encoder delay + 529).
    pub origin: u64,
    /// Samples the stream holds after trimming (LAME tag only).
    pub length: Option<u64>,
}

/// The tag in `frame` (a whole first frame, header first), if it is a
/// Xing/Info tag rather than audio: `Some` means the frame is skipped.
pub(super) fn tag(frame: &[u8]) -> Option<Gapless> {
    let fr = Mp3Frame::parse(frame)?;
    let t = VbrTag::parse(frame.get(..fr.size)?)?;
    let (Some(frames), Some((delay, padding))) = (t.frames, t.encoder_delay_padding) else {
        return Some(Gapless::default());
    };
    let origin = u64::from(delay) + DECODER_DELAY;
    // minimp3_ex: a padding under the decoder's delay is not cut.
    let padding = u64::from(padding).saturating_sub(DECODER_DELAY);
    let total = u64::from(frames) * u64::from(fr.samples);
    let length = total.saturating_sub(origin).saturating_sub(padding);
    Some(Gapless {
        origin,
        length: Some(length),
    })
}

/// An opened MP3 stream: the bytes from its first audio frame on.
pub(super) struct Stream {
    bytes: Vec<u8>,
    gapless: Gapless,
    sample_rate: u32,
}

impl Stream {
    pub(super) fn open(bytes: &[u8]) -> Result<(Stream, Head), Error> {
        let id3 = id3v2_len(bytes);
        let body = bytes.get(id3..).ok_or_else(|| {
            Error::truncated(
                F,
                format!(
                    "the ID3v2 tag declares {id3} bytes, the file has {}",
                    bytes.len()
                ),
            )
        })?;
        if body.is_empty() {
            return Err(Error::truncated(F, "the file ends after its ID3v2 tag"));
        }
        let first = body
            .iter()
            .position(|&b| b == 0xFF)
            .and_then(|at| Some((at, Mp3Frame::parse(&body[at..])?)))
            .ok_or_else(|| Error::malformed(F, "no layer III frame header after the tags"))?;
        let (at, fr) = first;
        let (gapless, audio) = match body.get(at..at + fr.size).and_then(tag) {
            Some(g) => (g, at + fr.size),
            None => (Gapless::default(), at),
        };
        let head = Head {
            codec: Codec::Mp3,
            sample_rate: fr.sample_rate,
            channels: fr.channels,
        };
        let stream = Stream {
            bytes: body[audio..].to_vec(),
            gapless,
            sample_rate: fr.sample_rate,
        };
        Ok((stream, head))
    }

    /// Decodes frames in order into `sink` until the bytes end or the sink
    /// is full, then checks and trims the length.
    pub(super) fn decode(self, sink: &mut Sink<'_>) -> Result<(), Error> {
        let mut frames = Frames::new(self.sample_rate);
        let mut skip = usize::try_from(self.gapless.origin).unwrap_or(usize::MAX);
        let mut pos = 0;
        let mut complete = true;
        while pos < self.bytes.len() {
            if sink.full() {
                complete = false;
                break;
            }
            let (used, pcm, nch) = frames.next(&self.bytes[pos..], pos)?;
            pos += used.max(1);
            let from = (skip * nch).min(pcm.len());
            skip -= from / nch.max(1);
            sink.interleaved(&pcm[from..], nch);
        }
        if let Some(n) = self.gapless.length {
            let n = usize::try_from(n).unwrap_or(usize::MAX);
            if complete && sink.len() < n {
                return Err(Error::truncated(
                    F,
                    format!(
                        "the LAME tag declares {n} samples, the stream holds {} (the file is cut \
                         short)",
                        sink.len()
                    ),
                ));
            }
            sink.truncate(n);
        }
        Ok(())
    }
}

/// The frame decoder with its output buffer and the stream's rate.
pub(super) struct Frames {
    decoder: Box<Decoder>,
    pcm: Box<[f32; MAX_SAMPLES_PER_FRAME]>,
    sample_rate: u32,
}

impl Frames {
    pub(super) fn new(sample_rate: u32) -> Frames {
        Frames {
            decoder: Box::new(Decoder::new()),
            pcm: Box::new([0.0; MAX_SAMPLES_PER_FRAME]),
            sample_rate,
        }
    }

    /// Decodes the next frame of `bytes` (at byte `at` of the stream, for
    /// messages): the bytes used (junk before the frame included), its
    /// interleaved samples (empty at the end: no whole frame left) and its
    /// channel count.
    pub(super) fn next(
        &mut self,
        bytes: &[u8],
        at: usize,
    ) -> Result<(usize, &[f32], usize), Error> {
        let (used, r) = self.decoder.decode(bytes, &mut self.pcm[..]);
        let (info, samples) = match r {
            Ok(info) => (info, info.samples_produced),
            Err(DecodeError::NoFrame) => return Ok((used, &[], 1)),
            Err(DecodeError::ReservoirUnavailable(info)) => {
                // The frame's samples in silence: its place in time is kept.
                let n = frame_samples(&info);
                self.pcm[..n * usize::from(info.channels.num())].fill(0.0);
                (info, n)
            }
            Err(DecodeError::Corrupt(_)) => {
                return Err(Error::malformed(
                    F,
                    format!("the frame before byte {} is damaged", at + used),
                ));
            }
            Err(e) => {
                return Err(Error::Unsupported {
                    format: F,
                    what: format!("a frame the layer III decoder refuses ({e})"),
                    expected: "MPEG audio layer III",
                });
            }
        };
        if info.layer != 3 {
            return Err(Error::Unsupported {
                format: F,
                what: format!("an MPEG audio layer {} frame", info.layer),
                expected: "MPEG audio layer III",
            });
        }
        if info.sample_rate != self.sample_rate {
            return Err(Error::malformed(
                F,
                format!(
                    "the sample rate changes from {} Hz to {} Hz at byte {at}",
                    self.sample_rate, info.sample_rate
                ),
            ));
        }
        let nch = usize::from(info.channels.num());
        Ok((used, &self.pcm[..samples * nch], nch))
    }
}

/// Samples per channel of a layer III frame at `info`'s rate.
fn frame_samples(info: &FrameInfo) -> usize {
    if info.sample_rate >= 32_000 {
        1152
    } else {
        576
    }
}

/// Length of an ID3v2 tag at the start (header, body, optional footer), or 0.
pub(super) fn id3v2_len(bytes: &[u8]) -> usize {
    match bytes.first_chunk::<10>() {
        Some(h) if h.starts_with(b"ID3") => {
            let size = h[6..10]
                .iter()
                .fold(0usize, |a, &b| (a << 7) | usize::from(b & 0x7F));
            let footer = if h[5] & 0x10 != 0 { 10 } else { 0 };
            10 + size + footer
        }
        _ => 0,
    }
}
