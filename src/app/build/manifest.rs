//! `build MANIFEST… --out OUT`: what a manifest build adds to the tree
//! build, in the order it happens.
//!
//! * [`read`]: the manifests' plan (`source::manifest`): one split per
//!   manifest, items in line order, the lines left out as rejections with
//!   their line numbers.
//! * [`spill_dir`]: the folder (`OUT/.melforge-spill`, a shard's own)
//!   where the planner writes one decode of each compressed recording that
//!   cannot be cut into parts (`source::manifest::spill`); the build holds
//!   its guard until it ends, which removes it, on error too.
//! * [`Items::describe`]: each job's segment and byte range, handed to the
//!   readers with the job.
//! * [`Items::row_meta`]: the metadata and line numbers the writer stores
//!   beside the rows (`writer::meta`).
//! * [`write_back`]: after the split files and `rejected.jsonl`, each
//!   manifest again as `OUT/<split>.jsonl`, every line that became a row
//!   with `features_file`, `features_row` and `num_frames` added (the
//!   line's own text kept, so any field, number or Unicode string is as
//!   written).
//!
//! A shard (`--shard K/N`) takes the contiguous block [`Shard::range`] of
//! each manifest's lines (all lines, blank and bad ones included, so every
//! line belongs to exactly one shard and its rejection to that shard's
//! log), and writes back `<split>.shard-K-of-N.jsonl` beside its
//! `<split>.shard-K-of-N.h5`; `merge` joins both.

use std::io::Write as _;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::{Error, Outcomes};
use crate::app::merge::shard::Shard;
use crate::compute::Rejection;
use crate::config::Config;
use crate::model::Segment;
use crate::plan;
use crate::plan::manifest::{self, FirstSeconds, Limits, Manifests, Span, SpillDir, Stamp};
use crate::plan::{Job, PathTable, Plan};
use crate::reader::{ReadJob, ReadRange};
use crate::writer::meta::RowMeta;

/// What `build` reads: a directory tree, manifests (one split each), or
/// stored corpora (WebDataset shards, parquet files; one split per set).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    Tree(PathBuf),
    Manifests(Vec<PathBuf>),
    Stored(Vec<plan::Set>),
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
    /// patterns, tar shards or parquet files (`plan::stored`; `split`
    /// names the one set's split), else [`Input::of`].
    pub fn resolve(paths: &[PathBuf], split: Option<&str>) -> Result<Input, plan::Error> {
        match plan::sets_of(paths, split)? {
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
pub(super) struct Items {
    pub lines: Arc<[u32]>,
    meta: Arc<PathTable>,
    segments: Vec<Option<Segment>>,
    ranges: Vec<Option<ReadRange>>,
    /// By split: its items' path indices (seq q is `start + q`).
    items_of: Vec<Range<u32>>,
    /// By path index: where its manifest line lies (empty for a stored
    /// corpus), and by split, its manifest as planned: the write-back.
    spans: Arc<[Span]>,
    stamps: Vec<Option<Stamp>>,
    /// What planning read and spilled.
    pub planned: super::PlanReport,
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
            segments: m.segments,
            ranges: m.ranges,
            items_of: m.items_of,
            spans: m.spans,
            stamps: m.stamps,
            planned: super::PlanReport {
                bytes_read: m.header_bytes,
                spilled: m.spilled,
                spill_bytes: m.spill_bytes,
            },
            has_lines,
        };
        (m.plan, items)
    }

    /// Job `j`'s segment, if it has one.
    pub fn segment(&self, j: &Job) -> Option<&Segment> {
        self.segments[j.path as usize].as_ref()
    }

    /// Puts job `j`'s segment and byte range on the read job.
    pub fn describe(&self, j: &Job, job: &mut ReadJob) {
        job.segment = self.segments[j.path as usize];
        job.range = self.ranges[j.path as usize].clone();
    }

    pub fn row_meta(&self) -> RowMeta {
        RowMeta {
            json: Arc::clone(&self.meta),
            lines: self.has_lines.then(|| Arc::clone(&self.lines)),
        }
    }

    /// Job `j`'s manifest line, when its input has lines.
    pub fn line(&self, j: &Job) -> Option<u64> {
        self.has_lines
            .then(|| u64::from(self.lines[j.path as usize]))
    }
}

/// What [`read`] gives: the plan, the lines left out, the seconds it took,
/// and the items (the shape of a tree walk's result, items added).
pub(super) type Read = (Plan, Vec<Rejection>, f64, Option<Arc<Items>>);

/// The spill folder of a manifest build into `out` (`shard`'s own), its
/// stale copy removed; None for a tree, or with `input.spill_max_mib = 0`.
pub(super) fn spill_dir(
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
pub(super) fn first_seconds(
    layout: Option<&crate::frames::FrameLayout>,
    cfg: &Config,
) -> Option<FirstSeconds> {
    let layout = layout?;
    let samples = layout.max_samples?;
    Some(FirstSeconds {
        rate_hz: layout.sample_rate,
        seconds: samples as f64 / f64::from(layout.sample_rate),
        over_bytes: cfg.io.max_file_bytes,
    })
}

/// The bounds on reading manifests that `cfg` sets (`[input]`).
pub(super) fn limits(cfg: &Config) -> Limits {
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
/// (`source::manifest::spill`).
pub(super) fn read(
    files: &[PathBuf],
    shard: Option<Shard>,
    spill: Option<&SpillDir>,
    cfg: &Config,
    first: Option<FirstSeconds>,
) -> Result<Read, Error> {
    read_members(files, shard, (spill, cfg, first), None)
}

/// [`read`] of NeMo tarred-audio manifests: each `audio_filepath` a member
/// of the shards `pattern` names (`plan::tarred`); damage in a shard is a
/// rejection of its own.
pub(super) fn read_tarred(
    files: &[PathBuf],
    pattern: &str,
    shard: Option<Shard>,
    cfg: &Config,
) -> Result<Read, Error> {
    let shards = plan::pattern::expand(pattern).map_err(plan::Error::from)?;
    let tarred = plan::tarred::Tarred::index(shards);
    let (plan, mut rejected, seconds, items) =
        read_members(files, shard, (None, cfg, None), Some(&tarred))?;
    // Every shard of the build indexes all the tars; shard 0 reports them.
    if shard.is_none_or(|s| s.index == 0) {
        for (file, p) in tarred.problems() {
            let name = file.file_name().map_or_else(
                || file.display().to_string(),
                |n| n.to_string_lossy().into(),
            );
            rejected.extend(plan::stored::damage(&name, std::slice::from_ref(p)).map(rejection));
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
    (spill, cfg, first): (Option<&SpillDir>, &Config, Option<FirstSeconds>),
    members: Option<&dyn manifest::Members>,
) -> Result<Read, Error> {
    let t = Instant::now();
    let share = shard.map(|s| move |lines: usize| s.range(lines));
    let share = share.as_ref().map(|f| f as &dyn Fn(usize) -> Range<usize>);
    let o = manifest::Options {
        share,
        spill,
        limits: limits(cfg),
        first,
        members,
        readers: Some(manifest::spill::Readers { io: &cfg.io }),
    };
    let m: Manifests = manifest::plan_with(files, o)?;
    if let Some(i) = m.plan.splits.iter().position(|s| s == "rejected") {
        return Err(Error::RejectedSplit(files[i].clone()));
    }
    let seconds = t.elapsed().as_secs_f64();
    let rejected = m
        .rejected
        .iter()
        .map(|r| Rejection {
            path: r.path.clone(),
            kind: r.kind,
            reason: r.reason.clone(),
            line: Some(r.line),
        })
        .collect();
    tracing::info!(
        items = m.plan.jobs.len(),
        left_out = m.rejected.len(),
        splits = m.plan.splits.len(),
        ranged = m.ranges.iter().filter(|r| r.is_some()).count(),
        header_bytes = m.header_bytes,
        spilled = m.spilled,
        spill_bytes = m.spill_bytes,
        spill_no_room = m.spill_no_room,
        seconds,
        "Read the manifests."
    );
    let (plan, items) = Items::split(m, true);
    Ok((plan, rejected, seconds, Some(Arc::new(items))))
}

/// The plan of stored corpora (`plan::stored`): with `shard`, its
/// contiguous block of the sets' files, whole; the items left out, the
/// seconds it took, and the items. Gzipped shards and parquet audio are
/// spilled into `spill`.
pub(super) fn read_stored(
    sets: &[plan::Set],
    shard: Option<Shard>,
    spill: Option<&SpillDir>,
    audio_column: Option<&str>,
) -> Result<Read, Error> {
    let t = Instant::now();
    let share = shard.map(|s| move |files: usize| s.range(files));
    let share = share.as_ref().map(|f| f as &dyn Fn(usize) -> Range<usize>);
    let o = plan::Options {
        share,
        spill,
        audio_column,
    };
    let planned = plan::plan(sets, o);
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
    Ok((plan, rejected, seconds, Some(Arc::new(items))))
}

/// A stored item left out, as the build's rejection (no line).
fn rejection(r: plan::Rejected) -> Rejection {
    Rejection {
        path: r.path,
        kind: r.kind,
        reason: r.reason,
        line: None,
    }
}

/// Writes `OUT/<split>.jsonl` for a manifest build (nothing for a tree);
/// a shard writes `OUT/<split>.shard-K-of-N.jsonl` with the lines of its
/// share, each naming its row in the shard's file (`merge` renumbers them).
/// Which line a row came from, and where that line lies in its manifest,
/// is the plan's (`items`): the lines are copied by their byte spans, not
/// read or parsed a second time, so a line the planner left out for a
/// reason beyond the line itself (a cut id met before) is never written
/// back.
pub(super) fn write_back(
    mut outcomes: Outcomes,
    input: &Input,
    out: &Path,
    (fixed_frames, shard): (Option<u32>, Option<Shard>),
    items: Option<&Items>,
) -> Result<Outcomes, Error> {
    let (
        Input::Manifests(files)
        | Input::Tarred {
            manifests: files, ..
        },
        Some(items),
    ) = (input, items)
    else {
        return Ok(outcomes);
    };
    // The same names, in the same order, as `read`'s splits.
    let splits: Vec<String> = files
        .iter()
        .filter_map(|f| manifest::split_name(f))
        .collect();
    let kept = std::mem::take(&mut outcomes.kept);
    let per_split = files.iter().zip(&splits).zip(&kept).zip(&items.items_of);
    for ((((file, split), kept), of), stamp) in per_split.zip(&items.stamps) {
        let to = out.join(shard.map_or(format!("{split}.jsonl"), |s| s.manifest_file_name(split)));
        let same = std::fs::canonicalize(&to)
            .ok()
            .zip(std::fs::canonicalize(file).ok())
            .is_some_and(|(a, b)| a == b);
        if same {
            return Err(Error::WriteBackOverInput(to));
        }
        let h5 = outcomes
            .outputs
            .iter()
            .find(|o| o.split == *split)
            .and_then(|o| o.path.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let output = |source| Error::Output {
            path: to.clone(),
            source,
        };
        // Per kept row (in row order, so in line order): its line's span.
        let seq_spans = &items.spans[of.start as usize..of.end as usize];
        let rows: Vec<(Span, u32)> = kept
            .iter()
            .map(|&(seq, frames)| (seq_spans[seq as usize], frames))
            .collect();
        write_one((file, *stamp), &to, &h5, &rows, fixed_frames).map_err(output)?;
        outcomes.manifests.push(to);
    }
    Ok(outcomes)
}

/// `from`'s lines that became rows (`rows`: per row in order, its line's
/// span and frames), each with its row added, into `to` (through
/// `.partial`, synced, renamed). `from` must be the file planned
/// (`stamp`); its bytes are read once, in order, and only the spans are
/// copied.
fn write_one(
    (from, stamp): (&Path, Option<Stamp>),
    to: &Path,
    h5: &str,
    rows: &[(Span, u32)],
    fixed_frames: Option<u32>,
) -> std::io::Result<()> {
    use std::io::Read as _;
    let changed = |what: &str| {
        std::io::Error::other(format!(
            "{} is not the manifest it was when planned ({what}); the manifest changed during \
             the build",
            from.display()
        ))
    };
    let (f, now) = manifest::lines::open_file(from).map_err(std::io::Error::other)?;
    if stamp != Some(now) {
        return Err(changed("its length or modification time differs"));
    }
    let mut r =
        manifest::lines::bytes(std::io::BufReader::new(f), from).map_err(std::io::Error::other)?;
    let mut partial = to.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let mut w = std::io::BufWriter::new(std::fs::File::create(&partial)?);
    let file = serde_json::to_string(h5).expect("a string serialises");
    let (mut at, mut text) = (0u64, Vec::new());
    for (row, &(span, frames)) in rows.iter().enumerate() {
        let skip = span
            .at
            .checked_sub(at)
            .ok_or_else(|| changed("its rows' lines are out of order"))?;
        std::io::copy(&mut (&mut r).take(skip), &mut std::io::sink())?;
        text.clear();
        (&mut r).take(u64::from(span.len)).read_to_end(&mut text)?;
        at = span.at + text.len() as u64;
        // An item's line is a JSON object: it ends with its closing brace.
        let body = text
            .trim_ascii_end()
            .strip_suffix(b"}")
            .ok_or_else(|| changed("a row's line does not end its JSON object there"))?;
        let frames = fixed_frames.unwrap_or(frames);
        w.write_all(body)?;
        writeln!(
            w,
            ", \"features_file\": {file}, \"features_row\": {row}, \"num_frames\": {frames}}}"
        )?;
    }
    w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&partial, to)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plans `text` as a manifest and writes back rows for its items
    /// (frames 10, 11, …); the write-back's text, or its error.
    fn round_trip(text: &str, edit: Option<&str>) -> std::io::Result<String> {
        let d = tempfile::tempdir().unwrap();
        let m = d.path().join("train.jsonl");
        std::fs::write(&m, text).unwrap();
        let (f, stamp) = manifest::lines::open_file(&m).unwrap();
        drop(f);
        let mut lines = manifest::Lines::open(&m, Limits::default()).unwrap();
        let mut spans = Vec::new();
        while let Some((_, line)) = lines.next_line().unwrap() {
            if matches!(line, manifest::Line::Text(t) if !t.trim().is_empty()) {
                spans.push(lines.span());
            }
        }
        if let Some(edit) = edit {
            std::thread::sleep(std::time::Duration::from_millis(20));
            std::fs::write(&m, edit).unwrap();
        }
        let rows: Vec<(Span, u32)> = spans.into_iter().zip(10..).collect();
        let to = d.path().join("out.jsonl");
        write_one((&m, Some(stamp)), &to, "train.h5", &rows, None)?;
        Ok(std::fs::read_to_string(to).unwrap())
    }

    /// A row's line is copied as written (spaces, escapes, `\r\n`), only
    /// its row added before its closing brace.
    #[test]
    fn write_back_copies_each_line_by_its_span() {
        let text = "{\"a\": \"\\u00e9\", \"n\": 1.50}\r\n\n  {\"b\": [1, 2]}  \n{\"c\": \"ü\"}";
        let back = round_trip(text, None).unwrap();
        let want = [
            "{\"a\": \"\\u00e9\", \"n\": 1.50, \"features_file\": \"train.h5\", \"features_row\": 0, \"num_frames\": 10}",
            "  {\"b\": [1, 2], \"features_file\": \"train.h5\", \"features_row\": 1, \"num_frames\": 11}",
            "{\"c\": \"ü\", \"features_file\": \"train.h5\", \"features_row\": 2, \"num_frames\": 12}",
        ];
        assert_eq!(back.lines().collect::<Vec<_>>(), want);
    }

    /// A manifest rewritten after it was planned is not copied from: the
    /// spans would name other bytes.
    #[test]
    fn a_manifest_changed_since_planning_is_refused() {
        let text = "{\"a\": 1}\n{\"b\": 2}\n";
        let e = round_trip(text, Some("{\"b\": 2}\n{\"a\": 1}\n")).unwrap_err();
        assert!(e.to_string().contains("changed during the build"), "{e}");
    }
}
