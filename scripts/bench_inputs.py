#!/usr/bin/env python3
"""FLAC decode and resampling throughput: melforge against a Python peer.

Usage: bench_inputs.py MELFORGE_BIN WAV_CORPUS WORK [--files N] [--rounds R]

Converts the first N files (default 400) of a synthetic corpus (`melforge
synth`: 10 s int16 mono at 4096 Hz) into WORK/flac (FLAC at 4096 Hz, 16-bit,
soundfile) and WORK/wav44k (16-bit WAV at 44.1 kHz, soxr HQ), warms the page
cache, then runs in alternation, R rounds (default 3):

* `melforge build WORK/flac` (default config: decode only, no resampling) and
  `melforge build WORK/wav44k` with `[input] resample = "soxr_hq"` — the whole
  build: walk, read, decode, resample, log-mel, HDF5 write (the report's
  elapsed_s; process start-up excluded);
* the peer: for every file, what `librosa.load(path, sr=4096, mono=True)` does
  with soundfile + soxr + numpy (sf.read float32, mean of channels, soxr.resample
  quality "HQ", fix_length) — decoding and resampling only, no mel, no output
  (Python start-up and imports excluded).

Prints files/s per run and the medians as a markdown table.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr


def wavs(root):
    return sorted(p for p in Path(root).rglob("*") if p.suffix.lower() == ".wav")


def convert(src, work, n):
    files = wavs(src)[:n]
    flac, w44 = work / "flac", work / "wav44k"
    if len(list(flac.rglob("*.flac"))) == len(files) and len(wavs(w44)) == len(files):
        return len(files)
    for i, f in enumerate(files):
        rel = f.relative_to(src)
        y, sr = sf.read(str(f), dtype="float32")
        (flac / rel).parent.mkdir(parents=True, exist_ok=True)
        sf.write(str((flac / rel).with_suffix(".flac")), y, sr, subtype="PCM_16", format="FLAC")
        z = soxr.resample(y, sr, 44100, quality="HQ")
        (w44 / rel).parent.mkdir(parents=True, exist_ok=True)
        sf.write(str(w44 / rel), np.clip(z, -1, 1), 44100, subtype="PCM_16")
    return len(files)


def peer(root, target=4096):
    files = sorted(p for p in Path(root).rglob("*") if p.suffix.lower() in (".wav", ".flac"))
    t = time.perf_counter()
    total = 0.0
    for f in files:
        y, sr = sf.read(str(f), dtype="float32", always_2d=True)
        y = y.T
        y = np.mean(y, axis=0) if y.shape[0] > 1 else y[0]
        if sr != target:
            n = int(math.ceil(len(y) * target / sr))
            y = soxr.resample(y, sr, target, quality="HQ")
            y = np.pad(y[:n], (0, max(0, n - len(y))))
        total += float(y[0])
    return len(files) / (time.perf_counter() - t)


def melforge(binary, root, config, files):
    """files/s of one build: the report's elapsed_s (walk to last row
    written; process start-up excluded, as the peer's imports are)."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [binary, "build", str(root), "--out", out, "--json"]
        if config:
            cmd += ["--config", str(config)]
        r = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        report = json.loads(r.stdout)["report"]
        assert report["files_ok"] == files, report
        return files / report["elapsed_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("corpus", type=Path)
    ap.add_argument("work", type=Path)
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    n = convert(a.corpus, a.work, a.files)
    cfg = a.work / "soxr_hq.toml"
    cfg.write_text('[input]\nresample = "soxr_hq"\n')
    for d in ("flac", "wav44k"):
        for p in (a.work / d).rglob("*"):
            if p.is_file():
                p.read_bytes()
    runs = {k: [] for k in ("m_flac", "p_flac", "m_w44", "p_w44")}
    for r in range(a.rounds):
        runs["m_flac"].append(melforge(a.binary, a.work / "flac", None, n))
        runs["p_flac"].append(peer(a.work / "flac"))
        runs["m_w44"].append(melforge(a.binary, a.work / "wav44k", cfg, n))
        runs["p_w44"].append(peer(a.work / "wav44k"))
        print(f"round {r}: " + "  ".join(f"{k} {v[-1]:.0f}/s" for k, v in runs.items()), file=sys.stderr)
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(f"{n} clips of 10 s, {a.rounds} alternating rounds, {os.cpu_count()} CPUs; files/s, median")
    print()
    print("| input | melforge build (decode + resample + mel + HDF5) | peer: soundfile + soxr + numpy (decode + resample only) | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| FLAC 16-bit, 4096 Hz | {med['m_flac']:.0f} | {med['p_flac']:.0f} | {med['m_flac'] / med['p_flac']:.2f}× |")
    print(f"| WAV 16-bit, 44.1 kHz → 4096 Hz (soxr HQ) | {med['m_w44']:.0f} | {med['p_w44']:.0f} | {med['m_w44'] / med['p_w44']:.2f}× |")


if __name__ == "__main__":
    main()
