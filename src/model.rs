//! The vocabulary the stages share: small value types that two layers both
//! name, defined here on the floor so that neither has to import the other.
//!
//! A type lives here when a lower layer needs a stage's word for something —
//! telemetry counts rejections by [`RejectKind`] (the compute stage's
//! outcomes), config's defaults name the writer's [`Dtype`] and serve's
//! [`OnSuccess`] policy. Each stage re-exports the type where its own API
//! uses it (`compute::RejectKind`, `writer::Dtype`, `config::serve::OnSuccess`),
//! so callers keep one spelling; this module imports nothing from the crate.
//! (An import loop between files is a type in the wrong room:
//! `tests/it/house.rs` checks there is none.)

use serde::{Deserialize, Serialize};

/// The kinds rejections are counted by (`rejected_by_kind`, metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectKind {
    /// Could not be opened, stat'ed or read.
    Unreadable,
    /// Not a regular file.
    NotAFile,
    /// Larger than `io.max_file_bytes`, the read arena or a CUDA batch.
    TooLarge,
    /// Changed size while it was read.
    Changed,
    /// Not a well-formed audio file (truncated, inconsistent or missing parts).
    Malformed,
    /// An audio file in a format melforge does not decode (codec, depth, RF64).
    Unsupported,
    /// A sample rate other than `mel.sample_rate`.
    SampleRate,
    /// The compute device failed.
    Device,
    /// A path that cannot be a row's `path`: a name that is not valid UTF-8.
    BadPath,
    /// Shorter than one frame of a variable-length recipe (Kaldi: 0 frames).
    TooShort,
}

impl RejectKind {
    /// Every kind, in a stable order (telemetry arrays index by position).
    pub const ALL: [RejectKind; 10] = [
        RejectKind::Unreadable,
        RejectKind::NotAFile,
        RejectKind::TooLarge,
        RejectKind::Changed,
        RejectKind::Malformed,
        RejectKind::Unsupported,
        RejectKind::SampleRate,
        RejectKind::Device,
        RejectKind::BadPath,
        RejectKind::TooShort,
    ];

    /// The snake_case name used in JSON, logs and metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            RejectKind::Unreadable => "unreadable",
            RejectKind::NotAFile => "not_a_file",
            RejectKind::TooLarge => "too_large",
            RejectKind::Changed => "changed",
            RejectKind::Malformed => "malformed",
            RejectKind::Unsupported => "unsupported",
            RejectKind::SampleRate => "sample_rate",
            RejectKind::Device => "device",
            RejectKind::BadPath => "bad_path",
            RejectKind::TooShort => "too_short",
        }
    }

    /// Position in [`RejectKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for RejectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Element type of the `mel` dataset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    Float32,
    Float16,
}

impl Dtype {
    /// The config / attribute spelling: `"float32"` or `"float16"`.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Float32 => "float32",
            Dtype::Float16 => "float16",
        }
    }

    /// Bytes per stored value.
    pub fn size(self) -> usize {
        match self {
            Dtype::Float32 => 4,
            Dtype::Float16 => 2,
        }
    }
}

/// What to do with a file once its row is durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnSuccess {
    Keep,
    Move,
    Delete,
}
