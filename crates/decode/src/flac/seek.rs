//! The bytes of a FLAC file that one segment needs, planned from its
//! metadata alone: from the SEEKTABLE's last seek point at or before the
//! segment's first sample to its first seek point at or past the segment's
//! end (or the end of the file). The metadata blocks go in front, STREAMINFO
//! saying "length unknown" (the part holds fewer samples than the stream),
//! so prefix + extent is a FLAC stream the decoder takes as it is, whose
//! first frame starts at the seek point's sample ([`Extent::base_frame`];
//! `super::decode_from` expects the frames from there).
//!
//! A file without a SEEKTABLE (ffmpeg writes none) has its frames searched
//! for instead, with small reads at plan time ([`bisect`], [`Head::search`]);
//! one whose seek points do not narrow the segment down gets no extent: it
//! is read whole and decoded from its start up to the segment's end.

use crate::segment::Segment;

pub mod bisect;

/// Where one segment's frames are, and the metadata that goes in front.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extent {
    /// The file's metadata blocks, STREAMINFO's sample count set to 0.
    pub prefix: Vec<u8>,
    /// File offset and length of the frames.
    pub start: u64,
    pub len: u64,
    /// The stream's sample at which the first of those frames starts.
    pub base_frame: u64,
}

/// What a FLAC file's metadata says, enough to place segments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    prefix: Vec<u8>,
    pub sample_rate: u32,
    info: super::StreamInfo,
    /// File offset of the first frame.
    audio: u64,
    file_len: u64,
    /// (sample, offset from the first frame) of each seek point, in order;
    /// empty: no SEEKTABLE (or one out of order), the frames are searched.
    points: Vec<(u64, u64)>,
    /// What the searches learnt of the frames (no seek points).
    frames: bisect::Frames,
}

/// The metadata of a FLAC file from its first bytes `head` (every metadata
/// block must be in them) and the file's length; None when `head` is not
/// one or is cut inside its metadata.
pub fn head(head: &[u8], file_len: u64) -> Option<Head> {
    let info = super::stream_info(head).ok()?;
    let audio = super::first_frame(head).ok()?;
    let mut points = Vec::new();
    let mut pos = 4;
    while pos < audio {
        let block_type = head[pos] & 0x7F;
        let len = u32::from_be_bytes([0, head[pos + 1], head[pos + 2], head[pos + 3]]) as usize;
        if block_type == 3 {
            for p in head[pos + 4..pos + 4 + len].chunks_exact(18) {
                let sample = u64::from_be_bytes(p[..8].try_into().expect("8 bytes"));
                let offset = u64::from_be_bytes(p[8..16].try_into().expect("8 bytes"));
                if sample != u64::MAX {
                    points.push((sample, offset));
                }
            }
        }
        pos += 4 + len;
    }
    // Seek points are sorted by sample; a table that is not is not used.
    if points.windows(2).any(|w| w[0] >= w[1]) {
        points.clear();
    }
    let mut prefix = head[..audio].to_vec();
    // STREAMINFO bytes 18..26 pack rate, channels, bits and 36 bits of
    // sample count: the count becomes 0, "unknown".
    let packed = u64::from_be_bytes(prefix[18..26].try_into().expect("8 bytes"));
    prefix[18..26].copy_from_slice(&(packed & !0xF_FFFF_FFFF).to_be_bytes());
    Some(Head {
        prefix,
        sample_rate: info.sample_rate,
        info,
        audio: audio as u64,
        file_len,
        points,
        frames: bisect::Frames::default(),
    })
}

impl Head {
    /// The stream's length in frames, as STREAMINFO states it (None: 0,
    /// "unknown").
    pub fn total_frames(&self) -> Option<u64> {
        (self.info.total_samples > 0).then_some(self.info.total_samples)
    }

    /// The extent holding `seg` (its offset and duration), or None when
    /// it would be the whole file or the seek points are out of the file.
    pub fn extent(&self, seg: &Segment) -> Option<Extent> {
        let (first, count) = seg.frames(self.sample_rate);
        let from = self.points.iter().rev().find(|p| p.0 <= first)?;
        let end = count.map(|n| first.saturating_add(n));
        let to = end.and_then(|e| self.points.iter().find(|p| p.0 >= e));
        let start = self.audio.checked_add(from.1)?;
        let stop = match to {
            Some(p) => self.audio.checked_add(p.1)?,
            None => self.file_len,
        };
        if stop > self.file_len || stop <= start || (start == self.audio && to.is_none()) {
            return None;
        }
        Some(Extent {
            prefix: self.prefix.clone(),
            start,
            len: stop - start,
            base_frame: from.0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `fLaC`, STREAMINFO (1 kHz, mono, 16-bit, 40,000 samples) and a
    /// SEEKTABLE (points every 10,000 samples, 1,000 bytes apart, and one
    /// placeholder), then `frames` bytes of "frames".
    fn flac(frames: usize) -> Vec<u8> {
        let mut b = b"fLaC\x00\x00\x00\x22".to_vec();
        let mut info = vec![0u8; 34];
        info[..4].copy_from_slice(&[0x10, 0x00, 0x10, 0x00]); // 4096-sample blocks
        let packed: u64 = (1000 << 44) | (15 << 36) | 40_000;
        info[10..18].copy_from_slice(&packed.to_be_bytes());
        b.extend_from_slice(&info);
        b.extend_from_slice(&[0x83, 0, 0, 5 * 18]);
        for i in 0..4u64 {
            b.extend_from_slice(&(i * 10_000).to_be_bytes());
            b.extend_from_slice(&(i * 1_000).to_be_bytes());
            b.extend_from_slice(&4096u16.to_be_bytes());
        }
        b.extend_from_slice(&u64::MAX.to_be_bytes());
        b.extend_from_slice(&[0; 10]);
        b.resize(b.len() + frames, 0xAB);
        b
    }

    fn seg(offset_s: f64, duration_s: Option<f64>) -> Segment {
        Segment {
            offset_s,
            duration_s,
            ..Segment::default()
        }
    }

    #[test]
    fn a_segment_reads_from_the_point_before_it_to_the_point_after_it() {
        let file = flac(4_000);
        let audio = (file.len() - 4_000) as u64;
        let h = head(&file[..audio as usize], file.len() as u64).unwrap();
        assert_eq!(h.sample_rate, 1000);
        let e = h.extent(&seg(12.5, Some(3.0))).unwrap();
        assert_eq!(
            (e.start, e.len, e.base_frame),
            (audio + 1_000, 1_000, 10_000)
        );
        // STREAMINFO's sample count is 0 ("unknown") in the prefix, the
        // rest of it as it was.
        assert_eq!(
            super::super::stream_info(&file).unwrap().total_samples,
            40_000
        );
        let mut part = e.prefix.clone();
        part.resize(part.len() + 4096, 0);
        let info = super::super::stream_info(&part).unwrap();
        assert_eq!(
            (info.total_samples, info.sample_rate, info.bits),
            (0, 1000, 16)
        );
        // A segment ending exactly on a point stops there; one running past
        // the last point reads to the end of the file.
        let e = h.extent(&seg(10.0, Some(10.0))).unwrap();
        assert_eq!(
            (e.start, e.len, e.base_frame),
            (audio + 1_000, 1_000, 10_000)
        );
        let e = h.extent(&seg(25.0, None)).unwrap();
        assert_eq!(
            (e.start, e.len, e.base_frame),
            (audio + 2_000, 2_000, 20_000)
        );
        // From the first point to the end is the whole file: no range.
        assert_eq!(h.extent(&seg(1.0, Some(100.0))), None);
        // Points past the end of the file are not trusted.
        let short = head(&file[..audio as usize], audio + 1_500).unwrap();
        assert_eq!(short.extent(&seg(25.0, Some(1.0))), None);
    }

    #[test]
    fn no_seek_table_no_extent_from_points() {
        let mut file = flac(100);
        file[42] = 0x81; // the SEEKTABLE becomes an unknown block type 1
        let audio = file.len() - 100;
        let h = head(&file[..audio], file.len() as u64).unwrap();
        assert_eq!(h.extent(&seg(1.0, Some(1.0))), None);
        assert_eq!(head(b"RIFF\0\0\0\0WAVE", 12), None);
    }
}
