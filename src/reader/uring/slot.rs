//! One io_uring engine slot: where a file is in its life (`Phase`), what its
//! requests carry (`user_data`), and the two checks at the boundary between
//! the kernel's completions and the engine's bookkeeping — a completion
//! belongs to a request in flight ([`slot_of`]), a slot is freed once and
//! only with nothing pending ([`push_free`]).
//!
//! Invariant: a slot's path, statx buffer and extent belong to its file from
//! admission until its last CQE; the engine (`engine.rs`) owns the slots and
//! only this file decides whether a completion or a release is legitimate.
//! A violation panics: the kernel may still write into the buffers of a slot
//! the engine lost track of, so going on is never safe.

use std::time::Instant;

use crate::reader::ReadRange;
use crate::reader::arena::Extent;

pub(super) const OPEN: u64 = 1;
pub(super) const STATX: u64 = 2;
pub(super) const READ: u64 = 3;
pub(super) const CLOSE: u64 = 4;

pub(super) fn user_data(slot: usize, epoch: u32, kind: u64) -> u64 {
    (u64::from(epoch) << 32) | ((slot as u64) << 8) | kind
}

/// Where a slot is in a file's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(super) enum Phase {
    #[default]
    Free,
    Opening,
    WaitArena,
    Reading,
    Closing,
}

/// What a slot does once its in-flight requests have all completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(super) enum Then {
    #[default]
    Free,
    Reopen,
}

#[derive(Default)]
pub(super) struct Slot {
    pub(super) phase: Phase,
    pub(super) then: Then,
    pub(super) epoch: u32,
    pub(super) job: usize,
    pub(super) started: Option<Instant>,
    pub(super) flags: i32,
    /// CQEs still to come for this slot.
    pub(super) pending: u8,
    pub(super) open_res: i32,
    pub(super) statx_res: i32,
    /// Size at the first open (bytes to deliver, for a whole file).
    pub(super) size: Option<u64>,
    /// A ranged job's prefix and bytes (None: the whole file).
    pub(super) range: Option<ReadRange>,
    /// File offset of the extent's byte `lead`: where the read starts (0 for
    /// a whole file; a range's start aligned down to the block).
    pub(super) base: u64,
    /// Extent bytes before file offset `base`: room for a range's prefix.
    pub(super) lead: usize,
    /// Read offset/length granularity (1 when buffered).
    pub(super) align: u64,
    /// Address alignment and length of the extent to allocate (WaitArena),
    /// and whether it is a spill ([`ArenaPart::alloc_spill`]).
    pub(super) want: (usize, usize, bool),
    /// File offset up to which bytes are known to be in the extent
    /// (short-read resume point; starts at `base`).
    pub(super) got: u64,
    /// File offset of the read in flight.
    pub(super) read_off: u64,
    pub(super) extent: Option<Extent>,
    /// O_DIRECT was dropped for this file.
    pub(super) buffered: bool,
    /// `done` has been called for this file.
    pub(super) delivered: bool,
}

impl Slot {
    /// The file offset the read must reach: the range's end, or the size.
    pub(super) fn target(&self) -> u64 {
        match &self.range {
            Some(r) => r.start.saturating_add(r.len),
            None => self.size.unwrap_or(0),
        }
    }
}

/// The slot and op kind a completion belongs to.
///
/// Invariant (module doc): a slot is reused only after every CQE of its
/// previous requests arrived, so each completion carries the epoch of a slot
/// with requests in flight (`pending > 0`). One that does not means the
/// engine lost track of a request whose buffers the kernel may still write:
/// nothing safe can follow, so it stops here. The other side of this
/// boundary is [`push_free`] (a slot is freed once, with nothing pending).
/// Tests: every read test through `uring::tests::read_all`, and
/// `tests::a_completion_for_no_request_in_flight_is_a_bug` below (it fires).
pub(super) fn slot_of(slots: &[Slot], ud: u64) -> (usize, u64) {
    let (i, epoch, kind) = (
        (ud >> 8) as u32 as usize & 0xff_ffff,
        (ud >> 32) as u32,
        ud & 0xff,
    );
    assert!(
        slots
            .get(i)
            .is_some_and(|s| s.epoch == epoch && s.pending > 0),
        "io_uring completion {ud:#x} (slot {i}, epoch {epoch}) matches no request in flight"
    );
    (i, kind)
}

/// Returns slot `i` to the free list.
///
/// Invariant: a slot is released once per admission, and only with no CQE
/// still to come (its buffers are then the engine's again). A second release
/// would hand one slot — one fixed file, one path and statx buffer — to two
/// files. The list is at most `queue_depth` long, so the check is a short
/// scan per file. Pairs with [`slot_of`]; tests: `uring::tests::read_all` (every
/// slot released at the end, `tiny_arena_recycles_extents`) and
/// `tests::a_slot_released_twice_is_a_bug` below (it fires).
pub(super) fn push_free(free: &mut Vec<usize>, slots: &[Slot], i: usize) {
    assert!(
        !free.contains(&i),
        "io_uring slot {i} released twice (free list {free:?})"
    );
    assert_eq!(
        slots[i].pending, 0,
        "io_uring slot {i} released with CQEs still to come"
    );
    free.push(i);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(epoch: u32, pending: u8) -> Slot {
        Slot {
            phase: Phase::Reading,
            epoch,
            pending,
            ..Slot::default()
        }
    }

    #[test]
    fn a_completion_finds_its_slot_and_kind() {
        let slots = [busy(1, 1), busy(7, 2)];
        assert_eq!(slot_of(&slots, user_data(1, 7, READ)), (1, READ));
    }

    #[test]
    #[should_panic(expected = "matches no request in flight")]
    fn a_completion_for_no_request_in_flight_is_a_bug() {
        // Slot 0's requests all completed (pending 0): a late CQE for it.
        let slots = [busy(3, 0)];
        slot_of(&slots, user_data(0, 3, CLOSE));
    }

    #[test]
    #[should_panic(expected = "matches no request in flight")]
    fn a_completion_of_an_earlier_epoch_is_a_bug() {
        let slots = [busy(4, 1)];
        slot_of(&slots, user_data(0, 3, OPEN));
    }

    #[test]
    #[should_panic(expected = "released twice")]
    fn a_slot_released_twice_is_a_bug() {
        let slots = [Slot::default(), Slot::default()];
        let mut free = vec![1];
        push_free(&mut free, &slots, 0);
        push_free(&mut free, &slots, 0);
    }

    #[test]
    #[should_panic(expected = "CQEs still to come")]
    fn a_slot_released_with_requests_in_flight_is_a_bug() {
        let slots = [busy(1, 1)];
        push_free(&mut Vec::new(), &slots, 0);
    }
}
