//! Disk space for an appender's next writes: reserved before HDF5 sees
//! them, so that a full disk never reaches HDF5 (the module documentation
//! of `writer::append`, "A full disk never reaches HDF5").

use super::{Appender, Error, METADATA_HEADROOM};
use crate::runtime::sys;

impl Appender {
    /// Reserves the disk space that writing the buffered rows (and the next
    /// `more_path` bytes of path), pending names and a flush can take;
    /// [`Error::NoSpace`] when it is not there.
    pub(super) fn reserve(&self, rows: usize, more_path: usize) -> Result<(), Error> {
        // Each string column may start a new chunk of its bytes and of its
        // ends: counted in the headroom.
        let strings: usize = self.label_names[self.names_written..]
            .iter()
            .map(|n| n.len() + 8)
            .sum::<usize>()
            + self.paths.pending_bytes()
            + self.meta.pending_bytes()
            + more_path
            + 8;
        let rows_bytes = self
            .store
            .bytes_to_write(rows, self.chunk_files, self.value_bytes);
        let needed = rows_bytes + strings as u64 + METADATA_HEADROOM;
        let size = self.sync.metadata().map_err(|source| Error::Io {
            path: self.path.clone(),
            action: "stat the output file",
            source,
        })?;
        let no_space = |source| Error::NoSpace {
            path: self.path.clone(),
            needed,
            source,
        };
        let fd = std::os::fd::AsFd::as_fd(&self.sync);
        match sys::reserve_blocks(fd, size.len(), needed) {
            Ok(()) => Ok(()),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG)
                ) =>
            {
                Err(no_space(e))
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP)) => {
                match sys::available_bytes(fd) {
                    Ok(free) if free < needed => {
                        Err(no_space(std::io::Error::from_raw_os_error(libc::ENOSPC)))
                    }
                    // Cannot tell: let the write try.
                    _ => Ok(()),
                }
            }
            Err(source) => Err(Error::Io {
                path: self.path.clone(),
                action: "reserve disk space in",
                source,
            }),
        }
    }
}
