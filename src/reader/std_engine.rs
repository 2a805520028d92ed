//! Engine `std`: plain blocking reads, one file at a time.
//!
//! [`read_file`] does `open` + `fstat` + `read` of one file into a recycled
//! buffer; the reader stage (`super::stage`) runs it on `io.threads` threads
//! where io_uring is unusable, and the ring engine's threads fall back to it
//! when their ring fails. The loaded ring's capacity (`io.queue_depth`)
//! bounds the bytes held in memory; buffers come back from compute through a
//! free queue, so steady state allocates nothing.
//!
//! A per-file failure (vanished, unreadable, not a regular file, larger than
//! `io.max_file_bytes`) is not an error of the stage: it travels down the ring
//! as a `Loaded` with a reason, and becomes a rejection line.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;

use super::Error;

/// Reads one file into `buf` (cleared first), enforcing the size limit.
pub fn read_file(path: &std::path::Path, limit: u64, buf: &mut Vec<u8>) -> Result<(), Error> {
    buf.clear();
    // O_NOFOLLOW, as the io_uring engine: a symbolic link is not read.
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(Error::Open)?;
    let meta = f.metadata().map_err(Error::Stat)?;
    if !meta.is_file() {
        return Err(Error::NotAFile);
    }
    let size = meta.len();
    if size > limit {
        return Err(Error::TooLarge { size, limit });
    }
    buf.reserve(size as usize);
    // Read at most one byte past the stat size, so a growing file is noticed
    // without reading an unbounded amount.
    let got = (&mut f)
        .take(size + 1)
        .read_to_end(buf)
        .map_err(Error::Read)? as u64;
    if got != size {
        return Err(Error::SizeChanged {
            expected: size,
            got,
        });
    }
    Ok(())
}

/// Reads `range` of the file at `path` into `buf` (cleared first): its
/// prefix, then `range.len` bytes at `range.start` with `pread`. A file that
/// ends before the range does is [`Error::SizeChanged`] (the source planned
/// the range from the file's header).
pub fn read_range(
    path: &std::path::Path,
    range: &super::ReadRange,
    buf: &mut Vec<u8>,
) -> Result<(), Error> {
    use std::os::unix::fs::FileExt;
    buf.clear();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(Error::Open)?;
    let meta = f.metadata().map_err(Error::Stat)?;
    if !meta.is_file() {
        return Err(Error::NotAFile);
    }
    let end = range.start.saturating_add(range.len);
    if meta.len() < end {
        return Err(Error::SizeChanged {
            expected: end,
            got: meta.len(),
        });
    }
    let head = range.prefix.len();
    buf.reserve(head + range.len as usize);
    buf.extend_from_slice(&range.prefix);
    buf.resize(head + range.len as usize, 0);
    f.read_exact_at(&mut buf[head..], range.start)
        .map_err(Error::Read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symbolic_link_is_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("a.wav");
        std::fs::write(&target, b"RIFF").unwrap();
        let link = d.path().join("link.wav");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let mut buf = Vec::new();
        read_file(&target, 1 << 20, &mut buf).unwrap();
        assert_eq!(buf, b"RIFF");
        match read_file(&link, 1 << 20, &mut buf) {
            Err(Error::Open(e)) => assert_eq!(e.raw_os_error(), Some(libc::ELOOP)),
            other => panic!("a link was read: {other:?}"),
        }
    }

    #[test]
    fn a_range_is_its_prefix_then_exactly_its_bytes() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("a.bin");
        let body: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&f, &body).unwrap();
        let range = crate::reader::ReadRange {
            prefix: std::sync::Arc::from(&b"HEAD"[..]),
            start: 1234,
            len: 777,
        };
        let mut buf = Vec::new();
        read_range(&f, &range, &mut buf).unwrap();
        assert_eq!(&buf[..4], b"HEAD");
        assert_eq!(&buf[4..], &body[1234..1234 + 777]);
        let past = crate::reader::ReadRange {
            start: 9_500,
            ..range
        };
        assert!(matches!(
            read_range(&f, &past, &mut buf),
            Err(Error::SizeChanged {
                expected: 10_277,
                got: 10_000
            })
        ));
    }
}
