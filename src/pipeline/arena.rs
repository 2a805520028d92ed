//! The read arena's size when `io.arena_bytes` is unset: room for the files
//! a run holds in flight at once, at the size of a typical input.

use crate::compute;
use crate::config::Config;
use crate::reader::cache::ReadMode;

/// What a build's sample of its inputs found, as the arena's size needs it
/// (`reader::cache`): their mean size, and whether they are in the page
/// cache. The default is a run that sampled nothing (serve).
#[derive(Clone, Copy, Debug, Default)]
pub struct Sampled {
    pub typical: Option<u64>,
    pub cached: bool,
}

impl From<&ReadMode> for Sampled {
    fn from(read: &ReadMode) -> Sampled {
        Sampled {
            typical: read.typical_bytes,
            cached: read.cached,
        }
    }
}

/// The read arena when `io.arena_bytes` is unset: room for every file that can
/// be in flight at once, at the size of a typical input, plus a quarter (the
/// circular allocator frees only in ring order). Resident memory is what the
/// arena is (registration pins it), so it is sized to need; a file over a
/// quarter of a reader's share is read into a spill extent instead
/// (`reader::arena`), so the arena never caps the file size.
///
/// In flight: per reader, `io.queue_depth` reads plus the `io.queue_depth`
/// loaded files queued for compute; then one file per CPU worker, or two
/// batches of `compute.batch_files` held by the CUDA stage. Where the inputs
/// were found in the page cache, a read is a copy that completes as it is
/// submitted, so a reader keeps at most `WARM_QUEUE_DEPTH` of each: every
/// page of the arena is zeroed by the kernel on its first touch and pinned
/// when it is registered, and files in flight beyond what keeps compute fed
/// only cost that. Typical input: the mean size of the inputs a build
/// sampled (`reader::cache`), else a 16-bit WAV of `mel.clip_seconds` at
/// `mel.sample_rate` (or 48 kHz stereo when `input.resample` is on: the
/// source rate is then unknown).
pub fn arena_bytes(cfg: &Config, target: &compute::Target, inputs: Sampled) -> u64 {
    use crate::config::defaults::io::WARM_QUEUE_DEPTH;
    use crate::decode::policy::{Channels, Resample};
    let readers = cfg.io.threads.max(1) as u64;
    let compute = match target {
        compute::Target::Cpu => cfg.compute.workers.max(1),
        _ => 2 * cfg.compute.batch_files,
    } as u64;
    let depth = match inputs.cached {
        true => cfg.io.queue_depth.min(WARM_QUEUE_DEPTH),
        false => cfg.io.queue_depth,
    };
    let files = readers * 2 * depth as u64 + compute;
    let (rate, channels) = match cfg.input.policy.resample {
        Resample::Off => (cfg.spec.sample_rate as u64, 1),
        Resample::SoxrHq => ((cfg.spec.sample_rate as u64).max(48_000), 2),
    };
    let channels = match cfg.input.policy.channels {
        Channels::Reject => 1,
        Channels::Mean | Channels::First => channels,
    };
    let samples = (cfg.spec.clip_seconds * rate as f64).ceil() as u64;
    let data = inputs.typical.unwrap_or(samples * 2 * channels);
    // Header and O_DIRECT rounding: one page on top of the data.
    let file = data.div_ceil(4096) * 4096 + 4096;
    (files * file * 5 / 4).clamp(
        crate::config::defaults::io::ARENA_MIN_AUTO,
        crate::config::defaults::io::ARENA_MAX_AUTO,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default arena is sized to the files in flight, not a fixed 256 MiB
    /// (which, registered and so resident, was most of a build's RSS).
    #[test]
    fn default_arena_fits_the_files_in_flight() {
        let mut cfg = Config::default();
        cfg.compute.workers = 2;
        cfg.io.threads = 1;
        let sampled = |cached| Sampled {
            typical: Some(30_000),
            cached,
        };
        let cpu = arena_bytes(&cfg, &compute::Target::Cpu, Sampled::default());
        // 258 reference files (128 + 128 + 2) of 84 KiB, plus a quarter.
        assert_eq!(cpu, 258 * 86_016 * 5 / 4);
        assert!(cpu < 32 << 20, "{cpu}");
        // Each reader keeps its own files in flight.
        cfg.io.threads = 2;
        assert_eq!(
            arena_bytes(&cfg, &compute::Target::Cpu, Sampled::default()),
            514 * 86_016 * 5 / 4
        );
        cfg.io.threads = 1;
        // Two CUDA batches of 256 files more; resampling assumes 48 kHz stereo.
        let gpu = arena_bytes(&cfg, &compute::Target::HostDouble, Sampled::default());
        assert_eq!(gpu, (256 + 512) * 86_016 * 5 / 4);
        cfg.input.policy.resample = crate::decode::clip::Resample::SoxrHq;
        assert_eq!(
            arena_bytes(&cfg, &compute::Target::Cpu, Sampled::default()),
            crate::config::defaults::io::ARENA_MAX_AUTO
        );
        // A build that sampled its inputs sizes by what it found (FLAC: a
        // third of the WAV).
        assert_eq!(
            arena_bytes(&cfg, &compute::Target::Cpu, sampled(false)),
            258 * (32_768 + 4096) * 5 / 4
        );
        // In the page cache a reader keeps 16 reads and 16 loaded files.
        assert_eq!(
            arena_bytes(&cfg, &compute::Target::Cpu, sampled(true)),
            (34 * (32_768 + 4096) * 5 / 4).max(crate::config::defaults::io::ARENA_MIN_AUTO)
        );
        // Speech of 355 KB a file, two readers: 2 × (16 + 16) + 2 files.
        cfg.io.threads = 2;
        let speech = Sampled {
            typical: Some(355_556),
            cached: true,
        };
        assert_eq!(
            arena_bytes(&cfg, &compute::Target::Cpu, speech),
            66 * 360_448 * 5 / 4
        );
        // A queue depth set below 16 is kept.
        cfg.io.queue_depth = 4;
        assert_eq!(
            arena_bytes(&cfg, &compute::Target::Cpu, speech),
            (18 * 360_448 * 5 / 4).max(crate::config::defaults::io::ARENA_MIN_AUTO)
        );
        cfg.io.queue_depth = crate::config::defaults::io::QUEUE_DEPTH;
        cfg.io.threads = 1;
        // Tiny clips still get the floor.
        cfg.input.policy.resample = crate::decode::clip::Resample::Off;
        cfg.spec.clip_seconds = 0.01;
        assert_eq!(
            arena_bytes(&cfg, &compute::Target::Cpu, Sampled::default()),
            crate::config::defaults::io::ARENA_MIN_AUTO
        );
    }
}
