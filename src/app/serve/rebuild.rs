//! `rebuild` for the running service: re-ingest the whole drop tree with the
//! current config file into new files, while the service keeps appending to
//! the live ones, then swap the new files and a matching journal in.
//!
//! The build runs on its own thread with the ordinary `build` pipeline into
//! `<output_dir>/.rebuild/` (rows in sorted path order). When it has finished,
//! the service drains its own in-flight files and calls [`Finished::install`]:
//!
//! 1. a fresh journal is written in `<state_dir>/rebuild/` confirming every
//!    row of the new files (and the build's rejections) and committed;
//! 2. the live journal is released, each new `<split>.h5` is renamed over the
//!    live one (atomic per file; a reader that had the old file open keeps
//!    reading the old inode), live split files the rebuild did not produce are
//!    renamed to `<split>.h5.replaced`, `rejected.jsonl` is replaced;
//! 3. the new journal is renamed into `<state_dir>/journal` and reopened.
//!
//! Files that arrived while the rebuild ran are not in the new journal; the
//! service rescans after the swap and appends them to the new files. A crash
//! before step 1 has committed leaves the live journal and files untouched
//! (the next start deletes the staging directories); a crash after it is
//! rolled forward at the next start ([`settle_interrupted`] finishes steps 2
//! and 3), since some live files may already be the new ones.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use super::status::RebuildStatus;
use crate::app::build::{self, Outcomes};
use crate::app::serve::journal::{FileStamp, Journal};
use crate::config::Config;
use crate::config::serve::ServeConfig;
use crate::runtime::telemetry::Telemetry;

/// Why a rebuild could not start, finish or be installed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot prepare {}: {source}", path.display())]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the rebuild thread: {0}")]
    Spawn(std::io::Error),
    #[error("the rebuild thread panicked")]
    Panicked,
    #[error(transparent)]
    Build(#[from] build::Error),
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: hdf5::Error },
    #[error(transparent)]
    Journal(#[from] crate::app::serve::journal::Error),
}

/// A rebuild in progress.
pub struct Rebuild {
    cfg: Config,
    staging: PathBuf,
    telemetry: Arc<Telemetry>,
    total: usize,
    started: Instant,
    thread: Option<JoinHandle<Result<Outcomes, build::Error>>>,
}

/// A completed rebuild, ready to be installed.
pub struct Finished {
    pub cfg: Config,
    staging: PathBuf,
    outcomes: Outcomes,
}

fn stamp_of(path: &Path) -> FileStamp {
    std::fs::metadata(path).map_or(
        FileStamp {
            size: 0,
            mtime_ns: 0,
        },
        |m| FileStamp::of(&m),
    )
}

fn io(path: &Path, source: std::io::Error) -> Error {
    Error::Dir {
        path: path.to_path_buf(),
        source,
    }
}

impl Rebuild {
    /// Starts building `serve.watch_dir` with `cfg` into the staging directory.
    pub fn start(cfg: Config, serve: &ServeConfig) -> Result<Rebuild, Error> {
        let staging = serve.output_dir.join(".rebuild");
        if staging.exists() {
            std::fs::remove_dir_all(&staging).map_err(|e| io(&staging, e))?;
        }
        let ignore = super::watch::Ignore {
            patterns: serve.ignore.clone(),
            extensions: cfg.input.extensions.clone(),
        };
        let mut total = 0;
        let seen = super::sidecar::Seen::default();
        let _all = super::watch::scan_tree_each(&serve.watch_dir, &ignore, &seen, &mut |_| {
            total += 1;
            std::ops::ControlFlow::Continue(())
        });
        let telemetry = Arc::new(Telemetry::default());
        let thread = {
            let (cfg, input, out, telemetry) = (
                cfg.clone(),
                serve.watch_dir.clone(),
                staging.clone(),
                Arc::clone(&telemetry),
            );
            std::thread::Builder::new()
                .name("rebuild".into())
                .spawn(move || {
                    let opts = build::Options {
                        progress: Default::default(),
                        telemetry: Some(telemetry),
                    };
                    build::build(&input, &out, &cfg, &opts)
                })
                .map_err(Error::Spawn)?
        };
        tracing::info!(files = total, dir = %staging.display(), "Rebuild started.");
        Ok(Rebuild {
            cfg,
            staging,
            telemetry,
            total,
            started: Instant::now(),
            thread: Some(thread),
        })
    }

    /// Progress for `status`.
    pub fn progress(&self) -> RebuildStatus {
        RebuildStatus::Running {
            files_done: self.telemetry.files_done(),
            files_total: self.total,
            elapsed_s: self.started.elapsed().as_secs_f64(),
        }
    }

    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Waits for the build.
    pub fn finish(mut self) -> Result<Finished, Error> {
        let outcomes = self
            .thread
            .take()
            .expect("finish is called once")
            .join()
            .map_err(|_| Error::Panicked)??;
        Ok(Finished {
            cfg: self.cfg.clone(),
            staging: self.staging.clone(),
            outcomes,
        })
    }

    /// Shutdown while rebuilding: wait for the build thread, discard its output.
    pub fn abandon(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_dir_all(&self.staging);
    }
}

/// At start-up, before the live journal is opened: settles a rebuild the
/// service was killed in (no rebuild runs yet).
///
/// * Killed while it built (no committed journal in `<state_dir>/rebuild/`):
///   the live journal and files were never touched; the staging directories
///   are deleted.
/// * Killed while it was being installed (the new journal committed, step 1
///   done, so step 2 may have swapped some files): the install is finished —
///   the split files still in `<output_dir>/.rebuild/` are renamed into place,
///   live split files the rebuild did not produce are moved aside to
///   `<split>.h5.replaced`, `rejected.jsonl` is replaced and the new journal
///   becomes the live one. Every step is a rename that is skipped once done, so
///   a crash during this recovery is recovered the same way.
pub fn settle_interrupted(serve: &ServeConfig) -> Result<(), Error> {
    let staging = serve.output_dir.join(".rebuild");
    let stage_dir = serve.state_dir.join("rebuild");
    let committed = stage_dir.join("journal").exists() && {
        let (journal, state) = Journal::open(&stage_dir)?;
        drop(journal);
        state.commits > 0
    };
    if !committed {
        for dir in [&staging, &stage_dir] {
            if dir.exists() {
                std::fs::remove_dir_all(dir).map_err(|e| io(dir, e))?;
                tracing::info!(dir = %dir.display(), "Deleted what an interrupted rebuild left behind.");
            }
        }
        return Ok(());
    }
    tracing::warn!(
        staging = %staging.display(),
        "A rebuild was interrupted while its files were being swapped in; finishing the swap."
    );
    // Splits the new journal has rows in, and the files still to move.
    let (journal, state) = Journal::open(&stage_dir)?;
    drop(journal);
    let mut produced: std::collections::BTreeSet<PathBuf> = state
        .rows
        .keys()
        .map(|s| serve.output_dir.join(format!("{s}.h5")))
        .collect();
    if let Ok(rd) = std::fs::read_dir(&staging) {
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "h5") {
                let target = serve.output_dir.join(e.file_name());
                move_in(&p, &target)?;
                produced.insert(target);
            }
        }
    }
    move_aside_unproduced(&serve.output_dir, &produced);
    let rejected = staging.join("rejected.jsonl");
    if rejected.exists() {
        let target = serve.output_dir.join("rejected.jsonl");
        std::fs::rename(&rejected, &target).map_err(|e| io(&target, e))?;
    }
    let target = serve.state_dir.join("journal");
    std::fs::rename(stage_dir.join("journal"), &target).map_err(|e| io(&target, e))?;
    for dir in [&stage_dir, &staging] {
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(())
}

/// Renames the rebuilt split file `src` over `target`, and the CMVN
/// statistics files beside it over those beside `target` (where the build
/// left none, the old ones go: they describe the old rows). The split file
/// last: a swap finished after a crash between the two finds the files
/// beside it moved already and removes them (missing, never stale: serve
/// writes them again when it closes the file).
fn move_in(src: &Path, target: &Path) -> Result<(), Error> {
    use crate::cmvn::files::names;
    for (from, to) in names(src).iter().zip(names(target).iter()) {
        let r = match std::fs::rename(from, to) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match std::fs::remove_file(to) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            },
            other => other,
        };
        r.map_err(|e| io(to, e))?;
    }
    std::fs::rename(src, target).map_err(|e| io(target, e))
}

/// Moves every live `<split>.h5` not in `produced` to `<split>.h5.replaced`
/// (the statistics files beside it are removed: they describe it).
fn move_aside_unproduced(output_dir: &Path, produced: &std::collections::BTreeSet<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(output_dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "h5") && !produced.contains(&p) {
            let aside = p.with_extension("h5.replaced");
            if let Err(err) =
                std::fs::rename(&p, &aside).and_then(|()| crate::cmvn::files::remove(&p))
            {
                tracing::warn!(
                    path = %p.display(),
                    error = %err,
                    "Cannot move an old output file aside."
                );
            }
        }
    }
}

impl Finished {
    /// Swaps the rebuilt files and a matching journal in (module doc, steps
    /// 1–3). `live` is replaced by the reopened journal. Returns a summary.
    pub fn install(&self, serve: &ServeConfig, live: &mut Journal) -> Result<String, Error> {
        // 1. A journal for the new files.
        let stage_dir = serve.state_dir.join("rebuild");
        if stage_dir.exists() {
            std::fs::remove_dir_all(&stage_dir).map_err(|e| io(&stage_dir, e))?;
        }
        let (mut staged, _) = Journal::open(&stage_dir)?;
        let mut rows = 0usize;
        for out in &self.outcomes.outputs {
            let read = |source| Error::Read {
                path: out.path.clone(),
                source,
            };
            let file = hdf5::File::open(&out.path).map_err(read)?;
            let paths = crate::writer::strings::read(&file, "path").map_err(read)?;
            drop(file);
            for (row, rel) in paths.iter().enumerate() {
                staged.stage_row(rel, stamp_of(&serve.watch_dir.join(rel)), &out.split, row);
            }
            rows += paths.len();
        }
        for r in &self.outcomes.rejected {
            staged.stage_reject(&r.path, stamp_of(&serve.watch_dir.join(&r.path)), &r.reason);
        }
        staged.commit()?;

        // 2. Release the live journal; swap the files.
        *live = staged;
        let mut produced = std::collections::BTreeSet::new();
        for out in &self.outcomes.outputs {
            let target = serve.output_dir.join(format!("{}.h5", out.split));
            move_in(&out.path, &target)?;
            produced.insert(target);
        }
        move_aside_unproduced(&serve.output_dir, &produced);
        let rejected = self.staging.join("rejected.jsonl");
        if rejected.exists() {
            let target = serve.output_dir.join("rejected.jsonl");
            std::fs::rename(&rejected, &target).map_err(|e| io(&target, e))?;
        }

        // 3. The new journal becomes the live one.
        let target = serve.state_dir.join("journal");
        std::fs::rename(stage_dir.join("journal"), &target).map_err(|e| io(&target, e))?;
        let (reopened, state) = Journal::open(&serve.state_dir)?;
        *live = reopened;
        let _ = std::fs::remove_dir_all(&stage_dir);
        let _ = std::fs::remove_dir_all(&self.staging);
        Ok(format!(
            "{rows} row(s) in {} split(s), {} rejected; journal confirms {} row(s)",
            self.outcomes.outputs.len(),
            self.outcomes.rejected.len(),
            state.rows.values().sum::<usize>()
        ))
    }
}
