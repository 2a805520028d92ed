//! The rejections a build reports beside the writer's: what the walk (or a
//! manifest) left out, how they join the writer's, and `rejected.jsonl`,
//! written durably.

use std::io::Write as _;
use std::path::Path;

use super::{Error, Outcomes};
use crate::app::interrupt::{self, Stopped};
use crate::app::merge::shard::Shard;
use crate::compute::{RejectKind, Rejection};
use crate::plan::input::LeftOut;
use crate::plan::spool::Spooled;
use crate::plan::tree;
use crate::runtime::telemetry::Report;

/// The rejection for a path the walk skipped: its path relative to `input`
/// (bytes that are not UTF-8 escaped), the kind, and the reason.
pub(super) fn walk_rejection(input: &Path, w: &tree::Warning) -> Rejection {
    let rel = w.path.strip_prefix(input).unwrap_or(&w.path);
    let path = tree::escape_path(rel);
    let (kind, reason) = match w.kind {
        tree::WarningKind::NonUtf8Name => (
            RejectKind::BadPath,
            "the name is not valid UTF-8 (shown with \\xNN escapes), so it cannot be a row's \
             path; rename it to UTF-8"
                .to_string(),
        ),
        tree::WarningKind::UnreadableDir => (
            RejectKind::Unreadable,
            format!(
                "directory cannot be read, nothing below it was built: {}",
                w.reason
            ),
        ),
        tree::WarningKind::UnlistableEntry => (
            RejectKind::Unreadable,
            format!("an entry of this directory cannot be listed: {}", w.reason),
        ),
        tree::WarningKind::BrokenLink => (
            RejectKind::Unreadable,
            format!(
                "symbolic link whose target cannot be resolved: {}",
                w.reason
            ),
        ),
    };
    Rejection {
        path,
        kind,
        reason,
        line: None,
    }
}

/// The rejection log's file name: `rejected.jsonl`, or the shard's.
pub(super) fn rejected_log_name(shard: Option<Shard>) -> String {
    shard.map_or("rejected.jsonl".into(), |s| s.rejected_file_name())
}

/// Writes `rejected.jsonl` (or the shard's) and returns the outcomes with
/// its path. A stop that arrived meanwhile deletes the outputs and the log.
pub(super) fn report(
    mut outcomes: Outcomes,
    out: &Path,
    shard: Option<Shard>,
) -> Result<Outcomes, Error> {
    let rejected_log = out.join(rejected_log_name(shard));
    let spooled = outcomes.spooled.take();
    write_rejections(&rejected_log, &outcomes.rejected, spooled.as_ref()).map_err(|source| {
        Error::Output {
            path: rejected_log.clone(),
            source,
        }
    })?;
    if let Some(s) = spooled {
        outcomes.rejected = in_log_order(std::mem::take(&mut outcomes.rejected), s.sample.clone());
    }
    let r = &outcomes.report;
    let done = r.files_ok + r.files_rejected;
    if let Some(s) = Stopped::check(done, done, "files") {
        let outputs = outcomes.outputs.iter().map(|o| o.path.clone()).collect();
        interrupt::discard(
            crate::cmvn::files::with_beside(outputs)
                .into_iter()
                .chain([rejected_log]),
        );
        return Err(s.into());
    }
    outcomes.rejected_log = rejected_log;
    Ok(outcomes)
}

/// Writes the rejection log through `<name>.partial` (fsynced, then renamed),
/// then fsyncs the output directory and its parent: after this returns, the
/// split files renamed before it and the log survive a power loss. The log
/// is `held` (sorted by line, then path) and the `spooled` lines planning
/// left out, merged into that order ([`Merge`]).
pub(super) fn write_rejections(
    path: &Path,
    held: &[Rejection],
    spooled: Option<&Spooled>,
) -> std::io::Result<()> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = std::path::PathBuf::from(partial);
    let mut f = std::io::BufWriter::new(std::fs::File::create(&partial)?);
    let runs = match spooled {
        Some(s) => s.runs()?,
        None => Vec::new(),
    };
    let mut sources: Vec<Source> = vec![Box::new(held.iter().cloned().map(Ok))];
    sources.extend(runs.into_iter().map(|r| Box::new(r) as Source));
    for r in Merge::new(sources)? {
        serde_json::to_writer(&mut f, &r?)?;
        f.write_all(b"\n")?;
    }
    f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&partial, path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    crate::runtime::durable::sync_dir(dir)?;
    match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => crate::runtime::durable::sync_dir(parent),
        _ => Ok(()),
    }
}

/// `held` and `sample` (each sorted by line, then path) as one list in the
/// log's order.
pub(super) fn in_log_order(held: Vec<Rejection>, sample: Vec<Rejection>) -> Vec<Rejection> {
    let sources: Vec<Source> = vec![
        Box::new(held.into_iter().map(Ok)),
        Box::new(sample.into_iter().map(Ok)),
    ];
    Merge::new(sources)
        .and_then(Iterator::collect)
        .expect("rejections in memory read without error")
}

/// Rejections in order, or the error reading them back from a spool.
type Source<'a> = Box<dyn Iterator<Item = std::io::Result<Rejection>> + 'a>;

/// Sorted sources merged into the log's order: by line (none first), then
/// path, and where both tie, the earlier source first: the order a stable
/// sort of the sources' concatenation gives.
struct Merge<'a> {
    sources: Vec<Source<'a>>,
    heads: std::collections::BinaryHeap<std::cmp::Reverse<Head>>,
}

/// A source's next rejection, keyed for the heap.
struct Head {
    key: (Option<u64>, String, usize),
    r: Rejection,
}

impl PartialEq for Head {
    fn eq(&self, o: &Head) -> bool {
        self.key == o.key
    }
}

impl Eq for Head {}

impl PartialOrd for Head {
    fn partial_cmp(&self, o: &Head) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Head {
    fn cmp(&self, o: &Head) -> std::cmp::Ordering {
        self.key.cmp(&o.key)
    }
}

impl<'a> Merge<'a> {
    fn new(sources: Vec<Source<'a>>) -> std::io::Result<Merge<'a>> {
        let mut m = Merge {
            sources,
            heads: std::collections::BinaryHeap::new(),
        };
        for i in 0..m.sources.len() {
            m.pull(i)?;
        }
        Ok(m)
    }

    /// Source `i`'s next rejection onto the heap.
    fn pull(&mut self, i: usize) -> std::io::Result<()> {
        if let Some(r) = self.sources[i].next() {
            let r = r?;
            let key = (r.line, r.path.clone(), i);
            self.heads.push(std::cmp::Reverse(Head { key, r }));
        }
        Ok(())
    }
}

impl Iterator for Merge<'_> {
    type Item = std::io::Result<Rejection>;

    fn next(&mut self) -> Option<Self::Item> {
        let std::cmp::Reverse(head) = self.heads.pop()?;
        if let Err(e) = self.pull(head.key.2) {
            return Some(Err(e));
        }
        Some(Ok(head.r))
    }
}

/// The walk's rejections join the writer's, counted, in path order; the
/// lines planning spooled are counted, and stay in their file.
pub(super) fn add_walk_rejections(
    report: &mut Report,
    rejected: &mut Vec<Rejection>,
    walk_rejected: LeftOut,
) -> Option<Spooled> {
    if let Some(s) = &walk_rejected.spooled {
        report.files_rejected += s.count;
        for (&kind, &n) in &s.kinds {
            *report.rejected_by_kind.entry(kind).or_default() += n;
        }
    }
    for r in walk_rejected.held {
        report.files_rejected += 1;
        *report.rejected_by_kind.entry(r.kind).or_default() += 1;
        rejected.push(r);
    }
    rejected.sort_by(|a, b| (a.line, &a.path).cmp(&(b.line, &b.path)));
    walk_rejected.spooled
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rejections with few distinct lines and paths, so ties are common.
    fn draw(seed: &mut u64, n: usize) -> Vec<Rejection> {
        let mut next = || {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *seed >> 33
        };
        let mut v: Vec<Rejection> = (0..n)
            .map(|k| Rejection {
                path: format!("p{}", next() % 3),
                kind: RejectKind::BadLine,
                reason: format!("#{k}"),
                line: (next() % 5 != 0).then(|| next() % 8),
            })
            .collect();
        v.sort_by(|a, b| (a.line, &a.path).cmp(&(b.line, &b.path)));
        v
    }

    #[test]
    fn the_merge_is_a_stable_sort_of_the_sources_one_after_another() {
        let mut seed = 7;
        for round in 0..200 {
            let lists: Vec<Vec<Rejection>> = (0..1 + round % 5)
                .map(|k| draw(&mut seed, k * 7 % 11))
                .collect();
            let mut want: Vec<Rejection> = lists.concat();
            want.sort_by(|a, b| (a.line, &a.path).cmp(&(b.line, &b.path)));
            let sources: Vec<Source> = lists
                .iter()
                .map(|l| Box::new(l.iter().cloned().map(Ok)) as Source)
                .collect();
            let got: Vec<Rejection> = Merge::new(sources).unwrap().map(Result::unwrap).collect();
            assert_eq!(got, want, "round {round}");
        }
    }
}
