//! Opening a split's shard files and checking them against one another
//! before anything is written: the `shard` and `split` attributes against
//! the file name, the same datasets (element types, row shapes) and root
//! attributes in every file, row counts that agree, and rows that follow
//! on from one shard to the next.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use hdf5::File;
use hdf5::types::VarLenUnicode;

use super::attrs::{self, Value};
use super::find::Found;
use super::shard::{SHARD_ATTR, Shard};
use super::{Ctx, Error};

/// How a dataset's first axis runs, which decides how shards join.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    /// One entry per row: the shards' entries one after another.
    Rows,
    /// The frames of variable-length rows (`features`): the shards' frames
    /// one after another.
    Frames,
    /// Each row's first frame in `features` (`offsets`): a shard's values
    /// moved by the frames of the shards before it.
    Offsets,
}

/// Every dataset a split file of a build may hold, in the order merge
/// writes them: librosa's fixed rows (`mel`) or variable-length rows
/// (`features` … `pad_value`, docs/FORMAT.md), then `label`, `path` and a
/// manifest build's `meta` and `line`.
pub const DATASETS: [(&str, Axis); 9] = [
    ("mel", Axis::Rows),
    ("features", Axis::Frames),
    ("offsets", Axis::Offsets),
    ("lengths", Axis::Rows),
    ("pad_value", Axis::Rows),
    ("label", Axis::Rows),
    ("path", Axis::Rows),
    ("meta", Axis::Rows),
    ("line", Axis::Rows),
];

/// One opened shard file of one split.
pub(crate) struct Part {
    pub name: String,
    pub file: File,
    pub rows: usize,
    /// Frames in `features` (0 for fixed rows).
    pub frames: usize,
    /// The datasets it holds, in [`DATASETS`] order.
    pub datasets: Vec<(&'static str, Axis)>,
}

impl Part {
    /// Entries along `axis`'s first dimension.
    pub fn len(&self, axis: Axis) -> usize {
        match axis {
            Axis::Frames => self.frames,
            Axis::Rows | Axis::Offsets => self.rows,
        }
    }

    pub fn dataset(&self, dir: &Path, name: &str) -> Result<hdf5::Dataset, Error> {
        self.file
            .dataset(name)
            .ctx(&dir.join(&self.name), || format!("open dataset `{name}`"))
    }
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
    layouts: BTreeMap<&'static str, String>,
}

/// Checks the `shard` and `split` attributes against the file's name.
fn check_names(
    name: &str,
    attrs: &[(String, Value)],
    split: &str,
    named: Shard,
) -> Result<(), Error> {
    match attrs::get(attrs, SHARD_ATTR) {
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
                name,
                "no `shard` attribute: not written by `build --shard`".into(),
            ));
        }
    }
    if attrs::get(attrs, "split") != Some(&Value::Str(split.to_string())) {
        return Err(bad(name, format!("its `split` attribute is not {split:?}")));
    }
    Ok(())
}

fn bad(file: &str, reason: String) -> Error {
    Error::BadShard {
        file: file.to_string(),
        reason,
    }
}

/// The datasets of `file` and their layouts; the rows (every per-row
/// dataset agreeing) and the frames of `features`.
type Held = (
    Vec<(&'static str, Axis)>,
    BTreeMap<&'static str, String>,
    usize,
    usize,
);

fn datasets(file: &File, p: &Path, name: &str) -> Result<Held, Error> {
    let mut held = Vec::new();
    let mut layouts = BTreeMap::new();
    let (mut rows, mut frames) = (None, 0);
    for (d, axis) in DATASETS {
        if !file.link_exists(d) {
            continue;
        }
        let ds = file.dataset(d).ctx(p, || format!("open dataset `{d}`"))?;
        let n = ds.shape().first().copied().unwrap_or(0);
        if axis == Axis::Frames {
            frames = n;
        } else if *rows.get_or_insert(n) != n {
            return Err(bad(
                name,
                format!("dataset `{d}` has {n} rows, the others {rows:?}"),
            ));
        }
        layouts.insert(d, layout(&ds).ctx(p, || format!("read the type of `{d}`"))?);
        held.push((d, axis));
    }
    let has = |d: &str| layouts.contains_key(d);
    let fixed = has("mel") && !has("features");
    let frames_layout = has("features") && has("offsets") && has("lengths") && !has("mel");
    if !(fixed || frames_layout) || !has("label") || !has("path") {
        let names: Vec<&str> = held.iter().map(|h| h.0).collect();
        return Err(bad(
            name,
            format!("holds the datasets {names:?}, not those of a melforge split file"),
        ));
    }
    Ok((held, layouts, rows.unwrap_or(0), frames))
}

/// Opens and checks one shard file against its name and the reference.
fn open_part(
    dir: &Path,
    name: &str,
    split: &str,
    named: Shard,
    reference: &mut Option<Reference>,
) -> Result<Part, Error> {
    let p = dir.join(name);
    let file = File::open(&p).ctx(&p, || "open the shard".into())?;
    let attrs = attrs::read_all(&file).ctx(&p, || "read the root attributes".into())?;
    check_names(name, &attrs, split, named)?;
    let (datasets, layouts, rows, frames) = self::datasets(&file, &p, name)?;
    match reference {
        Some(r) => compare(r, name, &attrs, &layouts)?,
        None => {
            *reference = Some(Reference {
                name: name.to_string(),
                attrs,
                layouts,
            })
        }
    }
    Ok(Part {
        name: name.to_string(),
        file,
        rows,
        frames,
        datasets,
    })
}

fn compare(
    r: &Reference,
    name: &str,
    attrs: &[(String, Value)],
    layouts: &BTreeMap<&'static str, String>,
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
    for (d, _) in DATASETS {
        let (a, b) = (r.layouts.get(d), layouts.get(d));
        if a != b {
            let show = |v: Option<&String>| v.map_or("absent".to_string(), Clone::clone);
            return Err(Error::Dataset {
                a: r.name.clone(),
                b: name.to_string(),
                dataset: d,
                va: show(a),
                vb: show(b),
            });
        }
    }
    Ok(())
}

/// What orders a shard's rows against the next shard's: the manifest line
/// when the files have one (a manifest's rows are in line order, and one
/// recording may give many rows), else the path (a tree's sorted walk).
fn key_at(part: &Part, dir: &Path, i: usize) -> Result<(u32, String), Error> {
    let p = dir.join(&part.name);
    if part.datasets.iter().any(|d| d.0 == "line") {
        let v = part
            .file
            .dataset("line")
            .and_then(|d| d.read_slice_1d::<u32, _>(i..i + 1))
            .ctx(&p, || format!("read row {i} of `line`"))?;
        return Ok((v[0], format!("line {}", v[0])));
    }
    let v = part
        .file
        .dataset("path")
        .and_then(|d| d.read_slice_1d::<VarLenUnicode, _>(i..i + 1))
        .ctx(&p, || format!("read row {i} of `path`"))?;
    Ok((0, v[0].as_str().to_string()))
}

/// Checks that each non-empty shard's rows come after the previous one's.
fn check_order(dir: &Path, parts: &[Part]) -> Result<(), Error> {
    let mut last: Option<(String, (u32, String))> = None;
    for part in parts.iter().filter(|p| p.rows > 0) {
        let first = key_at(part, dir, 0)?;
        if let Some((a, last_key)) = &last
            && first <= *last_key
        {
            return Err(Error::Overlap {
                a: a.clone(),
                b: part.name.clone(),
                last: last_key.1.clone(),
                first: first.1,
            });
        }
        last = Some((part.name.clone(), key_at(part, dir, part.rows - 1)?));
    }
    Ok(())
}

/// Each split's name and its opened shard files, in shard order.
pub(super) type Splits = Vec<(String, Vec<Part>)>;

/// Opens every shard file of every split, each checked against the first
/// one opened; with the attributes the merged files carry (that first
/// file's, less the shard's own).
pub(super) fn open_splits(
    dir: &Path,
    found: &Found,
) -> Result<(Splits, Vec<(String, Value)>), Error> {
    let mut reference = None;
    let mut splits = Vec::new();
    for (split, names) in &found.splits {
        let mut parts = Vec::with_capacity(names.len());
        for (k, name) in names.iter().enumerate() {
            let named = Shard {
                index: k,
                count: found.count,
            };
            parts.push(open_part(dir, name, split, named, &mut reference)?);
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
