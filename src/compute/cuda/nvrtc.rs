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
//! Calls into libnvrtc happen only after [`super::libs::ensure`] found it:
//! cudarc (dynamic loading) would panic on a missing library.

use std::collections::HashMap;
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::Mutex;

use cudarc::nvrtc::{result, sys};

use super::libs;

/// The kernel sources compiled into the binary: (file name, text).
pub const SOURCES: &[(&str, &str)] = &[("mel.cu", include_str!("../../../kernels/mel.cu"))];

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
    #[error("{0}")]
    Unavailable(String),
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
    libs::ensure(&libs::NVRTC)?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: libnvrtc is loaded (ensure above), so cudarc's lazy symbol lookup
    // succeeds; both out-pointers are valid for writes.
    let r = unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
    r.result()
        .map_err(|e| Error::Unavailable(format!("nvrtcVersion failed: {e:?}")))?;
    Ok((major, minor))
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
    libs::ensure(&libs::NVRTC)?;
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
    let prog = result::create_program(&csrc, Some(&cname))
        .map_err(|e| fail(format!("{e:?}"), String::new()))?;
    let mut opts: Vec<String> = OPTIONS.iter().map(|s| (*s).to_string()).collect();
    opts.push(target.option());
    // SAFETY: `prog` was just created and is destroyed exactly once below;
    // `csrc`/`cname` outlive it.
    let compiled = unsafe { result::compile_program(prog, &opts) };
    // SAFETY: as above.
    let log = unsafe { result::get_program_log(prog) }
        .map(|l| {
            let bytes: Vec<u8> = l.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        })
        .unwrap_or_default();
    let image = compiled
        .map_err(|e| fail(format!("{e:?}"), log.clone()))
        .and_then(|()| {
            if target.is_ptx() {
                // SAFETY: compiled program, not yet destroyed.
                unsafe { result::get_ptx(prog) }
                    .map(|v| v.iter().map(|&c| c as u8).collect::<Vec<u8>>())
                    .map_err(|e| fail(format!("{e:?}"), log.clone()))
            } else {
                let mut size = 0usize;
                // SAFETY: compiled program; `size` is a valid out-pointer.
                let r = unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) };
                r.result()
                    .map_err(|e| fail(format!("{e:?}"), log.clone()))?;
                let mut buf = vec![0u8; size];
                // SAFETY: `buf` holds exactly the size NVRTC reported.
                let r = unsafe { sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr().cast()) };
                r.result()
                    .map_err(|e| fail(format!("{e:?}"), log.clone()))?;
                Ok(buf)
            }
        });
    // SAFETY: created above, destroyed once; a failure only leaks the program.
    if let Err(e) = unsafe { result::destroy_program(prog) } {
        tracing::warn!(error = ?e, "Could not destroy an NVRTC program; it is leaked.");
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
    fn embedded_sources_match_the_kernels_folder() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".cu"))
            .collect();
        on_disk.sort();
        let embedded: Vec<&str> = SOURCES.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            on_disk, embedded,
            "add every kernels/*.cu to nvrtc::SOURCES"
        );
        for (n, s) in SOURCES {
            assert_eq!(std::fs::read_to_string(dir.join(n)).unwrap(), *s);
        }
    }
}
