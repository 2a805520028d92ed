//! FLAC decoding from an in-memory byte buffer into mono `f32` at the file's
//! own rate, with a specific [`Error`] for every way a file can be bad.
//!
//! The STREAMINFO block is parsed and checked here first (magic, block type
//! and length, sample rate, block sizes, bit depth, a sample count the file
//! could hold), so a bad header gets a sentence naming the field; frames are
//! then decoded by symphonia's FLAC demuxer and decoder. The demuxer resyncs
//! past a frame whose CRC-16 does not match instead of failing, so frame
//! continuity is checked here: a gap between one frame's first sample and the
//! previous frame's end is [`Error::MissingFrames`] (a frame that failed its
//! CRC or was cut out), fewer samples than STREAMINFO declares is
//! [`Error::Truncated`]. The STREAMINFO MD5 of the audio is not verified
//! (neither libsndfile nor librosa does; every frame is already covered by its
//! CRC-16, and the hash cost a third of the decoding time).
//!
//! Scaling is what soundfile (libsndfile) returns as float32 for FLAC, i.e.
//! what `librosa.load` sees: a `b`-bit sample `v` becomes `v / 2^(b-1)`
//! (symphonia shifts samples to the top of an `i32`, so this is one exact
//! multiply by 2^-31). Channels follow [`Mix`]: `Mean` sums the scaled
//! channels left to right in `f32` and divides by the count (numpy's
//! `mean(axis=0)` on float32), `Channel(c)` keeps channel `c` alone
//! (`input.channels = "first"`: channel 0; a lhotse cut: its channel).

use std::io::Cursor;

use symphonia::core::audio::{AudioBufferRef, Signal};
use symphonia::core::codecs::{Decoder, DecoderOptions};
use symphonia::core::errors::Error as SymError;
use symphonia::core::formats::{FormatOptions, FormatReader};
use symphonia::core::io::MediaSourceStream;
use symphonia::default::codecs::FlacDecoder;
use symphonia::default::formats::FlacReader;

use super::policy::Mix;
use super::wav::ByteStr;

/// The FLAC stream marker.
pub const MAGIC: &[u8; 4] = b"fLaC";

/// Bit depths accepted (those soundfile decodes).
const BITS: [u8; 3] = [8, 16, 24];

/// Most samples per byte of file a FLAC stream can declare: a constant
/// subframe stores one value per block of up to 65535 samples in about a
/// dozen bytes, so more than 8192 per byte is a lie.
const MAX_SAMPLES_PER_BYTE: u64 = 8192;

/// What the STREAMINFO block says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamInfo {
    pub sample_rate: u32,
    pub channels: u16,
    pub bits: u8,
    /// Samples per channel; 0 means "unknown" in FLAC.
    pub total_samples: u64,
    pub min_block: u16,
    pub max_block: u16,
}

/// Why a buffer is not a FLAC file this decoder accepts. `Display` is a
/// sentence fragment without the path.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    #[error("not a FLAC file (starts with {}, expected b\"fLaC\")", ByteStr(.magic))]
    NotFlac { magic: [u8; 4] },
    #[error("truncated FLAC header: {len} bytes, the STREAMINFO block needs 42")]
    TruncatedHeader { len: usize },
    #[error("first FLAC metadata block is of type {block_type}, expected STREAMINFO (type 0)")]
    NoStreamInfo { block_type: u8 },
    #[error("FLAC STREAMINFO block is {len} bytes long, expected 34")]
    StreamInfoLength { len: u32 },
    #[error("absurd FLAC header: sample rate {hz} Hz (expected 1..=655350 Hz)")]
    AbsurdRate { hz: u32 },
    #[error("absurd FLAC header: block sizes {min}..{max} (expected 16 ≤ minimum ≤ maximum)")]
    AbsurdBlocks { min: u16, max: u16 },
    #[error("absurd FLAC header: {samples} samples declared in a {bytes} byte file")]
    AbsurdLength { samples: u64, bytes: usize },
    /// A limit of the decoder (symphonia's words).
    #[error("absurd FLAC header: {0}")]
    Limit(&'static str),
    #[error("FLAC bit depth {bits} is not supported (expected 8, 16 or 24 bits per sample)")]
    UnsupportedBitDepth { bits: u8 },
    #[error("truncated FLAC stream: the file ends at byte {len} inside the metadata blocks")]
    CutInMetadata { len: usize },
    #[error(
        "truncated FLAC stream: metadata block of type {block_type} at byte {at} declares \
         {declared} bytes, {available} follow"
    )]
    BlockPastEnd {
        block_type: u8,
        at: usize,
        declared: usize,
        available: usize,
    },
    #[error(
        "truncated FLAC stream: STREAMINFO declares {declared} samples, the frames hold {held} \
         (the file is cut short or its last frame failed its CRC check)"
    )]
    ShortStream { declared: u64, held: u64 },
    #[error("truncated FLAC stream: the file ends inside a metadata block or frame")]
    EndsInside,
    /// The decoder's words on the failed check.
    #[error("FLAC frame failed its CRC check: {0}")]
    BadCrc(&'static str),
    #[error(
        "FLAC frames missing at sample {at} (the next frame starts at sample {next}): a frame \
         failed its CRC check or was cut out"
    )]
    MissingFrames { at: u64, next: u64 },
    /// The decoder's words on what is wrong.
    #[error("corrupt FLAC frame: {0}")]
    Corrupt(&'static str),
    #[error("corrupt FLAC frame: the FLAC decoder failed on these bytes")]
    DecoderPanicked,
    #[error("corrupt FLAC frame: no audio track")]
    NoTrack,
    #[error("corrupt FLAC frame: a frame has {got} channels, STREAMINFO declares {declared}")]
    FrameChannels { got: usize, declared: usize },
    /// Reading the in-memory stream failed other than at its end.
    #[error("corrupt FLAC frame: {0}")]
    Read(std::io::ErrorKind),
    #[error("corrupt FLAC frame: the stream needs a decoder reset")]
    ResetRequired,
    /// A FLAC feature the decoder does not support (its words).
    #[error("FLAC feature not supported: {0}")]
    Unsupported(&'static str),
    #[error("FLAC feature not supported: a sample format other than integer")]
    SampleFormat,
    #[error("FLAC stream holds no samples")]
    Empty,
}

/// Parses and checks the STREAMINFO block at the start of `bytes`.
pub fn stream_info(bytes: &[u8]) -> Result<StreamInfo, Error> {
    if let Some(magic) = bytes.first_chunk::<4>()
        && magic != MAGIC
    {
        return Err(Error::NotFlac { magic: *magic });
    }
    let Some(h) = bytes.get(..42) else {
        return Err(Error::TruncatedHeader { len: bytes.len() });
    };
    let block_type = h[4] & 0x7F;
    if block_type != 0 {
        return Err(Error::NoStreamInfo { block_type });
    }
    let len = u32::from_be_bytes([0, h[5], h[6], h[7]]);
    if len != 34 {
        return Err(Error::StreamInfoLength { len });
    }
    let s = &h[8..42];
    let min_block = u16::from_be_bytes([s[0], s[1]]);
    let max_block = u16::from_be_bytes([s[2], s[3]]);
    let packed = u64::from_be_bytes([s[10], s[11], s[12], s[13], s[14], s[15], s[16], s[17]]);
    let sample_rate = (packed >> 44) as u32;
    let channels = ((packed >> 41) & 0x7) as u16 + 1;
    let bits = ((packed >> 36) & 0x1F) as u8 + 1;
    let total_samples = packed & 0xF_FFFF_FFFF;
    let info = StreamInfo {
        sample_rate,
        channels,
        bits,
        total_samples,
        min_block,
        max_block,
    };
    if sample_rate == 0 || sample_rate > 655_350 {
        return Err(Error::AbsurdRate { hz: sample_rate });
    }
    if min_block < 16 || max_block < min_block {
        return Err(Error::AbsurdBlocks {
            min: min_block,
            max: max_block,
        });
    }
    if !BITS.contains(&bits) {
        return Err(Error::UnsupportedBitDepth { bits });
    }
    if total_samples > bytes.len() as u64 * MAX_SAMPLES_PER_BYTE {
        return Err(Error::AbsurdLength {
            samples: total_samples,
            bytes: bytes.len(),
        });
    }
    Ok(info)
}

/// Decodes `bytes` into `out` (cleared first): mono samples at the file's rate
/// (channels combined by `channels`, an `input.channels` policy or one
/// channel, [`Mix`]; `reject` is the caller's check and mixes as `Mean`
/// here). Stops once `max_frames` samples are out
/// (the rest is not needed); the length check needs the whole stream and only
/// runs when it was decoded.
pub fn decode(
    bytes: &[u8],
    channels: impl Into<Mix>,
    max_frames: usize,
    out: &mut Vec<f32>,
) -> Result<StreamInfo, Error> {
    decode_from(bytes, channels, max_frames, 0, out)
}

/// [`decode`] of a stream whose first frame starts at sample `first` (a
/// part of a file, [`seek::Extent`]): frames must follow on from there.
pub fn decode_from(
    bytes: &[u8],
    channels: impl Into<Mix>,
    max_frames: usize,
    first: u64,
    out: &mut Vec<f32>,
) -> Result<StreamInfo, Error> {
    out.clear();
    let channels = channels.into();
    let info = stream_info(bytes)?;
    // A panic inside the third-party decoder on hostile bytes is one file's
    // rejection, never the worker's end.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        frames(bytes, (info, first), channels, max_frames, out)
    }));
    match r {
        Ok(r) => r,
        Err(_) => {
            out.clear();
            Err(Error::DecoderPanicked)
        }
    }
}

/// The frame loop of [`decode`] (after STREAMINFO was checked).
fn frames(
    bytes: &[u8],
    (info, first): (StreamInfo, u64),
    channels: Mix,
    max_frames: usize,
    out: &mut Vec<f32>,
) -> Result<StreamInfo, Error> {
    let stream = frames_only(bytes)?;
    let src = MediaSourceStream::new(Box::new(Cursor::new(stream)), Default::default());
    let mut reader = FlacReader::try_new(src, &FormatOptions::default()).map_err(map_err)?;
    let params = reader
        .default_track()
        .ok_or(Error::NoTrack)?
        .codec_params
        .clone();
    let mut decoder =
        FlacDecoder::try_new(&params, &DecoderOptions { verify: false }).map_err(map_err)?;
    let nch = usize::from(info.channels);
    let mut next_ts = first;
    let mut complete = true;
    loop {
        if out.len() >= max_frames {
            complete = false;
            break;
        }
        let packet = match reader.next_packet() {
            Ok(p) => p,
            Err(SymError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(map_err(e)),
        };
        if packet.ts() != next_ts {
            return Err(Error::MissingFrames {
                at: next_ts,
                next: packet.ts(),
            });
        }
        let decoded = decoder.decode(&packet).map_err(map_err)?;
        let AudioBufferRef::S32(buf) = decoded else {
            return Err(Error::SampleFormat);
        };
        let frames = buf.frames();
        next_ts += frames as u64;
        if buf.spec().channels.count() != nch {
            return Err(Error::FrameChannels {
                got: buf.spec().channels.count(),
                declared: nch,
            });
        }
        append_mono(&buf, channels, out);
    }
    if complete && info.total_samples != 0 && next_ts < info.total_samples {
        return Err(Error::ShortStream {
            declared: info.total_samples,
            held: next_ts,
        });
    }
    if info.total_samples != 0 {
        out.truncate(info.total_samples.saturating_sub(first) as usize);
    }
    if out.is_empty() {
        return Err(Error::Empty);
    }
    Ok(info)
}

/// The stream symphonia decodes: STREAMINFO and the frames only. The other
/// metadata blocks (tags, pictures, cue sheets, seek tables) do not change
/// the audio, and its tag reader allocates whatever length a corrupt comment
/// declares (4 GiB found by fuzzing) before reading it.
fn frames_only(bytes: &[u8]) -> Result<Vec<u8>, Error> {
    let audio = first_frame(bytes)?;
    let mut stream = Vec::with_capacity(42 + bytes.len() - audio);
    stream.extend_from_slice(&bytes[..42]);
    stream[4] |= 0x80; // STREAMINFO is now the last metadata block
    // A fixed-blocksize stream (first frame header 0xFFF8) whose encoder
    // counted the short last block in STREAMINFO's minimum block size
    // (flacenc does; libFLAC decodes it; the format says the minimum
    // excludes the last block): symphonia takes min ≠ max for a
    // variable-blocksize stream and loses the frames' places, so the minimum
    // is set to the maximum, as the format means it.
    if bytes.get(audio..audio + 2) == Some(&[0xFF, 0xF8]) && stream[8..10] != stream[10..12] {
        stream.copy_within(10..12, 8);
    }
    stream.extend_from_slice(&bytes[audio..]);
    Ok(stream)
}

/// Appends one decoded frame to `out` as mono floats: one channel (the last
/// where the frame has fewer), or the mean of all (`channels`).
fn append_mono(buf: &symphonia::core::audio::AudioBuffer<i32>, channels: Mix, out: &mut Vec<f32>) {
    const S31: f32 = 1.0 / 2_147_483_648.0;
    let nch = buf.spec().channels.count();
    let start = out.len();
    let one = match channels {
        Mix::Channel(c) => Some(usize::from(c).min(nch - 1)),
        Mix::Mean => None,
    };
    out.extend(buf.chan(one.unwrap_or(0)).iter().map(|&v| v as f32 * S31));
    if nch > 1 && one.is_none() {
        let mono = &mut out[start..];
        for c in 1..nch {
            for (o, &v) in mono.iter_mut().zip(buf.chan(c)) {
                *o += v as f32 * S31;
            }
        }
        let divisor = nch as f32;
        for o in mono {
            *o /= divisor;
        }
    }
}

/// Offset of the first frame: after the metadata block whose header has the
/// "last" flag, each block's declared length checked against the file.
fn first_frame(bytes: &[u8]) -> Result<usize, Error> {
    let mut pos = 4;
    loop {
        let Some(h) = bytes.get(pos..pos + 4) else {
            return Err(Error::CutInMetadata { len: bytes.len() });
        };
        let len = u32::from_be_bytes([0, h[1], h[2], h[3]]) as usize;
        let available = bytes.len() - pos - 4;
        if len > available {
            return Err(Error::BlockPastEnd {
                block_type: h[0] & 0x7F,
                at: pos,
                declared: len,
                available,
            });
        }
        pos += 4 + len;
        if h[0] & 0x80 != 0 {
            return Ok(pos);
        }
    }
}

/// A symphonia error as a specific [`Error`].
fn map_err(e: SymError) -> Error {
    match e {
        SymError::IoError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Error::EndsInside,
        SymError::IoError(e) => Error::Read(e.kind()),
        SymError::DecodeError(m) if m.contains("CRC") => {
            Error::BadCrc(m.trim_start_matches("flac: "))
        }
        SymError::DecodeError(m) => Error::Corrupt(m.trim_start_matches("flac: ")),
        SymError::Unsupported(m) => Error::Unsupported(m.trim_start_matches("flac: ")),
        SymError::LimitError(m) => Error::Limit(m),
        SymError::SeekError(_) | SymError::ResetRequired => Error::ResetRequired,
    }
}

pub mod seek;

#[cfg(test)]
mod tests;
