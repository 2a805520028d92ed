//! serve's CMVN statistics through the appender (`super::cmvn`): equal to
//! the rows' at every flush (a build's numbers for the same rows), back to
//! the journal's rows after a kill from a slot or summed again, a torn slot
//! refused, the files beside the split written at the close.

use super::tests::{row, spec};
use super::*;
use crate::cmvn::{Bins, Stats};

/// The statistics a build writes for `rows`, in order: each row's sums by
/// the workers' function, added in row order.
fn build_stats(bins: &Bins, rows: impl Iterator<Item = Vec<f32>>) -> Stats {
    let mut scratch = bins.acc();
    let mut s = Stats::new(bins.bins());
    for r in rows {
        s.add_row(&bins.row(&r, &mut scratch));
    }
    s
}

fn mel_bins() -> Bins {
    Bins::mel(spec().layout.spec().row_shape(), spec().dtype)
}

/// The statistics stored in `train.h5` under `d`.
fn stored(d: &Path) -> Stats {
    let f = File::open_as(d.join("train.h5"), hdf5::OpenMode::ReadSWMR).unwrap();
    crate::writer::stats::read(&f).unwrap().unwrap()
}

#[test]
fn the_statistics_are_the_rows_at_every_flush_and_beside_the_file_at_the_close() {
    let d = tempfile::tempdir().unwrap();
    let (mut a, _) = Appender::open(d.path(), &spec(), &[], 0).unwrap();
    for i in 0..11 {
        a.append(&format!("f{i}.wav"), -1, &row(i)).unwrap();
        if i % 4 == 2 {
            a.flush().unwrap();
            let want = build_stats(&mel_bins(), (0..=i).map(row));
            assert_eq!(a.cmvn(), &want, "after row {i}");
        }
    }
    a.close().unwrap();
    let want = build_stats(&mel_bins(), (0..11).map(row));
    assert_eq!(stored(d.path()), want);
    let [json, npz] = crate::cmvn::files::names(&d.path().join("train.h5"));
    assert_eq!(
        std::fs::read_to_string(&json).unwrap(),
        crate::cmvn::files::global_cmvn_json(&want)
    );
    assert_eq!(
        std::fs::read(&npz).unwrap(),
        crate::cmvn::files::feats_stats_npz(&want)
    );
    // Appending again: the files beside it are stale until the close.
    let (mut a, _) = Appender::open(d.path(), &spec(), &[], 11).unwrap();
    assert!(!json.exists() && !npz.exists());
    a.append("f11.wav", -1, &row(11)).unwrap();
    a.close().unwrap();
    let want = build_stats(&mel_bins(), (0..12).map(row));
    assert_eq!(stored(d.path()), want);
    assert_eq!(
        std::fs::read_to_string(&json).unwrap(),
        crate::cmvn::files::global_cmvn_json(&want)
    );
}

/// Flushes of 4, 3 and 2 rows, killed: each of the journal's possible
/// counts gives that many rows' statistics (the last two from the slots,
/// the first summed again), and appending goes on from them.
#[test]
fn after_a_kill_the_statistics_are_the_journals_rows() {
    for confirmed in [9, 7, 4, 0] {
        let d = tempfile::tempdir().unwrap();
        let (mut a, _) = Appender::open(d.path(), &spec(), &[], 0).unwrap();
        for i in 0..9 {
            a.append(&format!("f{i}.wav"), -1, &row(i)).unwrap();
            if [3, 6, 8].contains(&i) {
                a.flush().unwrap();
            }
        }
        drop(a); // killed
        let (mut a, _) = Appender::open(d.path(), &spec(), &[], confirmed).unwrap();
        let want = build_stats(&mel_bins(), (0..confirmed).map(row));
        assert_eq!(a.cmvn(), &want, "confirmed {confirmed}");
        assert_eq!(stored(d.path()), want, "confirmed {confirmed}");
        a.append("g.wav", -1, &row(50)).unwrap();
        a.close().unwrap();
        let rows = (0..confirmed).map(row).chain([row(50)]);
        assert_eq!(stored(d.path()), build_stats(&mel_bins(), rows));
    }
}

#[test]
fn a_torn_slot_is_refused_and_the_rows_summed_again() {
    let d = tempfile::tempdir().unwrap();
    let (mut a, _) = Appender::open(d.path(), &spec(), &[], 0).unwrap();
    for i in 0..5 {
        a.append(&format!("f{i}.wav"), -1, &row(i)).unwrap();
    }
    a.close().unwrap();
    {
        // The open wrote slot 0 (no rows), the close's flush slot 1 (5
        // rows): one bit of a sum flipped there (a write a power loss cut
        // short), and the datasets left wrong too.
        let f = File::open_rw(d.path().join("train.h5")).unwrap();
        let slots = f.dataset(cmvn::SLOTS).unwrap();
        let mut words = slots.read_2d::<u64>().unwrap();
        assert_eq!((words[[0, 0]], words[[1, 0]]), (0, 5));
        words[[1, 5]] ^= 1 << 40;
        slots.write(&words).unwrap();
        f.dataset(crate::writer::stats::FRAMES)
            .unwrap()
            .write_scalar(&1i64)
            .unwrap();
    }
    let (a, _) = Appender::open(d.path(), &spec(), &[], 5).unwrap();
    let want = build_stats(&mel_bins(), (0..5).map(row));
    assert_eq!(a.cmvn(), &want);
    a.close().unwrap();
    assert_eq!(stored(d.path()), want);
}

/// Compact rows' statistics are those of the stored values (float16 on
/// the grid), whole rows and rows in pieces alike.
#[test]
fn compact_statistics_are_the_stored_values() {
    let d = tempfile::tempdir().unwrap();
    let spec = AppendSpec {
        dtype: Dtype::Compact { tick_power: -5 },
        ..super::tests_frames::spec()
    };
    let layout = spec.layout.frame_layout().clone();
    let bins = Bins::frames(&layout, spec.dtype);
    // Off the grid: the stored values are not these.
    let r = |i: usize| -> Vec<f32> {
        let mut v: Vec<f32> = (0..(3 + i) * layout.bins)
            .map(|k| (k % 97) as f32 * 0.013 - 0.4 + i as f32)
            .collect();
        v.push(-1.0);
        v
    };
    let (mut a, _) = Appender::open(d.path(), &spec, &[], 0).unwrap();
    for i in 0..4 {
        a.append(&format!("f{i}.wav"), -1, &r(i)).unwrap();
    }
    a.close().unwrap();
    let want = build_stats(&bins, (0..4).map(r));
    assert_eq!(stored(d.path()), want);
    let plain = build_stats(&Bins::frames(&layout, Dtype::Float32), (0..4).map(r));
    assert_ne!(want, plain, "the grid changed nothing");
}
