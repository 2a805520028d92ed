//! Compact storage (`[output] storage = "compact"`; docs/FORMAT.md,
//! "Compact storage"): `features` holds float16 values on a grid of
//! `2^tick_power` (`model::Dtype::Compact`, rounded where rows are narrowed),
//! in chunks that Blosc compressed with bitshuffle and LZ4: HDF5 filter 32001,
//! which h5py reads after `import hdf5plugin` and this program through
//! hdf5-metno's registration of the same filter.
//!
//! Why this codec: on real fbank (the espeak-ng corpus), Blosc's bitshuffle
//! with LZ4 inflates about 2 GB/s of float32 a second on one core, against
//! 0.9 GB/s with zstd and about 0.4 GB/s for lilcom or deflate; a row read
//! at random still costs about four times a float32 row's read, the
//! decoder's own rate (docs/BENCHMARKS.md, "Issue 47 item 3").
//!
//! The writer compresses whole chunks itself and hands the bytes to
//! `H5Dwrite_chunk` (HDF5 runs no filter on a direct write), with Blosc's own
//! context-taking call, so no global Blosc state is shared.

use std::ffi::c_void;

use blosc_src::{BLOSC_BITSHUFFLE, BLOSC_MAX_OVERHEAD, blosc_compress_ctx};
use half::f16;

use crate::frames::FrameLayout;
use crate::model::Dtype;
use hdf5::DatasetBuilderEmptyShape;
use hdf5::filters::BloscShuffle;

/// The `storage` attribute of a compact file.
pub(super) const STORAGE: &str = "compact";

/// Blosc's compression level: 5, its own default. Level 9 saved 3% of the
/// bytes on the espeak-ng fbank and wrote slower.
const CLEVEL: u8 = 5;

/// A compact chunk holds `1 / CHUNK_SHARE` of the plain chunk's bytes
/// before compression ([`chunk_frames`]): 64 KiB of float16, 409 frames at
/// 80 bins. A row read at random inflates every chunk it touches whole, so
/// smaller chunks waste less: on the espeak-ng fbank, rows read at random
/// through h5py ran 0.27× float32's rate with 256-frame chunks, 0.22× with
/// 1,024 and 0.21× with 1,638, at the same size (0.355–0.357×).
pub(super) const CHUNK_SHARE: usize = 16;

/// Frames per `features` chunk for rows of `layout` stored as `dtype`:
/// about [`crate::frames::CHUNK_TARGET_BYTES`], and a compact file's a
/// sixteenth of that before compression ([`CHUNK_SHARE`]), so
/// that reading a row at random inflates little more than the row.
pub fn chunk_frames(layout: &FrameLayout, dtype: Dtype) -> usize {
    match dtype.tick_power() {
        Some(_) => layout.chunk_frames(dtype.size() * CHUNK_SHARE),
        None => layout.chunk_frames(dtype.size()),
    }
}

/// `b` with the compact filter in its pipeline, as every reader finds it.
pub(super) fn filtered(b: DatasetBuilderEmptyShape) -> DatasetBuilderEmptyShape {
    b.blosc_lz4(CLEVEL, BloscShuffle::Bit)
}

/// The stored bytes of every chunk of `len` values in `values` (whole
/// chunks) into `outs[k]`, in order. Returns how many chunks.
///
/// One thread: compressing on rayon's pool instead made a compact build of
/// 1,500 utterances slower on two cores (1.29× plain's wall time, against
/// 1.12× here), its workers spinning beside the compute workers.
pub(super) fn pack_all(values: &[f16], len: usize, outs: &mut Vec<Vec<u8>>) -> hdf5::Result<usize> {
    let n = values.len() / len.max(1);
    if outs.len() < n {
        outs.resize_with(n, Vec::new);
    }
    for (out, chunk) in outs.iter_mut().zip(values.chunks_exact(len.max(1))) {
        pack(chunk, out)?;
    }
    Ok(n)
}

/// The stored bytes of one compact chunk of `values` into `out` (replacing
/// what it held): a Blosc buffer, bitshuffled over 2-byte values, LZ4.
pub(super) fn pack(values: &[f16], out: &mut Vec<u8>) -> hdf5::Result<()> {
    let nbytes = std::mem::size_of_val(values);
    let room = nbytes + BLOSC_MAX_OVERHEAD as usize;
    out.clear();
    out.resize(room, 0);
    // SAFETY: `values` is readable for `nbytes` bytes and `out` writable for
    // `room`, which Blosc never writes past; the compressor name is a
    // NUL-terminated literal; the call keeps no pointer (its context is its
    // own, so concurrent calls are safe).
    let n = unsafe {
        blosc_compress_ctx(
            i32::from(CLEVEL),
            BLOSC_BITSHUFFLE as i32,
            std::mem::size_of::<f16>(),
            nbytes,
            values.as_ptr().cast::<c_void>(),
            out.as_mut_ptr().cast::<c_void>(),
            room,
            c"lz4".as_ptr(),
            0,
            1,
        )
    };
    // With room for the overhead Blosc always succeeds (it stores the bytes
    // as they are where they do not compress); anything else is a bug there.
    let n = usize::try_from(n)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| hdf5::Error::from(format!("Blosc failed to compress a chunk ({n})")))?;
    out.truncate(n);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_packed_together_are_each_packed_alone() {
        let values: Vec<f16> = (0..5 * 640)
            .map(|i| f16::from_f32(((i * 7 % 131) as f32 - 60.0) / 32.0))
            .collect();
        let mut outs = vec![vec![1u8; 3]];
        assert_eq!(pack_all(&values, 640, &mut outs).unwrap(), 5);
        for (k, chunk) in values.chunks_exact(640).enumerate() {
            let mut alone = Vec::new();
            pack(chunk, &mut alone).unwrap();
            assert_eq!(outs[k], alone, "chunk {k}");
        }
    }

    #[test]
    fn a_packed_chunk_is_a_blosc_buffer_of_the_values() {
        let values: Vec<f16> = (0..4096)
            .map(|i| f16::from_f32(((i % 97) as f32 - 40.0) / 32.0))
            .collect();
        let mut out = Vec::new();
        pack(&values, &mut out).unwrap();
        assert!(out.len() < values.len(), "{} bytes", out.len());
        let mut back = vec![f16::ZERO; values.len()];
        // SAFETY: `out` is a whole Blosc buffer; `back` has room for the
        // bytes it holds (checked by the call against the header).
        let n = unsafe {
            blosc_src::blosc_decompress_ctx(
                out.as_ptr().cast(),
                back.as_mut_ptr().cast(),
                std::mem::size_of_val(back.as_slice()),
                1,
            )
        };
        assert_eq!(n as usize, 2 * values.len());
        assert_eq!(back, values);
    }
}
