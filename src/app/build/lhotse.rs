//! lhotse cuts that lhotse loads by itself (`output.lhotse`, `build
//! --lhotse`): `OUT/<split>.cuts.jsonl.gz`, each input cut that became a row
//! with its `features` set, written in the manifest write-back's one pass.
//!
//! The storage is lhotse's `numpy_hdf5`: `storage_path` the split file,
//! `storage_key` the row's view `lhotse/<row>` (`writer::vds::views`), a
//! virtual dataset over the row's frames of `features`, so lhotse's stock
//! reader (`h5py.File(path)[key][a:b]`) reads the stored bytes, with no copy
//! and no error. docs/FORMAT.md, "lhotse cuts", says why this storage.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::Error;
use crate::frames::FrameLayout;
use crate::model::Rounding;
use crate::plan::manifest;
use crate::plan::shard::Shard;
use crate::runtime::durable::Partial;
use crate::writer::vds;

/// What every cut's `features` shares: the recipe's lhotse type and frames.
pub(super) struct Cuts {
    /// lhotse's extractor name: `kaldi-fbank` (lhotse's `Fbank`) or
    /// `kaldi-mfcc` (`Mfcc`).
    kind: String,
    bins: usize,
    frame_shift: f64,
    sampling_rate: u32,
}

/// `OUT/<split>.cuts.jsonl.gz`, or a shard's
/// `<split>.shard-K-of-N.cuts.jsonl.gz`.
pub(super) fn file_name(split: &str, shard: Option<Shard>) -> String {
    match shard {
        Some(s) => {
            let jsonl = s.manifest_file_name(split);
            let stem = jsonl.strip_suffix(".jsonl").unwrap_or(&jsonl);
            format!("{stem}.cuts.jsonl.gz")
        }
        None => format!("{split}.cuts.jsonl.gz"),
    }
}

impl Cuts {
    /// lhotse's `compute_num_frames(duration, frame_shift, sampling_rate)`:
    /// Python's `round` (half to even) of the samples and of the hop, then
    /// `(samples + hop // 2) // hop`.
    fn num_frames(&self, duration: f64) -> u32 {
        let rate = f64::from(self.sampling_rate);
        let samples = (duration * rate).round_ties_even() as u64;
        let hop = ((self.frame_shift * rate).round_ties_even() as u64).max(1);
        ((samples + hop / 2) / hop) as u32
    }

    /// The cuts of a build whose rows are `layout`'s (config has checked
    /// that the recipe is one lhotse counts frames for).
    pub(super) fn new(layout: &FrameLayout) -> Cuts {
        Cuts {
            kind: layout.recipe.clone(),
            bins: layout.bins,
            frame_shift: layout.frame_step_seconds,
            sampling_rate: layout.sample_rate,
        }
    }

    /// A writer of `path` whose cuts name the split file `storage` (None:
    /// the split has no rows, so no file).
    pub(super) fn writer(
        &self,
        path: &Path,
        storage: Option<&Path>,
    ) -> Result<CutsWriter<'_>, Error> {
        let file = Partial::create(path).map_err(|source| Error::Output {
            path: path.to_path_buf(),
            source,
        })?;
        let gz = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
        Ok(CutsWriter {
            cuts: self,
            storage: storage.map(Path::to_path_buf),
            gz,
            to: path.to_path_buf(),
            line: Vec::new(),
            limits: Vec::new(),
        })
    }
}

/// Describes the recording `rec` at `rate` as lhotse's
/// `Recording.resample(rate)` does, where its rate is another: a `Resample`
/// transform appended, `num_samples` = `compute_num_samples(duration,
/// rate)` (half up), `duration` = that over `rate`. lhotse holds a cut's
/// features and its recording to one rate (`lhotse.qa.validate`), and the
/// row was computed at the recipe's. Returns whether it changed `rec`.
fn resample(rec: &mut Map<String, Value>, rate: u32) -> bool {
    let Some(from) = rec.get("sampling_rate").and_then(Value::as_u64) else {
        return false;
    };
    if from == u64::from(rate) {
        return false;
    }
    let seconds = rec.get("duration").and_then(Value::as_f64).unwrap_or(0.0);
    let samples = Rounding::Lhotse.samples(seconds, rate);
    let transform = serde_json::json!({
        "name": "Resample",
        "kwargs": {"source_sampling_rate": from, "target_sampling_rate": rate},
    });
    match rec.get_mut("transforms") {
        Some(Value::Array(t)) => t.push(transform),
        _ => {
            rec.insert("transforms".to_string(), Value::Array(vec![transform]));
        }
    }
    rec.insert("sampling_rate".to_string(), Value::from(rate));
    rec.insert("num_samples".to_string(), Value::from(samples));
    rec.insert(
        "duration".to_string(),
        Value::from(samples as f64 / f64::from(rate)),
    );
    true
}

/// Why a row's cut could not be written: the row (in its split) and what
/// was wrong with its line.
#[derive(Debug, thiserror::Error)]
pub enum CutError {
    #[error("writing the cuts: {0}")]
    Io(#[from] std::io::Error),
    #[error("row {row}: the line is no longer a JSON object: {source}")]
    NotJson {
        row: usize,
        source: serde_json::Error,
    },
    #[error(
        "row {row}: the line is not a lhotse cut (no `recording`); --lhotse writes cuts for \
         lhotse CutSet manifests"
    )]
    NotACut { row: usize },
    #[error("row {row}: the cut has no `duration` in seconds")]
    NoDuration { row: usize },
    #[error(
        "row {row}: its row has {frames} frames where lhotse counts {count} for {duration} s; \
         lhotse would refuse to load it"
    )]
    Frames {
        row: usize,
        frames: u32,
        count: u32,
        duration: f64,
    },
}

/// One split's cuts file, written row by row in row order.
pub(super) struct CutsWriter<'a> {
    cuts: &'a Cuts,
    storage: Option<PathBuf>,
    gz: flate2::write::GzEncoder<Partial>,
    to: PathBuf,
    line: Vec<u8>,
    /// Per row so far, lhotse's count of its cut's frames: where its view
    /// stops.
    limits: Vec<u32>,
}

impl CutsWriter<'_> {
    /// Row `row`'s cut: its manifest line `line` (a lhotse cut, as planned)
    /// with `features` describing the row's `frames` frames.
    pub(super) fn cut(&mut self, row: usize, line: &[u8], frames: u32) -> Result<(), CutError> {
        let mut obj: Map<String, Value> =
            serde_json::from_slice(line).map_err(|source| CutError::NotJson { row, source })?;
        if !obj.contains_key("recording") {
            return Err(CutError::NotACut { row });
        }
        let duration = obj
            .get("duration")
            .and_then(Value::as_f64)
            .ok_or(CutError::NoDuration { row })?;
        let count = self.cuts.num_frames(duration);
        if frames.abs_diff(count) > 1 {
            return Err(CutError::Frames {
                row,
                frames,
                count,
                duration,
            });
        }
        debug_assert_eq!(row, self.limits.len(), "rows come in order");
        self.limits.push(count);
        let features = self.features(row, &obj, count);
        let resampled = match obj.get_mut("recording") {
            Some(Value::Object(rec)) => resample(rec, self.cuts.sampling_rate),
            _ => false,
        };
        self.line.clear();
        if obj.contains_key("features") || resampled {
            // An input cut with features of its own (they are replaced), or
            // whose recording is now described at the recipe's rate.
            obj.insert("features".to_string(), features);
            serde_json::to_writer(&mut self.line, &obj).map_err(std::io::Error::from)?;
        } else {
            // The line as written, with `features` spliced in before its
            // closing brace (the line parsed as an object: it ends with it).
            let body = manifest::object_body(line).ok_or(CutError::NotACut { row })?;
            self.line.extend_from_slice(body);
            self.line.extend_from_slice(b", \"features\": ");
            serde_json::to_writer(&mut self.line, &features).map_err(std::io::Error::from)?;
            self.line.push(b'}');
        }
        self.line.push(b'\n');
        Ok(self.gz.write_all(&self.line)?)
    }

    /// The `features` of row `row` of the cut `obj`: lhotse's `Features`
    /// fields, spanning the cut (`start`, `duration`), so that
    /// `cut.load_features()` reads all of the view. `frames` is lhotse's
    /// count (`lhotse.qa.validate` holds `num_frames` to it); the row's own
    /// may be one more (its view stops at the count) or one less (lhotse's
    /// `load_features` repeats the last frame), where a resampled
    /// recording's length rounds otherwise.
    fn features(&self, row: usize, obj: &Map<String, Value>, frames: u32) -> Value {
        let c = self.cuts;
        let start = obj.get("start").cloned().unwrap_or(Value::from(0.0));
        let recording_id = obj
            .get("recording")
            .and_then(|r| r.get("id"))
            .cloned()
            .unwrap_or(Value::Null);
        let channels = match obj.get("channel") {
            None | Some(Value::Null) => Value::from(0),
            Some(v) => v.clone(),
        };
        serde_json::json!({
            "type": c.kind,
            "num_frames": frames,
            "num_features": c.bins,
            "frame_shift": c.frame_shift,
            "sampling_rate": c.sampling_rate,
            "start": start,
            "duration": obj.get("duration").cloned().unwrap_or(Value::Null),
            "storage_type": "numpy_hdf5",
            "storage_path": self.storage.as_deref().map(Path::to_string_lossy),
            "storage_key": format!("{}/{row}", vds::VIEWS),
            "recording_id": recording_id,
            "channels": channels,
        })
    }

    /// Gives the split file its views, then ends the gzip stream, syncs
    /// and renames the cuts file to its name: a cuts file is there only
    /// once every key it names is.
    pub(super) fn finish(self) -> Result<(), Error> {
        if let Some(h5) = &self.storage {
            let views = |source| Error::Views {
                path: h5.clone(),
                source,
            };
            let file = hdf5::File::open_rw(h5).map_err(|e| views(e.into()))?;
            vds::views(&file, &self.limits).map_err(views)?;
            file.close().map_err(|e| views(e.into()))?;
        }
        let output = |source| Error::Output {
            path: self.to.clone(),
            source,
        };
        self.gz.finish().and_then(Partial::finish).map_err(output)
    }
}
