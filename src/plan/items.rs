//! The item plan: what every input becomes before anything is read.
//!
//! A tree walk ([`super::tree`]), the manifests ([`super::manifest`]) and
//! the stored corpora ([`super::stored`]) each produce one [`Plan`]: every
//! item's split, label and position ([`Job`]), its `path` (an index of a
//! [`PathTable`]) and the file the readers open for it. Readers, decoders,
//! compute stages and the writer take the plan and nothing else of the
//! input.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// One file to process. Kept small — a build holds one per input file for its
/// whole run: the relative path is an index into the plan's [`PathTable`]
/// (shared with the writer) and the path to open is derived
/// ([`Plan::open_path`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    /// Index of the path relative to the input directory (`/`-separated,
    /// recorded in `path`) in [`Plan::paths`].
    pub path: u32,
    /// Index into [`Plan::splits`].
    pub split: u32,
    /// Position within its split (row order before rejections are removed).
    pub seq: u32,
    /// Index into [`Plan::label_names`], or -1.
    pub label: i32,
}

/// Many short strings in one buffer (a relative path per input file): about
/// the strings' own bytes plus 4 per entry, where a `String` each costs ~60
/// bytes more and fragments the heap. Indices are `u32`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PathTable {
    text: String,
    /// End offset of each entry in `text` (entry `i` starts at `ends[i - 1]`).
    ends: Vec<u32>,
}

impl PathTable {
    /// Appends `s`; its index. Panics past 4 GiB of text or 2³² entries (a
    /// walk would need tens of millions of files with very long names).
    pub fn push(&mut self, s: &str) -> u32 {
        self.text.push_str(s);
        let end = u32::try_from(self.text.len()).expect("path table over 4 GiB");
        self.ends.push(end);
        u32::try_from(self.ends.len() - 1).expect("path table over 2^32 entries")
    }

    /// Whether [`PathTable::push`] of `s` would fit: the text stays within
    /// 4 GiB and the entries within 2³².
    pub fn fits(&self, s: &str) -> bool {
        self.text.len() + s.len() <= u32::MAX as usize && self.ends.len() < u32::MAX as usize
    }

    /// Entry `i` (panics when out of range).
    pub fn get(&self, i: u32) -> &str {
        let i = i as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.text[start..self.ends[i] as usize]
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Bytes held (for memory accounting in tests and logs).
    pub fn heap_bytes(&self) -> usize {
        self.text.capacity() + 4 * self.ends.capacity()
    }

    pub(super) fn shrink_to_fit(&mut self) {
        self.text.shrink_to_fit();
        self.ends.shrink_to_fit();
    }
}

/// The outcome of a walk: every job, grouped by split, in row order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The input directory as given to the walk.
    pub input: PathBuf,
    /// By split, the folder its relative paths resolve against, when that
    /// is not `input` (a manifest's own folder); empty for a tree.
    pub bases: Vec<PathBuf>,
    /// Every job's relative path, in walk order ([`Job::path`] indexes it).
    pub paths: Arc<PathTable>,
    /// Resolved targets of the jobs that are symbolic links, by path index.
    pub targets: HashMap<u32, PathBuf>,
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
        match self.targets.get(&job.path) {
            Some(t) => t.clone(),
            None => {
                let base = self.bases.get(job.split as usize).unwrap_or(&self.input);
                base.join(self.rel_path(job))
            }
        }
    }

    /// `job`'s path relative to the input directory.
    pub fn rel_path(&self, job: &Job) -> &str {
        self.paths.get(job.path)
    }

    /// Jobs of split `i`, in seq order.
    pub fn split_jobs(&self, i: usize) -> impl Iterator<Item = &Job> {
        self.jobs.iter().filter(move |j| j.split as usize == i)
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
