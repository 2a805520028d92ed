//! The part of a file a manifest item stands for ([`Segment`]), how seconds
//! become samples under each manifest's loader ([`Rounding`]), and how part
//! of a lossy stream lines up with its whole-file decode ([`LossyPart`]):
//! what a source states and the decoders apply.

/// The part of a file one manifest item stands for, as
/// `librosa.load(path, sr, mono=True, offset, duration)` takes it: the
/// native frames `int(offset_s · rate)` onward, `int(duration_s · rate)` of
/// them (all the rest when `None`), cut before the channels are combined and
/// before resampling. The source builds it; the decoder applies it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Segment {
    /// Seconds into the file (≥ 0).
    pub offset_s: f64,
    /// Seconds kept (> 0), or to the end.
    pub duration_s: Option<f64>,
    /// One channel instead of the `input.channels` policy (a lhotse cut's).
    pub channel: Option<u16>,
    /// A whole-file item's stated duration: the file's own must agree within
    /// [`Segment::DURATION_TOLERANCE_S`].
    pub expect_s: Option<f64>,
    /// The native frame the bytes handed to the decoder start at: 0 for a
    /// whole file, a seek point's sample for part of a FLAC stream.
    pub base_frame: u64,
    /// The bytes are part of a lossy stream (MP3 frames, Ogg pages) read
    /// from a frame or page boundary before the segment; the decoder places
    /// them with this.
    pub lossy: Option<LossyPart>,
    /// How seconds become a sample count: the manifest's own loader's rule.
    pub rounding: Rounding,
}

/// How a manifest's loader turns seconds into samples; each line's row is
/// the samples its own loader reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Rounding {
    /// `librosa.load(offset, duration)`, as NeMo loads: `int(t · rate)`,
    /// truncated.
    #[default]
    Librosa,
    /// lhotse's `compute_num_samples(t, rate)`: `t · rate` rounded to 8
    /// decimals, then half up (`Decimal.quantize(0, ROUND_HALF_UP)`), which
    /// `Recording.load_audio` uses for both the offset and the count. A
    /// duration whose product with the rate lands just below a whole number
    /// (0.xx9999…) keeps its last sample, as lhotse's own features do.
    Lhotse,
}

impl Rounding {
    /// `t` seconds (≥ 0, finite) at `rate` Hz as a sample count.
    pub fn samples(self, t: f64, rate: u32) -> u64 {
        let x = t * f64::from(rate);
        match self {
            Rounding::Librosa => x as u64,
            Rounding::Lhotse => {
                // Python's `round(x, 8)` of `n + f` is `n + round(f, 8)`;
                // `f · 1e8` is exact enough in f64 for any `f` in [0, 1).
                let whole = x.floor();
                let frac = ((x - whole) * 1e8).round() / 1e8;
                whole as u64 + u64::from(frac >= 0.5)
            }
        }
    }
}

/// How part of a lossy stream lines up with its whole-file decode. Positions
/// are in the stream's own units: decoded samples for MP3 and MP4 AAC
/// (counted from the first audio frame or access unit, before the encoder
/// delay or the edit list's media time is cut), granules for Ogg (48 kHz
/// for Opus).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LossyPart {
    /// The position of the whole-file decode's first sample (MP3: the
    /// delay gapless decoding cuts; AAC: the edit list's media time;
    /// Vorbis: 0; Opus: the pre-skip).
    pub origin: u64,
    /// The position of the part's first decoded sample where the container
    /// has no timestamps on its packets (MP3, MP4 AAC: the sample table's
    /// durations before it); `None`: from the pages' granule positions.
    pub first: Option<u64>,
    /// The whole-file decode's length in samples, where it cuts the encoder
    /// padding at the end (LAME tag, last granule position, MP4 track
    /// duration).
    pub length: Option<u64>,
}

impl Segment {
    /// How far a whole-file item's stated duration may be from the file's.
    pub const DURATION_TOLERANCE_S: f64 = 0.1;

    /// The first native frame and the frame count (None: to the end) at
    /// `rate` Hz, as the manifest's loader counts them ([`Rounding`]:
    /// librosa's `int(offset * sr)`, or lhotse's `compute_num_samples`).
    pub fn frames(&self, rate: u32) -> (u64, Option<u64>) {
        let at = |s: f64| self.rounding.samples(s, rate);
        (at(self.offset_s), self.duration_s.map(at))
    }

    /// Whether decoding must do anything beyond the whole file and the
    /// channel policy.
    pub fn is_whole(&self) -> bool {
        self.offset_s == 0.0
            && self.duration_s.is_none()
            && self.channel.is_none()
            && self.expect_s.is_none()
            && self.base_frame == 0
            && self.lossy.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::Rounding;

    /// lhotse's `compute_num_samples` against values Python computes:
    /// `int(Decimal(round(t * sr, ndigits=8)).quantize(0, ROUND_HALF_UP))`.
    #[test]
    fn lhotse_rounds_half_up_after_eight_decimals() {
        let lhotse = |t, sr| Rounding::Lhotse.samples(t, sr);
        // 1.001 * 16000 = 16015.999999999998 in float64.
        assert_eq!(lhotse(1.001, 16_000), 16_016);
        assert_eq!(Rounding::Librosa.samples(1.001, 16_000), 16_015);
        // 1.2345 * 44100 = 54441.45: down under both.
        assert_eq!(lhotse(1.2345, 44_100), 54_441);
        // 0.123456 * 22050 = 2722.2048; 0.3333 * 22050 = 7349.265.
        assert_eq!(lhotse(0.123_456, 22_050), 2_722);
        assert_eq!(lhotse(0.3333, 22_050), 7_349);
        // Exactly one half goes up (Python's round() would go to even).
        assert_eq!(lhotse(0.5 / 16_000.0 * 3.0, 16_000), 2);
        assert_eq!(lhotse(2.5 / 16_000.0, 16_000), 3);
        // 0.77777 * 48000 = 37332.96; whole seconds are exact.
        assert_eq!(lhotse(0.77777, 48_000), 37_333);
        assert_eq!(lhotse(4.0, 22_050), 88_200);
        assert_eq!(lhotse(0.0, 16_000), 0);
    }
}
