//! The CUDA kernels run on the host: FFI to `kernels/mel.cu` compiled by g++
//! through the emulation header (`kernels/shim/host_cuda.h`, built by `build.rs`),
//! safe launch wrappers, and [`HostPipeline`], which runs a whole batch the way
//! the device does (decode → frame → FFT → power/mel/dB → top_db → scatter →
//! f16), with realfft standing in for cuFFT's D2Z.
//!
//! This is how a machine without a GPU proves the kernels' indexing and math:
//! the tests (`host_tests.rs`) compare every kernel's output, through the
//! pipeline, with the CPU backend on random WAVs of every sample format and with
//! the librosa golden fixtures.
//!
//! Layering: the raw `host_mf_*` declarations are private; each safe wrapper
//! checks every length and every table index the kernel will use **before** the
//! call (a bad argument is an [`Error`], never an out-of-bounds access), so the
//! only `unsafe` blocks are the FFI calls themselves.

use std::sync::Arc;

use realfft::{RealFftPlanner, RealToComplex};

use crate::compute::cuda::tables::{self, MfFile, Tables, TooLarge};
use crate::dsp::Plan;

/// A launch shape (`dim3` in the shim). The kernels are 1-D and grid-stride:
/// any `grid.x`, `block.x ≥ 1` with `y = z = 1` computes the same result.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dim3 {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

/// Grid and block of one host launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    pub grid: Dim3,
    pub block: Dim3,
}

impl Launch {
    /// A 1-D launch of `grid` blocks of `block` threads.
    pub const fn new(grid: u32, block: u32) -> Launch {
        Launch {
            grid: Dim3 {
                x: grid,
                y: 1,
                z: 1,
            },
            block: Dim3 {
                x: block,
                y: 1,
                z: 1,
            },
        }
    }

    /// The device's launch shape for `total` elements ([`tables::launch_1d`]).
    pub fn for_total(total: usize) -> Launch {
        let (grid, block) = tables::launch_1d(total);
        Launch::new(grid, block)
    }

    fn check(self) -> Result<(), Error> {
        let ok = |d: Dim3| d.x >= 1 && d.y >= 1 && d.z >= 1;
        if ok(self.grid) && ok(self.block) {
            Ok(())
        } else {
            Err(Error::Launch(self))
        }
    }
}

/// Why a host kernel was not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    #[error("{what}: {found} values, expected {expected}")]
    Length {
        what: &'static str,
        expected: usize,
        found: usize,
    },
    #[error("{what}: {detail}")]
    Table { what: &'static str, detail: String },
    #[error("launch shape {0:?} has an empty dimension")]
    Launch(Launch),
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
}

pub(crate) mod ffi {
    use super::Dim3;
    use crate::compute::cuda::tables::MfFile;

    // Defined in kernels/host_launch.cpp; each runs the kernel of the same name
    // for every thread of `grid` × `block`. Pointers must be valid for every
    // index the kernel computes from the counts (the safe wrappers check).
    unsafe extern "C" {
        pub fn host_mf_decode(
            grid: Dim3,
            block: Dim3,
            bytes: *const u8,
            files: *const MfFile,
            n_files: i32,
            clip_samples: i32,
            clips: *mut f32,
        );
        pub fn host_mf_frame(
            grid: Dim3,
            block: Dim3,
            clips: *const f32,
            n_files: i32,
            clip_samples: i32,
            n_distinct: i32,
            n_fft: i32,
            frame_start: *const i32,
            frame_pattern: *const i32,
            patterns: *const i32,
            window: *const f64,
            frames: *mut f64,
        );
        pub fn host_mf_power_mel_db(
            grid: Dim3,
            block: Dim3,
            spectrum: *const f64,
            n_rows: i32,
            n_bins: i32,
            n_mels: i32,
            band_first: *const i32,
            band_len: *const i32,
            band_offset: *const i32,
            band_weights: *const f32,
            power: f64,
            amin: f32,
            ref_db: f64,
            db: *mut f32,
        );
        pub fn host_mf_clip_max_part(
            grid: Dim3,
            block: Dim3,
            db: *const f32,
            n_files: i32,
            per_file: i32,
            parts: i32,
            partial: *mut f32,
        );
        pub fn host_mf_clip_max(
            grid: Dim3,
            block: Dim3,
            db: *const f32,
            n_files: i32,
            per_file: i32,
            clip_max: *mut f32,
        );
        pub fn host_mf_top_db(
            grid: Dim3,
            block: Dim3,
            db: *mut f32,
            n_files: i32,
            per_file: i32,
            clip_max: *const f32,
            top_db: f32,
        );
        pub fn host_mf_scatter(
            grid: Dim3,
            block: Dim3,
            db: *const f32,
            n_files: i32,
            n_distinct: i32,
            n_mels: i32,
            n_frames: i32,
            n_segments: i32,
            column: *const i32,
            out: *mut f32,
        );
        pub fn host_mf_to_f16(grid: Dim3, block: Dim3, input: *const f32, n: i64, out: *mut u16);
    }
}

fn expect_len(what: &'static str, found: usize, expected: usize) -> Result<(), Error> {
    if found == expected {
        Ok(())
    } else {
        Err(Error::Length {
            what,
            expected,
            found,
        })
    }
}

fn int(what: &'static str, value: usize) -> Result<i32, Error> {
    i32::try_from(value).map_err(|_| Error::TooLarge(TooLarge { what, value }))
}

fn table(what: &'static str, detail: String) -> Error {
    Error::Table { what, detail }
}

/// `mf_decode`: `files` (descriptors into `bytes`) → `clips` `[files][clip_samples]`.
pub fn decode(
    launch: Launch,
    bytes: &[u8],
    files: &[MfFile],
    clip_samples: usize,
    clips: &mut [f32],
) -> Result<(), Error> {
    launch.check()?;
    expect_len("clips", clips.len(), files.len() * clip_samples)?;
    for (b, f) in files.iter().enumerate() {
        if f.end_byte(clip_samples) > bytes.len() as u64 {
            return Err(table(
                "files",
                format!("file {b} reads up to byte {}", f.end_byte(clip_samples)),
            ));
        }
    }
    let (n_files, clip) = (int("files", files.len())?, int("clip", clip_samples)?);
    // SAFETY: clips holds n_files · clip_samples values (checked); the kernel
    // reads, per file, bytes data .. end_byte(clip_samples) (t < min(frames,
    // clip), channels · width bytes each; unknown formats read nothing), all
    // checked to lie inside `bytes`.
    unsafe {
        ffi::host_mf_decode(
            launch.grid,
            launch.block,
            bytes.as_ptr(),
            files.as_ptr(),
            n_files,
            clip,
            clips.as_mut_ptr(),
        );
    }
    Ok(())
}

/// Checks that every sample `mf_frame` gathers lies inside a clip.
fn check_gather(t: &Tables) -> Result<(), Error> {
    let n_fft = t.n_fft;
    expect_len("frame_pattern", t.frame_pattern.len(), t.n_distinct)?;
    expect_len("frame_start", t.frame_start.len(), t.n_distinct)?;
    expect_len("window", t.window.len(), n_fft)?;
    if n_fft == 0 || !t.patterns.len().is_multiple_of(n_fft) {
        return Err(table(
            "patterns",
            format!("length not a multiple of {n_fft}"),
        ));
    }
    let n_patterns = t.patterns.len() / n_fft;
    for (d, (&start, &p)) in t.frame_start.iter().zip(&t.frame_pattern).enumerate() {
        let (lo, hi) = if p < 0 {
            (0, n_fft as i64 - 1)
        } else if (p as usize) < n_patterns {
            let row = &t.patterns[p as usize * n_fft..][..n_fft];
            let used = row.iter().filter(|&&k| k >= 0).map(|&k| i64::from(k));
            (used.clone().min().unwrap_or(0), used.max().unwrap_or(0))
        } else {
            return Err(table("frame_pattern", format!("frame {d}: pattern {p}")));
        };
        let (lo, hi) = (i64::from(start) + lo, i64::from(start) + hi);
        if lo < 0 || hi >= t.clip_samples as i64 {
            return Err(table(
                "frame_start",
                format!("frame {d} reads samples {lo} ..= {hi}"),
            ));
        }
    }
    Ok(())
}

/// `mf_frame`: clips → windowed frames `[files][n_distinct][n_fft]` (f64).
pub fn frame(launch: Launch, t: &Tables, clips: &[f32], frames: &mut [f64]) -> Result<(), Error> {
    launch.check()?;
    check_gather(t)?;
    let files = clips.len() / t.clip_samples.max(1);
    expect_len("clips", clips.len(), files * t.clip_samples)?;
    expect_len("frames", frames.len(), t.frames_len(files))?;
    // SAFETY: check_gather proved every gathered index (frame_start[d] + j or +
    // patterns[..] ≥ 0) is inside one clip, the pattern indices inside `patterns`
    // and the window n_fft long; clips and frames have `files` clips/rows.
    unsafe {
        ffi::host_mf_frame(
            launch.grid,
            launch.block,
            clips.as_ptr(),
            int("files", files)?,
            int("clip", t.clip_samples)?,
            int("distinct frames", t.n_distinct)?,
            int("n_fft", t.n_fft)?,
            t.frame_start.as_ptr(),
            t.frame_pattern.as_ptr(),
            t.patterns.as_ptr(),
            t.window.as_ptr(),
            frames.as_mut_ptr(),
        );
    }
    Ok(())
}

/// Checks every band's weight range.
fn check_bands(t: &Tables) -> Result<(), Error> {
    expect_len("band_first", t.band_first.len(), t.n_mels)?;
    expect_len("band_len", t.band_len.len(), t.n_mels)?;
    expect_len("band_offset", t.band_offset.len(), t.n_mels)?;
    for m in 0..t.n_mels {
        let (first, len, off) = (t.band_first[m], t.band_len[m], t.band_offset[m]);
        let fits = i64::from(off) + i64::from(len) <= t.band_weights.len() as i64;
        if first < 0 || len < 0 || off < 0 || len % 8 != 0 || !fits {
            return Err(table(
                "bands",
                format!("band {m}: first {first}, len {len}, offset {off}"),
            ));
        }
    }
    Ok(())
}

/// `mf_power_mel_db`: spectrum (re, im interleaved, `[rows][n_bins]`) → dB
/// `[rows][n_mels]`.
pub fn power_mel_db(
    launch: Launch,
    t: &Tables,
    spectrum: &[f64],
    db: &mut [f32],
) -> Result<(), Error> {
    launch.check()?;
    check_bands(t)?;
    let rows = spectrum.len() / (2 * t.n_bins).max(1);
    expect_len("spectrum", spectrum.len(), rows * 2 * t.n_bins)?;
    expect_len("db", db.len(), rows * t.n_mels)?;
    // SAFETY: spectrum has rows · n_bins complex values and db rows · n_mels
    // (checked); the kernel reads bins k < n_bins only and each band's weights
    // inside band_weights (check_bands).
    unsafe {
        ffi::host_mf_power_mel_db(
            launch.grid,
            launch.block,
            spectrum.as_ptr(),
            int("rows", rows)?,
            int("bins", t.n_bins)?,
            int("mels", t.n_mels)?,
            t.band_first.as_ptr(),
            t.band_len.as_ptr(),
            t.band_offset.as_ptr(),
            t.band_weights.as_ptr(),
            t.power,
            t.amin,
            t.ref_db,
            db.as_mut_ptr(),
        );
    }
    Ok(())
}

/// Partial maxima per file the recipe reduces in parallel
/// (`mf_clip_max_part`), before `mf_clip_max` reduces them.
pub const CLIP_MAX_PARTS: usize = 64;

/// Each file's maximum as the recipe computes it: `mf_clip_max_part` with
/// `parts` partial maxima per file, then `mf_clip_max` over them; `parts` = 0
/// runs the single-pass `mf_clip_max` over the values themselves.
pub fn clip_max(
    launch: Launch,
    db: &[f32],
    per_file: usize,
    parts: usize,
) -> Result<Vec<f32>, Error> {
    launch.check()?;
    let files = db.len() / per_file.max(1);
    expect_len("db", db.len(), files * per_file)?;
    let mut clip_max = vec![0f32; files];
    let (n_files, per) = (int("files", files)?, int("per file", per_file)?);
    if parts == 0 {
        // SAFETY: db holds files · per_file values, clip_max `files`.
        unsafe {
            ffi::host_mf_clip_max(
                launch.grid,
                launch.block,
                db.as_ptr(),
                n_files,
                per,
                clip_max.as_mut_ptr(),
            );
        }
        return Ok(clip_max);
    }
    let mut partial = vec![0f32; files * parts];
    let p = int("parts", parts)?;
    // SAFETY: db holds files · per_file values, partial files · parts and
    // clip_max `files` (checked / allocated above).
    unsafe {
        ffi::host_mf_clip_max_part(
            launch.grid,
            launch.block,
            db.as_ptr(),
            n_files,
            per,
            p,
            partial.as_mut_ptr(),
        );
        ffi::host_mf_clip_max(
            launch.grid,
            launch.block,
            partial.as_ptr(),
            n_files,
            p,
            clip_max.as_mut_ptr(),
        );
    }
    Ok(clip_max)
}

/// `mf_clip_max_part`, `mf_clip_max`, then `mf_top_db`: clamps each file's
/// `per_file` dB values at its maximum − `top_db`.
pub fn top_db(launch: Launch, db: &mut [f32], per_file: usize, top_db: f32) -> Result<(), Error> {
    let clip_max = clip_max(launch, db, per_file, CLIP_MAX_PARTS)?;
    let files = clip_max.len();
    let (n_files, per) = (int("files", files)?, int("per file", per_file)?);
    // SAFETY: db holds files · per_file values and clip_max `files` (checked
    // in clip_max); the kernel indexes nothing else.
    unsafe {
        ffi::host_mf_top_db(
            launch.grid,
            launch.block,
            db.as_mut_ptr(),
            n_files,
            per,
            clip_max.as_ptr(),
            top_db,
        );
    }
    Ok(())
}

/// `mf_scatter`: distinct-frame dB `[files][n_distinct][n_mels]` → rows
/// `[files][row_len]`.
pub fn scatter(launch: Launch, t: &Tables, db: &[f32], out: &mut [f32]) -> Result<(), Error> {
    launch.check()?;
    expect_len("column", t.column.len(), t.n_segments * t.n_frames)?;
    expect_len("row_len", t.row_len, t.n_segments * t.n_mels * t.n_frames)?;
    if let Some(c) = t
        .column
        .iter()
        .find(|&&c| c < 0 || c as usize >= t.n_distinct)
    {
        return Err(table("column", format!("frame {c} of {}", t.n_distinct)));
    }
    let files = db.len() / t.per_file_db().max(1);
    expect_len("db", db.len(), files * t.per_file_db())?;
    expect_len("rows", out.len(), files * t.row_len)?;
    // SAFETY: out holds files · row_len values, db files · n_distinct · n_mels,
    // and every column entry is < n_distinct (all checked).
    unsafe {
        ffi::host_mf_scatter(
            launch.grid,
            launch.block,
            db.as_ptr(),
            int("files", files)?,
            int("distinct frames", t.n_distinct)?,
            int("mels", t.n_mels)?,
            int("frames", t.n_frames)?,
            int("segments", t.n_segments)?,
            t.column.as_ptr(),
            out.as_mut_ptr(),
        );
    }
    Ok(())
}

/// `mf_to_f16`: f32 → IEEE binary16 bits, round to nearest even.
pub fn to_f16(launch: Launch, input: &[f32], out: &mut [u16]) -> Result<(), Error> {
    launch.check()?;
    expect_len("f16 out", out.len(), input.len())?;
    // SAFETY: both slices hold input.len() values (checked); a slice length
    // always fits in i64.
    unsafe {
        ffi::host_mf_to_f16(
            launch.grid,
            launch.block,
            input.as_ptr(),
            input.len() as i64,
            out.as_mut_ptr(),
        );
    }
    Ok(())
}

/// A whole batch through the kernels on the host, in the device's order, with
/// realfft (f64) in place of cuFFT's D2Z.
pub struct HostPipeline {
    tables: Tables,
    fft: Arc<dyn RealToComplex<f64>>,
    /// Fixed launch shape for every kernel; `None`: the device's per kernel.
    launch: Option<Launch>,
}

impl HostPipeline {
    pub fn new(plan: &Plan) -> Result<HostPipeline, Error> {
        let tables = Tables::new(plan)?;
        let fft = RealFftPlanner::<f64>::new().plan_fft_forward(tables.n_fft);
        Ok(HostPipeline {
            tables,
            fft,
            launch: None,
        })
    }

    /// Launches every kernel with `launch` instead of the device's shapes (to
    /// show that results do not depend on the grid).
    pub fn with_launch(mut self, launch: Launch) -> HostPipeline {
        self.launch = Some(launch);
        self
    }

    pub fn tables(&self) -> &Tables {
        &self.tables
    }

    fn launch(&self, total: usize) -> Launch {
        self.launch.unwrap_or_else(|| Launch::for_total(total))
    }

    /// Rows `[files][row_len]` in dB for the files described by `files`, whose
    /// bytes are in `bytes` (the arena).
    pub fn run(&self, bytes: &[u8], files: &[MfFile]) -> Result<Vec<f32>, Error> {
        let t = &self.tables;
        let b = files.len();
        let mut clips = vec![0f32; b * t.clip_samples];
        decode(
            self.launch(clips.len()),
            bytes,
            files,
            t.clip_samples,
            &mut clips,
        )?;

        let mut frames = vec![0f64; t.frames_len(b)];
        frame(self.launch(frames.len()), t, &clips, &mut frames)?;

        let mut spectrum = vec![0f64; t.spectrum_len(b)];
        self.fft_rows(&frames, &mut spectrum);

        let mut db = vec![0f32; b * t.per_file_db()];
        power_mel_db(self.launch(db.len()), t, &spectrum, &mut db)?;
        if let Some(clamp) = t.top_db {
            top_db(self.launch(db.len()), &mut db, t.per_file_db(), clamp)?;
        }

        let mut rows = vec![0f32; b * t.row_len];
        scatter(self.launch(rows.len()), t, &db, &mut rows)?;
        Ok(rows)
    }

    /// [`run`](Self::run), then `mf_to_f16`: rows as binary16 bits.
    pub fn run_f16(&self, bytes: &[u8], files: &[MfFile]) -> Result<Vec<u16>, Error> {
        let rows = self.run(bytes, files)?;
        let mut out = vec![0u16; rows.len()];
        to_f16(self.launch(rows.len()), &rows, &mut out)?;
        Ok(out)
    }

    /// The D2Z step: every `n_fft` frame → `n_bins` complex values, interleaved.
    fn fft_rows(&self, frames: &[f64], spectrum: &mut [f64]) {
        let (n_fft, n_bins) = (self.tables.n_fft, self.tables.n_bins);
        let mut input = self.fft.make_input_vec();
        let mut output = self.fft.make_output_vec();
        let mut scratch = self.fft.make_scratch_vec();
        for (frame, out) in frames
            .chunks_exact(n_fft)
            .zip(spectrum.chunks_exact_mut(2 * n_bins))
        {
            input.copy_from_slice(frame);
            self.fft
                .process_with_scratch(&mut input, &mut output, &mut scratch)
                .expect("buffer sizes come from the plan");
            for (o, x) in out.chunks_exact_mut(2).zip(&output) {
                o[0] = x.re;
                o[1] = x.im;
            }
        }
    }
}

#[cfg(test)]
#[path = "host_tests.rs"]
mod tests;
