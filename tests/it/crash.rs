//! kill -9 of a SWMR appender + journal at random moments, then recovery.
//!
//! The child is this test binary re-run on the ignored test `crash::child_writer`
//! (env `MELFORGE_CRASH_DIR` set): it recovers, then ingests an endless numbered
//! sequence of synthetic files in batches (rows to two splits' appenders, some
//! rejections, new label names over time), committing each batch the way `serve`
//! does: every appender flushes, then the journal commits. The parent SIGKILLs it
//! after a random delay, recovers itself, and checks that every confirmed file is
//! in HDF5 exactly once with intact values and that the confirmed files are exactly
//! a prefix of the sequence (nothing lost, nothing twice). Every 8th batch the
//! child also compacts the journal, so kills land inside compactions too.
//!
//! `MELFORGE_CRASH_SEED`, `MELFORGE_CRASH_RUNS` and `MELFORGE_CRASH_SECS` vary
//! the kill delays and lengthen the run for a soak;
//! `MELFORGE_CRASH_DELAY_MS=LO-HI` sets the range of the delays (default
//! 50-650: short ranges kill more often in recovery and the first batches).
//!
//! [`kill_9_before_every_write`] is the deterministic twin: the same child,
//! stopped by the split files' driver itself (`MELFORGE_CRASH_AT_WRITE=k`:
//! SIGKILL just before its `k`-th write or truncate, the `test-hooks` crash
//! point of `writer::append::vfd`), for every `k` from 1 to
//! `MELFORGE_CRASH_WRITES` (default 240), each run going on from what the one
//! before left. Every place between two writes of an open, an append, a
//! flush or a close is a kill point in turn, and a failure names its `k`.
//!
//! [`kill_9_before_every_write_of_compact_rows`] sweeps the same way with
//! variable-length rows in compact storage (`MELFORGE_CRASH_LAYOUT=compact`
//! for the child): Blosc chunks, the last of which every flush rewrites
//! whole under the appender's undo log.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use melforge::app::serve::journal::{FileStamp, Journal, Known, RecoveredState};
use melforge::dsp::{Segmentation, Spec};
use melforge::frames::{FrameLayout, RowLayout};
use melforge::writer::Dtype;
use melforge::writer::append::{AppendSpec, Appender};

const SPLITS: [&str; 2] = ["train", "val"];
const ROW_LEN: usize = 2 * 3 * 4 * 5;
/// Values per frame of the compact rows: a compact chunk is 128 frames.
const BINS: usize = 256;

/// What the child writes: librosa's fixed rows, or variable-length rows in
/// compact storage.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Layout {
    Mel,
    Compact,
}

impl Layout {
    const VAR: &str = "MELFORGE_CRASH_LAYOUT";

    fn from_env() -> Layout {
        match std::env::var(Layout::VAR).as_deref() {
            Ok("compact") => Layout::Compact,
            _ => Layout::Mel,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Layout::Mel => "mel",
            Layout::Compact => "compact",
        }
    }
}

fn spec(split: &str, layout: Layout) -> AppendSpec {
    match layout {
        Layout::Mel => mel_spec(split),
        Layout::Compact => AppendSpec {
            dtype: Dtype::Compact { tick_power: -5 },
            layout: RowLayout::Frames(FrameLayout {
                recipe: "kaldi-fbank".into(),
                bins: BINS,
                sample_rate: 16_000,
                frame_step_seconds: 0.01,
                max_samples: None,
                padded_frames: None,
                params: vec![],
            }),
            ..mel_spec(split)
        },
    }
}

fn mel_spec(split: &str) -> AppendSpec {
    AppendSpec {
        split: split.into(),
        layout: RowLayout::Fixed(Spec {
            sample_rate: 64,
            clip_seconds: 1.0,
            segmentation: Segmentation {
                enabled: true,
                long_window: 32,
                long_hop: 32,
                short_window: 16,
                short_hop: 8,
            },
            n_fft: 8,
            hop_length: 2,
            win_length: 8,
            n_mels: 4,
            fmax: 32.0,
            ..Spec::default()
        }),
        dtype: Dtype::Float32,
        chunk_files: 4,
        extra_attrs: vec![],
    }
}

/// File `n` of the endless drop directory.
fn file_of(n: u64) -> (String, FileStamp, &'static str, String) {
    let split = SPLITS[(n % 2) as usize];
    // A new label name every 13 files, so label_names grows during the run.
    let label = format!("label{}", n / 13 % 6);
    let path = format!("{split}/{label}/f{n:06}.wav");
    let stamp = FileStamp {
        size: 44 + n,
        mtime_ns: 1_700_000_000_000_000_000 + n as i64,
    };
    (path, stamp, split, label)
}

fn is_rejected(n: u64) -> bool {
    n % 11 == 5
}

/// Frames of file `n`'s compact row: 5 to 27.
fn frames_of(n: u64) -> usize {
    5 + (n % 23) as usize
}

/// File `n`'s row; compact rows' values are on the 2^-5 grid within
/// float16's exact range, so they are stored exactly.
fn row_of(n: u64, layout: Layout) -> Vec<f32> {
    match layout {
        Layout::Mel => (0..ROW_LEN)
            .map(|k| (n as f32) * 0.5 - (k as f32) * 0.25)
            .collect(),
        Layout::Compact => (0..frames_of(n) * BINS)
            .map(|k| ((n as usize * 37 + k * 5) % 512) as f32 / 32.0 - 8.0)
            .collect(),
    }
}

/// Opens the journal and one appender per split, recovering both.
/// Also returns the HDF5 rows cut because the journal did not confirm them.
fn recover(dir: &Path, layout: Layout) -> (Journal, RecoveredState, Vec<Appender>, usize) {
    let (journal, state) = Journal::open(&dir.join("state")).unwrap();
    let mut cut = 0;
    let appenders = SPLITS
        .iter()
        .map(|s| {
            let (a, report) =
                Appender::open(&dir.join("out"), &spec(s, layout), &[], state.rows_of(s)).unwrap();
            cut += report.rows_dropped;
            a
        })
        .collect();
    (journal, state, appenders, cut)
}

#[test]
#[ignore = "run by crash::kill_9_at_random_points as its child"]
fn child_writer() {
    let Some(dir) = std::env::var_os("MELFORGE_CRASH_DIR") else {
        return;
    };
    let dir = Path::new(&dir);
    let layout = Layout::from_env();
    let (mut journal, _, mut apps, _) = recover(dir, layout);
    let mut n = 0u64;
    let mut batch = 0u64;
    loop {
        batch += 1;
        let mut taken = 0;
        while taken < 1 + batch % 7 {
            let (path, stamp, split, label) = file_of(n);
            let k = n;
            n += 1;
            if journal.lookup(&path, stamp).unwrap().is_some() {
                continue;
            }
            taken += 1;
            if is_rejected(k) {
                journal.stage_reject(&path, stamp, "synthetic rejection");
                continue;
            }
            let s = SPLITS.iter().position(|x| *x == split).unwrap();
            // Same ids in every split: register the name everywhere first.
            let id = apps
                .iter_mut()
                .map(|a| a.label_id(&label).unwrap())
                .collect::<Vec<_>>();
            assert!(id.windows(2).all(|w| w[0] == w[1]));
            let row = apps[s].append(&path, id[s], &row_of(k, layout)).unwrap();
            journal.stage_row(&path, stamp, split, row);
        }
        for a in &mut apps {
            a.flush().unwrap();
        }
        journal.commit().unwrap();
        // Compactions too are killed at random points.
        if batch.is_multiple_of(8) {
            journal.compact().unwrap();
        }
    }
}

/// Checks the recovered state against HDF5; returns confirmed files.
fn check(journal: &Journal, apps: &[Appender], layout: Layout) -> u64 {
    let state = journal.state();
    // Confirmed files are exactly file_of(0..k) for some k.
    let mut k = 0;
    while journal
        .lookup(&file_of(k).0, file_of(k).1)
        .unwrap()
        .is_some()
    {
        k += 1;
    }
    let confirmed = journal.info().index_entries;
    assert_eq!(confirmed, k, "confirmed files are not a prefix");
    for n in 0..k {
        let (path, stamp, split, _) = file_of(n);
        match journal.lookup(&path, stamp).unwrap().unwrap() {
            Known::Ingested(r) => {
                assert!(!is_rejected(n));
                assert_eq!(r.split, split);
            }
            Known::Rejected => assert!(is_rejected(n)),
        }
    }
    for (s, app) in SPLITS.iter().zip(apps) {
        let rows = state.rows_of(s);
        assert_eq!(app.rows(), rows);
        let f = hdf5::File::open_as(app.path(), hdf5::OpenMode::ReadSWMR).unwrap();
        let values = Rows::read(&f, rows, layout);
        let labels = f.dataset("label").unwrap().read_raw::<i32>().unwrap();
        let paths = melforge::writer::strings::read(&f, "path").unwrap();
        let names = melforge::writer::strings::read(&f, "label_names").unwrap();
        assert_eq!(labels.len(), rows);
        assert_eq!(paths.len(), rows);
        let mut seen = HashMap::new();
        for i in 0..rows {
            let p = paths[i].as_str();
            if let Some(first) = seen.insert(p.to_string(), i) {
                let around = |r: usize| {
                    (r.saturating_sub(2)..(r + 3).min(rows))
                        .map(|j| format!("{j}: {}", paths[j]))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                panic!(
                    "{p} twice in {s}: rows {first} and {i} of {rows} (around {first}: {}; \
                     around {i}: {})",
                    around(first),
                    around(i)
                );
            }
            let n: u64 = p[p.len() - 10..p.len() - 4].parse().unwrap();
            let (path, stamp, _, label) = file_of(n);
            assert_eq!(p, path);
            match journal.lookup(&path, stamp).unwrap() {
                Some(Known::Ingested(r)) => assert_eq!(r.row, i, "{p}"),
                other => panic!("{p} in HDF5 but journal says {other:?}"),
            }
            assert_eq!(names[labels[i] as usize].as_str(), label, "{p}");
            assert!(values.row(i) == row_of(n, layout), "values of {p}");
        }
        // The statistics are those of exactly these rows, as a build sums
        // them (each row's sums of its stored values, in row order).
        let sp = spec(s, layout);
        let bins = melforge::cmvn::Bins::of_layout(&sp.layout, sp.dtype);
        let mut scratch = bins.acc();
        let mut want = melforge::cmvn::Stats::new(bins.bins());
        for p in &paths {
            let n: u64 = p[p.len() - 10..p.len() - 4].parse().unwrap();
            want.add_row(&bins.row(&row_of(n, layout), &mut scratch));
        }
        let stored = melforge::writer::stats::read(&f).unwrap();
        assert!(
            stored.as_ref() == Some(&want),
            "{s}: CMVN statistics of {rows} rows"
        );
    }
    k
}

/// A split file's rows as read back.
struct Rows {
    values: Vec<f32>,
    /// Each row's span of `values`.
    spans: Vec<(usize, usize)>,
}

impl Rows {
    fn read(f: &hdf5::File, rows: usize, layout: Layout) -> Rows {
        match layout {
            Layout::Mel => {
                let mel = f.dataset("mel").unwrap();
                assert_eq!(mel.shape()[0], rows);
                Rows {
                    values: mel.read_raw::<f32>().unwrap(),
                    spans: (0..rows).map(|i| (i * ROW_LEN, ROW_LEN)).collect(),
                }
            }
            Layout::Compact => {
                let features = f.dataset("features").unwrap();
                assert!(!features.filters().is_empty(), "features is not compact");
                let offsets = f.dataset("offsets").unwrap().read_raw::<i64>().unwrap();
                let lengths = f.dataset("lengths").unwrap().read_raw::<i32>().unwrap();
                assert_eq!((offsets.len(), lengths.len()), (rows, rows));
                let spans: Vec<(usize, usize)> = offsets
                    .iter()
                    .zip(&lengths)
                    .map(|(&o, &n)| (o as usize * BINS, n as usize * BINS))
                    .collect();
                let end = spans.last().map_or(0, |&(o, n)| o + n);
                assert!(
                    spans.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0),
                    "rows are not back to back"
                );
                assert_eq!(features.shape()[0] * BINS, end);
                Rows {
                    values: features.read_raw::<f32>().unwrap(),
                    spans,
                }
            }
        }
    }

    fn row(&self, i: usize) -> &[f32] {
        let (at, n) = self.spans[i];
        &self.values[at..at + n]
    }
}

/// This test binary re-run as the child writer on `dir`.
fn child_command(exe: &Path, dir: &Path, layout: Layout) -> Command {
    let mut c = Command::new(exe);
    c.args([
        "--exact",
        "crash::child_writer",
        "--ignored",
        "--test-threads=1",
        // A panic of the child reaches the parent's stderr.
        "--nocapture",
    ])
    .env("MELFORGE_CRASH_DIR", dir)
    .env(Layout::VAR, layout.name())
    .stdout(Stdio::null())
    .stderr(Stdio::inherit());
    c
}

/// Runs the child writer until the driver kills it before write `k`; panics
/// when it ends any other way.
fn run_child_to_write(exe: &Path, dir: &Path, k: u64, layout: Layout) {
    use std::os::unix::process::ExitStatusExt;
    let status = child_command(exe, dir, layout)
        .env("MELFORGE_CRASH_AT_WRITE", k.to_string())
        .status()
        .unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the child writer was to be killed before write {k}, but ended with {status}"
    );
}

#[test]
fn kill_9_before_every_write() {
    kill_before_every_write(Layout::Mel);
}

#[test]
fn kill_9_before_every_write_of_compact_rows() {
    kill_before_every_write(Layout::Compact);
}

fn kill_before_every_write(layout: Layout) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let exe = std::env::current_exe().unwrap();
    let points = std::env::var("MELFORGE_CRASH_WRITES")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(240);
    let mut last = 0;
    let mut cut_total = 0;
    let mut undo_total = 0;
    for k in 1..=points {
        run_child_to_write(&exe, dir, k, layout);
        undo_total += undo_logs(dir);
        let (journal, _, apps, cut) = recover(dir, layout);
        let confirmed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            check(&journal, &apps, layout)
        }))
        .unwrap_or_else(|e| {
            eprintln!("kill before write {k} of a fresh writer broke the files");
            std::panic::resume_unwind(e)
        });
        assert!(
            confirmed >= last,
            "kill before write {k}: confirmed files went from {last} to {confirmed}"
        );
        last = confirmed;
        cut_total += cut;
    }
    assert!(last > 0, "no batch was ever committed");
    println!(
        "{} rows, {points} kill points: {last} files confirmed, {cut_total} unconfirmed HDF5 \
         rows cut, {undo_total} undo logs rolled back",
        layout.name()
    );
    if layout == Layout::Compact && points >= 100 {
        // Kills between a chunk's rewrite and its flush: the case the undo
        // log is there for.
        assert!(undo_total > 10, "{undo_total} kills left an undo log");
    }
}

/// Undo logs in the output directory (a kill inside an armed step): the
/// next open rolls them back.
fn undo_logs(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("out")).map_or(0, |d| {
        d.filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".h5.undo"))
        })
        .count()
    })
}

#[test]
fn kill_9_at_random_points() {
    let tmp = tempfile::tempdir().unwrap();
    // MELFORGE_CRASH_KEEP keeps the directory for a post-mortem.
    let dir = if std::env::var_os("MELFORGE_CRASH_KEEP").is_some() {
        let kept = tmp.keep();
        println!("work directory kept: {}", kept.display());
        kept
    } else {
        tmp.path().to_path_buf()
    };
    let exe = std::env::current_exe().unwrap();
    let start = Instant::now();
    // A soak (e.g. a loop in a shell) varies the seed and runs longer.
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(default)
    };
    let mut seed = env("MELFORGE_CRASH_SEED", 0x9E37_79B9_7F4A_7C15).max(1);
    let max_runs = env("MELFORGE_CRASH_RUNS", 20);
    let max_time = Duration::from_secs(env("MELFORGE_CRASH_SECS", 20));
    let (lo, hi) = std::env::var("MELFORGE_CRASH_DELAY_MS")
        .ok()
        .and_then(|v| {
            let (a, b) = v.split_once('-')?;
            Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?))
        })
        .unwrap_or((50, 650));
    let mut last = 0;
    let mut runs = 0;
    let mut torn_total = 0;
    let mut cut_total = 0;
    let mut undo_total = 0;
    while runs < max_runs && start.elapsed() < max_time {
        runs += 1;
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = Duration::from_millis(lo + seed % (hi - lo).max(1));
        let mut child = child_command(&exe, &dir, Layout::Mel).spawn().unwrap();
        std::thread::sleep(delay);
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the child writer exited early: {status}");
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        // Undo logs the kill left (inside an open's armed recovery): the
        // next open rolls them back.
        let undo = undo_logs(&dir);
        let (journal, state, apps, cut) = recover(&dir, Layout::Mel);
        let k = check(&journal, &apps, Layout::Mel);
        assert!(k >= last, "confirmed files went from {last} to {k}");
        println!(
            "run {runs}: killed after {delay:?}: {k} files confirmed, {cut} unconfirmed \
             HDF5 rows cut, torn journal tail {} bytes, {undo} undo logs left",
            state.torn_bytes
        );
        undo_total += undo;
        torn_total += state.torn_bytes;
        cut_total += cut;
        last = k;
        drop(apps);
        drop(journal);
    }
    assert!(last > 0, "no batch was ever committed");
    println!(
        "{runs} kills in {:?}: {last} files confirmed, {cut_total} HDF5 rows cut, \
         {torn_total} torn journal bytes, {undo_total} undo logs left in all",
        start.elapsed()
    );
}
