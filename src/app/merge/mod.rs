//! `merge`: joins the files of a sharded build (`build --shard K/N`) into one
//! `<split>.h5` per split, one `rejected.jsonl` and, for a manifest build,
//! one written-back `<split>.jsonl` per manifest: what a single-node build of
//! the same input writes.
//!
//! Shard K's rows follow shard K-1's: by the share rule ([`shard`]) that is
//! the row order of a single-node build (sorted paths, or manifest line
//! order), so joining is concatenation. Every dataset a split file holds is
//! joined ([`open::DATASETS`]): librosa's fixed rows (`mel`) or the speech
//! recipes' variable-length rows (`features`, `offsets`, `lengths`,
//! `pad_value`), `label`, `path`, and a manifest build's `meta` and `line`.
//!
//! * **Virtual** (default): the datasets are HDF5 virtual datasets over the
//!   shard files, which stay where they are (the mapping names them relative
//!   to the merged file's directory, so the directory can be moved as a
//!   whole): shard K's rows (or frames, for `features`) placed after shard
//!   K-1's. `offsets` alone is written out (8 bytes a row): a row's first
//!   frame in the merged `features` is its shard's value plus the frames of
//!   the shards before it, which a mapping cannot add.
//! * **Copy** (`--copy`): a standalone file with the rows copied, chunked and
//!   resizable like a build's; the shard files can then be deleted.
//!
//! Either way the root attributes are those of the shards minus `shard`; the
//! rejection logs are joined and sorted by line and path, as a build sorts
//! them; the written-back manifests are joined in shard order, each line's
//! `features_file` and `features_row` naming its row in the merged file
//! ([`logs`]).
//!
//! Each file is written as `<name>.partial` and renamed when complete; a
//! failed or interrupted write deletes its `.partial`. A stopping signal
//! ([`crate::app::interrupt`]) stops the merge between files (or between the
//! copied blocks of one) and deletes what this run had written, leaving the
//! shards as they were.
//!
//! Before writing anything, merge checks the set of shards and refuses with a
//! sentence ([`Error`]): no shards, a misnamed shard file, mixed N, a missing
//! shard of some split, rejection log or written-back manifest, a file whose
//! `shard` attribute disagrees with its name, shards whose rows overlap or
//! are out of order (by path, or by manifest line), differing attributes
//! (parameters, label table, input) or datasets (which ones, element types,
//! row shapes), and variable-length rows whose `offsets` do not run on.

pub mod attrs;
mod copy;
mod find;
mod logs;
mod map;
mod offsets;
pub mod open;
pub use crate::plan::shard;
mod stats;
use crate::writer::vds;

use std::path::{Path, PathBuf};

use hdf5::File;
use serde::Serialize;

use crate::app::interrupt::{self, Stopped};
use attrs::Value;
use open::Part;
use shard::Shard;

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
    #[error("{file} line {line}: {reason}")]
    BadRejection {
        file: String,
        line: usize,
        reason: String,
    },
    #[error(
        "{file} line {line}: {reason} (a manifest written back by `build --shard` ends with \
         its row's `features_file`, `features_row` and `num_frames`)"
    )]
    BadWriteBack {
        file: String,
        line: usize,
        reason: String,
    },
    #[error(
        "cannot write the merged manifest {}: it is the build's input manifest",
        .0.display()
    )]
    WriteBackOverInput(PathBuf),
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
    /// The written-back manifests (`<split>.jsonl`), for a manifest build.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub manifests: Vec<PathBuf>,
}

#[derive(Debug, Serialize)]
pub struct Output {
    pub split: String,
    pub path: PathBuf,
    pub rows: usize,
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

/// Creates the merged file of a split at `p` with the split's root
/// attributes (both layouts start so).
fn create_split(p: &Path, split_attrs: &[(String, attrs::Value)]) -> Result<File, Error> {
    let file = create_file(p)?;
    attrs::write_all(&file, split_attrs).ctx(p, || "write the root attributes".into())?;
    Ok(file)
}

/// Merges the shards in `dir` into `<split>.h5` (virtual, or standalone when
/// `copy`), `rejected.jsonl` and the written-back `<split>.jsonl`.
pub fn merge(dir: &Path, copy: bool) -> Result<Report, Error> {
    let mut written = Vec::new();
    let r = merge_into(dir, copy, &mut written);
    if let Err(Error::Interrupted(_)) = &r {
        // A merged split's CMVN statistics beside it go with it.
        interrupt::discard(crate::cmvn::files::with_beside(written));
    }
    r
}

/// [`merge`], recording each file it finishes in `written`.
fn merge_into(dir: &Path, copy: bool, written: &mut Vec<PathBuf>) -> Result<Report, Error> {
    let found = find::find(dir)?;
    let (splits, attrs) = open::open_splits(dir, &found)?;
    let write_backs = logs::plan_write_backs(dir, &found, &splits, &attrs)?;
    for w in &write_backs {
        logs::check_write_back(dir, w)?;
    }
    let n_files = (splits.len() + 1 + write_backs.len()) as u64;
    let stopped = |done: usize| Stopped::check(done as u64, n_files, "files");
    let mut outputs = Vec::new();
    for (split, parts) in &splits {
        if let Some(s) = stopped(written.len()) {
            return Err(s.into());
        }
        let path = merge_split(dir, split, parts, &attrs, copy).map_err(|e| match e {
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
        let rows = parts.iter().map(|p| p.rows).sum();
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
        n_rejected = logs::merge_rejections(dir, &found.rejected, out)?;
        Ok(())
    })?;
    written.push(rejected_log.clone());
    let mut manifests = Vec::new();
    for w in &write_backs {
        if let Some(s) = stopped(written.len()) {
            return Err(s.into());
        }
        let path = write_atomically(dir, &w.target, |out| logs::merge_write_back(dir, w, out))?;
        written.push(path.clone());
        manifests.push(path);
    }
    if let Some(s) = stopped(written.len()) {
        return Err(s.into());
    }
    Ok(Report {
        mode: if copy { "copy" } else { "virtual" },
        shards: found.count,
        outputs,
        rejected: n_rejected,
        rejected_log,
        manifests,
    })
}

/// Writes `<split>.h5` from the split's shard files.
fn merge_split(
    dir: &Path,
    split: &str,
    parts: &[Part],
    attrs: &[(String, Value)],
    copy: bool,
) -> Result<PathBuf, Error> {
    let mut split_attrs = attrs.to_vec();
    for (n, v) in &mut split_attrs {
        if n == "split" {
            *v = Value::Str(split.to_string());
        }
    }
    let rows: usize = parts.iter().map(|p| p.rows).sum();
    let cmvn = stats::combine(dir, parts)?;
    let name = format!("{split}.h5");
    let mut beside = None;
    let path = write_atomically(dir, &name, |out| {
        // A split with no rows at all has nothing to map: it gets the
        // standalone (empty) datasets in either mode.
        if copy || rows == 0 {
            copy::write(dir, parts, &split_attrs, out)?;
        } else {
            map::write(dir, parts, &split_attrs, out)?;
        }
        if let Some(s) = &cmvn {
            stats::store(out, s)?;
            let pending = crate::cmvn::files::prepare(&dir.join(&name), s);
            beside = Some(pending.map_err(|cause| Error::Io {
                path: dir.join(&name),
                action: "write the CMVN statistics beside",
                cause,
            })?);
        }
        Ok(())
    })?;
    if let Some(p) = beside {
        p.commit().map_err(|cause| Error::Io {
            path: path.clone(),
            action: "rename the CMVN statistics beside",
            cause,
        })?;
    }
    Ok(path)
}
