//! Recordings too long to hold whole, computed in pieces.
//!
//! A whole-file item larger than `io.max_file_bytes` is not read into memory
//! (the reader refuses it as too large, reading nothing). Under a Kaldi
//! recipe (fbank, MFCC) its row is computed from parts of the recording
//! instead, one after the other, by the sink's thread when the row's turn
//! comes (`writer::RowPieces`), so at most one part of samples and one piece
//! of frames are held whatever the recording's length:
//!
//! * **Parts** of [`PART_SECONDS`] seconds are read as the byte ranges a
//!   manifest segment of those seconds reads (`plan::container::Recording`:
//!   a WAV's samples behind its rewritten header, a FLAC's frames from a seek
//!   point or found by a search, an MP3's, Ogg's or MP4's frames from a
//!   pre-roll) and decoded by the clip decoder as such a segment, which gives
//!   the whole-file decode's samples bit for bit (docs/FORMAT.md,
//!   "Manifests"). The part boundaries are whole seconds, so the samples cut
//!   there are exact at any integer rate.
//! * **Pieces** of [`PIECE_FRAMES`] frames are computed from the samples
//!   their frames read (`KaldiPlan::piece`, window − shift samples of
//!   overlap; snip_edges = false reflects at both ends of the whole
//!   waveform, whose length is known up front), so every row value equals
//!   the one-piece computation's bit for bit, the dither's noise included
//!   (one scratch, seeded once, draws frame after frame).
//!
//! What cannot be streamed exactly stays a `too_large` rejection, with the
//! reason: a recording at another rate than the recipe's (resampling runs
//! over the whole signal), a container whose parts cannot be read alone, a
//! stream that does not state its length, or a manifest segment (not a
//! whole file) over the limit.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::compute::Reject;
use crate::compute::cpu::HostRow;
use crate::decode::clip::{self, ClipDecoder, Policy};
use crate::decode::policy::Resample;
use crate::dsp::kaldi::{KaldiPlan, KaldiScratch};
use crate::frames::{FrameError, FrameRecipe, Input, RecipePlan};
use crate::model::{Refusal, Segment};
use crate::plan::container::Recording;
use crate::reader;
use crate::runtime::telemetry::Local;
use crate::writer::RowPieces;

pub use crate::compute::long_error::{self as error, Error};

/// Seconds of audio read and decoded at a time (16 kHz mono: 3.8 MB of
/// samples).
pub const PART_SECONDS: u32 = 60;

/// Frames computed at a time (10 ms frames: one minute, 1.9 MB of an
/// 80-bin row).
pub const PIECE_FRAMES: usize = 6000;

/// What computes the rows of one run's long recordings, on the sink's
/// thread: Kaldi rows in pieces, or the row of a recipe that reads only a
/// recording's first seconds (librosa's clip, Whisper's 30 s) from them.
pub struct Streamer {
    how: How,
    base: Base,
}

/// What every long recording of a run is checked against.
#[derive(Clone, Debug)]
struct Base {
    policy: Policy,
    rate: u32,
    recipe: String,
}

enum How {
    /// Kaldi fbank and MFCC: every frame, in pieces.
    Pieces(Arc<KaldiPlan>),
    /// A row of the first `seconds` of the recording, computed as the
    /// workers compute it (the host is made at the first such file).
    First {
        seconds: u32,
        host: Mutex<Option<Box<HostRow>>>,
        make: Box<dyn Fn() -> HostRow + Send + Sync>,
    },
}

impl std::fmt::Debug for Streamer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streamer")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// What [`Streamer::open`] makes of a long recording.
pub enum Opened {
    /// Its row, to be pulled piece by piece.
    Pieces(Box<LongRow>),
    /// Its whole row (a recipe that reads only its first seconds).
    Row(Vec<f32>),
}

impl Streamer {
    /// The streamer of a run of `recipe` under `policy`: Kaldi rows in
    /// pieces; the row of a recipe that reads a bounded start of a file
    /// (librosa's clip, Whisper's 30 s) from those first seconds; None for a
    /// recipe that reads whole files and cannot compute in pieces (tests').
    pub fn for_recipe(recipe: &Arc<dyn FrameRecipe>, policy: Policy) -> Option<Streamer> {
        let layout = recipe.layout();
        let rate = layout.sample_rate();
        let how = match (recipe.plan(), layout.input()) {
            (RecipePlan::Kaldi(plan), _) => How::Pieces(plan),
            (_, Input::Clip(samples) | Input::Natural { max: Some(samples) }) => {
                let recipe = Arc::clone(recipe);
                first_seconds(samples, rate, move || HostRow::new(recipe.as_ref(), policy))
            }
            (_, Input::Natural { max: None }) => return None,
        };
        Some(Streamer {
            how,
            base: Base {
                policy,
                rate,
                recipe: layout.recipe().to_string(),
            },
        })
    }

    /// The row of the recording at `path`, whose whole-file read was refused
    /// as `why` (too large); `seg` is a manifest item's (its channel and
    /// stated duration), `seed` the file's dither seed (its job id, as the
    /// workers use). A row of the first seconds is computed here; a Kaldi
    /// row is only described: nothing of the file is read until the sink
    /// pulls its first piece (a build may hold many such rows for ordering,
    /// and each costs a few hundred bytes until then).
    pub fn open(
        &self,
        path: &Path,
        why: &reader::Error,
        seg: Option<&Segment>,
        seed: u64,
    ) -> Result<Opened, Reject> {
        let (size, limit) = match why {
            reader::Error::TooLarge { size, limit } => (*size, *limit),
            _ => unreachable!("only a file refused as too large is streamed"),
        };
        let file = File {
            path: path.to_path_buf(),
            size,
            limit,
            seg: seg.copied(),
            seed,
        };
        match &self.how {
            How::Pieces(plan) => Ok(Opened::Pieces(Box::new(LongRow {
                start: Some((self.base.clone(), Arc::clone(plan), file)),
                streaming: None,
            }))),
            How::First {
                seconds,
                host,
                make,
            } => {
                let mut rec = self.base.recording(&file)?;
                let first = Segment {
                    offset_s: 0.0,
                    duration_s: Some(f64::from(*seconds)),
                    channel: seg.and_then(|s| s.channel),
                    ..Segment::default()
                };
                let (range, cut) = rec
                    .range(&first)
                    .ok_or_else(|| file.refuse("its first seconds cannot be read alone".into()))?;
                let mut bytes = Vec::new();
                reader::read_range(path, &range, &mut bytes)?;
                let mut host = host
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let host = host.get_or_insert_with(|| Box::new(make()));
                let (mut row, mut local) = (Vec::new(), Local::default());
                host.row(&bytes, Some(&cut), seed, &mut row, &mut local)?;
                Ok(Opened::Row(row))
            }
        }
    }
}

/// One long recording as [`Streamer::open`] was given it.
#[derive(Debug)]
struct File {
    path: PathBuf,
    size: u64,
    limit: u64,
    seg: Option<Segment>,
    seed: u64,
}

impl File {
    /// The rejection of this file for `why` it cannot be streamed.
    fn refuse(&self, why: String) -> Reject {
        Reject::Long(Error::NotStreamable {
            size: self.size,
            limit: self.limit,
            why,
        })
    }
}

impl Base {
    /// The recording's header or index, checked: a whole recording, a
    /// container whose parts can be read alone, at the recipe's rate.
    fn recording(&self, file: &File) -> Result<Recording, Reject> {
        if file.seg.is_some_and(|s| !s.is_whole()) {
            return Err(file
                .refuse("it is a segment of the recording, and only whole recordings are".into()));
        }
        let rec = Recording::open(&file.path).ok_or_else(|| {
            file.refuse(
                "it is not a WAV, FLAC, MP3, Ogg or MP4 recording whose parts can be read \
                 alone"
                    .into(),
            )
        })?;
        let rate = rec.sample_rate();
        // With resampling off, the decoder refuses the rate as for any file.
        if rate != self.rate && self.policy.resample != Resample::Off {
            return Err(file.refuse(format!(
                "it is at {rate} Hz and {} computes at {} Hz: resampling runs over the whole \
                 signal",
                self.recipe, self.rate
            )));
        }
        Ok(rec)
    }

    /// A Kaldi row's state once its first piece is asked for: the
    /// recording's length and parts checked.
    fn stream(&self, plan: &Arc<KaldiPlan>, file: &File) -> Result<Streaming, Reject> {
        let mut rec = self.recording(file)?;
        let (seg, refuse) = (file.seg.as_ref(), |why| file.refuse(why));
        let rate = rec.sample_rate();
        let total = rec.frames().ok_or_else(|| {
            refuse("the stream does not state its length (STREAMINFO, LAME tag, granule)".into())
        })?;
        let total = usize::try_from(total).map_err(|_| refuse("its length overflows".into()))?;
        if let Some(stated) = seg.and_then(|s| s.expect_s) {
            let file_s = total as f64 / f64::from(rate);
            if (file_s - stated).abs() > Segment::DURATION_TOLERANCE_S {
                return Err(clip::Error::DurationMismatch { stated, file_s }.into());
            }
        }
        if let Err(e) = plan.check_length(total) {
            return Err(Reject::Frames(FrameError::TooShort {
                recipe: self.recipe.clone(),
                samples: e.samples,
                min_samples: e.min_samples,
            }));
        }
        let parts = total.div_ceil(part_samples(rate));
        if rec.plans_in_memory() {
            for k in 0..parts {
                if rec.range(&part(k, seg)).is_none() {
                    return Err(refuse(format!(
                        "its part at {} s cannot be read alone",
                        k * PART_SECONDS as usize
                    )));
                }
            }
        }
        let mut scratch = plan.scratch();
        scratch.seed(file.seed);
        Ok(Streaming {
            path: file.path.clone(),
            rec,
            channel: seg.and_then(|s| s.channel),
            decoder: ClipDecoder::new(rate, self.policy),
            plan: Arc::clone(plan),
            scratch,
            rate,
            total,
            frames: plan.num_frames(total),
            next_frame: 0,
            samples: Vec::new(),
            samples_from: 0,
            parts_read: 0,
            bytes: Vec::new(),
            part: Vec::new(),
        })
    }
}

/// [`How::First`] of a recipe that reads `samples` samples at `rate`.
fn first_seconds(
    samples: usize,
    rate: u32,
    make: impl Fn() -> HostRow + Send + Sync + 'static,
) -> How {
    How::First {
        seconds: u32::try_from(samples.div_ceil(rate.max(1) as usize)).unwrap_or(u32::MAX),
        host: Mutex::new(None),
        make: Box::new(make),
    }
}

/// Samples in one part at `rate`.
fn part_samples(rate: u32) -> usize {
    PART_SECONDS as usize * rate as usize
}

/// The segment of part `k`: whole seconds, so its samples are exact.
fn part(k: usize, item: Option<&Segment>) -> Segment {
    Segment {
        offset_s: (k * PART_SECONDS as usize) as f64,
        duration_s: Some(f64::from(PART_SECONDS)),
        channel: item.and_then(|s| s.channel),
        ..Segment::default()
    }
}

/// One long recording's Kaldi row, computed piece by piece
/// ([`RowPieces`]); nothing is read before the first piece is asked for.
pub struct LongRow {
    /// What opens it, until the first piece.
    start: Option<(Base, Arc<KaldiPlan>, File)>,
    streaming: Option<Streaming>,
}

impl LongRow {
    /// The next piece (opening the recording first), or why there is none.
    fn next_piece(&mut self, out: &mut Vec<f32>) -> Result<bool, Reject> {
        if let Some((base, plan, file)) = self.start.take() {
            self.streaming = Some(base.stream(&plan, &file)?);
        }
        match &mut self.streaming {
            Some(s) => s.piece(out),
            None => unreachable!("a LongRow is opened at its first piece"),
        }
    }
}

impl RowPieces for LongRow {
    fn next(&mut self, out: &mut Vec<f32>) -> Result<bool, Refusal> {
        self.next_piece(out)
            .map_err(|why| Refusal::of(why.kind(), &why))
    }
}

/// A Kaldi row under way: the recording, the samples held, the frames done.
struct Streaming {
    path: PathBuf,
    rec: Recording,
    channel: Option<u16>,
    decoder: ClipDecoder,
    plan: Arc<KaldiPlan>,
    scratch: KaldiScratch,
    rate: u32,
    /// Samples of the whole waveform.
    total: usize,
    /// Frames of the row.
    frames: usize,
    next_frame: usize,
    /// Decoded samples from `samples_from` on.
    samples: Vec<f32>,
    samples_from: usize,
    parts_read: usize,
    bytes: Vec<u8>,
    part: Vec<f32>,
}

impl std::fmt::Debug for Streaming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streaming")
            .field("path", &self.path)
            .field("total", &self.total)
            .field("frames", &self.frames)
            .field("next_frame", &self.next_frame)
            .finish_non_exhaustive()
    }
}

impl Streaming {
    /// Reads and decodes the next part onto the held samples.
    fn read_part(&mut self) -> Result<(), Reject> {
        let k = self.parts_read;
        let at = k * part_samples(self.rate);
        // Precondition: parts are read in order, and only while the
        // waveform has samples past those held.
        assert_eq!(at, self.samples_from + self.samples.len());
        assert!(at < self.total, "part {k} starts past the recording's end");
        let expected = part_samples(self.rate).min(self.total - at);
        let seg = Segment {
            channel: self.channel,
            ..part(k, None)
        };
        let at_s = (k * PART_SECONDS as usize) as u64;
        let (range, cut) = self.rec.range(&seg).ok_or(Error::PartLength {
            at_s,
            got: 0,
            expected,
        })?;
        reader::read_range(&self.path, &range, &mut self.bytes)?;
        self.decoder
            .decode_natural_segment(&self.bytes, Some(&cut), None, &mut self.part)?;
        if self.part.len() != expected {
            return Err(Error::PartLength {
                at_s,
                got: self.part.len(),
                expected,
            }
            .into());
        }
        self.samples.extend_from_slice(&self.part);
        self.parts_read += 1;
        debug_assert!(self.samples_from + self.samples.len() <= self.total);
        Ok(())
    }

    /// The next piece's frames into `out`; false once the row is complete.
    fn piece(&mut self, out: &mut Vec<f32>) -> Result<bool, Reject> {
        if self.next_frame >= self.frames {
            out.clear();
            return Ok(false);
        }
        let run = self.next_frame..(self.next_frame + PIECE_FRAMES).min(self.frames);
        let (piece, need) = self.plan.piece(self.total, run.clone());
        // The samples a piece needs lie inside the waveform and never
        // before those already dropped (pieces go forward).
        assert!(need.start <= need.end && need.end <= self.total);
        assert!(
            need.start >= self.samples_from,
            "a piece needs dropped samples"
        );
        // Samples before this piece's are never read again.
        let drop = need
            .start
            .saturating_sub(self.samples_from)
            .min(self.samples.len());
        self.samples.drain(..drop);
        self.samples_from += drop;
        while self.samples_from + self.samples.len() < need.end {
            self.read_part()?;
        }
        let from = need.start - self.samples_from;
        self.plan
            .compute_piece(&self.samples[from..], &piece, &mut self.scratch, out);
        // Postcondition: the piece is exactly its run's frames.
        assert_eq!(out.len(), run.len() * self.plan.num_bins());
        self.next_frame = run.end;
        Ok(true)
    }
}
