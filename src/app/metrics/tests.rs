//! The exposition's names, labels and histogram buckets.

use super::*;

fn snapshot() -> Snapshot {
    let mut clock = CommitClock::default();
    let t = Instant::now();
    clock.staged(t);
    clock.staged(t);
    clock.committed(0);
    assert_eq!(clock.journal(0).commits, 0, "an empty commit is none");
    clock.committed(2);
    Snapshot {
        backend: "cpu".into(),
        backend_reason: "auto: \"no GPU\", so cpu".into(),
        engine: "uring".into(),
        files_ok: 7,
        files_rejected: 2,
        rejected_by_kind: [(RejectKind::Malformed, 2)].into_iter().collect(),
        bytes_read: 4096,
        busy_s: BusySeconds {
            read: 0.5,
            decode: 0.25,
            mel: 1.5,
            write: 0.125,
        },
        serial: vec![SerialStage {
            stage: "writer".into(),
            cpu_s: 0.75,
            files: 9,
            cpu_us_per_file: 83333.3,
        }],
        rings: vec![RingDepth {
            name: "jobs".into(),
            depth: 3,
            capacity: 64,
        }],
        in_flight: 4,
        queued: 1,
        intake: Some(Intake {
            capacity: 16,
            deferred: 3,
            watch_dropped: 9,
        }),
        rows: [("TRAINING".to_string(), 7)].into_iter().collect(),
        journal: Some(clock.journal(5)),
        degraded: false,
    }
}

fn line<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{text}"))
}

#[test]
fn every_contract_metric_is_rendered_with_its_labels() {
    let text = render(&snapshot());
    assert_eq!(
        line(&text, "melforge_files_total{outcome=\"ok\"}"),
        "melforge_files_total{outcome=\"ok\"} 7"
    );
    assert!(
        text.contains("melforge_files_total{outcome=\"rejected\"} 2\n"),
        "{text}"
    );
    assert!(
        text.contains("melforge_rejected_total{kind=\"malformed\"} 2\n"),
        "{text}"
    );
    // Kinds with none are still listed (rate() needs the zero).
    let kinds = text
        .lines()
        .filter(|l| l.starts_with("melforge_rejected_total{"))
        .count();
    assert_eq!(kinds, RejectKind::ALL.len());
    assert!(text.contains("melforge_bytes_read_total 4096\n"), "{text}");
    assert!(
        text.contains("melforge_stage_busy_seconds_total{stage=\"mel\"} 1.5\n"),
        "{text}"
    );
    assert!(
        text.contains("melforge_serial_stage_cpu_seconds_total{stage=\"writer\"} 0.75\n"),
        "{text}"
    );
    assert!(
        text.contains("melforge_ring_depth{ring=\"jobs\"} 3\n"),
        "{text}"
    );
    assert!(
        text.contains("melforge_ring_capacity{ring=\"jobs\"} 64\n"),
        "{text}"
    );
    assert!(text.contains("melforge_in_flight_files 4\n"), "{text}");
    assert!(text.contains("melforge_queued_files 1\n"), "{text}");
    assert!(text.contains("melforge_intake_queued_files 1\n"), "{text}");
    assert!(
        text.contains("melforge_intake_capacity_files 16\n"),
        "{text}"
    );
    assert!(
        text.contains("melforge_intake_deferred_files_total 3\n"),
        "{text}"
    );
    assert!(
        text.contains("melforge_watch_dropped_events_total 9\n"),
        "{text}"
    );
    assert!(
        text.contains("melforge_rows{split=\"TRAINING\"} 7\n"),
        "{text}"
    );
    assert!(
        text.contains("melforge_journal_commits_total 1\n"),
        "{text}"
    );
    assert!(text.contains("melforge_journal_staged_files 5\n"), "{text}");
    assert!(
        text.contains("# TYPE melforge_drop_to_commit_seconds histogram\n"),
        "{text}"
    );
    assert!(
        text.contains("melforge_drop_to_commit_seconds_count 2\n"),
        "{text}"
    );
    assert!(
        text.contains("melforge_drop_to_commit_seconds_bucket{le=\"+Inf\"} 2\n"),
        "{text}"
    );
    // The reason's quotes are escaped, not cutting the label short.
    let info = line(&text, "melforge_backend_info{");
    assert!(
        info.contains(r#"reason="auto: \"no GPU\", so cpu""#),
        "{info}"
    );
    assert!(
        info.contains("backend=\"cpu\"") && info.ends_with(" 1"),
        "{info}"
    );
    assert!(text.ends_with("# EOF\n"));
}

#[test]
fn histogram_buckets_are_cumulative_at_their_bounds() {
    let mut h = Histogram::default();
    for s in [0.005, 0.01, 0.3, 0.3, 100.0] {
        h.observe(s);
    }
    let mut snap = snapshot();
    snap.journal.as_mut().unwrap().drop_to_commit = h;
    let text = render(&snap);
    // 0.01 falls in the le="0.01" bucket (upper bounds are inclusive).
    for (le, n) in [
        ("0.01", 2),
        ("0.25", 2),
        ("0.5", 4),
        ("60.0", 4),
        ("+Inf", 5),
    ] {
        let want = format!("melforge_drop_to_commit_seconds_bucket{{le=\"{le}\"}} {n}");
        assert!(text.contains(&format!("{want}\n")), "{want} in:\n{text}");
    }
    assert!(
        text.contains("melforge_drop_to_commit_seconds_sum 100.615\n"),
        "{text}"
    );
}

#[test]
fn build_snapshots_have_no_journal_metrics() {
    let mut snap = snapshot();
    snap.journal = None;
    let text = render(&snap);
    assert!(!text.contains("melforge_journal"), "{text}");
    assert!(!text.contains("melforge_drop_to_commit"), "{text}");
    assert!(text.contains("melforge_files_total"), "{text}");
}
