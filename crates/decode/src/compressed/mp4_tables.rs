//! MP4 tables whose entry counts must fit their boxes before symphonia's
//! demuxer reads them: it sizes a vector from a table's declared count
//! before reading its entries, so one corrupted count (`stts` of 2³¹
//! entries, 30 GB) aborted the process on an allocation failure, which no
//! `catch_unwind` can turn into a rejection (the hostile-bytes proptest
//! found it). Every count-prefixed table in `moov` and in top-level `moof`
//! boxes is checked against its box's bytes here; one that cannot fit is
//! [`Error::Malformed`] naming the box. Likewise it sizes a sample's buffer
//! from `stsz` (or, in a fragmented file, `trun`, `tfhd` and `trex`) before
//! reading the sample: a size past the file's end (4 GB declared in a 3 KB
//! file, found by the `flac_clip` fuzz target) is malformed here, before
//! that allocation.
//!
//! It also reads some boxes whole into a buffer of their declared size: an
//! `ilst` metadata item's `data`, `mean` and `name` atoms (2.7 GB declared
//! in a 3 KB file, found by `flac_clip` too), and the descriptors of an
//! `esds` box. So every box on the way to what symphonia reads (the
//! containers of the sample tables, `udta` → `meta` → `ilst` → item → its
//! atoms, the top-level `meta`, the sound's sample entry → `esds` or
//! `wave`) must tile its parent: a box declaring more bytes than its parent
//! has left is malformed, naming the box, its size and its parent.

use super::Error;
use super::mp4::{self, Box4, F, Within, be32, boxes};
use crate::wav::ByteStr;

/// Boxes holding other boxes on the way to the tables.
const CONTAINERS: [&[u8; 4]; 10] = [
    b"moov", b"trak", b"mdia", b"minf", b"stbl", b"edts", b"moof", b"traf", b"mvex", b"udta",
];

/// Sample entries symphonia reads as audio (its `stsd` reader): their
/// children (`esds`, `wave`, …) follow the audio sample entry's fields.
const AUDIO_ENTRIES: [&[u8; 4]; 16] = [
    b"mp4a", b"alac", b"fLaC", b"Opus", b".mp3", b"lpcm", b"wave", b"alaw", b"ulaw", b"raw ",
    b"sowt", b"twos", b"in24", b"in32", b"fl32", b"fl64",
];

/// Checks every table of the MP4 file `bytes` (called before symphonia's
/// demuxer opens it).
pub(super) fn check(bytes: &[u8]) -> Result<(), Error> {
    let file_len = bytes.len();
    for b in boxes(bytes, 0)? {
        match &b.kind {
            b"moov" | b"moof" => walk(&b, file_len)?,
            // symphonia reads a top-level `meta` as it reads `udta`'s.
            b"meta" => meta(&b)?,
            _ => {}
        }
    }
    Ok(())
}

fn walk(parent: &Box4<'_>, file_len: usize) -> Result<(), Error> {
    for b in children(parent, 0)? {
        if CONTAINERS.contains(&&b.kind) {
            walk(&b, file_len)?;
        } else if &b.kind == b"meta" && &parent.kind == b"udta" {
            meta(&b)?;
        } else {
            fits(&b)?;
            match &b.kind {
                b"stsz" => sizes_fit(&b, file_len)?,
                b"trun" => run_sizes_fit(&b, file_len)?,
                b"tfhd" | b"trex" => default_size_fits(&b, file_len)?,
                b"stsd" => sample_entry(&b)?,
                _ => {}
            }
        }
    }
    Ok(())
}

/// The children of `parent` (from `skip` bytes into its body), each
/// checked to end inside it: a box declaring more bytes than its parent
/// has left is malformed (the parent itself was checked against the file
/// first, so this is not a file cut short).
fn children<'a>(parent: &Box4<'a>, skip: usize) -> Result<Vec<Box4<'a>>, Error> {
    let data = parent.body.get(skip..).unwrap_or_default();
    let base = parent.at + skip;
    mp4::walk(data, base, Within::Parent(parent))
}

/// A `meta` box symphonia reads (under `udta`, or at the top level): it
/// takes it for an MP4 full box, skipping 4 bytes of version and flags
/// before the children, and reads every `ilst` among them.
/// QuickTime's `meta` has no version and flags: symphonia would read its
/// first child's type as a size, so it is refused here, by name, rather
/// than checked as it is not read.
fn meta(b: &Box4<'_>) -> Result<(), Error> {
    if b.body.len() < 4 {
        return Err(Error::malformed(
            F,
            format!(
                "box meta at byte {} holds {} bytes, less than its version and flags",
                b.at,
                b.body.len()
            ),
        ));
    }
    let kids = match children(b, 4) {
        Ok(kids) => kids,
        Err(e) => {
            // QuickTime's layout: the body itself tiles as boxes.
            let quicktime = b.body.len() >= 8
                && be32(b.body, 0).is_some_and(|s| s >= 8)
                && children(b, 0).is_ok();
            if quicktime {
                return Err(Error::malformed(
                    F,
                    format!(
                        "box meta at byte {} holds its children without an MP4 meta box's \
                         version and flags (QuickTime's layout), which the MP4 demuxer misreads",
                        b.at
                    ),
                ));
            }
            return Err(e);
        }
    };
    for list in kids.iter().filter(|k| &k.kind == b"ilst") {
        for item in children(list, 0)? {
            for atom in children(&item, 0)? {
                // version and flags, then (data) the country and language.
                let head = match &atom.kind {
                    b"data" => 8,
                    b"mean" | b"name" => 4,
                    _ => continue,
                };
                if atom.body.len() < head {
                    return Err(Error::malformed(
                        F,
                        format!(
                            "box {} at byte {} of metadata item {} holds {} bytes, less than \
                             its {head}-byte header",
                            ByteStr(&atom.kind),
                            atom.at,
                            ByteStr(&item.kind),
                            atom.body.len()
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The first sample entry of `stsd` box `b` (symphonia reads only that
/// one): an audio entry's children must tile it, and an `esds` among them
/// (or inside a QuickTime `wave`) must hold its descriptors.
fn sample_entry(b: &Box4<'_>) -> Result<(), Error> {
    let stsd = Box4 {
        kind: b.kind,
        body: b.body.get(8..).unwrap_or_default(),
        at: b.at + 8,
    };
    if stsd.body.is_empty() {
        return Ok(()); // no entry: symphonia refuses it
    }
    let Some(entry) = children(&stsd, 0)?.into_iter().next() else {
        return Ok(());
    };
    if !AUDIO_ENTRIES.contains(&&entry.kind) {
        return Ok(());
    }
    // The audio sample entry's fields: version 0, 1 (16 bytes more) or 2
    // (36 more); symphonia refuses any other.
    let fields = match entry
        .body
        .get(8..10)
        .map(|v| u16::from_be_bytes([v[0], v[1]]))
    {
        Some(0) | None => 28,
        Some(1) => 44,
        Some(2) => 64,
        Some(_) => return Ok(()),
    };
    if entry.body.len() < fields {
        return Err(Error::malformed(
            F,
            format!(
                "sample entry {} at byte {} holds {} bytes, less than its {fields} bytes of fields",
                ByteStr(&entry.kind),
                entry.at,
                entry.body.len()
            ),
        ));
    }
    for child in children(&entry, fields)? {
        match &child.kind {
            b"esds" => descriptors_fit(&child)?,
            b"wave" => {
                for inner in children(&child, 0)? {
                    if &inner.kind == b"esds" {
                        descriptors_fit(&inner)?;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Every descriptor of `esds` box `b` on symphonia's way to the
/// DecoderSpecificInfo (whose buffer it sizes from the declared length,
/// up to 256 MiB) declares no more bytes than its parent has left. The
/// runs of descriptors are symphonia's: the box's after its version and
/// flags, an ES_Descriptor's after its fields (its length less 3, from
/// there), a DecoderConfigDescriptor's after its 13 bytes.
fn descriptors_fit(b: &Box4<'_>) -> Result<(), Error> {
    let end = b.body.len();
    // (start, end) of each run of descriptors still to read.
    let mut runs = vec![(4usize, end)];
    while let Some((mut p, run_end)) = runs.pop() {
        while run_end.saturating_sub(p) > 2 {
            let at = b.at + p;
            let tag = b.body[p];
            let mut len = 0usize;
            let mut q = p + 1;
            loop {
                let Some(&v) = b.body[..run_end].get(q) else {
                    return Err(Error::malformed(
                        F,
                        format!(
                            "descriptor {tag} at byte {at} of box esds at byte {} is cut short",
                            b.at
                        ),
                    ));
                };
                len = (len << 7) | usize::from(v & 0x7F);
                q += 1;
                if v & 0x80 == 0 || q == p + 5 {
                    break;
                }
            }
            let left = run_end - q;
            if len > left {
                return Err(Error::malformed(
                    F,
                    format!(
                        "descriptor {tag} at byte {at} of box esds at byte {} declares {len} \
                         bytes, more than the {left} bytes left in its parent",
                        b.at
                    ),
                ));
            }
            match tag {
                3 => {
                    let flags = b.body.get(q + 2).copied().unwrap_or(0);
                    let mut r = q + 3;
                    if flags & 0x80 != 0 {
                        r += 2;
                    }
                    if flags & 0x40 != 0 {
                        r += 1 + usize::from(b.body.get(r).copied().unwrap_or(0));
                    }
                    if flags & 0x20 != 0 {
                        r += 2;
                    }
                    let e = len.checked_sub(3).map_or(run_end, |l| (r + l).min(run_end));
                    runs.push((r, e));
                }
                4 => {
                    let e = if len >= 13 { q + len } else { run_end };
                    runs.push((q + 13, e));
                }
                _ => {}
            }
            p = q + len;
        }
    }
    Ok(())
}

/// Every sample size of `stsz` box `b` (its one constant size, or each
/// entry; the count already checked by [`fits`]) is within the file.
fn sizes_fit(b: &Box4<'_>, file_len: usize) -> Result<(), Error> {
    let fixed = be32(b.body, 4).unwrap_or(0);
    let count = be32(b.body, 8).unwrap_or(0) as usize;
    let entries = b.body.get(12..).unwrap_or_default().chunks_exact(4);
    let sizes: Box<dyn Iterator<Item = u32>> = if fixed != 0 {
        Box::new(std::iter::once(fixed).take(usize::from(count > 0)))
    } else {
        Box::new(entries.take(count).filter_map(|e| be32(e, 0)))
    };
    for (i, size) in sizes.enumerate() {
        if size as usize > file_len {
            return Err(past_the_file(b, i, size, file_len));
        }
    }
    Ok(())
}

/// Each sample size a `trun` box declares (flag 0x200) is within the file.
fn run_sizes_fit(b: &Box4<'_>, file_len: usize) -> Result<(), Error> {
    let flags = be32(b.body, 0).unwrap_or(0) & 0x00FF_FFFF;
    if flags & 0x200 == 0 {
        return Ok(());
    }
    let count = be32(b.body, 4).unwrap_or(0) as usize;
    let head = 8 + 4 * ((flags & 0x1 != 0) as usize + (flags & 0x4 != 0) as usize);
    let per = 4 * (flags >> 8 & 0xF).count_ones() as usize;
    let size_at = 4 * usize::from(flags & 0x100 != 0);
    let entries = b.body.get(head..).unwrap_or_default().chunks_exact(per);
    for (i, e) in entries.take(count).enumerate() {
        let size = be32(e, size_at).unwrap_or(0);
        if size as usize > file_len {
            return Err(past_the_file(b, i, size, file_len));
        }
    }
    Ok(())
}

/// The default sample size of a `tfhd` (flag 0x10) or `trex` box is
/// within the file.
fn default_size_fits(b: &Box4<'_>, file_len: usize) -> Result<(), Error> {
    let at = if &b.kind == b"trex" {
        Some(16)
    } else {
        let flags = be32(b.body, 0).unwrap_or(0);
        (flags & 0x10 != 0).then(|| {
            8 + 8 * usize::from(flags & 0x1 != 0)
                + 4 * usize::from(flags & 0x2 != 0)
                + 4 * usize::from(flags & 0x8 != 0)
        })
    };
    match at.and_then(|at| be32(b.body, at)) {
        Some(size) if size as usize > file_len => Err(past_the_file(b, 0, size, file_len)),
        _ => Ok(()),
    }
}

fn past_the_file(b: &Box4<'_>, i: usize, size: u32, file_len: usize) -> Error {
    Error::malformed(
        F,
        format!(
            "box {} at byte {} declares sample {i} of {size} bytes, past the end of the file \
             ({file_len} bytes)",
            ByteStr(&b.kind),
            b.at
        ),
    )
}

/// The table in full box `b` declares no more entries than its body holds.
fn fits(b: &Box4<'_>) -> Result<(), Error> {
    let body = b.body;
    // (offset of the count, bytes before the entries, bytes per entry)
    let layout: Option<(usize, usize, usize)> = match &b.kind {
        b"stts" | b"ctts" | b"co64" => Some((4, 8, 8)),
        b"stsc" => Some((4, 8, 12)),
        b"stco" | b"stss" => Some((4, 8, 4)),
        b"stsd" => Some((4, 8, 8)), // a sample entry is a box: 8 bytes at least
        b"elst" => Some((4, 8, if body.first() == Some(&1) { 20 } else { 12 })),
        // Sizes only when there is no one constant size.
        b"stsz" => Some((8, 12, if be32(body, 4) == Some(0) { 4 } else { 0 })),
        b"stz2" => Some((8, 12, 0)), // 4-, 8- or 16-bit entries: checked below
        b"trun" => {
            let flags = be32(body, 0).unwrap_or(0) & 0x00FF_FFFF;
            let head = 8 + 4 * ((flags & 0x1 != 0) as usize + (flags & 0x4 != 0) as usize);
            let per = 4 * (flags >> 8 & 0xF).count_ones() as usize;
            Some((4, head, per))
        }
        _ => None,
    };
    let Some((count_at, head, per)) = layout else {
        return Ok(());
    };
    let count = be32(body, count_at).map(|c| c as usize);
    let need = count.and_then(|c| match &b.kind {
        b"stz2" => {
            let bits = usize::from(*body.get(7)?);
            (c.checked_mul(bits)?).div_ceil(8).checked_add(head)
        }
        _ => c.checked_mul(per)?.checked_add(head),
    });
    match (count, need) {
        (Some(_), Some(n)) if n <= body.len() => Ok(()),
        (Some(c), _) => Err(Error::malformed(
            F,
            format!(
                "box {} at byte {} declares {c} entries, more than its {} bytes hold",
                ByteStr(&b.kind),
                b.at,
                body.len()
            ),
        )),
        (None, _) => Err(Error::malformed(
            F,
            format!("box {} at byte {} is cut short", ByteStr(&b.kind), b.at),
        )),
    }
}
