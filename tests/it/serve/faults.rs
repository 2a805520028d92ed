//! serve under the faults an attack pass found: a drop directory deleted or
//! replaced under the running service, and symbolic links in the drop tree.
//! Each test is named after what broke and failed on the code before its fix.

use std::time::Duration;

use super::harness::*;
use crate::common::Tmpfs;

#[test]
fn a_replaced_drop_directory_is_watched_again_and_nothing_dropped_later_is_lost() {
    let corpus = clips(4, 31);
    let mut svc = Svc::new(100, "");
    svc.start();
    svc.drop_file("TRAINING/LEAK/a.wav", &corpus[0].1);
    svc.wait_rows(1);

    // `mv drop drop.old; mkdir drop`: the old tree must no longer be watched
    // under the drop directory's name, the new one must be.
    let old = svc.root.path().join("drop.old");
    std::fs::rename(&svc.drop, &old).unwrap();
    std::fs::create_dir(&svc.drop).unwrap();
    let lost = wait_for(WAIT, "the loss to be reported", || {
        let s = svc.status();
        s["last_error"].as_str().map(str::to_string)
    });
    assert!(lost.contains("drop directory"), "{lost}");
    svc.drop_file("TRAINING/LEAK/b.wav", &corpus[1].1);
    std::fs::write(old.join("TRAINING/LEAK/stale.wav"), &corpus[3].1).unwrap();
    svc.wait_rows(2);

    // `rm -rf drop; mkdir drop`, with a file already there when it returns.
    std::fs::remove_dir_all(&svc.drop).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let staged = svc.root.path().join("drop.next");
    std::fs::create_dir_all(staged.join("VALIDATION/PUMP")).unwrap();
    std::fs::write(staged.join("VALIDATION/PUMP/c.wav"), &corpus[2].1).unwrap();
    std::fs::rename(&staged, &svc.drop).unwrap();
    svc.wait_rows(3);
    std::thread::sleep(Duration::from_millis(300));
    let s = svc.status();
    assert_eq!(
        total_rows(&s),
        3,
        "a file in the moved-away tree was ingested: {s}"
    );
    assert_eq!(s["files_rejected"], 0, "{s}");
    svc.shutdown();
    let paths: Vec<String> = splits(&svc.out)
        .values()
        .flat_map(|f| f.path.clone())
        .collect();
    assert_eq!(
        paths,
        [
            "TRAINING/LEAK/a.wav",
            "TRAINING/LEAK/b.wav",
            "VALIDATION/PUMP/c.wav"
        ]
    );
}

#[test]
fn the_startup_scan_and_the_watch_never_follow_symlinks_out_of_the_drop_dir() {
    let corpus = clips(3, 32);
    let mut svc = Svc::new(100, "");
    let outside = svc.root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let secret = outside.join("passwd");
    std::fs::write(&secret, b"root:x:0:0:root:/root:/bin/bash\n").unwrap();
    std::fs::write(outside.join("real.wav"), &corpus[0].1).unwrap();
    std::fs::create_dir_all(svc.drop.join("TRAINING/LEAK")).unwrap();
    std::os::unix::fs::symlink(&secret, svc.drop.join("TRAINING/LEAK/passwd.wav")).unwrap();
    std::os::unix::fs::symlink(
        outside.join("real.wav"),
        svc.drop.join("TRAINING/LEAK/link.wav"),
    )
    .unwrap();
    std::os::unix::fs::symlink(&outside, svc.drop.join("TRAINING/linked_dir")).unwrap();
    svc.drop_file("TRAINING/LEAK/good.wav", &corpus[1].1);
    svc.start();
    svc.wait_rows(1);

    // A link renamed in while the service runs is not followed either.
    let staged = svc.root.path().join("stage/live.wav");
    std::os::unix::fs::symlink(outside.join("real.wav"), &staged).unwrap();
    std::fs::rename(&staged, svc.drop.join("TRAINING/LEAK/live.wav")).unwrap();
    svc.drop_file("TRAINING/LEAK/after.wav", &corpus[2].1);
    svc.wait_rows(2);
    std::thread::sleep(Duration::from_millis(300));
    let s = svc.status();
    assert_eq!(total_rows(&s), 2, "{s}");
    assert_eq!(s["files_rejected"], 0, "a link was read: {s}");
    let rejected = std::fs::read_to_string(svc.out.join("rejected.jsonl")).unwrap_or_default();
    assert!(!rejected.contains("root:x"), "{rejected}");
    let log = svc.log();
    assert!(
        log.contains("passwd.wav"),
        "the link is named in the log:\n{log}"
    );
    assert!(!log.contains("root:x"), "{log}");
    assert!(log.contains("live.wav"), "{log}");
    svc.shutdown();
}

#[test]
fn a_full_output_disk_degrades_serve_and_it_resumes_by_itself_when_space_frees() {
    // Regression: serve exited on ENOSPC ("cannot write rows … errno 28")
    // and the split files it left could never be opened again.
    let corpus = clips(240, 41);
    let mut svc = Svc::new(100, "");
    // The output (and the state directory inside it) on a 6 MiB tmpfs:
    // room for about a hundred rows.
    let Some(disk) = Tmpfs::mount(&svc.out, 6) else {
        return;
    };
    svc.start();
    for (rel, bytes) in &corpus {
        svc.drop_file(rel, bytes);
    }
    let s = wait_for(WAIT, "the service to degrade", || {
        let s = svc.status();
        (s["state"] == "degraded").then_some(s)
    });
    let e = s["last_error"].as_str().unwrap_or("");
    assert!(e.contains("disk space"), "{s}");
    // It stays up and keeps answering while the disk is full; stats and the
    // metrics say so too.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(svc.status()["state"], "degraded");
    let st = svc.ctl("stats");
    assert!(
        st["degraded"]
            .as_str()
            .is_some_and(|e| e.contains("disk space")),
        "{st}"
    );
    let prom = std::process::Command::new(BIN)
        .args(["ctl", "--format", "prometheus", "--socket"])
        .arg(&svc.sock)
        .arg("stats")
        .output()
        .unwrap();
    let prom = String::from_utf8_lossy(&prom.stdout);
    assert!(prom.lines().any(|l| l == "melforge_degraded 1"), "{prom}");

    disk.resize(64);
    let s = svc.wait_rows(corpus.len() as u64);
    assert_eq!(s["state"], "running", "{s}");
    assert_eq!(s["files_ok"], corpus.len() as u64, "{s}");
    assert_eq!(s["files_rejected"], 0, "{s}");
    svc.shutdown();
    assert_exactly_once(&svc, &corpus, "after the disk filled");
    // A restart opens every file and finds nothing left to do.
    svc.start();
    let s = svc.wait_rows(corpus.len() as u64);
    assert_eq!(s["files_ok"], 0, "{s}");
    svc.shutdown();
    assert_exactly_once(&svc, &corpus, "after a restart");
    drop(disk);
}

#[test]
fn a_dropped_file_with_a_non_utf8_name_is_rejected_once_not_ignored_forever() {
    // Regression: serve skipped such a file with no log line and no
    // rejection; it stayed in the drop directory forever.
    use std::os::unix::ffi::OsStrExt;
    let corpus = clips(2, 33);
    let mut svc = Svc::new(100, "");
    svc.start();
    let name = std::ffi::OsStr::from_bytes(b"caf\xe9.wav");
    let staged = svc.root.path().join("stage").join(name);
    std::fs::write(&staged, &corpus[0].1).unwrap();
    std::fs::create_dir_all(svc.drop.join("TRAINING/LEAK")).unwrap();
    std::fs::rename(&staged, svc.drop.join("TRAINING/LEAK").join(name)).unwrap();
    svc.drop_file("TRAINING/LEAK/good.wav", &corpus[1].1);
    let s = wait_for(WAIT, "the rejection", || {
        let s = svc.status();
        (s["files_rejected"] == 1 && total_rows(&s) == 1).then_some(s)
    });
    assert_eq!(s["rejected_by_kind"]["bad_path"], 1, "{s}");
    svc.ctl("flush");
    let lines = std::fs::read_to_string(svc.out.join("rejected.jsonl")).unwrap();
    assert!(
        lines.contains(r#""path":"TRAINING/LEAK/caf\\xE9.wav""#),
        "{lines}"
    );
    assert!(lines.contains("not valid UTF-8"), "{lines}");
    svc.shutdown();
    // Journalled: a restart's scan does not reject it again.
    svc.start();
    svc.wait_rows(1);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(svc.status()["files_rejected"], 0);
    svc.shutdown();
    let lines = std::fs::read_to_string(svc.out.join("rejected.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 1, "{lines}");
}

/// The environment that makes serve load the fault shim `shim` and fail its
/// `at`-th write (or sync) of a path containing `target` with `errno`.
pub(super) fn fault_env(
    shim: &std::path::Path,
    target: &str,
    at: u32,
    errno: &str,
) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".into(), shim.display().to_string()),
        ("FAULT_PATH".into(), target.into()),
        ("FAULT_AT".into(), at.to_string()),
        ("FAULT_ERRNO".into(), errno.into()),
    ]
}

/// Builds tests/it/serve/fault_shim.c into `dir`; None (with the reason
/// printed) where no C compiler is found.
pub(super) fn fault_shim(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let src = dir.join("fault_shim.c");
    std::fs::write(&src, include_str!("fault_shim.c")).unwrap();
    let so = dir.join("fault_shim.so");
    let out = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&so)
        .arg(&src)
        .arg("-ldl")
        .output();
    match out {
        Ok(o) if o.status.success() => Some(so),
        Ok(o) => panic!(
            "the fault shim does not compile:\n{}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            eprintln!("skipped: no C compiler (cc) to build the fault shim: {e}");
            None
        }
    }
}

/// Every dropped file is a row exactly once, in readable split files.
/// Every split file under `out` holds the CMVN statistics of its own rows,
/// in its row order, bit for bit (rows arrive in another order each run, so
/// runs differ in the last bits of the sums).
fn assert_statistics_of_the_rows(out: &std::path::Path, context: &str) {
    use melforge::cmvn::{Bins, Stats};
    use melforge::writer::Dtype;
    for e in std::fs::read_dir(out).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "h5") {
            continue;
        }
        let f = hdf5::File::open(&p).unwrap();
        // The values as stored: summing them again (as float32) gives the
        // numbers the writer summed from the stored values.
        let (bins, rows): (Bins, Vec<Vec<f32>>) = if f.link_exists("mel") {
            let mel = f.dataset("mel").unwrap();
            let s = mel.shape();
            let values = mel.read_raw::<f32>().unwrap();
            let len = values.len() / s[0].max(1);
            let rows = values.chunks(len.max(1)).map(<[f32]>::to_vec).collect();
            (Bins::mel([s[1], s[2], s[3], s[4]], Dtype::Float32), rows)
        } else {
            let layout = melforge::frames::FrameLayout {
                recipe: "stored".into(),
                bins: f.dataset("features").unwrap().shape()[1],
                sample_rate: 16_000,
                frame_step_seconds: 0.01,
                max_samples: None,
                padded_frames: None,
                params: vec![],
            };
            let rows = crate::common::frame_rows_in_order(&f);
            (Bins::frames(&layout, Dtype::Float32), rows)
        };
        let mut scratch = bins.acc();
        let mut want = Stats::new(bins.bins());
        for r in &rows {
            want.add_row(&bins.row(r, &mut scratch));
        }
        let got = melforge::writer::stats::read(&f).unwrap();
        assert!(
            got.as_ref() == Some(&want),
            "{context}: {} holds {got:?}, its {} rows give {want:?}",
            p.display(),
            rows.len()
        );
    }
}

fn assert_exactly_once(svc: &Svc, corpus: &[(String, Vec<u8>)], context: &str) {
    let mut paths = Vec::new();
    for e in std::fs::read_dir(&svc.out).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "h5") {
            let f = hdf5::File::open(&p).unwrap();
            paths.extend(melforge::writer::strings::read(&f, "path").unwrap());
        }
    }
    paths.sort();
    let want: Vec<String> = corpus.iter().map(|(r, _)| r.clone()).collect();
    assert_eq!(paths, want, "{context}: every file exactly once");
}

#[test]
fn injected_write_faults_at_every_point_never_lose_or_duplicate_a_row() {
    // EIO, ENOSPC and short writes injected into the Nth write or sync of the
    // split files and of the journal, once per run: the service degrades and
    // recovers by itself, and a restart finds every file exactly once.
    injected_write_faults("", true);
}

#[test]
fn injected_write_faults_in_compact_files_never_lose_or_duplicate_a_row() {
    // The same faults in the split files of compact storage, whose last chunk
    // every flush rewrites under the undo log: a failed write abandons the
    // appender with its log armed, and the reopen recovers.
    injected_write_faults(
        "[features]\nrecipe = \"kaldi-fbank\"\n[input]\nresample = \"soxr_hq\"\n\
         [output]\nstorage = \"compact\"\n",
        false,
    );
}

/// The fault sweep under config `extra`; with `journal`, faults in the
/// journal too.
fn injected_write_faults(extra: &str, journal: bool) {
    let corpus = clips(24, 51);
    let scratch = tempfile::tempdir().unwrap();
    let Some(shim) = fault_shim(scratch.path()) else {
        return;
    };
    let mut fired = 0;
    let mut cases = Vec::new();
    for errno in ["EIO", "ENOSPC", "SHORT"] {
        for at in [1, 2, 3, 5, 8, 13, 21, 34, 55] {
            cases.push((".h5", errno, at));
        }
        // Calls #1 and #2 on a new journal write and sync its version record
        // at start-up (a failure there stops serve before it runs); commits
        // come after.
        for at in [3, 4, 5, 6].into_iter().filter(|_| journal) {
            cases.push(("/journal", errno, at));
        }
    }
    let runs = cases.len();
    // Frame rows (compact) of the first run: every run must store the same.
    let mut first: Option<std::collections::BTreeMap<String, Vec<f32>>> = None;
    for (target, errno, at) in cases {
        let context = format!("{errno} at write #{at} of {target}");
        let mut svc = Svc::new(50, extra);
        svc.env = fault_env(&shim, target, at, errno);
        svc.start();
        for (i, (rel, bytes)) in corpus.iter().enumerate() {
            svc.drop_file(rel, bytes);
            if i % 8 == 7 {
                std::thread::sleep(Duration::from_millis(60));
            }
        }
        // Every row committed, not only appended: the injected fault may
        // fire on a commit after every row is visible (under load, the
        // flush that carries the last rows comes later), and the service
        // must have recovered from it before the restart below.
        let committed = || {
            wait_for(WAIT, &format!("{context}: every row committed"), || {
                let s = svc.status();
                (s["state"] == "running"
                    && s["queued"] == 0
                    && s["in_flight"] == 0
                    && total_rows(&s) == corpus.len() as u64
                    && committed_files(&s) == corpus.len() as u64)
                    .then_some(s)
            })
        };
        let s = committed();
        assert_eq!(s["files_rejected"], 0, "{context}: {s}");
        svc.ctl("flush");
        committed();
        svc.shutdown();
        if svc.log().contains("fault-shim: injected") {
            fired += 1;
        }
        assert_exactly_once(&svc, &corpus, &context);
        // A restart without the fault opens every file and adds nothing.
        svc.env.clear();
        svc.start();
        let s = svc.wait_rows(corpus.len() as u64);
        assert_eq!(
            s["files_ok"], 0,
            "{context}: re-ingested after restart: {s}"
        );
        svc.shutdown();
        assert_exactly_once(&svc, &corpus, &context);
        assert_statistics_of_the_rows(&svc.out, &context);
        if !extra.is_empty() {
            let rows = crate::common::frame_rows(&svc.out);
            match &first {
                None => first = Some(rows),
                Some(f) => assert!(rows == *f, "{context}: rows differ from the first run's"),
            }
        }
    }
    assert!(
        fired >= runs / 2,
        "the shim fired in only {fired} of {runs} runs"
    );
}

#[test]
fn a_rebuild_killed_while_it_built_leaves_nothing_after_a_restart() {
    // Regression: `out/.rebuild/` stayed forever after a crash during a
    // rebuild (it was cleared only by the next rebuild).
    let corpus = clips(1, 34);
    let mut svc = Svc::new(100, "");
    let staging = svc.out.join(".rebuild");
    std::fs::create_dir_all(&staging).unwrap();
    std::fs::write(staging.join("TRAINING.h5.partial"), b"half a build").unwrap();
    svc.start();
    svc.drop_file("TRAINING/LEAK/a.wav", &corpus[0].1);
    svc.wait_rows(1);
    assert!(
        !staging.exists(),
        "the stale staging directory is still there"
    );
    assert!(svc.log().contains("interrupted rebuild"), "{}", svc.log());
    svc.shutdown();
}

#[test]
fn a_rebuild_killed_mid_swap_is_finished_at_the_next_start() {
    // A crash between swapping the rebuilt files in (step 2) and making the
    // new journal live (step 3) left the old journal over new files; the
    // next start now finishes the swap.
    use melforge::app::serve::journal::{FileStamp, Journal};
    let corpus = clips(6, 35);
    let mut svc = Svc::new(100, "");
    svc.start();
    for (rel, bytes) in &corpus[..4] {
        svc.drop_file(rel, bytes);
    }
    svc.wait_rows(4);
    svc.shutdown();
    for (rel, bytes) in &corpus[4..] {
        svc.drop_file(rel, bytes);
    }
    // What a rebuild of the whole drop tree stages: the files, then a
    // committed journal for them (install step 1)...
    let staging = svc.out.join(".rebuild");
    let o = std::process::Command::new(BIN)
        .args(["build", "--out"])
        .arg(&staging)
        .arg(&svc.drop)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stage_dir = svc.out.join(".melforge/rebuild");
    {
        let (mut j, _) = Journal::open(&stage_dir).unwrap();
        for (split, f) in splits(&staging) {
            for (row, rel) in f.path.iter().enumerate() {
                let stamp = FileStamp::of(&std::fs::metadata(svc.drop.join(rel)).unwrap());
                j.stage_row(rel, stamp, &split, row);
            }
        }
        j.commit().unwrap();
    }
    // ...and one split file already swapped in (step 2 begun) when it died.
    let first = std::fs::read_dir(&staging)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "h5"))
        .unwrap();
    std::fs::rename(&first, svc.out.join(first.file_name().unwrap())).unwrap();

    svc.start();
    let s = svc.wait_rows(corpus.len() as u64);
    assert_eq!(s["files_ok"], 0, "nothing is ingested twice: {s}");
    svc.shutdown();
    assert_exactly_once(&svc, &corpus, "after the finished swap");
    assert!(!staging.exists() && !stage_dir.exists());
}

/// Makes the host double's GPU fail (every copy from then on) once the file
/// this returns exists.
fn failing_gpu(svc: &mut Svc) -> std::path::PathBuf {
    let trigger = svc.root.path().join("gpu-fails-now");
    svc.env = vec![(
        melforge::compute::HOST_DOUBLE_FAIL_ENV.to_string(),
        trigger.display().to_string(),
    )];
    trigger
}

/// Drops `first` and waits until they are rows (computed on the GPU), then
/// breaks the GPU and drops `rest`.
fn drop_then_break(
    svc: &Svc,
    trigger: &std::path::Path,
    first: &[(String, Vec<u8>)],
    rest: &[(String, Vec<u8>)],
) {
    for (rel, b) in first {
        svc.drop_file(rel, b);
    }
    svc.wait_rows(first.len() as u64);
    std::fs::write(trigger, b"").unwrap();
    for (rel, b) in rest {
        svc.drop_file(rel, b);
    }
}

/// A GPU that fails mid-run under `compute.backend = "auto"`: the files it
/// had not finished used to be journalled as rejections (kind `device`), so
/// they were never ingested. Now they are queued again, the stage graph
/// moves to the CPU backend (status says why) and every file is a row
/// exactly once, none rejected.
#[test]
fn a_gpu_failing_mid_run_moves_ingest_to_the_cpu_and_rejects_nothing() {
    let corpus = clips(60, 41);
    let mut svc = Svc::with_stage(Stage::CudaDouble, 50, "");
    let trigger = failing_gpu(&mut svc);
    svc.start();
    drop_then_break(&svc, &trigger, &corpus[..10], &corpus[10..]);
    let st = svc.wait_rows(60);
    assert_eq!(st["files_rejected"], 0, "{st}");
    assert_eq!(st["backend"], "cpu", "{st}");
    let reason = st["backend_reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("the GPU failed during this run") && reason.contains("CUDA_ERROR"),
        "{st}"
    );
    assert!(svc.log().contains("The GPU failed."), "{}", svc.log());
    shut_down_with_every_file_once(&mut svc, &corpus);
}

/// With `compute.backend = "cuda"` the GPU is required: a failure mid-run
/// stops serve with an error after committing what was computed, and a
/// restart (the GPU working again) ingests the rest, each file once.
#[test]
fn with_backend_cuda_a_gpu_failure_stops_serve_and_a_restart_ingests_the_rest() {
    let corpus = clips(60, 43);
    let mut svc = Svc::with_stage(Stage::CudaDouble, 50, "[compute]\nbackend = \"cuda\"\n");
    let trigger = failing_gpu(&mut svc);
    svc.start();
    drop_then_break(&svc, &trigger, &corpus[..10], &corpus[10..]);
    let st = svc.wait_exit();
    assert!(
        !st.success(),
        "serve exited {st} after the GPU failed:\n{}",
        svc.log()
    );
    let log = svc.log();
    assert!(log.contains("requires it"), "{log}");
    assert_no_rejections(&svc);
    let kept = all_paths(&svc.out).len();
    assert!((10..60).contains(&kept), "{kept} rows at the failure");
    svc.env.clear();
    svc.start();
    let st = svc.wait_rows(60);
    assert_eq!(st["files_rejected"], 0, "{st}");
    svc.shutdown();
    super::harness::assert_exactly_once(&svc, &corpus, &melforge::config::Config::default(), 10);
}

/// A CUDA stage that cannot start under `auto` (here its start-up copies
/// fail; on a GPU, its memory taken by another process): serve used to exit,
/// and systemd restarted it into the same failure. Now it starts on the CPU
/// backend, status names the error, and every drop is a row.
#[test]
fn a_cuda_stage_that_cannot_start_under_auto_starts_serve_on_the_cpu() {
    let corpus = clips(20, 45);
    let mut svc = Svc::with_stage(Stage::CudaDouble, 50, "");
    let trigger = failing_gpu(&mut svc);
    std::fs::write(&trigger, b"").unwrap();
    // Not `start`, which insists on the stage's backend.
    svc.start_any();
    for (rel, b) in &corpus {
        svc.drop_file(rel, b);
    }
    let st = svc.wait_rows(20);
    assert_eq!(st["files_rejected"], 0, "{st}");
    assert_eq!(st["backend"], "cpu", "{st}");
    let reason = st["backend_reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("the CUDA stage could not start") && reason.contains("CUDA_ERROR"),
        "{st}"
    );
    shut_down_with_every_file_once(&mut svc, &corpus);
}

/// The end of a GPU-failure test: no rejection logged, then after a clean
/// shutdown every file of `corpus` is one row, equal to the CPU's.
fn shut_down_with_every_file_once(svc: &mut Svc, corpus: &[(String, Vec<u8>)]) {
    assert_no_rejections(svc);
    svc.shutdown();
    super::harness::assert_exactly_once(svc, corpus, &melforge::config::Config::default(), 10);
}

fn assert_no_rejections(svc: &Svc) {
    let log = svc.out.join("rejected.jsonl");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.is_empty(), "rejections: {text}");
}
