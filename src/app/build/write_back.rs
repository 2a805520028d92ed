//! The write-back of a manifest build: after the split files and
//! `rejected.jsonl`, each manifest again as `OUT/<split>.jsonl` (a shard's
//! `<split>.shard-K-of-N.jsonl`, which `merge` joins), every line that
//! became a row with `features_file`, `features_row` and `num_frames`
//! added. The line's own text is kept, so any field, number or Unicode
//! string is as written: the plan knows where each line lies
//! (`plan::manifest::Span`), and the lines are copied from there.

use std::path::{Path, PathBuf};

use super::{Error, Outcomes, lhotse};
use crate::plan::input::{Input, Items};
use crate::plan::manifest::{self, Span, Stamp};
use crate::plan::shard::Shard;
use crate::runtime::durable::Partial;

/// Writes `OUT/<split>.jsonl` for a manifest build (nothing for a tree);
/// a shard writes `OUT/<split>.shard-K-of-N.jsonl` with the lines of its
/// share, each naming its row in the shard's file (`merge` renumbers them).
/// Which line a row came from, and where that line lies in its manifest,
/// is the plan's (`items`): the lines are copied by their byte spans, not
/// read or parsed a second time, so a line the planner left out for a
/// reason beyond the line itself (a cut id met before) is never written
/// back. With `lhotse` (`output.lhotse`), the same pass also writes
/// `OUT/<split>.cuts.jsonl.gz` (a shard's `<split>.shard-K-of-N.cuts.jsonl.gz`),
/// after the split file got its views (`writer::vds::views`).
pub(super) fn write_back(
    mut outcomes: Outcomes,
    input: &Input,
    out: &Path,
    (fixed_frames, shard): (Option<u32>, Option<Shard>),
    items: Option<&Items>,
    lhotse: Option<&lhotse::Cuts>,
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
    let per_split = files.iter().zip(&splits).zip(&kept).zip(items.items_of());
    for ((((file, split), kept), of), stamp) in per_split.zip(items.stamps()) {
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
            .map(|o| o.path.clone());
        // Per kept row (in row order, so in line order): its line's span.
        let seq_spans = &items.spans()[of.start as usize..of.end as usize];
        let rows: Vec<(Span, u32)> = kept
            .iter()
            .map(|&(seq, frames)| (seq_spans[seq as usize], fixed_frames.unwrap_or(frames)))
            .collect();
        let cuts = match lhotse {
            Some(l) => {
                let path = out.join(lhotse::file_name(split, shard));
                Some((l.writer(&path, h5.as_deref())?, path))
            }
            None => None,
        };
        let cuts = write_split((file, *stamp), (&to, h5.as_deref()), &rows, cuts)?;
        outcomes.manifests.push(to);
        outcomes.cuts.extend(cuts);
    }
    Ok(outcomes)
}

/// One split's pass: the manifest `from`'s rows' lines into the
/// written-back manifest `to`, naming the split file `h5`, and into `cuts`
/// when lhotse cuts are written; returns the cuts file.
fn write_split(
    from: (&Path, Option<Stamp>),
    (to, h5): (&Path, Option<&Path>),
    rows: &[(Span, u32)],
    mut cuts: Option<(lhotse::CutsWriter<'_>, PathBuf)>,
) -> Result<Option<PathBuf>, Error> {
    let name = h5
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut back = Partial::create(to).map_err(|e| output(to, e))?;
    let file_json = serde_json::to_string(&name).expect("a string serialises");
    for_each_row(from, rows, |row, line, frames| {
        write_row(&mut back, line, &file_json, row, frames)
            .map_err(|e| RowError::Output(to.to_path_buf(), e))?;
        if let Some((w, path)) = &mut cuts {
            w.cut(row, line, frames)
                .map_err(|e| RowError::Cut(path.clone(), e))?;
        }
        Ok(())
    })
    .map_err(|e| match e {
        RowError::Read(e) => output(to, e),
        RowError::Output(path, e) => output(&path, e),
        RowError::Cut(path, source) => Error::Cuts { path, source },
    })?;
    back.finish().map_err(|e| output(to, e))?;
    match cuts {
        Some((w, path)) => {
            w.finish()?;
            Ok(Some(path))
        }
        None => Ok(None),
    }
}

fn output(path: &Path, source: std::io::Error) -> Error {
    Error::Output {
        path: path.to_path_buf(),
        source,
    }
}

/// Why the pass over the rows' lines stopped.
enum RowError {
    /// Reading the manifest (or it changed since planning).
    Read(std::io::Error),
    /// Writing this output.
    Output(PathBuf, std::io::Error),
    /// A row's cut could not be written to this cuts file.
    Cut(PathBuf, lhotse::CutError),
}

/// One row's line written back: its text up to its closing brace, then the
/// row.
fn write_row(
    w: &mut impl std::io::Write,
    line: &[u8],
    file: &str,
    row: usize,
    frames: u32,
) -> std::io::Result<()> {
    let body = manifest::object_body(line)
        .ok_or_else(|| std::io::Error::other("a row's line does not end its JSON object there"))?;
    w.write_all(body)?;
    writeln!(
        w,
        ", \"features_file\": {file}, \"features_row\": {row}, \"num_frames\": {frames}}}"
    )
}

/// Calls `each(row, line, frames)` for the lines of `from` that became rows
/// (`rows`: per row in order, its line's span and frames). `from` must be
/// the file planned (`stamp`); its bytes are read once, in order, and only
/// the spans are read.
fn for_each_row(
    (from, stamp): (&Path, Option<Stamp>),
    rows: &[(Span, u32)],
    mut each: impl FnMut(usize, &[u8], u32) -> Result<(), RowError>,
) -> Result<(), RowError> {
    use std::io::Read as _;
    let changed = |what: &str| {
        RowError::Read(std::io::Error::other(format!(
            "{} is not the manifest it was when planned ({what}); the manifest changed during \
             the build",
            from.display()
        )))
    };
    let (f, now) =
        manifest::lines::open_file(from).map_err(|e| RowError::Read(std::io::Error::other(e)))?;
    if stamp != Some(now) {
        return Err(changed("its length or modification time differs"));
    }
    let mut r = manifest::lines::bytes(std::io::BufReader::new(f), from)
        .map_err(|e| RowError::Read(std::io::Error::other(e)))?;
    let (mut at, mut text) = (0u64, Vec::new());
    for (row, &(span, frames)) in rows.iter().enumerate() {
        let skip = span
            .at
            .checked_sub(at)
            .ok_or_else(|| changed("its rows' lines are out of order"))?;
        std::io::copy(&mut (&mut r).take(skip), &mut std::io::sink()).map_err(RowError::Read)?;
        text.clear();
        (&mut r)
            .take(u64::from(span.len))
            .read_to_end(&mut text)
            .map_err(RowError::Read)?;
        at = span.at + text.len() as u64;
        if manifest::object_body(&text).is_none() {
            return Err(changed("a row's line does not end its JSON object there"));
        }
        each(row, &text, frames)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::manifest::Limits;

    /// Plans `text` as a manifest and writes back rows for its items
    /// (frames 10, 11, …); the write-back's text, or its error.
    fn round_trip(text: &str, edit: Option<&str>) -> Result<String, Error> {
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
        write_split(
            (&m, Some(stamp)),
            (&to, Some(Path::new("train.h5"))),
            &rows,
            None,
        )?;
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
