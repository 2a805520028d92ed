#!/usr/bin/env python3
"""lhotse loads what `melforge build --lhotse` writes, by itself, and the
`lhotse-fbank` recipe is lhotse's own `Fbank()`.

Runs in the venv scripts/lhotse-venv makes (lhotse and torch from PyPI; kept
apart from the main environment because transformers switches its Whisper
extractor to torch when torch is importable).

espeak-ng speaks four sentences; sox makes them 16 kHz mono WAV, a 16 kHz
FLAC, a 16 kHz stereo WAV (the second channel a delayed, quieter copy) and a
22,050 Hz mono WAV. lhotse itself makes the CutSet: `Recording.from_file`,
whole-recording cuts, and cuts truncated at starts and durations with many
decimals (some whose `duration * 16000` lands just below a whole number,
where lhotse's rounding keeps a sample that truncation drops), on channel 1
of the stereo file too, each with a supervision carrying text. Two bad cuts
(a missing file, a source of type `url`) must be rejected with a reason
while every good cut builds.

`melforge build cuts.jsonl.gz --recipe lhotse-fbank --lhotse` (with
`input.resample = "soxr_hq"` for the 22,050 Hz file), then, in lhotse:

* `CutSet.from_file(OUT/cuts.cuts.jsonl.gz)` has every good cut, in order,
  and `lhotse.qa.validate(cuts, read_data=True)` passes;
* every `cut.load_features()` equals the stored row bit for bit (h5py over
  `features`, `offsets`, `lengths`), and `cut.num_frames` equals
  `compute_num_frames(duration, 0.01, 16000)` and the row's frames;
* every 16 kHz cut's row equals `cut.compute_features(Fbank())`, lhotse's
  own extractor on lhotse's own `load_audio`: within 1e-3 in every band
  within 1e-6 of its frame's loudest (the Kaldi recipes' tolerance,
  docs/FORMAT.md: torch's float32 FFT and matmul against melforge's float32
  lanes; measured worst about 2e-4), and within 0.5 in quieter bands;
* `K2SpeechRecognitionDataset` over `DynamicBucketingSampler` batches every
  cut exactly once, each batch's padded `inputs` holding the cuts' rows;
* the same build with `[output] storage = "compact"`: lhotse, after the one
  line `import hdf5plugin` (which registers the Blosc filter for h5py),
  validates and loads every cut, each `load_features()` the float32 row
  rounded to the 2^-5 grid, as float16.

Usage: scripts/parity_lhotse.py --melforge target/release/melforge
Exit status 1 on any mismatch.
"""

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile

import h5py
# Compact files keep their features in Blosc chunks (HDF5 filter 32001); this
# import registers the filter with h5py, and is all lhotse needs to read them.
import hdf5plugin  # noqa: F401
import numpy as np
from lhotse import CutSet, Fbank, Recording, RecordingSet, SupervisionSegment
from lhotse.dataset import DynamicBucketingSampler, K2SpeechRecognitionDataset
from lhotse.qa import validate
from lhotse.utils import compute_num_frames, fastcopy

SENTENCES = [
    "The features of every cut are loaded by lhotse itself.",
    "Kaldi filter banks of eighty bins, ten milliseconds apart.",
    "A cut may start anywhere in its recording, on any channel.",
    "Nothing written by melforge needs code from melforge to read.",
]
CONFIG = """[input]
resample = "soxr_hq"
"""
LOUD_TOL, QUIET_TOL = 1e-3, 0.5


def sh(*args, **kw):
    return subprocess.run(args, check=True, **kw)


def recordings(work):
    """lhotse Recordings of the four files."""
    paths = []
    for i, text in enumerate(SENTENCES):
        sh("espeak-ng", "-w", f"{work}/s{i}.wav", text)
    sh("sox", f"{work}/s0.wav", "-r", "16000", "-b", "16", f"{work}/a16.wav")
    sh("sox", f"{work}/s1.wav", "-r", "16000", "-b", "16", f"{work}/b16.flac")
    sh("sox", f"{work}/s2.wav", "-r", "16000", "-b", "16", "-c", "2", f"{work}/c16s.wav",
       "remix", "1", "1v0.6", "delay", "0", "0.003")
    sh("sox", f"{work}/s3.wav", "-r", "22050", "-b", "16", f"{work}/d22.wav")
    for name in ("a16.wav", "b16.flac", "c16s.wav", "d22.wav"):
        paths.append(f"{work}/{name}")
    return RecordingSet.from_recordings(Recording.from_file(p) for p in paths)


def _set_sups(cut, sup):
    return fastcopy(cut, supervisions=[sup])


def make_cuts(recs):
    """Whole and truncated cuts, some on channel 1, with awkward times."""
    cuts = []
    whole = CutSet.from_manifests(recordings=recs)
    for k, cut in enumerate(whole):
        if cut.num_channels > 1:
            cut = cut.to_mono(mono_downmix=False)[1]  # channel 1 of the stereo file
        cuts.append(_set_sups(cut.with_id(f"whole-{k}"), _sup(cut, k)))
        # Starts and durations with many decimals; x * 16000 lands just
        # below a whole number for 0.0625625 (1000.99999…), 1.001 and 1.015.
        for j, (start, dur) in enumerate([(0.3333, 1.0101), (0.123456, 1.001),
                                          (0.5, 1.015), (0.0625625, 0.77777)]):
            if start + dur < cut.duration - 0.01:
                t = cut.truncate(offset=start, duration=dur, keep_excessive_supervisions=False)
                t = t.with_id(f"part-{k}-{j}")
                cuts.append(_set_sups(t, _sup(t, 10 * k + j)))
    return CutSet.from_cuts(cuts)


def _sup(cut, k):
    return SupervisionSegment(id=f"{cut.id}-{k}-sup", recording_id=cut.recording_id, start=0.0,
                              duration=cut.duration, channel=cut.channel,
                              text=f"utterance {k} — naïve café", speaker=f"spk-{k % 3}",
                              language="en")


def bad_lines(work, good):
    """A cut over a missing file and one whose source is a URL."""
    missing = json.loads(json.dumps(good.to_dict()))
    missing["id"] = "bad-missing"
    missing["recording"]["sources"][0]["source"] = f"{work}/nowhere.wav"
    url = json.loads(json.dumps(good.to_dict()))
    url["id"] = "bad-url"
    url["recording"]["sources"][0]["type"] = "url"
    return [missing, url]


def stored_rows(h5):
    with h5py.File(h5, "r") as f:
        feats = f["features"][:]
        offsets, lengths = f["offsets"][:], f["lengths"][:]
    return [feats[o:o + n] for o, n in zip(offsets, lengths)]


def compare(name, got, want):
    if got.shape != want.shape:
        return f"{name}: shape {got.shape}, lhotse's Fbank {want.shape}", 0.0
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    loud = want >= want.max(axis=1, keepdims=True) + np.log(1e-6)
    worst = err[loud].max(initial=0.0)
    if worst > LOUD_TOL:
        return f"{name}: differs from lhotse's Fbank by {worst:.3g} (tolerance {LOUD_TOL})", worst
    if err[~loud].max(initial=0.0) > QUIET_TOL:
        return f"{name}: quiet bands differ by {err[~loud].max():.3g}", worst
    return None, worst


def check_compact(melforge, work, plain, failures):
    """The build again with compact storage: lhotse loads every cut, each the
    plain cut's row on the 2^-5 grid (ties to even, as numpy rounds)."""
    with open(f"{work}/compact.toml", "w") as f:
        f.write(CONFIG + '\n[output]\nstorage = "compact"\n')
    out = f"{work}/compact"
    sh(melforge, "build", f"{work}/cuts.jsonl.gz", "--recipe", "lhotse-fbank", "--lhotse",
       "--config", f"{work}/compact.toml", "--out", out, "--progress", "none",
       capture_output=True)
    got = CutSet.from_file(f"{out}/cuts.cuts.jsonl.gz")
    validate(got, read_data=True)
    for cut, ref in zip(got, plain):
        feats, want = cut.load_features(), ref.load_features()
        if feats.dtype != np.float16 or feats.shape != want.shape \
                or not np.array_equal(feats.astype(np.float32), np.round(want * 32) / 32):
            failures.append(f"{cut.id}: the compact load_features() is not the row on the grid")
    return len(got)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--melforge", default="target/release/melforge")
    a = ap.parse_args()
    melforge = os.path.abspath(a.melforge)
    failures = []
    with tempfile.TemporaryDirectory() as work:
        recs = recordings(work)
        cuts = make_cuts(recs)
        lines = [c.to_dict() for c in cuts] + bad_lines(work, cuts[0])
        with gzip.open(f"{work}/cuts.jsonl.gz", "wt") as f:
            f.writelines(json.dumps(x, ensure_ascii=False) + "\n" for x in lines)
        with open(f"{work}/c.toml", "w") as f:
            f.write(CONFIG)
        out = f"{work}/out"
        report = json.loads(sh(melforge, "build", f"{work}/cuts.jsonl.gz", "--recipe",
                               "lhotse-fbank", "--lhotse", "--config", f"{work}/c.toml",
                               "--out", out, "--json", "--progress", "none",
                               capture_output=True, text=True).stdout)
        rejected = {r["path"]: r["reason"] for r in report["rejected"]}
        reasons = sorted(rejected.values())
        if len(rejected) != 2 or not any("nowhere.wav" in p for p in rejected) \
                or not any("type `url`" in r for r in reasons):
            failures.append(f"expected the two bad cuts rejected, got {rejected}")
        got = CutSet.from_file(f"{out}/cuts.cuts.jsonl.gz")
        if [c.id for c in got] != [c.id for c in cuts]:
            failures.append(f"cuts {[c.id for c in got]}, expected {[c.id for c in cuts]}")
        validate(got, read_data=True)
        rows = stored_rows(f"{out}/cuts.h5")
        worst, fbank = 0.0, Fbank()
        for cut, given in zip(got, cuts):
            # The recording as given, or as lhotse's own resample(16000)
            # describes it; the supervisions as given.
            want_rec = given.recording.resample(16000)
            if cut.recording.to_dict() != want_rec.to_dict() \
                    or cut.supervisions != given.supervisions:
                failures.append(f"{cut.id}: recording {cut.recording.to_dict()}, expected "
                                f"{want_rec.to_dict()}")
        for i, cut in enumerate(got):
            feats = cut.load_features()
            want_frames = compute_num_frames(cut.duration, 0.01, 16000)
            # A 16 kHz cut's row has lhotse's frame count exactly; a
            # resampled one's length rounds on its own, within the one
            # frame lhotse's load_features forgives (and pads or trims).
            # melforge describes a recording at another rate as lhotse's
            # Recording.resample(16000) does (a Resample transform): its
            # rows come from soxr, lhotse's audio from its own resampler.
            native = not cut.recording.transforms
            slack = 0 if native else 1
            row = rows[i]
            if cut.num_frames != want_frames or feats.shape[0] != want_frames \
                    or abs(row.shape[0] - want_frames) > slack:
                failures.append(f"{cut.id}: num_frames {cut.num_frames}, loaded {feats.shape}, "
                                f"row {row.shape}, compute_num_frames {want_frames}")
                continue
            if row.shape[0] < want_frames:
                row = np.concatenate((row, row[-1:]), axis=0)
            if not np.array_equal(feats, row[:want_frames]):
                failures.append(f"{cut.id}: load_features() differs from the stored row")
            if native:
                fail, err = compare(cut.id, rows[i], cut.compute_features(fbank))
                worst = max(worst, err)
                if fail:
                    failures.append(fail)
        dataset = K2SpeechRecognitionDataset(return_cuts=True)
        sampler = DynamicBucketingSampler(got, max_duration=12.0, num_buckets=2, shuffle=False)
        seen = []
        for batch_cuts in sampler:
            batch = dataset[batch_cuts]
            inputs, sups = batch["inputs"].numpy(), batch["supervisions"]
            # One supervision per cut here: its sequence_idx is the cut's
            # row of the padded batch.
            for c, j in zip(sups["cut"], sups["sequence_idx"].tolist()):
                seen.append(c.id)
                n = c.num_frames
                if inputs.shape[2] != 80 or not np.array_equal(inputs[j, :n], c.load_features()):
                    failures.append(f"{c.id}: batch inputs differ from its features")
        if sorted(seen) != sorted(c.id for c in got):
            failures.append(f"the sampler's batches held {sorted(seen)}")
        compact = check_compact(melforge, work, got, failures)
        print(f"lhotse parity: {len(got)} cuts loaded by lhotse "
              f"(validate, load_features bit for bit, K2SpeechRecognitionDataset over "
              f"DynamicBucketingSampler); {len(rejected)} bad cuts rejected; worst difference "
              f"from lhotse's Fbank() {worst:.2e} (tolerance {LOUD_TOL}); {compact} compact cuts "
              f"loaded after `import hdf5plugin`, each the row on the 2^-5 grid")
    for f in failures:
        print("FAIL", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
