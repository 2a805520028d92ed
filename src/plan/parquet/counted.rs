//! The parquet file as the arrow reader sees it: a [`ChunkReader`] over
//! positioned reads (`pread`, so the reader's clones share no cursor) that
//! counts the bytes the decoder takes and keeps the first operating-system
//! read error.
//!
//! What is counted ([`Counted::bytes_read`]): every byte handed to the
//! parquet crate or to `check_magic`: the magic, the footer, each page
//! header as the decoder consumes it, and each page's payload. A page header
//! is parsed through a [`HEADER_BUFFER_BYTES`] buffer whose unconsumed
//! read-ahead is not counted, so the count is the file's bytes the decode
//! needed (the 8 bytes of magic and footer length are read twice) and does
//! not depend on buffer sizes; columns left out of the projection are never
//! read.
//!
//! Why keep the error: the arrow reader turns every error into text
//! (`ArrowError::ParquetError(String)`), so a failing disk would read as a
//! damaged row group. The caller asks [`Counted::io_error`] after a failure
//! and stops the file instead of rejecting rows.
//!
//! Owns: the open file (shared by the clones, closed with the last).

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use parquet::errors::ParquetError;
use parquet::file::reader::{ChunkReader, Length};

use super::Error;

/// The buffer a page header is parsed through: headers are tens of bytes
/// (a few hundred with statistics), so one read covers almost every one and
/// the read-ahead past it stays small.
pub(super) const HEADER_BUFFER_BYTES: usize = 1024;

/// The file; clones share the file, the count and the error.
#[derive(Clone)]
pub(super) struct Counted {
    file: Arc<File>,
    len: u64,
    state: Arc<Mutex<ReadState>>,
}

#[derive(Default)]
struct ReadState {
    bytes: u64,
    error: Option<io::Error>,
}

impl Counted {
    pub(super) fn new(file: File) -> Counted {
        let len = file.metadata().map_or(0, |m| m.len());
        Counted {
            file: Arc::new(file),
            len,
            state: Arc::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, ReadState> {
        // A poisoned lock only means a panic elsewhere; the count stays valid.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn bytes_read(&self) -> u64 {
        self.state().bytes
    }

    fn consumed(&self, n: usize) {
        self.state().bytes += n as u64;
    }

    /// The first operating-system read error, as the file's error.
    pub(super) fn io_error(&self, path: &Path) -> Option<Error> {
        let source = self.state().error.take()?;
        Some(Error::Read {
            path: path.to_owned(),
            source,
        })
    }

    /// One positioned read, uncounted; an error other than an interruption
    /// is kept (the first one).
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize> {
        let got = self.file.read_at(buf, at);
        if let Err(e) = &got
            && e.kind() != io::ErrorKind::Interrupted
        {
            let mut s = self.state();
            if s.error.is_none() {
                s.error = Some(io::Error::new(e.kind(), e.to_string()));
            }
        }
        got
    }

    /// Fills `buf` from `at` and counts it.
    pub(super) fn read_exact_at(&self, mut buf: &mut [u8], mut at: u64) -> io::Result<()> {
        let n = buf.len();
        while !buf.is_empty() {
            match self.read_at(buf, at) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(k) => {
                    buf = &mut buf[k..];
                    at += k as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.consumed(n);
        Ok(())
    }
}

/// A sequential read from an offset (uncounted: [`Consumed`] counts).
pub(super) struct At {
    file: Counted,
    at: u64,
}

impl Read for At {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// A buffered sequential read that counts what its reader takes.
pub(super) struct Consumed {
    inner: BufReader<At>,
    file: Counted,
}

impl Read for Consumed {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.file.consumed(n);
        Ok(n)
    }
}

impl Length for Counted {
    fn len(&self) -> u64 {
        self.len
    }
}

impl ChunkReader for Counted {
    type T = Consumed;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Consumed> {
        let at = At {
            file: self.clone(),
            at: start,
        };
        Ok(Consumed {
            inner: BufReader::with_capacity(HEADER_BUFFER_BYTES, at),
            file: self.clone(),
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let past_end = start
            .checked_add(length as u64)
            .is_none_or(|end| end > self.len);
        if past_end {
            return Err(ParquetError::EOF(format!(
                "{length} bytes at offset {start} reach past the end of the {}-byte file",
                self.len
            )));
        }
        let mut buf = vec![0u8; length];
        self.read_exact_at(&mut buf, start)?;
        Ok(Bytes::from(buf))
    }
}
