//! The steps after the complex FFT that the float32 recipes share (the Kaldi
//! recipes' `kaldi::batch` and Whisper's `whisper_batch`), over [`Lanes32`]
//! values, `L` frames at once: the real-FFT split step with the power
//! spectrum ([`split_power`]) and the sparse mel product ([`sparse_mel`]).
//!
//! A real frame `x` of `n = 2m` samples is transformed as the complex
//! sequence `z[j] = x[2j] + i·x[2j+1]` of `m` points; with `Z = FFT(z)`,
//! `E[k] = Z[k] + conj(Z[m−k])` and `O[k] = −i·(Z[k] − conj(Z[m−k]))` are
//! twice the DFTs of the even and odd samples, and `2X[k] = E[k] + W_n^k O[k]`.
//! The power is `|2X[k]|²`: the recipes fold the factor 4 into their mel
//! weights (or their floor), so the split step never halves.
//!
//! Only lane-wise IEEE operations in one order, as everywhere in the lanes:
//! every level gives each frame the same bits.

use crate::lanes32::Lanes32;

/// The split step and `|2X[k]|²` for `k = 0 .. m` (and `k = m`, the Nyquist
/// bin, when `nyquist`) into `power[k·L ..]`, from the transformed lanes
/// `re`/`im` (`m · L` values each). `split[k − 1]` is `W_{2m}^k` as
/// `[re, im]` for `k = 1 .. ⌈m/2⌉`; `m` may be odd (no centre bin then).
#[inline(always)]
pub(crate) fn split_power<V: Lanes32>(
    split: &[[f32; 2]],
    nyquist: bool,
    re: &[f32],
    im: &[f32],
    power: &mut [f32],
) {
    let l = V::L;
    let m = re.len() / l;
    let bins = m + usize::from(nyquist);
    assert!(re.len() == m * l && im.len() == m * l && power.len() == bins * l);
    assert!(split.len() + 1 >= m.div_ceil(2));
    let (re, im, p) = (re.as_ptr(), im.as_ptr(), power.as_mut_ptr());
    // SAFETY: every index below is < m (loads) or < bins (stores), inside the
    // lengths asserted above.
    unsafe {
        let at = |ptr: *const f32, k: usize| V::load(ptr.add(k * l));
        let put = |k: usize, v: V| v.store(p.add(k * l));
        let sq = |r: V, i: V| r.mul(r).add(i.mul(i));
        let four = V::splat(4.0);
        let (z0r, z0i) = (at(re, 0), at(im, 0));
        let a = z0r.add(z0i);
        put(0, four.mul(a.mul(a)));
        if nyquist {
            let d = z0r.sub(z0i);
            put(m, four.mul(d.mul(d)));
        }
        if m.is_multiple_of(2) {
            put(m / 2, four.mul(sq(at(re, m / 2), at(im, m / 2))));
        }
        for k in 1..m.div_ceil(2) {
            let [c, s] = split[k - 1].map(V::splat);
            let (ar, ai, br, bi) = (at(re, k), at(im, k), at(re, m - k), at(im, m - k));
            let (er, ei) = (ar.add(br), ai.sub(bi));
            let (or, oi) = (ai.add(bi), br.sub(ar));
            let (tr, ti) = (c.mul(or).sub(s.mul(oi)), c.mul(oi).add(s.mul(or)));
            put(k, sq(er.add(tr), ei.add(ti)));
            put(m - k, sq(er.sub(tr), ei.sub(ti)));
        }
    }
}

/// The sparse triangles `bands` (first bin, weights) over `power` (`L`
/// lanes per bin) into `mel[b·L ..]`, each sum started from `zero` (the
/// recipe's own: its reference's first addend, `+0.0` or `−0.0`).
#[inline(always)]
pub(crate) fn sparse_mel<V: Lanes32>(
    bands: &[(usize, Vec<f32>)],
    zero: f32,
    power: &[f32],
    mel: &mut [f32],
) {
    let l = V::L;
    assert!(mel.len() >= bands.len() * l);
    for ((first, w), m) in bands.iter().zip(mel.chunks_exact_mut(l)) {
        let span = &power[first * l..(first + w.len()) * l];
        let mut acc = V::splat(zero);
        for (p, &w) in span.chunks_exact(l).zip(w) {
            // SAFETY: `p` and `m` hold L values each.
            acc = acc.add(unsafe { V::load(p.as_ptr()) }.mul(V::splat(w)));
        }
        // SAFETY: as above.
        unsafe { acc.store(m.as_mut_ptr()) };
    }
}
