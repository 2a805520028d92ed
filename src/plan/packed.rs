//! Many strings held compressed: a manifest's metadata, one JSON object per
//! row, which the writer reads once, in row order, as the split file is
//! closed.
//!
//! Entries are appended to an open block (each prefixed with its length, a
//! LEB128 varint); a block of [`BLOCK_BYTES`] is compressed with zstd and
//! sealed. A manifest's objects repeat their keys line after line, so a
//! sealed block is a fifth to a tenth of the text, and an entry costs no
//! offset of its own: only a block has an index entry. Reading entry `i`
//! decompresses its block; a [`Cursor`] keeps the last block, so reading in
//! order decompresses each block once.

/// Raw bytes in a block before it is compressed: large enough for zstd to
/// find the repeats, small enough that one entry's read stays cheap.
pub const BLOCK_BYTES: usize = 128 << 10;

/// zstd's level: its default, about 300 MB/s of text on one core here.
const LEVEL: i32 = 3;

/// A sealed block: where its compressed bytes end in [`PackedText::bytes`],
/// its first entry, and its length before compression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Block {
    first: u32,
    end: u64,
    raw: u32,
}

/// Strings by index, compressed in blocks (module doc).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PackedText {
    /// The sealed blocks' compressed bytes, one after another.
    bytes: Vec<u8>,
    blocks: Vec<Block>,
    /// The open block: entries with their length prefixes, uncompressed.
    open: Vec<u8>,
    /// Entries in all.
    len: u32,
    /// The open block's first entry.
    open_first: u32,
}

impl PackedText {
    /// Appends `s`; its index. Panics past 2³² entries ([`PackedText::fits`]).
    pub fn push(&mut self, s: &str) -> u32 {
        let i = self.len;
        let mut n = s.len();
        loop {
            let low = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                self.open.push(low);
                break;
            }
            self.open.push(low | 0x80);
        }
        self.open.extend_from_slice(s.as_bytes());
        self.len = self
            .len
            .checked_add(1)
            .expect("packed text over 2^32 entries");
        if self.open.len() >= BLOCK_BYTES {
            self.seal();
        }
        i
    }

    /// Whether [`PackedText::push`] of `s` would fit: fewer than 2³² entries
    /// (the text itself has no bound but memory).
    pub fn fits(&self, _s: &str) -> bool {
        self.len < u32::MAX
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Compresses the open block (a no-op when it is empty) and gives back
    /// the spare capacity: planning calls it once the last entry is in.
    pub fn seal(&mut self) {
        if self.open.is_empty() {
            return;
        }
        let packed = zstd::bulk::compress(&self.open, LEVEL).expect("zstd compresses in memory");
        self.bytes.extend_from_slice(&packed);
        self.blocks.push(Block {
            first: self.open_first,
            end: self.bytes.len() as u64,
            raw: u32::try_from(self.open.len()).expect("a block is a few hundred KiB"),
        });
        self.open.clear();
        self.open_first = self.len;
    }

    /// Seals the open block and frees every spare byte.
    pub fn shrink_to_fit(&mut self) {
        self.seal();
        self.open = Vec::new();
        self.bytes.shrink_to_fit();
        self.blocks.shrink_to_fit();
    }

    /// Entry `i`, decompressing its block (panics when out of range). To
    /// read many in order, use a [`Cursor`].
    pub fn get(&self, i: u32) -> String {
        self.cursor().get(i).to_string()
    }

    /// A reader that keeps the last block it decompressed.
    pub fn cursor(&self) -> Cursor<'_> {
        Cursor {
            table: self,
            block: None,
            raw: Vec::new(),
            ends: Vec::new(),
        }
    }

    /// Bytes held (for memory accounting in tests and logs).
    pub fn heap_bytes(&self) -> usize {
        self.bytes.capacity() + self.open.capacity() + self.blocks.capacity() * 24
    }
}

/// A LEB128 length at the start of `b`, and the bytes it took.
fn varint(b: &[u8]) -> (usize, usize) {
    let mut v = 0usize;
    for (k, &byte) in b.iter().enumerate() {
        v |= usize::from(byte & 0x7f) << (7 * k);
        if byte & 0x80 == 0 {
            return (v, k + 1);
        }
    }
    panic!("a packed entry's length runs past its block")
}

/// Reads a [`PackedText`], keeping the last block it decompressed (`None`
/// in `block`: the open block, or nothing yet).
pub struct Cursor<'a> {
    table: &'a PackedText,
    block: Option<Option<usize>>,
    raw: Vec<u8>,
    /// End of each entry of the held block in `raw`, after its prefix:
    /// (start, end).
    ends: Vec<(u32, u32)>,
}

impl Cursor<'_> {
    /// Entry `i` (panics when out of range).
    pub fn get(&mut self, i: u32) -> &str {
        let t = self.table;
        assert!(i < t.len, "entry {i} of {}", t.len);
        let (block, first) = if i >= t.open_first {
            (None, t.open_first)
        } else {
            let b = t.blocks.partition_point(|b| b.first <= i) - 1;
            (Some(b), t.blocks[b].first)
        };
        if self.block != Some(block) {
            self.load(block);
        }
        let (start, end) = self.ends[(i - first) as usize];
        let raw = match block {
            None => &t.open,
            Some(_) => &self.raw,
        };
        std::str::from_utf8(&raw[start as usize..end as usize]).expect("packed entries are UTF-8")
    }

    /// Decompresses block `b` (None: indexes the open block in place).
    fn load(&mut self, b: Option<usize>) {
        let t = self.table;
        let raw: &[u8] = match b {
            None => &t.open,
            Some(b) => {
                let start = if b == 0 {
                    0
                } else {
                    t.blocks[b - 1].end as usize
                };
                let blk = t.blocks[b];
                self.raw =
                    zstd::bulk::decompress(&t.bytes[start..blk.end as usize], blk.raw as usize)
                        .expect("a sealed block decompresses");
                &self.raw
            }
        };
        self.ends.clear();
        let mut at = 0;
        while at < raw.len() {
            let (len, used) = varint(&raw[at..]);
            let start = at + used;
            at = start + len;
            self.ends.push((start as u32, at as u32));
        }
        self.block = Some(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: u32) -> String {
        // Lengths from 0 to a few hundred bytes, some multi-byte, some past
        // a varint's first byte.
        let text = "é".repeat((i % 7) as usize);
        format!(
            "{{\"audio_filepath\": \"a/{i}.wav\", \"text\": \"{text}{}\"}}",
            "x".repeat((i * 37 % 300) as usize)
        )
    }

    #[test]
    fn every_entry_reads_back_in_order_and_at_random() {
        let mut t = PackedText::default();
        let n = 20_000;
        for i in 0..n {
            assert_eq!(t.push(&entry(i)), i + u32::from(i > 7));
            if i == 7 {
                assert_eq!(t.push(""), 8);
            }
        }
        let n = n + 1;
        let want = |i: u32| match i {
            8 => String::new(),
            i if i > 8 => entry(i - 1),
            i => entry(i),
        };
        assert!(t.blocks.len() > 10, "{} blocks", t.blocks.len());
        assert!(!t.open.is_empty(), "the last block is still open");
        let mut c = t.cursor();
        for i in 0..n {
            assert_eq!(c.get(i), want(i), "entry {i}");
        }
        for i in (0..n).rev().step_by(997) {
            assert_eq!(t.get(i), want(i), "entry {i}");
        }
        t.shrink_to_fit();
        assert!(t.open.is_empty());
        let mut c = t.cursor();
        for i in (0..n).step_by(13) {
            assert_eq!(c.get(i), want(i), "entry {i} after sealing");
        }
        assert_eq!(t.len(), n as usize);
    }

    #[test]
    fn repeated_keys_take_a_fraction_of_the_text() {
        let mut t = PackedText::default();
        let mut text = 0;
        for i in 0..100_000u32 {
            let s = format!(
                "{{\"audio_filepath\": \"a.wav\", \"duration\": 0.5, \"text\": \"utterance {i:09} of the corpus\"}}"
            );
            text += s.len();
            t.push(&s);
        }
        t.shrink_to_fit();
        assert!(t.heap_bytes() * 5 < text, "{} of {text}", t.heap_bytes());
    }

    #[test]
    #[should_panic(expected = "entry 3 of 3")]
    fn past_the_end_panics() {
        let mut t = PackedText::default();
        for s in ["a", "b", "c"] {
            t.push(s);
        }
        t.cursor().get(3);
    }
}
