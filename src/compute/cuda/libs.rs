//! Finding and preloading the CUDA shared libraries before cudarc touches them.
//!
//! cudarc is built with `dynamic-loading`: each library (libcuda, libnvrtc,
//! libcufft) is `dlopen`ed by bare name on first use, and a missing library or
//! symbol **panics**. This module is the guard in front of that: it probes with
//! an explicit `dlopen` and reports an [`Error`] (whose `Display` is the
//! sentence users see) instead of a panic.
//!
//! A library found outside the loader's search path (an explicit path in an
//! environment variable, `$CUDA_HOME/lib64`, a PyPI `nvidia-*` wheel) is
//! preloaded with `RTLD_NOW | RTLD_GLOBAL` and never closed. glibc matches later
//! `dlopen("libnvrtc.so.12")` calls against the SONAME of objects already loaded,
//! so cudarc's own lookup then finds the preloaded copy. The NVRTC builtins
//! library (`libnvrtc-builtins.so.12.X`) sits next to libnvrtc and is found
//! through libnvrtc's `RUNPATH=$ORIGIN`; it is preloaded too when present, which
//! also covers copies that lack that RUNPATH.
//!
//! Invariants: every handle this module keeps is leaked on purpose (the process
//! never unloads a CUDA library: cudarc holds `'static` function pointers into it).

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A library that this module knows how to find.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lib {
    /// Human name for messages ("libnvrtc").
    pub name: &'static str,
    /// Names the loader is asked for, in order (the SONAMEs first).
    pub sonames: &'static [&'static str],
    /// Environment variable naming the library file explicitly.
    pub env: &'static str,
    /// Sub-folders of `site-packages/nvidia/` holding the PyPI wheels'
    /// `lib/`: CUDA 13 wheels share `cu13/` (`nvidia-cuda-nvrtc`,
    /// `nvidia-cufft`, `nvidia-nvjitlink`), CUDA 12 wheels have one folder
    /// each (`cuda_nvrtc/`, `cufft/`, `nvjitlink/` from the `-cu12` wheels).
    pub wheels: &'static [&'static str],
    /// File-name prefix of companions to preload from the same folder.
    pub companions: &'static [&'static str],
}

/// The CUDA driver (installed with the NVIDIA kernel driver, never from a wheel).
pub const CUDA: Lib = Lib {
    name: "libcuda.so.1",
    sonames: &["libcuda.so.1", "libcuda.so"],
    env: "MELFORGE_CUDA_LIB",
    wheels: &[],
    companions: &[],
};

/// NVRTC for a CUDA 13 driver (toolkit 13 or `pip install nvidia-cuda-nvrtc`;
/// a 12.x NVRTC also works with it).
pub const NVRTC: Lib = Lib {
    name: "libnvrtc",
    sonames: &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"],
    env: "MELFORGE_NVRTC_LIB",
    wheels: &["cu13", "cuda_nvrtc"],
    companions: &["libnvrtc-builtins.so"],
};

/// NVRTC for a CUDA 12 driver: a 13.x NVRTC makes CUBINs it cannot load.
pub const NVRTC_12: Lib = Lib {
    sonames: &["libnvrtc.so.12", "libnvrtc.so"],
    wheels: &["cuda_nvrtc"],
    ..NVRTC
};

/// cuFFT for a CUDA 13 driver (cuFFT 12: toolkit 13 or `pip install
/// nvidia-cufft`; cuFFT 11 from CUDA 12 also works with it).
pub const CUFFT: Lib = Lib {
    name: "libcufft",
    sonames: &["libcufft.so.12", "libcufft.so.11", "libcufft.so"],
    env: "MELFORGE_CUFFT_LIB",
    wheels: &["cu13", "cufft"],
    companions: &[],
};

/// cuFFT for a CUDA 12 driver (cuFFT 11: `pip install nvidia-cufft-cu12`).
pub const CUFFT_12: Lib = Lib {
    sonames: &["libcufft.so.11", "libcufft.so"],
    wheels: &["cufft"],
    ..CUFFT
};

/// nvJitLink, which pip's libcufft may need (cuFFT 11.2's wheel lists it as
/// NEEDED with a RUNPATH into `nvjitlink/lib`; others `dlopen` it): preloaded
/// before cuFFT when present, never required.
pub const NVJITLINK: Lib = Lib {
    name: "libnvJitLink",
    sonames: &["libnvJitLink.so.13", "libnvJitLink.so.12"],
    env: "MELFORGE_NVJITLINK_LIB",
    wheels: &["cu13", "nvjitlink"],
    companions: &[],
};

/// nvJitLink for a CUDA 12 driver.
pub const NVJITLINK_12: Lib = Lib {
    sonames: &["libnvJitLink.so.12"],
    wheels: &["nvjitlink"],
    ..NVJITLINK
};

/// The NVRTC, cuFFT and nvJitLink to look for under a driver of CUDA
/// `driver_major`: the driver's generation first, never a newer one.
pub fn for_driver(driver_major: i32) -> [&'static Lib; 3] {
    if driver_major >= 13 {
        [&NVRTC, &CUFFT, &NVJITLINK]
    } else {
        [&NVRTC_12, &CUFFT_12, &NVJITLINK_12]
    }
}

/// Where a library was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The path or bare name that `dlopen` accepted.
    pub loaded_as: String,
}

/// Why `dlopen` refused one file or name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// The name cannot be passed to `dlopen` at all.
    #[error("{name:?} contains a NUL byte")]
    Nul { name: String },
    /// `dlopen` returned NULL; `message` is `dlerror()`'s text (it names the
    /// file and the reason, e.g. "cannot open shared object file").
    #[error("{message}")]
    Dlopen { message: String },
}

/// Why the search for a library came up empty (the inner part of
/// [`Error::NotFound`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Miss {
    /// The library's environment variable names a file that does not load.
    #[error("{var} = {} cannot be loaded: {source}", .path.display())]
    Explicit {
        var: &'static str,
        path: PathBuf,
        source: OpenError,
    },
    /// The loader refused the first SONAME (and nothing outside its path loaded).
    #[error(transparent)]
    Loader(OpenError),
    /// No SONAME to ask for and no candidate file.
    #[error("not found")]
    Nowhere,
}

/// Why a CUDA library is not usable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// [`ensure`] searched everywhere it knows; the sentence lists where.
    #[error(
        "{} not found ({why}; searched {} , the loader path, $CUDA_HOME/lib64, \
         /usr/local/cuda/lib64{})",
        .lib.name,
        .lib.env,
        wheel_hint(.lib.wheels)
    )]
    NotFound {
        lib: Lib,
        /// Boxed: `Lib` and `Miss` together would make every error type that
        /// carries this one (up to `pipeline::Error`) too large to return.
        #[source]
        why: Box<Miss>,
    },
    /// [`ensure_from`]: the explicit file does not load.
    #[error("{} cannot be loaded: {source}", .path.display())]
    Load { path: PathBuf, source: OpenError },
}

/// Why a CUDA library that was found is still not usable, or why a check
/// on it failed: what the loaders (`api`), NVRTC's version and target checks
/// (`nvrtc`) and [`same_as_loader_pick`] return. `Display` is the sentence
/// users read as the reason the CPU backend runs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The library was not found, or does not load.
    #[error(transparent)]
    Library(#[from] Error),
    /// The library lacks entry points melforge calls.
    #[error("{what} ({loaded_as}) is too old or incomplete: it lacks {}", .missing.join(", "))]
    Incomplete {
        what: &'static str,
        loaded_as: String,
        missing: Vec<&'static str>,
    },
    /// A call into the library failed (`call` names it, `reason` is the
    /// library's own error string).
    #[error("{call} failed: {reason}")]
    Call { call: &'static str, reason: String },
    /// NVRTC's major is newer than the driver's CUDA: its CUBINs would not load.
    #[error(
        "NVRTC {}.{} is newer than the NVIDIA driver (CUDA {driver_major}.{driver_minor}): the \
         kernels it compiles would not load; install the CUDA {driver_major} NVRTC (e.g. `pip \
         install nvidia-cuda-nvrtc-cu{driver_major}`) or a newer driver",
        .nvrtc.0,
        .nvrtc.1
    )]
    NvrtcNewerThanDriver {
        nvrtc: (i32, i32),
        driver_major: i32,
        driver_minor: i32,
    },
    /// NVRTC older than 12.0.
    #[error("NVRTC {}.{} is older than the 12.0 melforge needs", .0.0, .0.1)]
    NvrtcTooOld((i32, i32)),
    /// NVRTC knows no architecture at or below the device's.
    #[error(
        "this NVRTC cannot compile for sm_{sm} (it supports {})",
        .supported.iter().map(|a| format!("sm_{a}")).collect::<Vec<_>>().join(", ")
    )]
    NoTarget { sm: u32, supported: Vec<u32> },
    /// [`same_as_loader_pick`]: the probed copy is gone (internal error).
    #[error("{probed} is no longer loaded (internal error)")]
    NotLoaded { probed: String },
    /// [`same_as_loader_pick`]: the bindings would load another copy.
    #[error(
        "the CUDA bindings would load {other}, a different copy from the probed {probed}; \
         remove the other copy from the loader path or point MELFORGE_CUDA_LIB at it"
    )]
    OtherCopy { other: String, probed: String },
    /// [`same_as_loader_pick`]: the bindings would find none of their names.
    #[error(
        "the CUDA bindings would find none of {} although {probed} is loaded",
        .candidates.join(", ")
    )]
    NoCandidate {
        candidates: Vec<String>,
        probed: String,
    },
}

/// The pip wheel folders searched, for [`Error::NotFound`].
fn wheel_hint(wheels: &[&str]) -> String {
    if wheels.is_empty() {
        String::new()
    } else {
        let dirs: Vec<String> = wheels.iter().map(|w| format!("nvidia/{w}/lib")).collect();
        format!(" and pip's {}", dirs.join(", "))
    }
}

/// Results already established, so each library is probed once per process.
static FOUND: Mutex<Vec<(&'static str, Result<Found, Error>)>> = Mutex::new(Vec::new());

/// The last `dlerror()` text, or a placeholder.
fn dlerror_text() -> String {
    // SAFETY: dlerror returns NULL or a pointer to a NUL-terminated string that
    // stays valid until the next dl* call on this thread; we copy it at once.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-null, NUL-terminated (see above).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// `dlopen(name, RTLD_NOW | RTLD_GLOBAL)`, keeping the handle forever.
fn open_global(name: &str) -> Result<(), OpenError> {
    let c = CString::new(name).map_err(|_| OpenError::Nul {
        name: name.to_owned(),
    })?;
    // SAFETY: `c` is a valid C string. Loading a library runs its initialisers,
    // which is the point; the CUDA libraries' initialisers take no arguments
    // from us. The handle is intentionally never closed (module invariant).
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if h.is_null() {
        Err(OpenError::Dlopen {
            message: dlerror_text(),
        })
    } else {
        Ok(())
    }
}

/// Whether `symbol` resolves in the (already loaded) library `soname`.
pub fn has_symbol(soname: &str, symbol: &str) -> bool {
    let (Ok(lib), Ok(sym)) = (CString::new(soname), CString::new(symbol)) else {
        return false;
    };
    // SAFETY: RTLD_NOLOAD only returns a handle to an object already loaded
    // (bumping its reference count, dropped again by dlclose below).
    let h = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if h.is_null() {
        return false;
    }
    // SAFETY: `h` is a live handle and `sym` a valid C string.
    let p = unsafe { libc::dlsym(h, sym.as_ptr()) };
    // SAFETY: `h` came from dlopen above; closing drops only our extra reference.
    let _ = unsafe { libc::dlclose(h) };
    !p.is_null()
}

/// The address of `symbol` in the (already loaded) library `loaded_as`
/// (a SONAME or the path it was loaded from), or None.
pub fn symbol(loaded_as: &str, symbol: &str) -> Option<std::ptr::NonNull<std::ffi::c_void>> {
    let (Ok(lib), Ok(sym)) = (CString::new(loaded_as), CString::new(symbol)) else {
        return None;
    };
    // SAFETY: RTLD_NOLOAD only returns a handle to an object already loaded.
    // The handle is not closed: the library stays loaded for the process
    // (module invariant), so the address stays valid.
    let h = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if h.is_null() {
        return None;
    }
    // SAFETY: `h` is a live handle and `sym` a valid C string.
    std::ptr::NonNull::new(unsafe { libc::dlsym(h, sym.as_ptr()) })
}

/// The handle of the loaded object `loaded_as` (no new load).
fn loaded_handle(loaded_as: &str) -> Option<usize> {
    let c = CString::new(loaded_as).ok()?;
    // SAFETY: RTLD_NOLOAD returns an already loaded object or NULL; the extra
    // reference is kept (libraries are never unloaded here).
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    (!h.is_null()).then_some(h as usize)
}

/// Checks that a loader walking `candidates` in order (as cudarc's dynamic
/// loading does: `dlopen(name, RTLD_LAZY | RTLD_LOCAL)`, first success wins)
/// gets the object the probe loaded as `probed` — not another copy found
/// earlier on the search path (a stub `libcuda.so`, an older toolkit). The
/// walk loads what cudarc would load anyway. Err: a sentence naming both.
pub fn same_as_loader_pick(probed: &str, candidates: &[String]) -> Result<(), LoadError> {
    let want = loaded_handle(probed).ok_or_else(|| LoadError::NotLoaded {
        probed: probed.to_owned(),
    })?;
    for c in candidates {
        let Ok(name) = CString::new(c.as_str()) else {
            continue;
        };
        // SAFETY: a valid C string; loading runs the library's initialisers,
        // as cudarc's own load of the same name would.
        let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
        if h.is_null() {
            continue;
        }
        return if h as usize == want {
            Ok(())
        } else {
            Err(LoadError::OtherCopy {
                other: c.clone(),
                probed: probed.to_owned(),
            })
        };
    }
    Err(LoadError::NoCandidate {
        candidates: candidates.to_vec(),
        probed: probed.to_owned(),
    })
}

/// `site-packages/nvidia/<wheel>/lib` folders of the Python installations we
/// can see without running Python: `$MELFORGE_PYTHON_SITE`, the
/// site-packages this binary was installed into (the pip wheel puts it in
/// `site-packages/melforge.scripts/`, and a launcher in the environment's
/// `bin/`, so an unactivated venv's CUDA wheels are found too), then
/// `sys.path`-like guesses under the usual prefixes.
fn wheel_dirs(wheel: &str) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Some(s) = std::env::var_os("MELFORGE_PYTHON_SITE") {
        roots.extend(std::env::split_paths(&s));
    }
    let mut prefixes: Vec<PathBuf> = ["/usr/lib", "/usr/local/lib", "/opt/conda/lib"]
        .iter()
        .map(PathBuf::from)
        .collect();
    if let Ok(exe) = std::env::current_exe() {
        let site = exe.ancestors().find(|a| {
            a.file_name()
                .is_some_and(|n| n == "site-packages" || n == "dist-packages")
        });
        roots.extend(site.map(Path::to_path_buf));
        // <env>/bin/melforge → <env>/lib/python3.*/site-packages
        if let Some(env) = exe.parent().and_then(Path::parent) {
            prefixes.push(env.join("lib"));
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        prefixes.push(Path::new(&home).join(".local/lib"));
    }
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        prefixes.push(Path::new(&venv).join("lib"));
    }
    for p in prefixes {
        let Ok(rd) = std::fs::read_dir(&p) else {
            continue;
        };
        for e in rd.flatten() {
            let n = e.file_name();
            if n.to_string_lossy().starts_with("python3") {
                roots.push(e.path().join("site-packages"));
                roots.push(e.path().join("dist-packages"));
            }
        }
    }
    roots
        .into_iter()
        .map(|r| r.join("nvidia").join(wheel).join("lib"))
        .filter(|d| d.is_dir())
        .collect()
}

/// Candidate files for `lib`, most explicit first.
fn candidates(lib: &Lib) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(h) = std::env::var_os(var) {
            dirs.push(Path::new(&h).join("lib64"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    for w in lib.wheels {
        dirs.extend(wheel_dirs(w));
    }
    let mut out = Vec::new();
    for d in dirs {
        for s in lib.sonames {
            let p = d.join(s);
            if p.is_file() {
                out.push(p);
            }
        }
    }
    out
}

/// Preloads the companions of `lib` that sit in `dir`.
fn preload_companions(lib: &Lib, dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if lib.companions.iter().any(|c| n.starts_with(c))
            && !n.contains(".alt.")
            && let Err(err) = open_global(&e.path().to_string_lossy())
        {
            tracing::debug!(library = %n, error = %err, "Could not preload a CUDA library.");
        }
    }
}

fn locate(lib: &Lib) -> Result<Found, Miss> {
    // 1. An explicit file.
    if let Some(p) = std::env::var_os(lib.env) {
        let p = PathBuf::from(p);
        if let Err(source) = open_global(&p.to_string_lossy()) {
            return Err(Miss::Explicit {
                var: lib.env,
                path: p,
                source,
            });
        }
        if let Some(dir) = p.parent() {
            preload_companions(lib, dir);
        }
        return Ok(Found {
            loaded_as: p.display().to_string(),
        });
    }
    // 2. The loader's own search (LD_LIBRARY_PATH, ld.so.cache).
    let mut first_err = None;
    for s in lib.sonames {
        match open_global(s) {
            Ok(()) => {
                return Ok(Found {
                    loaded_as: (*s).to_string(),
                });
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    // 3. Well-known folders outside the search path.
    for p in candidates(lib) {
        if open_global(&p.to_string_lossy()).is_ok() {
            if let Some(dir) = p.parent() {
                preload_companions(lib, dir);
            }
            return Ok(Found {
                loaded_as: p.display().to_string(),
            });
        }
    }
    Err(first_err.map_or(Miss::Nowhere, Miss::Loader))
}

/// Finds and preloads `lib` (once per process); the error's sentence names
/// what was searched.
pub fn ensure(lib: &Lib) -> Result<Found, Error> {
    let mut found = FOUND.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, r)) = found.iter().find(|(n, _)| *n == lib.name) {
        return r.clone();
    }
    let r = locate(lib).map_err(|why| Error::NotFound {
        lib: *lib,
        why: Box::new(why),
    });
    found.push((lib.name, r.clone()));
    r
}

/// Loads `lib` from the explicit file `path` (and its companions beside it)
/// and records it, so later [`ensure`] calls — and cudarc — use this copy.
/// For tests and tools that know where the library is (e.g. a pip wheel).
pub fn ensure_from(lib: &Lib, path: &Path) -> Result<Found, Error> {
    let mut found = FOUND.lock().unwrap_or_else(|e| e.into_inner());
    // An earlier success stands (cudarc may already use that copy); an
    // earlier failure is replaced by this attempt.
    if let Some((_, Ok(f))) = found.iter().find(|(n, _)| *n == lib.name) {
        return Ok(f.clone());
    }
    found.retain(|(n, _)| *n != lib.name);
    let r = open_global(&path.to_string_lossy())
        .map(|()| {
            if let Some(dir) = path.parent() {
                preload_companions(lib, dir);
            }
            Found {
                loaded_as: path.display().to_string(),
            }
        })
        .map_err(|source| Error::Load {
            path: path.to_owned(),
            source,
        });
    found.push((lib.name, r.clone()));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_an_error_not_a_panic() {
        const NOPE: Lib = Lib {
            name: "libmelforge-does-not-exist",
            sonames: &["libmelforge-does-not-exist.so.1"],
            env: "MELFORGE_TEST_NO_SUCH_LIB",
            wheels: &["melforge_no_such_wheel"],
            companions: &[],
        };
        let e = ensure(&NOPE).unwrap_err();
        assert!(
            matches!(
                &e,
                Error::NotFound { lib: NOPE, why }
                    if matches!(**why, Miss::Loader(OpenError::Dlopen { .. }))
            ),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with("libmelforge-does-not-exist not found ("),
            "{e}"
        );
        // Cached: the same answer without searching again.
        assert_eq!(ensure(&NOPE).unwrap_err(), e);
    }

    #[test]
    fn not_found_names_every_place_searched() {
        let dl = |m: &str| OpenError::Dlopen { message: m.into() };
        let e = Error::NotFound {
            lib: NVRTC,
            why: Box::new(Miss::Loader(dl(
                "libnvrtc.so.12: cannot open shared object file",
            ))),
        };
        assert_eq!(
            e.to_string(),
            "libnvrtc not found (libnvrtc.so.12: cannot open shared object file; searched \
             MELFORGE_NVRTC_LIB , the loader path, $CUDA_HOME/lib64, /usr/local/cuda/lib64 \
             and pip's nvidia/cu13/lib, nvidia/cuda_nvrtc/lib)"
        );
        let e = Error::NotFound {
            lib: CUDA,
            why: Box::new(Miss::Explicit {
                var: "MELFORGE_CUDA_LIB",
                path: "/x/libcuda.so.1".into(),
                source: dl("/x/libcuda.so.1: invalid ELF header"),
            }),
        };
        assert_eq!(
            e.to_string(),
            "libcuda.so.1 not found (MELFORGE_CUDA_LIB = /x/libcuda.so.1 cannot be loaded: \
             /x/libcuda.so.1: invalid ELF header; searched MELFORGE_CUDA_LIB , the loader path, \
             $CUDA_HOME/lib64, /usr/local/cuda/lib64)"
        );
    }

    #[test]
    fn an_explicit_file_that_does_not_load_is_a_load_error() {
        const NOPE_FROM: Lib = Lib {
            name: "libmelforge-ensure-from-test",
            sonames: &[],
            env: "MELFORGE_TEST_NO_SUCH_LIB",
            wheels: &[],
            companions: &[],
        };
        let path = Path::new("/nonexistent/libmelforge-ensure-from-test.so");
        let e = ensure_from(&NOPE_FROM, path).unwrap_err();
        let Error::Load { path: p, source } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(p, path);
        assert!(matches!(source, OpenError::Dlopen { .. }), "{source:?}");
        assert!(
            e.to_string().starts_with(
                "/nonexistent/libmelforge-ensure-from-test.so cannot be loaded: /nonexistent/"
            ),
            "{e}"
        );
        assert_eq!(
            open_global("a\0b").unwrap_err().to_string(),
            r#""a\0b" contains a NUL byte"#
        );
    }

    #[test]
    fn the_loader_pick_is_checked_against_the_probed_copy() {
        assert!(symbol("libc.so.6", "malloc").is_some());
        assert!(symbol("libc.so.6", "melforge_no_such_symbol").is_none());
        assert_eq!(
            same_as_loader_pick(
                "libc.so.6",
                &["libmelforge-nope.so".into(), "libc.so.6".into()]
            ),
            Ok(())
        );
        let e = same_as_loader_pick("libc.so.6", &["libm.so.6".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("the CUDA bindings would load libm.so.6, a different copy"),
            "{e}"
        );
        let e = same_as_loader_pick("libc.so.6", &["libmelforge-nope.so".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("would find none of libmelforge-nope.so"), "{e}");
    }

    #[test]
    fn has_symbol_finds_libc_symbols_only_when_loaded() {
        assert!(has_symbol("libc.so.6", "malloc"));
        assert!(!has_symbol("libc.so.6", "melforge_no_such_symbol"));
        assert!(!has_symbol("libmelforge-not-loaded.so", "malloc"));
    }
}
