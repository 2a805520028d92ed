//! The split files behind serve's sink: one SWMR [`Appender`] per split
//! under `output_dir`, rows in arrival order, label lists kept identical
//! across splits. [`Splits`] is owned by the append thread
//! ([`super::AppendSink`], the one [`crate::writer::Sink`] serve delivers
//! to) and is not a sink itself: the handle checks what a sink must (the
//! split is open, the row's length) before a row leaves the loop, so a row
//! reaches this table already placed.
//!
//! Before a row of a split is sent, the loop opens that split with the row
//! count the journal confirms ([`Splits::open`]): an existing file is cut
//! back to it (rows written before a crash and never confirmed), so the
//! journal and the files agree. Rows become durable at [`Splits::flush`];
//! the journal records them only after that.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::{AppendSpec, Appender};
use crate::config::Config;
use crate::frames::RowLayout;
use crate::writer;

/// Where one row goes: its split, the path recorded for it and its label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dest {
    /// Path relative to the input directory, `/`-separated (the `path` value).
    pub rel: String,
    pub split: String,
    pub label: Option<String>,
    /// The row's metadata, a JSON object's text (serve: the file's sidecar).
    pub meta: Option<Box<str>>,
}

/// The appenders of every split seen so far.
pub(super) struct Splits {
    output_dir: PathBuf,
    /// The spec every split file is created with (`split` filled per file).
    base: AppendSpec,
    appenders: HashMap<String, Appender>,
    labels: Vec<String>,
}

impl Splits {
    /// A sink writing `cfg`'s rows into `output_dir`, recording `input` (serve's
    /// drop directory) as the files' `input` attribute.
    /// `layout`: the recipe's, built by the caller.
    pub(super) fn new(
        output_dir: &Path,
        (cfg, layout): (&Config, RowLayout),
        input: &Path,
    ) -> Splits {
        Splits {
            output_dir: output_dir.to_path_buf(),
            base: AppendSpec {
                split: String::new(),
                layout,
                dtype: cfg.output.dtype,
                chunk_files: cfg.output.chunk_files,
                extra_attrs: vec![
                    ("input".into(), input.display().to_string()),
                    // `[input]` settings that decide the numbers, as build
                    // records them (docs/FORMAT.md).
                    (
                        "input_resample".into(),
                        cfg.input.policy.resample.name().into(),
                    ),
                    (
                        "input_channels".into(),
                        cfg.input.policy.channels.name().into(),
                    ),
                ],
            },
            appenders: HashMap::new(),
            labels: Vec::new(),
        }
    }

    /// Opens `split` (recovering to `confirmed` rows) or creates it, unless it
    /// is open already; label lists are kept identical across splits.
    pub(super) fn open(&mut self, split: &str, confirmed: usize) -> Result<(), writer::Error> {
        if self.appenders.contains_key(split) {
            return Ok(());
        }
        let spec = AppendSpec {
            split: split.to_string(),
            ..self.base.clone()
        };
        let (app, report) = Appender::open(&self.output_dir, &spec, &self.labels, confirmed)?;
        if report.rows_dropped > 0 {
            tracing::warn!(
                file = %app.path().display(),
                rows = report.rows_dropped,
                "Cut rows the journal never confirmed (written before a crash); their files \
                 will be ingested again."
            );
        }
        let new: Vec<String> = app
            .label_names()
            .iter()
            .filter(|n| !self.labels.contains(n))
            .cloned()
            .collect();
        for name in new {
            self.add_label(&name)?;
        }
        if app.label_names() != self.labels.as_slice() {
            // Only files written before label tables were reconciled on open.
            tracing::warn!(
                file = %app.path().display(),
                "This split's committed rows use its labels in another order than the other \
                 splits; label ids of this split follow its own label_names."
            );
        }
        self.appenders.insert(split.to_string(), app);
        Ok(())
    }

    fn add_label(&mut self, name: &str) -> Result<(), writer::Error> {
        if !self.labels.iter().any(|l| l == name) {
            self.labels.push(name.to_string());
        }
        for app in self.appenders.values_mut() {
            app.label_id(name)?;
        }
        Ok(())
    }

    /// Makes every appended row durable (HDF5 flush + fdatasync per split).
    pub(super) fn flush(&mut self) -> Result<(), writer::Error> {
        for app in self.appenders.values_mut() {
            app.flush()?;
        }
        Ok(())
    }

    /// Closes every split file (after a final flush); the sink can open them
    /// again afterwards. Every file is closed even when one fails.
    pub(super) fn close_all(&mut self) -> Result<(), writer::Error> {
        let mut result = Ok(());
        for (_, app) in self.appenders.drain() {
            if let Err(e) = app.close() {
                result = result.and(Err(e));
            }
        }
        self.labels.clear();
        result
    }

    /// Closes every split file without writing rows appended since the last
    /// flush ([`super::Appender::abandon`]): after a failed write, the caller
    /// forgets those rows and ingests their files again.
    pub(super) fn abandon_all(&mut self) {
        for (_, app) in self.appenders.drain() {
            app.abandon();
        }
        self.labels.clear();
    }

    /// Rows per split (written, not necessarily flushed).
    pub(super) fn rows(&self) -> BTreeMap<String, usize> {
        self.appenders
            .iter()
            .map(|(s, a)| (s.clone(), a.rows()))
            .collect()
    }
}

/// The error for a row whose split was not opened first.
pub(super) fn not_opened(split: &str) -> writer::Error {
    writer::PlanError::NotOpened {
        split: split.to_string(),
    }
    .into()
}

impl Splits {
    /// Appends `row` for `file` to its split (opened before); returns its
    /// index.
    pub(super) fn append(
        &mut self,
        file: &Dest,
        row: &[f32],
        stats: Option<crate::cmvn::RowStats>,
    ) -> Result<usize, writer::Error> {
        let (app, label_id) = self.appender_for(file)?;
        let target = (file.rel.as_str(), label_id, file.meta.as_deref());
        app.append_with_stats(target, row, stats)
    }

    /// The appender of `file`'s split (opened before) and its label's id,
    /// the label added where it is new.
    fn appender_for(&mut self, file: &Dest) -> Result<(&mut super::Appender, i32), writer::Error> {
        if let Some(l) = &file.label {
            self.add_label(l)?;
        }
        let app = self
            .appenders
            .get_mut(&file.split)
            .ok_or_else(|| not_opened(&file.split))?;
        let label_id = match &file.label {
            Some(l) => app.label_id(l)?,
            None => -1,
        };
        Ok((app, label_id))
    }

    /// [`Splits::append`] of a row in pieces (`Ok(Err(_))`: refused
    /// half-way, nothing of it kept); `piece` is the buffer for them.
    pub(super) fn append_pieces(
        &mut self,
        file: &Dest,
        row: &mut dyn crate::writer::RowPieces,
        piece: &mut Vec<f32>,
    ) -> Result<Result<usize, crate::model::Refusal>, writer::Error> {
        let (app, label_id) = self.appender_for(file)?;
        let target = (file.rel.as_str(), label_id, file.meta.as_deref());
        app.append_pieces(target, row, piece)
    }
}
