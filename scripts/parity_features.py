#!/usr/bin/env python3
"""The in-process features (`melforge.features`, the extension melforge._native)
against `melforge build` and against the references themselves.

* **Bit for bit with build.** Every row `kaldi_fbank`, `kaldi_mfcc`,
  `whisper_log_mel` and `log_mel` compute equals, bit for bit, the row the binary computes
  for the same file and options (`melforge features`, the build workers'
  code), and the rows a `melforge build` stores (read back with
  `melforge.MelDataset`): the same recipe crate, plan and SIMD level.
* **Against the references**, with docs/FORMAT.md's tolerances (the
  checks of scripts/parity_recipes.py): kaldi-native-fbank for fbank and
  MFCC, transformers' WhisperFeatureExtractor for Whisper; on espeak-ng
  speech at 8 and 16 kHz, silence, clipped speech and short files, with the
  defaults and seeded random option draws.
* **Batches**: a list gives the rows of the single calls, on 1 and 2
  threads alike, dithered too (item i is seeded with seed + i).
* **decode**: `melforge.decode` reads WAV and FLAC as `librosa.load(sr=None)`
  does, bit for bit, and MP3, Vorbis and Opus within 1e-6, offsets and
  durations included; bad bytes and arguments are ValueErrors naming them.
* **transformers**: `melforge.hf.WhisperFeatureExtractor` is called like
  transformers' own and returns the same keys, shapes and masks, within
  1e-4; `padding="longest"` stays transformers' own; it saves and loads.
* **log_mel**: against librosa's `melspectrogram` + `power_to_db` within
  1e-3 dB (docs/FORMAT.md's librosa tolerance), and bit for bit against
  the binary's librosa recipe with the segmentation off and a clip of the
  file's length; defaults and random option draws at 8, 16 and 44.1 kHz.
* **Bad input** raises ValueError or TypeError naming the argument.

The package is imported from python/ with the extension copied beside it
(`--native`, the cdylib `cargo build --release -p melforge-py` makes).

Usage: parity_features.py --melforge BINARY --native lib_native.so [--draws N]
"""

import argparse
import os
import random
import shutil
import sys
import tempfile
import warnings

import numpy as np
import soundfile as sf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import native_package  # noqa: E402
import parity_recipes as pr  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# melforge.decode(sr=) against librosa.load(sr=): the same libsoxr HQ recipe,
# from two builds of libsoxr (the system's and python-soxr's).
RESAMPLE_TOL = 1e-5


def load_package(native, d):
    """melforge from python/, with the extension beside it."""
    native_package.install(native, d)
    import melforge
    import melforge.features as features

    return melforge, features


def expect(exc, words, f, *a, **k):
    try:
        f(*a, **k)
    except exc as e:
        for w in words:
            assert w in str(e), f"{exc.__name__} without {w!r}: {e}"
        return
    raise AssertionError(f"no {exc.__name__} from {f.__name__}{a!r:.60} {k}")


def bad_inputs(F):
    y = (np.sin(np.arange(16000) * 0.05) * 0.3).astype(np.float32)
    nan, inf = y.copy(), y.copy()
    nan[7], inf[9] = np.nan, np.inf
    expect(ValueError, ["waveform", "index 7"], F.kaldi_fbank, nan)
    expect(ValueError, ["waveform", "index 9"], F.whisper_log_mel, inf)
    expect(ValueError, ["waveform", "empty"], F.kaldi_mfcc, np.zeros(0, np.float32))
    expect(ValueError, ["waveform", "1-D"], F.kaldi_fbank, np.zeros((2, 400), np.float32))
    expect(TypeError, ["waveform", "int32"], F.kaldi_fbank, np.zeros(400, np.int32))
    expect(TypeError, ["waveform", "list"], F.kaldi_fbank, [[0.0] * 400])
    expect(ValueError, ["waveforms[1]", "index 7"], F.kaldi_fbank, [y, nan])
    expect(ValueError, ["waveform", "fewer than one frame", "snip_edges True"], F.kaldi_fbank, y[:300])
    assert F.kaldi_fbank(y[:300], snip_edges=False).shape == (2, 23)
    expect(TypeError, ["nmels", "num_mel_bins", "use_power"], F.kaldi_fbank, y, nmels=80)
    expect(TypeError, ["num_ceps", "num_mel_bins"], F.kaldi_fbank, y, num_ceps=13)
    expect(TypeError, ["snip_edges", "True or False"], F.kaldi_fbank, y, snip_edges=1)
    expect(TypeError, ["window_type"], F.kaldi_mfcc, y, window_type="hann")
    expect(ValueError, ["num_mel_bins"], F.kaldi_fbank, y, num_mel_bins=0)
    expect(ValueError, ["frame_shift"], F.kaldi_fbank, y, frame_shift=-10.0)
    expect(ValueError, ["num_ceps"], F.kaldi_mfcc, y, num_ceps=40, num_mel_bins=23)
    expect(ValueError, ["n_mels"], F.whisper_log_mel, y, n_mels=100)
    assert "use_power" in F.kaldi_option_names("fbank") and "num_ceps" in F.kaldi_option_names("mfcc")
    expect(ValueError, ["waveform", "index 7"], F.log_mel, nan)
    expect(ValueError, ["waveforms[1]", "empty"], F.log_mel, [y, np.zeros(0, np.float32)])
    expect(TypeError, ["hop", "hop_length", "top_db"], F.log_mel, y, hop=256)
    expect(TypeError, ["ref", "np.max"], F.log_mel, y, ref=np.max)
    expect(TypeError, ["center", "bool"], F.log_mel, y, center=1)
    expect(TypeError, ["n_fft", "int"], F.log_mel, y, n_fft=512.0)
    expect(ValueError, ["window", "hann"], F.log_mel, y, window="kaiser")
    expect(ValueError, ["norm", "slaney"], F.log_mel, y, norm="l2")
    expect(ValueError, ["fmax", "Nyquist"], F.log_mel, y, sr=16000, fmax=9000.0)
    expect(ValueError, ["fmin"], F.log_mel, y, fmin=500.0, fmax=400.0)
    expect(ValueError, ["win_length", "n_fft"], F.log_mel, y, n_fft=512, win_length=600)
    expect(ValueError, ["top_db"], F.log_mel, y, top_db=-1.0)
    expect(ValueError, ["sr"], F.log_mel, y, sr=0)
    expect(ValueError, ["waveform", "300 samples", "too few for one frame", "n_fft"],
           F.log_mel, y[:300], center=False, n_fft=512)
    assert F.log_mel(y[:3], n_fft=512, pad_mode="reflect").shape == (128, 1)
    assert F.log_mel_option_names()[:2] == ["sr", "n_fft"]


def batches(F, waves):
    for opts in ({}, dict(dither=1.0, num_mel_bins=40)):
        one = F.kaldi_fbank(waves, threads=1, seed=5, **opts)
        two = F.kaldi_fbank(waves, threads=2, seed=5, **opts)
        for i, (a, b) in enumerate(zip(one, two)):
            assert a.tobytes() == b.tobytes(), f"batch item {i} differs between 1 and 2 threads ({opts})"
        if not opts:
            for i, w in enumerate(waves):
                assert F.kaldi_fbank(w).tobytes() == one[i].tobytes(), f"batch item {i} is not its single call"
    lm = F.log_mel(waves, threads=2, sr=16000, n_fft=400, hop_length=160, n_mels=80)
    for i, w in enumerate(waves):
        single = F.log_mel(w, sr=16000, n_fft=400, hop_length=160, n_mels=80)
        assert single.tobytes() == lm[i].tobytes(), f"log_mel batch item {i}"
    whole = F.whisper_log_mel(waves, threads=2)
    for i, w in enumerate(waves):
        assert F.whisper_log_mel(w).tobytes() == whole[i].tobytes(), f"whisper batch item {i}"
    # float32 in place, float64 and int16 converted as a WAV decoder reads them.
    y16 = (waves[0] * 32768.0).astype(np.int16)
    as_f32 = (y16.astype(np.float32) / np.float32(32768.0)).astype(np.float32)
    assert F.kaldi_mfcc(y16).tobytes() == F.kaldi_mfcc(as_f32).tobytes()
    assert F.kaldi_mfcc(as_f32.astype(np.float64)).tobytes() == F.kaldi_mfcc(as_f32).tobytes()


def hf_adapter(F, waves, d):
    """melforge.hf.WhisperFeatureExtractor against transformers' own, called
    alike: the same keys, shapes, dtypes and masks; input_features within
    1e-4 and (do_normalize off) equal to whisper_log_mel bit for bit;
    padding="longest" left to transformers (equal); save and load."""
    from transformers import WhisperFeatureExtractor as Reference

    from melforge.hf import WhisperFeatureExtractor

    long = np.concatenate(waves)[: 16000 * 35]
    batch = [waves[0], waves[1], long]
    worst = 0.0
    for n_mels in (80, 128):
        for norm in (False, True):
            kw = dict(sampling_rate=16000, return_tensors="np", return_attention_mask=True, do_normalize=norm)
            want = Reference(feature_size=n_mels)(batch, **kw)
            got = WhisperFeatureExtractor(feature_size=n_mels, threads=2)(batch, **kw)
            assert sorted(got.keys()) == sorted(want.keys()), (got.keys(), want.keys())
            g, w = got["input_features"], want["input_features"]
            assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
            assert (got["attention_mask"] == want["attention_mask"]).all(), "attention masks differ"
            e = float(np.abs(g - w).max())
            assert e <= 1e-4, f"hf WhisperFeatureExtractor({n_mels}, do_normalize={norm}) differs by {e}"
            worst = max(worst, e)
            if not norm:
                for i, y in enumerate(batch):
                    assert g[i].tobytes() == F.whisper_log_mel(y, n_mels=n_mels).tobytes(), f"hf row {i}"
    kw = dict(sampling_rate=16000, return_tensors="np", padding="longest")
    want = Reference()(batch[:2], **kw)["input_features"]
    got = WhisperFeatureExtractor()(batch[:2], **kw)["input_features"]
    assert got.shape == want.shape and got.tobytes() == want.tobytes(), "padding='longest' is not transformers'"
    saved = os.path.join(d, "hf")
    WhisperFeatureExtractor(feature_size=128, threads=2).save_pretrained(saved)
    again = WhisperFeatureExtractor.from_pretrained(saved)
    assert type(again) is WhisperFeatureExtractor and again.feature_size == 128 and again.threads == 2
    assert Reference.from_pretrained(saved).feature_size == 128
    one = again(batch[0], sampling_rate=16000, return_tensors="np")["input_features"]
    assert one.shape == (1, 128, 3000) and one[0].tobytes() == F.whisper_log_mel(batch[0], n_mels=128).tobytes()
    return worst


def decode_check(F, files, d):
    """melforge.decode against librosa.load(sr=None, mono=True, offset=,
    duration=): WAV and FLAC bit for bit, MP3, Ogg Vorbis and Opus within
    1e-6 with the same length (libsndfile's decoders). With sr=, against
    librosa.load(sr=, res_type="soxr_hq"): the same libsoxr recipe and
    librosa's length, within RESAMPLE_TOL (python-soxr ships its own libsoxr
    build, so not necessarily bit for bit). M4A is left to
    scripts/parity_decoders.py (librosa reads it through audioread, which
    keeps the encoder's priming samples; melforge trims them as ffmpeg's
    edit list says). Bad bytes and arguments raise ValueError naming them."""
    import warnings

    import librosa

    flac = os.path.join(d, "speech0.flac")
    pr.run(["sox", files["speech0-16000"], flac])
    codecs = os.path.join(REPO, "tests", "data", "codecs")
    paths = [files[n] for n in ("speech0-16000", "speech1-44100", "stereo-44100", "short")] + [flac]
    paths += [os.path.join(codecs, f"speech{k}.{ext}") for k in ("16k_mono", "44k_stereo")
              for ext in ("mp3", "ogg", "opus")]
    # At the file's own rate (sr None), then converted: (sr, offset, duration).
    cases = [(None, 0.0, None), (None, 0.3, 0.7), (None, 0.25, None), (None, 0.0, 0.01),
             (8000, 0.0, None), (22050, 0.3, 0.7), (48000, 0.0, None)]
    worst = 0.0
    for path in paths:
        exact = path.endswith((".wav", ".flac"))
        for sr, offset, duration in cases:
            y, rate = F.decode(path, offset=offset, duration=duration, sr=sr)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                want, want_rate = librosa.load(path, sr=sr, mono=True, offset=offset, duration=duration)
            label = f"decode {os.path.basename(path)} sr {sr} offset {offset} duration {duration}"
            assert rate == want_rate and y.dtype == np.float32, f"{label}: {rate} Hz {y.dtype}"
            assert y.shape == want.shape, f"{label}: {y.shape} vs librosa's {want.shape}"
            if exact and sr is None:
                assert y.tobytes() == want.tobytes(), f"{label}: not librosa's samples"
            elif y.size:
                e = float(np.abs(y - want).max())
                tol = 1e-6 if sr is None else RESAMPLE_TOL
                assert e <= tol, f"{label}: differs from librosa by {e}"
                worst = max(worst, e)
    with open(paths[0], "rb") as f:
        data = f.read()
    assert F.decode(data)[0].tobytes() == F.decode(paths[0])[0].tobytes(), "bytes and path decode alike"
    expect(ValueError, ["data"], F.decode, b"RIFF\x04\x00\x00\x00WAVE")
    expect(ValueError, ["data"], F.decode, b"not audio at all" * 8)
    expect(ValueError, ["offset"], F.decode, data, offset=-1.0)
    expect(ValueError, ["duration"], F.decode, data, duration=float("nan"))
    expect(ValueError, ["sr"], F.decode, data, sr=0)
    expect(TypeError, ["sr"], F.decode, data, sr=8000.5)
    expect(TypeError, ["source"], F.decode, 12)
    return len(paths), worst


def random_log_mel(rng, rate):
    """A random draw of librosa's melspectrogram + power_to_db keywords."""
    n_fft = rng.choice([256, 400, 512, 1023, 1024, 2048])
    return dict(
        sr=rate,
        n_fft=n_fft,
        hop_length=rng.choice([None, 80, 160, 256, 512]),
        win_length=rng.choice([None, n_fft, n_fft * 3 // 4]),
        window=rng.choice(["hann", "hamming", "blackman", "boxcar"]),
        center=rng.random() < 0.7,
        pad_mode=rng.choice(["constant", "reflect"]),
        power=rng.choice([1.0, 1.5, 2.0]),
        n_mels=rng.choice([40, 64, 80, 128]) if n_fft >= 1000 else rng.choice([20, 40]),
        fmin=rng.choice([0.0, 20.0, 125.0]),
        fmax=rng.choice([None, rate / 2 * 0.9]),
        htk=rng.random() < 0.3,
        norm=rng.choice(["slaney", None]),
        ref=rng.choice([1.0, 1e-3]),
        amin=rng.choice([1e-10, 1e-5]),
        top_db=rng.choice([80.0, 40.0, None]),
    )


def librosa_log_mel(y, o):
    import librosa

    mel = {k: v for k, v in o.items() if k not in ("ref", "amin", "top_db")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # n_fft larger than the input, empty filters
        S = librosa.feature.melspectrogram(y=y, **mel)
    return librosa.power_to_db(S, ref=o["ref"], amin=o["amin"], top_db=o["top_db"])


def log_mel_config(path, o, samples):
    """The build's [mel] for librosa's keywords: segmentation off, a clip of
    exactly `samples` (so no padding or trimming)."""
    win = o["win_length"] or o["n_fft"]
    mel = dict(sample_rate=o["sr"], clip_seconds=samples / o["sr"], n_fft=o["n_fft"],
               hop_length=o["hop_length"] or win // 4, win_length=win, window=o["window"],
               center=o["center"], pad_mode=o["pad_mode"], power=o["power"], n_mels=o["n_mels"],
               fmin=o["fmin"], fmax=float(o["fmax"] or o["sr"] / 2),
               mel_scale="htk" if o["htk"] else "slaney", norm=o["norm"] or "none",
               ref=o["ref"], amin=o["amin"])
    if o["top_db"] is not None:
        mel["top_db"] = o["top_db"]
    lines = ["[input]", 'resample = "off"', "", "[features]", 'recipe = "librosa"', "", "[mel]"]
    lines += [f"{k} = {pr.toml_value(v)}" for k, v in mel.items()]
    lines += ["", "[segmentation]", "enabled = false"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def log_mel_rows(F, binary, files, rng, draws, d):
    """`log_mel` against librosa (1e-3 dB, docs/FORMAT.md's librosa
    tolerance) and bit for bit against the binary's librosa recipe with the
    segmentation off and a clip of the file's length; defaults and random
    draws at 8, 16 and 44.1 kHz, short files included."""
    from librosa.util.exceptions import ParameterError

    names = {r: [n for n in files if n.endswith(f"-{r}") and "stereo" not in n] for r in (8000, 16000, 44100)}
    names[16000] += ["short", "short-speech", "silence"]
    # {} is every default (22050 Hz: the 16 kHz files' samples, relabelled).
    cases = [{}, dict(sr=16000, n_fft=400, hop_length=160, n_mels=80)]
    cases += [random_log_mel(rng, rng.choice([8000, 16000, 44100])) for _ in range(draws)]
    defaults = dict(n_fft=2048, hop_length=512, win_length=None, window="hann", center=True,
                    pad_mode="constant", power=2.0, n_mels=128, fmin=0.0, fmax=None, htk=False,
                    norm="slaney", ref=1.0, amin=1e-10, top_db=80.0)
    cfg, out = os.path.join(d, "lm.toml"), os.path.join(d, "lm.npy")
    rows, worst = 0, 0.0
    for ci, opts in enumerate(cases):
        o = dict(dict(defaults, sr=22050), **opts)
        for name in names[16000 if o["sr"] == 22050 else o["sr"]]:
            label = f"log_mel case {ci} {opts} on {name}"
            y16, rate = sf.read(files[name], dtype="int16")
            path = files[name]
            if rate != o["sr"]:
                path = os.path.join(d, "relabelled.wav")
                sf.write(path, y16, o["sr"], subtype="PCM_16")
            y = (y16.astype(np.float32) / np.float32(32768.0)).astype(np.float32)
            try:
                ours = F.log_mel(y, **opts)
            except ValueError as err:
                assert "too few for one frame" in str(err), f"{label}: {err}"
                expect(ParameterError, [], librosa_log_mel, y, o)
                continue
            want = librosa_log_mel(y, o)
            assert ours.dtype == np.float32 and ours.shape == want.shape, f"{label}: {ours.shape} vs {want.shape}"
            e = float(np.abs(ours.astype(np.float64) - want).max())
            assert e <= 1e-3, f"{label}: {e} dB from librosa"
            worst = max(worst, e)
            log_mel_config(cfg, o, len(y))
            pr.run([binary, "features", path, "--config", cfg, "--out", out])
            cli = np.load(out)
            assert cli.size == ours.size, f"{label}: the binary's {cli.shape} vs {ours.shape}"
            assert ours.tobytes() == cli.tobytes(), f"{label}: not the binary's row bit for bit"
            rows += 1
    return len(cases), rows, worst


def build_rows(melforge, F, binary, d, mono16):
    """A build's stored rows equal the in-process rows of the same files."""
    src = os.path.join(d, "build-in")
    os.makedirs(src)
    for name, path in mono16.items():
        shutil.copy(path, os.path.join(src, name + ".wav"))
    checked = 0
    for recipe, call in (("kaldi-fbank", lambda y: F.kaldi_fbank(y, num_mel_bins=80)),
                         ("whisper", F.whisper_log_mel)):
        cfg, out = os.path.join(d, f"{recipe}.toml"), os.path.join(d, f"out-{recipe}")
        pr.write_config(cfg, recipe, dict(num_mel_bins=80) if recipe == "kaldi-fbank" else {})
        pr.run([binary, "build", src, "--out", out, "--config", cfg])
        for h5 in sorted(f for f in os.listdir(out) if f.endswith(".h5")):
            ds = melforge.MelDataset(os.path.join(out, h5))
            for i in range(len(ds)):
                stored, _ = ds[i]
                name = os.path.splitext(os.path.basename(ds.meta(i)["path"]))[0]
                y, _ = sf.read(mono16[name], dtype="int16")
                ours = call(y)
                assert ours.shape == stored.shape, f"{recipe} {name}: {ours.shape} vs stored {stored.shape}"
                assert ours.tobytes() == np.ascontiguousarray(stored, np.float32).tobytes(), \
                    f"{recipe} {name}: the in-process row is not the stored one"
                checked += 1
    return checked


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--melforge", required=True)
    ap.add_argument("--native", required=True)
    ap.add_argument("--draws", type=int, default=16)
    ap.add_argument("--seed", type=int, default=47)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    d = tempfile.mkdtemp(prefix="parity-features-")
    try:
        melforge, F = load_package(args.native, d)
        files = pr.make_corpus(d)
        by_rate = {16000: [n for n in files if n.endswith("-16000") and "stereo" not in n]
                   + ["silence", "short", "short-speech", "long-40s"],
                   8000: ["speech0-8000", "speech1-8000", "short8k"]}
        bad_inputs(F)
        waves = [sf.read(files[n], dtype="float32")[0] for n in by_rate[16000]]
        waves = [w for w in waves if len(w) >= 400]
        batches(F, waves)
        hf_worst = hf_adapter(F, waves, d)
        n_decoded, decode_worst = decode_check(F, files, d)
        mono16 = {n: files[n] for n in by_rate[16000] if n not in ("short", "short-speech")}
        stored = build_rows(melforge, F, args.melforge, d, mono16)
        lm_cases, lm_rows, lm_worst = log_mel_rows(F, args.melforge, files, rng, args.draws, d)
        cases = [("kaldi-fbank", dict(num_mel_bins=80)), ("kaldi-fbank", {}), ("kaldi-mfcc", {}),
                 ("kaldi-fbank", dict(num_mel_bins=80, sample_scale=32768.0, snip_edges=False, use_energy=True)),
                 ("whisper", dict(n_mels=80)), ("whisper", dict(n_mels=128))]
        for i in range(args.draws):
            recipe = "kaldi-fbank" if i % 2 == 0 else "kaldi-mfcc"
            cases.append((recipe, pr.random_kaldi(rng, recipe)))
        worst, rows = {}, 0
        cfg, out = os.path.join(d, "c.toml"), os.path.join(d, "x.npy")
        for ci, (recipe, opts) in enumerate(cases):
            pr.write_config(cfg, recipe, opts)
            rate = int(opts.get("sample_frequency", 16000.0))
            for name in by_rate[rate]:
                label = f"case {ci} {recipe} {opts} on {name}"
                y16, _ = sf.read(files[name], dtype="int16")
                y = (y16.astype(np.float32) / np.float32(32768.0)).astype(np.float32)
                pr.run([args.melforge, "features", files[name], "--config", cfg, "--out", out])
                cli = np.load(out)
                if recipe == "whisper":
                    ours = F.whisper_log_mel(y16, n_mels=opts["n_mels"])
                    want = pr.whisper_reference(opts["n_mels"], y)
                    e = float(np.abs(ours - want).max())
                    assert e <= 1e-4, f"{label}: differs from transformers by {e}"
                else:
                    call = F.kaldi_fbank if recipe == "kaldi-fbank" else F.kaldi_mfcc
                    try:
                        ours = call(y16, **opts)
                    except ValueError as err:
                        # A build rejects it as too_short; `features` writes 0 frames.
                        assert cli.shape[0] == 0, f"{label}: refused ({err}) but the binary made {cli.shape}"
                        assert "fewer than one frame" in str(err), f"{label}: {err}"
                        continue
                    e = pr.check_kaldi(label, recipe, opts, ours, pr.knf_reference(recipe, opts, y))
                assert ours.dtype == np.float32 and ours.shape == cli.shape, f"{label}: {ours.shape} vs {cli.shape}"
                assert ours.tobytes() == cli.tobytes(), f"{label}: not the binary's row bit for bit"
                worst[recipe] = max(worst.get(recipe, 0.0), e)
                rows += 1
        print(f"parity_features: {len(cases)} option sets, {rows} rows equal to the binary's bit for bit, "
              f"{stored} equal to a build's stored rows; worst against the references: {worst}; "
              f"melforge.hf.WhisperFeatureExtractor within {hf_worst:.2e} of transformers'; "
              f"melforge.decode on {n_decoded} files as librosa.load (lossy within {decode_worst:.1e}); "
              f"log_mel: {lm_cases} option sets, {lm_rows} rows equal to the binary's, "
              f"within {lm_worst:.1e} dB of librosa")
    finally:
        shutil.rmtree(d)


if __name__ == "__main__":
    pr.guarded(main, "parity_features")
