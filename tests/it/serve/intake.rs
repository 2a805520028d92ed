//! serve's bounded intake (`serve.max_queued_files`): a burst larger than the
//! cap never queues more than the cap; the files beyond it stay in the drop
//! directory, are picked up by the rescans that follow once the queue has
//! room, and every file becomes exactly one row (and is deleted after its
//! commit).

use melforge::config::Config;

use super::harness::{self, *};

/// The cap of the test service: far below the burst.
const CAP: u64 = 8;

/// Writes the service's config with the intake cap (`extra` of the harness
/// lands after `[control]`, so the `[serve]` key is written here).
fn write_capped_config(svc: &Svc) {
    let text = format!(
        "[serve]\nwatch_dir = \"drop\"\noutput_dir = \"out\"\nflush_interval_ms = 100\n\
         max_queued_files = {CAP}\non_success = \"delete\"\n[control]\nsocket = \"ctl.sock\"\n"
    );
    std::fs::write(&svc.cfg, text).unwrap();
}

/// The queue as `ctl status` and `ctl stats` show it, checked against the
/// cap each time it is looked at; (queued, deferred sightings).
fn intake_of(svc: &Svc) -> (u64, u64) {
    let s = svc.status();
    assert_eq!(s["max_queued_files"], CAP, "{s}");
    let queued = s["queued"].as_u64().unwrap();
    assert!(queued <= CAP, "status: {queued} queued, cap {CAP}: {s}");
    let stats = svc.ctl("stats");
    let q = stats["queued"].as_u64().unwrap();
    assert!(q <= CAP, "stats: {q} queued, cap {CAP}: {stats}");
    assert_eq!(stats["max_queued_files"], CAP, "{stats}");
    (queued, s["deferred_files"].as_u64().unwrap())
}

/// Files below `dir`, recursively.
fn files_below(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| match e.file_type().unwrap().is_dir() {
            true => files_below(&e.path()),
            false => 1,
        })
        .sum()
}

both_stages!(a_burst_beyond_the_cap_waits_in_the_drop_dir_and_is_ingested_once);
fn a_burst_beyond_the_cap_waits_in_the_drop_dir_and_is_ingested_once(stage: Stage) {
    let corpus = clips(60, 29);
    let mut svc = Svc::with_stage(stage, 100, "");
    write_capped_config(&svc);
    svc.start();
    // Paused, nothing is read: the queue fills to the cap and every later
    // file is deferred (left in the drop directory).
    svc.ctl("pause");
    for (rel, b) in &corpus {
        svc.drop_file(rel, b);
    }
    let beyond = corpus.len() as u64 - CAP;
    wait_for(WAIT, "the burst to fill the queue and be deferred", || {
        let (queued, deferred) = intake_of(&svc);
        (queued == CAP && deferred >= beyond).then_some(())
    });
    // Resumed: the queue drains, rescans refill it, never past the cap.
    svc.ctl("resume");
    wait_for(WAIT, "every file of the burst to be a row", || {
        let (queued, _) = intake_of(&svc);
        let s = svc.status();
        (total_rows(&s) == corpus.len() as u64 && queued == 0).then_some(())
    });
    svc.shutdown();
    assert_exactly_once(&svc, &corpus, &Config::default(), 10);
    assert_eq!(
        files_below(&svc.drop),
        0,
        "every file deleted once committed"
    );
}
