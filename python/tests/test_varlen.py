"""Variable-length rows (docs/FORMAT.md, "Variable-length rows"): the reader
over files in that layout, `collate` and `LengthBatchSampler`.

The files here are written with h5py to the documented layout, so the reader
is checked against the format itself; `test_kaldi_build_reads_back` runs the
binary end to end where it has the recipes.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Tuple

import h5py
import numpy as np
import pytest

import melforge
from conftest import run

LENGTHS = [120, 0, 37, 998, 5, 300, 2999, 3000]


def rows(bins: int) -> List[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.standard_normal((n, bins)).astype(np.float32) for n in LENGTHS]


def write(path: Path, recipe: str, bins: int, padded: Optional[int]) -> List[np.ndarray]:
    """A split file in the variable-length layout, as melforge writes it."""
    data = rows(bins)
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in data])[:-1]]).astype(np.int64)
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset(
            "features", data=np.concatenate(data), maxshape=(None, bins), chunks=(4096, bins)
        )
        f.create_dataset("offsets", data=offsets, maxshape=(None,), chunks=(4,))
        f.create_dataset("lengths", data=np.array(LENGTHS, np.int32), maxshape=(None,), chunks=(4,))
        f.create_dataset("label", data=np.array([-1 if i == 5 else i % 2 for i in range(len(data))], np.int32))
        f.create_dataset("path", data=[f"spk/u{i}.wav" for i in range(len(data))], dtype=h5py.string_dtype())
        if padded is not None:
            f.create_dataset("pad_value", data=np.array([-1.5 + i / 8 for i in range(len(data))], np.float32))
            f.attrs["padded_frames"] = padded
        f.attrs["layout"] = "frames"
        f.attrs["recipe"] = recipe
        f.attrs["n_bins"] = bins
        f.attrs["label_names"] = np.array(["a", "b"], dtype=h5py.string_dtype())
    return data


def test_kaldi_rows_are_frames_by_bins_with_lengths_and_meta(tmp_path: Path) -> None:
    p = tmp_path / "train.h5"
    data = write(p, "kaldi-fbank", 80, None)
    ds = melforge.MelDataset(p)
    assert len(ds) == len(LENGTHS)
    np.testing.assert_array_equal(ds.lengths, LENGTHS)
    for i, want in enumerate(data):
        x, y = ds[i]
        assert x.dtype == np.float32 and x.shape == (LENGTHS[i], 80)
        np.testing.assert_array_equal(x, want)
        assert y == (-1 if i == 5 else i % 2)
    assert ds.meta(2) == {"path": "spk/u2.wav", "label": 0, "label_name": "a", "num_frames": 37}
    assert ds.meta(5)["label_name"] is None
    xb, yb = ds.batch([3, 1])
    assert xb.shape == (2, 998, 80) and list(yb) == [1, 1]
    np.testing.assert_array_equal(xb[0], data[3])
    assert not xb[1].any()


def test_whisper_rows_are_padded_to_3000_with_their_constant(tmp_path: Path) -> None:
    p = tmp_path / "train.h5"
    data = write(p, "whisper", 80, 3000)
    ds = melforge.MelDataset(p)
    for i, stored in enumerate(data):
        x, _ = ds[i]
        assert x.shape == (80, 3000) and x.dtype == np.float32
        np.testing.assert_array_equal(x[:, : len(stored)], stored.T)
        assert (x[:, len(stored) :] == np.float32(-1.5 + i / 8)).all()
    np.testing.assert_array_equal(ds.lengths, LENGTHS)
    b = melforge.collate([ds[i] for i in (0, 6)], time_axis=-1)
    assert b.features.shape == (2, 80, 3000) and list(b.lengths) == [3000, 3000]


def test_collate_pads_and_returns_the_lengths() -> None:
    items = [(np.ones((3, 2), np.float32), 4), (np.full((5, 2), 2, np.float32), 1), (np.zeros((0, 2), np.float32), 0)]
    b = melforge.collate(items)
    assert b.features.shape == (3, 5, 2) and b.features.dtype == np.float32
    assert list(b.lengths) == [3, 5, 0] and list(b.labels) == [4, 1, 0]
    assert (b.features[0, :3] == 1).all() and not b.features[0, 3:].any()
    assert (b.features[1] == 2).all()
    assert melforge.collate(items, pad_value=-9).features[2].min() == -9


def test_the_sampler_bounds_padded_frames_and_covers_every_row_once() -> None:
    rng = np.random.default_rng(3)
    lengths = rng.integers(200, 2000, size=1000).tolist() + [5000, 1]
    s = melforge.LengthBatchSampler(lengths, max_frames=4000, seed=1)
    for epoch in (0, 1):
        s.set_epoch(epoch)
        batches = list(s)
        assert len(batches) == len(s)
        flat = sorted(i for b in batches for i in b)
        assert flat == list(range(len(lengths)))
        for b in batches:
            cost = len(b) * max(lengths[i] for i in b)
            assert cost <= 4000 or len(b) == 1
        # Similar lengths together: far less padding than a random batching.
        padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
        assert padded < 1.1 * sum(lengths)
    s.set_epoch(0)
    again = melforge.LengthBatchSampler(lengths, max_frames=4000, seed=1)
    assert list(again) == list(s)
    s.set_epoch(1)
    assert list(again) != list(s)
    with pytest.raises(ValueError):
        melforge.LengthBatchSampler(lengths, max_frames=0)


def test_importing_melforge_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = "import melforge, sys; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def _sums(args: Tuple[melforge.MelDataset, List[int]]) -> Tuple[int, List[float]]:
    ds, idx = args
    return os.getpid(), [float(ds[i][0].sum()) for i in idx]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_workers_read_variable_rows_like_the_parent(tmp_path: Path, method: str) -> None:
    if method not in mp.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    p = tmp_path / "train.h5"
    write(p, "whisper", 16, 3000)
    ds = melforge.MelDataset(p)
    expect = [float(ds[i][0].sum()) for i in range(len(ds))]
    halves = [list(range(0, len(ds), 2)), list(range(1, len(ds), 2))]
    with mp.get_context(method).Pool(2) as pool:
        got = pool.map(_sums, [(ds, h) for h in halves])
    for (pid, sums), idx in zip(got, halves):
        assert pid != os.getpid()
        assert sums == [expect[i] for i in idx]
    clone = pickle.loads(pickle.dumps(ds))
    np.testing.assert_array_equal(clone[3][0], ds[3][0])


def test_a_compact_build_reads_back_through_plain_h5py_and_hdf5plugin(
    corpus: Path, tmp_path: Path
) -> None:
    """`[output] storage = "compact"`: float16 on the 2^-5 grid in Blosc
    chunks. A fresh interpreter that never imports melforge reads it with
    h5py after `import hdf5plugin`; the reader reads the same rows."""
    base = '[features]\nrecipe = "kaldi-fbank"\nsample_frequency = 4096\n'
    outs = {}
    for name, extra in (("plain", ""), ("compact", '[output]\nstorage = "compact"\n')):
        cfg = tmp_path / f"{name}.toml"
        cfg.write_text(base + extra)
        outs[name] = tmp_path / name
        run("build", str(corpus), "--out", str(outs[name]), "--config", str(cfg))
    plain, compact = outs["plain"] / "TRAINING.h5", outs["compact"] / "TRAINING.h5"
    code = (
        "import sys, h5py, hdf5plugin, numpy as np\n"
        "assert 'melforge' not in sys.modules\n"
        "f = h5py.File(sys.argv[1], 'r')\n"
        "np.save(sys.argv[2], f['features'][:])\n"
    )
    npy = tmp_path / "x.npy"
    subprocess.run([sys.executable, "-c", code, str(compact), str(npy)], check=True)
    got = np.load(npy)
    with h5py.File(plain, "r") as f:
        want = f["features"][:]
    assert got.dtype == np.float16 and got.shape == want.shape and len(want) > 0
    # numpy rounds half to even, as the writer does; float16 holds the grid
    # exactly below 2^6.
    assert np.abs(want).max() < 64
    np.testing.assert_array_equal(got.astype(np.float32), np.round(want * 32) / 32)
    a, b = melforge.MelDataset(plain), melforge.MelDataset(compact)
    assert b.attrs["storage"] == "compact" and int(b.attrs["tick_power"]) == -5
    np.testing.assert_array_equal(a.lengths, b.lengths)
    for i in range(len(a)):
        (x, y), (u, v) = a[i], b[i]
        assert y == v and u.dtype == np.float32
        np.testing.assert_array_equal(u, np.round(x * 32) / 32)
