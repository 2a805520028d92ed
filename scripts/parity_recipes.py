#!/usr/bin/env python3
"""Parity of melforge's speech recipes with the reference extractors themselves.

kaldi-fbank / kaldi-mfcc against kaldi-native-fbank (the C++ Kaldi port that
sherpa uses; same numbers as torchaudio.compliance.kaldi), whisper against
transformers' WhisperFeatureExtractor (numpy path, no torch). Inputs: real
speech from espeak-ng converted by sox to 8, 16, 44.1 and 48 kHz, mono and
stereo; silence; clipped speech; files shorter than one frame. Options: the
defaults, then seeded random draws over the option space.

Each case runs `melforge features FILE --config C.toml --out X.npy` and the
reference on `librosa.load(FILE, sr=rate, mono=True)` (melforge resamples with
libsoxr HQ as librosa's soxr_hq does), and asserts the tolerances stated in
docs/FORMAT.md:
  * log fbank: |a - b| <= 1e-3 absolute where the reference band energy is at
    least 1e-6 of the frame's largest band (float32 FFT rounding in either
    implementation is ~1e-7 of the frame's energy, so far quieter bands are
    rounding noise in both); below that only |a - b| <= 0.5 (same floor).
  * linear fbank / mfcc: |a - b| <= 1e-3 * max(1, max |b| of the frame).
  * whisper: |a - b| <= 1e-4 everywhere (melforge's float32 FFT against the
    extractor's float64 one; float32 results).
Frame counts must be equal, including 0 frames for input shorter than a frame.

Usage: parity_recipes.py MELFORGE_BINARY [--draws N] [--seed S]
"""

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import soundfile as sf

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Speech features for training acoustic models.",
]


def run(cmd):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def make_corpus(d):
    """Returns {name: path} of the test inputs."""
    files = {}
    for i, text in enumerate(TEXTS):
        raw = os.path.join(d, f"espeak{i}.wav")
        run(["espeak-ng", "-v", "en", "-s", "160", "-w", raw, text])
        for rate in (8000, 16000, 44100, 48000):
            p = os.path.join(d, f"speech{i}-{rate}.wav")
            run(["sox", raw, "-r", str(rate), "-b", "16", p])
            files[f"speech{i}-{rate}"] = p
    for rate in (16000, 44100):
        p = os.path.join(d, f"stereo-{rate}.wav")
        run(["sox", "-M", files[f"speech0-{rate}"], files[f"speech1-{rate}"], "-b", "16", p])
        files[f"stereo-{rate}"] = p
    p = os.path.join(d, "clipped-16000.wav")
    run(["sox", "-V1", files["speech0-16000"], p, "vol", "8"])
    files["clipped-16000"] = p
    for name, n, rate in [("silence", 32000, 16000), ("short", 100, 16000), ("short8k", 150, 8000)]:
        p = os.path.join(d, f"{name}.wav")
        sf.write(p, np.zeros(n, dtype=np.int16), rate, subtype="PCM_16")
        files[name] = p
    p = os.path.join(d, "short-speech.wav")
    y, rate = sf.read(files["speech0-16000"], dtype="int16")
    sf.write(p, y[4000:4300], rate, subtype="PCM_16")
    files["short-speech"] = p
    p = os.path.join(d, "long-40s.wav")
    y = np.concatenate([sf.read(files["speech0-16000"], dtype="int16")[0]] * 20)[: 40 * 16000]
    sf.write(p, y, 16000, subtype="PCM_16")
    files["long-40s"] = p
    return files


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, float):
        return repr(v)
    return str(v)


def write_config(path, recipe, opts):
    lines = ["[input]", 'resample = "soxr_hq"', 'channels = "mean"', "", "[features]", f'recipe = "{recipe}"']
    lines += [f"{k} = {toml_value(v)}" for k, v in opts.items()]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


KALDI_DEFAULTS = dict(
    sample_frequency=16000.0, frame_length=25.0, frame_shift=10.0, preemphasis_coefficient=0.97,
    remove_dc_offset=True, window_type="povey", blackman_coeff=0.42, round_to_power_of_two=True,
    snip_edges=True, num_mel_bins=23, low_freq=20.0, high_freq=0.0, use_energy=False, raw_energy=True,
    energy_floor=1.0, use_log_fbank=True, use_power=True, num_ceps=13, cepstral_lifter=22.0,
    sample_scale=1.0,
)


def knf_options(recipe, opts):
    """kaldi-native-fbank's FbankOptions / MfccOptions for melforge's recipe
    options (torchaudio's keyword names and defaults, dither 0)."""
    import kaldi_native_fbank as knf

    o = dict(KALDI_DEFAULTS, **opts)
    k = knf.FbankOptions() if recipe == "kaldi-fbank" else knf.MfccOptions()
    f = k.frame_opts
    f.samp_freq = o["sample_frequency"]
    f.frame_length_ms = o["frame_length"]
    f.frame_shift_ms = o["frame_shift"]
    f.dither = 0.0
    f.preemph_coeff = o["preemphasis_coefficient"]
    f.remove_dc_offset = o["remove_dc_offset"]
    f.window_type = o["window_type"]
    f.blackman_coeff = o["blackman_coeff"]
    f.round_to_power_of_two = o["round_to_power_of_two"]
    f.snip_edges = o["snip_edges"]
    m = k.mel_opts
    m.num_bins = o["num_mel_bins"]
    m.low_freq = o["low_freq"]
    m.high_freq = o["high_freq"]
    k.use_energy = o["use_energy"]
    k.raw_energy = o["raw_energy"]
    k.energy_floor = o["energy_floor"]
    if recipe == "kaldi-fbank":
        k.use_log_fbank = o["use_log_fbank"]
        k.use_power = o["use_power"]
    else:
        k.num_ceps = o["num_ceps"]
        k.cepstral_lifter = o["cepstral_lifter"]
    return k


def knf_reference(recipe, opts, y):
    import kaldi_native_fbank as knf

    o = dict(KALDI_DEFAULTS, **opts)
    k = knf_options(recipe, opts)
    comp = knf.OnlineFbank(k) if recipe == "kaldi-fbank" else knf.OnlineMfcc(k)
    comp.accept_waveform(o["sample_frequency"], (y * o["sample_scale"]).astype(np.float32).tolist())
    comp.input_finished()
    n = comp.num_frames_ready
    bins = (o["num_mel_bins"] + int(o["use_energy"])) if recipe == "kaldi-fbank" else o["num_ceps"]
    if n == 0:
        return np.zeros((0, bins), np.float32)
    return np.stack([np.asarray(comp.get_frame(i), np.float32) for i in range(n)])


def whisper_reference(n_mels, y):
    from transformers import WhisperFeatureExtractor

    fe = WhisperFeatureExtractor(feature_size=n_mels)
    return fe(y, sampling_rate=16000, return_tensors="np")["input_features"][0]


def check_kaldi(name, recipe, opts, got, want):
    o = dict(KALDI_DEFAULTS, **opts)
    assert got.shape == want.shape, f"{name}: shape {got.shape} vs {want.shape}"
    if got.size == 0:
        return 0.0
    err = np.abs(got.astype(np.float64) - want)
    if recipe == "kaldi-fbank" and o["use_log_fbank"]:
        mel = want[:, int(o["use_energy"]):]
        loud = mel >= mel.max(axis=1, keepdims=True) + np.log(1e-6)
        mel_err = err[:, int(o["use_energy"]):]
        worst = max(mel_err[loud].max(initial=0.0), err[:, : int(o["use_energy"])].max(initial=0.0))
        assert worst <= 1e-3, f"{name}: log fbank differs by {worst}"
        quiet = mel_err[~loud].max(initial=0.0)
        assert quiet <= 0.5, f"{name}: quiet bands differ by {quiet}"
        return worst
    scale = np.maximum(1.0, np.abs(want).max(axis=1, keepdims=True))
    worst = (err / scale).max()
    assert worst <= 1e-3, f"{name}: differs by {worst} relative to the frame's largest value"
    return worst


def random_kaldi(rng, recipe):
    rate = rng.choice([8000.0, 16000.0])
    o = dict(
        sample_frequency=rate,
        frame_length=rng.choice([20.0, 25.0, 32.0, 50.0]),
        frame_shift=rng.choice([10.0, 12.5, 20.0]),
        preemphasis_coefficient=round(rng.uniform(0.0, 1.0), 2),
        remove_dc_offset=rng.random() < 0.5,
        window_type=rng.choice(["povey", "hanning", "hamming", "rectangular", "blackman"]),
        blackman_coeff=round(rng.uniform(0.3, 0.5), 2),
        round_to_power_of_two=rng.random() < 0.5,
        snip_edges=rng.random() < 0.5,
        num_mel_bins=rng.randint(10, 40 if rate == 8000.0 else 80),
        low_freq=float(rng.choice([0, 20, 64, 200])),
        high_freq=float(rng.choice([0, -200, rate / 2 - 500])),
        use_energy=rng.random() < 0.5,
        raw_energy=rng.random() < 0.5,
        energy_floor=float(rng.choice([0.0, 0.5, 1.0])),
        sample_scale=float(rng.choice([1.0, 32768.0])),
    )
    if recipe == "kaldi-fbank":
        o.update(use_log_fbank=rng.random() < 0.8, use_power=rng.random() < 0.7)
    else:
        o.update(num_ceps=rng.randint(5, o["num_mel_bins"]), cepstral_lifter=float(rng.choice([0.0, 22.0, 10.5])))
    return o


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("melforge")
    ap.add_argument("--draws", type=int, default=24)
    ap.add_argument("--seed", type=int, default=31)
    args = ap.parse_args()
    import librosa

    rng = random.Random(args.seed)
    d = tempfile.mkdtemp(prefix="parity-recipes-")
    try:
        files = make_corpus(d)
        cases = [("kaldi-fbank", dict(num_mel_bins=80)), ("kaldi-fbank", {}), ("kaldi-mfcc", {}),
                 ("kaldi-fbank", dict(num_mel_bins=80, sample_scale=32768.0, snip_edges=False, use_energy=True)),
                 ("whisper", dict(n_mels=80)), ("whisper", dict(n_mels=128))]
        for i in range(args.draws):
            recipe = "kaldi-fbank" if i % 2 == 0 else "kaldi-mfcc"
            cases.append((recipe, random_kaldi(rng, recipe)))
        worst = {}
        cfg, out = os.path.join(d, "c.toml"), os.path.join(d, "x.npy")
        for ci, (recipe, opts) in enumerate(cases):
            write_config(cfg, recipe, opts)
            names = sorted(files) if ci < 6 else rng.sample(sorted(files), 4)
            rate = int(opts.get("sample_frequency", 16000.0))
            for name in names:
                label = f"case {ci} {recipe} {opts} on {name}"
                run([args.melforge, "features", files[name], "--config", cfg, "--out", out])
                got = np.load(out)
                y, _ = librosa.load(files[name], sr=rate, mono=True)
                if recipe == "whisper":
                    want = whisper_reference(opts["n_mels"], y)
                    assert got.shape == want.shape, f"{label}: shape {got.shape} vs {want.shape}"
                    e = float(np.abs(got - want).max())
                    assert e <= 1e-4, f"{label}: differs by {e}"
                else:
                    e = check_kaldi(label, recipe, opts, got, knf_reference(recipe, opts, y))
                worst[recipe] = max(worst.get(recipe, 0.0), e)
        print(f"parity_recipes: {len(cases)} option sets, {len(files)} files; worst: {worst}")
    finally:
        shutil.rmtree(d)


def guarded(main, name):
    """Runs `main`; a failed check (or a command that failed) is one FAIL
    line and exit status 1."""
    try:
        main()
    except AssertionError as e:
        print(f"{name}: FAIL: {e}", file=sys.stderr)
        sys.exit(1)
    except subprocess.CalledProcessError as e:
        print(f"{name}: FAIL: {e}: {e.stderr.decode(errors='replace')}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    guarded(main, "parity_recipes")
