//! The sample table of an MP4/M4A sound track, read from its `moov` box
//! alone (found by hopping over the top-level box headers, at the file's
//! start or end): the AudioSpecificConfig (`stsd` → `mp4a` → `esds`), each
//! access unit's duration (`stts`), size (`stsz`) and byte offset (`stsc`
//! and `stco`/`co64`). Anything unexpected — a `moov` cut short or missing,
//! tables that disagree on the sample count, an access unit past the end of
//! the file, a sample entry of another version, a timescale other than the
//! sample rate, AAC other than LC — gives no table: the recording is then
//! read whole and the whole-file decoder names what is wrong, if anything.

use super::{Box4, Track, be32, be64, boxes, find, sound};

/// Reads `n` bytes at a file offset (fewer at the end of the file).
pub(in crate::compressed) type Read<'a> = dyn FnMut(u64, usize) -> Option<Vec<u8>> + 'a;

/// The largest `moov` read (a sample table of some 16 million access units).
const MOST_MOOV: u64 = 256 << 20;

/// A sound track's access units, in decoding order.
#[derive(Debug)]
pub(in crate::compressed) struct Table {
    pub asc: Vec<u8>,
    /// The sample entry's rate (what the whole-file decode reports).
    pub rate: u32,
    pub channels: u16,
    pub track: Track,
    /// Byte offset and size of each access unit.
    pub offsets: Vec<u64>,
    pub sizes: Vec<u32>,
    /// The first sample of each access unit, then the total.
    pub starts: Vec<u64>,
}

/// The table of the MP4 file of `len` bytes that `read` reads.
pub(in crate::compressed) fn table(read: &mut Read<'_>, len: u64) -> Option<Table> {
    let moov = read_moov(read, len)?;
    let root = Box4 {
        kind: *b"moov",
        body: &moov.1,
        at: usize::try_from(moov.0).ok()?,
    };
    let (trak, track) = sound(&root).ok()?;
    let stbl = find(&trak, &[b"mdia", b"minf", b"stbl"]).ok()??;
    let child = |k: &[u8; 4]| find(&stbl, &[k]).ok().flatten().map(|b| b.body);
    let (asc, rate) = sample_entry(child(b"stsd")?)?;
    let channels = u16::try_from(asc_channels(&asc)?).ok()?;
    if track.timescale != rate || asc_rate(&asc)? != rate || asc.first()? >> 3 != 2 {
        return None;
    }
    let sizes = stsz(child(b"stsz")?, len)?;
    let durations = stts(child(b"stts")?, sizes.len())?;
    let chunks = match child(b"stco") {
        Some(b) => entries(b, 4, |e| be32(e, 0).map(u64::from))?,
        None => entries(child(b"co64")?, 8, |e| be64(e, 0))?,
    };
    let per_chunk = entries(child(b"stsc")?, 12, |e| Some((be32(e, 0)?, be32(e, 4)?)))?;
    let offsets = offsets(&chunks, &per_chunk, &sizes)?;
    if sizes.is_empty() {
        return None;
    }
    let ends_inside = offsets
        .iter()
        .zip(&sizes)
        .all(|(&o, &s)| o.checked_add(u64::from(s)).is_some_and(|e| e <= len));
    if !ends_inside {
        return None;
    }
    let mut starts = Vec::with_capacity(durations.len() + 1);
    let mut at = 0u64;
    for d in durations {
        starts.push(at);
        at = at.checked_add(u64::from(d))?;
    }
    starts.push(at);
    Some(Table {
        asc,
        rate,
        channels,
        track,
        offsets,
        sizes,
        starts,
    })
}

/// The file offset and body of the top-level `moov` box.
fn read_moov(read: &mut Read<'_>, len: u64) -> Option<(u64, Vec<u8>)> {
    let mut pos = 0u64;
    while pos.checked_add(8)? <= len {
        let h = read(pos, 16)?;
        let (size, header) = match be32(&h, 0)? {
            0 => (len - pos, 8),
            1 => (be64(&h, 8)?, 16),
            s => (u64::from(s), 8),
        };
        if size < header || pos.checked_add(size)? > len {
            return None;
        }
        if &h[4..8] == b"moov" {
            if size > MOST_MOOV {
                return None;
            }
            let body = read(pos + header, usize::try_from(size - header).ok()?)?;
            return Some((pos + header, body));
        }
        pos += size;
    }
    None
}

/// Entries of a full box whose body is version/flags, a count, then
/// `count` entries of `size` bytes (checked to be there).
fn entries<T>(b: &[u8], size: usize, f: impl Fn(&[u8]) -> Option<T>) -> Option<Vec<T>> {
    let n = be32(b, 4)? as usize;
    let table = b.get(8..8usize.checked_add(n.checked_mul(size)?)?)?;
    table.chunks_exact(size).map(f).collect()
}

/// Each access unit's duration, from `stts`'s runs (which must cover the
/// `n` units `stsz` sizes).
fn stts(b: &[u8], n: usize) -> Option<Vec<u32>> {
    let runs = entries(b, 8, |e| Some((be32(e, 0)?, be32(e, 4)?)))?;
    let total: u64 = runs.iter().map(|&(k, _)| u64::from(k)).sum();
    if total != n as u64 {
        return None;
    }
    Some(
        runs.iter()
            .flat_map(|&(k, d)| std::iter::repeat_n(d, k as usize))
            .collect(),
    )
}

/// Each access unit's size, from `stsz` (one size for all, or a table).
fn stsz(b: &[u8], len: u64) -> Option<Vec<u32>> {
    let fixed = be32(b, 4)?;
    let n = be32(b, 8)?;
    if fixed != 0 {
        if u64::from(fixed) * u64::from(n) > len {
            return None;
        }
        return Some(vec![fixed; n as usize]);
    }
    let table = b.get(12..12usize.checked_add((n as usize).checked_mul(4)?)?)?;
    table.chunks_exact(4).map(|e| be32(e, 0)).collect()
}

/// Each access unit's offset: the chunks in order, each holding the
/// samples `stsc` says (its runs start at 1-based chunk numbers).
fn offsets(chunks: &[u64], per_chunk: &[(u32, u32)], sizes: &[u32]) -> Option<Vec<u64>> {
    let mut out = Vec::with_capacity(sizes.len());
    let mut run = 0usize;
    for (c, &start) in chunks.iter().enumerate() {
        while per_chunk
            .get(run + 1)
            .is_some_and(|&(first, _)| first as usize <= c + 1)
        {
            run += 1;
        }
        let &(first, n) = per_chunk.get(run)?;
        if first as usize > c + 1 {
            return None;
        }
        let mut at = start;
        for _ in 0..n {
            let size = *sizes.get(out.len())?;
            out.push(at);
            at = at.checked_add(u64::from(size))?;
        }
    }
    (out.len() == sizes.len()).then_some(out)
}

/// The AudioSpecificConfig and sample rate of the first `stsd` entry, an
/// `mp4a` of version 0 or 1.
fn sample_entry(stsd: &[u8]) -> Option<(Vec<u8>, u32)> {
    let size = be32(stsd, 8)? as usize;
    let entry = stsd.get(16..8usize.checked_add(size)?)?;
    if stsd.get(12..16)? != b"mp4a" {
        return None;
    }
    let children = match u16::from_be_bytes(entry.get(8..10)?.try_into().ok()?) {
        0 => 28,
        1 => 44,
        _ => return None,
    };
    let rate = be32(entry, 24)? >> 16;
    let entry_box = Box4 {
        kind: *b"mp4a",
        body: entry.get(children..)?,
        at: 0,
    };
    let esds = boxes(entry_box.body, 0)
        .ok()?
        .into_iter()
        .find(|b| &b.kind == b"esds")?;
    Some((asc_of_esds(esds.body)?, rate))
}

/// The DecoderSpecificInfo inside an `esds` box (ISO 14496-1 7.2.6):
/// ES_Descriptor → DecoderConfigDescriptor (MPEG-4 audio) → tag 5.
fn asc_of_esds(b: &[u8]) -> Option<Vec<u8>> {
    let (tag, es) = descriptor(b.get(4..)?)?;
    if tag != 3 {
        return None;
    }
    let flags = *es.get(2)?;
    let mut p = 3;
    if flags & 0x80 != 0 {
        p += 2;
    }
    if flags & 0x40 != 0 {
        p += 1 + usize::from(*es.get(p)?);
    }
    if flags & 0x20 != 0 {
        p += 2;
    }
    let (tag, config) = descriptor(es.get(p..)?)?;
    if tag != 4 || *config.first()? != 0x40 {
        return None;
    }
    let (tag, info) = descriptor(config.get(13..)?)?;
    (tag == 5 && info.len() >= 2).then(|| info.to_vec())
}

/// A descriptor's tag and body (its length in up to four 7-bit bytes).
fn descriptor(b: &[u8]) -> Option<(u8, &[u8])> {
    let tag = *b.first()?;
    let mut len = 0usize;
    let mut p = 1;
    loop {
        let v = *b.get(p)?;
        len = (len << 7) | usize::from(v & 0x7F);
        p += 1;
        if v & 0x80 == 0 || p == 5 {
            break;
        }
    }
    Some((tag, b.get(p..p.checked_add(len)?)?))
}

/// The sample rate an AudioSpecificConfig declares.
fn asc_rate(asc: &[u8]) -> Option<u32> {
    const RATES: [u32; 13] = [
        96_000, 88_200, 64_000, 48_000, 44_100, 32_000, 24_000, 22_050, 16_000, 12_000, 11_025,
        8_000, 7_350,
    ];
    let v = u16::from_be_bytes([*asc.first()?, *asc.get(1)?]);
    if v >> 11 == 31 {
        return None; // an escaped object type: not AAC-LC
    }
    match (v >> 7) & 0xF {
        15 => {
            let b = asc.get(1..5)?;
            let raw = u32::from_be_bytes(b.try_into().ok()?);
            Some((raw >> 7) & 0xFF_FFFF)
        }
        i => RATES.get(usize::from(i)).copied(),
    }
}

/// The channel count of an AAC AudioSpecificConfig (ISO 14496-3 1.6.2.1:
/// object type, sampling frequency index, channel configuration 1–7).
pub(in crate::compressed) fn asc_channels(asc: &[u8]) -> Option<usize> {
    let bits = |from: usize, n: usize| -> Option<u32> {
        let mut v = 0u32;
        for i in from..from + n {
            let byte = *asc.get(i / 8)?;
            v = (v << 1) | u32::from((byte >> (7 - i % 8)) & 1);
        }
        Some(v)
    };
    let mut at = 5;
    if bits(0, 5)? == 31 {
        at += 6;
    }
    let freq = bits(at, 4)?;
    at += if freq == 15 { 28 } else { 4 };
    match bits(at, 4)? {
        c @ 1..=6 => Some(c as usize),
        7 => Some(8),
        _ => None,
    }
}
