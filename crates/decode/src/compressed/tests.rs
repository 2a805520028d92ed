//! The lossy decoders against the references on the fixtures of
//! tests/data/codecs (ffmpeg-encoded speech; `make.py` there regenerates
//! them with the reference decodes), and hostile bytes: every prefix length
//! class and random corruption of each fixture yields samples or a reason,
//! never a panic.

use std::path::PathBuf;

use proptest::prelude::*;

use super::*;
use crate::policy::Channels;

fn data(name: &str) -> Vec<u8> {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("tests/data/codecs")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn expected() -> serde_json::Value {
    serde_json::from_slice(&data("expected.json")).unwrap()
}

fn decode_all(bytes: &[u8], channels: Channels) -> Result<(Head, Vec<f32>), Error> {
    let mut out = Vec::new();
    let head = open(bytes)?.decode(channels, usize::MAX, &mut out)?;
    Ok((head, out))
}

const EXTS: [(&str, Codec); 4] = [
    ("mp3", Codec::Mp3),
    ("ogg", Codec::Vorbis),
    ("opus", Codec::Opus),
    ("m4a", Codec::Aac),
];

#[test]
fn each_codec_is_recognised_by_content_not_name() {
    for (ext, codec) in EXTS {
        for name in ["speech16k_mono", "speech44k_stereo"] {
            assert_eq!(
                sniff(&data(&format!("{name}.{ext}"))),
                Some(codec),
                "{name}.{ext}"
            );
        }
    }
    assert_eq!(sniff(b"RIFF\0\0\0\0WAVE"), None);
    assert_eq!(sniff(b"fLaC"), None);
    assert_eq!(sniff(b""), None);
    // An ADTS AAC frame header has the sync but layer 0: not MP3.
    assert_eq!(sniff(&[0xFF, 0xF1, 0x50, 0x80]), None);
    assert_eq!(sniff(&[0xFF, 0xFB, 0x90, 0x64]), Some(Codec::Mp3));
}

/// Length, rate and channels as soundfile (MP3, Vorbis, Opus) decodes; for
/// M4A ffmpeg's start (the priming cut) and the track's own length (ffmpeg
/// 5 keeps the last access unit's padding: never more than 1,024 samples).
#[test]
fn lengths_rates_and_channels_are_the_references() {
    let want = expected();
    for (ext, codec) in EXTS {
        for name in ["speech16k_mono", "speech44k_stereo"] {
            let file = format!("{name}.{ext}");
            let (head, out) = decode_all(&data(&file), Channels::Mean).unwrap();
            let w = &want[&file];
            assert_eq!(head.codec, codec, "{file}");
            assert_eq!(
                u64::from(head.sample_rate),
                w["rate"].as_u64().unwrap(),
                "{file}"
            );
            assert_eq!(
                u64::from(head.channels),
                w["channels"].as_u64().unwrap(),
                "{file}"
            );
            let n = w["frames"].as_u64().unwrap() as usize;
            if codec == Codec::Aac {
                assert!(
                    out.len() <= n && n - out.len() < 1024,
                    "{file}: {} vs {n}",
                    out.len()
                );
            } else {
                assert_eq!(out.len(), n, "{file}");
            }
        }
    }
    // The encoded sources' own lengths: gapless M4A gives them exactly.
    let (_, m) = decode_all(&data("speech16k_mono.m4a"), Channels::Mean).unwrap();
    assert_eq!(m.len(), 8000);
    let (_, s) = decode_all(&data("speech44k_stereo.m4a"), Channels::Mean).unwrap();
    assert_eq!(s.len(), 15434);
}

/// Samples against the reference decodes. Tolerances: nanomp3's MP3 and
/// symphonia's Vorbis and AAC decoders are float implementations of the same standard
/// transforms as mpg123/libvorbis/ffmpeg (1e-5: a few float32 ulps of
/// accumulated rounding); Opus is libopus itself (a different libopus
/// version than soundfile's may differ in the last bits: 1e-4).
#[test]
fn samples_match_the_references() {
    for (ext, tol) in [("mp3", 1e-5), ("ogg", 1e-5), ("opus", 1e-4), ("m4a", 1e-5)] {
        let file = format!("speech16k_mono.{ext}");
        let (_, out) = decode_all(&data(&file), Channels::Mean).unwrap();
        let reference: Vec<f32> = data(&format!("{file}.ref.f32"))
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let n = out.len().min(reference.len());
        let worst = out[..n]
            .iter()
            .zip(&reference[..n])
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst <= tol, "{file}: max |diff| {worst} > {tol}");
        assert!(
            reference[..n].iter().any(|v| v.abs() > 0.05),
            "{file}: silent reference"
        );
    }
}

/// MP3 samples past full scale (a source louder than full scale) are kept,
/// as mpg123, soundfile's decoder, keeps them: no clamping to [-1, 1].
#[test]
fn mp3_keeps_samples_past_full_scale() {
    let dir = tempfile::tempdir().unwrap();
    let src = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("tests/data/codecs/speech16k_mono.mp3");
    let loud = dir.path().join("loud.mp3");
    let st = std::process::Command::new("ffmpeg")
        .args(["-loglevel", "error", "-y", "-i"])
        .arg(&src)
        .args(["-af", "volume=24dB", "-c:a", "libmp3lame"])
        .arg(&loud)
        .status()
        .expect("ffmpeg runs");
    assert!(st.success());
    let (_, x) = decode_all(&std::fs::read(&loud).unwrap(), Channels::Mean).unwrap();
    let peak = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(peak > 1.05, "peak {peak}");
}

#[test]
fn first_channel_and_limits_are_honoured() {
    for ext in ["mp3", "ogg", "opus", "m4a"] {
        let bytes = data(&format!("speech44k_stereo.{ext}"));
        let (_, mean) = decode_all(&bytes, Channels::Mean).unwrap();
        let (_, first) = decode_all(&bytes, Channels::First).unwrap();
        assert_eq!(mean.len(), first.len(), "{ext}");
        assert_ne!(mean, first, "{ext}: the channels differ (remixed source)");
        let mut part = Vec::new();
        open(&bytes)
            .unwrap()
            .decode(Channels::Mean, 3000, &mut part)
            .unwrap();
        assert!(
            part.len() >= 3000 && part.len() < mean.len(),
            "{ext}: {}",
            part.len()
        );
        assert_eq!(part[..3000], mean[..3000], "{ext}");
    }
}

#[test]
fn other_codecs_in_known_containers_are_unsupported_naming_the_codec() {
    for (file, needle) in [
        ("alac.m4a", "ALAC"),
        ("video_only.mp4", "video in MPEG-4 video"),
        ("flac.oga", "FLAC"),
    ] {
        let bytes = data(file);
        assert!(sniff(&bytes).is_some(), "{file}");
        let e = open(&bytes)
            .err()
            .unwrap_or_else(|| panic!("{file} opened"));
        assert!(e.is_unsupported(), "{file}: {e}");
        assert!(e.to_string().contains(needle), "{file}: {e}");
    }
}

#[test]
fn streams_cut_short_are_truncated_with_a_reason() {
    for ext in ["mp3", "ogg", "opus", "m4a"] {
        let bytes = data(&format!("speech16k_mono.{ext}"));
        for keep in [bytes.len() * 3 / 4, bytes.len() - 1] {
            let e = decode_all(&bytes[..keep], Channels::Mean)
                .err()
                .unwrap_or_else(|| panic!("{ext} cut to {keep} bytes decoded"));
            assert!(
                matches!(e, Error::Truncated { .. }) || matches!(e, Error::Malformed { .. }),
                "{ext}: {e}"
            );
            assert!(!e.is_unsupported());
        }
    }
    let e = decode_all(&data("speech16k_mono.opus")[..4000], Channels::Mean).unwrap_err();
    assert!(e.to_string().starts_with("truncated Ogg stream"), "{e}");
}

/// A sample table whose count cannot fit its box is a rejection before
/// symphonia sizes a vector from it (a 2³¹-entry `stts` made it allocate
/// 30 GB and abort the process: the proptest below found it).
#[test]
fn an_mp4_table_count_past_its_box_is_malformed_not_an_allocation() {
    for table in [b"stts", b"stsc", b"stco", b"stsz"] {
        let mut bytes = data("speech16k_mono.m4a");
        let at = bytes
            .windows(4)
            .position(|w| w == table)
            .unwrap_or_else(|| panic!("no {table:?}"));
        // type, version and flags, then the count (stsz: after the size).
        let count_at = at + 8 + if table == b"stsz" { 4 } else { 0 };
        bytes[count_at..count_at + 4].copy_from_slice(&0x7FFF_FFFFu32.to_be_bytes());
        let e = open(&bytes).err().expect("refused");
        let name = std::str::from_utf8(table).unwrap();
        assert!(
            e.to_string().contains(name) && e.to_string().contains("2147483647 entries"),
            "{e}"
        );
    }
}

/// A sample size past the end of the file is a rejection before symphonia
/// sizes the sample's buffer from it (4 GB declared in a 3 KB file: the
/// `flac_clip` fuzz target ran out of memory on
/// fuzz/corpus/flac_clip/oom_stsz_sample_size_past_the_file).
#[test]
fn an_mp4_sample_size_past_the_file_is_malformed_not_an_allocation() {
    let good = data("speech16k_mono.m4a");
    let at = good.windows(4).position(|w| w == b"stsz").expect("stsz");
    // type, version and flags, the constant size (0: a table), the count,
    // then the first entry.
    assert_eq!(good[at + 8..at + 12], [0; 4]);
    for size in [good.len() as u32 + 1, 0xF800_0000] {
        let mut bytes = good.clone();
        bytes[at + 16..at + 20].copy_from_slice(&size.to_be_bytes());
        let e = open(&bytes).err().expect("refused");
        assert!(
            e.to_string().contains("stsz") && e.to_string().contains(&format!("{size} bytes")),
            "{e}"
        );
    }
    open(&good).expect("the file itself opens");
}

/// An MP4 box: its size, type and body.
fn mp4_box(kind: &[u8; 4], body: &[u8]) -> Vec<u8> {
    let mut b = ((body.len() + 8) as u32).to_be_bytes().to_vec();
    b.extend_from_slice(kind);
    b.extend_from_slice(body);
    b
}

/// speech16k_mono.m4a with its `udta` (the last box of `moov`, the last
/// box of the file) replaced by one holding `udta_body`.
fn m4a_with_udta(udta_body: &[u8]) -> Vec<u8> {
    let good = data("speech16k_mono.m4a");
    let moov = good.windows(4).position(|w| w == b"moov").expect("moov") - 4;
    let udta = good.windows(4).position(|w| w == b"udta").expect("udta") - 4;
    let mut bytes = good[..udta].to_vec();
    bytes.extend_from_slice(&mp4_box(b"udta", udta_body));
    assert_eq!(
        be(&good[moov..]) as usize + moov,
        good.len(),
        "moov ends the file"
    );
    let moov_len = (bytes.len() - moov) as u32;
    bytes[moov..moov + 4].copy_from_slice(&moov_len.to_be_bytes());
    bytes
}

fn be(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().unwrap())
}

/// `udta` → `meta` (version and flags, then `ilst`) → one tag item holding
/// `atoms`.
fn tagged(atoms: &[u8]) -> Vec<u8> {
    let ilst = mp4_box(b"ilst", &mp4_box(b"\xa9too", atoms));
    let mut meta = vec![0; 4];
    meta.extend_from_slice(&ilst);
    mp4_box(b"meta", &meta)
}

/// An `ilst` tag's `data` atom declaring more bytes than its item holds is
/// a rejection naming it before symphonia sizes a buffer from it (2.7 GB
/// declared in a 3 KB file: the `flac_clip` fuzz target ran out of memory
/// on fuzz/corpus/flac_clip/oom_ilst_data_atom_past_its_item).
#[test]
fn an_mp4_metadata_atom_past_its_parent_is_malformed_not_an_allocation() {
    let data_atom = |size: u32| {
        let mut a = mp4_box(b"data", b"\0\0\0\x01\0\0\0\0Lavf62.3.100");
        a[..4].copy_from_slice(&size.to_be_bytes());
        a
    };
    // The tag as ffmpeg writes it opens.
    open(&m4a_with_udta(&tagged(&data_atom(28)))).expect("a well-formed tag opens");
    for size in [29, 0xA600_001D] {
        let bytes = m4a_with_udta(&tagged(&data_atom(size)));
        let e = open(&bytes).err().expect("refused");
        assert!(matches!(e, Error::Malformed { .. }), "{e}");
        let e = e.to_string();
        assert!(
            e.contains("box b\"data\"")
                && e.contains(&format!("declares {size} bytes"))
                && e.contains("28 bytes left in its parent b\"\\xa9too\""),
            "{e}"
        );
    }
    // The fuzz target's input, minimised.
    let fuzzed = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("fuzz/corpus/decode_file/oom_ilst_data_atom_past_its_item");
    let e = open(&std::fs::read(fuzzed).unwrap())
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains("box b\"data\" at byte 2622 declares 2785017885 bytes, more than the 29 bytes"),
        "{e}"
    );
    // Too short for its version, flags, country and language: symphonia's
    // length arithmetic would wrap.
    let e = open(&m4a_with_udta(&tagged(&mp4_box(b"data", &[0; 4]))))
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("less than its 8-byte header"), "{e}");
    // A `meta` of fewer bytes than its version and flags, and one laid out
    // as QuickTime's (no version and flags), which symphonia misreads.
    let e = open(&m4a_with_udta(&mp4_box(b"meta", &[0; 2])))
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("less than its version and flags"), "{e}");
    let quicktime = mp4_box(
        b"meta",
        &mp4_box(b"ilst", &mp4_box(b"\xa9too", &data_atom(28))),
    );
    let e = open(&m4a_with_udta(&quicktime))
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("QuickTime's layout"), "{e}");
}

/// An `esds` descriptor declaring more bytes than its box holds (the
/// DecoderSpecificInfo's buffer is sized from it, up to 256 MiB) is
/// malformed.
#[test]
fn an_mp4_esds_descriptor_past_its_box_is_malformed() {
    let mut bytes = data("speech16k_mono.m4a");
    let esds = bytes.windows(4).position(|w| w == b"esds").expect("esds");
    let info = esds
        + bytes[esds..]
            .windows(5)
            .position(|w| w == [5, 0x80, 0x80, 0x80, 5])
            .expect("DecoderSpecificInfo");
    bytes[info + 1..info + 5].copy_from_slice(&[0xFF, 0xFF, 0xFF, 0x7F]);
    let e = open(&bytes).err().expect("refused");
    assert!(matches!(e, Error::Malformed { .. }), "{e}");
    assert!(
        e.to_string().contains("descriptor 5") && e.to_string().contains("268435455 bytes"),
        "{e}"
    );
}

/// A fragmented file's sample sizes (`trun` entries, the `tfhd` and `trex`
/// defaults) past the end of the file are malformed, as `stsz`'s are.
#[test]
fn an_mp4_fragment_sample_size_past_the_file_is_malformed() {
    let ftyp = mp4_box(b"ftyp", b"M4A \0\0\x02\0");
    let huge = 0xF000_0000u32.to_be_bytes();
    // trun: flags 0x200 (sizes), one sample.
    let mut trun = vec![0, 0, 0x02, 0, 0, 0, 0, 1];
    trun.extend_from_slice(&huge);
    // tfhd: flags 0x10 (default size), track 1.
    let mut tfhd = vec![0, 0, 0, 0x10, 0, 0, 0, 1];
    tfhd.extend_from_slice(&huge);
    // trex: track, description index, duration, then the size.
    let mut trex = vec![0; 16];
    trex.extend_from_slice(&huge);
    trex.extend_from_slice(&[0; 4]);
    let cases = [
        (
            "trun",
            mp4_box(b"moof", &mp4_box(b"traf", &mp4_box(b"trun", &trun))),
        ),
        (
            "tfhd",
            mp4_box(b"moof", &mp4_box(b"traf", &mp4_box(b"tfhd", &tfhd))),
        ),
        (
            "trex",
            mp4_box(b"moov", &mp4_box(b"mvex", &mp4_box(b"trex", &trex))),
        ),
    ];
    for (kind, b) in cases {
        let mut bytes = ftyp.clone();
        bytes.extend_from_slice(&b);
        let e = mp4_tables::check(&bytes).expect_err("refused").to_string();
        assert!(
            e.contains(kind) && e.contains("4026531840 bytes"),
            "{kind}: {e}"
        );
    }
}

/// Decodes hostile bytes: Ok or an error, never a panic (the decoders run
/// under `guarded`, but `open`'s own parsing must not need it either).
fn no_panic(bytes: &[u8]) {
    if sniff(bytes).is_some()
        && let Ok(s) = open(bytes)
    {
        let mut out = Vec::new();
        let _ = s.decode(Channels::Mean, 1 << 20, &mut out);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn truncated_fixtures_never_panic(which in 0usize..8, cut in 0.0f64..1.0) {
        let (ext, _) = EXTS[which % 4];
        let name = if which < 4 { "speech16k_mono" } else { "speech44k_stereo" };
        let bytes = data(&format!("{name}.{ext}"));
        no_panic(&bytes[..(bytes.len() as f64 * cut) as usize]);
    }

    #[test]
    fn corrupted_fixtures_never_panic(
        which in 0usize..4,
        hits in proptest::collection::vec((0.0f64..1.0, any::<u8>()), 1..16),
    ) {
        let (ext, _) = EXTS[which];
        let mut bytes = data(&format!("speech16k_mono.{ext}"));
        for (at, v) in hits {
            let i = ((bytes.len() - 1) as f64 * at) as usize;
            bytes[i] = v;
        }
        no_panic(&bytes);
    }

    /// The seek index of a corrupted or cut recording (its AAC access
    /// units' section data read too), and the extents it plans: never a
    /// panic.
    #[test]
    fn corrupted_recordings_index_without_panic(
        which in 0usize..4,
        cut in 0.5f64..=1.0,
        hits in proptest::collection::vec((0.0f64..1.0, any::<u8>()), 1..24),
    ) {
        use std::io::Write;
        let (ext, _) = EXTS[which];
        let mut bytes = data(&format!("speech16k_mono.{ext}"));
        for (at, v) in hits {
            let i = ((bytes.len() - 1) as f64 * at) as usize;
            bytes[i] = v;
        }
        bytes.truncate((bytes.len() as f64 * cut) as usize);
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&bytes).unwrap();
        let head = &bytes[..bytes.len().min(64 << 10)];
        if let (Some(i), _) = index::Index::build(&f, bytes.len() as u64, head) {
            for offset_s in [0.0, 0.7, 2.5, 1e6] {
                let seg = crate::segment::Segment {
                    offset_s,
                    duration_s: Some(0.5),
                    ..Default::default()
                };
                let _ = i.extent(&seg);
            }
        }
    }
}

/// `decode_all` keeps every channel, interleaved: channel `c` of its frames
/// is `decode(Channel(c))` and their left-to-right mean is `decode(Mean)`,
/// bit for bit, with the same length (the same trimming), for each codec,
/// mono and stereo; `max_frames` stops it in frames.
#[test]
fn decode_all_interleaves_what_decode_mixes() {
    for ext in ["mp3", "ogg", "opus", "m4a"] {
        for name in [
            format!("speech16k_mono.{ext}"),
            format!("speech44k_stereo.{ext}"),
        ] {
            let bytes = data(&name);
            let mut all = Vec::new();
            let head = open(&bytes)
                .unwrap()
                .decode_all(usize::MAX, &mut all)
                .unwrap();
            let n = usize::from(head.channels);
            assert_eq!(all.len() % n, 0, "{name}");
            let frames: Vec<&[f32]> = all.chunks_exact(n).collect();
            let mut mean = Vec::new();
            open(&bytes)
                .unwrap()
                .decode(Mix::Mean, usize::MAX, &mut mean)
                .unwrap();
            assert_eq!(mean.len(), frames.len(), "{name}");
            for (i, f) in frames.iter().enumerate() {
                let mut s = f[0];
                for &v in &f[1..] {
                    s += v;
                }
                let m = if n == 1 { s } else { s / n as f32 };
                assert_eq!(m.to_bits(), mean[i].to_bits(), "{name} frame {i}");
            }
            for c in 0..n {
                let mut one = Vec::new();
                let m = Mix::Channel(c as u16);
                open(&bytes)
                    .unwrap()
                    .decode(m, usize::MAX, &mut one)
                    .unwrap();
                assert!(
                    one.iter()
                        .zip(&frames)
                        .all(|(a, f)| a.to_bits() == f[c].to_bits())
                );
            }
            let mut part = Vec::new();
            open(&bytes).unwrap().decode_all(1000, &mut part).unwrap();
            assert!(part.len() >= 1000 * n && part.len() % n == 0, "{name}");
            assert_eq!(part[..1000 * n], all[..1000 * n], "{name}");
        }
    }
}

/// `decode_all_to` hands on, in pieces, exactly what `decode_all` holds,
/// for each codec on streams long enough to be handed on many times; a
/// writer that refuses a piece stops the decode there.
#[test]
fn decode_all_to_writes_what_decode_all_holds() {
    let d = tempfile::tempdir().unwrap();
    let cases: [(usize, usize, &[&str], &str); 4] = [
        (16_000, 1, &["-c:a", "libmp3lame", "-b:a", "32k"], "l.mp3"),
        (44_100, 2, &["-c:a", "libvorbis"], "l.ogg"),
        (48_000, 2, &["-c:a", "libopus"], "l.opus"),
        (16_000, 1, &["-c:a", "aac"], "l.m4a"),
    ];
    for (rate, ch, args, name) in cases {
        let bytes =
            std::fs::read(super::part_tests::encode(d.path(), rate, ch, args, name)).unwrap();
        let mut all = Vec::new();
        let head = open(&bytes)
            .unwrap()
            .decode_all(usize::MAX, &mut all)
            .unwrap();
        let mut got = Vec::new();
        let mut pieces = 0;
        let mut put = |s: &[f32]| {
            got.extend_from_slice(s);
            pieces += 1;
            true
        };
        let done = open(&bytes)
            .unwrap()
            .decode_all_to(usize::MAX, 20_000, &mut put)
            .unwrap();
        assert_eq!((done.head, done.trimmed_late), (head, false), "{name}");
        assert_eq!(done.frames as usize * usize::from(head.channels), all.len());
        assert!(pieces > 10, "{name}: {pieces} pieces");
        assert_eq!(got.len(), all.len(), "{name}");
        assert!(
            got.iter()
                .zip(&all)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{name}"
        );
        let mut calls = 0;
        let mut refuse = |_: &[f32]| {
            calls += 1;
            false
        };
        let r = open(&bytes)
            .unwrap()
            .decode_all_to(usize::MAX, 20_000, &mut refuse);
        assert_eq!(calls, 1, "{name}");
        if let Ok(done) = r {
            assert!((done.frames as usize) < all.len() / 4, "{name}");
        }
    }
}

/// An end trim that reaches into frames already handed on (here a LAME
/// tag declaring half the MP3's frames) is reported, not written short.
#[test]
fn decode_all_to_reports_a_trim_into_frames_handed_on() {
    let d = tempfile::tempdir().unwrap();
    let path = super::part_tests::encode(
        d.path(),
        16_000,
        1,
        &["-c:a", "libmp3lame", "-b:a", "32k"],
        "t.mp3",
    );
    let mut bytes = std::fs::read(path).unwrap();
    let at = bytes
        .windows(4)
        .position(|w| w == b"Info" || w == b"Xing")
        .expect("ffmpeg writes a Xing/Info tag");
    let flags = u32::from_be_bytes(bytes[at + 4..at + 8].try_into().unwrap());
    assert!(flags & 1 != 0, "the tag holds a frame count");
    let frames = u32::from_be_bytes(bytes[at + 8..at + 12].try_into().unwrap());
    bytes[at + 8..at + 12].copy_from_slice(&(frames / 2).to_be_bytes());
    let mut whole = Vec::new();
    open(&bytes)
        .unwrap()
        .decode_all(usize::MAX, &mut whole)
        .unwrap();
    let mut put = |_: &[f32]| true;
    let done = open(&bytes)
        .unwrap()
        .decode_all_to(usize::MAX, 20_000, &mut put)
        .unwrap();
    assert!(
        done.trimmed_late,
        "{} frames kept of a longer decode",
        whole.len()
    );
}

/// The one MP4 box walker words a box that does not fit by where it is: at
/// a file's level a file cut short, inside a parent a malformed parent; a
/// size below its own header is malformed either way.
#[test]
fn a_box_that_does_not_fit_is_told_by_where_it_is() {
    use super::mp4::{Box4, Within, walk};
    let top = |data: &[u8]| walk(data, 100, Within::File).map(|b| b.len());
    // Two whole boxes (8 and 12 bytes), then the cases.
    let mut two = b"\0\0\0\x08free\0\0\0\x0cskip1234".to_vec();
    assert_eq!(top(&two).unwrap(), 2);
    let e = |r: Result<usize, Error>| r.unwrap_err().to_string();
    two.extend_from_slice(b"\0\0\0");
    assert!(
        e(top(&two)).contains("the file ends inside the header of the box at byte 120"),
        "{}",
        e(top(&two))
    );
    let large = b"\0\0\0\x01mdat\0\0";
    assert!(e(top(large)).contains("the file ends inside the header of box b\"mdat\" at byte 100"));
    let past = b"\0\0\0\x40moov\0\0\0\0";
    let m = e(top(past));
    assert!(
        m.contains(
            "box b\"moov\" at byte 100 declares 64 bytes, 12 follow (the file is cut short)"
        ),
        "{m}"
    );
    let small = b"\0\0\0\x04moov";
    assert!(e(top(small)).contains("box b\"moov\" at byte 100 declares 4 bytes"));
    let parent = Box4 {
        kind: *b"udta",
        body: past,
        at: 50,
    };
    let m = walk(parent.body, parent.at, Within::Parent(&parent))
        .map(|b| b.len())
        .unwrap_err()
        .to_string();
    assert!(
        m.contains(
            "box b\"moov\" at byte 50 declares 64 bytes, more than the 12 bytes left in its \
             parent b\"udta\" (12 bytes from byte 50)"
        ),
        "{m}"
    );
    let m = walk(&past[..5], 50, Within::Parent(&parent))
        .map(|b| b.len())
        .unwrap_err()
        .to_string();
    assert!(
        m.contains("the header of the box at byte 50 is cut short: 5 bytes left, its parent"),
        "{m}"
    );
}
