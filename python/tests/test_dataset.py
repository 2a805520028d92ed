"""MelDataset and ConcatMelDataset over a real build's output."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
from pathlib import Path
from typing import List, Tuple

import h5py
import numpy as np
import pytest

import melforge
from conftest import wavs


def plain(path: Path) -> Tuple[np.ndarray, np.ndarray, List[str], List[str]]:
    with h5py.File(path, "r") as f:
        names = [n.decode() if isinstance(n, bytes) else n for n in f.attrs["label_names"]]
        return f["mel"][:], f["label"][:], list(f["path"].asstr()[:]), names


def test_rows_labels_and_paths_match_h5py(built: Path, corpus: Path) -> None:
    seen = []
    for split in ("TRAINING", "VALIDATION", "TESTING"):
        mel, label, paths, names = plain(built / f"{split}.h5")
        ds = melforge.MelDataset(built / f"{split}.h5")
        assert len(ds) == len(mel) > 0
        assert ds.paths == paths
        assert ds.label_names == names
        for i in range(len(ds)):
            x, y = ds[i]
            assert isinstance(y, int) and y == label[i]
            np.testing.assert_array_equal(x, mel[i])
            assert x.shape == mel.shape[1:]
        np.testing.assert_array_equal(ds[-1][0], mel[-1])
        with pytest.raises(IndexError):
            ds[len(ds)]
        with pytest.raises(IndexError):
            ds[-len(ds) - 1]
        xb, yb = ds.batch([3, 0, 3])
        np.testing.assert_array_equal(xb, mel[[3, 0, 3]])
        assert list(yb) == [label[3], label[0], label[3]]
        seen += ds.paths
    assert sorted(seen) == wavs(corpus)


def test_the_chunk_cache_is_off_by_default(built: Path) -> None:
    ds = melforge.MelDataset(built / "TRAINING.h5")
    ds[0]
    # (nslots, nbytes, w0) of the open file's access property list.
    assert ds._file is not None
    assert ds._file.id.get_access_plist().get_cache()[2] == 0


def test_concat_spans_every_split_with_one_label_list(built: Path, corpus: Path) -> None:
    all_ = melforge.ConcatMelDataset.from_dir(built)
    parts = [melforge.MelDataset(built / f"{s}.h5") for s in ("TESTING", "TRAINING", "VALIDATION")]
    assert len(all_) == sum(len(p) for p in parts)
    assert sorted(all_.paths) == wavs(corpus)
    k = 0
    for p in parts:
        for i in range(len(p)):
            x, y = all_[k]
            np.testing.assert_array_equal(x, p[i][0])
            assert all_.label_names[y] == p.label_names[p[i][1]]
            k += 1
    with pytest.raises(IndexError):
        all_[len(all_)]
    only = melforge.ConcatMelDataset.from_dir(built, splits=["VALIDATION"])
    assert len(only) == len(parts[2])


def _read_rows(args: Tuple[melforge.MelDataset, List[int]]) -> Tuple[int, int, List[float]]:
    ds, rows = args
    sums = [float(ds[i][0].sum()) + ds[i][1] for i in rows]
    assert ds._pid == os.getpid()  # this process opened its own handle
    return os.getpid(), len(ds), sums


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_workers_read_the_same_rows_as_the_parent(built: Path, method: str) -> None:
    if method not in mp.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    ds = melforge.MelDataset(built / "TRAINING.h5")
    # The parent reads first, so a forked child inherits an open handle.
    expect = [float(ds[i][0].sum()) + ds[i][1] for i in range(len(ds))]
    halves = [list(range(0, len(ds), 2)), list(range(1, len(ds), 2))]
    with mp.get_context(method).Pool(2) as pool:
        got = pool.map(_read_rows, [(ds, h) for h in halves])
    assert {pid for pid, _, _ in got}.isdisjoint({os.getpid()})
    for (_, n, sums), rows in zip(got, halves):
        assert n == len(ds)
        assert sums == [expect[i] for i in rows]
    # The parent's handle still works after its children closed theirs.
    assert float(ds[0][0].sum()) + ds[0][1] == expect[0]


def test_pickling_drops_the_handle(built: Path) -> None:
    ds = melforge.MelDataset(built / "TRAINING.h5")
    ds[0]
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._file is None and len(clone) == len(ds)
    np.testing.assert_array_equal(clone[1][0], ds[1][0])


def test_a_file_that_is_not_melforge_output_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "other.h5"
    with h5py.File(p, "w") as f:
        f["x"] = np.zeros(3)
    with pytest.raises(KeyError):
        melforge.MelDataset(p)
    with pytest.raises(OSError):
        melforge.MelDataset(tmp_path / "missing.h5")


def test_direct_reads_match_h5py_reads(built: Path) -> None:
    fast = melforge.MelDataset(built / "TRAINING.h5")
    slow = melforge.MelDataset(built / "TRAINING.h5", direct=False)
    fast[0], slow[0]
    assert fast._direct is not None and fast._direct.rows == len(fast)
    assert slow._direct is None
    for i in range(len(fast)):
        np.testing.assert_array_equal(fast[i][0], slow[i][0])
    order = list(range(len(fast)))[::-3]
    np.testing.assert_array_equal(fast.batch(order)[0], slow.batch(order)[0])


def test_a_compressed_copy_is_read_through_h5py(built: Path, tmp_path: Path) -> None:
    # Another tool may rewrite the file compressed: rows must still be right.
    src = built / "TRAINING.h5"
    dst = tmp_path / "gz.h5"
    with h5py.File(src, "r") as f, h5py.File(dst, "w") as g:
        g.create_dataset("mel", data=f["mel"][:], chunks=(4,) + f["mel"].shape[1:], compression="gzip")
        g["label"] = f["label"][:]
        g.create_dataset("path", data=f["path"][:], dtype=h5py.string_dtype())
        g.attrs["label_names"] = f.attrs["label_names"]
    ds = melforge.MelDataset(dst)
    ref = melforge.MelDataset(src)
    x, y = ds[5]
    assert ds._direct is None
    np.testing.assert_array_equal(x, ref[5][0])
    assert y == ref[5][1] and ds.paths == ref.paths
