//! melforge: WAV trees → librosa-exact log-mel datasets in HDF5.
//!
//! The pipeline is one process with one thread per role and bounded memory:
//!
//! ```text
//! source ──jobs──▶ reader ──loaded files──▶ compute ──features──▶ writer ──▶ <split>.h5
//!  (sorted walk)   (std fs)   ring::Ring      cpu workers   ring::Ring   one thread,
//!                                                                        owns HDF5
//! ```
//!
//! * [`source`] walks the input tree, assigns split, label and sequence number.
//! * [`reader`] loads file bytes; [`ring`] carries handles between stages.
//! * [`compute`] decodes ([`wav`]) and computes the features ([`mel`]).
//! * [`writer`] is the only code that calls HDF5; rows land in sorted path order.
//! * [`pipeline`] wires the stages together for `build`; [`telemetry`] counts.
//! * [`config`] turns TOML into a validated [`config::Config`].
//! * [`cli`] is the `melforge` command line (flags, logging set-up, exit codes);
//!   the binary's `main` only calls [`cli::main`].
#![deny(unsafe_op_in_unsafe_fn)]

pub mod app;
pub mod cli;
pub mod compute;
pub mod config;
pub mod decode;
pub mod dsp;
pub mod pipeline;
pub mod reader;
pub mod runtime;
pub mod source;
pub mod writer;

/// Version string recorded in every output file.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
