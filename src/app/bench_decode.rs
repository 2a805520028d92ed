//! `melforge bench decode DIR`: decode speed per core of each container, the
//! figure to set beside soundfile's and ffmpeg's (`scripts/bench_decoders.py`
//! times them on the same files).
//!
//! Every file under DIR is read into memory first (no I/O is timed), grouped
//! by the codec recognised from its content, then decoded whole on one
//! thread (`decode::native`: mono at the file's rate, as `melforge decode`
//! writes it), `repeat` times; the fastest pass counts. Passes are timed in
//! the thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), so a machine shared
//! with other work still gives the figure of one core. The report gives,
//! per codec, files, input MB, audio seconds, and the speed as input MB/s
//! and as times real time (audio seconds decoded per CPU second).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use serde::Serialize;

use crate::decode::clip::{self, Container};
use crate::decode::native;
use crate::decode::policy::Channels;

/// Arguments of `melforge bench decode`.
#[derive(Clone, Debug, clap::Args)]
pub struct DecodeBenchArgs {
    /// Folder of audio files (searched recursively; any container).
    pub dir: PathBuf,
    /// Passes over the files; the fastest counts.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// One codec's figures.
#[derive(Clone, Debug, Serialize)]
pub struct CodecSpeed {
    pub codec: String,
    pub files: usize,
    pub input_mb: f64,
    pub audio_s: f64,
    /// CPU seconds of the decoding thread for one pass (the fastest).
    pub cpu_s: f64,
    pub mb_per_s: f64,
    /// Audio seconds decoded per second of one core.
    pub x_realtime: f64,
}

/// What `bench decode` measured.
#[derive(Clone, Debug, Serialize)]
pub struct DecodeReport {
    pub codecs: Vec<CodecSpeed>,
    pub rejected: usize,
}

impl std::fmt::Display for DecodeReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{:<8} {:>6} {:>9} {:>9} {:>9} {:>9} {:>11}",
            "codec", "files", "input MB", "audio s", "cpu s", "MB/s", "x realtime"
        )?;
        for c in &self.codecs {
            writeln!(
                f,
                "{:<8} {:>6} {:>9.2} {:>9.1} {:>9.3} {:>9.2} {:>11.0}",
                c.codec, c.files, c.input_mb, c.audio_s, c.cpu_s, c.mb_per_s, c.x_realtime
            )?;
        }
        writeln!(
            f,
            "one thread, CPU time; {} file(s) rejected",
            self.rejected
        )
    }
}

/// A codec's name for the report.
fn codec_name(c: Container) -> String {
    match c {
        Container::Wav => "wav".into(),
        Container::Flac => "flac".into(),
        Container::Compressed(codec) => codec.name().into(),
    }
}

/// CPU seconds this thread has run.
fn thread_cpu_s() -> f64 {
    crate::runtime::telemetry::thread_cpu().as_secs_f64()
}

/// The regular files under `dir`, recursively.
fn files_under(dir: &std::path::Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            files_under(&entry.path(), out)?;
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
    Ok(())
}

/// Reads the files, then times each codec's group on this thread.
pub fn run(args: &DecodeBenchArgs) -> anyhow::Result<DecodeReport> {
    let mut groups: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    let mut rejected = 0;
    let mut paths = Vec::new();
    files_under(&args.dir, &mut paths)?;
    paths.sort();
    for path in paths {
        let bytes =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        match clip::container(&bytes) {
            Ok(c) => groups.entry(codec_name(c)).or_default().push(bytes),
            Err(_) => rejected += 1,
        }
    }
    let mut codecs = Vec::new();
    let mut samples = Vec::new();
    for (codec, files) in groups {
        let mut audio_s = 0.0;
        let mut best = f64::INFINITY;
        for _ in 0..args.repeat {
            let t = thread_cpu_s();
            audio_s = 0.0;
            for bytes in &files {
                if let Ok(n) = native::decode(bytes, Channels::Mean, &mut samples) {
                    audio_s += samples.len() as f64 / f64::from(n.sample_rate);
                }
            }
            best = best.min(thread_cpu_s() - t);
        }
        let input_mb = files.iter().map(|b| b.len()).sum::<usize>() as f64 / 1e6;
        codecs.push(CodecSpeed {
            codec,
            files: files.len(),
            input_mb,
            audio_s,
            cpu_s: best,
            mb_per_s: input_mb / best,
            x_realtime: audio_s / best,
        });
    }
    Ok(DecodeReport { codecs, rejected })
}
