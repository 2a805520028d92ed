//! The host double's kernel executor: `launch` → the host build of
//! `kernels/mel.cu` (`host::ffi::host_mf_*`, compiled by build.rs through the
//! emulation header). With it, a [`super::double::HostDouble`] running the
//! [`crate::compute::cuda::recipe::MelRecipe`] computes real mel rows, so the orchestration
//! tests also check the numbers against the CPU backend.

use super::double::{HostArg, HostKernels};
use super::host::{Dim3, ffi};
use crate::compute::cuda::device::{DeviceError, LaunchDims, Result};
use crate::compute::cuda::recipe_tables::FrUtt;
use crate::compute::cuda::tables::MfFile;

/// Runs `mf_*` kernels on the host.
pub struct MelHostKernels;

fn dim(x: u32) -> Dim3 {
    Dim3 { x, y: 1, z: 1 }
}

fn bad(name: &str) -> DeviceError {
    DeviceError::new(
        "cuLaunchKernel",
        format!("{name}: argument types do not match"),
    )
}

impl HostKernels for MelHostKernels {
    unsafe fn run(&mut self, name: &str, d: LaunchDims, a: &[HostArg]) -> Result<()> {
        use HostArg::{F32, F64, I32, I64, Ptr};
        let (g, b) = (dim(d.grid), dim(d.block));
        // SAFETY (every arm): the caller guarantees the pointers cover what the
        // kernel indexes; argument kinds are matched against the signature in
        // kernels/README.md, and a mismatch is an error, not a call.
        unsafe {
            match (name, a) {
                ("mf_decode", &[Ptr(bytes), Ptr(files), I32(n), I32(clip), Ptr(clips)]) => {
                    ffi::host_mf_decode(g, b, bytes, files as *const MfFile, n, clip, clips.cast())
                }
                (
                    "mf_frame",
                    &[
                        Ptr(clips),
                        I32(n),
                        I32(clip),
                        I32(nd),
                        I32(nfft),
                        Ptr(fs),
                        Ptr(fp),
                        Ptr(pat),
                        Ptr(win),
                        Ptr(frames),
                    ],
                ) => ffi::host_mf_frame(
                    g,
                    b,
                    clips.cast(),
                    n,
                    clip,
                    nd,
                    nfft,
                    fs.cast(),
                    fp.cast(),
                    pat.cast(),
                    win.cast(),
                    frames.cast(),
                ),
                (
                    "mf_power_mel_db",
                    &[
                        Ptr(spec),
                        I32(rows),
                        I32(bins),
                        I32(mels),
                        Ptr(bf),
                        Ptr(bl),
                        Ptr(bo),
                        Ptr(bw),
                        F64(power),
                        F32(amin),
                        F64(ref_db),
                        Ptr(db),
                    ],
                ) => ffi::host_mf_power_mel_db(
                    g,
                    b,
                    spec.cast(),
                    rows,
                    bins,
                    mels,
                    bf.cast(),
                    bl.cast(),
                    bo.cast(),
                    bw.cast(),
                    power,
                    amin,
                    ref_db,
                    db.cast(),
                ),
                ("mf_clip_max_part", &[Ptr(db), I32(n), I32(per), I32(parts), Ptr(p)]) => {
                    ffi::host_mf_clip_max_part(g, b, db.cast(), n, per, parts, p.cast())
                }
                ("mf_clip_max", &[Ptr(db), I32(n), I32(per), Ptr(mx)]) => {
                    ffi::host_mf_clip_max(g, b, db.cast(), n, per, mx.cast())
                }
                ("mf_top_db", &[Ptr(db), I32(n), I32(per), Ptr(mx), F32(top)]) => {
                    ffi::host_mf_top_db(g, b, db.cast(), n, per, mx.cast(), top)
                }
                (
                    "mf_scatter",
                    &[
                        Ptr(db),
                        I32(n),
                        I32(nd),
                        I32(mels),
                        I32(nf),
                        I32(ns),
                        Ptr(col),
                        Ptr(out),
                    ],
                ) => ffi::host_mf_scatter(
                    g,
                    b,
                    db.cast(),
                    n,
                    nd,
                    mels,
                    nf,
                    ns,
                    col.cast(),
                    out.cast(),
                ),
                ("mf_to_f16", &[Ptr(i), I64(n), Ptr(o)]) => {
                    ffi::host_mf_to_f16(g, b, i.cast(), n, o.cast())
                }
                _ => return frames(name, g, b, a),
            }
        }
        Ok(())
    }
}

/// The `kf_*` and `wm_*` kernels of `kernels/frames.cu` (the host build in
/// `host_recipes::ffi`), so a double runs the variable-length recipes too.
///
/// # Safety
/// As [`HostKernels::run`]: the pointers cover what the kernel indexes.
unsafe fn frames(name: &str, g: Dim3, b: Dim3, a: &[HostArg]) -> Result<()> {
    use super::host_recipes::ffi as fr;
    use HostArg::{F32, I32, Ptr};
    // SAFETY (every arm): as in `run`.
    unsafe {
        match (name, a) {
            (
                "kf_frame",
                &[
                    Ptr(samples),
                    Ptr(utts),
                    I32(n_utts),
                    I32(n_rows),
                    I32(ws),
                    I32(shift),
                    I32(padded),
                    I32(snip),
                    F32(scale),
                    I32(dc),
                    F32(preemph),
                    I32(raw),
                    F32(floor),
                    Ptr(window),
                    Ptr(frames),
                    Ptr(energy),
                ],
            ) => fr::host_kf_frame(
                g,
                b,
                samples.cast(),
                utts as *const FrUtt,
                n_utts,
                n_rows,
                ws,
                shift,
                padded,
                snip,
                scale,
                dc,
                preemph,
                raw,
                floor,
                window.cast(),
                frames.cast(),
                energy.cast(),
            ),
            (
                "kf_power_mel_log",
                &[
                    Ptr(spec),
                    I32(rows),
                    I32(bins),
                    I32(mels),
                    Ptr(bf),
                    Ptr(bl),
                    Ptr(bo),
                    Ptr(bw),
                    I32(power),
                    I32(log),
                    Ptr(energy),
                    I32(e_col),
                    I32(stride),
                    I32(col),
                    Ptr(out),
                ],
            ) => fr::host_kf_power_mel_log(
                g,
                b,
                spec.cast(),
                rows,
                bins,
                mels,
                bf.cast(),
                bl.cast(),
                bo.cast(),
                bw.cast(),
                power,
                log,
                energy.cast(),
                e_col,
                stride,
                col,
                out.cast(),
            ),
            (
                "kf_dct",
                &[
                    Ptr(mel),
                    I32(rows),
                    I32(mels),
                    I32(ceps),
                    Ptr(dct),
                    I32(use_energy),
                    Ptr(energy),
                    Ptr(out),
                ],
            ) => fr::host_kf_dct(
                g,
                b,
                mel.cast(),
                rows,
                mels,
                ceps,
                dct.cast(),
                use_energy,
                energy.cast(),
                out.cast(),
            ),
            (
                "wm_frame",
                &[
                    Ptr(samples),
                    Ptr(utts),
                    I32(n_utts),
                    I32(rows),
                    Ptr(window),
                    Ptr(frames),
                ],
            ) => fr::host_wm_frame(
                g,
                b,
                samples.cast(),
                utts as *const FrUtt,
                n_utts,
                rows,
                window.cast(),
                frames.cast(),
            ),
            (
                "wm_power_mel_log",
                &[
                    Ptr(spec),
                    I32(rows),
                    I32(bins),
                    I32(mels),
                    Ptr(bf),
                    Ptr(bl),
                    Ptr(bo),
                    Ptr(bw),
                    Ptr(out),
                ],
            ) => fr::host_wm_power_mel_log(
                g,
                b,
                spec.cast(),
                rows,
                bins,
                mels,
                bf.cast(),
                bl.cast(),
                bo.cast(),
                bw.cast(),
                out.cast(),
            ),
            (
                "wm_max_part",
                &[
                    Ptr(values),
                    Ptr(utts),
                    I32(n_utts),
                    I32(mels),
                    I32(parts),
                    Ptr(partial),
                ],
            ) => fr::host_wm_max_part(
                g,
                b,
                values.cast(),
                utts as *const FrUtt,
                n_utts,
                mels,
                parts,
                partial.cast(),
            ),
            (
                "wm_max",
                &[
                    Ptr(partial),
                    Ptr(utts),
                    I32(n_utts),
                    I32(parts),
                    F32(floor_log),
                    Ptr(clamp),
                    Ptr(pad),
                ],
            ) => fr::host_wm_max(
                g,
                b,
                partial.cast(),
                utts as *const FrUtt,
                n_utts,
                parts,
                floor_log,
                clamp.cast(),
                pad.cast(),
            ),
            (
                "wm_clamp_scale",
                &[
                    Ptr(values),
                    Ptr(utts),
                    I32(n_utts),
                    I32(rows),
                    I32(mels),
                    Ptr(clamp),
                ],
            ) => fr::host_wm_clamp_scale(
                g,
                b,
                values.cast(),
                utts as *const FrUtt,
                n_utts,
                rows,
                mels,
                clamp.cast(),
            ),
            _ => return Err(bad(name)),
        }
    }
    Ok(())
}
