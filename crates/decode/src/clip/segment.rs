//! A manifest item's part of a file ([`Segment`]) → its samples, as
//! `librosa.load(path, sr, mono=True, offset, duration)` gives them: the
//! native frames `int(offset · rate)` onward, `int(duration · rate)` of them,
//! cut before the channels are combined (or one channel taken, a lhotse
//! cut's) and before resampling, so the resampler sees exactly librosa's
//! input.
//!
//! Decoding stops at the segment's end; a WAV is read in place. A source
//! that could read only a segment's bytes hands over a WAV cut to them, with
//! a segment that starts at 0; part of a FLAC stream from a seek point,
//! whose sample is the segment's `base_frame`; or part of an MP3 or Ogg
//! stream from a frame or page (MP4: access unit) a pre-roll before the
//! segment, with its `lossy` placement: the part's decoder says which
//! whole-file sample its first output is, and the pre-roll before the
//! segment is dropped (`plan::manifest`, `decode::compressed::index`).
//! Any other compressed stream (an MP4 segment past the first access unit
//! that may code perceptual noise, or a recording without an index) is
//! decoded from its start up to the segment's end, its frames before the
//! segment dropped, unless the source spilled the recording's decode to a
//! float WAV: the segment is then a WAV cut to it
//! (`plan::manifest::spill`).
//!
//! A whole-file item that states its duration ([`Segment::expect_s`]) is
//! decoded whole and checked against it.

use super::{ClipDecoder, Container, Decoded, Error, Out, check_channels, container};
use crate::compressed;
use crate::flac;
use crate::policy::{Channels, Mix};
use crate::segment::Segment;
use crate::wav::{self, WavInfo};

/// The container of `bytes`; a part of an MP3, Ogg or MP4 AAC stream
/// (`compressed::index`) is its codec's, an AAC part starting with its own
/// header, no container's.
fn part_container(bytes: &[u8], seg: &Segment) -> Result<Container, Error> {
    match seg.lossy {
        Some(_) if compressed::is_aac_part(bytes) => {
            Ok(Container::Compressed(compressed::Codec::Aac))
        }
        _ => container(bytes),
    }
}

impl ClipDecoder {
    /// The samples of `seg` of the file in `bytes` into `out`.
    pub(super) fn segment(
        &mut self,
        bytes: &[u8],
        seg: &Segment,
        out: Out<'_>,
    ) -> Result<Decoded, Error> {
        let kind = part_container(bytes, seg)?;
        let part = match (kind, seg.lossy) {
            (Container::Compressed(_), Some(p)) => Some(compressed::open_part(bytes, p)?),
            _ => None,
        };
        let (rate, channels) = match (kind, &part) {
            (Container::Wav, _) => {
                let info = wav::parse(bytes)?;
                (info.sample_rate, info.channels)
            }
            (Container::Flac, _) => {
                let head = flac::stream_info(bytes)?;
                (head.sample_rate, head.channels)
            }
            (Container::Compressed(_), Some(p)) => (p.head().sample_rate, p.head().channels),
            (Container::Compressed(_), None) => {
                let head = compressed::open(bytes)?.head();
                (head.sample_rate, head.channels)
            }
        };
        let mode = self.channel_mode(seg, channels)?;
        self.check_rate(rate)?;
        let (first, count) = seg.frames(rate);
        // The last frame wanted, in the file (None: to the end).
        let last = match (seg.expect_s, count) {
            (Some(_), _) | (None, None) => None,
            (None, Some(n)) => Some(first.saturating_add(n)),
        };
        let rel = |n: u64, base: u64| usize::try_from(n.saturating_sub(base)).unwrap_or(usize::MAX);
        let base = match kind {
            Container::Wav => {
                self.wav_part(bytes, mode, last.map_or(usize::MAX, |n| rel(n, 0)));
                0
            }
            Container::Flac => {
                // The bytes start at `base_frame` (a part of a FLAC stream),
                // which the source placed at or before the segment.
                let end = last.map_or(usize::MAX, |n| rel(n, seg.base_frame));
                flac::decode_from(bytes, mode.policy(), end, seg.base_frame, &mut self.native)?;
                seg.base_frame
            }
            Container::Compressed(_) => match part {
                Some(p) => p.decode(mode.policy(), last.unwrap_or(u64::MAX), &mut self.native)?,
                None => {
                    let end = last.map_or(usize::MAX, |n| rel(n, 0));
                    compressed::open(bytes)?.decode(mode.policy(), end, &mut self.native)?;
                    0
                }
            },
        };
        debug_assert!(base <= first, "{seg:?} starts before its bytes");
        let start = rel(first, base);
        let end = last.map_or(usize::MAX, |n| rel(n, base));
        let total = self.native.len();
        let file_s = |n: usize| (n as u64 + base) as f64 / f64::from(rate);
        if let Some(stated) = seg.expect_s {
            let file_s = file_s(total);
            if (file_s - stated).abs() > Segment::DURATION_TOLERANCE_S {
                return Err(Error::DurationMismatch { stated, file_s });
            }
        }
        if start >= total {
            return Err(Error::OffsetPastEnd {
                offset_s: seg.offset_s,
                file_s: file_s(total),
            });
        }
        self.native.truncate(end.min(total));
        self.native.drain(..start);
        self.deliver(kind, rate, channels, out)
    }

    /// How the channels become one: the cut's channel, or the policy.
    fn channel_mode(&self, seg: &Segment, channels: u16) -> Result<Mode, Error> {
        let Some(c) = seg.channel else {
            check_channels(channels, self.policy)?;
            return Ok(match self.policy.channels {
                Channels::First if channels > 1 => Mode::One(0),
                c => Mode::Policy(c),
            });
        };
        if c >= channels {
            return Err(Error::NoSuchChannel {
                channel: c,
                channels,
            });
        }
        Ok(if channels == 1 {
            Mode::Policy(Channels::Mean)
        } else {
            Mode::One(c)
        })
    }

    /// The WAV's frames below `end` into `self.native`, as `mode` says.
    fn wav_part(&mut self, bytes: &[u8], mode: Mode, end: usize) {
        let info = wav::parse(bytes).expect("parsed before");
        let part = WavInfo {
            frames: info.frames.min(end),
            ..info
        };
        self.native.clear();
        self.native.resize(part.frames, 0.0);
        match mode {
            Mode::One(c) => {
                wav::decode_channel_into(bytes, &part, usize::from(c), &mut self.native)
            }
            Mode::Policy(_) => wav::decode_mono_into(bytes, &part, &mut self.native),
        }
    }
}

/// One channel, or the policy's combination.
#[derive(Clone, Copy)]
enum Mode {
    One(u16),
    Policy(Channels),
}

impl Mode {
    /// As the FLAC and compressed decoders take it.
    fn policy(self) -> Mix {
        match self {
            Mode::One(c) => Mix::Channel(c),
            Mode::Policy(c) => c.into(),
        }
    }
}
