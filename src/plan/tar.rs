//! A tar archive's members as byte extents: what the readers read instead
//! of extracted files.
//!
//! [`index`] walks the archive's headers with positioned reads, one read of
//! [`PEEK`] bytes per member (its 512-byte header and the first bytes of its
//! data, which tell an audio member by content): the members' data is not
//! read here, so planning a shard costs about 1 KiB per member and the
//! readers read each member's bytes once. The header fields are parsed by
//! the `tar` crate (`tar::Header`: octal and base-256 sizes, the ustar
//! prefix); GNU long names (`L`) and pax extended headers (`x`: `path`,
//! `size`) are applied to the member after them, as GNU tar and Python's
//! `tarfile` (which writes WebDataset's shards) do. Directories, links and
//! other non-file entries are skipped.
//!
//! A damaged archive never stops the walk short of what can be saved; each
//! problem is a [`Problem`] with its byte offset and a sentence:
//!
//! * a header whose checksum does not match its bytes: the bytes after it
//!   are searched, 512 at a time, for the next header whose checksum
//!   matches, and the walk goes on from there (the members in between are
//!   lost, and the problem says which bytes were skipped);
//! * a member whose data runs past the end of the file (a truncated
//!   archive), or a header cut short: the walk stops there, every member
//!   before it is kept;
//! * a long name or pax header that is not usable: its member is skipped.
//!
//! The end of the archive is its first all-zero block, or the end of the
//! file.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Bytes read per header: the header and the start of the member's data,
/// enough to tell every container melforge decodes (an Ogg stream's first
/// packet starts within its first 60 bytes) and to hold a WebDataset
/// sample's small siblings (`.cls`, a short `.txt` or `.json`) whole, so
/// they need no read of their own.
pub const PEEK: usize = BLOCK + 256;
/// Bytes of a member's data kept for telling its container.
pub const SNIFF: usize = PEEK - BLOCK;
const BLOCK: usize = 512;
/// The largest GNU long name or pax header read.
const MAX_EXTENDED: u64 = 1 << 20;

/// One regular file in the archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its path in the archive, as written (long names applied).
    pub name: String,
    /// The offset of its header.
    pub header_at: u64,
    /// Its data: `len` bytes from `start`.
    pub start: u64,
    pub len: u64,
    /// The first bytes of its data (up to [`SNIFF`]).
    pub head: Vec<u8>,
}

/// Something wrong in the archive, at byte `at`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub at: u64,
    /// The member concerned, when its name could be read.
    pub member: Option<String>,
    pub reason: String,
}

/// The members of one archive, in archive order.
#[derive(Clone, Debug, Default)]
pub struct Index {
    pub members: Vec<Member>,
    pub problems: Vec<Problem>,
    /// Bytes read to make the index.
    pub bytes_read: u64,
    /// The archive's size.
    pub size: u64,
}

/// The index of the tar archive at `path` (a regular file). Errors are the
/// file's own (cannot open, not a regular file); damage inside it is in
/// [`Index::problems`].
pub fn index(path: &Path) -> std::io::Result<Index> {
    let file = File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    index_file(&file, meta.len())
}

/// [`index`] of an open archive of `size` bytes.
pub fn index_file(file: &File, size: u64) -> std::io::Result<Index> {
    let mut walk = Walk {
        file,
        ix: Index {
            size,
            ..Index::default()
        },
        long_name: None,
        pax_path: None,
        pax_size: None,
    };
    walk.run()?;
    Ok(walk.ix)
}

struct Walk<'a> {
    file: &'a File,
    ix: Index,
    /// A GNU long name for the next member.
    long_name: Option<String>,
    /// A pax header's `path` and `size` for the next member.
    pax_path: Option<String>,
    pax_size: Option<u64>,
}

impl Walk<'_> {
    fn run(&mut self) -> std::io::Result<()> {
        let mut at = 0u64;
        let mut buf = vec![0u8; PEEK];
        while at < self.ix.size {
            match self.step(at, &mut buf)? {
                Some(next) => at = next,
                None => break,
            }
        }
        Ok(())
    }

    /// The header at `at` and what follows it: the offset of the next
    /// header, or None where the walk ends (the end marker, or damage past
    /// which nothing can be read).
    fn step(&mut self, at: u64, buf: &mut [u8]) -> std::io::Result<Option<u64>> {
        let size = self.ix.size;
        if size - at < BLOCK as u64 {
            let reason = format!(
                "the archive ends {} bytes into a header (a header is {BLOCK} bytes): it is \
                 truncated",
                size - at
            );
            self.problem(at, None, reason);
            return Ok(None);
        }
        let n = (PEEK as u64).min(size - at) as usize;
        self.read_at(&mut buf[..n], at)?;
        let block: &[u8; BLOCK] = buf[..BLOCK].try_into().expect("a block");
        if block.iter().all(|&b| b == 0) {
            return Ok(None); // the end-of-archive marker
        }
        if let Some(why) = bad_checksum(block) {
            return self.damaged(at, block, &why);
        }
        let header = tar::Header::from_byte_slice(block);
        let stated = match header.entry_size() {
            Ok(s) => s,
            Err(e) => {
                let reason = format!("the header's size field cannot be read ({e})");
                self.problem(at, name_of(block), reason);
                return Ok(None);
            }
        };
        let len = self.pax_size.take().unwrap_or(stated);
        let start = at + BLOCK as u64;
        let name = self
            .long_name
            .take()
            .or_else(|| self.pax_path.take())
            .or_else(|| {
                std::str::from_utf8(&header.path_bytes())
                    .ok()
                    .map(str::to_string)
            });
        if start.saturating_add(len) > size {
            let reason = format!(
                "the header says {len} bytes of data at byte {start}, but the archive ends {} \
                 bytes into them: it is truncated",
                size - start
            );
            self.problem(at, name, reason);
            return Ok(None);
        }
        let head = &buf[BLOCK..n];
        self.entry(header.entry_type(), name, (at, start, len), head)?;
        Ok(Some(start + len.div_ceil(BLOCK as u64) * BLOCK as u64))
    }

    /// A header whose checksum does not match: the walk goes on at the next
    /// valid header, if any.
    fn damaged(&mut self, at: u64, block: &[u8; BLOCK], why: &str) -> std::io::Result<Option<u64>> {
        let member = name_of(block);
        let size = self.ix.size;
        let next = self.resync(at + BLOCK as u64)?;
        let reason = match next {
            Some(next) => format!(
                "{why}: the header is damaged; bytes {at}..{next} were skipped to the next valid \
                 header (any member in them is lost)"
            ),
            None => format!(
                "{why}: the header is damaged, and no valid header follows it (bytes \
                 {at}..{size} hold no member that can be read)"
            ),
        };
        self.problem(at, member, reason);
        self.long_name = None;
        (self.pax_path, self.pax_size) = (None, None);
        Ok(next)
    }

    /// The entry of header `at` with data `[start, start + len)`, whose
    /// first bytes are `head`: a member, or a long name or pax header for
    /// the next one; other kinds are skipped.
    fn entry(
        &mut self,
        kind: tar::EntryType,
        name: Option<String>,
        (at, start, len): (u64, u64, u64),
        head: &[u8],
    ) -> std::io::Result<()> {
        match kind {
            tar::EntryType::GNULongName => match self.extended(start, len)? {
                Some(text) => self.long_name = Some(text.trim_end_matches('\0').to_string()),
                None => self.problem(at, None, long_unusable("GNU long name", len)),
            },
            tar::EntryType::XHeader => match self.extended(start, len)? {
                Some(text) => self.pax(&text),
                None => self.problem(at, None, long_unusable("pax header", len)),
            },
            tar::EntryType::Regular | tar::EntryType::Continuous => match name {
                Some(name) => {
                    let head = head.iter().take(len as usize).copied().collect();
                    self.ix.members.push(Member {
                        name,
                        header_at: at,
                        start,
                        len,
                        head,
                    });
                }
                None => self.problem(
                    at,
                    None,
                    "the member's name is not UTF-8; it cannot be a row's path".into(),
                ),
            },
            _ => {} // directories, links, devices, global pax headers
        }
        Ok(())
    }

    fn read_at(&mut self, buf: &mut [u8], at: u64) -> std::io::Result<()> {
        self.file.read_exact_at(buf, at)?;
        self.ix.bytes_read += buf.len() as u64;
        Ok(())
    }

    fn problem(&mut self, at: u64, member: Option<String>, reason: String) {
        self.ix.problems.push(Problem { at, member, reason });
    }

    /// The next offset from `from` (a block boundary) holding a header
    /// whose checksum matches, if any.
    fn resync(&mut self, from: u64) -> std::io::Result<Option<u64>> {
        const SPAN: usize = 64 * BLOCK;
        let mut buf = vec![0u8; SPAN];
        let mut at = from;
        while at + BLOCK as u64 <= self.ix.size {
            let n = ((self.ix.size - at) as usize).min(SPAN) / BLOCK * BLOCK;
            self.read_at(&mut buf[..n], at)?;
            for (i, block) in buf[..n].chunks_exact(BLOCK).enumerate() {
                let block: &[u8; BLOCK] = block.try_into().expect("a block");
                if block.iter().any(|&b| b != 0) && bad_checksum(block).is_none() {
                    return Ok(Some(at + (i * BLOCK) as u64));
                }
            }
            at += n as u64;
        }
        Ok(None)
    }

    /// The text of a long name or pax header of `len` bytes at `start`.
    fn extended(&mut self, start: u64, len: u64) -> std::io::Result<Option<String>> {
        if len > MAX_EXTENDED {
            return Ok(None);
        }
        let mut buf = vec![0u8; len as usize];
        self.read_at(&mut buf, start)?;
        Ok(String::from_utf8(buf).ok())
    }

    /// A pax header's records (`LEN key=value\n`): `path` and `size` apply
    /// to the next member.
    fn pax(&mut self, mut text: &str) {
        while let Some((len, rest)) = text.split_once(' ') {
            let Ok(len) = len.parse::<usize>() else {
                return;
            };
            let head = text.len() - rest.len();
            let Some(record) = text.get(head..len.max(head)) else {
                return;
            };
            if let Some((key, value)) = record.trim_end_matches('\n').split_once('=') {
                match key {
                    "path" => self.pax_path = Some(value.to_string()),
                    "size" => self.pax_size = value.parse().ok(),
                    _ => {}
                }
            }
            text = &text[len.max(head)..];
        }
    }
}

fn long_unusable(what: &str, len: u64) -> String {
    format!(
        "a {what} of {len} bytes that is over {MAX_EXTENDED} bytes or not UTF-8; the member after \
         it keeps its short name"
    )
}

/// Why `block`'s checksum field does not match its bytes, if it does not.
/// The checksum is the sum of the header's bytes with the field itself
/// read as spaces; old archives summed signed bytes, which is accepted too.
fn bad_checksum(block: &[u8; BLOCK]) -> Option<String> {
    let field = &block[148..156];
    let text: String = field
        .iter()
        .take_while(|&&b| b != 0)
        .map(|&b| b as char)
        .collect();
    let Ok(stated) = u32::from_str_radix(text.trim(), 8) else {
        return Some(format!(
            "the header's checksum field {text:?} is not an octal number"
        ));
    };
    let (mut unsigned, mut signed) = (0u32, 0i32);
    for (i, &b) in block.iter().enumerate() {
        let b = if (148..156).contains(&i) { b' ' } else { b };
        unsigned += u32::from(b);
        signed += i32::from(b as i8);
    }
    if stated == unsigned || i64::from(stated) == i64::from(signed) {
        return None;
    }
    Some(format!(
        "the header's checksum is {stated} but its bytes sum to {unsigned}"
    ))
}

/// The name field of a (possibly damaged) header, when it is text.
fn name_of(block: &[u8; BLOCK]) -> Option<String> {
    let name: Vec<u8> = block[..100]
        .iter()
        .take_while(|&&b| b != 0)
        .copied()
        .collect();
    String::from_utf8(name).ok().filter(|n| !n.is_empty())
}

#[cfg(test)]
#[path = "tar_tests.rs"]
mod tests;
