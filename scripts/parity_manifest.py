#!/usr/bin/env python3
"""Manifest parity: every line of a NeMo manifest and of a lhotse CutSet
builds to the row librosa.load + kaldi-native-fbank give for it.

espeak-ng speaks a few sentences, repeated into a recording of about 25 s;
sox makes it 16, 44.1 and 48 kHz, mono and stereo (the second channel a
delayed, quieter copy, so the mean and each channel differ); each becomes a
WAV, a FLAC (sox's for mono, with a SEEKTABLE; ffmpeg's for stereo, without
one), and with ffmpeg an MP3, an Ogg Vorbis, an Ogg Opus and two M4A
(AAC-LC): ffmpeg's default, which codes noisy bands as perceptual noise
(PNS), and `-aac_pns 0` ("m4a0"), which does not; a 10-minute 16 kHz
recording becomes an MP3, an Ogg Vorbis, an Ogg Opus and the two M4A, whose
segments are drawn from its last 40 % (melforge reads them from a frame,
page or access unit before each, not from the file's start; an M4A segment
past the first access unit coding noise, and any of a stereo M4A, from the
file's start: decode/compressed/index.rs). A seeded
generator draws segments of each (offsets and durations with many
decimals, some running past the end) and whole-file items;
one NeMo manifest (`.jsonl`) takes the mean of the channels, one lhotse
CutSet (`.jsonl.gz`) takes a channel per cut (any channel of any container).
Both carry text and speaker in Unicode.

`melforge build nemo.jsonl cuts.jsonl.gz --out OUT` runs under
`recipe = "kaldi-fbank"` with `input.resample = "soxr_hq"`; each row is
read back with h5py and compared with the reference:

* NeMo: `librosa.load(path, sr=16000, mono=True, offset=o, duration=d)`;
* cut: what lhotse's `Recording.load_audio` reads: the file's samples
  from `compute_num_samples(start, sr)` on, `compute_num_samples(duration,
  sr)` of them (lhotse's rounding: `t * sr` to 8 decimals, then half up;
  librosa truncates), read whole with soundfile (ffmpeg for M4A) and cut,
  its channel, then `librosa.resample(..., res_type="soxr_hq")`;
* Ogg Vorbis and Ogg Opus: soundfile's samples of the whole file, cut with
  the same frame arithmetic (`int(offset * sr)`, `int(duration * sr)`),
  averaged or one channel, and resampled the same way. librosa.load's own
  seek (libsndfile's `sf_seek`) does not land on the whole file's samples
  for these two: measured here, Vorbis up to 7.8e-5 per sample after a seek
  near the end, Opus up to 2e-3 (libsndfile restarts libopus a little
  before the seek point, so its state has not converged); melforge decodes
  from the stream's start (what the whole file decodes to), and on
  near-silent frames such sample differences move log bands by more than
  the lossy tolerance. WAV, FLAC and MP3 are compared with librosa.load's
  seek itself;
* M4A: librosa cannot read it through soundfile; ffmpeg's samples (the
  decoders' reference for AAC), the track ended where melforge ends it
  (ffmpeg 5 keeps the last access unit's padding), cut and combined as
  above;

then kaldi-native-fbank (scripts/parity_recipes.py's `knf_reference`).
Frame counts must be equal. Tolerance on log fbank bands at least 1e-6 of
the frame's largest (parity_recipes' rule for quieter ones): 1e-3 for WAV
and FLAC (the recipes' own bound), 5e-2 for the lossy codecs (whose decoders
differ from the references by up to 5e-5 per sample: scripts/parity_decoders.py).
`meta` must hold each line's text, speaker and 1-based line, and the manifest
written back one line per row.

Usage: scripts/parity_manifest.py --melforge target/release/melforge [--seed S]
Exit status 1 on any mismatch.
"""

import argparse
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
from decimal import ROUND_HALF_UP, Decimal

import h5py
import librosa
import numpy as np
import soundfile as sf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parity_recipes import knf_reference  # noqa: E402

TEXT = (
    "Long recordings are cut into segments. Each segment of a manifest is one "
    "row, and its row must be what librosa and Kaldi compute for it."
)
LOSSY = {"mp3", "ogg", "opus", "m4a", "m4a0"}
# Containers whose reference is the whole file's samples cut with librosa's
# frame arithmetic rather than librosa.load's own seek (see the module doc).
WHOLE = {"ogg", "opus", "m4a", "m4a0"}
ENCODE = {
    "mp3": ["-c:a", "libmp3lame", "-b:a", "128k"],
    "ogg": ["-c:a", "libvorbis", "-b:a", "96k"],
    "opus": ["-c:a", "libopus", "-b:a", "48k"],
    "m4a": ["-c:a", "aac", "-b:a", "128k"],
    "m4a0": ["-c:a", "aac", "-aac_pns", "0", "-b:a", "128k"],
}


def fname(base, ext):
    """The file of a container (ffmpeg picks the muxer by the name)."""
    return f"{base}-nopns.m4a" if ext == "m4a0" else f"{base}.{ext}"
BINS = 40
CONFIG = f"""[input]
resample = "soxr_hq"
channels = "mean"

[features]
recipe = "kaldi-fbank"
num_mel_bins = {BINS}
"""


def sh(*args, **kw):
    return subprocess.run(args, check=True, **kw)


def corpus(work):
    """[(path, ext, rate, channels, seconds)] over every container."""
    sh("espeak-ng", "-w", f"{work}/speech.wav", TEXT)
    sh("sox", f"{work}/speech.wav", f"{work}/long.wav", "repeat", "2", "pad", "0.3", "0.2")
    out = []
    for rate in (16000, 44100, 48000):
        for ch in (1, 2):
            base = f"{work}/r{rate}c{ch}"
            if ch == 1:
                sh("sox", f"{work}/long.wav", "-r", str(rate), "-b", "16", f"{base}.wav")
            else:
                sh("sox", f"{work}/long.wav", "-r", str(rate), "-b", "16", "-c", "2", f"{base}.wav",
                   "remix", "1", "1v0.6", "delay", "0", "0.003")
            # Mono FLAC by sox (a SEEKTABLE: segments read from seek
            # points), stereo by ffmpeg (none: the planner searches frames).
            if ch == 1:
                sh("sox", f"{base}.wav", f"{base}.flac")
            else:
                sh("ffmpeg", "-v", "error", "-y", "-i", f"{base}.wav", f"{base}.flac")
            for ext, args in ENCODE.items():
                sh("ffmpeg", "-v", "error", "-y", "-i", f"{base}.wav", *args, fname(base, ext))
            secs = float(sh("soxi", "-D", f"{base}.wav", capture_output=True, text=True).stdout)
            for ext in ["wav", "flac", *ENCODE]:
                out.append((fname(base, ext), ext, rate, ch, secs))
    # A 10-minute recording whose lossy encodes are cut late: melforge reads
    # those segments from a frame or page before them (decode/compressed/
    # index.rs), not from the file's start.
    sh("sox", f"{work}/long.wav", "-r", "16000", "-b", "16", f"{work}/deep.wav", "repeat", "23")
    secs = float(sh("soxi", "-D", f"{work}/deep.wav", capture_output=True, text=True).stdout)
    for ext in ("mp3", "ogg", "opus", "m4a", "m4a0"):
        sh("ffmpeg", "-v", "error", "-y", "-i", f"{work}/deep.wav", *ENCODE[ext],
           fname(f"{work}/deep", ext))
        out.append((fname(f"{work}/deep", ext), ext, 16000, 1, secs))
    return out


def ffmpeg_samples(path):
    probe = sh("ffprobe", "-v", "error", "-select_streams", "a:0", "-show_entries",
               "stream=sample_rate,channels", "-of", "csv=p=0", path,
               capture_output=True, text=True).stdout.strip().split(",")
    rate, ch = int(probe[0]), int(probe[1])
    raw = sh("ffmpeg", "-v", "error", "-i", path, "-f", "f32le", "-", capture_output=True).stdout
    return np.frombuffer(raw, dtype="<f4").reshape(-1, ch).T, rate


def melforge_length(melforge, path):
    info = json.loads(sh(melforge, "decode", path, "--out", os.devnull, capture_output=True,
                         text=True).stdout)
    return info["frames"]


def lhotse_samples(t, sr):
    """lhotse.utils.compute_num_samples(t, sr) (ROUND_HALF_UP)."""
    return int(Decimal(round(t * sr, ndigits=8)).quantize(0, rounding=ROUND_HALF_UP))


def whole(path, ext, melforge):
    """The whole file's samples (channels, n) and rate."""
    if ext in ("m4a", "m4a0"):
        y, sr = ffmpeg_samples(path)
        # ffmpeg 5 keeps the last access unit's padding: the track ends
        # where melforge ends it (scripts/parity_decoders.py checks that).
        return y[:, : melforge_length(melforge, path)], sr
    y, sr = sf.read(path, dtype="float32", always_2d=True)
    return y.T, sr


def cut_reference(path, ext, start, duration, channel, melforge):
    """The 16 kHz samples of a lhotse cut, as lhotse counts them."""
    y, sr = whole(path, ext, melforge)
    first = lhotse_samples(start, sr)
    y = y[channel, first:first + lhotse_samples(duration, sr)]
    return librosa.resample(y, orig_sr=sr, target_sr=16000, res_type="soxr_hq")


def reference(path, ext, offset, duration, channel, melforge):
    """The 16 kHz samples librosa.load gives for the item (see WHOLE)."""
    if ext in WHOLE:
        y, sr = whole(path, ext, melforge)
        start = int((offset or 0.0) * sr)
        end = y.shape[1] if duration is None else start + int(duration * sr)
        y = y[:, start:end]
        y = y.mean(axis=0, dtype=np.float32) if channel is None else y[channel]
        return librosa.resample(y, orig_sr=sr, target_sr=16000, res_type="soxr_hq")
    if channel is None:
        y, _ = librosa.load(path, sr=16000, mono=True, offset=offset or 0.0, duration=duration)
        return y
    y, sr = librosa.load(path, sr=None, mono=False, offset=offset or 0.0, duration=duration)
    y = y if y.ndim == 1 else y[channel]
    return librosa.resample(y, orig_sr=sr, target_sr=16000, res_type="soxr_hq")


def items(rng, files):
    """NeMo lines and lhotse cuts, each with what the reference needs."""
    nemo, cuts = [], []
    for i, (path, ext, rate, ch, secs) in enumerate(files):
        rel = os.path.basename(path)
        # The long recording's segments lie in its last 40 %.
        early = 0.6 * secs if rel.startswith("deep") else 0.0
        for k in range(3 if not early else 6):
            offset = round(rng.uniform(early, secs - 1.0), 6)
            duration = round(rng.uniform(0.3, 4.0), 6)
            if k == 2:
                offset = round(secs - rng.uniform(0.2, 0.8), 5)  # runs past the end
            text = f"{rel} #{k}: naïve café — 日本語 {rng.randint(0, 999)}"
            nemo.append(dict(audio_filepath=rel, offset=offset, duration=duration, text=text,
                             speaker=f"spk-{i}"))
        if i % 3 == 0:
            nemo.append(dict(audio_filepath=rel, duration=round(secs, 3), text="whole", speaker="w"))
        channel = rng.randrange(ch)
        start = round(rng.uniform(early, secs - 2.0), 4)
        duration = round(rng.uniform(0.5, 1.5), 4)
        cuts.append({
            "id": f"cut-{i}", "start": start, "duration": duration, "channel": channel,
            "supervisions": [{"id": f"sup-{i}", "recording_id": rel, "start": 0.0,
                              "duration": duration, "channel": channel,
                              "text": f"Grüße {i} — привет", "speaker": f"lh-{i}",
                              "language": "de"}],
            "recording": {"id": rel, "sources": [{"type": "file", "channels": list(range(ch)),
                                                  "source": rel}],
                          "sampling_rate": rate, "num_samples": int(secs * rate),
                          "duration": secs},
            "type": "MonoCut",
        })
    return nemo, cuts


def rows(h5):
    with h5py.File(h5, "r") as f:
        feats = f["features"][:]
        offsets, lengths = f["offsets"][:], f["lengths"][:]
        meta = [json.loads(m) for m in f["meta"][:]]
        line = f["line"][:]
    return [feats[o:o + n] for o, n in zip(offsets, lengths)], meta, line


def compare(name, got, want, tol):
    if got.shape != want.shape:
        return f"{name}: shape {got.shape}, reference {want.shape}", 0.0
    if got.size == 0:
        return None, 0.0
    err = np.abs(got.astype(np.float64) - want)
    loud = want >= want.max(axis=1, keepdims=True) + np.log(1e-6)
    worst = err[loud].max(initial=0.0)
    if worst > tol:
        return f"{name}: log fbank differs by {worst:.3g} (tolerance {tol})", worst
    if err[~loud].max(initial=0.0) > 0.5:
        return f"{name}: quiet bands differ by {err[~loud].max():.3g}", worst
    return None, worst


def check_split(out, split, lines, channel_of, melforge, loader):
    """Failures of one split, and the worst error per container; `loader`
    gives each line's reference samples (its own loader's)."""
    failures, worst = [], {}
    got, meta, line = rows(f"{out}/{split}.h5")
    if len(got) != len(lines):
        return [f"{split}: {len(got)} rows for {len(lines)} lines"], worst
    back = [json.loads(l) for l in open(f"{out}/{split}.jsonl")]
    for i, (g, m, item) in enumerate(zip(got, meta, lines)):
        path, ext, offset, duration, channel, text, speaker = channel_of(item)
        want = knf_reference("kaldi-fbank", {"num_mel_bins": BINS},
                             loader(path, ext, offset, duration, channel, melforge))
        fail, err = compare(f"{split} line {i + 1} ({os.path.basename(path)} {offset} {duration} "
                            f"ch {channel})", g, want, 5e-2 if ext in LOSSY else 1e-3)
        worst[ext] = max(worst.get(ext, 0.0), err)
        if fail:
            failures.append(fail)
        if (m.get("text"), m.get("speaker"), int(line[i])) != (text, speaker, i + 1):
            failures.append(f"{split} row {i}: meta {m}, line {line[i]}")
        if back[i]["features_row"] != i or back[i]["num_frames"] != len(g):
            failures.append(f"{split} row {i}: written back as {back[i]}")
    return failures, worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--melforge", default="target/release/melforge")
    ap.add_argument("--seed", type=int, default=32)
    a = ap.parse_args()
    melforge = os.path.abspath(a.melforge)
    rng = random.Random(a.seed)
    with tempfile.TemporaryDirectory() as work:
        files = corpus(work)
        nemo, cuts = items(rng, files)
        with open(f"{work}/nemo.jsonl", "w") as f:
            f.writelines(json.dumps(x, ensure_ascii=False) + "\n" for x in nemo)
        with gzip.open(f"{work}/cuts.jsonl.gz", "wt") as f:
            f.writelines(json.dumps(x, ensure_ascii=False) + "\n" for x in cuts)
        with open(f"{work}/c.toml", "w") as f:
            f.write(CONFIG)
        out = f"{work}/out"
        report = json.loads(sh(melforge, "build", f"{work}/nemo.jsonl", f"{work}/cuts.jsonl.gz",
                               "--out", out, "--config", f"{work}/c.toml", "--json",
                               "--progress", "none", capture_output=True, text=True).stdout)
        if report["rejected"]:
            print("rejected:", report["rejected"])
            sys.exit(1)
        ext_of = {os.path.basename(p): e for p, e, *_ in files}

        def nemo_item(x):
            p = x["audio_filepath"]
            return (f"{work}/{p}", ext_of[p], x.get("offset"), x.get("offset") is not None
                    and x["duration"] or None, None, x["text"], x["speaker"])

        def cut_item(x):
            p, s = x["recording"]["sources"][0]["source"], x["supervisions"][0]
            return (f"{work}/{p}", ext_of[p], x["start"], x["duration"], x["channel"], s["text"],
                    s["speaker"])

        failures, worst = [], {}
        for split, lines, how, loader in (("nemo", nemo, nemo_item, reference),
                                          ("cuts", cuts, cut_item, cut_reference)):
            f, w = check_split(out, split, lines, how, melforge, loader)
            failures += f
            for k, v in w.items():
                worst[k] = max(worst.get(k, 0.0), v)
        n = len(nemo) + len(cuts)
        print(f"manifest parity: {n} rows ({len(files)} files: WAV, FLAC, MP3, Vorbis, Opus, "
              f"M4A at 16/44.1/48 kHz, mono and stereo); worst log-fbank error per container:",
              ", ".join(f"{k} {v:.2e}" for k, v in sorted(worst.items())))
        for f in failures:
            print("FAIL", f)
        sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
