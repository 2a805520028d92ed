//! melforge: audio corpora (trees, NeMo and lhotse manifests, WebDataset
//! shards, Hugging Face parquet) → feature datasets in HDF5 (librosa
//! log-mel, Kaldi fbank and MFCC, Whisper log-mel), as a CLI
//! (`build`) and a daemon (`serve`) that run the same stage graph.
//!
//! One process, one thread per role, bounded lock-free rings between them
//! (docs/ARCHITECTURE.md draws the same picture); threads per stage in
//! brackets, `cores` = the available parallelism:
//!
//! ```text
//!  source ──ReadJob──▶ readers ──Loaded──▶ compute ───────────────Outcome──▶ sink ──▶ <split>.h5
//!  [1] walk (build)    [io.threads; auto:  cpu: [compute.workers;           [1] build writer
//!  serve: its loop      cores/8, 1..4]     0 = cores] workers, or           (sorted rows, direct
//!  (inotify, rescans)   io_uring | std     cuda: decode pool                 chunks), or serve's
//!                       registered arena   [cores − readers − 1, ≥ 1]        loop: SWMR appenders
//!                                          ──Fed──▶ [1] cuda stage
//!                         ▲                   │  ▲                  │
//!                         └─ extents/buffers ─┘  └─── free rows ────┘
//!  [1] probe while build starts (backend choice beside the walk)
//!  control socket + signals ──Command──▶ serve loop      telemetry ◀── every stage
//! ```
//!
//! * [`pipeline`]: the one wiring — reader start (probe, fallback, arena,
//!   `io.pin`), compute start (backend choice and its reason), rings,
//!   telemetry; a command brings only its source and its [`writer::Sink`].
//! * [`plan`]: every input (tree walk, manifests, stored corpora) as one
//!   item plan, before any read.
//! * Stages: [`reader`] (io_uring
//!   engine, std fallback, arena), [`decode`] (WAV, FLAC, resampling, the
//!   decode pool's staging), [`dsp`] (librosa-exact
//!   log-mel), [`compute`] (CPU workers, CUDA stage; [`compute::Reject`] for
//!   per-file outcomes), [`writer`] (build files and SWMR appends behind
//!   [`writer::Sink`]).
//! * [`runtime`]: rings with producer guards, thread placement, telemetry,
//!   raw syscalls ([`runtime::sys`]).
//! * [`frames`]: variable-length rows (recipes other than librosa): the
//!   row protocol between compute and the sinks, the layout the writers record.
//! * [`model`]: the vocabulary two layers share (rejection kinds, dtype,
//!   on-success policy), below both, so no file imports another in a loop
//!   (`tests/it/house.rs` checks the file graph).
//! * [`synth`]: the deterministic synthetic corpus (`melforge synth`), at
//!   the bottom so that every layer's tests may use it.
//! * [`config`]: TOML → validated [`config::Config`], one file per section.
//! * [`app`]: the commands — build, serve (journal, status, reload, rebuild),
//!   control socket and `ctl`, bench io; [`cli`] parses the command
//!   line and the binary's `main` only calls [`cli::main`].
#![deny(unsafe_op_in_unsafe_fn)]

pub mod app;
pub mod cli;
pub mod cmvn;
pub mod compute;
pub mod config;
pub use melforge_decode as decode;
pub use melforge_dsp as dsp;
pub mod frames;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod fuzzing;
pub mod long;
pub mod model;
pub mod pipeline;
pub mod plan;
pub mod reader;
pub mod recipes;
pub mod runtime;

pub mod synth;
pub mod writer;

/// Version string recorded in every output file.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
