//! Helpers shared by the integration tests: temp corpora, WAV bytes, reading
//! an output file back.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use hdf5::types::VarLenUnicode;
use melforge::app::build::{self, Outcomes};
use melforge::config::Config;

/// Writes `bytes` at `root/rel`, creating folders.
pub fn put(root: &Path, rel: &str, bytes: &[u8]) -> PathBuf {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, bytes).unwrap();
    p
}

/// A synthetic corpus of `files` clips in a fresh temp dir.
pub fn synth_corpus(files: u64, seed: u64) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    melforge::synth::generate(d.path(), files, seed).unwrap();
    d
}

/// Runs a build with `cfg` (no progress bar).
pub fn build(input: &Path, out: &Path, cfg: &Config) -> Outcomes {
    build::build(input, out, cfg, &build::Options::default()).unwrap()
}

/// A config with `workers` CPU workers and small chunks, else defaults.
pub fn config(workers: usize) -> Config {
    let mut c = Config::default();
    c.compute.workers = workers;
    c.output.chunk_files = 8;
    c
}

/// One split file read back.
pub struct Split {
    pub mel: ndarray::ArrayD<f32>,
    pub label: Vec<i32>,
    pub path: Vec<String>,
    pub label_names: Vec<String>,
    pub file: hdf5::File,
}

pub fn read_split(path: &Path) -> Split {
    let file = hdf5::File::open(path).unwrap();
    let mel = file.dataset("mel").unwrap().read_dyn::<f32>().unwrap();
    let label = file.dataset("label").unwrap().read_raw::<i32>().unwrap();
    let path = melforge::writer::strings::read(&file, "path").unwrap();
    let label_names = file
        .attr("label_names")
        .unwrap()
        .read_raw::<VarLenUnicode>()
        .unwrap()
        .into_iter()
        .map(|s| s.as_str().to_string())
        .collect();
    Split {
        mel,
        label,
        path,
        label_names,
        file,
    }
}

/// The features of one WAV file computed directly (decode + plan), for
/// comparing against what a build wrote.
pub fn features_of(bytes: &[u8], cfg: &Config) -> Vec<f32> {
    let spec = &cfg.spec;
    let plan = melforge::dsp::Plan::new(spec);
    let mut scratch = melforge::dsp::Scratch::new(&plan);
    let mut clip = vec![0f32; spec.clip_samples()];
    melforge::decode::wav::decode(bytes, spec.sample_rate, &mut clip).unwrap();
    let mut out = vec![0f32; spec.row_len()];
    plan.compute(&clip, &mut scratch, &mut out);
    out
}

/// A PCM16 WAV with arbitrary header fields, for malformed-input corpora.
pub fn wav_with(
    format: u16,
    channels: u16,
    rate: u32,
    bits: u16,
    block_align: u16,
    data: &[u8],
) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(b"RIFF");
    b.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    b.extend_from_slice(&16u32.to_le_bytes());
    b.extend_from_slice(&format.to_le_bytes());
    b.extend_from_slice(&channels.to_le_bytes());
    b.extend_from_slice(&rate.to_le_bytes());
    b.extend_from_slice(&(rate * u32::from(block_align)).to_le_bytes());
    b.extend_from_slice(&block_align.to_le_bytes());
    b.extend_from_slice(&bits.to_le_bytes());
    b.extend_from_slice(b"data");
    b.extend_from_slice(&(data.len() as u32).to_le_bytes());
    b.extend_from_slice(data);
    b
}

/// The rows of the frames-layout file `f`, in row order.
pub fn frame_rows_in_order(f: &hdf5::File) -> Vec<Vec<f32>> {
    let feats = f.dataset("features").unwrap();
    let bins = feats.shape()[1];
    let values = feats.read_raw::<f32>().unwrap();
    let offsets = f.dataset("offsets").unwrap().read_raw::<i64>().unwrap();
    let lengths = f.dataset("lengths").unwrap().read_raw::<i32>().unwrap();
    offsets
        .iter()
        .zip(&lengths)
        .map(|(&o, &n)| values[o as usize * bins..(o as usize + n as usize) * bins].to_vec())
        .collect()
}

/// Every `features` row of the split files in `dir`, by path.
pub fn frame_rows(dir: &Path) -> std::collections::BTreeMap<String, Vec<f32>> {
    let mut rows = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "h5") {
            continue;
        }
        let f = hdf5::File::open(&p).unwrap();
        let feats = f.dataset("features").unwrap();
        let bins = feats.shape()[1];
        let values = feats.read_raw::<f32>().unwrap();
        let offsets = f.dataset("offsets").unwrap().read_raw::<i64>().unwrap();
        let lengths = f.dataset("lengths").unwrap().read_raw::<i32>().unwrap();
        let paths = melforge::writer::strings::read(&f, "path").unwrap();
        for ((o, n), p) in offsets.iter().zip(&lengths).zip(paths) {
            let (o, n) = (*o as usize, *n as usize);
            rows.insert(p.to_string(), values[o * bins..(o + n) * bins].to_vec());
        }
    }
    rows
}

/// A tmpfs of `mib` MiB mounted at `dir` (unmounted on drop), or None with
/// the reason printed when this host cannot mount one (not root, no
/// CAP_SYS_ADMIN).
pub struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    pub fn mount(dir: &std::path::Path, mib: u64) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir)
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "skipped: cannot mount a tmpfs (needs root): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        Some(Tmpfs(dir.to_path_buf()))
    }

    pub fn resize(&self, mib: u64) {
        let st = std::process::Command::new("mount")
            .args(["-o", &format!("remount,size={mib}m")])
            .arg(&self.0)
            .status()
            .unwrap();
        assert!(st.success(), "remount failed");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Whether two Kaldi rows of `bins` values a frame (`recipe` kaldi-fbank,
/// log, or kaldi-mfcc) agree within docs/FORMAT.md's tolerance: log fbank
/// 1e-3 absolute in every band within 1e6 (ln 1e6 ≈ 13.8) of the frame's
/// loudest, 0.5 in quieter ones (rounding noise in any float32 FFT); MFCC
/// 1e-3 of the frame's largest absolute value. What the CUDA stage (realfft
/// on the host double, cuFFT on a GPU, one frame at a time) and the CPU
/// workers (the batched float32 path) give for the same file. Returns the
/// worst difference in a band it holds to 1e-3 (relative for MFCC), or the
/// first frame and bin outside the tolerance.
pub fn kaldi_rows_close(recipe: &str, bins: usize, a: &[f32], b: &[f32]) -> Result<f32, String> {
    if a.len() != b.len() {
        return Err(format!("{} values against {}", a.len(), b.len()));
    }
    let mut worst = 0f32;
    for (f, (x, y)) in a.chunks_exact(bins).zip(b.chunks_exact(bins)).enumerate() {
        let loudest = y.iter().fold(f32::MIN, |m, &v| m.max(v));
        let largest = y.iter().fold(0f32, |m, &v| m.max(v.abs()));
        for (k, (&x, &y)) in x.iter().zip(y).enumerate() {
            let d = (x - y).abs();
            let (d, tol, held) = match recipe {
                "kaldi-mfcc" => (d / largest.max(1e-30), 1e-3, true),
                _ if y >= loudest - 13.8 => (d, 1e-3, true),
                _ => (d, 0.5, false),
            };
            if d > tol {
                return Err(format!("frame {f} bin {k}: {x} against {y}"));
            }
            if held {
                worst = worst.max(d);
            }
        }
    }
    Ok(worst)
}
