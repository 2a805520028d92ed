#!/usr/bin/env python3
"""Compact storage against float32 and lhotse's lilcom_chunky: bytes, and
random rows read a second, same corpus, same run.

lhotse (from PyPI, in the venv scripts/lhotse-venv makes) makes the CutSet of
a speech corpus (`melforge synth --kind speech`, 16 kHz WAV, 400 utterances
of 2–20 s by default). Then:

* melforge: `build cuts --recipe lhotse-fbank --lhotse`, once plain
  (float32) and once with `[output] storage = "compact"`;
* lhotse: `compute_and_store_features(Fbank(), LilcomChunkyWriter)`, as
  icefall stores fbank.

Every reader reads every row once, in one shuffled order (seeded), in
alternating rounds (the median of `--rounds` is reported):

* `MelDataset(plain)[i]` and `MelDataset(compact)[i]`, melforge's reader
  (float32 rows out);
* `cut.load_features()` over lhotse's lilcom_chunky cuts, and over the
  compact cuts (lhotse's own `numpy_hdf5` reader, after `import hdf5plugin`).

Everything lives on `--work` (tmpfs by default), so the subject is decoding,
not the disk. One process, one thread: HDF5 and the codecs on one core.

Usage: $(scripts/lhotse-venv) scripts/bench_compact.py --melforge target/release/melforge
       [--files 400] [--rounds 3] [--work /dev/shm] [--json]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import hdf5plugin  # noqa: F401  (the Blosc filter, for lhotse's reader)
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))

import melforge  # noqa: E402


def sh(*args, **kw):
    return subprocess.run(args, check=True, **kw)


def features_bytes(h5):
    import h5py
    with h5py.File(h5, "r") as f:
        return f["features"].id.get_storage_size()


def tree_bytes(path):
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(path) for n in ns)


def rate(read, order):
    """Rows a second over `order`, each row read once."""
    t = time.perf_counter()
    for i in order:
        read(i)
    return len(order) / (time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--melforge", default="target/release/melforge")
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default="/dev/shm")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    bin_ = os.path.abspath(a.melforge)
    work = tempfile.mkdtemp(prefix="melforge-bench-compact-", dir=a.work)
    try:
        sh(bin_, "synth", f"{work}/corpus", "--kind", "speech", "--files", str(a.files),
           stdout=subprocess.DEVNULL)
        from lhotse import CutSet, Fbank, LilcomChunkyWriter, RecordingSet
        recs = RecordingSet.from_dir(f"{work}/corpus", "*.wav", num_jobs=2)
        CutSet.from_manifests(recordings=recs).to_file(f"{work}/cuts.jsonl.gz")
        with open(f"{work}/compact.toml", "w") as f:
            f.write('[output]\nstorage = "compact"\n')
        for name, extra in (("plain", []), ("compact", ["--config", f"{work}/compact.toml"])):
            sh(bin_, "build", f"{work}/cuts.jsonl.gz", "--recipe", "lhotse-fbank", "--lhotse",
               "--out", f"{work}/{name}", "--progress", "none", *extra,
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.environ["OMP_NUM_THREADS"] = "1"
        lilcom = CutSet.from_file(f"{work}/cuts.jsonl.gz").compute_and_store_features(
            extractor=Fbank(), storage_path=f"{work}/lilcom", num_jobs=2,
            storage_type=LilcomChunkyWriter)
        plain = melforge.MelDataset(f"{work}/plain/cuts.h5")
        compact = melforge.MelDataset(f"{work}/compact/cuts.h5")
        compact_cuts = CutSet.from_file(f"{work}/compact/cuts.cuts.jsonl.gz")
        # lhotse's CutSet from compute_and_store_features is in its own
        # order; index both CutSets by the plain file's row order.
        ids = [c.id for c in CutSet.from_file(f"{work}/plain/cuts.cuts.jsonl.gz")]
        by_id = {c.id: c for c in lilcom}
        lil = [by_id[i] for i in ids]
        ours = list(compact_cuts)
        frames = int(plain.lengths.sum())
        order = np.random.default_rng(5).permutation(len(ids)).tolist()
        readers = {
            "MelDataset float32": lambda i: plain[i],
            "MelDataset compact": lambda i: compact[i],
            "lhotse lilcom_chunky": lambda i: lil[i].load_features(),
            "lhotse numpy_hdf5 compact": lambda i: ours[i].load_features(),
        }
        rates = {k: [] for k in readers}
        for r in range(a.rounds):
            for k in (list(readers) if r % 2 == 0 else list(reversed(readers))):
                rates[k].append(rate(readers[k], order))
        med = {k: statistics.median(v) for k, v in rates.items()}
        plain_b = features_bytes(f"{work}/plain/cuts.h5")
        sizes = {
            "float32": plain_b,
            "compact": features_bytes(f"{work}/compact/cuts.h5"),
            "lilcom_chunky": tree_bytes(f"{work}/lilcom"),
        }
        # The compact rows are the float32 rows on the 2^-5 grid.
        for i in order[:50]:
            x, _ = plain[i]
            y, _ = compact[i]
            if not np.array_equal(y, np.round(x * 32) / 32):
                raise SystemExit(f"row {i}: compact is not the float32 row on the grid")
        report = {
            "files": a.files, "frames": frames, "rounds": a.rounds,
            "rows_per_s": {k: round(v, 1) for k, v in med.items()},
            "bytes": sizes,
            "bytes_vs_float32": {k: round(v / plain_b, 3) for k, v in sizes.items()},
            "compact_vs_float32_rows": round(med["MelDataset compact"]
                                             / med["MelDataset float32"], 2),
            "compact_vs_lilcom_rows": round(med["MelDataset compact"]
                                            / med["lhotse lilcom_chunky"], 2),
        }
        if a.json:
            print(json.dumps(report))
            return
        print(f"{a.files} utterances, {frames} frames of 80 bins; median of {a.rounds} rounds, "
              f"every row once in a shuffled order")
        for k, v in med.items():
            print(f"  {k:27s} {v:8.1f} rows/s  ({v * frames / len(ids) * 320 / 1e9:.2f} GB/s "
                  f"of float32)")
        for k, v in sizes.items():
            print(f"  {k:13s} {v / 1e6:8.1f} MB  ({v / plain_b:.3f}x float32)")
        print(f"compact rows: {report['compact_vs_float32_rows']}x float32's rate, "
              f"{report['compact_vs_lilcom_rows']}x lilcom_chunky's through lhotse")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
