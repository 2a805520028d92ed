//! The io_uring engine as `build` uses it: same output as the std engine, and
//! no per-file syscalls outside the ring.

use std::process::Command;

use crate::common::*;
use melforge::config::Engine;

/// Whether this kernel lets us use io_uring; prints the reason when not.
fn uring_usable() -> bool {
    match melforge::reader::uring::probe() {
        Ok(_) => true,
        Err(why) => {
            eprintln!("skipped: io_uring is not usable here: {why}");
            false
        }
    }
}

#[test]
fn uring_and_std_engines_write_identical_files() {
    if !uring_usable() {
        return;
    }
    let corpus = synth_corpus(60, 21);
    put(corpus.path(), "TESTING/LEAK/bad.wav", b"RIFF....WAVEjunk");
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let mut cfg = config(2);
    cfg.io.engine = Engine::Uring;
    cfg.io.fallback = false;
    let ua = build(corpus.path(), a.path(), &cfg);
    cfg.io.engine = Engine::Std;
    let sb = build(corpus.path(), b.path(), &cfg);
    assert_eq!(ua.engine, "uring");
    assert_eq!(sb.engine, "std");
    assert_eq!(ua.rejected, sb.rejected);
    assert_eq!(ua.report.files_ok, 60);
    for split in ["TRAINING", "VALIDATION", "TESTING"] {
        let name = format!("{split}.h5");
        assert_eq!(
            std::fs::read(a.path().join(&name)).unwrap(),
            std::fs::read(b.path().join(&name)).unwrap(),
            "{name} differs between the uring and std engines"
        );
    }
}

/// Runs `melforge build` on a fresh corpus of `files` clips under strace and
/// returns the trace.
fn strace_build(files: u64) -> String {
    let corpus = synth_corpus(files, 4);
    let out = tempfile::tempdir().unwrap();
    let log = out.path().join("strace.log");
    let status = Command::new("strace")
        .args([
            "-f",
            "-qq",
            "-e",
            "trace=openat,open,read,pread64,close,statx,newfstatat",
            "-o",
        ])
        .arg(&log)
        .arg(env!("CARGO_BIN_EXE_melforge"))
        .args(["--log-level", "warn", "build", "--out"])
        .arg(out.path().join("ds"))
        .arg(corpus.path())
        .status()
        .unwrap();
    assert!(status.success());
    let s = read_split(&out.path().join("ds/TRAINING.h5"));
    assert_eq!(s.path.len() as u64, files * 7 / 10);
    std::fs::read_to_string(&log).unwrap()
}

/// strace of a build: the WAV files are never read, stat'ed or closed by a
/// syscall of their own, and opened only by the bounded page-cache sample (that happens inside io_uring_enter), and the
/// number of read/close calls does not grow with the number of files.
#[test]
fn build_issues_no_per_file_open_read_close_syscalls() {
    if !uring_usable() {
        return;
    }
    if Command::new("strace").arg("-V").output().is_err() {
        eprintln!("skipped: strace is not installed (apt-get install strace)");
        return;
    }
    let count = |trace: &str, name: &str| {
        trace
            .lines()
            .filter(|l| l.contains(&format!(" {name}(")))
            .count() as i64
    };
    let small = strace_build(100);
    let large = strace_build(400);
    // The only WAV paths outside the ring are `io.direct = "auto"`'s page-cache
    // sample before the readers start (`reader::cache`): at most SAMPLE files,
    // each stat'ed and then opened non-blocking (`reader::open_regular`: a
    // FIFO or a device is refused by its type, never opened to block), then
    // `cachestat` and `close` on the descriptor; none of them a read.
    for trace in [&small, &large] {
        let wav_calls: Vec<&str> = trace.lines().filter(|l| l.contains(".wav")).collect();
        let not_sample: Vec<&&str> = wav_calls
            .iter()
            // strace splits a call another thread's syscall interrupts into
            // `… <unfinished ...>` and `<... openat resumed>` (the backend
            // probe runs on its own thread during the sample).
            .filter(|l| {
                let open = l.contains(" openat(AT_FDCWD, ")
                    && (l.contains("O_RDONLY|O_NONBLOCK|O_CLOEXEC)")
                        || l.contains("O_RDONLY|O_NONBLOCK|O_CLOEXEC <unfinished ...>"));
                let stat = l.contains(" statx(AT_FDCWD, ");
                !(open || stat)
            })
            .collect();
        assert!(
            not_sample.is_empty() && wav_calls.len() <= 2 * melforge::reader::cache::SAMPLE,
            "{} syscalls name a WAV file, {} of them not the cache sample's opens, e.g. {:?}",
            wav_calls.len(),
            not_sample.len(),
            &not_sample[..not_sample.len().min(3)]
        );
    }
    // 300 more files: per-file syscalls would add ≥ 300 of each.
    for name in ["read", "close", "openat"] {
        let (a, b) = (count(&small, name), count(&large, name));
        assert!(b - a < 60, "{name}: {a} calls for 100 files, {b} for 400");
    }
}
