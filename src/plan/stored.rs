//! Stored corpora as the command line names them, and their item plan.
//!
//! `melforge build 'data/train-{000000..000127}.tar' 'data/dev-*.parquet'`:
//! each argument is one split ([`Set`]), named by `--split` (one argument
//! only) or the pattern's stem ([`super::pattern::split_of`]). An argument
//! is a stored corpus when it is a pattern, when its name ends in `.tar`,
//! `.tar.gz`, `.tgz` or `.parquet`, or when the file starts like a tar
//! archive or a parquet file; the arguments of one build are all stored or
//! none is. One set holds one kind of file.
//!
//! [`plan`] turns the sets into the item plan (the module doc of
//! [`super`]): the files in order, a shard of the build taking a
//! contiguous block of them whole ([`Options::share`]). Per file:
//!
//! * a tar shard: its index ([`super::tar`]), its samples
//!   ([`super::webdataset`]), each audio member an extent of the shard, its
//!   `path` `<shard file name>/<member name>`, its `line` the sample's
//!   1-based position in the shard; a gzipped shard is first streamed
//!   through gunzip into the build's spill folder (it cannot be read in
//!   ranges), bounded by `input.spill_max_mib`;
//! * a parquet file: its audio column's bytes spilled ([`super::parquet`]),
//!   each row an extent of the spill, its `path` `<file name>/<row>` (the
//!   struct's own `path` in the metadata), its `line` the row's 1-based
//!   position in the file.
//!
//! What cannot be built is a [`Rejected`] with the file, the member, key or
//! row, and the reason; the other items of the file are planned. A file
//! that cannot be opened at all is one rejection, and the build goes on
//! with the others.

use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::container::Window;
use super::{parquet, pattern, shar, tar, webdataset};
use crate::model::RejectKind;
use crate::plan::manifest::{self, Lines, Manifests, SpillDir};
use crate::plan::{PackedText, PathTable};

/// What one set holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// WebDataset tar shards (plain or gzipped).
    WebDataset,
    /// Hugging Face parquet files.
    Parquet,
    /// A lhotse Shar folder: each file a CutSet shard beside its
    /// recording tar.
    Shar,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::WebDataset => "webdataset",
            Kind::Parquet => "parquet",
            Kind::Shar => "shar",
        }
    }
}

/// One split's files, as one argument named them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Set {
    pub split: String,
    pub kind: Kind,
    /// The argument as given.
    pub pattern: String,
    pub files: Vec<PathBuf>,
}

/// Why the arguments cannot be planned at all.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Pattern(#[from] pattern::Error),
    #[error("no split name can be taken from `{pattern}`; name it with --split")]
    NoSplit { pattern: String },
    #[error(
        "--split names one split, but {n} inputs were given; give one input per split and leave \
         --split out, so each is named after its pattern"
    )]
    SplitWithMany { n: usize },
    #[error("`{first}` and `{second}` both name split `{split}`; name one with --split")]
    SameSplit {
        first: String,
        second: String,
        split: String,
    },
    #[error(
        "`{pattern}` names both tar shards and parquet files ({tar} and {parquet}); one input \
         holds one kind of file"
    )]
    MixedKinds {
        pattern: String,
        tar: PathBuf,
        parquet: PathBuf,
    },
    #[error(
        "`{plain}` is a folder or a manifest, but `{stored}` is a stored corpus (tar shards or \
         parquet files); build them separately"
    )]
    Mixed { plain: PathBuf, stored: PathBuf },
    #[error(
        "split `rejected` (from `{pattern}`) would be named like the rejection log; name it with \
         --split"
    )]
    RejectedSplit { pattern: String },
}

/// Whether `arg` names a stored corpus (module doc).
pub fn is_stored(arg: &Path) -> bool {
    if shar::is_shar_dir(arg) {
        return true;
    }
    let text = arg.to_string_lossy();
    if pattern::is_pattern(&text) && !arg.exists() {
        return true;
    }
    let name = text.to_ascii_lowercase();
    if [".tar", ".tar.gz", ".tgz", ".parquet"]
        .iter()
        .any(|e| name.ends_with(e))
    {
        return true;
    }
    arg.is_file() && sniff(arg).is_some()
}

/// What the file at `path` starts like: a tar archive (`ustar` at 257) or
/// a parquet file (`PAR1`). Gzip alone says nothing (a gzipped manifest is
/// gzip too): a gzipped shard is told by its name (`.tar.gz`, `.tgz`).
fn sniff(path: &Path) -> Option<Kind> {
    use std::io::Read;
    let mut head = [0u8; 264];
    let mut f = File::open(path).ok()?;
    let mut n = 0;
    while n < head.len() {
        match f.read(&mut head[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    let head = &head[..n];
    if head.starts_with(b"PAR1") {
        Some(Kind::Parquet)
    } else if head.get(257..262) == Some(b"ustar") {
        Some(Kind::WebDataset)
    } else {
        None
    }
}

fn kind_of(path: &Path) -> Kind {
    let parquet = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("parquet"));
    if parquet {
        return Kind::Parquet;
    }
    sniff(path).unwrap_or(Kind::WebDataset)
}

/// The sets `args` name, or None when they are no stored corpus (a tree or
/// manifests). `split` names the one set's split.
pub fn sets_of(args: &[PathBuf], split: Option<&str>) -> Result<Option<Vec<Set>>, Error> {
    let stored: Vec<bool> = args.iter().map(|a| is_stored(a)).collect();
    if !stored.iter().any(|&s| s) {
        return Ok(None);
    }
    if let Some(i) = stored.iter().position(|&s| !s) {
        let j = stored.iter().position(|&s| s).expect("one is stored");
        return Err(Error::Mixed {
            plain: args[i].clone(),
            stored: args[j].clone(),
        });
    }
    if split.is_some() && args.len() > 1 {
        return Err(Error::SplitWithMany { n: args.len() });
    }
    let mut sets: Vec<Set> = Vec::with_capacity(args.len());
    for arg in args {
        let text = arg.to_string_lossy().into_owned();
        let shar = shar::is_shar_dir(arg);
        let files = if shar {
            shar::cuts_files(arg)
        } else if pattern::is_pattern(&text) && !arg.exists() {
            pattern::expand(&text)?
        } else {
            vec![arg.clone()]
        };
        let kinds: Vec<Kind> = if shar {
            vec![Kind::Shar; files.len()]
        } else {
            files.iter().map(|f| kind_of(f)).collect()
        };
        let kind = kinds[0];
        if let Some(other) = kinds.iter().position(|&k| k != kind) {
            let (t, p) = if kind == Kind::WebDataset {
                (0, other)
            } else {
                (other, 0)
            };
            return Err(Error::MixedKinds {
                pattern: text,
                tar: files[t].clone(),
                parquet: files[p].clone(),
            });
        }
        let name = match split {
            Some(s) => s.to_string(),
            // A Shar folder is named after itself.
            None if shar => arg
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .ok_or_else(|| Error::NoSplit {
                    pattern: text.clone(),
                })?,
            None => pattern::split_of(&text).ok_or_else(|| Error::NoSplit {
                pattern: text.clone(),
            })?,
        };
        if name == "rejected" {
            return Err(Error::RejectedSplit { pattern: text });
        }
        if let Some(first) = sets.iter().find(|s| s.split == name) {
            return Err(Error::SameSplit {
                first: first.pattern.clone(),
                second: text,
                split: name,
            });
        }
        sets.push(Set {
            split: name,
            kind,
            pattern: text,
            files,
        });
    }
    Ok(Some(sets))
}

/// How [`plan`] plans.
#[derive(Clone, Copy, Default)]
pub struct Options<'a> {
    /// Of the files of every set in order, given their count, the indices
    /// this build takes (a shard's contiguous block); None: all.
    pub share: Option<&'a dyn Fn(usize) -> Range<usize>>,
    /// Where gzipped shards and parquet audio are spilled; without it they
    /// are rejected with the reason.
    pub spill: Option<&'a SpillDir>,
    /// The parquet audio column (None: `audio`).
    pub audio_column: Option<&'a str>,
}

/// An item left out: where, what kind of problem, why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    pub path: String,
    pub kind: RejectKind,
    pub reason: String,
}

/// The plan of the sets and what was left out.
#[derive(Debug, Default)]
pub struct Planned {
    pub m: Manifests,
    pub rejected: Vec<Rejected>,
    /// Files planned (this shard's).
    pub files: usize,
}

/// The item plan of `sets` (module doc).
pub fn plan(sets: &[Set], o: Options<'_>) -> Planned {
    let total: usize = sets.iter().map(|s| s.files.len()).sum();
    let take = o.share.map_or(0..total, |share| share(total));
    let mut b = Builder {
        indexed: index_plain_shards(sets, &take),
        ..Builder::default()
    };
    let mut k = 0usize;
    for (split, set) in sets.iter().enumerate() {
        b.m.plan.splits.push(set.split.clone());
        let first = b.paths.len() as u32;
        let mut seq = 0u32;
        for file in &set.files {
            if take.contains(&k) {
                b.files += 1;
                match set.kind {
                    Kind::WebDataset => b.shard(split as u32, &mut seq, file, k, o),
                    Kind::Parquet => b.parquet(split as u32, &mut seq, file, k, o),
                    Kind::Shar => b.shar(split as u32, &mut seq, file),
                }
            }
            k += 1;
        }
        b.m.items_of.push(first..b.paths.len() as u32);
    }
    if let Some(first) = sets.first().and_then(|s| s.files.first()) {
        b.m.plan.input = first.parent().unwrap_or(Path::new("")).to_path_buf();
    }
    let Builder {
        mut m,
        paths,
        meta,
        lines,
        rejected,
        files,
        ..
    } = b;
    m.plan.paths = Arc::new(paths);
    m.meta = Arc::new(meta);
    m.lines = Arc::new(lines);
    Planned { m, rejected, files }
}

/// The indexes of the plain (not gzipped) WebDataset shards among the
/// files `take`s, by their position in the sets, made on several threads:
/// a shard's index is a header read per member, so a build of many shards
/// spends its planning here, and shards are independent.
fn index_plain_shards(
    sets: &[Set],
    take: &Range<usize>,
) -> std::collections::HashMap<usize, std::io::Result<tar::Index>> {
    let files: Vec<(usize, &Path)> = sets
        .iter()
        .flat_map(|s| s.files.iter().map(move |f| (s.kind, f.as_path())))
        .enumerate()
        .filter(|(k, (kind, f))| take.contains(k) && *kind == Kind::WebDataset && !is_gzip(f))
        .map(|(k, (_, f))| (k, f))
        .collect();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8)
        .min(files.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::Mutex::new(std::collections::HashMap::new());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while let Some(&(k, f)) =
                    files.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                {
                    let ix = tar::index(f);
                    done.lock()
                        .expect("an indexing thread panicked")
                        .insert(k, ix);
                }
            });
        }
    });
    done.into_inner().expect("an indexing thread panicked")
}

#[derive(Default)]
struct Builder {
    /// Shards indexed ahead ([`index_plain_shards`]), by position.
    indexed: std::collections::HashMap<usize, std::io::Result<tar::Index>>,
    m: Manifests,
    paths: PathTable,
    meta: PackedText,
    lines: Vec<u32>,
    rejected: Vec<Rejected>,
    files: usize,
}

/// A file's name for `path` and rejections.
fn shown(file: &Path) -> String {
    file.file_name().map_or_else(
        || file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

impl Builder {
    fn reject(&mut self, path: String, kind: RejectKind, reason: String) {
        self.rejected.push(Rejected { path, kind, reason });
    }

    /// One item: `len` bytes of `open` from `start`, recorded as `path`.
    fn item(
        &mut self,
        (split, seq): (u32, &mut u32),
        path: &str,
        open: &Path,
        (start, len): (u64, u64),
        meta: Map<String, Value>,
        position: u64,
    ) {
        let meta = Value::Object(meta).to_string();
        if !self.paths.fits(path) || !self.meta.fits(&meta) {
            self.reject(
                path.to_string(),
                RejectKind::BadSample,
                "the build's paths pass the 4 GiB a build holds in memory; build the \
                 input in shards (build --shard K/N)"
                    .into(),
            );
            return;
        }
        let p = self.paths.push(path);
        self.meta.push(&meta);
        self.lines.push(u32::try_from(position).unwrap_or(u32::MAX));
        let range = Window::member(open, start, len).whole();
        self.m
            .push_job((p, split, *seq), Some(open.to_path_buf()), None, range);
        *seq += 1;
    }

    /// A WebDataset shard's samples.
    fn shard(&mut self, split: u32, seq: &mut u32, file: &Path, k: usize, o: Options<'_>) {
        let name = shown(file);
        let open = match self.open_shard(file, &name, k, o) {
            Some(p) => p,
            None => return,
        };
        let indexed = self.indexed.remove(&k);
        let ix = match indexed.unwrap_or_else(|| tar::index(&open)) {
            Ok(ix) => ix,
            Err(e) => {
                let reason = format!("cannot read the shard {}: {e}", file.display());
                self.reject(name, RejectKind::Unreadable, reason);
                return;
            }
        };
        self.m.header_bytes += ix.bytes_read;
        self.rejected.extend(damage(&name, &ix.problems));
        let Ok(f) = File::open(&open) else {
            return; // indexed a moment ago; the readers will say what changed
        };
        for (n, s) in webdataset::samples(&ix).iter().enumerate() {
            match webdataset::audio_of(&ix, s) {
                Ok(a) => {
                    let mut read = 0;
                    let meta = webdataset::sample_meta(&f, &name, &ix, s, a, &mut read);
                    self.m.header_bytes += read;
                    let m = &ix.members[a];
                    let path = format!("{name}/{}", m.name);
                    let extent = (m.start, m.len);
                    self.item((split, seq), &path, &open, extent, meta, n as u64 + 1);
                }
                Err(r) => {
                    let reason = format!("shard {name}: {}", r.reason);
                    self.reject(format!("{name}/{}", r.key), RejectKind::BadSample, reason);
                }
            }
        }
    }

    /// The file to index for shard `file`: itself, or its gunzipped copy
    /// in the spill folder.
    fn open_shard(&mut self, file: &Path, name: &str, k: usize, o: Options<'_>) -> Option<PathBuf> {
        if !is_gzip(file) {
            return Some(file.to_path_buf());
        }
        let Some(dir) = o.spill else {
            let reason = format!(
                "shard {name} is gzipped and cannot be read in place; it is streamed through a \
                 spill folder, which this build has not (input.spill_max_mib = 0)"
            );
            self.reject(name.to_string(), RejectKind::Unsupported, reason);
            return None;
        };
        let to = dir.path().join(format!("shard-{k}.tar"));
        match gunzip(file, &to, dir.max_bytes()) {
            Ok((read, broken)) => {
                self.m.header_bytes += read;
                self.m.spilled += 1;
                self.m.spill_bytes += std::fs::metadata(&to).map_or(0, |m| m.len());
                if let Some(why) = broken {
                    let reason = format!("shard {name}: {why}");
                    self.reject(name.to_string(), RejectKind::Malformed, reason);
                }
                Some(to)
            }
            Err(why) => {
                let _ = std::fs::remove_file(&to);
                let reason = format!("shard {name}: {why}");
                self.reject(name.to_string(), RejectKind::Malformed, reason);
                None
            }
        }
    }

    /// A lhotse Shar shard's cuts (`super::shar`), each its member of the
    /// recording tar beside `cuts`.
    fn shar(&mut self, split: u32, seq: &mut u32, cuts: &Path) {
        let cname = shown(cuts);
        let Some((rec, ix)) = self.shar_index(cuts, &cname) else {
            return;
        };
        let rname = shown(&rec);
        let audio = shar::audio_by_id(&ix);
        let mut lines = match Lines::open(cuts, manifest::Limits::default()) {
            Ok(l) => l,
            Err(e) => {
                self.reject(cname, RejectKind::Unreadable, e.to_string());
                return;
            }
        };
        loop {
            let (no, line) = match lines.next_line() {
                Ok(Some(l)) => l,
                Ok(None) => break,
                Err(e) => {
                    let reason = format!("{e}; the cuts after this point are not read");
                    self.reject(cname.clone(), RejectKind::Malformed, reason);
                    break;
                }
            };
            let cut = match shar::cut_of(line) {
                Ok(Some(cut)) => cut,
                Ok(None) => continue,
                Err(why) => {
                    let reason = format!("{cname}, line {no}: {why}");
                    self.reject(cname.clone(), RejectKind::BadLine, reason);
                    continue;
                }
            };
            let id = cut.id.as_str();
            match shar::member_of(&cut, &audio, &rname) {
                Ok(i) => {
                    let m = &ix.members[i];
                    let mut meta = manifest::cut_meta(&cut.fields);
                    meta.insert("shard".into(), Value::String(rname.clone()));
                    let path = format!("{rname}/{}", m.name);
                    let extent = (m.start, m.len);
                    self.item((split, seq), &path, &rec, extent, meta, no);
                }
                Err(why) => {
                    let reason = format!("{cname}, line {no}: {why}");
                    self.reject(format!("{rname}/{id}"), RejectKind::BadSample, reason);
                }
            }
        }
    }

    /// The recording tar beside `cuts` and its index, its damage
    /// rejected; None when it cannot be read (one rejection).
    fn shar_index(&mut self, cuts: &Path, cname: &str) -> Option<(PathBuf, tar::Index)> {
        let rec = shar::recording_of(cuts)?;
        let rname = shown(&rec);
        match tar::index(&rec) {
            Ok(ix) => {
                self.m.header_bytes += ix.bytes_read;
                self.rejected.extend(damage(&rname, &ix.problems));
                Some((rec, ix))
            }
            Err(e) => {
                let reason = format!(
                    "cannot read {} ({e}), the audio of every cut of {cname}",
                    rec.display()
                );
                self.reject(rname, RejectKind::Unreadable, reason);
                None
            }
        }
    }

    /// A parquet file's rows.
    fn parquet(&mut self, split: u32, seq: &mut u32, file: &Path, k: usize, o: Options<'_>) {
        let name = shown(file);
        let Some(dir) = o.spill else {
            let reason = format!(
                "{name}: a parquet file's audio is decoded into a spill folder, which this build \
                 has not (input.spill_max_mib = 0)"
            );
            self.reject(name, RejectKind::Unsupported, reason);
            return;
        };
        let to = dir.path().join(format!("parquet-{k}.bin"));
        let spilled = std::fs::create_dir_all(dir.path())
            .and_then(|()| File::create(&to))
            .map_err(|e| format!("cannot create its spill {}: {e}", to.display()))
            .and_then(|mut out| {
                let po = parquet::Options {
                    audio_column: o.audio_column,
                    max_spill_bytes: dir.max_bytes(),
                };
                parquet::spill(file, &mut out, &po).map_err(|e| e.to_string())
            });
        let spilled = match spilled {
            Ok(s) => s,
            Err(why) => {
                let _ = std::fs::remove_file(&to);
                self.reject(
                    name.clone(),
                    RejectKind::Malformed,
                    format!("{name}: {why}"),
                );
                return;
            }
        };
        self.m.header_bytes += spilled.bytes_read;
        self.m.spilled += 1;
        self.m.spill_bytes += spilled.bytes_written;
        for r in spilled.rejected {
            let path = if r.rows.end == r.rows.start + 1 {
                format!("{name}/{}", r.rows.start)
            } else {
                format!("{name}/{}..{}", r.rows.start, r.rows.end)
            };
            let reason = format!("{name}: {}", r.reason);
            self.reject(path, RejectKind::BadSample, reason);
        }
        for row in spilled.rows {
            let mut meta = Map::new();
            meta.insert("file".into(), Value::String(name.clone()));
            meta.insert("row".into(), Value::from(row.row));
            if let Some(p) = &row.audio_path {
                meta.insert("audio_path".into(), Value::String(p.clone()));
            }
            meta.extend(row.meta);
            let path = format!("{name}/{}", row.row);
            let extent = (row.start, row.len);
            self.item((split, seq), &path, &to, extent, meta, row.row + 1);
        }
    }
}

/// The rejections of the damage found in shard `name` (`tar::Problem`s):
/// the member when its name could be read, with the byte offset.
pub fn damage<'a>(
    name: &'a str,
    problems: &'a [tar::Problem],
) -> impl Iterator<Item = Rejected> + 'a {
    problems.iter().map(move |p| Rejected {
        path: p
            .member
            .as_ref()
            .map_or_else(|| name.to_string(), |m| format!("{name}/{m}")),
        kind: RejectKind::Malformed,
        reason: format!("shard {name}, byte {}: {}", p.at, p.reason),
    })
}

fn is_gzip(file: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 2];
    File::open(file)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| magic == [0x1f, 0x8b])
}

/// Streams the gzipped `file` into `to`, at most `max` bytes: the bytes
/// of `file` read, and why the stream broke off when it did (what came
/// before the break is kept, so the members before it build).
fn gunzip(file: &Path, to: &Path, max: u64) -> Result<(u64, Option<String>), String> {
    use std::io::{Read, Write};
    let src = File::open(file).map_err(|e| format!("cannot open it: {e}"))?;
    let size = src.metadata().map_or(0, |m| m.len());
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create the spill folder {}: {e}", dir.display()))?;
    }
    let out = File::create(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, out);
    let mut gz = flate2::read::MultiGzDecoder::new(std::io::BufReader::with_capacity(1 << 20, src));
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    let broken = loop {
        match gz.read(&mut buf) {
            Ok(0) => break None,
            Ok(k) => {
                n += k as u64;
                if n > max {
                    return Err(format!(
                        "it decompresses to more than {max} bytes (input.spill_max_mib); raise \
                         the limit or store the shard uncompressed"
                    ));
                }
                out.write_all(&buf[..k])
                    .map_err(|e| format!("cannot write its spill {}: {e}", to.display()))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                break Some(format!(
                    "its gzip stream breaks off after {n} bytes of tar ({e}); expected a whole \
                     gzip stream, so the members after that point are lost"
                ));
            }
        }
    };
    out.flush()
        .map_err(|e| format!("cannot write its spill {}: {e}", to.display()))?;
    Ok((size, broken))
}

#[cfg(test)]
#[path = "stored_tests.rs"]
mod tests;
