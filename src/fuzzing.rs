//! The fuzz targets' bodies (only with the `test-hooks` feature, never in
//! the product's API): each takes arbitrary bytes and exercises one parser
//! of hostile input as the product calls it, asserting what must hold — no
//! panic, no hang, memory bounded by the input's size or a stated cap,
//! results within bounds (a planned extent inside the file).
//!
//! `fuzz/` (cargo-fuzz, its own workspace) has one target per function,
//! named after it, which only calls it; `tests/it/fuzz_replay.rs` runs
//! every file of `fuzz/corpus/<target>/` through the same function on the
//! stable toolchain, so what the fuzzer found stays fixed. The serve
//! sidecar's body is `app::serve::sidecar::fuzz_sidecar` (a lower layer
//! never imports `app`), the manifest's `plan::manifest::fuzz_manifest`
//! (re-exported here), the lossy containers' in
//! `decode::compressed::fuzzing` (re-exported here).

use std::io;

use crate::decode::clip::{Channels, ClipDecoder, Policy, Resample};
use crate::decode::flac::{self, seek};
use crate::decode::wav::{self, SampleFormat};
use crate::model::Segment;

use crate::decode::compressed::fuzzing::probe_segments;
pub use crate::decode::compressed::fuzzing::{
    decode_file, lossy_part, mp3_frames, mp4_sections, mp4_table, ogg_pages,
};
pub use crate::plan::manifest::fuzz_manifest as manifest;

/// Called once by each fuzz target before the first input: a panic inside
/// a third-party crate (a decoder refusing hostile bytes with a panic) no
/// longer aborts the process, so the product's `catch_unwind` around the
/// decoders turns it into a rejection, as in production. libFuzzer's
/// abort stays for every other panic (melforge's code, the standard
/// library's checks called from it), and for a third-party panic nothing
/// catches.
pub fn init() {
    let abort = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let third_party = info.location().is_some_and(|l| {
            let f = l.file();
            f.contains("/.cargo/registry/") || f.contains("/.cargo/git/")
        });
        if !third_party {
            abort(info);
        }
    }));
}

/// The WAV parser: an accepted header satisfies `decode::wav`'s invariants,
/// and decoding writes exactly the promised samples (integer formats land
/// in [-1, 1]) and zeroes the rest of the output. The first byte picks the
/// output length so padding and trimming both run.
pub fn wav_parse(data: &[u8]) {
    let (out_len, bytes) = match data.split_first() {
        Some((&n, rest)) => (usize::from(n) * 17, rest),
        None => (0, data),
    };
    let mut out = vec![f32::NAN; out_len];
    let Ok(info) = wav::parse(bytes) else {
        assert!(wav::decode(bytes, 4096, &mut out).is_err());
        return;
    };
    assert!(info.channels >= 1 && info.sample_rate >= 1 && info.frames >= 1);
    let block_align = usize::from(info.block_align);
    assert_eq!(
        block_align,
        usize::from(info.channels) * info.format.bytes_per_sample()
    );
    assert!(info.data_offset + info.frames * block_align <= bytes.len());

    let decoded = wav::decode(bytes, info.sample_rate, &mut out).expect("parse accepted it");
    assert_eq!(decoded, info);
    let n = info.frames.min(out_len);
    assert!(out[n..].iter().all(|&x| x == 0.0));
    if !matches!(info.format, SampleFormat::F32 | SampleFormat::F64) {
        assert!(out[..n].iter().all(|&x| (-1.0..=1.0).contains(&x)));
    }
}

/// The FLAC and clip path: any input yields a clip or a typed error. The
/// first byte picks the policy (resampling on or off, channel policy) and
/// the clip length; the rest is taken both as it is and behind a `fLaC`
/// marker, so the FLAC parser sees every input. An accepted FLAC header is
/// self-consistent, and every decoded sample is finite and within [-1, 1].
pub fn flac_clip(data: &[u8]) {
    let (pick, bytes) = match data.split_first() {
        Some((&b, rest)) => (b, rest),
        None => (0, data),
    };
    let policy = Policy {
        resample: if pick & 1 == 0 {
            Resample::Off
        } else {
            Resample::SoxrHq
        },
        channels: match (pick >> 1) % 3 {
            0 => Channels::Mean,
            1 => Channels::First,
            _ => Channels::Reject,
        },
    };
    let mut clip = vec![f32::NAN; usize::from(pick >> 3) * 64];
    let mut dec = ClipDecoder::new(4096, policy);
    let mut flac_bytes = flac::MAGIC.to_vec();
    flac_bytes.extend_from_slice(bytes);
    for input in [bytes, &flac_bytes[..]] {
        if let Ok(info) = flac::stream_info(input) {
            assert!(info.sample_rate >= 1 && info.channels >= 1);
            assert!([8, 16, 24].contains(&info.bits));
            assert!(info.min_block >= 16 && info.max_block >= info.min_block);
            let mut out = Vec::new();
            if flac::decode(input, Channels::Mean, 1 << 16, &mut out).is_ok() {
                assert!(!out.is_empty());
                assert!(out.iter().all(|x| x.is_finite() && x.abs() <= 1.0));
            }
        }
        // A clip or a typed error; IEEE-float WAVs may carry any value.
        let _ = dec.decode(input, &mut clip);
    }
}

/// The largest read a FLAC frame search makes: a gap of three probes of
/// at most 64 KiB and a header (`seek::bisect`).
const FLAC_READ_CAP: usize = 3 * (64 << 10) + 16;

/// FLAC seek planning: the metadata (`seek::head`), the SEEKTABLE's extent
/// and, without one, the frame search (`seek::bisect`) for segments from
/// the start to past the end. Each read is within [`FLAC_READ_CAP`], an
/// extent lies in the file and starts at or before its segment, and the
/// part decodes as a job's would.
pub fn flac_seek(data: &[u8]) {
    let len = data.len() as u64;
    let Some(mut head) = seek::head(&data[..data.len().min(1 << 20)], len) else {
        return;
    };
    let mut read = |at: u64, buf: &mut [u8]| -> io::Result<usize> {
        assert!(buf.len() <= FLAC_READ_CAP, "a read of {} bytes", buf.len());
        let at = usize::try_from(at).unwrap_or(usize::MAX).min(data.len());
        let n = buf.len().min(data.len() - at);
        buf[..n].copy_from_slice(&data[at..at + n]);
        Ok(n)
    };
    let rate = head.sample_rate;
    for (i, seg) in probe_segments().enumerate() {
        let found = match head.extent(&seg) {
            Some(e) => Some(e),
            None => head.search(&seg, &mut read),
        };
        let Some(e) = found else {
            continue;
        };
        assert!(
            e.start.checked_add(e.len).is_some_and(|end| end <= len) && e.len > 0,
            "extent {}+{} in a file of {len} bytes",
            e.start,
            e.len
        );
        let (first, _) = seg.frames(rate);
        assert!(e.base_frame <= first, "{e:?} starts after sample {first}");
        if i % 3 != 0 {
            continue;
        }
        let mut bytes = e.prefix.clone();
        bytes.extend_from_slice(&data[e.start as usize..(e.start + e.len) as usize]);
        let part = Segment {
            base_frame: e.base_frame,
            ..seg
        };
        let policy = Policy {
            resample: Resample::Off,
            channels: Channels::Mean,
        };
        let mut out = Vec::new();
        let _ = ClipDecoder::new(rate, policy).decode_natural_segment(
            &bytes,
            Some(&part),
            Some(1 << 22),
            &mut out,
        );
    }
}

/// A tar archive's index (`plan::tar`, WebDataset shards and NeMo's
/// tarred audio): every member's extent lies in the file after its header,
/// members do not overlap and come in order, every problem has a reason,
/// and the bytes read stay within two passes over the file (the headers,
/// and a resync's scan).
pub fn tar_index(data: &[u8]) {
    use std::io::Write as _;
    let Ok(mut f) = tempfile::tempfile() else {
        return;
    };
    if f.write_all(data).is_err() {
        return;
    }
    let size = data.len() as u64;
    let Ok(ix) = crate::plan::tar::index_file(&f, size) else {
        return;
    };
    let mut end = 0;
    for m in &ix.members {
        assert!(
            m.start >= m.header_at + 512 && m.start >= end,
            "{m:?} overlaps"
        );
        assert!(m.start + m.len <= size, "{m:?} past {size} bytes");
        assert!(m.head.len() as u64 <= m.len.min(crate::plan::tar::SNIFF as u64));
        end = m.start + m.len;
    }
    for p in &ix.problems {
        assert!(!p.reason.is_empty() && p.at < size.max(1), "{p:?}");
    }
    assert!(
        ix.bytes_read <= 2 * size + 1024,
        "{} bytes read of {size}",
        ix.bytes_read
    );
}

/// A parquet file's audio column (`plan::parquet`, Hugging Face's
/// layout): whatever the bytes, a file is an error or rows and
/// rejections; every row's extent lies in what was spilled, rows come in
/// order and every rejection has a reason.
pub fn parquet_audio(data: &[u8]) {
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let path = dir.path().join("fuzz.parquet");
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let Ok(mut spill) = std::fs::File::create(dir.path().join("spill")) else {
        return;
    };
    let o = crate::plan::parquet::Options {
        audio_column: None,
        max_spill_bytes: 64 << 20,
    };
    let Ok(s) = crate::plan::parquet::spill(&path, &mut spill, &o) else {
        return;
    };
    let mut last = None;
    for r in &s.rows {
        assert!(r.start + r.len <= s.bytes_written, "{r:?} past the spill");
        assert!(
            last.is_none_or(|l| r.row > l),
            "row {} after {last:?}",
            r.row
        );
        last = Some(r.row);
    }
    for r in &s.rejected {
        assert!(!r.reason.is_empty() && r.rows.start < r.rows.end, "{r:?}");
    }
}

/// The most frames [`decode_bytes`] lets a stream decode to.
const DECODE_BYTES_MAX_FRAMES: usize = 1 << 22;

/// The bytes entry point of the in-process extension (`melforge.decode`:
/// `decode::native::decode_range`): any container, mono, a part of it. The
/// first two bytes pick the offset (in sixteenths of a second) and the
/// duration (in eighths; 0: to the end). What it keeps lies within the part
/// and the frame cap, a refusal has its reason, and nothing panics.
pub fn decode_bytes(data: &[u8]) {
    use crate::decode::native::{Range, decode_range};
    let (range, bytes) = match data {
        [o, d, rest @ ..] => {
            let range = Range {
                offset_s: f64::from(*o) / 16.0,
                duration_s: (*d != 0).then(|| f64::from(*d) / 8.0),
            };
            (range, rest)
        }
        _ => (Range::default(), data),
    };
    let mut out = Vec::new();
    let cap = DECODE_BYTES_MAX_FRAMES;
    match decode_range(bytes, (Channels::Mean, cap), range, &mut out) {
        Ok(native) => {
            let keep = range.samples(native.sample_rate, cap);
            assert!(
                out.len() <= keep.len(),
                "{} samples kept of {keep:?}",
                out.len()
            );
            assert!(native.channels > 0 && native.sample_rate > 0, "{native:?}");
        }
        Err(e) => assert!(!e.to_string().is_empty(), "a refusal without its reason"),
    }
}
