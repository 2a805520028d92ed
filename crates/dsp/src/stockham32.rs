//! [`Stockham32`]: a complex FFT of `m` points over [`Lanes32`] values, `L`
//! transforms at once (lane `l` = transform `l`), for the float32 batched
//! recipes (`whisper_batch`: 200 points; `kaldi::batch`: the padded frame
//! length over 2, 256 at 16 kHz).
//!
//! Stockham's autosort (decimation in frequency, ping-pong buffers, natural
//! order in and out): a radix-`r` stage of current size `n` and stride `s`
//! reads `a_k = x[q + s(p + k·n/r)]` and writes
//! `y[q + s(r·p + j)] = DFT_r(a)_j · W_n^{j·p}`, `W_n = e^{−2πi/n}`, with the
//! twiddles computed in float64 and rounded once. Radices 2, 3, 4, 5 and 8;
//! [`Stockham32::new`] factors `m` into them (8s, then 5s, 4, 3s, 2).
//!
//! Every value is the same scalar expression in every lane, with only
//! lane-wise IEEE operations (no FMA), so a transform's result does not depend
//! on its lane, on `L` nor on the build.
//!
//! Buffers: `re[0]`/`im[0]` hold the input, `m·L` values each, index-major
//! (value `j` of lane `l` at `j·L + l`); [`Stockham32::run`] returns which of
//! the two pairs holds the output.

use super::lane_fft::twiddle;
use super::lanes32::Lanes32;

/// One stage: radix, current transform size, stride, and
/// `tw[p·(r − 1) + j − 1] = W_n^{j·p}` as `(re, im)`.
struct Stage {
    radix: usize,
    n: usize,
    s: usize,
    tw: Vec<[f32; 2]>,
}

/// The stages of one transform size; `Send + Sync`.
pub(crate) struct Stockham32 {
    m: usize,
    stages: Vec<Stage>,
}

impl Stockham32 {
    /// The transform of `m` points, or None when `m` < 2 or has a prime
    /// factor above 5.
    pub fn new(m: usize) -> Option<Stockham32> {
        if m < 2 {
            return None;
        }
        let mut radices = Vec::new();
        let mut rest = m;
        for r in [8, 5, 4, 3, 2] {
            while rest.is_multiple_of(r) {
                radices.push(r);
                rest /= r;
            }
        }
        (rest == 1).then(|| Stockham32::with_radices(&radices))
    }

    /// The transform of `radices.iter().product()` points, stages in this
    /// order (each radix 2, 3, 4, 5 or 8).
    pub fn with_radices(radices: &[usize]) -> Stockham32 {
        assert!(radices.iter().all(|r| [2, 3, 4, 5, 8].contains(r)));
        let m = radices.iter().product();
        let mut stages = Vec::new();
        let (mut n, mut s) = (m, 1);
        for &radix in radices {
            let tw = (0..n / radix)
                .flat_map(|p| (1..radix).map(move |j| twiddle(j * p, n)))
                .collect();
            stages.push(Stage { radix, n, s, tw });
            (n, s) = (n / radix, s * radix);
        }
        Stockham32 { m, stages }
    }

    /// The transforms of `re[0]`/`im[0]` (`m·V::L` values each; all four
    /// buffers at least that long); returns the pair that holds the result.
    #[inline(always)]
    pub fn run<V: Lanes32>(&self, re: [&mut [f32]; 2], im: [&mut [f32]; 2]) -> usize {
        let len = self.m * V::L;
        let [r0, r1] = re;
        let [i0, i1] = im;
        let (r0, r1, i0, i1) = (
            &mut r0[..len],
            &mut r1[..len],
            &mut i0[..len],
            &mut i1[..len],
        );
        let mut from = 0;
        for st in &self.stages {
            let (src, dst) = if from == 0 {
                ((&*r0, &*i0), (&mut *r1, &mut *i1))
            } else {
                ((&*r1, &*i1), (&mut *r0, &mut *i0))
            };
            // SAFETY: every buffer holds m·L values (sliced above) and the
            // stage's indices are < n·s = m (see `stage`).
            unsafe {
                let (s, d) = (
                    (src.0.as_ptr(), src.1.as_ptr()),
                    (dst.0.as_mut_ptr(), dst.1.as_mut_ptr()),
                );
                match st.radix {
                    2 => stage::<V, 2>(s, d, st),
                    3 => stage::<V, 3>(s, d, st),
                    4 => stage::<V, 4>(s, d, st),
                    5 => stage::<V, 5>(s, d, st),
                    8 => stage::<V, 8>(s, d, st),
                    r => unreachable!("radix {r}"),
                }
            }
            from = 1 - from;
        }
        from
    }
}

/// One radix-`R` Stockham stage from `src` to `dst`.
///
/// # Safety
/// `src` and `dst`: `st.n · st.s · V::L` values each (re, im), and `R | st.n`.
#[inline(always)]
unsafe fn stage<V: Lanes32, const R: usize>(
    src: (*const f32, *const f32),
    dst: (*mut f32, *mut f32),
    st: &Stage,
) {
    let (l, s, m) = (V::L, st.s, st.n / R);
    let zero = V::splat(0.0);
    for p in 0..m {
        let mut w = [(zero, zero); R];
        let tw = &st.tw[p * (R - 1)..(p + 1) * (R - 1)];
        for (w, &[wr, wi]) in w[1..].iter_mut().zip(tw) {
            *w = (V::splat(wr), V::splat(wi));
        }
        for q in 0..s {
            let mut a = [(zero, zero); R];
            for (k, a) in a.iter_mut().enumerate() {
                let i = (q + s * (p + k * m)) * l;
                // SAFETY: q + s(p + k·m) < s·R·m = n·s (caller's bound).
                *a = unsafe { (V::load(src.0.add(i)), V::load(src.1.add(i))) };
            }
            dft::<V, R>(&mut a);
            for (j, &v) in a.iter().enumerate() {
                let (vr, vi) = if j > 0 && p > 0 { cmul(v, w[j]) } else { v };
                let o = (q + s * (R * p + j)) * l;
                // SAFETY: q + s(R·p + j) < s·R·m (caller's bound).
                unsafe {
                    vr.store(dst.0.add(o));
                    vi.store(dst.1.add(o));
                }
            }
        }
    }
}

/// `x · w`, complex.
#[inline(always)]
fn cmul<V: Lanes32>((xr, xi): (V, V), (wr, wi): (V, V)) -> (V, V) {
    (xr.mul(wr).sub(xi.mul(wi)), xr.mul(wi).add(xi.mul(wr)))
}

#[inline(always)]
fn add<V: Lanes32>(x: (V, V), y: (V, V)) -> (V, V) {
    (x.0.add(y.0), x.1.add(y.1))
}

#[inline(always)]
fn sub<V: Lanes32>(x: (V, V), y: (V, V)) -> (V, V) {
    (x.0.sub(y.0), x.1.sub(y.1))
}

/// `−i·x`.
#[inline(always)]
fn neg_i<V: Lanes32>(x: (V, V)) -> (V, V) {
    (x.1, V::splat(0.0).sub(x.0))
}

/// The DFT of `a` in place (`W_R = e^{−2πi/R}`), `R` ∈ {2, 3, 4, 5, 8}.
#[inline(always)]
fn dft<V: Lanes32, const R: usize>(a: &mut [(V, V); R]) {
    match R {
        2 => {
            let (x, y) = (a[0], a[1]);
            a[0] = add(x, y);
            a[1] = sub(x, y);
        }
        3 => dft3(a),
        4 => {
            let (s02, d02) = (add(a[0], a[2]), sub(a[0], a[2]));
            let (s13, d13) = (add(a[1], a[3]), sub(a[1], a[3]));
            a[0] = add(s02, s13);
            a[2] = sub(s02, s13);
            // d02 ∓ i·d13.
            a[1] = (d02.0.add(d13.1), d02.1.sub(d13.0));
            a[3] = (d02.0.sub(d13.1), d02.1.add(d13.0));
        }
        5 => dft5(a),
        8 => dft8(a),
        _ => unreachable!("radix {R}"),
    }
}

/// The 3-point DFT: with `t = a1 + a2`, `u = a0 − t/2`,
/// `v = sin(2π/3)·(a1 − a2)`: `b0 = a0 + t`, `b1,2 = u ∓ i·v`.
#[inline(always)]
fn dft3<V: Lanes32, const R: usize>(a: &mut [(V, V); R]) {
    let half = V::splat(0.5);
    let s = V::splat((2.0 * std::f64::consts::PI / 3.0).sin() as f32);
    let (t, d) = (add(a[1], a[2]), sub(a[1], a[2]));
    let a0 = a[0];
    let u = (a0.0.sub(half.mul(t.0)), a0.1.sub(half.mul(t.1)));
    let v = (s.mul(d.0), s.mul(d.1));
    a[0] = add(a0, t);
    a[1] = (u.0.add(v.1), u.1.sub(v.0));
    a[2] = (u.0.sub(v.1), u.1.add(v.0));
}

/// The 5-point DFT: with `t1 = a1 + a4`, `t2 = a2 + a3`, `t3 = a1 − a4`,
/// `t4 = a2 − a3`, `c_k = cos(2πk/5)`, `s_k = sin(2πk/5)`:
/// `b1,4 = a0 + c1 t1 + c2 t2 ∓ i(s1 t3 + s2 t4)`,
/// `b2,3 = a0 + c2 t1 + c1 t2 ∓ i(s2 t3 − s1 t4)`.
#[inline(always)]
fn dft5<V: Lanes32, const R: usize>(a: &mut [(V, V); R]) {
    let tau = 2.0 * std::f64::consts::PI / 5.0;
    let k = |x: f64| V::splat(x as f32);
    let (c1, c2, s1, s2) = (
        k(tau.cos()),
        k((2.0 * tau).cos()),
        k(tau.sin()),
        k((2.0 * tau).sin()),
    );
    let scale = |c: V, x: (V, V)| (c.mul(x.0), c.mul(x.1));
    let (t1, t2) = (add(a[1], a[4]), add(a[2], a[3]));
    let (t3, t4) = (sub(a[1], a[4]), sub(a[2], a[3]));
    let a0 = a[0];
    let u1 = add(a0, add(scale(c1, t1), scale(c2, t2)));
    let u2 = add(a0, add(scale(c2, t1), scale(c1, t2)));
    let v1 = add(scale(s1, t3), scale(s2, t4));
    let v2 = sub(scale(s2, t3), scale(s1, t4));
    a[0] = add(a0, add(t1, t2));
    // u ∓ i·v = (u.re ± v.im, u.im ∓ v.re).
    a[1] = (u1.0.add(v1.1), u1.1.sub(v1.0));
    a[4] = (u1.0.sub(v1.1), u1.1.add(v1.0));
    a[2] = (u2.0.add(v2.1), u2.1.sub(v2.0));
    a[3] = (u2.0.sub(v2.1), u2.1.add(v2.0));
}

/// The 4-point DFT of `x`, out of place.
#[inline(always)]
fn dft4<V: Lanes32>(x: [(V, V); 4]) -> [(V, V); 4] {
    let (s02, d02) = (add(x[0], x[2]), sub(x[0], x[2]));
    let (s13, d13) = (add(x[1], x[3]), sub(x[1], x[3]));
    [
        add(s02, s13),
        (d02.0.add(d13.1), d02.1.sub(d13.0)),
        sub(s02, s13),
        (d02.0.sub(d13.1), d02.1.add(d13.0)),
    ]
}

/// The 8-point DFT as two 4-point DFTs of the even and odd inputs and a
/// radix-2 step with `W_8^j`: `W_8 = (1 − i)/√2`, `W_8^2 = −i`,
/// `W_8^3 = −(1 + i)/√2`.
#[inline(always)]
fn dft8<V: Lanes32, const R: usize>(a: &mut [(V, V); R]) {
    let r = V::splat(std::f64::consts::FRAC_1_SQRT_2 as f32);
    let e = dft4([a[0], a[2], a[4], a[6]]);
    let o = dft4([a[1], a[3], a[5], a[7]]);
    // W_8·o1 = (o1.re + o1.im, o1.im − o1.re)/√2;
    // W_8^3·o3 = (o3.im − o3.re, −o3.re − o3.im)/√2.
    let o1 = (r.mul(o[1].0.add(o[1].1)), r.mul(o[1].1.sub(o[1].0)));
    let o2 = neg_i(o[2]);
    let o3 = (
        r.mul(o[3].1.sub(o[3].0)),
        r.mul(V::splat(0.0).sub(o[3].0.add(o[3].1))),
    );
    a[0] = add(e[0], o[0]);
    a[4] = sub(e[0], o[0]);
    a[1] = add(e[1], o1);
    a[5] = sub(e[1], o1);
    a[2] = add(e[2], o2);
    a[6] = sub(e[2], o2);
    a[3] = add(e[3], o3);
    a[7] = sub(e[3], o3);
}
