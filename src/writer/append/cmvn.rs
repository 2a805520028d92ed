//! serve's CMVN statistics (`crate::cmvn`): the split file's `cmvn_frames`,
//! `cmvn_sum` and `cmvn_sum_square` kept equal to the statistics of its
//! rows at every flush, exactly once through a kill or a power loss.
//!
//! The rows' sums come from the compute workers ([`crate::cmvn::RowStats`],
//! as in a build; summed here with the same function where a row comes
//! without them) and are added in row order, so a file serve appended holds
//! the numbers a build of the same rows in the same order writes.
//!
//! **Exactly once.** The three datasets are rewritten in place at each
//! flush, and a crash can leave them describing rows the journal never
//! confirmed, or torn. So each flush also writes the totals into one of two
//! slots of `cmvn_slots` (uint64, (2, 3 + 2 × bins): rows covered, frames,
//! an xxh3 of the rest of the slot, then the sums' and the squares' f64
//! bits), alternating: the flush before the last one's slot is untouched
//! while the last one is written. Opening the file takes the slot whose
//! row count is the journal's and whose hash holds; when neither does (a
//! file from `build` or an older serve, a slot torn by a power loss, or the
//! journal further back than two flushes), the statistics are summed again
//! from the confirmed rows themselves. Either way the three datasets are
//! then rewritten from them.
//!
//! The datasets must exist before SWMR writing starts (no object can be
//! created after), so [`Cmvn::open`] creates what is missing.

use std::path::Path;

use hdf5::{Dataset, File};
use xxhash_rust::xxh3::xxh3_64;

use super::store::Sets;
use crate::cmvn::{Bins, RowStats, Stats};
use crate::writer::Error;
use crate::writer::h5::Context;
use crate::writer::stats::{FRAMES, SUM, SUM_SQUARE, Summer};

/// The slots' dataset.
pub(super) const SLOTS: &str = "cmvn_slots";

/// Rows read at a time when the statistics are summed again.
const RECOUNT_ROWS: usize = 256;

/// A split file's running statistics; see the module documentation.
pub(super) struct Cmvn {
    summer: Summer,
    /// Every row appended so far (written or buffered).
    all: Stats,
    /// The slot the next flush writes.
    next: usize,
    /// Rows the datasets describe.
    written_rows: usize,
    frames: Dataset,
    sum: Dataset,
    sum_square: Dataset,
    slots: Dataset,
}

impl Cmvn {
    /// The statistics of the first `rows` rows of `file` (at `p`, rows of
    /// `bins`), from a slot or summed again, written to its datasets
    /// (created where missing). Before SWMR writing starts.
    pub(super) fn open(
        file: &File,
        p: &Path,
        sets: &Sets,
        bins: Bins,
        rows: usize,
    ) -> Result<Cmvn, Error> {
        let n = bins.bins();
        let datasets = ensure(file, n).ctx(p, || "create the statistics datasets".into())?;
        let (frames, sum, sum_square, slots) = datasets;
        let mut summer = Summer::new(bins);
        let slot = read_slots(&slots, n)
            .ctx(p, || format!("read dataset `{SLOTS}`"))?
            .into_iter()
            .enumerate()
            .find(|(_, s)| s.as_ref().is_some_and(|(r, _)| *r == rows));
        let (all, next) = match slot {
            Some((k, Some((_, stats)))) => (stats, 1 - k),
            _ => {
                let t = std::time::Instant::now();
                let stats = recount(sets, p, &mut summer, rows)?;
                tracing::info!(
                    file = %p.display(),
                    rows,
                    seconds = t.elapsed().as_secs_f64(),
                    "Summed the CMVN statistics again from the rows."
                );
                (stats, 0)
            }
        };
        let mut c = Cmvn {
            summer,
            all,
            next,
            written_rows: usize::MAX,
            frames,
            sum,
            sum_square,
            slots,
        };
        c.write(p, rows)?;
        Ok(c)
    }

    /// Adds the next row (`given`: its sums from the worker, else summed
    /// here).
    pub(super) fn add(&mut self, row: &[f32], given: Option<RowStats>) {
        let r = self.summer.row(row, given);
        self.all.add_row(&r);
    }

    /// Adds the next row's sums (a row in pieces, summed as it passed).
    pub(super) fn add_stats(&mut self, r: &RowStats) {
        self.all.add_row(r);
    }

    /// An empty running row, for a row in pieces.
    pub(super) fn acc(&self) -> crate::cmvn::RowAcc {
        self.summer.bins.acc()
    }

    /// The statistics of every row appended.
    pub(super) fn stats(&self) -> &Stats {
        &self.all
    }

    /// Stores the statistics of the `rows` rows written (every row
    /// appended: the caller has written them): the next slot, then the
    /// three datasets. Nothing when they describe `rows` already.
    pub(super) fn write(&mut self, p: &Path, rows: usize) -> Result<(), Error> {
        if rows == self.written_rows {
            return Ok(());
        }
        let slot = encode(rows, &self.all);
        self.slots.write_slice(&slot, (self.next, ..)).ctx(p, || {
            format!("write slot {} of dataset `{SLOTS}`", self.next)
        })?;
        let frames = i64::try_from(self.all.frames).unwrap_or(i64::MAX);
        (|| {
            self.frames.write_scalar(&frames)?;
            self.sum.write(self.all.sum.as_slice())?;
            self.sum_square.write(self.all.sum_square.as_slice())
        })()
        .ctx(p, || "write the statistics datasets".into())?;
        self.next = 1 - self.next;
        self.written_rows = rows;
        Ok(())
    }
}

/// The three datasets and the slots of `file`, each created where missing
/// (slots zeroed: no row count of theirs holds until a flush writes one).
fn ensure(file: &File, bins: usize) -> hdf5::Result<(Dataset, Dataset, Dataset, Dataset)> {
    if !file.link_exists(FRAMES) {
        crate::writer::stats::store(file, &Stats::new(bins))?;
    }
    if !file.link_exists(SLOTS) {
        file.new_dataset::<u64>()
            .shape((2, 3 + 2 * bins))
            .obj_track_times(false)
            .create(SLOTS)?
            .write(&ndarray::Array2::<u64>::zeros((2, 3 + 2 * bins)))?;
    }
    Ok((
        file.dataset(FRAMES)?,
        file.dataset(SUM)?,
        file.dataset(SUM_SQUARE)?,
        file.dataset(SLOTS)?,
    ))
}

/// A slot's words for `rows` rows of statistics `s`.
fn encode(rows: usize, s: &Stats) -> Vec<u64> {
    let mut v = Vec::with_capacity(3 + 2 * s.bins());
    v.extend([rows as u64, s.frames, 0]);
    v.extend(s.sum.iter().chain(&s.sum_square).map(|x| x.to_bits()));
    v[2] = hash(&v);
    v
}

/// The xxh3 of a slot's words but the hash itself.
fn hash(v: &[u64]) -> u64 {
    let bytes: Vec<u8> = v
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != 2)
        .flat_map(|(_, w)| w.to_le_bytes())
        .collect();
    xxh3_64(&bytes)
}

/// Each slot's (rows, statistics), or None where it was never written,
/// does not fit `bins` or fails its hash.
fn read_slots(slots: &Dataset, bins: usize) -> hdf5::Result<[Option<(usize, Stats)>; 2]> {
    let words = slots.read_2d::<u64>()?;
    let decode = |k: usize| -> Option<(usize, Stats)> {
        let v = words.row(k).to_vec();
        if v.len() != 3 + 2 * bins || v[2] != hash(&v) || v[0] == 0 && v[1] == 0 {
            return None;
        }
        let f = |w: &[u64]| w.iter().map(|&b| f64::from_bits(b)).collect::<Vec<f64>>();
        let stats = Stats {
            frames: v[1],
            sum: f(&v[3..3 + bins]),
            sum_square: f(&v[3 + bins..]),
        };
        Some((usize::try_from(v[0]).ok()?, stats))
    };
    if words.nrows() != 2 {
        return Ok([None, None]);
    }
    Ok([decode(0), decode(1)])
}

/// The statistics of the first `rows` rows, summed from the file row by
/// row in row order with the workers' function (values as stored, so
/// summing them again gives the same numbers).
fn recount(sets: &Sets, p: &Path, summer: &mut Summer, rows: usize) -> Result<Stats, Error> {
    let mut all = Stats::new(summer.bins.bins());
    let mut at = 0;
    while at < rows {
        let end = (at + RECOUNT_ROWS).min(rows);
        for row in sets.read_rows(p, at..end)? {
            all.add_row(&summer.row(&row, None));
        }
        at = end;
    }
    Ok(all)
}
