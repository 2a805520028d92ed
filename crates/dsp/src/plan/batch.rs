//! The batched frame path of [`Plan`]: distinct frames in groups of `L`, each
//! group windowed straight into the vertical layout of [`BatchFft`], transformed,
//! split and squared lane-wise, then multiplied by the sparse mel filterbank
//! lane-wise. The mel product keeps [`SparseFilterbank::apply`]'s exact order
//! (8 interleaved partial sums, then left to right), so only the FFT's rounding
//! differs from the per-frame path (bound in `batch_fft`).
//!
//! Runs as an AVX-512 build (8 lanes), an AVX2 build (4 lanes) or a portable
//! build (4 lanes), chosen once in [`Plan::new`]; all three give the same bits.

use super::{Plan, Scratch};
use crate::batch_fft::{BatchFft, Level, MAX_LANES};
use crate::filterbank::{LANES as BANK_LANES, SparseFilterbank};
#[cfg(target_arch = "x86_64")]
use crate::lanes::{Avx2, Avx512};
use crate::lanes::{Lanes, LanesF32, Portable};
use crate::layout::FrameSource;

/// One worker's buffers for the batched path (empty when the plan has none).
pub(super) struct BatchScratch {
    re: Vec<f64>,
    im: Vec<f64>,
    /// `[bin][lane]` powers; bins past `n_fft / 2` stay zero (the padded
    /// filterbank bands read them).
    power: Vec<f32>,
}

impl BatchScratch {
    pub(super) fn new(plan: &Plan) -> BatchScratch {
        match &plan.batch {
            Some(fft) => BatchScratch {
                re: vec![0.0; fft.m() * MAX_LANES],
                im: vec![0.0; fft.m() * MAX_LANES],
                power: vec![0.0; plan.bank.power_len() * MAX_LANES],
            },
            None => BatchScratch {
                re: Vec::new(),
                im: Vec::new(),
                power: Vec::new(),
            },
        }
    }
}

impl Plan {
    /// Every distinct frame through the batched path at `level` (which this CPU
    /// must have: [`Level::available`]), then dB.
    pub(super) fn frames_batched(&self, level: Level, clip: &[f32], scratch: &mut Scratch) {
        assert!(level.available(), "{level:?} on a CPU without it");
        match level {
            Level::Portable => self.frames_lanes::<Portable, 4>(clip, scratch),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `level.available()` checked that the CPU has AVX-512F.
            Level::Avx512 => unsafe { self.frames_avx512(clip, scratch) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `level.available()` checked that the CPU has AVX2.
            Level::Avx2 => unsafe { self.frames_batched_avx2(clip, scratch) },
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!("only x86_64 has the AVX levels"),
        }
    }

    /// # Safety
    /// The CPU must support AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2")]
    unsafe fn frames_avx512(&self, clip: &[f32], scratch: &mut Scratch) {
        self.frames_lanes::<Avx512, 8>(clip, scratch);
    }

    /// # Safety
    /// The CPU must support AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn frames_batched_avx2(&self, clip: &[f32], scratch: &mut Scratch) {
        self.frames_lanes::<Avx2, 4>(clip, scratch);
    }

    /// The batched path in lanes `V` (`L == V::L`).
    #[inline(always)]
    fn frames_lanes<V: Lanes, const L: usize>(&self, clip: &[f32], scratch: &mut Scratch) {
        const { assert!(L == V::L) };
        let fft = self
            .batch
            .as_ref()
            .expect("the plan has a batched transform");
        let n_mels = self.spec.n_mels;
        let m = fft.m();
        let Scratch { batch, db, .. } = scratch;
        let re = &mut batch.re[..m * L];
        let im = &mut batch.im[..m * L];
        let power = &mut batch.power[..self.bank.power_len() * L];
        for (group, cells) in self.layout.frames.chunks(L).zip(db.chunks_mut(L * n_mels)) {
            self.pack_group::<V, L>(fft, clip, group, re, im);
            fft.transform::<V>(re, im);
            fft.power::<V>(re, im, power);
            mel_lanes::<V, L>(&self.bank, power, cells, n_mels);
        }
        self.to_db(db);
    }

    /// Window the frames of `group` (≤ `L`) into the lanes of `re`, `im`. When
    /// all of them are plain clip ranges (and `2L` divides `n_fft`), `2L`
    /// samples of every lane at a time are loaded, windowed and transposed in
    /// registers ([`Lanes::pack_block`]); otherwise lane by lane.
    #[inline(always)]
    fn pack_group<V: Lanes, const L: usize>(
        &self,
        fft: &BatchFft,
        clip: &[f32],
        group: &[FrameSource],
        re: &mut [f64],
        im: &mut [f64],
    ) {
        let n_fft = self.spec.n_fft;
        let mut starts = [0usize; MAX_LANES];
        for (lane, src) in group.iter().enumerate() {
            match *src {
                FrameSource::Clip { start }
                    if start + n_fft <= clip.len() && n_fft.is_multiple_of(2 * L) =>
                {
                    starts[lane] = start;
                }
                _ => {
                    for (lane, src) in group.iter().enumerate() {
                        self.pack_lane::<L>(fft, clip, *src, lane, re, im);
                    }
                    return;
                }
            }
        }
        // Lanes past the group repeat lane 0's frame (their results are unused).
        for lane in group.len()..L {
            starts[lane] = starts[0];
        }
        assert!(re.len() == fft.m() * L && im.len() == fft.m() * L);
        assert_eq!(self.window.len(), n_fft);
        let (pr, pi) = (re.as_mut_ptr(), im.as_mut_ptr());
        let slots = fft.slots();
        let mut rows = [std::ptr::null::<f32>(); MAX_LANES];
        for t0 in (0..n_fft).step_by(2 * L) {
            for (row, &start) in rows.iter_mut().zip(&starts[..L]) {
                // SAFETY: start + n_fft ≤ clip.len() (checked above), t0 < n_fft.
                *row = unsafe { clip.as_ptr().add(start + t0) };
            }
            // SAFETY: t0 + 2L ≤ n_fft (2L divides n_fft, checked by the caller
            // of this path), so every row has 2L samples left and the window
            // 2L values; each put stores to slot s < m of `re` or `im`.
            unsafe {
                V::pack_block(&rows[..L], self.window.as_ptr().add(t0), |c, v| {
                    let t = t0 + c;
                    let s = *slots.get_unchecked(t / 2) as usize;
                    let dst = if t % 2 == 0 { pr } else { pi };
                    v.store(dst.add(s * L));
                });
            }
        }
    }

    /// Window one frame into lane `lane` of `L` (`re`, `im`: `m · L` values),
    /// packed pairs in bit-reversed slots.
    #[inline(always)]
    fn pack_lane<const L: usize>(
        &self,
        fft: &BatchFft,
        clip: &[f32],
        src: FrameSource,
        lane: usize,
        re: &mut [f64],
        im: &mut [f64],
    ) {
        let re = re.as_chunks_mut::<L>().0;
        let im = im.as_chunks_mut::<L>().0;
        let n_fft = self.spec.n_fft;
        let slots = fft.slots();
        match src {
            FrameSource::Clip { start } => {
                let x = &clip[start..start + n_fft];
                let pairs = x.chunks_exact(2).zip(self.window.chunks_exact(2));
                for (&s, (x, w)) in slots.iter().zip(pairs) {
                    re[s as usize][lane] = w[0] * f64::from(x[0]);
                    im[s as usize][lane] = w[1] * f64::from(x[1]);
                }
            }
            FrameSource::Padded { seg_start, pattern } => {
                let seg = &clip[seg_start..seg_start + self.spec.segment_samples()];
                let g = &self.gathers[pattern as usize];
                let pairs = g.index.chunks_exact(2).zip(g.weight.chunks_exact(2));
                for (&s, (i, w)) in slots.iter().zip(pairs) {
                    re[s as usize][lane] = w[0] * f64::from(seg[i[0] as usize]);
                    im[s as usize][lane] = w[1] * f64::from(seg[i[1] as usize]);
                }
            }
        }
    }
}

/// `cells[lane · n_mels + b]` = band `b` of lane `lane`'s powers (`power`:
/// `[bin][L]`), for the lanes `cells` has room for, summed exactly as
/// [`SparseFilterbank::apply`] sums: 8 interleaved partial sums from zero, then
/// added left to right onto −0 (`Iterator::sum`'s start).
#[inline(always)]
fn mel_lanes<V: Lanes, const L: usize>(
    bank: &SparseFilterbank,
    power: &[f32],
    cells: &mut [f32],
    n_mels: usize,
) {
    type F<V> = <V as Lanes>::F;
    let used = cells.len() / n_mels;
    let mut sums = [0f32; MAX_LANES];
    for (b, band) in bank.bands.iter().enumerate() {
        let end = (band.first + band.weights.len()) * L;
        assert!(end <= power.len());
        let p = power.as_ptr();
        let mut acc = [F::<V>::splat(0.0); BANK_LANES];
        for (t, w8) in band.weights.chunks_exact(BANK_LANES).enumerate() {
            for (j, &w) in w8.iter().enumerate() {
                let bin = band.first + t * BANK_LANES + j;
                // SAFETY: bin < first + weights.len(), so (bin + 1)·L ≤ end ≤ len.
                let x = unsafe { F::<V>::load(p.add(bin * L)) };
                acc[j] = acc[j].add(F::<V>::splat(w).mul(x));
            }
        }
        let total = acc.iter().fold(F::<V>::splat(-0.0), |s, &a| s.add(a));
        // SAFETY: `sums` has MAX_LANES ≥ L slots.
        unsafe { total.store(sums.as_mut_ptr()) };
        for (cell, &v) in cells.chunks_exact_mut(n_mels).take(used).zip(&sums) {
            cell[b] = v;
        }
    }
}

#[cfg(test)]
mod tests;
