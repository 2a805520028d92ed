#!/usr/bin/env python3
"""Global CMVN statistics against numpy (docs/FORMAT.md, "CMVN statistics").

Builds a synthetic corpus under the librosa default, kaldi-fbank and whisper,
each stored as float32 and as float16, and checks every split's statistics
(in the file, `<split>.global_cmvn` and `<split>.feats_stats.npz`) against
numpy's float64 sums over the stored rows read with h5py.

Tolerance: per bin |melforge - numpy| <= 1e-12 * sum(|x|) for the sum and
1e-12 * sum(x^2) for the sum of squares; frame counts exactly. Both sides
add the same float64 values (each stored value, and its square, is exact in
float64) in different orders. numpy sums each bin along a contiguous axis,
pairwise: within about log2(n) * 2^-53 * sum(|x|) of the exact sum (2e-15
here). melforge adds a row's frames in order, then the rows in order:
within (frames per row + rows) * 2^-53 * sum(|x|) at worst, and here a row
has at most 1,001 frames and a split at most 42 rows (1.2e-13). (An axis-0
`x.sum(0)` would add the frames one after another, 2^-53 per frame: 4.7e-12
at worst over 42,000 frames, which is why the bins are made contiguous.)

usage: parity_cmvn.py MELFORGE
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np

RECIPES = {
    "librosa": "",
    "kaldi-fbank": '[features]\nrecipe = "kaldi-fbank"\nsample_frequency = 4096\nnum_mel_bins = 23\n',
    "whisper": '[features]\nrecipe = "whisper"\n\n[input]\nresample = "soxr_hq"\n',
}
TOL = 1e-12


def stored_frames(f: h5py.File) -> np.ndarray:
    """Every stored frame as a row of float64: `features`, or librosa's
    mel[i, l, s, :, t] (the bin is the mel band)."""
    if "features" in f:
        return f["features"][:].astype(np.float64)
    mel = f["mel"][:].astype(np.float64)  # (N, L, S, M, T)
    return np.moveaxis(mel, 3, -1).reshape(-1, mel.shape[3])


def check(h5: Path) -> str:
    with h5py.File(h5, "r") as f:
        x = stored_frames(f)
        n, s, q = int(f["cmvn_frames"][()]), f["cmvn_sum"][:], f["cmvn_sum_square"][:]
    # Bins as rows: numpy then sums each along its contiguous axis, pairwise.
    xt = np.ascontiguousarray(x.T)
    want_s, want_q, abs_s = xt.sum(1), (xt * xt).sum(1), np.abs(xt).sum(1)
    assert n == x.shape[0], f"{h5}: {n} frames, numpy counts {x.shape[0]}"
    err_s = np.max(np.abs(s - want_s) / np.maximum(abs_s, 1e-300), initial=0)
    err_q = np.max(np.abs(q - want_q) / np.maximum(want_q, 1e-300), initial=0)
    assert err_s <= TOL and err_q <= TOL, f"{h5}: relative errors {err_s:.2e}, {err_q:.2e}"
    stem = str(h5)[: -len(".h5")]
    j = json.load(open(stem + ".global_cmvn"))
    assert j["frame_num"] == n and j["mean_stat"] == s.tolist() and j["var_stat"] == q.tolist(), stem
    z = np.load(stem + ".feats_stats.npz")
    assert z["count"].dtype == np.int64 and z["count"].shape == () and int(z["count"]) == n, stem
    assert z["sum"].dtype == np.float64 and np.array_equal(z["sum"], s), stem
    assert np.array_equal(z["sum_square"], q), stem
    return f"{h5.name}: {n} frames x {x.shape[1]} bins, errors {err_s:.1e} / {err_q:.1e}"


def main() -> None:
    melforge = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        subprocess.run([melforge, "synth", str(corpus), "--files", "60", "--seed", "11"],
                       check=True, capture_output=True)
        for recipe, toml in RECIPES.items():
            for dtype in ("float32", "float16"):
                cfg = Path(tmp) / f"{recipe}-{dtype}.toml"
                extra = f'\n[output]\ndtype = "{dtype}"\n'
                cfg.write_text(toml + extra)
                out = Path(tmp) / f"out-{recipe}-{dtype}"
                subprocess.run([melforge, "build", str(corpus), "--out", str(out), "--config", str(cfg)],
                               check=True, capture_output=True)
                for h5 in sorted(out.glob("*.h5")):
                    print(f"{recipe} {dtype} {check(h5)}")
    print("parity_cmvn: every split's statistics match numpy")


if __name__ == "__main__":
    main()
