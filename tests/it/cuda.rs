//! CUDA backend checks that need no GPU: NVRTC compiles every kernel, and the
//! backend choice on a GPU-less host. (The orchestration and the host-built
//! kernels are tested in `src/compute/cuda/`.)
//!
//! libnvrtc comes from the `nvidia-cuda-nvrtc-cu12` wheel (or a CUDA toolkit).
//! It is located from `MELFORGE_NVRTC_LIB` (the library file), else by asking
//! `python3` where the wheel is, else by the backend's own search. Without it
//! the NVRTC test is skipped with a printed reason — unless
//! `MELFORGE_REQUIRE_NVRTC=1` (CI), where it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use melforge::compute::cuda::{libs, nvrtc};

/// Kernel names declared in kernels/README.md (`void mf_…(` lines).
fn readme_kernels() -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels/README.md"))
            .unwrap();
    let mut names: Vec<String> = readme
        .lines()
        .filter_map(|l| l.trim().strip_prefix("void "))
        .filter_map(|l| l.split('(').next())
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    names.dedup();
    names
}

/// libnvrtc.so.12 inside the pip wheel, as python3 reports it.
fn wheel_nvrtc() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import nvidia.cuda_nvrtc as m, os; print(os.path.join(list(m.__path__)[0], 'lib'))",
        ])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let lib = dir.join("libnvrtc.so.12");
    lib.is_file().then_some(lib)
}

fn locate_nvrtc() -> Result<String, libs::Error> {
    if let Some(p) = std::env::var_os("MELFORGE_NVRTC_LIB") {
        return libs::ensure_from(&libs::NVRTC, Path::new(&p)).map(|f| f.loaded_as);
    }
    if let Some(p) = wheel_nvrtc() {
        return libs::ensure_from(&libs::NVRTC, &p).map(|f| f.loaded_as);
    }
    libs::ensure(&libs::NVRTC).map(|f| f.loaded_as)
}

#[test]
fn nvrtc_compiles_every_kernel() {
    let required = std::env::var("MELFORGE_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    let lib = match locate_nvrtc() {
        Ok(l) => l,
        Err(why) if !required => {
            eprintln!(
                "SKIPPED nvrtc_compiles_every_kernel: {why}. Install it with `pip install \
                 nvidia-cuda-nvrtc-cu12` or set MELFORGE_NVRTC_LIB; MELFORGE_REQUIRE_NVRTC=1 \
                 makes this a failure."
            );
            return;
        }
        Err(why) => panic!("MELFORGE_REQUIRE_NVRTC=1 but libnvrtc is unavailable: {why}"),
    };
    let (major, minor) = nvrtc::version().unwrap();
    eprintln!("NVRTC {major}.{minor} from {lib}");
    let names = readme_kernels();
    assert!(
        names.len() >= 7,
        "kernels/README.md lists the kernels: {names:?}"
    );
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cu"))
        .collect();
    sources.sort();
    assert!(!sources.is_empty());
    let mut ptx_all = String::new();
    for src in &sources {
        let text = std::fs::read_to_string(src).unwrap();
        let name = src.file_name().unwrap().to_string_lossy();
        // A virtual architecture needs no device: PTX for compute_80.
        let img = nvrtc::compile(&name, &text, nvrtc::Target::Compute(80))
            .unwrap_or_else(|e| panic!("{e}"));
        ptx_all.push_str(img.ptx_text().expect("PTX text"));
    }
    for n in &names {
        assert!(
            ptx_all.contains(&format!(".entry {n}(")),
            "kernel {n} (kernels/README.md) is missing from the PTX"
        );
    }
    // The device path: a CUBIN for a real architecture, also without a GPU.
    let (file, src) = nvrtc::SOURCES[0];
    let cubin = nvrtc::compile(file, src, nvrtc::Target::Sm(80)).unwrap();
    assert!(
        !cubin.ptx && cubin.bytes.starts_with(b"\x7fELF"),
        "a CUBIN is an ELF image"
    );
}

#[test]
fn backend_choice_on_this_host_never_panics() {
    use melforge::compute::{Error, select};
    use melforge::config::Backend;
    match melforge::compute::cuda::probe() {
        Err(why) => {
            let c = select(Backend::Auto).unwrap();
            assert_eq!(c.backend, Backend::Cpu);
            assert!(c.reason.contains(&why.to_string()));
            let Error::CudaUnavailable(w) = select(Backend::Cuda).unwrap_err() else {
                panic!("compute.backend = \"cuda\" without a GPU must say the GPU is unavailable");
            };
            assert_eq!(w.to_string(), why.to_string());
        }
        Ok(gpu) => eprintln!("this host has a GPU ({gpu}); the GPU-less checks do not apply"),
    }
}

#[test]
fn float16_builds_on_the_cuda_stage_equal_the_cpu_build_bit_for_bit() {
    // The CUDA stage over the host double and host kernels (the same graph a
    // GPU runs), with float16 output: rows converted by `mf_to_f16` in the
    // graph must give the same file as the CPU path's writer conversion.
    let corpus = crate::common::synth_corpus(12, 5);
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("f16.toml");
    std::fs::write(&cfg, "[output]\ndtype = \"float16\"\n").unwrap();
    let run = |backend: &str, double: bool, out: &Path| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_melforge"));
        if double {
            cmd.env(melforge::compute::HOST_DOUBLE_ENV, "1");
        } else {
            cmd.env_remove(melforge::compute::HOST_DOUBLE_ENV);
        }
        let o = cmd
            .args(["build", "--json", "--backend", backend, "--config"])
            .arg(&cfg)
            .arg("--out")
            .arg(out)
            .arg(corpus.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let (gpu_out, cpu_out) = (d.path().join("gpu"), d.path().join("cpu"));
    let j = run("auto", true, &gpu_out);
    assert_eq!(j["backend"], "cuda", "{j}");
    assert_eq!(
        j["cuda"]["f16_rows"], true,
        "the graph converts to float16: {j}"
    );
    run("cpu", false, &cpu_out);
    let mut files: Vec<_> = std::fs::read_dir(&cpu_out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".h5"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for split in files {
        let read = |dir: &Path| {
            let f = hdf5::File::open(dir.join(&split)).unwrap();
            let mel = f.dataset("mel").unwrap();
            assert!(mel.dtype().unwrap().is::<half::f16>());
            mel.read_raw::<half::f16>().unwrap()
        };
        let (g, c) = (read(&gpu_out), read(&cpu_out));
        assert!(!g.is_empty());
        assert!(
            g.iter().zip(&c).all(|(a, b)| a.to_bits() == b.to_bits()),
            "{split:?}: float16 rows differ"
        );
        // The CMVN statistics, summed as the stage copies its rows out (not
        // by the writer), are the CPU workers' to the bit.
        let stats = |dir: &Path| crate::cmvn::stats_of(&dir.join(&split));
        let (g, c) = (stats(&gpu_out), stats(&cpu_out));
        assert!(g.frames > 0, "{split:?}");
        assert_eq!(g.frames, c.frames, "{split:?}");
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&g.sum), bits(&c.sum), "{split:?}: cmvn_sum");
        assert_eq!(bits(&g.sum_square), bits(&c.sum_square), "{split:?}");
    }
}

/// `melforge build` over the host double, whose copies all fail from the
/// moment the compute stage has started (the trigger file of
/// `HOST_DOUBLE_FAIL_ENV` is written when the log says "Pipeline started"),
/// or from the start (`from_start`: the stage's own start-up copies fail):
/// the JSON report (None if the build failed) and stderr, or a panic if the
/// build has not ended in 120 s.
fn build_on_a_failing_gpu(
    backend: &str,
    corpus: &Path,
    out: &Path,
    from_start: bool,
) -> (Option<serde_json::Value>, String) {
    use std::io::BufRead;
    let trigger = out.with_extension("trigger");
    if from_start {
        std::fs::write(&trigger, b"").unwrap();
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_melforge"))
        .env(melforge::compute::HOST_DOUBLE_ENV, "1")
        .env(melforge::compute::HOST_DOUBLE_FAIL_ENV, &trigger)
        .args(["build", "--json", "--backend", backend, "--out"])
        .arg(out)
        .arg(corpus)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufReader::new(err).lines() {
            let line = line.unwrap();
            if line.contains("Pipeline started") {
                std::fs::write(&trigger, b"").unwrap();
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the build with a failing GPU ({backend}) still ran after 120 s: it hung");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    let stderr = log.join().unwrap();
    let json = o
        .status
        .success()
        .then(|| serde_json::from_slice(&o.stdout).unwrap());
    (json, stderr)
}

/// Regression: a GPU failing during `build` made the CUDA stage reject
/// every later file while the failed batches held the readers' arena, and
/// the build hung for good once the arena was full. Under `auto` the build
/// now runs again on the CPU and every file is a row, equal to a CPU build;
/// so does a build whose CUDA stage fails to start.
#[test]
fn a_gpu_failing_during_a_build_under_auto_builds_again_on_the_cpu() {
    let corpus = crate::common::synth_corpus(2000, 11);
    let d = tempfile::tempdir().unwrap();
    let cpu_out = d.path().join("cpu");
    let mut cfg = melforge::config::Config::default();
    cfg.compute.backend = melforge::config::Backend::Cpu;
    crate::common::build(corpus.path(), &cpu_out, &cfg);
    for (from_start, name) in [(false, "mid-run"), (true, "start")] {
        let gpu_out = d.path().join(name);
        let (json, stderr) = build_on_a_failing_gpu("auto", corpus.path(), &gpu_out, from_start);
        let j = json.unwrap_or_else(|| panic!("{name}: the build failed: {stderr}"));
        assert_eq!(j["backend"], "cpu", "{name}: {j}");
        let reason = j["backend_reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("the GPU failed during this build"),
            "{name}: {reason}"
        );
        assert_eq!(j["report"]["files_ok"], 2000, "{name}: {j}");
        assert_eq!(j["report"]["files_rejected"], 0, "{name}: {j}");
        assert!(
            stderr.contains("building every file again on the CPU"),
            "{name}: {stderr}"
        );
        for split in ["TRAINING", "VALIDATION", "TESTING"] {
            let file = format!("{split}.h5");
            let (g, c) = (
                crate::common::read_split(&gpu_out.join(&file)),
                crate::common::read_split(&cpu_out.join(&file)),
            );
            assert_eq!(g.path, c.path, "{name}: {split}");
            assert_eq!(g.mel, c.mel, "{name}: {split}");
        }
    }
}

/// With `compute.backend = "cuda"` the same failure ends the build with an
/// error that names it, and leaves no output file behind (complete-looking
/// files missing rows were the danger).
#[test]
fn a_gpu_failing_during_a_build_under_cuda_fails_and_keeps_nothing() {
    let corpus = crate::common::synth_corpus(2000, 12);
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out");
    let (json, stderr) = build_on_a_failing_gpu("cuda", corpus.path(), &out, false);
    assert!(json.is_none(), "the build succeeded: {json:?}");
    assert!(
        stderr.contains("the GPU failed during the build"),
        "{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(&out)
        .map(|rd| rd.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.iter().all(|n| !n.to_string_lossy().contains(".h5")),
        "left behind: {left:?}"
    );
}

/// `compute.decode_threads` sets the CUDA stage's decode pool (the GPU box
/// has no cargo: its runs tune this in the config); 0, the default, leaves
/// it to the cores.
#[test]
fn compute_decode_threads_sizes_the_cuda_stage_decode_pool() {
    let corpus = crate::common::synth_corpus(12, 6);
    let d = tempfile::tempdir().unwrap();
    let run = |toml: &str, out: &str| {
        let cfg = d.path().join(format!("{out}.toml"));
        std::fs::write(&cfg, toml).unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_melforge"))
            .env(melforge::compute::HOST_DOUBLE_ENV, "1")
            .args(["build", "--json", "--backend", "cuda", "--config"])
            .arg(&cfg)
            .arg("--out")
            .arg(d.path().join(out))
            .arg(corpus.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        j["cuda"]["decode_threads"].as_u64().unwrap()
    };
    assert_eq!(run("[compute]\ndecode_threads = 3\n", "three"), 3);
    let readers = melforge::config::Config::default().io.threads;
    assert_eq!(
        run("", "auto") as usize,
        melforge::compute::cuda::default_decode_threads(readers)
    );
}

#[test]
fn the_speech_recipes_build_on_the_cuda_stage_as_on_the_cpu() {
    // `melforge build` with each variable-length recipe over the host double
    // (`auto` chooses it: the CUDA stage, kernels/frames.cu built for the
    // host) against `--backend cpu`: the same rows for the same paths, each
    // within its parity tolerance (docs/FORMAT.md): the kernels compute one
    // frame at a time with realfft standing in for cuFFT (Kaldi in float32,
    // Whisper's FFT in float64), the CPU workers in float32 SIMD lanes.
    let d = tempfile::tempdir().unwrap();
    let corpus = d.path().join("speech");
    let o = Command::new(env!("CARGO_BIN_EXE_melforge"))
        .args(["synth", "--kind", "speech", "--files", "24", "--seed", "3"])
        .arg(&corpus)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for recipe in ["kaldi-fbank", "kaldi-mfcc", "whisper"] {
        let cfg = d.path().join(format!("{recipe}.toml"));
        std::fs::write(&cfg, format!("[features]\nrecipe = \"{recipe}\"\n")).unwrap();
        let run = |backend: &str, double: bool| {
            let out = d.path().join(format!("{recipe}-{backend}"));
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_melforge"));
            if double {
                cmd.env(melforge::compute::HOST_DOUBLE_ENV, "1");
            } else {
                cmd.env_remove(melforge::compute::HOST_DOUBLE_ENV);
            }
            let o = cmd
                .args(["build", "--json", "--backend", backend, "--config"])
                .arg(&cfg)
                .arg("--out")
                .arg(&out)
                .arg(&corpus)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            (j, crate::common::frame_rows(&out))
        };
        let (j, gpu) = run("auto", true);
        assert_eq!(j["backend"], "cuda", "{recipe}: {j}");
        assert_eq!(
            j["cuda"]["files"], 24,
            "{recipe}: every file on the device: {j}"
        );
        let (_, cpu) = run("cpu", false);
        assert_eq!(gpu.len(), 24, "{recipe}");
        assert_eq!(
            gpu.keys().collect::<Vec<_>>(),
            cpu.keys().collect::<Vec<_>>(),
            "{recipe}"
        );
        for (p, g) in &gpu {
            let c = &cpu[p];
            assert_eq!(g.len(), c.len(), "{recipe} {p}: frames");
            let worst = match recipe {
                // torchaudio's defaults: 23 mel bins, 13 cepstra.
                "kaldi-fbank" => crate::common::kaldi_rows_close(recipe, 23, g, c),
                "kaldi-mfcc" => crate::common::kaldi_rows_close(recipe, 13, g, c),
                _ => {
                    let worst = g.iter().zip(c).map(|(a, b)| (a - b).abs());
                    let worst = worst.fold(0f32, f32::max);
                    (worst <= 1e-4)
                        .then_some(worst)
                        .ok_or(format!("by {worst}"))
                }
            };
            let worst = worst.unwrap_or_else(|e| panic!("{recipe} {p}: differs {e}"));
            eprintln!("{recipe} {p}: worst {worst:e}");
        }
        // The statistics the stage summed as it copied the rows out describe
        // the rows stored.
        let out = d.path().join(format!("{recipe}-auto"));
        let mut splits = 0;
        for e in std::fs::read_dir(&out).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            if let Some(split) = name.strip_suffix(".h5") {
                assert!(crate::cmvn::check_dir(&out, split).frames > 0, "{split}");
                splits += 1;
            }
        }
        assert!(splits > 0, "{recipe}: no split written");
    }
}
