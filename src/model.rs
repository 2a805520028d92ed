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

/// Why a row that was already under way has no row after all (a recording
/// streamed in pieces, `writer::RowPieces`): its kind and the sentence a
/// rejection line carries, for a sink that cannot name the stage's types.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub kind: RejectKind,
    pub reason: String,
}

impl Refusal {
    pub fn of(kind: RejectKind, reason: &dyn std::fmt::Display) -> Refusal {
        Refusal {
            kind,
            reason: reason.to_string(),
        }
    }
}

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
    /// A manifest line that names no usable item: not JSON, a field missing
    /// or of the wrong type, a duration that is not positive.
    BadLine,
    /// A manifest item whose segment does not fit its file: an offset past
    /// the end, a whole-file duration that disagrees with the file, a
    /// channel the file does not have.
    BadSegment,
    /// A file dropped for serve whose sidecar (`<file>.json`) cannot supply
    /// its metadata: unreadable, not JSON, not an object, too large.
    BadSidecar,
    /// A sample of a stored corpus that names no single recording: a
    /// WebDataset sample with no audio member or with two, a parquet row
    /// whose audio bytes are null or empty, or rows and members lost to
    /// damage in their tar or parquet file.
    BadSample,
}

impl RejectKind {
    /// Every kind, in a stable order (telemetry arrays index by position).
    pub const ALL: [RejectKind; 14] = [
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
        RejectKind::BadLine,
        RejectKind::BadSegment,
        RejectKind::BadSidecar,
        RejectKind::BadSample,
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
            RejectKind::BadLine => "bad_line",
            RejectKind::BadSegment => "bad_segment",
            RejectKind::BadSidecar => "bad_sidecar",
            RejectKind::BadSample => "bad_sample",
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

/// Element type of the `mel` / `features` dataset, and how it is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    Float32,
    Float16,
    /// `[output] storage = "compact"`: float16 values on a grid of
    /// `2^tick_power`, in Blosc chunks (bitshuffle + LZ4, HDF5 filter 32001);
    /// docs/FORMAT.md, "Compact storage".
    Compact {
        tick_power: i8,
    },
}

impl Dtype {
    /// The element type's spelling (config and the `dtype` attribute):
    /// `"float32"` or `"float16"` (compact values are float16).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Float32 => "float32",
            Dtype::Float16 | Dtype::Compact { .. } => "float16",
        }
    }

    /// Bytes per value, before any compression.
    pub fn size(self) -> usize {
        match self {
            Dtype::Float32 => 4,
            Dtype::Float16 | Dtype::Compact { .. } => 2,
        }
    }

    /// Whether values are stored as float16.
    pub fn is_f16(self) -> bool {
        self.size() == 2
    }

    /// The grid compact values are rounded to (`2^tick_power`), if any.
    pub fn tick_power(self) -> Option<i8> {
        match self {
            Dtype::Compact { tick_power } => Some(tick_power),
            _ => None,
        }
    }

    /// `row` as float16 into `dst` (same length): rounded to nearest even,
    /// on the compact grid first where there is one.
    pub fn narrow(self, dst: &mut [half::f16], row: &[f32]) {
        match self.tick_power() {
            Some(p) => crate::dsp::f16::narrow_ticked(dst, row, p),
            None => crate::dsp::f16::narrow(dst, row),
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

pub use crate::decode::segment::{LossyPart, Rounding, Segment};
