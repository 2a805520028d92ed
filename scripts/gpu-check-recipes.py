#!/usr/bin/env python3
"""gpu-check-recipes: the variable-length recipes' part of gpu-check.

    gpu-check-recipes.py DIR

DIR holds, per recipe (kaldi-fbank, kaldi-mfcc, whisper), `out-<recipe>-cuda`
and `out-<recipe>-cpu` (a `melforge build` of the same speech corpus with
`--backend cuda` and `--backend cpu`), their JSON reports `<recipe>-<b>.json`
and the corpus under `corpus/`. Checks, per recipe:

* the cuda build ran on the GPU (`backend` "cuda") and kept the same files;
* every row (matched by path) has the CPU row's frame count and is within
  docs/FORMAT.md's parity tolerances of it: log fbank ≤ 1e-3 absolute in the
  bands within 1e-6 of the frame's loudest (quieter bands hold FFT rounding
  noise: ≤ 0.5), MFCC ≤ 1e-3 of the frame's largest value, Whisper ≤ 1e-4
  and its pad value ≤ 1e-4. Both backends compute in the same precisions;
  only cuFFT's and realfft's rounding differ;
* where python3 has them, the first 40 cuda rows against the references
  themselves: transformers' WhisperFeatureExtractor and
  torchaudio.compliance.kaldi.fbank / .mfcc (on the WAV's samples in [-1, 1],
  the recipes' defaults), with the same tolerances.

Prints one line per recipe (rows, worst differences, files/s of both
backends) and exits 1 on any failure.
"""

import json
import sys
import wave
from pathlib import Path

import h5py
import numpy as np

RECIPES = ("kaldi-fbank", "kaldi-mfcc", "whisper")


def say(msg):
    print(f"gpu-check: {msg}", file=sys.stderr, flush=True)


def rows(path):
    """{path: (features, pad)} of every row of every split file under `path`."""
    out = {}
    for f in sorted(Path(path).glob("*.h5")):
        with h5py.File(f) as h:
            feats = h["features"][...]
            offs, lens = h["offsets"][...], h["lengths"][...]
            pads = h["pad_value"][...] if "pad_value" in h else None
            for i, p in enumerate(h["path"].asstr()[...]):
                x = feats[offs[i]: offs[i] + lens[i]]
                out[p] = (x, None if pads is None else float(pads[i]))
    return out


def worst(recipe, got, want):
    """The recipe's error measure of `got` against `want` (frames × bins),
    and the quiet-band error (fbank only)."""
    if got.size == 0:
        return 0.0, 0.0
    g, w = got.astype(np.float64), want.astype(np.float64)
    err = np.abs(g - w)
    if recipe == "kaldi-fbank":
        loud = w >= w.max(axis=1, keepdims=True) + np.log(1e-6)
        return float(err[loud].max(initial=0.0)), float(err[~loud].max(initial=0.0))
    if recipe == "kaldi-mfcc":
        scale = np.maximum(1.0, np.abs(w).max(axis=1, keepdims=True))
        return float((err / scale).max()), 0.0
    return float(err.max()), 0.0


TOL = {"kaldi-fbank": 1e-3, "kaldi-mfcc": 1e-3, "whisper": 1e-4}


def read_wav(path):
    with wave.open(str(path)) as w:
        n, ch, rate = w.getnframes(), w.getnchannels(), w.getframerate()
        x = np.frombuffer(w.readframes(n), dtype="<i2").astype(np.float32) / 32768.0
    return x.reshape(-1, ch).mean(axis=1), rate


def reference(recipe, samples):
    """The reference extractor's output for mono samples at 16 kHz, or None
    when python3 lacks it."""
    try:
        if recipe == "whisper":
            from transformers import WhisperFeatureExtractor

            fe = WhisperFeatureExtractor(feature_size=80)
            return fe(samples, sampling_rate=16000, return_tensors="np")["input_features"][0].T
        import torch
        import torchaudio.compliance.kaldi as k

        wav = torch.from_numpy(np.ascontiguousarray(samples)).unsqueeze(0)
        f = k.fbank if recipe == "kaldi-fbank" else k.mfcc
        return f(wav, sample_frequency=16000.0, dither=0.0).numpy()
    except ImportError:
        return None


def check(d, recipe):
    reps = {b: json.loads((d / f"{recipe}-{b}.json").read_text()) for b in ("cuda", "cpu")}
    bad = 0
    if reps["cuda"].get("backend") != "cuda":
        say(f"FAIL: {recipe}: the cuda build ran on {reps['cuda'].get('backend')!r}: "
            f"{reps['cuda'].get('backend_reason')}")
        return 1
    gpu, cpu = rows(d / f"out-{recipe}-cuda"), rows(d / f"out-{recipe}-cpu")
    if set(gpu) != set(cpu) or not gpu:
        say(f"FAIL: {recipe}: {len(gpu)} cuda rows vs {len(cpu)} cpu rows, or other paths")
        return 1
    loud = quiet = pad = 0.0
    for p, (x, xp) in gpu.items():
        y, yp = cpu[p]
        if x.shape != y.shape:
            say(f"FAIL: {recipe}: {p}: shape {x.shape} on cuda, {y.shape} on cpu")
            bad += 1
            continue
        a, b = worst(recipe, x, y)
        loud, quiet = max(loud, a), max(quiet, b)
        if xp is not None:
            pad = max(pad, abs(xp - yp))
    if loud > TOL[recipe] or quiet > 0.5 or pad > 1e-4:
        say(f"FAIL: {recipe}: cuda vs cpu worst {loud:.3g} (quiet bands {quiet:.3g}, pad {pad:.3g})")
        bad += 1
    ref_note = "references: not installed"
    ref_worst, checked = 0.0, 0
    for p in sorted(gpu)[:40]:
        samples, rate = read_wav(d / "corpus" / p)
        if rate != 16000:
            continue
        want = reference(recipe, samples)
        if want is None:
            break
        x, _ = gpu[p]
        if recipe == "whisper":
            want = want[: x.shape[0]]
        if x.shape != want.shape:
            say(f"FAIL: {recipe}: {p}: shape {x.shape}, the reference's {want.shape}")
            bad += 1
            continue
        a, b = worst(recipe, x, want)
        ref_worst = max(ref_worst, a)
        checked += 1
        if a > TOL[recipe] or b > 0.5:
            say(f"FAIL: {recipe}: {p}: cuda vs the reference {a:.3g} (quiet bands {b:.3g})")
            bad += 1
    if checked:
        ref_note = f"vs the reference on {checked} rows: worst {ref_worst:.3g}"
    r = {b: reps[b]["report"] for b in reps}
    c = reps["cuda"].get("cuda") or {}
    say(f"{recipe}: {len(gpu)} rows, cuda vs cpu worst {loud:.3g} (tolerance {TOL[recipe]:g}; "
        f"quiet bands {quiet:.3g}, pad {pad:.3g}); {ref_note}; files/s cuda "
        f"{r['cuda']['files_per_s']:.0f} vs cpu {r['cpu']['files_per_s']:.0f} "
        f"(×{r['cuda']['files_per_s'] / max(r['cpu']['files_per_s'], 1e-9):.2f}); "
        f"{c.get('batches', '?')} batches, {c.get('host_computed_files', '?')} on the host"
        + (" ok" if not bad else ""))
    return bad


def main():
    d = Path(sys.argv[1])
    bad = sum(check(d, recipe) for recipe in RECIPES)
    if bad:
        say(f"FAIL: recipes: {bad} problem(s)")
        sys.exit(1)


if __name__ == "__main__":
    main()
