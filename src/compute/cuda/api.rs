//! NVRTC and cuFFT entry points, resolved from the exact library the probe
//! loaded — every one of them, before the first call.
//!
//! cudarc's dynamic loading looks a library up by a fixed list of names
//! (`libnvrtc.so`, `.so.12`, `.so.11`, … — no `.so.13`), may pick another
//! copy than the one found here, and panics ("Missing symbol") on the first
//! call of an entry point an old library lacks. So these two libraries are
//! not reached through cudarc: [`Nvrtc::load`] and [`Cufft::load`] take the
//! library [`super::libs`] loaded (a SONAME or a path), resolve every symbol
//! listed in [`NVRTC_SYMBOLS`] / [`CUFFT_SYMBOLS`] with `dlsym`, and answer a
//! sentence naming what is missing instead of a panic.
//!
//! Invariants: the libraries are never unloaded (see `libs`), so the function
//! pointers stay valid for the process; every pointer is transmuted to the
//! C signature of the NVIDIA headers (`nvrtc.h`, `cufft.h`).

use std::ffi::{c_char, c_int, c_void};

use super::libs::{self, LoadError};

/// NVRTC entry points melforge calls.
pub const NVRTC_SYMBOLS: &[&str] = &[
    "nvrtcVersion",
    "nvrtcGetErrorString",
    "nvrtcCreateProgram",
    "nvrtcCompileProgram",
    "nvrtcDestroyProgram",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcGetPTXSize",
    "nvrtcGetPTX",
    "nvrtcGetCUBINSize",
    "nvrtcGetCUBIN",
    "nvrtcGetNumSupportedArchs",
    "nvrtcGetSupportedArchs",
];

/// cuFFT entry points melforge calls.
pub const CUFFT_SYMBOLS: &[&str] = &[
    "cufftGetVersion",
    "cufftPlan1d",
    "cufftSetStream",
    "cufftExecD2Z",
    "cufftDestroy",
    "cufftExecR2C",
];

/// An NVRTC program handle.
pub type Program = *mut c_void;

/// The NVRTC functions (signatures of `nvrtc.h`; results are `nvrtcResult`).
#[derive(Clone, Copy, Debug)]
pub struct Nvrtc {
    pub version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int,
    pub error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    pub create_program: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> c_int,
    pub compile_program: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> c_int,
    pub destroy_program: unsafe extern "C" fn(*mut Program) -> c_int,
    pub log_size: unsafe extern "C" fn(Program, *mut usize) -> c_int,
    pub log: unsafe extern "C" fn(Program, *mut c_char) -> c_int,
    pub ptx_size: unsafe extern "C" fn(Program, *mut usize) -> c_int,
    pub ptx: unsafe extern "C" fn(Program, *mut c_char) -> c_int,
    pub cubin_size: unsafe extern "C" fn(Program, *mut usize) -> c_int,
    pub cubin: unsafe extern "C" fn(Program, *mut c_char) -> c_int,
    pub num_archs: unsafe extern "C" fn(*mut c_int) -> c_int,
    pub archs: unsafe extern "C" fn(*mut c_int) -> c_int,
}

/// A cuFFT plan handle (`cufftHandle`).
pub type Plan = c_int;
/// `CUFFT_D2Z`.
pub const CUFFT_D2Z: c_int = 0x6a;
/// `CUFFT_R2C`.
pub const CUFFT_R2C: c_int = 0x2a;

/// The cuFFT functions (signatures of `cufft.h`; results are `cufftResult`).
#[derive(Clone, Copy, Debug)]
pub struct Cufft {
    pub get_version: unsafe extern "C" fn(*mut c_int) -> c_int,
    pub plan_1d: unsafe extern "C" fn(*mut Plan, c_int, c_int, c_int) -> c_int,
    pub set_stream: unsafe extern "C" fn(Plan, *mut c_void) -> c_int,
    pub exec_d2z: unsafe extern "C" fn(Plan, *mut f64, *mut f64) -> c_int,
    pub destroy: unsafe extern "C" fn(Plan) -> c_int,
    /// `cufftExecR2C(plan, cufftReal*, cufftComplex*)`.
    pub exec_r2c: unsafe extern "C" fn(Plan, *mut f32, *mut f32) -> c_int,
}

/// Resolves `names` in `loaded_as`; Err names every missing one.
fn resolve(
    what: &'static str,
    loaded_as: &str,
    names: &[&'static str],
) -> Result<Vec<*mut c_void>, LoadError> {
    let mut found = Vec::with_capacity(names.len());
    let mut missing = Vec::new();
    for n in names {
        match libs::symbol(loaded_as, n) {
            Some(p) => found.push(p.as_ptr()),
            None => missing.push(*n),
        }
    }
    if missing.is_empty() {
        Ok(found)
    } else {
        Err(LoadError::Incomplete {
            what,
            loaded_as: loaded_as.to_owned(),
            missing,
        })
    }
}

/// Reinterprets a resolved symbol as the function type `F`.
///
/// # Safety
/// `p` must be the address of a function whose C signature is `F`.
unsafe fn as_fn<F: Copy>(p: *mut c_void) -> F {
    debug_assert_eq!(size_of::<F>(), size_of::<*mut c_void>());
    // SAFETY: function pointers and data pointers have the same size and
    // representation on the platforms CUDA supports; the caller guarantees
    // the signature.
    unsafe { std::mem::transmute_copy(&p) }
}

impl Nvrtc {
    /// Every NVRTC entry point from the library loaded as `loaded_as`.
    pub fn load(loaded_as: &str) -> Result<Nvrtc, LoadError> {
        let p = resolve("libnvrtc", loaded_as, NVRTC_SYMBOLS)?;
        // SAFETY: each pointer is the symbol of the same index in
        // NVRTC_SYMBOLS, whose nvrtc.h signature is the field's type.
        unsafe {
            Ok(Nvrtc {
                version: as_fn(p[0]),
                error_string: as_fn(p[1]),
                create_program: as_fn(p[2]),
                compile_program: as_fn(p[3]),
                destroy_program: as_fn(p[4]),
                log_size: as_fn(p[5]),
                log: as_fn(p[6]),
                ptx_size: as_fn(p[7]),
                ptx: as_fn(p[8]),
                cubin_size: as_fn(p[9]),
                cubin: as_fn(p[10]),
                num_archs: as_fn(p[11]),
                archs: as_fn(p[12]),
            })
        }
    }

    /// `nvrtcGetErrorString` of `code`, e.g. "NVRTC_ERROR_INVALID_OPTION".
    pub fn describe(&self, code: c_int) -> String {
        // SAFETY: returns a static NUL-terminated string (or NULL).
        let p = unsafe { (self.error_string)(code) };
        if p.is_null() {
            format!("nvrtcResult {code}")
        } else {
            // SAFETY: non-null static C string.
            unsafe { std::ffi::CStr::from_ptr(p) }
                .to_string_lossy()
                .into_owned()
        }
    }

    /// (major, minor) of the library.
    pub fn library_version(&self) -> Result<(i32, i32), LoadError> {
        let (mut a, mut b) = (0, 0);
        // SAFETY: valid out-pointers.
        match unsafe { (self.version)(&mut a, &mut b) } {
            0 => Ok((a, b)),
            r => Err(LoadError::Call {
                call: "nvrtcVersion",
                reason: self.describe(r),
            }),
        }
    }

    /// The real architectures (`sm_XY` as XY) this NVRTC can compile for.
    pub fn supported_archs(&self) -> Result<Vec<u32>, LoadError> {
        let mut n = 0;
        // SAFETY: valid out-pointer.
        let r = unsafe { (self.num_archs)(&mut n) };
        if r != 0 {
            return Err(LoadError::Call {
                call: "nvrtcGetNumSupportedArchs",
                reason: self.describe(r),
            });
        }
        let mut v = vec![0 as c_int; usize::try_from(n).unwrap_or(0)];
        // SAFETY: `v` has room for the `n` entries NVRTC reported.
        let r = unsafe { (self.archs)(v.as_mut_ptr()) };
        if r != 0 {
            return Err(LoadError::Call {
                call: "nvrtcGetSupportedArchs",
                reason: self.describe(r),
            });
        }
        Ok(v.into_iter()
            .filter_map(|a| u32::try_from(a).ok())
            .collect())
    }
}

impl Cufft {
    /// Every cuFFT entry point from the library loaded as `loaded_as`.
    pub fn load(loaded_as: &str) -> Result<Cufft, LoadError> {
        let p = resolve("libcufft", loaded_as, CUFFT_SYMBOLS)?;
        // SAFETY: each pointer is the symbol of the same index in
        // CUFFT_SYMBOLS, whose cufft.h signature is the field's type.
        unsafe {
            Ok(Cufft {
                get_version: as_fn(p[0]),
                plan_1d: as_fn(p[1]),
                set_stream: as_fn(p[2]),
                exec_d2z: as_fn(p[3]),
                destroy: as_fn(p[4]),
                exec_r2c: as_fn(p[5]),
            })
        }
    }
}

/// The NVRTC functions of the libnvrtc [`libs::ensure`] finds (the probe
/// asks first, for the driver's generation; the answer is cached).
pub fn nvrtc() -> Result<Nvrtc, LoadError> {
    static FNS: std::sync::OnceLock<Result<Nvrtc, LoadError>> = std::sync::OnceLock::new();
    FNS.get_or_init(|| {
        let found = libs::ensure(&libs::NVRTC)?;
        Nvrtc::load(&found.loaded_as)
    })
    .clone()
}

/// The cuFFT functions of the libcufft [`libs::ensure`] finds (cached).
pub fn cufft() -> Result<Cufft, LoadError> {
    static FNS: std::sync::OnceLock<Result<Cufft, LoadError>> = std::sync::OnceLock::new();
    FNS.get_or_init(|| {
        // nvJitLink first, when present: some pip cuFFT builds need it.
        if let Err(e) = libs::ensure(&libs::NVJITLINK) {
            tracing::debug!(error = %e, "No libnvJitLink to preload.");
        }
        let found = libs::ensure(&libs::CUFFT)?;
        Cufft::load(&found.loaded_as)
    })
    .clone()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A fake library built for one test: its path as loaded, and the
    /// temporary folder holding it (removed when the test drops it).
    pub(in crate::compute::cuda) struct Fake {
        pub path: String,
        _dir: tempfile::TempDir,
    }

    /// Builds shared object `name` from C source `src` with the system `cc`
    /// and loads it as library `name` (the NVRTC test in `nvrtc` uses it too).
    pub(in crate::compute::cuda) fn load_fake(name: &'static str, src: &str) -> Fake {
        let dir = tempfile::Builder::new()
            .prefix(&format!("melforge-fake-{name}-"))
            .tempdir()
            .unwrap();
        let c = dir.path().join(format!("{name}.c"));
        let so = dir.path().join(format!("{name}.so"));
        std::fs::write(&c, src).unwrap();
        let st = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&so)
            .arg(&c)
            .status()
            .expect("cc (a C compiler) is needed for this test");
        assert!(st.success());
        let lib = libs::Lib {
            name,
            sonames: &[],
            env: "MELFORGE_TEST_NO_SUCH_LIB",
            wheels: &[],
            companions: &[],
        };
        let path = libs::ensure_from(&lib, &so).unwrap().loaded_as;
        Fake { path, _dir: dir }
    }

    /// An NVRTC without the CUBIN entry points (before 11.1) used to pass the
    /// probe and then panic inside cudarc ("Missing symbol") after `auto`
    /// had chosen CUDA; now loading it fails with the missing names.
    #[test]
    fn a_library_missing_an_entry_point_is_refused_with_its_name_not_a_panic() {
        let mut src = String::new();
        for s in NVRTC_SYMBOLS {
            if !s.starts_with("nvrtcGetCUBIN") {
                src.push_str(&format!("int {s}(void) {{ return 0; }}\n"));
            }
        }
        let fake = load_fake("libnvrtc-old", &src);
        let path = &fake.path;
        let e = Nvrtc::load(path).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "libnvrtc ({path}) is too old or incomplete: it lacks nvrtcGetCUBINSize, \
                 nvrtcGetCUBIN"
            )
        );
        let e = Cufft::load(path).unwrap_err().to_string();
        assert!(e.contains("it lacks cufftGetVersion, cufftPlan1d"), "{e}");
    }
}
