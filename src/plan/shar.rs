//! lhotse Shar: a folder of numbered shards, each a CutSet
//! (`cuts.NNNNNN.jsonl.gz`) beside a tar of its cuts' audio
//! (`recording.NNNNNN.tar`), as lhotse's `SharWriter` writes them.
//!
//! The writer stores each cut's audio already cut (`cut.load_audio()`: the
//! cut's channel or channels, from its start for its duration) as the
//! member `<cut id>.<format>` (flac, wav, mp3 or opus), followed by
//! `<cut id>.json`, the recording's manifest; in the CutSet the cut's
//! `start` is 0 and its recording a placeholder (`"type": "shar"`). So a
//! cut's row is its member decoded whole, as `CutSet.from_shar` loads it,
//! and its metadata that of a cut in a CutSet manifest
//! ([`crate::plan::manifest::cut_meta`]) with the `shard` it came from.
//!
//! A cut whose member is missing, is not audio, or which has no recording
//! (the writer's `.nodata` placeholder) is a rejection naming the shard and
//! the cut's line; a line that is not a cut, likewise.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::tar::Index;
use super::webdataset::audio_kind;
use crate::plan::manifest::Line;

/// One cut of a CutSet shard: its `id` and every field.
pub struct Cut {
    pub id: String,
    pub fields: Map<String, Value>,
}

/// Why a CutSet line is no cut, or a cut has no member to build.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadCut {
    #[error("the line is {bytes} bytes, over the manifest line limit")]
    TooLong { bytes: u64 },
    #[error("the line is not UTF-8 (from byte {at}); expected UTF-8 JSON")]
    NotUtf8 { at: usize },
    #[error("the line is not a JSON object; expected a lhotse cut")]
    NotACut,
    #[error("the cut has no string `id`; expected one, its member's name")]
    NoId,
    #[error(
        "cut `{id}` has no recording (Shar's `.nodata` placeholder); there is no audio to build"
    )]
    NoRecording { id: String },
    #[error("{tar} has no audio member `{id}.<flac|wav|mp3|opus>` for cut `{id}`")]
    NoMember { tar: String, id: String },
    #[error("{tar} has {count} audio members for cut `{id}`; expected one")]
    Members {
        tar: String,
        id: String,
        count: usize,
    },
}

/// A CutSet line as a cut; None for a blank line.
pub fn cut_of(line: Line<'_>) -> Result<Option<Cut>, BadCut> {
    let text = match line {
        Line::Text(t) if t.trim().is_empty() => return Ok(None),
        Line::Text(t) => t,
        Line::TooLong { bytes } => return Err(BadCut::TooLong { bytes }),
        Line::NotUtf8 { at } => return Err(BadCut::NotUtf8 { at }),
    };
    let fields: Map<String, Value> = match serde_json::from_str(text) {
        Ok(Value::Object(o)) => o,
        _ => return Err(BadCut::NotACut),
    };
    let Some(id) = fields.get("id").and_then(Value::as_str) else {
        return Err(BadCut::NoId);
    };
    Ok(Some(Cut {
        id: id.to_string(),
        fields,
    }))
}

/// The index (among `audio`, [`audio_by_id`]) of `cut`'s member of the
/// recording tar `tar`.
pub fn member_of(cut: &Cut, audio: &HashMap<&str, Vec<usize>>, tar: &str) -> Result<usize, BadCut> {
    let id = cut.id.clone();
    if matches!(cut.fields.get("recording"), None | Some(Value::Null)) {
        return Err(BadCut::NoRecording { id });
    }
    let tar = tar.to_string();
    match audio.get(cut.id.as_str()).map_or(&[][..], Vec::as_slice) {
        [one] => Ok(*one),
        [] => Err(BadCut::NoMember { tar, id }),
        many => Err(BadCut::Members {
            tar,
            id,
            count: many.len(),
        }),
    }
}

/// Whether `dir` is a Shar folder: at least one `cuts.*.jsonl.gz` with its
/// `recording.*.tar`.
pub fn is_shar_dir(dir: &Path) -> bool {
    dir.is_dir()
        && cuts_files(dir)
            .iter()
            .any(|c| recording_of(c).is_some_and(|r| r.is_file()))
}

/// The folder's CutSet shards, in shard order.
pub fn cuts_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("cuts.") && n.ends_with(".jsonl.gz"))
        })
        .collect();
    out.sort();
    out
}

/// The recording tar beside a CutSet shard (`cuts.000003.jsonl.gz` →
/// `recording.000003.tar`; `cuts.jsonl.gz` → `recording.tar`).
pub fn recording_of(cuts: &Path) -> Option<PathBuf> {
    let name = cuts.file_name()?.to_str()?;
    let middle = name.strip_prefix("cuts.")?.strip_suffix("jsonl.gz")?;
    Some(cuts.with_file_name(format!("recording.{middle}tar")))
}

/// The audio members of a recording tar by cut id: the member name less
/// its last extension, for members whose content is audio.
pub fn audio_by_id(ix: &Index) -> HashMap<&str, Vec<usize>> {
    let mut out: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, m) in ix.members.iter().enumerate() {
        let Some((id, _)) = m.name.rsplit_once('.') else {
            continue;
        };
        if audio_kind(&m.head).is_some() {
            out.entry(id).or_default().push(i);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_pair_by_number() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_shar_dir(dir.path()));
        for n in [
            "cuts.000001.jsonl.gz",
            "cuts.000000.jsonl.gz",
            "recording.000000.tar",
        ] {
            std::fs::write(dir.path().join(n), b"").unwrap();
        }
        assert!(is_shar_dir(dir.path()));
        let cuts = cuts_files(dir.path());
        let names: Vec<_> = cuts.iter().map(|p| p.file_name().unwrap()).collect();
        assert_eq!(names, ["cuts.000000.jsonl.gz", "cuts.000001.jsonl.gz"]);
        assert_eq!(
            recording_of(&cuts[1]).unwrap(),
            dir.path().join("recording.000001.tar")
        );
        assert_eq!(
            recording_of(Path::new("/x/cuts.jsonl.gz")).unwrap(),
            Path::new("/x/recording.tar")
        );
    }
}
