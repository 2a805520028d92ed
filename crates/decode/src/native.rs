//! Any container → mono `f32` at the file's own rate (no resampling, no
//! clip): what `melforge decode` dumps and `melforge bench decode` times.
//! The container is recognised by content as in [`super::clip`]; channels
//! follow [`Channels`] as there.

use super::clip::{Container, Error};
use super::compressed::{self, Codec};
use super::flac;
use super::policy::Channels;
use super::wav;

/// What [`decode`] read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Native {
    pub container: Container,
    pub sample_rate: u32,
    pub channels: u16,
}

/// Decodes the whole file in `bytes` into `out` (cleared first).
pub fn decode(bytes: &[u8], channels: Channels, out: &mut Vec<f32>) -> Result<Native, Error> {
    decode_capped(bytes, channels, usize::MAX, out)
}

/// [`decode`] of at most the first `max_frames` frames: memory bounded
/// whatever the stream claims (a FLAC frame of a few bytes can stand for
/// 65,535 samples).
pub fn decode_capped(
    bytes: &[u8],
    channels: Channels,
    max_frames: usize,
    out: &mut Vec<f32>,
) -> Result<Native, Error> {
    match super::clip::container(bytes)? {
        Container::Wav => {
            let mut info = wav::parse(bytes)?;
            info.frames = info.frames.min(max_frames);
            out.clear();
            out.resize(info.frames, 0.0);
            if info.channels > 1 && channels == Channels::First {
                wav::decode_channel_into(bytes, &info, 0, out);
            } else {
                wav::decode_mono_into(bytes, &info, out);
            }
            Ok(Native {
                container: Container::Wav,
                sample_rate: info.sample_rate,
                channels: info.channels,
            })
        }
        Container::Flac => {
            let info = flac::decode(bytes, channels, max_frames, out)?;
            Ok(Native {
                container: Container::Flac,
                sample_rate: info.sample_rate,
                channels: info.channels,
            })
        }
        Container::Compressed(codec) => compressed_whole(bytes, codec, (channels, max_frames), out),
    }
}

fn compressed_whole(
    bytes: &[u8],
    codec: Codec,
    (channels, max_frames): (Channels, usize),
    out: &mut Vec<f32>,
) -> Result<Native, Error> {
    let head = compressed::open(bytes)?.decode(channels, max_frames, out)?;
    Ok(Native {
        container: Container::Compressed(codec),
        sample_rate: head.sample_rate,
        channels: head.channels,
    })
}

/// The part of a file `librosa.load(offset=, duration=)` reads through
/// soundfile: from sample `⌊offset · rate⌋`, `⌊duration · rate⌋` samples (to
/// the end when `None`), clamped to the file.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Range {
    /// Seconds, finite and ≥ 0.
    pub offset_s: f64,
    /// Seconds, finite and ≥ 0; `None`: to the end.
    pub duration_s: Option<f64>,
}

impl Range {
    /// The sample indices of this range in a file of `len` samples at `rate`.
    pub fn samples(&self, rate: u32, len: usize) -> std::ops::Range<usize> {
        let at = |s: f64| (s * f64::from(rate)).floor().clamp(0.0, len as f64) as usize;
        let start = at(self.offset_s);
        let end = match self.duration_s {
            Some(d) => start.saturating_add(at(d)).min(len),
            None => len,
        };
        start..end
    }
}

/// [`decode_capped`], then only the samples of `range` kept in `out`.
pub fn decode_range(
    bytes: &[u8],
    (channels, max_frames): (Channels, usize),
    range: Range,
    out: &mut Vec<f32>,
) -> Result<Native, Error> {
    let native = decode_capped(bytes, channels, max_frames, out)?;
    let keep = range.samples(native.sample_rate, out.len());
    out.truncate(keep.end);
    out.drain(..keep.start);
    Ok(native)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// soundfile's arithmetic: ⌊offset · rate⌋ and ⌊duration · rate⌋ (0.7 s
    /// at 22,050 Hz is 15,434 samples: 0.7 · 22050 = 15434.999…), clamped
    /// to the file, empty past its end.
    #[test]
    fn a_range_is_librosas_samples_clamped_to_the_file() {
        let r = |offset_s, duration_s| Range {
            offset_s,
            duration_s,
        };
        assert_eq!(r(0.3, Some(0.7)).samples(22050, 60_000), 6615..22049);
        assert_eq!(r(0.0, None).samples(16000, 100), 0..100);
        assert_eq!(r(0.25, None).samples(16000, 16000), 4000..16000);
        assert_eq!(r(2.0, Some(1.0)).samples(16000, 16000), 16000..16000);
        assert_eq!(r(0.5, Some(10.0)).samples(16000, 16000), 8000..16000);
        assert_eq!(r(0.0, Some(0.0)).samples(16000, 16000), 0..0);
    }
}
