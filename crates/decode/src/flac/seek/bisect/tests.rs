//! The search over real encoders' files: ffmpeg's FLAC (no SEEKTABLE, fixed
//! block size), sox's with its SEEKTABLE taken out (stereo), and ffmpeg's
//! rewritten frame by frame into a variable-block-size stream. Every
//! segment decoded from its extent equals the same samples of the whole
//! file's decoding, and the search reads a small part of the file.

use std::path::Path;
use std::process::Command;

use super::*;
use crate::flac::{decode, decode_from, first_frame, stream_info};
use crate::policy::Channels;

/// A 16-bit WAV of `secs` seconds: a gliding tone and noise per channel.
fn wav(path: &Path, rate: u32, channels: u16, secs: u32) {
    let n = (rate * secs) as usize;
    let mut data = Vec::with_capacity(n * usize::from(channels) * 2);
    let mut x: u32 = 12345;
    for i in 0..n {
        let t = i as f64 / f64::from(rate);
        for c in 0..channels {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let noise = f64::from((x >> 16) & 0x7FFF) / 32768.0 - 0.5;
            let f = 220.0 * f64::from(c + 1) + 40.0 * (t / 7.0).sin();
            let v = 0.3 * (2.0 * std::f64::consts::PI * f * t).sin() + 0.1 * noise;
            data.extend_from_slice(&((v * 32767.0) as i16).to_le_bytes());
        }
    }
    let mut h = b"RIFF".to_vec();
    h.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    h.extend_from_slice(b"WAVEfmt \x10\x00\x00\x00\x01\x00");
    h.extend_from_slice(&channels.to_le_bytes());
    h.extend_from_slice(&rate.to_le_bytes());
    h.extend_from_slice(&(rate * u32::from(channels) * 2).to_le_bytes());
    h.extend_from_slice(&(channels * 2).to_le_bytes());
    h.extend_from_slice(&16u16.to_le_bytes());
    h.extend_from_slice(b"data");
    h.extend_from_slice(&(data.len() as u32).to_le_bytes());
    h.extend_from_slice(&data);
    std::fs::write(path, h).unwrap();
}

/// `tool args…` made the file; false (and a note) where the tool is missing.
fn made(tool: &str, args: &[&Path]) -> bool {
    let ok = Command::new(tool)
        .args(args)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("no {tool}: its FLAC files are left out");
    }
    ok
}

/// A FLAC of `secs` s of 16 kHz mono written by ffmpeg (no SEEKTABLE), in
/// `dir`; None without ffmpeg.
fn ffmpeg_flac(dir: &Path, secs: u32) -> Option<Vec<u8>> {
    let src = dir.join("a.wav");
    wav(&src, 16_000, 1, secs);
    let ff = dir.join("ff.flac");
    let args = ["-v", "error", "-i"].map(Path::new);
    let mut ffmpeg = args.to_vec();
    ffmpeg.extend([src.as_path(), Path::new("-y"), ff.as_path()]);
    made("ffmpeg", &ffmpeg).then(|| std::fs::read(&ff).unwrap())
}

/// The file with its SEEKTABLE turned into PADDING (same length).
fn without_seek_table(mut file: Vec<u8>) -> Vec<u8> {
    let audio = first_frame(&file).unwrap();
    let mut pos = 4;
    while pos < audio {
        let len = u32::from_be_bytes([0, file[pos + 1], file[pos + 2], file[pos + 3]]) as usize;
        if file[pos] & 0x7F == 3 {
            file[pos] = (file[pos] & 0x80) | 1;
            file[pos + 4..pos + 4 + len].fill(0);
        }
        pos += 4 + len;
    }
    file
}

/// CRC-16 of a FLAC frame (polynomial 0x8005, init 0).
fn crc16(b: &[u8]) -> u16 {
    b.iter().fold(0u16, |mut c, &x| {
        c ^= u16::from(x) << 8;
        for _ in 0..8 {
            c = if c & 0x8000 != 0 {
                c << 1 ^ 0x8005
            } else {
                c << 1
            };
        }
        c
    })
}

/// `v` coded as FLAC codes frame and sample numbers (UTF-8, extended).
fn utf8(v: u64) -> Vec<u8> {
    if v < 0x80 {
        return vec![v as u8];
    }
    let n = (1..7).find(|&n| v < 1 << (5 * n + 6)).unwrap_or(6) + 1;
    let mut out = vec![(0xFF00u16 >> n) as u8 | (v >> (6 * (n - 1))) as u8];
    out.extend(
        (0..n - 1)
            .rev()
            .map(|k| 0x80 | ((v >> (6 * k)) & 0x3F) as u8),
    );
    out
}

/// A fixed-block-size stream rewritten as a variable one: each frame's
/// header carries its first sample instead of its frame number (CRC-8 and
/// CRC-16 recomputed); the audio is the same.
fn to_variable(file: &[u8]) -> Vec<u8> {
    let info = stream_info(file).unwrap();
    let audio = first_frame(file).unwrap();
    let (_, block0, _) = header(&file[audio..], &info, (false, 1)).unwrap();
    let found: Vec<(usize, u64, u64, usize)> = (audio..file.len() - 1)
        .filter_map(|p| {
            let (s, b, len) = header(&file[p..], &info, (false, block0))?;
            Some((p, s, b, len))
        })
        .collect();
    let mut out = file[..audio].to_vec();
    // STREAMINFO's minimum block size: a variable stream's is below its
    // maximum.
    out[8..10].copy_from_slice(&256u16.to_be_bytes());
    let mut i = 0;
    loop {
        let (at, sample, block, len) = found[i];
        let next = found[i + 1..].iter().position(|f| f.1 == sample + block);
        let end = next.map_or(file.len(), |k| found[i + 1 + k].0);
        let number_len = file[at + 4].leading_ones().max(1) as usize;
        let mut frame = vec![0xFF, 0xF9, file[at + 2], file[at + 3]];
        frame.extend(utf8(sample));
        frame.extend_from_slice(&file[at + 4 + number_len..at + len - 1]);
        frame.push(crc8(&frame));
        frame.extend_from_slice(&file[at + len..end - 2]);
        frame.extend_from_slice(&crc16(&frame).to_be_bytes());
        out.extend(frame);
        match next {
            Some(k) => i += 1 + k,
            None => return out,
        }
    }
}

fn seg(offset_s: f64, duration_s: Option<f64>) -> Segment {
    Segment {
        offset_s,
        duration_s,
        ..Segment::default()
    }
}

/// Every segment of `segs` decoded from its searched extent equals the
/// whole file's decoding at its samples; returns (bytes the searches read,
/// bytes of the extents).
fn check(file: &[u8], segs: &[Segment]) -> (u64, u64) {
    let mut whole = Vec::new();
    let info = decode(file, Channels::Mean, usize::MAX, &mut whole).unwrap();
    // What the planner reads of the file first (`plan::manifest`).
    let mut h = super::super::head(&file[..file.len().min(64 << 10)], file.len() as u64)
        .expect("a FLAC head");
    assert!(h.points.is_empty(), "the file has no seek points");
    let (mut probed, mut extents) = (0u64, 0u64);
    let mut read = |at: u64, buf: &mut [u8]| {
        let from = (at as usize).min(file.len());
        let n = buf.len().min(file.len() - from);
        buf[..n].copy_from_slice(&file[from..from + n]);
        probed += n as u64;
        Ok(n)
    };
    for s in segs {
        let (first, count) = s.frames(info.sample_rate);
        let e = h
            .search(s, &mut read)
            .unwrap_or_else(|| panic!("no extent for {s:?}"));
        assert!(e.base_frame <= first && first - e.base_frame < u64::from(info.max_block));
        extents += e.len;
        let mut part = e.prefix.clone();
        part.extend_from_slice(&file[e.start as usize..(e.start + e.len) as usize]);
        let mut got = Vec::new();
        decode_from(&part, Channels::Mean, usize::MAX, e.base_frame, &mut got).unwrap();
        let skip = (first - e.base_frame) as usize;
        let n = count.map_or(whole.len() - first as usize, |n| {
            (n as usize).min(whole.len() - first as usize)
        });
        assert!(got.len() >= skip + n, "{s:?}: {} decoded", got.len());
        assert!(
            got[skip..skip + n] == whole[first as usize..first as usize + n],
            "{s:?} differs from the whole file's samples"
        );
        // The frames the segment needs: at most one block more on each side.
        let bytes_per_sample = file.len() as f64 / whole.len() as f64;
        let most = (n as f64 + 2.5 * f64::from(info.max_block)) * bytes_per_sample;
        assert!(
            (e.len as f64) < most * 1.5 + 4096.0,
            "{s:?}: {} bytes",
            e.len
        );
    }
    (probed, extents)
}

/// Offsets over the whole file, short and long segments, one at the very
/// start, one running to the end, one ending past it.
fn segments(secs: f64) -> Vec<Segment> {
    let mut v: Vec<Segment> = (0..37)
        .map(|i| {
            let at = (f64::from(i) * 0.618_034 * secs).rem_euclid(secs - 4.0);
            seg(
                (at * 1e6).round() / 1e6,
                Some(0.05 + f64::from(i % 5) * 0.77),
            )
        })
        .collect();
    v.extend([
        seg(0.0, Some(1.0)),
        seg(0.01, Some(0.001)),
        seg(secs - 3.3, None),
        seg(secs - 1.0, Some(5.0)),
    ]);
    v
}

#[test]
fn segments_of_flac_without_a_seek_table_decode_as_the_whole_file() {
    let d = tempfile::tempdir().unwrap();
    let secs = 240;
    let Some(file) = ffmpeg_flac(d.path(), secs) else {
        return;
    };
    let segs = segments(f64::from(secs));
    let (probed, extents) = check(&file, &segs);
    eprintln!(
        "ffmpeg, {} B: searches read {probed} B for {} segments ({extents} B of frames)",
        file.len(),
        segs.len()
    );
    // Far less than one whole read, let alone one per segment.
    assert!(probed < file.len() as u64 / 2, "{probed} B read");

    let variable = to_variable(&file);
    assert_eq!(variable[first_frame(&variable).unwrap() + 1], 0xF9);
    check(&variable, &segs);
}

#[test]
fn segments_of_sox_stereo_flac_without_its_seek_table() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("s.wav");
    let secs = 60;
    wav(&src, 44_100, 2, secs);
    let sx = d.path().join("sx.flac");
    if !made("sox", &[&src, &sx]) {
        return;
    }
    let file = without_seek_table(std::fs::read(&sx).unwrap());
    check(&file, &segments(f64::from(secs)));
}

#[test]
fn a_frame_header_is_believed_only_with_its_fields_and_crc() {
    let info = StreamInfo {
        sample_rate: 16_000,
        channels: 1,
        bits: 16,
        total_samples: 1_000_000,
        min_block: 4096,
        max_block: 4096,
    };
    // Frame 3 of a fixed 4096-sample stream: block code 12 (4096), rate
    // code 5 (16 kHz), mono, 16-bit.
    let mut h = vec![0xFF, 0xF8, 0xC5, 0x08, 0x03];
    h.push(crc8(&h));
    assert_eq!(header(&h, &info, (false, 4096)), Some((3 * 4096, 4096, 6)));
    // The other strategy, a bad CRC, stereo, 44.1 kHz, past the stream.
    assert_eq!(header(&h, &info, (true, 4096)), None);
    let mut bad = h.clone();
    bad[5] ^= 1;
    assert_eq!(header(&bad, &info, (false, 4096)), None);
    for (i, v) in [(3, 0x18u8), (2, 0xC9)] {
        let mut other = h[..5].to_vec();
        other[i] = v;
        other.push(crc8(&other));
        assert_eq!(header(&other, &info, (false, 4096)), None, "{other:x?}");
    }
    let mut far = vec![0xFF, 0xF8, 0xC5, 0x08];
    far.extend(utf8(300));
    far.push(crc8(&far));
    assert_eq!(header(&far, &info, (false, 4096)), None);
    assert_eq!(utf8(300), [0xC4, 0xAC]);
    assert_eq!(utf8(0x7FF), [0xDF, 0xBF]);
    assert_eq!(utf8(0x800), [0xE0, 0xA0, 0x80]);
}

/// Damaged frames, a cut-off file and noise instead of frames: every
/// search ends (an extent inside the file, or None: read whole), nothing
/// panics, and an extent that avoids the damage still decodes exactly.
#[test]
fn damaged_or_cut_files_never_mislead_the_search() {
    let d = tempfile::tempdir().unwrap();
    let Some(good) = ffmpeg_flac(d.path(), 60) else {
        return;
    };
    let mut whole = Vec::new();
    decode(&good, Channels::Mean, usize::MAX, &mut whole).unwrap();
    let audio = first_frame(&good).unwrap();
    let mut x: u32 = 7;
    let mut noisy = good.clone();
    for b in &mut noisy[audio + 1000..] {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        *b = (x >> 16) as u8;
    }
    let mut holed = good.clone();
    let mid = good.len() / 2;
    holed[mid..mid + 60_000].fill(0);
    let cut = good[..good.len() * 2 / 3].to_vec();
    for (name, file) in [("noise", &noisy), ("hole", &holed), ("cut", &cut)] {
        let mut h = super::super::head(&file[..64 << 10], file.len() as u64).unwrap();
        let mut read = |at: u64, buf: &mut [u8]| {
            let from = (at as usize).min(file.len());
            let n = buf.len().min(file.len() - from);
            buf[..n].copy_from_slice(&file[from..from + n]);
            Ok(n)
        };
        for s in segments(60.0) {
            let Some(e) = h.search(&s, &mut read) else {
                continue;
            };
            assert!(e.start >= audio as u64 && e.start + e.len <= file.len() as u64);
            let range = e.start as usize..(e.start + e.len) as usize;
            if file[range.clone()] != good[range.clone()] {
                continue; // damaged frames: the decoder's to reject
            }
            let mut part = e.prefix.clone();
            part.extend_from_slice(&file[range]);
            let mut got = Vec::new();
            decode_from(&part, Channels::Mean, usize::MAX, e.base_frame, &mut got).unwrap();
            let at = e.base_frame as usize;
            assert!(got == whole[at..at + got.len()], "{name} {s:?}");
        }
    }
}
