//! The shard files of an output directory, by kind and split, checked for
//! completeness (every K of one N) before anything is opened.

use std::collections::BTreeMap;
use std::path::Path;

use super::Error;
use super::shard::{self, ShardFile};

/// The shard files found in a directory, each list holding the file name of
/// shard K at index K.
pub(super) struct Found {
    pub count: usize,
    /// split → its `<split>.shard-K-of-N.h5`.
    pub splits: BTreeMap<String, Vec<String>>,
    /// `rejected.shard-K-of-N.jsonl`.
    pub rejected: Vec<String>,
    /// split → its written-back `<split>.shard-K-of-N.jsonl` (manifest
    /// builds; a split has all N or none).
    pub manifests: BTreeMap<String, Vec<String>>,
}

fn list_names(dir: &Path) -> Result<Vec<String>, Error> {
    let io = |cause| Error::Io {
        path: dir.to_path_buf(),
        action: "list",
        cause,
    };
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io)? {
        if let Some(n) = e.map_err(io)?.file_name().to_str() {
            names.push(n.to_string());
        }
    }
    names.sort();
    Ok(names)
}

/// The shard files seen, by kind, before the completeness check.
#[derive(Default)]
struct Seen {
    splits: BTreeMap<String, BTreeMap<usize, String>>,
    rejected: BTreeMap<usize, String>,
    manifests: BTreeMap<String, BTreeMap<usize, String>>,
}

pub(super) fn find(dir: &Path) -> Result<Found, Error> {
    let mut count: Option<(usize, String)> = None;
    let mut seen = Seen::default();
    for name in list_names(dir)? {
        let Some(parsed) = shard::parse_file_name(&name) else {
            if shard::looks_like_shard_file(&name) {
                return Err(Error::BadName { name });
            }
            continue;
        };
        let shard = parsed.shard();
        match &count {
            Some((n, first)) if *n != shard.count => {
                return Err(Error::MixedCount {
                    a: first.clone(),
                    n_a: *n,
                    b: name,
                    n_b: shard.count,
                });
            }
            Some(_) => {}
            None => count = Some((shard.count, name.clone())),
        }
        let at = match parsed {
            ShardFile::Split { split, .. } => seen.splits.entry(split).or_default(),
            ShardFile::Rejected(_) => &mut seen.rejected,
            ShardFile::Manifest { split, .. } => seen.manifests.entry(split).or_default(),
        };
        at.insert(shard.index, name);
    }
    let Some((count, _)) = count else {
        return Err(Error::NoShards(dir.to_path_buf()));
    };
    if seen.splits.is_empty() {
        return Err(Error::NoShards(dir.to_path_buf()));
    }
    let complete = |what: String, have: &BTreeMap<usize, String>| {
        let missing: Vec<String> = (0..count)
            .filter(|k| !have.contains_key(k))
            .map(|k| k.to_string())
            .collect();
        if missing.is_empty() {
            Ok(have.values().cloned().collect::<Vec<_>>())
        } else {
            Err(Error::Missing {
                what,
                missing: missing.join(", "),
                n: count,
            })
        }
    };
    let rejected = complete(
        "rejection logs rejected.shard-K-of-N.jsonl".into(),
        &seen.rejected,
    )?;
    let mut splits = BTreeMap::new();
    for (split, have) in &seen.splits {
        splits.insert(split.clone(), complete(format!("split `{split}`"), have)?);
    }
    let mut manifests = BTreeMap::new();
    for (split, have) in &seen.manifests {
        let what = format!("the written-back manifest of split `{split}`");
        manifests.insert(split.clone(), complete(what, have)?);
    }
    Ok(Found {
        count,
        splits,
        rejected,
        manifests,
    })
}
