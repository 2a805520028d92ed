//! What the compute stage hands the sink for every file: a row, or a typed
//! [`Reject`] saying why there is none.
//!
//! A per-file problem is data, never a stage failure. Both backends (and the
//! readers before them) produce the same [`Reject`] values, so a malformed
//! file gets the same sentence on the CPU and on the GPU, the build report and
//! `ctl stats` count rejections by [`RejectKind`], and tests match on kinds
//! instead of parsing text. `Display` is the sentence users read in
//! `rejected.jsonl` (without the path).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::compute::cuda::cause::Cause;
use crate::decode::{clip, flac, wav};
pub use crate::model::RejectKind;
use crate::reader;

/// One file's result, addressed by the job id its source gave it.
#[derive(Debug)]
pub struct Outcome {
    pub job: usize,
    /// The row (`spec.row_len()` values, dB) or why the file has none.
    pub row: Result<Vec<f32>, Reject>,
    /// The row's CMVN statistics, when the stage that made it summed them
    /// (`crate::cmvn`: the CPU workers do; the sink sums the others).
    pub stats: Option<crate::cmvn::RowStats>,
}

impl Outcome {
    /// A result with no statistics summed (the sink sums the row's).
    pub fn new(job: usize, row: Result<Vec<f32>, Reject>) -> Outcome {
        Outcome {
            job,
            row,
            stats: None,
        }
    }
}

/// Why a file produced no row.
#[derive(Debug, thiserror::Error)]
pub enum Reject {
    /// The reader could not load it (vanished, unreadable, too large, …).
    #[error(transparent)]
    Read(#[from] reader::Error),
    /// Its bytes are not a WAV file this decoder accepts (or at another rate).
    #[error(transparent)]
    Wav(#[from] wav::Error),
    /// Its bytes are not a FLAC file this decoder accepts, it breaks the
    /// `[input]` channel policy, its rate differs with `input.resample =
    /// "off"`, or it is neither WAV nor FLAC.
    #[error(transparent)]
    Input(clip::Error),
    /// The CUDA stage cannot stage it: bigger than one batch's input memory.
    #[error("file needs {bytes} bytes of CUDA staging memory, more than one batch holds")]
    Staging { bytes: usize },
    /// The CUDA device failed while the file was in flight (shared by every
    /// file of the failed batches, hence the `Arc`).
    #[error("CUDA backend failed: {0}")]
    Device(Arc<Cause>),
    /// A variable-length recipe has no row for it (shorter than one frame).
    #[error(transparent)]
    Frames(#[from] crate::frames::FrameError),
    /// Too large to read whole, and its row cannot be computed in pieces
    /// (the long-recording stage), or a piece failed.
    #[error(transparent)]
    Long(#[from] super::long_error::Error),
}

impl Reject {
    /// The kind this rejection is counted under.
    pub fn kind(&self) -> RejectKind {
        use reader::Error as R;
        use wav::Error as W;
        match self {
            Reject::Read(e) => match e {
                R::Open(_) | R::Stat(_) | R::Read(_) => RejectKind::Unreadable,
                R::NotAFile(_) => RejectKind::NotAFile,
                R::TooLarge { .. } | R::ArenaTooSmall { .. } => RejectKind::TooLarge,
                R::SizeChanged { .. } => RejectKind::Changed,
            },
            Reject::Wav(e) => match e {
                W::NotRiff { .. }
                | W::NotWave { .. }
                | W::TruncatedHeader { .. }
                | W::ChunkOverrun { .. }
                | W::TruncatedData { .. }
                | W::MissingFmt
                | W::MissingData
                | W::FmtTooSmall { .. }
                | W::ZeroChannels
                | W::ZeroSampleRate
                | W::BlockAlign { .. }
                | W::EmptyData { .. }
                | W::ExtensionOverrun { .. }
                | W::ValidBits { .. }
                | W::NonFinite { .. } => RejectKind::Malformed,
                W::Rf64 { .. }
                | W::UnsupportedCodec { .. }
                | W::UnknownSubFormat { .. }
                | W::UnsupportedBitDepth { .. } => RejectKind::Unsupported,
                W::SampleRate { .. } => RejectKind::SampleRate,
            },
            Reject::Input(e) => input_kind(e),
            Reject::Staging { .. } => RejectKind::TooLarge,
            Reject::Device(_) => RejectKind::Device,
            Reject::Frames(crate::frames::FrameError::TooShort { .. }) => RejectKind::TooShort,
            Reject::Long(super::long_error::Error::NotStreamable { .. }) => RejectKind::TooLarge,
            Reject::Long(super::long_error::Error::PartLength { .. }) => RejectKind::Changed,
        }
    }
}

impl From<clip::Error> for Reject {
    /// WAV problems keep their [`Reject::Wav`] form (same kinds and text as
    /// before `[input]` existed); everything else is [`Reject::Input`].
    fn from(e: clip::Error) -> Reject {
        match e {
            clip::Error::Wav(w) => Reject::Wav(w),
            e => Reject::Input(e),
        }
    }
}

/// The kind of a non-WAV input problem.
fn input_kind(e: &clip::Error) -> RejectKind {
    use flac::Error as F;
    match e {
        clip::Error::Wav(w) => Reject::Wav(w.clone()).kind(),
        clip::Error::Flac(f) => match f {
            F::UnsupportedBitDepth { .. } | F::Unsupported(_) | F::SampleFormat => {
                RejectKind::Unsupported
            }
            F::NotFlac { .. }
            | F::TruncatedHeader { .. }
            | F::NoStreamInfo { .. }
            | F::StreamInfoLength { .. }
            | F::AbsurdRate { .. }
            | F::AbsurdBlocks { .. }
            | F::AbsurdLength { .. }
            | F::Limit(_)
            | F::CutInMetadata { .. }
            | F::BlockPastEnd { .. }
            | F::ShortStream { .. }
            | F::EndsInside
            | F::BadCrc(_)
            | F::MissingFrames { .. }
            | F::Corrupt(_)
            | F::DecoderPanicked
            | F::NoTrack
            | F::FrameChannels { .. }
            | F::Read(_)
            | F::ResetRequired
            | F::Empty => RejectKind::Malformed,
        },
        clip::Error::Compressed(c) if c.is_unsupported() => RejectKind::Unsupported,
        clip::Error::Compressed(_) => RejectKind::Malformed,
        clip::Error::UnknownContainer { .. } => RejectKind::Malformed,
        clip::Error::Channels { .. } | clip::Error::Resample(_) => RejectKind::Unsupported,
        clip::Error::SampleRate { .. } => RejectKind::SampleRate,
        clip::Error::OffsetPastEnd { .. }
        | clip::Error::DurationMismatch { .. }
        | clip::Error::NoSuchChannel { .. } => RejectKind::BadSegment,
    }
}

/// A file that was not written, and why: one line of `rejected.jsonl`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    pub path: String,
    pub kind: RejectKind,
    pub reason: String,
    /// The manifest line (1-based) of a manifest build's item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
}

impl Rejection {
    pub fn new(path: String, why: &Reject) -> Rejection {
        Rejection {
            path,
            kind: why.kind(),
            reason: why.to_string(),
            line: None,
        }
    }

    /// The rejection of a row refused while it was written in pieces.
    pub fn refused(path: String, why: crate::model::Refusal) -> Rejection {
        Rejection {
            path,
            kind: why.kind,
            reason: why.reason,
            line: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_the_cause_and_display_keeps_the_sentence() {
        let r = Reject::from(wav::Error::SampleRate {
            found: 8000,
            expected: 4096,
        });
        assert_eq!(r.kind(), RejectKind::SampleRate);
        assert_eq!(r.to_string(), "sample rate 8000 Hz, expected 4096 Hz");
        let r = Reject::from(wav::Error::TruncatedHeader { len: 12 });
        assert_eq!(r.kind(), RejectKind::Malformed);
        let r = Reject::from(wav::Error::UnsupportedBitDepth {
            bits: 12,
            float: false,
        });
        assert_eq!(r.kind(), RejectKind::Unsupported);
        let r = Reject::from(reader::Error::TooLarge { size: 9, limit: 8 });
        assert_eq!(r.kind(), RejectKind::TooLarge);
        assert_eq!(
            r.to_string(),
            "file is 9 bytes, larger than io.max_file_bytes = 8"
        );
        let r = Reject::Device(Arc::new(Cause::Device(
            crate::compute::cuda::device::DeviceError::new(
                "cuLaunchKernel",
                "CUDA_ERROR_LAUNCH_FAILED",
            ),
        )));
        assert_eq!(r.kind(), RejectKind::Device);
        assert_eq!(
            r.to_string(),
            "CUDA backend failed: cuLaunchKernel failed: CUDA_ERROR_LAUNCH_FAILED"
        );
        let line = serde_json::to_string(&Rejection::new("a/b.wav".into(), &r)).unwrap();
        assert_eq!(
            line,
            r#"{"path":"a/b.wav","kind":"device","reason":"CUDA backend failed: cuLaunchKernel failed: CUDA_ERROR_LAUNCH_FAILED"}"#
        );
    }

    #[test]
    fn kind_names_are_unique_and_indexed_in_order() {
        for (i, k) in RejectKind::ALL.iter().enumerate() {
            assert_eq!(k.index(), i);
            let json = serde_json::to_string(k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.name()));
        }
    }
}
