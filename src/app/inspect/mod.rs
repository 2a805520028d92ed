//! `melforge inspect FILE`: what a split file holds, to look at before
//! training on it — the recipe and every parameter (the root attributes),
//! rows and a histogram of frames per row, the value range (and non-finite
//! values, which no recipe should produce), rejections by kind from the
//! `rejected.jsonl` beside it; and with `--row i --png FILE` an image of one
//! row ([`picture`]: time across in seconds, bins up).
//!
//! Both layouts of docs/FORMAT.md are read: variable-length rows
//! (`features`, `offsets`, `lengths`) and librosa's fixed rows (`mel`, a
//! row's segments side by side in time). Only the file is read, never
//! written.

mod picture;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use hdf5::{Dataset, File};
use serde::Serialize;

/// Why a file cannot be inspected.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: cannot {action}: {cause}", file.display())]
    Hdf5 {
        file: PathBuf,
        action: String,
        cause: hdf5::Error,
    },
    #[error("cannot {action} {}: {cause}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        cause: std::io::Error,
    },
    #[error("{}: neither `features` nor `mel` is in it: not a melforge split file", .0.display())]
    NotMelforge(PathBuf),
    #[error("{}: row {row} does not exist (the file has {rows} rows)", file.display())]
    NoRow {
        file: PathBuf,
        row: usize,
        rows: usize,
    },
    #[error("{} line {line}: {reason}", file.display())]
    BadRejection {
        file: PathBuf,
        line: usize,
        reason: String,
    },
}

trait Context<T> {
    fn ctx(self, file: &Path, action: impl FnOnce() -> String) -> Result<T, Error>;
}

impl<T> Context<T> for hdf5::Result<T> {
    fn ctx(self, file: &Path, action: impl FnOnce() -> String) -> Result<T, Error> {
        self.map_err(|cause| Error::Hdf5 {
            file: file.to_path_buf(),
            action: action(),
            cause,
        })
    }
}

/// One bar of the frames histogram: rows with `lo ≤ frames ≤ hi`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Bar {
    pub lo: u64,
    pub hi: u64,
    pub rows: u64,
}

/// What `inspect` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub file: PathBuf,
    /// `frames` (variable-length rows) or `mel` (librosa's fixed rows).
    pub layout: String,
    pub recipe: String,
    /// Every scalar root attribute, as text, in name order.
    pub attributes: Vec<(String, String)>,
    pub rows: u64,
    pub bins: u64,
    pub frames_total: u64,
    pub frames_min: u64,
    pub frames_max: u64,
    pub histogram: Vec<Bar>,
    /// Smallest and largest finite value (None without any).
    pub value_range: Option<(f32, f32)>,
    pub non_finite: u64,
    /// The `rejected.jsonl` beside the file, when there is one.
    pub rejected_log: Option<PathBuf>,
    /// Rejections of this split by kind (the log's files under its folder).
    pub rejected: BTreeMap<String, u64>,
}

/// A split file's rows as (time, bins) matrices, either layout.
struct Rows {
    file: PathBuf,
    data: Dataset,
    /// Variable-length: (first frame, frames) per row.
    spans: Option<Vec<(u64, u64)>>,
    rows: usize,
    bins: usize,
    /// Seconds between frames (for the picture's axis).
    step_s: f64,
}

impl Rows {
    fn open(path: &Path) -> Result<(File, Rows), Error> {
        let f = File::open(path).ctx(path, || "open the file".into())?;
        let attr_f64 = |name: &str| f.attr(name).and_then(|a| a.read_scalar::<f64>()).ok();
        let p = path;
        let rows = if f.link_exists("features") {
            let data = f.dataset("features").ctx(p, || "open `features`".into())?;
            let off = f.dataset("offsets").and_then(|d| d.read_raw::<i64>());
            let len = f.dataset("lengths").and_then(|d| d.read_raw::<i32>());
            let (off, len) = (
                off.ctx(p, || "read `offsets`".into())?,
                len.ctx(p, || "read `lengths`".into())?,
            );
            let spans: Vec<(u64, u64)> = off
                .iter()
                .zip(&len)
                .map(|(o, l)| (*o as u64, *l as u64))
                .collect();
            Rows {
                file: p.to_path_buf(),
                bins: data.shape().get(1).copied().unwrap_or(0),
                rows: spans.len(),
                spans: Some(spans),
                data,
                step_s: attr_f64("frame_step_seconds").unwrap_or(0.01),
            }
        } else if f.link_exists("mel") {
            let data = f.dataset("mel").ctx(p, || "open `mel`".into())?;
            let shape = data.shape();
            let hop = attr_f64("hop_length").unwrap_or(1.0);
            let rate = attr_f64("sample_rate").unwrap_or(1.0);
            Rows {
                file: p.to_path_buf(),
                bins: shape.get(3).copied().unwrap_or(0),
                rows: shape.first().copied().unwrap_or(0),
                spans: None,
                data,
                step_s: hop / rate,
            }
        } else {
            return Err(Error::NotMelforge(p.to_path_buf()));
        };
        Ok((f, rows))
    }

    fn frames(&self, i: usize) -> u64 {
        match &self.spans {
            Some(s) => s[i].1,
            None => {
                let s = self.data.shape();
                (s[1] * s[2] * s[4]) as u64
            }
        }
    }

    /// Row `i` as (frames, bins) values, frame-major.
    fn row(&self, i: usize) -> Result<Vec<f32>, Error> {
        let p = &self.file;
        match &self.spans {
            Some(s) => {
                let (o, n) = (s[i].0 as usize, s[i].1 as usize);
                let v = self
                    .data
                    .read_slice_2d::<f32, _>((o..o + n, ..))
                    .ctx(p, || format!("read the frames of row {i}"))?;
                Ok(v.iter().copied().collect())
            }
            None => {
                let v = self
                    .data
                    .read_slice::<f32, _, ndarray::Ix4>((i, .., .., .., ..))
                    .ctx(p, || format!("read row {i}"))?;
                // (n_long, n_short, n_mels, n_frames) → segments side by side.
                let (a, b, m, t) = v.dim();
                let mut out = Vec::with_capacity(a * b * m * t);
                for l in 0..a {
                    for s in 0..b {
                        for f in 0..t {
                            out.extend((0..m).map(|k| v[[l, s, k, f]]));
                        }
                    }
                }
                Ok(out)
            }
        }
    }
}

/// Reads `path` and the rejection log beside it.
pub fn inspect(path: &Path) -> Result<Report, Error> {
    let (f, rows) = Rows::open(path)?;
    let frames: Vec<u64> = (0..rows.rows).map(|i| rows.frames(i)).collect();
    let (value_range, non_finite) = value_range(&rows)?;
    let attributes = attributes(&f).ctx(path, || "read the root attributes".into())?;
    let text = |k: &str| {
        attributes
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    };
    let split = text("split").unwrap_or_default();
    let (rejected_log, rejected) = rejections(path, &split)?;
    Ok(Report {
        file: path.to_path_buf(),
        layout: if rows.spans.is_some() {
            "frames"
        } else {
            "mel"
        }
        .into(),
        recipe: text("recipe").unwrap_or_else(|| "librosa".into()),
        rows: rows.rows as u64,
        bins: rows.bins as u64,
        frames_total: frames.iter().sum(),
        frames_min: frames.iter().copied().min().unwrap_or(0),
        frames_max: frames.iter().copied().max().unwrap_or(0),
        histogram: histogram(&frames, 10),
        value_range,
        non_finite,
        rejected_log,
        rejected,
        attributes,
    })
}

/// Draws row `row` of `path` into the PNG `out`; returns its (width, height).
pub fn draw_row(path: &Path, row: usize, out: &Path) -> Result<(u32, u32), Error> {
    let (_f, rows) = Rows::open(path)?;
    if row >= rows.rows {
        return Err(Error::NoRow {
            file: path.to_path_buf(),
            row,
            rows: rows.rows,
        });
    }
    let values = rows.row(row)?;
    let frames = rows.frames(row) as usize;
    picture::write_png(&values, frames, rows.bins, rows.step_s, out).map_err(|cause| Error::Io {
        path: out.to_path_buf(),
        action: "write the picture",
        cause,
    })
}

/// Every scalar root attribute as text, in name order (arrays summarised).
fn attributes(f: &File) -> hdf5::Result<Vec<(String, String)>> {
    use hdf5::types::{TypeDescriptor as T, VarLenUnicode};
    let mut names = f.attr_names()?;
    names.sort();
    let mut out = Vec::new();
    for n in names {
        let a = f.attr(&n)?;
        let text = if !a.is_scalar() {
            format!("[{} values]", a.size())
        } else {
            match a.dtype()?.to_descriptor()? {
                T::Integer(_) | T::Unsigned(_) => a.read_scalar::<i64>()?.to_string(),
                T::Float(_) => a.read_scalar::<f64>()?.to_string(),
                T::Boolean => a.read_scalar::<bool>()?.to_string(),
                T::VarLenUnicode => a.read_scalar::<VarLenUnicode>()?.as_str().to_string(),
                _ => "<other>".into(),
            }
        };
        out.push((n, text));
    }
    Ok(out)
}

/// Finite min and max of every stored value, and the count of others;
/// read in blocks of about 16 MiB.
fn value_range(rows: &Rows) -> Result<(Option<(f32, f32)>, u64), Error> {
    let shape = rows.data.shape();
    let n = shape.first().copied().unwrap_or(0);
    let per: usize = shape[1..].iter().product::<usize>().max(1);
    let block = ((4 << 20) / per).max(1);
    let (mut lo, mut hi, mut bad) = (f32::INFINITY, f32::NEG_INFINITY, 0u64);
    let mut start = 0;
    while start < n {
        let end = (start + block).min(n);
        let v: Vec<f32> = if rows.spans.is_some() {
            rows.data
                .read_slice_2d::<f32, _>((start..end, ..))
                .map(|a| a.into_raw_vec_and_offset().0)
        } else {
            rows.data
                .read_slice::<f32, _, ndarray::Ix5>((start..end, .., .., .., ..))
                .map(|a| a.into_raw_vec_and_offset().0)
        }
        .ctx(&rows.file, || format!("read values {start}..{end}"))?;
        for &x in &v {
            if x.is_finite() {
                lo = lo.min(x);
                hi = hi.max(x);
            } else {
                bad += 1;
            }
        }
        start = end;
    }
    Ok(((lo <= hi).then_some((lo, hi)), bad))
}

/// `bars` equal-width bars between the fewest and most frames.
fn histogram(frames: &[u64], bars: u64) -> Vec<Bar> {
    let (Some(&lo), Some(&hi)) = (frames.iter().min(), frames.iter().max()) else {
        return Vec::new();
    };
    let width = (hi - lo) / bars + 1;
    let mut out: Vec<Bar> = (0..bars)
        .map(|k| Bar {
            lo: lo + k * width,
            hi: (lo + (k + 1) * width - 1).min(hi),
            rows: 0,
        })
        .take_while(|b| b.lo <= hi)
        .collect();
    for &f in frames {
        out[((f - lo) / width) as usize].rows += 1;
    }
    out
}

/// Rejections by kind in the `rejected.jsonl` beside `path` whose paths lie
/// under `split/` (a build's log covers every split).
fn rejections(path: &Path, split: &str) -> Result<(Option<PathBuf>, BTreeMap<String, u64>), Error> {
    let log = path.with_file_name("rejected.jsonl");
    let text = match std::fs::read_to_string(&log) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((None, BTreeMap::new())),
        Err(cause) => {
            return Err(Error::Io {
                path: log,
                action: "read",
                cause,
            });
        }
    };
    let mut kinds = BTreeMap::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| Error::BadRejection {
            file: log.clone(),
            line: i + 1,
            reason: e.to_string(),
        })?;
        let p = v["path"].as_str().unwrap_or_default();
        let mine = split == "all" || p.starts_with(&format!("{split}/"));
        if mine {
            let kind = v["kind"].as_str().unwrap_or("unknown").to_string();
            *kinds.entry(kind).or_insert(0) += 1;
        }
    }
    Ok((Some(log), kinds))
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.file.display())?;
        writeln!(f, "recipe: {} ({} layout)", self.recipe, self.layout)?;
        writeln!(f, "parameters:")?;
        for (k, v) in &self.attributes {
            writeln!(f, "  {k} = {v}")?;
        }
        writeln!(
            f,
            "rows: {}, {} bins, {} frames (per row {} to {})",
            self.rows, self.bins, self.frames_total, self.frames_min, self.frames_max
        )?;
        let most = self
            .histogram
            .iter()
            .map(|b| b.rows)
            .max()
            .unwrap_or(0)
            .max(1);
        for b in &self.histogram {
            let bar = "#".repeat((b.rows * 40).div_ceil(most) as usize);
            writeln!(f, "  {:>7} – {:<7} {:>7}  {bar}", b.lo, b.hi, b.rows)?;
        }
        match self.value_range {
            Some((lo, hi)) => writeln!(f, "values: {lo} to {hi}")?,
            None => writeln!(f, "values: none finite")?,
        }
        if self.non_finite > 0 {
            writeln!(f, "non-finite values: {}", self.non_finite)?;
        }
        match &self.rejected_log {
            None => writeln!(f, "rejections: no rejected.jsonl beside the file"),
            Some(log) if self.rejected.is_empty() => {
                writeln!(f, "rejections: none ({})", log.display())
            }
            Some(log) => {
                let total: u64 = self.rejected.values().sum();
                writeln!(f, "rejections: {total} ({})", log.display())?;
                for (k, n) in &self.rejected {
                    writeln!(f, "  {k}: {n}")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests;
