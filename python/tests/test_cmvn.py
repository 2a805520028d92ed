"""`MelDataset.cmvn()`: the split's per-bin mean and std from the statistics
the build stores (docs/FORMAT.md, "CMVN statistics"), against numpy over the
stored rows."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

import melforge
from conftest import run


def test_cmvn_of_a_librosa_build_matches_numpy(built: Path) -> None:
    ds = melforge.MelDataset(built / "TRAINING.h5")
    mean, std = ds.cmvn()
    with h5py.File(built / "TRAINING.h5", "r") as f:
        mel = f["mel"][:].astype(np.float64)
    x = np.moveaxis(mel, 3, -1).reshape(-1, mel.shape[3])  # frames x mel bands
    assert mean.dtype == np.float64 and mean.shape == (mel.shape[3],)
    np.testing.assert_allclose(mean, x.mean(0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(std, x.std(0), rtol=1e-6)
    frames, s, q = ds.cmvn_stats()
    assert frames == x.shape[0]


def test_cmvn_of_a_kaldi_build_and_a_file_without_statistics(corpus: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "fbank.toml"
    cfg.write_text('[features]\nrecipe = "kaldi-fbank"\nsample_frequency = 4096\n')
    out = tmp_path / "out"
    run("build", str(corpus), "--out", str(out), "--config", str(cfg))
    mean, std = melforge.MelDataset(out / "TRAINING.h5").cmvn()
    with h5py.File(out / "TRAINING.h5", "r") as f:
        x = f["features"][:].astype(np.float64)
    np.testing.assert_allclose(mean, x.mean(0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(std, x.std(0), rtol=1e-6)
    # Statistics that no longer cover every stored frame (rows appended
    # since by a serve older than this one) are refused, not returned.
    with h5py.File(out / "TRAINING.h5", "a") as f:
        f["cmvn_frames"][()] = int(f["cmvn_frames"][()]) - 1
    with pytest.raises(ValueError, match="cover .* frames but the file holds"):
        melforge.MelDataset(out / "TRAINING.h5").cmvn()
    with h5py.File(out / "TRAINING.h5", "a") as f:
        del f["cmvn_frames"]
    with pytest.raises(KeyError, match="no CMVN statistics"):
        melforge.MelDataset(out / "TRAINING.h5").cmvn()
