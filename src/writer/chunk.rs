//! The chunk buffer: up to `chunk_files` consecutive accepted rows of one split,
//! already in the on-disk element type, with their labels and paths.
//!
//! It is filled one row at a time in seq order and handed whole to
//! [`super::h5::SplitFile::append`], which writes it with one call per dataset
//! (`mel` by a direct chunk write, which takes the mel values out with
//! [`ChunkBuf::take_mel`] and gives an already written buffer back).
//! Storage is allocated on the first push and reused after every `clear`.

use half::f16;
use half::slice::HalfFloatSliceExt;
use hdf5::types::VarLenUnicode;

use super::{Dtype, Error};

/// Row values in the element type of the `mel` dataset.
pub(super) enum MelBuf {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

pub(super) struct ChunkBuf {
    mel: MelBuf,
    labels: Vec<i32>,
    paths: Vec<VarLenUnicode>,
    row_shape: [usize; 4],
    row_len: usize,
    /// Rows that make a full chunk (≤ chunk_files when the split is smaller).
    capacity: usize,
}

impl ChunkBuf {
    /// A buffer that is full at `capacity` rows of `row_shape`.
    pub(super) fn new(dtype: Dtype, row_shape: [usize; 4], capacity: usize) -> Self {
        let mel = match dtype {
            Dtype::Float32 => MelBuf::F32(Vec::new()),
            Dtype::Float16 => MelBuf::F16(Vec::new()),
        };
        ChunkBuf {
            mel,
            labels: Vec::new(),
            paths: Vec::new(),
            row_shape,
            row_len: row_shape.iter().product(),
            capacity: capacity.max(1),
        }
    }

    /// Appends one row (`row_len` values; the caller has checked the length).
    pub(super) fn push(&mut self, row: &[f32], label: i32, path: &str) -> Result<(), Error> {
        debug_assert_eq!(row.len(), self.row_len);
        let path: VarLenUnicode = path
            .parse()
            .map_err(|e| Error::Plan(format!("path {path:?} cannot be stored: {e}")))?;
        let total = self.capacity * self.row_len;
        match &mut self.mel {
            MelBuf::F32(buf) => {
                buf.reserve_exact(total - buf.len());
                buf.extend_from_slice(row);
            }
            MelBuf::F16(buf) => {
                buf.reserve_exact(total - buf.len());
                let start = buf.len();
                buf.resize(start + row.len(), f16::ZERO);
                to_f16(&mut buf[start..], row);
            }
        }
        self.labels.push(label);
        self.paths.push(path);
        Ok(())
    }

    pub(super) fn rows(&self) -> usize {
        self.labels.len()
    }

    pub(super) fn is_full(&self) -> bool {
        self.rows() >= self.capacity
    }

    pub(super) fn clear(&mut self) {
        match &mut self.mel {
            MelBuf::F32(buf) => buf.clear(),
            MelBuf::F16(buf) => buf.clear(),
        }
        self.labels.clear();
        self.paths.clear();
    }

    pub(super) fn mel(&self) -> &MelBuf {
        &self.mel
    }

    /// Moves the buffered mel values out (for a direct chunk write that may
    /// hold them), leaving `spare` (cleared by its giver) or a new empty
    /// buffer of the same type in their place; labels and paths stay until
    /// [`ChunkBuf::clear`].
    pub(super) fn take_mel(&mut self, spare: Option<MelBuf>) -> MelBuf {
        let empty = spare.unwrap_or_else(|| match &self.mel {
            MelBuf::F32(_) => MelBuf::F32(Vec::new()),
            MelBuf::F16(_) => MelBuf::F16(Vec::new()),
        });
        std::mem::replace(&mut self.mel, empty)
    }

    pub(super) fn labels(&self) -> &[i32] {
        &self.labels
    }

    pub(super) fn paths(&self) -> &[VarLenUnicode] {
        &self.paths
    }

    /// Bytes of the buffered mel rows (what a write of the chunk appends, give
    /// or take the small label and path data).
    pub(super) fn bytes(&self) -> usize {
        match &self.mel {
            MelBuf::F32(b) => 4 * b.len(),
            MelBuf::F16(b) => 2 * b.len(),
        }
    }

    /// Shape of the buffered block: (rows, n_long, n_short, n_mels, n_frames).
    pub(super) fn shape(&self) -> (usize, usize, usize, usize, usize) {
        let [a, b, c, d] = self.row_shape;
        (self.rows(), a, b, c, d)
    }
}

/// `src` as float16 into `dst` (same length), rounded to nearest even: the
/// bits of `half::f16::from_f32` for every value. Where the CPU has F16C, one
/// loop converts 8 values per instruction; `half`'s slice conversion calls its
/// F16C kernel once per 8 values through a function that cannot be inlined
/// into the loop (22 % of the float16 writer's time under `perf`).
fn to_f16(dst: &mut [f16], src: &[f32]) {
    assert_eq!(dst.len(), src.len());
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") && std::arch::is_x86_feature_detected!("f16c") {
        // SAFETY: both features the function is compiled for were detected.
        let done = unsafe { to_f16_f16c(dst, src) };
        dst[done..].convert_from_f32_slice(&src[done..]);
        return;
    }
    dst.convert_from_f32_slice(src);
}

/// Converts the whole groups of 8 of `src` into `dst` with F16C
/// (`vcvtps2ph`, round to nearest even, not the MXCSR mode); returns how many
/// values it converted.
///
/// # Safety
/// The CPU must have AVX and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn to_f16_f16c(dst: &mut [f16], src: &[f32]) -> usize {
    use std::arch::x86_64::{
        _MM_FROUND_TO_NEAREST_INT, _mm_storeu_si128, _mm256_cvtps_ph, _mm256_loadu_ps,
    };
    let n = src.len().min(dst.len()) / 8 * 8;
    let (from, to) = (src.as_ptr(), dst.as_mut_ptr());
    for i in (0..n).step_by(8) {
        // SAFETY: `i + 8 <= n`, within both slices; the load and the store
        // are unaligned ones; `f16` is a transparent `u16`, so 8 of them are
        // the 16 bytes the store writes.
        unsafe {
            let v = _mm256_loadu_ps(from.add(i));
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
            _mm_storeu_si128(to.add(i).cast(), h);
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The bits `half` gives, value by value (NaNs: a NaN).
    fn check(values: &[f32]) {
        let mut got = vec![f16::ZERO; values.len()];
        to_f16(&mut got, values);
        for (g, v) in got.iter().zip(values) {
            let want = f16::from_f32(*v);
            if v.is_nan() {
                assert!(g.is_nan(), "{v}");
            } else {
                assert_eq!(g.to_bits(), want.to_bits(), "{v:e} ({:#010x})", v.to_bits());
            }
        }
    }

    #[test]
    fn edges_round_as_half_does() {
        let mut v = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            65504.0,
            65519.99,
            65520.0,
            -65520.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            6.1035156e-5,
            6.097555e-5,
            5.9604645e-8,
            2.9802322e-8,
            2.9802326e-8,
            1.0e-9,
            -80.0,
            -79.96,
            1.0009766,
            // Ties between two float16 neighbours of 1 (round to even).
            1.0 + 1.0 / 2048.0,
            1.0 + 3.0 / 2048.0,
            f32::MAX,
            f32::MIN_POSITIVE,
        ];
        // Lengths that leave a remainder for `half` after the groups of 8.
        for n in [0, 1, 7, 8, 9, 23, v.len()] {
            check(&v[..n.min(v.len())]);
        }
        v.reverse();
        check(&v);
    }

    proptest! {
        #[test]
        fn any_bits_round_as_half_does(bits in proptest::collection::vec(any::<u32>(), 0..200)) {
            let values: Vec<f32> = bits.into_iter().map(f32::from_bits).collect();
            check(&values);
        }
    }
}
