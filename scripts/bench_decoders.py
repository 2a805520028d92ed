#!/usr/bin/env python3
"""Decode speed per core: melforge against soundfile and ffmpeg, same files,
same run.

Builds a corpus of espeak-ng speech (about a minute per file, 16 kHz mono as
speech corpora ship it, and 48 kHz stereo), encoded by ffmpeg with
libmp3lame, libvorbis, libopus and aac (`--files` per codec and layout),
then times each on one core, in CPU time (a machine shared with other work
inflates wall time, not CPU time), the fastest of `--repeat` passes:

* melforge: `melforge bench decode DIR` (files in memory, one thread, the
  thread's CPU time);
* soundfile: `soundfile.read(path, dtype="float32")` for MP3, Vorbis, Opus
  (files in the page cache; this thread's CPU time, `time.thread_time`);
* ffmpeg: `ffmpeg -threads 1 -i FILE -f f32le -y /dev/null`, one process per
  file (the children's user + system time; its start, ~20 ms of CPU, is
  included: files are long so it weighs little).

Prints, per codec, times real time per core of each and melforge's ratio to
the fastest peer; `--json` writes the numbers too.

Usage: scripts/bench_decoders.py [--melforge target/release/melforge]
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import soundfile as sf

ENCODER = {"mp3": "libmp3lame", "ogg": "libvorbis", "opus": "libopus", "m4a": "aac"}
CODEC_OF = {"mp3": "mp3", "ogg": "vorbis", "opus": "opus", "m4a": "aac"}
SENTENCES = [
    "Speech corpora ship as compressed audio in many containers.",
    "Decoding is where users say the time goes, so it is measured per core.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Numbers like four hundred and twenty seven are read out one by one.",
]


def sh(*args, **kw):
    return subprocess.run(args, check=True, **kw)


def corpus(work, files):
    """DIR/<layout>/<n>.<ext>; returns {ext: [paths]} and audio seconds per path."""
    paths = {ext: [] for ext in ENCODER}
    for i in range(files):
        text = " ".join(SENTENCES[(i + k) % len(SENTENCES)] for k in range(12))
        sh("espeak-ng", "-s", str(150 + 10 * i), "-w", f"{work}/src{i}.wav", text)
        for layout, opts in [("mono16k", ["-r", "16000"]), ("stereo48k", ["-r", "48000", "-c", "2"])]:
            wav = f"{work}/{layout}{i}.wav"
            sh("sox", f"{work}/src{i}.wav", *opts, wav)
            os.makedirs(f"{work}/corpus/{layout}", exist_ok=True)
            for ext, enc in ENCODER.items():
                out = f"{work}/corpus/{layout}/{i}.{ext}"
                sh("ffmpeg", "-v", "error", "-y", "-i", wav, "-c:a", enc, out)
                paths[ext].append(out)
    return paths


def audio_seconds(path):
    probe = sh("ffprobe", "-v", "error", "-show_entries", "format=duration", "-of",
               "csv=p=0", path, capture_output=True, text=True).stdout
    return float(probe.strip())


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def best_of(repeat, fn, clock):
    best = float("inf")
    for _ in range(repeat):
        t = clock()
        fn()
        best = min(best, clock() - t)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--melforge", default="target/release/melforge")
    ap.add_argument("--files", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="also write the numbers to this file")
    args = ap.parse_args()
    melforge = os.path.abspath(args.melforge)
    results = {}
    with tempfile.TemporaryDirectory() as work:
        paths = corpus(work, args.files)
        report = json.loads(sh(melforge, "bench", "decode", f"{work}/corpus", "--repeat",
                               str(args.repeat), "--json", capture_output=True,
                               text=True).stdout)
        ours = {c["codec"]: c for c in report["codecs"]}
        for ext, files in paths.items():
            audio = sum(audio_seconds(p) for p in files)
            mb = sum(os.path.getsize(p) for p in files) / 1e6
            row = {"files": len(files), "input_mb": mb, "audio_s": audio,
                   "melforge": ours[CODEC_OF[ext]]["x_realtime"]}
            if ext != "m4a":  # libsndfile reads no MP4
                row["soundfile"] = audio / best_of(args.repeat, lambda: [
                    sf.read(p, dtype="float32") for p in files], time.thread_time)
            row["ffmpeg"] = audio / best_of(args.repeat, lambda: [
                sh("ffmpeg", "-v", "error", "-threads", "1", "-i", p, "-f", "f32le", "-y",
                   "/dev/null") for p in files], children_cpu)
            peers = [row[k] for k in ("soundfile", "ffmpeg") if k in row]
            row["ratio_to_fastest_peer"] = row["melforge"] / max(peers)
            results[ext] = row
    print(f"{'codec':<6} {'files':>5} {'audio s':>8} {'melforge':>9} {'soundfile':>9} "
          f"{'ffmpeg':>8} {'ratio':>6}   (x real time per CPU second)")
    for ext, r in results.items():
        sfv = f"{r['soundfile']:.0f}" if "soundfile" in r else "-"
        print(f"{ext:<6} {r['files']:>5} {r['audio_s']:>8.0f} {r['melforge']:>9.0f} {sfv:>9} "
              f"{r['ffmpeg']:>8.0f} {r['ratio_to_fastest_peer']:>6.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
