//! A segment decoded from its part ([`index`] + [`part`]) against the same
//! samples of the whole-file decode, over minute-long ffmpeg encodes of a
//! synthetic signal: MP3 (MPEG-2 16 kHz mono with a LAME tag, MPEG-1
//! 44.1 kHz stereo, and one without any tag), Ogg Vorbis and Ogg Opus (16
//! and 48 kHz).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::index::Index;
use super::*;
use crate::decode::policy::Channels;
use crate::model::Segment;

const SECONDS: usize = 61;

/// A tone sweep with noise and silences: every frame type gets exercised.
fn signal(rate: usize, ch: usize) -> Vec<i16> {
    let mut seed = 0x1234_5678u32;
    (0..rate * SECONDS)
        .flat_map(|i| {
            let t = i as f64 / rate as f64;
            let gate = if (t * 0.7).fract() < 0.15 { 0.0 } else { 1.0 };
            let f = 150.0 + 900.0 * (t * 0.31).fract();
            (0..ch)
                .map(|c| {
                    seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    let noise = (seed >> 16) as f64 / 65_536.0 - 0.5;
                    let v = gate * (0.4 * (2.0 * std::f64::consts::PI * f * t + c as f64).sin())
                        + 0.05 * noise;
                    (v * 32_767.0) as i16
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

fn wav(path: &Path, rate: usize, ch: usize) {
    let data: Vec<u8> = signal(rate, ch)
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let mut h = b"RIFF".to_vec();
    h.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    h.extend_from_slice(b"WAVEfmt ");
    h.extend_from_slice(&16u32.to_le_bytes());
    h.extend_from_slice(&1u16.to_le_bytes());
    h.extend_from_slice(&(ch as u16).to_le_bytes());
    h.extend_from_slice(&(rate as u32).to_le_bytes());
    h.extend_from_slice(&((rate * ch * 2) as u32).to_le_bytes());
    h.extend_from_slice(&((ch * 2) as u16).to_le_bytes());
    h.extend_from_slice(&16u16.to_le_bytes());
    h.extend_from_slice(b"data");
    h.extend_from_slice(&(data.len() as u32).to_le_bytes());
    h.extend_from_slice(&data);
    std::fs::write(path, h).unwrap();
}

/// `ffmpeg -i <wav> <args> <out>`.
fn encode(dir: &Path, rate: usize, ch: usize, args: &[&str], out: &str) -> PathBuf {
    let src = dir.join(format!("src{rate}_{ch}.wav"));
    if !src.exists() {
        wav(&src, rate, ch);
    }
    let dst = dir.join(out);
    let st = Command::new("ffmpeg")
        .args(["-loglevel", "error", "-y", "-i"])
        .arg(&src)
        .args(args)
        .arg(&dst)
        .status()
        .expect("ffmpeg runs");
    assert!(st.success(), "ffmpeg {args:?}");
    dst
}

/// The segments tried: near the start, mid-way, late, to the end, and one
/// running past the end.
const SEGMENTS: [(f64, Option<f64>); 7] = [
    (0.0, Some(1.0)),
    (0.013, Some(2.5)),
    (7.31, Some(0.7)),
    (33.3333, Some(4.0)),
    (59.9, Some(5.0)),
    (45.0, None),
    (60.95, None),
];

/// What [`check`] measured over [`SEGMENTS`].
struct Measured {
    /// The largest difference from the whole-file decode.
    diff: f32,
    /// Bytes of the parts read, and of the file read once per segment.
    read: u64,
    whole: u64,
    /// Segments without a part (read whole).
    whole_reads: usize,
}

/// Decodes each segment from its part and compares it with the whole-file
/// decode's samples.
fn check(path: &Path) -> Measured {
    let bytes = std::fs::read(path).unwrap();
    let mut whole = Vec::new();
    let head = open(&bytes)
        .unwrap()
        .decode(Channels::Mean, usize::MAX, &mut whole)
        .unwrap();
    let f = std::fs::File::open(path).unwrap();
    let (index, _) = Index::build(&f, bytes.len() as u64, &bytes[..bytes.len().min(64 << 10)]);
    let index = index.unwrap_or_else(|| panic!("{}: no index", path.display()));
    let mut worst = 0f32;
    let mut read = 0u64;
    let mut whole_reads = 0;
    for (offset_s, duration_s) in SEGMENTS {
        let seg = Segment {
            offset_s,
            duration_s,
            ..Segment::default()
        };
        let (first, count) = seg.frames(head.sample_rate);
        let last = count.map_or(whole.len() as u64, |n| (first + n).min(whole.len() as u64));
        let Some(e) = index.extent(&seg) else {
            whole_reads += 1;
            continue;
        };
        read += e.len;
        let mut part = e.prefix.to_vec();
        part.extend_from_slice(&bytes[e.start as usize..(e.start + e.len) as usize]);
        let p = open_part(&part, e.part).unwrap();
        assert_eq!(p.head(), head);
        let mut out = Vec::new();
        let end = count.map_or(u64::MAX, |n| first + n);
        let base = p.decode(Channels::Mean, end, &mut out).unwrap();
        assert!(base <= first, "{}: {seg:?} base {base}", path.display());
        let got = &out[(first - base) as usize..];
        let want = &whole[first as usize..last as usize];
        assert_eq!(got.len(), want.len(), "{}: {seg:?}", path.display());
        let d = got
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        worst = worst.max(d);
    }
    let m = Measured {
        diff: worst,
        read,
        whole: bytes.len() as u64 * SEGMENTS.len() as u64,
        whole_reads,
    };
    eprintln!(
        "{}: max diff {:e}, parts {} bytes against {} read whole",
        path.display(),
        m.diff,
        m.read,
        m.whole
    );
    // The parts hold the segments (a quarter of the file is in the
    // to-the-end ones) and a few frames or pages around each.
    assert!(m.read * 5 < m.whole, "{}", path.display());
    m
}

#[test]
fn mp3_segments_from_their_frames_are_the_whole_decodes_samples() {
    let d = tempfile::tempdir().unwrap();
    let cases = [
        encode(
            d.path(),
            16_000,
            1,
            &["-c:a", "libmp3lame", "-b:a", "32k"],
            "m16.mp3",
        ),
        encode(
            d.path(),
            44_100,
            2,
            &["-c:a", "libmp3lame", "-q:a", "4"],
            "s44.mp3",
        ),
        encode(
            d.path(),
            22_050,
            1,
            &["-c:a", "libmp3lame", "-b:a", "24k", "-write_xing", "0"],
            "notag.mp3",
        ),
    ];
    // With the reservoir and overlap of the pre-roll frames complete, the
    // decoder's state is the whole decode's: the same samples, bit for bit.
    for p in &cases[..2] {
        let m = check(p);
        assert_eq!((m.diff, m.whole_reads), (0.0, 0), "{}", p.display());
    }
    // Without a tag symphonia estimates the stream's end: the segments that
    // reach the last frame are read whole.
    let m = check(&cases[2]);
    assert_eq!((m.diff, m.whole_reads), (0.0, 3));
}

#[test]
fn ogg_segments_from_their_pages_are_the_whole_decodes_samples() {
    let d = tempfile::tempdir().unwrap();
    let cases = [
        encode(
            d.path(),
            16_000,
            1,
            &["-c:a", "libvorbis", "-q:a", "3"],
            "v16.ogg",
        ),
        encode(d.path(), 44_100, 2, &["-c:a", "libvorbis"], "v44.ogg"),
        encode(
            d.path(),
            16_000,
            1,
            &["-c:a", "libopus", "-b:a", "24k"],
            "o16.opus",
        ),
        encode(d.path(), 48_000, 2, &["-c:a", "libopus"], "o48.opus"),
    ];
    // Vorbis: the part's first packet primes the overlap, the rest is the
    // whole decode's bit for bit.
    for p in &cases[..2] {
        let m = check(p);
        assert_eq!((m.diff, m.whole_reads), (0.0, 0), "{}", p.display());
    }
    // Opus: libopus restarted 5 s before the segment comes close to the
    // decoder that ran from the start, not always exactly (equal on these
    // files already after 1 s; after 80 ms 7.7e-6 per sample).
    for p in &cases[2..] {
        let m = check(p);
        assert!(
            m.diff < 1e-4 && m.whole_reads == 0,
            "{}: {}",
            p.display(),
            m.diff
        );
    }
}

/// A damaged or cut recording gets no index (it is then read whole and the
/// whole-file decoder names what is wrong): junk between MP3 frames, an
/// Ogg stream cut before its end-of-stream page; MP4 and FLAC in Ogg are not
/// indexed.
#[test]
fn damaged_recordings_get_no_index() {
    let d = tempfile::tempdir().unwrap();
    let mp3 = std::fs::read(encode(
        d.path(),
        16_000,
        1,
        &["-c:a", "libmp3lame", "-b:a", "32k"],
        "m.mp3",
    ))
    .unwrap();
    let ogg = std::fs::read(encode(d.path(), 16_000, 1, &["-c:a", "libopus"], "o.opus")).unwrap();
    let index = |bytes: &[u8]| {
        let p = d.path().join("x");
        std::fs::write(&p, bytes).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        Index::build(&f, bytes.len() as u64, &bytes[..bytes.len().min(64 << 10)]).0
    };
    assert!(index(&mp3).is_some() && index(&ogg).is_some());
    let mut junk = mp3.clone();
    junk.splice(mp3.len() / 2..mp3.len() / 2, [0x55; 300]);
    assert!(index(&junk).is_none());
    assert!(index(&ogg[..ogg.len() * 2 / 3]).is_none());
    assert!(index(&data("speech16k_mono.m4a")).is_none());
    assert!(index(&data("flac.oga")).is_none());
}

fn data(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/codecs")
        .join(name);
    std::fs::read(&p).unwrap()
}

/// A byte flipped inside a part's audio pages or its header pages fails
/// that page's checksum: the part is malformed, naming the check, never
/// decoded into other samples.
#[test]
fn a_damaged_page_in_a_part_fails_its_checksum() {
    let d = tempfile::tempdir().unwrap();
    for (args, name) in [
        (&["-c:a", "libvorbis"][..], "v.ogg"),
        (&["-c:a", "libopus"][..], "o.opus"),
    ] {
        let path = encode(d.path(), 16_000, 1, args, name);
        let bytes = std::fs::read(&path).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let (index, _) = Index::build(&f, bytes.len() as u64, &bytes[..bytes.len().min(64 << 10)]);
        let index = index.unwrap();
        let seg = Segment {
            offset_s: 20.0,
            duration_s: Some(3.0),
            ..Segment::default()
        };
        let e = index.extent(&seg).unwrap();
        let mut part = e.prefix.to_vec();
        part.extend_from_slice(&bytes[e.start as usize..(e.start + e.len) as usize]);
        let decode = |part: &[u8]| -> Result<usize, Error> {
            let mut out = Vec::new();
            open_part(part, e.part)?.decode(Channels::Mean, u64::MAX, &mut out)?;
            Ok(out.len())
        };
        assert!(decode(&part).unwrap() > 0, "{name}");
        // The middle of the audio pages, then the last byte of the header
        // pages (the codec setup).
        for at in [e.prefix.len() + e.len as usize / 2, e.prefix.len() - 1] {
            let mut bad = part.clone();
            bad[at] ^= 0x20;
            let err = decode(&bad).expect_err(name);
            let msg = err.to_string();
            assert!(msg.contains("CRC check"), "{name} byte {at}: {msg}");
        }
    }
}
