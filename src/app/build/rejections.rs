//! The rejections a build reports beside the writer's: what the walk (or a
//! manifest) left out, how they join the writer's, and `rejected.jsonl`,
//! written durably.

use std::io::Write as _;
use std::path::Path;

use crate::compute::{RejectKind, Rejection};
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

/// Writes the rejection log through `<name>.partial` (fsynced, then renamed),
/// then fsyncs the output directory and its parent: after this returns, the
/// split files renamed before it and the log survive a power loss.
pub(super) fn write_rejections(path: &Path, rejected: &[Rejection]) -> std::io::Result<()> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = std::path::PathBuf::from(partial);
    let mut f = std::io::BufWriter::new(std::fs::File::create(&partial)?);
    for r in rejected {
        serde_json::to_writer(&mut f, r)?;
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

/// The walk's rejections join the writer's, counted, in path order.
pub(super) fn add_walk_rejections(
    report: &mut Report,
    rejected: &mut Vec<Rejection>,
    walk_rejected: Vec<Rejection>,
) {
    for r in walk_rejected {
        report.files_rejected += 1;
        *report.rejected_by_kind.entry(r.kind).or_default() += 1;
        rejected.push(r);
    }
    rejected.sort_by(|a, b| (a.line, &a.path).cmp(&(b.line, &b.path)));
}
