//! Unit tests of the arena: the circular extent allocator, spill extents,
//! partitions and their release signal.

use super::*;
use proptest::prelude::*;

#[test]
fn ring_order_and_out_of_order_release() {
    let a = Arena::new(4 * PAGE as u64, 1).unwrap();
    let p = a.part(0);
    let mut e1 = p.alloc(PAGE, PAGE).unwrap();
    let e2 = p.alloc(PAGE, PAGE).unwrap();
    let e3 = p.alloc(2 * PAGE, PAGE).unwrap();
    assert!(p.alloc(1, 1).is_none(), "full");
    assert_eq!(
        (e1.offset(), e2.offset(), e3.offset()),
        (Some(0), Some(PAGE), Some(2 * PAGE))
    );
    drop(e2); // not at the head: no space yet
    assert!(p.alloc(1, 1).is_none());
    e1.as_mut_slice()[..3].copy_from_slice(b"abc");
    e1.set_len(3);
    assert_eq!(&*e1, b"abc");
    drop(e1); // head advances over e1 and e2
    let e4 = p.alloc(2 * PAGE, PAGE).unwrap();
    assert_eq!(e4.offset(), Some(0));
    assert_eq!(a.bad_releases(), 0);
    let empty = p.alloc(0, PAGE).unwrap();
    assert!(empty.is_empty());
}

/// `Circular::check_placed`, the allocator's own check of what it hands
/// out, fires on an extent over a live one (the model test drives the
/// allocator through random runs with the same check on every allocation).
#[test]
#[should_panic(expected = "overlaps the live ones")]
fn an_extent_over_a_live_one_is_a_bug() {
    let mut c = Circular::new(4 * PAGE, SEGMENT, 0);
    let (start, _) = c.alloc(2 * PAGE, PAGE).unwrap();
    assert_eq!(start, 0);
    c.check_placed(PAGE, PAGE, PAGE);
}

#[test]
#[should_panic(expected = "straddles a segment boundary")]
fn an_extent_across_segments_is_a_bug() {
    let c = Circular::new(4 * PAGE, 2 * PAGE, 0);
    c.check_placed(PAGE, 2 * PAGE, PAGE);
}

#[test]
fn a_partition_is_lapped_once_an_allocation_finds_no_room_before_its_end() {
    let a = Arena::new(4 * PAGE as u64, 1).unwrap();
    let p = a.part(0);
    // One file at a time, each released before the next: the ring restarts
    // at offset 0 and never goes round (serve at a low rate).
    for _ in 0..10 {
        drop(p.alloc(PAGE, PAGE).unwrap());
    }
    assert!(!p.lapped());
    let e1 = p.alloc(PAGE, PAGE).unwrap();
    let _e2 = p.alloc(2 * PAGE, PAGE).unwrap();
    assert!(!p.lapped(), "three of four pages handed out, no wrap yet");
    drop(e1);
    // Two pages do not fit after the tail (one page left): the ring wraps.
    assert!(p.alloc(2 * PAGE, PAGE).is_none());
    assert!(p.lapped());
    let e3 = p.alloc(PAGE, PAGE).unwrap();
    assert_eq!(e3.offset(), Some(3 * PAGE));
    assert!(p.lapped(), "it stays lapped");
}

#[test]
fn waiter_wakes_on_release() {
    let a = Arena::new(PAGE as u64, 1).unwrap();
    let p = a.part(0);
    let e = p.alloc(PAGE, 1).unwrap();
    let seen = p.releases();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        drop(e);
    });
    assert!(p.wait_release(seen, Duration::from_secs(5)));
    assert!(p.alloc(PAGE, 1).is_some());
    t.join().unwrap();
    assert!(!p.wait_release(p.releases(), Duration::from_millis(1)));
}

#[test]
fn partitions_and_iovecs() {
    let a = Arena::with_segment(8 * PAGE as u64 + 100, 2, 3 * PAGE, 0).unwrap();
    assert_eq!(a.len(), 8 * PAGE);
    let p1 = a.part(1);
    assert_eq!(p1.size(), 4 * PAGE);
    let iov = p1.iovecs();
    assert_eq!(iov.len(), 2);
    assert_eq!(iov[0].iov_base as usize, a.as_ptr() as usize + 4 * PAGE);
    assert_eq!((iov[0].iov_len, iov[1].iov_len), (3 * PAGE, PAGE));
    // An extent that would straddle segments moves to the next one.
    let e = p1.alloc(2 * PAGE, PAGE).unwrap();
    let f = p1.alloc(2 * PAGE, PAGE);
    assert!(
        f.is_none(),
        "3 pages left split 1+... no 2-page run in one segment"
    );
    assert_eq!((e.buf_index(), p1.max_extent(PAGE)), (Some(0), 3 * PAGE));
    assert!(matches!(
        Arena::new(100, 1),
        Err(ArenaError::TooSmall { .. })
    ));
}

#[test]
fn memlock_message_names_numbers_and_fix() {
    let e = ArenaError::Memlock {
        limit: 8 << 20,
        need: 256 << 20,
    };
    let s = e.to_string();
    assert!(s.contains("8388608 bytes (8192 KiB)"), "{s}");
    assert!(s.contains("ulimit -l 262144"), "{s}");
    assert!(s.contains("LimitMEMLOCK=268435456"), "{s}");
}

#[derive(Clone, Debug)]
enum Op {
    Alloc { len: usize, align_log: u32 },
    Release { pick: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1usize..300, 0u32..6).prop_map(|(len, align_log)| Op::Alloc { len, align_log }),
        any::<usize>().prop_map(|pick| Op::Release { pick }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Random allocs and out-of-order releases on the bare allocator (with
    /// small segments and an odd base address): live extents never overlap,
    /// stay in bounds and in one segment, and are aligned; and once
    /// everything is released, the whole partition is available again.
    #[test]
    fn allocator_model(
        size in 1usize..1000, segment in 1usize..400, base in 0usize..64,
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let mut c = Circular::new(size, segment, base);
        let mut live: Vec<(u64, usize, usize)> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc { len, align_log } => {
                    let align = 1usize << align_log;
                    if let Some((s, seq)) = c.alloc(len, align) {
                        prop_assert!(s + len <= size);
                        prop_assert_eq!((base + s) % align, 0);
                        prop_assert_eq!(s / segment, (s + len - 1) / segment);
                        for &(_, o, l) in &live {
                            prop_assert!(s + len <= o || o + l <= s, "overlap");
                        }
                        live.push((seq, s, len));
                    } else if live.is_empty() {
                        prop_assert!(len > c.max_extent(align), "empty yet refused {len}");
                    }
                }
                Op::Release { pick } if !live.is_empty() => {
                    let (seq, _, _) = live.swap_remove(pick % live.len());
                    prop_assert!(c.release(seq));
                    prop_assert!(!c.release(seq), "double release accepted");
                }
                Op::Release { .. } => {}
            }
        }
        for (seq, _, _) in live.drain(..) {
            prop_assert!(c.release(seq));
        }
        prop_assert!(c.live.is_empty());
    }

    /// The same through the real arena, with extents moved across threads
    /// and dropped there: contents written into each extent survive until
    /// it is dropped (nobody else was handed its bytes).
    #[test]
    fn extents_keep_their_bytes(
        lens in proptest::collection::vec(1usize..5000, 1..60),
        keep in 1usize..8,
    ) {
        let a = Arena::new(16 * PAGE as u64, 1).unwrap();
        let p = a.part(0);
        let mut held: VecDeque<(Extent, u8)> = VecDeque::new();
        for (i, len) in lens.into_iter().enumerate() {
            let tag = i as u8;
            let mut e = loop {
                match p.alloc(len, 512) {
                    Some(e) => break e,
                    None => {
                        // Release out of order: the newest-but-one first.
                        let k = if held.len() > 1 { held.len() - 2 } else { 0 };
                        let (e, t) = held.remove(k).unwrap();
                        prop_assert!(e.iter().all(|&b| b == t));
                    }
                }
            };
            prop_assert_eq!(e.as_mut_ptr() as usize % 512, 0);
            e.as_mut_slice().fill(tag);
            e.set_len(len);
            held.push_back((e, tag));
            while held.len() > keep {
                let (e, t) = held.pop_front().unwrap();
                let h = std::thread::spawn(move || e.iter().all(|&b| b == t));
                prop_assert!(h.join().unwrap());
            }
        }
        for (e, t) in held {
            prop_assert!(e.iter().all(|&b| b == t));
        }
        prop_assert_eq!(a.bad_releases(), 0);
    }
}
