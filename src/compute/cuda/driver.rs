//! Is there a usable GPU? The probe in front of every CUDA call.
//!
//! [`probe`] answers without ever letting cudarc panic: libcuda is located with
//! an explicit `dlopen` ([`super::libs`]), every driver symbol the backend
//! calls is checked with `dlsym` (cudarc panics on a missing one: an old
//! driver), then `cuInit` and the device count are asked, then libnvrtc and
//! libcufft are located for the driver's generation (CUDA 12: libnvrtc.so.12,
//! libcufft.so.11; CUDA 13: libnvrtc.so.13|12, libcufft.so.12|11; with
//! libnvJitLink preloaded first), every entry point melforge calls in them is
//! resolved ([`super::api`]), NVRTC's major must not exceed the driver's, and
//! NVRTC must know the device's architecture or one below it. The answer is
//! cached for the process. Each failure is
//! a sentence naming what is missing, used verbatim in `compute::select`'s
//! reason ("libcuda.so.1 not found (no NVIDIA driver)", "cuInit failed: …",
//! "no CUDA device", …).

use std::sync::OnceLock;

use cudarc::driver::{result, sys};

use super::cause::Cause;
use super::device::DeviceError;
use super::gpu::Gpu;
use super::{kernels, libs, real};

/// Driver entry points the backend calls (cudarc resolves them lazily and
/// panics on a missing one, so they are checked up front).
pub const SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetAttribute",
    "cuDeviceGetName",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxSetFlags_v2",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxSetCurrent",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuStreamBeginCapture_v2",
    "cuStreamEndCapture",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventDestroy_v2",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemHostRegister_v2",
    "cuMemHostUnregister",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuLaunchKernel",
    "cuGraphInstantiateWithFlags",
    "cuGraphLaunch",
    "cuGraphDestroy",
    "cuGraphExecDestroy",
];

/// Oldest driver API the backend is written against (CUDA 12.0).
pub const MIN_DRIVER: i32 = 12000;

/// The probe in steps: the driver (library, entry points, version), device
/// 0, then the libraries the kernels need (NVRTC, cuFFT) for that device.
fn probe_uncached() -> Result<Gpu, Cause> {
    let version = driver_version()?;
    let gpu = first_device(version)?;
    kernel_libraries(&gpu)?;
    Ok(gpu)
}

/// Loads libcuda, checks its entry points and that cudarc loads the same
/// copy, and returns its CUDA version (e.g. 12040) once it is new enough.
fn driver_version() -> Result<i32, Cause> {
    let found = libs::ensure(&libs::CUDA).map_err(|_| Cause::NoDriver)?;
    let missing: Vec<&str> = SYMBOLS
        .iter()
        .copied()
        .filter(|s| !libs::has_symbol(&found.loaded_as, s))
        .collect();
    if !missing.is_empty() {
        return Err(Cause::DriverLacks {
            loaded_as: found.loaded_as,
            missing: missing.into_boxed_slice(),
        });
    }
    // cudarc loads libcuda by its own list of names: make sure that is the
    // copy whose symbols were just checked (not a stub `libcuda.so`).
    libs::same_as_loader_pick(&found.loaded_as, &cudarc::get_lib_name_candidates("cuda"))?;
    let mut version = 0;
    // SAFETY: libcuda is loaded and exports the symbol (checked above); the
    // out-pointer is valid.
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .map_err(|e| DeviceError::new("cuDriverGetVersion", e))?;
    if version < MIN_DRIVER {
        return Err(Cause::DriverTooOld { version });
    }
    Ok(version)
}

/// `cuInit`, then device 0: its name, compute capability and PCI address.
fn first_device(version: i32) -> Result<Gpu, Cause> {
    result::init().map_err(|e| DeviceError::new("cuInit", e))?;
    let devices =
        result::device::get_count().map_err(|e| DeviceError::new("cuDeviceGetCount", e))?;
    if devices < 1 {
        return Err(Cause::NoDevice);
    }
    let dev = result::device::get(0).map_err(|e| DeviceError::new("cuDeviceGet(0)", e))?;
    let name = result::device::get_name(dev).unwrap_or_else(|_| "CUDA device 0".into());
    let attr = |a| {
        // SAFETY: `dev` is a valid device handle from cuDeviceGet.
        unsafe { result::device::get_attribute(dev, a) }.unwrap_or(0)
    };
    let cc = (
        attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
        attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
    );
    let pci_bus_id = format!(
        "{:04x}:{:02x}:{:02x}.0",
        attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
        attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
        attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
    );
    Ok(Gpu {
        name,
        cc,
        devices,
        driver_version: version,
        pci_bus_id,
    })
}

/// NVRTC and cuFFT for the driver's CUDA major (preloaded, every entry
/// point checked), NVRTC's version against the driver's, and a target
/// NVRTC can compile for `gpu`.
fn kernel_libraries(gpu: &Gpu) -> Result<(), Cause> {
    let version = gpu.driver_version;
    let major = version / 1000;
    let [nvrtc_lib, cufft_lib, jitlink_lib] = libs::for_driver(major);
    if let Err(e) = libs::ensure(jitlink_lib) {
        tracing::debug!(error = %e, "No libnvJitLink to preload before libcufft.");
    }
    let missing = |w: &str| {
        let wheel = if major >= 13 {
            w.to_owned()
        } else {
            format!("{w}-cu12")
        };
        move |error| Cause::MissingLibrary {
            error: Box::new(error),
            wheel,
        }
    };
    libs::ensure(nvrtc_lib).map_err(missing("nvidia-cuda-nvrtc"))?;
    libs::ensure(cufft_lib).map_err(missing("nvidia-cufft"))?;
    // Every NVRTC and cuFFT entry point, from the copies just found.
    let nvrtc = super::api::nvrtc()?;
    super::api::cufft()?;
    let nv = nvrtc.library_version()?;
    super::nvrtc::check_versions(nv, version)?;
    let sm = u32::try_from(gpu.cc.0 * 10 + gpu.cc.1).unwrap_or(0);
    super::nvrtc::pick_target(sm, &nvrtc.supported_archs()?).map_err(|error| {
        Cause::NvrtcTooOld {
            error: Box::new(error),
            nvrtc: nv,
            device: gpu.name.clone(),
        }
    })?;
    Ok(())
}

/// Whether the NVIDIA driver library can be loaded at all: the cheap first
/// step of [`probe`] (milliseconds; cached), which a caller that cannot wait
/// for the whole probe uses to guess the backend.
pub fn driver_present() -> bool {
    libs::ensure(&libs::CUDA).is_ok()
}

/// Why no GPU is usable ([`Cause`]); its sentence, such as "libcuda.so.1 not
/// found (no NVIDIA driver)", is shown to users as the reason the CPU
/// backend runs.
#[derive(Clone, Debug, thiserror::Error)]
#[error(transparent)]
pub struct Unavailable(pub Cause);

/// The usable GPU, or why there is none (cached per process). Beyond the
/// libraries, the probe compiles the kernels (cached) and opens the device
/// once with them, so whatever fails at start-up — a CUBIN the driver
/// refuses, a context that cannot be made — fails here, where `auto` can
/// still choose the CPU.
pub fn probe() -> Result<Gpu, Unavailable> {
    static PROBE: OnceLock<Result<Gpu, Unavailable>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            probe_uncached()
                .and_then(|gpu| {
                    let images = kernels::compile_kernels(&gpu)?.0;
                    let dev =
                        real::CudaDevice::open(gpu.clone(), &images).map_err(Cause::StartUp)?;
                    drop(dev);
                    Ok(gpu)
                })
                .map_err(Unavailable)
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::SYMBOLS;

    /// cudarc `result` wrappers the backend calls → the driver symbol each
    /// resolves (read off cudarc 0.19's `driver/result.rs`).
    const WRAPPERS: &[(&str, &str)] = &[
        ("init", "cuInit"),
        ("device::get", "cuDeviceGet"),
        ("device::get_count", "cuDeviceGetCount"),
        ("device::get_name", "cuDeviceGetName"),
        ("device::get_attribute", "cuDeviceGetAttribute"),
        ("primary_ctx::retain", "cuDevicePrimaryCtxRetain"),
        ("primary_ctx::release", "cuDevicePrimaryCtxRelease_v2"),
        ("ctx::set_current", "cuCtxSetCurrent"),
        ("module::load_data", "cuModuleLoadData"),
        ("module::get_function", "cuModuleGetFunction"),
        ("module::unload", "cuModuleUnload"),
        ("malloc_sync", "cuMemAlloc_v2"),
        ("free_sync", "cuMemFree_v2"),
        ("malloc_host", "cuMemHostAlloc"),
        ("free_host", "cuMemFreeHost"),
        ("stream::create", "cuStreamCreate"),
        ("stream::synchronize", "cuStreamSynchronize"),
        ("stream::destroy", "cuStreamDestroy_v2"),
        ("stream::wait_event", "cuStreamWaitEvent"),
        ("stream::begin_capture", "cuStreamBeginCapture_v2"),
        ("stream::end_capture", "cuStreamEndCapture"),
        ("event::record", "cuEventRecord"),
        ("event::synchronize", "cuEventSynchronize"),
        ("event::destroy", "cuEventDestroy_v2"),
        ("graph::instantiate", "cuGraphInstantiateWithFlags"),
        ("graph::launch", "cuGraphLaunch"),
        ("graph::destroy", "cuGraphDestroy"),
        ("graph::exec_destroy", "cuGraphExecDestroy"),
        ("launch_kernel", "cuLaunchKernel"),
    ];

    /// Regression: `cuStreamSynchronize` (CudaDevice::drop) was missing from
    /// the probe's list, so a driver without it passed the probe and cudarc
    /// panicked at teardown. Every driver call in the sources — direct `sys`
    /// calls and cudarc `result` wrappers — must be probed.
    #[test]
    fn every_driver_call_in_the_sources_is_probed_first() {
        let sources = [include_str!("real.rs"), include_str!("driver.rs")];
        let mut used = Vec::new();
        for src in sources {
            for (i, _) in src.match_indices("sys::cu") {
                let name: String = src[i + 5..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if name.len() > 2 {
                    used.push(name);
                }
            }
            for (i, _) in src.match_indices("result::") {
                let path: String = src[i + 8..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                let lower = path.starts_with(|c: char| c.is_ascii_lowercase());
                if lower && src[i + 8 + path.len()..].starts_with('(') {
                    let sym = WRAPPERS
                        .iter()
                        .find(|(w, _)| *w == path)
                        .unwrap_or_else(|| panic!("result::{path}: add it to WRAPPERS"))
                        .1;
                    used.push(sym.to_string());
                }
            }
        }
        used.sort();
        used.dedup();
        assert!(used.len() > 30, "{used:?}");
        let missing: Vec<&String> = used
            .iter()
            .filter(|u| !SYMBOLS.contains(&u.as_str()))
            .collect();
        assert!(missing.is_empty(), "not probed: {missing:?}");
    }
}
