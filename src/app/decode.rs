//! `melforge decode FILE --out X.f32`: the decoded samples of one file, as
//! melforge sees them before resampling and the mel transform: mono
//! (`--channels`, as `[input] channels`) little-endian `float32` at the
//! file's own rate, any container. The parity scripts compare it with
//! soundfile and ffmpeg; users can check a file the same way.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use serde::Serialize;

use crate::decode::native;
use crate::decode::policy::Channels;

/// Arguments of `melforge decode`.
#[derive(Clone, Debug, clap::Args)]
pub struct DecodeArgs {
    /// The audio file (WAV, FLAC, MP3, Ogg Vorbis/Opus, MP4/M4A).
    pub file: PathBuf,
    /// Where to write the samples (raw little-endian float32, mono).
    #[arg(long)]
    pub out: PathBuf,
    /// How channels become one: mean (librosa's mono) or first.
    #[arg(long, default_value = "mean", value_parser = ["mean", "first"])]
    pub channels: String,
}

/// What `melforge decode` wrote (printed as one JSON line).
#[derive(Clone, Debug, Serialize)]
pub struct Decoded {
    pub container: String,
    pub sample_rate: u32,
    pub channels: u16,
    pub frames: usize,
}

/// Decodes the file and writes its samples.
pub fn run(args: &DecodeArgs) -> anyhow::Result<Decoded> {
    let bytes = std::fs::read(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let channels = match args.channels.as_str() {
        "first" => Channels::First,
        _ => Channels::Mean,
    };
    let mut samples = Vec::new();
    let info = native::decode(&bytes, channels, &mut samples)
        .with_context(|| format!("{} is rejected", args.file.display()))?;
    let mut w = std::io::BufWriter::new(
        std::fs::File::create(&args.out)
            .with_context(|| format!("cannot create {}", args.out.display()))?,
    );
    for s in &samples {
        w.write_all(&s.to_le_bytes())?;
    }
    w.flush()
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    Ok(Decoded {
        container: format!("{:?}", info.container).to_lowercase(),
        sample_rate: info.sample_rate,
        channels: info.channels,
        frames: samples.len(),
    })
}
