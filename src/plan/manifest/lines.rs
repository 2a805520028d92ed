//! A manifest's lines, read with bounds: what the planner, the shard count
//! and the write-back all read, so they number the same lines alike.
//!
//! A manifest comes from outside and may be hostile; reading it keeps
//! memory and work bounded whatever it holds:
//!
//! * **The file is a regular file.** Its type is checked with `stat`
//!   before it is opened (and again with `fstat` after an `O_NONBLOCK`
//!   open, `reader::open_regular`): a FIFO, a directory or a device named
//!   as a manifest is [`Error::NotRegular`], never an `open` that waits for
//!   a writer.
//! * **A line holds at most [`Limits::max_line_bytes`]**
//!   (`input.manifest_max_line_kib`, 1 MiB by default): a longer line is
//!   read to its newline in the reader's buffer-sized pieces, none of it
//!   kept, and comes back as [`Line::TooLong`] (the planner rejects it with
//!   its line number and goes on). The line buffer never grows past the
//!   limit.
//! * **A manifest holds at most [`Limits::max_lines`] lines**
//!   (`input.manifest_max_lines`, 100 million by default), blank ones
//!   included: one more is [`Error::TooManyLines`], which stops the build.
//!   This is the bound on a gzip bomb (a gigabyte of newlines compressed
//!   into a megabyte: blank lines cost no memory, but reading them costs
//!   time), and it keeps line numbers within the `u32` the row's `line`
//!   dataset stores.
//! * **A line that is not UTF-8** is [`Line::NotUtf8`], a rejection of
//!   that line, not a failure of the manifest.
//!
//! Gzip is recognised by its magic bytes and read through `flate2`'s
//! streaming decoder (members concatenated), so memory does not follow the
//! decompressed size either.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use super::Error;
use crate::config::defaults::input as defaults;

/// The bounds on reading a manifest (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest line, in bytes, its newline not counted.
    pub max_line_bytes: usize,
    /// The most lines one manifest may have, blank ones included.
    pub max_lines: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_line_bytes: (defaults::MANIFEST_MAX_LINE_KIB << 10) as usize,
            max_lines: defaults::MANIFEST_MAX_LINES,
        }
    }
}

/// One line of a manifest, its newline (and a `\r` before it) removed.
#[derive(Debug, PartialEq, Eq)]
pub enum Line<'a> {
    Text(&'a str),
    /// Over [`Limits::max_line_bytes`]; `bytes` long, none of it kept.
    TooLong {
        bytes: u64,
    },
    /// Not UTF-8 from byte `at` (0-based, in the line).
    NotUtf8 {
        at: usize,
    },
}

/// A manifest's lines, in order, with their 1-based numbers.
pub struct Lines {
    r: Box<dyn BufRead>,
    limits: Limits,
    /// The number of the last line read.
    no: u64,
    buf: Vec<u8>,
    path: PathBuf,
    /// Where the next line starts, in the (gunzipped) bytes.
    at: u64,
    /// The last line's text, in the (gunzipped) bytes.
    last: Span,
    /// The file as it was opened (None: bytes from a reader).
    stamp: Option<Stamp>,
}

/// Where a line's text lies in a manifest's (gunzipped) bytes: from `at`,
/// `len` bytes, its newline and a `\r` before it not counted. What the
/// write-back copies, with no second reading of the lines. Packed to 12
/// bytes: a build holds one per row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, packed(4))]
pub struct Span {
    pub at: u64,
    pub len: u32,
}

/// A manifest file as it was when planned: its length and modification
/// time. The write-back copies lines by their [`Span`]s only from the
/// same file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub len: u64,
    pub modified_ns: i128,
}

impl Stamp {
    pub fn of(meta: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp {
            len: meta.len(),
            modified_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        }
    }
}

/// The bytes of the manifest file `f` (gunzipped when they start with
/// gzip's magic); `path` names it in errors.
pub fn bytes(mut f: impl BufRead + 'static, path: &Path) -> Result<Box<dyn BufRead>, Error> {
    let gz = f
        .fill_buf()
        .map_err(|source| read_error(path, source))?
        .starts_with(&[0x1f, 0x8b]);
    Ok(if gz {
        Box::new(std::io::BufReader::new(flate2::read::MultiGzDecoder::new(
            f,
        )))
    } else {
        Box::new(f)
    })
}

/// The manifest file at `path`, opened as [`Lines::open`] opens it, and
/// its [`Stamp`].
pub fn open_file(path: &Path) -> Result<(std::fs::File, Stamp), Error> {
    let read = |source| read_error(path, source);
    match crate::reader::open_regular(path) {
        Ok((f, meta)) => Ok((f, Stamp::of(&meta))),
        Err(crate::reader::Error::NotAFile(kind)) => Err(Error::NotRegular {
            path: path.to_path_buf(),
            kind,
        }),
        Err(
            crate::reader::Error::Open(e)
            | crate::reader::Error::Stat(e)
            | crate::reader::Error::Read(e),
        ) => Err(read(e)),
        Err(e) => Err(read(std::io::Error::other(e))),
    }
}

impl Lines {
    /// The lines of the manifest at `path` (gunzipped when it starts with
    /// gzip's magic), read within `limits`.
    pub fn open(path: &Path, limits: Limits) -> Result<Lines, Error> {
        let (f, stamp) = open_file(path)?;
        let mut lines = Lines::from_reader(std::io::BufReader::new(f), path, limits)?;
        lines.stamp = Some(stamp);
        Ok(lines)
    }

    /// The lines of the manifest bytes `f` yields (gunzipped when they start
    /// with gzip's magic); `path` names them in errors.
    pub fn from_reader(
        f: impl BufRead + 'static,
        path: &Path,
        limits: Limits,
    ) -> Result<Lines, Error> {
        Ok(Lines {
            r: bytes(f, path)?,
            limits,
            no: 0,
            buf: Vec::new(),
            path: path.to_path_buf(),
            at: 0,
            last: Span::default(),
            stamp: None,
        })
    }

    /// Where the last line's text lies ([`Span`]), when it was within the
    /// limit (a [`Line::Text`] or [`Line::NotUtf8`]).
    pub fn span(&self) -> Span {
        self.last
    }

    /// The file as it was opened, when [`Lines::open`] opened one.
    pub fn stamp(&self) -> Option<Stamp> {
        self.stamp
    }

    /// The number of lines left, counted as [`Lines::next_line`] numbers
    /// them (a last line without its newline counts; a line over the
    /// length limit counts as one) without copying or decoding them: what
    /// a shard's share divides. More than [`Limits::max_lines`] in all is
    /// [`Error::TooManyLines`], as for the reader of the lines.
    pub fn count(mut self) -> Result<u64, Error> {
        let mut ends_open = false;
        loop {
            let avail = fill(&mut self.r, &self.path)?;
            if avail.is_empty() {
                break;
            }
            self.no += avail.iter().filter(|&&b| b == b'\n').count() as u64;
            ends_open = avail.last() != Some(&b'\n');
            let n = avail.len();
            self.r.consume(n);
            if self.no > self.limits.max_lines {
                break;
            }
        }
        self.no += u64::from(ends_open);
        self.within_max()?;
        Ok(self.no)
    }

    /// [`Error::TooManyLines`] once more than [`Limits::max_lines`] were
    /// read.
    fn within_max(&self) -> Result<(), Error> {
        if self.no > self.limits.max_lines {
            return Err(Error::TooManyLines {
                path: self.path.clone(),
                max: self.limits.max_lines,
            });
        }
        Ok(())
    }

    /// The next line and its 1-based number; None after the last.
    pub fn next_line(&mut self) -> Result<Option<(u64, Line<'_>)>, Error> {
        self.buf.clear();
        let max = self.limits.max_line_bytes;
        let (mut bytes, mut any) = (0u64, false);
        loop {
            let avail = fill(&mut self.r, &self.path)?;
            if avail.is_empty() {
                break;
            }
            any = true;
            let nl = avail.iter().position(|&b| b == b'\n');
            let take = nl.unwrap_or(avail.len());
            bytes += take as u64;
            if bytes <= max as u64 {
                self.buf.extend_from_slice(&avail[..take]);
            }
            self.r.consume(take + usize::from(nl.is_some()));
            if nl.is_some() {
                break;
            }
        }
        if !any {
            return Ok(None);
        }
        let line_at = self.at;
        // The next line starts after this one's newline (none at the end).
        self.at += bytes + 1;
        self.no += 1;
        self.within_max()?;
        debug_assert!(
            self.buf.len() <= max,
            "the line buffer stays within the limit"
        );
        if bytes > max as u64 {
            return Ok(Some((self.no, Line::TooLong { bytes })));
        }
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        self.last = Span {
            at: line_at,
            len: u32::try_from(self.buf.len()).unwrap_or(u32::MAX),
        };
        Ok(Some((
            self.no,
            match std::str::from_utf8(&self.buf) {
                Ok(text) => Line::Text(text),
                Err(e) => Line::NotUtf8 {
                    at: e.valid_up_to(),
                },
            },
        )))
    }
}

/// The bytes `r` holds next (empty at the end), reading again after an
/// interruption; an error names the manifest at `path`. Once a fill has
/// not been interrupted its bytes are buffered, so the second `fill_buf`
/// only hands them out.
fn fill<'r>(r: &'r mut Box<dyn BufRead>, path: &Path) -> Result<&'r [u8], Error> {
    while let Err(e) = r.fill_buf() {
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(read_error(path, e));
        }
    }
    r.fill_buf().map_err(|source| read_error(path, source))
}

fn read_error(path: &Path, source: std::io::Error) -> Error {
    Error::Read {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_line_bytes: usize, max_lines: u64) -> Limits {
        Limits {
            max_line_bytes,
            max_lines,
        }
    }

    fn all(path: &Path, l: Limits) -> Result<Vec<(u64, String)>, Error> {
        let mut lines = Lines::open(path, l)?;
        let mut out = Vec::new();
        while let Some((no, line)) = lines.next_line()? {
            out.push((no, format!("{line:?}")));
        }
        Ok(out)
    }

    #[test]
    fn a_long_line_is_skipped_to_its_newline_and_the_next_lines_are_read() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("m.jsonl");
        let long = "x".repeat(100_000);
        let mut bytes = format!("a\r\n{long}\nbc\n\nd").into_bytes();
        bytes.extend_from_slice(b"\n\xffz");
        std::fs::write(&f, &bytes).unwrap();
        let got = all(&f, limits(1000, 100)).unwrap();
        let want = [
            (1, "Text(\"a\")".to_string()),
            (2, "TooLong { bytes: 100000 }".to_string()),
            (3, "Text(\"bc\")".to_string()),
            (4, "Text(\"\")".to_string()),
            (5, "Text(\"d\")".to_string()),
            (6, "NotUtf8 { at: 0 }".to_string()),
        ];
        assert_eq!(got, want);
        // The limit is inclusive.
        let got = all(&f, limits(100_000, 100)).unwrap();
        assert!(got[1].1.starts_with("Text("), "{:?}", &got[1].1[..20]);
    }

    /// Each line's span is where its text lies in the (gunzipped) bytes,
    /// its `\r\n` or `\n` left out: what the write-back copies.
    #[test]
    fn a_line_s_span_is_its_text_in_the_bytes_gzipped_or_not() {
        let d = tempfile::tempdir().unwrap();
        let text = "{\"a\": 1}\r\n\n  {\"é\": \"ü\"}  \n\u{2028}x\n{\"end\": true}".to_string();
        let plain = d.path().join("m.jsonl");
        std::fs::write(&plain, &text).unwrap();
        let gz = d.path().join("m.jsonl.gz");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut enc, text.as_bytes()).unwrap();
        std::fs::write(&gz, enc.finish().unwrap()).unwrap();
        for path in [&plain, &gz] {
            let mut lines = Lines::open(path, Limits::default()).unwrap();
            let mut seen = Vec::new();
            while let Some((_, line)) = lines.next_line().unwrap() {
                let Line::Text(t) = line else { panic!() };
                let t = t.to_string();
                let s = lines.span();
                assert_eq!(
                    &text.as_bytes()[s.at as usize..][..s.len as usize],
                    t.as_bytes()
                );
                seen.push(t);
            }
            assert_eq!(seen.len(), 5);
            assert_eq!(seen[4], "{\"end\": true}");
            assert!(lines.stamp().is_some());
        }
    }

    /// The count a shard divides is the number of lines the planner
    /// reads, whatever the lines hold and however the file ends.
    #[test]
    fn the_count_is_the_number_of_lines_read() {
        let d = tempfile::tempdir().unwrap();
        let long = "x".repeat(5000);
        let mut odd = format!("{long}\n\u{e9}\n").into_bytes();
        odd.extend_from_slice(b"\xff-not-utf8\n");
        odd.extend_from_slice(long.as_bytes());
        let cases: [Vec<u8>; 7] = [
            b"".to_vec(),
            b"\n".to_vec(),
            b"a".to_vec(),
            b"a\n".to_vec(),
            b"a\r\n\n\nb".to_vec(),
            odd,
            vec![b'\n'; 70_000],
        ];
        for (i, text) in cases.iter().enumerate() {
            let f = d.path().join(format!("{i}.jsonl"));
            std::fs::write(&f, text).unwrap();
            let l = limits(1000, 1_000_000);
            let read = all(&f, l).unwrap().len() as u64;
            assert_eq!(
                Lines::open(&f, l).unwrap().count().unwrap(),
                read,
                "case {i}"
            );
            if read > 0 {
                match Lines::open(&f, limits(1000, read - 1)).unwrap().count() {
                    Err(Error::TooManyLines { .. }) => {}
                    other => panic!("case {i}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn one_line_past_the_cap_stops_the_manifest() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("m.jsonl.gz");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &[b'\n'; 10_000]).unwrap();
        std::fs::write(&f, gz.finish().unwrap()).unwrap();
        assert_eq!(all(&f, limits(10, 10_000)).unwrap().len(), 10_000);
        match all(&f, limits(10, 9_999)) {
            Err(Error::TooManyLines { max: 9_999, .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_fifo_is_not_opened_as_a_manifest() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("m.jsonl");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        match Lines::open(&fifo, Limits::default()) {
            Err(e @ Error::NotRegular { .. }) => {
                assert!(e.to_string().contains("a FIFO (named pipe)"), "{e}")
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a FIFO was opened"),
        }
    }
}
