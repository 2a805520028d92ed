//! Ring-engine tests. Each needs a usable io_uring: [`usable`] probes first and
//! the test is skipped, with the reason printed, where the kernel (or a
//! seccomp filter) refuses it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::*;
use crate::reader::FileBytes;
use crate::reader::arena::Arena;

mod ranges;

fn usable(test: &str) -> bool {
    match probe() {
        Ok(_) => true,
        Err(why) => {
            eprintln!("skipping {test}: needs io_uring: {why}");
            false
        }
    }
}

/// A temp dir on the real disk (under target/, since /tmp may be tmpfs).
fn disk_dir() -> tempfile::TempDir {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/uring-tests");
    std::fs::create_dir_all(&base).unwrap();
    tempfile::tempdir_in(base).unwrap()
}

fn is_tmpfs(p: &Path) -> bool {
    std::process::Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(p)
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"tmpfs")
}

/// Deterministic, size-dependent content.
fn content(size: usize, seed: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed * 7) % 251) as u8)
        .collect()
}

fn write_files(dir: &Path, sizes: &[usize]) -> Vec<PathBuf> {
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let p = dir.join(format!("f{i:04}.wav"));
            std::fs::write(&p, content(n, i)).unwrap();
            p
        })
        .collect()
}

type Outcomes = HashMap<usize, Result<Vec<u8>, String>>;

/// Runs one engine over `paths`, copying each file out (so extents recycle).
fn run(opts: &UringOptions, arena_bytes: u64, paths: &[PathBuf]) -> (Outcomes, RunStats) {
    let arena = Arena::new(arena_bytes, 1).unwrap();
    let mut engine = UringEngine::new(opts, arena.part(0)).unwrap();
    let r = read_all(&mut engine, paths);
    assert_eq!(arena.bad_releases(), 0);
    r
}

fn opts(queue_depth: usize, direct: bool) -> UringOptions {
    UringOptions {
        queue_depth,
        direct,
        max_file_bytes: 64 << 20,
    }
}

const SIZES: &[usize] = &[
    0, 1, 2, 511, 512, 513, 4095, 4096, 4097, 8191, 8192, 12_345, 65_536, 100_000, 100_001,
    262_147, 1_000_003,
];

fn check_exact(got: &Outcomes, sizes: &[usize]) {
    assert_eq!(got.len(), sizes.len());
    for (i, &n) in sizes.iter().enumerate() {
        let bytes = got[&i]
            .as_ref()
            .unwrap_or_else(|e| panic!("file {i} ({n} B): {e}"));
        assert!(*bytes == content(n, i), "file {i} ({n} B) differs");
    }
}

/// Runs `engine` over `paths` with a consumer thread that holds each file's
/// bytes for `hold`, checks them against `want(i)` and drops them, so the
/// engine has to wait for releases; `each` runs at every delivery.
fn run_with_slow_consumer(
    engine: &mut UringEngine,
    paths: &[PathBuf],
    hold: Duration,
    want: fn(usize) -> Vec<u8>,
    mut each: impl FnMut(),
) -> RunStats {
    let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, FileBytes)>(64);
    let consumer = std::thread::spawn(move || {
        let mut n = 0;
        for (i, b) in rx {
            std::thread::sleep(hold);
            assert!(*b == want(i), "file {i}");
            n += 1;
        }
        n
    });
    let mut it = paths.iter().enumerate();
    let stats = engine
        .run(
            || it.next().map(|(i, p)| (i, p.as_path())),
            |i, r, _| {
                each();
                tx.send((i, r.unwrap())).is_ok()
            },
        )
        .unwrap();
    drop(tx);
    assert_eq!(consumer.join().unwrap(), paths.len());
    stats
}
#[test]
fn reads_exact_bytes_with_o_direct_on_disk() {
    if !usable("reads_exact_bytes_with_o_direct_on_disk") {
        return;
    }
    let d = disk_dir();
    let sizes: Vec<usize> = SIZES
        .iter()
        .copied()
        .cycle()
        .take(3 * SIZES.len())
        .collect();
    let paths = write_files(d.path(), &sizes);
    for depth in [1, 4, 64] {
        let (got, stats) = run(&opts(depth, true), 16 << 20, &paths);
        check_exact(&got, &sizes);
        assert_eq!(stats.files_ok, sizes.len() as u64);
        assert_eq!(stats.bytes, sizes.iter().sum::<usize>() as u64);
        if !is_tmpfs(d.path()) {
            assert_eq!(
                stats.buffered_fallbacks, 0,
                "O_DIRECT refused on disk: {stats:?}"
            );
        }
    }
    let (got, stats) = run(&opts(8, false), 16 << 20, &paths);
    check_exact(&got, &sizes);
    assert_eq!(stats.buffered_fallbacks, 0);
}

#[test]
fn tmpfs_files_are_read_exactly() {
    if !usable("tmpfs_files_are_read_exactly") {
        return;
    }
    let shm = Path::new("/dev/shm");
    if !is_tmpfs(shm) {
        eprintln!("skipping tmpfs_files_are_read_exactly: /dev/shm is not tmpfs here");
        return;
    }
    let d = tempfile::tempdir_in(shm).unwrap();
    let paths = write_files(d.path(), SIZES);
    let (got, stats) = run(&opts(8, true), 8 << 20, &paths);
    check_exact(&got, SIZES);
    // Before Linux 6.6 tmpfs refuses O_DIRECT (EINVAL): every file falls back.
    // Later kernels accept it (the read is buffered inside tmpfs anyway).
    eprintln!(
        "tmpfs: {} of {} files fell back to buffered reads",
        stats.buffered_fallbacks,
        SIZES.len()
    );
    assert!(stats.buffered_fallbacks == 0 || stats.buffered_fallbacks == SIZES.len() as u64);
}

#[test]
fn o_direct_refused_falls_back_to_buffered() {
    if !usable("o_direct_refused_falls_back_to_buffered") {
        return;
    }
    // procfs refuses O_DIRECT (EINVAL) on every kernel; its files are regular
    // with st_size 0, so the fallback delivers an empty file.
    let p = PathBuf::from("/proc/self/status");
    let (got, stats) = run(&opts(4, true), 1 << 20, std::slice::from_ref(&p));
    assert_eq!(got[&0].as_deref(), Ok(&[][..]));
    assert_eq!(stats.buffered_fallbacks, 1, "{stats:?}");
}

#[test]
fn short_read_resumes_then_reports_the_shrink() {
    if !usable("short_read_resumes_then_reports_the_shrink") {
        return;
    }
    // sysfs attributes claim 4096 bytes but hold a short line: the first read
    // is short, the engine re-opens and resumes, the resumed read finds EOF.
    let p = PathBuf::from("/sys/kernel/mm/transparent_hugepage/enabled");
    let Ok(text) = std::fs::read(&p) else {
        eprintln!(
            "skipping short_read_resumes_then_reports_the_shrink: no {}",
            p.display()
        );
        return;
    };
    let (got, stats) = run(&opts(2, true), 1 << 20, std::slice::from_ref(&p));
    let e = got[&0].as_ref().unwrap_err();
    assert_eq!(
        e,
        &format!(
            "file changed size while being read: 4096 bytes at open, {} read",
            text.len()
        )
    );
    assert_eq!(stats.short_reads, 1, "{stats:?}");
}

#[test]
fn failures_are_rejections_with_reasons() {
    if !usable("failures_are_rejections_with_reasons") {
        return;
    }
    let d = disk_dir();
    let good = write_files(d.path(), &[1000, 2000]);
    let vanished = d.path().join("vanished.wav");
    std::fs::write(&vanished, b"x").unwrap();
    let big = d.path().join("big.wav");
    std::fs::write(&big, vec![1u8; 5001]).unwrap();
    // Tests run as root here, so chmod 000 would not deny anything: unreadable
    // paths are made with a non-directory in the middle (ENOTDIR) and a
    // symbolic link, which the reader never follows (O_NOFOLLOW: ELOOP).
    let through_file = good[0].join("child.wav");
    let dangling = d.path().join("link.wav");
    std::os::unix::fs::symlink(&good[1], &dangling).unwrap();
    let nul = PathBuf::from("a\0b");
    let paths = vec![
        good[0].clone(),
        vanished.clone(),
        big,
        through_file,
        dangling,
        d.path().to_path_buf(),
        nul,
        good[1].clone(),
    ];
    std::fs::remove_file(&vanished).unwrap(); // after the job list was built
    let o = UringOptions {
        max_file_bytes: 5000,
        ..opts(4, true)
    };
    let (got, stats) = run(&o, 1 << 20, &paths);
    let reason = |i: usize| got[&i].as_ref().unwrap_err().as_str();
    assert_eq!(got[&0].as_ref().unwrap(), &content(1000, 0));
    assert_eq!(
        reason(1),
        "cannot open: No such file or directory (os error 2)"
    );
    assert_eq!(
        reason(2),
        "file is 5001 bytes, larger than io.max_file_bytes = 5000"
    );
    assert_eq!(reason(3), "cannot open: Not a directory (os error 20)");
    assert_eq!(
        reason(4),
        "cannot open: Too many levels of symbolic links (os error 40)"
    );
    assert_eq!(
        reason(5),
        "not a regular file but a directory; only regular files are read"
    );
    assert!(reason(6).starts_with("cannot open: "), "{}", reason(6));
    assert_eq!(got[&7].as_ref().unwrap(), &content(2000, 1));
    assert_eq!((stats.files_ok, stats.files_rejected), (2, 6));
}

#[test]
fn o_noatime_refused_is_retried_without() {
    if !usable("o_noatime_refused_is_retried_without") {
        return;
    }
    // O_NOATIME needs file ownership (or CAP_FOWNER). These tests run as root,
    // so one thread switches itself — only itself: the raw syscall, unlike
    // libc's setresuid, changes the calling thread's credentials alone — to
    // uid 65534 and reads root's world-readable files.
    // Uid 65534 must be able to reach the files: the checkout's own parents
    // may not be searchable by others (a clone under `mktemp -d`), /var/tmp
    // (on disk, mode 1777) is.
    let d = match tempfile::tempdir_in("/var/tmp") {
        Ok(d) => d,
        Err(_) => disk_dir(),
    };
    std::fs::set_permissions(
        d.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let sizes = [1, 5000, 70_000];
    let paths = write_files(d.path(), &sizes);
    let h = std::thread::spawn(move || {
        // SAFETY: setresuid has no memory arguments; it affects this thread.
        let rc = unsafe { libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534) };
        if rc != 0 {
            return Err("cannot switch uid");
        }
        if std::fs::metadata(&paths[0]).is_err() {
            return Err(
                "uid 65534 cannot reach the test files (a parent directory is not searchable)",
            );
        }
        Ok(run(&opts(4, true), 1 << 20, &paths))
    });
    let (got, stats) = match h.join().unwrap() {
        Ok(r) => r,
        Err(why) => {
            eprintln!("skipping o_noatime_refused_is_retried_without: {why}");
            return;
        }
    };
    check_exact(&got, &sizes);
    assert_eq!(stats.noatime_retries, sizes.len() as u64, "{stats:?}");
}

#[test]
fn file_larger_than_the_arena_share_is_read_through_a_spill() {
    if !usable("file_larger_than_the_arena_share_is_read_through_a_spill") {
        return;
    }
    let d = disk_dir();
    // Before spill extents this file was rejected ("file needs … bytes of read
    // arena"): a small arena must not cap the file size, io.max_file_bytes does.
    let sizes = [100_000, 10, 20_000, 4096];
    let paths = write_files(d.path(), &sizes);
    let (got, stats) = run(&opts(2, true), 64 << 10, &paths);
    check_exact(&got, &sizes);
    // 100_000 > the 64 KiB share and 20_000 > a quarter of it; 10 and 4096 fit.
    assert_eq!(stats.spills, 2, "{stats:?}");
}

#[test]
fn spills_held_by_a_slow_consumer_stay_within_the_budget() {
    if !usable("spills_held_by_a_slow_consumer_stay_within_the_budget") {
        return;
    }
    let d = disk_dir();
    let sizes: Vec<usize> = (0..24).map(|i| 50_000 + i * 1000).collect();
    let paths = write_files(d.path(), &sizes);
    // Budget 128 KiB: at most two of these (52–76 KiB, page-rounded) at once.
    let arena = Arena::with_spill(64 << 10, 1, 128 << 10).unwrap();
    let part = arena.part(0);
    let mut engine = UringEngine::new(&opts(8, true), arena.part(0)).unwrap();
    let mut peak = 0;
    let stats = run_with_slow_consumer(
        &mut engine,
        &paths,
        Duration::from_millis(2),
        |i| content(50_000 + i * 1000, i),
        || peak = peak.max(part.spill_live()),
    );
    assert_eq!(stats.spills, sizes.len() as u64);
    assert!(peak > 0 && peak <= 128 << 10, "peak spill bytes {peak}");
    assert_eq!(part.spill_live(), 0, "every spill returned its budget");
    assert_eq!(arena.bad_releases(), 0);
}

/// The partition is registered once its allocator has gone round it: a run
/// that fits in one lap reads plain (nothing pinned before the first read),
/// and the reads after the lap go READ_FIXED; the bytes are exact either way,
/// buffered and O_DIRECT. The consumer holds each file a while, as compute
/// does, so extents pile up in the ring.
#[test]
fn the_arena_is_registered_after_its_first_lap_and_reads_go_fixed_from_then_on() {
    if !usable("the_arena_is_registered_after_its_first_lap_and_reads_go_fixed_from_then_on") {
        return;
    }
    let d = disk_dir();
    let size = |i: usize| 1 + (i * 7919) % 20_000;
    let paths = write_files(d.path(), &(0..60).map(size).collect::<Vec<_>>());
    let want = |i: usize| content(1 + (i * 7919) % 20_000, i);
    let hold = Duration::from_micros(200);
    for direct in [false, true] {
        // 8 MiB: the 60 files (~600 KiB) fit without wrapping.
        let arena = Arena::new(8 << 20, 1).unwrap();
        let mut engine = UringEngine::new(&opts(8, direct), arena.part(0)).unwrap();
        let stats = run_with_slow_consumer(&mut engine, &paths, hold, want, || {});
        assert!(!engine.buffers_registered(), "direct {direct}");
        assert_eq!(stats.fixed_reads, 0, "direct {direct}: {stats:?}");

        // 96 KiB: the ring wraps within the first dozen files.
        let arena = Arena::new(96 << 10, 1).unwrap();
        let mut engine = UringEngine::new(&opts(8, direct), arena.part(0)).unwrap();
        let stats = run_with_slow_consumer(&mut engine, &paths, hold, want, || {});
        assert!(engine.buffers_registered(), "direct {direct}");
        assert!(
            stats.fixed_reads > 0 && stats.fixed_reads < paths.len() as u64,
            "direct {direct}: first lap plain, then fixed: {stats:?}"
        );
        // A second run on the same engine reads fixed from the start.
        let stats = run_with_slow_consumer(&mut engine, &paths, hold, want, || {});
        assert_eq!(stats.fixed_reads, paths.len() as u64, "direct {direct}");
        assert_eq!(arena.bad_releases(), 0);
    }
}

/// Reads `paths` with `engine`, copying each file out (so extents recycle).
fn read_all(engine: &mut UringEngine, paths: &[PathBuf]) -> (Outcomes, RunStats) {
    let mut it = paths.iter().enumerate();
    let mut got = HashMap::new();
    let stats = engine
        .run(
            || it.next().map(|(i, p)| (i, p.as_path())),
            |i, r, _| {
                let prev = got.insert(i, r.map(|b| b.to_vec()).map_err(|e| e.to_string()));
                assert!(prev.is_none(), "job {i} delivered twice");
                true
            },
        )
        .unwrap();
    (got, stats)
}

#[test]
fn tiny_arena_recycles_extents() {
    if !usable("tiny_arena_recycles_extents") {
        return;
    }
    let d = disk_dir();
    // 200 files, ~4 MiB in all, through a 160 KiB arena (biggest file ~40 KiB).
    let sizes: Vec<usize> = (0..200).map(|i| 1 + (i * 7919) % 40_000).collect();
    let paths = write_files(d.path(), &sizes);
    for depth in [1, 3, 32] {
        let (got, _) = run(&opts(depth, true), 160 << 10, &paths);
        check_exact(&got, &sizes);
    }
    // Extents held by a slow consumer on another thread: the engine has to
    // wait for releases (with nothing in flight) and still finishes.
    let arena = Arena::new(160 << 10, 1).unwrap();
    let mut engine = UringEngine::new(&opts(8, true), arena.part(0)).unwrap();
    let stats = run_with_slow_consumer(
        &mut engine,
        &paths,
        Duration::from_micros(300),
        |i| content(1 + (i * 7919) % 40_000, i),
        || {},
    );
    eprintln!("slow consumer: {} waits for arena space", stats.arena_waits);
    assert_eq!(arena.bad_releases(), 0);
}

/// A consumer that keeps every file's bytes (a failed GPU stage whose
/// buffers leaked) and then goes away: the files waiting for arena room
/// are dropped once `closed` says so, instead of waited for for ever.
#[test]
fn files_waiting_for_room_are_dropped_once_the_consumer_is_gone() {
    if !usable("files_waiting_for_room_are_dropped_once_the_consumer_is_gone") {
        return;
    }
    let d = disk_dir();
    let paths = write_files(d.path(), &[30_000; 40]);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let arena = Arena::new(256 << 10, 1).unwrap();
        let mut engine = UringEngine::new(&opts(16, true), arena.part(0)).unwrap();
        let mut it = paths.iter().enumerate();
        let mut kept: Vec<FileBytes> = Vec::new();
        let gone = std::cell::Cell::new(false);
        let stats = engine.run_stream_until(
            || match it.next() {
                Some((i, p)) => Next::Job(i, p.as_path()),
                None => Next::End,
            },
            |_, r, _| {
                kept.push(r.unwrap());
                gone.set(kept.len() >= 4);
                true
            },
            &|| gone.get(),
        );
        let _ = tx.send((stats.map(|s| s.files_ok), kept.len()));
    });
    let (files_ok, kept) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the engine waited for room that could never come");
    assert!(
        files_ok.unwrap() < 40,
        "the arena holds only a few of the files"
    );
    assert!(kept >= 4, "{kept}");
}

#[test]
fn stopping_early_drains_and_the_engine_runs_again() {
    if !usable("stopping_early_drains_and_the_engine_runs_again") {
        return;
    }
    let d = disk_dir();
    let sizes = vec![30_000; 50];
    let paths = write_files(d.path(), &sizes);
    let arena = Arena::new(1 << 20, 1).unwrap();
    let mut engine = UringEngine::new(&opts(16, true), arena.part(0)).unwrap();
    let mut it = paths.iter().enumerate();
    let mut n = 0;
    engine
        .run(
            || it.next().map(|(i, p)| (i, p.as_path())),
            |_, r, _| {
                r.unwrap();
                n += 1;
                n < 3
            },
        )
        .unwrap();
    assert_eq!(n, 3, "nothing delivered after stop");
    // Everything was drained: the whole arena is free again.
    assert!(arena.part(0).alloc(1 << 20, 4096).is_some());
    let mut it = paths.iter().enumerate();
    let mut all = 0;
    let stats = engine
        .run(
            || it.next().map(|(i, p)| (i, p.as_path())),
            |i, r, _| {
                assert!(*r.unwrap() == content(30_000, i));
                all += 1;
                true
            },
        )
        .unwrap();
    assert_eq!((all, stats.files_ok), (50, 50));
}

#[test]
fn probe_reports_the_kernel() {
    match probe() {
        Ok(r) => assert!(!r.kernel.is_empty()),
        Err(why) => eprintln!("io_uring unusable here: {why}"),
    }
}

/// Throughput over an existing tree: `MELFORGE_URING_DIR=<dir> cargo test
/// --release --lib uring::tests::throughput -- --ignored --nocapture`
/// (optionally MELFORGE_URING_DEPTH, MELFORGE_URING_DIRECT=0). Not a timed
/// test: it prints files/s for a quick look and for strace.
#[test]
#[ignore]
fn throughput() {
    let Ok(dir) = std::env::var("MELFORGE_URING_DIR") else {
        eprintln!("set MELFORGE_URING_DIR");
        return;
    };
    let depth = std::env::var("MELFORGE_URING_DEPTH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let direct = std::env::var("MELFORGE_URING_DIRECT").as_deref() != Ok("0");
    let mut paths = Vec::new();
    let mut stack = vec![PathBuf::from(dir)];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                paths.push(e.path());
            }
        }
    }
    paths.sort();
    let arena = Arena::new(256 << 20, 1).unwrap();
    let mut engine = UringEngine::new(&opts(depth, direct), arena.part(0)).unwrap();
    let t = Instant::now();
    let mut it = paths.iter().enumerate();
    let stats = engine
        .run(
            || it.next().map(|(i, p)| (i, p.as_path())),
            |_, r, _| r.is_ok(),
        )
        .unwrap();
    let s = t.elapsed().as_secs_f64();
    eprintln!(
        "{} files, {:.1} MiB in {s:.3} s: {:.0} files/s, {:.0} MiB/s (depth {depth}, direct {direct}) {stats:?}",
        paths.len(),
        stats.bytes as f64 / (1 << 20) as f64,
        paths.len() as f64 / s,
        stats.bytes as f64 / (1 << 20) as f64 / s
    );
}
