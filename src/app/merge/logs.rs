//! The JSON-lines files of a sharded build, joined: the rejection logs
//! (`rejected.shard-K-of-N.jsonl` → `rejected.jsonl`, sorted by line and
//! path as a build sorts them) and a manifest build's written-back
//! manifests (`<split>.shard-K-of-N.jsonl` → `<split>.jsonl`: the shards'
//! lines in shard order, which is line order, each line's `features_file`
//! and `features_row` renamed and renumbered to its row in the merged
//! `<split>.h5`; the line's own text and `num_frames` kept byte for byte).

use std::io::{BufRead as _, Write as _};
use std::path::Path;

use serde::Deserialize;

use super::Error;
use super::attrs::{self, Value};
use super::find::Found;
use super::open::Splits;

fn open(dir: &Path, name: &str) -> Result<std::io::BufReader<std::fs::File>, Error> {
    let p = dir.join(name);
    std::fs::File::open(&p)
        .map(std::io::BufReader::new)
        .map_err(|cause| Error::Io {
            path: p,
            action: "open",
            cause,
        })
}

fn read_error(dir: &Path, name: &str) -> impl Fn(std::io::Error) -> Error {
    let path = dir.join(name);
    move |cause| Error::Io {
        path: path.clone(),
        action: "read",
        cause,
    }
}

/// A write error at `out`.
fn write_error(out: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |cause| Error::Io {
        path: out.to_path_buf(),
        action: "write",
        cause,
    }
}

fn write_lines(out: &Path, lines: impl IntoIterator<Item = String>) -> Result<(), Error> {
    let io = write_error(out);
    let mut f = std::io::BufWriter::new(std::fs::File::create(out).map_err(&io)?);
    for line in lines {
        f.write_all(line.as_bytes()).map_err(&io)?;
        f.write_all(b"\n").map_err(&io)?;
    }
    f.flush().map_err(&io)
}

/// Joins the shard rejection logs, sorted by line and path as a build sorts
/// them (a tree's have no line: by path); returns the number of rejections.
pub(super) fn merge_rejections(dir: &Path, logs: &[String], out: &Path) -> Result<usize, Error> {
    let mut lines: Vec<(Option<u64>, String, String)> = Vec::new();
    for name in logs {
        for (i, line) in open(dir, name)?.lines().enumerate() {
            let line = line.map_err(read_error(dir, name))?;
            if line.trim().is_empty() {
                continue;
            }
            let bad = |reason: String| Error::BadRejection {
                file: name.clone(),
                line: i + 1,
                reason,
            };
            let v: serde_json::Value =
                serde_json::from_str(&line).map_err(|e| bad(format!("not JSON: {e}")))?;
            let path = v
                .get("path")
                .and_then(|p| p.as_str())
                .ok_or_else(|| bad("no string field `path`".into()))?
                .to_string();
            let at = match v.get("line") {
                None | Some(serde_json::Value::Null) => None,
                Some(l) => Some(l.as_u64().ok_or_else(|| bad(format!("`line` is {l}")))?),
            };
            lines.push((at, path, line));
        }
    }
    lines.sort();
    let n = lines.len();
    write_lines(out, lines.into_iter().map(|l| l.2))?;
    Ok(n)
}

/// One manifest to write back: `<split>.jsonl` from the split's shard
/// write-backs, each with its shard file's name and rows.
pub(super) struct WriteBack {
    pub target: String,
    split: String,
    /// (write-back file, shard `.h5` file, its rows), in shard order.
    shards: Vec<(String, String, usize)>,
}

/// The written-back manifests to join: one per split whose files hold
/// manifest rows (`line`), each with all N shards (refused: a split with
/// rows of a manifest but no write-backs, or write-backs of a split without
/// them, and a target that is the build's input manifest).
pub(super) fn plan_write_backs(
    dir: &Path,
    found: &Found,
    splits: &Splits,
    attrs: &[(String, Value)],
) -> Result<Vec<WriteBack>, Error> {
    let mut plans = Vec::new();
    for (split, parts) in splits {
        let manifest_rows = parts[0].datasets.iter().any(|d| d.0 == "line");
        let names = match (found.manifests.get(split), manifest_rows) {
            (Some(names), true) => names,
            (None, false) => continue,
            (None, true) => {
                return Err(Error::Missing {
                    what: format!("the written-back manifest of split `{split}`"),
                    missing: (0..found.count)
                        .map(|k| k.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    n: found.count,
                });
            }
            (Some(names), false) => {
                return Err(Error::BadShard {
                    file: names[0].clone(),
                    reason: format!(
                        "a written-back manifest, but the files of split `{split}` hold no \
                         manifest rows (no `line` dataset): a stale file of another build?"
                    ),
                });
            }
        };
        let target = format!("{split}.jsonl");
        if let Some(Value::Str(input)) = attrs::get(attrs, "input") {
            let same = std::fs::canonicalize(dir.join(&target))
                .ok()
                .zip(std::fs::canonicalize(input).ok())
                .is_some_and(|(a, b)| a == b);
            if same {
                return Err(Error::WriteBackOverInput(dir.join(&target)));
            }
        }
        let shards = names
            .iter()
            .zip(parts)
            .map(|(n, p)| (n.clone(), p.name.clone(), p.rows))
            .collect();
        plans.push(WriteBack {
            target,
            split: split.clone(),
            shards,
        });
    }
    if let Some((split, names)) = found
        .manifests
        .iter()
        .find(|(s, _)| !splits.iter().any(|x| x.0 == **s))
    {
        return Err(Error::BadShard {
            file: names[0].clone(),
            reason: format!("a written-back manifest of split `{split}`, which has no split files"),
        });
    }
    Ok(plans)
}

/// What `build` adds at the end of a written-back line.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Added {
    features_file: String,
    features_row: u64,
    num_frames: u64,
}

/// What `build` puts before its additions (`build::write_back::write_one`).
const ADDED: &str = ", \"features_file\": ";

/// A written-back line as (the manifest's own text without its closing
/// brace, what build added), or why it is not one.
fn split_line(line: &str) -> Result<(&str, Added), String> {
    // The last match is build's: inside a JSON string a quote is escaped.
    let at = line.rfind(ADDED).ok_or("no `features_file`")?;
    let (body, added) = line.split_at(at);
    let added: Added = serde_json::from_str(&format!("{{{}", &added[2..]))
        .map_err(|e| format!("the fields added at the end are not as build writes them: {e}"))?;
    Ok((body, added))
}

/// Checks `w`'s shard write-backs through (every line as build writes it,
/// naming the rows of its shard file in order, all of them): before merge
/// writes anything.
pub(super) fn check_write_back(dir: &Path, w: &WriteBack) -> Result<(), Error> {
    join(dir, w, |_| Ok(()))
}

/// Writes `w`'s merged manifest at `out`.
pub(super) fn merge_write_back(dir: &Path, w: &WriteBack, out: &Path) -> Result<(), Error> {
    let io = write_error(out);
    let mut f = std::io::BufWriter::new(std::fs::File::create(out).map_err(&io)?);
    join(dir, w, |line| writeln!(f, "{line}").map_err(&io))?;
    f.flush().map_err(io)
}

/// Each line of `w`'s merged manifest, in order, to `emit`.
fn join(
    dir: &Path,
    w: &WriteBack,
    mut emit: impl FnMut(String) -> Result<(), Error>,
) -> Result<(), Error> {
    let merged = serde_json::to_string(&format!("{}.h5", w.split)).expect("a string serialises");
    let mut base = 0u64;
    for (name, h5, rows) in &w.shards {
        let mut next = 0u64;
        for (i, line) in open(dir, name)?.lines().enumerate() {
            let line = line.map_err(read_error(dir, name))?;
            let bad = |reason: String| Error::BadWriteBack {
                file: name.clone(),
                line: i + 1,
                reason,
            };
            let (body, added) = split_line(&line).map_err(bad)?;
            if added.features_file != *h5 || added.features_row != next {
                return Err(bad(format!(
                    "names row {} of {}, where row {next} of {h5} was expected",
                    added.features_row, added.features_file
                )));
            }
            next += 1;
            emit(format!(
                "{body}{ADDED}{merged}, \"features_row\": {}, \"num_frames\": {}}}",
                base + added.features_row,
                added.num_frames
            ))?;
        }
        if next != *rows as u64 {
            return Err(Error::BadWriteBack {
                file: name.clone(),
                line: next as usize,
                reason: format!("it names {next} rows, {h5} holds {rows}"),
            });
        }
        base += next;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_back_line_splits_at_builds_additions() {
        let line = r#"{"audio_filepath": "a.wav", "text": "x, \"features_file\": y", "features_file": "t.shard-1-of-2.h5", "features_row": 3, "num_frames": 98}"#;
        let (body, added) = split_line(line).unwrap();
        assert_eq!(
            body,
            r#"{"audio_filepath": "a.wav", "text": "x, \"features_file\": y""#
        );
        assert_eq!(
            (
                added.features_file.as_str(),
                added.features_row,
                added.num_frames
            ),
            ("t.shard-1-of-2.h5", 3, 98)
        );
        assert!(split_line(r#"{"audio_filepath": "a.wav"}"#).is_err());
        let extra =
            r#"{"a": 1, "features_file": "t.h5", "features_row": 0, "num_frames": 1, "x": 2}"#;
        assert!(split_line(extra).is_err());
    }
}
