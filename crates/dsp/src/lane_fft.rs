//! [`LaneFft`]: an in-place complex FFT of `m` points (a power of two) over
//! [`Vector`] values, `L` transforms at once (lane `l` = transform `l`),
//! written once for both precisions: f64 for the librosa path (`batch_fft`,
//! `n_fft / 2` points) and f32 for the Kaldi recipes (`kaldi::batch`: 256
//! points at 16 kHz).
//! * the caller stores input `j` at [`LaneFft::slots`]`()[j]` (bit reversal);
//! * decimation in time, in place: one radix-2 pass when `log2 m` is odd,
//!   then radix-4 passes (three twiddle products and sixteen additions per
//!   four values; the first pass has no products); output in natural order.
//!
//! In place, one buffer pair (`2·m·L` values: 32 KiB for 256 float32 points
//! in 16 lanes) stays in a core's L1 cache, where `stockham32`'s ping-pong
//! pairs (twice that) do not, and no store lands 4 KiB from the next load
//! (the power-of-two strides that made the Stockham stages at 256 points
//! twice as slow in 16 lanes). Twiddles are computed in float64 and rounded
//! once to the element type; only lane-wise IEEE operations in one order, so
//! a transform's result depends neither on its lane, `L` nor the build.

use crate::vector::{Element, Vector};

/// `e^{−2πi·j/n}` as `[re, im]`, computed in float64 and rounded once.
pub(crate) fn twiddle<E: Element>(j: usize, n: usize) -> [E; 2] {
    let angle = -2.0 * std::f64::consts::PI * j as f64 / n as f64;
    [E::from_f64(angle.cos()), E::from_f64(angle.sin())]
}

/// One radix-4 pass combining four DFTs of size `h`: `tw[j]` is `W_{4h}^j`,
/// `W_{4h}^{2j}`, `W_{4h}^{3j}` as `(re, im)` pairs, `W_N = e^{−2πi/N}`.
struct Pass<E> {
    h: usize,
    tw: Vec<[E; 6]>,
}

/// The tables of one transform size; `Send + Sync`.
pub(crate) struct LaneFft<E> {
    m: usize,
    /// `log2 m` is odd: a radix-2 pass (span 1) runs first.
    radix2_first: bool,
    passes: Vec<Pass<E>>,
    /// `rev[j]`: where input `j` goes (bit reversal of `log2 m` bits).
    rev: Vec<u32>,
}

impl<E: Element> LaneFft<E> {
    /// The transform of `m` points, or None unless `m` is a power of two ≥ 2.
    pub fn new(m: usize) -> Option<LaneFft<E>> {
        if m < 2 || !m.is_power_of_two() {
            return None;
        }
        let bits = m.trailing_zeros();
        let radix2_first = bits % 2 == 1;
        let mut passes = Vec::new();
        let mut h = if radix2_first { 2 } else { 1 };
        while h < m {
            let tw = (0..h)
                .map(|j| {
                    let [w1r, w1i] = twiddle(j, 4 * h);
                    let [w2r, w2i] = twiddle(2 * j, 4 * h);
                    let [w3r, w3i] = twiddle(3 * j, 4 * h);
                    [w1r, w1i, w2r, w2i, w3r, w3i]
                })
                .collect();
            passes.push(Pass { h, tw });
            h *= 4;
        }
        let rev = (0..m as u32)
            .map(|j| j.reverse_bits() >> (32 - bits))
            .collect();
        debug_assert!(passes.iter().all(|p| m.is_multiple_of(4 * p.h)));
        Some(LaneFft {
            m,
            radix2_first,
            passes,
            rev,
        })
    }

    /// Complex length `m`.
    pub fn m(&self) -> usize {
        self.m
    }

    /// `slots()[j]`: where input `j` is stored (bit reversal of `j`).
    pub fn slots(&self) -> &[u32] {
        &self.rev
    }

    /// The transforms of `re`/`im` (`m · V::L` values each, index `k`'s lanes
    /// at `k·L ..`) in place; input at [`slots`](Self::slots), output in
    /// natural order.
    #[inline(always)]
    pub fn run<V: Vector<E = E>>(&self, re: &mut [E], im: &mut [E]) {
        let (m, l) = (self.m, V::L);
        assert!(re.len() == m * l && im.len() == m * l);
        let (re, im) = (re.as_mut_ptr(), im.as_mut_ptr());
        if self.radix2_first {
            for b in (0..m).step_by(2) {
                // SAFETY: b + 1 < m, so every access is inside the m·L values.
                unsafe {
                    let (r0, r1) = (V::load(re.add(b * l)), V::load(re.add((b + 1) * l)));
                    let (i0, i1) = (V::load(im.add(b * l)), V::load(im.add((b + 1) * l)));
                    r0.add(r1).store(re.add(b * l));
                    r0.sub(r1).store(re.add((b + 1) * l));
                    i0.add(i1).store(im.add(b * l));
                    i0.sub(i1).store(im.add((b + 1) * l));
                }
            }
        }
        for pass in &self.passes {
            // SAFETY: `re`, `im` hold m·L values and 4·h divides m.
            unsafe {
                if pass.h == 1 {
                    radix4_first::<V>(re, im, m);
                } else {
                    radix4::<V>(re, im, m, pass.h, &pass.tw);
                }
            }
        }
    }
}

/// The radix-4 butterfly both passes share, on complex values `(re, im)`:
/// with `s0 = A + B`, `s1 = A − B`, `s2 = C + D`, `s3 = C − D`, the outputs
/// `[s0 + s2, s1 − i·s3, s0 − s2, s1 + i·s3]` (`−i·s3 = s3.im − i·s3.re`).
#[inline(always)]
fn butterfly4<V: Vector>(a: (V, V), b: (V, V), c: (V, V), d: (V, V)) -> [(V, V); 4] {
    let (s0r, s0i) = (a.0.add(b.0), a.1.add(b.1));
    let (s1r, s1i) = (a.0.sub(b.0), a.1.sub(b.1));
    let (s2r, s2i) = (c.0.add(d.0), c.1.add(d.1));
    let (s3r, s3i) = (c.0.sub(d.0), c.1.sub(d.1));
    [
        (s0r.add(s2r), s0i.add(s2i)),
        (s1r.add(s3i), s1i.sub(s3r)),
        (s0r.sub(s2r), s0i.sub(s2i)),
        (s1r.sub(s3i), s1i.add(s3r)),
    ]
}

/// The first radix-4 pass (span 1): every twiddle is 1, so it only adds.
///
/// # Safety
/// `re`, `im`: `m · V::L` values each, `4 | m`.
#[inline(always)]
unsafe fn radix4_first<V: Vector>(re: *mut V::E, im: *mut V::E, m: usize) {
    let l = V::L;
    for b in (0..m).step_by(4) {
        // SAFETY: b + 3 < m (caller: 4 | m).
        unsafe {
            let ld = |p: *mut V::E, q: usize| V::load(p.add((b + q) * l));
            let out = butterfly4(
                (ld(re, 0), ld(im, 0)),
                (ld(re, 1), ld(im, 1)),
                (ld(re, 2), ld(im, 2)),
                (ld(re, 3), ld(im, 3)),
            );
            for (q, (r, i)) in out.into_iter().enumerate() {
                r.store(re.add((b + q) * l));
                i.store(im.add((b + q) * l));
            }
        }
    }
}

/// `x · w`, complex.
#[inline(always)]
fn cmul<V: Vector>(xr: V, xi: V, wr: V, wi: V) -> (V, V) {
    (xr.mul(wr).sub(xi.mul(wi)), xr.mul(wi).add(xi.mul(wr)))
}

/// One radix-4 pass (after the first): blocks of `4h` whose quarters hold
/// the size-`h` DFTs of the residues 0, 2, 1, 3 (mod 4) of the block's inputs
/// (the bit-reversed order); with `N = 4h`, `A = Q0[j]`, `B = W_N^{2j}·Q1[j]`,
/// `C = W_N^j·Q2[j]`, `D = W_N^{3j}·Q3[j]`, the outputs are
/// `X[j] = (A + B) + (C + D)`, `X[j + h] = (A − B) − i(C − D)`,
/// `X[j + 2h] = (A + B) − (C + D)`, `X[j + 3h] = (A − B) + i(C − D)`.
///
/// # Safety
/// `re`, `im`: `m · V::L` values each, `4h | m`, `tw.len() ≥ h`.
#[inline(always)]
unsafe fn radix4<V: Vector>(re: *mut V::E, im: *mut V::E, m: usize, h: usize, tw: &[[V::E; 6]]) {
    let l = V::L;
    let tw = &tw[..h];
    for b in (0..m).step_by(4 * h) {
        for (j, t) in tw.iter().enumerate() {
            let t = t.map(V::splat);
            // SAFETY: b + j + 3h < b + 4h ≤ m (caller: 4h | m, j < h).
            unsafe {
                let at = |q: usize| (b + j + q * h) * l;
                let ld = |p: *mut V::E, q: usize| V::load(p.add(at(q)));
                let (ar, ai) = (ld(re, 0), ld(im, 0));
                let (br, bi) = cmul(ld(re, 1), ld(im, 1), t[2], t[3]);
                let (cr, ci) = cmul(ld(re, 2), ld(im, 2), t[0], t[1]);
                let (dr, di) = cmul(ld(re, 3), ld(im, 3), t[4], t[5]);
                let out = butterfly4((ar, ai), (br, bi), (cr, ci), (dr, di));
                for (q, (r, i)) in out.into_iter().enumerate() {
                    r.store(re.add(at(q)));
                    i.store(im.add(at(q)));
                }
            }
        }
    }
}
