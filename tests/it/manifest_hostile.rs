//! `build MANIFEST…` fed hostile manifests: paths that are FIFOs,
//! directories or devices, a gzip bomb of newlines, a 100 MB line, JSON
//! nested 100,000 deep, times that are not finite or out of range, a
//! lhotse cut id given twice, a file listed twice.
//!
//! Each runs the `melforge` binary (`std::process::Command`, with a
//! watchdog that kills it past a generous deadline and fails the test, so
//! a build that would block for ever fails instead of hanging the suite)
//! on a manifest with good lines around the hostile ones, and checks the
//! exit status, the rejection's line and reason, and that every good line
//! became a row (and was written back with its row).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::put;
use crate::manifest::{pcm16, signal};

/// A build that has not finished by then is stuck (a blocked `open`): the
/// slowest case here (the 100 MB line) takes seconds.
const DEADLINE: Duration = Duration::from_secs(300);

const CONFIG: &str = "[features]\nrecipe = \"kaldi-fbank\"\nnum_mel_bins = 40\n\n\
                      [compute]\nworkers = 2\n";

/// What a run left: its exit status, its stderr, rejected.jsonl as
/// (line, kind, reason) and the rows of `train` as (line, path).
struct Run {
    ok: bool,
    stderr: String,
    rejected: Vec<(u64, String, String)>,
    rows: Vec<(u32, String)>,
    out: PathBuf,
}

/// `melforge build manifest --out dir/out` with `extra_config` after the
/// kaldi recipe, killed (and the test failed) past [`DEADLINE`].
fn build(dir: &Path, manifest: &Path, extra_config: &str) -> Run {
    let config = put(dir, "c.toml", format!("{CONFIG}{extra_config}").as_bytes());
    let out = dir.join("out");
    let err = std::fs::File::create(dir.join("stderr.txt")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_melforge"))
        .arg("build")
        .arg(manifest)
        .arg("--out")
        .arg(&out)
        .arg("--config")
        .arg(&config)
        .args(["--progress", "none"])
        .env("MELFORGE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > DEADLINE {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("the build was still running after {DEADLINE:?}: it is stuck");
        }
        // Polling the child's exit: the deadline is only a bound.
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::fs::read_to_string(dir.join("stderr.txt")).unwrap();
    let rejected = std::fs::read_to_string(out.join("rejected.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["line"].as_u64().unwrap(),
                v["kind"].as_str().unwrap().to_string(),
                v["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let rows = match hdf5::File::open(out.join("train.h5")) {
        Ok(f) => {
            let lines = f.dataset("line").unwrap().read_raw::<u32>().unwrap();
            let paths = f
                .dataset("path")
                .unwrap()
                .read_raw::<hdf5::types::VarLenUnicode>()
                .unwrap();
            lines
                .into_iter()
                .zip(paths)
                .map(|(l, p)| (l, p.as_str().to_string()))
                .collect()
        }
        Err(_) => Vec::new(),
    };
    Run {
        ok: status.success(),
        stderr,
        rejected,
        rows,
        out,
    }
}

/// A 2-second 16 kHz WAV at `dir/a.wav`.
fn audio(dir: &Path) {
    put(dir, "a.wav", &pcm16(&signal(32_000, 1, 3), 1, 16_000));
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// The written-back manifest: each line's `features_row`, in order.
fn written_back_rows(out: &Path) -> Vec<(String, u64)> {
    std::fs::read_to_string(out.join("train.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let id = v
                .get("text")
                .or(v.get("id"))
                .and_then(|t| t.as_str())
                .unwrap_or("")
                .to_string();
            (id, v["features_row"].as_u64().unwrap())
        })
        .collect()
}

/// A NeMo line whose `audio_filepath` was a FIFO blocked `build` for ever
/// in `open` (the planner's header read of a segment, the reader's open of
/// a whole file). Now a FIFO, a directory and a character device are each
/// rejected by their type, with both read engines, and the good lines
/// build.
#[test]
fn a_fifo_a_directory_or_a_device_as_audio_is_rejected_without_blocking() {
    for engine in ["uring", "std"] {
        let d = tempfile::tempdir().unwrap();
        audio(d.path());
        mkfifo(&d.path().join("pipe.wav"));
        std::fs::create_dir(d.path().join("dir.wav")).unwrap();
        let lines = [
            r#"{"audio_filepath": "a.wav", "duration": 2.0, "text": "first"}"#,
            r#"{"audio_filepath": "pipe.wav", "duration": 1.0}"#,
            r#"{"audio_filepath": "pipe.wav", "offset": 0.5, "duration": 1.0}"#,
            r#"{"audio_filepath": "dir.wav", "duration": 1.0}"#,
            r#"{"audio_filepath": "dir.wav", "offset": 0.5, "duration": 1.0}"#,
            r#"{"audio_filepath": "/dev/zero", "duration": 1.0}"#,
            r#"{"audio_filepath": "/dev/zero", "offset": 0.5, "duration": 1.0}"#,
            r#"{"audio_filepath": "a.wav", "offset": 0.5, "duration": 1.0, "text": "last"}"#,
        ];
        let m = put(d.path(), "train.jsonl", lines.join("\n").as_bytes());
        let run = build(d.path(), &m, &format!("\n[io]\nengine = \"{engine}\"\n"));
        assert!(run.ok, "{engine}: {}", run.stderr);
        let kinds = [
            "a FIFO (named pipe)",
            "a FIFO (named pipe)",
            "a directory",
            "a directory",
            "a character device",
            "a character device",
        ];
        assert_eq!(
            run.rejected.len(),
            kinds.len(),
            "{engine}: {:?}",
            run.rejected
        );
        for ((line, kind, reason), (want_line, what)) in run.rejected.iter().zip((2..).zip(kinds)) {
            assert_eq!(
                (*line, kind.as_str()),
                (want_line, "not_a_file"),
                "{engine}"
            );
            assert_eq!(
                reason,
                &format!("not a regular file but {what}; only regular files are read"),
                "{engine}"
            );
        }
        let lines: Vec<u32> = run.rows.iter().map(|r| r.0).collect();
        assert_eq!(lines, [1, 8], "{engine}");
        assert_eq!(
            written_back_rows(&run.out),
            [("first".to_string(), 0), ("last".to_string(), 1)]
        );
    }
}

/// A manifest that is itself a FIFO is a clear error, not a blocked open.
#[test]
fn a_manifest_that_is_a_fifo_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    audio(d.path());
    let good = put(
        d.path(),
        "dev.jsonl",
        br#"{"audio_filepath": "a.wav", "duration": 2.0}"#,
    );
    let fifo = d.path().join("train.jsonl");
    mkfifo(&fifo);
    let config = put(d.path(), "c.toml", CONFIG.as_bytes());
    let mut child = Command::new(env!("CARGO_BIN_EXE_melforge"))
        .arg("build")
        .args([&good, &fifo])
        .arg("--out")
        .arg(d.path().join("out"))
        .arg("--config")
        .arg(&config)
        .args(["--progress", "none"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > DEADLINE {
            child.kill().unwrap();
            panic!("the build blocked on a manifest that is a FIFO");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("is not a regular file but a FIFO (named pipe)"),
        "{stderr}"
    );
}

/// 1 GB of newlines gzipped into about 1 MB: the build reads 100 million
/// of them (`input.manifest_max_lines`), about a second, and stops with an
/// error naming the limit, instead of reading on (or running out of
/// memory).
#[test]
fn a_gzip_bomb_of_newlines_stops_at_the_line_cap() {
    let d = tempfile::tempdir().unwrap();
    audio(d.path());
    // One member of 10 MB of newlines, repeated: gzip members concatenate.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&vec![b'\n'; 10 << 20]).unwrap();
    let member = gz.finish().unwrap();
    let good = br#"{"audio_filepath": "a.wav", "duration": 2.0}
"#;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(good).unwrap();
    let mut bytes = gz.finish().unwrap();
    for _ in 0..100 {
        bytes.extend_from_slice(&member);
    }
    assert!(bytes.len() < 2 << 20, "{} bytes", bytes.len());
    let m = put(d.path(), "train.jsonl.gz", &bytes);
    let run = build(d.path(), &m, "");
    assert!(!run.ok);
    assert!(
        run.stderr
            .contains("has more than 100000000 lines (input.manifest_max_lines)"),
        "{}",
        run.stderr
    );
    // The same bomb under a cap it fits: built, the one good line a row.
    let run = build(d.path(), &m, "\n[input]\nmanifest_max_lines = 1100000000\n");
    assert!(run.ok, "{}", run.stderr);
    assert_eq!(run.rows, [(1, "a.wav".to_string())]);
}

/// A single line of 100 MB is rejected with its length and the limit,
/// skipped without being kept, and the lines after it build.
#[test]
fn a_100_mb_line_is_rejected_and_the_next_lines_build() {
    let d = tempfile::tempdir().unwrap();
    audio(d.path());
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(br#"{"audio_filepath": "a.wav", "duration": 2.0, "text": "first"}"#)
        .unwrap();
    gz.write_all(b"\n{\"audio_filepath\": \"a.wav\", \"duration\": 2.0, \"text\": \"")
        .unwrap();
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..100 {
        gz.write_all(&chunk).unwrap();
    }
    gz.write_all(b"\"}\n").unwrap();
    gz.write_all(br#"{"audio_filepath": "a.wav", "duration": 2.0, "text": "last"}"#)
        .unwrap();
    let m = put(d.path(), "train.jsonl.gz", &gz.finish().unwrap());
    let run = build(d.path(), &m, "");
    assert!(run.ok, "{}", run.stderr);
    let long = 100 * (1 << 20) + 56;
    assert_eq!(
        run.rejected,
        [(
            2,
            "bad_line".to_string(),
            format!(
                "the line is {long} bytes, over the limit of 1048576 \
                 (input.manifest_max_line_kib = 1024); it was skipped unread to its end"
            )
        )]
    );
    let lines: Vec<u32> = run.rows.iter().map(|r| r.0).collect();
    assert_eq!(lines, [1, 3]);
    assert_eq!(
        written_back_rows(&run.out),
        [("first".to_string(), 0), ("last".to_string(), 1)]
    );
}

/// JSON nested 100,000 deep, times that are NaN (a string), infinite
/// (`1e999`, beyond f64), or ±1e308: each a rejection with its reason,
/// nothing overflows, the good lines build.
#[test]
fn deep_json_and_non_finite_or_huge_times_are_rejected() {
    let d = tempfile::tempdir().unwrap();
    audio(d.path());
    let deep = format!(
        "{{\"audio_filepath\": \"a.wav\", \"x\": {}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let lines = [
        r#"{"audio_filepath": "a.wav", "duration": 2.0, "text": "first"}"#,
        &deep,
        r#"{"audio_filepath": "a.wav", "offset": "NaN", "duration": 1.0}"#,
        r#"{"audio_filepath": "a.wav", "offset": 0.0, "duration": 1e999}"#,
        r#"{"audio_filepath": "a.wav", "offset": 1e308, "duration": 1.0}"#,
        r#"{"audio_filepath": "a.wav", "offset": -1e308, "duration": 1.0}"#,
        r#"{"audio_filepath": "a.wav", "offset": 0.5, "duration": 1e308}"#,
        r#"{"audio_filepath": "a.wav", "duration": "-inf"}"#,
        r#"{"audio_filepath": "a.wav", "offset": 0.5, "duration": 1.0, "text": "last"}"#,
    ];
    let m = put(d.path(), "train.jsonl", lines.join("\n").as_bytes());
    let run = build(d.path(), &m, "");
    assert!(run.ok, "{}", run.stderr);
    let want: [(u64, &str); 7] = [
        (2, "the line is not JSON: recursion limit exceeded"),
        (
            3,
            "`offset` is not a number: \"NaN\"; expected a finite number of seconds",
        ),
        (4, "the line is not JSON: number out of range"),
        (
            5,
            "the offset is 1e308 s; it must be at most 10000000 s (116 days)",
        ),
        (6, "the offset is -1e308 s; it must not be negative"),
        (
            7,
            "the duration is 1e308 s; it must be at most 10000000 s (116 days)",
        ),
        (
            8,
            "`duration` is not a number: \"-inf\"; expected a finite number of seconds",
        ),
    ];
    assert_eq!(run.rejected.len(), want.len(), "{:?}", run.rejected);
    for ((line, kind, reason), (want_line, want_reason)) in run.rejected.iter().zip(want) {
        assert_eq!((*line, kind.as_str()), (want_line, "bad_line"));
        assert!(reason.starts_with(want_reason), "{line}: {reason}");
    }
    let lines: Vec<u32> = run.rows.iter().map(|r| r.0).collect();
    assert_eq!(lines, [1, 9]);
}

fn cut(id: &str, start: f64) -> String {
    serde_json::json!({
        "id": id, "start": start, "duration": 0.5, "channel": 0,
        "recording": {"id": "rec", "sources": [{"type": "file", "channels": [0],
            "source": "a.wav"}], "sampling_rate": 16000, "num_samples": 32000,
            "duration": 2.0},
        "type": "MonoCut"
    })
    .to_string()
}

/// A cut id met before in the same manifest: the later line is rejected,
/// naming the first; the first and the other cuts build, and the
/// written-back manifest names their rows (the rejected line is not
/// written back, and does not shift the rows after it).
#[test]
fn a_duplicate_cut_id_is_rejected_naming_the_first_line() {
    let d = tempfile::tempdir().unwrap();
    audio(d.path());
    let lines = [
        cut("c1", 0.0),
        cut("c2", 0.5),
        cut("c1", 1.0),
        cut("c3", 1.5),
    ];
    let m = put(d.path(), "train.jsonl", lines.join("\n").as_bytes());
    let run = build(d.path(), &m, "");
    assert!(run.ok, "{}", run.stderr);
    assert_eq!(
        run.rejected,
        [(
            3,
            "bad_line".to_string(),
            "the cut id `c1` is already line 1's; cut ids are unique in a manifest, so this line \
             is left out"
                .to_string()
        )]
    );
    let lines: Vec<u32> = run.rows.iter().map(|r| r.0).collect();
    assert_eq!(lines, [1, 2, 4]);
    assert_eq!(
        written_back_rows(&run.out),
        [
            ("c1".to_string(), 0),
            ("c2".to_string(), 1),
            ("c3".to_string(), 2)
        ]
    );
}

/// One file listed twice (whole, on two lines) is two rows: NeMo manifests
/// list a file once per transcript or augmentation (docs/FORMAT.md), and
/// both rows are the same features.
#[test]
fn a_file_listed_twice_is_two_rows() {
    let d = tempfile::tempdir().unwrap();
    audio(d.path());
    let lines = [
        r#"{"audio_filepath": "a.wav", "duration": 2.0, "text": "one"}"#,
        r#"{"audio_filepath": "a.wav", "duration": 2.0, "text": "two"}"#,
    ];
    let m = put(d.path(), "train.jsonl", lines.join("\n").as_bytes());
    let run = build(d.path(), &m, "");
    assert!(run.ok, "{}", run.stderr);
    assert!(run.rejected.is_empty(), "{:?}", run.rejected);
    assert_eq!(
        run.rows,
        [(1, "a.wav".to_string()), (2, "a.wav".to_string())]
    );
    let f = hdf5::File::open(run.out.join("train.h5")).unwrap();
    let feats = f.dataset("features").unwrap().read_raw::<f32>().unwrap();
    let lengths = f.dataset("lengths").unwrap().read_raw::<i32>().unwrap();
    assert_eq!(lengths.len(), 2);
    assert!(lengths[0] > 0 && lengths[0] == lengths[1], "{lengths:?}");
    let (a, b) = feats.split_at(feats.len() / 2);
    assert_eq!(a, b, "the two rows of one file differ");
    assert_eq!(
        written_back_rows(&run.out),
        [("one".to_string(), 0), ("two".to_string(), 1)]
    );
}

/// More bad lines than a build keeps in memory: each is in rejected.jsonl,
/// in line order among the audio the writer rejected, and the spool the
/// planner wrote them to as it found them is gone.
#[test]
fn bad_lines_past_the_sample_are_all_in_the_log_in_order() {
    let d = tempfile::tempdir().unwrap();
    audio(d.path());
    put(d.path(), "bad.wav", b"RIFF\x04\x00\x00\x00WAVE");
    // Half the lines are left out while planning: 200 past the sample.
    let n = 2 * melforge::plan::spool::SAMPLE as u64 + 400;
    let mut text = String::new();
    for line in 1..=n {
        text += &match line % 4 {
            0 => "{\"audio_filepath\": \"a.wav\", \"duration\": 0}\n".to_string(),
            1 => "not json\n".to_string(),
            2 => "{\"audio_filepath\": \"bad.wav\", \"duration\": 2.0}\n".to_string(),
            _ => "{\"audio_filepath\": \"a.wav\", \"duration\": 2.0}\n".to_string(),
        };
    }
    let m = put(d.path(), "train.jsonl", text.as_bytes());
    let run = build(d.path(), &m, "");
    assert!(run.ok, "{}", run.stderr);
    let lines: Vec<u64> = run.rejected.iter().map(|r| r.0).collect();
    let want: Vec<u64> = (1..=n).filter(|l| l % 4 != 3).collect();
    assert_eq!(
        lines, want,
        "every bad line, planned or written, in line order"
    );
    for (line, kind, _) in &run.rejected {
        let want = if line % 4 == 2 {
            "malformed"
        } else {
            "bad_line"
        };
        assert_eq!(kind, want, "line {line}");
    }
    let rows: Vec<u32> = run.rows.iter().map(|r| r.0).collect();
    assert_eq!(
        rows,
        (1..=n as u32).filter(|l| l % 4 == 3).collect::<Vec<_>>()
    );
    let left: Vec<_> = std::fs::read_dir(&run.out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(
        run.stderr.contains("More manifest lines were left out"),
        "{}",
        run.stderr
    );
}
