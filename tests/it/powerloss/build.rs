//! Power loss during `build` and `merge` (output dir on powerfs, inputs on a
//! normal dir). Invariants at every crash point:
//! - nothing but the output dir exists on the disk (nothing else touched);
//! - every final file there (`<split>.h5`, `rejected.jsonl`, a merged file) is
//!   complete: the same rows/bytes as an uninterrupted run (no half file under
//!   a final name); `.partial` files may be left over;
//! - after the command exited 0, every final file is there (success is durable);
//! - the same command run again on what survived exits 0 and leaves exactly the
//!   reference files, passing scripts/check_h5.py.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use powerfs::{CrashMode, Model};

use super::{BIN, Disk, can_run, check_h5, h5_paths, modes, names, points, run_until_power_loss};

/// What an uninterrupted run leaves in the output dir.
#[derive(Debug, PartialEq)]
struct Reference {
    names: Vec<String>,
    paths: BTreeMap<String, Vec<String>>,
    rejected: Option<Vec<u8>>,
}

fn reference(out: &Path) -> Reference {
    Reference {
        names: names(out),
        paths: h5_paths(out),
        rejected: std::fs::read(out.join("rejected.jsonl")).ok(),
    }
}

/// A small corpus (3 splits, 4 labels, one file rejected) and its config.
fn corpus() -> (tempfile::TempDir, tempfile::TempDir) {
    let input = crate::common::synth_corpus(24, 21);
    crate::common::put(
        input.path(),
        "TRAINING/LEAK/broken.wav",
        b"RIFF????WAVEjunk",
    );
    let cfg = tempfile::tempdir().unwrap();
    std::fs::write(
        cfg.path().join("cfg.toml"),
        "[compute]\nbackend = \"cpu\"\nworkers = 1\n[output]\nchunk_files = 4\n",
    )
    .unwrap();
    (input, cfg)
}

/// `melforge ARGS [--config CFG/cfg.toml]`, its log in `log`.
fn melforge(cfg: Option<&Path>, log: &Path, args: &[&std::ffi::OsStr]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args);
    if let Some(cfg) = cfg {
        c.arg("--config").arg(cfg.join("cfg.toml"));
    }
    c.stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    c
}

/// One command explored: `setup` prepares the disk (then settled: durable),
/// `cmd` is the command under test, run with its output dir `out`.
struct Scenario<'a> {
    name: &'a str,
    setup: &'a dyn Fn(&Disk),
    cmd: &'a dyn Fn(&Disk) -> Command,
    /// Files the command must not change (checked after every crash).
    untouched: &'a [&'a str],
}

/// Crashes at `fast` points spread over the run (all in a full run); with
/// `fast == 0`, only after the command exited.
fn explore(sc: &Scenario<'_>, fast: u64) -> usize {
    let out = |d: &Disk| d.root().join("out");
    // Reference run: count the boundaries.
    let disk = Disk::new(Model::new());
    (sc.setup)(&disk);
    disk.settle();
    let before: BTreeMap<String, Vec<u8>> = sc
        .untouched
        .iter()
        .map(|n| (n.to_string(), std::fs::read(out(&disk).join(n)).unwrap()))
        .collect();
    let st = (sc.cmd)(&disk).status().unwrap();
    assert!(st.success(), "{}: reference run failed", sc.name);
    let total = disk.fs().with(|m| m.boundaries().len() as u64);
    let want = reference(&out(&disk));
    drop(disk);
    let mut tried = 0;
    let ks = if fast == 0 {
        vec![total + 1]
    } else {
        points(total, fast)
    };
    for k in ks {
        for mode in modes(k) {
            tried += 1;
            let mut disk = Disk::new(Model::new());
            (sc.setup)(&disk);
            disk.settle();
            disk.fs().freeze_at(k, mode);
            let st = run_until_power_loss(&disk, &mut (sc.cmd)(&disk));
            let trail = disk.trail(k);
            disk.power_loss(CrashMode::Whole);
            let at = format!(
                "{} crash point {k}/{total} ({mode:?}); last boundaries:\n{trail}",
                sc.name
            );
            check_survivors(&disk, &want, st.is_some_and(|s| s.success()), &at);
            for (n, bytes) in &before {
                let now = std::fs::read(out(&disk).join(n)).ok();
                assert!(now.as_ref() == Some(bytes), "{at}: {n} changed");
            }
            // Restart on what survived.
            let st = (sc.cmd)(&disk).status().unwrap();
            assert!(st.success(), "{at}: the rerun failed");
            let got = reference(&out(&disk));
            assert_eq!(got, want, "{at}: the rerun left other files");
            check_h5(&out(&disk)).unwrap_or_else(|e| panic!("{at}: check_h5: {e}"));
        }
    }
    eprintln!(
        "{}: {total} boundaries, {tried} crash points tried",
        sc.name
    );
    tried
}

/// The invariants right after the power loss (before any restart).
fn check_survivors(disk: &Disk, want: &Reference, exited_ok: bool, at: &str) {
    let out = disk.root().join("out");
    let root = names(&disk.root());
    assert!(
        root.iter().all(|n| n == "out"),
        "{at}: other files on the disk: {root:?}"
    );
    let have = names(&out);
    let finals: Vec<&String> = have.iter().filter(|n| !n.ends_with(".partial")).collect();
    for n in &finals {
        assert!(want.names.contains(n), "{at}: unexpected {n}");
        if n.ends_with(".h5") && !n.contains(".shard-") {
            let paths = super::read_paths(&out.join(n));
            assert_eq!(
                Some(&paths),
                want.paths.get(*n),
                "{at}: {n} is not complete"
            );
        }
    }
    if have.contains(&"rejected.jsonl".to_string()) {
        let got = std::fs::read(out.join("rejected.jsonl")).unwrap();
        assert_eq!(
            Some(got),
            want.rejected,
            "{at}: rejected.jsonl is not complete"
        );
    }
    if exited_ok {
        assert_eq!(
            have, want.names,
            "{at}: the command exited 0 but its files are not durable"
        );
    }
}

fn build_scenario(
    input: &Path,
    cfg: &Path,
) -> (impl Fn(&Disk) + use<>, impl Fn(&Disk) -> Command + use<>) {
    let (input, cfg) = (input.to_path_buf(), cfg.to_path_buf());
    let setup = |_: &Disk| {};
    let cmd = move |d: &Disk| {
        let out = d.root().join("out");
        melforge(
            Some(&cfg),
            &d.side().join("build.log"),
            &[
                "build".as_ref(),
                "--out".as_ref(),
                out.as_os_str(),
                input.as_os_str(),
            ],
        )
    };
    (setup, cmd)
}

/// Regression: `build` exited 0 with no fsync at all, so a power loss right
/// after it left an empty output dir (crash point "after exit").
#[test]
fn build_exit_0_means_its_files_survive_power_loss() {
    if !can_run("build_exit_0_means_its_files_survive_power_loss") {
        return;
    }
    let (input, cfg) = corpus();
    let (setup, cmd) = build_scenario(input.path(), cfg.path());
    let sc = Scenario {
        name: "build (after exit)",
        setup: &setup,
        cmd: &cmd,
        untouched: &[],
    };
    // The point after exit, once per crash mode (whole; torn too in a full run).
    assert_eq!(explore(&sc, 0), modes(0).len());
}

#[test]
fn build_survives_power_loss_at_every_point() {
    if !can_run("build_survives_power_loss_at_every_point") {
        return;
    }
    let (input, cfg) = corpus();
    let (setup, cmd) = build_scenario(input.path(), cfg.path());
    let sc = Scenario {
        name: "build",
        setup: &setup,
        cmd: &cmd,
        untouched: &[],
    };
    explore(&sc, 16);
}

/// `merge` (virtual and `--copy`) over two shards built beforehand.
#[test]
fn merge_survives_power_loss_at_every_point() {
    if can_run("merge_survives_power_loss_at_every_point") {
        explore_merge(10);
    }
}

/// Regression: `merge` renamed its files into place without fsyncing them or
/// the directory, so a power loss after it exited 0 lost every merged file.
#[test]
fn merge_exit_0_means_its_files_survive_power_loss() {
    if can_run("merge_exit_0_means_its_files_survive_power_loss") {
        explore_merge(0);
    }
}

fn explore_merge(fast: u64) {
    let (input, cfg) = corpus();
    let (inp, c) = (input.path().to_path_buf(), cfg.path().to_path_buf());
    let setup = move |d: &Disk| {
        let out = d.root().join("out");
        for k in ["0/2", "1/2"] {
            let st = melforge(
                Some(&c),
                &d.side().join("shard.log"),
                &[
                    "build".as_ref(),
                    "--shard".as_ref(),
                    k.as_ref(),
                    "--out".as_ref(),
                    out.as_os_str(),
                    inp.as_os_str(),
                ],
            )
            .status()
            .unwrap();
            assert!(st.success());
        }
    };
    let shards: Vec<String> = ["TRAINING", "VALIDATION", "TESTING", "rejected"]
        .iter()
        .flat_map(|s| {
            let ext = if *s == "rejected" { "jsonl" } else { "h5" };
            (0..2).map(move |k| format!("{s}.shard-{k}-of-2.{ext}"))
        })
        .collect();
    let shard_refs: Vec<&str> = shards.iter().map(String::as_str).collect();
    for copy in [false, true] {
        let cmd = move |d: &Disk| {
            let out = d.root().join("out");
            let mut args: Vec<&std::ffi::OsStr> = vec!["merge".as_ref(), out.as_os_str()];
            if copy {
                args.push("--copy".as_ref());
            }
            melforge(None, &d.side().join("merge.log"), &args)
        };
        let sc = Scenario {
            name: if copy { "merge --copy" } else { "merge" },
            setup: &setup,
            cmd: &cmd,
            untouched: &shard_refs,
        };
        explore(&sc, fast);
    }
}
