//! Every default value of every config section, in one place.
//!
//! A key that is absent from the TOML takes the value named here; the raw
//! structs' doc comments link to these items and the validation step in each
//! section's file reads them, so a default is changed here and nowhere else.
//! `config/melforge.toml` shows every one of them (a unit test checks that the
//! example parses to `Config::default()`).
//!
//! Invariant: every default is valid on its own and together with the others
//! (`Config::default()` cannot fail); in particular the default
//! `compute.max_batch_delay_ms` is below the default `serve.flush_interval_ms`
//! (checked at compile time below).
//!
//! The `[mel]` and `[segmentation]` defaults are the reference dataset's
//! definition (docs/DESIGN.md "Defaults"), owned by [`Spec::default`]; this
//! file reaches them through [`mel::spec`] and adds the two that follow other
//! keys.

use crate::dsp::Spec;
use crate::model::Dtype;
use crate::runtime::pin::PinPolicy;

/// `[mel]` and `[segmentation]`.
pub mod mel {
    use super::Spec;

    /// Every `[mel]`/`[segmentation]` default: the reference dataset's spec.
    pub fn spec() -> Spec {
        Spec::default()
    }

    /// `mel.win_length` when absent: the FFT size.
    pub fn win_length(n_fft: usize) -> usize {
        n_fft
    }

    /// `mel.fmax` when absent: the Nyquist frequency of `sample_rate`.
    pub fn fmax(sample_rate: u32) -> f64 {
        f64::from(sample_rate) / 2.0
    }
}

/// `[output]`.
pub mod output {
    use super::Dtype;

    /// `output.dtype`.
    pub const DTYPE: Dtype = Dtype::Float32;
    /// `output.chunk_files`: rows per HDF5 chunk along N.
    pub const CHUNK_FILES: usize = 64;

    /// `output.tick_power` for `recipe` under compact storage: lhotse's own
    /// (`LilcomChunkyWriter`'s −5, an error of at most 2^-6 on natural-log
    /// energies) for the Kaldi recipes; −8 for Whisper, whose values are
    /// log10 energies divided by 4, so that its error in energy is no
    /// coarser than the Kaldi recipes' (2^-9 × 4 × ln 10 ≈ 2^-5.8).
    pub fn tick_power(recipe: &crate::config::features::Recipe) -> i64 {
        match recipe {
            crate::config::features::Recipe::Whisper { .. } => -8,
            _ => -5,
        }
    }
}

/// `[io]`.
pub mod io {
    use super::PinPolicy;
    use crate::config::{Direct, Engine};

    /// `io.engine`.
    pub const ENGINE: Engine = Engine::Uring;
    /// `io.fallback`: fall back to the std engine when io_uring is unusable.
    pub const FALLBACK: bool = true;
    /// `io.pin`.
    pub const PIN: PinPolicy = PinPolicy::Auto;
    /// `io.threads`: `None` is `"auto"`, sized by the cores
    /// (`config::io::auto_threads`: 2 on 2 to 23 cores, 1 on one).
    pub const THREADS: Option<usize> = None;
    /// `io.queue_depth`: O_DIRECT reads are latency-bound, so files in flight
    /// decide throughput (20k reference clips, 2 cores: 64 → 13.4k files/s,
    /// 128 → 17k, 256 no better).
    pub const QUEUE_DEPTH: usize = 128;
    /// Files a reader keeps in flight, and loaded, when a build's inputs are
    /// in the page cache (`pipeline::arena_bytes`): reads there are copies,
    /// so more only grows the arena, whose pages the kernel zeroes on first
    /// touch (1,500 speech files of 355 KB, Whisper, warm, 2 cores: room for
    /// 16 a reader built them in 1.17–1.41 s, for 128 in 1.54–1.80 s, for 8
    /// in 1.40–1.49 s).
    pub const WARM_QUEUE_DEPTH: usize = 16;
    /// `io.direct`: O_DIRECT unless a build's inputs are already in the page
    /// cache, where reading them from the disk again only competes with the
    /// output's writeback (20k reference clips, warm, 2 cores: 1.2× faster).
    pub const DIRECT: Direct = Direct::Auto;
    /// `io.max_file_bytes` (64 MiB).
    pub const MAX_FILE_BYTES: u64 = 64 << 20;
    /// `io.arena_bytes` unset: sized for the files in flight (`pipeline`),
    /// at least this (8 MiB) …
    pub const ARENA_MIN_AUTO: u64 = 8 << 20;
    /// … and at most this (256 MiB).
    pub const ARENA_MAX_AUTO: u64 = 256 << 20;
}

/// `[compute]`.
pub mod compute {
    use super::PinPolicy;
    use crate::config::Backend;

    /// `compute.backend`.
    pub const BACKEND: Backend = Backend::Auto;
    /// `compute.workers`: 0 means one per available core (resolved at
    /// validation).
    pub const WORKERS: usize = 0;
    /// `compute.batch_files`.
    pub const BATCH_FILES: usize = 256;
    /// `compute.queue_depth` (a row of the reference clips is 30 KB).
    pub const QUEUE_DEPTH: usize = 64;
    /// `compute.pin`.
    pub const PIN: PinPolicy = PinPolicy::Auto;
    /// `compute.max_batch_delay_ms`: longest the CUDA stage holds a partial
    /// batch waiting for more files.
    pub const MAX_BATCH_DELAY_MS: u64 = 20;
    /// `compute.decode_threads`: 0 means the cores the readers and the CUDA
    /// stage thread leave (resolved when the stage starts).
    pub const DECODE_THREADS: usize = 0;
}

/// `[control]`.
pub mod control {
    /// `control.socket`: where `melforge serve` listens and `melforge ctl`
    /// connects (re-exported as `config::DEFAULT_CONTROL_SOCKET`).
    pub const SOCKET: &str = "/run/melforge/control.sock";
    /// `control.mode` (written "0660").
    pub const MODE: u32 = 0o660;
    /// `control.max_line_bytes`.
    pub const MAX_LINE_BYTES: usize = 65536;
    /// `control.max_clients`.
    pub const MAX_CLIENTS: usize = 64;
    /// `control.max_clients_per_peer` (capped at `max_clients`).
    pub const MAX_CLIENTS_PER_PEER: usize = 16;
    /// `control.client_timeout_ms`.
    pub const CLIENT_TIMEOUT_MS: u64 = 5000;
}

/// `[serve]` (only read when the section is present; `watch_dir` and
/// `output_dir` have no default).
pub mod serve {
    /// `serve.state_dir` when absent: this directory under `output_dir`.
    pub const STATE_SUBDIR: &str = ".melforge";
    /// `serve.flush_interval_ms`.
    pub const FLUSH_INTERVAL_MS: u64 = 500;
    /// `serve.ignore`.
    pub const IGNORE: &[&str] = &["*.part", "*.tmp"];
    /// `serve.on_success`.
    pub const ON_SUCCESS: crate::model::OnSuccess = crate::model::OnSuccess::Keep;
    /// `serve.compact_tail_entries`: files committed since the last journal
    /// compaction (about 2.5 MiB of tail in memory).
    pub const COMPACT_TAIL_ENTRIES: u64 = 65_536;
    /// `serve.compact_journal_bytes` (8 MiB).
    pub const COMPACT_JOURNAL_BYTES: u64 = 8 << 20;
    /// `serve.max_queued_files`: at about 450 B per queued file (measured,
    /// docs/BENCHMARKS.md "serve under bursts"), under 4 MiB of queue, and
    /// 0.8 s of work at 10,000 files/s, so the rescan that refills it at
    /// half (about 4,096 `stat`s and index lookups, ~20 ms) has 0.4 s; see
    /// docs/OPERATIONS.md, "Sizing the intake".
    pub const MAX_QUEUED_FILES: usize = 8_192;
}

/// `[input]`.
pub mod input {
    use crate::decode::policy::{Channels, Resample};

    /// `input.extensions` (matched case-insensitively).
    pub const EXTENSIONS: &[&str] = &["wav", "flac", "mp3", "ogg", "opus", "oga", "m4a", "mp4"];
    /// `input.resample`: a file at another rate is rejected.
    pub const RESAMPLE: Resample = Resample::Off;
    /// `input.channels`: librosa's mono.
    pub const CHANNELS: Channels = Channels::Mean;
    /// `input.spill_max_mib`: the largest whole-recording decode a manifest
    /// build spills (`plan::manifest::spill`): 2 GiB, 9.7 h of 16 kHz
    /// mono or 1.6 h of 48 kHz stereo as 32-bit floats.
    pub const SPILL_MAX_MIB: u64 = 2048;
    /// The most `input.spill_max_mib` may be: a WAV's sizes are 32-bit.
    pub const SPILL_MAX_MIB_LIMIT: u64 = 4095;
    /// `input.manifest_max_line_kib`: the longest manifest line, 1 MiB. A
    /// NeMo or lhotse line is a few hundred bytes (a lhotse cut with its
    /// supervisions and custom fields a few KiB); a longer one is rejected
    /// with its line number and read past without being kept
    /// (`plan::manifest::lines`).
    pub const MANIFEST_MAX_LINE_KIB: u64 = 1024;
    /// The most `input.manifest_max_line_kib` may be: 1 GiB.
    pub const MANIFEST_MAX_LINE_KIB_LIMIT: u64 = 1 << 20;
    /// `input.manifest_max_lines`: the most lines of one manifest, blank
    /// ones included, 100 million: ten times the largest public corpora's
    /// manifests, and the bound on a gzip bomb of newlines (100 MB of
    /// them read, about a second, then a clear error).
    pub const MANIFEST_MAX_LINES: u64 = 100_000_000;
}

// A `[serve]` section that sets no interval must accept the default delay.
const _: () = assert!(compute::MAX_BATCH_DELAY_MS < serve::FLUSH_INTERVAL_MS);
