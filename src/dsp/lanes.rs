//! [`Lanes`]: `L` f64 lanes as one value, for the vertical transforms of
//! `batch_fft`: an `__m512d` (AVX-512F, 8 lanes), an `__m256d` (AVX2, 4 lanes)
//! or a plain `[f64; 4]` (portable). Only lane-wise IEEE add, sub, mul, sqrt and
//! the f64 → f32 rounding conversion, so every implementation gives each lane the
//! bits of the same scalar expression.
//!
//! Buffers are flat `f64` slices holding `L` lanes per index; loads and stores
//! take raw pointers that the caller has bounds-checked.

/// `L` f64 lanes. Implementations only do lane-wise, correctly rounded IEEE
/// operations (no FMA), so results do not depend on the implementation.
pub(crate) trait Lanes: Copy {
    /// Lanes per value.
    const L: usize;
    fn splat(x: f64) -> Self;
    /// # Safety
    /// `p .. p + L` must be readable f64s.
    unsafe fn load(p: *const f64) -> Self;
    /// # Safety
    /// `p .. p + L` must be writable f64s.
    unsafe fn store(self, p: *mut f64);
    /// Lane-wise `(f32)self` into `p .. p + L`.
    ///
    /// # Safety
    /// `p .. p + L` must be writable f32s.
    unsafe fn store_f32(self, p: *mut f32);
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn sqrt(self) -> Self;
    /// Lane `l` = `f64::from(*base.add(index[l]))`.
    ///
    /// # Safety
    /// `index.len() ≥ L` and `base + index[l]` readable for every lane.
    unsafe fn gather_f32(base: *const f32, index: &[i32]) -> Self;
    /// The matching `L` f32 lanes.
    type F: LanesF32;
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

impl Lanes for Portable {
    const L: usize = 4;
    type F = [f32; 4];
    #[inline(always)]
    unsafe fn gather_f32(base: *const f32, index: &[i32]) -> Self {
        // SAFETY: the caller guarantees 4 indices, each readable from `base`.
        Portable(std::array::from_fn(|l| unsafe {
            f64::from(*base.offset(index[l] as isize))
        }))
    }
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
    unsafe fn store_f32(self, p: *mut f32) {
        let v = self.0.map(|x| x as f32);
        // SAFETY: the caller guarantees 4 writable f32s at `p`; unaligned write.
        unsafe { p.cast::<[f32; 4]>().write_unaligned(v) }
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
    impl Lanes for Avx2 {
        const L: usize = 4;
        type F = F128;
        #[inline(always)]
        unsafe fn gather_f32(base: *const f32, index: &[i32]) -> Self {
            assert!(index.len() >= 4);
            // SAFETY: AVX2 enabled (see above); 4 indices read (checked), each
            // readable from `base` (caller).
            Avx2(unsafe {
                let i = _mm_loadu_si128(index.as_ptr().cast());
                _mm256_cvtps_pd(_mm_i32gather_ps::<4>(base, i))
            })
        }
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
        unsafe fn store_f32(self, p: *mut f32) {
            // SAFETY: 4 writable f32s at `p` (caller); cvtpd2ps rounds to nearest
            // (the MXCSR default, which Rust never changes), as `as f32` does.
            unsafe { _mm_storeu_ps(p, _mm256_cvtpd_ps(self.0)) }
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
        #[inline(always)]
        fn sqrt(self) -> Self {
            // SAFETY: see the comment above the impl (AVX2 enabled).
            Avx2(unsafe { _mm256_sqrt_pd(self.0) })
        }
    }

    impl Lanes for Avx512 {
        const L: usize = 8;
        type F = F256;
        #[inline(always)]
        unsafe fn gather_f32(base: *const f32, index: &[i32]) -> Self {
            assert!(index.len() >= 8);
            // SAFETY: AVX-512F (which implies AVX2) enabled (see above); 8
            // indices read (checked), each readable from `base` (caller).
            Avx512(unsafe {
                let i = _mm256_loadu_si256(index.as_ptr().cast());
                _mm512_cvtps_pd(_mm256_i32gather_ps::<4>(base, i))
            })
        }
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
        unsafe fn store_f32(self, p: *mut f32) {
            // SAFETY: 8 writable f32s at `p` (caller); cvtpd2ps rounds to nearest
            // (the MXCSR default), as `as f32` does.
            unsafe { _mm256_storeu_ps(p, _mm512_cvtpd_ps(self.0)) }
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
