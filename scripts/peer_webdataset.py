#!/usr/bin/env python3
"""What a user writes instead of melforge for Kaldi fbank from WebDataset shards.

Usage: peer_webdataset.py SHARD... --out OUT.h5 [--workers 2] [--bins 80] [--json]

The script a careful user writes with the reference tools: a
`multiprocessing.Pool(W)` whose workers each take a shard at a time
(`imap`, in shard order) and iterate it with `webdataset.WebDataset(url,
shardshuffle=False)` (raw bytes, no decoder), decode each sample's audio
member (`flac`, else `wav`, `mp3`, `ogg`, `opus`) with soundfile (channels
averaged), and compute kaldi-native-fbank's `OnlineFbank` with the options
melforge's `recipe = "kaldi-fbank"` uses for `num_mel_bins = BINS` (its
torchaudio defaults, dither 0: scripts/parity_recipes.py's `knf_options`);
the parent writes each shard's rows with h5py as they come back, in
melforge's frames layout: `features` (total_frames, bins) float32 with
`offsets` and `lengths`, plus `path` (`<shard file name>/<member>`) and
`meta` (a JSON object per row: `shard`, `key`, and `json` / `txt` / `cls`
from the sample's siblings), so both write the same kind of file.

Prints files/s and elapsed seconds (interpreter start-up and imports
excluded; pool start-up, reads, decode, compute and writes included) and the
bytes the workers read (their `read` calls while iterating, /proc/self/io
`rchar`); `--json` prints one JSON line instead. A sample the worker cannot
use (no audio member, an undecodable one, a rate other than 16 kHz) stops
the run: the peer is the happy path a user writes, not a validator.
"""

import argparse
import io
import json
import os
import sys
import time
from multiprocessing import Pool

import h5py
import numpy as np
import soundfile as sf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parity_recipes import KALDI_DEFAULTS, knf_options  # noqa: E402

AUDIO = ("flac", "wav", "mp3", "ogg", "opus")
_OPTS = None


def _init(bins):
    global _OPTS
    _OPTS = knf_options("kaldi-fbank", {"num_mel_bins": bins})


def rchar():
    """Bytes this process has read with read-like calls (page cache or not)."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    return 0


def fbank(x, rate):
    import kaldi_native_fbank as knf

    if rate != KALDI_DEFAULTS["sample_frequency"]:
        raise ValueError(f"{rate} Hz: the recipe computes at 16000 Hz (no resampling here)")
    f = knf.OnlineFbank(_OPTS)
    f.accept_waveform(rate, x)
    f.input_finished()
    n = f.num_frames_ready
    if n == 0:
        return np.zeros((0, _OPTS.mel_opts.num_bins), np.float32)
    return np.stack([f.get_frame(i) for i in range(n)]).astype(np.float32, copy=False)


def one_shard(url):
    """[(path, meta, features)] of one shard, bytes read, seconds of audio."""
    import webdataset as wds

    shard = os.path.basename(url)
    before = rchar()
    rows, seconds = [], 0.0
    for s in wds.WebDataset(url, shardshuffle=False, empty_check=False):
        key = s["__key__"]
        ext = next((e for e in AUDIO if e in s), None)
        if ext is None:
            raise ValueError(f"{shard}: sample {key} has no audio member")
        x, rate = sf.read(io.BytesIO(s[ext]), dtype="float32", always_2d=True)
        x = x.mean(axis=1) if x.shape[1] > 1 else x[:, 0]
        seconds += len(x) / rate
        meta = {"shard": shard, "key": key}
        if "json" in s:
            meta["json"] = json.loads(s["json"])
        if "txt" in s:
            meta["txt"] = s["txt"].decode("utf-8")
        if "cls" in s:
            meta["cls"] = int(s["cls"])
        rows.append((f"{shard}/{key}.{ext}", json.dumps(meta, ensure_ascii=False), fbank(x, rate)))
    return rows, rchar() - before, seconds


def run(urls, out, workers, bins):
    """Builds OUT from the shards; returns the result document."""
    t0 = time.perf_counter()
    files, read, seconds = 0, 0, 0.0
    with Pool(workers, initializer=_init, initargs=(bins,)) as pool, h5py.File(out, "w") as h5:
        feats = h5.create_dataset("features", (0, bins), "f4", maxshape=(None, bins),
                                  chunks=(3276, bins))
        offsets, lengths, paths, metas = [], [], [], []
        for rows, nread, secs in pool.imap(one_shard, urls, chunksize=1):
            read += nread
            seconds += secs
            n = feats.shape[0]
            add = sum(len(f) for _, _, f in rows)
            feats.resize(n + add, axis=0)
            if add:
                feats[n:] = np.concatenate([f for _, _, f in rows])
            for path, meta, f in rows:
                offsets.append(n)
                lengths.append(len(f))
                paths.append(path)
                metas.append(meta)
                n += len(f)
            files += len(rows)
        h5.create_dataset("offsets", data=np.asarray(offsets, np.int64))
        h5.create_dataset("lengths", data=np.asarray(lengths, np.int32))
        h5.create_dataset("path", data=paths, dtype=h5py.string_dtype())
        h5.create_dataset("meta", data=metas, dtype=h5py.string_dtype())
        h5.attrs["layout"] = "frames"
        h5.attrs["recipe"] = "kaldi-fbank"
    elapsed = time.perf_counter() - t0
    return {
        "files": files,
        "elapsed_s": elapsed,
        "files_per_s": files / elapsed,
        "audio_seconds": seconds,
        "bytes_read": read,
        "input_bytes": sum(os.path.getsize(u) for u in urls),
        "out_bytes": os.path.getsize(out),
        "workers": workers,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("shards", nargs="+", help="tar shards, in order")
    ap.add_argument("--out", required=True, help="the HDF5 file to write")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--bins", type=int, default=80)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    res = run(a.shards, a.out, a.workers, a.bins)
    if a.json:
        print(json.dumps(res))
    else:
        print(f"peer (webdataset + soundfile + kaldi-native-fbank, {a.workers} workers): "
              f"{res['files']} files in {res['elapsed_s']:.2f} s = {res['files_per_s']:.1f} files/s, "
              f"{res['audio_seconds'] / 3600 / (res['elapsed_s'] / 60):.2f} h of audio per minute, "
              f"read {res['bytes_read'] / 1e6:.1f} MB of {res['input_bytes'] / 1e6:.1f} MB")


if __name__ == "__main__":
    sys.exit(main())
