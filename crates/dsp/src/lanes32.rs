//! [`Lanes32`]: `L` f32 lanes as one value, for the float32 batched transforms
//! (`whisper_batch`): an `__m512` (AVX-512F, 16 lanes), an `__m256` (AVX2, 8
//! lanes) or a plain `[f32; 4]` (portable: one SSE or NEON register). The float32 sibling of `lanes`,
//! with the same rule: only lane-wise, correctly rounded IEEE operations (no
//! FMA, no approximations), so every implementation gives each lane the bits
//! of the same scalar expression and results do not depend on the build.
//!
//! Buffers are flat `f32` slices holding `L` lanes per index; loads and stores
//! take raw pointers that the caller has bounds-checked.

use crate::vector::Vector;

/// `L` f32 lanes: a [`Vector`] of f32 with the gathers and transposes the
/// float32 recipes load their frames with. Implementations only do lane-wise,
/// correctly rounded IEEE operations, so results do not depend on the
/// implementation.
pub(crate) trait Lanes32: Vector<E = f32> {
    /// Lane `l` = `*p.add(l · stride)`.
    ///
    /// # Safety
    /// `p + l · stride` readable for every `l < L`; `(L − 1) · stride < 2³¹`.
    unsafe fn gather(p: *const f32, stride: usize) -> Self;
    /// An `L × L` block transposed:
    /// `*dst.add(i·dst_stride + l) = *src.add(l·stride + i)` for `i, l < L`
    /// (with `dst_stride = L`, row `l` of the source becomes lane `l` of the
    /// `L` values at `dst`). Only moves, no arithmetic.
    ///
    /// # Safety
    /// `src + l·stride .. + L` readable and `dst + l·dst_stride .. + L`
    /// writable for every `l < L`, not overlapping.
    unsafe fn transpose(src: *const f32, stride: usize, dst: *mut f32, dst_stride: usize) {
        for l in 0..Self::L {
            for i in 0..Self::L {
                // SAFETY: the caller's bounds.
                unsafe { *dst.add(i * dst_stride + l) = *src.add(l * stride + i) };
            }
        }
    }
}

/// Four lanes in a plain array: what any target compiles (the compiler may or
/// may not use SIMD for it; four fit one SSE or NEON register).
#[derive(Clone, Copy)]
pub(crate) struct Portable32([f32; 4]);

impl Vector for Portable32 {
    type E = f32;
    const L: usize = 4;
    #[inline(always)]
    fn splat(x: f32) -> Self {
        Portable32([x; 4])
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller guarantees 4 readable f32s at `p`; unaligned read.
        Portable32(unsafe { p.cast::<[f32; 4]>().read_unaligned() })
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the caller guarantees 4 writable f32s at `p`; unaligned write.
        unsafe { p.cast::<[f32; 4]>().write_unaligned(self.0) }
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        Portable32(std::array::from_fn(|l| self.0[l] + o.0[l]))
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        Portable32(std::array::from_fn(|l| self.0[l] - o.0[l]))
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        Portable32(std::array::from_fn(|l| self.0[l] * o.0[l]))
    }
}

impl Lanes32 for Portable32 {
    #[inline(always)]
    unsafe fn gather(p: *const f32, stride: usize) -> Self {
        // SAFETY: the caller guarantees every `p + l · stride` readable.
        Portable32(std::array::from_fn(|l| unsafe { *p.add(l * stride) }))
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{Avx2x8, Avx512x16};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::Lanes32;
    use crate::vector::Vector;

    /// Eight f32 lanes in an AVX register. Only construct inside code compiled
    /// with AVX2 enabled, on a CPU that has it.
    #[derive(Clone, Copy)]
    pub(crate) struct Avx2x8(__m256);

    /// Sixteen f32 lanes in an AVX-512 register. Only construct inside code
    /// compiled with AVX-512F enabled, on a CPU that has it.
    #[derive(Clone, Copy)]
    pub(crate) struct Avx512x16(__m512);

    // SAFETY (every `unsafe` block below): these values are only created and
    // used inside `#[target_feature]` functions of the matching feature, which
    // their callers enter only after the runtime check (`Level::available`);
    // pointer preconditions are the trait methods' own.
    impl Vector for Avx2x8 {
        type E = f32;
        const L: usize = 8;
        #[inline(always)]
        fn splat(x: f32) -> Self {
            // SAFETY: see the comment above the impl (AVX2 enabled).
            Avx2x8(unsafe { _mm256_set1_ps(x) })
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: 8 readable f32s at `p` (caller); unaligned load.
            Avx2x8(unsafe { _mm256_loadu_ps(p) })
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: 8 writable f32s at `p` (caller); unaligned store.
            unsafe { _mm256_storeu_ps(p, self.0) }
        }
        #[inline(always)]
        fn add(self, o: Self) -> Self {
            // SAFETY: see the comment above the impl (AVX2 enabled).
            Avx2x8(unsafe { _mm256_add_ps(self.0, o.0) })
        }
        #[inline(always)]
        fn sub(self, o: Self) -> Self {
            // SAFETY: see the comment above the impl (AVX2 enabled).
            Avx2x8(unsafe { _mm256_sub_ps(self.0, o.0) })
        }
        #[inline(always)]
        fn mul(self, o: Self) -> Self {
            // SAFETY: see the comment above the impl (AVX2 enabled).
            Avx2x8(unsafe { _mm256_mul_ps(self.0, o.0) })
        }
    }

    impl Lanes32 for Avx2x8 {
        #[inline(always)]
        unsafe fn gather(p: *const f32, stride: usize) -> Self {
            let s = stride as i32;
            // SAFETY: AVX2 enabled; every `p + l · stride` readable and the
            // offsets fit i32 (caller).
            unsafe {
                let idx = _mm256_mullo_epi32(
                    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                    _mm256_set1_epi32(s),
                );
                Avx2x8(_mm256_i32gather_ps::<4>(p, idx))
            }
        }
        #[inline(always)]
        unsafe fn transpose(src: *const f32, stride: usize, dst: *mut f32, dst_stride: usize) {
            // SAFETY: AVX2 enabled; the caller's bounds. Unpack pairs of rows,
            // shuffle pairs of pairs, then swap 128-bit halves.
            unsafe {
                let mut r = [_mm256_setzero_ps(); 8];
                for (l, r) in r.iter_mut().enumerate() {
                    *r = _mm256_loadu_ps(src.add(l * stride));
                }
                let mut t = [_mm256_setzero_ps(); 8];
                for j in (0..8).step_by(2) {
                    t[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
                    t[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
                }
                // s[4g + c]: columns c and c + 4 of rows 4g .. 4g + 4.
                let mut s = [_mm256_setzero_ps(); 8];
                for g in [0, 4] {
                    s[g] = _mm256_shuffle_ps::<0x44>(t[g], t[g + 2]);
                    s[g + 1] = _mm256_shuffle_ps::<0xEE>(t[g], t[g + 2]);
                    s[g + 2] = _mm256_shuffle_ps::<0x44>(t[g + 1], t[g + 3]);
                    s[g + 3] = _mm256_shuffle_ps::<0xEE>(t[g + 1], t[g + 3]);
                }
                for c in 0..4 {
                    let lo = _mm256_permute2f128_ps::<0x20>(s[c], s[4 + c]);
                    let hi = _mm256_permute2f128_ps::<0x31>(s[c], s[4 + c]);
                    _mm256_storeu_ps(dst.add(c * dst_stride), lo);
                    _mm256_storeu_ps(dst.add((c + 4) * dst_stride), hi);
                }
            }
        }
    }

    impl Vector for Avx512x16 {
        type E = f32;
        const L: usize = 16;
        #[inline(always)]
        fn splat(x: f32) -> Self {
            // SAFETY: see the comment above the impl (AVX-512F enabled).
            Avx512x16(unsafe { _mm512_set1_ps(x) })
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: 16 readable f32s at `p` (caller); unaligned load.
            Avx512x16(unsafe { _mm512_loadu_ps(p) })
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: 16 writable f32s at `p` (caller); unaligned store.
            unsafe { _mm512_storeu_ps(p, self.0) }
        }
        #[inline(always)]
        fn add(self, o: Self) -> Self {
            // SAFETY: see the comment above the impl (AVX-512F enabled).
            Avx512x16(unsafe { _mm512_add_ps(self.0, o.0) })
        }
        #[inline(always)]
        fn sub(self, o: Self) -> Self {
            // SAFETY: see the comment above the impl (AVX-512F enabled).
            Avx512x16(unsafe { _mm512_sub_ps(self.0, o.0) })
        }
        #[inline(always)]
        fn mul(self, o: Self) -> Self {
            // SAFETY: see the comment above the impl (AVX-512F enabled).
            Avx512x16(unsafe { _mm512_mul_ps(self.0, o.0) })
        }
    }

    impl Lanes32 for Avx512x16 {
        #[inline(always)]
        unsafe fn gather(p: *const f32, stride: usize) -> Self {
            let s = stride as i32;
            // SAFETY: AVX-512F enabled; every `p + l · stride` readable and the
            // offsets fit i32 (caller).
            unsafe {
                let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
                let idx = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(s));
                Avx512x16(_mm512_i32gather_ps::<4>(idx, p.cast()))
            }
        }
        #[inline(always)]
        unsafe fn transpose(src: *const f32, stride: usize, dst: *mut f32, dst_stride: usize) {
            // SAFETY: AVX-512F enabled; the caller's bounds. Unpack pairs of
            // rows, shuffle pairs of pairs (u[4b + c] holds, in its 128-bit
            // lane q, column 4q + c of rows 4b .. 4b + 4), then gather the
            // 128-bit lanes in two steps.
            unsafe {
                let mut r = [_mm512_setzero_ps(); 16];
                for (l, r) in r.iter_mut().enumerate() {
                    *r = _mm512_loadu_ps(src.add(l * stride));
                }
                let mut t = [_mm512_setzero_ps(); 16];
                for j in (0..16).step_by(2) {
                    t[j] = _mm512_unpacklo_ps(r[j], r[j + 1]);
                    t[j + 1] = _mm512_unpackhi_ps(r[j], r[j + 1]);
                }
                let mut u = [_mm512_setzero_ps(); 16];
                for g in (0..16).step_by(4) {
                    u[g] = _mm512_shuffle_ps::<0x44>(t[g], t[g + 2]);
                    u[g + 1] = _mm512_shuffle_ps::<0xEE>(t[g], t[g + 2]);
                    u[g + 2] = _mm512_shuffle_ps::<0x44>(t[g + 1], t[g + 3]);
                    u[g + 3] = _mm512_shuffle_ps::<0xEE>(t[g + 1], t[g + 3]);
                }
                for c in 0..4 {
                    let (a, b, x, y) = (u[c], u[4 + c], u[8 + c], u[12 + c]);
                    let v0 = _mm512_shuffle_f32x4::<0x88>(a, b);
                    let v1 = _mm512_shuffle_f32x4::<0xDD>(a, b);
                    let w0 = _mm512_shuffle_f32x4::<0x88>(x, y);
                    let w1 = _mm512_shuffle_f32x4::<0xDD>(x, y);
                    let d = |i: usize| dst.add(i * dst_stride);
                    _mm512_storeu_ps(d(c), _mm512_shuffle_f32x4::<0x88>(v0, w0));
                    _mm512_storeu_ps(d(8 + c), _mm512_shuffle_f32x4::<0xDD>(v0, w0));
                    _mm512_storeu_ps(d(4 + c), _mm512_shuffle_f32x4::<0x88>(v1, w1));
                    _mm512_storeu_ps(d(12 + c), _mm512_shuffle_f32x4::<0xDD>(v1, w1));
                }
            }
        }
    }
}

/// A float32 buffer whose first value is 64-byte aligned, so that a vector
/// of `L` values at an index multiple of `L` never straddles two cache
/// lines (a `Vec<f32>` is only 16-byte aligned by the allocator, and every
/// 64-byte load or store of it would touch two lines).
pub(crate) struct Aligned32 {
    lines: Vec<Line>,
    len: usize,
}

/// One cache line of floats.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

impl Aligned32 {
    /// `len` zeros.
    pub fn zeros(len: usize) -> Aligned32 {
        Aligned32 {
            lines: vec![Line([0.0; 16]); len.div_ceil(16)],
            len,
        }
    }
}

impl std::ops::Deref for Aligned32 {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        // SAFETY: `lines` holds ⌈len/16⌉·16 ≥ len initialised f32s, laid
        // out contiguously (`repr(C)` arrays, size 64 = alignment).
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast(), self.len) }
    }
}

impl std::ops::DerefMut for Aligned32 {
    fn deref_mut(&mut self) -> &mut [f32] {
        // SAFETY: as in `deref`, uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast(), self.len) }
    }
}
