//! serve's sidecars (`<file>.json` or `<stem>.json` beside a dropped file):
//! their object becomes the row's `meta` entry, a file without one gets an
//! empty entry, a sidecar that cannot be used rejects its file as
//! `bad_sidecar` with the reason, and a sidecar follows its file when serve
//! moves it after the commit — on both stages, with the lossy containers a
//! speech corpus ships in. A kill -9 and restart keeps every entry with its
//! row.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::harness::{self, *};
use super::rejected_lines;

fn codec(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/codecs")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Moves processed files to `done/`; resamples the 44.1 kHz fixtures.
fn write_config(svc: &Svc) {
    let text = "[serve]\nwatch_dir = \"drop\"\noutput_dir = \"out\"\nflush_interval_ms = 50\n\
                on_success = \"move\"\ndone_dir = \"done\"\n[control]\nsocket = \"ctl.sock\"\n\
                [input]\nresample = \"soxr_hq\"\n";
    std::fs::write(&svc.cfg, text).unwrap();
}

/// Each row's `meta` entry by its path, in one split file.
fn meta_by_path(out: &Path, split: &str) -> BTreeMap<String, String> {
    let f = hdf5::File::open(out.join(format!("{split}.h5"))).unwrap();
    let strings = |name: &str| melforge::writer::strings::read(&f, name).unwrap();
    let (paths, meta) = (strings("path"), strings("meta"));
    assert_eq!(paths.len(), meta.len(), "one meta entry per row");
    paths.into_iter().zip(meta).collect()
}

both_stages!(sidecars_become_row_metadata_and_follow_their_files);
fn sidecars_become_row_metadata_and_follow_their_files(stage: Stage) {
    let mut svc = Svc::with_stage(stage, 50, "");
    write_config(&svc);
    let drop_json = |rel: &str, v: &Value| svc.drop_file(rel, v.to_string().as_bytes());
    // Sidecars first, as the contract says; one by full name, one by stem.
    let a = serde_json::json!({"text": "naïve café, 東京", "speaker": "spk1", "n": 3});
    let b = serde_json::json!({"text": "stem sidecar", "language": "en"});
    drop_json("TRAINING/LEAK/a.mp3.json", &a);
    drop_json("TRAINING/LEAK/b.json", &b);
    svc.drop_file("TRAINING/LEAK/bad.ogg.json", b"{\"text\": ");
    svc.drop_file("TRAINING/LEAK/arr.m4a.json", b"[1, 2]");
    svc.start();
    svc.drop_file("TRAINING/LEAK/a.mp3", &codec("speech44k_stereo.mp3"));
    svc.drop_file("TRAINING/LEAK/b.opus", &codec("speech16k_mono.opus"));
    svc.drop_file("TRAINING/LEAK/c.m4a", &codec("speech16k_mono.m4a"));
    svc.drop_file("TRAINING/LEAK/bad.ogg", &codec("speech16k_mono.ogg"));
    svc.drop_file("TRAINING/LEAK/arr.m4a", &codec("speech44k_stereo.m4a"));
    svc.wait_rows(3);
    wait_for(WAIT, "the two rejections", || {
        (svc.status()["files_rejected"] == 2).then_some(())
    });
    assert_eq!(svc.ctl("flush")["ok"], true);
    let mut lines = rejected_lines(&svc);
    lines.sort_by_key(|l| l["path"].as_str().unwrap().to_string());
    let got: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| (l["path"].as_str().unwrap(), l["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            ("TRAINING/LEAK/arr.m4a", "bad_sidecar"),
            ("TRAINING/LEAK/bad.ogg", "bad_sidecar")
        ]
    );
    let reason = |i: usize| lines[i]["reason"].as_str().unwrap().to_string();
    assert!(
        reason(0).contains("arr.m4a.json holds JSON an array, not an object"),
        "{}",
        reason(0)
    );
    assert!(
        reason(1).contains("bad.ogg.json is not JSON"),
        "{}",
        reason(1)
    );
    // The committed files moved to done/ with their sidecars.
    let done = svc.root.path().join("done/TRAINING/LEAK");
    harness::wait_for(WAIT, "the moves", || {
        done.join("c.m4a").exists().then_some(())
    });
    for name in ["a.mp3", "a.mp3.json", "b.opus", "b.json", "c.m4a"] {
        assert!(done.join(name).is_file(), "{name} not moved with its file");
        assert!(
            !svc.drop.join("TRAINING/LEAK").join(name).exists(),
            "{name}"
        );
    }
    svc.shutdown();

    let meta = meta_by_path(&svc.out, "TRAINING");
    let doc = |p: &str| -> Value { serde_json::from_str(&meta[p]).unwrap() };
    assert_eq!(doc("TRAINING/LEAK/a.mp3"), a);
    assert_eq!(doc("TRAINING/LEAK/b.opus"), b);
    assert_eq!(
        meta["TRAINING/LEAK/c.m4a"], "",
        "no sidecar: an empty entry"
    );
    assert_eq!(meta.len(), 3);
}

/// Rows with sidecars across a kill -9: every row committed before and after
/// the restart has its own file's entry, none twice.
#[test]
fn sidecar_metadata_stays_with_its_row_across_kill_9() {
    let mut svc = Svc::new(50, "");
    svc.start();
    let files = harness::clips(60, 11);
    let drop_one = |svc: &Svc, i: usize, (rel, bytes): &(String, Vec<u8>)| {
        let side = serde_json::json!({ "i": i, "text": format!("utterance {i}") });
        svc.drop_file(&format!("{rel}.json"), side.to_string().as_bytes());
        svc.drop_file(rel, bytes);
    };
    for (i, f) in files.iter().enumerate().take(30) {
        drop_one(&svc, i, f);
    }
    harness::wait_for(WAIT, "some commits", || {
        (harness::committed_files(&svc.status()) >= 10).then_some(())
    });
    svc.kill9();
    svc.start();
    for (i, f) in files.iter().enumerate().skip(30) {
        drop_one(&svc, i, f);
    }
    svc.wait_rows(files.len() as u64);
    svc.shutdown();
    let mut seen = 0;
    for split in ["TRAINING", "VALIDATION", "TESTING"] {
        if !svc.out.join(format!("{split}.h5")).exists() {
            continue;
        }
        for (path, entry) in meta_by_path(&svc.out, split) {
            let i = files.iter().position(|(rel, _)| *rel == path).unwrap();
            let v: Value = serde_json::from_str(&entry).unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!(v["i"], i, "{path}");
            seen += 1;
        }
    }
    assert_eq!(seen, files.len());
}
