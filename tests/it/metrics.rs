//! The metrics endpoint outside serve: a build's graph scraped over HTTP
//! (the endpoint reads the published telemetry and releases the pipeline when
//! stopped), a taken port named by its key, and `ctl --format prometheus`
//! limited to `stats`, and text logs without colour codes off a terminal (what
//! journald stores). The serve scrape test is `serve::metrics`.

use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use melforge::app::build;
use melforge::app::metrics::{self, Endpoint};
use melforge::compute::RejectKind;
use melforge::pipeline::Pipeline;
use melforge::runtime::telemetry::{Local, Telemetry};

use crate::common::{config, synth_corpus};

fn get(url: &str) -> String {
    ureq::get(url)
        .call()
        .expect("the endpoint answers")
        .body_mut()
        .read_to_string()
        .unwrap()
}

#[test]
fn a_build_graph_is_scraped_from_its_published_telemetry() {
    let cfg = config(1);
    let telemetry = Arc::new(Telemetry::default());
    let p = Arc::new(Pipeline::start(&cfg, Arc::clone(&telemetry), 0).unwrap());
    let source = metrics::from_pipeline(Arc::clone(&p), Instant::now());
    let ep = Endpoint::start("127.0.0.1:0".parse().unwrap(), source).unwrap();
    let url = format!("http://{}/metrics", ep.addr());
    let text = get(&url);
    assert!(
        text.contains("melforge_files_total{outcome=\"ok\"} 0\n"),
        "{text}"
    );
    assert!(
        text.contains("melforge_ring_capacity{ring=\"jobs\"}"),
        "{text}"
    );
    assert!(text.contains("backend=\"cpu\""), "{text}");
    // A build has no journal.
    assert!(!text.contains("melforge_journal"), "{text}");
    // What a stage publishes is what the next scrape shows.
    let mut local = Local::default();
    local.add_bytes(1000);
    for _ in 0..3 {
        local.file_done(Ok(()), &telemetry);
    }
    local.file_done(Err(RejectKind::Unsupported), &telemetry);
    local.publish(&telemetry);
    let text = get(&url);
    assert!(
        text.contains("melforge_files_total{outcome=\"ok\"} 3\n"),
        "{text}"
    );
    assert!(
        text.contains("melforge_files_total{outcome=\"rejected\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("melforge_rejected_total{kind=\"unsupported\"} 1\n"),
        "{text}"
    );
    assert!(text.contains("melforge_bytes_read_total 1000\n"), "{text}");
    // Stopping joins the thread, which drops its hold on the pipeline.
    ep.stop();
    let p = Arc::into_inner(p).expect("the endpoint released the pipeline");
    p.close();
    p.join().unwrap();
    assert!(ureq::get(&url).call().is_err(), "stopped, yet answering");
}

#[test]
fn a_build_whose_metrics_port_is_taken_fails_naming_the_key() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let corpus = synth_corpus(4, 1);
    let out = tempfile::tempdir().unwrap();
    let mut cfg = config(1);
    cfg.metrics.listen = Some(addr);
    let e = build::build(corpus.path(), out.path(), &cfg, &build::Options::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!(
            "cannot serve metrics on {addr} (metrics.listen): "
        )),
        "{e}"
    );
}

#[test]
fn a_build_with_metrics_on_writes_the_same_rows() {
    // The endpoint holds the pipeline while the build runs; the build must
    // still join it and finish.
    let corpus = synth_corpus(6, 2);
    let out = tempfile::tempdir().unwrap();
    let mut cfg = config(1);
    cfg.metrics.listen = Some("127.0.0.1:0".parse().unwrap());
    let done = build::build(corpus.path(), out.path(), &cfg, &build::Options::default()).unwrap();
    assert_eq!(done.report.files_ok, 6);
}

#[test]
fn format_prometheus_is_only_for_stats() {
    let out = Command::new(env!("CARGO_BIN_EXE_melforge"))
        .args([
            "ctl",
            "status",
            "--format",
            "prometheus",
            "--socket",
            "/nonexistent.sock",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--format prometheus is only for `stats` (not `status`)"),
        "{err}"
    );
}

#[test]
fn piped_text_logs_have_no_escape_codes() {
    // Under journald or a pipe, text logs used to carry ANSI colour codes.
    let d = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_melforge"))
        .args(["synth", "--files", "1"])
        .arg(d.path().join("c"))
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("INFO") && err.contains("Wrote the synthetic corpus."),
        "{err}"
    );
    assert!(!err.contains('\x1b'), "escape codes in {err:?}");
}
