//! The metrics endpoint of a running serve, scraped over HTTP while it
//! ingests: counts match the files dropped and `ctl stats` (JSON and
//! `--format prometheus`).

use std::collections::BTreeMap;
use std::process::Command;

use melforge::app::serve::status::Stats;

use super::harness::{self, *};

/// A port nothing listens on now (bound and released; the service binds it
/// again at once).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// `name{labels} value` lines of an exposition (comments left out).
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad line {l:?}"));
            (
                k.to_string(),
                v.parse().unwrap_or_else(|_| panic!("bad value in {l:?}")),
            )
        })
        .collect()
}

fn scrape(port: u16) -> String {
    let mut r = ureq::get(&format!("http://127.0.0.1:{port}/metrics"))
        .call()
        .expect("the endpoint answers");
    r.body_mut().read_to_string().unwrap()
}

both_stages!(a_scrape_counts_the_dropped_files_as_ctl_stats_does);
fn a_scrape_counts_the_dropped_files_as_ctl_stats_does(stage: Stage) {
    let port = free_port();
    let extra = format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n");
    let mut svc = Svc::with_stage(stage, 50, &extra);
    svc.start();
    let corpus = clips(12, 3);
    for (rel, bytes) in &corpus {
        svc.drop_file(rel, bytes);
    }
    svc.drop_file("TRAINING/LEAK/broken.wav", b"RIFF\x04\x00\x00\x00WAVE");
    // Scrapes while it ingests: always a full exposition, counts only grow.
    let mut last = 0.0;
    let st = wait_for(WAIT, "13 files done", || {
        let m = samples(&scrape(port));
        let ok = m["melforge_files_total{outcome=\"ok\"}"];
        assert!(ok >= last && ok <= 12.0, "ok went from {last} to {ok}");
        last = ok;
        let st = svc.status();
        let done = st["files_ok"].as_u64().unwrap() + st["files_rejected"].as_u64().unwrap();
        (done == 13 && st["in_flight"] == 0).then_some(st)
    });
    assert_eq!(st["files_ok"], 12, "{st}");
    // A flush publishes every stage's tally; then all three views agree.
    assert_eq!(svc.ctl("flush")["ok"], true);
    let text = scrape(port);
    let m = samples(&text);
    let stats: Stats = serde_json::from_value(svc.ctl("stats")).expect("stats");
    assert_eq!(m["melforge_files_total{outcome=\"ok\"}"], 12.0, "{text}");
    assert_eq!(
        m["melforge_files_total{outcome=\"rejected\"}"], 1.0,
        "{text}"
    );
    assert_eq!(
        m["melforge_rejected_total{kind=\"malformed\"}"], 1.0,
        "{text}"
    );
    assert_eq!(stats.report.files_ok, 12);
    assert_eq!(
        m["melforge_bytes_read_total"],
        stats.report.bytes_read as f64
    );
    let rows: f64 = m
        .iter()
        .filter(|(k, _)| k.starts_with("melforge_rows{"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(rows, 12.0, "{text}");
    // Every committed row has its drop→commit latency; commits happened.
    assert_eq!(m["melforge_drop_to_commit_seconds_count"], 12.0, "{text}");
    assert_eq!(
        m["melforge_drop_to_commit_seconds_bucket{le=\"+Inf\"}"],
        12.0
    );
    assert!(m["melforge_journal_commits_total"] >= 1.0, "{text}");
    assert_eq!(m["melforge_journal_staged_files"], 0.0, "{text}");
    assert_eq!(m["melforge_in_flight_files"], 0.0, "{text}");
    for ring in ["jobs", "loaded", "features"] {
        assert!(
            m.contains_key(&format!("melforge_ring_depth{{ring=\"{ring}\"}}")),
            "{text}"
        );
    }
    let info = text
        .lines()
        .find(|l| l.starts_with("melforge_backend_info{"))
        .unwrap();
    assert!(
        info.contains(&format!("backend=\"{}\"", stage.backend())),
        "{info}"
    );
    for s in ["read", "decode", "mel", "write"] {
        let busy = m[&format!("melforge_stage_busy_seconds_total{{stage=\"{s}\"}}")];
        assert!(busy >= 0.0);
    }
    // `ctl stats --format prometheus` renders the same counts.
    let out = Command::new(BIN)
        .args(["ctl", "stats", "--format", "prometheus", "--socket"])
        .arg(&svc.sock)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let ctl = samples(&String::from_utf8(out.stdout).unwrap());
    for k in [
        "melforge_files_total{outcome=\"ok\"}",
        "melforge_files_total{outcome=\"rejected\"}",
        "melforge_bytes_read_total",
        "melforge_drop_to_commit_seconds_count",
        "melforge_journal_commits_total",
    ] {
        assert_eq!(ctl[k], m[k], "{k}");
    }
    // Only /metrics; HEAD works too.
    let e = ureq::get(&format!("http://127.0.0.1:{port}/other"))
        .call()
        .unwrap_err();
    assert!(matches!(e, ureq::Error::StatusCode(404)), "{e}");
    svc.shutdown();
    // The endpoint stops with the service.
    assert!(
        ureq::get(&format!("http://127.0.0.1:{port}/metrics"))
            .call()
            .is_err()
    );
}

#[test]
fn a_taken_metrics_port_stops_serve_with_the_key_named() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let mut svc = Svc::new(100, &format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n"));
    svc.spawn();
    let st = svc.wait_exit();
    assert!(!st.success());
    let log = svc.log();
    assert!(
        log.contains(&format!(
            "cannot serve metrics on 127.0.0.1:{port} (metrics.listen)"
        )),
        "{log}"
    );
}
