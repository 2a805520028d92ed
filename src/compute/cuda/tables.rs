//! The per-plan tables and per-batch file descriptors the kernels in
//! `kernels/mel.cu` read, built on the host from a [`Plan`] and a [`WavInfo`].
//!
//! Everything here is plain host data (vectors of `i32`/`f32`/`f64` and a
//! `#[repr(C)]` descriptor) in exactly the layout the kernels index; the device
//! code uploads it once per plan, the host shim (`host.rs`) passes it directly.
//! `kernels/README.md` lists every kernel with the arrays it takes.
//!
//! Invariants of a [`Tables`] made by [`Tables::new`] (the host wrappers re-check
//! them before every call, the device code may rely on them):
//! * every count fits in an `i32`;
//! * an unpadded frame `d` (`frame_pattern[d] < 0`) reads
//!   `frame_start[d] .. frame_start[d] + n_fft` inside the clip; a padded one reads
//!   `frame_start[d] + k` for its pattern's `k ≥ 0`, also inside the clip;
//! * band `m` reads `band_weights[band_offset[m] .. + band_len[m]]`,
//!   `band_len[m] % 8 == 0`, and bins from `band_first[m] ≥ 0` (bins past `n_bins`
//!   are zero power);
//! * `column` has `n_segments · n_frames` entries, each `< n_distinct`.

use crate::decode::wav::{SampleFormat, WavInfo};
use crate::dsp::Plan;

/// Format codes of [`MfFile::format`] (the `MF_*` defines in `mel.cu`).
pub const FORMAT_U8: u16 = 1;
pub const FORMAT_I16: u16 = 2;
pub const FORMAT_I24: u16 = 3;
pub const FORMAT_I32: u16 = 4;
pub const FORMAT_F32: u16 = 5;
pub const FORMAT_F64: u16 = 6;

/// The kernels' code for a sample format.
pub const fn format_code(format: SampleFormat) -> u16 {
    match format {
        SampleFormat::U8 => FORMAT_U8,
        SampleFormat::I16 => FORMAT_I16,
        SampleFormat::I24 => FORMAT_I24,
        SampleFormat::I32 => FORMAT_I32,
        SampleFormat::F32 => FORMAT_F32,
        SampleFormat::F64 => FORMAT_F64,
    }
}

/// One file of a batch, as `mf_decode` reads it (`struct MfFile` in `mel.cu`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MfFile {
    /// Byte offset of the first sample in the batch's byte buffer.
    pub data: u64,
    /// Sample frames in the data chunk; `mf_decode` reads `min(frames, clip)`.
    pub frames: u32,
    pub channels: u16,
    /// [`FORMAT_U8`] ..= [`FORMAT_F64`].
    pub format: u16,
}

const _: () = assert!(std::mem::size_of::<MfFile>() == 16);

impl MfFile {
    /// The descriptor of a file whose bytes start at `file_offset` in the batch
    /// buffer and whose header [`crate::decode::wav::parse`] returned `info`.
    pub fn new(info: &WavInfo, file_offset: usize) -> MfFile {
        MfFile {
            data: (file_offset + info.data_offset) as u64,
            // A data chunk holds < 2^32 bytes, so frames always fit.
            frames: u32::try_from(info.frames).unwrap_or(u32::MAX),
            channels: info.channels,
            format: format_code(info.format),
        }
    }

    /// Bytes per sample of one channel, 0 for an unknown format code.
    pub fn bytes_per_sample(&self) -> usize {
        match self.format {
            FORMAT_U8 => 1,
            FORMAT_I16 => 2,
            FORMAT_I24 => 3,
            FORMAT_I32 | FORMAT_F32 => 4,
            FORMAT_F64 => 8,
            _ => 0,
        }
    }

    /// One past the last byte `mf_decode` reads for a clip of `clip_samples`.
    pub fn end_byte(&self, clip_samples: usize) -> u64 {
        let n = u64::from(self.frames).min(clip_samples as u64);
        self.data + n * u64::from(self.channels) * self.bytes_per_sample() as u64
    }
}

// SAFETY: `MfFile` is `#[repr(C)]` plain old data (integers only, no padding:
// 8 + 4 + 2 + 2 bytes), the same layout as `struct MfFile` in kernels/mel.cu, so
// its bytes are a valid kernel argument / device value, and all-zero bits are a
// valid value.
unsafe impl cudarc::driver::DeviceRepr for MfFile {}
// SAFETY: see above; every field is an integer, for which zero is valid.
unsafe impl cudarc::driver::ValidAsZeroBits for MfFile {}

/// A count or index that does not fit the kernels' `int`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} = {value} does not fit the CUDA kernels' 32-bit indices")]
pub struct TooLarge {
    pub what: &'static str,
    pub value: usize,
}

fn int(what: &'static str, value: usize) -> Result<i32, TooLarge> {
    i32::try_from(value).map_err(|_| TooLarge { what, value })
}

/// Everything the kernels need to know about one [`Plan`], in kernel layout.
#[derive(Clone, Debug, PartialEq)]
pub struct Tables {
    pub clip_samples: usize,
    pub n_fft: usize,
    /// `n_fft / 2 + 1`: complex bins per frame out of the D2Z transform.
    pub n_bins: usize,
    pub n_mels: usize,
    /// Distinct frames per clip (each transformed once).
    pub n_distinct: usize,
    /// Frames per short segment (the last axis of a row).
    pub n_frames: usize,
    /// `n_long · n_short`.
    pub n_segments: usize,
    /// Values per output row: `n_segments · n_mels · n_frames`.
    pub row_len: usize,
    /// Per distinct frame: clip offset of the frame, or of its segment if padded.
    pub frame_start: Vec<i32>,
    /// Per distinct frame: -1 (contiguous) or the pattern index.
    pub frame_pattern: Vec<i32>,
    /// `[n_patterns][n_fft]`: segment-relative sample index, -1 for a zero.
    pub patterns: Vec<i32>,
    /// The f64 window, `n_fft` values.
    pub window: Vec<f64>,
    pub band_first: Vec<i32>,
    pub band_len: Vec<i32>,
    pub band_offset: Vec<i32>,
    pub band_weights: Vec<f32>,
    /// `[n_segments][n_frames]` → distinct frame index (the scatter table).
    pub column: Vec<i32>,
    /// Exponent of |X| (2 and 1 take exact special paths, as the CPU).
    pub power: f64,
    /// `amin` as f32 (the dB floor is applied in f32, as the CPU).
    pub amin: f32,
    /// `10·log10(max(amin, ref))`, subtracted in f64.
    pub ref_db: f64,
    /// The clamp below each clip's maximum, in f32; `None` skips the two kernels.
    pub top_db: Option<f32>,
}

impl Tables {
    pub fn new(plan: &Plan) -> Result<Tables, TooLarge> {
        let spec = plan.spec();
        let n_fft = spec.n_fft;
        let clip_samples = spec.clip_samples();
        let row_len = spec.row_len();
        // Every index the kernels compute inside one clip or one row is below one
        // of these (the batch-wide products are 64-bit in the kernels).
        int("clip_samples", clip_samples)?;
        int("row_len", row_len)?;
        int("n_fft", n_fft)?;

        let gather = plan.frame_gather();
        let n_distinct = gather.start.len();
        int("distinct frames", n_distinct.saturating_mul(n_fft))?;
        let frame_start = gather
            .start
            .iter()
            .map(|&s| int("frame start", s))
            .collect::<Result<Vec<_>, _>>()?;
        let frame_pattern = gather
            .pattern
            .iter()
            .map(|p| p.map_or(Ok(-1), |p| int("pattern", p as usize)))
            .collect::<Result<Vec<_>, _>>()?;
        int("pattern table", gather.patterns.len().saturating_mul(n_fft))?;
        let patterns = gather
            .patterns
            .iter()
            .flatten()
            .map(|k| k.map_or(Ok(-1), |k| int("pattern index", k as usize)))
            .collect::<Result<Vec<_>, _>>()?;

        let (mut band_first, mut band_len, mut band_offset) = (Vec::new(), Vec::new(), Vec::new());
        let mut band_weights = Vec::new();
        for (first, weights) in plan.mel_bands() {
            band_first.push(int("band first bin", first)?);
            band_len.push(int("band length", weights.len())?);
            band_offset.push(int("band weights", band_weights.len())?);
            band_weights.extend_from_slice(weights);
        }
        int("band weights", band_weights.len())?;

        let column = plan
            .columns()
            .iter()
            .map(|&c| int("column", c as usize))
            .collect::<Result<Vec<_>, _>>()?;

        Ok(Tables {
            clip_samples,
            n_fft,
            n_bins: spec.n_bins(),
            n_mels: spec.n_mels,
            n_distinct,
            n_frames: spec.n_frames(),
            n_segments: spec.n_long() * spec.n_short(),
            row_len,
            frame_start,
            frame_pattern,
            patterns,
            window: plan.window_f64().to_vec(),
            band_first,
            band_len,
            band_offset,
            band_weights,
            column,
            power: spec.power,
            amin: spec.amin as f32,
            ref_db: plan.ref_db(),
            top_db: spec.top_db.map(|t| t as f32),
        })
    }

    /// dB values per file before the scatter: `n_distinct · n_mels`.
    pub fn per_file_db(&self) -> usize {
        self.n_distinct * self.n_mels
    }

    /// f64 values of the D2Z input for `files` files: `files · n_distinct · n_fft`.
    pub fn frames_len(&self, files: usize) -> usize {
        files * self.n_distinct * self.n_fft
    }

    /// f64 values (re, im interleaved) of the D2Z output: `files · n_distinct ·
    /// n_bins · 2`.
    pub fn spectrum_len(&self, files: usize) -> usize {
        files * self.n_distinct * self.n_bins * 2
    }
}

/// Threads per block for every kernel.
pub const BLOCK: u32 = 256;
/// Cap on blocks per launch (the kernels are grid-stride, so any grid works).
pub const MAX_GRID: u32 = 65_535;

/// `(grid, block)` for a 1-D launch over `total` elements.
pub fn launch_1d(total: usize) -> (u32, u32) {
    let blocks = total.div_ceil(BLOCK as usize).clamp(1, MAX_GRID as usize);
    (blocks as u32, BLOCK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dsp::{PadMode, Spec};

    #[test]
    fn default_tables_match_the_layout() {
        let plan = Plan::new(&Spec::default());
        let t = Tables::new(&plan).unwrap();
        assert_eq!(t.n_distinct, 159);
        assert_eq!(t.column.len(), 237);
        assert!(t.frame_pattern.iter().all(|&p| p == -1));
        assert!(t.patterns.is_empty());
        assert_eq!(t.frame_start[1], 256);
        assert_eq!((t.n_bins, t.n_mels, t.row_len), (257, 32, 237 * 32));
        assert!(t.band_len.iter().all(|&l| l % 8 == 0));
        assert_eq!(
            t.band_weights.len(),
            t.band_len.iter().map(|&l| l as usize).sum::<usize>()
        );
        assert_eq!(launch_1d(0), (1, 256));
        assert_eq!(launch_1d(257), (2, 256));
        assert_eq!(launch_1d(usize::MAX / 2).0, MAX_GRID);
    }

    #[test]
    fn padded_frames_stay_inside_the_clip() {
        for pad_mode in [PadMode::Reflect, PadMode::Constant] {
            let spec = Spec {
                center: true,
                pad_mode,
                ..Spec::default()
            };
            let t = Tables::new(&Plan::new(&spec)).unwrap();
            assert_eq!(t.n_frames, 3);
            for (d, (&start, &p)) in t.frame_start.iter().zip(&t.frame_pattern).enumerate() {
                let reads: Vec<i32> = if p < 0 {
                    (0..t.n_fft as i32).collect()
                } else {
                    let row = &t.patterns[p as usize * t.n_fft..][..t.n_fft];
                    row.iter().copied().filter(|&k| k >= 0).collect()
                };
                assert!(
                    reads
                        .iter()
                        .all(|&k| start + k >= 0 && ((start + k) as usize) < t.clip_samples),
                    "frame {d}"
                );
            }
            let zeros = t.patterns.iter().filter(|&&k| k < 0).count();
            assert_eq!(zeros > 0, pad_mode == PadMode::Constant);
        }
    }

    #[test]
    fn file_descriptor_points_past_the_header() {
        let info = WavInfo {
            sample_rate: 4096,
            channels: 2,
            format: SampleFormat::I24,
            block_align: 6,
            data_offset: 44,
            frames: 100,
        };
        let f = MfFile::new(&info, 8192);
        assert_eq!(
            f,
            MfFile {
                data: 8236,
                frames: 100,
                channels: 2,
                format: FORMAT_I24
            }
        );
        assert_eq!(f.end_byte(50), 8236 + 50 * 6);
        assert_eq!(f.end_byte(5000), 8236 + 100 * 6);
    }
}
