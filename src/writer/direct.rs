//! Direct chunk writes of `mel`: whole chunks handed to HDF5 with
//! `H5Dwrite_chunk`, which skips the hyperslab selection, the type path and
//! the chunk cache, and writes the bytes at the chunk's address as they are.
//!
//! Layers (docs/CONVENTIONS.md, "Unsafe and FFI": raw call → thin `Result`
//! wrapper → safe type):
//! * [`raw`] holds the `unsafe` calls (`H5Dwrite_chunk`,
//!   `H5Dget_chunk_info_by_coord` for the appender's page-cache drop, and
//!   `H5Dread_chunk` for the tests that make a killed writer's chunks by
//!   hand), each
//!   under hdf5-metno's global lock like every other HDF5 call of the program;
//! * [`MelChunks`] decides *when* each chunk reaches the file.
//!
//! **Same bytes as `write_slice`.** A direct write allocates the chunk in the
//! file at once. `write_slice` does too when a chunk is larger than the
//! dataset's chunk cache (float32 rows of the default shape: 1.94 MB chunks, a
//! 1 MiB cache), but a chunk that fits the cache (float16: 0.97 MB) only
//! reaches the file when the cache evicts it: when the next chunk needs its
//! room, or when the dataset is closed. Where chunks are allocated decides
//! where everything written in between goes (the strings of `path`, the
//! chunk index), so [`MelChunks`] holds cache-sized chunks back and writes
//! them exactly when HDF5's cache would have: oldest first, as soon as the
//! held bytes plus the new chunk exceed the cache size, and the rest at
//! [`MelChunks::flush`], which the caller runs just before closing the
//! dataset. The last, partial chunk is padded with zeros, the fill value HDF5
//! itself puts in a chunk's unwritten rows. `writer::tests_identity` compares
//! whole files written both ways, byte for byte.
//!
//! The stored element type equals the buffer's (`f32`/`f16`, native
//! little-endian): direct writes are used only on little-endian targets; the
//! others keep `write_slice`.

use std::collections::VecDeque;

use hdf5::Dataset;
use ndarray::ArrayView5;

use super::chunk::MelBuf;
use super::lent::{self, InFlight, Loaned};

/// Raw HDF5 chunk calls the high-level crate does not offer (also used by
/// the appender).
pub(super) mod raw {
    use hdf5::Dataset;
    use hdf5_sys::h5::HADDR_UNDEF;
    #[cfg(test)]
    use hdf5_sys::h5d::H5Dread_chunk;
    use hdf5_sys::h5d::{H5Dget_chunk_info_by_coord, H5Dwrite_chunk};
    use hdf5_sys::h5p::H5P_DEFAULT;

    fn check_rank(ds: &Dataset, offset: &[u64], what: &str) -> hdf5::Result<()> {
        let ndim = ds.ndim();
        if offset.len() == ndim {
            return Ok(());
        }
        Err(format!(
            "{what}: offset has {} dimensions, the dataset {ndim}",
            offset.len()
        )
        .into())
    }

    /// The stored size in bytes of the chunk of `ds` whose first element is
    /// at `offset` (inside the dataset's extent), or None when that chunk was
    /// never allocated.
    #[cfg(test)]
    pub(in crate::writer) fn chunk_bytes_at(
        ds: &Dataset,
        offset: &[u64],
    ) -> hdf5::Result<Option<usize>> {
        Ok(chunk_extent_at(ds, offset)?.map(|(_, size)| size as usize))
    }

    /// The file address and stored size of the chunk of `ds` whose first
    /// element is at `offset` (inside the dataset's extent), or None when
    /// that chunk was never allocated.
    pub(in crate::writer) fn chunk_extent_at(
        ds: &Dataset,
        offset: &[u64],
    ) -> hdf5::Result<Option<(u64, u64)>> {
        check_rank(ds, offset, "chunk query")?;
        let id = ds.id();
        let (mut mask, mut addr, mut size) = (0u32, HADDR_UNDEF, 0u64);
        hdf5::sync::sync(|| {
            // SAFETY: `id` is the live dataset id of `ds`; `offset` holds one
            // coordinate per dimension (checked above); the three out-pointers
            // are valid locals HDF5 writes once each.
            let r = unsafe {
                H5Dget_chunk_info_by_coord(id, offset.as_ptr(), &mut mask, &mut addr, &mut size)
            };
            hdf5::h5check(r).map(|_| ())
        })?;
        Ok((addr != HADDR_UNDEF).then_some((addr, size)))
    }

    /// Reads the stored bytes of the chunk of `ds` at `offset` (no filters)
    /// into `buf`, which must be exactly the chunk's stored size
    /// ([`chunk_bytes_at`]).
    #[cfg(test)]
    pub(in crate::writer) fn read_chunk(
        ds: &Dataset,
        offset: &[u64],
        buf: &mut [u8],
    ) -> hdf5::Result<()> {
        check_rank(ds, offset, "direct chunk read")?;
        let id = ds.id();
        let mut filters = 0u32;
        hdf5::sync::sync(|| {
            // SAFETY: `id` is the live dataset id of `ds`; `offset` holds one
            // coordinate per dimension; `buf` is writable for the chunk's
            // stored size, which the caller took from HDF5 for this chunk
            // (the datasets have no filters, so that is what is copied).
            let r = unsafe {
                H5Dread_chunk(
                    id,
                    H5P_DEFAULT,
                    offset.as_ptr(),
                    &mut filters,
                    buf.as_mut_ptr().cast(),
                )
            };
            hdf5::h5check(r).map(|_| ())
        })
    }

    /// Writes `data` (the exact stored bytes of one whole chunk, no filters)
    /// as the chunk of `ds` whose first element is at `offset`.
    pub(in crate::writer) fn write_chunk<T: Copy>(
        ds: &Dataset,
        offset: &[u64],
        data: &[T],
    ) -> hdf5::Result<()> {
        check_rank(ds, offset, "direct chunk write")?;
        let bytes = std::mem::size_of_val(data);
        let id = ds.id();
        hdf5::sync::sync(|| {
            // SAFETY: `id` is the live dataset id of `ds`, borrowed for the
            // call; `offset` holds one coordinate per dimension of the dataset
            // (checked above) and `data` is valid for `bytes` bytes of reads.
            // HDF5 copies the buffer before returning and keeps no pointer to
            // either. The global lock serialises this with every other HDF5
            // call, as hdf5-metno does for its own.
            let r = unsafe {
                H5Dwrite_chunk(
                    id,
                    H5P_DEFAULT,
                    0,
                    offset.as_ptr(),
                    bytes,
                    data.as_ptr().cast(),
                )
            };
            hdf5::h5check(r).map(|_| ())
        })
    }
}

/// Writes the whole chunks of one `mel` dataset directly, in the order and at
/// the moments `write_slice` would have put them in the file.
pub(super) struct MelChunks {
    /// Rows per chunk (the dataset's chunk size along N).
    chunk_rows: usize,
    /// Values per row.
    row_len: usize,
    /// The dataset's chunk cache size in bytes: chunks up to this size are
    /// held back the way the cache would hold them.
    cache_bytes: usize,
    /// Slots of the chunk cache's hash table: a chunk evicts the one held in
    /// its slot (chunk index modulo this) before anything else.
    cache_slots: usize,
    /// Chunks a `write_slice` would still hold in the cache: (first row, values).
    held: VecDeque<(usize, MelBuf)>,
    /// Buffers already written, for [`MelChunks::spare`].
    spare: Vec<MelBuf>,
    /// Chunks handed to HDF5 whose bytes may still be queued for the file
    /// (`lent`).
    in_flight: InFlight<MelBuf>,
    /// Whether the dataset has its chunk index (see [`MelChunks::put`]).
    indexed: bool,
}

impl MelChunks {
    /// Direct writer for `ds` (`chunk_rows` rows of `row_len` values per chunk),
    /// or None where the target cannot use direct writes (big-endian). With
    /// `mimic_cache` chunks are held back as the module doc says (a build's
    /// bytes equal `write_slice`'s); without, every chunk is written at once
    /// (serve: a flush must find nothing held).
    pub(super) fn new(
        ds: &Dataset,
        chunk_rows: usize,
        row_len: usize,
        mimic_cache: bool,
    ) -> Option<MelChunks> {
        if cfg!(target_endian = "big") {
            return None;
        }
        let cache = ds.access_plist().ok()?.chunk_cache();
        let cached = mimic_cache && cache.nslots > 0;
        Some(MelChunks {
            chunk_rows,
            row_len,
            cache_bytes: if cached { cache.nbytes } else { 0 },
            cache_slots: cache.nslots.max(1),
            held: VecDeque::new(),
            spare: Vec::new(),
            in_flight: InFlight::new(),
            indexed: false,
        })
    }

    /// A buffer no longer needed by a written chunk, if any (cleared).
    pub(super) fn spare(&mut self) -> Option<MelBuf> {
        if self.spare.is_empty()
            && let Some(mel) = self.in_flight.written()
        {
            self.recycle(mel);
        }
        self.spare.pop()
    }

    /// Writes (or holds, see the module doc) the chunk starting at row `start`,
    /// a multiple of the chunk size; `mel` holds its rows, a whole chunk or the
    /// dataset's last rows, which are padded with zeros here. The dataset must
    /// already extend over the rows.
    pub(super) fn put(&mut self, ds: &Dataset, start: usize, mut mel: MelBuf) -> hdf5::Result<()> {
        // Chunk order is checked by the caller (`chunk::ChunkOrder`); a start
        // off the chunk grid would write rows to the wrong chunk.
        assert!(
            start.is_multiple_of(self.chunk_rows),
            "direct chunk write at row {start}, not a multiple of {}",
            self.chunk_rows
        );
        let full = self.chunk_rows * self.row_len;
        match &mut mel {
            MelBuf::F32(b) => b.resize(full, 0.0),
            MelBuf::F16(b) => b.resize(full, half::f16::ZERO),
        }
        let bytes = mel_bytes(&mel);
        if bytes > self.cache_bytes {
            return self.write_lent(ds, start, mel);
        }
        if !self.indexed {
            // `write_slice` creates the chunk index (its first file space) on
            // the dataset's first write, a held chunk's direct write only
            // later: one value written the reference way creates it at the
            // same moment. That chunk then waits in HDF5's own cache, which
            // the direct write of the whole chunk drops without writing it.
            write_first_value(ds, start, &mel)?;
            self.indexed = true;
        }
        let slot = |start: usize| (start / self.chunk_rows) % self.cache_slots;
        if let Some(i) = self.held.iter().position(|(s, _)| slot(*s) == slot(start))
            && let Some((s, m)) = self.held.remove(i)
        {
            self.write_lent(ds, s, m)?;
        }
        while !self.held.is_empty() && self.held_bytes() + bytes > self.cache_bytes {
            self.write_oldest(ds)?;
        }
        self.held.push_back((start, mel));
        Ok(())
    }

    /// Writes every held chunk, oldest first (what closing the dataset would
    /// flush from its cache).
    /// Also waits until every written chunk's bytes are in the file.
    pub(super) fn flush(&mut self, ds: &Dataset) -> hdf5::Result<()> {
        while !self.held.is_empty() {
            self.write_oldest(ds)?;
        }
        let spare = &mut self.spare;
        self.in_flight.settle(|mel| recycle(spare, mel));
        self.in_flight.check()
    }

    /// The direct write of the chunk at row `start`, its bytes lent to the
    /// file driver (`lent`): the buffer comes back through
    /// [`spare`](Self::spare) once they are in the file.
    fn write_lent(&mut self, ds: &Dataset, start: usize, mel: MelBuf) -> hdf5::Result<()> {
        let loaned = Loaned::new(mel);
        let r = match loaned.get() {
            MelBuf::F32(b) => lent::lend(&loaned, b, || write(ds, start, loaned.get())),
            MelBuf::F16(b) => lent::lend(&loaned, b, || write(ds, start, loaned.get())),
        };
        let spare = &mut self.spare;
        self.in_flight.keep(loaned, |mel| recycle(spare, mel));
        r?;
        self.in_flight.check()
    }

    fn held_bytes(&self) -> usize {
        self.held.iter().map(|(_, m)| mel_bytes(m)).sum()
    }

    fn write_oldest(&mut self, ds: &Dataset) -> hdf5::Result<()> {
        match self.held.pop_front() {
            Some((start, mel)) => self.write_lent(ds, start, mel),
            None => Ok(()),
        }
    }

    fn recycle(&mut self, mel: MelBuf) {
        recycle(&mut self.spare, mel);
    }
}

/// A written chunk's buffer, cleared, into `spare`.
fn recycle(spare: &mut Vec<MelBuf>, mut mel: MelBuf) {
    mel.clear();
    spare.push(mel);
}

fn mel_bytes(mel: &MelBuf) -> usize {
    match mel {
        MelBuf::F32(b) => std::mem::size_of_val(b.as_slice()),
        MelBuf::F16(b) => std::mem::size_of_val(b.as_slice()),
    }
}

/// The first value of the chunk at row `start`, written with `write_slice`.
fn write_first_value(ds: &Dataset, start: usize, mel: &MelBuf) -> hdf5::Result<()> {
    let sel = (start..start + 1, 0..1, 0..1, 0..1, 0..1);
    let shape = (1, 1, 1, 1, 1);
    match mel {
        MelBuf::F32(b) => ds.write_slice(
            ArrayView5::from_shape(shape, &b[..1]).expect("1 value"),
            sel,
        ),
        MelBuf::F16(b) => ds.write_slice(
            ArrayView5::from_shape(shape, &b[..1]).expect("1 value"),
            sel,
        ),
    }
}

/// One direct write of the chunk at row `start` of a 5-D `mel`.
fn write(ds: &Dataset, start: usize, mel: &MelBuf) -> hdf5::Result<()> {
    let offset = [start as u64, 0, 0, 0, 0];
    match mel {
        MelBuf::F32(b) => raw::write_chunk(ds, &offset, b),
        MelBuf::F16(b) => raw::write_chunk(ds, &offset, b),
    }
}
