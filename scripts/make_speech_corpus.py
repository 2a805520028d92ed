#!/usr/bin/env python3
"""A corpus of real-speech utterances for the recipe benchmarks and parity runs.

Usage: make_speech_corpus.py OUT [--files N] [--min-s 2] [--max-s 20] [--rate 16000]
                             [--seed S] [--voices K]

espeak-ng speaks K sentences once (a few seconds each, different voices and
speeds); every utterance of the corpus is a run of those recordings, each with
its own gain, joined by short pauses and cut to a duration drawn uniformly from
[min-s, max-s], with a little noise so no two files are equal. The files are
16-bit PCM mono WAV at `--rate`, in `OUT/<split>/<speaker>/uttNNNNN.wav`
(splits train/dev, 10 speakers), so melforge's tree rule gives splits and labels.

Real speech (formants, pauses, onsets) exercises the recipes the way corpora do,
and the corpus builds in seconds: espeak-ng runs K times, not N times.
Deterministic for a given seed and espeak-ng version.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import wave

import numpy as np

SENTENCES = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Speech recognition models are trained on thousands of hours of audio.",
    "Please call Stella and ask her to bring these things from the store.",
    "A feature extractor turns every recording into frames of numbers.",
    "Six spoons of fresh snow peas, five thick slabs of blue cheese.",
    "The water pipe was leaking under the street for seven days.",
    "Numbers like forty two and nineteen eighty four are spoken too.",
    "She sells sea shells by the sea shore on a sunny afternoon.",
    "We also need a small plastic snake and a big toy frog for the kids.",
    "When the sunlight strikes raindrops in the air, they act as a prism.",
    "Good morning, how are you doing today, my old friend?",
    "The train leaves the station at half past nine every evening.",
]
VOICES = ["en", "en-us", "en+f3", "en+m3", "en-gb", "en+f2"]


def speak(text, voice, speed, rate, tmp):
    path = os.path.join(tmp, "s.wav")
    subprocess.run(
        ["espeak-ng", "-v", voice, "-s", str(speed), "-w", path, text],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with wave.open(path) as w:
        src_rate = w.getframerate()
        x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64)
    if src_rate != rate:
        # Linear interpolation is enough here: the corpus only has to be speech
        # at `rate`; the parity runs compare melforge and the reference on
        # these same files, whatever their content.
        n = int(round(len(x) * rate / src_rate))
        x = np.interp(np.arange(n) * src_rate / rate, np.arange(len(x)), x)
    return x / 32768.0


def write_wav(path, x, rate):
    pcm = np.clip(np.round(x * 32767.0), -32768, 32767).astype("<i2")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--files", type=int, default=1500)
    ap.add_argument("--min-s", type=float, default=2.0)
    ap.add_argument("--max-s", type=float, default=20.0)
    ap.add_argument("--rate", type=int, default=16000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--voices", type=int, default=12)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    with tempfile.TemporaryDirectory() as tmp:
        pieces = [
            speak(SENTENCES[i % len(SENTENCES)], VOICES[i % len(VOICES)], 140 + 10 * (i % 5), a.rate, tmp)
            for i in range(a.voices)
        ]
    total_s = 0.0
    for n in range(a.files):
        dur = rng.uniform(a.min_s, a.max_s)
        want = int(dur * a.rate)
        parts, have = [], 0
        while have < want:
            p = pieces[rng.integers(len(pieces))] * rng.uniform(0.3, 1.0)
            gap = np.zeros(int(rng.uniform(0.05, 0.4) * a.rate))
            parts += [p, gap]
            have += len(p) + len(gap)
        x = np.concatenate(parts)[:want]
        x = x + rng.normal(0.0, 1e-3, want)
        split = "train" if n % 10 < 8 else "dev"
        write_wav(os.path.join(a.out, split, f"spk{n % 10:02d}", f"utt{n:05d}.wav"), x, a.rate)
        total_s += want / a.rate
    print(f"{a.files} utterances, {total_s / 3600:.2f} h of audio at {a.rate} Hz in {a.out}")


if __name__ == "__main__":
    sys.exit(main())
