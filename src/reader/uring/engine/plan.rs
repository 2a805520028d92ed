//! What a file needs between its OPEN/STATX and its READ: whether it is read
//! at all ([`UringEngine::refusal`]), the alignment O_DIRECT asks of it, its
//! extent ([`layout`]: the whole file rounded up to the block, or for a
//! ranged job the blocks around its range with room for its prefix in
//! front), the wait for arena space, and what a READ completion means
//! ([`UringEngine::on_read`]: delivered, resumed, or shrunk).
//!
//! A ranged job (a segment of a long WAV) reads `[start, start + len)`:
//! from `start` aligned down to the block through the end aligned up, all
//! O_DIRECT where the file allows it, into an extent that begins with
//! `lead` spare bytes. Once the read completes, the prefix is copied in
//! just before the range's first byte and the extent's view is set to
//! exactly `[prefix][range]`: the decoder never sees the blocks around it,
//! and nothing is copied but the prefix. The range must fit the extent as a
//! whole file must: past a quarter of the partition it gets a spill
//! extent, and one no extent can ever hold is refused (`ArenaTooSmall`).

use std::io;

use io_uring::{opcode, types};

use super::super::slot::{CLOSE, Phase, Then, user_data};
use super::{Done, STATX_DIO_READ_ALIGN, STATX_DIOALIGN, UringEngine};
use crate::reader::{Error, FileBytes};

/// Where a read of file bytes `[start, end)` lies in its extent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    /// File offset the read starts at: `start` aligned down to the block.
    pub base: u64,
    /// Extent bytes before `base`'s: room for a prefix of `prefix` bytes
    /// placed right before `start`'s, a multiple of the extent's alignment
    /// so the read's address keeps it.
    pub lead: usize,
    /// Extent length: `lead`, then `base` through `end` aligned up.
    pub len: usize,
}

/// The layout of a read of `[start, end)` with offsets and lengths in
/// multiples of `align` (1: buffered), into an extent aligned to `mem`,
/// with `prefix` bytes to place before `start`'s.
pub(super) fn layout(start: u64, end: u64, prefix: usize, align: u64, mem: usize) -> Layout {
    let base = start / align * align;
    let gap = (start - base) as usize;
    let lead = prefix.saturating_sub(gap).div_ceil(mem) * mem;
    let len = lead + (end.div_ceil(align) * align - base) as usize;
    Layout { base, lead, len }
}

impl UringEngine {
    /// Why the file just opened in slot `i` (its statx `st`) is not read:
    /// statx failed, not a regular file, too large (a whole file), shorter
    /// than its range (a ranged job: it changed since it was planned), or
    /// its size changed since the first open (a reopen).
    pub(super) fn refusal(&self, i: usize, st: &libc::statx) -> Option<Error> {
        let s = &self.slots[i];
        let size = st.stx_size;
        if s.statx_res < 0 {
            Some(Error::Stat(io::Error::from_raw_os_error(-s.statx_res)))
        } else if let Some(kind) = crate::reader::FileKind::of_mode(u32::from(st.stx_mode)) {
            Some(Error::NotAFile(kind))
        } else if s.range.is_none() && size > self.opts.max_file_bytes {
            Some(Error::TooLarge {
                size,
                limit: self.opts.max_file_bytes,
            })
        } else if s.range.is_some() && size < s.target() {
            Some(Error::SizeChanged {
                expected: s.target(),
                got: size,
            })
        } else {
            match s.size {
                Some(expected) if expected != size => Some(Error::SizeChanged {
                    expected,
                    got: size,
                }),
                _ => None,
            }
        }
    }

    /// The extent slot `i`'s file needs (its alignment for O_DIRECT, a spill
    /// for a big file or range): the slot waits for arena space, or the file
    /// is refused when no extent can ever hold it. A filesystem that opened
    /// O_DIRECT but cannot do it for this file is reopened buffered.
    pub(super) fn plan_extent(
        &mut self,
        i: usize,
        st: &libc::statx,
        done: &mut Done<'_>,
    ) -> io::Result<()> {
        let size = st.stx_size;
        let (mem_align, off_align) = if self.slots[i].flags & libc::O_DIRECT != 0 {
            match self.dio_align(st) {
                Some(a) => a,
                None => {
                    // The filesystem opened O_DIRECT but cannot do it here.
                    let s = &mut self.slots[i];
                    s.flags &= !libc::O_DIRECT;
                    s.buffered = true;
                    s.align = 1;
                    s.then = Then::Reopen;
                    s.phase = Phase::Closing;
                    s.pending = 1;
                    let close = opcode::Close::new(types::Fixed(i as u32))
                        .build()
                        .user_data(user_data(i, s.epoch, CLOSE));
                    // SAFETY: CLOSE references no memory.
                    return unsafe { self.push(&[close]) };
                }
            }
        } else {
            (64, 1)
        };
        let s = &mut self.slots[i];
        s.align = off_align;
        let align = mem_align.max(if off_align > 1 { 4096 } else { 64 }) as usize;
        let at = match &s.range {
            Some(r) => layout(r.start, s.target(), r.prefix.len(), off_align, align),
            None => layout(0, size, 0, off_align, align),
        };
        (s.base, s.lead, s.got) = (at.base, at.lead, at.base);
        let len = at.len as u64;
        // A spill mapping is page-aligned: enough for any DIO memory alignment
        // up to a page, which is all kernels ask.
        let spill = len > self.part.spill_above(align) as u64 && align <= 4096;
        let capacity = self.part.max_extent(align) as u64;
        if !spill && len > capacity {
            let e = Error::ArenaTooSmall {
                need: len,
                capacity,
            };
            self.deliver(i, Err(e), done);
            return self.submit_close(i);
        }
        s.want = (align, len as usize, spill);
        s.phase = Phase::WaitArena;
        self.waiting.push_back(i);
        Ok(())
    }

    /// Memory and offset alignment for O_DIRECT: STATX_DIOALIGN where the
    /// kernel reports it (None: no direct I/O for this file), else the
    /// device's logical block size, else 4096.
    pub(super) fn dio_align(&mut self, st: &libc::statx) -> Option<(u64, u64)> {
        if st.stx_mask & STATX_DIOALIGN != 0 {
            let off =
                if st.stx_mask & STATX_DIO_READ_ALIGN != 0 && st.stx_dio_read_offset_align != 0 {
                    st.stx_dio_read_offset_align
                } else {
                    st.stx_dio_offset_align
                };
            return (off != 0).then(|| (u64::from(st.stx_dio_mem_align.max(1)), u64::from(off)));
        }
        let dev = (st.stx_dev_major, st.stx_dev_minor);
        let lbs = *self
            .block_sizes
            .entry(dev)
            .or_insert_with(|| logical_block_size(dev.0, dev.1).unwrap_or(4096));
        Some((lbs, lbs))
    }

    /// Gives extents to slots waiting for arena space, in arrival order.
    pub(super) fn service_waiters(&mut self, done: &mut Done<'_>) -> io::Result<()> {
        while let Some(&i) = self.waiting.front() {
            if self.stopping {
                self.waiting.pop_front();
                self.submit_close(i)?;
                continue;
            }
            let (align, len, spill) = self.slots[i].want;
            let e = if spill {
                match self.part.alloc_spill(len) {
                    Ok(e) => e,
                    Err(why) => {
                        // No memory for this file now: reject it, keep going.
                        self.waiting.pop_front();
                        let e = Error::Read(io::Error::other(why.to_string()));
                        self.deliver(i, Err(e), done);
                        self.submit_close(i)?;
                        continue;
                    }
                }
            } else {
                self.part.alloc(len, align)
            };
            let Some(e) = e else {
                break;
            };
            self.stats.spills += u64::from(spill);
            self.waiting.pop_front();
            self.slots[i].extent = Some(e);
            self.submit_read(i)?;
        }
        Ok(())
    }

    /// A READ of slot `i` completed with `res`: the file (or range) is
    /// delivered, the read resumes after a reopen (short, EAGAIN, or
    /// O_DIRECT refused at read time), or the file is rejected.
    pub(super) fn on_read(&mut self, i: usize, res: i32, done: &mut Done<'_>) {
        let s = &mut self.slots[i];
        let target = s.target();
        if res < 0 {
            let errno = -res;
            if errno == libc::EINVAL && s.flags & libc::O_DIRECT != 0 {
                s.flags &= !libc::O_DIRECT;
                s.buffered = true;
                s.align = 1;
                s.then = Then::Reopen;
            } else if errno == libc::EAGAIN || errno == libc::EINTR {
                // A filesystem without non-blocking reads fails an O_NONBLOCK
                // file's READ with EAGAIN instead of waiting: the statx of
                // this open found a regular file, so reopen it without.
                s.flags &= !libc::O_NONBLOCK;
                s.then = Then::Reopen;
            } else {
                s.extent = None;
                let e = Error::Read(io::Error::from_raw_os_error(errno));
                self.deliver(i, Err(e), done);
            }
            return;
        }
        let got = s.read_off + res as u64;
        if got >= target {
            let mut e = s.extent.take().expect("a read has an extent");
            match &s.range {
                Some(r) => {
                    // The range's first byte sits at `lead + (start - base)`;
                    // its prefix goes right before it (`layout` left room).
                    let at = s.lead + (r.start - s.base) as usize;
                    let from = at - r.prefix.len();
                    e.as_mut_slice()[from..at].copy_from_slice(&r.prefix);
                    e.set_view(from, r.prefix.len() + r.len as usize);
                }
                None => e.set_len(target as usize),
            }
            self.deliver(i, Ok(FileBytes::Arena(e)), done);
        } else if res == 0 || got <= s.got {
            s.extent = None;
            let e = Error::SizeChanged {
                expected: target,
                got: got.max(s.got),
            };
            self.deliver(i, Err(e), done);
        } else {
            s.got = got;
            s.then = Then::Reopen;
            self.stats.short_reads += 1;
        }
    }
}

/// The logical block size of block device `major:minor` (or of the disk a
/// partition belongs to), from sysfs.
fn logical_block_size(major: u32, minor: u32) -> Option<u64> {
    let dev = format!("/sys/dev/block/{major}:{minor}");
    ["queue", "../queue"].iter().find_map(|q| {
        std::fs::read_to_string(format!("{dev}/{q}/logical_block_size"))
            .ok()?
            .trim()
            .parse()
            .ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prefix fits in the gap between the block start and the range
    /// when it can (no lead), else the lead is whole alignment units; the
    /// read always covers whole blocks from `base` through the range's end.
    #[test]
    fn the_layout_leaves_room_for_the_prefix_right_before_the_range() {
        let l = layout(5000, 6000, 44, 4096, 4096);
        assert_eq!(
            l,
            Layout {
                base: 4096,
                lead: 0,
                len: 4096
            }
        );
        let l = layout(4100, 4101, 44, 4096, 4096);
        assert_eq!(
            l,
            Layout {
                base: 4096,
                lead: 4096,
                len: 8192
            }
        );
        let l = layout(4096, 12_289, 5000, 512, 4096);
        assert_eq!(
            l,
            Layout {
                base: 4096,
                lead: 8192,
                len: 8192 + 8704
            }
        );
        // Buffered: no gap, the lead is the prefix rounded to the memory unit.
        let l = layout(777, 800, 44, 1, 64);
        assert_eq!(
            l,
            Layout {
                base: 777,
                lead: 64,
                len: 64 + 23
            }
        );
        // A whole file: no lead, its size rounded up to the block.
        assert_eq!(layout(0, 10_000, 0, 4096, 4096).len, 12_288);
        // Wherever it lands, the prefix ends where the range starts.
        for (start, prefix) in [(4097, 1), (4097, 2), (8191, 4095), (3, 5000)] {
            let l = layout(start, start + 10, prefix, 4096, 4096);
            let at = l.lead + (start - l.base) as usize;
            assert!(at >= prefix && l.lead.is_multiple_of(4096) && l.base.is_multiple_of(4096));
            assert!(at + 10 <= l.len);
        }
    }
}
