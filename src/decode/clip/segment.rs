//! A manifest item's part of a file ([`Segment`]) → its samples, as
//! `librosa.load(path, sr, mono=True, offset, duration)` gives them: the
//! native frames `int(offset · rate)` onward, `int(duration · rate)` of them,
//! cut before the channels are combined (or one channel taken, a lhotse
//! cut's) and before resampling, so the resampler sees exactly librosa's
//! input.
//!
//! Decoding stops at the segment's end: a compressed stream is decoded from
//! its start up to there (its frames before the segment are decoded and
//! dropped); a WAV is read in place. A source that could read only a
//! segment's bytes hands over a WAV cut to them, with a segment that starts
//! at 0, or part of a FLAC stream from a seek point, whose sample is the
//! segment's `base_frame` (`source::manifest`).
//!
//! A whole-file item that states its duration ([`Segment::expect_s`]) is
//! decoded whole and checked against it.

use super::{ClipDecoder, Container, Decoded, Error, Out, check_channels, container};
use crate::decode::compressed;
use crate::decode::flac;
use crate::decode::policy::{Channels, Mix};
use crate::decode::wav::{self, WavInfo};
use crate::model::Segment;

impl ClipDecoder {
    /// The samples of `seg` of the file in `bytes` into `out`.
    pub(super) fn segment(
        &mut self,
        bytes: &[u8],
        seg: &Segment,
        out: Out<'_>,
    ) -> Result<Decoded, Error> {
        let kind = container(bytes)?;
        let (rate, channels) = match kind {
            Container::Wav => {
                let info = wav::parse(bytes)?;
                (info.sample_rate, info.channels)
            }
            Container::Flac => {
                let head = flac::stream_info(bytes)?;
                (head.sample_rate, head.channels)
            }
            Container::Compressed(_) => {
                let head = compressed::open(bytes)?.head();
                (head.sample_rate, head.channels)
            }
        };
        let mode = self.channel_mode(seg, channels)?;
        self.check_rate(rate)?;
        let (start, count) = seg.frames(rate);
        // The bytes start at `base_frame` (a part of a FLAC stream), which
        // the source placed at or before the segment.
        debug_assert!(seg.base_frame <= start, "{seg:?} starts before its bytes");
        let start = usize::try_from(start.saturating_sub(seg.base_frame)).unwrap_or(usize::MAX);
        let end = match (seg.expect_s, count) {
            (Some(_), _) | (None, None) => usize::MAX,
            (None, Some(n)) => start.saturating_add(usize::try_from(n).unwrap_or(usize::MAX)),
        };
        match kind {
            Container::Wav => self.wav_part(bytes, mode, end),
            Container::Flac => {
                flac::decode_from(bytes, mode.policy(), end, seg.base_frame, &mut self.native)?;
            }
            Container::Compressed(_) => {
                compressed::open(bytes)?.decode(mode.policy(), end, &mut self.native)?;
            }
        }
        let total = self.native.len();
        let file_s = |n: usize| (n as u64 + seg.base_frame) as f64 / f64::from(rate);
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
