//! The batch runner's host copies, spread over a few threads: a batch's
//! host-decoded samples into its slot's pinned input ([`gather`]) and its
//! rows out of the pinned output into the row buffers the writer takes
//! ([`scatter`]).
//!
//! Why: on the 16-core GPU box the speech recipes' stage thread spent most
//! of a build copying (about 0.7 MB of samples in and 0.35 MB of rows out
//! per utterance, docs/BENCHMARKS.md, "The speech recipes at a size where
//! start-up weighs less"), one thread's memory bandwidth, while the device
//! waited on nothing. Both copies are plain byte moves between buffers the
//! stage thread owns for the time of the call, so scoped threads over
//! disjoint parts keep them safe Rust; below [`PARALLEL_MIN_BYTES`] a copy
//! stays on the calling thread (a thread start costs more than it saves).
//!
//! The scatter also sums each row's CMVN statistics when the run keeps
//! them, as the CPU workers do beside their rows: on the CUDA path the
//! writer used to sum them on its own thread, 27 µs of its 45 a file for
//! librosa's rows (docs/BENCHMARKS.md, "Issue 50, item 1").

use crate::cmvn::{Bins, RowStats};

/// Copies smaller than this stay on the calling thread.
pub(super) const PARALLEL_MIN_BYTES: usize = 4 << 20;

/// Threads for the host copies on a machine with `cores` cores: a quarter
/// of them, 2 to 4 (memory bandwidth, not arithmetic, is what they use).
/// At least two even on few cores: the stage thread waits while they copy,
/// and it is the one serial thread of the CUDA path; a copy it made itself
/// (a speech batch's samples, about 0.7 MB an utterance) cost it 160 µs a
/// file on a 2-core host (docs/BENCHMARKS.md, "Issue 50, item 1").
pub(super) fn copy_threads(cores: usize) -> usize {
    (cores / 4).clamp(2, 4)
}

/// Splits `sizes` into at most `threads` runs of consecutive items with
/// about equal sums; returns each run's end.
fn runs(sizes: impl Iterator<Item = usize> + Clone, threads: usize) -> Vec<usize> {
    let total: usize = sizes.clone().sum();
    let per = total.div_ceil(threads.max(1)).max(1);
    let mut ends = Vec::with_capacity(threads);
    let (mut acc, mut n) = (0, 0);
    for s in sizes {
        acc += s;
        n += 1;
        if acc >= per * (ends.len() + 1) {
            ends.push(n);
        }
    }
    if ends.last() != Some(&n) {
        ends.push(n);
    }
    ends
}

/// Copies each part `(at, bytes)` to `dst[at..at + bytes.len()]`, on up to
/// `threads` threads when they hold at least `min_bytes`. The parts are in
/// ascending, non-overlapping order of `at`.
///
/// # Panics
/// When a part lies past the end of `dst` or the parts overlap or are out
/// of order (a caller's bug: the slot was sized and laid out for them).
pub(super) fn gather(parts: &[(usize, &[u8])], dst: &mut [u8], threads: usize, min_bytes: usize) {
    let total: usize = parts.iter().map(|(_, p)| p.len()).sum();
    if threads <= 1 || total < min_bytes {
        for &(at, p) in parts {
            dst[at..at + p.len()].copy_from_slice(p);
        }
        return;
    }
    let ends = runs(parts.iter().map(|(_, p)| p.len()), threads);
    std::thread::scope(|s| {
        let (mut rest, mut base, mut start) = (dst, 0, 0);
        for end in ends {
            let group = &parts[start..end];
            start = end;
            let Some(&(last_at, last)) = group.last() else {
                continue;
            };
            // This group's part of `dst`: up to its last part's end.
            let (mine, tail) = rest.split_at_mut(last_at + last.len() - base);
            rest = tail;
            let offset = base;
            base = last_at + last.len();
            s.spawn(move || {
                for &(at, p) in group {
                    mine[at - offset..at - offset + p.len()].copy_from_slice(p);
                }
            });
        }
    });
}

/// How one row's bytes become its `f32` values (appended to the row).
pub(super) type Decode = fn(&[u8], &mut Vec<f32>);

/// Native-endian `f32` bytes, as the device wrote them.
pub(super) fn f32_values(bytes: &[u8], out: &mut Vec<f32>) {
    out.extend(
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]])),
    );
}

/// Fills each row of `rows` with its source: the values `decode` reads from
/// `src[i].0`, then the pad value `src[i].1` when there is one; with `sum`,
/// each row's CMVN statistics too (`crate::cmvn`, the very sums the CPU
/// workers make), so no serial thread sums them. On up to `threads`
/// threads when the sources hold at least `min_bytes`.
pub(super) fn scatter(
    src: &[(&[u8], Option<f32>)],
    rows: &mut [(Vec<f32>, Option<RowStats>)],
    (threads, min_bytes): (usize, usize),
    decode: Decode,
    sum: Option<&Bins>,
) {
    assert_eq!(src.len(), rows.len(), "one row per source");
    let total: usize = src.iter().map(|(v, _)| v.len()).sum();
    if threads <= 1 || total < min_bytes {
        let mut scratch = sum.map(Bins::acc);
        for ((values, pad), (row, stats)) in src.iter().zip(rows.iter_mut()) {
            row.clear();
            decode(values, row);
            row.extend(*pad);
            *stats = match (sum, &mut scratch) {
                (Some(bins), Some(scratch)) => Some(bins.row(row, scratch)),
                _ => None,
            };
        }
        return;
    }
    let ends = runs(src.iter().map(|(v, _)| v.len()), threads);
    std::thread::scope(|s| {
        let (mut rest, mut start) = (rows, 0);
        for end in ends {
            let (mine, tail) = rest.split_at_mut(end - start);
            rest = tail;
            let group = &src[start..end];
            start = end;
            s.spawn(move || scatter(group, mine, (1, 0), decode, sum));
        }
    });
}

/// The threads and the smallest batch to spread for a scatter that sums
/// (`summing`) or only copies. Summing is arithmetic, several times a
/// copy's cost a byte, so it is spread from a sixteenth of a copy's
/// threshold, and over at least two threads: the stage thread that calls
/// the scatter waits for them instead of summing itself.
pub(super) fn scatter_threads(copy_threads: usize, summing: bool) -> (usize, usize) {
    match summing {
        true => (copy_threads.max(2), PARALLEL_MIN_BYTES / 16),
        false => (copy_threads, PARALLEL_MIN_BYTES),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(lens: &[usize]) -> Vec<Vec<f32>> {
        let mut k = 0f32;
        lens.iter()
            .map(|&n| {
                (0..n)
                    .map(|_| {
                        k += 1.0;
                        k * 0.37 - 1.0e4
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn runs_cover_every_item_once_in_order() {
        for (sizes, threads) in [
            (vec![5, 1, 1, 1, 9, 2], 3),
            (vec![1; 10], 4),
            (vec![100], 4),
            (vec![0, 0, 3], 2),
            (vec![], 3),
        ] {
            let ends = runs(sizes.iter().copied(), threads);
            assert!(ends.len() <= threads.max(1), "{sizes:?}: {ends:?}");
            assert!(ends.windows(2).all(|w| w[0] < w[1]), "{ends:?}");
            assert_eq!(ends.last().copied().unwrap_or(0), sizes.len());
        }
    }

    /// The threaded copies give the bytes of the one-thread copy, for every
    /// thread count, with empty parts, one part, and a destination longer
    /// than the parts (its tail untouched).
    #[test]
    fn threaded_copies_equal_the_one_thread_copy() {
        for lens in [
            vec![3, 0, 700, 1, 4096, 5, 0, 999],
            vec![10_000],
            vec![0, 0],
            (1..60).map(|i| i * 37 % 501).collect(),
        ] {
            let p = parts(&lens);
            let bytes: Vec<Vec<u8>> = p
                .iter()
                .map(|v| v.iter().flat_map(|x| x.to_ne_bytes()).collect())
                .collect();
            // Back to back, with a gap after every third part.
            let mut at = 0;
            let placed: Vec<(usize, &[u8])> = bytes
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    let here = at;
                    at += b.len() + if i % 3 == 2 { 5 } else { 0 };
                    (here, b.as_slice())
                })
                .collect();
            let mut want = vec![0xEEu8; at + 7];
            gather(&placed, &mut want, 1, 0);
            for &(at, b) in &placed {
                assert_eq!(&want[at..at + b.len()], b);
            }
            let src: Vec<(&[u8], Option<f32>)> = bytes
                .iter()
                .enumerate()
                .map(|(i, b)| (b.as_slice(), (i % 2 == 0).then_some(i as f32)))
                .collect();
            let mut want_rows = vec![(vec![9.0f32; 3], None); src.len()];
            scatter(&src, &mut want_rows, (1, 0), f32_values, None);
            for (i, ((row, _), v)) in want_rows.iter().zip(&p).enumerate() {
                assert_eq!(&row[..v.len()], v.as_slice());
                assert_eq!(row.len(), v.len() + usize::from(i % 2 == 0));
            }
            for threads in 2..=5 {
                let mut got = vec![0xEEu8; at + 7];
                gather(&placed, &mut got, threads, 0);
                assert_eq!(got, want, "{threads} threads, {lens:?}");
                let mut rows = vec![(vec![9.0f32; 3], None); src.len()];
                scatter(&src, &mut rows, (threads, 0), f32_values, None);
                assert_eq!(rows, want_rows, "{threads} threads, {lens:?}");
            }
        }
    }

    /// With `sum`, every row comes with the statistics `Bins::row` gives it
    /// (what the CPU workers hand on), bit for bit, on any thread count.
    #[test]
    fn summed_rows_carry_the_cpu_workers_statistics_on_any_thread_count() {
        use crate::model::Dtype;
        let (bins, frames) = (8, 5);
        for dtype in [Dtype::Float32, Dtype::Float16] {
            let sum = Bins::mel([1, 2, bins, frames], dtype);
            let p = parts(&[2 * bins * frames; 7]);
            let bytes: Vec<Vec<u8>> = (p.iter())
                .map(|v| v.iter().flat_map(|x| x.to_ne_bytes()).collect())
                .collect();
            let src: Vec<(&[u8], Option<f32>)> = bytes.iter().map(|b| (&b[..], None)).collect();
            for threads in 1..=4 {
                let mut rows = vec![(Vec::new(), None); src.len()];
                scatter(&src, &mut rows, (threads, 0), f32_values, Some(&sum));
                for ((row, stats), want) in rows.iter().zip(&p) {
                    assert_eq!(row, want);
                    let expected = sum.row(want, &mut sum.acc());
                    assert_eq!(stats.as_ref(), Some(&expected), "{threads} threads");
                }
            }
        }
    }

    #[test]
    fn a_summing_scatter_spreads_sooner_and_never_on_the_caller_alone() {
        assert_eq!(scatter_threads(1, false), (1, PARALLEL_MIN_BYTES));
        assert_eq!(scatter_threads(4, false), (4, PARALLEL_MIN_BYTES));
        assert_eq!(scatter_threads(1, true), (2, PARALLEL_MIN_BYTES / 16));
        assert_eq!(scatter_threads(4, true), (4, PARALLEL_MIN_BYTES / 16));
    }

    #[test]
    fn copy_threads_are_a_quarter_of_the_cores_from_2_to_4() {
        let got: Vec<usize> = [1, 2, 4, 8, 12, 16, 64].map(copy_threads).to_vec();
        assert_eq!(got, [2, 2, 2, 2, 3, 4, 4]);
    }
}
