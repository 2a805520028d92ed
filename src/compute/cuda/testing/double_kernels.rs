//! The host double's kernel executor: `launch` → the host build of
//! `kernels/mel.cu` (`host::ffi::host_mf_*`, compiled by build.rs through the
//! emulation header). With it, a [`super::double::HostDouble`] running the
//! [`crate::compute::cuda::recipe::MelRecipe`] computes real mel rows, so the orchestration
//! tests also check the numbers against the CPU backend.

use super::double::{HostArg, HostKernels};
use super::host::{Dim3, ffi};
use crate::compute::cuda::device::{DeviceError, LaunchDims, Result};
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
                _ => return Err(bad(name)),
            }
        }
        Ok(())
    }
}
