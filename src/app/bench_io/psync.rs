//! The `psync` baseline: one thread, `open` + `read` of each whole file.
//!
//! Buffered passes use the std reader's [`crate::reader::read_file`] (open,
//! fstat, read to EOF), exactly what the std engine does per file. Direct
//! passes open with `O_DIRECT` and read into a 4096-aligned buffer in
//! aligned lengths; the short read at EOF is trimmed to the file size. A file
//! whose `O_DIRECT` open or first read is refused with `EINVAL` (tmpfs,
//! odd alignment) is read buffered instead and counted as a fallback.
//!
//! Latency is open → last byte read; `close` is outside it but inside the
//! pass's elapsed time.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Instant;

use super::{FileEntry, Measured};
use crate::reader::{Error, read_file};

/// Alignment of O_DIRECT buffers, offsets and lengths. 4096 satisfies every
/// logical block size up to 4 KiB.
pub const ALIGN: usize = 4096;

/// A heap buffer whose usable part starts on an [`ALIGN`] boundary.
///
/// Over-allocates a plain `Vec<u8>` by `ALIGN` and uses the aligned window
/// inside it, which keeps this module free of `unsafe` at the cost of 4 KiB.
#[derive(Default)]
pub struct AlignedBuf {
    raw: Vec<u8>,
}

impl AlignedBuf {
    /// An aligned window of exactly `len` bytes (`len` a multiple of ALIGN).
    pub fn window(&mut self, len: usize) -> &mut [u8] {
        if self.raw.len() < len + ALIGN {
            self.raw = vec![0u8; len + ALIGN];
        }
        let off = self.raw.as_ptr().align_offset(ALIGN);
        &mut self.raw[off..off + len]
    }
}

/// Largest file the baseline reads; matches nothing the corpus should hold.
const LIMIT: u64 = 1 << 40;

/// Reads every file once on this thread.
pub fn run(files: &[FileEntry], direct: bool) -> Measured {
    let mut m = Measured::default();
    let mut heap = Vec::new();
    let mut aligned = AlignedBuf::default();
    let start = Instant::now();
    for f in files {
        let t = Instant::now();
        let res = if direct {
            match read_direct(&f.path, &mut aligned) {
                Ok(Some(n)) => Ok(n),
                Ok(None) => {
                    m.buffered_fallbacks += 1;
                    read_file(&f.path, LIMIT, &mut heap).map(|()| heap.len() as u64)
                }
                Err(e) => Err(e),
            }
        } else {
            read_file(&f.path, LIMIT, &mut heap).map(|()| heap.len() as u64)
        };
        let lat = t.elapsed();
        match res {
            Ok(n) => {
                m.files += 1;
                m.bytes += n;
                m.latencies_ns.push(lat.as_nanos() as u64);
            }
            Err(e) => m.error(&f.path, e),
        }
    }
    m.elapsed = start.elapsed();
    m
}

/// Reads `path` with O_DIRECT. `Ok(None)` when O_DIRECT is refused
/// (`EINVAL`) and the caller should read it buffered.
pub fn read_direct(path: &Path, buf: &mut AlignedBuf) -> Result<Option<u64>, Error> {
    let mut f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(None),
        Err(e) => return Err(Error::Open(e)),
    };
    let meta = f.metadata().map_err(Error::Stat)?;
    if let Some(kind) = crate::reader::FileKind::of(&meta) {
        return Err(Error::NotAFile(kind));
    }
    let size = meta.len();
    // One aligned block past the size, so a file that grew is noticed.
    let len = (size as usize).div_ceil(ALIGN) * ALIGN + ALIGN;
    let got = read_aligned(&mut f, buf.window(len))?;
    match got {
        None => Ok(None),
        Some(got) if got == size => Ok(Some(size)),
        Some(got) => Err(Error::SizeChanged {
            expected: size,
            got,
        }),
    }
}

/// Fills `win` from `f` until EOF or a short (unaligned) read; `None` if the
/// very first read is refused with EINVAL.
fn read_aligned(f: &mut File, win: &mut [u8]) -> Result<Option<u64>, Error> {
    let mut got = 0usize;
    while got < win.len() {
        match f.read(&mut win[got..]) {
            Ok(0) => break,
            Ok(n) => {
                got += n;
                if !got.is_multiple_of(ALIGN) {
                    break; // short read at EOF; the next offset is unaligned
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if got == 0 && e.raw_os_error() == Some(libc::EINVAL) => return Ok(None),
            Err(e) => return Err(Error::Read(e)),
        }
    }
    Ok(Some(got as u64))
}
