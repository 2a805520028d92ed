//! The batched path of `KaldiPlan::compute_piece`: Kaldi fbank and MFCC of
//! `L` frames at once in float32, "vertically" (every value a [`Lanes32`]
//! holding the same index of `L` frames, lane `l` = frame `t0 + l`; `L` = 16
//! in AVX-512, 8 in AVX2, 4 portable), so every step is lane-wise arithmetic
//! with no shuffles. [`KaldiBatch::new`] takes the option sets whose padded
//! length is `2m` with `m ≥ 2` a product of 2, 3 and 5 (every power of two
//! from 4: round_to_power_of_two, the default; 400 = 2·200 at 16 kHz
//! without rounding); the others keep the per-frame path (realfft).
//!
//! Per batch of frames, in the per-frame path's order:
//! * extract: frames whose windows lie inside the waveform are gathered from
//!   it in place (lane `l` at `shift · l`), the others (snip_edges = false
//!   reflection, the lanes past a piece's last frame, which repeat it and are
//!   dropped) copied lane by lane with the per-frame extraction; × sample_scale;
//!   the dither drawn frame after frame from the scratch's generator, as the
//!   per-frame path draws it;
//! * DC removal (the mean as a sequential sum over the window, divided), raw
//!   energy, pre-emphasis, window and windowed energy in one pass, the frame
//!   packed as `z[j] = x[2j] + i·x[2j+1]` with the zero padding: the same
//!   float32 operations in the same order as the per-frame path, so these
//!   values and the energies' sums are its bits;
//! * the complex FFT of `m` points ([`Stockham32`]), the real split step and
//!   `|X[k]|²` (or `|X[k]|`) for the `m` bins below Nyquist, carried at twice
//!   `X` with the mel weights stored divided by 4 (by 2 for the magnitude):
//!   scaling by powers of two is exact, so the mel energies are those of `X`;
//! * the sparse mel triangles (sequential sums, as the per-frame path), then
//!   ln(max(x, ε)) with cephes' float32 `logf` (`logf32::ln`, within 2 ulp of
//!   libm's), exactly the per-frame path's ln ε at or below the floor (so
//!   silence gives its bits), and ln of the energies the same way;
//! * MFCC: the lifted DCT as sequential sums over the mel bins, C0 := energy.
//!
//! Precision: float32 throughout, as the per-frame path and the references.
//! The result differs from the per-frame path's by the FFT's rounding (a
//! different algorithm from realfft's, with the same error bound: about 1e-7
//! of the frame's energy per bin) and the logarithm's last ulp; see
//! docs/FORMAT.md for the stated tolerance against kaldi-native-fbank.
//! Only lane-wise IEEE operations (no FMA, no reassociation), so a frame's
//! result depends neither on its lane, its batch nor the build ([`Level`]):
//! every level gives the same bits, and pieces give the one-piece rows bit
//! for bit (tested).

use super::options::{KaldiOptions, Kind};
use crate::Level;
use crate::lane_fft::LaneFft;
use crate::lane_fft::twiddle;
use crate::lanes32::{Aligned32, Lanes32, Portable32};
#[cfg(target_arch = "x86_64")]
use crate::lanes32::{Avx2x8, Avx512x16};
use crate::logf32;
use crate::real32;
use crate::stockham32::Stockham32;

/// Widest lane count any level uses (AVX-512: 16 f32).
const MAX_LANES: usize = 16;

/// The working precision (the per-frame path's).
type Real = f32;

/// The frames of one piece of a waveform, as the batched path reads them
/// (the plan's geometry and the scratch's dither generator: `plan`
/// implements it).
pub(super) trait Frames {
    /// The samples that frames read in place.
    fn samples(&self) -> &[f32];
    /// Where frame `f`'s window starts in [`samples`](Self::samples) when it
    /// lies inside the waveform (None: it reflects at an edge).
    fn start(&self, f: usize) -> Option<usize>;
    /// Frame `f`'s window_size samples, × sample_scale (no dither).
    fn extract(&mut self, f: usize) -> &[f32];
    /// One standard normal draw for the dither, from the file's generator.
    fn gaussian(&mut self) -> f64;
}

/// The complex FFT of `m` points: in place for a power of two, Stockham's
/// otherwise.
enum Fft {
    InPlace(LaneFft<f32>),
    Stockham(Stockham32),
}

/// The batched path's tables; `Send + Sync`, shared by workers.
pub(super) struct KaldiBatch {
    opts: KaldiOptions,
    kind: Kind,
    window_size: usize,
    window_shift: usize,
    window: Vec<Real>,
    /// num_ceps × num_mel_bins, lifter applied (mfcc only).
    dct: Vec<Real>,
    log_energy_floor: Option<Real>,
    level: Level,
    /// m = padded / 2.
    m: usize,
    fft: Fft,
    /// Where packed value `j` goes in the FFT's input (bit reversal in place).
    slots: Vec<u32>,
    /// `W_padded^k` for `k = 1 .. ⌈m/2⌉`.
    split: Vec<[f32; 2]>,
    /// Each mel triangle's first bin and its weights / 4 (/ 2 for the
    /// magnitude).
    bands: Vec<(usize, Vec<f32>)>,
    /// ln ε as the per-frame path computes it (libm).
    ln_floor: Real,
}

/// Per-worker buffers of the batched path.
pub(super) struct BatchBuffers {
    /// The frames' samples, `window_size × L`.
    x: Aligned32,
    re: [Aligned32; 2],
    im: [Aligned32; 2],
    power: Aligned32,
    mel: Aligned32,
    cep: Aligned32,
    energy: [f32; MAX_LANES],
    /// The batch's rows, `stride` apart (each lane's values transposed).
    rows: Aligned32,
    stride: usize,
}

impl KaldiBatch {
    /// The tables for `opts` and `kind` with the plan's `window`, mel
    /// `bands` (first FFT bin, weights), lifted `dct` and ln energy floor,
    /// run at `level` (which this CPU must have), or None for an FFT length
    /// the batched path does not take.
    pub fn new<'a>(
        opts: &KaldiOptions,
        kind: Kind,
        (window, bands, dct): (&[Real], impl Iterator<Item = (usize, &'a [Real])>, &[Real]),
        log_energy_floor: Option<Real>,
        level: Level,
    ) -> Option<KaldiBatch> {
        assert!(level.available(), "{level:?} on a CPU without it");
        let padded = opts.padded_window_size();
        // The gathers' offsets (lane · shift) must fit an i32.
        let gather_ok = (MAX_LANES - 1) * opts.window_shift() < 1 << 31;
        if !padded.is_multiple_of(2) || !gather_ok {
            return None;
        }
        let m = padded / 2;
        let fft = match LaneFft::new(m) {
            Some(dit) => Fft::InPlace(dit),
            None => Fft::Stockham(Stockham32::new(m)?),
        };
        let slots = match &fft {
            Fft::InPlace(dit) => dit.slots().to_vec(),
            Fft::Stockham(_) => (0..m as u32).collect(),
        };
        let scale = if opts.use_power { 0.25 } else { 0.5 };
        Some(KaldiBatch {
            opts: opts.clone(),
            kind,
            window_size: opts.window_size(),
            window_shift: opts.window_shift(),
            window: window.to_vec(),
            dct: dct.to_vec(),
            log_energy_floor,
            level,
            m,
            fft,
            slots,
            split: (1..m.div_ceil(2)).map(|k| twiddle(k, padded)).collect(),
            bands: bands
                .map(|(first, w)| (first, w.iter().map(|&w| w * scale).collect()))
                .collect(),
            ln_floor: Real::EPSILON.ln(),
        })
    }

    pub fn level(&self) -> Level {
        self.level
    }

    /// Columns of a row (as `KaldiPlan::num_bins`).
    fn num_bins(&self) -> usize {
        match self.kind {
            Kind::Fbank => self.opts.num_mel_bins + usize::from(self.opts.use_energy),
            Kind::Mfcc => self.opts.num_ceps,
        }
    }

    pub fn buffers(&self) -> BatchBuffers {
        let v = |n: usize| Aligned32::zeros(n * MAX_LANES);
        // The rows are gathered a whole vector of values at a time.
        let whole = |n: usize| v(n.next_multiple_of(MAX_LANES));
        let opts = &self.opts;
        let ping_pong = matches!(self.fft, Fft::Stockham(_));
        let stride = self.num_bins().next_multiple_of(MAX_LANES) + MAX_LANES;
        let ceps = if self.kind == Kind::Mfcc {
            opts.num_ceps
        } else {
            0
        };
        BatchBuffers {
            x: v(self.window_size),
            re: [v(self.m), v(if ping_pong { self.m } else { 0 })],
            im: [v(self.m), v(if ping_pong { self.m } else { 0 })],
            power: v(self.m),
            mel: whole(opts.num_mel_bins),
            cep: whole(ceps),
            energy: [0.0; MAX_LANES],
            rows: Aligned32::zeros(MAX_LANES * stride),
            stride,
        }
    }
}

impl KaldiBatch {
    /// Appends the rows of `frames` (of the waveform `src` reads) to `out`,
    /// with the buffers `b` (of this batch).
    pub fn rows(
        &self,
        frames: std::ops::Range<usize>,
        src: &mut dyn Frames,
        b: &mut BatchBuffers,
        out: &mut Vec<f32>,
    ) {
        match self.level {
            Level::Portable => self.run::<Portable32>(frames, src, b, out),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `KaldiBatch::new` checked `level.available()`: AVX-512F.
            Level::Avx512 => unsafe { self.run_avx512(frames, src, b, out) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `KaldiBatch::new` checked `level.available()`: AVX2.
            Level::Avx2 => unsafe { self.run_avx2(frames, src, b, out) },
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!("only x86_64 has the AVX levels"),
        }
    }

    /// # Safety
    /// The CPU must support AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2")]
    unsafe fn run_avx512(
        &self,
        frames: std::ops::Range<usize>,
        src: &mut dyn Frames,
        b: &mut BatchBuffers,
        out: &mut Vec<f32>,
    ) {
        self.run::<Avx512x16>(frames, src, b, out);
    }

    /// # Safety
    /// The CPU must support AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn run_avx2(
        &self,
        frames: std::ops::Range<usize>,
        src: &mut dyn Frames,
        b: &mut BatchBuffers,
        out: &mut Vec<f32>,
    ) {
        self.run::<Avx2x8>(frames, src, b, out);
    }

    /// Every batch of `V::L` frames.
    #[inline(always)]
    fn run<V: Lanes32>(
        &self,
        frames: std::ops::Range<usize>,
        src: &mut dyn Frames,
        b: &mut BatchBuffers,
        out: &mut Vec<f32>,
    ) {
        let (l, m) = (V::L, self.m);
        // The rows, and the spare lanes the last batch writes past them (`emit`).
        out.reserve((frames.len() + l) * self.num_bins());
        for t0 in frames.clone().step_by(l) {
            let n = (frames.end - t0).min(l);
            let sum = self.load::<V>(src, t0, n, b);
            self.prepare::<V>(sum, b);
            let done = match &self.fft {
                Fft::InPlace(dit) => {
                    dit.run::<V>(&mut b.re[0][..m * l], &mut b.im[0][..m * l]);
                    0
                }
                Fft::Stockham(st) => st.run::<V>(
                    b.re.each_mut().map(|v| &mut v[..]),
                    b.im.each_mut().map(|v| &mut v[..]),
                ),
            };
            let (re, im) = (&b.re[done][..m * l], &b.im[done][..m * l]);
            self.power::<V>(re, im, &mut b.power[..m * l]);
            if !self.opts.use_power {
                for p in &mut b.power[..m * l] {
                    *p = p.sqrt();
                }
            }
            let mel = &mut b.mel[..self.opts.num_mel_bins * l];
            self.mel::<V>(&b.power[..m * l], mel);
            if self.opts.use_log_fbank {
                for v in mel.iter_mut() {
                    *v = ln_floored(*v, self.ln_floor);
                }
            }
            if self.opts.use_energy {
                let floor = self.log_energy_floor;
                for e in &mut b.energy[..l] {
                    let v = ln_floored(*e, self.ln_floor);
                    *e = floor.map_or(v, |f| v.max(f));
                }
            }
            self.emit::<V>(b, n, out);
        }
    }

    /// Frames `t0 .. t0 + n` (`n ≤ L`; lanes `n ..` repeat frame `t0 + n − 1`)
    /// into `b.x`, scaled and dithered; returns their sums over the window
    /// where it took them on the way (frames read in place, no dither).
    #[inline(always)]
    fn load<V: Lanes32>(
        &self,
        src: &mut dyn Frames,
        t0: usize,
        n: usize,
        b: &mut BatchBuffers,
    ) -> Option<V> {
        let (l, ws, shift) = (V::L, self.window_size, self.window_shift);
        let x = &mut b.x[..ws * l];
        let in_place = n == l && src.start(t0).is_some() && src.start(t0 + l - 1).is_some();
        let mut sum = None;
        if in_place {
            let (samples, at) = (src.samples(), src.start(t0).unwrap_or(0));
            assert!(at + shift * (l - 1) + ws <= samples.len());
            let (scale, mut acc) = (V::splat(self.opts.sample_scale as Real), V::splat(-0.0));
            let (from, dst) = (samples[at..].as_ptr(), x.as_mut_ptr());
            let whole = ws - ws % l;
            for k0 in (0..whole).step_by(l) {
                // SAFETY: lane j reads at + k + shift·j < samples.len() for
                // k < ws (asserted above); `x` holds ws·L values.
                unsafe { V::transpose(from.add(k0), shift, dst.add(k0 * l), l) };
                for k in k0..k0 + l {
                    // SAFETY: k < ws.
                    unsafe {
                        let v = V::load(dst.add(k * l)).mul(scale);
                        v.store(dst.add(k * l));
                        acc = acc.add(v);
                    }
                }
            }
            for k in whole..ws {
                // SAFETY: as above; shift·(L − 1) < 2³¹ (checked in
                // `KaldiBatch::new`).
                unsafe {
                    let v = V::gather(from.add(k), shift).mul(scale);
                    v.store(dst.add(k * l));
                    acc = acc.add(v);
                }
            }
            sum = Some(acc);
        } else {
            for lane in 0..l {
                let f = t0 + lane.min(n - 1);
                for (k, &v) in src.extract(f).iter().enumerate() {
                    x[k * l + lane] = v;
                }
            }
        }
        if self.opts.dither != 0.0 {
            let dither = self.opts.dither;
            for lane in 0..n {
                for k in 0..ws {
                    x[k * l + lane] += (dither * src.gaussian()) as Real;
                }
            }
            sum = None;
        }
        sum
    }

    /// DC removal (with `sum`, the frames' sums, where `load` took them),
    /// energy, pre-emphasis and window of `b.x`, packed into
    /// `b.re[0]`/`b.im[0]` at `slots` with the zero padding; with use_energy,
    /// the energies' sums (before their log) into `b.energy`.
    #[inline(always)]
    fn prepare<V: Lanes32>(&self, sum: Option<V>, b: &mut BatchBuffers) {
        let (l, ws) = (V::L, self.window_size);
        let o = &self.opts;
        let mean = if o.remove_dc_offset {
            let sum = match sum {
                Some(sum) => sum,
                None => {
                    // Sums start at −0.0, as `Iterator::sum` does.
                    let mut s = V::splat(-0.0);
                    for x in b.x[..ws * l].chunks_exact(l) {
                        // SAFETY: `x` holds L values.
                        s = s.add(unsafe { V::load(x.as_ptr()) });
                    }
                    s
                }
            };
            let mut lanes = [0f32; MAX_LANES];
            // SAFETY: `lanes` holds MAX_LANES ≥ L values.
            unsafe { sum.store(lanes.as_mut_ptr()) };
            for s in &mut lanes[..l] {
                *s /= ws as Real;
            }
            // SAFETY: as above.
            unsafe { V::load(lanes.as_ptr()) }
        } else {
            V::splat(0.0) // x − (+0) = x, every x
        };
        let p = o.preemphasis_coefficient as Real;
        let (raw, windowed) = (o.use_energy && o.raw_energy, o.use_energy && !o.raw_energy);
        let energy = match (p != 0.0, raw, windowed) {
            (true, false, false) => self.pack::<V, true, false, false>(mean, b),
            (true, true, _) => self.pack::<V, true, true, false>(mean, b),
            (true, false, true) => self.pack::<V, true, false, true>(mean, b),
            (false, false, false) => self.pack::<V, false, false, false>(mean, b),
            (false, true, _) => self.pack::<V, false, true, false>(mean, b),
            (false, false, true) => self.pack::<V, false, false, true>(mean, b),
        };
        // SAFETY: `energy` holds MAX_LANES ≥ L values.
        unsafe { energy.store(b.energy.as_mut_ptr()) };
    }

    /// [`prepare`](Self::prepare) after the mean, for pre-emphasis `PRE`
    /// (p ≠ 0) and the energy before (`RAW`) or after (`WIN`) the window:
    /// returns the energies' sums.
    #[inline(always)]
    fn pack<V: Lanes32, const PRE: bool, const RAW: bool, const WIN: bool>(
        &self,
        mean: V,
        b: &mut BatchBuffers,
    ) -> V {
        let (l, ws) = (V::L, self.window_size);
        let (m, slots) = (self.m, &self.slots[..]);
        let p = V::splat(self.opts.preemphasis_coefficient as Real);
        let zero = V::splat(0.0);
        let (x, window) = (&b.x[..ws * l], &self.window[..ws]);
        let (re, im) = (&mut b.re[0][..m * l], &mut b.im[0][..m * l]);
        assert!(slots.len() == m && slots.iter().all(|&j| (j as usize) < m) && ws <= 2 * m);
        let (x, re, im) = (x.as_ptr(), re.as_mut_ptr(), im.as_mut_ptr());
        let mut energy = V::splat(-0.0);
        // x[0] −= p·x[0]; then x[k] −= p·x[k − 1] with the previous value
        // before its own pre-emphasis (Kaldi's loop runs from the end).
        // SAFETY (every load and store below): k < ws, so x holds L values
        // from k·L; every slot j < m, so re and im hold L values from j·L.
        let mut prev = unsafe { V::load(x) }.sub(mean);
        for (j, &slot) in slots[..ws / 2].iter().enumerate() {
            let o = slot as usize * l;
            for (k, dst) in [(2 * j, re), (2 * j + 1, im)] {
                let v = unsafe { V::load(x.add(k * l)) }.sub(mean);
                let w = step::<V, PRE, RAW, WIN>(v, &mut prev, &mut energy, p, window[k]);
                unsafe { w.store(dst.add(o)) };
            }
        }
        if ws % 2 == 1 {
            let (o, k) = (slots[ws / 2] as usize * l, ws - 1);
            let v = unsafe { V::load(x.add(k * l)) }.sub(mean);
            let w = step::<V, PRE, RAW, WIN>(v, &mut prev, &mut energy, p, window[k]);
            unsafe {
                w.store(re.add(o));
                zero.store(im.add(o));
            }
        }
        for &j in &slots[ws.div_ceil(2)..] {
            let o = j as usize * l;
            unsafe {
                zero.store(re.add(o));
                zero.store(im.add(o));
            }
        }
        energy
    }

    /// The rows of the batch's first `n` lanes, appended to `out`.
    #[inline(always)]
    fn emit<V: Lanes32>(&self, b: &mut BatchBuffers, n: usize, out: &mut Vec<f32>) {
        let l = V::L;
        let o = &self.opts;
        let n_mels = o.num_mel_bins;
        if self.kind == Kind::Mfcc {
            let mel = &b.mel[..n_mels * l];
            for (c, d) in b.cep.chunks_exact_mut(l).zip(self.dct.chunks_exact(n_mels)) {
                let mut acc = V::splat(-0.0);
                for (j, &d) in d.iter().enumerate() {
                    // SAFETY: j < n_mels, so mel holds L values from j·L.
                    let v = unsafe { V::load(mel.as_ptr().add(j * l)) };
                    acc = acc.add(V::splat(d).mul(v));
                }
                // SAFETY: `c` holds L values.
                unsafe { acc.store(c.as_mut_ptr()) };
            }
        }
        let (values, count) = match self.kind {
            Kind::Fbank => (&b.mel, n_mels),
            Kind::Mfcc => (&b.cep, o.num_ceps),
        };
        // Fbank's energy comes first; MFCC's replaces C0.
        let first = usize::from(o.use_energy && self.kind == Kind::Fbank);
        let bins = first + count;
        assert!(values.len() >= count.next_multiple_of(l) * l);
        if count.is_multiple_of(l) {
            // Straight into `out`: every lane's row is whole vectors, so the
            // transposes write exactly rows `0 .. L` from its end (those past
            // `n` in its spare capacity, then dropped).
            out.reserve(l * bins);
            let len = out.len();
            // SAFETY: the capacity holds L·bins values past `len`; block j0
            // writes lane i's values j0 .. j0 + L at i·bins + first + j0,
            // inside lane i's row (first + count = bins), from rows j0 .. j0
            // + L of `values`, which it holds (asserted).
            unsafe {
                let rows = out.as_mut_ptr().add(len);
                for j0 in (0..count).step_by(l) {
                    V::transpose(values.as_ptr().add(j0 * l), l, rows.add(first + j0), bins);
                }
                if o.use_energy {
                    for lane in 0..n {
                        *rows.add(lane * bins) = b.energy[lane];
                    }
                }
                // Every value of rows 0 .. n is written above.
                out.set_len(len + n * bins);
            }
            return;
        }
        let stride = b.stride;
        assert!(stride >= first + count.next_multiple_of(l) && b.rows.len() >= l * stride);
        let rows = b.rows.as_mut_ptr();
        for j0 in (0..count).step_by(l) {
            // SAFETY: rows j0 .. j0 + L of `values` (L values each) lie inside
            // it, and lane i's row holds first + j0 + L ≤ stride values
            // (asserted above).
            unsafe { V::transpose(values.as_ptr().add(j0 * l), l, rows.add(first + j0), stride) };
        }
        for lane in 0..n {
            let row = &mut b.rows[lane * stride..lane * stride + bins];
            if o.use_energy {
                row[0] = b.energy[lane];
            }
            out.extend_from_slice(row);
        }
    }

    /// The split step and `|2X[k]|²` for `k = 0 .. m` into `power[k·L ..]`.
    #[inline(always)]
    fn power<V: Lanes32>(&self, re: &[f32], im: &[f32], power: &mut [f32]) {
        debug_assert_eq!(re.len(), self.m * V::L);
        real32::split_power::<V>(&self.split, false, re, im, power);
    }

    /// The sparse triangles over `power` into `mel[b·L ..]`.
    #[inline(always)]
    fn mel<V: Lanes32>(&self, power: &[f32], mel: &mut [f32]) {
        real32::sparse_mel::<V>(&self.bands, -0.0, power, mel);
    }
}

/// One sample `v` (DC removed) of [`KaldiBatch::pack`]: its energy, its
/// pre-emphasis against `prev` (then `prev := v`), its window value `w`.
#[inline(always)]
fn step<V: Lanes32, const PRE: bool, const RAW: bool, const WIN: bool>(
    v: V,
    prev: &mut V,
    energy: &mut V,
    p: V,
    w: f32,
) -> V {
    if RAW {
        *energy = energy.add(v.mul(v));
    }
    let y = if PRE { v.sub(p.mul(*prev)) } else { v };
    *prev = v;
    let w = y.mul(V::splat(w));
    if WIN {
        *energy = energy.add(w.mul(w));
    }
    w
}

/// ln(max(x, ε)), ε = f32::EPSILON, with cephes' `logf`; exactly `ln_floor`
/// (the per-frame path's ln ε) at or below the floor.
#[inline(always)]
pub(super) fn ln_floored(x: f32, ln_floor: f32) -> f32 {
    let v = x.max(Real::EPSILON);
    let ln = logf32::ln(v);
    if v <= Real::EPSILON { ln_floor } else { ln }
}

#[cfg(test)]
#[path = "batch_tests.rs"]
mod tests;
