//! File bytes → the `f32` mono clip at `mel.sample_rate` that the mel
//! definition starts from, under the `[input]` policy.
//!
//! The container is recognised by its first bytes (`RIFF`/`RF64`/`BW64` →
//! [`wav`], `fLaC` → [`flac`], MP3/Ogg/MP4 → [`compressed`]; anything else
//! is [`Error::UnknownContainer`]).
//! Channels follow [`Channels`] (`mean` is librosa's mono and today's WAV
//! behaviour). A file at another rate is rejected naming both rates when
//! [`Resample::Off`]; with [`Resample::SoxrHq`] it is decoded to float, made
//! mono, converted by [`resample::Resampler`] and its length fixed to
//! `ceil(n · target / orig)` — `librosa.load(path, sr=target, mono=True)` —
//! before the clip is padded with zeros or trimmed like any other.
//!
//! Only the start of a long file is needed: the clip, plus one second of
//! input past it when resampling (far more than libsoxr's filter reaches), so
//! decoding stops there and the result equals converting the whole file.
//!
//! Variable-length recipes take a file at its natural length instead
//! ([`ClipDecoder::decode_natural`]): every sample, or the first
//! `max_samples` (Whisper's 30 s), nothing padded; the same container,
//! channel and resampling steps (a resampled file is converted whole, or up
//! to the cap plus one second of input).
//!
//! The reference path — PCM WAV already at the target rate, mono or averaged —
//! is `wav::parse` + `wav::decode_mono_into` straight into the clip, as
//! before; [`device_wav`] tells the CUDA stage which files take that path
//! (it decodes them on the device) and which it must decode here.

use super::compressed::{self, Codec};
use super::flac;
pub use super::policy::{Channels, Policy, Resample};
use super::resample::{self, Resampler};
use super::wav::{self, ByteStr, WavInfo};
use crate::segment::Segment;

mod segment;

/// Why a file yields no clip. `Display` is a sentence fragment without the path.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Wav(#[from] wav::Error),
    #[error(transparent)]
    Flac(#[from] flac::Error),
    #[error(transparent)]
    Compressed(#[from] compressed::Error),
    #[error(transparent)]
    Resample(#[from] resample::Error),
    #[error(
        "not an audio file melforge reads (starts with {}, expected WAV, FLAC, MP3, Ogg \
         Vorbis/Opus or MP4/M4A)",
        ByteStr(.magic)
    )]
    UnknownContainer { magic: [u8; 4] },
    #[error("{found} channels, but input.channels = \"reject\" accepts mono files only")]
    Channels { found: u16 },
    #[error("sample rate {found} Hz, expected {expected} Hz")]
    SampleRate { found: u32, expected: u32 },
    #[error("the offset {offset_s} s is past the end of the file ({file_s:.3} s)")]
    OffsetPastEnd { offset_s: f64, file_s: f64 },
    #[error(
        "the manifest says {stated} s but the file lasts {file_s:.3} s (more than 0.1 s apart)"
    )]
    DurationMismatch { stated: f64, file_s: f64 },
    #[error("channel {channel} asked for, but the file has {channels} channel(s)")]
    NoSuchChannel { channel: u16, channels: u16 },
}

/// What kind of file a clip came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Container {
    Wav,
    Flac,
    /// MP3, Ogg Vorbis, Ogg Opus or MP4 AAC ([`compressed`]).
    Compressed(Codec),
}

/// What [`ClipDecoder::decode`] read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded {
    pub container: Container,
    pub sample_rate: u32,
    pub channels: u16,
    /// The file was converted from `sample_rate` to the target rate.
    pub resampled: bool,
}

/// Whether the bytes start like a RIFF/RF64/BW64 file (the WAV parser's).
fn is_riff(bytes: &[u8]) -> bool {
    matches!(bytes.first_chunk::<4>(), Some(b"RIFF" | b"RF64" | b"BW64"))
}

/// The container by magic; too short to tell goes to the WAV parser (which
/// names the truncation).
pub fn container(bytes: &[u8]) -> Result<Container, Error> {
    if let Some(codec) = compressed::sniff(bytes) {
        return Ok(Container::Compressed(codec));
    }
    match bytes.first_chunk::<4>() {
        Some(m) if m == flac::MAGIC => Ok(Container::Flac),
        Some(m) if !is_riff(bytes) => Err(Error::UnknownContainer { magic: *m }),
        _ => Ok(Container::Wav),
    }
}

/// For the CUDA stage: `Ok(Some(info))` when the file is PCM/float WAV at
/// `rate` whose channels the device's mean handles (mono, or `mean`), so it
/// is decoded on the device; `Ok(None)` when it must be decoded on the host
/// ([`ClipDecoder`]: FLAC, resampling, `first` on several channels); `Err`
/// when it is rejected as the host would reject it.
pub fn device_wav(bytes: &[u8], rate: u32, policy: Policy) -> Result<Option<WavInfo>, Error> {
    if !is_riff(bytes) && bytes.len() >= 4 {
        return Ok(None);
    }
    let info = wav::parse(bytes)?;
    check_channels(info.channels, policy)?;
    if info.sample_rate != rate {
        return match policy.resample {
            Resample::Off => Err(wav::Error::SampleRate {
                found: info.sample_rate,
                expected: rate,
            }
            .into()),
            Resample::SoxrHq => Ok(None),
        };
    }
    if info.channels > 1 && policy.channels == Channels::First {
        return Ok(None);
    }
    Ok(Some(info))
}

fn check_channels(found: u16, policy: Policy) -> Result<(), Error> {
    if found > 1 && policy.channels == Channels::Reject {
        return Err(Error::Channels { found });
    }
    Ok(())
}

/// Decodes files into clips at one target rate; owns the scratch buffers and
/// the resampler cache (one per worker: no allocation per file in steady
/// state on the WAV path).
pub struct ClipDecoder {
    rate: u32,
    policy: Policy,
    native: Vec<f32>,
    converted: Vec<f32>,
    resampler: Resampler,
}

impl ClipDecoder {
    pub fn new(rate: u32, policy: Policy) -> ClipDecoder {
        ClipDecoder {
            rate,
            policy,
            native: Vec::new(),
            converted: Vec::new(),
            resampler: Resampler::new(rate),
        }
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Frames of input at `from` Hz needed for `clip` output samples.
    fn needed(&self, clip: usize, from: u32) -> usize {
        if from == self.rate || clip == usize::MAX {
            clip
        } else {
            resample::output_len(clip, self.rate, from).saturating_add(from as usize)
        }
    }

    /// Writes the clip (`out.len()` samples at the target rate, zero padded or
    /// trimmed) of the file in `bytes`.
    pub fn decode(&mut self, bytes: &[u8], out: &mut [f32]) -> Result<Decoded, Error> {
        self.decode_to(bytes, None, Out::Clip(out))
    }

    /// [`ClipDecoder::decode`] of `seg` of the file (None: all of it).
    pub fn decode_segment(
        &mut self,
        bytes: &[u8],
        seg: Option<&Segment>,
        out: &mut [f32],
    ) -> Result<Decoded, Error> {
        self.decode_to(bytes, seg, Out::Clip(out))
    }

    /// Replaces `out` with the file's samples at the target rate at their
    /// natural length, or its first `max_samples` (None: all of them).
    pub fn decode_natural(
        &mut self,
        bytes: &[u8],
        max_samples: Option<usize>,
        out: &mut Vec<f32>,
    ) -> Result<Decoded, Error> {
        self.decode_natural_segment(bytes, None, max_samples, out)
    }

    /// [`ClipDecoder::decode_natural`] of `seg` of the file (None: all of it).
    pub fn decode_natural_segment(
        &mut self,
        bytes: &[u8],
        seg: Option<&Segment>,
        max_samples: Option<usize>,
        out: &mut Vec<f32>,
    ) -> Result<Decoded, Error> {
        let max = max_samples.unwrap_or(usize::MAX);
        self.decode_to(bytes, seg, Out::Natural { out, max })
    }

    fn decode_to(
        &mut self,
        bytes: &[u8],
        seg: Option<&Segment>,
        out: Out<'_>,
    ) -> Result<Decoded, Error> {
        if let Some(seg) = seg.filter(|s| !s.is_whole()) {
            return self.segment(bytes, seg, out);
        }
        match container(bytes)? {
            Container::Wav => self.wav(bytes, out),
            Container::Flac => self.flac(bytes, out),
            Container::Compressed(_) => self.compressed(bytes, out),
        }
    }

    fn wav(&mut self, bytes: &[u8], mut out: Out<'_>) -> Result<Decoded, Error> {
        let info = wav::parse(bytes)?;
        check_channels(info.channels, self.policy)?;
        let first = info.channels > 1 && self.policy.channels == Channels::First;
        let mut decoded = Decoded {
            container: Container::Wav,
            sample_rate: info.sample_rate,
            channels: info.channels,
            resampled: false,
        };
        let decode = |dst: &mut [f32]| {
            if first {
                wav::decode_channel_into(bytes, &info, 0, dst);
            } else {
                wav::decode_mono_into(bytes, &info, dst);
            }
        };
        if info.sample_rate == self.rate {
            decode(out.direct(info.frames));
            return Ok(decoded);
        }
        if self.policy.resample == Resample::Off {
            return Err(wav::Error::SampleRate {
                found: info.sample_rate,
                expected: self.rate,
            }
            .into());
        }
        let n = info.frames.min(self.needed(out.want(), info.sample_rate));
        // As in `Out::direct`: `decode` writes all of it.
        self.native.resize(n, 0.0);
        decode(&mut self.native);
        self.convert(info.sample_rate, out)?;
        decoded.resampled = true;
        Ok(decoded)
    }

    fn flac(&mut self, bytes: &[u8], out: Out<'_>) -> Result<Decoded, Error> {
        let head = flac::stream_info(bytes)?;
        check_channels(head.channels, self.policy)?;
        self.check_rate(head.sample_rate)?;
        let need = self.needed(out.want(), head.sample_rate);
        let info = flac::decode(bytes, self.policy.channels, need, &mut self.native)?;
        self.deliver(Container::Flac, info.sample_rate, info.channels, out)
    }

    fn compressed(&mut self, bytes: &[u8], out: Out<'_>) -> Result<Decoded, Error> {
        let stream = compressed::open(bytes)?;
        let head = stream.head();
        check_channels(head.channels, self.policy)?;
        self.check_rate(head.sample_rate)?;
        let need = self.needed(out.want(), head.sample_rate);
        stream.decode(self.policy.channels, need, &mut self.native)?;
        self.deliver(
            Container::Compressed(head.codec),
            head.sample_rate,
            head.channels,
            out,
        )
    }

    /// A rate other than the target is an error unless `[input]` resamples.
    fn check_rate(&self, found: u32) -> Result<(), Error> {
        if found != self.rate && self.policy.resample == Resample::Off {
            return Err(Error::SampleRate {
                found,
                expected: self.rate,
            });
        }
        Ok(())
    }

    /// Puts `self.native` (decoded at `rate` Hz) into `out`, resampled to
    /// the target rate when it differs.
    fn deliver(
        &mut self,
        container: Container,
        rate: u32,
        channels: u16,
        out: Out<'_>,
    ) -> Result<Decoded, Error> {
        let resampled = rate != self.rate;
        if resampled {
            self.convert(rate, out)?;
        } else {
            out.fill(&self.native);
        }
        Ok(Decoded {
            container,
            sample_rate: rate,
            channels,
            resampled,
        })
    }

    /// Resamples `self.native` (at `from` Hz) and fits it into `out`.
    fn convert(&mut self, from: u32, out: Out<'_>) -> Result<(), Error> {
        self.resampler
            .run(&self.native, from, &mut self.converted)?;
        out.fill(&self.converted);
        Ok(())
    }
}

/// Where decoded samples go: a fixed-length clip (librosa), or a vector
/// that takes the file's own length up to a cap.
enum Out<'a> {
    Clip(&'a mut [f32]),
    Natural { out: &'a mut Vec<f32>, max: usize },
}

impl Out<'_> {
    /// Samples wanted at most.
    fn want(&self) -> usize {
        match self {
            Out::Clip(c) => c.len(),
            Out::Natural { max, .. } => *max,
        }
    }

    /// The slice a decoder of `frames` samples writes into directly (the
    /// clip, which it pads; or the vector cut to the samples kept). The
    /// vector keeps its old samples: the decoder writes every one of the
    /// slice, so only its growth is zeroed first.
    fn direct(&mut self, frames: usize) -> &mut [f32] {
        match self {
            Out::Clip(c) => c,
            Out::Natural { out, max } => {
                out.resize(frames.min(*max), 0.0);
                out
            }
        }
    }

    /// Takes `src`: fitted into the clip, or its first `max` samples.
    fn fill(self, src: &[f32]) {
        match self {
            Out::Clip(c) => fit(src, c),
            Out::Natural { out, max } => {
                out.clear();
                out.extend_from_slice(&src[..src.len().min(max)]);
            }
        }
    }
}

/// Copies `src` into `out`, zero padding or trimming.
fn fit(src: &[f32], out: &mut [f32]) {
    let n = src.len().min(out.len());
    out[..n].copy_from_slice(&src[..n]);
    out[n..].fill(0.0);
}

#[cfg(test)]
mod tests;
