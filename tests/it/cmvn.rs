//! Global CMVN statistics (docs/FORMAT.md, "CMVN statistics"): a build's
//! describe its stored rows, are bit-identical whatever the worker count,
//! and sit in the split file and beside it; merge adds the shards'.

use std::path::Path;

use melforge::app::build::{self, Options};
use melforge::app::merge::{self, shard::Shard};
use melforge::cmvn::{Stats, files};
use melforge::config::Config;

use crate::common;

const FBANK16: &str = "[features]\nrecipe = \"kaldi-fbank\"\nsample_frequency = 4096\n\
                       num_mel_bins = 20\n\n[output]\ndtype = \"float16\"\nchunk_files = 8\n";

pub(crate) fn stats_of(h5: &Path) -> Stats {
    let f = hdf5::File::open(h5).unwrap();
    melforge::writer::stats::read(&f)
        .unwrap()
        .expect("statistics")
}

/// Per bin (sum, sum of squares) of every stored frame, summed plainly.
fn from_rows(h5: &Path) -> (u64, Vec<f64>, Vec<f64>) {
    let f = hdf5::File::open(h5).unwrap();
    let (values, bins): (Vec<f64>, usize) = if f.link_exists("features") {
        let x = f.dataset("features").unwrap().read_2d::<f32>().unwrap();
        (x.iter().map(|&v| f64::from(v)).collect(), x.shape()[1])
    } else {
        // mel (N, L, S, M, T): a frame is mel[i, l, s, :, t].
        let x = f.dataset("mel").unwrap().read_dyn::<f32>().unwrap();
        let x = x.permuted_axes(vec![0, 1, 2, 4, 3]);
        let m = x.shape()[4];
        (x.iter().map(|&v| f64::from(v)).collect(), m)
    };
    let (mut s, mut q) = (vec![0.0; bins], vec![0.0; bins]);
    for frame in values.chunks(bins) {
        for (b, v) in frame.iter().enumerate() {
            s[b] += v;
            q[b] += v * v;
        }
    }
    ((values.len() / bins.max(1)) as u64, s, q)
}

fn close(a: &[f64], b: &[f64], scale: &[f64]) {
    for ((x, y), z) in a.iter().zip(b).zip(scale) {
        assert!((x - y).abs() <= 1e-12 * z.abs().max(1e-300), "{x} vs {y}");
    }
}

pub(crate) fn check_dir(dir: &Path, split: &str) -> Stats {
    let h5 = dir.join(format!("{split}.h5"));
    let s = stats_of(&h5);
    let (frames, sum, sq) = from_rows(&h5);
    assert_eq!(s.frames, frames);
    close(
        &s.sum,
        &sum,
        &sq.iter()
            .map(|q| q.sqrt() * (frames as f64).sqrt())
            .collect::<Vec<_>>(),
    );
    close(&s.sum_square, &sq, &sq);
    let [json, npz] = files::names(&h5);
    assert_eq!(
        std::fs::read_to_string(json).unwrap(),
        files::global_cmvn_json(&s)
    );
    assert_eq!(std::fs::read(npz).unwrap(), files::feats_stats_npz(&s));
    s
}

#[test]
fn build_statistics_describe_the_rows_whatever_the_workers() {
    let input = common::synth_corpus(24, 3);
    for toml in ["", FBANK16] {
        let mut outs = Vec::new();
        for workers in [1, 3] {
            let mut cfg = Config::parse(toml, "test").unwrap();
            cfg.compute.workers = workers;
            let out = tempfile::tempdir().unwrap();
            common::build(input.path(), out.path(), &cfg);
            check_dir(out.path(), "TRAINING");
            outs.push(out);
        }
        for name in ["TRAINING.global_cmvn", "TRAINING.feats_stats.npz"] {
            let read = |d: &tempfile::TempDir| std::fs::read(d.path().join(name)).unwrap();
            assert_eq!(read(&outs[0]), read(&outs[1]), "{toml}: {name}");
        }
    }
}

#[test]
fn merge_adds_the_shards_statistics() {
    let input = common::synth_corpus(24, 4);
    let cfg = Config::parse(FBANK16, "test").unwrap();
    let single = tempfile::tempdir().unwrap();
    common::build(input.path(), single.path(), &cfg);
    let want = stats_of(&single.path().join("TRAINING.h5"));
    let out = tempfile::tempdir().unwrap();
    for k in 0..3 {
        let s = Some(Shard { index: k, count: 3 });
        build::build_shard(input.path(), out.path(), &cfg, &Options::default(), s).unwrap();
        assert!(
            out.path()
                .join(format!("TRAINING.shard-{k}-of-3.global_cmvn"))
                .exists()
        );
    }
    for copy in [false, true] {
        merge::merge(out.path(), copy).unwrap();
        let got = check_dir(out.path(), "TRAINING");
        assert_eq!(got.frames, want.frames);
        close(&got.sum_square, &want.sum_square, &want.sum_square);
    }
}
