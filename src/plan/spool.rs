//! The manifest lines planning leaves out, written to a file as they are
//! found rather than held until the build ends: a manifest of 100 million
//! bad lines costs planning no memory per line.
//!
//! [`Spool`] takes each [`LineRejection`] from the planner
//! ([`super::manifest::Options::reject`]) and appends it, as the line of
//! `rejected.jsonl` it will be, to a file beside the outputs
//! (`rejected.jsonl.planning.partial`). The planner reads the manifests in
//! split order and each in line order, so the file is one run per split,
//! each sorted by line. [`Spooled`] reads the runs back, and the build
//! merges them with the rejections it found later into `rejected.jsonl`'s
//! order (`app::build::rejections`). It keeps the first [`SAMPLE`] in
//! memory for the report and the log; the file goes when it is dropped.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead as _, BufReader, BufWriter, Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

use super::manifest::LineRejection;
use crate::compute::Rejection;
use crate::model::RejectKind;

/// Rejections kept in memory for the report and the log; the rest are in
/// the file only.
pub const SAMPLE: usize = 1000;

/// Rejections being written as they are found (module doc).
pub struct Spool {
    inner: RefCell<Inner>,
}

struct Inner {
    out: BufWriter<File>,
    /// None once [`Spool::finish`] handed the file to a [`Spooled`].
    path: Option<PathBuf>,
    written: u64,
    /// Where each split's run starts, and its split.
    runs: Vec<(u32, u64)>,
    kinds: BTreeMap<RejectKind, u64>,
    count: u64,
    sample: Vec<Rejection>,
    /// The first write error; [`Spool::finish`] returns it.
    error: Option<std::io::Error>,
    line: Vec<u8>,
}

impl Spool {
    /// Creates (or truncates) the file at `path`.
    pub fn create(path: &Path) -> std::io::Result<Spool> {
        let out = BufWriter::with_capacity(1 << 16, File::create(path)?);
        Ok(Spool {
            inner: RefCell::new(Inner {
                out,
                path: Some(path.to_path_buf()),
                written: 0,
                runs: Vec::new(),
                kinds: BTreeMap::new(),
                count: 0,
                sample: Vec::new(),
                error: None,
                line: Vec::new(),
            }),
        })
    }

    /// Appends `r`, in the planner's order (split by split, line by line).
    pub fn push(&self, r: LineRejection) {
        let mut s = self.inner.borrow_mut();
        let s = &mut *s;
        if s.runs.last().is_none_or(|&(split, _)| split != r.split) {
            s.runs.push((r.split, s.written));
        }
        let r = Rejection {
            path: r.path,
            kind: r.kind,
            reason: r.reason,
            line: Some(r.line),
        };
        s.count += 1;
        *s.kinds.entry(r.kind).or_default() += 1;
        if s.error.is_none() {
            s.line.clear();
            serde_json::to_writer(&mut s.line, &r).expect("a rejection serializes");
            s.line.push(b'\n');
            match s.out.write_all(&s.line) {
                Ok(()) => s.written += s.line.len() as u64,
                Err(e) => s.error = Some(e),
            }
        }
        if s.sample.len() < SAMPLE {
            s.sample.push(r);
        }
    }

    /// Rejections pushed so far.
    pub fn count(&self) -> u64 {
        self.inner.borrow().count
    }

    /// Flushes the file and hands it over; the first write error, if any.
    pub fn finish(self) -> std::io::Result<Spooled> {
        let mut s = self.inner.into_inner();
        if let Some(e) = s.error.take() {
            return Err(e);
        }
        s.out.flush()?;
        let ends = s.runs.iter().skip(1).map(|r| r.1).chain([s.written]);
        let runs = s.runs.iter().zip(ends).map(|(&(_, a), b)| (a, b)).collect();
        Ok(Spooled {
            path: s.path.take().expect("finished once"),
            runs,
            count: s.count,
            kinds: std::mem::take(&mut s.kinds),
            sample: std::mem::take(&mut s.sample),
        })
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(p) = &self.path {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The spooled rejections: the file's runs, their count by kind, and the
/// first [`SAMPLE`]. Dropping it removes the file.
#[derive(Debug)]
pub struct Spooled {
    path: PathBuf,
    /// Byte ranges of the file, one a split, each sorted by line.
    runs: Vec<(u64, u64)>,
    pub count: u64,
    pub kinds: BTreeMap<RejectKind, u64>,
    /// The first [`SAMPLE`], in the file's order.
    pub sample: Vec<Rejection>,
}

impl Spooled {
    /// A reader of each run, in split order.
    pub fn runs(&self) -> std::io::Result<Vec<Run>> {
        self.runs
            .iter()
            .map(|&(start, end)| {
                let mut f = File::open(&self.path)?;
                f.seek(SeekFrom::Start(start))?;
                Ok(Run {
                    lines: BufReader::with_capacity(1 << 16, f.take(end - start)),
                    text: String::new(),
                })
            })
            .collect()
    }
}

impl Drop for Spooled {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One split's rejections read back, in line order.
pub struct Run {
    lines: BufReader<std::io::Take<File>>,
    text: String,
}

impl Iterator for Run {
    type Item = std::io::Result<Rejection>;

    fn next(&mut self) -> Option<Self::Item> {
        self.text.clear();
        match self.lines.read_line(&mut self.text) {
            Ok(0) => None,
            Ok(_) => Some(serde_json::from_str(&self.text).map_err(std::io::Error::other)),
            Err(e) => Some(Err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rej(split: u32, line: u64) -> LineRejection {
        LineRejection {
            split,
            line,
            path: format!("m{split}.jsonl"),
            kind: RejectKind::BadLine,
            reason: format!("line {line} is not JSON: \"quoted\" \u{e9}"),
        }
    }

    #[test]
    fn runs_read_back_split_by_split_and_the_file_goes_with_it() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("rejected.jsonl.planning.partial");
        let spool = Spool::create(&path).unwrap();
        let pushed = [(0, 3), (0, 9), (2, 1), (2, 4), (2, 5), (3, 2)];
        for &(s, l) in &pushed {
            spool.push(rej(s, l));
        }
        assert_eq!(spool.count(), 6);
        let spooled = spool.finish().unwrap();
        assert_eq!(spooled.kinds[&RejectKind::BadLine], 6);
        let runs: Vec<Vec<(String, u64)>> = spooled
            .runs()
            .unwrap()
            .into_iter()
            .map(|r| {
                r.map(|r| {
                    let r = r.unwrap();
                    (r.path, r.line.unwrap())
                })
                .collect()
            })
            .collect();
        let want = |s: u32, ls: &[u64]| {
            ls.iter()
                .map(|&l| (format!("m{s}.jsonl"), l))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            runs,
            vec![want(0, &[3, 9]), want(2, &[1, 4, 5]), want(3, &[2])]
        );
        assert_eq!(spooled.sample.len(), 6);
        assert_eq!(spooled.sample[2].reason, rej(2, 1).reason);
        drop(spooled);
        assert!(!path.exists());
    }

    #[test]
    fn an_unfinished_spool_leaves_no_file() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("spool");
        let spool = Spool::create(&path).unwrap();
        spool.push(rej(0, 1));
        assert!(path.exists());
        drop(spool);
        assert!(!path.exists());
    }

    #[test]
    fn the_sample_stops_at_its_size_and_the_count_does_not() {
        let d = tempfile::tempdir().unwrap();
        let spool = Spool::create(&d.path().join("spool")).unwrap();
        for l in 0..(SAMPLE as u64 + 5) {
            spool.push(rej(0, l + 1));
        }
        let s = spool.finish().unwrap();
        assert_eq!((s.count, s.sample.len()), (SAMPLE as u64 + 5, SAMPLE));
        let back: Vec<Rejection> = s.runs().unwrap().remove(0).map(Result::unwrap).collect();
        assert_eq!(back.len(), SAMPLE + 5);
        assert_eq!(back[..SAMPLE], s.sample[..]);
    }
}
