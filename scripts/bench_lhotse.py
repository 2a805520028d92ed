#!/usr/bin/env python3
"""melforge against lhotse's own feature pipeline, same CutSet, same run.

lhotse (from PyPI, in the venv scripts/lhotse-venv makes) makes the CutSet of
a speech corpus (`melforge synth --kind speech`, 16 kHz WAV: 1,500
utterances of 2–20 s, about 4.6 h, by default) with
`RecordingSet.from_dir` + `CutSet.from_manifests`. Then, in alternating
pairs with a settle between runs, each as a whole process:

* lhotse: `cuts.compute_and_store_features(Fbank(), storage_path,
  num_jobs=2, storage_type=LilcomChunkyWriter)` (icefall's recipe), with
  `OMP_NUM_THREADS=1` (without it the two jobs' torch threads oversubscribe
  the cores), then the cuts written with `to_file`;
* melforge: `build cuts.jsonl.gz --recipe lhotse-fbank --lhotse`, its cuts
  file written and its views made, float32 (melforge's default);
* melforge compact: the same with `[output] storage = "compact"` (float16 on
  lhotse's own tick of 2^-5 in Blosc chunks: the storage closest to
  lilcom_chunky's, lossy at the same tick, 0.33x float32's bytes against
  lilcom's 0.28x).

Both write to the same file system (tmpfs by default: `--work`), so the
disk is not the subject. The report gives each side's seconds (min, median,
max), the per-pair ratio and its median, and checks that the sets of cuts
hold the same features: every cut's `load_features()` from melforge and
from lhotse within lilcom's quantisation (2^-6 at its tick of 2^-5) plus
the Kaldi recipe's 1e-3, in bands within 1e-6 of the frame's loudest; for
the compact cuts, both quantisations (2 × 2^-6) plus 1e-3.

Usage: $(scripts/lhotse-venv) scripts/bench_lhotse.py --melforge target/release/melforge
       [--files 1500] [--pairs 5] [--work /dev/shm]
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

import hdf5plugin  # noqa: F401  (the compact cuts' Blosc filter, for lhotse's reader)
import numpy as np

LHOTSE_RUN = """
import sys
from lhotse import CutSet, Fbank, LilcomChunkyWriter
cuts = CutSet.from_file(sys.argv[1])
cuts = cuts.compute_and_store_features(extractor=Fbank(), storage_path=sys.argv[2],
                                       num_jobs=2, storage_type=LilcomChunkyWriter)
cuts.to_file(sys.argv[3])
"""


def sh(*args, **kw):
    return subprocess.run(args, check=True, **kw)


def timed(args, env=None):
    t = time.perf_counter()
    r = subprocess.run(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{args[0]} failed ({r.returncode}):\n{r.stderr[-4000:]}")
    return took


def same_features(ours, theirs):
    """The worst difference in loud bands between the two CutSets."""
    from lhotse import CutSet
    a = {c.id: c for c in CutSet.from_file(ours)}
    worst, n = 0.0, 0
    for c in CutSet.from_file(theirs):
        x, y = a[c.id].load_features(), c.load_features()
        if x.shape != y.shape:
            raise SystemExit(f"{c.id}: melforge {x.shape}, lhotse {y.shape}")
        loud = y >= y.max(axis=1, keepdims=True) + np.log(1e-6)
        worst = max(worst, float(np.abs(x - y)[loud].max(initial=0.0)))
        n += 1
    return worst, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--melforge", default="target/release/melforge")
    ap.add_argument("--files", type=int, default=1500)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--settle", type=float, default=2.0)
    ap.add_argument("--work", default="/dev/shm")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    melforge = os.path.abspath(a.melforge)
    work = tempfile.mkdtemp(prefix="melforge-bench-lhotse-", dir=a.work)
    try:
        sh(melforge, "synth", f"{work}/corpus", "--kind", "speech", "--files", str(a.files),
           stdout=subprocess.DEVNULL)
        from lhotse import CutSet, RecordingSet
        recs = RecordingSet.from_dir(f"{work}/corpus", "*.wav", num_jobs=2)
        cuts = CutSet.from_manifests(recordings=recs)
        cuts.to_file(f"{work}/cuts_train.jsonl.gz")
        hours = sum(c.duration for c in cuts) / 3600
        env = dict(os.environ, OMP_NUM_THREADS="1")
        with open(f"{work}/compact.toml", "w") as f:
            f.write('[output]\nstorage = "compact"\n')
        sides = ("lhotse", "melforge", "compact")
        times = {side: [] for side in sides}
        for i in range(a.pairs):
            for side in (sides if i % 2 == 0 else tuple(reversed(sides))):
                out = f"{work}/out-{side}"
                shutil.rmtree(out, ignore_errors=True)
                os.makedirs(out)
                time.sleep(a.settle)
                if side == "lhotse":
                    t = timed([sys.executable, "-c", LHOTSE_RUN, f"{work}/cuts_train.jsonl.gz",
                               f"{out}/feats", f"{out}/cuts.jsonl.gz"], env=env)
                else:
                    extra = ["--config", f"{work}/compact.toml"] if side == "compact" else []
                    t = timed([melforge, "build", f"{work}/cuts_train.jsonl.gz", "--recipe",
                               "lhotse-fbank", "--lhotse", "--out", out, "--progress", "none",
                               *extra])
                times[side].append(t)
        worst, n = same_features(f"{work}/out-melforge/cuts_train.cuts.jsonl.gz",
                                 f"{work}/out-lhotse/cuts.jsonl.gz")
        worst_c, n_c = same_features(f"{work}/out-compact/cuts_train.cuts.jsonl.gz",
                                     f"{work}/out-lhotse/cuts.jsonl.gz")
        ratios = [l / m for l, m in zip(times["lhotse"], times["melforge"])]
        ratios_c = [l / m for l, m in zip(times["lhotse"], times["compact"])]
        report = {
            "files": a.files, "hours": round(hours, 3), "pairs": a.pairs, "cores": os.cpu_count(),
            "lhotse_s": [round(t, 3) for t in times["lhotse"]],
            "melforge_s": [round(t, 3) for t in times["melforge"]],
            "compact_s": [round(t, 3) for t in times["compact"]],
            "ratio": [round(r, 2) for r in ratios],
            "ratio_median": round(statistics.median(ratios), 2),
            "ratio_compact": [round(r, 2) for r in ratios_c],
            "ratio_compact_median": round(statistics.median(ratios_c), 2),
            "cuts_compared": n, "worst_loud_band_difference": worst,
            "worst_loud_band_difference_compact": worst_c,
        }
        if a.json:
            print(json.dumps(report))
        else:
            for side in sides:
                t = times[side]
                print(f"{side:9s} {min(t):7.3f} s min, {statistics.median(t):7.3f} median, "
                      f"{max(t):7.3f} max  ({hours / statistics.median(t) * 60:.0f} h of audio "
                      f"a minute)")
            for name, r in (("melforge", ratios), ("compact", ratios_c)):
                print(f"ratio per pair, lhotse / {name}: {', '.join(f'{x:.1f}x' for x in r)}; "
                      f"median {statistics.median(r):.1f}x over {a.files} utterances "
                      f"({hours:.2f} h), {os.cpu_count()} cores")
            print(f"same features: {n} cuts, worst loud-band difference {worst:.4f} "
                  f"(lilcom's 2^-6 = 0.0156 plus the recipe's 1e-3); compact {n_c} cuts, "
                  f"{worst_c:.4f} (two quantisations, 0.0313, plus 1e-3)")
        if worst > 2 ** -6 + 1e-3:
            raise SystemExit("the two pipelines' features differ beyond lilcom's quantisation")
        if worst_c > 2 ** -5 + 1e-3:
            raise SystemExit("the compact features differ beyond the two quantisations")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
