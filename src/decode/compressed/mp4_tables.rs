//! MP4 tables whose entry counts must fit their boxes before symphonia's
//! demuxer reads them: it sizes a vector from a table's declared count
//! before reading its entries, so one corrupted count (`stts` of 2³¹
//! entries, 30 GB) aborted the process on an allocation failure, which no
//! `catch_unwind` can turn into a rejection (the hostile-bytes proptest
//! found it). Every count-prefixed table in `moov` and in top-level `moof`
//! boxes is checked against its box's bytes here; one that cannot fit is
//! [`Error::Malformed`] naming the box. Likewise it sizes a sample's buffer
//! from `stsz` before reading the sample: a size past the file's end (4 GB
//! declared in a 3 KB file, found by the `flac_clip` fuzz target) is
//! malformed here, before that allocation.

use super::Error;
use super::mp4::{Box4, F, be32, boxes};

/// Boxes holding other boxes on the way to the tables.
const CONTAINERS: [&[u8; 4]; 9] = [
    b"moov", b"trak", b"mdia", b"minf", b"stbl", b"edts", b"moof", b"traf", b"mvex",
];

/// Checks every table of the MP4 file `bytes` (called before symphonia's
/// demuxer opens it).
pub(super) fn check(bytes: &[u8]) -> Result<(), Error> {
    let top = boxes(bytes, 0)?;
    for b in top
        .iter()
        .filter(|b| &b.kind == b"moov" || &b.kind == b"moof")
    {
        walk(b, bytes.len())?;
    }
    Ok(())
}

fn walk(parent: &Box4<'_>, file_len: usize) -> Result<(), Error> {
    for b in boxes(parent.body, parent.at)? {
        if CONTAINERS.contains(&&b.kind) {
            walk(&b, file_len)?;
        } else {
            fits(&b)?;
            if &b.kind == b"stsz" {
                sizes_fit(&b, file_len)?;
            }
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
            return Err(Error::malformed(
                F,
                format!(
                    "box stsz at byte {} declares sample {i} of {size} bytes, past the end of \
                     the file ({file_len} bytes)",
                    b.at
                ),
            ));
        }
    }
    Ok(())
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
                crate::decode::wav::ByteStr(&b.kind),
                b.at,
                body.len()
            ),
        )),
        (None, _) => Err(Error::malformed(
            F,
            format!(
                "box {} at byte {} is cut short",
                crate::decode::wav::ByteStr(&b.kind),
                b.at
            ),
        )),
    }
}
