#!/usr/bin/env python3
"""Regenerate the golden log-mel fixtures with librosa 0.11 (see README.md).

    pip install librosa==0.11.0 numpy
    python3 tests/golden/make_golden.py          # rewrites tests/golden/*

Everything is deterministic (fixed seeds, sorted output), so re-running with the
same librosa/numpy versions reproduces the committed files byte for byte.

For every case: int16 mono WAV inputs are synthesised, read back as
float32 = int16 / 32768 (what librosa.load / soundfile return), padded with zeros
or trimmed to clip_samples, cut into the two-stage segments, and each short
segment goes through librosa.feature.melspectrogram + librosa.power_to_db
(top_db=None). top_db, when set, is then applied over the whole clip
(np.maximum(x, x.max() - top_db)), as melforge defines it.
"""

import json
import shutil
import sys
import wave
import zlib
from pathlib import Path

import librosa
import numpy as np

HERE = Path(__file__).resolve().parent

DEFAULT_MEL = dict(
    sample_rate=4096,
    clip_seconds=10.0,
    n_fft=512,
    hop_length=256,
    win_length=512,
    window="hann",
    center=False,
    pad_mode="constant",
    power=2.0,
    n_mels=32,
    fmin=0.0,
    fmax=2048.0,
    mel_scale="slaney",
    norm="slaney",
    ref=1.0,
    amin=1e-10,
    top_db=None,
)
DEFAULT_SEG = dict(
    enabled=True, long_window=1024, long_hop=512, short_window=512, short_hop=256
)

# Shorter clips for the non-default cases keep the fixtures small.
SHORT = dict(clip_seconds=2.0)

# name -> (mel overrides, segmentation overrides, clip kinds)
CASES = {
    "default": (
        {},
        {},
        ["noise", "tones", "silence", "square", "clipped", "short", "long"],
    ),
    "htk": ({**SHORT, "mel_scale": "htk"}, {}, ["tones", "noise", "short"]),
    "norm_none": ({**SHORT, "norm": "none"}, {}, ["tones", "noise", "long"]),
    "center_reflect": (
        {**SHORT, "center": True, "pad_mode": "reflect"},
        {},
        ["tones", "noise", "square", "short"],
    ),
    "center_constant": (
        {**SHORT, "center": True, "pad_mode": "constant"},
        {},
        ["tones", "noise", "clipped", "long"],
    ),
    "segmentation_off": (
        {"clip_seconds": 3.0, "center": True},
        {"enabled": False},
        ["tones", "noise", "silence", "short"],
    ),
    "top_db_80": ({**SHORT, "top_db": 80.0}, {}, ["tones", "noise", "short", "silence"]),
    "power_1": ({**SHORT, "power": 1.0}, {}, ["tones", "noise", "clipped"]),
    "custom_params": (
        {
            **SHORT,
            "n_fft": 1024,
            "hop_length": 128,
            "win_length": 800,
            "window": "blackman",
            "n_mels": 64,
            "fmin": 50.0,
            "fmax": 1800.0,
            "ref": 0.01,
        },
        {"long_window": 4096, "long_hop": 2048, "short_window": 2048, "short_hop": 1024},
        ["tones", "noise", "long"],
    ),
    "n_fft_400": (
        {**SHORT, "n_fft": 400, "hop_length": 160, "win_length": 400},
        {"long_window": 2048, "long_hop": 1024, "short_window": 1024, "short_hop": 512},
        ["tones", "noise", "square"],
    ),
    "odd_n_fft_centered": (
        {
            **SHORT,
            "n_fft": 401,
            "hop_length": 100,
            "win_length": 301,
            "center": True,
            "pad_mode": "reflect",
            "amin": 1e-8,
        },
        {"enabled": False},
        ["tones", "noise", "short"],
    ),
    "hamming_8k": (
        {"sample_rate": 8000, "clip_seconds": 2.0, "window": "hamming", "fmax": 4000.0},
        {},
        ["tones", "noise", "silence", "long"],
    ),
}


def seed_for(*names):
    return zlib.crc32("/".join(names).encode())


def synth(kind, case, sr, n):
    """int16 samples of one synthetic clip (length may differ from n: short/long)."""
    rng = np.random.default_rng(seed_for(case, kind))
    if kind == "short":
        n = int(n * 0.6) + 7
    elif kind == "long":
        n = int(n * 1.3) + 5
    t = np.arange(n) / sr
    if kind == "silence":
        return np.zeros(n, dtype=np.int16)
    if kind == "square":
        x = np.where(np.sin(2 * np.pi * 0.0371 * sr * t) >= 0, 32767, -32768)
        return x.astype(np.int16)
    if kind == "clipped":
        x = rng.normal(0.0, 0.8, n) * 32768
    elif kind == "noise":
        x = rng.normal(0.0, 0.1, n) * 32768
    else:  # tones, short, long: off-bin tones (leakage) and a very quiet one
        x = (
            0.4 * np.sin(2 * np.pi * 0.1103 * sr * t + 0.3)
            + 0.25 * np.sin(2 * np.pi * 0.2437 * sr * t)
            + 0.1 * np.sin(2 * np.pi * 0.0173 * sr * t + 1.0)
            + 0.001 * np.sin(2 * np.pi * 0.3519 * sr * t)
        ) * 32768
        if kind != "tones":
            x += rng.normal(0.0, 0.02, n) * 32768
    return np.clip(np.round(x), -32768, 32767).astype(np.int16)


def write_wav(path, samples, sr):
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sr)
        w.writeframes(samples.astype("<i2").tobytes())


def read_wav(path):
    with wave.open(str(path), "rb") as w:
        assert w.getnchannels() == 1 and w.getsampwidth() == 2
        data = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    return (data.astype(np.float32) / np.float32(32768.0)).astype(np.float32)


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, float):
        return repr(v)
    return str(v)


def write_config(path, mel, seg):
    lines = ["# Generated by make_golden.py", "[mel]"]
    for k, v in mel.items():
        if v is not None:
            lines.append(f"{k} = {toml_value(v)}")
    lines += ["", "[segmentation]"]
    lines += [f"{k} = {toml_value(v)}" for k, v in seg.items()]
    path.write_text("\n".join(lines) + "\n")


def shape_of(mel, seg):
    clip = int(round(mel["clip_seconds"] * mel["sample_rate"]))
    if seg["enabled"]:
        n_long = (clip - seg["long_window"]) // seg["long_hop"] + 1
        n_short = (seg["long_window"] - seg["short_window"]) // seg["short_hop"] + 1
        seg_len = seg["short_window"]
    else:
        n_long = n_short = 1
        seg_len = clip
    n_fft, hop = mel["n_fft"], mel["hop_length"]
    if mel["center"]:
        n_frames = (seg_len + 2 * (n_fft // 2) - n_fft) // hop + 1
    else:
        n_frames = (seg_len - n_fft) // hop + 1
    return clip, seg_len, [n_long, n_short, mel["n_mels"], n_frames]


def logmel(y, mel, seg):
    clip, seg_len, shape = shape_of(mel, seg)
    y = np.pad(y[:clip], (0, max(0, clip - len(y))))
    assert y.dtype == np.float32 and len(y) == clip
    out = np.empty(shape, dtype=np.float32)
    for l in range(shape[0]):
        for s in range(shape[1]):
            start = l * seg["long_hop"] + s * seg["short_hop"] if seg["enabled"] else 0
            m = librosa.feature.melspectrogram(
                y=y[start : start + seg_len],
                sr=mel["sample_rate"],
                n_fft=mel["n_fft"],
                hop_length=mel["hop_length"],
                win_length=mel["win_length"],
                window=mel["window"],
                center=mel["center"],
                pad_mode=mel["pad_mode"],
                power=mel["power"],
                n_mels=mel["n_mels"],
                fmin=mel["fmin"],
                fmax=mel["fmax"],
                htk=mel["mel_scale"] == "htk",
                norm=None if mel["norm"] == "none" else mel["norm"],
            )
            assert m.dtype == np.float32 and list(m.shape) == shape[2:], m.shape
            out[l, s] = librosa.power_to_db(m, ref=mel["ref"], amin=mel["amin"], top_db=None)
    if mel["top_db"] is not None:
        out = np.maximum(out, out.max() - mel["top_db"])
    return out.astype(np.float32)


def main():
    manifest = {
        "generator": "tests/golden/make_golden.py",
        "librosa": librosa.__version__,
        "numpy": np.__version__,
        "cases": {},
    }
    for case, (mel_over, seg_over, kinds) in CASES.items():
        mel = {**DEFAULT_MEL, **mel_over}
        seg = {**DEFAULT_SEG, **seg_over}
        root = HERE / case
        if root.exists():
            shutil.rmtree(root)
        (root / "expected").mkdir(parents=True)
        write_config(root / "config.toml", mel, seg)
        clip, _, shape = shape_of(mel, seg)
        clips = {}
        for kind in kinds:
            name = f"{case}_{kind}"
            wav_rel = f"input/{kind}/{name}.wav"
            write_wav(root / wav_rel, synth(kind, case, mel["sample_rate"], clip), mel["sample_rate"])
            y = read_wav(root / wav_rel)
            x = logmel(y, mel, seg)
            x.astype("<f4").tofile(root / "expected" / f"{name}.f32")
            clips[name] = {
                "wav": f"{case}/{wav_rel}",
                "expected": f"{case}/expected/{name}.f32",
                "input_samples": int(len(y)),
                "max_db": float(x.max()),
                "min_db": float(x.min()),
            }
        manifest["cases"][case] = {
            "config": f"{case}/config.toml",
            "clip_samples": clip,
            "shape": shape,
            "clips": clips,
        }
        print(f"{case}: shape {shape}, {len(clips)} clips", file=sys.stderr)
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


# ---------------------------------------------------------------------------
# Inputs beyond the reference WAVs: FLAC 16/24-bit and WAV at other rates,
# mono and stereo, synthetic and speech, each loaded exactly as
# librosa.load(path, sr=target, mono=True) (res_type "soxr_hq", librosa 0.11's
# default) for two targets. Needs `pip install soundfile soxr` and espeak-ng
# (the speech) and sox (speech at other rates):
#
#     python3 tests/golden/make_golden.py inputs   # rewrites tests/golden/inputs/

INPUT_RATES = [8000, 22050, 44100, 48000]
INPUT_SECONDS = 0.2
# (name, container, subtype, channels, signal)
INPUT_KINDS = [
    ("wav16_mono_synth", "wav", "PCM_16", 1, "synth"),
    ("wav16_stereo_speech", "wav", "PCM_16", 2, "speech"),
    ("flac16_stereo_synth", "flac", "PCM_16", 2, "synth"),
    ("flac24_mono_speech", "flac", "PCM_24", 1, "speech"),
]
# Longer than clip + 1 s at the target: the decoder stops early there.
INPUT_LONG = [
    ("long_flac16_mono_tones", 44100, "flac", "PCM_16", 1, "tones", 1.6),
    ("long_wav16_mono_synth", 8000, "wav", "PCM_16", 1, "synth", 1.6),
    ("flac24_stereo_speech", 48000, "flac", "PCM_24", 2, "speech", INPUT_SECONDS),
]
# name -> (mel overrides, segmentation overrides)
INPUT_CONFIGS = {
    "to_4096": (dict(clip_seconds=0.5), {}),
    "to_16k": (
        dict(sample_rate=16000, clip_seconds=0.5, fmax=8000.0, n_mels=40),
        dict(enabled=False),
    ),
}
SPEECH_TEXT = "Seven birds sang near the quiet river at dawn"


def speech(sr, n, tmp):
    """espeak-ng speech (22050 Hz), converted to sr by sox, first n samples."""
    import subprocess

    raw = tmp / "speech_22050.wav"
    if not raw.exists():
        subprocess.run(["espeak-ng", "-w", str(raw), SPEECH_TEXT], check=True)
    out = tmp / f"speech_{sr}.wav"
    if not out.exists():
        # -D: no dither, -R: repeatable; the output is then deterministic.
        subprocess.run(["sox", "-D", "-R", str(raw), "-r", str(sr), str(out)], check=True)
    import soundfile as sf

    y, got = sf.read(str(out), dtype="float64")
    assert got == sr
    start = int(0.3 * sr)  # skip the leading silence
    return y[start : start + n]


def input_signal(signal, name, sr, n, channels, tmp):
    rng = np.random.default_rng(seed_for("inputs", name, str(sr)))
    t = np.arange(n) / sr
    if signal == "speech":
        mono = 0.8 * speech(sr, n, tmp)
        mono = np.pad(mono, (0, n - len(mono)))
    elif signal == "tones":
        mono = 0.5 * np.sin(2 * np.pi * 440.0 * t) + 0.2 * np.sin(2 * np.pi * 1234.5 * t)
    else:
        mono = (
            0.4 * np.sin(2 * np.pi * 0.0217 * sr * t + 0.3)
            + 0.2 * np.sin(2 * np.pi * (300 + 0.31 * sr * t / 2) * t)
            + rng.normal(0.0, 0.03, n)
        )
    if channels == 1:
        return mono[:, None]
    other = 0.6 * np.roll(mono, 17) + rng.normal(0.0, 0.02, n)
    return np.stack([mono, other], axis=1)


def make_inputs():
    import tempfile

    import soundfile as sf

    root = HERE / "inputs"
    if root.exists():
        shutil.rmtree(root)
    tmp = Path(tempfile.mkdtemp())
    files = {}
    plan = [
        (name, sr, cont, sub, ch, sig, INPUT_SECONDS)
        for sr in INPUT_RATES
        for (name, cont, sub, ch, sig) in INPUT_KINDS
    ] + INPUT_LONG
    for name, sr, cont, sub, ch, sig, seconds in plan:
        n = int(round(seconds * sr))
        x = np.clip(input_signal(sig, name, sr, n, ch, tmp), -1.0, 1.0 - 2**-23)
        rel = f"files/{sr}/{name}_{sr}.{cont}"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        sf.write(str(root / rel), x, sr, subtype=sub, format=cont.upper())
        files[f"{name}_{sr}"] = {
            "path": f"inputs/{rel}",
            "rel": f"{sr}/{name}_{sr}.{cont}",
            "sample_rate": sr,
            "channels": ch,
            "subtype": sub,
            "frames": n,
        }
    configs = {}
    for cname, (mel_over, seg_over) in INPUT_CONFIGS.items():
        mel = {**DEFAULT_MEL, **mel_over}
        seg = {**DEFAULT_SEG, **seg_over}
        cfg = root / f"{cname}.toml"
        write_config(cfg, mel, seg)
        with open(cfg, "a") as f:
            f.write('\n[input]\nresample = "soxr_hq"\n')
        clip, _, shape = shape_of(mel, seg)
        expected = {}
        worst_len = 0
        for fname, meta in files.items():
            y, sr = librosa.load(str(HERE / meta["path"]), sr=mel["sample_rate"], mono=True)
            assert sr == mel["sample_rate"] and y.dtype == np.float32
            want_len = int(np.ceil(meta["frames"] * sr / meta["sample_rate"]))
            assert len(y) == want_len, (fname, len(y), want_len)
            worst_len = max(worst_len, len(y))
            x = logmel(y, mel, seg)
            rel = f"expected/{cname}/{fname}.f32"
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            x.astype("<f4").tofile(root / rel)
            expected[fname] = {
                "expected": f"inputs/{rel}",
                "loaded_samples": int(len(y)),
                "max_db": float(x.max()),
                "min_db": float(x.min()),
            }
        configs[cname] = {
            "config": f"inputs/{cname}.toml",
            "clip_samples": clip,
            "shape": shape,
            "expected": expected,
        }
        print(f"inputs/{cname}: shape {shape}, {len(expected)} files", file=sys.stderr)
    manifest = {
        "generator": "tests/golden/make_golden.py inputs",
        "librosa": librosa.__version__,
        "numpy": np.__version__,
        "soxr": __import__("soxr").__version__,
        "soundfile": sf.__version__,
        "libsndfile": sf.__libsndfile_version__,
        "input_tree": "inputs/files",
        "files": files,
        "configs": configs,
    }
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    if sys.argv[1:] == ["inputs"]:
        make_inputs()
    else:
        main()
