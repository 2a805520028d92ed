//! The journal's exactly-once index through the real service: `ctl compact`,
//! automatic compaction past `serve.compact_tail_entries`, and restarts after
//! compactions that must skip every committed file (rows and rejections).

use std::path::Path;

use melforge::app::serve::status::{Stats, Status};

use super::harness::*;

/// Paths of every row in the split files, sorted.
fn row_paths(out: &Path) -> Vec<String> {
    let mut v: Vec<String> = splits(out).values().flat_map(|f| f.path.clone()).collect();
    v.sort();
    v
}

fn state_files(svc: &Svc) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(svc.out.join(".melforge"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

fn status(svc: &Svc) -> Status {
    serde_json::from_value(svc.status()).expect("status")
}

#[test]
fn ctl_compact_shrinks_the_journal_and_keeps_exactly_once() {
    let corpus = clips(16, 61);
    let mut svc = Svc::new(100, "");
    svc.start();
    for (rel, bytes) in &corpus[..12] {
        svc.drop_file(rel, bytes);
    }
    svc.drop_file("TRAINING/LEAK/bad.wav", b"not a wav file");
    svc.wait_rows(12);
    svc.ctl("flush");
    let before = status(&svc).journal.expect("status reports the journal");
    assert_eq!(before.index_entries, 13, "{before:?}");
    assert_eq!(before.tail_entries, 13, "{before:?}");
    assert_eq!(before.compactions, 0);

    let r = svc.ctl("compact");
    assert_eq!(r["ok"], true, "{r}");
    let after = status(&svc).journal.unwrap();
    assert_eq!(after.index_entries, 13, "{after:?}");
    assert_eq!(after.tail_entries, 0, "{after:?}");
    assert_eq!(after.compactions, 1);
    assert!(
        after.journal_bytes < before.journal_bytes / 2,
        "journal {} B before, {} B after",
        before.journal_bytes,
        after.journal_bytes
    );
    let c = after.last_compaction.unwrap();
    assert_eq!((c.entries, c.merged), (13, 13));
    let on_disk = std::fs::metadata(svc.out.join(".melforge/journal"))
        .unwrap()
        .len();
    assert_eq!(on_disk, after.journal_bytes);
    // The metrics carry the same numbers.
    let stats: Stats = serde_json::from_value(svc.ctl("stats")).unwrap();
    assert_eq!(stats.journal.index.entries, 13);
    assert_eq!(stats.journal.index.compactions, 1);
    assert!(stats.journal.index.last_compaction_unix_s > 0.0);

    // More files after the compaction land in the tail.
    for (rel, bytes) in &corpus[12..] {
        svc.drop_file(rel, bytes);
    }
    svc.wait_rows(16);
    svc.shutdown();

    // A restart finds every file (rows and the rejection) already done.
    svc.start();
    let s = status(&svc);
    assert_eq!((s.files_ok, s.files_rejected), (0, 0), "{s:?}");
    assert_eq!((s.queued, s.in_flight), (0, 0), "{s:?}");
    let j = s.journal.unwrap();
    assert_eq!(j.index_entries, 17, "{j:?}");
    svc.shutdown();
    let want: Vec<String> = corpus.iter().map(|(r, _)| r.clone()).collect();
    assert_eq!(row_paths(&svc.out), want, "every file exactly once");
    let files = state_files(&svc);
    assert_eq!(
        files.iter().filter(|f| f.starts_with("index.")).count(),
        1,
        "{files:?}"
    );
}

#[test]
fn restart_after_compaction_skips_every_committed_file() {
    // Compaction every 3 files: several run while files arrive.
    let corpus = clips(20, 62);
    let mut svc = Svc::new(50, "");
    let cfg = std::fs::read_to_string(&svc.cfg).unwrap().replacen(
        "flush_interval_ms = 50\n",
        "flush_interval_ms = 50\ncompact_tail_entries = 3\n",
        1,
    );
    std::fs::write(&svc.cfg, cfg).unwrap();
    svc.start();
    for (rel, bytes) in &corpus {
        svc.drop_file(rel, bytes);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    svc.wait_rows(20);
    svc.ctl("flush");
    let j = status(&svc).journal.unwrap();
    assert!(j.compactions >= 2, "{j:?}");
    assert!(j.tail_entries < 3, "{j:?}");
    assert_eq!(j.index_entries, 20, "{j:?}");
    svc.kill9();
    svc.start();
    let s = status(&svc);
    assert_eq!((s.files_ok, s.queued, s.in_flight), (0, 0, 0), "{s:?}");
    svc.shutdown();
    let want: Vec<String> = corpus.iter().map(|(r, _)| r.clone()).collect();
    assert_eq!(row_paths(&svc.out), want, "every file exactly once");
}

#[test]
fn a_compaction_that_fails_on_write_changes_nothing() {
    // ENOSPC/EIO injected into the writes and syncs of the new index snapshot
    // and of the new journal: the service logs the failure, keeps ingesting
    // on the old journal, and a restart finds every file exactly once.
    let corpus = clips(12, 63);
    let scratch = tempfile::tempdir().unwrap();
    let Some(shim) = super::faults::fault_shim(scratch.path()) else {
        return;
    };
    let mut fired = 0;
    for (target, errno, at) in [
        ("/index.", "ENOSPC", 1),
        ("/index.", "EIO", 2),
        ("/journal.tmp", "ENOSPC", 1),
        ("/journal.tmp", "EIO", 2),
    ] {
        let context = format!("{errno} at call #{at} on {target}");
        let mut svc = Svc::new(50, "");
        let cfg = std::fs::read_to_string(&svc.cfg).unwrap().replacen(
            "flush_interval_ms = 50\n",
            "flush_interval_ms = 50\ncompact_tail_entries = 4\n",
            1,
        );
        std::fs::write(&svc.cfg, cfg).unwrap();
        svc.env = super::faults::fault_env(&shim, target, at, errno);
        svc.start();
        for (i, (rel, bytes)) in corpus.iter().enumerate() {
            svc.drop_file(rel, bytes);
            if i % 4 == 3 {
                std::thread::sleep(std::time::Duration::from_millis(150));
            }
        }
        let s = svc.wait_rows(corpus.len() as u64);
        assert_eq!(s["state"], "running", "{context}: {s}");
        svc.ctl("flush");
        svc.shutdown();
        if svc.log().contains("fault-shim: injected") {
            fired += 1;
            assert!(
                svc.log().contains("cannot compact the journal"),
                "{context}: the failure is not reported:\n{}",
                svc.log()
            );
        }
        let want: Vec<String> = corpus.iter().map(|(r, _)| r.clone()).collect();
        assert_eq!(row_paths(&svc.out), want, "{context}");
        svc.env.clear();
        svc.start();
        let s = status(&svc);
        assert_eq!(
            (s.files_ok, s.queued, s.in_flight),
            (0, 0, 0),
            "{context}: {s:?}"
        );
        svc.shutdown();
        assert_eq!(row_paths(&svc.out), want, "{context} after a restart");
    }
    assert_eq!(fired, 4, "the shim fired in only {fired} runs");
}
