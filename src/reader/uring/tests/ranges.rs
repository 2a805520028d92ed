//! Ranged jobs through the ring ([`Next::Range`]): the bytes delivered are
//! the prefix then exactly the range, whatever the alignment of its start
//! and length, O_DIRECT and buffered; a range past the file's end is a
//! reason, not a crash; a range larger than the arena share goes through a
//! spill as a whole file does; the bytes counted are the ranges'.

use super::*;
use crate::reader::ReadRange;

/// Reads each `(path, range)` with `engine`, copying the bytes out.
fn read_ranges(engine: &mut UringEngine, jobs: &[(PathBuf, ReadRange)]) -> (Outcomes, RunStats) {
    let mut it = jobs.iter().enumerate();
    let mut got = HashMap::new();
    let stats = engine
        .run_stream(
            || match it.next() {
                Some((i, (p, r))) => Next::Range(i, p.as_path(), r.clone()),
                None => Next::End,
            },
            |i, r, _| {
                let prev = got.insert(i, r.map(|b| b.to_vec()).map_err(|e| e.to_string()));
                assert!(prev.is_none(), "job {i} delivered twice");
                true
            },
        )
        .unwrap();
    (got, stats)
}

fn ranges_over(path: &Path, size: u64) -> Vec<(PathBuf, ReadRange)> {
    let starts = [0, 1, 43, 511, 512, 4095, 4096, 4097, 8191, 100_003];
    let lens = [0, 1, 44, 511, 4095, 4096, 4097, 65_537, 200_001];
    let prefixes: [&[u8]; 3] = [b"", &[7; 44], &[9; 5000]];
    let mut jobs = Vec::new();
    for (k, &start) in starts.iter().enumerate() {
        for (m, &len) in lens.iter().enumerate() {
            if start + len > size {
                continue;
            }
            let prefix = prefixes[(k + m) % 3].to_vec();
            jobs.push((path.to_path_buf(), ReadRange::new(prefix, start, len)));
        }
    }
    jobs
}

fn check(got: &Outcomes, jobs: &[(PathBuf, ReadRange)], body: &[u8]) {
    assert_eq!(got.len(), jobs.len());
    for (i, (_, r)) in jobs.iter().enumerate() {
        let b = got[&i]
            .as_ref()
            .unwrap_or_else(|e| panic!("range {r:?}: {e}"));
        let (s, n) = (r.start as usize, r.len as usize);
        assert_eq!(b.len(), r.prefix.len() + n, "{r:?}");
        assert_eq!(&b[..r.prefix.len()], &*r.prefix, "prefix of {r:?}");
        assert!(b[r.prefix.len()..] == body[s..s + n], "bytes of {r:?}");
    }
}

#[test]
fn unaligned_ranges_are_their_prefix_then_exactly_their_bytes() {
    if !usable("unaligned_ranges_are_their_prefix_then_exactly_their_bytes") {
        return;
    }
    let d = disk_dir();
    let size = 1_000_003;
    let path = write_files(d.path(), &[size]).remove(0);
    let body = content(size, 0);
    let jobs = ranges_over(&path, size as u64);
    for (direct, depth) in [(true, 1), (true, 8), (false, 4)] {
        let arena = Arena::new(16 << 20, 1).unwrap();
        let mut engine = UringEngine::new(&opts(depth, direct), arena.part(0)).unwrap();
        let (got, stats) = read_ranges(&mut engine, &jobs);
        check(&got, &jobs, &body);
        assert_eq!(stats.files_ok, jobs.len() as u64);
        // The ranges' bytes: not the prefixes, not the blocks around them.
        let want: u64 = jobs.iter().map(|(_, r)| r.len).sum();
        assert_eq!(stats.bytes, want, "direct {direct}");
        if direct && !is_tmpfs(d.path()) {
            assert_eq!(stats.buffered_fallbacks, 0, "{stats:?}");
        }
        drop(engine);
        assert_eq!(arena.bad_releases(), 0);
    }
}

#[test]
fn ranges_and_whole_files_mix_in_one_run() {
    if !usable("ranges_and_whole_files_mix_in_one_run") {
        return;
    }
    let d = disk_dir();
    let sizes = [5000, 70_001, 4096, 123];
    let paths = write_files(d.path(), &sizes);
    let arena = Arena::new(4 << 20, 1).unwrap();
    let mut engine = UringEngine::new(&opts(3, true), arena.part(0)).unwrap();
    let range = |i: usize| ReadRange::new(vec![i as u8; 3], 17, (sizes[i] - 40) as u64);
    let mut it = paths.iter().enumerate().cycle().take(40).enumerate();
    let mut got = HashMap::new();
    let stats = engine
        .run_stream(
            || match it.next() {
                Some((j, (i, p))) if j % 2 == 0 => Next::Range(j, p.as_path(), range(i)),
                Some((j, (_, p))) => Next::Job(j, p.as_path()),
                None => Next::End,
            },
            |j, r, _| got.insert(j, r.unwrap().to_vec()).is_none(),
        )
        .unwrap();
    let mut want = 0;
    for (j, b) in &got {
        let i = j % sizes.len();
        let body = content(sizes[i], i);
        if j % 2 == 0 {
            assert_eq!(&b[..3], &[i as u8; 3]);
            assert_eq!(&b[3..], &body[17..sizes[i] - 23], "job {j}");
            want += sizes[i] - 40;
        } else {
            assert_eq!(b, &body, "job {j}");
            want += sizes[i];
        }
    }
    assert_eq!(got.len(), 40);
    assert_eq!(stats.bytes, want as u64);
}

#[test]
fn a_range_past_the_end_is_a_reason_and_the_size_limit_is_for_whole_files() {
    if !usable("a_range_past_the_end_is_a_reason_and_the_size_limit_is_for_whole_files") {
        return;
    }
    let d = disk_dir();
    let path = write_files(d.path(), &[10_000]).remove(0);
    let jobs = [
        (path.clone(), ReadRange::new(b"H".to_vec(), 9_500, 777)),
        (path.clone(), ReadRange::new(b"H".to_vec(), 9_000, 1000)),
        (d.path().join("missing"), ReadRange::new(vec![], 0, 10)),
    ];
    // io.max_file_bytes = 1000 refuses the file whole, not a range of it.
    let o = UringOptions {
        max_file_bytes: 1000,
        ..opts(2, true)
    };
    let arena = Arena::new(1 << 20, 1).unwrap();
    let mut engine = UringEngine::new(&o, arena.part(0)).unwrap();
    let (got, stats) = read_ranges(&mut engine, &jobs);
    let e = got[&0].as_ref().unwrap_err();
    assert!(e.contains("10277 bytes at open, 10000 read"), "{e}");
    assert_eq!(got[&1].as_ref().unwrap()[1..], content(10_000, 0)[9_000..]);
    assert!(got[&2].as_ref().unwrap_err().starts_with("cannot open"));
    assert_eq!((stats.files_ok, stats.files_rejected), (1, 2));
}

/// A range that does not fit a quarter of the arena share is read into a
/// spill extent, as a whole file of that size is (never refused for the
/// arena's size): a segment of any length up to the file is readable.
#[test]
fn a_range_larger_than_the_arena_share_goes_through_a_spill() {
    if !usable("a_range_larger_than_the_arena_share_goes_through_a_spill") {
        return;
    }
    let d = disk_dir();
    let size = 300_001;
    let path = write_files(d.path(), &[size]).remove(0);
    let body = content(size, 0);
    let jobs = [
        (path.clone(), ReadRange::new(vec![1; 44], 1001, 250_000)),
        (path.clone(), ReadRange::new(vec![2; 44], 3, 100)),
        (path.clone(), ReadRange::new(vec![3; 44], 0, size as u64)),
    ];
    for direct in [true, false] {
        let arena = Arena::new(64 << 10, 1).unwrap();
        let mut engine = UringEngine::new(&opts(2, direct), arena.part(0)).unwrap();
        let (got, stats) = read_ranges(&mut engine, &jobs);
        check(&got, &jobs, &body);
        assert_eq!(stats.spills, 2, "{stats:?}");
        drop(engine);
        assert_eq!(arena.bad_releases(), 0);
    }
}
