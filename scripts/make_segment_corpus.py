#!/usr/bin/env python3
"""Segments of long recordings, stored three ways: NeMo tarred audio, loose files, M4A.

Usage: make_segment_corpus.py OUT_DIR [--recordings 16] [--seconds 120]
                              [--segment-s 5] [--m4a 8] [--seed 5]

The planner's work on segments (where a segment lies in its recording, and
the spill of recordings that cannot be cut into parts) is measured on this
corpus, written with soundfile, tarfile and ffmpeg:

* `OUT_DIR/rec/rNN.flac`: N recordings of S seconds at 16 kHz, 16-bit FLAC
  (soundfile writes no SEEKTABLE, so a segment's frames are searched for);
* `OUT_DIR/audio_{0..1}.tar`: the same FLAC bytes as NeMo tarred audio, two
  shards, and `OUT_DIR/tarred_manifest.json`, a NeMo manifest of every
  recording cut into segments of `--segment-s` (`audio_filepath` the member
  name, `shard_id`);
* `OUT_DIR/loose_manifest.json`: the same segments of the loose files;
* `OUT_DIR/m4a/sK.m4a` and `OUT_DIR/m4a_manifest.json`: M AAC recordings of
  60 s of pink noise (ffmpeg's `aac`, which codes noise bands as PNS, so
  most segments have no part and the recording is spilled), 12 segments
  each;
* `OUT_DIR/kaldi.toml`: the config the benchmark builds with (kaldi-fbank,
  80 bins).

Build each with `melforge build MANIFEST [--tarred-audio
'OUT_DIR/audio_{0..1}.tar'] --out OUT --config OUT_DIR/kaldi.toml`.
"""

import argparse
import json
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import soundfile as sf


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--recordings", type=int, default=16)
    ap.add_argument("--seconds", type=int, default=120)
    ap.add_argument("--segment-s", type=float, default=5.0)
    ap.add_argument("--m4a", type=int, default=8)
    ap.add_argument("--seed", type=int, default=5)
    a = ap.parse_args()
    out: Path = a.out
    (out / "rec").mkdir(parents=True, exist_ok=True)
    (out / "m4a").mkdir(exist_ok=True)
    rng = np.random.default_rng(a.seed)
    names = []
    for i in range(a.recordings):
        t = np.arange(a.seconds * 16000) / 16000
        x = 0.3 * np.sin(2 * np.pi * (200 + 20 * i) * t) + 0.05 * rng.standard_normal(t.size)
        name = f"r{i:02d}.flac"
        sf.write(out / "rec" / name, x.astype(np.float32), 16000, subtype="PCM_16")
        names.append(name)
    per_shard = (len(names) + 1) // 2
    for s in range(2):
        with tarfile.open(out / f"audio_{s}.tar", "w") as tf:
            for name in names[s * per_shard:(s + 1) * per_shard]:
                tf.add(out / "rec" / name, arcname=name)
    segments = int(a.seconds // a.segment_s)
    with open(out / "tarred_manifest.json", "w") as tarred, \
            open(out / "loose_manifest.json", "w") as loose:
        for i, name in enumerate(names):
            for k in range(segments):
                seg = {"offset": a.segment_s * k, "duration": a.segment_s}
                tarred.write(json.dumps(
                    {"audio_filepath": name, **seg, "shard_id": i // per_shard}) + "\n")
                loose.write(json.dumps({"audio_filepath": f"rec/{name}", **seg}) + "\n")
    with open(out / "m4a_manifest.json", "w") as m:
        for i in range(a.m4a):
            name = f"m4a/s{i}.m4a"
            subprocess.run(
                ["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                 f"anoisesrc=d=60:c=pink:r=16000:a=0.2:seed={i}", "-c:a", "aac",
                 "-b:a", "64k", str(out / name)],
                check=True)
            for k in range(12):
                m.write(json.dumps({"audio_filepath": name, "offset": 5.0 * k,
                                    "duration": 5.0}) + "\n")
    (out / "kaldi.toml").write_text('[features]\nrecipe = "kaldi-fbank"\nnum_mel_bins = 80\n')


if __name__ == "__main__":
    main()
