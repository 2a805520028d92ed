//! [`ln`]: the natural logarithm in float32 as cephes' `logf` computes it
//! (range reduction to [√½, √2), a degree-8 polynomial, the exponent's ln 2
//! in two parts), within 2 ulp of the true value: plain scalar code that the
//! batched recipes (`whisper_batch`, `kaldi::batch`) call over whole buffers
//! inside their `#[target_feature]` functions, where it compiles to vector
//! instructions. Only IEEE operations in one order (Rust never contracts
//! `a·b + c`), so every build gives the same bits.

/// ln `v` for a positive, normal, finite `v` (the callers floor their input
/// at a normal number first; other inputs give unspecified values).
#[inline(always)]
pub(crate) fn ln(v: f32) -> f32 {
    let bits = v.to_bits();
    // v = m · 2^e with m in [0.5, 1).
    let mut e = ((bits >> 23) & 0xff) as i32 - 126;
    let m = f32::from_bits((bits & 0x007f_ffff) | 0x3f00_0000);
    let small = m < std::f32::consts::FRAC_1_SQRT_2;
    e -= i32::from(small);
    let m = if small { m + m - 1.0 } else { m - 1.0 };
    let z = m * m;
    let mut y = 7.037_683_6e-2_f32;
    for c in [
        -1.151_461e-1_f32,
        1.167_699_9e-1,
        -1.242_014_1e-1,
        1.424_932_3e-1,
        -1.666_805_8e-1,
        2.000_071_5e-1,
        -2.499_999_4e-1,
        3.333_333e-1,
    ] {
        y = y * m + c;
    }
    let fe = e as f32;
    let y = y * m * z + fe * -2.121_944_4e-4 - 0.5 * z;
    m + y + fe * 0.693_359_4
}
