//! NVRTC: compiles `kernels/*.cu` at start-up for the device, with a cache.
//!
//! The kernel sources are embedded in the binary ([`SOURCES`]), so an installed
//! `melforge` needs no `kernels/` folder. For a device of compute capability
//! X.Y the target is `--gpu-architecture=sm_XY` and the result a **CUBIN**: a
//! CUBIN loads on any driver that supports the architecture, whereas PTX from a
//! newer NVRTC than the driver is refused (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION`).
//! A virtual target (`compute_XY`, used by the GPU-less test) yields PTX.
//!
//! Options never include `--use_fast_math` (the kernels round explicitly; see
//! kernels/README.md) and `--fmad=false` keeps the compiler from contracting
//! anything the source left unrounded.
//!
//! Cache: per process (a map) and on disk under `$XDG_CACHE_HOME/melforge` or
//! `~/.cache/melforge`, one file per (source hash, target, NVRTC version,
//! options); written to a temporary name and renamed, so a concurrent start-up
//! never reads half a file. A cache that cannot be written is logged, not fatal.
//!
//! Calls into libnvrtc go through [`super::api::Nvrtc`]: every entry point
//! resolved from the library the probe found, none through cudarc (whose
//! lookup panics on a missing symbol and knows no `libnvrtc.so.13`).
//! [`check_versions`] refuses an NVRTC newer than the driver (its CUBINs
//! would not load); [`pick_target`] falls back to PTX for the newest
//! architecture NVRTC knows when it does not know the device's.

use std::collections::HashMap;
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::Mutex;

use std::ffi::c_char;

use super::libs::LoadError;
use super::{api, libs};

/// The kernel sources compiled into the binary: (file name, text), each its
/// own module of the device: `mel.cu` (the librosa recipe) and `frames.cu`
/// (the Kaldi and Whisper recipes).
pub const SOURCES: &[(&str, &str)] = &[
    ("mel.cu", include_str!("../../../kernels/mel.cu")),
    ("frames.cu", include_str!("../../../kernels/frames.cu")),
];

/// Options besides the architecture.
const OPTIONS: &[&str] = &["--fmad=false", "--std=c++14"];

/// What to compile for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// `sm_XY`: a CUBIN for one device architecture.
    Sm(u32),
    /// `compute_XY`: PTX for a virtual architecture.
    Compute(u32),
}

impl Target {
    /// From a compute capability (major, minor).
    pub fn for_device(major: i32, minor: i32) -> Target {
        Target::Sm((major.max(0) * 10 + minor.max(0)) as u32)
    }

    fn option(self) -> String {
        match self {
            Target::Sm(v) => format!("--gpu-architecture=sm_{v}"),
            Target::Compute(v) => format!("--gpu-architecture=compute_{v}"),
        }
    }

    fn tag(self) -> String {
        match self {
            Target::Sm(v) => format!("sm_{v}"),
            Target::Compute(v) => format!("compute_{v}"),
        }
    }

    /// Whether the image is PTX text (else CUBIN).
    pub fn is_ptx(self) -> bool {
        matches!(self, Target::Compute(_))
    }
}

/// Why a kernel source could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// libnvrtc cannot be found or loaded.
    #[error(transparent)]
    Library(#[from] libs::Error),
    /// libnvrtc lacks an entry point, or a call into it failed.
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("NVRTC failed on {file} for {target}: {msg}\n{log}")]
    Compile {
        file: String,
        target: String,
        msg: String,
        log: String,
    },
}

/// A compiled image: PTX (NUL-terminated) or CUBIN bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub bytes: Vec<u8>,
    pub ptx: bool,
    pub from_disk_cache: bool,
}

impl Image {
    /// The PTX text (without the NUL), when this is PTX.
    pub fn ptx_text(&self) -> Option<&str> {
        if !self.ptx {
            return None;
        }
        let end = self
            .bytes
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.bytes.len());
        std::str::from_utf8(&self.bytes[..end]).ok()
    }
}

/// Loads libnvrtc (once) and returns its version.
pub fn version() -> Result<(i32, i32), Error> {
    Ok(api::nvrtc().and_then(|n| n.library_version())?)
}

/// Whether NVRTC `nvrtc` (major, minor) makes code the driver of CUDA
/// version `driver` (e.g. 12040) loads: same or older major, and 12 or newer.
pub fn check_versions(nvrtc: (i32, i32), driver: i32) -> Result<(), LoadError> {
    let (dmaj, dmin) = (driver / 1000, driver % 1000 / 10);
    if nvrtc.0 > dmaj {
        return Err(LoadError::NvrtcNewerThanDriver {
            nvrtc,
            driver_major: dmaj,
            driver_minor: dmin,
        });
    }
    if nvrtc.0 < 12 {
        return Err(LoadError::NvrtcTooOld(nvrtc));
    }
    Ok(())
}

/// What to compile for a device of `sm` (e.g. 90) given the real
/// architectures NVRTC supports: a CUBIN for `sm_XY` when NVRTC knows it,
/// else PTX for the newest architecture below it (the driver compiles that
/// PTX for the device). Err when NVRTC knows nothing at or below `sm`.
pub fn pick_target(sm: u32, supported: &[u32]) -> Result<Target, LoadError> {
    if supported.contains(&sm) {
        return Ok(Target::Sm(sm));
    }
    match supported.iter().copied().filter(|&a| a < sm).max() {
        Some(a) => Ok(Target::Compute(a)),
        None => Err(LoadError::NoTarget {
            sm,
            supported: supported.to_vec(),
        }),
    }
}

/// FNV-1a 64: a stable hash for cache keys (std's hasher is not stable).
fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// `$XDG_CACHE_HOME/melforge` or `~/.cache/melforge`.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        return Some(PathBuf::from(x).join("melforge"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("melforge"))
}

/// Compiles `src` (named `file` in messages) for `target`. No cache.
pub fn compile(file: &str, src: &str, target: Target) -> Result<Image, Error> {
    let n = api::nvrtc()?;
    let fail = |msg: String, log: String| Error::Compile {
        file: file.into(),
        target: target.tag(),
        msg,
        log,
    };
    let csrc =
        CString::new(src).map_err(|_| fail("source contains a NUL byte".into(), String::new()))?;
    let cname =
        CString::new(file).map_err(|_| fail("name contains a NUL byte".into(), String::new()))?;
    let mut prog: api::Program = std::ptr::null_mut();
    // SAFETY: valid out-pointer and C strings; no headers (count 0, NULLs).
    let r = unsafe {
        (n.create_program)(
            &mut prog,
            csrc.as_ptr(),
            cname.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(fail(n.describe(r), String::new()));
    }
    let mut opts: Vec<String> = OPTIONS.iter().map(|s| (*s).to_string()).collect();
    opts.push(target.option());
    let copts: Vec<CString> = opts
        .iter()
        .filter_map(|o| CString::new(o.as_str()).ok())
        .collect();
    let ptrs: Vec<*const c_char> = copts.iter().map(|c| c.as_ptr()).collect();
    // SAFETY: `prog` was just created and is destroyed exactly once below;
    // `ptrs` points into `copts`, alive for the call.
    let compiled = unsafe { (n.compile_program)(prog, ptrs.len() as i32, ptrs.as_ptr()) };
    let log = read_sized(prog, n.log_size, n.log)
        .map(|b| {
            let b: Vec<u8> = b.into_iter().take_while(|&c| c != 0).collect();
            String::from_utf8_lossy(&b).into_owned()
        })
        .unwrap_or_default();
    let image = if compiled != 0 {
        Err(fail(n.describe(compiled), log.clone()))
    } else if target.is_ptx() {
        read_sized(prog, n.ptx_size, n.ptx).map_err(|r| fail(n.describe(r), log.clone()))
    } else {
        read_sized(prog, n.cubin_size, n.cubin).map_err(|r| fail(n.describe(r), log.clone()))
    };
    // SAFETY: created above, destroyed once; a failure only leaks the program.
    let r = unsafe { (n.destroy_program)(&mut prog) };
    if r != 0 {
        tracing::warn!(error = %n.describe(r), "Could not destroy an NVRTC program; it is leaked.");
    }
    if !log.trim().is_empty() {
        tracing::debug!(file, arch = target.tag(), log = %log, "NVRTC printed a compile log.");
    }
    Ok(Image {
        bytes: image?,
        ptx: target.is_ptx(),
        from_disk_cache: false,
    })
}

type SizeFn = unsafe extern "C" fn(api::Program, *mut usize) -> i32;
type ReadFn = unsafe extern "C" fn(api::Program, *mut c_char) -> i32;

/// One of NVRTC's "size, then bytes" outputs (log, PTX, CUBIN).
fn read_sized(prog: api::Program, size: SizeFn, read: ReadFn) -> Result<Vec<u8>, i32> {
    let mut len = 0usize;
    // SAFETY: a live program and a valid out-pointer.
    let r = unsafe { size(prog, &mut len) };
    if r != 0 {
        return Err(r);
    }
    let mut buf = vec![0u8; len.max(1)];
    // SAFETY: `buf` holds at least the size NVRTC reported.
    let r = unsafe { read(prog, buf.as_mut_ptr().cast()) };
    if r != 0 {
        return Err(r);
    }
    buf.truncate(len);
    Ok(buf)
}

static MEMORY: Mutex<Option<HashMap<String, Image>>> = Mutex::new(None);

/// [`compile`] through the in-process and on-disk caches.
pub fn compile_cached(file: &str, src: &str, target: Target) -> Result<Image, Error> {
    let (major, minor) = version()?;
    let hash = fnv(&[src.as_bytes(), OPTIONS.join(" ").as_bytes()]);
    let ext = if target.is_ptx() { "ptx" } else { "cubin" };
    let key = format!("{hash:016x}-{}-nvrtc{major}.{minor}.{ext}", target.tag());
    {
        let mem = MEMORY.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(img) = mem.as_ref().and_then(|m| m.get(&key)) {
            return Ok(img.clone());
        }
    }
    let path = cache_dir().map(|d| d.join(&key));
    let image = match path.as_ref().and_then(|p| std::fs::read(p).ok()) {
        Some(bytes) if !bytes.is_empty() => Image {
            bytes,
            ptx: target.is_ptx(),
            from_disk_cache: true,
        },
        _ => {
            let img = compile(file, src, target)?;
            if let Some(p) = &path {
                let write = || -> std::io::Result<()> {
                    if let Some(d) = p.parent() {
                        std::fs::create_dir_all(d)?;
                    }
                    let tmp = p.with_extension(format!("tmp{}", std::process::id()));
                    std::fs::write(&tmp, &img.bytes)?;
                    std::fs::rename(&tmp, p)
                };
                if let Err(e) = write() {
                    tracing::warn!(
                        path = %p.display(),
                        error = %e,
                        "Cannot write the kernel cache; kernels will be compiled again next time."
                    );
                }
            }
            img
        }
    };
    MEMORY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(key, image.clone());
    Ok(image)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A complete NVRTC of version 13.0 that knows sm_75 and sm_80 only:
    /// the calls go through the resolved pointers, the version check refuses
    /// it under a CUDA 12 driver, and an sm_90 device gets PTX for sm_80.
    #[test]
    fn a_fake_nvrtc_answers_through_the_resolved_entry_points() {
        let mut src = String::from(
            "int nvrtcVersion(int* a, int* b) { *a = 13; *b = 0; return 0; }\n\
             int nvrtcGetNumSupportedArchs(int* n) { *n = 2; return 0; }\n\
             int nvrtcGetSupportedArchs(int* v) { v[0] = 75; v[1] = 80; return 0; }\n\
             const char* nvrtcGetErrorString(int r) { return r ? \"NVRTC_ERROR_FAKE\" : \"ok\"; }\n",
        );
        for s in api::NVRTC_SYMBOLS {
            if !src.contains(&format!(" {s}(")) {
                src.push_str(&format!("int {s}(void) {{ return 7; }}\n"));
            }
        }
        let fake = api::tests::load_fake("libnvrtc-fake13", &src);
        let n = api::Nvrtc::load(&fake.path).unwrap();
        let v = n.library_version().unwrap();
        assert_eq!(v, (13, 0));
        assert!(check_versions(v, 12080).is_err());
        assert!(check_versions(v, 13000).is_ok());
        let archs = n.supported_archs().unwrap();
        assert_eq!(archs, [75, 80]);
        assert_eq!(pick_target(90, &archs), Ok(Target::Compute(80)));
        assert_eq!(n.describe(6), "NVRTC_ERROR_FAKE");
    }

    #[test]
    fn targets_and_cache_keys_are_stable() {
        assert_eq!(
            Target::for_device(8, 6).option(),
            "--gpu-architecture=sm_86"
        );
        assert_eq!(
            Target::Compute(80).option(),
            "--gpu-architecture=compute_80"
        );
        assert!(Target::Compute(80).is_ptx() && !Target::Sm(90).is_ptx());
        // FNV-1a of known input (regression: cache keys must not change silently).
        assert_eq!(fnv(&[b"a"]), fnv(&[b"a"]));
        assert_ne!(fnv(&[b"ab", b"c"]), fnv(&[b"a", b"bc"]));
    }

    #[test]
    fn an_nvrtc_newer_than_the_driver_or_older_than_12_is_refused() {
        assert_eq!(check_versions((12, 4), 12040), Ok(()));
        assert_eq!(check_versions((12, 9), 13000), Ok(()));
        assert_eq!(check_versions((13, 0), 13000), Ok(()));
        let e = check_versions((13, 0), 12080).unwrap_err().to_string();
        assert!(
            e.starts_with("NVRTC 13.0 is newer than the NVIDIA driver (CUDA 12.8)"),
            "{e}"
        );
        assert!(e.contains("nvidia-cuda-nvrtc-cu12"), "{e}");
        let e = check_versions((11, 8), 12040).unwrap_err().to_string();
        assert_eq!(e, "NVRTC 11.8 is older than the 12.0 melforge needs");
    }

    #[test]
    fn an_architecture_nvrtc_does_not_know_falls_back_to_ptx_below_it() {
        let known = [75, 80, 86, 89, 90];
        assert_eq!(pick_target(90, &known), Ok(Target::Sm(90)));
        assert_eq!(pick_target(100, &known), Ok(Target::Compute(90)));
        assert_eq!(pick_target(87, &known), Ok(Target::Compute(86)));
        let e = pick_target(70, &known).unwrap_err().to_string();
        assert_eq!(
            e,
            "this NVRTC cannot compile for sm_70 (it supports sm_75, sm_80, sm_86, sm_89, sm_90)"
        );
    }

    #[test]
    fn embedded_sources_match_the_kernels_folder() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".cu"))
            .collect();
        on_disk.sort();
        let mut embedded: Vec<&str> = SOURCES.iter().map(|(n, _)| *n).collect();
        embedded.sort();
        assert_eq!(
            on_disk, embedded,
            "add every kernels/*.cu to nvrtc::SOURCES"
        );
        for (n, s) in SOURCES {
            assert_eq!(std::fs::read_to_string(dir.join(n)).unwrap(), *s);
        }
    }
}
