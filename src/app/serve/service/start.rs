//! Serve from start to stop, in four steps — [`run`]: **plan** (the config,
//! the state directory, the journal and split files, the stage graph:
//! `Service::new`), **start** (control socket, metrics endpoint, watcher,
//! the first scan of the drop tree: [`start`]), **supervise** (the service
//! loop, `Service::event_loop`, until a stop), **stop and report** (watcher,
//! socket and endpoint closed, the final drain and its log line: [`stop`]).
//!
//! The bodies are the ones `service/mod.rs` held before they were split out
//! (same order of every call, same drop order).

use std::sync::mpsc;

use super::*;
use crate::app::control::notify;
use crate::app::control::signals::SignalThread;
use crate::app::metrics::Endpoint;
use crate::app::serve::watch::{WatchEvent, Watcher};

/// Runs the service until shutdown. Call from the main thread before any other
/// thread exists (signals are blocked and routed first).
pub fn run(config_path: &Path) -> Result<(), Error> {
    let (tx, rx) = control::channel();
    let signals = control::signals::block_and_spawn(tx.clone())?;
    let cfg = Config::load(config_path)?;
    let mut svc = Service::new(config_path, cfg)?;
    let mut started = start(&mut svc, &tx)?;
    let result = svc.event_loop(
        &rx,
        &started.watch_rx,
        &started.watch_tx,
        &mut started.watcher,
        &started.server,
    );
    stop(svc, started, signals, result)
}

/// What [`start`] started around the service: the control socket, the
/// metrics endpoint, the watcher and its channel.
struct Started {
    server: control::Server,
    endpoint: Option<Endpoint>,
    watch_tx: mpsc::SyncSender<WatchEvent>,
    watch_rx: mpsc::Receiver<WatchEvent>,
    watcher: Option<Watcher>,
}

/// Opens the control socket and the metrics endpoint, starts the watcher,
/// then scans the drop tree (the watch exists first, so nothing landing in
/// between is missed) and tells systemd the service is ready.
fn start(svc: &mut Service, tx: &control::Sender) -> Result<Started, Error> {
    let server = control::Server::start(&svc.cfg.control, tx.clone())?;
    let endpoint = match svc.cfg.metrics.listen {
        Some(addr) => Some(Endpoint::start(
            addr,
            crate::app::serve::status::from_service(tx.clone()),
        )?),
        None => None,
    };
    let (watch_tx, watch_rx) = crate::app::serve::watch::channel();
    let ignore = Ignore {
        patterns: svc.serve.ignore.clone(),
        extensions: svc.cfg.input.extensions.clone(),
    };
    let watcher = Some(
        Watcher::start(
            &svc.serve.watch_dir,
            ignore,
            svc.sidecars.clone(),
            watch_tx.clone(),
        )
        .map_err(|source| Error::Dir {
            path: svc.serve.watch_dir.clone(),
            source,
        })?,
    );
    // The watch exists before the scan, so nothing landing in between is missed.
    svc.rescan();
    // Start-up (journal replay, recovering the split files, the scan of a
    // drop tree that may hold every file ever ingested) freed more than the
    // service keeps: hand it back.
    crate::runtime::sys::trim_heap();
    let shape = svc.pipeline.shape();
    tracing::info!(
        watch_dir = %svc.serve.watch_dir.display(),
        output_dir = %svc.serve.output_dir.display(),
        backend = %shape.backend,
        reason = %shape.backend_reason,
        engine = %shape.engine,
        socket = %server.path().display(),
        queued = svc.intake.queued(),
        max_queued_files = svc.intake.capacity(),
        "Serving."
    );
    notify::ready();
    Ok(Started {
        server,
        endpoint,
        watch_tx,
        watch_rx,
        watcher,
    })
}

/// Stops what [`start`] started, drains the service (`Service::finish`: the
/// final flush and commit, its log line) and stops the signal thread; the
/// loop's error comes first.
fn stop(
    svc: Service,
    started: Started,
    signals: SignalThread,
    result: Result<(), Error>,
) -> Result<(), Error> {
    let Started {
        server,
        endpoint,
        mut watcher,
        ..
    } = started;
    if let Some(w) = watcher.take() {
        w.stop();
    }
    server.shutdown();
    drop(endpoint);
    notify::stopping();
    let finish = svc.finish();
    signals.stop();
    result.and(finish)
}

/// Creates `path` and any missing parents, each made durable in its parent:
/// a power loss must not take away the state dir (the journal) or the output
/// dir once anything in them was committed.
fn dir(path: &Path) -> Result<(), Error> {
    crate::runtime::durable::create_dir_durably(path).map_err(|source| Error::Dir {
        path: path.to_path_buf(),
        source,
    })
}

impl Service {
    fn new(config_path: &Path, cfg: Config) -> Result<Service, Error> {
        let serve = cfg.serve.clone().ok_or_else(|| Error::NoServe {
            config: config_path.to_path_buf(),
        })?;
        if !serve.watch_dir.is_dir() {
            return Err(Error::Dir {
                path: serve.watch_dir.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the drop directory does not exist",
                ),
            });
        }
        dir(&serve.output_dir)?;
        dir(&serve.state_dir)?;
        crate::app::serve::rebuild::settle_interrupted(&serve)?;
        let (journal, state) = Journal::open(&serve.state_dir)?;
        if state.created && has_h5(&serve.output_dir) {
            return Err(Error::Orphans(serve.output_dir.clone()));
        }
        if state.torn_bytes > 0 {
            tracing::warn!(
                "The journal ended in {} bytes of an unfinished commit (a crash); they were \
                 discarded and those files will be ingested again.",
                state.torn_bytes
            );
        }
        let telemetry = Arc::new(Telemetry::default());
        let pipeline = Pipeline::start(&cfg, Arc::clone(&telemetry), 0)?;
        // The sink's layout is the pipeline's recipe's: one recipe a run.
        let layout = pipeline.recipe().layout().clone();
        let sink = AppendSink::new(
            &serve.output_dir,
            (&cfg, layout),
            &serve.watch_dir,
            Arc::clone(&telemetry),
        )?;
        let intake = Intake::new(serve.max_queued_files);
        let local = Local::serial(&telemetry, "serve");
        let mut svc = Service {
            config_path: config_path.to_path_buf(),
            cfg,
            serve,
            journal,
            sink,
            pipeline,
            telemetry,
            local,
            intake,
            staged: Staged::default(),
            sealed: None,
            counters: Counters::new(),
            health: Health::Healthy,
            backoff: degraded::FIRST_BACKOFF,
            state: State::Running,
            commits: CommitClock::default(),
            compact_after: None,
            rebuild: None,
            rebuild_report: None,
            last_error: None,
            sidecars: Default::default(),
        };
        svc.open_journal_splits()?;
        svc.maybe_compact();
        Ok(svc)
    }
}

impl Service {
    /// Final drain after the loop: flush, commit, close every file, stop ingest.
    pub(super) fn finish(mut self) -> Result<(), Error> {
        if let Some(r) = self.rebuild.take() {
            r.abandon();
        }
        let flushed = self.flush_commit();
        let closed = self.sink.close_all().map_err(Error::Writer);
        self.pipeline.close();
        while self.pipeline.outcomes().pop().is_some() {}
        let joined = self.pipeline.join().map(|_| ()).map_err(Error::Pipeline);
        if flushed.is_ok() {
            tracing::info!(
                ingested = self.counters.files_ok(),
                rejected = self.counters.files_rejected(),
                "Stopped; every file ingested this run is committed."
            );
        } else {
            tracing::error!(
                "Stopped after a failed final flush: files since the last commit were not \
                 committed and will be ingested again at the next start."
            );
        }
        flushed.and(closed).and(joined)
    }
}

fn has_h5(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|rd| {
        rd.flatten()
            .any(|e| e.path().extension().is_some_and(|x| x == "h5"))
    })
}
