//! Whether an AAC-LC access unit of a mono stream codes any band as
//! perceptual noise (PNS), read from its section data (ISO 14496-3,
//! 4.4.2.1 and 4.6.2-3) without decoding its spectrum.
//!
//! A noise band is one whose section codebook is `NOISE_HCB` (13); the
//! decoder fills it from a pseudo-random generator that keeps its state
//! from one access unit to the next, so a part started later draws other
//! noise than the whole-file decode. An access unit is a `raw_data_block`:
//! syntactic elements, each behind a 3-bit `id_syn_ele`, up to `ID_END`. A
//! mono stream's channel is one single channel element (SCE): its
//! `element_instance_tag` (4 bits), `global_gain` (8), `ics_info`
//! (`ics_reserved_bit`, `window_sequence` (2), `window_shape`; for eight
//! short windows `max_sfb` (4) and `scale_factor_grouping` (7, a window
//! group per 0 bit, plus one); otherwise `max_sfb` (6) and
//! `predictor_data_present`, which AAC-LC leaves 0), then `section_data`:
//! per window group, sections of `sect_cb` (4 bits) and a length in 5-bit
//! (long window) or 3-bit (short) steps, an all-ones step meaning more
//! follows, until the sections cover `max_sfb` bands. Those are at the
//! element's start; what follows them is Huffman-coded, which is why only
//! an SCE can be read this far: a channel pair element's second channel
//! starts after the first's spectrum.
//!
//! Elements before the SCE may be fill (FIL: a 4-bit count, 15 escaping to
//! 14 plus an 8-bit count, then that many bytes) or data stream elements
//! (DSE: tag, `data_byte_align_flag`, an 8-bit count, 255 adding another
//! 8-bit count, byte alignment if flagged, then the bytes); they carry no
//! audio. Anything else — a channel pair, an LFE or coupling channel, a
//! program config, an unknown element, a `predictor_data_present` bit, a
//! reserved codebook (12), a section past `max_sfb` — is not followed: the
//! unit is [`Verdict::Unproven`], as is one with noise. Past the SCE a mono
//! stream holds no further channel element (its channel configuration
//! allows one; symphonia's decoder refuses a second before decoding it), so
//! the SCE's sections say whether the unit draws noise.
//!
//! Every read is bounds-checked against the slice; nothing is allocated.

/// What an access unit's start shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::compressed) enum Verdict {
    /// Its single channel element codes no band as noise.
    Clean,
    /// A noise band, or something this reading does not follow.
    Unproven,
    /// The bytes end before the section data does (read more of the unit).
    Short,
}

const ID_SCE: u32 = 0;
const ID_DSE: u32 = 4;
const ID_FIL: u32 = 6;
const EIGHT_SHORT_SEQUENCE: u32 = 2;
const RESERVED_HCB: u32 = 12;
const NOISE_HCB: u32 = 13;

/// Bits read most significant first; `None` past the end.
struct Bits<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Bits<'_> {
    fn read(&mut self, n: u32) -> Option<u32> {
        let mut v = 0u32;
        for _ in 0..n {
            let byte = *self.bytes.get(self.pos / 8)?;
            v = (v << 1) | u32::from((byte >> (7 - self.pos % 8)) & 1);
            self.pos += 1;
        }
        Some(v)
    }

    /// Skips `n` bytes (checked to be there).
    fn skip_bytes(&mut self, n: usize) -> Option<()> {
        let to = self.pos.checked_add(n.checked_mul(8)?)?;
        (to <= self.bytes.len() * 8).then(|| self.pos = to)
    }

    fn align(&mut self) {
        self.pos = self.pos.div_ceil(8) * 8;
    }
}

/// Reads the access unit `au` (or its first bytes) of a mono AAC-LC
/// stream as far as its single channel element's section data.
pub(in crate::compressed) fn mono_unit(au: &[u8]) -> Verdict {
    let mut b = Bits { bytes: au, pos: 0 };
    match elements(&mut b) {
        Some(v) => v,
        None => Verdict::Short,
    }
}

/// The elements up to the SCE, then its sections (`None`: out of bytes).
fn elements(b: &mut Bits<'_>) -> Option<Verdict> {
    loop {
        match b.read(3)? {
            ID_SCE => return sce(b),
            ID_FIL => {
                let mut count = b.read(4)? as usize;
                if count == 15 {
                    count += b.read(8)? as usize;
                    count -= 1;
                }
                b.skip_bytes(count)?;
            }
            ID_DSE => {
                let _tag = b.read(4)?;
                let align = b.read(1)? == 1;
                let mut count = b.read(8)? as usize;
                if count == 255 {
                    count += b.read(8)? as usize;
                }
                if align {
                    b.align();
                }
                b.skip_bytes(count)?;
            }
            // CPE, CCE, LFE, PCE, and END before any channel.
            _ => return Some(Verdict::Unproven),
        }
    }
}

/// A single channel element after its `id_syn_ele`.
fn sce(b: &mut Bits<'_>) -> Option<Verdict> {
    let _tag = b.read(4)?;
    let _global_gain = b.read(8)?;
    let _reserved = b.read(1)?;
    let sequence = b.read(2)?;
    let _shape = b.read(1)?;
    let (max_sfb, groups, len_bits) = if sequence == EIGHT_SHORT_SEQUENCE {
        let max_sfb = b.read(4)?;
        let grouping = b.read(7)?;
        (max_sfb, 1 + grouping.count_zeros() - 25, 3)
    } else {
        let max_sfb = b.read(6)?;
        if b.read(1)? == 1 {
            return Some(Verdict::Unproven); // predictor data: not AAC-LC
        }
        (max_sfb, 1, 5)
    };
    let escape = (1 << len_bits) - 1;
    for _ in 0..groups {
        let mut k = 0u32;
        while k < max_sfb {
            let cb = b.read(4)?;
            if cb == NOISE_HCB || cb == RESERVED_HCB {
                return Some(Verdict::Unproven);
            }
            let mut len = 0u32;
            loop {
                let step = b.read(len_bits)?;
                len += step;
                if k + len > max_sfb {
                    return Some(Verdict::Unproven);
                }
                if step != escape {
                    break;
                }
            }
            k += len;
        }
    }
    Some(Verdict::Clean)
}

#[cfg(test)]
mod tests;
