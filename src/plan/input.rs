//! What `build` reads, planned: every input the command line can name
//! (a tree, NeMo and lhotse manifests, NeMo tarred audio, stored corpora)
//! turned into the one item plan the stages run on, in the order a build
//! takes the steps.
//!
//! * [`Input::resolve`]: what the command line's paths name.
//! * [`read`], [`read_tarred`], [`read_stored`]: the plan of each input
//!   but a tree (whose walk is [`super::tree`]): one split per manifest or
//!   set, items in line or member order, the items left out as rejections
//!   (with their line numbers, for manifests), and the [`Items`] a plan of
//!   a tree does not have.
//! * [`spill_dir`]: the folder (`OUT/.melforge-spill`, a shard's own)
//!   where the prepare step writes one decode of each compressed recording
//!   that cannot be cut into parts ([`super::manifest::spill`]), and the
//!   gzipped shards and parquet cells are spilled; the build holds its
//!   guard until it ends, which removes it, on error too.
//! * [`Items::describe`]: each job's segment and byte range, handed to the
//!   readers with the job; [`Items::meta`] and [`Items::lines`]: what the
//!   writer stores beside the rows; [`Items::spans`]: where each line lies,
//!   for the write-back (`app::build`).
//!
//! A shard (`--shard K/N`, [`Shard`]) takes the contiguous block
//! [`Shard::range`] of each manifest's lines (all lines, blank and bad
//! ones included, so every line belongs to exactly one shard and its
//! rejection to that shard's log), or of a stored corpus's files, whole.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use super::manifest::{self, FirstSeconds, Limits, Manifests, Span, SpillDir, Stamp};
use super::shard::Shard;
use super::spool::{Spool, Spooled};
use super::{Extents, Job, PackedText, Plan};
use crate::compute::Rejection;
use crate::config::Config;
use crate::model::Segment;
use crate::reader::ReadJob;

/// Why an input cannot be planned at all.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "no sample found in {}: the shards or parquet files hold no audio",
        inputs.join(" ")
    )]
    EmptyStored { inputs: Vec<String> },
    #[error(transparent)]
    Stored(#[from] super::Error),
    #[error(transparent)]
    Manifest(#[from] manifest::Error),
    #[error(
        "manifest {0} would be split `rejected`, whose written-back manifest would be the \
         rejection log rejected.jsonl: rename it"
    )]
    RejectedSplit(PathBuf),
    #[error(
        "cannot write {path}, where the manifest lines left out go as they are found: {source}"
    )]
    Spool {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What the planner read beside the readers: headers, seek indexes, tar
/// headers and sibling members, parquet pages, and what it spilled.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct PlanReport {
    pub bytes_read: u64,
    pub spilled: usize,
    pub spill_bytes: u64,
}

/// What `build` reads: a directory tree, manifests (one split each), or
/// stored corpora (WebDataset shards, parquet files; one split per set).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    Tree(PathBuf),
    Manifests(Vec<PathBuf>),
    Stored(Vec<super::Set>),
    /// NeMo's tarred audio: manifests whose `audio_filepath`s are members
    /// of the tar shards the pattern names (`tarred_audio_filepaths`).
    Tarred {
        manifests: Vec<PathBuf>,
        shards: String,
    },
}

impl Input {
    /// One directory is a tree; anything else is a list of manifests.
    pub fn of(paths: &[PathBuf]) -> Input {
        match paths {
            [one] if !manifest::is_manifest(one) => Input::Tree(one.clone()),
            many => Input::Manifests(many.to_vec()),
        }
    }

    /// What the command line's `paths` name: stored corpora when they are
    /// patterns, tar shards or parquet files (`super::stored`; `split`
    /// names the one set's split), else [`Input::of`].
    pub fn resolve(paths: &[PathBuf], split: Option<&str>) -> Result<Input, super::Error> {
        match super::sets_of(paths, split)? {
            Some(sets) => Ok(Input::Stored(sets)),
            None => Ok(Input::of(paths)),
        }
    }

    /// The path recorded as the `input` attribute: the tree, or the first
    /// manifest.
    pub fn shown(&self) -> &Path {
        match self {
            Input::Tree(p) => p,
            Input::Manifests(m) | Input::Tarred { manifests: m, .. } => {
                m.first().map_or(Path::new(""), |p| p.as_path())
            }
            Input::Stored(sets) => sets
                .first()
                .and_then(|s| s.files.first())
                .map_or(Path::new(""), |p| p.as_path()),
        }
    }
}

/// A manifest build's items beyond the plan, by path index (one per job).
#[derive(Clone, Debug)]
pub struct Items {
    /// By path index: the item's 1-based manifest line (a stored item's
    /// position in its file).
    lines: Arc<Vec<u32>>,
    meta: Arc<PackedText>,
    extents: Extents,
    /// By split: its items' path indices (seq q is `start + q`).
    items_of: Vec<Range<u32>>,
    /// By path index: where its manifest line lies (empty for a stored
    /// corpus), and by split, its manifest as planned: the write-back.
    spans: Arc<Vec<Span>>,
    stamps: Vec<Option<Stamp>>,
    /// What planning read and spilled.
    pub planned: PlanReport,
    /// Whether `lines` are manifest lines (stored into `line`, and on
    /// rejections); a stored corpus's positions are not: a shard's rows
    /// restart at each file, so `merge` could not order them.
    has_lines: bool,
}

impl Items {
    /// The plan of `m` and its items; `has_lines`: its positions are
    /// manifest lines.
    fn split(m: Manifests, has_lines: bool) -> (Plan, Items) {
        let items = Items {
            lines: m.lines,
            meta: m.meta,
            extents: m.extents,
            items_of: m.items_of,
            spans: m.spans,
            stamps: m.stamps,
            planned: PlanReport {
                bytes_read: m.header_bytes,
                spilled: m.spilled,
                spill_bytes: m.spill_bytes,
            },
            has_lines,
        };
        (m.plan, items)
    }

    /// Job `j`'s segment, if it has one.
    pub fn segment(&self, j: &Job) -> Option<Segment> {
        self.extents.segment(j.path as usize)
    }

    /// Puts job `j`'s segment and byte range on the read job.
    pub fn describe(&self, j: &Job, job: &mut ReadJob) {
        job.segment = self.extents.segment(j.path as usize);
        job.range = self.extents.range(j.path as usize);
    }

    /// By path index: each item's metadata, a JSON object.
    pub fn meta(&self) -> &Arc<PackedText> {
        &self.meta
    }

    /// By path index: each item's manifest line, when its input has lines
    /// (a stored corpus's positions are not lines).
    pub fn lines(&self) -> Option<&Arc<Vec<u32>>> {
        self.has_lines.then_some(&self.lines)
    }

    /// By split: its items' path indices (a split's `seq` q is path index
    /// `start + q`).
    pub fn items_of(&self) -> &[Range<u32>] {
        &self.items_of
    }

    /// By path index: where its line's text lies in its manifest (empty
    /// for a stored corpus).
    pub fn spans(&self) -> &[Span] {
        &self.spans
    }

    /// By split: its manifest file as it was planned.
    pub fn stamps(&self) -> &[Option<Stamp>] {
        &self.stamps
    }

    /// Job `j`'s manifest line, when its input has lines.
    pub fn line(&self, j: &Job) -> Option<u64> {
        self.has_lines
            .then(|| u64::from(self.lines[j.path as usize]))
    }
}

/// What [`read`] gives: the plan, the lines left out, the seconds it took,
/// and the items (the shape of a tree walk's result, items added).
pub type Read = (Plan, LeftOut, f64, Option<Arc<Items>>);

/// What planning left out: held in memory, and a manifest build's lines
/// spooled to a file as they were found ([`super::spool`]).
#[derive(Debug, Default)]
pub struct LeftOut {
    pub held: Vec<Rejection>,
    pub spooled: Option<Spooled>,
}

impl From<Vec<Rejection>> for LeftOut {
    fn from(held: Vec<Rejection>) -> LeftOut {
        LeftOut {
            held,
            spooled: None,
        }
    }
}

/// The spill folder of a manifest build into `out` (`shard`'s own), its
/// stale copy removed; None for a tree, or with `input.spill_max_mib = 0`.
pub fn spill_dir(
    input: &Input,
    out: &Path,
    max_mib: u64,
    shard: Option<Shard>,
) -> Option<SpillDir> {
    if matches!(input, Input::Tree(_)) || max_mib == 0 {
        return None;
    }
    let infix = shard.map_or(String::new(), |s| s.infix());
    let path = out.join(SpillDir::name(&infix));
    Some(SpillDir::new(path, max_mib << 20))
}

/// What the recipe of `cfg` reads of a recording when that is only its
/// start (Whisper's 30 s): whole-file items over `io.max_file_bytes` are
/// then read for that much ([`FirstSeconds`]).
pub fn first_seconds(layout: &crate::frames::RowLayout, cfg: &Config) -> Option<FirstSeconds> {
    let layout = layout.frames()?;
    let samples = layout.max_samples?;
    Some(FirstSeconds {
        rate_hz: layout.sample_rate,
        seconds: samples as f64 / f64::from(layout.sample_rate),
        over_bytes: cfg.io.max_file_bytes,
    })
}

/// The bounds on reading manifests that `cfg` sets (`[input]`).
pub fn limits(cfg: &Config) -> Limits {
    Limits {
        max_line_bytes: usize::try_from(cfg.input.manifest_max_line_kib << 10)
            .unwrap_or(usize::MAX),
        max_lines: cfg.input.manifest_max_lines,
    }
}

/// The plan of `files` (with `shard`, its share of each manifest's lines:
/// [`Shard::range`] of them, contiguous blocks in line order), the lines
/// left out, the seconds it took, and the items; segments of compressed
/// recordings that cannot be cut into parts are spilled into `spill`
/// (`plan::manifest::spill`).
pub fn read(
    files: &[PathBuf],
    (shard, spill, spool): (Option<Shard>, Option<&SpillDir>, Option<&Path>),
    cfg: &Config,
    first: Option<FirstSeconds>,
) -> Result<Read, Error> {
    read_members(files, shard, (spill, cfg, first, spool), None)
}

/// [`read`] of NeMo tarred-audio manifests: each `audio_filepath` a member
/// of the shards `pattern` names (`super::tarred`); damage in a shard is a
/// rejection of its own.
pub fn read_tarred(
    files: &[PathBuf],
    pattern: &str,
    (shard, spool): (Option<Shard>, Option<&Path>),
    cfg: &Config,
) -> Result<Read, Error> {
    let shards = super::pattern::expand(pattern).map_err(super::Error::from)?;
    let tarred = super::tarred::Tarred::index(shards);
    let (plan, mut rejected, seconds, items) =
        read_members(files, shard, (None, cfg, None, spool), Some(&tarred))?;
    // Every shard of the build indexes all the tars; shard 0 reports them.
    if shard.is_none_or(|s| s.index == 0) {
        for (file, p) in tarred.problems() {
            let name = file.file_name().map_or_else(
                || file.display().to_string(),
                |n| n.to_string_lossy().into(),
            );
            let damage = super::stored::damage(&name, std::slice::from_ref(p));
            rejected.held.extend(damage.map(rejection));
        }
    }
    let items = items.map(|i| {
        let mut i = Arc::unwrap_or_clone(i);
        i.planned.bytes_read += tarred.bytes_read;
        Arc::new(i)
    });
    Ok((plan, rejected, seconds, items))
}

fn read_members(
    files: &[PathBuf],
    shard: Option<Shard>,
    (spill, cfg, first, spool_at): (
        Option<&SpillDir>,
        &Config,
        Option<FirstSeconds>,
        Option<&Path>,
    ),
    members: Option<&dyn manifest::Members>,
) -> Result<Read, Error> {
    let t = Instant::now();
    let share = shard.map(|s| move |lines: usize| s.range(lines));
    let share = share.as_ref().map(|f| f as &dyn Fn(usize) -> Range<usize>);
    let spool_error = |source| Error::Spool {
        path: spool_at.map(Path::to_path_buf).unwrap_or_default(),
        source,
    };
    let spool = spool_at
        .map(Spool::create)
        .transpose()
        .map_err(spool_error)?;
    let push = spool.as_ref().map(|s| move |r| s.push(r));
    let o = manifest::Options {
        share,
        spill,
        limits: limits(cfg),
        first,
        members,
        readers: Some(manifest::spill::Readers { io: &cfg.io }),
        reject: push.as_ref().map(|f| f as &dyn Fn(manifest::LineRejection)),
    };
    let m: Manifests = manifest::plan_with(files, o)?;
    if let Some(i) = m.plan.splits.iter().position(|s| s == "rejected") {
        return Err(Error::RejectedSplit(files[i].clone()));
    }
    let seconds = t.elapsed().as_secs_f64();
    let held = m
        .rejected
        .iter()
        .map(|r| Rejection {
            path: r.path.clone(),
            kind: r.kind,
            reason: r.reason.clone(),
            line: Some(r.line),
        })
        .collect();
    let spooled = spool.map(Spool::finish).transpose().map_err(spool_error)?;
    tracing::info!(
        items = m.plan.jobs.len(),
        left_out = m.left_out,
        splits = m.plan.splits.len(),
        ranged = m.extents.ranged(),
        header_bytes = m.header_bytes,
        spilled = m.spilled,
        spill_bytes = m.spill_bytes,
        spill_no_room = m.spill_no_room,
        seconds,
        "Read the manifests."
    );
    let (plan, items) = Items::split(m, true);
    Ok((
        plan,
        LeftOut { held, spooled },
        seconds,
        Some(Arc::new(items)),
    ))
}

/// The plan of stored corpora (`super::stored`): with `shard`, its
/// contiguous block of the sets' files, whole; the items left out, the
/// seconds it took, and the items. Gzipped shards and parquet audio are
/// spilled into `spill`.
pub fn read_stored(
    sets: &[super::Set],
    shard: Option<Shard>,
    spill: Option<&SpillDir>,
    audio_column: Option<&str>,
) -> Result<Read, Error> {
    let t = Instant::now();
    let share = shard.map(|s| move |files: usize| s.range(files));
    let share = share.as_ref().map(|f| f as &dyn Fn(usize) -> Range<usize>);
    let o = super::Options {
        share,
        spill,
        audio_column,
    };
    let planned = super::plan(sets, o);
    let m = planned.m;
    let seconds = t.elapsed().as_secs_f64();
    let rejected: Vec<Rejection> = planned.rejected.iter().cloned().map(rejection).collect();
    for r in &planned.rejected {
        tracing::warn!(path = %r.path, kind = %r.kind, reason = %r.reason, "Left out a stored item.");
    }
    tracing::info!(
        items = m.plan.jobs.len(),
        left_out = rejected.len(),
        splits = m.plan.splits.len(),
        files = planned.files,
        planner_bytes = m.header_bytes,
        spilled = m.spilled,
        spill_bytes = m.spill_bytes,
        seconds,
        "Read the stored corpus."
    );
    if m.plan.jobs.is_empty() && rejected.is_empty() && shard.is_none() {
        return Err(Error::EmptyStored {
            inputs: sets.iter().map(|s| s.pattern.clone()).collect(),
        });
    }
    let (plan, items) = Items::split(m, false);
    Ok((plan, rejected.into(), seconds, Some(Arc::new(items))))
}

/// A stored item left out, as the build's rejection (no line).
fn rejection(r: super::Rejected) -> Rejection {
    Rejection {
        path: r.path,
        kind: r.kind,
        reason: r.reason,
        line: None,
    }
}
