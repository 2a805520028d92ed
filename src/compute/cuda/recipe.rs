//! `MelRecipe`: the batch sequence of `kernels/README.md` as device calls.
//!
//! ```text
//! mf_decode ─▶ mf_frame ─▶ cuFFT D2Z ─▶ mf_power_mel_db
//!   ─▶ [mf_clip_max_part ─▶ mf_clip_max ─▶ mf_top_db] ─▶ mf_scatter
//!   ─▶ [mf_to_f16] ─▶ D2H rows
//! ```
//!
//! With float16 output ([`MelRecipe::with_f16_rows`]) the rows are converted
//! inside the graph and copied back as binary16 (half the D2H bytes); the
//! host widens them to f32 exactly, so the writer's own f16 conversion gives
//! back the same bits: the dataset equals `half::f16::from_f32` of the f32
//! rows bit for bit (tests_regress.rs).
//!
//! The per-plan [`Tables`] are uploaded once in `init`; per slot the recipe owns
//! the intermediate buffers sized for B files; a shape of n ≤ B files launches
//! over the first n files of each buffer, with one cuFFT plan per shape.
//! Launch shapes are `tables::launch_1d(total)` (grid-stride kernels).

use std::collections::HashMap;

use super::device::{
    Arg, DevBuf, Device, DeviceError, FftKind, FftPlan, FftShape, Kernel, LaunchDims, Pinned,
    Result, Stream,
};
use super::host_copy;
use super::orchestrate::{Desc, Recipe, Shape};
use super::tables::{self, MfFile, Tables};

/// Kernel entry points, in launch order (`kernels/README.md`).
pub const KERNELS: [&str; 8] = [
    "mf_decode",
    "mf_frame",
    "mf_power_mel_db",
    "mf_clip_max_part",
    "mf_clip_max",
    "mf_top_db",
    "mf_scatter",
    "mf_to_f16",
];

struct Consts {
    frame_start: DevBuf,
    frame_pattern: DevBuf,
    patterns: DevBuf,
    window: DevBuf,
    band_first: DevBuf,
    band_len: DevBuf,
    band_offset: DevBuf,
    band_weights: DevBuf,
    column: DevBuf,
}

/// Per-slot intermediates.
pub struct MelWork {
    clips: DevBuf,
    frames: DevBuf,
    spectrum: DevBuf,
    db: DevBuf,
    clip_max_part: DevBuf,
    clip_max: DevBuf,
    rows: DevBuf,
    /// Binary16 rows (float16 output only).
    rows16: Option<DevBuf>,
}

/// Partial maxima per file (`mf_clip_max_part`): the parallel half of the
/// per-file maximum (`host::CLIP_MAX_PARTS` in the host tests).
pub const CLIP_MAX_PARTS: usize = 64;

/// See the module doc.
pub struct MelRecipe {
    t: Tables,
    kernels: HashMap<&'static str, Kernel>,
    consts: Option<Consts>,
    plans: HashMap<usize, FftPlan>,
    f16_rows: bool,
}

impl MelRecipe {
    pub fn new(t: Tables) -> MelRecipe {
        MelRecipe {
            t,
            kernels: HashMap::new(),
            consts: None,
            plans: HashMap::new(),
            f16_rows: false,
        }
    }

    /// Rows leave the device as binary16 (float16 output), converted by
    /// `mf_to_f16` inside the graph.
    pub fn with_f16_rows(mut self, on: bool) -> MelRecipe {
        self.f16_rows = on;
        self
    }

    fn k(&self, name: &'static str) -> Result<Kernel> {
        self.kernels
            .get(name)
            .copied()
            .ok_or_else(|| DeviceError::new("cuModuleGetFunction", format!("{name} not loaded")))
    }
}

pub(super) fn dims(total: usize) -> LaunchDims {
    let (grid, block) = tables::launch_1d(total);
    LaunchDims { grid, block }
}

pub(super) fn bytes_of<T>(v: &[T]) -> (*const u8, usize) {
    (v.as_ptr().cast::<u8>(), std::mem::size_of_val(v))
}

/// A count the kernels take as `int`. Tables::new checked every count the
/// kernels see fits an i32; batch sizes are checked in `alloc_work` (and
/// `frames_exec::Capacity::check`).
pub(super) fn i32a(v: usize) -> Arg {
    Arg::I32(i32::try_from(v).unwrap_or(i32::MAX))
}

impl Recipe for MelRecipe {
    type Work = MelWork;

    fn desc_bytes(&self) -> usize {
        std::mem::size_of::<MfFile>()
    }

    fn encode(&self, entry: Desc<'_>, out: &mut [u8]) {
        let d = match entry {
            Desc::File(p) => MfFile {
                data: p.data,
                frames: p.frames,
                channels: p.info.channels,
                format: tables::format_code(p.info.format),
            },
            // Padding: no frames → the clip decodes to silence.
            Desc::Pad { .. } => MfFile {
                data: 0,
                frames: 0,
                channels: 1,
                format: tables::FORMAT_I16,
            },
        };
        out[0..8].copy_from_slice(&d.data.to_le_bytes());
        out[8..12].copy_from_slice(&d.frames.to_le_bytes());
        out[12..14].copy_from_slice(&d.channels.to_le_bytes());
        out[14..16].copy_from_slice(&d.format.to_le_bytes());
    }

    fn clip_samples(&self) -> usize {
        self.t.clip_samples
    }

    fn row_bytes(&self) -> usize {
        self.t.row_len * if self.f16_rows { 2 } else { 4 }
    }

    fn decoder(&self) -> host_copy::Decode {
        match self.f16_rows {
            true => crate::dsp::f16::widen_bytes,
            false => host_copy::f32_values,
        }
    }

    fn init<D: Device>(&mut self, dev: &mut D) -> Result<()> {
        for name in KERNELS {
            let k = dev.kernel(name)?;
            self.kernels.insert(name, k);
        }
        let s = dev.create_stream()?;
        let t = &self.t;
        let arrays: [(*const u8, usize); 9] = [
            bytes_of(&t.frame_start),
            bytes_of(&t.frame_pattern),
            bytes_of(&t.patterns),
            bytes_of(&t.window),
            bytes_of(&t.band_first),
            bytes_of(&t.band_len),
            bytes_of(&t.band_offset),
            bytes_of(&t.band_weights),
            bytes_of(&t.column),
        ];
        let mut bufs = Vec::with_capacity(arrays.len());
        for (ptr, len) in arrays {
            let b = dev.alloc(len.max(8))?;
            if len > 0 {
                // SAFETY: the source is a Vec inside `self.t`, alive and
                // unmodified until the event below is synchronised.
                unsafe { dev.memcpy_htod_async(s, b, 0, ptr, len) }?;
            }
            bufs.push(b);
        }
        let e = dev.create_event()?;
        dev.record_event(e, s)?;
        dev.event_synchronize(e)?;
        self.consts = Some(Consts {
            frame_start: bufs[0],
            frame_pattern: bufs[1],
            patterns: bufs[2],
            window: bufs[3],
            band_first: bufs[4],
            band_len: bufs[5],
            band_offset: bufs[6],
            band_weights: bufs[7],
            column: bufs[8],
        });
        Ok(())
    }

    fn alloc_work<D: Device>(&mut self, dev: &mut D, files: usize) -> Result<MelWork> {
        let t = &self.t;
        let rows = files.saturating_mul(t.n_distinct);
        if i32::try_from(rows.saturating_mul(t.n_mels.max(t.n_bins))).is_err()
            || i32::try_from(files).is_err()
        {
            return Err(DeviceError::new(
                "alloc",
                format!("compute.batch_files = {files} is too large for the kernels' indices"),
            ));
        }
        Ok(MelWork {
            clips: dev.alloc(files * t.clip_samples * 4)?,
            frames: dev.alloc(rows * t.n_fft * 8)?,
            spectrum: dev.alloc(rows * t.n_bins * 16)?,
            db: dev.alloc(rows * t.n_mels * 4)?,
            clip_max_part: dev.alloc(files * CLIP_MAX_PARTS * 4)?,
            clip_max: dev.alloc(files * 4)?,
            rows: dev.alloc(files * t.row_len * 4)?,
            rows16: if self.f16_rows {
                Some(dev.alloc(files * t.row_len * 2)?)
            } else {
                None
            },
        })
    }

    fn prepare<D: Device>(&mut self, dev: &mut D, files: usize) -> Result<()> {
        if !self.plans.contains_key(&files) {
            let p = dev.fft_plan(FftShape {
                n: self.t.n_fft,
                batch: files * self.t.n_distinct,
                kind: FftKind::D2Z,
            })?;
            self.plans.insert(files, p);
        }
        Ok(())
    }

    fn warm_up<D: Device>(&mut self, dev: &mut D, s: Stream, w: &MelWork, n: usize) -> Result<()> {
        let plan = *self
            .plans
            .get(&n)
            .ok_or_else(|| DeviceError::new("warm-up", "no FFT plan for this shape"))?;
        dev.fft_exec(s, plan, w.frames, w.spectrum)
    }

    /// The batch's kernel sequence on stream `s`, in steps: frames of every
    /// clip, their FFT, power → mel → dB, the per-file `top_db` floor, rows
    /// in output order, and the copy of the rows to `out`.
    fn issue<D: Device>(
        &mut self,
        dev: &mut D,
        s: Stream,
        w: &MelWork,
        input: DevBuf,
        descs: DevBuf,
        out: Pinned,
        shape: Shape,
    ) -> Result<()> {
        // Captured once per shape: the work depends on the files only.
        let n = shape.files;
        self.consts()?;
        let plan = *self
            .plans
            .get(&n)
            .ok_or_else(|| DeviceError::new("issue", "no FFT plan for this shape"))?;
        self.frames(dev, s, w, (input, descs), n)?;
        dev.fft_exec(s, plan, w.frames, w.spectrum)?;
        self.mel_db(dev, s, w, n)?;
        if let Some(top) = self.t.top_db {
            self.top_db(dev, s, w, n, top)?;
        }
        self.scatter(dev, s, w, n)?;
        self.copy_out(dev, s, w, out, n)
    }
}

impl MelRecipe {
    fn consts(&self) -> Result<&Consts> {
        self.consts
            .as_ref()
            .ok_or_else(|| DeviceError::new("issue", "recipe not initialised"))
    }

    /// Decodes the batch's files (`input` by `descs`) into clips and cuts
    /// them into windowed frames.
    fn frames<D: Device>(
        &self,
        dev: &mut D,
        s: Stream,
        w: &MelWork,
        (input, descs): (DevBuf, DevBuf),
        n: usize,
    ) -> Result<()> {
        let (t, c, b) = (&self.t, self.consts()?, Arg::buf);
        dev.launch(
            s,
            self.k("mf_decode")?,
            dims(n * t.clip_samples),
            &[
                b(input),
                b(descs),
                i32a(n),
                i32a(t.clip_samples),
                b(w.clips),
            ],
        )?;
        dev.launch(
            s,
            self.k("mf_frame")?,
            dims(n * t.n_distinct * t.n_fft),
            &[
                b(w.clips),
                i32a(n),
                i32a(t.clip_samples),
                i32a(t.n_distinct),
                i32a(t.n_fft),
                b(c.frame_start),
                b(c.frame_pattern),
                b(c.patterns),
                b(c.window),
                b(w.frames),
            ],
        )
    }

    /// Power spectrum → mel bands → dB.
    fn mel_db<D: Device>(&self, dev: &mut D, s: Stream, w: &MelWork, n: usize) -> Result<()> {
        let (t, c, b) = (&self.t, self.consts()?, Arg::buf);
        let n_rows = n * t.n_distinct;
        dev.launch(
            s,
            self.k("mf_power_mel_db")?,
            dims(n_rows * t.n_mels),
            &[
                b(w.spectrum),
                i32a(n_rows),
                i32a(t.n_bins),
                i32a(t.n_mels),
                b(c.band_first),
                b(c.band_len),
                b(c.band_offset),
                b(c.band_weights),
                Arg::F64(t.power),
                Arg::F32(t.amin),
                Arg::F64(t.ref_db),
                b(w.db),
            ],
        )
    }

    /// The `top_db` floor: each file's maximum (in parts, then whole), and
    /// every value raised to `max - top` at least.
    fn top_db<D: Device>(
        &self,
        dev: &mut D,
        s: Stream,
        w: &MelWork,
        n: usize,
        top: f32,
    ) -> Result<()> {
        let b = Arg::buf;
        let per_file = self.t.n_distinct * self.t.n_mels;
        dev.launch(
            s,
            self.k("mf_clip_max_part")?,
            dims(n * CLIP_MAX_PARTS),
            &[
                b(w.db),
                i32a(n),
                i32a(per_file),
                i32a(CLIP_MAX_PARTS),
                b(w.clip_max_part),
            ],
        )?;
        dev.launch(
            s,
            self.k("mf_clip_max")?,
            dims(n),
            &[
                b(w.clip_max_part),
                i32a(n),
                i32a(CLIP_MAX_PARTS),
                b(w.clip_max),
            ],
        )?;
        dev.launch(
            s,
            self.k("mf_top_db")?,
            dims(n * per_file),
            &[
                b(w.db),
                i32a(n),
                i32a(per_file),
                b(w.clip_max),
                Arg::F32(top),
            ],
        )
    }

    /// The dB values of each file's distinct frames into its row, in output
    /// order.
    fn scatter<D: Device>(&self, dev: &mut D, s: Stream, w: &MelWork, n: usize) -> Result<()> {
        let (t, c, b) = (&self.t, self.consts()?, Arg::buf);
        dev.launch(
            s,
            self.k("mf_scatter")?,
            dims(n * t.row_len),
            &[
                b(w.db),
                i32a(n),
                i32a(t.n_distinct),
                i32a(t.n_mels),
                i32a(t.n_frames),
                i32a(t.n_segments),
                b(c.column),
                b(w.rows),
            ],
        )
    }

    /// The rows to the host (`out`), as binary16 when the recipe converts.
    fn copy_out<D: Device>(
        &self,
        dev: &mut D,
        s: Stream,
        w: &MelWork,
        out: Pinned,
        n: usize,
    ) -> Result<()> {
        let t = &self.t;
        match w.rows16 {
            Some(r16) => {
                let total = n * t.row_len;
                dev.launch(
                    s,
                    self.k("mf_to_f16")?,
                    dims(total),
                    &[Arg::buf(w.rows), Arg::I64(total as i64), Arg::buf(r16)],
                )?;
                dev.memcpy_dtoh_async(s, out, 0, r16, 0, total * 2)
            }
            None => dev.memcpy_dtoh_async(s, out, 0, w.rows, 0, n * t.row_len * 4),
        }
    }
}
