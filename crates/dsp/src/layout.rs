//! Which STFT frames a clip needs, computed once per [`Spec`].
//!
//! Every output column `(l, s, f)` (long segment, short segment, frame) is the
//! spectrum of one `n_fft`-sample frame. Segments overlap (the default two-stage
//! layout puts 237 segments on 159 distinct frame starts), so a frame that lies
//! entirely inside its segment is keyed by its absolute start in the clip and
//! computed once, whichever segments use it. A frame that reaches into a
//! segment's centre padding (`center = true`) depends on that segment's edges and
//! is kept per segment.
//!
//! Invariant: `column.len() == n_long · n_short · n_frames` and every entry
//! indexes `frames`; every frame is used by at least one column.
//!
//! Reflect padding has one librosa quirk we reproduce: when head and tail frames
//! do not overlap, librosa.stft pads the tail separately, reflecting only the
//! piece `y[tail_k·hop − n_fft/2 ..]` (numpy's `reflect` bounces back and forth
//! inside that piece when it is shorter than the pad). With `hop ≥ n_fft/2`
//! (e.g. the default 512/256 layout with `center = true`) that changes the last
//! padded samples compared with reflecting the whole segment.

use std::collections::HashMap;

use super::spec::{PadMode, Spec};

/// Where one distinct frame's `n_fft` samples come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FrameSource {
    /// `clip[start .. start + n_fft]`, no padding involved.
    Clip { start: usize },
    /// Frame `f` of the centre-padded segment starting at `seg_start`: sample `j`
    /// is `seg[i]` for `patterns[pattern][j] == Some(i)`, zero for `None`.
    Padded { seg_start: usize, pattern: u32 },
}

/// Distinct frames of a clip and the frame behind every output column.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub frames: Vec<FrameSource>,
    /// Indexed by `(l · n_short + s) · n_frames + f`.
    pub column: Vec<u32>,
    /// Per padded frame position: segment index of each of the `n_fft` samples.
    /// All segments have the same length, so one pattern serves every segment.
    pub patterns: Vec<Vec<Option<u32>>>,
}

impl Layout {
    pub fn new(spec: &Spec) -> Layout {
        let len = spec.segment_samples();
        let seg_len = len as isize;
        let n_fft = spec.n_fft as isize;
        let half = if spec.center { n_fft / 2 } else { 0 };
        let n_frames = spec.n_frames();
        let hop = spec.hop_length as isize;
        // librosa.stft: frames before start_k use head padding; from tail_k on, tail
        // padding of the piece y[tail_k·hop − n_fft/2 ..] when tail_k > start_k.
        let start_k = (half + hop - 1) / hop;
        let tail_k = (seg_len + half - n_fft).div_euclid(hop) + 1;

        // Which frame positions touch the padding, and their sample patterns.
        let mut pattern_of = vec![None; n_frames];
        let mut patterns = Vec::new();
        for (f, slot) in pattern_of.iter_mut().enumerate() {
            let offset = (f * spec.hop_length) as isize - half;
            if offset >= 0 && offset + n_fft <= seg_len {
                continue;
            }
            let right_from = if tail_k > start_k && f as isize >= tail_k {
                (tail_k * hop - half) as usize
            } else {
                0
            };
            let pattern = (0..n_fft)
                .map(|j| padded_index(offset + j, len, spec.pad_mode, right_from).map(|i| i as u32))
                .collect();
            patterns.push(pattern);
            *slot = Some((patterns.len() - 1) as u32);
        }

        let mut frames = Vec::new();
        let mut by_start: HashMap<usize, u32> = HashMap::new();
        let mut column = Vec::with_capacity(spec.n_long() * spec.n_short() * n_frames);
        for l in 0..spec.n_long() {
            for s in 0..spec.n_short() {
                let seg_start = spec.segment_start(l, s);
                for (f, pattern) in pattern_of.iter().enumerate() {
                    let idx = match *pattern {
                        None => {
                            let start = seg_start + f * spec.hop_length - half as usize;
                            *by_start.entry(start).or_insert_with(|| {
                                frames.push(FrameSource::Clip { start });
                                (frames.len() - 1) as u32
                            })
                        }
                        Some(pattern) => {
                            frames.push(FrameSource::Padded { seg_start, pattern });
                            (frames.len() - 1) as u32
                        }
                    };
                    column.push(idx);
                }
            }
        }
        Layout {
            frames,
            column,
            patterns,
        }
    }
}

/// Index into a segment of length `len` for padded position `p`, or `None` for a
/// zero (constant padding).
///
/// Reflect is numpy's: mirror without repeating the edge, bouncing as often as
/// needed (period 2·(n − 1)). Positions left of the segment reflect over the whole
/// segment; positions right of it over `[right_from, len)` (see the module doc).
#[inline]
pub(crate) fn padded_index(
    p: isize,
    len: usize,
    mode: PadMode,
    right_from: usize,
) -> Option<usize> {
    let n = len as isize;
    if (0..n).contains(&p) {
        return Some(p as usize);
    }
    match mode {
        PadMode::Constant => None,
        PadMode::Reflect if p < 0 => Some(bounce(p, len)),
        PadMode::Reflect => {
            let from = right_from.min(len - 1);
            Some(from + bounce(p - from as isize, len - from))
        }
    }
}

/// numpy `reflect` for any distance: the triangle wave of period 2·(n − 1).
#[inline]
fn bounce(p: isize, n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    let period = 2 * (n as isize - 1);
    let q = p.rem_euclid(period);
    (if q >= n as isize { period - q } else { q }) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_layout_shares_frames_across_segments() {
        let spec = Spec::default();
        let layout = Layout::new(&spec);
        assert_eq!(layout.column.len(), 237);
        // Frame starts are the multiples of 256 that leave room for 512 samples.
        assert_eq!(layout.frames.len(), (40960 - 512) / 256 + 1);
        assert!(
            layout
                .frames
                .iter()
                .all(|f| matches!(f, FrameSource::Clip { start } if start % 256 == 0))
        );
        // (l, s) = (1, 0) and (0, 2) both start at 512.
        assert_eq!(layout.column[3], layout.column[2]);
    }

    #[test]
    fn centred_edge_frames_are_per_segment() {
        let spec = Spec {
            center: true,
            pad_mode: PadMode::Reflect,
            ..Spec::default()
        };
        let layout = Layout::new(&spec);
        // 3 frames per segment: the first and last touch the padding.
        assert_eq!(spec.n_frames(), 3);
        let padded = layout
            .frames
            .iter()
            .filter(|f| matches!(f, FrameSource::Padded { .. }))
            .count();
        assert_eq!(padded, 2 * 237);
        assert_eq!(layout.patterns.len(), 2);
        // Frame 0 reflects the segment start: samples -256..256 → 256, …, 1, 0, 1, ….
        assert_eq!(layout.patterns[0][0], Some(256));
        assert_eq!(layout.patterns[0][256], Some(0));
        // Frame 2 (start_k = 1, tail_k = 2) pads the piece y[256..512] alone: its
        // last sample bounces back into the piece (257), not to 255.
        assert_eq!(layout.patterns[1][255], Some(511));
        assert_eq!(layout.patterns[1][256], Some(510));
        assert_eq!(layout.patterns[1][510], Some(256));
        assert_eq!(layout.patterns[1][511], Some(257));
    }

    #[test]
    fn reflect_mirrors_without_repeating_the_edge() {
        // numpy.pad([0, 1, 2, 3], 2, mode='reflect') == [2, 1, 0, 1, 2, 3, 2, 1]
        let idx = |p, from| padded_index(p, 4, PadMode::Reflect, from).unwrap();
        let got: Vec<_> = (-2..6).map(|p| idx(p, 0)).collect();
        assert_eq!(got, vec![2, 1, 0, 1, 2, 3, 2, 1]);
        // numpy.pad([0, 1, 2, 3], 7, mode='reflect')[:7] == [1, 0, 1, 2, 3, 2, 1]
        let got: Vec<_> = (-7..0).map(|p| idx(p, 0)).collect();
        assert_eq!(got, vec![1, 0, 1, 2, 3, 2, 1]);
        // Tail piece [2, 3] padded by 3: numpy.pad([2, 3], (0, 3), 'reflect') → 2 3 2 3 2
        let got: Vec<_> = (4..7).map(|p| idx(p, 2)).collect();
        assert_eq!(got, vec![2, 3, 2]);
        assert_eq!(padded_index(-1, 4, PadMode::Constant, 0), None);
        assert_eq!(padded_index(4, 4, PadMode::Constant, 0), None);
        assert_eq!(padded_index(3, 4, PadMode::Constant, 0), Some(3));
        assert_eq!(padded_index(5, 1, PadMode::Reflect, 0), Some(0));
    }
}
