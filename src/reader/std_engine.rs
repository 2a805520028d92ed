//! Engine `std`: plain blocking reads, one file at a time.
//!
//! [`read_file`] does `open` + `fstat` + `read` of one file into a recycled
//! buffer; the reader stage (`super::stage`) runs it on `io.threads` threads
//! where io_uring is unusable, and the ring engine's threads fall back to it
//! when their ring fails. The loaded ring's capacity (`io.queue_depth`)
//! bounds the bytes held in memory; buffers come back from compute through a
//! free queue, so steady state allocates nothing.
//!
//! Every open adds `O_NONBLOCK`, so a path that is (or became) a FIFO with no
//! writer opens at once and is refused by its type (`fstat`) instead of
//! blocking the thread in `open` for ever; a regular file's reads ignore the
//! flag.
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
    let mut f = open(path)?;
    let meta = f.metadata().map_err(Error::Stat)?;
    if let Some(kind) = super::FileKind::of(&meta) {
        return Err(Error::NotAFile(kind));
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

/// Opens `path` to read: not through a symbolic link (`O_NOFOLLOW`, as the
/// io_uring engine), and without waiting for a FIFO's writer (`O_NONBLOCK`:
/// the caller refuses it by its type).
fn open(path: &std::path::Path) -> Result<std::fs::File, Error> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(Error::Open)
}

/// Opens `path` (following symbolic links) to read only when it is a
/// regular file: `stat` first, which never blocks, so a FIFO, a directory
/// or a device is refused by its type before any open; the open adds
/// `O_NONBLOCK` and `fstat` checks the type again, in case the path was
/// replaced in between. For the planners' reads of headers and samples.
pub fn open_regular(path: &std::path::Path) -> Result<(std::fs::File, std::fs::Metadata), Error> {
    let meta = std::fs::metadata(path).map_err(Error::Stat)?;
    if let Some(kind) = super::FileKind::of(&meta) {
        return Err(Error::NotAFile(kind));
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(Error::Open)?;
    let meta = f.metadata().map_err(Error::Stat)?;
    if let Some(kind) = super::FileKind::of(&meta) {
        return Err(Error::NotAFile(kind));
    }
    Ok((f, meta))
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
    let f = open(path)?;
    let meta = f.metadata().map_err(Error::Stat)?;
    if let Some(kind) = super::FileKind::of(&meta) {
        return Err(Error::NotAFile(kind));
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

    /// A FIFO with no writer blocked `open` for ever; now it is refused by
    /// its type, as are a directory and a character device.
    #[test]
    fn a_fifo_a_directory_and_a_device_are_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("pipe.wav");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let range = crate::reader::ReadRange::new(Vec::new(), 0, 4);
        let mut buf = Vec::new();
        for (path, kind) in [
            (fifo.as_path(), super::super::FileKind::Fifo),
            (d.path(), super::super::FileKind::Directory),
            (
                std::path::Path::new("/dev/zero"),
                super::super::FileKind::CharDevice,
            ),
        ] {
            match read_file(path, 1 << 20, &mut buf) {
                Err(Error::NotAFile(k)) => assert_eq!(k, kind, "{path:?}"),
                other => panic!("{path:?} was not refused by its type: {other:?}"),
            }
            match read_range(path, &range, &mut buf) {
                Err(Error::NotAFile(k)) => assert_eq!(k, kind, "{path:?}"),
                other => panic!("{path:?} was not refused by its type: {other:?}"),
            }
            match open_regular(path) {
                Err(Error::NotAFile(k)) => assert_eq!(k, kind, "{path:?}"),
                other => panic!("{path:?} was not refused by its type: {other:?}"),
            }
        }
        assert_eq!(
            Error::NotAFile(super::super::FileKind::Fifo).to_string(),
            "not a regular file but a FIFO (named pipe); only regular files are read"
        );
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
