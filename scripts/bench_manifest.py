#!/usr/bin/env python3
"""Segments of long recordings: the bytes a manifest build reads against the
bytes of its segments, and segments per second.

Writes one 16 kHz mono 16-bit recording of HOURS hours (default 2; a
deterministic mix of tones and noise, so FLAC cannot shrink it to nothing)
as a WAV, with sox (which writes a SEEKTABLE with a point every 10 s) as a
FLAC, with ffmpeg (which writes none: the planner searches the frames) as a
second FLAC, and with ffmpeg as an MP3 (libmp3lame 32 kb/s), an Ogg Opus
(libopus 24 kb/s), an M4A (aac 32 kb/s with `-aac_pns 0`, "m4a-nopns": no
band coded as perceptual noise, so every segment gets a part) and an M4A
(ffmpeg's default `aac` encoder and bit rate, "m4a": PNS from the first
access unit on, so its segments are spilled: decoded once);
cuts it into N segments (default 1,000) of equal length with
offsets and durations at microsecond resolution, in a shuffled line order
(seeded), one NeMo manifest per container; builds each with
`recipe = "kaldi-fbank"` (80 bins) and reports from the build's JSON report:

* bytes read by the readers (`report.bytes_read`), against the bytes of the
  segments' samples (frames x 2), against the segments' share of the file's
  own bytes (for the compressed ones) and against reading the whole
  recording once per segment (what a build without ranges reads);
* the planner's header and seek-index reads (logged, one per recording),
  which include the recordings it reads whole to decode once into a spill
  (an M4A with PNS: `source::manifest::spill`), the segments it gave a byte
  range of the recording ("ranged"), its time, and the spill's bytes
  written;
* segments per second (`report.elapsed_s`, planning included; process
  start-up excluded) and the build's wall time.

With `--io-engine std` the readers use plain reads (a segment: one `pread`)
instead of io_uring. `--containers` picks the rows (default all);
`--spill-max-mib 0` turns the spill off (each M4A segment is then decoded
from the recording's start, as before the spill). A WAV already in WORK
with the right length is reused.

Usage: bench_manifest.py MELFORGE_BIN WORK [--hours H] [--segments N] [--seed S]
                         [--io-engine uring|std] [--containers wav,flac,...]
                         [--spill-max-mib M]
Prints a markdown table for docs/BENCHMARKS.md.
"""

import argparse
import json
import os
import random
import subprocess
import time

import numpy as np
import soundfile as sf

RATE = 16000
CONFIG = '[features]\nrecipe = "kaldi-fbank"\nnum_mel_bins = 80\n'


def recording(path, hours, seed):
    """Writes the WAV in blocks of a minute (the whole would be 460 MB of float64)."""
    rng = np.random.default_rng(seed)
    n = int(hours * 3600 * RATE)
    with sf.SoundFile(path, "w", RATE, 1, subtype="PCM_16", format="WAV") as f:
        for start in range(0, n, 60 * RATE):
            t = np.arange(start, min(n, start + 60 * RATE)) / RATE
            y = 0.3 * np.sin(2 * np.pi * (220 + 40 * np.sin(t / 7)) * t) + 0.05 * rng.standard_normal(len(t))
            f.write(y.astype(np.float32))
    return n


def manifest(path, audio, n, segments, seed):
    """N equal segments, shuffled; returns the bytes of their samples."""
    rng = random.Random(seed)
    seg_s = n / RATE / segments
    lines, total = [], 0
    for i in range(segments):
        offset = round(i * seg_s, 6)
        duration = round(seg_s, 6)
        frames = min(int((offset + duration) * RATE), n) - int(offset * RATE)
        total += 2 * frames
        lines.append(json.dumps({"audio_filepath": audio, "offset": offset, "duration": duration,
                                 "text": f"segment {i}"}))
    rng.shuffle(lines)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return total


def build(melforge, work, name):
    out = f"{work}/out-{name}"
    subprocess.run(["rm", "-rf", out], check=True)
    t = time.perf_counter()
    done = subprocess.run([melforge, "build", f"{work}/{name}.jsonl", "--out", out, "--config",
                           f"{work}/c.toml", "--json", "--progress", "none"],
                          check=True, capture_output=True, text=True,
                          env=dict(os.environ, RUST_LOG="info", NO_COLOR="1"))
    wall = time.perf_counter() - t
    doc = json.loads(done.stdout)
    header = spill = ranged = 0
    plan_s = 0.0
    for line in done.stderr.splitlines():
        if "header_bytes=" in line:
            header = int(line.split("header_bytes=")[1].split()[0])
            ranged = int(line.split("ranged=")[1].split()[0])
            plan_s = float(line.split("seconds=")[1].split()[0])
        if "spill_bytes=" in line:
            spill = int(line.split("spill_bytes=")[1].split()[0])
    return doc, wall, header, ranged, plan_s, spill


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("melforge")
    ap.add_argument("work")
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--segments", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=32)
    ap.add_argument("--io-engine", default="uring", choices=["uring", "std"])
    ap.add_argument("--containers", "--only",
                    default="wav,flac,flac-no-seektable,mp3,opus,m4a-nopns,m4a",
                    help="the containers to build, comma-separated")
    ap.add_argument("--spill-max-mib", type=int, default=None)
    a = ap.parse_args()
    want = a.containers.split(",")
    os.makedirs(a.work, exist_ok=True)
    wav, flac = f"{a.work}/long.wav", f"{a.work}/long.flac"
    ff = f"{a.work}/long-ffmpeg.flac"
    n = int(a.hours * 3600 * RATE)
    if not (os.path.exists(wav) and os.path.getsize(wav) == 44 + 2 * n):
        recording(wav, a.hours, a.seed)
    if "flac" in want:
        subprocess.run(["sox", wav, flac], check=True)
    if "flac-no-seektable" in want:
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", wav, ff], check=True)
    with open(f"{a.work}/c.toml", "w") as f:
        f.write(CONFIG + f'[io]\nengine = "{a.io_engine}"\n')
        if a.spill_max_mib is not None:
            f.write(f"[input]\nspill_max_mib = {a.spill_max_mib}\n")
    encoded = []
    for name, ext, args in (("mp3", "mp3", ["-c:a", "libmp3lame", "-b:a", "32k"]),
                            ("opus", "opus", ["-c:a", "libopus", "-b:a", "24k"]),
                            ("m4a-nopns", "nopns.m4a",
                             ["-c:a", "aac", "-aac_pns", "0", "-b:a", "32k"]),
                            ("m4a", "m4a", ["-c:a", "aac"])):
        path = f"{a.work}/long.{ext}"
        if name in want:
            subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", wav, *args, path], check=True)
        encoded.append((name, path))
    rows = []
    for name, audio in (("wav", wav), ("flac", flac), ("flac-no-seektable", ff), *encoded):
        if name not in want:
            continue
        seg_bytes = manifest(f"{a.work}/{name}.jsonl", audio, n, a.segments, a.seed)
        doc, wall, header, ranged, plan_s, spill = build(os.path.abspath(a.melforge), a.work,
                                                         name)
        r = doc["report"]
        size = os.path.getsize(audio)
        rows.append((name, size, seg_bytes, r["bytes_read"], header, ranged, plan_s, spill,
                     r["files_ok"], len(doc["rejected"]), r["elapsed_s"], wall))
    print(f"{a.hours:g} h at {RATE} Hz mono 16-bit, {a.segments} segments of "
          f"{a.hours * 3600 / a.segments:.2f} s, kaldi-fbank 80 bins, io.engine {a.io_engine}"
          f", spill_max_mib {a.spill_max_mib if a.spill_max_mib is not None else 'default'}\n")
    print("| container | file MB | segment MB | read MB | read / segments | read / file | "
          "whole file per segment, MB | header KB | ranged | plan s | spill MB | rows | rejected "
          "| elapsed s | wall s | segments/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, size, seg, read, header, ranged, plan_s, spill, ok, rej, el, wall in rows:
        print(f"| {name} | {size / 1e6:.1f} | {seg / 1e6:.1f} | {read / 1e6:.1f} | {read / seg:.3f} "
              f"| {read / size:.3f} | {size * a.segments / 1e6:,.0f} | {header / 1e3:.1f} | {ranged} "
              f"| {plan_s:.2f} | {spill / 1e6:.1f} | {ok} | {rej} | {el:.1f} | {wall:.1f} "
              f"| {ok / el:.0f} |")


if __name__ == "__main__":
    main()
