//! The job source for `build`: a sorted walk of the input tree.
//!
//! Finds every file whose extension is one of `input.extensions` (by
//! default the eight of `config::defaults::input::EXTENSIONS`: wav, flac,
//! mp3, ogg, opus, oga, m4a, mp4; matched case-insensitively) below the
//! input directory, assigns each its split, label and sequence number by
//! the docs/DESIGN.md rule, and fixes the order in which rows will appear:
//!
//! * `<INPUT>/c1/…/ck/name.wav`: k ≥ 2 → split c1, label ck; k = 1 → split
//!   "all", label c1; k = 0 → split "all", no label (-1).
//! * Label ids index the sorted set of label names of the whole build, so they
//!   are identical across splits. Splits are sorted by name.
//! * Within a split, files are in sorted relative-path order (byte order of the
//!   `/`-joined path); `seq` is the position in that order.
//!
//! How: the tree is listed level by level, the directories of one level on
//! several threads ([`list_tree`]); each directory's entries are sorted by
//! name, a directory's name with a `/` after it ([`Listing::key`]), so the
//! depth-first walk over those listings yields the paths already in byte
//! order, with no sort of every path afterwards. Warnings come in walk order.
//!
//! Hidden entries (names starting with `.`) are skipped, symlinked directories
//! are not followed (no cycles), a symlinked file is resolved here to the path
//! its job opens (the reader itself never follows a link), and unreadable
//! directories, non-UTF-8 names and unresolvable links are reported as
//! [`Warning`]s (kind, path, reason: data for structured logs; `build` turns
//! them into rejections) rather than aborting the walk.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::items::{Job, PathTable, Plan};
pub use super::items::{Warning, WarningKind};

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

/// [`names`] of a `/`-separated relative path, without splitting it into a
/// vector: the first and the last parent folder are all the rule needs.
fn names_of(rel: &str) -> (&str, Option<&str>) {
    let Some((parents, _file)) = rel.rsplit_once('/') else {
        return ("all", None);
    };
    match (parents.split_once('/'), parents.rsplit_once('/')) {
        (Some((first, _)), Some((_, last))) => (first, Some(last)),
        _ => ("all", Some(parents)),
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
    name.rsplit_once('.').is_some_and(|(stem, e)| {
        !stem.is_empty() && extensions.iter().any(|x| x.eq_ignore_ascii_case(e))
    })
}

/// The files a walk found, in walk order: relative paths, and the target to
/// open for those that are symbolic links (the reader never follows links).
#[derive(Default)]
struct Found {
    paths: PathTable,
    targets: HashMap<u32, PathBuf>,
}

/// What a directory entry is, for the walk.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Link,
    /// Anything else (a socket, a device): neither walked nor built.
    Other,
}

/// One directory's usable entries: names in one buffer, each with its kind,
/// sorted by [`Listing::key`].
#[derive(Default)]
struct Listing {
    text: String,
    /// (start, end of the sort key, kind); the name is the key without the
    /// `/` a directory's key ends with.
    entries: Vec<(u32, u32, Kind)>,
}

impl Listing {
    fn push(&mut self, name: &str, kind: Kind) {
        let start = self.text.len() as u32;
        self.text.push_str(name);
        if kind == Kind::Dir {
            self.text.push('/');
        }
        self.entries.push((start, self.text.len() as u32, kind));
    }

    /// A directory's name followed by `/`, a file's name alone: sorting the
    /// entries by it and walking depth first visits the files in the byte
    /// order of their whole relative paths (a directory `a` comes after a file
    /// `a-b.wav`, as `a/…` does after `a-b.wav`), so the walk needs no sort
    /// of every path afterwards.
    fn key(&self, e: &(u32, u32, Kind)) -> &str {
        &self.text[e.0 as usize..e.1 as usize]
    }

    fn name(&self, e: &(u32, u32, Kind)) -> &str {
        let end = e.1 as usize - usize::from(e.2 == Kind::Dir);
        &self.text[e.0 as usize..end]
    }

    fn sort(&mut self) {
        let mut entries = std::mem::take(&mut self.entries);
        entries.sort_unstable_by(|a, b| self.key(a).cmp(self.key(b)));
        self.entries = entries;
    }
}

/// A directory as [`list`] found it: its sorted entries (`None` when it
/// could not be read) and the warnings its listing raised.
struct Listed {
    listing: Option<Listing>,
    warnings: Vec<Warning>,
}

/// Lists `dir`, sorted; what cannot be listed or named becomes a warning.
fn list(dir: &Path, ext: &[String]) -> Listed {
    let mut warnings = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            warnings.push(Warning {
                kind: WarningKind::UnreadableDir,
                path: dir.to_path_buf(),
                reason: e.to_string(),
            });
            return Listed {
                listing: None,
                warnings,
            };
        }
    };
    let mut listing = Listing::default();
    for entry in entries {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                warnings.push(Warning {
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
            warnings.push(Warning {
                kind: WarningKind::NonUtf8Name,
                path: entry.path(),
                reason: "the name is not valid UTF-8".to_string(),
            });
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let Ok(t) = entry.file_type() else {
            continue;
        };
        let kind = if t.is_dir() {
            Kind::Dir
        } else if t.is_symlink() {
            Kind::Link
        } else if t.is_file() {
            Kind::File
        } else {
            Kind::Other
        };
        listing.push(name, kind);
    }
    listing.sort();
    Listed {
        listing: Some(listing),
        warnings,
    }
}

/// Threads that list directories at once: a tree's directories are listed
/// level by level, each level's directories in parallel (`getdents` and the
/// name handling are most of a walk: 0.4 µs a file on the dev VM).
const LIST_THREADS: usize = 8;

/// Every directory under `root` (itself included) listed, level by level.
fn list_tree(root: &Path, ext: &[String]) -> HashMap<PathBuf, Listed> {
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(LIST_THREADS);
    let mut all = HashMap::new();
    let mut level = vec![root.to_path_buf()];
    while !level.is_empty() {
        let listed = list_level(&level, ext, threads);
        let mut next = Vec::new();
        for (dir, l) in level.into_iter().zip(listed) {
            if let Some(listing) = &l.listing {
                next.extend(
                    listing
                        .entries
                        .iter()
                        .filter(|e| e.2 == Kind::Dir)
                        .map(|e| dir.join(listing.name(e))),
                );
            }
            all.insert(dir, l);
        }
        level = next;
    }
    all
}

/// [`list`] of each of `dirs`, in their order, on up to `threads` threads.
fn list_level(dirs: &[PathBuf], ext: &[String], threads: usize) -> Vec<Listed> {
    let threads = threads.min(dirs.len());
    if threads <= 1 {
        return dirs.iter().map(|d| list(d, ext)).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut got: Vec<(usize, Listed)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(d) = dirs.get(i) else { break mine };
                        mine.push((i, list(d, ext)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a directory listing thread panicked"))
            .collect()
    });
    got.sort_unstable_by_key(|(i, _)| *i);
    got.into_iter().map(|(_, l)| l).collect()
}

/// Depth first through `dir` (relative path `rel`, without a trailing `/`),
/// each directory's entries in [`Listing::key`] order, taking the listings
/// from `listed`: the paths land in `found` in sorted order, the warnings in
/// `plan` in walk order.
fn walk(
    dir: &Path,
    rel: &mut String,
    ext: &[String],
    listed: &mut HashMap<PathBuf, Listed>,
    found: &mut Found,
    plan: &mut Plan,
) {
    let Some(Listed { listing, warnings }) = listed.remove(dir) else {
        return;
    };
    plan.warnings.extend(warnings);
    let Some(listing) = listing else {
        return;
    };
    let base = rel.len();
    for e in &listing.entries {
        let name = listing.name(e);
        rel.truncate(base);
        if base > 0 {
            rel.push('/');
        }
        rel.push_str(name);
        match e.2 {
            Kind::Dir => walk(&dir.join(name), rel, ext, listed, found, plan),
            Kind::File | Kind::Link if has_extension(name, ext) => {
                // Regular files, and symbolic links resolved here to what
                // they point at (the reader opens with O_NOFOLLOW).
                if e.2 == Kind::File {
                    found.paths.push(rel);
                } else {
                    match std::fs::canonicalize(dir.join(name)) {
                        Ok(target) => {
                            let i = found.paths.push(rel);
                            found.targets.insert(i, target);
                        }
                        Err(err) => plan.warnings.push(Warning {
                            kind: WarningKind::BrokenLink,
                            path: dir.join(name),
                            reason: err.to_string(),
                        }),
                    }
                }
            }
            Kind::File => plan.skipped_non_wav += 1,
            Kind::Link | Kind::Other => {}
        }
    }
    rel.truncate(base);
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
    let mut found = Found::default();
    let mut listed = list_tree(input, extensions);
    walk(
        input,
        &mut String::new(),
        extensions,
        &mut listed,
        &mut found,
        &mut plan,
    );
    debug_assert!(
        (1..found.paths.len() as u32).all(|i| found.paths.get(i - 1) < found.paths.get(i))
    );

    // Split and label names: sets of distinct names, borrowed from the table.
    let mut splits = BTreeSet::new();
    let mut labels = BTreeSet::new();
    for i in 0..found.paths.len() as u32 {
        let (split, label) = names_of(found.paths.get(i));
        splits.insert(split);
        labels.extend(label);
    }
    plan.splits = splits.into_iter().map(str::to_owned).collect();
    plan.label_names = labels.into_iter().map(str::to_owned).collect();

    // Jobs in sorted path order, pointing into the walk's table (kept in walk
    // order: no second copy of every path).
    let mut next_seq = vec![0usize; plan.splits.len()];
    let mut jobs: Vec<Job> = Vec::with_capacity(found.paths.len());
    for path in 0..found.paths.len() as u32 {
        let (split, label) = names_of(found.paths.get(path));
        let split = plan
            .splits
            .binary_search_by(|s| s.as_str().cmp(split))
            .expect("split was inserted");
        let label = label.map_or(-1, |l| {
            plan.label_names
                .binary_search_by(|s| s.as_str().cmp(l))
                .expect("label was inserted") as i32
        });
        let seq = next_seq[split];
        next_seq[split] += 1;
        jobs.push(Job {
            path,
            // Both < the number of files, which the path table caps at 2^32.
            split: split as u32,
            seq: seq as u32,
            label,
        });
    }
    let Found { mut paths, targets } = found;
    paths.shrink_to_fit();
    plan.paths = Arc::new(paths);
    plan.targets = targets;
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
        // `z.txt` is no audio extension (mp3 and the other compressed
        // containers are in the default list since they decode).
        for p in ["a/x.wav", "a/y.FLAC", "a/z.txt", "b/w.flac"] {
            let f = d.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, b"").unwrap();
        }
        let rels = |plan: &Plan| {
            plan.jobs
                .iter()
                .map(|j| plan.rel_path(j).to_string())
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
            .map(|j| (plan.rel_path(j), j.split, j.seq, j.label))
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

    /// The walk sorts each directory, not every path: its order must still be
    /// the byte order of the whole relative paths, also where a name sorts
    /// below `/` (`-`, `.`, space, `+`) and one name is a prefix of another.
    #[test]
    fn the_walk_order_is_the_byte_order_of_the_whole_paths() {
        let d = tempfile::tempdir().unwrap();
        let files = [
            "a/1.wav",
            "a-b.wav",
            "a-b/2.wav",
            "a.b/3.wav",
            "a b/4.wav",
            "a+/5.wav",
            "a/b/c/6.wav",
            "a/b-c/7.wav",
            "a/b.wav",
            "A/8.wav",
            "ab/9.wav",
            "a/b/c.wav",
            "a/b/c-d/10.wav",
            "é/11.wav",
            "z.wav",
        ];
        for p in files {
            let f = d.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, b"").unwrap();
        }
        let plan = scan(d.path()).unwrap();
        let walked: Vec<&str> = (0..plan.paths.len() as u32)
            .map(|i| plan.paths.get(i))
            .collect();
        let mut sorted = files.to_vec();
        sorted.sort();
        assert_eq!(walked, sorted);
        // And each split's seq follows it.
        for (i, split) in plan.splits.iter().enumerate() {
            let rels: Vec<&str> = plan.split_jobs(i).map(|j| plan.rel_path(j)).collect();
            let mut want: Vec<&str> = sorted
                .iter()
                .copied()
                .filter(|p| names_of(p).0 == split)
                .collect();
            want.sort();
            assert_eq!(rels, want, "split {split}");
        }
    }

    #[test]
    fn names_of_a_path_follow_the_rule_at_every_depth() {
        for rel in [
            "a.wav",
            "leak/a.wav",
            "TRAINING/leak/a.wav",
            "TRAINING/site3/leak/a.wav",
            "T/s/r/leak/a.wav",
        ] {
            let parts: Vec<&str> = rel.split('/').collect();
            assert_eq!(names_of(rel), names(&parts), "{rel}");
        }
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

#[cfg(test)]
mod memory_tests {
    use super::*;

    /// A build holds its plan for the whole run, so the plan's memory per file
    /// decides how RSS grows with the corpus: a small fixed job and the path's
    /// own bytes (+4) in one shared table, not a `String`/`PathBuf` per file.
    #[test]
    fn a_plan_costs_its_path_bytes_plus_a_few_words_per_file() {
        let d = tempfile::tempdir().unwrap();
        let mut name_bytes = 0;
        for i in 0..500 {
            let rel = format!("TRAINING/label{}/clip_{i:05}.wav", i % 3);
            name_bytes += rel.len();
            let f = d.path().join(&rel);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, b"").unwrap();
        }
        let plan = scan(d.path()).unwrap();
        assert_eq!(plan.jobs.len(), 500);
        assert_eq!(std::mem::size_of::<Job>(), 16);
        assert_eq!(plan.paths.len(), 500);
        assert!(
            plan.paths.heap_bytes() <= name_bytes + 4 * 500,
            "{} bytes for {name_bytes} bytes of names",
            plan.paths.heap_bytes()
        );
        // Every job's path and open path are what the walk found.
        for j in &plan.jobs {
            let rel = plan.rel_path(j);
            assert_eq!(plan.open_path(j), d.path().join(rel));
        }
    }
}
