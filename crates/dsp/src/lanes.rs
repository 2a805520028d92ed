//! [`Lanes`]: `L` f64 lanes as one value, for the vertical transforms of
//! `batch_fft`: an `__m512d` (AVX-512F, 8 lanes), an `__m256d` (AVX2, 4 lanes)
//! or a plain `[f64; 4]` (portable). Only lane-wise IEEE add, sub, mul, sqrt and
//! the f64 → f32 rounding conversion, so every implementation gives each lane the
//! bits of the same scalar expression.
//!
//! Buffers are flat `f64` slices holding `L` lanes per index; loads and stores
//! take raw pointers that the caller has bounds-checked.

use crate::vector::Vector;

/// `L` f64 lanes: a [`Vector`] of f64 with what the librosa path needs
/// beyond it. Implementations only do lane-wise, correctly rounded IEEE
/// operations (no FMA), so results do not depend on the implementation.
pub(crate) trait Lanes: Vector<E = f64> {
    /// Lane-wise `(f32)self` into `p .. p + L`.
    ///
    /// # Safety
    /// `p .. p + L` must be writable f32s.
    unsafe fn store_f32(self, p: *mut f32);
    fn sqrt(self) -> Self;
    /// The matching `L` f32 lanes.
    type F: LanesF32;
    /// `2L` samples of `L` frames, windowed and turned lane-wise: calls
    /// `put(c, v)` for `c = 0 .. 2L` with lane `l` of `v` =
    /// `f64::from(*rows[l].add(c)) · *w.add(c)` (one rounding, as the per-frame
    /// path's `w · x`).
    ///
    /// # Safety
    /// `rows[l] .. rows[l] + 2L` readable f32s for `l < L`; `w .. w + 2L`
    /// readable f64s.
    unsafe fn pack_block(rows: &[*const f32], w: *const f64, put: impl FnMut(usize, Self));
}

/// `L` f32 lanes (the mel product), same rules as [`Lanes`].
pub(crate) trait LanesF32: Copy {
    fn splat(x: f32) -> Self;
    /// # Safety
    /// `p .. p + L` must be readable f32s.
    unsafe fn load(p: *const f32) -> Self;
    /// # Safety
    /// `p .. p + L` must be writable f32s.
    unsafe fn store(self, p: *mut f32);
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
}

impl LanesF32 for [f32; 4] {
    #[inline(always)]
    fn splat(x: f32) -> Self {
        [x; 4]
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller guarantees 4 readable f32s at `p`; unaligned read.
        unsafe { p.cast::<[f32; 4]>().read_unaligned() }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the caller guarantees 4 writable f32s at `p`; unaligned write.
        unsafe { p.cast::<[f32; 4]>().write_unaligned(self) }
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        std::array::from_fn(|l| self[l] + o[l])
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        std::array::from_fn(|l| self[l] * o[l])
    }
}

/// Four lanes in a plain array: what any target compiles (the compiler may or
/// may not use SIMD for it).
#[derive(Clone, Copy)]
pub(crate) struct Portable([f64; 4]);

impl Vector for Portable {
    type E = f64;
    const L: usize = 4;

    #[inline(always)]
    fn splat(x: f64) -> Self {
        Portable([x; 4])
    }
    #[inline(always)]
    unsafe fn load(p: *const f64) -> Self {
        // SAFETY: the caller guarantees 4 readable f64s at `p`; unaligned read.
        Portable(unsafe { p.cast::<[f64; 4]>().read_unaligned() })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f64) {
        // SAFETY: the caller guarantees 4 writable f64s at `p`; unaligned write.
        unsafe { p.cast::<[f64; 4]>().write_unaligned(self.0) }
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        Portable(std::array::from_fn(|l| self.0[l] + o.0[l]))
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        Portable(std::array::from_fn(|l| self.0[l] - o.0[l]))
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        Portable(std::array::from_fn(|l| self.0[l] * o.0[l]))
    }
}

impl Lanes for Portable {
    #[inline(always)]
    unsafe fn pack_block(rows: &[*const f32], w: *const f64, mut put: impl FnMut(usize, Self)) {
        for c in 0..8 {
            // SAFETY: c < 2L = 8: inside the caller's ranges.
            put(
                c,
                Portable(std::array::from_fn(|l| unsafe {
                    f64::from(*rows[l].add(c)) * *w.add(c)
                })),
            );
        }
    }
    type F = [f32; 4];
    #[inline(always)]
    unsafe fn store_f32(self, p: *mut f32) {
        let v = self.0.map(|x| x as f32);
        // SAFETY: the caller guarantees 4 writable f32s at `p`; unaligned write.
        unsafe { p.cast::<[f32; 4]>().write_unaligned(v) }
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        Portable(self.0.map(f64::sqrt))
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{Avx2, Avx512};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::Lanes;
    use crate::vector::Vector;

    /// Four lanes in an AVX register. Only construct inside code compiled
    /// with AVX2 enabled, on a CPU that has it.
    #[derive(Clone, Copy)]
    pub(crate) struct Avx2(__m256d);

    /// [`Avx2`]'s four f32 lanes.
    #[derive(Clone, Copy)]
    pub(crate) struct F128(pub(super) __m128);

    /// [`Avx512`]'s eight f32 lanes (an AVX register).
    #[derive(Clone, Copy)]
    pub(crate) struct F256(pub(super) __m256);

    /// Eight lanes in an AVX-512 register. Only construct inside code compiled
    /// with AVX-512F enabled, on a CPU that has it.
    #[derive(Clone, Copy)]
    pub(crate) struct Avx512(__m512d);

    // SAFETY (every `unsafe` block below): these values are only created and
    // used inside `#[target_feature]` functions of the matching feature, which
    // their callers enter only after the runtime check (`Level::available`);
    // pointer preconditions are the trait methods' own.
    impl Vector for Avx2 {
        type E = f64;
        const L: usize = 4;
        #[inline(always)]
        fn splat(x: f64) -> Self {
            // SAFETY: see the comment above the impl (AVX2 enabled).
            Avx2(unsafe { _mm256_set1_pd(x) })
        }
        #[inline(always)]
        unsafe fn load(p: *const f64) -> Self {
            // SAFETY: 4 readable f64s at `p` (caller); unaligned load.
            Avx2(unsafe { _mm256_loadu_pd(p) })
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f64) {
            // SAFETY: 4 writable f64s at `p` (caller); unaligned store.
            unsafe { _mm256_storeu_pd(p, self.0) }
        }
        #[inline(always)]
        fn add(self, o: Self) -> Self {
            // SAFETY: see the comment above the impl (AVX2 enabled).
            Avx2(unsafe { _mm256_add_pd(self.0, o.0) })
        }
        #[inline(always)]
        fn sub(self, o: Self) -> Self {
            // SAFETY: see the comment above the impl (AVX2 enabled).
            Avx2(unsafe { _mm256_sub_pd(self.0, o.0) })
        }
        #[inline(always)]
        fn mul(self, o: Self) -> Self {
            // SAFETY: see the comment above the impl (AVX2 enabled).
            Avx2(unsafe { _mm256_mul_pd(self.0, o.0) })
        }
    }

    impl Lanes for Avx2 {
        #[inline(always)]
        unsafe fn pack_block(rows: &[*const f32], w: *const f64, mut put: impl FnMut(usize, Self)) {
            assert!(rows.len() >= 4);
            // SAFETY: AVX2 enabled (see above); 8 f32 per row and 8 f64 of `w`
            // readable (caller).
            unsafe {
                let (w0, w1) = (_mm256_loadu_pd(w), _mm256_loadu_pd(w.add(4)));
                // Row l: samples 0..4 and 4..8, windowed.
                let mut lo = [_mm256_setzero_pd(); 4];
                let mut hi = [_mm256_setzero_pd(); 4];
                for l in 0..4 {
                    let x = _mm256_loadu_ps(rows[l]);
                    lo[l] = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), w0);
                    hi[l] = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps::<1>(x)), w1);
                }
                for (half, r) in [lo, hi].iter().enumerate() {
                    // 4×4 transpose: column c holds sample 4·half + c of every row.
                    let a0 = _mm256_unpacklo_pd(r[0], r[1]);
                    let a1 = _mm256_unpackhi_pd(r[0], r[1]);
                    let a2 = _mm256_unpacklo_pd(r[2], r[3]);
                    let a3 = _mm256_unpackhi_pd(r[2], r[3]);
                    let c = 4 * half;
                    put(c, Avx2(_mm256_permute2f128_pd::<0x20>(a0, a2)));
                    put(c + 1, Avx2(_mm256_permute2f128_pd::<0x20>(a1, a3)));
                    put(c + 2, Avx2(_mm256_permute2f128_pd::<0x31>(a0, a2)));
                    put(c + 3, Avx2(_mm256_permute2f128_pd::<0x31>(a1, a3)));
                }
            }
        }
        type F = F128;
        #[inline(always)]
        unsafe fn store_f32(self, p: *mut f32) {
            // SAFETY: 4 writable f32s at `p` (caller); cvtpd2ps rounds to nearest
            // (the MXCSR default, which Rust never changes), as `as f32` does.
            unsafe { _mm_storeu_ps(p, _mm256_cvtpd_ps(self.0)) }
        }
        #[inline(always)]
        fn sqrt(self) -> Self {
            // SAFETY: see the comment above the impl (AVX2 enabled).
            Avx2(unsafe { _mm256_sqrt_pd(self.0) })
        }
    }

    impl Vector for Avx512 {
        type E = f64;
        const L: usize = 8;
        #[inline(always)]
        fn splat(x: f64) -> Self {
            // SAFETY: see the comment above the impl (AVX-512F enabled).
            Avx512(unsafe { _mm512_set1_pd(x) })
        }
        #[inline(always)]
        unsafe fn load(p: *const f64) -> Self {
            // SAFETY: 8 readable f64s at `p` (caller); unaligned load.
            Avx512(unsafe { _mm512_loadu_pd(p) })
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f64) {
            // SAFETY: 8 writable f64s at `p` (caller); unaligned store.
            unsafe { _mm512_storeu_pd(p, self.0) }
        }
        #[inline(always)]
        fn add(self, o: Self) -> Self {
            // SAFETY: see the comment above the impl (AVX-512F enabled).
            Avx512(unsafe { _mm512_add_pd(self.0, o.0) })
        }
        #[inline(always)]
        fn sub(self, o: Self) -> Self {
            // SAFETY: see the comment above the impl (AVX-512F enabled).
            Avx512(unsafe { _mm512_sub_pd(self.0, o.0) })
        }
        #[inline(always)]
        fn mul(self, o: Self) -> Self {
            // SAFETY: see the comment above the impl (AVX-512F enabled).
            Avx512(unsafe { _mm512_mul_pd(self.0, o.0) })
        }
    }

    impl Lanes for Avx512 {
        #[inline(always)]
        unsafe fn pack_block(rows: &[*const f32], w: *const f64, mut put: impl FnMut(usize, Self)) {
            assert!(rows.len() >= 8);
            // SAFETY: AVX-512F enabled (see above); 16 f32 per row and 16 f64 of
            // `w` readable (caller).
            unsafe {
                let (w0, w1) = (_mm512_loadu_pd(w), _mm512_loadu_pd(w.add(8)));
                let mut lo = [_mm512_setzero_pd(); 8];
                let mut hi = [_mm512_setzero_pd(); 8];
                for l in 0..8 {
                    let (x0, x1) = (_mm256_loadu_ps(rows[l]), _mm256_loadu_ps(rows[l].add(8)));
                    lo[l] = _mm512_mul_pd(_mm512_cvtps_pd(x0), w0);
                    hi[l] = _mm512_mul_pd(_mm512_cvtps_pd(x1), w1);
                }
                for (half, r) in [lo, hi].iter().enumerate() {
                    // 8×8 transpose: column c holds sample 8·half + c of every row.
                    let a0 = _mm512_unpacklo_pd(r[0], r[1]);
                    let a1 = _mm512_unpackhi_pd(r[0], r[1]);
                    let a2 = _mm512_unpacklo_pd(r[2], r[3]);
                    let a3 = _mm512_unpackhi_pd(r[2], r[3]);
                    let a4 = _mm512_unpacklo_pd(r[4], r[5]);
                    let a5 = _mm512_unpackhi_pd(r[4], r[5]);
                    let a6 = _mm512_unpacklo_pd(r[6], r[7]);
                    let a7 = _mm512_unpackhi_pd(r[6], r[7]);
                    // b0: columns 0, 4; b1: 2, 6; b2: 1, 5; b3: 3, 7 (rows 0–3),
                    // b4..b7 the same for rows 4–7.
                    let b0 = _mm512_shuffle_f64x2::<0x88>(a0, a2);
                    let b1 = _mm512_shuffle_f64x2::<0xDD>(a0, a2);
                    let b2 = _mm512_shuffle_f64x2::<0x88>(a1, a3);
                    let b3 = _mm512_shuffle_f64x2::<0xDD>(a1, a3);
                    let b4 = _mm512_shuffle_f64x2::<0x88>(a4, a6);
                    let b5 = _mm512_shuffle_f64x2::<0xDD>(a4, a6);
                    let b6 = _mm512_shuffle_f64x2::<0x88>(a5, a7);
                    let b7 = _mm512_shuffle_f64x2::<0xDD>(a5, a7);
                    let c = 8 * half;
                    put(c, Avx512(_mm512_shuffle_f64x2::<0x88>(b0, b4)));
                    put(c + 4, Avx512(_mm512_shuffle_f64x2::<0xDD>(b0, b4)));
                    put(c + 2, Avx512(_mm512_shuffle_f64x2::<0x88>(b1, b5)));
                    put(c + 6, Avx512(_mm512_shuffle_f64x2::<0xDD>(b1, b5)));
                    put(c + 1, Avx512(_mm512_shuffle_f64x2::<0x88>(b2, b6)));
                    put(c + 5, Avx512(_mm512_shuffle_f64x2::<0xDD>(b2, b6)));
                    put(c + 3, Avx512(_mm512_shuffle_f64x2::<0x88>(b3, b7)));
                    put(c + 7, Avx512(_mm512_shuffle_f64x2::<0xDD>(b3, b7)));
                }
            }
        }
        type F = F256;
        #[inline(always)]
        unsafe fn store_f32(self, p: *mut f32) {
            // SAFETY: 8 writable f32s at `p` (caller); cvtpd2ps rounds to nearest
            // (the MXCSR default), as `as f32` does.
            unsafe { _mm256_storeu_ps(p, _mm512_cvtpd_ps(self.0)) }
        }
        #[inline(always)]
        fn sqrt(self) -> Self {
            // SAFETY: see the comment above the impl (AVX-512F enabled).
            Avx512(unsafe { _mm512_sqrt_pd(self.0) })
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86_f32 {
    use std::arch::x86_64::*;

    use super::LanesF32;
    use super::x86::{F128, F256};

    // SAFETY (every `unsafe` block below): as for `Avx2`/`Avx512`, these values
    // only exist inside code compiled for, and running on, AVX2 / AVX-512F.
    impl LanesF32 for F128 {
        #[inline(always)]
        fn splat(x: f32) -> Self {
            // SAFETY: see above.
            F128(unsafe { _mm_set1_ps(x) })
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: 4 readable f32s at `p` (caller).
            F128(unsafe { _mm_loadu_ps(p) })
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: 4 writable f32s at `p` (caller).
            unsafe { _mm_storeu_ps(p, self.0) }
        }
        #[inline(always)]
        fn add(self, o: Self) -> Self {
            // SAFETY: see above.
            F128(unsafe { _mm_add_ps(self.0, o.0) })
        }
        #[inline(always)]
        fn mul(self, o: Self) -> Self {
            // SAFETY: see above.
            F128(unsafe { _mm_mul_ps(self.0, o.0) })
        }
    }

    impl LanesF32 for F256 {
        #[inline(always)]
        fn splat(x: f32) -> Self {
            // SAFETY: see above.
            F256(unsafe { _mm256_set1_ps(x) })
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: 8 readable f32s at `p` (caller).
            F256(unsafe { _mm256_loadu_ps(p) })
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: 8 writable f32s at `p` (caller).
            unsafe { _mm256_storeu_ps(p, self.0) }
        }
        #[inline(always)]
        fn add(self, o: Self) -> Self {
            // SAFETY: see above.
            F256(unsafe { _mm256_add_ps(self.0, o.0) })
        }
        #[inline(always)]
        fn mul(self, o: Self) -> Self {
            // SAFETY: see above.
            F256(unsafe { _mm256_mul_ps(self.0, o.0) })
        }
    }
}
