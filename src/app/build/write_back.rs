//! The write-back of a manifest build: after the split files and
//! `rejected.jsonl`, each manifest again as `OUT/<split>.jsonl` (a shard's
//! `<split>.shard-K-of-N.jsonl`, which `merge` joins), every line that
//! became a row with `features_file`, `features_row` and `num_frames`
//! added. The line's own text is kept, so any field, number or Unicode
//! string is as written: the plan knows where each line lies
//! (`plan::manifest::Span`), and the lines are copied from there.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::{Error, Outcomes};
use crate::plan::input::{Input, Items};
use crate::plan::manifest::{self, Span, Stamp};
use crate::plan::shard::Shard;

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
            .and_then(|o| o.path.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let output = |source| Error::Output {
            path: to.clone(),
            source,
        };
        // Per kept row (in row order, so in line order): its line's span.
        let seq_spans = &items.spans()[of.start as usize..of.end as usize];
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
    use crate::plan::manifest::Limits;

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
