//! `merge`: joins the files of a sharded build (`build --shard K/N`) into one
//! `<split>.h5` per split and one `rejected.jsonl`, equal to what a
//! single-node build of the same tree writes.
//!
//! * **Virtual** (default): `mel`, `label` and `path` are HDF5 virtual
//!   datasets over the shard files, which stay where they are (the mapping
//!   names them relative to the merged file's directory, so the directory can
//!   be moved as a whole). Shard K's rows follow shard K-1's: by the share
//!   rule ([`shard`]) that is the row order of a single-node build.
//! * **Copy** (`--copy`): a standalone file with the rows copied, chunked and
//!   resizable like a build's; the shard files can then be deleted.
//!
//! Either way the root attributes are those of the shards minus `shard`, and
//! the rejection logs are joined and sorted by path, as a build sorts them.
//!
//! Each file is written as `<name>.partial` and renamed when complete; a
//! failed or interrupted write deletes its `.partial`. A stopping signal
//! ([`crate::app::interrupt`]) stops the merge between files (or between the
//! copied blocks of one) and deletes what this run had written, leaving the
//! shards as they were.
//!
//! Before writing anything, merge checks the set of shards and refuses with a
//! sentence ([`Error`]): no shards, a misnamed shard file, mixed N, a missing
//! shard of some split or rejection log, a file whose `shard` attribute
//! disagrees with its name, shards whose rows overlap or are out of order,
//! differing attributes (parameters, label table, input) or dataset types,
//! and shards of variable-length rows (`features`, docs/FORMAT.md), which it
//! does not join yet.

pub mod attrs;
mod copy;
pub mod shard;
mod vds;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};

use hdf5::File;
use hdf5::types::VarLenUnicode;
use serde::Serialize;

use crate::app::interrupt::{self, Stopped};
use attrs::Value;
use shard::{SHARD_ATTR, Shard, ShardFile};

/// Why a merge was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    // The causes are in the sentence, not chained as `source` (the CLI
    // prints the chain, which would repeat them).
    #[error("cannot {action} {}: {cause}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        cause: std::io::Error,
    },
    #[error("{}: cannot {action}: {cause}", file.display())]
    Hdf5 {
        file: PathBuf,
        action: String,
        cause: hdf5::Error,
    },
    #[error(
        "no shard files (<split>.shard-K-of-N.h5) in {}; run `melforge build --shard K/N` for every K first",
        .0.display()
    )]
    NoShards(PathBuf),
    #[error(
        "{name} looks like a shard file but is not named <split>.shard-K-of-N.h5 or rejected.shard-K-of-N.jsonl with 0 ≤ K < N and no leading zeros; rename or remove it"
    )]
    BadName { name: String },
    #[error(
        "the directory mixes shards of different builds: {a} is one of {n_a} shards, {b} one of {n_b}; remove the stale files"
    )]
    MixedCount {
        a: String,
        n_a: usize,
        b: String,
        n_b: usize,
    },
    #[error(
        "{what}: shard(s) {missing} of {n} are missing (their build has not finished or failed)"
    )]
    Missing {
        what: String,
        missing: String,
        n: usize,
    },
    #[error(
        "{file} holds shard {inside} (its `shard` attribute) but its name says shard {named}: a copied or renamed file is a duplicate shard"
    )]
    Mislabelled {
        file: String,
        inside: String,
        named: Shard,
    },
    #[error(
        "{b} starts with row {first:?}, which does not come after the last row {last:?} of {a}: the shards overlap or are out of order (duplicate shards?)"
    )]
    Overlap {
        a: String,
        b: String,
        last: String,
        first: String,
    },
    #[error(
        "{a} and {b} have different label tables ({va} vs {vb}): every shard must be built from the same tree"
    )]
    LabelTables {
        a: String,
        b: String,
        va: String,
        vb: String,
    },
    #[error(
        "{a} and {b} differ in attribute `{name}` ({va} vs {vb}): shards of different parameters or builds cannot be merged"
    )]
    Attribute {
        a: String,
        b: String,
        name: String,
        va: String,
        vb: String,
    },
    #[error("{a} and {b} differ in dataset `{dataset}`: {va} vs {vb}")]
    Dataset {
        a: String,
        b: String,
        dataset: &'static str,
        va: String,
        vb: String,
    },
    #[error("{file}: {reason}")]
    BadShard { file: String, reason: String },
    #[error(
        "{file} holds variable-length rows (recipe {recipe:?}): merge does not join shards of \
         that layout yet; read the shard files together with melforge.ConcatMelDataset, or \
         build without --shard"
    )]
    FrameRows { file: String, recipe: String },
    #[error("{file} line {line}: {reason}")]
    BadRejection {
        file: String,
        line: usize,
        reason: String,
    },
    #[error("cannot write the virtual dataset `{dataset}` of {}: {cause}", file.display())]
    Virtual {
        file: PathBuf,
        dataset: &'static str,
        cause: vds::Error,
    },
    #[error(transparent)]
    Interrupted(#[from] Stopped),
}

/// Attaches a file and an action to an HDF5 error.
trait Ctx<T> {
    fn ctx(self, file: &Path, action: impl FnOnce() -> String) -> Result<T, Error>;
}

impl<T> Ctx<T> for hdf5::Result<T> {
    fn ctx(self, file: &Path, action: impl FnOnce() -> String) -> Result<T, Error> {
        self.map_err(|cause| Error::Hdf5 {
            file: file.to_path_buf(),
            action: action(),
            cause,
        })
    }
}

/// What `merge` wrote.
#[derive(Debug, Serialize)]
pub struct Report {
    /// "virtual" or "copy".
    pub mode: &'static str,
    pub shards: usize,
    pub outputs: Vec<Output>,
    pub rejected: usize,
    pub rejected_log: PathBuf,
}

#[derive(Debug, Serialize)]
pub struct Output {
    pub split: String,
    pub path: PathBuf,
    pub rows: usize,
}

/// One opened shard file of one split.
pub(crate) struct Part {
    pub name: String,
    pub file: File,
    pub rows: usize,
}

/// The shard files found in a directory, checked for completeness.
struct Found {
    count: usize,
    /// split → file name of shard K at index K.
    splits: BTreeMap<String, Vec<String>>,
    rejected: Vec<String>,
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

fn find(dir: &Path) -> Result<Found, Error> {
    let mut count: Option<(usize, String)> = None;
    let mut splits: BTreeMap<String, BTreeMap<usize, String>> = BTreeMap::new();
    let mut rejected = BTreeMap::new();
    for name in list_names(dir)? {
        let parsed = shard::parse_file_name(&name);
        let shard = match &parsed {
            Some(ShardFile::Split { shard, .. } | ShardFile::Rejected(shard)) => *shard,
            None if shard::looks_like_shard_file(&name) => return Err(Error::BadName { name }),
            None => continue,
        };
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
        match parsed {
            Some(ShardFile::Split { split, .. }) => {
                splits
                    .entry(split)
                    .or_default()
                    .insert(shard.index, name.clone());
            }
            _ => {
                rejected.insert(shard.index, name.clone());
            }
        }
    }
    let Some((count, _)) = count else {
        return Err(Error::NoShards(dir.to_path_buf()));
    };
    if splits.is_empty() {
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
        &rejected,
    )?;
    let mut by_split = BTreeMap::new();
    for (split, have) in &splits {
        by_split.insert(split.clone(), complete(format!("split `{split}`"), have)?);
    }
    Ok(Found {
        count,
        splits: by_split,
        rejected,
    })
}

/// The element type and row shape of a dataset, as text for comparing.
fn layout(ds: &hdf5::Dataset) -> hdf5::Result<String> {
    let shape = ds.shape();
    Ok(format!(
        "{:?} rows of {:?}",
        ds.dtype()?.to_descriptor()?,
        &shape[1..]
    ))
}

/// The attributes every shard of the build must share: all but `split` and `shard`.
fn shared(attrs: &[(String, Value)]) -> impl Iterator<Item = &(String, Value)> {
    attrs
        .iter()
        .filter(|(n, _)| n != "split" && n != SHARD_ATTR)
}

/// Reference values from the first file: attributes and dataset layouts.
struct Reference {
    name: String,
    attrs: Vec<(String, Value)>,
    layouts: [String; 3],
}

const DATASETS: [&str; 3] = ["mel", "label", "path"];

/// Opens and checks one shard file against its name and the reference.
fn open_part(
    dir: &Path,
    name: &str,
    split: &str,
    k: usize,
    count: usize,
    reference: &mut Option<Reference>,
) -> Result<Part, Error> {
    let p = dir.join(name);
    let bad = |reason: String| Error::BadShard {
        file: name.to_string(),
        reason,
    };
    let file = File::open(&p).ctx(&p, || "open the shard".into())?;
    let attrs = attrs::read_all(&file).ctx(&p, || "read the root attributes".into())?;
    let named = Shard { index: k, count };
    match attrs::get(&attrs, SHARD_ATTR) {
        Some(Value::Str(s)) if *s == named.to_string() => {}
        Some(v) => {
            return Err(Error::Mislabelled {
                file: name.to_string(),
                inside: v.to_string(),
                named,
            });
        }
        None => {
            return Err(bad(
                "no `shard` attribute: not written by `build --shard`".into()
            ));
        }
    }
    if attrs::get(&attrs, "split") != Some(&Value::Str(split.to_string())) {
        return Err(bad(format!("its `split` attribute is not {split:?}")));
    }
    if file.link_exists("features") {
        let recipe = match attrs::get(&attrs, "recipe") {
            Some(v) => v.to_string(),
            None => "unknown".into(),
        };
        return Err(Error::FrameRows {
            file: name.to_string(),
            recipe,
        });
    }
    let mut rows = None;
    let mut layouts: [String; 3] = Default::default();
    for (i, d) in DATASETS.iter().enumerate() {
        let ds = file.dataset(d).ctx(&p, || format!("open dataset `{d}`"))?;
        let n = ds.shape().first().copied().unwrap_or(0);
        if *rows.get_or_insert(n) != n {
            return Err(bad(format!(
                "dataset `{d}` has {n} rows, `mel` has {rows:?}"
            )));
        }
        layouts[i] = layout(&ds).ctx(&p, || format!("read the type of `{d}`"))?;
    }
    let Some(r) = reference else {
        *reference = Some(Reference {
            name: name.to_string(),
            attrs,
            layouts,
        });
        return Ok(Part {
            name: name.to_string(),
            file,
            rows: rows.unwrap_or(0),
        });
    };
    compare(r, name, &attrs, &layouts)?;
    Ok(Part {
        name: name.to_string(),
        file,
        rows: rows.unwrap_or(0),
    })
}

fn compare(
    r: &Reference,
    name: &str,
    attrs: &[(String, Value)],
    layouts: &[String; 3],
) -> Result<(), Error> {
    let ours: BTreeMap<&str, &Value> = shared(attrs).map(|(n, v)| (n.as_str(), v)).collect();
    let theirs: BTreeMap<&str, &Value> = shared(&r.attrs).map(|(n, v)| (n.as_str(), v)).collect();
    let keys: BTreeSet<&str> = ours.keys().chain(theirs.keys()).copied().collect();
    let show = |v: Option<&&Value>| v.map_or("absent".to_string(), |v| v.to_string());
    for key in keys {
        let (a, b) = (theirs.get(key), ours.get(key));
        if a == b {
            continue;
        }
        let (a_name, b_name) = (r.name.clone(), name.to_string());
        return Err(if key == "label_names" {
            Error::LabelTables {
                a: a_name,
                b: b_name,
                va: show(a),
                vb: show(b),
            }
        } else {
            Error::Attribute {
                a: a_name,
                b: b_name,
                name: key.to_string(),
                va: show(a),
                vb: show(b),
            }
        });
    }
    for (i, d) in DATASETS.iter().enumerate() {
        if r.layouts[i] != layouts[i] {
            return Err(Error::Dataset {
                a: r.name.clone(),
                b: name.to_string(),
                dataset: d,
                va: r.layouts[i].clone(),
                vb: layouts[i].clone(),
            });
        }
    }
    Ok(())
}

fn path_at(part: &Part, dir: &Path, i: usize) -> Result<String, Error> {
    let p = dir.join(&part.name);
    let v = part
        .file
        .dataset("path")
        .and_then(|d| d.read_slice_1d::<VarLenUnicode, _>(i..i + 1))
        .ctx(&p, || format!("read row {i} of `path`"))?;
    Ok(v[0].as_str().to_string())
}

/// Checks that each non-empty shard's rows come after the previous one's.
fn check_order(dir: &Path, parts: &[Part]) -> Result<(), Error> {
    let mut last: Option<(String, String)> = None;
    for part in parts.iter().filter(|p| p.rows > 0) {
        let first = path_at(part, dir, 0)?;
        if let Some((a, last_path)) = &last
            && first <= *last_path
        {
            return Err(Error::Overlap {
                a: a.clone(),
                b: part.name.clone(),
                last: last_path.clone(),
                first,
            });
        }
        last = Some((part.name.clone(), path_at(part, dir, part.rows - 1)?));
    }
    Ok(())
}

/// Writes `<dir>/<name>` through `<name>.partial`, fsynced and renamed when
/// `write` succeeds (then fsyncs `dir`), deleted when it fails.
fn write_atomically(
    dir: &Path,
    name: &str,
    write: impl FnOnce(&Path) -> Result<(), Error>,
) -> Result<PathBuf, Error> {
    let final_path = dir.join(name);
    let partial = dir.join(format!("{name}.partial"));
    if let Err(e) = write(&partial) {
        interrupt::discard([partial]);
        return Err(e);
    }
    // Durable before and after the rename (power loss: docs/OPERATIONS.md).
    let io = |path: &Path, action| {
        let path = path.to_path_buf();
        move |cause| Error::Io {
            path,
            action,
            cause,
        }
    };
    crate::runtime::durable::sync_file(&partial).map_err(io(&partial, "sync"))?;
    std::fs::rename(&partial, &final_path).map_err(io(&partial, "rename"))?;
    crate::runtime::durable::sync_dir(dir).map_err(io(dir, "sync the directory"))?;
    Ok(final_path)
}

/// Creates an empty file with a build's file-level settings.
pub(crate) fn create_file(p: &Path) -> Result<File, Error> {
    File::with_options()
        .with_fapl(|fapl| fapl.libver_latest())
        .with_fcpl(|fcpl| fcpl.obj_track_times(false))
        .create(p)
        .ctx(p, || "create the file".into())
}

fn write_virtual(
    dir: &Path,
    parts: &[Part],
    attrs: &[(String, Value)],
    out: &Path,
) -> Result<(), Error> {
    let file = create_file(out)?;
    attrs::write_all(&file, attrs).ctx(out, || "write the root attributes".into())?;
    let total: usize = parts.iter().map(|p| p.rows).sum();
    let mut offset = 0;
    let sources: Vec<vds::Source<'_>> = parts
        .iter()
        .map(|p| {
            let s = vds::Source {
                file: &p.name,
                rows: p.rows,
                offset,
            };
            offset += p.rows;
            s
        })
        .collect();
    for d in DATASETS {
        let like = parts[0]
            .file
            .dataset(d)
            .ctx(&dir.join(&parts[0].name), || format!("open dataset `{d}`"))?;
        let shape = like.shape();
        vds::create(file.id(), d, like.id(), &shape[1..], total, &sources).map_err(|cause| {
            Error::Virtual {
                file: out.to_path_buf(),
                dataset: d,
                cause,
            }
        })?;
    }
    file.close().ctx(out, || "close the file".into())
}

/// Joins the shard rejection logs, sorted by path as a build sorts them;
/// returns the number of rejections.
fn merge_rejections(dir: &Path, logs: &[String], out: &Path) -> Result<usize, Error> {
    let mut lines: Vec<(String, String)> = Vec::new();
    for name in logs {
        let p = dir.join(name);
        let f = std::fs::File::open(&p).map_err(|cause| Error::Io {
            path: p.clone(),
            action: "open",
            cause,
        })?;
        for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
            let line = line.map_err(|cause| Error::Io {
                path: p.clone(),
                action: "read",
                cause,
            })?;
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
            lines.push((path, line));
        }
    }
    lines.sort();
    let io = |cause| Error::Io {
        path: out.to_path_buf(),
        action: "write",
        cause,
    };
    let mut f = std::io::BufWriter::new(std::fs::File::create(out).map_err(io)?);
    for (_, line) in &lines {
        f.write_all(line.as_bytes()).map_err(io)?;
        f.write_all(b"\n").map_err(io)?;
    }
    f.flush().map_err(io)?;
    Ok(lines.len())
}

/// Merges the shards in `dir` into `<split>.h5` (virtual, or standalone when
/// `copy`) and `rejected.jsonl`.
pub fn merge(dir: &Path, copy: bool) -> Result<Report, Error> {
    let mut written = Vec::new();
    let r = merge_into(dir, copy, &mut written);
    if let Err(Error::Interrupted(_)) = &r {
        interrupt::discard(written);
    }
    r
}

/// Each split's name and its opened shard files, in shard order.
type Splits = Vec<(String, Vec<Part>)>;

/// Opens every shard file of every split, each checked against the first
/// one opened; with the attributes the merged files carry (that first
/// file's, less the shard's own).
fn open_splits(dir: &Path, found: &Found) -> Result<(Splits, Vec<(String, Value)>), Error> {
    let mut reference = None;
    let mut splits = Vec::new();
    for (split, names) in &found.splits {
        let mut parts = Vec::with_capacity(names.len());
        for (k, name) in names.iter().enumerate() {
            parts.push(open_part(dir, name, split, k, found.count, &mut reference)?);
        }
        check_order(dir, &parts)?;
        splits.push((split.clone(), parts));
    }
    let reference = reference.expect("at least one shard file was opened");
    let attrs = reference
        .attrs
        .iter()
        .filter(|(n, _)| n != SHARD_ATTR)
        .cloned()
        .collect();
    Ok((splits, attrs))
}

/// [`merge`], recording each file it finishes in `written`.
fn merge_into(dir: &Path, copy: bool, written: &mut Vec<PathBuf>) -> Result<Report, Error> {
    let found = find(dir)?;
    let n_files = found.splits.len() as u64 + 1;
    let stopped = |done: usize| Stopped::check(done as u64, n_files, "files");
    let (splits, attrs) = open_splits(dir, &found)?;
    let mut outputs = Vec::new();
    for (split, parts) in &splits {
        let mut split_attrs = attrs.clone();
        for (n, v) in &mut split_attrs {
            if n == "split" {
                *v = Value::Str(split.clone());
            }
        }
        let rows = parts.iter().map(|p| p.rows).sum();
        if let Some(s) = stopped(written.len()) {
            return Err(s.into());
        }
        let path = write_atomically(dir, &format!("{split}.h5"), |out| {
            // A split with no rows at all has nothing to map: it gets the
            // standalone (empty) datasets in either mode.
            if copy || rows == 0 {
                copy::write(dir, parts, &split_attrs, out)
            } else {
                write_virtual(dir, parts, &split_attrs, out)
            }
        })
        .map_err(|e| match e {
            // copy::write stops between blocks without the counts.
            Error::Interrupted(s) => Stopped {
                done: written.len() as u64,
                total: n_files,
                ..s
            }
            .into(),
            e => e,
        })?;
        written.push(path.clone());
        interrupt::checkpoint("merged-split");
        tracing::info!(split = %split, rows, path = %path.display(), "Merged a split.");
        outputs.push(Output {
            split: split.clone(),
            path,
            rows,
        });
    }
    let mut n_rejected = 0;
    if let Some(s) = stopped(written.len()) {
        return Err(s.into());
    }
    let rejected_log = write_atomically(dir, "rejected.jsonl", |out| {
        n_rejected = merge_rejections(dir, &found.rejected, out)?;
        Ok(())
    })?;
    written.push(rejected_log.clone());
    if let Some(s) = stopped(written.len()) {
        return Err(s.into());
    }
    Ok(Report {
        mode: if copy { "copy" } else { "virtual" },
        shards: found.count,
        outputs,
        rejected: n_rejected,
        rejected_log,
    })
}
