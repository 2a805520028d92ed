//! `[output] storage = "compact"`: float16 values on a grid of
//! `2^tick_power`, in Blosc (bitshuffle + LZ4) chunks. Here: every stored
//! value is the plain build's value rounded to the grid, the filter is in
//! the dataset's pipeline, the chunks are compressed, and the CMVN
//! statistics are those of the stored values. That h5py + hdf5plugin and
//! lhotse read the same values is `python/tests` and
//! `scripts/parity_lhotse.py`'s.

use std::path::Path;

use hdf5::filters::Filter;
use melforge::config::Config;

use crate::common::{self, put};
use crate::manifest::{pcm16, rows, signal};

fn config(storage: &str) -> Config {
    let text = format!(
        "[features]\nrecipe = \"lhotse-fbank\"\n\n[output]\n{storage}chunk_files = 4\n\n\
         [compute]\nworkers = 2\n"
    );
    Config::parse(&text, "compact.toml").unwrap()
}

/// A tree of recordings long and short enough that `features` spans
/// several compact chunks (409 frames each at 80 bins) and ends in a
/// partial one.
fn corpus(root: &Path) {
    for (i, seconds) in [1usize, 17, 3, 22, 2, 9].into_iter().enumerate() {
        let n = 16_000 * seconds + 321 * i;
        put(
            root,
            &format!("s{}/u{i}.wav", i % 2),
            &pcm16(&signal(n, 1, i as u32 + 3), 1, 16_000),
        );
    }
}

#[test]
fn compact_rows_are_the_plain_rows_on_the_grid_in_blosc_chunks() {
    let input = tempfile::tempdir().unwrap();
    corpus(input.path());
    let (plain, compact) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    common::build(input.path(), plain.path(), &config(""));
    let cfg = config("storage = \"compact\"\n");
    assert_eq!(
        cfg.output.dtype,
        melforge::writer::Dtype::Compact { tick_power: -5 }
    );
    common::build(input.path(), compact.path(), &cfg);
    let (p, c) = (
        rows(&plain.path().join("all.h5")),
        rows(&compact.path().join("all.h5")),
    );
    assert_eq!(p.path, c.path);
    assert_eq!(p.rows.len(), 6);
    let mut frames = 0;
    for (a, b) in p.rows.iter().zip(&c.rows) {
        assert_eq!(a.len(), b.len());
        frames += a.len() / 80;
        for (&x, &y) in a.iter().zip(b) {
            // The plain value to the nearest 1/32 (ties to even), which
            // float16 holds exactly below 64.
            let want = ((f64::from(x) * 32.0).round_ties_even() / 32.0) as f32;
            assert!(x.abs() < 60.0, "{x}: fbank of 16-bit audio stays below 2^6");
            assert_eq!(y, want, "{x}");
        }
    }
    assert!(frames > 3 * 409, "{frames} frames: several chunks");

    let f = hdf5::File::open(compact.path().join("all.h5")).unwrap();
    let ds = f.dataset("features").unwrap();
    assert!(ds.dtype().unwrap().is::<half::f16>());
    assert_eq!(ds.chunk(), Some(vec![409, 80]));
    let filters = ds.filters();
    assert!(
        matches!(filters.as_slice(), [Filter::Blosc(..)]),
        "{filters:?}"
    );
    let attr = |n: &str| f.attr(n).unwrap();
    assert_eq!(
        attr("storage")
            .read_scalar::<hdf5::types::VarLenUnicode>()
            .unwrap()
            .as_str(),
        "compact"
    );
    assert_eq!(attr("tick_power").read_scalar::<i64>().unwrap(), -5);
    // Compressed: the stored chunks hold well under float16's bytes.
    let stored = ds.storage_size() as usize;
    let raw = frames * 80 * 2;
    assert!(stored * 10 < raw * 9, "{stored} stored bytes for {raw}");

    // The statistics are those of the stored (rounded) values.
    crate::cmvn::check_dir(compact.path(), "all");
}

#[test]
fn compact_storage_refuses_what_it_cannot_store() {
    let bad = |text: &str| Config::parse(text, "c.toml").unwrap_err().to_string();
    let e = bad("[output]\nstorage = \"compact\"\n");
    assert!(e.contains("librosa"), "{e}");
    let e = bad(
        "[features]\nrecipe = \"kaldi-fbank\"\n[output]\nstorage = \"compact\"\ndtype = \"float32\"\n",
    );
    assert!(
        e.starts_with("c.toml:5: invalid value for `output.dtype`"),
        "{e}"
    );
    let e = bad("[features]\nrecipe = \"kaldi-fbank\"\n[output]\ntick_power = -6\n");
    assert!(e.contains("not \"compact\""), "{e}");
    let e = bad(
        "[features]\nrecipe = \"whisper\"\n[output]\nstorage = \"compact\"\ntick_power = -13\n",
    );
    assert!(e.contains("expected -12 to 0"), "{e}");
    let e = bad("[features]\nrecipe = \"kaldi-fbank\"\n[output]\nstorage = \"small\"\n");
    assert!(e.contains("expected one of \"plain\", \"compact\""), "{e}");
    let whisper = Config::parse(
        "[features]\nrecipe = \"whisper\"\n[output]\nstorage = \"compact\"\n",
        "w",
    )
    .unwrap();
    assert_eq!(
        whisper.output.dtype,
        melforge::writer::Dtype::Compact { tick_power: -8 }
    );
}

/// Shards of a compact build merge into the rows of a single compact build,
/// as virtual datasets over the shards and as standalone copies, whose
/// `features` keeps its Blosc chunks.
#[test]
fn compact_shards_merge_into_the_single_build() {
    use melforge::app::build::{self, Options};
    use melforge::app::merge::{self, shard::Shard};

    let input = tempfile::tempdir().unwrap();
    corpus(input.path());
    let cfg = config("storage = \"compact\"\n");
    let single = tempfile::tempdir().unwrap();
    common::build(input.path(), single.path(), &cfg);
    let want = rows(&single.path().join("all.h5"));
    let out = tempfile::tempdir().unwrap();
    for index in 0..2 {
        let shard = Some(Shard { index, count: 2 });
        build::build_shard(input.path(), out.path(), &cfg, &Options::default(), shard).unwrap();
    }
    for copy in [false, true] {
        merge::merge(out.path(), copy).unwrap();
        let merged = out.path().join("all.h5");
        let got = rows(&merged);
        assert_eq!(got.path, want.path, "copy: {copy}");
        assert_eq!(got.rows, want.rows, "copy: {copy}");
        if copy {
            let f = hdf5::File::open(&merged).unwrap();
            let filters = f.dataset("features").unwrap().filters();
            assert!(
                matches!(filters.as_slice(), [Filter::Blosc(..)]),
                "{filters:?}"
            );
        }
    }
}
