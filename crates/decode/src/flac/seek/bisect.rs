//! Seeking in a FLAC file without a SEEKTABLE (ffmpeg writes none): the
//! frames a segment needs are found with small reads at plan time, as
//! libFLAC's seek finds them, instead of reading and decoding the file from
//! its start.
//!
//! A frame is found by its header: the sync code (0xFFF8 for a stream of
//! fixed block size, 0xFFF9 for a variable one, as its first frame says),
//! fields that agree with STREAMINFO (channels, bit depth, sample rate, a
//! block size no larger than its maximum, a sample inside the stream) and
//! the header's CRC-8. Its first sample is the header's sample number (a
//! variable stream) or frame number × the block size of the first frame.
//! One header passing these checks by chance inside compressed data is
//! about 1 in 2^16 × 256 byte positions, so a frame is believed only when
//! the next header after it carries exactly its first sample + its block
//! size (or it ends the stream where STREAMINFO says the stream ends): two
//! chance headers agreeing so is beyond any corpus.
//!
//! The search keeps what it learnt ([`Frames`], per recording, in the
//! planner's cache): each frame believed, with where the next one starts.
//! For a sample it looks at the known frames around it; if none holds it,
//! it reads a probe ([`PROBE`]) around where the sample should be by
//! interpolation between them (by bisection after a probe that did not
//! halve the gap, so the gap at least halves every second probe), or the
//! whole gap once it is a few probes long. A search that makes no
//! progress gives up: the item is then read whole, as before.

use std::collections::BTreeMap;
use std::io;

use super::{Extent, Head};
use crate::flac::StreamInfo;
use crate::segment::Segment;

/// Bytes read per probe where STREAMINFO does not give the largest frame
/// (else two of those and a header, within 8–64 KiB): a probe must hold a
/// frame and the next one's header to believe it.
pub const PROBE: usize = 32 << 10;
/// A gap between two known frames of at most this many probes is read whole.
const SCAN_PROBES: usize = 3;
/// Probes per sample before the search gives up.
const MAX_PROBES: usize = 48;

/// Reads bytes of the file at an offset (`pread`): how many were read,
/// fewer only at the end of the file.
pub type ReadAt<'a> = dyn FnMut(u64, &mut [u8]) -> io::Result<usize> + 'a;

/// A frame believed: where it starts, its block size, where the next starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Frame {
    offset: u64,
    block: u64,
    /// The next frame's offset (the file's end after the last frame).
    next: u64,
}

/// What the search knows of one file's frames.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frames {
    /// Set by the first search: the stream's blocking strategy and its
    /// block size (fixed streams: the first frame's).
    stream: Option<(bool, u64)>,
    /// By first sample.
    known: BTreeMap<u64, Frame>,
    /// The first frame is not one: later searches do not try again.
    failed: bool,
}

/// One frame header at the start of `b`: its first sample, block size and
/// length (its CRC-8 included).
fn header(
    b: &[u8],
    info: &StreamInfo,
    (variable, fixed_block): (bool, u64),
) -> Option<(u64, u64, usize)> {
    if b.len() < 6 || b[0] != 0xFF || b[1] != 0xF8 | u8::from(variable) {
        return None;
    }
    let (bs, sr) = (b[2] >> 4, b[2] & 0x0F);
    let (ch, ss) = (b[3] >> 4, (b[3] >> 1) & 7);
    if bs == 0 || sr == 15 || b[3] & 1 != 0 || ch > 10 || ss == 3 {
        return None;
    }
    let channels = if ch < 8 { u16::from(ch) + 1 } else { 2 };
    let bits = [0, 8, 12, 0, 16, 20, 24, 32][usize::from(ss)];
    if channels != info.channels || (bits != 0 && bits != info.bits) {
        return None;
    }
    // The frame or sample number, coded as UTF-8 codes longer code points.
    let lead = b[4].leading_ones();
    let (mut number, extra) = match lead {
        0 => (u64::from(b[4]), 0),
        2..=7 => (u64::from(b[4] & (0x7F >> lead)), lead as usize - 1),
        _ => return None,
    };
    if !variable && extra > 5 {
        return None;
    }
    let mut p = 5;
    for _ in 0..extra {
        let c = *b.get(p)?;
        if c & 0xC0 != 0x80 {
            return None;
        }
        number = number << 6 | u64::from(c & 0x3F);
        p += 1;
    }
    let (block, rate, p) = block_and_rate(b, p, (bs, sr), info.sample_rate)?;
    if rate != info.sample_rate || block > u64::from(info.max_block.max(16)) {
        return None;
    }
    if *b.get(p)? != crc8(&b[..p]) {
        return None;
    }
    let sample = if variable {
        number
    } else {
        number * fixed_block
    };
    if info.total_samples != 0 && sample >= info.total_samples {
        return None;
    }
    Some((sample, block, p + 1))
}

/// A frame header's block size and sample rate from their codes `(bs, sr)`
/// and the bytes from `p` on that the codes may point to (`default`: the
/// rate STREAMINFO gives); also where the header goes on.
fn block_and_rate(
    b: &[u8],
    mut p: usize,
    (bs, sr): (u8, u8),
    default: u32,
) -> Option<(u64, u32, usize)> {
    const RATES: [u32; 12] = [
        0, 88_200, 176_400, 192_000, 8_000, 16_000, 22_050, 24_000, 32_000, 44_100, 48_000, 96_000,
    ];
    let be = |p: usize, n: usize| {
        b.get(p..p + n)
            .map(|s| s.iter().fold(0u64, |a, &x| a << 8 | u64::from(x)))
    };
    let block = match bs {
        1 => 192,
        2..=5 => 576 << (bs - 2),
        6 => be(p, 1)? + 1,
        7 => be(p, 2)? + 1,
        _ => 256 << (bs - 8),
    };
    p += match bs {
        6 => 1,
        7 => 2,
        _ => 0,
    };
    let rate = match sr {
        0 => default,
        12 => be(p, 1)? as u32 * 1000,
        13 => be(p, 2)? as u32,
        14 => be(p, 2)? as u32 * 10,
        _ => RATES[usize::from(sr)],
    };
    p += match sr {
        12 => 1,
        13 | 14 => 2,
        _ => 0,
    };
    Some((block, rate, p))
}

/// CRC-8 of a FLAC frame header (polynomial x^8 + x^2 + x + 1, init 0).
fn crc8(b: &[u8]) -> u8 {
    b.iter().fold(0u8, |mut c, &x| {
        c ^= x;
        for _ in 0..8 {
            c = if c & 0x80 != 0 { c << 1 ^ 0x07 } else { c << 1 };
        }
        c
    })
}

impl Head {
    /// The extent holding `seg`, found by searching the frames (reading
    /// through `read`) when the file has no seek points; None when it has
    /// some ([`Head::extent`] decides then), when the segment is the whole
    /// file, or when the search fails (the item is then read whole).
    pub fn search(&mut self, seg: &Segment, read: &mut ReadAt<'_>) -> Option<Extent> {
        if !self.points.is_empty() || self.frames.failed {
            return None;
        }
        let (start, stop, base_frame) = self.search_frames(seg, read).ok()??;
        if start == self.audio && stop >= self.file_len {
            return None;
        }
        Some(Extent {
            prefix: self.prefix.clone(),
            start,
            len: stop - start,
            base_frame,
        })
    }

    /// (start, stop, first sample) of the frames `seg` needs; Ok(None) when
    /// the segment starts past the stream; Err when the search fails.
    fn search_frames(
        &mut self,
        seg: &Segment,
        read: &mut ReadAt<'_>,
    ) -> Result<Option<(u64, u64, u64)>, ()> {
        if self.frames.stream.is_none() {
            let mut b = [0u8; 16];
            let n = read(self.audio, &mut b).map_err(drop)?;
            let variable = n >= 2 && b[1] == 0xF9;
            let probe = (variable, 1);
            let Some((_, block, _)) = header(&b[..n], &self.info, probe) else {
                self.frames.failed = true;
                return Err(());
            };
            self.frames.stream = Some((variable, block));
            self.learn_range(self.audio, self.probe_len(), read)?;
        }
        let (first, count) = seg.frames(self.info.sample_rate);
        let total = self.info.total_samples;
        if total != 0 && first >= total {
            return Ok(None);
        }
        let (base, from) = self.frame_of(first, read)?;
        let stop = match count {
            Some(n) if total == 0 || first + n.max(1) < total => {
                self.frame_of(first + n.max(1) - 1, read)?.1.next
            }
            _ => self.file_len,
        };
        Ok(Some((from.offset, stop, base)))
    }

    /// The frame holding `sample` (its first sample and where it is).
    fn frame_of(&mut self, sample: u64, read: &mut ReadAt<'_>) -> Result<(u64, Frame), ()> {
        let mut last_gap = u64::MAX;
        for _ in 0..MAX_PROBES {
            let (&ls, &lo) = self.frames.known.range(..=sample).next_back().ok_or(())?;
            if sample < ls + lo.block {
                return Ok((ls, lo));
            }
            // Between the frame after `lo` and the next known frame (or the
            // end of the file).
            let (hs, ho) = match self.frames.known.range(sample + 1..).next() {
                Some((&s, f)) => (Some(s), f.offset),
                None => (None, self.file_len),
            };
            let (ls, lo) = (ls + lo.block, lo.next);
            if lo >= ho {
                return Err(()); // the frame holding it is not in the file
            }
            let gap = ho - lo;
            let before = self.frames.known.len();
            let probe = self.probe_len();
            if gap <= (SCAN_PROBES * probe) as u64 {
                self.learn_range(lo, gap as usize + 16, read)?;
            } else {
                // Where the sample should be, by interpolation; by bisection
                // when the last probe did not halve the gap.
                let hs = hs.unwrap_or(self.info.total_samples).max(ls + 1);
                let frac = if gap > last_gap / 2 {
                    0.5
                } else {
                    (sample - ls) as f64 / (hs - ls) as f64
                };
                let at = (lo + (gap as f64 * frac) as u64).saturating_sub(probe as u64 / 2);
                self.learn_range(at.clamp(lo, ho - probe as u64), probe, read)?;
                if self.frames.known.len() == before {
                    // Nothing believed in the probe (frames longer than it):
                    // read the gap's start in full.
                    self.learn_range(lo, (gap as usize).min(SCAN_PROBES * probe), read)?;
                }
            }
            if self.frames.known.len() == before {
                return Err(());
            }
            last_gap = gap;
        }
        Err(())
    }

    /// Bytes per probe: two of the largest frames STREAMINFO declares and a
    /// header (8–64 KiB), or [`PROBE`] where it declares none.
    fn probe_len(&self) -> usize {
        // STREAMINFO's largest frame: 24 bits at bytes 15..18 of the file.
        let max = self.prefix[15..18]
            .iter()
            .fold(0usize, |a, &x| a << 8 | usize::from(x));
        if max == 0 {
            PROBE
        } else {
            (2 * max + 64).clamp(8 << 10, 64 << 10)
        }
    }

    /// Reads `len` bytes at `at` and records every frame believed in them
    /// (module doc) whose place agrees with the frames known.
    fn learn_range(&mut self, at: u64, len: usize, read: &mut ReadAt<'_>) -> Result<(), ()> {
        let mut buf = vec![0u8; len];
        let n = read(at, &mut buf).map_err(drop)?;
        buf.truncate(n);
        let stream = self.frames.stream.ok_or(())?;
        let found: Vec<(u64, u64, u64)> = (0..buf.len().saturating_sub(1))
            .filter(|&p| buf[p] == 0xFF && buf[p + 1] & 0xFE == 0xF8)
            .filter_map(|p| {
                let (s, b, _) = header(&buf[p..], &self.info, stream)?;
                Some((at + p as u64, s, b))
            })
            .collect();
        let total = self.info.total_samples;
        for (i, &(offset, sample, block)) in found.iter().enumerate() {
            let next = found[i + 1..]
                .iter()
                .find(|f| f.1 == sample + block)
                .map(|f| f.0)
                .or_else(|| (total != 0 && sample + block == total).then_some(self.file_len));
            if let Some(next) = next {
                self.believe(
                    sample,
                    Frame {
                        offset,
                        block,
                        next,
                    },
                );
            }
        }
        Ok(())
    }

    /// Records `f` (first sample `sample`) unless its place contradicts a
    /// known frame's (samples and offsets must rise together).
    fn believe(&mut self, sample: u64, f: Frame) {
        let k = &self.frames.known;
        let below = k.range(..sample).next_back();
        let above = k.range(sample + 1..).next();
        let fits = below.is_none_or(|(&s, b)| s + b.block <= sample && b.next <= f.offset)
            && above.is_none_or(|(&s, a)| sample + f.block <= s && f.next <= a.offset);
        if fits && k.get(&sample).is_none_or(|g| *g == f) {
            self.frames.known.insert(sample, f);
        }
    }
}

#[cfg(test)]
mod tests;
