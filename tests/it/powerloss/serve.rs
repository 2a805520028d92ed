//! Power loss during `serve`: the drop dir, output dir and state dir all on
//! powerfs. A run ingests a dropped corpus (one file rejected) with commits
//! every 40 ms and a compaction every 3 journal entries, then (on_success =
//! keep) runs `ctl rebuild` and its swap, then shuts down. At each crash point
//! the service is restarted on what survived and run until idle; then:
//! - every good dropped file is a row exactly once (so no committed file was
//!   lost: with keep it would be re-ingested, but with move/delete a file gone
//!   from the drop dir must have been committed), no row twice;
//! - scripts/check_h5.py passes on the output dir;
//! - with move, every dropped file is in the drop dir or the done dir;
//! - `rejected.jsonl` lists the rejected file (its line is never lost);
//! - nothing but drop/, out/ and done/ exists on the disk.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use powerfs::{CrashMode, Model};
use serde_json::Value;

use super::{BIN, Disk, can_run, check_h5, h5_paths, modes, names, points};

const BROKEN: &str = "TRAINING/LEAK/broken.wav";

/// What the run does after ingesting everything.
#[derive(Clone, Copy, PartialEq)]
enum Then {
    Stop,
    RebuildThenStop,
}

struct Case {
    on_success: &'static str,
    then: Then,
    clips: Vec<(String, Vec<u8>)>,
    /// Dropped (and made durable) once `clips` are in: a new label here is
    /// added while the split file is in SWMR mode, so its close rewrites the
    /// root attribute `label_names`. Only with on_success = "keep" (after a
    /// crash the producer drops again what it finds missing).
    late: Vec<(String, Vec<u8>)>,
    /// More configuration (a `[features]` recipe).
    extra: &'static str,
}

impl Case {
    fn config(&self, disk: &Disk) -> PathBuf {
        let r = disk.root();
        let done = if self.on_success == "move" {
            format!("done_dir = \"{}\"\n", r.join("done").display())
        } else {
            String::new()
        };
        let text = format!(
            "[serve]\nwatch_dir = \"{}\"\noutput_dir = \"{}\"\nflush_interval_ms = 40\n\
             on_success = \"{}\"\n{done}compact_tail_entries = 3\n\
             [control]\nsocket = \"{}\"\n[compute]\nbackend = \"cpu\"\nworkers = 1\n\
             [output]\nchunk_files = 2\n{}",
            r.join("drop").display(),
            r.join("out").display(),
            self.on_success,
            disk.side().join("ctl.sock").display(),
            self.extra,
        );
        let p = disk.side().join("serve.toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    /// The drop dir with every clip and the broken file, durable.
    fn setup(&self, disk: &Disk) {
        let drop = disk.root().join("drop");
        for (rel, bytes) in &self.clips {
            crate::common::put(&drop, rel, bytes);
        }
        crate::common::put(&drop, BROKEN, b"RIFF????WAVEjunk");
        disk.settle();
    }

    /// Drops the late files the way a careful producer does: each written
    /// under a dot name serve ignores, synced, renamed into place, then its
    /// directory and the new folders above it synced.
    fn drop_late(&self, disk: &Disk) {
        let drop = disk.root().join("drop");
        for (rel, bytes) in &self.late {
            let p = drop.join(rel);
            let dir = p.parent().unwrap();
            std::fs::create_dir_all(dir).unwrap();
            let tmp = dir.join(".late.tmp");
            std::fs::write(&tmp, bytes).unwrap();
            std::fs::File::open(&tmp).unwrap().sync_all().unwrap();
            std::fs::rename(&tmp, &p).unwrap();
            let mut d = Some(dir);
            while let Some(x) = d {
                std::fs::File::open(x).unwrap().sync_all().unwrap();
                d = x.parent().filter(|_| x != drop);
            }
        }
    }

    fn good(&self) -> Vec<String> {
        self.clips
            .iter()
            .chain(&self.late)
            .map(|(r, _)| r.clone())
            .collect()
    }
}

/// A running service with its control socket off the power-loss disk.
struct Svc {
    child: Child,
    sock: PathBuf,
    log: PathBuf,
}

impl Svc {
    fn spawn(disk: &Disk, cfg: &Path, run: &str) -> Svc {
        let log = disk.side().join(format!("serve.{run}.log"));
        let child = Command::new(BIN)
            .args(["--log-level", "debug", "serve", "--config"])
            .arg(cfg)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Svc {
            child,
            sock: disk.side().join("ctl.sock"),
            log,
        }
    }

    fn ctl(&self, cmd: &str) -> Option<Value> {
        let out = Command::new(BIN)
            .args(["ctl", "--json", "--timeout", "10", "--socket"])
            .arg(&self.sock)
            .arg(cmd)
            .env_remove("RUST_LOG")
            .stderr(Stdio::null())
            .output()
            .unwrap();
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).ok()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn idle(s: &Value) -> bool {
    s["ok"] == true && s["queued"] == 0 && s["in_flight"] == 0
}

fn rows(s: &Value) -> u64 {
    s["rows"]
        .as_object()
        .map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
}

/// Runs the scenario until it shuts down (its exit status) or the disk froze
/// its crash image (`None`: killed).
fn drive(disk: &Disk, case: &Case, cfg: &Path) -> Option<ExitStatus> {
    let mut svc = Svc::spawn(disk, cfg, "crash");
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut n = case.clips.len() as u64;
    let mut phase = 0; // 0 ingest, 1 rebuild, 2 stopping
    loop {
        if disk.fs().frozen() {
            svc.kill();
            return None;
        }
        if let Some(st) = svc.child.try_wait().unwrap() {
            return Some(st);
        }
        if phase < 2
            && let Some(s) = svc.ctl("status")
        {
            let done = idle(&s)
                && s["files_ok"].as_u64() == Some(n)
                && s["files_rejected"].as_u64() == Some(1);
            if phase == 0 && done && n < case.good().len() as u64 {
                case.drop_late(disk);
                n = case.good().len() as u64;
            } else if phase == 0 && done {
                if case.then == Then::RebuildThenStop {
                    let r = svc.ctl("rebuild");
                    assert!(r.as_ref().is_some_and(|r| r["ok"] == true), "{r:?}");
                    phase = 1;
                } else {
                    svc.ctl("shutdown");
                    phase = 2;
                }
            } else if phase == 1 && s["rebuild"]["state"] == "done" && idle(&s) {
                svc.ctl("shutdown");
                phase = 2;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the run took 90 s:\n{}",
            svc.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Restarts the service on what survived, waits until every good file is a
/// row and nothing is queued, shuts it down; `Err` with the log if it cannot.
fn recover(disk: &Disk, case: &Case, cfg: &Path) -> Result<(), String> {
    let mut svc = Svc::spawn(disk, cfg, "recover");
    let deadline = Instant::now() + Duration::from_secs(30);
    let n = case.good().len() as u64;
    loop {
        if let Some(st) = svc.child.try_wait().unwrap() {
            return Err(format!(
                "serve exited with {st} after the crash:\n{}",
                svc.log()
            ));
        }
        if let Some(s) = svc.ctl("status")
            && idle(&s)
            && rows(&s) >= n
        {
            break;
        }
        if Instant::now() > deadline {
            let s = svc.ctl("status");
            svc.kill();
            return Err(format!("not all rows after 30 s: {s:?}\n{}", svc.log()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    svc.ctl("shutdown");
    let st = svc.child.wait().unwrap();
    if !st.success() {
        return Err(format!("shutdown exited with {st}:\n{}", svc.log()));
    }
    Ok(())
}

/// The end-state invariants (see the module doc).
fn check(disk: &Disk, case: &Case) -> Result<(), String> {
    let r = disk.root();
    let root = names(&r);
    if !root
        .iter()
        .all(|n| ["drop", "out", "done"].contains(&n.as_str()))
    {
        return Err(format!("other files on the disk: {root:?}"));
    }
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for paths in h5_paths(&r.join("out")).values() {
        for p in paths {
            *seen.entry(p.clone()).or_default() += 1;
        }
    }
    let twice: Vec<_> = seen.iter().filter(|&(_, &n)| n > 1).collect();
    if !twice.is_empty() {
        return Err(format!("rows twice: {twice:?}"));
    }
    let missing: Vec<_> = case
        .good()
        .into_iter()
        .filter(|p| !seen.contains_key(p))
        .collect();
    if !missing.is_empty() {
        return Err(format!("committed files lost: {missing:?}"));
    }
    if seen.len() != case.good().len() {
        return Err(format!("unexpected rows: {:?}", seen.keys()));
    }
    let rejected = std::fs::read_to_string(r.join("out/rejected.jsonl")).unwrap_or_default();
    if !rejected.lines().any(|l| l.contains(BROKEN)) {
        return Err(format!(
            "rejected.jsonl does not list {BROKEN}: {rejected:?}"
        ));
    }
    if case.on_success == "move" {
        let lost: Vec<_> = case
            .good()
            .into_iter()
            .filter(|p| !r.join("drop").join(p).exists() && !r.join("done").join(p).exists())
            .collect();
        if !lost.is_empty() {
            return Err(format!("dropped files neither in drop nor done: {lost:?}"));
        }
    }
    // serve's label_names are append-only, in arrival order (docs/FORMAT.md,
    // "serve"), which the script's build-file rule of sorted names does not
    // allow; every other problem counts.
    match check_h5(&r.join("out")) {
        Err(e) => {
            let real: Vec<&str> = e
                .lines()
                .filter(|l| l.contains("PROBLEM") && !l.contains("label_names are not sorted"))
                .collect();
            if real.is_empty() { Ok(()) } else { Err(e) }
        }
        Ok(()) => Ok(()),
    }
}

/// Which crash points a test tries.
enum Plan {
    /// `n` points spread over the run (every point in a full run).
    Spread(u64),
    /// Torn crashes (`seeds` of them, each keeping other prefixes) at every
    /// boundary `pick` selects in the reference run.
    Torn(fn(&powerfs::Boundary) -> bool, u64),
}

/// Runs the plan; returns the crash points tried and how many of their
/// images held an undo log (`.<split>.h5.undo`: a crash inside an armed open
/// or close, rolled back by the restart).
fn explore(case: &Case, plan: Plan) -> (usize, usize) {
    let name = format!("serve on_success={}", case.on_success);
    let disk = Disk::new(Model::new());
    case.setup(&disk);
    let cfg = case.config(&disk);
    let st = drive(&disk, case, &cfg).expect("no freeze set");
    assert!(st.success(), "{name}: reference run exited with {st}");
    let total = disk.fs().with(|m| m.boundaries().len() as u64);
    check(&disk, case).unwrap_or_else(|e| panic!("{name}: reference run: {e}"));
    let runs: Vec<(u64, CrashMode)> = match plan {
        Plan::Spread(n) => points(total, n)
            .into_iter()
            .flat_map(|k| modes(k).into_iter().map(move |m| (k, m)))
            .collect(),
        Plan::Torn(pick, seeds) => disk.fs().with(|m| {
            m.boundaries()
                .iter()
                .filter(|b| pick(b))
                .flat_map(|b| {
                    (0..seeds).map(|s| {
                        (
                            b.n,
                            CrashMode::Torn {
                                seed: b.n + 1000 * s,
                            },
                        )
                    })
                })
                .collect()
        }),
    };
    drop(disk);
    let mut tried = 0;
    let mut undo_logs = 0;
    for (k, mode) in runs {
        {
            tried += 1;
            let mut disk = Disk::new(Model::new());
            case.setup(&disk);
            let cfg = case.config(&disk);
            disk.fs().freeze_at(k, mode);
            drive(&disk, case, &cfg);
            let trail = disk.trail(k);
            disk.power_loss(CrashMode::Whole);
            let out = disk.root().join("out");
            if names(&out).iter().any(|n| n.ends_with(".h5.undo")) {
                undo_logs += 1;
            }
            // The producer drops again whatever late file it finds missing
            // or incomplete (needs on_success = "keep": serve never deletes).
            let drop = disk.root().join("drop");
            if case
                .late
                .iter()
                .any(|(rel, bytes)| std::fs::read(drop.join(rel)).ok().as_ref() != Some(bytes))
            {
                case.drop_late(&disk);
            }
            let r = recover(&disk, case, &cfg).and_then(|()| check(&disk, case));
            if let Err(e) = r {
                panic!("{name} crash point {k}/{total} ({mode:?}): {e}\nlast boundaries:\n{trail}");
            }
        }
    }
    eprintln!(
        "{name}: {total} boundaries, {tried} crash points tried, {undo_logs} with an undo log"
    );
    (tried, undo_logs)
}

fn case(on_success: &'static str, then: Then) -> Case {
    Case {
        on_success,
        then,
        clips: super::files_of(crate::common::synth_corpus(8, 5).path()),
        late: Vec::new(),
        extra: "",
    }
}

#[test]
fn serve_with_a_speech_recipe_survives_power_loss() {
    // Variable-length rows (features, offsets, lengths; Whisper's pad
    // value): the append path the librosa cases do not take.
    if can_run("serve_with_a_speech_recipe_survives_power_loss") {
        let mut c = case("delete", Then::Stop);
        // The corpus is at 4,096 Hz; Whisper computes at 16 kHz.
        c.extra = "[features]\nrecipe = \"whisper\"\n[input]\nresample = \"soxr_hq\"\n";
        explore(&c, Plan::Spread(10));
    }
}

/// Compact storage: Blosc chunks of `features`, the last of which every
/// flush rewrites whole under the appender's undo log
/// (`writer::append::store`). Crash points spread over the run, then a torn
/// crash at every sync of the split file (each flush's `fdatasync` and the
/// undo log's commit), two seeds each.
#[test]
fn serve_with_compact_storage_survives_power_loss() {
    if can_run("serve_with_compact_storage_survives_power_loss") {
        let mut c = case("keep", Then::Stop);
        // Under the case's [output]. The corpus is at 4,096 Hz; Kaldi fbank
        // computes at 16 kHz.
        c.extra = "storage = \"compact\"\n[features]\nrecipe = \"kaldi-fbank\"\n\
                   [input]\nresample = \"soxr_hq\"\n";
        explore(&c, Plan::Spread(10));
        let syncs =
            |b: &powerfs::Boundary| b.what == "fsync" && b.name.to_string_lossy().ends_with(".h5");
        assert!(explore(&c, Plan::Torn(syncs, 2)).0 > 0);
    }
}

#[test]
fn serve_keep_with_compaction_and_rebuild_survives_power_loss() {
    if can_run("serve_keep_with_compaction_and_rebuild_survives_power_loss") {
        explore(&case("keep", Then::RebuildThenStop), Plan::Spread(16));
    }
}

#[test]
fn serve_delete_survives_power_loss() {
    if can_run("serve_delete_survives_power_loss") {
        explore(&case("delete", Then::Stop), Plan::Spread(10));
    }
}

#[test]
fn serve_move_survives_power_loss() {
    if can_run("serve_move_survives_power_loss") {
        explore(&case("move", Then::Stop), Plan::Spread(10));
    }
}

/// Regression: `on_success = "move"` renamed the file across directories; a
/// torn power loss that kept the unlink from the drop dir but not the new
/// name in the done dir (or its new parent directories) lost the input file.
/// Now: target dirs made durable, link, fsync, then unlink.
#[test]
fn serve_move_never_loses_the_file_to_a_torn_power_loss() {
    if can_run("serve_move_never_loses_the_file_to_a_torn_power_loss") {
        let names = |b: &powerfs::Boundary| {
            matches!(b.what, "link" | "unlink" | "rename" | "mkdir" | "fsyncdir")
        };
        assert!(explore(&case("move", Then::Stop), Plan::Torn(names, 1)).0 > 0);
    }
}

/// Regression: serve appended `rejected.jsonl` after the journal commit and
/// without an fsync; a power loss after a commit that recorded a rejection
/// kept it in the journal (so the file is never offered again) and lost its
/// line. Now the line is fdatasynced before the journal commits. Only the
/// rejected file is dropped, so the run is one commit and each crash point
/// lands on the same operation in every run.
#[test]
fn serve_rejection_line_survives_power_loss() {
    if can_run("serve_rejection_line_survives_power_loss") {
        let only_broken = Case {
            on_success: "delete",
            then: Then::Stop,
            clips: Vec::new(),
            late: Vec::new(),
            extra: "",
        };
        assert!(explore(&only_broken, Plan::Spread(u64::MAX)).0 > 0);
    }
}

/// Regression: closing an appender whose labels grew while in SWMR mode
/// rewrites HDF5 metadata in place (the SWMR close's superblock; a reopen
/// that rewrites the root attribute `label_names`: superblock, root object
/// header, a new heap collection, free-space info, truncates) after the last
/// fsync, in no order that makes every prefix readable. A torn power loss
/// there left a `<split>.h5` HDF5 refused to open, and serve refused to
/// start. Now the close is armed with an undo log (`writer::append::undo`)
/// and the restart rolls it back. Every boundary from the close on (the
/// file's truncates, the log's creation, syncs and removal), three torn
/// prefixes each. Before the fix: "cannot read attribute `amin`: bad
/// version number for attribute message" at the close's first truncate.
#[test]
fn serve_close_torn_by_power_loss_leaves_a_readable_h5() {
    if can_run("serve_close_torn_by_power_loss_leaves_a_readable_h5") {
        let mut c = case("keep", Then::Stop);
        let (_, bytes) = c.clips[0].clone();
        c.late = vec![("TRAINING/HISS/late.wav".to_string(), bytes)];
        let close = |b: &powerfs::Boundary| {
            let name = b.name.to_string_lossy();
            (b.what == "truncate" && name.ends_with(".h5")) || name.ends_with(".undo")
        };
        let (tried, undo_logs) = explore(&c, Plan::Torn(close, 3));
        assert!(tried > 0);
        assert!(
            undo_logs > 0,
            "no crash point left an undo log to roll back"
        );
    }
}
