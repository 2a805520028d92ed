//! Prometheus metrics: one [`Snapshot`] of the running stage graph, rendered
//! as the text exposition format by `prometheus-client`, and served by
//! [`Endpoint`] at `/metrics` when `[metrics] listen` is set.
//!
//! ```text
//! serve: scrape ──Request{Stats}──▶ service loop ──Stats──▶ Snapshot ──render──▶ HTTP body
//! build: scrape ──▶ Telemetry + ring depths (Arc<Pipeline>) ──▶ Snapshot ──render──▶ HTTP body
//! ctl stats --format prometheus: the Stats reply ──▶ Snapshot ──render──▶ stdout
//! ```
//!
//! Nothing here counts: the counters are the ones the stages already
//! aggregate per thread and publish ([`crate::runtime::telemetry`]), and the
//! serve loop's own counts (commits, in flight, [`CommitClock`]). A scrape
//! costs one control request (serve) or a few atomic loads (build); no hot
//! path takes a lock for metrics. Because `ctl stats` and the endpoint render
//! the same [`Snapshot`] of the same reply, their numbers agree.
//!
//! The metric names are a contract (docs/OPERATIONS.md lists them with alert
//! examples); every name starts with `melforge_`.

mod endpoint;
mod source;

use std::collections::BTreeMap;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;
use serde::{Deserialize, Serialize};

use crate::compute::RejectKind;
use crate::pipeline::RingDepth;
use crate::runtime::telemetry::{BusySeconds, SerialStage};

pub use endpoint::{Endpoint, Error, Source};
pub use source::from_pipeline;

/// Upper bounds (seconds) of the drop→commit histogram's buckets: from one
/// short flush interval to well past any sane one.
pub const LATENCY_BOUNDS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// A fixed-bucket histogram of seconds (Prometheus semantics: the +Inf
/// bucket is implied by `count`). Owned and updated by one thread.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    /// Observations per bucket of [`LATENCY_BOUNDS`] (not cumulative), then
    /// the ones above the last bound.
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    pub fn observe(&mut self, seconds: f64) {
        if self.counts.len() != LATENCY_BOUNDS.len() + 1 {
            self.counts = vec![0; LATENCY_BOUNDS.len() + 1];
        }
        let i = LATENCY_BOUNDS.partition_point(|&b| b < seconds);
        self.counts[i] += 1;
        self.sum += seconds;
        self.count += 1;
    }

    /// `(upper bound, observations in that bucket)`, ending with +Inf.
    fn buckets(&self) -> Vec<(f64, u64)> {
        LATENCY_BOUNDS
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .enumerate()
            .map(|(i, b)| (b, self.counts.get(i).copied().unwrap_or(0)))
            .collect()
    }
}

/// What the serve loop knows about its journal commits: how many, when the
/// last one was, and how long each committed row took from the moment its
/// file was seen in the drop directory to the commit that made it durable.
#[derive(Debug)]
pub struct CommitClock {
    commits: u64,
    last_commit: SystemTime,
    /// When each staged, not yet committed row's file was seen.
    waiting: Vec<Instant>,
    drop_to_commit: Histogram,
}

impl Default for CommitClock {
    fn default() -> Self {
        CommitClock {
            commits: 0,
            // Until the first commit, "last commit" is the start: a journal
            // lag alert measures from there.
            last_commit: SystemTime::now(),
            waiting: Vec::new(),
            drop_to_commit: Histogram::default(),
        }
    }
}

impl CommitClock {
    /// A row of the file seen at `seen` is staged for the next commit.
    pub fn staged(&mut self, seen: Instant) {
        self.waiting.push(seen);
    }

    /// Forgets the staged rows (a failed write: their files are ingested
    /// again, and timed from their next sighting).
    pub fn forget_staged(&mut self) {
        self.waiting.clear();
    }

    /// Rows staged and not yet committed.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The journal committed everything staged: `records` records (none:
    /// the journal wrote nothing, which is not a commit).
    pub fn committed(&mut self, records: usize) {
        self.committed_first(self.waiting.len(), records);
    }

    /// The journal committed `records` records holding the first `rows`
    /// staged rows (the rest wait for the next commit).
    pub fn committed_first(&mut self, rows: usize, records: usize) {
        if records == 0 {
            return;
        }
        let now = Instant::now();
        let rows = rows.min(self.waiting.len());
        for seen in self.waiting.drain(..rows) {
            self.drop_to_commit
                .observe(now.duration_since(seen).as_secs_f64());
        }
        self.commits += 1;
        self.last_commit = SystemTime::now();
    }

    /// The commit-side fields of a [`Snapshot`].
    pub fn journal(&self, staged: usize) -> Journal {
        Journal {
            commits: self.commits,
            last_commit_unix_s: self
                .last_commit
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            staged,
            drop_to_commit: self.drop_to_commit.clone(),
            index: JournalIndex::default(),
        }
    }
}

/// The serve journal's side of a snapshot (absent for `build`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Journal {
    pub commits: u64,
    /// Wall-clock time of the last commit (the start before the first).
    pub last_commit_unix_s: f64,
    /// Files absorbed (row or rejection) and not yet committed.
    pub staged: usize,
    /// Seconds from a file being seen to the commit of its row.
    pub drop_to_commit: Histogram,
    /// Sizes of the journal file and its exactly-once index.
    #[serde(default)]
    pub index: JournalIndex,
}

/// The journal file and its exactly-once index (see `app::serve::journal`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JournalIndex {
    /// Bytes of the journal file.
    pub journal_bytes: u64,
    /// Confirmed file versions (on-disk snapshot + in-memory tail).
    pub entries: u64,
    /// Of those, held in memory (committed since the last compaction).
    pub tail_entries: u64,
    /// Compactions since the service started.
    pub compactions: u64,
    /// Unix time the last compaction finished (0: none since the start).
    pub last_compaction_unix_s: f64,
}

/// serve's intake (`app::serve::service::intake`): files beyond the cap
/// stay in the drop directory until a rescan finds room.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Intake {
    /// The cap on queued files (`serve.max_queued_files`).
    pub capacity: u64,
    /// Sightings of files deferred because the queue was full.
    pub deferred: u64,
    /// inotify events dropped on the watcher's full channel.
    #[serde(default)]
    pub watch_dropped: u64,
}

/// Everything one scrape shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub backend: String,
    pub backend_reason: String,
    pub engine: String,
    pub files_ok: u64,
    pub files_rejected: u64,
    pub rejected_by_kind: BTreeMap<RejectKind, u64>,
    pub bytes_read: u64,
    pub busy_s: BusySeconds,
    /// The single-threaded stages' own CPU time.
    pub serial: Vec<SerialStage>,
    pub rings: Vec<RingDepth>,
    /// Handed to the readers, not yet written or rejected.
    pub in_flight: u64,
    /// Offered, not yet handed to the readers (serve).
    pub queued: u64,
    /// serve's intake: the cap on `queued` and the files it deferred.
    pub intake: Option<Intake>,
    pub rows: BTreeMap<String, usize>,
    pub journal: Option<Journal>,
    /// Writes fail and ingest waits for them to work again (serve).
    pub degraded: bool,
}

/// One metric family: labelled values of one type.
#[derive(Debug)]
struct Family<'a> {
    kind: MetricType,
    values: Vec<(Vec<(&'static str, String)>, Num)>,
    hist: Option<&'a Histogram>,
}

#[derive(Clone, Copy, Debug)]
enum Num {
    Int(u64),
    Float(f64),
}

impl EncodeMetric for Family<'_> {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        if let Some(h) = self.hist {
            return encoder.encode_histogram::<NoLabelSet>(h.sum, h.count, &h.buckets(), None);
        }
        for (labels, v) in &self.values {
            if labels.is_empty() {
                put(&mut encoder, self.kind, *v)?;
            } else {
                put(&mut encoder.encode_family(labels)?, self.kind, *v)?;
            }
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        self.kind
    }
}

/// Writes one value of a counter or gauge.
fn put(e: &mut MetricEncoder, kind: MetricType, v: Num) -> Result<(), std::fmt::Error> {
    match (kind, v) {
        (MetricType::Counter, Num::Int(v)) => e.encode_counter::<NoLabelSet, _, u64>(&v, None),
        (MetricType::Counter, Num::Float(v)) => e.encode_counter::<NoLabelSet, _, u64>(&v, None),
        (_, Num::Int(v)) => e.encode_gauge(&v),
        (_, Num::Float(v)) => e.encode_gauge(&v),
    }
}

/// Appends one family to `out`.
fn family(
    out: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    f: &Family,
) -> Result<(), std::fmt::Error> {
    f.encode(out.encode_descriptor(name, help, unit, f.kind)?)
}

fn one(kind: MetricType, v: Num) -> Family<'static> {
    Family {
        kind,
        values: vec![(Vec::new(), v)],
        hist: None,
    }
}

fn labelled(
    kind: MetricType,
    key: &'static str,
    values: impl IntoIterator<Item = (String, Num)>,
) -> Family<'static> {
    Family {
        kind,
        values: values
            .into_iter()
            .map(|(l, v)| (vec![(key, l)], v))
            .collect(),
        hist: None,
    }
}

impl Snapshot {
    /// Every family, one group of them at a time.
    fn encode(&self, mut d: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.encode_files(&mut d)?;
        self.encode_stages(&mut d)?;
        self.encode_service(&mut d)?;
        if let Some(i) = &self.intake {
            encode_intake(&mut d, self.queued, i)?;
        }
        if let Some(j) = &self.journal {
            encode_journal(&mut d, j)?;
            encode_index(&mut d, &j.index)?;
        }
        Ok(())
    }

    /// Files by outcome, rejections by kind, bytes read.
    fn encode_files(&self, d: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use MetricType::Counter;
        let files = labelled(
            Counter,
            "outcome",
            [
                ("ok".to_string(), Num::Int(self.files_ok)),
                ("rejected".to_string(), Num::Int(self.files_rejected)),
            ],
        );
        let help = "Files finished, by outcome.";
        family(d, "melforge_files", help, None, &files)?;
        // Every kind, zeros included, so rate() works from the first rejection.
        let kinds = RejectKind::ALL.iter().map(|k| {
            let n = self.rejected_by_kind.get(k).copied().unwrap_or(0);
            (k.to_string(), Num::Int(n))
        });
        let rejected = labelled(Counter, "kind", kinds);
        let help = "Files rejected, by kind.";
        family(d, "melforge_rejected", help, None, &rejected)?;
        let bytes = one(Counter, Num::Int(self.bytes_read));
        family(
            d,
            "melforge_bytes_read",
            "Bytes of audio read.",
            None,
            &bytes,
        )
    }

    /// Busy seconds per stage, ring depths and capacities.
    fn encode_stages(&self, d: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use MetricType::{Counter, Gauge};
        let b = &self.busy_s;
        let busy = labelled(
            Counter,
            "stage",
            [
                ("read", b.read),
                ("decode", b.decode),
                ("mel", b.mel),
                ("write", b.write),
            ]
            .map(|(n, v)| (n.to_string(), Num::Float(v))),
        );
        let help = "Seconds each stage was busy, summed over its threads.";
        family(d, "melforge_stage_busy", help, Some(&Unit::Seconds), &busy)?;
        let cpu = labelled(
            Counter,
            "stage",
            (self.serial.iter()).map(|s| (s.stage.clone(), Num::Float(s.cpu_s))),
        );
        let help = "CPU seconds each single-threaded stage's own thread ran \
                    (CLOCK_THREAD_CPUTIME_ID: work, not waiting).";
        family(
            d,
            "melforge_serial_stage_cpu",
            help,
            Some(&Unit::Seconds),
            &cpu,
        )?;
        let depth = |f: fn(&RingDepth) -> usize| {
            labelled(
                Gauge,
                "ring",
                self.rings
                    .iter()
                    .map(|r| (r.name.clone(), Num::Int(f(r) as u64))),
            )
        };
        let help = "Items waiting in each ring between stages.";
        family(d, "melforge_ring_depth", help, None, &depth(|r| r.depth))?;
        let help = "Capacity of each ring between stages.";
        family(
            d,
            "melforge_ring_capacity",
            help,
            None,
            &depth(|r| r.capacity),
        )
    }

    /// Files in flight and queued, degraded, rows per split, the backend.
    fn encode_service(&self, d: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use MetricType::Gauge;
        let help = "Files handed to the readers and not yet written or rejected.";
        let in_flight = one(Gauge, Num::Int(self.in_flight));
        family(d, "melforge_in_flight_files", help, None, &in_flight)?;
        let help = "1 while writes fail (disk full, EIO) and serve waits to resume by itself.";
        let degraded = one(Gauge, Num::Int(u64::from(self.degraded)));
        family(d, "melforge_degraded", help, None, &degraded)?;
        let help = "Files seen and waiting for room in the reader ring.";
        let queued = one(Gauge, Num::Int(self.queued));
        family(d, "melforge_queued_files", help, None, &queued)?;
        let rows = labelled(
            Gauge,
            "split",
            self.rows
                .iter()
                .map(|(k, &v)| (k.clone(), Num::Int(v as u64))),
        );
        let help = "Rows in each split's file.";
        family(d, "melforge_rows", help, None, &rows)?;
        let mut e = d.encode_descriptor(
            "melforge_backend",
            "The compute backend and reader engine that run, and why that backend.",
            None,
            MetricType::Info,
        )?;
        e.encode_info(&[
            ("backend", self.backend.as_str()),
            ("reason", self.backend_reason.as_str()),
            ("engine", self.engine.as_str()),
        ])
    }
}

/// serve's intake: queued files against the cap, deferred sightings.
fn encode_intake(
    d: &mut DescriptorEncoder,
    queued: u64,
    i: &Intake,
) -> Result<(), std::fmt::Error> {
    use MetricType::{Counter, Gauge};
    let help = "Files serve's intake holds for the readers (at most its capacity).";
    let v = one(Gauge, Num::Int(queued));
    family(d, "melforge_intake_queued_files", help, None, &v)?;
    let help = "The intake's cap on queued files (serve.max_queued_files).";
    let v = one(Gauge, Num::Int(i.capacity));
    family(d, "melforge_intake_capacity_files", help, None, &v)?;
    let help = "Sightings of files left in the drop directory because the intake was full \
                (a rescan offers them once it has room).";
    let v = one(Counter, Num::Int(i.deferred));
    family(d, "melforge_intake_deferred_files", help, None, &v)?;
    let help = "inotify events the watcher dropped because its queue was full (each run of \
                them is followed by a rescan that finds their files).";
    let v = one(Counter, Num::Int(i.watch_dropped));
    family(d, "melforge_watch_dropped_events", help, None, &v)
}

/// serve's journal commits and the drop→commit histogram.
fn encode_journal(d: &mut DescriptorEncoder, j: &Journal) -> Result<(), std::fmt::Error> {
    use MetricType::{Counter, Gauge};
    let s = Some(&Unit::Seconds);
    let commits = one(Counter, Num::Int(j.commits));
    let help = "Journal commits (each makes the rows flushed before it durable).";
    family(d, "melforge_journal_commits", help, None, &commits)?;
    let help = "Files absorbed and waiting for the next journal commit.";
    let staged = one(Gauge, Num::Int(j.staged as u64));
    family(d, "melforge_journal_staged_files", help, None, &staged)?;
    let help = "Unix time of the last journal commit (the start before the first).";
    let last = one(Gauge, Num::Float(j.last_commit_unix_s));
    family(d, "melforge_journal_last_commit_timestamp", help, s, &last)?;
    let hist = Family {
        kind: MetricType::Histogram,
        values: Vec::new(),
        hist: Some(&j.drop_to_commit),
    };
    let help = "Seconds from a file being seen in the drop directory to the journal \
                commit of its row.";
    family(d, "melforge_drop_to_commit", help, s, &hist)
}

/// The journal file and its exactly-once index: sizes and compactions.
fn encode_index(d: &mut DescriptorEncoder, x: &JournalIndex) -> Result<(), std::fmt::Error> {
    use MetricType::{Counter, Gauge};
    let help = "Bytes of the serve journal file (bounded by compaction).";
    let v = one(Gauge, Num::Int(x.journal_bytes));
    family(d, "melforge_journal_bytes", help, None, &v)?;
    let help = "Files the exactly-once index confirms (on-disk snapshot + in-memory tail).";
    let v = one(Gauge, Num::Int(x.entries));
    family(d, "melforge_index_entries", help, None, &v)?;
    let help = "Index entries held in memory: committed since the last compaction.";
    let v = one(Gauge, Num::Int(x.tail_entries));
    family(d, "melforge_index_tail_entries", help, None, &v)?;
    let help = "Journal compactions (tail merged into a new index snapshot).";
    let v = one(Counter, Num::Int(x.compactions));
    family(d, "melforge_journal_compactions", help, None, &v)?;
    let help = "Unix time of the last journal compaction (0: none since the start).";
    let v = one(Gauge, Num::Float(x.last_compaction_unix_s));
    let name = "melforge_journal_last_compaction_timestamp";
    family(d, name, help, Some(&Unit::Seconds), &v)
}

/// The Prometheus text exposition (version 0.0.4 compatible; OpenMetrics
/// `# EOF` trailer) of `snap`.
pub fn render(snap: &Snapshot) -> String {
    #[derive(Debug)]
    struct One(Snapshot);
    impl prometheus_client::collector::Collector for One {
        fn encode(&self, d: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            self.0.encode(d)
        }
    }
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(One(snap.clone())));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing into a String cannot fail");
    out
}

/// The `Content-Type` of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests;
