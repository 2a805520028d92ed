"""Manifest builds from Python (docs/FORMAT.md, "Manifests"): `build` of a
NeMo manifest and a gzipped lhotse CutSet, `meta(i)` with each line's fields
and its line, the manifest written back, bad lines in the report."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest
import wave

import melforge

from conftest import melforge_bin

CONFIG = '[features]\nrecipe = "kaldi-fbank"\nnum_mel_bins = 40\n'


def a_cut(duration: float) -> dict:
    """A lhotse MonoCut on channel 1 of `audio/rec.wav` from 0.5 s on."""
    return {
        "id": "cut-1", "start": 0.5, "duration": duration, "channel": 1, "type": "MonoCut",
        "supervisions": [{"id": "s", "text": "привет", "speaker": "spk-9", "language": "ru"}],
        "recording": {"id": "rec", "sources": [{"type": "file", "channels": [0, 1], "source": "audio/rec.wav"}],
                      "sampling_rate": 16000, "num_samples": 96000, "duration": 6.0},
    }


@pytest.fixture()
def recording(tmp_path: Path) -> Path:
    rng = np.random.default_rng(3)
    t = np.arange(16000 * 6) / 16000
    y = 0.3 * np.sin(2 * np.pi * 300 * t) + 0.01 * rng.standard_normal(len(t))
    p = tmp_path / "audio" / "rec.wav"
    p.parent.mkdir()
    # PCM16 stereo through the standard library (the wheel's test extras
    # have no soundfile).
    pcm = np.round(np.stack([y, 0.5 * y], axis=1) * 32767).astype("<i2")
    with wave.open(str(p), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm.tobytes())
    return p


def test_nemo_and_lhotse_manifests_build_with_meta_and_written_back(
    tmp_path: Path, recording: Path
) -> None:
    os.environ.setdefault("MELFORGE_BIN", melforge_bin())
    nemo = tmp_path / "train.jsonl"
    lines = [
        {"audio_filepath": "audio/rec.wav", "offset": 1.25, "duration": 2.0, "text": "zwölf 🦊", "speaker": "a"},
        "not json",
        {"audio_filepath": "audio/rec.wav", "duration": 6.0, "text": "whole", "lang": "de"},
    ]
    nemo.write_text("\n".join(x if isinstance(x, str) else json.dumps(x, ensure_ascii=False) for x in lines) + "\n")
    cut = a_cut(duration=1.0)
    cuts = tmp_path / "cuts_dev.jsonl.gz"
    with gzip.open(cuts, "wt") as f:
        f.write(json.dumps(cut) + "\n")
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    out = tmp_path / "out"
    report = melforge.build([nemo, cuts], out, config=cfg, progress=False)
    assert [(r.kind, r.extra["line"]) for r in report.rejected] == [("bad_line", 2)]
    train = melforge.MelDataset(out / "train.h5")
    assert len(train) == 2
    m = train.meta(0)
    assert (m["text"], m["speaker"], m["offset"], m["line"]) == ("zwölf 🦊", "a", 1.25, 1)
    assert m["num_frames"] == train.lengths[0] == 198
    assert train.meta(1)["line"] == 3 and train.meta(1)["lang"] == "de"
    dev = melforge.MelDataset(out / "cuts_dev.h5")
    m = dev.meta(0)
    assert (m["id"], m["text"], m["speaker"], m["language"], m["line"]) == ("cut-1", "привет", "spk-9", "ru", 1)
    assert dev.rows_by("id") == {"cut-1": 0}
    assert train.rows_by("text") == {"zwölf 🦊": 0, "whole": 1}
    back = [json.loads(x) for x in (out / "train.jsonl").read_text().splitlines()]
    assert [(b["text"], b["features_file"], b["features_row"]) for b in back] == [
        ("zwölf 🦊", "train.h5", 0),
        ("whole", "train.h5", 1),
    ]
    assert back[1]["num_frames"] == train.lengths[1]


def test_lhotse_cuts_come_back_with_features_h5py_reads(tmp_path: Path, recording: Path) -> None:
    """`output.lhotse` from Python: the cuts file is in the report, each cut
    names a view of its row that plain h5py reads (lhotse's `numpy_hdf5`
    reader is `h5py.File(path)[key][a:b]`)."""
    import h5py

    os.environ.setdefault("MELFORGE_BIN", melforge_bin())
    cut = a_cut(duration=1.001)
    cuts = tmp_path / "cuts_dev.jsonl.gz"
    with gzip.open(cuts, "wt") as f:
        f.write(json.dumps(cut, ensure_ascii=False) + "\n")
    out = tmp_path / "out"
    config = melforge.Config({"features": {"recipe": "lhotse-fbank"}, "output": {"lhotse": True}})
    report = melforge.build(cuts, out, config=config, progress=False)
    assert report.cuts == [out / "cuts_dev.cuts.jsonl.gz"]
    with gzip.open(report.cuts[0], "rt") as f:
        (got,) = [json.loads(x) for x in f]
    feats = got["features"]
    # lhotse's compute_num_frames(1.001, 0.01, 16000) = (16016 + 80) // 160.
    assert (feats["num_frames"], feats["num_features"], feats["storage_type"]) == (100, 80, "numpy_hdf5")
    assert (feats["start"], feats["duration"], feats["channels"]) == (0.5, 1.001, 1)
    assert got["supervisions"][0]["text"] == "привет"
    ds = melforge.MelDataset(out / "cuts_dev.h5")
    row, _ = ds[0]
    with h5py.File(feats["storage_path"], "r") as f:
        view = f[feats["storage_key"]][:]
    assert view.shape == (100, 80)
    assert np.array_equal(view, row)
