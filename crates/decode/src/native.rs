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
    match super::clip::container(bytes)? {
        Container::Wav => {
            let info = wav::parse(bytes)?;
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
            let info = flac::decode(bytes, channels, usize::MAX, out)?;
            Ok(Native {
                container: Container::Flac,
                sample_rate: info.sample_rate,
                channels: info.channels,
            })
        }
        Container::Compressed(codec) => compressed_whole(bytes, codec, channels, out),
    }
}

fn compressed_whole(
    bytes: &[u8],
    codec: Codec,
    channels: Channels,
    out: &mut Vec<f32>,
) -> Result<Native, Error> {
    let head = compressed::open(bytes)?.decode(channels, usize::MAX, out)?;
    Ok(Native {
        container: Container::Compressed(codec),
        sample_rate: head.sample_rate,
        channels: head.channels,
    })
}
