#!/usr/bin/env python3
"""What a user writes instead of melforge for Kaldi fbank or Whisper features.

Usage: peer_recipes.py INPUT OUT --recipe kaldi-fbank|whisper [--bins 80]
                       [--processes N] [--json]

The script a careful user writes with the reference extractors: walk INPUT for
*.wav (sorted), a `multiprocessing.Pool(N)` (default: every core) where each
task reads one file with soundfile and computes its features, and the parent
writes them with h5py as they come back (in order, `imap` with a chunksize):

* kaldi-fbank: kaldi-native-fbank's `OnlineFbank` (dither 0, `num_bins`
  bins, every other option at its default, the waveform in [-1, 1] as
  torchaudio and lhotse give it), all frames at once; rows stored as one
  `features` (total_frames, bins) float32 dataset with `offsets`, the layout
  melforge writes, so both write the same bytes;
* whisper: transformers' `WhisperFeatureExtractor(feature_size=bins)`, the
  `input_features[0]` of each utterance, (bins, 3000) float32 per row: the
  padded layout Whisper caches are stored in.

Prints files/s, hours of audio per minute and elapsed seconds (interpreter
start-up and imports excluded; the walk, reads, compute and writes included);
`--json` prints one JSON line instead.
"""

import argparse
import json
import os
import sys
import time
from multiprocessing import Pool

import h5py
import numpy as np
import soundfile as sf

_EXTRACT = None


def _init(recipe, bins):
    global _EXTRACT
    if recipe == "kaldi-fbank":
        import kaldi_native_fbank as knf

        opts = knf.FbankOptions()
        opts.frame_opts.dither = 0.0
        opts.mel_opts.num_bins = bins

        def extract(x, rate):
            f = knf.OnlineFbank(opts)
            f.accept_waveform(rate, x)
            f.input_finished()
            n = f.num_frames_ready
            return np.stack([f.get_frame(i) for i in range(n)]) if n else np.zeros((0, bins), np.float32)

    else:
        from transformers import WhisperFeatureExtractor

        fe = WhisperFeatureExtractor(feature_size=bins)

        def extract(x, rate):
            return fe(x, sampling_rate=rate, return_tensors="np")["input_features"][0]

    _EXTRACT = extract


def _one(path):
    x, rate = sf.read(path, dtype="float32", always_2d=True)
    x = x.mean(axis=1) if x.shape[1] > 1 else x[:, 0]
    return len(x) / rate, np.asarray(_EXTRACT(x, rate), dtype=np.float32)


def walk(root):
    out = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        out += [os.path.join(d, f) for f in sorted(files) if f.lower().endswith(".wav")]
    return sorted(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input")
    ap.add_argument("out")
    ap.add_argument("--recipe", choices=["kaldi-fbank", "whisper"], required=True)
    ap.add_argument("--bins", type=int, default=80)
    ap.add_argument("--processes", type=int, default=os.cpu_count())
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    t0 = time.perf_counter()
    paths = walk(a.input)
    os.makedirs(a.out, exist_ok=True)
    audio_s = 0.0
    with Pool(a.processes, initializer=_init, initargs=(a.recipe, a.bins)) as pool, h5py.File(
        os.path.join(a.out, "peer.h5"), "w"
    ) as h5:
        if a.recipe == "kaldi-fbank":
            feats = h5.create_dataset("features", (0, a.bins), "f4", maxshape=(None, a.bins), chunks=(1024, a.bins))
            offsets = [0]
        else:
            feats = h5.create_dataset("features", (0, a.bins, 3000), "f4", maxshape=(None, a.bins, 3000), chunks=(1, a.bins, 3000))
        for seconds, f in pool.imap(_one, paths, chunksize=4):
            audio_s += seconds
            n = feats.shape[0]
            feats.resize(n + (f.shape[0] if a.recipe == "kaldi-fbank" else 1), axis=0)
            feats[n:] = f if a.recipe == "kaldi-fbank" else f[None]
            if a.recipe == "kaldi-fbank":
                offsets.append(n + f.shape[0])
        if a.recipe == "kaldi-fbank":
            h5.create_dataset("offsets", data=np.asarray(offsets, np.int64))
        h5.create_dataset("path", data=[os.path.relpath(p, a.input) for p in paths], dtype=h5py.string_dtype())
    elapsed = time.perf_counter() - t0
    size = os.path.getsize(os.path.join(a.out, "peer.h5"))
    res = {
        "recipe": a.recipe,
        "files": len(paths),
        "elapsed_s": elapsed,
        "files_per_s": len(paths) / elapsed,
        "audio_hours_per_min": audio_s / 3600 / (elapsed / 60),
        "bytes": size,
        "processes": a.processes,
    }
    if a.json:
        print(json.dumps(res))
    else:
        print(
            f"peer {a.recipe}: {len(paths)} files in {elapsed:.2f} s = {res['files_per_s']:.1f} files/s, "
            f"{res['audio_hours_per_min']:.2f} h of audio per minute, {size / 1e6:.1f} MB stored"
        )


if __name__ == "__main__":
    sys.exit(main())
