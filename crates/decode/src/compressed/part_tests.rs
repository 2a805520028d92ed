//! A segment decoded from its part ([`index`] + [`part`]) against the same
//! samples of the whole-file decode, over minute-long ffmpeg encodes of a
//! synthetic signal: MP3 (MPEG-2 16 kHz mono with a LAME tag, MPEG-1
//! 44.1 kHz stereo, and one without any tag), Ogg Vorbis and Ogg Opus (16
//! and 48 kHz).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::index::Index;
use super::*;
use crate::policy::Channels;
use crate::segment::Segment;

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
    write_wav(path, rate, ch, &signal(rate, ch));
}

fn write_wav(path: &Path, rate: usize, ch: usize, samples: &[i16]) {
    let data: Vec<u8> = samples.iter().flat_map(|v| v.to_le_bytes()).collect();
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
pub(super) fn encode(dir: &Path, rate: usize, ch: usize, args: &[&str], out: &str) -> PathBuf {
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
    /// Samples compared, and those more than 1e-6 off.
    compared: usize,
    differing: usize,
}

/// Decodes each segment from its part and compares it with the whole-file
/// decode's samples.
fn check(path: &Path) -> Measured {
    check_segments(path, &SEGMENTS, Index::extent)
}

/// [`check`] over `segments`, with the parts `plan` gives; a segment
/// without one is decoded from the file's start up to its end, as the
/// manifest source then does, and compared too.
fn check_segments(
    path: &Path,
    segments: &[(f64, Option<f64>)],
    plan: fn(&Index, &Segment) -> Option<super::index::Extent>,
) -> Measured {
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
    let (mut compared, mut differing) = (0, 0);
    for &(offset_s, duration_s) in segments {
        let seg = Segment {
            offset_s,
            duration_s,
            ..Segment::default()
        };
        let (first, count) = seg.frames(head.sample_rate);
        let last = count.map_or(whole.len() as u64, |n| (first + n).min(whole.len() as u64));
        let Some(e) = plan(&index, &seg) else {
            whole_reads += 1;
            let mut out = Vec::new();
            let end = usize::try_from(last).unwrap();
            open(&bytes)
                .unwrap()
                .decode(Channels::Mean, end, &mut out)
                .unwrap();
            assert_eq!(out[first as usize..end], whole[first as usize..end]);
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
        compared += got.len();
        differing += got
            .iter()
            .zip(want)
            .filter(|(a, b)| (*a - *b).abs() > 1e-6)
            .count();
    }
    let m = Measured {
        diff: worst,
        read,
        whole: bytes.len() as u64 * segments.len() as u64,
        whole_reads,
        compared,
        differing,
    };
    eprintln!(
        "{}: max diff {:e} ({} of {} samples over 1e-6), parts {} bytes against {} read \
         whole",
        path.display(),
        m.diff,
        m.differing,
        m.compared,
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

/// AAC: with the pre-roll's overlap complete, a part is the whole decode's
/// bit for bit, except in bands coded as perceptual noise (PNS, which
/// ffmpeg's encoder uses on noisy bands by default), where the decoder
/// draws from a generator whose state depends on every band drawn since
/// the stream's start. The index reads each unit's section codebooks and
/// plans a part only where no unit before it may draw: every part it
/// gives is exact, and the other segments are decoded from the start.
#[test]
fn m4a_segments_from_their_access_units_are_the_whole_decodes_samples() {
    let d = tempfile::tempdir().unwrap();
    let no_pns = ["-c:a", "aac", "-aac_pns", "0"];
    let mono = [
        // ffmpeg writes the moov after the media data…
        encode(
            d.path(),
            16_000,
            1,
            &[&no_pns[..], &["-b:a", "32k"]].concat(),
            "a16.m4a",
        ),
        // …or, with faststart, before it.
        encode(
            d.path(),
            44_100,
            1,
            &[&no_pns[..], &["-movflags", "+faststart"]].concat(),
            "a44fast.m4a",
        ),
    ];
    for p in &mono {
        let m = check(p);
        assert_eq!((m.diff, m.whole_reads), (0.0, 0), "{}", p.display());
    }
    // Stereo: the second channel's sections lie past the first's
    // spectrum, so only parts from the first unit are planned (the first
    // two segments'); without PNS the others would be exact too.
    let stereo = encode(d.path(), 44_100, 2, &no_pns, "a44.m4a");
    let m = check(&stereo);
    assert_eq!((m.diff, m.whole_reads), (0.0, 5));
    let m = check_segments(&stereo, &SEGMENTS, Index::planned);
    assert_eq!((m.diff, m.whole_reads), (0.0, 0));
    // ffmpeg's default codes noise from the first second on: the segments
    // are read whole, where parts would be off in the noise bands (0.043
    // at 16 kHz mono, 0.28 at 44.1 kHz stereo at a tone's onset, on under
    // 4 % of the samples; a misplaced part is off everywhere, by up to 0.8).
    let pns = [
        encode(
            d.path(),
            16_000,
            1,
            &["-c:a", "aac", "-b:a", "32k"],
            "p16.m4a",
        ),
        encode(d.path(), 44_100, 2, &["-c:a", "aac"], "p44.m4a"),
    ];
    for p in &pns {
        let m = check(p);
        assert_eq!((m.diff, m.whole_reads), (0.0, 5), "{}", p.display());
        let m = check_segments(p, &SEGMENTS, Index::planned);
        assert!(
            m.diff > 0.0 && m.diff < 0.3 && m.differing * 20 < m.compared,
            "{}: {} ({} of {})",
            p.display(),
            m.diff,
            m.differing,
            m.compared
        );
    }
}

/// A mono recording whose first 30 s are encoded without PNS and the rest
/// with it (two encodes joined by ffmpeg's concat demuxer, the access
/// units copied): the first unit coding noise is the second encode's
/// first noisy one, at 30.08 s; the parts planned up to it are the whole
/// decode's, and most parts a plan without the rule would start past it
/// are not.
#[test]
fn m4a_parts_stop_at_the_first_unit_coding_noise() {
    let d = tempfile::tempdir().unwrap();
    let args = ["-c:a", "aac", "-b:a", "32k"];
    let clean = [&args[..], &["-aac_pns", "0", "-t", "30"]].concat();
    encode(d.path(), 16_000, 1, &clean, "h1.m4a");
    encode(
        d.path(),
        16_000,
        1,
        &[&args[..], &["-ss", "30"]].concat(),
        "h2.m4a",
    );
    std::fs::write(d.path().join("list.txt"), "file 'h1.m4a'\nfile 'h2.m4a'\n").unwrap();
    let out = d.path().join("joined.m4a");
    let st = Command::new("ffmpeg")
        .args([
            "-loglevel",
            "error",
            "-y",
            "-f",
            "concat",
            "-safe",
            "0",
            "-i",
        ])
        .arg(d.path().join("list.txt"))
        .args(["-c", "copy"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success());
    let (mut exact, mut whole, mut differ) = (0, 0, 0);
    let mut last_exact = 0.0;
    for i in 0..40 {
        let seg = [(20.0 + f64::from(i) * 0.5, Some(1.0))];
        let m = check_segments(&out, &seg, Index::extent);
        if m.whole_reads == 0 {
            assert_eq!(
                (m.diff, whole),
                (0.0, 0),
                "{seg:?}: parts only before the noise"
            );
            exact += 1;
            last_exact = seg[0].0;
            continue;
        }
        whole += 1;
        let m = check_segments(&out, &seg, Index::planned);
        if m.diff > 0.0 {
            differ += 1;
        }
    }
    eprintln!(
        "parts {exact}, read whole {whole} ({differ} of whose planned parts differ), last \
         part at {last_exact} s"
    );
    // A part may start 2 units (128 ms) before its segment. Measured: 21
    // parts, 19 segments read whole, all 19 of whose parts would differ.
    assert!((30.0..30.5).contains(&last_exact), "{last_exact}");
    assert!(differ * 2 > whole, "{differ} of {whole}");
}

/// A damaged or cut recording gets no index (it is then read whole and the
/// whole-file decoder names what is wrong): junk between MP3 frames, an
/// Ogg stream cut before its end-of-stream page, an M4A whose moov or media
/// data is cut or whose sample table is damaged; FLAC in Ogg is not indexed.
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
    // M4A: the moov at the end cut short, or at the start with the media
    // data cut short; a sample table whose counts disagree.
    let m4a = std::fs::read(encode(d.path(), 16_000, 1, &["-c:a", "aac"], "a.m4a")).unwrap();
    let fast = ["-c:a", "aac", "-movflags", "+faststart"];
    let fast = std::fs::read(encode(d.path(), 16_000, 1, &fast, "f.m4a")).unwrap();
    assert!(index(&m4a).is_some() && index(&fast).is_some());
    assert!(index(&data("speech16k_mono.m4a")).is_some());
    assert!(index(&m4a[..m4a.len() - 200]).is_none());
    assert!(index(&fast[..fast.len() - 200]).is_none());
    let at = m4a.windows(4).position(|w| w == b"stsz").unwrap();
    let mut bad = m4a.clone();
    bad[at + 15] ^= 1; // the sample count's low byte
    assert!(index(&bad).is_none());
    assert!(index(&data("flac.oga")).is_none());
}

fn data(name: &str) -> Vec<u8> {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
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
