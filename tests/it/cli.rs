//! The `melforge` binary as users run it: exit codes, messages, JSON.

use std::process::Command;

use crate::common::*;

fn melforge() -> Command {
    Command::new(env!("CARGO_BIN_EXE_melforge"))
}

/// `melforge build FLAG --out OUT INPUT`, run to completion.
fn run_build(flag: &str, input: &std::path::Path, out: &std::path::Path) -> std::process::Output {
    melforge()
        .args(["build", flag, "--out"])
        .arg(out)
        .arg(input)
        .output()
        .unwrap()
}

/// `build --json` that must succeed; its JSON document.
fn built_json(input: &std::path::Path, out: &std::path::Path) -> serde_json::Value {
    let o = run_build("--json", input, out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A reader that went away (`melforge … | head`) ends the command quietly
/// with 141, as SIGPIPE ends a Unix filter: no panic, and a build's files are
/// complete (it prints after they are durable).
#[test]
fn a_closed_stdout_ends_the_command_quietly_with_141_after_its_work() {
    /// Runs `args` with its stdout a pipe nobody reads; it must end with 141
    /// and no panic (nor an error line).
    fn ends_quietly<I, S>(args: I)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let o = melforge().args(args).stdout(writer).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(141), "{err}");
        assert!(!err.contains("panicked") && !err.contains("error"), "{err}");
    }
    let cfg = concat!(env!("CARGO_MANIFEST_DIR"), "/config/melforge.toml");
    ends_quietly(["check-config", cfg]);

    let input = synth_corpus(12, 3);
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out");
    let (i, o) = (input.path().as_os_str(), out.as_os_str());
    ends_quietly(["build".as_ref(), "--json".as_ref(), "--out".as_ref(), o, i]);
    let rows: usize = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "h5"))
        .map(|p| {
            hdf5::File::open(p)
                .unwrap()
                .dataset("label")
                .unwrap()
                .shape()[0]
        })
        .sum();
    assert_eq!(rows, 12);

    // bench io writes its table itself: the same ending.
    let bench: [&std::ffi::OsStr; 8] = [
        "bench".as_ref(),
        "io".as_ref(),
        "--cache".as_ref(),
        "warm".as_ref(),
        "--engine".as_ref(),
        "psync".as_ref(),
        "--json".as_ref(),
        i,
    ];
    ends_quietly(bench);
}

#[test]
fn check_config_names_the_bad_key_and_line() {
    let d = tempfile::tempdir().unwrap();
    let f = put(d.path(), "bad.toml", b"[mel]\nn_mels = 32\nfmax = 5000.0\n");
    let o = melforge().arg("check-config").arg(&f).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad.toml:3") && err.contains("mel.fmax"),
        "{err}"
    );

    let ok = melforge()
        .arg("check-config")
        .arg("config/melforge.toml")
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("(79, 3, 32, 1), 237 segments"));

    // A frame recipe's row, not librosa's.
    for (recipe, shape) in [
        (
            "kaldi-fbank",
            "kaldi-fbank rows of (frames, 23) at 16000 Hz: one frame per 0.01 s of audio",
        ),
        (
            "whisper",
            "whisper rows of (frames, 80) at 16000 Hz: 3000 frames once padded",
        ),
    ] {
        let f = put(
            d.path(),
            "recipe.toml",
            format!("[features]\nrecipe = \"{recipe}\"\n").as_bytes(),
        );
        let o = melforge().arg("check-config").arg(&f).output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success() && out.contains(shape), "{out}");
        assert!(!out.contains("segments"), "{out}");
    }
}

/// `startup_s` says how long each start-up step took and when the first
/// read went out, measured from process start (so it is no later than the
/// whole run, and the walk, arena and first read are all there).
#[test]
fn json_reports_the_start_up_steps() {
    let corpus = synth_corpus(6, 5);
    let out = tempfile::tempdir().unwrap();
    let t = std::time::Instant::now();
    let j = built_json(corpus.path(), out.path());
    let wall = t.elapsed().as_secs_f64();
    let s = &j["startup_s"];
    for part in ["walk", "device", "arena", "kernels"] {
        let v = s[part]
            .as_f64()
            .unwrap_or_else(|| panic!("startup_s.{part} in {s}"));
        assert!(
            (0.0..wall).contains(&v),
            "startup_s.{part} = {v}, run took {wall}"
        );
    }
    let first = s["first_read"].as_f64().expect("a first read");
    assert!(
        first > 0.0 && first < wall,
        "first read at {first} s of {wall} s"
    );
    // The readers read into the arena, so the first read follows its set-up.
    assert!(first >= s["arena"].as_f64().unwrap(), "{s}");
}

#[test]
fn json_says_how_inputs_were_read_and_why() {
    let corpus = synth_corpus(6, 3);
    let out = tempfile::tempdir().unwrap();
    // The corpus was just written, so its pages are cached: `auto` (the
    // default) reads through the cache where the kernel can tell, and says so.
    let j = built_json(corpus.path(), out.path());
    let reason = j["direct_reason"].as_str().unwrap().to_string();
    assert!(reason.starts_with("io.direct = auto: "), "{reason}");
    if reason.contains("cannot tell") {
        assert_eq!(j["direct"], true, "{reason}");
    } else {
        assert_eq!(j["direct"], false, "{reason}");
        assert!(reason.contains("100% of 6 sampled inputs"), "{reason}");
    }
    let cfg = put(out.path(), "d.toml", b"[io]\ndirect = true\n");
    let o = melforge()
        .args(["build", "--json", "--config"])
        .arg(&cfg)
        .arg("--out")
        .arg(out.path().join("o2"))
        .arg(corpus.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j2: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j2["direct"], true);
    assert_eq!(j2["direct_reason"], "io.direct = true");
    assert_eq!(j2["report"]["files_ok"], j["report"]["files_ok"]);
}

#[test]
fn strict_turns_a_rejection_into_exit_1_and_json_reports_it() {
    let corpus = synth_corpus(5, 1);
    put(corpus.path(), "TESTING/LEAK/zz.wav", b"not a wav");
    let out = tempfile::tempdir().unwrap();
    let j = built_json(corpus.path(), out.path());
    assert_eq!(j["report"]["files_ok"], 5);
    assert_eq!(j["rejected"][0]["path"], "TESTING/LEAK/zz.wav");
    assert_eq!(j["backend"], "cpu");

    let o = run_build("--strict", corpus.path(), out.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("zz.wav"));
}

#[test]
fn missing_input_and_cuda_backend_fail_clearly() {
    let out = tempfile::tempdir().unwrap();
    let o = melforge()
        .args(["build", "/nonexistent/corpus", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/corpus"));

    let corpus = synth_corpus(2, 1);
    let o = melforge()
        .args(["build", "--backend", "cuda", "--out"])
        .arg(out.path())
        .arg(corpus.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("CUDA"));
}

#[test]
fn json_log_format_writes_one_object_per_line_with_rejection_fields() {
    let corpus = synth_corpus(2, 1);
    put(corpus.path(), "TESTING/LEAK/zz.wav", b"not a wav");
    let out = tempfile::tempdir().unwrap();
    let o = melforge()
        .args(["--log-format", "json", "build", "--out"])
        .arg(out.path())
        .arg(corpus.path())
        .env_remove("RUST_LOG")
        .env_remove("MELFORGE_LOG_FORMAT")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let events: Vec<serde_json::Value> = err
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        events
            .iter()
            .all(|e| e["level"].is_string() && e["message"].is_string())
    );
    let rejected: Vec<_> = events.iter().filter(|e| e["path"].is_string()).collect();
    assert_eq!(rejected.len(), 1, "{err}");
    assert_eq!(rejected[0]["level"], "WARN");
    assert_eq!(rejected[0]["path"], "TESTING/LEAK/zz.wav");
    let reason = rejected[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("expected WAV") && !reason.contains("zz.wav"),
        "{reason}"
    );
    assert!(!rejected[0]["message"].as_str().unwrap().contains("zz.wav"));
}

#[test]
fn log_format_comes_from_the_environment_and_a_bad_value_is_a_usage_error() {
    let d = tempfile::tempdir().unwrap();
    let o = melforge()
        .args(["synth", "--files", "1"])
        .arg(d.path().join("c"))
        .env_remove("RUST_LOG")
        .env("MELFORGE_LOG_FORMAT", "json")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let line: serde_json::Value = serde_json::from_slice(&o.stderr).unwrap();
    assert_eq!(line["files"], 1);

    let o = melforge()
        .args(["synth", "--files", "1"])
        .arg(d.path().join("c2"))
        .env("MELFORGE_LOG_FORMAT", "yaml")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("MELFORGE_LOG_FORMAT"));
}

#[test]
fn check_config_refuses_a_control_group_that_does_not_exist() {
    let d = tempfile::tempdir().unwrap();
    let f = put(
        d.path(),
        "g.toml",
        b"[control]\ngroup = \"melforge-no-such-group\"\n",
    );
    let o = melforge().arg("check-config").arg(&f).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("g.toml: control.group: no group named \"melforge-no-such-group\""),
        "{err}"
    );
    // A numeric gid needs no lookup.
    let f = put(d.path(), "n.toml", b"[control]\ngroup = \"65534\"\n");
    let o = melforge().arg("check-config").arg(&f).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn a_failed_build_prints_its_cause_once_and_json_on_stdout() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("no-such-input");
    let o = run_build("--json", &missing, &d.path().join("out"));
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err.matches("No such file or directory").count(),
        1,
        "the cause is printed once: {err}"
    );
    let j: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("--json prints a document on failure ({e}): {:?}", o.stdout));
    assert_eq!(j["ok"], false);
    let e = j["error"].as_str().unwrap();
    assert!(e.starts_with("cannot read input directory"), "{e}");
    assert!(e.contains("no-such-input"), "{e}");
}

#[test]
fn paths_the_walk_cannot_use_are_rejections_and_strict_fails_on_them() {
    // Regression: a non-UTF-8 name and a directory past PATH_MAX got a WARN
    // only; rejected.jsonl had no line for them and --strict exited 0.
    use std::os::unix::ffi::OsStrExt;
    let corpus = synth_corpus(3, 7);
    let wav = wav_with(1, 1, 4096, 16, 2, &[0u8; 8192]);
    let bad = corpus
        .path()
        .join("TRAINING/LEAK")
        .join(std::ffi::OsStr::from_bytes(b"caf\xe9.wav"));
    std::fs::create_dir_all(bad.parent().unwrap()).unwrap();
    std::fs::write(&bad, &wav).unwrap();
    // A non-UTF-8 name that is not audio is not a rejection.
    std::fs::write(
        corpus
            .path()
            .join(std::ffi::OsStr::from_bytes(b"notes\xe9.txt")),
        b"x",
    )
    .unwrap();
    // A tree deeper than PATH_MAX (built with relative mkdirs).
    let st = Command::new("python3")
        .arg("-c")
        .arg(
            "import os,sys; os.chdir(sys.argv[1]); os.makedirs('TESTING', exist_ok=True); \
             os.chdir('TESTING')\nfor _ in range(22): os.mkdir(sys.argv[2]); os.chdir(sys.argv[2])\n\
             os.mkdir('PUMP'); open('PUMP/deep.wav', 'w').write('x')",
        )
        .arg(corpus.path())
        .arg("d".repeat(200))
        .status()
        .unwrap();
    assert!(st.success());

    let out = tempfile::tempdir().unwrap();
    let j = built_json(corpus.path(), out.path());
    assert_eq!(j["report"]["files_ok"], 3, "{j}");
    let rejected = j["rejected"].as_array().unwrap();
    let by_path = |p: &str| {
        rejected
            .iter()
            .find(|r| r["path"].as_str().is_some_and(|x| x.starts_with(p)))
    };
    let r = by_path("TRAINING/LEAK/caf\\xE9.wav").unwrap_or_else(|| panic!("{j}"));
    assert_eq!(r["kind"], "bad_path");
    assert!(
        r["reason"].as_str().unwrap().contains("not valid UTF-8"),
        "{r}"
    );
    let r = by_path("TESTING/ddd").unwrap_or_else(|| panic!("{j}"));
    assert_eq!(r["kind"], "unreadable");
    assert!(
        r["reason"].as_str().unwrap().contains("name too long"),
        "{r}"
    );
    assert_eq!(rejected.len(), 2, "{j}");
    assert_eq!(j["report"]["files_rejected"], 2, "{j}");
    let lines = std::fs::read_to_string(out.path().join("rejected.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 2, "{lines}");
    assert!(lines.contains("caf\\\\xE9.wav"), "{lines}");

    let o = run_build("--strict", corpus.path(), out.path());
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
