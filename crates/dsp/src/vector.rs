//! [`Vector`]: `L` lanes of one element type as one value, the operations
//! every lane-wise ("vertical") transform is written with, whatever its
//! precision: `lanes` implements it over f64 (the librosa path), `lanes32`
//! over f32 (the Kaldi and Whisper paths), and `lane_fft`'s transform is
//! written once for both.
//!
//! The rule every implementation keeps: only lane-wise, correctly rounded
//! IEEE operations, no FMA and no approximation, so each lane holds the bits
//! of the same scalar expression whatever the build (AVX-512, AVX2,
//! portable), and a transform's result depends neither on its lane nor on
//! `L`.

/// A lane's element: f64 or f32.
pub(crate) trait Element: Copy {
    /// `x` rounded once to this type (tables are computed in f64).
    fn from_f64(x: f64) -> Self;
}

impl Element for f64 {
    #[inline(always)]
    fn from_f64(x: f64) -> f64 {
        x
    }
}

impl Element for f32 {
    #[inline(always)]
    fn from_f64(x: f64) -> f32 {
        x as f32
    }
}

/// `L` lanes of [`Vector::E`]. Buffers are flat slices holding `L` lanes
/// per index; loads and stores take raw pointers the caller bounds-checked.
pub(crate) trait Vector: Copy {
    /// The element of every lane.
    type E: Element;
    /// Lanes per value.
    const L: usize;
    fn splat(x: Self::E) -> Self;
    /// # Safety
    /// `p .. p + L` must be readable elements.
    unsafe fn load(p: *const Self::E) -> Self;
    /// # Safety
    /// `p .. p + L` must be writable elements.
    unsafe fn store(self, p: *mut Self::E);
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
}
