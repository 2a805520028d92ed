use super::files::{self, feats_stats_npz, global_cmvn_json};
use super::*;
use crate::frames::FrameLayout;

fn layout(bins: usize, padded: Option<usize>) -> FrameLayout {
    FrameLayout {
        recipe: "kaldi-fbank".into(),
        bins,
        sample_rate: 16_000,
        frame_step_seconds: 0.01,
        max_samples: None,
        padded_frames: padded,
        params: Vec::new(),
    }
}

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / 4e8 - 5.0)
        .collect()
}

/// Per bin, the sums a plain loop gives over (frame, bin) values.
fn naive(frames: &[Vec<f32>], bins: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut s, mut q) = (vec![0.0; bins], vec![0.0; bins]);
    for f in frames {
        for (b, &v) in f.iter().enumerate() {
            s[b] += f64::from(v);
            q[b] += f64::from(v) * f64::from(v);
        }
    }
    (s, q)
}

#[test]
fn frame_rows_sum_each_bin_in_frame_order_and_skip_the_trailer() {
    let bins = 5;
    let b = Bins::frames(&layout(bins, Some(3000)), Dtype::Float32);
    let mut row = values(7 * bins, 1);
    row.push(1e30); // Whisper's pad value: not a frame value
    let r = b.row(&row, &mut b.acc());
    assert_eq!(r.frames, 7);
    let frames: Vec<Vec<f32>> = row[..7 * bins].chunks(bins).map(|c| c.to_vec()).collect();
    let (s, q) = naive(&frames, bins);
    assert_eq!(&r.sums[..bins], &s[..]);
    assert_eq!(&r.sums[bins..], &q[..]);
}

#[test]
fn pieces_give_the_whole_row_s_sums_bit_for_bit() {
    let bins = 3;
    let b = Bins::frames(&layout(bins, None), Dtype::Float16);
    let row = values(40 * bins, 7);
    let whole = b.row(&row, &mut b.acc());
    let mut acc = b.acc();
    for piece in row.chunks(11 * bins) {
        acc.add_frames(piece);
    }
    assert_eq!(acc.take(), whole);
}

#[test]
fn float16_rows_are_summed_as_stored() {
    let bins = 4;
    let b = Bins::frames(&layout(bins, None), Dtype::Float16);
    let row = values(9 * bins, 3);
    let r = b.row(&row, &mut b.acc());
    let stored: Vec<Vec<f32>> = row
        .chunks(bins)
        .map(|c| c.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect())
        .collect();
    let (s, q) = naive(&stored, bins);
    for k in 0..bins {
        assert_eq!(r.sums[k], s[k]);
        assert_eq!(r.sums[bins + k], q[k]);
    }
    let plain = Bins::frames(&layout(bins, None), Dtype::Float32).row(&row, &mut b.acc());
    assert_ne!(plain.sums, r.sums, "float16 rounding must show");
}

#[test]
fn compact_rows_are_summed_on_their_grid() {
    let bins = 4;
    let compact = Dtype::Compact { tick_power: -3 };
    let b = Bins::frames(&layout(bins, None), compact);
    let row = values(9 * bins, 5);
    let r = b.row(&row, &mut b.acc());
    let stored: Vec<Vec<f32>> = row
        .chunks(bins)
        .map(|c| {
            c.iter()
                .map(|&v| ((f64::from(v) * 8.0).round_ties_even() / 8.0) as f32)
                .collect()
        })
        .collect();
    let (s, q) = naive(&stored, bins);
    for k in 0..bins {
        assert_eq!(r.sums[k], s[k]);
        assert_eq!(r.sums[bins + k], q[k]);
    }
    // A row in pieces (the writer's own sums) gives the same.
    let mut acc = b.acc();
    acc.add_frames(&row[..5 * bins]);
    acc.add_frames(&row[5 * bins..]);
    assert_eq!(acc.take().sums, r.sums);
}

#[test]
fn librosa_rows_bin_by_mel_band_over_every_segment_frame() {
    let shape = [2, 3, 4, 7]; // n_long, n_short, n_mels, n_frames
    let row = values(shape.iter().product(), 9);
    for dtype in [Dtype::Float32, Dtype::Float16] {
        let b = Bins::mel(shape, dtype);
        assert_eq!(b.bins(), 4);
        let r = b.row(&row, &mut b.acc());
        assert_eq!(r.frames, 2 * 3 * 7);
        let round = |v: f32| match dtype {
            Dtype::Float16 => half::f16::from_f32(v).to_f32(),
            _ => v,
        };
        for m in 0..4 {
            let (mut s, mut q) = (0.0f64, 0.0f64);
            for blk in 0..6 {
                for t in 0..7 {
                    let v = f64::from(round(row[(blk * 4 + m) * 7 + t]));
                    s += v;
                    q += v * v;
                }
            }
            assert!((r.sums[m] - s).abs() <= 1e-12 * s.abs().max(1.0), "{m}");
            assert!((r.sums[4 + m] - q).abs() <= 1e-12 * q, "{m}");
        }
    }
}

#[test]
fn split_totals_add_rows_in_order_and_shards_add_up() {
    let b = Bins::frames(&layout(2, None), Dtype::Float32);
    let rows: Vec<RowStats> = (0..6)
        .map(|i| b.row(&values(2 * (i + 1), i as u32), &mut b.acc()))
        .collect();
    let mut whole = Stats::new(2);
    rows.iter().for_each(|r| whole.add_row(r));
    assert_eq!(whole.frames, 21);
    let (mut a, mut c) = (Stats::new(2), Stats::new(2));
    rows[..3].iter().for_each(|r| a.add_row(r));
    rows[3..].iter().for_each(|r| c.add_row(r));
    a.add(&c).unwrap();
    assert_eq!(a.frames, whole.frames);
    for k in 0..2 {
        assert!((a.sum[k] - whole.sum[k]).abs() <= 1e-14 * whole.sum[k].abs().max(1.0));
    }
    assert!(a.add(&Stats::new(3)).is_none(), "bins must agree");
}

fn stats() -> Stats {
    Stats {
        frames: 12_345,
        sum: vec![0.1, -2.5e-300, 1e300, 3.0],
        sum_square: vec![1.0 / 3.0, 0.0, 7.25, 1e-10],
    }
}

#[test]
fn global_cmvn_json_reads_back_exactly() {
    let s = stats();
    let v: serde_json::Value = serde_json::from_str(&global_cmvn_json(&s)).unwrap();
    assert_eq!(v["frame_num"].as_u64(), Some(12_345));
    let read = |k: &str| -> Vec<f64> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    assert_eq!(read("mean_stat"), s.sum);
    assert_eq!(read("var_stat"), s.sum_square);
}

/// The entries of a stored zip, read from its central directory.
fn unzip(z: &[u8]) -> Vec<(String, Vec<u8>)> {
    let u16_at = |i: usize| u16::from_le_bytes([z[i], z[i + 1]]) as usize;
    let u32_at = |i: usize| u32::from_le_bytes(z[i..i + 4].try_into().unwrap()) as usize;
    let end = z.len() - 22;
    assert_eq!(u32_at(end), 0x0605_4b50);
    let (n, mut at) = (u16_at(end + 10), u32_at(end + 16));
    let mut out = Vec::new();
    for _ in 0..n {
        assert_eq!(u32_at(at), 0x0201_4b50);
        let (crc, size, name_len) = (u32_at(at + 16), u32_at(at + 20), u16_at(at + 28));
        let local = u32_at(at + 42);
        let name = String::from_utf8(z[at + 46..at + 46 + name_len].to_vec()).unwrap();
        assert_eq!(u32_at(local), 0x0403_4b50);
        let data_at = local + 30 + u16_at(local + 26) + u16_at(local + 28);
        let data = z[data_at..data_at + size].to_vec();
        let c = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC).checksum(&data);
        assert_eq!(c as usize, crc, "{name}");
        out.push((name, data));
        at += 46 + name_len;
    }
    out
}

#[test]
fn feats_stats_npz_holds_espnet_s_three_arrays() {
    let s = stats();
    let entries = unzip(&feats_stats_npz(&s));
    let names: Vec<&str> = entries.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["count.npy", "sum.npy", "sum_square.npy"]);
    let count = npyz::NpyFile::new(&entries[0].1[..]).unwrap();
    assert_eq!(count.shape(), &[] as &[u64]);
    assert_eq!(count.into_vec::<i64>().unwrap(), vec![12_345]);
    for ((_, bytes), want) in entries[1..].iter().zip([&s.sum, &s.sum_square]) {
        assert_eq!(bytes[8..10], [(bytes.len() - 10 - 32) as u8, 0][..]);
        let a = npyz::NpyFile::new(&bytes[..]).unwrap();
        assert_eq!(a.shape(), &[4]);
        assert_eq!(&a.into_vec::<f64>().unwrap(), want);
    }
    assert_eq!(
        feats_stats_npz(&s),
        feats_stats_npz(&s),
        "reproducible bytes"
    );
}

#[test]
fn files_are_renamed_on_commit_and_removed_when_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let h5 = dir.path().join("train.shard-0-of-2.h5");
    let [json, npz] = files::names(&h5);
    assert_eq!(json, dir.path().join("train.shard-0-of-2.global_cmvn"));
    assert_eq!(npz, dir.path().join("train.shard-0-of-2.feats_stats.npz"));
    let pending = files::prepare(&h5, &stats()).unwrap();
    assert!(files::partial(&json).exists() && files::partial(&npz).exists());
    assert!(!json.exists());
    drop(pending); // a failed build
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    files::prepare(&h5, &stats()).unwrap().commit().unwrap();
    assert!(json.exists() && npz.exists());
    assert!(!files::partial(&json).exists());
    files::remove(&h5).unwrap();
    assert!(!json.exists() && !npz.exists());
}
