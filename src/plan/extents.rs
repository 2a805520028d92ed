//! Each planned item's segment and byte range, by path index, in 9 bytes
//! for a whole file and 17 for a plain segment.
//!
//! A manifest row is most often a whole file with its stated duration, or a
//! plain segment (offset, duration, maybe a channel): a few flags and one
//! or two numbers, held in columns: a tag byte and `b` (the duration) for
//! every row, the offsets and channels only once some row has one. A row
//! whose byte range the planner worked out (a WAV or FLAC part, an
//! MP3/Ogg/M4A part placed in its whole-file decode, an archive member, a
//! spill) keeps its whole [`Segment`] and [`ReadRange`] beside the columns,
//! and its `b` holds where. `Option<Segment>` and `Option<ReadRange>` side
//! by side are 144 bytes a row, whatever the row.

use crate::model::{Rounding, Segment};
use crate::reader::ReadRange;

/// A segment (else the whole file, unchecked).
const SOME: u8 = 1;
/// `b` is `duration_s`.
const DURATION: u8 = 2;
/// `b` is `expect_s`.
const EXPECT: u8 = 4;
/// The row has a channel (in `channels`).
const CHANNEL: u8 = 8;
/// lhotse's rounding, not librosa's.
const LHOTSE: u8 = 16;
/// The row is `rich[b]` (`b`'s bits are the index).
const RICH: u8 = 32;

/// The rows' segments and ranges, by path index (module doc).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Extents {
    tags: Vec<u8>,
    b: Vec<f64>,
    /// Each row's offset; empty while every offset is 0.
    offsets: Vec<f64>,
    /// Each row's channel (with [`CHANNEL`]); empty while no row has one.
    channels: Vec<u16>,
    rich: Vec<(Option<Segment>, Option<ReadRange>)>,
}

impl Extents {
    /// Appends the next row's segment and range.
    pub fn push(&mut self, segment: Option<Segment>, range: Option<ReadRange>) {
        self.tags.push(0);
        self.b.push(0.0);
        if !self.offsets.is_empty() {
            self.offsets.push(0.0);
        }
        if !self.channels.is_empty() {
            self.channels.push(0);
        }
        self.set(self.tags.len() - 1, segment, range);
    }

    /// Replaces row `i`'s segment and range.
    pub fn set(&mut self, i: usize, segment: Option<Segment>, range: Option<ReadRange>) {
        let (tag, b, offset, channel) = match (segment, range) {
            (None, None) => (0, 0.0, 0.0, 0),
            (Some(s), None) if plain(&s) => {
                let (b, which) = match (s.duration_s, s.expect_s) {
                    (Some(d), None) => (d, DURATION),
                    (None, Some(e)) => (e, EXPECT),
                    _ => (0.0, 0),
                };
                let lhotse = if s.rounding == Rounding::Lhotse {
                    LHOTSE
                } else {
                    0
                };
                let chan = if s.channel.is_some() { CHANNEL } else { 0 };
                let tag = SOME | which | lhotse | chan;
                (tag, b, s.offset_s, s.channel.unwrap_or(0))
            }
            (segment, range) => {
                let at = self.rich.len() as u64;
                self.rich.push((segment, range));
                (RICH, f64::from_bits(at), 0.0, 0)
            }
        };
        self.tags[i] = tag;
        self.b[i] = b;
        // An offset of -0.0 is kept as itself: its bits are not 0.0's.
        if offset.to_bits() != 0 || !self.offsets.is_empty() {
            self.offsets.resize(self.tags.len(), 0.0);
            self.offsets[i] = offset;
        }
        // Channel 0 is a channel too: the tag says whether there is one.
        if tag & CHANNEL != 0 || !self.channels.is_empty() {
            self.channels.resize(self.tags.len(), 0);
            self.channels[i] = channel;
        }
    }

    /// Row `i`'s segment, if it has one.
    pub fn segment(&self, i: usize) -> Option<Segment> {
        let tag = self.tags[i];
        if tag & RICH != 0 {
            return self.rich[self.b[i].to_bits() as usize].0;
        }
        if tag & SOME == 0 {
            return None;
        }
        let b = |f: u8| (tag & f != 0).then_some(self.b[i]);
        Some(Segment {
            offset_s: self.offsets.get(i).copied().unwrap_or(0.0),
            duration_s: b(DURATION),
            expect_s: b(EXPECT),
            channel: (tag & CHANNEL != 0).then(|| self.channels[i]),
            rounding: if tag & LHOTSE != 0 {
                Rounding::Lhotse
            } else {
                Rounding::Librosa
            },
            ..Segment::default()
        })
    }

    /// Row `i`'s byte range, if the planner gave it one.
    pub fn range(&self, i: usize) -> Option<ReadRange> {
        (self.tags[i] & RICH != 0)
            .then(|| self.rich[self.b[i].to_bits() as usize].1.clone())
            .flatten()
    }

    /// Rows with a byte range.
    pub fn ranged(&self) -> usize {
        let ranged = |i: usize| self.rich[self.b[i].to_bits() as usize].1.is_some();
        (0..self.len())
            .filter(|&i| self.tags[i] & RICH != 0 && ranged(i))
            .count()
    }

    pub fn len(&self) -> usize {
        self.tags.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tags.is_empty()
    }

    /// Bytes held by the columns (the rich rows' own not counted).
    pub fn column_bytes(&self) -> usize {
        self.tags.capacity()
            + 8 * (self.b.capacity() + self.offsets.capacity())
            + 2 * self.channels.capacity()
    }

    /// Frees the spare capacity once every row is in.
    pub fn shrink_to_fit(&mut self) {
        self.tags.shrink_to_fit();
        self.b.shrink_to_fit();
        self.offsets.shrink_to_fit();
        self.channels.shrink_to_fit();
        self.rich.shrink_to_fit();
    }
}

/// Whether `s` is what the columns hold: no seek base, no lossy placement,
/// and not both a duration and a stated duration.
fn plain(s: &Segment) -> bool {
    s.base_frame == 0 && s.lossy.is_none() && !(s.duration_s.is_some() && s.expect_s.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::LossyPart;

    #[test]
    fn every_kind_of_row_reads_back_as_it_was_pushed() {
        let seg = |offset_s, duration_s, expect_s| Segment {
            offset_s,
            duration_s,
            expect_s,
            ..Segment::default()
        };
        let range = ReadRange::new(vec![1, 2, 3], 44, 8000);
        let rows: Vec<(Option<Segment>, Option<ReadRange>)> = vec![
            (None, None),
            (Some(seg(0.0, None, Some(0.5))), None),
            (Some(seg(1.25, Some(0.1), None)), None),
            (Some(seg(0.0, None, None)), None),
            (
                Some(Segment {
                    channel: Some(0),
                    ..seg(0.0, Some(2.0), None)
                }),
                None,
            ),
            (
                Some(Segment {
                    channel: Some(3),
                    rounding: Rounding::Lhotse,
                    ..seg(7.0, Some(2.0), None)
                }),
                None,
            ),
            (Some(seg(1.0, Some(1.0), Some(9.0))), None),
            (
                Some(Segment {
                    base_frame: 4096,
                    ..seg(1.0, Some(1.0), None)
                }),
                Some(range.clone()),
            ),
            (
                Some(Segment {
                    lossy: Some(LossyPart {
                        origin: 529,
                        first: Some(1152),
                        length: None,
                    }),
                    ..seg(3.0, Some(0.5), None)
                }),
                Some(range.clone()),
            ),
            (Some(seg(0.5, Some(0.25), None)), Some(range.clone())),
            (None, Some(range)),
            (Some(seg(f64::MIN_POSITIVE, Some(1e-300), None)), None),
        ];
        let mut e = Extents::default();
        for (s, r) in &rows {
            e.push(*s, r.clone());
        }
        assert_eq!(e.len(), rows.len());
        for (i, (s, r)) in rows.iter().enumerate() {
            assert_eq!(e.segment(i), *s, "row {i}");
            assert_eq!(e.range(i), *r, "row {i}");
        }
        assert_eq!(e.ranged(), 4);
        assert_eq!(e.rich.len(), 5, "only the rows two numbers cannot say");
        e.set(1, rows[7].0, rows[7].1.clone());
        assert_eq!((e.segment(1), e.range(1)), rows[7].clone());
        e.set(7, None, None);
        assert_eq!((e.segment(7), e.range(7)), (None, None));
    }

    #[test]
    fn channel_0_alone_is_a_channel() {
        let s = Segment {
            channel: Some(0),
            rounding: Rounding::Lhotse,
            ..Segment::default()
        };
        let mut e = Extents::default();
        e.push(None, None);
        e.push(Some(s), None);
        assert_eq!((e.segment(0), e.segment(1)), (None, Some(s)));
    }

    #[test]
    fn whole_files_cost_9_bytes_and_segments_17() {
        let mut e = Extents::default();
        let whole = Segment {
            expect_s: Some(0.5),
            ..Segment::default()
        };
        for _ in 0..1000 {
            e.push(Some(whole), None);
        }
        e.shrink_to_fit();
        assert_eq!(e.column_bytes(), 9 * 1000);
        let part = Segment {
            offset_s: 2.5,
            duration_s: Some(1.0),
            ..Segment::default()
        };
        for _ in 0..1000 {
            e.push(Some(part), None);
        }
        e.shrink_to_fit();
        assert_eq!(e.column_bytes(), 17 * 2000);
        assert_eq!(e.segment(0), Some(whole), "the offsets filled in behind");
        assert_eq!(e.segment(1999), Some(part));
    }
}
