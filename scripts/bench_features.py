#!/usr/bin/env python3
"""melforge.features in-process against the extractors a training loop calls.

Usage: bench_features.py --native lib_native.so [--files 1500] [--peer-files N]
                         [--lhotse-python PY] [--json]

The input: `--files` espeak-ng utterances of 2-20 s at 16 kHz
(scripts/make_speech_corpus.py), read into memory as float32 before any
timing. Every extractor runs on one thread over the same waveforms, one call
per utterance, as a DataLoader worker calls it; the slow peers over the first
`--peer-files` of them (default: all), and each figure is per frame of audio
(25 ms / 10 ms frames, 80 bins), so the ratios compare like with like:

* Kaldi fbank, 80 bins: melforge `features.kaldi_fbank` against
  kaldi-native-fbank as its README calls it (`OnlineFbank`, `accept_waveform`,
  `get_frame` per frame), and lhotse's `Fbank().extract` with
  `torch.set_num_threads(1)` (`--lhotse-python`: a Python with lhotse and
  torch, scripts/lhotse-venv; torchaudio's `kaldi.fbank` where it imports).
* Whisper, 80 bins: `features.whisper_log_mel` against transformers'
  `WhisperFeatureExtractor` (numpy), per 30 s row.
* librosa: `features.log_mel` against `librosa.feature.melspectrogram` +
  `power_to_db`, with librosa's defaults at 16 kHz (n_fft 2048, hop 512,
  128 bins) and with a speech setting (n_fft 512, hop 160, 80 bins).
* Inside a real loop (`--lhotse-python`): lhotse's
  `K2SpeechRecognitionDataset` with `OnTheFlyFeatures`, a
  `SimpleCutSampler` of 100 s batches, a DataLoader with 2 workers, one
  epoch over the same files read from disk: batches per second with
  `melforge.lhotse.Fbank` against lhotse's own `Fbank` (from the first
  batch on, so the workers' start-up is left out), and with an extractor
  that computes nothing (zeros of the same shape): the loop's ceiling, what
  reading, collating and passing the batches cost alone.
* The batch call (`kaldi_fbank(list, threads=2)`) against one thread.
* Call overhead: a 1 s utterance called alone, against its share of a batch
  of 1 s utterances on one thread (the compute without the per-call cost).

melforge's passes are the best of three; the peers' one pass each (they run
for tens of seconds). BLAS and OpenMP are held to one thread (librosa's and
transformers' matrix products would take both cores otherwise). Prints a
Markdown table (`--json`: one JSON object).
"""

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import shutil
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import soundfile as sf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import native_package  # noqa: E402

LHOTSE_PEER = r"""
import json, sys, time
import numpy as np, soundfile as sf, torch
torch.set_num_threads(1)
from lhotse import Fbank
paths = sys.argv[1:]
waves = [sf.read(p, dtype="float32")[0] for p in paths]
out = {}
fb = Fbank()  # lhotse's FbankConfig: 80 bins, snip_edges False
fb.extract(waves[0], 16000)
t = time.perf_counter()
frames = sum(fb.extract(w, 16000).shape[0] for w in waves)
out["lhotse"] = (time.perf_counter() - t, frames)
try:
    import torchaudio.compliance.kaldi as tk
except Exception:
    pass
else:
    t = time.perf_counter()
    frames = sum(tk.fbank(torch.from_numpy(w)[None], num_mel_bins=80).shape[0] for w in waves)
    out["torchaudio"] = (time.perf_counter() - t, frames)
print(json.dumps(out))
"""


LHOTSE_LOOP = r"""
import json, sys, time
import numpy as np, torch
from lhotse import CutSet, Fbank, Recording, SupervisionSegment
from lhotse.dataset import K2SpeechRecognitionDataset, OnTheFlyFeatures, SimpleCutSampler
import melforge.lhotse

def cut_of(i, path):
    c = Recording.from_file(path, recording_id=f"r{i}").to_cut()
    c.supervisions = [SupervisionSegment(id=f"s{i}", recording_id=c.recording_id, start=0.0,
                                         duration=c.duration, text="x")]
    return c

class Zeros(melforge.lhotse.Fbank):
    # The loop's ceiling: melforge's shapes, no features computed.
    def extract(self, samples, sampling_rate):
        return np.zeros((self.frames(samples), 80), np.float32)
    def extract_batch(self, samples, sampling_rate, lengths=None):
        return [self.extract(s, sampling_rate) for s in samples]
    def frames(self, samples):
        n = np.asarray(samples).shape[-1]
        return (n + 80) // 160

cuts = CutSet.from_cuts(cut_of(i, p) for i, p in enumerate(sys.argv[1:]))
out = {}
for name, extractor in (("melforge", melforge.lhotse.Fbank()), ("lhotse", Fbank()), ("zeros", Zeros())):
    ds = K2SpeechRecognitionDataset(input_strategy=OnTheFlyFeatures(extractor))
    sampler = SimpleCutSampler(cuts, max_duration=100.0, shuffle=False)
    dl = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=None, num_workers=2)
    n, first = 0, None
    for batch in dl:
        n += 1
        if first is None:
            first = time.perf_counter()
    out[name] = (n - 1) / (time.perf_counter() - first)
print(json.dumps(out))
"""


def librosa_log_mel(waves, opts):
    import librosa

    for w in waves:
        librosa.power_to_db(librosa.feature.melspectrogram(y=w, sr=16000, **opts))
    return len(waves)


def package(native, d):
    native_package.install(native, d)
    from melforge import features

    return features


def best(f, n=3):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        r = f()
        times.append(time.perf_counter() - t)
    return min(times), r


def once(f):
    t = time.perf_counter()
    r = f()
    return time.perf_counter() - t, r


def knf_fbank(waves):
    import kaldi_native_fbank as knf

    opts = knf.FbankOptions()
    opts.frame_opts.dither = 0.0
    opts.mel_opts.num_bins = 80
    frames = 0
    for w in waves:
        f = knf.OnlineFbank(opts)
        f.accept_waveform(16000, w)
        f.input_finished()
        rows = [f.get_frame(i) for i in range(f.num_frames_ready)]
        frames += len(rows)
    return frames


def hf_whisper(waves):
    from transformers import WhisperFeatureExtractor

    fe = WhisperFeatureExtractor(feature_size=80)
    for w in waves:
        fe(w, sampling_rate=16000, return_tensors="np")
    return len(waves)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--native", required=True)
    ap.add_argument("--files", type=int, default=1500)
    ap.add_argument("--peer-files", type=int, default=0)
    ap.add_argument("--lhotse-python")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="bench-features-")
    try:
        F = package(args.native, d)
        corpus = os.path.join(d, "corpus")
        subprocess.run([sys.executable, os.path.join(HERE, "make_speech_corpus.py"), corpus,
                        "--files", str(args.files), "--seed", "5"], check=True, stdout=subprocess.DEVNULL)
        paths = sorted(os.path.join(r, f) for r, _, fs in os.walk(corpus) for f in fs if f.endswith(".wav"))
        waves = [sf.read(p, dtype="float32")[0] for p in paths]
        n_peer = args.peer_files or len(waves)
        hours = sum(len(w) for w in waves) / 16000 / 3600
        per_frame = lambda s, frames: s / frames * 1e6  # noqa: E731
        rows = {}

        # Kaldi fbank, one thread, one call per utterance.
        F.kaldi_fbank(waves[0], num_mel_bins=80)
        s, frames = best(lambda: sum(F.kaldi_fbank(w, num_mel_bins=80).shape[0] for w in waves))
        ours_fb = per_frame(s, frames)
        rows["melforge kaldi_fbank"] = (ours_fb, None)
        s, pf = once(lambda: knf_fbank(waves[:n_peer]))
        rows["kaldi-native-fbank (README)"] = (per_frame(s, pf), per_frame(s, pf) / ours_fb)
        if args.lhotse_python:
            out = subprocess.run([args.lhotse_python, "-c", LHOTSE_PEER, *paths[:n_peer]], check=True,
                                 capture_output=True, text=True).stdout
            for name, (secs, pf) in json.loads(out.strip().splitlines()[-1]).items():
                label = "lhotse Fbank().extract" if name == "lhotse" else "torchaudio kaldi.fbank"
                rows[label] = (per_frame(secs, pf), per_frame(secs, pf) / ours_fb)

        # Whisper, per 30 s row.
        F.whisper_log_mel(waves[0])
        s, _ = best(lambda: [F.whisper_log_mel(w) for w in waves])
        ours_wm = s / len(waves) * 1e6
        rows["melforge whisper_log_mel (µs/row)"] = (ours_wm, None)
        s, n = once(lambda: hf_whisper(waves[:n_peer]))
        rows["transformers WhisperFeatureExtractor (µs/row)"] = (s / n * 1e6, s / n * 1e6 / ours_wm)

        # librosa, per frame: its defaults, and a speech setting.
        for label, opts in (("defaults", {}), ("n_fft 512, hop 160, 80 bins",
                                               dict(n_fft=512, hop_length=160, n_mels=80))):
            lm_frames = sum(1 + len(w) // opts.get("hop_length", 512) for w in waves)
            F.log_mel(waves[0], sr=16000, **opts)
            s, _ = best(lambda: [F.log_mel(w, sr=16000, **opts) for w in waves])
            ours_lm = per_frame(s, lm_frames)
            rows[f"melforge log_mel, {label}"] = (ours_lm, None)
            peer = waves[:n_peer]
            s, _ = once(lambda: librosa_log_mel(peer, opts))
            pf = sum(1 + len(w) // opts.get("hop_length", 512) for w in peer)
            rows[f"librosa melspectrogram + power_to_db, {label}"] = (per_frame(s, pf), per_frame(s, pf) / ours_lm)

        # The batch call on 2 threads against 1.
        one, _ = best(lambda: F.kaldi_fbank(waves, threads=1, num_mel_bins=80))
        two, _ = best(lambda: F.kaldi_fbank(waves, threads=2, num_mel_bins=80))
        rows["kaldi_fbank(list), 2 threads vs 1"] = (per_frame(two, frames), one / two)

        # Call overhead on a 1 s utterance.
        short = [w[:16000].copy() for w in waves[:500] if len(w) >= 16000]
        alone, _ = best(lambda: [F.kaldi_fbank(w, num_mel_bins=80) for w in short])
        batched, _ = best(lambda: F.kaldi_fbank(short, threads=1, num_mel_bins=80))
        rows["1 s utterance: a call vs its compute"] = (alone / len(short) * 1e6, alone / batched)

        if args.lhotse_python:
            env = dict(os.environ, PYTHONPATH=os.path.join(d, "pkg"))
            out = subprocess.run([args.lhotse_python, "-c", LHOTSE_LOOP, *paths], check=True,
                                 capture_output=True, text=True, env=env).stdout
            loop = json.loads(out.strip().splitlines()[-1])
            rows["DataLoader loop, melforge Fbank (batches/s)"] = (loop["melforge"], None)
            rows["DataLoader loop, lhotse Fbank (batches/s)"] = (loop["lhotse"], loop["melforge"] / loop["lhotse"])
            rows["DataLoader loop, no features (ceiling, batches/s)"] = (loop["zeros"], loop["zeros"] / loop["lhotse"])

        if args.json:
            print(json.dumps({"files": len(waves), "hours": hours, "rows": rows}))
            return
        print(f"{len(waves)} utterances, {hours:.2f} h of audio; peers on {n_peer}; one thread unless said")
        print()
        print("| extractor | µs per frame (or as named) | ratio |")
        print("|---|---:|---:|")
        for name, (us, ratio) in rows.items():
            r = "" if ratio is None else f"{ratio:.2f}×"
            print(f"| {name} | {us:.3f} | {r} |")
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
