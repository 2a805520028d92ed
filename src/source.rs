//! The job source for `build`: a sorted walk of the input tree.
//!
//! Finds every file whose extension is one of `input.extensions` (`wav` and
//! `flac` by default, matched case-insensitively) below the input directory, assigns each its split, label and sequence number by the
//! docs/DESIGN.md rule, and fixes the order in which rows will appear:
//!
//! * `<INPUT>/c1/…/ck/name.wav`: k ≥ 2 → split c1, label ck; k = 1 → split
//!   "all", label c1; k = 0 → split "all", no label (-1).
//! * Label ids index the sorted set of label names of the whole build, so they
//!   are identical across splits. Splits are sorted by name.
//! * Within a split, files are in sorted relative-path order (byte order of the
//!   `/`-joined path); `seq` is the position in that order.
//!
//! Hidden entries (names starting with `.`) are skipped, symlinked directories
//! are not followed (no cycles), a symlinked file is resolved here to the path
//! its job opens (the reader itself never follows a link), and unreadable
//! directories, non-UTF-8 names and unresolvable links are reported as
//! [`Warning`]s (kind, path, reason: data for structured logs; `build` turns
//! them into rejections) rather than aborting the walk.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One file to process. Kept small (a build holds one per input file for its
/// whole run): the path to open is derived ([`Plan::open_path`]), and the
/// relative path is shared with the writer's plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    /// Path relative to the input directory, `/`-separated; recorded in `path`.
    pub rel_path: Arc<str>,
    /// A symbolic link's resolved target, opened instead of `input/rel_path`.
    pub target: Option<PathBuf>,
    /// Index into [`Plan::splits`].
    pub split: usize,
    /// Position within its split (row order before rejections are removed).
    pub seq: usize,
    /// Index into [`Plan::label_names`], or -1.
    pub label: i32,
}

/// The outcome of a walk: every job, grouped by split, in row order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The input directory as given to the walk.
    pub input: PathBuf,
    /// Split names, sorted.
    pub splits: Vec<String>,
    /// Label names, sorted; label ids index this.
    pub label_names: Vec<String>,
    /// All jobs, ordered by (split, seq).
    pub jobs: Vec<Job>,
    /// Problems met while walking (unreadable directories), in walk order.
    pub warnings: Vec<Warning>,
    /// Regular files seen whose extension is not an input extension.
    pub skipped_non_wav: usize,
}

impl Plan {
    /// The path the reader opens for `job`.
    pub fn open_path(&self, job: &Job) -> PathBuf {
        open_path(&self.input, job)
    }

    /// Jobs of split `i`, in seq order.
    pub fn split_jobs(&self, i: usize) -> impl Iterator<Item = &Job> {
        self.jobs.iter().filter(move |j| j.split == i)
    }
}

/// Something the walk skipped, and why. `Display` gives the whole sentence;
/// a structured log takes [`WarningKind::sentence`] as the message and `path`
/// and `reason` as fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    pub kind: WarningKind,
    /// The directory or entry concerned.
    pub path: PathBuf,
    /// The I/O error, or what is wrong with the name.
    pub reason: String,
}

/// What a [`Warning`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WarningKind {
    /// A directory could not be read; nothing below it is in the plan.
    UnreadableDir,
    /// One entry of a directory could not be listed.
    UnlistableEntry,
    /// A name is not valid UTF-8, so it cannot be a row's `path`.
    NonUtf8Name,
    /// A symbolic link whose target cannot be resolved (dangling, a loop).
    BrokenLink,
}

impl WarningKind {
    /// A sentence for the log message (the values go in fields).
    pub fn sentence(self) -> &'static str {
        match self {
            WarningKind::UnreadableDir => "Skipped a directory that cannot be read.",
            WarningKind::UnlistableEntry => "Could not list a directory entry.",
            WarningKind::NonUtf8Name => "Skipped a name that is not valid UTF-8.",
            WarningKind::BrokenLink => "Skipped a symbolic link that cannot be resolved.",
        }
    }
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = self.path.display();
        let why = &self.reason;
        match self.kind {
            WarningKind::UnreadableDir => write!(f, "Skipped directory {p}: {why}."),
            WarningKind::UnlistableEntry => write!(f, "Could not list an entry of {p}: {why}."),
            WarningKind::NonUtf8Name => write!(f, "Skipped {p}: {why}."),
            WarningKind::BrokenLink => write!(f, "Skipped link {p}: {why}."),
        }
    }
}

/// `path` as text for logs and `rejected.jsonl`: valid UTF-8 as is, each
/// byte that is not as `\xNN`, so distinct names stay distinct.
pub fn escape_path(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for chunk in path.as_os_str().as_bytes().utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02X}"));
        }
    }
    out
}

/// Split and label names of a relative path's parent folders (docs/DESIGN.md rule).
pub fn split_and_label(components: &[&str]) -> (String, Option<String>) {
    let (split, label) = names(components);
    (split.to_string(), label.map(str::to_string))
}

/// The path the reader opens for `job` of a walk of `input`.
pub fn open_path(input: &Path, job: &Job) -> PathBuf {
    match &job.target {
        Some(t) => t.clone(),
        None => input.join(&*job.rel_path),
    }
}

/// [`split_and_label`] without copies.
fn names<'a>(components: &[&'a str]) -> (&'a str, Option<&'a str>) {
    let parents = &components[..components.len().saturating_sub(1)];
    match parents {
        [] => ("all", None),
        [only] => ("all", Some(only)),
        [first, .., last] => (first, Some(last)),
    }
}

fn has_extension(name: &str, extensions: &[String]) -> bool {
    Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| extensions.iter().any(|x| x.eq_ignore_ascii_case(e)))
}

/// A file the walk found: its relative path, and the target to open when it
/// is a symbolic link (the reader never follows links itself).
type Found = (String, Option<PathBuf>);

fn walk(dir: &Path, rel: &str, ext: &[String], found: &mut Vec<Found>, plan: &mut Plan) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            plan.warnings.push(Warning {
                kind: WarningKind::UnreadableDir,
                path: dir.to_path_buf(),
                reason: e.to_string(),
            });
            return;
        }
    };
    for entry in entries {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                plan.warnings.push(Warning {
                    kind: WarningKind::UnlistableEntry,
                    path: dir.to_path_buf(),
                    reason: e.to_string(),
                });
                continue;
            }
        };
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            // Only what would have been built: directories and input files.
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if !is_dir && !has_extension(&name.to_string_lossy(), ext) {
                continue;
            }
            plan.warnings.push(Warning {
                kind: WarningKind::NonUtf8Name,
                path: entry.path(),
                reason: "the name is not valid UTF-8".to_string(),
            });
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let child_rel = if rel.is_empty() {
            name.to_string()
        } else {
            format!("{rel}/{name}")
        };
        let Ok(file_type) = entry.file_type() else {
            continue;
        };
        if file_type.is_dir() {
            walk(&entry.path(), &child_rel, ext, found, plan);
        } else if has_extension(name, ext) {
            // Regular files, and symbolic links resolved here to what they
            // point at (the reader opens with O_NOFOLLOW).
            if !file_type.is_symlink() {
                found.push((child_rel, None));
            } else {
                match std::fs::canonicalize(entry.path()) {
                    Ok(target) => found.push((child_rel, Some(target))),
                    Err(e) => plan.warnings.push(Warning {
                        kind: WarningKind::BrokenLink,
                        path: entry.path(),
                        reason: e.to_string(),
                    }),
                }
            }
        } else if file_type.is_file() {
            plan.skipped_non_wav += 1;
        }
    }
}

/// Walks `input` for the default input extensions (`input.extensions`
/// absent) and builds the plan. Fails only if `input` itself is not a
/// readable directory.
pub fn scan(input: &Path) -> std::io::Result<Plan> {
    let ext: Vec<String> = crate::config::defaults::input::EXTENSIONS
        .iter()
        .map(|e| e.to_string())
        .collect();
    scan_with(input, &ext)
}

/// [`scan`] for files with one of `extensions` (lower case, no dot).
pub fn scan_with(input: &Path, extensions: &[String]) -> std::io::Result<Plan> {
    let meta = std::fs::metadata(input)?;
    if !meta.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            format!("{} is not a directory", input.display()),
        ));
    }
    let mut plan = Plan {
        input: input.to_path_buf(),
        ..Plan::default()
    };
    let mut found = Vec::new();
    walk(input, "", extensions, &mut found, &mut plan);
    found.sort_unstable_by(|a, b| a.0.cmp(&b.0));

    // Split and label names: sets of distinct names, not a copy per file (the
    // plan of a 200k-file build is most of its memory).
    let name_of = |rel: &str| {
        let parts: Vec<&str> = rel.split('/').collect();
        let (split, label) = names(&parts);
        (split.to_owned(), label.map(str::to_owned))
    };
    let mut splits = BTreeSet::new();
    let mut labels = BTreeSet::new();
    for (rel, _) in &found {
        let (split, label) = name_of(rel);
        if !splits.contains(&split) {
            splits.insert(split);
        }
        if let Some(l) = label.filter(|l| !labels.contains(l)) {
            labels.insert(l);
        }
    }
    plan.splits = splits.into_iter().collect();
    plan.label_names = labels.into_iter().collect();

    let mut next_seq = vec![0usize; plan.splits.len()];
    let mut jobs: Vec<Job> = Vec::with_capacity(found.len());
    for (rel, target) in found {
        let (split, label) = name_of(&rel);
        let split = plan
            .splits
            .binary_search(&split)
            .expect("split was inserted");
        let label = label.map_or(-1, |l| {
            plan.label_names
                .binary_search(&l)
                .expect("label was inserted") as i32
        });
        let seq = next_seq[split];
        next_seq[split] += 1;
        jobs.push(Job {
            rel_path: rel.into(),
            target,
            split,
            seq,
            label,
        });
    }
    jobs.sort_by_key(|j| (j.split, j.seq));
    plan.jobs = jobs;
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_for_each_depth() {
        assert_eq!(split_and_label(&["a.wav"]), ("all".into(), None));
        assert_eq!(
            split_and_label(&["leak", "a.wav"]),
            ("all".into(), Some("leak".into()))
        );
        assert_eq!(
            split_and_label(&["TRAINING", "leak", "a.wav"]),
            ("TRAINING".into(), Some("leak".into()))
        );
        assert_eq!(
            split_and_label(&["TRAINING", "site3", "leak", "a.wav"]),
            ("TRAINING".into(), Some("leak".into()))
        );
    }

    #[test]
    fn scan_takes_the_configured_extensions_case_insensitively() {
        let d = tempfile::tempdir().unwrap();
        for p in ["a/x.wav", "a/y.FLAC", "a/z.mp3", "b/w.flac"] {
            let f = d.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, b"").unwrap();
        }
        let rels = |plan: &Plan| {
            plan.jobs
                .iter()
                .map(|j| j.rel_path.to_string())
                .collect::<Vec<_>>()
        };
        let plan = scan(d.path()).unwrap();
        assert_eq!(rels(&plan), ["a/x.wav", "a/y.FLAC", "b/w.flac"]);
        assert_eq!(plan.skipped_non_wav, 1);
        let plan = scan_with(d.path(), &["flac".to_string()]).unwrap();
        assert_eq!(rels(&plan), ["a/y.FLAC", "b/w.flac"]);
        assert_eq!(plan.skipped_non_wav, 2);
    }

    #[test]
    fn scan_sorts_and_assigns_ids_shared_across_splits() {
        let d = tempfile::tempdir().unwrap();
        for p in [
            "TRAINING/b/2.wav",
            "TRAINING/a/1.WAV",
            "TESTING/b/0.wav",
            "TESTING/b/notes.txt",
            "TESTING/.hidden/x.wav",
            "loose.wav",
        ] {
            let f = d.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, b"").unwrap();
        }
        let plan = scan(d.path()).unwrap();
        assert_eq!(plan.splits, ["TESTING", "TRAINING", "all"]);
        assert_eq!(plan.label_names, ["a", "b"]);
        assert_eq!(plan.skipped_non_wav, 1);
        let got: Vec<_> = plan
            .jobs
            .iter()
            .map(|j| (&*j.rel_path, j.split, j.seq, j.label))
            .collect();
        assert_eq!(
            got,
            [
                ("TESTING/b/0.wav", 0, 0, 1),
                ("TRAINING/a/1.WAV", 1, 0, 0),
                ("TRAINING/b/2.wav", 1, 1, 1),
                ("loose.wav", 2, 0, -1),
            ]
        );
    }

    #[test]
    fn a_non_utf8_name_is_a_warning_with_its_path() {
        use std::os::unix::ffi::OsStrExt;
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("ok.wav"), b"").unwrap();
        let bad = d.path().join(std::ffi::OsStr::from_bytes(b"bad\xff.wav"));
        std::fs::write(&bad, b"").unwrap();
        let plan = scan(d.path()).unwrap();
        assert_eq!(plan.jobs.len(), 1);
        let w = &plan.warnings[0];
        assert_eq!((w.kind, &w.path), (WarningKind::NonUtf8Name, &bad));
        assert_eq!(
            w.to_string(),
            format!("Skipped {}: the name is not valid UTF-8.", bad.display())
        );
    }

    #[test]
    fn a_file_as_input_is_an_error() {
        let f = tempfile::NamedTempFile::new().unwrap();
        assert!(scan(f.path()).is_err());
    }
}
