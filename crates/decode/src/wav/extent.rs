//! The bytes of a WAV file that one segment needs, planned from its header
//! alone: the header rewritten to declare exactly the segment's samples,
//! and the file extent those samples occupy. Prefix + extent is a WAV file
//! that [`super::parse`] accepts and that decodes to the segment's samples,
//! so the decoder needs nothing else to know (the reader stage reads such a
//! range with one `pread`: `reader::ReadRange`).
//!
//! Only the plan is made here; whatever the header hides (an unsupported
//! format, non-finite samples) is found by the decoder, as for a whole file.

use crate::segment::Segment;

/// Where one segment's samples are and the header that declares them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extent {
    /// The file's bytes up to its first sample, with the RIFF and `data`
    /// sizes set for the segment.
    pub prefix: Vec<u8>,
    /// File offset and length of the segment's samples.
    pub start: u64,
    pub len: u64,
}

/// What the header of a WAV says, enough to place segments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    /// The file's bytes up to its first sample.
    pub bytes: Vec<u8>,
    pub sample_rate: u32,
    pub block_align: u16,
    /// Frames the `data` chunk declares (capped by the file's length).
    pub frames: u64,
}

/// The header of a RIFF/WAVE file from its first bytes `head` (the whole
/// header must be in them) and the file's length; None when `head` is not
/// one or is cut before the first sample.
pub fn head(head: &[u8], file_len: u64) -> Option<Head> {
    if head.len() < 12 || &head[..4] != b"RIFF" || &head[8..12] != b"WAVE" {
        return None;
    }
    let mut pos = 12usize;
    let mut fmt: Option<(u32, u16)> = None;
    while let Some(h) = head.get(pos..pos + 8) {
        let size = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as u64;
        let body = pos + 8;
        match &h[..4] {
            b"fmt " => {
                let f = head.get(body..body + 14)?;
                let rate = u32::from_le_bytes([f[4], f[5], f[6], f[7]]);
                let align = u16::from_le_bytes([f[12], f[13]]);
                fmt = Some((rate, align));
            }
            b"data" => {
                let (sample_rate, block_align) = fmt?;
                if block_align == 0 || sample_rate == 0 {
                    return None;
                }
                let data = size.min(file_len.saturating_sub(body as u64));
                return Some(Head {
                    bytes: head[..body].to_vec(),
                    sample_rate,
                    block_align,
                    frames: data / u64::from(block_align),
                });
            }
            _ => {}
        }
        // Chunks are padded to even sizes.
        pos = usize::try_from(body as u64 + size + (size & 1)).ok()?;
    }
    None
}

impl Head {
    /// The extent of `seg` (offset and duration only: the channel is the
    /// decoder's); None when the segment starts at or past the last frame
    /// (the decoder then reads the whole file and names the problem).
    pub fn extent(&self, seg: &Segment) -> Option<Extent> {
        let (start, count) = seg.frames(self.sample_rate);
        if start >= self.frames {
            return None;
        }
        let frames = count.map_or(self.frames - start, |n| n.min(self.frames - start));
        if frames == 0 {
            return None;
        }
        let align = u64::from(self.block_align);
        let len = frames * align;
        let data_len = u32::try_from(len).ok()?;
        let mut prefix = self.bytes.clone();
        let n = prefix.len();
        prefix[n - 4..].copy_from_slice(&data_len.to_le_bytes());
        let riff = u32::try_from(n as u64 - 8 + len).ok()?;
        prefix[4..8].copy_from_slice(&riff.to_le_bytes());
        Some(Extent {
            start: n as u64 + start * align,
            len,
            prefix,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 16-bit WAV of `frames` frames of `ch` channels, with a LIST chunk
    /// of odd size before `data` (padding byte included).
    fn wav(frames: usize, ch: u16, rate: u32) -> Vec<u8> {
        let mut b = b"RIFF\0\0\0\0WAVEfmt \x10\0\0\0\x01\0".to_vec();
        b.extend_from_slice(&ch.to_le_bytes());
        b.extend_from_slice(&rate.to_le_bytes());
        b.extend_from_slice(&(rate * 2 * u32::from(ch)).to_le_bytes());
        b.extend_from_slice(&(2 * ch).to_le_bytes());
        b.extend_from_slice(b"\x10\0LIST\x03\0\0\0abc\0data");
        let data: Vec<u8> = (0..frames * usize::from(ch))
            .flat_map(|i| ((i as i16).wrapping_mul(7)).to_le_bytes())
            .collect();
        b.extend_from_slice(&(data.len() as u32).to_le_bytes());
        b.extend_from_slice(&data);
        let riff = (b.len() - 8) as u32;
        b[4..8].copy_from_slice(&riff.to_le_bytes());
        b
    }

    /// Prefix + extent decodes to exactly the segment's samples of the
    /// whole file, for librosa's truncating frame arithmetic.
    #[test]
    fn prefix_and_extent_are_the_segment_as_a_wav() {
        let file = wav(10_000, 2, 8_000);
        let h = head(&file[..200], file.len() as u64).unwrap();
        assert_eq!((h.sample_rate, h.block_align, h.frames), (8_000, 4, 10_000));
        let whole = super::super::parse(&file).unwrap();
        let mut all = vec![0f32; whole.frames];
        super::super::decode_mono_into(&file, &whole, &mut all);
        for (offset_s, duration_s) in [(0.1234, Some(0.2)), (1.0, None), (1.2, Some(5.0))] {
            let seg = Segment {
                offset_s,
                duration_s,
                ..Segment::default()
            };
            let e = h.extent(&seg).unwrap();
            let mut cut = e.prefix.clone();
            cut.extend_from_slice(&file[e.start as usize..(e.start + e.len) as usize]);
            let info = super::super::parse(&cut).unwrap();
            let mut got = vec![0f32; info.frames];
            super::super::decode_mono_into(&cut, &info, &mut got);
            let first = (offset_s * 8_000.0) as usize;
            let n = duration_s.map_or(10_000 - first, |d| {
                ((d * 8_000.0) as usize).min(10_000 - first)
            });
            assert_eq!(got, all[first..first + n], "{offset_s} {duration_s:?}");
        }
        let past = Segment {
            offset_s: 1.25,
            ..Segment::default()
        };
        assert_eq!(h.extent(&past), None);
        assert_eq!(head(b"fLaC\0\0\0\0\0\0\0\0", 12), None);
        assert_eq!(head(&file[..40], file.len() as u64), None);
    }
}
