//! Ctrl-C and SIGTERM during `build` and `merge` (`app::interrupt`): exit 130,
//! one line "interrupted after N of M files; nothing written", and nothing
//! left in the output directory — no `.partial`, no finished split file, no
//! rejection log — wherever the signal lands. Most points are hit through
//! the `test-hooks` checkpoint (the process signals itself at a named point),
//! one through a real `kill` from outside while the build runs.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

fn melforge() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_melforge"));
    c.env_remove("MELFORGE_TEST_INTERRUPT_AT");
    c
}

/// The names in `dir` (empty if it does not exist), sorted.
fn names(dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<String> = rd
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Asserts a stopped command: status 130, the one line (last on stderr)
/// naming `unit` with N ≤ M = `total`; returns N.
fn assert_stopped(o: &Output, total: u64, unit: &str) -> u64 {
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "stderr: {stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    let rest = last
        .strip_prefix("interrupted after ")
        .and_then(|r| r.strip_suffix(&format!(" {unit}; nothing written")))
        .unwrap_or_else(|| panic!("not the interrupted line: {last:?}"));
    let (n, m) = rest.split_once(" of ").expect("N of M");
    let (n, m): (u64, u64) = (n.parse().unwrap(), m.parse().unwrap());
    assert_eq!(m, total, "{last}");
    assert!(n <= m, "{last}");
    assert_eq!(
        stderr.matches("interrupted after").count(),
        1,
        "one line: {stderr}"
    );
    assert!(!stderr.contains("error:"), "not an error: {stderr}");
    n
}

fn build_stopped_at(point: &str, input: &Path, out: &Path) -> Output {
    melforge()
        .env("MELFORGE_TEST_INTERRUPT_AT", point)
        .args(["build", "--out"])
        .arg(out)
        .arg(input)
        .output()
        .unwrap()
}

#[test]
fn sigint_after_the_walk_mid_run_and_after_finish_leaves_nothing() {
    let corpus = synth_corpus(120, 3);
    for (point, done_at_most) in [("walked", 0), ("writing", 120), ("finished", 120)] {
        let out = tempfile::tempdir().unwrap();
        let o = build_stopped_at(point, corpus.path(), out.path());
        let n = assert_stopped(&o, 120, "files");
        assert!(n <= done_at_most, "{point}: {n}");
        if point == "finished" {
            // The writer had finished every file: all were counted.
            assert_eq!(n, 120, "{point}");
        }
        assert_eq!(
            names(out.path()),
            Vec::<String>::new(),
            "{point}: left behind"
        );
    }
}

#[test]
fn interrupted_build_with_json_says_so_on_stdout() {
    let corpus = synth_corpus(20, 4);
    let out = tempfile::tempdir().unwrap();
    let o = melforge()
        .env("MELFORGE_TEST_INTERRUPT_AT", "writing")
        .args(["build", "--json", "--out"])
        .arg(out.path())
        .arg(corpus.path())
        .output()
        .unwrap();
    assert_stopped(&o, 20, "files");
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["interrupted"], true);
    assert!(
        doc["error"]
            .as_str()
            .unwrap()
            .starts_with("interrupted after")
    );
}

/// The real thing: SIGINT and SIGTERM from another process once the build's
/// `.partial` files exist (the writer has started), as `timeout -s INT` or
/// Ctrl-C sends it.
#[test]
fn sigint_and_sigterm_from_outside_mid_build_delete_the_partial_files() {
    let corpus = synth_corpus(3000, 9);
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let out = tempfile::tempdir().unwrap();
        let mut child = melforge()
            .args(["build", "--out"])
            .arg(out.path())
            .arg(corpus.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t = Instant::now();
        while !names(out.path()).iter().any(|n| n.ends_with(".partial")) {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "no .partial appeared"
            );
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        // SAFETY: kill touches no memory; the pid is our own child, which
        // has not been waited for, so it cannot have been reused.
        let rc = unsafe { libc::kill(child.id() as i32, sig) };
        assert_eq!(rc, 0);
        let o = child.wait_with_output().unwrap();
        if o.status.code() == Some(0) {
            // The build won the race (it finished before the signal landed):
            // then its files must be complete, which other tests check.
            eprintln!("signal {sig} arrived after the build finished; nothing to check");
            continue;
        }
        assert_stopped(&o, 3000, "files");
        assert_eq!(names(out.path()), Vec::<String>::new(), "signal {sig}");
    }
}

#[test]
fn sigint_during_merge_deletes_what_it_wrote_and_keeps_the_shards() {
    let corpus = synth_corpus(30, 6);
    let out = tempfile::tempdir().unwrap();
    for k in 0..2 {
        let o = melforge()
            .args(["build", "--shard", &format!("{k}/2"), "--out"])
            .arg(out.path())
            .arg(corpus.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let shards = names(out.path());
    for copy in [false, true] {
        let mut c = melforge();
        c.env("MELFORGE_TEST_INTERRUPT_AT", "merged-split")
            .arg("merge")
            .arg(out.path());
        if copy {
            c.arg("--copy");
        }
        let o = c.output().unwrap();
        // Three splits and the rejection log; stopped after the first split.
        let n = assert_stopped(&o, 4, "files");
        assert_eq!(n, 1);
        assert_eq!(names(out.path()), shards, "copy={copy}");
    }
}
