//! The spill against the whole-file decode it replaces: each segment's
//! bytes (the rewritten header and the extent of the spill) decode to the
//! samples the compressed decoder gives for it, its mean and each channel
//! bit for bit; recordings that do not qualify keep their old plan; the
//! folder goes with its guard.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::*;
use crate::decode::policy::Mix;
use crate::decode::wav;
use crate::plan::manifest::plan_spilling;

fn fixture(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/codecs")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A NeMo manifest of `segments` (offset, duration) of `audio`.
fn manifest(dir: &Path, audio: &str, segments: &[(f64, f64)]) -> PathBuf {
    let p = dir.join("train.jsonl");
    let mut f = std::fs::File::create(&p).unwrap();
    for (o, d) in segments {
        let line = serde_json::json!({"audio_filepath": audio, "offset": o, "duration": d});
        writeln!(f, "{line}").unwrap();
    }
    p
}

/// The bytes a job reads: the prefix, then the range of its file.
fn job_bytes(m: &Manifests, i: usize) -> Vec<u8> {
    let r = m.extents.range(i).expect("a range");
    let file = std::fs::read(m.plan.open_path(&m.plan.jobs[i])).unwrap();
    let mut b = r.prefix.to_vec();
    b.extend_from_slice(&file[r.start as usize..(r.start + r.len) as usize]);
    b
}

/// Frames `int(offset·rate)`… of the compressed decode under `mix`.
fn want(bytes: &[u8], mix: Mix, seg: (f64, f64)) -> Vec<f32> {
    let mut all = Vec::new();
    let head = compressed::open(bytes)
        .unwrap()
        .decode(mix, usize::MAX, &mut all)
        .unwrap();
    let s = Segment {
        offset_s: seg.0,
        duration_s: Some(seg.1),
        ..Segment::default()
    };
    let (first, n) = s.frames(head.sample_rate);
    let end = (first + n.unwrap()).min(all.len() as u64);
    all[first as usize..end as usize].to_vec()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

const SEGMENTS: [(f64, f64); 4] = [(0.0, 0.1), (0.012_345_6, 0.07), (0.2, 0.05), (0.3, 5.0)];

/// Stereo and mono M4A (ffmpeg's `aac`, PNS on): every segment without a
/// part (those near the start have one: no access unit before them codes
/// noise, `decode::compressed::index`) is an extent of one spill, whose
/// samples are the compressed decode's mean and channels.
#[test]
fn segments_of_an_m4a_are_extents_of_its_spill_bit_for_bit() {
    for name in ["speech44k_stereo.m4a", "speech16k_mono.m4a"] {
        let d = tempfile::tempdir().unwrap();
        let bytes = fixture(name);
        std::fs::write(d.path().join("a.m4a"), &bytes).unwrap();
        let f = manifest(d.path(), "a.m4a", &SEGMENTS);
        let spill = SpillDir::new(d.path().join("out/.melforge-spill"), 1 << 30);
        let m = plan_spilling(&[f], None, Some(&spill), None).unwrap();
        assert_eq!(m.spilled, 1, "{name}");
        assert!(m.header_bytes >= bytes.len() as u64, "{name}");
        let files: Vec<PathBuf> = std::fs::read_dir(spill.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        assert_eq!(m.spill_bytes, std::fs::metadata(&files[0]).unwrap().len());
        let channels = compressed::open(&bytes).unwrap().head().channels;
        let mut spilled = 0;
        for (i, &seg) in SEGMENTS.iter().enumerate() {
            if m.extents.segment(i).unwrap().lossy.is_some() {
                assert_eq!(m.plan.open_path(&m.plan.jobs[i]), d.path().join("a.m4a"));
                continue;
            }
            spilled += 1;
            assert_eq!(m.plan.open_path(&m.plan.jobs[i]), files[0], "{name} {i}");
            let s = m.extents.segment(i).unwrap();
            assert_eq!((s.offset_s, s.duration_s), (0.0, None));
            let b = job_bytes(&m, i);
            let info = wav::parse(&b).unwrap();
            let mut mean = vec![0f32; info.frames];
            wav::decode_mono_into(&b, &info, &mut mean);
            assert_eq!(
                bits(&mean),
                bits(&want(&bytes, Mix::Mean, seg)),
                "{name} {i}"
            );
            for c in 0..channels {
                let mut one = vec![0f32; info.frames];
                wav::decode_channel_into(&b, &info, usize::from(c), &mut one);
                let w = want(&bytes, Mix::Channel(c), seg);
                assert_eq!(bits(&one), bits(&w), "{name} {i} channel {c}");
            }
        }
        assert!(spilled >= MIN_SEGMENTS, "{name}: {spilled} spilled");
        let dir = spill.path().to_path_buf();
        drop(spill);
        assert!(!dir.exists(), "the guard removes the spill");
    }
}

/// A recording keeps its old plan (read whole, no range) when it has one
/// segment, when its decode is over the limit, when spilling is off, and
/// when its stream is cut short (the decoder's reason stays the
/// worker's); a segment past the end keeps it too.
#[test]
fn recordings_that_do_not_qualify_keep_their_plan() {
    let d = tempfile::tempdir().unwrap();
    let bytes = fixture("speech16k_mono.m4a");
    std::fs::write(d.path().join("a.m4a"), &bytes).unwrap();
    std::fs::write(d.path().join("cut.m4a"), &bytes[..bytes.len() * 2 / 3]).unwrap();
    // No spill: a segment is read whole, or as its part of the recording.
    let old = |m: &Manifests| {
        let part_or_whole = |i: usize| {
            let s = m.extents.segment(i);
            m.extents.range(i).is_none() || s.is_some_and(|s| s.lossy.is_some())
        };
        m.spilled == 0 && (0..m.extents.len()).all(part_or_whole)
    };
    type Case<'a> = (&'a str, &'a [(f64, f64)], u64);
    let cases: [Case<'_>; 4] = [
        ("a.m4a", &SEGMENTS[..1], 1 << 30),
        ("a.m4a", &SEGMENTS, 1000),
        ("a.m4a", &SEGMENTS, 0),
        ("cut.m4a", &SEGMENTS, 1 << 30),
    ];
    for (audio, segs, max) in cases {
        let f = manifest(d.path(), audio, segs);
        let spill = SpillDir::new(d.path().join("spill"), max);
        let m = plan_spilling(&[f], None, Some(&spill), None).unwrap();
        assert!(old(&m), "{audio} {} {max}", segs.len());
        assert_eq!(m.extents.segment(0).unwrap().offset_s, segs[0].0);
    }
    let f = manifest(d.path(), "a.m4a", &[(0.2, 0.2), (0.3, 0.5), (3600.0, 1.0)]);
    let spill = SpillDir::new(d.path().join("spill"), 1 << 30);
    let m = plan_spilling(&[f], None, Some(&spill), None).unwrap();
    assert_eq!(m.spilled, 1);
    assert!(
        m.extents.range(0).is_some()
            && m.extents.range(1).is_some()
            && m.extents.range(2).is_none()
    );
    assert!((0..2).all(|i| m.extents.segment(i).unwrap().lossy.is_none()));
    assert_eq!(m.plan.open_path(&m.plan.jobs[2]), d.path().join("a.m4a"));
    assert_eq!(m.extents.segment(2).unwrap().offset_s, 3600.0);
}

/// A spill folder left by a killed build goes when the next guard of the
/// same name is made; the header is a float WAV the extent planner and the
/// WAV parser take.
#[test]
fn a_stale_spill_goes_and_the_header_is_a_float_wav() {
    let d = tempfile::tempdir().unwrap();
    let stale = d.path().join(SpillDir::name(".shard-1-of-4"));
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("0.wav"), b"left over").unwrap();
    let guard = SpillDir::new(stale.clone(), 1 << 20);
    assert!(!stale.exists());
    drop(guard);
    let samples: Vec<f32> = (0..30).map(|i| i as f32 / 7.0 - 1.0).collect();
    let mut b = float_wav_header(8_000, 3, 10);
    b.extend(samples.iter().flat_map(|v| v.to_le_bytes()));
    let info = wav::parse(&b).unwrap();
    assert_eq!(
        (info.frames, info.channels, info.sample_rate),
        (10, 3, 8_000)
    );
    let h = extent::head(&b, b.len() as u64).unwrap();
    assert_eq!((h.frames, h.block_align, h.bytes.len()), (10, 12, 44));
    let mut one = vec![0f32; 10];
    wav::decode_channel_into(&b, &info, 2, &mut one);
    assert_eq!(one[3], samples[3 * 3 + 2]);
}

/// The spill reads its recordings through the reader stage the build
/// configures (`[io]`): io_uring and plain reads, one thread or several,
/// give the same spills, plans and bytes for every segment.
#[test]
fn the_spill_reads_through_the_configured_readers() {
    use crate::config::Engine;
    use crate::plan::manifest::{Options, plan_with};
    let d = tempfile::tempdir().unwrap();
    let bytes = fixture("speech44k_stereo.m4a");
    for k in 0..3 {
        std::fs::write(d.path().join(format!("{k}.m4a")), &bytes).unwrap();
    }
    let p = d.path().join("train.jsonl");
    let mut f = std::fs::File::create(&p).unwrap();
    for k in 0..3 {
        for (o, du) in SEGMENTS {
            let line = serde_json::json!({"audio_filepath": format!("{k}.m4a"), "offset": o, "duration": du});
            writeln!(f, "{line}").unwrap();
        }
    }
    drop(f);
    let plan = |engine: Engine, threads: usize| {
        let mut io = crate::config::Config::default().io;
        io.engine = engine;
        io.threads = threads;
        let spill = SpillDir::new(d.path().join(format!("spill-{threads}")), 1 << 30);
        let o = Options {
            spill: Some(&spill),
            readers: Some(Readers { io: &io }),
            ..Options::default()
        };
        let m = plan_with(std::slice::from_ref(&p), o).unwrap();
        let spilled: Vec<Vec<u8>> = (0..m.plan.jobs.len())
            .filter(|&i| m.plan.targets.contains_key(&(i as u32)))
            .map(|i| job_bytes(&m, i))
            .collect();
        (m.spilled, m.spill_bytes, m.extents.clone(), spilled)
    };
    let uring = plan(Engine::Uring, 2);
    assert_eq!(uring.0, 3, "every recording is spilled");
    assert!(!uring.3.is_empty());
    assert_eq!(plan(Engine::Std, 1), uring);
    assert_eq!(plan(Engine::Uring, 1), uring);
}
