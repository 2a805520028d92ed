//! Unit tests of `bench io`: percentiles, passes over a small corpus, and
//! per-file failures counted as errors.

use super::*;

#[test]
fn percentile_nearest_rank() {
    let v: Vec<u64> = (1..=100).collect();
    assert_eq!(percentile(&v, 50.0), Some(50));
    assert_eq!(percentile(&v, 99.0), Some(99));
    assert_eq!(percentile(&v, 100.0), Some(100));
    assert_eq!(percentile(&v, 0.1), Some(1));
    assert_eq!(percentile(&[7], 50.0), Some(7));
    assert_eq!(percentile(&[7], 99.0), Some(7));
    assert_eq!(percentile(&[1, 2], 50.0), Some(1));
    assert_eq!(percentile(&[1, 2], 51.0), Some(2));
    assert_eq!(percentile(&[], 50.0), None);
    let mut ns = vec![3000, 1000, 2000];
    assert_eq!(
        Latency::from_nanos(&mut ns),
        Some(Latency {
            p50_us: 2.0,
            p99_us: 3.0,
            max_us: 3.0
        })
    );
    assert_eq!(Latency::from_nanos(&mut []), None);
}

fn corpus(n: u64) -> (tempfile::TempDir, Corpus) {
    let d = tempfile::tempdir().unwrap();
    crate::synth::generate(d.path(), n, 1).unwrap();
    let c = collect(d.path(), None).unwrap();
    (d, c)
}

fn opts(engines: Vec<Engine>) -> Options {
    Options {
        caches: vec![Cache::Cold, Cache::Warm],
        direct: vec![true, false],
        engines,
        queue_depth: 8,
        limit: None,
        drop_caches: false,
        compare_fio: false,
    }
}

#[test]
fn cold_then_warm_reads_every_byte() {
    let (_d, c) = corpus(50);
    assert_eq!(c.files.len(), 50);
    let expected: u64 = c
        .files
        .iter()
        .map(|f| std::fs::metadata(&f.path).unwrap().len())
        .sum();
    assert_eq!(c.bytes, expected);
    let report = run(&c, &opts(vec![Engine::Uring, Engine::Psync]));
    let engines = if uring::available().is_ok() { 2 } else { 1 };
    assert_eq!(report.passes.len(), 4 * engines, "{:?}", report.warnings);
    for p in &report.passes {
        assert_eq!((p.files, p.errors), (50, 0), "{p:?}");
        assert_eq!(p.bytes, expected, "{p:?}");
        let l = p.latency.unwrap();
        assert!(l.p50_us <= l.p99_us && l.p99_us <= l.max_us, "{l:?}");
        assert!(p.files_per_s > 0.0);
    }
    let mut out = Vec::new();
    report.write_table(&mut out).unwrap();
    let table = String::from_utf8(out).unwrap();
    assert!(table.contains("cold") && table.contains("psync"), "{table}");
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["passes"][0]["files"], 50);
    assert!(json["machine"]["cores"].as_u64().unwrap() >= 1);
}

#[test]
fn vanished_and_replaced_files_are_errors() {
    let (_d, c) = corpus(20);
    std::fs::remove_file(&c.files[3].path).unwrap();
    // A directory where a file was: opens, but is not a regular file.
    std::fs::remove_file(&c.files[7].path).unwrap();
    std::fs::create_dir(&c.files[7].path).unwrap();
    let mut o = opts(vec![Engine::Uring, Engine::Psync]);
    o.caches = vec![Cache::Cold];
    let report = run(&c, &o);
    assert!(!report.passes.is_empty());
    for p in &report.passes {
        assert_eq!((p.files, p.errors), (18, 2), "{p:?}");
        assert!(p.first_error.as_deref().unwrap().contains("wav"), "{p:?}");
    }
    // Warming does not stop on them either.
    assert!(report.warnings.iter().all(|w| !w.contains("warming")));
}

#[test]
fn limit_and_empty_tree() {
    let (d, _) = corpus(10);
    let c = collect(d.path(), Some(4)).unwrap();
    assert_eq!((c.files.len(), c.total_files), (4, 10));
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(
        collect(empty.path(), None),
        Err(Error::NoFiles(_))
    ));
    assert!(matches!(
        collect(&empty.path().join("nope"), None),
        Err(Error::Scan { .. })
    ));
}

#[test]
fn direct_read_trims_and_detects() {
    let d = tempfile::tempdir().unwrap();
    let mut buf = psync::AlignedBuf::default();
    for len in [0usize, 1, 4095, 4096, 4097, 81964] {
        let p = d.path().join(format!("{len}.wav"));
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        match psync::read_direct(&p, &mut buf).unwrap() {
            // Refused (tmpfs): the buffered path is covered elsewhere.
            None => return,
            Some(n) => assert_eq!(n, len as u64),
        }
        assert_eq!(buf.window(len.div_ceil(4096) * 4096)[..len], data[..]);
    }
}

#[test]
fn fio_json_is_parsed() {
    let out = "fio: opendir added 2000 files\n{\"jobs\":[{\"error\":0,\"read\":{\
        \"io_bytes\":163840000,\"runtime\":160,\"clat_ns\":{\"max\":9000000,\
        \"percentile\":{\"50.000000\":2000000,\"99.000000\":5000000}}}}]}";
    let (p, found) = fio::parse(out, 2000, Cache::Cold, true, 32).unwrap();
    assert_eq!(found, Some(2000));
    assert_eq!((p.files, p.bytes, p.errors), (2000, 163_840_000, 0));
    assert!((p.files_per_s - 12_500.0).abs() < 1e-6);
    assert_eq!(p.latency.unwrap().p50_us, 2000.0);
    let (p, _) = fio::parse(out, 100, Cache::Cold, true, 32).unwrap();
    assert_eq!(p.files, 100);
    assert!(matches!(
        fio::parse("no json", 1, Cache::Warm, false, 1),
        Err(fio::Error::NoReport)
    ));
}

#[test]
fn fio_report_problems_name_what_is_missing() {
    let err = |out: &str| {
        fio::parse(out, 1, Cache::Warm, false, 1)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(err("no json"), "fio printed no JSON report");
    assert_eq!(err("{\"jobs\":[]}"), "fio's report has no jobs[0]");
    assert_eq!(err("{\"jobs\":[{}]}"), "fio's report has no jobs[0].read");
    assert_eq!(
        err("{\"jobs\":[{\"read\":{\"runtime\":1}}]}"),
        "no read.io_bytes"
    );
    assert_eq!(
        err("{\"jobs\":[{\"read\":{\"io_bytes\":1}}]}"),
        "no read.runtime"
    );
    assert!(err("{ nope").starts_with("cannot parse fio's JSON report: "));
    assert_eq!(
        fio::Error::NotInstalled.to_string(),
        "fio is not installed (not on PATH; on Debian: apt-get install fio)"
    );
}

#[test]
fn a_ring_failing_mid_pass_says_so() {
    let e = uring::Error::MidPass(std::io::Error::from_raw_os_error(libc::EIO));
    assert_eq!(
        e.to_string(),
        "the ring failed mid-pass: Input/output error (os error 5)"
    );
}
