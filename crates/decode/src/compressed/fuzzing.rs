//! The fuzz entry points of the lossy containers' own parsers (only with the
//! `test-hooks` feature; `melforge::fuzzing` lists every target, `fuzz/` runs
//! them under libFuzzer and `tests/it/fuzz_replay.rs` replays their corpora).
//!
//! Each takes arbitrary bytes and panics only where an invariant is broken:
//! every parser here answers hostile bytes with `None`, a verdict or a typed
//! [`Error`](super::Error), within bounds (a planned extent inside the file,
//! memory bounded by the input's size), and a part decode places its first
//! sample at or before the segment (`decode::clip::segment` asserts it).

use super::frames::{Mp3Frame, OggPage, Packets};
use super::index::{Extent, Index};
use super::mp4::{self, Verdict, mono_unit};
use super::{Codec, mp3, open_part};
use crate::clip::{Channels, ClipDecoder, Policy, Resample};
use crate::policy::Mix;
use crate::segment::{LossyPart, Segment};

/// The file's first bytes that `plan::manifest` hands the index.
const HEAD: usize = 64 << 10;

/// Samples a fuzzed decode may hand out (far more than any input of the
/// fuzzer's sizes decodes to; a bound, not a limit the inputs reach).
const MAX_FRAMES: usize = 1 << 22;

/// `n` bytes of `file` at `at` (fewer at its end, none past it), as the
/// index reads a file.
fn reader(file: &[u8]) -> impl FnMut(u64, usize) -> Option<Vec<u8>> + '_ {
    move |at, n| {
        let at = usize::try_from(at).unwrap_or(usize::MAX).min(file.len());
        let end = at.saturating_add(n).min(file.len());
        Some(file[at..end].to_vec())
    }
}

/// Segments the index plans for (and `melforge::fuzzing`'s FLAC seek): starts
/// from the first sample to far past any fuzzed stream's end, each with no
/// end, a short one and a long one.
pub fn probe_segments() -> impl Iterator<Item = Segment> {
    const OFFSETS: [f64; 7] = [0.0, 0.013, 0.3, 0.9, 1.7, 3.5, 1e6];
    const DURATIONS: [Option<f64>; 3] = [None, Some(0.02), Some(0.8)];
    OFFSETS.into_iter().flat_map(|offset_s| {
        DURATIONS.into_iter().map(move |duration_s| Segment {
            offset_s,
            duration_s,
            ..Segment::default()
        })
    })
}

/// The seek index of `file` and the extent of every probe segment, each
/// checked to lie in the file; then some of those parts decoded through
/// the product's segment path, which places their first sample.
fn index_and_parts(file: &[u8]) {
    let len = file.len() as u64;
    let mut read = reader(file);
    let (index, bytes) = Index::build_from(len, &file[..file.len().min(HEAD)], &mut read);
    let Some(index) = index else {
        return;
    };
    assert_eq!(index.bytes_read(), bytes);
    for (i, seg) in probe_segments().enumerate() {
        let Some(e) = index.extent(&seg) else {
            continue;
        };
        check_extent(&e, len);
        if i % 4 == 0 {
            decode_part(file, &e, &seg);
        }
    }
}

/// An extent lies in the file, and its prefix is bounded by the file's size
/// (header pages, or 12 bytes per access unit behind the AAC setup).
fn check_extent(e: &Extent, len: u64) {
    let end = e.start.checked_add(e.len);
    assert!(
        end.is_some_and(|end| end <= len),
        "extent {}+{} runs past the file's {len} bytes",
        e.start,
        e.len
    );
    assert!(
        e.prefix.len() as u64 <= 16 * len + 64,
        "a prefix of {} bytes for a file of {len}",
        e.prefix.len()
    );
}

/// Decodes `seg` from its planned part as `decode::clip` does for a job
/// (whose `debug_assert!` checks the part starts at or before the segment).
fn decode_part(file: &[u8], e: &Extent, seg: &Segment) {
    let mut bytes = e.prefix.to_vec();
    bytes.extend_from_slice(&file[e.start as usize..(e.start + e.len) as usize]);
    let Ok(part) = open_part(&bytes, e.part) else {
        return;
    };
    let rate = part.head().sample_rate;
    if rate == 0 {
        return;
    }
    let policy = Policy {
        resample: Resample::Off,
        channels: Channels::Mean,
    };
    let seg = Segment {
        lossy: Some(e.part),
        ..*seg
    };
    let mut out = Vec::new();
    let mut dec = ClipDecoder::new(rate, policy);
    if dec
        .decode_natural_segment(&bytes, Some(&seg), Some(MAX_FRAMES), &mut out)
        .is_ok()
    {
        let (_, count) = seg.frames(rate);
        if let Some(n) = count {
            assert!(
                out.len() as u64 <= n,
                "{} samples for a {n}-sample segment",
                out.len()
            );
        }
    }
}

/// The section data of a mono AAC access unit (`mp4::sections`): a verdict
/// on the unit's first bytes stands for the whole unit (the index reads a
/// unit's first 256 bytes and more only when those are `Short`).
pub fn mp4_sections(data: &[u8]) {
    let whole = mono_unit(data);
    let cuts = (0..=data.len().min(48)).chain([64, 128, 256, 1024]);
    for k in cuts.filter(|&k| k <= data.len()) {
        let v = mono_unit(&data[..k]);
        assert!(
            v == Verdict::Short || v == whole,
            "the first {k} bytes say {v:?}, the whole unit {whole:?}"
        );
    }
}

/// The MP4 box walk, sound track and sample table, and the AAC index and
/// parts planned from them.
pub fn mp4_table(data: &[u8]) {
    if let Ok(boxes) = mp4::boxes(data, 0) {
        let mut end = 0;
        for b in &boxes {
            let at = b.body.as_ptr() as usize - data.as_ptr() as usize;
            assert_eq!(at, b.at, "a box body's offset");
            assert!(at >= end + 8, "box bodies overlap or lack their header");
            end = at + b.body.len();
        }
        assert_eq!(end, data.len(), "the boxes cover the bytes");
    }
    if let Ok(track) = mp4::audio_track(data) {
        for rate in [8_000, 44_100, 96_000] {
            let _ = track.trim(rate);
        }
    }
    let len = data.len() as u64;
    if let Some(t) = mp4::table(&mut reader(data), len) {
        assert!(!t.sizes.is_empty());
        assert_eq!(t.offsets.len(), t.sizes.len());
        assert_eq!(t.starts.len(), t.sizes.len() + 1);
        assert!(
            t.starts.windows(2).all(|w| w[0] <= w[1]),
            "unit starts fall"
        );
        for (&o, &s) in t.offsets.iter().zip(&t.sizes) {
            assert!(
                o + u64::from(s) <= len,
                "a unit at {o}+{s} past {len} bytes"
            );
        }
    }
    index_and_parts(data);
}

/// The Ogg page walk (`check_ogg_pages`), the page header and CRC check
/// the part path uses, packets joined across pages, and the Ogg index.
pub fn ogg_pages(data: &[u8]) {
    let _ = super::check_ogg_pages(data);
    if let Some(first) = super::first_ogg_packet(data) {
        let at = first.as_ptr() as usize - data.as_ptr() as usize;
        assert!(at + first.len() <= data.len());
    }
    let _ = super::sniff(data);
    let (mut pos, mut fed, mut out) = (0usize, 0usize, 0usize);
    let mut packets = Packets::default();
    while let Some(p) = OggPage::parse(&data[pos..]) {
        assert_eq!(p.header, 27 + usize::from(data[pos + 26]));
        assert!(p.header <= OggPage::MAX_HEADER);
        let Some(page) = data.get(pos..pos + p.len()) else {
            assert!(
                !p.checksum_ok(&data[pos..]),
                "a page cut short passes its CRC"
            );
            break;
        };
        if p.checksum_ok(page) {
            // CRC-32 catches every single-bit error.
            let mut bad = page.to_vec();
            let at = (p.granule as usize ^ p.serial as usize) % bad.len();
            bad[at] ^= 1 << (p.flags % 8);
            assert!(!p.checksum_ok(&bad), "byte {at} flipped passes the CRC");
        }
        fed += p.body;
        packets.page(&p, page, |packet, _| {
            out += packet.len();
            assert!(
                out <= fed,
                "packets of {out} bytes from {fed} bytes of pages"
            );
        });
        pos += p.len();
    }
    index_and_parts(data);
}

/// MP3 frame headers, the ID3v2 length, the Xing/Info/LAME tag of the
/// first frame (gapless trimming), the stream's opening and the MP3 index
/// (frame headers hopped over).
pub fn mp3_frames(data: &[u8]) {
    let id3 = mp3::id3v2_len(data);
    assert!(id3 == 0 || (data.starts_with(b"ID3") && id3 >= 10));
    let body = data.get(id3..).unwrap_or_default();
    for bytes in [data, body] {
        if let Some(f) = Mp3Frame::parse(bytes) {
            assert!(
                super::is_mp3_sync(bytes),
                "a frame header that sniff refuses"
            );
            assert!(f.size >= 24, "a frame of {} bytes", f.size);
            assert!(matches!(f.samples, 576 | 1152) && matches!(f.channels, 1 | 2));
            assert!((8_000..=48_000).contains(&f.sample_rate));
        }
        if let Some(g) = mp3::tag(bytes) {
            let f = Mp3Frame::parse(bytes).expect("a tag is inside a frame");
            assert!(bytes.len() >= f.size);
            if g.length.is_some() {
                assert!(g.origin >= 529, "the decoder's delay is cut");
            }
        }
    }
    if let Ok((_, head)) = mp3::Stream::open(data) {
        assert_eq!(head.codec, Codec::Mp3);
        assert!(head.sample_rate >= 8_000 && matches!(head.channels, 1 | 2));
    }
    index_and_parts(data);
}

/// The part path with arbitrary bytes as the part (`open_part`: an AAC
/// part's header, Ogg header pages then audio pages with their CRCs, MP3
/// frames), placed a few ways; then the bytes as a whole file, with the
/// index and the parts it plans.
pub fn lossy_part(data: &[u8]) {
    let places = [
        LossyPart {
            origin: 0,
            first: Some(0),
            length: None,
        },
        LossyPart {
            origin: 1105,
            first: Some(1152),
            length: Some(4000),
        },
        LossyPart {
            origin: 312,
            first: None,
            length: Some(48_000),
        },
    ];
    for (i, place) in places.into_iter().enumerate() {
        let Ok(part) = open_part(data, place) else {
            continue;
        };
        let end = [u64::MAX, 3000, 0][i];
        let mut out = Vec::new();
        if let Ok(base) = part.decode(Mix::Mean, end, &mut out) {
            let stop = end.min(place.length.unwrap_or(u64::MAX));
            assert!(
                base.saturating_add(out.len() as u64) <= stop.max(base),
                "{} samples from {base} past the stop at {stop}",
                out.len()
            );
        }
    }
    index_and_parts(data);
}

/// The whole-file decode of an MP3, Ogg or MP4 stream three ways: mixed to
/// mono, every channel kept, and every channel handed on in pieces. Each
/// stays within its frame bound, the mono samples are the kept channels'
/// mean, and the pieces are the kept frames.
pub fn decode_file(data: &[u8]) {
    if super::sniff(data).is_none() {
        return;
    }
    let mut mono = Vec::new();
    let mono = super::open(data)
        .and_then(|s| s.decode(Mix::Mean, MAX_FRAMES, &mut mono))
        .map(|h| (h, mono));
    let mut all = Vec::new();
    let all = super::open(data)
        .and_then(|s| s.decode_all(MAX_FRAMES, &mut all))
        .map(|h| (h, all));
    let mut pieces = Vec::new();
    let drained = super::open(data).and_then(|s| {
        let mut write = |f: &[f32]| {
            pieces.extend_from_slice(f);
            true
        };
        s.decode_all_to(MAX_FRAMES, 4096, &mut write)
    });
    if let Ok((_, m)) = &mono {
        assert!(!m.is_empty() && m.len() <= MAX_FRAMES);
    }
    let Ok((head, all)) = all else {
        return;
    };
    let nch = usize::from(head.channels).max(1);
    assert_eq!(all.len() % nch, 0, "frames of {nch} channels");
    assert!(all.len() / nch <= MAX_FRAMES);
    if let Ok((_, m)) = &mono {
        assert_eq!(
            m.len(),
            all.len() / nch,
            "mono and all-channel decodes' frames"
        );
        for (i, (f, &x)) in all.chunks_exact(nch).zip(m).enumerate() {
            let mean = f.iter().sum::<f32>() / nch as f32;
            let tol = 1e-5 * (1.0 + mean.abs());
            assert!(
                (mean - x).abs() <= tol || (mean.is_nan() && x.is_nan()),
                "frame {i}: mean {mean}, mono {x}"
            );
        }
    }
    if let Ok(d) = drained {
        assert_eq!(d.head, head);
        assert_eq!(d.frames as usize, all.len() / nch);
        if !d.trimmed_late {
            assert_eq!(pieces.len(), all.len(), "pieces of the kept frames");
            assert!(
                pieces
                    .iter()
                    .zip(&all)
                    .all(|(a, b)| a.to_bits() == b.to_bits())
            );
        }
    }
}
