//! The compute stage: loaded file bytes in, the recipe's rows (or typed
//! rejections) out.
//!
//! [`cpu`]: W worker threads, each with its own scratch, sharing the run's
//! one recipe (`Wiring::recipe`); [`cuda`]: one thread driving an NVIDIA
//! GPU (batches, CUDA graphs). [`select`] resolves `compute.backend` into a
//! [`Choice`] that says what runs and why; [`ComputeStage::start`] starts it
//! on the [`Wiring`] every backend shares. [`outcome`] holds what flows out:
//! [`Outcome`] and [`Reject`].

pub mod cpu;
pub mod cuda;
pub mod long_error;
pub mod outcome;
pub mod probe;

use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

pub use outcome::{Outcome, Reject, RejectKind, Rejection};
pub use probe::Probe;

use crate::config::{Backend, ComputeConfig};
use crate::frames::{FrameRecipe, RecipePlan};
use crate::reader::Loaded;
use crate::reader::arena::Arena;
use crate::runtime::ring::Ring;
use crate::runtime::telemetry::Telemetry;

/// Why no backend could be chosen, or the chosen one could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "compute.backend = \"cuda\" was requested, but no CUDA GPU is usable: {0}; use \"cpu\" \
         or \"auto\""
    )]
    CudaUnavailable(cuda::Cause),
    #[error(transparent)]
    Cuda(#[from] cuda::Error),
    #[error("cannot start the compute workers: {0}")]
    Spawn(std::io::Error),
    #[error("a compute thread panicked")]
    Panicked,
    #[error(
        "compute.backend = \"cuda\" was requested, but features.recipe = \"{recipe}\" cannot \
         run on the CUDA kernels: {why}; use \"cpu\" or \"auto\""
    )]
    NoKernels {
        recipe: String,
        why: cuda::frames_exec::Unsupported,
    },
}

/// What runs the compute stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Cpu,
    /// The GPU the probe found.
    Gpu(cuda::Gpu),
    /// The CUDA stage over the host double and host kernels (test harness:
    /// `MELFORGE_CUDA_HOST_DOUBLE=1` in a build with the `host-kernels` feature).
    HostDouble,
}

/// The backend actually used, with the reason for the choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    pub backend: Backend,
    pub reason: String,
    pub target: Target,
}

impl Choice {
    /// The CPU backend, for `reason` (e.g. the GPU failed under `auto`).
    pub fn cpu(reason: String) -> Choice {
        Choice {
            backend: Backend::Cpu,
            reason,
            target: Target::Cpu,
        }
    }

    /// "cpu" or "cuda".
    pub fn name(&self) -> &'static str {
        match self.backend {
            Backend::Cuda => "cuda",
            _ => "cpu",
        }
    }

    /// The GPU's PCI address, to place threads near it.
    pub fn gpu_pci_bus_id(&self) -> Option<&str> {
        match &self.target {
            Target::Gpu(g) => Some(&g.pci_bus_id),
            _ => None,
        }
    }
}

/// The environment switch of the test harness (see [`Target::HostDouble`]).
pub const HOST_DOUBLE_ENV: &str = "MELFORGE_CUDA_HOST_DOUBLE";

/// With [`HOST_DOUBLE_ENV`]: a path; once that file exists the host double
/// fails every host-to-device copy (a GPU dying mid-run, for serve's tests).
pub const HOST_DOUBLE_FAIL_ENV: &str = "MELFORGE_CUDA_HOST_DOUBLE_FAIL_ONCE";

/// Resolves the configured backend. `auto` and `cuda` run the CUDA probe
/// (`cuda::probe`, cached: libcuda loads, the driver is new enough, cuInit
/// succeeds, ≥ 1 device, libnvrtc and libcufft load); it never panics.
pub fn select(requested: Backend) -> Result<Choice, Error> {
    if requested != Backend::Cpu && host_double_requested() {
        return Ok(Choice {
            backend: Backend::Cuda,
            reason: format!(
                "{HOST_DOUBLE_ENV}=1: the CUDA stage runs over the host double and host \
                 kernels (test harness)"
            ),
            target: Target::HostDouble,
        });
    }
    select_with(requested, cuda::probe)
}

/// [`select`] with the probe injected (tests).
/// Whether the test harness asks for the host double (a build with
/// `host-kernels` and [`HOST_DOUBLE_ENV`]` = 1`).
/// Whether a run asked for `requested` may compute on a GPU, so that
/// placing threads near it is worth hwloc's PCI discovery (in the
/// background, `runtime::pin::discover_in_background`).
pub fn may_use_gpu(requested: Backend) -> bool {
    requested != Backend::Cpu
}

pub fn host_double_requested() -> bool {
    cfg!(feature = "host-kernels") && std::env::var_os(HOST_DOUBLE_ENV).is_some_and(|v| v == "1")
}

pub fn select_with(
    requested: Backend,
    probe: impl FnOnce() -> Result<cuda::Gpu, cuda::Unavailable>,
) -> Result<Choice, Error> {
    match requested {
        Backend::Cpu => Ok(Choice::cpu(
            "compute.backend = \"cpu\" was requested".into(),
        )),
        Backend::Auto => Ok(match probe() {
            Ok(gpu) => Choice {
                backend: Backend::Cuda,
                reason: format!("auto: found {gpu}"),
                target: Target::Gpu(gpu),
            },
            Err(why) => Choice::cpu(format!("auto: {why}, so the CPU backend is used")),
        }),
        Backend::Cuda => match probe() {
            Ok(gpu) => Ok(Choice {
                backend: Backend::Cuda,
                reason: format!("compute.backend = \"cuda\" was requested; found {gpu}"),
                target: Target::Gpu(gpu),
            }),
            Err(why) => Err(Error::CudaUnavailable(why.0)),
        },
    }
}

/// The choice for `recipe`. The CUDA kernels compute librosa, Kaldi
/// fbank/MFCC and Whisper, but not every option (dither draws noise on the
/// CPU): such a recipe runs on the CPU under `auto` (the reason says why)
/// and fails clearly under `cuda`. `host_decode`: every input is decoded or
/// resampled on the host (compressed files, `input.resample`), which `auto`
/// weighs ([`cpu_outruns_gpu_from`]).
pub fn for_recipe(
    choice: Choice,
    requested: Backend,
    recipe: &dyn FrameRecipe,
    host_decode: bool,
) -> Result<Choice, Error> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if choice.target == Target::Cpu {
        return Ok(choice);
    }
    let name = recipe.layout().recipe().to_string();
    let host = (cores, host_decode);
    let why = match recipe.plan() {
        RecipePlan::Librosa(_) => return Ok(auto_rule(choice, requested, &name, host)),
        plan => match cuda::frames_exec::FrameTables::new(&plan) {
            Ok(_) => return Ok(auto_rule(choice, requested, &name, host)),
            Err(why) => why,
        },
    };
    match requested {
        Backend::Cuda => Err(Error::NoKernels { recipe: name, why }),
        _ => Ok(Choice::cpu(format!(
            "auto: features.recipe = \"{name}\" cannot run on the CUDA kernels ({why}), so the \
             CPU backend is used"
        ))),
    }
}

/// The fewest cores at which the CPU backend outruns the CUDA stage for a
/// recipe (by its `[features] recipe` name) and its inputs, from the
/// full-size `gpu-bench` on the H200 box of 2026-11-30, which built every
/// input on 16 cores and again on 4 (docs/GPU.md, "Which backend `auto`
/// picks"):
/// * inputs decoded on the host (`host_decode`: FLAC, resampling): the CPU
///   at 4 cores already (2.5–3× the CUDA stage, whose decode pool gets
///   fewer cores), and at 16, so from 1;
/// * librosa on WAV: the CUDA stage 1.26× the CPU on 4 cores, 0.71× on 16;
///   the CPU's rate between them (16.9k and 30.9k files/s) passes the CUDA
///   stage's 21.4k at 8;
/// * Kaldi fbank and MFCC: the CPU at 4 cores already (0.66× and 0.74×);
///   its rate per core there (1.07k, 1.12k) passes the CUDA stage's (2.80k,
///   3.30k) from 3;
/// * Whisper: a tie at 4 cores (0.97×), the CPU from 4.
pub fn cpu_outruns_gpu_from(recipe: &str, host_decode: bool) -> usize {
    match (recipe, host_decode) {
        (_, true) => 1,
        ("librosa", false) => 8,
        ("whisper", false) => 4,
        _ => 3,
    }
}

/// `auto` with a real GPU found: the CPU backend where this machine's cores
/// (`host.0`) outrun the CUDA stage for the recipe and inputs (`host.1`:
/// decoded on the host; [`cpu_outruns_gpu_from`]); the reason says which
/// rule chose. `cuda` asked, or the host double, is kept.
fn auto_rule(choice: Choice, requested: Backend, name: &str, host: (usize, bool)) -> Choice {
    let (cores, host_decode) = host;
    if requested != Backend::Auto || !matches!(choice.target, Target::Gpu(_)) {
        return choice;
    }
    let from = cpu_outruns_gpu_from(name, host_decode);
    let what = match host_decode {
        true => format!("features.recipe = \"{name}\" on inputs decoded on the host"),
        false => format!("features.recipe = \"{name}\""),
    };
    if cores >= from {
        let plural = if from == 1 { "core" } else { "cores" };
        return Choice::cpu(format!(
            "auto: {}; but for {what} the CPU backend outruns the CUDA stage from {from} \
             {plural} and this machine has {cores}, so the CPU backend is used (--backend \
             cuda forces the GPU)",
            choice.reason.trim_start_matches("auto: ")
        ));
    }
    Choice {
        reason: format!(
            "{}; for {what} the CUDA stage outruns the CPU below {from} cores and this machine \
             has {cores}",
            choice.reason
        ),
        ..choice
    }
}

/// The queues every compute stage is wired to. The stage takes producer
/// guards of `output` itself, so the ring closes when its last thread ends.
pub struct Wiring {
    pub input: Arc<Ring<Loaded>>,
    pub output: Arc<Ring<Outcome>>,
    /// Heap buffers (std reader) go back to the readers through here.
    pub free_bytes: Arc<ArrayQueue<Vec<u8>>>,
    /// Row buffers come from here; the sink refills it.
    pub free_rows: Arc<ArrayQueue<Vec<f32>>>,
    pub telemetry: Arc<Telemetry>,
    /// The readers' arena, registered with the GPU for zero-copy DMA (None
    /// with the std reader: copies then go through pageable memory).
    pub arena: Option<Arc<Arena>>,
    /// How files become clips (`[input]` resample and channels).
    pub policy: crate::decode::clip::Policy,
    /// The run's recipe, built once (`crate::recipes::build`): the CPU
    /// workers' rows, and the CUDA stage's kernels and tables.
    pub recipe: Arc<dyn FrameRecipe>,
    /// How the CPU workers sum each row's CMVN statistics (`crate::cmvn`),
    /// so the sink's serial thread only adds them; None: they do not.
    pub stats: Option<crate::cmvn::Bins>,
}

#[cfg(test)]
impl Wiring {
    /// A wiring over fresh rings of `capacity` and no arena (stage tests),
    /// with its input and output rings.
    pub(crate) fn standalone(capacity: usize) -> (Wiring, Arc<Ring<Loaded>>, Arc<Ring<Outcome>>) {
        let input = Arc::new(Ring::new(capacity));
        let output = Arc::new(Ring::new(capacity));
        let wiring = Wiring {
            input: Arc::clone(&input),
            output: Arc::clone(&output),
            free_bytes: Arc::new(ArrayQueue::new(16)),
            free_rows: Arc::new(ArrayQueue::new(16)),
            telemetry: Arc::new(Telemetry::default()),
            arena: None,
            policy: crate::decode::clip::Policy::default(),
            recipe: crate::recipes::librosa(&crate::dsp::Spec::default()),
            stats: None,
        };
        (wiring, input, output)
    }

    /// This wiring computing librosa's rows of `plan`.
    pub(crate) fn librosa(self, plan: &Arc<crate::dsp::Plan>) -> Wiring {
        Wiring {
            recipe: crate::recipes::librosa_of(Arc::clone(plan)),
            ..self
        }
    }
}

/// The running compute stage.
pub enum ComputeStage {
    Cpu(cpu::Workers),
    Cuda(cuda::CudaWorkers),
}

impl ComputeStage {
    /// Starts what `choice` names: CPU workers on `cpus` (one per entry), or
    /// the CUDA stage thread. CUDA start-up is synchronous: an error here
    /// means no file was taken from the input. With `f16_rows` (float16
    /// output) the CUDA stage converts rows in its graph and copies half the
    /// bytes back; the rows handed on are the same either way. The CUDA
    /// stage's decode pool takes the cores the `readers` and its own thread
    /// leave ([`cuda::default_decode_threads`]) unless `compute.decode_threads`
    /// says how many.
    pub fn start(
        choice: &Choice,
        cfg: &ComputeConfig,
        f16_rows: bool,
        cpus: &[Option<usize>],
        readers: usize,
        wiring: Wiring,
    ) -> Result<ComputeStage, Error> {
        let opts = cuda::CudaOptions {
            batch_files: cfg.batch_files,
            flush_after: cfg.max_batch_delay,
            f16_rows,
            decode_threads: cuda::decode_threads(cfg.decode_threads, readers),
            ..cuda::CudaOptions::default()
        };
        match &choice.target {
            Target::Cpu => Ok(ComputeStage::Cpu(
                cpu::Workers::start(cpus, wiring).map_err(Error::Spawn)?,
            )),
            Target::Gpu(gpu) => Ok(ComputeStage::Cuda(cuda::start_cuda_workers(
                gpu.clone(),
                opts,
                wiring,
            )?)),
            #[cfg(feature = "host-kernels")]
            Target::HostDouble => Ok(ComputeStage::Cuda(cuda::start_host_double_workers(
                opts, wiring,
            )?)),
            #[cfg(not(feature = "host-kernels"))]
            Target::HostDouble => Err(Error::CudaUnavailable(cuda::Cause::NoHostDouble {
                env: HOST_DOUBLE_ENV,
            })),
        }
    }

    /// Waits for the stage; the CUDA stage's report when it ran.
    pub fn join(self) -> Result<Option<cuda::CudaReport>, Error> {
        match self {
            ComputeStage::Cpu(w) => w.join().then_some(None).ok_or(Error::Panicked),
            ComputeStage::Cuda(w) => Ok(Some(w.join()?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_falls_back_to_cpu_with_a_reason_and_cuda_fails_clearly() {
        // This host (and CI) has no NVIDIA driver: the real probe says so.
        if let Err(why) = cuda::probe() {
            let c = select(Backend::Auto).unwrap();
            assert_eq!(c.backend, Backend::Cpu);
            assert!(c.reason.contains("CPU"), "{}", c.reason);
            assert!(c.reason.contains(&why.to_string()), "{}", c.reason);
            let e = select(Backend::Cuda).unwrap_err().to_string();
            assert!(e.contains("no CUDA GPU is usable"), "{e}");
            assert!(e.contains(&why.to_string()), "{e}");
        } else {
            eprintln!("skipped the GPU-less half: this host has a usable CUDA GPU");
        }
        // Injected probes: each reason is passed through verbatim.
        for cause in [
            cuda::Cause::NoDriver,
            cuda::Cause::Device(cuda::device::DeviceError::new(
                "cuInit",
                "CUDA_ERROR_NO_DEVICE",
            )),
            cuda::Cause::NoDevice,
        ] {
            let why = cause.to_string();
            let unavailable = || Err(cuda::Unavailable(cause.clone()));
            let c = select_with(Backend::Auto, unavailable).unwrap();
            assert_eq!(c.backend, Backend::Cpu);
            assert_eq!(c.reason, format!("auto: {why}, so the CPU backend is used"));
            let e = select_with(Backend::Cuda, unavailable).unwrap_err();
            assert!(e.to_string().contains("CUDA") && e.to_string().contains(&why));
        }
        let gpu = test_gpu();
        let c = select_with(Backend::Auto, || Ok(gpu.clone())).unwrap();
        assert_eq!(c.backend, Backend::Cuda);
        assert!(c.reason.contains("Test GPU (sm_90"), "{}", c.reason);
        assert_eq!(
            select_with(Backend::Cpu, || unreachable!())
                .unwrap()
                .backend,
            Backend::Cpu
        );
    }

    /// A GPU as the probe would describe one.
    fn test_gpu() -> cuda::Gpu {
        cuda::Gpu {
            name: "Test GPU".into(),
            cc: (9, 0),
            devices: 1,
            driver_version: 12040,
            pci_bus_id: "0000:41:00.0".into(),
        }
    }

    #[test]
    fn auto_picks_the_backend_the_cores_make_faster_and_cuda_forces_the_gpu() {
        let gpu = test_gpu();
        let found = select_with(Backend::Auto, || Ok(gpu.clone())).unwrap();
        let pick = |recipe, cores| auto_rule(found.clone(), Backend::Auto, recipe, (cores, false));
        let decoded =
            |recipe, cores| auto_rule(found.clone(), Backend::Auto, recipe, (cores, true));
        // The H200 box on 16 cores: the CPU won every input (gpu-bench of
        // 2026-11-30).
        let c = pick("librosa", 16);
        assert_eq!(c.backend, Backend::Cpu);
        assert!(
            c.reason.contains("\"librosa\"")
                && c.reason.contains("from 8 cores")
                && c.reason.contains("has 16")
                && c.reason.contains("Test GPU"),
            "{}",
            c.reason
        );
        for r in ["whisper", "kaldi-fbank", "kaldi-mfcc"] {
            assert_eq!(pick(r, 16).backend, Backend::Cpu, "{r}");
        }
        // On 4 cores: the GPU for librosa on WAV, the CPU for the rest.
        let c = pick("librosa", 4);
        assert_eq!(c.backend, Backend::Cuda);
        assert!(
            c.reason.contains("below 8 cores") && c.reason.contains("has 4"),
            "{}",
            c.reason
        );
        for r in ["whisper", "kaldi-fbank", "kaldi-mfcc"] {
            assert_eq!(pick(r, 4).backend, Backend::Cpu, "{r}");
        }
        assert_eq!(pick("kaldi-fbank", 2).backend, Backend::Cuda);
        assert_eq!(pick("whisper", 3).backend, Backend::Cuda);
        // Inputs decoded on the host (FLAC, resampling): the CPU on any host.
        let c = decoded("librosa", 1);
        assert_eq!(c.backend, Backend::Cpu);
        assert!(
            c.reason.contains("on inputs decoded on the host")
                && c.reason.contains("from 1 core and"),
            "{}",
            c.reason
        );
        assert_eq!(decoded("kaldi-fbank", 4).backend, Backend::Cpu);
        // Asked for cuda: the GPU, whatever the cores.
        let forced = select_with(Backend::Cuda, || Ok(gpu.clone())).unwrap();
        let c = auto_rule(forced, Backend::Cuda, "librosa", (64, true));
        assert_eq!(c.backend, Backend::Cuda);
        // The host double (tests) is never second-guessed.
        let double = Choice {
            backend: Backend::Cuda,
            reason: "double".into(),
            target: Target::HostDouble,
        };
        assert_eq!(
            auto_rule(double, Backend::Auto, "librosa", (64, true)).backend,
            Backend::Cuda
        );
    }

    #[test]
    fn recipes_the_kernels_cannot_compute_run_on_the_cpu_under_auto_and_fail_under_cuda() {
        use crate::dsp::kaldi::{KaldiOptions, Kind};
        let gpu = Choice {
            backend: Backend::Cuda,
            reason: "auto: found a GPU".into(),
            target: Target::HostDouble,
        };
        let librosa = crate::recipes::librosa(&crate::dsp::Spec::default());
        let kept = for_recipe(gpu.clone(), Backend::Auto, librosa.as_ref(), false).unwrap();
        assert_eq!(kept, gpu, "librosa keeps the GPU");
        let fbank = crate::recipes::kaldi(&KaldiOptions::default(), Kind::Fbank).unwrap();
        let mfcc = crate::recipes::kaldi(&KaldiOptions::default(), Kind::Mfcc).unwrap();
        let whisper = crate::recipes::whisper(128).unwrap();
        for r in [&fbank, &mfcc, &whisper] {
            for asked in [Backend::Auto, Backend::Cuda] {
                let c = for_recipe(gpu.clone(), asked, r.as_ref(), false).unwrap();
                assert_eq!(c, gpu, "{} keeps the GPU", r.layout().recipe());
            }
        }
        let dithered = KaldiOptions {
            dither: 1.0,
            ..KaldiOptions::default()
        };
        let dithered = crate::recipes::kaldi(&dithered, Kind::Fbank).unwrap();
        let c = for_recipe(gpu.clone(), Backend::Auto, dithered.as_ref(), false).unwrap();
        assert_eq!(c.target, Target::Cpu);
        assert!(
            c.reason
                .contains("\"kaldi-fbank\" cannot run on the CUDA kernels")
                && c.reason.contains("dither = 1"),
            "{}",
            c.reason
        );
        let e = for_recipe(gpu, Backend::Cuda, dithered.as_ref(), false).unwrap_err();
        assert!(
            e.to_string().contains(
                "features.recipe = \"kaldi-fbank\" cannot run on the CUDA kernels: dither"
            ),
            "{e}"
        );
        let cpu = Choice::cpu("asked".into());
        assert_eq!(
            for_recipe(cpu.clone(), Backend::Cuda, dithered.as_ref(), false).unwrap(),
            cpu
        );
    }
}
