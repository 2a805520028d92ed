#!/usr/bin/env python3
"""Stored inputs: melforge on WebDataset shards and parquet against the same
audio as a tree, and against the Python peer on the shards.

Usage: bench_stored.py --melforge BIN --corpus DIR [--reps 3] [--peer-workers 2]
                       [--settle 2] [--lanes tree,wds,parquet,peer]
                       [--melforge-workers N] [--work /dev/shm/...] [--json FILE]

DIR is a corpus from scripts/make_stored_corpus.py (its corpus.json names the
inputs): the same FLAC utterances as a tree, as WebDataset tar shards and as
Hugging Face parquet files. The lanes, all under `recipe = "kaldi-fbank"`
with 80 bins:

* tree: `melforge build DIR/tree`;
* wds: `melforge build 'DIR/wds/train-{000000..000063}.tar'` (the brace
  range as one argument: melforge expands it);
* parquet: `melforge build 'DIR/parquet/train-*.parquet'` (the glob as one
  argument);
* peer: scripts/peer_webdataset.py on the shards: `multiprocessing.Pool(W)`
  of webdataset + soundfile + kaldi-native-fbank workers, h5py writing.

The inputs are read once first (page cache warm), and every build writes to
a tmpfs (`--work`, default under /dev/shm), removed after each run: the disk
is not the subject. Runs alternate: every repetition runs each lane once, in
the lanes' order on even repetitions and reversed on odd ones (ABCD DCBA
...), so no lane always follows the same one, with `--settle` seconds of
rest between runs.

Per lane: the median wall seconds (process start to exit, as a user waits;
a melforge run's own `report.elapsed_s` and the peer's in-process time
beside it), rows (files/s = rows / median wall), the bytes read and the
input's size on disk with their ratio (melforge: `report.bytes_read`, what
its readers read, plus `planned.bytes_read`, what the planner read of
headers, 0 while the report has no `planned`; the peer: its workers'
`rchar`), and the ratios shards / tree and parquet / tree (wall time),
melforge shards / peer. A lane whose first run fails is reported and
dropped; the others go on.

Prints a markdown table for docs/BENCHMARKS.md; `--json FILE` writes every
run and the summary.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_stored_corpus import du, load_corpus  # noqa: E402

CONFIG = '[features]\nrecipe = "kaldi-fbank"\nnum_mel_bins = 80\n'
LANES = ("tree", "wds", "parquet", "peer")
HERE = os.path.dirname(os.path.abspath(__file__))


def warm(corpus):
    """Reads every input file once, so each lane starts from the page cache."""
    for sub in ("tree", "wds", "parquet"):
        for root, _, files in os.walk(os.path.join(corpus, sub)):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    while f.read(1 << 20):
                        pass


def melforge_run(binary, source, out, config):
    """One build; returns the run's record (raises RuntimeError on failure)."""
    cmd = [binary, "build", source, "--out", out, "--config", config, "--json", "--progress", "none"]
    t = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, NO_COLOR="1"))
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {' '.join(cmd)}\n{done.stderr[-2000:]}")
    doc = json.loads(done.stdout)
    r = doc["report"]
    planned = (doc.get("planned") or {}).get("bytes_read", 0)
    return {"wall_s": wall, "elapsed_s": r["elapsed_s"], "rows": r["files_ok"],
            "rejected": r.get("files_rejected", len(doc.get("rejected", []))),
            "bytes_read": r["bytes_read"] + planned, "reader_bytes": r["bytes_read"],
            "planned_bytes": planned}


def peer_run(shards, out, workers):
    cmd = [sys.executable, os.path.join(HERE, "peer_webdataset.py"), *shards, "--out",
           os.path.join(out, "peer.h5"), "--workers", str(workers), "--json"]
    os.makedirs(out, exist_ok=True)
    t = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: peer_webdataset.py\n{done.stderr[-2000:]}")
    res = json.loads(done.stdout.strip().splitlines()[-1])
    return {"wall_s": wall, "elapsed_s": res["elapsed_s"], "rows": res["files"], "rejected": 0,
            "bytes_read": res["bytes_read"]}


def median(runs, key):
    return statistics.median(r[key] for r in runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--melforge", required=True, help="the melforge binary")
    ap.add_argument("--corpus", required=True, help="a scripts/make_stored_corpus.py directory")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--peer-workers", type=int, default=2)
    ap.add_argument("--melforge-workers", type=int, default=None,
                    help="compute.workers for melforge (default: its own, one per core)")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds of rest between runs")
    ap.add_argument("--lanes", default=",".join(LANES), help="comma-separated, of " + ", ".join(LANES))
    ap.add_argument("--work", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                    help="where the builds write (a tmpfs; a fresh folder is made in it)")
    ap.add_argument("--json", dest="json_out", help="write every run and the summary here")
    a = ap.parse_args()
    lanes = [x for x in a.lanes.split(",") if x]
    if bad := [x for x in lanes if x not in LANES]:
        ap.error(f"unknown lanes {bad}")
    binary = os.path.abspath(a.melforge)
    corpus = os.path.abspath(a.corpus)
    doc = load_corpus(corpus)
    shards = [os.path.join(corpus, "wds", s) for s in doc["shards"]]
    source = {k: os.path.join(corpus, v) for k, v in doc["inputs"].items()}
    size = {"tree": du(source["tree"]), "wds": du(os.path.join(corpus, "wds")),
            "parquet": du(os.path.join(corpus, "parquet"))}
    size["peer"] = size["wds"]
    work = tempfile.mkdtemp(prefix="melforge-bench-stored-", dir=a.work)
    config = os.path.join(work, "kaldi.toml")
    with open(config, "w") as f:
        f.write(CONFIG)
        if a.melforge_workers is not None:
            f.write(f"\n[compute]\nworkers = {a.melforge_workers}\n")
    warm(corpus)
    runs = {lane: [] for lane in lanes}
    failed = {}
    try:
        for rep in range(a.reps):
            order = lanes if rep % 2 == 0 else lanes[::-1]
            for lane in order:
                if lane in failed:
                    continue
                out = os.path.join(work, f"out-{lane}")
                shutil.rmtree(out, ignore_errors=True)
                try:
                    if lane == "peer":
                        r = peer_run(shards, out, a.peer_workers)
                    else:
                        r = melforge_run(binary, source[lane], out, config)
                except (RuntimeError, json.JSONDecodeError, KeyError) as e:
                    failed[lane] = str(e)
                    print(f"bench_stored: lane {lane} failed, dropped: {e}", file=sys.stderr)
                    continue
                finally:
                    shutil.rmtree(out, ignore_errors=True)
                r["rep"] = rep
                runs[lane].append(r)
                print(f"rep {rep} {lane}: {r['wall_s']:.2f} s wall, {r['rows']} rows",
                      file=sys.stderr)
                time.sleep(a.settle)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    summary = {}
    for lane in lanes:
        if not runs[lane]:
            continue
        wall = median(runs[lane], "wall_s")
        rows = runs[lane][0]["rows"]
        summary[lane] = {
            "wall_s": wall, "elapsed_s": median(runs[lane], "elapsed_s"), "rows": rows,
            "rejected": runs[lane][0]["rejected"], "files_per_s": rows / wall,
            "bytes_read": median(runs[lane], "bytes_read"), "size_bytes": size[lane],
            "read_over_size": median(runs[lane], "bytes_read") / size[lane],
        }
    ratios = {}
    for name, num, den in (("wds_over_tree", "wds", "tree"), ("parquet_over_tree", "parquet", "tree"),
                           ("wds_over_peer", "wds", "peer"), ("parquet_over_peer", "parquet", "peer")):
        if num in summary and den in summary:
            ratios[name] = summary[num]["wall_s"] / summary[den]["wall_s"]

    hours = doc["audio_seconds"] / 3600
    print(f"{doc['utterances']} utterances ({hours:.2f} h, 16 kHz FLAC), {len(doc['shards'])} "
          f"shards, {len(doc['parquet_files'])} parquet files; kaldi-fbank 80 bins; medians of "
          f"{a.reps} alternating runs; peer: {a.peer_workers} workers; melforge compute.workers "
          f"{a.melforge_workers if a.melforge_workers is not None else 'default'}; "
          f"{os.cpu_count()} CPUs\n")
    print("| input | rows | wall s | in-process s | files/s | on disk MB | read MB | read / size "
          "| wall / tree |")
    print("|---|---|---|---|---|---|---|---|---|")
    names = {"tree": "melforge, tree", "wds": "melforge, WebDataset shards",
             "parquet": "melforge, parquet", "peer": f"peer ({a.peer_workers} workers), shards"}
    for lane, s in summary.items():
        vs = f"{s['wall_s'] / summary['tree']['wall_s']:.2f}" if "tree" in summary else "-"
        rows = f"{s['rows']}" + (f" ({s['rejected']} rejected)" if s["rejected"] else "")
        print(f"| {names[lane]} | {rows} | {s['wall_s']:.2f} | {s['elapsed_s']:.2f} "
              f"| {s['files_per_s']:.0f} | {s['size_bytes'] / 1e6:.1f} | {s['bytes_read'] / 1e6:.1f} "
              f"| {s['read_over_size']:.3f} | {vs} |")
    print()
    for name, v in ratios.items():
        print(f"* {name.replace('_over_', ' / ')} (wall time): {v:.3f}")
    for lane, why in failed.items():
        print(f"* lane {lane} failed: {why.splitlines()[0]}")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"corpus": {k: v for k, v in doc.items() if k != "samples"},
                       "reps": a.reps, "peer_workers": a.peer_workers,
                       "melforge_workers": a.melforge_workers, "runs": runs,
                       "summary": summary, "ratios": ratios, "failed": failed}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
