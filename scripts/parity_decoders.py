#!/usr/bin/env python3
"""Decoder parity: melforge's MP3, Ogg Vorbis, Ogg Opus and M4A (AAC-LC)
decoding against the references, on real speech.

espeak-ng speaks a few sentences; sox makes them 16, 44.1 and 48 kHz, mono
and stereo (the second channel a delayed, quieter copy, so the mean and the
first channel differ); ffmpeg encodes each with libmp3lame, libvorbis,
libopus and aac at a bitrate drawn from a seeded generator. `melforge decode`
dumps melforge's mono float32 samples at the file's own rate, which are
compared with

* soundfile (libsndfile >= 1.1, which reads MP3 through mpg123 and Opus
  through libopus) for MP3, Vorbis and Opus: the same rate, the same length,
  the channel mean of `soundfile.read(dtype="float32")`;
* ffmpeg (`-f f32le`) for M4A: the same start (the edit list's priming
  samples cut), the length of the track (its sample durations less the
  priming); ffmpeg 5 also keeps the last access unit's padding, so its output
  may be longer, by less than one access unit (1,024 samples).

Tolerance per sample, max |melforge - reference|: 1e-5 for MP3, Vorbis and
Opus, 5e-5 for AAC (measured on this corpus: MP3 8.1e-7, Vorbis 2.4e-7,
Opus 1.2e-7, AAC 1.5e-5). All four are float decoders of the same
bitstream: MP3 is nanomp3 (minimp3's algorithms), Vorbis and AAC are
symphonia's implementations of the standard transforms mpg123, libvorbis
and ffmpeg compute, and Opus is libopus itself
(a version near soundfile's), so what differs is float32 rounding in the
synthesis filter banks, a few ulps that accumulate to 1e-6 (AAC's longer
transforms, 1e-5 on loud passages); the bounds are far below the codecs'
own error and the 1e-3 a log-mel row may move. One known difference:
symphonia clamps Vorbis output to [-1, 1] where libvorbis returns overs
(samples past full scale, where the source was clipped), so for Vorbis the
reference is clamped per channel before the mean; the count of reference
samples past full scale is printed (MP3 keeps its overs, as mpg123 does). Lengths are exact (M4A: see above).

Usage: scripts/parity_decoders.py [--melforge target/release/melforge]
Exit status 1 on any mismatch.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

import numpy as np
import soundfile as sf

TOLERANCE = {"mp3": 1e-5, "ogg": 1e-5, "opus": 1e-5, "m4a": 5e-5}
# symphonia clamps this decoder's output to [-1, 1] (see above).
CLAMPED = {"ogg"}
ENCODER = {"mp3": "libmp3lame", "ogg": "libvorbis", "opus": "libopus", "m4a": "aac"}
BITRATES = {
    "mp3": ["64k", "128k", "192k"],
    "ogg": ["64k", "96k", "160k"],
    "opus": ["24k", "48k", "96k"],
    "m4a": ["64k", "128k", "160k"],
}
TEXT = (
    "Speech corpora ship as compressed audio. Common Voice uses MP3, GigaSpeech "
    "uses Opus, and VoxCeleb two ships M4A files with AAC inside."
)


def sh(*args, **kw):
    return subprocess.run(args, check=True, **kw)


def sources(work):
    """(name, wav path) for 16/44.1/48 kHz, mono and stereo speech."""
    sh("espeak-ng", "-w", f"{work}/speech.wav", TEXT)
    out = []
    for rate in (16000, 44100, 48000):
        mono = f"{work}/m{rate}.wav"
        sh("sox", f"{work}/speech.wav", "-r", str(rate), mono)
        out.append((f"mono{rate}", mono))
        # Channel 2: channel 1 delayed 3 ms at 60 % (sox remix + delay).
        stereo = f"{work}/s{rate}.wav"
        sh("sox", mono, "-c", "2", stereo, "remix", "1", "1v0.6", "delay", "0", "0.003")
        out.append((f"stereo{rate}", stereo))
    return out


def reference(path, ext):
    """(rate, mono mean, overs clamped) as the reference decodes the file."""
    if ext == "m4a":
        probe = sh("ffprobe", "-v", "error", "-select_streams", "a:0", "-show_entries",
                   "stream=sample_rate,channels", "-of", "csv=p=0", path,
                   capture_output=True, text=True).stdout.strip().split(",")
        rate, ch = int(probe[0]), int(probe[1])
        raw = sh("ffmpeg", "-v", "error", "-i", path, "-f", "f32le", "-",
                 capture_output=True).stdout
        y = np.frombuffer(raw, dtype="<f4").reshape(-1, ch)
    else:
        y, rate = sf.read(path, dtype="float32", always_2d=True)
    overs = int(np.sum(np.abs(y) > 1.0))
    if ext in CLAMPED:
        y = np.clip(y, -1.0, 1.0)
    return rate, y.mean(axis=1, dtype=np.float32), overs


def ours(melforge, path, work):
    dump = f"{work}/ours.f32"
    info = json.loads(sh(melforge, "decode", path, "--out", dump,
                         capture_output=True, text=True).stdout)
    return info["sample_rate"], np.fromfile(dump, dtype="<f4")


def check(melforge, path, ext, work):
    """A failure sentence, or None; and the measured max difference."""
    rate, ref, overs = reference(path, ext)
    our_rate, y = ours(melforge, path, work)
    if our_rate != rate:
        return f"rate {our_rate} Hz, reference {rate} Hz", None
    if ext == "m4a":
        if not (len(y) <= len(ref) < len(y) + 1024):
            return f"{len(y)} samples, ffmpeg {len(ref)} (expected ffmpeg - 1024 < ours <= ffmpeg)", None
        ref = ref[: len(y)]
    elif len(y) != len(ref):
        return f"{len(y)} samples, reference {len(ref)}", None
    diff = float(np.max(np.abs(y - ref)))
    if not diff <= TOLERANCE[ext]:
        return f"max |diff| {diff:.3g} > {TOLERANCE[ext]:g}", diff
    if overs:
        print(f"  {path.rsplit('/', 1)[-1]}: {overs} reference sample(s) past full scale")
    return None, diff


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--melforge", default="target/release/melforge")
    ap.add_argument("--seed", type=int, default=32)
    args = ap.parse_args()
    melforge = os.path.abspath(args.melforge)
    rng = random.Random(args.seed)
    print(f"soundfile {sf.__version__}, libsndfile {sf.__libsndfile_version__}")
    failures, worst = [], {}
    with tempfile.TemporaryDirectory() as work:
        for name, wav in sources(work):
            for ext, enc in ENCODER.items():
                bitrate = rng.choice(BITRATES[ext])
                path = f"{work}/{name}.{ext}"
                sh("ffmpeg", "-v", "error", "-y", "-i", wav, "-c:a", enc, "-b:a", bitrate, path)
                why, diff = check(melforge, path, ext, work)
                if diff is not None:
                    worst[ext] = max(worst.get(ext, 0.0), diff)
                status = "ok" if why is None else f"FAIL: {why}"
                print(f"{name}.{ext} ({enc} {bitrate}): {status}"
                      + ("" if diff is None else f" (max |diff| {diff:.2g})"))
                if why:
                    failures.append(f"{name}.{ext}: {why}")
    for ext, d in sorted(worst.items()):
        print(f"{ext}: worst max |diff| {d:.2g} (tolerance {TOLERANCE[ext]:g})")
    if failures:
        print(f"parity_decoders: {len(failures)} mismatch(es)", file=sys.stderr)
        return 1
    print("parity_decoders: all codecs within tolerance")
    return 0


if __name__ == "__main__":
    sys.exit(main())
