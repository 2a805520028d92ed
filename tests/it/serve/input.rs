//! serve and `[input]`: `.flac` drops are ingested, files at other rates are
//! resampled as `build` does them, extensions outside `input.extensions` are
//! never picked up, and the channel policy's rejections reach
//! `rejected.jsonl` — on the CPU stage and on the CUDA stage (host double);
//! under the default extensions MP3 and Opus drops are ingested too.

use std::path::Path;
use std::time::Duration;

use melforge::config::Config;
use melforge::decode::clip::ClipDecoder;
use melforge::dsp::{Plan, Scratch};

use super::harness::{self, *};
use super::rejected_lines;

fn fixture(rel: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/inputs/files")
        .join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The row `build` computes for `bytes` under `cfg`.
fn row_of(bytes: &[u8], cfg: &Config) -> Vec<f32> {
    let plan = Plan::new(&cfg.spec);
    let mut scratch = Scratch::new(&plan);
    let mut clip = vec![0f32; cfg.spec.clip_samples()];
    ClipDecoder::new(cfg.spec.sample_rate, cfg.input.policy)
        .decode(bytes, &mut clip)
        .unwrap();
    let mut row = vec![0f32; cfg.spec.row_len()];
    plan.compute(&clip, &mut scratch, &mut row);
    row
}

const INPUT: &str = "[input]\nextensions = [\"wav\", \"flac\"]\nresample = \"soxr_hq\"\n\
                     channels = \"reject\"\n";

both_stages!(flac_drops_are_ingested_and_input_is_honoured);
fn flac_drops_are_ingested_and_input_is_honoured(stage: Stage) {
    let mono_flac = fixture("22050/flac24_mono_speech_22050.flac");
    let mono_wav = fixture("8000/wav16_mono_synth_8000.wav");
    let stereo_flac = fixture("8000/flac16_stereo_synth_8000.flac");
    let mut svc = Svc::with_stage(stage, 100, INPUT);
    svc.start();
    svc.drop_file("TRAINING/LEAK/a.flac", &mono_flac);
    svc.drop_file("TRAINING/LEAK/b.WAV", &mono_wav);
    svc.drop_file("TRAINING/LEAK/c.FLAC", &mono_flac);
    svc.drop_file("TRAINING/LEAK/stereo.flac", &stereo_flac);
    svc.drop_file("TRAINING/LEAK/d.mp3", &mono_flac);
    let s = svc.wait_rows(3);
    wait_for(WAIT, "the rejection", || {
        (svc.status()["files_rejected"] == 1).then_some(())
    });
    std::thread::sleep(Duration::from_millis(300)); // the .mp3 never arrives
    let s2 = svc.status();
    assert_eq!(s2["files_ok"], 3, "{s} {s2}");
    assert_eq!(s2["files_rejected"], 1, "{s2}");
    assert_eq!(svc.ctl("flush")["ok"], true);
    let lines = rejected_lines(&svc);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["path"], "TRAINING/LEAK/stereo.flac");
    assert_eq!(lines[0]["kind"], "unsupported");
    assert_eq!(
        lines[0]["reason"],
        "2 channels, but input.channels = \"reject\" accepts mono files only"
    );
    svc.shutdown();

    let cfg = Config::parse(INPUT, "input").unwrap();
    let files = splits(&svc.out);
    let f = &files["TRAINING"];
    // The `[input]` settings are recorded as build records them.
    let attr = |k: &str| {
        f.file
            .attr(k)
            .unwrap()
            .read_scalar::<hdf5::types::VarLenUnicode>()
            .unwrap()
            .to_string()
    };
    assert_eq!(attr("input_resample"), "soxr_hq");
    let mut paths = f.path.clone();
    paths.sort();
    assert_eq!(
        paths,
        [
            "TRAINING/LEAK/a.flac",
            "TRAINING/LEAK/b.WAV",
            "TRAINING/LEAK/c.FLAC"
        ]
    );
    for (i, p) in f.path.iter().enumerate() {
        let src = if p.ends_with(".WAV") {
            &mono_wav
        } else {
            &mono_flac
        };
        let row = f.mel.index_axis(ndarray::Axis(0), i);
        // Host-decoded on both stages by the same CPU mel path: equal rows.
        assert_eq!(row.as_slice().unwrap(), &row_of(src, &cfg)[..], "{p}");
    }
}

fn codec_fixture(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/codecs")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

both_stages!(mp3_and_opus_drops_are_ingested_under_the_default_extensions);
fn mp3_and_opus_drops_are_ingested_under_the_default_extensions(stage: Stage) {
    const RESAMPLE: &str = "[input]\nresample = \"soxr_hq\"\n";
    let mp3 = codec_fixture("speech44k_stereo.mp3");
    let opus = codec_fixture("speech16k_mono.opus");
    let mut svc = Svc::with_stage(stage, 100, RESAMPLE);
    svc.start();
    svc.drop_file("TRAINING/LEAK/a.mp3", &mp3);
    svc.drop_file("TRAINING/LEAK/b.opus", &opus);
    svc.wait_rows(2);
    assert_eq!(svc.status()["files_rejected"], 0);
    assert_eq!(svc.ctl("flush")["ok"], true);
    svc.shutdown();
    let cfg = Config::parse(RESAMPLE, "input").unwrap();
    let files = splits(&svc.out);
    let f = &files["TRAINING"];
    let mut paths = f.path.clone();
    paths.sort();
    assert_eq!(paths, ["TRAINING/LEAK/a.mp3", "TRAINING/LEAK/b.opus"]);
    for (i, p) in f.path.iter().enumerate() {
        let src = if p.ends_with(".mp3") { &mp3 } else { &opus };
        let row = f.mel.index_axis(ndarray::Axis(0), i);
        assert_eq!(row.as_slice().unwrap(), &row_of(src, &cfg)[..], "{p}");
    }
}
