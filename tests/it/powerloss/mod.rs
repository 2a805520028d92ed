//! Power loss at every durability boundary: `build`, `merge` and `serve` run with
//! their output (and serve's state and drop dirs) on powerfs
//! (`testing/powerfs`), a FUSE file system that throws away everything not
//! fsynced when the harness pulls the plug.
//!
//! Each scenario runs once to count its durability boundaries (fsync,
//! fsyncdir, create, rename, unlink, ...), then once per crash point `k`: the
//! file system takes its crash image the moment boundary `k` completes, the
//! process is SIGKILLed, the image is mounted again, the invariants of what
//! survived are checked, melforge is restarted on it and the end state is
//! checked again. Point `total + 1` is "after the command exited", the check
//! that a reported success is durable.
//!
//! The default run takes an evenly spread subset of the points (the fast
//! subset in the test suite); `MELFORGE_POWERLOSS=all` takes every point,
//! `=full` every point with a torn crash too (scripts/powerloss-full). Needs root and /dev/fuse;
//! skipped with the reason printed elsewhere.

mod build;
mod serve;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use powerfs::{CrashMode, Model, PowerFs};

pub(super) const BIN: &str = env!("CARGO_BIN_EXE_melforge");

/// Whether powerfs can run here (prints why not; with
/// `MELFORGE_REQUIRE_POWERFS=1`, as CI sets where /dev/fuse exists, fails).
fn can_run(test: &str) -> bool {
    match powerfs::available() {
        Ok(()) => true,
        Err(why) if std::env::var("MELFORGE_REQUIRE_POWERFS").is_ok_and(|v| v == "1") => {
            panic!("{test}: MELFORGE_REQUIRE_POWERFS=1 but {why}")
        }
        Err(why) => {
            eprintln!("SKIPPED {test}: {why}");
            false
        }
    }
}

/// Whether every point was asked for (`MELFORGE_POWERLOSS=all`: whole
/// crashes; `full`: whole and torn crashes).
fn full() -> bool {
    std::env::var("MELFORGE_POWERLOSS").is_ok_and(|v| v == "full" || v == "all")
}

fn torn() -> bool {
    std::env::var("MELFORGE_POWERLOSS").is_ok_and(|v| v == "full")
}

/// The crash points to try out of `1..=total + 1`: all of them in a full run,
/// else `fast` of them spread evenly (always the first and the last).
fn points(total: u64, fast: u64) -> Vec<u64> {
    let n = total + 1;
    if full() || n <= fast {
        return (1..=n).collect();
    }
    let mut v: Vec<u64> = (0..fast).map(|i| 1 + i * (n - 1) / (fast - 1)).collect();
    v.dedup();
    v
}

/// The crash modes to try at each point.
fn modes(point: u64) -> Vec<CrashMode> {
    if torn() {
        vec![CrashMode::Whole, CrashMode::Torn { seed: point }]
    } else {
        vec![CrashMode::Whole]
    }
}

/// A mount point with powerfs mounted on it (or not, between a crash and the
/// remount).
struct Disk {
    // Fields drop in order: the file system is unmounted before the folder
    // holding its mount point is removed (the other way round the removal
    // fails on the busy mount point and leaves the folder behind).
    fs: Option<PowerFs>,
    dir: tempfile::TempDir,
}

impl Disk {
    /// A fresh mount of `model`.
    fn new(model: Model) -> Disk {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("mnt")).unwrap();
        let fs = PowerFs::mount(&dir.path().join("mnt"), model).unwrap();
        Disk { fs: Some(fs), dir }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    /// A place for logs and configs off the power-loss disk.
    fn side(&self) -> &Path {
        self.dir.path()
    }

    fn fs(&self) -> &PowerFs {
        self.fs.as_ref().expect("mounted")
    }

    /// Everything written so far made durable, boundaries counted from 0.
    fn settle(&self) {
        self.fs().with(Model::settle);
    }

    /// The power loss: the image frozen at the chosen point (or the crash of
    /// the current state), mounted again in place.
    fn power_loss(&mut self, mode: CrashMode) {
        let image = self.fs.take().expect("mounted").power_loss(mode);
        self.fs = Some(PowerFs::mount(&self.root(), image).unwrap());
    }

    /// The boundaries so far as "n what name" lines (for failure messages).
    fn trail(&self, around: u64) -> String {
        self.fs().with(|m| {
            m.boundaries()
                .iter()
                .filter(|b| b.n + 6 >= around && b.n <= around + 2)
                .map(|b| format!("  {} {} {}\n", b.n, b.what, b.name.to_string_lossy()))
                .collect()
        })
    }
}

/// Runs `cmd` until it exits, or until the file system has frozen its crash
/// image (then SIGKILLs it: the power went out). Returns the exit status
/// only if the command finished before the crash point.
fn run_until_power_loss(disk: &Disk, cmd: &mut Command) -> Option<ExitStatus> {
    let mut child: Child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if disk.fs().frozen() {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        assert!(Instant::now() < deadline, "{cmd:?} ran for 2 minutes");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// scripts/check_h5.py over `dir` (every `<split>.h5` opens with h5py and
/// matches the schema); `Err` with its output.
fn check_h5(dir: &Path) -> Result<(), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/check_h5.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(dir)
        .arg("--quiet")
        .output()
        .unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The `path` column of every `*.h5` in `dir` (not `.partial`), per file.
fn h5_paths(dir: &Path) -> BTreeMap<String, Vec<String>> {
    let mut m = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".h5") && !name.contains(".shard-") {
            m.insert(name, read_paths(&p));
        }
    }
    m
}

/// The `path` column of one file (through h5py's C library, as in the tests).
fn read_paths(p: &Path) -> Vec<String> {
    let file = hdf5::File::open(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    melforge::writer::strings::read(&file, "path").unwrap()
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Every file under `root` as (relative path, bytes), sorted.
fn files_of(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}
